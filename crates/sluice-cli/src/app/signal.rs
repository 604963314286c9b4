//! SIGINT and SIGTERM: the first asks the run to stop cleanly (the
//! pipeline drains, the ports stop and the summary is printed); a second
//! ends the process at once. The handler is the library's
//! [`sluice::signal`]; this module only gives it the command's notes.

use sluice::signal::{InterruptNotes, on_interrupt_with_notes};

/// What the handler writes to stderr on the first and the second signal.
static NOTES: InterruptNotes = InterruptNotes {
    first: "sluice: stopping (a second SIGINT or SIGTERM ends the process at once)\n",
    second: "sluice: second signal: ending at once\n",
};

/// Whether SIGINT or SIGTERM was seen since [`catch_signals`].
pub(crate) use sluice::signal::interrupted;

/// From now on SIGINT and SIGTERM end the run early (see [`interrupted`]):
/// the pipeline drains, ports stop and the summary is printed. A system
/// that refuses the handler leaves the defaults (the signal ends the
/// process), said once on stderr.
pub(crate) fn catch_signals() {
    if let Err(e) = on_interrupt_with_notes(&NOTES) {
        eprintln!("sluice: cannot catch SIGINT/SIGTERM ({e}); a signal ends the process at once");
    }
}
