//! Tx→Rx buffer recycling on soft ports: one test per safety rule of
//! [`crate::port::recycle`], a long randomized test and a threaded stress.
//!
//! The forwarding is done by hand: a recycle step ([`recycle_mbufs`], or its
//! three calls one by one) before each `rx_burst`, then the burst goes out
//! on a Tx queue. With the inline device every step is deterministic: a Tx
//! burst of at most 32 packets is sent by the device (and its batch of 32
//! completed) before `tx_burst` returns, and an Rx queue whose tester
//! generator runs at full speed fills every burst of 32. Several tests rely
//! on that lockstep to predict exactly which batch is recycled when.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ext_copy, port, send_all, tester_of, xstat};
use crate::driver::open;
use crate::mbuf::{Burst, BurstSlice, ExtSharedInfo, Mbuf, MbufPool};
use crate::mempool::Elem;
use crate::port::{
    Offloads, Port, PortConfig, PortError, RecycleRxInfo, RxQueue, TxQueue, recycle_mbufs,
};
use crate::test_support::TestPool;
use crate::tester::{Tester, TesterReport};

fn pool(name: &str, size: u32) -> MbufPool {
    TestPool::new(size).name(name).data_room(512).build()
}

/// A port of `pool`, 128 descriptors each way, with the fast-free offload
/// or without.
fn port_config(pool: &MbufPool, fast_free: bool) -> PortConfig {
    let mut c = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    if fast_free {
        c.tx_offloads |= Offloads::FAST_FREE;
    }
    c
}

/// The pool named `name` (1023 buffers), a started loopback port on it
/// (see [`port_config`]) whose device's tester, also named `name`, runs with
/// `options` (`count=3200,flows=16`), and that tester.
fn tester_loopback(
    name: &str,
    fast_free: bool,
    options: &str,
) -> (MbufPool, Guarded<Port>, Arc<Tester>) {
    let pool = pool(name, 1023);
    let config = port_config(&pool, fast_free);
    let port = guard(port(&format!("soft:tester={name},{options}"), config));
    (pool, port, tester_of(name))
}

/// `rx_recycled`, `tx_recycled`, `recycle_fallbacks` of a port.
fn recycle_counts(port: &Port) -> (u64, u64, u64) {
    (
        xstat(port, "rx_recycled"),
        xstat(port, "tx_recycled"),
        xstat(port, "recycle_fallbacks"),
    )
}

/// Owns what gives buffers back when dropped (ports, clones, the random
/// test's world) and leaks it instead when the test is failing: after a
/// recycling bug a ring may hold a buffer of another pool, or one a clone
/// also holds, and giving those back while unwinding can put into a mempool
/// ring that is already full, which never returns. So a broken rule fails
/// its test instead of hanging it.
struct Guarded<T>(Option<T>);

fn guard<T>(t: T) -> Guarded<T> {
    Guarded(Some(t))
}

impl<T> std::ops::Deref for Guarded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("present until dropped")
    }
}

impl<T> std::ops::DerefMut for Guarded<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("present until dropped")
    }
}

impl<T> Drop for Guarded<T> {
    fn drop(&mut self) {
        if let Some(t) = self.0.take()
            && std::thread::panicking()
        {
            std::mem::forget(t);
        }
    }
}

/// Asserts nothing was lost, reordered, duplicated, corrupted or foreign.
fn assert_clean(report: &TesterReport) {
    assert!(report.is_clean() && report.foreign == 0, "{report}");
}

/// Asserts that the tester got back exactly `count` frames, all clean
/// ([`assert_clean`]).
fn assert_received_clean(tester: &Tester, count: u64) {
    let report = tester.report();
    assert_eq!(report.received, count, "{report}");
    assert_clean(&report);
}

/// Asserts that the tester got frames back, all clean ([`assert_clean`]).
fn assert_some_received_clean(tester: &Tester) {
    let report = tester.report();
    assert!(report.received > 0, "{report}");
    assert_clean(&report);
}

/// Queue 0 of a port, both directions at once (a loopback).
fn loopback(port: &mut Port) -> (&mut dyn RxQueue, &mut dyn TxQueue) {
    let (rx, tx) = port.queues_mut().unwrap();
    (rx[0].as_mut(), tx[0].as_mut())
}

/// Rx queue `rx.1` of port `rx.0` and Tx queue `tx.1` of port `tx.0`,
/// together (the same port or two).
fn rx_tx(
    ports: &mut [Port],
    rx: (usize, usize),
    tx: (usize, usize),
) -> Result<(&mut dyn RxQueue, &mut dyn TxQueue), PortError> {
    if rx.0 == tx.0 {
        let (r, t) = ports[rx.0].queues_mut()?;
        return Ok((r[rx.1].as_mut(), t[tx.1].as_mut()));
    }
    let (lo, hi) = ports.split_at_mut(rx.0.max(tx.0));
    let (pr, pt) = if rx.0 < tx.0 {
        (&mut lo[rx.0], &mut hi[0])
    } else {
        (&mut hi[0], &mut lo[tx.0])
    };
    Ok((pr.rx_queue(rx.1)?, pt.tx_queue(tx.1)?))
}

/// One io-forwarding step with recycling: recycle from `tx` into `rx`,
/// receive into `burst`, send it all on `tx`. Returns (moved, received).
fn recycle_step(
    rx: &mut dyn RxQueue,
    tx: &mut dyn TxQueue,
    burst: &mut BurstSlice,
) -> (usize, usize) {
    let moved = recycle_mbufs(rx, tx).unwrap();
    let n = rx.rx_burst(burst);
    send_all(tx, burst);
    (moved, n)
}

/// Pauses `tester` and forwards a loopback port (recycling) until every frame
/// the tester sent has been received by the port: its Rx ring then holds
/// no frame, so a stop discards none. No extra `rx_burst` runs after the
/// last frame, so the slots it delivered stay due.
fn drain_loopback(port: &mut Port, tester: &Tester) {
    tester.pause(true);
    let mut burst: Burst<32> = Burst::new();
    for _ in 0..10_000 {
        if port.stats().rx_packets >= tester.report().sent {
            return;
        }
        let (rx, tx) = loopback(port);
        recycle_step(rx, tx, &mut burst);
    }
    panic!("the port did not drain: {}", tester.report());
}

/// 100 loopback steps on queue 0 of `port`, each: the recycle step, 32
/// frames received, `spoil(k, burst)` on them, the burst sent. `spoil` says
/// whether it put a buffer in the burst that must not be recycled; the
/// batch of such a step falls back at the next one, every other batch moves
/// whole, which is checked step by step and in the port's recycle counters
/// (batch 99 is never tried). Returns the spoiled steps.
fn spoiled_batches_fall_back(
    port: &mut Port,
    mut spoil: impl FnMut(usize, &mut Burst<32>) -> bool,
) -> Vec<usize> {
    let mut burst: Burst<32> = Burst::new();
    let mut spoiled = Vec::new();
    for k in 0..100usize {
        let (rx, tx) = loopback(port);
        let m = recycle_mbufs(rx, tx).unwrap();
        assert_eq!(rx.rx_burst(&mut burst), 32);
        let want = match k {
            0 => 0,
            _ if spoiled.last() == Some(&(k - 1)) => 0,
            _ => 32,
        };
        assert_eq!(m, want, "step {k}");
        if spoil(k, &mut burst) {
            spoiled.push(k);
        }
        send_all(tx, &mut burst);
    }
    let fallbacks = spoiled.iter().filter(|&&k| k < 99).count() as u64;
    let recycled = (99 - fallbacks) * 32;
    assert_eq!(recycle_counts(port), (recycled, recycled, fallbacks));
    spoiled
}

// ---- recycling happens ---------------------------------------------------

#[test]
fn recycling_moves_every_completed_batch_without_touching_the_mempool() {
    // Both Tx WQE formats free by completion in batches of tx_rs_thresh.
    for (fast_free, txmode) in [
        (false, "mpwqe"),
        (true, "mpwqe"),
        (false, "wqe"),
        (true, "wqe"),
    ] {
        let name = format!("t-rc-basic-{fast_free}-{txmode}");
        let (pool, mut port, tester) = tester_loopback(
            &name,
            fast_free,
            &format!("count=3200,flows=16,txmode={txmode}"),
        );
        let mut burst: Burst<32> = Burst::new();
        let mut moved = Vec::new();
        for _ in 0..1000 {
            if tester.report().received >= 3200 {
                break;
            }
            let (rx, tx) = loopback(&mut port);
            let (m, n) = recycle_step(rx, tx, &mut burst);
            assert_eq!(n, 32, "the generator fills every burst");
            moved.push(m);
            // The Rx ring (96 armed, 32 due) and the Tx batch just sent:
            // after the start's fill, not one buffer from the pool.
            assert_eq!(pool.available(), 1023 - 128, "step {}", moved.len());
        }
        // 100 bursts: the first step finds nothing due; each next one moves
        // the batch the step before sent, whole.
        assert_eq!(moved.len(), 100);
        assert_eq!(moved[0], 0);
        assert!(moved[1..].iter().all(|&m| m == 32), "{moved:?}");
        assert_clean(&tester.report());
        assert_eq!(tester.report().received, 3200);
        assert_eq!(recycle_counts(&port), (99 * 32, 99 * 32, 0));
        port.stop();
        assert!(pool.is_full(), "fast free {fast_free}, {txmode}");
    }
}

