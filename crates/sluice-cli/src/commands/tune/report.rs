//! What a sweep found, as text (a table and the recommendation), as one JSON
//! object per point and as one JSON document.

use serde::Serialize;
use sluice_bench::median;

use super::args::Figure;
use super::grid::{Config, DEFAULTS, Grid};
use super::point::PointResult;
use crate::app::output::emit;

/// Several measurements of one setting.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Choice {
    /// The setting.
    #[serde(flatten)]
    pub config: Config,
    /// Mean Mpps.
    pub mpps: f64,
    /// Sample standard deviation of the Mpps (0 with one sample).
    pub mpps_sd: f64,
    /// Mean cycles per packet (of the samples that moved packets).
    pub cycles_per_packet: Option<f64>,
    /// Measurements behind the means.
    pub samples: usize,
}

impl Choice {
    /// The means of `runs` (at least one) of `config`.
    pub fn of(config: Config, runs: &[&PointResult]) -> Choice {
        let n = runs.len().max(1) as f64;
        let mpps = runs.iter().map(|r| r.mpps).sum::<f64>() / n;
        let var = if runs.len() > 1 {
            runs.iter().map(|r| (r.mpps - mpps).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        let cpp: Vec<f64> = runs.iter().filter_map(|r| r.cycles_per_packet).collect();
        Choice {
            config,
            mpps,
            mpps_sd: var.sqrt(),
            cycles_per_packet: (!cpp.is_empty())
                .then(|| cpp.iter().sum::<f64>() / cpp.len() as f64),
            samples: runs.len(),
        }
    }

    /// `7.41 Mpps (sd 0.03, 3 runs), 34.9 cycles/packet`.
    pub fn describe(&self) -> String {
        let cpp = self
            .cycles_per_packet
            .map_or("-".to_string(), |c| format!("{c:.1}"));
        if self.samples > 1 {
            format!(
                "{:.3} Mpps (sd {:.3}, {} runs), {cpp} cycles/packet",
                self.mpps, self.mpps_sd, self.samples
            )
        } else {
            format!("{:.3} Mpps (1 run), {cpp} cycles/packet", self.mpps)
        }
    }
}

/// A setting's figures over its passes: the medians of Mpps and cycles per
/// packet, the sums of the losses and window lengths, both checks over
/// every run.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Row {
    /// The figures.
    #[serde(flatten)]
    pub point: PointResult,
    /// The runs behind them.
    pub runs: usize,
}

impl Row {
    /// One row per setting of `points`, in grid order.
    pub fn medians(points: &[PointResult]) -> Vec<Row> {
        let mut by: std::collections::BTreeMap<Config, Vec<&PointResult>> = Default::default();
        for p in points {
            by.entry(p.config).or_default().push(p);
        }
        by.into_values()
            .map(|runs| {
                let first = runs[0];
                let cpp: Vec<f64> = runs.iter().filter_map(|p| p.cycles_per_packet).collect();
                let sum = |f: fn(&PointResult) -> u64| runs.iter().map(|p| f(p)).sum::<u64>();
                let point = PointResult {
                    config: first.config,
                    mpps: median(&runs.iter().map(|p| p.mpps).collect::<Vec<_>>()),
                    rx_mpps: median(&runs.iter().map(|p| p.rx_mpps).collect::<Vec<_>>()),
                    cycles_per_packet: (!cpp.is_empty()).then(|| median(&cpp)),
                    busy_cycles: sum(|p| p.busy_cycles),
                    device_cycles: sum(|p| p.device_cycles),
                    drops: sum(|p| p.drops),
                    rx_missed: sum(|p| p.rx_missed),
                    rx_nombuf: sum(|p| p.rx_nombuf),
                    secs: runs.iter().map(|p| p.secs).sum(),
                    pool_full: runs.iter().all(|p| p.pool_full),
                    accounted: runs.iter().all(|p| p.accounted),
                };
                Row {
                    point,
                    runs: runs.len(),
                }
            })
            .collect()
    }
}

/// What the budget left out.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Runs planned (the grid, plus the defaults when off it, times the
    /// passes).
    pub planned: usize,
    /// Runs measured.
    pub measured: usize,
    /// Runs not measured.
    pub points: usize,
    /// Axis values no measured point has, e.g. `burst 8`.
    pub never_measured: Vec<String>,
    /// Whether every cell of the heatmap's plane was measured.
    pub plane_complete: bool,
    /// The sweep was ended by SIGINT.
    pub interrupted: bool,
}

/// The whole result of a sweep.
#[derive(Serialize, Debug, Clone)]
pub struct TuneResult {
    /// Always `"tune"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The engine.
    pub engine: &'static str,
    /// The port specs.
    pub ports: Vec<String>,
    /// The axes.
    pub grid: Grid,
    /// The heatmap's fixed Tx descriptors.
    pub plane_txd: u16,
    /// The heatmap's fixed burst.
    pub plane_burst: u16,
    /// Warm-up per point, seconds.
    pub warmup_s: f64,
    /// Window per point, seconds.
    pub duration_s: f64,
    /// Passes over the plan.
    pub passes: u32,
    /// The time limit, seconds.
    pub budget_s: f64,
    /// The time taken, seconds.
    pub elapsed_s: f64,
    /// What was left out.
    pub skipped: Skipped,
    /// Every run of the sweep, in the order measured.
    pub points: Vec<PointResult>,
    /// Per setting measured, its medians over its passes, in grid order.
    pub rows: Vec<Row>,
    /// The confirmation runs (best candidates and the defaults, again).
    pub confirm: Vec<PointResult>,
    /// The best setting (on the confirmation means when there are some).
    pub best: Option<Choice>,
    /// The defaults, 1024/1024/256/32 (same basis as `best`).
    pub defaults: Option<Choice>,
    /// What the best is best at.
    pub rank: Figure,
    /// How much worse than the best the defaults are, in the rank's figure,
    /// percent of the best's (Mpps below, or cycles per packet above).
    pub defaults_gap_pct: Option<f64>,
    /// Points whose pool was not full or whose losses were not all counted.
    pub failed_checks: usize,
    /// The 1-minute load average at the start and at the end.
    pub load: (f64, f64),
    /// The TSC frequency.
    pub tsc_hz: u64,
}

