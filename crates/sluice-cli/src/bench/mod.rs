//! `sluice bench`: micro-benchmarks of the library's building blocks.
//!
//! Every figure is measured with the TSC on the core doing the work (cycles are
//! TSC ticks, see `sluice::tsc`), after an untimed warm-up, with results passed
//! through `black_box` and checked (a case that moved fewer elements than it
//! should is an error, not a fast figure). Multi-core cases run on pinned lcore
//! threads that leave a start barrier together.
//!
//! Output is a table, or with `--json` one JSON object per result line on
//! stdout (notes and skipped cases then go to stderr).

pub mod contention;
pub mod distributor;
pub mod fwd;
pub mod fwd_afpacket;
pub mod fwd_afxdp;
pub mod fwd_l3;
pub mod lpm;
pub mod mbuf;
pub mod mempool;
pub mod mpwqe;
pub mod pagepool;
pub mod recycle;
pub mod ring;
pub mod veth;

use std::hint::spin_loop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde::Serialize;
use sluice::{lcore, tsc};

pub use crate::app::lcores::{Stall, panic_message};
pub use crate::app::output::emit;

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
    /// Page pool (T3): alloc + free per packet at MTU 1500 and 8000 for a
    /// page per packet, page_frag_cache and page-pool fragments.
    Pagepool,
    /// All of the above.
    All,
}

/// Which cases of a part to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Every case.
    Full,
    /// A handful of cases, for a short look.
    Summary,
}

/// One measured case.
#[derive(Serialize, Debug, Clone)]
pub struct BenchResult {
    /// The benchmark set: `ring`, `mempool`, `mbuf`, `fwd`, `recycle`,
    /// `distributor`, `lpm`, `pagepool`.
    pub bench: &'static str,
    /// The case, unique within its set.
    pub case: String,
    /// TSC cycles per operation (see each set for what one operation is and how
    /// multi-core figures combine).
    pub cycles_per_op: f64,
    /// Millions of operations per second (all cores together).
    pub mops: f64,
    /// Cores working at once.
    pub cores: u32,
    /// Elements per call, for batched cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bulk: Option<usize>,
    /// Per-lcore cache size, for mempool cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<u32>,
    /// Operations timed, all cores together.
    pub ops: u64,
    /// The measured TSC frequency.
    pub tsc_hz: u64,
    /// Two-core ring cases: producer cycles per element.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer_cycles: Option<f64>,
    /// Two-core ring cases: consumer cycles per element.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_cycles: Option<f64>,
    /// Two-core ring cases: attempts that found the ring full, per successful
    /// enqueue call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer_waits: Option<f64>,
    /// Two-core ring cases: attempts that found the ring empty, per successful
    /// dequeue call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_waits: Option<f64>,
    /// Mempool cases: the memory the pool sits on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backing: Option<String>,
    /// DPDK 22.11's figure for the same case in cycles per op (ANCHORS.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpdk_cycles_per_op: Option<f64>,
    /// DPDK 22.11's figure for the same case in Mops (ANCHORS.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpdk_mops: Option<f64>,
}

impl BenchResult {
    /// A result with the required fields; the optional ones are `None`.
    pub fn new(
        bench: &'static str,
        case: String,
        cores: u32,
        cycles_per_op: f64,
        mops: f64,
    ) -> Self {
        BenchResult {
            bench,
            case,
            cycles_per_op,
            mops,
            cores,
            bulk: None,
            cache: None,
            ops: 0,
            tsc_hz: tsc::tsc_hz(),
            producer_cycles: None,
            consumer_cycles: None,
            producer_waits: None,
            consumer_waits: None,
            backing: None,
            dpdk_cycles_per_op: None,
            dpdk_mops: None,
        }
    }
}

/// What a worker measured.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Operations timed.
    pub ops: u64,
    /// TSC at the start of the timed region.
    pub start: u64,
    /// TSC at its end.
    pub end: u64,
}

