//! `sluice fwd` arguments, named as testpmd names them.

use std::net::SocketAddr;

use clap::{Args, ValueEnum};
use sluice::net::MacAddr;
use sluice::port::Offloads;

/// The ports a command drives, by spec.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct PortSpecs {
    /// Port spec strings (`null`, `pair:name=p0`, `soft:tester=t,gen=udp`,
    /// `pcap:rx=in.pcap`, `afpacket:iface=veth0`, ...), in port order.
    #[arg(value_name = "SPEC")]
    pub specs: Vec<String>,
    /// A port spec; may be repeated (and mixed with positional specs, which
    /// come after).
    #[arg(long = "port", short = 'p', value_name = "SPEC")]
    pub ports: Vec<String>,
}

impl PortSpecs {
    /// These specs, as if given positionally.
    pub fn new(specs: Vec<String>) -> PortSpecs {
        PortSpecs {
            specs,
            ports: Vec::new(),
        }
    }

    /// Every port spec, `--port` ones first.
    pub fn all(&self) -> Vec<String> {
        self.ports.iter().chain(&self.specs).cloned().collect()
    }
}

/// The queues, buffers and bursts of a command's ports.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct QueueOptions {
    /// Packets asked for per Rx call.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub burst: u16,
    /// Rx descriptors per queue.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u16).range(1..))]
    pub rxd: u16,
    /// Tx descriptors per queue.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u16).range(1..))]
    pub txd: u16,
    /// Mempool per-lcore cache size.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(0..=512))]
    pub cache: u32,
    /// Mbufs in the pool (default: enough for every descriptor, cache and
    /// burst, at least 8191).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub pool_size: Option<u32>,
    /// Tx attempts more for packets a Tx queue did not take, before they are
    /// dropped (and counted).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub tx_retry: u32,
}

impl Default for QueueOptions {
    /// The defaults of the command line (DPDK l2fwd's and testpmd's).
    fn default() -> QueueOptions {
        QueueOptions {
            burst: 32,
            rxd: 1024,
            txd: 1024,
            cache: 256,
            pool_size: None,
            tx_retry: 0,
        }
    }
}

/// The prefix an instance's telemetry socket goes under when none is given
/// (DPDK's is `rte`).
pub const DEFAULT_FILE_PREFIX: &str = "sluice";

/// How a running instance can be watched: its telemetry socket (DPDK's
/// telemetry v2 protocol, for `sluice stats` and `dpdk-telemetry.py`) and a
/// Prometheus endpoint.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct ObserveOptions {
    /// The instance's name: its telemetry socket is
    /// `<runtime dir>/dpdk/NAME/dpdk_telemetry.v2`, as DPDK's
    /// `--file-prefix` (`sluice stats --file-prefix NAME` and
    /// `dpdk-telemetry.py -f NAME` connect to it).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_FILE_PREFIX,
          value_parser = parse_file_prefix)]
    pub file_prefix: String,
    /// Serve no telemetry socket.
    #[arg(long)]
    pub no_telemetry: bool,
    /// Serve Prometheus metrics (`GET /metrics`) on this address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// The command watched, as telemetry names it (`fwd`, `l3fwd`, `demo`,
    /// ...): set by the command, not an option.
    #[arg(skip)]
    pub command: &'static str,
}

impl ObserveOptions {
    /// The command line's defaults: telemetry under prefix `sluice`, no
    /// metrics.
    pub fn serving() -> ObserveOptions {
        ObserveOptions {
            file_prefix: DEFAULT_FILE_PREFIX.to_owned(),
            no_telemetry: false,
            metrics: None,
            command: "",
        }
    }

    /// Nothing served: runs put together in code (tests, `sluice tune`,
    /// `sluice bench`) run side by side and must not claim a prefix.
    pub fn off() -> ObserveOptions {
        ObserveOptions {
            no_telemetry: true,
            ..ObserveOptions::serving()
        }
    }

    /// Whether anything is served at all.
    pub fn is_off(&self) -> bool {
        self.no_telemetry && self.metrics.is_none()
    }

    /// These options for the command `command`.
    pub fn for_command(&self, command: &'static str) -> ObserveOptions {
        ObserveOptions {
            command,
            ..self.clone()
        }
    }
}

/// Parses `--file-prefix`: a name usable as one path component.
pub fn parse_file_prefix(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "'{s}' is not a file prefix (1 to 64 of A-Z a-z 0-9 - _ .)"
        ))
    }
}

/// How long a run lasts and what it prints.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// How long to run, in seconds (then the pipeline is drained).
    #[arg(long, default_value_t = 5.0, value_parser = parse_seconds)]
    pub duration: f64,
    /// Seconds between live stats lines.
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    pub stats_period: f64,
    /// One JSON object per line (stats lines and the summary) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Telemetry and metrics.
    #[command(flatten)]
    pub observe: ObserveOptions,
}

