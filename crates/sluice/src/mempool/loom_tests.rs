//! Loom model of the per-lcore cache hand-off: two lcores refill their caches
//! from the shared ring, hold elements, put them back into their caches and
//! flush them to the ring, while a thread that is not an lcore gets and puts
//! through the ring directly. Elements thus move cache → ring → other cache.
//! Loom checks every interleaving for data races on the caches and the ring;
//! the model checks that no element is held by two threads at once (each
//! holder stamps it and checks the stamp before letting go) and that the pool
//! ends full with nothing cached.

use super::*;
use crate::lcore;

fn hold_and_return(pool: &Mempool, stamp: u64, lcore: bool) {
    let _l = lcore.then(|| lcore::register().unwrap());
    let mut held = [Elem::DANGLING; 2];
    if pool.get_bulk(&mut held).is_err() {
        return;
    }
    for e in held {
        // SAFETY: we hold the element.
        unsafe { e.as_ptr().cast::<u64>().write(stamp) };
    }
    for e in held {
        // SAFETY: we hold the element.
        let seen = unsafe { e.as_ptr().cast::<u64>().read() };
        assert_eq!(seen, stamp, "element held by two threads");
    }
    // SAFETY: from `pool`, put back once each.
    unsafe { pool.put_bulk(&held) };
    pool.flush_local_cache();
}

#[test]
fn loom_mempool_cache_handoff_between_lcores() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.max_branches = 20_000;
    b.check(|| {
        let pool = Mempool::new(MempoolConfig {
            name: "loom".into(),
            size: 6,
            elt_size: 64,
            cache_size: 2,
            hugepages: HugepagePolicy::Never,
        })
        .unwrap();
        let threads: Vec<_> = (1..=2)
            .map(|t| {
                let p = pool.clone();
                loom::thread::spawn(move || hold_and_return(&p, t, true))
            })
            .collect();
        hold_and_return(&pool, 3, false);
        for t in threads {
            t.join().unwrap();
        }
        let s = pool.stats();
        assert_eq!((s.in_ring, s.cached, s.in_use), (6, 0, 0), "{s:?}");
    });
}

/// The last handle goes, on another thread, while an lcore holding two
/// elements but no handle (mbufs being freed) puts them back, the second put
/// flushing its cache to the ring, and then unregisters, which gives its
/// cache back to the ring. The last handle's drop must free the pool only
/// once every element is home and no put can touch the pool any more: every
/// put path reads a ghost cell in the pool just before its last store, and
/// freeing writes it, so loom reports a race if the pool can be freed while
/// a put is under way (as when an element is counted twice, in the ring and
/// in the cache it is being flushed from, and the count reaches `size`
/// early). (The handle goes on the spawned thread: loom's scheduler learns
/// a spawned thread's first access only when it runs, so this way round it
/// explores the drop's reads between the puts' stores.)
#[test]
fn loom_mempool_last_handle_drop_races_puts_and_flushes() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let pool = Mempool::new(MempoolConfig {
            name: "loom-drop".into(),
            size: 3,
            elt_size: 64,
            cache_size: 1,
            hugepages: HugepagePolicy::Never,
        })
        .unwrap();
        let mut out = [Elem::DANGLING; 2];
        pool.get_bulk(&mut out).unwrap();
        let inner = pool.inner_ptr().as_ptr().cast_const();
        let last_handle = loom::thread::spawn(move || drop(pool));
        let lcore = lcore::register().unwrap();
        // SAFETY: the pool is never freed while an element is out, and this
        // thread holds two until its puts below.
        let pool = unsafe { &*inner };
        for e in out {
            // SAFETY: from this pool, put back once each.
            unsafe { pool.put_bulk(&[e]) };
        }
        drop(lcore);
        last_handle.join().unwrap();
    });
}
