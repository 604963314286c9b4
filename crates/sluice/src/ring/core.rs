//! The shared ring: head/tail pairs, the slots, and the head-move / tail-publish
//! protocol that every end is built from.
//!
//! # Protocol
//!
//! Indices are free-running `u32` counters; a slot is `index & mask`. The ring
//! holds `prod.tail - cons.tail` elements (wrapping arithmetic), never more than
//! `capacity`, so a capacity of at most 2^31 keeps every difference exact.
//!
//! An operation has three steps, the same for both sides:
//!
//! 1. **Move the head.** The side claims `n` slots by advancing its own head.
//!    A single-threaded side keeps its head in the end that owns it; a
//!    multi-threaded side moves the shared head with a compare-and-swap, so
//!    concurrent callers claim disjoint ranges. How many slots are there to claim
//!    is read from the *other* side's tail (`cons.tail` for a producer: slots the
//!    consumers have finished reading; `prod.tail` for a consumer: slots the
//!    producers have finished writing).
//! 2. **Copy** the elements into or out of the claimed slots.
//! 3. **Publish the tail.** The side advances its own tail past the range with
//!    a Release store, which hands the range to the other side. Several
//!    multi-threaded callers publish in the order they claimed: each waits until
//!    the tail reaches the start of its own range.
//!
//! Orderings, each Acquire with the Release it pairs with:
//!
//! * producer loads `cons.tail` (Acquire) ↔ consumer's tail store (Release):
//!   the consumer has finished reading a slot before the producer overwrites it;
//! * consumer loads `prod.tail` (Acquire) ↔ producer's tail store (Release):
//!   the producer's writes to a slot are visible before the consumer reads it;
//! * a multi-threaded caller waiting for its turn loads its own side's tail
//!   (Acquire) ↔ the previous caller's tail store (Release): the previous
//!   caller's copies happen-before this caller's store, so whoever acquires this
//!   caller's tail value sees both ranges complete;
//! * a multi-threaded claimer's successful compare-and-swap of the shared head
//!   (Release) ↔ the next claimer's load of that head (Acquire): the previous
//!   claimer read the other side's tail *before* its swap and claimed no more
//!   than that tail allowed, so once the next claimer has acquired the head it
//!   wrote, the tail it reads next is at least as new (read-read coherence
//!   along happens-before), and `base + tail - head` cannot go below zero. With
//!   a Relaxed swap nothing orders the two tail reads: a claimer could see the
//!   head moved by another claimer and yet an older tail, compute a "negative"
//!   count that wraps to about 2^32, and claim slots that are not free (two
//!   producers writing one slot) or entries not yet published (a consumer
//!   reading a slot as it is written). The loom models found exactly that.
//!   A head older than the current one only makes the compare-and-swap fail
//!   and the loop retry.

use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

#[cfg(loom)]
use crate::sync::UnsafeCell;
use crate::sync::{AtomicU32, Ordering, spin_loop};

/// Spins of a multi-threaded publisher waiting for earlier claimers before
/// it starts yielding its core (see [`Ring::publish_multi`]). A power of two.
#[cfg(not(loom))]
const SPINS_BEFORE_YIELD: u32 = 128;

/// One side's head and tail.
#[derive(Debug, Default)]
pub(crate) struct HeadTail {
    /// Next index this side will claim. Shared only in multi-threaded mode;
    /// a single-threaded end keeps its own copy and never touches this field.
    pub(crate) head: AtomicU32,
    /// Every index before this one has been fully handed to the other side.
    /// Written only by this side, with Release.
    pub(crate) tail: AtomicU32,
}

/// A claim made by a head move: `n` slots starting at index `head`, and how many
/// slots/entries remain beyond them (`left`, a snapshot).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim {
    pub(crate) head: u32,
    pub(crate) n: u32,
    pub(crate) left: u32,
}

/// How many of `n` to claim when `avail` are available: all `n`, or with
/// `bulk` none, or otherwise as many as there are.
#[inline(always)]
fn take(n: u32, avail: u32, bulk: bool) -> u32 {
    if n <= avail {
        n
    } else if bulk {
        0
    } else {
        avail
    }
}

