//! `sluice bench distributor`: cycles per packet on the distributor core,
//! after DPDK's `distributor_perf_autotest`, for the burst API (SIMD and
//! scalar tag matching) and the single-packet API, with 1, 2, 4 and 8
//! workers.
//!
//! # Method
//! The distributor lcore (the first CPU) owns a pool of [`POOL`] mbufs,
//! each given an RSS hash once (its index mod 32, plus 1: 32 flows, as
//! DPDK's test sets `hash.usr` once). Each iteration fills a burst of 32
//! with `returned_pkts` (the packets the workers handed back, in order) and
//! tops it up from its free list (a stack: at the start, while the workers
//! hold packets), then calls `process`. Each worker lcore loops on
//! `get_pkt`, handing back what it got the call before. DPDK's test times
//! `process` alone over the same 32 mbufs given again and again, with
//! workers that never hold them; here every mbuf is owned by exactly one
//! side at a time, and the timed loop is the whole distributor side:
//! returns, free list, `process`.
//!
//! Workers go on the other CPUs, round-robin; on a two-CPU machine they all
//! share the second, time-sliced (the `w/core` column). The figure that
//! matters most is 1 worker on the other core.
//!
//! Every (workers, API) case is a fresh distributor and fresh lcores: the
//! workers are started, the distributor waits until all have asked, warms
//! up, then times one slice (time-sliced workers run some hundred times
//! slower, so their slices are [`SLICED_DIVISOR`] times shorter). The APIs
//! of one worker count are measured interleaved, one slice each per round,
//! the order rotating; a figure is the median over rounds (min-max
//! printed), and `x burst` is the median of the per-round ratios to the
//! burst (SIMD) case of the same round. The
//! cache-line round trip between the two CPUs (as `sluice bench ring`
//! measures it) is taken before each worker count: on a shared VM it moves
//! between runs, and every two-core figure moves with it.
//!
//! Within a slice every iteration (one burst) is timed, and one that took
//! over 100 µs and ten times the usual ([`CUT`]) — the distributor
//! or a worker was descheduled, other work on the machine took the CPU — is
//! left out with its packets, as `sluice bench recycle` does; the share of
//! time left out is printed. The cut is far above what time-sliced workers
//! cost (a few µs per switch), so it removes only outside interference.
//!
//! After each slice the distributor flushes, every packet must have come
//! back (the workers' counts sum to the packets distributed) and the pool
//! must be full: a case that fails either is an error, not a figure.

use serde::Serialize;
use sluice::distributor::{BURST_SIZE, DistStats};
use sluice::mbuf::{Burst, BurstSlice, MbufPool, MbufPoolConfig};
use sluice::tsc::rdtsc;

use sluice_bench::cut::{CutPolicy, IterationTimes};
use sluice_bench::rounds::{interleave, rounds};
use sluice_bench::stats::{Spread, median, ratios, share};

use super::contention::line_round_trip;
use super::{BenchResult, Ctx, Selection, Stall, Worker, emit, on_lcores};
use crate::app::dist::api::{Api, DistSide, WithDist, WorkerSide};

/// Packets per `process` call.
pub const BURST: usize = 32;
/// Mbufs circulating.
pub const POOL: usize = 1023;
/// Worker counts of a full run.
pub const WORKERS: [usize; 4] = [1, 2, 4, 8];
/// Packets timed per case by default (all rounds together).
const DEFAULT_OPS: u64 = 1 << 23;
/// Most rounds per worker count.
const MAX_ROUNDS: u64 = 8;
/// Fewest packets in one slice.
const MIN_SLICE: u64 = 1 << 14;
/// Round trips per cache-line measurement.
const TRIPS: u64 = 20_000;
/// Worker counts whose workers time-slice a CPU time this many times fewer
/// packets.
const SLICED_DIVISOR: u64 = 8;
/// An iteration (one burst) longer than 100 µs, and than ten times the
/// usual, did not run on the core all along (the distributor or a worker
/// was descheduled): it is left out.
const CUT: CutPolicy = CutPolicy::new(100, 10);

/// Where the lcores go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The distributor's CPU.
    pub dist: usize,
    /// The CPUs workers take, round-robin.
    pub workers: Vec<usize>,
}

