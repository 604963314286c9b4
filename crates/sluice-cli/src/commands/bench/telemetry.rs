//! `sluice bench telemetry`: what reading a running dataplane costs its
//! forwarding.
//!
//! io forwarding between two soft ports on one core, as `sluice bench
//! fwd`'s `soft io (inline)` case (64-byte UDP frames over 1024 flows,
//! burst 32, the inline device's cycles excluded), with the ports, the pool
//! and the lcore served on a telemetry socket of their own, as `sluice
//! fwd` serves them (`app::observe`). Two cases on the same ports, in
//! [`ROUNDS`] interleaved rounds (`sluice_bench::interleave`):
//! in one a client thread asks the socket [`POLL_HZ`] times a second
//! ([`COMMANDS`] in turn), in the other nobody asks. The forwarding lcore
//! only bumps its single-writer counters either way; whatever reading
//! costs it shows up as the cycles the telemetry and client threads take
//! from it (when they share its CPU) and as cache lines pulled away from
//! it.
//!
//! Cycles per packet are medians over rounds; the polled / not polled
//! ratio is the median of the per-round ratios (a change in the machine's
//! load moves both sides of a ratio alike). A polled slice forwards until
//! at least one reply has come in, so that no polled slice goes without a
//! request; the number of replies and their rate over the polled slices
//! are reported.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice::mbuf::Burst;
use sluice::port::{Port, PortCounters};
use sluice_bench::interleave;
use sluice_bench::stats::{Spread, ratios};
use sluice_telemetry::Client;

use super::fwd::{BURST, bench_pool, crossed_streams, device_cycles, forward, soft_spec};
use super::fwd_l3::{Slices, Timed};
use super::{BenchResult, Ctx, Selection, on_lcore};
use crate::app::io::engine::Io;
use crate::app::io::lcore::{LcoreCycles, LiveLcore, Publisher};
use crate::app::observe::drops::DropSources;
use crate::app::observe::{Observer, Watched};
use crate::app::options::ObserveOptions;

/// The row of the rounds nobody reads the socket in.
pub const QUIET_CASE: &str = "io, telemetry not polled";
/// The row of the rounds a client polls the socket in.
pub const POLLED_CASE: &str = "io, telemetry polled 100/s";
/// The row of the ratio (`--json`).
pub const RATIO_CASE: &str = "polled / not polled";
/// Timed rounds (each case forwards one slice per round).
pub const ROUNDS: usize = 16;
/// Requests a second while polling.
pub const POLL_HZ: u64 = 100;
/// What the client asks, in turn.
pub const COMMANDS: [&str; 3] = ["/ethdev/stats,0", "/ethdev/xstats,0", "/sluice/snapshot"];
/// Packets per case by default.
const DEFAULT_OPS: u64 = 1 << 25;
/// Longest a polled slice forwards past its packets waiting for its first
/// reply, and longest the lcore waits for a request under way to end: a
/// client that takes longer has failed.
const REPLY_WAIT: Duration = Duration::from_secs(6);

/// What the two cases measured.
#[derive(Debug)]
pub struct TelemetryPair {
    /// Not polled (medians over rounds).
    pub quiet: BenchResult,
    /// Polled (medians over rounds).
    pub polled: BenchResult,
    /// The per-round polled / not polled cycles per packet.
    pub ratio: Spread,
    /// Replies the client got during the polled slices.
    pub replies: u64,
    /// Seconds of polled slices.
    pub polled_s: f64,
}

impl TelemetryPair {
    /// Replies a second over the polled slices.
    pub fn reply_rate(&self) -> f64 {
        if self.polled_s > 0.0 {
            self.replies as f64 / self.polled_s
        } else {
            0.0
        }
    }

    /// The line giving the ratio and the polling.
    pub fn note(&self) -> String {
        format!(
            "polled / not polled cycles per packet, median of {ROUNDS} interleaved rounds: \
             {:.3} (min-max {:.3}-{:.3}); {} replies over {:.2} s of polled forwarding \
             ({:.0}/s)",
            self.ratio.median,
            self.ratio.min,
            self.ratio.max,
            self.replies,
            self.polled_s,
            self.reply_rate()
        )
    }

