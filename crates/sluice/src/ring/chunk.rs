//! Zero-copy access: reserve slots and write them in place, or peek at entries
//! and read them in place, then commit.
//!
//! Only single-threaded ends have it: a multi-threaded claim is visible to
//! other producers the moment the head moves, so it could not be shrunk at
//! commit time. A chunk borrows its end mutably, so nothing else happens on
//! that end until it is committed or dropped; dropping a chunk commits nothing.
//! A claim covers up to two runs of slots, before and after the wrap; the
//! slices come in that order.

use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use super::core::{Claim, Ring};
use super::{Consumer, Producer, Single};

/// Slots reserved by [`Producer::reserve`]: write them, then commit.
#[derive(Debug)]
pub struct WriteChunk<'a, T> {
    producer: &'a mut Producer<T, Single>,
    claim: Claim,
}

/// Entries borrowed by [`Consumer::peek`]: read them, then commit to release.
///
/// [`as_slices`](Self::as_slices) lends the entries through `&self`, so a
/// chunk shared between threads shares its `T`s: it is `Sync` only when `T`
/// is. A chunk of `Cell`s stays on one thread:
///
/// ```compile_fail,E0277
/// use sluice::ring::{ReadChunk, Ring};
/// use std::cell::Cell;
///
/// fn shared<T: Sync>(_: &T) {}
/// let (mut tx, mut rx) = Ring::<Cell<u32>>::spsc(2).unwrap();
/// tx.push(Cell::new(1)).unwrap();
/// let chunk: ReadChunk<'_, Cell<u32>> = rx.peek(1).unwrap();
/// shared(&chunk); // error: `Cell<u32>` cannot be shared between threads
/// ```
#[derive(Debug)]
pub struct ReadChunk<'a, T> {
    consumer: &'a mut Consumer<T, Single>,
    claim: Claim,
    /// Not `Sync` by itself (`Cell<()>` is `Send` but not `Sync`): without
    /// it the chunk would be `Sync` whenever `T: Send`, through `&mut
    /// Consumer`, and two threads could then hold `&T` to one entry of a
    /// `Send + !Sync` type. The `Sync` impl below adds back `T: Sync`.
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: through `&ReadChunk` a thread can only read the claim (`len`,
// `is_empty`) and get `&T` to the borrowed entries (`as_slices`); both are
// safe to share when `T: Sync`. Everything that touches the consumer or moves
// entries takes the chunk by value. `T: Send` is what the consumer field
// already required.
unsafe impl<T: Send + Sync> Sync for ReadChunk<'_, T> {}

impl<T> Producer<T, Single> {
    /// Reserves exactly `n` slots, or `None` if fewer are free.
    #[inline]
    pub fn reserve(&mut self, n: usize) -> Option<WriteChunk<'_, T>> {
        let n = u32::try_from(n).ok()?;
        let claim = self.claim(n, true);
        (claim.n == n).then_some(WriteChunk {
            producer: self,
            claim,
        })
    }

    /// Reserves as many slots as are free, up to `max` (possibly none).
    ///
    /// ```
    /// use sluice::ring::Ring;
    ///
    /// let (mut tx, mut rx) = Ring::<u16>::spsc(8).unwrap();
    /// tx.enqueue_bulk(&[0; 6]);
    /// let mut zeros = [0u16; 6];
    /// rx.dequeue_bulk(&mut zeros); // the next slots written cross the wrap
    ///
    /// // Write in place: up to 10 asked, the ring has 8 slots.
    /// let chunk = tx.reserve_burst(10);
    /// assert_eq!(chunk.len(), 8);
    /// assert_eq!(chunk.copy_from_slice(&[1, 2, 3, 4, 5]), 5);
    ///
    /// // Read in place, release part, and leave the rest for later.
    /// let chunk = rx.peek_burst(4);
    /// let (before_wrap, after_wrap) = chunk.as_slices();
    /// assert_eq!((before_wrap, after_wrap), (&[1, 2][..], &[3, 4][..]));
    /// chunk.commit(3);
    /// assert_eq!(rx.len(), 2);
    ///
    /// // Or move the entries out one by one.
    /// let taken: Vec<u16> = rx.peek_burst(8).drain().collect();
    /// assert_eq!(taken, [4, 5]);
    /// assert!(rx.is_empty());
    /// ```
    #[inline]
    pub fn reserve_burst(&mut self, max: usize) -> WriteChunk<'_, T> {
        let max = max.min(super::MAX_CAPACITY) as u32;
        let claim = self.claim(max, false);
        WriteChunk {
            producer: self,
            claim,
        }
    }
}