impl Sample {
    /// Cycles in the timed region.
    pub fn cycles(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Cycles per operation.
    pub fn cycles_per_op(&self) -> f64 {
        self.cycles() as f64 / self.ops.max(1) as f64
    }

    /// Millions of operations per second.
    pub fn mops(&self) -> f64 {
        mops(self.ops, self.cycles())
    }
}

/// Millions of operations per second for `ops` done in `cycles` TSC ticks.
pub fn mops(ops: u64, cycles: u64) -> f64 {
    ops as f64 / tsc::cycles_to_secs(cycles.max(1)) / 1e6
}

/// Where and how much to run; shared by every part.
pub struct Ctx {
    /// Print JSON lines instead of a table.
    pub json: bool,
    /// Operations per case: `--iters`, else the part's default scaled by
    /// `--quick`.
    iters: Option<u64>,
    quick: bool,
    /// The CPUs this process may use.
    pub cpus: Vec<usize>,
    header_printed: bool,
    failures: usize,
}

impl Ctx {
    /// A context for `args`; measures the TSC frequency.
    pub fn new(json: bool, iters: Option<u64>, quick: bool) -> Self {
        // Read the CPU set before any pinning.
        let cpus = lcore::available_cpus();
        let _ = tsc::tsc_hz();
        Ctx {
            json,
            iters,
            quick,
            cpus,
            header_printed: false,
            failures: 0,
        }
    }

    /// Operations per case for a part whose full-run default is `default`.
    pub fn ops(&self, default: u64) -> u64 {
        match self.iters {
            Some(n) => n,
            None if self.quick => (default / 16).max(1),
            None => default,
        }
    }

    /// The CPU one-core cases run on (the first available, as DPDK's main lcore).
    pub fn main_cpu(&self) -> usize {
        self.cpus[0]
    }

    /// The two CPUs of two-core cases, or `None` with fewer than two.
    pub fn cpu_pair(&self) -> Option<(usize, usize)> {
        match self.cpus.as_slice() {
            [a, b, ..] => Some((*a, *b)),
            _ => None,
        }
    }

    /// Prints the run's header (TSC frequency, CPUs) once.
    pub fn header(&mut self) {
        if self.header_printed {
            return;
        }
        self.header_printed = true;
        let hz = tsc::tsc_hz();
        let invariant = if tsc::is_invariant() {
            "invariant"
        } else {
            "NOT invariant: cycle figures are unreliable"
        };
        let pair = match self.cpu_pair() {
            Some((a, b)) => format!("two-core cases on CPUs {a} and {b}"),
            None => "two-core cases skipped (one CPU)".to_owned(),
        };
        self.note(&format!(
            "TSC {:.1} MHz ({invariant}); every cycles figure is TSC ticks. \
             One-core cases on CPU {}, {pair}.",
            hz as f64 / 1e6,
            self.main_cpu()
        ));
    }

    /// Starts a part's table: a title line, notes, then the column heads.
    pub fn section(&mut self, title: &str, notes: &[String]) {
        self.title(title, notes);
        if !self.json {
            emit(&format!(
                "{:<28} {:>5} {:>10} {:>10}  {:<14} detail",
                "case", "cores", "cycles/op", "Mops", "DPDK 22.11"
            ));
        }
    }

    /// Starts a part's table with a title line and notes (a part with its
    /// own columns prints their heads next).
    pub fn title(&mut self, title: &str, notes: &[String]) {
        self.header();
        self.note("");
        self.note(&format!("== {title} =="));
        for n in notes {
            self.note(n);
        }
    }

    /// Prints a human note: stdout for tables, stderr with `--json`.
    pub fn note(&self, msg: &str) {
        if self.json {
            eprintln!("{msg}");
        } else {
            emit(msg);
        }
    }

    /// Reports a case that was not run, and why.
    pub fn skip(&self, case: &str, reason: &str) {
        self.note(&format!("{case:<28} skipped: {reason}"));
    }

    /// Reports a failed case.
    pub fn fail(&self, case: &str, err: &str) {
        if self.json {
            eprintln!("{case}: FAILED: {err}");
        } else {
            emit(&format!("{case:<28} FAILED: {err}"));
        }
    }

