//! `sluice capture` against a running `sluice fwd`: the pcapng file holds
//! the packets asked for, as tshark reads them, and a capture that falls
//! behind says how many copies it dropped in the file's statistics blocks.
//! Needs tshark (skipped with a note when missing, except under CI).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{SLUICE, run};
use pcap_file::pcapng::blocks::interface_statistics::InterfaceStatisticsOption;
use pcap_file::pcapng::{Block, PcapNgReader};

/// A directory of its own for this test's files and runtime directory.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-capture-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A child process, killed if the test fails before it ends.
struct Forwarder(Child);

impl Drop for Forwarder {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `sluice fwd` between two soft ports cabled to one tester, its runtime
/// directory `runtime`, telemetry under `prefix`: returned once it prints
/// its first stats line (it serves captures from before it forwards).
fn forwarder(runtime: &Path, prefix: &str) -> (Forwarder, BufReader<std::process::ChildStdout>) {
    let spec = format!("soft:tester={prefix},gen=udp,flows=4,size=64");
    let mut child = Command::new(SLUICE)
        .env("RUNTIME_DIRECTORY", runtime)
        .args(["fwd", "--file-prefix", prefix, "--json"])
        .args(["--duration", "60", "--stats-period", "0.5"])
        .args(["-p", &spec, "-p", &spec])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sluice binary runs");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.contains("\"type\""), "first line: {first:?}");
    (Forwarder(child), out)
}

/// Runs `sluice capture ARGS` against the instance: its output.
fn capture(runtime: &Path, args: &[&str]) -> std::process::Output {
    Command::new(SLUICE)
        .env("RUNTIME_DIRECTORY", runtime)
        .arg("capture")
        .args(args)
        .output()
        .expect("the sluice binary runs")
}

/// The interface names, packets per interface and drops per interface
/// (`isb_ifdrop`) of a pcapng file.
fn read_back(path: &Path) -> (Vec<String>, Vec<u64>, Vec<Option<u64>>) {
    let bytes = std::fs::read(path).unwrap();
    let mut r = PcapNgReader::new(&bytes[..]).unwrap();
    let (mut names, mut packets, mut drops) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(b) = r.next_block() {
        match b.unwrap() {
            Block::InterfaceDescription(i) => {
                let name = i.options.iter().find_map(|o| match o {
                    pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption::IfName(n) => Some(n.to_string()),
                    _ => None,
                });
                names.push(name.unwrap_or_default());
                packets.push(0);
                drops.push(None);
            }
            Block::EnhancedPacket(p) => packets[p.interface_id as usize] += 1,
            Block::InterfaceStatistics(s) => {
                drops[s.interface_id as usize] = s.options.iter().find_map(|o| match o {
                    InterfaceStatisticsOption::IsbIfDrop(d) => Some(*d),
                    _ => None,
                });
            }
            _ => {}
        }
    }
    (names, packets, drops)
}

