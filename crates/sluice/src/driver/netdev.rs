//! Kernel network devices by name, for the drivers over kernel interfaces
//! (`afpacket`, `tap`): name checks, index, MAC address, and setting a
//! device up — `if_nametoindex` and the `SIOCGIF*` / `SIOCSIFFLAGS` ioctls
//! on a throwaway datagram socket (or any socket the caller has). Names are looked up in the network
//! namespace of the calling thread. Also the Tx wake-up both packet-socket
//! drivers (`afpacket`, `afxdp`) send.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Longest interface name (IFNAMSIZ − 1).
pub(crate) const IFNAME_MAX: usize = 15;

const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
const SIOCGIFMTU: libc::c_ulong = 0x8921;
const SIOCGIFHWADDR: libc::c_ulong = 0x8927;

/// `ARPHRD_ETHER`: the hardware type of Ethernet devices (veth, tap, NICs).
const ARPHRD_ETHER: u16 = 1;

/// `struct ifreq`: a name and a 24-byte union (8-aligned: it holds
/// pointers in some of its forms).
#[repr(C, align(8))]
pub(crate) struct IfReq {
    pub(crate) name: [u8; 16],
    pub(crate) data: [u8; 24],
}

impl IfReq {
    /// A request for interface `name` (checked by [`check_name`]).
    pub(crate) fn new(name: &str) -> IfReq {
        let mut r = IfReq {
            name: [0; 16],
            data: [0; 24],
        };
        let n = name.len().min(IFNAME_MAX);
        r.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        r
    }
}

/// Why `name` cannot be an interface name, if it cannot.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > IFNAME_MAX {
        return Err(format!(
            "interface name '{name}' must be 1 to {IFNAME_MAX} bytes"
        ));
    }
    if name == "." || name == ".." || name.bytes().any(|b| b == b'/' || b == b':' || b <= b' ') {
        return Err(format!(
            "interface name '{name}' may not be '.' or '..' or contain '/', ':' or spaces"
        ));
    }
    Ok(())
}

/// The index of interface `name`, `None` if there is none.
pub(crate) fn index(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated string that lives across the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ioctl(req: libc::c_ulong, ifr: &mut IfReq) -> io::Result<()> {
    let sock = ioctl_socket()?;
    ioctl_on(&sock, req, ifr)
}

/// An interface ioctl on `sock` (the kernel answers them on a socket of
/// any family).
fn ioctl_on(sock: &OwnedFd, req: libc::c_ulong, ifr: &mut IfReq) -> io::Result<()> {
    // SAFETY: the interface ioctls read and write one `struct ifreq`,
    // which `ifr` is, exclusively borrowed for the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), req as _, std::ptr::from_mut(ifr)) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The MTU of interface `name`.
pub(crate) fn mtu(name: &str) -> io::Result<u32> {
    mtu_on(&ioctl_socket()?, name)
}

/// The MTU of interface `name`, asked on `sock` (one system call, for a
/// caller that asks often).
pub(crate) fn mtu_on(sock: &OwnedFd, name: &str) -> io::Result<u32> {
    let mut ifr = IfReq::new(name);
    ioctl_on(sock, SIOCGIFMTU, &mut ifr)?;
    // `ifr_mtu`: an int at the start of the union.
    let m = i32::from_ne_bytes([ifr.data[0], ifr.data[1], ifr.data[2], ifr.data[3]]);
    Ok(m.max(0) as u32)
}

/// Whether interface `name` is an Ethernet device (`ARPHRD_ETHER`).
pub(crate) fn is_ethernet(name: &str) -> io::Result<bool> {
    let mut ifr = IfReq::new(name);
    ioctl(SIOCGIFHWADDR, &mut ifr)?;
    // A `struct sockaddr`: its family is the hardware type.
    Ok(u16::from_ne_bytes([ifr.data[0], ifr.data[1]]) == ARPHRD_ETHER)
}

/// The MAC address of interface `name`.
pub(crate) fn mac(name: &str) -> io::Result<[u8; 6]> {
    let mut ifr = IfReq::new(name);
    ioctl(SIOCGIFHWADDR, &mut ifr)?;
    // A `struct sockaddr`: family (2 bytes), then the address.
    let mut m = [0u8; 6];
    m.copy_from_slice(&ifr.data[2..8]);
    Ok(m)
}

/// Sets interface `name` up (`IFF_UP`), keeping its other flags.
pub(crate) fn set_up(name: &str) -> io::Result<()> {
    let mut ifr = IfReq::new(name);
    ioctl(SIOCGIFFLAGS, &mut ifr)?;
    let flags = i16::from_ne_bytes([ifr.data[0], ifr.data[1]]) | libc::IFF_UP as i16;
    ifr.data[..2].copy_from_slice(&flags.to_ne_bytes());
    ioctl(SIOCSIFFLAGS, &mut ifr)
}

/// Asks the kernel to send what is pending on socket `fd`'s Tx ring,
/// without waiting: a `sendto` with no data and no address.
#[inline]
pub(crate) fn wake_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: sendto(2) with no buffer and no address reads no memory.
    let r = unsafe {
        libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("veth0").is_ok());
        assert!(check_name("a23456789012345").is_ok());
        assert_eq!(
            check_name("a234567890123456").unwrap_err(),
            "interface name 'a234567890123456' must be 1 to 15 bytes"
        );
        assert_eq!(
            check_name("a/b").unwrap_err(),
            "interface name 'a/b' may not be '.' or '..' or contain '/', ':' or spaces"
        );
        assert!(check_name("..").is_err());
        assert!(check_name("").is_err());
    }

    #[test]
    fn loopback_is_found_and_a_missing_name_is_not() {
        assert_eq!(index("lo"), Some(1));
        assert_eq!(index("sluicenosuch0"), None);
        assert_eq!(mac("lo").unwrap(), [0; 6]);
        assert!(mac("sluicenosuch0").is_err());
        assert!(mtu("lo").unwrap() >= 68);
        assert!(mtu("sluicenosuch0").is_err());
        assert!(!is_ethernet("lo").unwrap());
    }
}
