//! Longest-prefix-match (LPM) routing tables.
//!
//! A route maps a prefix (an address and a depth, the number of leading bits
//! that count) to a next-hop id; a lookup finds the next hop of the longest
//! route whose prefix covers the address.
//!
//! - [`Lpm4`] ([`ipv4`]): IPv4, DIR-24-8 (DPDK's `rte_lpm` layout): a
//!   2^24-entry first-level table indexed by the top 24 bits of the address,
//!   256-entry extension groups for the /24s that hold longer prefixes. A
//!   lookup is one load, or two under a prefix longer than /24.
//! - [`Lpm6`] ([`ipv6`]): IPv6, a multibit trie (DPDK's `rte_lpm6` layout):
//!   the same 2^24 first level on the top 24 bits, then 256-entry groups
//!   one byte each. A lookup is one load per level down to the route's.
//! - [`routegen`]: seeded route sets (an Internet-like IPv4 prefix-length
//!   mix, DPDK-shaped and Internet-like IPv6 sets) and lookup addresses, for
//!   tests and benchmarks.
//!
//! Both tables take `&mut self` to change and `&self` to look up (single,
//! four at a time, bulk with `Option` results or with a `no_route`
//! sentinel). The routes themselves are kept in a control-plane store (a
//! map per depth), so that deleting a route can restore the next-longest
//! route that covers it; every failed change leaves the table as it was.
//! The first-level tables sit on hugepages when they can ([`LpmMemory`]):
//! a random lookup into 64 MiB of 4 KiB pages misses the TLB.
//!
//! ```
//! use sluice::net::lpm::{Lpm4, LpmConfig};
//!
//! let mut lpm = Lpm4::new(LpmConfig { max_routes: 16, number_tbl8s: 4 }).unwrap();
//! lpm.add(0, 0, 1).unwrap(); // default route
//! lpm.add(u32::from_be_bytes([10, 0, 0, 0]), 8, 2).unwrap();
//! lpm.add(u32::from_be_bytes([10, 1, 2, 128]), 25, 3).unwrap();
//! assert_eq!(lpm.lookup(u32::from_be_bytes([192, 0, 2, 1])), Some(1));
//! assert_eq!(lpm.lookup(u32::from_be_bytes([10, 1, 2, 1])), Some(2));
//! assert_eq!(lpm.lookup(u32::from_be_bytes([10, 1, 2, 200])), Some(3));
//! lpm.delete(u32::from_be_bytes([10, 0, 0, 0]), 8).unwrap();
//! assert_eq!(lpm.lookup(u32::from_be_bytes([10, 1, 2, 1])), Some(1));
//!
//! use sluice::net::lpm::Lpm6;
//! use std::net::Ipv6Addr;
//!
//! let a = |s: &str| s.parse::<Ipv6Addr>().unwrap().octets();
//! let mut lpm6 = Lpm6::new(LpmConfig { max_routes: 16, number_tbl8s: 16 }).unwrap();
//! lpm6.add(a("2001:db8::"), 32, 1).unwrap();
//! lpm6.add(a("2001:db8:1::"), 48, 2).unwrap();
//! assert_eq!(lpm6.lookup(a("2001:db8:1::7")), Some(2));
//! let mut hops = [None; 2];
//! lpm6.lookup_bulk(&[a("2001:db8:2::1"), a("fe80::1")], &mut hops);
//! assert_eq!(hops, [Some(1), None]);
//! ```

use std::fmt;
use std::net::IpAddr;

pub mod ipv4;
pub mod ipv6;
mod mem;
pub mod routegen;
mod rules;
mod tables;

#[cfg(all(test, not(loom)))]
mod ipv4_tests;
#[cfg(all(test, not(loom)))]
mod ipv6_tests;
#[cfg(all(test, not(loom)))]
mod routegen_tests;
#[cfg(all(test, not(loom)))]
mod test_support;

