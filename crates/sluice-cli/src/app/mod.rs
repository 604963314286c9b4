//! The application layer: what the commands are built from. It never uses
//! a command.
//!
//! - [`options`]: the forwarding options ([`options::FwdArgs`]), engines,
//!   MAC and seconds parsers.
//! - [`ports`]: opening ports from specs, their peers, the testers they are
//!   cabled to, starting and stopping them.
//! - [`lcores`]: the lcores' CPUs and threads, the main thread's stats loop,
//!   panic messages, stall detection.
//! - [`signal`]: SIGINT/SIGTERM end a run cleanly; a second one at once.
//! - [`drain`]: the end of a run, until the testers' counts add up.
//! - [`output`], [`stats`], [`window`], [`summary`]: what a run prints —
//!   lines on stdout, live stats, a measured window, the summary.
//! - [`run`]: the frame of a forwarding command: pool, ports, the
//!   forwarding phase, the summary.
//! - [`io`]: the io/mac/macswap/rxonly/txonly/recycle forwarding engines.
//! - [`l3`]: the IPv4/IPv6 router of `sluice l3fwd`.
//! - [`dist`]: the distributor pipeline of `sluice dist`.
//! - [`progress`]: progress of long work on stderr, a bar on a terminal.
//! - [`observe`]: what a running command shows to telemetry, metrics and
//!   `sluice stats`.
//! - [`latency`]: testers' one-way latency in summaries, and `--hist-out`
//!   (HdrHistogram interval log and percentile plot).

pub mod dist;
pub mod drain;
pub mod io;
pub mod l3;
pub mod latency;
pub mod lcores;
pub mod observe;
pub mod options;
pub mod output;
pub mod ports;
pub mod progress;
pub mod run;
pub mod signal;
pub mod stats;
pub mod summary;
pub mod window;
