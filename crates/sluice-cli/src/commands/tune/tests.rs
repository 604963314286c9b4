//! Tests of `sluice tune`: a tiny sweep end to end (its JSON and SVG read
//! back), the plan order, the preset, and bad grid input.

use super::args::{Preset, TuneArgs};
use super::grid::{DEFAULTS, Grid};
use super::plot::BAR_STEPS;
use super::*;

/// Two inline soft ports on a tester of their own (tests run in parallel).
fn specs(tester: &str) -> Vec<String> {
    let s = format!("soft:tester={tester},gen=udp,flows=64,size=64,device=inline");
    vec![s.clone(), s]
}

/// A short tiny-grid run: 2 Rx descriptor counts × 2 cache sizes.
fn tiny(tester: &str) -> TuneArgs {
    let mut a = TuneArgs::with_specs(specs(tester));
    a.rxd = "128,256".into();
    a.txd = "256".into();
    a.cache = "0,64".into();
    a.burst = "32".into();
    a.warmup = 0.02;
    a.duration = 0.05;
    a.confirm = 1;
    a
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-tune-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_tiny_grid_finishes_and_writes_its_json_and_svg() {
    let dir = scratch("tiny");
    let mut args = tiny("tune_unit_tiny");
    args.out_json = Some(dir.join("tune.json"));
    args.out_plot = Some(dir.join("tune.svg"));
    run(&args).unwrap();

    let text = std::fs::read_to_string(dir.join("tune.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["type"], "tune");
    assert_eq!(v["engine"], "io");
    // The four grid points and the defaults (off this grid), all measured.
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 5, "{text}");
    assert_eq!(v["skipped"]["planned"], 5);
    assert_eq!(v["skipped"]["points"], 0);
    assert_eq!(v["skipped"]["plane_complete"], true);
    assert_eq!(points[0]["rxd"], 1024, "the defaults come first");
    for p in points.iter().chain(v["confirm"].as_array().unwrap()) {
        assert_eq!(p["pool_full"], true, "{p}");
        assert_eq!(p["accounted"], true, "{p}");
        // The figures are there (their values depend on the machine: tests
        // running at once share the lcore's CPU, so a window may even see
        // nothing move).
        assert!(p["mpps"].as_f64().unwrap() >= 0.0, "{p}");
        assert!(
            p["busy_cycles"].is_u64() && p["secs"].as_f64().unwrap() > 0.0,
            "{p}"
        );
        assert_eq!(
            (p["drops"].as_u64(), p["rx_missed"].as_u64()),
            (Some(0), Some(0))
        );
    }
    let mut cells: Vec<(u64, u64)> = points[1..]
        .iter()
        .map(|p| (p["rxd"].as_u64().unwrap(), p["cache"].as_u64().unwrap()))
        .collect();
    cells.sort_unstable();
    assert_eq!(cells, [(128, 0), (128, 64), (256, 0), (256, 64)]);
    // Confirmation: the 3 best and the defaults (if not among them), once
    // each.
    let confirm = v["confirm"].as_array().unwrap();
    assert!((TOP..=TOP + 1).contains(&confirm.len()), "{confirm:?}");
    assert!(confirm.iter().any(|p| p["rxd"] == 1024), "{confirm:?}");
    let best = &v["best"];
    assert!(
        best.is_null() || best["mpps"].as_f64().unwrap() > 0.0,
        "{best}"
    );
    assert_eq!(v["defaults"]["rxd"], 1024);
    assert_eq!(v["failed_checks"], 0);
    assert_eq!(
        (v["plane_txd"].as_u64(), v["plane_burst"].as_u64()),
        (Some(256), Some(32))
    );

    let svg = std::fs::read_to_string(dir.join("tune.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    // One rectangle for the background, one per cell, the colour bar's.
    assert_eq!(svg.matches("<rect").count(), 1 + 4 + BAR_STEPS, "{svg}");
    // Each cell is labelled with its Mpps, to two decimals.
    for p in &points[1..] {
        let label = format!("\n{:.2}\n", p["mpps"].as_f64().unwrap());
        assert!(svg.contains(&label), "{label} not in the plot");
    }
    assert!(svg.contains("Mpps, io forwarding, Tx descriptors 256, burst 32"));
    // The same cells as cycles per packet.
    args.plot_figure = args::Figure::Cycles;
    args.out_json = None;
    args.confirm = 0;
    run(&args).unwrap();
    let svg = std::fs::read_to_string(dir.join("tune.svg")).unwrap();
    assert!(svg.contains("cycles per packet, io forwarding"));
    assert_eq!(svg.matches("<rect").count(), 1 + 4 + BAR_STEPS);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_plan_has_the_defaults_then_the_plane_then_every_other_point_once() {
    let mut args = TuneArgs::with_specs(vec![]);
    args.rxd = "128,1024".into();
    args.txd = "512,1024".into();
    args.cache = "32,256".into();
    args.burst = "16,32".into();
    let g = Grid::parse(&args).unwrap();
    assert_eq!(g.plane(), (1024, 32));
    let plan = g.plan(true);
    assert_eq!(plan.len(), 16, "the defaults are on this grid");
    assert_eq!(plan[0], DEFAULTS);
    for c in &plan[1..4] {
        assert_eq!((c.txd, c.burst), (1024, 32), "{c}");
    }
    let mut sorted = plan.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 16);
    assert!(plan.iter().all(|c| g.contains(c)));
    assert_eq!(g.plan(true), plan, "the same order every time");
    // Off the grid, the defaults are one more point; not fitting, none.
    args.rxd = "128".into();
    let g = Grid::parse(&args).unwrap();
    assert_eq!(g.plan(true).len(), g.len() + 1);
    assert_eq!(g.plan(false).len(), g.len());
    assert!(!g.plan(false).contains(&DEFAULTS));
}

#[test]
fn bad_grid_input_is_a_clear_error() {
    let soft = specs("tune_unit_bad");
    let err = |f: &dyn Fn(&mut TuneArgs)| {
        let mut a = tiny("tune_unit_bad");
        f(&mut a);
        run(&a).unwrap_err()
    };
    let empty = "the list is empty (give values separated by commas, e.g. 128,256)";
    let port0 = &soft[0];
    // (option, its value, the error).
    let cases = [
        ("rxd", "", format!("--rxd: {empty}")),
        ("burst", " ", format!("--burst: {empty}")),
        (
            "txd",
            "0",
            "--txd 0: descriptors per queue are 1 to 65535 (and what the port takes)".into(),
        ),
        (
            "rxd",
            "128,100",
            format!("--rxd 100: port 0 ({port0}) takes only powers of two Rx descriptors"),
        ),
        (
            "txd",
            "8192",
            format!("--txd 8192: port 0 ({port0}) takes 64 to 4096 Tx descriptors"),
        ),
        (
            "rxd",
            "32",
            format!("--rxd 32: port 0 ({port0}) takes 64 to 4096 Rx descriptors"),
        ),
        (
            "cache",
            "0,1024",
            "--cache 1024: a mempool cache holds 0 to 512 buffers".into(),
        ),
        ("burst", "0", "--burst 0: a burst is 1 to 64 packets".into()),
        (
            "burst",
            "65",
            "--burst 65: a burst is 1 to 64 packets".into(),
        ),
        (
            "burst",
            "8,,16",
            "--burst '8,,16': an empty item in the list".into(),
        ),
        ("cache", "x", "--cache: 'x' is not a number".into()),
        ("rxd", "-1", "--rxd: '-1' is not a number".into()),
    ];
    for (option, value, want) in cases {
        let set = |a: &mut TuneArgs| {
            let list = match option {
                "rxd" => &mut a.rxd,
                "txd" => &mut a.txd,
                "burst" => &mut a.burst,
                "cache" => &mut a.cache,
                _ => unreachable!("an option of the table above"),
            };
            *list = value.into();
        };
        assert_eq!(err(&set), want, "--{option} '{value}'");
    }
    // A bad spec: the driver's own error (its key list is the driver's).
    let e = err(&|a| a.port_specs.specs = vec!["soft:nonsense=1".into()]);
    assert!(
        e.starts_with("port spec 'soft:nonsense=1': driver 'soft' has no key 'nonsense' (keys: "),
        "{e}"
    );
    // A driver without the power-of-two rule takes 100 (null ports).
    let mut a = tiny("unused");
    a.port_specs.specs = vec!["null".into(), "null".into()];
    a.rxd = "100".into();
    let g = Grid::parse(&a).unwrap();
    g.check_ports(&probe(&a.all_specs()).unwrap()).unwrap();
}

#[test]
fn passes_repeat_the_plan_and_rows_take_the_medians() {
    let mut args = tiny("tune_unit_passes");
    args.passes = 3;
    args.rxd = "128".into();
    args.cache = "32".into();
    args.confirm = 0;
    let g = Grid::parse(&args).unwrap();
    let setup = point::Setup {
        specs: args.all_specs(),
        engine: args.engine,
        warmup: 0.01,
        duration: 0.02,
        tx_retry: 0,
    };
    let r = sweep(&args, &g, &setup, &probe(&args.all_specs()).unwrap()).unwrap();
    // The defaults and the one grid point, three times, alternating.
    assert_eq!(r.points.len(), 6);
    assert_eq!(r.points[0].config, r.points[2].config);
    assert_eq!(r.rows.len(), 2);
    for row in &r.rows {
        assert_eq!(row.runs, 3);
        let mut m: Vec<f64> = r
            .points
            .iter()
            .filter(|p| p.config == row.point.config)
            .map(|p| p.mpps)
            .collect();
        m.sort_by(f64::total_cmp);
        assert_eq!(row.point.mpps, m[1], "the median of three");
        assert!(row.point.pool_full && row.point.accounted);
    }
    assert_eq!((r.skipped.planned, r.skipped.measured), (6, 6));
}

#[test]
fn lists_are_sorted_and_repeats_dropped() {
    let mut a = TuneArgs::with_specs(vec![]);
    a.rxd = "512, 128,512".into();
    a.cache = "256,0".into();
    let g = Grid::parse(&a).unwrap();
    assert_eq!(g.rxd, [128, 512]);
    assert_eq!(g.cache, [0, 256]);
    assert_eq!(g.len(), 2 * 6 * 2 * 4);
}

#[test]
fn the_l2fwd_preset_measures_both_settings_alternately() {
    let dir = scratch("preset");
    let mut args = tiny("tune_unit_preset");
    args.preset = Some(Preset::L2fwdDefaults);
    args.warmup = 0.01;
    args.duration = 0.02;
    args.out_json = Some(dir.join("preset.json"));
    run(&args).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("preset.json")).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2 * preset::MIN_REPS as usize);
    let rxd: Vec<u64> = runs.iter().map(|r| r["rxd"].as_u64().unwrap()).collect();
    assert_eq!(&rxd[..4], [128, 1024, 1024, 128]);
    assert!(
        runs.iter()
            .all(|r| r["pool_full"] == true && r["accounted"] == true)
    );
    assert_eq!(v["old"]["txd"], 512);
    assert_eq!(v["old"]["cache"], 32);
    assert_eq!(v["new"]["samples"], preset::MIN_REPS);
    assert!(v["speedup"].as_f64().unwrap() >= 0.0);
    args.out_plot = Some(dir.join("no.svg"));
    assert_eq!(
        run(&args).unwrap_err(),
        "--out-plot draws a sweep's heatmap; a preset has none"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_budget_cuts_the_sweep_and_says_what_it_skipped() {
    let mut args = tiny("tune_unit_budget");
    args.budget = 0.05;
    args.confirm = 0;
    let g = Grid::parse(&args).unwrap();
    let ports = probe(&args.all_specs()).unwrap();
    let setup = point::Setup {
        specs: args.all_specs(),
        engine: args.engine,
        warmup: args.warmup,
        duration: args.duration,
        tx_retry: 0,
    };
    let r = sweep(&args, &g, &setup, &ports).unwrap();
    // The first point always runs; none fits after it.
    assert_eq!(r.points.len(), 1);
    assert_eq!(r.points[0].config, DEFAULTS);
    assert!(r.points[0].pool_full);
    assert_eq!((r.skipped.planned, r.skipped.points), (5, 4));
    assert_eq!(
        r.skipped.never_measured,
        ["rxd 128", "rxd 256", "txd 256", "cache 0", "cache 64"]
    );
    assert!(!r.skipped.plane_complete);
    assert!(r.confirm.is_empty());
    let cells = plane_cells(&r, args::Figure::Mpps);
    assert_eq!(cells, vec![vec![None, None], vec![None, None]]);
    // The only point is the best (unless nothing moved in its window).
    if r.points[0].mpps > 0.0 {
        assert_eq!(r.best.as_ref().map(|b| b.config), Some(DEFAULTS));
        assert_eq!(r.defaults_gap_pct, Some(0.0));
    } else {
        assert_eq!((r.best.as_ref(), r.defaults_gap_pct), (None, None));
    }
    let mut a = args.clone();
    a.rank = args::Figure::Cycles;
    let r = sweep(&a, &g, &setup, &ports).unwrap();
    assert_eq!(r.points.len(), 1);
    if let Some(b) = &r.best {
        assert_eq!(b.config, DEFAULTS);
    }
}
