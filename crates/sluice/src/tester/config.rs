//! What a tester generates: [`TesterConfig`], and its reading from port spec
//! arguments (`gen=`, `flows=`, `size=`, `rate=`, `count=`).

use std::fmt;
use std::str::FromStr;

use crate::net::MacAddr;
use crate::port::spec::{SpecArgs, SpecError};

use super::frame::MAX_FLOWS;

/// The network layer of generated frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L3 {
    /// IPv4, 20-byte header (no options), don't-fragment set, TTL 64.
    Ipv4,
    /// IPv6, 40-byte header (no extension headers), hop limit 64.
    Ipv6,
}

/// The transport layer of generated frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4 {
    /// UDP, 8-byte header.
    Udp,
    /// TCP, 20-byte header (no options), flags ACK|PSH.
    Tcp,
}

/// Frame lengths, Ethernet header included and FCS excluded.
///
/// A frame is never shorter than its headers plus the 16-byte stamp:
/// 58 bytes for UDP/IPv4, 70 for TCP/IPv4, 78 for UDP/IPv6 and 90 for
/// TCP/IPv6. A smaller size is raised to that minimum. Frames with at least
/// 6 bytes after the stamp also carry their send time, for latency (64-byte
/// UDP/IPv4 frames do; see [`frame`](super::frame)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameSize {
    /// Every frame this long (60..=9000).
    Fixed(u16),
    /// The simple IMIX: 64, 570 and 1518 bytes at 7:4:1, in a fixed
    /// interleaved order of 12 frames (see [`IMIX_ORDER`](super::IMIX_ORDER)).
    Imix,
}

/// The smallest fixed frame size accepted.
pub const MIN_FRAME: u16 = 60;
/// The largest fixed frame size accepted.
pub const MAX_FRAME: u16 = 9000;

impl FromStr for FrameSize {
    type Err = String;

    /// `imix` or a number in 60..=9000.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "imix" {
            return Ok(FrameSize::Imix);
        }
        match s.parse::<u16>() {
            Ok(n) if (MIN_FRAME..=MAX_FRAME).contains(&n) => Ok(FrameSize::Fixed(n)),
            _ => Err(format!(
                "'{s}' is not a frame size in {MIN_FRAME}..={MAX_FRAME} or imix"
            )),
        }
    }
}

impl fmt::Display for FrameSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameSize::Fixed(n) => write!(f, "{n}"),
            FrameSize::Imix => f.write_str("imix"),
        }
    }
}

/// What a tester generates and checks.
#[derive(Debug, Clone, PartialEq)]
pub struct TesterConfig {
    /// Network layer.
    pub l3: L3,
    /// Transport layer.
    pub l4: L4,
    /// Flows per stream (1..=1<<20); each flow has its own 5-tuple and
    /// sequence numbers.
    pub flows: u32,
    /// Frame lengths.
    pub size: FrameSize,
    /// Frames per second per stream, shared by the stream's generators in
    /// proportion to their flows; `None` is full speed.
    pub rate_pps: Option<f64>,
    /// Frames per stream, spread evenly over its flows; `None` is no limit.
    pub count: Option<u64>,
    /// Source MAC of generated frames.
    pub src_mac: MacAddr,
    /// Destination MAC of generated frames.
    pub dst_mac: MacAddr,
    /// Seeds the payload pattern and the stamp check.
    pub seed: u64,
    /// Destination address per stream (`dst=stream`): `198.18.S.1` /
    /// `2001:2:0:2::S:1` for stream `S` (mod 256 for IPv4), so a router
    /// can send each port's traffic its own way; `false` (`dst=fixed`) is
    /// `198.18.0.1` / `2001:2:0:2::1` for all.
    pub dst_per_stream: bool,
}

/// The source MAC of the default configuration.
pub const DEFAULT_SRC_MAC: MacAddr = MacAddr([0x02, 0x00, 0x00, 0x5e, 0x00, 0x01]);
/// The destination MAC of the default configuration.
pub const DEFAULT_DST_MAC: MacAddr = MacAddr([0x02, 0x00, 0x00, 0x5e, 0x00, 0x02]);
/// The seed of the default configuration.
pub const DEFAULT_SEED: u64 = 0x5eed_5c1e_u64;

impl Default for TesterConfig {
    /// UDP over IPv4, 16 flows, 64-byte frames, full speed, no count limit.
    fn default() -> Self {
        TesterConfig {
            l3: L3::Ipv4,
            l4: L4::Udp,
            flows: 16,
            size: FrameSize::Fixed(64),
            rate_pps: None,
            count: None,
            src_mac: DEFAULT_SRC_MAC,
            dst_mac: DEFAULT_DST_MAC,
            seed: DEFAULT_SEED,
            dst_per_stream: false,
        }
    }
}

