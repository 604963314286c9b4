//! The `memif:` and `vhost:` ports in the commands. `sluice fwd`, `l2fwd`
//! and `l3fwd` forward on a memif server port whose client is
//! `sluice gen --check`, so every frame the generator sends comes back to
//! it through the forwarder: the generator's report must show each one
//! back, in order, intact, and both runs' pools full. With DPDK's
//! `dpdk-testpmd` (a `virtio_user` port forwarding in `io` mode on itself),
//! `sluice gen` runs on a vhost port, and `fwd` and `l2fwd` forward between
//! a vhost port and a memif port.
//!
//! Sluice's own `virtio:` port is the frontend of the forwarders' `vhost:`
//! port (and the other way round), with no foreign tool.
//!
//! The vhost tests need `dpdk-testpmd` (Debian: dpdk); without it they say
//! they are skipped, except under CI (`CI=true`), where it fails them.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{SLUICE, runtime_dir, spawn, stop};

/// Frames the generator sends: fewer than any ring on the way holds
/// (memif 1024, testpmd's virtqueues 1024), so none can overflow whatever
/// the scheduling.
const FRAMES: u64 = 500;

/// A bound on waits for another process to come up (not a measurement).
const TIMEOUT: Duration = Duration::from_secs(60);

/// A fresh directory for socket files, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sluice-vmcli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, file: &str) -> String {
        self.0.join(file).display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits (bounded) until the socket file at `path` exists.
