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
    /// The chains of one burst, reused.
    pub(super) chains: Vec<Chain>,
    pub(super) started: bool,
}

/// Copies the frame of `chain` (after its `hdr_len`-byte header) into
/// `first`, an empty mbuf, chaining more mbufs from `pool` when it is
/// longer than one's room. `false`: the pool ran dry.
fn copy_in(
    ring: &ActiveRing,
    chain: &Chain,
    pool: &MbufPool,
    first: &mut Mbuf,
    frame_len: usize,
) -> Result<bool, VirtioError> {
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
            return Ok(false);
        };
        let room = (seg.tailroom() as usize).min(left);
        if room == 0 {
            return Ok(false);
        }
        if let Ok(buf) = seg.append(room) {
            chain.read(mem, offset, buf)?;
        }
        offset += room as u64;
        left -= room;
        if first.chain(seg).is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Asks for the first two cache lines of the first buffer of `chain`
/// (where the header and the frame's start are), to be read or written.
#[inline]
fn prefetch_buffer(ring: &ActiveRing, chain: &Chain, write: bool) {
    if let Some(segment) = chain.segments().first() {
        ring.queue.memory().prefetch_two_lines(segment.addr, write);
    }
}

impl RxQueue for VhostRx {
    /// In two passes over the burst: first the chains are taken (their
    /// descriptors prefetched together, then each chain walked and its
    /// buffer prefetched), then each frame is copied out and its chain
    /// returned, so the cache misses on what the guest wrote overlap
    /// instead of coming one packet at a time.
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.rx[self.q];
        let (mut n, mut bytes) = (0usize, 0u64);
        let mut guard = if self.started {
            self.slot.enter()
        } else {
            None
        };
        if let Some(ring) = guard.as_mut().and_then(|g| g.ring()).filter(|r| r.enabled) {
            let want = match ring.queue.ready(burst.free(), false) {
                Ok(want) => want,
                Err(_) => {
                    self.driver.ring_errors.inc();
                    0
                }
            };
            // An mbuf for each chain to take, in the burst's slots from
            // `start` on; a frame not received leaves its mbuf there to be
            // freed at the end. With too few mbufs, fewer chains are taken
            // (the others stay in the ring).
            let start = burst.len();
            let mut got = want;
            if want > 0 && self.pool.alloc_bulk(burst, want).is_err() {
                got = 0;
                while got < want
                    && let Some(m) = self.pool.alloc()
                {
                    // Room: `want` is at most the burst's free slots.
                    let _ = burst.push(m);
                    got += 1;
                }
                stats.nombuf.inc();
            }
            // Pass 1: take up to `got` entries of the available ring.
            let mut taken = 0usize;
            for _ in 0..got {
                if taken == self.chains.len() {
                    self.chains.push(Chain::new());
                }
                match ring.queue.pop_avail_into(&mut self.chains[taken]) {
                    Ok(true) => {
                        prefetch_buffer(ring, &self.chains[taken], false);
                        taken += 1;
                    }
                    Ok(false) => break,
                    // Already returned to the guest as used, length 0.
                    Err(VirtioError::Chain(_)) => self.driver.bad_chain.inc(),
                    Err(_) => {
                        self.driver.ring_errors.inc();
                        break;
                    }
                }
            }
            // Pass 2: copy each frame into the mbuf of its slot; received
            // ones move down to `start + n`, in order. The chains go back
            // together after the copies.
            for (i, chain) in self.chains[..taken].iter().enumerate() {
                let slot = start + i;
                let total = chain.readable_len() as usize;
                let frame_len = total.saturating_sub(ring.hdr_len);
                let received = if total < ring.hdr_len {
                    self.driver.bad_len.inc();
                    stats.errors.inc();
                    false
                } else if !self.check.accepts(frame_len) {
                    self.check.count_drop(frame_len, &stats.errors);
                    false
                } else {
                    let m = &mut burst.as_mut_slice()[slot];
                    match copy_in(ring, chain, &self.pool, m, frame_len) {
                        Ok(true) => {
                            let _ = m.set_port(self.port_id);
                            true
                        }
                        // The pool ran dry inside the frame: dropped,
                        // counted as `rx_nombuf`.
                        Ok(false) => {
                            stats.nombuf.inc();
                            false
                        }
                        Err(_) => {
                            self.driver.ring_errors.inc();
                            false
                        }
                    }
                };
                if received {
                    burst.as_mut_slice().swap(start + n, slot);
                    bytes += frame_len as u64;
                    n += 1;
                }
            }
            // Device-readable chains are returned with length 0.
            if ring.queue.push_used_read(&self.chains[..taken]).is_err() {
                self.driver.ring_errors.inc();
            }
            // The mbufs of frames not received, and of chains not taken.
            burst.truncate(start + n);
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
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        self.started = false;
        self.counters.rx[self.q].posted.set(0);
    }
}

/// A Tx queue: frames for the guest.
pub(super) struct VhostTx {
    pub(super) slot: Arc<VringSlot>,
    pub(super) counters: Arc<PortCounters>,
    pub(super) driver: TxCounters,
    pub(super) q: usize,
    /// Chains taken for the burst's packets, in order, reused.
    pub(super) chains: Vec<Chain>,
    /// What each packet of the burst took, in order, reused.
    pub(super) reserved: Vec<Reserved>,
    pub(super) started: bool,
}

/// The chains taken for one packet: how many (the next ones in
/// [`VhostTx::chains`]), and whether they hold it (else the frame is too
/// long for them and they go back empty).
#[derive(Debug, Clone, Copy)]
pub(super) struct Reserved {
    chains: usize,
    fits: bool,
}

