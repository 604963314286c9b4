//! The few system calls the telemetry socket needs: Unix `SOCK_SEQPACKET`
//! sockets (which the standard library does not offer), an eventfd to wake
//! the server's poll loop, and `poll` itself.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use crate::TelemetryError;

/// A Unix socket address for `path`.
pub(crate) fn socket_address(
    path: &Path,
) -> Result<(libc::sockaddr_un, libc::socklen_t), TelemetryError> {
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value
    // (an empty path, NUL-terminated).
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    // One byte stays for the terminating NUL.
    if bytes.len() >= address.sun_path.len() || bytes.contains(&0) {
        return Err(TelemetryError::PathTooLong(path.to_path_buf()));
    }
    for (slot, &b) in address.sun_path.iter_mut().zip(bytes) {
        *slot = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((address, len as libc::socklen_t))
}

/// A new Unix `SOCK_SEQPACKET` socket, close-on-exec.
pub(crate) fn seqpacket_socket(nonblocking: bool) -> io::Result<OwnedFd> {
    let mut kind = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
    if nonblocking {
        kind |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: socket takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_UNIX, kind, 0) };
    owned(fd)
}

/// Binds `socket` to `path` and listens on it.
pub(crate) fn bind_listen(socket: &OwnedFd, path: &Path) -> Result<(), TelemetryError> {
    let (address, len) = socket_address(path)?;
    // SAFETY: `address` is a valid sockaddr_un of `len` bytes, alive for
    // the call.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&raw const address).cast::<libc::sockaddr>(),
            len,
        )
    };
    if rc != 0 {
        return Err(TelemetryError::last_os(format!(
            "binding {}",
            path.display()
        )));
    }
    // SAFETY: listen takes no pointers.
    if unsafe { libc::listen(socket.as_raw_fd(), 16) } != 0 {
        return Err(TelemetryError::last_os(format!(
            "listening on {}",
            path.display()
        )));
    }
    Ok(())
}

/// A blocking `SOCK_SEQPACKET` socket connected to `path`.
pub(crate) fn connect(path: &Path) -> Result<OwnedFd, TelemetryError> {
    let (address, len) = socket_address(path)?;
    let socket = seqpacket_socket(false)
        .map_err(|e| TelemetryError::io("creating a telemetry socket", e))?;
    // SAFETY: `address` is a valid sockaddr_un of `len` bytes, alive for
    // the call.
    let rc = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            (&raw const address).cast::<libc::sockaddr>(),
            len,
        )
    };
    if rc != 0 {
        return Err(TelemetryError::last_os(format!(
            "connecting to {}",
            path.display()
        )));
    }
    Ok(socket)
}

/// Accepts one connection, non-blocking and close-on-exec.
pub(crate) fn accept(listener: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: null address pointers ask accept4 not to report the peer.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    owned(fd)
}

/// Sends one message; never raises SIGPIPE. `nonblocking` fails with
/// `WouldBlock` rather than wait for room.
pub(crate) fn send(socket: BorrowedFd<'_>, message: &[u8], nonblocking: bool) -> io::Result<()> {
    let mut flags = libc::MSG_NOSIGNAL;
    if nonblocking {
        flags |= libc::MSG_DONTWAIT;
    }
    // SAFETY: `message` is valid for reads of its length for the call.
    let n = unsafe {
        libc::send(
            socket.as_raw_fd(),
            message.as_ptr().cast(),
            message.len(),
            flags,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else if n as usize != message.len() {
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "message sent in part",
        ))
    } else {
        Ok(())
    }
}

/// Receives one message into `buf`. Returns the message's full length,
/// which exceeds `buf.len()` when the message was longer (its tail is
/// discarded); 0 when the peer closed.
pub(crate) fn recv(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length for the call.
    let n = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_TRUNC,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Bounds how long blocking sends and receives on `socket` wait.
pub(crate) fn set_timeout(socket: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<()> {
    let tv = match timeout {
        // A zero timeval means "wait forever": round up to 1 µs.
        Some(d) => libc::timeval {
            tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_usec: d.subsec_micros().max(u32::from(d.is_zero())) as libc::suseconds_t,
        },
        None => libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
    };
    for option in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: `tv` is a valid timeval for the call; its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&raw const tv).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A new eventfd, non-blocking and close-on-exec.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    owned(fd)
}

/// Adds one to an eventfd's count, waking whoever polls it.
pub(crate) fn signal(event: BorrowedFd<'_>) {
    let one: u64 = 1;
    // SAFETY: `one` is valid for reads of 8 bytes for the call. The count
    // can only fail to grow when it is already non-zero, which wakes the
    // poller just as well.
    unsafe { libc::write(event.as_raw_fd(), (&raw const one).cast(), 8) };
}

/// Waits until one of `fds` is ready (forever when `timeout` is `None`).
/// An interrupted wait returns 0 as a timeout would.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as libc::c_int);
    // SAFETY: `fds` is valid for reads and writes of its length for the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(n as usize)
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned open by the kernel and nothing else
    // owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
