//! `sluice bench fwd`'s soft io cases: the soft driver's scalar path
//! (`vector=off`) and its vector path (`vector=auto`: the highest level
//! this CPU has), side by side.
//!
//! Two pairs of soft ports, each on a tester and a pool of its own, io
//! forwarding the built-in tester's traffic (64-byte UDP, 1024 flows) with
//! the inline device and its cycles excluded, as the other soft cases.
//! Method as the l3fwd case's (`fwd_l3.rs`): after an untimed warm-up of
//! each pair, [`ROUNDS`] interleaved rounds (`sluice_bench::interleave`),
//! each pair forwarding one slice per round, the order alternating; cycles
//! per packet are medians over rounds, and the vector/scalar ratio the
//! median of the per-round ratios, so a change in the machine's load
//! moves both sides alike.

use sluice::driver::soft::VectorLevel;
use sluice::mbuf::MbufPool;
use sluice::port::Port;
use sluice_bench::interleave;
use sluice_bench::stats::{Spread, ratios};

use super::fwd::{bench_pool, open_two, soft_spec};
use super::fwd_l3::{Slices, io_slice};
use super::{BenchResult, on_lcore};

/// The scalar path's row.
pub const SCALAR_CASE: &str = "soft io (inline, scalar)";
/// The vector path's row (the soft port's default, `vector=auto`).
pub const VECTOR_CASE: &str = "soft io (inline)";
/// Timed rounds (each pair forwards one slice per round).
pub const ROUNDS: usize = 32;

/// What the two paths measured.
#[derive(Debug)]
pub struct PathPair {
    /// The scalar path (medians over rounds).
    pub scalar: BenchResult,
    /// The vector path (medians over rounds).
    pub vector: BenchResult,
    /// The vector path's level on this CPU.
    pub level: VectorLevel,
    /// The per-round vector/scalar ratios: median, smallest and largest.
    pub ratio: Spread,
}

impl PathPair {
    /// The line naming the paths and giving the ratio.
    pub fn note(&self) -> String {
        format!(
            "soft io paths: `{SCALAR_CASE}` runs the scalar Rx and Tx loops (vector=off), \
             `{VECTOR_CASE}` the {} ones (vector=auto); vector / scalar cycles per packet, \
             median of {ROUNDS} interleaved rounds: {:.2} (min-max {:.2}-{:.2})",
            self.level, self.ratio.median, self.ratio.min, self.ratio.max
        )
    }
}

/// The line naming the soft driver's path the benchmarks' soft ports run
/// (their specs leave `vector` at `auto`, except the scalar rows').
pub fn path_note() -> String {
    format!(
        "soft ports run the driver's {} Rx and Tx paths (vector=auto on this CPU; \
         vector=off is the scalar path; with rxbuf=frag the Rx refill stays scalar)",
        VectorLevel::best()
    )
}

/// Two soft ports at `vector=` `value`, on a tester of their own.
fn open_pair(pool: &MbufPool, value: &str) -> Result<Vec<Port>, String> {
    let spec = format!(
        "{},vector={value}",
        soft_spec(&super::unique_name("bench_fwd_vector"))
    );
    open_two(pool, &[spec.clone(), spec])
}

/// Measures both paths on `cpu`, `ops` packets per path in all.
pub fn measure(cpu: usize, ops: u64) -> Result<PathPair, String> {
    let (scalar_pool, vector_pool) = (bench_pool()?, bench_pool()?);
    let mut scalar_ports = open_pair(&scalar_pool, "off")?;
    let mut vector_ports = open_pair(&vector_pool, "auto")?;
    let slice = (ops / ROUNDS as u64).max(1024);
    let pools = (scalar_pool.clone(), vector_pool.clone());
    let (scalar, vector) = on_lcore(cpu, move || {
        let r = measure_rounds(&mut scalar_ports, &mut vector_ports, slice);
        scalar_ports.iter_mut().for_each(Port::stop);
        vector_ports.iter_mut().for_each(Port::stop);
        drop((scalar_ports, vector_ports));
        // Hand the cached buffers back before the lcore goes away.
        pools.0.flush_local_cache();
        pools.1.flush_local_cache();
        r
    })?;
    Ok(PathPair {
        scalar: scalar.result(&scalar_pool, SCALAR_CASE)?,
        vector: vector.result(&vector_pool, VECTOR_CASE)?,
        level: VectorLevel::best(),
        ratio: Spread::of(&ratios(&vector.per_pkt, &scalar.per_pkt)),
    })
}

/// Starts the ports, warms both pairs up, runs the rounds.
fn measure_rounds(
    scalar_ports: &mut [Port],
    vector_ports: &mut [Port],
    slice: u64,
) -> Result<(Slices, Slices), String> {
    for port in scalar_ports.iter_mut().chain(vector_ports.iter_mut()) {
        port.start().map_err(|e| e.to_string())?;
    }
    let scalar_counters: Vec<_> = scalar_ports.iter().map(Port::counters).collect();
    let vector_counters: Vec<_> = vector_ports.iter().map(Port::counters).collect();
    let warm = (slice / 2).max(1024);
    io_slice(scalar_ports, &scalar_counters, warm)?;
    io_slice(vector_ports, &vector_counters, warm)?;
    let (mut scalar, mut vector) = (Slices::default(), Slices::default());
    // Case 0 is the scalar path, case 1 the vector path; the order
    // alternates.
    interleave(ROUNDS, 2, |_, case| {
        if case == 0 {
            io_slice(scalar_ports, &scalar_counters, slice).map(|t| scalar.add(t))
        } else {
            io_slice(vector_ports, &vector_counters, slice).map(|t| vector.add(t))
        }
    })?;
    Ok((scalar, vector))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_paths_forward_everything_and_return_every_buffer() {
        let cpu = sluice::lcore::available_cpus()[0];
        let r = measure(cpu, 8 * 2048).unwrap();
        for row in [&r.scalar, &r.vector] {
            assert!(row.ops >= 8 * 2048, "{}: {}", row.case, row.ops);
            assert!(row.cycles_per_op > 0.0 && row.mops > 0.0);
        }
        assert_eq!(
            (r.scalar.case.as_str(), r.vector.case.as_str()),
            (SCALAR_CASE, VECTOR_CASE)
        );
        assert_eq!(r.level, VectorLevel::best());
        assert!(r.note().contains(r.level.name()));
        assert!(path_note().contains(r.level.name()));
        assert!(r.ratio.min <= r.ratio.median && r.ratio.median <= r.ratio.max);
        assert!(r.ratio.min > 0.0);
    }
}
