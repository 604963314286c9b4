//! One-way latency end to end: `sluice gen --latency` and `--hist-out`
//! over a `soft` port cabled to a tester, and the latency of `sluice fwd`'s
//! tester in its summary.

mod common;
use common::{assert_success, assert_tester_got_everything, fwd_pair, run, summary};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

/// The port's tester sends `count` frames on its Rx side, which `sluice
/// gen` receives; `sluice gen` sends as many as one more stream of that
/// tester, which the port checks on its Tx side. Every frame is measured.
const COUNT: &str = "3000";

/// The JSON report of `sluice gen` over a soft port whose tester sends
/// `COUNT` frames, with `extra` arguments.
fn gen_report(extra: &[&str]) -> serde_json::Value {
    let spec = format!("soft:count={COUNT}");
    let mut args = vec!["gen", "-p", &spec, "--count", COUNT, "--json"];
    args.extend_from_slice(extra);
    let out = run(&args);
    // `sluice gen` fails when its pool is not full at the end.
    assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("a report line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"))
}

/// Checks one latency object (figures in order; all 0 without samples)
/// and returns its sample count.
fn assert_ordered(l: &serde_json::Value) -> u64 {
    let get = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k}: {l}"));
    let samples = get("samples");
    let figures = ["min_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns"].map(get);
    assert!(figures.windows(2).all(|w| w[0] <= w[1]), "{l}");
    if samples == 0 {
        assert_eq!(figures, [0; 6], "{l}");
    }
    samples
}

#[test]
fn gen_latency_reports_ordered_percentiles_for_every_frame_received() {
    let r = gen_report(&["--latency"]);
    assert_eq!(r["type"], "gen");
    assert_eq!(r["clean"], true, "{r}");
    let received = r["received"].as_u64().unwrap();
    // Both streams: the port's and gen's.
    assert_eq!(received, 2 * COUNT.parse::<u64>().unwrap(), "{r}");
    assert_eq!(
        (r["sent"].as_u64(), r["foreign"].as_u64()),
        (Some(received), Some(0)),
        "{r}"
    );
    let latency = r["latency"].as_array().expect("a latency array");
    assert_eq!(latency.len(), 1, "{r}");
    assert_eq!(latency[0]["port"], 0);
    // 64-byte frames carry their send time: every frame received is measured.
    assert_eq!(assert_ordered(&latency[0]), received);
    assert!(received > 0);
    // Without --latency the report has none.
    assert!(gen_report(&[]).get("latency").is_none());
}

/// Standard base64, as the interval log encodes histograms.
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|&c| c != b'=') {
        acc = acc << 6 | u32::from(value(c));
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// Every interval of the interval log `text`, by tag, summed.
fn read_log(text: &[u8]) -> Vec<(String, Histogram<u64>)> {
    let mut out: Vec<(String, Histogram<u64>)> = Vec::new();
    for entry in IntervalLogIterator::new(text) {
        if let LogEntry::Interval(i) = entry.expect("the log parses") {
            let tag = i.tag().expect("a tag").as_str().to_owned();
            let bytes = base64_decode(i.encoded_histogram());
            let h: Histogram<u64> = Deserializer::new()
                .deserialize(&mut bytes.as_slice())
                .expect("an interval's histogram decodes");
            match out.iter_mut().find(|(t, _)| *t == tag) {
                Some((_, total)) => total.add(&h).unwrap(),
                None => {
                    let mut total = Histogram::<u64>::new(3).unwrap();
                    total.add(&h).unwrap();
                    out.push((tag, total));
                }
            }
        }
    }
    out
}

#[test]
fn hist_out_writes_an_interval_log_that_reads_back_and_a_plot() {
    let dir = std::env::temp_dir().join(format!("sluice-latency-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("gen.hlog");
    let r = gen_report(&["--hist-out", log.to_str().unwrap()]);
    let samples = assert_ordered(&r["latency"][0]);
    assert!(samples > 0, "{r}");

    let logged = read_log(&std::fs::read(&log).unwrap());
    assert_eq!(logged.len(), 1);
    let (tag, total) = &logged[0];
    assert_eq!(tag, "port0");
    assert_eq!(total.len(), samples);
    let max = r["latency"][0]["max_ns"].as_u64().unwrap();
    assert!(total.equivalent(total.max(), max), "{} {max}", total.max());

    let svg = std::fs::read_to_string(dir.join("gen.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(svg.contains("port 0"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_hist_out_that_cannot_be_created_is_an_error_naming_it() {
    let out = run(&[
        "gen",
        "-p",
        "soft",
        "--count",
        "10",
        "--hist-out",
        "/nonexistent-dir/lat.hlog",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--hist-out /nonexistent-dir/lat.hlog"),
        "{stderr}"
    );
}

#[test]
fn fwd_hist_out_logs_every_sample_of_the_summary() {
    let dir = std::env::temp_dir().join(format!("sluice-latency-fwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("fwd.hlog");
    let spec = "soft:tester=cli_latency_log,gen=udp,flows=64,size=64,device=inline";
    let s = summary(&run(&[
        "fwd",
        "--port",
        spec,
        "--port",
        spec,
        "--duration",
        "0.3",
        "--stats-period",
        "0.1",
        "--json",
        "--hist-out",
        log.to_str().unwrap(),
    ]));
    assert_eq!(s["pool_full"], true);
    let sent = s["testers"][0]["sent"].as_u64().unwrap();
    let latency = s["testers"][0]["latency"].as_array().expect("latency");
    let logged = read_log(&std::fs::read(&log).unwrap());
    let tags: Vec<&str> = logged.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tags, ["port0", "port1"]);
    for (l, (_, h)) in latency.iter().zip(&logged) {
        assert_eq!(h.len(), assert_ordered(l), "{l}");
    }
    let logged_samples: u64 = logged.iter().map(|(_, h)| h.len()).sum();
    assert!(sent > 0);
    assert_eq!(logged_samples, sent);
    let svg = std::fs::read_to_string(dir.join("fwd.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fwd_summary_shows_each_tester_ports_latency() {
    let spec = "soft:tester=cli_latency,gen=udp,flows=64,size=64,device=inline";
    let s = summary(&fwd_pair(spec, spec, &[]));
    let sent = assert_tester_got_everything(&s, "cli_latency");
    assert_eq!(s["pool_full"], true);
    let latency = s["testers"][0]["latency"].as_array().expect("latency");
    let ports: Vec<u64> = latency
        .iter()
        .map(|l| l["port"].as_u64().unwrap())
        .collect();
    assert_eq!(ports, [0, 1]);
    // Every frame came back, each carrying its send time, and was measured
    // for the port it left (a port that sent nothing in a short run on a
    // busy machine has no sample).
    let samples: u64 = latency.iter().map(assert_ordered).sum();
    assert_eq!(samples, sent);
    for (i, l) in latency.iter().enumerate() {
        assert_eq!(l["samples"], s["ports"][i]["tx_packets"], "{l}");
    }
}