impl<'a, T> WriteChunk<'a, T> {
    /// Number of reserved slots.
    #[inline]
    pub fn len(&self) -> usize {
        self.claim.n as usize
    }

    /// True when nothing was reserved.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.claim.n == 0
    }

    /// The reserved slots: the run before the wrap, then the run after it.
    #[inline]
    pub fn as_mut_slices(&mut self) -> (&mut [MaybeUninit<T>], &mut [MaybeUninit<T>]) {
        let ring = &*self.producer.ring;
        let (first, second) = ring.split_at_wrap(self.claim.head, self.claim.n);
        let a = ring.slot_ptr(self.claim.head);
        let b = ring.slot_ptr(self.claim.head.wrapping_add(first as u32));
        // SAFETY: claimed, unpublished slots of this (mutably borrowed) end; the runs end at
        // the array end / start at slot 0, so in bounds and disjoint; `UnsafeCell<MaybeUninit<T>>`
        // has the layout of `MaybeUninit<T>`.
        unsafe {
            (
                std::slice::from_raw_parts_mut(a, first),
                std::slice::from_raw_parts_mut(b, second),
            )
        }
    }

    /// Publishes the first `k` reserved slots (in slice order).
    ///
    /// # Safety
    /// The first `k` slots of [`as_mut_slices`](Self::as_mut_slices), taken
    /// in order, must have been initialised. `k` must be at most
    /// [`len`](Self::len).
    #[inline]
    pub unsafe fn commit(self, k: usize) {
        assert!(
            k <= self.len(),
            "commit of {k} slots, {} reserved",
            self.len()
        );
        let claim = Claim {
            n: k as u32,
            ..self.claim
        };
        self.producer.publish(claim);
    }

    /// Moves values from `iter` into the reserved slots until either runs out,
    /// publishes them and returns how many were written.
    ///
    /// If `iter` panics, the values written before the panic are published
    /// (during the unwind), so none is lost or dropped twice.
    pub fn fill_from_iter<I: IntoIterator<Item = T>>(self, iter: I) -> usize {
        let WriteChunk { producer, claim } = self;
        let mut written = PublishOnDrop {
            producer,
            claim: Claim { n: 0, ..claim },
        };
        for (i, v) in (0..claim.n).zip(iter) {
            // SAFETY: slot `head + i` is reserved by the claim, unpublished
            // and empty; `claim.n` counts exactly the slots written before.
            unsafe { written.producer.ring.write(claim.head.wrapping_add(i), v) };
            written.claim.n += 1;
        }
        written.claim.n as usize
        // `written` publishes the slots as it goes out of scope.
    }
}

/// Publishes `claim` (the written prefix of a reservation) when dropped,
/// including during an unwind.
struct PublishOnDrop<'a, T> {
    producer: &'a mut Producer<T, Single>,
    claim: Claim,
}

impl<T> Drop for PublishOnDrop<'_, T> {
    fn drop(&mut self) {
        self.producer.publish(self.claim);
    }
}

impl<T: Copy> WriteChunk<'_, T> {
    /// Copies `src` (at most [`len`](Self::len) values, from its front) into
    /// the slots, publishes them and returns how many.
    pub fn copy_from_slice(self, src: &[T]) -> usize {
        let n = src.len().min(self.len());
        // SAFETY: the claim covers `n` slots from its head; we write exactly
        // those, and publish them just below.
        unsafe { self.producer.ring.write_slice(self.claim.head, &src[..n]) };
        // SAFETY: the first `n` slots were initialised just above.
        unsafe { self.commit(n) };
        n
    }
}

impl<T> Consumer<T, Single> {
    /// Borrows exactly `n` entries in place, or `None` if fewer are waiting.
    #[inline]
    pub fn peek(&mut self, n: usize) -> Option<ReadChunk<'_, T>> {
        let n = u32::try_from(n).ok()?;
        let claim = self.claim(n, true);
        (claim.n == n).then_some(ReadChunk {
            consumer: self,
            claim,
            _not_sync: PhantomData,
        })
    }

    /// Borrows as many entries as are waiting, up to `max` (possibly none).
    #[inline]
    pub fn peek_burst(&mut self, max: usize) -> ReadChunk<'_, T> {
        let max = max.min(super::MAX_CAPACITY) as u32;
        let claim = self.claim(max, false);
        ReadChunk {
            consumer: self,
            claim,
            _not_sync: PhantomData,
        }
    }
}

