//! `sluice bench mempool`: get and put, after DPDK's `mempool_perf_autotest`.
//!
//! One op is one element got and put back, so Mops compares directly with
//! DPDK's rate. Each worker lcore repeatedly gets [`KEEP`] elements in calls of
//! `bulk` (`get` for 1, `get_bulk` otherwise), then puts them back the same way.
//! On one core Sluice is also measured with the bulk size a compile-time
//! constant (`get_array::<N>` and `put_array`), beside DPDK's constant form.
//! Cache sizes 0 (no cache: every call goes to the pool's ring), 32, 256 and
//! 512 × bulk 1, 2, 4, 8 and 32, on one core and on two cores at once.
//!
//! cycles/op is per core (the mean of the workers' own figures); Mops is the
//! total of all cores: every element moved divided by the time from the first
//! worker's start to the last one's end.
//!
//! The "DPDK here" column is DPDK's `rte_mempool` measured in the same run:
//! `dpdk/mempool_perf.c` runs the autotest's loop for one case on the same
//! CPUs, with the same pool size, element size, cache, bulk and kind of
//! memory. Each case is measured in interleaved rounds, one slice of each
//! form of Sluice's and of DPDK's per round (`sluice_bench::round_order`), so both
//! figures come from the same stretch of time; each figure is the median of
//! its rounds, and the ratio the median of the per-round ratios.

use std::hint::black_box;
use std::sync::Arc;

use serde::Serialize;
use sluice::mempool::{Elem, Mempool, MempoolConfig};
use sluice::tsc::rdtsc_ordered;
use sluice_bench::round_order;
use sluice_bench::stats::{Spread, median, ratios};

use super::dpdk::Program;
use super::dpdk::mempool_perf::{self, BulkForm};
use super::{
    BenchResult, Ctx, Sample, Selection, SpinBarrier, Worker, emit, mops, on_lcore, on_lcores,
};

/// Elements in the pool (a power of two minus one, as DPDK sizes pools).
const POOL_SIZE: u32 = 8191;
/// Bytes per element, as DPDK's mempool_perf test.
const ELT_SIZE: usize = 2048;
/// Elements each worker holds at once (DPDK's `n_keep`).
const KEEP: usize = 32;
/// Per-lcore cache sizes measured.
const CACHES: [u32; 4] = [0, 32, 256, 512];
/// Bulk sizes measured.
const BULKS: [usize; 5] = [1, 2, 4, 8, 32];
/// Elements per core per case by default.
const DEFAULT_OPS: u64 = 1 << 23;
/// Elements per core per case in the summary of `sluice` with no arguments.
const SUMMARY_OPS: u64 = 1 << 23;
/// Interleaved rounds per case: at most this many, ...
const MAX_ROUNDS: u64 = 32;
/// ... each slice timing at least this many elements per core (fewer rounds
/// when the case has fewer elements).
const MIN_SLICE: u64 = 1 << 16;

/// DPDK 22.11's `mempool_perf_autotest` rate for a case, in million
/// elements per second (see [`sluice_bench::DPDK_REFERENCE_MACHINE`]).
fn dpdk_ref(cache: u32, bulk: usize, cores: u32) -> Option<f64> {
    match (cache, bulk, cores) {
        (0, 1, 1) => Some(69.0),
        (0, 4, 1) => Some(251.0),
        (0, 32, 1) => Some(1214.0),
        (512, 1, 1) => Some(394.0),
        (512, 4, 1) => Some(1147.0),
        (512, 32, 1) => Some(2467.0),
        (0, 1, 2) => Some(17.0),
        (0, 32, 2) => Some(167.0),
        (512, 1, 2) => Some(613.0),
        (512, 32, 2) => Some(4980.0),
        _ => None,
    }
}

fn case_name(cache: u32, bulk: usize, cores: u32) -> String {
    let cores = if cores > 1 { " 2-core" } else { "" };
    format!("cache {cache} bulk {bulk}{cores}")
}

