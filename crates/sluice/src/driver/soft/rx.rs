//! The soft driver's Rx queue: a descriptor ring the device writes back
//! into, and beside it a software ring of the mbufs armed on it.
//!
//! # Indices
//! All indices are free-running `u32`s (the ring index is `i & mask`):
//! - `next`: the next descriptor to read;
//! - `tail`: descriptors handed to the device so far (the value last
//!   written to the tail register).
//!
//! Descriptors `[next, tail)` hold buffers the queue owns (armed, written
//! back or not); `[tail - nb, next)` were delivered and are due for refill.
//!
//! # Refill
//! Refill is in batches of `rx_free_thresh` (a divisor of the ring size, so
//! a batch never wraps): fill software-ring slots `[tail, tail + n)` with
//! buffers from the sources — first buffers of dropped frames kept for
//! reuse, then the mempool (one bulk get) — then write each buffer's rearm
//! word and its descriptor's read format, then one tail store (the
//! doorbell). The buffer source is separate from the rearm, so a recycle
//! path (a Tx queue dropping completed buffers straight into the slots due)
//! can replace the mempool. An empty pool counts `rx_nombuf` and leaves the
//! batch for the next call: no descriptor is lost and nothing waits.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, MbufHeader, MbufPool, RearmData, ol};
use crate::mempool::Elem;
use crate::port::{PortCounters, PortError, RxQueue};

use super::desc::rx;
use super::device::{PortEngines, QueueRegs};

/// An Rx queue of a soft port.
pub struct SoftRx {
    regs: Arc<QueueRegs>,
    sw_ring: Box<[Elem]>,
    mask: u32,
    next: u32,
    tail: u32,
    free_thresh: u32,
    pool: MbufPool,
    rearm: RearmData,
    /// Buffers of dropped frames, reused before the pool's (never more than
    /// the ring holds, so pushing never allocates).
    reuse: Vec<Elem>,
    /// Deliver the RSS hash.
    rss_hash: bool,
    engines: Arc<PortEngines>,
    inline: bool,
    q: usize,
    counters: Arc<PortCounters>,
    doorbells: Arc<Counter>,
}

// SAFETY: the raw buffer addresses in the rings are buffers this queue owns;
// the queue moves between threads as a whole and is used by one at a time.
unsafe impl Send for SoftRx {}

impl SoftRx {
    /// Queue `q` over `regs`, receiving into `pool`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        regs: Arc<QueueRegs>,
        pool: MbufPool,
        port_id: u16,
        free_thresh: u32,
        rss_hash: bool,
        engines: Arc<PortEngines>,
        inline: bool,
        q: usize,
        counters: Arc<PortCounters>,
    ) -> SoftRx {
        let nb = regs.descs.len();
        let doorbells = counters.xstats.register("bus_doorbells");
        SoftRx {
            mask: nb as u32 - 1,
            sw_ring: vec![Elem::DANGLING; nb].into_boxed_slice(),
            regs,
            next: 0,
            tail: 0,
            free_thresh,
            rearm: pool.rearm_data(port_id),
            pool,
            reuse: Vec::with_capacity(nb),
            rss_hash,
            engines,
            inline,
            q,
            counters,
            doorbells,
        }
    }

    fn nb(&self) -> u32 {
        self.mask + 1
    }

    /// Descriptors delivered and not yet rearmed.
    #[inline(always)]
    fn due(&self) -> u32 {
        self.next.wrapping_add(self.nb()).wrapping_sub(self.tail)
    }

    /// Fills `slots` with free buffers: reused ones first, then one bulk
    /// get from the pool. All or nothing.
    #[inline]
    fn take_buffers(pool: &MbufPool, reuse: &mut Vec<Elem>, slots: &mut [Elem]) -> bool {
        let k = reuse.len().min(slots.len());
        if pool.mempool().get_bulk(&mut slots[k..]).is_err() {
            return false;
        }
        slots[..k].copy_from_slice(&reuse[reuse.len() - k..]);
        reuse.truncate(reuse.len() - k);
        true
    }

    /// Rearms every whole batch due: buffers into the software ring, rearm
    /// words and descriptors, one doorbell per batch.
    #[inline]
    fn refill(&mut self) {
        let n = self.free_thresh;
        while self.due() >= n {
            let start = (self.tail & self.mask) as usize;
            let slots = &mut self.sw_ring[start..start + n as usize];
            if !Self::take_buffers(&self.pool, &mut self.reuse, slots) {
                self.counters.rx[self.q].nombuf.inc();
                return;
            }
            for (k, e) in slots.iter().enumerate() {
                let h = e.as_ptr().cast::<MbufHeader>();
                // SAFETY: a free buffer of our pool, now ours alone: its
                // header is initialised and no one else reaches it.
                let h = unsafe { &mut *h };
                h.rearm(self.rearm);
                // SAFETY: `data_off` (the headroom) is inside the buffer.
                let addr = unsafe { h.buf_addr.add(self.rearm.data_off as usize) } as u64;
                let d = self.regs.descs.get(self.tail.wrapping_add(k as u32));
                d.q0.store(addr, Ordering::Relaxed);
                d.q1.store(0, Ordering::Relaxed);
            }
            self.tail = self.tail.wrapping_add(n);
            // The doorbell: the descriptors and rearmed headers above are
            // visible to a device that loads this (acquire).
            self.regs.tail.store(self.tail, Ordering::Release);
            self.doorbells.inc();
        }
    }

    /// Gives back every buffer the queue holds.
    fn release_all(&mut self) {
        let mut i = self.next;
        while i != self.tail {
            let e = self.sw_ring[(i & self.mask) as usize];
            // SAFETY: descriptors `[next, tail)` hold buffers we own (armed,
            // and the device is stopped), each once.
            unsafe { self.pool.mempool().put_bulk(&[e]) };
            i = i.wrapping_add(1);
        }
        // SAFETY: reused buffers are ours, each once.
        unsafe { self.pool.mempool().put_bulk(&self.reuse) };
        self.reuse.clear();
        self.sw_ring.fill(Elem::DANGLING);
        self.next = 0;
        self.tail = 0;
    }
}

