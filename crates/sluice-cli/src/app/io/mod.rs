//! Testpmd-style forwarding between ports given by spec, with the engines
//! of `sluice fwd` (io, mac, macswap, rxonly, txonly, recycle): what `sluice
//! fwd`, `sluice l2fwd`, the demo and `sluice tune` run.
//!
//! # Threads and who touches what
//! - The main thread opens the ports (one shared mbuf pool, per-lcore cache
//!   `--cache`), starts them, and builds the *streams*: stream (p, q) receives
//!   on port p's Rx queue q and sends on Tx queue q of p's peer (0<->1,
//!   2<->3; an odd last port is its own peer). Peering is one-to-one, so
//!   every Rx queue and every Tx queue belongs to exactly one stream. The
//!   `recycle` engine pairs each stream's Tx queue with its Rx queue (the
//!   buffers it sends come back to the queue they were received on); every
//!   pair is checked at setup ([`check_recycle`]).
//! - Streams are dealt round-robin to `--cores` forwarding lcores, started
//!   under `std::thread::scope`: each gets `&mut` borrows of its own queues
//!   (the borrow checker proves no queue is shared), pins itself, registers
//!   as an lcore and polls its streams until told to stop.
//! - Meanwhile the main thread prints a stats line each `--stats-period`
//!   from the ports' shared counters (`Port::counters()`) and the per-stream
//!   drop counters; it never touches a queue.
//! - After `--duration` the main thread waits until nothing moves (bounded:
//!   the pipeline drains, so testers see every packet), stops the lcores,
//!   joins them, stops the ports (every buffer goes home) and prints the
//!   summary with each tester's report.
//! - [`measure`] does all that and returns the figures instead of printing
//!   them; with a warm-up it also measures a window (`app::window`): the
//!   figures of `--duration` seconds after the warm-up, drain excluded
//!   (`sluice tune` measures each point so).

pub mod engine;
pub mod lcore;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8};

use sluice::mbuf::{Burst, MbufPool};
use sluice::port::{Port, PortCounters};
use sluice::tester::Tester;
use sluice_telemetry::capture::{CaptureTaps, Direction};

use super::lcores::{Control, run_lcores_with};
use super::observe::{self, census::CensusWatch};
use super::options::{Engine, FwdArgs};
use super::ports::{check_recycle, has_threaded_device, peer, tester_names};
use super::run::{Forwarded, Shared, measure_with, run_with};
use super::stats::Sources;
use super::summary::Summary;
use super::window::WindowFigures;
use engine::{Stream, udp_frame};
use lcore::{LcoreConfig, StreamCounters, Window, lcore_main};

/// Runs `sluice fwd`. `Ok(true)` when every tester report is clean (or there
/// is no tester).
pub fn run(args: &FwdArgs) -> Result<bool, String> {
    run_with(args, args.engine.name(), |ports, pool, testers, shared| {
        forward(ports, pool, args, testers, shared)
    })
}

/// What [`measure`] measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The whole run, as `sluice fwd` prints it; with a warm-up its cycle
    /// figures are the window's (the lcores count only the window).
    pub summary: Summary,
    /// With a warm-up: the `--duration` seconds after it.
    pub window: Option<WindowFigures>,
}

/// Runs forwarding as `sluice fwd` does, printing only the live stats
/// lines, and returns the figures. With `warmup` (seconds), forwarding
/// runs that long first and [`Measured::window`] holds the figures of the
/// `args.run.duration` seconds after it.
pub fn measure(args: &FwdArgs, warmup: Option<f64>) -> Result<Measured, String> {
    measure_until(args, warmup, None)
}

/// Ends a run (with a warm-up, its window) before its duration once true of
/// the ports' counters.
pub(crate) type Enough<'a> = &'a dyn Fn(&[Arc<PortCounters>]) -> bool;

/// [`measure`], ended (with a warm-up, the window) by `enough` when it comes
/// before the duration: runs that must reach a packet count however slow
/// the machine is.
pub(crate) fn measure_until(
    args: &FwdArgs,
    warmup: Option<f64>,
    enough: Option<Enough<'_>>,
) -> Result<Measured, String> {
    let mut window = None;
    let mut summary = measure_with(args, args.engine.name(), |ports, pool, testers, shared| {
        let (f, w) = forward_window(ports, pool, args, testers, shared, warmup, enough)?;
        window = w;
        Ok(f)
    })?;
    if let Some(w) = &window {
        // The lcores counted only the window: so does the device.
        summary.device_cycles = w.device_cycles;
        summary.cycles_per_packet = w.cycles_per_packet;
    }
    Ok(Measured { summary, window })
}

