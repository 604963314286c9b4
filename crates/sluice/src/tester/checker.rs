//! [`Checker`]: validates frames that come back and counts them.
//!
//! **Validation.** A frame is *foreign* when it is too short to hold a stamp
//! or its magic differs from [`MAGIC`] in more than 2 bits (a magic 1 or 2 bit
//! flips away is a damaged tester frame: *corrupt*), and when its stamp is
//! valid (the check matches its id and sequence number) but its tag is not
//! one of this tester's streams: another tester's frame, never counted in
//! this tester's streams. Otherwise it is corrupt unless all of these hold:
//! - the stamp check matches its id and sequence number, and the id names
//!   one of the stream's flows;
//! - the frame is exactly as long as its IP length field says;
//! - every byte from the EtherType to the end of the stamp is what the
//!   generator wrote for that stream, flow, sequence number and length,
//!   except the TTL (IPv4) or hop limit (IPv6), which routers change, and the
//!   IPv4 header checksum, which must instead still verify;
//! - the payload is the frame's pattern word repeated.
//!
//! MAC addresses are not checked (forwarders rewrite them). The L4 checksum
//! is among the compared bytes, so it is checked too.
//!
//! **Order.** Per (stream, flow) and shared by all checkers, four atomics: the
//! highest sequence number seen (plus one) and three 64-bit words, each a
//! 32-bit block number above a bitmap of the 32 sequence numbers of that
//! block seen so far; block `b` lives in word `b % 3`. Marking a sequence
//! number is one CAS on its word, so two checkers can never both count the
//! same frame as new. The three newest blocks are always present, so
//! duplicates are exact within at least 65 sequence numbers below the
//! highest; an older frame, whose block has been replaced, is counted as new
//! and reordered. A new frame below the highest seen is *reordered*.
//! Sequence numbers travel as their low 32 bits and are widened against the
//! highest seen.
//!
//! Received counts unique valid frames; lost is sent minus received.
//!
//! **Latency.** A received frame (not a duplicate) that carries a send time
//! gives one latency sample for the checker's port, read against the TSC
//! when it is checked (see [`latency`](super::latency)).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::counter::Counter;
use crate::net::checksum;
use crate::tsc;

use super::config::L3;
use super::frame::{Layout, MAGIC, MAX_FLOWS, MAX_HEAD, field};
use super::latency::{Recorder, SharedLatency};
use super::report::TesterReport;
use super::{StreamState, Tester};

/// One flow's receive order, shared by all checkers (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct FlowOrder {
    /// Highest sequence number seen plus one; 0 before any.
    highest: AtomicU64,
    /// Block number (high 32 bits) and seen-bitmap (low 32 bits).
    blocks: [AtomicU64; 3],
}

/// What [`FlowOrder::record`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// First time; `reordered` when below the highest seen.
    New {
        /// Below the highest sequence number seen before.
        reordered: bool,
    },
    /// Seen before.
    Duplicate,
}

