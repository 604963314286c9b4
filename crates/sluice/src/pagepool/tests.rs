//! Page pool tests: the buddy allocator, the provider, the pool's three paths,
//! fragment alignment and bounds, the page's way home, bad sizes, mbufs over
//! fragments. Every test ends with every block back in its provider.

use std::collections::BTreeMap;
use std::sync::mpsc;

use super::buddy::Buddy;
use super::*;
use crate::lcore;
use crate::mempool::HugepagePolicy;
use crate::test_support::{TestPool, assert_pool_full};

/// A provider of `size` bytes on plain pages.
fn test_provider(size: usize) -> BlockProvider {
    BlockProvider::new(ProviderConfig {
        name: "test".into(),
        size,
        hugepages: HugepagePolicy::Never,
    })
    .unwrap()
}

/// A page pool of blocks of `order` from `provider`, with a small cache and
/// ring.
fn page_pool(provider: &BlockProvider, order: u32, owner: Option<usize>) -> PagePool {
    PagePool::new(
        provider,
        PagePoolConfig {
            name: format!("pp{order}"),
            order,
            cache_size: 8,
            ring_size: 8,
            ring_batch: 1,
            owner,
        },
    )
    .unwrap()
}

// The generator the stress tests use.
#[path = "../../tests/common/rng.rs"]
mod rng;
use rng::Rng;

// ---- buddy ------------------------------------------------------------------

#[test]
fn buddy_cuts_an_odd_page_count_into_aligned_blocks() {
    // 1100 pages = 2 × 512 + 64 + 8 + 4.
    let buddy = Buddy::new(1100);
    buddy.check();
    let free = buddy.free_blocks();
    assert_eq!((free[9], free[6], free[3], free[2]), (2, 1, 1, 1));
    assert_eq!(free.iter().sum::<u32>(), 5);
}

#[test]
fn buddy_splits_on_alloc_and_merges_on_free() {
    let mut buddy = Buddy::new(512);
    let block = buddy.alloc(3).unwrap();
    assert_eq!(block, 0);
    assert_eq!(buddy.counts().splits, 6, "2 MiB down to 32 KiB");
    assert_eq!(buddy.free_blocks()[3..9], [1, 1, 1, 1, 1, 1]);
    buddy.check();
    assert_eq!(buddy.free(block), Some(3));
    assert_eq!(buddy.counts().merges, 6, "32 KiB back up to 2 MiB");
    assert_eq!(buddy.free_blocks()[9], 1);
    assert_eq!(
        buddy.free(block),
        None,
        "a second free of the same block is refused"
    );
    buddy.check();
}

#[test]
fn buddy_random_allocs_and_frees_keep_every_invariant() {
    let mut buddy = Buddy::new(1000);
    let mut rng = Rng(0x1234_5678);
    let mut held: Vec<(u32, u32)> = Vec::new();
    for step in 0..20_000 {
        if held.is_empty() || rng.below(3) != 0 {
            let order = rng.below(4) as u32;
            if let Some(block) = buddy.alloc(order) {
                assert_eq!(block % (1 << order), 0);
                held.push((block, order));
            }
        } else {
            let i = rng.below(held.len() as u64) as usize;
            let (block, order) = held.swap_remove(i);
            assert_eq!(buddy.free(block), Some(order));
        }
        if step % 997 == 0 {
            buddy.check();
        }
    }
    for (block, _) in held {
        buddy.free(block).unwrap();
    }
    buddy.check();
    assert_eq!(buddy.used_pages(), 0);
    assert_eq!(
        buddy.free_blocks(),
        Buddy::new(1000).free_blocks(),
        "merged back whole"
    );
}

// ---- provider ---------------------------------------------------------------

#[test]
fn provider_blocks_are_aligned_disjoint_and_counted() {
    let provider = test_provider(1 << 20);
    let base = provider.alloc(0).unwrap();
    let origin = base.as_ptr() as usize - base.iova() as usize;
    drop(base);
    let mut blocks: Vec<Block> = Vec::new();
    for order in [3, 0, 2, 1, 3, 0] {
        let mut b = provider.alloc(order).unwrap();
        assert_eq!(b.len(), 4096 << order);
        assert_eq!(b.order(), order);
        assert_eq!(b.as_ptr() as usize - origin, b.iova() as usize);
        assert_eq!(
            b.iova() % b.len() as u64,
            0,
            "aligned to its size in the region"
        );
        b.as_mut_slice().fill(order as u8 + 1);
        blocks.push(b);
    }
    for b in &blocks {
        let s = b.as_ptr() as usize;
        for o in &blocks {
            let t = o.as_ptr() as usize;
            assert!(std::ptr::eq(b, o) || s + b.len() <= t || t + o.len() <= s);
        }
    }
    let s = provider.stats();
    assert_eq!(s.allocs, [3, 1, 1, 2, 0]);
    assert_eq!(s.used_pages, 8 + 1 + 4 + 2 + 8 + 1);
    drop(blocks);
    let s = provider.stats();
    assert_eq!(s.frees, [3, 1, 1, 2, 0]);
    assert_pool_full(&provider);
    assert_eq!(s.free_blocks[8], 1, "1 MiB merged back into one block");
}

