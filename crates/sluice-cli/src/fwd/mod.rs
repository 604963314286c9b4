//! `sluice fwd`: testpmd-style forwarding between ports given by spec.
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
//!   them; with a warm-up it also measures a window (`window`): the
//!   figures of `--duration` seconds after the warm-up, drain excluded
//!   (`sluice tune` measures each point so).

pub mod args;
pub mod engine;
pub mod lcore;
pub mod stats;
pub mod summary;
pub mod window;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::{Port, PortConfig, PortCounters, PortError, PortSpec};
use sluice::tester::Tester;

pub use args::{Engine, EthPeer, FwdArgs, parse_eth_peer, parse_seconds};
use engine::{Stream, udp_frame};
use lcore::{LcoreConfig, LcoreCycles, StreamCounters, Window, lcore_main};
use stats::{Live, PortSample, Sources};
use summary::{PortSummary, RouteDrops, Summary, TesterSummary, cycles_per_packet};
use window::{Snapshot, WindowFigures};

/// Longest the drain after `--duration` may take.
const DRAIN_MAX: Duration = Duration::from_millis(300);
/// The drain ends after this many looks, `DRAIN_STEP` apart, saw nothing move.
const DRAIN_IDLE_LOOKS: u32 = 4;
const DRAIN_STEP: Duration = Duration::from_millis(5);
/// Longest the drain may take when every port is on a tester: it ends as
/// soon as their counts add up, so this bounds only a real loss.
const DRAIN_MAX_ACCOUNTED: Duration = Duration::from_secs(2);

/// Set by SIGINT or SIGTERM: end the run early (the summary is still
/// printed).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Writes `msg` to stderr from a signal handler.
fn signal_safe_note(msg: &[u8]) {
    // SAFETY: `write` is async-signal-safe; `msg` is valid for its length.
    let _ = unsafe { libc::write(libc::STDERR_FILENO, msg.as_ptr().cast(), msg.len()) };
}

/// The first SIGINT or SIGTERM asks for a clean stop; a second one ends the
/// process at once (exit status 128 + the signal), whatever the stop is
/// waiting for.
extern "C" fn on_signal(sig: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::Relaxed) {
        signal_safe_note(b"sluice: second signal: ending at once\n");
        // SAFETY: `_exit` is async-signal-safe and ends the process without
        // running anything else.
        unsafe { libc::_exit(128 + sig) };
    }
    signal_safe_note(b"sluice: stopping (a second SIGINT or SIGTERM ends the process at once)\n");
}

/// Whether SIGINT or SIGTERM was seen since [`catch_sigint`].
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// From now on SIGINT and SIGTERM end the run early (see [`interrupted`]):
/// the pipeline drains, ports stop and the summary is printed.
pub(crate) fn catch_sigint() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only swaps an atomic and calls `write` and
        // `_exit`, all async-signal-safe; `signal` has no other
        // precondition.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}

/// The peer of port `p` among `n`: 0<->1, 2<->3, an odd last one itself.
pub fn peer(p: usize, n: usize) -> usize {
    let q = p ^ 1;
    if q < n { q } else { p }
}

/// Mbufs to give the pool by default: every descriptor of every queue, each
/// lcore's cache (1.5x, its flush threshold) and burst, with room to spare;
/// at least 8191 and one less than a power of two.
pub fn default_pool_size(ports: usize, queues: usize, args: &FwdArgs) -> u32 {
    let desc = ports * queues * (args.rxd as usize + args.txd as usize);
    let lcores = args.cores as usize * (args.cache as usize * 3 / 2 + 2 * 64);
    let need = (desc + lcores + 1024).max(8191);
    let size = (need + 1).next_power_of_two() - 1;
    size.min(u32::MAX as usize) as u32
}

