//! The VM and container port cases of `sluice bench fwd`: two Sluice ports
//! connected to each other over memif or vhost-user, each on its own core,
//! beside DPDK's own pairing of the same kind measured in the same run.
//!
//! Cases ([`CASES`]), each at 64 and 1500 bytes:
//! - `memif io (memif peer)`: a `memif:` server port against a `memif:`
//!   client port; DPDK: `dpdk-testpmd` with `net_memif` as server against
//!   `dpdk-testpmd` with `net_memif` as client.
//! - `vhost io (virtio peer)`: a `vhost:` port (the device, listening)
//!   against a `virtio:` port (the driver, connecting); DPDK: testpmd with
//!   `net_vhost` against testpmd with `net_virtio_user`.
//!
//! # Method
//! The server side (the measured one) runs io forwarding on its single
//! port, looping every frame back out, on the first CPU; the client side,
//! on the second CPU, sends [`POPULATION`] frames of the size into the link
//! (as testpmd's `start tx_first 8`) and then loops back everything it
//! receives the same way, so a fixed population of frames circulates. A
//! slice warms up, then times a window: Mpps are the packets the server
//! side received over the window; cycles per packet are, as testpmd's
//! `--record-core-cycles` counts them, the TSC cycles of the loop
//! iterations that received packets (receive, send, and the engine's work
//! between) per packet received. The peer's cycles per packet are measured
//! the same way and reported beside.
//!
//! DPDK's pairing runs as two testpmd processes (`testpmd.rs`), one
//! forwarding lcore each, pinned to the same CPUs, with the same
//! population (`start tx_first 8` on the client, plain `start` on the
//! server: testpmd flushes its Rx queues at each start, so every slice
//! starts from the same population), the same warm-up and window; its
//! figures are testpmd's own `Rx-pps` over the window and `CPU
//! cycles/packet`. Sluice's slices and DPDK's alternate in interleaved
//! rounds (`sluice_bench::interleave`'s order), each idle while the other
//! runs; a figure is the median over rounds with the smallest and largest
//! beside it, and the ratio Sluice / DPDK is the median of the per-round
//! ratios.
//!
//! Every frame is counted: after each Sluice slice the client stops
//! sending and receives until every frame it sent has come back; at the
//! end, the two ports' counters must agree (the client's frames sent =
//! received = the server's received = sent, no errors) and both pools be
//! full, or the case fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice::driver::DRIVERS;
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::mempool::HugepagePolicy;
use sluice::net::MacAddr;
use sluice::port::{Port, PortConfig, PortCounters, PortError};
use sluice::tsc::{rdtsc, rdtsc_ordered};
use sluice_bench::round_order;
use sluice_bench::stats::{Spread, median, ratios};

use super::fwd::{BURST, DESC};
use super::testpmd::{Testpmd, WindowFigures};
use super::{Ctx, SpinBarrier, Stall, Worker, emit, on_lcores};
use crate::app::io::engine::{Io, Stream, poll, udp_frame};

/// Frame sizes, bytes.
pub const SIZES: [u16; 2] = [64, 1500];
/// Frames circulating between the two sides (testpmd's `start tx_first
/// 8`: eight bursts of 32).
pub const POPULATION: u64 = 8 * BURST as u64;
/// Mbufs in each side's pool.
const POOL_SIZE: u32 = 4095;
/// Per-lcore mempool cache.
const CACHE: u32 = 256;
/// The virtqueue size of the vhost-user pair: `net_virtio_user`'s
/// default `queue_size`, which sets testpmd's rings whatever `--rxd`
/// asks, so both pairs keep the same number of buffers in flight.
const VIRTQUEUE_SIZE: u16 = 256;
/// Longest Sluice's two ports may take to connect: less than the 10 s
/// the server side waits without a frame before it gives up.
const LINK_TIMEOUT: Duration = Duration::from_secs(8);
/// Longest the two testpmd may take to connect once both answer.
const DPDK_LINK_TIMEOUT: Duration = Duration::from_secs(60);

