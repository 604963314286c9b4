//! The lookup tables of `sluice l3fwd`, built from the routes file: LPM
//! (IPv4 DIR-24-8, IPv6 trie) or exact match (5-tuple hash tables).

use std::net::IpAddr;

use clap::ValueEnum;
use sluice::net::em::{EmConfig, EmTable, Flow4, Flow6};
use sluice::net::lpm::ipv4::field;
use sluice::net::lpm::{Lpm4, Lpm6, LpmConfig};

use super::classify::{ENTRY_FOUND, ENTRY_HOP, Router, flow4, flow6};
use sluice::net::routes::RoutesFile;

/// How the output port is found.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Longest-prefix match on the destination address (route lines).
    Lpm,
    /// Exact match on the 5-tuple (flow lines).
    Em,
}

/// Longest-prefix-match tables.
pub struct LpmRouter {
    /// IPv4 routes.
    v4: Lpm4,
    /// IPv6 routes.
    v6: Lpm6,
}

// The table's entries are route entries as `Router::v4_entry` defines them.
const _: () = assert!(field::VALID == ENTRY_FOUND && field::DATA == ENTRY_HOP);

/// The destination address of IPv4 header `ip` (at least 20 bytes).
#[inline(always)]
fn dst4(ip: &[u8]) -> u32 {
    u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]])
}

impl Router for LpmRouter {
    #[inline(always)]
    fn v4(&self, ip: &[u8], _ihl: usize) -> Option<u32> {
        self.v4.lookup(dst4(ip))
    }

    #[inline(always)]
    fn v4_entry(&self, ip: &[u8], _ihl: usize) -> u32 {
        self.v4.lookup_entry(dst4(ip))
    }

    #[inline(always)]
    fn v6(&self, ip: &[u8]) -> Option<u32> {
        let mut dst = [0u8; 16];
        dst.copy_from_slice(&ip[24..40]);
        self.v6.lookup(dst)
    }
}

/// Exact-match tables.
pub struct EmRouter {
    /// IPv4 flows.
    v4: EmTable<Flow4>,
    /// IPv6 flows.
    v6: EmTable<Flow6>,
}

impl Router for EmRouter {
    #[inline(always)]
    fn v4(&self, ip: &[u8], ihl: usize) -> Option<u32> {
        self.v4.lookup(&flow4(ip, ihl))
    }

    #[inline(always)]
    fn v6(&self, ip: &[u8]) -> Option<u32> {
        self.v6.lookup(&flow6(ip))
    }
}

/// The tables of one run.
pub enum Tables {
    /// `--lookup lpm` (boxed: the tables' handles are far larger than the
    /// exact-match ones).
    Lpm(Box<LpmRouter>),
    /// `--lookup em`.
    Em(EmRouter),
}

fn check_port(what: &str, port: u16, nports: usize) -> Result<(), String> {
    if (port as usize) < nports {
        Ok(())
    } else {
        Err(format!(
            "{what} goes to port {port}, but there {} {nports} port{} (0..={})",
            if nports == 1 { "is" } else { "are" },
            if nports == 1 { "" } else { "s" },
            nports.saturating_sub(1)
        ))
    }
}

