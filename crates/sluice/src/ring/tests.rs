//! Unit tests of every mode and of the wrap.

use super::*;

fn roundtrip<P: SyncMode, C: SyncMode>() {
    let (mut producer, mut consumer) = Ring::<u32>::new::<P, C>(8).unwrap();
    // Walk the indices around the ring several times with odd-sized batches
    // so every batch position straddles the wrap at some point.
    let mut next_in = 0u32;
    let mut next_out = 0u32;
    for round in 0..50 {
        let k = (round % 7) + 1;
        let src: Vec<u32> = (next_in..next_in + k).collect();
        let moved = producer.enqueue_bulk(&src);
        assert_eq!(moved.n, k as usize);
        next_in += k;
        let mut dst = vec![0u32; k as usize];
        let moved = consumer.dequeue_bulk(&mut dst);
        assert_eq!(moved.n, k as usize);
        assert_eq!(moved.left, 0);
        for v in dst {
            assert_eq!(v, next_out);
            next_out += 1;
        }
    }
    assert!(consumer.is_empty());
}

#[test]
fn every_mode_round_trips_across_the_wrap() {
    roundtrip::<Single, Single>();
    roundtrip::<Single, Multi>();
    roundtrip::<Multi, Single>();
    roundtrip::<Multi, Multi>();
}

fn bulk_is_all_or_nothing<P: SyncMode, C: SyncMode>() {
    let (mut producer, mut consumer) = Ring::<u8>::new::<P, C>(4).unwrap();
    assert_eq!(producer.enqueue_bulk(&[1, 2, 3]), Moved { n: 3, left: 1 });
    assert_eq!(producer.enqueue_bulk(&[4, 5]).n, 0);
    assert_eq!(producer.enqueue_burst(&[4, 5]), Moved { n: 1, left: 0 });
    assert_eq!(producer.push(9), Err(9));
    let mut dst = [0u8; 5];
    assert_eq!(
        consumer.dequeue_bulk(&mut dst).n,
        0,
        "bulk must not take 4 of 5"
    );
    assert_eq!(consumer.dequeue_burst(&mut dst), Moved { n: 4, left: 0 });
    assert_eq!(&dst[..4], &[1, 2, 3, 4]);
    assert_eq!(consumer.pop(), None);
}

#[test]
fn bulk_all_or_nothing_and_burst_as_many_as_fit() {
    bulk_is_all_or_nothing::<Single, Single>();
    bulk_is_all_or_nothing::<Single, Multi>();
    bulk_is_all_or_nothing::<Multi, Single>();
    bulk_is_all_or_nothing::<Multi, Multi>();
}

#[test]
fn bad_capacities_are_errors_naming_the_value() {
    assert_eq!(Ring::<u8>::spsc(0).unwrap_err(), RingError::ZeroCapacity);
    let err = Ring::<u8>::mpmc(12).unwrap_err();
    assert_eq!(err, RingError::NotPowerOfTwo(12));
    assert!(err.to_string().contains("12"));
    assert!(matches!(
        Ring::<u8>::spsc(MAX_CAPACITY * 2),
        Err(RingError::TooLarge(_))
    ));
    assert!(Ring::<u8>::spsc(1).is_ok());
}

#[test]
fn capacity_one_works() {
    let (mut producer, mut consumer) = Ring::<u8>::mpmc(1).unwrap();
    for i in 0..10 {
        assert!(producer.push(i).is_ok());
        assert_eq!(producer.push(i), Err(i));
        assert_eq!(consumer.pop(), Some(i));
    }
}

#[test]
fn non_copy_values_are_moved_and_dropped_exactly_once() {
    let token = std::sync::Arc::new(());
    {
        let (mut producer, mut consumer) = Ring::<std::sync::Arc<()>>::spsc(4).unwrap();
        for _ in 0..4 {
            producer.push(token.clone()).unwrap();
        }
        assert_eq!(std::sync::Arc::strong_count(&token), 5);
        drop(consumer.pop());
        assert_eq!(std::sync::Arc::strong_count(&token), 4);
        // Three left in the ring: dropping both ends drops them.
    }
    assert_eq!(std::sync::Arc::strong_count(&token), 1);
}

#[test]
fn zero_copy_chunks_split_at_the_wrap() {
    let (mut producer, mut consumer) = Ring::<u32>::spsc(8).unwrap();
    // Move the indices to 6 so a 5-slot reservation wraps: 2 + 3.
    assert_eq!(producer.enqueue_bulk(&[0; 6]).n, 6);
    assert_eq!(consumer.dequeue_bulk(&mut [0; 6]).n, 6);
    let mut chunk = producer.reserve(5).unwrap();
    let (a, b) = chunk.as_mut_slices();
    assert_eq!((a.len(), b.len()), (2, 3));
    assert_eq!(chunk.fill_from_iter(100..), 5);
    assert!(producer.reserve(4).is_none(), "only 3 free");
    let chunk = consumer.peek(5).unwrap();
    let (a, b) = chunk.as_slices();
    assert_eq!(a, &[100, 101]);
    assert_eq!(b, &[102, 103, 104]);
    chunk.commit(2);
    assert_eq!(consumer.len(), 3);
    let got: Vec<u32> = consumer.peek_burst(10).drain().collect();
    assert_eq!(got, vec![102, 103, 104]);
    assert!(consumer.is_empty());
}

