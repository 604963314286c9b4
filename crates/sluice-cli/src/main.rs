//! The `sluice` command: demo, forwarding apps and benchmarks.

mod bench;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Sluice: a userspace packet dataplane.
///
/// With no command, runs the main demo (for now a short benchmark summary).
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure a building block: `ring`, `mempool`, `mbuf` or `all`.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => demo(),
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

/// `sluice` with no arguments.
fn demo() -> Result<(), String> {
    bench::emit("Sluice: a userspace packet dataplane.");
    bench::emit(
        "The emulated-NIC forwarding demo arrives with the `soft` driver; until then, a short \
         benchmark summary (`sluice bench ring|mempool|mbuf|all` runs the full sets).",
    );
    bench::summary()
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
