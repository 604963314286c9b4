//! Running timed work on pinned lcores: start barriers, stall detection,
//! worker results and panics.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sluice::lcore;

/// A one-shot barrier for worker threads: `wait` spins until all `n` arrived,
/// so the workers leave it within a few hundred cycles of each other (a
/// sleeping barrier would add the wake-up latency of the last one).
pub struct SpinBarrier {
    arrived: AtomicUsize,
    n: usize,
}

impl SpinBarrier {
    /// A barrier for `n` threads.
    pub fn new(n: usize) -> Self {
        SpinBarrier {
            arrived: AtomicUsize::new(0),
            n,
        }
    }

    /// Waits for all threads; `Err` after 10 s (a worker died before arriving).
    pub fn wait(&self) -> Result<(), String> {
        // AcqRel/Acquire: whatever a thread did before arriving is visible to the
        // others once they leave.
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let start = Instant::now();
        let mut spins = 0u32;
        while self.arrived.load(Ordering::Acquire) < self.n {
            spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && start.elapsed() > Duration::from_secs(10) {
                return Err("the other worker did not reach the start barrier in 10 s".into());
            }
        }
        Ok(())
    }
}

/// Detects a worker that can make no progress (its partner died): count failed
/// attempts, and every 2^20 of them in a row look at the clock.
pub struct Stall {
    fails: u64,
    total: u64,
    since: Option<Instant>,
    who: &'static str,
}

impl Stall {
    /// A detector for the worker named `who`.
    pub fn new(who: &'static str) -> Self {
        Stall {
            fails: 0,
            total: 0,
            since: None,
            who,
        }
    }

    /// Call after an attempt that moved nothing; spins briefly. `Err` once
    /// nothing has moved for 10 s.
    #[inline(always)]
    pub fn failed(&mut self) -> Result<(), String> {
        self.fails += 1;
        self.total += 1;
        if self.fails & 0xF_FFFF == 0 {
            self.check()
        } else {
            spin_loop();
            Ok(())
        }
    }

    /// Failed attempts since the last call (or since creation); resets the count.
    pub fn take_total(&mut self) -> u64 {
        std::mem::take(&mut self.total)
    }

    /// Call after an attempt that moved something.
    #[inline(always)]
    pub fn progressed(&mut self) {
        if self.fails != 0 {
            self.fails = 0;
            self.since = None;
        }
    }

    #[cold]
    fn check(&mut self) -> Result<(), String> {
        let now = Instant::now();
        match self.since {
            None => {
                self.since = Some(now);
                Ok(())
            }
            Some(s) if now.duration_since(s) > Duration::from_secs(10) => Err(format!(
                "the {} made no progress for 10 s (its partner stopped?)",
                self.who
            )),
            Some(_) => Ok(()),
        }
    }
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_owned()
    }
}

/// Runs `f` on an lcore pinned to `cpu` and returns its result.
pub fn on_lcore<T, F>(cpu: usize, f: F) -> Result<T, String>
where
    F: FnOnce() -> Result<T, String> + Send + 'static,
    T: Send + 'static,
{
    let h = lcore::launch(Some(cpu), f).map_err(|e| e.to_string())?;
    h.join()
        .map_err(|p| format!("worker panicked: {}", panic_message(&*p)))?
}

/// A boxed worker for [`on_lcores`].
pub type Worker<T> = Box<dyn FnOnce() -> Result<T, String> + Send>;

/// Runs each `(cpu, worker)` on its own pinned lcore, all started together
/// (all or nothing), and returns their results in order.
pub fn on_lcores<T: Send + 'static>(jobs: Vec<(usize, Worker<T>)>) -> Result<Vec<T>, String> {
    let handles = lcore::launch_all(jobs.into_iter().map(|(cpu, f)| (Some(cpu), f)))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(handles.len());
    let mut first_err = None;
    for h in handles {
        let r = h
            .join()
            .map_err(|p| format!("worker panicked: {}", panic_message(&*p)))
            .and_then(|r| r);
        match r {
            Ok(v) => out.push(v),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        None => Ok(out),
        Some(e) => Err(e),
    }
}

/// A name no other bench in this process has used: `{prefix}_{n}`. Soft
/// ports cable to a tester or a wire by name, so two benches — or two tests
/// running at once — that picked the same name would share one.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_releases_all() {
        let b = std::sync::Arc::new(SpinBarrier::new(2));
        let b2 = std::sync::Arc::clone(&b);
        let t = std::thread::spawn(move || b2.wait());
        assert_eq!(b.wait(), Ok(()));
        assert_eq!(t.join().unwrap(), Ok(()));
    }

    #[test]
    fn worker_panics_and_errors_become_errors() {
        let cpu = lcore::available_cpus()[0];
        let err = on_lcore::<(), _>(cpu, || panic!("kaput")).unwrap_err();
        assert!(err.contains("kaput"), "{err}");
        let err = on_lcore::<(), _>(cpu, || Err("bad".into())).unwrap_err();
        assert_eq!(err, "bad");
        assert_eq!(on_lcore(cpu, || Ok(lcore::current().is_some())), Ok(true));
    }

    #[test]
    fn unique_names_differ() {
        let a = unique_name("wire");
        let b = unique_name("wire");
        assert!(a.starts_with("wire_") && b.starts_with("wire_"), "{a} {b}");
        assert_ne!(a, b);
    }
}