#[test]
fn zero_copy_partial_commit_and_drop_commit_nothing() {
    let (mut producer, mut consumer) = Ring::<u32>::spsc(4).unwrap();
    {
        let chunk = producer.reserve_burst(10);
        assert_eq!(chunk.len(), 4);
        // Dropped without commit: nothing published.
    }
    assert!(consumer.is_empty());
    let chunk = producer.reserve(4).unwrap();
    assert_eq!(chunk.copy_from_slice(&[7, 8]), 2);
    assert_eq!(consumer.len(), 2);
    let mut d = consumer.peek_burst(4).drain();
    assert_eq!(d.next(), Some(7));
    drop(d); // only 7 consumed
    assert_eq!(consumer.pop(), Some(8));
}
#[test]
#[should_panic(expected = "commit of 3 slots, 2 reserved")]
fn write_commit_beyond_the_reservation_panics() {
    let (mut producer, _consumer) = Ring::<u32>::spsc(2).unwrap();
    let mut chunk = producer.reserve(2).unwrap();
    let (a, b) = chunk.as_mut_slices();
    for slot in a.iter_mut().chain(b.iter_mut()) {
        slot.write(1);
    }
    // SAFETY: both reserved slots are initialised; the third is refused by
    // the assertion before anything is published.
    unsafe { chunk.commit(3) };
}

#[test]
fn read_commit_beyond_the_borrow_releases_only_what_was_borrowed() {
    let (mut producer, mut consumer) = Ring::<u32>::spsc(4).unwrap();
    assert_eq!(producer.enqueue_bulk(&[1, 2, 3]).n, 3);
    consumer.peek(2).unwrap().commit(10);
    assert_eq!(consumer.len(), 1);
    assert_eq!(consumer.pop(), Some(3));
}

#[test]
fn read_chunks_are_send_and_sync_exactly_when_their_values_allow() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<ReadChunk<'static, u32>>();
    sync::<ReadChunk<'static, u32>>();
    send::<Drain<'static, u32>>();
    sync::<Drain<'static, u32>>();
    // `Cell` is `Send` but not `Sync`: its chunks may move between threads but
    // not be shared (the `compile_fail` example on `ReadChunk` checks the
    // second half).
    send::<ReadChunk<'static, std::cell::Cell<u32>>>();
    send::<WriteChunk<'static, std::cell::Cell<u32>>>();
}

/// Counts drops per value, and panics in the drop of one chosen value.
struct CountedDrop {
    id: usize,
    drops: std::sync::Arc<Vec<std::sync::atomic::AtomicUsize>>,
    explode: bool,
}

impl Drop for CountedDrop {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.explode {
            panic!("drop of value {} panics", self.id);
        }
    }
}

/// Pushes values 0..4 (value 1 panics when dropped), runs `consume` on the
/// consumer (expected to panic), then drops the ring: every value must have
/// been dropped exactly once.
fn check_panicking_drop(consume: impl FnOnce(&mut Consumer<CountedDrop, Single>)) {
    let drops = std::sync::Arc::new((0..4).map(|_| Default::default()).collect::<Vec<_>>());
    let (mut producer, mut consumer) = Ring::<CountedDrop>::spsc(4).unwrap();
    for id in 0..4 {
        let value = CountedDrop {
            id,
            drops: drops.clone(),
            explode: id == 1,
        };
        assert!(producer.push(value).is_ok());
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| consume(&mut consumer)));
    assert!(result.is_err(), "the drop of value 1 panics");
    // Values 0 and 1 were released (1's drop ran, then panicked); 2 and 3
    // are still in the ring.
    assert_eq!(
        consumer.len(),
        2,
        "what was dropped is no longer in the ring"
    );
    drop((producer, consumer));
    let counts: Vec<usize> = drops
        .iter()
        .map(|d| d.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    assert_eq!(counts, [1, 1, 1, 1], "drops per value");
}

#[test]
fn read_commit_is_panic_safe() {
    check_panicking_drop(|consumer| consumer.peek(3).unwrap().commit(3));
}

#[test]
fn drain_is_panic_safe() {
    check_panicking_drop(|consumer| consumer.peek(3).unwrap().drain().take(3).for_each(drop));
}

// ---------------------------------------------------------------------------
// Property tests: random operation sequences against a `VecDeque` model.
//
// # What `Moved::left` promises with one thread
//
// A multi-threaded end reads the other side's tail afresh on every claim, so
// when only one thread uses the ring its `left` is exact: the free slots
// (enqueue) or waiting entries (dequeue) after the move.
//
// A single-threaded end is exact only when it had to reread the other side's
// tail. It keeps a cached copy of that tail (`cached_cons_tail` in a
// `Producer<_, Single>`, `cached_prod_tail` in a `Consumer<_, Single>`) and
// computes the room from the copy; it rereads the shared tail only when the
// copy says there is not enough room for the request. When the copy suffices,
// `left` is counted from the old tail and misses whatever the other side moved
// since, even on the same thread. Example, capacity 8: enqueue 4 (`left` 4,
// the copy of `cons.tail` is 0), dequeue 4, enqueue 1: the copy still says 4
// are free, so `left` is 3 while 7 slots are free. So for a single-threaded end
// `left` is a lower bound, exact whenever the request did not fit in the
// cached view (including every failed bulk operation). The model below tracks
// the cached copies and checks the exact value each end must report, and that
// it never exceeds the true value.

