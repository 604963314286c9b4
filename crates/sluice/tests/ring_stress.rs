//! Ring stress tests in the style of DPDK's `ring_stress` test.
//!
//! Threads move tagged elements through a small ring as fast as they can,
//! mixing single, bulk and burst operations of random sizes (and, on
//! single-threaded ends, zero-copy reservations and peeks). Each element
//! carries a tag (producer id and sequence number) and a stamp computed from
//! it by the thread that last wrote it; every thread that takes an element
//! checks the stamp, so a torn, stale or foreign slot is caught where it is
//! read. At the end every element must have been seen exactly once, and each
//! consumer must have seen each producer's elements in sequence order.
//!
//! The tests are bounded in element count, not time, and assert nothing about
//! speed. `SLUICE_STRESS_ELEMS` overrides the number of elements per producer.
//!
//! Not built under `--cfg loom`: loom's atomics work only inside a loom model
//! (see `src/ring/loom_tests.rs`), and the zero-copy API does not exist there.
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use sluice::ring::{Consumer, Moved, Multi, Producer, Ring, Single, SyncMode};

mod common;
use common::Rng;

/// An element: who made it, its place in that producer's sequence, and a
/// stamp written by the thread that last handed it on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
struct Elem {
    /// `producer << 40 | sequence`.
    tag: u64,
    /// The id of the thread that stamped it.
    owner: u32,
    /// `stamp(tag, owner)`, truncated.
    check: u32,
}

/// A 64-bit mix (splitmix64's finaliser): every input bit affects every
/// output bit, so a torn or mixed-up element fails the check.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Elem {
    fn new(producer: u64, seq: u64, owner: u32) -> Self {
        Self::stamped(producer << 40 | seq, owner)
    }

    fn stamped(tag: u64, owner: u32) -> Self {
        Elem {
            tag,
            owner,
            check: mix(tag ^ (u64::from(owner) << 48)) as u32,
        }
    }

    fn producer(&self) -> usize {
        (self.tag >> 40) as usize
    }

    fn seq(&self) -> u64 {
        self.tag & ((1 << 40) - 1)
    }

    /// Panics unless the stamp matches the tag and owner.
    fn verify(&self, who: &str) {
        assert_eq!(
            *self,
            Elem::stamped(self.tag, self.owner),
            "{who}: element with a bad stamp"
        );
    }
}

/// A thread's generator, seeded through [`mix`] (never 0).
fn seeded_rng(seed: u64) -> Rng {
    Rng(mix(seed) | 1)
}

/// A burst size from `rng`, in `1..=max`.
fn burst_size(rng: &mut Rng, max: usize) -> usize {
    1 + rng.below(max as u64) as usize
}

/// Elements per producer: `SLUICE_STRESS_ELEMS`, or a default that keeps a
/// debug `cargo test` to about a second per test and moves a few million
/// per test in a release build.
fn elems_per_producer() -> u64 {
    common::count_from_env("SLUICE_STRESS_ELEMS", 200_000, 1_000_000)
}

/// Set when any thread panics, so the others stop waiting for it.
#[derive(Clone, Default)]
struct Abort(Arc<AtomicBool>);

impl Abort {
    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sets the abort flag if its thread unwinds.
struct AbortOnPanic(Abort);

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Checks a `Moved` against the request.
fn check_moved(moved: Moved, want: usize, bulk: bool, cap: usize) {
    assert!(moved.n <= want, "{moved:?} for {want}");
    assert!(
        !bulk || moved.n == 0 || moved.n == want,
        "bulk moved part: {moved:?} for {want}"
    );
    assert!(moved.n + moved.left <= cap, "{moved:?} in a ring of {cap}");
}

/// Enqueue operations, with the zero-copy ones on single-threaded ends.
trait StressProducer: Send + 'static {
    /// Enqueues a prefix of `src` with an operation chosen by `rng`; returns
    /// how many.
    fn put(&mut self, src: &[Elem], rng: &mut Rng) -> usize;
}

/// Dequeue operations, with the zero-copy ones on single-threaded ends.
trait StressConsumer: Send + 'static {
    fn len(&self) -> usize;
    /// Dequeues up to `max` elements into `out` with an operation chosen by
    /// `rng`.
    fn take(&mut self, max: usize, out: &mut Vec<Elem>, rng: &mut Rng);
}

