//! Progress of long work (a tuning sweep, `sluice bench all`) on stderr:
//! on a terminal, a bar with the steps done and the time left (from the
//! time each step took so far); otherwise one plain line per step,
//! `[3/24] tune: point rxd 512 txd 512 cache 256 burst 32: ...`.
//!
//! Stdout carries the results (tables, `--json` objects) and gets nothing
//! from here. While a bar is drawn, every line of [`crate::app::output::emit`]
//! (and the benchmark harness's notes on stderr) is written with the progress bar
//! cleared, then the progress bar is drawn again, so lines and progress bar never mix.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{HumanDuration, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// How often a bar redraws between steps, so its elapsed time and time left
/// stay current while a long step runs.
const TICK: Duration = Duration::from_millis(500);

/// The progress bar on the terminal now, if any: lines written meanwhile clear it
/// first ([`write_beside_bar`]).
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Progress of a known number of steps.
pub struct Progress {
    /// Steps in all.
    total: usize,
    /// Steps done.
    done: usize,
    /// What the work is, in front of each plain line (`tune`, `bench`).
    label: String,
    /// The progress bar, on a terminal; `None` writes plain lines.
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Progress of `total_steps` steps of the work named `label`: a bar when
    /// stderr is a terminal, plain lines otherwise.
    pub fn new(total_steps: usize, label: &str) -> Progress {
        Progress::with_bar(total_steps, label, std::io::stderr().is_terminal())
    }

    /// Progress that draws a bar when `bar` is true, else writes plain
    /// lines.
    fn with_bar(total_steps: usize, label: &str, bar: bool) -> Progress {
        let bar = bar.then(|| {
            let bar = ProgressBar::with_draw_target(
                Some(total_steps as u64),
                ProgressDrawTarget::stderr(),
            )
            .with_style(style())
            .with_prefix(label.to_owned());
            bar.enable_steady_tick(TICK);
            sluice_bench::wrap_lines(write_beside_bar);
            *lock_bar() = Some(bar.clone());
            bar
        });
        Progress {
            total: total_steps,
            done: 0,
            label: label.to_owned(),
            bar,
        }
    }

    /// Says what the step under way is (on the progress bar; a plain line waits for
    /// the step's end).
    pub fn working_on(&self, msg: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(msg.to_owned());
        }
    }

    /// One step is done; `msg` says which (and how it went).
    pub fn step(&mut self, msg: &str) {
        self.done += 1;
        self.total = self.total.max(self.done);
        match &self.bar {
            Some(bar) => {
                bar.set_length(self.total as u64);
                bar.set_message(msg.to_owned());
                bar.inc(1);
            }
            None => sluice_bench::emit_err(&self.line(msg)),
        }
    }

    /// Sets the number of steps in all, when the work turns out longer or
    /// shorter than planned (never below the steps done).
    pub fn set_total(&mut self, total_steps: usize) {
        self.total = total_steps.max(self.done);
        if let Some(bar) = &self.bar {
            bar.set_length(self.total as u64);
        }
    }

    /// The plain line of the step just done.
    fn line(&self, msg: &str) -> String {
        format!("[{}/{}] {}: {msg}", self.done, self.total, self.label)
    }

    /// Ends the progress: the progress bar is cleared (the results follow on stdout).
    pub fn finish(self) {
        // Drop clears the progress bar.
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            // One bar at a time: a command draws one progress.
            *lock_bar() = None;
            bar.finish_and_clear();
        }
    }
}

/// The progress bar's look: `tune [=====>    ] 3/24, 12s, 1m 10s left: MESSAGE`.
fn style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len}, {elapsed}, {left}: {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
        .with_key("left", time_left)
}

/// The time left, once a step has shown how long steps take.
fn time_left(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = if state.pos() == 0 {
        write!(w, "time left unknown")
    } else {
        write!(w, "{} left", HumanDuration(state.eta()))
    };
}

/// The current bar, even if a thread panicked holding the lock (the progress bar is
/// only ever swapped whole).
fn lock_bar() -> std::sync::MutexGuard<'static, Option<ProgressBar>> {
    BAR.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes a line (`write`) with the current bar cleared, then draws the progress bar
/// again.
fn write_beside_bar(write: &mut dyn FnMut()) {
    // Not holding the lock while writing: a line may be long to write (a
    // slow terminal) and a bar may be ending meanwhile.
    let bar = lock_bar().clone();
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_count_the_steps_against_the_total() {
        let mut p = Progress::with_bar(3, "tune", false);
        p.done = 1;
        assert_eq!(p.line("rxd 512"), "[1/3] tune: rxd 512");
        p.step("second");
        assert_eq!((p.done, p.total), (2, 3));
        p.set_total(1);
        assert_eq!(p.total, 2, "never below the steps done");
        p.step("third");
        assert_eq!(p.line("x"), "[3/3] tune: x");
        p.finish();
    }

    #[test]
    fn more_steps_than_planned_raise_the_total() {
        let mut p = Progress::with_bar(1, "bench", false);
        p.step("a");
        p.step("b");
        assert_eq!(p.line("b"), "[2/2] bench: b");
    }
}
