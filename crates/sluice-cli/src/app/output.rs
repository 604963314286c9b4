//! Program output: one line at a time on stdout, text or JSON.

/// Writes one line to stdout and flushes it; a closed pipe ends the
/// process quietly (the reader wants no more).
pub use sluice_bench::emit;

use serde::Serialize;

/// Writes `value` as one JSON object on one line; when it cannot be
/// encoded, says so on stderr instead (`{context}: cannot encode {what}:
/// ERROR`).
pub fn emit_json<T: Serialize>(value: &T, context: &str, what: &str) {
    match serde_json::to_string(value) {
        Ok(line) => emit(&line),
        Err(e) => eprintln!("{context}: cannot encode {what}: {e}"),
    }
}
