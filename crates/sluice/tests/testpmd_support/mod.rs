//! What the tests against DPDK's `dpdk-testpmd` share: finding testpmd and
//! the driver a test needs, skipping without them (failing under CI), a
//! directory for the socket file, EAL's leftovers, hugepages, testpmd
//! itself as a child whose output is kept, and the echo of tester frames
//! through it.
//!
//! Each test file is its own crate and uses part of this module; the `mod`
//! line there allows the rest to go unused.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use sluice::driver;
use sluice::mbuf::{Burst, MbufPool};
use sluice::port::{Port, PortConfig};
use sluice::tester::{Tester, TesterConfig};

/// Whether testpmd and DPDK's driver library `driver` (such as
/// `librte_net_memif.so`) are here.
fn tools_present(driver: &str) -> Result<(), String> {
    let testpmd = Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if testpmd.is_err() {
        return Err("no dpdk-testpmd".into());
    }
    let driver_present = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|arch| std::fs::read_dir(arch.path().join("dpdk")).ok())
        .flatten()
        .flatten()
        .any(|pmds| pmds.path().join(driver).exists());
    if !driver_present {
        return Err(format!("no DPDK driver {driver}"));
    }
    Ok(())
}

/// Says why a test is skipped and returns true, or, under CI
/// (`CI=true`), fails: there nothing a test needs may be missing.
pub fn skip_for(missing: &str) -> bool {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{missing} under CI"
    );
    eprintln!("skipped: {missing}");
    true
}

/// Skips (or, under CI, fails) when testpmd or DPDK's driver library
/// `driver` (such as `librte_net_virtio.so`) is missing.
pub fn skip(driver: &str) -> bool {
    match tools_present(driver) {
        Ok(()) => false,
        Err(missing) => skip_for(&missing),
    }
}

/// A fresh directory for the socket file, removed on drop; `name` says
/// which test's it is (the process id makes it this run's).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
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

/// Removes EAL's runtime directory for `prefix`, by DPDK's rules (root:
/// /var/run, else XDG_RUNTIME_DIR or /tmp).
pub fn remove_eal_runtime(prefix: &str) {
    let bases = [
        Some("/var/run".into()),
        std::env::var_os("XDG_RUNTIME_DIR"),
        Some("/tmp".into()),
    ];
    for base in bases.into_iter().flatten() {
        let _ = std::fs::remove_dir_all(Path::new(&base).join("dpdk").join(prefix));
    }
}

/// Where the kernel keeps the 2 MiB hugepage pool's counts.
const HUGEPAGES_2M: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";

/// Free 2 MiB hugepages made sure of for a test: the pool is raised (as
/// root) when too few are free, and put back to its size on drop.
pub struct HugePages {
    /// The pool's size before, when it was raised.
    restore: Option<u64>,
}

impl HugePages {
    fn count(name: &str) -> Option<u64> {
        std::fs::read_to_string(format!("{HUGEPAGES_2M}/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// At least `want` free hugepages, or why not.
    pub fn reserve(want: u64) -> Result<HugePages, String> {
        let free = Self::count("free_hugepages").ok_or("no 2 MiB hugepages in this kernel")?;
        if free >= want {
            return Ok(HugePages { restore: None });
        }
        let total = Self::count("nr_hugepages").ok_or("no hugepage pool size")?;
        std::fs::write(
            format!("{HUGEPAGES_2M}/nr_hugepages"),
            (total + want - free).to_string(),
        )
        .map_err(|e| format!("cannot reserve hugepages: {e}"))?;
        let guard = HugePages {
            restore: Some(total),
        };
        match Self::count("free_hugepages") {
            Some(now) if now >= want => Ok(guard),
            _ => Err(format!("{want} hugepages could not be reserved")),
        }
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        if let Some(total) = self.restore {
            let _ = std::fs::write(format!("{HUGEPAGES_2M}/nr_hugepages"), total.to_string());
        }
    }
}

/// testpmd's arguments (after `--`) for forwarding in `io` mode on its one
/// port: every frame it receives goes back out unchanged. Frames sent
/// before forwarding starts stay in the ring for it (`--no-flush-rx`).
pub const IO_LOOP_ARGS: [&str; 5] = [
    "--total-num-mbufs=4096",
    "--forward-mode=io",
    "--port-topology=loop",
    "--auto-start",
    "--no-flush-rx",
];

/// testpmd running (under `timeout`, which ends it in any case), its
/// standard output and error read into a channel; dropping it ends it and
/// removes its EAL runtime directory.
pub struct Testpmd {
    child: Child,
    output: mpsc::Receiver<String>,
    prefix: String,
    timeout: Duration,
}

/// Sends each line `from` gives on `to`, until either ends.
fn forward_lines(from: impl Read + Send + 'static, to: mpsc::Sender<String>) {
    thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            if to.send(line).is_err() {
                break;
            }
        }
    });
}

