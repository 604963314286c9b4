//! memif end to end: a client and a server in two threads doing the whole
//! handshake over a socket file, then moving packets both ways through the
//! shared rings; and handshakes the server or the client must refuse.

use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use sluice::memif::handshake::{self, ClientConfig, Connected, ServerConfig};
use sluice::memif::message::{AddRegion, AddRing, Hello, Init, Message, Mode};
use sluice::memif::region::{Layout, Region};
use sluice::memif::ring::{Consumer, Producer};
use sluice::memif::socket::{ControlListener, ControlSocket};
use sluice::memif::{ADD_RING_FLAG_C2S, MemifError, Role, VERSION};

/// Long enough for a loaded machine, short enough that a broken peer fails
/// the test instead of hanging it.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh directory for socket files, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sluice-memif-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The packet with sequence number `seq`: its number, then bytes derived
/// from it, 60 to 3059 bytes long (so some chain over 2048-byte buffers).
fn packet(seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 37) % 3000;
    let mut p: Vec<u8> = (0..len)
        .map(|i| (i as u32 ^ seq.wrapping_mul(7)) as u8)
        .collect();
    p[..4].copy_from_slice(&seq.to_le_bytes());
    p
}

const PACKETS: u32 = 10_000;

/// Sends PACKETS packets on `tx` and receives PACKETS on `rx`, checking
/// each received packet's bytes and order.
fn exchange(mut tx: Producer, mut rx: Consumer) {
    let mut next_send = 0u32;
    let mut next_recv = 0u32;
    let mut rounds = 0u64;
    while next_send < PACKETS || next_recv < PACKETS {
        rounds += 1;
        assert!(
            rounds < 50_000_000,
            "no progress: sent {next_send}, received {next_recv}"
        );
        if next_send < PACKETS {
            let burst: Vec<Vec<u8>> = (next_send..PACKETS.min(next_send + 32))
                .map(packet)
                .collect();
            let refs: Vec<&[u8]> = burst.iter().map(Vec::as_slice).collect();
            next_send += tx.send_burst(&refs) as u32;
        }
        rx.recv_burst(32, |p| {
            assert_eq!(p, packet(next_recv), "packet {next_recv}");
            next_recv += 1;
        });
        thread::yield_now();
    }
    assert_eq!(tx.errors(), Default::default());
    assert_eq!(rx.errors(), Default::default());
}

fn data_path(connected: Connected, buffer_size: u32) {
    let Connected {
        role,
        mut c2s,
        mut s2c,
        ..
    } = connected;
    let c2s = c2s.remove(0).ring;
    let s2c = s2c.remove(0).ring;
    match role {
        Role::Client => exchange(
            Producer::new(c2s, role, buffer_size),
            Consumer::new(s2c, role, buffer_size),
        ),
        Role::Server => exchange(
            Producer::new(s2c, role, buffer_size),
            Consumer::new(c2s, role, buffer_size),
        ),
    }
}

