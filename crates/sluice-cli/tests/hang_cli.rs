//! The `sluice` binary never hangs: a bad spec value is an error, a panic on
//! an lcore or in the device model ends the run with a non-zero exit naming
//! it, and a second SIGINT ends a run whose clean stop cannot finish.
//!
//! Each run is bounded: a process still alive at its deadline is killed and
//! the test fails.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::sluice;

/// Longest a run that should end by itself may take (debug build, shared
/// machine).
const RUN_MAX: Duration = Duration::from_secs(120);

/// What a bounded run left.
struct Ended {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Waits until `child` exits or `deadline`; kills it at the deadline.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn reader<R: Read + Send + 'static>(r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(r).read_to_string(&mut s);
        s
    })
}

/// Runs `sluice args`; `None` when it had to be killed at [`RUN_MAX`].
fn run_bounded(args: &[&str]) -> Option<Ended> {
    let mut child = sluice()
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sluice binary runs");
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    let status = wait_until(&mut child, Instant::now() + RUN_MAX);
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    status.map(|status| Ended {
        status,
        stdout,
        stderr,
    })
}

#[test]
fn a_huge_tester_rate_is_an_error_not_a_hang() {
    for spec in [
        "soft:rate=1e300",
        "soft:rate=18446744073709551615",
        "soft:rate=0.0001",
    ] {
        let Some(e) = run_bounded(&["fwd", "-p", spec, "-p", "soft", "--duration", "0.5"]) else {
            panic!("`sluice fwd -p {spec}` did not end within {RUN_MAX:?}");
        };
        assert_eq!(e.status.code(), Some(1), "{spec}: {}", e.stderr);
        assert!(
            e.stderr.contains("key 'rate'") && e.stderr.contains("1e-3..=1e10"),
            "{spec}: {}",
            e.stderr
        );
        assert!(e.stdout.is_empty(), "{}", e.stdout);
    }
}

/// Sends `sig` to `child`.
fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: `kill` has no memory preconditions; the pid is our child's,
    // not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// Forwards the lines of `r` to a channel.
