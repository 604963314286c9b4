//! Loom models of the fragment count and the page's way home.
//!
//! A page's last reference can be given back by any of its fragments, on any
//! thread, or by the allocator leaving the page with fragments it never cut;
//! exactly one of them must send the page home. The models race those
//! against each other and check, in every interleaving, that the page went
//! home exactly once (a page counted twice shows as more pages home than were
//! ever taken from the provider), that the owner's direct cache is only ever
//! touched by the owner (loom's cell tracking), and that nothing is left
//! out at the end.

use super::*;
use crate::lcore::{self, LcoreGuard};
use crate::mempool::HugepagePolicy;
use crate::test_support::assert_pool_full;

/// 16 pages of 4 KiB: two blocks of 32 KiB.
fn test_provider() -> BlockProvider {
    BlockProvider::new(ProviderConfig {
        name: "loom".into(),
        size: 64 << 10,
        hugepages: HugepagePolicy::Never,
    })
    .unwrap()
}

/// A fresh provider, the calling thread registered as an lcore, and a pool
/// of 32 KiB pages on the provider owned by that lcore, with a ring of 2 and
/// the given direct cache size and ring batch.
fn owned_order3_pool(cache_size: u32, ring_batch: u32) -> (BlockProvider, LcoreGuard, PagePool) {
    let provider = test_provider();
    let lcore = lcore::register().unwrap();
    let pool = PagePool::new(
        &provider,
        PagePoolConfig {
            name: "loom".into(),
            order: 3,
            cache_size,
            ring_size: 2,
            ring_batch,
            owner: lcore::current(),
        },
    )
    .unwrap();
    (provider, lcore, pool)
}

/// Preemption bound 3, and a branch budget for the retry loops.
fn loom_builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.max_branches = 50_000;
    builder
}

/// The page's fragments are freed on three threads while the allocator, on
/// the owner lcore, leaves the page with one fragment never cut: four
/// candidates for the last reference, two of them on the owner (whose put
/// goes to its direct cache) and two not (the ring).
#[test]
fn loom_last_reference_sends_the_page_home_exactly_once() {
    loom_builder().check(|| {
        let (provider, _lcore, pool) = owned_order3_pool(2, 1);
        let mut frag_alloc = PageFragAlloc::new(pool.clone());
        // 8000-byte fragments: target 4 per 32 KiB page; three are cut.
        let a = frag_alloc.alloc_frag(8000).unwrap();
        let mut b = frag_alloc.alloc_frag(8000).unwrap();
        let mut c = frag_alloc.alloc_frag(8000).unwrap();
        assert_eq!(a.page_target(), 4);
        let tb = loom::thread::spawn(move || {
            b.as_mut_slice()[0] = 1;
            drop(b);
        });
        let tc = loom::thread::spawn(move || {
            c.as_mut_slice()[0] = 2;
            drop(c);
        });
        drop(a);
        drop(frag_alloc); // gives back the fragment never cut
        tb.join().unwrap();
        tc.join().unwrap();
        let stats = pool.stats();
        assert_eq!(stats.alloc_slow, 1);
        assert_eq!(
            stats.cached + stats.in_ring + stats.released,
            1,
            "home exactly once: {stats:?}"
        );
        drop(pool);
        assert_pool_full(&provider);
    });
}

/// Fragments of a page_frag_cache block, freed on two threads; the last
/// one gives the block back to the provider (under its lock), once.
#[cfg(feature = "bench-baselines")]
#[test]
fn loom_frag_cache_block_goes_back_to_the_provider_once() {
    loom_builder().check(|| {
        let provider = test_provider();
        let mut frag_cache = PageFragCache::new(&provider, 3).unwrap();
        // 16384-byte fragments: target 2, both cut, so the cache holds no
        // reference and the last fragment alone decides.
        let a = frag_cache.alloc_frag(16_384).unwrap();
        let b = frag_cache.alloc_frag(16_384).unwrap();
        drop(frag_cache);
        let t = loom::thread::spawn(move || drop(b));
        drop(a);
        t.join().unwrap();
        let stats = provider.stats();
        assert_eq!((stats.allocs[3], stats.frees[3]), (1, 1), "{stats:?}");
        assert_pool_full(&provider);
    });
}

