//! The routes file's flow lines (`SRC DST SPORT DPORT PROTO PORT`) and the
//! exact-match tables built from them: any bytes give flows or a bounded
//! error, never a panic; the flows read back from their own text; and the
//! tables find every flow's port, and nothing for a tuple not in the file.

#![no_main]

use std::collections::HashMap;
use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use sluice::net::em::{EmConfig, EmTable, Flow4, Flow6};
use sluice::net::routes::{self, FlowRule};

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
    let file = match routes::parse(data) {
        Ok(file) => file,
        Err(e) => {
            assert!(e.to_string().chars().count() <= 512, "{e}");
            return;
        }
    };
    // The text form reads back as the same flows.
    let text: String = file
        .flows
        .iter()
        .map(|f| format!("{f}\n"))
        .chain(file.routes.iter().map(|r| format!("{r}\n")))
        .collect();
    let again = routes::parse(&text).expect("own text");
    assert_eq!((&again.flows, &again.routes), (&file.flows, &file.routes));

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
    for f in flows {
        let found = match key(f) {
            Key::V4(k) => v4.lookup(&k),
            Key::V6(k) => v6.lookup(&k),
        };
        assert_eq!(found, Some(f.port as u32), "{f}");
        // The next source port: found only if the file has it too.
        let other = FlowRule {
            sport: f.sport.wrapping_add(1),
            ..*f
        };
        let found = match key(&other) {
            Key::V4(k) => v4.lookup(&k),
            Key::V6(k) => v6.lookup(&k),
        };
        let expect = want
            .get(&(other.src, other.dst, other.sport, other.dport, other.proto))
            .copied();
        assert_eq!(found, expect, "{other}");
    }
});
