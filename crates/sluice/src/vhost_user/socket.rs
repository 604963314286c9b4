//! One message over a Unix stream socket, with its file descriptors.
//!
//! [`send`] writes a message's bytes with `sendmsg`, the descriptors as
//! `SCM_RIGHTS` ancillary data on its first byte. [`recv_raw`] reads one
//! message — the header, then exactly the payload its size field announces
//! — and takes every descriptor that arrives with it as an [`OwnedFd`], so
//! none leaks whatever happens next; [`recv`] decodes it into a
//! [`Message`] and checks the descriptors against the request, closing
//! them on any error.
//!
//! Nothing here blocks forever by itself: the caller sets the socket's read
//! timeout (`UnixStream::set_read_timeout`), and a read that runs into it
//! is [`VhostUserError::Timeout`]. A header announcing more than
//! [`MAX_PAYLOAD`] bytes is refused before anything is read or allocated.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use super::VhostUserError;
use super::message::{HEADER_LEN, Header, MAX_FDS, MAX_PAYLOAD, Message};

/// A message as read from the socket, before decoding.
#[derive(Debug)]
pub struct RawMessage {
    /// The header's bytes.
    pub header: [u8; HEADER_LEN],
    /// The payload: as many bytes as the header's size field says.
    pub payload: Vec<u8>,
    /// The descriptors that came with it (at most [`MAX_FDS`]).
    pub fds: Vec<OwnedFd>,
}

impl RawMessage {
    /// A view of the header.
    pub fn header(&self) -> Header<&[u8]> {
        Header::new_checked(&self.header[..]).expect("a header-sized array")
    }
}

/// Room for the control message of [`MAX_FDS`] descriptors, aligned for
/// `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuffer([u8; 64]);

const _: () = assert!(
    // SAFETY: CMSG_SPACE is a pure computation on its argument.
    (unsafe { libc::CMSG_SPACE((MAX_FDS * mem::size_of::<RawFd>()) as u32) } as usize) <= 64
);

/// Sends `bytes` with `fds` attached to the first byte.
pub fn send(
    stream: &UnixStream,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), VhostUserError> {
    if fds.len() > MAX_FDS {
        return Err(VhostUserError::TooManyFds);
    }
    let mut sent = 0;
    let mut cmsg = CmsgBuffer([0; 64]);
    while sent < bytes.len() {
        let mut iov = libc::iovec {
            iov_base: bytes[sent..].as_ptr() as *mut libc::c_void,
            iov_len: bytes.len() - sent,
        };
        // SAFETY: all-zero bytes are a valid `msghdr` (null pointers, zero
        // lengths).
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if sent == 0 && !fds.is_empty() {
            let data_len = (fds.len() * mem::size_of::<RawFd>()) as u32;
            // SAFETY: pure computation.
            msg.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as _;
            msg.msg_control = cmsg.0.as_mut_ptr().cast();
            // SAFETY: `msg_control` points at `cmsg`, 8-byte aligned and at
            // least CMSG_SPACE(8 fds) long (checked at compile time), so the
            // first header and its data fit in it.
            unsafe {
                let hdr = libc::CMSG_FIRSTHDR(&msg);
                (*hdr).cmsg_level = libc::SOL_SOCKET;
                (*hdr).cmsg_type = libc::SCM_RIGHTS;
                (*hdr).cmsg_len = libc::CMSG_LEN(data_len) as _;
                let data = libc::CMSG_DATA(hdr).cast::<RawFd>();
                for (i, fd) in fds.iter().enumerate() {
                    data.add(i).write_unaligned(fd.as_raw_fd());
                }
            }
        }
        // SAFETY: `msg` points at `iov` (a live slice of `bytes`) and at
        // `cmsg`, both alive for the call; the descriptors in it are
        // borrowed, live ones.
        let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        sent += n as usize;
    }
    Ok(())
}

/// Reads into `buf` with `recvmsg`, appending any descriptors to `fds`.
/// Returns the byte count (0 at end of stream).
fn recv_some(
    stream: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> Result<usize, VhostUserError> {
    loop {
        let mut cmsg = CmsgBuffer([0; 64]);
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: all-zero bytes are a valid `msghdr`.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.0.as_mut_ptr().cast();
        msg.msg_controllen = cmsg.0.len() as _;
        // SAFETY: `msg` points at `iov` (the writable `buf`) and `cmsg`,
        // both alive for the call and of the lengths given.
        let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        let mut too_many = msg.msg_flags & libc::MSG_CTRUNC != 0;
        // SAFETY: the kernel filled `cmsg` up to `msg_controllen`; the CMSG
        // macros walk it within that length. Each SCM_RIGHTS entry holds
        // descriptors newly installed in this process and owned by nobody,
        // so each is taken into an `OwnedFd` exactly once.
        unsafe {
            let mut hdr = libc::CMSG_FIRSTHDR(&msg);
            while !hdr.is_null() {
                if (*hdr).cmsg_level == libc::SOL_SOCKET && (*hdr).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(hdr).cast::<RawFd>();
                    let head = data.cast::<u8>().offset_from(hdr.cast::<u8>()) as usize;
                    let count =
                        ((*hdr).cmsg_len as usize).saturating_sub(head) / mem::size_of::<RawFd>();
                    for i in 0..count {
                        fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                hdr = libc::CMSG_NXTHDR(&msg, hdr);
            }
        }
        too_many |= fds.len() > MAX_FDS;
        if too_many {
            fds.clear();
            return Err(VhostUserError::TooManyFds);
        }
        return Ok(n as usize);
    }
}

/// Fills `buf` completely, or fails: `Closed` if the stream ends before
/// the first byte of a message (`at == 0`), `ShortRead` if it ends later.
fn recv_exact(
    stream: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    at: usize,
    total: usize,
) -> Result<(), VhostUserError> {
    let mut got = 0;
    while got < buf.len() {
        let n = recv_some(stream, &mut buf[got..], fds)?;
        if n == 0 {
            return Err(if at + got == 0 {
                VhostUserError::Closed
            } else {
                VhostUserError::ShortRead {
                    expected: total,
                    got: at + got,
                }
            });
        }
        got += n;
    }
    Ok(())
}

/// Reads one message: its header, its payload and its descriptors,
/// without decoding it.
pub fn recv_raw(stream: &UnixStream) -> Result<RawMessage, VhostUserError> {
    let mut fds = Vec::new();
    let mut header = [0u8; HEADER_LEN];
    recv_exact(stream, &mut header, &mut fds, 0, HEADER_LEN)?;
    let view = Header::new_checked(&header[..]).expect("a header-sized array");
    let size = view.size() as usize;
    if size > MAX_PAYLOAD {
        return Err(VhostUserError::PayloadTooLarge {
            code: view.request(),
            size: view.size(),
        });
    }
    let mut payload = vec![0u8; size];
    recv_exact(
        stream,
        &mut payload,
        &mut fds,
        HEADER_LEN,
        HEADER_LEN + size,
    )?;
    Ok(RawMessage {
        header,
        payload,
        fds,
    })
}

/// Reads and decodes one request. On any error the descriptors that came
/// with it are closed.
pub fn recv(stream: &UnixStream) -> Result<(Message, Vec<OwnedFd>), VhostUserError> {
    let raw = recv_raw(stream)?;
    let msg = Message::decode(&raw.header, &raw.payload, raw.fds.len())?;
    Ok((msg, raw.fds))
}