/// One result line: the common fields, the spread of Sluice's rounds and
/// the DPDK-here figures when there are any.
#[derive(Serialize, Debug, Clone)]
struct MempoolRow {
    #[serde(flatten)]
    result: BenchResult,
    /// Interleaved rounds measured.
    rounds: usize,
    /// Sluice's slowest and fastest round, in Mops.
    mops_min: f64,
    mops_max: f64,
    /// DPDK's `rte_mempool` in the same rounds, the bulk size a run-time
    /// value as on Sluice's side: the median of its rounds' Mops, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    dpdk_here_mops: Option<f64>,
    /// ... its slowest and fastest round, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    dpdk_here_mops_min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dpdk_here_mops_max: Option<f64>,
    /// ... and the median of its cycles per op per core.
    #[serde(skip_serializing_if = "Option::is_none")]
    dpdk_here_cycles_per_op: Option<f64>,
    /// Sluice's Mops over DPDK's: the median of the per-round ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_dpdk_here: Option<f64>,
    /// The same for DPDK with the bulk size a compile-time constant
    /// (`vs_dpdk_here_const`: Sluice's run-time form over it).
    #[serde(skip_serializing_if = "Option::is_none")]
    dpdk_here_const_mops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dpdk_here_const_mops_min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dpdk_here_const_mops_max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dpdk_here_const_cycles_per_op: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_dpdk_here_const: Option<f64>,
    /// Sluice with the bulk size a compile-time constant (one-core cases):
    /// the median of its rounds' Mops, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    const_mops: Option<f64>,
    /// ... its slowest and fastest round, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    const_mops_min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    const_mops_max: Option<f64>,
    /// ... the median of its cycles per op, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    const_cycles_per_op: Option<f64>,
    /// ... and its Mops over DPDK's constant form: the median of the
    /// per-round ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    const_vs_dpdk_here_const: Option<f64>,
}

/// DPDK's figures for one form of the bulk size, against Sluice's.
#[derive(Debug, Clone, Copy)]
struct HereFigures {
    mops: Spread,
    cycles_per_op: f64,
    /// Median of the per-round Sluice / DPDK Mops.
    ratio: f64,
}

impl HereFigures {
    /// From DPDK's rounds and Sluice's Mops of the same rounds; `None`
    /// without rounds.
    fn of(dpdk: &Rounds, sluice_mops: &[f64]) -> Option<HereFigures> {
        if dpdk.is_empty() {
            return None;
        }
        let dpdk_mops: Vec<f64> = dpdk.iter().map(|r| r.1).collect();
        Some(HereFigures {
            mops: Spread::of(&dpdk_mops),
            cycles_per_op: median(&dpdk.iter().map(|r| r.0).collect::<Vec<_>>()),
            ratio: median(&ratios(sluice_mops, &dpdk_mops)),
        })
    }
}

/// The two forms of DPDK's loop, in the order of [`DpdkRounds`].
const FORMS: [BulkForm; 2] = [BulkForm::Variable, BulkForm::Constant];

/// DPDK's per-round figures for each of [`FORMS`].
type DpdkRounds = [Rounds; 2];

/// Sluice's per-round figures for each of [`FORMS`] (the constant form's
/// empty where it is not measured).
type SluiceRounds = [Rounds; 2];

/// One slice of a round: a side and the form of the bulk size it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Sluice(BulkForm),
    Dpdk(BulkForm),
}

/// Per-round figures of one side: (cycles per op per core, total Mops).
type Rounds = Vec<(f64, f64)>;

