//! `sluice bench mpwqe`: multi-packet Tx descriptors against one WQE per
//! packet, in one run (`sluice::driver::soft::wqe`).
//!
//! # Cases
//! Groups of workload × packet size × traffic, each measured with three Tx
//! modes of the `soft` port (`txmode=wqe`: one 64-byte WQE per packet;
//! `txmode=mpwqe`: packets share multi-packet WQEs; and the same with
//! packets of up to 128 bytes inlined, `inline_mpw=128`):
//! - workloads: `txonly` — one port, the forwarding core allocates 32
//!   mbufs, writes each one's 42-byte Ethernet/IPv4/UDP header (as testpmd's
//!   txonly does) and sends them; `io` — two ports cabled to the built-in
//!   tester, received bursts sent to the other port, both ways;
//! - sizes 64, 128, 256, 512 and 1500 bytes;
//! - traffic: one flow, no offload flag; or 1024 flows with mixed offload
//!   flags — each flow has one of three classes (none, IPv4 checksum,
//!   IPv4 + UDP checksums; from its RSS hash for `io`, its number for
//!   `txonly`), so consecutive packets mostly differ and MPWQE sessions are
//!   short: the worst case for sharing an offload segment.
//!
//! # Figures
//! - cycles per packet on the forwarding core: the timed region's TSC ticks
//!   minus what the inline device model reports spending inside the queue
//!   calls (`device_cycles`), per packet sent: driver and application work
//!   (alloc, header writes and free for `txonly`; Rx and Tx for `io`);
//! - descriptor bytes and total bus bytes per packet, from the ports' bus
//!   xstats over the timed slices (per-transaction overhead included; for
//!   `io` the Rx side, the same in both modes, is in the total too);
//! - the bus utilisation of a PCIe gen3 x8 link (the busier direction) at a
//!   fixed packet rate: the line rate of a 25 Gb/s Ethernet port for the
//!   size (64 bytes: 37.2 Mpps);
//! - the ratio to the regular WQE path (cycles, bus bytes).
//!
//! # Method
//! The three modes of a group stay up and are measured interleaved (the
//! order rotating through the six permutations, an untimed warm-up slice
//! before each timed one); cycles and Mpps are medians over rounds, the cycle ratio is
//! the median of per-round ratios. At the end, every packet is accounted
//! for: the io testers' reports must be clean (nothing lost, reordered or
//! corrupt), no port may count an error, and every pool is full again.

use std::sync::Arc;

use serde::Serialize;
use sluice::counter::Counter;
use sluice::driver::soft::bus::{BusBytes, DEFAULT_LINK, Link};
use sluice::mbuf::{Burst, BurstSlice, MbufPool, MbufPoolConfig, ol};
use sluice::net::MacAddr;
use sluice::port::{Offloads, Port, PortConfig, PortCounters};
use sluice::tester::Tester;
use sluice::tsc::{self, rdtsc_ordered};

use sluice_bench::rounds::{interleave, rounds};
use sluice_bench::stats::{Spread, median, ratios};

use super::{BenchResult, Ctx, Selection, Stall, emit, on_lcore};
use crate::app::io::engine::udp_frame;

/// Packets per burst.
const BURST: usize = 32;
/// Descriptors per queue (Tx: blocks).
const DESC: u16 = 1024;
/// Mbufs per pool.
const POOL_SIZE: u32 = 8191;
/// Per-lcore mempool cache.
const CACHE: u32 = 256;
/// Packet sizes.
pub const SIZES: [u16; 5] = [64, 128, 256, 512, 1500];
/// Flows of the mixed traffic.
const FLOWS: u32 = 1024;
/// Packets timed per mode and group by default (all rounds together).
const DEFAULT_OPS: u64 = 1 << 21;
/// Fewest packets in a timed slice.
const MIN_SLICE: u64 = 1 << 14;
/// Most rounds per group.
const MAX_ROUNDS: u64 = 8;
/// Untimed packets before each timed slice.
const WARM: u64 = 1 << 13;
/// The Ethernet line rate the utilisation is given at, in bits per second.
const LINE_BPS: f64 = 25e9;
/// A Tx mode measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    /// Its name in the table.
    pub name: &'static str,
    /// `txmode=`.
    pub txmode: &'static str,
    /// `inline_mpw=`.
    pub inline_mpw: u16,
}

