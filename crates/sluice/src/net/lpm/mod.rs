//! Longest-prefix-match (LPM) routing tables.
//!
//! A route maps a prefix (an address and a depth, the number of leading bits
//! that count) to a next-hop id; a lookup finds the next hop of the longest
//! route whose prefix covers the address.
//!
//! - [`Lpm4`]: IPv4, in the DIR-24-8 style (a 2^24-entry first-level table
//!   indexed by the top 24 bits of the address, with 256-entry extension
//!   groups for the /24s that hold longer prefixes). A lookup is one load, or
//!   two for addresses under a prefix longer than /24.
//!
//! The routes themselves are kept in a control-plane store (a map per
//! depth), so that deleting a route can restore the next-longest route that
//! covers it.
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
//! ```

use std::fmt;
use std::net::IpAddr;

pub mod ipv4;

#[cfg(all(test, not(loom)))]
mod ipv4_tests;

pub use ipv4::Lpm4;

/// Largest next-hop id plus one: next hops are stored in 24 bits.
pub const MAX_NEXT_HOP: u32 = 1 << 24;

/// Sizes of an LPM table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LpmConfig {
    /// Most routes the table holds (at least 1).
    pub max_routes: u32,
    /// Number of 256-entry extension (tbl8) groups, one per /24 that holds
    /// routes longer than /24 (at most 2^24). Each group takes 1 KiB.
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
    /// A next-hop id that does not fit in 24 bits.
    NextHopTooLarge {
        /// The next hop given.
        next_hop: u32,
    },
    /// The table already holds `max_routes` routes.
    TooManyRoutes {
        /// The configured limit.
        max_routes: u32,
    },
    /// Every extension group is in use.
    NoTbl8 {
        /// The configured number of groups.
        number_tbl8s: u32,
        /// The route that needed a group.
        prefix: IpAddr,
        /// Its depth.
        depth: u8,
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
            LpmError::NextHopTooLarge { next_hop } => write!(
                f,
                "next hop {next_hop} is too large: must be below 2^24 ({MAX_NEXT_HOP})"
            ),
            LpmError::TooManyRoutes { max_routes } => {
                write!(f, "route table full: max_routes {max_routes} reached")
            }
            LpmError::NoTbl8 {
                number_tbl8s,
                prefix,
                depth,
            } => write!(
                f,
                "no free tbl8 group for {prefix}/{depth}: all {number_tbl8s} in use"
            ),
            LpmError::NotFound { prefix, depth } => write!(f, "route {prefix}/{depth} not found"),
        }
    }
}

impl std::error::Error for LpmError {}
