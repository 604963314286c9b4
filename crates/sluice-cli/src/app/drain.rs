//! The drain at the end of a run: the testers pause and the pipeline runs
//! on until what they sent is home, so their reports see every frame.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::tester::Tester;

use super::stats::{PortSample, Sources};

/// Longest the drain after `--duration` may take.
const DRAIN_MAX: Duration = Duration::from_millis(300);
/// The drain ends after this many looks, `DRAIN_STEP` apart, saw nothing move.
const DRAIN_IDLE_LOOKS: u32 = 4;
const DRAIN_STEP: Duration = Duration::from_millis(5);
/// Longest the drain may see nothing move when every port is on a tester:
/// it ends as soon as their counts add up, so this bounds only a real loss
/// (a slow machine still moves the frames home, only later).
const DRAIN_MAX_ACCOUNTED: Duration = Duration::from_secs(2);
/// Longest the drain may take when every port is on a tester, frames
/// moving or not: a bound for a pipeline that never settles.
const DRAIN_MAX_MOVING: Duration = Duration::from_secs(60);

/// With `testers`, the drain: they are paused and the pipeline runs on
/// until nothing moved for a few looks, at most [`DRAIN_MAX`] — or, when
/// every frame starts and ends at a tester (`accountable`), until every
/// frame they sent was received (by its tester, or by another one as
/// foreign) or counted as a drop (refused by a Tx queue, missed, an Rx or
/// Tx error, or dropped by the application), or nothing moved for
/// [`DRAIN_MAX_ACCOUNTED`] (a descheduled thread then cannot end the drain
/// early, nor a loaded machine), at most [`DRAIN_MAX_MOVING`]. With
/// `accountable`, whether the drain ended with every frame accounted for;
/// `None` otherwise, and when there is no tester.
pub(crate) fn drain(
    src: &Sources<'_>,
    testers: &[(String, Arc<Tester>)],
    accountable: bool,
) -> Option<bool> {
    if testers.is_empty() {
        return None;
    }
    for (_, t) in testers {
        t.pause(true);
    }
    let start = Instant::now();
    let mut moved_at = start;
    let out_of_time = |now: Instant, moved_at: Instant| {
        if accountable {
            now - moved_at >= DRAIN_MAX_ACCOUNTED || now - start >= DRAIN_MAX_MOVING
        } else {
            now - start >= DRAIN_MAX
        }
    };
    let mut last = src.moved();
    let mut idle = 0;
    let added_up = || {
        // Every frame starts at a tester, so a frame one tester counts as
        // foreign is another tester's frame that arrived.
        let (sent, received) = testers.iter().fold((0, 0), |(s, r), (_, t)| {
            let rep = t.report();
            (s + rep.sent, r + rep.received + rep.foreign)
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
    while !out_of_time(Instant::now(), moved_at) {
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
            moved_at = Instant::now();
        }
    }
    if accountable && !accounted {
        accounted = added_up();
    }
    accountable.then_some(accounted)
}
