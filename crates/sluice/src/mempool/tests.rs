//! Mempool tests: every element, cache accounting, flush threshold, zero-copy
//! put, bad configurations, and a multi-thread stress test. Each ends with the
//! pool full again.

use std::collections::HashSet;

use super::*;
use crate::lcore;
use crate::test_support::{TestPool, assert_pool_full, test_mempool};

/// Gets every element one by one, stamps its index into it, checks they are
/// distinct, aligned and in the region, that one more get fails, and puts
/// them all back.
fn every_element_round_trips(pool: &Mempool) {
    let size = pool.size() as usize;
    let mut got = Vec::with_capacity(size);
    while let Some(e) = pool.get() {
        assert!(pool.contains(e));
        assert_eq!(e.as_ptr() as usize % ELT_ALIGN, 0);
        let idx = pool.index_of(e).unwrap();
        assert_eq!(pool.iova(e), idx as u64 * pool.stride() as u64);
        // SAFETY: we hold the element; it is `elt_size` (>= 8) bytes.
        unsafe { e.as_ptr().cast::<u64>().write(idx as u64 * 7 + 1) };
        got.push(e);
        assert!(got.len() <= size, "handed out more than the pool holds");
    }
    assert_eq!(got.len(), size);
    let distinct: HashSet<_> = got.iter().collect();
    assert_eq!(distinct.len(), size);
    assert_eq!(pool.stats().in_use as usize, size);
    assert!(matches!(
        pool.get_bulk(&mut [Elem::DANGLING]),
        Err(MempoolError::Empty { requested: 1 })
    ));
    for &e in &got {
        let idx = pool.index_of(e).unwrap();
        // SAFETY: still ours.
        let stamp = unsafe { e.as_ptr().cast::<u64>().read() };
        assert_eq!(stamp, idx as u64 * 7 + 1);
    }
    // SAFETY: each element came from `pool` and goes back once.
    unsafe { pool.put_bulk(&got) };
    assert_pool_full(&pool);
}

#[test]
fn elements_are_an_odd_number_of_lines_apart() {
    // Whole lines, plus one when that is even.
    for (elt, stride) in [
        (1, 64),
        (64, 64),
        (65, 192),
        (200, 320),
        (2048, 2112),
        (2304, 2368),
        (2368, 2368),
        (8320, 8384),
    ] {
        assert_eq!(element_stride(elt), stride, "{elt}");
    }
    // A pool lays them out so: element `i` at `i * stride`, and `n`
    // consecutive elements start in `n` different sets of any power-of-two
    // set count `n`.
    let pool = test_mempool(300, 0);
    assert_eq!((pool.elt_size(), pool.stride()), (200, 320));
    let mut got = Vec::new();
    while let Some(e) = pool.get() {
        got.push(e);
    }
    assert_eq!(got.len(), 300);
    let sets = 256u64;
    let starts: HashSet<u64> = got
        .iter()
        .filter(|&&e| pool.index_of(e).unwrap() < sets as u32)
        .map(|&e| {
            assert_eq!(pool.iova(e), pool.index_of(e).unwrap() as u64 * 320);
            (pool.iova(e) / ELT_ALIGN as u64) % sets
        })
        .collect();
    assert_eq!(starts.len(), sets as usize);
    // SAFETY: elements got above, each put back once.
    unsafe { pool.put_bulk(&got) };
    assert_pool_full(&pool);
}

#[test]
fn every_element_without_cache() {
    every_element_round_trips(&test_mempool(1000, 0));
}

#[test]
fn every_element_through_an_lcore_cache() {
    let _l = lcore::register().unwrap();
    let pool = test_mempool(1000, 32);
    every_element_round_trips(&pool);
    assert!(pool.stats().cache_hits > 0);
    pool.flush_local_cache();
    assert_eq!(pool.stats().in_ring, 1000);
}

#[test]
fn non_lcore_threads_bypass_the_cache() {
    let pool = test_mempool(100, 16);
    let e = pool.get().unwrap();
    // SAFETY: from `pool`, put back once.
    unsafe { pool.put(e) };
    let s = pool.stats();
    assert_eq!((s.cached, s.cache_hits, s.cache_misses), (0, 0, 0));
    assert_pool_full(&pool);
}

