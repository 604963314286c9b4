//! The `memif:` port against DPDK's `dpdk-testpmd` with a `net_memif` port
//! forwarding in `io` mode (every frame it receives goes back out
//! unchanged), in both roles. The library tester generates the frames and
//! checks every one that comes back: none lost, none out of order, none
//! changed, and every buffer back in the pool.
//!
//! Needs `dpdk-testpmd` (Debian: dpdk) and DPDK's memif driver; without
//! them the test says it is skipped, except under CI (`CI=true`), where a
//! missing tool fails it.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use sluice::driver;
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::{Port, PortConfig};
use sluice::tester::{Tester, TesterConfig};

mod memif_testpmd_support;

use memif_testpmd_support::{TempDir, skip};

/// How long testpmd may take to come up, and the link after it.
const TIMEOUT: Duration = Duration::from_secs(60);

const FRAMES: u64 = 5_000;

/// testpmd running under `timeout`; dropping it ends it.
struct Testpmd {
    child: Child,
    output: mpsc::Receiver<String>,
}

impl Testpmd {
    /// Starts testpmd with a memif port of `role` at `socket` and waits
    /// until its port is started.
    fn start(socket: &Path, role: &str) -> Testpmd {
        let prefix = format!("sluice-memif-port-{role}-{}", std::process::id());
        let vdev = format!(
            "net_memif0,role={role},id=0,socket={},socket-abstract=no",
            socket.display()
        );
        let mut child = Command::new("timeout")
            .args(["120", "dpdk-testpmd", "--no-pci", "--no-huge", "-m", "256"])
            .args(["-l", "0-1", "--file-prefix", &prefix, "--vdev", &vdev, "--"])
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
        let testpmd = Testpmd { child, output };
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
    }
}

fn pool() -> MbufPool {
    MbufPool::new(MbufPoolConfig {
        size: 2047,
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
    let window = 256u64;
    let (mut sent, mut received) = (0u64, 0u64);
    let mut out: Burst = Burst::new();
    let mut back: Burst = Burst::new();
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + TIMEOUT;
    while received < FRAMES {
        assert!(
            Instant::now() < deadline,
            "no progress: sent {sent}, received {received}\n{}",
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
}

#[test]
fn the_server_port_echoes_through_a_testpmd_client() {
    if skip() {
        return;
    }
    let dir = TempDir::new("port-server");
    let socket = dir.0.join("memif.sock");
    let pool = pool();
    {
        let mut port = open(
            &format!("memif:socket={},role=server", socket.display()),
            &pool,
        );
        let testpmd = Testpmd::start(&socket, "client");
        wait_link(&port, &testpmd);
        echo(&mut port, &pool, &testpmd);
        port.stop();
        drop(testpmd);
    }
    assert!(!socket.exists(), "the server removes its socket file");
    assert!(pool.is_full());
}

#[test]
fn the_client_port_echoes_through_a_testpmd_server() {
    if skip() {
        return;
    }
    let dir = TempDir::new("port-client");
    let socket = dir.0.join("memif.sock");
    let pool = pool();
    {
        let testpmd = Testpmd::start(&socket, "server");
        let mut port = open(
            &format!("memif:socket={},role=client", socket.display()),
            &pool,
        );
        wait_link(&port, &testpmd);
        echo(&mut port, &pool, &testpmd);
        port.stop();
        drop(testpmd);
    }
    assert!(pool.is_full());
}
