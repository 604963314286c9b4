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
//! group. Bulk lookups keep the per-address loop to a handful of
//! instructions, so that the CPU has many addresses' loads, and their cache
//! misses, in flight at once.
//!
//! Every entry records the depth of the route that wrote it, so that adding
//! a shorter route never overwrites the entries of a longer one, and
//! deleting a route rewrites only its own entries, with those of the
//! next-longest route covering it (from the route store) or with "no
//! route". A group whose entries all come from routes of depth ≤ 24 (so
//! all hold the same entry) is folded back into its tbl24 entry, zeroed and
//! returned to the pool.
//!
//! The entry layout (a `u32`, the same in tbl24 and in groups) is in
//! [`field`]. The tables sit on hugepages when they can (see
//! [`LpmMemory`]).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use super::mem::{LpmMemory, TableBacking};
use super::tables::{EntryFormat, GROUP_LEN, Tables, check_depth};
use super::{LpmConfig, LpmError};

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

/// Widest IPv4 prefix.
const MAX_DEPTH: u8 = 32;

/// This family's entry format, the one [`field`] describes.
type Format = EntryFormat<{ field::DEPTH_SHIFT }>;
const _: () = assert!(
    Format::VALID == field::VALID
        && Format::EXTENDED == field::EXTENDED
        && Format::DEPTH_MASK == field::DEPTH_MASK
        && Format::DATA == field::DATA
);

/// The network mask of `depth` (0..=32).
#[inline]
fn mask(depth: u8) -> u32 {
    if depth == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(depth))
    }
}

/// The tbl24 entries a route of `depth` ≤ 24 covers.
#[inline]
fn tbl24_span(prefix: u32, depth: u8) -> std::ops::Range<usize> {
    let start = (prefix >> 8) as usize;
    start..start + (1 << (24 - depth))
}

/// The entries of its group a route of `depth` > 24 covers.
#[inline]
fn group_span(prefix: u32, depth: u8) -> std::ops::Range<usize> {
    let start = (prefix & 0xff) as usize;
    start..start + (1 << (32 - depth))
}

/// An IPv4 longest-prefix-match table (DIR-24-8); see the [module
/// docs](self).
///
/// Addresses and prefixes are host-order `u32`s (`u32::from(Ipv4Addr)`).
/// Lookups take `&self` and may run on any number of threads at once;
/// changes take `&mut self`.
pub struct Lpm4 {
    tables: Tables<u32>,
}

impl fmt::Debug for Lpm4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.tables.debug("Lpm4", f)
    }
}

impl Lpm4 {
    /// Largest next hop plus one: next hops are stored in 24 bits.
    pub const MAX_NEXT_HOP: u32 = 1 << 24;
    /// Most tbl8 groups (group indices are stored in 24 bits).
    pub const MAX_TBL8S: u32 = 1 << 24;

    /// Makes an empty table on the default memory ([`LpmMemory::Auto`]).
    ///
    /// Fails if `max_routes` is 0, `number_tbl8s` exceeds 2^24 or the
    /// memory cannot be mapped. Takes 64 MiB for tbl24 plus 1 KiB per tbl8
    /// group.
    pub fn new(config: LpmConfig) -> Result<Lpm4, LpmError> {
        Self::with_memory(config, LpmMemory::Auto)
    }

    /// Makes an empty table on the memory `mem` asks for.
    pub fn with_memory(config: LpmConfig, mem: LpmMemory) -> Result<Lpm4, LpmError> {
        Ok(Lpm4 {
            tables: Tables::new(config, mem, Self::MAX_TBL8S, MAX_DEPTH)?,
        })
    }

    /// The sizes the table was made with.
    pub fn config(&self) -> LpmConfig {
        self.tables.config
    }

    /// What tbl24 sits on.
    pub fn backing(&self) -> TableBacking {
        self.tables.backing()
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.tables.rules.len()
    }