/// The Tx modes, regular first (the reference).
pub const MODES: [Mode; 3] = [
    Mode {
        name: "wqe",
        txmode: "wqe",
        inline_mpw: 0,
    },
    Mode {
        name: "mpwqe",
        txmode: "mpwqe",
        inline_mpw: 0,
    },
    Mode {
        name: "mpwqe inline",
        txmode: "mpwqe",
        inline_mpw: INLINE_MPW,
    },
];

/// `inline_mpw` of the third mode: packets up to this size are copied into
/// the MPWQE.
const INLINE_MPW: u16 = 128;

/// What the forwarding core does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Generated packets sent on one port.
    TxOnly,
    /// Received packets sent on the other port, both ways.
    Io,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::TxOnly => "txonly",
            Workload::Io => "io",
        }
    }
}

/// Modes measured together and compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The workload.
    pub workload: Workload,
    /// Packet size in bytes.
    pub size: u16,
    /// 1024 flows with mixed offload flags (else one flow, none).
    pub mixed: bool,
}

impl Group {
    fn name(&self) -> String {
        format!(
            "{} {}B {}",
            self.workload.name(),
            self.size,
            if self.mixed { "mixed" } else { "1 flow" }
        )
    }

    fn flows(&self) -> u32 {
        if self.mixed { FLOWS } else { 1 }
    }

    /// Packets per second at the Ethernet line rate (preamble and gap
    /// included).
    fn rate_pps(&self) -> f64 {
        LINE_BPS / ((self.size as f64 + 20.0) * 8.0)
    }
}

/// The groups of a selection.
pub fn groups(sel: Selection) -> Vec<Group> {
    let mut v = Vec::new();
    for workload in [Workload::TxOnly, Workload::Io] {
        for size in SIZES {
            for mixed in [false, true] {
                let g = Group {
                    workload,
                    size,
                    mixed,
                };
                if sel == Selection::Full || (size == 64 && !mixed) {
                    v.push(g);
                }
            }
        }
    }
    v
}

/// One mode's figures in one group.
#[derive(Serialize, Debug, Clone)]
pub struct MpwqeResult {
    /// The usual fields (`bench`, `case`, `cycles_per_op`, `mops`, ...).
    #[serde(flatten)]
    pub base: BenchResult,
    /// `txonly` or `io`.
    pub workload: Workload,
    /// Packet size in bytes.
    pub size: u16,
    /// Flows.
    pub flows: u32,
    /// Mixed offload flags.
    pub mixed_offloads: bool,
    /// `wqe` or `mpwqe`.
    pub txmode: &'static str,
    /// Longest packet inlined into an MPWQE (0: none).
    pub inline_mpw: u16,
    /// Descriptor (and WQE) fetch bytes per packet.
    pub desc_bytes_per_pkt: f64,
    /// All bus bytes per packet, both directions.
    pub bus_bytes_per_pkt: f64,
    /// Toward the device.
    pub to_device_bytes_per_pkt: f64,
    /// From the device.
    pub from_device_bytes_per_pkt: f64,
    /// The packet rate the utilisation is given at (25 GbE line rate).
    pub util_rate_mpps: f64,
    /// The link.
    pub link: String,
    /// The busier direction's share of the link at that rate.
    pub util: f64,
    /// Tx ring blocks per packet (WQE size).
    pub blocks_per_pkt: f64,
    /// Packets sent in MPWQEs, of all sent.
    pub mpwqe_share: f64,
    /// Median over rounds of this mode's cycles per packet over `wqe`'s.
    pub cycles_ratio_vs_wqe: f64,
    /// Bus bytes per packet over `wqe`'s.
    pub bus_ratio_vs_wqe: f64,
    /// Rounds.
    pub rounds: usize,
    /// The best round's cycles per packet.
    pub cycles_min: f64,
    /// The worst round's.
    pub cycles_max: f64,
}