/// The operations both modes have; returns `None` for a zero-copy pick.
fn put_copy<M: SyncMode>(
    tx: &mut Producer<Elem, M>,
    src: &[Elem],
    pick: u64,
    zero_copy: bool,
) -> Option<usize> {
    let cap = tx.capacity();
    match pick % if zero_copy { 5 } else { 4 } {
        0 => Some(usize::from(tx.push(src[0]).is_ok())),
        1 | 2 => {
            let bulk = pick % 4 == 1;
            let moved = if bulk {
                tx.enqueue_bulk(src)
            } else {
                tx.enqueue_burst(src)
            };
            check_moved(moved, src.len(), bulk, cap);
            Some(moved.n)
        }
        3 => {
            // A bulk of all but the last, to vary the sizes further.
            let part = &src[..src.len().div_ceil(2)];
            let moved = tx.enqueue_bulk(part);
            check_moved(moved, part.len(), true, cap);
            Some(moved.n)
        }
        _ => None,
    }
}

fn take_copy<M: SyncMode>(
    rx: &mut Consumer<Elem, M>,
    max: usize,
    out: &mut Vec<Elem>,
    pick: u64,
    zero_copy: bool,
) -> bool {
    let cap = rx.capacity();
    match pick % if zero_copy { 5 } else { 3 } {
        0 => {
            out.extend(rx.pop());
            true
        }
        1 | 2 => {
            let bulk = pick % 3 == 1;
            let start = out.len();
            out.resize(start + max, Elem::default());
            let moved = if bulk {
                rx.dequeue_bulk(&mut out[start..])
            } else {
                rx.dequeue_burst(&mut out[start..])
            };
            check_moved(moved, max, bulk, cap);
            out.truncate(start + moved.n);
            true
        }
        _ => false,
    }
}

impl StressProducer for Producer<Elem, Multi> {
    fn put(&mut self, src: &[Elem], rng: &mut Rng) -> usize {
        put_copy(self, src, rng.next(), false).unwrap()
    }
}

impl StressProducer for Producer<Elem, Single> {
    fn put(&mut self, src: &[Elem], rng: &mut Rng) -> usize {
        let pick = rng.next();
        if let Some(n) = put_copy(self, src, pick, true) {
            return n;
        }
        // Zero-copy: reserve exactly or as many as fit, write in place.
        if pick & 8 == 0 {
            match self.reserve(src.len()) {
                Some(chunk) => chunk.copy_from_slice(src),
                None => 0,
            }
        } else {
            let chunk = self.reserve_burst(src.len());
            assert!(chunk.len() <= src.len());
            chunk.fill_from_iter(src.iter().copied())
        }
    }
}

impl StressConsumer for Consumer<Elem, Multi> {
    fn len(&self) -> usize {
        Consumer::len(self)
    }

    fn take(&mut self, max: usize, out: &mut Vec<Elem>, rng: &mut Rng) {
        assert!(take_copy(self, max, out, rng.next(), false));
    }
}

impl StressConsumer for Consumer<Elem, Single> {
    fn len(&self) -> usize {
        Consumer::len(self)
    }

    fn take(&mut self, max: usize, out: &mut Vec<Elem>, rng: &mut Rng) {
        let pick = rng.next();
        if take_copy(self, max, out, pick, true) {
            return;
        }
        // Zero-copy: peek, read in place, release all or part.
        let chunk = if pick & 8 == 0 {
            self.peek(max)
        } else {
            Some(self.peek_burst(max))
        };
        let Some(chunk) = chunk else { return };
        let n = chunk.len();
        assert!(n <= max);
        if pick & 16 == 0 {
            let (a, b) = chunk.as_slices();
            assert_eq!(a.len() + b.len(), n);
            let keep = (pick >> 8) as usize % (n + 1);
            out.extend(a.iter().chain(b).take(keep));
            chunk.commit(keep);
        } else {
            out.extend(chunk.drain().take((pick >> 8) as usize % (n + 1)));
        }
    }
}

/// What one consumer saw.
struct Seen {
    /// How many times it saw each element (`producer * per + seq`).
    counts: Vec<u8>,
    elements: u64,
}

