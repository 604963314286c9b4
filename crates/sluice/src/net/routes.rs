//! The routes file: the text form of the LPM ([`lpm`](super::lpm)) and
//! exact-match ([`em`](super::em)) tables, as `sluice l3fwd --routes` reads
//! it.
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
//! The same prefix (or 5-tuple) on two lines with different ports is an
//! error naming both lines: otherwise the last line would silently win. The
//! same entry with the same port twice is kept once.
//!
//! Input is bounded: at most [`MAX_LINES`] lines of at most
//! [`MAX_LINE_LEN`] bytes each, UTF-8; [`load`] refuses anything but a
//! regular file (a FIFO could block for ever, `/dev/zero` never ends).
//! Every error names the line (1-based) and quotes at most
//! [`QUOTE_CHARS`] characters of its text, with an ellipsis when cut.
//!
//! ```
//! use sluice::net::routes::parse;
//!
//! let f = parse("10.0.0.0/8 1  # lab\n10.0.0.1 198.18.0.1 1024 9 udp 0\n").unwrap();
//! assert_eq!(f.routes[0].to_string(), "10.0.0.0/8 1");
//! assert_eq!(f.flows[0].to_string(), "10.0.0.1 198.18.0.1 1024 9 17 0");
//! let e = parse("10.0.0.0/8 1\n10.0.0.0/8 2\n").unwrap_err();
//! assert_eq!(
//!     e.to_string(),
//!     "line 2: '10.0.0.0/8 2': 10.0.0.0/8 already goes to port 1 on line 1 ('10.0.0.0/8 1')"
//! );
//! ```

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use std::net::IpAddr;

/// The most lines a routes file may have (comments and blank lines
/// included).
pub const MAX_LINES: usize = 1 << 20;

/// The longest line accepted, in bytes (without the line end).
pub const MAX_LINE_LEN: usize = 4096;

/// The most characters of a line (or of a field) an error quotes.
pub const QUOTE_CHARS: usize = 100;

/// A longest-prefix-match route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// The prefix (bits beyond `len` zero).
    pub prefix: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// Output port.
    pub port: u16,
}

impl fmt::Display for Route {
    /// The route's line: `PREFIX/LEN PORT`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} {}", self.prefix, self.len, self.port)
    }
}

/// An exact-match flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// A flow's 5-tuple: source, destination, ports, protocol.
type FlowKey = (IpAddr, IpAddr, u16, u16, u8);

impl FlowRule {
    /// The 5-tuple, without the output port.
    fn key(&self) -> FlowKey {
        (self.src, self.dst, self.sport, self.dport, self.proto)
    }
}

impl fmt::Display for FlowRule {
    /// The flow's line: `SRC DST SPORT DPORT PROTO PORT`, PROTO a number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {}",
            self.src, self.dst, self.sport, self.dport, self.proto, self.port
        )
    }
}

/// What a routes file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutesFile {
    /// Route lines, in file order (a repeated line once).
    pub routes: Vec<Route>,
    /// Flow lines, in file order (a repeated line once).
    pub flows: Vec<FlowRule>,
}

/// Why a routes file cannot be read.
#[derive(Debug)]
pub enum RoutesError {
    /// Opening or reading failed.
    Io(io::Error),
    /// The path is not a regular file.
    NotRegular {
        /// What it is ("a FIFO", "a character device", ...).
        kind: &'static str,
    },
    /// The file has more than [`MAX_LINES`] lines.
    TooManyLines,
    /// A line is wrong.
    Line {
        /// Line number (1-based).
        line: usize,
        /// What is wrong, with the line's text quoted (bounded).
        what: String,
    },
}

impl fmt::Display for RoutesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoutesError::Io(e) => write!(f, "{e}"),
            RoutesError::NotRegular { kind } => write!(f, "{kind}, not a regular file"),
            RoutesError::TooManyLines => write!(f, "more than {MAX_LINES} lines"),
            RoutesError::Line { line, what } => write!(f, "line {line}: {what}"),
        }
    }
}

impl std::error::Error for RoutesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RoutesError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for RoutesError {
    fn from(e: io::Error) -> Self {
        RoutesError::Io(e)
    }
}

/// `text` for an error message: at most [`QUOTE_CHARS`] characters, then
/// `…` if there is more; control characters escaped (and counted as the
/// characters of their escape), so a quoted line cannot rewrite the
/// terminal.
pub fn quote(text: &str) -> String {
    let mut out = String::new();
    let mut shown = 0;
    for c in text.chars() {
        let piece = c.escape_debug();
        let width = if c.is_control() { piece.len() } else { 1 };
        if shown + width > QUOTE_CHARS {
            out.push('…');
            break;
        }
        shown += width;
        if c.is_control() {
            out.extend(piece);
        } else {
            out.push(c);
        }
    }
    out
}

/// Reads and parses the routes file `path`. Only a regular file is read
/// (it is opened without blocking, so a FIFO is refused rather than waited
/// on); lines are read one at a time, each bounded.
pub fn load(path: &str) -> Result<RoutesFile, RoutesError> {
    let (file, meta) = crate::file::open_read_nonblocking(path)?;
    if !meta.is_file() {
        return Err(RoutesError::NotRegular {
            kind: crate::file::kind(&meta),
        });
    }
    read(BufReader::new(file))
}

