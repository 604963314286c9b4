//! A page pool's direct cache: a LIFO stack of page addresses that only the
//! pool's owner thread touches, so a get or a put is a few plain loads and
//! stores — no atomic read-modify-write.
//!
//! Who may call what: `pop`, `push` and `refill_from` only the thread that
//! holds the pool's owner lcore id (lcore ids pass between threads with
//! Release/Acquire, so the stack never has two users at once); `len` anyone
//! (a snapshot); `drain` the owner, or anyone once nothing else can reach the
//! pool. The length is published with a Release store after the slots are
//! written, so a reader that loads it with Acquire sees those slots.

use crate::counter::Counter;
use crate::ring::SharedRing;
use crate::sync::{AtomicU32, Ordering, UnsafeCell};

/// The owner thread's stack of free pages.
#[derive(Debug)]
pub(crate) struct DirectCache {
    /// Page addresses; `[0, len)` hold free pages of the pool.
    slots: UnsafeCell<Box<[usize]>>,
    /// Entries in use. Written only by the stack's user (Release), read by
    /// anyone.
    len: AtomicU32,
    /// Entries the stack can hold.
    cap: u32,
}

impl DirectCache {
    /// An empty stack of `cap` entries.
    pub(crate) fn new(cap: u32) -> DirectCache {
        DirectCache {
            slots: UnsafeCell::new(vec![0usize; cap as usize].into_boxed_slice()),
            len: AtomicU32::new(0),
            cap,
        }
    }

    /// Pages held (a snapshot; Acquire, so a reader that finds the owner
    /// done sees its slots).
    #[inline(always)]
    pub(crate) fn len(&self) -> u32 {
        self.len.load(Ordering::Acquire)
    }

    /// Takes the most recently pushed page.
    ///
    /// # Safety
    /// Called on the owner thread (see the module docs).
    #[inline(always)]
    pub(crate) unsafe fn pop(&self) -> Option<usize> {
        let n = self.len.load(Ordering::Relaxed);
        if n == 0 {
            return None;
        }
        let a = self.slots.with(|s| {
            // SAFETY: the owner thread alone touches the stack; `n - 1 < len
            // <= cap`.
            unsafe { *(&*s).get_unchecked(n as usize - 1) }
        });
        self.len.store(n - 1, Ordering::Relaxed);
        Some(a)
    }

    /// Pushes a page unless the stack is full (then false); counts the push
    /// in `pushes` first, so the length store is the last access to the
    /// pool.
    ///
    /// # Safety
    /// Called on the owner thread; `addr` is a free page of the pool.
    #[inline(always)]
    pub(crate) unsafe fn push(&self, addr: usize, pushes: &Counter) -> bool {
        let n = self.len.load(Ordering::Relaxed);
        if n == self.cap {
            return false;
        }
        pushes.inc();
        // SAFETY: as above; `n < cap`.
        self.slots
            .with_mut(|s| unsafe { *(&mut *s).get_unchecked_mut(n as usize) = addr });
        // Release: the slot is written before anyone who reads this length
        // (the pool's last handle, deciding whether every page is home).
        self.len.store(n + 1, Ordering::Release);
        true
    }

    /// Pushes as many of `addrs` as fit (from the front); how many. Counts
    /// them in `pushes` first, so the length store is the last access to the
    /// pool.
    ///
    /// # Safety
    /// Called on the owner thread; `addrs` are free pages of the pool.
    #[inline]
    pub(crate) unsafe fn push_bulk(&self, addrs: &[usize], pushes: &Counter) -> usize {
        let n = self.len.load(Ordering::Relaxed);
        let k = addrs.len().min((self.cap - n) as usize);
        if k == 0 {
            return 0;
        }
        pushes.add(k as u64);
        self.slots.with_mut(|s| {
            // SAFETY: the owner thread alone touches the stack; `n + k <= cap`.
            let s = unsafe { &mut *s };
            s[n as usize..n as usize + k].copy_from_slice(&addrs[..k]);
        });
        // Release: as in `push`.
        self.len.store(n + k as u32, Ordering::Release);
        k
    }

    /// Moves up to `n` pages from `ring` into the (empty) stack; how many.
    ///
    /// # Safety
    /// Called on the owner thread.
    #[inline]
    pub(crate) unsafe fn refill_from(&self, ring: &SharedRing<usize>, n: u32) -> u32 {
        let len = self.len.load(Ordering::Relaxed);
        let got = self.slots.with_mut(|s| {
            // SAFETY: the owner thread alone touches the stack.
            let s = unsafe { &mut *s };
            let end = (len + n).min(self.cap) as usize;
            ring.dequeue(&mut s[len as usize..end], false).n as u32
        });
        self.len.store(len + got, Ordering::Release);
        got
    }

    /// Empties the stack into `f`, one page at a time, from the top. Each
    /// page leaves the stack before `f` gets it: if `f` panics, the pages
    /// it has had are no longer in the stack and the others still are.
    ///
    /// # Safety
    /// Called on the owner thread, or when no other thread can reach the
    /// pool.
    pub(crate) unsafe fn drain(&self, mut f: impl FnMut(usize)) {
        // Acquire: pairs with the owner's Release length store, so the slots
        // it wrote are seen (when the caller is not the owner).
        let mut n = self.len.load(Ordering::Acquire);
        while n != 0 {
            n -= 1;
            let a = self.slots.with(|s| {
                // SAFETY: as the contract says, no one else touches the
                // stack; `n < len <= cap`.
                unsafe { *(&*s).get_unchecked(n as usize) }
            });
            // Release, as every length store: a reader that sees the
            // shorter stack (the pool's `all_home`) sees it whole.
            self.len.store(n, Ordering::Release);
            f(a);
        }
    }
}