/// One VM case: two kinds of port connected to each other.
#[derive(Debug, Clone, Copy)]
pub struct VmCase {
    /// Its name in the table.
    pub name: &'static str,
    /// The drivers of Sluice's server and client sides.
    pub drivers: [&'static str; 2],
    /// Sluice's server and client port specs for a socket at the path.
    pub specs: fn(&Path) -> [String; 2],
    /// DPDK's drivers of the server and client sides (`net_memif`, ...).
    pub pmds: [&'static str; 2],
    /// testpmd's server and client `--vdev`s for a socket at the path.
    pub vdevs: fn(&Path) -> [String; 2],
}

/// The cases.
pub const CASES: [VmCase; 2] = [
    VmCase {
        name: "memif io (memif peer)",
        drivers: ["memif", "memif"],
        specs: |socket| {
            let s = socket.display();
            [
                format!("memif:socket={s},role=server"),
                format!("memif:socket={s},role=client"),
            ]
        },
        pmds: ["net_memif", "net_memif"],
        vdevs: |socket| {
            let s = socket.display();
            [
                format!("net_memif0,role=server,id=0,socket={s},socket-abstract=no"),
                format!("net_memif0,role=client,id=0,socket={s},socket-abstract=no"),
            ]
        },
    },
    VmCase {
        name: "vhost io (virtio peer)",
        drivers: ["vhost", "virtio"],
        specs: |socket| {
            let s = socket.display();
            [format!("vhost:path={s}"), format!("virtio:path={s}")]
        },
        pmds: ["net_vhost", "net_virtio"],
        vdevs: |socket| {
            let s = socket.display();
            [
                format!("net_vhost0,iface={s},queues=1"),
                format!("net_virtio_user0,path={s},queues=1"),
            ]
        },
    },
];

/// How long the slices are and how many rounds there are.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Interleaved rounds per case and size.
    pub rounds: usize,
    /// Warm-up of each slice.
    pub warm: Duration,
    /// Timed window of each slice.
    pub window: Duration,
}

impl Plan {
    /// The plan of a full run, or of a quick look.
    pub fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                rounds: 2,
                warm: Duration::from_millis(20),
                window: Duration::from_millis(50),
            }
        } else {
            Plan {
                rounds: 8,
                warm: Duration::from_millis(200),
                window: Duration::from_millis(500),
            }
        }
    }
}

/// Runs the VM cases after the other fwd cases.
pub fn run(ctx: &mut Ctx) {
    if !ctx.wants_any(&CASES.map(|c| c.name)) {
        return;
    }
    let plan = Plan::new(ctx.quick());
    let notes = vec![
        format!(
            "Two ports connected over memif or vhost-user, one forwarding core each: the server \
             side loops every frame back (io, burst {BURST}), the client side sends {POPULATION} \
             frames of the size and loops back what it receives. {} interleaved rounds of a {} \
             ms warm-up and a {} ms window for Sluice's pair and for DPDK's (two dpdk-testpmd, \
             one forwarding lcore each, `start tx_first 8`), on the same CPUs; --iters does not \
             apply.",
            plan.rounds,
            plan.warm.as_millis(),
            plan.window.as_millis()
        ),
        "Mpps: packets the server side received over the window; cyc/pkt: its TSC cycles in \
         loop iterations that received packets, per packet (testpmd's --record-core-cycles); \
         medians over rounds; x DPDK: the median of the per-round Sluice / DPDK Mpps."
            .to_owned(),
    ];
    ctx.title(
        "fwd VM ports (memif, vhost-user: Sluice and DPDK pairs)",
        &notes,
    );
    let Some(cpus) = ctx.cpu_pair() else {
        for case in CASES {
            ctx.skip(case.name, "needs two CPUs");
        }
        return;
    };
    // Both sides' figures move with how much the two CPUs share a core,
    // and with what a line costs to cross between them.
    super::note_contention(ctx);
    super::contention::note_line_round_trip(ctx, "before these cases");
    if !ctx.json {
        emit(&format!(
            "{:<24} {:>5} {:>8} {:>8} {:>10} {:>10} {:>7}  detail",
            "case", "size", "Mpps", "cyc/pkt", "DPDK Mpps", "DPDK cyc", "x DPDK"
        ));
    }
    for case in CASES {
        if ctx.wants(case.name) {
            run_case(ctx, case, cpus, plan);
        }
    }
    super::contention::note_line_round_trip(ctx, "after them");
}

