//! The routes file's route lines (`PREFIX/LEN PORT`) and the LPM tables
//! built from them: any bytes give routes or a bounded error, never a
//! panic; the routes read back from their own text; and the tables answer
//! every route's addresses as a search over the routes does.

#![no_main]

mod common;

use std::cell::RefCell;
use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use sluice::net::lpm::{Lpm4, Lpm6, LpmConfig};
use sluice::net::routes::Route;

/// Routes put in the tables per input (the first ones short enough: a
/// short prefix fills much of tbl24, which would make each run slow).
const TABLE_ROUTES: usize = 64;
/// Shortest prefix put in the tables.
const TABLE_MIN_LEN: u8 = 16;

thread_local! {
    /// Tables made once (64 MiB of address space each) and emptied after
    /// every input.
    static TABLES: RefCell<(Lpm4, Lpm6)> = RefCell::new((
        Lpm4::new(LpmConfig { max_routes: TABLE_ROUTES as u32, number_tbl8s: TABLE_ROUTES as u32 })
            .expect("an IPv4 table"),
        Lpm6::new(LpmConfig { max_routes: TABLE_ROUTES as u32, number_tbl8s: TABLE_ROUTES as u32 * 13 })
            .expect("an IPv6 table"),
    ));
}

fn bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// Whether `r` covers address `a` of its family.
fn covers(r: &Route, a: IpAddr) -> bool {
    if r.prefix.is_ipv4() != a.is_ipv4() {
        return false;
    }
    let width = if a.is_ipv4() { 32 } else { 128 };
    let shift = width - r.len as u32;
    bits(r.prefix).checked_shr(shift).unwrap_or(0) == bits(a).checked_shr(shift).unwrap_or(0)
}

/// The port of the longest route of `set` covering `a`.
fn longest(set: &[Route], a: IpAddr) -> Option<u32> {
    set.iter()
        .filter(|r| covers(r, a))
        .max_by_key(|r| r.len)
        .map(|r| r.port as u32)
}

fuzz_target!(|data: &[u8]| {
    // Any bytes give a file or a bounded error; its text reads back the same.
    let Some(file) = common::parse_routes_and_reread(data) else {
        return;
    };

    let set: Vec<Route> = file
        .routes
        .iter()
        .filter(|r| r.len >= TABLE_MIN_LEN)
        .take(TABLE_ROUTES)
        .copied()
        .collect();
    TABLES.with(|t| {
        let (v4, v6) = &mut *t.borrow_mut();
        for r in &set {
            match r.prefix {
                IpAddr::V4(a) => v4.add(u32::from(a), r.len, r.port as u32),
                IpAddr::V6(a) => v6.add(a.octets(), r.len, r.port as u32),
            }
            .expect("room for every route");
        }
        // Each route's first and last address, and the ones just outside.
        for r in &set {
            let width = if r.prefix.is_ipv4() { 32 } else { 128 };
            let host = u128::MAX
                .checked_shr(128 - (width - r.len as u32))
                .unwrap_or(0);
            let first = bits(r.prefix);
            for probe in [
                first,
                first | host,
                first.wrapping_sub(1),
                (first | host).wrapping_add(1),
            ] {
                let (addr, got) = match r.prefix {
                    IpAddr::V4(_) => {
                        let a = probe as u32;
                        (IpAddr::from(a.to_be_bytes()), v4.lookup(a))
                    }
                    IpAddr::V6(_) => {
                        let a = probe.to_be_bytes();
                        (IpAddr::from(a), v6.lookup(a))
                    }
                };
                assert_eq!(got, longest(&set, addr), "{addr} in {set:?}");
            }
        }
        for r in &set {
            match r.prefix {
                IpAddr::V4(a) => v4.delete(u32::from(a), r.len),
                IpAddr::V6(a) => v6.delete(a.octets(), r.len),
            }
            .expect("a route added");
        }
        assert!(v4.is_empty() && v6.is_empty());
    });
});
