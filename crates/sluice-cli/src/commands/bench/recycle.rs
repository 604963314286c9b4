//! `sluice bench recycle`: the three ways a sent buffer gets back to an Rx
//! ring, compared in one run (`sluice::port::recycle`).
//!
//! # Paths
//! - `normal`: `soft` ports with `tx_free=normal`, io engine: the Tx queue
//!   frees completed batches into the lcore's mempool cache, the Rx queue
//!   refills from it;
//! - `zc`: `tx_free=zc`, io engine: the Tx queue writes completed batches
//!   straight into reserved cache slots (zero-copy put); Rx as above;
//! - `recycle`: `tx_free=normal`, the `recycle` engine: before each
//!   `rx_burst` the stream's Tx queue moves its completed batches straight
//!   into its Rx queue's ring (`recycle_mbufs`), no mempool at all.
//!
//! Each with and without the fast-free Tx offload, for one and two port
//! pairs (two and four ports, one forwarding core polling every stream),
//! 64-byte frames, burst 32; `--rxd`, `--txd` and `--cache` set the
//! descriptors per queue and the mempool's per-lcore cache (1024, 1024,
//! 256).
//!
//! # Traffic
//! By default (`--source wire`) each pair is two soft ports cabled to each
//! other by a wire (`wire=NAME`, flow control on: lossless), with 256
//! frames preloaded per direction (`--preload`), so the frames go round and
//! round:
//! port 0 Rx → port 1 Tx → wire → port 0 Rx, and the other way. Every
//! stream is a closed loop, and its Tx queue is exactly where its Rx
//! queue's buffers come back from. The wire is the lightest honest device
//! (a frame copy into a lane and out of it, about 150 cycles a frame); the
//! `--source tester` alternative cables every port to the built-in tester
//! (generated and checked frames, about twice the device cost, and noisier
//! figures). Every frame is accounted: with the wire, the frames still going
//! round at the end are drained and counted (preloaded − dropped); with the
//! tester, it is paused, the pipeline drained and its report must be clean.
//! A Tx queue that takes less than a burst drops the rest (counted, and
//! printed; none are expected with flow control on).
//!
//! # What the gap is made of
//! In this model the mempool cache is cheap (a hot per-lcore cache, 32
//! pointers copied each way); much of what separates the paths is how
//! recently a buffer's header was last touched when the driver touches it
//! again. A recycling Tx queue retires its oldest completed batch at every
//! poll, so a recycled buffer was sent about `--preload` frames earlier on
//! its stream (the completed backlog the preload leaves in the Tx ring);
//! the normal path frees only when fewer than 32 Tx descriptors are free,
//! about `--txd` frames after sending. The ratio to `normal` therefore
//! grows with `--preload`, towards 1 as the preload nears the Tx ring size.
//!
//! # Measurement
//! The device runs inline, in the forwarding core's queue calls; its
//! `device_cycles` xstat is subtracted, so a figure is driver and engine
//! work: TSC ticks of the whole timed region (every poll) per packet
//! received. The forwarding thread is a registered lcore (mempool cache,
//! zero-copy put) pinned to the main CPU.
//!
//! The machine is noisy, so the three paths of one (fast free, pairs)
//! group are measured interleaved: every path's ports stay up, and each
//! round runs every path for one slice (after a short untimed warm-up that
//! brings its rings back into the caches), the order rotating through all
//! six permutations. A path's figure is the median over rounds; its ratio
//! to `normal` is the median of the per-round ratios (each pair of slices
//! measured within a fraction of a second of each other). Within a slice,
//! every iteration (one poll of every stream, some ten µs) is timed, and
//! one that took over 100 µs and ten times the usual — the thread was
//! descheduled or the vCPU taken away, which no driver change would fix —
//! is left out with its packets and device cycles; the share of time left
//! out is printed.

use std::sync::Arc;

use clap::{Args, ValueEnum};
use serde::Serialize;
use sluice::counter::Counter;
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::mempool::Backing;
use sluice::port::{Offloads, Port, PortConfig, PortCounters, RxQueue, TxQueue};
use sluice::tester::Tester;
use sluice::tsc::{self, rdtsc};

use sluice_bench::cut::{CutPolicy, IterationTimes};
use sluice_bench::rounds::{interleave, rounds};
use sluice_bench::stats::{Spread, median, ratios, share};

use super::{BenchResult, Ctx, Selection, Stall, emit, on_lcore};
use crate::app::io::engine::{Fwd, Io, Recycle, Stream, poll};

/// Packets asked per Rx call.
const BURST: usize = 32;
/// Frame length (Ethernet header included, FCS excluded).
const FRAME: u16 = 64;
/// Frames preloaded per direction of a wire pair by default.
const PRELOAD: usize = 256;
/// Packets timed per path and group by default (all rounds together).
const DEFAULT_OPS: u64 = 1 << 25;
/// Most rounds per group.
const MAX_ROUNDS: u64 = 24;
/// Fewest packets in one slice, so a slice is not all warm-up noise.
const MIN_SLICE: u64 = 1 << 17;
/// An iteration (one poll of every stream) longer than 100 µs, and than
/// ten times the usual, did not run on the core all along: it is left out.
const CUT: CutPolicy = CutPolicy::new(100, 10);
/// Polls in a row that found nothing before a drain ends.
const DRAIN_IDLE: u32 = 256;

