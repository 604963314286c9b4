//! The router of `sluice l3fwd`: the per-packet work ([`classify`]), the
//! route tables ([`router`]) and the lcores that run them ([`lcore`]).
//!
//! Every port gets `--cores` Rx and Tx queues (RSS spreads flows over the
//! Rx queues); lcore `i` owns Tx queue `i` of every port and a round-robin
//! share of all Rx queues. Ports that cannot have that many queues fall
//! back to one each, and then one lcore runs.

pub mod classify;
pub mod lcore;
pub mod router;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use sluice::mbuf::MbufPool;
use sluice::port::Port;
use sluice::tester::Tester;
use sluice_telemetry::capture::{CaptureTaps, Direction};

use super::io::lcore::StreamCounters;
use super::lcores::run_lcores;

use super::observe::{self, census::CensusWatch};
use super::options::FwdArgs;
use super::ports::has_threaded_device;
use super::run::{Forwarded, Shared};
use super::stats::Sources;
use super::summary::RouteDrops;
use classify::{PortMacs, Router};
use lcore::{L3Config, L3Lcore, RouteDropCounters, l3_main, sum_drops};

/// The forwarding phase of l3fwd: lcores, their queues, the routing loop.
pub(crate) fn route_phase<R: Router>(
    router: &R,
    ports: &mut [Port],
    pool: &MbufPool,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
    shared: &Shared,
) -> Result<Forwarded, String> {
    let nports = ports.len();
    let capture = super::observe::capture::start(ports, &args.run.observe, &shared.drops)?;
    let macs: Vec<PortMacs> = ports
        .iter()
        .enumerate()
        .map(|(p, port)| PortMacs::new(args.peer_mac(p), port.mac()))
        .collect();
    let threaded = ports.iter().any(|p| has_threaded_device(p.name()));
    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
    let census = CensusWatch::new(observe::census::of_run(ports, pool, None));
    // Every port has the same queue count (ports::open_ports falls back to
    // one for all), so lcore i can own Tx queue i of each.
    let queues = ports
        .iter()
        .map(|p| p.nb_tx_queues().min(p.nb_rx_queues()))
        .min()
        .unwrap_or(1);
    let nb_lcores = (args.cores as usize).min(queues).max(1);
    let drop_counters: Arc<[RouteDropCounters]> = (0..nb_lcores)
        .map(|_| RouteDropCounters::default())
        .collect();
    let mut lcores: Vec<L3Lcore<'_>> = drop_counters
        .iter()
        .enumerate()
        .map(|(i, drops)| L3Lcore {
            rx: Vec::new(),
            tx: Vec::new(),
            rx_taps: Vec::new(),
            tx_taps: Vec::new(),
            counters_base: i * nports,
            drops,
        })
        .collect();
    let mut next = 0;
    let tap = |p: usize, q: usize, direction| {
        capture
            .taps
            .tap(p, q, direction)
            .cloned()
            .unwrap_or_else(CaptureTaps::detached)
    };
    for (p, port) in ports.iter_mut().enumerate() {
        let (rx, tx) = port.queues_mut().map_err(|e| e.to_string())?;
        for (q, t) in tx.iter_mut().enumerate().take(nb_lcores) {
            lcores[q].tx.push(t.as_mut());
            lcores[q].tx_taps.push(tap(p, q, Direction::Tx));
        }
        for (q, r) in rx.iter_mut().enumerate() {
            let lc = &mut lcores[next % nb_lcores];
            lc.rx.push(r.as_mut());
            lc.rx_taps.push(tap(p, q, Direction::Rx));
            next += 1;
        }
    }
    let stream_counters: Arc<[StreamCounters]> = (0..nb_lcores * nports)
        .map(|_| StreamCounters::default())
        .collect();
    let stream_tx_port: Vec<usize> = (0..nb_lcores * nports).map(|i| i % nports).collect();
    let drop_sources = shared.drops.clone();
    drop_sources.add_stream_drops(Arc::clone(&stream_counters), &stream_tx_port);
    for reason in RouteDrops::REASONS {
        let lcores = Arc::clone(&drop_counters);
        drop_sources.add(reason, None, move || sum_drops(&lcores).get(reason));
    }
    let stop = AtomicBool::new(false);
    let app_drops = || {
        let d = sum_drops(&drop_counters);
        d.no_route + d.ttl_expired + d.bad_header + d.bad_checksum + d.unwritable + d.runt
    };
    let src = Sources {
        ports: counters,
        stream_tx_port,
        streams: &stream_counters,
        app_drops: Some(&app_drops),
        census: Some(&census),
    };
    let cfg = L3Config {
        burst: args.queues.burst as usize,
        tx_retry: args.queues.tx_retry,
        counters: &stream_counters,
        macs: &macs,
        stop: &stop,
    };
    let (cycles, secs, drain_accounted) = run_lcores(
        lcores,
        threaded,
        &src,
        args,
        testers,
        &stop,
        &shared.lcores,
        |cpu, mut lc, live| l3_main(cpu, router, &mut lc, cfg, pool, live),
    )?;
    Ok(Forwarded {
        lcores: cycles,
        secs,
        drops: src.sample().iter().map(|s| s.drops).collect(),
        recycle_errors: 0,
        route_drops: Some(sum_drops(&drop_counters)),
        drain_accounted,
        alloc_failures: 0,
        drop_sources,
        last_census: census.last(),
    })
}