pub use ipv4::Lpm4;
pub use ipv6::Lpm6;
pub use mem::{LpmMemory, TableBacking};

/// Sizes of an LPM table (either family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LpmConfig {
    /// Most routes the table holds (at least 1).
    pub max_routes: u32,
    /// Number of 256-entry extension (tbl8) groups, 1 KiB each. [`Lpm4`]
    /// needs one per /24 that holds routes longer than /24 (at most 2^24
    /// groups); [`Lpm6`] one per trie node below the first level, up to
    /// `⌈(depth − 24) / 8⌉` per route, shared by routes with the same
    /// leading bytes (at most 2^22 groups).
    pub number_tbl8s: u32,
}

/// Why an LPM operation failed. A failed operation leaves the table as it
/// was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LpmError {
    /// `max_routes` was 0.
    ZeroMaxRoutes,
    /// `number_tbl8s` is larger than group indices can address.
    TooManyTbl8s {
        /// The value given.
        number_tbl8s: u32,
        /// The largest value allowed.
        max: u32,
    },
    /// A prefix length beyond the address width.
    InvalidDepth {
        /// The depth given.
        depth: u8,
        /// The largest depth allowed (32 for IPv4).
        max: u8,
    },
    /// A next-hop id too large for the table's entries.
    NextHopTooLarge {
        /// The next hop given.
        next_hop: u32,
        /// The limit: next hops must be below it.
        max: u32,
    },
    /// The table's memory could not be mapped.
    NoMemory {
        /// Bytes asked for.
        bytes: usize,
        /// The OS error number.
        errno: i32,
    },
    /// The table already holds `max_routes` routes.
    TooManyRoutes {
        /// The configured limit.
        max_routes: u32,
    },
    /// The route needs more new extension groups than are free.
    NoTbl8 {
        /// The configured number of groups.
        number_tbl8s: u32,
        /// The route that needed them.
        prefix: IpAddr,
        /// Its depth.
        depth: u8,
        /// New groups it needs (1 for IPv4; up to 13 for IPv6).
        needed: u32,
        /// Groups free.
        free: u32,
    },
    /// No route with this prefix and depth.
    NotFound {
        /// The prefix (masked to its depth).
        prefix: IpAddr,
        /// The depth.
        depth: u8,
    },
}

impl fmt::Display for LpmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LpmError::ZeroMaxRoutes => write!(f, "max_routes is 0: must be at least 1"),
            LpmError::TooManyTbl8s { number_tbl8s, max } => {
                write!(f, "number_tbl8s {number_tbl8s} is too large: at most {max}")
            }
            LpmError::InvalidDepth { depth, max } => {
                write!(f, "invalid prefix depth {depth}: must be 0..={max}")
            }
            LpmError::NextHopTooLarge { next_hop, max } => write!(
                f,
                "next hop {next_hop} is too large: must be below 2^{} ({max})",
                max.trailing_zeros()
            ),
            LpmError::NoMemory { bytes, errno } => write!(
                f,
                "cannot map {bytes} bytes for an LPM table: {}",
                std::io::Error::from_raw_os_error(errno)
            ),
            LpmError::TooManyRoutes { max_routes } => {
                write!(f, "route table full: max_routes {max_routes} reached")
            }
            LpmError::NoTbl8 {
                number_tbl8s,
                prefix,
                depth,
                needed,
                free,
            } => {
                if free == 0 {
                    write!(
                        f,
                        "no free tbl8 group for {prefix}/{depth}: all {number_tbl8s} in use"
                    )
                } else {
                    write!(
                        f,
                        "{prefix}/{depth} needs {needed} new tbl8 groups, only {free} of \
                         {number_tbl8s} are free"
                    )
                }
            }
            LpmError::NotFound { prefix, depth } => write!(f, "route {prefix}/{depth} not found"),
        }
    }
}

impl std::error::Error for LpmError {}
