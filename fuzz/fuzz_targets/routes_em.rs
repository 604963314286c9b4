//! The routes file's flow lines (`SRC DST SPORT DPORT PROTO PORT`) and the
//! exact-match tables built from them: any bytes give flows or a bounded
//! error, never a panic; the flows read back from their own text; and the
//! tables find every flow's port, and nothing for a tuple not in the file.

#![no_main]

mod common;

use std::collections::HashMap;
use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use sluice::net::em::{EmConfig, EmTable, Flow4, Flow6};
use sluice::net::routes::FlowRule;

/// Flows put in the tables per input.
const TABLE_FLOWS: usize = 256;

enum Key {
    V4(Flow4),
    V6(Flow6),
}

fn key(f: &FlowRule) -> Key {
    match (f.src, f.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Key::V4(Flow4 {
            src: s.into(),
            dst: d.into(),
            sport: f.sport,
            dport: f.dport,
            proto: f.proto,
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => Key::V6(Flow6 {
            src: s.octets(),
            dst: d.octets(),
            sport: f.sport,
            dport: f.dport,
            proto: f.proto,
        }),
        _ => panic!("the parser passed a flow of mixed families: {f}"),
    }
}

fuzz_target!(|data: &[u8]| {
    // Any bytes give a file or a bounded error; its text reads back the same.
    let Some(file) = common::parse_routes_and_reread(data) else {
        return;
    };

    let flows = &file.flows[..file.flows.len().min(TABLE_FLOWS)];
    let cfg = EmConfig {
        max_entries: flows.len().max(1) as u32,
        seed: 0x5eed,
    };
    let mut v4 = EmTable::<Flow4>::new(cfg).expect("an IPv4 table");
    let mut v6 = EmTable::<Flow6>::new(cfg).expect("an IPv6 table");
    // The parser keeps one entry per 5-tuple: each insert is new.
    let mut want = HashMap::new();
    for f in flows {
        let fresh = match key(f) {
            Key::V4(k) => v4.insert(k, f.port as u32),
            Key::V6(k) => v6.insert(k, f.port as u32),
        };
        assert_eq!(fresh, Ok(None), "{f} twice");
        want.insert((f.src, f.dst, f.sport, f.dport, f.proto), f.port as u32);
    }
    let lookup = |f: &FlowRule| match key(f) {
        Key::V4(k) => v4.lookup(&k),
        Key::V6(k) => v6.lookup(&k),
    };
    for f in flows {
        assert_eq!(lookup(f), Some(f.port as u32), "{f}");
        // The next source port: found only if the file has it too.
        let other = FlowRule {
            sport: f.sport.wrapping_add(1),
            ..*f
        };
        let found = lookup(&other);
        let expect = want
            .get(&(other.src, other.dst, other.sport, other.dport, other.proto))
            .copied();
        assert_eq!(found, expect, "{other}");
    }
});