#[test]
fn provider_errors_name_the_problem() {
    let provider = test_provider(64 << 10);
    assert_eq!(
        provider.alloc(5).unwrap_err().to_string(),
        "block order 5 is not in 0..=4 (4 KiB..64 KiB)"
    );
    let a = provider.alloc(3).unwrap();
    let b = provider.alloc(3).unwrap();
    assert_eq!(
        provider.alloc(0).unwrap_err().to_string(),
        "block provider 'test' has no free block of order 0 (4 KiB)"
    );
    assert_eq!(provider.stats().failures, 1);
    drop((a, b));
    assert_pool_full(&provider);
    let e = BlockProvider::new(ProviderConfig {
        name: "zero".into(),
        size: 0,
        hugepages: HugepagePolicy::Never,
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "block provider 'zero': size 0 bytes is not in 1..=2^44"
    );
}

// ---- page pool --------------------------------------------------------------

#[test]
fn page_pool_config_errors_name_the_value() {
    let provider = test_provider(64 << 10);
    let bad = |cfg: PagePoolConfig| PagePool::new(&provider, cfg).unwrap_err().to_string();
    assert_eq!(
        bad(PagePoolConfig {
            order: 5,
            ..Default::default()
        }),
        "block order 5 is not in 0..=4 (4 KiB..64 KiB)"
    );
    assert_eq!(
        bad(PagePoolConfig {
            cache_size: 0,
            ..Default::default()
        }),
        "page pool 'page_pool': cache size 0 is not in 1..=4096"
    );
    assert_eq!(
        bad(PagePoolConfig {
            ring_size: 100,
            ..Default::default()
        }),
        "page pool 'page_pool': ring size 100 is not a power of two in 1..=65536"
    );
    assert_eq!(
        bad(PagePoolConfig {
            ring_batch: 0,
            ..Default::default()
        }),
        "page pool 'page_pool': ring batch 0 is not in 1..=1024 (the ring size)"
    );
    assert_eq!(
        bad(PagePoolConfig {
            ring_size: 8,
            ring_batch: 9,
            ..Default::default()
        }),
        "page pool 'page_pool': ring batch 9 is not in 1..=8 (the ring size)"
    );
    assert_eq!(
        bad(PagePoolConfig {
            owner: Some(128),
            ..Default::default()
        }),
        "page pool 'page_pool': owner lcore 128 is not below 128"
    );
    assert!(provider.is_full());
}

#[test]
fn owner_uses_the_direct_cache_others_the_ring_and_a_full_ring_releases() {
    let provider = test_provider(1 << 20);
    let pp = page_pool(&provider, 0, None);
    let pp2 = pp.clone();
    std::thread::spawn(move || {
        let _l = lcore::register().unwrap();
        pp2.bind_to_current_lcore().unwrap();
        assert_eq!(
            std::thread::spawn({
                let pp3 = pp2.clone();
                move || pp3.bind_to_current_lcore().unwrap_err().to_string()
            })
            .join()
            .unwrap(),
            "page pool 'pp0': the calling thread is not an lcore"
        );
        // Owner: slow path once, then the cache.
        let a = pp2.alloc_page().unwrap();
        drop(a);
        let b = pp2.alloc_page().unwrap();
        let s = pp2.stats();
        assert_eq!((s.alloc_slow, s.recycle_fast, s.alloc_fast), (1, 1, 1));
        // Twenty pages out, then back: 8 fill the cache, 8 the ring (the
        // owner's overflow), the rest are released to the provider.
        let mut v: Vec<Page> = (0..19).map(|_| pp2.alloc_page().unwrap()).collect();
        v.push(b);
        assert_eq!(pp2.stats().in_flight, 20);
        drop(v);
        let s = pp2.stats();
        assert_eq!((s.cached, s.in_ring, s.released, s.in_flight), (8, 8, 4, 0));
        // The next gets drain the cache, then refill it from the ring.
        let v: Vec<Page> = (0..12).map(|_| pp2.alloc_page().unwrap()).collect();
        let s = pp2.stats();
        assert_eq!((s.alloc_ring, s.in_ring, s.cached), (4, 4, 0));
        // Returned from a thread that is not the owner: the ring.
        std::thread::spawn(move || drop(v)).join().unwrap();
        let s = pp2.stats();
        assert_eq!((s.in_ring, s.released, s.cached), (8, 12, 0));
        assert!(pp2.all_home());
        assert_eq!(pp2.release_cached(), 8);
        // Another lcore cannot take the pool over.
        let pp4 = pp2.clone();
        let e = std::thread::spawn(move || {
            let _l = lcore::register().unwrap();
            pp4.bind_to_current_lcore().unwrap_err().to_string()
        })
        .join()
        .unwrap();
        assert!(e.starts_with("page pool 'pp0' is owned by lcore "), "{e}");
    })
    .join()
    .unwrap();
    assert!(pp.all_home());
    drop(pp);
    assert_pool_full(&provider);
}

/// A pool of order-`order` pages with a ring batch of `batch`.
fn batch_pool(provider: &BlockProvider, order: u32, batch: u32) -> PagePool {
    PagePool::new(
        provider,
        PagePoolConfig {
            name: "batch".into(),
            order,
            cache_size: 8,
            ring_size: 8,
            ring_batch: batch,
            owner: None,
        },
    )
    .unwrap()
}

#[test]
fn the_owner_refills_from_the_ring_only_once_a_batch_waits() {
    let provider = test_provider(1 << 20);
    let pp = batch_pool(&provider, 0, 4);
    let pp2 = pp.clone();
    std::thread::spawn(move || {
        let _l = lcore::register().unwrap();
        pp2.bind_to_current_lcore().unwrap();
        let mut v: Vec<Page> = (0..4).map(|_| pp2.alloc_page().unwrap()).collect();
        // Three come back from another thread: fewer than a batch, so the
        // owner's next get takes a fresh page from the provider.
        let three: Vec<Page> = v.drain(..3).collect();
        std::thread::spawn(move || drop(three)).join().unwrap();
        let x = pp2.alloc_page().unwrap();
        let s = pp2.stats();
        assert_eq!((s.alloc_slow, s.alloc_ring, s.in_ring), (5, 0, 3), "{s:?}");
        // The fourth makes a batch: the next get moves all four (a refill,
        // half the cache) into the cache and takes one.
        std::thread::spawn(move || drop(v)).join().unwrap();
        let y = pp2.alloc_page().unwrap();
        let s = pp2.stats();
        assert_eq!(
            (s.alloc_slow, s.alloc_ring, s.in_ring, s.cached),
            (5, 4, 0, 3),
            "{s:?}"
        );
        drop((x, y)); // the owner's: into the cache
        let s = pp2.stats();
        assert_eq!((s.cached, s.in_flight), (5, 0), "{s:?}");
    })
    .join()
    .unwrap();
    drop(pp);
    assert_pool_full(&provider);
}

#[test]
fn with_the_provider_empty_the_owner_takes_fewer_than_a_batch() {
    // Two blocks of 32 KiB.
    let provider = test_provider(64 << 10);
    let pp = batch_pool(&provider, 3, 4);
    let pp2 = pp.clone();
    std::thread::spawn(move || {
        let _l = lcore::register().unwrap();
        pp2.bind_to_current_lcore().unwrap();
        let a = pp2.alloc_page().unwrap();
        let b = pp2.alloc_page().unwrap();
        assert_eq!(
            pp2.alloc_page().unwrap_err().to_string(),
            "block provider 'test' has no free block of order 3 (32 KiB)"
        );
        let ba = b.as_ptr();
        std::thread::spawn(move || drop(b)).join().unwrap();
        // One page in the ring, a batch is four, the provider has none: the
        // owner takes the one.
        let c = pp2.alloc_page().unwrap();
        assert_eq!(c.as_ptr(), ba);
        let s = pp2.stats();
        assert_eq!(
            (s.alloc_slow, s.alloc_ring, s.in_flight),
            (2, 1, 2),
            "{s:?}"
        );
        drop((a, c));
    })
    .join()
    .unwrap();
    assert!(pp.all_home());
    drop(pp);
    assert_pool_full(&provider);
}

#[test]
fn a_pool_dropped_with_pages_out_stays_valid_for_them() {
    let provider = test_provider(256 << 10);
    let pp = page_pool(&provider, 1, None);
    let mut page = pp.alloc_page().unwrap();
    drop(pp); // leaks the pool: the page still refers to it
    page.as_mut_slice().fill(7);
    drop(page); // back into the leaked pool's ring
    assert!(!provider.is_full(), "the leaked pool keeps its page");
}

// ---- fragments --------------------------------------------------------------

/// Allocates random sizes, keeps a random subset alive, and checks that
/// every fragment is aligned, inside one page, disjoint from every other live
/// one, and keeps its bytes.
fn check_alignment_and_bounds(mut alloc: impl FnMut(usize) -> Frag, page: usize, seed: u64) {
    let mut rng = Rng(seed);
    let mut live: BTreeMap<usize, (Frag, u8)> = BTreeMap::new();
    for i in 0..4000u32 {
        let size = match rng.below(4) {
            0 => 1 + rng.below(page as u64) as usize,
            1 => 2090,
            2 => 1 + rng.below(128) as usize,
            _ => page,
        };
        let mut f = alloc(size);
        let a = f.as_ptr() as usize;
        assert_eq!(f.len(), size);
        assert_eq!(a % FRAG_ALIGN, 0, "fragment at {a:#x} not aligned");
        let pa = f.page_addr() as usize;
        assert!(
            a >= pa && a + size <= pa + page,
            "fragment outside its page"
        );
        assert_eq!(f.iova() % FRAG_ALIGN as u64, 0);
        if let Some((_, (prev, _))) = live.range(..a + size).next_back() {
            assert!(prev.as_ptr() as usize + prev.len() <= a, "overlap");
        }
        let tag = i as u8;
        f.as_mut_slice().fill(tag);
        live.insert(a, (f, tag));
        // Free one at random now and then, and always past 64 live.
        while live.len() > 64 || (rng.below(2) == 0 && !live.is_empty()) {
            let k = *live
                .keys()
                .nth(rng.below(live.len() as u64) as usize)
                .unwrap();
            let (f, tag) = live.remove(&k).unwrap();
            assert!(
                f.as_slice().iter().all(|&b| b == tag),
                "fragment bytes changed"
            );
        }
    }
    for (f, tag) in live.into_values() {
        assert!(
            f.as_slice().iter().all(|&b| b == tag),
            "fragment bytes changed"
        );
    }
}

#[test]
fn page_pool_fragments_are_aligned_in_bounds_and_disjoint() {
    let provider = test_provider(8 << 20);
    for order in [0, 3] {
        let pp = page_pool(&provider, order, None);
        let mut fa = PageFragAlloc::new(pp.clone());
        check_alignment_and_bounds(
            |s| fa.alloc_frag(s).unwrap(),
            4096 << order,
            7 + order as u64,
        );
        drop(fa);
        assert!(pp.all_home());
    }
    assert!(provider.is_full());
}

#[cfg(feature = "bench-baselines")]
#[test]
fn frag_cache_fragments_are_aligned_in_bounds_and_disjoint() {
    let provider = test_provider(8 << 20);
    let mut fc = PageFragCache::new(&provider, 3).unwrap();
    check_alignment_and_bounds(|s| fc.alloc_frag(s).unwrap(), 32768, 99);
    drop(fc);
    assert!(provider.is_full());
}

/// What a fragment says of itself, its address made an offset in its
/// provider (two allocators over twin providers compare equal).
fn frag_seen(f: &Frag) -> (u64, usize, u32) {
    (f.iova(), f.len(), f.page_target())
}

#[test]
fn cutting_runs_gives_what_one_at_a_time_gives() {
    // Twin providers and pools: one allocator cuts runs (`alloc_frags`),
    // the other one fragment per call; random sizes and counts, random
    // frees of the same fragments on both sides. Every fragment, the pools'
    // counters and the pages' way home must match.
    let mut rng = Rng(0x5eed_f4a9);
    let (pa, pb) = (test_provider(8 << 20), test_provider(8 << 20));
    let (ppa, ppb) = (page_pool(&pa, 3, None), page_pool(&pb, 3, None));
    let (mut fa, mut fb) = (
        PageFragAlloc::new(ppa.clone()),
        PageFragAlloc::new(ppb.clone()),
    );
    let mut held: Vec<(Frag, Frag)> = Vec::new();
    for step in 0..3000 {
        let size = match rng.below(5) {
            0 => 1 + rng.below(32768) as usize,
            1 | 2 => 2094,
            3 => 8590,
            _ => 1 + rng.below(300) as usize,
        };
        let n = rng.below(40) as usize;
        let mut runs = Vec::new();
        fa.alloc_frags(size, n, |f| runs.push(f)).unwrap();
        assert_eq!(runs.len(), n, "step {step}");
        for f in runs {
            let g = fb.alloc_frag(size).unwrap();
            assert_eq!(frag_seen(&f), frag_seen(&g), "step {step}, size {size}");
            held.push((f, g));
        }
        while held.len() > 200 || (rng.below(3) == 0 && !held.is_empty()) {
            let k = rng.below(held.len() as u64) as usize;
            drop(held.swap_remove(k));
        }
        assert_eq!(ppa.stats(), ppb.stats(), "step {step}");
    }
    // A bad size is refused either way, with nothing handed out.
    let mut got = 0;
    assert_eq!(
        fa.alloc_frags(0, 3, |_| got += 1).unwrap_err(),
        fb.alloc_frag(0).unwrap_err()
    );
    assert_eq!(got, 0);
    drop(held);
    drop((fa, fb));
    assert!(ppa.all_home() && ppb.all_home());
    drop((ppa, ppb));
    assert!(pa.is_full() && pb.is_full());
}

#[test]
fn a_run_whose_consumer_panics_gives_back_what_it_did_not_hand_out() {
    let provider = test_provider(1 << 20);
    let pp = page_pool(&provider, 3, None);
    let mut fa = PageFragAlloc::new(pp.clone());
    let mut kept = Vec::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fa.alloc_frags(2094, 12, |f| {
            if kept.len() == 5 {
                panic!("consumer fails");
            }
            kept.push(f);
        })
    }));
    assert!(r.is_err());
    assert_eq!(kept.len(), 5);
    // The allocator goes on from where the run ended: a fragment after the
    // twelve cut, on the same page.
    let next = fa.alloc_frag(2094).unwrap();
    assert_eq!(
        next.as_ptr() as usize - kept[0].as_ptr() as usize,
        12 * 2112
    );
    drop((kept, next, fa));
    // Every reference came back once: the page is home, nothing lost.
    assert!(pp.all_home(), "{:?}", pp.stats());
    drop(pp);
    assert!(provider.is_full());
}

