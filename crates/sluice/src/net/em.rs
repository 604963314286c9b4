//! Exact-match flow table: a 5-tuple → next-hop hash table, for l3fwd's
//! exact-match mode.
//!
//! **Algorithm.** Open addressing with linear probing over a power-of-two
//! slot array kept at most half full, so a probe sequence is short (about
//! 1.5 slots on a hit, 2.5 on a miss at the limit). Deleting shifts the
//! following entries of the run back (backward-shift deletion), so there
//! are no tombstones and lookups never slow down with churn. Each slot
//! stores the key's 32-bit hash beside the key: a probe compares the hash
//! first and the key only when it matches.
//!
//! **Hash.** Keys are packed into 64-bit words (an IPv4 5-tuple into two,
//! IPv6 into five); the words are folded with a multiply-xorshift mixer.
//! Not cryptographic: a table fed by an adversary should be keyed (the
//! `seed` of [`EmConfig`]).
//!
//! ```
//! use sluice::net::em::{EmConfig, EmTable, Flow4};
//!
//! let mut t = EmTable::<Flow4>::new(EmConfig { max_entries: 16, seed: 1 }).unwrap();
//! let f = Flow4 { src: 0x0a00_0001, dst: 0xc612_0001, sport: 1024, dport: 9, proto: 17 };
//! t.insert(f, 3).unwrap();
//! assert_eq!(t.lookup(&f), Some(3));
//! assert_eq!(t.lookup(&Flow4 { sport: 1025, ..f }), None);
//! assert_eq!(t.remove(&f), Some(3));
//! assert!(t.is_empty());
//! ```

use std::fmt;

/// A key the table can hold: fixed-size, compared bytewise, hashed by
/// folding its words.
pub trait EmKey: Copy + Eq + fmt::Debug {
    /// The key's hash under `seed`.
    fn hash(&self, seed: u64) -> u32;
}

/// An IPv4 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flow4 {
    /// Source address (host order).
    pub src: u32,
    /// Destination address (host order).
    pub dst: u32,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
}

/// An IPv6 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flow6 {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Next header (the L4 protocol).
    pub proto: u8,
}

/// One mixing step: multiply the 128-bit product of `a` and `b` down to 64
/// bits (the folded multiply of wyhash-style hashes).
#[inline(always)]
fn mix(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

const K0: u64 = 0xa076_1d64_78bd_642f;
const K1: u64 = 0xe703_7ed1_a0b4_28db;
const K2: u64 = 0x8ebc_6af0_9c88_c6e3;

#[inline(always)]
fn finish(h: u64) -> u32 {
    let h = mix(h ^ K2, K1);
    (h ^ (h >> 32)) as u32
}

impl EmKey for Flow4 {
    #[inline]
    fn hash(&self, seed: u64) -> u32 {
        let a = ((self.src as u64) << 32) | self.dst as u64;
        let b = ((self.sport as u64) << 24) | ((self.dport as u64) << 8) | self.proto as u64;
        finish(mix(a ^ K0 ^ seed, b ^ K1))
    }
}

impl EmKey for Flow6 {
    #[inline]
    fn hash(&self, seed: u64) -> u32 {
        let w = |b: &[u8; 16], i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        let ports = ((self.sport as u64) << 24) | ((self.dport as u64) << 8) | self.proto as u64;
        let h = mix(w(&self.src, 0) ^ K0 ^ seed, w(&self.src, 8) ^ K1);
        let h = mix(h ^ w(&self.dst, 0), w(&self.dst, 8) ^ K2);
        finish(mix(h ^ ports, K0))
    }
}

/// Sizes of an exact-match table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmConfig {
    /// Most entries the table holds (1..=2^30).
    pub max_entries: u32,
    /// Hash seed.
    pub seed: u64,
}

/// Why an exact-match operation failed (the table is unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmError {
    /// `max_entries` is 0 or above 2^30.
    BadSize {
        /// The value given.
        max_entries: u32,
    },
    /// The table holds `max_entries` entries.
    Full {
        /// The configured limit.
        max_entries: u32,
    },
}