/// A bounded lock-free ring of `T`, shared by its producer and consumer ends.
///
/// Create one with [`Ring::spsc`], [`Ring::mpmc`], [`Ring::mpsc`], [`Ring::spmc`]
/// or [`Ring::new`]; they return the two ends. The ring itself only reports its
/// fill level.
pub struct Ring<T> {
    /// Producer side. Its tail is read by consumers (Acquire).
    prod: CachePadded<HeadTail>,
    /// Consumer side. Its tail is read by producers (Acquire).
    cons: CachePadded<HeadTail>,
    /// `capacity - 1`; capacity is a power of two.
    mask: u32,
    /// Slot `i & mask` holds an initialised `T` exactly when
    /// `cons.tail <= i < prod.tail` (wrapping) and no consumer has claimed it.
    slots: SlotArray<T>,
}

#[cfg(not(loom))]
type SlotArray<T> = super::slots::Slots<T>;
#[cfg(loom)]
type SlotArray<T> = Box<[UnsafeCell<MaybeUninit<T>>]>;

// SAFETY: the ring hands each `T` from exactly one producer to exactly one
// consumer (claims are disjoint and published with Release/Acquire), so sharing
// the ring between threads only ever moves `T` values across threads: `T: Send`
// is what that requires.
unsafe impl<T: Send> Sync for Ring<T> {}
// SAFETY: as above; the ring owns its `T`s and may drop them on another thread.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T> std::fmt::Debug for Ring<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

