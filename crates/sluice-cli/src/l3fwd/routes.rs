//! The routes file of `sluice l3fwd`.
//!
//! One entry per line; `#` starts a comment; blank lines are skipped.
//!
//! - **Route** (longest-prefix match): `PREFIX/LEN PORT`, IPv4 or IPv6,
//!   e.g. `198.18.0.0/15 1` or `2001:2::/32 0`. The prefix's bits beyond
//!   `LEN` must be zero (a typo there would silently route something
//!   else).
//! - **Flow** (exact match): `SRC DST SPORT DPORT PROTO PORT`, both
//!   addresses of one family, PROTO a number or `tcp`/`udp`, e.g.
//!   `10.0.0.1 198.18.0.1 1024 9 udp 1`.
//!
//! Every error names the file, the line and what is wrong with it.

use std::net::IpAddr;

/// A longest-prefix-match route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The prefix (bits beyond `len` zero).
    pub prefix: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// Output port.
    pub port: u16,
}

/// An exact-match flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRule {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// Output port.
    pub port: u16,
}

/// What a routes file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutesFile {
    /// Route lines, in file order.
    pub routes: Vec<Route>,
    /// Flow lines, in file order.
    pub flows: Vec<FlowRule>,
}

/// Reads and parses `path`.
pub fn load(path: &str) -> Result<RoutesFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("routes file '{path}': {e}"))?;
    parse(&text).map_err(|e| format!("routes file '{path}': {e}"))
}

/// Parses a routes file's text; the error names the line (1-based).
pub fn parse(text: &str) -> Result<RoutesFile, String> {
    let mut out = RoutesFile::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let r = match fields.len() {
            2 => parse_route(&fields).map(|r| out.routes.push(r)),
            6 => parse_flow(&fields).map(|f| out.flows.push(f)),
            n => Err(format!(
                "{n} fields; expected `PREFIX/LEN PORT` (a route) or `SRC DST SPORT DPORT PROTO \
                 PORT` (a flow)"
            )),
        };
        r.map_err(|e| format!("line {}: '{}': {e}", i + 1, raw.trim()))?;
    }
    Ok(out)
}

fn parse_port(s: &str) -> Result<u16, String> {
    s.parse()
        .map_err(|_| format!("'{s}' is not a port number (0..=65535)"))
}

fn parse_addr(s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("'{s}' is not an IPv4 or IPv6 address"))
}

fn parse_route(f: &[&str]) -> Result<Route, String> {
    let (addr, len) = f[0]
        .split_once('/')
        .ok_or_else(|| format!("'{}' has no prefix length (PREFIX/LEN)", f[0]))?;
    let prefix = parse_addr(addr)?;
    let max = if prefix.is_ipv4() { 32 } else { 128 };
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| *l <= max)
        .ok_or_else(|| format!("prefix length '{len}' is not in 0..={max}"))?;
    let masked = match prefix {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let mask = u32::MAX.checked_shl(32 - len as u32).unwrap_or(0);
            bits & !mask != 0
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let mask = u128::MAX.checked_shl(128 - len as u32).unwrap_or(0);
            bits & !mask != 0
        }
    };
    if masked {
        return Err(format!("{prefix} has bits set beyond /{len}"));
    }
    Ok(Route {
        prefix,
        len,
        port: parse_port(f[1])?,
    })
}

fn parse_flow(f: &[&str]) -> Result<FlowRule, String> {
    let src = parse_addr(f[0])?;
    let dst = parse_addr(f[1])?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err("source and destination are of different families".into());
    }
    let proto = match f[4] {
        "tcp" => 6,
        "udp" => 17,
        p => p
            .parse()
            .map_err(|_| format!("'{p}' is not a protocol (tcp, udp or 0..=255)"))?,
    };
    Ok(FlowRule {
        src,
        dst,
        sport: parse_port(f[2])?,
        dport: parse_port(f[3])?,
        proto,
        port: parse_port(f[5])?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_flows_parse_with_comments_and_blank_lines() {
        let f = parse(
            "# routes\n\n198.18.0.0/15 1\n0.0.0.0/0 0  # default\n2001:2::/32 2\n\
             10.0.0.1 198.18.0.1 1024 9 udp 1\n::1 ::2 1 2 6 0\n",
        )
        .unwrap();
        assert_eq!(
            f.routes,
            [
                Route {
                    prefix: "198.18.0.0".parse().unwrap(),
                    len: 15,
                    port: 1
                },
                Route {
                    prefix: "0.0.0.0".parse().unwrap(),
                    len: 0,
                    port: 0
                },
                Route {
                    prefix: "2001:2::".parse().unwrap(),
                    len: 32,
                    port: 2
                },
            ]
        );
        assert_eq!(f.flows.len(), 2);
        assert_eq!(f.flows[0].proto, 17);
        assert_eq!((f.flows[0].sport, f.flows[0].dport), (1024, 9));
        assert_eq!(f.flows[1].proto, 6);
    }

    #[test]
    fn each_bad_line_is_an_error_naming_it() {
        let cases = [
            (
                "10.0.0.0/8 1\n10.0.0.0 1",
                "line 2: '10.0.0.0 1': '10.0.0.0' has no prefix length (PREFIX/LEN)",
            ),
            (
                "10.0.0.0/33 1",
                "line 1: '10.0.0.0/33 1': prefix length '33' is not in 0..=32",
            ),
            (
                "::/129 1",
                "line 1: '::/129 1': prefix length '129' is not in 0..=128",
            ),
            (
                "10.1.0.0/8 1",
                "line 1: '10.1.0.0/8 1': 10.1.0.0 has bits set beyond /8",
            ),
            (
                "10.0.0.0/8 x",
                "line 1: '10.0.0.0/8 x': 'x' is not a port number (0..=65535)",
            ),
            (
                "\n\n10.0.0.300/8 1",
                "line 3: '10.0.0.300/8 1': '10.0.0.300' is not an IPv4 or IPv6 address",
            ),
            (
                "10.0.0.0/8",
                "line 1: '10.0.0.0/8': 1 fields; expected `PREFIX/LEN PORT` (a route) or `SRC \
                 DST SPORT DPORT PROTO PORT` (a flow)",
            ),
            (
                "10.0.0.1 ::1 1 2 udp 0",
                "line 1: '10.0.0.1 ::1 1 2 udp 0': source and destination are of different \
                 families",
            ),
            (
                "10.0.0.1 10.0.0.2 1 2 icmp 0",
                "line 1: '10.0.0.1 10.0.0.2 1 2 icmp 0': 'icmp' is not a protocol (tcp, udp or \
                 0..=255)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap_err(), want, "{text:?}");
        }
        assert!(
            load("/nonexistent/routes")
                .unwrap_err()
                .starts_with("routes file '/nonexistent/routes': ")
        );
    }
}
