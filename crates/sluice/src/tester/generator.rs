//! [`Generator`]: writes a stream's frames, round-robin over a subset of its
//! flows, at full speed or a rate, up to a count.
//!
//! **Count.** A stream's `count` is spread over its flows: flow `f` may send
//! `count / flows` frames, plus one when `f < count % flows`. A generator's
//! limit is the sum over its flows of what each has left, so generators of
//! one stream need no shared counter and their limits add up exactly.
//!
//! **Rate.** Flow by flow too: a generator with `k` of the stream's `n`
//! flows paces at `rate * k / n` frames per second, a token bucket on the
//! caller's TSC readings in exact integer arithmetic (milli-frames per
//! second against TSC ticks, so the frames allowed after `t` ticks are
//! `1 + floor(t * rate / hz)`). A caller that falls behind gets at most
//! `max(32, 1 ms of frames)` at once; the rest of the lag is forgotten.
//!
//! **Sequence numbers** are per flow and kept in the tester too (one relaxed
//! store per frame), so a new generator for the same flows continues them.
//! [`cancel`](Generator::cancel) takes the last frame back entirely: its
//! sequence number, its place in the flow and size order, its token and its
//! count in `sent`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::counter::Counter;
use crate::tsc;

use super::config::FrameSize;
use super::frame::Layout;
use super::report::TesterReport;
use super::{StreamState, Tester};

/// The IMIX frame sizes in the order generators send them: 64, 570 and 1518
/// bytes at 7:4:1, interleaved.
pub const IMIX_ORDER: [u16; 12] = [64, 570, 64, 64, 570, 64, 64, 570, 64, 1518, 570, 64];

/// A generator's counts, read by [`Tester::report`].
#[derive(Debug, Default)]
pub(crate) struct GenStats {
    frames: Counter,
    bytes: Counter,
    cancelled: Counter,
    cancelled_bytes: Counter,
    short: Counter,
}

impl GenStats {
    pub(crate) fn add_to(&self, r: &mut TesterReport) {
        r.sent += self.frames.get().wrapping_sub(self.cancelled.get());
        r.bytes_sent += self.bytes.get().wrapping_sub(self.cancelled_bytes.get());
        r.short_buffers += self.short.get();
    }
}

/// Paces frames on TSC readings (see the module docs).
#[derive(Debug)]
struct Pacer {
    /// Rate in milli-frames per second.
    num: u128,
    /// TSC ticks per second, times 1000.
    den: u128,
    started: bool,
    /// Start of the current accounting period.
    t0: u64,
    /// Frames allowed at `t0`.
    base: u64,
    /// Frames taken since `t0`.
    taken: u64,
    /// Frames known to be allowed and not yet taken (saves a division).
    credit: u64,
    /// Most frames allowed at once.
    cap: u64,
}

impl Pacer {
    fn new(pps: f64, hz: u64) -> Pacer {
        Pacer {
            num: ((pps * 1000.0).round() as u128).max(1),
            den: u128::from(hz.max(1)) * 1000,
            started: false,
            t0: 0,
            base: 0,
            taken: 0,
            credit: 0,
            cap: ((pps / 1000.0) as u64).max(32),
        }
    }

    /// Frames allowed at `now` and not yet taken (uncapped).
    fn available(&self, now: u64) -> u64 {
        if !self.started {
            return 1;
        }
        let dt = u128::from(now.saturating_sub(self.t0));
        // No overflow for rates up to `MAX_RATE`; saturating past it.
        let allowed = u128::from(self.base).saturating_add(dt.saturating_mul(self.num) / self.den);
        u64::try_from(allowed.saturating_sub(u128::from(self.taken))).unwrap_or(u64::MAX)
    }

    fn ready(&self, now: u64) -> u64 {
        self.available(now).min(self.cap)
    }

