//! `mempool_perf.c`: one case of DPDK's `mempool_perf_autotest` on DPDK's
//! `rte_mempool`, measured in slices on command, for the "DPDK here" column
//! of `sluice bench mempool`.
//!
//! The program's header comment gives its command line and its commands;
//! [`MempoolPerf`] starts it for one case and asks it for slices, each
//! answered with every lcore's elements and TSC readings, the same
//! [`Sample`]s Sluice's workers return.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sluice::mempool::Backing;

use super::{Peer, Program};
use crate::commands::bench::Sample;

/// The program's C source.
pub const SOURCE: &str = include_str!("mempool_perf.c");
/// Its name.
pub const NAME: &str = "mempool_perf";
/// Longest the EAL and the pool may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Time allowed for a slice: this much ...
const SLICE_TIMEOUT_BASE: Duration = Duration::from_secs(60);
/// ... plus this much per element each lcore moves (far slower than any
/// case runs, even on a crowded machine).
const SLICE_TIMEOUT_PER_ELEMENT: Duration = Duration::from_micros(20);

/// Builds the program (into a temporary directory that goes with the
/// returned [`Program`]).
pub fn build() -> Result<Program, String> {
    Program::build(NAME, SOURCE)
}

/// One case: the pool and the work of every lcore.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// Per-lcore cache size (0: none).
    pub cache: u32,
    /// Elements per get and per put.
    pub bulk: usize,
    /// Elements each lcore holds at once (`n_keep`).
    pub keep: usize,
    /// Elements in the pool.
    pub pool_size: u32,
    /// Bytes per element.
    pub elt_size: usize,
    /// The CPU of each lcore, the main lcore's first.
    pub cpus: Vec<usize>,
    /// The memory the pool sits on: hugepages, or 4 KiB pages (`--no-huge`).
    pub memory: Backing,
}

/// The program's command line for `case`, with EAL file prefix `prefix`.
pub fn arguments(case: &Case, prefix: &str) -> Vec<String> {
    let lcores: Vec<String> = case
        .cpus
        .iter()
        .enumerate()
        .map(|(lcore, cpu)| format!("{lcore}@{cpu}"))
        .collect();
    let mut args = vec![format!("--lcores={}", lcores.join(","))];
    match case.memory {
        // Hugepages taken as needed, held in memory files no other process
        // sees: no shared configuration, nothing left in /dev/hugepages.
        Backing::Hugepages => args.push("--in-memory".to_owned()),
        Backing::Anonymous => {
            args.extend(["--no-huge", "-m", "512", "--no-shconf"].map(String::from));
        }
    }
    args.extend(["--no-pci", "--no-telemetry"].map(String::from));
    args.push(format!("--file-prefix={prefix}"));
    args.push("--".to_owned());
    args.extend([
        case.cache.to_string(),
        case.bulk.to_string(),
        case.keep.to_string(),
        case.pool_size.to_string(),
        case.elt_size.to_string(),
    ]);
    args
}

/// The EAL options for the memory kind, as the notes name them.
pub fn memory_options(memory: Backing) -> &'static str {
    match memory {
        Backing::Hugepages => "--in-memory",
        Backing::Anonymous => "--no-huge -m 512",
    }
}

/// The samples of a `slice` answer: one `OPS START END` triple per lcore.
pub fn parse_slice(line: &str, lcores: usize) -> Result<Vec<Sample>, String> {
    let bad = || format!("{NAME}: not a slice answer: {line:?}");
    let numbers = line.strip_prefix("slice").ok_or_else(bad)?;
    let numbers: Vec<u64> = numbers
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    if numbers.len() != 3 * lcores {
        return Err(bad());
    }
    Ok(numbers
        .chunks_exact(3)
        .map(|n| Sample {
            ops: n[0],
            start: n[1],
            end: n[2],
        })
        .collect())
}