/// Runs the mempool cases of `sel`.
pub fn run(ctx: &mut Ctx, sel: Selection) {
    let ops = match sel {
        Selection::Full => ctx.ops(DEFAULT_OPS),
        Selection::Summary => SUMMARY_OPS,
    };
    let wanted = |cache: u32, bulk: usize, cores: u32| match sel {
        Selection::Full => true,
        Selection::Summary => matches!((cache, bulk, cores), (256, 32, _) | (512, 1 | 32, 1)),
    };
    let rounds = sluice_bench::rounds::rounds(ops, MIN_SLICE, MAX_ROUNDS) as usize;
    let slice_ops = ops.div_ceil(rounds as u64);
    let mut notes = vec![format!(
        "{POOL_SIZE} elements of {ELT_SIZE} B; one op = one element got and put back; \
         each worker holds {KEEP} at a time; {ops} elements per core per case, in {rounds} \
         interleaved round(s), each slice after a warm-up; figures are medians of the rounds."
    )];
    // A probe pool, to tell where pools' memory comes from.
    match Mempool::new(config(0)) {
        Ok(pool) => notes.push(format!("Pool memory: {}.", pool.backing())),
        Err(e) => notes.push(format!("Cannot create a pool: {e}.")),
    }
    if ctx.cpu_pair().is_some() {
        notes.push(
            "2-core: both cores get and put on the same pool at once; cycles/op per core, \
             Mops for both together."
                .to_owned(),
        );
    }
    // DPDK's side, built once for the whole run.
    let program = mempool_perf::build();
    notes.push(match &program {
        Ok(_) => format!(
            "DPDK here: DPDK {}'s rte_mempool on this machine in the same run: \
             mempool_perf_autotest's loop built here with cc -O3 and libdpdk's flags, \
             ring_mp_mc handler, the same pool, element, cache and bulk sizes and CPUs as \
             Sluice's case, and the same kind of memory (hugepages: EAL {}; 4 KiB pages: \
             {}); its slices take turns with Sluice's in each round. Mops and DPDK here: \
             the bulk size a run-time value (get_bulk; the autotest's constant_n=0); \
             const and DPDK const (one-core cases): a compile-time constant \
             (get_array::<N>; constant_n=1). ratio: Sluice's Mops over DPDK's of the same \
             form, the median of the per-round ratios.",
            super::dpdk::version().unwrap_or_else(|| "(version unknown)".to_owned()),
            mempool_perf::memory_options(sluice::mempool::Backing::Hugepages),
            mempool_perf::memory_options(sluice::mempool::Backing::Anonymous),
        ),
        Err(why) => format!("DPDK here: empty, the DPDK program cannot be built: {why}."),
    });
    notes.push(sluice_bench::dpdk_reference_note(
        "mempool_perf_autotest, in Mops (both cores together on two cores)",
    ));
    ctx.title("mempool (cf. DPDK mempool_perf_autotest)", &notes);
    super::note_contention(ctx);
    if !ctx.json {
        emit(&format!(
            "{:<24} {:>5} {:>9} {:>8} {:>9} {:>5} {:>8} {:>10} {:>5}  {:<8} detail (Mops range)",
            "case",
            "cores",
            "cycles/op",
            "Mops",
            "DPDK here",
            "ratio",
            "const",
            "DPDK const",
            "ratio",
            "DPDK ref"
        ));
    }
    for cores in [1u32, 2] {
        for cache in CACHES {
            let todo: Vec<usize> = BULKS
                .into_iter()
                .filter(|&b| wanted(cache, b, cores))
                .collect();
            if todo.is_empty() {
                continue;
            }
            let cpus = match (cores, ctx.cpu_pair()) {
                (1, _) => vec![ctx.main_cpu()],
                (_, Some((a, b))) => vec![a, b],
                (_, None) => {
                    for bulk in todo {
                        ctx.skip(
                            &case_name(cache, bulk, cores),
                            "needs two CPUs, this process may use one",
                        );
                    }
                    continue;
                }
            };
            // One pool per cache size and core count, reused across bulk sizes.
            let pool = match Mempool::new(config(cache)) {
                Ok(pool) => pool,
                Err(e) => {
                    for bulk in todo {
                        ctx.report(&case_name(cache, bulk, cores), Err(e.to_string()));
                    }
                    continue;
                }
            };
            for bulk in todo {
                let case = case_name(cache, bulk, cores);
                let dpdk_case = mempool_perf::Case {
                    cache,
                    bulk,
                    keep: KEEP,
                    pool_size: POOL_SIZE,
                    elt_size: ELT_SIZE,
                    cpus: cpus.clone(),
                    memory: pool.backing(),
                };
                let measured = measure_case(
                    ctx,
                    &pool,
                    bulk,
                    cores,
                    (slice_ops, rounds),
                    program.as_ref().ok().map(|p| (p, &dpdk_case)),
                );
                match measured {
                    Ok((sluice, dpdk)) => {
                        let row = row(&case, cache, bulk, cores, &pool, slice_ops, &sluice, &dpdk);
                        print_row(ctx, &row);
                    }
                    Err(e) => ctx.report(&case, Err(e)),
                }
            }
            if !pool.is_full() {
                let case = format!("cache {cache} ({cores} core)");
                ctx.report(&case, Err("the pool is not full after the run".to_owned()));
            }
        }
    }
}

