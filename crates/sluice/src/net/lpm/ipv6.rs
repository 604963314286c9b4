//! IPv6 longest-prefix match: a multibit trie with a 24-bit first stride
//! and 8-bit strides after it, the layout of DPDK's `rte_lpm6`.
//!
//! - **tbl24** has 2^24 entries indexed by the top 24 bits (bytes 0–2) of
//!   the address.
//! - Below it, **groups** of 256 entries each take one more byte: a group
//!   at level 1 is indexed by byte 3, at level 2 by byte 4, ..., at level
//!   13 by byte 15. An entry either holds a route (its next hop and depth)
//!   or is *extended*: it names the group of the next level.
//!
//! A route of depth `d` lives at level 0 if `d` ≤ 24, else at level
//! `⌈(d − 24) / 8⌉`, expanded into the `2^(end − d)` entries it covers there
//! (`end` the last bit the level indexes); the groups on the way are
//! created as copies of the entry they replace. A lookup walks one entry
//! per level until a non-extended one: one load for a route up to /24, one
//! more per byte beyond. Bulk lookups walk eight addresses level by level
//! together, so the loads of different addresses overlap.
//!
//! Entries record the depth of the route that wrote them. Adding a route
//! writes only entries (at its level and in every group below them) whose
//! route is no longer than it; deleting one rewrites only its own entries
//! (there and below) with those of the next-longest route covering it,
//! from the route store. A group whose entries all come from routes no
//! longer than the bit where it starts, and none extended, is folded back
//! into its parent entry and returned to the pool, level by level upwards,
//! so groups in use always hold a longer route.
//!
//! Why this layout (the "equivalent" question): wider strides below the
//! first level (16 bits) would halve the levels but make each group 256 KiB,
//! hundreds of megabytes for a few thousand routes; narrower ones would add
//! levels. 8-bit groups of 1 KiB keep memory near DPDK's and a walk in L1
//! for the routes a burst hits.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use super::mem::{LpmMemory, TableBacking, prefetch};
use super::tables::{EntryFormat, GROUP_LEN, TBL24_LEN, Tables, check_depth};
use super::{LpmConfig, LpmError};

/// Bit fields of a table entry (`u32`).
pub mod field {
    /// Set when the entry holds a route (else: no route, or extended).
    pub const VALID: u32 = 1 << 31;
    /// The entry names a group of the next level (the data field is the
    /// group index); `VALID` and the depth are then clear.
    pub const EXTENDED: u32 = 1 << 30;
    /// Shift of the depth of the route that wrote the entry.
    pub const DEPTH_SHIFT: u32 = 22;
    /// Mask of the depth (8 bits, 0..=128) after shifting.
    pub const DEPTH_MASK: u32 = 0xff;
    /// Data: next-hop id, or group index when `EXTENDED`.
    pub const DATA: u32 = (1 << 22) - 1;
}

/// Widest IPv6 prefix.
const MAX_DEPTH: u8 = 128;

/// This family's entry format, the one [`field`] describes.
type Format = EntryFormat<{ field::DEPTH_SHIFT }>;
const _: () = assert!(
    Format::VALID == field::VALID
        && Format::EXTENDED == field::EXTENDED
        && Format::DEPTH_MASK == field::DEPTH_MASK
        && Format::DATA == field::DATA
);
/// Addresses a bulk lookup walks together.
const BLOCK: usize = 8;

/// The 128-bit mask of `depth` (0..=128).
#[inline]
fn mask(depth: u8) -> u128 {
    if depth == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(depth))
    }
}

/// The level a route of `depth` lives at.
#[inline]
fn level_of(depth: u8) -> usize {
    if depth <= 24 {
        0
    } else {
        usize::from(depth - 24).div_ceil(8)
    }
}

/// The bit just past those level `level` indexes (24, 32, ..., 128).
#[inline]
fn level_end(level: usize) -> u32 {
    24 + 8 * level as u32
}

/// The index of `p` in its entry of level `level` (in tbl24 for 0, in the
/// group otherwise).
#[inline]
fn level_index(p: u128, level: usize) -> usize {
    let shifted = (p >> (128 - level_end(level))) as usize;
    if level == 0 {
        shifted & (TBL24_LEN - 1)
    } else {
        shifted & (GROUP_LEN - 1)
    }
}