fn lines<R: Read + Send + 'static>(r: R) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits until a line of `rx` contains `what`, at most until `deadline`.
fn wait_line(rx: &mpsc::Receiver<String>, what: &str, deadline: Instant) -> bool {
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(what) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn a_second_sigint_ends_a_run_whose_stop_cannot_finish() {
    // txonly over a pair: nothing receives, so the links fill and every Tx
    // call is refused; with (nearly) endless Tx retries the lcore does not
    // get back to its stop flag, and the clean stop cannot finish.
    let mut child = sluice()
        .args([
            "fwd",
            "-p",
            "pair:name=stuck",
            "-p",
            "pair:name=stuck",
            "--engine",
            "txonly",
            "--tx-retry",
            "4294967295",
            "--rxd",
            "64",
            "--duration",
            "1000",
            "--stats-period",
            "0.1",
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sluice binary runs");
    let out = lines(child.stdout.take().unwrap());
    let err = lines(child.stderr.take().unwrap());
    let deadline = Instant::now() + RUN_MAX;
    let started = wait_line(&out, "\"stats\"", deadline);
    if !started {
        let _ = child.kill();
        let _ = child.wait();
        panic!("no stats line within {RUN_MAX:?}");
    }
    signal(&child, libc::SIGINT);
    // The first asks for a clean stop: said on stderr.
    let stopping = wait_line(&err, "stopping", deadline);
    let still_running = child.try_wait().unwrap().is_none();
    signal(&child, libc::SIGINT);
    let status = wait_until(&mut child, Instant::now() + Duration::from_secs(10));
    assert!(stopping, "no word of the clean stop on stderr");
    assert!(
        still_running,
        "the clean stop finished: the setup is not stuck"
    );
    let status = status.expect("the second SIGINT did not end the run");
    assert_eq!(status.code(), Some(130), "{status:?}");
}

/// The message of the injected device panic (`panic_at`).
const INJECTED: &str = "soft: panic injected in Rx queue 0's step (panic_at)";

/// Runs `sluice args` (bounded): it must end by itself, with exit code 1
/// and `message` in its standard error.
fn assert_ends_with_error(args: &[&str], message: &str) {
    let Some(e) = run_bounded(args) else {
        panic!("{args:?}: the run did not end within {RUN_MAX:?}");
    };
    assert_eq!(e.status.code(), Some(1), "{args:?}: {}", e.stderr);
    assert!(e.stderr.contains(message), "{args:?}: {}", e.stderr);
}

#[test]
fn a_panic_on_a_forwarding_lcore_ends_the_run_naming_it() {
    // An inline device steps inside the lcore's queue calls: its panic is
    // the lcore's. The run would go on for 1000 s.
    for app in ["fwd", "l2fwd"] {
        assert_ends_with_error(
            &[
                app,
                "-p",
                "soft:tester=lcore_panic,panic_at=20",
                "-p",
                "soft:tester=lcore_panic",
                "--duration",
                "1000",
            ],
            &format!("sluice: error: forwarding lcore panicked: {INJECTED}"),
        );
    }
}

#[test]
fn a_panic_on_the_distributor_lcore_ends_the_run_naming_it() {
    assert_ends_with_error(
        &[
            "dist",
            "-p",
            "soft:tester=dist_panic,panic_at=20",
            "-p",
            "soft:tester=dist_panic",
            "--duration",
            "1000",
        ],
        &format!("sluice: error: distributor lcore panicked: {INJECTED}"),
    );
}

#[test]
fn a_panic_on_the_device_thread_ends_the_run_naming_it() {
    let spec = "soft:tester=thread_panic,device=threaded";
    let faulty = format!("{spec},panic_at=20");
    for app in ["fwd", "dist"] {
        assert_ends_with_error(
            &[app, "-p", &faulty, "-p", spec, "--duration", "1000"],
            &format!("sluice: error: port 0: soft: the device model panicked: {INJECTED}"),
        );
    }
    assert_ends_with_error(
        &["gen", "-p", &faulty, "--duration", "1000"],
        &format!("sluice: error: port {faulty}: soft: the device model panicked: {INJECTED}"),
    );
}

#[test]
fn numeric_options_out_of_range_are_errors_naming_the_option_and_range() {
    let table: &[(&[&str], &str, &str)] = &[
        (&["fwd", "-p", "null", "--burst"], "65", "1..=64"),
        (&["fwd", "-p", "null", "--rxd"], "0", "1..=65535"),
        (&["fwd", "-p", "null", "--txd"], "65536", "1..=65535"),
        (&["fwd", "-p", "null", "--cache"], "513", "0..=512"),
        (&["fwd", "-p", "null", "--pool-size"], "0", "1..=4294967295"),
        (&["fwd", "-p", "null", "--cores"], "65", "1..=64"),
        (&["fwd", "-p", "null", "--duration"], "1e7", "(0, 1e6]"),
        (&["fwd", "-p", "null", "--stats-period"], "0", "(0, 1e6]"),
        (&["fwd", "-p", "null", "--txpkts"], "41", "42..=9000"),
        (
            &["fwd", "-p", "null", "--tx-retry"],
            "4294967296",
            "4294967296",
        ),
        (&["l2fwd", "-p", "null", "--duration"], "inf", "(0, 1e6]"),
        (&["l3fwd", "--routes", "x", "--burst"], "0", "1..=64"),
        (&["dist", "--workers"], "65", "1..=64"),
        (&["dist", "--packets"], "0", "1.."),
        (&["gen", "-p", "soft", "--duration"], "1e300", "(0, 1e6]"),
        (&["gen", "-p", "soft", "--burst"], "65", "1..=64"),
        (&["tune", "--passes"], "101", "1..=100"),
        (&["tune", "--budget"], "0", "(0, 1e6]"),
    ];
    for (head, bad, range) in table {
        let opt = head.last().unwrap();
        let mut args = head.to_vec();
        args.push(bad);
        let Some(e) = run_bounded(&args) else {
            panic!("{args:?} did not end");
        };
        assert_eq!(e.status.code(), Some(2), "{args:?}: {}", e.stderr);
        assert!(
            e.stderr.contains(opt) && e.stderr.contains(range),
            "{args:?}: {}",
            e.stderr
        );
    }
}

#[test]
fn a_panic_on_an_l3fwd_lcore_ends_the_run_naming_it() {
    let routes = std::env::temp_dir().join(format!("hang-cli-routes-{}", std::process::id()));
    std::fs::write(&routes, "198.18.0.0/15 1\n").unwrap();
    let ended = std::panic::catch_unwind(|| {
        assert_ends_with_error(
            &[
                "l3fwd",
                "--routes",
                routes.to_str().unwrap(),
                "-p",
                "soft:tester=l3fwd_panic,panic_at=20",
                "-p",
                "soft:tester=l3fwd_panic",
                "--duration",
                "1000",
            ],
            &format!("sluice: error: forwarding lcore panicked: {INJECTED}"),
        )
    });
    std::fs::remove_file(&routes).unwrap();
    if let Err(failure) = ended {
        std::panic::resume_unwind(failure);
    }
}
