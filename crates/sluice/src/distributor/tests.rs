//! Distributor tests: the behaviour of DPDK's distributor unit tests, written
//! our own way — single-threaded where the rule can be shown step by step
//! (the non-blocking `request_pkt`/`poll_pkt` let one thread play every
//! role), threaded for the rest. Every test ends with its pool full.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use super::test_support::{
    ReturnOrder, assert_handed_once_returned_at_most_once, burst_of, count_returned,
    hashed_packets, seqs, take_returns,
};
use super::*;
use crate::mbuf::Burst;
use crate::test_support::{assert_pool_full, assert_pool_full_with, test_pool};

/// A distributor of `workers` workers, the other settings default.
fn new_distributor(workers: usize) -> Distributor {
    Distributor::new(DistributorConfig {
        workers,
        ..Default::default()
    })
    .unwrap()
}

/// A distributor of two workers, each with a request open that the
/// distributor has not seen yet.
fn two_requesting_workers() -> (Distributor, Worker, Worker) {
    let distributor = new_distributor(2);
    let mut w0 = distributor.worker(0).unwrap();
    let mut w1 = distributor.worker(1).unwrap();
    let mut none = Burst::<8>::new();
    w0.request_pkt(&mut none).unwrap();
    w1.request_pkt(&mut none).unwrap();
    (distributor, w0, w1)
}

/// A distributor of `workers` workers, every one active.
fn active_workers(workers: usize) -> (Distributor, Vec<Worker>) {
    let mut distributor = new_distributor(workers);
    let mut ws: Vec<Worker> = (0..workers)
        .map(|i| distributor.worker(i).unwrap())
        .collect();
    activate(&mut distributor, &mut ws);
    (distributor, ws)
}

/// Makes every worker active: each requests once, the distributor sees it.
fn activate(distributor: &mut Distributor, ws: &mut [Worker]) {
    let mut none = Burst::<8>::new();
    for worker in ws.iter_mut() {
        worker.request_pkt(&mut none).unwrap();
    }
    assert_eq!(distributor.process(&mut none), 0);
    assert_eq!(distributor.active_workers(), ws.len());
}

/// Flushes `distributor`, which must have nothing left to hand out, and
/// takes its returns: their sequence numbers, in the order they came back.
fn flush_and_take_returns(distributor: &mut Distributor) -> Vec<u64> {
    assert_eq!(distributor.flush(), 0, "packets still in the distributor");
    take_returns(|back| distributor.returned_pkts(back))
}

#[test]
fn flow_tags_are_15_bits_and_never_0() {
    assert_eq!(flow_tag(0), 1);
    assert_eq!(flow_tag(1), 1);
    assert_eq!(flow_tag(0x8000), 1);
    assert_eq!(flow_tag(0x7fff), 0x7fff);
    assert_eq!(flow_tag(0xdead_beef), 0x3eef);
    for h in [0u32, 5, 0x7fff, 0x8000, u32::MAX] {
        assert!((1..=0x7fff).contains(&flow_tag(h)));
    }
}

