//! `sluice l2fwd`: DPDK's l2fwd sample application on Sluice ports.
//!
//! Ports forward in pairs (0<->1, 2<->3, an odd last one to itself), every
//! packet received on one goes out of its peer. With MAC updating (the
//! default) each forwarded frame gets the Tx port's MAC as source and
//! `02:00:00:00:00:TXPORT` as destination (or the MAC given for that port
//! with `--dest-mac`); with `--no-mac-updating` frames leave unchanged.
//!
//! It is one implementation with `sluice fwd`: the arguments map onto
//! [`FwdArgs`] with the `mac` engine (or `io` without MAC updating) and
//! l2fwd's defaults — 1024 Rx and 1024 Tx descriptors, a mempool cache of
//! 256, bursts of 32, stats every 10 s — and it runs until SIGINT or
//! SIGTERM unless `--duration` is given. The summary is printed on exit.

use clap::Args;

use crate::app::io;
use crate::app::options::{Engine, FwdArgs, SampleAppOptions, parse_seconds};
use crate::app::summary::require_clean;

/// Arguments of `sluice l2fwd`.
#[derive(Args, Debug, Clone)]
pub struct L2fwdArgs {
    /// The ports, their queues, the run's length.
    #[command(flatten)]
    pub common: SampleAppOptions,
    /// Forward frames unchanged (no source/destination MAC rewrite).
    #[arg(long)]
    pub no_mac_updating: bool,
    /// Seconds between stats lines (l2fwd's `-T`).
    #[arg(long, short = 'T', default_value_t = 10.0, value_parser = parse_seconds)]
    pub stats_period: f64,
}

impl L2fwdArgs {
    /// The `sluice fwd` arguments that do the same forwarding.
    pub fn to_fwd(&self) -> FwdArgs {
        let mut a = self.common.to_fwd();
        a.engine = if self.no_mac_updating {
            Engine::Io
        } else {
            Engine::Mac
        };
        a.run.stats_period = self.stats_period;
        a
    }
}

/// Runs `sluice l2fwd`; an unclean tester report is an error.
pub fn run(args: &L2fwdArgs) -> Result<(), String> {
    if args.all_specs_empty() {
        return Err(
            "no port given: name ports by spec, e.g. `sluice l2fwd -p afpacket:iface=veth0 -p \
             afpacket:iface=veth1`"
                .into(),
        );
    }
    let mut fa = args.to_fwd();
    fa.run.observe = fa.run.observe.for_command("l2fwd");
    require_clean(io::run(&fa)?)
}

impl L2fwdArgs {
    fn all_specs_empty(&self) -> bool {
        self.common.port_specs.all().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use sluice::net::MacAddr;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: L2fwdArgs,
    }

    fn parse(argv: &[&str]) -> Result<L2fwdArgs, String> {
        Cli::try_parse_from(std::iter::once("l2fwd").chain(argv.iter().copied()))
            .map(|c| c.args)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_l2fwds_and_map_onto_the_mac_engine() {
        let a = parse(&["-p", "null", "null"]).unwrap();
        let f = a.to_fwd();
        assert_eq!(f.all_specs(), ["null", "null"]);
        assert_eq!(f.engine, Engine::Mac);
        assert_eq!(
            (f.queues.rxd, f.queues.txd, f.queues.cache, f.queues.burst),
            (1024, 1024, 256, 32)
        );
        assert_eq!(f.run.stats_period, 10.0);
        assert!(f.run.duration.is_infinite(), "runs until a signal");
        assert_eq!(f.peer_mac(1), MacAddr([2, 0, 0, 0, 0, 1]));
    }

    #[test]
    fn no_mac_updating_forwards_unchanged_and_dest_macs_apply_per_port() {
        let a = parse(&[
            "--no-mac-updating",
            "--duration",
            "2",
            "--dest-mac",
            "1,0a:0b:0c:0d:0e:0f",
            "null",
            "null",
        ])
        .unwrap();
        let f = a.to_fwd();
        assert_eq!(f.engine, Engine::Io);
        assert_eq!(f.run.duration, 2.0);
        assert_eq!(f.peer_mac(1), MacAddr([0xa, 0xb, 0xc, 0xd, 0xe, 0xf]));
        assert_eq!(f.peer_mac(0), MacAddr([2, 0, 0, 0, 0, 0]));
        for bad in [
            &["--duration", "0"][..],
            &["--dest-mac", "1,zz"],
            &["--rxd", "0"],
            &["--cache", "513"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn no_port_is_an_error() {
        assert_eq!(
            run(&parse(&[]).unwrap()).unwrap_err(),
            "no port given: name ports by spec, e.g. `sluice l2fwd -p afpacket:iface=veth0 -p \
             afpacket:iface=veth1`"
        );
    }
}
