//! Packet headers: zero-copy views over byte buffers, checksums and the RSS
//! (Toeplitz) hash; and the lookup tables of an IP forwarder.
//!
//! | module | what it holds |
//! |---|---|
//! | [`ethernet`], [`ipv4`], [`ipv6`], [`udp`], [`tcp`] | header views: [`EthernetFrame`] and [`VlanTag`], [`Ipv4Packet`], [`Ipv6Packet`], [`UdpDatagram`], [`TcpSegment`] |
//! | [`checksum`] | the Internet checksum, its incremental update, pseudo-header sums |
//! | [`rss`] | the Toeplitz hash NICs use to spread flows over Rx queues |
//! | [`lpm`] | longest-prefix-match routing tables: IPv4 DIR-24-8, IPv6 multibit trie |
//! | [`em`] | an exact-match 5-tuple flow table |
//! | [`routes`] | the text form of routes and flows that `sluice l3fwd --routes` reads |
//!
//! Each header type wraps any `T: AsRef<[u8]>` (and `AsMut<[u8]>` for the
//! setters), in the style of smoltcp's `wire`: the byte ranges of the fields
//! are named in a `field` module, `new_checked` verifies the buffer is long
//! enough (and the header sane) so the getters never panic, getters and
//! setters come in pairs, and tests check them against literal bytes. A
//! setter may write a length that disagrees with the buffer; the getters
//! then stop at the buffer's end (a payload is empty where the lengths
//! cross), so they still never panic.
//!
//! ```
//! use sluice::net::{EthernetFrame, EtherType, Ipv4Packet, UdpDatagram};
//!
//! let bytes = [
//!     // Ethernet: dst, src, type IPv4
//!     0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00,
//!     // IPv4: 20-byte header, total 28, TTL 64, UDP, 10.0.0.1 -> 10.0.0.2
//!     0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0x66, 0xcf, 10, 0, 0, 1, 10, 0, 0, 2,
//!     // UDP: 1234 -> 80, length 8, no checksum
//!     0x04, 0xd2, 0, 80, 0, 8, 0, 0,
//! ];
//! let eth = EthernetFrame::new_checked(&bytes[..]).unwrap();
//! assert_eq!(eth.ethertype(), EtherType::IPV4);
//! let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
//! assert!(ip.verify_checksum());
//! let udp = UdpDatagram::new_checked(ip.payload()).unwrap();
//! assert_eq!((udp.src_port(), udp.dst_port()), (1234, 80));
//! ```

pub mod checksum;
pub mod em;
pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
pub mod lpm;
pub mod routes;
#[cfg(all(test, not(loom)))]
mod routes_tests;
pub mod rss;
pub mod tcp;
pub mod udp;

#[cfg(test)]
mod etherparse_tests;

pub use ethernet::{EtherType, EthernetFrame, MacAddr, VlanTag};
pub use ipv4::Ipv4Packet;
pub use ipv6::Ipv6Packet;
pub use tcp::TcpSegment;
pub use udp::UdpDatagram;

/// IP protocol numbers used here.
pub mod ip_proto {
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
}

/// Why a buffer is not a valid header of the kind asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetError {
    /// The buffer is shorter than the header (or than its declared length).
    Truncated {
        /// Which header.
        header: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A field has a value the header cannot have.
    Malformed {
        /// Which header.
        header: &'static str,
        /// What is wrong.
        what: &'static str,
    },
}

impl std::fmt::Display for NetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetError::Truncated { header, need, have } => {
                write!(f, "{header}: {have} bytes, need {need}")
            }
            NetError::Malformed { header, what } => write!(f, "{header}: {what}"),
        }
    }
}

impl std::error::Error for NetError {}

/// Checks that `buf` has at least `need` bytes.
#[inline]
fn check_len(header: &'static str, buf: &[u8], need: usize) -> Result<(), NetError> {
    if buf.len() < need {
        Err(NetError::Truncated {
            header,
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Reads a big-endian `u16` at `at`.
#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Writes a big-endian `u16` at `at`.
#[inline(always)]
fn set_be16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Reads a big-endian `u32` at `at`.
#[inline(always)]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Writes a big-endian `u32` at `at`.
#[inline(always)]
fn set_be32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