#[test]
fn between_polls_the_gauges_and_the_pool_account_for_every_buffer_while_recycling() {
    // A recycle step moves buffers from the Tx ring into the Rx ring; each
    // queue publishes its gauge as of its last burst, so after a whole poll
    // (recycle, receive, send) the Rx `posted` and Tx `waiting` gauges and
    // the pool count every buffer exactly once.
    for fast_free in [false, true] {
        let name = format!("t-rc-gauges-{fast_free}");
        let (pool, mut port, tester) = tester_loopback(&name, fast_free, "count=3200,flows=16");
        let mut burst: Burst<32> = Burst::new();
        let mut moved = 0;
        for k in 0..100 {
            let (rx, tx) = loopback(&mut port);
            let (m, n) = recycle_step(rx, tx, &mut burst);
            assert_eq!(n, 32, "step {k}");
            moved += m;
            let (posted, waiting) = super::gauges(&[&port]);
            assert_eq!(
                pool.available() as u64 + posted + waiting,
                1023,
                "step {k}: posted {posted}, waiting {waiting}"
            );
            // The Rx ring holds 96 armed buffers (32 slots due, their
            // buffers just sent); the Tx queue what it sent and has not
            // retired yet.
            assert_eq!(posted, 96, "step {k}");
            assert!(waiting >= 32, "step {k}: waiting {waiting}");
        }
        assert_eq!(moved, 99 * 32);
        assert_received_clean(&tester, 3200);
        port.stop();
        assert_eq!(super::gauges(&[&port]), (0, 0));
        assert!(pool.is_full(), "fast free {fast_free}");
    }
}

// ---- reference count above 1 ----------------------------------------------

#[test]
fn a_batch_holding_a_buffer_with_a_live_clone_falls_back_and_the_clone_keeps_its_bytes() {
    for fast_free in [false, true] {
        let name = &format!("t-rc-clone-{fast_free}");
        let (pool, mut port, tester) = tester_loopback(name, fast_free, "count=3200,flows=16");
        let mut burst: Burst<32> = Burst::new();
        // (clone, its bytes when cloned, the step after which it is dropped)
        let mut held: Guarded<Vec<(Mbuf, Vec<u8>, usize)>> = guard(Vec::new());
        let mut cloned_bursts = Vec::new();
        let mut moved = Vec::new();
        for k in 0..100 {
            let (rx, tx) = loopback(&mut port);
            moved.push(recycle_mbufs(rx, tx).unwrap());
            assert_eq!(rx.rx_burst(&mut burst), 32);
            // A buffer a clone still holds is never handed out again.
            for m in burst.iter() {
                let h = m.as_header_ptr();
                assert!(
                    held.iter().all(|(c, _, _)| c.as_header_ptr() != h),
                    "burst {k} received a buffer a clone holds"
                );
            }
            if k % 5 == 2 {
                // Clones of one or two packets, held for 1 to 4 more bursts.
                cloned_bursts.push(k);
                for i in [k % 32, (k * 7) % 32] {
                    let c = burst[i].try_clone().unwrap();
                    let bytes = c.data().to_vec();
                    held.push((c, bytes, k + 1 + k % 4));
                }
            }
            send_all(tx, &mut burst);
            for (c, bytes, _) in held.iter() {
                assert_eq!(c.data(), &bytes[..], "step {k}: a clone's bytes changed");
            }
            held.retain(|(_, _, until)| *until > k);
        }
        // Each batch is tried by the step after it was sent (batch 99 never
        // is): those with a live clone fall back, the others move whole.
        for (k, &m) in moved.iter().enumerate().skip(1) {
            let want = if cloned_bursts.contains(&(k - 1)) {
                0
            } else {
                32
            };
            assert_eq!(m, want, "step {k}");
        }
        let fallbacks = cloned_bursts.iter().filter(|&&k| k < 99).count() as u64;
        let recycled = (99 - fallbacks) * 32;
        assert_eq!(recycle_counts(&port), (recycled, recycled, fallbacks));
        assert!(fallbacks > 0);
        for (c, bytes, _) in held.iter() {
            assert_eq!(c.data(), &bytes[..], "a clone's bytes changed");
        }
        assert_received_clean(&tester, 3200);
        port.stop();
        assert_eq!(pool.available() as usize, 1023 - held.len());
        held.clear();
        assert!(pool.is_full());
    }
}

#[test]
fn a_batch_carrying_one_buffer_twice_falls_back_and_frees_each_reference() {
    for fast_free in [false, true] {
        let name = &format!("t-rc-twice-{fast_free}");
        let (pool, mut port, tester) = tester_loopback(name, fast_free, "count=3200,flows=16");
        let twice = spoiled_batches_fall_back(&mut port, |k, burst| {
            if k % 7 != 3 {
                return false;
            }
            // Packet i goes out twice (a second reference in place of the
            // packet after it, which is dropped): one buffer, two slots of
            // the batch, reference count 2 while both are in the ring.
            let i = k % 31;
            burst[i + 1] = burst[i].try_clone().unwrap();
            true
        });
        let report = tester.report();
        let n = twice.len() as u64;
        assert_eq!(
            (report.received, report.duplicates, report.lost),
            (3200 - n, n, n),
            "{report}"
        );
        assert_eq!(
            (report.corrupt, report.reordered, report.foreign),
            (0, 0, 0),
            "{report}"
        );
        port.stop();
        assert!(pool.is_full());
    }
}

// ---- foreign pools --------------------------------------------------------

#[test]
fn buffers_of_another_pool_are_never_recycled_with_or_without_fast_free() {
    for fast_free in [false, true] {
        let name = format!("t-rc-foreign-{fast_free}");
        let pool_a = pool(&format!("{name}-a"), 1023);
        let pool_b = pool(&format!("{name}-b"), 1023);
        let spec = format!("soft:tester={name},count=3200,flows=16");
        // P receives into pool A and sends what Q received (pool B); Q the
        // other way round.
        let mut ports = guard(vec![
            port(&spec, port_config(&pool_a, fast_free)),
            port(&spec, port_config(&pool_b, fast_free)),
        ]);
        let pools = [&pool_a, &pool_b];
        let tester = tester_of(&name);
        let mut burst: Burst<32> = Burst::new();
        let mut moved = [0usize; 2];
        for k in 0..100 {
            // Steps 0..60: each Rx queue is paired with its own port's Tx
            // queue, which carries the other pool. Then the pairing swaps
            // to the Tx queue that carries its own pool.
            let right = k >= 60;
            for (me, other) in [(0, 1), (1, 0)] {
                let src = if right { other } else { me };
                let (rx, tx) = rx_tx(&mut ports, (me, 0), (src, 0)).unwrap();
                let m = recycle_mbufs(rx, tx).unwrap();
                moved[right as usize] += m;
                let (rx, tx) = rx_tx(&mut ports, (me, 0), (other, 0)).unwrap();
                assert_eq!(rx.rx_burst(&mut burst), 32);
                assert!(right || m == 0, "step {k}: foreign buffers recycled");
                assert!(
                    burst.iter().all(|b| pools[me].owns(b)),
                    "step {k}: a foreign buffer was received"
                );
                send_all(tx, &mut burst);
            }
            if k == 59 {
                // Every batch completed so far was tried (the Rx queues had
                // 32 slots due each step) and fell back: P's Tx batch of
                // each step 0..=58 at the next step (59); Q's of each step
                // 0..=59 in the same step, Q's Rx coming second (60) —
                // step 0's at step 1, Q's Rx ring being still full then.
                assert_eq!(moved[0], 0);
                let fb: Vec<_> = ports.iter().map(recycle_counts).collect();
                assert_eq!(fb, [(0, 0, 59), (0, 0, 60)]);
            }
        }
        assert_eq!(moved[0], 0, "foreign buffers never move");
        // From step 61 both directions move a batch a step; at step 60
        // only Q's Rx does (P's batch of step 59 was tried already).
        assert_eq!(moved[1], 32 + 39 * 2 * 32, "own buffers do");
        // Counted on each side: P's Rx rearms what Q's Tx moved.
        let sum = |i: usize| -> u64 {
            ports
                .iter()
                .map(|port| {
                    let c = recycle_counts(port);
                    [c.0, c.1, c.2][i]
                })
                .sum()
        };
        assert_eq!((sum(0), sum(1)), (moved[1] as u64, moved[1] as u64));
        assert_eq!(sum(2), 59 + 60, "no fallback with the right pairing");
        assert_received_clean(&tester, 6400);
        drop(ports);
        assert!(
            pool_a.is_full() && pool_b.is_full(),
            "fast free {fast_free}"
        );
    }
}

#[test]
fn a_batch_mixing_pools_falls_back_wherever_the_foreign_buffer_sits() {
    for fast_free in [false, true] {
        let name = &format!("t-rc-mixed-{fast_free}");
        let pool_a = pool(&format!("{name}-a"), 1023);
        let pool_b = pool(&format!("{name}-b"), 255);
        // With fast free the queue learns pool B, the first packet's: every
        // batch then takes the checks, and still only pool A's move.
        let config = port_config(&pool_a, fast_free);
        let mut port = guard(port(
            &format!("soft:tester={name},count=3200,flows=16"),
            config,
        ));
        let tester = tester_of(name);
        // The batch the step before sent moves, unless it holds a buffer of
        // pool B.
        spoiled_batches_fall_back(&mut port, |k, burst| {
            assert!(burst.iter().all(|b| pool_a.owns(b)), "step {k}");
            // One packet in three of four bursts moves to a copy in pool B:
            // first, in the middle, last.
            let Some(i) = [Some(0), Some(15), Some(31), None][k % 4] else {
                return false;
            };
            burst[i] = pool_b.alloc_from_slice(burst[i].data()).unwrap();
            true
        });
        assert_received_clean(&tester, 3200);
        port.stop();
        assert!(pool_a.is_full() && pool_b.is_full());
    }
}