/// Reads and parses a routes file from `input`, a line at a time: a line
/// longer than [`MAX_LINE_LEN`] is an error as soon as it is seen, and no
/// more than [`MAX_LINES`] lines are read.
pub fn read(mut input: impl BufRead) -> Result<RoutesFile, RoutesError> {
    let mut parser = Parser::default();
    let mut buf = Vec::new();
    for no in 1.. {
        buf.clear();
        // One byte more than a line may hold: enough to see it is too long.
        let n = (&mut input)
            .take(MAX_LINE_LEN as u64 + 2)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        if no > MAX_LINES {
            return Err(RoutesError::TooManyLines);
        }
        // A line cut by `take` is longer than a line may be: `line` refuses
        // it.
        parser.line(no, &buf)?;
    }
    Ok(parser.finish())
}

/// Parses a routes file's text (bytes, so any input is an answer: a line
/// that is not UTF-8 is an error naming it).
pub fn parse(text: impl AsRef<[u8]>) -> Result<RoutesFile, RoutesError> {
    let mut parser = Parser::default();
    let mut rest = text.as_ref();
    let mut no = 0;
    while !rest.is_empty() {
        no += 1;
        if no > MAX_LINES {
            return Err(RoutesError::TooManyLines);
        }
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let (line, tail) = rest.split_at(end);
        parser.line(no, line)?;
        rest = tail;
    }
    Ok(parser.finish())
}

/// Parses lines one by one, remembering where each entry came from to find
/// contradicting duplicates.
#[derive(Default)]
struct Parser {
    file: RoutesFile,
    /// Line and port of each prefix seen.
    routes: HashMap<(IpAddr, u8), (usize, u16)>,
    /// Line and port of each 5-tuple seen.
    flows: HashMap<FlowKey, (usize, u16)>,
}

impl Parser {
    /// Parses line `no`, `raw` with its line end if any.
    fn line(&mut self, no: usize, raw: &[u8]) -> Result<(), RoutesError> {
        let err = |what: String| RoutesError::Line { line: no, what };
        let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.len() > MAX_LINE_LEN {
            let head = String::from_utf8_lossy(&raw[..QUOTE_CHARS * 4]);
            return Err(err(format!(
                "'{}': longer than {MAX_LINE_LEN} bytes",
                quote(&head)
            )));
        }
        let Ok(raw) = std::str::from_utf8(raw) else {
            let head = String::from_utf8_lossy(raw);
            return Err(err(format!("'{}': not UTF-8 text", quote(&head))));
        };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            return Ok(());
        }
        let shown = quote(raw.trim());
        let fields: Vec<&str> = line.split_whitespace().collect();
        let r = match fields.len() {
            2 => parse_route(&fields).and_then(|r| self.add_route(no, r)),
            6 => parse_flow(&fields).and_then(|f| self.add_flow(no, f)),
            n => Err(format!(
                "{n} fields; expected `PREFIX/LEN PORT` (a route) or `SRC DST SPORT DPORT PROTO \
                 PORT` (a flow)"
            )),
        };
        r.map_err(|e| err(format!("'{shown}': {e}")))
    }

    fn add_route(&mut self, no: usize, r: Route) -> Result<(), String> {
        add_once(
            &mut self.routes,
            &mut self.file.routes,
            (r.prefix, r.len),
            (no, r.port),
            r,
            |line, port| {
                let first = Route { port, ..r };
                format!(
                    "{}/{} already goes to port {port} on line {line} ('{first}')",
                    r.prefix, r.len
                )
            },
        )
    }

    fn add_flow(&mut self, no: usize, f: FlowRule) -> Result<(), String> {
        add_once(
            &mut self.flows,
            &mut self.file.flows,
            f.key(),
            (no, f.port),
            f,
            |line, port| {
                let first = FlowRule { port, ..f };
                format!(
                    "flow {} {} {} {} {} already goes to port {port} on line {line} ('{first}')",
                    f.src, f.dst, f.sport, f.dport, f.proto
                )
            },
        )
    }

    fn finish(self) -> RoutesFile {
        self.file
    }
}

/// Files `item`, first seen on line `line_port.0` and sending to port
/// `line_port.1`, under `key` in `seen` and at the end of `list`. A repeat
/// to the same port is dropped; one to another port is an error, which
/// `conflict(first line, first port)` words.
fn add_once<K: Eq + std::hash::Hash, T>(
    seen: &mut HashMap<K, (usize, u16)>,
    list: &mut Vec<T>,
    key: K,
    line_port: (usize, u16),
    item: T,
    conflict: impl FnOnce(usize, u16) -> String,
) -> Result<(), String> {
    match seen.entry(key) {
        Entry::Vacant(v) => {
            v.insert(line_port);
            list.push(item);
            Ok(())
        }
        Entry::Occupied(o) => {
            let (line, port) = *o.get();
            if port == line_port.1 {
                Ok(())
            } else {
                Err(conflict(line, port))
            }
        }
    }
}

fn parse_port(s: &str) -> Result<u16, String> {
    s.parse()
        .map_err(|_| format!("'{}' is not a port number (0..=65535)", quote(s)))
}

fn parse_addr(s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("'{}' is not an IPv4 or IPv6 address", quote(s)))
}

fn parse_route(f: &[&str]) -> Result<Route, String> {
    let (addr, len) = f[0]
        .split_once('/')
        .ok_or_else(|| format!("'{}' has no prefix length (PREFIX/LEN)", quote(f[0])))?;
    let prefix = parse_addr(addr)?;
    let max = if prefix.is_ipv4() { 32 } else { 128 };
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| *l <= max)
        .ok_or_else(|| format!("prefix length '{}' is not in 0..={max}", quote(len)))?;
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
            .map_err(|_| format!("'{}' is not a protocol (tcp, udp or 0..=255)", quote(p)))?,
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
