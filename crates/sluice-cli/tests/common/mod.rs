//! What the command-line tests share: running the built `sluice` binary
//! and reading its JSON output; and for the kernel-port tests
//! (`kernel_ports.rs`, `afxdp_cli.rs`), stopping a Sluice process for its
//! JSON summary, pings across the forwarder, and a 50 MiB TCP transfer
//! whose every byte is checked on arrival. Each test file uses a part.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use sluice_netns::{Netns, Output, Proc};

/// The built binary.
pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// A command for the built binary, with a runtime directory of its own
/// (`RUNTIME_DIRECTORY`, see [`runtime_dir`]): tests run side by side, and
/// each instance serves its telemetry socket under the default file prefix.
pub fn sluice() -> Command {
    let mut cmd = Command::new(SLUICE);
    cmd.env("RUNTIME_DIRECTORY", runtime_dir());
    cmd
}

/// A new runtime directory for one run: `sluice-tests/PID-N` under the
/// system's temporary directory (this process's id and a count).
pub fn runtime_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir()
        .join("sluice-tests")
        .join(format!("{}-{n}", std::process::id()))
}

/// `argv` for the built binary with `args`, and `--no-telemetry` after a
/// command that serves telemetry (runs in namespaces share one runtime
/// directory).
pub fn argv_without_telemetry<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut argv: Vec<&str> = [SLUICE].iter().chain(args).copied().collect();
    if args
        .first()
        .is_some_and(|c| ["fwd", "l2fwd", "l3fwd", "dist", "gen"].contains(c))
    {
        argv.push("--no-telemetry");
    }
    argv
}

/// Runs `sluice ARGS` to its end: its output.
pub fn run(args: &[&str]) -> std::process::Output {
    sluice()
        .args(args)
        .output()
        .expect("the sluice binary runs")
}

/// Runs `sluice fwd` between ports `a` and `b` for 0.2 s with 256
/// descriptors and a JSON summary, with `extra` arguments: its output.
pub fn fwd_pair(a: &str, b: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "fwd",
        "--port",
        a,
        "--port",
        b,
        "--duration",
        "0.2",
        "--json",
        "--rxd",
        "256",
        "--txd",
        "256",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

/// Asserts that the run succeeded, saying how it ended otherwise.
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON summary: the last line of `stdout`.
pub fn summary_of(stdout: &[u8]) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(stdout);
    let last = stdout.lines().last().expect("a summary line");
    let v: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    assert_eq!(v["type"], "summary", "{v}");
    v
}

/// The JSON summary of a successful run.
pub fn summary(out: &std::process::Output) -> serde_json::Value {
    assert_success(out);
    summary_of(&out.stdout)
}

/// Every line of a successful run's standard output, as JSON.
pub fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert_success(out);
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The first tester of a summary saw every frame it sent come back once,
/// in order per flow, intact, and nothing else; its name is `name`.
/// Returns how many it sent (at least one).
pub fn assert_tester_got_everything(summary: &serde_json::Value, name: &str) -> u64 {
    let tester = &summary["testers"][0];
    assert_eq!(tester["name"], name);
    let sent = tester["sent"].as_u64().unwrap();
    assert!(sent > 0, "{tester}");
    assert_eq!(tester["received"].as_u64(), Some(sent), "{tester}");
    for count in ["lost", "reordered", "duplicates", "corrupt", "foreign"] {
        assert_eq!(tester[count], 0, "{count}: {tester}");
    }
    sent
}

/// Starts Sluice with `args` as a process of the test harness (stopped or
/// killed when dropped).
pub fn spawn(args: &[&str]) -> Proc<'static> {
    sluice_netns::spawn(&argv_without_telemetry(args)).expect("sluice starts")
}

/// Bytes of the TCP transfer.
pub const TRANSFER: usize = 50 << 20;

/// How long Sluice gets to end after SIGINT, printing its summary.
pub const STOP: Duration = Duration::from_secs(60);

/// Stops Sluice (SIGINT) and returns its output and JSON summary.
pub fn stop(sluice: Proc<'static>) -> (Output, serde_json::Value) {
    let out = sluice.stop(STOP).expect("sluice ends on SIGINT");
    assert!(out.success(), "{out}");
    let last = out.stdout.lines().last().unwrap_or("").to_owned();
    let v: serde_json::Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["type"], "summary", "{out}");
    (out, v)
}

