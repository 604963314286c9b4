//! [`RawSocket`]: a packet socket on one interface of a namespace, to send
//! and receive whole Ethernet frames in a test.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::{Error, Netns, Result};

/// A packet socket (`AF_PACKET`, `SOCK_RAW`, all protocols) bound to one
/// interface of a namespace: [`send`](RawSocket::send) puts a frame on the
/// wire as given, [`recv`](RawSocket::recv) returns the next frame that
/// arrived. Frames the host itself sends out of the interface are not
/// received (`PACKET_IGNORE_OUTGOING`). Its receive queue is deep (64 MiB,
/// `SO_RCVBUFFORCE`), so frames may pile up before the test reads them.
/// The kernel strips a VLAN tag before
/// a packet socket sees the frame, so received frames come without one.
#[derive(Debug)]
pub struct RawSocket {
    fd: OwnedFd,
    ifindex: i32,
}

fn os_err(what: &str) -> Error {
    Error::new(format!("{what}: {}", std::io::Error::last_os_error()))
}

impl RawSocket {
    /// Opens a socket on interface `ifname` of `ns`.
    pub fn open(ns: &Netns, ifname: &str) -> Result<RawSocket> {
        let name = ifname.to_owned();
        ns.run_in(move || RawSocket::open_here(&name))?
    }

    /// Opens a socket on `ifname` in the calling thread's namespace.
    fn open_here(ifname: &str) -> Result<RawSocket> {
        let cname = std::ffi::CString::new(ifname)
            .map_err(|_| Error::new(format!("bad interface name '{ifname}'")))?;
        // SAFETY: a NUL-terminated string that outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(os_err(&format!("interface '{ifname}'")));
        }
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket(2) with constant arguments.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(proto),
            )
        };
        if fd < 0 {
            return Err(os_err("socket(AF_PACKET)"));
        }
        // SAFETY: a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let one: libc::c_int = 1;
        // SAFETY: an int option, pointer and length of `one`.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                23, // PACKET_IGNORE_OUTGOING
                std::ptr::from_ref(&one).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(os_err("PACKET_IGNORE_OUTGOING"));
        }
        // A deep receive queue (root may pass the limit), so a test can
        // send a few thousand frames before it reads them. Best effort.
        let rcvbuf: libc::c_int = 64 << 20;
        // SAFETY: an int option, pointer and length of `rcvbuf`.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                std::ptr::from_ref(&rcvbuf).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        let sll = sockaddr(ifindex, proto);
        // SAFETY: a valid `sockaddr_ll` of the length given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::from_ref(&sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(os_err(&format!("bind to '{ifname}'")));
        }
        Ok(RawSocket { fd, ifindex })
    }

    /// Sends `frame` (from the destination MAC on) out of the interface.
    pub fn send(&self, frame: &[u8]) -> Result<()> {
        let sll = sockaddr(self.ifindex, 0);
        // SAFETY: `frame` is readable for its length; `sll` is a valid
        // address of the length given.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                std::ptr::from_ref(&sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(os_err("sendto"));
        }
        if r as usize != frame.len() {
            return Err(Error::new(format!("sent {r} of {} bytes", frame.len())));
        }
        Ok(())
    }

    /// The next frame to arrive within `timeout`, or `None`.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Vec<u8>>> {
        let end = Instant::now() + timeout;
        let mut buf = vec![0u8; 65_536];
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(os_err("poll"));
            }
            if r == 0 {
                return Ok(None);
            }
            // SAFETY: `buf` is writable for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock {
                    continue;
                }
                return Err(os_err("recv"));
            }
            buf.truncate(n as usize);
            return Ok(Some(buf));
        }
    }

    /// Receives until `want` frames for which `keep` holds have arrived, or
    /// nothing has arrived for `idle`; returns the kept frames (others are
    /// dropped: stray frames of the kernel's own).
    pub fn recv_frames(
        &self,
        want: usize,
        idle: Duration,
        mut keep: impl FnMut(&[u8]) -> bool,
    ) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        while out.len() < want {
            match self.recv(idle)? {
                Some(f) if keep(&f) => out.push(f),
                Some(_) => {}
                None => break,
            }
        }
        Ok(out)
    }
}

fn sockaddr(ifindex: i32, proto_be: u16) -> libc::sockaddr_ll {
    // SAFETY: all-zero is a valid `sockaddr_ll`.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto_be;
    sll.sll_ifindex = ifindex;
    sll
}
