//! Test support for kernel ports: network namespaces, veth pairs, and
//! commands run inside namespaces — all removed again on drop, also when a
//! test panics.
//!
//! Everything here shells out to iproute2's `ip` (and, for
//! [`Netns::offloads_off`], `ethtool`), with a timeout on every command, so
//! a test can never hang on the harness. Names are unique per process and
//! call (process id + counter), so tests may run in parallel, in several
//! processes at once:
//!
//! - namespaces: `sluice-PID-N-TAG` (bind-mounted under `/run/netns` by
//!   `ip netns add`);
//! - links: `slPIDvNa` / `slPIDvNb` with PID and N in hex — at most 15
//!   bytes (IFNAMSIZ − 1) for any process id and the first 65536 pairs.
//!
//! Names whose process is gone (a test killed mid-run) are swept away the
//! first time a process makes a namespace.
//!
//! # Where the process under test runs
//! The test process, and the Sluice process it starts, stay in the root
//! namespace (the one the test started in): a Sluice port attaches to the
//! root-side end of a veth pair whose other end was moved into a namespace.
//! Commands that must run inside a namespace go through `ip netns exec`
//! ([`Netns::exec`], [`Netns::spawn`]); code of the test itself that must
//! (a raw socket in a peer namespace, say) runs on a short-lived thread
//! that has entered the namespace with `setns` ([`Netns::run_in`]). A
//! socket keeps the namespace it was created in after that thread ends.
//! [`RawSocket`] is such a socket: whole Ethernet frames in and out of one
//! interface of a namespace.
//!
//! # Skipping
//! Kernel-port tests need root, `ip`, and namespace support. Start them
//! with [`skip_unless_root`] (or [`skip_unless_root_with`], which also
//! needs the named tools): it prints why and returns `true` when the
//! machine cannot run the test, and the test returns early. A test that
//! finds something else missing (a tool, a permission) says so with
//! [`skip_or_fail`]. Under CI (`CI=true`) as root a skip is a failure
//! instead, and under CI a missing tool always is ([`skip_is_failure`]):
//! there every kernel-port test must run.
//!
//! # Example
//! Two namespaces joined by a veth pair, a ping across, and nothing left
//! behind:
//!
//! ```no_run
//! use sluice_netns::{Netns, Veth};
//!
//! if sluice_netns::skip_unless_root_with(&["ping"]) {
//!     return;
//! }
//! let a = Netns::new("a").unwrap();
//! let b = Netns::new("b").unwrap();
//! let mut veth = Veth::new().unwrap();
//! veth.move_a(&a).unwrap();
//! veth.move_b(&b).unwrap();
//! a.add_addr(veth.a(), "10.9.0.1/24").unwrap();
//! b.add_addr(veth.b(), "10.9.0.2/24").unwrap();
//! let out = a.exec(&["ping", "-c", "1", "-W", "5", "10.9.0.2"]).unwrap();
//! assert!(out.success(), "{out}");
//! // Dropping `veth`, `b` and `a` deletes the links and the namespaces.
//! ```
//!
//! With a Sluice port in the middle, the usual shape is one pair per
//! namespace, the root-side ends given to Sluice:
//!
//! ```no_run
//! use sluice_netns::{Netns, Veth};
//!
//! let a = Netns::new("a").unwrap();
//! let va = Veth::into_ns(&a).unwrap(); // va.a() in the root namespace, va.b() in `a`
//! a.add_addr(va.b(), "10.9.0.1/24").unwrap();
//! let mac = a.mac(va.b()).unwrap(); // for `--eth-peer 0,{mac}`
//! let sluice = sluice_netns::spawn(&["sluice", "fwd", "--port", &format!("afpacket:iface={}", va.a())])
//!     .unwrap();
//! // ... traffic ...
//! let out = sluice.stop(std::time::Duration::from_secs(30)).unwrap(); // SIGINT, wait, output
//! # let _ = (mac, out);
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod error;
mod names;
mod netns;
mod proc;
mod raw;
mod skip;
mod veth;

pub use error::{Error, Result};
pub use netns::{Mac, Netns};
pub use proc::{DEFAULT_TIMEOUT, Output, Proc, exec, spawn};
pub use raw::RawSocket;
pub use skip::{
    Need, skip_is_failure, skip_or_fail, skip_unless_root, skip_unless_root_with, unavailable,
};
pub use veth::Veth;

use std::time::{Duration, Instant};

/// Polls `cond` every 20 ms until it holds (`true`) or `timeout` has passed
/// (`false`). For waiting on the kernel (a link coming up, a port
/// attaching), never for measuring.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
