//! Watching running instances: the telemetry socket every long-running
//! command serves under `--file-prefix`, `sluice stats` reading it, the
//! Prometheus endpoint of `--metrics`, and `--no-telemetry`.
//!
//! Each test runs its instances in a runtime directory of its own
//! (`RUNTIME_DIRECTORY`), so tests run side by side.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{SLUICE, summary_of};

const SOFT: &str = "soft:tester=observe,gen=udp,flows=16,size=64,device=inline";

/// `sluice ARGS` under `runtime_dir`, its output piped.
fn sluice_in(runtime_dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(SLUICE);
    cmd.args(args)
        .env("RUNTIME_DIRECTORY", runtime_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits (bounded: 60 s in 50 ms steps) until `path` exists, or `child`
/// ended; whether it exists.
fn wait_for(path: &Path, child: &mut Child) -> bool {
    for _ in 0..1200 {
        if path.exists() {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Reads `child`'s standard output to its first line (a `--json` run's
/// first stats line: it is forwarding); the rest of its output.
fn forwarding(child: &mut Child) -> BufReader<std::process::ChildStdout> {
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"type\":\"stats\""), "{line}");
    stdout
}

/// SIGINT to `child` (whose standard output `forwarding` took), then its
/// exit and the summary on `stdout`, with every buffer back in its pool.
fn interrupt_clean(child: Child, mut stdout: BufReader<std::process::ChildStdout>) {
    let out = interrupt(child);
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let summary = summary_of(rest.as_bytes());
    assert_eq!(summary["pool_full"], true, "{summary}");
}

/// SIGINT to `child`, then its output (it drains and prints its summary).
fn interrupt(child: Child) -> std::process::Output {
    // SAFETY: kill(2) with a process id this test started and has not
    // waited for yet (so the id is still its own).
    let r = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
    child.wait_with_output().unwrap()
}

/// The socket of `prefix` under `dir`.
fn socket(dir: &Path, prefix: &str) -> PathBuf {
    dir.join("dpdk").join(prefix).join("dpdk_telemetry.v2")
}

#[test]
fn stats_watches_a_running_fwd_and_a_second_instance_cannot_take_its_prefix() {
    let dir = common::runtime_dir();
    let prefix = "obs-fwd";
    let mut fwd = sluice_in(
        &dir,
        &[
            "fwd",
            "--json",
            "--duration",
            "600",
            "--file-prefix",
            prefix,
            "-p",
            SOFT,
            "-p",
            SOFT,
        ],
    )
    .spawn()
    .unwrap();
    assert!(
        wait_for(&socket(&dir, prefix), &mut fwd),
        "no telemetry socket"
    );
    let stdout = forwarding(&mut fwd);

    // Two refreshes, each with the ports and rates above zero.
    let out = sluice_in(
        &dir,
        &[
            "stats",
            "--file-prefix",
            prefix,
            "--count",
            "2",
            "--json",
            "--interval",
            "0.5",
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refreshes: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(refreshes.len(), 2, "{refreshes:?}");
    for r in &refreshes {
        assert_eq!(r["type"], "stats", "{r}");
        assert_eq!(r["command"], "fwd", "{r}");
        assert_eq!(r["pid"], fwd.id(), "{r}");
        assert_eq!(r["ports"].as_array().unwrap().len(), 2, "{r}");
        assert_eq!(r["ports"][0]["driver"], "soft", "{r}");
        for p in r["rates"]["ports"].as_array().unwrap() {
            assert!(p["rx_pps"].as_f64().unwrap() > 0.0, "{r}");
            assert!(p["tx_bps"].as_f64().unwrap() > 0.0, "{r}");
        }
        assert_eq!(r["lcores"].as_array().unwrap().len(), 1, "{r}");
        assert_eq!(r["pools"][0]["name"], "fwd", "{r}");
        // The tester measures each port's one-way latency.
        let latency = r["latency"].as_array().unwrap();
        assert_eq!(latency.len(), 2, "{r}");
        assert!(
            latency.iter().all(|l| l["samples"].as_u64().unwrap() > 0),
            "{r}"
        );
        // Both ports' Rx rings hold posted buffers while they run.
        assert_eq!(
            r["pools"][0]["rx_posted"].as_array().unwrap().len(),
            2,
            "{r}"
        );
    }

    // --list finds it, with its pid and command.
    let out = sluice_in(&dir, &["stats", "--list", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["file_prefix"], prefix);
    assert_eq!(listed[0]["pid"], fwd.id());
    assert_eq!(listed[0]["command"], "fwd");

    // A second instance under the same prefix fails before forwarding.
    let out = sluice_in(
        &dir,
        &[
            "fwd",
            "--duration",
            "1",
            "--file-prefix",
            prefix,
            "-p",
            "null",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("file prefix '{prefix}' is in use")) && err.contains("--file-prefix"),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "it forwarded: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    interrupt_clean(fwd, stdout);
    assert!(
        !socket(&dir, prefix).exists(),
        "the socket outlived its instance"
    );

    // Nothing to watch any more: a clear error.
    let out = sluice_in(&dir, &["stats", "--file-prefix", prefix, "--count", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("file prefix '{prefix}'")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stats_of_a_running_dist_counts_the_distributor_s_buffers_in_flight() {
    let dir = common::runtime_dir();
    let prefix = "obs-dist";
    let mut dist = sluice_in(
        &dir,
        &[
            "dist",
            "--json",
            "--duration",
            "600",
            "--workers",
            "2",
            "--file-prefix",
            prefix,
        ],
    )
    .spawn()
    .unwrap();
    assert!(
        wait_for(&socket(&dir, prefix), &mut dist),
        "no telemetry socket"
    );
    let stdout = forwarding(&mut dist);
    let out = sluice_in(
        &dir,
        &["stats", "--file-prefix", prefix, "--count", "1", "--json"],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["command"], "dist", "{r}");
    let pools = r["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 1, "{r}");
    // The distributor is a place buffers are counted in (its count is
    // whatever it holds at that instant).
    let places: Vec<&str> = pools[0]["in_flight"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f[0].as_str().unwrap())
        .collect();
    assert_eq!(places, ["distributor"], "{r}");
    interrupt_clean(dist, stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_telemetry_serves_no_socket() {
    let dir = common::runtime_dir();
    let mut fwd = sluice_in(
        &dir,
        &[
            "fwd",
            "--json",
            "--duration",
            "600",
            "--stats-period",
            "0.1",
            "--no-telemetry",
            "-p",
            "null",
        ],
    )
    .spawn()
    .unwrap();
    let stdout = forwarding(&mut fwd);
    assert!(
        !dir.join("dpdk").exists(),
        "a socket under {}",
        dir.display()
    );
    interrupt_clean(fwd, stdout);
}

#[test]
fn metrics_are_served_while_fwd_runs_and_promtool_accepts_them() {
    let dir = common::runtime_dir();
    let mut fwd = sluice_in(
        &dir,
        &[
            "fwd",
            "--json",
            "--duration",
            "600",
            "--no-telemetry",
            "--metrics",
            "127.0.0.1:0",
            "-p",
            SOFT,
            "-p",
            SOFT,
        ],
    )
    .spawn()
    .unwrap();
    // The address it bound, from its standard error.
    let mut stderr = BufReader::new(fwd.stderr.take().unwrap());
    let mut addr = None;
    let mut line = String::new();
    while addr.is_none() && stderr.read_line(&mut line).unwrap() > 0 {
        addr = line
            .split_once("metrics at http://")
            .and_then(|(_, rest)| rest.split_once("/metrics"))
            .map(|(a, _)| a.to_owned());
        line.clear();
    }
    let addr = addr.expect("the metrics address on stderr");
    let stdout = forwarding(&mut fwd);
    let mut conn = TcpStream::connect(&addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    for family in [
        "sluice_port_rx_packets_total{port=\"0\"}",
        "sluice_lcore_packets_total{lcore=\"0\"}",
        "sluice_pool_buffers{pool=\"fwd\"}",
        "sluice_pool_census_buffers{pool=\"fwd\",place=\"rx_posted\"}",
        "# TYPE sluice_tester_latency_seconds histogram",
        "sluice_tester_latency_seconds_bucket{port=\"0\",le=\"0.001\"}",
        "sluice_tester_latency_seconds_bucket{port=\"1\",le=\"+Inf\"}",
        "sluice_tester_latency_seconds_count{port=\"1\"}",
    ] {
        assert!(body.contains(family), "{family} missing: {body}");
    }
    interrupt_clean(fwd, stdout);
    drop(stderr);

    if std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v != "true"),
            "no promtool under CI"
        );
        eprintln!("skipped: no promtool");
        return;
    }
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
