//! The afxdp Tx queue: mbufs of the UMEM's pool go on the Tx ring as they
//! are, others are copied into a frame of it first; completed frames go
//! back to the pool, or straight into an Rx queue's fill ring.
//!
//! # Send
//! First the completion ring is drained (below). Then for each packet, up
//! to the Tx ring's free slots:
//! - a *plain* mbuf of the UMEM's pool (one segment, reference count 1,
//!   its own buffer) is sent where it lies: descriptor address = chunk
//!   offset | (header + data offset) << 48, its ledger mark set, and the
//!   queue gives up its reference — the kernel now holds the frame;
//! - anything else (another pool, a clone, a chain, an external buffer)
//!   is copied into a fresh mbuf of the pool, which is sent instead, and
//!   the original is freed (`tx_copied`); an empty pool stops the burst
//!   there, leaving the rest in the caller's burst;
//! - a frame shorter than an Ethernet header (`tx_runt_errors`), longer
//!   than a buffer holds (`tx_oversize_errors`) or with its data where a
//!   descriptor cannot point (`tx_layout_errors`) is dropped, also counted
//!   in `tx_errors`.
//!
//! One Release store of the producer index publishes the burst; then the
//! kernel is woken with `sendto` when it asks (`XDP_RING_NEED_WAKEUP`,
//! always set in copy mode) or when need-wakeup is off. In copy mode one
//! `sendto` sends at most 32 frames and answers `EAGAIN` while more wait,
//! so the wake-up is repeated (a few times at most) while frames are left.
//!
//! # Completion
//! Each completion-ring address is the Tx descriptor's: its low 48 bits
//! are the chunk, whose ledger mark must be set (else `tx_bad_addrs`, and
//! the address is ignored). The frame was plain when sent and no one else
//! holds it, so it goes back to the pool with one bulk put per batch — the
//! fast-free path with no header read.
//!
//! # Recycling
//! [`TxQueue::recycle_tx_mbufs`] moves completed frames into an Rx queue's
//! slots instead, whole refill units at a time, if the Rx queue's pool is
//! the UMEM's (one address check per step: every frame here is of that
//! pool); otherwise the completions are freed as above and the step counts
//! one `recycle_fallbacks`. The Rx queue puts them on its fill ring:
//! completion ring → fill ring with no pool operation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, HEADER_SIZE, Mbuf, MbufHeader, MbufPool};
use crate::mempool::Elem;
use crate::port::{PortCounters, PortError, RecycleRxInfo, TxQueue};

use super::slot::QueueSlot;
use super::umem::Umem;
use super::xsk::{Desc, TxRings, kick_tx};

/// Ethernet header: the shortest frame sent.
const MIN_FRAME: u32 = 14;

/// Most wake-ups per burst while the kernel answers `EAGAIN`.
const MAX_KICKS: u32 = 4;

/// How long `stop` lets frames already on the Tx ring go out.
const STOP_FLUSH: Duration = Duration::from_millis(20);

/// A Tx queue of an afxdp port.
pub struct AfxdpTx {
    slot: Arc<QueueSlot>,
    /// The Tx and completion rings, while started.
    rings: Option<TxRings>,
    umem: Umem,
    /// The UMEM's pool: copies are made in it, completions go back to it.
    pool: MbufPool,
    /// Bound with need-wakeup: wake the kernel only when it asks.
    need_wakeup: bool,
    q: usize,
    counters: Arc<PortCounters>,
    tx_recycled: Arc<Counter>,
    recycle_fallbacks: Arc<Counter>,
    tx_copied: Arc<Counter>,
    tx_bad_addrs: Arc<Counter>,
    /// Packets that do not fit one buffer, so cannot be copied into one
    /// (`tx_oversize_errors`, a share of `tx_errors`).
    tx_oversize: Arc<Counter>,
    /// Frames shorter than an Ethernet header (`tx_runt_errors`).
    tx_runt: Arc<Counter>,
    /// Frames whose data does not lie where a descriptor can point
    /// (`tx_layout_errors`).
    tx_layout: Arc<Counter>,
    tx_wakeups: Arc<Counter>,
}

/// Whether the mbuf at `e` is plain — one segment, reference count 1, its
/// own buffer — read from the first header line.
///
/// # Safety
/// `e` is an mbuf the caller holds a reference to.
#[inline(always)]
unsafe fn plain(e: Elem) -> bool {
    // SAFETY: the caller's reference keeps the header alive.
    let h = unsafe { &*e.as_ptr().cast::<MbufHeader>() };
    h.nb_segs == 1
        && h.buf_addr.cast_const() == e.as_ptr().wrapping_add(HEADER_SIZE).cast_const()
        // Acquire: pairs with the Release decrement of a clone dropped on
        // another thread, so its uses happen before we send the buffer.
        && h.refcnt.load(std::sync::atomic::Ordering::Acquire) == 1
}

