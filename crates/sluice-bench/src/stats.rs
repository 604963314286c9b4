//! Per-round figures reduced to a median and a spread, and the conversions
//! between TSC cycles, operations and millions of operations per second.

use sluice::tsc;

/// The median of `v`: the middle value, or the mean of the middle two for
/// an even count; 0 for an empty slice.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut sorted = v.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// The median of per-round figures and their extremes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median (see [`median`]).
    pub median: f64,
    /// The smallest figure (the best round, for cycles).
    pub min: f64,
    /// The largest figure.
    pub max: f64,
}

impl Spread {
    /// The spread of `v`; all zero for an empty slice.
    pub fn of(v: &[f64]) -> Spread {
        if v.is_empty() {
            return Spread {
                median: 0.0,
                min: 0.0,
                max: 0.0,
            };
        }
        Spread {
            median: median(v),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// Per-round ratios of `figures` to `reference` (the same round of the
/// reference case): 0 where the reference is not positive. The two are
/// paired round by round, up to the shorter.
///
/// A ratio taken within one round compares two figures measured within a
/// fraction of a second of each other, so a change in the host's load
/// moves both sides alike; the median of these ratios is steadier than the
/// ratio of the two medians.
pub fn ratios(figures: &[f64], reference: &[f64]) -> Vec<f64> {
    figures
        .iter()
        .zip(reference)
        .map(|(f, r)| if *r > 0.0 { f / r } else { 0.0 })
        .collect()
}

/// `part` over `whole` (0 when `whole` is 0): a share such as the timed
/// cycles left out by a cut.
pub fn share(part: u64, whole: u64) -> f64 {
    part as f64 / whole.max(1) as f64
}

/// Cycles per operation: `cycles` over `ops` (at least one op).
pub fn cycles_per_op(cycles: u64, ops: u64) -> f64 {
    cycles as f64 / ops.max(1) as f64
}

/// Millions of operations per second for `ops` done in `cycles` ticks of
/// a `tsc_hz` clock.
pub fn mops_at(ops: u64, cycles: u64, tsc_hz: u64) -> f64 {
    ops as f64 * tsc_hz as f64 / cycles.max(1) as f64 / 1e6
}

/// Millions of operations per second for `ops` done in `cycles` TSC ticks
/// of this machine.
pub fn mops(ops: u64, cycles: u64) -> f64 {
    ops as f64 / tsc::cycles_to_secs(cycles.max(1)) / 1e6
}

/// Millions of operations per second at `cycles_per_op` TSC ticks each
/// (0 for a figure that is not positive).
pub fn mops_per_core(cycles_per_op: f64) -> f64 {
    if cycles_per_op > 0.0 {
        tsc::tsc_hz() as f64 / cycles_per_op / 1e6
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_even_and_empty_sets() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        // An outlier moves the mean, not the median.
        assert_eq!(median(&[10.0, 11.0, 10.5, 900.0, 10.2]), 10.5);
    }

    #[test]
    fn spreads_give_median_min_and_max() {
        assert_eq!(
            Spread::of(&[12.0, 9.5, 30.0, 10.0]),
            Spread {
                median: 11.0,
                min: 9.5,
                max: 30.0
            }
        );
        assert_eq!(
            Spread::of(&[]),
            Spread {
                median: 0.0,
                min: 0.0,
                max: 0.0
            }
        );
    }

    #[test]
    fn ratios_pair_rounds_and_skip_empty_references() {
        assert_eq!(
            ratios(&[20.0, 30.0, 5.0], &[10.0, 0.0, 10.0]),
            [2.0, 0.0, 0.5]
        );
        assert_eq!(ratios(&[1.0, 2.0], &[4.0]), [0.25]);
        assert_eq!(median(&ratios(&[9.0, 12.0, 8.0], &[10.0, 10.0, 10.0])), 0.9);
    }

    #[test]
    fn conversions() {
        assert_eq!(cycles_per_op(10_000, 1000), 10.0);
        assert_eq!(cycles_per_op(500, 0), 500.0);
        // 1000 ops in 10 000 ticks of a 2 GHz clock: 5 µs, 200 Mops.
        assert_eq!(mops_at(1000, 10_000, 2_000_000_000), 200.0);
        assert_eq!(share(1, 4), 0.25);
        assert_eq!(share(0, 0), 0.0);
        let hz = tsc::tsc_hz() as f64;
        assert!((mops(1000, 10_000) - hz / 10.0 / 1e6).abs() < 1e-6 * hz / 1e6);
        assert!((mops_per_core(10.0) - hz / 10.0 / 1e6).abs() < 1e-6 * hz / 1e6);
        assert_eq!(mops_per_core(0.0), 0.0);
    }
}
