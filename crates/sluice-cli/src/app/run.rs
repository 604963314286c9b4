//! The frame of a forwarding command: one mbuf pool, the ports opened on
//! it and started, the forwarding phase the command brings, then the ports
//! stopped and the summary.

use std::sync::Arc;
use std::time::Duration;

use sluice::mbuf::{MbufPool, MbufPoolConfig};
use sluice::port::Port;
use sluice::tester::Tester;

use super::io::lcore::{LcoreCycles, LiveLcore};
use super::latency;
use super::lcores::pin_main_thread;
use super::observe::census::{self, CensusReport};
use super::observe::drops::DropSources;
use super::observe::{Observer, Watched};
use super::options::{Engine, FwdArgs};
use super::ports::{cabled_testers, open_ports, start_all, stop_all};
use super::signal::catch_signals;
use super::summary::{PortSummary, RouteDrops, Summary, cycles_per_packet, tester_reports};

/// Mbufs to give the pool by default: every descriptor of every queue, each
/// lcore's cache (1.5x, its flush threshold) and burst, with room to spare;
/// at least 8191 and one less than a power of two.
pub fn default_pool_size(ports: usize, queues: usize, args: &FwdArgs) -> u32 {
    let desc = ports * queues * (args.queues.rxd as usize + args.queues.txd as usize);
    let lcores = args.cores as usize * (args.queues.cache as usize * 3 / 2 + 2 * 64);
    let need = (desc + lcores + 1024).max(8191);
    let size = (need + 1).next_power_of_two() - 1;
    size.min(u32::MAX as usize) as u32
}

/// The frame of a forwarding app: opens and starts the ports of `args`
/// with one mbuf pool, runs `phase` (the forwarding, with live stats and
/// the drain; it adds its counters to the [`Shared`] it is given), stops the ports and prints the summary under the name
/// `engine`. `Ok(true)` when every tester report is clean.
pub(crate) fn run_with(
    args: &FwdArgs,
    engine: &'static str,
    phase: impl FnOnce(
        &mut [Port],
        &MbufPool,
        &[(String, Arc<Tester>)],
        &Shared,
    ) -> Result<Forwarded, String>,
) -> Result<bool, String> {
    let summary = measure_with(args, engine, phase)?;
    summary.print(args.run.json);
    Ok(summary.clean)
}