#[test]
fn cache_accounting_refill_and_flush_at_threshold() {
    let _l = lcore::register().unwrap();
    let pool = test_mempool(255, 32);
    assert_eq!(pool.flush_threshold(), 48);

    // A first get misses and refills the cache to 32 after serving 1.
    let e = pool.get().unwrap();
    let s = pool.stats();
    assert_eq!((s.cache_misses, s.ring_refills, s.cached), (1, 1, 32));
    assert_eq!(s.in_ring, 255 - 33);
    assert_eq!(s.available + s.in_use, s.size);
    assert_eq!(s.in_use, 1);

    // The next 32 hit.
    let mut held = vec![e];
    for _ in 0..32 {
        held.push(pool.get().unwrap());
    }
    let s = pool.stats();
    assert_eq!((s.cache_hits, s.cached, s.in_use), (32, 0, 33));

    // Take 67 more so 100 are out, then put back one at a time: up to the
    // threshold (48) they stay cached; the 49th flushes the cache and starts
    // it again with that one element.
    let mut more = [Elem::DANGLING; 67];
    pool.get_bulk(&mut more).unwrap();
    held.extend_from_slice(&more);
    let flushes_before = pool.stats().flushes;
    let cached_before = pool.stats().cached as usize;
    let room = 48 - cached_before;
    for (i, &e) in held[..room].iter().enumerate() {
        // SAFETY: from `pool`, each put once.
        unsafe { pool.put(e) };
        assert_eq!(pool.stats().cached as usize, cached_before + i + 1);
    }
    assert_eq!(pool.stats().flushes, flushes_before);
    // SAFETY: as above.
    unsafe { pool.put(held[room]) };
    let s = pool.stats();
    assert_eq!(s.flushes, flushes_before + 1);
    assert_eq!(s.cached, 1);
    assert_eq!(s.available + s.in_use, s.size);
    // SAFETY: the rest, once each.
    unsafe { pool.put_bulk(&held[room + 1..]) };
    assert_pool_full(&pool);
}

#[test]
fn gets_larger_than_the_cache_and_ring_shortfall_use_own_cache() {
    let _l = lcore::register().unwrap();
    let pool = test_mempool(64, 16);
    // Larger than the cache: straight from the ring.
    let mut big = [Elem::DANGLING; 40];
    pool.get_bulk(&mut big).unwrap();
    assert_eq!(pool.stats().cached, 0);
    // SAFETY: from `pool`, once.
    unsafe { pool.put_bulk(&big[..20]) };
    // 20 cached, 24 in the ring, 20 out. A get of 30 cannot be served by the
    // ring alone (24), but ring + own cache (44) can.
    let s = pool.stats();
    assert_eq!((s.cached, s.in_ring), (20, 24));
    let mut mid = [Elem::DANGLING; 30];
    pool.get_bulk(&mut mid).unwrap();
    let s = pool.stats();
    assert_eq!(s.in_use, 50);
    // 14 left: a get of 15 fails and takes nothing.
    let mut too_many = [Elem::DANGLING; 15];
    assert!(pool.get_bulk(&mut too_many).is_err());
    assert_eq!(pool.stats().in_use, 50);
    assert_eq!(pool.stats().get_failures, 1);
    let all: HashSet<_> = big[20..].iter().chain(mid.iter()).collect();
    assert_eq!(all.len(), 50);
    // SAFETY: from `pool`, once each.
    unsafe {
        pool.put_bulk(&big[20..]);
        pool.put_bulk(&mid);
    }
    assert_pool_full(&pool);
}

#[test]
fn zero_copy_put_writes_into_the_cache() {
    let _l = lcore::register().unwrap();
    let pool = test_mempool(255, 32);
    let mut held = [Elem::DANGLING; 10];
    pool.get_bulk(&mut held).unwrap();
    let cached = pool.stats().cached;
    // SAFETY: no other call on `pool` until the guard is gone.
    let mut zc = unsafe { pool.zc_put_bulk(10) }.unwrap();
    assert_eq!(zc.len(), 10);
    zc.slots().copy_from_slice(&held);
    // SAFETY: the slots hold our 10 elements, once each.
    unsafe { zc.commit() };
    assert_eq!(pool.stats().cached, cached + 10);
    // Over the threshold: no zero-copy slots.
    // SAFETY: the guard (none here) is not used.
    assert!(unsafe { pool.zc_put_bulk(49) }.is_none());
    // A guard dropped without commit puts nothing.
    // SAFETY: nothing else touches `pool` while the guard lives.
    let unused = unsafe { pool.zc_put_bulk(5) };
    assert!(unused.is_some_and(|g| g.len() == 5));
    assert_pool_full(&pool);
}

