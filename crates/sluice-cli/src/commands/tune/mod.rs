//! `sluice tune`: a sweep over Rx/Tx descriptors, mempool cache and burst
//! size that measures each setting and recommends one.
//!
//! # Algorithm
//! 1. Read the four axes and check them against every port's driver
//!    (`grid`): the ports are opened once to read their limits.
//! 2. Measure the points in plan order (`grid::Grid::plan`: the defaults,
//!    the heatmap's plane, then the rest shuffled), `--passes` times over,
//!    while the budget allows: before each point, the time taken so far plus one point's
//!    estimated cost (warm-up + window + the measured mean set-up and drain
//!    overhead) plus the confirmation's reserve must fit in `--budget`.
//!    Each point is a fresh pool and fresh ports, warmed up, then measured
//!    over a fixed window (`point`); a setting's figures are the medians of
//!    its passes (`report::Row`).
//! 3. Confirm: the sweep's [`TOP`] best points and the defaults are
//!    measured `--confirm` times more, interleaved (so drift and load hit
//!    them alike), and the best is chosen on those means — the single
//!    highest sample of hundreds would favour luck.
//! 4. Report: a table, the best (`--rank`: most Mpps, or fewest cycles
//!    per packet), how far the defaults are from it
//!    (`report`); JSON per point and as a document; the heatmap (`plot`).
//!
//! `--preset l2fwd-defaults` (`preset`) instead compares two fixed settings
//! over repeated, interleaved runs.
//!
//! # Threads
//! Each point runs `app::io::measure`: the main thread pinned to the first
//! CPU, one forwarding lcore on the next; a threaded device model takes a
//! CPU of its own (on two CPUs, the lcore shares the main thread's, which
//! sleeps).

pub mod args;
pub mod grid;
pub mod plot;
pub mod point;
pub mod preset;
pub mod report;

#[cfg(all(test, not(loom)))]
mod tests;

use std::collections::BTreeMap;
use std::time::Instant;

use sluice::mbuf::{MbufPool, MbufPoolConfig};
use sluice::port::{DeviceInfo, PortConfig};

use args::Figure;
pub use args::TuneArgs;
use grid::{Config, DEFAULTS, Grid, fits};
use point::{PointResult, Setup};
use report::{Choice, Row, Skipped, TuneResult, json_line, loadavg, step_message};

use crate::app::output::emit;
use crate::app::progress::Progress;

/// Points of the sweep confirmed besides the defaults.
pub const TOP: usize = 3;
/// First guess of a point's set-up and drain time, seconds (then the mean
/// of what points took).
const OVERHEAD_GUESS: f64 = 0.1;
/// Descriptor counts tried, in order, to open a port just to read its
/// limits.
const PROBE_DESC: [u16; 6] = [1024, 512, 256, 128, 64, 4096];

/// Runs `sluice tune`.
pub fn run(args: &TuneArgs) -> Result<(), String> {
    let specs = args.all_specs();
    let grid = Grid::parse(args)?;
    let ports = probe(&specs)?;
    grid.check_ports(&ports)?;
    let setup = Setup {
        specs,
        engine: args.engine,
        warmup: args.warmup,
        duration: args.duration,
        tx_retry: args.tx_retry,
    };
    crate::app::signal::catch_signals();
    if let Some(p) = args.preset {
        return preset::run(p, args, &setup, &ports);
    }
    let result = sweep(args, &grid, &setup, &ports)?;
    if args.json {
        let mut v = serde_json::to_value(&result).map_err(|e| e.to_string())?;
        if let Some(o) = v.as_object_mut() {
            o.remove("points");
            o.remove("rows");
            o.remove("confirm");
            o.insert("type".into(), "summary".into());
        }
        emit(&v.to_string());
    } else {
        report::print(&result);
    }
    write_outputs(args, &result)?;
    if result.failed_checks > 0 {
        return Err(format!(
            "{} point(s) failed their checks (pool not full, or losses not counted)",
            result.failed_checks
        ));
    }
    Ok(())
}