/// The forwarding phase: streams, lcores, live stats, and, when `testers`
/// watch the traffic, their pause and the drain.
fn forward(
    ports: &mut [Port],
    pool: &MbufPool,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
    shared: &Shared,
) -> Result<Forwarded, String> {
    forward_window(ports, pool, args, testers, shared, None, None).map(|(f, _)| f)
}

/// [`forward`], with a measured window after `warmup` seconds; `enough`
/// ends the run (with a warm-up, the window) before its duration.
fn forward_window(
    ports: &mut [Port],
    pool: &MbufPool,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
    shared: &Shared,
    warmup: Option<f64>,
    enough: Option<Enough<'_>>,
) -> Result<(Forwarded, Option<WindowFigures>), String> {
    if args.engine == Engine::Recycle {
        check_recycle(ports)?;
    }
    let capture = super::observe::capture::start(ports, &args.run.observe, &shared.drops)?;
    let n = ports.len();
    let macs: Vec<_> = ports.iter().map(Port::mac).collect();
    let threaded = ports.iter().any(|p| has_threaded_device(p.name()));
    let inline: Vec<bool> = ports
        .iter()
        .map(|p| !has_threaded_device(p.name()))
        .collect();
    // Every frame starts and ends at a tester (a forwarding engine, only
    // tester ports): the drain can wait for the counts to add up.
    let forwards_all = matches!(
        args.engine,
        Engine::Io | Engine::Mac | Engine::Macswap | Engine::Recycle
    );
    let accountable = !testers.is_empty()
        && forwards_all
        && !args.tx_first
        && ports
            .iter()
            .all(|p| tester_names(&[p.name().to_owned()]).len() == 1);
    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
    let census = CensusWatch::new(observe::census::of_run(ports, pool, None));
    // Every queue, to be handed out one by one.
    let mut rxq: Vec<Vec<Option<&mut dyn sluice::port::RxQueue>>> = Vec::new();
    let mut txq: Vec<Vec<Option<&mut dyn sluice::port::TxQueue>>> = Vec::new();
    for p in ports.iter_mut() {
        let (rx, tx) = p.queues_mut().map_err(|e| e.to_string())?;
        rxq.push(rx.iter_mut().map(|q| Some(q.as_mut())).collect());
        txq.push(tx.iter_mut().map(|q| Some(q.as_mut())).collect());
    }
    let mut streams: Vec<Stream<'_>> = Vec::new();
    for (p, port_rx) in rxq.iter_mut().enumerate() {
        let t = peer(p, n);
        for (q, slot) in port_rx.iter_mut().enumerate() {
            let (Some(rx), Some(tx)) = (slot.take(), txq[t].get_mut(q).and_then(Option::take))
            else {
                return Err(format!(
                    "port {p} Rx queue {q} has no Tx queue {q} on port {t} to forward to"
                ));
            };
            let src_mac = macs[t];
            let dst_mac = args.peer_mac(t);
            let frame = (args.engine == Engine::Txonly)
                .then(|| (udp_frame(args.txpkts, src_mac, dst_mac), pool.clone()));
            let taps = &capture.taps;
            let (rx_tap, tx_tap) = (
                taps.tap(p, q, Direction::Rx).cloned(),
                taps.tap(t, q, Direction::Tx).cloned(),
            );
            streams.push(
                Stream::new(streams.len(), t, rx, tx, src_mac, dst_mac)
                    .with_frame(frame)
                    .with_taps(
                        rx_tap.unwrap_or_else(CaptureTaps::detached),
                        tx_tap.unwrap_or_else(CaptureTaps::detached),
                    ),
            );
        }
    }
    if args.tx_first {
        for s in streams.iter_mut() {
            send_first_burst(s, pool, args);
        }
    }
    let stream_counters: Arc<[StreamCounters]> =
        streams.iter().map(|_| StreamCounters::default()).collect();
    let stream_tx_port: Vec<usize> = streams.iter().map(|s| s.tx_port).collect();
    let drop_sources = shared.drops.clone();
    drop_sources.add_stream_drops(Arc::clone(&stream_counters), &stream_tx_port);
    let nb_lcores = (args.cores as usize).min(streams.len()).max(1);
    let mut per_lcore: Vec<Vec<Stream<'_>>> = (0..nb_lcores).map(|_| Vec::new()).collect();
    for (i, s) in streams.into_iter().enumerate() {
        per_lcore[i % nb_lcores].push(s);
    }
    let stop = AtomicBool::new(false);
    let window = AtomicU8::new(Window::ALL);
    let src = Sources {
        ports: counters,
        stream_tx_port,
        streams: &stream_counters,
        app_drops: None,
        census: Some(&census),
    };
    let cfg = LcoreConfig {
        engine: args.engine,
        burst: args.queues.burst as usize,
        tx_retry: args.queues.tx_retry,
        counters: &stream_counters,
        stop: &stop,
        window: &window,
    };
    let ports_counters = &src.ports;
    let enough = enough.map(|f| move || f(ports_counters));
    let control = Control {
        stop: &stop,
        accountable,
        warmup: warmup.map(|secs| (secs, &window, inline.as_slice())),
        enough: enough.as_ref().map(|f| f as &dyn Fn() -> bool),
    };
    let (lcores, secs, snapshots, drain_accounted) = run_lcores_with(
        per_lcore,
        threaded,
        &src,
        args,
        testers,
        control,
        &shared.lcores,
        |cpu, mut streams, live| lcore_main(cpu, &mut streams, cfg, pool, live),
    )?;
    let drops = src.sample().iter().map(|s| s.drops).collect();
    let recycle_errors = stream_counters.iter().map(|c| c.recycle_errors.get()).sum();
    let alloc_failures = stream_counters.iter().map(|c| c.alloc_failures.get()).sum();
    let window = snapshots.map(|(open, close)| WindowFigures::new(&open, &close, &lcores));
    let f = Forwarded {
        lcores,
        secs,
        drops,
        recycle_errors,
        route_drops: None,
        drain_accounted,
        alloc_failures,
        drop_sources,
        last_census: census.last(),
    };
    Ok((f, window))
}

