//! `sluice fwd` end to end: the built binary, its JSON summary and its
//! errors.

mod common;
use common::{assert_tester_got_everything, fwd_pair, json_lines, run, summary, summary_of};

#[test]
fn fwd_over_null_ports_prints_a_json_summary_with_packets() {
    let out = run(&[
        "fwd",
        "--port",
        "null",
        "--port",
        "null",
        "--duration",
        "0.3",
        "--json",
        "--rxd",
        "128",
        "--txd",
        "128",
    ]);
    let lines = json_lines(&out);
    let summary = lines.last().expect("a summary line");
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["engine"], "io");
    let ports = summary["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 2);
    for p in ports {
        let rx = p["rx_packets"].as_u64().unwrap();
        assert!(rx > 0, "{p}");
        assert_eq!(p["drops"], 0);
    }
    // Io over two null ports: what port 0 receives, port 1 sends.
    assert_eq!(ports[0]["rx_packets"], ports[1]["tx_packets"]);
    assert!(summary["cycles_per_packet"].as_f64().unwrap() > 0.0);
    assert_eq!(summary["pool_full"], true);
    assert_eq!(summary["clean"], true);
}

#[test]
fn a_bad_spec_prints_the_error_and_fails() {
    let out = run(&[
        "fwd",
        "--port",
        "null",
        "--port",
        "null:size=5",
        "--duration",
        "0.1",
    ]);
    assert!(!out.status.success());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "sluice: error: port spec 'null:size=5': key 'size' = '5' is not a number in 14..=9000\n"
    );
    assert!(out.stdout.is_empty());
}

/// The summary of `sluice fwd` between two ports of `spec` for 0.2 s with
/// 256 descriptors, and `extra` arguments.
fn fwd_pair_summary(spec: &str, extra: &[&str]) -> serde_json::Value {
    summary(&fwd_pair(spec, spec, extra))
}

#[test]
fn fwd_between_soft_ports_and_the_tester_loses_nothing() {
    let spec = "soft:tester=cli_test,gen=udp,flows=64,size=64,device=inline";
    let summary = fwd_pair_summary(spec, &["--cores", "2"]);
    let sent = assert_tester_got_everything(&summary, "cli_test");
    assert_eq!(summary["clean"], true);
    assert_eq!(summary["pool_full"], true);
    // Two lcores, two queues per port (RSS), every packet forwarded.
    assert_eq!(summary["cores"], 2);
    assert_eq!(summary["ports"][0]["queues"], 2);
    assert_eq!(summary["rx_packets"], summary["tx_packets"]);
    assert_eq!(summary["rx_packets"].as_u64(), Some(sent));
}

#[test]
fn two_testers_on_a_pair_count_each_others_frames_as_foreign() {
    // Each port on its own tester: each tester's frames reach the other's
    // port, and neither takes them for its own stream 0.
    let out = fwd_pair(
        "soft:tester=cli_pair_a,gen=udp,flows=16,count=32,device=inline",
        "soft:tester=cli_pair_b,gen=udp,flows=16,count=32,device=inline",
        &[],
    );
    // Nothing came back to the tester that sent it: not clean.
    assert_eq!(out.status.code(), Some(1));
    let summary = summary_of(&out.stdout);
    assert_eq!(summary["clean"], false);
    let testers = summary["testers"].as_array().unwrap();
    assert_eq!(testers.len(), 2, "{summary}");
    assert_eq!(summary["drops"], 0);
    assert_eq!(summary["pool_full"], true);
    // The drain saw every frame arrive, at the other tester.
    assert_eq!(summary["drain_accounted"], true);
    for (me, other) in [(&testers[0], &testers[1]), (&testers[1], &testers[0])] {
        let sent = me["sent"].as_u64().unwrap();
        assert!(sent > 0, "{me}");
        assert_eq!(other["foreign"].as_u64(), Some(sent), "{other}");
        assert_eq!(me["received"], 0, "{me}");
        assert_eq!(me["lost"].as_u64(), Some(sent), "{me}");
        for count in ["reordered", "duplicates", "corrupt"] {
            assert_eq!(me[count], 0, "{count}: {me}");
        }
    }
}

