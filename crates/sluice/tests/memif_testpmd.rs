//! memif against a foreign peer: DPDK's `dpdk-testpmd` with a `net_memif`
//! port, forwarding in `io` mode (every packet it receives on the port goes
//! back out of it unchanged). Once as server with our client, once as
//! client with our server: after the handshake, packets go out on one ring
//! and each comes back on the other, bytes and order checked.
//!
//! Needs `dpdk-testpmd` (Debian: dpdk-dev) and DPDK's memif driver
//! (librte-net-memif23); without them the test says it is skipped, except
//! under CI (`CI=true`), where a missing tool fails it.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use sluice::memif::handshake::{self, ClientConfig, Connected, ServerConfig};
use sluice::memif::ring::{Consumer, Producer};
use sluice::memif::socket::{ControlListener, ControlSocket};
use sluice::memif::{MemifError, Role};

// Each test file is its own crate and uses only part of the support.
#[allow(dead_code)]
mod testpmd_support;

use testpmd_support::{TempDir, Testpmd, skip};

/// How long testpmd may take to come up, and the longest any control
/// message may take.
const TIMEOUT: Duration = Duration::from_secs(60);

const PACKETS: u32 = 5_000;

/// The DPDK driver testpmd's port needs.
const DRIVER: &str = "librte_net_memif.so";

/// Starts testpmd with a memif port of `role` ("server" or "client") at
/// `socket` and waits until the port is started (a server listens, a
/// client has connected); returns it and its output so far.
fn start_testpmd(socket: &Path, role: &str) -> (Testpmd, Vec<String>) {
    let prefix = format!("sluice-memif-{role}-{}", std::process::id());
    let vdev = format!(
        "net_memif0,role={role},id=0,socket={},socket-abstract=no",
        socket.display()
    );
    let mut command = Command::new("timeout");
    command
        .args([
            "120",
            "dpdk-testpmd",
            "--no-pci",
            "--no-huge",
            "-m",
            "256",
            "-l",
            "0-1",
        ])
        .args(["--file-prefix", &prefix, "--vdev", &vdev, "--"])
        // --no-flush-rx: what the client sends before forwarding starts
        // stays in the ring for it.
        .args([
            "--total-num-mbufs=4096",
            "--forward-mode=io",
            "--auto-start",
            "--no-flush-rx",
        ]);
    let testpmd = Testpmd::spawn(command, &prefix, TIMEOUT);
    // Printed once the port is started; testpmd then waits for the link,
    // i.e. for the handshake.
    let seen = testpmd.wait_for("Checking link statuses");
    (testpmd, seen)
}

/// The packet with sequence number `seq`: 60 to 1559 bytes.
fn packet(seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 53) % 1500;
    let mut p: Vec<u8> = (0..len)
        .map(|i| (i as u32 ^ seq.wrapping_mul(13)) as u8)
        .collect();
    p[..4].copy_from_slice(&seq.to_le_bytes());
    p
}

/// Sends PACKETS packets on `tx` and expects each back on `rx`, in order,
/// bytes unchanged (testpmd forwards in io mode). On no progress, ends
/// testpmd and fails with its output.
fn echo(mut tx: Producer, mut rx: Consumer, testpmd: Testpmd, output: &[String]) {
    // Fewer packets in flight than either ring holds, so testpmd never
    // finds the return ring full and drops.
    let window = u32::from(tx.ring().size().min(rx.ring().size())) / 2;
    let (mut sent, mut received) = (0u32, 0u32);
    let mut rounds = 0u64;
    while received < PACKETS {
        rounds += 1;
        if rounds == 5_000_000 {
            let rings = format!(
                "out: head {} tail {}, back: head {} tail {}",
                tx.ring().head(),
                tx.ring().tail(),
                rx.ring().head(),
                rx.ring().tail()
            );
            let rest = testpmd.end();
            panic!(
                "no progress: sent {sent}, received {received}; {rings}\n{}\n{rest}",
                output.join("\n"),
            );
        }
        let room = (received + window).min(PACKETS).saturating_sub(sent);
        if room > 0 {
            let burst: Vec<Vec<u8>> = (sent..sent + room.min(32)).map(packet).collect();
            let refs: Vec<&[u8]> = burst.iter().map(Vec::as_slice).collect();
            sent += tx.send_burst(&refs) as u32;
        }
        rx.recv_burst(32, |p| {
            assert_eq!(p, packet(received), "packet {received}");
            received += 1;
        });
        thread::yield_now();
    }
    assert_eq!(tx.errors(), Default::default());
    assert_eq!(rx.errors(), Default::default());
    drop(testpmd);
}

#[test]
fn the_client_connects_to_testpmd_and_gets_its_packets_back() {
    if skip(DRIVER) {
        return;
    }
    let dir = TempDir::new("memif-testpmd-server");
    let path = dir.0.join("memif.sock");
    let (testpmd, output) = start_testpmd(&path, "server");

    let socket = ControlSocket::connect(&path)
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", output.join("\n")));
    socket.set_timeout(Some(TIMEOUT)).unwrap();
    let connected = handshake::connect(&socket, ClientConfig::default())
        .unwrap_or_else(|e: MemifError| panic!("handshake: {e}\n{}", output.join("\n")));
    assert!(
        connected.peer_name.contains("DPDK"),
        "{}",
        connected.peer_name
    );
    assert_eq!(connected.peer_if_name, "net_memif0");
    let Connected {
        mut c2s, mut s2c, ..
    } = connected;
    let buffer_size = ClientConfig::default().buffer_size;
    let tx = Producer::new(c2s.remove(0).ring, Role::Client, buffer_size);
    let rx = Consumer::new(s2c.remove(0).ring, Role::Client, buffer_size);
    echo(tx, rx, testpmd, &output);
}

#[test]
fn testpmd_connects_to_the_server_and_gets_its_packets_back() {
    if skip(DRIVER) {
        return;
    }
    let dir = TempDir::new("memif-testpmd-client");
    let path = dir.0.join("memif.sock");
    let listener = ControlListener::bind(&path).unwrap();
    listener.set_timeout(Some(TIMEOUT)).unwrap();
    let (testpmd, output) = start_testpmd(&path, "client");

    let socket = listener
        .accept()
        .unwrap_or_else(|e| panic!("accept: {e}\n{}", output.join("\n")));
    socket.set_timeout(Some(TIMEOUT)).unwrap();
    let connected = handshake::serve(&socket, ServerConfig::default())
        .unwrap_or_else(|e: MemifError| panic!("handshake: {e}\n{}", output.join("\n")));
    assert!(
        connected.peer_name.contains("DPDK"),
        "{}",
        connected.peer_name
    );
    assert_eq!(connected.peer_if_name, "net_memif0");
    let Connected {
        mut c2s, mut s2c, ..
    } = connected;
    // The server fills what the client offers, and reads what it sends.
    let tx = Producer::new(s2c.remove(0).ring, Role::Server, 0);
    let rx = Consumer::new(c2s.remove(0).ring, Role::Server, 0);
    echo(tx, rx, testpmd, &output);
}
