//! Unique names: process id + a process-wide counter, and the sweep of
//! names left by processes that are gone.

use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::proc::exec;

/// Longest interface name the kernel takes (IFNAMSIZ − 1).
pub(crate) const IFNAME_MAX: usize = 15;

/// The next number of this process (shared by namespaces and links).
fn next() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `sluice-PID-N-TAG`, TAG cut to 16 characters of `[A-Za-z0-9_]`.
pub(crate) fn netns_name(tag: &str) -> String {
    let tag: String = tag
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(16)
        .collect();
    format!("sluice-{}-{}-{tag}", std::process::id(), next())
}

/// The two ends of a new veth pair: `slPIDvNa`, `slPIDvNb` (hex). `None`
/// past what fits in IFNAMSIZ.
pub(crate) fn veth_names() -> Option<(String, String)> {
    let stem = format!("sl{:x}v{:x}", std::process::id(), next());
    (stem.len() < IFNAME_MAX).then(|| (format!("{stem}a"), format!("{stem}b")))
}

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The process id in one of our namespace names, if it is one.
fn netns_pid(name: &str) -> Option<u32> {
    name.strip_prefix("sluice-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// The process id in one of our link names, if it is one.
fn link_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("sl")?;
    let (pid, n) = rest.split_once('v')?;
    let n = n.strip_suffix('a').or_else(|| n.strip_suffix('b'))?;
    u32::from_str_radix(n, 16).ok()?;
    u32::from_str_radix(pid, 16).ok()
}

/// Once per process: deletes namespaces and root-namespace links named by
/// this harness for processes that no longer exist (a test that was
/// killed could not clean up). Names of live processes are left alone.
pub(crate) fn sweep_stale() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Ok(out) = exec(&["ip", "netns", "list"], crate::proc::IP_TIMEOUT) {
            for line in out.stdout.lines() {
                let name = line.split_whitespace().next().unwrap_or("");
                if netns_pid(name).is_some_and(|p| !alive(p)) {
                    let _ = exec(&["ip", "netns", "del", name], crate::proc::IP_TIMEOUT);
                }
            }
        }
        if let Ok(out) = exec(&["ip", "-o", "link", "show"], crate::proc::IP_TIMEOUT) {
            for name in crate::netns::link_names(&out.stdout) {
                if link_pid(&name).is_some_and(|p| !alive(p)) {
                    let _ = exec(&["ip", "link", "del", &name], crate::proc::IP_TIMEOUT);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_fit_ifnamsiz() {
        let (a, b) = veth_names().unwrap();
        let (c, _) = veth_names().unwrap();
        assert_ne!(a, c);
        assert!(a.len() <= IFNAME_MAX && b.len() <= IFNAME_MAX);
        assert_eq!(link_pid(&a), Some(std::process::id()));
        assert_eq!(link_pid(&b), Some(std::process::id()));
        // The largest pid Linux hands out, and counter 0xffff, still fit.
        let worst = format!("sl{:x}v{:x}a", 4_194_304u32, 0xffffu32);
        assert!(worst.len() <= IFNAME_MAX, "{worst}");
    }

    #[test]
    fn namespace_names_carry_the_pid_and_a_clean_tag() {
        let n = netns_name("a b/c");
        assert!(n.ends_with("-a_b_c"), "{n}");
        assert_eq!(netns_pid(&n), Some(std::process::id()));
        assert_eq!(netns_pid("other"), None);
        assert_eq!(link_pid("eth0"), None);
        assert_eq!(link_pid("slxv1a"), None);
    }
}