/// Runs one case at every size and prints its rows.
fn run_case(ctx: &mut Ctx, case: VmCase, cpus: (usize, usize), plan: Plan) {
    let missing = case.drivers.iter().find(|d| !DRIVERS.contains(d));
    let mut sluice = match missing {
        Some(driver) => {
            ctx.note(&format!(
                "{}: Sluice side: no `{driver}` driver yet",
                case.name
            ));
            None
        }
        None => match SluicePair::open(case, cpus) {
            Ok(pair) => Some(pair),
            Err(e) => {
                ctx.report(case.name, Err(e));
                None
            }
        },
    };
    let mut dpdk = match super::testpmd::missing(&case.pmds) {
        Some(why) => {
            ctx.note(&format!("{}: DPDK column: {why}", case.name));
            None
        }
        None => match DpdkPair::start(case, cpus) {
            Ok(pair) => Some(pair),
            Err(e) => {
                ctx.note(&format!("{}: DPDK column: testpmd failed: {e}", case.name));
                None
            }
        },
    };
    if sluice.is_none() && dpdk.is_none() {
        return;
    }
    for size in SIZES {
        let mut rounds = Rounds::default();
        for round in 0..plan.rounds {
            for side in round_order(round, 2) {
                if side == 0
                    && let Some(pair) = &mut sluice
                {
                    match pair.slice(size, POPULATION, plan.warm, plan.window) {
                        Ok(f) => rounds.sluice.push(f),
                        Err(e) => {
                            ctx.report(&format!("{} {size}B", case.name), Err(e));
                            sluice = None;
                        }
                    }
                }
                if side == 1
                    && let Some(pair) = &mut dpdk
                {
                    match pair.slice(size, plan) {
                        Ok(f) => rounds.dpdk.push(f),
                        Err(e) => {
                            ctx.note(&format!("{}: DPDK column: testpmd failed: {e}", case.name));
                            dpdk = None;
                        }
                    }
                }
            }
        }
        let row = rounds.row(case.name, size);
        if row.sluice.is_some() || row.dpdk.is_some() {
            print_row(ctx, &row);
        }
    }
    drop(dpdk);
    if let Some(pair) = sluice
        && let Err(e) = pair.finish()
    {
        ctx.report(case.name, Err(e));
    }
}

/// Figures of one side over rounds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SideFigures {
    /// Millions of packets a second received by the server side: the
    /// median over rounds.
    pub mpps: f64,
    /// The smallest per-round Mpps.
    pub mpps_min: f64,
    /// The largest per-round Mpps.
    pub mpps_max: f64,
    /// The server side's cycles per packet: the median over rounds.
    pub cycles_per_packet: f64,
    /// The smallest per-round cycles per packet.
    pub cycles_min: f64,
    /// The largest per-round cycles per packet.
    pub cycles_max: f64,
    /// The client side's cycles per packet: the median over rounds.
    pub peer_cycles_per_packet: f64,
}

impl SideFigures {
    /// The figures of per-round `(Mpps, server cycles, client cycles)`;
    /// `None` without rounds.
    fn of(rounds: &[(f64, f64, f64)]) -> Option<SideFigures> {
        if rounds.is_empty() {
            return None;
        }
        let mpps = Spread::of(&rounds.iter().map(|r| r.0).collect::<Vec<_>>());
        let cycles = Spread::of(&rounds.iter().map(|r| r.1).collect::<Vec<_>>());
        Some(SideFigures {
            mpps: mpps.median,
            mpps_min: mpps.min,
            mpps_max: mpps.max,
            cycles_per_packet: cycles.median,
            cycles_min: cycles.min,
            cycles_max: cycles.max,
            peer_cycles_per_packet: median(&rounds.iter().map(|r| r.2).collect::<Vec<_>>()),
        })
    }
}

/// One result row: a case at one size.
#[derive(Debug, Clone, Serialize)]
pub struct VmRow {
    /// `fwd`.
    pub bench: &'static str,
    /// The case and the size (`memif io (memif peer) 64B`).
    pub case: String,
    /// Frame size, bytes.
    pub size: u16,
    /// Rounds measured (per side).
    pub rounds: usize,
    /// Sluice's pair, if it ran.
    pub sluice: Option<SideFigures>,
    /// DPDK's pair in the same run, if it ran.
    pub dpdk: Option<SideFigures>,
    /// Sluice / DPDK Mpps: the median of per-round ratios.
    pub mpps_ratio: Option<f64>,
    /// Sluice / DPDK cycles per packet on the server side: the median of
    /// per-round ratios.
    pub cycles_ratio: Option<f64>,
    /// The measured TSC frequency.
    pub tsc_hz: u64,
}

/// Per-round figures of both pairs.
#[derive(Debug, Default)]
struct Rounds {
    sluice: Vec<[SideWindow; 2]>,
    dpdk: Vec<[WindowFigures; 2]>,
}

impl Rounds {
    fn row(&self, name: &str, size: u16) -> VmRow {
        let sluice: Vec<(f64, f64, f64)> = self
            .sluice
            .iter()
            .map(|[server, client]| {
                (
                    server.mpps(),
                    server.cycles_per_packet(),
                    client.cycles_per_packet(),
                )
            })
            .collect();
        let dpdk: Vec<(f64, f64, f64)> = self
            .dpdk
            .iter()
            .map(|[server, client]| {
                (
                    server.rx_pps / 1e6,
                    server.cycles_per_packet,
                    client.cycles_per_packet,
                )
            })
            .collect();
        let both = !sluice.is_empty() && !dpdk.is_empty();
        let ratio = |pick: fn(&(f64, f64, f64)) -> f64| {
            both.then(|| {
                let s: Vec<f64> = sluice.iter().map(pick).collect();
                let d: Vec<f64> = dpdk.iter().map(pick).collect();
                median(&ratios(&s, &d))
            })
        };
        VmRow {
            bench: "fwd",
            case: format!("{name} {size}B"),
            size,
            rounds: sluice.len().max(dpdk.len()),
            mpps_ratio: ratio(|r| r.0),
            cycles_ratio: ratio(|r| r.1),
            sluice: SideFigures::of(&sluice),
            dpdk: SideFigures::of(&dpdk),
            tsc_hz: sluice::tsc::tsc_hz(),
        }
    }
}

