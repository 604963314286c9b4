//! What the IPv4 and IPv6 tables share: tbl24, the pool of 256-entry
//! groups, the route store and the sizes, with the code that makes, sizes
//! and clears them and hands groups out and takes them back.

use std::fmt;
use std::hash::Hash;

use super::mem::{EntryTable, LpmMemory, TableBacking};
use super::rules::RuleStore;
use super::{LpmConfig, LpmError};

/// Number of tbl24 entries.
pub(super) const TBL24_LEN: usize = 1 << 24;
/// Entries per group.
pub(super) const GROUP_LEN: usize = 256;

/// The memory of an LPM table and the routes it holds, prefixes of type
/// `P`.
pub(super) struct Tables<P> {
    /// First level: exactly [`TBL24_LEN`] entries.
    pub(super) tbl24: EntryTable,
    /// `number_tbl8s` groups of [`GROUP_LEN`] entries (exactly
    /// `number_tbl8s * GROUP_LEN`). A group not in use is all zero. Every
    /// extended entry names a group `< tbl8_next` not in `tbl8_free`.
    pub(super) tbl8: EntryTable,
    /// Groups never handed out are `tbl8_next..number_tbl8s`.
    tbl8_next: u32,
    /// Groups handed out and returned (zeroed).
    tbl8_free: Vec<u32>,
    /// The routes (prefixes masked to their depth).
    pub(super) rules: RuleStore<P>,
    /// Sizes.
    pub(super) config: LpmConfig,
}

impl<P: Copy + Eq + Hash> Tables<P> {
    /// Empty tables on the memory `mem` asks for, for routes up to
    /// `max_depth`. Fails if `max_routes` is 0, `number_tbl8s` exceeds
    /// `max_tbl8s` or the memory cannot be mapped.
    pub(super) fn new(
        config: LpmConfig,
        mem: LpmMemory,
        max_tbl8s: u32,
        max_depth: u8,
    ) -> Result<Tables<P>, LpmError> {
        if config.max_routes == 0 {
            return Err(LpmError::ZeroMaxRoutes);
        }
        if config.number_tbl8s > max_tbl8s {
            return Err(LpmError::TooManyTbl8s {
                number_tbl8s: config.number_tbl8s,
                max: max_tbl8s,
            });
        }
        let map = |len: usize| {
            EntryTable::new(len, mem).map_err(|e| LpmError::NoMemory {
                bytes: len * 4,
                errno: e.raw_os_error().unwrap_or(0),
            })
        };
        Ok(Tables {
            tbl24: map(TBL24_LEN)?,
            tbl8: map(config.number_tbl8s as usize * GROUP_LEN)?,
            tbl8_next: 0,
            tbl8_free: Vec::new(),
            rules: RuleStore::new(max_depth),
            config,
        })
    }

    /// What tbl24 sits on.
    pub(super) fn backing(&self) -> TableBacking {
        self.tbl24.backing()
    }

    /// Number of groups in use.
    pub(super) fn groups_used(&self) -> usize {
        self.tbl8_next as usize - self.tbl8_free.len()
    }

    /// Groups that can still be handed out.
    pub(super) fn free_groups(&self) -> usize {
        (self.config.number_tbl8s - self.tbl8_next) as usize + self.tbl8_free.len()
    }

    /// Takes a free group (its entries are zero).
    pub(super) fn alloc_group(&mut self) -> Option<u32> {
        if let Some(g) = self.tbl8_free.pop() {
            return Some(g);
        }
        if self.tbl8_next < self.config.number_tbl8s {
            self.tbl8_next += 1;
            return Some(self.tbl8_next - 1);
        }
        None
    }

    /// Returns group `g`, which its caller has zeroed, to the pool.
    pub(super) fn free_group(&mut self, g: u32) {
        self.tbl8_free.push(g);
    }

