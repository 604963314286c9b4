//! Program output: one line at a time on stdout, text or JSON.

/// Writes one line to stdout and flushes it; a closed pipe ends the
/// process quietly (the reader wants no more).
pub use sluice_bench::emit;
