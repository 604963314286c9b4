//! The fast-free offload, kept sound: its contract checked where it costs
//! least.
//!
//! Fast free (DPDK's `MBUF_FAST_FREE`) lets a Tx queue give a completed
//! batch back in one bulk put into one pool, and a recycle step move it
//! after looking at its first buffer only. The application promises what
//! makes that right: every buffer the queue sends is a *plain* buffer —
//! reference count 1, one segment, its own data room (no external buffer)
//! — of one pool. In C a broken promise is the caller's undefined
//! behaviour; Sluice's API is safe, so a clone still held elsewhere, a
//! fragment-backed mbuf or another pool's buffer must not end up in the
//! pool (or an Rx ring) as if it were free.
//!
//! # How
//! - **The pool is learnt** from the first packet the queue sends after a
//!   start, and a handle on it kept until the queue stops: a pool cannot go
//!   away (and another take its place in memory) while the queue compares
//!   addresses with it.
//! - **Each packet is screened as `tx_burst` posts it**, in the loop that
//!   reads its first header line anyway: its address lies in the pool's
//!   region, and the first line says plain (reference count, segment count,
//!   `buf_addr` at the element's own data room) — a few branch-free
//!   operations OR-ed into one word per burst. The packet is the burst's
//!   alone, so what holds then holds until it is freed: no one else can
//!   clone it or attach anything to it.
//! - **A burst with a packet that fails taints** every slot posted up to
//!   its end: a mark `taint_end` on the free-running slot index. Batches
//!   retire in order, so one mark serves: a batch starting before it is
//!   freed (or offered for recycling) with the full per-buffer checks, one
//!   starting at or after it the fast way. The mark is conservative — the
//!   clean batches between the last fast one and a failing packet take the
//!   checks too — and free of cost on the fast path: one compare per batch.
//!
//! The learnt pool serves queues without the offload too
//! (`FastFree::plain_pool`): a completed batch whose buffers are plain
//! buffers of it, checked then on their first header lines, goes back in
//! one bulk put without the second line the full free reads.

use crate::mbuf::{HEADER_SIZE, MbufHeader};
use crate::mempool::{Elem, Mempool, PoolInner};
use crate::sync::Ordering;

use super::tx::before;

/// A fast-free Tx queue's pool and taint mark (see the module docs).
pub(super) struct FastFree {
    /// The pool learnt from the first packet sent since the start (`None`
    /// before it, or if that pool has no handle left): the handle keeps it
    /// alive while `base`/`len` are compared with.
    pool: Option<Mempool>,
    /// Its address (null while `pool` is `None`).
    inner: *const PoolInner,
    /// Its region, `[base, base + len)`; `len` 0 while there is no pool, so
    /// no address is in it.
    base: usize,
    len: usize,
    /// Slots at free-running indices before this may hold a packet that is
    /// not a plain buffer of `pool`. Meaningful while `tainted`.
    taint_end: u32,
    /// Some batch before `taint_end` is not retired yet.
    tainted: bool,
}

impl FastFree {
    /// No pool learnt, nothing tainted.
    pub(super) fn new() -> FastFree {
        FastFree {
            pool: None,
            inner: std::ptr::null(),
            base: 0,
            len: 0,
            taint_end: 0,
            tainted: false,
        }
    }

    /// The pool's region, to screen packets against with
    /// [`Region::unfit`], learning the pool from `first` (the first packet
    /// of a burst about to be posted) if there is none yet. With no pool
    /// (none learnt, or that pool had no handle left) the region is empty:
    /// every packet is unfit.
    ///
    /// # Safety
    /// `first`, if any, is an mbuf the caller owns.
    #[inline(always)]
    pub(super) unsafe fn region(&mut self, first: Option<&Elem>) -> Region {
        if self.pool.is_none()
            && let Some(&e) = first
        {
            // SAFETY: an mbuf the caller owns.
            unsafe { self.learn(e) };
        }
        Region {
            base: self.base,
            len: self.len,
        }
    }

    /// Takes the pool of the mbuf at `e` as the queue's.
    ///
    /// # Safety
    /// `e` is an mbuf the caller owns.
    #[cold]
    unsafe fn learn(&mut self, e: Elem) {
        // SAFETY: an mbuf the caller owns: its header is readable, and its
        // pool alive while it is out of it.
        let pool = unsafe { Mempool::from_element_pool((*e.as_ptr().cast::<MbufHeader>()).pool) };
        // A pool with no handle left is never learnt: every packet then
        // fails the screen (no region), and every batch takes the checks.
        if let Some(pool) = pool {
            self.inner = pool.inner_ptr().as_ptr();
            self.base = pool.region().base().as_ptr() as usize;
            self.len = pool.region().len();
            self.pool = Some(pool);
        }
    }

