//! The time-stamp counter (STUB — being written).

/// Reads the TSC.
#[inline(always)]
pub fn rdtsc() -> u64 {
    0
}