/// The spec keys [`TesterConfig::from_args`] reads. A driver that embeds a
/// tester declares them among its own keys.
pub const TESTER_KEYS: &[&str] = &["gen", "flows", "size", "rate", "count", "dst"];

/// The `gen=` values, in the order of [`TesterConfig::gen_name`].
const GEN_NAMES: &[&str] = &["udp", "tcp", "udp6", "tcp6"];

/// The lowest rate accepted, frames per second.
pub const MIN_RATE: f64 = 1e-3;
/// The highest rate accepted, frames per second: the pacer's arithmetic
/// (milli-frames per second times TSC ticks, in 128 bits) cannot overflow
/// below it.
pub const MAX_RATE: f64 = 1e10;

/// A rate in frames per second, in [`MIN_RATE`]..=[`MAX_RATE`].
struct Rate(f64);

impl FromStr for Rate {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        match s.parse::<f64>() {
            Ok(r) if (MIN_RATE..=MAX_RATE).contains(&r) => Ok(Rate(r)),
            _ => Err(()),
        }
    }
}

impl TesterConfig {
    /// Reads the tester keys ([`TESTER_KEYS`]) from `args`, starting from
    /// the default configuration:
    ///
    /// - `gen=udp|tcp|udp6|tcp6`: the protocols (`6` for IPv6);
    /// - `flows=N`: flows per stream, 1..=1048576;
    /// - `size=N|imix`: frame length without FCS, 60..=9000, or the IMIX;
    /// - `rate=PPS`: frames per second per stream, 1e-3..=1e10 (such as
    ///   `1e6`); absent is full speed;
    /// - `count=N`: frames per stream, at least 1; absent is no limit;
    /// - `dst=fixed|stream`: one destination address for all streams, or
    ///   one per stream (see [`TesterConfig::dst_per_stream`]).
    ///
    /// `Ok(None)` when none of the keys is given.
    pub fn from_args(args: &mut SpecArgs<'_>) -> Result<Option<TesterConfig>, SpecError> {
        let gen_kind = args.choice("gen", GEN_NAMES)?;
        let flows = args.u64_in("flows", 1..=u64::from(MAX_FLOWS))?;
        let size = args.parse::<FrameSize>("size", "a frame size in 60..=9000 or imix")?;
        let rate = args.parse::<Rate>("rate", "a rate in frames/s in 1e-3..=1e10")?;
        let count = args.u64_in("count", 1..=u64::MAX)?;
        let dst = args.choice("dst", &["fixed", "stream"])?;
        if gen_kind.is_none()
            && flows.is_none()
            && size.is_none()
            && rate.is_none()
            && count.is_none()
            && dst.is_none()
        {
            return Ok(None);
        }
        let mut c = TesterConfig::default();
        if let Some(g) = gen_kind {
            (c.l3, c.l4) = match g {
                "udp" => (L3::Ipv4, L4::Udp),
                "tcp" => (L3::Ipv4, L4::Tcp),
                "udp6" => (L3::Ipv6, L4::Udp),
                _ => (L3::Ipv6, L4::Tcp),
            };
        }
        if let Some(f) = flows {
            c.flows = f as u32;
        }
        if let Some(s) = size {
            c.size = s;
        }
        c.rate_pps = rate.map(|r| r.0);
        c.count = count;
        c.dst_per_stream = dst == Some("stream");
        Ok(Some(c))
    }

    /// The `gen=` name of the protocols: `udp`, `tcp`, `udp6` or `tcp6`.
    pub fn gen_name(&self) -> &'static str {
        match (self.l3, self.l4) {
            (L3::Ipv4, L4::Udp) => GEN_NAMES[0],
            (L3::Ipv4, L4::Tcp) => GEN_NAMES[1],
            (L3::Ipv6, L4::Udp) => GEN_NAMES[2],
            (L3::Ipv6, L4::Tcp) => GEN_NAMES[3],
        }
    }
}

impl fmt::Display for TesterConfig {
    /// The configuration as spec keys, e.g. `gen=udp,flows=16,size=64`, then
    /// `rate=` and `count=` when set, and the MACs and seed when they are not
    /// the defaults.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gen={},flows={},size={}",
            self.gen_name(),
            self.flows,
            self.size
        )?;
        if let Some(r) = self.rate_pps {
            write!(f, ",rate={r}")?;
        }
        if let Some(n) = self.count {
            write!(f, ",count={n}")?;
        }
        if self.dst_per_stream {
            f.write_str(",dst=stream")?;
        }
        if self.src_mac != DEFAULT_SRC_MAC || self.dst_mac != DEFAULT_DST_MAC {
            write!(f, ",src_mac={},dst_mac={}", self.src_mac, self.dst_mac)?;
        }
        if self.seed != DEFAULT_SEED {
            write!(f, ",seed={:#x}", self.seed)?;
        }
        Ok(())
    }
}
