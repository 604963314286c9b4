//! The forwarding lcore: polls its streams round-robin until told to stop.
//!
//! One lcore owns its streams outright (their Rx and Tx queues are `&mut`
//! borrows of the ports, handed over by `std::thread::scope`), so no queue
//! is ever touched by two threads. Cycles are counted as testpmd's
//! `--record-core-cycles` counts them: only polls that received at least one
//! packet (busy polls) add their TSC span, so an idle core does not inflate
//! the per-packet cost.
//!
//! A measured window ([`Window`]): the main thread may move the lcores from
//! counting since the start to counting since now (the warm-up is over) and
//! then to frozen (the window is over; forwarding goes on for the drain but
//! is no longer counted). Each lcore sees the move within one poll.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use sluice::counter::Counter;
use sluice::mbuf::{Burst, MbufPool};
use sluice::tsc::rdtsc;
use sluice::{lcore, tsc};

use super::engine::{Fwd, Io, Mac, MacSwap, Recycle, RxOnly, Stream, TxOnly, poll};
use crate::app::options::Engine;

/// Counters of one stream that the port counters do not have, written by
/// its lcore and read by the stats thread.
#[derive(Debug, Default)]
pub struct StreamCounters {
    /// Packets the Tx queue did not take, freed.
    pub drops: Counter,
    /// `recycle`: recycle steps that failed (added when the lcore ends).
    pub recycle_errors: Counter,
    /// `txonly`: bursts not generated for want of buffers (added when the
    /// lcore ends).
    pub alloc_failures: Counter,
}

/// What one lcore measured.
#[derive(Debug, Default, Clone, Copy)]
pub struct LcoreCycles {
    /// TSC ticks spent in polls that received at least one packet.
    pub busy_cycles: u64,
    /// Packets received (generated, for `txonly`) in those polls.
    pub packets: u64,
    /// Polls in all, busy or not.
    pub polls: u64,
    /// Polls that received nothing.
    pub idle_polls: u64,
    /// TSC ticks from the first poll to the last.
    pub total_cycles: u64,
}

/// One lcore's cycles and polls, live: written by the lcore (single-writer
/// adds, a few every [`PUBLISH_EVERY`] loops) and read by the telemetry and
/// metrics threads while it runs. Totals since the lcore started, measured
/// window or not.
#[derive(Debug)]
pub struct LiveLcore {
    /// TSC ticks spent in polls that received at least one packet.
    pub busy_cycles: Counter,
    /// TSC ticks since the lcore started polling.
    pub total_cycles: Counter,
    /// Packets received (generated, for `txonly`) in busy polls.
    pub packets: Counter,
    /// Polls in all.
    pub polls: Counter,
    /// Polls that received nothing.
    pub idle_polls: Counter,
    /// The CPU the lcore is pinned to ([`LiveLcore::NO_CPU`]: none).
    cpu: AtomicUsize,
    /// Whether the lcore has started polling.
    started: AtomicBool,
}

impl Default for LiveLcore {
    fn default() -> LiveLcore {
        LiveLcore {
            busy_cycles: Counter::new(),
            total_cycles: Counter::new(),
            packets: Counter::new(),
            polls: Counter::new(),
            idle_polls: Counter::new(),
            cpu: AtomicUsize::new(LiveLcore::NO_CPU),
            started: AtomicBool::new(false),
        }
    }
}

/// Loops of an lcore between two updates of its [`LiveLcore`] (a power of
/// two): the loop itself only counts in registers, as before.
pub const PUBLISH_EVERY: u32 = 64;

impl LiveLcore {
    const NO_CPU: usize = usize::MAX;

    /// Counters for `n` lcores, shared with the threads that read them.
    pub fn many(n: usize) -> std::sync::Arc<[LiveLcore]> {
        (0..n).map(|_| LiveLcore::default()).collect()
    }

    /// Marks the lcore started (on `cpu`, if pinned).
    pub fn start(&self, cpu: Option<usize>) {
        self.cpu
            .store(cpu.unwrap_or(LiveLcore::NO_CPU), Ordering::Relaxed);
        self.started.store(true, Ordering::Relaxed);
    }

    /// Whether the lcore has started.
    pub fn started(&self) -> bool {
        self.started.load(Ordering::Relaxed)
    }

    /// The CPU the lcore is pinned to, if any.
    pub fn cpu(&self) -> Option<usize> {
        let cpu = self.cpu.load(Ordering::Relaxed);
        (cpu != LiveLcore::NO_CPU).then_some(cpu)
    }

