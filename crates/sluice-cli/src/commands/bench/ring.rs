//! `sluice bench ring`: the lock-free ring, after DPDK's `ring_perf_autotest`.
//!
//! One op is one element enqueued and dequeued. Cases:
//! - one core, SP/SC and MP/MC, single element (`push` + `pop`) and bulk 8 and
//!   32 (`enqueue_bulk` then `dequeue_bulk` of the same size): cycles per
//!   element on that core;
//! - dequeue from an empty ring (`dequeue_bulk` of 8): cycles per call;
//! - two cores, the producer on one CPU and the consumer on another: cycles
//!   per element is the producer's plus the consumer's, each measured on its
//!   own core over its whole run, which is how DPDK reports this case; Mops is
//!   the rate elements come out of the ring on the consumer.
//!
//! The ring has 4096 slots of `usize`, like DPDK's test ring of pointers.

use std::array;
use std::hint::black_box;
use std::sync::Arc;

use sluice::ring::{Consumer, Multi, Producer, Ring, Single, SyncMode};
use sluice::tsc::rdtsc_ordered;

use super::{BenchResult, Ctx, Sample, Selection, SpinBarrier, Stall, Worker, on_lcore, on_lcores};

/// Slots in the ring (DPDK's `RING_SIZE`).
const RING_SIZE: usize = 4096;
/// Largest bulk size used.
const MAX_BULK: usize = 32;
/// Bulk size of the empty-ring dequeue (DPDK uses its first bulk size, 8).
const EMPTY_BULK: usize = 8;
/// Elements per case by default.
const DEFAULT_OPS: u64 = 1 << 24;
/// Elements per case in the summary of `sluice` with no arguments.
const SUMMARY_OPS: u64 = 1 << 23;

/// Producer/consumer synchronisation modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Spsc,
    Mpmc,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Spsc => "SP/SC",
            Mode::Mpmc => "MP/MC",
        }
    }
}

/// Case name: `SP/SC bulk 32`, `MP/MC single 2-core`, ...
fn case_name(mode: Mode, bulk: usize, cores: u32) -> String {
    let size = if bulk == 1 {
        "single".to_owned()
    } else {
        format!("bulk {bulk}")
    };
    let cores = if cores > 1 { " 2-core" } else { "" };
    format!("{} {size}{cores}", mode.label())
}

/// DPDK 22.11's `ring_perf_autotest` figure for a case, in cycles per
/// element (see [`sluice_bench::DPDK_REFERENCE_MACHINE`]).
fn dpdk_ref(mode: Mode, bulk: usize, cores: u32) -> Option<f64> {
    match (mode, bulk, cores) {
        (Mode::Spsc, 1, 1) => Some(11.2),
        (Mode::Mpmc, 1, 1) => Some(43.2),
        (Mode::Spsc, 8, 1) => Some(2.6),
        (Mode::Spsc, 32, 1) => Some(1.6),
        (Mode::Mpmc, 8, 1) => Some(7.1),
        (Mode::Mpmc, 32, 1) => Some(2.4),
        (Mode::Spsc, 8, 2) => Some(8.8),
        (Mode::Spsc, 32, 2) => Some(6.1),
        (Mode::Mpmc, 8, 2) => Some(31.8),
        (Mode::Mpmc, 32, 2) => Some(9.9),
        _ => None,
    }
}

