//! Loom models of the ring: every interleaving (up to the preemption bound)
//! and every value the memory model lets a load return.
//!
//! Each model moves a few tagged values (`producer * 100 + sequence`) through
//! a small ring so that the indices wrap, and checks that every value sent
//! arrives exactly once and, for each consumer, in its producer's order. Loom
//! also checks every slot access: a consumer reading a slot that a producer
//! may still be writing (or the reverse) fails the model.
//!
//! # Bounded retries
//!
//! With three threads the models do not spin until everything has gone
//! through. Loom explores every choice of thread at a `yield_now`, including
//! unfair ones: two consumers polling an empty ring can be scheduled in turn
//! for ever while the producer that would fill it never runs again, and the
//! model then fails for exceeding its branch budget although the ring is fine
//! (an operating system does not starve a thread for ever). So in those models
//! every thread gives up after a few failed attempts, each producer reports how
//! many of its values the ring accepted (a prefix, since bulk and burst
//! operations take values from the front), and once every thread has been
//! joined the main thread drains what is left. The check is then that exactly
//! the accepted values come out, each once and in order. The ring's own
//! retry loops (a claimer waiting for earlier claimers to publish) wait for a
//! thread that needs nothing from anyone, so they always end.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p sluice --release --lib loom`;
//! `LOOM_MAX_PREEMPTIONS` overrides the default bound of 3.

use loom::thread;

use super::*;
use crate::sync::Arc;
use crate::test_support::loom_model;

/// The values producer number `producer` sends.
fn tagged(producer: u32, n: u32) -> Vec<u32> {
    (0..n).map(|seq| producer * 100 + seq).collect()
}

/// Every value of `sent` (one list per producer) is in exactly one of
/// `received` (one list per consumer), and each consumer saw each producer's
/// values in the order they were sent.
fn check_arrivals(sent: &[Vec<u32>], received: &[Vec<u32>]) {
    let mut all: Vec<u32> = received.iter().flatten().copied().collect();
    all.sort_unstable();
    let mut want: Vec<u32> = sent.iter().flatten().copied().collect();
    want.sort_unstable();
    assert_eq!(all, want, "every value exactly once: got {received:?}");
    for got in received {
        for producer in 0..sent.len() as u32 {
            let seq: Vec<u32> = got
                .iter()
                .copied()
                .filter(|v| v / 100 == producer)
                .collect();
            assert!(
                seq.windows(2).all(|w| w[0] < w[1]),
                "producer {producer}'s values out of order: {got:?}"
            );
        }
    }
}

/// Enqueues `values` in batches of at most `batch` (bulk or burst), retrying
/// after a yield while the ring is full, at most `attempts` times in all.
/// Returns how many values were enqueued (a prefix of `values`).
fn produce<M: SyncMode>(
    tx: &mut Producer<u32, M>,
    values: &[u32],
    batch: usize,
    bulk: bool,
    mut attempts: usize,
) -> usize {
    let cap = tx.capacity();
    let mut sent = 0;
    while sent < values.len() {
        let want = (values.len() - sent).min(batch);
        let src = &values[sent..sent + want];
        let moved = if bulk {
            tx.enqueue_bulk(src)
        } else {
            tx.enqueue_burst(src)
        };
        assert!(moved.n <= want && (!bulk || moved.n == 0 || moved.n == want));
        assert!(moved.n + moved.left <= cap, "{moved:?} in a ring of {cap}");
        sent += moved.n;
        if moved.n == 0 {
            attempts -= 1;
            if attempts == 0 {
                break;
            }
            thread::yield_now();
        }
    }
    sent
}

/// Dequeues in bursts of at most `batch` until `attempts` attempts found the
/// ring empty; returns the values, in the order they came.
fn consume<M: SyncMode>(rx: &mut Consumer<u32, M>, batch: usize, mut attempts: usize) -> Vec<u32> {
    let cap = rx.capacity();
    let mut got = Vec::new();
    let mut buf = vec![u32::MAX; batch];
    while attempts > 0 {
        let moved = rx.dequeue_burst(&mut buf);
        assert!(moved.n + moved.left <= cap, "{moved:?} in a ring of {cap}");
        got.extend_from_slice(&buf[..moved.n]);
        if moved.n == 0 {
            attempts -= 1;
            thread::yield_now();
        }
    }
    got
}