/// How the program's loop passes the bulk size to DPDK's get and put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkForm {
    /// A run-time value (the autotest's `constant_n=0`), as Sluice's side
    /// passes it.
    Variable = 0,
    /// A compile-time constant (`constant_n=1`): DPDK's inline get and put
    /// specialised for the size.
    Constant = 1,
}

impl BulkForm {
    /// Whether the program has this form for `bulk`.
    pub fn fits(self, bulk: usize) -> bool {
        match self {
            BulkForm::Variable => true,
            BulkForm::Constant => matches!(bulk, 1 | 2 | 4 | 8 | 32),
        }
    }
}

/// The program running one case; dropping it ends it.
pub struct MempoolPerf {
    peer: Peer,
    lcores: usize,
    keep: usize,
}

impl MempoolPerf {
    /// Starts `program` (built by [`build`]) for `case` and waits until its
    /// pool is ready.
    pub fn spawn(program: &Path, case: &Case) -> Result<MempoolPerf, String> {
        let prefix = format!(
            "sluice-bench-{}-{}",
            std::process::id(),
            crate::commands::bench::unique_name(NAME)
        );
        let mut command = Command::new(program);
        command.args(arguments(case, &prefix));
        let mut peer = Peer::spawn(NAME, command, prefix)?;
        peer.answer("ready", &["ready"], START_TIMEOUT)?;
        Ok(MempoolPerf {
            peer,
            lcores: case.cpus.len(),
            keep: case.keep,
        })
    }

    /// Runs one slice: every lcore gets and puts back its `keep` elements
    /// `warmup` times untimed, then `rounds` times timed, with the bulk size
    /// in `form`; returns each lcore's timed figures, the main lcore's
    /// first.
    pub fn slice(
        &mut self,
        warmup: u64,
        rounds: u64,
        form: BulkForm,
    ) -> Result<Vec<Sample>, String> {
        let suffix = match form {
            BulkForm::Variable => "",
            BulkForm::Constant => " const",
        };
        self.peer.send(&format!("run {warmup} {rounds}{suffix}"))?;
        let elements = (warmup + rounds).saturating_mul(self.keep as u64);
        let timeout = SLICE_TIMEOUT_BASE
            + SLICE_TIMEOUT_PER_ELEMENT.saturating_mul(u32::try_from(elements).unwrap_or(u32::MAX));
        let line = self.peer.answer("slice answer", &["slice"], timeout)?;
        let samples = parse_slice(&line, self.lcores)?;
        let expected = rounds * self.keep as u64;
        if let Some(s) = samples.iter().find(|s| s.ops != expected) {
            return Err(format!(
                "{NAME}: an lcore moved {} elements in a slice of {expected}",
                s.ops
            ));
        }
        Ok(samples)
    }