impl Placement {
    /// The distributor on the first CPU, workers on the others; `None` with
    /// one CPU.
    pub fn of(cpus: &[usize]) -> Option<Placement> {
        match cpus {
            [d, rest @ ..] if !rest.is_empty() => Some(Placement {
                dist: *d,
                workers: rest.to_vec(),
            }),
            _ => None,
        }
    }

    /// Worker `i`'s CPU.
    pub fn worker_cpu(&self, i: usize) -> usize {
        self.workers[i % self.workers.len()]
    }

    /// Workers sharing the busiest worker CPU, for `n` workers.
    pub fn per_core(&self, n: usize) -> usize {
        n.div_ceil(self.workers.len())
    }

    /// CPUs busy with `n` workers and the distributor.
    pub fn cores(&self, n: usize) -> u32 {
        (n.min(self.workers.len()) + 1) as u32
    }
}

/// One (workers, API) case's figures.
#[derive(Serialize, Debug, Clone)]
pub struct DistResult {
    /// The usual fields (`bench`, `case`, `cycles_per_op`, `mops`, ...).
    #[serde(flatten)]
    pub base: BenchResult,
    /// `burst`, `burst-scalar` or `single`.
    pub api: Api,
    /// The tag matching used (`avx2`, `sse2`, `scalar`; `-` for none).
    pub matching: &'static str,
    /// Workers.
    pub workers: usize,
    /// Workers time-slicing the busiest worker CPU.
    pub workers_per_core: usize,
    /// Rounds (slices) measured.
    pub rounds: usize,
    /// The best round's cycles per packet.
    pub cycles_min: f64,
    /// The worst round's.
    pub cycles_max: f64,
    /// Median over rounds of this case's cycles per packet over the burst
    /// (SIMD) case's in the same round.
    pub ratio_vs_burst: f64,
    /// Cycles per cache-line round trip between the distributor's CPU and
    /// the first worker CPU, measured just before this worker count.
    pub line_round_trip: f64,
    /// Requests whose returns did not fit the returns FIFO, all rounds.
    pub returns_full: u64,
    /// The share of timed TSC ticks left out: iterations longer than
    /// 100 µs and ten times the usual (a thread off its core).
    pub excluded_share: f64,
}

/// Runs the distributor cases of `sel`.
pub fn run(ctx: &mut Ctx, sel: Selection) {
    let ops = ctx.ops(DEFAULT_OPS);
    let rounds = rounds(ops, MIN_SLICE, MAX_ROUNDS);
    let slice = (ops / rounds).max(1);
    let counts: &[usize] = match sel {
        Selection::Full => &WORKERS,
        Selection::Summary => &WORKERS[..1],
    };
    let place = Placement::of(&ctx.cpus);
    let mut notes = vec![format!(
        "One distributor lcore keeps mbufs circulating (each with a fixed RSS hash: index mod \
         {BURST} + 1): a burst of {BURST} filled by returned_pkts and topped up from a free list \
         of {POOL}, then process; workers loop on get_pkt handing back what they got. \
         cycles/pkt = TSC ticks of that whole loop on the distributor core per packet \
         distributed."
    )];
    if let Some(place) = &place {
        notes.push(format!(
            "Distributor on CPU {}, workers on CPU(s) {:?} round-robin: w/core > 1 means \
             workers time-slice one CPU (the main figure is 1 worker on the other core).",
            place.dist, place.workers
        ));
    }
    notes.push(format!(
        "The APIs of one worker count run interleaved, {rounds} round(s) of one {slice}-packet \
         slice each (fresh distributor and lcores, after a warm-up; {SLICED_DIVISOR}x fewer \
         packets when workers time-slice); figures are medians over rounds, min-max the \
         spread; 'x burst' = median per-round ratio to burst (SIMD). Each iteration (one \
         burst) is timed, and one longer than {} µs and {}x the usual (a \
         thread was off its core: other work on the machine) is left out with its packets: \
         'cut' is the share of time left out. \
         'line rt' = cycles per cache-line round trip between the distributor's and the first \
         worker's CPU, measured before each worker count (it moves between runs on a VM).",
        CUT.min_us, CUT.factor
    ));
    notes.push(sluice_bench::dpdk_reference_note(
        "distributor_perf_autotest (1 worker on the other core)",
    ));
    ctx.title("distributor (cf. DPDK distributor_perf_autotest)", &notes);
    if !ctx.json {
        emit(&format!(
            "{:<28} {:>6} {:>10} {:>7} {:>8}  {:<10} detail",
            "case", "w/core", "cycles/pkt", "Mpps", "x burst", "DPDK 22.11"
        ));
    }
    let Some(place) = place else {
        ctx.skip("distributor", "needs two CPUs, this process may use one");
        return;
    };
    let apis: Vec<Api> = Api::ALL
        .into_iter()
        .filter(|&a| match a.check() {
            Ok(()) => true,
            Err(e) => {
                ctx.note(&format!("{}: skipped: {e}", a.name()));
                false
            }
        })
        .collect();
    for &workers in counts {
        let rt = match line_round_trip((place.dist, place.worker_cpu(0)), TRIPS) {
            Ok(s) => s.cycles_per_op(),
            Err(e) => {
                ctx.report(&format!("line round trip, {workers} w"), Err(e));
                continue;
            }
        };
        // Time-sliced workers run some hundred times slower: fewer
        // packets keep the run short.
        let slice = if place.per_core(workers) > 1 {
            (slice / SLICED_DIVISOR).max(1)
        } else {
            slice
        };
        let group = Group {
            workers,
            place: place.clone(),
            rounds: rounds as usize,
            slice,
            warm: warm_up(slice),
        };
        match measure_group(&group, &apis) {
            Ok(per_api) => {
                for r in results(&group, &per_api, rt) {
                    print_row(ctx, &r);
                }
            }
            Err((api, e)) => ctx.report(&case_name(api, workers), Err(e)),
        }
    }
}