    /// The ratio as one JSON row.
    pub fn ratio_row(&self) -> RatioRow {
        RatioRow {
            bench: "telemetry",
            case: RATIO_CASE,
            cycles_ratio: self.ratio.median,
            cycles_ratio_min: self.ratio.min,
            cycles_ratio_max: self.ratio.max,
            mpps_ratio: if self.quiet.mops > 0.0 {
                self.polled.mops / self.quiet.mops
            } else {
                0.0
            },
            rounds: ROUNDS,
            replies: self.replies,
            replies_per_s: self.reply_rate(),
        }
    }
}

/// The polled / not polled comparison as one JSON object.
#[derive(Debug, Serialize)]
pub struct RatioRow {
    /// `telemetry`.
    pub bench: &'static str,
    /// [`RATIO_CASE`].
    pub case: &'static str,
    /// Polled / not polled cycles per packet: the median of the per-round
    /// ratios.
    pub cycles_ratio: f64,
    /// The smallest per-round ratio.
    pub cycles_ratio_min: f64,
    /// The largest per-round ratio.
    pub cycles_ratio_max: f64,
    /// Polled / not polled Mpps over all rounds.
    pub mpps_ratio: f64,
    /// Rounds.
    pub rounds: usize,
    /// Replies the client got during the polled slices.
    pub replies: u64,
    /// Replies a second over the polled slices.
    pub replies_per_s: f64,
}

/// Runs the telemetry cases (the same in every selection: the part is one
/// comparison).
pub fn run(ctx: &mut Ctx, _sel: Selection) {
    let ops = ctx.ops(DEFAULT_OPS);
    let notes = vec![format!(
        "io forwarding between two soft ports on one core (64-byte UDP, burst {BURST}, the \
         inline device's cycles excluded), its ports, pool and lcore on a telemetry socket; \
         in {ROUNDS} interleaved rounds a client asks {} in turn {POLL_HZ} times a second, or \
         nobody asks; {ops} packets per case; one op = one packet forwarded.",
        COMMANDS.join(", ")
    )];
    ctx.section("telemetry (reading counters while forwarding)", &notes);
    ctx.note(&super::fwd_vector::path_note());
    match measure(ctx.main_cpu(), ops) {
        Ok(pair) => {
            ctx.note(&pair.note());
            super::note_contention(ctx);
            ctx.report(QUIET_CASE, Ok(pair.quiet.clone()));
            ctx.report(POLLED_CASE, Ok(pair.polled.clone()));
            ctx.json_row(RATIO_CASE, &pair.ratio_row());
        }
        Err(e) => ctx.report(POLLED_CASE, Err(e)),
    }
}

/// Measures both cases on `cpu`, `ops` packets per case in all.
pub fn measure(cpu: usize, ops: u64) -> Result<TelemetryPair, String> {
    let pool = bench_pool()?;
    let spec = soft_spec(&super::unique_name("bench_telemetry"));
    let mut ports = Vec::new();
    for i in 0..2 {
        let config = sluice::port::PortConfig::new(Some(pool.clone()))
            .port_id(i)
            .nb_rxd(super::fwd::DESC)
            .nb_txd(super::fwd::DESC);
        ports.push(sluice::driver::open(&spec, config).map_err(|e| e.to_string())?);
    }
    let file_prefix = format!(
        "sluice-bench-{}-{}",
        std::process::id(),
        super::unique_name("telemetry")
    );
    let live = LiveLcore::many(1);
    let drops = DropSources::new(ports.iter().map(Port::counters).collect());
    let watched = Watched::new(
        "bench",
        &file_prefix,
        &ports,
        &[&pool],
        Arc::clone(&live),
        &[],
        drops,
    );
    let options = ObserveOptions {
        file_prefix,
        command: "bench",
        ..ObserveOptions::serving()
    };
    let observer = Observer::start(&options, watched)?;
    let path = observer
        .telemetry_path()
        .ok_or("no telemetry socket served")?
        .to_path_buf();
    let poller = Poller::start(path)?;

    let slice = (ops / ROUNDS as u64).max(1024);
    let lcore_pool = pool.clone();
    let control = Arc::clone(&poller.control);
    let result = on_lcore(cpu, move || {
        live[0].start(Some(cpu));
        let r = measure_rounds(&mut ports, &control, &live[0], slice);
        ports.iter_mut().for_each(Port::stop);
        drop(ports);
        lcore_pool.flush_local_cache();
        r
    });
    let failure = poller.stop();
    drop(observer);
    let (quiet, polled, replies) = result?;
    if let Some(e) = failure {
        return Err(format!("telemetry client: {e}"));
    }
    let tsc_hz = sluice::tsc::tsc_hz().max(1);
    let named = |slices: &Slices, name: &str| {
        let mut r = slices.result(&pool, name)?;
        r.bench = "telemetry";
        Ok::<_, String>(r)
    };
    Ok(TelemetryPair {
        quiet: named(&quiet, QUIET_CASE)?,
        polled: named(&polled, POLLED_CASE)?,
        ratio: Spread::of(&ratios(&polled.per_pkt, &quiet.per_pkt)),
        replies,
        polled_s: polled.cycles as f64 / tsc_hz as f64,
    })
}