#[test]
fn zero_copy_put_needs_an_lcore() {
    let pool = test_mempool(64, 16);
    // SAFETY: guard unused.
    assert!(unsafe { pool.zc_put_bulk(1) }.is_none());
}

#[test]
fn bad_configurations_are_errors_naming_the_value() {
    let cfg = |size, elt_size, cache_size| MempoolConfig {
        name: "bad".into(),
        size,
        elt_size,
        cache_size,
        hugepages: HugepagePolicy::Never,
    };
    let msg = |c| Mempool::new(c).unwrap_err().to_string();
    assert!(matches!(
        Mempool::new(cfg(0, 64, 0)),
        Err(MempoolError::ZeroSize)
    ));
    assert!(msg(cfg(0, 64, 0)).contains("size 0"));
    assert!(msg(cfg(10, 0, 0)).contains("element size 0"));
    assert!(msg(cfg(10, MAX_ELT_SIZE + 1, 0)).contains(&(MAX_ELT_SIZE + 1).to_string()));
    assert!(msg(cfg(10_000, 64, 513)).contains("513"));
    let m = msg(cfg(100, 64, 256));
    assert!(m.contains("256") && m.contains("100"), "{m}");
    assert!(msg(cfg(MAX_POOL_SIZE + 1, 64, 0)).contains(&(MAX_POOL_SIZE + 1).to_string()));
    // The largest cache a pool can back is accepted.
    assert!(Mempool::new(cfg(48, 64, 32)).is_ok());
    assert!(Mempool::new(cfg(47, 64, 32)).is_err());
}

#[test]
fn init_callback_sees_every_element_once() {
    let mut seen = Vec::new();
    let pool = Mempool::with_init(
        MempoolConfig {
            name: "init".into(),
            size: 37,
            elt_size: 100,
            cache_size: 0,
            hugepages: HugepagePolicy::Never,
        },
        |bytes, i| {
            assert_eq!(bytes.len(), 100);
            bytes[0] = i as u8;
            seen.push(i);
        },
    )
    .unwrap();
    assert_eq!(seen, (0..37).collect::<Vec<_>>());
    let mut all = [Elem::DANGLING; 37];
    pool.get_bulk(&mut all).unwrap();
    for e in all {
        // SAFETY: we hold the element.
        assert_eq!(unsafe { *e.as_ptr() }, pool.index_of(e).unwrap() as u8);
    }
    // SAFETY: from `pool`, once each.
    unsafe { pool.put_bulk(&all) };
    assert_pool_full(&pool);
}

#[test]
fn dropping_the_last_handle_with_elements_out_keeps_them_valid() {
    let pool = test_mempool(16, 0);
    let e = pool.get().unwrap();
    let p2 = pool.clone();
    drop(pool);
    drop(p2);
    // The pool was leaked, not freed: the element is still writable memory.
    // SAFETY: we hold the element and its pool was not unmapped.
    unsafe { e.as_ptr().write_bytes(0xab, 200) };
}

#[test]
fn a_handle_is_made_from_an_element_while_one_lives_and_never_after() {
    let p = test_mempool(16, 0);
    let e = p.get().unwrap();
    let inner = p.inner_ptr().as_ptr().cast_const();
    // SAFETY: `e` is out of the pool at `inner`.
    let h = unsafe { Mempool::from_element_pool(inner) }.expect("a handle lives");
    assert_eq!(h.size(), 16);
    // The new handle keeps the pool: the old one may go.
    drop(p);
    // SAFETY: from this pool, once.
    unsafe { h.put(e) };
    assert_pool_full(&h);
    let _out = h.get().unwrap();
    drop(h);
    // The last handle went with an element out: the pool is leaked, and no
    // handle may come back (the last drop reads the pool after its
    // decrement).
    // SAFETY: `_out` is out of that (leaked, so valid) pool.
    assert!(unsafe { Mempool::from_element_pool(inner) }.is_none());
}