fn config(cache: u32) -> MempoolConfig {
    MempoolConfig {
        name: format!("bench-cache{cache}"),
        size: POOL_SIZE,
        elt_size: ELT_SIZE,
        cache_size: cache,
        ..Default::default()
    }
}

/// Measures one case in `rounds` interleaved rounds of `slice_ops` elements
/// per core: one slice of Sluice's and, when `dpdk` gives the program and
/// its case, one of DPDK's for each form of the bulk size (on one core each
/// form that fits the bulk, on two the run-time form). Returns each side's
/// per-round figures (DPDK's empty when it has none: why is noted). An
/// error of Sluice's side fails the case; one of DPDK's side is a note.
fn measure_case(
    ctx: &Ctx,
    pool: &Mempool,
    bulk: usize,
    cores: u32,
    (slice_ops, rounds): (u64, usize),
    dpdk: Option<(&Program, &mempool_perf::Case)>,
) -> Result<(SluiceRounds, DpdkRounds), String> {
    let case = case_name(pool.cache_size(), bulk, cores);
    let mut peer =
        match dpdk.map(|(program, c)| mempool_perf::MempoolPerf::spawn(program.path(), c)) {
            Some(Ok(peer)) => Some(peer),
            Some(Err(e)) => {
                ctx.note(&format!("{case}: DPDK here: {e}"));
                None
            }
            None => None,
        };
    let timed_rounds = slice_ops.div_ceil(KEEP as u64).max(1);
    let warmup_rounds = (timed_rounds / 16).max(1);
    let mut sluice: SluiceRounds = Default::default();
    let mut dpdk_figures: DpdkRounds = Default::default();
    // Two-core cases measure the run-time form only: on a crowded host
    // their no-cache cases run a hundred times slower than on a quiet one,
    // and more sides would make them the better part of the run.
    let forms: Vec<BulkForm> = FORMS
        .into_iter()
        .filter(|f| f.fits(bulk) && (cores == 1 || *f == BulkForm::Variable))
        .collect();
    let mut sides: Vec<Side> = forms.iter().map(|&f| Side::Sluice(f)).collect();
    if peer.is_some() {
        sides.extend(forms.iter().map(|&f| Side::Dpdk(f)));
    }
    for round in 0..rounds {
        for side in round_order(round, sides.len()) {
            let form = match sides[side] {
                Side::Sluice(form) => {
                    let samples = sluice_slice(ctx, pool, bulk, form, cores, slice_ops)?;
                    sluice[form as usize].push(figures(&samples));
                    continue;
                }
                Side::Dpdk(form) => form,
            };
            let Some(p) = peer.as_mut() else { continue };
            match p.slice(warmup_rounds, timed_rounds, form) {
                Ok(samples) => dpdk_figures[form as usize].push(figures(&samples)),
                Err(e) => {
                    ctx.note(&format!("{case}: DPDK here: {e}"));
                    peer = None;
                    dpdk_figures = Default::default();
                }
            }
        }
    }
    if let Some(p) = peer
        && let Err(e) = p.finish()
    {
        ctx.note(&format!("{case}: DPDK here: {e}"));
    }
    Ok((sluice, dpdk_figures))
}

