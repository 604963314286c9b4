//! The soft driver's Tx queue: a descriptor ring the device reads, and a
//! software ring of the mbufs it sends.
//!
//! # Indices (free-running `u32`s)
//! - `tail`: descriptors written so far (the tail register's value);
//! - `next_rs`: the next descriptor to get the report-status bit, every
//!   `tx_rs_thresh` descriptors (`k * tx_rs_thresh - 1`);
//! - `next_dd`: the report-status descriptor whose done bit is checked
//!   next; when it is set, the `tx_rs_thresh` descriptors ending there are
//!   complete and their buffers are freed.
//!
//! A packet's mbuf (the head of its chain) sits in the software-ring slot
//! of its last descriptor (`EOP`); the other slots of a chain stay empty, so
//! a chain is freed whole once its last descriptor completes.
//!
//! Descriptors `[next_dd + 1 - tx_rs_thresh, tail)` are not yet retired:
//! their EOP slots hold the mbufs, the other slots [`Elem::DANGLING`]
//! (written by `tx_burst`), so a stop frees exactly those.
//!
//! # Freeing
//! When fewer than `tx_free_thresh` descriptors are free, `tx_burst` first
//! frees completed batches of `tx_rs_thresh`, until `tx_free_thresh` are
//! free or the next batch is not done. With the fast-free offload (all
//! buffers from one pool, reference count 1, one segment) a batch is one
//! bulk put into the first buffer's pool; otherwise each mbuf is freed
//! normally (reference counts, chains), puts batched per pool. With
//! `tx_free=zc` a batch of plain buffers of one pool is written straight
//! into reserved slots of the lcore's mempool cache instead (zero-copy put).
//!
//! # Recycling
//! `recycle_tx_mbufs` retires completed batches into an Rx queue's software
//! ring instead ([`crate::port::recycle`]): a batch moves whole if it fits
//! the Rx slots due and passes the checks (fast free: the first buffer's
//! pool is the Rx pool; otherwise every buffer is a plain buffer of that
//! pool whose last reference we hold), else it takes the free path above
//! and counts `recycle_fallbacks`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, HEADER_SIZE, Mbuf, MbufHeader, free_bulk, ol, put_bulk_to_pool};
use crate::mempool::{Elem, PoolInner};
use crate::port::{PortCounters, PortError, RecycleRxInfo, TxQueue};

use super::desc::tx;
use super::device::{PortEngines, QueueRegs};

/// How a Tx queue is configured.
#[derive(Debug, Clone, Copy)]
pub struct TxParams {
    /// Report status every this many descriptors.
    pub rs_thresh: u32,
    /// Free completed buffers when fewer descriptors than this are free.
    pub free_thresh: u32,
    /// One bulk put per batch (fast-free offload, single segments).
    pub fast_free: bool,
    /// Accept chained mbufs.
    pub multi_seg: bool,
    /// Offload flags honoured (`ol::TX_*` bits the port enabled).
    pub ol_mask: u64,
    /// Free batches with a zero-copy cache put (`tx_free=zc`).
    pub zc_free: bool,
}

/// A Tx queue of a soft port.
pub struct SoftTx {
    regs: Arc<QueueRegs>,
    sw_ring: Box<[Elem]>,
    mask: u32,
    tail: u32,
    nb_free: u32,
    next_rs: u32,
    next_dd: u32,
    p: TxParams,
    engines: Arc<PortEngines>,
    inline: bool,
    q: usize,
    counters: Arc<PortCounters>,
    doorbells: Arc<Counter>,
    /// Buffers moved into an Rx ring.
    tx_recycled: Arc<Counter>,
    /// Batches that could not be recycled and were freed.
    recycle_fallbacks: Arc<Counter>,
    /// `start` has run and `stop` has not since.
    started: bool,
}

// SAFETY: the raw addresses in the software ring are mbufs this queue owns;
// the queue moves between threads as a whole and is used by one at a time.
unsafe impl Send for SoftTx {}

/// `a < b` for free-running indices less than 2^31 apart.
#[inline(always)]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The header of the mbuf in a software-ring slot.
///
/// # Safety
/// The slot holds an mbuf this queue owns (not [`Elem::DANGLING`]).
#[inline(always)]
unsafe fn header<'a>(e: Elem) -> &'a MbufHeader {
    // SAFETY: the caller's contract: a live mbuf we hold a reference to.
    unsafe { &*e.as_ptr().cast::<MbufHeader>() }
}

/// Whether the mbuf in `e` is a plain buffer of `pool` whose last
/// reference we hold: what may go back to that pool as it is.
///
/// # Safety
/// As [`header`]; the device is done with the buffer.
#[inline(always)]
unsafe fn plain_of(e: Elem, pool: *const PoolInner) -> bool {
    // SAFETY: forwarded (`DANGLING` is not looked at).
    e != Elem::DANGLING && unsafe { header(e).pool == pool && plain_line0(e) }
}