    /// The counters now, as an lcore's [`LcoreCycles`].
    pub fn read(&self) -> LcoreCycles {
        LcoreCycles {
            busy_cycles: self.busy_cycles.get(),
            packets: self.packets.get(),
            polls: self.polls.get(),
            idle_polls: self.idle_polls.get(),
            total_cycles: self.total_cycles.get(),
        }
    }
}

/// The lcore's side of a [`LiveLcore`]: adds what its local
/// [`LcoreCycles`] counted since the last update, every
/// [`PUBLISH_EVERY`] loops.
pub struct Publisher<'a> {
    live: &'a LiveLcore,
    /// The local counts at the last update.
    last: LcoreCycles,
    /// The TSC when the lcore started.
    origin: u64,
    loops: u32,
}

impl<'a> Publisher<'a> {
    /// Starts publishing into `live` (the lcore starts now).
    pub fn new(live: &'a LiveLcore) -> Publisher<'a> {
        Publisher {
            live,
            last: LcoreCycles::default(),
            origin: rdtsc(),
            loops: 0,
        }
    }

    /// One loop of the lcore done; every [`PUBLISH_EVERY`] loops, the
    /// counts go out.
    #[inline(always)]
    pub fn tick(&mut self, c: &LcoreCycles) {
        self.loops = self.loops.wrapping_add(1);
        if self.loops & (PUBLISH_EVERY - 1) == 0 {
            self.publish(c);
        }
    }

    /// [`tick`](Self::tick) for a loop that counts in its own terms:
    /// `counts` makes the [`LcoreCycles`] only when they go out.
    #[inline(always)]
    pub fn tick_with(&mut self, counts: impl FnOnce() -> LcoreCycles) {
        self.loops = self.loops.wrapping_add(1);
        if self.loops & (PUBLISH_EVERY - 1) == 0 {
            self.publish(&counts());
        }
    }

    /// Adds what `c` counted since the last update.
    #[inline(never)]
    pub fn publish(&mut self, c: &LcoreCycles) {
        let (live, last) = (self.live, &self.last);
        live.busy_cycles
            .add(c.busy_cycles.wrapping_sub(last.busy_cycles));
        live.packets.add(c.packets.wrapping_sub(last.packets));
        live.polls.add(c.polls.wrapping_sub(last.polls));
        live.idle_polls
            .add(c.idle_polls.wrapping_sub(last.idle_polls));
        let total = rdtsc().wrapping_sub(self.origin);
        live.total_cycles
            .add(total.wrapping_sub(live.total_cycles.get()));
        self.last = *c;
    }

    /// The local counts start again from zero (a measured window opens):
    /// what they counted so far goes out first, so the live totals go on.
    pub fn restart(&mut self, c: &LcoreCycles) {
        self.publish(c);
        self.last = LcoreCycles::default();
    }
}

/// How an lcore runs.
#[derive(Clone, Copy)]
pub struct LcoreConfig<'a> {
    /// The engine.
    pub engine: Engine,
    /// Packets asked per Rx call (1..=64).
    pub burst: usize,
    /// Tx attempts more before dropping.
    pub tx_retry: u32,
    /// The run's stream counters, indexed by `Stream::id`.
    pub counters: &'a [StreamCounters],
    /// Set by the main thread to end the run.
    pub stop: &'a AtomicBool,
    /// Which polls count: a [`Window`] value, moved forward by the main
    /// thread only.
    pub window: &'a AtomicU8,
}

/// Phases of the measured window (the values of [`LcoreConfig::window`]).
pub struct Window;

impl Window {
    /// Count every poll from the start (no warm-up).
    pub const ALL: u8 = 0;
    /// The warm-up is over: counts restart from the first poll that sees
    /// this.
    pub const OPEN: u8 = 1;
    /// The window is over: counts stay as they are.
    pub const CLOSED: u8 = 2;
}