/// (cycles per op per core, total Mops) of one slice's samples.
fn figures(samples: &[Sample]) -> (f64, f64) {
    let per_core =
        samples.iter().map(Sample::cycles_per_op).sum::<f64>() / samples.len().max(1) as f64;
    let total_ops: u64 = samples.iter().map(|s| s.ops).sum();
    let first = samples.iter().map(|s| s.start).min().unwrap_or(0);
    let last = samples.iter().map(|s| s.end).max().unwrap_or(0);
    (per_core, mops(total_ops, last.saturating_sub(first)))
}

/// The result line of a case from its rounds.
#[allow(clippy::too_many_arguments)]
fn row(
    case: &str,
    cache: u32,
    bulk: usize,
    cores: u32,
    pool: &Mempool,
    slice_ops: u64,
    sluice_forms: &SluiceRounds,
    dpdk: &DpdkRounds,
) -> MempoolRow {
    let sluice = &sluice_forms[BulkForm::Variable as usize];
    let sluice_mops: Vec<f64> = sluice.iter().map(|r| r.1).collect();
    let spread = Spread::of(&sluice_mops);
    let cycles = median(&sluice.iter().map(|r| r.0).collect::<Vec<_>>());
    let mut result = BenchResult::new("mempool", case.to_owned(), cores, cycles, spread.median);
    result.bulk = Some(bulk);
    result.cache = Some(cache);
    // Each slice moves whole rounds of KEEP on every core.
    result.ops = slice_ops.div_ceil(KEEP as u64).max(1)
        * KEEP as u64
        * u64::from(cores)
        * sluice.len() as u64;
    result.backing = Some(pool.backing().to_string());
    result.dpdk_mops = dpdk_ref(cache, bulk, cores);
    let here = HereFigures::of(&dpdk[BulkForm::Variable as usize], &sluice_mops);
    let constant = HereFigures::of(&dpdk[BulkForm::Constant as usize], &sluice_mops);
    let sluice_const = &sluice_forms[BulkForm::Constant as usize];
    let const_mops: Vec<f64> = sluice_const.iter().map(|r| r.1).collect();
    let const_spread = (!const_mops.is_empty()).then(|| Spread::of(&const_mops));
    let const_vs_const = HereFigures::of(&dpdk[BulkForm::Constant as usize], &const_mops)
        .filter(|_| !const_mops.is_empty());
    MempoolRow {
        result,
        rounds: sluice.len(),
        mops_min: spread.min,
        mops_max: spread.max,
        dpdk_here_mops: here.map(|h| h.mops.median),
        dpdk_here_mops_min: here.map(|h| h.mops.min),
        dpdk_here_mops_max: here.map(|h| h.mops.max),
        dpdk_here_cycles_per_op: here.map(|h| h.cycles_per_op),
        vs_dpdk_here: here.map(|h| h.ratio),
        dpdk_here_const_mops: constant.map(|h| h.mops.median),
        dpdk_here_const_mops_min: constant.map(|h| h.mops.min),
        dpdk_here_const_mops_max: constant.map(|h| h.mops.max),
        dpdk_here_const_cycles_per_op: constant.map(|h| h.cycles_per_op),
        vs_dpdk_here_const: constant.map(|h| h.ratio),
        const_mops: const_spread.map(|s| s.median),
        const_mops_min: const_spread.map(|s| s.min),
        const_mops_max: const_spread.map(|s| s.max),
        const_cycles_per_op: (!sluice_const.is_empty())
            .then(|| median(&sluice_const.iter().map(|r| r.0).collect::<Vec<_>>())),
        const_vs_dpdk_here_const: const_vs_const.map(|h| h.ratio),
    }
}

