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

use std::sync::Arc;

use super::tester::{self, Tester, TesterReport};
use crate::driver::open;
use crate::mbuf::{Burst, BurstSlice, Mbuf, MbufPool, MbufPoolConfig};
use crate::port::{Offloads, Port, PortConfig, PortError, RxQueue, TxQueue, recycle_mbufs};

fn pool(name: &str, size: u32) -> MbufPool {
    MbufPool::new(MbufPoolConfig {
        name: name.into(),
        size,
        cache_size: 0,
        data_room: 512,
        ..Default::default()
    })
    .unwrap()
}

fn port(spec: &str, config: PortConfig) -> Port {
    let mut p = open(spec, config).unwrap();
    p.start().unwrap();
    p
}

fn tester_of(name: &str) -> Arc<Tester> {
    tester::attach(name, None).unwrap()
}

fn xstat(p: &Port, name: &str) -> u64 {
    p.counters().xstats.get(name).unwrap()
}

/// `rx_recycled`, `tx_recycled`, `recycle_fallbacks` of a port.
fn recycle_counts(p: &Port) -> (u64, u64, u64) {
    (
        xstat(p, "rx_recycled"),
        xstat(p, "tx_recycled"),
        xstat(p, "recycle_fallbacks"),
    )
}

/// Asserts nothing was lost, reordered, duplicated, corrupted or foreign.
fn assert_clean(r: &TesterReport) {
    assert!(r.is_clean() && r.foreign == 0, "{r}");
}

/// Sends all of `burst` on `tx`, retrying while the ring is full.
fn send_all(tx: &mut dyn TxQueue, burst: &mut BurstSlice) {
    for _ in 0..1_000_000 {
        if burst.is_empty() {
            return;
        }
        if tx.tx_burst(burst) == 0 {
            std::thread::yield_now();
        }
    }
    panic!("the Tx queue stopped taking packets");
}

