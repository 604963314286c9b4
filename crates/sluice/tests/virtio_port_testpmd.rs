//! The `virtio:` port against DPDK's `dpdk-testpmd` with a `net_vhost`
//! port forwarding in `io` mode (every frame it receives goes back out
//! unchanged): testpmd is the vhost-user backend, listening or connecting,
//! and maps the port's shared mbuf pool. The library tester generates the
//! frames and checks every one that comes back: none lost, none out of
//! order, none changed, and every buffer back in the pool.
//!
//! Needs `dpdk-testpmd` (Debian: dpdk) with its vhost driver; without them
//! the test says it is skipped, except under CI (`CI=true`), where a
//! missing tool fails it.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use sluice::driver;
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::{Port, PortConfig};
use sluice::tester::{Tester, TesterConfig};

/// How long testpmd may take to come up, and the link after it.
const TIMEOUT: Duration = Duration::from_secs(60);

const FRAMES: u64 = 5_000;

/// Whether testpmd and its vhost driver are here.
fn tools_present() -> Result<(), String> {
    let testpmd = Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if testpmd.is_err() {
        return Err("no dpdk-testpmd".into());
    }
    let vhost_driver = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|arch| std::fs::read_dir(arch.path().join("dpdk")).ok())
        .flatten()
        .flatten()
        .any(|pmds| pmds.path().join("librte_net_vhost.so").exists());
    if !vhost_driver {
        return Err("no DPDK vhost driver (librte_net_vhost.so)".into());
    }
    Ok(())
}

/// Skips (or, under CI, fails) when testpmd or its vhost driver is missing.
fn skip() -> bool {
    match tools_present() {
        Ok(()) => false,
        Err(missing) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{missing}"),
        Err(missing) => {
            eprintln!("skipped: {missing}");
            true
        }
    }
}

/// A fresh directory for the socket file, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sluice-virtio-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// testpmd running under `timeout`; dropping it ends it.
struct Testpmd {
    child: Child,
    output: mpsc::Receiver<String>,
    prefix: String,
}

