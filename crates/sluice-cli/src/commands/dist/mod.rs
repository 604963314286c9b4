//! `sluice dist`: a distributor pipeline — Rx ports → one distributor
//! lcore → N worker threads → Tx ports, on ports given by spec as
//! `sluice fwd` takes them (default: two `soft` ports cabled to the
//! built-in tester).
//!
//! The main thread opens the ports (one Rx and one Tx queue each, the
//! RSS-hash Rx offload on where the driver has it), one shared mbuf pool,
//! and runs the pipeline (`app::dist`): ports pair up as in `sluice fwd`
//! (0↔1, 2↔3, an odd last one to itself), what comes in on a port goes
//! out on its pair. After `--duration` (or `--packets`) the pipeline
//! drains; then the ports stop, every buffer goes home, and the summary is
//! printed.

use std::sync::Arc;

use clap::Args;
use sluice::mbuf::{MbufPool, MbufPoolConfig};

use crate::app::dist::api::{self, Api};
use crate::app::dist::lcore::MAX_BURST;
use crate::app::dist::summary::{
    DistCounters, DistSummary, FlowSpread, counts_match, is_clean, worker_rows,
};
use crate::app::dist::{Pipeline, Placement, Settings, open_ports};
use crate::app::io::lcore::LiveLcore;
use crate::app::lcores::pin_main_thread;
use crate::app::observe::census::{self, CensusReport, HeldSlot};
use crate::app::observe::drops::DropSources;
use crate::app::observe::{Observer, Watched};
use crate::app::options::{PortSpecs, QueueOptions, RunOptions};
#[cfg(test)]
use crate::app::ports::tester_names;
use crate::app::ports::{all_on_testers, cabled_testers, start_all, stop_all};
use crate::app::signal::catch_signals;
use crate::app::summary::{PortSummary, tester_reports};

/// Arguments of `sluice dist`.
#[derive(Args, Debug, Clone)]
pub struct DistArgs {
    /// The ports. They pair up 0<->1, 2<->3 (an odd last one
    /// sends to itself). Default: two soft ports cabled to the built-in
    /// tester, device inline.
    #[command(flatten)]
    pub port_specs: PortSpecs,
    /// Queues, buffers, bursts.
    #[command(flatten)]
    pub queues: QueueOptions,
    /// The run's length and output.
    #[command(flatten)]
    pub run: RunOptions,
    /// Worker threads (more than the CPUs left for them time-slice).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// The distributor API.
    #[arg(long, value_enum, default_value_t = Api::Burst)]
    pub api: Api,
    /// End the run once this many packets were received (or at
    /// `--duration`, whichever comes first); the drain then forwards what
    /// is still in flight, so a few more may pass.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub packets: Option<u64>,
}

/// The ports when none are given: two soft ports cabled to tester `dist`.
pub const DEFAULT_SPEC: &str = "soft:tester=dist,gen=udp,flows=1024,size=64,device=inline";

impl DistArgs {
    /// Arguments with every default and these port specs (for tests).
    #[cfg(test)]
    pub fn with_specs(specs: Vec<String>) -> DistArgs {
        DistArgs {
            port_specs: PortSpecs::new(specs),
            queues: QueueOptions::default(),
            workers: 2,
            api: Api::Burst,
            packets: None,
            run: RunOptions::default(),
        }
    }

    /// Every port spec, `--port` ones first; the default pair when none.
    pub fn all_specs(&self) -> Vec<String> {
        let specs = self.port_specs.all();
        if specs.is_empty() {
            vec![DEFAULT_SPEC.to_owned(); 2]
        } else {
            specs
        }
    }
}

/// Mbufs the pool gets by default: every descriptor, the lcore's cache
/// (1.5x) and bursts, 16 per worker, the returns FIFO, with room to spare;
/// at least 8191 and one less than a power of two.
pub fn default_pool_size(ports: usize, args: &DistArgs) -> u32 {
    let q = &args.queues;
    let desc = ports * (q.rxd as usize + q.txd as usize);
    let held = q.cache as usize * 3 / 2
        + 2 * ports * MAX_BURST
        + MAX_BURST
        + 16 * args.workers as usize
        + api::RETURNS;
    let need = (desc + held + 1024).max(8191);
    ((need + 1).next_power_of_two() - 1).min(u32::MAX as usize) as u32
}

/// Runs `sluice dist`; an error when the run was not right (a tester
/// report not clean, the pool ran dry, the drain left frames unaccounted
/// for, packets unaccounted for, buffers missing).
pub fn run_checked(args: &DistArgs) -> Result<(), String> {
    let s = run(args)?;
    if s.ok() {
        return Ok(());
    }
    Err(s.problems().join("; "))
}

