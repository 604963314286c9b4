//! `sluice bench fwd`'s soft io cases: the soft driver's scalar path
//! (`vector=off`) and its vector path (`vector=auto`: the highest level
//! this CPU has), side by side.
//!
//! Two pairs of soft ports, each on a tester and a pool of its own, io
//! forwarding the built-in tester's traffic (64-byte UDP, 1024 flows) with
//! the inline device and its cycles excluded, as the other soft cases.
//! Both are measured in the interleaved rounds of `fwd_testpmd.rs`, beside
//! the null cases and testpmd over `net_null`: cycles per packet are medians
//! over rounds, and the vector/scalar ratio the median of the per-round
//! ratios, so a change in the machine's load moves both sides alike.

use sluice::driver::soft::VectorLevel;
use sluice::mbuf::MbufPool;
use sluice::port::Port;
use sluice_bench::stats::Spread;

use super::fwd::{open_two, soft_spec};
use super::fwd_testpmd::{Measured, Member, ROUNDS, ratio_spread};

/// The scalar path's row.
pub const SCALAR_CASE: &str = "soft io (inline, scalar)";
/// The vector path's row (the soft port's default, `vector=auto`).
pub const VECTOR_CASE: &str = "soft io (inline)";

/// How the two paths compare.
#[derive(Debug)]
pub struct PathPair {
    /// The vector path's level on this CPU.
    pub level: VectorLevel,
    /// The per-round vector/scalar ratios: median, smallest and largest.
    pub ratio: Spread,
}

impl PathPair {
    /// The two paths' comparison from `measured`, if both are there.
    pub fn of(measured: &[Measured]) -> Option<PathPair> {
        let (scalar, vector) = (
            Member::Soft { vector: false },
            Member::Soft { vector: true },
        );
        Some(PathPair {
            level: VectorLevel::best(),
            ratio: ratio_spread(measured, vector, scalar)?,
        })
    }

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
pub(super) fn open_pair(pool: &MbufPool, value: &str) -> Result<Vec<Port>, String> {
    let spec = format!(
        "{},vector={value}",
        soft_spec(&super::unique_name("bench_fwd_vector"))
    );
    open_two(pool, &[spec.clone(), spec])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_paths_forward_everything_and_return_every_buffer() {
        let cpu = sluice::lcore::available_cpus()[0];
        let paths = [
            Member::Soft { vector: false },
            Member::Soft { vector: true },
        ];
        let window = super::super::fwd_testpmd::Window::new(true);
        let measured =
            super::super::fwd_testpmd::measure(cpu, 8 * 2048, &paths, None, window).unwrap();
        let r = PathPair::of(&measured).expect("both paths measured");
        for m in &measured {
            let row = &m.row;
            assert!(row.ops >= 8 * 2048, "{}: {}", row.case, row.ops);
            assert!(row.cycles_per_op > 0.0 && row.mops > 0.0);
        }
        let cases: Vec<&str> = measured.iter().map(|m| m.row.case.as_str()).collect();
        assert_eq!(cases, [SCALAR_CASE, VECTOR_CASE]);
        assert_eq!(r.level, VectorLevel::best());
        assert!(r.note().contains(r.level.name()));
        assert!(path_note().contains(r.level.name()));
        assert!(r.ratio.min <= r.ratio.median && r.ratio.median <= r.ratio.max);
        assert!(r.ratio.min > 0.0);
    }
}
