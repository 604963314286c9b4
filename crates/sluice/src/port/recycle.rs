//! Tx→Rx buffer recycling (DPDK's "mbufs recycle mode").
//!
//! # The three ways a buffer gets back to an Rx ring
//! 1. **Normal:** the Tx queue frees a completed batch into the lcore's
//!    mempool cache (one copy of the batch's addresses), and the Rx queue
//!    refills from that cache (a second copy, plus the cache bookkeeping).
//! 2. **Zero-copy cache put:** the Tx queue writes the addresses straight
//!    into reserved cache slots ([`Mempool::zc_put_bulk`]); the Rx side is
//!    as above.
//! 3. **Recycle (this module):** the Tx queue writes the addresses of a
//!    completed batch straight into the Rx queue's software ring, in the
//!    slots due for refill, and the Rx queue rearms those descriptors. One
//!    copy, and the mempool is not touched at all.
//!
//! # The protocol, one step
//! 1. [`RxQueue::recycle_rx_info`] lends a [`RecycleRxInfo`]: the Rx
//!    queue's software ring, its mask, the refill head and how many slots
//!    are due from it, the refill unit, and the pool its buffers must come
//!    from.
//! 2. [`TxQueue::recycle_tx_mbufs`] checks its next completed batch
//!    against the rules below; if it passes, it copies the batch's
//!    addresses into [`RecycleRxInfo::slots`] and
//!    [`commits`](RecycleRxInfo::commit) them. From the commit on, the Rx
//!    queue owns those buffers (the count lives in the Rx queue, not in the
//!    info), so nothing that happens next can lose them.
//! 3. [`RxQueue::recycle_rx_refill`] rearms the committed descriptors, with
//!    one doorbell. (An Rx queue also rearms them itself on its next
//!    `rx_burst`, `recycle_rx_info` or `stop`.)
//!
//! [`recycle_mbufs`] runs the three steps. Any Tx queue may feed any Rx
//! queue, across ports and drivers, and the pairing may change between
//! steps: nothing is registered.
//!
//! # Why safe code cannot lose a buffer here
//! A Tx queue moves buffers only into a [`RecycleRxInfo`], and only an Rx
//! queue makes one, of its own software ring: building one is `unsafe`
//! ([`RecycleRxInfo::new`]), so safe code cannot point a Tx queue at a ring
//! no Rx queue would give back. The view borrows the queue that lent it:
//! while it lives that queue cannot receive, stop, start or be dropped, so a
//! view is never used across a stop, a restart or a new ring. Each commit
//! counts its buffers in the queue itself at once, so dropping or
//! forgetting the view, a panic between the steps, or the steps called in
//! any order leaves every committed buffer with the queue, which rearms it
//! or gives it back when it stops. Writing slots without a commit gives
//! nothing away (the slots due hold no buffer of the queue), and committing
//! is `unsafe`: only a Tx queue that gave the buffers up does it. Paired
//! with an Rx queue of another pool or another driver, a Tx queue moves
//! nothing the rules below refuse (a buffer of another pool, one still
//! shared): that batch is freed as usual.
//!
//! # The rules a Tx queue keeps
//! - A buffer is recycled only if it is a plain buffer whose last reference
//!   the Tx queue holds (reference count 1, one segment, no attached
//!   external buffer) of the Rx queue's pool. With the fast-free offload the
//!   application has promised that of every buffer, so only the pool is
//!   checked, once for the batches moved together (a queue that knows the
//!   one pool its buffers come from compares it with
//!   [`RecycleRxInfo::pool_starts_at`]); otherwise every buffer is checked. A batch
//!   that fails goes whole to the normal free path (a clone held elsewhere
//!   just loses one reference) and counts one `recycle_fallbacks`.
//! - Buffers go into one contiguous run of slots, never across the ring's
//!   wrap, and in whole refill units: a batch that does not fit waits
//!   ([`RecycleRxInfo::room`] says what fits).
//! - A stopped queue, on either side, refuses ([`PortError::Stopped`]).

use crate::copy::copy_slice;
use crate::mbuf::MbufPool;
use crate::mempool::Elem;

use super::{PortError, RxQueue, TxQueue};

#[cfg(doc)]
use crate::mempool::Mempool;

