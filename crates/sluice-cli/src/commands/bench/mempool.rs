//! `sluice bench mempool`: get and put, after DPDK's `mempool_perf_autotest`.
//!
//! One op is one element got and put back, so Mops compares directly with
//! DPDK's rate. Each worker lcore repeatedly gets [`KEEP`] elements in calls of
//! `bulk` (`get` for 1, `get_bulk` otherwise), then puts them back the same way.
//! Cache sizes 0 (no cache: every call goes to the pool's ring), 32, 256 and
//! 512 × bulk 1, 4 and 32, on one core and on two cores at once.
//!
//! cycles/op is per core (the mean of the workers' own figures); Mops is the
//! total of all cores: every element moved divided by the time from the first
//! worker's start to the last one's end.

use std::hint::black_box;
use std::sync::Arc;

use sluice::mempool::{Elem, Mempool, MempoolConfig};
use sluice::tsc::rdtsc_ordered;

use super::{BenchResult, Ctx, Sample, Selection, SpinBarrier, Worker, mops, on_lcore, on_lcores};

/// Elements in the pool (a power of two minus one, as DPDK sizes pools).
const POOL_SIZE: u32 = 8191;
/// Bytes per element, as DPDK's mempool_perf test.
const ELT_SIZE: usize = 2048;
/// Elements each worker holds at once (DPDK's `n_keep`).
const KEEP: usize = 32;
/// Per-lcore cache sizes measured.
const CACHES: [u32; 4] = [0, 32, 256, 512];
/// Bulk sizes measured.
const BULKS: [usize; 3] = [1, 4, 32];
/// Elements per core per case by default.
const DEFAULT_OPS: u64 = 1 << 23;
/// Elements per core per case in the summary of `sluice` with no arguments.
const SUMMARY_OPS: u64 = 1 << 23;

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
    let mut notes = vec![format!(
        "{POOL_SIZE} elements of {ELT_SIZE} B; one op = one element got and put back; \
         each worker holds {KEEP} at a time; {ops} elements per core per case after a warm-up."
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
    notes.push(sluice_bench::dpdk_reference_note(
        "mempool_perf_autotest, in Mops (both cores together on two cores)",
    ));
    ctx.section("mempool (cf. DPDK mempool_perf_autotest)", &notes);

    super::note_contention(ctx);
    for cores in [1u32, 2] {
        for cache in CACHES {
            let todo: Vec<usize> = BULKS
                .into_iter()
                .filter(|&b| wanted(cache, b, cores))
                .collect();
            if todo.is_empty() {
                continue;
            }
            if cores == 2 && ctx.cpu_pair().is_none() {
                for bulk in todo {
                    ctx.skip(
                        &case_name(cache, bulk, cores),
                        "needs two CPUs, this process may use one",
                    );
                }
                continue;
            }
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
                let r = measure(ctx, &pool, bulk, cores, ops).map(|(cpo, total_mops, ops)| {
                    let mut r = BenchResult::new("mempool", case.clone(), cores, cpo, total_mops);
                    r.bulk = Some(bulk);
                    r.cache = Some(cache);
                    r.ops = ops;
                    r.backing = Some(pool.backing().to_string());
                    r.dpdk_mops = dpdk_ref(cache, bulk, cores);
                    r
                });
                ctx.report(&case, r);
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

/// Runs one case on `cores` lcores; returns (cycles per op per core, total Mops,
/// total ops).
fn measure(
    ctx: &Ctx,
    pool: &Mempool,
    bulk: usize,
    cores: u32,
    ops: u64,
) -> Result<(f64, f64, u64), String> {
    let samples = if cores == 1 {
        let pool = pool.clone();
        vec![on_lcore(ctx.main_cpu(), move || {
            worker(&pool, bulk, ops, None)
        })?]
    } else {
        let (a, b) = ctx.cpu_pair().ok_or_else(|| "needs two CPUs".to_owned())?;
        let barrier = Arc::new(SpinBarrier::new(2));
        let jobs: Vec<(usize, Worker<Sample>)> = [a, b]
            .into_iter()
            .map(|cpu| {
                let pool = pool.clone();
                let barrier = Arc::clone(&barrier);
                let job: Worker<Sample> =
                    Box::new(move || worker(&pool, bulk, ops, Some(&barrier)));
                (cpu, job)
            })
            .collect();
        on_lcores(jobs)?
    };
    let per_core = samples.iter().map(Sample::cycles_per_op).sum::<f64>() / samples.len() as f64;
    let total_ops: u64 = samples.iter().map(|s| s.ops).sum();
    let first = samples.iter().map(|s| s.start).min().unwrap_or(0);
    let last = samples.iter().map(|s| s.end).max().unwrap_or(0);
    Ok((
        per_core,
        mops(total_ops, last.saturating_sub(first)),
        total_ops,
    ))
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

/// One worker: warm up, wait at `barrier` (if any), then get and put `ops`
/// elements (rounded up to whole rounds of [`KEEP`]).
fn worker(
    pool: &Mempool,
    bulk: usize,
    ops: u64,
    barrier: Option<&SpinBarrier>,
) -> Result<Sample, String> {
    if bulk == 0 || !KEEP.is_multiple_of(bulk) {
        return Err(format!("bulk {bulk} does not divide {KEEP}"));
    }
    let bulk = black_box(bulk);
    let rounds = ops.div_ceil(KEEP as u64).max(1);
    let mut table = [Elem::DANGLING; KEEP];
    get_put_rounds(pool, bulk, (rounds / 16).max(1), &mut table)?;
    if let Some(b) = barrier {
        b.wait()?;
    }
    let start = rdtsc_ordered();
    get_put_rounds(pool, bulk, rounds, &mut table)?;
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
                let lcore_pool = pool.clone();
                let s = on_lcore(cpu, move || worker(&lcore_pool, bulk, 100, None)).unwrap();
                assert_eq!(s.ops, 128);
            }
            assert!(pool.is_full());
        }
    }

    #[test]
    fn bad_bulk_is_an_error() {
        let pool = Mempool::new(config(0)).unwrap();
        let err = worker(&pool, 5, 100, None).unwrap_err();
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
        let err = worker(&pool, 4, 100, None).unwrap_err();
        assert!(err.contains("ran out"), "{err}");
        assert!(pool.is_full());
    }
}
