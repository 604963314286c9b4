//! Single-packet distributor tests: single-threaded where the rule can be
//! shown step by step (the non-blocking `request_pkt`/`poll_pkt` let one
//! thread play every role), threaded for the rest. Every loop is bounded;
//! every test ends with its pool full.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use super::test_support::{
    ReturnOrder, assert_handed_once_returned_at_most_once, count_returned, hashed_burst, seqs,
    take_returns,
};
use super::*;
use crate::mbuf::{Burst, Mbuf};
use crate::test_support::{assert_pool_full, assert_pool_full_with, test_pool};

fn none() -> Burst<0> {
    Burst::new()
}

/// A distributor of `workers` workers, every one active.
fn active_workers(workers: usize) -> (SingleDistributor, Vec<SingleWorker>) {
    let mut distributor = SingleDistributor::new(workers).unwrap();
    let mut ws: Vec<SingleWorker> = (0..workers)
        .map(|i| distributor.worker(i).unwrap())
        .collect();
    activate(&mut distributor, &mut ws);
    (distributor, ws)
}

/// Every worker requests once and the distributor sees it.
fn activate(distributor: &mut SingleDistributor, ws: &mut [SingleWorker]) {
    for worker in ws.iter_mut() {
        worker.request_pkt(None).unwrap();
    }
    assert_eq!(distributor.process(&mut none()), 0);
    assert_eq!(distributor.active_workers(), ws.len());
}

/// Plays workers and distributor step by step until the workers have
/// taken `n` packets: a worker with an answer records the packet's
/// sequence number and hands it back with its next request; then the
/// distributor runs. Panics if that takes more than 1000 rounds.
fn serve(
    distributor: &mut SingleDistributor,
    ws: &mut [SingleWorker],
    got: &mut [Vec<u64>],
    n: usize,
) {
    let mut taken = 0;
    for _ in 0..1000 {
        for (i, worker) in ws.iter_mut().enumerate() {
            match worker.poll_pkt() {
                Ok(Some(m)) => {
                    got[i].push(m.udata64());
                    taken += 1;
                    worker.request_pkt(Some(m)).unwrap();
                }
                // Not serving (shut down).
                Ok(None) | Err(DistError::NotRequested { .. }) => {}
                Err(e) => panic!("worker {i}: {e}"),
            }
        }
        distributor.process(&mut none());
        if taken == n {
            return;
        }
    }
    panic!("the workers took {taken} of {n} packets");
}

/// Flushes `distributor`, which must have nothing left to hand out, and
/// takes its returns: their sequence numbers, in the order they came back.
fn flush_and_take_returns(distributor: &mut SingleDistributor) -> Vec<u64> {
    assert_eq!(distributor.flush(), 0, "packets still in the distributor");
    take_returns(|back| distributor.returned_pkts(back))
}

