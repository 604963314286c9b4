//! The producer and consumer ends of a ring.
//!
//! A single-threaded end ([`Single`]) keeps its side's head to itself and a
//! cached copy of the other side's tail: it reads the shared tail (a cache line
//! the other core writes) only when the cached value says there is not enough
//! room or not enough entries. It is not `Clone`, so the type system keeps it
//! on one thread at a time. A multi-threaded end ([`Multi`]) is `Clone`; every
//! clone claims slots with a compare-and-swap on the shared head.

use std::marker::PhantomData;

use super::core::{Claim, Ring};
use super::{Moved, Multi, Single, SyncMode};
use crate::sync::Arc;

/// The enqueue end of a ring.
///
/// `M` is [`Single`] (one producer thread; not `Clone`) or [`Multi`] (any
/// number of clones on any threads). All operations take `&mut self`: to
/// produce from several threads, clone a `Producer<T, Multi>` into each.
///
/// An end is aligned to 128 bytes (two cache lines, the pair an adjacent-line
/// prefetcher moves together): a single-threaded end writes its own head on
/// every operation, and wherever the application keeps the two ends (a struct,
/// two boxed closures), they never share a line.
#[repr(align(128))]
pub struct Producer<T, M: SyncMode = Single> {
    /// The shared ring.
    pub(super) ring: Arc<Ring<T>>,
    /// Single mode: the next index to claim (== `ring.prod.tail`, which only
    /// this end writes). Unused in multi mode.
    pub(super) head: u32,
    /// Single mode: a value `cons.tail` had at some point; the real one is the
    /// same or larger, so free space computed from it is a lower bound.
    pub(super) cached_cons_tail: u32,
    pub(super) _mode: PhantomData<M>,
}

/// The dequeue end of a ring.
///
/// `M` is [`Single`] (one consumer thread; not `Clone`) or [`Multi`] (any
/// number of clones on any threads). Aligned to 128 bytes, as [`Producer`].
#[repr(align(128))]
pub struct Consumer<T, M: SyncMode = Single> {
    /// The shared ring.
    pub(super) ring: Arc<Ring<T>>,
    /// Single mode: the next index to claim. `ring.cons.tail` (which only
    /// this end writes) is the same, or behind it while a chunk's `Drain`
    /// has taken entries and not yet published them; the next publish, or
    /// the end's drop, brings the tail up to it.
    pub(super) head: u32,
    /// Single mode: a value `prod.tail` had at some point; the real one is the
    /// same or larger, so entries computed from it are a lower bound.
    pub(super) cached_prod_tail: u32,
    pub(super) _mode: PhantomData<M>,
}

impl<T> Clone for Producer<T, Multi> {
    fn clone(&self) -> Self {
        Producer {
            ring: self.ring.clone(),
            head: 0,
            cached_cons_tail: 0,
            _mode: PhantomData,
        }
    }
}

impl<T> Clone for Consumer<T, Multi> {
    fn clone(&self) -> Self {
        Consumer {
            ring: self.ring.clone(),
            head: 0,
            cached_prod_tail: 0,
            _mode: PhantomData,
        }
    }
}

impl<T, M: SyncMode> std::fmt::Debug for Producer<T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("multi", &M::MULTI)
            .field("ring", &*self.ring)
            .finish()
    }
}

impl<T, M: SyncMode> std::fmt::Debug for Consumer<T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("multi", &M::MULTI)
            .field("ring", &*self.ring)
            .finish()
    }
}

impl<T, M: SyncMode> Producer<T, M> {
    pub(super) fn new(ring: Arc<Ring<T>>) -> Self {
        Producer {
            ring,
            head: 0,
            cached_cons_tail: 0,
            _mode: PhantomData,
        }
    }

    /// The ring this end feeds.
    #[inline]
    pub fn ring(&self) -> &Ring<T> {
        &self.ring
    }

    /// Number of slots of the ring.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Step 1: claims up to `n` slots (all or nothing with `bulk`).
    #[inline(always)]
    pub(super) fn claim(&mut self, n: u32, bulk: bool) -> Claim {
        let ring = &*self.ring;
        let cap = ring.capacity_u32();
        if M::MULTI {
            return Ring::<T>::claim_multi(ring.prod(), &ring.cons().tail, cap, cap, n, bulk);
        }
        Ring::<T>::claim_single(
            self.head,
            &mut self.cached_cons_tail,
            &ring.cons().tail,
            cap,
            n,
            bulk,
        )
    }

    /// Step 3: hands the claimed, written slots to the consumers.
    #[inline(always)]
    pub(super) fn publish(&mut self, claim: Claim) {
        Ring::<T>::publish::<M>(self.ring.prod(), &mut self.head, claim);
    }

    /// Enqueues one value, or gives it back when the ring is full.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), T> {
        let claim = self.claim(1, true);
        if claim.n == 0 {
            return Err(value);
        }
        // SAFETY: we claimed slot `claim.head` and have not published it.
        unsafe { self.ring.write(claim.head, value) };
        self.publish(claim);
        Ok(())
    }

    /// Free slots as seen from this end (a snapshot).
    #[inline]
    pub fn free(&self) -> usize {
        self.ring.free()
    }
}

