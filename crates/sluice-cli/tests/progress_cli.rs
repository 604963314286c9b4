//! Progress of `sluice tune` and `sluice bench all` when stderr is not a
//! terminal: one plain line per step on stderr (`[i/n] label: ...`), in
//! order, and nothing of it on stdout, whose `--json` lines stay one
//! object each.

mod common;

use common::{json_lines, run};

/// A progress line: its step, the total it gave, and what it says after
/// `label: `.
#[derive(Debug)]
struct Step {
    i: usize,
    n: usize,
    msg: String,
}

/// The progress lines of `label` in `stderr`, in order.
fn steps(stderr: &[u8], label: &str) -> Vec<Step> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter_map(|line| {
            let (count, rest) = line.strip_prefix('[')?.split_once("] ")?;
            let msg = rest.strip_prefix(label)?.strip_prefix(": ")?;
            let (i, n) = count.split_once('/')?;
            Some(Step {
                i: i.parse().ok()?,
                n: n.parse().ok()?,
                msg: msg.to_owned(),
            })
        })
        .collect()
}

/// Asserts the steps count 1, 2, ... up to their last total, no step past
/// the total it gave.
fn assert_counted(steps: &[Step]) {
    for (k, s) in steps.iter().enumerate() {
        assert_eq!(s.i, k + 1, "{steps:?}");
        assert!(s.i <= s.n, "{steps:?}");
    }
    let last = steps.last().expect("progress lines");
    assert_eq!(
        last.n,
        steps.len(),
        "the last step closes the count: {steps:?}"
    );
}

#[test]
fn tune_prints_one_progress_line_per_measured_point_in_order() {
    let out = run(&[
        "tune",
        "--rxd",
        "128,256",
        "--txd",
        "256",
        "--cache",
        "0",
        "--burst",
        "32",
        "--warmup",
        "0.02",
        "--duration",
        "0.05",
        "--confirm",
        "1",
        "--json",
    ]);
    let lines = json_lines(&out);
    let measured: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| v["type"] == "point" || v["type"] == "confirm")
        .collect();
    assert_eq!(
        lines.len(),
        measured.len() + 1,
        "points, confirmations, a summary"
    );
    assert_eq!(lines.last().unwrap()["type"], "summary");

    let steps = steps(&out.stderr, "tune");
    assert_counted(&steps);
    // The defaults and the two grid points, then the three confirmed.
    assert_eq!(steps.len(), 6, "{steps:?}");
    assert_eq!(steps.len(), measured.len());
    for (s, v) in steps.iter().zip(&measured) {
        let config = format!(
            "{} rxd {} txd {} cache {} burst {}: ",
            v["type"].as_str().unwrap(),
            v["rxd"],
            v["txd"],
            v["cache"],
            v["burst"]
        );
        assert!(s.msg.starts_with(&config), "{s:?} against {v}");
    }
}

#[test]
fn bench_all_prints_one_progress_line_per_part_in_order() {
    let out = run(&["bench", "all", "--quick", "--iters", "200", "--json"]);
    // Every stdout line is a result object; the parts' results come in the
    // order the progress lines name them.
    let mut parts: Vec<String> = Vec::new();
    for v in json_lines(&out) {
        let bench = v["bench"].as_str().expect("a result names its part");
        if parts.last().map(String::as_str) != Some(bench) {
            parts.push(bench.to_owned());
        }
    }
    let steps = steps(&out.stderr, "bench");
    assert_counted(&steps);
    let named: Vec<&str> = steps.iter().map(|s| s.msg.as_str()).collect();
    assert_eq!(
        named,
        [
            "ring",
            "mempool",
            "mbuf",
            "fwd",
            "recycle",
            "distributor",
            "lpm",
            "mpwqe",
            "pagepool",
            "telemetry"
        ]
    );
    assert_eq!(parts, named);
}

#[test]
fn a_single_bench_part_prints_no_progress() {
    let out = run(&["bench", "mbuf", "--iters", "200", "--json"]);
    assert!(!json_lines(&out).is_empty());
    assert!(steps(&out.stderr, "bench").is_empty());
}
