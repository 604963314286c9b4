//! Tests of the route-set generator: determinism, distinctness, the
//! prefix-length mix, the unrouted share, errors.

use std::collections::{BTreeMap, HashSet};

use super::routegen::{
    self, IPV4_MIX, IPV4_UNROUTED_BASE, Ipv6Mix, MAX_ROUTES, Rng, Route4, Route6, RouteGenError,
};
use super::{Lpm4, Lpm6, LpmConfig};

/// Percent of `routes` per depth.
fn shares(routes: &[Route4]) -> BTreeMap<u8, f64> {
    let mut m = BTreeMap::new();
    for r in routes {
        *m.entry(r.depth).or_insert(0.0) += 100.0 / routes.len() as f64;
    }
    m
}

fn mask4(d: u8) -> u32 {
    if d == 0 { 0 } else { u32::MAX << (32 - d) }
}

fn mask6(d: u8) -> u128 {
    if d == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(d))
    }
}

#[test]
fn rng_is_seeded_and_spread() {
    let a: Vec<u64> = {
        let mut r = Rng::new(1);
        (0..4).map(|_| r.next_u64()).collect()
    };
    let mut r = Rng::new(1);
    assert_eq!(a, (0..4).map(|_| r.next_u64()).collect::<Vec<_>>());
    let mut r2 = Rng::new(2);
    assert_ne!(a[0], r2.next_u64());
    // below(n) stays below n and hits every value of a small range.
    let mut seen = [0u32; 7];
    for _ in 0..7000 {
        seen[r.below(7) as usize] += 1;
    }
    assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
    let mut v: Vec<u32> = (0..100).collect();
    r.shuffle(&mut v);
    assert_ne!(v, (0..100).collect::<Vec<_>>());
    v.sort_unstable();
    assert_eq!(v, (0..100).collect::<Vec<_>>());
}

#[test]
fn ipv4_sets_are_deterministic_distinct_and_masked() {
    let a = routegen::ipv4_routes(20_000, 16, 42).unwrap();
    assert_eq!(a, routegen::ipv4_routes(20_000, 16, 42).unwrap());
    assert_ne!(a, routegen::ipv4_routes(20_000, 16, 43).unwrap());
    assert_eq!(a.len(), 20_000);
    let distinct: HashSet<(u32, u8)> = a.iter().map(|r| (r.prefix, r.depth)).collect();
    assert_eq!(distinct.len(), a.len());
    for r in &a {
        assert!((8..=32).contains(&r.depth), "{r}");
        assert_eq!(r.prefix & !mask4(r.depth), 0, "{r}");
        assert!(r.prefix < IPV4_UNROUTED_BASE, "{r} is in 224.0.0.0/3");
        assert!(r.next_hop < 16);
    }
    assert!(a.iter().any(|r| r.next_hop == 15) && a.iter().any(|r| r.next_hop == 0));
    // Shuffled: not sorted by depth.
    assert!(a.windows(2).any(|w| w[0].depth > w[1].depth));
}

#[test]
fn ipv4_mix_is_internet_like() {
    let routes = routegen::ipv4_routes(100_000, 4, 1).unwrap();
    let s = shares(&routes);
    let within = |d: u8, lo: f64, hi: f64| {
        let v = s.get(&d).copied().unwrap_or(0.0);
        assert!((lo..=hi).contains(&v), "/{d}: {v:.2} % not in {lo}..={hi}");
    };
    within(24, 53.0, 56.0);
    for d in [16, 19, 20, 22, 23] {
        within(d, 6.0, 8.0);
    }
    within(21, 4.0, 5.0);
    for d in [17, 18, 29] {
        within(d, 1.0, 2.0);
    }
    for d in (8..=15).chain([25, 26, 27, 28, 30, 31, 32]) {
        assert!(s.contains_key(&d), "/{d} missing");
        within(d, 0.0, 1.0);
    }
    assert!(s.keys().all(|d| (8..=32).contains(d)));
    // The table itself sums to a million parts.
    assert_eq!(IPV4_MIX.iter().map(|&(_, w)| w).sum::<u32>(), 1_000_000);
}

#[test]
fn ipv4_small_sets_have_every_depth_and_exact_counts() {
    let r = routegen::ipv4_routes(1000, 1, 5).unwrap();
    assert_eq!(r.len(), 1000);
    let s = shares(&r);
    assert_eq!(s.len(), 25, "every depth /8../32 present");
    assert!(s[&24] > 50.0);
    for n in [0, 1, 7, 999] {
        assert_eq!(routegen::ipv4_routes(n, 1, 5).unwrap().len(), n);
    }
}

#[test]
fn ipv4_million_covers_the_routed_space() {
    // ~1M routes want more /16s than 0.0.0.0–223.255.255.255 has: every
    // one gets a route, the rest go to /24, and so exactly 1/8 of uniform
    // addresses (224.0.0.0/3) are unrouted.
    let n = 1_076_806;
    let r = routegen::ipv4_routes(n, 1, 3).unwrap();
    assert_eq!(r.len(), n);
    let slash16: HashSet<u32> = r
        .iter()
        .filter(|r| r.depth == 16)
        .map(|r| r.prefix)
        .collect();
    assert_eq!(slash16.len(), 57_344);
    let s = shares(&r);
    assert!((53.0..57.0).contains(&s[&24]), "{}", s[&24]);
}