/// Untimed packets before a slice.
fn warm_up(slice: u64) -> u64 {
    (slice / 8).max(1 << 12)
}

/// A case's name: `burst, 1 worker`, `single, 4 workers`.
pub fn case_name(api: Api, workers: usize) -> String {
    format!(
        "{}, {workers} worker{}",
        api.name(),
        if workers == 1 { "" } else { "s" }
    )
}

/// DPDK 22.11's `distributor_perf_autotest` figure for a case (1 worker on
/// the other core), in cycles per packet.
fn dpdk_ref(api: Api, workers: usize) -> Option<f64> {
    match (api, workers) {
        (Api::Burst, 1) => Some(40.0),
        (Api::Single, 1) => Some(179.0),
        _ => None,
    }
}

/// One worker count's cases.
#[derive(Debug, Clone)]
pub struct Group {
    /// Workers.
    pub workers: usize,
    /// Where the lcores go.
    pub place: Placement,
    /// Rounds.
    pub rounds: usize,
    /// Packets timed per slice.
    pub slice: u64,
    /// Untimed packets before each slice.
    pub warm: u64,
}

/// What one slice measured.
#[derive(Debug, Clone)]
pub struct Slice {
    /// TSC ticks of the timed iterations kept.
    pub cycles: u64,
    /// Packets distributed in it (iterations kept).
    pub packets: u64,
    /// TSC ticks of the iterations left out.
    pub excluded: u64,
    /// The tag matching used.
    pub matching: &'static str,
    /// The distributor's counters at the end of the slice (warm-up
    /// included).
    pub stats: DistStats,
}

impl Slice {
    fn cycles_per_packet(&self) -> f64 {
        self.cycles as f64 / self.packets.max(1) as f64
    }

    fn mpps(&self) -> f64 {
        super::mops(self.packets, self.cycles)
    }
}

/// Per API, its slices.
pub type SlicesPerApi = Vec<(Api, Vec<Slice>)>;

/// Measures every API of `apis` for `g`, interleaved; per API, its slices.
/// An error names the API whose slice failed.
pub fn measure_group(g: &Group, apis: &[Api]) -> Result<SlicesPerApi, (Api, String)> {
    let mut per_api: SlicesPerApi = apis.iter().map(|&a| (a, Vec::new())).collect();
    interleave(g.rounds, per_api.len(), |_, i| {
        let (api, slices) = &mut per_api[i];
        let api = *api;
        let s = api.open(g.workers, SliceCase { g }).and_then(|r| r);
        slices.push(s.map_err(|e| (api, e))?);
        Ok(())
    })?;
    Ok(per_api)
}

/// One slice of one API, as a [`WithDist`] visitor.
struct SliceCase<'a> {
    g: &'a Group,
}

/// What an lcore of a slice returns: the distributor's slice, or a
/// worker's packet count.
enum Outcome {
    Dist(Slice),
    Worker(u64),
}

