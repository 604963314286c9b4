//! The AF_XDP rings as seen from user space: single-producer,
//! single-consumer rings shared with the kernel through `mmap`.
//!
//! # Layout
//! Each ring is one mapping holding a producer index, a consumer index and a
//! flags word (each a `u32`, at offsets the kernel reports through
//! `XDP_MMAP_OFFSETS`), and an array of `size` entries (a power of two):
//! `u64` UMEM addresses on the fill and completion rings, 16-byte
//! descriptors (`addr`, `len`, `options`) on the Rx and Tx rings. Indices
//! are free-running `u32`s; entry `i` is at `i & (size - 1)`.
//!
//! # Who produces what
//! | ring | user space | kernel |
//! |---|---|---|
//! | fill | produces free frames ([`ProdRing`]) | consumes them to receive into |
//! | Rx | consumes received frames ([`ConsRing`]) | produces them |
//! | Tx | produces frames to send ([`ProdRing`]) | consumes them |
//! | completion | consumes sent frames ([`ConsRing`]) | produces them |
//!
//! # Memory ordering (the kernel's `xsk_queue.h` protocol)
//! A producer writes entries, then publishes them with a **Release** store of
//! the producer index; the consumer loads the producer index with
//! **Acquire** before reading entries — so the entries are visible. The
//! consumer gives slots back with a **Release** store of the consumer index
//! after reading them; the producer loads the consumer index with
//! **Acquire** before overwriting slots — so the reads are done. The kernel
//! side does the same with `smp_store_release` / `smp_load_acquire`, and each
//! Acquire below names the kernel Release it pairs with.
//!
//! Both ends cache the other side's index and reread it only when the
//! cached value does not cover the request, so a busy ring costs one shared
//! cache-line read per "ran out", not per call.
//!
//! The flags word carries `XDP_RING_NEED_WAKEUP`: the kernel sets it when it
//! will not look at the ring again until woken (`sendto` for Tx, `recvfrom`
//! or `poll` for fill). It is read after publishing, behind a `SeqCst`
//! fence, so our producer store cannot pass the flags load (a store-load
//! reordering x86 allows): either the kernel, re-reading the ring after
//! setting the flag, sees our entries, or we see the flag and wake it.
//! (In copy mode the Tx flag simply stays set and the fill flag is never
//! set.)

use crate::sync::{AtomicU32, Ordering, UnsafeCell, fence};

/// `XDP_RING_NEED_WAKEUP` in a ring's flags word.
pub(crate) const NEED_WAKEUP: u32 = 1;

/// A ring's shared words and entries.
pub(crate) struct RingPtrs<T> {
    /// Producer index: written by the producer only.
    pub producer: *const AtomicU32,
    /// Consumer index: written by the consumer only.
    pub consumer: *const AtomicU32,
    /// Flags (`XDP_RING_NEED_WAKEUP`): written by the kernel.
    pub flags: *const AtomicU32,
    /// `size` entries; `UnsafeCell<T>` has `T`'s layout.
    pub entries: *const UnsafeCell<T>,
    /// Entries in the ring: a power of two.
    pub size: u32,
}

impl<T> RingPtrs<T> {
    /// The producer index word.
    #[inline(always)]
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: the mapping (or the test's memory) outlives the ring
        // value (see `ProdRing::new` / `ConsRing::new`).
        unsafe { &*self.producer }
    }

    /// The consumer index word.
    #[inline(always)]
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { &*self.consumer }
    }

    /// The flags word.
    #[inline(always)]
    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { &*self.flags }
    }

    /// The entry of free-running index `i`.
    #[inline(always)]
    fn entry(&self, i: u32) -> &UnsafeCell<T> {
        // SAFETY: `i & (size - 1)` is in bounds; the memory outlives us.
        unsafe { &*self.entries.add((i & (self.size - 1)) as usize) }
    }
}

/// The user-space end of a ring user space produces into (fill, Tx).
pub(crate) struct ProdRing<T> {
    p: RingPtrs<T>,
    /// The producer index we last published (we are its only writer).
    prod: u32,
    /// The consumer index last read, plus `size`: slots `[prod, end)` are
    /// known free.
    end: u32,
}

// SAFETY: a ring end is one thread's at a time; the raw pointers point
// into a mapping that lives as long as the socket holding it.
unsafe impl<T: Send> Send for ProdRing<T> {}

impl<T: Copy> ProdRing<T> {
    /// The producer end of the ring at `p`.
    ///
    /// # Safety
    /// `p` points at a live ring (its words and `size` entries) that
    /// outlives the returned value, of which this is the only producer end.
    pub(crate) unsafe fn new(p: RingPtrs<T>) -> ProdRing<T> {
        assert!(p.size.is_power_of_two(), "ring size {}", p.size);
        // Relaxed: the ring is being set up; nothing else has produced.
        let prod = p.producer().load(Ordering::Relaxed);
        // Acquire: pairs with the consumer's Release store of its index.
        let end = p.consumer().load(Ordering::Acquire).wrapping_add(p.size);
        ProdRing { p, prod, end }
    }

