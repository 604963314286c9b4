//! `sluice bench pagepool`: packet buffers from pages —
//! cycles per packet to allocate a buffer and free it, for three
//! allocators, at two MTUs, with the free on the allocating core or on
//! another one.
//!
//! # Cases
//! Buffer sizes as Linux derives them: MTU 1500 needs 1514 + 256 (headroom)
//! + 320 (shared info) = 2090 bytes, MTU 8000 needs 8590.
//! - **(a) pool page**: a page pool, one page of the smallest order that
//!   fits per packet (4 KiB at MTU 1500, 16 KiB at 8000): a page recycle per
//!   packet.
//! - **(b) frag cache**: page_frag_cache-style fragments from 32 KiB blocks
//!   taken from the block provider and given back to it by their last
//!   fragment: a provider allocation and free (lock, buddy split and merge)
//!   per 15 (MTU 1500) or 3 (MTU 8000) packets.
//! - **(c) pool frags**: a page pool of 32 KiB pages split into fragments:
//!   a page recycle per 15 or 3 packets, one atomic per packet.
//!
//! Each runs with one core (allocations and frees on the pool's owner
//! lcore: pages recycle through its direct cache) and with two (allocations
//! on the owner, frees on a second lcore fed through an SP/SC ring: pages
//! come back through the pool's MP/MC ring, as Linux's page_pool pages
//! freed away from their NAPI context do; the pools have the default ring
//! batch, so the owner takes them from the ring a batch at a time, as a
//! driver's pool would). Both keep an Rx ring's worth
//! ([`IN_FLIGHT`]) of buffers out and work in batches of [`BATCH`], as a
//! driver refilling its ring and a Tx path freeing completions would; each
//! batch of allocations and each batch of frees is timed on its own core, so
//! a two-core figure is allocation cycles (owner core) + free cycles (other
//! core) per packet, without the hand-off between them.
//!
//! The hand-off moves a whole batch through the SP/SC ring in one reserve
//! and one peek (one index publish per side per batch), each side's batch
//! array its own (allocated by its thread). Handing over one handle at a
//! time made the two cores share the ring's slot and index lines for every
//! handle, and the misses leaked into the timed allocations (a 24-byte
//! fragment handle: +6 cycles per packet in (c)).
//!
//! The hand-off's own misses must not leak either. Filling the ring's slots
//! leaves stores waiting for lines the other core holds, and draining them
//! leaves loads in flight; a plain `rdtsc` at the next batch's start does
//! not wait for them, so they finished inside the timed batch. (In (c) that
//! was about 8 of the owner's 18 cycles per packet, and the round-to-round
//! spread doubled.) Two-core batches therefore start at
//! [`rdtsc_drained`] (a full fence, then `lfence; rdtsc`) and end at
//! [`rdtsc_completed`] (`lfence; rdtsc`, so the batch's own last
//! instructions are counted).
//!
//! Two ways to free, each a row of its own:
//! - **per buffer** (no suffix): each handle dropped — one atomic per
//!   fragment, each page home on its own (one ring enqueue per page from
//!   the other core).
//! - **bulk** (`, bulk`): through a [`BulkFree`] that the freeing loop keeps
//!   and flushes after every batch, as a Tx completion burst would (Linux's
//!   `xdp_frame_bulk`): one count update per run of a page's fragments,
//!   pages home in one bulk put per flush (direct cache on the owner, one
//!   ring enqueue elsewhere). page_frag_cache blocks still go back to the
//!   provider one by one (Linux has no bulk free for them).
//!
//! Two more: the block provider's own cost per order-3 allocation + free
//! (immediately, so every time a 2 MiB block splits six times and merges
//! back; and with 34 blocks out, as (b) at MTU 1500 has), and the page
//! pool's cost per page recycle (order 3, alloc + free of whole pages:
//! through the direct cache, and through the ring from another core).
//!
//! Cases run interleaved (`sluice_bench::interleave`), one slice each per
//! round, fresh allocators each time; figures are medians over rounds,
//! min-max the spread. With two CPUs
//! each round starts with the core-contention probe
//! ([`sluice_bench::contention`]), and a note gives the spread of what
//! it saw: a two-core row taken while the host ran both vCPUs on one
//! physical core is slowed by up to 2x in every instruction, not by the
//! allocator.
//!
//! Last, io forwarding between two soft ports on one core in both Rx modes
//! (`rxbuf=mbuf`, `rxbuf=frag`), as `sluice bench fwd`'s `soft io (inline)`
//! measures it: what arming Rx descriptors with fragments costs per packet.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use sluice::pagepool::{
    BlockProvider, BulkFree, DEFAULT_CACHE_SIZE, DEFAULT_RING_BATCH, DEFAULT_RING_SIZE, Frag, Page,
    PageFragAlloc, PagePool, PagePoolConfig, PagePoolError, ProviderConfig,
};
use sluice::ring::Ring;
use sluice::tsc::{rdtsc, rdtsc_completed, rdtsc_drained};
use sluice_bench::baseline::PageFragCache;

use sluice_bench::cut::CutPolicy;
use sluice_bench::rounds::{interleave, rounds};
use sluice_bench::stats::{Spread, median, mops_per_core, share};

use super::{BenchResult, Ctx, Selection, SpinBarrier, Stall, Worker, emit, on_lcore, on_lcores};