/// Runs `sluice fwd`. `Ok(true)` when every tester report is clean (or there
/// is no tester).
pub fn run(args: &FwdArgs) -> Result<bool, String> {
    run_with(args, args.engine.name(), |ports, pool, testers| {
        forward(ports, pool, args, testers)
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
/// `args.duration` seconds after it.
pub fn measure(args: &FwdArgs, warmup: Option<f64>) -> Result<Measured, String> {
    let mut window = None;
    let mut summary = measure_with(args, args.engine.name(), |ports, pool, testers| {
        let (f, w) = forward_window(ports, pool, args, testers, warmup)?;
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

/// The frame of a forwarding app: opens and starts the ports of `args`
/// with one mbuf pool, runs `phase` (the forwarding, with live stats and
/// the drain), stops the ports and prints the summary under the name
/// `engine`. `Ok(true)` when every tester report is clean.
pub(crate) fn run_with(
    args: &FwdArgs,
    engine: &'static str,
    phase: impl FnOnce(&mut [Port], &MbufPool, &[(String, Arc<Tester>)]) -> Result<Forwarded, String>,
) -> Result<bool, String> {
    let summary = measure_with(args, engine, phase)?;
    summary.print(args.json);
    Ok(summary.clean)
}

/// [`run_with`] without the printing: the summary.
pub(crate) fn measure_with(
    args: &FwdArgs,
    engine: &'static str,
    phase: impl FnOnce(&mut [Port], &MbufPool, &[(String, Arc<Tester>)]) -> Result<Forwarded, String>,
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
        .pool_size
        .unwrap_or_else(|| default_pool_size(specs.len(), queues, args));
    let data_room = if args.engine == Engine::Txonly || args.tx_first {
        args.txpkts.max(2048)
    } else {
        2048
    };
    let pool = MbufPool::new(MbufPoolConfig {
        name: "fwd".into(),
        size: pool_size,
        cache_size: args.cache,
        data_room,
        ..Default::default()
    })
    .map_err(|e| format!("mbuf pool: {e}"))?;
    // The main thread on the first CPU, as testpmd's main lcore (a threaded
    // device's thread then goes to another one: see `lcore_cpus`).
    let cpus = sluice::lcore::available_cpus();
    if cpus.len() > 1
        && let Err(e) = sluice::lcore::pin_current_thread(cpus[0])
    {
        eprintln!("sluice fwd: warning: main thread not pinned: {e}");
    }
    let mut ports = open_ports(&specs, &pool, queues, args)?;
    for p in ports.iter_mut() {
        p.start()
            .map_err(|e| format!("port {} ({}): {e}", p.id(), p.name()))?;
    }
    catch_sigint();
    // The testers the ports are cabled to (held here, so their reports
    // outlive the ports).
    let names = crate::dist::tester_names(&specs);
    let testers: Vec<_> = sluice::tester::registered()
        .into_iter()
        .filter(|(n, _)| names.contains(n))
        .collect();
    let Forwarded {
        lcores,
        secs,
        drops: stream_drops,
        recycle_errors,
        route_drops,
        drain_accounted,
        alloc_failures: gen_failures,
    } = phase(&mut ports, &pool, &testers)?;

    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
    let device_cycles: u64 = ports
        .iter()
        .zip(&counters)
        .map(|(p, c)| inline_device_cycles(p.name(), c))
        .sum();
    for p in ports.iter_mut() {
        p.stop();
    }
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
        burst: args.burst as usize,
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
        pool_full: pool.is_full(),
        alloc_failures,
        drain_accounted,
        testers,
        clean,
    };
    Ok(summary)
}

/// The cycles port `spec`'s device model spent inside the forwarding
/// lcores' queue calls: its `device_cycles` xstat, unless the device runs on
/// its own thread (`device=threaded`), whose cycles are not the lcores'.
pub fn inline_device_cycles(spec: &str, c: &PortCounters) -> u64 {
    if has_threaded_device(spec) {
        0
    } else {
        c.xstats.get("device_cycles").unwrap_or(0)
    }
}

/// Whether port `spec` runs its device model on a device thread.
pub(crate) fn has_threaded_device(spec: &str) -> bool {
    PortSpec::parse(spec).is_ok_and(|s| s.get("device") == Some("threaded"))
}

/// The CPUs forwarding lcores take, in order, from the process's `cpus`:
/// the main thread is pinned to the first (as testpmd's main lcore), so
/// lcores start at the second. A threaded device model's thread is pinned
/// to the first CPU other than the one its port was started from — the
/// second — so with `threaded` devices lcores start at the third and the
/// first comes last (the main thread mostly sleeps). Never empty.
pub fn lcore_cpus(cpus: &[usize], threaded: bool) -> Vec<usize> {
    let skip = if threaded { 2 } else { 1 };
    if cpus.len() <= skip {
        return if threaded && cpus.len() == 2 {
            vec![cpus[0]]
        } else {
            cpus.to_vec()
        };
    }
    cpus[skip..].iter().chain(&cpus[..1]).copied().collect()
}

/// Opens every port with `queues` Rx and Tx queues; if a driver cannot have
/// that many, all are opened again with one (so every port has the same
/// count and each stream's Tx queue exists).
pub(crate) fn open_ports(
    specs: &[String],
    pool: &MbufPool,
    queues: usize,
    args: &FwdArgs,
) -> Result<Vec<Port>, String> {
    match open_all(specs, pool, queues, args) {
        Err(PortError::Config(msg)) if queues > 1 => {
            eprintln!("sluice fwd: {msg}; using one queue per port");
            open_all(specs, pool, 1, args).map_err(|e| e.to_string())
        }
        r => r.map_err(|e| e.to_string()),
    }
}

fn open_all(
    specs: &[String],
    pool: &MbufPool,
    queues: usize,
    args: &FwdArgs,
) -> Result<Vec<Port>, PortError> {
    let mut ports = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let mut config = PortConfig::new(Some(pool.clone()))
            .port_id(i as u16)
            .queues(queues as u16, queues as u16)
            .nb_rxd(args.rxd)
            .nb_txd(args.txd);
        config.burst_stats = args.hist;
        let wanted = args.rx_offloads_if_capable;
        ports.push(sluice::driver::open_with(spec, config, |info, c| {
            c.rx_offloads |= wanted.intersect(info.rx_offload_capa);
        })?);
    }
    Ok(ports)
}

/// Checks that every stream of `ports` can run the `recycle` engine: stream
/// (p, q) recycles from Tx queue q of p's peer into Rx queue q of p, so both
/// must support it. The error names the port, the queue and the driver.
pub fn check_recycle(ports: &[Port]) -> Result<(), String> {
    let n = ports.len();
    for (p, port) in ports.iter().enumerate() {
        let t = peer(p, n);
        for q in 0..port.nb_rx_queues() {
            let sides = [
                ("Rx", p, port.rx_queue_recycles(q)),
                ("Tx", t, ports[t].tx_queue_recycles(q)),
            ];
            for (dir, i, capable) in sides {
                let port = &ports[i];
                match capable {
                    Ok(true) => {}
                    Ok(false) => {
                        return Err(format!(
                            "--engine recycle: port {i} ({}) {dir} queue {q} cannot recycle \
                             buffers: driver '{}' does not support it (soft and afxdp ports do)",
                            port.name(),
                            port.info().driver
                        ));
                    }
                    Err(e) => {
                        return Err(format!("--engine recycle: port {i} ({}): {e}", port.name()));
                    }
                }
            }
        }
    }
    Ok(())
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
}

/// The forwarding phase: streams, lcores, live stats, and, when `testers`
/// watch the traffic, their pause and the drain.
fn forward(
    ports: &mut [Port],
    pool: &MbufPool,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
) -> Result<Forwarded, String> {
    forward_window(ports, pool, args, testers, None).map(|(f, _)| f)
}

/// [`forward`], with a measured window after `warmup` seconds.
fn forward_window(
    ports: &mut [Port],
    pool: &MbufPool,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
    warmup: Option<f64>,
) -> Result<(Forwarded, Option<WindowFigures>), String> {
    if args.engine == Engine::Recycle {
        check_recycle(ports)?;
    }
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
            .all(|p| crate::dist::tester_names(&[p.name().to_owned()]).len() == 1);
    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
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
            streams.push(Stream {
                id: streams.len(),
                tx_port: t,
                rx,
                tx,
                src_mac,
                dst_mac,
                frame: (args.engine == Engine::Txonly)
                    .then(|| (udp_frame(args.txpkts, src_mac, dst_mac), pool.clone())),
                recycle_errors: 0,
                alloc_failures: 0,
            });
        }
    }
    if args.tx_first {
        for s in streams.iter_mut() {
            send_first_burst(s, pool, args);
        }
    }
    let stream_counters: Vec<StreamCounters> =
        streams.iter().map(|_| StreamCounters::default()).collect();
    let stream_tx_port: Vec<usize> = streams.iter().map(|s| s.tx_port).collect();
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
    };
    let cfg = LcoreConfig {
        engine: args.engine,
        burst: args.burst as usize,
        tx_retry: args.tx_retry,
        counters: &stream_counters,
        stop: &stop,
        window: &window,
    };
    let control = Control {
        stop: &stop,
        accountable,
        warmup: warmup.map(|secs| (secs, &window, inline.as_slice())),
    };
    let (lcores, secs, snapshots, drain_accounted) = run_lcores_with(
        per_lcore,
        threaded,
        &src,
        args,
        testers,
        control,
        |cpu, mut streams| lcore_main(cpu, &mut streams, cfg, pool),
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
    };
    Ok((f, window))
}

/// How the main thread runs the lcores of [`run_lcores_with`].
#[derive(Clone, Copy)]
pub(crate) struct Control<'a> {
    /// Set to end the run.
    pub stop: &'a AtomicBool,
    /// Every frame starts and ends at a tester: the drain waits for their
    /// counts to add up (see [`main_loop`]).
    pub accountable: bool,
    /// A measured window after a warm-up.
    pub warmup: Option<Warmup<'a>>,
}

