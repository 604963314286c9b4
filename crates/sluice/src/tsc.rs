//! The time-stamp counter: cycle counts and its measured frequency.
//!
//! Every "cycles" figure in Sluice — benchmarks, per-packet costs, stats — is a
//! count of **TSC ticks**, not of core clock cycles. On the x86-64 machines Sluice
//! targets the TSC is invariant (constant rate, not stopped in idle states, see
//! [`is_invariant`]) and ticks at the nominal frequency, so the figures are
//! comparable with DPDK's, which uses the same counter (`rte_rdtsc`).
//!
//! On other architectures [`rdtsc`] reads a monotonic nanosecond clock instead
//! and [`tsc_hz`] is exactly 1 GHz.
//!
//! ```
//! use sluice::tsc;
//!
//! let start = tsc::rdtsc_ordered();
//! let x: u64 = (0..1000u64).map(std::hint::black_box).sum();
//! let cycles = tsc::rdtsc_ordered() - start;
//! assert_eq!(x, 499_500);
//! println!("{cycles} cycles = {} ns", tsc::cycles_to_ns(cycles));
//! ```

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Reads the TSC, unordered: the CPU may execute it before earlier or after later
/// instructions. Cheapest; use for coarse timing of long regions.
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC is part of the x86-64 baseline and has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        fallback::now_ns()
    }
}

/// Reads the TSC in program order (`lfence; rdtsc; lfence`): every earlier
/// instruction has completed before the counter is read, and no later one starts
/// before. Use it at both ends of a timed region.
#[inline(always)]
pub fn rdtsc_ordered() -> u64 {
    let t = rdtsc_completed();
    #[cfg(target_arch = "x86_64")]
    // SAFETY: LFENCE (SSE2) is part of the x86-64 baseline and has no memory
    // effects beyond ordering.
    unsafe {
        core::arch::x86_64::_mm_lfence()
    };
    t
}

/// Reads the TSC at the start of a timed region that follows untimed work:
/// a full memory fence (every earlier store has left the store buffer), then
/// `lfence; rdtsc` (every earlier load has completed). So the region does not
/// pay for stores still waiting for their cache lines or loads still in
/// flight from before it — with a plain [`rdtsc`] those finish inside the
/// region and are counted there. Later instructions may start before the
/// counter is read (no trailing fence: its wait would be counted). End the
/// region with [`rdtsc_completed`].
#[inline(always)]
pub fn rdtsc_drained() -> u64 {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    rdtsc_completed()
}

/// Reads the TSC at the end of a timed region: `lfence; rdtsc`, so every
/// instruction of the region has completed (its stores may still sit in the
/// store buffer, as they would in the caller's next steps anyway).
#[inline(always)]
pub fn rdtsc_completed() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_lfence, _rdtsc};
        // SAFETY: LFENCE (SSE2) and RDTSC are part of the x86-64 baseline and have
        // no memory effects beyond ordering.
        unsafe {
            _mm_lfence();
            _rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        fallback::now_ns()
    }
}

/// Whether the CPU reports an invariant TSC (CPUID `0x8000_0007` EDX bit 8):
/// constant rate across frequency changes and idle states. Without it, TSC
/// ticks are not a steady clock. Always `true` on other architectures, whose
/// fallback clock is steady.
pub fn is_invariant() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__cpuid;
        // Leaf 0x8000_0000 reports the highest extended leaf.
        if __cpuid(0x8000_0000).eax < 0x8000_0007 {
            return false;
        }
        let edx = __cpuid(0x8000_0007).edx;
        edx & (1 << 8) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

/// The TSC frequency in Hz (ticks per second).
///
/// Measured once, on the first call (about 150 ms against
/// [`std::time::Instant`]), and cached for the life of the process.
pub fn tsc_hz() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(measure_hz)
}

#[cfg(target_arch = "x86_64")]
fn measure_hz() -> u64 {
    calibrate(Duration::from_millis(150))
}

#[cfg(not(target_arch = "x86_64"))]
fn measure_hz() -> u64 {
    1_000_000_000
}

