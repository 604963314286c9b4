//! The data path: Rx queue `i` drains the guest's transmit virtqueue
//! (vring `2i + 1`), Tx queue `i` fills its receive virtqueue (vring
//! `2i`). Both copy: a frame is copied out of the guest's buffers into
//! mbufs, or out of mbufs into the guest's buffers, so no mbuf is ever
//! held by the guest and a Tx burst's buffers go back to the pool at once.

use std::sync::Arc;

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, Mbuf, MbufPool};
use crate::port::{PortCounters, PortError, RxFrameCheck, RxQueue, TxQueue};
use crate::virtio::VirtioError;
use crate::virtio::net_hdr::HEADER_LEN;
use crate::virtio::split::Chain;

use super::slot::{ActiveRing, VringSlot};

/// Chains one mergeable frame may take from the guest's receive ring.
const MAX_MERGED_CHAINS: usize = 64;
/// How far past the chain being copied a buffer is prefetched, and how far
/// its descriptor: their cache misses then overlap the copies of the
/// chains before.
const PREFETCH_BUF_AHEAD: u16 = 1;
const PREFETCH_DESC_AHEAD: u16 = 3;

/// The driver's named counters of one queue (registered per queue under
/// one name each; xstats add them up).
pub(super) struct RxCounters {
    /// Chains the guest made wrong (refused by the virtqueue).
    pub(super) bad_chain: Arc<Counter>,
    /// Chains shorter than the virtio-net header (frames too short or too
    /// long for the port count as the port's runts and oversize frames).
    pub(super) bad_len: Arc<Counter>,
    /// Times the ring itself was found broken (an impossible avail index,
    /// a ring outside memory).
    pub(super) ring_errors: Arc<Counter>,
}

/// See [`RxCounters`].
pub(super) struct TxCounters {
    pub(super) bad_chain: Arc<Counter>,
    /// Packets dropped while no ready ring was there.
    pub(super) not_ready: Arc<Counter>,
    /// Frames longer than the guest's buffers (without mergeable buffers,
    /// or longer than [`MAX_MERGED_CHAINS`] of them): dropped.
    pub(super) too_long: Arc<Counter>,
    pub(super) ring_errors: Arc<Counter>,
}

/// An Rx queue: frames the guest sends.
pub(super) struct VhostRx {
    pub(super) slot: Arc<VringSlot>,
    pub(super) pool: MbufPool,
    pub(super) port_id: u16,
    pub(super) counters: Arc<PortCounters>,
    pub(super) check: RxFrameCheck,
    pub(super) driver: RxCounters,
    pub(super) q: usize,
    /// An mbuf taken before finding the ring empty, kept for the next call.
    pub(super) spare: Option<Mbuf>,
    pub(super) chain: Chain,
    pub(super) started: bool,
}

/// Copies the frame of `chain` (after its `hdr_len`-byte header) into a
/// chain of mbufs starting with `first`. `None`: the pool ran dry.
fn copy_in(
    ring: &ActiveRing,
    chain: &Chain,
    pool: &MbufPool,
    mut first: Mbuf,
    frame_len: usize,
) -> Result<Option<Mbuf>, VirtioError> {
    let mem = ring.queue.memory();
    let mut offset = ring.hdr_len as u64;
    let mut left = frame_len;
    let room = (first.tailroom() as usize).min(left);
    if let Ok(buf) = first.append(room) {
        chain.read(mem, offset, buf)?;
    }
    offset += room as u64;
    left -= room;
    while left > 0 {
        let Some(mut seg) = pool.alloc() else {
            return Ok(None);
        };
        let room = (seg.tailroom() as usize).min(left);
        if room == 0 {
            return Ok(None);
        }
        if let Ok(buf) = seg.append(room) {
            chain.read(mem, offset, buf)?;
        }
        offset += room as u64;
        left -= room;
        if first.chain(seg).is_err() {
            return Ok(None);
        }
    }
    Ok(Some(first))
}

