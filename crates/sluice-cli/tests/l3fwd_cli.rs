//! `sluice l3fwd` end to end: through soft ports with the tester (every
//! packet out of the port its route says, nothing lost or corrupted), and
//! through pcap ports with hand-made frames (TTL, checksum, MACs, and each
//! drop counted by its reason); routes file errors.

use std::path::{Path, PathBuf};
use std::process::Command;

use etherparse::{Ipv4HeaderSlice, PacketBuilder};

mod common;
use common::{SLUICE, sluice, summary};

/// A scratch file path unique to this test process and `name`.
fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sluice-l3fwd-{}-{name}", std::process::id()))
}

fn write_routes(name: &str, text: &str) -> PathBuf {
    let p = scratch(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn soft(tester: &str) -> String {
    format!("soft:tester={tester},gen=udp,flows=64,size=64,device=inline,dst=stream")
}

/// The tester sends stream 0 (port 0) to 198.18.0.1 and stream 1 (port 1)
/// to 198.18.1.1. Routed across, each port's traffic leaves by the other;
/// routed both to port 1, port 0 sends nothing. Either way the tester gets
/// every frame back once, intact (TTL decremented, checksum valid).
#[test]
fn l3fwd_sends_each_packet_out_of_the_port_its_route_says() {
    for (case, routes, cross) in [
        ("cross", "198.18.0.0/24 1\n198.18.1.0/24 0\n", true),
        ("one-port", "198.18.0.0/15 1\n", false),
    ] {
        let file = write_routes(case, routes);
        let spec = soft(&format!("l3fwd-{case}"));
        let out = sluice()
            .args([
                "l3fwd",
                "--duration",
                "1.5",
                "--json",
                "--rxd",
                "256",
                "--txd",
                "256",
            ])
            .arg("--routes")
            .arg(&file)
            .args(["-p", &spec, "-p", &spec])
            .output()
            .unwrap();
        std::fs::remove_file(&file).unwrap();
        let s = summary(&out);
        assert_eq!(s["engine"], "l3fwd-lpm");
        assert_eq!(s["clean"], true, "{case}: {s}");
        assert_eq!(s["pool_full"], true);
        let t = &s["testers"][0];
        assert!(t["sent"].as_u64().unwrap() > 0, "{t}");
        assert_eq!(t["sent"], t["received"], "{case}: {t}");
        let p = s["ports"].as_array().unwrap();
        let (rx0, rx1) = (
            p[0]["rx_packets"].as_u64().unwrap(),
            p[1]["rx_packets"].as_u64().unwrap(),
        );
        let (tx0, tx1) = (
            p[0]["tx_packets"].as_u64().unwrap(),
            p[1]["tx_packets"].as_u64().unwrap(),
        );
        assert!(rx0 > 0 && rx1 > 0, "{case}: {s}");
        // The soft device checks IPv4 header checksums for the router.
        for port in p {
            assert_eq!(
                port["rx_offloads"],
                serde_json::json!(["ipv4_cksum"]),
                "{case}"
            );
        }
        if cross {
            assert_eq!((tx1, tx0), (rx0, rx1), "{case}");
        } else {
            assert_eq!((tx0, tx1), (0, rx0 + rx1), "{case}");
        }
        let d = &s["route_drops"];
        for k in [
            "no_route",
            "ttl_expired",
            "bad_header",
            "bad_checksum",
            "unwritable",
        ] {
            assert_eq!(d[k], 0, "{case}: {k}");
        }
    }
}

/// A routes file without a route for port 1's stream (198.18.1.1): every
/// frame port 1 receives is dropped as `no_route`, the application's, and
/// those drops are every frame the tester lost, each counted once.
#[test]
fn an_unrouted_stream_is_dropped_as_no_route_and_every_loss_is_named() {
    let file = write_routes("unrouted", "198.18.0.0/24 1\n");
    let spec = soft("l3fwd-unrouted");
    let out = sluice()
        .args(["l3fwd", "--duration", "0.5", "--json"])
        .args(["--rxd", "256", "--txd", "256", "--routes"])
        .arg(&file)
        .args(["-p", &spec, "-p", &spec])
        .output()
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    // Frames were lost: not clean, a non-zero exit, the summary printed.
    assert_eq!(out.status.code(), Some(1));
    let s = common::summary_of(&out.stdout);
    assert_eq!(s["pool_full"], true);
    let table = s["drops_by_reason"].as_array().unwrap();
    let no_route: Vec<_> = table.iter().filter(|d| d["reason"] == "no_route").collect();
    assert_eq!(no_route.len(), 1, "{s}");
    assert_eq!(no_route[0]["port"], serde_json::Value::Null);
    let unrouted = s["ports"][1]["rx_packets"].as_u64().unwrap();
    assert!(unrouted > 0, "{s}");
    assert_eq!(no_route[0]["packets"].as_u64(), Some(unrouted), "{s}");
    assert_eq!(s["route_drops"]["no_route"].as_u64(), Some(unrouted));
    let named: u64 = table.iter().map(|d| d["packets"].as_u64().unwrap()).sum();
    assert_eq!(s["testers"][0]["lost"].as_u64(), Some(named), "{s}");
}

/// A little-endian microsecond pcap file of `frames`.
fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut v = Vec::new();
    v.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&4u16.to_le_bytes());
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        v.extend_from_slice(&(i as u32).to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(f);
    }
    std::fs::write(path, v).unwrap();
}