    fn take(&mut self, now: u64) -> bool {
        if self.credit > 0 {
            self.credit -= 1;
            self.taken += 1;
            return true;
        }
        if !self.started {
            self.started = true;
            (self.t0, self.base, self.taken) = (now, 1, 0);
        }
        let mut avail = self.available(now);
        if avail > self.cap {
            (self.t0, self.base, self.taken) = (now, self.cap, 0);
            avail = self.cap;
        }
        if avail == 0 {
            return false;
        }
        self.credit = avail - 1;
        self.taken += 1;
        true
    }

    fn untake(&mut self) {
        self.taken -= 1;
        self.credit += 1;
    }
}

/// What [`Generator::cancel`] restores.
#[derive(Debug, Clone, Copy)]
struct Last {
    idx: usize,
    pos: usize,
    size_pos: usize,
    len: usize,
}

/// Writes one stream's frames for a subset of its flows (see the module
/// docs). Made by [`Tester::generator`]; polled by one thread.
#[derive(Debug)]
pub struct Generator {
    tester: Arc<Tester>,
    stream_id: u16,
    stream: Arc<StreamState>,
    /// The flows, ascending.
    flows: Vec<u32>,
    /// Next sequence number of each flow.
    seqs: Vec<u64>,
    /// Per-flow count limit: `base`, plus one below flow `extra`.
    budget: Option<(u64, u64)>,
    /// Frames left under the count limit.
    remaining: Option<u64>,
    /// Index in `flows` of the next flow.
    pos: usize,
    /// Frame sizes in sending order: `sizes[..n_sizes]`.
    sizes: [u16; IMIX_ORDER.len()],
    n_sizes: usize,
    size_pos: usize,
    min_len: usize,
    pacer: Option<Pacer>,
    last: Option<Last>,
    stats: Arc<GenStats>,
}

impl Generator {
    pub(crate) fn new(
        tester: Arc<Tester>,
        stream_id: u16,
        stream: Arc<StreamState>,
        mut flows: Vec<u32>,
        stats: Arc<GenStats>,
    ) -> Generator {
        let c = tester.config();
        let n = c.flows;
        flows.sort_unstable();
        flows.dedup();
        if let Some(&bad) = flows.iter().find(|&&f| f >= n) {
            panic!("flow {bad} is not below the tester's {n} flows");
        }
        let seqs: Vec<u64> = flows
            .iter()
            .map(|&f| stream.next_seq[f as usize].load(Ordering::Relaxed))
            .collect();
        let budget = c
            .count
            .map(|count| (count / u64::from(n), count % u64::from(n)));
        let remaining = budget.map(|b| {
            flows
                .iter()
                .zip(&seqs)
                .map(|(&f, &s)| flow_budget(b, f).saturating_sub(s))
                .sum()
        });
        let (sizes, n_sizes) = match c.size {
            FrameSize::Fixed(len) => ([len; IMIX_ORDER.len()], 1),
            FrameSize::Imix => (IMIX_ORDER, IMIX_ORDER.len()),
        };
        let pacer = c
            .rate_pps
            .filter(|_| !flows.is_empty())
            .map(|pps| Pacer::new(pps * flows.len() as f64 / f64::from(n), tsc::tsc_hz()));
        let min_len = tester.layout.payload_off;
        Generator {
            tester,
            stream_id,
            stream,
            flows,
            seqs,
            budget,
            remaining,
            pos: 0,
            sizes,
            n_sizes,
            size_pos: 0,
            min_len,
            pacer,
            last: None,
            stats,
        }
    }

    /// The stream this generator sends.
    pub fn stream(&self) -> u16 {
        self.stream_id
    }

    /// The flows this generator sends, ascending.
    pub fn flows(&self) -> &[u32] {
        &self.flows
    }

    /// Length of the next frame (IMIX varies): the configured size, or the
    /// headers plus stamp when that is longer.
    #[inline]
    pub fn frame_len(&self) -> usize {
        usize::from(self.sizes[self.size_pos]).max(self.min_len)
    }