#[test]
fn bad_input_is_an_error_with_a_clear_message() {
    let e = Distributor::new(DistributorConfig {
        workers: 0,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e, DistError::NoWorkers);
    assert_eq!(e.to_string(), "a distributor needs at least one worker");
    let e = Distributor::new(DistributorConfig {
        workers: 65,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.to_string(), "65 workers asked for: at most 64");
    assert!(
        Distributor::new(DistributorConfig {
            workers: 64,
            ..Default::default()
        })
        .is_ok()
    );

    let distributor = new_distributor(4);
    let e = distributor.worker(4).unwrap_err();
    assert_eq!(
        e.to_string(),
        "worker id 4 out of range: the distributor has 4 worker(s), ids 0..4"
    );
    let mut worker = distributor.worker(1).unwrap();
    assert_eq!(
        distributor.worker(1).unwrap_err(),
        DistError::WorkerClaimed { id: 1 }
    );
    assert_eq!(
        distributor.worker(1).unwrap_err().to_string(),
        "worker id 1 already has a live handle"
    );

    let mut small = Burst::<4>::new();
    let mut none = Burst::<8>::new();
    assert_eq!(
        worker
            .get_pkt(&mut none, &mut small)
            .unwrap_err()
            .to_string(),
        "a worker's burst needs room for 8 packets: it has 4"
    );
    assert_eq!(
        worker.poll_pkt(&mut none).unwrap_err().to_string(),
        "worker 1 polled without a request (request_pkt)"
    );
    worker.request_pkt(&mut none).unwrap();
    assert_eq!(
        worker.request_pkt(&mut none).unwrap_err().to_string(),
        "worker 1 asked for packets again before taking the last answer (poll_pkt)"
    );
    // A dropped handle frees the id.
    let w2 = distributor.worker(2).unwrap();
    drop(w2);
    assert_eq!(distributor.worker(2).unwrap().id(), 2);
    // (Worker 1's request is open: the distributor goes first.)
    drop(distributor);
    drop(worker);
}

#[test]
fn all_packets_of_one_flow_go_to_one_worker() {
    let pool = test_pool(1023);
    let (mut distributor, mut ws) = active_workers(4);
    let mut got = [0usize; 4];
    let mut out = Burst::<8>::new();
    let mut back = Burst::<64>::new();
    for round in 0..32 {
        let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 8, round * 8, |_| 0x1234));
        assert_eq!(distributor.process(&mut burst), 8);
        for (i, worker) in ws.iter_mut().enumerate() {
            if let Some(n) = worker.poll_pkt(&mut out).unwrap() {
                got[i] += n;
                worker.request_pkt(&mut out).unwrap();
            }
        }
        distributor.returned_pkts(&mut back);
        back.clear();
    }
    assert_eq!(distributor.flush(), 0);
    assert_eq!(got.iter().sum::<usize>(), 256);
    assert_eq!(got.iter().filter(|&&g| g != 0).count(), 1, "{got:?}");
    distributor.clear_returns();
    drop((distributor, ws));
    assert_pool_full(&pool);
}

#[test]
fn distinct_flows_spread_over_every_worker() {
    let pool = test_pool(1023);
    let (mut distributor, mut ws) = active_workers(4);
    // 32 packets of 32 flows: with every worker idle, each gets its share.
    let mut burst: Burst<32> = burst_of(hashed_packets(&pool, 32, 0, |i| i as u32 + 100));
    assert_eq!(distributor.process(&mut burst), 32);
    let mut out = Burst::<8>::new();
    for worker in ws.iter_mut() {
        assert_eq!(worker.poll_pkt(&mut out).unwrap(), Some(8));
        // The packets' flows: none shared with another worker.
        worker.request_pkt(&mut out).unwrap();
    }
    assert_eq!(distributor.flush(), 0);
    assert_eq!(distributor.stats().handed, vec![8; 4]);
    assert_eq!(distributor.returns_waiting(), 32);
    distributor.clear_returns();
    drop((distributor, ws));
    assert_pool_full(&pool);
}

#[test]
fn a_flow_waits_for_its_worker_and_keeps_its_order() {
    // One flow, two workers: the flow's packets stay on one worker's
    // backlog even though the other is idle.
    let pool = test_pool(127);
    let (mut distributor, mut ws) = active_workers(2);
    let mut burst: Burst<16> = burst_of(hashed_packets(&pool, 16, 0, |_| 7));
    assert_eq!(distributor.process(&mut burst), 16);
    let mut out = Burst::<8>::new();
    assert_eq!(ws[0].poll_pkt(&mut out).unwrap(), Some(8));
    assert_eq!(seqs(&out), (0..8).collect::<Vec<_>>());
    let mut other = Burst::<8>::new();
    assert_eq!(
        ws[1].poll_pkt(&mut other).unwrap(),
        None,
        "worker 1 got a packet"
    );
    // Worker 0 asks again: the next eight of the flow.
    ws[0].request_pkt(&mut out).unwrap();
    let mut none = Burst::<8>::new();
    assert_eq!(distributor.process(&mut none), 0);
    assert_eq!(ws[0].poll_pkt(&mut out).unwrap(), Some(8));
    assert_eq!(seqs(&out), (8..16).collect::<Vec<_>>());
    ws[0].request_pkt(&mut out).unwrap();
    assert_eq!(
        flush_and_take_returns(&mut distributor),
        (0..16).collect::<Vec<_>>()
    );
    drop((distributor, ws));
    assert_pool_full(&pool);
}