/// The frames of a pcap file written by the pcap port.
fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap();
    let mut off = 24;
    let mut out = Vec::new();
    while off + 16 <= d.len() {
        let n = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        out.push(d[off + 16..off + 16 + n].to_vec());
        off += 16 + n;
    }
    out
}

fn v4(dst: [u8; 4], ttl: u8, tag: u8) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([9; 6], [8; 6])
        .ipv4([10, 0, 0, tag], dst, ttl)
        .udp(1000 + tag as u16, 9)
        .write(&mut v, &[tag; 22])
        .unwrap();
    v
}

fn v6(dst: [u8; 16], hops: u8, tag: u8) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([9; 6], [8; 6])
        .ipv6([0xfe; 16], dst, hops)
        .udp(1000 + tag as u16, 9)
        .write(&mut v, &[tag; 22])
        .unwrap();
    v
}

/// Frames from a pcap file through l3fwd into two pcap ports: each routed
/// frame is in the file of its route's port with TTL - 1, a valid checksum
/// and the port's MACs; every other frame is counted once under its drop
/// reason; every buffer goes home.
#[test]
fn l3fwd_rewrites_routed_frames_and_counts_each_drop_by_reason() {
    let mut frames = Vec::new();
    let mut want1 = Vec::new(); // tags expected out of port 1
    let mut want2 = Vec::new(); // and port 2
    for tag in 0..6u8 {
        frames.push(v4([198, 18, 0, tag], 64, tag)); // 198.18.0.0/24 -> 1
        want1.push(tag);
        frames.push(v4([203, 0, 113, tag], 2, 100 + tag)); // /16 -> 2, TTL 2 is fine
        want2.push(100 + tag);
    }
    frames.push(v4([198, 18, 0, 200], 2, 200)); // /32 -> 2 (longer than the /24)
    want2.push(200);
    let no_route = [v4([192, 0, 2, 1], 64, 40), v4([8, 8, 8, 8], 64, 41)];
    let expired = [v4([198, 18, 0, 1], 1, 42), v4([198, 18, 0, 1], 0, 43)];
    let mut bad_sum = v4([198, 18, 0, 1], 64, 44);
    bad_sum[14 + 10] ^= 0x5a;
    let mut bad_ihl = v4([198, 18, 0, 1], 64, 45);
    bad_ihl[14] = 0x43;
    let mut arp = v4([198, 18, 0, 1], 64, 46);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let mut v6_dst = [0u8; 16];
    v6_dst[..4].copy_from_slice(&[0x20, 0x01, 0xdb, 0x8]);
    let v6_frame = v6(v6_dst, 64, 47); // no IPv6 route for 2001:db8::/32
    let mut v6_routed = [0u8; 16];
    v6_routed[..4].copy_from_slice(&[0x20, 0x01, 0, 2]);
    v6_routed[15] = 5;
    frames.push(v6(v6_routed, 64, 48)); // 2001:2::/32 -> 2
    want2.push(48);
    v6_routed[15] = 1;
    frames.push(v6(v6_routed, 1, 49)); // hop limit 1: expired
    frames.extend(no_route.iter().cloned());
    frames.extend(expired.iter().cloned());
    frames.extend([bad_sum, bad_ihl, arp, v6_frame]);

    let input = scratch("in.pcap");
    let (out1, out2) = (scratch("out1.pcap"), scratch("out2.pcap"));
    write_pcap(&input, &frames);
    let routes = write_routes(
        "pcap-routes",
        "198.18.0.0/24 1\n198.18.0.200/32 2\n203.0.0.0/16 2\n2001:2::/32 2\n",
    );
    let out = sluice()
        .args([
            "l3fwd",
            "--duration",
            "0.3",
            "--json",
            "--rxd",
            "128",
            "--txd",
            "128",
        ])
        .arg("--routes")
        .arg(&routes)
        .args(["--dest-mac", "2,0a:0b:0c:0d:0e:02"])
        .arg("-p")
        .arg(format!("pcap:rx={}", input.display()))
        .arg("-p")
        .arg(format!("pcap:tx={}", out1.display()))
        .arg("-p")
        .arg(format!("pcap:tx={}", out2.display()))
        .output()
        .unwrap();
    let s = summary(&out);
    let (got1, got2) = (read_pcap(&out1), read_pcap(&out2));
    for f in [&input, &out1, &out2, &routes] {
        std::fs::remove_file(f).unwrap();
    }
    assert_eq!(s["pool_full"], true);
    let d = &s["route_drops"];
    assert_eq!(d["no_route"], 3, "{d}");
    assert_eq!(d["ttl_expired"], 3, "{d}");
    // pcap has no checksum offload: the router verified in software.
    assert!(s["ports"][0].get("rx_offloads").is_none(), "{s}");
    assert_eq!(d["bad_checksum"], 1, "{d}");
    assert_eq!(d["bad_header"], 2, "{d}");
    assert_eq!(d["unwritable"], 0, "{d}");
    // The same drops in the table of every drop, the router's with no port,
    // and nothing else dropped.
    let table = &s["drops_by_reason"];
    let row = |reason: &str, packets: u64| serde_json::json!({"reason": reason, "port": null, "packets": packets});
    assert_eq!(
        table,
        &serde_json::json!([
            row("no_route", 3),
            row("ttl_expired", 3),
            row("bad_header", 2),
            row("bad_checksum", 1),
        ]),
        "{s}"
    );
    assert_eq!(s["ports"][0]["rx_packets"], frames.len());
    for (got, want, port, dst_mac) in [
        (&got1, &want1, 1u8, [2, 0, 0, 0, 0, 1]),
        (&got2, &want2, 2, [0xa, 0xb, 0xc, 0xd, 0xe, 2]),
    ] {
        // The tag: the last payload byte (IPv4 and IPv6 alike).
        let tags: Vec<u8> = got.iter().map(|f| f[f.len() - 1]).collect();
        assert_eq!(&tags, want, "port {port}: frames in order");
        for f in got {
            let tag = f[f.len() - 1];
            assert_eq!(f[..6], dst_mac, "port {port}: destination MAC");
            assert_ne!(f[6..12], [8; 6], "port {port}: source MAC is the port's");
            if f[12..14] == [0x86, 0xdd] {
                assert_eq!(f[14 + 7], 63, "port {port} tag {tag}: hop limit");
                assert!(f[62..].iter().all(|&b| b == tag), "port {port} tag {tag}");
                continue;
            }
            let ip = Ipv4HeaderSlice::from_slice(&f[14..]).unwrap();
            let sent_ttl = if tag >= 100 { 2 } else { 64 };
            assert_eq!(ip.ttl(), sent_ttl - 1, "port {port} tag {tag}");
            assert_eq!(
                ip.to_header().calc_header_checksum(),
                ip.header_checksum(),
                "port {port} tag {tag}"
            );
            // Nothing else changed: the payload is the tag, repeated.
            assert!(f[42..].iter().all(|&b| b == tag), "port {port} tag {tag}");
        }
    }
}

