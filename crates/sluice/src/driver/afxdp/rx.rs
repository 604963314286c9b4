//! The afxdp Rx queue: the fill ring fed with free frames, the Rx ring's
//! frames handed out as mbufs without a copy.
//!
//! # Refill
//! A software ring `sw` as large as the fill ring stands beside it: slot
//! `i` holds the frame written to fill entry `i`. Refill runs at the start
//! of `rx_burst`, in units of [`REFILL_UNIT`] (the fill producer index stays
//! a multiple of it, so a unit never wraps): frames go into
//! `sw[prod, prod + unit)` — from a Tx queue's recycle step, or one bulk get
//! from the pool — then their UMEM offsets onto the fill ring, each marked
//! in the ledger, and one Release store of the producer index. The kernel
//! holds at most `fill_size` of our frames (`due = fill_size − held`), and
//! the fill ring's occupancy never exceeds what the kernel holds, so the
//! fill ring never overflows and its consumer index is never read. An
//! empty pool counts `rx_nombuf` and the unit waits for the next call.
//! When the kernel flags the fill ring (zero-copy drivers that ran dry),
//! a `recvfrom` wakes it.
//!
//! # Receive
//! Up to a burst of Rx descriptors: the chunk offset (low 48 bits) must be
//! an element whose ledger mark is set — else the address is counted in
//! `rx_bad_addrs` and left alone — and the data offset (high 16 bits) and
//! length must lie inside the element. The mbuf header gets its rearm word
//! (data offset = the kernel's offset − the header, reference count 1, one
//! segment, the port) and its lengths; the second header line is not
//! touched (the free-buffer invariants hold for it). One Release store of
//! the Rx consumer index gives the descriptors back.
//!
//! # Recycling
//! [`RxQueue::recycle_rx_info`] lends `sw` from the fill producer index
//! with `due` slots and a refill unit of [`REFILL_UNIT`]; a Tx queue writes
//! completed frames into it and commits; the committed slots go onto the
//! fill ring at the next refill (`rx_recycled`) without touching the pool.

use std::sync::Arc;

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, HEADER_SIZE, MbufHeader, MbufPool, RearmData};
use crate::mempool::Elem;
use crate::port::{PortCounters, PortError, RecycleRxInfo, RxFrameCheck, RxQueue, TxQueue};

use super::slot::QueueSlot;
use super::umem::Umem;
use super::xsk::{RxRings, kick_rx};

/// Frames per fill-ring refill (and per recycle unit).
pub(crate) const REFILL_UNIT: u32 = 32;

/// An Rx queue of an afxdp port.
pub struct AfxdpRx {
    slot: Arc<QueueSlot>,
    /// The fill and Rx rings, while started.
    rings: Option<RxRings>,
    umem: Umem,
    /// The UMEM's pool: refills come from it.
    pool: MbufPool,
    /// `sw[i & mask]`: the frame written to fill entry `i`; from the fill
    /// producer index on, `committed` slots hold recycled frames this
    /// queue owns, not yet on the fill ring.
    sw: Box<[Elem]>,
    mask: u32,
    committed: u32,
    /// The rearm word, with a data offset set per packet.
    rearm: RearmData,
    /// Kick the kernel when the fill ring is flagged.
    need_wakeup: bool,
    q: usize,
    counters: Arc<PortCounters>,
    rx_recycled: Arc<Counter>,
    rx_bad_addrs: Arc<Counter>,
    /// Descriptors whose data does not lie within its chunk after the
    /// mbuf header (`rx_bad_desc_errors`, a share of `rx_errors`).
    rx_bad_desc: Arc<Counter>,
    rx_wakeups: Arc<Counter>,
    /// Runts and frames over the MTU are counted and given back.
    check: RxFrameCheck,
}

impl AfxdpRx {
    /// Rx queue `q` over `slot`'s socket.
    pub(crate) fn new(
        slot: Arc<QueueSlot>,
        pool: MbufPool,
        port_id: u16,
        mtu: u16,
        q: usize,
        counters: Arc<PortCounters>,
    ) -> AfxdpRx {
        let fill = slot.cfg.fill_size;
        let umem = slot.cfg.umem;
        let need_wakeup = slot.cfg.need_wakeup;
        AfxdpRx {
            rx_recycled: counters.xstats.register("rx_recycled"),
            rx_bad_addrs: counters.xstats.register("rx_bad_addrs"),
            rx_bad_desc: counters.xstats.register("rx_bad_desc_errors"),
            rx_wakeups: counters.xstats.register("rx_wakeups"),
            check: RxFrameCheck::new(&counters.xstats, mtu),
            slot,
            rings: None,
            umem,
            rearm: pool.rearm_data(port_id),
            pool,
            sw: vec![Elem::DANGLING; fill as usize].into_boxed_slice(),
            mask: fill - 1,
            committed: 0,
            need_wakeup,
            q,
            counters,
        }
    }