use std::collections::VecDeque;

use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum WriteHow {
    /// Drop the chunk: nothing is published.
    Drop,
    /// Write the first `k` slots through `as_mut_slices`, then `commit(k)`.
    Commit,
    /// `fill_from_iter` with `k` values (possibly more than reserved).
    FillFromIter,
    /// `copy_from_slice` with `k` values (possibly more than reserved).
    CopyFromSlice,
}

#[derive(Debug, Clone, Copy)]
enum ReadHow {
    /// Drop the chunk: nothing is released.
    Drop,
    /// `commit(k)`, `k` possibly more than borrowed.
    Commit,
    /// `commit_all`.
    CommitAll,
    /// `drain`, take `k`, drop the iterator.
    Drain,
    /// `drain`, take `k`, forget the iterator.
    DrainForget,
}

#[derive(Debug, Clone)]
enum Op {
    Push,
    Pop,
    Enqueue {
        n: usize,
        bulk: bool,
    },
    Dequeue {
        n: usize,
        bulk: bool,
    },
    Reserve {
        n: usize,
        burst: bool,
        k: usize,
        how: WriteHow,
    },
    Peek {
        n: usize,
        burst: bool,
        k: usize,
        how: ReadHow,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let write_how = prop_oneof![
        Just(WriteHow::Drop),
        Just(WriteHow::Commit),
        Just(WriteHow::FillFromIter),
        Just(WriteHow::CopyFromSlice),
    ];
    let read_how = prop_oneof![
        Just(ReadHow::Drop),
        Just(ReadHow::Commit),
        Just(ReadHow::CommitAll),
        Just(ReadHow::Drain),
        Just(ReadHow::DrainForget),
    ];
    prop_oneof![
        2 => Just(Op::Push),
        2 => Just(Op::Pop),
        3 => (0..=40usize, any::<bool>()).prop_map(|(n, bulk)| Op::Enqueue { n, bulk }),
        3 => (0..=40usize, any::<bool>()).prop_map(|(n, bulk)| Op::Dequeue { n, bulk }),
        2 => (0..=40usize, any::<bool>(), 0..64usize, write_how)
            .prop_map(|(n, burst, k, how)| Op::Reserve { n, burst, k, how }),
        2 => (0..=40usize, any::<bool>(), 0..64usize, read_how)
            .prop_map(|(n, burst, k, how)| Op::Peek { n, burst, k, how }),
    ]
}

fn capacity_strategy() -> impl Strategy<Value = usize> {
    prop::sample::select(vec![1usize, 2, 8, 64])
}

/// Where the free-running indices start: 0, just before the `u32` wrap
/// (so the indices wrap within the first few batches), or anywhere.
fn start_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), Just(u32::MAX - 39), any::<u32>()]
}

/// A capacity, a start index and up to `max_ops` operations: one case of a
/// check against the model.
fn model_case(max_ops: usize) -> impl Strategy<Value = (usize, u32, Vec<Op>)> {
    (
        capacity_strategy(),
        start_strategy(),
        prop::collection::vec(op_strategy(), 0..max_ops),
    )
}

/// Moves the indices of a fresh, empty ring to `idx`, as if `idx` elements
/// had already passed through it.
fn start_at<T, P: SyncMode, C: SyncMode>(
    producer: &mut Producer<T, P>,
    consumer: &mut Consumer<T, C>,
    idx: u32,
) {
    let ring = producer.ring.clone();
    for side in [ring.prod(), ring.cons()] {
        side.head.store(idx, crate::sync::Ordering::Relaxed);
        side.tail.store(idx, crate::sync::Ordering::Relaxed);
    }
    producer.head = idx;
    producer.cached_cons_tail = idx;
    consumer.head = idx;
    consumer.cached_prod_tail = idx;
}

/// The reference: a `VecDeque`, plus the cached tails of single-threaded ends.
struct Model {
    cap: usize,
    q: VecDeque<u32>,
    /// Next value to enqueue (values are distinct and increasing).
    next: u32,
    /// Elements published and consumed since the start.
    pushed: usize,
    popped: usize,
    /// `popped` when a single-threaded producer last read `cons.tail`.
    cached_cons: usize,
    /// `pushed` when a single-threaded consumer last read `prod.tail`.
    cached_prod: usize,
    /// Values a forgotten drain took that the consumer has not published
    /// yet: out of `q`, but still occupying their slots for the producer.
    unpublished: usize,
    p_multi: bool,
    c_multi: bool,
}

impl Model {
    fn new(cap: usize, p_multi: bool, c_multi: bool) -> Self {
        Model {
            cap,
            q: VecDeque::new(),
            next: 0,
            pushed: 0,
            popped: 0,
            cached_cons: 0,
            cached_prod: 0,
            unpublished: 0,
            p_multi,
            c_multi,
        }
    }

