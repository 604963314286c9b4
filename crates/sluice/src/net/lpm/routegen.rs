//! Route sets and lookup addresses for tests and benchmarks: seeded and
//! deterministic (the same seed gives the same set on every machine), with
//! a small PRNG of their own ([`Rng`], SplitMix64).
//!
//! # IPv4
//! [`ipv4_routes`] makes `n` distinct routes with an Internet-like
//! prefix-length mix ([`IPV4_MIX`]): about 54 % /24; 6–8 % each of /16,
//! /19, /20, /22, /23; 4.5 % /21; 1–2 % /17, /18, /29; under 1 % each of
//! the rest, /8 to /32 (the shape of a full BGP table, and of DPDK's
//! `lpm_perf_autotest` set). From 1000 routes on every depth from /8 to /32
//! has at least one. Routes lie in 0.0.0.0–223.255.255.255 (the
//! old classes A, B and C); 224.0.0.0/3 (multicast and reserved) is never
//! routed, so about 12 % of uniformly random addresses find no route once
//! the set is large enough to cover the rest, as in DPDK's test (12.5 %).
//!
//! Every depth's routes are spread over that space by a stride walk (a
//! random start, a stride near the golden ratio of the slot count and
//! coprime with it), so they are distinct and evenly scattered; the whole
//! set is then shuffled. A depth cannot hold more routes than it has
//! prefixes in the routed space (224 /8s, 57344 /16s, ...): with about a
//! million routes the /16 share (6.4 %) would need more /16s than exist,
//! so every routed /16 gets a route (5.3 %) and the excess goes to /24.
//!
//! [`ipv4_addrs`] draws lookup addresses for a set: [`UNROUTED_PERCENT`] %
//! from 224.0.0.0/3, the rest under a route picked at random.
//! [`ipv4_uniform_addrs`] draws them uniformly from the whole space, as
//! DPDK's test does (meaningful for sets large enough to cover it).
//!
//! # IPv6
//! [`ipv6_routes`] makes `n` distinct routes in one of two mixes
//! ([`Ipv6Mix`]): depths spread evenly over /1–/128 with random prefixes,
//! the shape of DPDK's `lpm6_perf_autotest` set; or an Internet-like mix
//! inside the registries' blocks of 2000::/3 (mostly /48, /32, /44, /40,
//! the longer ones mostly under the shorter ones, so they share trie
//! groups as a real table's do). [`ipv6_addrs`] draws
//! addresses under the routes, one route at a time for runs of addresses as
//! DPDK's test does, or a random route for each.
//!
//! ```
//! use sluice::net::lpm::routegen::{self, Ipv6Mix};
//!
//! let routes = routegen::ipv4_routes(1000, 4, 7).unwrap();
//! assert_eq!(routes.len(), 1000);
//! assert_eq!(routes, routegen::ipv4_routes(1000, 4, 7).unwrap());
//! let addrs = routegen::ipv4_addrs(&routes, 100, 8);
//! assert_eq!(addrs.len(), 100);
//! println!("{}", routes[0]); // e.g. "71.43.128.0/19 2"
//! let v6 = routegen::ipv6_routes(1000, 4, Ipv6Mix::UniformDepth, 9).unwrap();
//! assert!(v6.iter().all(|r| (1..=128).contains(&r.depth)));
//! ```

use std::collections::HashSet;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit state stepped by a
/// Weyl constant and a strong output mix. Fast, small and good enough for
/// test data; not for anything secret.
#[derive(Debug, Clone)]
pub struct Rng {
    /// The Weyl sequence; any value is a valid state.
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next 32 random bits.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A number in `0..n` (`n` > 0), by multiply-and-shift (bias below
    /// 2^-32 for `n` < 2^32).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Shuffles `v` (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// An IPv4 route: `prefix/depth` → `next_hop`. `prefix` is host order with
/// the bits beyond `depth` zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route4 {
    /// The network address (host order, masked to `depth`).
    pub prefix: u32,
    /// Prefix length, 0..=32.
    pub depth: u8,
    /// Next-hop id.
    pub next_hop: u32,
}

/// `10.1.0.0/16 3`: the line format of `sluice l3fwd` route files.
impl fmt::Display for Route4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} {}",
            Ipv4Addr::from(self.prefix),
            self.depth,
            self.next_hop
        )
    }
}

/// An IPv6 route: `prefix/depth` → `next_hop`, `prefix` masked to `depth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route6 {
    /// The network address (masked to `depth`).
    pub prefix: [u8; 16],
    /// Prefix length, 0..=128.
    pub depth: u8,
    /// Next-hop id.
    pub next_hop: u32,
}