    /// Writes the next frame into `buf[..len]` and returns `len`. The frame
    /// carries `now_tsc` as its send time when it has room (see
    /// [`frame`](super::frame)): pass a TSC reading
    /// ([`tsc::rdtsc`](crate::tsc::rdtsc), one for a burst) for checkers to
    /// measure latency against.
    ///
    /// `None` when the rate allows no frame at `now_tsc`, when the count is
    /// reached, when the generator has no flows, when the tester is paused
    /// ([`Tester::pause`]), or when `buf` is shorter
    /// than [`frame_len`](Self::frame_len) (counted in the report's
    /// `short_buffers`); nothing is consumed then.
    #[inline]
    pub fn fill(&mut self, buf: &mut [u8], now_tsc: u64) -> Option<usize> {
        if self.flows.is_empty() || self.remaining == Some(0) || self.tester.is_paused() {
            return None;
        }
        let len = self.frame_len();
        if buf.len() < len {
            self.stats.short.inc();
            return None;
        }
        let mut idx = self.pos;
        if let Some(b) = self.budget {
            // Some flow has frames left (remaining > 0): skip those that have not.
            while self.seqs[idx] >= flow_budget(b, self.flows[idx]) {
                idx = if idx + 1 == self.flows.len() {
                    0
                } else {
                    idx + 1
                };
            }
        }
        if let Some(p) = &mut self.pacer
            && !p.take(now_tsc)
        {
            return None;
        }
        let seq = self.seqs[idx];
        let flow = self.flows[idx];
        let layout = &self.tester.layout;
        let word = layout.write_head(buf, self.stream.ids, flow, seq as u32, len, now_tsc);
        Layout::fill_payload(&mut buf[layout.pattern_off(len)..len], &word);
        self.seqs[idx] = seq + 1;
        self.stream.next_seq[flow as usize].store(seq + 1, Ordering::Relaxed);
        self.last = Some(Last {
            idx,
            pos: self.pos,
            size_pos: self.size_pos,
            len,
        });
        self.pos = if idx + 1 == self.flows.len() {
            0
        } else {
            idx + 1
        };
        self.size_pos += 1;
        if self.size_pos == self.n_sizes {
            self.size_pos = 0;
        }
        if let Some(r) = &mut self.remaining {
            *r -= 1;
        }
        self.stats.frames.inc();
        self.stats.bytes.add(len as u64);
        Some(len)
    }

    /// How many frames [`fill`](Self::fill) would write at `now_tsc`: what
    /// the rate allows (`u64::MAX` at full speed), at most what the count
    /// leaves; 0 for a generator without flows or a paused tester.
    pub fn ready(&self, now_tsc: u64) -> u64 {
        if self.flows.is_empty() || self.tester.is_paused() {
            return 0;
        }
        let rate = self.pacer.as_ref().map_or(u64::MAX, |p| p.ready(now_tsc));
        rate.min(self.remaining.unwrap_or(u64::MAX))
    }

    /// Takes back the last frame [`fill`](Self::fill) wrote (it was not
    /// accepted, e.g. no descriptor was free): its sequence number is sent
    /// again next, and it counts neither as sent nor as lost. Does nothing
    /// when no frame was written since the last cancel.
    pub fn cancel(&mut self) {
        let Some(l) = self.last.take() else {
            return;
        };
        self.seqs[l.idx] -= 1;
        self.stream.next_seq[self.flows[l.idx] as usize].store(self.seqs[l.idx], Ordering::Relaxed);
        self.pos = l.pos;
        self.size_pos = l.size_pos;
        if let Some(r) = &mut self.remaining {
            *r += 1;
        }
        if let Some(p) = &mut self.pacer {
            p.untake();
        }
        self.stats.cancelled.inc();
        self.stats.cancelled_bytes.add(l.len as u64);
    }
}

/// Frames flow `f` may send under the per-flow split `(base, extra)`.
#[inline(always)]
fn flow_budget((base, extra): (u64, u64), f: u32) -> u64 {
    base + u64::from(u64::from(f) < extra)
}