/// Runs the bench: every group of `sel`.
pub fn run(ctx: &mut Ctx, sel: Selection) {
    let ops = ctx.ops(DEFAULT_OPS);
    let rounds = rounds(ops, MIN_SLICE, MAX_ROUNDS);
    let slice = (ops / rounds).max(1);
    let notes = vec![
        format!(
            "soft ports, one core, burst {BURST}, {DESC} descriptors (Tx: 64-byte blocks), \
             mempool cache {CACHE}; the device runs inline and its own cycles are excluded. \
             txonly: 32 mbufs allocated, 42 header bytes written, sent, freed on completion; \
             io: two ports on the tester, forwarded both ways."
        ),
        "Modes: wqe = one 64-byte WQE per packet (18 header bytes inlined, a data segment for \
         the rest); mpwqe = multi-packet WQEs (one control and offload segment per session, a \
         16-byte data segment per packet); mpwqe inline = the same, packets of up to 128 \
         bytes copied into the WQE (inline_mpw=128). mixed = 1024 flows, each with one of three offload \
         classes (none, IPv4 checksum, IPv4+UDP checksums): sessions break when the class \
         changes."
            .to_owned(),
        format!(
            "Bus bytes include a 24-byte overhead per transaction; util = busier direction of a \
             PCIe {DEFAULT_LINK} link at the 25 GbE line rate of the size. Interleaved: \
             {rounds} round(s) of {slice} packets per mode, the order rotating; cycles are \
             medians over rounds, 'x wqe' the median of per-round ratios (cycles) or the ratio of bytes."
        ),
    ];
    ctx.title("mpwqe (multi-packet Tx WQEs vs one WQE per packet)", &notes);
    ctx.note(&super::fwd_vector::path_note());
    let groups = groups(sel);
    // The case column fits the longest case name ("txonly 1500B 1 flow,
    // mpwqe inline").
    let width = groups
        .iter()
        .flat_map(|g| MODES.iter().map(|&mode| case_name(*g, mode).len()))
        .fold("case".len(), usize::max);
    if !ctx.json {
        emit(&format!(
            "{:<width$} {:>10} {:>6} {:>7} {:>7} {:>6} {:>11} {:>7}  detail",
            "case", "cycles/pkt", "x wqe", "desc B", "bus B", "x wqe", "util@Mpps", "blk/pkt"
        ));
    }
    for g in groups {
        let cpu = ctx.main_cpu();
        match on_lcore(cpu, move || measure_group(g, rounds as usize, slice)) {
            Ok(rows) => rows.iter().for_each(|r| print_row(ctx, r, width)),
            Err(e) => ctx.report(&g.name(), Err(e)),
        }
    }
}

/// Prints one row, the case name padded to `width`.
fn print_row(ctx: &Ctx, r: &MpwqeResult, width: usize) {
    if ctx.json_row(&r.base.case, r) {
        return;
    }
    emit(&format!(
        "{:<width$} {:>10.1} {:>6.3} {:>7.1} {:>7.1} {:>6.3} {:>5.1}%@{:<5.1} {:>7.2}  min-max {:.1}-{:.1}, \
         {:.0}% in MPWQEs",
        r.base.case,
        r.base.cycles_per_op,
        r.cycles_ratio_vs_wqe,
        r.desc_bytes_per_pkt,
        r.bus_bytes_per_pkt,
        r.bus_ratio_vs_wqe,
        100.0 * r.util,
        r.util_rate_mpps,
        r.blocks_per_pkt,
        r.cycles_min,
        r.cycles_max,
        100.0 * r.mpwqe_share,
    ));
}