/// Buffers out at once: an Rx ring's worth.
pub const IN_FLIGHT: usize = 512;
/// Buffers per timed batch.
pub const BATCH: usize = 32;
/// Packets per case by default, all rounds together.
const DEFAULT_OPS: u64 = 1 << 23;
/// Most rounds.
const MAX_ROUNDS: u64 = 8;
/// Fewest packets in one slice.
const MIN_SLICE: u64 = 1 << 14;
/// The block provider's memory.
const PROVIDER_BYTES: usize = 128 << 20;
/// Page order of the fragment pools and caches (32 KiB).
const FRAG_ORDER: u32 = 3;
/// Blocks out in the provider's second case: (b)'s at MTU 1500.
const PROVIDER_OUT: usize = IN_FLIGHT / 15;

/// The MTUs and the buffer sizes they need.
pub const MTUS: [(u32, usize); 2] = [(1500, 1514 + 256 + 320), (8000, 8014 + 256 + 320)];

/// The three allocators compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// (a) a page pool, one page per packet.
    PoolPage,
    /// (b) page_frag_cache over 32 KiB provider blocks.
    FragCache,
    /// (c) a page pool of 32 KiB pages split into fragments.
    PoolFrags,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::PoolPage, Kind::FragCache, Kind::PoolFrags];

    fn tag(self) -> &'static str {
        match self {
            Kind::PoolPage => "(a) pool page",
            Kind::FragCache => "(b) frag cache",
            Kind::PoolFrags => "(c) pool frags",
        }
    }
}

/// The operation a case times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    /// An allocator at a buffer size.
    Alloc { kind: Kind, mtu: u32, size: usize },
    /// The provider's order-3 alloc + free with `out` blocks held.
    Provider { out: usize },
    /// The page pool's per-page recycle (order 3).
    Recycle,
}

/// How the freeing side gives buffers back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Free {
    /// One at a time: each handle dropped.
    Each,
    /// Through a [`BulkFree`] kept by the freeing loop, flushed after each
    /// batch (as a Tx completion burst would).
    Bulk,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    op: Operation,
    cross: bool,
    free: Free,
}

impl Case {
    fn name(&self) -> String {
        let cores = if self.cross { "2 cores" } else { "1 core" };
        let bulk = if self.free == Free::Bulk {
            ", bulk"
        } else {
            ""
        };
        match self.op {
            Operation::Alloc { kind, mtu, .. } => format!("{mtu} {} {cores}{bulk}", kind.tag()),
            Operation::Provider { out: 0 } => "provider order 3 alloc+free".to_owned(),
            Operation::Provider { out } => format!("provider order 3, {out} out"),
            Operation::Recycle if self.cross => format!("pool recycle via ring{bulk}"),
            Operation::Recycle => format!("pool recycle direct{bulk}"),
        }
    }

    fn cores(&self) -> u32 {
        if self.cross { 2 } else { 1 }
    }
}

/// One case's figures.
#[derive(Serialize, Debug, Clone)]
pub struct PagePoolResult {
    /// The usual fields (`bench`, `case`, `cycles_per_op`, `mops`, ...);
    /// one op is one packet buffer allocated and freed (one block, one page
    /// for the provider and recycle cases).
    #[serde(flatten)]
    pub base: BenchResult,
    /// `pool_page`, `frag_cache`, `pool_frags`, `provider` or `pool_recycle`.
    pub allocator: &'static str,
    /// `single` (one core) or `cross` (frees on another core).
    pub threads: &'static str,
    /// `each` (every buffer freed on its own) or `bulk` (through a
    /// `BulkFree` flushed per batch).
    pub free: &'static str,
    /// The MTU, for the allocator cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Bytes per buffer asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alloc_size: Option<usize>,
    /// Memory per buffer: the page, or the page's share per fragment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_buffer: Option<f64>,
    /// Allocation cycles per op (median over rounds).
    pub alloc_cycles: f64,
    /// Free cycles per op (median over rounds).
    pub free_cycles: f64,
    /// The best round's cycles per op.
    pub cycles_min: f64,
    /// The worst round's.
    pub cycles_max: f64,
    /// Rounds measured.
    pub rounds: usize,
    /// The share of timed cycles left out: batches longer than 50 µs (the
    /// thread was off its core).
    pub excluded_share: f64,
}

/// Cycles spent allocating and freeing `ops` buffers.
#[derive(Debug, Clone, Copy, Default)]
struct Split {
    /// Cycles of the allocation batches kept, and their buffers.
    alloc: u64,
    alloc_ops: u64,
    /// Cycles of the free batches kept, and their buffers.
    free: u64,
    free_ops: u64,
    /// Cycles of the batches left out (see [`CUT`]) and of all.
    cut: u64,
    all: u64,
}

impl Split {
    fn alloc_per_op(&self) -> f64 {
        self.alloc as f64 / self.alloc_ops.max(1) as f64
    }

    fn free_per_op(&self) -> f64 {
        self.free as f64 / self.free_ops.max(1) as f64
    }

    fn total(&self) -> f64 {
        self.alloc_per_op() + self.free_per_op()
    }

    /// Adds a timed batch of allocations (`free` false) or frees, unless it
    /// took more than [`CUT`]: the thread was off its core.
    #[inline(always)]
    fn add(&mut self, free: bool, cycles: u64) {
        self.all += cycles;
        if cycles > cut_cycles() {
            self.cut += cycles;
        } else if free {
            self.free += cycles;
            self.free_ops += BATCH as u64;
        } else {
            self.alloc += cycles;
            self.alloc_ops += BATCH as u64;
        }
    }
}

/// A batch of [`BATCH`] longer than 50 µs did not run on its core all
/// along (the thread was preempted, an interrupt came): it is left out,
/// with its buffers. The slowest case takes a few µs per batch.
const CUT: CutPolicy = CutPolicy::new(50, 0);

