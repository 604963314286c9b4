//! Support shared by the stress tests.

mod rng;

pub(crate) use rng::Rng;

/// Operations per thread: `debug` in a debug build, `release` otherwise;
/// `SLUICE_STRESS_OPS` overrides both.
pub(crate) fn ops_per_thread(debug: u64, release: u64) -> u64 {
    std::env::var("SLUICE_STRESS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            debug
        } else {
            release
        })
}
