//! One-way latency end to end: `sluice gen --latency` and `--hist-out`
//! over a `soft` port cabled to a tester, and the latency of `sluice fwd`'s
//! tester in its summary.

mod common;
use common::{assert_success, assert_tester_got_everything, run, summary};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

/// The port's tester sends `count` frames on its Rx side; `sluice gen`
/// sends as many and checks what it receives, measuring each frame.
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

/// Checks one latency object and returns its sample count.
fn assert_ordered(l: &serde_json::Value) -> u64 {
    let get = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k}: {l}"));
    let samples = get("samples");
    assert!(samples > 0, "{l}");
    let figures = ["min_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns"].map(get);
    assert!(figures.windows(2).all(|w| w[0] <= w[1]), "{l}");
    samples
}

#[test]
fn gen_latency_reports_ordered_percentiles_for_every_frame_received() {
    let r = gen_report(&["--latency"]);
    assert_eq!(r["type"], "gen");
    assert_eq!(r["clean"], true, "{r}");
    let received = r["received"].as_u64().unwrap();
    assert_eq!(received, COUNT.parse::<u64>().unwrap(), "{r}");
    let latency = r["latency"].as_array().expect("a latency array");
    assert_eq!(latency.len(), 1, "{r}");
    assert_eq!(latency[0]["port"], 0);
    // 64-byte frames carry their send time: every frame received is measured.
    assert_eq!(assert_ordered(&latency[0]), received);
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

#[test]
fn hist_out_writes_an_interval_log_that_reads_back_and_a_plot() {
    let dir = std::env::temp_dir().join(format!("sluice-latency-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("gen.hlog");
    let r = gen_report(&["--hist-out", log.to_str().unwrap()]);
    let samples = assert_ordered(&r["latency"][0]);

    let text = std::fs::read(&log).unwrap();
    let mut total = Histogram::<u64>::new(3).unwrap();
    let mut intervals = 0;
    for entry in IntervalLogIterator::new(&text) {
        if let LogEntry::Interval(i) = entry.expect("the log parses") {
            assert_eq!(i.tag().map(|t| t.as_str().to_owned()), Some("port0".into()));
            let bytes = base64_decode(i.encoded_histogram());
            let h: Histogram<u64> = Deserializer::new()
                .deserialize(&mut bytes.as_slice())
                .expect("an interval's histogram decodes");
            total.add(&h).unwrap();
            intervals += 1;
        }
    }
    assert!(intervals >= 1);
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
fn fwd_summary_shows_each_tester_ports_latency() {
    let spec = "soft:tester=cli_latency,gen=udp,flows=64,size=64,device=inline";
    let s = summary(&run(&[
        "fwd",
        "--port",
        spec,
        "--port",
        spec,
        "--duration",
        "0.2",
        "--json",
        "--rxd",
        "256",
        "--txd",
        "256",
    ]));
    let sent = assert_tester_got_everything(&s, "cli_latency");
    assert_eq!(s["pool_full"], true);
    let latency = s["testers"][0]["latency"].as_array().expect("latency");
    let ports: Vec<u64> = latency
        .iter()
        .map(|l| l["port"].as_u64().unwrap())
        .collect();
    assert_eq!(ports, [0, 1]);
    // Every frame came back, each carrying its send time.
    let samples: u64 = latency.iter().map(assert_ordered).sum();
    assert_eq!(samples, sent);
}