impl Testpmd {
    /// Starts testpmd with a vhost port at `socket` (`client`: connecting
    /// to it, otherwise listening) and waits until its port is started.
    fn start(socket: &Path, client: bool) -> Testpmd {
        let prefix = format!("sluice-virtio-port-{client}-{}", std::process::id());
        let vdev = format!(
            "net_vhost0,iface={},queues=1,client={}",
            socket.display(),
            u8::from(client)
        );
        let mut child = Command::new("timeout")
            .args(["120", "dpdk-testpmd", "--no-pci", "--no-huge", "-m", "512"])
            .args(["-l", "0-1", "--no-telemetry", "--file-prefix", &prefix])
            .args(["--vdev", &vdev, "--"])
            // --no-flush-rx: frames sent before forwarding starts stay in
            // the ring for it.
            .args([
                "--total-num-mbufs=4096",
                "--forward-mode=io",
                "--port-topology=loop",
            ])
            .args(["--auto-start", "--no-flush-rx"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dpdk-testpmd starts");
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, output) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let testpmd = Testpmd {
            child,
            output,
            prefix,
        };
        let mut seen = Vec::new();
        loop {
            match testpmd.output.recv_timeout(TIMEOUT) {
                // Printed once the port is started.
                Ok(line) if line.contains("Checking link statuses") => return testpmd,
                Ok(line) => seen.push(line),
                Err(_) => panic!("testpmd did not come up:\n{}", seen.join("\n")),
            }
        }
    }

    /// Its output so far.
    fn output(&self) -> String {
        self.output.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        // testpmd ends on Enter; `timeout` ends it in any case.
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

/// The port's pool, in memory testpmd maps.
fn pool() -> MbufPool {
    MbufPool::new_shared(MbufPoolConfig {
        size: 2047,
        cache_size: 0,
        ..Default::default()
    })
    .unwrap()
}

fn open(spec: &str, pool: &MbufPool) -> Port {
    let mut port = driver::open(spec, PortConfig::new(Some(pool.clone()))).unwrap();
    port.start().unwrap();
    port
}

/// Waits (bounded) until `port` is connected.
fn wait_link(port: &Port, testpmd: &Testpmd) {
    let deadline = Instant::now() + TIMEOUT;
    while port.counters().xstats.get("link_ups").unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "no link:\n{}", testpmd.output());
        thread::sleep(Duration::from_millis(5));
    }
}

/// Sends FRAMES tester frames out of `port` and checks each one testpmd
/// sends back.
fn echo(port: &mut Port, pool: &MbufPool, testpmd: &Testpmd) {
    let tester = Tester::new(TesterConfig {
        count: Some(FRAMES),
        flows: 16,
        ..TesterConfig::default()
    });
    let stream = tester.add_stream();
    let mut generator = tester.generator(stream, (0..16).collect());
    let mut checker = tester.checker();
    // Fewer frames in flight than either ring holds, so testpmd never finds
    // its way back full and drops.
    let window = 128u64;
    let (mut sent, mut received) = (0u64, 0u64);
    let mut out: Burst = Burst::new();
    let mut back: Burst = Burst::new();
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + TIMEOUT;
    // The port's Rx ring is stocked at its first poll.
    port.rx_queue(0).unwrap().rx_burst(&mut back);
    while received < FRAMES {
        assert!(
            Instant::now() < deadline,
            "no progress: sent {sent}, received {received}; {:?}\n{}",
            port.xstats(),
            testpmd.output()
        );
        while out.len() < 32 && sent < (received + window).min(FRAMES) {
            let len = generator.fill(&mut buf, 0).expect("a frame to send");
            out.push(pool.alloc_from_slice(&buf[..len]).unwrap())
                .unwrap();
            sent += 1;
        }
        port.tx_queue(0).unwrap().tx_burst(&mut out);
        port.rx_queue(0).unwrap().rx_burst(&mut back);
        let n = back.len();
        for m in back.drain_front(n) {
            let mut frame = Vec::new();
            m.segments().for_each(|s| frame.extend_from_slice(s));
            checker.check(&frame);
            received += 1;
        }
        thread::yield_now();
    }
    let report = tester.report();
    assert_eq!(
        (report.sent, report.received, report.lost),
        (FRAMES, FRAMES, 0)
    );
    assert_eq!(
        (report.reordered, report.duplicates, report.corrupt),
        (0, 0, 0)
    );
    assert!(report.is_clean(), "{report}");
    let stats = port.stats();
    assert_eq!((stats.tx_packets, stats.rx_packets), (FRAMES, FRAMES));
    assert_eq!((stats.tx_errors, stats.rx_errors), (0, 0));
    for (name, value) in port.xstats() {
        if name.ends_with("_errors") || name.ends_with("_drops") {
            assert_eq!(value, 0, "{name}");
        }
    }
}

#[test]
fn the_port_echoes_through_a_listening_testpmd() {
    if skip() {
        return;
    }
    let dir = TempDir::new("connect");
    let socket = dir.0.join("vhost.sock");
    let pool = pool();
    {
        let testpmd = Testpmd::start(&socket, false);
        let mut port = open(&format!("virtio:path={}", socket.display()), &pool);
        wait_link(&port, &testpmd);
        echo(&mut port, &pool, &testpmd);
        port.stop();
        drop(testpmd);
    }
    assert!(pool.is_full(), "{} of 2047 mbufs home", pool.available());
}

#[test]
fn the_listening_port_echoes_through_a_connecting_testpmd() {
    if skip() {
        return;
    }
    let dir = TempDir::new("listen");
    let socket = dir.0.join("vhost.sock");
    let pool = pool();
    {
        let mut port = open(&format!("virtio:path={},server=1", socket.display()), &pool);
        let testpmd = Testpmd::start(&socket, true);
        wait_link(&port, &testpmd);
        echo(&mut port, &pool, &testpmd);
        port.stop();
        drop(testpmd);
    }
    assert!(
        !socket.exists(),
        "the listening port removes its socket file"
    );
    assert!(pool.is_full(), "{} of 2047 mbufs home", pool.available());
}