/// An Rx queue's software-ring slots due for refill, lent to a Tx queue for
/// one recycle step (DPDK's `rte_eth_recycle_rxq_info`).
///
/// Slot `i` (a free-running index) is `ring[i & mask]`. The slots due are
/// `[refill_head, refill_head + due)`; a Tx queue fills a prefix of them
/// that does not cross the wrap.
///
/// Only an Rx queue makes a view, of its own ring
/// ([`RxQueue::recycle_rx_info`], or within [`RxQueue::recycle_from`]), and
/// the view borrows the queue (see [the module](self) for why no buffer can
/// be lost through it). Safe code cannot build one over a ring of its own,
/// which would let a Tx queue's buffers move where no stop finds them:
///
/// ```compile_fail,E0133
/// use sluice::mbuf::{MbufPool, MbufPoolConfig};
/// use sluice::mempool::Elem;
/// use sluice::port::{PortConfig, RecycleRxInfo};
///
/// let pool = MbufPool::new(MbufPoolConfig { size: 1023, ..Default::default() }).unwrap();
/// let mut port = sluice::driver::open("soft", PortConfig::new(Some(pool.clone()))).unwrap();
/// port.start().unwrap();
/// let mut ring = vec![Elem::DANGLING; 128];
/// let mut committed = 0;
/// let mut view = RecycleRxInfo::new(&mut ring, 0, 128, 32, &pool, &mut committed);
/// port.tx_queue(0).unwrap().recycle_tx_mbufs(&mut view).unwrap();
/// ```
///
/// Nor keep a queue's view across that queue's stop (or anything else done
/// to the queue):
///
/// ```compile_fail,E0499
/// use sluice::mbuf::{MbufPool, MbufPoolConfig};
/// use sluice::port::PortConfig;
///
/// let pool = MbufPool::new(MbufPoolConfig { size: 1023, ..Default::default() }).unwrap();
/// let mut port = sluice::driver::open("soft", PortConfig::new(Some(pool.clone()))).unwrap();
/// port.start().unwrap();
/// let (rx, tx) = port.queues_mut().unwrap();
/// let mut view = rx[0].recycle_rx_info().unwrap();
/// rx[0].stop();
/// tx[0].recycle_tx_mbufs(&mut view).unwrap();
/// ```
pub struct RecycleRxInfo<'a> {
    /// The Rx queue's software ring: one buffer address per descriptor.
    /// Entries of due slots are stale until committed.
    ring: &'a mut [Elem],
    /// `ring.len() - 1`; the length is a power of two.
    mask: u32,
    /// The first slot due, free-running. Advances with each commit.
    refill_head: u32,
    /// Slots due from `refill_head`. Shrinks with each commit.
    due: u32,
    /// The Rx queue rearms in units of this many slots and keeps its refill
    /// head a multiple of it (0: any count). A power of two, at most the
    /// ring size.
    refill_requirement: u32,
    /// `max(refill_requirement, 1) - 1`: counts and heads are whole units
    /// when these bits are clear (a mask, so the hot path divides nothing).
    unit_mask: u32,
    /// Where the Rx queue's buffers come from, and must go back to.
    pool: &'a MbufPool,
    /// The pool's region, `[pool_base, pool_base + pool_len)`: a buffer
    /// belongs to the pool if and only if its address lies there (regions
    /// never overlap), which a Tx queue can check without touching it.
    pool_base: usize,
    pool_len: usize,
    /// The Rx queue's own count of committed, not yet rearmed slots: the
    /// commit writes through to it, so ownership moves at once.
    committed: &'a mut u32,
}