/// Runs the ring cases of `sel`.
pub fn run(ctx: &mut Ctx, sel: Selection) {
    let ops = match sel {
        Selection::Full => ctx.ops(DEFAULT_OPS),
        Selection::Summary => SUMMARY_OPS,
    };
    let mut notes = vec![format!(
        "{RING_SIZE}-slot ring of usize; one op = one element enqueued and dequeued; \
         {ops} elements per case after a warm-up."
    )];
    if let Some((a, b)) = ctx.cpu_pair() {
        notes.push(format!(
            "2-core: producer on CPU {a}, consumer on CPU {b}; cycles/op = producer + consumer \
             cycles per element (DPDK's convention), Mops = elements out of the ring per second."
        ));
    }
    notes.push(sluice_bench::dpdk_reference_note("ring_perf_autotest"));
    ctx.section("ring (cf. DPDK ring_perf_autotest)", &notes);

    let in_summary = |mode: Mode, bulk: usize, cores: u32| match sel {
        Selection::Full => true,
        Selection::Summary => {
            matches!((mode, bulk, cores), (Mode::Spsc, 1, 1) | (_, 32, _))
        }
    };

    for mode in [Mode::Spsc, Mode::Mpmc] {
        for bulk in [1, 8, MAX_BULK] {
            if !in_summary(mode, bulk, 1) {
                continue;
            }
            let case = case_name(mode, bulk, 1);
            let cpu = ctx.main_cpu();
            let r = on_lcore(cpu, move || match mode {
                Mode::Spsc => one_core::<Single, Single>(bulk, ops),
                Mode::Mpmc => one_core::<Multi, Multi>(bulk, ops),
            })
            .map(|s| {
                let mut r = BenchResult::new("ring", case.clone(), 1, s.cycles_per_op(), s.mops());
                r.bulk = Some(bulk);
                r.ops = s.ops;
                r.dpdk_cycles_per_op = dpdk_ref(mode, bulk, 1);
                r
            });
            ctx.report(&case, r);
        }
    }

    if sel == Selection::Full {
        for (mode, dpdk) in [(Mode::Spsc, 5.3), (Mode::Mpmc, 6.3)] {
            let case = format!("{} empty dequeue", mode.label());
            let cpu = ctx.main_cpu();
            let r = on_lcore(cpu, move || match mode {
                Mode::Spsc => empty_dequeue::<Single, Single>(ops),
                Mode::Mpmc => empty_dequeue::<Multi, Multi>(ops),
            })
            .map(|s| {
                let mut r = BenchResult::new("ring", case.clone(), 1, s.cycles_per_op(), s.mops());
                r.bulk = Some(EMPTY_BULK);
                r.ops = s.ops;
                r.dpdk_cycles_per_op = Some(dpdk);
                r
            });
            ctx.report(&case, r);
        }
    }

    // The floor under every two-core figure: what one cache line costs to
    // bounce between the two CPUs right now. On a shared VM it moves with where
    // the hypervisor places the vCPUs (from ~50 to over 1000 cycles seen), so
    // it is measured next to the ring cases it explains.
    {
        let case = "cache line round trip 2-core".to_owned();
        match ctx.cpu_pair() {
            None => ctx.skip(&case, "needs two CPUs, this process may use one"),
            Some(cpus) => {
                let trips = (ops / 16).max(1000);
                let r = super::contention::line_round_trip(cpus, trips).map(|s| {
                    let mut r =
                        BenchResult::new("ring", case.clone(), 2, s.cycles_per_op(), s.mops());
                    r.ops = s.ops;
                    r.dpdk_cycles_per_op = Some(144.0);
                    r
                });
                ctx.report(&case, r);
            }
        }
        // The other floor: how much the two CPUs slow each other down.
        super::note_contention(ctx);
    }

    for mode in [Mode::Spsc, Mode::Mpmc] {
        for bulk in [1, 8, MAX_BULK] {
            if !in_summary(mode, bulk, 2) {
                continue;
            }
            let case = case_name(mode, bulk, 2);
            let Some(cpus) = ctx.cpu_pair() else {
                ctx.skip(&case, "needs two CPUs, this process may use one");
                continue;
            };
            let r = match mode {
                Mode::Spsc => two_core::<Single, Single>(cpus, bulk, ops),
                Mode::Mpmc => two_core::<Multi, Multi>(cpus, bulk, ops),
            }
            .map(|t| {
                let (p, c) = (t.producer.cycles_per_op(), t.consumer.cycles_per_op());
                let mut r = BenchResult::new("ring", case.clone(), 2, p + c, t.consumer.mops());
                r.bulk = Some(bulk);
                r.ops = t.consumer.ops;
                r.producer_cycles = Some(p);
                r.consumer_cycles = Some(c);
                r.producer_waits = Some(t.producer_waits);
                r.consumer_waits = Some(t.consumer_waits);
                r.dpdk_cycles_per_op = dpdk_ref(mode, bulk, 2);
                r
            });
            ctx.report(&case, r);
        }
    }
}