/// A TSC reading taken as close as possible to an `Instant`: the tightest of a
/// few `rdtsc, Instant::now, rdtsc` brackets, at its midpoint.
fn paired_sample() -> (Instant, u64) {
    let mut best: Option<(u64, Instant, u64)> = None;
    for _ in 0..8 {
        let before = rdtsc_ordered();
        let now = Instant::now();
        let after = rdtsc_ordered();
        let width = after.wrapping_sub(before);
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, now, before + width / 2));
        }
    }
    let (_, now, tsc) = best.expect("eight samples were taken");
    (now, tsc)
}

/// Measures the TSC frequency over about `window`.
fn calibrate(window: Duration) -> u64 {
    let (t0, c0) = paired_sample();
    std::thread::sleep(window);
    let (t1, c1) = paired_sample();
    let ns = t1.duration_since(t0).as_nanos().max(1);
    let ticks = u128::from(c1.wrapping_sub(c0));
    u64::try_from(ticks * 1_000_000_000 / ns).unwrap_or(u64::MAX)
}

/// Converts TSC ticks to nanoseconds (at [`tsc_hz`]).
pub fn cycles_to_ns(cycles: u64) -> u64 {
    let ns = u128::from(cycles) * 1_000_000_000 / u128::from(tsc_hz().max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// Converts TSC ticks to seconds (at [`tsc_hz`]).
pub fn cycles_to_secs(cycles: u64) -> f64 {
    cycles as f64 / tsc_hz().max(1) as f64
}

/// Converts nanoseconds to TSC ticks (at [`tsc_hz`]).
pub fn ns_to_cycles(ns: u64) -> u64 {
    let cycles = u128::from(ns) * u128::from(tsc_hz()) / 1_000_000_000;
    u64::try_from(cycles).unwrap_or(u64::MAX)
}

/// Converts a duration to TSC ticks (at [`tsc_hz`]).
pub fn duration_to_cycles(d: Duration) -> u64 {
    let cycles = d.as_nanos() * u128::from(tsc_hz()) / 1_000_000_000;
    u64::try_from(cycles).unwrap_or(u64::MAX)
}

#[cfg(not(target_arch = "x86_64"))]
mod fallback {
    use std::sync::OnceLock;
    use std::time::Instant;

    /// Nanoseconds since the first call in this process.
    #[inline(always)]
    pub(super) fn now_ns() -> u64 {
        static BASE: OnceLock<Instant> = OnceLock::new();
        let base = *BASE.get_or_init(Instant::now);
        u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rdtsc_does_not_go_backwards() {
        let mut last = rdtsc_ordered();
        for _ in 0..10_000 {
            let now = rdtsc_ordered();
            assert!(now >= last, "TSC went from {last} back to {now}");
            last = now;
        }
        // A region's two ends, as a two-core benchmark times a batch.
        for _ in 0..10_000 {
            let start = rdtsc_drained();
            let end = rdtsc_completed();
            assert!(start >= last && end >= start, "{last}, {start}, {end}");
            last = end;
        }
        // Time passing is what is tested: any pause longer than a tick (a
        // nanosecond at most) will do, so its length does not matter.
        let a = rdtsc();
        std::thread::sleep(Duration::from_millis(1));
        assert!(rdtsc() > a);
    }

    #[test]
    fn tsc_hz_is_plausible_and_cached() {
        let hz = tsc_hz();
        assert!(
            (100_000_000..=10_000_000_000).contains(&hz),
            "implausible TSC frequency {hz} Hz"
        );
        assert_eq!(tsc_hz(), hz);
    }

    #[test]
    fn conversions_round_trip() {
        let hz = tsc_hz();
        assert_eq!(cycles_to_ns(hz), 1_000_000_000);
        assert_eq!(duration_to_cycles(Duration::from_secs(2)), 2 * hz);
        assert!((cycles_to_secs(hz) - 1.0).abs() < 1e-9);
        let back = cycles_to_ns(ns_to_cycles(1_000_000));
        assert!((999_990..=1_000_000).contains(&back), "{back}");
        // Saturates instead of overflowing.
        assert!(cycles_to_ns(u64::MAX) > cycles_to_ns(u64::MAX / 2));
    }
}
