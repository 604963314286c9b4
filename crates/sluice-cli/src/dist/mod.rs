//! `sluice dist`: a distributor pipeline — Rx ports → one distributor
//! lcore → N worker threads → Tx ports, on ports given by spec as
//! `sluice fwd` takes them (default: two `soft` ports cabled to the
//! built-in tester).
//!
//! # Threads and who touches what
//! - The main thread opens the ports (one Rx and one Tx queue each, the
//!   RSS-hash Rx offload on where the driver has it), one shared mbuf pool,
//!   and makes the distributor ([`api::Api`]) and one worker handle per
//!   worker. Ports pair up as in `sluice fwd` (0↔1, 2↔3, an odd last one
//!   to itself): what comes in on a port goes out on its pair.
//! - The distributor lcore ([`lcore`]) owns every queue (`&mut` borrows
//!   handed over by `std::thread::scope`) and the distributor: receive,
//!   `process`, `returned_pkts`, send.
//! - Each worker thread owns its handle ([`worker`]): takes batches, swaps
//!   the MACs, counts per flow.
//! - Meanwhile the main thread prints a stats line each `--stats-period`;
//!   after `--duration` (or `--packets`) it pauses the testers, waits until
//!   nothing moves, and stops the lcore, which drains the distributor and
//!   drops it (the workers then see it gone and end). Then the ports stop,
//!   every buffer goes home, and the summary ([`summary`]) is printed.
//!
//! # Placement
//! With three CPUs or more: the main thread on the first, the distributor
//! lcore on the second, workers round-robin on the rest. With two: the
//! distributor lcore on the first (the main thread mostly sleeps there),
//! every worker on the second. More workers than worker CPUs time-slice
//! them (a note says so; it works, more slowly).

pub mod api;
pub mod lcore;
pub mod summary;
pub mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use sluice::counter::Counter;
use sluice::mbuf::{MbufPool, MbufPoolConfig};
use sluice::port::{Offloads, Port, PortConfig, PortError, PortSpec};
use sluice::tester::Tester;

use crate::fwd::stats::{Live, PortSample, Sources};
use crate::fwd::summary::PortSummary;
use crate::fwd::{inline_device_cycles, peer, tester_reports};
use api::{Api, DistSide, WithDist};
use lcore::{LcoreConfig, LcoreCounters, LcoreCycles, PortQueues};
use summary::{DistCounters, DistSummary, FlowSpread, counts_match, is_clean, worker_rows};
use worker::{Owners, WorkerCounter, WorkerOut, work};

/// Longest the drain after the run may take.
const DRAIN_MAX: Duration = Duration::from_millis(300);
/// The drain ends after this many looks, `DRAIN_STEP` apart, saw nothing move.
const DRAIN_IDLE_LOOKS: u32 = 4;
const DRAIN_STEP: Duration = Duration::from_millis(5);
/// Longest the drain may take when every port is on a tester: it ends as
/// soon as their counts add up, so this bounds only a real loss.
const DRAIN_MAX_ACCOUNTED: Duration = Duration::from_secs(2);

/// Arguments of `sluice dist`.
#[derive(Args, Debug, Clone)]
pub struct DistArgs {
    /// Port spec strings (`soft:tester=t,gen=udp`, `null`, `pair:name=p0`,
    /// ...), in port order; ports pair up 0<->1, 2<->3 (an odd last one
    /// sends to itself). Default: two soft ports cabled to the built-in
    /// tester, device inline.
    #[arg(value_name = "SPEC")]
    pub specs: Vec<String>,
    /// A port spec; may be repeated (and mixed with positional specs, which
    /// come after).
    #[arg(long = "port", short = 'p', value_name = "SPEC")]
    pub ports: Vec<String>,
    /// Worker threads (more than the CPUs left for them time-slice).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// The distributor API.
    #[arg(long, value_enum, default_value_t = Api::Burst)]
    pub api: Api,
    /// How long to run, in seconds (then the pipeline is drained).
    #[arg(long, default_value_t = 5.0, value_parser = parse_seconds)]
    pub duration: f64,
    /// End the run once this many packets were received (or at
    /// `--duration`, whichever comes first); the drain then forwards what
    /// is still in flight, so a few more may pass.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub packets: Option<u64>,
    /// Packets asked for per Rx call.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub burst: u16,
    /// Rx descriptors per port.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u16).range(1..))]
    pub rxd: u16,
    /// Tx descriptors per port.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u16).range(1..))]
    pub txd: u16,
    /// Mempool per-lcore cache size.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(0..=512))]
    pub cache: u32,
    /// Mbufs in the pool (default: every descriptor, the cache and what
    /// the distributor and workers can hold, at least 8191).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub pool_size: Option<u32>,
    /// Tx attempts more for packets a Tx queue did not take, before they
    /// are freed (and counted as refused).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub tx_retry: u32,
    /// Seconds between live stats lines.
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    pub stats_period: f64,
    /// One JSON object per line (stats lines and the summary) on stdout.
    #[arg(long)]
    pub json: bool,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds in (0, 1e6]")),
    }
}

