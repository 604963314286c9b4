//! `sluice l3fwd`: DPDK's l3fwd sample application on Sluice ports — an
//! IPv4/IPv6 router.
//!
//! - **Routes** come from a file (`sluice::net::routes`): `PREFIX/LEN PORT` lines for
//!   longest-prefix match (`--lookup lpm`, the default: `Lpm4` DIR-24-8 and
//!   `Lpm6` multibit trie in `sluice::net::lpm`), or 5-tuple lines for exact match (`--lookup em`:
//!   `sluice::net::em` hash tables).
//! - **Per packet** (`app::l3::classify`): header checks, the lookup, TTL / hop
//!   limit decrement with the IPv4 checksum updated incrementally, the MAC
//!   rewrite (source: the output port's MAC; destination: `--dest-mac` for
//!   that port, default `02:00:00:00:00:PORT`). Drops are counted by reason:
//!   no route, TTL expired, bad header, bad checksum (and unwritable, for a
//!   shared buffer).
//! - **Lcores** (`app::l3::lcore`): every port gets `--cores` Rx and Tx queues
//!   (RSS spreads flows over the Rx queues); lcore `i` owns Tx queue `i` of
//!   every port and a round-robin share of all Rx queues. Ports that cannot
//!   have that many queues fall back to one each, and then one lcore runs.
//!
//! The rest — ports, pool, live stats, the drain, the summary — is `sluice
//! fwd`'s (`app::run::run_with`); the summary adds the router's drops.

use clap::Args;
use sluice::net::routes;
use sluice::port::Offloads;

use crate::app::l3::route_phase;
use crate::app::l3::router::{Lookup, Tables};
use crate::app::options::{FwdArgs, SampleAppOptions, parse_seconds};
use crate::app::run::run_with;
use crate::app::summary::require_clean;

/// Arguments of `sluice l3fwd`.
#[derive(Args, Debug, Clone)]
pub struct L3fwdArgs {
    /// The ports, their queues, the run's length.
    #[command(flatten)]
    pub common: SampleAppOptions,
    /// The routes file: `PREFIX/LEN PORT` per line (LPM), or
    /// `SRC DST SPORT DPORT PROTO PORT` (exact match); `#` comments.
    #[arg(long, value_name = "FILE")]
    pub routes: String,
    /// Lookup: longest-prefix match on the destination, or exact match on
    /// the 5-tuple.
    #[arg(long, value_enum, default_value_t = Lookup::Lpm)]
    pub lookup: Lookup,
    /// Seconds between stats lines.
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    pub stats_period: f64,
    /// Per-queue burst-size histograms in the summary.
    #[arg(long)]
    pub hist: bool,
}

impl L3fwdArgs {
    /// The `sluice fwd` arguments of the shared parts (ports, pool, queues,
    /// stats, duration).
    pub fn to_fwd(&self) -> FwdArgs {
        let mut a = self.common.to_fwd();
        a.run.stats_period = self.stats_period;
        a.hist = self.hist;
        // As DPDK's l3fwd: the NIC checks IPv4 header checksums where it
        // can (the router reads the verdict in the Rx flags), software
        // elsewhere.
        a.rx_offloads_if_capable = Offloads::IPV4_CKSUM;
        a
    }

    /// The engine name in the summary.
    fn engine(&self) -> &'static str {
        match self.lookup {
            Lookup::Lpm => "l3fwd-lpm",
            Lookup::Em => "l3fwd-em",
        }
    }
}

/// Runs `sluice l3fwd`; an unclean tester report is an error.
pub fn run(args: &L3fwdArgs) -> Result<(), String> {
    let file =
        routes::load(&args.routes).map_err(|e| format!("routes file '{}': {e}", args.routes))?;
    let mut fa = args.to_fwd();
    fa.run.observe = fa.run.observe.for_command("l3fwd");
    if fa.all_specs().is_empty() {
        return Err(
            "no port given: name ports by spec, e.g. `sluice l3fwd --routes FILE -p soft -p soft`"
                .into(),
        );
    }
    let tables = Tables::build(&file, args.lookup, fa.all_specs().len())?;
    let clean = run_with(
        &fa,
        args.engine(),
        |ports, pool, testers, shared| match &tables {
            Tables::Lpm(r) => route_phase(&**r, ports, pool, &fa, testers, shared),
            Tables::Em(r) => route_phase(r, ports, pool, &fa, testers, shared),
        },
    )?;
    require_clean(clean)
}
