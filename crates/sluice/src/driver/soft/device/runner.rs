//! The device thread of threaded soft ports: one for the whole process.
//!
//! The first threaded soft port to start launches it (an lcore, pinned to a
//! CPU other than the caller's when there is one); it steps the engines of
//! every started threaded soft port in turn; the last port to stop joins
//! it. On a 2-core machine, two threaded ports thus share one device thread
//! and leave the other core to the forwarding thread.
//!
//! The list of ports changes on the control path only, under a mutex; the
//! thread takes a snapshot when a generation counter moves (one atomic load
//! per pass) and acknowledges the generation it runs. A port that stops
//! removes itself and waits for the acknowledgement, so when `remove`
//! returns the thread no longer touches its engines — then the queues may
//! free their buffers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::lcore::{self, LcoreHandle};
use crate::port::PortError;

use super::PortEngines;

struct Shared {
    ports: Mutex<Vec<Arc<PortEngines>>>,
    generation: AtomicU64,
    ack: AtomicU64,
    stop: AtomicBool,
}

struct Runner {
    shared: Arc<Shared>,
    thread: LcoreHandle<()>,
}

static RUNNER: Mutex<Option<Runner>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only whole-value updates happen under these locks.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A CPU other than the calling thread's, when the process has one.
fn other_cpu() -> Option<usize> {
    // SAFETY: `sched_getcpu` has no preconditions.
    let here = unsafe { libc::sched_getcpu() };
    let cpus = lcore::available_cpus();
    if cpus.len() < 2 {
        return None;
    }
    cpus.iter().copied().find(|&c| c as i32 != here)
}

fn run(s: Arc<Shared>) {
    let mut seen = u64::MAX;
    let mut list: Vec<Arc<PortEngines>> = Vec::new();
    let mut idle = 0u32;
    loop {
        let g = s.generation.load(Ordering::Acquire);
        if g != seen {
            list = lock(&s.ports).clone();
            seen = g;
            // Everything stepped before this point used the old list.
            s.ack.store(g, Ordering::Release);
        }
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        // A panicking step poisons its engine and records the port's
        // fault: the thread goes on with every other engine.
        let work: usize = list.iter().map(|p| p.step_all_or_fault()).sum();
        if work != 0 {
            idle = 0;
        } else {
            idle = idle.saturating_add(1);
            if idle < 64 {
                std::hint::spin_loop();
            } else if idle < 1024 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

/// Adds a port's engines to the device thread, launching it if needed.
pub fn add(engines: &Arc<PortEngines>) -> Result<(), PortError> {
    let mut r = lock(&RUNNER);
    if r.is_none() {
        let shared = Arc::new(Shared {
            ports: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            ack: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = lcore::launch(other_cpu(), move || run(s))
            .map_err(|e| PortError::Driver(format!("soft: cannot start the device thread: {e}")))?;
        *r = Some(Runner { shared, thread });
    }
    let runner = r.as_ref().expect("set above");
    lock(&runner.shared.ports).push(Arc::clone(engines));
    runner.shared.generation.fetch_add(1, Ordering::Release);
    Ok(())
}

/// Removes a port's engines; on return the device thread no longer touches
/// them. The last port out joins the thread.
pub fn remove(engines: &Arc<PortEngines>) {
    let mut r = lock(&RUNNER);
    let Some(runner) = r.as_ref() else {
        return;
    };
    let s = &runner.shared;
    let empty = {
        let mut ports = lock(&s.ports);
        ports.retain(|p| !Arc::ptr_eq(p, engines));
        ports.is_empty()
    };
    let g = s.generation.fetch_add(1, Ordering::AcqRel) + 1;
    if empty {
        s.stop.store(true, Ordering::Release);
        let runner = r.take().expect("checked above");
        // Joining waits for the thread's last pass; a panic there has
        // already left the engines alone.
        let _ = runner.thread.join();
        return;
    }
    while s.ack.load(Ordering::Acquire) < g && !runner.thread.is_finished() {
        std::thread::yield_now();
    }
}

/// True while the device thread runs (for tests).
#[cfg(all(test, not(loom)))]
pub fn running() -> bool {
    lock(&RUNNER).is_some()
}