impl<'a, T> ReadChunk<'a, T> {
    /// Number of borrowed entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.claim.n as usize
    }

    /// True when nothing was borrowed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.claim.n == 0
    }

    /// The entries: the run before the wrap, then the run after it.
    #[inline]
    pub fn as_slices(&self) -> (&[T], &[T]) {
        let ring = &*self.consumer.ring;
        let (first, second) = ring.split_at_wrap(self.claim.head, self.claim.n);
        let a = ring.slot_ptr(self.claim.head) as *const T;
        let b = ring.slot_ptr(self.claim.head.wrapping_add(first as u32)) as *const T;
        // SAFETY: the entries are published (initialised) and claimed by this
        // end, which the chunk borrows; producers do not touch them until we
        // publish `cons.tail`. Bounds and layout as in `WriteChunk`.
        unsafe {
            (
                std::slice::from_raw_parts(a, first),
                std::slice::from_raw_parts(b, second),
            )
        }
    }

    /// Releases the first `k` entries (in slice order), dropping them.
    /// The rest stay in the ring for the next read.
    pub fn commit(self, k: usize) {
        let k = k.min(self.len());
        if std::mem::needs_drop::<T>() {
            // Through `Drain`, which counts an entry as taken before handing
            // it out and publishes what it took when dropped: if one of these
            // drops panics, the entries already dropped (and the one whose
            // drop panicked) are released during the unwind, not left in the
            // ring to be read and dropped again.
            self.drain().take(k).for_each(drop);
            return;
        }
        let claim = Claim {
            n: k as u32,
            ..self.claim
        };
        self.consumer.publish(claim);
    }

    /// Releases every borrowed entry, dropping them.
    pub fn commit_all(self) {
        let n = self.len();
        self.commit(n);
    }

    /// Moves the entries out, in order; entries the iterator did not reach
    /// stay in the ring.
    ///
    /// The consumer's own head moves past an entry before the entry is
    /// handed out, so an iterator that is forgotten (`mem::forget`) never
    /// lets an entry be read twice: the next operation on the consumer, or
    /// its drop, releases what the iterator took.
    pub fn drain(self) -> Drain<'a, T> {
        let end = self.claim.head.wrapping_add(self.claim.n);
        Drain { chunk: self, end }
    }
}

/// Iterator returned by [`ReadChunk::drain`].
///
/// It advances the consumer's head (a plain field of the single-threaded
/// end) past each entry before yielding it, and publishes the consumer tail
/// up to that head once, when dropped: one Release store per drain, not one
/// per entry.
#[derive(Debug)]
pub struct Drain<'a, T> {
    chunk: ReadChunk<'a, T>,
    /// One past the last borrowed entry.
    end: u32,
}

impl<T> Iterator for Drain<'_, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        let consumer = &mut *self.chunk.consumer;
        let idx = consumer.head;
        if idx == self.end {
            return None;
        }
        // The entry stops belonging to the ring before it is read: however
        // the iterator ends (dropped, forgotten, unwound), the ring never
        // counts it again.
        consumer.head = idx.wrapping_add(1);
        // SAFETY: `idx` is in the claim (`claim.head <= idx < end`), so
        // published and initialised; the head has moved past it, so it is
        // read exactly once.
        Some(unsafe { consumer.ring.read(idx) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end.wrapping_sub(self.chunk.consumer.head) as usize;
        (left, Some(left))
    }
}

impl<T> ExactSizeIterator for Drain<'_, T> {}

impl<T> Drop for Drain<'_, T> {
    fn drop(&mut self) {
        let consumer = &mut *self.chunk.consumer;
        if consumer.head != self.chunk.claim.head {
            // Release, pairing with the producer's Acquire load of
            // `cons.tail`: the reads of the taken entries happen-before the
            // producer writes those slots again.
            Ring::<T>::publish_single(consumer.ring.cons(), consumer.head);
        }
    }
}
