//! [`Netns`]: a network namespace made by `ip netns add` (or the test's own
//! root namespace), the commands that configure it, and its removal on
//! drop.

use std::fmt;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::names::{netns_name, sweep_stale};
use crate::proc::{IP_TIMEOUT, Output, Proc};
use crate::{DEFAULT_TIMEOUT, Error, Result};

/// A MAC address, shown as `02:00:00:00:00:01`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mac(pub [u8; 6]);

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Mac {
    type Err = Error;

    fn from_str(s: &str) -> Result<Mac> {
        let bad = || Error::new(format!("'{s}' is not a MAC address"));
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for byte in &mut out {
            let hex = parts.next().ok_or_else(bad)?;
            *byte = u8::from_str_radix(hex, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Mac(out))
    }
}

/// A network namespace: one made by [`Netns::new`] and deleted on drop
/// (with every link in it), or the test's own namespace
/// ([`Netns::root`]), which drop leaves alone.
///
/// IPv6 is off in a new namespace (no router solicitations, duplicate
/// address detection or MLD reports to disturb frame counts); turn it on
/// with `sysctl("net.ipv6.conf.all.disable_ipv6", "0")` if a test needs it.
pub struct Netns {
    /// `None` for the root namespace.
    name: Option<String>,
}

impl fmt::Debug for Netns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Netns({})", self.name())
    }
}

/// The names in `ip -o link show` output (`N: NAME@PEER: <...` per line).
pub(crate) fn link_names(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| {
            let name = l.split(": ").nth(1)?;
            Some(name.split('@').next()?.trim().to_owned())
        })
        .collect()
}

impl Netns {
    /// Makes a namespace named `sluice-PID-N-TAG`, with `lo` up and IPv6
    /// off.
    pub fn new(tag: &str) -> Result<Netns> {
        sweep_stale();
        let name = netns_name(tag);
        crate::exec(&["ip", "netns", "add", &name], IP_TIMEOUT)?.check()?;
        // From here on, drop removes it.
        let ns = Netns { name: Some(name) };
        ns.link_up("lo")?;
        for key in [
            "net.ipv6.conf.all.disable_ipv6",
            "net.ipv6.conf.default.disable_ipv6",
        ] {
            // A kernel without IPv6 has no such key: nothing to turn off.
            match ns.sysctl(key, "1") {
                Err(e) if e.message().contains("No such file") => {}
                r => r?,
            }
        }
        Ok(ns)
    }

    /// The test's own namespace. Dropping it does nothing.
    pub fn root() -> Netns {
        Netns { name: None }
    }

