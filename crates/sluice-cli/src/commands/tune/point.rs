//! One point: a fresh pool (the point's cache size) and fresh ports (its
//! descriptor counts), forwarding on one lcore with the point's burst,
//! warmed up, then measured for a fixed window; then drained and stopped.
//!
//! The figures are the window's (`app::window`): Mpps sent by all ports,
//! cycles per packet on the forwarding lcore (busy polls, an inline
//! device's cycles excluded), and what was lost and why. After the ports
//! stop, the pool must be full again and the testers must have seen every
//! packet that was not a counted drop; the point records both checks.

use serde::Serialize;

use super::args::TuneEngine;
use super::grid::Config;
use crate::app::io;
use crate::app::options::{Engine, FwdArgs};

/// How every point runs.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Port specs.
    pub specs: Vec<String>,
    /// The engine.
    pub engine: TuneEngine,
    /// Seconds forwarded before the window.
    pub warmup: f64,
    /// The window, seconds.
    pub duration: f64,
    /// Tx attempts more before a drop.
    pub tx_retry: u32,
}

/// What one point measured.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct PointResult {
    /// The setting.
    #[serde(flatten)]
    pub config: Config,
    /// Packets sent by all ports, millions per second (the forwarded rate).
    pub mpps: f64,
    /// Packets received by all ports, millions per second.
    pub rx_mpps: f64,
    /// Forwarding lcore cycles per packet (busy polls, inline device
    /// excluded); `None` when nothing moved.
    pub cycles_per_packet: Option<f64>,
    /// The lcore's TSC ticks in polls that received packets, in the window.
    pub busy_cycles: u64,
    /// The inline devices' ticks inside the lcore's calls, in the window
    /// (subtracted from `busy_cycles`).
    pub device_cycles: u64,
    /// Packets a full Tx ring did not take (dropped), in the window.
    pub drops: u64,
    /// Packets the device dropped for want of an Rx descriptor, in the
    /// window.
    pub rx_missed: u64,
    /// Rx refills that found the pool empty, in the window.
    pub rx_nombuf: u64,
    /// The window's length, seconds.
    pub secs: f64,
    /// Every buffer was back in the pool after the ports stopped.
    pub pool_full: bool,
    /// The testers' losses are exactly the counted drops and misses of the
    /// whole run, with nothing corrupt, duplicated or reordered.
    pub accounted: bool,
}

impl PointResult {
    /// Both end-of-point checks passed.
    pub fn ok(&self) -> bool {
        self.pool_full && self.accounted
    }
}

/// The `sluice fwd` engine of a tune engine that forwards with `fwd`.
fn fwd_engine(e: TuneEngine) -> Engine {
    match e {
        TuneEngine::Io => Engine::Io,
        TuneEngine::Mac => Engine::Mac,
    }
}

/// Measures `c`.
pub fn measure(setup: &Setup, c: Config) -> Result<PointResult, String> {
    match setup.engine {
        TuneEngine::Io | TuneEngine::Mac => measure_fwd(setup, c, fwd_engine(setup.engine)),
    }
}

/// A point run by `app::io::measure`.
fn measure_fwd(setup: &Setup, c: Config, engine: Engine) -> Result<PointResult, String> {
    let mut args = FwdArgs::with_specs(setup.specs.clone());
    args.engine = engine;
    args.queues.rxd = c.rxd;
    args.queues.txd = c.txd;
    args.queues.cache = c.cache;
    args.queues.burst = c.burst;
    args.run.duration = setup.duration;
    args.queues.tx_retry = setup.tx_retry;
    // No live stats lines.
    args.run.stats_period = 1e6;
    let m = io::measure(&args, Some(setup.warmup)).map_err(|e| format!("{c}: {e}"))?;
    let w = m
        .window
        .ok_or_else(|| format!("{c}: the run ended before its window"))?;
    let s = &m.summary;
    let counted = s.drops + s.ports.iter().map(|p| p.rx_missed).sum::<u64>();
    let lost: u64 = s.testers.iter().map(|t| t.lost).sum();
    let accounted = lost == counted
        && s.testers
            .iter()
            .all(|t| t.corrupt == 0 && t.duplicates == 0 && t.reordered == 0);
    Ok(PointResult {
        config: c,
        mpps: w.tx_mpps,
        rx_mpps: w.rx_mpps,
        cycles_per_packet: w.cycles_per_packet,
        busy_cycles: w.busy_cycles,
        device_cycles: w.device_cycles,
        drops: w.drops,
        rx_missed: w.rx_missed,
        rx_nombuf: w.rx_nombuf,
        secs: w.secs,
        pool_full: s.pool_full,
        accounted,
    })
}
