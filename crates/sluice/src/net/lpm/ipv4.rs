//! IPv4 longest-prefix match, DIR-24-8 style.
//!
//! The algorithm is Gupta, Lin and McKeown's DIR-24-8-BASIC ("Routing lookups
//! in hardware at memory access speeds", 1998), the scheme of DPDK's
//! `rte_lpm`:
//!
//! - **tbl24** has 2^24 entries, one per /24, indexed by the top 24 bits of
//!   the address. A route of depth ≤ 24 is expanded into the
//!   `2^(24 - depth)` entries it covers.
//! - A /24 that holds a route longer than /24 gets a **tbl8 group** of 256
//!   entries, one per address, indexed by the low 8 bits; its tbl24 entry
//!   is marked *extended* and holds the group index instead of a next hop.
//!   Groups come from a fixed pool of [`LpmConfig::number_tbl8s`].
//!
//! A lookup is one load from tbl24 and, for extended entries, one from the
//! group.
//!
//! Every entry records the depth of the route that wrote it, so that adding
//! a shorter route never overwrites the entries of a longer one, and
//! deleting a route rewrites only its own entries, with those of the
//! next-longest route covering it (from the route store) or with "no
//! route". A group whose entries all become the same route of depth ≤ 24
//! (or "no route") is folded back into its tbl24 entry and returned to the
//! pool.
//!
//! The entry layout (a `u32`, the same in tbl24 and in groups) is in
//! [`field`]. tbl24 is allocated zeroed (all "no route"), so its 64 MiB of
//! pages are only touched where routes are written.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use super::{LpmConfig, LpmError, MAX_NEXT_HOP};

/// Bit fields of a table entry (`u32`).
pub mod field {
    /// Set when the entry holds a route (else: no route, rest zero).
    pub const VALID: u32 = 1 << 31;
    /// tbl24 only: the entry points to a tbl8 group (the data field is the
    /// group index); `VALID` and the depth are then clear.
    pub const EXTENDED: u32 = 1 << 30;
    /// Shift of the depth of the route that wrote the entry.
    pub const DEPTH_SHIFT: u32 = 24;
    /// Mask of the depth (6 bits, 0..=32) after shifting.
    pub const DEPTH_MASK: u32 = 0x3f;
    /// Data: next-hop id, or tbl8 group index when `EXTENDED`.
    pub const DATA: u32 = (1 << 24) - 1;
}

/// Number of tbl24 entries.
const TBL24_LEN: usize = 1 << 24;
/// Entries per tbl8 group.
const GROUP_LEN: usize = 256;
/// Widest IPv4 prefix.
const MAX_DEPTH: u8 = 32;

/// The entry of a route of `depth` to `next_hop`.
#[inline]
fn route_entry(depth: u8, next_hop: u32) -> u32 {
    field::VALID | (u32::from(depth) << field::DEPTH_SHIFT) | (next_hop & field::DATA)
}

/// Depth recorded in an entry.
#[inline]
fn entry_depth(e: u32) -> u8 {
    ((e >> field::DEPTH_SHIFT) & field::DEPTH_MASK) as u8
}

/// Whether a route of `depth` may write entry `e` (free, or written by a
/// route no longer than it).
#[inline]
fn may_overwrite(e: u32, depth: u8) -> bool {
    e & field::VALID == 0 || entry_depth(e) <= depth
}

/// Whether entry `e` was written by a route of exactly `depth`.
#[inline]
fn owned_by(e: u32, depth: u8) -> bool {
    e & field::VALID != 0 && entry_depth(e) == depth
}

/// The network mask of `depth` (0..=32).
#[inline]
fn mask(depth: u8) -> u32 {
    if depth == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(depth))
    }
}

/// Next hop of a final (non-extended) entry.
#[inline(always)]
fn hop(e: u32) -> Option<u32> {
    if e & field::VALID != 0 {
        Some(e & field::DATA)
    } else {
        None
    }
}