    fn free(&self) -> usize {
        self.cap - self.q.len() - self.unpublished
    }

    /// The consumer published its tail (any consumer operation that moved
    /// at least one value): what forgotten drains took is free now.
    fn cons_published(&mut self, moved: usize) {
        if moved != 0 {
            self.unpublished = 0;
        }
    }

    /// A producer claim of `n`: `(taken, left)` as the end must report them.
    /// Nothing is enqueued yet.
    fn prod_claim(&mut self, n: usize, bulk: bool) -> (usize, usize) {
        let free = if self.p_multi {
            self.free()
        } else {
            let mut view = self.cap - (self.pushed - self.cached_cons);
            if view < n {
                self.cached_cons = self.popped - self.unpublished;
                view = self.free();
            }
            view
        };
        assert!(free <= self.free(), "model: the view is a lower bound");
        let take = if n <= free {
            n
        } else if bulk {
            0
        } else {
            free
        };
        (take, free - take)
    }

    /// A consumer claim of `n`: `(taken, left)`. Nothing is dequeued yet.
    fn cons_claim(&mut self, n: usize, bulk: bool) -> (usize, usize) {
        let avail = if self.c_multi {
            self.q.len()
        } else {
            let mut view = self.cached_prod - self.popped;
            if view < n {
                self.cached_prod = self.pushed;
                view = self.q.len();
            }
            view
        };
        assert!(avail <= self.q.len(), "model: the view is a lower bound");
        let take = if n <= avail {
            n
        } else if bulk {
            0
        } else {
            avail
        };
        (take, avail - take)
    }

    fn values(&self, k: usize) -> Vec<u32> {
        (0..k as u32).map(|i| self.next.wrapping_add(i)).collect()
    }

    fn enqueue(&mut self, k: usize) {
        for v in self.values(k) {
            self.q.push_back(v);
        }
        self.next = self.next.wrapping_add(k as u32);
        self.pushed += k;
        assert!(self.q.len() <= self.cap);
    }

    fn dequeue(&mut self, k: usize) -> Vec<u32> {
        self.popped += k;
        self.q.drain(..k).collect()
    }
}

/// What a zero-copy reservation saw and did.
struct Reserved {
    /// Slots reserved, and the lengths of the two slices.
    len: usize,
    first: usize,
    second: usize,
    /// Slots published.
    committed: usize,
}

/// What a zero-copy peek saw and did.
struct Peeked {
    /// The borrowed entries, first slice then second, and the first's length.
    seen: Vec<u32>,
    first: usize,
    /// Entries moved out by `drain`, and entries released.
    drained: Vec<u32>,
    released: usize,
}

/// The zero-copy producer operations, which only a single-threaded end has.
trait ZeroCopyProducer {
    /// `None` when the end has no zero-copy API; `Some(None)` when an exact
    /// reservation found too few slots.
    fn reserve_op(
        &mut self,
        n: usize,
        burst: bool,
        k: usize,
        how: WriteHow,
        first_value: u32,
    ) -> Option<Option<Reserved>>;
}

/// The zero-copy consumer operations, which only a single-threaded end has.
trait ZeroCopyConsumer {
    fn peek_op(&mut self, n: usize, burst: bool, k: usize, how: ReadHow) -> Option<Option<Peeked>>;
}

impl ZeroCopyProducer for Producer<u32, Multi> {
    fn reserve_op(
        &mut self,
        _: usize,
        _: bool,
        _: usize,
        _: WriteHow,
        _: u32,
    ) -> Option<Option<Reserved>> {
        None
    }
}

impl ZeroCopyConsumer for Consumer<u32, Multi> {
    fn peek_op(&mut self, _: usize, _: bool, _: usize, _: ReadHow) -> Option<Option<Peeked>> {
        None
    }
}

impl ZeroCopyProducer for Producer<u32, Single> {
    fn reserve_op(
        &mut self,
        n: usize,
        burst: bool,
        k: usize,
        how: WriteHow,
        first_value: u32,
    ) -> Option<Option<Reserved>> {
        let chunk = if burst {
            Some(self.reserve_burst(n))
        } else {
            self.reserve(n)
        };
        let Some(mut chunk) = chunk else {
            return Some(None);
        };
        let len = chunk.len();
        assert_eq!(chunk.is_empty(), len == 0);
        let (a, b) = chunk.as_mut_slices();
        let (first, second) = (a.len(), b.len());
        let values =
            |k: usize| -> Vec<u32> { (0..k as u32).map(|i| first_value.wrapping_add(i)).collect() };
        let committed = match how {
            // The chunk goes out of scope uncommitted.
            WriteHow::Drop => 0,
            WriteHow::Commit => {
                let k = k % (len + 1);
                let (a, b) = chunk.as_mut_slices();
                for (slot, v) in a.iter_mut().chain(b.iter_mut()).zip(values(k)) {
                    slot.write(v);
                }
                // SAFETY: the first `k` slots, in slice order, were written.
                unsafe { chunk.commit(k) };
                k
            }
            WriteHow::FillFromIter => {
                let k = k % (len + 4);
                let done = chunk.fill_from_iter(values(k));
                assert_eq!(done, k.min(len));
                done
            }
            WriteHow::CopyFromSlice => {
                let k = k % (len + 4);
                let done = chunk.copy_from_slice(&values(k));
                assert_eq!(done, k.min(len));
                done
            }
        };
        Some(Some(Reserved {
            len,
            first,
            second,
            committed,
        }))
    }
}