static EXT_FREED: AtomicU64 = AtomicU64::new(0);

/// The free callback of the external buffers below: counts.
fn ext_freed(_: NonNull<u8>, _: *mut ()) {
    EXT_FREED.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_batch_holding_a_buffer_with_an_external_buffer_attached_falls_back() {
    for fast_free in [false, true] {
        const N: usize = 40;
        const EXT_LEN: usize = 256;
        // The external memory and its infos outlive the port and every mbuf
        // (declared first, dropped last).
        let mut region = vec![0u8; N * EXT_LEN];
        let infos: Vec<ExtSharedInfo> = (0..N)
            // SAFETY: the callback only counts; it is sound from any thread.
            .map(|_| unsafe { ExtSharedInfo::new(ext_freed, std::ptr::null_mut()) })
            .collect();
        let name = &format!("t-rc-ext-{fast_free}");
        let (pool, mut port, tester) = tester_loopback(name, fast_free, "count=3200,flows=16");
        let base = region.as_mut_ptr();
        let freed_before = EXT_FREED.load(Ordering::SeqCst);
        // The batch the step before sent moves, unless it holds an mbuf
        // whose data is an external buffer.
        let mut used = 0;
        let ext = spoiled_batches_fall_back(&mut port, |k, burst| {
            if k % 3 != 1 || used == N {
                return false;
            }
            // A packet moves to a pool buffer with external data.
            let (i, j) = (used, k % 32);
            let buf = NonNull::new(base.wrapping_add(i * EXT_LEN)).unwrap();
            // SAFETY: slot `i` of `region`, EXT_LEN bytes, and `infos[i]`
            // live until the end of the test, after every mbuf; nothing
            // else uses them.
            burst[j] = unsafe { ext_copy(&pool, &burst[j], buf, EXT_LEN as u16, &infos[i]) };
            used += 1;
            true
        });
        assert_received_clean(&tester, 3200);
        port.stop();
        assert!(pool.is_full());
        // Every external buffer was let go once, by the normal free path.
        assert_eq!(
            EXT_FREED.load(Ordering::SeqCst) - freed_before,
            ext.len() as u64
        );
        assert!(infos.iter().all(|i| i.refcnt() == 0));
    }
}

// ---- the ring's wrap ------------------------------------------------------

/// What one configuration of the wrap test saw.
#[derive(Debug, Default)]
struct WrapSeen {
    /// Buffers recycled in all.
    moved: u64,
    /// Steps where a whole Tx batch was due but did not fit before the wrap.
    blocked_by_wrap: u64,
    /// Steps that moved something.
    steps_moving: u64,
    /// Steps that moved several Tx batches at once (one copy, one commit).
    multi_batch: u64,
}

/// Loopback forwarding of `count` frames through a port of `nb_rxd` Rx
/// descriptors, refilled by `rx_free_thresh`, whose Tx queue completes
/// batches of `tx_rs_thresh`; Rx bursts cycle through `bursts`. Each step
/// runs the recycle protocol call by call and checks what it may move.
fn forward_through_the_wrap(
    name: &str,
    nb_rxd: u16,
    rx_free_thresh: u32,
    tx_rs_thresh: u32,
    bursts: &[usize],
) -> WrapSeen {
    let count = 3072u64;
    let pool = pool(name, 1023);
    let config = PortConfig::new(Some(pool.clone()))
        .nb_rxd(nb_rxd)
        .nb_txd(128);
    let spec = format!(
        "soft:tester={name},count={count},flows=16,rx_free_thresh={rx_free_thresh},\
         tx_rs_thresh={tx_rs_thresh},tx_free_thresh={}",
        tx_rs_thresh.max(32)
    );
    let mut port = guard(port(&spec, config));
    let tester = tester_of(name);
    let mut burst: Burst<64> = Burst::new();
    let mut seen = WrapSeen::default();
    let ring = nb_rxd as u32;
    for k in 0..10_000 {
        if tester.report().received >= count {
            break;
        }
        let (rx, tx) = loopback(&mut port);
        let (head, due, room, moved) = {
            let mut info = rx.recycle_rx_info().unwrap();
            assert_eq!(info.ring_size(), ring);
            assert_eq!(info.refill_requirement(), rx_free_thresh);
            let (head, due, room) = (info.refill_head(), info.due(), info.room());
            let moved = tx.recycle_tx_mbufs(&mut info).unwrap() as u32;
            assert_eq!(info.refill_head(), head.wrapping_add(moved));
            assert_eq!(info.due(), due - moved);
            (head, due, room, moved)
        };
        // Never across the wrap, never past what was due, whole units of
        // both sides.
        assert!(moved <= room, "step {k}: moved {moved}, room {room}");
        assert!((head & (ring - 1)) + moved <= ring);
        assert_eq!(moved % tx_rs_thresh, 0);
        assert_eq!(moved % rx_free_thresh, 0);
        if !tx_rs_thresh.is_multiple_of(rx_free_thresh) {
            assert_eq!(moved, 0, "batches that are not whole refill units");
        }
        if due >= tx_rs_thresh && room < tx_rs_thresh {
            seen.blocked_by_wrap += 1;
        }
        assert_eq!(rx.recycle_rx_refill(), moved as usize);
        assert_eq!(rx.recycle_rx_refill(), 0, "rearmed once");
        if moved != 0 {
            seen.steps_moving += 1;
            seen.moved += moved as u64;
        }
        if moved > tx_rs_thresh {
            seen.multi_batch += 1;
        }
        let cap = bursts[k % bursts.len()];
        rx.rx_burst(burst.capped(cap));
        send_all(tx, &mut burst);
    }
    assert_received_clean(&tester, count);
    let (rxr, txr, fb) = recycle_counts(&port);
    assert_eq!((rxr, txr, fb), (seen.moved, seen.moved, 0), "{name}");
    port.stop();
    assert!(pool.is_full(), "{name}");
    seen
}

#[test]
fn a_tx_batch_larger_than_the_slots_due_never_moves() {
    // 64 descriptors refilled by 32, Tx batches of 64: at most 32 + 31
    // slots are due before a burst, so no batch ever fits.
    let seen = forward_through_the_wrap("t-rc-wrap-a", 64, 32, 64, &[32]);
    assert_eq!(seen.moved, 0, "{seen:?}");
    let seen = forward_through_the_wrap("t-rc-wrap-a2", 64, 32, 64, &[7, 13, 32]);
    assert_eq!(seen.moved, 0, "{seen:?}");
}

#[test]
fn a_batch_filling_the_whole_ring_moves_when_the_head_is_at_its_start() {
    // Bursts of 64 empty the ring of 64 and the refill head stays at 0:
    // every batch of 64 fits.
    let seen = forward_through_the_wrap("t-rc-wrap-b", 64, 32, 64, &[64]);
    assert!(seen.steps_moving >= 40, "{seen:?}");
    assert_eq!(seen.blocked_by_wrap, 0, "{seen:?}");
}

#[test]
fn a_batch_that_does_not_fit_before_the_wrap_waits_and_others_move() {
    // Refill units of 16 put the head anywhere on a 16 boundary: batches of
    // 32 due at slot 48 of 64 do not fit and wait.
    let seen = forward_through_the_wrap("t-rc-wrap-c", 64, 16, 32, &[7, 13, 32, 16]);
    assert!(seen.moved > 0, "{seen:?}");
    assert!(seen.blocked_by_wrap > 0, "{seen:?}");
    // Batches of 64 on a ring of 128 with units of 32: the head at 96
    // leaves room for 32 only.
    let seen = forward_through_the_wrap("t-rc-wrap-d", 128, 32, 64, &[64, 32, 64, 64]);
    assert!(seen.moved > 0, "{seen:?}");
    assert!(seen.blocked_by_wrap > 0, "{seen:?}");
}

#[test]
fn several_completed_batches_move_in_one_step_across_the_tx_rings_wrap() {
    // Batches of 32 on a Tx ring of 128, bursts of 32 then 64: the Tx
    // queue's oldest completed batch sits at 0, 32 or 96, so runs of two
    // batches start at 96 and cross its wrap, into an Rx ring of 256 whose
    // head stops short of its own wrap now and then. The tester checks
    // every frame came back once and intact.
    let seen = forward_through_the_wrap("t-rc-wrap-f", 256, 32, 32, &[32, 64, 64]);
    assert!(seen.multi_batch >= 20, "{seen:?}");
    assert!(seen.moved > 0, "{seen:?}");
}

#[test]
fn a_tx_batch_that_is_not_a_whole_number_of_refill_units_never_moves() {
    // Batches of 16 into refill units of 32.
    let seen = forward_through_the_wrap("t-rc-wrap-e", 128, 32, 16, &[32, 7]);
    assert_eq!(seen.moved, 0, "{seen:?}");
}

#[test]
fn a_step_falling_back_batch_by_batch_fills_up_to_the_rx_wrap_and_on_from_its_start() {
    // Batches of 16, one per step holding a clone (so the step goes batch
    // by batch), Rx bursts of 48 and 64 on a ring of 128 refilled by 16:
    // the refill head comes to sit 16 before the wrap with 48 or more due,
    // and one step fills up to the wrap, then from slot 0. The Rx queue
    // rearms both runs.
    let name = "t-rc-wrap-fallback";
    let (pool, mut port, tester) = tester_loopback(
        name,
        false,
        "count=6400,flows=16,rx_free_thresh=16,tx_rs_thresh=16,tx_free_thresh=32",
    );
    let mut burst: Burst<64> = Burst::new();
    let mut held: Guarded<Vec<Mbuf>> = guard(Vec::new());
    let mut crossed = 0;
    for k in 0..100 {
        let (rx, tx) = loopback(&mut port);
        let (head, room) = {
            let info = rx.recycle_rx_info().unwrap();
            (info.refill_head() & 127, info.due().min(128))
        };
        assert_eq!(rx.recycle_rx_refill(), 0);
        let moved = recycle_mbufs(rx, tx).unwrap() as u32;
        if head + moved > 128 {
            crossed += 1;
        }
        assert!(moved <= room, "step {k}");
        let n = rx.rx_burst(burst.capped([48, 64][k % 2]));
        assert!(n > 0, "step {k}");
        // The clone of the burst's first packet makes its Tx batch fail.
        held.clear();
        held.push(burst[0].try_clone().unwrap());
        send_all(tx, &mut burst);
    }
    assert!(crossed > 0, "no step filled across the Rx ring's wrap");
    held.clear();
    drain_loopback(&mut port, &tester);
    let (rxr, txr, fb) = recycle_counts(&port);
    assert_eq!(rxr, txr);
    assert!(rxr > 0 && fb > 0, "{rxr} {fb}");
    let report = tester.report();
    assert_clean(&report);
    port.stop();
    assert!(pool.is_full());
}

// ---- stopped queues -------------------------------------------------------

/// Forwards a loopback port with recycling for `steps` steps; returns the
/// buffers moved.
fn run_loopback(port: &mut Port, steps: usize) -> usize {
    let mut burst: Burst<32> = Burst::new();
    let mut moved = 0;
    for _ in 0..steps {
        let (rx, tx) = loopback(port);
        moved += recycle_step(rx, tx, &mut burst).0;
    }
    moved
}

#[test]
fn nothing_is_recycled_while_either_queue_is_stopped_and_recycling_resumes_after_a_restart() {
    let name = "t-rc-stopped";
    let (pool, mut port, tester) = tester_loopback(name, false, "flows=16");
    assert!(run_loopback(&mut port, 20) > 0);

    for stop_rx in [true, false] {
        // No frame in flight, so the stop discards none.
        drain_loopback(&mut port, &tester);
        // A step now would move a batch: 32 slots are due, and the Tx
        // queue holds whole batches, sent and not retired (one, or two
        // after the Rx queue's restart refilled its whole ring from the
        // pool and skipped a step).
        {
            let (rx, _) = loopback(&mut port);
            assert_eq!(rx.recycle_rx_info().unwrap().room(), 32);
        }
        let (_, txr, _) = recycle_counts(&port);
        let unretired = port.stats().tx_packets - txr;
        assert_eq!(unretired, if stop_rx { 32 } else { 64 });
        let available = pool.available();
        {
            let (rx, tx) = loopback(&mut port);
            if stop_rx {
                rx.stop();
                rx.stop(); // idempotent
            } else {
                tx.stop();
                tx.stop();
            }
        }
        // Stopped, the queue gave its buffers back: the whole Rx ring, or
        // the Tx queue's unretired batches.
        let back = if stop_rx { 128 - 32 } else { unretired };
        assert_eq!(pool.available() as u64, available as u64 + back);
        let before = (recycle_counts(&port), pool.available());
        {
            let (rx, tx) = loopback(&mut port);
            assert!(matches!(recycle_mbufs(rx, tx), Err(PortError::Stopped)));
            if stop_rx {
                assert!(matches!(rx.recycle_rx_info(), Err(PortError::Stopped)));
                assert_eq!(rx.recycle_rx_refill(), 0);
                let mut burst: Burst<32> = Burst::new();
                assert_eq!(rx.rx_burst(&mut burst), 0);
            } else {
                {
                    let mut info = rx.recycle_rx_info().unwrap();
                    let (head, due) = (info.refill_head(), info.due());
                    assert!(due > 0);
                    assert!(matches!(
                        tx.recycle_tx_mbufs(&mut info),
                        Err(PortError::Stopped)
                    ));
                    assert_eq!((info.refill_head(), info.due()), (head, due));
                }
                assert_eq!(rx.recycle_rx_refill(), 0, "nothing was committed");
            }
        }
        assert_eq!(
            (recycle_counts(&port), pool.available()),
            before,
            "nothing moved"
        );
        {
            let (rx, tx) = loopback(&mut port);
            if stop_rx {
                rx.start().unwrap();
                rx.start().unwrap(); // idempotent
            } else {
                tx.start().unwrap();
                // A restarted Tx queue has completed nothing yet.
                assert_eq!(recycle_mbufs(rx, tx).unwrap(), 0);
            }
        }
        tester.pause(false);
        let (rx0, tx0, _) = recycle_counts(&port);
        assert!(run_loopback(&mut port, 20) > 0, "stop rx {stop_rx}");
        let (rx1, tx1, fb) = recycle_counts(&port);
        assert!(rx1 > rx0 && tx1 > tx0);
        assert_eq!((rx1, fb), (tx1, 0));
    }
    // A stopped port lends no queue at all, and still says what they can do.
    drain_loopback(&mut port, &tester);
    port.stop();
    assert!(matches!(port.rx_queue(0), Err(PortError::Stopped)));
    assert!(port.rx_queue_recycles(0).unwrap() && port.tx_queue_recycles(0).unwrap());
    assert!(pool.is_full());
    assert_some_received_clean(&tester);
}

// ---- a stop in the middle of a step ---------------------------------------

#[test]
fn a_queue_stopped_between_the_commit_and_the_refill_leaks_nothing() {
    let name = "t-rc-middle";
    let (pool, mut port, tester) = tester_loopback(name, false, "flows=16");
    let mut lost_commits = 0;
    // First the Rx queue alone stops, then the whole port.
    for whole_port in [false, true] {
        assert!(run_loopback(&mut port, 20) > 0);
        drain_loopback(&mut port, &tester);
        let (rx, tx) = loopback(&mut port);
        let moved = {
            let mut info = rx.recycle_rx_info().unwrap();
            tx.recycle_tx_mbufs(&mut info).unwrap()
        };
        assert_eq!(moved, 32, "the last batch sent, into the slots due");
        lost_commits += moved as u64;
        // No recycle_rx_refill: the Rx queue owns the buffers unarmed.
        if whole_port {
            port.stop();
            assert!(pool.is_full());
        } else {
            let available = pool.available();
            rx.stop();
            // 96 armed and the 32 committed.
            assert_eq!(pool.available(), available + 128);
            let (rx, _) = loopback(&mut port);
            rx.start().unwrap();
        }
        let (rxr, txr, _) = recycle_counts(&port);
        assert_eq!(txr, rxr + lost_commits, "committed, never rearmed");
        tester.pause(false);
    }
    assert!(pool.is_full(), "the port stopped");
    port.start().unwrap();
    assert!(
        run_loopback(&mut port, 20) > 0,
        "recycling works after the restart"
    );
    drain_loopback(&mut port, &tester);
    port.stop();
    assert!(pool.is_full());
    assert_some_received_clean(&tester);
}

#[test]
fn a_tx_queue_stopped_between_two_recycle_steps_gives_its_batches_back() {
    let name = "t-rc-txstop";
    let (pool, mut port, tester) = tester_loopback(name, false, "flows=16");
    let mut burst: Burst<32> = Burst::new();
    for round in 0..5 {
        assert!(run_loopback(&mut port, 10 + round) > 0);
        // A step that moves, then sends another batch.
        {
            let (rx, tx) = loopback(&mut port);
            assert_eq!(recycle_step(rx, tx, &mut burst), (32, 32));
        }
        let held = pool.available();
        let (rx, tx) = loopback(&mut port);
        tx.stop();
        // The completed batch went back to the pool.
        assert_eq!(pool.available(), held + 32);
        assert!(matches!(recycle_mbufs(rx, tx), Err(PortError::Stopped)));
        tx.start().unwrap();
        assert_eq!(recycle_mbufs(rx, tx).unwrap(), 0, "nothing completed yet");
        // Frames received now go out on the restarted queue.
        assert_eq!(rx.rx_burst(&mut burst), 32);
        send_all(tx, &mut burst);
        assert_eq!(recycle_mbufs(rx, tx).unwrap(), 32, "recycling resumes");
    }
    let (rxr, txr, fb) = recycle_counts(&port);
    assert_eq!((rxr, fb), (txr, 0));
    drain_loopback(&mut port, &tester);
    port.stop();
    assert!(pool.is_full());
    assert_some_received_clean(&tester);
}

// ---- whatever safe code does with the steps ---------------------------------

/// A distinct address that is no buffer, for slots written and never
/// committed.
fn marker(i: usize) -> Elem {
    Elem::from_ptr(NonNull::new(std::ptr::without_provenance_mut(0x1000 + i * 8)).unwrap())
}

/// A Tx queue failing half-way through a recycle step: it writes markers
/// into every slot it may fill, lets the queue it wraps move its completed
/// batches (over the markers), then panics before the Rx queue's refill.
struct PanickingTx<'a>(&'a mut dyn TxQueue);

