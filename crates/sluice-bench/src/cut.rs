//! Leaving out the iterations the thread did not run through.
//!
//! On a shared host a timed thread is sometimes descheduled, or its vCPU
//! taken away, for tens of microseconds to milliseconds: no change to the
//! code under test would make that iteration faster. A benchmark that
//! times each iteration (one burst, one poll of every stream, one batch)
//! leaves out those far longer than the usual, with the work they did, and
//! reports the share of time left out beside its figures.

use sluice::tsc;

/// When an iteration counts as interrupted: longer than `min_us`
/// microseconds and than `factor` times the mean iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutPolicy {
    /// The shortest iteration ever left out, in µs.
    pub min_us: u64,
    /// How many mean iterations an iteration must exceed to be left out
    /// (0: `min_us` alone decides).
    pub factor: u64,
}

impl CutPolicy {
    /// A policy cutting iterations over `min_us` µs and `factor` means.
    pub const fn new(min_us: u64, factor: u64) -> CutPolicy {
        CutPolicy { min_us, factor }
    }

    /// The longest iteration kept, in ticks of a `tsc_hz` clock, for
    /// iterations of `mean` ticks on average.
    pub fn threshold_at(&self, tsc_hz: u64, mean: u64) -> u64 {
        (tsc_hz / 1_000_000 * self.min_us).max(self.factor.saturating_mul(mean))
    }

    /// [`CutPolicy::threshold_at`] with this machine's TSC.
    pub fn threshold(&self, mean: u64) -> u64 {
        self.threshold_at(tsc::tsc_hz(), mean)
    }
}

/// Timed iterations, split into those kept and those left out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IterationTimes {
    /// Ticks of the iterations kept.
    pub kept: u64,
    /// Ticks of the iterations left out.
    pub excluded: u64,
    /// Iterations, kept or not.
    pub iterations: u64,
}

impl IterationTimes {
    /// Adds one iteration of `span` ticks; `true` if it is kept (not over
    /// `cut`), so the caller counts its work too.
    #[inline(always)]
    pub fn record(&mut self, span: u64, cut: u64) -> bool {
        self.iterations += 1;
        if span > cut {
            self.excluded += span;
            false
        } else {
            self.kept += span;
            true
        }
    }

    /// The mean iteration, kept or not, in ticks.
    pub fn mean(&self) -> u64 {
        (self.kept + self.excluded) / self.iterations.max(1)
    }

    /// The cut for later runs after this one (a warm-up with every
    /// iteration kept): `policy`'s threshold for this run's mean.
    pub fn cut(&self, policy: CutPolicy) -> u64 {
        policy.threshold(self.mean())
    }

    /// The share of timed ticks left out.
    pub fn excluded_share(&self) -> f64 {
        crate::stats::share(self.excluded, self.kept + self.excluded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_take_the_larger_of_time_and_factor() {
        let p = CutPolicy::new(100, 10);
        // 2 GHz: 100 µs is 200 000 ticks.
        assert_eq!(p.threshold_at(2_000_000_000, 1_000), 200_000);
        assert_eq!(p.threshold_at(2_000_000_000, 50_000), 500_000);
        assert_eq!(
            CutPolicy::new(50, 0).threshold_at(3_000_000_000, 1 << 40),
            150_000
        );
    }

    #[test]
    fn iterations_over_the_cut_are_left_out() {
        let mut t = IterationTimes::default();
        assert!(t.record(100, 1000));
        assert!(t.record(1000, 1000));
        assert!(!t.record(5000, 1000));
        assert!(t.record(900, 1000));
        assert_eq!(
            t,
            IterationTimes {
                kept: 2000,
                excluded: 5000,
                iterations: 4
            }
        );
        assert_eq!(t.mean(), 1750);
        assert_eq!(t.excluded_share(), 5000.0 / 7000.0);
        assert_eq!(IterationTimes::default().excluded_share(), 0.0);
    }
}