/// The counters at a measured window's open and close.
pub(crate) type WindowEnds = (Snapshot, Snapshot);

/// A warm-up before the measured window: its length in seconds, the
/// lcores' [`Window`] flag and, per port, whether its device runs inline.
pub(crate) type Warmup<'a> = (f64, &'a AtomicU8, &'a [bool]);

/// Runs one forwarding thread per element of `per_lcore` (each pinned to
/// its CPU from [`lcore_cpus`], named `fwd-I`), prints live stats from
/// `src` until the duration is over or a signal came (then the drain, see
/// [`main_loop`]), sets `stop` and joins them. Each lcore's cycles, the
/// seconds from start to stop, and whether the drain accounted for every
/// frame (`None` unless every port is on a tester).
pub(crate) fn run_lcores<T: Send>(
    per_lcore: Vec<T>,
    threaded: bool,
    src: &Sources<'_>,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
    stop: &AtomicBool,
    body: impl Fn(Option<usize>, T) -> Result<LcoreCycles, String> + Sync,
) -> Result<(Vec<LcoreCycles>, f64, Option<bool>), String> {
    // Every port on a tester: the drain can wait for the counts to add up.
    let accountable = !testers.is_empty()
        && args
            .all_specs()
            .iter()
            .all(|spec| crate::dist::tester_names(std::slice::from_ref(spec)).len() == 1);
    let control = Control {
        stop,
        accountable,
        warmup: None,
    };
    let (lcores, secs, _, drain_accounted) =
        run_lcores_with(per_lcore, threaded, src, args, testers, control, body)?;
    Ok((lcores, secs, drain_accounted))
}