impl TxQueue for PanickingTx<'_> {
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        self.0.tx_burst(burst)
    }

    fn start(&mut self) -> Result<(), PortError> {
        self.0.start()
    }

    fn stop(&mut self) {
        self.0.stop();
    }

    fn recycle_tx_mbufs(&mut self, rx: &mut RecycleRxInfo<'_>) -> Result<usize, PortError> {
        if let Some(slots) = rx.slots(rx.room()) {
            for (i, e) in slots.iter_mut().enumerate() {
                *e = marker(i);
            }
        }
        let moved = self.0.recycle_tx_mbufs(rx)?;
        panic!("a Tx queue failing after moving {moved} buffers");
    }
}

// A view has no drop glue (forgetting it is dropping it, which is why a
// forget loses nothing); the calls spell out what a caller may do.
#[allow(clippy::forget_non_drop, clippy::drop_non_drop)]
#[test]
fn whatever_safe_code_does_with_the_recycle_steps_every_buffer_comes_back() {
    let name = "t-rc-safe";
    let pool_a = pool(&format!("{name}-a"), 2047);
    let pool_b = pool(&format!("{name}-b"), 1023);
    let names = [0, 1, 2].map(|i| format!("{name}-{i}"));
    // Ports 0 and 1 receive into pool A (1 with fast free), port 2 into B.
    let configs = [
        port_config(&pool_a, false),
        port_config(&pool_a, true),
        port_config(&pool_b, false),
    ];
    let mut ports = guard(
        names
            .iter()
            .zip(configs)
            .map(|(n, c)| port(&format!("soft:tester={n},flows=16"), c))
            .collect::<Vec<_>>(),
    );
    let testers = names.each_ref().map(|n| tester_of(n));
    // Forwards port `i` with recycling, then drains it: its Tx queue holds
    // the completed batch it sent last, its Rx queue has 32 slots due.
    let settle = |ports: &mut [Port], i: usize| {
        testers[i].pause(false);
        assert!(run_loopback(&mut ports[i], 10) > 0, "port {i} recycles");
        drain_loopback(&mut ports[i], &testers[i]);
        let (rx, _) = loopback(&mut ports[i]);
        assert_eq!(rx.recycle_rx_info().unwrap().room(), 32, "port {i}");
    };
    // Committed into an Rx queue and never rearmed: the queue's stop gave
    // them back.
    let mut unrearmed = 0;

    // A view forgotten after a commit: the queue owns the buffers already.
    settle(&mut ports, 0);
    {
        let (rx, tx) = loopback(&mut ports[0]);
        let mut v = rx.recycle_rx_info().unwrap();
        assert_eq!(tx.recycle_tx_mbufs(&mut v).unwrap(), 32);
        std::mem::forget(v);
        assert_eq!(rx.recycle_rx_refill(), 32, "rearmed by the next call");
        assert_eq!(rx.recycle_rx_refill(), 0, "once");
    }

    // The steps in the wrong order, a view forgotten before any commit.
    settle(&mut ports, 0);
    {
        let (rx, tx) = loopback(&mut ports[0]);
        assert_eq!(rx.recycle_rx_refill(), 0, "a refill before any view");
        std::mem::forget(rx.recycle_rx_info().unwrap());
        let mut v = rx.recycle_rx_info().unwrap();
        assert_eq!(tx.recycle_tx_mbufs(&mut v).unwrap(), 32);
        assert_eq!(tx.recycle_tx_mbufs(&mut v).unwrap(), 0, "no room left");
        drop(v);
        // A new view before the refill: the queue rearms the commit first.
        let v = rx.recycle_rx_info().unwrap();
        assert_eq!((v.due(), v.room()), (0, 0));
        drop(v);
        assert_eq!(rx.recycle_rx_refill(), 0, "rearmed already");
    }

    // Slots written and never committed are not taken for buffers: the
    // next refill takes buffers from the pool over them.
    settle(&mut ports, 0);
    {
        let (rx, _) = loopback(&mut ports[0]);
        let mut v = rx.recycle_rx_info().unwrap();
        for (i, e) in v.slots(32).unwrap().iter_mut().enumerate() {
            *e = marker(i);
        }
        drop(v);
        let available = pool_a.available();
        let mut burst: Burst<32> = Burst::new();
        assert_eq!(rx.rx_burst(&mut burst), 0, "the tester is paused");
        assert_eq!(pool_a.available(), available - 32, "refilled from the pool");
    }

    // A Tx queue panicking between the commit and the refill.
    settle(&mut ports, 0);
    {
        let (rx, tx) = loopback(&mut ports[0]);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            recycle_mbufs(&mut *rx, &mut PanickingTx(&mut *tx))
        }));
        assert!(r.is_err(), "the Tx queue panicked");
        assert_eq!(rx.recycle_rx_refill(), 32, "the commit is the Rx queue's");
    }

    // A Tx queue of another pool, with fast free or without, feeds nothing
    // and frees its batch.
    for i in 0..3 {
        settle(&mut ports, i);
    }
    for (rx_port, tx_port, pool) in [(0, 2, &pool_b), (2, 0, &pool_a), (2, 1, &pool_a)] {
        let fallbacks = recycle_counts(&ports[tx_port]).2;
        let available = pool.available();
        let (rx, tx) = rx_tx(&mut ports, (rx_port, 0), (tx_port, 0)).unwrap();
        assert_eq!(
            recycle_mbufs(rx, tx).unwrap(),
            0,
            "{tx_port} into {rx_port}"
        );
        // Every completed batch (two once a refill from the pool skipped
        // a step) falls back whole.
        let fell_back = recycle_counts(&ports[tx_port]).2 - fallbacks;
        assert!(fell_back >= 1, "{tx_port} into {rx_port}");
        assert_eq!(pool.available() as u64, available as u64 + 32 * fell_back);
    }

    // A Tx queue of the same pool on another port, whose port stops while
    // the view is still lent.
    settle(&mut ports, 0);
    settle(&mut ports, 1);
    {
        let (a, b) = ports.split_at_mut(1);
        let rx = a[0].rx_queue(0).unwrap();
        let mut v = rx.recycle_rx_info().unwrap();
        assert_eq!(
            b[0].tx_queue(0).unwrap().recycle_tx_mbufs(&mut v).unwrap(),
            32
        );
        b[0].stop();
        drop(v);
        assert_eq!(rx.recycle_rx_refill(), 32);
        b[0].start().unwrap();
    }

    // The Rx port stopped between that commit and the refill.
    settle(&mut ports, 0);
    settle(&mut ports, 1);
    {
        let (a, b) = ports.split_at_mut(1);
        let mut v = a[0].rx_queue(0).unwrap().recycle_rx_info().unwrap();
        assert_eq!(
            b[0].tx_queue(0).unwrap().recycle_tx_mbufs(&mut v).unwrap(),
            32
        );
        unrearmed += 32;
    }
    ports[0].stop();
    ports[0].start().unwrap();

    // Every port still recycles; stopped, every pool is full.
    for i in 0..3 {
        settle(&mut ports, i);
    }
    for p in ports.iter_mut() {
        p.stop();
    }
    assert!(pool_a.is_full(), "pool A: {} of 2047", pool_a.available());
    assert!(pool_b.is_full(), "pool B: {} of 1023", pool_b.available());
    let (rxr, txr) = ports.iter().fold((0, 0), |(r, t), p| {
        let (pr, pt, _) = recycle_counts(p);
        (r + pr, t + pt)
    });
    assert_eq!(
        rxr + unrearmed,
        txr,
        "each buffer moved was rearmed or freed"
    );
    for tester in &testers {
        assert_some_received_clean(tester);
    }
}

