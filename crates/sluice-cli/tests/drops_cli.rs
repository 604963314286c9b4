//! Drops by reason at the command line: a generator whose port cannot write
//! a frame names every one it lost, and a run that drops nothing lists no
//! reason.

mod common;
use common::{assert_success, json_lines, run};

/// `sluice gen` into a pcap port on `/dev/full`: no record is written, so
/// every frame is a Tx error, and the report names them all
/// `tx_write_errors` on port 0.
#[test]
fn gen_names_the_frames_its_port_could_not_write() {
    let out = run(&[
        "gen",
        "-p",
        "pcap:tx=/dev/full",
        "--duration",
        "0.1",
        "--json",
    ]);
    assert_success(&out);
    let report = json_lines(&out).pop().expect("a report line");
    assert_eq!(report["type"], "gen");
    let errors = report["tx_errors"].as_u64().unwrap();
    assert!(errors > 0, "{report}");
    assert_eq!(report["sent"].as_u64(), Some(errors), "{report}");
    assert_eq!(
        report["drops_by_reason"],
        serde_json::json!([{"reason": "tx_write_errors", "port": 0, "packets": errors}]),
        "{report}"
    );
}

/// Io forwarding between null ports drops nothing: the table is empty, and
/// the text summary has no "drops by reason" section.
#[test]
fn a_run_that_drops_nothing_lists_no_reason() {
    let args = [
        "fwd",
        "--port",
        "null",
        "--port",
        "null",
        "--duration",
        "0.1",
        "--rxd",
        "128",
        "--txd",
        "128",
    ];
    let mut json = args.to_vec();
    json.push("--json");
    let summary = json_lines(&run(&json)).pop().expect("a summary line");
    assert_eq!(summary["drops"], 0);
    assert_eq!(
        summary["drops_by_reason"],
        serde_json::json!([]),
        "{summary}"
    );
    assert_eq!(summary["pool_full"], true);
    let out = run(&args);
    assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("---- summary"), "{text}");
    assert!(!text.contains("drops by reason"), "{text}");
}
