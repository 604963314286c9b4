//! Launching lcores: their CPUs, the threads under `std::thread::scope`,
//! the main thread's loop of stats lines while they run, and what ends
//! them (the duration, a signal, a failure).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use sluice::tester::Tester;

use super::drain::drain;
use super::io::lcore::{LcoreCycles, LiveLcore, Window};
use super::options::{FwdArgs, RunOptions};
use super::ports::all_on_testers;
use super::signal::interrupted;
use super::stats::{Live, Sources};
use super::window::Snapshot;

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
    /// Ends the run before its duration once true (with a warm-up, looked
    /// at only once the window is open): runs that must reach a packet
    /// count however slow the machine is.
    pub enough: Option<&'a dyn Fn() -> bool>,
}

/// The counters at a measured window's open and close.
pub(crate) type WindowEnds = (Snapshot, Snapshot);

/// A warm-up before the measured window: its length in seconds, the
/// lcores' [`Window`] flag and, per port, whether its device runs inline.
pub(crate) type Warmup<'a> = (f64, &'a AtomicU8, &'a [bool]);

/// Runs one forwarding thread per element of `per_lcore` (each pinned to
/// its CPU from [`lcore_cpus`], named `fwd-I`, given `live[I]` for its live
/// counters: see [`LiveLcore`]), prints live stats from
/// `src` until the duration is over or a signal came (then the drain, see
/// [`main_loop`]), sets `stop` and joins them. Each lcore's cycles, the
/// seconds from start to stop, and whether the drain accounted for every
/// frame (`None` unless every port is on a tester).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_lcores<T: Send>(
    per_lcore: Vec<T>,
    threaded: bool,
    src: &Sources<'_>,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
    stop: &AtomicBool,
    live: &[LiveLcore],
    body: impl Fn(Option<usize>, T, &LiveLcore) -> Result<LcoreCycles, String> + Sync,
) -> Result<(Vec<LcoreCycles>, f64, Option<bool>), String> {
    // Every port on a tester: the drain can wait for the counts to add up.
    let accountable = !testers.is_empty() && all_on_testers(&args.all_specs());
    let control = Control {
        stop,
        accountable,
        warmup: None,
        enough: None,
    };
    let (lcores, secs, _, drain_accounted) =
        run_lcores_with(per_lcore, threaded, src, args, testers, control, live, body)?;
    Ok((lcores, secs, drain_accounted))
}

/// What [`run_lcores_with`] returns: each lcore's cycles, the seconds from
/// start to stop, the counters at a measured window's ends, and whether the
/// drain accounted for every frame (when it could: see [`main_loop`]).
pub(crate) type LcoresRan = (Vec<LcoreCycles>, f64, Option<WindowEnds>, Option<bool>);

/// [`run_lcores`] under `control`: with a warm-up, also the counters at the
/// measured window's open and close. Lcores beyond `live`'s length get
/// counters nobody reads.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_lcores_with<T: Send>(
    per_lcore: Vec<T>,
    threaded: bool,
    src: &Sources<'_>,
    args: &FwdArgs,
    testers: &[(String, Arc<Tester>)],
    control: Control<'_>,
    live: &[LiveLcore],
    body: impl Fn(Option<usize>, T, &LiveLcore) -> Result<LcoreCycles, String> + Sync,
) -> Result<LcoresRan, String> {
    let stop = control.stop;
    let unread: Vec<LiveLcore> = (live.len()..per_lcore.len())
        .map(|_| LiveLcore::default())
        .collect();
    let live: Vec<&LiveLcore> = live.iter().chain(&unread).collect();
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
                let live = live[i];
                std::thread::Builder::new()
                    .name(format!("fwd-{i}"))
                    .spawn_scoped(scope, move || body(cpu, work, live))
            })
            .collect();
        let live = Live::new(src, args.run.json);
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
            ends = main_loop(
                live,
                src,
                &args.run,
                testers,
                control,
                &lcore_ended,
                Extra {
                    enough: control.enough,
                    after_line: None,
                },
            );
        }
        stop.store(true, Ordering::Relaxed);
        let secs = started.elapsed().as_secs_f64();
        let results: Vec<Result<LcoreCycles, String>> = handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .map_err(|p| format!("forwarding lcore panicked: {}", panic_message(&*p)))
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

