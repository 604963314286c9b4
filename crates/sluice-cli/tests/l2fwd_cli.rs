//! `sluice l2fwd` end to end: forwarding over emulated NIC ports with the
//! tester, MAC rewriting, and a run ended by SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;
use common::{sluice, summary_of};

/// Two soft ports cabled to one tester: every frame the tester sends must
/// come back once, intact and in order.
#[test]
fn l2fwd_over_soft_ports_is_clean() {
    let spec = "soft:tester=l2fwd_cli,gen=udp,flows=64,size=64,device=inline";
    let out = sluice()
        .args([
            "l2fwd",
            "--duration",
            "0.4",
            "--json",
            "--rxd",
            "256",
            "--txd",
            "256",
        ])
        .args(["-p", spec, "-p", spec])
        .output()
        .expect("the sluice binary runs");
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary_of(&out.stdout);
    assert_eq!(s["engine"], "mac");
    assert_eq!(s["clean"], true, "{s}");
    assert_eq!(s["pool_full"], true);
    let t = &s["testers"][0];
    assert!(t["sent"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(t["sent"], t["received"], "{t}");
    let ports = s["ports"].as_array().unwrap();
    assert_eq!(ports[0]["rx_packets"], ports[1]["tx_packets"]);
    assert_eq!(ports[1]["rx_packets"], ports[0]["tx_packets"]);
}

/// Without `--duration` l2fwd runs until a signal; SIGTERM ends it cleanly
/// with the summary printed and every buffer home.
#[test]
fn l2fwd_runs_until_sigterm_and_prints_its_summary() {
    let mut child = sluice()
        .args([
            "l2fwd",
            "--json",
            "--no-mac-updating",
            "--rxd",
            "128",
            "--txd",
            "128",
            "-T",
            "0.05",
        ])
        .args(["-p", "null", "-p", "null"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sluice binary starts");
    // Its stdout, line by line; the reader ends at the end of the output.
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Stats lines come once the signal handlers are set: SIGTERM waits
    // for one that shows packets forwarded.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            let _ = child.kill();
            panic!("no stats line with packets received within 60 s");
        };
        let Ok(line) = lines.recv_timeout(left) else {
            let _ = child.kill();
            panic!("no stats line with packets received within 60 s (or stdout closed)");
        };
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["type"], "stats", "{v}");
        let ports = v["ports"].as_array().unwrap();
        if ports
            .iter()
            .any(|p| p["rx_packets"].as_u64().is_some_and(|n| n > 0))
        {
            break;
        }
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "it must still be running"
    );
    // SAFETY: `kill` on the child's pid, which we have not reaped yet, so
    // the pid still names our child.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "l2fwd did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    reader.join().unwrap();
    let rest: Vec<String> = lines.try_iter().collect();
    let s = summary_of(rest.join("\n").as_bytes());
    assert_eq!(s["engine"], "io");
    assert!(s["rx_packets"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["pool_full"], true);
}

/// The Ethernet header of each record of a little-endian, microsecond pcap
/// file, up to `max` records.
fn pcap_eth_headers(path: &std::path::Path, max: usize) -> Vec<[u8; 14]> {
    let data = std::fs::read(path).unwrap();
    assert_eq!(&data[..4], &0xa1b2c3d4u32.to_le_bytes(), "pcap magic");
    let mut off = 24;
    let mut out = Vec::new();
    while off + 16 <= data.len() && out.len() < max {
        let incl = u32::from_le_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
        let frame = &data[off + 16..off + 16 + incl];
        out.push(frame[..14].try_into().unwrap());
        off += 16 + incl;
    }
    out
}

/// Frames from a null port leave through a pcap port: with MAC updating
/// the capture shows the Tx port's MAC as source and the `--dest-mac`
/// given for it (or 02:00:00:00:00:PORT) as destination; without, the
/// frames are unchanged.
#[test]
fn l2fwd_rewrites_macs_unless_told_not_to() {
    let dir = std::env::temp_dir();
    let cases: [(&[&str], Option<[u8; 6]>); 3] = [
        (&[], Some([2, 0, 0, 0, 0, 1])),
        (
            &["--dest-mac", "1,0a:0b:0c:0d:0e:0f"],
            Some([0xa, 0xb, 0xc, 0xd, 0xe, 0xf]),
        ),
        (&["--no-mac-updating"], None),
    ];
    let mut rewritten = None;
    for (i, (extra, dst)) in cases.into_iter().enumerate() {
        let file = dir.join(format!("sluice-l2fwd-{}-{i}.pcap", std::process::id()));
        let tx = format!("pcap:tx={}", file.display());
        let out = sluice()
            .args([
                "l2fwd",
                "--duration",
                "0.05",
                "--json",
                "--rxd",
                "128",
                "--txd",
                "128",
            ])
            .args(extra)
            .args(["-p", "null:copy=true", "-p", &tx])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s = summary_of(&out.stdout);
        assert_eq!(s["pool_full"], true);
        let heads = pcap_eth_headers(&file, 100);
        std::fs::remove_file(&file).unwrap();
        assert!(!heads.is_empty(), "nothing captured");
        // What a null port sends with copy=true, as it sends it.
        let first = heads[0];
        if i == 0 {
            rewritten = Some(first);
        }
        for h in &heads {
            match dst {
                Some(dst) => {
                    assert_eq!(h[..6], dst, "destination MAC");
                    assert_ne!(h[6..12], [0; 6], "source MAC is the Tx port's");
                    assert_eq!(h[6..12], first[6..12], "one source MAC for one port");
                }
                None => {
                    assert_eq!(*h, first, "frames leave unchanged");
                    assert_ne!(Some(*h), rewritten, "and not as MAC updating writes them");
                }
            }
            assert_eq!(h[12..14], [0x08, 0x00], "EtherType untouched");
        }
    }
}

#[test]
fn l2fwd_with_a_bad_spec_fails_naming_it() {
    let out = sluice()
        .args(["l2fwd", "--duration", "0.1", "-p", "null", "-p", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope"), "{err}");
}