impl<T> Ring<T> {
    /// Allocates a ring of `capacity` slots. The caller has validated
    /// `capacity` (a power of two, 1..=2^31).
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        debug_assert!(capacity.is_power_of_two() && capacity <= super::MAX_CAPACITY);
        #[cfg(not(loom))]
        let slots = super::slots::Slots::new(capacity);
        #[cfg(loom)]
        let slots = (0..capacity)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        Ring {
            prod: CachePadded::new(HeadTail::default()),
            cons: CachePadded::new(HeadTail::default()),
            mask: (capacity - 1) as u32,
            slots,
        }
    }

    /// Number of slots.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.mask as usize + 1
    }

    /// Number of elements published and not yet consumed (a snapshot).
    #[inline]
    pub fn len(&self) -> usize {
        // Load cons first: prod.tail only grows, so reading it second can only
        // make the difference larger, never negative.
        let cons = self.cons.tail.load(Ordering::Acquire);
        let prod = self.prod.tail.load(Ordering::Acquire);
        (prod.wrapping_sub(cons) as usize).min(self.capacity())
    }

    /// True when [`len`](Self::len) is 0.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Free slots (a snapshot).
    #[inline]
    pub fn free(&self) -> usize {
        self.capacity() - self.len()
    }

    #[inline(always)]
    pub(crate) fn prod(&self) -> &HeadTail {
        &self.prod
    }

    #[inline(always)]
    pub(crate) fn cons(&self) -> &HeadTail {
        &self.cons
    }

    #[inline(always)]
    pub(crate) fn capacity_u32(&self) -> u32 {
        self.mask.wrapping_add(1)
    }

    /// Step 1 for a multi-threaded side: claims up to `n` slots of `side` by
    /// compare-and-swap on its head. `other_tail` is the opposite side's tail;
    /// `base` is `capacity` for a producer (free = capacity + cons.tail - head)
    /// and 0 for a consumer (entries = prod.tail - head). With `bulk`, claims
    /// all `n` or nothing. `left` is clamped to `capacity`.
    #[inline(always)]
    pub(crate) fn claim_multi(
        side: &HeadTail,
        other_tail: &AtomicU32,
        base: u32,
        capacity: u32,
        n: u32,
        bulk: bool,
    ) -> Claim {
        loop {
            // Acquire pairs with the Release swap of whoever moved the head
            // to this value: the tail that claimer read happens-before the
            // tail load below, which therefore cannot return an older value
            // (see the module header). It also keeps that load after this one.
            let head = side.head.load(Ordering::Acquire);
            // Pairs with the other side's Release tail store.
            let other = other_tail.load(Ordering::Acquire);
            let avail = base.wrapping_add(other).wrapping_sub(head);
            // A head read long before the tail can make `avail` exceed what
            // exists; the compare-and-swap below then fails and we retry.
            let take = take(n, avail, bulk);
            if take == 0 {
                // Nothing claimed: `avail` is only a snapshot, possibly from
                // a stale head, so keep it within what can exist.
                return Claim {
                    head,
                    n: 0,
                    left: avail.min(capacity),
                };
            }
            // Release on success: the next claimer that loads this head value
            // (Acquire, above) must then read the other side's tail at least
            // as new as `other`, or its count can wrap and over-claim. The
            // slots themselves are handed over by the tails. Relaxed on
            // failure: the loop reloads the head with Acquire.
            if side
                .head
                .compare_exchange_weak(
                    head,
                    head.wrapping_add(take),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                // The head did not move between its load and the swap, and
                // the tail was read after the head: `avail` is a true count
                // of slots at the time of that read.
                return Claim {
                    head,
                    n: take,
                    left: avail - take,
                };
            }
            spin_loop();
        }
    }

    /// Step 1 for a single-threaded side, whose head lives in its end:
    /// claims up to `n` slots from `head` (all or nothing with `bulk`).
    /// `cached` is the end's copy of the other side's tail; it is reread from
    /// `other_tail` only when it shows fewer than `n` available, so the other
    /// core's cache line is touched once per "looked full/empty", not per
    /// call. `base` as in [`claim_multi`](Self::claim_multi).
    #[inline(always)]
    pub(crate) fn claim_single(
        head: u32,
        cached: &mut u32,
        other_tail: &AtomicU32,
        base: u32,
        n: u32,
        bulk: bool,
    ) -> Claim {
        let mut avail = base.wrapping_add(*cached).wrapping_sub(head);
        if avail < n {
            // Pairs with the other side's Release tail store: a producer sees
            // the slots freed only after the consumer read them, a consumer
            // sees the values only after the producer wrote them.
            *cached = other_tail.load(Ordering::Acquire);
            avail = base.wrapping_add(*cached).wrapping_sub(head);
        }
        let take = take(n, avail, bulk);
        Claim {
            head,
            n: take,
            left: avail - take,
        }
    }

    /// Step 3 for an end of mode `M`: a multi-threaded side publishes in
    /// claim order; a single-threaded one advances its own `head` and stores
    /// the tail.
    #[inline(always)]
    pub(crate) fn publish<M: super::SyncMode>(side: &HeadTail, head: &mut u32, claim: Claim) {
        if claim.n == 0 {
            return;
        }
        if M::MULTI {
            Self::publish_multi(side, claim.head, claim.n);
        } else {
            *head = claim.head.wrapping_add(claim.n);
            Self::publish_single(side, *head);
        }
    }

    /// Step 3 for a multi-threaded side: waits for the callers that claimed
    /// before us to publish, then publishes `[head, head + n)`.
    ///
    /// The wait spins [`SPINS_BEFORE_YIELD`] times, then yields the core
    /// between further checks. A caller that claimed before us and is running
    /// publishes well within the spins (it only has its copy left); one that
    /// was preempted between its claim and its publish cannot publish until
    /// it gets a core back, and a pure spin would hold that core for the rest
    /// of our time slice, and the same for every later claimer on this side.
    #[inline(always)]
    pub(crate) fn publish_multi(side: &HeadTail, head: u32, n: u32) {
        #[cfg(not(loom))]
        let mut spins = 0u32;
        // Acquire pairs with the previous claimer's Release store below, so
        // its slot accesses happen-before our store (see module header).
        while side.tail.load(Ordering::Acquire) != head {
            // (Under loom `spin_loop` already yields to the other threads.)
            #[cfg(not(loom))]
            {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(SPINS_BEFORE_YIELD) {
                    std::thread::yield_now();
                    continue;
                }
            }
            spin_loop();
        }
        // Pairs with the other side's Acquire load of this tail.
        side.tail.store(head.wrapping_add(n), Ordering::Release);
    }

    /// Step 3 for a single-threaded side.
    #[inline(always)]
    pub(crate) fn publish_single(side: &HeadTail, new_tail: u32) {
        // Pairs with the other side's Acquire load of this tail.
        side.tail.store(new_tail, Ordering::Release);
    }

    /// Moves one value into the slot of index `idx`.
    ///
    /// # Safety
    /// The caller has claimed `idx` as a producer and not yet published it, so
    /// no one else accesses the slot, and the slot holds no live value.
    #[inline(always)]
    pub(crate) unsafe fn write(&self, idx: u32, value: T) {
        let slot = &self.slots[(idx & self.mask) as usize];
        // SAFETY: exclusive access to an empty slot, by the caller's claim.
        slot.with_mut(|p| unsafe { (*p).write(value) });
    }

    /// Moves the value out of the slot of index `idx`.
    ///
    /// # Safety
    /// The caller has claimed `idx` as a consumer and not yet published it, and
    /// the slot holds a value (it was published by a producer).
    #[inline(always)]
    pub(crate) unsafe fn read(&self, idx: u32) -> T {
        let slot = &self.slots[(idx & self.mask) as usize];
        // SAFETY: exclusive access to an initialised slot, by the caller's claim.
        slot.with(|p| unsafe { (*p).assume_init_read() })
    }

    /// Pointer to the slot of index `idx` (its position, wrapped).
    #[cfg(not(loom))]
    #[inline(always)]
    pub(crate) fn slot_ptr(&self, idx: u32) -> *mut MaybeUninit<T> {
        self.slots[(idx & self.mask) as usize].get()
    }

    /// Splits `n` slots starting at `idx` into the part before the wrap and the
    /// part after it: `(first_len, second_len)`.
    #[cfg(not(loom))]
    #[inline(always)]
    pub(crate) fn split_at_wrap(&self, idx: u32, n: u32) -> (usize, usize) {
        let pos = (idx & self.mask) as usize;
        let first = (self.capacity() - pos).min(n as usize);
        (first, n as usize - first)
    }
}