    /// Entries in the ring.
    #[inline(always)]
    pub(crate) fn size(&self) -> u32 {
        self.p.size
    }

    /// The producer index (free-running): entries before it are published.
    #[inline(always)]
    pub(crate) fn prod(&self) -> u32 {
        self.prod
    }

    /// Free slots, at most `want`: reread the consumer index only when
    /// fewer than `want` are known free.
    #[inline(always)]
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let known = self.end.wrapping_sub(self.prod);
        if known >= want {
            return want;
        }
        // Acquire: pairs with the kernel's release of the consumer index
        // (`smp_store_release` in `xskq_cons_release`): the kernel is done
        // reading the slots it gave back.
        self.end = self
            .p
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.p.size);
        self.end.wrapping_sub(self.prod).min(want)
    }

    /// Writes `v` into the `k`-th slot after the producer index.
    ///
    /// # Safety
    /// `k` is below what [`free`](Self::free) last returned, minus what was
    /// submitted since.
    #[inline(always)]
    pub(crate) unsafe fn write(&mut self, k: u32, v: T) {
        let slot = self.p.entry(self.prod.wrapping_add(k));
        // SAFETY: the slot is free (caller), so the consumer does not read
        // it until the Release in `submit`; we are the only producer.
        slot.with_mut(|p| unsafe { p.write(v) });
    }

    /// Publishes the next `n` written slots.
    #[inline(always)]
    pub(crate) fn submit(&mut self, n: u32) {
        self.prod = self.prod.wrapping_add(n);
        // Release: the entries written above are visible to a consumer that
        // loads this index with Acquire (the kernel's `smp_load_acquire`).
        self.p.producer().store(self.prod, Ordering::Release);
    }

    /// Entries published and not yet consumed (rereads the consumer index).
    pub(crate) fn pending(&mut self) -> u32 {
        // Acquire: as in `free`.
        let cons = self.p.consumer().load(Ordering::Acquire);
        self.end = cons.wrapping_add(self.p.size);
        self.prod.wrapping_sub(cons)
    }

    /// Whether the kernel asks to be woken to look at this ring. Call after
    /// [`submit`](Self::submit).
    #[inline(always)]
    pub(crate) fn needs_wakeup(&self) -> bool {
        // The producer store must not pass the flags load (module docs).
        fence(Ordering::SeqCst);
        self.p.flags().load(Ordering::Relaxed) & NEED_WAKEUP != 0
    }
}

/// The user-space end of a ring user space consumes from (Rx, completion).
pub(crate) struct ConsRing<T> {
    p: RingPtrs<T>,
    /// The consumer index we last published (we are its only writer).
    cons: u32,
    /// The producer index last read: entries `[cons, prod)` are known ready.
    prod: u32,
}

// SAFETY: as for `ProdRing`.
unsafe impl<T: Send> Send for ConsRing<T> {}

impl<T: Copy> ConsRing<T> {
    /// The consumer end of the ring at `p`.
    ///
    /// # Safety
    /// As [`ProdRing::new`], for the consumer end.
    pub(crate) unsafe fn new(p: RingPtrs<T>) -> ConsRing<T> {
        assert!(p.size.is_power_of_two(), "ring size {}", p.size);
        // Relaxed: we are the only writer of the consumer index.
        let cons = p.consumer().load(Ordering::Relaxed);
        ConsRing {
            p,
            cons,
            prod: cons,
        }
    }

    /// Entries in the ring.
    #[inline(always)]
    pub(crate) fn size(&self) -> u32 {
        self.p.size
    }

    /// Entries ready, at most `want`: reread the producer index only when
    /// fewer than `want` are known ready.
    #[inline(always)]
    pub(crate) fn ready(&mut self, want: u32) -> u32 {
        let known = self.prod.wrapping_sub(self.cons);
        if known >= want {
            return want;
        }
        // Acquire: pairs with the kernel's release of the producer index
        // (`smp_store_release` in `xskq_prod_submit*`): the entries up to it
        // are written.
        self.prod = self.p.producer().load(Ordering::Acquire);
        self.prod.wrapping_sub(self.cons).min(want)
    }

    /// The `k`-th ready entry.
    ///
    /// # Safety
    /// `k` is below what [`ready`](Self::ready) last returned, minus what
    /// was released since.
    #[inline(always)]
    pub(crate) unsafe fn read(&self, k: u32) -> T {
        let slot = self.p.entry(self.cons.wrapping_add(k));
        // SAFETY: the entry is published (caller; Acquire in `ready`) and
        // the producer does not rewrite it before `release` gives it back.
        slot.with(|p| unsafe { p.read() })
    }

    /// Gives the next `n` read entries back to the producer.
    #[inline(always)]
    pub(crate) fn release(&mut self, n: u32) {
        self.cons = self.cons.wrapping_add(n);
        // Release: our reads of the entries happen before the producer,
        // loading this index with Acquire, overwrites them.
        self.p.consumer().store(self.cons, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
#[path = "ring_tests.rs"]
mod tests;

#[cfg(all(test, loom))]
#[path = "ring_loom_tests.rs"]
mod loom_tests;