/// Prints a result: a table row, or one JSON object on one line.
fn print_row(ctx: &Ctx, row: &MempoolRow) {
    if ctx.json_row(&row.result.case, row) {
        return;
    }
    let r = &row.result;
    let or_dash = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "-".to_owned(),
    };
    let mut detail = vec![format!("Sluice {:.0}-{:.0}", row.mops_min, row.mops_max)];
    if let (Some(lo), Some(hi)) = (row.dpdk_here_mops_min, row.dpdk_here_mops_max) {
        detail.push(format!("DPDK here {lo:.0}-{hi:.0}"));
    }
    if let (Some(lo), Some(hi)) = (row.const_mops_min, row.const_mops_max) {
        detail.push(format!("const {lo:.0}-{hi:.0}"));
    }
    if let (Some(lo), Some(hi)) = (row.dpdk_here_const_mops_min, row.dpdk_here_const_mops_max) {
        detail.push(format!("DPDK const {lo:.0}-{hi:.0}"));
    }
    if let Some(b) = &r.backing {
        detail.push(b.clone());
    }
    let line = format!(
        "{:<24} {:>5} {:>9.2} {:>8.1} {:>9} {:>5} {:>8} {:>10} {:>5}  {:<8} {}",
        r.case,
        r.cores,
        r.cycles_per_op,
        r.mops,
        or_dash(row.dpdk_here_mops, 1),
        or_dash(row.vs_dpdk_here, 2),
        or_dash(row.const_mops, 1),
        or_dash(row.dpdk_here_const_mops, 1),
        or_dash(row.const_vs_dpdk_here_const, 2),
        or_dash(r.dpdk_mops, 0),
        detail.join(", ")
    );
    emit(line.trim_end());
}

/// Runs one slice of a case on `cores` lcores: each worker's samples.
fn sluice_slice(
    ctx: &Ctx,
    pool: &Mempool,
    bulk: usize,
    form: BulkForm,
    cores: u32,
    ops: u64,
) -> Result<Vec<Sample>, String> {
    if cores == 1 {
        let pool = pool.clone();
        return Ok(vec![on_lcore(ctx.main_cpu(), move || {
            worker(&pool, bulk, form, ops, None)
        })?]);
    }
    let (a, b) = ctx.cpu_pair().ok_or_else(|| "needs two CPUs".to_owned())?;
    let barrier = Arc::new(SpinBarrier::new(2));
    let jobs: Vec<(usize, Worker<Sample>)> = [a, b]
        .into_iter()
        .map(|cpu| {
            let pool = pool.clone();
            let barrier = Arc::clone(&barrier);
            let job: Worker<Sample> =
                Box::new(move || worker(&pool, bulk, form, ops, Some(&barrier)));
            (cpu, job)
        })
        .collect();
    on_lcores(jobs)
}

/// Gets [`KEEP`] elements in calls of `bulk`, then puts them back the same way,
/// `rounds` times.
#[inline(never)]
fn get_put_rounds(
    pool: &Mempool,
    bulk: usize,
    rounds: u64,
    table: &mut [Elem; KEEP],
) -> Result<(), String> {
    for _ in 0..rounds {
        let mut got = 0;
        while got < KEEP {
            let ok = if bulk == 1 {
                match pool.get() {
                    Some(e) => {
                        table[got] = e;
                        true
                    }
                    None => false,
                }
            } else {
                pool.get_bulk(&mut table[got..got + bulk]).is_ok()
            };
            if !ok {
                // SAFETY: `table[..got]` are elements just got from `pool` and
                // not yet put back.
                unsafe { pool.put_bulk(&table[..got]) };
                return Err(format!("the pool ran out of elements (bulk get of {bulk})"));
            }
            got += bulk;
        }
        black_box(&mut *table);
        let mut put = 0;
        while put < KEEP {
            if bulk == 1 {
                // SAFETY: got from `pool` above, put back once.
                unsafe { pool.put(table[put]) };
            } else {
                // SAFETY: got from `pool` above, each put back once.
                unsafe { pool.put_bulk(&table[put..put + bulk]) };
            }
            put += bulk;
        }
    }
    Ok(())
}