#[test]
fn a_pool_out_of_pages_stops_a_run_with_what_it_cut_handed_out() {
    // Room for two 32 KiB pages: 30 fragments of 2094 bytes, then an error.
    let provider = test_provider(64 << 10);
    let pp = page_pool(&provider, 3, None);
    let mut fa = PageFragAlloc::new(pp.clone());
    let mut got = Vec::new();
    let e = fa.alloc_frags(2094, 40, |f| got.push(f)).unwrap_err();
    assert!(matches!(e, PagePoolError::Exhausted { .. }), "{e}");
    assert_eq!(got.len(), 30);
    drop((got, fa));
    assert!(pp.all_home());
    drop(pp);
    assert!(provider.is_full());
}

#[cfg(feature = "bench-baselines")]
#[test]
fn bad_fragment_sizes_are_errors() {
    let provider = test_provider(1 << 20);
    let pp = page_pool(&provider, 3, None);
    let mut fa = PageFragAlloc::new(pp.clone());
    let mut fc = PageFragCache::new(&provider, 2).unwrap();
    assert_eq!(
        fa.alloc_frag(0).unwrap_err().to_string(),
        "fragment size 0 is not in 1..=32768 (the page size)"
    );
    assert_eq!(
        fa.alloc_frag(32769).unwrap_err(),
        PagePoolError::BadSize {
            size: 32769,
            max: 32768
        }
    );
    assert_eq!(
        fc.alloc_frag(0).unwrap_err().to_string(),
        "fragment size 0 is not in 1..=16384 (the page size)"
    );
    assert_eq!(
        fc.alloc_frag(16385).unwrap_err().to_string(),
        "fragment size 16385 is not in 1..=16384 (the page size)"
    );
    assert_eq!(
        fa.alloc_frag(usize::MAX).unwrap_err().to_string(),
        format!(
            "fragment size {} is not in 1..=32768 (the page size)",
            usize::MAX
        )
    );
    assert_eq!(
        PageFragCache::new(&provider, 5).unwrap_err().to_string(),
        "block order 5 is not in 0..=4 (4 KiB..64 KiB)"
    );
    // Nothing was taken by the failures, and a good size still works.
    assert_eq!(provider.stats().used_pages, 0);
    assert_eq!(fa.alloc_frag(32768).unwrap().len(), 32768);
    drop((fa, fc, pp));
    assert!(provider.is_full());
}