#[test]
fn bad_input_is_an_error_with_a_clear_message() {
    let pool = test_pool(127);
    let e = SingleDistributor::new(0).unwrap_err();
    assert_eq!(e, DistError::NoWorkers);
    assert_eq!(e.to_string(), "a distributor needs at least one worker");
    let e = SingleDistributor::new(65).unwrap_err();
    assert_eq!(e, DistError::TooManyWorkers { asked: 65 });
    assert_eq!(e.to_string(), "65 workers asked for: at most 64");
    assert_eq!(SingleDistributor::new(64).unwrap().num_workers(), 64);

    let distributor = SingleDistributor::new(4).unwrap();
    assert_eq!(
        distributor.worker(4).unwrap_err().to_string(),
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
    assert_eq!(
        worker.poll_pkt().unwrap_err().to_string(),
        "worker 1 polled without a request (request_pkt)"
    );
    worker.request_pkt(None).unwrap();
    assert_eq!(
        worker.request_pkt(None).unwrap_err().to_string(),
        "worker 1 asked for packets again before taking the last answer (poll_pkt)"
    );
    // A packet to hand back while a request is open: refused (and freed).
    let m = pool.alloc().unwrap();
    assert_eq!(
        worker.get_pkt(Some(m)).unwrap_err(),
        DistError::RequestPending { id: 1 }
    );
    // A dropped handle frees the id.
    drop(distributor.worker(2).unwrap());
    assert_eq!(distributor.worker(2).unwrap().id(), 2);
    // (Worker 1's request is open: the distributor goes first.)
    drop(distributor);
    assert_eq!(worker.poll_pkt().unwrap_err(), DistError::Closed);
    drop(worker);
    assert_pool_full(&pool);
}

#[test]
fn all_packets_of_one_flow_go_to_one_worker() {
    let pool = test_pool(1023);
    let (mut distributor, mut ws) = active_workers(4);
    for round in 0..8u64 {
        // Eight packets of one flow with every worker idle: one is handed
        // at once, seven queue behind it for the same worker.
        let mut burst: Burst<8> = hashed_burst(&pool, 8, round * 8, |_| 0x1234);
        assert_eq!(distributor.process(&mut burst), 8);
        let mut got = vec![Vec::new(); 4];
        serve(&mut distributor, &mut ws, &mut got, 8);
        let busy: Vec<_> = got.iter().filter(|g| !g.is_empty()).collect();
        assert_eq!(busy.len(), 1, "round {round}: {got:?}");
        assert_eq!(*busy[0], (round * 8..round * 8 + 8).collect::<Vec<_>>());
    }
    assert_eq!(distributor.stats().handed.iter().sum::<u64>(), 64);
    assert_eq!(distributor.outstanding(), 0);
    assert_eq!(distributor.returns_waiting(), 64);
    distributor.clear_returns();
    drop((distributor, ws));
    assert_pool_full(&pool);
}

#[test]
fn distinct_flows_spread_over_every_worker() {
    let pool = test_pool(127);
    let (mut distributor, mut ws) = active_workers(4);
    // Eight flows: one to each idle worker, then one more to each of the
    // least loaded, lowest id first.
    let mut burst: Burst<8> = hashed_burst(&pool, 8, 0, |i| i as u32 + 100);
    assert_eq!(distributor.process(&mut burst), 8);
    assert_eq!(distributor.outstanding(), 8);
    let mut got = vec![Vec::new(); 4];
    serve(&mut distributor, &mut ws, &mut got, 8);
    assert_eq!(got, vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]);
    assert_eq!(distributor.stats().handed, vec![2; 4]);
    let mut returned = flush_and_take_returns(&mut distributor);
    returned.sort_unstable();
    assert_eq!(returned, (0..8).collect::<Vec<_>>());
    drop((distributor, ws));
    assert_pool_full(&pool);
}

#[test]
fn a_worker_shutting_down_with_a_full_backlog_loses_nothing() {
    let pool = test_pool(127);
    let (mut distributor, mut ws) = active_workers(2);
    // Nine packets of one flow: one handed to worker 0, eight queued.
    let mut burst: Burst<16> = hashed_burst(&pool, 9, 0, |_| 9);
    assert_eq!(distributor.process(&mut burst), 9);
    assert_eq!(distributor.outstanding(), 9);
    // A tenth must wait for worker 0: nothing taken while it does not ask
    // is impossible to show single-threaded, so worker 0 quits instead,
    // handing back the one it did.
    let m = ws[0].poll_pkt().unwrap().expect("worker 0 was answered");
    assert_eq!(m.udata64(), 0);
    assert_eq!(ws[1].poll_pkt().unwrap().map(|m| m.udata64()), None);
    ws[0].return_pkt(Some(m)).unwrap();
    distributor.process(&mut none());
    let stats = distributor.stats();
    assert_eq!(
        (stats.shutdowns, stats.redistributed, stats.returned),
        (1, 8, 1)
    );
    assert_eq!(distributor.active_workers(), 1);
    // Its backlog goes to worker 1, in order.
    let mut got = vec![Vec::new(); 2];
    serve(&mut distributor, &mut ws, &mut got, 8);
    assert_eq!(got[1], (1..9).collect::<Vec<_>>());
    assert!(got[0].is_empty());
    assert_eq!(
        flush_and_take_returns(&mut distributor),
        (0..9).collect::<Vec<_>>()
    );
    drop((distributor, ws));
    assert_pool_full(&pool);
}

