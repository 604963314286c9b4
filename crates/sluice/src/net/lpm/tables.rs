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