/// The ports when none are given: two soft ports cabled to tester `dist`.
pub const DEFAULT_SPEC: &str = "soft:tester=dist,gen=udp,flows=1024,size=64,device=inline";

impl DistArgs {
    /// Arguments with every default and these port specs (for tests).
    #[cfg(test)]
    pub fn with_specs(specs: Vec<String>) -> DistArgs {
        DistArgs {
            specs,
            ports: Vec::new(),
            workers: 2,
            api: Api::Burst,
            duration: 5.0,
            packets: None,
            burst: 32,
            rxd: 1024,
            txd: 1024,
            cache: 256,
            pool_size: None,
            tx_retry: 0,
            stats_period: 1.0,
            json: false,
        }
    }

    /// Every port spec, `--port` ones first; the default pair when none.
    pub fn all_specs(&self) -> Vec<String> {
        let specs: Vec<String> = self.ports.iter().chain(&self.specs).cloned().collect();
        if specs.is_empty() {
            vec![DEFAULT_SPEC.to_owned(); 2]
        } else {
            specs
        }
    }
}

/// Where the threads go: the distributor lcore's CPU and the workers'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The distributor lcore's CPU.
    pub dist: usize,
    /// The CPUs workers take, round-robin (never empty).
    pub workers: Vec<usize>,
}

impl Placement {
    /// See the module docs.
    pub fn of(cpus: &[usize]) -> Placement {
        match cpus {
            [] => Placement {
                dist: 0,
                workers: vec![0],
            },
            [c] => Placement {
                dist: *c,
                workers: vec![*c],
            },
            [a, b] => Placement {
                dist: *a,
                workers: vec![*b],
            },
            [_, d, rest @ ..] => Placement {
                dist: *d,
                workers: rest.to_vec(),
            },
        }
    }

    /// Workers sharing the busiest worker CPU, for `n` workers.
    pub fn per_core(&self, n: usize) -> usize {
        n.div_ceil(self.workers.len())
    }
}

