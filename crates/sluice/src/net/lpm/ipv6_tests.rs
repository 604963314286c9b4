//! Tests of [`Lpm6`]: literal cases and a proptest against a naive
//! reference.

use std::collections::BTreeSet;
use std::net::Ipv6Addr;

use proptest::prelude::*;

use super::test_support;
use super::{Lpm6, LpmConfig, LpmError};

fn a(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

fn lpm(number_tbl8s: u32) -> Lpm6 {
    Lpm6::new(LpmConfig {
        max_routes: 1024,
        number_tbl8s,
    })
    .unwrap()
}

/// All lookup paths, checked to agree.
fn look(table: &Lpm6, addr: [u8; 16]) -> Option<u32> {
    let one = table.lookup(addr);
    // In a block of eight (the walked-together path) and alone (the tail).
    let mut block = [[0u8; 16]; 9];
    block[3] = addr;
    block[8] = addr;
    let mut out = [Some(u32::MAX); 9];
    table.lookup_bulk(&block, &mut out);
    assert_eq!(out[3], one);
    assert_eq!(out[8], one);
    let mut raw = [7u32; 9];
    table.lookup_bulk_or(&block, &mut raw, u32::MAX);
    assert_eq!(raw[3], one.unwrap_or(u32::MAX));
    assert_eq!(
        table.lookup_x4([[0; 16], addr, [0xff; 16], addr]),
        [table.lookup([0; 16]), one, table.lookup([0xff; 16]), one]
    );
    one
}

#[test]
fn empty_table_has_no_route() {
    let table = lpm(1);
    assert!(table.is_empty());
    for x in [
        "::",
        "::1",
        "2001:db8::1",
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    ] {
        assert_eq!(look(&table, a(x)), None);
    }
}

#[test]
fn default_route_covers_everything_and_deletes() {
    let mut table = lpm(1);
    table.add(a("2001:db8::1"), 0, 7).unwrap(); // prefix bits ignored
    assert_eq!(table.get(a("::"), 0), Some(7));
    for x in ["::", "2001:db8::1", "fe80::1", "ffff::ffff"] {
        assert_eq!(look(&table, a(x)), Some(7));
    }
    table.delete(a("::"), 0).unwrap();
    assert_eq!(look(&table, a("ffff::ffff")), None);
    assert!(table.is_empty());
}

#[test]
fn overlapping_16_32_48_64_128() {
    let mut table = lpm(64);
    table.add(a("2001::"), 16, 1).unwrap();
    table.add(a("2001:db8::"), 32, 2).unwrap();
    table.add(a("2001:db8:1::"), 48, 3).unwrap();
    table.add(a("2001:db8:1:2::5"), 128, 5).unwrap();
    // A shorter route added last must not overwrite the longer ones, and
    // must reach into the groups below it.
    table.add(a("2001:db8:1:2::"), 64, 4).unwrap();
    table.add(a("2001:f000::"), 20, 6).unwrap();
    assert_eq!(table.len(), 6);
    assert_eq!(look(&table, a("2001:1234::1")), Some(1));
    assert_eq!(look(&table, a("2001:db8:ffff::1")), Some(2));
    assert_eq!(look(&table, a("2001:db8:1:ffff::1")), Some(3));
    assert_eq!(look(&table, a("2001:db8:1:2::4")), Some(4));
    assert_eq!(look(&table, a("2001:db8:1:2::5")), Some(5));
    assert_eq!(look(&table, a("2001:db8:1:2::6")), Some(4));
    assert_eq!(look(&table, a("2001:f001::")), Some(6));
    assert_eq!(look(&table, a("2002::")), None);
    assert_eq!(
        look(&table, a("2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
        None
    );
    // /32 needs 1 group, /48 2 more, /128 10 more; the /64 shares the
    // /128's path.
    assert_eq!(table.tbl8_groups_used(), 13);

    // Re-adding replaces the next hop.
    table.add(a("2001:db8:1::"), 48, 8).unwrap();
    assert_eq!(table.len(), 6);
    assert_eq!(look(&table, a("2001:db8:1:ffff::1")), Some(8));
    assert_eq!(look(&table, a("2001:db8:1:2::5")), Some(5));

    // Deletes restore the covering route, in and under the groups.
    table.delete(a("2001:db8:1::"), 48).unwrap();
    assert_eq!(look(&table, a("2001:db8:1:ffff::1")), Some(2));
    assert_eq!(look(&table, a("2001:db8:1:2::6")), Some(4));
    table.delete(a("2001:db8::"), 32).unwrap();
    assert_eq!(look(&table, a("2001:db8:1:ffff::1")), Some(1));
    table.delete(a("2001::"), 16).unwrap();
    assert_eq!(look(&table, a("2001:db8:1:ffff::1")), None);
    assert_eq!(look(&table, a("2001:db8:1:2::6")), Some(4));
    assert_eq!(look(&table, a("2001:f001::")), Some(6));
    table.delete(a("2001:db8:1:2::"), 64).unwrap();
    assert_eq!(look(&table, a("2001:db8:1:2::6")), None);
    assert_eq!(look(&table, a("2001:db8:1:2::5")), Some(5));
    // Only the /128's path is left: 13 groups.
    assert_eq!(table.tbl8_groups_used(), 13);
    table.delete(a("2001:db8:1:2::5"), 128).unwrap();
    assert_eq!(table.tbl8_groups_used(), 0);
    assert_eq!(look(&table, a("2001:db8:1:2::5")), None);
    table.delete(a("2001:f000::"), 20).unwrap();
    assert!(table.is_empty());
    assert_eq!(look(&table, a("2001:f001::")), None);
}

#[test]
fn slash_128_at_the_edges_and_shared_paths() {
    let mut table = lpm(40);
    let max = a("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
    table.add(a("::"), 128, 1).unwrap();
    table.add(max, 128, 2).unwrap();
    assert_eq!(table.tbl8_groups_used(), 26);
    // A neighbour shares all 13 groups of the path.
    table.add(a("::1"), 128, 3).unwrap();
    assert_eq!(table.tbl8_groups_used(), 26);
    assert_eq!(look(&table, a("::")), Some(1));
    assert_eq!(look(&table, a("::1")), Some(3));
    assert_eq!(look(&table, a("::2")), None);
    assert_eq!(look(&table, max), Some(2));
    assert_eq!(
        look(&table, a("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe")),
        None
    );
    table.delete(a("::"), 128).unwrap();
    assert_eq!(table.tbl8_groups_used(), 26, "::1 still needs the path");
    table.delete(a("::1"), 128).unwrap();
    assert_eq!(table.tbl8_groups_used(), 13);
}

#[test]
fn groups_fold_back_and_are_reused_zeroed() {
    let mut table = lpm(2);
    table.add(a("2001:db8::"), 32, 1).unwrap();
    table.add(a("2001:db8:100::"), 40, 2).unwrap();
    table.add(a("2001:db8:200::"), 40, 3).unwrap();
    assert_eq!(table.tbl8_groups_used(), 2);
    // Both groups taken: a /32 under another /24 cannot get one.
    let err = table.add(a("2002:db9::"), 32, 4).unwrap_err();
    assert_eq!(
        err,
        LpmError::NoTbl8 {
            number_tbl8s: 2,
            prefix: "2002:db9::".parse().unwrap(),
            depth: 32,
            needed: 1,
            free: 0,
        }
    );
    assert_eq!(
        err.to_string(),
        "no free tbl8 group for 2002:db9::/32: all 2 in use"
    );
    assert_eq!(look(&table, a("2002:db9::1")), None);
    assert_eq!(table.len(), 3);
    // Under the same /24 no group is needed.
    table.add(a("2001:db9::"), 32, 5).unwrap();
    assert_eq!(table.tbl8_groups_used(), 2);
    table.delete(a("2001:db8:100::"), 40).unwrap();
    assert_eq!(
        table.tbl8_groups_used(),
        2,
        "the other /40 still needs level 2"
    );
    assert_eq!(look(&table, a("2001:db8:100::1")), Some(1));
    assert_eq!(look(&table, a("2001:db8:200::1")), Some(3));
    table.delete(a("2001:db8:200::"), 40).unwrap();
    // The /32s live in the level-1 group, so that one stays.
    assert_eq!(table.tbl8_groups_used(), 1);
    table.delete(a("2001:db8::"), 32).unwrap();
    table.delete(a("2001:db9::"), 32).unwrap();
    assert_eq!(table.tbl8_groups_used(), 0);
    // Reused groups come back zeroed.
    table.add(a("2002:db9::"), 40, 4).unwrap();
    assert_eq!(table.tbl8_groups_used(), 2);
    assert_eq!(look(&table, a("2002:db9::1")), Some(4));
    assert_eq!(look(&table, a("2002:db9:100::1")), None);
    assert_eq!(look(&table, a("2001:db8::1")), None);
    assert_eq!(look(&table, a("2001:db8:200::1")), None);
}

#[test]
fn group_exhaustion_midway_leaves_the_table_unchanged() {
    // A /48 needs 3 groups; with 2 free it must fail without taking any.
    let mut table = lpm(3);
    table.add(a("2001:db8:1::"), 40, 1).unwrap(); // 2 groups
    let err = table.add(a("2002:db8:1::"), 48, 2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "2002:db8:1::/48 needs 3 new tbl8 groups, only 1 of 3 are free"
    );
    assert_eq!(table.tbl8_groups_used(), 2);
    assert_eq!(table.len(), 1);
    assert_eq!(look(&table, a("2002:db8:1::1")), None);
    // Under the existing path only one more group is needed.
    table.add(a("2001:db8:1:100::"), 48, 3).unwrap();
    assert_eq!(table.tbl8_groups_used(), 3);
    assert_eq!(look(&table, a("2001:db8:1:100::1")), Some(3));
    assert_eq!(look(&table, a("2001:db8:2::1")), Some(1));
    // Zero groups: only routes up to /24.
    let mut z = lpm(0);
    z.add(a("2001:db8::"), 24, 1).unwrap();
    assert!(matches!(
        z.add(a("2001:db8::"), 25, 1),
        Err(LpmError::NoTbl8 { .. })
    ));
    assert_eq!(z.len(), 1);
    assert_eq!(look(&z, a("2001:db8::1")), Some(1));
}

#[test]
fn errors_and_messages() {
    let mut table = Lpm6::new(LpmConfig {
        max_routes: 2,
        number_tbl8s: 1,
    })
    .unwrap();
    let e = table.add(a("::"), 129, 1).unwrap_err();
    assert_eq!(
        e,
        LpmError::InvalidDepth {
            depth: 129,
            max: 128
        }
    );
    assert_eq!(e.to_string(), "invalid prefix depth 129: must be 0..=128");
    assert_eq!(
        table.delete(a("::"), 200).unwrap_err().to_string(),
        "invalid prefix depth 200: must be 0..=128"
    );
    let e = table.add(a("::"), 8, 1 << 22).unwrap_err();
    assert_eq!(
        e,
        LpmError::NextHopTooLarge {
            next_hop: 1 << 22,
            max: 1 << 22
        }
    );
    assert_eq!(
        e.to_string(),
        "next hop 4194304 is too large: must be below 2^22 (4194304)"
    );
    table.add(a("::"), 8, (1 << 22) - 1).unwrap();
    assert_eq!(look(&table, a("::5")), Some((1 << 22) - 1));
    let e = table.delete(a("2001:db8::1"), 32).unwrap_err();
    assert_eq!(e.to_string(), "route 2001:db8::/32 not found");
    table.add(a("2001:db8::"), 32, 2).unwrap();
    let e = table.add(a("2002::"), 16, 3).unwrap_err();
    assert_eq!(e.to_string(), "route table full: max_routes 2 reached");
    // Replacing an existing route is allowed when full.
    table.add(a("2001:db8::"), 32, 4).unwrap();
    assert_eq!(table.get(a("2001:db8:ffff::"), 32), Some(4));
    assert_eq!(table.get(a("::"), 129), None);
    let mut routes: Vec<_> = table.routes().collect();
    routes.sort();
    assert_eq!(
        routes,
        vec![(a("::"), 8, (1 << 22) - 1), (a("2001:db8::"), 32, 4)]
    );

    let e = Lpm6::new(LpmConfig {
        max_routes: 0,
        number_tbl8s: 1,
    })
    .unwrap_err();
    assert_eq!(e.to_string(), "max_routes is 0: must be at least 1");
    let e = Lpm6::new(LpmConfig {
        max_routes: 1,
        number_tbl8s: (1 << 22) + 1,
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "number_tbl8s 4194305 is too large: at most 4194304"
    );
}

#[test]
fn clear_empties_and_table_is_reusable() {
    let mut table = lpm(13);
    table.add(a("2001::"), 16, 1).unwrap();
    table.add(a("2001::1"), 128, 2).unwrap();
    table.clear();
    assert!(table.is_empty());
    assert_eq!(table.tbl8_groups_used(), 0);
    assert_eq!(look(&table, a("2001::1")), None);
    table.add(a("2001::1"), 128, 3).unwrap();
    assert_eq!(look(&table, a("2001::1")), Some(3));
}

#[test]
fn bulk_handles_odd_lengths_and_mixed_walks() {
    let mut table = lpm(20);
    table.add(a("2001:db8::"), 32, 1).unwrap();
    table.add(a("2001:db8::9"), 128, 2).unwrap();
    table.add(a("3000::"), 8, 3).unwrap();
    // Lanes ending at different levels in one block.
    let addrs: Vec<[u8; 16]> = (0..11u8)
        .map(|i| {
            let mut x = a("2001:db8::");
            x[15] = i;
            if i % 3 == 0 {
                x[0] = 0x30;
            }
            x
        })
        .chain([a("::"), a("ffff::")])
        .collect();
    let mut out = vec![Some(99); 13];
    table.lookup_bulk(&addrs, &mut out);
    for (x, o) in addrs.iter().zip(&out) {
        assert_eq!(*o, table.lookup(*x));
    }
    assert_eq!(out[9], Some(3));
    assert_eq!(out[10], Some(1));
    assert_eq!(out[11], None);
    let mut x = a("2001:db8::");
    x[15] = 9;
    assert_eq!(table.lookup(x), Some(2));
    // Mismatched lengths: only the common prefix is written.
    let mut short = [Some(99); 2];
    table.lookup_bulk(&addrs[10..], &mut short);
    assert_eq!(short, [Some(1), None]);
    let mut long = [Some(99); 3];
    table.lookup_bulk(&addrs[..1], &mut long);
    assert_eq!(long, [Some(3), Some(99), Some(99)]);
}

type Reference = test_support::Reference<u128>;

impl Reference {
    /// The groups the routes need: one per (level, leading bits) on each
    /// route's path.
    fn groups(&self) -> usize {
        let mut g = BTreeSet::new();
        for &(d, p) in self.routes.keys() {
            if d <= 24 {
                continue;
            }
            let last = usize::from(d - 24).div_ceil(8);
            for level in 1..=last {
                let begins = 24 + 8 * (level as u32 - 1);
                g.insert((level, p >> (128 - begins)));
            }
        }
        g.len()
    }

    /// Groups a new route would add.
    fn groups_with(&self, depth: u8, prefix: u128) -> usize {
        let mut with_route = Reference {
            routes: self.routes.clone(),
        };
        with_route.routes.insert((depth, prefix), 0);
        with_route.groups()
    }
}

type Op = test_support::Op<u128>;

/// Addresses sharing leading bytes often, so routes overlap at every level.
fn addr() -> impl Strategy<Value = u128> {
    (
        prop::sample::select(vec![0u128, 0x2001_0db8, 0xffff_ffff]),
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 0x80, 0xff]), 12),
        any::<u128>(),
        0u8..4,
    )
        .prop_map(|(top, bytes, random, wide)| {
            if wide == 0 {
                return random;
            }
            let mut x = top << 96;
            for (i, b) in bytes.iter().enumerate() {
                x |= u128::from(*b) << (88 - 8 * i);
            }
            x
        })
}

/// Depths, /0 and other short ones rarely: each expands into up to 2^24
/// entries, slow in a debug build.
fn depth() -> impl Strategy<Value = u8> {
    prop_oneof![
        1 => Just(0u8),
        1 => 1u8..=7,
        10 => prop::sample::select(vec![16u8, 23, 24, 25, 32, 33, 40, 48, 56, 64, 100, 120, 127, 128]),
        6 => 8u8..=128,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    test_support::op(addr, depth)
}

fn check(table: &Lpm6, reference: &Reference, probes: &[u128]) {
    let addrs = reference.probe_addrs(probes);
    let expect: Vec<Option<u32>> = addrs.iter().map(|&x| reference.lookup(x)).collect();
    let bytes: Vec<[u8; 16]> = addrs.iter().map(|x| x.to_be_bytes()).collect();
    let single: Vec<Option<u32>> = bytes.iter().map(|&x| table.lookup(x)).collect();
    assert_eq!(single, expect, "lookup");
    let mut bulk = vec![Some(u32::MAX); addrs.len()];
    table.lookup_bulk(&bytes, &mut bulk);
    assert_eq!(bulk, expect, "lookup_bulk");
    let mut raw = vec![7u32; addrs.len()];
    table.lookup_bulk_or(&bytes, &mut raw, u32::MAX);
    let expect_raw: Vec<u32> = expect.iter().map(|e| e.unwrap_or(u32::MAX)).collect();
    assert_eq!(raw, expect_raw, "lookup_bulk_or");
    for (a, e) in bytes.chunks_exact(4).zip(expect.chunks_exact(4)) {
        assert_eq!(
            table.lookup_x4([a[0], a[1], a[2], a[3]]),
            [e[0], e[1], e[2], e[3]],
            "lookup_x4"
        );
    }
    assert_eq!(table.len(), reference.routes.len());
    assert_eq!(
        table.tbl8_groups_used(),
        reference.groups(),
        "groups in use"
    );
    let needed =
        Lpm6::tbl8_groups_needed(reference.routes.keys().map(|&(d, p)| (p.to_be_bytes(), d)));
    assert_eq!(needed as usize, reference.groups(), "tbl8_groups_needed");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn matches_naive_reference(
        ops in prop::collection::vec(op(), 1..40),
        probes in prop::collection::vec(addr(), 32),
        number_tbl8s in 0u32..40,
    ) {
        let mut table = lpm(number_tbl8s);
        let mut reference = Reference::default();
        for op in ops {
            test_support::apply(&mut table, &mut reference, op, |reference, prefix, depth| {
                // Only when the route needs more groups than remain.
                prop_assert!(depth > 24);
                prop_assert!(reference.groups_with(depth, prefix) > number_tbl8s as usize);
                Ok(())
            })?;
            check(&table, &reference, &probes);
        }
    }
}