    /// Frames the kernel may still be given: the fill size less what it
    /// holds.
    #[inline(always)]
    fn due(rings: &RxRings) -> u32 {
        rings.fill.size() - rings.ledger.held()
    }

    /// Puts `sw[prod, prod + n)` on the fill ring: offsets written, frames
    /// marked, one producer store; wakes the kernel if it asks.
    #[inline]
    fn publish(&mut self, n: u32) {
        let Some(r) = self.rings.as_mut() else {
            return;
        };
        debug_assert!(n <= Self::due(r));
        debug_assert_eq!(
            r.fill.free(n),
            n,
            "the fill ring holds at most what the kernel holds"
        );
        let prod = r.fill.prod();
        for k in 0..n {
            let e = self.sw[(prod.wrapping_add(k) & self.mask) as usize];
            let marked = r.ledger.mark(self.umem.index_of(e));
            debug_assert!(marked, "a frame given to the kernel twice");
            // SAFETY: `k < n <= due`, and the fill ring's occupancy is at
            // most what the kernel holds (module docs), so slot `prod + k`
            // is free.
            unsafe { r.fill.write(k, self.umem.offset_of(e)) };
        }
        r.fill.submit(n);
        if self.need_wakeup && r.fill.needs_wakeup() {
            kick_rx(r.fd);
            self.rx_wakeups.inc();
        }
    }

    /// Puts the slots a Tx queue recycled into on the fill ring; how many.
    #[inline]
    fn publish_committed(&mut self) -> usize {
        let n = self.committed;
        if n == 0 {
            return 0;
        }
        self.publish(n);
        self.committed = 0;
        self.rx_recycled.add(n as u64);
        n as usize
    }

    /// Refills: recycled slots first, then whole units from the pool.
    #[inline]
    fn refill(&mut self) {
        self.publish_committed();
        loop {
            let Some(r) = self.rings.as_ref() else {
                return;
            };
            if Self::due(r) < REFILL_UNIT {
                return;
            }
            let start = (r.fill.prod() & self.mask) as usize;
            let slots = &mut self.sw[start..start + REFILL_UNIT as usize];
            if self.pool.mempool().get_bulk(slots).is_err() {
                self.counters.rx[self.q].nombuf.inc();
                return;
            }
            self.publish(REFILL_UNIT);
        }
    }

    /// Gives a frame that will not be delivered back to the pool.
    #[inline]
    fn put_back(&self, e: Elem) {
        // SAFETY: a frame this queue owns (its ledger mark was just taken,
        // or it was committed to it), plain and free, given back once.
        unsafe { self.pool.mempool().put_bulk(&[e]) };
    }
}