/// Mbufs the pool gets by default: every descriptor, the lcore's cache
/// (1.5x) and bursts, 16 per worker, the returns FIFO, with room to spare;
/// at least 8191 and one less than a power of two.
pub fn default_pool_size(ports: usize, args: &DistArgs) -> u32 {
    let desc = ports * (args.rxd as usize + args.txd as usize);
    let held = args.cache as usize * 3 / 2
        + 2 * ports * lcore::MAX_BURST
        + lcore::MAX_BURST
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
            .pool_size
            .unwrap_or_else(|| default_pool_size(specs.len(), args)),
        cache_size: args.cache,
        ..Default::default()
    })
    .map_err(|e| format!("mbuf pool: {e}"))?;
    let cpus = sluice::lcore::available_cpus();
    if cpus.len() > 2
        && let Err(e) = sluice::lcore::pin_current_thread(cpus[0])
    {
        eprintln!("sluice dist: warning: main thread not pinned: {e}");
    }
    let place = Placement::of(&cpus);
    let workers = args.workers as usize;
    let (mut ports, soft_hash) = open_ports(&specs, &pool, args)?;
    if workers > place.workers.len() {
        eprintln!(
            "sluice dist: note: {workers} workers on {} CPU(s) {:?}: they time-slice",
            place.workers.len(),
            place.workers
        );
    }
    for p in ports.iter_mut() {
        p.start()
            .map_err(|e| format!("port {} ({}): {e}", p.id(), p.name()))?;
    }
    crate::fwd::catch_sigint();
    let names = tester_names(&specs);
    let testers: Vec<_> = sluice::tester::registered()
        .into_iter()
        .filter(|(n, _)| names.contains(n))
        .collect();
    let ran = args.api.open(
        workers,
        Pipeline {
            ports: &mut ports,
            soft_hash: &soft_hash,
            args,
            place: &place,
            pool: &pool,
            testers: &testers,
        },
    )??;

    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
    let device_cycles: u64 = ports
        .iter()
        .zip(&counters)
        .map(|(p, c)| inline_device_cycles(p.name(), c))
        .sum();
    for p in ports.iter_mut() {
        p.stop();
    }
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
        burst: args.burst as usize,
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
        alloc_failures,
        clean: is_clean(&testers, alloc_failures, ran.drain_accounted),
        drain_accounted: ran.drain_accounted,
        testers,
        ports: port_rows,
    };
    summary.print(args.json);
    Ok(summary)
}