#[test]
fn a_worker_shutting_down_with_a_full_backlog_loses_nothing() {
    let pool = test_pool(127);
    let (mut distributor, mut ws) = active_workers(2);
    // 16 packets of one flow: eight handed to worker 0, eight in its backlog.
    let mut burst: Burst<16> = burst_of(hashed_packets(&pool, 16, 0, |_| 9));
    assert_eq!(distributor.process(&mut burst), 16);
    assert_eq!(distributor.outstanding(), 16);
    let mut out = Burst::<8>::new();
    assert_eq!(ws[0].poll_pkt(&mut out).unwrap(), Some(8));
    // Worker 0 quits, handing back what it did.
    assert_eq!(ws[0].return_pkt(&mut out).unwrap(), 8);
    let mut none = Burst::<8>::new();
    distributor.process(&mut none);
    let stats = distributor.stats();
    assert_eq!((stats.shutdowns, stats.redistributed), (1, 8));
    assert_eq!(distributor.active_workers(), 1);
    // Its backlog went to worker 1, in order.
    assert_eq!(ws[1].poll_pkt(&mut out).unwrap(), Some(8));
    assert_eq!(seqs(&out), (8..16).collect::<Vec<_>>());
    ws[1].request_pkt(&mut out).unwrap();
    assert_eq!(
        flush_and_take_returns(&mut distributor),
        (0..16).collect::<Vec<_>>()
    );
    drop((distributor, ws));
    assert_pool_full(&pool);
}

#[test]
fn an_unread_batch_of_a_worker_shutting_down_goes_to_another() {
    let pool = test_pool(127);
    let (mut distributor, mut ws) = active_workers(2);
    let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 8, 0, |_| 3));
    assert_eq!(distributor.process(&mut burst), 8);
    // Worker 0 was answered but quits without taking the batch.
    let mut none = Burst::<8>::new();
    assert_eq!(ws[0].return_pkt(&mut none).unwrap(), 0);
    distributor.process(&mut none);
    let mut out = Burst::<8>::new();
    assert_eq!(ws[1].poll_pkt(&mut out).unwrap(), Some(8));
    assert_eq!(seqs(&out), (0..8).collect::<Vec<_>>());
    assert_eq!(distributor.stats().redistributed, 8);
    ws[1].request_pkt(&mut out).unwrap();
    assert_eq!(distributor.flush(), 0);
    distributor.clear_returns();
    drop((distributor, ws));
    assert_pool_full(&pool);
}

#[test]
fn a_worker_can_come_back_after_shutting_down() {
    let pool = test_pool(127);
    let mut distributor = new_distributor(1);
    let mut worker = distributor.worker(0).unwrap();
    let mut none = Burst::<8>::new();
    let mut out = Burst::<8>::new();
    worker.request_pkt(&mut none).unwrap();
    let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 4, 0, |i| i as u32));
    assert_eq!(distributor.process(&mut burst), 4);
    assert_eq!(worker.poll_pkt(&mut out).unwrap(), Some(4));
    assert_eq!(worker.return_pkt(&mut out).unwrap(), 4);
    distributor.process(&mut none);
    assert_eq!(distributor.active_workers(), 0);
    // No active worker: the packets stay with the caller.
    let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 4, 4, |i| i as u32));
    assert_eq!(distributor.process(&mut burst), 0);
    assert_eq!(burst.len(), 4);
    worker.request_pkt(&mut none).unwrap();
    assert_eq!(distributor.process(&mut burst), 4);
    assert_eq!(worker.poll_pkt(&mut out).unwrap(), Some(4));
    assert_eq!(seqs(&out), (4..8).collect::<Vec<_>>());
    drop(worker);
    assert_eq!(distributor.flush(), 0);
    assert_eq!(distributor.returns_waiting(), 4);
    distributor.clear_returns();
    drop((out, distributor));
    assert_pool_full(&pool);
}