/// Threads (lcores and not) get and put random-sized batches, stamping each
/// element with their id while they hold it and checking the stamp before
/// putting it back: an element handed to two holders at once would be caught.
#[test]
fn multi_thread_stress_ends_full() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 20_000;
    let pool = test_mempool(2047, 64);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let pool = pool.clone();
            s.spawn(move || {
                // Threads 0..3 are lcores; the last is not.
                let _l = (t + 1 < THREADS).then(|| lcore::register().unwrap());
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                let mut batch = [Elem::DANGLING; 64];
                let mut got = 0u64;
                for _ in 0..ROUNDS {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let n = 1 + (rng % 64) as usize;
                    if pool.get_bulk(&mut batch[..n]).is_err() {
                        continue;
                    }
                    got += n as u64;
                    let stamp = ((t as u64) << 32) | (got & 0xffff_ffff);
                    for e in &batch[..n] {
                        // SAFETY: we hold the element.
                        unsafe { e.as_ptr().cast::<u64>().write(stamp) };
                    }
                    std::hint::spin_loop();
                    for e in &batch[..n] {
                        // SAFETY: we hold the element.
                        let v = unsafe { e.as_ptr().cast::<u64>().read() };
                        assert_eq!(v, stamp, "element handed to two threads at once");
                    }
                    // SAFETY: from `pool`, once each.
                    unsafe { pool.put_bulk(&batch[..n]) };
                }
                pool.flush_local_cache();
            });
        }
    });
    let s = pool.stats();
    assert_eq!(s.in_use, 0, "{s:?}");
    assert_eq!(s.in_ring, 2047, "every cache was flushed");
}

#[cfg(feature = "debug")]
mod debug {
    use super::*;

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_caught() {
        let pool = test_mempool(8, 0);
        let e = pool.get().unwrap();
        // SAFETY: deliberately wrong: the second put is the bug under test,
        // caught before it reaches the ring.
        unsafe {
            pool.put(e);
            pool.put(e);
        }
    }

    #[test]
    #[should_panic(expected = "not an element of this pool")]
    fn foreign_element_is_caught() {
        let pool = test_mempool(8, 0);
        let other = test_mempool(8, 0);
        let e = other.get().unwrap();
        // SAFETY: deliberately wrong: caught before it reaches the ring.
        unsafe { pool.put(e) };
    }
}

#[test]
fn more_puts_than_the_ring_holds_panic_saying_why_instead_of_spinning() {
    // No cache: every put goes to the ring, whose capacity is the pool size
    // rounded up. Putting one element back again and again fills it with
    // copies, and then a put can never succeed.
    let pool = test_mempool(4, 0);
    let e = pool.get().unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for _ in 0..64 {
            // SAFETY: none — this is the misuse under test, one element
            // returned many times; the pool is leaked below, never used
            // again.
            unsafe { pool.put(e) };
        }
    }));
    let msg = r.expect_err("a put into a ring full of copies returned");
    let msg = msg
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    // The `debug` feature's element marks catch the second put first.
    let want = if cfg!(feature = "debug") {
        "double free of element"
    } else {
        "freed twice or into the wrong pool"
    };
    assert!(msg.contains(want), "panic message: {msg}");
    // Its ring holds copies: leak it rather than run its drop.
    std::mem::forget(pool);
}

/// Registers the calling thread as an lcore, gets and puts so that its cache
/// of `pool` holds elements, and returns how many it holds; the thread then ends
/// (or panics, with `panic`) without flushing.
fn leave_elements_in_an_lcore_cache(pool: &Mempool, panic: bool) -> usize {
    let pool = pool.clone();
    let held = std::thread::spawn(move || {
        let _lcore = lcore::register().unwrap();
        let mut batch = [Elem::DANGLING; 5];
        pool.get_bulk(&mut batch).unwrap();
        // SAFETY: from `pool`, once each.
        unsafe { pool.put_bulk(&batch) };
        let held = pool.local_cache_len();
        assert!(held > 0, "the cache holds the elements put");
        if panic {
            std::panic::resume_unwind(Box::new(held));
        }
        held
    })
    .join();
    match held {
        Ok(n) => n,
        Err(payload) => *payload.downcast::<usize>().unwrap(),
    }
}