/// What [`run_lcores_with`] returns: each lcore's cycles, the seconds from
/// start to stop, the counters at a measured window's ends, and whether the
/// drain accounted for every frame (when it could: see [`main_loop`]).
pub(crate) type LcoresRan = (Vec<LcoreCycles>, f64, Option<WindowEnds>, Option<bool>);

/// [`run_lcores`] under `control`: with a warm-up, also the counters at the
/// measured window's open and close.
pub(crate) fn run_lcores_with<T: Send>(
    per_lcore: Vec<T>,
    threaded: bool,
    src: &Sources<'_>,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
    control: Control<'_>,
    body: impl Fn(Option<usize>, T) -> Result<LcoreCycles, String> + Sync,
) -> Result<LcoresRan, String> {
    let stop = control.stop;
    let cpus = lcore_cpus(&sluice::lcore::available_cpus(), threaded);
    if per_lcore.len() > cpus.len() {
        eprintln!(
            "sluice: warning: {} forwarding lcore(s) on {} free CPU(s): they share CPUs",
            per_lcore.len(),
            cpus.len()
        );
    }
    let body = &body;
    let (results, secs, (snapshots, accounted)) = std::thread::scope(|scope| {
        // Should the main thread panic below, the scope joins the lcores
        // before passing the panic on: they must have been told to stop.
        let _stop = StopOnDrop(stop);
        let handles: Vec<_> = per_lcore
            .into_iter()
            .enumerate()
            .map(|(i, work)| {
                let cpu = (!cpus.is_empty()).then(|| cpus[i % cpus.len()]);
                std::thread::Builder::new()
                    .name(format!("fwd-{i}"))
                    .spawn_scoped(scope, move || body(cpu, work))
            })
            .collect();
        let live = Live::new(src, args.json);
        let started = live.start();
        let mut ends = (None, None);
        if handles.iter().all(|h| h.is_ok()) {
            // An lcore that ends before it is told to has failed (an error
            // or a panic): the run ends, and the join below says why.
            let lcore_ended = || {
                handles
                    .iter()
                    .any(|h| h.as_ref().is_ok_and(|h| h.is_finished()))
            };
            ends = main_loop(live, src, args, testers, control, &lcore_ended);
        }
        stop.store(true, Ordering::Relaxed);
        let secs = started.elapsed().as_secs_f64();
        let results: Vec<Result<LcoreCycles, String>> = handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .map_err(|p| {
                        format!(
                            "forwarding lcore panicked: {}",
                            crate::bench::panic_message(&*p)
                        )
                    })
                    .and_then(|r| r),
                Err(e) => Err(format!("cannot start a forwarding thread: {e}")),
            })
            .collect();
        (results, secs, ends)
    });
    let lcores = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    if let Some(fault) = src.fault() {
        return Err(fault);
    }
    Ok((lcores, secs, snapshots, accounted))
}