impl SoftTx {
    /// Queue `q` over `regs`.
    pub fn new(
        regs: Arc<QueueRegs>,
        p: TxParams,
        engines: Arc<PortEngines>,
        inline: bool,
        q: usize,
        counters: Arc<PortCounters>,
    ) -> SoftTx {
        let nb = regs.descs.len();
        let doorbells = counters.xstats.register("bus_doorbells");
        let tx_recycled = counters.xstats.register("tx_recycled");
        let recycle_fallbacks = counters.xstats.register("recycle_fallbacks");
        SoftTx {
            mask: nb as u32 - 1,
            sw_ring: vec![Elem::DANGLING; nb].into_boxed_slice(),
            regs,
            tail: 0,
            nb_free: nb as u32,
            next_rs: p.rs_thresh - 1,
            next_dd: p.rs_thresh - 1,
            p,
            engines,
            inline,
            q,
            counters,
            doorbells,
            tx_recycled,
            recycle_fallbacks,
            started: false,
        }
    }

    /// The first software-ring slot of the next batch of `tx_rs_thresh`
    /// descriptors, if the device has completed it.
    #[inline(always)]
    fn done_batch(&self) -> Option<usize> {
        if !before(self.next_dd, self.tail) {
            return None;
        }
        let d = self.regs.descs.get(self.next_dd);
        // Acquire: pairs with the device's Release write-back of DD; the
        // device is done with every buffer of the batch.
        if d.q1.load(Ordering::Acquire) & tx::DD == 0 {
            return None;
        }
        let first = self.next_dd.wrapping_sub(self.p.rs_thresh - 1) & self.mask;
        Some(first as usize)
    }

    /// Moves past the batch `done_batch` found: its descriptors are free.
    #[inline(always)]
    fn retire(&mut self) {
        self.nb_free += self.p.rs_thresh;
        self.next_dd = self.next_dd.wrapping_add(self.p.rs_thresh);
    }

    /// Frees the buffers of the completed batch at `first`; returns the
    /// packets freed.
    #[inline]
    fn free_slots(&mut self, first: usize) -> usize {
        let rs = self.p.rs_thresh as usize;
        let batch = &mut self.sw_ring[first..first + rs];
        if self.p.fast_free {
            // Fast free: the offload's contract makes every slot a plain
            // buffer (one segment, reference count 1) of one pool.
            // SAFETY: the batch is complete (`done_batch`): buffers we own,
            // the device done with them, plain, of the first one's pool.
            unsafe {
                let pool = header(batch[0]).pool;
                if !(self.p.zc_free && zc_put(pool, batch)) {
                    put_bulk_to_pool(pool, batch);
                }
            }
            return rs;
        }
        if self.p.zc_free {
            // SAFETY: as above; `plain_of` checks what fast free assumes.
            unsafe {
                let pool = header(batch[0]).pool;
                if batch.iter().all(|&e| plain_of(e, pool)) && zc_put(pool, batch) {
                    return rs;
                }
            }
        }
        let mut k = 0;
        for i in 0..rs {
            if batch[i] != Elem::DANGLING {
                batch[k] = batch[i];
                k += 1;
            }
        }
        // SAFETY: the batch is complete; the first `k` slots hold mbufs we
        // own (each once), now given up.
        unsafe { free_bulk(&mut batch[..k]) };
        k
    }

    /// Frees the next batch if the device has completed it; returns the
    /// packets freed, or `None` if not done.
    #[inline]
    fn free_batch(&mut self) -> Option<usize> {
        let first = self.done_batch()?;
        let k = self.free_slots(first);
        self.retire();
        Some(k)
    }

    /// Frees every mbuf of the descriptors not yet retired (the device is
    /// stopped or locked out).
    fn release_all(&mut self) {
        let mut i = self.next_dd.wrapping_sub(self.p.rs_thresh - 1);
        while before(i, self.tail) {
            let e = self.sw_ring[(i & self.mask) as usize];
            if e != Elem::DANGLING {
                // SAFETY: an mbuf we own, once; the device no longer reads it.
                drop(unsafe { Mbuf::from_raw(e.as_non_null().cast::<MbufHeader>()) });
            }
            i = i.wrapping_add(1);
        }
        self.sw_ring.fill(Elem::DANGLING);
        self.tail = 0;
        self.nb_free = self.mask + 1;
        self.next_rs = self.p.rs_thresh - 1;
        self.next_dd = self.p.rs_thresh - 1;
    }

