//! The `sluice` command: demo, forwarding apps and benchmarks.

mod bench;
mod fwd;
mod traffic_gen;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Sluice: a userspace packet dataplane.
///
/// With no command, runs the demo: two emulated NIC ports cabled to the
/// built-in tester, io forwarding for 5 seconds, live stats and a summary.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Forward packets between ports, as DPDK's testpmd does.
    Fwd(fwd::FwdArgs),
    /// Send the built-in tester's traffic on a port (and check what comes
    /// back, with `--check`).
    Gen(traffic_gen::GenArgs),
    /// Measure a building block: `ring`, `mempool`, `mbuf`, `fwd` or `all`.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => demo(),
        Some(Command::Fwd(args)) => fwd_checked(&args),
        Some(Command::Gen(args)) => match traffic_gen::run(&args) {
            Ok(true) => Ok(()),
            Ok(false) => Err("the tester report is not clean".into()),
            Err(e) => Err(e),
        },
        Some(Command::Bench(args)) => bench::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `sluice fwd`; an unclean tester report is an error.
fn fwd_checked(args: &fwd::FwdArgs) -> Result<(), String> {
    if fwd::run(args)? {
        Ok(())
    } else {
        Err("a tester report is not clean (loss, reordering, duplicates or corruption)".into())
    }
}

/// The ports of the demo, one spec each.
///
/// Until the `soft` driver and the tester exist, two `null` ports stand in.
fn demo_port_specs(cpus: usize) -> Vec<String> {
    let _ = cpus;
    vec!["null".to_owned(), "null".to_owned()]
}

/// `sluice` with no arguments: the demo.
fn demo() -> Result<(), String> {
    let cpus = sluice::lcore::available_cpus().len();
    let specs = demo_port_specs(cpus);
    bench::emit(&format!(
        "Sluice demo: io forwarding for 5 s between {} (`sluice fwd --help` for more).",
        specs.join(" and ")
    ));
    fwd_checked(&fwd::FwdArgs::with_specs(specs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bench_arguments_parse_and_bad_ones_are_rejected() {
        let cli =
            Cli::try_parse_from(["sluice", "bench", "ring", "--json", "--iters", "1000"]).unwrap();
        match cli.command {
            Some(Command::Bench(a)) => {
                assert_eq!(a.part, bench::Part::Ring);
                assert!(a.json);
                assert_eq!(a.iters, Some(1000));
                assert!(!a.quick);
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Cli::try_parse_from(["sluice"]).unwrap().command.is_none());
        for bad in [
            &["sluice", "bench", "rings"][..],
            &["sluice", "bench", "ring", "--iters", "0"],
            &["sluice", "bench", "ring", "--iters", "-5"],
            &["sluice", "bench"],
        ] {
            let err = Cli::try_parse_from(bad).unwrap_err().to_string();
            assert!(!err.is_empty());
        }
        let err = Cli::try_parse_from(["sluice", "bench", "rings"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("rings"), "{err}");
    }
}