impl WithDist for SliceCase<'_> {
    type Out = Result<Slice, String>;

    fn run<D: DistSide>(self, d: D) -> Result<Slice, String> {
        let g = self.g;
        let pool = MbufPool::new(MbufPoolConfig {
            name: "bench-dist".into(),
            size: POOL as u32,
            cache_size: 0,
            ..Default::default()
        })
        .map_err(|e| format!("mbuf pool: {e}"))?;
        let mut jobs: Vec<(usize, Worker<Outcome>)> = Vec::with_capacity(g.workers + 1);
        for i in 0..g.workers {
            let w = d.worker(i)?;
            jobs.push((
                g.place.worker_cpu(i),
                Box::new(move || Ok(Outcome::Worker(serve(w)))),
            ));
        }
        let (workers, warm, slice) = (g.workers, g.warm, g.slice);
        let dist_pool = pool.clone();
        jobs.insert(
            0,
            (
                g.place.dist,
                Box::new(move || drive(d, &dist_pool, workers, warm, slice).map(Outcome::Dist)),
            ),
        );
        let outcomes = on_lcores(jobs)?;
        let mut slice = None;
        let mut handled = 0u64;
        for o in outcomes {
            match o {
                Outcome::Dist(s) => slice = Some(s),
                Outcome::Worker(n) => handled += n,
            }
        }
        let slice = slice.ok_or("the distributor returned no figures")?;
        if handled != slice.stats.distributed {
            return Err(format!(
                "the workers handled {handled} packets, the distributor gave out {}",
                slice.stats.distributed
            ));
        }
        if !pool.is_full() {
            return Err(format!(
                "{} of {POOL} mbufs are not back in the pool",
                POOL as u32 - pool.available()
            ));
        }
        Ok(slice)
    }
}

/// A worker: hands back what it got, until the distributor is gone;
/// returns the packets it received.
fn serve<W: WorkerSide>(mut w: W) -> u64 {
    let mut held = Burst::<BURST_SIZE>::new();
    let mut fresh = Burst::<BURST_SIZE>::new();
    let mut got = 0u64;
    while let Ok(n) = w.get_pkt(&mut held, &mut fresh) {
        got += n as u64;
        std::mem::swap(&mut held, &mut fresh);
    }
    got
}

/// The distributor lcore: waits for the workers, warms up, times `slice`
/// packets, then takes every packet back.
fn drive<D: DistSide>(
    mut d: D,
    pool: &MbufPool,
    workers: usize,
    warm: u64,
    slice: u64,
) -> Result<Slice, String> {
    let mut free: Box<Burst<{ POOL + 1 }>> = Box::new(Burst::new());
    pool.alloc_bulk(&mut free, POOL)
        .map_err(|e| format!("cannot take {POOL} mbufs: {e}"))?;
    // Each mbuf keeps its flow for the run (as DPDK's test sets
    // `hash.usr` once): bursts of consecutive mbufs carry 32 flows.
    for (i, m) in free.iter_mut().enumerate() {
        // Fresh mbufs are unshared: this cannot fail.
        let _ = m.set_rss_hash((i % BURST) as u32 + 1);
    }
    let mut burst = Burst::<BURST>::new();
    let mut stall = Stall::new("distributor (waiting for its workers)");
    while d.active_workers() < workers {
        d.process(&mut burst);
        stall.failed()?;
    }
    let mut stall = Stall::new("distributor");
    // The warm-up keeps every iteration and sets the cut.
    let cut = cycle(&mut d, &mut free, &mut burst, warm, u64::MAX, &mut stall)?
        .times
        .cut(CUT);
    let run = cycle(&mut d, &mut free, &mut burst, slice, cut, &mut stall)?;
    // Take everything back: what `process` left in the burst, then what
    // the workers hold.
    while !burst.is_empty() {
        if d.process(&mut burst) == 0 {
            stall.failed()?;
        }
        d.returned_pkts(&mut free);
    }
    loop {
        let left = d.flush();
        d.returned_pkts(&mut free);
        if left == 0 {
            break;
        }
        stall.failed()?;
    }
    let stats = d.stats();
    if free.len() != POOL || stats.returned != stats.distributed {
        return Err(format!(
            "{} of {POOL} mbufs came back ({} distributed, {} returned)",
            free.len(),
            stats.distributed,
            stats.returned
        ));
    }
    Ok(Slice {
        cycles: run.times.kept,
        packets: run.packets,
        excluded: run.times.excluded,
        matching: d.matching(),
        stats,
    })
}