    /// Writes the descriptors of a chain of `segs` segments whose head is
    /// `e` (at `hp`): the head goes in the EOP slot, the other slots are
    /// marked empty, so a stop frees only what is there.
    #[inline(never)]
    fn write_chain(&mut self, hp: *const MbufHeader, segs: u32, cmd: u64, vlan: u16, e: Elem) {
        let mut seg = hp;
        for s in 0..segs {
            // SAFETY: segment `s` of a chain the burst owns.
            let sh = unsafe { &*seg };
            let eop = if s + 1 == segs { tx::CMD_EOP } else { 0 };
            // SAFETY: `data_off` is inside the buffer.
            let addr = unsafe { sh.buf_addr.add(sh.data_off as usize) } as u64;
            let d = self.regs.descs.get(self.tail);
            d.q0.store(addr, Ordering::Relaxed);
            d.q1.store(tx::q1(sh.data_len, cmd | eop, vlan), Ordering::Relaxed);
            self.sw_ring[(self.tail & self.mask) as usize] =
                if eop != 0 { e } else { Elem::DANGLING };
            self.tail = self.tail.wrapping_add(1);
            seg = sh.next;
        }
    }

    /// The command bits for a packet's offload flags.
    #[inline(always)]
    fn cmd(&self, flags: u64) -> u64 {
        let f = flags & self.p.ol_mask;
        if f == 0 {
            return 0;
        }
        let mut c = 0;
        if f & ol::TX_IP_CKSUM != 0 {
            c |= tx::CMD_IP_CKSUM;
        }
        match f & ol::TX_UDP_CKSUM {
            x if x == ol::TX_UDP_CKSUM => c |= tx::CMD_UDP_CKSUM,
            x if x == ol::TX_TCP_CKSUM => c |= tx::CMD_TCP_CKSUM,
            _ => {}
        }
        if f & ol::TX_VLAN != 0 {
            c |= tx::CMD_VLAN;
        }
        c
    }
}