/// Exact match: IPv4 and IPv6 5-tuples pick the port; other ports or
/// protocols of the same addresses find nothing.
#[test]
fn l3fwd_exact_match_routes_by_five_tuple() {
    let mut dst6 = [0u8; 16];
    dst6[15] = 9;
    let frames = vec![
        v4([198, 18, 0, 1], 64, 1), // flow -> 1
        v4([198, 18, 0, 1], 64, 2), // other source port: no flow
        v6(dst6, 64, 3),            // flow -> 1
    ];
    let input = scratch("em-in.pcap");
    let out1 = scratch("em-out1.pcap");
    write_pcap(&input, &frames);
    let routes = write_routes(
        "em-routes",
        "10.0.0.1 198.18.0.1 1001 9 udp 1\nfefe:fefe:fefe:fefe:fefe:fefe:fefe:fefe ::9 1003 9 17 1\n",
    );
    let out = sluice()
        .args(["l3fwd", "--lookup", "em", "--duration", "0.3", "--json"])
        .args(["--rxd", "128", "--txd", "128", "--routes"])
        .arg(&routes)
        .arg("-p")
        .arg(format!("pcap:rx={}", input.display()))
        .arg("-p")
        .arg(format!("pcap:tx={}", out1.display()))
        .output()
        .unwrap();
    let s = summary(&out);
    let got = read_pcap(&out1);
    for f in [&input, &out1, &routes] {
        std::fs::remove_file(f).unwrap();
    }
    assert_eq!(s["engine"], "l3fwd-em");
    assert_eq!(s["route_drops"]["no_route"], 1);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0][14 + 8], 63, "IPv4 TTL");
    assert_eq!(got[1][14 + 7], 63, "IPv6 hop limit");
    assert_eq!(s["pool_full"], true);
}