/// Gets an element of `pool` and puts it back from the calling lcore, which
/// then holds it in its cache.
fn cache_one(pool: &Mempool) {
    let e = pool.get().unwrap();
    // SAFETY: from `pool`, once.
    unsafe { pool.put(e) };
    assert!(pool.local_cache_len() > 0);
}

/// Gets `pool.size()` elements from the calling thread, one by one, checks
/// that one more get fails and that the count said so, and puts them back.
fn allocate_all(pool: &Mempool) {
    let size = pool.size() as usize;
    assert_eq!(pool.stats().available as usize, size, "{:?}", pool.stats());
    let mut got = Vec::with_capacity(size);
    for _ in 0..size {
        match pool.get() {
            Some(e) => got.push(e),
            None => panic!(
                "only {} of {size} elements allocatable while the pool counts {:?}",
                got.len(),
                pool.stats()
            ),
        }
    }
    assert!(pool.get().is_none());
    assert_eq!(pool.stats().available, 0, "{:?}", pool.stats());
    // SAFETY: from `pool`, once each.
    unsafe { pool.put_bulk(&got) };
    assert_pool_full(&pool);
}

#[test]
fn an_ended_lcores_cached_elements_are_allocatable_by_another_thread() {
    let pool = test_mempool(32, 4);
    assert!(leave_elements_in_an_lcore_cache(&pool, false) > 0);
    allocate_all(&pool);
}

#[test]
fn a_panicked_lcores_cached_elements_are_allocatable_by_another_thread() {
    let pool = test_mempool(32, 4);
    assert!(leave_elements_in_an_lcore_cache(&pool, true) > 0);
    allocate_all(&pool);
}

#[test]
fn an_ended_lcores_cached_elements_are_allocatable_by_another_lcore_in_one_get() {
    let pool = test_mempool(32, 4);
    assert!(leave_elements_in_an_lcore_cache(&pool, false) > 0);
    std::thread::spawn(move || {
        let _lcore = lcore::register().unwrap();
        assert_eq!(
            pool.local_cache_len(),
            0,
            "a new lcore starts with an empty cache"
        );
        let mut all = vec![Elem::DANGLING; 32];
        pool.get_bulk(&mut all).unwrap();
        assert_eq!(all.iter().collect::<HashSet<_>>().len(), 32);
        // SAFETY: from `pool`, once each.
        unsafe { pool.put_bulk(&all) };
        pool.flush_local_cache();
        assert_pool_full(&pool);
    })
    .join()
    .unwrap();
}

#[test]
fn an_ended_lcores_cached_mbufs_are_allocatable_by_another_thread() {
    let pool = TestPool::new(32)
        .name("ended-lcore")
        .cache_size(4)
        .hugepages(HugepagePolicy::Never)
        .build();
    let p = pool.clone();
    std::thread::spawn(move || {
        let _lcore = lcore::register().unwrap();
        let bufs: Vec<_> = (0..5).map(|_| p.alloc().unwrap()).collect();
        drop(bufs);
        assert!(p.mempool().local_cache_len() > 0);
    })
    .join()
    .unwrap();
    assert_eq!(pool.available(), 32);
    let all: Vec<_> = (0..32).map_while(|_| pool.alloc()).collect();
    assert_eq!(all.len(), 32, "{:?}", pool.stats());
    drop(all);
    assert_pool_full(&pool);
}

#[test]
fn an_lcore_guard_dropped_early_returns_the_cache_and_the_thread_goes_on_uncached() {
    let pool = test_mempool(32, 4);
    let other = pool.clone();
    std::thread::spawn(move || {
        let guard = lcore::register().unwrap();
        cache_one(&other);
        drop(guard);
        // No longer an lcore: the cache went home with the id.
        assert_eq!(other.local_cache_len(), 0);
        assert_eq!(other.stats().cached, 0, "{:?}", other.stats());
    })
    .join()
    .unwrap();
    allocate_all(&pool);
}

#[test]
fn an_lcore_guard_kept_in_a_thread_local_returns_the_cache_when_the_thread_ends() {
    use std::cell::RefCell;
    std::thread_local! {
        static GUARD: RefCell<Option<lcore::LcoreGuard>> = const { RefCell::new(None) };
    }
    let pool = test_mempool(32, 4);
    let other = pool.clone();
    std::thread::spawn(move || {
        GUARD.with(|g| *g.borrow_mut() = Some(lcore::register().unwrap()));
        cache_one(&other);
        // The guard goes with the thread's thread-locals, after this returns.
    })
    .join()
    .unwrap();
    allocate_all(&pool);
}