/// An IPv4 longest-prefix-match table (DIR-24-8); see the [module
/// docs](self).
///
/// Addresses and prefixes are host-order `u32`s (`u32::from(Ipv4Addr)`).
pub struct Lpm4 {
    /// First level, one entry per /24.
    tbl24: Box<[u32; TBL24_LEN]>,
    /// `number_tbl8s` groups of [`GROUP_LEN`] entries.
    tbl8: Vec<u32>,
    /// Groups never handed out are `tbl8_next..number_tbl8s`.
    tbl8_next: u32,
    /// Groups handed out and returned.
    tbl8_free: Vec<u32>,
    /// Routes by depth: prefix (masked) → next hop.
    rules: Vec<HashMap<u32, u32>>,
    /// Number of routes.
    len: u32,
    /// Sizes.
    config: LpmConfig,
}

impl fmt::Debug for Lpm4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lpm4")
            .field("config", &self.config)
            .field("routes", &self.len)
            .field("tbl8_groups_used", &self.tbl8_groups_used())
            .finish_non_exhaustive()
    }
}

/// A zeroed tbl24 (fresh pages from the allocator, untouched until written).
fn zeroed_tbl24() -> Box<[u32; TBL24_LEN]> {
    match vec![0u32; TBL24_LEN].into_boxed_slice().try_into() {
        Ok(t) => t,
        // The vector has exactly TBL24_LEN elements.
        Err(_) => unreachable!("tbl24 has 2^24 entries"),
    }
}

impl Lpm4 {
    /// Makes an empty table.
    ///
    /// Fails if `max_routes` is 0 or `number_tbl8s` exceeds 2^24. Takes
    /// 64 MiB of address space for tbl24 plus 1 KiB per tbl8 group, zeroed
    /// lazily by the operating system.
    pub fn new(config: LpmConfig) -> Result<Lpm4, LpmError> {
        if config.max_routes == 0 {
            return Err(LpmError::ZeroMaxRoutes);
        }
        if config.number_tbl8s > MAX_NEXT_HOP {
            return Err(LpmError::TooManyTbl8s {
                number_tbl8s: config.number_tbl8s,
                max: MAX_NEXT_HOP,
            });
        }
        Ok(Lpm4 {
            tbl24: zeroed_tbl24(),
            tbl8: vec![0u32; config.number_tbl8s as usize * GROUP_LEN],
            tbl8_next: 0,
            tbl8_free: Vec::new(),
            rules: vec![HashMap::new(); usize::from(MAX_DEPTH) + 1],
            len: 0,
            config,
        })
    }