/// `2001:db8::/32 3`: the line format of `sluice l3fwd` route files.
impl fmt::Display for Route6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} {}",
            Ipv6Addr::from(self.prefix),
            self.depth,
            self.next_hop
        )
    }
}

/// Why a set cannot be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteGenError {
    /// More routes than the generator makes.
    TooMany {
        /// Routes asked for.
        asked: usize,
        /// The most it makes.
        max: usize,
    },
    /// `next_hops` was 0.
    NoNextHops,
}

impl fmt::Display for RouteGenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RouteGenError::TooMany { asked, max } => {
                write!(f, "cannot generate {asked} routes: at most {max}")
            }
            RouteGenError::NoNextHops => write!(f, "next_hops is 0: must be at least 1"),
        }
    }
}

impl std::error::Error for RouteGenError {}

/// Most routes [`ipv4_routes`] and [`ipv6_routes`] make (8 Mi).
pub const MAX_ROUTES: usize = 8 << 20;

/// The IPv4 prefix-length mix: (depth, parts per million of the routes).
/// Sums to 10^6.
pub const IPV4_MIX: [(u8, u32); 25] = [
    (8, 200),
    (9, 40),
    (10, 50),
    (11, 100),
    (12, 350),
    (13, 700),
    (14, 2_000),
    (15, 3_500),
    (16, 64_000),
    (17, 12_000),
    (18, 19_000),
    (19, 64_000),
    (20, 60_000),
    (21, 45_000),
    (22, 67_000),
    (23, 79_000),
    (24, 544_200),
    (25, 2_500),
    (26, 5_200),
    (27, 6_000),
    (28, 6_600),
    (29, 12_000),
    (30, 5_600),
    (31, 60),
    (32, 900),
];

/// Percent of [`ipv4_addrs`]'s addresses drawn from unrouted space.
pub const UNROUTED_PERCENT: u64 = 12;

/// The first address no generated IPv4 route covers: 224.0.0.0/3 is never
/// routed.
pub const IPV4_UNROUTED_BASE: u32 = 0xe000_0000;

/// From this many routes on, every depth of [`IPV4_MIX`] has at least one.
const ALL_DEPTHS_FROM: usize = 1000;