// ---- queues without recycling ---------------------------------------------

#[test]
fn recycling_with_a_null_pair_or_pcap_queue_is_unsupported_and_loses_nothing() {
    let name = "t-rc-unsup";
    let pool = pool(name, 2047);
    let config = || port_config(&pool, false);
    let pcap_path =
        std::env::temp_dir().join(format!("sluice-{}-rc-unsup.pcap", std::process::id()));
    let pcap_spec = format!("pcap:tx={}", pcap_path.display());
    // ports: soft, null, pair A, pair B, pcap
    let mut ports = guard(vec![
        open(&format!("soft:tester={name},flows=16"), config()).unwrap(),
        open("null", config()).unwrap(),
        open("pair:name=rc-unsup", config()).unwrap(),
        open("pair:name=rc-unsup", config()).unwrap(),
        open(&pcap_spec, PortConfig::new(None)).unwrap(),
    ]);
    // Any time, started or not.
    for (i, p) in ports.iter().enumerate() {
        let soft = i == 0;
        assert_eq!(p.rx_queue_recycles(0).unwrap(), soft, "port {i}");
        assert_eq!(p.tx_queue_recycles(0).unwrap(), soft, "port {i}");
        assert!(matches!(
            p.rx_queue_recycles(1),
            Err(PortError::NoQueue {
                dir: "Rx",
                queue: 1,
                count: 1
            })
        ));
        assert!(matches!(
            p.tx_queue_recycles(7),
            Err(PortError::NoQueue {
                dir: "Tx",
                queue: 7,
                count: 1
            })
        ));
    }
    for p in ports.iter_mut() {
        p.start().unwrap();
    }
    assert!(ports[0].rx_queue_recycles(0).unwrap());
    assert!(!ports[1].rx_queue_recycles(0).unwrap());
    let t = tester_of(name);
    let unsupported = |r: Result<usize, PortError>| match r {
        Err(PortError::Unsupported(m)) => assert!(m.contains("does not support"), "{m}"),
        other => panic!("not Unsupported: {other:?}"),
    };
    for round in 0..3 {
        assert!(run_loopback(&mut ports[0], 10) > 0);
        // Rx slots due and a completed Tx batch on the soft port: a step
        // with any other queue refuses and leaves them as they are.
        let before = (recycle_counts(&ports[0]), pool.available());
        for other in 1..ports.len() {
            let (rx, tx) = rx_tx(&mut ports, (0, 0), (other, 0)).unwrap();
            unsupported(recycle_mbufs(rx, tx));
            let (rx, tx) = rx_tx(&mut ports, (other, 0), (0, 0)).unwrap();
            unsupported(recycle_mbufs(rx, tx));
        }
        let (rx, tx) = rx_tx(&mut ports, (1, 0), (2, 0)).unwrap();
        unsupported(recycle_mbufs(rx, tx));
        assert_eq!(
            (recycle_counts(&ports[0]), pool.available()),
            before,
            "round {round}"
        );
        let (rx, tx) = loopback(&mut ports[0]);
        assert_eq!(
            recycle_mbufs(rx, tx).unwrap(),
            32,
            "the batch was still there"
        );
    }
    let (rxr, txr, fb) = recycle_counts(&ports[0]);
    assert_eq!((rxr, fb), (txr, 0));
    drain_loopback(&mut ports[0], &t);
    drop(ports);
    let _ = std::fs::remove_file(&pcap_path);
    assert!(pool.is_full());
    assert_clean(&t.report());
}