#[test]
fn a_worker_waiting_for_packets_can_quit() {
    let pool = test_pool(127);
    let mut distributor = new_distributor(2);
    let mut w0 = distributor.worker(0).unwrap();
    let mut none = Burst::<8>::new();
    let mut out = Burst::<8>::new();
    w0.request_pkt(&mut none).unwrap();
    distributor.process(&mut none);
    assert_eq!(distributor.active_workers(), 1);
    let t = thread::spawn(move || {
        // Waiting with nothing to take: return_pkt asks to be let go.
        assert_eq!(w0.return_pkt(&mut Burst::<8>::new()).unwrap(), 0);
        w0
    });
    while !t.is_finished() {
        distributor.process(&mut none);
        thread::yield_now();
    }
    let mut w0 = t.join().unwrap();
    assert_eq!(distributor.active_workers(), 0);
    assert_eq!(distributor.stats().shutdowns, 1);
    // Back again, it receives.
    w0.request_pkt(&mut none).unwrap();
    let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 2, 0, |_| 5));
    assert_eq!(distributor.process(&mut burst), 2);
    assert_eq!(w0.poll_pkt(&mut out).unwrap(), Some(2));
    drop((w0, out));
    assert_eq!(distributor.flush(), 0);
    drop(distributor);
    assert_pool_full(&pool);
}

#[test]
fn a_full_returns_fifo_holds_the_worker_and_counts_once() {
    let pool = test_pool(127);
    let mut distributor = Distributor::new(DistributorConfig {
        workers: 1,
        returns: 8,
        ..Default::default()
    })
    .unwrap();
    let mut worker = distributor.worker(0).unwrap();
    let mut none = Burst::<8>::new();
    let mut out = Burst::<8>::new();
    worker.request_pkt(&mut none).unwrap();
    for round in 0..2u64 {
        let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 8, round * 8, |_| 1));
        assert_eq!(distributor.process(&mut burst), 8);
        assert_eq!(worker.poll_pkt(&mut out).unwrap(), Some(8));
        worker.request_pkt(&mut out).unwrap();
    }
    // The first eight returns filled the FIFO; the second request waits.
    let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 8, 16, |_| 1));
    // The worker's backlog takes eight; nothing more is needed.
    assert_eq!(distributor.process(&mut burst), 8);
    assert_eq!(distributor.stats().returns_full, 1);
    assert_eq!(worker.poll_pkt(&mut out).unwrap(), None);
    assert_eq!(distributor.process(&mut none), 0);
    assert_eq!(
        distributor.stats().returns_full,
        1,
        "counted once per request"
    );
    // A ninth packet for the same flow must wait for the worker, which
    // waits for room: process stops and leaves it with the caller.
    let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 1, 24, |_| 1));
    assert_eq!(distributor.process(&mut burst), 0);
    assert_eq!(burst.len(), 1);
    assert_eq!(distributor.flush(), 16, "flush cannot go on either");
    let mut back = Burst::<8>::new();
    assert_eq!(distributor.returned_pkts(&mut back), 8);
    assert_eq!(seqs(&back), (0..8).collect::<Vec<_>>());
    back.clear();
    assert_eq!(distributor.process(&mut burst), 1);
    assert_eq!(worker.poll_pkt(&mut out).unwrap(), Some(8));
    assert_eq!(seqs(&out), (16..24).collect::<Vec<_>>());
    let stats = distributor.stats();
    assert_eq!((stats.returned, stats.distributed), (16, 25));
    drop((burst, out, worker));
    distributor.clear_returns();
    drop(distributor);
    assert_pool_full(&pool);
}

#[test]
fn dropping_the_distributor_under_an_open_request_frees_everything() {
    let pool = test_pool(127);
    let (mut distributor, mut w0, w1) = two_requesting_workers();
    let mut none = Burst::<8>::new();
    let mut out = Burst::<8>::new();
    let mut burst: Burst<16> = burst_of(hashed_packets(&pool, 12, 0, |i| (i % 2) as u32 + 2));
    assert_eq!(distributor.process(&mut burst), 12);
    assert_eq!(w0.poll_pkt(&mut out).unwrap(), Some(6));
    // Worker 0 hands its packets back with a new request; worker 1 never
    // takes its batch.
    w0.request_pkt(&mut out).unwrap();
    drop(distributor);
    assert_eq!(w0.poll_pkt(&mut out).unwrap(), Some(0));
    assert_eq!(w0.request_pkt(&mut none).unwrap_err(), DistError::Closed);
    drop((w0, w1));
    assert_pool_full(&pool);
}