#[test]
fn fifteen_fragments_per_page_at_mtu_1500_and_three_at_8000() {
    let provider = test_provider(2 << 20);
    let pp = page_pool(&provider, 3, None);
    for (size, per_page) in [(2090, 15), (8590, 3)] {
        let mut fa = PageFragAlloc::new(pp.clone());
        let before = pp.stats().alloc_slow + pp.stats().alloc_ring;
        let held: Vec<Frag> = (0..per_page * 4)
            .map(|_| fa.alloc_frag(size).unwrap())
            .collect();
        let pages = pp.stats().alloc_slow + pp.stats().alloc_ring - before;
        assert_eq!(pages, 4, "{size}-byte fragments");
        drop((held, fa));
        assert!(pp.all_home());
    }
    assert_eq!(FragLayout::for_mtu(1500).stride(), 1792);
    assert_eq!(FragLayout::for_mtu(8000).stride(), 8320);
    drop(pp);
    assert!(provider.is_full());
}

#[cfg(feature = "bench-baselines")]
#[test]
fn a_page_whose_fragments_are_all_free_is_carved_again_in_place() {
    let provider = test_provider(1 << 20);
    let mut fc = PageFragCache::new(&provider, 3).unwrap();
    // Target 15 (2090-byte fragments); ten cut, then freed.
    let first: Vec<Frag> = (0..10).map(|_| fc.alloc_frag(2090).unwrap()).collect();
    assert_eq!(first[9].page_target(), 15);
    let page = first[0].page_addr();
    drop(first);
    // 20000 bytes do not fit in what is left: the five never cut are given
    // back, which makes the cache the last holder, so the block starts over.
    let f = fc.alloc_frag(20000).unwrap();
    assert_eq!(f.page_addr(), page);
    assert_eq!(f.page_target(), 1);
    assert_eq!(provider.stats().allocs[3], 1);
    // Its target reached, the cache holds no reference: the block goes home
    // with its last fragment, and the cache never touches it again.
    drop(f);
    assert_eq!(provider.stats().used_pages, 0);
    drop(fc);
    assert!(provider.is_full());
}

