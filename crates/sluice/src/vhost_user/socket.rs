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

/// Room for the control message of up to 12 descriptors, aligned for
/// `cmsghdr`: more than a message may carry, so that a few too many are
/// received (and closed) rather than cut off by the kernel.
#[repr(C, align(8))]
struct CmsgBuffer([u8; 64]);

const _: () = assert!(
    // SAFETY: CMSG_SPACE is a pure computation on its argument.
    (unsafe { libc::CMSG_SPACE((12 * mem::size_of::<RawFd>()) as u32) } as usize) <= 64
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
    send_any(stream, bytes, fds)
}

/// [`send`] without the descriptor limit (up to what the control buffer
/// holds: 12), for tests of the receiving side.
fn send_any(
    stream: &UnixStream,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), VhostUserError> {
    if fds.len() > 12 {
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
        // Each SCM_RIGHTS entry holds descriptors newly installed in this
        // process and owned by nobody: each becomes an `OwnedFd` exactly once.
        // SAFETY: the CMSG macros walk the control part within msg_controllen.
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::vhost_user::message::{Body, MemoryRegion, MemoryTable, VringFd, encode_raw};
    use crate::vhost_user::{GuestMemoryRegion, Request};
    use std::os::fd::AsFd;

    /// A memfd of `len` bytes.
    pub(crate) fn memfd(len: u64) -> OwnedFd {
        // SAFETY: a NUL-terminated name; flags are plain bits.
        let fd = unsafe { libc::memfd_create(c"sluice-vhost-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: `fd` was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a live descriptor and a plain length.
        let rc = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
        assert_eq!(rc, 0);
        fd
    }

    /// A pipe: (non-blocking read end, write end). Once every copy of the
    /// write end is closed, reading gives end of file; a copy left open
    /// anywhere in the process gives EAGAIN instead.
    pub(crate) fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        assert_eq!(rc, 0);
        // SAFETY: both were just created and are owned by nobody else.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// Whether every write end of the pipe is closed.
    pub(crate) fn writers_closed(read_end: &OwnedFd) -> bool {
        let mut b = [0u8; 1];
        // SAFETY: a live descriptor and a one-byte buffer.
        let n = unsafe { libc::read(read_end.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        n == 0
    }

    #[test]
    fn a_memory_table_travels_with_its_descriptor_and_both_sides_share_the_memory() {
        let (a, b) = UnixStream::pair().unwrap();
        let fd = memfd(8192);
        let region = MemoryRegion {
            guest_phys_addr: 0x4000,
            memory_size: 4096,
            userspace_addr: 0x10_0000,
            mmap_offset: 4096,
        };
        let frontend_map = GuestMemoryRegion::map(region, fd.as_fd(), 0).unwrap();
        let msg = Message::new(Body::SetMemTable(MemoryTable {
            regions: vec![region],
        }));
        send(&a, &msg.encode(), &[fd.as_fd()]).unwrap();
        drop(fd);

        let (got, fds) = recv(&b).unwrap();
        assert_eq!(got, msg);
        assert_eq!(fds.len(), 1);
        let backend_map = GuestMemoryRegion::map(region, fds[0].as_fd(), 0).unwrap();
        frontend_map.write_uaddr(0x10_0000 + 10, b"ring").unwrap();
        let mut seen = [0u8; 4];
        backend_map.read_gpa(0x4000 + 10, &mut seen).unwrap();
        assert_eq!(&seen, b"ring");
        backend_map.write_gpa(0x4000 + 4095, &[7]).unwrap();
        let mut back = [0u8];
        frontend_map
            .read_uaddr(0x10_0000 + 4095, &mut back)
            .unwrap();
        assert_eq!(back, [7]);
    }

    #[test]
    fn a_message_split_over_several_writes_is_read_whole() {
        let (a, b) = UnixStream::pair().unwrap();
        let bytes = Message::new(Body::SetFeatures(0xabcd)).encode();
        for chunk in bytes.chunks(3) {
            send(&a, chunk, &[]).unwrap();
        }
        let (got, fds) = recv(&b).unwrap();
        assert_eq!(got.body, Body::SetFeatures(0xabcd));
        assert!(fds.is_empty());
    }

    #[test]
    fn an_oversized_payload_is_refused_before_reading_it() {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, &encode_raw(5, 1, &[])[..8], &[]).unwrap();
        send(&a, &(MAX_PAYLOAD as u32 + 1).to_le_bytes(), &[]).unwrap();
        let err = recv(&b).unwrap_err();
        assert!(
            matches!(
                err,
                VhostUserError::PayloadTooLarge {
                    code: 5,
                    size: 4097
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_connection_closed_mid_message_is_a_short_read_and_between_messages_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let bytes = Message::new(Body::SetFeatures(1)).encode();
        send(&a, &bytes[..16], &[]).unwrap();
        drop(a);
        let err = recv(&b).unwrap_err();
        assert!(
            matches!(
                err,
                VhostUserError::ShortRead {
                    expected: 20,
                    got: 16
                }
            ),
            "{err}"
        );

        let (a, b) = UnixStream::pair().unwrap();
        send(&a, &bytes[..5], &[]).unwrap();
        drop(a);
        assert!(matches!(
            recv(&b),
            Err(VhostUserError::ShortRead {
                expected: 12,
                got: 5
            })
        ));

        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(matches!(recv(&b), Err(VhostUserError::Closed)));
    }

    #[test]
    fn silence_ends_at_the_read_timeout() {
        let (_a, b) = UnixStream::pair().unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_millis(1)))
            .unwrap();
        assert!(matches!(recv(&b), Err(VhostUserError::Timeout)));
    }

    #[test]
    fn bad_version_and_unknown_request_are_refused_after_the_whole_message() {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, &encode_raw(1, 2, &[]), &[]).unwrap();
        send(&a, &encode_raw(77, 1, &[1, 2, 3]), &[]).unwrap();
        send(&a, &Message::new(Body::GetQueueNum).encode(), &[]).unwrap();
        assert!(matches!(
            recv(&b),
            Err(VhostUserError::BadVersion { flags: 2 })
        ));
        assert!(matches!(
            recv(&b),
            Err(VhostUserError::UnknownRequest { code: 77 })
        ));
        // The stream is still in step.
        assert_eq!(recv(&b).unwrap().0.request(), Request::GetQueueNum);
    }

    #[test]
    fn descriptors_where_none_belong_are_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let (read_end, write_end) = pipe();
        send(
            &a,
            &Message::new(Body::SetOwner).encode(),
            &[write_end.as_fd()],
        )
        .unwrap();
        drop(write_end);
        let err = recv(&b).unwrap_err();
        assert!(
            matches!(
                err,
                VhostUserError::FdCount {
                    request: Request::SetOwner,
                    expected: 0,
                    got: 1
                }
            ),
            "{err}"
        );
        assert!(writers_closed(&read_end));
    }

    #[test]
    fn a_missing_descriptor_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        let kick = Message::new(Body::SetVringKick(VringFd {
            index: 0,
            nofd: false,
        }));
        send(&a, &kick.encode(), &[]).unwrap();
        let err = recv(&b).unwrap_err();
        assert!(
            matches!(
                err,
                VhostUserError::FdCount {
                    expected: 1,
                    got: 0,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn more_than_eight_descriptors_are_all_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let (read_end, write_end) = pipe();
        let nine = vec![write_end.as_fd(); 9];
        assert!(matches!(
            send(&a, &[0; 12], &nine),
            Err(VhostUserError::TooManyFds)
        ));
        send_any(&a, &Message::new(Body::SetOwner).encode(), &nine).unwrap();
        drop(nine);
        drop(write_end);
        assert!(matches!(recv(&b), Err(VhostUserError::TooManyFds)));
        assert!(writers_closed(&read_end));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn random_bytes_and_descriptors_give_messages_or_typed_errors(
            chunks in proptest::collection::vec(
                (proptest::collection::vec(proptest::num::u8::ANY, 1..64), 0usize..11),
                1..6,
            ),
        ) {
            let (a, b) = UnixStream::pair().unwrap();
            let (read_end, write_end) = pipe();
            for (bytes, nfds) in &chunks {
                let fds = vec![write_end.as_fd(); *nfds];
                send_any(&a, bytes, &fds).unwrap();
            }
            drop(write_end);
            drop(a);
            // Every call but the last consumes at least one byte, so the
            // stream's end comes within `total + 1` calls.
            let total: usize = chunks.iter().map(|(b, _)| b.len()).sum();
            let mut closed = false;
            for _ in 0..=total {
                match recv(&b) {
                    Err(VhostUserError::Closed) => {
                        closed = true;
                        break;
                    }
                    Err(VhostUserError::Io(e)) => panic!("an I/O error on a healthy socket: {e}"),
                    Ok(_) | Err(_) => {}
                }
            }
            proptest::prop_assert!(closed);
            drop(b);
            proptest::prop_assert!(writers_closed(&read_end));
        }
    }
}