/// [`CUT`] in TSC ticks.
fn cut_cycles() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| CUT.threshold(0))
}

/// Runs the page pool cases.
pub fn run(ctx: &mut Ctx, sel: Selection) {
    let ops = ctx.ops(DEFAULT_OPS);
    let rounds = rounds(ops, MIN_SLICE, MAX_ROUNDS);
    let slice = (ops / rounds).max(BATCH as u64);
    let two = ctx.cpu_pair();
    let mut cases: Vec<Case> = Vec::new();
    for (mtu, size) in MTUS {
        for free in [Free::Each, Free::Bulk] {
            for cross in [false, true] {
                for kind in Kind::ALL {
                    cases.push(Case {
                        op: Operation::Alloc { kind, mtu, size },
                        cross,
                        free,
                    });
                }
            }
        }
    }
    if sel == Selection::Full {
        for out in [0, PROVIDER_OUT] {
            cases.push(Case {
                op: Operation::Provider { out },
                cross: false,
                free: Free::Each,
            });
        }
        for free in [Free::Each, Free::Bulk] {
            for cross in [false, true] {
                cases.push(Case {
                    op: Operation::Recycle,
                    cross,
                    free,
                });
            }
        }
    }
    let provider = match BlockProvider::new(ProviderConfig {
        name: "bench-pagepool".into(),
        size: PROVIDER_BYTES,
        ..Default::default()
    }) {
        Ok(provider) => provider,
        Err(e) => {
            ctx.report("pagepool", Err(e.to_string()));
            return;
        }
    };
    let notes = vec![
        format!(
            "One op = one packet buffer allocated and freed. Buffers for MTU 1500 / 8000: {} / \
             {} bytes (1514 / 8014 + 256 headroom + 320 shared info), 64-byte aligned: 15 / 3 \
             per 32 KiB page. (a) a page pool, one page per packet (4 / 16 KiB); (b) \
             page_frag_cache over 32 KiB provider blocks; (c) a page pool of 32 KiB pages split \
             into fragments.",
            MTUS[0].1, MTUS[1].1
        ),
        format!(
            "{IN_FLIGHT} buffers out at once (an Rx ring's worth), allocated and freed in \
             batches of {BATCH}, each batch timed on its core. 1 core: allocs and frees on the \
             pool's owner lcore (CPU {}; pages recycle through the direct cache). 2 cores: \
             frees on a second lcore{} (pages come back through the pool's ring); cycles = \
             alloc (owner core) + free (other core) per packet, the hand-off between them (one \
             SP/SC ring move per batch) not counted: each batch starts once the hand-off's \
             loads and stores are done (fence; lfence; rdtsc) and ends with lfence; rdtsc. \
             Rows without a suffix free each buffer on its own; ', bulk' rows free through a \
             BulkFree flushed after each batch (one count update per run of a page's \
             fragments, pages home in one bulk put).",
            ctx.main_cpu(),
            match two {
                Some((_, b)) => format!(" (CPU {b})"),
                None => " (skipped: one CPU)".to_owned(),
            }
        ),
        format!(
            "Block provider: {} MiB, {}, a buddy allocator (blocks up to 2 MiB) under a lock. \
             Page pools: direct cache {DEFAULT_CACHE_SIZE}, ring {DEFAULT_RING_SIZE}, ring \
             batch {DEFAULT_RING_BATCH} (the owner refills from the ring once that many pages \
             wait, growing from the provider until then). {rounds} round(s) of {slice} ops per \
             case, cases interleaved; medians, min-max over rounds. A batch that took over \
             {} µs (its thread was off its core) is left out with its buffers: 'cut' is \
             the share of timed cycles left out.",
            PROVIDER_BYTES >> 20,
            provider.backing(),
            CUT.min_us
        ),
    ];
    ctx.title("pagepool (page pool, fragments, page_frag_cache)", &notes);
    ctx.note(&super::fwd_vector::path_note());
    if !ctx.json {
        emit(&format!(
            "{:<34} {:>5} {:>10} {:>8} {:>8} {:>8}  {:>9}  detail",
            "case", "cores", "cycles/op", "alloc", "free", "Mops", "B/buffer"
        ));
    }
    let mut splits: Vec<Result<Vec<Split>, String>> = vec![Ok(Vec::new()); cases.len()];
    let mut probes = Vec::new();
    let mut probed = None;
    // A failed case keeps its error and is not run again; the others go on.
    let _ = interleave::<()>(rounds as usize, cases.len(), |round, i| {
        // How much the two CPUs slow each other down in this round (the
        // host may move them onto one physical core and back).
        if probed != Some(round) {
            probed = Some(round);
            if let Some(cpus) = two
                && let Ok(c) = super::contention::measure(cpus, super::contention::ITERS)
            {
                probes.push(c);
            }
        }
        let case = cases[i];
        let Ok(v) = &mut splits[i] else {
            return Ok(());
        };
        if case.cross && two.is_none() {
            return Ok(());
        }
        match measure(ctx, &provider, case, slice) {
            Ok(s) => v.push(s),
            Err(e) => splits[i] = Err(e),
        }
        Ok(())
    });
    let mut rows: Vec<PagePoolResult> = Vec::new();
    for (case, s) in cases.iter().zip(splits) {
        if case.cross && two.is_none() {
            ctx.skip(&case.name(), "needs two CPUs, this process may use one");
            continue;
        }
        match s {
            Ok(v) => {
                let r = result(case, &v);
                print_row(ctx, &r);
                rows.push(r);
            }
            Err(e) => ctx.report(&case.name(), Err(e)),
        }
    }
    if let Some(cpus) = two {
        // Every two-core figure moves with this (see `bench ring`).
        let trips = (ops / 64).max(1000);
        match super::contention::line_round_trip(cpus, trips) {
            Ok(s) => ctx.note(&format!(
                "A cache line's round trip between CPUs {} and {} in this run: {:.0} cycles \
                 (two-core figures move with it).",
                cpus.0,
                cpus.1,
                s.cycles_per_op()
            )),
            Err(e) => ctx.note(&format!("cache line round trip: {e}")),
        }
    }
    if let Some(cpus) = two {
        ctx.note(&super::contention::describe_rounds(&probes, cpus));
    }
    for line in side_by_side(&rows) {
        ctx.note(&line);
    }
    for line in rx_memory() {
        ctx.note(&line);
    }
    fwd_rx_modes(ctx, sel);
    if !provider.is_full() {
        ctx.report(
            "pagepool",
            Err("the block provider is not full after the run".to_owned()),
        );
    }
}

