//! The distributor pipeline of `sluice dist`: Rx ports → one distributor
//! lcore → N worker threads → Tx ports.
//!
//! - The distributor lcore ([`lcore`]) owns every queue (`&mut` borrows
//!   handed over by `std::thread::scope`) and the distributor: receive,
//!   `process`, `returned_pkts`, send.
//! - Each worker thread owns its handle ([`worker`]): takes batches, swaps
//!   the MACs, counts per flow.
//! - Meanwhile the main thread prints a stats line each stats period;
//!   at the end it pauses the testers, waits until nothing moves, and stops
//!   the lcore, which drains the distributor and drops it (the workers then
//!   see it gone and end).
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
use std::time::Instant;

use sluice::mbuf::MbufPool;
use sluice::port::{Offloads, Port, PortConfig, PortError};
use sluice::tester::Tester;
use sluice_telemetry::capture::{CaptureTaps, Direction};

use super::io::lcore::LiveLcore;
use super::lcores::{Control, Extra, StopOnDrop, main_loop, panic_message};
use super::observe::census::{self, CensusWatch, HeldSlot};
use super::observe::drops::DropSources;
use super::options::RunOptions;
use super::output::emit;
use super::ports::peer;
use super::stats::{Live, Sources};
use api::{DistSide, WithDist};
use lcore::{LcoreConfig, LcoreCounters, LcoreCycles, PortQueues};
use worker::{Owners, WorkerCounter, WorkerOut, work};

/// How the pipeline runs (what `sluice dist` takes from its arguments).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Worker threads.
    pub workers: u16,
    /// Packets asked for per Rx call.
    pub burst: u16,
    /// Tx attempts more for packets a Tx queue did not take.
    pub tx_retry: u32,
    /// Tx descriptors per port.
    pub txd: u16,
    /// End the run once this many packets were received.
    pub packets: Option<u64>,
    /// The run's length and output.
    pub run: RunOptions,
    /// Every port is on a tester: the drain waits for their counts to add
    /// up.
    pub accountable: bool,
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

/// Opens every port with one Rx and one Tx queue, asking for the RSS hash
/// where the driver gives it; per port, whether it does not (the lcore
/// then hashes in software).
pub(crate) fn open_ports(
    specs: &[String],
    pool: &MbufPool,
    rxd: u16,
    txd: u16,
) -> Result<(Vec<Port>, Vec<bool>), String> {
    let mut ports = Vec::with_capacity(specs.len());
    let mut soft_hash = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let config = PortConfig::new(Some(pool.clone()))
            .port_id(i as u16)
            .nb_rxd(rxd)
            .nb_txd(txd);
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
pub(crate) struct PipelineOutput {
    pub secs: f64,
    pub workers: Vec<WorkerOut>,
    pub stats: sluice::distributor::DistStats,
    pub matching: &'static str,
    pub cycles: LcoreCycles,
    /// Per Tx port: packets refused.
    pub drops: Vec<u64>,
    /// When every port is on a tester: whether the drain ended with every
    /// frame sent received or counted as a drop.
    pub drain_accounted: Option<bool>,
    /// Every drop counter of the run, by reason and port.
    pub drop_sources: DropSources,
    /// The last buffer census taken while the ports ran.
    pub last_census: Vec<sluice::census::PoolCensus>,
}

/// The run itself, with a distributor of any API.
pub(crate) struct Pipeline<'a> {
    pub ports: &'a mut [Port],
    pub soft_hash: &'a [bool],
    pub args: &'a Settings,
    pub place: &'a Placement,
    pub pool: &'a MbufPool,
    pub testers: &'a [(String, Arc<Tester>)],
    /// The distributor lcore's live counters.
    pub live: &'a LiveLcore,
    /// The run's drop counters (the ports' already in): the pipeline adds
    /// its own.
    pub drops: DropSources,
    /// Where the watchers' census reads the distributor's held packets:
    /// set once the distributor is open.
    pub held: HeldSlot,
}