/// Runs the rounds on the started ports: case 0 not polled, case 1 polled.
/// Returns both cases' slices and the replies seen during polled slices.
/// The lcore's live counters (`live`) go out after each slice, outside the
/// timed region.
fn measure_rounds(
    ports: &mut [Port],
    control: &PollControl,
    live: &LiveLcore,
    slice: u64,
) -> Result<(Slices, Slices, u64), String> {
    for port in ports.iter_mut() {
        port.start().map_err(|e| e.to_string())?;
    }
    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
    let (mut quiet, mut polled) = (Slices::default(), Slices::default());
    let mut replies = 0;
    let mut publisher = Publisher::new(live);
    let mut totals = LcoreCycles::default();
    let mut count = |(moved, cycles, _): Timed| {
        totals.busy_cycles += cycles;
        totals.total_cycles += cycles;
        totals.packets += moved;
        publisher.publish(&totals);
    };
    let warm = (slice / 2).max(1024);
    count(forward_slice(ports, &counters, None, warm)?);
    interleave(ROUNDS, 2, |_, case| {
        if case == 0 {
            let t = forward_slice(ports, &counters, None, slice)?;
            count(t);
            quiet.add(t);
        } else {
            let before = control.replies.load(Ordering::SeqCst);
            control.resume();
            let r = forward_slice(ports, &counters, Some(control), slice);
            let paused = control.pause();
            replies += control.replies.load(Ordering::SeqCst) - before;
            let t = r?;
            paused?;
            count(t);
            polled.add(t);
        }
        Ok::<_, String>(())
    })?;
    Ok((quiet, polled, replies))
}

/// io forwarding on both ports until `n` packets have gone through (and,
/// when `polled`, until a reply came in meanwhile), timed.
fn forward_slice(
    ports: &mut [Port],
    counters: &[Arc<PortCounters>],
    polled: Option<&PollControl>,
    n: u64,
) -> Result<Timed, String> {
    let mut streams = crossed_streams(ports)?;
    let mut burst: Burst<64> = Burst::new();
    let before = polled.map(|c| c.replies.load(Ordering::Relaxed));
    let dev0 = device_cycles(counters);
    let start = sluice::tsc::rdtsc_ordered();
    let mut moved = forward(Io, &mut streams, &mut burst, n)?;
    if let (Some(control), Some(before)) = (polled, before) {
        let waited = Instant::now();
        while control.replies.load(Ordering::Relaxed) == before {
            if let Some(e) = control.failure.get() {
                return Err(format!("telemetry client: {e}"));
            }
            if waited.elapsed() > REPLY_WAIT {
                return Err(format!(
                    "no telemetry reply within {} s",
                    REPLY_WAIT.as_secs()
                ));
            }
            moved += forward(Io, &mut streams, &mut burst, BURST as u64)?;
        }
    }
    let end = sluice::tsc::rdtsc_ordered();
    let device = device_cycles(counters).saturating_sub(dev0);
    Ok((moved, end.wrapping_sub(start), device))
}