impl Testpmd {
    /// Spawns `command` (testpmd with the test's EAL and testpmd
    /// arguments, `--file-prefix` among them set to `prefix`), its
    /// standard input, output and error piped. `timeout` bounds each wait
    /// on it: for a line, for the link, for progress of the echo.
    pub fn spawn(mut command: Command, prefix: &str, timeout: Duration) -> Testpmd {
        let mut child = command
            // Forwarding runs until a line arrives on its standard input.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("dpdk-testpmd starts");
        let (lines_tx, output) = mpsc::channel();
        forward_lines(child.stderr.take().unwrap(), lines_tx.clone());
        forward_lines(child.stdout.take().unwrap(), lines_tx);
        Testpmd {
            child,
            output,
            prefix: prefix.to_owned(),
            timeout,
        }
    }

    /// Waits (bounded) for a line containing `marker` and returns the
    /// lines up to it; fails with them when none comes.
    pub fn wait_for(&self, marker: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match self.output.recv_timeout(self.timeout) {
                Ok(line) => {
                    let found = line.contains(marker);
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(_) => panic!("testpmd printed no {marker:?}:\n{}", seen.join("\n")),
            }
        }
    }

    /// Its output so far, not yet taken.
    pub fn output(&self) -> String {
        self.output.try_iter().collect::<Vec<_>>().join("\n")
    }

    /// Ends it and returns its output not yet taken.
    pub fn end(mut self) -> String {
        self.stop();
        self.output()
    }

    fn stop(&mut self) {
        // testpmd ends on Enter; `timeout` ends it in any case.
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = stdin.write_all(b"\n");
        }
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        self.stop();
        remove_eal_runtime(&self.prefix);
    }
}

/// Opens the port `spec` on `pool` and starts it.
pub fn open_port(spec: &str, pool: &MbufPool) -> Port {
    let mut port = driver::open(spec, PortConfig::new(Some(pool.clone()))).unwrap();
    port.start().unwrap();
    port
}

/// Waits (bounded) until `port` is connected to `testpmd`.
pub fn wait_link(port: &Port, testpmd: &Testpmd) {
    let deadline = Instant::now() + testpmd.timeout;
    while port.counters().xstats.get("link_ups").unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "no link:\n{}", testpmd.output());
        thread::sleep(Duration::from_millis(5));
    }
}

/// Sends `frames` tester frames out of `port`, at most `window` of them in
/// flight, and checks each one testpmd sends back: none lost, none out of
/// order, none changed, no errors counted. Frames equal to `leave_out`
/// (not the tester's, sent before) are left out of the check; the port's
/// packet counts grow by `frames` each, plus those on the way back, whose
/// number is returned. With nothing left out the port carries nothing
/// else: its counts are exactly `frames`.
pub fn echo(
    port: &mut Port,
    pool: &MbufPool,
    testpmd: &Testpmd,
    frames: u64,
    window: u64,
    leave_out: Option<&[u8]>,
) -> u64 {
    let before = match leave_out {
        Some(_) => port.stats(),
        None => Default::default(),
    };
    let mut left_out = 0u64;
    let tester = Tester::new(TesterConfig {
        count: Some(frames),
        flows: 16,
        ..TesterConfig::default()
    });
    let stream = tester.add_stream().unwrap();
    let mut generator = tester.generator(stream, (0..16).collect());
    let mut checker = tester.checker();
    let (mut sent, mut received) = (0u64, 0u64);
    let mut out: Burst = Burst::new();
    let mut back: Burst = Burst::new();
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + testpmd.timeout;
    // A virtio port's Rx ring is stocked at its first poll.
    port.rx_queue(0).unwrap().rx_burst(&mut back);
    while received < frames {
        assert!(
            Instant::now() < deadline,
            "no progress: sent {sent}, received {received}, port {:?} {:?}\n{}",
            port.stats(),
            port.xstats(),
            testpmd.output()
        );
        while out.len() < 32 && sent < (received + window).min(frames) {
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
            if leave_out == Some(&frame[..]) {
                left_out += 1;
                continue;
            }
            checker.check(&frame);
            received += 1;
        }
        thread::yield_now();
    }
    let report = tester.report();
    assert_eq!(
        (report.sent, report.received, report.lost),
        (frames, frames, 0)
    );
    assert_eq!(
        (report.reordered, report.duplicates, report.corrupt),
        (0, 0, 0)
    );
    assert!(report.is_clean(), "{report}");
    let stats = port.stats();
    assert_eq!(
        (stats.tx_packets, stats.rx_packets),
        (
            before.tx_packets + frames,
            before.rx_packets + frames + left_out
        )
    );
    assert_eq!((stats.tx_errors, stats.rx_errors), (0, 0));
    for (name, value) in port.xstats() {
        if name.ends_with("_errors") || name.ends_with("_drops") {
            assert_eq!(value, 0, "{name}");
        }
    }
    left_out
}