impl ZeroCopyConsumer for Consumer<u32, Single> {
    fn peek_op(&mut self, n: usize, burst: bool, k: usize, how: ReadHow) -> Option<Option<Peeked>> {
        let chunk = if burst {
            Some(self.peek_burst(n))
        } else {
            self.peek(n)
        };
        let Some(chunk) = chunk else {
            return Some(None);
        };
        let len = chunk.len();
        assert_eq!(chunk.is_empty(), len == 0);
        let (a, b) = chunk.as_slices();
        let first = a.len();
        let seen = [a, b].concat();
        let mut drained = Vec::new();
        let released = match how {
            // The chunk goes out of scope uncommitted.
            ReadHow::Drop => 0,
            ReadHow::Commit => {
                let k = k % (len + 4);
                chunk.commit(k);
                k.min(len)
            }
            ReadHow::CommitAll => {
                chunk.commit_all();
                len
            }
            ReadHow::Drain | ReadHow::DrainForget => {
                let k = k % (len + 1);
                let mut it = chunk.drain();
                assert_eq!(it.len(), len);
                drained.extend(it.by_ref().take(k));
                assert_eq!(it.len(), len - k);
                if matches!(how, ReadHow::DrainForget) {
                    std::mem::forget(it);
                }
                k
            }
        };
        Some(Some(Peeked {
            seen,
            first,
            drained,
            released,
        }))
    }
}

/// Runs `ops` on a ring of the given modes and on the model, checking every
/// result, then empties the ring.
fn check_against_model<P: SyncMode, C: SyncMode>(
    cap: usize,
    start: u32,
    ops: &[Op],
) -> Result<(), TestCaseError>
where
    Producer<u32, P>: ZeroCopyProducer,
    Consumer<u32, C>: ZeroCopyConsumer,
{
    let (mut producer, mut consumer) = Ring::<u32>::new::<P, C>(cap).unwrap();
    start_at(&mut producer, &mut consumer, start);
    let mut model = Model::new(cap, P::MULTI, C::MULTI);
    // Slot position of the next index to produce / consume.
    let pos = |done: usize| (start as usize).wrapping_add(done) & (cap - 1);
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Push => {
                let v = model.next;
                let (take, _) = model.prod_claim(1, true);
                let got = producer.push(v);
                if take == 1 {
                    prop_assert_eq!(got, Ok(()), "op {}: push into a ring with room", i);
                    model.enqueue(1);
                } else {
                    prop_assert_eq!(got, Err(v), "op {}: push into a full ring", i);
                }
            }
            Op::Pop => {
                let (take, _) = model.cons_claim(1, true);
                let want = model.dequeue(take).pop();
                model.cons_published(take);
                prop_assert_eq!(consumer.pop(), want, "op {}: pop", i);
            }
            Op::Enqueue { n, bulk } => {
                let src = model.values(n);
                let (take, left) = model.prod_claim(n, bulk);
                let free_before = model.free();
                let moved = if bulk {
                    producer.enqueue_bulk(&src)
                } else {
                    producer.enqueue_burst(&src)
                };
                prop_assert_eq!(moved, Moved { n: take, left }, "op {}: {:?}", i, op);
                model.enqueue(take);
                prop_assert!(moved.left <= free_before - take, "left is a lower bound");
                if P::MULTI {
                    prop_assert_eq!(moved.left, model.free(), "multi-producer left is exact");
                }
            }
            Op::Dequeue { n, bulk } => {
                let (take, left) = model.cons_claim(n, bulk);
                // Poison the buffer so stale contents cannot pass for values.
                let mut dst = vec![u32::MAX; n];
                let moved = if bulk {
                    consumer.dequeue_bulk(&mut dst)
                } else {
                    consumer.dequeue_burst(&mut dst)
                };
                prop_assert_eq!(moved, Moved { n: take, left }, "op {}: {:?}", i, op);
                let want = model.dequeue(take);
                model.cons_published(take);
                prop_assert_eq!(&dst[..take], &want[..], "op {}: values", i);
                prop_assert!(dst[take..].iter().all(|&v| v == u32::MAX), "wrote past n");
                prop_assert!(moved.left <= model.q.len(), "left is a lower bound");
                if C::MULTI {
                    prop_assert_eq!(moved.left, model.q.len(), "multi-consumer left is exact");
                }
            }
            Op::Reserve { n, burst, k, how } => {
                let at = pos(model.pushed);
                let first_value = model.next;
                let Some(res) = producer.reserve_op(n, burst, k, how, first_value) else {
                    continue;
                };
                let (take, _) = model.prod_claim(n, !burst);
                match res {
                    None => prop_assert!(!burst && take == 0, "op {}: reserve({}) refused", i, n),
                    Some(r) => {
                        prop_assert_eq!(r.len, take, "op {}: reserved", i);
                        prop_assert_eq!(r.first, take.min(cap - at), "op {}: wrap split", i);
                        prop_assert_eq!(r.first + r.second, take);
                        model.enqueue(r.committed);
                    }
                }
            }
            Op::Peek { n, burst, k, how } => {
                let at = pos(model.popped);
                let Some(res) = consumer.peek_op(n, burst, k, how) else {
                    continue;
                };
                let (take, _) = model.cons_claim(n, !burst);
                match res {
                    None => prop_assert!(!burst && take == 0, "op {}: peek({}) refused", i, n),
                    Some(r) => {
                        let want: Vec<u32> = model.q.iter().take(take).copied().collect();
                        prop_assert_eq!(&r.seen, &want, "op {}: peeked values", i);
                        prop_assert_eq!(r.first, take.min(cap - at), "op {}: wrap split", i);
                        let released = model.dequeue(r.released);
                        if matches!(how, ReadHow::DrainForget) {
                            model.unpublished += r.released;
                        } else {
                            model.cons_published(r.released);
                        }
                        if matches!(how, ReadHow::Drain | ReadHow::DrainForget) {
                            prop_assert_eq!(&r.drained, &released, "op {}: drained", i);
                        }
                    }
                }
            }
        }
        prop_assert_eq!(
            producer.ring().len(),
            model.q.len() + model.unpublished,
            "op {}: len after {:?}",
            i,
            op
        );
        prop_assert_eq!(consumer.len(), model.q.len());
        prop_assert_eq!(consumer.is_empty(), model.q.is_empty());
        prop_assert_eq!(producer.free(), model.free());
        prop_assert_eq!(producer.capacity(), cap);
    }
    // Whatever is left comes out in order.
    let mut rest = vec![0u32; cap + 1];
    let moved = consumer.dequeue_burst(&mut rest);
    prop_assert_eq!(
        moved,
        Moved {
            n: model.q.len(),
            left: 0
        }
    );
    let want: Vec<u32> = model.q.iter().copied().collect();
    prop_assert_eq!(&rest[..moved.n], &want[..]);
    prop_assert!(consumer.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn prop_spsc_matches_model((cap, start, ops) in model_case(200)) {
        check_against_model::<Single, Single>(cap, start, &ops)?;
    }

    #[test]
    fn prop_spmc_matches_model((cap, start, ops) in model_case(200)) {
        check_against_model::<Single, Multi>(cap, start, &ops)?;
    }

    #[test]
    fn prop_mpsc_matches_model((cap, start, ops) in model_case(200)) {
        check_against_model::<Multi, Single>(cap, start, &ops)?;
    }

    #[test]
    fn prop_mpmc_matches_model((cap, start, ops) in model_case(200)) {
        check_against_model::<Multi, Multi>(cap, start, &ops)?;
    }
}