#[test]
fn a_pool_dropped_before_its_lcore_ends_is_freed_and_the_lcore_ends_cleanly() {
    use std::sync::mpsc::channel;
    let pool = test_mempool(32, 4);
    let (cached_tx, cached_rx) = channel();
    let (dropped_tx, dropped_rx) = channel::<()>();
    let lcore = std::thread::spawn(move || {
        let _lcore = lcore::register().unwrap();
        let e = pool.get().unwrap();
        // SAFETY: from `pool`, once.
        unsafe { pool.put(e) };
        assert_pool_full(&pool);
        cached_tx.send(pool).unwrap();
        // The pool's last handle goes on the other thread while this one
        // still holds elements in its cache; the lcore ends afterwards.
        dropped_rx.recv().unwrap();
    });
    let pool = cached_rx.recv().unwrap();
    assert!(pool.stats().cached > 0);
    drop(pool);
    dropped_tx.send(()).unwrap();
    lcore.join().unwrap();
    // A new pool and a new lcore work as usual afterwards.
    let pool = test_mempool(32, 4);
    leave_elements_in_an_lcore_cache(&pool, false);
    allocate_all(&pool);
}

#[test]
fn a_thread_that_forgets_its_lcore_guard_returns_the_cache_when_it_ends() {
    let pool = test_mempool(32, 4);
    let other = pool.clone();
    std::thread::spawn(move || {
        std::mem::forget(lcore::register().unwrap());
        cache_one(&other);
    })
    .join()
    .unwrap();
    allocate_all(&pool);
}

#[test]
fn cache_counts_name_each_lcores_cache_read_from_another_thread() {
    use std::sync::{Arc, Barrier};
    let pool = test_mempool(1023, 32);
    // Both lcores have filled their caches; the main thread counts; then
    // they end (their caches go back to the ring).
    let filled = Arc::new(Barrier::new(3));
    let counted = Arc::new(Barrier::new(3));
    let workers: Vec<_> = [5usize, 9]
        .into_iter()
        .map(|keep| {
            let (pool, filled, counted) = (pool.clone(), filled.clone(), counted.clone());
            std::thread::spawn(move || {
                let guard = lcore::register().unwrap();
                // The first get refills the cache to 32 after serving one;
                // the next `keep` come from the cache.
                let mut out = vec![Elem::DANGLING; keep + 1];
                pool.get_bulk(&mut out[..1]).unwrap();
                pool.get_bulk(&mut out[1..]).unwrap();
                let id = guard.id();
                let cached = pool.local_cache_len();
                assert_eq!(cached, 32 - keep);
                filled.wait();
                counted.wait();
                // SAFETY: from `pool`, each put once.
                unsafe { pool.put_bulk(&out) };
                (id, cached)
            })
        })
        .collect();
    filled.wait();
    let counts = pool.cache_counts();
    let free = pool.free_counts();
    counted.wait();
    let mut seen: Vec<(usize, u32)> = workers
        .into_iter()
        .map(|w| {
            let (id, cached) = w.join().unwrap();
            (id, cached as u32)
        })
        .collect();
    seen.sort();
    assert_eq!(counts, seen);
    assert_eq!(free.caches, seen);
    let cached: u32 = seen.iter().map(|&(_, n)| n).sum();
    // The lcores hold 6 and 10 elements out.
    assert_eq!(free.in_ring + cached, 1023 - 16);
    assert!(pool.cache_counts().is_empty());
    assert_pool_full(&pool);
}

/// A model of one lcore's view of a pool: the ring's free elements in
/// order (a FIFO) and the cache's (a stack), moved as the pool's get and put
/// paths move them.
struct PoolModel {
    ring: std::collections::VecDeque<Elem>,
    cache: Vec<Elem>,
    cache_size: usize,
    flush_thresh: usize,
}

