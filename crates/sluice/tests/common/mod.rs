//! Support shared by the stress tests: the generator and the counts.
#![allow(dead_code)]

mod rng;

pub(crate) use rng::Rng;

/// Operations per thread: `debug` in a debug build, `release` otherwise;
/// `SLUICE_STRESS_OPS` overrides both.
pub(crate) fn ops_per_thread(debug: u64, release: u64) -> u64 {
    count_from_env("SLUICE_STRESS_OPS", debug, release)
}

/// The number in the environment variable `var`, else `debug` in a debug
/// build and `release` otherwise.
pub(crate) fn count_from_env(var: &str, debug: u64, release: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            debug
        } else {
            release
        })
}