/// Runs enqueue/dequeue sequences on a [`SharedRing`] (used through `&self`,
/// multi-producer and multi-consumer): with one thread `left` is exact.
fn check_shared_ring(
    cap: usize,
    start: u32,
    ops: &[(bool, usize, bool)],
) -> Result<(), TestCaseError> {
    let shared = SharedRing::<u32>::new(cap).unwrap();
    for side in [shared.ring().prod(), shared.ring().cons()] {
        side.head.store(start, crate::sync::Ordering::Relaxed);
        side.tail.store(start, crate::sync::Ordering::Relaxed);
    }
    let mut model = Model::new(cap, true, true);
    for (i, &(enqueue, n, bulk)) in ops.iter().enumerate() {
        if enqueue {
            let src = model.values(n);
            let (take, left) = model.prod_claim(n, bulk);
            let moved = shared.enqueue(&src, bulk);
            prop_assert_eq!(
                moved,
                Moved { n: take, left },
                "op {}: enqueue {} bulk {}",
                i,
                n,
                bulk
            );
            model.enqueue(take);
            prop_assert_eq!(moved.left, model.free());
        } else {
            let (take, left) = model.cons_claim(n, bulk);
            let mut dst = vec![u32::MAX; n];
            let moved = shared.dequeue(&mut dst, bulk);
            prop_assert_eq!(
                moved,
                Moved { n: take, left },
                "op {}: dequeue {} bulk {}",
                i,
                n,
                bulk
            );
            let want = model.dequeue(take);
            prop_assert_eq!(&dst[..take], &want[..], "op {}: values", i);
            prop_assert!(dst[take..].iter().all(|&v| v == u32::MAX), "wrote past n");
            prop_assert_eq!(moved.left, model.q.len());
        }
        prop_assert_eq!(shared.ring().len(), model.q.len(), "op {}: len", i);
        prop_assert_eq!(shared.ring().free(), model.free());
        prop_assert_eq!(shared.ring().capacity(), cap);
    }
    Ok(())
}