impl PoolModel {
    fn get(&mut self, n: usize) -> Option<Vec<Elem>> {
        let len = self.cache.len();
        if n <= len {
            return Some(self.cache.split_off(len - n));
        }
        let need = self.cache_size + n - len;
        if n <= self.cache_size && self.ring.len() >= need {
            self.cache.extend(self.ring.drain(..need));
            return Some(self.cache.split_off(self.cache_size));
        }
        // Past the cache: the ring alone, else the ring's part and the cache.
        if self.ring.len() >= n {
            return Some(self.ring.drain(..n).collect());
        }
        if len == 0 || self.ring.len() < n - len {
            return None;
        }
        let mut got: Vec<Elem> = self.ring.drain(..n - len).collect();
        got.append(&mut self.cache);
        Some(got)
    }

    fn put(&mut self, src: &[Elem]) {
        if self.cache.len() + src.len() <= self.flush_thresh {
            self.cache.extend_from_slice(src);
        } else if src.len() > self.flush_thresh {
            self.ring.extend(src);
        } else {
            self.ring.extend(self.cache.drain(..));
            self.cache.extend_from_slice(src);
        }
    }
}

/// Gets and puts of every bulk size from 0 to 64, in a scrambled order,
/// hand out exactly the elements, in exactly the order, that a model of the
/// cache and ring predicts (so the small-bulk copies move the right slots),
/// fail exactly when it says so, and leave the pool full.
#[test]
fn bulks_of_0_to_64_match_a_model_of_cache_and_ring() {
    for cached in [false, true] {
        let _l = cached.then(|| lcore::register().unwrap());
        let (size, cache_size) = (200, 32);
        let pool = test_mempool(size, cache_size);
        // A fresh pool's ring holds the elements in index order.
        let mut all = Vec::new();
        while let Some(e) = pool.get() {
            all.push(e);
        }
        all.sort_by_key(|&e| pool.index_of(e));
        // SAFETY: every element, got above, put back once.
        unsafe { pool.put_bulk(&all) };
        pool.flush_local_cache();
        let mut model = PoolModel {
            ring: all.iter().copied().collect(),
            cache: Vec::new(),
            cache_size: if cached { cache_size as usize } else { 0 },
            flush_thresh: if cached {
                pool.flush_threshold() as usize
            } else {
                0
            },
        };
        let mut held: Vec<Elem> = Vec::new();
        let mut step = 0x9e37_79b9_u32;
        for round in 0..600 {
            step = step.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let n = (step >> 8) as usize % 65;
            // Mostly gets while few are held, mostly puts while many are.
            let get = (step >> 24) as usize % size as usize >= held.len();
            if get {
                let mut dst = vec![Elem::DANGLING; n];
                let want = model.get(n);
                match pool.get_bulk(&mut dst) {
                    Ok(()) => {
                        assert_eq!(Some(&dst), want.as_ref(), "get of {n}, round {round}");
                        held.extend_from_slice(&dst);
                    }
                    Err(MempoolError::Empty { requested }) => {
                        assert_eq!(requested, n);
                        assert!(want.is_none(), "get of {n} failed, round {round}");
                    }
                    Err(e) => panic!("{e}"),
                }
            } else {
                let n = n.min(held.len());
                let src = held.split_off(held.len() - n);
                model.put(&src);
                // SAFETY: elements got above and held since, each put back
                // once.
                unsafe { pool.put_bulk(&src) };
            }
            assert_eq!(pool.local_cache_len(), model.cache.len(), "round {round}");
        }
        // SAFETY: as above.
        unsafe { pool.put_bulk(&held) };
        pool.flush_local_cache();
        assert_pool_full(&pool);
    }
}

/// `get_array::<N>` of the sizes the tests use, as a `Vec`.
fn get_array_of(pool: &Mempool, n: usize) -> Result<Vec<Elem>, MempoolError> {
    match n {
        0 => pool.get_array::<0>().map(Vec::from),
        1 => pool.get_array::<1>().map(Vec::from),
        2 => pool.get_array::<2>().map(Vec::from),
        4 => pool.get_array::<4>().map(Vec::from),
        8 => pool.get_array::<8>().map(Vec::from),
        32 => pool.get_array::<32>().map(Vec::from),
        64 => pool.get_array::<64>().map(Vec::from),
        _ => unreachable!("no array size {n}"),
    }
}