fn result(case: &Case, v: &[Split]) -> PagePoolResult {
    let per: Vec<f64> = v.iter().map(Split::total).collect();
    let ops: u64 = v.iter().map(|s| s.alloc_ops).sum();
    let spread = Spread::of(&per);
    let alloc = median(&v.iter().map(Split::alloc_per_op).collect::<Vec<_>>());
    let free = median(&v.iter().map(Split::free_per_op).collect::<Vec<_>>());
    let (cut, all) = v.iter().fold((0, 0), |(c, a), s| (c + s.cut, a + s.all));
    let mut base = BenchResult::new(
        "pagepool",
        case.name(),
        case.cores(),
        spread.median,
        mops_per_core(spread.median),
    );
    base.ops = ops;
    let (allocator, mtu, alloc_size, bytes) = match case.op {
        Operation::Alloc { kind, mtu, size } => {
            let name = match kind {
                Kind::PoolPage => "pool_page",
                Kind::FragCache => "frag_cache",
                Kind::PoolFrags => "pool_frags",
            };
            (
                name,
                Some(mtu),
                Some(size),
                Some(bytes_per_buffer(kind, size)),
            )
        }
        Operation::Provider { .. } => ("provider", None, None, None),
        Operation::Recycle => ("pool_recycle", None, None, None),
    };
    PagePoolResult {
        base,
        allocator,
        threads: if case.cross { "cross" } else { "single" },
        free: match case.free {
            Free::Each => "each",
            Free::Bulk => "bulk",
        },
        mtu,
        alloc_size,
        bytes_per_buffer: bytes,
        alloc_cycles: alloc,
        free_cycles: free,
        cycles_min: spread.min,
        cycles_max: spread.max,
        rounds: v.len(),
        excluded_share: share(cut, all),
    }
}

/// Memory each buffer takes: its page, or its page's share.
fn bytes_per_buffer(kind: Kind, size: usize) -> f64 {
    match kind {
        Kind::PoolPage => page_order_for(size).map_or(0, |o| 4096usize << o) as f64,
        Kind::FragCache | Kind::PoolFrags => {
            let page = 4096usize << FRAG_ORDER;
            page as f64 / (page / size.next_multiple_of(64)) as f64
        }
    }
}

/// The smallest page order holding `size` bytes.
pub fn page_order_for(size: usize) -> Option<u32> {
    (0..=3).find(|&o| 4096usize << o >= size)
}

fn print_row(ctx: &Ctx, r: &PagePoolResult) {
    if ctx.json_row(&r.base.case, r) {
        return;
    }
    let bytes = r
        .bytes_per_buffer
        .map_or_else(|| "-".to_owned(), |b| format!("{b:.0}"));
    emit(&format!(
        "{:<34} {:>5} {:>10.1} {:>8.1} {:>8.1} {:>8.1}  {:>9}  {:.1}-{:.1}, cut {:.1}%",
        r.base.case,
        r.base.cores,
        r.base.cycles_per_op,
        r.alloc_cycles,
        r.free_cycles,
        r.base.mops,
        bytes,
        r.cycles_min,
        r.cycles_max,
        100.0 * r.excluded_share
    ));
}

/// The three allocators side by side, one line per setting (cores × way of
/// freeing): this run's cycles per packet at each MTU.
pub fn side_by_side(rows: &[PagePoolResult]) -> Vec<String> {
    let find = |mtu: u32, a: &str, t: &str, f: &str| {
        rows.iter()
            .find(|r| r.mtu == Some(mtu) && r.allocator == a && r.threads == t && r.free == f)
            .map(|r| r.base.cycles_per_op)
    };
    let mut out = Vec::new();
    for (t, f, setting) in [
        ("cross", "each", "2 cores, per-buffer free"),
        ("cross", "bulk", "2 cores, bulk free"),
        ("single", "each", "1 core, per-buffer free"),
        ("single", "bulk", "1 core, bulk free"),
    ] {
        let get = |mtu| {
            Some((
                find(mtu, "pool_page", t, f)?,
                find(mtu, "frag_cache", t, f)?,
                find(mtu, "pool_frags", t, f)?,
            ))
        };
        let (Some((a1, b1, c1)), Some((a8, b8, c8))) = (get(1500), get(8000)) else {
            continue;
        };
        out.push(format!(
            "{setting}, cycles per packet: MTU 1500 (a) {a1:.1}, (b) {b1:.1}, (c) {c1:.1}; \
             MTU 8000 (a) {a8:.1}, (b) {b8:.1}, (c) {c8:.1}"
        ));
    }
    out
}

