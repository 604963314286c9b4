//! How much the two benchmark CPUs slow each other down right now.
//!
//! A fixed loop of register-only arithmetic — eight independent chains, 16
//! integer ops per iteration, no memory access — is timed alone on each CPU,
//! then on both at once. It is bound by the core's integer units (about 3.5
//! TSC cycles per iteration on a core of its own here), so:
//!
//! - when the two CPUs are separate physical cores, running it on both
//!   changes nothing;
//! - when they are SMT siblings, or a hypervisor runs the two vCPUs on one
//!   physical core's hyperthreads, each gets about half the units and the
//!   loop takes up to twice as long on both;
//! - a slow *alone* figure says something else ran on that core's sibling
//!   meanwhile (another guest's thread).
//!
//! Every two-core figure moves with this, and on a shared 2-vCPU virtual
//! machine it has been seen anywhere from 1.0× to 2.0× within minutes.
//! Benchmarks that report two-core figures print it beside them.
//!
//! The second probe, [`line_round_trip`], times one cache line bouncing
//! between the two CPUs: what every hand-off between two cores pays at
//! least, and another figure that moves between runs on a shared host.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice::tsc::rdtsc_ordered;

use crate::stats::Spread;
use crate::{Ctx, Sample, SpinBarrier, Stall, Worker, on_lcore, on_lcores};

/// Iterations timed per run of the loop: about 4 M cycles on a core alone.
pub const ITERS: u64 = 1 << 20;

/// What the probe measured: cycles per loop iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoreContention {
    /// Each CPU running the loop while the other idles.
    pub alone: [f64; 2],
    /// Both CPUs running it at the same time.
    pub together: [f64; 2],
}

impl CoreContention {
    /// How much slower the loop ran with both CPUs busy: the mean of the
    /// two `together` figures over the mean of the two `alone` ones.
    pub fn slowdown(&self) -> f64 {
        (self.together[0] + self.together[1]) / (self.alone[0] + self.alone[1])
    }

    /// One line for a benchmark's notes.
    pub fn describe(&self, cpus: (usize, usize)) -> String {
        let s = self.slowdown();
        let reading = if s < 1.15 {
            "the two CPUs run side by side at full speed"
        } else if s < 1.6 {
            "the two CPUs partly share execution units (SMT siblings, or a busy host)"
        } else {
            "the two CPUs share one physical core's execution units (SMT siblings on the host)"
        };
        let [a0, a1] = self.alone;
        let slow = if a0 > 1.3 * a1 {
            Some(cpus.0)
        } else if a1 > 1.3 * a0 {
            Some(cpus.1)
        } else {
            None
        };
        let slow_alone = slow
            .map(|c| format!("; CPU {c} was slow even alone (something else ran on its core)"))
            .unwrap_or_default();
        format!(
            "Core contention in this run: a register-only loop takes {a0:.2} / {a1:.2} TSC \
             cycles per iteration alone on CPUs {} / {}, {:.2} / {:.2} with both running it: \
             {s:.2}x, {reading}{slow_alone}. Two-core figures move with it.",
            cpus.0, cpus.1, self.together[0], self.together[1]
        )
    }
}

/// One line for a benchmark that probed at the start of each of its
/// rounds (on `cpus`): the spread of the slowdowns it saw, and how fast each
/// CPU ran the loop alone — against the fastest round, so a CPU whose core
/// something else shared for a while shows as rounds run slow.
pub fn describe_rounds(rounds: &[CoreContention], cpus: (usize, usize)) -> String {
    if rounds.is_empty() {
        return "Core contention: not measured.".to_owned();
    }
    let spread = |f: fn(&CoreContention) -> f64| {
        let v: Vec<f64> = rounds.iter().map(f).collect();
        Spread::of(&v)
    };
    let slowdowns = spread(CoreContention::slowdown);
    let (med, lo, hi) = (slowdowns.median, slowdowns.min, slowdowns.max);
    let shared = rounds.iter().filter(|c| c.slowdown() >= 1.6).count();
    let alone0 = spread(|c| c.alone[0]);
    let alone1 = spread(|c| c.alone[1]);
    let (a0, a1) = (alone0.median, alone1.median);
    let best = alone0.min.min(alone1.min);
    let slow = rounds
        .iter()
        .filter(|c| c.alone[0] > 1.3 * best || c.alone[1] > 1.3 * best)
        .count();
    format!(
        "Core contention at the start of each of the {} round(s) (a register-only loop on \
         both CPUs at once against each alone): median {med:.2}x, {lo:.2}-{hi:.2}x; {shared} \
         round(s) at 1.6x or more, where the two CPUs shared one physical core and the \
         two-core figures were not two cores' figures. Alone, the loop took a median {a0:.2} / \
         {a1:.2} cycles per iteration on CPUs {} / {} (fastest {best:.2}); {slow} round(s) \
         had a CPU 1.3x slower than that even alone (something else ran on its core).",
        rounds.len(),
        cpus.0,
        cpus.1,
    )
}