/// Loop iterations for `ops` elements in batches of `bulk`, and the warm-up's.
fn iterations(ops: u64, bulk: usize) -> (u64, u64) {
    let iters = ops.div_ceil(bulk as u64).max(1);
    (iters, (iters / 16).max(1))
}

/// `0 + 1 + ... + (n - 1)`, wrapping like the sums the loops keep.
fn triangle(n: u64) -> u64 {
    (u128::from(n) * u128::from(n.saturating_sub(1)) / 2) as u64
}

/// `push` then `pop`, `iters` times; returns (pushed, popped, sum popped).
#[inline(never)]
fn single_loop<P: SyncMode, C: SyncMode>(
    p: &mut Producer<usize, P>,
    c: &mut Consumer<usize, C>,
    iters: u64,
) -> (u64, u64, u64) {
    let (mut enq, mut deq, mut sum) = (0u64, 0u64, 0u64);
    for i in 0..iters {
        enq += u64::from(p.push(black_box(i as usize)).is_ok());
        if let Some(v) = c.pop() {
            deq += 1;
            sum = sum.wrapping_add(black_box(v) as u64);
        }
    }
    (enq, deq, sum)
}

/// `enqueue_bulk` then `dequeue_bulk` of `bulk`, `iters` times; returns
/// (enqueued, dequeued, sum of the last element of each dequeue).
#[inline(never)]
fn bulk_loop<P: SyncMode, C: SyncMode>(
    p: &mut Producer<usize, P>,
    c: &mut Consumer<usize, C>,
    bulk: usize,
    iters: u64,
    src: &[usize; MAX_BULK],
    dst: &mut [usize; MAX_BULK],
) -> (u64, u64, u64) {
    let (mut enq, mut deq, mut sum) = (0u64, 0u64, 0u64);
    for _ in 0..iters {
        enq += p.enqueue_bulk(black_box(&src[..bulk])).n as u64;
        deq += c.dequeue_bulk(&mut dst[..bulk]).n as u64;
        sum = sum.wrapping_add(black_box(&mut *dst)[bulk - 1] as u64);
    }
    (enq, deq, sum)
}

/// One core: enqueue then dequeue, `ops` elements.
fn one_core<P: SyncMode, C: SyncMode>(bulk: usize, ops: u64) -> Result<Sample, String> {
    let (mut p, mut c) = Ring::<usize>::new::<P, C>(RING_SIZE).map_err(|e| e.to_string())?;
    // Opaque to the optimiser, as DPDK's `volatile` bulk sizes.
    let bulk = black_box(bulk);
    let (iters, warm) = iterations(ops, bulk);
    let n = iters * bulk as u64;
    let (start, end, (enq, deq, sum), want_sum) = if bulk == 1 {
        single_loop(&mut p, &mut c, warm);
        let start = rdtsc_ordered();
        let moved = single_loop(&mut p, &mut c, iters);
        let end = rdtsc_ordered();
        (start, end, moved, triangle(iters))
    } else {
        let src: [usize; MAX_BULK] = array::from_fn(|i| i);
        let mut dst = [0usize; MAX_BULK];
        bulk_loop(&mut p, &mut c, bulk, warm, &src, &mut dst);
        let start = rdtsc_ordered();
        let moved = bulk_loop(&mut p, &mut c, bulk, iters, &src, &mut dst);
        let end = rdtsc_ordered();
        (start, end, moved, iters * (bulk as u64 - 1))
    };
    if (enq, deq) != (n, n) || sum != want_sum {
        return Err(format!(
            "moved the wrong elements: {enq} enqueued, {deq} dequeued (sum {sum}), expected {n} \
             each (sum {want_sum})"
        ));
    }
    Ok(Sample { ops: n, start, end })
}