impl<T: Copy, M: SyncMode> Producer<T, M> {
    /// Enqueues all of `src` or nothing, with one head move.
    ///
    /// Returns how many were enqueued (`src.len()` or 0) and the free slots
    /// left after the move (a lower bound).
    #[inline]
    pub fn enqueue_bulk(&mut self, src: &[T]) -> Moved {
        self.enqueue(src, true)
    }

    /// Enqueues as many of `src` as fit (from its front), with one head move.
    #[inline]
    pub fn enqueue_burst(&mut self, src: &[T]) -> Moved {
        self.enqueue(src, false)
    }

    #[inline(always)]
    fn enqueue(&mut self, src: &[T], bulk: bool) -> Moved {
        let n = src.len().min(super::MAX_CAPACITY) as u32;
        let claim = self.claim(n, bulk);
        if claim.n != 0 {
            // SAFETY: we claimed `claim.n` slots from `claim.head`.
            unsafe { self.ring.write_slice(claim.head, &src[..claim.n as usize]) };
            self.publish(claim);
        }
        Moved {
            n: claim.n as usize,
            left: claim.left as usize,
        }
    }
}

impl<T, M: SyncMode> Consumer<T, M> {
    pub(super) fn new(ring: Arc<Ring<T>>) -> Self {
        Consumer {
            ring,
            head: 0,
            cached_prod_tail: 0,
            _mode: PhantomData,
        }
    }

    /// The ring this end drains.
    #[inline]
    pub fn ring(&self) -> &Ring<T> {
        &self.ring
    }

    /// Number of slots of the ring.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Entries waiting (a snapshot).
    #[inline]
    pub fn len(&self) -> usize {
        if M::MULTI {
            return self.ring.len();
        }
        // A single-threaded end counts from its own head, which may be ahead
        // of the published tail (a forgotten `Drain` took entries and did not
        // publish). Acquire pairs with the producer's Release tail store, as
        // in `Ring::len`; `head <= prod.tail`, as it only claims published
        // entries.
        let prod = self.ring.prod().tail.load(crate::sync::Ordering::Acquire);
        prod.wrapping_sub(self.head) as usize
    }

    /// True when no entry is waiting (a snapshot).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Step 1: claims up to `n` published entries (all or nothing with `bulk`).
    #[inline(always)]
    pub(super) fn claim(&mut self, n: u32, bulk: bool) -> Claim {
        let ring = &*self.ring;
        if M::MULTI {
            let cap = ring.capacity_u32();
            return Ring::<T>::claim_multi(ring.cons(), &ring.prod().tail, 0, cap, n, bulk);
        }
        Ring::<T>::claim_single(
            self.head,
            &mut self.cached_prod_tail,
            &ring.prod().tail,
            0,
            n,
            bulk,
        )
    }

    /// Step 3: hands the claimed, read slots back to the producers.
    #[inline(always)]
    pub(super) fn publish(&mut self, claim: Claim) {
        Ring::<T>::publish::<M>(self.ring.cons(), &mut self.head, claim);
    }

    /// Dequeues one value, or `None` when the ring is empty.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        let claim = self.claim(1, true);
        if claim.n == 0 {
            return None;
        }
        // SAFETY: we claimed the published slot `claim.head`.
        let value = unsafe { self.ring.read(claim.head) };
        self.publish(claim);
        Some(value)
    }
}

impl<T, M: SyncMode> Drop for Consumer<T, M> {
    fn drop(&mut self) {
        if !M::MULTI {
            // Publishes entries a forgotten `Drain` took, so the ring's drop
            // (which drops the live values `[cons.tail, prod.tail)`) does not
            // drop them a second time. Release, as every tail store; the
            // ring's drop runs after the last `Arc` is gone in any case.
            Ring::<T>::publish_single(self.ring.cons(), self.head);
        }
    }
}

impl<T: Copy, M: SyncMode> Consumer<T, M> {
    /// Fills all of `dst` or nothing, with one head move.
    ///
    /// Returns how many were dequeued (`dst.len()` or 0) and the entries left
    /// after the move (a lower bound).
    #[inline]
    pub fn dequeue_bulk(&mut self, dst: &mut [T]) -> Moved {
        self.dequeue(dst, true)
    }

    /// Dequeues as many as are available, up to `dst.len()`, into the front of
    /// `dst`, with one head move.
    #[inline]
    pub fn dequeue_burst(&mut self, dst: &mut [T]) -> Moved {
        self.dequeue(dst, false)
    }

    #[inline(always)]
    fn dequeue(&mut self, dst: &mut [T], bulk: bool) -> Moved {
        let n = dst.len().min(super::MAX_CAPACITY) as u32;
        let claim = self.claim(n, bulk);
        if claim.n != 0 {
            // SAFETY: we claimed `claim.n` published slots from `claim.head`.
            unsafe {
                self.ring
                    .read_slice(claim.head, &mut dst[..claim.n as usize])
            };
            self.publish(claim);
        }
        Moved {
            n: claim.n as usize,
            left: claim.left as usize,
        }
    }
}