/// Options of `sluice bench recycle` (an error with the other parts).
#[derive(Args, Debug, Clone, Default)]
pub struct RecycleArgs {
    /// `recycle` only: Rx descriptors per queue, a power of two in
    /// 64..=4096 [default: 1024].
    #[arg(long, value_name = "N", value_parser = parse_desc)]
    pub rxd: Option<u16>,
    /// `recycle` only: Tx descriptors per queue, a power of two in
    /// 64..=4096 [default: 1024].
    #[arg(long, value_name = "N", value_parser = parse_desc)]
    pub txd: Option<u16>,
    /// `recycle` only: the mempool's per-lcore cache size [default: 256].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=512))]
    pub cache: Option<u32>,
    /// `recycle` only: the traffic [default: wire].
    #[arg(long, value_enum)]
    pub source: Option<Source>,
    /// `recycle` only, wire traffic: frames preloaded per direction, at
    /// most half a ring [default: 256].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(32..=2048))]
    pub preload: Option<u16>,
    /// `recycle` only: measure just this path of each group, to profile it
    /// alone (under `perf record`, say); 'x normal' is then empty unless
    /// it is `normal` [default: all three, interleaved].
    #[arg(long, value_enum)]
    pub path: Option<Path>,
}

impl RecycleArgs {
    /// Whether any option was given.
    pub fn any(&self) -> bool {
        self.rxd.is_some()
            || self.txd.is_some()
            || self.cache.is_some()
            || self.source.is_some()
            || self.preload.is_some()
            || self.path.is_some()
    }
}

fn parse_desc(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(n) if (64..=4096).contains(&n) && n.is_power_of_two() => Ok(n),
        _ => Err(format!("'{s}' is not a power of two in 64..=4096")),
    }
}

/// Where the frames come from.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Pairs of soft ports cabled to each other, frames preloaded to go
    /// round.
    Wire,
    /// Every port cabled to the built-in tester (generated, checked).
    Tester,
}

/// The settings of one run.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// Rx descriptors per queue.
    pub rxd: u16,
    /// Tx descriptors per queue.
    pub txd: u16,
    /// Per-lcore mempool cache.
    pub cache: u32,
    /// The traffic.
    pub source: Source,
    /// Wire traffic: frames preloaded per direction (capped at half a
    /// ring).
    pub preload: usize,
    /// The one path measured, or `None` for all of [`PATHS`].
    pub path: Option<Path>,
}

impl Opts {
    /// The options given, defaults for the rest.
    pub fn from_args(a: &RecycleArgs) -> Opts {
        Opts {
            rxd: a.rxd.unwrap_or(1024),
            txd: a.txd.unwrap_or(1024),
            cache: a.cache.unwrap_or(256),
            source: a.source.unwrap_or(Source::Wire),
            preload: a.preload.map_or(PRELOAD, usize::from),
            path: a.path,
        }
    }

    /// The paths measured, `normal` first when it is one of them.
    fn paths(&self) -> Vec<Path> {
        match self.path {
            Some(p) => vec![p],
            None => PATHS.to_vec(),
        }
    }

    /// Frames preloaded per direction of a wire pair (0 with the tester).
    fn preload(&self) -> usize {
        if self.source == Source::Tester {
            return 0;
        }
        self.preload
            .min(self.rxd as usize / 2)
            .min(self.txd as usize / 2)
    }
}

/// How buffers go back to the Rx ring.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Free to the mempool cache, refill from it.
    Normal,
    /// Zero-copy put into the cache, refill from it.
    Zc,
    /// Tx ring → Rx ring.
    Recycle,
}

/// The paths, `normal` first (the others' reference).
pub const PATHS: [Path; 3] = [Path::Normal, Path::Zc, Path::Recycle];

impl Path {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Path::Normal => "normal",
            Path::Zc => "zc",
            Path::Recycle => "recycle",
        }
    }

    fn tx_free(self) -> &'static str {
        match self {
            Path::Zc => "zc",
            _ => "normal",
        }
    }
}

/// A set of paths measured interleaved and compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The fast-free Tx offload on.
    pub fast_free: bool,
    /// Port pairs (two ports each).
    pub pairs: usize,
}

/// The groups, in the order run.
pub fn groups(sel: Selection) -> Vec<Group> {
    let pairs: &[usize] = match sel {
        Selection::Full => &[1, 2],
        Selection::Summary => &[1],
    };
    pairs
        .iter()
        .flat_map(|&pairs| [false, true].map(|fast_free| Group { fast_free, pairs }))
        .collect()
}