/// One mode's ports.
struct ModePorts {
    pool: MbufPool,
    ports: Vec<Port>,
    counters: Vec<Arc<PortCounters>>,
    tester: Arc<Tester>,
    clock: Vec<Arc<Counter>>,
    /// txonly: the header written into each packet.
    header: Box<[u8]>,
    /// Offload flags by flow (mixed traffic).
    classes: Box<[u64]>,
}

/// The three offload classes.
const CLASSES: [u64; 3] = [
    0,
    ol::TX_IPV4 | ol::TX_IP_CKSUM,
    ol::TX_IPV4 | ol::TX_IP_CKSUM | ol::TX_UDP_CKSUM,
];

impl ModePorts {
    fn open(mode: Mode, g: Group) -> Result<ModePorts, String> {
        let pool = MbufPool::new(MbufPoolConfig {
            name: format!("bench-mpwqe-{}", mode.name),
            size: POOL_SIZE,
            cache_size: CACHE,
            ..Default::default()
        })
        .map_err(|e| format!("mbuf pool: {e}"))?;
        // Unique in the process (tests run groups at once).
        let tname = super::unique_name("bench_mpwqe");
        let nports = if g.workload == Workload::Io { 2 } else { 1 };
        let mut ports = Vec::new();
        for i in 0..nports {
            let spec = format!(
                "soft:tester={tname},gen=udp,flows={},size={},device=inline,txmode={},\
                 inline_mpw={},link={DEFAULT_LINK}",
                g.flows(),
                g.size,
                mode.txmode,
                mode.inline_mpw
            );
            let mut config = PortConfig::new(Some(pool.clone()))
                .port_id(i as u16)
                .nb_rxd(DESC)
                .nb_txd(DESC);
            config.tx_offloads |= Offloads::CHECKSUMS;
            if g.mixed {
                config.rx_offloads |= Offloads::RSS_HASH;
            }
            let mut port = sluice::driver::open(&spec, config).map_err(|e| e.to_string())?;
            port.start().map_err(|e| format!("{spec}: {e}"))?;
            ports.push(port);
        }
        let tester = sluice::tester::attach(&tname, None)?;
        if g.workload == Workload::TxOnly {
            // Nothing is received: the generator stays quiet.
            tester.pause(true);
        }
        let counters: Vec<_> = ports.iter().map(Port::counters).collect();
        let clock = counters
            .iter()
            .flat_map(|c| c.xstats.counters("device_cycles"))
            .collect();
        // A fixed spread of classes over flows (a multiplicative hash).
        let classes = (0..FLOWS)
            .map(|f| CLASSES[(f.wrapping_mul(0x9e37_79b9) >> 30) as usize % 3])
            .collect();
        let header = udp_frame(
            g.size,
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
        );
        Ok(ModePorts {
            pool,
            ports,
            counters,
            tester,
            clock,
            header,
            classes,
        })
    }

    fn device_cycles(&self) -> u64 {
        self.clock.iter().map(|c| c.get()).sum()
    }

    /// Bus bytes and MPWQE counters of every port.
    fn snapshot(&self) -> (BusBytes, [u64; 3]) {
        let mut b = BusBytes::default();
        let mut m = [0u64; 3];
        for c in &self.counters {
            let x = c.xstats.snapshot();
            if let Some(bb) = BusBytes::from_xstats(&x) {
                b = b.add(&bb);
            }
            let get = |n: &str| x.iter().find(|(k, _)| k == n).map_or(0, |&(_, v)| v);
            m[0] += get("tx_mpwqe_pkts");
            m[1] += get("tx_wqe_pkts");
            m[2] += get("tx_mpwqe_blks");
        }
        (b, m)
    }