/// What a distributing loop measured.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    /// Packets distributed, all iterations.
    done: u64,
    /// TSC ticks of the iterations, kept (not over the cut) and left out.
    times: IterationTimes,
    /// Packets distributed in the iterations kept.
    packets: u64,
}

/// Distributes at least `ops` packets, bursts of [`BURST`] taken from
/// `free`, the returns put back on it. Each iteration (one burst) is timed;
/// one longer than `cut` ticks is left out with its packets.
#[inline(never)]
fn cycle<D: DistSide>(
    d: &mut D,
    free: &mut BurstSlice,
    burst: &mut Burst<BURST>,
    ops: u64,
    cut: u64,
    stall: &mut Stall,
) -> Result<Run, String> {
    let mut r = Run::default();
    let mut t = rdtsc();
    while r.done < ops {
        // Returned packets go straight back in; the free list tops up
        // what the workers still hold (at the start, mostly).
        d.returned_pkts(burst);
        while !burst.is_full() {
            let Some(m) = free.pop() else { break };
            // Room checked above.
            let _ = burst.push(m);
        }
        let n = d.process(burst) as u64;
        let t1 = rdtsc();
        let span = t1.wrapping_sub(t);
        t = t1;
        if r.times.record(span, cut) {
            r.packets += n;
        }
        if n == 0 {
            stall.failed()?;
        } else {
            stall.progressed();
            r.done += n;
        }
    }
    Ok(r)
}

/// The rows of a group from its slices; `rt` is its line round trip.
pub fn results(g: &Group, per_api: &[(Api, Vec<Slice>)], rt: f64) -> Vec<DistResult> {
    let reference: Option<Vec<f64>> = per_api
        .iter()
        .find(|(a, _)| *a == Api::Burst)
        .map(|(_, s)| s.iter().map(Slice::cycles_per_packet).collect());
    per_api
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(api, slices)| {
            let cycles: Vec<f64> = slices.iter().map(Slice::cycles_per_packet).collect();
            let mpps: Vec<f64> = slices.iter().map(Slice::mpps).collect();
            let ratio = reference
                .as_ref()
                .map_or(0.0, |r| median(&ratios(&cycles, r)));
            let spread = Spread::of(&cycles);
            let mut base = BenchResult::new(
                "distributor",
                case_name(*api, g.workers),
                g.place.cores(g.workers),
                spread.median,
                median(&mpps),
            );
            base.bulk = Some(BURST);
            base.ops = slices.iter().map(|s| s.packets).sum();
            base.dpdk_cycles_per_op = dpdk_ref(*api, g.workers);
            DistResult {
                base,
                api: *api,
                matching: slices[0].matching,
                workers: g.workers,
                workers_per_core: g.place.per_core(g.workers),
                rounds: slices.len(),
                cycles_min: spread.min,
                cycles_max: spread.max,
                ratio_vs_burst: ratio,
                line_round_trip: rt,
                returns_full: slices.iter().map(|s| s.stats.returns_full).sum(),
                excluded_share: {
                    let ex: u64 = slices.iter().map(|s| s.excluded).sum();
                    let kept: u64 = slices.iter().map(|s| s.cycles).sum();
                    share(ex, ex + kept)
                },
            }
        })
        .collect()
}