#[test]
fn a_1024_packet_burst_comes_back_packet_for_packet() {
    let pool = test_pool(2047);
    let mut distributor = new_distributor(2);
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..2)
        .map(|i| spawn_echo(distributor.worker(i).unwrap(), &stop))
        .collect();
    let mut burst: Burst<1024> = burst_of(hashed_packets(&pool, 1024, 0, |i| (i % 97) as u32));
    let mut back = Burst::<1024>::new();
    let mut returned = Vec::new();
    while distributor.active_workers() < 2 {
        distributor.process(&mut Burst::<0>::new());
        thread::yield_now();
    }
    assert_eq!(distributor.process(&mut burst), 1024);
    assert_eq!(distributor.flush(), 0);
    distributor.returned_pkts(&mut back);
    returned.extend(seqs(&back));
    stop.store(true, Ordering::Relaxed);
    drop(distributor);
    for h in handles {
        h.join().unwrap();
    }
    returned.sort_unstable();
    assert_eq!(returned, (0..1024).collect::<Vec<_>>());
    drop(back);
    assert_pool_full(&pool);
}

/// A worker thread that hands back every packet it gets, until `stop`.
fn spawn_echo(mut worker: Worker, stop: &Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    let stop = Arc::clone(stop);
    thread::spawn(move || {
        let mut pkts = Burst::<8>::new();
        let mut got = 0;
        while !stop.load(Ordering::Relaxed) {
            if worker.request_pkt(&mut pkts).is_err() {
                return got;
            }
            loop {
                if let Some(n) = worker.poll_pkt(&mut pkts).unwrap_or(Some(0)) {
                    got += n as u64;
                    break;
                }
                if stop.load(Ordering::Relaxed) {
                    // Shut down below (the open request's batch goes back).
                    return got;
                }
                thread::yield_now();
            }
        }
        let _ = worker.return_pkt(&mut pkts);
        got
    })
}