/// [`run_with`] without the printing: the summary.
pub(crate) fn measure_with(
    args: &FwdArgs,
    engine: &'static str,
    phase: impl FnOnce(
        &mut [Port],
        &MbufPool,
        &[(String, Arc<Tester>)],
        &Shared,
    ) -> Result<Forwarded, String>,
) -> Result<Summary, String> {
    let specs = args.all_specs();
    if specs.is_empty() {
        return Err(
            "no port given: name ports by spec, e.g. `sluice fwd --port null --port null`".into(),
        );
    }
    if specs.len() > u16::MAX as usize {
        return Err(format!("{} ports given; at most {}", specs.len(), u16::MAX));
    }
    let queues = args.cores as usize;
    let pool_size = args
        .queues
        .pool_size
        .unwrap_or_else(|| default_pool_size(specs.len(), queues, args));
    let data_room = if args.engine == Engine::Txonly || args.tx_first {
        args.txpkts.max(2048)
    } else {
        2048
    };
    // Shared memory when a port's peer maps the pool (a virtio port).
    let pool = MbufPool::with_sharing(
        MbufPoolConfig {
            name: "fwd".into(),
            size: pool_size,
            cache_size: args.queues.cache,
            data_room,
            ..Default::default()
        },
        sluice::driver::pool_sharing(&specs),
    )
    .map_err(|e| format!("mbuf pool: {e}"))?;
    // The main thread on the first CPU, as testpmd's main lcore (a threaded
    // device's thread then goes to another one: see `lcore_cpus`).
    pin_main_thread(&sluice::lcore::available_cpus(), 1, "fwd");
    let mut ports = open_ports(&specs, &pool, queues, args)?;
    start_all(&mut ports)?;
    catch_signals();
    let testers = cabled_testers(&specs);
    // One per lcore the phase may launch (it launches at most `--cores`).
    let shared = Shared {
        lcores: LiveLcore::many(queues.max(1)),
        drops: DropSources::new(ports.iter().map(Port::counters).collect()),
    };
    let observe = &args.run.observe;
    let observer = if observe.is_off() {
        None
    } else {
        let command = if observe.command.is_empty() {
            engine
        } else {
            observe.command
        };
        let watched = Watched::new(
            command,
            &observe.file_prefix,
            &ports,
            &[&pool],
            Arc::clone(&shared.lcores),
            &testers,
            shared.drops.clone(),
        );
        Some(Observer::start(observe, watched)?)
    };
    let hist_out = match &args.hist_out {
        Some(path) => Some(latency::HistOutThread::spawn(
            latency::HistOut::create(path, &format!("fwd --engine {engine}"))?,
            testers.iter().map(|(_, t)| Arc::clone(t)).collect(),
            Duration::from_secs_f64(args.run.stats_period),
        )?),
        None => None,
    };
    let Forwarded {
        lcores,
        secs,
        drops: stream_drops,
        recycle_errors,
        route_drops,
        drain_accounted,
        alloc_failures: gen_failures,
        drop_sources,
        last_census,
    } = phase(&mut ports, &pool, &testers, &shared)?;
    // Nothing reads the ports once they stop.
    drop(observer);

    let (counters, device_cycles) = stop_all(&mut ports);
    let drops_by_reason = drop_sources.table();
    let census = CensusReport::new(&census::of_run(&ports, &pool, None).take(), &last_census);
    let port_rows: Vec<PortSummary> = counters
        .iter()
        .enumerate()
        .map(|(i, c)| {
            PortSummary::new(i, ports[i].name(), c, stream_drops[i], secs)
                .with_recycle_counts(args.engine == Engine::Recycle)
                .with_rx_offloads(ports[i].config().rx_offloads)
        })
        .collect();
    drop(ports);
    if let Some(h) = hist_out {
        let all: Vec<Arc<Tester>> = testers.iter().map(|(_, t)| Arc::clone(t)).collect();
        h.finish(&all)?;
    }
    let testers = tester_reports(testers);
    let (busy_cycles, busy_packets, cpp) = cycles_per_packet(&lcores, device_cycles);
    let rx: u64 = port_rows.iter().map(|p| p.rx_packets).sum();
    let tx: u64 = port_rows.iter().map(|p| p.tx_packets).sum();
    let alloc_failures = port_rows.iter().map(|p| p.rx_nombuf).sum::<u64>() + gen_failures;
    // A run starved of buffers tested less than it was asked to: it is
    // not called clean even when every frame it sent came back.
    let clean = testers.iter().all(|t| t.clean) && alloc_failures == 0;
    let summary = Summary {
        kind: "summary",
        engine,
        cores: lcores.len(),
        burst: args.queues.burst as usize,
        duration_s: secs,
        drops: port_rows.iter().map(|p| p.drops).sum(),
        ports: port_rows,
        rx_packets: rx,
        tx_packets: tx,
        rx_mpps: rx as f64 / secs / 1e6,
        tx_mpps: tx as f64 / secs / 1e6,
        busy_cycles,
        busy_packets,
        device_cycles,
        cycles_per_packet: cpp,
        tsc_hz: sluice::tsc::tsc_hz(),
        recycle_errors,
        route_drops,
        drops_by_reason,
        pool_full: pool.is_full(),
        census,
        alloc_failures,
        drain_accounted,
        testers,
        clean,
    };
    Ok(summary)
}

/// What the forwarding phase shares with the run's watchers, made before
/// it: its lcores publish into `lcores` (one per lcore it may launch), and
/// it adds its drop counters to `drops`.
pub(crate) struct Shared {
    /// The lcores' live counters.
    pub lcores: Arc<[LiveLcore]>,
    /// The run's drop counters, the ports' already in.
    pub drops: DropSources,
}

/// What the forwarding phase measured.
pub(crate) struct Forwarded {
    /// Each lcore's cycles.
    pub lcores: Vec<LcoreCycles>,
    /// Seconds forwarded (drain included).
    pub secs: f64,
    /// Drops per Tx port.
    pub drops: Vec<u64>,
    /// `recycle`: recycle steps that failed, all streams.
    pub recycle_errors: u64,
    /// `l3fwd`: packets dropped by the router, by reason.
    pub route_drops: Option<RouteDrops>,
    /// When every frame starts and ends at a tester: whether the drain saw
    /// every frame sent received or counted as a drop.
    pub drain_accounted: Option<bool>,
    /// `txonly`: bursts not generated because the pool was empty.
    pub alloc_failures: u64,
    /// Every drop counter of the run, by reason and port.
    pub drop_sources: DropSources,
    /// The last buffer census taken while the ports ran.
    pub last_census: Vec<sluice::census::PoolCensus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pool_holds_every_descriptor_and_cache() {
        let a = FwdArgs::with_specs(vec![]);
        assert_eq!(default_pool_size(2, 1, &a), 8191);
        let mut a = FwdArgs::with_specs(vec![]);
        a.cores = 4;
        a.queues.rxd = 4096;
        a.queues.txd = 4096;
        let s = default_pool_size(4, 4, &a);
        assert!(s as usize >= 4 * 4 * 8192 + 4 * 384);
        assert!((s + 1).is_power_of_two());
    }
}