#[test]
fn the_last_free_on_another_thread_sends_the_page_home_once() {
    let provider = test_provider(1 << 20);
    let pp = page_pool(&provider, 3, None);
    let mut fa = PageFragAlloc::new(pp.clone());
    let (tx, rx) = mpsc::channel::<Frag>();
    let t = std::thread::spawn(move || {
        let mut n = 0;
        for mut f in rx {
            f.as_mut_slice()[0] = 1;
            n += 1;
        }
        n
    });
    for _ in 0..150 {
        tx.send(fa.alloc_frag(2090).unwrap()).unwrap();
    }
    drop((tx, fa));
    assert_eq!(t.join().unwrap(), 150);
    let s = pp.stats();
    // Every page home exactly once: a page sent home twice would show as one
    // more page in the ring or released than were ever taken.
    assert_eq!(s.in_ring + s.released + s.cached, s.alloc_slow, "{s:?}");
    assert_eq!(s.in_flight, 0);
    // 150 fragments of 2112 bytes: ten pages' worth (fewer pages when one was
    // carved again in place, its fragments all freed in time).
    assert!((1..=10).contains(&(s.alloc_slow + s.alloc_ring)), "{s:?}");
    drop(pp);
    assert!(provider.is_full());
}

// ---- bulk free --------------------------------------------------------------

