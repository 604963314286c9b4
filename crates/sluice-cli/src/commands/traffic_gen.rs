//! `sluice gen`: the built-in tester's generator onto any port.
//!
//! The main thread (registered as an lcore) fills mbufs with the tester's
//! stamped frames and sends them on Tx queue 0, never dropping one: frames
//! the queue does not take stay in the burst and go first next time, and
//! only the free room is filled with new ones. With `--check` it also
//! receives on Rx queue 0 and checks every frame (for a port whose traffic
//! comes back: a `pair` looped through `sluice fwd`, a `soft` port cabled to
//! a wire, ...). On a `soft` port cabled to a tester it sends as one more
//! stream of that tester, which sends the port's Rx traffic and checks its
//! Tx traffic, so both ways are counted by one tester. At the end it stops
//! generating (the port's tester too), keeps receiving until nothing
//! arrives (bounded), stops the port and prints the tester report.
//! On a port with a peer process (memif, vhost) it first waits, within
//! `--duration`, for the peer to connect, and sends nothing until then.
//!
//! With `--latency` (or `--hist-out`) it checks what comes back as with
//! `--check` and measures each frame's one-way latency: a line per second
//! with the last second's percentiles (text output), the whole run's in
//! the report, and the histograms in `--hist-out`'s interval log and plot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::{FRAME_OVERHEAD, PortConfig, PortSpec, SpecArgs, SpecError};
use sluice::tester::{
    FrameSize, IMIX_ORDER, MAX_FRAME, TESTER_KEYS, Tester, TesterConfig, TesterReport,
};
use sluice::tsc::rdtsc;

use sluice_telemetry::capture::{CaptureTaps, Direction, Tap};

use crate::app::io::lcore::{LcoreCycles, LiveLcore, Publisher};
use crate::app::latency::{self, HistOut};
use crate::app::observe::capture;
use crate::app::observe::census::{self, CensusReport};
use crate::app::observe::drops::DropSources;
use crate::app::observe::snapshot::{DropCount, LatencySummary};
use crate::app::observe::{Observer, Watched};
use crate::app::options::{LatencyOptions, ObserveOptions};
use crate::app::output::{emit, emit_json};
use crate::app::ports::{tester_names, wait_for_peer};
use crate::app::summary::print_drops_by_reason;

/// Seconds between latency lines and `--hist-out` intervals.
const LATENCY_PERIOD_S: f64 = 1.0;

/// Arguments of `sluice gen`.
#[derive(Args, Debug, Clone)]
pub struct GenArgs {
    /// The port to send on (a spec string).
    #[arg(long, short = 'p', value_name = "SPEC")]
    pub port: String,
    /// How long to send, in seconds (at most 1e6).
    #[arg(long, default_value_t = 1.0, value_parser = crate::app::options::parse_seconds)]
    pub duration: f64,
    /// Frames per second (default: full speed).
    #[arg(long, value_name = "PPS")]
    pub rate: Option<String>,
    /// Protocols: udp, tcp, udp6 or tcp6.
    #[arg(long = "gen", value_name = "KIND", default_value = "udp")]
    pub kind: String,
    /// Flows.
    #[arg(long, default_value = "16")]
    pub flows: String,
    /// Frame size without FCS (60..=9000) or `imix`.
    #[arg(long, default_value = "64")]
    pub size: String,
    /// Frames to send at most.
    #[arg(long)]
    pub count: Option<String>,
    /// Also receive on the same port and check what comes back.
    #[arg(long)]
    pub check: bool,
    /// Frames per Tx call.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub burst: u16,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Telemetry and metrics.
    #[command(flatten)]
    pub observe: ObserveOptions,
    /// Latency measurement and its histograms.
    #[command(flatten)]
    pub latency: LatencyOptions,
}

impl GenArgs {
    /// The tester configuration, read through the tester's own spec keys
    /// (so values are checked, and errors worded, as in a port spec).
    pub fn tester_config(&self) -> Result<TesterConfig, String> {
        let mut text = format!(
            "gen:gen={},flows={},size={}",
            self.kind, self.flows, self.size
        );
        if let Some(r) = &self.rate {
            text += &format!(",rate={r}");
        }
        if let Some(c) = &self.count {
            text += &format!(",count={c}");
        }
        // Worded for the command line: `--size 50: not a frame size ...`.
        let err = |e: SpecError| match e {
            SpecError::BadValue {
                key,
                value,
                expected,
                ..
            } => format!("--{key} {value}: not {expected}"),
            other => other.to_string(),
        };
        let spec = PortSpec::parse(&text).map_err(err)?;
        let mut args = SpecArgs::new(&spec, TESTER_KEYS);
        let config = TesterConfig::from_args(&mut args)
            .map_err(err)?
            .unwrap_or_default();
        args.finish().map_err(err)?;
        Ok(config)
    }
}