#[test]
fn an_unread_packet_of_a_worker_shutting_down_goes_first_to_another() {
    let pool = test_pool(127);
    let (mut distributor, mut ws) = active_workers(2);
    let mut burst: Burst<4> = hashed_burst(&pool, 3, 0, |_| 3);
    assert_eq!(distributor.process(&mut burst), 3);
    // Worker 0 was answered but quits without taking its packet.
    ws[0].return_pkt(None).unwrap();
    distributor.process(&mut none());
    assert_eq!(distributor.stats().redistributed, 3);
    let mut got = vec![Vec::new(); 2];
    serve(&mut distributor, &mut ws, &mut got, 3);
    assert_eq!(got, vec![vec![], vec![0, 1, 2]]);
    assert_eq!(flush_and_take_returns(&mut distributor), vec![0, 1, 2]);
    drop((distributor, ws));
    assert_pool_full(&pool);
}

#[test]
fn a_worker_waiting_for_a_packet_can_quit_and_come_back() {
    let pool = test_pool(127);
    let mut distributor = SingleDistributor::new(2).unwrap();
    let mut w0 = distributor.worker(0).unwrap();
    w0.request_pkt(None).unwrap();
    distributor.process(&mut none());
    assert_eq!(distributor.active_workers(), 1);
    let t = thread::spawn(move || {
        // Waiting with nothing to take: return_pkt asks to be let go.
        w0.return_pkt(None).unwrap();
        w0
    });
    let mut rounds = 0;
    while !t.is_finished() {
        distributor.process(&mut none());
        thread::yield_now();
        rounds += 1;
        assert!(rounds < 10_000_000, "the worker never quit");
    }
    let mut w0 = t.join().unwrap();
    assert_eq!(distributor.active_workers(), 0);
    assert_eq!(distributor.stats().shutdowns, 1);
    // No active worker: packets stay with the caller.
    let mut burst: Burst<2> = hashed_burst(&pool, 2, 0, |_| 5);
    assert_eq!(distributor.process(&mut burst), 0);
    assert_eq!(burst.len(), 2);
    // Back again, it receives.
    w0.request_pkt(None).unwrap();
    assert_eq!(distributor.process(&mut burst), 2);
    let mut got = vec![Vec::new()];
    serve(&mut distributor, std::slice::from_mut(&mut w0), &mut got, 2);
    assert_eq!(got[0], vec![0, 1]);
    assert_eq!(distributor.flush(), 0);
    assert_eq!(distributor.returns_waiting(), 2);
    drop((distributor, w0));
    assert_pool_full(&pool);
}

#[test]
fn a_full_returns_fifo_holds_the_worker_and_counts_once() {
    let pool = test_pool(127);
    let mut distributor = SingleDistributor::with_returns(1, 8).unwrap();
    let mut worker = distributor.worker(0).unwrap();
    worker.request_pkt(None).unwrap();
    // Nine exchanges: the FIFO takes the first eight returns.
    for i in 0..9u64 {
        let mut burst: Burst<1> = hashed_burst(&pool, 1, i, |_| 1);
        assert_eq!(distributor.process(&mut burst), 1);
        let m = worker.poll_pkt().unwrap().expect("answered");
        assert_eq!(m.udata64(), i);
        worker.request_pkt(Some(m)).unwrap();
    }
    assert_eq!(distributor.returns_waiting(), 8);
    assert_eq!(distributor.stats().returns_full, 0);
    // The ninth return does not fit: the worker waits; packet 9 queues.
    let mut burst: Burst<1> = hashed_burst(&pool, 1, 9, |_| 1);
    assert_eq!(distributor.process(&mut burst), 1);
    assert_eq!(distributor.stats().returns_full, 1);
    assert_eq!(worker.poll_pkt().unwrap().map(|m| m.udata64()), None);
    assert_eq!(distributor.process(&mut none()), 0);
    assert_eq!(
        distributor.stats().returns_full,
        1,
        "counted once per request"
    );
    // Eight more of the flow: seven fit the backlog, the eighth must wait
    // for the worker, which waits for room: process leaves it.
    let mut burst: Burst<8> = hashed_burst(&pool, 8, 10, |_| 1);
    assert_eq!(distributor.process(&mut burst), 7);
    assert_eq!(seqs(&burst), vec![17]);
    assert_eq!(distributor.flush(), 9, "flush cannot go on either");
    assert_eq!(distributor.stats().returns_full, 1);
    let mut back = Burst::<8>::new();
    assert_eq!(distributor.returned_pkts(&mut back), 8);
    assert_eq!(seqs(&back), (0..8).collect::<Vec<_>>());
    back.clear();
    // Room again: the return goes in, the worker gets packet 9.
    assert_eq!(distributor.process(&mut burst), 1);
    assert_eq!(worker.poll_pkt().unwrap().map(|m| m.udata64()), Some(9));
    let stats = distributor.stats();
    assert_eq!((stats.returned, stats.distributed), (9, 18));
    // The worker shuts down idle; the distributor, dropped, frees its
    // backlog and the shutdown request's packets.
    drop((burst, worker));
    drop(distributor);
    assert_pool_full(&pool);
}

