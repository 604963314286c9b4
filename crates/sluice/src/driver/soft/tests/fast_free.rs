//! The fast-free offload with its promise broken: a Tx queue given clones
//! still held elsewhere, one buffer twice in a burst, mbufs whose data is
//! an external buffer and buffers of another pool must free each of them
//! the checked way (`driver::fast_free`) — the clones keep their bytes,
//! every pool is full at the end, every external buffer let go once —
//! whether completed batches go back by a bulk put or a zero-copy cache
//! put. A queue without the offload, which checks each batch on its
//! buffers' first header lines as it frees it, must do the same. (The
//! recycle path's side is in `tests::recycle`.)

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ext_copy, port, send_all, tester_of};
use crate::mbuf::{Burst, ExtSharedInfo, Mbuf, MbufPool};
use crate::port::{Offloads, PortConfig};
use crate::test_support::TestPool;

static EXT_FREED: AtomicU64 = AtomicU64::new(0);

/// The free callback of the external buffers below: counts.
fn ext_freed(_: NonNull<u8>, _: *mut ()) {
    EXT_FREED.fetch_add(1, Ordering::SeqCst);
}

fn pool(name: &str, size: u32) -> MbufPool {
    // A cache, so that `tx_free=zc` has slots to put into.
    TestPool::new(size)
        .name(name)
        .cache_size(64)
        .data_room(512)
        .build()
}

#[test]
fn a_tx_queue_sent_what_breaks_the_fast_free_promise_frees_it_all_the_checked_way() {
    const STEPS: usize = 100;
    const EXT: usize = STEPS / 5;
    const EXT_LEN: usize = 256;
    // The external memory and its infos outlive every mbuf (declared first,
    // dropped last).
    let mut region = vec![0u8; EXT * EXT_LEN];
    let infos: Vec<ExtSharedInfo> = (0..EXT)
        // SAFETY: the callback only counts; it is sound from any thread.
        .map(|_| unsafe { ExtSharedInfo::new(ext_freed, std::ptr::null_mut()) })
        .collect();
    let base = region.as_mut_ptr();
    let mut used_ext = 0;
    // The zero-copy put needs the lcore's cache.
    let _lcore = crate::lcore::register().unwrap();
    for (fast_free, tx_free) in [
        (true, "normal"),
        (true, "zc"),
        (false, "normal"),
        (false, "zc"),
    ] {
        let name = &format!("t-ff-broken-{fast_free}-{tx_free}");
        let pool_a = pool(&format!("{name}-a"), 1023);
        let pool_b = pool(&format!("{name}-b"), 255);
        let mut config = PortConfig::new(Some(pool_a.clone()))
            .nb_rxd(128)
            .nb_txd(128);
        if fast_free {
            config.tx_offloads |= Offloads::FAST_FREE;
        }
        let mut p = port(
            &format!("soft:tester={name},count=3200,flows=16,tx_free={tx_free}"),
            config,
        );
        let t = tester_of(name);
        let mut burst: Burst<32> = Burst::new();
        // Clones held: (clone, its bytes, the step after which it goes).
        let mut held: Vec<(Mbuf, Vec<u8>, usize)> = Vec::new();
        let mut twice = 0u64;
        for k in 0..STEPS {
            let (rx, tx) = {
                let (rx, tx) = p.queues_mut().unwrap();
                (rx[0].as_mut(), tx[0].as_mut())
            };
            assert_eq!(rx.rx_burst(&mut burst), 32, "step {k}");
            // A buffer a clone holds is never received into again.
            for m in burst.iter() {
                let h = m.as_header_ptr();
                assert!(
                    held.iter().all(|(c, _, _)| c.as_header_ptr() != h),
                    "step {k}"
                );
            }
            // Step 0 too: the queue learns its pool from a clean packet.
            let i = (k * 7) % 32;
            match k % 5 {
                1 => {
                    let c = burst[i].try_clone().unwrap();
                    let bytes = c.data().to_vec();
                    held.push((c, bytes, k + 1 + k % 7));
                }
                2 => {
                    // Packet `i` twice (in place of the one after it).
                    let j = (i + 1) % 32;
                    burst[j] = burst[i].try_clone().unwrap();
                    twice += 1;
                }
                3 => {
                    let copy = pool_b.alloc_from_slice(burst[i].data()).unwrap();
                    burst[i] = copy;
                }
                4 if used_ext < EXT => {
                    let buf = NonNull::new(base.wrapping_add(used_ext * EXT_LEN)).unwrap();
                    // SAFETY: slot `used_ext` of `region`, EXT_LEN bytes,
                    // and its info live until the end of the test, after
                    // every mbuf; nothing else uses them.
                    let e = unsafe {
                        ext_copy(&pool_a, &burst[i], buf, EXT_LEN as u16, &infos[used_ext])
                    };
                    burst[i] = e;
                    used_ext += 1;
                }
                _ => {}
            }
            send_all(tx, &mut burst);
            for (c, bytes, _) in &held {
                assert_eq!(c.data(), &bytes[..], "step {k}: a clone's bytes changed");
            }
            held.retain(|(_, _, until)| *until > k);
        }
        let r = t.report();
        assert_eq!((r.received, r.duplicates), (3200 - twice, twice), "{r}");
        assert_eq!((r.corrupt, r.reordered, r.foreign), (0, 0, 0), "{r}");
        p.stop();
        pool_a.flush_local_cache();
        pool_b.flush_local_cache();
        assert_eq!(pool_a.available() as usize, 1023 - held.len());
        held.clear();
        pool_a.flush_local_cache();
        assert!(
            pool_a.is_full() && pool_b.is_full(),
            "fast free {fast_free}, tx_free={tx_free}"
        );
    }
    // Every external buffer was let go once.
    assert_eq!(EXT_FREED.load(Ordering::SeqCst), used_ext as u64);
    assert!(infos.iter().all(|i| i.refcnt() == 0));
}