impl<'a> RecycleRxInfo<'a> {
    /// The view an Rx queue lends of its own ring (for drivers). Its shape:
    /// `ring.len()` is a power of two, `due` at most that,
    /// `refill_requirement` 0 or a power of two no larger, with
    /// `refill_head` a multiple of it.
    ///
    /// # Safety
    /// The view stands for an Rx queue's promise, which Tx queues rely on
    /// to give their buffers up into it. `ring` is the software ring of the
    /// Rx queue making the view, and that queue:
    /// - owns no buffer in the slots due, `[refill_head, refill_head +
    ///   due)`: it reads their entries as buffers only after it refilled
    ///   them itself or a commit handed them over, so whatever is written
    ///   there without a commit (which safe code may do through
    ///   [`slots`](Self::slots)) is never taken for a buffer;
    /// - takes `*committed` (0 when the view is made) as the count of slots
    ///   from `refill_head` holding buffers it owns, whatever becomes of the
    ///   view: it rearms them, or gives each back to `pool` once when it
    ///   stops or is dropped;
    /// - refills from `pool`, and gives its buffers back there.
    ///
    /// # Panics
    /// If the shape is wrong (a driver bug).
    pub unsafe fn new(
        ring: &'a mut [Elem],
        refill_head: u32,
        due: u32,
        refill_requirement: u32,
        pool: &'a MbufPool,
        committed: &'a mut u32,
    ) -> RecycleRxInfo<'a> {
        check_view(ring.len(), refill_head, due, refill_requirement);
        // SAFETY: the shape just checked; the rest is the caller's promise,
        // forwarded.
        unsafe {
            RecycleRxInfo::new_unchecked(
                ring,
                refill_head,
                due,
                refill_requirement,
                pool,
                committed,
            )
        }
    }

    /// [`new`](Self::new) without its shape checks (kept in debug builds),
    /// for a driver whose queue holds that shape by construction: a recycle
    /// step runs at every poll, and need not prove again what cannot change
    /// (the ring size, the unit) or what the queue's indices guarantee.
    ///
    /// # Safety
    /// As [`new`](Self::new), and the shape it checks holds: Tx queues
    /// fill, and the Rx queue rearms, the slots this view describes.
    #[inline(always)]
    pub unsafe fn new_unchecked(
        ring: &'a mut [Elem],
        refill_head: u32,
        due: u32,
        refill_requirement: u32,
        pool: &'a MbufPool,
        committed: &'a mut u32,
    ) -> RecycleRxInfo<'a> {
        if cfg!(debug_assertions) {
            check_view(ring.len(), refill_head, due, refill_requirement);
        }
        let (pool_base, pool_len) = pool.region_range();
        RecycleRxInfo {
            pool_base,
            pool_len,
            mask: (ring.len() as u32).wrapping_sub(1),
            ring,
            refill_head,
            due,
            refill_requirement,
            unit_mask: refill_requirement.max(1) - 1,
            pool,
            committed,
        }
    }

    /// Descriptors (and slots) in the Rx ring.
    #[inline]
    pub fn ring_size(&self) -> u32 {
        self.mask + 1
    }

    /// The ring mask: slot `i` is at `i & mask`.
    #[inline]
    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// The first slot due for refill (free-running index).
    #[inline]
    pub fn refill_head(&self) -> u32 {
        self.refill_head
    }

    /// Slots due from the refill head.
    #[inline]
    pub fn due(&self) -> u32 {
        self.due
    }

    /// The refill unit (0: any count).
    #[inline]
    pub fn refill_requirement(&self) -> u32 {
        self.refill_requirement
    }

    /// The pool recycled buffers must belong to.
    #[inline]
    pub fn pool(&self) -> &MbufPool {
        self.pool
    }

    /// Whether the pool element at `e` belongs to [`pool`](Self::pool),
    /// from its address alone (the buffer's memory is not read).
    #[inline(always)]
    pub fn in_pool(&self, e: Elem) -> bool {
        (e.as_ptr() as usize).wrapping_sub(self.pool_base) < self.pool_len
    }

    /// Whether [`pool`](Self::pool)'s region starts at `base`: a pool
    /// whose region starts there is that pool (regions never overlap), so
    /// a Tx queue that knows the one pool all its buffers come from tells
    /// with one compare whether they are the Rx queue's.
    #[inline(always)]
    pub fn pool_starts_at(&self, base: usize) -> bool {
        base == self.pool_base && self.pool_len != 0
    }

    /// The most slots a Tx queue may fill now: due, before the wrap, and a
    /// whole number of refill units.
    #[inline]
    pub fn room(&self) -> u32 {
        let to_wrap = self.ring_size() - (self.refill_head & self.mask);
        self.due.min(to_wrap) & !self.unit_mask
    }

    /// Whether `n` slots may be filled now (see [`room`](Self::room)).
    #[inline]
    pub fn fits(&self, n: u32) -> bool {
        n != 0 && n <= self.room() && n & self.unit_mask == 0
    }

    /// The next `n` slots due, to write buffer addresses into, or `None` if
    /// `n` does not [fit](Self::fits). Writing them gives nothing away:
    /// only [`commit`](Self::commit) does.
    #[inline]
    pub fn slots(&mut self, n: u32) -> Option<&mut [Elem]> {
        if !self.fits(n) {
            return None;
        }
        let start = (self.refill_head & self.mask) as usize;
        Some(&mut self.ring[start..start + n as usize])
    }

    /// Copies the buffers of `a`, then those of `b` (a run cut in two by a
    /// Tx ring's wrap; `b` is usually empty), into the next slots due and
    /// [commits](Self::commit) them, with one check: false, and nothing
    /// written, if their count does not [fit](Self::fits). What
    /// [`slots`](Self::slots) and [`commit`](Self::commit) do, in one call.
    ///
    /// # Safety
    /// As [`commit`](Self::commit), for the buffers of `a` and `b`: from
    /// the call on the Rx queue owns them, and the caller keeps no
    /// reference to them.
    #[inline]
    pub unsafe fn fill(&mut self, a: &[Elem], b: &[Elem]) -> bool {
        let n = a.len() + b.len();
        // `room` is at most the ring size (below 2^31): the count fits a
        // u32 when it fits at all.
        if n > self.ring.len() || !self.fits(n as u32) {
            return false;
        }
        let start = (self.refill_head & self.mask) as usize;
        let (da, db) = self.ring[start..start + n].split_at_mut(a.len());
        copy_elems(da, a);
        copy_elems(db, b);
        self.refill_head = self.refill_head.wrapping_add(n as u32);
        self.due -= n as u32;
        *self.committed += n as u32;
        true
    }

    /// Hands the Rx queue the buffers written into the next `n` slots due
    /// (those [`slots`](Self::slots)`(n)` returns); the refill head moves
    /// past them.
    ///
    /// # Safety
    /// Those `n` slots, every one of them, hold distinct buffers of
    /// [`pool`](Self::pool), each a free buffer in all but name: reference
    /// count 1, one segment (no next), no external buffer attached, and no
    /// reference to it left with the caller or anyone else.
    ///
    /// # Panics
    /// If `n` does not [fit](Self::fits).
    #[inline]
    pub unsafe fn commit(&mut self, n: u32) {
        assert!(self.fits(n), "commit of {n} slots: room {}", self.room());
        self.refill_head = self.refill_head.wrapping_add(n);
        self.due -= n;
        *self.committed += n;
    }
}