    /// Prints one result: a table row, or one JSON object on one line.
    pub fn row(&self, r: &BenchResult) {
        if self.json {
            match serde_json::to_string(r) {
                Ok(line) => emit(&line),
                Err(e) => eprintln!("{}: cannot encode result: {e}", r.case),
            }
        } else {
            let dpdk = match (r.dpdk_cycles_per_op, r.dpdk_mops) {
                (Some(c), _) => format!("{c} cyc"),
                (None, Some(m)) => format!("{m} Mops"),
                (None, None) => "-".to_owned(),
            };
            let mut detail = Vec::new();
            if let (Some(p), Some(c)) = (r.producer_cycles, r.consumer_cycles) {
                detail.push(format!("enq {p:.2} + deq {c:.2}"));
            }
            if let (Some(p), Some(c)) = (r.producer_waits, r.consumer_waits) {
                detail.push(format!("waits/call: full {p:.2}, empty {c:.2}"));
            }
            if let Some(b) = &r.backing {
                detail.push(b.clone());
            }
            let line = format!(
                "{:<28} {:>5} {:>10.2} {:>10.1}  {:<14} {}",
                r.case,
                r.cores,
                r.cycles_per_op,
                r.mops,
                dpdk,
                detail.join(", ")
            );
            emit(line.trim_end());
        }
    }

    /// Prints `result` as a row, or the error as a failed case, so that one
    /// failed case does not stop the others (the run's exit status reports it:
    /// see [`Ctx::failures`]).
    pub fn report(&mut self, case: &str, result: Result<BenchResult, String>) {
        match result {
            Ok(r) => self.row(&r),
            Err(e) => {
                self.fail(case, &e);
                self.failures += 1;
            }
        }
    }

    /// Number of cases that failed so far.
    pub fn failures(&self) -> usize {
        self.failures
    }
}

/// Runs `part` as `sluice bench` does.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    if args.recycle.any() && !matches!(args.part, Part::Recycle | Part::All) {
        return Err(
            "--rxd, --txd, --cache, --source and --preload apply to `sluice bench recycle` only"
                .into(),
        );
    }
    let mut ctx = Ctx::new(args.json, args.iters, args.quick);
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
    };
    // In `all`, the parts that take long run their summary.
    let sel = if args.part == Part::All {
        Selection::Summary
    } else {
        Selection::Full
    };
    for part in parts {
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
            Part::All => unreachable!("expanded above"),
        }
    }
    match ctx.failures() {
        0 => Ok(()),
        n => Err(format!("{n} benchmark case(s) failed")),
    }
}

/// A one-shot barrier for worker threads: `wait` spins until all `n` arrived,
/// so the workers leave it within a few hundred cycles of each other (a
/// sleeping barrier would add the wake-up latency of the last one).
pub struct SpinBarrier {
    arrived: AtomicUsize,
    n: usize,
}

impl SpinBarrier {
    /// A barrier for `n` threads.
    pub fn new(n: usize) -> Self {
        SpinBarrier {
            arrived: AtomicUsize::new(0),
            n,
        }
    }

    /// Waits for all threads; `Err` after 10 s (a worker died before arriving).
    pub fn wait(&self) -> Result<(), String> {
        // AcqRel/Acquire: whatever a thread did before arriving is visible to the
        // others once they leave.
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let start = Instant::now();
        let mut spins = 0u32;
        while self.arrived.load(Ordering::Acquire) < self.n {
            spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && start.elapsed() > Duration::from_secs(10) {
                return Err("the other worker did not reach the start barrier in 10 s".into());
            }
        }
        Ok(())
    }
}

/// Runs `f` on an lcore pinned to `cpu` and returns its result.
pub fn on_lcore<T, F>(cpu: usize, f: F) -> Result<T, String>
where
    F: FnOnce() -> Result<T, String> + Send + 'static,
    T: Send + 'static,
{
    let h = lcore::launch(Some(cpu), f).map_err(|e| e.to_string())?;
    h.join()
        .map_err(|p| format!("worker panicked: {}", panic_message(&*p)))?
}