/// Panics with `msg` and what Sluice printed so far.
pub fn fail(sluice: Proc<'static>, msg: &str) -> ! {
    match sluice.stop(STOP) {
        Ok(out) => panic!("{msg}\n{out}"),
        Err(e) => panic!("{msg}\n{e}"),
    }
}

/// Pings `dst` from `ns` until one reply comes (the forwarder starting,
/// ARP), bounded.
pub fn first_reply(ns: &Netns, dst: &str) -> bool {
    sluice_netns::wait_until(Duration::from_secs(90), || {
        ns.exec_timeout(
            &["ping", "-c", "1", "-W", "2", dst],
            Duration::from_secs(20),
        )
        .is_ok_and(|o| o.success())
    })
}

/// `count` pings from `ns` to `dst`, 0.2 s apart; the output, for its
/// "N received".
pub fn ping(ns: &Netns, dst: &str, count: u32) -> Output {
    let count = count.to_string();
    ns.exec_timeout(
        &["ping", "-c", &count, "-i", "0.2", "-W", "10", dst],
        Duration::from_secs(120),
    )
    .expect("ping runs")
}

/// Once the forwarder answers (else fails with Sluice's output): five
/// pings of five answered from `from` to `to_ip` in `to`, then the TCP
/// transfer that way.
pub fn ping_and_transfer(
    from: &Netns,
    to: &Netns,
    to_ip: &str,
    sluice: Proc<'static>,
) -> Proc<'static> {
    if !first_reply(from, to_ip) {
        fail(sluice, "no ping reply from B within 90 s");
    }
    let out = ping(from, to_ip, 5);
    assert!(out.success() && out.stdout.contains("5 received"), "{out}");
    tcp_transfer(from, to, to_ip);
    sluice
}

/// What the summary of a run that carried the transfer from port 0 to
/// port 1 says: every buffer home, and the transfer's segments (at most
/// 1448 bytes each) counted on both ports.
pub fn assert_transfer_counted(summary: &serde_json::Value, out: &Output) {
    assert_eq!(summary["pool_full"], true, "{out}");
    let ports = summary["ports"].as_array().unwrap();
    let min = (TRANSFER / 1448) as u64;
    assert!(ports[0]["rx_packets"].as_u64().unwrap() >= min, "{summary}");
    assert!(ports[1]["tx_packets"].as_u64().unwrap() >= min, "{summary}");
    assert!(ports[1]["rx_packets"].as_u64().unwrap() > 0, "{summary}");
}

/// The byte at offset `i` of the transfer: a period (251) prime to every
/// segment size, so a lost, repeated or misplaced segment shows.
pub fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// Sends [`TRANSFER`] bytes over TCP from `from` to `to_ip` in `to` and
/// checks every byte on arrival; returns the bytes received.
pub fn tcp_transfer(from: &Netns, to: &Netns, to_ip: &str) -> usize {
    let bind: SocketAddr = format!("{to_ip}:0").parse().unwrap();
    let listener = to
        .run_in(move || TcpListener::bind(bind))
        .unwrap()
        .expect("listen in the receiving namespace");
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || -> Result<usize, String> {
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let (mut s, _) = loop {
            match listener.accept() {
                Ok(c) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err("no connection within 120 s".into());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(format!("accept: {e}")),
            }
        };
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0usize;
        loop {
            let n = s
                .read(&mut buf)
                .map_err(|e| format!("read at {total}: {e}"))?;
            if n == 0 {
                return Ok(total);
            }
            for (k, b) in buf[..n].iter().enumerate() {
                if *b != pattern(total + k) {
                    return Err(format!(
                        "byte {} is {b}, not {}",
                        total + k,
                        pattern(total + k)
                    ));
                }
            }
            total += n;
        }
    });
    let mut c = from
        .run_in(move || TcpStream::connect_timeout(&addr, Duration::from_secs(60)))
        .unwrap()
        .expect("connect from the sending namespace");
    c.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    let chunk: Vec<u8> = (0..251 * 256).map(pattern).collect();
    let mut sent = 0;
    while sent < TRANSFER {
        let n = chunk.len().min(TRANSFER - sent);
        c.write_all(&chunk[..n]).expect("write");
        sent += n;
    }
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let got = server
        .join()
        .unwrap()
        .expect("the receiver checks every byte");
    assert_eq!(got, TRANSFER);
    got
}