#[test]
fn recycle_engine_between_soft_ports_recycles_and_the_tester_sees_everything() {
    let spec = "soft:tester=cli_recycle,gen=udp,flows=64,size=64,device=inline";
    let summary = fwd_pair_summary(spec, &["--engine", "recycle"]);
    assert_eq!(summary["engine"], "recycle");
    assert_eq!(summary["recycle_errors"], 0);
    assert_tester_got_everything(&summary, "cli_recycle");
    assert_eq!(summary["clean"], true);
    assert_eq!(summary["pool_full"], true);
    assert_eq!(summary["drops"], 0);
    // Each port's Rx queue is fed by the other port's Tx queue.
    let ports = summary["ports"].as_array().unwrap();
    for (rx, tx) in [(0, 1), (1, 0)] {
        let r = &ports[rx]["recycle"];
        let t = &ports[tx]["recycle"];
        assert!(r["rx_recycled"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["rx_recycled"], t["tx_recycled"]);
        assert_eq!(t["recycle_fallbacks"], 0);
    }
}

#[test]
fn recycle_engine_on_null_ports_is_an_error_naming_the_queue() {
    let out = run(&[
        "fwd",
        "--port",
        "null",
        "--port",
        "null",
        "--engine",
        "recycle",
        "--duration",
        "0.1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "sluice: error: --engine recycle: port 0 (null) Rx queue 0 cannot recycle buffers: \
         driver 'null' does not support it (soft and afxdp ports do)\n"
    );
    assert!(out.stdout.is_empty());
}

/// Soft ports with the smallest Tx ring and bursts as large: the Tx queues
/// cannot take every burst, and what they refuse is named `tx_full` on its
/// Tx port. The reasons add up to every drop the ports counted, which is
/// every frame the tester lost.
#[test]
fn a_tiny_tx_ring_drops_with_a_reason_and_the_reasons_add_up() {
    let spec = "soft:tester=cli_tiny_txd,gen=udp,flows=64,size=64,device=inline";
    let out = run(&[
        "fwd",
        "--port",
        spec,
        "--port",
        spec,
        "--duration",
        "0.2",
        "--json",
        "--rxd",
        "1024",
        "--txd",
        "64",
        "--burst",
        "64",
    ]);
    // Frames were lost (dropped): the run is not clean, the summary is there.
    assert_eq!(out.status.code(), Some(1));
    let summary = summary_of(&out.stdout);
    assert_eq!(summary["pool_full"], true);
    let drops = summary["drops"].as_u64().unwrap();
    assert!(drops > 0, "{summary}");
    let table = summary["drops_by_reason"].as_array().unwrap();
    let count = |reason: &str, port: u64| {
        table
            .iter()
            .find(|d| d["reason"] == reason && d["port"] == port)
            .map_or(0, |d| d["packets"].as_u64().unwrap())
    };
    let ports = summary["ports"].as_array().unwrap();
    let mut counted = 0;
    for (i, p) in ports.iter().enumerate() {
        assert_eq!(
            count("tx_full", i as u64),
            p["drops"].as_u64().unwrap(),
            "{p}"
        );
        for field in ["drops", "rx_missed", "rx_nombuf", "rx_errors", "tx_errors"] {
            counted += p[field].as_u64().unwrap();
        }
    }
    for d in table {
        assert!(d["packets"].as_u64().unwrap() > 0, "no row at zero: {d}");
    }
    let sum: u64 = table.iter().map(|d| d["packets"].as_u64().unwrap()).sum();
    assert_eq!(sum, counted, "{table:?}");
    assert_eq!(summary["testers"][0]["lost"].as_u64(), Some(sum));
}

/// The sum of a JSON census list's counts: the last element of each entry.
fn census_sum(list: &serde_json::Value) -> u64 {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_array().unwrap().last().unwrap().as_u64().unwrap())
        .sum()
}

#[test]
fn the_json_summary_has_a_buffer_census_adding_up_to_the_pool() {
    let spec = "soft:tester=cli_census,gen=udp,flows=16,size=64,device=inline";
    let summary = fwd_pair_summary(spec, &["--stats-period", "0.05", "--pool-size", "4095"]);
    assert_eq!(summary["pool_full"], true);
    let pools = summary["census"]["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 1, "{summary}");
    let c = &pools[0];
    assert_eq!(c["name"], "fwd");
    assert_eq!(c["size"], 4095);
    let parts = c["in_ring"].as_u64().unwrap()
        + census_sum(&c["in_caches"])
        + census_sum(&c["rx_posted"])
        + census_sum(&c["tx_waiting"])
        + census_sum(&c["in_flight"])
        + c["held_by_app"].as_u64().unwrap();
    assert_eq!(parts, 4095, "{c}");
    // Stopped: every buffer is free, each Rx queue of both ports listed.
    assert_eq!(census_sum(&c["rx_posted"]), 0, "{c}");
    assert_eq!(c["rx_posted"].as_array().unwrap().len(), 2, "{c}");
    assert!(summary["census"].get("not_back").is_none(), "{summary}");
}
