//! `sluice bench mempool` end to end: a JSON row per case, and beside
//! Sluice's figure the same case on DPDK's `rte_mempool` measured in the
//! same run ("DPDK here"), with the bulk size a run-time value and a
//! compile-time constant. That needs a C compiler and Debian's `dpdk-dev`
//! (`pkg-config libdpdk`); without them the column is empty with a note, and
//! this test checks that instead, except under CI (`CI=true`), where they
//! must be there.

mod common;

use std::process::{Command, Stdio};

use common::{assert_success, json_lines, run};

/// Why the DPDK program cannot be built here, if it cannot.
fn toolchain_missing() -> Option<&'static str> {
    let runs = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !runs("cc", &["--version"]) {
        Some("no cc")
    } else if !runs("pkg-config", &["--exists", "libdpdk"]) {
        Some("no libdpdk (pkg-config, dpdk-dev)")
    } else {
        None
    }
}

#[test]
fn bench_mempool_reports_every_case_with_dpdk_measured_beside_it() {
    let out = run(&["bench", "mempool", "--quick", "--json"]);
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rows = json_lines(&out);
    let cores = sluice::lcore::available_cpus().len();
    // Cache 0, 32, 256, 512 × bulk 1, 2, 4, 8, 32, on one core, and on two
    // when there are two CPUs.
    let expected = if cores >= 2 { 40 } else { 20 };
    assert_eq!(rows.len(), expected, "{stderr}");
    for r in &rows {
        assert_eq!(r["bench"], "mempool", "{r}");
        assert!(r["mops"].as_f64().unwrap() > 0.0, "{r}");
        let (min, max) = (
            r["mops_min"].as_f64().unwrap(),
            r["mops_max"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= max, "{r}");
        assert!(r["rounds"].as_u64().unwrap() >= 1, "{r}");
    }
    let missing = toolchain_missing();
    if let Some(why) = missing {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{why} under CI: the DPDK-here column needs cc and dpdk-dev"
        );
        eprintln!("skipped the DPDK-here checks: {why}");
        assert!(stderr.contains("DPDK here: empty"), "{stderr}");
        for r in &rows {
            assert!(r.get("dpdk_here_mops").is_none(), "{r}");
        }
        return;
    }
    for r in &rows {
        let here = r["dpdk_here_mops"].as_f64();
        assert!(
            here.is_some_and(|m| m > 0.0),
            "no DPDK-here figure: {r}\n{stderr}"
        );
        assert!(r["dpdk_here_cycles_per_op"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["vs_dpdk_here"].as_f64().unwrap() > 0.0, "{r}");
        // On one core, bulk 1, 2, 4, 8 and 32 all have DPDK's compile-time form
        // too; two-core cases measure the run-time form only.
        if r["cores"] == 1 {
            assert!(r["dpdk_here_const_mops"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["vs_dpdk_here_const"].as_f64().unwrap() > 0.0, "{r}");
        } else {
            assert!(r.get("dpdk_here_const_mops").is_none(), "{r}");
        }
    }
    let one_core: Vec<&str> = rows
        .iter()
        .filter(|r| r["cores"] == 1)
        .map(|r| r["case"].as_str().unwrap())
        .collect();
    for case in [
        "cache 512 bulk 1",
        "cache 512 bulk 2",
        "cache 512 bulk 4",
        "cache 512 bulk 8",
        "cache 512 bulk 32",
        "cache 0 bulk 1",
    ] {
        assert!(one_core.contains(&case), "{case} missing: {one_core:?}");
    }
}