/// What the lcore and the client thread share.
#[derive(Default)]
struct PollControl {
    /// The client asks while this is set.
    on: AtomicBool,
    /// The client is between deciding to ask and having its reply.
    asking: AtomicBool,
    /// The client ends.
    done: AtomicBool,
    /// Replies received.
    replies: AtomicU64,
    /// Requests sent, for the command asked next.
    sent: AtomicUsize,
    /// Why the client stopped early.
    failure: OnceLock<String>,
    /// The client thread, to wake it.
    thread: OnceLock<std::thread::Thread>,
}

impl PollControl {
    /// Lets the client ask.
    fn resume(&self) {
        self.on.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Stops the client asking and waits for a request under way to end.
    fn pause(&self) -> Result<(), String> {
        self.on.store(false, Ordering::SeqCst);
        let waited = Instant::now();
        while self.asking.load(Ordering::SeqCst) {
            if waited.elapsed() > REPLY_WAIT {
                return Err(format!(
                    "a telemetry request took over {} s",
                    REPLY_WAIT.as_secs()
                ));
            }
            std::hint::spin_loop();
        }
        Ok(())
    }
}

/// The client thread.
struct Poller {
    control: Arc<PollControl>,
    thread: JoinHandle<()>,
}

impl Poller {
    /// Connects a client to the socket at `path` on a thread of its own,
    /// asking nothing until resumed.
    fn start(path: PathBuf) -> Result<Poller, String> {
        let mut client = Client::connect_path(&path).map_err(|e| e.to_string())?;
        let control = Arc::new(PollControl::default());
        let shared = Arc::clone(&control);
        let thread = std::thread::Builder::new()
            .name("telemetry-poll".into())
            .spawn(move || poll_loop(&mut client, &shared))
            .map_err(|e| e.to_string())?;
        let _ = control.thread.set(thread.thread().clone());
        Ok(Poller { control, thread })
    }

    /// Ends the client thread; why it failed, if it did.
    fn stop(self) -> Option<String> {
        self.control.done.store(true, Ordering::SeqCst);
        self.thread.thread().unpark();
        if let Err(p) = self.thread.join() {
            return Some(format!("panicked: {}", sluice_bench::panic_message(&*p)));
        }
        self.control.failure.get().cloned()
    }
}

/// Asks [`COMMANDS`] in turn, one every 1/[`POLL_HZ`] s while `control`
/// says so, parked otherwise; ends on `done` or at the first failed request.
fn poll_loop(client: &mut Client, control: &PollControl) {
    let interval = Duration::from_nanos(1_000_000_000 / POLL_HZ);
    // Only this thread parks here, and `resume` and `stop` unpark it after
    // setting what it checks, so no wake-up is lost; a spurious one just
    // goes round again.
    while !control.done.load(Ordering::SeqCst) {
        control.asking.store(true, Ordering::SeqCst);
        if !control.on.load(Ordering::SeqCst) {
            control.asking.store(false, Ordering::SeqCst);
            std::thread::park();
            continue;
        }
        let next = Instant::now() + interval;
        let k = control.sent.fetch_add(1, Ordering::Relaxed);
        let cmd = COMMANDS[k % COMMANDS.len()];
        let reply = client.command(cmd);
        control.asking.store(false, Ordering::SeqCst);
        match reply {
            Ok(_) => {
                control.replies.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                let _ = control.failure.set(format!("{cmd}: {e}"));
                return;
            }
        }
        // Paced, not synchronised: the lcore never waits on this sleep.
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_cases_forward_the_polled_one_gets_replies_and_every_buffer_returns() {
        let cpu = sluice::lcore::available_cpus()[0];
        let r = measure(cpu, 8 * 2048).unwrap();
        for row in [&r.quiet, &r.polled] {
            assert!(row.ops >= 8 * 2048, "{}: {}", row.case, row.ops);
            assert!(row.cycles_per_op > 0.0 && row.mops > 0.0);
            assert_eq!(row.bench, "telemetry");
        }
        assert_eq!(
            (r.quiet.case.as_str(), r.polled.case.as_str()),
            (QUIET_CASE, POLLED_CASE)
        );
        // Every round has a polled slice, and each saw a reply.
        assert!(r.replies >= ROUNDS as u64, "{}", r.replies);
        assert!(r.ratio.min <= r.ratio.median && r.ratio.median <= r.ratio.max);
        assert!(r.ratio.min > 0.0);
    }
}