impl Default for RunOptions {
    /// The defaults of the command line, with nothing served
    /// ([`ObserveOptions::off`]): runs put together in code run side by side.
    fn default() -> RunOptions {
        RunOptions {
            duration: 5.0,
            stats_period: 1.0,
            json: false,
            observe: ObserveOptions::off(),
        }
    }
}

/// The options `sluice l2fwd` and `sluice l3fwd` share, as DPDK's sample
/// applications do: they run until SIGINT or SIGTERM unless given a
/// duration.
#[derive(Args, Debug, Clone)]
pub struct SampleAppOptions {
    /// The ports.
    #[command(flatten)]
    pub port_specs: PortSpecs,
    /// Queues, buffers, bursts.
    #[command(flatten)]
    pub queues: QueueOptions,
    /// Destination MAC written on frames leaving a port: `MAC` for every
    /// port or `PORT,MAC` for one (repeatable). Default
    /// 02:00:00:00:00:PORT.
    #[arg(long, value_name = "[PORT,]MAC", value_parser = parse_eth_peer)]
    pub dest_mac: Vec<EthPeer>,
    /// Forwarding lcores; each port gets this many Rx and Tx queues when
    /// its driver allows.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub cores: u16,
    /// Stop after this many seconds (default: run until SIGINT or SIGTERM).
    #[arg(long, value_parser = parse_seconds)]
    pub duration: Option<f64>,
    /// One JSON object per line (stats lines and the summary) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Telemetry and metrics.
    #[command(flatten)]
    pub observe: ObserveOptions,
}

impl SampleAppOptions {
    /// The `sluice fwd` arguments of these options (the engine and the
    /// rest at their defaults).
    pub fn to_fwd(&self) -> FwdArgs {
        let mut a = FwdArgs::with_specs(Vec::new());
        a.port_specs = self.port_specs.clone();
        a.queues = self.queues.clone();
        a.eth_peer = self.dest_mac.clone();
        a.cores = self.cores;
        a.run.duration = self.duration.unwrap_or(f64::INFINITY);
        a.run.json = self.json;
        a.run.observe = self.observe.clone();
        a
    }
}

/// Arguments of `sluice fwd`.
#[derive(Args, Debug, Clone)]
pub struct FwdArgs {
    /// The ports. They forward in pairs, 0<->1, 2<->3; with an odd count the
    /// last forwards to itself.
    #[command(flatten)]
    pub port_specs: PortSpecs,
    /// Queues, buffers, bursts.
    #[command(flatten)]
    pub queues: QueueOptions,
    /// The run's length and output.
    #[command(flatten)]
    pub run: RunOptions,
    /// Forwarding engine.
    #[arg(long, value_enum, default_value_t = Engine::Io)]
    pub engine: Engine,
    /// Forwarding lcores. Each port gets this many Rx and Tx queues when its
    /// driver allows (else one); the (port, queue) streams are spread over the
    /// lcores.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub cores: u16,
    /// Per-queue burst-size histograms in the summary.
    #[arg(long)]
    pub hist: bool,
    /// `mac` engine: the destination MAC, `MAC` for every port or `PORT,MAC`
    /// for one (repeatable). Default 02:00:00:00:00:PORT.
    #[arg(long, value_name = "[PORT,]MAC", value_parser = parse_eth_peer)]
    pub eth_peer: Vec<EthPeer>,
    /// Send one burst of generated frames (`--txpkts` bytes) on every
    /// stream before forwarding starts: traffic for ports that make none
    /// (a `pair`), as testpmd's `--tx-first`.
    #[arg(long)]
    pub tx_first: bool,
    /// `txonly` engine and `--tx-first`: frame length in bytes (without FCS).
    #[arg(long, default_value_t = 64, value_name = "SIZE",
          value_parser = clap::value_parser!(u16).range(42..=9000))]
    pub txpkts: u16,
    /// Rx offloads asked for on each port whose device has them (not an
    /// option: `sluice l3fwd` asks for the IPv4 checksum check and verifies
    /// in software where the device cannot).
    #[arg(skip)]
    pub rx_offloads_if_capable: Offloads,
}

impl FwdArgs {
    /// Arguments with every default and these port specs (for the demo and
    /// tests).
    pub fn with_specs(specs: Vec<String>) -> FwdArgs {
        FwdArgs {
            port_specs: PortSpecs::new(specs),
            queues: QueueOptions::default(),
            run: RunOptions::default(),
            engine: Engine::Io,
            cores: 1,
            hist: false,
            eth_peer: Vec::new(),
            tx_first: false,
            txpkts: 64,
            rx_offloads_if_capable: Offloads::NONE,
        }
    }