#[test]
fn dropping_the_distributor_under_open_requests_frees_everything() {
    let pool = test_pool(127);
    let mut distributor = SingleDistributor::new(2).unwrap();
    let mut w0 = distributor.worker(0).unwrap();
    let mut w1 = distributor.worker(1).unwrap();
    w0.request_pkt(None).unwrap();
    w1.request_pkt(None).unwrap();
    let mut burst: Burst<8> = hashed_burst(&pool, 6, 0, |i| (i % 2) as u32 + 2);
    assert_eq!(distributor.process(&mut burst), 6);
    // Worker 0 hands its packet back with a new request; worker 1 never
    // takes its answer.
    let m = w0.poll_pkt().unwrap().expect("answered");
    w0.request_pkt(Some(m)).unwrap();
    drop(distributor);
    assert_eq!(w0.poll_pkt().unwrap_err(), DistError::Closed);
    assert_eq!(w0.request_pkt(None).unwrap_err(), DistError::Closed);
    // Worker 1 quits: its untaken packet is freed.
    assert_eq!(w1.return_pkt(None).unwrap_err(), DistError::Closed);
    drop((w0, w1));
    assert_pool_full(&pool);
}

#[test]
fn a_handle_dropped_by_a_panic_leaves_its_answer_to_the_next() {
    let pool = test_pool(127);
    let mut distributor = SingleDistributor::new(2).unwrap();
    let mut w0 = distributor.worker(0).unwrap();
    let mut w1 = distributor.worker(1).unwrap();
    w0.request_pkt(None).unwrap();
    w1.request_pkt(None).unwrap();
    let mut burst: Burst<8> = hashed_burst(&pool, 3, 0, |_| 6);
    assert_eq!(distributor.process(&mut burst), 3);
    // Worker 0 has an answer (packet 0, with 1 and 2 queued) and its
    // thread panics before taking it.
    let r = catch_unwind(AssertUnwindSafe(move || {
        let _w = w0;
        panic!("worker 0 fails");
    }));
    assert!(r.is_err());
    // The next handle takes the answer, then the rest of the flow.
    let mut w0 = distributor.worker(0).unwrap();
    let mut got = Vec::new();
    for _ in 0..100 {
        if let Some(m) = w0.poll_pkt().unwrap() {
            got.push(m.udata64());
            w0.request_pkt(Some(m)).unwrap();
        }
        distributor.process(&mut none());
    }
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(distributor.flush(), 0);

    // A panic before the answer: the quit is granted, the next handle
    // starts again.
    let r = catch_unwind(AssertUnwindSafe(move || {
        let _w = w0;
        panic!("worker 0 fails again");
    }));
    assert!(r.is_err());
    distributor.process(&mut none());
    assert_eq!(distributor.stats().shutdowns, 1);
    assert_eq!(distributor.active_workers(), 1);
    let mut w0 = distributor.worker(0).unwrap();
    assert_eq!(w0.poll_pkt().unwrap().map(|m| m.udata64()), None);
    distributor.process(&mut none());
    assert_eq!(distributor.active_workers(), 2);

    // A panic with an answer and no next handle: the last owner frees it.
    let mut burst: Burst<8> = hashed_burst(&pool, 1, 3, |_| 6);
    assert_eq!(distributor.process(&mut burst), 1);
    let r = catch_unwind(AssertUnwindSafe(move || {
        let _w = w0;
        panic!("worker 0 fails for good");
    }));
    assert!(r.is_err());
    drop(distributor);
    drop(w1);
    assert_pool_full(&pool);
}