/// A group's entry range in the group table.
#[inline(always)]
fn group_range(e: u32) -> std::ops::Range<usize> {
    let start = (e & field::DATA) as usize * GROUP_LEN;
    start..start + GROUP_LEN
}

/// An IPv6 longest-prefix-match table; see the [module docs](self).
///
/// Addresses and prefixes are `[u8; 16]` in network order
/// (`Ipv6Addr::octets`). Lookups take `&self` and may run on any number of
/// threads at once; changes take `&mut self`.
pub struct Lpm6 {
    tables: Tables<u128>,
}

impl fmt::Debug for Lpm6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.tables.debug("Lpm6", f)
    }
}

/// An address as a printable `IpAddr`.
fn ip(p: u128) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(p))
}

impl Lpm6 {
    /// Largest next hop plus one: next hops are stored in 22 bits.
    pub const MAX_NEXT_HOP: u32 = 1 << 22;
    /// Most groups (group indices are stored in 22 bits).
    pub const MAX_TBL8S: u32 = 1 << 22;

    /// Makes an empty table on the default memory ([`LpmMemory::Auto`]).
    ///
    /// Fails if `max_routes` is 0, `number_tbl8s` exceeds 2^22 or the
    /// memory cannot be mapped. Takes 64 MiB for tbl24 plus 1 KiB per
    /// group. A route of depth `d` > 24 needs up to `⌈(d − 24) / 8⌉` groups
    /// (fewer when it shares them with routes of the same leading bytes).
    pub fn new(config: LpmConfig) -> Result<Lpm6, LpmError> {
        Self::with_memory(config, LpmMemory::Auto)
    }

