//! What the control threads of the `vhost` and `virtio` ports wait on: an
//! eventfd that tells them to stop, and `poll` on it beside the socket
//! they serve, with an optional timeout for reconnecting.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A fresh non-blocking eventfd.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What [`wait`] saw.
#[derive(PartialEq, Eq)]
pub(crate) enum Woken {
    Readable,
    Stop,
    Timeout,
}

/// Waits until `fd` is readable (or hung up), `stop` is signalled, or
/// `timeout` passes (`None`: no limit).
pub(crate) fn wait(fd: Option<RawFd>, stop: &OwnedFd, timeout: Option<Duration>) -> Woken {
    let mut fds = [
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: fd.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as libc::c_int);
    loop {
        // SAFETY: two valid `pollfd`s for the call's duration (a negative
        // fd is ignored by poll).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return if n == 0 { Woken::Timeout } else { Woken::Stop };
        }
        if fds[0].revents != 0 {
            return Woken::Stop;
        }
        return Woken::Readable;
    }
}