impl AfxdpTx {
    /// Tx queue `q` over `slot`'s socket.
    pub(crate) fn new(
        slot: Arc<QueueSlot>,
        pool: MbufPool,
        q: usize,
        counters: Arc<PortCounters>,
    ) -> AfxdpTx {
        let umem = slot.cfg.umem;
        let need_wakeup = slot.cfg.need_wakeup;
        AfxdpTx {
            tx_recycled: counters.xstats.register("tx_recycled"),
            recycle_fallbacks: counters.xstats.register("recycle_fallbacks"),
            tx_copied: counters.xstats.register("tx_copied"),
            tx_bad_addrs: counters.xstats.register("tx_bad_addrs"),
            tx_oversize: counters.xstats.register("tx_oversize_errors"),
            tx_runt: counters.xstats.register("tx_runt_errors"),
            tx_layout: counters.xstats.register("tx_layout_errors"),
            tx_wakeups: counters.xstats.register("tx_wakeups"),
            slot,
            rings: None,
            umem,
            pool,
            need_wakeup,
            q,
            counters,
        }
    }

    /// Frees up to `max` completed frames; how many.
    #[inline]
    fn reap(&mut self, max: u32) -> usize {
        let Some(r) = self.rings.as_mut() else {
            return 0;
        };
        let n = r.comp.ready(max);
        if n == 0 {
            return 0;
        }
        let mut batch = [Elem::DANGLING; 64];
        let mut k = 0;
        let mut freed = 0;
        for i in 0..n {
            // SAFETY: `i < n`, entries the kernel published.
            let (off, _) = Umem::decode(unsafe { r.comp.read(i) });
            match self.umem.index(off) {
                Some(idx) if r.ledger.take(idx) => {
                    batch[k] = self.umem.elem_at(off);
                    k += 1;
                }
                _ => self.tx_bad_addrs.inc(),
            }
            if k == batch.len() || i + 1 == n {
                // SAFETY: frames that were plain buffers of the pool when
                // sent, whose only reference the kernel held and gave back
                // (ledger mark taken): free, each once.
                unsafe { self.pool.mempool().put_bulk(&batch[..k]) };
                freed += k;
                k = 0;
            }
        }
        r.comp.release(n);
        freed
    }

    /// Wakes the kernel to send: when it asks (or always without
    /// need-wakeup), repeated while it answers `EAGAIN` with frames left.
    #[inline]
    fn kick(&mut self) {
        let Some(r) = self.rings.as_mut() else {
            return;
        };
        if self.need_wakeup && !r.tx.needs_wakeup() {
            return;
        }
        for _ in 0..MAX_KICKS {
            self.tx_wakeups.inc();
            match kick_tx(r.fd) {
                Err(libc::EAGAIN) if r.tx.pending() != 0 => continue,
                _ => return,
            }
        }
    }
}

/// A copy of the packet at `e` in a fresh mbuf of `pool`, or `None` when
/// the pool is empty; `Err` if it does not fit one buffer.
///
/// # Safety
/// `e` is an mbuf the caller owns.
unsafe fn copy_into(pool: &MbufPool, e: Elem) -> Result<Option<Elem>, ()> {
    // SAFETY: the caller owns `e`; borrowed here, not dropped.
    let src = std::mem::ManuallyDrop::new(unsafe {
        Mbuf::from_raw(e.as_non_null().cast::<MbufHeader>())
    });
    let Some(mut m) = pool.alloc() else {
        return Ok(None);
    };
    let len = src.pkt_len() as usize;
    let Ok(dst) = m.append(len) else {
        return Err(());
    };
    let mut at = 0;
    for seg in src.segments() {
        dst[at..at + seg.len()].copy_from_slice(seg);
        at += seg.len();
    }
    Ok(Some(Elem::from_ptr(Mbuf::into_raw(m).cast())))
}