#[test]
fn a_bad_routes_file_fails_naming_the_line() {
    let routes = write_routes("bad", "# ok\n10.0.0.0/8 1\n10.0.0.0/99 1\n");
    let out = sluice()
        .args(["l3fwd", "--duration", "0.1", "--routes"])
        .arg(&routes)
        .args(["-p", "null", "-p", "null"])
        .output()
        .unwrap();
    std::fs::remove_file(&routes).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 3: '10.0.0.0/99 1': prefix length '99' is not in 0..=32"),
        "{err}"
    );
    let out = sluice()
        .args([
            "l3fwd",
            "--routes",
            "/nonexistent/sluice-routes",
            "-p",
            "null",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("routes file '/nonexistent/sluice-routes'"),
        "{err}"
    );
}

/// Runs `sluice ARGS` with its address space capped at 1 GiB (so a file read
/// whole cannot take the machine's memory) and killed after 20 s (so one read
/// for ever cannot hang the test): the output, and whether it ended by itself.
fn sluice_bounded(args: &[&str]) -> (std::process::Output, bool) {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576; exec \"$0\" \"$@\"")
        .arg(SLUICE)
        .args(args)
        .env("RUNTIME_DIRECTORY", common::runtime_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ended = false;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            ended = true;
            break;
        }
        std::thread::yield_now();
    }
    if !ended {
        child.kill().unwrap();
    }
    (child.wait_with_output().unwrap(), ended)
}