    /// Makes an empty table on the memory `mem` asks for.
    pub fn with_memory(config: LpmConfig, mem: LpmMemory) -> Result<Lpm6, LpmError> {
        Ok(Lpm6 {
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

    /// The groups a table holding exactly `routes` (prefix, depth) needs:
    /// one per trie node below the first level on the routes' paths (up to
    /// `⌈(depth − 24) / 8⌉` per route, shared by routes with the same
    /// leading bytes). Use it to size [`LpmConfig::number_tbl8s`].
    pub fn tbl8_groups_needed(routes: impl IntoIterator<Item = ([u8; 16], u8)>) -> u32 {
        let mut s: Vec<(usize, u128)> = Vec::new();
        for (prefix, depth) in routes {
            if depth <= 24 || depth > MAX_DEPTH {
                continue;
            }
            let p = u128::from_be_bytes(prefix);
            for level in 1..=level_of(depth) {
                // The node at `level` is named by the bits above it.
                s.push((level, p >> (128 - (level_end(level) - 8))));
            }
        }
        s.sort_unstable();
        s.dedup();
        s.len() as u32
    }

    /// Number of groups in use.
    pub fn tbl8_groups_used(&self) -> usize {
        self.tables.groups_used()
    }

    /// The next hop of the route `prefix/depth` (prefix masked to its
    /// depth), if there is one. An invalid depth has no route.
    pub fn get(&self, prefix: [u8; 16], depth: u8) -> Option<u32> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.tables
            .rules
            .get(u128::from_be_bytes(prefix) & mask(depth), depth)
    }

    /// Every route as (prefix, depth, next hop), in no particular order.
    pub fn routes(&self) -> impl Iterator<Item = ([u8; 16], u8, u32)> + '_ {
        self.tables
            .rules
            .iter()
            .map(|(p, d, nh)| (p.to_be_bytes(), d, nh))
    }

    /// Adds the route `prefix/depth` → `next_hop`, or changes its next hop
    /// if it exists. Bits of `prefix` beyond `depth` are ignored.
    ///
    /// Fails, leaving the table unchanged, if `depth` > 128, `next_hop` ≥
    /// 2^22, the table holds `max_routes` routes already, or the route
    /// needs more new groups than are free.
    pub fn add(&mut self, prefix: [u8; 16], depth: u8, next_hop: u32) -> Result<(), LpmError> {
        check_depth(depth, MAX_DEPTH)?;
        if next_hop >= Self::MAX_NEXT_HOP {
            return Err(LpmError::NextHopTooLarge {
                next_hop,
                max: Self::MAX_NEXT_HOP,
            });
        }
        let p = u128::from_be_bytes(prefix) & mask(depth);
        if !self.tables.rules.contains(p, depth)
            && self.len() >= self.tables.config.max_routes as usize
        {
            return Err(LpmError::TooManyRoutes {
                max_routes: self.tables.config.max_routes,
            });
        }
        let last = level_of(depth);
        // Groups this route needs that do not exist yet: from the first
        // non-extended entry on its path down to its level.
        let mut e = self.tables.tbl24.as_slice()[level_index(p, 0)];
        let mut have = 0;
        while have < last && e & field::EXTENDED != 0 {
            have += 1;
            e = self.tables.tbl8.as_slice()[group_range(e).start + level_index(p, have)];
        }
        let (needed, free) = (last - have, self.tables.free_groups());
        if needed > free {
            return Err(LpmError::NoTbl8 {
                number_tbl8s: self.tables.config.number_tbl8s,
                prefix: ip(p),
                depth,
                // At most 13 and 2^22.
                needed: needed as u32,
                free: free as u32,
            });
        }
        // Walk down, making the missing groups; `slot` is the index (in
        // tbl24 for level 0, in tbl8 otherwise) of the path's entry.
        let mut slot = level_index(p, 0);
        for level in 1..=last {
            let e = self.entry(level - 1, slot);
            let g = if e & field::EXTENDED != 0 {
                e
            } else {
                let Some(g) = self.tables.alloc_group() else {
                    unreachable!("free groups were counted");
                };
                // The new group starts as copies of the entry it replaces.
                let g = field::EXTENDED | g;
                self.tables.tbl8.as_mut_slice()[group_range(g)].fill(e);
                self.set_entry(level - 1, slot, g);
                g
            };
            slot = group_range(g).start + level_index(p, level);
        }
        let new = Format::route(depth, next_hop);
        let count = 1usize << (level_end(last) - u32::from(depth));
        // A route's entries never cross its group: `count` ≤ 256 there and
        // `slot` is aligned to it.
        self.rewrite_level(last, slot..slot + count, depth, new, Format::may_overwrite);
        self.tables.rules.insert(p, depth, next_hop);
        Ok(())
    }

    /// Deletes the route `prefix/depth` (bits of `prefix` beyond `depth`
    /// ignored). Addresses it covered go to the next-longest route covering
    /// it, or to no route; groups left without a longer route are freed.
    ///
    /// Fails, leaving the table unchanged, if `depth` > 128 or there is no
    /// such route.
    pub fn delete(&mut self, prefix: [u8; 16], depth: u8) -> Result<(), LpmError> {
        check_depth(depth, MAX_DEPTH)?;
        let p = u128::from_be_bytes(prefix) & mask(depth);
        if self.tables.rules.remove(p, depth).is_none() {
            return Err(LpmError::NotFound {
                prefix: ip(p),
                depth,
            });
        }
        let replacement = self
            .tables
            .rules
            .covering(p, depth, |x, d| x & mask(d))
            .map_or(0, |(d, nh)| Format::route(d, nh));
        let last = level_of(depth);
        // The path: `slots[l]` is the index of the path's entry at level
        // `l` (in tbl24 for 0, in tbl8 otherwise).
        let mut slots = [0usize; 17];
        slots[0] = level_index(p, 0);
        for level in 1..=last {
            let e = self.entry(level - 1, slots[level - 1]);
            // A route's path is all extended while it exists (a group is
            // folded only when no longer route is under it).
            debug_assert!(e & field::EXTENDED != 0);
            if e & field::EXTENDED == 0 {
                return Ok(());
            }
            slots[level] = group_range(e).start + level_index(p, level);
        }
        let slot = slots[last];
        let count = 1usize << (level_end(last) - u32::from(depth));
        self.rewrite_level(
            last,
            slot..slot + count,
            depth,
            replacement,
            Format::owned_by,
        );
        // Fold the path's groups, deepest first, while they hold nothing
        // longer than the bit they start at.
        for level in (1..=last).rev() {
            let start = slots[level] - slots[level] % GROUP_LEN;
            let group = &mut self.tables.tbl8.as_mut_slice()[start..start + GROUP_LEN];
            let begins = (level_end(level) - 8) as u8;
            if group
                .iter()
                .any(|&x| x & field::EXTENDED != 0 || Format::longer_than(x, begins))
            {
                break;
            }
            let first = group[0];
            group.fill(0);
            self.set_entry(level - 1, slots[level - 1], first);
            self.tables.free_group((start / GROUP_LEN) as u32);
        }
        Ok(())
    }

    /// Removes every route. tbl24 is replaced by fresh zeroed memory of the
    /// same kind (zeroed in place if that cannot be mapped); groups are
    /// zeroed.
    pub fn clear(&mut self) {
        self.tables.clear();
    }

    /// Writes `entry` (a route of `depth`) over the entries in `slots` of
    /// level `level`'s table that `selects` picks, and over those it picks
    /// in the groups below the extended ones.
    fn rewrite_level(
        &mut self,
        level: usize,
        slots: std::ops::Range<usize>,
        depth: u8,
        entry: u32,
        selects: fn(u32, u8) -> bool,
    ) {
        let (tbl24, tbl8) = (
            self.tables.tbl24.as_mut_slice(),
            self.tables.tbl8.as_mut_slice(),
        );
        for i in slots {
            let x = if level == 0 { tbl24[i] } else { tbl8[i] };
            if x & field::EXTENDED != 0 {
                rewrite_below(tbl8, x, depth, entry, selects);
            } else if selects(x, depth) {
                if level == 0 {
                    tbl24[i] = entry;
                } else {
                    tbl8[i] = entry;
                }
            }
        }
    }

    /// The entry at `slot` of level `level`'s table.
    fn entry(&self, level: usize, slot: usize) -> u32 {
        if level == 0 {
            self.tables.tbl24.as_slice()[slot]
        } else {
            self.tables.tbl8.as_slice()[slot]
        }
    }

    fn set_entry(&mut self, level: usize, slot: usize, e: u32) {
        if level == 0 {
            self.tables.tbl24.as_mut_slice()[slot] = e;
        } else {
            self.tables.tbl8.as_mut_slice()[slot] = e;
        }
    }

    /// The tbl24 entry of `addr`.
    #[inline(always)]
    fn tbl24_entry(&self, addr: &[u8; 16]) -> u32 {
        let i = (usize::from(addr[0]) << 16) | (usize::from(addr[1]) << 8) | usize::from(addr[2]);
        // SAFETY: tbl24 has exactly 2^24 entries (struct invariant) and
        // `i` < 2^24.
        unsafe { *self.tables.tbl24.as_ptr().add(i) }
    }

    /// The entry at byte `b` of the group named by extended entry `e`.
    #[inline(always)]
    fn group_entry(&self, e: u32, b: u8) -> u32 {
        let i = (e & field::DATA) as usize * GROUP_LEN + usize::from(b);
        // An extended entry names a group below `number_tbl8s` (struct
        // invariant) and tbl8 has `number_tbl8s * GROUP_LEN` entries; the
        // bulk loop's dummy read of group 0, byte 0 reads entry 0.
        // SAFETY: `i` is in bounds (above); tbl8 always has an entry 0.
        unsafe { *self.tables.tbl8.as_ptr().add(i) }
    }

    /// The final entry of `addr`.
    #[inline(always)]
    fn walk(&self, addr: &[u8; 16]) -> u32 {
        let mut e = self.tbl24_entry(addr);
        // A level-13 group (byte 15) holds no extended entry, so the walk
        // ends within the address.
        for &b in &addr[3..] {
            if e & field::EXTENDED == 0 {
                break;
            }
            e = self.group_entry(e, b);
        }
        e
    }

    /// The next hop of the longest route covering `addr`, if any.
    #[inline]
    pub fn lookup(&self, addr: [u8; 16]) -> Option<u32> {
        Format::hop(self.walk(&addr))
    }

    /// Looks up four addresses, walked level by level together so their
    /// loads overlap.
    #[inline]
    pub fn lookup_x4(&self, addrs: [[u8; 16]; 4]) -> [Option<u32>; 4] {
        self.walk_lanes(&addrs).map(Format::hop)
    }

    /// Looks up `addrs` into `out` (`out[i]` for `addrs[i]`). Only the
    /// first `min(addrs.len(), out.len())` are done.
    pub fn lookup_bulk(&self, addrs: &[[u8; 16]], out: &mut [Option<u32>]) {
        self.bulk(addrs, out, Format::hop);
    }

    /// Looks up `addrs` into `out` as [`lookup_bulk`](Self::lookup_bulk)
    /// does, writing the next hop, or `no_route` for an address without
    /// one. Pick a `no_route` that is not a next hop in use, e.g.
    /// `u32::MAX`.
    pub fn lookup_bulk_or(&self, addrs: &[[u8; 16]], out: &mut [u32], no_route: u32) {
        self.bulk(addrs, out, |e| {
            if e & field::VALID != 0 {
                e & field::DATA
            } else {
                no_route
            }
        });
    }

    /// The bulk loop: blocks of [`BLOCK`] addresses walked together (see
    /// `walk_lanes`), the next block's tbl24 lines prefetched meanwhile.
    #[inline(always)]
    fn bulk<T>(&self, addrs: &[[u8; 16]], out: &mut [T], f: impl Fn(u32) -> T) {
        let n = addrs.len().min(out.len());
        let (addrs, out) = (&addrs[..n], &mut out[..n]);
        let (blocks, rest) = addrs.as_chunks::<BLOCK>();
        let (out_blocks, out_rest) = out.as_chunks_mut::<BLOCK>();
        for (i, (a, o)) in blocks.iter().zip(out_blocks).enumerate() {
            for x in blocks.get(i + 1).into_iter().flatten() {
                let i24 = (usize::from(x[0]) << 16) | (usize::from(x[1]) << 8) | usize::from(x[2]);
                // Inside tbl24 (`i24` < 2^24); a prefetch never faults anyway.
                prefetch(self.tables.tbl24.as_ptr().wrapping_add(i24));
            }
            let e = self.walk_lanes(a);
            for (o, e) in o.iter_mut().zip(e) {
                *o = f(e);
            }
        }
        for (a, o) in rest.iter().zip(out_rest) {
            *o = f(self.walk(a));
        }
    }
}

impl Lpm6 {
    /// The final entries of `N` addresses, walked level by level together:
    /// a lane whose walk has ended keeps its entry (a select, not a branch;
    /// it reads group 0's first entry, always mapped, meanwhile), and the
    /// walk stops when no lane is extended.
    #[inline(always)]
    fn walk_lanes<const N: usize>(&self, a: &[[u8; 16]; N]) -> [u32; N] {
        let mut e: [u32; N] = std::array::from_fn(|k| self.tbl24_entry(&a[k]));
        let mut b = 3;
        while b < 16 && e.iter().fold(0, |acc, &x| acc | x) & field::EXTENDED != 0 {
            for k in 0..N {
                let ext = e[k] & field::EXTENDED != 0;
                let g = if ext { e[k] } else { 0 };
                let byte = if ext { a[k][b] } else { 0 };
                let x = self.group_entry(g, byte);
                e[k] = if ext { x } else { e[k] };
            }
            b += 1;
        }
        e
    }
}

/// Writes `entry` (a route of `depth`) over every entry of the group named
/// by `g`, and of the groups below it, that `selects` picks:
/// `Format::may_overwrite` when adding, `Format::owned_by` when deleting.
fn rewrite_below(tbl8: &mut [u32], g: u32, depth: u8, entry: u32, selects: fn(u32, u8) -> bool) {
    for i in group_range(g) {
        let x = tbl8[i];
        if x & field::EXTENDED != 0 {
            rewrite_below(tbl8, x, depth, entry, selects);
        } else if selects(x, depth) {
            tbl8[i] = entry;
        }
    }
}