/// `put_array::<N>` of the sizes the tests use.
///
/// # Safety
/// As [`Mempool::put_bulk`].
unsafe fn put_array_of(pool: &Mempool, src: &[Elem]) {
    // SAFETY: forwarded, for each size.
    unsafe {
        match src.len() {
            0 => pool.put_array::<0>(&[]),
            1 => pool.put_array::<1>(src.try_into().unwrap()),
            2 => pool.put_array::<2>(src.try_into().unwrap()),
            4 => pool.put_array::<4>(src.try_into().unwrap()),
            8 => pool.put_array::<8>(src.try_into().unwrap()),
            32 => pool.put_array::<32>(src.try_into().unwrap()),
            64 => pool.put_array::<64>(src.try_into().unwrap()),
            n => unreachable!("no array size {n}"),
        }
    }
}

/// Sizes `get_array_of` and `put_array_of` take: small bulks, one past a
/// 32-element cache, and two of them.
const ARRAY_SIZES: [usize; 7] = [0, 1, 2, 4, 8, 32, 64];

mod arrays {
    use super::*;
    use proptest::prelude::*;

    /// One step: a get or a put, of one of [`ARRAY_SIZES`], with the
    /// compile-time form or the run-time one.
    #[derive(Debug, Clone, Copy)]
    struct Step {
        get: bool,
        size: usize,
        array: bool,
    }

    fn step() -> impl Strategy<Value = Step> {
        (
            any::<bool>(),
            prop::sample::select(&ARRAY_SIZES[..]),
            any::<bool>(),
        )
            .prop_map(|(get, size, array)| Step { get, size, array })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random sequences of compile-time and run-time gets and puts, on
        /// an lcore or not and with small pools that run dry, hand out
        /// exactly what the model of cache and ring predicts, fail exactly
        /// when it says so (taking nothing), and leave the pool full.
        #[test]
        fn array_gets_and_puts_match_the_model(
            cached in any::<bool>(),
            cache_size in prop::sample::select(&[0u32, 8, 32][..]),
            size in 60u32..200,
            steps in prop::collection::vec(step(), 1..120),
        ) {
            let _l = cached.then(|| lcore::register().unwrap());
            let pool = test_mempool(size, cache_size);
            let mut all = Vec::new();
            while let Some(e) = pool.get() {
                all.push(e);
            }
            prop_assert_eq!(all.len(), size as usize);
            all.sort_by_key(|&e| pool.index_of(e));
            // SAFETY: every element, got above, put back once.
            unsafe { pool.put_bulk(&all) };
            pool.flush_local_cache();
            let on_cache = cached && cache_size > 0;
            let mut model = PoolModel {
                ring: all.iter().copied().collect(),
                cache: Vec::new(),
                cache_size: if on_cache { cache_size as usize } else { 0 },
                flush_thresh: if on_cache { pool.flush_threshold() as usize } else { 0 },
            };
            let mut held: Vec<Elem> = Vec::new();
            for (i, s) in steps.iter().enumerate() {
                if s.get {
                    let want = model.get(s.size);
                    let got = if s.array {
                        get_array_of(&pool, s.size)
                    } else {
                        let mut dst = vec![Elem::DANGLING; s.size];
                        pool.get_bulk(&mut dst).map(|()| dst)
                    };
                    match got {
                        Ok(dst) => {
                            prop_assert_eq!(Some(&dst), want.as_ref(), "step {} {:?}", i, s);
                            held.extend_from_slice(&dst);
                        }
                        Err(MempoolError::Empty { requested }) => {
                            prop_assert_eq!(requested, s.size);
                            prop_assert!(want.is_none(), "step {} {:?} failed", i, s);
                        }
                        Err(e) => panic!("{e}"),
                    }
                } else if s.size <= held.len() {
                    let src = held.split_off(held.len() - s.size);
                    model.put(&src);
                    if s.array {
                        // SAFETY: got above and held since, each put back once.
                        unsafe { put_array_of(&pool, &src) };
                    } else {
                        // SAFETY: as above.
                        unsafe { pool.put_bulk(&src) };
                    }
                }
                prop_assert_eq!(pool.local_cache_len(), model.cache.len(), "step {}", i);
                let distinct: HashSet<Elem> = held.iter().copied().collect();
                prop_assert_eq!(distinct.len(), held.len(), "an element handed out twice");
            }
            // SAFETY: as above.
            unsafe { pool.put_bulk(&held) };
            pool.flush_local_cache();
            assert_pool_full(&pool);
        }
    }
}