/// [`get_put_rounds`] with the bulk size `B` a compile-time constant:
/// `get_array_into::<B>` and `put_array`.
#[inline(never)]
fn get_put_rounds_const<const B: usize>(
    pool: &Mempool,
    rounds: u64,
    table: &mut [Elem; KEEP],
) -> Result<(), String> {
    for _ in 0..rounds {
        let (chunks, _) = table.as_chunks_mut::<B>();
        for got in 0..chunks.len() {
            if pool.get_array_into(&mut chunks[got]).is_err() {
                // SAFETY: `chunks[..got]` are elements just got from `pool`
                // and not yet put back.
                unsafe { pool.put_bulk(chunks[..got].as_flattened()) };
                return Err(format!("the pool ran out of elements (bulk get of {B})"));
            }
        }
        black_box(&mut *table);
        for batch in table.as_chunks::<B>().0 {
            // SAFETY: got from `pool` above, each put back once.
            unsafe { pool.put_array(batch) };
        }
    }
    Ok(())
}

/// `rounds` rounds of a case: the bulk size a run-time value, or a
/// constant (the sizes DPDK's program has a constant form for).
fn run_rounds(
    pool: &Mempool,
    bulk: usize,
    form: BulkForm,
    rounds: u64,
    table: &mut [Elem; KEEP],
) -> Result<(), String> {
    match (form, bulk) {
        (BulkForm::Variable, _) => get_put_rounds(pool, black_box(bulk), rounds, table),
        (BulkForm::Constant, 1) => get_put_rounds_const::<1>(pool, rounds, table),
        (BulkForm::Constant, 2) => get_put_rounds_const::<2>(pool, rounds, table),
        (BulkForm::Constant, 4) => get_put_rounds_const::<4>(pool, rounds, table),
        (BulkForm::Constant, 8) => get_put_rounds_const::<8>(pool, rounds, table),
        (BulkForm::Constant, 32) => get_put_rounds_const::<32>(pool, rounds, table),
        (BulkForm::Constant, _) => Err(format!("no constant form for bulk {bulk}")),
    }
}

