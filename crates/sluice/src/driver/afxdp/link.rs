//! What the kernel says about an interface, asked over rtnetlink
//! (`RTM_GETLINK` by name): its index, MTU, MAC and the XDP program
//! attached to it, if any — and its queues in use, from the ethtool
//! channel counts (`ETHTOOL_GCHANNELS`): netlink reports the queues the
//! device was made with (a veth gets one per CPU), not those enabled, and
//! only an enabled queue can be bound.
//!
//! Netlink and ioctl rather than `/sys/class/net`: sysfs shows the
//! namespace it was mounted in, these the caller's.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `IFLA_*` attributes read.
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_NUM_TX_QUEUES: u16 = 31;
const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_XDP: u16 = 43;
/// Inside `IFLA_XDP`.
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;
/// `NLA_F_NESTED | NLA_F_NET_BYTEORDER`: flag bits of an attribute type.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// An interface, as the kernel describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    /// Its index.
    pub ifindex: u32,
    /// Rx queues in use (ethtool's current Rx + combined channels; the
    /// queues it was made with where the driver reports no channels).
    pub rx_queues: u32,
    /// Tx queues it was made with.
    pub tx_queues: u32,
    /// Its MTU.
    pub mtu: u32,
    /// Its hardware address, if it is a 6-byte one.
    pub mac: Option<[u8; 6]>,
    /// The XDP attach mode (`XDP_ATTACHED_*`: 0 none, 1 driver, 2 generic,
    /// 3 hardware, 4 several) and program id.
    pub xdp: Option<(u8, u32)>,
}

/// Reads the `u32` at the start of `b`.
fn u32_at(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

/// Walks netlink attributes: `(type, payload)` pairs.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = &b[len.next_multiple_of(4).min(b.len())..];
        Some((ty, payload))
    })
}

/// Interface `name` in the caller's network namespace. A missing interface
/// is `ErrorKind::NotFound`.
pub fn link_info(name: &str) -> std::io::Result<LinkInfo> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("'{name}' is not an interface name"),
        ));
    }
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };

    // nlmsghdr (16) + ifinfomsg (16) + IFLA_IFNAME attribute.
    let mut req = Vec::with_capacity(64);
    let attr_len = 4 + name.len() + 1;
    let total = 32 + attr_len.next_multiple_of(4);
    req.extend_from_slice(&(total as u32).to_ne_bytes());
    req.extend_from_slice(&libc::RTM_GETLINK.to_ne_bytes());
    req.extend_from_slice(&((libc::NLM_F_REQUEST) as u16).to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    req.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]); // family, pad, type
    req.extend_from_slice(&0i32.to_ne_bytes()); // index: by name
    req.extend_from_slice(&0u32.to_ne_bytes()); // flags
    req.extend_from_slice(&0u32.to_ne_bytes()); // change
    req.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    req.extend_from_slice(&IFLA_IFNAME.to_ne_bytes());
    req.extend_from_slice(name.as_bytes());
    req.push(0);
    req.resize(total, 0);
    // SAFETY: sending `req.len()` bytes of `req` to the kernel (the default
    // destination of a netlink socket).
    let r = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: receiving into `buf`, which is `buf.len()` bytes long.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut info = parse_reply(&buf[..n as usize], name)?;
    if let Some(rx) = rx_channels(name) {
        info.rx_queues = rx;
    }
    Ok(info)
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Default)]
struct Channels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// `ETHTOOL_GCHANNELS`.
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// Rx queues in use on `name` (Rx + combined channels), if its driver
/// reports channels.
fn rx_channels(name: &str) -> Option<u32> {
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new fd we own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut ch = Channels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    // SAFETY: an all-zero ifreq is valid; the name (shorter than IFNAMSIZ,
    // checked by the caller) and the data pointer are set below.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut ch as *mut Channels).cast();
    // SAFETY: SIOCETHTOOL with an ifreq whose data points at a
    // `Channels`, which the kernel fills.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
    (r == 0).then(|| (ch.rx_count + ch.combined_count).max(1))
}

/// Parses the reply to `RTM_GETLINK` for `name`.
fn parse_reply(msg: &[u8], name: &str) -> std::io::Result<LinkInfo> {
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a malformed netlink reply about '{name}'"),
        )
    };
    let len = u32_at(msg).ok_or_else(bad)? as usize;
    if len < 16 || len > msg.len() {
        return Err(bad());
    }
    let ty = u16::from_ne_bytes([msg[4], msg[5]]);
    if ty == libc::NLMSG_ERROR as u16 {
        let errno = -(u32_at(&msg[16..]).ok_or_else(bad)? as i32);
        if errno == libc::ENODEV {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no interface named '{name}'"),
            ));
        }
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    if ty != libc::RTM_NEWLINK || len < 32 {
        return Err(bad());
    }
    let ifindex = u32_at(&msg[20..]).ok_or_else(bad)?;
    let mut info = LinkInfo {
        ifindex,
        rx_queues: 1,
        tx_queues: 1,
        mtu: 0,
        mac: None,
        xdp: None,
    };
    for (ty, p) in attrs(&msg[32..len]) {
        match ty {
            IFLA_MTU => info.mtu = u32_at(p).ok_or_else(bad)?,
            IFLA_ADDRESS => info.mac = p.try_into().ok(),
            IFLA_NUM_RX_QUEUES => info.rx_queues = u32_at(p).ok_or_else(bad)?,
            IFLA_NUM_TX_QUEUES => info.tx_queues = u32_at(p).ok_or_else(bad)?,
            IFLA_XDP => {
                let mut mode = 0u8;
                let mut id = 0u32;
                for (t, q) in attrs(p) {
                    match t {
                        IFLA_XDP_ATTACHED => mode = *q.first().ok_or_else(bad)?,
                        IFLA_XDP_PROG_ID => id = u32_at(q).ok_or_else(bad)?,
                        _ => {}
                    }
                }
                info.xdp = (mode != 0).then_some((mode, id));
            }
            _ => {}
        }
    }
    Ok(info)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_and_has_no_xdp_program() {
        let lo = link_info("lo").unwrap();
        assert_eq!(lo.ifindex, 1);
        assert!(lo.rx_queues >= 1 && lo.mtu >= 1500, "{lo:?}");
        assert_eq!(lo.mac, Some([0; 6]));
        assert_eq!(lo.xdp, None);
    }

    #[test]
    fn a_missing_interface_is_not_found_and_a_bad_name_invalid() {
        let e = link_info("sluice_none0").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(e.to_string(), "no interface named 'sluice_none0'");
        for bad in ["", "a_name_that_is_far_too_long", "a\0b"] {
            assert_eq!(
                link_info(bad).unwrap_err().kind(),
                std::io::ErrorKind::InvalidInput
            );
        }
    }

    #[test]
    fn truncated_replies_are_errors_not_panics() {
        let ok_len = 32u32.to_ne_bytes();
        for msg in [
            &[][..],
            &[1, 2, 3],
            &ok_len[..],
            &[40, 0, 0, 0, 16, 0, 0, 0],
        ] {
            assert!(parse_reply(msg, "x").is_err());
        }
        // A reply whose attribute claims more bytes than there are.
        let mut m = vec![0u8; 36];
        m[..4].copy_from_slice(&36u32.to_ne_bytes());
        m[4..6].copy_from_slice(&libc::RTM_NEWLINK.to_ne_bytes());
        m[32..34].copy_from_slice(&200u16.to_ne_bytes());
        let info = parse_reply(&m, "x").unwrap();
        assert_eq!(info.rx_queues, 1);
    }
}
