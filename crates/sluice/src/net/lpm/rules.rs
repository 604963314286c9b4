//! The control-plane route store of an LPM table: one hash map per depth,
//! prefix → next hop, and a bitmap of the depths holding any route.
//!
//! The tables' entries say only which route won each address; the store is
//! what lets a delete find the next-longest route covering the deleted one
//! (at most one map lookup per non-empty shorter depth), and answers
//! [`get`](RuleStore::get). Keys are hashed with a two-multiply mix
//! (SplitMix64's finaliser) instead of SipHash: route adds are control-plane
//! work, but a million of them should take a second, not ten.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Hasher for prefix keys: the 64-bit finaliser of SplitMix64 over the key
/// words. Prefixes are low-entropy (trailing zeros), so a full mix matters.
#[derive(Default)]
pub(crate) struct PrefixHasher {
    /// The mix so far.
    h: u64,
}

impl PrefixHasher {
    #[inline]
    fn mix(&mut self, x: u64) {
        let mut z = (self.h ^ x).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.h = z ^ (z >> 31);
    }
}

impl Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        self.h
    }

    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
    }

    fn write_u32(&mut self, x: u32) {
        self.mix(u64::from(x));
    }

    fn write_u64(&mut self, x: u64) {
        self.mix(x);
    }

    fn write_u128(&mut self, x: u128) {
        self.mix(x as u64);
        self.mix((x >> 64) as u64);
    }
}

/// Routes by depth. `K` is the prefix type (`u32` or `u128`), always masked
/// to its depth by the caller.
pub(crate) struct RuleStore<K> {
    /// `maps[d]`: the routes of depth `d`, prefix → next hop.
    maps: Vec<HashMap<K, u32, BuildHasherDefault<PrefixHasher>>>,
    /// Bit `d` set iff `maps[d]` is non-empty.
    nonempty: [u64; 3],
    /// Total routes.
    len: usize,
}

impl<K: Copy + Eq + Hash> RuleStore<K> {
    /// An empty store for depths `0..=max_depth`.
    pub(crate) fn new(max_depth: u8) -> Self {
        RuleStore {
            maps: (0..=max_depth).map(|_| HashMap::default()).collect(),
            nonempty: [0; 3],
            len: 0,
        }
    }

    /// Number of routes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The next hop of `prefix/depth`.
    pub(crate) fn get(&self, prefix: K, depth: u8) -> Option<u32> {
        self.maps.get(usize::from(depth))?.get(&prefix).copied()
    }

    /// Whether `prefix/depth` is stored.
    pub(crate) fn contains(&self, prefix: K, depth: u8) -> bool {
        self.maps[usize::from(depth)].contains_key(&prefix)
    }

    /// Stores `prefix/depth` → `next_hop`; returns the previous next hop.
    pub(crate) fn insert(&mut self, prefix: K, depth: u8, next_hop: u32) -> Option<u32> {
        let d = usize::from(depth);
        let old = self.maps[d].insert(prefix, next_hop);
        if old.is_none() {
            self.len += 1;
            self.nonempty[d / 64] |= 1 << (d % 64);
        }
        old
    }

    /// Removes `prefix/depth`; returns its next hop.
    pub(crate) fn remove(&mut self, prefix: K, depth: u8) -> Option<u32> {
        let d = usize::from(depth);
        let old = self.maps[d].remove(&prefix);
        if old.is_some() {
            self.len -= 1;
            if self.maps[d].is_empty() {
                self.nonempty[d / 64] &= !(1 << (d % 64));
            }
        }
        old
    }

    /// The longest route shorter than `depth` that covers `prefix`, as
    /// (depth, next hop); `mask(p, d)` masks a prefix to depth `d`.
    pub(crate) fn covering(
        &self,
        prefix: K,
        depth: u8,
        mask: impl Fn(K, u8) -> K,
    ) -> Option<(u8, u32)> {
        for d in (0..depth).rev() {
            let di = usize::from(d);
            if self.nonempty[di / 64] & (1 << (di % 64)) == 0 {
                continue;
            }
            if let Some(&nh) = self.maps[di].get(&mask(prefix, d)) {
                return Some((d, nh));
            }
        }
        None
    }

    /// Removes every route.
    pub(crate) fn clear(&mut self) {
        for m in &mut self.maps {
            m.clear();
        }
        self.nonempty = [0; 3];
        self.len = 0;
    }

    /// Every route as (prefix, depth, next hop), in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (K, u8, u32)> + '_ {
        self.maps
            .iter()
            .enumerate()
            .flat_map(|(d, m)| m.iter().map(move |(&p, &nh)| (p, d as u8, nh)))
    }
}
