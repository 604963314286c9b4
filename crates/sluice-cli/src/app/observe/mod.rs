//! Watching a running command from outside: what it shows to telemetry,
//! Prometheus and `sluice stats`.
//!
//! - [`snapshot`]: the whole view of a running instance in one object
//!   (`/sluice/snapshot`), as `sluice stats` reads it.
//! - [`capture`]: the capture taps the lcores call and the server
//!   `sluice capture` talks to.

pub mod capture;

// Filled by the telemetry handlers and read by `sluice stats`, both being
// built on this model.
#[allow(dead_code)]
pub mod snapshot;
