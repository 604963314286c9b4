//! [`Veth`]: a veth pair with unique names, deleted on drop wherever its
//! ends are.

use crate::names::veth_names;
use crate::proc::IP_TIMEOUT;
use crate::{Error, Netns, Result};

/// A veth pair: what enters one end leaves the other. Made with both ends
/// in the root namespace, up, and IPv6 off on both (so neither sends
/// frames of its own); ends move into namespaces with
/// [`move_a`](Veth::move_a) / [`move_b`](Veth::move_b). Dropping it deletes
/// the pair (deleting a namespace deletes the ends inside it too).
#[derive(Debug)]
pub struct Veth {
    a: String,
    b: String,
    /// The namespace each end is in (`None`: root), for the delete.
    ns: [Option<String>; 2],
}

impl Veth {
    /// Makes a pair in the root namespace, both ends up.
    pub fn new() -> Result<Veth> {
        crate::names::sweep_stale();
        let (a, b) =
            veth_names().ok_or_else(|| Error::new("veth names no longer fit in IFNAMSIZ"))?;
        let root = Netns::root();
        root.ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
        // From here on, drop removes it.
        let veth = Veth {
            a,
            b,
            ns: [None, None],
        };
        for end in [&veth.a, &veth.b] {
            let key = format!("net.ipv6.conf.{end}.disable_ipv6");
            match root.sysctl(&key, "1") {
                Err(e) if e.message().contains("No such file") => {}
                r => r?,
            }
            root.link_up(end)?;
        }
        Ok(veth)
    }

    /// Makes a pair with end [`a`](Veth::a) in the root namespace and end
    /// [`b`](Veth::b) in `ns`, both up: the usual shape for a port in the
    /// root namespace and a host in `ns`.
    pub fn into_ns(ns: &Netns) -> Result<Veth> {
        let mut v = Veth::new()?;
        v.move_b(ns)?;
        Ok(v)
    }

    /// End a's name.
    pub fn a(&self) -> &str {
        &self.a
    }

    /// End b's name.
    pub fn b(&self) -> &str {
        &self.b
    }

    fn move_end(&mut self, end: usize, to: &Netns) -> Result<()> {
        let name = if end == 0 { &self.a } else { &self.b };
        // `ip link set netns` takes a namespace name, or a process id for
        // that process's namespace: ours is the root one.
        let target = if to.is_root() {
            std::process::id().to_string()
        } else {
            to.name().to_owned()
        };
        let mut argv = vec!["ip"];
        if let Some(from) = &self.ns[end] {
            argv.extend(["-n", from.as_str()]);
        }
        argv.extend(["link", "set", "dev", name, "netns", &target]);
        crate::exec(&argv, IP_TIMEOUT)?.check()?;
        to.link_up(name)?;
        self.ns[end] = (!to.is_root()).then(|| to.name().to_owned());
        Ok(())
    }

    /// Moves end a into `ns` and sets it up there.
    pub fn move_a(&mut self, ns: &Netns) -> Result<()> {
        self.move_end(0, ns)
    }

    /// Moves end b into `ns` and sets it up there.
    pub fn move_b(&mut self, ns: &Netns) -> Result<()> {
        self.move_end(1, ns)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting either end deletes both; an end whose namespace is gone
        // is gone already.
        for (end, name) in [(0, &self.a), (1, &self.b)] {
            let mut argv = vec!["ip"];
            if let Some(n) = &self.ns[end] {
                argv.extend(["-n", n]);
            }
            argv.extend(["link", "del", name]);
            if crate::exec(&argv, IP_TIMEOUT).is_ok_and(|o| o.success()) {
                return;
            }
        }
    }
}