/// Queue 0 of a port, both directions at once (a loopback).
fn loopback(p: &mut Port) -> (&mut dyn RxQueue, &mut dyn TxQueue) {
    let (rx, tx) = p.queues_mut().unwrap();
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

/// Pauses `t` and forwards a loopback port (recycling) until every frame
/// the tester sent has been received by the port: its Rx ring then holds
/// no frame, so a stop discards none. No extra `rx_burst` runs after the
/// last frame, so the slots it delivered stay due.
fn drain_loopback(p: &mut Port, t: &Tester) {
    t.pause(true);
    let mut burst: Burst<32> = Burst::new();
    for _ in 0..10_000 {
        if p.stats().rx_packets >= t.report().sent {
            return;
        }
        let (rx, tx) = loopback(p);
        recycle_step(rx, tx, &mut burst);
    }
    panic!("the port did not drain: {}", t.report());
}

// ---- recycling happens ---------------------------------------------------

#[test]
fn recycling_moves_every_completed_batch_without_touching_the_mempool() {
    for fast_free in [false, true] {
        let name = format!("t-rc-basic-{fast_free}");
        let pool = pool(&name, 1023);
        let mut config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
        if fast_free {
            config.tx_offloads |= Offloads::FAST_FREE;
        }
        let mut p = port(&format!("soft:tester={name},count=3200,flows=16"), config);
        let t = tester_of(&name);
        let mut burst: Burst<32> = Burst::new();
        let mut moved = Vec::new();
        for _ in 0..1000 {
            if t.report().received >= 3200 {
                break;
            }
            let (rx, tx) = loopback(&mut p);
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
        assert_clean(&t.report());
        assert_eq!(t.report().received, 3200);
        assert_eq!(recycle_counts(&p), (99 * 32, 99 * 32, 0));
        p.stop();
        assert!(pool.is_full(), "fast free {fast_free}");
    }
}

// ---- reference count above 1 ----------------------------------------------

#[test]
fn a_batch_holding_a_buffer_with_a_live_clone_falls_back_and_the_clone_keeps_its_bytes() {
    let name = "t-rc-clone";
    let pool = pool(name, 1023);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    let mut p = port(&format!("soft:tester={name},count=3200,flows=16"), config);
    let t = tester_of(name);
    let mut burst: Burst<32> = Burst::new();
    // (clone, its bytes when cloned, the step after which it is dropped)
    let mut held: Vec<(Mbuf, Vec<u8>, usize)> = Vec::new();
    let mut cloned_bursts = Vec::new();
    let mut moved = Vec::new();
    for k in 0..100 {
        let (rx, tx) = loopback(&mut p);
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
        held.retain(|(c, bytes, until)| {
            assert_eq!(c.data(), &bytes[..], "a clone's bytes changed");
            *until > k
        });
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
    assert_eq!(recycle_counts(&p), (recycled, recycled, fallbacks));
    assert!(fallbacks > 0);
    for (c, bytes, _) in &held {
        assert_eq!(c.data(), &bytes[..]);
    }
    let r = t.report();
    assert_eq!(r.received, 3200, "{r}");
    assert_clean(&r);
    p.stop();
    assert_eq!(pool.available() as usize, 1023 - held.len());
    held.clear();
    assert!(pool.is_full());
}

// ---- foreign pools --------------------------------------------------------

#[test]
fn buffers_of_another_pool_are_never_recycled_with_or_without_fast_free() {
    for fast_free in [false, true] {
        let name = format!("t-rc-foreign-{fast_free}");
        let pool_a = pool(&format!("{name}-a"), 1023);
        let pool_b = pool(&format!("{name}-b"), 1023);
        let config = |pool: &MbufPool| {
            let mut c = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
            if fast_free {
                c.tx_offloads |= Offloads::FAST_FREE;
            }
            c
        };
        let spec = format!("soft:tester={name},count=3200,flows=16");
        // P receives into pool A and sends what Q received (pool B); Q the
        // other way round.
        let mut ports = [port(&spec, config(&pool_a)), port(&spec, config(&pool_b))];
        let t = tester_of(&name);
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
                send_all(tx, &mut burst);
            }
            if k == 59 {
                // Every batch completed so far was tried (the Rx queues had
                // 32 slots due each step) and fell back: P's Tx batches of
                // steps 0..59 at the next step; Q's of steps 0..60 in the
                // step that sent them (Q's Rx comes second), except that
                // step 0 found Q's Rx ring full, so step 1 tried two.
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
                .map(|p| {
                    let c = recycle_counts(p);
                    [c.0, c.1, c.2][i]
                })
                .sum()
        };
        assert_eq!((sum(0), sum(1)), (moved[1] as u64, moved[1] as u64));
        assert_eq!(sum(2), 59 + 60, "no fallback with the right pairing");
        let r = t.report();
        assert_eq!(r.received, 6400, "{r}");
        assert_clean(&r);
        drop(ports);
        assert!(
            pool_a.is_full() && pool_b.is_full(),
            "fast free {fast_free}"
        );
    }
}

#[test]
fn a_batch_mixing_pools_falls_back_wherever_the_foreign_buffer_sits() {
    let name = "t-rc-mixed";
    let pool_a = pool("rc-mixed-a", 1023);
    let pool_b = pool("rc-mixed-b", 255);
    let config = PortConfig::new(Some(pool_a.clone()))
        .nb_rxd(128)
        .nb_txd(128);
    let mut p = port(&format!("soft:tester={name},count=3200,flows=16"), config);
    let t = tester_of(name);
    let mut burst: Burst<32> = Burst::new();
    let mut moved = Vec::new();
    let mut mixed = Vec::new();
    for k in 0..100usize {
        let (rx, tx) = loopback(&mut p);
        moved.push(recycle_mbufs(rx, tx).unwrap());
        assert_eq!(rx.rx_burst(&mut burst), 32);
        // One packet in three of four bursts moves to a copy in pool B:
        // first, in the middle, last.
        if let Some(i) = [Some(0), Some(15), Some(31), None][k % 4] {
            mixed.push(k);
            let copy = pool_b.alloc_from_slice(burst[i].data()).unwrap();
            burst[i] = copy;
        }
        send_all(tx, &mut burst);
    }
    for (k, &m) in moved.iter().enumerate().skip(1) {
        let want = if mixed.contains(&(k - 1)) { 0 } else { 32 };
        assert_eq!(m, want, "step {k}");
    }
    let fallbacks = mixed.iter().filter(|&&k| k < 99).count() as u64;
    let recycled = (99 - fallbacks) * 32;
    assert_eq!(recycle_counts(&p), (recycled, recycled, fallbacks));
    let r = t.report();
    assert_eq!(r.received, 3200, "{r}");
    assert_clean(&r);
    p.stop();
    assert!(pool_a.is_full() && pool_b.is_full());
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
    let mut p = port(&spec, config);
    let t = tester_of(name);
    let mut burst: Burst<64> = Burst::new();
    let mut seen = WrapSeen::default();
    let ring = nb_rxd as u32;
    for k in 0..10_000 {
        if t.report().received >= count {
            break;
        }
        let (rx, tx) = loopback(&mut p);
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
        if tx_rs_thresh % rx_free_thresh != 0 {
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
        let cap = bursts[k % bursts.len()];
        rx.rx_burst(burst.capped(cap));
        send_all(tx, &mut burst);
    }
    let r = t.report();
    assert_eq!(r.received, count, "{r}");
    assert_clean(&r);
    let (rxr, txr, fb) = recycle_counts(&p);
    assert_eq!((rxr, txr, fb), (seen.moved, seen.moved, 0), "{name}");
    p.stop();
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
fn a_tx_batch_that_is_not_a_whole_number_of_refill_units_never_moves() {
    // Batches of 16 into refill units of 32.
    let seen = forward_through_the_wrap("t-rc-wrap-e", 128, 32, 16, &[32, 7]);
    assert_eq!(seen.moved, 0, "{seen:?}");
}

// ---- stopped queues -------------------------------------------------------

/// Forwards a loopback port with recycling for `steps` steps; returns the
/// buffers moved.
fn run_loopback(p: &mut Port, steps: usize) -> usize {
    let mut burst: Burst<32> = Burst::new();
    let mut moved = 0;
    for _ in 0..steps {
        let (rx, tx) = loopback(p);
        moved += recycle_step(rx, tx, &mut burst).0;
    }
    moved
}

#[test]
fn nothing_is_recycled_while_either_queue_is_stopped_and_recycling_resumes_after_a_restart() {
    let name = "t-rc-stopped";
    let pool = pool(name, 1023);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    let mut p = port(&format!("soft:tester={name},flows=16"), config);
    let t = tester_of(name);
    assert!(run_loopback(&mut p, 20) > 0);

    for stop_rx in [true, false] {
        // No frame in flight, so the stop discards none; the Tx queue keeps
        // the batch it sent last, completed, and the Rx queue has slots due.
        drain_loopback(&mut p, &t);
        {
            let (rx, tx) = loopback(&mut p);
            if stop_rx {
                rx.stop();
                rx.stop(); // idempotent
            } else {
                tx.stop();
                tx.stop();
            }
        }
        let before = (recycle_counts(&p), pool.available());
        {
            let (rx, tx) = loopback(&mut p);
            assert!(matches!(recycle_mbufs(rx, tx), Err(PortError::Stopped)));
            if stop_rx {
                assert!(matches!(rx.recycle_rx_info(), Err(PortError::Stopped)));
                assert_eq!(rx.recycle_rx_refill(), 0);
                let mut burst: Burst<32> = Burst::new();
                assert_eq!(rx.rx_burst(&mut burst), 0);
            } else {
                let mut info = rx.recycle_rx_info().unwrap();
                let (head, due) = (info.refill_head(), info.due());
                assert!(due > 0);
                assert!(matches!(
                    tx.recycle_tx_mbufs(&mut info),
                    Err(PortError::Stopped)
                ));
                assert_eq!((info.refill_head(), info.due()), (head, due));
                drop(info);
                assert_eq!(rx.recycle_rx_refill(), 0, "nothing was committed");
            }
        }
        assert_eq!(
            (recycle_counts(&p), pool.available()),
            before,
            "nothing moved"
        );
        {
            let (rx, tx) = loopback(&mut p);
            if stop_rx {
                rx.start().unwrap();
                rx.start().unwrap(); // idempotent
            } else {
                tx.start().unwrap();
                // A restarted Tx queue has completed nothing yet.
                assert_eq!(recycle_mbufs(rx, tx).unwrap(), 0);
            }
        }
        t.pause(false);
        let (rx0, tx0, _) = recycle_counts(&p);
        assert!(run_loopback(&mut p, 20) > 0, "stop rx {stop_rx}");
        let (rx1, tx1, fb) = recycle_counts(&p);
        assert!(rx1 > rx0 && tx1 > tx0);
        assert_eq!((rx1, fb), (tx1, 0));
    }
    // A stopped port lends no queue at all, and still says what they can do.
    drain_loopback(&mut p, &t);
    p.stop();
    assert!(matches!(p.rx_queue(0), Err(PortError::Stopped)));
    assert!(p.rx_queue_recycles(0).unwrap() && p.tx_queue_recycles(0).unwrap());
    assert!(pool.is_full());
    let r = t.report();
    assert!(r.received > 0);
    assert_clean(&r);
}

// ---- a stop in the middle of a step ---------------------------------------

#[test]
fn a_queue_stopped_between_the_commit_and_the_refill_leaks_nothing() {
    let name = "t-rc-middle";
    let pool = pool(name, 1023);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    let mut p = port(&format!("soft:tester={name},flows=16"), config);
    let t = tester_of(name);
    let mut lost_commits = 0;
    // First the Rx queue alone stops, then the whole port.
    for whole_port in [false, true] {
        assert!(run_loopback(&mut p, 20) > 0);
        drain_loopback(&mut p, &t);
        let (rx, tx) = loopback(&mut p);
        let moved = {
            let mut info = rx.recycle_rx_info().unwrap();
            tx.recycle_tx_mbufs(&mut info).unwrap()
        };
        assert_eq!(moved, 32, "the last batch sent, into the slots due");
        lost_commits += moved as u64;
        // No recycle_rx_refill: the Rx queue owns the buffers unarmed.
        if whole_port {
            p.stop();
        } else {
            rx.stop();
            let (rx, _) = loopback(&mut p);
            rx.start().unwrap();
        }
        let (rxr, txr, _) = recycle_counts(&p);
        assert_eq!(txr, rxr + lost_commits, "committed, never rearmed");
        t.pause(false);
    }
    assert!(pool.is_full(), "the port stopped");
    p.start().unwrap();
    assert!(
        run_loopback(&mut p, 20) > 0,
        "recycling works after the restart"
    );
    drain_loopback(&mut p, &t);
    p.stop();
    assert!(pool.is_full());
    let r = t.report();
    assert!(r.received > 0);
    assert_clean(&r);
}

#[test]
fn a_tx_queue_stopped_between_two_recycle_steps_gives_its_batches_back() {
    let name = "t-rc-txstop";
    let pool = pool(name, 1023);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    let mut p = port(&format!("soft:tester={name},flows=16"), config);
    let t = tester_of(name);
    let mut burst: Burst<32> = Burst::new();
    for round in 0..5 {
        assert!(run_loopback(&mut p, 10 + round) > 0);
        // A step that moves, then sends another batch.
        {
            let (rx, tx) = loopback(&mut p);
            assert_eq!(recycle_step(rx, tx, &mut burst), (32, 32));
        }
        let held = pool.available();
        let (rx, tx) = loopback(&mut p);
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
    let (rxr, txr, fb) = recycle_counts(&p);
    assert_eq!((rxr, fb), (txr, 0));
    drain_loopback(&mut p, &t);
    p.stop();
    assert!(pool.is_full());
    let r = t.report();
    assert!(r.received > 0);
    assert_clean(&r);
}

// ---- queues without recycling ---------------------------------------------

#[test]
fn recycling_with_a_null_pair_or_pcap_queue_is_unsupported_and_loses_nothing() {
    let name = "t-rc-unsup";
    let pool = pool(name, 2047);
    let config = || PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    let pcap_path =
        std::env::temp_dir().join(format!("sluice-{}-rc-unsup.pcap", std::process::id()));
    let pcap_spec = format!("pcap:tx={}", pcap_path.display());
    // ports: soft, null, pair A, pair B, pcap
    let mut ports = vec![
        open(&format!("soft:tester={name},flows=16"), config()).unwrap(),
        open("null", config()).unwrap(),
        open("pair:name=rc-unsup", config()).unwrap(),
        open("pair:name=rc-unsup", config()).unwrap(),
        open(&pcap_spec, PortConfig::new(None)).unwrap(),
    ];
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
    for p in &mut ports {
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
    let mut ports = [port(&spec, config.clone()), port(&spec, config)];
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
    let r = t.report();
    assert_eq!(r.received, 16_000, "{r}");
    assert_clean(&r);
    drop(ports);
    assert!(pool.is_full());
}
