//! SIGINT and SIGTERM: the first asks the run to stop cleanly (the
//! pipeline drains, the ports stop and the summary is printed); a second
//! ends the process at once.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT or SIGTERM: end the run early (the summary is still
/// printed).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Writes `msg` to stderr from a signal handler.
fn signal_safe_note(msg: &[u8]) {
    // SAFETY: `write` is async-signal-safe; `msg` is valid for its length.
    let _ = unsafe { libc::write(libc::STDERR_FILENO, msg.as_ptr().cast(), msg.len()) };
}

/// The first SIGINT or SIGTERM asks for a clean stop; a second one ends the
/// process at once (exit status 128 + the signal), whatever the stop is
/// waiting for.
extern "C" fn on_signal(sig: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::Relaxed) {
        signal_safe_note(b"sluice: second signal: ending at once\n");
        // SAFETY: `_exit` is async-signal-safe and ends the process without
        // running anything else.
        unsafe { libc::_exit(128 + sig) };
    }
    signal_safe_note(b"sluice: stopping (a second SIGINT or SIGTERM ends the process at once)\n");
}

/// Whether SIGINT or SIGTERM was seen since [`catch_signals`].
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// From now on SIGINT and SIGTERM end the run early (see [`interrupted`]):
/// the pipeline drains, ports stop and the summary is printed.
pub(crate) fn catch_signals() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only swaps an atomic and calls `write` and
        // `_exit`, all async-signal-safe; `signal` has no other
        // precondition.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}