#[test]
fn handshake_then_ten_thousand_packets_each_way() {
    let dir = TempDir::new("data");
    let path = dir.0.join("memif.sock");
    let listener = ControlListener::bind(&path).unwrap();
    let server_config = ServerConfig {
        id: 7,
        secret: b"opensesame".to_vec(),
        if_name: "srv0".into(),
        name: "server-app".into(),
        ..Default::default()
    };
    let server = thread::spawn(move || {
        let socket = listener.accept().unwrap();
        socket.set_timeout(Some(TIMEOUT)).unwrap();
        let connected = handshake::serve(&socket, server_config).unwrap();
        assert_eq!(connected.role, Role::Server);
        assert_eq!(connected.peer_name, "client-app");
        assert_eq!(connected.peer_if_name, "cli0");
        assert_eq!((connected.c2s.len(), connected.s2c.len()), (1, 1));
        data_path(connected, 0);
    });
    let socket = ControlSocket::connect(&path).unwrap();
    socket.set_timeout(Some(TIMEOUT)).unwrap();
    let connected = handshake::connect(
        &socket,
        ClientConfig {
            id: 7,
            secret: b"opensesame".to_vec(),
            name: "client-app".into(),
            if_name: "cli0".into(),
            log2_ring_size: 6,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(connected.peer_name, "server-app");
    assert_eq!(connected.peer_if_name, "srv0");
    data_path(connected, 2048);
    server.join().unwrap();
}

/// A server on one end of a socket pair, its handshake in a thread; the
/// test plays the client by hand on the other end.
fn server(
    config: ServerConfig,
) -> (
    ControlSocket,
    thread::JoinHandle<Result<Connected, MemifError>>,
) {
    let (ours, theirs) = ControlSocket::pair().unwrap();
    ours.set_timeout(Some(TIMEOUT)).unwrap();
    theirs.set_timeout(Some(TIMEOUT)).unwrap();
    let handle = thread::spawn(move || handshake::serve(&theirs, config));
    assert!(matches!(ours.recv().unwrap().message, Message::Hello(_)));
    (ours, handle)
}

fn init(id: u32, secret: &[u8], version: u16) -> Message {
    Message::Init(Init {
        version,
        id,
        mode: Mode::Ethernet,
        secret: secret.to_vec(),
        name: "hand".into(),
    })
}

/// The DISCONNECT the peer sent, as its reason.
fn disconnect_reason(socket: &ControlSocket) -> String {
    match socket.recv().unwrap().message {
        Message::Disconnect(d) => d.reason,
        other => panic!("expected DISCONNECT, got {other:?}"),
    }
}

fn expect_ack(socket: &ControlSocket) {
    assert_eq!(socket.recv().unwrap().message, Message::Ack);
}

#[test]
fn the_server_refuses_wrong_id_secret_and_version() {
    let secret = ServerConfig {
        id: 1,
        secret: b"right".to_vec(),
        ..Default::default()
    };
    for (init, reason) in [
        (init(1, b"wrong", VERSION), "Incorrect secret"),
        (init(1, b"", VERSION), "Secret required"),
        (init(2, b"right", VERSION), "ID not found"),
        (init(1, b"right", 0x0100), "Incompatible memif version"),
    ] {
        let (socket, handle) = server(secret.clone());
        socket.send(&init, None).unwrap();
        assert_eq!(disconnect_reason(&socket), reason);
        assert!(matches!(handle.join().unwrap(), Err(MemifError::Refused(r)) if r == reason));
    }
}

#[test]
fn the_server_refuses_out_of_order_and_truncated_messages() {
    let (socket, handle) = server(ServerConfig::default());
    socket
        .send(
            &Message::Connect {
                if_name: "x".into(),
            },
            None,
        )
        .unwrap();
    assert_eq!(disconnect_reason(&socket), "Unexpected message CONNECT");
    assert!(matches!(
        handle.join().unwrap(),
        Err(MemifError::Refused(_))
    ));

    // A datagram of 64 bytes: the server answers DISCONNECT and stops.
    let (socket, handle) = server(ServerConfig::default());
    let short = [3u8; 64];
    // SAFETY: sends 64 bytes from a live array on a socket we own.
    let sent = unsafe { libc::send(socket.as_fd().as_raw_fd(), short.as_ptr().cast(), 64, 0) };
    assert_eq!(sent, 64);
    assert!(disconnect_reason(&socket).contains("64 bytes"));
    assert!(matches!(
        handle.join().unwrap(),
        Err(MemifError::BadLength(64))
    ));
}

fn layout() -> Layout {
    Layout {
        c2s_rings: 1,
        s2c_rings: 1,
        log2_ring_size: 4,
        buffer_size: 256,
    }
}

fn eventfd() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a new descriptor we own.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

fn ring_msg(c2s: bool, offset: u32, log2: u8) -> Message {
    Message::AddRing(AddRing {
        flags: if c2s { ADD_RING_FLAG_C2S } else { 0 },
        index: 0,
        region: 0,
        offset,
        log2_ring_size: log2,
        private_hdr_size: 0,
    })
}

#[test]
fn the_server_refuses_bad_regions_rings_and_cookies() {
    let l = layout();
    let size = l.region_size();

    // A region whose memfd is smaller than claimed.
    let (socket, handle) = server(ServerConfig::default());
    socket.send(&init(0, b"", VERSION), None).unwrap();
    expect_ack(&socket);
    let small = Region::create("small", 4096).unwrap();
    socket
        .send(
            &Message::AddRegion(AddRegion {
                index: 0,
                size: 8192,
            }),
            Some(small.fd()),
        )
        .unwrap();
    assert!(disconnect_reason(&socket).contains("smaller than"));
    assert!(matches!(
        handle.join().unwrap(),
        Err(MemifError::RegionTooSmall {
            claimed: 8192,
            actual: 4096
        })
    ));

    // A ring whose descriptors run past the region's end.
    let (socket, handle) = server(ServerConfig::default());
    socket.send(&init(0, b"", VERSION), None).unwrap();
    expect_ack(&socket);
    let region = Region::create("region", size).unwrap();
    socket
        .send(
            &Message::AddRegion(AddRegion { index: 0, size }),
            Some(region.fd()),
        )
        .unwrap();
    expect_ack(&socket);
    let efd = eventfd();
    socket
        .send(&ring_msg(true, size as u32 - 128, 4), Some(efd.as_fd()))
        .unwrap();
    assert!(disconnect_reason(&socket).contains("does not fit"));
    assert!(matches!(
        handle.join().unwrap(),
        Err(MemifError::RingOutOfBounds { .. })
    ));

    // Rings inside the region, but no cookie written: refused at CONNECT.
    let (socket, handle) = server(ServerConfig::default());
    socket.send(&init(0, b"", VERSION), None).unwrap();
    expect_ack(&socket);
    let region = Region::create("region", size).unwrap();
    socket
        .send(
            &Message::AddRegion(AddRegion { index: 0, size }),
            Some(region.fd()),
        )
        .unwrap();
    expect_ack(&socket);
    for (c2s, dir) in [
        (true, sluice::memif::Direction::ClientToServer),
        (false, sluice::memif::Direction::ServerToClient),
    ] {
        socket
            .send(
                &ring_msg(c2s, l.ring_offset(dir, 0) as u32, 4),
                Some(efd.as_fd()),
            )
            .unwrap();
        expect_ack(&socket);
    }
    socket
        .send(
            &Message::Connect {
                if_name: "x".into(),
            },
            None,
        )
        .unwrap();
    assert!(disconnect_reason(&socket).contains("cookie"));
    assert!(matches!(
        handle.join().unwrap(),
        Err(MemifError::BadCookie(0))
    ));

    // A ring larger than HELLO allowed.
    let (socket, handle) = server(ServerConfig {
        max_log2_ring_size: 3,
        ..Default::default()
    });
    socket.send(&init(0, b"", VERSION), None).unwrap();
    expect_ack(&socket);
    let region = Region::create("region", size).unwrap();
    socket
        .send(
            &Message::AddRegion(AddRegion { index: 0, size }),
            Some(region.fd()),
        )
        .unwrap();
    expect_ack(&socket);
    socket
        .send(&ring_msg(true, 0, 4), Some(efd.as_fd()))
        .unwrap();
    assert!(disconnect_reason(&socket).contains("2^4"));
    assert!(matches!(
        handle.join().unwrap(),
        Err(MemifError::BadRingSize(4))
    ));
}

#[test]
fn the_client_refuses_a_bad_version_and_reports_a_disconnect() {
    let (ours, theirs) = ControlSocket::pair().unwrap();
    ours.set_timeout(Some(TIMEOUT)).unwrap();
    theirs.set_timeout(Some(TIMEOUT)).unwrap();
    let client = thread::spawn(move || handshake::connect(&theirs, ClientConfig::default()));
    ours.send(
        &Message::Hello(Hello {
            name: "old".into(),
            min_version: 0x0100,
            max_version: 0x0100,
            max_region: 0,
            max_s2c_ring: 0,
            max_c2s_ring: 0,
            max_log2_ring_size: 10,
        }),
        None,
    )
    .unwrap();
    assert_eq!(disconnect_reason(&ours), "Incompatible memif version");
    assert!(matches!(
        client.join().unwrap(),
        Err(MemifError::Refused(_))
    ));

    // A server that refuses INIT: the client returns the reason.
    let (ours, theirs) = ControlSocket::pair().unwrap();
    ours.set_timeout(Some(TIMEOUT)).unwrap();
    theirs.set_timeout(Some(TIMEOUT)).unwrap();
    let server = thread::spawn(move || {
        handshake::serve(
            &ours,
            ServerConfig {
                id: 3,
                ..Default::default()
            },
        )
    });
    let result = handshake::connect(&theirs, ClientConfig::default());
    assert!(matches!(
        result,
        Err(MemifError::Disconnected { ref reason, .. }) if reason == "ID not found"
    ));
    assert!(matches!(
        server.join().unwrap(),
        Err(MemifError::Refused(_))
    ));
}

#[test]
fn the_client_takes_the_servers_limits() {
    let (ours, theirs) = ControlSocket::pair().unwrap();
    ours.set_timeout(Some(TIMEOUT)).unwrap();
    theirs.set_timeout(Some(TIMEOUT)).unwrap();
    let server = thread::spawn(move || {
        handshake::serve(
            &ours,
            ServerConfig {
                max_c2s_rings: 2,
                max_s2c_rings: 1,
                max_log2_ring_size: 8,
                ..Default::default()
            },
        )
    });
    let client = handshake::connect(
        &theirs,
        ClientConfig {
            c2s_rings: 4,
            s2c_rings: 4,
            log2_ring_size: 12,
            ..Default::default()
        },
    )
    .unwrap();
    let server = server.join().unwrap().unwrap();
    for side in [&client, &server] {
        assert_eq!((side.c2s.len(), side.s2c.len()), (2, 1));
        assert!(side.c2s.iter().all(|r| r.ring.size() == 256));
    }
}