/// Takes chains from the guest's receive ring into `chains[first..]` until
/// they hold `need` bytes (one chain without mergeable buffers), and
/// prefetches their buffers for writing. `None`: no chain taken (the ring
/// is empty, or broken), or the guest's buffers ran out before the frame's
/// mergeable buffers were found and the ones taken went back; the packet
/// stays with the caller.
fn reserve(
    chains: &mut Vec<Chain>,
    first: usize,
    driver: &TxCounters,
    ring: &mut ActiveRing,
    need: u64,
) -> Option<Reserved> {
    let mut have = 0u64;
    let mut taken = 0usize;
    // No chain was refused while taking this packet's: the ones taken are
    // the ring's last and can be given back.
    let mut clean = true;
    while have < need {
        let at = first + taken;
        if at == chains.len() {
            chains.push(Chain::new());
        }
        match ring.queue.pop_avail_into(&mut chains[at]) {
            Ok(true) => {
                prefetch_buffer(ring, &chains[at], true);
                have += chains[at].writable_len();
                taken += 1;
            }
            Ok(false) => {
                // The guest has posted too few buffers for the frame yet:
                // the ones taken go back into the ring and the packet
                // waits with the caller, as a full ring's would.
                if taken > 0 && clean && ring.queue.untake(taken).is_ok() {
                    return None;
                }
                break;
            }
            Err(VirtioError::Chain(_)) => {
                driver.bad_chain.inc();
                clean = false;
            }
            Err(_) => {
                driver.ring_errors.inc();
                break;
            }
        }
        if have < need && (!ring.mrg_rxbuf || taken == MAX_MERGED_CHAINS) {
            break;
        }
    }
    (taken > 0).then_some(Reserved {
        chains: taken,
        fits: have >= need,
    })
}

/// Writes the packet `m` into the chains reserved for it: the header, then
/// each of the mbuf's segments, copied straight from the segments into the
/// guest's buffers; each chain is returned with the bytes written into it.
/// A packet too long for its chains is dropped (counted) and the chains go
/// back empty. Whether the packet was sent.
fn fill(
    chains: &[Chain],
    driver: &TxCounters,
    ring: &mut ActiveRing,
    m: &Mbuf,
    fits: bool,
) -> bool {
    if !fits {
        for chain in chains {
            if ring.queue.push_used(chain.head(), 0).is_err() {
                driver.ring_errors.inc();
            }
        }
        driver.too_long.inc();
        return false;
    }
    // The virtio-net header: all zero (no offloads) but `num_buffers`, the
    // chains the frame takes (1 without mergeable buffers, as VERSION_1
    // asks), in bytes 10..12 when the header has them.
    let header_word = if ring.hdr_len == HEADER_LEN {
        u128::from(chains.len() as u16) << 80
    } else {
        0
    };
    let header_bytes = header_word.to_le_bytes();
    let header = &header_bytes[..ring.hdr_len];
    // The common case: a one-segment packet into a chain whose first
    // buffer holds header and frame (its bounds were checked when it was
    // taken), the header stored there from registers and the frame copied
    // after it. The header is neither built in memory and copied nor put
    // in the mbuf's headroom first: loading bytes just stored waits until
    // every earlier store has reached the cache, the stores into the
    // guest's buffers of the packets before among them, which serialised
    // the burst on the lines coming over from the guest's core.
    if m.nb_segs() == 1
        && let [chain] = chains
        && let Some(segment) = chain.segments().first()
        && segment.writable
        && header.len() + m.data().len() <= segment.len as usize
    {
        let data = m.data();
        let written = ring
            .queue
            .memory()
            .write_prefixed(segment.addr, header_word, header.len(), data)
            .is_ok();
        let len = if written {
            (header.len() + data.len()) as u32
        } else {
            0
        };
        // Returned whatever happened, with what it holds.
        let returned = ring.queue.push_used(chain.head(), len).is_ok();
        if !(written && returned) {
            driver.ring_errors.inc();
        }
        return written && returned;
    }
    let mut failed = false;
    // The header, then the frame, across the chains in order.
    let mut pieces = std::iter::once(header)
        .chain(m.segments())
        .filter(|piece| !piece.is_empty());
    let mut piece: &[u8] = pieces.next().unwrap_or_default();
    for chain in chains {
        let mut written = 0u64;
        {
            let mem = ring.queue.memory();
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
        }
        let len = written.min(u64::from(u32::MAX)) as u32;
        if ring.queue.push_used(chain.head(), len).is_err() {
            failed = true;
        }
    }
    if failed {
        driver.ring_errors.inc();
        return false;
    }
    true
}

impl TxQueue for VhostTx {
    /// In two passes over the burst, as `rx_burst`: first the chains for
    /// every packet are taken (their buffers prefetched for writing), then
    /// the packets are copied in and the chains returned.
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
        // A broken index is found and counted again by the first take.
        let _ = ring.queue.ready(burst.len(), true);
        // Pass 1: chains for as many packets as the ring has room for.
        self.reserved.clear();
        let mut first = 0usize;
        for m in burst.as_slice() {
            let need = (ring.hdr_len + m.pkt_len() as usize) as u64;
            match reserve(&mut self.chains, first, &self.driver, ring, need) {
                Some(reserved) => {
                    first += reserved.chains;
                    self.reserved.push(reserved);
                }
                None => break,
            }
        }
        // Pass 2: the copies.
        let taken = self.reserved.len();
        let (mut sent, mut bytes, mut dropped) = (0usize, 0u64, 0u64);
        let mut first = 0usize;
        for (m, reserved) in burst.as_slice().iter().zip(&self.reserved) {
            let chains = &self.chains[first..first + reserved.chains];
            first += reserved.chains;
            let len = u64::from(m.pkt_len());
            if fill(chains, &self.driver, ring, m, reserved.fits) {
                sent += 1;
                bytes += len;
            } else {
                dropped += 1;
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