/// Runs `sluice l3fwd ARGS --routes FILE -p null -p null` as
/// [`sluice_bounded`] does, FILE holding `text` (written under `name` and
/// removed afterwards).
fn l3fwd_bounded_over_nulls(name: &str, text: &str, args: &[&str]) -> (std::process::Output, bool) {
    let routes = write_routes(name, text);
    let path = routes.to_string_lossy().into_owned();
    let mut all = vec!["l3fwd"];
    all.extend_from_slice(args);
    all.extend(["--routes", &path, "-p", "null", "-p", "null"]);
    let result = sluice_bounded(&all);
    std::fs::remove_file(&routes).unwrap();
    result
}

/// A FIFO and a character device are refused at once, without reading them:
/// a FIFO nobody writes would block for ever, `/dev/zero` would be read until
/// memory runs out.
#[test]
fn a_routes_file_that_is_not_a_regular_file_is_refused_at_once() {
    let fifo = scratch("routes-fifo");
    let _ = std::fs::remove_file(&fifo);
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let fifo_s = fifo.to_string_lossy().into_owned();
    for (path, kind) in [
        (fifo_s.as_str(), "a FIFO"),
        ("/dev/zero", "a character device"),
    ] {
        let (out, ended) = sluice_bounded(&["l3fwd", "--routes", path, "-p", "null"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(ended, "{path}: still running after 20 s");
        assert!(!out.status.success(), "{path}");
        assert!(
            err.contains(&format!("routes file '{path}': {kind}, not a regular file")),
            "{path}: {err}"
        );
    }
    std::fs::remove_file(&fifo).unwrap();
}

/// An error quotes at most about 100 characters of the offending line, with
/// an ellipsis and the line number.
#[test]
fn a_routes_error_quotes_a_long_line_bounded() {
    let long = format!("10.0.0.0/8 1\n{} 1\n", "x".repeat(10_000));
    let (out, ended) = l3fwd_bounded_over_nulls("long", &long, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(ended && !out.status.success(), "{err}");
    let want = format!("line 2: '{}…", "x".repeat(100));
    assert!(err.contains(&want), "{err}");
    assert!(err.len() < 600, "{} bytes: {err}", err.len());
}

/// The same prefix (or 5-tuple) to two different ports is an error naming
/// both lines; the same one to the same port twice is fine.
#[test]
fn a_route_given_twice_with_different_ports_is_an_error_naming_both_lines() {
    for (name, lookup, text, want) in [
        (
            "dup-lpm",
            "lpm",
            "10.0.0.0/8 1\n# other\n10.0.0.0/8 0  # again\n",
            "line 3: '10.0.0.0/8 0  # again': 10.0.0.0/8 already goes to port 1 on line 1 \
             ('10.0.0.0/8 1')",
        ),
        (
            "dup-em",
            "em",
            "10.0.0.1 10.0.0.2 1 2 udp 1\n10.0.0.1 10.0.0.2 1 2 17 0\n",
            "line 2: '10.0.0.1 10.0.0.2 1 2 17 0': flow 10.0.0.1 10.0.0.2 1 2 17 already goes \
             to port 1 on line 1 ('10.0.0.1 10.0.0.2 1 2 17 1')",
        ),
    ] {
        let (out, ended) =
            l3fwd_bounded_over_nulls(name, text, &["--lookup", lookup, "--duration", "0.1"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(ended && !out.status.success(), "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
    }
    for (name, lookup, text) in [
        ("same-lpm", "lpm", "10.0.0.0/8 1\n10.0.0.0/8 1\n"),
        (
            "same-em",
            "em",
            "10.0.0.1 10.0.0.2 1 2 udp 1\n10.0.0.1 10.0.0.2 1 2 17 1\n",
        ),
    ] {
        let (out, ended) = l3fwd_bounded_over_nulls(
            name,
            text,
            &["--lookup", lookup, "--duration", "0.1", "--json"],
        );
        assert!(ended, "{name}");
        summary(&out);
    }
}