impl TxQueue for AfxdpTx {
    #[inline]
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        if self.rings.is_none() {
            return 0;
        }
        self.reap(u32::MAX);
        let Some(r) = self.rings.as_mut() else {
            return 0;
        };
        let room = r.tx.free(burst.len() as u32);
        let stride = self.umem.chunk_size();
        let mut taken = 0;
        let mut sent = 0u32;
        let mut bytes = 0u64;
        let mut errors = 0u64;
        for &e in burst.raw() {
            if sent == room {
                break;
            }
            // SAFETY: the burst owns this mbuf.
            let is_plain = unsafe { plain(e) } && self.umem.holds(e);
            let frame = if is_plain {
                e
            } else {
                // SAFETY: the burst owns `e`.
                match unsafe { copy_into(&self.pool, e) } {
                    Ok(Some(c)) => {
                        self.tx_copied.inc();
                        // SAFETY: the original, owned by the burst, taken
                        // from it below (`forget_front`), freed once here.
                        drop(unsafe { Mbuf::from_raw(e.as_non_null().cast()) });
                        c
                    }
                    // The pool is empty: the rest waits in the burst.
                    Ok(None) => break,
                    Err(()) => {
                        errors += 1;
                        self.tx_oversize.inc();
                        // SAFETY: as above.
                        drop(unsafe { Mbuf::from_raw(e.as_non_null().cast()) });
                        taken += 1;
                        continue;
                    }
                }
            };
            // SAFETY: `frame` is an mbuf we own (from the burst, or the copy).
            let h = unsafe { &*frame.as_ptr().cast::<MbufHeader>() };
            let len = h.data_len as u32;
            let data = HEADER_SIZE as u32 + h.data_off as u32;
            // The data offset must fit the 16 bits above bit 48.
            if len < MIN_FRAME || data + len > stride || data > u16::MAX as u32 {
                errors += 1;
                if len < MIN_FRAME {
                    self.tx_runt.inc();
                } else {
                    self.tx_layout.inc();
                }
                // SAFETY: ours (see above), freed once.
                drop(unsafe { Mbuf::from_raw(frame.as_non_null().cast()) });
                taken += 1;
                continue;
            }
            let off = self.umem.offset_of(frame);
            let marked = r.ledger.mark(self.umem.index_of(frame));
            debug_assert!(marked, "a frame with one reference is in flight twice");
            let d = Desc {
                addr: Umem::encode(off, data),
                len,
                options: 0,
            };
            // SAFETY: `sent < room`, free slots of the Tx ring.
            unsafe { r.tx.write(sent, d) };
            sent += 1;
            taken += 1;
            bytes += len as u64;
        }
        if sent != 0 {
            r.tx.submit(sent);
        }
        // SAFETY: the first `taken` mbufs are on the Tx ring (their
        // reference now the kernel's, by the ledger) or were freed above.
        unsafe { burst.forget_front(taken) };
        let stats = &self.counters.tx[self.q];
        stats.record_burst(sent as usize, bytes);
        if errors != 0 {
            stats.errors.add(errors);
        }
        if sent != 0 || r.tx.pending() != 0 {
            self.kick();
        }
        taken
    }

    fn tx_done_cleanup(&mut self, max: usize) -> usize {
        let freed = self.reap(max.min(u32::MAX as usize) as u32);
        if self.rings.as_mut().is_some_and(|r| r.tx.pending() != 0) {
            self.kick();
        }
        freed
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.rings.is_some() {
            return Ok(());
        }
        self.rings = Some(self.slot.take_tx()?);
        Ok(())
    }

    fn stop(&mut self) {
        if self.rings.is_none() {
            return;
        }
        // Let what is on the Tx ring go out (bounded), then free what has
        // completed; the rest comes back when the socket closes.
        let end = Instant::now() + STOP_FLUSH;
        while self.rings.as_mut().is_some_and(|r| r.tx.pending() != 0) && Instant::now() < end {
            if let Some(r) = self.rings.as_ref() {
                let _ = kick_tx(r.fd);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.reap(u32::MAX);
        if let Some(r) = self.rings.take() {
            self.slot.put_tx(r);
        }
    }

    fn recycle_tx_capable(&self) -> bool {
        true
    }

    #[inline]
    fn recycle_tx_mbufs(&mut self, rx: &mut RecycleRxInfo<'_>) -> Result<usize, PortError> {
        let Some(r) = self.rings.as_mut() else {
            return Err(PortError::Stopped);
        };
        // Every frame here is of the UMEM's pool: one address says whether
        // it is the Rx queue's.
        if !rx.in_pool(self.umem.elem_at(0)) {
            if self.reap(u32::MAX) != 0 {
                self.recycle_fallbacks.inc();
            }
            return Ok(0);
        }
        let unit = rx.refill_requirement().max(1);
        let mut moved = 0usize;
        loop {
            let room = rx.room();
            let n = r.comp.ready(room) & !(unit - 1);
            if n == 0 {
                break;
            }
            let Some(dst) = rx.slots(n) else {
                break;
            };
            let mut k = 0;
            for i in 0..n {
                // SAFETY: `i < n`, entries the kernel published.
                let (off, _) = Umem::decode(unsafe { r.comp.read(i) });
                match self.umem.index(off) {
                    Some(idx) if r.ledger.take(idx) => {
                        dst[k as usize] = self.umem.elem_at(off);
                        k += 1;
                    }
                    _ => self.tx_bad_addrs.inc(),
                }
            }
            r.comp.release(n);
            if k == n {
                // SAFETY: `dst` holds `n` distinct frames of the Rx pool
                // (ledger marks taken once each), plain when sent and held
                // by no one since: free buffers in all but name.
                unsafe { rx.commit(n) };
                moved += n as usize;
            } else {
                // A stray address broke the unit: the good frames go home.
                // SAFETY: as above, not committed, freed once.
                unsafe { self.pool.mempool().put_bulk(&dst[..k as usize]) };
                self.recycle_fallbacks.inc();
            }
        }
        if moved != 0 {
            self.tx_recycled.add(moved as u64);
        }
        Ok(moved)
    }
}

impl Drop for AfxdpTx {
    fn drop(&mut self) {
        self.stop();
    }
}
