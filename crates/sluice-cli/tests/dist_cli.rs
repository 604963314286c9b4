//! `sluice dist` and `sluice bench distributor` end to end: the built
//! binary, its JSON output and its errors.

mod common;
use common::{assert_tester_got_everything, json_lines, run};

#[test]
fn dist_with_no_ports_runs_the_tester_pipeline_and_loses_nothing() {
    // Ended by a packet count, not a time, so every flow shows up however
    // slow the machine is (the duration is only an upper bound).
    let out = run(&[
        "dist",
        "--packets",
        "20000",
        "--duration",
        "60",
        "--workers",
        "2",
        "--rxd",
        "256",
        "--txd",
        "256",
        "--json",
    ]);
    let lines = json_lines(&out);
    let s = lines.last().expect("a summary line");
    assert_eq!(s["type"], "summary");
    assert_eq!(s["api"], "burst");
    assert_eq!(s["workers"], 2);
    // Every packet forwarded once and intact: the tester saw each one it
    // sent, in order per flow, uncorrupted.
    let sent = assert_tester_got_everything(s, "dist");
    assert_eq!(s["clean"], true);
    // Every port is on the tester: the drain says it accounted for every
    // frame, as `sluice fwd`'s does.
    assert_eq!(s["drain_accounted"], true, "{s}");
    // The workers' counts sum to the packets forwarded; the distributor's
    // own counts agree.
    let workers = s["per_worker"].as_array().unwrap();
    assert_eq!(workers.len(), 2);
    let handled: u64 = workers.iter().map(|w| w["packets"].as_u64().unwrap()).sum();
    assert_eq!(handled, sent);
    for w in workers {
        assert_eq!(w["packets"], w["handed"], "{w}");
    }
    assert_eq!(s["rx_packets"].as_u64(), Some(sent));
    assert_eq!(s["tx_packets"].as_u64(), Some(sent));
    assert_eq!(s["distributor"]["distributed"].as_u64(), Some(sent));
    assert_eq!(s["distributor"]["returned"].as_u64(), Some(sent));
    assert_eq!(s["distributor"]["tx_refused"], 0);
    assert_eq!(s["drops_by_reason"], serde_json::json!([]), "{s}");
    assert_eq!(s["counts_match"], true);
    // Both tester streams' 1024 flows, every one seen.
    assert_eq!(s["spread"]["flows"], 2048);
    let share = s["spread"]["max_share"].as_f64().unwrap();
    assert!((0.5..=1.0).contains(&share), "{share}");
    assert_eq!(s["pool_full"], true);
}

#[test]
fn dist_with_a_scalar_matcher_on_named_ports_prints_a_text_summary() {
    let spec = "soft:tester=cli_dist,gen=udp,flows=16,size=64,device=inline";
    let out = run(&[
        "dist",
        "-p",
        spec,
        "-p",
        spec,
        "--api",
        "burst-scalar",
        "--workers",
        "1",
        "--packets",
        "3000",
        "--duration",
        "30",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("---- summary: burst-scalar API (scalar matching), 1 worker"),
        "{text}"
    );
    assert!(text.contains("worker 0: "), "{text}");
    assert!(text.contains("flow spread: 32 flows"), "{text}");
    assert!(text.contains("= sent + refused: yes"), "{text}");
    assert!(text.contains("pool: every mbuf back"), "{text}");
    assert!(
        text.contains(
            "drain: every frame the testers sent was received or counted as a drop \
             (refused, missed, Rx or Tx error)"
        ),
        "{text}"
    );
    let tester = text
        .lines()
        .find(|l| l.starts_with("tester cli_dist: "))
        .expect("a tester line");
    assert!(
        tester.ends_with("clean") && tester.contains("lost 0,"),
        "{tester}"
    );
}

#[test]
fn dist_on_ports_not_all_on_a_tester_says_nothing_of_the_drain() {
    let out = run(&[
        "dist",
        "-p",
        "null",
        "-p",
        "null",
        "--duration",
        "0.2",
        "--json",
    ]);
    assert!(out.status.success());
    let lines = json_lines(&out);
    let s = lines.last().expect("a summary line");
    assert_eq!(s["type"], "summary");
    assert!(s.get("drain_accounted").is_none(), "{s}");
    assert_eq!(s["clean"], true);
}

#[test]
fn dist_errors_are_clear() {
    let out = run(&["dist", "--workers", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["dist", "-p", "null:size=5", "--duration", "0.1"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "sluice: error: port spec 'null:size=5': key 'size' = '5' is not a number in 14..=9000\n"
    );
}

#[test]
fn bench_distributor_rows_parse_with_their_fields() {
    let out = run(&["bench", "distributor", "--iters", "4000", "--json"]);
    let rows = json_lines(&out);
    let apis: Vec<&str> = rows
        .iter()
        .filter(|r| r["workers"] == 1)
        .map(|r| r["api"].as_str().unwrap())
        .collect();
    assert_eq!(apis, ["burst", "burst-scalar", "single"]);
    // 1, 2, 4 and 8 workers for each API.
    assert_eq!(rows.len(), 12);
    for r in &rows {
        assert_eq!(r["bench"], "distributor");
        let workers = r["workers"].as_u64().unwrap();
        assert!([1, 2, 4, 8].contains(&workers), "{r}");
        let case = r["case"].as_str().unwrap();
        assert!(case.starts_with(r["api"].as_str().unwrap()), "{case}");
        assert!(r["cycles_per_op"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["mops"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["ops"].as_u64().unwrap() > 0, "{r}");
        assert!(r["excluded_share"].as_f64().unwrap() < 1.0, "{r}");
        assert_eq!(r["bulk"], 32);
        assert_eq!(r["rounds"], 1);
        assert!(r["workers_per_core"].as_u64().unwrap() >= 1);
        assert!(r["line_round_trip"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["ratio_vs_burst"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["tsc_hz"].as_u64().unwrap() > 0);
        assert!(r["cycles_min"].is_f64() && r["cycles_max"].is_f64());
        assert!(r["returns_full"].is_u64());
        assert!(r["matching"].is_string());
    }
}