// ---- any Tx queue feeds any Rx queue --------------------------------------

#[test]
fn any_tx_queue_feeds_any_rx_queue_across_ports_with_the_pairing_changed_every_step() {
    let name = "t-rc-cross";
    let pool = pool(name, 4095);
    let config = PortConfig::new(Some(pool.clone()))
        .queues(2, 2)
        .nb_rxd(128)
        .nb_txd(128);
    let spec = format!("soft:tester={name},count=8000,flows=64");
    let mut ports = guard(vec![port(&spec, config.clone()), port(&spec, config)]);
    let t = tester_of(name);
    let queues = [(0, 0), (0, 1), (1, 0), (1, 1)];
    // moved[rx][tx] over the four queues of each direction.
    let mut moved = [[0usize; 4]; 4];
    let mut burst: Burst<32> = Burst::new();
    for s in 0..10_000 {
        if t.report().received >= 16_000 {
            break;
        }
        for (r, &rxq) in queues.iter().enumerate() {
            // A new pairing each step: all sixteen in turn.
            let tq = (r + s + s / 4) % 4;
            let (rx, tx) = rx_tx(&mut ports, rxq, queues[tq]).unwrap();
            moved[r][tq] += recycle_mbufs(rx, tx).unwrap();
            // Fixed forwarding: port p's queue q to the other port's q.
            let (rx, tx) = rx_tx(&mut ports, rxq, (1 - rxq.0, rxq.1)).unwrap();
            rx.rx_burst(&mut burst);
            send_all(tx, &mut burst);
        }
    }
    for (r, row) in moved.iter().enumerate() {
        for (tq, &m) in row.iter().enumerate() {
            assert!(
                m > 0,
                "Tx queue {:?} never fed Rx queue {:?}",
                queues[tq],
                queues[r]
            );
        }
    }
    let total: usize = moved.iter().flatten().sum();
    let rxr: u64 = ports.iter().map(|p| recycle_counts(p).0).sum();
    let txr: u64 = ports.iter().map(|p| recycle_counts(p).1).sum();
    assert_eq!((rxr, txr), (total as u64, total as u64));
    assert_received_clean(&t, 16_000);
    drop(ports);
    assert!(pool.is_full());
}

// ---- the long randomized test ---------------------------------------------

/// xorshift64*: a small reproducible random stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

/// An Rx queue of the randomized test.
struct RxAt {
    port: usize,
    q: usize,
    /// Index of its pool in `World::pools`.
    pool: usize,
    /// `rx_free_thresh` of its port.
    unit: u32,
    /// The Tx queue (index in `World::txqs`) its packets go to: fixed, so
    /// each flow keeps its order.
    dest: usize,
}

/// A Tx queue of the randomized test.
struct TxAt {
    port: usize,
    q: usize,
    /// `tx_rs_thresh` of its port.
    rs: u32,
    /// Bit `k`: it may carry buffers of pool `k`.
    carries: u32,
}

/// A clone held by the application.
struct Held {
    m: Mbuf,
    bytes: Vec<u8>,
    until: usize,
}

impl Held {
    fn intact(&self) -> bool {
        self.m.data() == &self.bytes[..]
    }
}

/// Ports, the test's model of which queues are up, and its accounting.
struct World {
    ports: Vec<Port>,
    pools: Vec<MbufPool>,
    rxqs: Vec<RxAt>,
    txqs: Vec<TxAt>,
    port_up: Vec<bool>,
    rx_up: Vec<bool>,
    tx_up: Vec<bool>,
    /// When a stopped port, Rx queue or Tx queue starts again.
    port_back: Vec<Option<usize>>,
    rx_back: Vec<Option<usize>>,
    tx_back: Vec<Option<usize>>,
    /// Per Rx queue: received, not yet sent (in order).
    pending: Vec<Burst<32>>,
    held: Vec<Held>,
    /// Frames the test dropped (drained from an Rx queue about to stop
    /// with no room left in its pending burst).
    dropped: u64,
    /// Per Rx queue: buffers committed by a step cut short, not rearmed.
    uncounted: Vec<u64>,
    /// Committed buffers an Rx stop gave back before rearming them.
    discarded_commits: u64,
    /// Per Rx queue: buffers recycled into it.
    moved_into: Vec<u64>,
    /// Stops of Rx queues, Tx queues, ports; steps cut after the commit.
    stops: [u64; 3],
    cut_steps: u64,
}

impl World {
    fn rx_live(&self, i: usize) -> bool {
        self.port_up[self.rxqs[i].port] && self.rx_up[i]
    }

    fn tx_live(&self, j: usize) -> bool {
        self.port_up[self.txqs[j].port] && self.tx_up[j]
    }

