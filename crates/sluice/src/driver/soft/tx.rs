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
//! # Freeing
//! When fewer than `tx_free_thresh` descriptors are free, `tx_burst` first
//! frees completed batches of `tx_rs_thresh`, until `tx_free_thresh` are
//! free or the next batch is not done. With the fast-free offload (all
//! buffers from one pool, reference count 1, one segment) a batch is one
//! bulk put into the first buffer's pool; otherwise each mbuf is freed
//! normally (reference counts, chains), puts batched per pool.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, Mbuf, MbufHeader, free_bulk, ol, put_bulk_to_pool};
use crate::mempool::Elem;
use crate::port::{PortCounters, PortError, TxQueue};

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
}

// SAFETY: the raw addresses in the software ring are mbufs this queue owns;
// the queue moves between threads as a whole and is used by one at a time.
unsafe impl Send for SoftTx {}

/// `a < b` for free-running indices less than 2^31 apart.
#[inline(always)]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
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
        }
    }

    /// Frees the next batch of `tx_rs_thresh` descriptors if the device has
    /// completed it; returns the packets freed, or `None` if not done.
    #[inline]
    fn free_batch(&mut self) -> Option<usize> {
        if !before(self.next_dd, self.tail) {
            return None;
        }
        let d = self.regs.descs.get(self.next_dd);
        if d.q1.load(Ordering::Acquire) & tx::DD == 0 {
            return None;
        }
        let rs = self.p.rs_thresh as usize;
        let first = (self.next_dd.wrapping_sub(rs as u32 - 1) & self.mask) as usize;
        let batch = &mut self.sw_ring[first..first + rs];
        let mut k = 0;
        if self.p.fast_free {
            // Fast free: every slot holds a one-segment mbuf of one pool
            // with reference count 1.
            k = rs;
            // SAFETY: DD on the batch's last descriptor (acquire): the
            // device is done with every buffer of the batch; the offload's
            // contract makes them plain buffers of the first one's pool.
            unsafe {
                let pool = (*batch[0].as_ptr().cast::<MbufHeader>()).pool;
                put_bulk_to_pool(pool, batch);
            }
        } else {
            for i in 0..rs {
                if batch[i] != Elem::DANGLING {
                    batch[k] = batch[i];
                    k += 1;
                }
            }
            // SAFETY: as above, and the first `k` slots hold mbufs we own
            // (each once), now given up.
            unsafe { free_bulk(&mut batch[..k]) };
        }
        batch.fill(Elem::DANGLING);
        self.nb_free += rs as u32;
        self.next_dd = self.next_dd.wrapping_add(rs as u32);
        Some(k)
    }

    /// Frees every mbuf still in the ring (the device is stopped).
    fn release_all(&mut self) {
        for i in 0..self.sw_ring.len() {
            if self.sw_ring[i] != Elem::DANGLING {
                // SAFETY: an mbuf we own, once; the device no longer reads it.
                drop(unsafe { Mbuf::from_raw(self.sw_ring[i].as_non_null().cast::<MbufHeader>()) });
                self.sw_ring[i] = Elem::DANGLING;
            }
        }
        self.tail = 0;
        self.nb_free = self.mask + 1;
        self.next_rs = self.p.rs_thresh - 1;
        self.next_dd = self.p.rs_thresh - 1;
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
                if eop != 0 {
                    self.sw_ring[(self.tail & self.mask) as usize] = e;
                }
                self.tail = self.tail.wrapping_add(1);
                seg = sh.next;
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
        self.regs.descs.clear();
        self.regs.tail.store(0, Ordering::Release);
        self.engines.tx[self.q].with(|e| e.reset());
        Ok(())
    }

    fn stop(&mut self) {
        self.release_all();
        self.regs.descs.clear();
        self.regs.tail.store(0, Ordering::Release);
    }
}

impl Drop for SoftTx {
    fn drop(&mut self) {
        self.release_all();
    }
}
