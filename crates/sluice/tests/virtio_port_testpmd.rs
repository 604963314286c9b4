//! The `virtio:` port against DPDK's `dpdk-testpmd` with a `net_vhost`
//! port forwarding in `io` mode (every frame it receives goes back out
//! unchanged): testpmd is the vhost-user backend, listening or connecting,
//! and maps the port's shared mbuf pool. The library tester generates the
//! frames and checks every one that comes back: none lost, none out of
//! order, none changed, and every buffer back in the pool.
//!
//! Needs `dpdk-testpmd` (Debian: dpdk) with its vhost driver; without them
//! the test says it is skipped, except under CI (`CI=true`), where a
//! missing tool fails it.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};

// Each test file is its own crate and uses only part of the support.
#[allow(dead_code)]
mod testpmd_support;

use testpmd_support::{IO_LOOP_ARGS, TempDir, Testpmd, echo, open_port, skip, wait_link};

/// How long testpmd may take to come up, and the link after it.
const TIMEOUT: Duration = Duration::from_secs(60);

const FRAMES: u64 = 5_000;

/// Fewer frames in flight than either ring holds, so testpmd never finds
/// its way back full and drops.
const WINDOW: u64 = 128;

/// The DPDK driver testpmd's port needs.
const DRIVER: &str = "librte_net_vhost.so";

/// Starts testpmd with a vhost port at `socket` (`client`: connecting to
/// it, otherwise listening) and waits until its port is started.
fn start_testpmd(socket: &Path, client: bool) -> Testpmd {
    let prefix = format!("sluice-virtio-port-{client}-{}", std::process::id());
    let vdev = format!(
        "net_vhost0,iface={},queues=1,client={}",
        socket.display(),
        u8::from(client)
    );
    let mut command = Command::new("timeout");
    command
        .args(["120", "dpdk-testpmd", "--no-pci", "--no-huge", "-m", "512"])
        .args(["-l", "0-1", "--no-telemetry", "--file-prefix", &prefix])
        .args(["--vdev", &vdev, "--"])
        .args(IO_LOOP_ARGS);
    let testpmd = Testpmd::spawn(command, &prefix, TIMEOUT);
    // Printed once the port is started.
    testpmd.wait_for("Checking link statuses");
    testpmd
}

/// The port's pool, in memory testpmd maps.
fn pool() -> MbufPool {
    MbufPool::new_shared(MbufPoolConfig {
        size: 2047,
        cache_size: 0,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn the_port_echoes_through_a_listening_testpmd_and_survives_its_end() {
    if skip(DRIVER) {
        return;
    }
    let dir = TempDir::new("virtio-connect");
    let socket = dir.0.join("vhost.sock");
    let pool = pool();
    {
        let testpmd = start_testpmd(&socket, false);
        let mut port = open_port(&format!("virtio:path={}", socket.display()), &pool);
        wait_link(&port, &testpmd);
        echo(&mut port, &pool, &testpmd, FRAMES, WINDOW, None);
        // testpmd goes while the port runs: the rings' buffers come home,
        // and the port sends nothing until a backend is back.
        drop(testpmd);
        let deadline = Instant::now() + TIMEOUT;
        while port.counters().xstats.get("link_downs").unwrap_or(0) == 0 {
            assert!(Instant::now() < deadline, "the link did not go down");
            thread::sleep(Duration::from_millis(5));
        }
        assert!(pool.is_full(), "{} of 2047 mbufs home", pool.available());
        let mut back: Burst = Burst::new();
        assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut back), 0);
        let mut out: Burst = Burst::new();
        out.push(pool.alloc_from_slice(&[0u8; 60]).unwrap())
            .unwrap();
        assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut out), 1);
        assert!(
            out.is_empty(),
            "dropped by the port, not left to the caller"
        );
        assert_eq!(port.counters().xstats.get("tx_not_ready_errors"), Some(1));
        drop(out);
        port.stop();
    }
    assert!(pool.is_full(), "{} of 2047 mbufs home", pool.available());
}

/// testpmd offers `VIRTIO_F_IN_ORDER`: the listening port refuses it, so
/// both ways of using the rings meet testpmd (the other test accepts it).
#[test]
fn the_listening_port_echoes_through_a_connecting_testpmd() {
    if skip(DRIVER) {
        return;
    }
    let dir = TempDir::new("virtio-listen");
    let socket = dir.0.join("vhost.sock");
    let pool = pool();
    {
        let mut port = open_port(
            &format!("virtio:path={},server=1,in_order=0", socket.display()),
            &pool,
        );
        let testpmd = start_testpmd(&socket, true);
        wait_link(&port, &testpmd);
        echo(&mut port, &pool, &testpmd, FRAMES, WINDOW, None);
        port.stop();
        drop(testpmd);
    }
    assert!(
        !socket.exists(),
        "the listening port removes its socket file"
    );
    assert!(pool.is_full(), "{} of 2047 mbufs home", pool.available());
}