/// `--tx-first`: one burst of generated frames on the stream's Tx queue
/// (what it does not take is freed).
fn send_first_burst(s: &mut Stream<'_>, pool: &MbufPool, args: &FwdArgs) {
    let frame = udp_frame(args.txpkts, s.src_mac, s.dst_mac);
    let mut burst: Burst<64> = Burst::new();
    let n = args.queues.burst as usize;
    if pool.alloc_bulk(&mut burst, n).is_err() {
        return;
    }
    for m in burst.iter_mut() {
        if let Ok(d) = m.append(frame.len()) {
            d.copy_from_slice(&frame);
        }
    }
    s.tx.tx_burst(&mut burst);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::app::ports::open_ports;
    use crate::app::summary;
    use sluice::mbuf::MbufPoolConfig;

    fn quick(specs: &[&str], engine: Engine, cores: u16) -> FwdArgs {
        let mut a = FwdArgs::with_specs(specs.iter().map(|s| s.to_string()).collect());
        a.engine = engine;
        a.cores = cores;
        a.run.duration = 0.05;
        a.run.stats_period = 10.0;
        a.queues.rxd = 64;
        a.queues.txd = 64;
        a.queues.cache = 32;
        a.queues.pool_size = Some(2047);
        a
    }

    /// A pool of 2047 buffers with a cache of 32, and the ports of `args`
    /// opened on it with `queues` queues each and started.
    fn started_ports(args: &FwdArgs, queues: usize) -> (MbufPool, Vec<Port>) {
        let pool = MbufPool::new(MbufPoolConfig {
            size: 2047,
            cache_size: 32,
            ..Default::default()
        })
        .unwrap();
        let mut ports = open_ports(&args.all_specs(), &pool, queues, args).unwrap();
        ports.iter_mut().for_each(|p| p.start().unwrap());
        (pool, ports)
    }

    /// Longest a run that ends at a packet count may take: only a lost
    /// packet or a hang reaches it, however loaded the machine is.
    pub(crate) const SAFETY_NET_SECS: f64 = 60.0;

    /// Forwards as [`forward`] does until `enough` is true of the ports'
    /// counters, so the run's outcome does not depend on the machine's
    /// speed; the duration is only a safety net, and reaching it fails
    /// naming what the run waited for. The lcores' live counters end equal
    /// to the counts they return.
    fn forward_until(
        ports: &mut [Port],
        pool: &MbufPool,
        args: &FwdArgs,
        testers: &[(String, Arc<Tester>)],
        awaited: &str,
        enough: impl Fn(&[Arc<PortCounters>]) -> bool,
    ) -> Forwarded {
        let mut args = args.clone();
        args.run.duration = SAFETY_NET_SECS;
        let shared = Shared {
            lcores: lcore::LiveLcore::many(args.cores as usize),
            drops: crate::app::observe::drops::DropSources::new(
                ports.iter().map(Port::counters).collect(),
            ),
        };
        let live = &shared.lcores;
        let (f, _) =
            forward_window(ports, pool, &args, testers, &shared, None, Some(&enough)).unwrap();
        assert!(
            f.secs < SAFETY_NET_SECS,
            "{awaited}: not reached in {SAFETY_NET_SECS} s"
        );
        for (i, c) in f.lcores.iter().enumerate() {
            let seen = live[i].read();
            assert!(live[i].started(), "lcore {i}");
            assert_eq!(
                (seen.packets, seen.polls, seen.idle_polls, seen.busy_cycles),
                (c.packets, c.polls, c.idle_polls, c.busy_cycles),
                "lcore {i}"
            );
        }
        f
    }

    /// Packets all `ports` received and sent.
    fn moved(ports: &[Arc<PortCounters>]) -> u64 {
        ports
            .iter()
            .map(|c| c.stats())
            .map(|s| s.rx_packets + s.tx_packets)
            .sum()
    }

    /// The registered testers called `name`.
    fn testers_named(name: &str) -> Vec<(String, Arc<Tester>)> {
        sluice::tester::registered()
            .into_iter()
            .filter(|(n, _)| n == name)
            .collect()
    }

    #[test]
    fn forwarding_over_null_ports_moves_packets_and_returns_every_buffer() {
        for engine in [
            Engine::Io,
            Engine::Mac,
            Engine::Macswap,
            Engine::Rxonly,
            Engine::Txonly,
        ] {
            let args = quick(&["null", "null", "null"], engine, 2);
            let (pool, mut ports) = started_ports(&args, 2);
            let Forwarded {
                lcores,
                secs,
                drops,
                ..
            } = forward_until(&mut ports, &pool, &args, &[], "1024 packets moved", |c| {
                moved(c) >= 1024
            });
            assert_eq!(lcores.len(), 2);
            assert!(secs > 0.0);
            assert_eq!(drops, [0, 0, 0], "null Tx takes everything");
            let s: Vec<_> = ports.iter().map(Port::stats).collect();
            let rx: u64 = s.iter().map(|s| s.rx_packets).sum();
            let tx: u64 = s.iter().map(|s| s.tx_packets).sum();
            let busy: u64 = lcores.iter().map(|c| c.packets).sum();
            match engine {
                Engine::Rxonly => assert!(rx > 0 && tx == 0),
                Engine::Txonly => assert!(tx > 0 && tx == busy),
                _ => assert!(rx > 0 && rx == tx && rx == busy, "{engine:?}"),
            }
            // Port 2 forwards to itself: its Tx counts what its Rx got.
            if matches!(engine, Engine::Io | Engine::Mac | Engine::Macswap) {
                assert_eq!(s[2].rx_packets, s[2].tx_packets);
                assert_eq!(s[0].rx_packets, s[1].tx_packets);
            }
            drop(ports);
            assert!(pool.is_full(), "{engine:?}");
        }
    }

    #[test]
    fn tx_first_sets_traffic_circulating_between_pair_ends() {
        let mut args = quick(&["pair:name=fwd_test", "pair:name=fwd_test"], Engine::Io, 1);
        args.tx_first = true;
        let (pool, mut ports) = started_ports(&args, 1);
        let awaited = "1024 packets received on port 0";
        let Forwarded { lcores, drops, .. } =
            forward_until(&mut ports, &pool, &args, &[], awaited, |c| {
                c[0].stats().rx_packets >= 1024
            });
        assert_eq!(drops, [0, 0]);
        let s: Vec<_> = ports.iter().map(Port::stats).collect();
        // Each stream sent one burst first, then forwarded all it received
        // (port 0 Rx -> port 1 Tx and back).
        assert!(s[0].rx_packets > 64, "{:?}", s[0]);
        assert_eq!(s[1].tx_packets, s[0].rx_packets + 32);
        assert_eq!(s[0].tx_packets, s[1].rx_packets + 32);
        assert_eq!(lcores[0].packets, s[0].rx_packets + s[1].rx_packets);
        drop(ports);
        assert!(pool.is_full());
    }

    #[test]
    fn recycle_engine_over_soft_ports_recycles_and_loses_nothing() {
        let name = "fwd_recycle_unit";
        let spec = format!("soft:tester={name},gen=udp,flows=64,size=64,device=inline");
        let args = quick(&[&spec, &spec], Engine::Recycle, 1);
        let (pool, mut ports) = started_ports(&args, 1);
        let testers = testers_named(name);
        assert_eq!(testers.len(), 1);
        let awaited = "1024 packets received on each port";
        let f = forward_until(&mut ports, &pool, &args, &testers, awaited, |c| {
            c.iter().all(|c| c.stats().rx_packets >= 1024)
        });
        assert_eq!(f.recycle_errors, 0);
        assert_eq!(f.drops, [0, 0]);
        let r: Vec<_> = ports
            .iter()
            .map(|p| summary::RecycleCounts::from_xstats(&p.xstats()))
            .collect();
        // Stream 0 receives on port 0 and sends on port 1, so port 1's Tx
        // feeds port 0's Rx (and the other way round).
        for (rx, tx) in [(0, 1), (1, 0)] {
            assert!(r[rx].rx_recycled > 0, "{r:?}");
            assert_eq!(r[rx].rx_recycled, r[tx].tx_recycled, "{r:?}");
            assert_eq!(r[tx].recycle_fallbacks, 0, "{r:?}");
        }
        let s: Vec<_> = ports.iter().map(Port::stats).collect();
        assert_eq!(s[0].rx_packets, s[1].tx_packets);
        assert_eq!(s[1].rx_packets, s[0].tx_packets);
        ports.iter_mut().for_each(Port::stop);
        drop(ports);
        let report = testers[0].1.report();
        assert!(report.is_clean(), "{report}");
        assert!(report.sent > 0);
        assert_eq!(report.received, report.sent, "{report}");
        assert!(pool.is_full());
    }

    #[test]
    fn the_drain_accounts_for_frames_dropped_as_rx_errors() {
        // Frames of 2000 bytes on ports of MTU 1500: every one is dropped
        // at Rx as oversize, and the drain must still see them all.
        let name = "fwd_drain_errors";
        let spec = format!("soft:tester={name},gen=udp,flows=4,size=2000,device=inline");
        let args = quick(&[&spec, &spec], Engine::Io, 1);
        let (pool, mut ports) = started_ports(&args, 1);
        let testers = testers_named(name);
        let awaited = "64 frames dropped as Rx errors";
        let f = forward_until(&mut ports, &pool, &args, &testers, awaited, |c| {
            c.iter().map(|c| c.stats().rx_errors).sum::<u64>() >= 64
        });
        assert_eq!(f.drain_accounted, Some(true));
        let errors: u64 = ports.iter().map(|p| p.stats().rx_errors).sum();
        let oversize: u64 = ports
            .iter()
            .map(|p| p.counters().xstats.get("rx_oversize_errors").unwrap())
            .sum();
        ports.iter_mut().for_each(Port::stop);
        drop(ports);
        let report = testers[0].1.report();
        assert!(report.sent > 0);
        assert_eq!(
            (report.received, errors, oversize),
            (0, report.sent, report.sent)
        );
        assert!(pool.is_full());
    }

    /// A pcap file of `lens`-byte frames in the temporary directory.
    pub(crate) fn pcap_of(name: &str, lens: &[usize]) -> std::path::PathBuf {
        use sluice::driver::pcap::format::PcapWriter;
        let path = std::env::temp_dir().join(format!("sluice-{}-{name}.pcap", std::process::id()));
        let mut w = PcapWriter::new(Vec::new(), 65535, 1, true).unwrap();
        for (i, &n) in lens.iter().enumerate() {
            w.write(i as u64, &vec![0x0a; n]).unwrap();
        }
        std::fs::write(&path, w.finish().unwrap()).unwrap();
        path
    }

    #[test]
    fn a_runt_and_an_oversize_frame_are_dropped_with_their_reason_when_forwarding() {
        let file = pcap_of("fwd_runts", &[5, 60, 2000, 13, 60]);
        let rx = format!("pcap:rx={}", file.display());
        for engine in [Engine::Io, Engine::Mac, Engine::Macswap] {
            let args = quick(&[&rx, "null"], engine, 1);
            let (pool, mut ports) = started_ports(&args, 1);
            // Ends once port 0 has read the whole file.
            let f = forward_until(&mut ports, &pool, &args, &[], "the 5 frames read", |c| {
                let s = c[0].stats();
                s.rx_packets + s.rx_errors >= 5
            });
            assert_eq!(f.drops, [0, 0]);
            let x = ports[0].counters().xstats.snapshot();
            let get = |n: &str| x.iter().find(|(k, _)| k == n).map(|&(_, v)| v);
            assert_eq!(get("rx_runt_errors"), Some(2), "{engine:?}");
            assert_eq!(get("rx_oversize_errors"), Some(1), "{engine:?}");
            let s = ports[0].stats();
            assert_eq!((s.rx_packets, s.rx_errors), (2, 3), "{engine:?}");
            assert_eq!(ports[1].stats().tx_packets, 2, "{engine:?}");
            drop(ports);
            assert!(pool.is_full());
        }
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn txonly_counts_the_bursts_a_dry_pool_could_not_generate() {
        // Nothing receives on the pair: its rings keep the buffers sent
        // until the pool is empty.
        let pair = "pair:name=fwd_txonly_dry";
        let mut args = quick(&[pair, pair], Engine::Txonly, 1);
        args.queues.pool_size = Some(63);
        args.queues.cache = 0;
        let s = measure_with(&args, "txonly", |ports, pool, testers, shared| {
            forward(ports, pool, &args, testers, shared)
        })
        .unwrap();
        assert!(s.alloc_failures > 0, "{s:?}");
        assert!(!s.clean, "{s:?}");
        assert!(s.pool_full);
    }

    #[test]
    fn a_starved_pool_is_not_clean_and_says_so() {
        let name = "fwd_starved";
        let spec = format!("soft:tester={name},gen=udp,flows=4,size=64,device=inline");
        let mut args = quick(&[&spec, &spec], Engine::Io, 1);
        args.queues.pool_size = Some(127);
        args.queues.cache = 0;
        let s = measure_with(&args, "io", |ports, pool, testers, shared| {
            forward(ports, pool, &args, testers, shared)
        })
        .unwrap();
        assert!(s.alloc_failures > 0, "{s:?}");
        assert!(s.testers[0].sent > 0, "{s:?}");
        assert!(!s.clean, "{s:?}");
        assert!(s.pool_full);
        assert_eq!(
            summary::pool_ran_dry(3),
            "pool ran dry: 3 allocation failures — raise --pool-size"
        );
    }

    #[test]
    fn recycle_engine_on_ports_that_cannot_is_an_error_naming_them() {
        let err = run(&quick(&["null", "null"], Engine::Recycle, 1)).unwrap_err();
        assert_eq!(
            err,
            "--engine recycle: port 0 (null) Rx queue 0 cannot recycle buffers: driver 'null' \
             does not support it (soft and afxdp ports do)"
        );
        let pair = "pair:name=fwd_recycle_err";
        let err = run(&quick(&[pair, pair], Engine::Recycle, 1)).unwrap_err();
        assert_eq!(
            err,
            format!(
                "--engine recycle: port 0 ({pair}) Rx queue 0 cannot recycle buffers: driver \
                 'pair' does not support it (soft and afxdp ports do)"
            )
        );
        // A soft port's Rx queue can, but its stream sends on a null port.
        let soft = "soft:tester=fwd_recycle_err,gen=udp,flows=4,size=64,device=inline";
        let err = run(&quick(&[soft, "null"], Engine::Recycle, 1)).unwrap_err();
        assert_eq!(
            err,
            "--engine recycle: port 1 (null) Tx queue 0 cannot recycle buffers: driver 'null' \
             does not support it (soft and afxdp ports do)"
        );
    }

    #[test]
    fn a_wire_with_one_end_is_an_error_naming_it() {
        let args = quick(&["soft:wire=fwd_one_end", "null"], Engine::Io, 1);
        assert_eq!(
            run(&args).unwrap_err(),
            "port 0 (soft:wire=fwd_one_end): soft: wire 'fwd_one_end' has one end: no other \
             port names it (cable two soft ports with wire=fwd_one_end)"
        );
    }

    #[test]
    fn a_bad_spec_is_an_error_naming_it() {
        let args = quick(&["null", "null:size=5"], Engine::Io, 1);
        assert_eq!(
            run(&args).unwrap_err(),
            "port spec 'null:size=5': key 'size' = '5' is not a number in 14..=9000"
        );
        assert_eq!(
            run(&quick(&[], Engine::Io, 1)).unwrap_err(),
            "no port given: name ports by spec, e.g. `sluice fwd --port null --port null`"
        );
    }
}
