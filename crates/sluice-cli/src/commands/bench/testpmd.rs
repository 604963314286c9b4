//! DPDK's `dpdk-testpmd` driven as a benchmark peer: started in interactive
//! mode with its commands written to its standard input and its output read
//! line by line (through `stdbuf -oL`, so each line arrives as it is
//! printed), for the DPDK pairings of `sluice bench fwd`'s VM cases
//! (`fwd_vm.rs`) and its testpmd over `net_null` (`fwd_testpmd.rs`).
//!
//! A VM pairing's process has one port (a `--vdev`) and one forwarding
//! lcore, io forwarding with `--port-topology=loop` (every frame received
//! goes back out of the same port) and `--record-core-cycles`; the
//! `net_null` process has two ports, paired. A timed window is
//! `clear fwd stats all` and `show port stats all` at its start, `show
//! port stats all` and `stop` at its end: the second `show port stats`
//! gives the port's received packets a second over the window (`Rx-pps`,
//! timed by testpmd between the two commands), `stop` the forwarding
//! lcore's `CPU cycles/packet` since the clear — TSC cycles of the loop
//! iterations that received packets, per packet received.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use sluice::mempool::Backing;

/// Longest testpmd may take to come up (EAL start on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest one command may take to answer.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest the process may take to end after `quit`.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Output lines kept for error messages.
const KEPT_LINES: usize = 40;

/// Why testpmd cannot be a peer here, if it cannot: the program, `stdbuf`
/// (coreutils) and the DPDK drivers (`librte_net_*.so`) named in `pmds`.
pub fn missing(pmds: &[&str]) -> Option<String> {
    for tool in ["dpdk-testpmd", "stdbuf"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("no {tool}"));
        }
    }
    for pmd in pmds {
        let file = format!("librte_{pmd}.so");
        let present = std::fs::read_dir("/usr/lib")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|arch| std::fs::read_dir(arch.path().join("dpdk")).ok())
            .flatten()
            .flatten()
            .any(|dir| dir.path().join(&file).exists());
        if !present {
            return Some(format!("no DPDK {pmd} driver ({file})"));
        }
    }
    None
}

/// What one side measured over a timed window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowFigures {
    /// Packets received a second over the window.
    pub rx_pps: f64,
    /// Forwarding-loop TSC cycles per packet received.
    pub cycles_per_packet: f64,
}

/// A running interactive testpmd; dropping it ends it.
pub struct Testpmd {
    /// Its name in messages (`server`, `client`).
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// The last lines read, for error messages.
    recent: VecDeque<String>,
    /// Its EAL file prefix (a runtime directory removed at the end).
    prefix: String,
}

impl Testpmd {
    /// Starts testpmd with one port, `vdev`, its main and forwarding lcores
    /// both on `cpu` (the main lcore waits on its input), and waits until
    /// it answers commands.
    pub fn spawn(name: &'static str, cpu: usize, vdev: &str) -> Result<Testpmd, String> {
        Testpmd::spawn_ports(
            name,
            cpu,
            &[vdev],
            Backing::Anonymous,
            &["--port-topology=loop"],
        )
    }