    /// Sends at least `n` packets (whole bursts); returns how many. `k`
    /// counts txonly's packets (their flow).
    fn run(&mut self, g: Group, n: u64, burst: &mut Burst<64>, k: &mut u32) -> Result<u64, String> {
        match g.workload {
            Workload::TxOnly => self.txonly(g, n, burst, k),
            Workload::Io => self.io(g, n, burst),
        }
    }

    #[inline(never)]
    fn txonly(
        &mut self,
        g: Group,
        n: u64,
        burst: &mut Burst<64>,
        k: &mut u32,
    ) -> Result<u64, String> {
        let size = g.size as usize;
        let hl = 42.min(size);
        let tx = self.ports[0].tx_queue(0).map_err(|e| e.to_string())?;
        let mut moved = 0u64;
        let mut stall = Stall::new("txonly core");
        while moved < n {
            let b: &mut BurstSlice = burst.capped(BURST);
            if self.pool.alloc_bulk(b, BURST).is_err() {
                stall.failed()?;
                continue;
            }
            for m in b.iter_mut() {
                let d = m.append(size).map_err(|e| e.to_string())?;
                d[..hl].copy_from_slice(&self.header[..hl]);
                if g.mixed {
                    m.set_ol_flags(self.classes[(*k & (FLOWS - 1)) as usize])
                        .map_err(|e| e.to_string())?;
                    *k = k.wrapping_add(1);
                }
            }
            while !b.is_empty() {
                if tx.tx_burst(b) == 0 {
                    stall.failed()?;
                } else {
                    stall.progressed();
                }
            }
            moved += BURST as u64;
        }
        Ok(moved)
    }

    /// io: polls each direction once (receive, set the flags, send all);
    /// returns the packets forwarded.
    #[inline(always)]
    fn poll_io(&mut self, g: Group, burst: &mut Burst<64>) -> Result<usize, String> {
        let [a, b] = &mut self.ports[..] else {
            return Err("two ports are needed".into());
        };
        let (arx, atx) = a.queues_mut().map_err(|e| e.to_string())?;
        let (brx, btx) = b.queues_mut().map_err(|e| e.to_string())?;
        let mut got = 0;
        for (rx, tx) in [(&mut arx[0], &mut btx[0]), (&mut brx[0], &mut atx[0])] {
            let b: &mut BurstSlice = burst.capped(BURST);
            let r = rx.rx_burst(b);
            if r == 0 {
                continue;
            }
            if g.mixed {
                for m in b.iter_mut() {
                    let f = self.classes[(m.rss_hash() & (FLOWS - 1)) as usize];
                    m.set_ol_flags(f).map_err(|e| e.to_string())?;
                }
            }
            let mut tries = 0;
            while !b.is_empty() {
                if tx.tx_burst(b) == 0 {
                    tries += 1;
                    if tries > 1_000_000 {
                        return Err(format!("{} packets not taken by Tx", b.len()));
                    }
                }
            }
            got += r;
        }
        Ok(got)
    }

    #[inline(never)]
    fn io(&mut self, g: Group, n: u64, burst: &mut Burst<64>) -> Result<u64, String> {
        let mut moved = 0u64;
        let mut stall = Stall::new("io core");
        while moved < n {
            let got = self.poll_io(g, burst)?;
            if got == 0 {
                stall.failed()?;
            } else {
                stall.progressed();
                moved += got as u64;
            }
        }
        Ok(moved)
    }