/// What a command adds to [`main_loop`].
#[derive(Default)]
pub(crate) struct Extra<'a> {
    /// Ends the run before its duration once true (`sluice dist
    /// --packets`); the loop then looks every 10 ms instead of every 50.
    pub enough: Option<&'a dyn Fn() -> bool>,
    /// Called after each live stats line, with its time (more lines).
    pub after_line: Option<&'a mut dyn FnMut(Instant)>,
}

/// Stats lines until the duration is over (never when it is infinite), a
/// signal came (SIGINT, SIGTERM) or `extra` says enough; then the drain
/// ([`drain`]), which waits for the testers' counts to add up when
/// `control.accountable`. With a
/// warm-up, the duration starts after it, and the counters at the window's
/// open and close are returned; with `control.accountable`, whether the
/// drain ended with every frame accounted for. A failure — an lcore ended
/// (`lcore_ended`) or a port's device failed — ends the loop at once,
/// without the drain.
pub(crate) fn main_loop(
    mut live: Live,
    src: &Sources<'_>,
    run: &RunOptions,
    testers: &[(String, Arc<Tester>)],
    control: Control<'_>,
    lcore_ended: &dyn Fn() -> bool,
    mut extra: Extra<'_>,
) -> (Option<WindowEnds>, Option<bool>) {
    let start = live.start();
    let warmup = control.warmup;
    let warm = Duration::from_secs_f64(warmup.map_or(0.0, |w| w.0));
    // An infinite (or absurdly long) duration has no end but a signal;
    // with a warm-up, the end moves to the window's open plus the duration.
    let length = Duration::try_from_secs_f64(run.duration).ok();
    let mut end = length.and_then(|d| start.checked_add(warm + d));
    let period = Duration::from_secs_f64(run.stats_period);
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
        // With a warm-up, enough packets end the window, not the warm-up.
        let enough = (warmup.is_none() || open.is_some()) && extra.enough.is_some_and(|f| f());
        if end.is_some_and(|e| now >= e) || enough || interrupted() {
            if let (Some((_, flag, inline)), Some(open)) = (warmup, open.take()) {
                flag.store(Window::CLOSED, Ordering::Relaxed);
                snapshots = Some((open, Snapshot::take(src, inline)));
            }
            break;
        }
        // Short sleeps, so a signal (and the warm-up's end, and enough
        // packets) is seen soon.
        let look = if extra.enough.is_some() { 10 } else { 50 };
        let mut wake = next.min(now + Duration::from_millis(look));
        if let Some(e) = end {
            wake = wake.min(e);
        }
        if open.is_none() && warmup.is_some() {
            wake = wake.min(start + warm);
        }
        std::thread::sleep(wake.saturating_duration_since(now));
        let now = Instant::now();
        if now >= next {
            live.line(src);
            if let Some(line) = extra.after_line.as_mut() {
                line(now);
            }
            next += period;
        }
    }
    (snapshots, drain(src, testers, control.accountable))
}

/// Pins the calling (main) thread to the first of `cpus` when there are
/// more than `min` (a warning naming `command` on failure).
pub(crate) fn pin_main_thread(cpus: &[usize], min: usize, command: &str) {
    if cpus.len() > min
        && let Err(e) = sluice::lcore::pin_current_thread(cpus[0])
    {
        eprintln!("sluice {command}: warning: main thread not pinned: {e}");
    }
}

pub use sluice_bench::{Stall, panic_message};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcores_avoid_the_main_and_the_device_thread_cpus() {
        assert_eq!(lcore_cpus(&[0], false), [0]);
        assert_eq!(lcore_cpus(&[0], true), [0]);
        assert_eq!(lcore_cpus(&[0, 1], false), [1, 0]);
        assert_eq!(lcore_cpus(&[0, 1], true), [0]);
        assert_eq!(lcore_cpus(&[2, 3, 5, 7], false), [3, 5, 7, 2]);
        assert_eq!(lcore_cpus(&[2, 3, 5, 7], true), [5, 7, 2]);
    }
}