/// Prints one row: a table line, or one JSON object.
fn print_row(ctx: &Ctx, row: &VmRow) {
    if ctx.json_row(&row.case, row) {
        return;
    }
    let name = row.case.rsplit_once(' ').map_or(&*row.case, |(n, _)| n);
    let dash = || "-".to_owned();
    let (mpps, cycles) = row.sluice.as_ref().map_or((dash(), dash()), |s| {
        (
            format!("{:.3}", s.mpps),
            format!("{:.1}", s.cycles_per_packet),
        )
    });
    let (dpdk_mpps, dpdk_cycles) = row.dpdk.as_ref().map_or((dash(), dash()), |d| {
        (
            format!("{:.3}", d.mpps),
            format!("{:.1}", d.cycles_per_packet),
        )
    });
    let ratio = row.mpps_ratio.map_or_else(dash, |r| format!("{r:.2}"));
    let mut detail = Vec::new();
    if let Some(s) = &row.sluice {
        detail.push(format!(
            "Mpps {:.3}-{:.3}, peer {:.1} cyc/pkt",
            s.mpps_min, s.mpps_max, s.peer_cycles_per_packet
        ));
    }
    if let Some(d) = &row.dpdk {
        detail.push(format!(
            "DPDK {:.3}-{:.3}, peer {:.1} cyc/pkt",
            d.mpps_min, d.mpps_max, d.peer_cycles_per_packet
        ));
    }
    let line = format!(
        "{name:<24} {:>5} {mpps:>8} {cycles:>8} {dpdk_mpps:>10} {dpdk_cycles:>10} {ratio:>7}  {}",
        row.size,
        detail.join("; ")
    );
    emit(line.trim_end());
}

/// A fresh directory for a pair's socket, removed on drop.
struct SocketDir(PathBuf);