/// A value that counts how many of its kind are alive.
#[derive(Debug)]
struct Tracked {
    v: u32,
    live: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Tracked {
    fn new(v: u32, live: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Self {
        live.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Tracked {
            v,
            live: live.clone(),
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.live.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Non-`Copy` values through an SP/SC ring: `push`, `pop`, reservations
/// filled from an iterator, and peeks that commit (dropping in place), drain or
/// release nothing. Every value is dropped exactly once: the live count always
/// equals the model's length, and is 0 once both ends are gone.
fn check_drops(cap: usize, start: u32, ops: &[Op]) -> Result<(), TestCaseError> {
    let live = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = || live.load(std::sync::atomic::Ordering::Relaxed);
    let (mut producer, mut consumer) = Ring::<Tracked>::spsc(cap).unwrap();
    start_at(&mut producer, &mut consumer, start);
    let mut model = Model::new(cap, false, false);
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Push | Op::Enqueue { .. } => {
                let n = if let Op::Enqueue { n, .. } = *op {
                    n
                } else {
                    1
                };
                for _ in 0..n {
                    let (take, _) = model.prod_claim(1, true);
                    let got = producer.push(Tracked::new(model.next, &live));
                    prop_assert_eq!(got.is_ok(), take == 1, "op {}: push", i);
                    model.enqueue(take);
                    // A refused value comes back and is dropped here.
                }
            }
            Op::Pop | Op::Dequeue { .. } => {
                let n = if let Op::Dequeue { n, .. } = *op {
                    n
                } else {
                    1
                };
                for _ in 0..n {
                    let (take, _) = model.cons_claim(1, true);
                    let want = model.dequeue(take).pop();
                    model.cons_published(take);
                    prop_assert_eq!(consumer.pop().map(|t| t.v), want, "op {}: pop", i);
                }
            }
            Op::Reserve { n, burst, k, .. } => {
                let (take, _) = model.prod_claim(n, !burst);
                let chunk = if burst {
                    Some(producer.reserve_burst(n))
                } else {
                    producer.reserve(n)
                };
                prop_assert_eq!(chunk.is_some(), burst || take == n);
                if let Some(chunk) = chunk {
                    prop_assert_eq!(chunk.len(), take);
                    let k = k % (take + 4);
                    let values: Vec<Tracked> = (0..k as u32)
                        .map(|j| Tracked::new(model.next.wrapping_add(j), &live))
                        .collect();
                    // Values the chunk had no room for are dropped by the iterator.
                    let done = chunk.fill_from_iter(values);
                    prop_assert_eq!(done, k.min(take));
                    model.enqueue(done);
                }
            }
            Op::Peek { n, burst, k, how } => {
                let (take, _) = model.cons_claim(n, !burst);
                let chunk = if burst {
                    Some(consumer.peek_burst(n))
                } else {
                    consumer.peek(n)
                };
                prop_assert_eq!(chunk.is_some(), burst || take == n);
                if let Some(chunk) = chunk {
                    let (a, b) = chunk.as_slices();
                    let seen: Vec<u32> = a.iter().chain(b).map(|t| t.v).collect();
                    let want: Vec<u32> = model.q.iter().take(take).copied().collect();
                    prop_assert_eq!(seen, want, "op {}: peeked", i);
                    match how {
                        // Out of scope uncommitted.
                        ReadHow::Drop => {}
                        ReadHow::Commit => {
                            let k = k % (take + 1);
                            chunk.commit(k);
                            model.dequeue(k);
                            model.cons_published(k);
                        }
                        ReadHow::CommitAll => {
                            chunk.commit_all();
                            model.dequeue(take);
                            model.cons_published(take);
                        }
                        ReadHow::Drain => {
                            let k = k % (take + 1);
                            let got: Vec<u32> = chunk.drain().take(k).map(|t| t.v).collect();
                            prop_assert_eq!(got, model.dequeue(k), "op {}: drained", i);
                            model.cons_published(k);
                        }
                        ReadHow::DrainForget => {
                            let k = k % (take + 1);
                            let mut it = chunk.drain();
                            let got: Vec<u32> = it.by_ref().take(k).map(|t| t.v).collect();
                            std::mem::forget(it);
                            prop_assert_eq!(got, model.dequeue(k), "op {}: drained", i);
                            model.unpublished += k;
                        }
                    }
                }
            }
        }
        prop_assert_eq!(
            count(),
            model.q.len(),
            "op {}: live values after {:?}",
            i,
            op
        );
        prop_assert_eq!(consumer.len(), model.q.len());
    }
    drop((producer, consumer));
    prop_assert_eq!(count(), 0, "values left in the ring are dropped with it");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn prop_shared_ring_matches_model(
        cap in capacity_strategy(),
        start in start_strategy(),
        ops in prop::collection::vec((any::<bool>(), 0..=40usize, any::<bool>()), 0..200),
    ) {
        check_shared_ring(cap, start, &ops)?;
    }

    #[test]
    fn prop_non_copy_values_are_dropped_exactly_once((cap, start, ops) in model_case(100)) {
        check_drops(cap, start, &ops)?;
    }
}

#[test]
fn slot_array_is_aligned_to_two_cache_lines() {
    // A bulk of 8 pointers must fill exactly one cache line, never straddle two.
    for cap in [1usize, 8, 64, 4096] {
        let (producer, _consumer) = Ring::<usize>::spsc(cap).unwrap();
        assert_eq!(
            producer.ring().slot_ptr(0) as usize % 128,
            0,
            "capacity {cap}"
        );
    }
    let (producer, _consumer) = Ring::<[u8; 3]>::mpmc(16).unwrap();
    assert_eq!(producer.ring().slot_ptr(0) as usize % 128, 0);
}

// ---------------------------------------------------------------------------
// Forgotten chunks and iterators, and panicking producers of values.

/// A value that counts its drops, in a leaked array (so a value dropped
/// twice shows as a count of 2, not as a corrupted heap).
struct Counted {
    id: usize,
    drops: &'static [std::sync::atomic::AtomicUsize],
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Drop counters for `n` values.
fn tracked(n: usize) -> &'static [std::sync::atomic::AtomicUsize] {
    Vec::leak((0..n).map(|_| Default::default()).collect())
}

fn drop_counts(drops: &[std::sync::atomic::AtomicUsize]) -> Vec<usize> {
    drops
        .iter()
        .map(|d| d.load(std::sync::atomic::Ordering::Relaxed))
        .collect()
}

/// Values 0..6 in a ring of 8; `peek(4).drain()` yields `k` of them and is
/// forgotten. Then either the ends are dropped at once, or the consumer pops
/// what is left, values 6..10 go through, and then the ends are dropped.
/// Every value leaves the ring at most once and is dropped exactly once.
fn check_forgotten_drain(k: usize, keep_using: bool) {
    let drops = tracked(10);
    let make = |id| Counted { id, drops };
    let (mut producer, mut consumer) = Ring::<Counted>::spsc(8).unwrap();
    for id in 0..6 {
        assert!(producer.push(make(id)).is_ok());
    }
    let mut seen = [0usize; 10];
    let mut d = consumer.peek(4).unwrap().drain();
    for v in d.by_ref().take(k) {
        seen[v.id] += 1;
    }
    std::mem::forget(d);
    if keep_using {
        assert_eq!(consumer.len(), 6 - k, "what was taken is no longer waiting");
        for _ in 0..8 {
            let Some(v) = consumer.pop() else { break };
            seen[v.id] += 1;
        }
        for id in 6..10 {
            assert!(producer.push(make(id)).is_ok(), "room for value {id}");
        }
        let got: Vec<usize> = consumer.peek_burst(8).drain().map(|v| v.id).collect();
        assert_eq!(got, [6, 7, 8, 9]);
        for id in got {
            seen[id] += 1;
        }
        assert_eq!(seen, [1; 10], "values out of the ring, k = {k}");
    } else {
        assert!(seen.iter().all(|&s| s <= 1), "values out: {seen:?}");
    }
    drop((producer, consumer));
    let expected: Vec<usize> = (0..10)
        .map(|id| usize::from(id < 6 || keep_using))
        .collect();
    assert_eq!(drop_counts(drops), expected, "drops per value, k = {k}");
}

#[test]
fn a_forgotten_drain_yields_no_value_twice() {
    for k in [0, 1, 3, 4] {
        check_forgotten_drain(k, true);
        check_forgotten_drain(k, false);
    }
}

// The chunks have no `Drop` (dropping one commits nothing), so forgetting one
// is dropping it; the test keeps that true should one get a `Drop`.
#[allow(clippy::forget_non_drop)]
#[test]
fn a_forgotten_chunk_publishes_nothing() {
    let drops = tracked(4);
    let make = |id| Counted { id, drops };
    let (mut producer, mut consumer) = Ring::<Counted>::spsc(4).unwrap();
    std::mem::forget(producer.reserve(4).unwrap());
    assert!(producer.push(make(0)).is_ok());
    assert!(producer.push(make(1)).is_ok());
    std::mem::forget(consumer.peek(2).unwrap());
    assert_eq!(consumer.pop().map(|v| v.id), Some(0));
    drop((producer, consumer));
    assert_eq!(drop_counts(drops), [1, 1, 0, 0]);
}

/// `fill_from_iter` with an iterator that panics after yielding `k` values:
/// the values written are published, none is dropped twice, and the ring
/// goes on working.
fn check_panicking_fill(k: usize) {
    let drops = tracked(8);
    let make = |id| Counted { id, drops };
    let (mut producer, mut consumer) = Ring::<Counted>::spsc(8).unwrap();
    let values = (0..).map(|id| {
        assert!(id < k, "the iterator panics at value {id}");
        make(id)
    });
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        producer.reserve(4).unwrap().fill_from_iter(values)
    }));
    assert!(result.is_err());
    let got: Vec<usize> = consumer.peek_burst(8).drain().map(|v| v.id).collect();
    assert_eq!(
        got,
        (0..k).collect::<Vec<_>>(),
        "published before the panic"
    );
    assert!(producer.push(make(k)).is_ok());
    assert_eq!(consumer.pop().map(|v| v.id), Some(k));
    drop((producer, consumer));
    let expected: Vec<usize> = (0..8).map(|id| usize::from(id <= k)).collect();
    assert_eq!(drop_counts(drops), expected, "drops per value, k = {k}");
}

#[test]
fn a_panicking_fill_iterator_publishes_what_it_wrote() {
    for k in [0, 1, 3] {
        check_panicking_fill(k);
    }
}