fn print_row(ctx: &Ctx, r: &DistResult) {
    if ctx.json_row(&r.base.case, r) {
        return;
    }
    let dpdk = r
        .base
        .dpdk_cycles_per_op
        .map_or("-".to_owned(), |c| format!("{c} cyc"));
    let mut detail = format!(
        "min-max {:.1}-{:.1}, {:.1}% cut, matching {}, line rt {:.0}",
        r.cycles_min,
        r.cycles_max,
        100.0 * r.excluded_share,
        r.matching,
        r.line_round_trip
    );
    if r.returns_full != 0 {
        detail.push_str(&format!(", returns full {}", r.returns_full));
    }
    emit(&format!(
        "{:<28} {:>6} {:>10.1} {:>7.2} {:>8.2}  {:<10} {detail}",
        r.base.case, r.workers_per_core, r.base.cycles_per_op, r.base.mops, r.ratio_vs_burst, dpdk
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(workers: usize) -> Group {
        let cpus = sluice::lcore::available_cpus();
        // On one CPU the workers share it with the distributor; the case
        // still has to complete.
        let pair = [cpus[0], *cpus.get(1).unwrap_or(&cpus[0])];
        Group {
            workers,
            place: Placement::of(&pair).unwrap(),
            rounds: 2,
            slice: 3000,
            warm: 500,
        }
    }

    fn available() -> Vec<Api> {
        Api::ALL.into_iter().filter(|a| a.check().is_ok()).collect()
    }

    #[test]
    fn every_api_distributes_and_takes_every_packet_back() {
        for workers in [1, 3] {
            let g = tiny(workers);
            let apis = available();
            let per_api = measure_group(&g, &apis).unwrap_or_else(|(a, e)| panic!("{a:?}: {e}"));
            assert_eq!(per_api.len(), apis.len());
            for (api, slices) in &per_api {
                assert_eq!(slices.len(), 2, "{api:?}");
                for s in slices {
                    // Iterations cut (a thread off its core) leave out
                    // their packets.
                    assert!(s.packets > 0 && s.packets < 3000 + BURST as u64);
                    assert!(s.stats.distributed >= 3500);
                    assert_eq!(s.stats.returned, s.stats.distributed);
                    assert_eq!(s.stats.handed.len(), workers);
                    assert_eq!(
                        s.stats.handed.iter().sum::<u64>(),
                        s.stats.distributed,
                        "{api:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn json_rows_carry_the_distributor_fields() {
        let g = tiny(2);
        let apis = available();
        let per_api = measure_group(&g, &apis).unwrap_or_else(|(a, e)| panic!("{a:?}: {e}"));
        let rows = results(&g, &per_api, 250.0);
        assert_eq!(rows.len(), apis.len());
        for (row, api) in rows.iter().zip(&apis) {
            let line = serde_json::to_string(row).unwrap();
            assert!(!line.contains('\n'));
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["bench"], "distributor");
            assert_eq!(v["case"], case_name(*api, 2));
            assert_eq!(v["api"], api.name());
            assert_eq!(v["workers"], 2);
            assert_eq!(v["workers_per_core"], g.place.per_core(2));
            assert_eq!(v["rounds"], 2);
            assert_eq!(v["bulk"], 32);
            assert_eq!(v["line_round_trip"], 250.0);
            assert!(v["ops"].as_u64().unwrap() > 0);
            let cut = v["excluded_share"].as_f64().unwrap();
            assert!((0.0..1.0).contains(&cut), "{cut}");
            assert!(v["tsc_hz"].as_u64().unwrap() > 0);
            assert!(v["mops"].as_f64().unwrap() > 0.0);
            let c = v["cycles_per_op"].as_f64().unwrap();
            assert!(c > 0.0);
            assert!(v["cycles_min"].as_f64().unwrap() <= c);
            assert!(c <= v["cycles_max"].as_f64().unwrap());
            assert!(v["ratio_vs_burst"].as_f64().unwrap() > 0.0);
            assert!(v["returns_full"].is_u64());
            let m = v["matching"].as_str().unwrap();
            assert!(["avx2", "sse2", "scalar", "-"].contains(&m), "{m}");
        }
        assert_eq!(rows[0].api, Api::Burst);
        assert_eq!(rows[0].ratio_vs_burst, 1.0);
        assert!(rows[0].base.dpdk_cycles_per_op.is_none(), "2 workers");
    }

    #[test]
    fn placement_counts_workers_per_core() {
        assert_eq!(Placement::of(&[0]), None);
        let place = Placement::of(&[0, 1]).unwrap();
        assert_eq!((place.dist, place.worker_cpu(3)), (0, 1));
        assert_eq!(
            (place.per_core(1), place.per_core(8), place.cores(8)),
            (1, 8, 2)
        );
        let place = Placement::of(&[2, 3, 5, 7]).unwrap();
        assert_eq!((place.worker_cpu(0), place.worker_cpu(4)), (3, 5));
        assert_eq!(
            (place.per_core(4), place.cores(2), place.cores(8)),
            (2, 3, 4)
        );
        assert_eq!(rounds(1, MIN_SLICE, MAX_ROUNDS), 1);
        assert_eq!(rounds(DEFAULT_OPS, MIN_SLICE, MAX_ROUNDS), MAX_ROUNDS);
        assert_eq!(case_name(Api::BurstScalar, 1), "burst-scalar, 1 worker");
        assert_eq!(case_name(Api::Single, 8), "single, 8 workers");
    }
}
