//! Ending a run on Ctrl-C (SIGINT) or SIGTERM, without `unsafe` in the
//! application.
//!
//! [`on_interrupt`] installs a handler for both signals and returns the flag
//! it sets. The first signal sets the flag and nothing else: the
//! application sees it in its loop, stops its ports and prints its summary.
//! A second signal, while the flag is still set, ends the process at once
//! with exit status 128 + the signal number (130 for SIGINT), whatever the
//! clean stop is waiting for. Clearing the flag (`store(false)`) makes the
//! next signal a first one again.
//!
//! ```no_run
//! use std::sync::atomic::Ordering;
//!
//! fn main() -> sluice::Result<()> {
//!     let stop = sluice::signal::on_interrupt()?;
//!     while !stop.load(Ordering::Relaxed) {
//!         // poll the ports
//!     }
//!     // stop the ports, print the stats
//!     Ok(())
//! }
//! ```

use std::io;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// Set by SIGINT or SIGTERM once [`on_interrupt`] has run.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The notes the handler writes to stderr; null for none. Only ever set
/// from a `&'static InterruptNotes`.
static NOTES: AtomicPtr<InterruptNotes> = AtomicPtr::new(ptr::null_mut());

/// What the handler writes to stderr, so that a user who pressed Ctrl-C
/// knows the process heard it (see [`on_interrupt_with_notes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterruptNotes {
    /// Written on the first signal (the run is stopping).
    pub first: &'static str,
    /// Written on a second signal, just before the process ends.
    pub second: &'static str,
}

/// From now on SIGINT and SIGTERM set the returned flag; a second one, with
/// the flag still set, ends the process at once (exit status 128 + the
/// signal). Nothing is written. Calling it again is harmless: the handler
/// and the flag stay the same, and notes set by
/// [`on_interrupt_with_notes`] are removed.
///
/// # Errors
///
/// [`Error::Io`](crate::Error::Io) if the system refuses the handler.
pub fn on_interrupt() -> crate::Result<&'static AtomicBool> {
    install(ptr::null_mut())
}

/// As [`on_interrupt`], and the handler writes `notes.first` to stderr on
/// the first signal and `notes.second` on the second.
///
/// ```no_run
/// use sluice::signal::{InterruptNotes, on_interrupt_with_notes};
///
/// static NOTES: InterruptNotes = InterruptNotes {
///     first: "app: stopping (a second Ctrl-C ends the process at once)\n",
///     second: "app: second signal: ending at once\n",
/// };
/// let stop = on_interrupt_with_notes(&NOTES)?;
/// # Ok::<(), sluice::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Io`](crate::Error::Io) if the system refuses the handler.
pub fn on_interrupt_with_notes(
    notes: &'static InterruptNotes,
) -> crate::Result<&'static AtomicBool> {
    install(ptr::from_ref(notes).cast_mut())
}

/// Whether SIGINT or SIGTERM came since [`on_interrupt`] (and since the flag
/// was last cleared).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Sets the notes, then installs the handler for SIGINT and SIGTERM.
fn install(notes: *mut InterruptNotes) -> crate::Result<&'static AtomicBool> {
    NOTES.store(notes, Ordering::Release);
    let handler: extern "C" fn(libc::c_int) = on_signal;
    // SAFETY: `sigaction` is a plain C struct of integers, a function
    // pointer and a signal set, for which all zero bytes are a valid value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as libc::sighandler_t;
    // Restart interrupted system calls, as `signal` does on Linux.
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `sa_mask` is a valid, writable signal set.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `action` is initialised and names a handler that only
        // touches atomics and calls `write` and `_exit`, all
        // async-signal-safe; a null old action is allowed.
        if unsafe { libc::sigaction(sig, &action, ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error().into());
        }
    }
    Ok(&INTERRUPTED)
}

/// Writes `msg` to stderr; async-signal-safe.
fn write_stderr(msg: &str) {
    // SAFETY: `write` is async-signal-safe; `msg` is valid for its length.
    let _ = unsafe { libc::write(libc::STDERR_FILENO, msg.as_ptr().cast(), msg.len()) };
}

/// The first signal sets the flag; a second one, with the flag still set,
/// ends the process. Only atomics, `write` and `_exit`: all
/// async-signal-safe.
extern "C" fn on_signal(sig: libc::c_int) {
    let notes = NOTES.load(Ordering::Acquire);
    // SAFETY: `NOTES` is null or comes from a `&'static InterruptNotes`,
    // which lives for the whole process and is only read.
    let notes = unsafe { notes.as_ref() };
    if INTERRUPTED.swap(true, Ordering::Relaxed) {
        if let Some(notes) = notes {
            write_stderr(notes.second);
        }
        // SAFETY: `_exit` is async-signal-safe and ends the process without
        // running anything else.
        unsafe { libc::_exit(128 + sig) };
    }
    if let Some(notes) = notes {
        write_stderr(notes.first);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::AsRawFd;

    use super::*;

    /// The only test that takes signals in the test process itself: a
    /// second test doing so could see the flag already set and end the
    /// process.
    #[test]
    fn sigint_and_sigterm_set_the_flag() {
        let flag = on_interrupt().expect("handler installed");
        let again = on_interrupt().expect("installing twice is harmless");
        assert!(ptr::eq(flag, again));
        flag.store(false, Ordering::Relaxed);
        assert!(!interrupted());

        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: `raise` has no precondition; the handler runs on this
            // thread before it returns.
            assert_eq!(unsafe { libc::raise(sig) }, 0);
            assert!(flag.load(Ordering::Relaxed), "signal {sig} set no flag");
            assert!(interrupted());
            flag.store(false, Ordering::Relaxed);
        }

        // Give the test process its default handlers back.
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: `SIG_DFL` is a valid disposition for both signals.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }

    #[test]
    fn a_second_signal_ends_the_process_after_the_notes() {
        static NOTES: InterruptNotes = InterruptNotes {
            first: "first note\n",
            second: "second note\n",
        };
        let (mut reader, writer) = io::pipe().expect("a pipe");
        // SAFETY: `fork` has no precondition; the child below calls only
        // async-signal-safe functions (sigaction, dup2, raise, _exit) and
        // atomics, as a child of a threaded process must.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: both are open descriptors; `dup2` makes the pipe the
            // child's stderr.
            unsafe { libc::dup2(writer.as_raw_fd(), libc::STDERR_FILENO) };
            if on_interrupt_with_notes(&NOTES).is_ok() {
                // The flag as the parent had it at the fork: clear it.
                INTERRUPTED.store(false, Ordering::Relaxed);
                // SAFETY: `raise` has no precondition.
                unsafe {
                    libc::raise(libc::SIGINT);
                    libc::raise(libc::SIGINT);
                }
            }
            // Not reached if the second signal ends the process.
            // SAFETY: `_exit` ends the child without running anything else.
            unsafe { libc::_exit(0) };
        }
        drop(writer);
        let mut status = 0;
        // SAFETY: `pid` is this process's child; `status` is writable.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid, "waitpid: {}", io::Error::last_os_error());
        let mut notes = String::new();
        reader
            .read_to_string(&mut notes)
            .expect("the child's stderr");
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 128 + libc::SIGINT);
        assert_eq!(notes, "first note\nsecond note\n");
    }
}