#[test]
fn a_capture_of_a_forwarding_port_holds_the_testers_frames() {
    let dir = scratch("fwd");
    let runtime = dir.join("run");
    let prefix = format!("capt{}", std::process::id());
    let (mut fwd, mut fwd_out) = forwarder(&runtime, &prefix);

    let file = dir.join("both.pcapng");
    let file_arg = file.to_str().unwrap();
    let out = capture(
        &runtime,
        &[
            "--file-prefix",
            &prefix,
            "--port",
            "0",
            "-c",
            "200",
            "-w",
            file_arg,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("200 packets captured to "), "{said}");

    // A tiny buffer on a busy port: copies are dropped, and counted.
    let tiny = dir.join("tiny.pcapng");
    let tiny_arg = tiny.to_str().unwrap();
    let tiny_out = capture(
        &runtime,
        &[
            "--file-prefix",
            &prefix,
            "--port",
            "1",
            "--direction",
            "rx",
            "--queue",
            "0",
            "--buffer",
            "1",
            "-c",
            "200",
            "-w",
            tiny_arg,
        ],
    );
    assert!(
        tiny_out.status.success(),
        "{}",
        String::from_utf8_lossy(&tiny_out.stderr)
    );

    // Bad requests are refused by name, and the instance goes on.
    let out = capture(
        &runtime,
        &["--file-prefix", &prefix, "--port", "2", "-w", "/dev/null"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no port 2: the instance has 2 port(s)"),
        "{err}"
    );
    let out = run(&[
        "capture",
        "--file-prefix",
        "capture-cli-nobody",
        "--port",
        "0",
        "-w",
        "/dev/null",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect to "), "{err}");

    // SIGINT: the forwarder stops cleanly (drain, summary).
    let pid = libc::pid_t::try_from(fwd.0.id()).unwrap();
    // SAFETY: kill(2) takes no pointers; `pid` is our child, not yet
    // waited for, so the id is still its own.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let mut rest = String::new();
    fwd_out.read_to_string(&mut rest).unwrap();
    let status = fwd.0.wait().unwrap();
    let mut err = String::new();
    fwd.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");
    let summary = common::summary_of(rest.as_bytes());
    assert_eq!(summary["pool_full"], true, "{summary}");
    // Capturing took copies only: every frame still went round.
    common::assert_tester_got_everything(&summary, &prefix);
    assert!(
        !runtime
            .join("dpdk")
            .join(&prefix)
            .join("sluice_capture")
            .exists()
    );

    let (names, packets, drops) = read_back(&file);
    assert_eq!(names, ["port0/rx0", "port0/tx0"]);
    assert_eq!(packets.iter().sum::<u64>(), 200, "{packets:?}");
    assert!(
        drops.iter().all(Option::is_some),
        "every interface has its ISB"
    );
    // Port 0's capture has the default buffer, which keeps up unless the
    // machine stalls the capture process; whatever it dropped, its file
    // says, and the instance counts the same.
    let port0_dropped: u64 = drops.iter().flatten().sum();
    let (names, packets, drops) = read_back(&tiny);
    assert_eq!(names, ["port1/rx0"]);
    assert_eq!(packets, [200]);
    let dropped = drops[0].unwrap();
    assert!(dropped > 0, "a one-slot buffer on a busy port drops copies");
    let said = String::from_utf8_lossy(&tiny_out.stdout);
    assert!(
        said.contains(&format!("{dropped} copies dropped")),
        "{said}"
    );
    // The instance counts them too, as port 1's `capture_overflow`: the
    // only capture of port 1 was that one; port 0's, as its file says.
    let overflow: Vec<(u64, u64)> = summary["drops_by_reason"]
        .as_array()
        .expect("drops_by_reason in the summary")
        .iter()
        .filter(|d| d["reason"] == "capture_overflow")
        .map(|d| (d["port"].as_u64().unwrap(), d["packets"].as_u64().unwrap()))
        .collect();
    let expected: Vec<(u64, u64)> = [(0, port0_dropped), (1, dropped)]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect();
    assert_eq!(overflow, expected, "{summary}");

    let tshark = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.interface_name",
            "-e",
            "udp.dstport",
            "-e",
            "frame.len",
        ])
        .output();
    let tshark = match tshark {
        Ok(t) => t,
        Err(e) => {
            sluice_netns::skip_or_fail(
                sluice_netns::Need::Tool,
                &format!("tshark could not run ({e}); install it (Debian: tshark)"),
            );
            return;
        }
    };
    assert!(
        tshark.status.success(),
        "{}",
        String::from_utf8_lossy(&tshark.stderr)
    );
    let lines: Vec<String> = String::from_utf8_lossy(&tshark.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 200);
    for l in &lines {
        let f: Vec<&str> = l.split('\t').collect();
        assert!(matches!(f[0], "port0/rx0" | "port0/tx0"), "{l}");
        // The tester's UDP frames (to port 9), 64 bytes as sent.
        assert_eq!(&f[1..], ["9", "64"], "{l}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