/// One path's figures in one group.
#[derive(Serialize, Debug, Clone)]
pub struct RecycleResult {
    /// The usual fields (`bench`, `case`, `cycles_per_op`, `mops`, ...).
    #[serde(flatten)]
    pub base: BenchResult,
    /// `normal`, `zc` or `recycle`.
    pub path: &'static str,
    /// The fast-free Tx offload was on.
    pub fast_free: bool,
    /// Port pairs.
    pub pairs: usize,
    /// Rx descriptors per queue.
    pub rxd: u16,
    /// Tx descriptors per queue.
    pub txd: u16,
    /// The traffic.
    pub source: Source,
    /// Wire traffic: frames going round per direction (0 with the tester).
    pub preload: usize,
    /// Timed Rx bursts that carried a full 32, of all Rx bursts (empty
    /// polls included).
    pub rx_full_share: f64,
    /// Timed Tx bursts that carried a full 32.
    pub tx_full_share: f64,
    /// Median over rounds of this path's cycles per packet over `normal`'s
    /// in the same round (absent when `normal` was not measured: `--path`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_vs_normal: Option<f64>,
    /// Rounds (slices per path).
    pub rounds: usize,
    /// The best round's cycles per packet.
    pub cycles_min: f64,
    /// The worst round's.
    pub cycles_max: f64,
    /// The share of timed TSC ticks left out: iterations longer than
    /// 100 µs and ten times the usual (the thread off the core).
    pub excluded_share: f64,
    /// Packets a Tx queue did not take, dropped (timed and warm-up).
    pub drops: u64,
    /// The path's pool sits on hugepages (else the text row says so: the
    /// TLB misses of 4 KiB pages would weigh on that path alone).
    #[serde(skip)]
    pub hugepages: bool,
}

/// Runs the recycle bench: every group of `sel`.
pub fn run(ctx: &mut Ctx, sel: Selection, opts: Opts) {
    let ops = ctx.ops(DEFAULT_OPS);
    let rounds = rounds(ops, MIN_SLICE, MAX_ROUNDS);
    let slice = (ops / rounds).max(1);
    let source = match opts.source {
        Source::Wire => format!(
            "per pair two soft ports cabled by a wire (flow control on), {} frames preloaded \
             per direction going round",
            opts.preload()
        ),
        Source::Tester => "every port cabled to the built-in tester (1024 UDP flows)".to_owned(),
    };
    let mut notes = vec![
        format!(
            "io forwarding between soft ports, one forwarding core polling every stream, \
             {FRAME}-byte frames, burst {BURST}, {} Rx / {} Tx descriptors, mempool cache {}; \
             traffic: {source}; the device runs inline and its own cycles are excluded.",
            opts.rxd, opts.txd, opts.cache
        ),
        "Paths: normal = Tx frees to the mempool cache, Rx refills from it; zc = Tx puts \
         straight into reserved cache slots (tx_free=zc); recycle = the recycle engine moves \
         sent buffers from the Tx ring straight into the Rx ring. fast-free = the fast-free Tx \
         offload on."
            .to_owned(),
        format!(
            "Method: the three paths of a group stay up and are measured interleaved, {rounds} \
             round(s) of one {slice}-packet slice each (after an untimed warm-up), the order \
             rotating through all six permutations; cycles/pkt and Mpps are medians over rounds, \
             'x normal' the median of per-round ratios; min-max is the spread over rounds. \
             Each iteration (one poll of every stream) is timed, and one longer than {} \
             µs and {}x the usual (the thread was off the core) is left out with its \
             packets and device cycles: 'cut' is the share of time left out. Full = share of \
             bursts carrying {BURST} (Rx counts empty polls).",
            CUT.min_us, CUT.factor
        ),
    ];
    if opts.source == Source::Wire {
        notes.push(format!(
            "Recycling retires the oldest sent batch at every poll, so a recycled buffer was \
             sent about {} frames (the preload) earlier on its stream; the normal path frees \
             when the Tx ring is nearly full, about {} frames after sending. That reuse \
             distance is a large part of the gap here: the ratio grows with --preload.",
            opts.preload(),
            opts.txd
        ));
    }
    if opts.cache == 0 {
        notes.push("With no cache, zc falls back to a normal put.".to_owned());
    }
    if let Some(path) = opts.path {
        notes.push(format!(
            "--path {}: only that path of each group runs, in the same rounds and slices, \
             with nothing to interleave it with ('x normal' is empty unless it is normal).",
            path.name()
        ));
    }
    ctx.title(
        "recycle (Tx→Rx buffer recycling: normal vs zero-copy put vs recycle)",
        &notes,
    );
    ctx.note(&super::fwd_vector::path_note());
    if !ctx.json {
        emit(&format!(
            "{:<30} {:>10} {:>7} {:>8} {:>8} {:>9}  detail",
            "case", "cycles/pkt", "Mpps", "rx full", "tx full", "x normal"
        ));
    }
    for g in groups(sel) {
        if !wanted(ctx, g) {
            continue;
        }
        let name = group_name(g);
        let cpu = ctx.main_cpu();
        match on_lcore(cpu, move || measure_group(g, opts, rounds as usize, slice)) {
            Ok(results) => results.iter().for_each(|r| print_row(ctx, r)),
            Err(e) => ctx.report(&name, Err(e)),
        }
    }
    // One core's figures, but they move with how fast the host lets that
    // core run (the ratios, per round, much less).
    super::note_contention(ctx);
}