/// The shape a view must have (see [`RecycleRxInfo::new`]); cheap
/// (no division), as a recycle step runs at every poll.
#[inline(always)]
fn view_ok(size: usize, refill_head: u32, due: u32, refill_requirement: u32) -> bool {
    let unit = refill_requirement.max(1);
    size.is_power_of_two()
        && size <= 1 << 31
        && due as usize <= size
        && unit.is_power_of_two()
        && unit as usize <= size
        && refill_head & (unit - 1) == 0
}

/// Panics, naming the values, unless [`view_ok`].
#[inline(always)]
#[track_caller]
fn check_view(size: usize, refill_head: u32, due: u32, refill_requirement: u32) {
    assert!(
        view_ok(size, refill_head, due, refill_requirement),
        "bad recycle view: ring {size}, due {due}, unit {refill_requirement}, head {refill_head}"
    );
}

/// Copies a run of buffer addresses (equal lengths) in whole cache lines of
/// eight, inline: a batch of 32 is four line copies, no call into `memcpy`
/// and its size dispatch.
#[inline(always)]
fn copy_elems(dst: &mut [Elem], src: &[Elem]) {
    let (dst_lines, dst_rest) = dst.as_chunks_mut::<8>();
    let (src_lines, src_rest) = src.as_chunks::<8>();
    for (d, s) in dst_lines.iter_mut().zip(src_lines) {
        *d = *s;
    }
    copy_slice(dst_rest, src_rest);
}

impl std::fmt::Debug for RecycleRxInfo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecycleRxInfo")
            .field("ring_size", &self.ring_size())
            .field("refill_head", &self.refill_head)
            .field("due", &self.due)
            .field("refill_requirement", &self.refill_requirement)
            .field("pool", &self.pool.mempool().name())
            .field("committed", &*self.committed)
            .finish()
    }
}

/// One recycle step (DPDK's `rte_eth_recycle_mbufs`): moves completed
/// buffers from `tx` straight into `rx`'s ring and rearms them; returns how
/// many moved (0 when `tx` has no completed batch that fits, or the batch
/// fell back to the normal free path).
///
/// Call it before `rx.rx_burst`. Either queue not supporting recycling is
/// [`PortError::Unsupported`]; either queue stopped is
/// [`PortError::Stopped`]. Nothing moves in either case.
pub fn recycle_mbufs(rx: &mut dyn RxQueue, tx: &mut dyn TxQueue) -> Result<usize, PortError> {
    rx.recycle_from(tx)
}
