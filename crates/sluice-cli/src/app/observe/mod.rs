//! Watching a running command from outside: what it shows to telemetry,
//! Prometheus and `sluice stats`.
//!
//! - [`snapshot`]: the whole view of a running instance in one object
//!   (`/sluice/snapshot`), as `sluice stats` reads it.
//! - [`drops`]: every drop counter of a run by reason and port, the
//!   snapshot's `drops` and the summaries' `drops_by_reason`.
//! - [`census`]: where every buffer of the run's pool is, each stats period
//!   and in the summary.

pub mod census;
pub mod drops;

// Filled by the telemetry handlers and read by `sluice stats`, both being
// built on this model.
#[allow(dead_code)]
pub mod snapshot;