#[test]
fn flows_leave_the_workers_in_arrival_order() {
    const TOTAL: u64 = 30_000;
    const FLOWS: u64 = 37;
    const WORKERS: usize = 4;
    let pool = test_pool(2047);
    let mut distributor = SingleDistributor::new(WORKERS).unwrap();
    // Per flow, the last sequence number a worker processed.
    let last: Arc<Mutex<HashMap<u32, u64>>> = Arc::default();
    let handles: Vec<_> = (0..WORKERS)
        .map(|i| {
            let mut worker = distributor.worker(i).unwrap();
            let last = Arc::clone(&last);
            thread::spawn(move || {
                let mut done = 0u64;
                // Worker 3 quits a third of the way in, in the middle of
                // the stream, with whatever it holds or has queued.
                let quota = if i == 3 {
                    TOTAL / 3 / WORKERS as u64
                } else {
                    u64::MAX
                };
                let mut ret = None;
                loop {
                    if done >= quota {
                        let _ = worker.return_pkt(ret);
                        return done;
                    }
                    let m = match worker.get_pkt(ret.take()) {
                        Ok(m) => m,
                        Err(DistError::Closed) => return done,
                        Err(e) => panic!("{e}"),
                    };
                    let prev = last.lock().unwrap().insert(m.rss_hash(), m.udata64());
                    if let Some(p) = prev {
                        assert!(
                            p < m.udata64(),
                            "flow {} went {p} then {}",
                            m.rss_hash(),
                            m.udata64()
                        );
                    }
                    done += 1;
                    ret = Some(m);
                }
            })
        })
        .collect();
    let mut back = Burst::<64>::new();
    let mut order = ReturnOrder::default();
    let mut check_returns = |distributor: &mut SingleDistributor, back: &mut Burst<64>| {
        distributor.returned_pkts(back);
        order.check_and_clear(back);
    };
    wait_active(&mut distributor, WORKERS);
    let mut seq = 0u64;
    while seq < TOTAL {
        let mut burst: Burst<32> = hashed_burst(&pool, 32, seq, |s| (s % FLOWS) as u32);
        seq += 32;
        // Bounded: every call takes at least one packet unless the
        // returns FIFO is full, which the check empties.
        for _ in 0..64 {
            if burst.is_empty() {
                break;
            }
            distributor.process(&mut burst);
            check_returns(&mut distributor, &mut back);
        }
        assert!(burst.is_empty());
    }
    for _ in 0..64 {
        let left = distributor.flush();
        check_returns(&mut distributor, &mut back);
        if left == 0 {
            break;
        }
    }
    check_returns(&mut distributor, &mut back);
    assert_eq!(distributor.outstanding(), 0);
    assert_eq!(order.returned, seq);
    assert_eq!(distributor.stats().shutdowns, 1);
    drop(distributor);
    let done: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(done, seq);
    assert_pool_full(&pool);
}