/// How many of `n` routes each entry of `weights` gets: the floor of its
/// share, then the largest remainders one each, so the counts sum to `n`.
fn apportion(n: usize, weights: &[u32]) -> Vec<usize> {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    let exact: Vec<(usize, u64)> = weights
        .iter()
        .map(|&w| {
            let x = n as u64 * u64::from(w);
            ((x / total) as usize, x % total)
        })
        .collect();
    let mut counts: Vec<usize> = exact.iter().map(|e| e.0).collect();
    let mut left = n - counts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // Largest remainder first; ties to the larger weight, then the index.
    order.sort_by_key(|&i| {
        (
            std::cmp::Reverse(exact[i].1),
            std::cmp::Reverse(weights[i]),
            i,
        )
    });
    for i in order {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    counts
}

/// Number of distinct IPv4 prefixes of `depth` (≥ 8) in 0.0.0.0/1,
/// 128.0.0.0/2 and 192.0.0.0/3 together.
fn v4_slots(depth: u8) -> u64 {
    224u64 << (depth - 8)
}

/// A stride near `slots / φ` that is coprime with `slots` = 7 · 2^k: odd
/// and not a multiple of 7.
fn golden_stride(slots: u64, rng: &mut Rng) -> u64 {
    // 0.618... in 32-bit fixed point, jittered a little per depth.
    let mut s =
        ((u128::from(slots) * u128::from(0x9e37_79b9u32 + rng.next_u32() % 4096)) >> 32) as u64 | 1;
    while s.is_multiple_of(7) || s >= slots {
        s = if s >= slots { 1 } else { s + 2 };
    }
    s
}

/// `n` distinct IPv4 routes with the [`IPV4_MIX`] prefix-length mix, next
/// hops uniform in `0..next_hops`, in a seeded random order; see the
/// [module docs](self) for how they are placed. Fails if `n` exceeds
/// [`MAX_ROUTES`] or `next_hops` is 0.
pub fn ipv4_routes(n: usize, next_hops: u32, seed: u64) -> Result<Vec<Route4>, RouteGenError> {
    if n > MAX_ROUTES {
        return Err(RouteGenError::TooMany {
            asked: n,
            max: MAX_ROUTES,
        });
    }
    if next_hops == 0 {
        return Err(RouteGenError::NoNextHops);
    }
    let mut rng = Rng::new(seed);
    let weights: Vec<u32> = IPV4_MIX.iter().map(|&(_, w)| w).collect();
    let mut counts = apportion(n, &weights);
    let i24 = IPV4_MIX.iter().position(|&(d, _)| d == 24).unwrap_or(0);
    if n >= ALL_DEPTHS_FROM {
        for i in 0..counts.len() {
            if counts[i] == 0 {
                counts[i] = 1;
                counts[i24] -= 1;
            }
        }
    }
    // A depth gets at most its number of prefixes; the rest go to /24
    // (which has 14.7 M, more than MAX_ROUTES).
    for (i, &(d, _)) in IPV4_MIX.iter().enumerate() {
        let cap = v4_slots(d) as usize;
        if counts[i] > cap {
            counts[i24] += counts[i] - cap;
            counts[i] = cap;
        }
    }
    let mut routes = Vec::with_capacity(n);
    for (i, &(depth, _)) in IPV4_MIX.iter().enumerate() {
        let slots = v4_slots(depth);
        let stride = golden_stride(slots, &mut rng);
        let mut x = rng.below(slots);
        for _ in 0..counts[i] {
            routes.push(Route4 {
                prefix: (x << (32 - depth)) as u32,
                depth,
                next_hop: rng.below(u64::from(next_hops)) as u32,
            });
            x = (x + stride) % slots;
        }
    }
    rng.shuffle(&mut routes);
    Ok(routes)
}

/// `n` lookup addresses for `routes`: each, with probability
/// [`UNROUTED_PERCENT`] %, a random address in 224.0.0.0/3 (unrouted for
/// sets from [`ipv4_routes`]), else a random address under a route picked
/// uniformly (which a longer route may cover in turn). With no routes, all
/// are drawn from 224.0.0.0/3.
pub fn ipv4_addrs(routes: &[Route4], n: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            if routes.is_empty() || rng.below(100) < UNROUTED_PERCENT {
                IPV4_UNROUTED_BASE | (rng.next_u32() >> 3)
            } else {
                let r = routes[rng.below(routes.len() as u64) as usize];
                let host = if r.depth >= 32 {
                    0
                } else {
                    u32::MAX >> r.depth
                };
                r.prefix | (rng.next_u32() & host)
            }
        })
        .collect()
}

/// `n` addresses uniform over the whole IPv4 space (DPDK's
/// `lpm_perf_autotest` draws its lookups so).
pub fn ipv4_uniform_addrs(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.next_u32()).collect()
}

/// The shape of an IPv6 route set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv6Mix {
    /// Depths spread evenly over 1..=128, prefixes random: the shape of
    /// DPDK's `lpm6_perf_autotest` set (1000 routes, under 1 % per depth).
    /// Short depths have few prefixes (two /1s), so once those are taken
    /// the draw moves to other depths.
    UniformDepth,
    /// Inside the registries' blocks of 2000::/3 (2001::/16, 2400::/12,
    /// 2600::/12, 2800::/12, 2a00::/12, 2c00::/12), mostly /48 (45 %), /32
    /// (12 %), /44 (8 %), /40 (6 %), /36 and /29 (4 % each), the rest from
    /// /26 to /128, nine in ten of the prefixes longer than /32 under one
    /// of the set's /32-or-shorter allocations: roughly a full IPv6 BGP
    /// table. Nothing outside 2000::/3 is routed.
    Internet,
}

/// The regional registries' blocks [`Ipv6Mix::Internet`] routes sit in:
/// (block, length).
const IPV6_RIR_BLOCKS: [(u128, u32); 6] = [
    (0x2001 << 112, 16),
    (0x2400 << 112, 12),
    (0x2600 << 112, 12),
    (0x2800 << 112, 12),
    (0x2a00 << 112, 12),
    (0x2c00 << 112, 12),
];

/// Percent of [`Ipv6Mix::Internet`]'s prefixes longer than /32 that lie
/// under one of its /32-or-shorter allocations (the rest anywhere in a
/// registry block).
const IPV6_MORE_SPECIFIC_PERCENT: u64 = 90;