/// Runs one thread per producer end and per consumer end over one ring;
/// each producer sends `per` elements. Checks stamps and `Moved` on the way,
/// order per consumer, and that every element arrived exactly once.
fn stress<P: StressProducer, C: StressConsumer>(txs: Vec<P>, rxs: Vec<C>, per: u64) {
    let producers = txs.len();
    let total = producers as u64 * per;
    let done = Arc::new(AtomicUsize::new(0));
    let abort = Abort::default();
    let mut producer_handles = Vec::new();
    for (p, mut tx) in txs.into_iter().enumerate() {
        let done = done.clone();
        let abort = abort.clone();
        producer_handles.push(thread::spawn(move || {
            let _guard = AbortOnPanic(abort.clone());
            let mut rng = seeded_rng(p as u64);
            let mut batch = Vec::with_capacity(32);
            let mut seq = 0;
            while seq < per {
                let k = burst_size(&mut rng, 32).min((per - seq) as usize);
                batch.clear();
                batch.extend((seq..seq + k as u64).map(|s| Elem::new(p as u64, s, p as u32)));
                let mut sent = 0;
                while sent < k {
                    let n = tx.put(&batch[sent..], &mut rng);
                    sent += n;
                    if n == 0 {
                        if abort.is_set() {
                            return;
                        }
                        thread::yield_now();
                    }
                }
                seq += k as u64;
            }
            // After the last publish: a consumer that sees every producer
            // done and the ring empty knows nothing more will come.
            done.fetch_add(1, Ordering::Release);
        }));
    }
    let mut consumer_handles = Vec::new();
    for (c, mut rx) in rxs.into_iter().enumerate() {
        let done = done.clone();
        let abort = abort.clone();
        consumer_handles.push(thread::spawn(move || {
            let _guard = AbortOnPanic(abort.clone());
            let who = format!("consumer {c}");
            let mut rng = seeded_rng(1000 + c as u64);
            let mut counts = vec![0u8; total as usize];
            let mut next_seq = vec![0u64; producers];
            let mut elements = 0;
            let mut out = Vec::with_capacity(32);
            let mut idle = 0u64;
            loop {
                out.clear();
                rx.take(burst_size(&mut rng, 32), &mut out, &mut rng);
                for e in &out {
                    e.verify(&who);
                    let (p, s) = (e.producer(), e.seq());
                    assert!(p < producers && s < per, "{who}: foreign element {e:?}");
                    assert!(
                        s >= next_seq[p],
                        "{who}: producer {p}'s element {s} came after {}",
                        next_seq[p] - 1
                    );
                    next_seq[p] = s + 1;
                    counts[p * per as usize + s as usize] += 1;
                }
                elements += out.len() as u64;
                if !out.is_empty() {
                    idle = 0;
                    continue;
                }
                if abort.is_set() {
                    break;
                }
                if done.load(Ordering::Acquire) == producers {
                    if rx.len() == 0 {
                        break;
                    }
                    // Entries left but none taken: another consumer is in
                    // the middle of taking them. If that never ends,
                    // something is lost; fail rather than hang.
                    idle += 1;
                    assert!(
                        idle < 10_000_000,
                        "{who}: the ring reports {} entries but none can be taken",
                        rx.len()
                    );
                }
                thread::yield_now();
            }
            Seen { counts, elements }
        }));
    }
    let mut panicked = None;
    for h in producer_handles {
        if let Err(e) = h.join() {
            panicked = Some(e);
        }
    }
    let mut seen = Vec::new();
    for h in consumer_handles {
        match h.join() {
            Ok(s) => seen.push(s),
            Err(e) => panicked = Some(e),
        }
    }
    if let Some(e) = panicked {
        std::panic::resume_unwind(e);
    }
    let received: u64 = seen.iter().map(|s| s.elements).sum();
    assert_eq!(received, total, "elements received");
    for i in 0..total as usize {
        let n: u32 = seen.iter().map(|s| u32::from(s.counts[i])).sum();
        assert_eq!(
            n,
            1,
            "producer {}'s element {} seen {n} times",
            i / per as usize,
            i % per as usize
        );
    }
}

/// Small, so that the ring is often full or empty and the indices wrap every
/// few batches.
const RING: usize = 64;