/// Whether `--case` selects group `g`: a group runs whole (its paths are
/// measured against each other) when any of its cases' names matches.
fn wanted(ctx: &Ctx, g: Group) -> bool {
    let cases = PATHS.map(|path| format!("{} {}", path.name(), group_name(g)));
    ctx.wants_any(&cases.each_ref().map(String::as_str))
}

fn group_name(g: Group) -> String {
    format!(
        "{}, {} pair{}",
        if g.fast_free {
            "fast-free"
        } else {
            "no fast-free"
        },
        g.pairs,
        if g.pairs == 1 { "" } else { "s" }
    )
}

fn print_row(ctx: &Ctx, r: &RecycleResult) {
    if ctx.json_row(&r.base.case, r) {
        return;
    }
    let mut detail = format!(
        "min-max {:.1}-{:.1}, {:.1}% cut",
        r.cycles_min,
        r.cycles_max,
        100.0 * r.excluded_share
    );
    if r.drops != 0 {
        detail.push_str(&format!(", {} dropped", r.drops));
    }
    if !r.hugepages
        && let Some(b) = &r.base.backing
    {
        detail.push_str(&format!(", pool on {b}"));
    }
    let ratio = r
        .ratio_vs_normal
        .map_or_else(|| "-".to_owned(), |x| format!("{x:.3}"));
    emit(&format!(
        "{:<30} {:>10.1} {:>7.2} {:>7.1}% {:>7.1}% {:>9}  {detail}",
        r.base.case,
        r.base.cycles_per_op,
        r.base.mops,
        100.0 * r.rx_full_share,
        100.0 * r.tx_full_share,
        ratio,
    ));
}

/// One path's ports: its own pool, ports, and (tester source) tester.
struct PathPorts {
    pool: MbufPool,
    ports: Vec<Port>,
    counters: Vec<Arc<PortCounters>>,
    tester: Option<Arc<Tester>>,
    /// Frames sent into the wire loops before forwarding.
    preloaded: u64,
}

impl PathPorts {
    /// Opens and starts `path`'s ports for `g`, and preloads the wires.
    fn open(path: Path, g: Group, opts: Opts) -> Result<PathPorts, String> {
        let nports = 2 * g.pairs;
        let preload = opts.preload();
        let need = nports * (opts.rxd as usize + opts.txd as usize + preload)
            + opts.cache as usize * 3 / 2
            + 1024;
        let size = ((need + 1).next_power_of_two() - 1).max(8191);
        let pool = MbufPool::new(MbufPoolConfig {
            name: format!("bench-recycle-{}", path.name()),
            size: size as u32,
            cache_size: opts.cache,
            ..Default::default()
        })
        .map_err(|e| format!("mbuf pool: {e}"))?;
        // Wire and tester names unique in the process (tests run groups at
        // once).
        let tester_name = super::unique_name("bench_recycle");
        let mut ports = Vec::with_capacity(nports);
        for i in 0..nports {
            let cable = match opts.source {
                Source::Wire => format!("wire={tester_name}_{}", i / 2),
                Source::Tester => format!("tester={tester_name},gen=udp,flows=1024,size={FRAME}"),
            };
            let spec = format!("soft:{cable},device=inline,tx_free={}", path.tx_free());
            let mut config = PortConfig::new(Some(pool.clone()))
                .port_id(i as u16)
                .nb_rxd(opts.rxd)
                .nb_txd(opts.txd);
            config.burst_stats = true;
            if g.fast_free {
                config.tx_offloads |= Offloads::FAST_FREE;
            }
            ports.push(sluice::driver::open(&spec, config).map_err(|e| e.to_string())?);
        }
        // Started once all are open: a wire's two ends are then plugged in.
        for (i, port) in ports.iter_mut().enumerate() {
            port.start()
                .map_err(|e| format!("port {i} ({}): {e}", port.name()))?;
        }
        if path == Path::Recycle {
            crate::app::ports::check_recycle(&ports)?;
        }
        let tester = match opts.source {
            Source::Wire => None,
            Source::Tester => sluice::tester::registered()
                .into_iter()
                .find(|(n, _)| *n == tester_name)
                .map(|(_, t)| t),
        };
        let mut preloaded = 0;
        for port in ports.iter_mut() {
            preloaded += super::fwd::preload_port(port, &pool, preload)?;
        }
        let counters = ports.iter().map(Port::counters).collect();
        Ok(PathPorts {
            pool,
            ports,
            counters,
            tester,
            preloaded,
        })
    }