    /// Removes every route. tbl24 is replaced by fresh zeroed memory of the
    /// same kind (zeroed in place if that cannot be mapped); the groups are
    /// zeroed.
    pub(super) fn clear(&mut self) {
        let mem = match self.tbl24.backing() {
            TableBacking::Hugetlb => LpmMemory::Auto,
            TableBacking::Transparent => LpmMemory::Transparent,
            TableBacking::Small => LpmMemory::Small,
        };
        match EntryTable::new(TBL24_LEN, mem) {
            Ok(t) => self.tbl24 = t,
            Err(_) => self.tbl24.as_mut_slice().fill(0),
        }
        self.tbl8.as_mut_slice().fill(0);
        self.tbl8_next = 0;
        self.tbl8_free.clear();
        self.rules.clear();
    }

    /// The `Debug` output of the table named `name` built on these.
    pub(super) fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("config", &self.config)
            .field("routes", &self.rules.len())
            .field("tbl8_groups_used", &self.groups_used())
            .field("backing", &self.backing())
            .finish_non_exhaustive()
    }
}

/// Checks that `depth` is at most `max_depth`.
pub(super) fn check_depth(depth: u8, max_depth: u8) -> Result<(), LpmError> {
    if depth > max_depth {
        Err(LpmError::InvalidDepth {
            depth,
            max: max_depth,
        })
    } else {
        Ok(())
    }
}

/// A table entry (`u32`) of a family whose depth field starts at bit
/// `DEPTH_SHIFT`: bit 31 is set when the entry holds a route, bit 30 when
/// it names a group instead (the data field is then the group index), bits
/// `DEPTH_SHIFT..30` hold the depth of the route that wrote it and bits
/// `0..DEPTH_SHIFT` the data (next hop or group index).
pub(super) struct EntryFormat<const DEPTH_SHIFT: u32>;

impl<const DEPTH_SHIFT: u32> EntryFormat<DEPTH_SHIFT> {
    /// Set when the entry holds a route.
    pub(super) const VALID: u32 = 1 << 31;
    /// Set when the entry names a group.
    pub(super) const EXTENDED: u32 = 1 << 30;
    /// Mask of the depth after shifting.
    pub(super) const DEPTH_MASK: u32 = (1 << (30 - DEPTH_SHIFT)) - 1;
    /// Data: next-hop id, or group index when `EXTENDED`.
    pub(super) const DATA: u32 = (1 << DEPTH_SHIFT) - 1;

    /// The entry of a route of `depth` to `next_hop`.
    #[inline(always)]
    pub(super) fn route(depth: u8, next_hop: u32) -> u32 {
        Self::VALID | (u32::from(depth) << DEPTH_SHIFT) | (next_hop & Self::DATA)
    }

    /// Depth recorded in entry `e`.
    #[inline(always)]
    pub(super) fn depth(e: u32) -> u8 {
        ((e >> DEPTH_SHIFT) & Self::DEPTH_MASK) as u8
    }

    /// Whether a route of `depth` may write entry `e` (free, or written by
    /// a route no longer than it).
    #[inline(always)]
    pub(super) fn may_overwrite(e: u32, depth: u8) -> bool {
        e & Self::VALID == 0 || Self::depth(e) <= depth
    }

    /// Whether entry `e` was written by a route of exactly `depth`.
    #[inline(always)]
    pub(super) fn owned_by(e: u32, depth: u8) -> bool {
        e & Self::VALID != 0 && Self::depth(e) == depth
    }

    /// Whether entry `e` holds a route longer than `depth`.
    #[inline(always)]
    pub(super) fn longer_than(e: u32, depth: u8) -> bool {
        e & Self::VALID != 0 && Self::depth(e) > depth
    }

    /// Next hop of a final (non-extended) entry.
    #[inline(always)]
    pub(super) fn hop(e: u32) -> Option<u32> {
        if e & Self::VALID != 0 {
            Some(e & Self::DATA)
        } else {
            None
        }
    }
}