/// `dequeue_bulk` of [`EMPTY_BULK`] on an empty ring, `calls` times; returns the
/// elements dequeued (0).
#[inline(never)]
fn empty_loop<C: SyncMode>(c: &mut Consumer<usize, C>, calls: u64, dst: &mut [usize]) -> u64 {
    let mut got = 0u64;
    for _ in 0..calls {
        got += c.dequeue_bulk(black_box(&mut *dst)).n as u64;
    }
    got
}

/// One core: dequeue from an empty ring, `calls` times.
fn empty_dequeue<P: SyncMode, C: SyncMode>(calls: u64) -> Result<Sample, String> {
    let (_p, mut c) = Ring::<usize>::new::<P, C>(RING_SIZE).map_err(|e| e.to_string())?;
    let mut dst = [0usize; EMPTY_BULK];
    empty_loop(&mut c, (calls / 16).max(1), &mut dst);
    let start = rdtsc_ordered();
    let got = empty_loop(&mut c, calls, &mut dst);
    let end = rdtsc_ordered();
    if got != 0 {
        return Err(format!("dequeued {got} elements from an empty ring"));
    }
    Ok(Sample {
        ops: calls,
        start,
        end,
    })
}

/// Enqueues `iters` batches of `bulk` (retrying while the ring is full).
#[inline(never)]
fn produce_n<P: SyncMode>(
    p: &mut Producer<usize, P>,
    bulk: usize,
    iters: u64,
    src: &[usize; MAX_BULK],
    stall: &mut Stall,
) -> Result<(), String> {
    if bulk == 1 {
        for i in 0..iters {
            while p.push(black_box(i as usize)).is_err() {
                stall.failed()?;
            }
            stall.progressed();
        }
    } else {
        for _ in 0..iters {
            while p.enqueue_bulk(black_box(&src[..bulk])).n == 0 {
                stall.failed()?;
            }
            stall.progressed();
        }
    }
    Ok(())
}

/// Dequeues `iters` batches of `bulk` (retrying while the ring is empty);
/// returns the sum of the elements (single) or of each batch's last element.
#[inline(never)]
fn consume_n<C: SyncMode>(
    c: &mut Consumer<usize, C>,
    bulk: usize,
    iters: u64,
    dst: &mut [usize; MAX_BULK],
    stall: &mut Stall,
) -> Result<u64, String> {
    let mut sum = 0u64;
    if bulk == 1 {
        for _ in 0..iters {
            let v = loop {
                match c.pop() {
                    Some(v) => break v,
                    None => stall.failed()?,
                }
            };
            stall.progressed();
            sum = sum.wrapping_add(black_box(v) as u64);
        }
    } else {
        for _ in 0..iters {
            while c.dequeue_bulk(&mut dst[..bulk]).n == 0 {
                stall.failed()?;
            }
            stall.progressed();
            sum = sum.wrapping_add(black_box(&mut *dst)[bulk - 1] as u64);
        }
    }
    Ok(sum)
}

/// What a two-core case measured.
struct TwoCore {
    producer: Sample,
    consumer: Sample,
    /// Failed enqueue attempts (ring full) per successful call.
    producer_waits: f64,
    /// Failed dequeue attempts (ring empty) per successful call.
    consumer_waits: f64,
}