/// Once every other thread is done: takes what is left, which must be all
/// that is in the ring.
fn drain<M: SyncMode>(rx: &mut Consumer<u32, M>) -> Vec<u32> {
    let mut rest = vec![u32::MAX; rx.capacity() + 1];
    let moved = rx.dequeue_burst(&mut rest);
    assert_eq!(moved.left, 0);
    assert!(rx.is_empty());
    rest.truncate(moved.n);
    rest
}

#[test]
fn loom_spsc_bulk_across_the_wrap() {
    // Two threads: a thread that yields always lets the other one run, so
    // both sides can retry until done.
    loom_model(|| {
        let (mut tx, mut rx) = Ring::<u32>::spsc(2).unwrap();
        let sent = tagged(0, 5);
        let values = sent.clone();
        let producer = thread::spawn(move || {
            // One value (slot 0), then bulks of two that wrap: slots 1, 0
            // and 1, 0 again.
            assert_eq!(produce(&mut tx, &values[..1], 1, true, usize::MAX), 1);
            assert_eq!(produce(&mut tx, &values[1..], 2, true, usize::MAX), 4);
        });
        // The same on the way out: one value, then bulks of two.
        let mut got = Vec::new();
        loop {
            match rx.pop() {
                Some(v) => {
                    got.push(v);
                    break;
                }
                None => thread::yield_now(),
            }
        }
        let mut buf = [u32::MAX; 2];
        while got.len() < sent.len() {
            let moved = rx.dequeue_bulk(&mut buf);
            assert!(moved.n == 0 || moved.n == 2, "{moved:?}");
            assert!(moved.n + moved.left <= 2, "{moved:?}");
            got.extend_from_slice(&buf[..moved.n]);
            if moved.n == 0 {
                thread::yield_now();
            }
        }
        producer.join().unwrap();
        assert_eq!(got, sent);
        assert!(rx.is_empty());
    });
}

#[test]
fn loom_spsc_bursts_across_the_wrap_capacity_4() {
    loom_model(|| {
        let (mut tx, mut rx) = Ring::<u32>::spsc(4).unwrap();
        let sent = tagged(0, 6);
        let values = sent.clone();
        // Bursts of 3 into 4 slots: the second burst wraps (slots 3, 0, 1).
        let producer = thread::spawn(move || {
            assert_eq!(produce(&mut tx, &values, 3, false, usize::MAX), 6);
        });
        let mut got = Vec::new();
        let mut buf = [u32::MAX; 4];
        while got.len() < sent.len() {
            let moved = rx.dequeue_burst(&mut buf);
            assert!(moved.n + moved.left <= 4, "{moved:?}");
            got.extend_from_slice(&buf[..moved.n]);
            if moved.n == 0 {
                thread::yield_now();
            }
        }
        producer.join().unwrap();
        assert_eq!(got, sent);
    });
}

/// Two producers (one enqueuing bulks of two, one value at a time) and the
/// main thread consuming, on a ring of 2.
fn two_producers_one_consumer<C: SyncMode>() {
    loom_model(|| {
        let (tx, mut rx) = Ring::<u32>::new::<Multi, C>(2).unwrap();
        let values = [tagged(0, 3), tagged(1, 3)];
        let producers: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(producer, v)| {
                let mut tx = tx.clone();
                let v = v.clone();
                thread::spawn(move || produce(&mut tx, &v, 2 - producer, producer == 0, 2))
            })
            .collect();
        drop(tx);
        let mut got = consume(&mut rx, 2, 2);
        let sent: Vec<Vec<u32>> = producers
            .into_iter()
            .zip(&values)
            .map(|(h, v)| v[..h.join().unwrap()].to_vec())
            .collect();
        got.extend(drain(&mut rx));
        check_arrivals(&sent, &[got]);
    });
}

/// The main thread producing (bursts of two) and two consumers (bursts of
/// two and single values), on a ring of 2.
fn one_producer_two_consumers<P: SyncMode>() {
    loom_model(|| {
        let (mut tx, mut rx) = Ring::<u32>::new::<P, Multi>(2).unwrap();
        let values = tagged(0, 4);
        let consumers: Vec<_> = (1..=2)
            .map(|batch| {
                let mut rx = rx.clone();
                thread::spawn(move || consume(&mut rx, batch, 2))
            })
            .collect();
        let n = produce(&mut tx, &values, 2, false, 2);
        let mut received: Vec<Vec<u32>> =
            consumers.into_iter().map(|h| h.join().unwrap()).collect();
        received.push(drain(&mut rx));
        check_arrivals(&[values[..n].to_vec()], &received);
    });
}