impl fmt::Display for EmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EmError::BadSize { max_entries } => write!(
                f,
                "exact-match table size {max_entries} is out of range: must be 1..=2^30"
            ),
            EmError::Full { max_entries } => {
                write!(
                    f,
                    "exact-match table full: max_entries {max_entries} reached"
                )
            }
        }
    }
}

impl std::error::Error for EmError {}

/// One slot. Invariant: `hop == EMPTY` exactly when the slot holds no key
/// (then `key` and `hash` mean nothing).
#[derive(Clone, Copy)]
struct Slot<K> {
    /// The stored key's hash (compared before the key).
    hash: u32,
    /// The next hop, or [`EMPTY`].
    hop: u32,
    /// The key.
    key: K,
}

/// `Slot::hop` of an empty slot.
const EMPTY: u32 = u32::MAX;

/// An exact-match table of `K` → next hop (see the [module docs](self)).
pub struct EmTable<K: EmKey> {
    /// `mask + 1` slots, a power of two at least twice `max_entries`.
    /// Invariant: every key sits in the probe run that starts at its
    /// home slot (`hash & mask`) with no empty slot between the two.
    slots: Box<[Slot<K>]>,
    /// Slot count minus one.
    mask: usize,
    /// Entries held.
    len: u32,
    /// Sizes.
    config: EmConfig,
}

impl<K: EmKey> fmt::Debug for EmTable<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmTable")
            .field("config", &self.config)
            .field("len", &self.len)
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl<K: EmKey + Default> EmTable<K> {
    /// An empty table for up to `config.max_entries` entries.
    pub fn new(config: EmConfig) -> Result<Self, EmError> {
        if config.max_entries == 0 || config.max_entries > 1 << 30 {
            return Err(EmError::BadSize {
                max_entries: config.max_entries,
            });
        }
        let n = (config.max_entries as usize * 2).next_power_of_two();
        let empty = Slot {
            hash: 0,
            hop: EMPTY,
            key: K::default(),
        };
        Ok(EmTable {
            slots: vec![empty; n].into_boxed_slice(),
            mask: n - 1,
            len: 0,
            config,
        })
    }
}

