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

/// What a test lacks when it cannot run here; it decides whether CI lets
/// the test skip (see [`skip_is_failure`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Something root has in CI: network namespaces, veth pairs, TAP
    /// devices, AF_XDP sockets, loading BPF programs, `CAP_IPC_LOCK`, a
    /// locked-memory limit it may raise.
    Capability,
    /// A command-line tool (`ip`, `ping`, `ethtool`, `tshark`, …): CI
    /// installs every one the tests use.
    Tool,
    /// Reserved hugepages: CI asks for some, but a machine may refuse, and
    /// everything works without them (more slowly).
    Hugepages,
}

/// Whether a test that cannot run here, for lack of `need`, fails instead
/// of skipping. `ci` is the value of the `CI` environment variable
/// (`"true"` under CI) and `euid` the process's effective user id.
///
/// Under CI a missing tool always fails, and a missing capability fails
/// when the process is root: CI runs as root with every tool installed, so
/// there every kernel-port test must run, and a skip would let it pass
/// without having tested anything. Hugepages never make a test fail.
/// Outside CI the test skips, saying why.
pub fn skip_is_failure(need: Need, ci: Option<&str>, euid: u32) -> bool {
    if ci != Some("true") {
        return false;
    }
    match need {
        Need::Capability => euid == 0,
        Need::Tool => true,
        Need::Hugepages => false,
    }
}

/// Reports that (part of) the calling test cannot run here for lack of
/// `need`, `why` saying what is missing: panics with `why` where
/// [`skip_is_failure`] says so for this process (`CI`, effective uid),
/// else prints "skipped TEST: WHY" to the real standard error (past the
/// test harness's capture, so it shows in `cargo test` output). The test
/// then returns early (or leaves out the part that cannot run).
#[track_caller]
pub fn skip_or_fail(need: Need, why: &str) {
    let ci = std::env::var("CI").ok();
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    skip_or_fail_as(need, why, ci.as_deref(), euid);
}

/// [`skip_or_fail`] for a given `CI` value and effective uid.
#[track_caller]
fn skip_or_fail_as(need: Need, why: &str, ci: Option<&str>, euid: u32) {
    if skip_is_failure(need, ci, euid) {
        panic!("under CI (CI=true) this test must run, but cannot: {why}");
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    let _ = writeln!(std::io::stderr(), "skipped {test}: {why}");
}

/// `true` (after printing why) when this machine cannot make network
/// namespaces; the test then returns early. Under CI as root it panics
/// instead (see [`skip_is_failure`]):
///
/// ```no_run
/// if sluice_netns::skip_unless_root() {
///     return;
/// }
/// ```
#[track_caller]
pub fn skip_unless_root() -> bool {
    skip_unless_root_with(&[])
}

/// As [`skip_unless_root`], and also `true` when one of `tools` (`ping`,
/// `ethtool`, …) is not on `PATH`. Under CI a missing tool panics instead:
/// CI installs every tool the tests use.
#[track_caller]
pub fn skip_unless_root_with(tools: &[&str]) -> bool {
    if let Some(why) = unavailable() {
        skip_or_fail(Need::Capability, &why);
        return true;
    }
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    if missing.is_empty() {
        return false;
    }
    let why = format!(
        "not on PATH: {} (Debian: iputils-ping, ethtool, iproute2)",
        missing.join(", ")
    );
    skip_or_fail(Need::Tool, &why);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_ci_as_root_nothing_but_hugepages_may_skip() {
        for need in [Need::Capability, Need::Tool] {
            assert!(skip_is_failure(need, Some("true"), 0), "{need:?}");
        }
        assert!(!skip_is_failure(Need::Hugepages, Some("true"), 0));
    }

    #[test]
    fn under_ci_not_as_root_only_a_missing_tool_fails() {
        assert!(!skip_is_failure(Need::Capability, Some("true"), 1000));
        assert!(skip_is_failure(Need::Tool, Some("true"), 1000));
        assert!(!skip_is_failure(Need::Hugepages, Some("true"), 1000));
    }

    #[test]
    fn outside_ci_everything_may_skip() {
        for ci in [None, Some(""), Some("false"), Some("1"), Some("TRUE")] {
            for euid in [0, 1000] {
                for need in [Need::Capability, Need::Tool, Need::Hugepages] {
                    assert!(!skip_is_failure(need, ci, euid), "{ci:?} {euid} {need:?}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "under CI (CI=true) this test must run, but cannot: no veth here")]
    fn a_skip_under_ci_as_root_panics_with_the_reason() {
        skip_or_fail_as(Need::Capability, "no veth here", Some("true"), 0);
    }

    #[test]
    fn a_skip_elsewhere_returns() {
        skip_or_fail_as(Need::Capability, "no veth here", Some("true"), 1000);
        skip_or_fail_as(Need::Tool, "no ping here", None, 0);
        skip_or_fail_as(Need::Hugepages, "no hugepages here", Some("true"), 0);
    }
}