    /// Where the learnt pool's region starts (0 with no pool learnt).
    #[inline(always)]
    pub(super) fn region_base(&self) -> usize {
        self.base
    }

    /// Notes that the slots posted before `posted` may hold a packet
    /// that failed the screen.
    #[inline]
    pub(super) fn taint(&mut self, posted: u32) {
        self.taint_end = posted;
        self.tainted = true;
    }

    /// The pool every buffer of the batches from free-running index `first`
    /// on belongs to as a plain buffer — so they may be freed or recycled
    /// the fast way — or `None` if they must take the checks.
    #[inline(always)]
    pub(super) fn pool_from(&mut self, first: u32) -> Option<*const PoolInner> {
        if self.tainted {
            if before(first, self.taint_end) {
                return None;
            }
            // Every slot before the mark is retired: it no longer matters
            // (and must not come to look ahead once the indices wrap).
            self.tainted = false;
        }
        // A slot was posted clean only with a pool learnt.
        (!self.inner.is_null()).then_some(self.inner)
    }

    /// The queue's pool if every buffer of `batch` is a plain buffer of it
    /// now, learning the pool from the first buffer if none is learnt yet;
    /// `None` if one is not (the batch then takes the full free, buffer by
    /// buffer). This is the free path's check without the fast-free
    /// promise: it reads the buffers' first header lines only, the lines
    /// `tx_burst` read, where the full free reads the second line too (next
    /// segment, pool, external buffer) — a line no one has touched since
    /// the buffer last went back to its pool.
    ///
    /// # Safety
    /// `batch` holds mbufs the caller owns, one reference each, that the
    /// device no longer reads.
    #[inline(always)]
    pub(super) unsafe fn plain_pool(&mut self, batch: &[Elem]) -> Option<*const PoolInner> {
        // SAFETY: the first is an mbuf the caller owns.
        let region = unsafe { self.region(batch.first()) };
        let (&first, rest) = batch.split_first()?;
        // SAFETY: an mbuf the caller owns: its header is readable.
        let mut unfit = region.unfit(first, unsafe { &*first.as_ptr().cast::<MbufHeader>() });
        if unfit != 0 {
            // A batch of Rx fragments' headers (or other buffers that are
            // not plain) goes to the full free, which reads these lines
            // itself: not a pass over the rest here first.
            return None;
        }
        for &e in rest {
            // SAFETY: an mbuf the caller owns: its header is readable.
            unfit |= region.unfit(e, unsafe { &*e.as_ptr().cast::<MbufHeader>() });
        }
        // A reference count of 1 read now is ours alone: no clone is left
        // to take another, so the buffer stays plain until it is put.
        (unfit == 0 && !self.inner.is_null()).then_some(self.inner)
    }

    /// Forgets the pool and the mark: the queue holds no buffer (stopped,
    /// its indices reset).
    pub(super) fn reset(&mut self) {
        *self = FastFree::new();
    }
}

/// A pool's memory, `[base, base + len)`, that screened packets must lie
/// in; empty by default (every packet unfit).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Region {
    base: usize,
    len: usize,
}

impl Region {
    /// Non-zero unless the mbuf at `e` (header `h`) is a plain buffer of
    /// this region's pool: reference count 1, one segment, `buf_addr` at
    /// its own data room, its address in the region. Branch-free, to be
    /// OR-ed over a burst as its packets are posted (their first header
    /// lines are being read then anyway).
    #[inline(always)]
    pub(super) fn unfit(self, e: Elem, h: &MbufHeader) -> u64 {
        let addr = e.as_ptr() as usize;
        // Acquire: a clone dropped on another thread released its uses of
        // the buffer with its decrement; reading 1 makes them happen-before
        // the free this allows.
        (h.refcnt.load(Ordering::Acquire) as u64 ^ 1)
            | (h.nb_segs as u64 ^ 1)
            | (h.buf_addr as u64 ^ (addr + HEADER_SIZE) as u64)
            | (addr.wrapping_sub(self.base) >= self.len) as u64
    }
}