    /// Ends the program: it checks that every element is back in its pool.
    pub fn finish(mut self) -> Result<(), String> {
        self.peer.send("quit")?;
        self.peer
            .answer("answer to quit", &["full"], START_TIMEOUT)?;
        self.peer.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(memory: Backing, cpus: Vec<usize>) -> Case {
        Case {
            cache: 512,
            bulk: 4,
            keep: 32,
            pool_size: 8191,
            elt_size: 2048,
            cpus,
            memory,
        }
    }

    #[test]
    fn arguments_pin_every_lcore_and_pick_the_memory() {
        assert_eq!(
            arguments(&case(Backing::Hugepages, vec![3]), "pfx"),
            [
                "--lcores=0@3",
                "--in-memory",
                "--no-pci",
                "--no-telemetry",
                "--file-prefix=pfx",
                "--",
                "512",
                "4",
                "32",
                "8191",
                "2048"
            ]
        );
        let args = arguments(&case(Backing::Anonymous, vec![0, 1]), "pfx");
        assert_eq!(args[0], "--lcores=0@0,1@1");
        assert_eq!(args[1..5], ["--no-huge", "-m", "512", "--no-shconf"]);
        assert!(!args.iter().any(|a| a == "--in-memory"));
    }

    /// Whether the program can be built here; without cc or libdpdk the
    /// test is skipped, except under CI.
    fn toolchain_here() -> bool {
        match super::super::toolchain_missing() {
            None => true,
            Some(why) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "{why} under CI"
                );
                eprintln!("skipped: {why}");
                false
            }
        }
    }

    #[test]
    fn the_program_measures_slices_and_ends_with_its_pool_full() {
        if !toolchain_here() {
            return;
        }
        let program = build().unwrap();
        let cpu = sluice::lcore::available_cpus()[0];
        let c = Case {
            cache: 32,
            bulk: 4,
            keep: 32,
            pool_size: 1023,
            elt_size: 64,
            cpus: vec![cpu],
            memory: Backing::Anonymous,
        };
        let mut perf = MempoolPerf::spawn(program.path(), &c).unwrap();
        for (rounds, form) in [(1, BulkForm::Variable), (10, BulkForm::Constant)] {
            let samples = perf.slice(2, rounds, form).unwrap();
            assert_eq!(samples.len(), 1);
            assert_eq!(samples[0].ops, rounds * 32);
            assert!(samples[0].end > samples[0].start, "{samples:?}");
        }
        perf.finish().unwrap();
    }

    #[test]
    fn the_program_refuses_a_bad_case_with_a_reason() {
        if !toolchain_here() {
            return;
        }
        let program = build().unwrap();
        let c = Case {
            bulk: 5,
            memory: Backing::Anonymous,
            cpus: vec![sluice::lcore::available_cpus()[0]],
            ..case(Backing::Anonymous, vec![])
        };
        let err = MempoolPerf::spawn(program.path(), &c).err().unwrap();
        assert!(err.contains("bad case"), "{err}");
    }

    #[test]
    fn a_pool_too_small_for_the_work_is_an_error_not_a_hang() {
        if !toolchain_here() {
            return;
        }
        let program = build().unwrap();
        let c = Case {
            cache: 0,
            pool_size: 16,
            memory: Backing::Anonymous,
            cpus: vec![sluice::lcore::available_cpus()[0]],
            ..case(Backing::Anonymous, vec![])
        };
        let mut perf = MempoolPerf::spawn(program.path(), &c).unwrap();
        let err = perf.slice(1, 1, BulkForm::Variable).unwrap_err();
        assert!(err.contains("ran out of elements"), "{err}");
    }

    #[test]
    fn a_bulk_without_a_constant_form_is_refused_with_a_reason() {
        if !toolchain_here() {
            return;
        }
        assert!(BulkForm::Constant.fits(2) && !BulkForm::Constant.fits(16));
        assert!(BulkForm::Variable.fits(16));
        let program = build().unwrap();
        let c = Case {
            bulk: 16,
            cpus: vec![sluice::lcore::available_cpus()[0]],
            ..case(Backing::Anonymous, vec![])
        };
        let mut perf = MempoolPerf::spawn(program.path(), &c).unwrap();
        assert_eq!(perf.slice(1, 3, BulkForm::Variable).unwrap()[0].ops, 96);
        let err = perf.slice(1, 1, BulkForm::Constant).unwrap_err();
        assert!(err.contains("no compile-time form for bulk 16"), "{err}");
    }

    #[test]
    fn slice_answers_give_one_sample_per_lcore() {
        let two = parse_slice("slice 64 100 200 64 105 230", 2).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!((two[1].ops, two[1].start, two[1].end), (64, 105, 230));
        assert_eq!(two[0].cycles(), 100);
        for bad in [
            "slice 64 100",
            "slice 64 100 x",
            "ready",
            "slice 1 2 3 4 5 6 7",
        ] {
            assert!(parse_slice(bad, 2).is_err(), "{bad}");
        }
        assert!(parse_slice("slice 1 2 3", 1).is_ok());
    }
}