/// Buffer memory per posted Rx descriptor of a `soft` port in both modes,
/// read from the port's `rx_buf_bytes_per_desc` xstat: `rxbuf=mbuf` with a
/// mempool whose data room holds the largest frame (at least DPDK's 2 KiB)
/// behind the default 128-byte headroom, `rxbuf=frag` with a header pool of
/// no headroom and 64-byte data rooms (the fragment brings both; a posted
/// descriptor holds a fragment and no header).
pub fn rx_memory() -> Vec<String> {
    let mut out = vec![
        "Rx buffer memory per posted descriptor (soft port xstat \
                        rx_buf_bytes_per_desc):"
            .to_owned(),
    ];
    for (mtu, _) in MTUS {
        let frame = mtu as u16 + 18;
        let mut cells = Vec::new();
        for (mode, headroom, data_room) in [("mbuf", 128, frame.max(2048)), ("frag", 0, 64)] {
            let cell = rx_bytes_per_desc(mode, mtu as u16, headroom, data_room)
                .map_or_else(|e| format!("error: {e}"), |b| format!("{b} B"));
            cells.push(format!("rxbuf={mode} {cell}"));
        }
        out.push(format!("  MTU {mtu}: {}", cells.join(", ")));
    }
    out
}

fn rx_bytes_per_desc(mode: &str, mtu: u16, headroom: u16, data_room: u16) -> Result<u64, String> {
    use sluice::mbuf::{MbufPool, MbufPoolConfig};
    use sluice::port::PortConfig;
    let pool = MbufPool::new(MbufPoolConfig {
        name: format!("bench-rxmem-{mode}-{mtu}"),
        size: 255,
        cache_size: 0,
        headroom,
        data_room,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let mut config = PortConfig::new(Some(pool)).nb_rxd(64).nb_txd(64);
    config.mtu = mtu;
    let spec = format!("soft:tester=bench-rxmem-{mode}-{mtu},rxbuf={mode}");
    let port = sluice::driver::open(&spec, config).map_err(|e| e.to_string())?;
    port.counters()
        .xstats
        .get("rx_buf_bytes_per_desc")
        .ok_or_else(|| "no rx_buf_bytes_per_desc xstat".to_owned())
}

/// Packets forwarded per Rx mode (full selection; `--quick` a 16th).
const FWD_OPS: u64 = 1 << 23;

/// Interleaved rounds of the Rx modes' io forwarding.
const FWD_ROUNDS: usize = 32;

/// The Rx modes compared, and their rows.
const RX_MODES: [(&str, &str); 2] = [
    ("mbuf", "fwd io soft rxbuf=mbuf"),
    ("frag", "fwd io soft rxbuf=frag"),
];

/// io forwarding between two soft ports on one core (as `sluice bench
/// fwd`'s `soft io (inline)`, device cycles excluded) in both Rx modes, side
/// by side: what arming descriptors with page-pool fragments costs per
/// packet against plain mbufs. Each mode has its pair of ports and its
/// pool; the two run in interleaved rounds on the same core, so a change in
/// the machine's load moves both alike: a row's cycles per packet are the
/// median over rounds, and the frag / mbuf ratio the median of the
/// per-round ratios.
fn fwd_rx_modes(ctx: &mut Ctx, sel: Selection) {
    let ops = if sel == Selection::Full {
        ctx.ops(FWD_OPS)
    } else {
        ctx.ops(FWD_OPS) / 4
    };
    ctx.note(&format!(
        "io forwarding, two soft ports on one core (64-byte UDP frames, burst 32, device inline \
         and its cycles excluded), {ops} packets per Rx mode in {FWD_ROUNDS} interleaved rounds \
         (cycles per packet: median over rounds); one op = one packet forwarded:"
    ));
    match fwd_rx_measure(ctx.main_cpu(), ops) {
        Ok((rows, ratio)) => {
            for (name, r) in rows {
                ctx.report(name, Ok(r));
            }
            ctx.note(&format!(
                "rxbuf=frag / rxbuf=mbuf cycles per packet, median of {FWD_ROUNDS} interleaved \
                 rounds: {:.2} (min-max {:.2}-{:.2})",
                ratio.median, ratio.min, ratio.max
            ));
        }
        Err(e) => {
            for (_, name) in RX_MODES {
                ctx.report(name, Err(e.clone()));
            }
        }
    }
}

/// The Rx modes' rows, each with its name.
type RxModeRows = Vec<(&'static str, BenchResult)>;

/// Rows of [`fwd_rx_modes`] and the per-round frag / mbuf ratios, `ops`
/// packets per mode on `cpu`.
fn fwd_rx_measure(cpu: usize, ops: u64) -> Result<(RxModeRows, Spread), String> {
    use super::fwd::{bench_pool, open_two, soft_spec};
    use super::fwd_l3::{Slices, io_slice};
    use sluice::port::Port;
    let mut pairs = Vec::new();
    for (mode, _) in RX_MODES {
        let pool = bench_pool()?;
        let spec = format!(
            "{},rxbuf={mode}",
            soft_spec(&super::unique_name("bench_pp_fwd"))
        );
        let ports = open_two(&pool, &[spec.clone(), spec])?;
        pairs.push((pool, ports));
    }
    let slice = (ops / FWD_ROUNDS as u64).max(1024);
    let lcore_pools: Vec<_> = pairs.iter().map(|(p, _)| p.clone()).collect();
    let mut lcore_ports: Vec<Vec<Port>> =
        pairs.iter_mut().map(|(_, p)| std::mem::take(p)).collect();
    let slices = on_lcore(cpu, move || {
        let r = (|| {
            let mut counters = Vec::new();
            for ports in lcore_ports.iter_mut() {
                for port in ports.iter_mut() {
                    port.start().map_err(|e| e.to_string())?;
                }
                counters.push(ports.iter().map(Port::counters).collect::<Vec<_>>());
            }
            let warm = (slice / 2).max(1024);
            for (ports, counters) in lcore_ports.iter_mut().zip(&counters) {
                io_slice(ports, counters, warm)?;
            }
            let mut slices: Vec<Slices> = RX_MODES.iter().map(|_| Slices::default()).collect();
            interleave(FWD_ROUNDS, RX_MODES.len(), |_, mode| {
                io_slice(&mut lcore_ports[mode], &counters[mode], slice)
                    .map(|t| slices[mode].add(t))
            })?;
            Ok::<_, String>(slices)
        })();
        for ports in lcore_ports.iter_mut() {
            ports.iter_mut().for_each(Port::stop);
        }
        drop(lcore_ports);
        // Hand the cached buffers back before the lcore goes away.
        for pool in &lcore_pools {
            pool.flush_local_cache();
        }
        r
    })?;
    let ratio = Spread::of(&sluice_bench::stats::ratios(
        &slices[1].per_pkt,
        &slices[0].per_pkt,
    ));
    let mut rows = Vec::new();
    for (((_, name), s), (pool, _)) in RX_MODES.iter().zip(&slices).zip(&pairs) {
        let mut r = s.result(pool, name)?;
        r.bench = "pagepool";
        rows.push((*name, r));
    }
    Ok((rows, ratio))
}

/// Something that hands out packet buffers.
trait Source: Send + 'static {
    /// A buffer handle of this source.
    type Buffer: Send + 'static;
    /// One buffer. (The library's error type, unconverted: a handle moved
    /// from one `Result` into another goes through memory.)
    fn get(&mut self) -> Result<Self::Buffer, PagePoolError>;
    /// Makes the calling lcore the owner of the pool behind, if any.
    fn bind(&self) -> Result<(), String>;
    /// Frees one buffer through `bulk` (or on its own, for blocks).
    #[inline(always)]
    fn free_bulk(bulk: &mut BulkFree, h: Self::Buffer) {
        let _ = bulk;
        drop(h);
    }
}

struct PoolPages(PagePool);

impl Source for PoolPages {
    type Buffer = Page;
    #[inline(always)]
    fn free_bulk(bulk: &mut BulkFree, h: Page) {
        bulk.free_page(h);
    }
    #[inline(always)]
    fn get(&mut self) -> Result<Page, PagePoolError> {
        self.0.alloc_page()
    }

    fn bind(&self) -> Result<(), String> {
        self.0.bind_to_current_lcore().map_err(|e| e.to_string())
    }
}

struct PoolFrags(PageFragAlloc, usize);

impl Source for PoolFrags {
    type Buffer = Frag;
    #[inline(always)]
    fn free_bulk(bulk: &mut BulkFree, h: Frag) {
        bulk.free_frag(h);
    }
    #[inline(always)]
    fn get(&mut self) -> Result<Frag, PagePoolError> {
        self.0.alloc_frag(self.1)
    }
    fn bind(&self) -> Result<(), String> {
        self.0
            .pool()
            .bind_to_current_lcore()
            .map_err(|e| e.to_string())
    }
}

struct CacheFrags(PageFragCache, usize);

impl Source for CacheFrags {
    type Buffer = Frag;
    #[inline(always)]
    fn free_bulk(bulk: &mut BulkFree, h: Frag) {
        bulk.free_frag(h);
    }
    #[inline(always)]
    fn get(&mut self) -> Result<Frag, PagePoolError> {
        self.0.alloc_frag(self.1)
    }
    fn bind(&self) -> Result<(), String> {
        Ok(())
    }
}

struct ProviderBlocks(BlockProvider);

impl Source for ProviderBlocks {
    type Buffer = sluice::pagepool::Block;
    #[inline(always)]
    fn get(&mut self) -> Result<Self::Buffer, PagePoolError> {
        self.0.alloc(FRAG_ORDER)
    }
    fn bind(&self) -> Result<(), String> {
        Ok(())
    }
}

fn pool(provider: &BlockProvider, order: u32) -> Result<PagePool, String> {
    PagePool::new(
        provider,
        PagePoolConfig {
            name: format!("bench-order{order}"),
            order,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())
}

/// One slice of `case`: `ops` buffers, fresh allocators.
fn measure(ctx: &Ctx, provider: &BlockProvider, case: Case, ops: u64) -> Result<Split, String> {
    let cpu = ctx.main_cpu();
    let pair = ctx.cpu_pair();
    let warm = (IN_FLIGHT * 4) as u64;
    macro_rules! go {
        ($src:expr, $out:expr) => {{
            let src = $src;
            if case.cross {
                let (a, b) = pair.ok_or_else(|| "needs two CPUs".to_owned())?;
                cross(src, (a, b), $out, warm, ops, case.free)
            } else {
                on_lcore(cpu, move || {
                    let mut src = src;
                    src.bind()?;
                    single(&mut src, $out, warm, ops, case.free)
                })
            }
        }};
    }
    let split = match case.op {
        Operation::Alloc { kind, size, .. } => match kind {
            Kind::PoolPage => {
                let order = page_order_for(size).ok_or("no page order fits")?;
                go!(PoolPages(pool(provider, order)?), IN_FLIGHT)
            }
            Kind::PoolFrags => go!(
                PoolFrags(PageFragAlloc::new(pool(provider, FRAG_ORDER)?), size),
                IN_FLIGHT
            ),
            Kind::FragCache => go!(
                CacheFrags(
                    PageFragCache::new(provider, FRAG_ORDER).map_err(|e| e.to_string())?,
                    size
                ),
                IN_FLIGHT
            ),
        },
        Operation::Provider { out } => go!(ProviderBlocks(provider.clone()), out),
        Operation::Recycle => go!(PoolPages(pool(provider, FRAG_ORDER)?), IN_FLIGHT),
    }?;
    if !provider.is_full() {
        return Err(format!(
            "{}: the block provider is not full after the slice",
            case.name()
        ));
    }
    Ok(split)
}

/// Buffers held, oldest first: a fixed ring of slots (no growth path: a
/// `VecDeque` push spills the new handle to the stack and copies it back
/// with a wider load, which cannot be store-forwarded — a dozen cycles per
/// buffer that belong to no allocator).
struct Held<H> {
    slots: Box<[Option<H>]>,
    mask: usize,
    head: usize,
    len: usize,
}

impl<H> Held<H> {
    /// Room for at least `cap` handles.
    fn new(cap: usize) -> Held<H> {
        let n = cap.next_power_of_two();
        Held {
            slots: (0..n).map(|_| None).collect(),
            mask: n - 1,
            head: 0,
            len: 0,
        }
    }

    #[inline(always)]
    fn push(&mut self, h: H) {
        debug_assert!(self.len <= self.mask);
        self.slots[(self.head + self.len) & self.mask] = Some(h);
        self.len += 1;
    }

    #[inline(always)]
    fn pop(&mut self) -> Option<H> {
        if self.len == 0 {
            return None;
        }
        let h = self.slots[self.head & self.mask].take();
        self.head += 1;
        self.len -= 1;
        h
    }
}

/// One core: keep `out` buffers, allocate a batch, free the oldest batch.
#[inline(never)]
fn single<S: Source>(
    src: &mut S,
    out: usize,
    warm: u64,
    ops: u64,
    free: Free,
) -> Result<Split, String> {
    let mut bulk = BulkFree::new();
    let mut held: Held<S::Buffer> = Held::new(out + BATCH);
    for _ in 0..out {
        held.push(src.get().map_err(|e| e.to_string())?);
    }
    let mut split = Split::default();
    let batches = ops.div_ceil(BATCH as u64);
    let warm_batches = warm.div_ceil(BATCH as u64);
    for b in 0..warm_batches + batches {
        let t0 = rdtsc();
        for _ in 0..BATCH {
            match src.get() {
                Ok(h) => held.push(h),
                Err(e) => return Err(e.to_string()),
            }
        }
        let t1 = rdtsc();
        free_batch::<S>(&mut bulk, free, || held.pop());
        let t2 = rdtsc();
        if b >= warm_batches {
            split.add(false, t1 - t0);
            split.add(true, t2 - t1);
        }
    }
    drop(bulk);
    drop(held);
    Ok(split)
}

/// Frees a batch of [`BATCH`] buffers taken from `next`: each dropped, or
/// through `bulk`, flushed at the end.
#[inline(always)]
fn free_batch<S: Source>(
    bulk: &mut BulkFree,
    free: Free,
    mut next: impl FnMut() -> Option<S::Buffer>,
) {
    match free {
        Free::Each => {
            for _ in 0..BATCH {
                drop(black_box(next()));
            }
        }
        Free::Bulk => {
            for _ in 0..BATCH {
                if let Some(h) = next() {
                    S::free_bulk(bulk, black_box(h));
                }
            }
            bulk.flush();
        }
    }
}

/// Two cores: the owner lcore allocates batches and hands them over an SP/SC
/// ring (at most `out`, and at least a batch, in it) to a second lcore,
/// which frees them.
fn cross<S: Source>(
    src: S,
    cpus: (usize, usize),
    out: usize,
    warm: u64,
    ops: u64,
    free: Free,
) -> Result<Split, String> {
    let total = (warm + ops).div_ceil(BATCH as u64) * BATCH as u64;
    let warm = warm.div_ceil(BATCH as u64) * BATCH as u64;
    let (mut tx, mut rx) =
        // Room for a batch at least: batches move whole.
        Ring::<S::Buffer>::spsc(out.max(BATCH).next_power_of_two()).map_err(|e| e.to_string())?;
    let barrier = Arc::new(SpinBarrier::new(2));
    let b2 = Arc::clone(&barrier);
    // Set by the freeing lcore when it has freed everything: only then may
    // the allocating one drop its allocator (a pool dropped with pages out
    // is leaked, not freed).
    let done = Arc::new(AtomicBool::new(false));
    let done2 = Arc::clone(&done);
    let alloc: Worker<Split> = Box::new(move || {
        let mut src = src;
        src.bind()?;
        let mut stall = Stall::new("allocating lcore");
        let mut batch: Held<S::Buffer> = Held::new(BATCH);
        let mut split = Split::default();
        barrier.wait()?;
        let mut sent = 0u64;
        while sent < total {
            // After the untimed hand-off: its stores drained, its loads done.
            let t0 = rdtsc_drained();
            for _ in 0..BATCH {
                match src.get() {
                    Ok(h) => batch.push(h),
                    Err(e) => return Err(e.to_string()),
                }
            }
            let t1 = rdtsc_completed();
            if sent >= warm {
                split.add(false, t1 - t0);
            }
            // The hand-off: the batch into the ring in one move (one tail
            // publish), untimed.
            loop {
                if let Some(chunk) = tx.reserve(BATCH) {
                    chunk.fill_from_iter(std::iter::from_fn(|| batch.pop()));
                    break;
                }
                stall.failed()?;
            }
            stall.progressed();
            sent += BATCH as u64;
        }
        // Acquire pairs with the Release store below: every free happened.
        while !done.load(Ordering::Acquire) {
            stall.failed()?;
        }
        drop(src);
        Ok(split)
    });
    let free: Worker<Split> = Box::new(move || {
        let mut stall = Stall::new("freeing lcore");
        let mut bulk = BulkFree::new();
        let mut batch: Held<S::Buffer> = Held::new(BATCH);
        let mut split = Split::default();
        b2.wait()?;
        let mut freed = 0u64;
        while freed < total {
            // The hand-off: a whole batch out of the ring in one move (one
            // head publish), untimed.
            loop {
                if let Some(chunk) = rx.peek(BATCH) {
                    chunk.drain().for_each(|h| batch.push(h));
                    break;
                }
                stall.failed()?;
            }
            stall.progressed();
            let t0 = rdtsc_drained();
            free_batch::<S>(&mut bulk, free, || batch.pop());
            let t1 = rdtsc_completed();
            if freed >= warm {
                split.add(true, t1 - t0);
            }
            freed += BATCH as u64;
        }
        // Every buffer home before the allocating side may drop its pool.
        drop(bulk);
        done2.store(true, Ordering::Release);
        Ok(split)
    });
    let v = on_lcores(vec![(cpus.0, alloc), (cpus.1, free)])?;
    Ok(Split {
        alloc: v[0].alloc,
        alloc_ops: v[0].alloc_ops,
        free: v[1].free,
        free_ops: v[1].free_ops,
        cut: v[0].cut + v[1].cut,
        all: v[0].all + v[1].all,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_rx_modes_forward_and_return_every_buffer() {
        let cpu = sluice::lcore::available_cpus()[0];
        let ops = FWD_ROUNDS as u64 * 1024;
        // A row is built only with its pool full again (`Slices::result`).
        let (rows, ratio) = fwd_rx_measure(cpu, ops).unwrap();
        let names: Vec<&str> = rows.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["fwd io soft rxbuf=mbuf", "fwd io soft rxbuf=frag"]);
        for (name, r) in &rows {
            assert!(r.ops >= ops, "{name}: {}", r.ops);
            assert!(r.cycles_per_op > 0.0 && r.mops > 0.0, "{name}");
            assert_eq!(r.bench, "pagepool");
        }
        assert!(ratio.min > 0.0 && ratio.min <= ratio.median && ratio.median <= ratio.max);
    }

    #[test]
    fn sizes_orders_and_bytes_per_buffer() {
        assert_eq!(MTUS, [(1500, 2090), (8000, 8590)]);
        assert_eq!(page_order_for(2090), Some(0));
        assert_eq!(page_order_for(8590), Some(2));
        assert_eq!(page_order_for(40000), None);
        assert_eq!(bytes_per_buffer(Kind::PoolPage, 2090), 4096.0);
        assert_eq!(bytes_per_buffer(Kind::PoolFrags, 2090), 32768.0 / 15.0);
        assert_eq!(bytes_per_buffer(Kind::FragCache, 8590), 32768.0 / 3.0);
    }

    #[test]
    fn every_case_runs_and_gives_back_every_block() {
        let mut ctx = Ctx::new(true, Some(BATCH as u64 * 4), false);
        let provider = BlockProvider::new(ProviderConfig {
            name: "t".into(),
            size: 64 << 20,
            ..Default::default()
        })
        .unwrap();
        let mut ops: Vec<Operation> = vec![Operation::Provider { out: 0 }, Operation::Recycle];
        for kind in Kind::ALL {
            ops.push(Operation::Alloc {
                kind,
                mtu: 8000,
                size: 8590,
            });
        }
        for op in ops {
            for (cross, free) in [
                (false, Free::Each),
                (true, Free::Each),
                (false, Free::Bulk),
                (true, Free::Bulk),
            ] {
                if cross && ctx.cpu_pair().is_none() {
                    continue;
                }
                let case = Case { op, cross, free };
                let s = measure(&ctx, &provider, case, BATCH as u64 * 4).unwrap();
                // Batches taking over 50 µs (a busy machine) are left out.
                assert!(s.alloc_ops <= BATCH as u64 * 4 && s.free_ops <= BATCH as u64 * 4);
                assert!(s.all > 0 && s.cut <= s.all);
                assert!(provider.is_full());
            }
        }
        ctx.header();
    }

    #[test]
    fn the_allocators_stand_side_by_side() {
        let row = |mtu, allocator, c| PagePoolResult {
            base: BenchResult::new("pagepool", String::new(), 1, c, 1.0),
            allocator,
            threads: "single",
            free: "each",
            mtu: Some(mtu),
            alloc_size: None,
            bytes_per_buffer: None,
            alloc_cycles: 0.0,
            free_cycles: 0.0,
            cycles_min: c,
            cycles_max: c,
            rounds: 1,
            excluded_share: 0.0,
        };
        let rows = vec![
            row(1500, "pool_page", 40.0),
            row(1500, "frag_cache", 50.0),
            row(1500, "pool_frags", 20.0),
            row(8000, "pool_page", 40.0),
            row(8000, "frag_cache", 150.0),
            row(8000, "pool_frags", 45.0),
        ];
        let v = side_by_side(&rows);
        assert_eq!(
            v,
            [
                "1 core, per-buffer free, cycles per packet: MTU 1500 (a) 40.0, (b) 50.0, (c) \
              20.0; MTU 8000 (a) 40.0, (b) 150.0, (c) 45.0"
            ]
        );
        // A setting missing an allocator gives no line.
        assert!(side_by_side(&rows[1..]).is_empty());
    }
}
