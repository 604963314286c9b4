//! One-way latency: every valid frame that carries a send time (see
//! [`frame`](super::frame)) gives a sample, `now - tsc` in nanoseconds, into
//! an HdrHistogram of its checker's port.
//!
//! **No lock per frame.** A checker records into a histogram of its own
//! (`Recorder`) and adds it into a shared one (a `Mutex` per checker) at
//! most every [`PUBLISH_MS`] of TSC time, with `try_lock`: when a reader
//! holds the lock the checker keeps its samples and tries again on a later
//! frame, so it never waits. Readers ([`Tester::latency`](super::Tester::latency))
//! lock each checker's shared histogram in turn and merge them per port; they
//! see every sample older than [`PUBLISH_MS`], and all of them once the
//! checkers are dropped or [`publish`](super::Checker::publish_latency)ed.
//!
//! Both ends read the same TSC (the generator and the checker run in one
//! process on one machine), so the difference is a one-way time.

use std::fmt;
use std::sync::{Mutex, PoisonError};

use hdrhistogram::Histogram;

use super::frame::TSC_MASK;

/// The longest latency told apart, in nanoseconds (60 s): longer samples
/// are counted as this.
pub const LATENCY_MAX_NS: u64 = 60_000_000_000;

/// Significant decimal digits the histograms keep.
pub const LATENCY_SIGFIG: u8 = 3;

/// How often, in milliseconds of TSC time, a checker adds its samples into
/// the histogram readers see.
pub const PUBLISH_MS: u64 = 50;

/// An empty latency histogram: 1 ns to [`LATENCY_MAX_NS`] (0 recordable
/// too), [`LATENCY_SIGFIG`] significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_MAX_NS, LATENCY_SIGFIG)
        .expect("1 ns to 60 s at 3 digits is a valid histogram")
}

/// One port's latency histogram (nanoseconds), merged over the checkers of
/// the port.
#[derive(Debug, Clone)]
pub struct PortLatency {
    /// The port whose transmitted frames the checkers saw.
    pub port: u16,
    /// One-way latency of every frame measured, in nanoseconds.
    pub histogram: Histogram<u64>,
}

impl PortLatency {
    /// Its figures.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary::of(&self.histogram)
    }
}

/// The figures of a latency histogram, in nanoseconds; all 0 when it has
/// no sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencySummary {
    /// Frames measured.
    pub samples: u64,
    /// Shortest.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Longest.
    pub max_ns: u64,
}

impl LatencySummary {
    /// The figures of `h` (each value the highest of its bucket, as
    /// HdrHistogram reports them; the minimum the lowest).
    pub fn of(h: &Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            samples: h.len(),
            min_ns: h.min(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }
}

/// A time in nanoseconds with a unit that keeps it short: `850 ns`,
/// `12.3 us`, `4.56 ms`, `1.20 s`.
pub fn format_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

impl fmt::Display for LatencySummary {
    /// `samples 1000, min 1.2 us, p50 ..., p90 ..., p99 ..., p99.9 ..., max
    /// ...`, or `no samples`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.samples == 0 {
            return f.write_str("no samples");
        }
        write!(
            f,
            "samples {}, min {}, p50 {}, p90 {}, p99 {}, p99.9 {}, max {}",
            self.samples,
            format_ns(self.min_ns),
            format_ns(self.p50_ns),
            format_ns(self.p90_ns),
            format_ns(self.p99_ns),
            format_ns(self.p999_ns),
            format_ns(self.max_ns)
        )
    }
}

/// A checker's shared latency histogram, read by the tester.
#[derive(Debug)]
pub(crate) struct SharedLatency {
    /// The port the checker serves.
    pub(crate) port: u16,
    pub(crate) histogram: Mutex<Histogram<u64>>,
}

impl SharedLatency {
    pub(crate) fn new(port: u16) -> SharedLatency {
        SharedLatency {
            port,
            histogram: Mutex::new(latency_histogram()),
        }
    }

    /// Adds the published samples into `into`.
    pub(crate) fn add_to(&self, into: &mut Histogram<u64>) {
        let h = self
            .histogram
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Same bounds on both sides: cannot fail.
        let _ = into.add(&*h);
    }
}

/// A checker's own histogram and when it last published it (see the module
/// docs).
#[derive(Debug)]
pub(crate) struct Recorder {
    local: Histogram<u64>,
    /// Nanoseconds per TSC tick, times 2^32.
    ns_per_tick_q32: u64,
    /// TSC ticks between publications.
    publish_ticks: u64,
    /// TSC reading of the last publication (or of the first sample); `None`
    /// before the first sample.
    published_at: Option<u64>,
}

impl Recorder {
    /// A recorder; reads the TSC frequency (measured on the process's first
    /// call, so here, where a port is set up, rather than on the first
    /// frame checked).
    pub(crate) fn new() -> Recorder {
        let hz = crate::tsc::tsc_hz().max(1);
        Recorder {
            local: latency_histogram(),
            ns_per_tick_q32: ((1_000_000_000u128 << 32) / u128::from(hz)).max(1) as u64,
            publish_ticks: hz / 1000 * PUBLISH_MS,
            published_at: None,
        }
    }

    /// Records the frame sent at `sent` (48 bits) and received at `now`
    /// (TSC ticks), then publishes into `shared` when it is time and the
    /// lock is free.
    #[inline]
    pub(crate) fn record(&mut self, sent: u64, now: u64, shared: &SharedLatency) {
        let ticks = now.wrapping_sub(sent) & TSC_MASK;
        let ns = (u128::from(ticks) * u128::from(self.ns_per_tick_q32)) >> 32;
        self.local
            .saturating_record(u64::try_from(ns).unwrap_or(u64::MAX));
        let since = *self.published_at.get_or_insert(now);
        // Signed: a reading behind the last publication (another core's
        // TSC, a little behind) is not a long time after it.
        if now.wrapping_sub(since) as i64 >= self.publish_ticks as i64
            && let Ok(mut h) = shared.histogram.try_lock()
        {
            Self::move_into(&mut self.local, &mut h);
            self.published_at = Some(now);
        }
    }

    /// Publishes every sample recorded, waiting for the lock.
    pub(crate) fn publish(&mut self, shared: &SharedLatency) {
        if self.local.is_empty() {
            return;
        }
        let mut h = shared
            .histogram
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Self::move_into(&mut self.local, &mut h);
    }

    fn move_into(local: &mut Histogram<u64>, shared: &mut Histogram<u64>) {
        // Same bounds on both sides: cannot fail.
        let _ = shared.add(&*local);
        local.reset();
    }
}
