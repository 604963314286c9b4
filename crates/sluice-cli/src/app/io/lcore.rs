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

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

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
) -> Result<LcoreCycles, String> {
    if let Some(cpu) = cpu
        && let Err(e) = lcore::pin_current_thread(cpu)
    {
        eprintln!("sluice fwd: warning: forwarding lcore not pinned: {e}");
    }
    let guard = lcore::register().map_err(|e| format!("cannot register an lcore: {e}"))?;
    let r = forward(streams, cfg);
    pool.flush_local_cache();
    drop(guard);
    Ok(r)
}

/// Forwards with `cfg.engine` until `cfg.stop`.
pub fn forward(streams: &mut [Stream<'_>], cfg: LcoreConfig<'_>) -> LcoreCycles {
    match cfg.engine {
        Engine::Io => run(Io, streams, cfg),
        Engine::Mac => run(Mac, streams, cfg),
        Engine::Macswap => run(MacSwap, streams, cfg),
        Engine::Rxonly => run(RxOnly, streams, cfg),
        Engine::Txonly => run(TxOnly, streams, cfg),
        Engine::Recycle => run(Recycle, streams, cfg),
    }
}

#[inline(never)]
fn run<E: Fwd>(e: E, streams: &mut [Stream<'_>], cfg: LcoreConfig<'_>) -> LcoreCycles {
    let mut burst: Burst<64> = Burst::new();
    let mut c = LcoreCycles::default();
    let mut first = tsc::rdtsc_ordered();
    let mut phase = Window::ALL;
    let mut frozen: Option<LcoreCycles> = None;
    while !cfg.stop.load(Ordering::Relaxed) {
        let w = cfg.window.load(Ordering::Relaxed);
        if w != phase {
            phase = w;
            let now = tsc::rdtsc_ordered();
            if w == Window::OPEN {
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
    }
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