/// Two cores: a producer lcore on `cpus.0` and a consumer lcore on `cpus.1`
/// move `ops` elements.
fn two_core<P: SyncMode + Send, C: SyncMode + Send>(
    cpus: (usize, usize),
    bulk: usize,
    ops: u64,
) -> Result<TwoCore, String> {
    // Each end is 128-byte aligned by the library, so the two ends' private
    // state cannot share a line even though both closures box theirs.
    let (mut p, mut c) = Ring::<usize>::new::<P, C>(RING_SIZE).map_err(|e| e.to_string())?;
    let bulk = black_box(bulk);
    let (iters, warm) = iterations(ops, bulk);
    let n = iters * bulk as u64;
    let barrier = Arc::new(SpinBarrier::new(2));

    let start_line = Arc::clone(&barrier);
    let producer: Worker<(Sample, u64)> = Box::new(move || {
        let src: [usize; MAX_BULK] = array::from_fn(|i| i);
        let mut stall = Stall::new("producer");
        produce_n(&mut p, bulk, warm, &src, &mut stall)?;
        stall.take_total();
        start_line.wait()?;
        let start = rdtsc_ordered();
        produce_n(&mut p, bulk, iters, &src, &mut stall)?;
        let end = rdtsc_ordered();
        Ok((Sample { ops: n, start, end }, stall.take_total()))
    });
    let consumer: Worker<(Sample, u64)> = Box::new(move || {
        let mut dst = [0usize; MAX_BULK];
        let mut stall = Stall::new("consumer");
        consume_n(&mut c, bulk, warm, &mut dst, &mut stall)?;
        stall.take_total();
        barrier.wait()?;
        let start = rdtsc_ordered();
        let sum = consume_n(&mut c, bulk, iters, &mut dst, &mut stall)?;
        let end = rdtsc_ordered();
        let want = if bulk == 1 {
            triangle(iters)
        } else {
            iters * (bulk as u64 - 1)
        };
        if sum != want {
            return Err(format!(
                "consumer saw the wrong elements: sum {sum}, expected {want}"
            ));
        }
        Ok((Sample { ops: n, start, end }, stall.take_total()))
    });

    let mut samples = on_lcores(vec![(cpus.0, producer), (cpus.1, consumer)])?;
    match (samples.pop(), samples.pop()) {
        (Some(cons), Some(prod)) => Ok(TwoCore {
            producer: prod.0,
            consumer: cons.0,
            producer_waits: prod.1 as f64 / iters as f64,
            consumer_waits: cons.1 as f64 / iters as f64,
        }),
        _ => Err("a worker returned no sample".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_core_cases_move_every_element() {
        for bulk in [1, 8, 32] {
            let s = one_core::<Single, Single>(bulk, 1000).unwrap();
            assert_eq!(s.ops, 1000u64.div_ceil(bulk as u64) * bulk as u64);
            assert!(s.end > s.start);
            let s = one_core::<Multi, Multi>(bulk, 100).unwrap();
            assert!(s.ops >= 100);
        }
    }

    #[test]
    fn empty_dequeue_moves_nothing() {
        let s = empty_dequeue::<Single, Single>(100).unwrap();
        assert_eq!(s.ops, 100);
    }

    #[test]
    fn two_core_cases_move_every_element() {
        let cpus = sluice::lcore::available_cpus();
        // On one CPU both workers share it; the case still has to complete.
        let pair = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
        for bulk in [1, 8, 32] {
            let t = two_core::<Single, Single>(pair, bulk, 10_000).unwrap();
            assert_eq!(t.producer.ops, t.consumer.ops);
            assert!(t.producer.ops >= 10_000);
            let t = two_core::<Multi, Multi>(pair, bulk, 10_000).unwrap();
            assert_eq!(t.producer.ops, t.consumer.ops);
        }
    }

    #[test]
    fn case_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for mode in [Mode::Spsc, Mode::Mpmc] {
            for bulk in [1, 8, 32] {
                for cores in [1, 2] {
                    assert!(names.insert(case_name(mode, bulk, cores)));
                }
            }
        }
        assert_eq!(case_name(Mode::Spsc, 32, 2), "SP/SC bulk 32 2-core");
    }
}