/// The report as printed with `--json`.
#[derive(serde::Serialize)]
struct GenReport {
    #[serde(rename = "type")]
    kind: &'static str,
    port: String,
    duration_s: f64,
    sent: u64,
    received: u64,
    lost: u64,
    reordered: u64,
    duplicates: u64,
    corrupt: u64,
    foreign: u64,
    bytes_sent: u64,
    tx_mpps: f64,
    /// Frames the port took but could not send (the interface refused
    /// them: longer than its MTU, say).
    tx_errors: u64,
    /// Every packet the port dropped, by reason.
    drops_by_reason: Vec<DropCount>,
    clean: Option<bool>,
    /// One-way latency (with `--latency`).
    #[serde(skip_serializing_if = "Option::is_none")]
    latency: Option<Vec<LatencySummary>>,
    /// Where the pool's buffers were after the port stopped.
    census: CensusReport,
}

/// Runs `sluice gen`; an unclean report (with `--check`) is an error.
pub fn run_checked(args: &GenArgs) -> Result<(), String> {
    if run(args)? {
        Ok(())
    } else {
        Err("the tester report is not clean".into())
    }
}

/// Runs `sluice gen`; `Ok(false)` when `--check` found the report unclean.
pub fn run(args: &GenArgs) -> Result<bool, String> {
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 1e6) {
        return Err(format!(
            "--duration {}: not a number of seconds in (0, 1e6]",
            args.duration
        ));
    }
    let config = args.tester_config()?;
    let _lcore = sluice::lcore::register().map_err(|e| e.to_string())?;
    // Buffers and MTU sized for the largest frame sent, no more: a port
    // kind with a limit on its buffers (AF_XDP: a frame per page) takes the
    // defaults, and a bigger --size meets the limit by name.
    let largest = match config.size {
        FrameSize::Fixed(n) => n,
        FrameSize::Imix => IMIX_ORDER.iter().copied().max().unwrap_or(MAX_FRAME),
    };
    let data_room = largest.max(2048);
    // Shared memory when the port's peer maps the pool (a virtio port).
    let pool = MbufPool::with_sharing(
        MbufPoolConfig {
            name: "gen".into(),
            size: 8191,
            cache_size: 256,
            data_room,
            ..Default::default()
        },
        sluice::driver::pool_sharing([&args.port]),
    )
    .map_err(|e| format!("mbuf pool: {e}"))?;
    let mut port_config = PortConfig::new(Some(pool.clone()));
    port_config.mtu = port_config
        .mtu
        .max(largest.saturating_sub(FRAME_OVERHEAD as u16));
    let sized = |e: sluice::port::PortError| {
        if data_room > 2048 {
            format!(
                "{e} (buffers of {data_room} bytes and MTU {} for --size {})",
                port_config.mtu, args.size
            )
        } else {
            e.to_string()
        }
    };
    // A `soft` port cabled to a tester receives that tester's frames and
    // checks what it sends with it: `gen` sends as one more stream of that
    // tester, so what it sends and what it receives are counted by one
    // tester. The tester is made here, from `gen`'s options, before the
    // port attaches to it; a port spec that gives tester keys of its own
    // must give the same ones (the error names both).
    let tester = match tester_names(std::slice::from_ref(&args.port)).first() {
        Some(name) => sluice::tester::attach(name, Some(config))
            .map_err(|e| format!("port {}: {e}", args.port))?,
        None => Tester::new(config),
    };
    let mut port = sluice::driver::open(&args.port, port_config.clone()).map_err(sized)?;
    port.start().map_err(sized)?;
    // A memif or vhost port sends nothing before its peer is there: the
    // run starts once it is, or ends with nothing sent.
    if !wait_for_peer(&port, Duration::from_secs_f64(args.duration)) {
        port.stop();
        return Err(format!(
            "port {}: no peer connected within --duration {} s",
            args.port, args.duration
        ));
    }
    let stream = match tester.add_stream() {
        Ok(stream) => stream,
        Err(e) => {
            port.stop();
            return Err(e.to_string());
        }
    };
    let flows = tester.config().flows;
    let mut generator = tester.generator(stream, (0..flows).collect());
    let measure = args.latency.enabled();
    let check = args.check || measure;
    let mut checker = check.then(|| tester.checker());
    let mut hist_out = match &args.latency.hist_out {
        Some(path) => Some(HistOut::create(path, "gen")?),
        None => None,
    };
    let mut hist_error = None;
    let period = Duration::from_secs_f64(LATENCY_PERIOD_S);
    let mut last_latency = Vec::new();
    // The main thread is the one lcore: its counts, live, for watchers.
    let live = LiveLcore::many(1);
    let drop_sources = DropSources::new(vec![port.counters()]);
    let observer = if args.observe.is_off() {
        None
    } else {
        let testers = [("gen".to_owned(), Arc::clone(&tester))];
        let watched = Watched::new(
            "gen",
            &args.observe.file_prefix,
            std::slice::from_ref(&port),
            &[&pool],
            Arc::clone(&live),
            &testers,
            drop_sources.clone(),
        );
        Some(Observer::start(&args.observe, watched)?)
    };
    let capture = capture::start(std::slice::from_ref(&port), &args.observe, &drop_sources)?;
    let tap = |direction| {
        capture
            .taps
            .tap(0, 0, direction)
            .cloned()
            .unwrap_or_else(CaptureTaps::detached)
    };
    let (rx_tap, tx_tap) = (tap(Direction::Rx), tap(Direction::Tx));
    live[0].start(None);
    let mut publisher = Publisher::new(&live[0]);
    let mut counted = LcoreCycles::default();

    let burst_size = args.burst as usize;
    let mut tx: Burst<64> = Burst::new();
    let mut rx: Burst<64> = Burst::new();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.duration);
    let mut next_period = start + period;
    let mut polls = 0u64;
    let counters = port.counters();
    let census = census::of_run(std::slice::from_ref(&port), &pool, None);
    {
        let (rxq, txq) = port.queues_mut().map_err(|e| e.to_string())?;
        let (rxq, txq) = (&mut rxq[0], &mut txq[0]);
        loop {
            polls += 1;
            // A failed device (see `PortCounters::fault`) ends the run.
            if polls.is_multiple_of(256) {
                let now = Instant::now();
                if now >= end || counters.fault().is_some() {
                    break;
                }
                if measure && now >= next_period {
                    while next_period <= now {
                        next_period += period;
                    }
                    if let Some(c) = &mut checker {
                        c.publish_latency();
                    }
                    let cumulative = tester.latency();
                    // A log that cannot be written is the run's error, once
                    // the port is stopped and the buffers are back.
                    if let Some(h) = &mut hist_out
                        && let Err(e) = h.interval(&cumulative)
                    {
                        hist_error = Some(e);
                        hist_out = None;
                    }
                    if !args.json {
                        print_live_latency(start, &cumulative, &last_latency);
                    }
                    last_latency = cumulative;
                }
            }
            // New frames only into the free room: unsent ones go first.
            let now = rdtsc();
            let view = tx.capped(burst_size);
            let want = (view.free() as u64).min(generator.ready(now)) as usize;
            if want > 0 && pool.alloc_bulk(view, want).is_ok() {
                let first = view.len() - want;
                let mut filled = first;
                for i in first..view.len() {
                    let len = generator.frame_len();
                    let m = &mut view[i];
                    let Ok(buf) = m.append(len) else { break };
                    match generator.fill(buf, now) {
                        Some(n) => {
                            if n < len {
                                let _ = m.trim(len - n);
                            }
                            filled += 1;
                        }
                        None => break,
                    }
                }
                view.truncate(filled);
                // The new frames are the ones handed to the Tx queue now.
                if tx_tap.is_active() {
                    tx_tap.mirror(&view.as_slice()[first..], now);
                }
            }
            let sent = if tx.is_empty() {
                0
            } else {
                txq.tx_burst(&mut tx)
            };
            if let Some(c) = &mut checker {
                check_burst(rxq.as_mut(), &mut rx, c, &rx_tap);
            }
            counted.polls += 1;
            if sent == 0 {
                counted.idle_polls += 1;
            } else {
                counted.packets += sent as u64;
                counted.busy_cycles += rdtsc().wrapping_sub(now);
            }
            publisher.tick(&counted);
        }
        publisher.publish(&counted);
        // No new frames from here, neither ours nor (a soft port's) the
        // port tester's: what was sent can all come home.
        tester.pause(true);
        // Frames never sent are taken back, the last one exactly; the rest
        // cannot be un-sent and would count as lost, so send them.
        let mut tries = 0;
        while !tx.is_empty() && tries < 1 << 16 {
            txq.tx_burst(&mut tx);
            if let Some(c) = &mut checker {
                check_burst(rxq.as_mut(), &mut rx, c, &rx_tap);
            }
            tries += 1;
        }
        if let Some(c) = &mut checker {
            let until = Instant::now() + Duration::from_millis(300);
            let mut idle = 0;
            while idle < 1000 && Instant::now() < until {
                if check_burst(rxq.as_mut(), &mut rx, c, &rx_tap) == 0 {
                    idle += 1;
                    std::thread::sleep(Duration::from_micros(100));
                } else {
                    idle = 0;
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    tx.clear();
    // Nothing reads the port once it stops.
    drop(observer);
    let last_census = census.take();
    port.stop();
    if let Some(fault) = counters.fault() {
        return Err(format!("port {}: {fault}", args.port));
    }
    let stats = port.stats();
    let drops = drop_sources.table();
    drop(port);
    drop(checker);
    let r = tester.report();
    let clean = check.then(|| r.is_clean());
    let census = CensusReport::new(&census.take(), &last_census);
    let port_latency = tester.latency();
    let plot = match (hist_out, &args.latency.hist_out) {
        (Some(h), Some(log)) => match h.finish(&port_latency) {
            Ok(svg) => Some((log, svg)),
            Err(e) => {
                hist_error.get_or_insert(e);
                None
            }
        },
        _ => None,
    };
    let summaries = measure.then(|| port_latency.iter().map(latency::summary_of).collect());
    print_report(
        args,
        &r,
        &stats,
        secs,
        clean,
        Findings {
            drops_by_reason: drops,
            latency: summaries,
            census,
        },
    );
    if let (Some((log, svg)), false) = (plot, args.json) {
        emit(&format!(
            "latency histograms: {} (HdrHistogram interval log), {} (plot)",
            log.display(),
            svg.display()
        ));
    }
    pool.flush_local_cache();
    if !pool.is_full() {
        return Err("the mbuf pool is not full after the port stopped".into());
    }
    if let Some(e) = hist_error {
        return Err(e);
    }
    Ok(clean.unwrap_or(true))
}

/// Receives one burst (mirrored into `tap` while a capture runs) and
/// checks each frame; how many arrived.
fn check_burst(
    rxq: &mut dyn sluice::port::RxQueue,
    rx: &mut Burst<64>,
    checker: &mut sluice::tester::Checker,
    tap: &Tap,
) -> usize {
    let n = rxq.rx_burst(rx.capped(32));
    let now = rdtsc();
    if tap.is_active() {
        tap.mirror(rx.as_slice(), now);
    }
    for m in rx.iter() {
        if m.nb_segs() == 1 {
            checker.check_at(m.data(), now);
        } else {
            checker.check_at(&m.to_vec(), now);
        }
    }
    rx.clear();
    n
}

/// One line per port: the latency of the frames received since the last
/// line (`cumulative` minus `before`).
fn print_live_latency(
    start: Instant,
    cumulative: &[sluice::tester::PortLatency],
    before: &[sluice::tester::PortLatency],
) {
    let t = start.elapsed().as_secs_f64();
    for l in cumulative {
        let mut gained = l.clone();
        if let Some(b) = before.iter().find(|b| b.port == l.port)
            && gained.histogram.subtract(&b.histogram).is_err()
        {
            gained = l.clone();
        }
        emit(&format!(
            "[{t:6.1} s] latency port {}: {}",
            l.port,
            latency::live_figures(&latency::summary_of(&gained))
        ));
    }
}

/// What a run found beyond the tester's report and the port's counters.
struct Findings {
    /// Every packet the port dropped, by reason.
    drops_by_reason: Vec<DropCount>,
    /// One-way latency per port (with `--latency`).
    latency: Option<Vec<LatencySummary>>,
    /// Where the pool's buffers were after the port stopped.
    census: CensusReport,
}

fn print_report(
    args: &GenArgs,
    r: &TesterReport,
    stats: &sluice::port::PortStats,
    secs: f64,
    clean: Option<bool>,
    findings: Findings,
) {
    let Findings {
        drops_by_reason,
        latency,
        census,
    } = findings;
    let tx_packets = stats.tx_packets;
    if args.json {
        let j = GenReport {
            kind: "gen",
            port: args.port.clone(),
            duration_s: secs,
            sent: r.sent,
            received: r.received,
            lost: r.lost,
            reordered: r.reordered,
            duplicates: r.duplicates,
            corrupt: r.corrupt,
            foreign: r.foreign,
            bytes_sent: r.bytes_sent,
            tx_mpps: tx_packets as f64 / secs / 1e6,
            tx_errors: stats.tx_errors,
            drops_by_reason,
            clean,
            latency,
            census,
        };
        emit_json(&j, "sluice gen", "the report");
        return;
    }
    emit(&format!(
        "port {}: sent {} frames in {:.2} s ({:.2} Mpps)",
        args.port,
        tx_packets,
        secs,
        tx_packets as f64 / secs / 1e6
    ));
    if stats.tx_errors != 0 {
        emit(&format!(
            "warning: {} frames could not be sent (tx_errors: the port refused them)",
            stats.tx_errors
        ));
    }
    print_drops_by_reason(&drops_by_reason);
    emit(&format!("tester: {r}"));
    for line in latency::lines(latency.as_deref().unwrap_or_default()) {
        emit(&line);
    }
    match clean {
        Some(true) => emit("clean: nothing lost, reordered, duplicated or corrupted"),
        Some(false) => emit("NOT CLEAN"),
        None => {}
    }
    census.print();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        gen_args: GenArgs,
    }

    fn parse(args: &[&str]) -> GenArgs {
        Cli::try_parse_from(std::iter::once("gen").chain(args.iter().copied()))
            .unwrap()
            .gen_args
    }

    #[test]
    fn tester_keys_are_checked_as_in_a_spec() {
        let a = parse(&[
            "--port", "null", "--gen", "tcp6", "--flows", "4", "--size", "imix",
        ]);
        let c = a.tester_config().unwrap();
        assert_eq!((c.gen_name(), c.flows), ("tcp6", 4));
        let a = parse(&["--port", "null", "--flows", "0"]);
        assert_eq!(
            a.tester_config().unwrap_err(),
            "--flows 0: not a number in 1..=1048576"
        );
        let a = parse(&["--port", "null", "--size", "50"]);
        assert_eq!(
            a.tester_config().unwrap_err(),
            "--size 50: not a frame size in 60..=9000 or imix"
        );
    }

    #[test]
    fn gen_on_a_null_port_sends_and_returns_every_buffer() {
        let a = parse(&[
            "--port",
            "null",
            "--duration",
            "0.05",
            "--count",
            "1000",
            "--no-telemetry",
        ]);
        assert_eq!(run(&a), Ok(true));
    }

    #[test]
    fn gen_on_a_soft_port_makes_the_port_tester_with_its_own_options() {
        // The port spec gives no tester keys: the tester `gen` makes from
        // `--count` is the one the port attaches to, and both streams
        // (the port's Rx traffic, gen's Tx traffic) come home clean.
        let spec = "soft:tester=gen_unit_soft_ok,device=inline";
        let a = parse(&[
            "--port",
            spec,
            "--count",
            "20",
            "--check",
            "--duration",
            "0.5",
            "--no-telemetry",
        ]);
        assert_eq!(run(&a), Ok(true));
    }

    #[test]
    fn gen_on_a_soft_port_whose_spec_gives_other_tester_keys_is_an_error_naming_both() {
        let spec = "soft:tester=gen_unit_soft,count=10,device=inline";
        let a = parse(&["--port", spec, "--count", "20", "--no-telemetry"]);
        let err = run(&a).unwrap_err();
        assert!(
            err.contains("tester 'gen_unit_soft' exists with gen=udp,flows=16,size=64,count=20")
                && err.contains("cannot attach with gen=udp,flows=16,size=64,count=10"),
            "{err}"
        );
    }
}