    /// The namespace's name; `root` for [`Netns::root`].
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("root")
    }

    /// Whether this is the root namespace.
    pub fn is_root(&self) -> bool {
        self.name.is_none()
    }

    /// The prefix that runs a command inside.
    fn prefix(&self) -> Vec<&str> {
        match &self.name {
            Some(n) => vec!["ip", "netns", "exec", n],
            None => vec![],
        }
    }

    /// Runs `ip ARGS` for this namespace (`ip -n NAME ARGS`) and returns its
    /// standard output; a non-zero exit is an error with the output.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut argv = vec!["ip"];
        if let Some(n) = &self.name {
            argv.extend(["-n", n]);
        }
        argv.extend(args);
        Ok(crate::exec(&argv, IP_TIMEOUT)?.check()?.stdout)
    }

    /// Sets link `ifname` up.
    pub fn link_up(&self, ifname: &str) -> Result<()> {
        self.ip(&["link", "set", "dev", ifname, "up"]).map(drop)
    }

    /// Adds address `cidr` (`10.0.0.1/24`) to link `ifname`.
    pub fn add_addr(&self, ifname: &str, cidr: &str) -> Result<()> {
        self.ip(&["addr", "add", cidr, "dev", ifname]).map(drop)
    }

    /// Adds a route given as `ip route add` takes it:
    /// `"10.0.2.0/24 via 10.0.1.1"`, `"default dev veth0"`.
    pub fn add_route(&self, route: &str) -> Result<()> {
        let mut args = vec!["route", "add"];
        args.extend(route.split_whitespace());
        self.ip(&args).map(drop)
    }

    /// Sets the MTU of link `ifname`.
    pub fn set_mtu(&self, ifname: &str, mtu: u32) -> Result<()> {
        self.ip(&["link", "set", "dev", ifname, "mtu", &mtu.to_string()])
            .map(drop)
    }

    /// The MAC address of link `ifname`.
    pub fn mac(&self, ifname: &str) -> Result<Mac> {
        let out = self.ip(&["-o", "link", "show", "dev", ifname])?;
        let mac = out
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .ok_or_else(|| Error::new(format!("{ifname}: no link/ether in `{out}`")))?;
        mac.parse()
    }

    /// The names of the links in the namespace (`lo` included).
    pub fn links(&self) -> Result<Vec<String>> {
        Ok(link_names(&self.ip(&["-o", "link", "show"])?))
    }

    /// Moves link `ifname` from this namespace into `to`, and sets it up
    /// there (a move sets it down).
    pub fn move_link(&self, ifname: &str, to: &Netns) -> Result<()> {
        let target = match &to.name {
            Some(n) => n.clone(),
            // Our own process id names the root namespace.
            None => std::process::id().to_string(),
        };
        self.ip(&["link", "set", "dev", ifname, "netns", &target])?;
        to.link_up(ifname)
    }

    /// Turns off the offloads that hand a packet socket frames a wire would
    /// never carry — TCP segmentation (64 KiB frames), generic segmentation
    /// and receive offload, and checksum offload (checksums left for
    /// hardware to fill in) — on link `ifname`, with `ethtool -K`.
    pub fn offloads_off(&self, ifname: &str) -> Result<()> {
        self.exec(&[
            "ethtool", "-K", ifname, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro",
            "off",
        ])?
        .check()
        .map(drop)
    }

    /// Writes `value` to sysctl `key` (`net.ipv4.ip_forward`) of this
    /// namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        self.run_in(|| std::fs::write(&path, value))?
            .map_err(|e| Error::new(format!("{} sysctl {path}: {e}", self.name())))
    }

    /// Runs `argv` inside the namespace to its end, or kills it after
    /// [`DEFAULT_TIMEOUT`]. The exit status is in the [`Output`]: see
    /// [`Output::check`].
    pub fn exec(&self, argv: &[&str]) -> Result<Output> {
        self.exec_timeout(argv, DEFAULT_TIMEOUT)
    }

    /// Runs `argv` inside the namespace to its end, or kills it after
    /// `timeout`.
    pub fn exec_timeout(&self, argv: &[&str], timeout: Duration) -> Result<Output> {
        self.spawn(argv)?.wait(timeout)
    }

    /// Starts `argv` inside the namespace; the [`Proc`] kills and reaps it
    /// when dropped, before the namespace goes.
    pub fn spawn(&self, argv: &[&str]) -> Result<Proc<'_>> {
        Proc::start(argv, &self.prefix())
    }

    /// Runs `f` on a thread that has entered the namespace (`setns`), and
    /// returns its result; a panic in `f` is resumed here. Sockets `f`
    /// creates belong to the namespace and stay usable from any thread.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        let Some(name) = &self.name else {
            return Ok(f());
        };
        let path = format!("/run/netns/{name}");
        let file = File::open(&path).map_err(|e| Error::new(format!("open {path}: {e}")))?;
        let fd = file.as_raw_fd();
        let joined = std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: setns(2) with an open namespace fd (`file` lives
                // past the scope) changes only this thread's network
                // namespace; the thread ends when `f` returns.
                let r = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
                if r != 0 {
                    let e = std::io::Error::last_os_error();
                    return Err(Error::new(format!("setns into {path}: {e}")));
                }
                Ok(f())
            })
            .join()
        });
        match joined {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let Some(name) = &self.name else { return };
        // Links first: a socket still open in the namespace would keep it,
        // and with it its links, alive after the unmount.
        if let Ok(links) = self.links() {
            for l in links.iter().filter(|l| *l != "lo") {
                let _ = crate::exec(&["ip", "-n", name, "link", "del", l], IP_TIMEOUT);
            }
        }
        let _ = crate::exec(&["ip", "netns", "del", name], IP_TIMEOUT);
    }
}