impl Tables {
    /// Builds the tables for `lookup` from `file`, for `nports` ports. Lines
    /// of the other kind are an error (a flow line in LPM mode would be
    /// silently ignored otherwise), as is a port that does not exist.
    pub fn build(file: &RoutesFile, lookup: Lookup, nports: usize) -> Result<Tables, String> {
        match lookup {
            Lookup::Lpm => {
                if !file.flows.is_empty() {
                    return Err(format!(
                        "--lookup lpm takes route lines (`PREFIX/LEN PORT`); the file has {} \
                         flow line(s)",
                        file.flows.len()
                    ));
                }
                // Group counts: a v4 route longer than /24 needs at most one
                // tbl8 group, a v6 one at most one per byte beyond /24.
                let (mut n4, mut n6, mut g4, mut g6) = (0u32, 0u32, 0u32, 0u32);
                for r in &file.routes {
                    if r.prefix.is_ipv4() {
                        n4 += 1;
                        g4 += u32::from(r.len > 24);
                    } else {
                        n6 += 1;
                        g6 += (u32::from(r.len).saturating_sub(24)).div_ceil(8);
                    }
                }
                let cfg = |routes: u32, groups: u32| LpmConfig {
                    max_routes: routes.max(1),
                    number_tbl8s: groups.max(1),
                };
                let mut v4 = Lpm4::new(cfg(n4, g4)).map_err(|e| e.to_string())?;
                let mut v6 = Lpm6::new(cfg(n6, g6)).map_err(|e| e.to_string())?;
                for r in &file.routes {
                    let what = format!("route {}/{}", r.prefix, r.len);
                    check_port(&what, r.port, nports)?;
                    match r.prefix {
                        IpAddr::V4(a) => v4
                            .add(u32::from(a), r.len, r.port as u32)
                            .map_err(|e| format!("{what}: {e}"))?,
                        IpAddr::V6(a) => v6
                            .add(a.octets(), r.len, r.port as u32)
                            .map_err(|e| format!("{what}: {e}"))?,
                    }
                }
                Ok(Tables::Lpm(Box::new(LpmRouter { v4, v6 })))
            }
            Lookup::Em => {
                if !file.routes.is_empty() {
                    return Err(format!(
                        "--lookup em takes flow lines (`SRC DST SPORT DPORT PROTO PORT`); the \
                         file has {} route line(s)",
                        file.routes.len()
                    ));
                }
                let cfg = |n: usize| EmConfig {
                    max_entries: (n as u32).max(1),
                    seed: 0x5eed_5eed,
                };
                let n4 = file.flows.iter().filter(|f| f.src.is_ipv4()).count();
                let n6 = file.flows.len() - n4;
                let mut v4 = EmTable::new(cfg(n4)).map_err(|e| e.to_string())?;
                let mut v6 = EmTable::new(cfg(n6)).map_err(|e| e.to_string())?;
                for f in &file.flows {
                    let what = format!(
                        "flow {} {} {} {} {}",
                        f.src, f.dst, f.sport, f.dport, f.proto
                    );
                    check_port(&what, f.port, nports)?;
                    let r = match (f.src, f.dst) {
                        (IpAddr::V4(s), IpAddr::V4(d)) => v4.insert(
                            Flow4 {
                                src: s.into(),
                                dst: d.into(),
                                sport: f.sport,
                                dport: f.dport,
                                proto: f.proto,
                            },
                            f.port as u32,
                        ),
                        (IpAddr::V6(s), IpAddr::V6(d)) => v6.insert(
                            Flow6 {
                                src: s.octets(),
                                dst: d.octets(),
                                sport: f.sport,
                                dport: f.dport,
                                proto: f.proto,
                            },
                            f.port as u32,
                        ),
                        // The parser refuses mixed families.
                        _ => return Err(format!("{what}: mixed address families")),
                    };
                    r.map_err(|e| format!("{what}: {e}"))?;
                }
                Ok(Tables::Em(EmRouter { v4, v6 }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice::net::routes::parse;

    #[test]
    fn wrong_kind_of_line_and_missing_ports_are_errors() {
        let flows = parse("10.0.0.1 10.0.0.2 1 2 udp 0").unwrap();
        let routes = parse("10.0.0.0/8 1").unwrap();
        let err = |f, l, n| match Tables::build(f, l, n) {
            Ok(_) => panic!("built"),
            Err(e) => e,
        };
        assert_eq!(
            err(&flows, Lookup::Lpm, 2),
            "--lookup lpm takes route lines (`PREFIX/LEN PORT`); the file has 1 flow line(s)"
        );
        assert_eq!(
            err(&routes, Lookup::Em, 2),
            "--lookup em takes flow lines (`SRC DST SPORT DPORT PROTO PORT`); the file has 1 \
             route line(s)"
        );
        assert_eq!(
            err(&routes, Lookup::Lpm, 1),
            "route 10.0.0.0/8 goes to port 1, but there is 1 port (0..=0)"
        );
        assert_eq!(
            err(
                &parse("10.0.0.1 10.0.0.2 1 2 udp 3").unwrap(),
                Lookup::Em,
                2
            ),
            "flow 10.0.0.1 10.0.0.2 1 2 17 goes to port 3, but there are 2 ports (0..=1)"
        );
    }

    #[test]
    fn lpm_and_em_tables_answer_as_the_file_says() {
        let f = parse(
            "0.0.0.0/0 0\n198.18.0.0/15 1\n198.18.0.1/32 0\n2001:2::/32 1\n2001:2:0:2::1/128 0\n",
        )
        .unwrap();
        let Ok(Tables::Lpm(t)) = Tables::build(&f, Lookup::Lpm, 2) else {
            panic!("not lpm");
        };
        let mut ip = [0u8; 20];
        for (dst, want) in [
            ([198, 18, 0, 1], 0),
            ([198, 19, 3, 4], 1),
            ([8, 8, 8, 8], 0),
        ] {
            ip[16..20].copy_from_slice(&dst);
            assert_eq!(t.v4(&ip, 20), Some(want), "{dst:?}");
        }
        let mut ip6 = [0u8; 40];
        for (dst, want) in [
            ("2001:2:0:2::1", Some(0)),
            ("2001:2:0:2::2", Some(1)),
            ("2001:3::1", None),
        ] {
            let a: std::net::Ipv6Addr = dst.parse().unwrap();
            ip6[24..40].copy_from_slice(&a.octets());
            assert_eq!(t.v6(&ip6), want, "{dst}");
        }
        let f = parse("10.0.0.1 198.18.0.1 1024 9 udp 1\n::1 ::2 5 6 tcp 0\n").unwrap();
        let Ok(Tables::Em(t)) = Tables::build(&f, Lookup::Em, 2) else {
            panic!("not em");
        };
        let mut ip = [0u8; 28];
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[198, 18, 0, 1]);
        ip[20..24].copy_from_slice(&[4, 0, 0, 9]);
        assert_eq!(t.v4(&ip, 20), Some(1));
        ip[23] = 10;
        assert_eq!(t.v4(&ip, 20), None);
        let mut ip6 = [0u8; 44];
        ip6[6] = 6;
        ip6[23] = 1;
        ip6[39] = 2;
        ip6[40..44].copy_from_slice(&[0, 5, 0, 6]);
        assert_eq!(t.v6(&ip6), Some(0));
    }
}