    /// The sizes the table was made with.
    pub fn config(&self) -> LpmConfig {
        self.config
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the table holds no route.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of tbl8 groups in use (one per /24 holding a route longer
    /// than /24).
    pub fn tbl8_groups_used(&self) -> usize {
        self.tbl8_next as usize - self.tbl8_free.len()
    }

    /// Checks a depth.
    fn check_depth(depth: u8) -> Result<(), LpmError> {
        if depth > MAX_DEPTH {
            Err(LpmError::InvalidDepth {
                depth,
                max: MAX_DEPTH,
            })
        } else {
            Ok(())
        }
    }

    /// The next hop of the route `prefix/depth` (prefix masked to its
    /// depth), if there is one. An invalid depth has no route.
    pub fn get(&self, prefix: u32, depth: u8) -> Option<u32> {
        let rules = self.rules.get(usize::from(depth))?;
        rules.get(&(prefix & mask(depth))).copied()
    }

    /// Adds the route `prefix/depth` → `next_hop`, or changes its next hop
    /// if it exists. Bits of `prefix` beyond `depth` are ignored.
    ///
    /// Fails, leaving the table unchanged, if `depth` > 32, `next_hop` ≥
    /// 2^24, the table holds `max_routes` routes already, or the route is
    /// longer than /24 and needs a tbl8 group when none is free.
    pub fn add(&mut self, prefix: u32, depth: u8, next_hop: u32) -> Result<(), LpmError> {
        Self::check_depth(depth)?;
        if next_hop >= MAX_NEXT_HOP {
            return Err(LpmError::NextHopTooLarge { next_hop });
        }
        let prefix = prefix & mask(depth);
        let d = usize::from(depth);
        let exists = self.rules[d].contains_key(&prefix);
        if !exists && self.len >= self.config.max_routes {
            return Err(LpmError::TooManyRoutes {
                max_routes: self.config.max_routes,
            });
        }
        let entry = route_entry(depth, next_hop);
        if depth <= 24 {
            let start = (prefix >> 8) as usize;
            let count = 1usize << (24 - depth);
            for i in start..start + count {
                let e = self.tbl24[i];
                if e & field::EXTENDED != 0 {
                    let g = Self::group_range(e);
                    for x in &mut self.tbl8[g] {
                        if may_overwrite(*x, depth) {
                            *x = entry;
                        }
                    }
                } else if may_overwrite(e, depth) {
                    self.tbl24[i] = entry;
                }
            }
        } else {
            let i = (prefix >> 8) as usize;
            let mut e = self.tbl24[i];
            if e & field::EXTENDED == 0 {
                let Some(g) = self.alloc_group() else {
                    return Err(LpmError::NoTbl8 {
                        number_tbl8s: self.config.number_tbl8s,
                        prefix: IpAddr::V4(Ipv4Addr::from(prefix)),
                        depth,
                    });
                };
                // The group starts as a copy of the /24's entry.
                let group = &mut self.tbl8[Self::group_range(g)];
                group.fill(e);
                e = field::EXTENDED | g;
                self.tbl24[i] = e;
            }
            let g = Self::group_range(e);
            let lo = (prefix & 0xff) as usize;
            let count = 1usize << (32 - depth);
            for x in &mut self.tbl8[g][lo..lo + count] {
                if may_overwrite(*x, depth) {
                    *x = entry;
                }
            }
        }
        if self.rules[d].insert(prefix, next_hop).is_none() {
            self.len += 1;
        }
        Ok(())
    }

    /// Deletes the route `prefix/depth` (bits of `prefix` beyond `depth`
    /// ignored). Addresses it covered go to the next-longest route covering
    /// it, or to no route.
    ///
    /// Fails, leaving the table unchanged, if `depth` > 32 or there is no
    /// such route.
    pub fn delete(&mut self, prefix: u32, depth: u8) -> Result<(), LpmError> {
        Self::check_depth(depth)?;
        let prefix = prefix & mask(depth);
        if self.rules[usize::from(depth)].remove(&prefix).is_none() {
            return Err(LpmError::NotFound {
                prefix: IpAddr::V4(Ipv4Addr::from(prefix)),
                depth,
            });
        }
        self.len -= 1;
        // The entry of the longest remaining route covering this one.
        let replacement = (0..depth)
            .rev()
            .find_map(|d| {
                self.rules[usize::from(d)]
                    .get(&(prefix & mask(d)))
                    .map(|&nh| route_entry(d, nh))
            })
            .unwrap_or(0);
        if depth <= 24 {
            let start = (prefix >> 8) as usize;
            let count = 1usize << (24 - depth);
            for i in start..start + count {
                let e = self.tbl24[i];
                if e & field::EXTENDED != 0 {
                    // The group keeps a longer route, so is not folded.
                    for x in &mut self.tbl8[Self::group_range(e)] {
                        if owned_by(*x, depth) {
                            *x = replacement;
                        }
                    }
                } else if owned_by(e, depth) {
                    self.tbl24[i] = replacement;
                }
            }
        } else {
            let i = (prefix >> 8) as usize;
            let e = self.tbl24[i];
            // A route longer than /24 always has its group.
            if e & field::EXTENDED != 0 {
                let range = Self::group_range(e);
                let lo = (prefix & 0xff) as usize;
                let count = 1usize << (32 - depth);
                let group = &mut self.tbl8[range];
                for x in &mut group[lo..lo + count] {
                    if owned_by(*x, depth) {
                        *x = replacement;
                    }
                }
                // Fold back when no entry is from a route longer than /24:
                // the rest all come from the same covering route (or none).
                if !group
                    .iter()
                    .any(|&x| x & field::VALID != 0 && entry_depth(x) > 24)
                {
                    let first = group[0];
                    group.fill(0);
                    self.tbl24[i] = first;
                    self.tbl8_free.push(e & field::DATA);
                }
            }
        }
        Ok(())
    }

    /// Removes every route (tbl24 is replaced by fresh zeroed pages).
    pub fn clear(&mut self) {
        self.tbl24 = zeroed_tbl24();
        self.tbl8 = vec![0u32; self.config.number_tbl8s as usize * GROUP_LEN];
        self.tbl8_next = 0;
        self.tbl8_free.clear();
        for r in &mut self.rules {
            r.clear();
        }
        self.len = 0;
    }

    /// Takes a free tbl8 group (its entries are zero).
    fn alloc_group(&mut self) -> Option<u32> {
        if let Some(g) = self.tbl8_free.pop() {
            return Some(g);
        }
        if self.tbl8_next < self.config.number_tbl8s {
            self.tbl8_next += 1;
            return Some(self.tbl8_next - 1);
        }
        None
    }

    /// The `tbl8` index range of the group in the data field of `e`.
    #[inline(always)]
    fn group_range(e: u32) -> std::ops::Range<usize> {
        let start = (e & field::DATA) as usize * GROUP_LEN;
        start..start + GROUP_LEN
    }

    /// The tbl8 entry for `addr` in the group named by extended entry `e`.
    #[inline(always)]
    fn tbl8_entry(&self, e: u32, addr: u32) -> u32 {
        let i = (e & field::DATA) as usize * GROUP_LEN + (addr & 0xff) as usize;
        // Extended entries only name allocated groups; `0` (no route) keeps
        // this panic-free regardless.
        self.tbl8.get(i).copied().unwrap_or(0)
    }

    /// The next hop of the longest route covering `addr`, if any.
    #[inline]
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        let mut e = self.tbl24[(addr >> 8) as usize];
        if e & field::EXTENDED != 0 {
            e = self.tbl8_entry(e, addr);
        }
        hop(e)
    }

    /// Looks up four addresses; the four tbl24 loads are issued before any
    /// tbl8 load, so their cache misses overlap.
    #[inline]
    pub fn lookup_x4(&self, addrs: [u32; 4]) -> [Option<u32>; 4] {
        let mut e = [
            self.tbl24[(addrs[0] >> 8) as usize],
            self.tbl24[(addrs[1] >> 8) as usize],
            self.tbl24[(addrs[2] >> 8) as usize],
            self.tbl24[(addrs[3] >> 8) as usize],
        ];
        if (e[0] | e[1] | e[2] | e[3]) & field::EXTENDED != 0 {
            for k in 0..4 {
                if e[k] & field::EXTENDED != 0 {
                    e[k] = self.tbl8_entry(e[k], addrs[k]);
                }
            }
        }
        [hop(e[0]), hop(e[1]), hop(e[2]), hop(e[3])]
    }

    /// Looks up `addrs` into `out` (`out[i]` for `addrs[i]`), four at a
    /// time. Only the first `min(addrs.len(), out.len())` are done.
    pub fn lookup_bulk(&self, addrs: &[u32], out: &mut [Option<u32>]) {
        let n = addrs.len().min(out.len());
        let (addrs, out) = (&addrs[..n], &mut out[..n]);
        let mut a4 = addrs.chunks_exact(4);
        let mut o4 = out.chunks_exact_mut(4);
        for (a, o) in (&mut a4).zip(&mut o4) {
            let r = self.lookup_x4([a[0], a[1], a[2], a[3]]);
            o.copy_from_slice(&r);
        }
        for (a, o) in a4.remainder().iter().zip(o4.into_remainder()) {
            *o = self.lookup(*a);
        }
    }
}