    /// The streams: port 2k Rx → port 2k+1 Tx and back, for each pair k.
    fn streams(&mut self) -> Result<Vec<Stream<'_>>, String> {
        let mut rxq: Vec<Option<&mut dyn RxQueue>> = Vec::new();
        let mut txq: Vec<Option<&mut dyn TxQueue>> = Vec::new();
        for port in self.ports.iter_mut() {
            let (rx, tx) = port.queues_mut().map_err(|e| e.to_string())?;
            rxq.push(rx.iter_mut().next().map(|q| q.as_mut()));
            txq.push(tx.iter_mut().next().map(|q| q.as_mut()));
        }
        let mac = sluice::net::MacAddr([2, 0, 0, 0, 0, 1]);
        let mut streams = Vec::with_capacity(rxq.len());
        for (rx_port, slot) in rxq.iter_mut().enumerate() {
            let tx_port = rx_port ^ 1;
            let (Some(rx), Some(tx)) = (slot.take(), txq[tx_port].take()) else {
                return Err(format!("port {rx_port} or {tx_port} has no queue 0"));
            };
            streams.push(Stream::new(rx_port, tx_port, rx, tx, mac, mac));
        }
        Ok(streams)
    }
}

/// What one slice measured.
#[derive(Debug, Default, Clone, Copy)]
struct Slice {
    /// TSC ticks of the iterations kept.
    cycles: u64,
    /// The inline devices' own, inside them.
    device: u64,
    /// Packets received in them (and forwarded or dropped).
    packets: u64,
    /// TSC ticks of the iterations left out.
    excluded: u64,
    /// Rx bursts with a full burst, and all Rx bursts.
    rx_full: u64,
    rx_bursts: u64,
    /// Tx bursts with a full burst, and all Tx bursts.
    tx_full: u64,
    tx_bursts: u64,
}

impl Slice {
    fn cycles_per_packet(&self) -> f64 {
        self.cycles.saturating_sub(self.device) as f64 / self.packets.max(1) as f64
    }

    fn mpps(&self) -> f64 {
        super::mops(self.packets, self.cycles)
    }
}

/// The burst counts a slice reads before and after: full and all bursts,
/// Rx then Tx.
fn bursts(counters: &[Arc<PortCounters>]) -> [u64; 4] {
    let mut s = [0u64; 4];
    for c in counters {
        for h in c.rx.iter().filter_map(|q| q.bursts.as_ref()) {
            s[0] += h.counts().get(BURST).copied().unwrap_or(0);
            s[1] += h.bursts();
        }
        for h in c.tx.iter().filter_map(|q| q.bursts.as_ref()) {
            s[2] += h.counts().get(BURST).copied().unwrap_or(0);
            s[3] += h.bursts();
        }
    }
    s
}

/// Per-path running totals kept by the lcore.
#[derive(Debug, Default, Clone)]
struct PathSlices {
    slices: Vec<Slice>,
    drops: u64,
}

/// Measures the three paths of `g`, interleaved; on the calling lcore.
fn measure_group(
    g: Group,
    opts: Opts,
    rounds: usize,
    slice: u64,
) -> Result<Vec<RecycleResult>, String> {
    let paths = opts.paths();
    let mut path_ports = Vec::with_capacity(paths.len());
    for &path in &paths {
        path_ports
            .push(PathPorts::open(path, g, opts).map_err(|e| format!("{}: {e}", path.name()))?);
    }
    let counters: Vec<Vec<Arc<PortCounters>>> =
        path_ports.iter().map(|b| b.counters.clone()).collect();
    let clocks: Vec<DeviceClock> = counters.iter().map(|c| DeviceClock::new(c)).collect();
    let checks: Vec<(Option<Arc<Tester>>, u64)> = path_ports
        .iter()
        .map(|b| (b.tester.clone(), b.preloaded))
        .collect();
    let mut slices_of: Vec<PathSlices> = paths.iter().map(|_| PathSlices::default()).collect();
    {
        let mut streams = path_ports
            .iter_mut()
            .map(PathPorts::streams)
            .collect::<Result<Vec<_>, _>>()?;
        let mut burst: Burst<64> = Burst::new();
        // Warm-up per slice: twice round every ring of every stream.
        let per_stream = 2 * (opts.rxd as u64 + opts.txd as u64);
        let warm = (per_stream * 2 * g.pairs as u64).max(8192);
        // The first warm-up, longer, with every iteration kept, also sets
        // the cut.
        let mut cuts = Vec::with_capacity(paths.len());
        for (i, s) in streams.iter_mut().enumerate() {
            let first = (slice / 4).max(warm);
            let r = run_path(paths[i], s, &mut burst, first, &clocks[i], u64::MAX)?;
            slices_of[i].drops += r.drops;
            cuts.push(r.times.cut(CUT));
        }
        interleave(rounds, paths.len(), |_, i| {
            let s = &mut streams[i];
            let r = run_path(paths[i], s, &mut burst, warm, &clocks[i], cuts[i])?;
            slices_of[i].drops += r.drops;
            let before = bursts(&counters[i]);
            let r = run_path(paths[i], s, &mut burst, slice, &clocks[i], cuts[i])?;
            let after = bursts(&counters[i]);
            slices_of[i].drops += r.drops;
            let diff = |k: usize| after[k].saturating_sub(before[k]);
            slices_of[i].slices.push(Slice {
                cycles: r.times.kept,
                device: r.device,
                packets: r.packets,
                excluded: r.times.excluded,
                rx_full: diff(0),
                rx_bursts: diff(1),
                tx_full: diff(2),
                tx_bursts: diff(3),
            });
            Ok::<(), String>(())
        })?;
        for (i, s) in streams.iter_mut().enumerate() {
            let name = paths[i].name();
            let errors: u64 = s.iter().map(|s| s.recycle_errors).sum();
            if errors != 0 {
                return Err(format!("{name}: {errors} recycle steps failed"));
            }
            let (tester, preloaded) = &checks[i];
            let left = match tester {
                Some(t) => {
                    t.pause(true);
                    drain(paths[i], s, &mut burst, true)?
                }
                None => drain(paths[i], s, &mut burst, false)?,
            };
            account(
                name,
                tester.as_deref(),
                *preloaded,
                slices_of[i].drops,
                left,
            )?;
        }
    }
    let backings: Vec<Backing> = path_ports
        .iter()
        .map(|b| b.pool.mempool().backing())
        .collect();
    for (i, mut opened) in path_ports.into_iter().enumerate() {
        let name = paths[i].name();
        for (port, c) in opened.counters.iter().enumerate() {
            let s = c.stats();
            if s.rx_missed != 0 || s.rx_errors != 0 || s.tx_errors != 0 {
                return Err(format!(
                    "{name}: port {port}: rx_missed {}, rx errors {}, tx errors {}",
                    s.rx_missed, s.rx_errors, s.tx_errors
                ));
            }
        }
        let recycled: u64 = opened
            .counters
            .iter()
            .filter_map(|c| c.xstats.get("rx_recycled"))
            .sum();
        if (paths[i] == Path::Recycle) != (recycled > 0) {
            return Err(format!("{name}: {recycled} buffers recycled"));
        }
        opened.ports.iter_mut().for_each(Port::stop);
        opened.ports.clear();
        opened.pool.flush_local_cache();
        if !opened.pool.is_full() {
            return Err(format!("{name}: the mbuf pool is not full after the run"));
        }
    }
    let mut rows = results(g, opts, &paths, &slices_of);
    for (row, b) in rows.iter_mut().zip(backings) {
        row.base.backing = Some(b.to_string());
        row.hugepages = b == Backing::Hugepages;
    }
    Ok(rows)
}

