//! `sluice bench mbuf`: packet buffer allocation and free.
//!
//! One op is one mbuf allocated (reset, as a driver's Rx refill gets it) and
//! freed back to its pool. Cases, on one lcore, with the mempool's per-lcore
//! cache at 0 and at 256 (DPDK's forwarding default):
//! - `single`: `MbufPool::alloc` then dropping the `Mbuf`;
//! - `bulk 32`: `MbufPool::alloc_bulk` of 32 into a `Burst`, then
//!   `Burst::clear` (one bulk free); cycles per mbuf.
//!
//! There is no DPDK figure for this alone; the closest is `testpmd`'s io
//! forwarding over `net_null` ports (alloc → forward → free, cache 256, burst
//! 32): about 17 cycles per packet, so the alloc + free part must stay well
//! below that.

use std::hint::black_box;

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::tsc::rdtsc_ordered;

use super::{BenchResult, Ctx, Sample, Selection, on_lcore};

/// Mbufs in the pool.
const POOL_SIZE: u32 = 8191;
/// Per-lcore cache sizes measured.
const CACHES: [u32; 2] = [0, 256];
/// The bulk size (a full default `Burst`).
const BULK: usize = 32;
/// Mbufs per case by default.
const DEFAULT_OPS: u64 = 1 << 23;

fn case_name(cache: u32, bulk: usize) -> String {
    if bulk == 1 {
        format!("cache {cache} single")
    } else {
        format!("cache {cache} bulk {bulk}")
    }
}

/// Runs the mbuf cases of `sel` (none in the summary).
pub fn run(ctx: &mut Ctx, sel: Selection) {
    if sel == Selection::Summary {
        return;
    }
    let ops = ctx.ops(DEFAULT_OPS);
    let mut notes = vec![format!(
        "{POOL_SIZE} mbufs (128 B header + 128 B headroom + 2048 B data room); one op = one \
         mbuf allocated (reset) and freed; {ops} mbufs per case after a warm-up."
    )];
    match MbufPool::new(config(0)) {
        Ok(pool) => notes.push(format!("Pool memory: {}.", pool.mempool().backing())),
        Err(e) => notes.push(format!("Cannot create an mbuf pool: {e}.")),
    }
    ctx.section("mbuf (alloc + free)", &notes);

    for cache in CACHES {
        let pool = match MbufPool::new(config(cache)) {
            Ok(pool) => pool,
            Err(e) => {
                for bulk in [1, BULK] {
                    ctx.report(&case_name(cache, bulk), Err(e.to_string()));
                }
                continue;
            }
        };
        for bulk in [1, BULK] {
            let case = case_name(cache, bulk);
            let lcore_pool = pool.clone();
            let r = on_lcore(ctx.main_cpu(), move || worker(&lcore_pool, bulk, ops)).map(|s| {
                let mut r = BenchResult::new("mbuf", case.clone(), 1, s.cycles_per_op(), s.mops());
                r.bulk = Some(bulk);
                r.cache = Some(cache);
                r.ops = s.ops;
                r.backing = Some(pool.mempool().backing().to_string());
                r
            });
            ctx.report(&case, r);
        }
        if !pool.is_full() {
            ctx.report(
                &format!("cache {cache}"),
                Err("the mbuf pool is not full after the run".to_owned()),
            );
        }
    }
}

fn config(cache: u32) -> MbufPoolConfig {
    MbufPoolConfig {
        name: format!("bench-mbuf-cache{cache}"),
        size: POOL_SIZE,
        cache_size: cache,
        ..Default::default()
    }
}

/// Allocates and frees one mbuf, `n` times.
#[inline(never)]
fn single_rounds(pool: &MbufPool, n: u64) -> Result<(), String> {
    for _ in 0..n {
        let m = pool
            .alloc()
            .ok_or_else(|| "the mbuf pool ran dry".to_owned())?;
        drop(black_box(m));
    }
    Ok(())
}

/// Allocates a burst of [`BULK`] and frees it, `n` times.
#[inline(never)]
fn bulk_rounds(pool: &MbufPool, n: u64, burst: &mut Burst) -> Result<(), String> {
    for _ in 0..n {
        pool.alloc_bulk(burst, BULK).map_err(|e| e.to_string())?;
        black_box(&mut *burst).clear();
    }
    Ok(())
}

/// One worker: warm up, then allocate and free `ops` mbufs in calls of `bulk`.
fn worker(pool: &MbufPool, bulk: usize, ops: u64) -> Result<Sample, String> {
    let rounds = ops.div_ceil(bulk as u64).max(1);
    let warm = (rounds / 16).max(1);
    let (start, end) = if bulk == 1 {
        single_rounds(pool, warm)?;
        let start = rdtsc_ordered();
        single_rounds(pool, rounds)?;
        (start, rdtsc_ordered())
    } else if bulk == BULK {
        let mut burst = Burst::new();
        bulk_rounds(pool, warm, &mut burst)?;
        let start = rdtsc_ordered();
        bulk_rounds(pool, rounds, &mut burst)?;
        (start, rdtsc_ordered())
    } else {
        return Err(format!("bulk {bulk} is not measured (1 or {BULK})"));
    };
    // Hand the cached buffers back before the lcore goes away.
    pool.flush_local_cache();
    Ok(Sample {
        ops: rounds * bulk as u64,
        start,
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_allocates_and_frees_everything() {
        let cpu = sluice::lcore::available_cpus()[0];
        for cache in CACHES {
            let pool = MbufPool::new(config(cache)).unwrap();
            for bulk in [1, BULK] {
                let lcore_pool = pool.clone();
                let s = on_lcore(cpu, move || worker(&lcore_pool, bulk, 100)).unwrap();
                assert_eq!(s.ops, 100u64.div_ceil(bulk as u64) * bulk as u64);
            }
            assert!(pool.is_full());
        }
    }

    #[test]
    fn unsupported_bulk_is_an_error() {
        let pool = MbufPool::new(config(0)).unwrap();
        let err = worker(&pool, 7, 100).unwrap_err();
        assert!(err.contains("bulk 7"), "{err}");
        assert!(pool.is_full());
    }
}