#[test]
fn a_million_packets_allocated_and_freed_by_workers_leave_the_pool_full() {
    const TOTAL: u64 = 1 << 20;
    // A small pool: a leak of even a few packets per thousand would
    // exhaust it long before the end.
    let pool = test_pool(511);
    let mut distributor = new_distributor(2);
    let stop = Arc::new(AtomicBool::new(false));
    let freed = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let mut worker = distributor.worker(i).unwrap();
            let (stop, freed) = (Arc::clone(&stop), Arc::clone(&freed));
            thread::spawn(move || {
                let mut none = Burst::<8>::new();
                let mut pkts = Burst::<8>::new();
                loop {
                    match worker.request_pkt(&mut none) {
                        Ok(_) => {}
                        Err(DistError::Closed) => return,
                        Err(e) => panic!("{e}"),
                    }
                    loop {
                        match worker.poll_pkt(&mut pkts) {
                            Ok(Some(n)) => {
                                freed.fetch_add(n as u64, Ordering::Relaxed);
                                pkts.clear();
                                break;
                            }
                            Ok(None) if stop.load(Ordering::Relaxed) => {
                                let _ = worker.return_pkt(&mut none);
                                return;
                            }
                            Ok(None) => std::hint::spin_loop(),
                            Err(DistError::Closed) => return,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            })
        })
        .collect();
    let mut sent = 0u64;
    let mut burst = Burst::<32>::new();
    while sent < TOTAL {
        let n = (TOTAL - sent).min(32) as usize - burst.len();
        if pool.alloc_bulk(&mut burst, n).is_err() {
            // Every buffer is in flight: wait for the workers.
            distributor.process(&mut Burst::<0>::new());
            continue;
        }
        for (k, m) in burst.iter_mut().enumerate() {
            m.set_rss_hash((sent + k as u64) as u32).unwrap();
        }
        sent += distributor.process(&mut burst) as u64;
    }
    assert_eq!(distributor.flush(), 0);
    stop.store(true, Ordering::Relaxed);
    drop(distributor);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(freed.load(Ordering::Relaxed), TOTAL);
    assert_pool_full(&pool);
}

#[test]
fn flows_leave_the_workers_in_arrival_order_and_flush_survives_a_shutdown() {
    const TOTAL: u64 = 50_000;
    const FLOWS: u64 = 37;
    const WORKERS: usize = 4;
    let pool = test_pool(2047);
    let mut distributor = new_distributor(WORKERS);
    // Per flow, the last sequence number a worker processed.
    let last: Arc<Mutex<HashMap<u32, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..WORKERS)
        .map(|i| {
            let mut worker = distributor.worker(i).unwrap();
            let (stop, last) = (Arc::clone(&stop), Arc::clone(&last));
            thread::spawn(move || {
                let mut pkts = Burst::<8>::new();
                let mut done = 0u64;
                // Worker 3 quits a third of the way in, in the middle of
                // the stream, with whatever it holds or has queued.
                let quota = if i == 3 {
                    TOTAL / 3 / WORKERS as u64
                } else {
                    u64::MAX
                };
                loop {
                    if done >= quota || stop.load(Ordering::Relaxed) {
                        let _ = worker.return_pkt(&mut pkts);
                        return;
                    }
                    worker.request_pkt(&mut pkts).unwrap();
                    loop {
                        match worker.poll_pkt(&mut pkts).unwrap() {
                            Some(_) => break,
                            None if stop.load(Ordering::Relaxed) => {
                                let _ = worker.return_pkt(&mut pkts);
                                return;
                            }
                            None => thread::yield_now(),
                        }
                    }
                    let mut l = last.lock().unwrap();
                    for m in pkts.iter() {
                        let prev = l.insert(m.rss_hash(), m.udata64());
                        if let Some(p) = prev {
                            assert!(
                                p < m.udata64(),
                                "flow {} went {p} then {}",
                                m.rss_hash(),
                                m.udata64()
                            );
                        }
                    }
                    done += pkts.len() as u64;
                }
            })
        })
        .collect();
    let mut seq = 0u64;
    let mut back = Burst::<64>::new();
    let mut order = ReturnOrder::default();
    let mut check_returns = |distributor: &mut Distributor, back: &mut Burst<64>| {
        distributor.returned_pkts(back);
        order.check_and_clear(back);
    };
    while seq < TOTAL {
        let mut burst: Burst<32> = burst_of(hashed_packets(&pool, 32, seq, |s| (s % FLOWS) as u32));
        seq += 32;
        while !burst.is_empty() {
            distributor.process(&mut burst);
            check_returns(&mut distributor, &mut back);
        }
    }
    loop {
        let left = distributor.flush();
        check_returns(&mut distributor, &mut back);
        if left == 0 {
            break;
        }
    }
    check_returns(&mut distributor, &mut back);
    assert_eq!(order.returned, seq);
    assert_eq!(distributor.stats().shutdowns, 1);
    stop.store(true, Ordering::Relaxed);
    drop(distributor);
    for h in handles {
        h.join().unwrap();
    }
    assert_pool_full(&pool);
}

/// Drops `worker` while a panic unwinds (as a worker thread that panicked would).
fn drop_in_panic(worker: Worker) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _w = worker;
        panic!("worker job failed (expected by the test)");
    }));
    assert!(r.is_err());
}

#[test]
fn the_answer_to_a_panic_dropped_handle_goes_to_the_next_one_or_is_freed() {
    let pool = test_pool(127);
    for next_handle in [true, false] {
        let mut distributor = new_distributor(1);
        let mut worker = distributor.worker(0).unwrap();
        let mut none = Burst::<8>::new();
        worker.request_pkt(&mut none).unwrap();
        let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 3, 0, |_| 4));
        assert_eq!(distributor.process(&mut burst), 3);
        // Answered, not taken, and the handle goes down with a panic: it
        // does not wait (nor hand the batch back).
        drop_in_panic(worker);
        if next_handle {
            let mut worker = distributor.worker(0).unwrap();
            let mut out = Burst::<8>::new();
            assert_eq!(worker.poll_pkt(&mut out).unwrap(), Some(3));
            assert_eq!(seqs(&out), vec![0, 1, 2]);
            worker.request_pkt(&mut out).unwrap();
            assert_eq!(distributor.flush(), 0);
            assert_eq!(distributor.returns_waiting(), 3);
            drop(distributor);
            drop(worker);
        } else {
            // No one takes it: freed with the shared lines.
            drop(distributor);
        }
        assert_pool_full_with(&pool, format_args!("next handle: {next_handle}"));
    }
}