/// A pool of order-3 pages and 45 fragments of 2090 bytes cut from it:
/// three pages of 15, every one cut.
fn three_pages_cut() -> (BlockProvider, PagePool, PageFragAlloc, Vec<Frag>) {
    let provider = test_provider(2 << 20);
    let pp = page_pool(&provider, 3, None);
    let mut fa = PageFragAlloc::new(pp.clone());
    let v: Vec<Frag> = (0..45).map(|_| fa.alloc_frag(2090).unwrap()).collect();
    assert_eq!(pp.stats().alloc_slow, 3);
    (provider, pp, fa, v)
}

#[test]
fn bulk_free_gives_a_run_back_in_one_update_and_each_page_home_once() {
    let (provider, pp, fa, mut v) = three_pages_cut();
    let mut bulk = BulkFree::new();
    // The first page's 15 as one run: nothing goes home before the flush
    // (or the next page's first fragment) ends it.
    v.drain(..15).for_each(|f| bulk.free_frag(f));
    assert_eq!(pp.stats().in_ring, 0);
    // A fragment of the second page ends the run: the first page's count
    // reaches its target and the page goes to the stash, not yet home.
    bulk.free_frag(v.remove(0));
    let s = pp.stats();
    assert_eq!((s.in_ring, s.in_flight), (0, 3), "{s:?}");
    bulk.flush();
    assert_eq!(pp.stats().in_ring, 1, "the stash went home at the flush");
    // The rest in a shuffled order: runs of one, a page home once each.
    let mut rng = Rng(7);
    while !v.is_empty() {
        let k = rng.below(v.len() as u64) as usize;
        bulk.free_frag(v.swap_remove(k));
    }
    drop(bulk); // flushes
    let s = pp.stats();
    assert_eq!((s.in_ring, s.released, s.in_flight), (3, 0, 0), "{s:?}");
    drop((fa, pp));
    assert_pool_full(&provider);
}

#[test]
fn bulk_free_of_pages_fills_the_cache_then_the_ring_then_releases() {
    let provider = test_provider(2 << 20);
    let pp = PagePool::new(
        &provider,
        PagePoolConfig {
            name: "bulk".into(),
            order: 0,
            cache_size: 4,
            ring_size: 4,
            ring_batch: 1,
            owner: None,
        },
    )
    .unwrap();
    let pp2 = pp.clone();
    std::thread::spawn(move || {
        let _l = lcore::register().unwrap();
        pp2.bind_to_current_lcore().unwrap();
        let v: Vec<Page> = (0..12).map(|_| pp2.alloc_page().unwrap()).collect();
        let mut bulk = BulkFree::new();
        v.into_iter().for_each(|pg| bulk.free_page(pg));
        assert_eq!(pp2.stats().in_flight, 12, "stashed, not home yet");
        bulk.flush();
        let s = pp2.stats();
        // One bulk put on the owner: 4 into the cache, 4 onto the ring, 4
        // released.
        assert_eq!(
            (s.cached, s.recycle_fast, s.in_ring, s.released, s.in_flight),
            (4, 4, 4, 4, 0),
            "{s:?}"
        );
        // A stash of more than PAGE_BULK pages goes home in several puts.
        let n = PAGE_BULK + 3;
        let v: Vec<Page> = (0..n).map(|_| pp2.alloc_page().unwrap()).collect();
        std::thread::spawn(move || {
            let mut bulk = BulkFree::new();
            v.into_iter().for_each(|pg| bulk.free_page(pg));
        })
        .join()
        .unwrap();
        assert!(pp2.all_home());
    })
    .join()
    .unwrap();
    drop(pp);
    assert!(provider.is_full());
}