    /// One recycle step from Tx queue `j` into Rx queue `i`: the whole
    /// protocol, or (`cut`) only the lend and the move, with the refill
    /// done or not. Checks the outcome against the model; returns the
    /// buffers moved.
    fn recycle(&mut self, i: usize, j: usize, cut: Option<bool>) -> usize {
        let (r, t) = (&self.rxqs[i], &self.txqs[j]);
        let ports_up = self.port_up[r.port] && self.port_up[t.port];
        let stopped = !self.rx_up[i] || !self.tx_up[j];
        let (rx, tx) = match rx_tx(&mut self.ports, (r.port, r.q), (t.port, t.q)) {
            Ok(q) => {
                assert!(ports_up);
                q
            }
            Err(PortError::Stopped) => {
                assert!(!ports_up);
                return 0;
            }
            Err(e) => panic!("{e}"),
        };
        let result = match cut {
            None => recycle_mbufs(rx, tx),
            Some(refill) => {
                let moved = match rx.recycle_rx_info() {
                    Ok(mut info) => tx.recycle_tx_mbufs(&mut info),
                    Err(e) => Err(e),
                };
                if let Ok(n) = moved {
                    self.cut_steps += 1;
                    if refill {
                        assert_eq!(rx.recycle_rx_refill(), n);
                    } else {
                        self.uncounted[i] = n as u64;
                    }
                }
                moved
            }
        };
        if self.rx_up[i] && (cut.is_none() || result.is_err()) {
            // The Rx queue lent its slots: it rearmed what an earlier cut
            // step had left.
            self.uncounted[i] = 0;
        }
        match result {
            Err(PortError::Stopped) => {
                assert!(stopped, "rx {i} tx {j}: refused, both queues up");
                0
            }
            Ok(n) => {
                assert!(!stopped, "rx {i} tx {j}: a stopped queue recycled");
                assert_eq!(n as u32 % t.rs, 0);
                if t.carries & (1 << r.pool) == 0 || !t.rs.is_multiple_of(r.unit) {
                    assert_eq!(n, 0, "rx {i} tx {j}: moved buffers it must not");
                }
                self.moved_into[i] += n as u64;
                n
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// Receives into Rx queue `i`'s pending burst (up to `cap`) and sends
    /// what it can, once, maybe holding a clone of one packet first.
    /// Returns (received, sent).
    fn forward(&mut self, i: usize, s: usize, rng: &mut Rng) -> (usize, usize) {
        if !self.rx_live(i) {
            return (0, 0);
        }
        let (p, q) = (self.rxqs[i].port, self.rxqs[i].q);
        let before = self.pending[i].len();
        let cap = (1 + rng.below(32)).max(before);
        let got = self.ports[p]
            .rx_queue(q)
            .unwrap()
            .rx_burst(self.pending[i].capped(cap));
        self.uncounted[i] = 0;
        let pool = &self.pools[self.rxqs[i].pool];
        assert!(
            self.pending[i].iter().skip(before).all(|m| pool.owns(m)),
            "step {s}: Rx queue {i} received a foreign buffer"
        );
        let d = self.rxqs[i].dest;
        if !self.tx_live(d) || self.pending[i].is_empty() {
            return (got, 0);
        }
        // Clones of packets bound for any queue: on a fast-free one they
        // break its promise (reference count 1), which its screen catches.
        if rng.one_in(5) {
            let k = rng.below(self.pending[i].len());
            let m = self.pending[i][k].try_clone().unwrap();
            let bytes = m.data().to_vec();
            let until = s + 1 + rng.below(6);
            self.held.push(Held { m, bytes, until });
        }
        let (tp, tq) = (self.txqs[d].port, self.txqs[d].q);
        let sent = self.ports[tp]
            .tx_queue(tq)
            .unwrap()
            .tx_burst(&mut self.pending[i]);
        (got, sent)
    }

    /// Receives every frame Rx queue `i`'s ring holds into its pending
    /// burst; what does not fit is dropped and counted. The tester must be
    /// paused: then a burst that comes back short has read every frame the
    /// device wrote (its step, just before, had no generator frame to add
    /// and moved what it could from a wire lane), and no device step runs
    /// before the queue's next call. Stopping after the short burst, not
    /// after one more, leaves the slots it delivered due — so a recycle
    /// commit can still land just before the stop.
    fn drain_rx(&mut self, i: usize) {
        let (p, q) = (self.rxqs[i].port, self.rxqs[i].q);
        let rx = self.ports[p].rx_queue(q).unwrap();
        let mut tmp: Burst<32> = Burst::new();
        self.uncounted[i] = 0;
        for _ in 0..1000 {
            let n = rx.rx_burst(&mut tmp);
            for m in tmp.drain_front(n) {
                if self.pending[i].push(m).is_err() {
                    self.dropped += 1;
                }
            }
            if n < 32 {
                return;
            }
        }
        panic!("Rx queue {i} did not drain");
    }

    /// Stops Rx queue `i` (alone, through the queue trait) after draining
    /// it, sometimes right after a recycle commit that was not rearmed.
    fn stop_rx(&mut self, i: usize, s: usize, t: &Tester, rng: &mut Rng) {
        t.pause(true);
        self.drain_rx(i);
        if rng.one_in(2) {
            let j = rng.below(self.txqs.len());
            self.recycle(i, j, Some(false));
        }
        let (p, q) = (self.rxqs[i].port, self.rxqs[i].q);
        let rx: &mut dyn RxQueue = self.ports[p].rx_queue(q).unwrap();
        rx.stop();
        self.discarded_commits += std::mem::take(&mut self.uncounted[i]);
        self.rx_up[i] = false;
        self.rx_back[i] = Some(s + 1 + rng.below(20));
        self.stops[0] += 1;
        t.pause(false);
    }

    fn stop_tx(&mut self, j: usize, s: usize, rng: &mut Rng) {
        // Nothing is in flight on a Tx queue of an inline device: each
        // tx_burst (at most 32 packets) is sent before it returns.
        let (p, q) = (self.txqs[j].port, self.txqs[j].q);
        let tx: &mut dyn TxQueue = self.ports[p].tx_queue(q).unwrap();
        tx.stop();
        self.tx_up[j] = false;
        self.tx_back[j] = Some(s + 1 + rng.below(20));
        self.stops[1] += 1;
    }

    fn stop_port(&mut self, p: usize, s: usize, t: &Tester, rng: &mut Rng) {
        t.pause(true);
        let mine: Vec<usize> = (0..self.rxqs.len())
            .filter(|&i| self.rxqs[i].port == p && self.rx_up[i])
            .collect();
        for &i in &mine {
            self.drain_rx(i);
        }
        if !mine.is_empty() && rng.one_in(2) {
            let i = mine[rng.below(mine.len())];
            let j = rng.below(self.txqs.len());
            self.recycle(i, j, Some(false));
        }
        self.ports[p].stop();
        for i in mine {
            self.discarded_commits += std::mem::take(&mut self.uncounted[i]);
        }
        self.port_up[p] = false;
        self.port_back[p] = Some(s + 1 + rng.below(20));
        self.stops[2] += 1;
        t.pause(false);
    }

    fn start_port(&mut self, p: usize) {
        self.ports[p].start().unwrap();
        self.port_up[p] = true;
        self.port_back[p] = None;
        // Port::start starts every queue, those stopped alone too.
        for i in 0..self.rxqs.len() {
            if self.rxqs[i].port == p {
                self.rx_up[i] = true;
                self.rx_back[i] = None;
            }
        }
        for j in 0..self.txqs.len() {
            if self.txqs[j].port == p {
                self.tx_up[j] = true;
                self.tx_back[j] = None;
            }
        }
    }

    /// Starts what is due at step `s` (everything when `s` is `usize::MAX`).
    fn restart_due(&mut self, s: usize) {
        for p in 0..self.ports.len() {
            if self.port_back[p].is_some_and(|b| b <= s) {
                self.start_port(p);
            }
        }
        for i in 0..self.rxqs.len() {
            if self.rx_back[i].is_some_and(|b| b <= s) && self.port_up[self.rxqs[i].port] {
                let (p, q) = (self.rxqs[i].port, self.rxqs[i].q);
                self.ports[p].rx_queue(q).unwrap().start().unwrap();
                self.rx_up[i] = true;
                self.rx_back[i] = None;
            }
        }
        for j in 0..self.txqs.len() {
            if self.tx_back[j].is_some_and(|b| b <= s) && self.port_up[self.txqs[j].port] {
                let (p, q) = (self.txqs[j].port, self.txqs[j].q);
                self.ports[p].tx_queue(q).unwrap().start().unwrap();
                self.tx_up[j] = true;
                self.tx_back[j] = None;
            }
        }
    }

    /// Drops the clones due at step `s`, checking their bytes first.
    fn release_clones(&mut self, s: usize) {
        assert!(
            self.held.iter().all(Held::intact),
            "step {s}: a held clone's bytes changed"
        );
        self.held.retain(|h| h.until > s);
    }

    /// One forwarding pass over every Rx queue in a random order, each
    /// preceded by a recycle step from a random Tx queue. Returns the
    /// packets received plus sent.
    fn pass(&mut self, s: usize, rng: &mut Rng) -> usize {
        let mut order: Vec<usize> = (0..self.rxqs.len()).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, rng.below(k + 1));
        }
        let mut moved = 0;
        for i in order {
            let j = rng.below(self.txqs.len());
            let cut = rng.one_in(10).then(|| rng.one_in(2));
            self.recycle(i, j, cut);
            let (got, sent) = self.forward(i, s, rng);
            moved += got + sent;
        }
        moved
    }
}

/// Five soft ports — three on one tester (two sharing a pool, one with fast
/// free), two cabled by a wire, each with its own pool and `fc=off` —
/// forward a fixed table while every step pairs each Rx queue with a random
/// Tx queue for recycling, holds random clones for a few steps, and stops
/// and starts random queues and ports.
///
/// Loss is accounted exactly: before an Rx queue (or a port) stops, the
/// tester is paused and the queue drained into its pending burst, so the
/// stop discards no frame; the frames that did not fit there are dropped
/// and counted. A Tx queue holds no frame in flight (inline device). The
/// wire's receivers have flow control off, so a frame finding a full lane
/// or ring is dropped by the device and counted in `rx_missed` (with flow
/// control on, a stopped receiver would hold frames in its sender's Tx
/// ring, which a stop of that Tx queue would then discard uncounted). So
/// at the end `lost` is exactly the test's drops plus `rx_missed`.
#[test]
fn a_long_random_run_of_pairings_clones_and_stops_delivers_every_packet_once_and_intact() {
    let name = "t-rc-rand";
    let pools: Vec<MbufPool> = ["a", "b", "c", "d"]
        .iter()
        .zip([2047, 1023, 511, 511])
        .map(|(n, size)| pool(&format!("rc-rand-{n}"), size))
        .collect();
    let cfg = |pool: usize, rxq: u16, txq: u16, fast_free: bool| {
        let mut c = PortConfig::new(Some(pools[pool].clone()))
            .queues(rxq, txq)
            .nb_rxd(128)
            .nb_txd(128);
        if fast_free {
            c.tx_offloads |= Offloads::FAST_FREE;
        }
        c
    };
    let tester = format!("soft:tester={name},flows=16");
    let mut ports = vec![
        port(&tester, cfg(0, 2, 2, false)),
        port(
            &format!("{tester},rx_free_thresh=16,tx_rs_thresh=16,txmode=wqe"),
            cfg(0, 2, 2, true),
        ),
        port(
            &format!("{tester},tx_rs_thresh=64,tx_free_thresh=64"),
            cfg(1, 2, 1, false),
        ),
        // The wire's ends start once both are open.
        open(
            "soft:wire=w-rc-rand,fc=off,rx_free_thresh=64",
            cfg(2, 1, 1, false),
        )
        .unwrap(),
        open(
            "soft:wire=w-rc-rand,fc=off,rx_free_thresh=16,tx_rs_thresh=64,tx_free_thresh=64,\
             txmode=wqe",
            cfg(3, 1, 1, false),
        )
        .unwrap(),
    ];
    for p in &mut ports[3..] {
        p.start().unwrap();
    }
    let t = tester_of(name);
    const A: u32 = 1;
    const B: u32 = 2;
    const C: u32 = 4;
    const D: u32 = 8;
    let tx = |port, q, rs, carries| TxAt {
        port,
        q,
        rs,
        carries,
    };
    let txqs = vec![
        tx(0, 0, 32, A | D),
        tx(0, 1, 32, A),
        tx(1, 0, 16, A),
        tx(1, 1, 16, A),
        tx(2, 0, 64, C),
        tx(3, 0, 32, B),
        tx(4, 0, 64, B),
    ];
    let rx = |port, q, pool, unit, dest| RxAt {
        port,
        q,
        pool,
        unit,
        dest,
    };
    let rxqs = vec![
        rx(0, 0, 0, 32, 2), // P0 → P1 (fast free: pool A only)
        rx(0, 1, 0, 32, 1), // P0 → P0
        rx(1, 0, 0, 16, 3), // P1 → P1 (fast free)
        rx(1, 1, 0, 16, 0), // P1 → P0
        rx(2, 0, 1, 32, 5), // P2 → W1 → wire → W2
        rx(2, 1, 1, 32, 6), // P2 → W2 → wire → W1
        rx(3, 0, 2, 64, 4), // W1 → P2
        rx(4, 0, 3, 16, 0), // W2 → P0 (pools A and D mixed)
    ];
    let (nrx, ntx, np) = (rxqs.len(), txqs.len(), ports.len());
    let mut w = guard(World {
        ports,
        pools,
        rxqs,
        txqs,
        port_up: vec![true; np],
        rx_up: vec![true; nrx],
        tx_up: vec![true; ntx],
        port_back: vec![None; np],
        rx_back: vec![None; nrx],
        tx_back: vec![None; ntx],
        pending: (0..nrx).map(|_| Burst::new()).collect(),
        held: Vec::new(),
        dropped: 0,
        uncounted: vec![0; nrx],
        discarded_commits: 0,
        moved_into: vec![0; nrx],
        stops: [0; 3],
        cut_steps: 0,
    });
    // A fixed seed; another through SLUICE_RECYCLE_SEED, to explore.
    let seed = std::env::var("SLUICE_RECYCLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_1234_abcd_0001u64);
    let mut rng = Rng(seed | 1);
    const STEPS: usize = 4000;
    for s in 0..STEPS {
        w.restart_due(s);
        if rng.one_in(25) {
            let i = rng.below(nrx);
            if w.rx_live(i) {
                w.stop_rx(i, s, &t, &mut rng);
            }
        }
        if rng.one_in(25) {
            let j = rng.below(ntx);
            if w.tx_live(j) {
                w.stop_tx(j, s, &mut rng);
            }
        }
        if rng.one_in(100) {
            let p = rng.below(np);
            if w.port_up[p] {
                w.stop_port(p, s, &t, &mut rng);
            }
        }
        w.pass(s, &mut rng);
        w.release_clones(s);
    }

    // Everything up again, the tester paused, forwarding (still recycling
    // at random) until two passes in a row move nothing.
    w.restart_due(usize::MAX);
    t.pause(true);
    let mut quiet = 0;
    for s in STEPS.. {
        assert!(s < STEPS + 10_000, "the run did not drain: {}", t.report());
        let busy = w.pass(s, &mut rng) != 0 || w.pending.iter().any(|b| !b.is_empty());
        quiet = if busy { 0 } else { quiet + 1 };
        if quiet == 2 {
            break;
        }
    }
    w.release_clones(usize::MAX);
    assert!(w.held.is_empty());

    let r = t.report();
    let missed: u64 = w.ports.iter().map(|p| p.stats().rx_missed).sum();
    assert!(r.received > 100_000, "{r}");
    assert_eq!(
        (r.duplicates, r.corrupt, r.reordered, r.foreign),
        (0, 0, 0, 0),
        "{r}"
    );
    assert_eq!(
        r.lost,
        w.dropped + missed,
        "{r}; dropped {} missed {missed}",
        w.dropped
    );
    let sum = |k: usize| -> u64 {
        w.ports
            .iter()
            .map(|p| {
                let c = recycle_counts(p);
                [c.0, c.1, c.2][k]
            })
            .sum()
    };
    let (rxr, txr, fb) = (sum(0), sum(1), sum(2));
    assert_eq!(
        txr,
        rxr + w.discarded_commits,
        "every commit rearmed or given back"
    );
    assert_eq!(w.moved_into.iter().sum::<u64>(), txr);
    // Each Rx queue whose pool some Tx queue carries in whole refill units
    // got buffers (W2's pool D travels only mixed with pool A).
    for (i, &m) in w.moved_into.iter().enumerate().take(7) {
        assert!(
            m > 0,
            "nothing recycled into Rx queue {i}: {:?}",
            w.moved_into
        );
    }
    assert!(fb > 0, "clones and mixed pools make batches fall back");
    assert!(
        w.stops.iter().all(|&n| n > 0) && w.cut_steps > 0 && w.discarded_commits > 0,
        "stops {:?}, cut steps {}, discarded commits {}",
        w.stops,
        w.cut_steps,
        w.discarded_commits
    );
    let pools = std::mem::take(&mut w.pools);
    drop(w);
    for (k, p) in pools.iter().enumerate() {
        assert!(p.is_full(), "pool {k}: {} of {}", p.available(), p.size());
    }
}

// ---- threaded stress ------------------------------------------------------

/// Two ports whose device runs on the device thread forward each other's
/// traffic; the polling thread (this one) recycles with a random pairing
/// every step and stops and starts single Rx and Tx queues at random while
/// frames flow. Stops discard frames in flight (not counted here); nothing
/// may be duplicated, corrupted or reordered, and every buffer comes home.
#[test]
fn queues_stopping_at_random_under_a_threaded_device_while_recycling_lose_no_buffer() {
    let name = "t-rc-thr";
    let pool = pool(name, 4095);
    let config = PortConfig::new(Some(pool.clone()))
        .queues(2, 2)
        .nb_rxd(128)
        .nb_txd(128);
    let mut fast_free = config.clone();
    fast_free.tx_offloads |= Offloads::FAST_FREE;
    let spec = format!("soft:tester={name},flows=64,device=threaded");
    let mut ports = guard(vec![port(&spec, config), port(&spec, fast_free)]);
    assert!(crate::driver::soft::device::runner::running());
    let t = tester_of(name);
    let queues = [(0, 0), (0, 1), (1, 0), (1, 1)];
    let dest = |i: usize| 2 * (1 - queues[i].0) + queues[i].1;
    let mut rx_back: [Option<usize>; 4] = [None; 4];
    let mut tx_back: [Option<usize>; 4] = [None; 4];
    let mut pending: Vec<Burst<32>> = (0..4).map(|_| Burst::new()).collect();
    let mut rng = Rng(0x7472_6561_6465_6401);
    let mut stops = 0;
    let mut refused = 0;
    let mut moved = 0;
    // Bounded in steps; the deadline only guards a stalled machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for s in 0..1_000_000 {
        if s % 256 == 0 {
            let done = stops >= 50 && t.report().received >= 60_000;
            if done || std::time::Instant::now() > deadline {
                break;
            }
        }
        // Start what is due, stop one queue now and then.
        for (back, is_rx) in [(&mut rx_back, true), (&mut tx_back, false)] {
            for (k, b) in back.iter_mut().enumerate() {
                if b.is_some_and(|b| b <= s) {
                    *b = None;
                    let (p, q) = queues[k];
                    if is_rx {
                        ports[p].rx_queue(q).unwrap().start().unwrap();
                    } else {
                        ports[p].tx_queue(q).unwrap().start().unwrap();
                    }
                }
            }
        }
        if rng.one_in(200) {
            let k = rng.below(4);
            let (p, q) = queues[k];
            let back = Some(s + 1 + rng.below(300));
            if rng.one_in(2) && rx_back[k].is_none() {
                let rx: &mut dyn RxQueue = ports[p].rx_queue(q).unwrap();
                rx.stop();
                rx_back[k] = back;
                stops += 1;
            } else if tx_back[k].is_none() {
                let tx: &mut dyn TxQueue = ports[p].tx_queue(q).unwrap();
                tx.stop();
                tx_back[k] = back;
                stops += 1;
            }
        }
        for i in 0..4 {
            let j = rng.below(4);
            let (rx, tx) = rx_tx(&mut ports, queues[i], queues[j]).unwrap();
            match recycle_mbufs(rx, tx) {
                Ok(n) => {
                    assert!(rx_back[i].is_none() && tx_back[j].is_none());
                    assert_eq!(n % 32, 0);
                    moved += n as u64;
                }
                Err(PortError::Stopped) => {
                    assert!(rx_back[i].is_some() || tx_back[j].is_some());
                    refused += 1;
                }
                Err(e) => panic!("{e}"),
            }
            let d = dest(i);
            let (rx, tx) = rx_tx(&mut ports, queues[i], queues[d]).unwrap();
            rx.rx_burst(&mut pending[i]);
            if tx_back[d].is_none() {
                tx.tx_burst(&mut pending[i]);
            }
        }
    }
    t.pause(true);
    let r = t.report();
    assert_eq!(
        (r.duplicates, r.corrupt, r.reordered, r.foreign),
        (0, 0, 0, 0),
        "{r}"
    );
    assert!(r.received > 0 && moved > 0, "{r}; moved {moved}");
    assert!(stops > 0 && refused > 0);
    let rxr: u64 = ports.iter().map(|p| recycle_counts(p).0).sum();
    let txr: u64 = ports.iter().map(|p| recycle_counts(p).1).sum();
    // recycle_mbufs rearms what it commits in the same call.
    assert_eq!((rxr, txr), (moved, moved));
    for p in ports.iter_mut() {
        p.stop();
    }
    drop(pending);
    assert!(pool.is_full(), "{} of {}", pool.available(), pool.size());
    drop(ports);
}