    /// Every port spec, `--port` ones first.
    pub fn all_specs(&self) -> Vec<String> {
        self.port_specs.all()
    }

    /// The peer MAC of port `port` for the `mac` engine.
    pub fn peer_mac(&self, port: usize) -> MacAddr {
        let mut mac = MacAddr([0x02, 0, 0, 0, 0, port as u8]);
        for p in &self.eth_peer {
            match p.port {
                None => mac = p.mac,
                Some(q) if q as usize == port => mac = p.mac,
                Some(_) => {}
            }
        }
        mac
    }
}

/// The forwarding engines (testpmd's `--forward-mode`).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Forward packets unchanged.
    Io,
    /// Set the source MAC to the Tx port's and the destination to its peer's.
    Mac,
    /// Swap the source and destination MACs.
    Macswap,
    /// Receive and free.
    Rxonly,
    /// Send generated UDP frames (`--txpkts` bytes).
    Txonly,
    /// Io, with a recycle step before each receive: the stream's Tx queue
    /// moves its sent buffers straight into the stream's Rx queue's ring
    /// (ports whose queues support it, e.g. `soft`).
    Recycle,
}

impl Engine {
    /// The name, as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Io => "io",
            Engine::Mac => "mac",
            Engine::Macswap => "macswap",
            Engine::Rxonly => "rxonly",
            Engine::Txonly => "txonly",
            Engine::Recycle => "recycle",
        }
    }
}

/// One `--eth-peer`: a MAC for one port, or for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthPeer {
    /// The port, or `None` for every port.
    pub port: Option<u16>,
    /// The MAC.
    pub mac: MacAddr,
}

/// Parses `--eth-peer` / `--dest-mac`: `MAC` or `PORT,MAC`.
pub fn parse_eth_peer(s: &str) -> Result<EthPeer, String> {
    match s.split_once(',') {
        Some((port, mac)) => Ok(EthPeer {
            port: Some(
                port.parse()
                    .map_err(|_| format!("'{port}' is not a port number"))?,
            ),
            mac: parse_mac(mac)?,
        }),
        None => Ok(EthPeer {
            port: None,
            mac: parse_mac(s)?,
        }),
    }
}

/// Parses `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(s: &str) -> Result<MacAddr, String> {
    let bad = || format!("'{s}' is not a MAC address (expected aa:bb:cc:dd:ee:ff)");
    let mut out = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for byte in out.iter_mut() {
        let hex = parts.next().ok_or_else(bad)?;
        if hex.is_empty() || hex.len() > 2 {
            return Err(bad());
        }
        *byte = u8::from_str_radix(hex, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(MacAddr(out))
}

/// Parses a positive, finite number of seconds (at most 1e6).
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds in (0, 1e6]")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_bad_ones_are_rejected() {
        assert_eq!(
            parse_mac("02:00:0a:ff:00:01").unwrap(),
            MacAddr([2, 0, 0xa, 0xff, 0, 1])
        );
        assert_eq!(
            parse_mac("2-0-0-0-0-1").unwrap(),
            MacAddr([2, 0, 0, 0, 0, 1])
        );
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:00:00",
            "0g:00:00:00:00:00",
            "002:0:0:0:0:0",
        ] {
            assert_eq!(
                parse_mac(bad).unwrap_err(),
                format!("'{bad}' is not a MAC address (expected aa:bb:cc:dd:ee:ff)")
            );
        }
    }

    #[test]
    fn eth_peer_for_one_port_overrides_the_default() {
        let mut a = FwdArgs::with_specs(vec![]);
        assert_eq!(a.peer_mac(3), MacAddr([2, 0, 0, 0, 0, 3]));
        a.eth_peer = vec![
            parse_eth_peer("aa:aa:aa:aa:aa:aa").unwrap(),
            parse_eth_peer("1,bb:bb:bb:bb:bb:bb").unwrap(),
        ];
        assert_eq!(a.peer_mac(0), MacAddr([0xaa; 6]));
        assert_eq!(a.peer_mac(1), MacAddr([0xbb; 6]));
        assert!(parse_eth_peer("x,aa:aa:aa:aa:aa:aa").is_err());
    }

    #[test]
    fn file_prefixes_are_one_path_component() {
        assert_eq!(parse_file_prefix("sluice-2.a_b"), Ok("sluice-2.a_b".into()));
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(parse_file_prefix(bad).is_err(), "{bad}");
        }
        assert!(ObserveOptions::off().no_telemetry);
        assert!(!ObserveOptions::serving().no_telemetry);
    }

    #[test]
    fn seconds_must_be_positive_and_finite() {
        assert_eq!(parse_seconds("0.25"), Ok(0.25));
        for bad in ["0", "-1", "nan", "inf", "x"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