/// Runs on a forwarding thread: pins it to `cpu` (a warning on failure),
/// registers it as an lcore (so the mempool cache is used), forwards until
/// `stop`, then hands the lcore's cached buffers back to `pool`.
pub fn lcore_main(
    cpu: Option<usize>,
    streams: &mut [Stream<'_>],
    cfg: LcoreConfig<'_>,
    pool: &MbufPool,
    live: &LiveLcore,
) -> Result<LcoreCycles, String> {
    if let Some(cpu) = cpu
        && let Err(e) = lcore::pin_current_thread(cpu)
    {
        eprintln!("sluice fwd: warning: forwarding lcore not pinned: {e}");
    }
    let guard = lcore::register().map_err(|e| format!("cannot register an lcore: {e}"))?;
    live.start(cpu);
    let r = forward(streams, cfg, live);
    pool.flush_local_cache();
    drop(guard);
    Ok(r)
}

/// Forwards with `cfg.engine` until `cfg.stop`, publishing its counts into
/// `live`.
pub fn forward(streams: &mut [Stream<'_>], cfg: LcoreConfig<'_>, live: &LiveLcore) -> LcoreCycles {
    match cfg.engine {
        Engine::Io => run(Io, streams, cfg, live),
        Engine::Mac => run(Mac, streams, cfg, live),
        Engine::Macswap => run(MacSwap, streams, cfg, live),
        Engine::Rxonly => run(RxOnly, streams, cfg, live),
        Engine::Txonly => run(TxOnly, streams, cfg, live),
        Engine::Recycle => run(Recycle, streams, cfg, live),
    }
}

#[inline(never)]
fn run<E: Fwd>(
    e: E,
    streams: &mut [Stream<'_>],
    cfg: LcoreConfig<'_>,
    live: &LiveLcore,
) -> LcoreCycles {
    let mut burst: Burst<64> = Burst::new();
    let mut c = LcoreCycles::default();
    let mut publisher = Publisher::new(live);
    let mut first = tsc::rdtsc_ordered();
    let mut phase = Window::ALL;
    let mut frozen: Option<LcoreCycles> = None;
    while !cfg.stop.load(Ordering::Relaxed) {
        let w = cfg.window.load(Ordering::Relaxed);
        if w != phase {
            phase = w;
            let now = tsc::rdtsc_ordered();
            if w == Window::OPEN {
                publisher.restart(&c);
                c = LcoreCycles::default();
                first = now;
            } else if w == Window::CLOSED && frozen.is_none() {
                c.total_cycles = now.wrapping_sub(first);
                frozen = Some(c);
            }
        }
        for s in streams.iter_mut() {
            let t0 = rdtsc();
            let m = poll(e, s, burst.capped(cfg.burst), cfg.tx_retry);
            c.polls += 1;
            if m.rx == 0 {
                c.idle_polls += 1;
                continue;
            }
            c.busy_cycles += rdtsc().wrapping_sub(t0);
            c.packets += m.rx as u64;
            if m.dropped != 0 {
                cfg.counters[s.id].drops.add(m.dropped as u64);
            }
        }
        if streams.is_empty() {
            std::hint::spin_loop();
        }
        publisher.tick(&c);
    }
    publisher.publish(&c);
    c.total_cycles = tsc::rdtsc_ordered().wrapping_sub(first);
    let c = frozen.unwrap_or(c);
    for s in streams.iter_mut() {
        if s.recycle_errors != 0 {
            cfg.counters[s.id]
                .recycle_errors
                .add(std::mem::take(&mut s.recycle_errors));
        }
        if s.alloc_failures != 0 {
            cfg.counters[s.id]
                .alloc_failures
                .add(std::mem::take(&mut s.alloc_failures));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_counters_follow_the_local_ones_every_publish_and_across_a_restart() {
        let live = LiveLcore::default();
        assert!(!live.started());
        live.start(Some(3));
        assert_eq!((live.started(), live.cpu()), (true, Some(3)));
        let mut publisher = Publisher::new(&live);
        let mut c = LcoreCycles::default();
        for i in 1..PUBLISH_EVERY {
            c.polls += 1;
            c.packets += 2;
            c.busy_cycles += 10;
            publisher.tick(&c);
            assert_eq!(live.polls.get(), 0, "published after {i} loops");
        }
        c.polls += 1;
        c.idle_polls += 1;
        publisher.tick(&c);
        let seen = live.read();
        assert_eq!(
            (seen.polls, seen.idle_polls, seen.packets, seen.busy_cycles),
            (64, 1, 126, 630)
        );
        // A measured window opens: the local counts restart, the live ones
        // go on from where they were.
        c.polls += 5;
        publisher.restart(&c);
        c = LcoreCycles::default();
        c.polls = 2;
        publisher.publish(&c);
        assert_eq!(live.polls.get(), 71);
        assert!(live.total_cycles.get() > 0);
        assert_eq!(LiveLcore::many(3).len(), 3);
        assert_eq!(LiveLcore::default().cpu(), None);
    }
}