#[test]
fn ipv4_addrs_are_12_percent_unrouted() {
    let routes = routegen::ipv4_routes(1000, 8, 11).unwrap();
    let addrs = routegen::ipv4_addrs(&routes, 20_000, 12);
    assert_eq!(addrs, routegen::ipv4_addrs(&routes, 20_000, 12));
    let mut t = Lpm4::new(LpmConfig {
        max_routes: 1000,
        number_tbl8s: 1000,
    })
    .unwrap();
    for r in &routes {
        t.add(r.prefix, r.depth, r.next_hop).unwrap();
    }
    let unrouted = addrs.iter().filter(|&&a| a >= IPV4_UNROUTED_BASE).count();
    assert!((2000..2800).contains(&unrouted), "{unrouted} of 20000");
    for &a in &addrs {
        assert_eq!(t.lookup(a).is_none(), a >= IPV4_UNROUTED_BASE, "{a:#x}");
    }
    // No routes: all unrouted.
    assert!(
        routegen::ipv4_addrs(&[], 10, 1)
            .iter()
            .all(|&a| a >= IPV4_UNROUTED_BASE)
    );
    let u = routegen::ipv4_uniform_addrs(10_000, 1);
    let top = u.iter().filter(|&&a| a >= IPV4_UNROUTED_BASE).count();
    assert!((1000..1500).contains(&top), "{top}");
}

#[test]
fn ipv6_uniform_depth_sets() {
    let r = routegen::ipv6_routes(1000, 4, Ipv6Mix::UniformDepth, 9).unwrap();
    assert_eq!(
        r,
        routegen::ipv6_routes(1000, 4, Ipv6Mix::UniformDepth, 9).unwrap()
    );
    assert_eq!(r.len(), 1000);
    let distinct: HashSet<([u8; 16], u8)> = r.iter().map(|r| (r.prefix, r.depth)).collect();
    assert_eq!(distinct.len(), 1000);
    let mut per_depth = [0u32; 129];
    for x in &r {
        assert!((1..=128).contains(&x.depth));
        assert_eq!(u128::from_be_bytes(x.prefix) & !mask6(x.depth), 0);
        per_depth[usize::from(x.depth)] += 1;
    }
    // Even: no depth holds more than 2 % (1000 / 128 ≈ 0.8 % each).
    assert!(per_depth.iter().all(|&c| c <= 20), "{per_depth:?}");
    assert!(per_depth[100..=128].iter().all(|&c| c > 0));
}

#[test]
fn ipv6_internet_sets() {
    let r = routegen::ipv6_routes(10_000, 4, Ipv6Mix::Internet, 9).unwrap();
    assert_eq!(r.len(), 10_000);
    let distinct: HashSet<([u8; 16], u8)> = r.iter().map(|r| (r.prefix, r.depth)).collect();
    assert_eq!(distinct.len(), 10_000);
    for x in &r {
        assert_eq!(x.prefix[0] >> 5, 0b001, "{x} outside 2000::/3");
        assert_eq!(u128::from_be_bytes(x.prefix) & !mask6(x.depth), 0);
    }
    let share = |d: u8| r.iter().filter(|x| x.depth == d).count() as f64 / 100.0;
    assert!((44.0..=46.0).contains(&share(48)), "{}", share(48));
    assert!((11.0..=13.0).contains(&share(32)), "{}", share(32));
    assert!(share(128) > 0.0);
}

#[test]
fn ipv6_addrs_fall_under_their_routes() {
    let routes = routegen::ipv6_routes(1000, 4, Ipv6Mix::UniformDepth, 2).unwrap();
    let under = |a: &[u8; 16], r: &Route6| {
        u128::from_be_bytes(*a) & mask6(r.depth) == u128::from_be_bytes(r.prefix)
    };
    // DPDK's pattern: runs of 400 under each route in turn.
    let runs = routegen::ipv6_addrs(&routes, 100_000, 400, 3);
    assert_eq!(runs.len(), 100_000);
    for (i, a) in runs.iter().enumerate() {
        assert!(under(a, &routes[i / 400]), "address {i}");
    }
    assert_ne!(runs[0], runs[1]);
    let random = routegen::ipv6_addrs(&routes, 5000, 1, 3);
    assert_eq!(random, routegen::ipv6_addrs(&routes, 5000, 1, 3));
    let mut t = Lpm6::new(LpmConfig {
        max_routes: 1000,
        number_tbl8s: 14_000,
    })
    .unwrap();
    for r in &routes {
        t.add(r.prefix, r.depth, r.next_hop).unwrap();
    }
    assert!(random.iter().all(|a| t.lookup(*a).is_some()));
    assert!(routegen::ipv6_addrs(&[], 10, 1, 3).is_empty());
}

#[test]
fn errors_and_display() {
    let e = routegen::ipv4_routes(MAX_ROUTES + 1, 1, 0).unwrap_err();
    assert_eq!(
        e,
        RouteGenError::TooMany {
            asked: MAX_ROUTES + 1,
            max: MAX_ROUTES
        }
    );
    assert_eq!(
        e.to_string(),
        "cannot generate 8388609 routes: at most 8388608"
    );
    let e = routegen::ipv6_routes(1, 0, Ipv6Mix::Internet, 0).unwrap_err();
    assert_eq!(e.to_string(), "next_hops is 0: must be at least 1");
    assert_eq!(
        routegen::ipv4_routes(1, 0, 0).unwrap_err(),
        RouteGenError::NoNextHops
    );
    let r = Route4 {
        prefix: u32::from_be_bytes([10, 1, 0, 0]),
        depth: 16,
        next_hop: 3,
    };
    assert_eq!(r.to_string(), "10.1.0.0/16 3");
    let r = Route6 {
        prefix: "2001:db8::".parse::<std::net::Ipv6Addr>().unwrap().octets(),
        depth: 32,
        next_hop: 7,
    };
    assert_eq!(r.to_string(), "2001:db8::/32 7");
}