#[test]
fn loom_mpmc_two_producers_one_consumer() {
    two_producers_one_consumer::<Multi>();
}

#[test]
fn loom_mpmc_one_producer_two_consumers() {
    one_producer_two_consumers::<Multi>();
}

#[test]
fn loom_mpsc_two_producers_one_consumer() {
    two_producers_one_consumer::<Single>();
}

#[test]
fn loom_spmc_one_producer_two_consumers() {
    one_producer_two_consumers::<Single>();
}

#[test]
fn loom_shared_ring_get_put() {
    // The mempool's use: a ring of free elements that threads take from and
    // give back to through `&self`. Three threads at once: one takes one
    // element, one takes two (all or nothing), one takes up to two; each
    // gives back what it took.
    loom_model(|| {
        let ring = Arc::new(SharedRing::<u32>::new(4).unwrap());
        assert_eq!(ring.enqueue(&[0, 1, 2], true), Moved { n: 3, left: 1 });
        let get_put = |ring: &SharedRing<u32>, want: usize, bulk: bool| {
            let mut buf = [u32::MAX; 2];
            let moved = ring.dequeue(&mut buf[..want], bulk);
            assert!(moved.n + moved.left <= 4, "{moved:?}");
            let mine = &buf[..moved.n];
            assert!(mine.iter().all(|&v| v < 3), "{mine:?}");
            let back = ring.enqueue(mine, true);
            assert_eq!(back.n, mine.len(), "room for what was taken");
        };
        let threads: Vec<_> = [(1, true), (2, true)]
            .into_iter()
            .map(|(want, bulk)| {
                let ring = ring.clone();
                thread::spawn(move || get_put(&ring, want, bulk))
            })
            .collect();
        get_put(&ring, 2, false);
        for h in threads {
            h.join().unwrap();
        }
        let mut all = [u32::MAX; 5];
        assert_eq!(ring.dequeue(&mut all, false), Moved { n: 3, left: 0 });
        all[..3].sort_unstable();
        assert_eq!(all[..3], [0, 1, 2], "each element back exactly once");
    });
}

#[test]
fn loom_shared_ring_two_producers_one_consumer() {
    // Two threads enqueue (one in bulks of two, one value at a time) while
    // the main thread dequeues, all through `&self` on a ring of 2.
    loom_model(|| {
        let ring = Arc::new(SharedRing::<u32>::new(2).unwrap());
        let values = [tagged(0, 2), tagged(1, 2)];
        let producers: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(producer, v)| {
                let ring = ring.clone();
                let v = v.clone();
                thread::spawn(move || {
                    let (batch, bulk) = (2 - producer, producer == 0);
                    let (mut sent, mut attempts) = (0, 2);
                    while sent < v.len() {
                        let want = (v.len() - sent).min(batch);
                        let moved = ring.enqueue(&v[sent..sent + want], bulk);
                        assert!(moved.n + moved.left <= 2, "{moved:?}");
                        sent += moved.n;
                        if moved.n == 0 {
                            attempts -= 1;
                            if attempts == 0 {
                                break;
                            }
                            thread::yield_now();
                        }
                    }
                    sent
                })
            })
            .collect();
        let mut got = Vec::new();
        let mut buf = [u32::MAX; 2];
        let mut attempts = 2;
        while attempts > 0 {
            let moved = ring.dequeue(&mut buf, false);
            assert!(moved.n + moved.left <= 2, "{moved:?}");
            got.extend_from_slice(&buf[..moved.n]);
            if moved.n == 0 {
                attempts -= 1;
                thread::yield_now();
            }
        }
        let sent: Vec<Vec<u32>> = producers
            .into_iter()
            .zip(&values)
            .map(|(h, v)| v[..h.join().unwrap()].to_vec())
            .collect();
        let mut rest = [u32::MAX; 3];
        let moved = ring.dequeue(&mut rest, false);
        assert_eq!(moved.left, 0);
        got.extend_from_slice(&rest[..moved.n]);
        check_arrivals(&sent, &[got]);
    });
}