    /// io: stops the tester, forwards what is in flight, checks its report;
    /// then every port stops and the pool must be full.
    fn finish(mut self, g: Group, burst: &mut Burst<64>) -> Result<(), String> {
        if g.workload == Workload::Io {
            // No new frames: forward what is in flight until 256 polls in a
            // row find nothing.
            self.tester.pause(true);
            let mut idle = 0;
            while idle < 256 {
                if self.poll_io(g, burst)? == 0 {
                    idle += 1;
                } else {
                    idle = 0;
                }
            }
            let r = self.tester.report();
            if !r.is_clean() || r.received != r.sent {
                return Err(format!("the tester report is not clean: {r}"));
            }
        }
        for (i, c) in self.counters.iter().enumerate() {
            let s = c.stats();
            let wqe_err = c.xstats.get("device_wqe_errors").unwrap_or(0);
            if s.rx_missed + s.rx_errors + s.tx_errors + wqe_err != 0 {
                return Err(format!(
                    "port {i}: rx_missed {}, rx errors {}, tx errors {}, WQE errors {wqe_err}",
                    s.rx_missed, s.rx_errors, s.tx_errors
                ));
            }
        }
        self.ports.iter_mut().for_each(Port::stop);
        self.ports.clear();
        self.pool.flush_local_cache();
        if !self.pool.is_full() {
            return Err("the mbuf pool is not full after the run".into());
        }
        Ok(())
    }
}

/// What one mode measured over its timed slices.
#[derive(Debug, Default)]
struct ModeSlices {
    cycles: Vec<f64>,
    mpps: Vec<f64>,
    packets: u64,
    bus: BusBytes,
    /// MPWQE packets, regular WQE packets, MPWQE blocks.
    wqe: [u64; 3],
}

/// Measures both modes of `g`, interleaved; on the calling lcore.
fn measure_group(g: Group, rounds: usize, slice: u64) -> Result<Vec<MpwqeResult>, String> {
    let mut all_ports = Vec::with_capacity(MODES.len());
    for mode in MODES {
        all_ports.push(ModePorts::open(mode, g).map_err(|e| format!("{}: {e}", mode.name))?);
    }
    let mut slices_of: Vec<ModeSlices> = MODES.iter().map(|_| ModeSlices::default()).collect();
    let mut burst: Burst<64> = Burst::new();
    let mut k = 0u32;
    for (i, mode_ports) in all_ports.iter_mut().enumerate() {
        mode_ports
            .run(g, 4 * WARM, &mut burst, &mut k)
            .map_err(|e| format!("{}: {e}", MODES[i].name))?;
    }
    interleave(rounds, MODES.len(), |_, i| {
        let mode_ports = &mut all_ports[i];
        let err = |e: String| format!("{}: {e}", MODES[i].name);
        mode_ports.run(g, WARM, &mut burst, &mut k).map_err(err)?;
        let (bus0, m0) = mode_ports.snapshot();
        let dev0 = mode_ports.device_cycles();
        let t0 = rdtsc_ordered();
        let packets = mode_ports.run(g, slice, &mut burst, &mut k).map_err(err)?;
        let t1 = rdtsc_ordered();
        let dev = mode_ports.device_cycles().saturating_sub(dev0);
        let (bus1, m1) = mode_ports.snapshot();
        let t = &mut slices_of[i];
        let ticks = t1.saturating_sub(t0);
        t.cycles
            .push(ticks.saturating_sub(dev) as f64 / packets.max(1) as f64);
        t.mpps.push(super::mops(packets, ticks));
        t.packets += packets;
        t.bus = t.bus.add(&bus1.since(&bus0));
        for (w, (a, b)) in t.wqe.iter_mut().zip(m1.iter().zip(&m0)) {
            *w += a - b;
        }
        Ok::<(), String>(())
    })?;
    for (i, mode_ports) in all_ports.into_iter().enumerate() {
        mode_ports
            .finish(g, &mut burst)
            .map_err(|e| format!("{}: {e}", MODES[i].name))?;
    }
    Ok(results(g, &slices_of))
}

/// The case name of one mode in one group: "txonly 64B mixed, mpwqe".
fn case_name(g: Group, mode: Mode) -> String {
    format!("{}, {}", g.name(), mode.name)
}