    /// Starts testpmd as [`Testpmd::spawn`] does, with a port for each of
    /// `vdevs`, its memory on `memory` (hugepages: `--in-memory`; 4 KiB
    /// pages: `--no-huge`), and `options` added to testpmd's own (after
    /// `--`: the port topology, `--no-flush-rx`, ...).
    pub fn spawn_ports(
        name: &'static str,
        cpu: usize,
        vdevs: &[&str],
        memory: Backing,
        options: &[&str],
    ) -> Result<Testpmd, String> {
        let memory: &[&str] = match memory {
            // Hugepages taken as needed, in memory files no other process
            // sees.
            Backing::Hugepages => &["--in-memory"],
            Backing::Anonymous => &["--no-huge", "-m", "512", "--no-shconf"],
        };
        let prefix = format!(
            "sluice-bench-{name}-{}-{}",
            std::process::id(),
            super::unique_name("testpmd")
        );
        let mut child = Command::new("stdbuf")
            .args(["-oL", "dpdk-testpmd", "--no-pci"])
            .args(memory)
            .arg("--no-telemetry")
            .arg(format!("--lcores=0@{cpu},1@{cpu}"))
            .arg(format!("--file-prefix={prefix}"))
            .args(vdevs.iter().map(|vdev| format!("--vdev={vdev}")))
            .args(["--", "-i", "--nb-cores=1", "--forward-mode=io"])
            .args(options)
            .arg("--record-core-cycles")
            .args(["--burst=32", "--rxd=1024", "--txd=1024", "--mbcache=256"])
            .arg("--total-num-mbufs=8192")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start dpdk-testpmd: {e}"))?;
        let (tx, lines) = mpsc::channel();
        for out in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        let mut testpmd = Testpmd {
            name,
            child,
            stdin,
            lines,
            recent: VecDeque::new(),
            prefix,
        };
        testpmd.send(&["show port stats all"])?;
        testpmd.wait_for("its first answer", START_TIMEOUT, |l| l.contains("Tx-pps:"))?;
        Ok(testpmd)
    }