fn wait_for_file(path: &str) {
    let deadline = Instant::now() + TIMEOUT;
    while !Path::new(path).exists() {
        assert!(Instant::now() < deadline, "{path} never appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `sluice gen --check` of FRAMES frames on `spec`, for `duration`
/// seconds: asserts it succeeded (which it does only with its pool full)
/// and that every frame came back once, in order, intact.
fn gen_all_back(spec: &str, duration: &str) {
    let out = common::sluice()
        .args(["gen", "-p", spec, "--count", &FRAMES.to_string(), "--check"])
        .args(["--duration", duration, "--json", "--no-telemetry"])
        .output()
        .unwrap();
    assert_gen_report(&out.stdout, &out.stderr, out.status.success());
}

fn assert_gen_report(stdout: &[u8], stderr: &[u8], success: bool) {
    let stdout = String::from_utf8_lossy(stdout);
    assert!(
        success,
        "gen failed: {stdout}\n{}",
        String::from_utf8_lossy(stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    assert_eq!(report["type"], "gen", "{report}");
    assert_eq!(report["sent"].as_u64(), Some(FRAMES), "{report}");
    assert_eq!(report["received"].as_u64(), Some(FRAMES), "{report}");
    for count in ["lost", "reordered", "duplicates", "corrupt", "foreign"] {
        assert_eq!(report[count], 0, "{count}: {report}");
    }
    assert_eq!(report["clean"], true, "{report}");
}

/// Every port of a forwarder's summary received and sent FRAMES packets,
/// and its pool is full.
fn assert_forwarded_all(summary: &serde_json::Value) {
    for p in summary["ports"].as_array().unwrap() {
        assert_eq!(p["rx_packets"].as_u64(), Some(FRAMES), "{p}");
        assert_eq!(p["tx_packets"].as_u64(), Some(FRAMES), "{p}");
        assert_eq!(p["drops"], 0, "{p}");
    }
    assert_eq!(summary["pool_full"], true, "{summary}");
}

/// The forwarder command `command` on `ports`: its arguments (`l3fwd`
/// routes every IPv4 address to port `to`).
fn forwarder_args(command: &str, ports: &[&str], routes: &Path, to: usize) -> Vec<String> {
    // Ended by SIGINT once the generator is done.
    let mut args = vec![
        command.to_owned(),
        "--json".into(),
        "--duration".into(),
        "600".into(),
    ];
    if command == "l3fwd" {
        std::fs::write(routes, format!("0.0.0.0/1 {to}\n128.0.0.0/1 {to}\n")).unwrap();
        args.extend(["--routes".into(), routes.display().to_string()]);
    }
    for p in ports {
        args.extend(["-p".into(), (*p).to_owned()]);
    }
    args
}

#[test]
fn fwd_l2fwd_and_l3fwd_send_every_frame_back_to_gen_on_a_memif_port() {
    for command in ["fwd", "l2fwd", "l3fwd"] {
        let dir = TempDir::new(command);
        let socket = dir.path("memif.sock");
        let server = format!("memif:socket={socket},role=server");
        let args = forwarder_args(command, &[&server], &dir.0.join("routes"), 0);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let forwarder = spawn(&args);
        wait_for_file(&socket);
        gen_all_back(&format!("memif:socket={socket},role=client"), "2");
        let (out, summary) = stop(forwarder);
        assert!(
            out.stderr.contains("waiting for peer"),
            "{command}: the server says it waits: {}",
            out.stderr
        );
        assert_forwarded_all(&summary);
    }
}

/// Sluice on both sides of vhost-user: `fwd`, `l2fwd` and `l3fwd` on a
/// `vhost:` port whose frontend is `sluice gen` on a `virtio:` port, then
/// `fwd` on a listening `virtio:` port whose backend is `gen` on a
/// connecting `vhost:` port.
#[test]
fn forwarders_on_vhost_and_virtio_ports_send_every_frame_back_to_gen() {
    for command in ["fwd", "l2fwd", "l3fwd"] {
        let dir = TempDir::new(&format!("vhost-{command}"));
        let socket = dir.path("vhost.sock");
        let backend = format!("vhost:path={socket}");
        let args = forwarder_args(command, &[&backend], &dir.0.join("routes"), 0);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let forwarder = spawn(&args);
        wait_for_file(&socket);
        gen_all_back(&format!("virtio:path={socket}"), "5");
        let (_, summary) = stop(forwarder);
        assert_forwarded_all(&summary);
    }
    let dir = TempDir::new("virtio-fwd");
    let socket = dir.path("vhost.sock");
    let frontend = format!("virtio:path={socket},server=1");
    let args = forwarder_args("fwd", &[&frontend], &dir.0.join("routes"), 0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let forwarder = spawn(&args);
    wait_for_file(&socket);
    gen_all_back(&format!("vhost:path={socket},server=0"), "5");
    let (_, summary) = stop(forwarder);
    assert_forwarded_all(&summary);
}

#[test]
fn gen_without_a_peer_ends_with_a_clear_error() {
    let dir = TempDir::new("nopeer");
    let socket = dir.path("memif.sock");
    let out = common::run(&[
        "gen",
        "-p",
        &format!("memif:socket={socket},role=client"),
        "--duration",
        "0.3",
        "--no-telemetry",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("waiting for peer"), "{stderr}");
    assert!(
        stderr.ends_with(&format!(
            "sluice: error: port memif:socket={socket},role=client: \
             no peer connected within --duration 0.3 s\n"
        )),
        "{stderr}"
    );
}

/// Whether testpmd is here; without it the test is skipped, except under
/// CI.
fn no_testpmd() -> bool {
    let present = Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !present {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no dpdk-testpmd under CI"
        );
        eprintln!("skipped: no dpdk-testpmd");
    }
    !present
}

/// dpdk-testpmd with a virtio_user port on a vhost socket, forwarding in
/// `io` mode on itself; ends when dropped.
struct Testpmd {
    child: Child,
    prefix: String,
}

impl Testpmd {
    /// Starts it on `socket` and waits (bounded) until it forwards.
    fn start(socket: &str, name: &str) -> Testpmd {
        let prefix = format!("sluice-vmcli-{name}-{}", std::process::id());
        // Line-buffered output, so its lines arrive as they are printed.
        let mut child = Command::new("timeout")
            .args(["120", "stdbuf", "-oL", "dpdk-testpmd"])
            .args(["--no-pci", "--no-huge", "-m", "128"])
            .args(["--no-shconf", "--no-telemetry", "--lcores=0@0,1@0"])
            .arg(format!("--file-prefix={prefix}"))
            .arg(format!(
                "--vdev=net_virtio_user0,path={socket},queues=1,queue_size=1024"
            ))
            .args(["--", "--total-num-mbufs=8192", "--nb-cores=1"])
            .args(["--rxd=1024", "--txd=1024"])
            .args(["--forward-mode=io", "--port-topology=loop"])
            .args(["--no-flush-rx", "--auto-start"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dpdk-testpmd starts");
        let stdout = child.stdout.take().unwrap();
        let (lines, output) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        loop {
            match output.recv_timeout(TIMEOUT) {
                // Printed once forwarding has started on a port whose
                // rings are set up.
                Ok(line) if line.contains("Press enter to exit") => break,
                Ok(line) => seen.push(line),
                Err(_) => panic!("testpmd did not come up:\n{}", seen.join("\n")),
            }
        }
        Testpmd { child, prefix }
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = stdin.write_all(b"\n");
        }
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        for base in [
            Some("/var/run".into()),
            std::env::var_os("XDG_RUNTIME_DIR"),
            Some("/tmp".into()),
        ]
        .into_iter()
        .flatten()
        {
            let _ = std::fs::remove_dir_all(Path::new(&base).join("dpdk").join(&self.prefix));
        }
    }
}

#[test]
fn gen_on_a_vhost_port_gets_every_frame_back_from_testpmd() {
    if no_testpmd() {
        return;
    }
    let dir = TempDir::new("gen-vhost");
    let socket = dir.path("vhost.sock");
    // gen listens and waits for its peer; testpmd connects.
    let generator = std::process::Command::new(SLUICE)
        .env("RUNTIME_DIRECTORY", runtime_dir())
        .args(["gen", "-p", &format!("vhost:path={socket}")])
        .args(["--count", &FRAMES.to_string(), "--check", "--duration", "2"])
        .args(["--json", "--no-telemetry"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&socket);
    let testpmd = Testpmd::start(&socket, "gen");
    let out = generator.wait_with_output().unwrap();
    drop(testpmd);
    assert_gen_report(&out.stdout, &out.stderr, out.status.success());
}

#[test]
fn fwd_and_l2fwd_forward_between_a_vhost_and_a_memif_port() {
    if no_testpmd() {
        return;
    }
    for command in ["fwd", "l2fwd"] {
        let dir = TempDir::new(&format!("{command}-vhost"));
        let vhost = dir.path("vhost.sock");
        let memif = dir.path("memif.sock");
        let ports = [
            format!("vhost:path={vhost}"),
            format!("memif:socket={memif},role=server"),
        ];
        let args = forwarder_args(command, &[&ports[0], &ports[1]], &dir.0.join("r"), 0);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let forwarder = spawn(&args);
        wait_for_file(&vhost);
        wait_for_file(&memif);
        // gen -> memif -> vhost -> testpmd -> vhost -> memif -> gen.
        let testpmd = Testpmd::start(&vhost, command);
        gen_all_back(&format!("memif:socket={memif},role=client"), "2");
        let (_, summary) = stop(forwarder);
        drop(testpmd);
        assert_forwarded_all(&summary);
    }
}