impl RxQueue for VhostRx {
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.rx[self.q];
        let (mut n, mut bytes) = (0usize, 0u64);
        let mut guard = if self.started {
            self.slot.enter()
        } else {
            None
        };
        if let Some(ring) = guard.as_mut().and_then(|g| g.ring()).filter(|r| r.enabled) {
            while burst.free() > 0 {
                let first = match self.spare.take().or_else(|| self.pool.alloc()) {
                    Some(m) => m,
                    None => {
                        stats.nombuf.inc();
                        break;
                    }
                };
                match ring.queue.pop_avail_into(&mut self.chain) {
                    Ok(true) => {
                        ring.queue
                            .prefetch_ahead(PREFETCH_BUF_AHEAD, PREFETCH_DESC_AHEAD, false)
                    }
                    Ok(false) => {
                        self.spare = Some(first);
                        break;
                    }
                    Err(VirtioError::Chain(_)) => {
                        // Already returned to the guest as used, length 0.
                        self.driver.bad_chain.inc();
                        self.spare = Some(first);
                        continue;
                    }
                    Err(_) => {
                        self.driver.ring_errors.inc();
                        self.spare = Some(first);
                        break;
                    }
                }
                let total = self.chain.readable_len() as usize;
                let frame_len = total.saturating_sub(ring.hdr_len);
                let received = if total < ring.hdr_len {
                    self.driver.bad_len.inc();
                    stats.errors.inc();
                    self.spare = Some(first);
                    None
                } else if !self.check.accepts(frame_len) {
                    self.check.count_drop(frame_len, &stats.errors);
                    self.spare = Some(first);
                    None
                } else {
                    match copy_in(ring, &self.chain, &self.pool, first, frame_len) {
                        Ok(Some(m)) => Some(m),
                        // The pool ran dry inside the frame: dropped, counted
                        // as `rx_nombuf`.
                        Ok(None) => {
                            stats.nombuf.inc();
                            None
                        }
                        Err(_) => {
                            self.driver.ring_errors.inc();
                            None
                        }
                    }
                };
                // A device-readable chain is returned with length 0.
                if ring.queue.push_used(self.chain.head(), 0).is_err() {
                    self.driver.ring_errors.inc();
                }
                if let Some(mut m) = received {
                    let _ = m.set_port(self.port_id);
                    bytes += frame_len as u64;
                    n += 1;
                    // Room: the loop runs while the burst has some.
                    let _ = burst.push(m);
                }
            }
            if ring.queue.publish_used().is_err() {
                self.driver.ring_errors.inc();
            }
            if ring.queue.needs_notify().unwrap_or(false) {
                ring.notify();
            }
            let idx = ring.queue.last_avail_idx();
            if let Some(g) = guard.as_ref() {
                g.publish_avail(idx);
            }
        }
        drop(guard);
        stats.record_burst(n, bytes);
        stats.posted.set(self.spare.is_some() as u64);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        self.started = false;
        self.spare = None;
        self.counters.rx[self.q].posted.set(0);
    }
}

/// A Tx queue: frames for the guest.
pub(super) struct VhostTx {
    pub(super) slot: Arc<VringSlot>,
    pub(super) counters: Arc<PortCounters>,
    pub(super) driver: TxCounters,
    pub(super) q: usize,
    /// Chains taken for the frame being written.
    pub(super) chains: Vec<Chain>,
    pub(super) started: bool,
}

/// What became of one packet offered to the guest.
enum Placed {
    /// Written into the guest's buffers.
    Sent,
    /// Dropped: counted where it happened.
    Dropped,
    /// No buffer left in the guest's ring: the packet stays with the caller.
    NoRoom,
}