impl TxQueue for SoftTx {
    #[inline]
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        if !self.started {
            return 0;
        }
        if self.nb_free < self.p.free_thresh {
            while self.nb_free < self.p.free_thresh && self.free_batch().is_some() {}
        }
        let mut taken = 0;
        let mut sent = 0;
        let mut bytes = 0u64;
        for &e in burst.raw() {
            let hp = e.as_ptr().cast::<MbufHeader>();
            // SAFETY: the burst owns this mbuf; we only read its header.
            let h = unsafe { &*hp };
            let segs = h.nb_segs as u32;
            if segs > 1 && !self.p.multi_seg {
                self.counters.tx[self.q].errors.inc();
                // SAFETY: an owned mbuf, taken out of the burst below
                // (`forget_front(taken)`), dropped once here.
                drop(unsafe { Mbuf::from_raw(e.as_non_null().cast()) });
                taken += 1;
                continue;
            }
            if segs > self.nb_free {
                break;
            }
            let cmd = self.cmd(h.ol_flags);
            let vlan = if cmd & tx::CMD_VLAN != 0 {
                h.vlan_tci
            } else {
                0
            };
            if segs == 1 {
                // One segment: the second header line (`next`) stays cold.
                // SAFETY: `data_off` is inside the buffer.
                let addr = unsafe { h.buf_addr.add(h.data_off as usize) } as u64;
                let d = self.regs.descs.get(self.tail);
                d.q0.store(addr, Ordering::Relaxed);
                d.q1.store(
                    tx::q1(h.data_len, cmd | tx::CMD_EOP, vlan),
                    Ordering::Relaxed,
                );
                self.sw_ring[(self.tail & self.mask) as usize] = e;
                self.tail = self.tail.wrapping_add(1);
            } else {
                self.write_chain(hp, segs, cmd, vlan, e);
            }
            self.nb_free -= segs;
            bytes += h.pkt_len as u64;
            sent += 1;
            taken += 1;
        }
        if sent != 0 {
            // Report status on every tx_rs_thresh-th descriptor written.
            while before(self.next_rs, self.tail) {
                let d = self.regs.descs.get(self.next_rs);
                let q1 = d.q1.load(Ordering::Relaxed);
                d.q1.store(q1 | tx::CMD_RS, Ordering::Relaxed);
                self.next_rs = self.next_rs.wrapping_add(self.p.rs_thresh);
            }
            // The doorbell: the descriptors above are visible to a device
            // that loads it (acquire).
            self.regs.tail.store(self.tail, Ordering::Release);
            self.doorbells.inc();
        }
        // SAFETY: the first `taken` mbufs are now in the software ring (or
        // were dropped above).
        unsafe { burst.forget_front(taken) };
        self.counters.tx[self.q].record_burst(sent, bytes);
        if self.inline {
            self.engines.tx[self.q].try_with(|e| e.step());
        }
        taken
    }

    fn tx_done_cleanup(&mut self, max: usize) -> usize {
        let mut freed = 0;
        while freed < max {
            match self.free_batch() {
                Some(k) => freed += k,
                None => break,
            }
        }
        freed
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.started {
            return Ok(());
        }
        let engines = Arc::clone(&self.engines);
        engines.tx[self.q].with(|e| {
            self.regs.reset();
            e.reset();
        });
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        if !self.started {
            return;
        }
        self.started = false;
        // Under the engine lock: a running device is not reading a buffer
        // of this queue, and with the tail register and its head at 0 it
        // reads nothing more.
        let engines = Arc::clone(&self.engines);
        engines.tx[self.q].with(|e| {
            self.regs.reset();
            e.reset();
            self.release_all();
        });
    }

    fn recycle_tx_capable(&self) -> bool {
        true
    }

    #[inline]
    fn recycle_tx_mbufs(&mut self, rx: &mut RecycleRxInfo<'_>) -> Result<usize, PortError> {
        if !self.started {
            return Err(PortError::Stopped);
        }
        let rs = self.p.rs_thresh;
        // The refill unit is a power of two (or 0: any count).
        let unit = rx.refill_requirement().max(1);
        if rs & (unit - 1) != 0 {
            // Our batches cannot be cut into the Rx queue's refill units.
            return Ok(0);
        }
        let mut moved = 0;
        // Room first: once the Rx slots due are filled, the next batch's
        // descriptor (likely a cache miss) is not even looked at.
        while rx.fits(rs) {
            let Some(first) = self.done_batch() else {
                break;
            };
            let batch = &self.sw_ring[first..first + rs as usize];
            // The checks read no more than the first header line, which
            // `tx_burst` touched: the Rx pool is known, so its region tells
            // by address what the free path reads from the second line.
            let ok = if self.p.fast_free {
                // The offload's contract: every buffer of the queue is a
                // plain buffer of one pool.
                rx.in_pool(batch[0])
            } else {
                let plain = |e: Elem| {
                    // SAFETY: the batch is complete (`done_batch`): its
                    // slots hold mbufs we own that the device no longer
                    // reads (`DANGLING` ones are not looked at).
                    e != Elem::DANGLING && rx.in_pool(e) && unsafe { plain_line0(e) }
                };
                batch.iter().all(|&e| plain(e))
            };
            let Some(dst) = rx.slots(rs) else {
                break;
            };
            if ok {
                dst.copy_from_slice(batch);
                // Retiring the batch without freeing it gives up our references.
                // SAFETY: `dst` holds the batch's buffers: distinct, of the Rx
                // pool, plain (checked above, or promised by fast free).
                unsafe { rx.commit(rs) };
                moved += rs as usize;
            } else {
                self.free_slots(first);
                self.recycle_fallbacks.inc();
            }
            self.retire();
        }
        if moved != 0 {
            self.tx_recycled.add(moved as u64);
        }
        Ok(moved)
    }
}

/// Whether the mbuf in `e` is plain — reference count 1 (ours), one
/// segment (so no next), its own buffer (no external one attached) — read
/// from the first header line only: a head with one segment has no next,
/// and an attached external buffer moves `buf_addr` off the element.
///
/// # Safety
/// As [`header`].
#[inline(always)]
unsafe fn plain_line0(e: Elem) -> bool {
    // SAFETY: forwarded.
    let h = unsafe { header(e) };
    // Acquire: as in `plain_of`.
    h.nb_segs == 1
        && h.buf_addr.cast_const() == e.as_ptr().wrapping_add(HEADER_SIZE).cast_const()
        && h.refcnt.load(Ordering::Acquire) == 1
}

/// Puts a batch of plain buffers of `pool` into the calling lcore's cache
/// through reserved slots (one copy, no staging); false if the caller has
/// no cache or the batch exceeds its threshold (nothing was put).
///
/// # Safety
/// As [`put_bulk_to_pool`].
#[inline(always)]
unsafe fn zc_put(pool: *const PoolInner, batch: &[Elem]) -> bool {
    // SAFETY: the pool outlives its buffers; nothing else touches the pool
    // on this thread until the guard is committed.
    let Some(mut z) = (unsafe { (*pool).zc_put_bulk(batch.len()) }) else {
        return false;
    };
    z.slots().copy_from_slice(batch);
    // SAFETY: the slots hold the batch: plain buffers of the pool, given
    // up (caller's contract), each once.
    unsafe { z.commit() };
    true
}

impl Drop for SoftTx {
    fn drop(&mut self) {
        // Port::stop has normally run; if not, the buffers still go back.
        self.release_all();
    }
}
