//! `--preset l2fwd-defaults`: a known case of descriptor and cache tuning.
//! DPDK's l2fwd example long used 128 Rx and 512 Tx descriptors with a
//! mempool cache of 32; later versions use 1024 / 1024 and cache 256
//! (burst 32 in both). On an Arm board that change took small-packet
//! forwarding from 21 % to 55 % of line rate. Here both settings run on the
//! same ports, `max(--confirm, 5)` times each, alternating (old, new, new,
//! old, ...) so drift and load hit both alike; the result is each one's mean
//! and spread and the ratio.

use serde::Serialize;
use sluice::port::DeviceInfo;

use super::args::{Preset, TuneArgs};
use super::grid::{Config, DEFAULTS, fits};
use super::point::{self, PointResult, Setup};
use super::report::{Choice, json_line, loadavg, step_message};
use crate::app::output::emit;
use crate::app::progress::Progress;

/// DPDK l2fwd's old defaults: 128 Rx / 512 Tx descriptors, cache 32.
pub const L2FWD_OLD: Config = Config {
    rxd: 128,
    txd: 512,
    cache: 32,
    burst: 32,
};

/// The least repetitions of each setting.
pub const MIN_REPS: u32 = 5;

/// The result of a preset.
#[derive(Serialize, Debug, Clone)]
pub struct PresetResult {
    /// Always `"preset"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Its name.
    pub preset: &'static str,
    /// The engine.
    pub engine: &'static str,
    /// The port specs.
    pub ports: Vec<String>,
    /// Warm-up per run, seconds.
    pub warmup_s: f64,
    /// Window per run, seconds.
    pub duration_s: f64,
    /// Every run, in order.
    pub runs: Vec<PointResult>,
    /// The old setting's means.
    pub old: Choice,
    /// The new setting's means.
    pub new: Choice,
    /// New Mpps over old Mpps.
    pub speedup: f64,
    /// The 1-minute load average at the start and at the end.
    pub load: (f64, f64),
}

/// Runs preset `p`.
pub fn run(
    p: Preset,
    args: &TuneArgs,
    setup: &Setup,
    ports: &[(String, DeviceInfo)],
) -> Result<(), String> {
    let Preset::L2fwdDefaults = p;
    if args.out_plot.is_some() {
        return Err("--out-plot draws a sweep's heatmap; a preset has none".into());
    }
    let (old, new) = (L2FWD_OLD, DEFAULTS);
    for c in [old, new] {
        if !fits(&c, ports) {
            return Err(format!(
                "--preset l2fwd-defaults: the ports cannot take {c}"
            ));
        }
    }
    let reps = args.confirm.max(MIN_REPS) as usize;
    let load_start = loadavg();
    let start = std::time::Instant::now();
    let mut runs = Vec::with_capacity(2 * reps);
    let mut progress = Progress::new(2 * reps, "tune l2fwd-defaults");
    for k in 0..reps {
        let order = if k % 2 == 0 { [old, new] } else { [new, old] };
        for c in order {
            if crate::app::signal::interrupted() {
                break;
            }
            let r = point::measure(setup, c)?;
            let i = runs.len() + 1;
            progress.step(&step_message("run", &r, start.elapsed().as_secs_f64()));
            if args.json {
                emit(&json_line("run", i, 2 * reps, &r));
            }
            runs.push(r);
        }
    }
    progress.finish();
    let of = |c: Config| {
        let v: Vec<&PointResult> = runs.iter().filter(|r| r.config == c).collect();
        Choice::of(c, &v)
    };
    let (o, n) = (of(old), of(new));
    let result = PresetResult {
        kind: "preset",
        preset: "l2fwd-defaults",
        engine: setup.engine.name(),
        ports: setup.specs.clone(),
        warmup_s: setup.warmup,
        duration_s: setup.duration,
        speedup: if o.mpps > 0.0 { n.mpps / o.mpps } else { 0.0 },
        old: o,
        new: n,
        runs,
        load: (load_start, loadavg()),
    };
    if args.json {
        let mut v = serde_json::to_value(&result).map_err(|e| e.to_string())?;
        if let Some(o) = v.as_object_mut() {
            o.remove("runs");
        }
        emit(&v.to_string());
    } else {
        print(&result);
    }
    if let Some(path) = &args.out_json {
        let text = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let failed = result.runs.iter().filter(|r| !r.ok()).count();
    if failed > 0 {
        return Err(format!(
            "{failed} run(s) failed their checks (pool not full, or losses not counted)"
        ));
    }
    Ok(())
}

fn print(r: &PresetResult) {
    emit(&format!(
        "---- sluice tune --preset l2fwd-defaults: {} forwarding, {} s warm-up + {} s per run ----",
        r.engine, r.warmup_s, r.duration_s
    ));
    for (i, p) in r.ports.iter().enumerate() {
        emit(&format!("port {i}: {p}"));
    }
    emit(&format!(
        "{:>14} {:>5} {:>5} {:>5} {:>5} {:>9} {:>11} {:>9} {:>9}",
        "", "rxd", "txd", "cache", "burst", "Mpps", "cycles/pkt", "drops", "missed"
    ));
    for run in &r.runs {
        let name = if run.config == L2FWD_OLD {
            "old (l2fwd)"
        } else {
            "new (defaults)"
        };
        emit(&format!(
            "{name:>14} {:>5} {:>5} {:>5} {:>5} {:>9.3} {:>11} {:>9} {:>9}",
            run.config.rxd,
            run.config.txd,
            run.config.cache,
            run.config.burst,
            run.mpps,
            run.cycles_per_packet
                .map_or("-".into(), |c| format!("{c:.1}")),
            run.drops,
            run.rx_missed
        ));
    }
    emit(&format!("old: {}: {}", r.old.config, r.old.describe()));
    emit(&format!("new: {}: {}", r.new.config, r.new.describe()));
    emit(&format!(
        "new / old: {:.3}x Mpps ({:+.1} %); load {:.2} -> {:.2}",
        r.speedup,
        (r.speedup - 1.0) * 100.0,
        r.load.0,
        r.load.1
    ));
}
