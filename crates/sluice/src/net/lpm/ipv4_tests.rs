//! Tests of [`Lpm4`]: literal cases and a proptest against a naive
//! reference.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::ipv4::field;
use super::test_support;
use super::{Lpm4, LpmConfig, LpmError};

fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

fn lpm(number_tbl8s: u32) -> Lpm4 {
    Lpm4::new(LpmConfig {
        max_routes: 1024,
        number_tbl8s,
    })
    .unwrap()
}

/// All three lookup paths, checked to agree.
fn look(table: &Lpm4, addr: u32) -> Option<u32> {
    let one = table.lookup(addr);
    assert_eq!(table.lookup_x4([addr, 0, addr, u32::MAX])[2], one);
    let mut out = [Some(u32::MAX); 1];
    table.lookup_bulk(&[addr], &mut out);
    assert_eq!(out[0], one);
    let mut raw = [7u32; 1];
    table.lookup_bulk_or(&[addr], &mut raw, u32::MAX);
    assert_eq!(raw[0], one.unwrap_or(u32::MAX));
    one
}

#[test]
fn empty_table_has_no_route() {
    let table = lpm(1);
    assert!(table.is_empty());
    for a in [0, 1, ip(10, 0, 0, 1), u32::MAX] {
        assert_eq!(look(&table, a), None);
    }
}

#[test]
fn default_route_covers_everything_and_deletes() {
    let mut table = lpm(1);
    table.add(ip(1, 2, 3, 4), 0, 7).unwrap(); // prefix bits ignored
    assert_eq!(table.get(0, 0), Some(7));
    for a in [0, ip(10, 0, 0, 1), ip(192, 168, 1, 1), u32::MAX] {
        assert_eq!(look(&table, a), Some(7));
    }
    table.delete(0, 0).unwrap();
    assert_eq!(look(&table, u32::MAX), None);
    assert!(table.is_empty());
}

#[test]
fn overlapping_8_24_32() {
    let mut table = lpm(4);
    table.add(ip(10, 0, 0, 0), 8, 1).unwrap();
    table.add(ip(10, 1, 2, 0), 24, 2).unwrap();
    table.add(ip(10, 1, 2, 3), 32, 3).unwrap();
    // A shorter route added last must not overwrite the longer ones.
    table.add(ip(10, 1, 0, 0), 16, 4).unwrap();
    assert_eq!(table.len(), 4);
    assert_eq!(look(&table, ip(10, 9, 9, 9)), Some(1));
    assert_eq!(look(&table, ip(10, 1, 9, 9)), Some(4));
    assert_eq!(look(&table, ip(10, 1, 2, 2)), Some(2));
    assert_eq!(look(&table, ip(10, 1, 2, 3)), Some(3));
    assert_eq!(look(&table, ip(10, 1, 2, 4)), Some(2));
    assert_eq!(look(&table, ip(11, 0, 0, 0)), None);
    assert_eq!(look(&table, ip(9, 255, 255, 255)), None);
    assert_eq!(table.tbl8_groups_used(), 1);

    // Re-adding replaces the next hop.
    table.add(ip(10, 1, 2, 0), 24, 5).unwrap();
    assert_eq!(table.len(), 4);
    assert_eq!(look(&table, ip(10, 1, 2, 2)), Some(5));
    assert_eq!(look(&table, ip(10, 1, 2, 3)), Some(3));

    // Delete restores the covering route.
    table.delete(ip(10, 1, 2, 0), 24).unwrap();
    assert_eq!(look(&table, ip(10, 1, 2, 2)), Some(4));
    assert_eq!(look(&table, ip(10, 1, 2, 3)), Some(3));
    table.delete(ip(10, 1, 0, 0), 16).unwrap();
    assert_eq!(look(&table, ip(10, 1, 2, 2)), Some(1));
    table.delete(ip(10, 0, 0, 0), 8).unwrap();
    assert_eq!(look(&table, ip(10, 1, 2, 2)), None);
    assert_eq!(look(&table, ip(10, 1, 2, 3)), Some(3));
    table.delete(ip(10, 1, 2, 3), 32).unwrap();
    assert_eq!(look(&table, ip(10, 1, 2, 3)), None);
    assert!(table.is_empty());
    assert_eq!(table.tbl8_groups_used(), 0);
}

