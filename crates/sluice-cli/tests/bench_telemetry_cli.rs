//! `sluice bench telemetry` end to end: io forwarding with the telemetry
//! socket polled against not polled, its three JSON rows.

mod common;

use common::{json_lines, run};

#[test]
fn bench_telemetry_reports_both_cases_and_their_ratio() {
    let out = run(&[
        "bench",
        "telemetry",
        "--quick",
        "--iters",
        "16384",
        "--json",
    ]);
    let rows = json_lines(&out);
    let cases: Vec<&str> = rows.iter().map(|r| r["case"].as_str().unwrap()).collect();
    assert_eq!(
        cases,
        [
            "io, telemetry not polled",
            "io, telemetry polled 100/s",
            "polled / not polled"
        ]
    );
    for r in &rows {
        assert_eq!(r["bench"], "telemetry", "{r}");
    }
    for r in &rows[..2] {
        assert!(r["ops"].as_u64().unwrap() >= 16384, "{r}");
        assert!(r["cycles_per_op"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["mops"].as_f64().unwrap() > 0.0, "{r}");
    }
    let ratio = &rows[2];
    let (min, median, max) = (
        ratio["cycles_ratio_min"].as_f64().unwrap(),
        ratio["cycles_ratio"].as_f64().unwrap(),
        ratio["cycles_ratio_max"].as_f64().unwrap(),
    );
    assert!(0.0 < min && min <= median && median <= max, "{ratio}");
    // Each of the rounds' polled slices waits for at least one reply.
    let rounds = ratio["rounds"].as_u64().unwrap();
    assert!(ratio["replies"].as_u64().unwrap() >= rounds, "{ratio}");
}