/// Runs `sluice dist` and prints its summary, which it returns.
pub fn run(args: &DistArgs) -> Result<DistSummary, String> {
    args.api.check()?;
    let specs = args.all_specs();
    if specs.len() > u16::MAX as usize {
        return Err(format!("{} ports given; at most {}", specs.len(), u16::MAX));
    }
    let pool = MbufPool::new(MbufPoolConfig {
        name: "dist".into(),
        size: args
            .queues
            .pool_size
            .unwrap_or_else(|| default_pool_size(specs.len(), args)),
        cache_size: args.queues.cache,
        ..Default::default()
    })
    .map_err(|e| format!("mbuf pool: {e}"))?;
    let cpus = sluice::lcore::available_cpus();
    pin_main_thread(&cpus, 2, "dist");
    let place = Placement::of(&cpus);
    let workers = args.workers as usize;
    let (mut ports, soft_hash) = open_ports(&specs, &pool, args.queues.rxd, args.queues.txd)?;
    if workers > place.workers.len() {
        eprintln!(
            "sluice dist: note: {workers} workers on {} CPU(s) {:?}: they time-slice",
            place.workers.len(),
            place.workers
        );
    }
    start_all(&mut ports)?;
    catch_signals();
    let testers = cabled_testers(&specs);
    let settings = Settings {
        workers: args.workers,
        burst: args.queues.burst,
        tx_retry: args.queues.tx_retry,
        txd: args.queues.txd,
        packets: args.packets,
        run: args.run.clone(),
        accountable: all_on_testers(&specs),
    };
    let live = LiveLcore::many(1);
    let drops = DropSources::new(ports.iter().map(sluice::port::Port::counters).collect());
    // The distributor's held packets, for the watchers' census.
    let held = HeldSlot::default();
    let observe = &args.run.observe;
    let observer = if observe.is_off() {
        None
    } else {
        let watched = Watched::new(
            "dist",
            &observe.file_prefix,
            &ports,
            &[&pool],
            Arc::clone(&live),
            &testers,
            drops.clone(),
        )
        .in_flight(pool.mempool().name(), "distributor", {
            let held = held.clone();
            move || held.get()
        });
        Some(Observer::start(observe, watched)?)
    };
    let ran = args.api.open(
        workers,
        Pipeline {
            ports: &mut ports,
            soft_hash: &soft_hash,
            args: &settings,
            place: &place,
            pool: &pool,
            testers: &testers,
            live: &live[0],
            drops,
            held,
        },
    )??;
    // Nothing reads the ports once they stop.
    drop(observer);

    let (counters, device_cycles) = stop_all(&mut ports);
    let drops_by_reason = ran.drop_sources.table();
    let census = CensusReport::new(
        &census::of_run(&ports, &pool, None).take(),
        &ran.last_census,
    );
    let secs = ran.secs;
    let port_rows: Vec<PortSummary> = counters
        .iter()
        .enumerate()
        .map(|(i, c)| PortSummary::new(i, ports[i].name(), c, ran.drops[i], secs))
        .collect();
    drop(ports);
    let testers = tester_reports(testers);
    let alloc_failures = port_rows.iter().map(|p| p.rx_nombuf).sum();
    let rx: u64 = port_rows.iter().map(|p| p.rx_packets).sum();
    let tx: u64 = port_rows.iter().map(|p| p.tx_packets).sum();
    let per_worker = worker_rows(&ran.workers, &ran.stats.handed);
    let distributor = DistCounters::new(&ran.stats, ran.drops.iter().sum());
    let c = ran.cycles;
    let summary = DistSummary {
        kind: "summary",
        api: args.api,
        matching: ran.matching,
        workers,
        workers_per_core: place.per_core(workers),
        burst: args.queues.burst as usize,
        duration_s: secs,
        software_hash_ports: (0..soft_hash.len()).filter(|&i| soft_hash[i]).collect(),
        rx_packets: rx,
        tx_packets: tx,
        rx_mpps: rx as f64 / secs / 1e6,
        tx_mpps: tx as f64 / secs / 1e6,
        spread: FlowSpread::of(&ran.workers),
        counts_match: counts_match(rx, tx, &distributor, &per_worker),
        per_worker,
        distributor,
        lcore_cycles_per_packet: (c.packets > 0)
            .then(|| c.busy_cycles.saturating_sub(device_cycles) as f64 / c.packets as f64),
        lcore_loops: c.loops,
        lcore_busy_loops: c.busy_loops,
        tsc_hz: sluice::tsc::tsc_hz(),
        pool_full: pool.is_full(),
        census,
        alloc_failures,
        drops_by_reason,
        clean: is_clean(&testers, alloc_failures, ran.drain_accounted),
        drain_accounted: ran.drain_accounted,
        testers,
        ports: port_rows,
    };
    summary.print(args.run.json);
    Ok(summary)
}

#[cfg(test)]
mod tests;
