//! The benchmark harness of `sluice bench`.
//!
//! # Method
//! Every figure is measured with the TSC on the core doing the work (cycles
//! are TSC ticks, see `sluice::tsc`), after an untimed warm-up, with
//! results passed through `black_box` and checked (a case that moved fewer
//! elements than it should is an error, not a fast figure). Multi-core
//! cases run on pinned lcore threads that leave a [`SpinBarrier`] together.
//!
//! The machines these figures come from are often shared virtual ones: the
//! host runs other guests' threads on the same physical cores, moves vCPUs
//! around and takes them away for a while. A figure measured in one block
//! of time says as much about the host during that block as about the
//! code. So a comparison of several cases (A, B, C, ...) does not measure
//! A, then B, then C; it measures them in interleaved rounds
//! ([`rounds`]): each round runs every case for one slice, the order
//! changing from round to round, so every case sees the same mix of quiet
//! and busy moments. A case's figure is the median of its per-round figures
//! ([`stats::median`]), which a few disturbed rounds do not move, with the
//! spread of the rounds beside it ([`stats::Spread`]); a comparison is the
//! median of per-round ratios ([`stats::ratios`]), each taken between
//! slices measured a fraction of a second apart. Within a slice, an
//! iteration the thread did not run through (descheduled, its vCPU taken
//! away) can be left out with its work ([`cut`]), and the share left out is
//! reported.
//!
//! Two-core figures also move with how much the two CPUs share one
//! physical core's execution units: the [`contention`] probe measures it,
//! and benchmarks with two-core figures print it beside them.
//!
//! # Output
//! [`Ctx`] prints a table, or with `--json` one JSON object per result line
//! on stdout (notes and skipped cases then go to stderr); [`BenchResult`]
//! holds the fields every result has.

pub mod baseline;
pub mod contention;
pub mod cut;
pub mod lcores;
pub mod report;
pub mod rounds;
pub mod stats;

pub use cut::{CutPolicy, IterationTimes};
pub use lcores::{SpinBarrier, Stall, Worker, on_lcore, on_lcores, panic_message, unique_name};
pub use report::{
    BenchResult, Ctx, DPDK_REFERENCE_MACHINE, Sample, dpdk_reference_note, emit, emit_err,
    wrap_lines,
};
pub use rounds::{interleave, round_order};
pub use stats::{Spread, median, mops, ratios};