/// Prints the probe's line ([`CoreContention::describe`]) for the CPUs of
/// two-core cases, if there are two.
pub fn note(ctx: &Ctx) {
    let Some(cpus) = ctx.cpu_pair() else { return };
    match measure(cpus, ITERS) {
        Ok(c) => ctx.note(&c.describe(cpus)),
        Err(e) => ctx.note(&format!("core contention: {e}")),
    }
}

/// Notes what a cache line's round trip between the two CPUs costs now
/// ([`line_round_trip`], 20,000 trips), beside figures that move lines
/// between them with every packet; `when` says where in the run it was
/// taken. The contention probe cannot see it: two vCPUs on separate
/// physical cores run side by side at full speed whether a line takes a
/// hundred cycles to cross or several hundred.
pub fn note_line_round_trip(ctx: &Ctx, when: &str) {
    let Some(cpus) = ctx.cpu_pair() else { return };
    match line_round_trip(cpus, 20_000) {
        Ok(s) => ctx.note(&format!(
            "A cache line's round trip between CPUs {} and {} {when}: {:.0} TSC cycles.",
            cpus.0,
            cpus.1,
            s.cycles_per_op()
        )),
        Err(e) => ctx.note(&format!("cache line round trip: {e}")),
    }
}

/// Runs the probe on `cpus`, `iters` iterations per timing.
pub fn measure(cpus: (usize, usize), iters: u64) -> Result<CoreContention, String> {
    let a0 = on_lcore(cpus.0, move || Ok(cycles_per_iter(iters)))?;
    let a1 = on_lcore(cpus.1, move || Ok(cycles_per_iter(iters)))?;
    let barrier = Arc::new(SpinBarrier::new(2));
    let job = |b: Arc<SpinBarrier>| -> Worker<f64> {
        Box::new(move || {
            b.wait()?;
            Ok(cycles_per_iter(iters))
        })
    };
    let v = on_lcores(vec![
        (cpus.0, job(Arc::clone(&barrier))),
        (cpus.1, job(barrier)),
    ])?;
    Ok(CoreContention {
        alone: [a0, a1],
        together: [v[0], v[1]],
    })
}

/// One cache line, 128-byte aligned so nothing else shares it.
#[repr(align(128))]
struct CacheLine(AtomicU64);

/// Bounces one cache line `trips` times between a lcore on `cpus.0` (writes
/// an odd value, waits for the next even one) and one on `cpus.1` (answers);
/// one op = one round trip, timed on `cpus.0`. Every two-core figure moves
/// with what this costs: on a shared virtual machine, from about a hundred
/// to thousands of cycles between runs.
pub fn line_round_trip(cpus: (usize, usize), trips: u64) -> Result<Sample, String> {
    let line = Arc::new(CacheLine(AtomicU64::new(0)));
    let barrier = Arc::new(SpinBarrier::new(2));
    let (l1, b1) = (Arc::clone(&line), Arc::clone(&barrier));
    let ping: Worker<Sample> = Box::new(move || {
        let mut stall = Stall::new("pinger");
        b1.wait()?;
        let start = rdtsc_ordered();
        for i in 0..trips {
            // Release/Acquire: each side's store is what the other waits for.
            l1.0.store(2 * i + 1, Ordering::Release);
            while l1.0.load(Ordering::Acquire) != 2 * i + 2 {
                stall.failed()?;
            }
            stall.progressed();
        }
        let end = rdtsc_ordered();
        Ok(Sample {
            ops: trips,
            start,
            end,
        })
    });
    let pong: Worker<Sample> = Box::new(move || {
        let mut stall = Stall::new("ponger");
        barrier.wait()?;
        for i in 0..trips {
            while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                stall.failed()?;
            }
            stall.progressed();
            line.0.store(2 * i + 2, Ordering::Release);
        }
        Ok(Sample {
            ops: 0,
            start: 0,
            end: 0,
        })
    });
    let mut samples = on_lcores(vec![(cpus.0, ping), (cpus.1, pong)])?;
    samples.truncate(1);
    samples
        .pop()
        .ok_or_else(|| "the pinger returned no sample".to_owned())
}

/// Times `iters` iterations of the loop on the calling thread.
fn cycles_per_iter(iters: u64) -> f64 {
    let iters = iters.max(1);
    let start = rdtsc_ordered();
    let x = alu_loop(iters);
    let end = rdtsc_ordered();
    std::hint::black_box(x);
    end.wrapping_sub(start) as f64 / iters as f64
}

