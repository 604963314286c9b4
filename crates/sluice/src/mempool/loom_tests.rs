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