    /// Writes `commands`, one a line.
    pub fn send(&mut self, commands: &[&str]) -> Result<(), String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| format!("testpmd ({}): input closed", self.name))?;
        let mut text = commands.join("\n");
        text.push('\n');
        stdin
            .write_all(text.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("testpmd ({}): cannot write a command: {e}", self.name))
    }

    /// Reads lines until one `matches`, within `timeout`; returns the lines
    /// read, that one last.
    fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>, String> {
        let deadline = Instant::now() + timeout;
        let mut read = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if self.recent.len() == KEPT_LINES {
                        self.recent.pop_front();
                    }
                    self.recent.push_back(line.clone());
                    let done = matches(&line);
                    read.push(line);
                    if done {
                        return Ok(read);
                    }
                }
                Err(e) => {
                    let why = match e {
                        RecvTimeoutError::Timeout => {
                            format!("no {what} in {} s", timeout.as_secs())
                        }
                        RecvTimeoutError::Disconnected => format!("it ended before {what}"),
                    };
                    return Err(format!(
                        "testpmd ({}): {why}; its last lines:\n{}",
                        self.name,
                        Vec::from(self.recent.clone()).join("\n")
                    ));
                }
            }
        }
    }

    /// Waits until the port's link is up (asking every 20 ms), at most
    /// until `deadline`.
    pub fn await_link(&mut self, deadline: Instant) -> Result<(), String> {
        loop {
            self.send(&["show port info 0"])?;
            let lines = self.wait_for("port information", COMMAND_TIMEOUT, |l| {
                l.contains("Link status:")
            })?;
            if lines.last().is_some_and(|l| l.contains("up")) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("testpmd ({}): its link did not come up", self.name));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts forwarding `size`-byte frames: first `tx_first` bursts of 32
    /// generated frames sent out of the port, if any (`start tx_first N`),
    /// then io forwarding. Received frames left from before are dropped
    /// first (testpmd flushes its Rx queues on `start`). Returns once
    /// forwarding runs.
    pub fn start(&mut self, size: u16, tx_first: Option<u32>) -> Result<(), String> {
        let set = format!("set txpkts {size}");
        let start = match tx_first {
            Some(n) => format!("start tx_first {n}"),
            None => "start".to_owned(),
        };
        // `show port stats` answers once `start` has returned.
        self.send(&[&set, &start, "show port stats all"])?;
        self.wait_for("answer to start", COMMAND_TIMEOUT, |l| {
            l.contains("Tx-pps:")
        })
        .map(drop)
    }

    /// Opens a timed window: clears the forwarding statistics and takes the
    /// port statistics the window's rate counts from. Answered by
    /// [`Testpmd::window_opened`].
    pub fn open_window(&mut self) -> Result<(), String> {
        self.send(&["clear fwd stats all", "show port stats all"])
    }

    /// Waits for the answer to [`Testpmd::open_window`].
    pub fn window_opened(&mut self) -> Result<(), String> {
        self.wait_for("the port statistics", COMMAND_TIMEOUT, |l| {
            l.contains("Tx-pps:")
        })
        .map(drop)
    }

    /// Closes the window and stops forwarding. Answered by
    /// [`Testpmd::window_closed`].
    pub fn close_window(&mut self) -> Result<(), String> {
        self.send(&["show port stats all", "stop"])
    }

    /// Waits for the answer to [`Testpmd::close_window`]: the window's
    /// figures.
    pub fn window_closed(&mut self) -> Result<WindowFigures, String> {
        self.window_closed_counted().map(|(figures, _)| figures)
    }

    /// [`Testpmd::window_closed`], with the packets the cycles were counted
    /// over (all ports' received packets) beside the figures.
    pub fn window_closed_counted(&mut self) -> Result<(WindowFigures, u64), String> {
        let lines = self.wait_for("the end of forwarding", COMMAND_TIMEOUT, |l| {
            l.trim() == "Done."
        })?;
        let rx_pps = lines.iter().find_map(|l| parse_rx_pps(l));
        let cycles = lines.iter().rev().find_map(|l| parse_cycles_per_packet(l));
        let packets = lines.iter().rev().find_map(|l| parse_cycled_packets(l));
        match (rx_pps, cycles, packets) {
            (Some(rx_pps), Some(cycles_per_packet), Some(packets)) => Ok((
                WindowFigures {
                    rx_pps,
                    cycles_per_packet,
                },
                packets,
            )),
            _ => Err(format!(
                "testpmd ({}): no Rx-pps or no CPU cycles/packet (nothing forwarded?):\n{}",
                self.name,
                lines.join("\n")
            )),
        }
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        let _ = self.send(&["stop", "quit"]);
        // End of input ends the interactive prompt too.
        drop(self.stdin.take());
        let deadline = Instant::now() + EXIT_TIMEOUT;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its runtime directory (the EAL makes one even without shared
        // configuration).
        for base in [Some("/var/run".into()), std::env::var_os("XDG_RUNTIME_DIR")]
            .into_iter()
            .flatten()
        {
            let _ = std::fs::remove_dir_all(Path::new(&base).join("dpdk").join(&self.prefix));
        }
    }
}

/// The packets a second of an `Rx-pps:` line of `show port stats`.
pub fn parse_rx_pps(line: &str) -> Option<f64> {
    let mut words = line.split_whitespace();
    if words.next()? != "Rx-pps:" {
        return None;
    }
    words.next()?.parse().ok()
}

/// The figure of a `CPU cycles/packet=` line of testpmd's forwarding
/// statistics.
pub fn parse_cycles_per_packet(line: &str) -> Option<f64> {
    let rest = line.trim().strip_prefix("CPU cycles/packet=")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The packets of a `CPU cycles/packet=` line of testpmd's forwarding
/// statistics: the `total ... packets=` its cycles were divided by.
pub fn parse_cycled_packets(line: &str) -> Option<u64> {
    let line = line.trim();
    line.strip_prefix("CPU cycles/packet=")?;
    let (_, rest) = line.split_once(" packets=")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_cycles_parse_from_testpmd_lines() {
        assert_eq!(
            parse_rx_pps("  Rx-pps:       376481          Rx-bps:    192758496"),
            Some(376481.0)
        );
        assert_eq!(
            parse_rx_pps("  Tx-pps:       376513          Tx-bps:  1"),
            None
        );
        assert_eq!(parse_rx_pps("  Rx-pps:"), None);
        assert_eq!(
            parse_cycles_per_packet(
                "  CPU cycles/packet=1579.73 (total cycles=588064994 / total io \
                 packets=372256) at 2450 MHz Clock"
            ),
            Some(1579.73)
        );
        assert_eq!(
            parse_cycled_packets(
                "  CPU cycles/packet=17.10 (total cycles=75060459 / total mac \
                 packets=4351008) at 2450 MHz Clock"
            ),
            Some(4351008)
        );
        assert_eq!(parse_cycled_packets("  RX-packets: 372256"), None);
        assert_eq!(parse_cycles_per_packet("  RX-packets: 372256"), None);
        assert_eq!(parse_cycles_per_packet("CPU cycles/packet=x"), None);
    }
}