/// A boxed worker for [`on_lcores`].
pub type Worker<T> = Box<dyn FnOnce() -> Result<T, String> + Send>;

/// Runs each `(cpu, worker)` on its own pinned lcore, all started together
/// (all or nothing), and returns their results in order.
pub fn on_lcores<T: Send + 'static>(jobs: Vec<(usize, Worker<T>)>) -> Result<Vec<T>, String> {
    let handles = lcore::launch_all(jobs.into_iter().map(|(cpu, f)| (Some(cpu), f)))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(handles.len());
    let mut first_err = None;
    for h in handles {
        let r = h
            .join()
            .map_err(|p| format!("worker panicked: {}", panic_message(&*p)))
            .and_then(|r| r);
        match r {
            Ok(v) => out.push(v),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        None => Ok(out),
        Some(e) => Err(e),
    }
}

/// A name no other bench in this process has used: `{prefix}_{n}`. Soft
/// ports cable to a tester or a wire by name, so two benches — or two tests
/// running at once — that picked the same name would share one.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Prints the core-contention probe's line ([`contention`]) for the CPUs
/// of two-core cases, if there are two.
pub fn note_contention(ctx: &Ctx) {
    let Some(cpus) = ctx.cpu_pair() else { return };
    match contention::measure(cpus, contention::ITERS) {
        Ok(c) => ctx.note(&c.describe(cpus)),
        Err(e) => ctx.note(&format!("core contention: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_has_the_required_fields_and_skips_absent_ones() {
        let mut r = BenchResult::new("ring", "SP/SC bulk 32".into(), 1, 1.5, 1730.0);
        r.bulk = Some(32);
        let line = serde_json::to_string(&r).unwrap();
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["bench"], "ring");
        assert_eq!(v["case"], "SP/SC bulk 32");
        assert_eq!(v["cycles_per_op"], 1.5);
        assert_eq!(v["mops"], 1730.0);
        assert_eq!(v["bulk"], 32);
        assert!(v["tsc_hz"].as_u64().unwrap() > 0);
        assert!(v.get("cache").is_none());
        assert!(v.get("backing").is_none());
    }

    #[test]
    fn sample_rates() {
        let s = Sample {
            ops: 1000,
            start: 5_000,
            end: 15_000,
        };
        assert_eq!(s.cycles(), 10_000);
        assert_eq!(s.cycles_per_op(), 10.0);
        let expect = tsc::tsc_hz() as f64 / 10.0 / 1e6;
        assert!((s.mops() - expect).abs() < 1e-6 * expect);
    }

    #[test]
    fn ops_scale_with_quick_and_iters() {
        let ctx = Ctx::new(true, None, false);
        assert_eq!(ctx.ops(1 << 20), 1 << 20);
        let ctx = Ctx::new(true, None, true);
        assert_eq!(ctx.ops(1 << 20), 1 << 16);
        let ctx = Ctx::new(true, Some(77), true);
        assert_eq!(ctx.ops(1 << 20), 77);
    }

    #[test]
    fn barrier_releases_all() {
        let b = std::sync::Arc::new(SpinBarrier::new(2));
        let b2 = std::sync::Arc::clone(&b);
        let t = std::thread::spawn(move || b2.wait());
        assert_eq!(b.wait(), Ok(()));
        assert_eq!(t.join().unwrap(), Ok(()));
    }

    #[test]
    fn worker_panics_and_errors_become_errors() {
        let cpu = lcore::available_cpus()[0];
        let err = on_lcore::<(), _>(cpu, || panic!("kaput")).unwrap_err();
        assert!(err.contains("kaput"), "{err}");
        let err = on_lcore::<(), _>(cpu, || Err("bad".into())).unwrap_err();
        assert_eq!(err, "bad");
        assert_eq!(on_lcore(cpu, || Ok(lcore::current().is_some())), Ok(true));
    }
}