/// Writes `--out-json` and `--out-plot`.
fn write_outputs(args: &TuneArgs, r: &TuneResult) -> Result<(), String> {
    if let Some(path) = &args.out_json {
        let text = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.out_plot {
        let figure = args.plot_figure;
        let cells = plane_cells(r, figure);
        let (name, unit) = match figure {
            Figure::Mpps => ("Mpps", "Mpps"),
            Figure::Cycles => ("cycles per packet", "cycles/pkt"),
        };
        let mut title = format!(
            "sluice tune: {name}, {} forwarding, Tx descriptors {}, burst {}",
            r.engine, r.plane_txd, r.plane_burst
        );
        if r.passes > 1 {
            title += &format!(" (median of {})", r.passes);
        }
        plot::write_svg(
            path,
            &plot::Heatmap {
                title: &title,
                unit,
                x: &r.grid.rxd,
                y: &r.grid.cache,
                cells: &cells,
            },
        )?;
    }
    Ok(())
}

/// The heatmap's cells: the sweep's Mpps (or cycles per packet) at each Rx
/// descriptors × cache pair of the plane (`cells[x][y]`).
pub fn plane_cells(r: &TuneResult, figure: Figure) -> Vec<Vec<Option<f64>>> {
    r.grid
        .rxd
        .iter()
        .map(|&rxd| {
            r.grid
                .cache
                .iter()
                .map(|&cache| {
                    let c = Config {
                        rxd,
                        txd: r.plane_txd,
                        cache,
                        burst: r.plane_burst,
                    };
                    let p = &r.rows.iter().find(|row| row.point.config == c)?.point;
                    match figure {
                        Figure::Mpps => Some(p.mpps),
                        Figure::Cycles => p.cycles_per_packet,
                    }
                })
                .collect()
        })
        .collect()
}

/// Opens each port once (not started) to read its driver's limits.
pub fn probe(specs: &[String]) -> Result<Vec<(String, DeviceInfo)>, String> {
    if specs.is_empty() {
        return Err("no port given".into());
    }
    let pool = MbufPool::new(MbufPoolConfig {
        name: "tune-probe".into(),
        size: 1023,
        cache_size: 0,
        ..Default::default()
    })
    .map_err(|e| format!("mbuf pool: {e}"))?;
    let mut out = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let mut first_err = None;
        for n in PROBE_DESC {
            let config = PortConfig::new(Some(pool.clone()))
                .port_id(i as u16)
                .nb_rxd(n)
                .nb_txd(n);
            match sluice::driver::open(spec, config) {
                Ok(port) => {
                    out.push((spec.clone(), port.info().clone()));
                    first_err = None;
                    break;
                }
                Err(e) => {
                    first_err.get_or_insert(e.to_string());
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
    }
    Ok(out)
}

/// Seconds since `t`.
fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Runs the sweep and the confirmation.
fn sweep(
    args: &TuneArgs,
    grid: &Grid,
    setup: &Setup,
    ports: &[(String, DeviceInfo)],
) -> Result<TuneResult, String> {
    let start = Instant::now();
    let load_start = loadavg();
    let defaults_fit = fits(&DEFAULTS, ports);
    let plan = grid.plan(defaults_fit);
    let runs: Vec<Config> = (0..args.passes)
        .flat_map(|_| plan.iter().copied())
        .collect();
    let n = runs.len();
    let mut overhead = OVERHEAD_GUESS;
    let point_time = |overhead: f64| setup.warmup + setup.duration + overhead;
    let confirm_runs = args.confirm as usize * (TOP + usize::from(defaults_fit));
    let mut points: Vec<PointResult> = Vec::new();
    let mut interrupted = false;
    // The steps: the points the budget is expected to take, then the
    // confirmation (re-estimated as the points show their overhead).
    let expected = |overhead: f64| {
        points_that_fit(n, args.budget, point_time(overhead), confirm_runs) + confirm_runs
    };
    let mut progress = Progress::new(expected(overhead), "tune");
    for (i, &c) in runs.iter().enumerate() {
        let reserve = confirm_runs as f64 * point_time(overhead);
        if i > 0 && since(start) + point_time(overhead) + reserve > args.budget {
            break;
        }
        if crate::app::signal::interrupted() {
            interrupted = true;
            break;
        }
        let t0 = Instant::now();
        let r = point::measure(setup, c)?;
        let took = since(t0) - setup.warmup - setup.duration;
        overhead = (overhead * i as f64 + took.max(0.0)) / (i + 1) as f64;
        progress.set_total(expected(overhead).max(i + 1 + confirm_runs));
        progress.step(&step_message("point", &r, since(start)));
        if args.json {
            emit(&json_line("point", i + 1, n, &r));
        }
        points.push(r);
    }

    // Confirmation: the best few and the defaults, again, interleaved.
    let rows = Row::medians(&points);
    let rank = args.rank;
    let score = |p: &PointResult| rank.score(p.mpps, p.cycles_per_packet);
    let mut ranked: Vec<&PointResult> = rows
        .iter()
        .map(|r| &r.point)
        .filter(|p| p.ok() && score(p).is_some())
        .collect();
    ranked.sort_by(|a, b| score(b).unwrap_or(0.0).total_cmp(&score(a).unwrap_or(0.0)));
    let mut candidates: Vec<Config> = ranked.iter().take(TOP).map(|p| p.config).collect();
    if defaults_fit
        && rows.iter().any(|r| r.point.config == DEFAULTS)
        && !candidates.contains(&DEFAULTS)
    {
        candidates.push(DEFAULTS);
    }
    let mut confirm: Vec<PointResult> = Vec::new();
    let total = args.confirm as usize * candidates.len();
    progress.set_total(points.len() + total);
    'reps: for _ in 0..args.confirm {
        for &c in &candidates {
            if since(start) + point_time(overhead) > args.budget
                || crate::app::signal::interrupted()
            {
                interrupted |= crate::app::signal::interrupted();
                break 'reps;
            }
            let r = point::measure(setup, c)?;
            let i = confirm.len() + 1;
            progress.step(&step_message("confirm", &r, since(start)));
            if args.json {
                emit(&json_line("confirm", i, total, &r));
            }
            confirm.push(r);
        }
    }

    progress.finish();

    // The recommendation: on the confirmation runs when there are any, else on
    // the sweep's measurements.
    let basis: &[PointResult] = if confirm.is_empty() {
        &points
    } else {
        &confirm
    };
    let mut by_config: BTreeMap<Config, Vec<&PointResult>> = BTreeMap::new();
    for p in basis.iter().filter(|p| p.ok()) {
        by_config.entry(p.config).or_default().push(p);
    }
    let choices: Vec<Choice> = by_config
        .iter()
        .map(|(c, runs)| Choice::of(*c, runs))
        .collect();
    let cscore = |c: &Choice| rank.score(c.mpps, c.cycles_per_packet);
    let best = choices
        .iter()
        .filter(|c| c.mpps > 0.0 && cscore(c).is_some())
        .max_by(|a, b| {
            cscore(a)
                .unwrap_or(0.0)
                .total_cmp(&cscore(b).unwrap_or(0.0))
        })
        .cloned();
    let defaults = choices.iter().find(|c| c.config == DEFAULTS).cloned();
    let gap = match (&best, &defaults) {
        (Some(b), Some(d)) => match (cscore(b), cscore(d)) {
            (Some(b), Some(d)) if b != 0.0 => Some(rank.gap_pct(b, d)),
            _ => None,
        },
        _ => None,
    };
    let (plane_txd, plane_burst) = grid.plane();
    let measured: Vec<Config> = points.iter().map(|p| p.config).collect();
    let skipped = Skipped {
        planned: n,
        measured: points.len(),
        points: n - points.len(),
        never_measured: never_measured(grid, &measured),
        plane_complete: grid.rxd.iter().all(|&rxd| {
            grid.cache.iter().all(|&cache| {
                measured.contains(&Config {
                    rxd,
                    txd: plane_txd,
                    cache,
                    burst: plane_burst,
                })
            })
        }),
        interrupted,
    };
    let failed_checks = points.iter().chain(&confirm).filter(|p| !p.ok()).count();
    Ok(TuneResult {
        kind: "tune",
        engine: setup.engine.name(),
        ports: setup.specs.clone(),
        grid: grid.clone(),
        plane_txd,
        plane_burst,
        warmup_s: setup.warmup,
        duration_s: setup.duration,
        passes: args.passes,
        budget_s: args.budget,
        elapsed_s: since(start),
        skipped,
        points,
        rows,
        confirm,
        best,
        defaults,
        rank,
        defaults_gap_pct: gap,
        failed_checks,
        load: (load_start, loadavg()),
        tsc_hz: sluice::tsc::tsc_hz(),
    })
}

/// How many of a sweep's `n` points are expected to fit in `budget` seconds
/// at `point_time` seconds each, keeping room for `confirm_runs` more (the
/// sweep's own rule; the first point always runs).
fn points_that_fit(n: usize, budget: f64, point_time: f64, confirm_runs: usize) -> usize {
    let room = (budget / point_time).floor() - confirm_runs as f64;
    (room.max(1.0) as usize).min(n)
}

/// The axis values that no point in `measured` has, e.g. `burst 8`.
fn never_measured(g: &Grid, measured: &[Config]) -> Vec<String> {
    let mut out = Vec::new();
    missing_values(&mut out, "rxd", &g.rxd, measured, |c| c.rxd);
    missing_values(&mut out, "txd", &g.txd, measured, |c| c.txd);
    missing_values(&mut out, "cache", &g.cache, measured, |c| c.cache);
    missing_values(&mut out, "burst", &g.burst, measured, |c| c.burst);
    out
}

/// Adds `{axis} {v}` to `out` for each value `v` of the axis (`values`)
/// that no point in `measured` has (`of` reads it from a point).
fn missing_values<T: Copy + PartialEq + std::fmt::Display>(
    out: &mut Vec<String>,
    axis: &str,
    values: &[T],
    measured: &[Config],
    of: fn(&Config) -> T,
) {
    for &v in values {
        if !measured.iter().any(|c| of(c) == v) {
            out.push(format!("{axis} {v}"));
        }
    }
}
