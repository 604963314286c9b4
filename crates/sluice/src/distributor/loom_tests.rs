//! Loom models of the handshake on one worker's lines (one distributor, one
//! worker): every interleaving up to the preemption bound, and every value
//! the memory model lets a load return.
//!
//! Packets are stand-ins: 64-byte aligned fake addresses, each with a
//! payload in a loom `UnsafeCell`. The distributor writes a payload before it
//! hands the packet over and the worker writes it before handing it back, so
//! a handshake whose Release/Acquire pairs did not order those accesses
//! fails the model (loom reports the unsynchronised access).
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p sluice --release --lib loom`.

use loom::thread;

use super::lines::{PARITY, SHUTDOWN, Shared, UNREAD};
use crate::mempool::Elem;
use crate::sync::{Arc, Ordering, UnsafeCell, spin_loop};
use crate::test_support::loom_model;

/// Stand-in packets: fake addresses and their payloads.
struct FakePackets {
    payload: Vec<UnsafeCell<u64>>,
}

impl FakePackets {
    fn new(n: usize) -> FakePackets {
        FakePackets {
            payload: (0..n).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    /// The address of packet `k` (64-byte aligned, never 0).
    fn elem(k: usize) -> Elem {
        Elem::from_ptr(std::ptr::NonNull::new(((k + 1) << 6) as *mut u8).unwrap())
    }

    fn index(e: Elem) -> usize {
        (e.as_ptr() as usize >> 6) - 1
    }

    fn write(&self, e: Elem, v: u64) {
        // SAFETY: a model: loom checks that the writer owns the packet.
        self.payload[Self::index(e)].with_mut(|p| unsafe { *p = v });
    }

    fn read(&self, e: Elem) -> u64 {
        // SAFETY: as above.
        self.payload[Self::index(e)].with(|p| unsafe { *p })
    }
}

#[test]
fn two_exchanges_hand_packets_over_and_back() {
    loom_model(|| {
        let shared = Arc::new(Shared::new(1));
        let pkts = Arc::new(FakePackets::new(3));
        let (s, p) = (Arc::clone(&shared), Arc::clone(&pkts));
        let worker = thread::spawn(move || {
            let l = &s.lines[0];
            let mut got = [Elem::DANGLING; 8];
            // First request: nothing to return.
            l.request(PARITY, 0, &[]);
            let first = loop {
                if let Some(f) = l.answered(PARITY) {
                    break f;
                }
                spin_loop();
            };
            let n = l.take_batch(first, &mut got);
            assert_eq!(n, 2);
            for &e in &got[..n] {
                assert_eq!(p.read(e), 10 + FakePackets::index(e) as u64);
                p.write(e, 20 + FakePackets::index(e) as u64);
            }
            // Second request: return both, take the next batch.
            l.request(0, 0, &got[..n]);
            let first = loop {
                if let Some(f) = l.answered(0) {
                    break f;
                }
                spin_loop();
            };
            let n = l.take_batch(first, &mut got);
            assert_eq!(n, 1);
            assert_eq!(p.read(got[0]), 12);
        });
        let l = &shared.lines[0];
        let mut rets = [Elem::DANGLING; 8];
        // Wait for the first request, answer with packets 0 and 1.
        let first = loop {
            if let Some(f) = l.pending(0) {
                break f;
            }
            spin_loop();
        };
        assert_eq!(l.take_returns(first, &mut rets), 0);
        for k in 0..2 {
            pkts.write(FakePackets::elem(k), 10 + k as u64);
        }
        l.answer(PARITY, &[FakePackets::elem(0), FakePackets::elem(1)]);
        // Wait for the second: the two come back, written by the worker.
        let first = loop {
            if let Some(f) = l.pending(PARITY) {
                break f;
            }
            spin_loop();
        };
        assert_eq!(l.take_returns(first, &mut rets), 2);
        for (k, &e) in rets[..2].iter().enumerate() {
            assert_eq!(FakePackets::index(e), k);
            assert_eq!(pkts.read(e), 20 + k as u64);
        }
        pkts.write(FakePackets::elem(2), 12);
        l.answer(0, &[FakePackets::elem(2)]);
        worker.join().unwrap();
    });
}

#[test]
fn a_worker_quitting_while_waiting_gets_an_empty_answer_or_hands_the_batch_back() {
    loom_model(|| {
        let shared = Arc::new(Shared::new(1));
        let pkts = Arc::new(FakePackets::new(1));
        let (s, p) = (Arc::clone(&shared), Arc::clone(&pkts));
        let worker = thread::spawn(move || {
            let l = &s.lines[0];
            l.request(PARITY, 0, &[]);
            // Give up waiting.
            l.set_quit(true);
            let first = loop {
                if let Some(f) = l.answered(PARITY) {
                    break f;
                }
                spin_loop();
            };
            l.set_quit(false);
            if first & !PARITY != 0 {
                // A batch came first: hand it back untaken.
                let mut got = [Elem::DANGLING; 8];
                assert_eq!(l.take_batch(first, &mut got), 1);
                assert_eq!(p.read(got[0]), 7);
                l.request(0, SHUTDOWN | UNREAD, &[]);
            }
        });
        let l = &shared.lines[0];
        let mut rets = [Elem::DANGLING; 8];
        loop {
            if let Some(f) = l.pending(0) {
                assert_eq!(l.take_returns(f, &mut rets), 0);
                break;
            }
            spin_loop();
        }
        if l.quitting() {
            // The worker asked to stop: an empty answer shuts it down.
            l.answer(PARITY, &[]);
        } else {
            pkts.write(FakePackets::elem(0), 7);
            l.answer(PARITY, &[FakePackets::elem(0)]);
            // The worker is quitting: it hands the batch back flagged
            // unread, and the distributor takes it back.
            let first = loop {
                if let Some(f) = l.pending(PARITY) {
                    break f;
                }
                spin_loop();
            };
            assert_eq!(first & (SHUTDOWN | UNREAD), SHUTDOWN | UNREAD);
            let mut back = [Elem::DANGLING; 8];
            assert_eq!(l.unread_batch(&mut back), 1);
            // Ours again: writing it races with nothing.
            pkts.write(back[0], 8);
            l.answer(0, &[]);
        }
        worker.join().unwrap();
    });
}

#[test]
fn a_request_is_answered_by_the_dropping_distributor_or_reclaimed_by_the_worker() {
    loom_model(|| {
        let shared = Arc::new(Shared::new(1));
        let pkts = Arc::new(FakePackets::new(1));
        // Who ended up with the returned packet: 1 = distributor, 2 = worker.
        let owner = Arc::new(crate::sync::AtomicU32::new(0));
        let (s, p, o) = (Arc::clone(&shared), Arc::clone(&pkts), Arc::clone(&owner));
        let worker = thread::spawn(move || {
            let l = &s.lines[0];
            p.write(FakePackets::elem(0), 5);
            l.request(PARITY, 0, &[FakePackets::elem(0)]);
            loop {
                if l.answered(PARITY).is_some() {
                    return;
                }
                // As `Worker::check_gone`: gone, and still no answer, means
                // none will come — the returns are ours again.
                if s.gone.load(Ordering::Acquire) != 0 && l.answered(PARITY).is_none() {
                    let mut back = [Elem::DANGLING; 8];
                    let first = l.own_request();
                    assert_eq!(l.take_returns(first, &mut back), 1);
                    assert_eq!(p.read(back[0]), 5);
                    p.write(back[0], 6);
                    assert_eq!(o.swap(2, Ordering::Relaxed), 0, "owned twice");
                    // As `Worker::reclaim_returns`: W == D again, no
                    // request left open.
                    l.request(0, 0, &[]);
                    return;
                }
                spin_loop();
            }
        });
        // The distributor's drop, racing with the request: answer it if
        // it is there, then say it is gone.
        let l = &shared.lines[0];
        if let Some(first) = l.pending(0) {
            let mut back = [Elem::DANGLING; 8];
            assert_eq!(l.take_returns(first, &mut back), 1);
            assert_eq!(pkts.read(back[0]), 5);
            assert_eq!(owner.swap(1, Ordering::Relaxed), 0, "owned twice");
            l.answer(PARITY, &[]);
        }
        shared.gone.store(1, Ordering::Release);
        worker.join().unwrap();
        assert_ne!(
            owner.load(Ordering::Relaxed),
            0,
            "the returned packet was lost"
        );
    });
}