#[cfg(feature = "bench-baselines")]
#[test]
fn bulk_free_mixes_pools_and_frag_cache_blocks() {
    let provider = test_provider(4 << 20);
    let (pa, pb) = (page_pool(&provider, 3, None), page_pool(&provider, 1, None));
    let mut fa = PageFragAlloc::new(pa.clone());
    let mut fc = PageFragCache::new(&provider, 3).unwrap();
    let mut bulk = BulkFree::new();
    let mut rng = Rng(11);
    for _ in 0..2000 {
        match rng.below(3) {
            0 => bulk.free_frag(fa.alloc_frag(1 + rng.below(9000) as usize).unwrap()),
            1 => bulk.free_frag(fc.alloc_frag(1 + rng.below(9000) as usize).unwrap()),
            _ => bulk.free_page(pb.alloc_page().unwrap()),
        }
        if rng.below(50) == 0 {
            bulk.flush();
        }
    }
    drop((bulk, fa, fc));
    assert!(pa.all_home() && pb.all_home());
    drop((pa, pb));
    assert!(provider.is_full());
}

/// 45 fragments (three pages of 15); `k` of them go to a `BulkFree` that is
/// then forgotten, the rest are dropped one by one. What the context held
/// (its run's references, its stash) is leaked, never given back twice:
/// exactly the pages it held stay out, every other page is home once.
fn check_forgotten_bulk_free(k: usize, pages_held: u64) {
    let (provider, pp, fa, mut v) = three_pages_cut();
    let mut bulk = BulkFree::new();
    v.drain(..k).for_each(|f| bulk.free_frag(f));
    std::mem::forget(bulk);
    drop(v);
    drop(fa);
    let s = pp.stats();
    assert_eq!(s.in_flight, pages_held, "k = {k}: {s:?}");
    assert_eq!(s.in_ring + s.cached + s.released, 3 - pages_held, "{s:?}");
    assert_eq!(pp.all_home(), pages_held == 0);
    drop(pp);
    assert_eq!(provider.is_full(), pages_held == 0);
}

#[test]
fn a_forgotten_bulk_free_leaks_what_it_held_and_frees_nothing_twice() {
    // Nothing; a run of one; a whole page's run; a page stashed and a run
    // of one on the next page.
    for (k, held) in [(0, 0), (1, 1), (15, 1), (16, 2)] {
        check_forgotten_bulk_free(k, held);
    }
}

/// A direct cache emptied into a callback that panics at its second page:
/// the page handed over is no longer in the stack, the rest still are, and
/// a second drain hands out exactly those.
#[test]
fn a_direct_cache_drain_that_panics_hands_no_page_out_twice() {
    let cache = super::cache::DirectCache::new(4);
    let pushes = crate::counter::Counter::new();
    for a in [0x1000, 0x2000, 0x3000] {
        // SAFETY: this thread is the stack's only user.
        assert!(unsafe { cache.push(a, &pushes) });
    }
    let mut out = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: as above.
        unsafe {
            cache.drain(|a| {
                out.push(a);
                assert!(out.len() < 2, "the callback panics at page {a:#x}");
            })
        }
    }));
    assert!(result.is_err());
    assert_eq!(out.len(), 2);
    assert_eq!(
        cache.len(),
        1,
        "the page being handed over left the stack first"
    );
    // SAFETY: as above.
    unsafe { cache.drain(|a| out.push(a)) };
    out.sort_unstable();
    assert_eq!(out, [0x1000, 0x2000, 0x3000], "each page once");
    assert_eq!(cache.len(), 0);
}

// ---- mbufs over fragments ---------------------------------------------------

#[test]
fn an_mbuf_over_a_fragment_gives_it_back_with_its_last_reference() {
    let provider = test_provider(1 << 20);
    let pp = page_pool(&provider, 3, None);
    let mut fa = PageFragAlloc::new(pp.clone());
    let headers = TestPool::new(63).headroom(0).data_room(64).build();
    let layout = FragLayout::for_mtu(1500);
    assert_eq!(layout.frag_size(), 256 + 1518);
    let mut m = headers.alloc().unwrap();
    let frag = fa.alloc_frag(layout.frag_size()).unwrap();
    let (addr, iova) = (frag.as_ptr(), frag.iova());
    attach_frag(&mut m, frag, layout).unwrap();
    assert!(m.has_extbuf());
    assert_eq!(m.headroom(), 256);
    assert_eq!(m.data_iova(), iova + 256);
    m.append(1518).unwrap().fill(0xab);
    assert_eq!(m.data().as_ptr(), addr.wrapping_add(256).cast_const());
    assert!(
        m.append(1).is_err(),
        "the data room ends with the largest frame"
    );
    let c = m.clone();
    drop(m);
    assert_eq!(pp.stats().in_flight, 1);
    assert!(c.data().iter().all(|&b| b == 0xab));
    // A fragment too short for its layout comes back with the error.
    let short = fa.alloc_frag(1000).unwrap();
    let mut m2 = headers.alloc().unwrap();
    let (e, short) = attach_frag(&mut m2, short, layout).unwrap_err();
    assert_eq!(
        e.to_string(),
        "fragment of 1000 bytes is shorter than its layout's 1774"
    );
    drop((short, m2, c, fa));
    assert_pool_full(&headers);
    assert!(pp.all_home());
    drop(pp);
    assert!(provider.is_full());
}