impl<T: Copy> Ring<T> {
    /// Copies `src` into the slots starting at `idx` (at most two copies
    /// across the wrap).
    ///
    /// # Safety
    /// The caller has claimed `src.len()` slots from `idx` as a producer.
    #[inline(always)]
    pub(crate) unsafe fn write_slice(&self, idx: u32, src: &[T]) {
        #[cfg(not(loom))]
        {
            let (first, second) = self.split_at_wrap(idx, src.len() as u32);
            let base = self.slots.as_ptr() as *mut T;
            let pos = (idx & self.mask) as usize;
            // SAFETY: the cells have `T`'s layout; both ranges are inside the array (`pos + first`
            // and `second` <= capacity) and claimed by the caller, so unshared; `src` is a
            // distinct borrow, so no overlap.
            unsafe {
                crate::copy::copy_run(src.as_ptr(), base.add(pos), first);
                if second != 0 {
                    crate::copy::copy_run(src.as_ptr().add(first), base, second);
                }
            }
        }
        #[cfg(loom)]
        for (i, v) in src.iter().enumerate() {
            // SAFETY: forwarded from the caller's claim.
            unsafe { self.write(idx.wrapping_add(i as u32), *v) };
        }
    }

    /// Copies the slots starting at `idx` into `dst`.
    ///
    /// # Safety
    /// The caller has claimed `dst.len()` published slots from `idx` as a
    /// consumer.
    #[inline(always)]
    pub(crate) unsafe fn read_slice(&self, idx: u32, dst: &mut [T]) {
        #[cfg(not(loom))]
        {
            let (first, second) = self.split_at_wrap(idx, dst.len() as u32);
            let base = self.slots.as_ptr() as *const T;
            let pos = (idx & self.mask) as usize;
            // SAFETY: as in `write_slice`; the slots are initialised because
            // they were published by a producer and claimed by us.
            unsafe {
                crate::copy::copy_run(base.add(pos), dst.as_mut_ptr(), first);
                if second != 0 {
                    crate::copy::copy_run(base, dst.as_mut_ptr().add(first), second);
                }
            }
        }
        #[cfg(loom)]
        for (i, v) in dst.iter_mut().enumerate() {
            // SAFETY: forwarded from the caller's claim.
            *v = unsafe { self.read(idx.wrapping_add(i as u32)) };
        }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() {
            return;
        }
        // Every end is gone (they hold the Arc), so nothing is claimed: the
        // live values are exactly [cons.tail, prod.tail).
        let mut i = self.cons.tail.load(Ordering::Acquire);
        let end = self.prod.tail.load(Ordering::Acquire);
        while i != end {
            // SAFETY: the slot is published and unconsumed, and we are the last
            // owner of the ring.
            drop(unsafe { self.read(i) });
            i = i.wrapping_add(1);
        }
    }
}
