//! Whether this machine can run kernel-port tests, and the early return
//! that says why not.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::OnceLock;

use crate::proc::IP_TIMEOUT;

/// Why namespaces cannot be used here (`None`: they can): not root, no
/// `ip`, or `ip netns add` fails (no namespace support, no `/run`).
/// Probed once per process, by making and deleting a namespace.
pub fn unavailable() -> Option<String> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    WHY.get_or_init(probe).clone()
}

fn probe() -> Option<String> {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)".into());
    }
    if !std::path::Path::new("/proc/self/ns/net").exists() {
        return Some("the kernel has no network namespaces (/proc/self/ns/net)".into());
    }
    match crate::exec(&["ip", "-V"], IP_TIMEOUT) {
        Ok(o) if o.success() => {}
        Ok(o) => return Some(format!("`ip -V` failed: {o}")),
        Err(e) => return Some(format!("no `ip` command (install iproute2): {e}")),
    }
    let name = format!("sluice-{}-probe", std::process::id());
    match crate::exec(&["ip", "netns", "add", &name], IP_TIMEOUT) {
        Ok(o) if o.success() => {
            let _ = crate::exec(&["ip", "netns", "del", &name], IP_TIMEOUT);
            None
        }
        Ok(o) => Some(format!("cannot make a network namespace: {o}")),
        Err(e) => Some(format!("cannot make a network namespace: {e}")),
    }
}

/// Whether `tool` is an executable file in a `PATH` directory.
fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| {
        std::fs::metadata(d.join(tool))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Prints "skipped TEST: REASON" to the real standard error (past the test
/// harness's capture, so it shows in `cargo test` output).
fn say_skipped(reason: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    let _ = writeln!(std::io::stderr(), "skipped {test}: {reason}");
}

/// `true` (after printing why) when this machine cannot make network
/// namespaces; the test then returns early:
///
/// ```no_run
/// if sluice_netns::skip_unless_root() {
///     return;
/// }
/// ```
pub fn skip_unless_root() -> bool {
    skip_unless_root_with(&[])
}

/// As [`skip_unless_root`], and also `true` when one of `tools` (`ping`,
/// `iperf3`, …) is not on `PATH`. Under CI (`CI=true`) a missing tool
/// panics instead: CI installs every tool the tests use.
pub fn skip_unless_root_with(tools: &[&str]) -> bool {
    if let Some(why) = unavailable() {
        say_skipped(&why);
        return true;
    }
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    if missing.is_empty() {
        return false;
    }
    let why = format!(
        "not on PATH: {} (Debian: iputils-ping, iperf3, ethtool)",
        missing.join(", ")
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("under CI every tool must be installed: {why}");
    }
    say_skipped(&why);
    true
}
