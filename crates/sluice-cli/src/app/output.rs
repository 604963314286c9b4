//! Program output: one line at a time on stdout, text or JSON.

use std::io::Write;

/// Writes one line to stdout and flushes it (results appear as they are
/// measured). If stdout is a closed pipe (`sluice bench ring --json | head`),
/// the reader wants no more: exit quietly with success.
pub fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let r = writeln!(out, "{line}").and_then(|()| out.flush());
    if let Err(e) = r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("sluice: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}