/// Sets its flag when dropped, unwinding included: lcores polling under
/// `std::thread::scope` stop even when the thread that should tell them
/// panics.
pub(crate) struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// `--tx-first`: one burst of generated frames on the stream's Tx queue
/// (what it does not take is freed).
fn send_first_burst(s: &mut Stream<'_>, pool: &MbufPool, args: &FwdArgs) {
    let frame = udp_frame(args.txpkts, s.src_mac, s.dst_mac);
    let mut burst: Burst<64> = Burst::new();
    let n = args.burst as usize;
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

/// Stats lines until the duration is over (never when it is infinite) or a
/// signal came (SIGINT, SIGTERM); then, with testers,
/// the drain: they are paused and forwarding goes on until nothing moved
/// for a few looks, at most [`DRAIN_MAX`] — or, when every frame starts and
/// ends at a tester (`control.accountable`), until every frame they sent
/// was received or counted as a drop or a miss, at most
/// [`DRAIN_MAX_ACCOUNTED`] (a descheduled lcore then cannot end the drain
/// early). With a warm-up, the duration starts after it, and the counters
/// at the window's open and close are returned; with `control.accountable`,
/// whether the drain ended with every frame accounted for (every frame the
/// testers sent received, or counted as a drop: refused by a Tx queue,
/// missed, an Rx or Tx error, or dropped by the application). A failure — an
/// lcore ended (`lcore_ended`) or a port's device failed — ends the loop at
/// once, without the drain.
fn main_loop(
    mut live: Live,
    src: &Sources<'_>,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
    control: Control<'_>,
    lcore_ended: &dyn Fn() -> bool,
) -> (Option<WindowEnds>, Option<bool>) {
    let start = live.start();
    let warmup = control.warmup;
    let warm = Duration::from_secs_f64(warmup.map_or(0.0, |w| w.0));
    // An infinite (or absurdly long) duration has no end but a signal;
    // with a warm-up, the end moves to the window's open plus the duration.
    let length = Duration::try_from_secs_f64(args.duration).ok();
    let mut end = length.and_then(|d| start.checked_add(warm + d));
    let period = Duration::from_secs_f64(args.stats_period);
    let mut next = start + period;
    let mut open: Option<Snapshot> = None;
    let mut snapshots = None;
    loop {
        if lcore_ended() || src.fault().is_some() {
            return (None, None);
        }
        let now = Instant::now();
        if let Some((_, flag, inline)) = warmup
            && open.is_none()
            && now >= start + warm
        {
            let o = Snapshot::take(src, inline);
            end = length.and_then(|d| o.at.checked_add(d));
            open = Some(o);
            flag.store(Window::OPEN, Ordering::Relaxed);
        }
        if end.is_some_and(|e| now >= e) || INTERRUPTED.load(Ordering::Relaxed) {
            if let (Some((_, flag, inline)), Some(open)) = (warmup, open.take()) {
                flag.store(Window::CLOSED, Ordering::Relaxed);
                snapshots = Some((open, Snapshot::take(src, inline)));
            }
            break;
        }
        // Short sleeps, so a signal (and the warm-up's end) is seen soon.
        let mut wake = next.min(now + Duration::from_millis(50));
        if let Some(e) = end {
            wake = wake.min(e);
        }
        if open.is_none() && warmup.is_some() {
            wake = wake.min(start + warm);
        }
        std::thread::sleep(wake - now);
        if Instant::now() >= next {
            live.line(src);
            next += period;
        }
    }
    if testers.is_empty() {
        return (snapshots, None);
    }
    for (_, t) in testers {
        t.pause(true);
    }
    let accountable = control.accountable;
    let drain_end = Instant::now()
        + if accountable {
            DRAIN_MAX_ACCOUNTED
        } else {
            DRAIN_MAX
        };
    let mut last = src.moved();
    let mut idle = 0;
    let added_up = || {
        let (sent, received) = testers.iter().fold((0, 0), |(s, r), (_, t)| {
            let rep = t.report();
            (s + rep.sent, r + rep.received)
        });
        let counted: u64 = src
            .sample()
            .iter()
            .map(PortSample::counted_drops)
            .sum::<u64>()
            + src.app_drops.map_or(0, |f| f());
        sent == received + counted
    };
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
    (snapshots, accountable.then_some(accounted))
}

/// Each registered tester's report.
pub(crate) fn tester_reports(mut testers: Vec<(String, Arc<Tester>)>) -> Vec<TesterSummary> {
    testers.sort_by(|a, b| a.0.cmp(&b.0));
    testers
        .into_iter()
        .map(|(name, t)| {
            let r = t.report();
            TesterSummary {
                name,
                sent: r.sent,
                received: r.received,
                lost: r.lost,
                reordered: r.reordered,
                duplicates: r.duplicates,
                corrupt: r.corrupt,
                foreign: r.foreign,
                clean: r.is_clean(),
                report: r.to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn ports_pair_up_and_an_odd_last_one_is_its_own_peer() {
        assert_eq!((0..4).map(|p| peer(p, 4)).collect::<Vec<_>>(), [1, 0, 3, 2]);
        assert_eq!((0..3).map(|p| peer(p, 3)).collect::<Vec<_>>(), [1, 0, 2]);
        assert_eq!(peer(0, 1), 0);
    }

    #[test]
    fn default_pool_holds_every_descriptor_and_cache() {
        let a = FwdArgs::with_specs(vec![]);
        assert_eq!(default_pool_size(2, 1, &a), 8191);
        let mut a = FwdArgs::with_specs(vec![]);
        a.cores = 4;
        a.rxd = 4096;
        a.txd = 4096;
        let s = default_pool_size(4, 4, &a);
        assert!(s as usize >= 4 * 4 * 8192 + 4 * 384);
        assert!((s + 1).is_power_of_two());
    }

    fn quick(specs: &[&str], engine: Engine, cores: u16) -> FwdArgs {
        let mut a = FwdArgs::with_specs(specs.iter().map(|s| s.to_string()).collect());
        a.engine = engine;
        a.cores = cores;
        a.duration = 0.05;
        a.stats_period = 10.0;
        a.rxd = 64;
        a.txd = 64;
        a.cache = 32;
        a.pool_size = Some(2047);
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
            } = forward(&mut ports, &pool, &args, &[]).unwrap();
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
        let Forwarded { lcores, drops, .. } = forward(&mut ports, &pool, &args, &[]).unwrap();
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
        let mut args = quick(&[&spec, &spec], Engine::Recycle, 1);
        args.duration = 0.1;
        let (pool, mut ports) = started_ports(&args, 1);
        let testers = testers_named(name);
        assert_eq!(testers.len(), 1);
        let f = forward(&mut ports, &pool, &args, &testers).unwrap();
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
        let f = forward(&mut ports, &pool, &args, &testers).unwrap();
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
            let f = forward(&mut ports, &pool, &args, &[]).unwrap();
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
        args.pool_size = Some(63);
        args.cache = 0;
        let s = measure_with(&args, "txonly", |ports, pool, testers| {
            forward(ports, pool, &args, testers)
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
        args.pool_size = Some(127);
        args.cache = 0;
        let s = measure_with(&args, "io", |ports, pool, testers| {
            forward(ports, pool, &args, testers)
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
    fn lcores_avoid_the_main_and_the_device_thread_cpus() {
        assert_eq!(lcore_cpus(&[0], false), [0]);
        assert_eq!(lcore_cpus(&[0], true), [0]);
        assert_eq!(lcore_cpus(&[0, 1], false), [1, 0]);
        assert_eq!(lcore_cpus(&[0, 1], true), [0]);
        assert_eq!(lcore_cpus(&[2, 3, 5, 7], false), [3, 5, 7, 2]);
        assert_eq!(lcore_cpus(&[2, 3, 5, 7], true), [5, 7, 2]);
    }

    #[test]
    fn only_an_inline_device_has_its_cycles_subtracted() {
        let c = PortCounters::new(1, 1, false);
        assert_eq!(inline_device_cycles("null", &c), 0);
        c.xstats.register("device_cycles").add(500);
        assert_eq!(inline_device_cycles("soft:device=inline", &c), 500);
        assert_eq!(inline_device_cycles("soft", &c), 500);
        assert_eq!(inline_device_cycles("soft:device=threaded", &c), 0);
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