/// Whole pages: the owner recycles through its direct cache while another
/// thread returns a page through the ring; the owner then gets both back.
#[test]
fn loom_direct_cache_and_ring_hand_pages_back() {
    loom_builder().check(|| {
        let (provider, _lcore, pool) = owned_order3_pool(1, 1);
        let x = pool.alloc_page().unwrap();
        let mut y = pool.alloc_page().unwrap();
        let (xa, ya) = (x.as_ptr(), y.as_ptr());
        let t = loom::thread::spawn(move || {
            y.as_mut_slice()[0] = 7;
            drop(y); // not the owner: the ring
        });
        drop(x); // the owner: the direct cache
        t.join().unwrap();
        let a = pool.alloc_page().unwrap(); // the cache
        let b = pool.alloc_page().unwrap(); // the ring
        assert_eq!((a.as_ptr(), b.as_ptr()), (xa, ya));
        let stats = pool.stats();
        assert_eq!(
            (stats.alloc_slow, stats.alloc_fast, stats.alloc_ring),
            (2, 1, 1),
            "{stats:?}"
        );
        drop((a, b));
        drop(pool);
        assert_pool_full(&provider);
    });
}

/// The ring batch: the owner waits for a batch in the ring, and takes fewer
/// once the provider is empty. A page returned from another thread while the
/// owner gets one is either found in the ring (the owner's get takes it) or
/// not yet there (the get fails: the provider is empty, the ring is not
/// waited for); never lost, never handed out twice.
#[test]
fn loom_owner_takes_fewer_than_a_batch_when_the_provider_is_empty() {
    loom_builder().check(|| {
        let (provider, _lcore, pool) = owned_order3_pool(2, 2);
        // Both 32 KiB blocks of the provider.
        let x = pool.alloc_page().unwrap();
        let mut y = pool.alloc_page().unwrap();
        let ya = y.as_ptr();
        let t = loom::thread::spawn(move || {
            y.as_mut_slice()[0] = 9;
            drop(y); // not the owner: the ring
        });
        let got = pool.alloc_page();
        t.join().unwrap();
        let mut z = match got {
            Ok(z) => z,
            Err(e) => {
                assert!(
                    matches!(e, PagePoolError::Exhausted { order: 3, .. }),
                    "{e}"
                );
                // Now it is in the ring.
                pool.alloc_page().unwrap()
            }
        };
        assert_eq!((z.as_ptr(), z.as_mut_slice()[0]), (ya, 9));
        let stats = pool.stats();
        assert_eq!(
            (stats.alloc_slow, stats.alloc_ring, stats.in_flight),
            (2, 1, 2),
            "{stats:?}"
        );
        drop((x, z));
        drop(pool);
        assert_pool_full(&provider);
    });
}

/// Bulk freeing: a thread that is not the owner frees two fragments of a
/// page as one run (one count update of 2) and a whole page into its stash,
/// then flushes; the owner frees the third fragment and leaves the page with
/// one never cut. Whoever is last sends the fragments' page home — the
/// flushing thread through its stash and the ring, the owner through its
/// direct cache — exactly once, and the whole page reaches the ring.
#[test]
fn loom_bulk_free_run_and_stash_send_each_page_home_once() {
    loom_builder().check(|| {
        let (provider, _lcore, pool) = owned_order3_pool(2, 1);
        let mut frag_alloc = PageFragAlloc::new(pool.clone());
        let a = frag_alloc.alloc_frag(8000).unwrap();
        let b = frag_alloc.alloc_frag(8000).unwrap();
        let c = frag_alloc.alloc_frag(8000).unwrap();
        let y = pool.alloc_page().unwrap();
        let t = loom::thread::spawn(move || {
            let mut bulk = BulkFree::new();
            bulk.free_frag(b);
            bulk.free_frag(c);
            bulk.free_page(y);
            bulk.flush();
        });
        drop(a);
        drop(frag_alloc); // gives back the fragment never cut
        t.join().unwrap();
        let stats = pool.stats();
        assert_eq!(stats.alloc_slow, 2);
        assert_eq!(
            stats.cached + stats.in_ring + stats.released,
            2,
            "each page home exactly once: {stats:?}"
        );
        drop(pool);
        assert_pool_full(&provider);
    });
}