impl RxQueue for AfxdpRx {
    #[inline]
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let Some(r) = self.rings.as_ref() else {
            return 0;
        };
        if self.committed != 0 || Self::due(r) >= REFILL_UNIT {
            self.refill();
        }
        let Some(r) = self.rings.as_mut() else {
            return 0;
        };
        let max = burst.free() as u32;
        let n = r.rx.ready(max);
        if n == 0 {
            return 0;
        }
        let base = burst.len();
        let slots = burst.spare_slots(max as usize);
        let stride = self.umem.chunk_size();
        let mut got = 0usize;
        let mut bytes = 0u64;
        for k in 0..n {
            // SAFETY: `k < n`, entries the kernel published (Acquire in
            // `ready`).
            let d = unsafe { r.rx.read(k) };
            let (off, data) = Umem::decode(d.addr);
            let Some(idx) = self.umem.index(off) else {
                self.rx_bad_addrs.inc();
                continue;
            };
            if !r.ledger.take(idx) {
                self.rx_bad_addrs.inc();
                continue;
            }
            let e = self.umem.elem_at(off);
            if data < HEADER_SIZE as u32 || data as u64 + d.len as u64 > stride as u64 {
                self.counters.rx[self.q].errors.inc();
                self.rx_bad_desc.inc();
                // SAFETY: the frame is ours again (mark taken), unused.
                unsafe { self.pool.mempool().put_bulk(&[e]) };
                continue;
            }
            if !self.check.accepts(d.len as usize) {
                self.check
                    .count_drop(d.len as usize, &self.counters.rx[self.q].errors);
                // SAFETY: the frame is ours again (mark taken), unused.
                unsafe { self.pool.mempool().put_bulk(&[e]) };
                continue;
            }
            // SAFETY: the kernel is done with the frame (published on the Rx
            // ring, Acquire) and its mark was ours: we own the buffer
            // exclusively; its header is a free buffer's.
            let h = unsafe { &mut *e.as_ptr().cast::<MbufHeader>() };
            h.rearm(RearmData {
                data_off: (data - HEADER_SIZE as u32) as u16,
                ..self.rearm
            });
            h.set_rx(0, 0, d.len as u16, 0, 0);
            slots[got] = e;
            got += 1;
            bytes += d.len as u64;
        }
        r.rx.release(n);
        // SAFETY: slots `[base, base + got)` hold received mbufs we gave up.
        unsafe { burst.set_len(base + got) };
        self.counters.rx[self.q].record_burst(got, bytes);
        got
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.rings.is_some() {
            return Ok(());
        }
        self.rings = Some(self.slot.take_rx()?);
        self.committed = 0;
        self.refill();
        Ok(())
    }

    fn stop(&mut self) {
        let Some(mut r) = self.rings.take() else {
            return;
        };
        // Frames received and not delivered go back to the pool; the rest
        // of what the kernel holds comes back when the socket closes.
        loop {
            let n = r.rx.ready(r.rx.size());
            if n == 0 {
                break;
            }
            for k in 0..n {
                // SAFETY: `k < n`, published entries.
                let d = unsafe { r.rx.read(k) };
                let (off, _) = Umem::decode(d.addr);
                if let Some(idx) = self.umem.index(off)
                    && r.ledger.take(idx)
                {
                    self.put_back(self.umem.elem_at(off));
                }
            }
            r.rx.release(n);
        }
        let prod = r.fill.prod();
        for k in 0..self.committed {
            self.put_back(self.sw[(prod.wrapping_add(k) & self.mask) as usize]);
        }
        self.committed = 0;
        self.sw.fill(Elem::DANGLING);
        self.slot.put_rx(r);
    }

    fn recycle_rx_capable(&self) -> bool {
        true
    }

    #[inline]
    fn recycle_rx_info(&mut self) -> Result<RecycleRxInfo<'_>, PortError> {
        self.publish_committed();
        self.recycle_view()
    }

    #[inline]
    fn recycle_rx_refill(&mut self) -> usize {
        self.publish_committed()
    }

    fn recycle_from(&mut self, tx: &mut dyn TxQueue) -> Result<usize, PortError> {
        self.publish_committed();
        let moved = tx.recycle_tx_mbufs(&mut self.recycle_view()?)?;
        self.publish_committed();
        Ok(moved)
    }
}

impl AfxdpRx {
    /// `sw` from the fill producer index, lent for one recycle step
    /// (nothing committed: the caller published what was).
    #[inline]
    fn recycle_view(&mut self) -> Result<RecycleRxInfo<'_>, PortError> {
        let r = self.rings.as_ref().ok_or(PortError::Stopped)?;
        debug_assert_eq!(self.committed, 0);
        let (head, due) = (r.fill.prod(), Self::due(r));
        // The slots due from the producer index hold stale entries (frames
        // put on the fill ring a ring of entries earlier, whose ownership
        // the ledger tracks, or placeholders): the queue reads them only
        // after filling them itself or a commit handed them over.
        // `committed` slots from the producer index go onto the fill ring at
        // `publish_committed`, or back to the pool at `stop` (also run on
        // drop). `new` checks the shape: `sw` is the fill size, a power of
        // two; the producer index advances in whole units of `REFILL_UNIT`.
        // SAFETY: `sw` is this queue's own software ring, no slot due owns
        // a buffer, and `pool` is the UMEM's, the refill pool.
        Ok(unsafe {
            RecycleRxInfo::new(
                &mut self.sw,
                head,
                due,
                REFILL_UNIT,
                &self.pool,
                &mut self.committed,
            )
        })
    }
}

impl Drop for AfxdpRx {
    fn drop(&mut self) {
        self.stop();
    }
}