/// The rows of a group.
fn results(g: Group, slices_of: &[ModeSlices]) -> Vec<MpwqeResult> {
    let link = Link::parse(DEFAULT_LINK).expect("a known link");
    let per = |t: &ModeSlices, v: u64| v as f64 / t.packets.max(1) as f64;
    let reference = &slices_of[0];
    let ref_bus = per(reference, reference.bus.total());
    MODES
        .iter()
        .zip(slices_of)
        .map(|(mode, t)| {
            let spread = Spread::of(&t.cycles);
            let case = case_name(g, *mode);
            let mut base = BenchResult::new("mpwqe", case, 1, spread.median, median(&t.mpps));
            base.bulk = Some(BURST);
            base.cache = Some(CACHE);
            base.ops = t.packets;
            base.tsc_hz = tsc::tsc_hz();
            let bus = per(t, t.bus.total());
            let [mpw_pkts, wqe_pkts, mpw_blks] = t.wqe;
            // A regular WQE of a single-segment packet is one block.
            let blocks = mpw_blks + wqe_pkts;
            MpwqeResult {
                base,
                workload: g.workload,
                size: g.size,
                flows: g.flows(),
                mixed_offloads: g.mixed,
                txmode: mode.txmode,
                inline_mpw: mode.inline_mpw,
                desc_bytes_per_pkt: per(t, t.bus.desc),
                bus_bytes_per_pkt: bus,
                to_device_bytes_per_pkt: per(t, t.bus.to_device()),
                from_device_bytes_per_pkt: per(t, t.bus.from_device()),
                util_rate_mpps: g.rate_pps() / 1e6,
                link: link.name(),
                util: t.bus.utilisation(t.packets, g.rate_pps(), &link),
                blocks_per_pkt: blocks as f64 / (mpw_pkts + wqe_pkts).max(1) as f64,
                mpwqe_share: mpw_pkts as f64 / (mpw_pkts + wqe_pkts).max(1) as f64,
                cycles_ratio_vs_wqe: median(&ratios(&t.cycles, &reference.cycles)),
                bus_ratio_vs_wqe: if ref_bus > 0.0 { bus / ref_bus } else { 0.0 },
                rounds: t.cycles.len(),
                cycles_min: spread.min,
                cycles_max: spread.max,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_cover_both_workloads_every_size_and_both_traffics() {
        let all = groups(Selection::Full);
        assert_eq!(all.len(), 2 * SIZES.len() * 2);
        let summary = groups(Selection::Summary);
        assert_eq!(summary.len(), 2);
        assert!(summary.iter().all(|g| g.size == 64 && !g.mixed));
        let g = all[0];
        assert!((g.rate_pps() - 37.2e6).abs() < 0.1e6, "{}", g.rate_pps());
    }

    #[test]
    fn a_short_run_of_each_workload_accounts_for_every_packet() {
        let cpu = sluice::lcore::available_cpus()[0];
        for workload in [Workload::TxOnly, Workload::Io] {
            let g = Group {
                workload,
                size: 64,
                mixed: true,
            };
            let rows = on_lcore(cpu, move || measure_group(g, 2, 4096))
                .unwrap_or_else(|e| panic!("{workload:?}: {e}"));
            assert_eq!(rows.len(), 3);
            let (wqe, mpw) = (&rows[0], &rows[1]);
            assert_eq!((wqe.txmode, mpw.txmode), ("wqe", "mpwqe"));
            assert_eq!((wqe.mpwqe_share, mpw.mpwqe_share), (0.0, 1.0));
            assert_eq!((rows[2].txmode, rows[2].inline_mpw), ("mpwqe", 128));
            assert!(wqe.base.ops >= 2 * 4096 && mpw.base.ops >= 2 * 4096);
            assert!(wqe.bus_bytes_per_pkt > 0.0 && wqe.util > 0.0);
            assert_eq!(wqe.bus_ratio_vs_wqe, 1.0);
            assert_eq!(wqe.blocks_per_pkt, 1.0);
            let v = serde_json::to_value(mpw).unwrap();
            assert_eq!(v["bench"], "mpwqe");
            assert_eq!(v["txmode"], "mpwqe");
            assert!(v["cycles_per_op"].as_f64().unwrap() > 0.0);
        }
    }
}