impl FlowOrder {
    /// Records `seq32`, the low 32 bits of a sequence number.
    #[inline]
    pub(crate) fn record(&self, seq32: u32) -> Seen {
        let seq = widen(seq32, self.highest.load(Ordering::Relaxed));
        let block = seq >> 5;
        let tag = block as u32;
        let bit = 1u64 << (seq & 31);
        let slot = &self.blocks[(block % 3) as usize];
        let mut w = slot.load(Ordering::Relaxed);
        loop {
            let ahead = tag.wrapping_sub((w >> 32) as u32) as i32;
            let new = if ahead == 0 {
                if w & bit != 0 {
                    return Seen::Duplicate;
                }
                w | bit
            } else if ahead > 0 {
                (u64::from(tag) << 32) | bit
            } else {
                // The block left the window: assume new, certainly late.
                return Seen::New { reordered: true };
            };
            match slot.compare_exchange_weak(w, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        let prev = self.highest.fetch_max(seq + 1, Ordering::Relaxed);
        Seen::New {
            reordered: seq + 1 < prev,
        }
    }
}

/// The 64-bit sequence number nearest `next` whose low 32 bits are `seq32`
/// (never below 0).
#[inline(always)]
fn widen(seq32: u32, next: u64) -> u64 {
    const HALF: u64 = 1 << 31;
    const ONE: u64 = 1 << 32;
    let c = (next & !(ONE - 1)) | u64::from(seq32);
    if c > next.saturating_add(HALF) && c >= ONE {
        c - ONE
    } else if c.saturating_add(HALF) < next {
        c + ONE
    } else {
        c
    }
}

/// A checker's counts, read by [`Tester::report`], and its published
/// latency, read by [`Tester::latency`].
#[derive(Debug)]
pub(crate) struct CheckStats {
    received: Counter,
    bytes: Counter,
    reordered: Counter,
    duplicates: Counter,
    corrupt: Counter,
    foreign: Counter,
    pub(crate) latency: SharedLatency,
}

impl CheckStats {
    /// A checker's counts, all 0, for `port`.
    pub(crate) fn new(port: u16) -> CheckStats {
        CheckStats {
            received: Counter::default(),
            bytes: Counter::default(),
            reordered: Counter::default(),
            duplicates: Counter::default(),
            corrupt: Counter::default(),
            foreign: Counter::default(),
            latency: SharedLatency::new(port),
        }
    }

    pub(crate) fn add_to(&self, r: &mut TesterReport) {
        r.received += self.received.get();
        r.bytes_received += self.bytes.get();
        r.reordered += self.reordered.get();
        r.duplicates += self.duplicates.get();
        r.corrupt += self.corrupt.get();
        r.foreign += self.foreign.get();
    }
}

/// Why a frame does not count as received.
enum Reject {
    Foreign,
    Corrupt,
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline(always)]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Checks frames at one egress point (see the module docs). Made by
/// [`Tester::checker`]; used by one thread, any number of them at once.
#[derive(Debug)]
pub struct Checker {
    tester: Arc<Tester>,
    /// The tester's streams by tag, as of `streams_added`.
    streams: Vec<Option<Arc<StreamState>>>,
    /// How many streams the tester had when `streams` was filled.
    streams_added: u16,
    stats: Arc<CheckStats>,
    /// The headers and stamp the generator wrote, rebuilt.
    scratch: [u8; MAX_HEAD],
    /// Latency samples not yet published.
    latency: Recorder,
}

impl Checker {
    pub(crate) fn new(tester: Arc<Tester>, stats: Arc<CheckStats>) -> Checker {
        Checker {
            tester,
            streams: Vec::new(),
            streams_added: 0,
            stats,
            scratch: [0; MAX_HEAD],
            latency: Recorder::new(),
        }
    }

    /// The port whose frames this checker sees (its latency is counted
    /// there).
    pub fn port(&self) -> u16 {
        self.stats.latency.port
    }

    /// Checks one frame and counts it: received (and maybe reordered),
    /// duplicate, corrupt or foreign. A received frame with a send time is
    /// measured against the TSC read now.
    #[inline]
    pub fn check(&mut self, frame: &[u8]) {
        self.check_with(frame, tsc::rdtsc);
    }

    /// [`check`](Self::check), with the TSC reading `now_tsc` as the time of
    /// receipt (one reading for a burst).
    #[inline]
    pub fn check_at(&mut self, frame: &[u8], now_tsc: u64) {
        self.check_with(frame, || now_tsc);
    }

    /// Adds the latency samples recorded since the last publication into
    /// what [`Tester::latency`] reads, waiting for the lock if a reader holds
    /// it. Checkers publish on their own every
    /// [`PUBLISH_MS`](super::PUBLISH_MS) of traffic and when dropped.
    pub fn publish_latency(&mut self) {
        self.latency.publish(&self.stats.latency);
    }

    #[inline]
    fn check_with(&mut self, frame: &[u8], now: impl FnOnce() -> u64) {
        let (seen, sent) = match self.validate(frame) {
            Ok((tag, flow, seq, sent)) => match self.streams.get(usize::from(tag)) {
                Some(Some(state)) => (state.order[flow as usize].record(seq), sent),
                _ => return self.stats.corrupt.inc(),
            },
            Err(Reject::Foreign) => return self.stats.foreign.inc(),
            Err(Reject::Corrupt) => return self.stats.corrupt.inc(),
        };
        match seen {
            Seen::New { reordered } => {
                self.stats.received.inc();
                self.stats.bytes.add(frame.len() as u64);
                if reordered {
                    self.stats.reordered.inc();
                }
                if let Some(sent) = sent {
                    self.latency.record(sent, now(), &self.stats.latency);
                }
            }
            Seen::Duplicate => self.stats.duplicates.inc(),
        }
    }

    /// The state of this tester's stream tagged `tag`: from the cache, or,
    /// when the tester added streams since the cache was filled, from the
    /// cache filled again. `None` for a tag of no stream of this tester.
    #[inline]
    fn stream_by_tag(&mut self, tag: u16) -> Option<&StreamState> {
        let i = usize::from(tag);
        if !matches!(self.streams.get(i), Some(Some(_)))
            && self.tester.streams() != self.streams_added
        {
            self.fill_streams();
        }
        self.streams.get(i)?.as_deref()
    }

    /// Fills the cache with the tester's streams, by tag.
    #[cold]
    fn fill_streams(&mut self) {
        let all = self.tester.all_streams();
        self.streams_added = all.len() as u16;
        for s in all {
            let i = usize::from(s.ids.tag);
            if self.streams.len() <= i {
                self.streams.resize(i + 1, None);
            }
            self.streams[i] = Some(s);
        }
    }

    /// The frame's stream tag (its state cached), flow, sequence number and
    /// send time (when it carries one) when it is a valid frame of this
    /// tester.
    #[inline]
    #[allow(clippy::type_complexity)]
    fn validate(&mut self, frame: &[u8]) -> Result<(u16, u32, u32, Option<u64>), Reject> {
        let (tag, flow, seq) = {
            let lay: &Layout = &self.tester.layout;
            let s = lay.stamp_off;
            if frame.len() < lay.payload_off {
                return Err(Reject::Foreign);
            }
            match (be32(frame, s + field::MAGIC.start) ^ MAGIC).count_ones() {
                0 => {}
                1 | 2 => return Err(Reject::Corrupt),
                _ => return Err(Reject::Foreign),
            }
            let id = be32(frame, s + field::ID.start);
            let seq = be32(frame, s + field::SEQ.start);
            if be32(frame, s + field::CHECK.start) != lay.check(id, seq) {
                return Err(Reject::Corrupt);
            }
            ((id >> 20) as u16, id & (MAX_FLOWS - 1), seq)
        };
        // A valid stamp of a stream this tester does not have: another
        // tester's frame.
        let Some(state) = self.stream_by_tag(tag) else {
            return Err(Reject::Foreign);
        };
        let ids = state.ids;
        if flow >= self.tester.config().flows {
            return Err(Reject::Corrupt);
        }
        let lay: &Layout = &self.tester.layout;
        let len = match lay.l3 {
            L3::Ipv4 => 14 + usize::from(be16(frame, 16)),
            L3::Ipv6 => 54 + usize::from(be16(frame, 18)),
        };
        if len != frame.len() {
            return Err(Reject::Corrupt);
        }
        let want = &mut self.scratch;
        let sent = lay.read_tsc(frame, len);
        let word = lay.write_head(want, ids, flow, seq, len, sent.unwrap_or(0));
        let end = lay.pattern_off(len);
        match lay.l3 {
            L3::Ipv4 => {
                if checksum::checksum(&frame[14..34]) != 0 {
                    return Err(Reject::Corrupt);
                }
                want[22] = frame[22]; // TTL
                want[24..26].copy_from_slice(&frame[24..26]); // header checksum
            }
            L3::Ipv6 => want[21] = frame[21], // hop limit
        }
        if frame[12..end] != want[12..end] || !Layout::payload_ok(&frame[end..], &word) {
            return Err(Reject::Corrupt);
        }
        Ok((tag, flow, seq, sent))
    }
}

impl Drop for Checker {
    /// Publishes the samples not yet published.
    fn drop(&mut self) {
        self.publish_latency();
    }
}