#[test]
fn slash_32_at_the_edges() {
    let mut table = lpm(2);
    table.add(0, 32, 1).unwrap();
    table.add(u32::MAX, 32, 2).unwrap();
    assert_eq!(look(&table, 0), Some(1));
    assert_eq!(look(&table, 1), None);
    assert_eq!(look(&table, u32::MAX), Some(2));
    assert_eq!(look(&table, u32::MAX - 1), None);
    assert_eq!(table.tbl8_groups_used(), 2);
}

#[test]
fn fold_back_frees_the_group() {
    let mut table = lpm(1);
    table.add(ip(10, 0, 0, 0), 8, 1).unwrap();
    table.add(ip(10, 1, 2, 128), 25, 2).unwrap();
    table.add(ip(10, 1, 2, 7), 32, 3).unwrap();
    assert_eq!(table.tbl8_groups_used(), 1);
    // The only group is taken: another /24 cannot get one.
    assert!(matches!(
        table.add(ip(10, 1, 3, 0), 25, 4),
        Err(LpmError::NoTbl8 { .. })
    ));
    table.delete(ip(10, 1, 2, 128), 25).unwrap();
    assert_eq!(table.tbl8_groups_used(), 1);
    assert_eq!(look(&table, ip(10, 1, 2, 200)), Some(1));
    table.delete(ip(10, 1, 2, 7), 32).unwrap();
    assert_eq!(table.tbl8_groups_used(), 0);
    assert_eq!(look(&table, ip(10, 1, 2, 7)), Some(1));
    // The freed group is usable again, and comes back zeroed.
    table.add(ip(10, 1, 3, 0), 25, 4).unwrap();
    assert_eq!(table.tbl8_groups_used(), 1);
    assert_eq!(look(&table, ip(10, 1, 3, 1)), Some(4));
    assert_eq!(look(&table, ip(10, 1, 3, 200)), Some(1));
    assert_eq!(look(&table, ip(10, 1, 2, 7)), Some(1));
    table.delete(ip(10, 0, 0, 0), 8).unwrap();
    assert_eq!(look(&table, ip(10, 1, 3, 200)), None);
    table.delete(ip(10, 1, 3, 0), 25).unwrap();
    assert_eq!(table.tbl8_groups_used(), 0);
    assert_eq!(look(&table, ip(10, 1, 3, 1)), None);
}

#[test]
fn tbl8_exhaustion_leaves_the_table_unchanged() {
    let mut table = lpm(2);
    table.add(ip(10, 0, 0, 0), 8, 1).unwrap();
    table.add(ip(10, 0, 0, 1), 32, 2).unwrap();
    table.add(ip(10, 0, 1, 1), 32, 3).unwrap();
    // Same /24 as an existing group: no new group needed.
    table.add(ip(10, 0, 1, 2), 31, 6).unwrap();
    let err = table.add(ip(10, 0, 2, 1), 32, 4).unwrap_err();
    assert_eq!(
        err,
        LpmError::NoTbl8 {
            number_tbl8s: 2,
            prefix: "10.0.2.1".parse().unwrap(),
            depth: 32,
            needed: 1,
            free: 0,
        }
    );
    assert_eq!(
        err.to_string(),
        "no free tbl8 group for 10.0.2.1/32: all 2 in use"
    );
    assert_eq!(table.len(), 4);
    assert_eq!(table.get(ip(10, 0, 2, 1), 32), None);
    assert_eq!(look(&table, ip(10, 0, 2, 1)), Some(1));
    assert_eq!(table.tbl8_groups_used(), 2);
    // Zero groups: only routes up to /24.
    let mut z = lpm(0);
    assert!(matches!(z.add(1, 25, 1), Err(LpmError::NoTbl8 { .. })));
    assert!(z.is_empty());
}

