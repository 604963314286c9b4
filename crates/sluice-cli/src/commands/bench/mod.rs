//! `sluice bench`: micro-benchmarks of the library's building blocks.
//!
//! Each part measures with the harness of the `sluice_bench` crate (its
//! documentation describes the method: TSC cycles on the working core,
//! interleaved rounds, medians and spreads, the core-contention probe) and
//! prints a table, or with `--json` one JSON object per result line on
//! stdout (notes and skipped cases then go to stderr). `all` shows its
//! progress on stderr (`app::progress`).

pub mod distributor;
pub mod dpdk;
pub mod fwd;
pub mod fwd_afpacket;
pub mod fwd_afxdp;
pub mod fwd_l3;
pub mod fwd_testpmd;
pub mod fwd_vector;
pub mod fwd_vm;
pub mod lpm;
pub mod mbuf;
pub mod mempool;
pub mod mpwqe;
pub mod pagepool;
pub mod recycle;
pub mod ring;
pub mod telemetry;
pub mod testpmd;
pub mod veth;

use clap::{Args, ValueEnum};

use crate::app::progress::Progress;
pub use sluice_bench::contention::{self, note as note_contention};
pub use sluice_bench::{
    BenchResult, Ctx, Sample, SpinBarrier, Stall, Worker, emit, mops, on_lcore, on_lcores,
    unique_name,
};

/// Arguments of `sluice bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    pub part: Part,
    /// Print one JSON object per result line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Operations (elements) timed per case and per worker core, instead of the
    /// default.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1u64 << 36))]
    pub iters: Option<u64>,
    /// A quick look: 16x fewer operations per case (noisier figures).
    #[arg(long)]
    pub quick: bool,
    /// `fwd` and `recycle` only: run just the cases whose name contains
    /// TEXT (case-insensitive), e.g. `--case vhost`; `recycle` runs each
    /// group (the three paths compared) with a case that matches, e.g.
    /// `--case "recycle fast-free, 1"`.
    #[arg(long, value_name = "TEXT")]
    pub case: Option<String>,
    #[command(flatten)]
    pub recycle: recycle::RecycleArgs,
}

/// The benchmark sets.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Lock-free ring: cycles per element enqueued and dequeued.
    Ring,
    /// Mempool: cycles per element got and put back, one and two cores.
    Mempool,
    /// Mbuf: alloc + free, single and bulk 32.
    Mbuf,
    /// Forwarding: io between two ports on one core (null, pair, soft).
    Fwd,
    /// Tx→Rx buffer recycling: normal free vs zero-copy cache put vs
    /// recycle, io forwarding between soft ports.
    Recycle,
    /// Distributor: cycles per packet on the distributor core, burst API
    /// (SIMD and scalar matching) vs single-packet API, 1..8 workers.
    Distributor,
    /// Longest-prefix match: cycles per lookup, single and bulk, IPv4 with
    /// 1k, 100k and 1M routes, IPv6 with 1000 (and 100k); route add and
    /// delete.
    Lpm,
    /// Multi-packet Tx WQEs vs one WQE per packet on soft ports: txonly
    /// and io, 64..1500 bytes, one flow or mixed offloads; driver cycles,
    /// bus bytes per packet, link utilisation.
    Mpwqe,
    /// Page pool: alloc + free per packet at MTU 1500 and 8000 for a
    /// page per packet, page_frag_cache and page-pool fragments.
    Pagepool,
    /// Telemetry: io forwarding between soft ports with the telemetry
    /// socket polled 100 times a second against not polled, interleaved.
    Telemetry,
    /// All of the above.
    All,
}

impl Part {
    /// The part's name on the command line (`ring`, `fwd`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Part::Ring => "ring",
            Part::Mempool => "mempool",
            Part::Mbuf => "mbuf",
            Part::Fwd => "fwd",
            Part::Recycle => "recycle",
            Part::Distributor => "distributor",
            Part::Lpm => "lpm",
            Part::Mpwqe => "mpwqe",
            Part::Pagepool => "pagepool",
            Part::Telemetry => "telemetry",
            Part::All => "all",
        }
    }
}

/// Which cases of a part to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Every case.
    Full,
    /// A handful of cases, for a short look.
    Summary,
}

/// Runs `part` as `sluice bench` does.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    if args.recycle.any() && !matches!(args.part, Part::Recycle | Part::All) {
        return Err(
            "--rxd, --txd, --cache, --source, --preload and --path apply to `sluice bench recycle` only"
                .into(),
        );
    }
    if args.case.is_some() && !matches!(args.part, Part::Fwd | Part::Recycle) {
        return Err("--case applies to `sluice bench fwd` and `recycle` only".into());
    }
    let mut ctx = Ctx::new(args.json, args.iters, args.quick).with_case_filter(args.case.clone());
    let parts: &[Part] = match args.part {
        Part::All => &[
            Part::Ring,
            Part::Mempool,
            Part::Mbuf,
            Part::Fwd,
            Part::Recycle,
            Part::Distributor,
            Part::Lpm,
            Part::Mpwqe,
            Part::Pagepool,
            Part::Telemetry,
        ],
        Part::Ring => &[Part::Ring],
        Part::Mempool => &[Part::Mempool],
        Part::Mbuf => &[Part::Mbuf],
        Part::Fwd => &[Part::Fwd],
        Part::Recycle => &[Part::Recycle],
        Part::Distributor => &[Part::Distributor],
        Part::Lpm => &[Part::Lpm],
        Part::Mpwqe => &[Part::Mpwqe],
        Part::Pagepool => &[Part::Pagepool],
        Part::Telemetry => &[Part::Telemetry],
    };
    // In `all`, the parts that take long run their summary.
    let sel = if args.part == Part::All {
        Selection::Summary
    } else {
        Selection::Full
    };
    // `all` takes minutes: its progress goes to stderr, one step a part.
    let mut progress = (args.part == Part::All).then(|| Progress::new(parts.len(), "bench"));
    for part in parts {
        let name = part.name();
        if let Some(p) = &progress {
            p.working_on(name);
        }
        match part {
            Part::Ring => ring::run(&mut ctx, Selection::Full),
            Part::Mempool => mempool::run(&mut ctx, Selection::Full),
            Part::Mbuf => mbuf::run(&mut ctx, Selection::Full),
            Part::Fwd => fwd::run(&mut ctx, Selection::Full),
            // In `all`, one port pair (half the time).
            Part::Recycle => {
                recycle::run(&mut ctx, sel, recycle::Opts::from_args(&args.recycle));
            }
            // In `all`, one worker.
            Part::Distributor => distributor::run(&mut ctx, sel),
            // In `all`, the 1k and 100k IPv4 and the 1000 IPv6 sets.
            Part::Lpm => lpm::run(&mut ctx, sel),
            // In `all`, 64 bytes, one flow.
            Part::Mpwqe => mpwqe::run(&mut ctx, sel),
            // In `all`, the allocator cases only.
            Part::Pagepool => pagepool::run(&mut ctx, sel),
            Part::Telemetry => telemetry::run(&mut ctx, sel),
            Part::All => unreachable!("expanded above"),
        }
        if let Some(p) = &mut progress {
            p.step(name);
        }
    }
    if let Some(p) = progress {
        p.finish();
    }
    match ctx.failures() {
        0 => Ok(()),
        n => Err(format!("{n} benchmark case(s) failed")),
    }
}