impl RxQueue for SoftRx {
    #[inline]
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        if self.inline {
            self.engines.rx[self.q].try_with(|e| e.step());
        }
        let max = burst.free();
        let base = burst.len();
        let slots = burst.spare_slots(max);
        let mut n = 0;
        let mut bytes = 0u64;
        let mask = self.mask;
        // Only descriptors handed to the device can be done: past `tail`
        // lie delivered ones, their DD still set until they are rearmed.
        let end = self.tail;
        while n < max && self.next != end {
            let d = self.regs.descs.get(self.next);
            let q1 = d.q1.load(Ordering::Acquire);
            if q1 & rx::DD == 0 {
                break;
            }
            let q0 = d.q0.load(Ordering::Relaxed);
            let e = self.sw_ring[(self.next & mask) as usize];
            self.next = self.next.wrapping_add(1);
            if q1 & rx::ERR_DROP != 0 {
                self.counters.rx[self.q].errors.inc();
                // `reuse` holds at most the ring's buffers: no allocation.
                self.reuse.push(e);
                continue;
            }
            let len = (q1 >> rx::LEN_SHIFT) as u16;
            let vlan = (q1 >> rx::VLAN_SHIFT) as u16;
            let mut flags = 0;
            if q1 & rx::IPCS != 0 {
                flags |= if q1 & rx::ERR_IP != 0 {
                    ol::RX_IP_CKSUM_BAD
                } else {
                    ol::RX_IP_CKSUM_GOOD
                };
            }
            if q1 & rx::L4CS != 0 {
                flags |= if q1 & rx::ERR_L4 != 0 {
                    ol::RX_L4_CKSUM_BAD
                } else {
                    ol::RX_L4_CKSUM_GOOD
                };
            }
            if q1 & rx::VP != 0 {
                flags |= ol::RX_VLAN;
            }
            let mut hash = 0;
            if self.rss_hash && (q0 >> rx::RSS_TYPE_SHIFT) & rx::RSS_TYPE_MASK != 0 {
                flags |= ol::RX_RSS_HASH;
                hash = (q0 >> rx::HASH_SHIFT) as u32;
            }
            let ptype = ((q0 >> rx::PTYPE_SHIFT) & rx::PTYPE_MASK) as u32;
            // SAFETY: DD is set (acquire): the device is done with this
            // buffer, which we own (armed by us) and hand to the burst.
            let h = unsafe { &mut *e.as_ptr().cast::<MbufHeader>() };
            h.set_rx(flags, ptype, len, vlan, hash);
            slots[n] = e;
            n += 1;
            bytes += len as u64;
        }
        // SAFETY: slots `[base, base + n)` now hold received mbufs we gave
        // up (their ring entries are due for refill).
        unsafe { burst.set_len(base + n) };
        self.counters.rx[self.q].record_burst(n, bytes);
        if self.due() >= self.free_thresh {
            self.refill();
        }
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        self.regs.descs.clear();
        self.regs.tail.store(0, Ordering::Release);
        self.engines.rx[self.q].with(|e| e.reset());
        self.next = 0;
        self.tail = 0;
        // Every descriptor is due: fill the ring, batch by batch.
        self.refill();
        Ok(())
    }

    fn stop(&mut self) {
        self.release_all();
        self.regs.descs.clear();
        self.regs.tail.store(0, Ordering::Release);
    }
}

impl Drop for SoftRx {
    fn drop(&mut self) {
        // Port::stop has normally run; if not, the buffers still go back.
        if self.next != self.tail || !self.reuse.is_empty() {
            self.release_all();
        }
    }
}