/// The testers the ports of `specs` are cabled to: those of `soft` ports
/// without a `wire` (`tester=NAME`, default `t0`).
pub fn tester_names(specs: &[String]) -> Vec<String> {
    let mut names: Vec<String> = specs
        .iter()
        .filter_map(|s| PortSpec::parse(s).ok())
        .filter(|s| s.driver() == "soft" && s.get("wire").is_none())
        .map(|s| s.get("tester").unwrap_or("t0").to_owned())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Opens every port with one Rx and one Tx queue, asking for the RSS hash
/// where the driver gives it; per port, whether it does not (the lcore
/// then hashes in software).
fn open_ports(
    specs: &[String],
    pool: &MbufPool,
    args: &DistArgs,
) -> Result<(Vec<Port>, Vec<bool>), String> {
    let mut ports = Vec::with_capacity(specs.len());
    let mut soft_hash = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let config = PortConfig::new(Some(pool.clone()))
            .port_id(i as u16)
            .nb_rxd(args.rxd)
            .nb_txd(args.txd);
        let mut with_rss = config.clone();
        with_rss.rx_offloads |= Offloads::RSS_HASH;
        match sluice::driver::open(spec, with_rss) {
            Ok(p) => {
                ports.push(p);
                soft_hash.push(false);
            }
            Err(PortError::Config(msg)) if msg.contains("has no Rx offload") => {
                ports.push(sluice::driver::open(spec, config).map_err(|e| e.to_string())?);
                soft_hash.push(true);
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok((ports, soft_hash))
}

/// What the pipeline gives back.
struct Ran {
    secs: f64,
    workers: Vec<WorkerOut>,
    stats: sluice::distributor::DistStats,
    matching: &'static str,
    cycles: LcoreCycles,
    /// Per Tx port: packets refused.
    drops: Vec<u64>,
    /// When every port is on a tester: whether the drain ended with every
    /// frame sent received or counted as a drop.
    drain_accounted: Option<bool>,
}

/// The run itself, with a distributor of any API.
struct Pipeline<'a> {
    ports: &'a mut [Port],
    soft_hash: &'a [bool],
    args: &'a DistArgs,
    place: &'a Placement,
    pool: &'a MbufPool,
    testers: &'a [(String, Arc<Tester>)],
}

impl WithDist for Pipeline<'_> {
    type Out = Result<Ran, String>;

    fn run<D: DistSide>(self, d: D) -> Result<Ran, String> {
        let args = self.args;
        let n = self.ports.len();
        let nworkers = args.workers as usize;
        let handles = (0..nworkers)
            .map(|i| d.worker(i))
            .collect::<Result<Vec<_>, _>>()?;
        let port_counters: Vec<_> = self.ports.iter().map(Port::counters).collect();
        let mut queues: Vec<PortQueues<'_>> = Vec::with_capacity(n);
        for (i, p) in self.ports.iter_mut().enumerate() {
            let (rx, tx) = p.queues_mut().map_err(|e| e.to_string())?;
            let (Some(rx), Some(tx)) = (rx.first_mut(), tx.first_mut()) else {
                return Err(format!("port {i} has no Rx or Tx queue 0"));
            };
            queues.push(PortQueues {
                rx: rx.as_mut(),
                tx: tx.as_mut(),
                peer: peer(i, n),
                soft_hash: self.soft_hash[i],
            });
        }
        let owners = Owners::default();
        let wcounters: Vec<WorkerCounter> =
            (0..nworkers).map(|_| WorkerCounter::default()).collect();
        let lc = LcoreCounters::new(n);
        let stop = AtomicBool::new(false);
        let cfg = LcoreConfig {
            burst: args.burst as usize,
            tx_retry: args.tx_retry,
            kicks: args.txd as usize / 64 + 2,
            stop: &stop,
            counters: &lc,
        };
        let src = Sources {
            ports: port_counters,
            stream_tx_port: (0..n).collect(),
            streams: &lc.tx,
            app_drops: None,
        };
        let (pool, place) = (self.pool, self.place);
        std::thread::scope(|scope| {
            // Should this thread panic below, the scope joins the others
            // before passing the panic on: they must have been told to stop.
            let _stop = crate::fwd::StopOnDrop(&stop);
            let lcore = std::thread::Builder::new()
                .name("dist-lcore".into())
                .spawn_scoped(scope, move || {
                    pin(place.dist, "distributor lcore");
                    let guard = sluice::lcore::register()
                        .map_err(|e| format!("cannot register an lcore: {e}"))?;
                    let r = lcore::run(d, &mut queues, cfg).map(|(d, cycles)| {
                        let out = (d.stats(), d.matching(), cycles);
                        // Gone: the workers' loops end.
                        drop(d);
                        out
                    });
                    pool.flush_local_cache();
                    drop(guard);
                    r
                });
            let workers: Vec<_> = handles
                .into_iter()
                .enumerate()
                .map(|(i, w)| {
                    let cpu = place.workers[i % place.workers.len()];
                    let (owners, counter) = (&owners, &wcounters[i]);
                    std::thread::Builder::new()
                        .name(format!("dist-worker-{i}"))
                        .spawn_scoped(scope, move || {
                            pin(cpu, "worker");
                            work(w, i, owners, counter)
                        })
                })
                .collect();
            let live = Live::new(&src, args.json);
            let started = live.start();
            let mut drain_accounted = None;
            if lcore.is_ok() && workers.iter().all(|w| w.is_ok()) {
                // A thread that ends before it is told to has failed (an
                // error or a panic): the run ends, and the joins say why.
                let ended = || {
                    lcore.as_ref().is_ok_and(|h| h.is_finished())
                        || workers
                            .iter()
                            .any(|w| w.as_ref().is_ok_and(|w| w.is_finished()))
                };
                drain_accounted = main_loop(
                    live,
                    &src,
                    args,
                    self.testers,
                    (&lc.received, &wcounters),
                    &ended,
                );
            }
            stop.store(true, Ordering::Relaxed);
            let lcore_out = match lcore {
                Ok(h) => h.join().map_err(|p| {
                    format!(
                        "distributor lcore panicked: {}",
                        crate::bench::panic_message(&*p)
                    )
                })?,
                Err(e) => Err(format!("cannot start the distributor lcore: {e}")),
            };
            let secs = started.elapsed().as_secs_f64();
            let mut outs = Vec::with_capacity(nworkers);
            for w in workers {
                let w = w.map_err(|e| format!("cannot start a worker thread: {e}"))?;
                outs.push(w.join().map_err(|p| {
                    format!("worker panicked: {}", crate::bench::panic_message(&*p))
                })?);
            }
            let (stats, matching, cycles) = lcore_out?;
            if let Some(fault) = src.fault() {
                return Err(fault);
            }
            Ok(Ran {
                secs,
                workers: outs,
                stats,
                matching,
                cycles,
                drops: lc.tx.iter().map(|c| c.drops.get()).collect(),
                drain_accounted,
            })
        })
    }
}

/// Pins the calling thread to `cpu` (a warning on failure).
fn pin(cpu: usize, who: &str) {
    if let Err(e) = sluice::lcore::pin_current_thread(cpu) {
        eprintln!("sluice dist: warning: {who} not pinned to CPU {cpu}: {e}");
    }
}

/// Stats lines until the duration is over, `--packets` were received, or
/// SIGINT; then, with testers, the drain: they are paused and the pipeline
/// runs until nothing moved for a few looks, at most [`DRAIN_MAX`] — or,
/// when every port is on a tester, until every frame they sent was received
/// or counted as a drop (refused, missed, an Rx or Tx error), at most
/// [`DRAIN_MAX_ACCOUNTED`] (so a thread descheduled on a loaded machine cannot
/// end the drain early); then whether the drain ended with every frame
/// accounted for (`None` when not every port is on a tester, or there was
/// no drain). A failure — a thread ended (`ended`) or a port's device
/// failed — ends the loop at once, without the drain.
fn main_loop(
    mut live: Live,
    src: &Sources<'_>,
    args: &DistArgs,
    testers: &[(String, Arc<Tester>)],
    (received, workers): (&Counter, &[WorkerCounter]),
    ended: &dyn Fn() -> bool,
) -> Option<bool> {
    let start = live.start();
    let end = start + Duration::from_secs_f64(args.duration);
    let period = Duration::from_secs_f64(args.stats_period);
    let mut next = start + period;
    let mut last: Vec<u64> = workers.iter().map(|w| w.0.get()).collect();
    let mut last_time = start;
    loop {
        if ended() || src.fault().is_some() {
            return None;
        }
        let now = Instant::now();
        let enough = args.packets.is_some_and(|n| received.get() >= n);
        if now >= end || enough || crate::fwd::interrupted() {
            break;
        }
        // Short sleeps, so SIGINT and the packet bound are seen soon.
        let wake = next.min(end).min(now + Duration::from_millis(10));
        std::thread::sleep(wake.saturating_duration_since(now));
        let now = Instant::now();
        if now >= next {
            live.line(src);
            if !args.json {
                let secs = now.duration_since(last_time).as_secs_f64().max(1e-9);
                let cur: Vec<u64> = workers.iter().map(|w| w.0.get()).collect();
                let rates: Vec<String> = cur
                    .iter()
                    .zip(&last)
                    .enumerate()
                    .map(|(i, (c, l))| format!("w{i} {:.2}", (c - l) as f64 / secs / 1e6))
                    .collect();
                crate::bench::emit(&format!("         workers Mpps: {}", rates.join("  ")));
                last = cur;
                last_time = now;
            }
            next += period;
        }
    }
    if testers.is_empty() {
        return None;
    }
    for (_, t) in testers {
        t.pause(true);
    }
    let accountable = args
        .all_specs()
        .iter()
        .all(|spec| tester_names(std::slice::from_ref(spec)).len() == 1);
    let drain_end = Instant::now()
        + if accountable {
            DRAIN_MAX_ACCOUNTED
        } else {
            DRAIN_MAX
        };
    let added_up = || {
        let (sent, received) = testers.iter().fold((0, 0), |(s, r), (_, t)| {
            let rep = t.report();
            (s + rep.sent, r + rep.received)
        });
        let counted: u64 = src.sample().iter().map(PortSample::counted_drops).sum();
        sent == received + counted
    };
    let mut last = src.moved();
    let mut idle = 0;
    let mut accounted = false;
    while Instant::now() < drain_end {
        if accountable {
            accounted = added_up();
        }
        if accounted || (!accountable && idle >= DRAIN_IDLE_LOOKS) {
            break;
        }
        std::thread::sleep(DRAIN_STEP);
        let cur = src.moved();
        if cur == last {
            idle += 1;
        } else {
            idle = 0;
            last = cur;
        }
    }
    if accountable && !accounted {
        accounted = added_up();
    }
    accountable.then_some(accounted)
}

#[cfg(test)]
mod tests;