/// Counts the calls of [`counted_ext_free`].
static OTHER_EXT_FREED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The free callback of an external buffer that is not a fragment: counts.
fn counted_ext_free(_buf: std::ptr::NonNull<u8>, _opaque: *mut ()) {
    OTHER_EXT_FREED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn a_burst_free_gives_fragments_back_a_run_per_page_and_each_page_home_once() {
    use crate::mbuf::{Burst, ExtSharedInfo};
    let provider = test_provider(2 << 20);
    let pp = page_pool(&provider, 3, None);
    let mut fa = PageFragAlloc::new(pp.clone());
    let headers = TestPool::new(127).headroom(0).data_room(64).build();
    let layout = FragLayout::for_mtu(1500);
    // Three pages of 15: the first two whole, in order, then the third's
    // interleaved with a plain mbuf and one over another external buffer.
    let mut burst: Burst<64> = Burst::new();
    let mut kept = None;
    for i in 0..45 {
        let mut m = headers.alloc().unwrap();
        attach_frag(&mut m, fa.alloc_frag(layout.frag_size()).unwrap(), layout).unwrap();
        if i == 40 {
            // A clone outlives the burst: its fragment stays out.
            kept = Some(m.clone());
        }
        burst.push(m).unwrap();
        if i >= 30 && i % 5 == 0 {
            burst.push(headers.alloc().unwrap()).unwrap();
        }
    }
    let mut buf = [0u8; 64];
    // SAFETY: the callback only counts; the info and the buffer outlive
    // every mbuf attached (they live until the end of the test).
    let info = unsafe { ExtSharedInfo::new(counted_ext_free, std::ptr::null_mut()) };
    let mut other = headers.alloc().unwrap();
    // SAFETY: as above.
    unsafe {
        other
            .attach_extbuf(
                std::ptr::NonNull::new(buf.as_mut_ptr()).unwrap(),
                0,
                64,
                0,
                std::ptr::NonNull::from(&info),
            )
            .unwrap();
    }
    burst.push(other).unwrap();
    assert_eq!(burst.len(), 45 + 3 + 1);
    let before = OTHER_EXT_FREED.load(std::sync::atomic::Ordering::SeqCst);
    drop(fa); // the allocator's own hold on the last page ends
    burst.clear();
    assert_eq!(
        OTHER_EXT_FREED.load(std::sync::atomic::Ordering::SeqCst),
        before + 1,
        "the other external buffer's callback ran once"
    );
    let s = pp.stats();
    assert_eq!((s.in_ring, s.in_flight), (2, 1), "{s:?}");
    // The kept clone's fragment is the third page's last reference.
    assert_eq!(headers.stats().in_use, 1);
    drop(kept);
    let s = pp.stats();
    assert_eq!((s.in_ring, s.in_flight), (3, 0), "{s:?}");
    assert_pool_full(&headers);
    drop(pp);
    assert!(provider.is_full());
}

#[test]
fn each_page_starts_its_fragments_at_its_own_colour_within_what_they_leave_over() {
    let provider = test_provider(2 << 20);
    let pp = page_pool(&provider, 3, None);
    let mut fa = PageFragAlloc::new(pp.clone());
    // 15 fragments of 2112 bytes leave 1088 bytes of a 32 KiB page: 17
    // lines, so 18 colours: the page's number (IO address over 32 KiB)
    // modulo 18.
    let frags: Vec<Frag> = (0..15 * 20).map(|_| fa.alloc_frag(2090).unwrap()).collect();
    let colour_of = |f: &Frag| ((f.iova() as usize & !32767) / 32768) % 18;
    let mut colours = std::collections::BTreeSet::new();
    for page in frags.chunks(15) {
        let base = page[0].page_addr() as usize;
        for (k, f) in page.iter().enumerate() {
            assert_eq!(f.page_addr() as usize, base, "15 to a page");
            assert_eq!(
                f.as_ptr() as usize - base,
                colour_of(&page[0]) * FRAG_ALIGN + k * 2112
            );
            assert!(f.as_ptr() as usize + 2090 <= base + 32768);
        }
        colours.insert(colour_of(&page[0]));
    }
    assert_eq!(colours.len(), 18, "20 pages in a row take every colour");
    assert_eq!(pp.stats().alloc_slow, 20);
    // The offsets follow from the page's IO address alone, so a page recycled
    // and cut again for the same size has its fragments where they were.
    drop((frags, fa));
    assert!(pp.all_home());
    drop(pp);
    assert!(provider.is_full());
}
