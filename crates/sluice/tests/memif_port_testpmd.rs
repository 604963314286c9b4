//! The `memif:` port against DPDK's `dpdk-testpmd` with a `net_memif` port
//! forwarding in `io` mode (every frame it receives goes back out
//! unchanged), in both roles. The library tester generates the frames and
//! checks every one that comes back: none lost, none out of order, none
//! changed, and every buffer back in the pool.
//!
//! Needs `dpdk-testpmd` (Debian: dpdk) and DPDK's memif driver; without
//! them the test says it is skipped, except under CI (`CI=true`), where a
//! missing tool fails it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sluice::mbuf::{MbufPool, MbufPoolConfig};

// Each test file is its own crate and uses only part of the support.
#[allow(dead_code)]
mod testpmd_support;

use testpmd_support::{IO_LOOP_ARGS, TempDir, Testpmd, echo, open_port, skip, wait_link};

/// How long testpmd may take to come up, and the link after it.
const TIMEOUT: Duration = Duration::from_secs(60);

const FRAMES: u64 = 5_000;

/// Fewer frames in flight than either ring holds, so testpmd never finds
/// its way back full and drops.
const WINDOW: u64 = 256;

/// The DPDK driver testpmd's port needs.
const DRIVER: &str = "librte_net_memif.so";

/// Starts testpmd with a memif port of `role` at `socket` and waits until
/// its port is started.
fn start_testpmd(socket: &Path, role: &str) -> Testpmd {
    let prefix = format!("sluice-memif-port-{role}-{}", std::process::id());
    let vdev = format!(
        "net_memif0,role={role},id=0,socket={},socket-abstract=no",
        socket.display()
    );
    let mut command = Command::new("timeout");
    command
        .args(["120", "dpdk-testpmd", "--no-pci", "--no-huge", "-m", "256"])
        .args(["-l", "0-1", "--file-prefix", &prefix, "--vdev", &vdev, "--"])
        .args(IO_LOOP_ARGS);
    let testpmd = Testpmd::spawn(command, &prefix, TIMEOUT);
    // Printed once the port is started.
    testpmd.wait_for("Checking link statuses");
    testpmd
}

fn pool() -> MbufPool {
    MbufPool::new(MbufPoolConfig {
        size: 2047,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn the_server_port_echoes_through_a_testpmd_client() {
    if skip(DRIVER) {
        return;
    }
    let dir = TempDir::new("memif-port-server");
    let socket = dir.0.join("memif.sock");
    let pool = pool();
    {
        let mut port = open_port(
            &format!("memif:socket={},role=server", socket.display()),
            &pool,
        );
        let testpmd = start_testpmd(&socket, "client");
        wait_link(&port, &testpmd);
        echo(&mut port, &pool, &testpmd, FRAMES, WINDOW, None);
        port.stop();
        drop(testpmd);
    }
    assert!(!socket.exists(), "the server removes its socket file");
    assert!(pool.is_full());
}

#[test]
fn the_client_port_echoes_through_a_testpmd_server() {
    if skip(DRIVER) {
        return;
    }
    let dir = TempDir::new("memif-port-client");
    let socket = dir.0.join("memif.sock");
    let pool = pool();
    {
        let testpmd = start_testpmd(&socket, "server");
        let mut port = open_port(
            &format!("memif:socket={},role=client", socket.display()),
            &pool,
        );
        wait_link(&port, &testpmd);
        echo(&mut port, &pool, &testpmd, FRAMES, WINDOW, None);
        port.stop();
        drop(testpmd);
    }
    assert!(pool.is_full());
}
