//! The control channel: one [`Message`] per `SOCK_SEQPACKET` datagram, a
//! file descriptor attached by `SCM_RIGHTS` where the message type carries
//! one (ADD_REGION's memfd, ADD_RING's eventfd).
//!
//! A receive never waits forever unless the caller wants it to: set a
//! timeout with [`ControlSocket::set_timeout`] (a receive that times out is
//! [`MemifError::WouldBlock`]), or make the socket non-blocking.
//!
//! What the peer sends is checked before it is handed out: a datagram of
//! another length than [`MSG_SIZE`] is [`MemifError::BadLength`], a message
//! type that carries a descriptor but came without one is
//! [`MemifError::MissingFd`], and descriptors that came where none belongs
//! are closed at once.

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::time::Duration;

use super::message::Message;
use super::{MSG_SIZE, MemifError};

/// Room for this many descriptors in a received control message; more are
/// refused (and closed).
const MAX_RECEIVED_FDS: usize = 4;

/// One end of a memif control connection.
#[derive(Debug)]
pub struct ControlSocket {
    fd: OwnedFd,
}

/// A message and the descriptor that came with it, if its type carries one.
#[derive(Debug)]
pub struct Received {
    /// The message.
    pub message: Message,
    /// The attached descriptor: always `Some` for ADD_REGION and ADD_RING,
    /// always `None` for the other types.
    pub fd: Option<OwnedFd>,
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; a non-negative result is a new
    // descriptor nobody else owns.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `path` as a `sockaddr_un`, and the length to pass with it.
fn unix_addr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all zeros is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path {} unusable", path.display()),
        ));
    }
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    let len = mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// Sets `SO_RCVTIMEO` and `SO_SNDTIMEO`; `None` waits forever.
fn set_timeouts(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<()> {
    let tv = match timeout {
        Some(d) => {
            let secs = d.as_secs().min(libc::time_t::MAX as u64);
            // At least 1 µs: a zero timeval means "forever".
            let micros = if secs == 0 {
                d.subsec_micros().max(1)
            } else {
                d.subsec_micros()
            };
            libc::timeval {
                tv_sec: secs as libc::time_t,
                tv_usec: micros as libc::suseconds_t,
            }
        }
        None => libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
    };
    for option in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: `tv` is a valid timeval and its size is passed.
        cvt(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                ptr::from_ref(&tv).cast(),
                mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
    }
    Ok(())
}

impl ControlSocket {
    /// Two connected ends, for tests and for both sides in one process.
    pub fn pair() -> io::Result<(ControlSocket, ControlSocket)> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` is a valid array of two ints for socketpair to fill.
        cvt(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        // SAFETY: socketpair succeeded: both are new descriptors we own.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok((ControlSocket { fd: a }, ControlSocket { fd: b }))
    }

    /// Connects to the server listening at `path` (the client's side).
    pub fn connect(path: &Path) -> io::Result<ControlSocket> {
        let fd = seqpacket()?;
        let (addr, len) = unix_addr(path)?;
        loop {
            // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
            let ret = unsafe {
                libc::connect(
                    fd.as_raw_fd(),
                    ptr::from_ref(&addr).cast::<libc::sockaddr>(),
                    len,
                )
            };
            match cvt(ret) {
                Ok(_) => return Ok(ControlSocket { fd }),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Wraps a connected `SOCK_SEQPACKET` socket.
    pub fn from_fd(fd: OwnedFd) -> ControlSocket {
        ControlSocket { fd }
    }

    /// Sets how long [`recv`](Self::recv) and [`send`](Self::send) wait;
    /// `None` waits forever.
    pub fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        set_timeouts(self.fd.as_fd(), timeout)
    }

    /// Sends `message`, with `fd` attached when given.
    pub fn send(&self, message: &Message, fd: Option<BorrowedFd<'_>>) -> Result<(), MemifError> {
        let bytes = message.encode()?;
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        // Room for one descriptor, aligned for cmsghdr.
        let mut control = [0u64; 4];
        // SAFETY: msghdr is plain old data; all zeros is a valid value.
        let mut header: libc::msghdr = unsafe { mem::zeroed() };
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        if let Some(fd) = fd {
            // SAFETY: CMSG_SPACE only computes a size.
            let space = unsafe { libc::CMSG_SPACE(mem::size_of::<RawFd>() as u32) } as usize;
            debug_assert!(space <= mem::size_of_val(&control));
            header.msg_control = control.as_mut_ptr().cast();
            header.msg_controllen = space as _;
            // SAFETY: msg_control points at `space` zeroed, aligned bytes, so
            // CMSG_FIRSTHDR returns a header inside them with room for one
            // descriptor after it (CMSG_SPACE of one int).
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&header);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(mem::size_of::<RawFd>() as u32) as _;
                ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd.as_raw_fd());
            }
        }
        loop {
            // SAFETY: `header` points at `iov` (the message bytes) and at
            // `control`, all alive for the call.
            let sent = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &header, libc::MSG_NOSIGNAL) };
            if sent < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => return Err(MemifError::WouldBlock),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                        return Err(MemifError::Closed);
                    }
                    _ => return Err(MemifError::Io(e)),
                }
            }
            if sent as usize != MSG_SIZE {
                return Err(MemifError::BadLength(sent as usize));
            }
            return Ok(());
        }
    }

    /// Receives one message and the descriptor that came with it.
    pub fn recv(&self) -> Result<Received, MemifError> {
        // One byte more than a message, so a longer datagram shows.
        let mut bytes = [0u8; MSG_SIZE + 1];
        let mut iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        };
        let mut control = [0u64; 8];
        // SAFETY: CMSG_SPACE only computes a size.
        let space =
            unsafe { libc::CMSG_SPACE((MAX_RECEIVED_FDS * mem::size_of::<RawFd>()) as u32) };
        debug_assert!(space as usize <= mem::size_of_val(&control));
        // SAFETY: msghdr is plain old data; all zeros is a valid value.
        let mut header: libc::msghdr = unsafe { mem::zeroed() };
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        header.msg_control = control.as_mut_ptr().cast();
        header.msg_controllen = space as _;
        let got = loop {
            // SAFETY: `header` points at `bytes` and `control`, both alive
            // and of the lengths given.
            let got =
                unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut header, libc::MSG_CMSG_CLOEXEC) };
            if got < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => return Err(MemifError::WouldBlock),
                    io::ErrorKind::ConnectionReset => return Err(MemifError::Closed),
                    _ => return Err(MemifError::Io(e)),
                }
            }
            break got as usize;
        };
        // Take every descriptor first, so each is closed whatever happens.
        let mut fds: Vec<OwnedFd> = Vec::new();
        // Each SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / 4
        // descriptors the kernel just installed for us.
        // SAFETY: the CMSG macros walk the control part within msg_controllen.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&header);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let payload = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                    for i in 0..payload / mem::size_of::<RawFd>() {
                        let raw = ptr::read_unaligned(data.add(i));
                        fds.push(OwnedFd::from_raw_fd(raw));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&header, cmsg);
            }
        }
        if got == 0 {
            return Err(MemifError::Closed);
        }
        if header.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > 1 {
            return Err(MemifError::TooManyFds);
        }
        if got != MSG_SIZE || header.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(MemifError::BadLength(got));
        }
        let message = Message::decode(&bytes[..MSG_SIZE])?;
        let fd = if message.kind().carries_fd() {
            Some(fds.pop().ok_or(MemifError::MissingFd(message.kind()))?)
        } else {
            // A descriptor where none belongs is closed here.
            None
        };
        Ok(Received { message, fd })
    }
}

impl AsFd for ControlSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A listening socket file: the server's side.
///
/// Dropping it closes the socket and removes the file.
#[derive(Debug)]
pub struct ControlListener {
    fd: OwnedFd,
    path: std::path::PathBuf,
}

impl ControlListener {
    /// Listens at `path`, which must not exist.
    pub fn bind(path: &Path) -> io::Result<ControlListener> {
        let fd = seqpacket()?;
        let (addr, len) = unix_addr(path)?;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                ptr::from_ref(&addr).cast::<libc::sockaddr>(),
                len,
            )
        })?;
        let listener = ControlListener {
            fd,
            path: path.to_owned(),
        };
        // SAFETY: listen takes no pointers.
        cvt(unsafe { libc::listen(listener.fd.as_raw_fd(), 16) })?;
        Ok(listener)
    }

    /// The socket file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets how long [`accept`](Self::accept) waits (it fails with
    /// `WouldBlock` then); `None` waits forever.
    pub fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        set_timeouts(self.fd.as_fd(), timeout)
    }

    /// Waits for a client and returns its connection.
    pub fn accept(&self) -> io::Result<ControlSocket> {
        loop {
            // SAFETY: null address pointers ask accept4 for no peer address.
            let ret = unsafe {
                libc::accept4(
                    self.fd.as_raw_fd(),
                    ptr::null_mut(),
                    ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            match cvt(ret) {
                // SAFETY: accept4 returned a new descriptor we own.
                Ok(fd) => return Ok(ControlSocket::from_fd(unsafe { OwnedFd::from_raw_fd(fd) })),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for ControlListener {
    fn drop(&mut self) {
        if let Ok(path) = CString::new(self.path.as_os_str().as_bytes()) {
            // SAFETY: `path` is a NUL-terminated string alive for the call.
            unsafe { libc::unlink(path.as_ptr()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memif::message::{AddRegion, MessageType};

    fn eventfd() -> OwnedFd {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a new descriptor we own.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// Sends raw bytes and descriptors, bypassing the message encoder.
    fn send_raw(sock: &ControlSocket, bytes: &[u8], fds: &[RawFd]) {
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain old data.
        let mut header: libc::msghdr = unsafe { mem::zeroed() };
        header.msg_iov = &mut iov;
        header.msg_iovlen = 1;
        if !fds.is_empty() {
            // SAFETY: size computation only.
            let space = unsafe { libc::CMSG_SPACE((fds.len() * 4) as u32) } as usize;
            header.msg_control = control.as_mut_ptr().cast();
            header.msg_controllen = space as _;
            // SAFETY: the control buffer holds `space` bytes, enough for the
            // header and `fds.len()` descriptors.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&header);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN((fds.len() * 4) as u32) as _;
                ptr::copy_nonoverlapping(
                    fds.as_ptr(),
                    libc::CMSG_DATA(cmsg).cast::<RawFd>(),
                    fds.len(),
                );
            }
        }
        // SAFETY: `header` points at live buffers.
        let sent = unsafe { libc::sendmsg(sock.as_fd().as_raw_fd(), &header, 0) };
        assert_eq!(sent as usize, bytes.len());
    }

    #[test]
    fn message_and_fd_cross() {
        let (a, b) = ControlSocket::pair().unwrap();
        let region = Message::AddRegion(AddRegion {
            index: 0,
            size: 4096,
        });
        let efd = eventfd();
        a.send(&region, Some(efd.as_fd())).unwrap();
        let got = b.recv().unwrap();
        assert_eq!(got.message, region);
        let fd = got.fd.expect("the descriptor");
        // The same eventfd: a count written on one shows on the other.
        // SAFETY: writes 8 bytes from a live u64.
        let n = unsafe { libc::write(efd.as_raw_fd(), ptr::from_ref(&7u64).cast(), 8) };
        assert_eq!(n, 8);
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a live u64.
        let n = unsafe { libc::read(fd.as_raw_fd(), ptr::from_mut(&mut count).cast(), 8) };
        assert_eq!((n, count), (8, 7));
        a.send(&Message::Ack, None).unwrap();
        assert_eq!(b.recv().unwrap().message, Message::Ack);
    }

    #[test]
    fn bad_datagrams_are_typed_errors() {
        let (a, b) = ControlSocket::pair().unwrap();
        send_raw(&a, &[1, 0, 0], &[]);
        assert!(matches!(b.recv(), Err(MemifError::BadLength(3))));
        send_raw(&a, &[0u8; 200], &[]);
        assert!(matches!(b.recv(), Err(MemifError::BadLength(_))));
        let mut add_region = [0u8; MSG_SIZE];
        add_region[0] = MessageType::AddRegion as u8;
        send_raw(&a, &add_region, &[]);
        assert!(matches!(
            b.recv(),
            Err(MemifError::MissingFd(MessageType::AddRegion))
        ));
        let mut unknown = [0u8; MSG_SIZE];
        unknown[0] = 42;
        send_raw(&a, &unknown, &[]);
        assert!(matches!(b.recv(), Err(MemifError::Message(_))));
        let (e1, e2) = (eventfd(), eventfd());
        send_raw(&a, &add_region, &[e1.as_raw_fd(), e2.as_raw_fd()]);
        assert!(matches!(b.recv(), Err(MemifError::TooManyFds)));
        // An ACK with a descriptor: the message, the descriptor closed.
        let mut ack = [0u8; MSG_SIZE];
        ack[0] = MessageType::Ack as u8;
        send_raw(&a, &ack, &[e1.as_raw_fd()]);
        let got = b.recv().unwrap();
        assert_eq!((got.message, got.fd.is_none()), (Message::Ack, true));
        drop(a);
        assert!(matches!(b.recv(), Err(MemifError::Closed)));
    }

    #[test]
    fn a_receive_times_out() {
        let (_a, b) = ControlSocket::pair().unwrap();
        b.set_timeout(Some(Duration::from_millis(1))).unwrap();
        assert!(matches!(b.recv(), Err(MemifError::WouldBlock)));
    }

    #[test]
    fn listener_connects_and_removes_its_file() {
        let dir = std::env::temp_dir().join(format!("sluice-memif-sock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let _ = std::fs::remove_file(&path);
        let listener = ControlListener::bind(&path).unwrap();
        listener
            .set_timeout(Some(Duration::from_millis(1)))
            .unwrap();
        let alone = listener.accept().unwrap_err();
        assert_eq!(alone.kind(), io::ErrorKind::WouldBlock);
        let client = ControlSocket::connect(&path).unwrap();
        let server = listener.accept().unwrap();
        client.send(&Message::Ack, None).unwrap();
        assert_eq!(server.recv().unwrap().message, Message::Ack);
        drop(listener);
        assert!(!path.exists());
        std::fs::remove_dir(&dir).unwrap();
    }
}