#[test]
fn two_hundred_thousand_packets_allocated_and_freed_by_workers_leave_the_pool_full() {
    const TOTAL: u64 = 200_000;
    // A small pool: a leak of even a few packets per thousand would
    // exhaust it long before the end.
    let pool = test_pool(255);
    let mut distributor = SingleDistributor::new(2).unwrap();
    let freed = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let mut worker = distributor.worker(i).unwrap();
            let freed = Arc::clone(&freed);
            thread::spawn(move || {
                loop {
                    match worker.get_pkt(None) {
                        Ok(m) => {
                            drop(m);
                            freed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(DistError::Closed) => return,
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    wait_active(&mut distributor, 2);
    let mut sent = 0u64;
    let mut burst = Burst::<32>::new();
    let mut rounds = 0u64;
    while sent < TOTAL {
        rounds += 1;
        assert!(rounds < 100_000_000, "stuck at {sent} packets");
        let n = (TOTAL - sent).min(32) as usize - burst.len();
        if pool.alloc_bulk(&mut burst, n).is_err() {
            // Every buffer is in flight: wait for the workers.
            distributor.process(&mut none());
            continue;
        }
        for (k, m) in burst.iter_mut().enumerate() {
            m.set_rss_hash((sent + k as u64) as u32).unwrap();
        }
        sent += distributor.process(&mut burst) as u64;
    }
    assert_eq!(distributor.flush(), 0);
    let stats = distributor.stats();
    assert_eq!(stats.distributed, TOTAL);
    assert_eq!(stats.handed.iter().sum::<u64>(), TOTAL);
    assert_eq!(stats.returned, 0);
    drop(distributor);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(freed.load(Ordering::Relaxed), TOTAL);
    assert_pool_full(&pool);
}

#[test]
fn a_worker_thread_echoes_a_1024_packet_burst_packet_for_packet() {
    let pool = test_pool(2047);
    let mut distributor = SingleDistributor::new(1).unwrap();
    let mut worker = distributor.worker(0).unwrap();
    let h = thread::spawn(move || {
        let mut ret: Option<Mbuf> = None;
        let mut got = 0u64;
        loop {
            match worker.get_pkt(ret.take()) {
                Ok(m) => {
                    got += 1;
                    ret = Some(m);
                }
                Err(DistError::Closed) => return got,
                Err(e) => panic!("{e}"),
            }
        }
    });
    wait_active(&mut distributor, 1);
    let mut burst: Burst<1024> = hashed_burst(&pool, 1024, 0, |i| (i % 97) as u32);
    assert_eq!(distributor.process(&mut burst), 1024);
    // The worker hands back its last packet with its next request.
    assert_eq!(distributor.flush(), 0);
    let mut back = Burst::<1024>::new();
    assert_eq!(distributor.returned_pkts(&mut back), 1024);
    // One worker: every packet comes back, in order.
    assert_eq!(seqs(&back), (0..1024).collect::<Vec<_>>());
    assert_eq!(distributor.stats().handed, vec![1024]);
    drop(distributor);
    assert_eq!(h.join().unwrap(), 1024);
    drop(back);
    assert_pool_full(&pool);
}

/// Runs the distributor until `n` workers are active (bounded).
fn wait_active(distributor: &mut SingleDistributor, n: usize) {
    for _ in 0..10_000_000 {
        if distributor.active_workers() == n {
            return;
        }
        distributor.process(&mut none());
        thread::yield_now();
    }
    panic!(
        "{} of {n} workers became active",
        distributor.active_workers()
    );
}

/// Worker 0 takes `k` packets of flow A (handing each back with its next
/// request), then its handle is forgotten while idle. Its id stays claimed;
/// worker 1 serves flow B meanwhile, and the distributor drops without
/// waiting for the forgotten handle. Every packet reaches a worker once and
/// comes back at most once, and the pool ends exactly full (an idle handle
/// holds no packet).
fn check_forgotten_idle_worker(k: usize) {
    let pool = test_pool(127);
    let mut distributor = SingleDistributor::new(2).unwrap();
    let mut w0 = distributor.worker(0).unwrap();
    let mut w1 = distributor.worker(1).unwrap();
    let mut handed: HashMap<u64, usize> = HashMap::new();
    w1.request_pkt(None).unwrap();
    let mut held: Option<Mbuf> = None;
    for i in 0..k as u64 {
        w0.request_pkt(held.take()).unwrap();
        let mut burst: Burst<1> = hashed_burst(&pool, 1, i, |_| 5);
        assert_eq!(distributor.process(&mut burst), 1);
        let m = w0.poll_pkt().unwrap().expect("answered");
        *handed.entry(m.udata64()).or_default() += 1;
        held = Some(m);
    }
    drop(held);
    std::mem::forget(w0);
    assert!(matches!(
        distributor.worker(0),
        Err(DistError::WorkerClaimed { id: 0 })
    ));
    let mut burst: Burst<1> = hashed_burst(&pool, 1, 1000, |_| 6);
    assert_eq!(distributor.process(&mut burst), 1);
    let m = w1.poll_pkt().unwrap().expect("answered");
    *handed.entry(m.udata64()).or_default() += 1;
    w1.request_pkt(Some(m)).unwrap();
    distributor.process(&mut none());
    let returned = count_returned(|out| distributor.returned_pkts(out));
    assert_handed_once_returned_at_most_once(&handed, k + 1, &returned);
    drop((distributor, w1));
    assert_pool_full_with(&pool, format_args!("k = {k}"));
}

#[test]
fn a_forgotten_idle_worker_loses_nothing_and_blocks_nothing() {
    for k in [0, 1, 3] {
        check_forgotten_idle_worker(k);
    }
}