    /// Whether the table holds no route.
    pub fn is_empty(&self) -> bool {
        self.tables.rules.len() == 0
    }

    /// The tbl8 groups a table holding exactly `routes` (prefix, depth)
    /// needs: one per /24 holding a route longer than /24. Use it to size
    /// [`LpmConfig::number_tbl8s`].
    pub fn tbl8_groups_needed(routes: impl IntoIterator<Item = (u32, u8)>) -> u32 {
        let mut s: Vec<u32> = routes
            .into_iter()
            .filter(|&(_, d)| d > 24 && d <= MAX_DEPTH)
            .map(|(p, _)| p >> 8)
            .collect();
        s.sort_unstable();
        s.dedup();
        s.len() as u32
    }

    /// Number of tbl8 groups in use (one per /24 holding a route longer
    /// than /24).
    pub fn tbl8_groups_used(&self) -> usize {
        self.tables.groups_used()
    }

    /// The next hop of the route `prefix/depth` (prefix masked to its
    /// depth), if there is one. An invalid depth has no route.
    pub fn get(&self, prefix: u32, depth: u8) -> Option<u32> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.tables.rules.get(prefix & mask(depth), depth)
    }

    /// Every route as (prefix, depth, next hop), in no particular order.
    pub fn routes(&self) -> impl Iterator<Item = (u32, u8, u32)> + '_ {
        self.tables.rules.iter()
    }

    /// Adds the route `prefix/depth` → `next_hop`, or changes its next hop
    /// if it exists. Bits of `prefix` beyond `depth` are ignored.
    ///
    /// Fails, leaving the table unchanged, if `depth` > 32, `next_hop` ≥
    /// 2^24, the table holds `max_routes` routes already, or the route is
    /// longer than /24 and needs a tbl8 group when none is free.
    pub fn add(&mut self, prefix: u32, depth: u8, next_hop: u32) -> Result<(), LpmError> {
        check_depth(depth, MAX_DEPTH)?;
        if next_hop >= Self::MAX_NEXT_HOP {
            return Err(LpmError::NextHopTooLarge {
                next_hop,
                max: Self::MAX_NEXT_HOP,
            });
        }
        let prefix = prefix & mask(depth);
        if !self.tables.rules.contains(prefix, depth)
            && self.len() >= self.tables.config.max_routes as usize
        {
            return Err(LpmError::TooManyRoutes {
                max_routes: self.tables.config.max_routes,
            });
        }
        let entry = Format::route(depth, next_hop);
        if depth <= 24 {
            self.rewrite_tbl24(
                tbl24_span(prefix, depth),
                depth,
                entry,
                Format::may_overwrite,
            );
        } else {
            let i = (prefix >> 8) as usize;
            let mut e = self.tables.tbl24.as_slice()[i];
            if e & field::EXTENDED == 0 {
                let Some(g) = self.tables.alloc_group() else {
                    return Err(LpmError::NoTbl8 {
                        number_tbl8s: self.tables.config.number_tbl8s,
                        prefix: IpAddr::V4(Ipv4Addr::from(prefix)),
                        depth,
                        needed: 1,
                        free: 0,
                    });
                };
                // The group starts as a copy of the /24's entry.
                self.tables.tbl8.as_mut_slice()[Self::group_range(g)].fill(e);
                e = field::EXTENDED | g;
                self.tables.tbl24.as_mut_slice()[i] = e;
            }
            let group = &mut self.tables.tbl8.as_mut_slice()[Self::group_range(e)];
            rewrite(
                &mut group[group_span(prefix, depth)],
                depth,
                entry,
                Format::may_overwrite,
            );
        }
        self.tables.rules.insert(prefix, depth, next_hop);
        Ok(())
    }

    /// Deletes the route `prefix/depth` (bits of `prefix` beyond `depth`
    /// ignored). Addresses it covered go to the next-longest route covering
    /// it, or to no route.
    ///
    /// Fails, leaving the table unchanged, if `depth` > 32 or there is no
    /// such route.
    pub fn delete(&mut self, prefix: u32, depth: u8) -> Result<(), LpmError> {
        check_depth(depth, MAX_DEPTH)?;
        let prefix = prefix & mask(depth);
        if self.tables.rules.remove(prefix, depth).is_none() {
            return Err(LpmError::NotFound {
                prefix: IpAddr::V4(Ipv4Addr::from(prefix)),
                depth,
            });
        }
        // The entry of the longest remaining route covering this one.
        let replacement = self
            .tables
            .rules
            .covering(prefix, depth, |p, d| p & mask(d))
            .map_or(0, |(d, nh)| Format::route(d, nh));
        if depth <= 24 {
            // Groups met keep a longer route, so are not folded.
            self.rewrite_tbl24(
                tbl24_span(prefix, depth),
                depth,
                replacement,
                Format::owned_by,
            );
        } else {
            let i = (prefix >> 8) as usize;
            let e = self.tables.tbl24.as_slice()[i];
            // A route longer than /24 always has its group.
            debug_assert!(e & field::EXTENDED != 0);
            if e & field::EXTENDED != 0 {
                let group = &mut self.tables.tbl8.as_mut_slice()[Self::group_range(e)];
                rewrite(
                    &mut group[group_span(prefix, depth)],
                    depth,
                    replacement,
                    Format::owned_by,
                );
                // Fold back when no entry is from a route longer than /24:
                // the rest all come from the same covering route (or none).
                if !group.iter().any(|&x| Format::longer_than(x, 24)) {
                    let first = group[0];
                    group.fill(0);
                    self.tables.tbl24.as_mut_slice()[i] = first;
                    self.tables.free_group(e & field::DATA);
                }
            }
        }
        Ok(())
    }

    /// Removes every route. tbl24 and the groups are replaced by fresh
    /// zeroed memory of the same kind; if that cannot be mapped, they are
    /// zeroed in place instead.
    pub fn clear(&mut self) {
        self.tables.clear();
    }

    /// Writes `entry` (a route of `depth`) over the tbl24 entries in
    /// `range` that `selects` picks, and over those it picks in the groups
    /// the extended ones name.
    fn rewrite_tbl24(
        &mut self,
        range: std::ops::Range<usize>,
        depth: u8,
        entry: u32,
        selects: fn(u32, u8) -> bool,
    ) {
        let (tbl24, tbl8) = (
            self.tables.tbl24.as_mut_slice(),
            self.tables.tbl8.as_mut_slice(),
        );
        for e in &mut tbl24[range] {
            if *e & field::EXTENDED != 0 {
                rewrite(&mut tbl8[Self::group_range(*e)], depth, entry, selects);
            } else if selects(*e, depth) {
                *e = entry;
            }
        }
    }

    /// The `tbl8` index range of the group in the data field of `e`.
    #[inline(always)]
    fn group_range(e: u32) -> std::ops::Range<usize> {
        let start = (e & field::DATA) as usize * GROUP_LEN;
        start..start + GROUP_LEN
    }

    /// The tbl24 entry of `addr`.
    #[inline(always)]
    fn tbl24_entry(&self, addr: u32) -> u32 {
        // SAFETY: tbl24 has exactly 2^24 entries (struct invariant) and
        // `addr >> 8` < 2^24.
        unsafe { *self.tables.tbl24.as_ptr().add((addr >> 8) as usize) }
    }

    /// The entry for `addr` in the group named by extended entry `e`.
    #[inline(always)]
    fn group_entry(&self, e: u32, addr: u32) -> u32 {
        let i = (e & field::DATA) as usize * GROUP_LEN + (addr & 0xff) as usize;
        // SAFETY: an extended entry names an allocated group, below
        // `number_tbl8s` (struct invariant), and tbl8 has `number_tbl8s *
        // GROUP_LEN` entries, so `i` is in bounds.
        unsafe { *self.tables.tbl8.as_ptr().add(i) }
    }

    /// The final entry for `addr` given its tbl24 entry `e`.
    #[inline(always)]
    fn resolve(&self, e: u32, addr: u32) -> u32 {
        if e & field::EXTENDED == 0 {
            e
        } else {
            self.group_entry(e, addr)
        }
    }

    /// The next hop of the longest route covering `addr`, if any.
    #[inline]
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        Format::hop(self.entry(addr))
    }

    /// The entry that decides `addr`'s route, its extension group followed:
    /// [`field::VALID`] set when a route covers `addr`, and then the next hop
    /// [`lookup`](Self::lookup) returns in [`field::DATA`]; the other bits
    /// (the route's depth) are the table's. Equal entries always mean the
    /// same answer, so a caller routing a burst may compare an address's
    /// entry with the previous one's and reuse what it derived from it.
    #[inline]
    pub fn lookup_entry(&self, addr: u32) -> u32 {
        self.entry(addr)
    }

    /// Looks up four addresses; the four tbl24 loads are issued before any
    /// tbl8 load, so their cache misses overlap.
    #[inline]
    pub fn lookup_x4(&self, addrs: [u32; 4]) -> [Option<u32>; 4] {
        let e = addrs.map(|a| self.tbl24_entry(a));
        let mut r = [None; 4];
        for k in 0..4 {
            r[k] = Format::hop(self.resolve(e[k], addrs[k]));
        }
        r
    }

    /// Looks up `addrs` into `out` (`out[i]` for `addrs[i]`). Only the
    /// first `min(addrs.len(), out.len())` are done.
    ///
    /// [`lookup_bulk_or`](Self::lookup_bulk_or) is faster (about 20 % on
    /// 1M routes): its loop stores a plain `u32` per address.
    pub fn lookup_bulk(&self, addrs: &[u32], out: &mut [Option<u32>]) {
        for (o, &a) in out.iter_mut().zip(addrs) {
            *o = Format::hop(self.entry(a));
        }
    }

    /// Looks up `addrs` into `out` as [`lookup_bulk`](Self::lookup_bulk)
    /// does, writing the next hop, or `no_route` for an address without
    /// one (DPDK's `rte_lpm_lookupx4` default-value style). Pick a
    /// `no_route` that is not a next hop in use, e.g. `u32::MAX`.
    pub fn lookup_bulk_or(&self, addrs: &[u32], out: &mut [u32], no_route: u32) {
        let n = addrs.len().min(out.len());
        let out = &mut out[..n];
        self.entries(&addrs[..n], out);
        for o in out.iter_mut() {
            *o = if *o & field::VALID != 0 {
                *o & field::DATA
            } else {
                no_route
            };
        }
    }

    /// The bulk loop: the final entry of each address into `raw` (same
    /// length). Kept to a few instructions per address (load, the rarely
    /// taken extended branch, store) so that the out-of-order window holds
    /// many addresses' tbl24 loads, their cache misses in flight together;
    /// the entries are turned into results in a second pass. (A software
    /// prefetch pass measured slower: it only adds instructions to the
    /// window.)
    #[inline(always)]
    fn entries(&self, addrs: &[u32], raw: &mut [u32]) {
        for (r, &a) in raw.iter_mut().zip(addrs) {
            *r = self.entry(a);
        }
    }

    /// The final entry of `addr`: its tbl24 entry, or the group's.
    #[inline(always)]
    fn entry(&self, addr: u32) -> u32 {
        self.resolve(self.tbl24_entry(addr), addr)
    }
}

/// Writes `entry` (a route of `depth`) over the entries of `entries` that
/// `selects` picks: `Format::may_overwrite` when adding, `Format::owned_by` when
/// deleting.
fn rewrite(entries: &mut [u32], depth: u8, entry: u32, selects: fn(u32, u8) -> bool) {
    for x in entries {
        if selects(*x, depth) {
            *x = entry;
        }
    }
}