/// The 1-minute load average (0 when it cannot be read).
pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A point as one JSON line: `{"type": kind, "i": .., "n": .., ...}`.
pub fn json_line(kind: &str, i: usize, n: usize, r: &PointResult) -> String {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("type".into(), kind.into());
        o.insert("i".into(), i.into());
        o.insert("n".into(), n.into());
    }
    v.to_string()
}

/// What a progress step says of a point: `{kind} {config}: {Mpps} Mpps,
/// {cycles} cycles/packet`, its losses if any, and the time taken so far.
pub fn step_message(kind: &str, r: &PointResult, elapsed: f64) -> String {
    let cpp = r
        .cycles_per_packet
        .map_or("-".into(), |c| format!("{c:.1}"));
    let mut s = format!(
        "{kind} {}: {:.3} Mpps, {cpp} cycles/packet",
        r.config, r.mpps
    );
    if r.drops + r.rx_missed + r.rx_nombuf != 0 {
        s += &format!(
            ", drops {} missed {} nombuf {}",
            r.drops, r.rx_missed, r.rx_nombuf
        );
    }
    if !r.ok() {
        s += if r.pool_full {
            ", LOSS NOT ACCOUNTED"
        } else {
            ", POOL NOT FULL"
        };
    }
    s + &format!(" ({elapsed:.1} s)")
}

/// Prints the table (every measured point, in grid order) and the recommendation.
pub fn print(r: &TuneResult) {
    emit(&format!(
        "---- sluice tune: {} forwarding over {} port(s), {} s warm-up + {} s per point ----",
        r.engine,
        r.ports.len(),
        r.warmup_s,
        r.duration_s
    ));
    for (i, p) in r.ports.iter().enumerate() {
        emit(&format!("port {i}: {p}"));
    }
    emit(&format!(
        "{:>5} {:>5} {:>5} {:>5} {:>9} {:>11} {:>9} {:>9} {:>7} {:>4}",
        "rxd", "txd", "cache", "burst", "Mpps", "cycles/pkt", "drops", "missed", "nombuf", "runs"
    ));
    let best = r.best.as_ref().map(|b| b.config);
    for row in &r.rows {
        let p = &row.point;
        let mut mark = String::new();
        if p.config == DEFAULTS {
            mark += "  <- defaults";
            if !r.grid.contains(&p.config) {
                mark += " (off the grid)";
            }
        }
        if Some(p.config) == best {
            mark += "  <- best";
        }
        if !p.ok() {
            mark += "  (checks failed)";
        }
        emit(&format!(
            "{:>5} {:>5} {:>5} {:>5} {:>9.3} {:>11} {:>9} {:>9} {:>7} {:>4}{mark}",
            p.config.rxd,
            p.config.txd,
            p.config.cache,
            p.config.burst,
            p.mpps,
            p.cycles_per_packet
                .map_or("-".into(), |c| format!("{c:.1}")),
            p.drops,
            p.rx_missed,
            p.rx_nombuf,
            row.runs
        ));
    }
    let s = &r.skipped;
    emit(&format!(
        "measured {} of {} runs ({} settings) in {:.1} s (budget {} s, load {:.2} -> {:.2})",
        s.measured,
        s.planned,
        r.rows.len(),
        r.elapsed_s,
        r.budget_s,
        r.load.0,
        r.load.1
    ));
    if s.points > 0 {
        let never = if s.never_measured.is_empty() {
            "every axis value was measured at least once".to_string()
        } else {
            format!("never measured: {}", s.never_measured.join(", "))
        };
        emit(&format!(
            "skipped {} runs{} ({never}); the heatmap plane is {}",
            s.points,
            if s.interrupted {
                " (interrupted)"
            } else {
                " to fit the budget"
            },
            if s.plane_complete {
                "complete"
            } else {
                "incomplete"
            }
        ));
    }
    if !r.confirm.is_empty() {
        emit(&format!(
            "confirmation: {} runs of the best candidates and the defaults, interleaved",
            r.confirm.len()
        ));
    }
    let by = match r.rank {
        Figure::Mpps => "most Mpps",
        Figure::Cycles => "fewest cycles per packet",
    };
    match &r.best {
        Some(b) => emit(&format!("best ({by}): {}: {}", b.config, b.describe())),
        None => emit(&format!("best ({by}): none (no point moved packets)")),
    }
    match (&r.defaults, r.defaults_gap_pct) {
        (Some(d), Some(pct)) => emit(&format!(
            "defaults: {}: {} — {pct:.1} % {} the best",
            d.config,
            d.describe(),
            match r.rank {
                Figure::Mpps => "Mpps below",
                Figure::Cycles => "cycles per packet above",
            }
        )),
        (Some(d), None) => emit(&format!("defaults: {}: {}", d.config, d.describe())),
        (None, _) => emit(&format!(
            "defaults: {DEFAULTS}: not measured on these ports"
        )),
    }
    if r.failed_checks > 0 {
        emit(&format!(
            "warning: {} point(s) failed their checks (pool not full, or losses not counted)",
            r.failed_checks
        ));
    }
}