/// Writes the packet `m` into the guest's receive ring, taking chains into
/// `chains`: the header, then each of the mbuf's segments, copied straight
/// from the segments into the guest's buffers.
fn place(
    chains: &mut Vec<Chain>,
    driver: &TxCounters,
    ring: &mut ActiveRing,
    m: &mut Mbuf,
) -> Placed {
    let frame_len = m.pkt_len() as usize;
    let need = (ring.hdr_len + frame_len) as u64;
    let mut have = 0u64;
    let mut taken = 0usize;
    while have < need {
        if taken == chains.len() {
            chains.push(Chain::new());
        }
        match ring.queue.pop_avail_into(&mut chains[taken]) {
            Ok(true) => {
                ring.queue
                    .prefetch_ahead(PREFETCH_BUF_AHEAD, PREFETCH_DESC_AHEAD, true);
                have += chains[taken].writable_len();
                taken += 1;
            }
            Ok(false) if taken == 0 => return Placed::NoRoom,
            Ok(false) => break,
            Err(VirtioError::Chain(_)) => driver.bad_chain.inc(),
            Err(_) => {
                driver.ring_errors.inc();
                break;
            }
        }
        if have < need && (!ring.mrg_rxbuf || taken == MAX_MERGED_CHAINS) {
            break;
        }
    }
    if have < need {
        // Too long for the buffers there are (or the ring broke):
        // every chain taken goes back empty, the frame is dropped.
        for chain in &chains[..taken] {
            if ring.queue.push_used(chain.head(), 0).is_err() {
                driver.ring_errors.inc();
            }
        }
        if taken > 0 {
            driver.too_long.inc();
        }
        return if taken > 0 {
            Placed::Dropped
        } else {
            Placed::NoRoom
        };
    }
    let mut header = [0u8; HEADER_LEN];
    if ring.hdr_len == HEADER_LEN {
        // num_buffers: 1 without mergeable buffers, as VERSION_1 asks.
        header[10..12].copy_from_slice(&(taken as u16).to_le_bytes());
    }
    let header = &header[..ring.hdr_len];
    // A one-segment packet of its own gets the header in its headroom, so
    // header and frame go out in one copy (the mbuf is freed once sent).
    let joined = m.nb_segs() == 1
        && m.prepend(header.len())
            .map(|room| room.copy_from_slice(header))
            .is_ok();
    // The common case: header and frame in one piece, into a chain whose
    // first buffer holds them all (its bounds were checked when it was
    // taken).
    if joined
        && let [chain] = &chains[..taken]
        && let Some(segment) = chain.segments().first()
        && segment.writable
        && m.data().len() <= segment.len as usize
    {
        let data = m.data();
        let written = ring.queue.memory().write_from(segment.addr, data).is_ok();
        let len = if written { data.len() as u32 } else { 0 };
        // Returned whatever happened, with what it holds.
        let returned = ring.queue.push_used(chain.head(), len).is_ok();
        if !(written && returned) {
            driver.ring_errors.inc();
            return Placed::Dropped;
        }
        return Placed::Sent;
    }
    let header: &[u8] = if joined { &[] } else { header };
    // Bytes written into each chain taken, returned with it below.
    let mut written_lens = [0u32; MAX_MERGED_CHAINS];
    let mut failed = false;
    {
        let mem = ring.queue.memory();
        // The header, then the frame, across the chains in order.
        let mut pieces = std::iter::once(header)
            .chain(m.segments())
            .filter(|piece| !piece.is_empty());
        let mut piece: &[u8] = pieces.next().unwrap_or_default();
        for (chain, len) in chains[..taken].iter().zip(written_lens.iter_mut()) {
            let mut written = 0u64;
            while !piece.is_empty() && written < chain.writable_len() {
                match chain.write(mem, written, piece) {
                    Ok(0) => break,
                    Ok(k) => {
                        written += k as u64;
                        piece = &piece[k..];
                        if piece.is_empty() {
                            piece = pieces.next().unwrap_or_default();
                        }
                    }
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            *len = written.min(u64::from(u32::MAX)) as u32;
        }
    }
    for (chain, &len) in chains[..taken].iter().zip(written_lens.iter()) {
        if ring.queue.push_used(chain.head(), len).is_err() {
            failed = true;
        }
    }
    if failed {
        driver.ring_errors.inc();
        return Placed::Dropped;
    }
    Placed::Sent
}

impl TxQueue for VhostTx {
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let mut guard = if self.started {
            self.slot.enter()
        } else {
            None
        };
        let Some(ring) = guard.as_mut().and_then(|g| g.ring()).filter(|r| r.enabled) else {
            drop(guard);
            // Nobody to send to: dropped and counted, as by a port whose
            // link is down.
            let n = burst.len();
            drop(burst.drain_front(n));
            self.driver.not_ready.add(n as u64);
            let stats = &self.counters.tx[self.q];
            stats.errors.add(n as u64);
            stats.record_burst(0, 0);
            return n;
        };
        let (mut taken, mut sent, mut bytes, mut dropped) = (0usize, 0usize, 0u64, 0u64);
        for m in burst.as_mut_slice() {
            let len = u64::from(m.pkt_len());
            match place(&mut self.chains, &self.driver, ring, m) {
                Placed::Sent => {
                    sent += 1;
                    bytes += len;
                }
                Placed::Dropped => dropped += 1,
                Placed::NoRoom => break,
            }
            taken += 1;
        }
        if ring.queue.publish_used().is_err() {
            self.driver.ring_errors.inc();
        }
        if ring.queue.needs_notify().unwrap_or(false) {
            ring.notify();
        }
        let idx = ring.queue.last_avail_idx();
        if let Some(g) = guard.as_ref() {
            g.publish_avail(idx);
        }
        drop(guard);
        // The copies are made: the buffers go back to the pool now.
        drop(burst.drain_front(taken));
        let stats = &self.counters.tx[self.q];
        if dropped != 0 {
            stats.errors.add(dropped);
        }
        stats.record_burst(sent, bytes);
        taken
    }

    fn start(&mut self) -> Result<(), PortError> {
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        self.started = false;
    }
}
