//! The `sluice` command: demo, forwarding apps and benchmarks.

mod app;
mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use commands::{bench, capture, demo, dist, fwd, l2fwd, l3fwd, stats, traffic_gen, tune};

/// Sluice: a userspace packet dataplane.
///
/// With no command, runs the demo: two emulated NIC ports cabled to the
/// built-in tester, io forwarding for 5 seconds, live stats and a summary.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The demo's telemetry and metrics (with no command).
    #[command(flatten)]
    observe: app::options::ObserveOptions,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Forward packets between ports, as DPDK's testpmd does.
    ///
    /// Ports forward in pairs, 0<->1, 2<->3; with an odd count the last
    /// forwards to itself.
    Fwd(fwd::FwdArgs),
    /// Forward between port pairs with MAC rewrite, as DPDK's l2fwd (runs
    /// until SIGINT/SIGTERM unless `--duration` is given).
    ///
    /// Ports forward in pairs, 0<->1, 2<->3; with an odd count the last
    /// forwards to itself.
    L2fwd(l2fwd::L2fwdArgs),
    /// Route IPv4/IPv6 between ports by longest-prefix or exact match from a
    /// routes file, as DPDK's l3fwd (runs until SIGINT/SIGTERM unless
    /// `--duration` is given).
    ///
    /// Port numbers in the routes file are the ports' positions.
    L3fwd(l3fwd::L3fwdArgs),
    /// Send the built-in tester's traffic on a port (and check what comes
    /// back, with `--check`).
    Gen(traffic_gen::GenArgs),
    /// Distribute packets from ports to worker threads and back: Rx →
    /// distributor → N workers (MAC swap, per-flow counts) → Tx.
    ///
    /// Ports pair up 0<->1, 2<->3 (an odd last one sends to itself).
    /// Default: two soft ports cabled to the built-in tester, device
    /// inline.
    Dist(dist::DistArgs),
    /// Watch a running instance (fwd, l2fwd, l3fwd, dist, gen, the demo)
    /// through its telemetry socket: per port Rx/Tx rates, drops by reason,
    /// lcore load, buffers; `--list` shows the running instances.
    Stats(stats::StatsArgs),
    /// Measure a building block: `ring`, `mempool`, `mbuf`, `fwd`, `recycle`,
    /// `distributor`, `lpm`, `mpwqe`, `pagepool`, `telemetry` or `all`.
    Bench(bench::BenchArgs),
    /// Sweep Rx/Tx descriptors, mempool cache and burst size on the given
    /// ports (default: the emulated NIC), measure each setting and
    /// recommend one; `--preset l2fwd-defaults` compares DPDK l2fwd's old
    /// and new defaults.
    Tune(tune::TuneArgs),
    /// Capture a port's packets from a running instance into a pcapng
    /// file, as DPDK's dpdk-dumpcap (copies the instance cannot keep up
    /// with are dropped and counted, never the packets).
    Capture(capture::CaptureArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => demo::run(&cli.observe),
        Some(Command::Fwd(args)) => fwd::run(&args),
        Some(Command::L2fwd(args)) => l2fwd::run(&args),
        Some(Command::L3fwd(args)) => l3fwd::run(&args),
        Some(Command::Gen(args)) => traffic_gen::run_checked(&args),
        Some(Command::Dist(args)) => dist::run_checked(&args),
        Some(Command::Bench(args)) => bench::run(&args),
        Some(Command::Tune(args)) => tune::run(&args),
        Some(Command::Capture(args)) => capture::run(&args),
        Some(Command::Stats(args)) => stats::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: error: {e}");
            ExitCode::FAILURE
        }
    }
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
        let demo = Cli::try_parse_from(["sluice", "--file-prefix", "d", "--no-telemetry"]).unwrap();
        assert!(demo.command.is_none());
        assert_eq!(demo.observe.file_prefix, "d");
        assert!(demo.observe.no_telemetry);
        let Some(Command::Fwd(a)) =
            Cli::try_parse_from(["sluice", "fwd", "--metrics", "127.0.0.1:9091", "null"])
                .unwrap()
                .command
        else {
            panic!("not fwd");
        };
        assert_eq!(a.run.observe.file_prefix, "sluice");
        assert_eq!(
            a.run.observe.metrics,
            Some("127.0.0.1:9091".parse().unwrap())
        );
        assert!(Cli::try_parse_from(["sluice", "fwd", "--metrics", "9091"]).is_err());
        assert!(Cli::try_parse_from(["sluice", "l2fwd", "--file-prefix", "a/b"]).is_err());
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

    #[test]
    fn dist_arguments_parse_and_bad_ones_are_rejected() {
        let cli = Cli::try_parse_from([
            "sluice",
            "dist",
            "--workers",
            "4",
            "--api",
            "burst-scalar",
            "--packets",
            "1000",
            "-p",
            "null",
            "null",
        ])
        .unwrap();
        match cli.command {
            Some(Command::Dist(a)) => {
                assert_eq!(
                    (a.workers, a.api),
                    (4, crate::app::dist::api::Api::BurstScalar)
                );
                assert_eq!(a.packets, Some(1000));
                assert_eq!(a.all_specs(), ["null", "null"]);
                assert_eq!(a.run.duration, 5.0);
            }
            other => panic!("parsed as {other:?}"),
        }
        let Some(Command::Dist(a)) = Cli::try_parse_from(["sluice", "dist"]).unwrap().command
        else {
            panic!("not dist");
        };
        assert_eq!((a.workers, a.api), (2, crate::app::dist::api::Api::Burst));
        assert_eq!(a.all_specs(), [dist::DEFAULT_SPEC, dist::DEFAULT_SPEC]);
        for bad in [
            &["sluice", "dist", "--workers", "0"][..],
            &["sluice", "dist", "--workers", "65"],
            &["sluice", "dist", "--api", "simd"],
            &["sluice", "dist", "--packets", "0"],
            &["sluice", "dist", "--duration", "-1"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
        let cli = Cli::try_parse_from(["sluice", "bench", "distributor", "--quick"]).unwrap();
        let Some(Command::Bench(a)) = cli.command else {
            panic!("not bench");
        };
        assert_eq!(a.part, bench::Part::Distributor);
    }

    #[test]
    fn capture_arguments_parse_and_bad_ones_are_rejected() {
        let cli = Cli::try_parse_from([
            "sluice",
            "capture",
            "--file-prefix",
            "lab",
            "--port",
            "1",
            "--queue",
            "2",
            "--direction",
            "tx",
            "-w",
            "f.pcapng",
            "-c",
            "200",
            "-s",
            "96",
        ])
        .unwrap();
        let Some(Command::Capture(a)) = cli.command else {
            panic!("not capture");
        };
        let r = a.request();
        assert_eq!(
            (a.file_prefix.as_str(), r.port, r.queue),
            ("lab", 1, Some(2))
        );
        assert_eq!((r.snaplen, r.count, r.duration), (96, Some(200), None));
        assert_eq!(r.buffer, Some(1024));
        assert_eq!(
            r.direction,
            sluice_telemetry::capture::protocol::Directions::Tx
        );
        for bad in [
            &["sluice", "capture", "--port", "0"][..],
            &["sluice", "capture", "-w", "f"],
            &["sluice", "capture", "--port", "0", "-w", "f", "-c", "0"],
            &["sluice", "capture", "--port", "0", "-w", "f", "-s", "0"],
            &[
                "sluice",
                "capture",
                "--port",
                "0",
                "-w",
                "f",
                "--direction",
                "up",
            ],
            &[
                "sluice", "capture", "--port", "0", "-w", "f", "--buffer", "0",
            ],
            &[
                "sluice",
                "capture",
                "--port",
                "0",
                "-w",
                "f",
                "--file-prefix",
                "a/b",
            ],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bench_pagepool_parses() {
        let cli =
            Cli::try_parse_from(["sluice", "bench", "pagepool", "--quick", "--json"]).unwrap();
        let Some(Command::Bench(a)) = cli.command else {
            panic!("not bench");
        };
        assert_eq!(a.part, bench::Part::Pagepool);
        assert!(a.quick && a.json);
        assert!(Cli::try_parse_from(["sluice", "bench", "page-pool"]).is_err());
    }

    #[test]
    fn bench_recycle_options_parse_and_bad_ones_are_rejected() {
        let cli = Cli::try_parse_from([
            "sluice",
            "bench",
            "recycle",
            "--rxd",
            "512",
            "--txd",
            "256",
            "--cache",
            "64",
            "--source",
            "tester",
            "--preload",
            "128",
            "--path",
            "recycle",
        ])
        .unwrap();
        match cli.command {
            Some(Command::Bench(a)) => {
                assert_eq!(a.part, bench::Part::Recycle);
                let r = &a.recycle;
                assert_eq!((r.rxd, r.txd, r.cache), (Some(512), Some(256), Some(64)));
                assert_eq!(r.source, Some(bench::recycle::Source::Tester));
                assert_eq!(r.preload, Some(128));
                assert_eq!(r.path, Some(bench::recycle::Path::Recycle));
            }
            other => panic!("parsed as {other:?}"),
        }
        for bad in [
            &["sluice", "bench", "recycle", "--rxd", "100"][..],
            &["sluice", "bench", "recycle", "--txd", "8192"],
            &["sluice", "bench", "recycle", "--cache", "513"],
            &["sluice", "bench", "recycle", "--source", "pair"],
            &["sluice", "bench", "recycle", "--preload", "8"],
            &["sluice", "bench", "recycle", "--path", "fast"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
        // Given to another part, they are an error (before anything runs).
        let cli = Cli::try_parse_from(["sluice", "bench", "ring", "--cache", "64"]).unwrap();
        let Some(Command::Bench(a)) = cli.command else {
            panic!("not bench");
        };
        assert_eq!(
            bench::run(&a).unwrap_err(),
            "--rxd, --txd, --cache, --source, --preload and --path apply to `sluice bench recycle` only"
        );
    }
}