/// Checks that every frame is accounted: with a tester, its report is
/// clean; with the wire, the frames drained at the end are those preloaded
/// less those dropped.
fn account(
    name: &str,
    tester: Option<&Tester>,
    preloaded: u64,
    drops: u64,
    drained: u64,
) -> Result<(), String> {
    match tester {
        Some(t) => {
            let r = t.report();
            if !r.is_clean() || r.received != r.sent {
                return Err(format!("{name}: the tester report is not clean: {r}"));
            }
        }
        None => {
            if drained + drops != preloaded {
                return Err(format!(
                    "{name}: {preloaded} frames preloaded, {drops} dropped, {drained} left: \
                     {} unaccounted",
                    preloaded as i128 - drops as i128 - drained as i128
                ));
            }
        }
    }
    Ok(())
}

/// The rows of a group from the slices of each of `paths` (`normal`, when
/// measured, first: the others' reference).
fn results(g: Group, opts: Opts, paths: &[Path], slices_of: &[PathSlices]) -> Vec<RecycleResult> {
    let normal: Option<Vec<f64>> = (paths.first() == Some(&Path::Normal)).then(|| {
        slices_of[0]
            .slices
            .iter()
            .map(Slice::cycles_per_packet)
            .collect()
    });
    paths
        .iter()
        .zip(slices_of)
        .map(|(&path, t)| {
            let cycles: Vec<f64> = t.slices.iter().map(Slice::cycles_per_packet).collect();
            let mpps: Vec<f64> = t.slices.iter().map(Slice::mpps).collect();
            let spread = Spread::of(&cycles);
            let sum = |f: fn(&Slice) -> u64| t.slices.iter().map(f).sum::<u64>();
            let case = format!("{} {}", path.name(), group_name(g));
            let mut base = BenchResult::new("recycle", case, 1, spread.median, median(&mpps));
            base.bulk = Some(BURST);
            base.cache = Some(opts.cache);
            base.ops = sum(|s| s.packets);
            base.tsc_hz = tsc::tsc_hz();
            RecycleResult {
                base,
                path: path.name(),
                fast_free: g.fast_free,
                pairs: g.pairs,
                rxd: opts.rxd,
                txd: opts.txd,
                source: opts.source,
                preload: opts.preload(),
                rx_full_share: share(sum(|s| s.rx_full), sum(|s| s.rx_bursts)),
                tx_full_share: share(sum(|s| s.tx_full), sum(|s| s.tx_bursts)),
                ratio_vs_normal: normal.as_ref().map(|n| median(&ratios(&cycles, n))),
                rounds: cycles.len(),
                cycles_min: spread.min,
                cycles_max: spread.max,
                excluded_share: share(sum(|s| s.excluded), sum(|s| s.excluded + s.cycles)),
                drops: t.drops,
                hugepages: true,
            }
        })
        .collect()
}

/// The inline device models' `device_cycles` counters of one path's
/// ports, read between polls.
struct DeviceClock(Vec<Arc<Counter>>);