impl<K: EmKey> EmTable<K> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot holding `key`, if any.
    #[inline]
    fn find(&self, key: &K, hash: u32) -> Option<usize> {
        let mut i = hash as usize & self.mask;
        loop {
            let s = &self.slots[i];
            if s.hop == EMPTY {
                return None;
            }
            if s.hash == hash && s.key == *key {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The next hop of `key`, if present.
    #[inline]
    pub fn lookup(&self, key: &K) -> Option<u32> {
        self.find(key, key.hash(self.config.seed))
            .map(|i| self.slots[i].hop)
    }

    /// Adds `key` → `hop`, or changes the hop of a present key (returning
    /// the old one). `hop` must not be `u32::MAX`: it is stored as
    /// `u32::MAX - 1` then (callers use hops far below).
    pub fn insert(&mut self, key: K, hop: u32) -> Result<Option<u32>, EmError> {
        let hop = hop.min(EMPTY - 1);
        let hash = key.hash(self.config.seed);
        if let Some(i) = self.find(&key, hash) {
            return Ok(Some(std::mem::replace(&mut self.slots[i].hop, hop)));
        }
        if self.len >= self.config.max_entries {
            return Err(EmError::Full {
                max_entries: self.config.max_entries,
            });
        }
        // At most half full, so an empty slot is always found.
        let mut i = hash as usize & self.mask;
        while self.slots[i].hop != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = Slot { hash, hop, key };
        self.len += 1;
        Ok(None)
    }

    /// Removes `key`; its hop if it was present.
    pub fn remove(&mut self, key: &K) -> Option<u32> {
        let mut hole = self.find(key, key.hash(self.config.seed))?;
        let hop = self.slots[hole].hop;
        // Backward shift: walk the run after the hole; an entry whose home
        // slot is not cyclically in (hole, j] may move into the hole (its
        // probe from home would otherwise cross the hole's gap).
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            if self.slots[j].hop == EMPTY {
                break;
            }
            let home = self.slots[j].hash as usize & self.mask;
            let dist_home = j.wrapping_sub(home) & self.mask;
            let dist_hole = j.wrapping_sub(hole) & self.mask;
            if dist_home >= dist_hole {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole].hop = EMPTY;
        self.len -= 1;
        Some(hop)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn f4(i: u32) -> Flow4 {
        Flow4 {
            src: 0x0a00_0000 | i,
            dst: 0xc612_0001,
            sport: 1024 + (i % 7) as u16,
            dport: 9,
            proto: 17,
        }
    }

    #[test]
    fn fills_to_the_limit_then_refuses_and_removes_everything() {
        let mut t = EmTable::<Flow4>::new(EmConfig {
            max_entries: 100,
            seed: 7,
        })
        .unwrap();
        for i in 0..100 {
            assert_eq!(t.insert(f4(i), i), Ok(None));
        }
        assert_eq!(
            t.insert(f4(100), 1),
            Err(EmError::Full { max_entries: 100 })
        );
        assert_eq!(
            t.insert(f4(100), 1).unwrap_err().to_string(),
            "exact-match table full: max_entries 100 reached"
        );
        // Updating a present key needs no room.
        assert_eq!(t.insert(f4(5), 55), Ok(Some(5)));
        for i in 0..100 {
            let want = if i == 5 { 55 } else { i };
            assert_eq!(t.lookup(&f4(i)), Some(want), "{i}");
        }
        for i in (0..100).rev() {
            assert!(t.remove(&f4(i)).is_some());
            assert_eq!(t.lookup(&f4(i)), None);
        }
        assert!(t.is_empty());
        assert_eq!(t.remove(&f4(0)), None);
    }

    #[test]
    fn bad_sizes_are_errors() {
        for max_entries in [0, (1 << 30) + 1] {
            let e = EmTable::<Flow4>::new(EmConfig {
                max_entries,
                seed: 0,
            })
            .unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("exact-match table size {max_entries} is out of range: must be 1..=2^30")
            );
        }
    }

    #[test]
    fn every_field_of_a_v6_tuple_matters() {
        let mut t = EmTable::<Flow6>::new(EmConfig {
            max_entries: 8,
            seed: 0,
        })
        .unwrap();
        let f = Flow6 {
            src: [1; 16],
            dst: [2; 16],
            sport: 3,
            dport: 4,
            proto: 6,
        };
        t.insert(f, 9).unwrap();
        assert_eq!(t.lookup(&f), Some(9));
        let mut g = f;
        g.src[15] = 0;
        let mut h = f;
        h.dst[0] = 0;
        for other in [
            g,
            h,
            Flow6 { sport: 4, ..f },
            Flow6 { dport: 3, ..f },
            Flow6 { proto: 17, ..f },
        ] {
            assert_eq!(t.lookup(&other), None, "{other:?}");
        }
    }

    proptest! {
        /// Random inserts and removes over a small key space (so runs
        /// collide and wrap), against a `HashMap`.
        #[test]
        fn matches_a_hashmap(ops in proptest::collection::vec((any::<bool>(), 0u32..64, 0u32..1000), 1..400)) {
            let mut t = EmTable::<Flow4>::new(EmConfig { max_entries: 40, seed: 3 }).unwrap();
            let mut m: HashMap<Flow4, u32> = HashMap::new();
            for (ins, k, hop) in ops {
                let key = f4(k);
                if ins {
                    let r = t.insert(key, hop);
                    if m.contains_key(&key) || m.len() < 40 {
                        prop_assert_eq!(r, Ok(m.insert(key, hop)));
                    } else {
                        prop_assert_eq!(r, Err(EmError::Full { max_entries: 40 }));
                    }
                } else {
                    prop_assert_eq!(t.remove(&key), m.remove(&key));
                }
                prop_assert_eq!(t.len(), m.len());
            }
            for k in 0..64 {
                prop_assert_eq!(t.lookup(&f4(k)), m.get(&f4(k)).copied());
            }
        }
    }
}