/// One worker: warm up, wait at `barrier` (if any), then get and put `ops`
/// elements (rounded up to whole rounds of [`KEEP`]), the bulk size in
/// `form`.
fn worker(
    pool: &Mempool,
    bulk: usize,
    form: BulkForm,
    ops: u64,
    barrier: Option<&SpinBarrier>,
) -> Result<Sample, String> {
    if bulk == 0 || !KEEP.is_multiple_of(bulk) {
        return Err(format!("bulk {bulk} does not divide {KEEP}"));
    }
    let rounds = ops.div_ceil(KEEP as u64).max(1);
    let mut table = [Elem::DANGLING; KEEP];
    run_rounds(pool, bulk, form, (rounds / 16).max(1), &mut table)?;
    if let Some(b) = barrier {
        b.wait()?;
    }
    let start = rdtsc_ordered();
    run_rounds(pool, bulk, form, rounds, &mut table)?;
    let end = rdtsc_ordered();
    // Hand the cached elements back before the lcore goes away.
    pool.flush_local_cache();
    Ok(Sample {
        ops: rounds * KEEP as u64,
        start,
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_moves_whole_rounds_and_leaves_the_pool_full() {
        let cpu = sluice::lcore::available_cpus()[0];
        for cache in [0, 32] {
            let pool = Mempool::new(config(cache)).unwrap();
            for bulk in BULKS {
                for form in FORMS {
                    let lcore_pool = pool.clone();
                    let s =
                        on_lcore(cpu, move || worker(&lcore_pool, bulk, form, 100, None)).unwrap();
                    assert_eq!(s.ops, 128);
                }
            }
            assert!(pool.is_full());
        }
    }

    #[test]
    fn rows_take_medians_and_per_round_ratios() {
        let pool = Mempool::new(config(0)).unwrap();
        let sluice = vec![(10.0, 200.0), (12.0, 150.0), (11.0, 300.0)];
        let variable = vec![(9.0, 100.0), (8.0, 300.0), (20.0, 100.0)];
        let constant = vec![(4.0, 400.0), (5.0, 300.0), (6.0, 200.0)];
        let r = row(
            "cache 0 bulk 4",
            0,
            4,
            1,
            &pool,
            64,
            &[
                sluice.clone(),
                vec![(3.0, 600.0), (3.5, 300.0), (2.5, 300.0)],
            ],
            &[variable, constant],
        );
        assert_eq!((r.result.cycles_per_op, r.result.mops), (11.0, 200.0));
        assert_eq!((r.mops_min, r.mops_max, r.rounds), (150.0, 300.0, 3));
        assert_eq!(r.result.ops, 3 * 64);
        assert_eq!(r.dpdk_here_mops, Some(100.0));
        assert_eq!(
            (r.dpdk_here_mops_min, r.dpdk_here_mops_max),
            (Some(100.0), Some(300.0))
        );
        assert_eq!(r.dpdk_here_cycles_per_op, Some(9.0));
        // Per-round ratios 2.0, 0.5, 3.0: their median, not 200 / 100.
        assert_eq!(r.vs_dpdk_here, Some(2.0));
        // Ratios 0.5, 0.5, 1.5.
        assert_eq!(r.dpdk_here_const_mops, Some(300.0));
        assert_eq!(r.dpdk_here_const_cycles_per_op, Some(5.0));
        assert_eq!(r.vs_dpdk_here_const, Some(0.5));
        // Sluice's constant form: ratios 1.5, 1.0, 1.5.
        assert_eq!(r.const_mops, Some(300.0));
        assert_eq!(
            (r.const_mops_min, r.const_mops_max),
            (Some(300.0), Some(600.0))
        );
        assert_eq!(r.const_cycles_per_op, Some(3.0));
        assert_eq!(r.const_vs_dpdk_here_const, Some(1.5));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["bench"], "mempool");
        assert_eq!(v["dpdk_here_mops"], 100.0);
        assert_eq!(v["dpdk_mops"], 251.0);

        let alone = row(
            "cache 0 bulk 4",
            0,
            4,
            1,
            &pool,
            64,
            &[sluice, Vec::new()],
            &Default::default(),
        );
        let v = serde_json::to_value(&alone).unwrap();
        assert!(v.get("dpdk_here_mops").is_none(), "{v}");
        assert!(v.get("vs_dpdk_here").is_none(), "{v}");
        assert!(v.get("dpdk_here_const_mops").is_none(), "{v}");
        assert!(v.get("const_mops").is_none(), "{v}");
        assert_eq!(v["mops"], 200.0);
        assert!(pool.is_full());
    }

    #[test]
    fn bad_bulk_is_an_error() {
        let pool = Mempool::new(config(0)).unwrap();
        let err = worker(&pool, 5, BulkForm::Variable, 100, None).unwrap_err();
        assert!(err.contains("bulk 5"), "{err}");
        assert!(pool.is_full());
    }

    #[test]
    fn running_dry_is_an_error_not_a_hang() {
        let pool = Mempool::new(MempoolConfig {
            size: 16,
            cache_size: 0,
            ..config(0)
        })
        .unwrap();
        for form in FORMS {
            let err = worker(&pool, 4, form, 100, None).unwrap_err();
            assert!(err.contains("ran out"), "{err}");
        }
        assert!(pool.is_full());
    }
}