impl DeviceClock {
    fn new(counters: &[Arc<PortCounters>]) -> DeviceClock {
        DeviceClock(
            counters
                .iter()
                .flat_map(|c| c.xstats.counters("device_cycles"))
                .collect(),
        )
    }

    /// Device cycles so far.
    #[inline(always)]
    fn read(&self) -> u64 {
        self.0.iter().map(|c| c.get()).sum()
    }
}

/// What a forwarding run measured.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    /// Packets received (forwarded or dropped), all iterations.
    received: u64,
    /// Packets a Tx queue did not take.
    drops: u64,
    /// TSC ticks of the iterations, kept (not over the cut) and left out.
    times: IterationTimes,
    /// The devices' own cycles inside the iterations kept.
    device: u64,
    /// Packets received in them.
    packets: u64,
}

/// Forwards `ops` packets over `streams` with `path`'s engine.
fn run_path(
    path: Path,
    streams: &mut [Stream<'_>],
    burst: &mut Burst<64>,
    ops: u64,
    clock: &DeviceClock,
    cut: u64,
) -> Result<Run, String> {
    match path {
        Path::Recycle => forward(Recycle, streams, burst, ops, clock, cut),
        Path::Normal | Path::Zc => forward(Io, streams, burst, ops, clock, cut),
    }
}

/// Polls every stream in turn until `ops` packets were received. Each
/// iteration (one poll of every stream) is timed: one that took more than
/// `cut` TSC ticks (the thread was descheduled, the vCPU taken away) is
/// left out, its packets and device cycles with it.
#[inline(never)]
fn forward<E: Fwd>(
    e: E,
    streams: &mut [Stream<'_>],
    burst: &mut Burst<64>,
    ops: u64,
    clock: &DeviceClock,
    cut: u64,
) -> Result<Run, String> {
    let mut r = Run::default();
    let mut stall = Stall::new("forwarding core");
    let mut t = rdtsc();
    let mut d = clock.read();
    while r.received < ops {
        let mut n = 0;
        for s in streams.iter_mut() {
            let m = poll(e, s, burst.capped(BURST), 0);
            n += m.rx as u64;
            r.drops += m.dropped as u64;
        }
        let t1 = rdtsc();
        let d1 = clock.read();
        let span = t1.wrapping_sub(t);
        if r.times.record(span, cut) {
            r.device += d1.wrapping_sub(d);
            r.packets += n;
        }
        (t, d) = (t1, d1);
        if n == 0 {
            stall.failed()?;
        } else {
            stall.progressed();
            r.received += n;
        }
    }
    Ok(r)
}

/// Runs the pipeline dry: with `forward`, forwards (a paused tester's last
/// frames reach its checker); else receives and frees, after kicking each
/// Tx queue's device to send what it still holds. Ends after
/// [`DRAIN_IDLE`] polls of every stream in a row found nothing; returns the
/// frames received.
fn drain(
    path: Path,
    streams: &mut [Stream<'_>],
    burst: &mut Burst<64>,
    forward: bool,
) -> Result<u64, String> {
    let mut got = 0u64;
    let mut idle = 0;
    let mut stall = Stall::new("drain");
    while idle < DRAIN_IDLE {
        let mut n = 0;
        for s in streams.iter_mut() {
            if forward {
                let m = match path {
                    Path::Recycle => poll(Recycle, s, burst.capped(BURST), 0),
                    _ => poll(Io, s, burst.capped(BURST), 0),
                };
                n += m.rx;
            } else {
                burst.clear();
                s.tx.tx_burst(burst);
                n += s.rx.rx_burst(burst.capped(BURST));
                burst.clear();
            }
        }
        if n == 0 {
            idle += 1;
            stall.failed()?;
        } else {
            idle = 0;
            stall.progressed();
            got += n as u64;
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small rings and a small pool cache, for quick runs.
    fn small(source: Source, path: Option<Path>) -> Opts {
        Opts {
            rxd: 128,
            txd: 128,
            cache: 64,
            source,
            preload: PRELOAD,
            path,
        }
    }

    /// `g` measured with `opts` in two rounds of 4096 packets, on an lcore.
    fn measure_small(g: Group, opts: Opts) -> Vec<RecycleResult> {
        let cpu = sluice::lcore::available_cpus()[0];
        on_lcore(cpu, move || measure_group(g, opts, 2, 4096))
            .unwrap_or_else(|e| panic!("{opts:?} {g:?}: {e}"))
    }

    #[test]
    fn every_path_forwards_and_accounts_for_every_frame() {
        for source in [Source::Wire, Source::Tester] {
            let opts = small(source, None);
            for g in [
                Group {
                    fast_free: false,
                    pairs: 1,
                },
                Group {
                    fast_free: true,
                    pairs: 2,
                },
            ] {
                let r = measure_small(g, opts);
                assert_eq!(r.len(), 3);
                for (row, path) in r.iter().zip(PATHS) {
                    assert_eq!(row.path, path.name());
                    assert_eq!((row.fast_free, row.pairs), (g.fast_free, g.pairs));
                    assert_eq!(row.rounds, 2);
                    // Packets timed: two slices of 4096 and a last
                    // iteration, less those of iterations cut.
                    let most = 2 * (4096 + 2 * g.pairs as u64 * BURST as u64);
                    assert!(row.base.ops <= most, "{row:?}");
                    assert!((0.0..=1.0).contains(&row.excluded_share));
                    assert!(row.rx_full_share > 0.0 && row.rx_full_share <= 1.0);
                    assert!(row.tx_full_share > 0.0 && row.tx_full_share <= 1.0);
                    assert_eq!(row.drops, 0, "flow control on");
                    assert!(row.cycles_min <= row.base.cycles_per_op);
                    assert!(row.base.cycles_per_op <= row.cycles_max);
                }
            }
        }
    }

    #[test]
    fn json_rows_carry_the_recycle_fields() {
        let g = Group {
            fast_free: true,
            pairs: 2,
        };
        let opts = Opts::from_args(&RecycleArgs::default());
        let mut t = PathSlices::default();
        t.slices.push(Slice {
            cycles: 1000,
            device: 600,
            packets: 10,
            excluded: 1000,
            rx_full: 3,
            rx_bursts: 4,
            tx_full: 1,
            tx_bursts: 1,
        });
        let mut half = PathSlices::default();
        half.slices.push(Slice {
            device: 800,
            ..t.slices[0]
        });
        let rows = results(g, opts, &PATHS, &[t.clone(), PathSlices::default(), half]);
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&rows[2]).unwrap()).unwrap();
        assert_eq!(v["bench"], "recycle");
        assert_eq!(v["case"], "recycle fast-free, 2 pairs");
        assert_eq!(v["path"], "recycle");
        assert_eq!(v["cycles_per_op"], 20.0);
        assert_eq!(v["ratio_vs_normal"], 0.5);
        assert_eq!(
            (v["fast_free"].clone(), v["pairs"].clone()),
            (true.into(), 2.into())
        );
        assert_eq!(
            (v["rxd"].clone(), v["txd"].clone()),
            (1024.into(), 1024.into())
        );
        assert_eq!(v["cache"], 256);
        assert_eq!(v["source"], "wire");
        assert_eq!(v["preload"], 256);
        assert_eq!(v["cores"], 1);
        assert_eq!(v["ops"], 10);
        assert!(v["tsc_hz"].as_u64().unwrap() > 0);
        assert!(v["mops"].as_f64().unwrap() > 0.0);
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&rows[0]).unwrap()).unwrap();
        assert_eq!(v["rx_full_share"], 0.75);
        assert_eq!(v["tx_full_share"], 1.0);
        assert_eq!(v["ratio_vs_normal"], 1.0);
        assert_eq!(v["excluded_share"], 0.5);
        // One path alone (`--path recycle`): its row, and no ratio.
        let rows = results(g, opts, &[Path::Recycle], &[t]);
        assert_eq!(rows.len(), 1);
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&rows[0]).unwrap()).unwrap();
        assert_eq!(v["path"], "recycle");
        assert_eq!(v["cycles_per_op"], 40.0);
        assert!(v.get("ratio_vs_normal").is_none(), "{v}");
    }

    #[test]
    fn one_path_alone_forwards_and_accounts_for_every_frame() {
        for path in PATHS {
            let g = Group {
                fast_free: true,
                pairs: 1,
            };
            let r = measure_small(g, small(Source::Wire, Some(path)));
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].path, path.name());
            assert_eq!(r[0].rounds, 2);
            assert!(r[0].base.ops > 0);
            assert_eq!(
                r[0].ratio_vs_normal,
                (path == Path::Normal).then_some(1.0),
                "{path:?}"
            );
        }
    }

    #[test]
    fn a_case_filter_selects_whole_groups() {
        let picked = |filter: &str| -> Vec<Group> {
            let ctx = Ctx::new(false, None, true).with_case_filter(Some(filter.into()));
            groups(Selection::Full)
                .into_iter()
                .filter(|&g| wanted(&ctx, g))
                .collect()
        };
        let one = |fast_free, pairs| Group { fast_free, pairs };
        assert_eq!(picked("recycle fast-free, 1"), [one(true, 1)]);
        assert_eq!(picked("No Fast-Free, 2"), [one(false, 2)]);
        assert_eq!(picked("2 pairs"), [one(false, 2), one(true, 2)]);
        assert_eq!(picked("zc"), groups(Selection::Full));
        assert!(picked("vhost").is_empty());
    }

    #[test]
    fn rounds_and_descriptor_counts() {
        assert_eq!(rounds(1, MIN_SLICE, MAX_ROUNDS), 1);
        assert_eq!(rounds(DEFAULT_OPS, MIN_SLICE, MAX_ROUNDS), MAX_ROUNDS);
        assert_eq!(rounds(3 * MIN_SLICE, MIN_SLICE, MAX_ROUNDS), 3);
        assert_eq!(parse_desc("512"), Ok(512));
        for bad in ["32", "100", "8192", "x"] {
            assert!(parse_desc(bad).is_err(), "{bad}");
        }
    }
}
