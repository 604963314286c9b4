//! A registry of null ports and a pool, served over HTTP as Prometheus
//! metrics, scraped over loopback and checked by `promtool`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::{Port, PortConfig};
use sluice_telemetry::Registry;
use sluice_telemetry::prometheus::{MetricsServer, MetricsWriter, write_registry};

/// Scrapes `path`: the status line, the head and the body.
fn scrape(addr: SocketAddr, path: &str) -> (String, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    // Only keeps a broken server from hanging the test.
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a reply head");
    let status = head.lines().next().unwrap().to_string();
    (status, head.to_string(), body.to_string())
}

/// The value of the sample written exactly as `series` (name and labels).
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        let value = l.strip_prefix(series)?.strip_prefix(' ')?;
        value.parse().ok()
    })
}

/// Runs `promtool check metrics` on `text`: `Ok` when it finds nothing to
/// say, `Err(reason)` otherwise, `None` when promtool is not installed
/// (a failure under CI).
fn promtool_check(text: &str) -> Option<Result<(), String>> {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "promtool is not installed (Debian package prometheus)"
            );
            return None;
        }
        Err(e) => panic!("promtool: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("promtool: {}: {said}", out.status))
    })
}

fn null_port(pool: &MbufPool, id: u16, burst_stats: bool) -> Port {
    let mut config = PortConfig::new(Some(pool.clone()));
    config.port_id = id;
    config.burst_stats = burst_stats;
    let mut port = sluice::driver::open("null:size=64", config).unwrap();
    port.start().unwrap();
    port
}

#[test]
fn a_registry_is_scraped_and_promtool_finds_it_clean() {
    let pool = MbufPool::new(MbufPoolConfig {
        name: "fwd".into(),
        size: 1023,
        ..Default::default()
    })
    .unwrap();
    let mut rx_port = null_port(&pool, 0, true);
    let mut tx_port = null_port(&pool, 1, false);
    let registry = Arc::new(Registry::new());
    registry.add_port(&rx_port);
    registry.add_port(&tx_port);
    registry.add_pool("fwd \"main\"", &pool);
    let runts = rx_port.counters().xstats.register("rx_runt_errors");
    runts.add(3);

    let shown = Arc::clone(&registry);
    let server = MetricsServer::serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(move || {
            let mut w = MetricsWriter::new();
            write_registry(&shown, &mut w);
            // A latency histogram as the tester reports one.
            w.histogram(
                "sluice_tester_latency_seconds",
                "One-way latency of the tester's frames.",
                &[("port", "0")],
                &[(0.000_001, 1), (0.000_01, 4)],
                0.000_021,
                5,
            );
            w.render()
        }),
    )
    .unwrap();
    let addr = server.local_addr();

    // Port 0 receives two bursts; port 1 sends the first, the second is
    // held while scraping.
    let mut sent: Burst = Burst::new();
    let received = rx_port.rx_queue(0).unwrap().rx_burst(&mut sent) as u64;
    let accepted = tx_port.tx_queue(0).unwrap().tx_burst(&mut sent) as u64;
    assert!(received > 0);
    assert_eq!(accepted, received);
    let mut held: Burst = Burst::new();
    let held_n = rx_port.rx_queue(0).unwrap().rx_burst(&mut held) as u64;
    assert!(held_n > 0);

    let (status, head, body) = scrape(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.lines()
            .any(|l| l == "Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(
        head.lines()
            .any(|l| l == format!("Content-Length: {}", body.len())),
        "{head}"
    );

    let rx = received + held_n;
    let value = |series: &str| sample(&body, series).unwrap_or_else(|| panic!("{series}\n{body}"));
    assert_eq!(value("sluice_port_rx_packets_total{port=\"0\"}"), rx as f64);
    assert_eq!(
        value("sluice_port_rx_bytes_total{port=\"0\"}"),
        (rx * 64) as f64
    );
    assert_eq!(
        value("sluice_port_rx_queue_packets_total{port=\"0\",queue=\"0\"}"),
        rx as f64
    );
    assert_eq!(
        value("sluice_port_tx_packets_total{port=\"1\"}"),
        received as f64
    );
    assert_eq!(
        value("sluice_port_tx_queue_bytes_total{port=\"1\",queue=\"0\"}"),
        (received * 64) as f64
    );
    assert_eq!(value("sluice_port_tx_packets_total{port=\"0\"}"), 0.0);
    assert_eq!(
        value("sluice_port_xstat_total{port=\"0\",name=\"rx_runt_errors\"}"),
        3.0
    );
    assert_eq!(value("sluice_port_rx_queues{port=\"1\"}"), 1.0);
    assert!(
        body.contains("sluice_port_info{port=\"1\",name=\"null:size=64\",driver=\"null\",mac=\"")
    );
    let pool_label = "{pool=\"fwd \\\"main\\\"\"}";
    assert_eq!(value(&format!("sluice_pool_buffers{pool_label}")), 1023.0);
    assert_eq!(
        value(&format!("sluice_pool_in_use_buffers{pool_label}")),
        held_n as f64
    );
    assert_eq!(
        value(&format!("sluice_pool_ring_free_buffers{pool_label}"))
            + value(&format!("sluice_pool_cache_free_buffers{pool_label}")),
        (1023 - held_n) as f64
    );
    assert_eq!(
        value("sluice_port_rx_queue_burst_packets_count{port=\"0\",queue=\"0\"}"),
        2.0
    );
    assert_eq!(
        value("sluice_port_rx_queue_burst_packets_sum{port=\"0\",queue=\"0\"}"),
        rx as f64
    );
    assert!(!body.contains("sluice_port_tx_queue_burst_packets_count{port=\"1\""));
    assert_eq!(
        value("sluice_tester_latency_seconds_bucket{port=\"0\",le=\"+Inf\"}"),
        5.0
    );
    // Each family once, whole: HELP and TYPE lines are never repeated.
    let mut declared: Vec<&str> = body.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let families = declared.len();
    declared.sort_unstable();
    declared.dedup();
    assert_eq!(declared.len(), families);

    eprintln!("{body}");
    match promtool_check(&body) {
        Some(verdict) => verdict.unwrap(),
        None => eprintln!("skipped: no promtool"),
    }

    // The held buffers go back; the next scrape sees them home.
    drop(held);
    let (_, _, body) = scrape(addr, "/metrics");
    assert_eq!(
        sample(&body, &format!("sluice_pool_in_use_buffers{pool_label}")),
        Some(0.0)
    );

    drop(server);
    registry.clear();
    drop((rx_port, tx_port, sent));
    assert!(pool.is_full());
}

#[test]
fn promtool_rejects_what_the_writer_never_writes() {
    // The check above is only worth something if promtool does speak up.
    let bad = "# HELP packets Packets.\n# TYPE packets counter\npackets 1\n";
    match promtool_check(bad) {
        Some(verdict) => assert!(verdict.is_err()),
        None => eprintln!("skipped: no promtool"),
    }
}
