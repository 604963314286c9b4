//! `sluice bench fwd` end to end with DPDK's testpmd over `net_null`
//! measured in the same run: `--case null` prints Sluice's null rows and
//! testpmd's, the null rows carrying testpmd's figure and their ratio to
//! it; the soft io row carries testpmd io's figure too. Without
//! `dpdk-testpmd` (or DPDK's `net_null` driver) the testpmd rows are
//! skipped with the reason and the null rows keep only the fixed reference,
//! which this test checks instead, except under CI (`CI=true`), where
//! testpmd must be there.

mod common;

use std::process::{Command, Stdio};

use common::{assert_success, json_lines, run};
use serde_json::Value;

/// Why testpmd over `net_null` cannot run here, if it cannot.
fn testpmd_missing() -> Option<&'static str> {
    let found = Command::new("sh")
        .args(["-c", "command -v dpdk-testpmd"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        return Some("no dpdk-testpmd");
    }
    let net_null = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|arch| std::fs::read_dir(arch.path().join("dpdk")).ok())
        .flatten()
        .flatten()
        .any(|dir| dir.path().join("librte_net_null.so").exists());
    if !net_null {
        return Some("no DPDK net_null driver");
    }
    None
}

/// The row of `case` among `rows`.
fn row<'a>(rows: &'a [Value], case: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["case"] == case)
        .unwrap_or_else(|| panic!("no `{case}` row in {rows:?}"))
}

#[test]
fn bench_fwd_measures_testpmd_over_net_null_beside_null_and_soft_io() {
    let out = run(&["bench", "fwd", "--case", "null", "--quick", "--json"]);
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rows = json_lines(&out);
    for case in ["null io", "null mac"] {
        let r = row(&rows, case);
        assert_eq!(r["bench"], "fwd", "{r}");
        assert!(r["cycles_per_op"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["ops"].as_u64().unwrap() > 0, "{r}");
        // The fixed reference stays, with or without testpmd.
        assert!(r["dpdk_cycles_per_op"].as_f64().unwrap() > 0.0, "{r}");
    }
    if let Some(why) = testpmd_missing() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{why} under CI: the testpmd rows need dpdk-testpmd with net_null"
        );
        eprintln!("skipped the testpmd checks: {why}");
        assert!(
            stderr.contains("testpmd null io (same run)") && stderr.contains("skipped: no"),
            "{stderr}"
        );
        assert_eq!(rows.len(), 2, "{rows:?}");
        for r in &rows {
            assert!(r.get("dpdk_same_run_cycles_per_op").is_none(), "{r}");
        }
        return;
    }
    assert_eq!(rows.len(), 4, "{rows:?}\n{stderr}");
    for (case, testpmd_case) in [
        ("null io", "testpmd null io (same run)"),
        ("null mac", "testpmd null mac (same run)"),
    ] {
        let testpmd = row(&rows, testpmd_case);
        let cycles = testpmd["cycles_per_op"].as_f64().unwrap();
        assert!(cycles > 0.0, "{testpmd}");
        assert!(testpmd["ops"].as_u64().unwrap() > 0, "{testpmd}");
        assert_eq!(
            (testpmd["bulk"].as_u64(), testpmd["cache"].as_u64()),
            (Some(32), Some(256)),
            "{testpmd}"
        );
        let sluice = row(&rows, case);
        assert_eq!(
            sluice["dpdk_same_run_cycles_per_op"].as_f64(),
            Some(cycles),
            "{sluice}"
        );
        assert!(
            sluice["vs_dpdk_same_run"].as_f64().unwrap() > 0.0,
            "{sluice}"
        );
    }
    // The soft io (vector) row alone: testpmd io runs as its reference,
    // its figure in the row, its own row not printed.
    let out = run(&[
        "bench",
        "fwd",
        "--case",
        "soft io (inline)",
        "--json",
        "--iters",
        "32768",
    ]);
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 1, "{rows:?}\n{stderr}");
    let soft = row(&rows, "soft io (inline)");
    assert!(
        soft["dpdk_same_run_cycles_per_op"].as_f64().unwrap() > 0.0,
        "{soft}"
    );
    assert!(soft["vs_dpdk_same_run"].as_f64().unwrap() > 0.0, "{soft}");
    assert!(
        stderr.contains("soft io (inline) / testpmd null io (same run): "),
        "{stderr}"
    );
}