/// Worker 0 takes `k` batches of flow A (handing each back with its next
/// request), then its handle is forgotten while idle (`k` = 0: before it ever
/// requested). Its id stays claimed; worker 1 serves flow B meanwhile; the
/// distributor still drops without waiting for the forgotten handle.
/// Every packet comes out at most once, and the pool ends exactly full (an
/// idle handle holds no packet).
fn check_forgotten_idle_worker(k: usize) {
    let pool = test_pool(127);
    let mut distributor = new_distributor(2);
    let mut w0 = distributor.worker(0).unwrap();
    let mut w1 = distributor.worker(1).unwrap();
    let mut none = Burst::<8>::new();
    let mut out = Burst::<8>::new();
    // How many times each packet reached a worker.
    let mut seen: HashMap<u64, usize> = HashMap::new();
    w1.request_pkt(&mut none).unwrap();
    for round in 0..k as u64 {
        w0.request_pkt(&mut out).unwrap();
        let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 8, round * 8, |_| 5));
        assert_eq!(distributor.process(&mut burst), 8);
        assert_eq!(w0.poll_pkt(&mut out).unwrap(), Some(8));
        for s in seqs(&out) {
            *seen.entry(s).or_default() += 1;
        }
    }
    // What it holds goes back to the pool; the handle is forgotten idle.
    out.clear();
    std::mem::forget(w0);
    assert!(matches!(
        distributor.worker(0),
        Err(DistError::WorkerClaimed { id: 0 })
    ));
    let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 8, 1000, |_| 6));
    assert_eq!(distributor.process(&mut burst), 8);
    assert_eq!(w1.poll_pkt(&mut out).unwrap(), Some(8));
    for s in seqs(&out) {
        *seen.entry(s).or_default() += 1;
    }
    w1.request_pkt(&mut out).unwrap();
    distributor.process(&mut none);
    let returned = count_returned(|out| distributor.returned_pkts(out));
    assert_handed_once_returned_at_most_once(&seen, 8 * k + 8, &returned);
    drop((distributor, w1));
    assert_pool_full_with(&pool, format_args!("k = {k}"));
}

#[test]
fn a_forgotten_idle_worker_loses_nothing_and_blocks_nothing() {
    for k in [0, 1, 3] {
        check_forgotten_idle_worker(k);
    }
}

/// A handle forgotten with a batch answered and not taken: that batch stays
/// in the handle's line (the handle keeps the shared block alive) and is
/// leaked, never handed to anyone else or freed twice: the pool ends
/// exactly the batch short.
#[test]
fn a_worker_forgotten_with_an_untaken_batch_leaks_only_that_batch() {
    let pool = test_pool(127);
    let (mut distributor, w0, w1) = two_requesting_workers();
    let mut burst: Burst<8> = burst_of(hashed_packets(&pool, 6, 0, |_| 5));
    assert_eq!(distributor.process(&mut burst), 6);
    std::mem::forget(w0);
    drop((distributor, w1));
    assert_eq!(pool.available(), 127 - 6);
}

#[test]
fn the_held_gauge_follows_what_the_distributor_holds() {
    let pool = test_pool(2047);
    let mut distributor = new_distributor(2);
    let held = distributor.held_gauge();
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..2)
        .map(|i| spawn_echo(distributor.worker(i).unwrap(), &stop))
        .collect();
    let mut burst: Burst<1024> = burst_of(hashed_packets(&pool, 1024, 0, |i| i as u32));
    let mut back = Burst::<1024>::new();
    while distributor.active_workers() < 2 {
        distributor.process(&mut Burst::<0>::new());
        thread::yield_now();
    }
    assert_eq!(distributor.process(&mut burst), 1024);
    let after_process = held.get();
    assert_eq!(
        after_process,
        (distributor.outstanding() + distributor.returns_waiting()) as u64
    );
    assert!(after_process > 0);
    // Every packet back from the workers, waiting to be collected.
    assert_eq!(distributor.flush(), 0);
    assert_eq!(held.get(), 1024);
    assert_eq!(distributor.returned_pkts(&mut back), 1024);
    assert_eq!(held.get(), 0);
    stop.store(true, Ordering::Relaxed);
    drop(distributor);
    for h in handles {
        h.join().unwrap();
    }
    drop(back);
    assert_pool_full(&pool);
}