#[test]
fn errors_and_messages() {
    let mut table = Lpm4::new(LpmConfig {
        max_routes: 2,
        number_tbl8s: 1,
    })
    .unwrap();
    let e = table.add(0, 33, 1).unwrap_err();
    assert_eq!(e, LpmError::InvalidDepth { depth: 33, max: 32 });
    assert_eq!(e.to_string(), "invalid prefix depth 33: must be 0..=32");
    assert_eq!(
        table.delete(0, 255).unwrap_err().to_string(),
        "invalid prefix depth 255: must be 0..=32"
    );
    let e = table.add(0, 8, 1 << 24).unwrap_err();
    assert_eq!(
        e,
        LpmError::NextHopTooLarge {
            next_hop: 1 << 24,
            max: 1 << 24
        }
    );
    assert_eq!(
        e.to_string(),
        "next hop 16777216 is too large: must be below 2^24 (16777216)"
    );
    table.add(0, 8, (1 << 24) - 1).unwrap();
    assert_eq!(look(&table, 5), Some((1 << 24) - 1));
    let e = table.delete(ip(10, 1, 2, 3), 8).unwrap_err();
    assert_eq!(e.to_string(), "route 10.0.0.0/8 not found");
    table.add(ip(10, 0, 0, 0), 8, 2).unwrap();
    let e = table.add(ip(11, 0, 0, 0), 8, 3).unwrap_err();
    assert_eq!(e.to_string(), "route table full: max_routes 2 reached");
    // Replacing an existing route is allowed when full.
    table.add(ip(10, 0, 0, 0), 8, 4).unwrap();
    assert_eq!(table.get(ip(10, 9, 9, 9), 8), Some(4));
    assert_eq!(table.get(0, 40), None);

    let e = Lpm4::new(LpmConfig {
        max_routes: 0,
        number_tbl8s: 1,
    })
    .unwrap_err();
    assert_eq!(e.to_string(), "max_routes is 0: must be at least 1");
    let e = Lpm4::new(LpmConfig {
        max_routes: 1,
        number_tbl8s: (1 << 24) + 1,
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "number_tbl8s 16777217 is too large: at most 16777216"
    );
    let e = LpmError::NoMemory {
        bytes: 4096,
        errno: libc::ENOMEM,
    };
    assert_eq!(
        e.to_string(),
        "cannot map 4096 bytes for an LPM table: Cannot allocate memory (os error 12)"
    );
}

#[test]
fn clear_empties_and_table_is_reusable() {
    let mut table = lpm(1);
    table.add(ip(10, 0, 0, 0), 8, 1).unwrap();
    table.add(ip(10, 0, 0, 1), 32, 2).unwrap();
    table.clear();
    assert!(table.is_empty());
    assert_eq!(table.tbl8_groups_used(), 0);
    assert_eq!(look(&table, ip(10, 0, 0, 1)), None);
    table.add(ip(10, 0, 0, 1), 32, 3).unwrap();
    assert_eq!(look(&table, ip(10, 0, 0, 1)), Some(3));
}

#[test]
fn bulk_handles_odd_lengths() {
    let mut table = lpm(1);
    table.add(ip(10, 0, 0, 0), 8, 1).unwrap();
    table.add(ip(10, 0, 0, 9), 32, 2).unwrap();
    let addrs: Vec<u32> = (0..11).map(|i| ip(10, 0, 0, i)).chain([0, 1]).collect();
    let mut out = vec![Some(99); 13];
    table.lookup_bulk(&addrs, &mut out);
    for (a, o) in addrs.iter().zip(&out) {
        assert_eq!(*o, table.lookup(*a));
    }
    // Mismatched lengths: only the common prefix is written.
    let mut short = [Some(99); 2];
    table.lookup_bulk(&addrs[8..], &mut short);
    assert_eq!(short, [Some(1), Some(2)]);
    let mut long = [Some(99); 3];
    table.lookup_bulk(&addrs[..1], &mut long);
    assert_eq!(long, [Some(1), Some(99), Some(99)]);
}

type Reference = test_support::Reference<u32>;

impl Reference {
    /// /24s holding a route longer than /24: each needs one group.
    fn groups(&self) -> usize {
        self.routes
            .keys()
            .filter(|(d, _)| *d > 24)
            .map(|(_, p)| p >> 8)
            .collect::<BTreeSet<_>>()
            .len()
    }
}

type Op = test_support::Op<u32>;

/// Addresses in a few /8s (and mostly a few /16s) so routes overlap.
fn addr() -> impl Strategy<Value = u32> {
    (
        prop::sample::select(vec![0u8, 10, 192, 255]),
        prop::sample::select(vec![0u8, 1, 255]),
        any::<u8>(),
        any::<u8>(),
        0u8..4,
    )
        .prop_map(|(a, b, c, d, wide)| {
            // Some /24s shared heavily, so tbl8 groups fill and fold.
            let c = if wide == 0 { c } else { c % 4 };
            u32::from_be_bytes([a, b, c, d])
        })
}

/// Depths, /0 and other short ones rarely: each expands into up to 2^24
/// entries, slow in a debug build.
fn depth() -> impl Strategy<Value = u8> {
    prop_oneof![
        1 => Just(0u8),
        1 => 1u8..=7,
        10 => prop::sample::select(vec![8u8, 16, 23, 24, 25, 31, 32]),
        6 => 9u8..=32,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    test_support::op(addr, depth)
}

fn check(table: &Lpm4, reference: &Reference, probes: &[u32]) {
    let addrs = reference.probe_addrs(probes);
    let expect: Vec<Option<u32>> = addrs.iter().map(|&a| reference.lookup(a)).collect();
    let single: Vec<Option<u32>> = addrs.iter().map(|&a| table.lookup(a)).collect();
    assert_eq!(single, expect, "lookup");
    let entries: Vec<u32> = addrs.iter().map(|&a| table.lookup_entry(a)).collect();
    for ((&a, &e), want) in addrs.iter().zip(&entries).zip(&expect) {
        let hop = (e & field::VALID != 0).then_some(e & field::DATA);
        assert_eq!(hop, *want, "lookup_entry {a:#x}: {e:#x}");
    }
    let mut bulk = vec![Some(u32::MAX); addrs.len()];
    table.lookup_bulk(&addrs, &mut bulk);
    assert_eq!(bulk, expect, "lookup_bulk");
    let mut raw = vec![7u32; addrs.len()];
    table.lookup_bulk_or(&addrs, &mut raw, u32::MAX);
    let expect_raw: Vec<u32> = expect.iter().map(|e| e.unwrap_or(u32::MAX)).collect();
    assert_eq!(raw, expect_raw, "lookup_bulk_or");
    for (a, e) in addrs.chunks_exact(4).zip(expect.chunks_exact(4)) {
        assert_eq!(
            table.lookup_x4([a[0], a[1], a[2], a[3]]),
            [e[0], e[1], e[2], e[3]]
        );
    }
    assert_eq!(table.len(), reference.routes.len());
    assert_eq!(
        table.tbl8_groups_used(),
        reference.groups(),
        "groups in use"
    );
    let needed = Lpm4::tbl8_groups_needed(reference.routes.keys().map(|&(d, p)| (p, d)));
    assert_eq!(needed as usize, reference.groups(), "tbl8_groups_needed");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn matches_naive_reference(
        ops in prop::collection::vec(op(), 1..40),
        probes in prop::collection::vec(addr(), 32),
        number_tbl8s in 1u32..6,
    ) {
        let mut table = lpm(number_tbl8s);
        let mut reference = Reference::default();
        for op in ops {
            test_support::apply(&mut table, &mut reference, op, |reference, prefix, depth| {
                // Only when a new /24 needs a group and none is free.
                prop_assert!(depth > 24);
                prop_assert_eq!(reference.groups(), number_tbl8s as usize);
                prop_assert!(!reference.routes.keys().any(|&(d, p)| d > 24 && p >> 8 == prefix >> 8));
                Ok(())
            })?;
            check(&table, &reference, &probes);
        }
        drop(table);
    }
}