fn multi<T: Clone>(end: T, n: usize) -> Vec<T> {
    vec![end; n]
}

#[test]
fn stress_mpmc_two_producers_two_consumers() {
    let (tx, rx) = Ring::<Elem>::mpmc(RING).unwrap();
    stress(multi(tx, 2), multi(rx, 2), elems_per_producer());
}

#[test]
fn stress_spsc_one_producer_one_consumer() {
    let (tx, rx) = Ring::<Elem>::spsc(RING).unwrap();
    stress(vec![tx], vec![rx], 2 * elems_per_producer());
}

#[test]
fn stress_mpsc_two_producers_one_consumer() {
    let (tx, rx) = Ring::<Elem>::mpsc(RING).unwrap();
    stress(multi(tx, 2), vec![rx], elems_per_producer());
}

#[test]
fn stress_spmc_one_producer_two_consumers() {
    let (tx, rx) = Ring::<Elem>::spmc(RING).unwrap();
    stress(vec![tx], multi(rx, 2), 2 * elems_per_producer());
}

/// DPDK's own pattern: a ring holding most of its capacity in elements, and
/// worker threads that each take a batch (bulk or burst), check every
/// element's stamp against the thread that last put it in, stamp it as their
/// own and put it back, until each has handled a fixed number of elements.
/// At the end the ring holds every element exactly once.
#[test]
fn stress_mpmc_circulation_four_workers() {
    const ELEMS: usize = 3 * RING / 4;
    const WORKERS: u32 = 4;
    let per_worker: u64 = elems_per_producer();
    let (mut tx, mut rx) = Ring::<Elem>::mpmc(RING).unwrap();
    let all: Vec<Elem> = (0..ELEMS as u64)
        .map(|i| Elem::new(0, i, WORKERS))
        .collect();
    assert_eq!(tx.enqueue_bulk(&all).n, ELEMS);
    let abort = Abort::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (mut tx, mut rx) = (tx.clone(), rx.clone());
            let abort = abort.clone();
            thread::spawn(move || {
                let _guard = AbortOnPanic(abort.clone());
                let who = format!("worker {w}");
                let mut rng = seeded_rng(2000 + u64::from(w));
                let mut buf = [Elem::default(); 32];
                let mut handled = 0u64;
                while handled < per_worker {
                    let want = burst_size(&mut rng, 32);
                    let bulk = rng.next() & 1 == 0;
                    let moved = if bulk {
                        rx.dequeue_bulk(&mut buf[..want])
                    } else {
                        rx.dequeue_burst(&mut buf[..want])
                    };
                    check_moved(moved, want, bulk, RING);
                    for e in &mut buf[..moved.n] {
                        e.verify(&who);
                        assert!(e.seq() < ELEMS as u64, "{who}: foreign element {e:?}");
                        *e = Elem::stamped(e.tag, w);
                    }
                    handled += moved.n as u64;
                    if moved.n == 0 {
                        thread::yield_now();
                    }
                    // Put them back: the ring has room for everything, but a
                    // slot is free only once the consumer that took its value
                    // has published, so retry.
                    let mut rest = &buf[..moved.n];
                    while !rest.is_empty() {
                        let moved = if rest.len() % 2 == 0 {
                            tx.enqueue_bulk(rest)
                        } else {
                            tx.enqueue_burst(rest)
                        };
                        check_moved(moved, rest.len(), rest.len() % 2 == 0, RING);
                        rest = &rest[moved.n..];
                        if moved.n == 0 {
                            assert!(!abort.is_set(), "{who}: another worker failed");
                            thread::yield_now();
                        }
                    }
                }
                handled
            })
        })
        .collect();
    for h in workers {
        assert!(h.join().unwrap() >= per_worker);
    }
    let mut out = vec![Elem::default(); RING + 1];
    let moved = rx.dequeue_burst(&mut out);
    assert_eq!(
        moved,
        Moved { n: ELEMS, left: 0 },
        "every element back in the ring"
    );
    let mut seen = [false; ELEMS];
    for e in &out[..ELEMS] {
        e.verify("final check");
        assert!(
            !std::mem::replace(&mut seen[e.seq() as usize], true),
            "{e:?} twice"
        );
    }
}