impl SocketDir {
    fn new() -> Result<SocketDir, String> {
        let dir = std::env::temp_dir().join(format!(
            "sluice-bench-{}-{}",
            std::process::id(),
            super::unique_name("vm")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(SocketDir(dir))
    }

    fn socket(&self) -> PathBuf {
        self.0.join("sock")
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What one side counted over a slice's timed window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SideWindow {
    /// Packets received in the window.
    pub packets: u64,
    /// TSC cycles of the loop iterations that received them.
    pub busy: u64,
    /// The window's length in TSC cycles, as this side saw it.
    pub ticks: u64,
}

impl SideWindow {
    /// Millions of packets received a second.
    pub fn mpps(&self) -> f64 {
        sluice_bench::stats::mops(self.packets, self.ticks)
    }

    /// Busy cycles per packet received.
    pub fn cycles_per_packet(&self) -> f64 {
        self.busy as f64 / self.packets.max(1) as f64
    }
}

/// Sluice's two ports of a case, kept across slices (each slice moves them
/// onto its lcores and back).
pub struct SluicePair {
    /// Server and client; `None` once a slice has failed with them.
    ports: Option<[Port; 2]>,
    pools: [MbufPool; 2],
    cpus: (usize, usize),
    /// Both ports' errors once connected (frames a port dropped while its
    /// link was still down are not the pair's losses).
    connected_errors: u64,
    _dir: SocketDir,
}

/// Both ports' Rx and Tx errors.
fn errors(ports: &[Port; 2]) -> u64 {
    ports
        .iter()
        .map(|p| {
            let s = p.stats();
            s.rx_errors + s.tx_errors
        })
        .sum()
}

/// Phases of a slice, in the order the server side moves through them.
const WARM: u8 = 0;
const TIMED: u8 = 1;
const DRAIN: u8 = 2;
/// The client has every frame it sent back.
const DONE: u8 = 3;
/// A side failed; the other stops.
const FAILED: u8 = 4;

/// What the two lcores of a slice share.
struct SliceControl {
    phase: AtomicU8,
    barrier: SpinBarrier,
}

impl SliceControl {
    /// Moves from phase `from` to `to`; `Err` if the other side failed.
    fn advance(&self, from: u8, to: u8) -> Result<(), String> {
        // Release: the side's work so far is visible to the other side
        // once it sees the new phase.
        self.phase
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
            .map_err(|_| "the other side of the pair failed".to_owned())
    }
}

impl SluicePair {
    /// Opens and starts the case's ports on a socket of their own and waits
    /// until a frame has gone round.
    pub fn open(case: VmCase, cpus: (usize, usize)) -> Result<SluicePair, String> {
        let dir = SocketDir::new()?;
        let specs = (case.specs)(&dir.socket());
        let mut pools = Vec::new();
        let mut ports = Vec::new();
        for (side, spec) in ["server", "client"].iter().zip(&specs) {
            // A `virtio:` port's backend maps the buffers its Rx queue
            // posts: its pool is shared. Every pool is on ordinary pages,
            // as testpmd's memory is (`--no-huge`), so both pairs run on
            // the same kind of memory.
            let sharing = sluice::driver::pool_sharing([spec]);
            let config = MbufPoolConfig {
                name: format!("bench-vm-{side}"),
                size: POOL_SIZE,
                cache_size: CACHE,
                hugepages: HugepagePolicy::Never,
                ..Default::default()
            };
            let pool = MbufPool::with_sharing(config, sharing).map_err(|e| e.to_string())?;
            let desc = if spec.starts_with("virtio:") || spec.starts_with("vhost:") {
                VIRTQUEUE_SIZE
            } else {
                DESC
            };
            let config = PortConfig::new(Some(pool.clone()))
                .nb_rxd(desc)
                .nb_txd(desc);
            let mut port =
                sluice::driver::open(spec, config).map_err(|e| format!("{spec}: {e}"))?;
            port.start().map_err(|e| format!("{spec}: {e}"))?;
            ports.push(port);
            pools.push(pool);
        }
        let (Ok(ports), Ok(pools)) = (
            <[Port; 2]>::try_from(ports),
            <[MbufPool; 2]>::try_from(pools),
        ) else {
            unreachable!("two sides");
        };
        let mut pair = SluicePair {
            ports: Some(ports),
            pools,
            cpus,
            connected_errors: 0,
            _dir: dir,
        };
        // One frame round, no window: the link is up once it is back.
        pair.slice(64, 1, Duration::ZERO, Duration::ZERO)?;
        pair.connected_errors = pair.ports.as_ref().map_or(0, errors);
        Ok(pair)
    }

    /// One slice: `population` frames of `size` bytes sent in by the client,
    /// looped for `warm` and then `window`, then drained back to the client.
    /// Returns the server's and the client's window figures.
    pub fn slice(
        &mut self,
        size: u16,
        population: u64,
        warm: Duration,
        window: Duration,
    ) -> Result<[SideWindow; 2], String> {
        let [server, client] = self
            .ports
            .take()
            .ok_or("the ports were lost in an earlier slice")?;
        let hz = sluice::tsc::tsc_hz() as f64;
        let (warm, window) = (
            (warm.as_secs_f64() * hz) as u64,
            (window.as_secs_f64() * hz) as u64,
        );
        let control = Arc::new(SliceControl {
            phase: AtomicU8::new(WARM),
            barrier: SpinBarrier::new(2),
        });
        let frame = udp_frame(size, client.mac(), server.mac());
        let [server_pool, client_pool] = self.pools.clone();
        let server_control = Arc::clone(&control);
        let server_job: Worker<(Port, SideWindow)> = Box::new(move || {
            let mut port = server;
            let r = serve(&mut port, &server_control, warm, window);
            if r.is_err() {
                server_control.phase.store(FAILED, Ordering::Release);
            }
            let r = r.map_err(|e| with_counters(e, "server", &port));
            let r = r.map(|w| (port, w));
            server_pool.flush_local_cache();
            r
        });
        let client_job: Worker<(Port, SideWindow)> = Box::new(move || {
            let mut port = client;
            let r = loop_back(&mut port, &client_pool, &control, &frame, population);
            if r.is_err() {
                control.phase.store(FAILED, Ordering::Release);
            }
            let r = r.map_err(|e| with_counters(e, "client", &port));
            let r = r.map(|w| (port, w));
            client_pool.flush_local_cache();
            r
        });
        let mut out = on_lcores(vec![(self.cpus.0, server_job), (self.cpus.1, client_job)])?;
        let (client, client_window) = out.pop().ok_or("no client result")?;
        let (server, server_window) = out.pop().ok_or("no server result")?;
        self.ports = Some([server, client]);
        Ok([server_window, client_window])
    }

    /// Stops the ports and checks that every frame was counted on both
    /// sides and every buffer is home; returns the frames the client sent.
    pub fn finish(mut self) -> Result<u64, String> {
        let [mut server, mut client] = self
            .ports
            .take()
            .ok_or("the ports were lost in a failed slice")?;
        let (s, c) = (server.stats(), client.stats());
        let new_errors =
            s.rx_errors + s.tx_errors + c.rx_errors + c.tx_errors - self.connected_errors;
        server.stop();
        client.stop();
        drop((server, client));
        let counted = format!(
            "client sent {} received {}, server received {} sent {}, {new_errors} errors once \
             connected",
            c.tx_packets, c.rx_packets, s.rx_packets, s.tx_packets
        );
        if c.tx_packets != c.rx_packets
            || s.rx_packets != c.tx_packets
            || s.tx_packets != s.rx_packets
            || new_errors != 0
        {
            return Err(format!("frames not all accounted for: {counted}"));
        }
        for (side, pool) in ["server", "client"].iter().zip(&self.pools) {
            if !pool.is_full() {
                return Err(format!("the {side}'s mbuf pool is not full after the run"));
            }
        }
        Ok(c.tx_packets)
    }
}

/// `error`, then the `side` port's counters (its nonzero xstats too).
fn with_counters(error: String, side: &str, port: &Port) -> String {
    let s = port.stats();
    let xstats: Vec<String> = port
        .xstats()
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    format!(
        "{error} ({side} port: rx {} tx {}, errors rx {} tx {}; {})",
        s.rx_packets,
        s.tx_packets,
        s.rx_errors,
        s.tx_errors,
        xstats.join(", ")
    )
}

fn port_error(e: PortError) -> String {
    e.to_string()
}

/// The stream looping queue 0's frames back out of `port`.
fn looping_stream(port: &mut Port) -> Result<Stream<'_>, String> {
    let mac = port.mac();
    let (rx, tx) = port.queues_mut().map_err(port_error)?;
    let (Some(rx), Some(tx)) = (rx.first_mut(), tx.first_mut()) else {
        return Err("the port has no queue".into());
    };
    Ok(Stream::new(
        0,
        0,
        rx.as_mut(),
        tx.as_mut(),
        mac,
        MacAddr::BROADCAST,
    ))
}

/// The server side: loops frames back through warm-up and the timed
/// window (which it times), then until the client has all its frames back.
fn serve(
    port: &mut Port,
    control: &SliceControl,
    warm: u64,
    window: u64,
) -> Result<SideWindow, String> {
    let mut stream = looping_stream(port)?;
    let mut burst: Burst<64> = Burst::new();
    let mut stall = Stall::new("server side");
    let mut figures = SideWindow::default();
    control.barrier.wait()?;
    let start = rdtsc_ordered();
    let (timed_at, end_at) = (start + warm, start + warm + window);
    let mut phase = WARM;
    let mut window_start = start;
    loop {
        let t0 = rdtsc();
        match phase {
            WARM if t0 >= timed_at => {
                control.advance(WARM, TIMED)?;
                phase = TIMED;
                window_start = t0;
            }
            TIMED if t0 >= end_at => {
                control.advance(TIMED, DRAIN)?;
                phase = DRAIN;
                figures.ticks = t0 - window_start;
            }
            DRAIN => match control.phase.load(Ordering::Acquire) {
                DONE => return Ok(figures),
                FAILED => return Err("the client side failed".into()),
                _ => {}
            },
            _ => {}
        }
        let moved = poll(Io, &mut stream, burst.capped(BURST), 0);
        if moved.dropped != 0 {
            return Err(format!(
                "server side: {} frames dropped on Tx",
                moved.dropped
            ));
        }
        if moved.rx > 0 {
            if phase == TIMED {
                figures.busy += rdtsc() - t0;
                figures.packets += moved.rx as u64;
            }
            stall.progressed();
        } else {
            stall.failed()?;
        }
    }
}

/// The client side: sends `population` copies of `frame` in, loops back what
/// comes until the server ends the window, then receives until every frame
/// it sent is back.
fn loop_back(
    port: &mut Port,
    pool: &MbufPool,
    control: &SliceControl,
    frame: &[u8],
    population: u64,
) -> Result<SideWindow, String> {
    let counters = port.counters();
    control.barrier.wait()?;
    await_link(port, &counters)?;
    send_in(port, &counters, pool, frame, population)?;
    let mut stream = looping_stream(port)?;
    let mut burst: Burst<64> = Burst::new();
    let mut stall = Stall::new("client side");
    let mut figures = SideWindow::default();
    let mut window_start = None;
    loop {
        let phase = control.phase.load(Ordering::Acquire);
        match phase {
            TIMED if window_start.is_none() => window_start = Some(rdtsc()),
            DRAIN => {
                figures.ticks = window_start.map_or(0, |s| rdtsc() - s);
                break;
            }
            FAILED => return Err("the server side failed".into()),
            _ => {}
        }
        let t0 = rdtsc();
        let moved = poll(Io, &mut stream, burst.capped(BURST), 0);
        if moved.dropped != 0 {
            return Err(format!(
                "client side: {} frames dropped on Tx",
                moved.dropped
            ));
        }
        if moved.rx > 0 {
            if phase == TIMED {
                figures.busy += rdtsc() - t0;
                figures.packets += moved.rx as u64;
            }
            stall.progressed();
        } else {
            stall.failed()?;
        }
    }
    // Everything sent comes back: receive and free until the counts agree.
    loop {
        let (received, sent) = (counters.rx[0].packets.get(), counters.tx[0].packets.get());
        if received == sent {
            break;
        }
        if received > sent {
            return Err(format!(
                "client side: {received} frames received, {sent} sent"
            ));
        }
        if control.phase.load(Ordering::Acquire) == FAILED {
            return Err("the server side failed".into());
        }
        let got = stream.rx.rx_burst(burst.capped(BURST));
        burst.clear();
        if got > 0 {
            stall.progressed();
        } else {
            stall.failed()?;
        }
    }
    control.advance(DRAIN, DONE)?;
    Ok(figures)
}

/// Waits, for at most [`LINK_TIMEOUT`], until `port` has connected once
/// (its `link_ups` xstat, for drivers that count it), then polls its Rx
/// queue 0 once: a `virtio:` port posts its receive buffers there, so the
/// first frames back find room.
fn await_link(port: &mut Port, counters: &PortCounters) -> Result<(), String> {
    let deadline = Instant::now() + LINK_TIMEOUT;
    while counters.xstats.get("link_ups") == Some(0) {
        if Instant::now() > deadline {
            return Err(format!(
                "the link did not come up in {} s",
                LINK_TIMEOUT.as_secs()
            ));
        }
        thread::sleep(Duration::from_millis(1));
    }
    let mut burst: Burst<64> = Burst::new();
    port.rx_queue(0)
        .map_err(port_error)?
        .rx_burst(burst.capped(BURST));
    Ok(())
}

/// Sends `n` copies of `frame` out of `port`'s Tx queue 0, counted by the
/// port as sent; while the link is not up (the port takes none, or drops
/// them as not ready), tries again every millisecond, for at most
/// [`LINK_TIMEOUT`].
fn send_in(
    port: &mut Port,
    counters: &PortCounters,
    pool: &MbufPool,
    frame: &[u8],
    n: u64,
) -> Result<(), String> {
    let sent = || counters.tx[0].packets.get();
    let base = sent();
    let deadline = Instant::now() + LINK_TIMEOUT;
    let tx = port.tx_queue(0).map_err(port_error)?;
    let mut burst: Burst<64> = Burst::new();
    loop {
        let before = sent() - base;
        if before >= n {
            return Ok(());
        }
        if burst.is_empty() {
            for _ in 0..(n - before).min(BURST as u64) {
                let m = pool.alloc_from_slice(frame).map_err(|e| e.to_string())?;
                if burst.push(m).is_err() {
                    break;
                }
            }
        }
        tx.tx_burst(&mut burst);
        if sent() - base == before {
            if Instant::now() > deadline {
                return Err(format!(
                    "the link did not come up in {} s ({before} of {n} frames sent)",
                    LINK_TIMEOUT.as_secs()
                ));
            }
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// DPDK's pair of a case: two testpmd processes on a socket of their own.
struct DpdkPair {
    server: Testpmd,
    client: Testpmd,
    _dir: SocketDir,
}

impl DpdkPair {
    /// Starts the server's testpmd, then the client's, and waits until both
    /// links are up.
    fn start(case: VmCase, cpus: (usize, usize)) -> Result<DpdkPair, String> {
        let dir = SocketDir::new()?;
        let [server_vdev, client_vdev] = (case.vdevs)(&dir.socket());
        let mut server = Testpmd::spawn("server", cpus.0, &server_vdev)?;
        let mut client = Testpmd::spawn("client", cpus.1, &client_vdev)?;
        let deadline = Instant::now() + DPDK_LINK_TIMEOUT;
        server.await_link(deadline)?;
        client.await_link(deadline)?;
        Ok(DpdkPair {
            server,
            client,
            _dir: dir,
        })
    }

    /// One slice: the server forwarding, the client sending its population
    /// in, a warm-up, then the timed window. Returns the server's and the
    /// client's figures.
    fn slice(&mut self, size: u16, plan: Plan) -> Result<[WindowFigures; 2], String> {
        // The server first: its start flushes its Rx queue, which must not
        // take the client's first frames.
        self.server.start(size, None)?;
        self.client
            .start(size, Some((POPULATION / BURST as u64) as u32))?;
        thread::sleep(plan.warm);
        self.server.open_window()?;
        self.client.open_window()?;
        self.server.window_opened()?;
        self.client.window_opened()?;
        thread::sleep(plan.window);
        self.server.close_window()?;
        self.client.close_window()?;
        Ok([self.server.window_closed()?, self.client.window_closed()?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each Sluice pair whose drivers exist, end to end with small windows:
    /// every frame the client sent came back through the server, every
    /// slice's population went round at least once, pools full.
    #[test]
    fn sluice_pairs_loop_every_frame_and_return_every_buffer() {
        let cpus = sluice::lcore::available_cpus();
        let pair_cpus = (cpus[0], cpus[1 % cpus.len()]);
        for case in CASES {
            if case.drivers.iter().any(|d| !DRIVERS.contains(d)) {
                continue;
            }
            let mut pair =
                SluicePair::open(case, pair_cpus).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let mut slices = 0;
            for size in SIZES {
                for _ in 0..2 {
                    let [server, client] = pair
                        .slice(size, 64, Duration::from_millis(1), Duration::from_millis(5))
                        .unwrap_or_else(|e| panic!("{} {size}B: {e}", case.name));
                    assert!(server.busy >= server.packets && client.busy >= client.packets);
                    slices += 1;
                }
            }
            let sent = pair
                .finish()
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            // The probe frame, then each slice's 64 frames at least once.
            assert!(sent > 64 * slices, "{}: {sent} frames sent", case.name);
        }
    }

    /// DPDK's pairings through testpmd's prompt: both sides answer, and a
    /// slice yields parsed figures from each. Skipped without testpmd
    /// (a failure under CI).
    #[test]
    fn dpdk_pairs_report_a_slice_from_both_sides() {
        let cpus = sluice::lcore::available_cpus();
        let pair_cpus = (cpus[0], cpus[1 % cpus.len()]);
        for case in CASES {
            if let Some(why) = super::super::testpmd::missing(&case.pmds) {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "{why} under CI"
                );
                eprintln!("skipped: {why}");
                continue;
            }
            let mut pair =
                DpdkPair::start(case, pair_cpus).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let plan = Plan {
                rounds: 1,
                warm: Duration::from_millis(50),
                window: Duration::from_millis(200),
            };
            for size in SIZES {
                let [server, client] = pair
                    .slice(size, plan)
                    .unwrap_or_else(|e| panic!("{} {size}B: {e}", case.name));
                for side in [server, client] {
                    assert!(
                        side.rx_pps >= 0.0 && side.cycles_per_packet > 0.0,
                        "{side:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn rows_take_medians_and_per_round_ratios() {
        let side = |packets, busy| SideWindow {
            packets,
            busy,
            ticks: sluice::tsc::tsc_hz(),
        };
        let figures = |pps: f64, cycles| WindowFigures {
            rx_pps: pps,
            cycles_per_packet: cycles,
        };
        let rounds = Rounds {
            sluice: vec![
                [side(2_000_000, 200_000_000), side(2_000_000, 100_000_000)],
                [side(4_000_000, 200_000_000), side(4_000_000, 400_000_000)],
            ],
            dpdk: vec![
                [figures(1e6, 200.0), figures(1e6, 50.0)],
                [figures(4e6, 100.0), figures(4e6, 50.0)],
            ],
        };
        let row = rounds.row("memif io (memif peer)", 64);
        assert_eq!(row.case, "memif io (memif peer) 64B");
        assert_eq!(row.rounds, 2);
        let s = row.sluice.unwrap();
        assert!((s.mpps - 3.0).abs() < 1e-9, "{s:?}");
        assert!((s.cycles_per_packet - 75.0).abs() < 1e-9, "{s:?}");
        assert!((s.peer_cycles_per_packet - 75.0).abs() < 1e-9, "{s:?}");
        assert_eq!((s.mpps_min, s.mpps_max), (2.0, 4.0));
        let d = row.dpdk.unwrap();
        assert_eq!((d.mpps, d.cycles_per_packet), (2.5, 150.0));
        // Per round: 2/1 and 4/4 Mpps; 100/200 and 50/100 cycles.
        assert!((row.mpps_ratio.unwrap() - 1.5).abs() < 1e-9);
        assert!((row.cycles_ratio.unwrap() - 0.5).abs() < 1e-9);
        let only_dpdk = Rounds {
            sluice: Vec::new(),
            dpdk: rounds.dpdk.clone(),
        }
        .row("vhost io (virtio peer)", 1500);
        assert!(only_dpdk.sluice.is_none() && only_dpdk.mpps_ratio.is_none());
        let json = serde_json::to_string(&only_dpdk).unwrap();
        assert!(
            json.contains("\"case\":\"vhost io (virtio peer) 1500B\""),
            "{json}"
        );
        assert!(json.contains("\"sluice\":null"), "{json}");
    }
}