/// Eight chains of `add`, `rol`: 16 integer ops per iteration, each chain
/// two deep, so the core's integer units (not latency) set the pace.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn alu_loop(iters: u64) -> u64 {
    let mut r = [1u64, 2, 3, 4, 5, 6, 7, 8];
    let k = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..iters {
        // SAFETY: register arithmetic on the operands alone: no memory, no
        // stack, no flags anyone reads.
        unsafe {
            std::arch::asm!(
                "add {0}, {k}", "add {1}, {k}", "add {2}, {k}", "add {3}, {k}",
                "add {4}, {k}", "add {5}, {k}", "add {6}, {k}", "add {7}, {k}",
                "rol {0}, 1", "rol {1}, 1", "rol {2}, 1", "rol {3}, 1",
                "rol {4}, 1", "rol {5}, 1", "rol {6}, 1", "rol {7}, 1",
                inout(reg) r[0], inout(reg) r[1], inout(reg) r[2], inout(reg) r[3],
                inout(reg) r[4], inout(reg) r[5], inout(reg) r[6], inout(reg) r[7],
                k = in(reg) k,
                options(nomem, nostack),
            );
        }
    }
    r.iter().fold(0, |a, &b| a ^ b)
}

/// Elsewhere: the same chains in plain Rust (the compiler may reshape them;
/// the figure is then only roughly comparable).
#[cfg(not(target_arch = "x86_64"))]
#[inline(never)]
fn alu_loop(iters: u64) -> u64 {
    let mut r = [1u64, 2, 3, 4, 5, 6, 7, 8];
    let k = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..iters {
        for x in r.iter_mut() {
            *x = x.wrapping_add(k).rotate_left(1);
        }
        r = std::hint::black_box(r);
    }
    r.iter().fold(0, |a, &b| a ^ b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_computes_the_chains() {
        // Two iterations by hand for chain 0.
        let k = 0x9e37_79b9_7f4a_7c15u64;
        let step = |x: u64| x.wrapping_add(k).rotate_left(1);
        let want: u64 = (1..=8u64).map(|x| step(step(x))).fold(0, |a, b| a ^ b);
        assert_eq!(alu_loop(2), want);
    }

    #[test]
    fn line_round_trip_completes_every_trip() {
        let cpus = sluice::lcore::available_cpus();
        let pair = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
        let s = line_round_trip(pair, 2_000).unwrap();
        assert_eq!(s.ops, 2_000);
        assert!(s.end > s.start);
    }
    #[test]
    fn the_probe_gives_four_figures_and_a_ratio() {
        let cpus = sluice::lcore::available_cpus();
        let pair = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
        let c = measure(pair, 1 << 12).unwrap();
        for v in c.alone.iter().chain(&c.together) {
            assert!(v.is_finite() && *v > 0.0, "{c:?}");
        }
        let line = c.describe(pair);
        assert!(line.starts_with("Core contention in this run:"), "{line}");
        assert!(line.contains(&format!("{:.2}x", c.slowdown())), "{line}");
    }

    #[test]
    fn the_reading_follows_the_slowdown() {
        let c = |t: f64| CoreContention {
            alone: [4.0, 4.0],
            together: [t, t],
        };
        assert!(c(4.1).describe((0, 1)).contains("side by side"));
        assert!(c(5.0).describe((0, 1)).contains("partly share"));
        assert!(c(7.9).describe((0, 1)).contains("share one physical core"));
        assert_eq!(c(8.0).slowdown(), 2.0);
        assert!(!c(4.0).describe((0, 1)).contains("slow even alone"));
        let lopsided = CoreContention {
            alone: [4.0, 6.5],
            together: [4.0, 6.5],
        };
        assert!(
            lopsided
                .describe((0, 1))
                .contains("CPU 1 was slow even alone")
        );
        // Slowdowns 2.0, 1.0 and 1.1; CPU 1 at twice the time alone in the
        // second round.
        let round = |alone: [f64; 2], together: [f64; 2]| CoreContention { alone, together };
        let rounds = [
            round([3.5, 3.5], [7.0, 7.0]),
            round([3.5, 7.0], [3.5, 7.0]),
            round([3.6, 3.6], [3.96, 3.96]),
        ];
        let r = describe_rounds(&rounds, (0, 1));
        assert!(r.contains("each of the 3 round(s)"), "{r}");
        assert!(
            r.contains("median 1.10x, 1.00-2.00x; 1 round(s) at 1.6x"),
            "{r}"
        );
        assert!(
            r.contains("median 3.50 / 3.60 cycles per iteration on CPUs 0 / 1 (fastest 3.50)"),
            "{r}"
        );
        assert!(r.contains("1 round(s) had a CPU 1.3x slower"), "{r}");
        assert_eq!(
            describe_rounds(&[], (0, 1)),
            "Core contention: not measured."
        );
    }
}