impl WithDist for Pipeline<'_> {
    type Out = Result<PipelineOutput, String>;

    fn run<D: DistSide>(self, d: D) -> Result<PipelineOutput, String> {
        let args = self.args;
        let n = self.ports.len();
        let nworkers = args.workers as usize;
        let handles = (0..nworkers)
            .map(|i| d.worker(i))
            .collect::<Result<Vec<_>, _>>()?;
        let held = d.held_gauge();
        self.held.set(Arc::clone(&held));
        let port_counters: Vec<_> = self.ports.iter().map(Port::counters).collect();
        let census = CensusWatch::new(census::of_run(self.ports, self.pool, Some(held)));
        let capture =
            crate::app::observe::capture::start(self.ports, &args.run.observe, &self.drops)?;
        let tap = |p: usize, direction| {
            capture
                .taps
                .tap(p, 0, direction)
                .cloned()
                .unwrap_or_else(CaptureTaps::detached)
        };
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
                rx_tap: tap(i, Direction::Rx),
                tx_tap: tap(i, Direction::Tx),
            });
        }
        let owners = Owners::default();
        let wcounters: Vec<WorkerCounter> =
            (0..nworkers).map(|_| WorkerCounter::default()).collect();
        let lc = LcoreCounters::new(n);
        let drop_sources = self.drops.clone();
        let tx_ports: Vec<usize> = (0..n).collect();
        drop_sources.add_stream_drops(Arc::clone(&lc.tx), &tx_ports);
        let stop = AtomicBool::new(false);
        let cfg = LcoreConfig {
            burst: args.burst as usize,
            tx_retry: args.tx_retry,
            kicks: args.txd as usize / 64 + 2,
            stop: &stop,
            counters: &lc,
            live: self.live,
        };
        let src = Sources {
            ports: port_counters,
            stream_tx_port: tx_ports,
            streams: &lc.tx,
            app_drops: None,
            census: Some(&census),
        };
        let (pool, place) = (self.pool, self.place);
        std::thread::scope(|scope| {
            // Should this thread panic below, the scope joins the others
            // before passing the panic on: they must have been told to stop.
            let _stop = StopOnDrop(&stop);
            let lcore = std::thread::Builder::new()
                .name("dist-lcore".into())
                .spawn_scoped(scope, move || {
                    pin(place.dist, "distributor lcore");
                    cfg.live.start(Some(place.dist));
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
            let live = Live::new(&src, args.run.json);
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
                let control = Control {
                    stop: &stop,
                    accountable: args.accountable,
                    warmup: None,
                    enough: None,
                };
                let enough = || args.packets.is_some_and(|n| lc.received.get() >= n);
                let mut rates = worker_rates(&wcounters, started);
                let extra = Extra {
                    enough: Some(&enough),
                    after_line: (!args.run.json).then_some(&mut rates as &mut dyn FnMut(Instant)),
                };
                (_, drain_accounted) =
                    main_loop(live, &src, &args.run, self.testers, control, &ended, extra);
            }
            stop.store(true, Ordering::Relaxed);
            let lcore_out = match lcore {
                Ok(h) => h
                    .join()
                    .map_err(|p| format!("distributor lcore panicked: {}", panic_message(&*p)))?,
                Err(e) => Err(format!("cannot start the distributor lcore: {e}")),
            };
            let secs = started.elapsed().as_secs_f64();
            let mut outs = Vec::with_capacity(nworkers);
            for w in workers {
                let w = w.map_err(|e| format!("cannot start a worker thread: {e}"))?;
                outs.push(
                    w.join()
                        .map_err(|p| format!("worker panicked: {}", panic_message(&*p)))?,
                );
            }
            let (stats, matching, cycles) = lcore_out?;
            if let Some(fault) = src.fault() {
                return Err(fault);
            }
            Ok(PipelineOutput {
                secs,
                workers: outs,
                stats,
                matching,
                cycles,
                drops: lc.tx.iter().map(|c| c.drops.get()).collect(),
                drain_accounted,
                drop_sources,
                last_census: census.last(),
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

/// The line after each stats line of `sluice dist` (text only): each
/// worker's Mpps since the last one, from `workers`' counts.
fn worker_rates(workers: &[WorkerCounter], start: Instant) -> impl FnMut(Instant) + '_ {
    let mut last: Vec<u64> = workers.iter().map(|w| w.0.get()).collect();
    let mut last_time = start;
    move |now| {
        let secs = now.duration_since(last_time).as_secs_f64().max(1e-9);
        let cur: Vec<u64> = workers.iter().map(|w| w.0.get()).collect();
        let rates: Vec<String> = cur
            .iter()
            .zip(&last)
            .enumerate()
            .map(|(i, (c, l))| format!("w{i} {:.2}", (c - l) as f64 / secs / 1e6))
            .collect();
        emit(&format!("         workers Mpps: {}", rates.join("  ")));
        last = cur;
        last_time = now;
    }
}