/// [`Ipv6Mix::Internet`]: (depth, parts per ten thousand). Sums to 10^4.
const IPV6_INTERNET_MIX: [(u8, u32); 28] = [
    (26, 5),
    (27, 5),
    (28, 100),
    (29, 400),
    (30, 100),
    (31, 100),
    (32, 1200),
    (33, 100),
    (34, 100),
    (35, 50),
    (36, 400),
    (37, 50),
    (38, 100),
    (39, 50),
    (40, 600),
    (41, 100),
    (42, 200),
    (43, 100),
    (44, 800),
    (45, 200),
    (46, 300),
    (47, 300),
    (48, 4500),
    (52, 10),
    (56, 50),
    (60, 10),
    (64, 50),
    (128, 20),
];

/// 128 random bits.
fn random128(rng: &mut Rng) -> u128 {
    (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64())
}

/// The 128-bit mask of `depth` (0..=128).
fn mask6(depth: u8) -> u128 {
    if depth == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(depth))
    }
}

/// `n` distinct IPv6 routes of `mix`, next hops uniform in `0..next_hops`,
/// in a seeded random order. Fails if `n` exceeds [`MAX_ROUTES`] or
/// `next_hops` is 0.
pub fn ipv6_routes(
    n: usize,
    next_hops: u32,
    mix: Ipv6Mix,
    seed: u64,
) -> Result<Vec<Route6>, RouteGenError> {
    if n > MAX_ROUTES {
        return Err(RouteGenError::TooMany {
            asked: n,
            max: MAX_ROUTES,
        });
    }
    if next_hops == 0 {
        return Err(RouteGenError::NoNextHops);
    }
    let mut rng = Rng::new(seed);
    let mut seen: HashSet<(u128, u8)> = HashSet::with_capacity(n);
    let mut routes = Vec::with_capacity(n);
    // Adds `prefix/depth` unless already drawn; says whether it did.
    let mut push = |rng: &mut Rng, routes: &mut Vec<Route6>, prefix: u128, depth: u8| {
        let prefix = prefix & mask6(depth);
        if !seen.insert((prefix, depth)) {
            return false;
        }
        routes.push(Route6 {
            prefix: prefix.to_be_bytes(),
            depth,
            next_hop: rng.below(u64::from(next_hops)) as u32,
        });
        true
    };
    match mix {
        Ipv6Mix::UniformDepth => {
            while routes.len() < n {
                let depth = 1 + rng.below(128) as u8;
                let p = random128(&mut rng);
                push(&mut rng, &mut routes, p, depth);
            }
        }
        Ipv6Mix::Internet => {
            let weights: Vec<u32> = IPV6_INTERNET_MIX.iter().map(|&(_, w)| w).collect();
            let counts = apportion(n, &weights);
            // Allocations (/32 and shorter) first, inside the registries'
            // blocks; then the longer prefixes, mostly under one of them.
            let mut allocations: Vec<u128> = Vec::new();
            for (i, &(depth, _)) in IPV6_INTERNET_MIX.iter().enumerate() {
                let mut made = 0;
                while made < counts[i] {
                    let under_allocation = depth > 32
                        && !allocations.is_empty()
                        && rng.below(100) < IPV6_MORE_SPECIFIC_PERCENT;
                    let p = if under_allocation {
                        let parent = allocations[rng.below(allocations.len() as u64) as usize];
                        parent | (random128(&mut rng) >> 32)
                    } else {
                        let (block, len) =
                            IPV6_RIR_BLOCKS[rng.below(IPV6_RIR_BLOCKS.len() as u64) as usize];
                        block | (random128(&mut rng) >> len)
                    };
                    if push(&mut rng, &mut routes, p, depth) {
                        made += 1;
                        if depth <= 32 {
                            allocations.push(p & mask6(32));
                        }
                    }
                }
            }
            rng.shuffle(&mut routes);
        }
    }
    Ok(routes)
}

/// `n` lookup addresses, each a random address under one of `routes` (so
/// all are routed, possibly by a longer route than the one drawn under).
/// With `run` ≥ 2, address `i` is under `routes[(i / run) % len]`: runs of
/// `run` addresses under each route in order, as DPDK's
/// `lpm6_perf_autotest` (100 000 addresses in runs of 400); with `run` ≤ 1,
/// each under a route picked at random. Empty if `routes` is.
pub fn ipv6_addrs(routes: &[Route6], n: usize, run: usize, seed: u64) -> Vec<[u8; 16]> {
    if routes.is_empty() {
        return Vec::new();
    }
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let r = if run <= 1 {
                routes[rng.below(routes.len() as u64) as usize]
            } else {
                routes[(i / run) % routes.len()]
            };
            let host = random128(&mut rng) & !mask6(r.depth);
            (u128::from_be_bytes(r.prefix) | host).to_be_bytes()
        })
        .collect()
}
