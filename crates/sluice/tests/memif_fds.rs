//! memif leaks no file descriptor: control sockets, region memfds and ring
//! eventfds are all closed after a connection ends, after a refused
//! handshake, and when a message brings descriptors it should not.
//! One test alone in its binary, so no other test opens descriptors while it
//! counts them.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::thread;
use std::time::Duration;

use sluice::memif::handshake::{self, ClientConfig, ServerConfig};
use sluice::memif::message::{AddRegion, Init, Message, Mode};
use sluice::memif::region::Region;
use sluice::memif::ring::{Consumer, Producer};
use sluice::memif::socket::ControlSocket;
use sluice::memif::{MemifError, Role, VERSION};

const TIMEOUT: Duration = Duration::from_secs(30);

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn pair() -> (ControlSocket, ControlSocket) {
    let (a, b) = ControlSocket::pair().unwrap();
    a.set_timeout(Some(TIMEOUT)).unwrap();
    b.set_timeout(Some(TIMEOUT)).unwrap();
    (a, b)
}

fn eventfd() -> OwnedFd {
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a new descriptor we own.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A whole connection with two rings each way and a few packets.
fn connection() {
    let (server_end, client_end) = pair();
    let server = thread::spawn(move || {
        let connected = handshake::serve(&server_end, ServerConfig::default()).unwrap();
        let mut rx = Consumer::new(
            connected.c2s.into_iter().next().unwrap().ring,
            Role::Server,
            0,
        );
        let mut got = 0;
        let mut rounds = 0;
        while got < 3 {
            rounds += 1;
            assert!(rounds < 10_000_000, "packets lost");
            got += rx.recv_burst(8, |p| assert_eq!(p, [9u8; 100]));
            thread::yield_now();
        }
    });
    let connected = handshake::connect(
        &client_end,
        ClientConfig {
            c2s_rings: 2,
            s2c_rings: 2,
            log2_ring_size: 4,
            ..Default::default()
        },
    )
    .unwrap();
    let mut tx = Producer::new(
        connected.c2s.into_iter().next().unwrap().ring,
        Role::Client,
        2048,
    );
    assert_eq!(tx.send_burst(&[&[9u8; 100], &[9u8; 100], &[9u8; 100]]), 3);
    server.join().unwrap();
}

/// Handshakes the server refuses: a client asking for another id, and a
/// region smaller than claimed.
fn refusals() {
    let (server_end, client_end) = pair();
    let server = thread::spawn(move || {
        handshake::serve(
            &server_end,
            ServerConfig {
                id: 5,
                ..Default::default()
            },
        )
    });
    assert!(matches!(
        handshake::connect(&client_end, ClientConfig::default()),
        Err(MemifError::Disconnected { .. })
    ));
    assert!(server.join().unwrap().is_err());

    let (server_end, client_end) = pair();
    let server = thread::spawn(move || handshake::serve(&server_end, ServerConfig::default()));
    assert!(matches!(
        client_end.recv().unwrap().message,
        Message::Hello(_)
    ));
    let init = Message::Init(Init {
        version: VERSION,
        id: 0,
        mode: Mode::Ethernet,
        secret: Vec::new(),
        name: "fds".into(),
    });
    client_end.send(&init, None).unwrap();
    assert_eq!(client_end.recv().unwrap().message, Message::Ack);
    let small = Region::create("small", 4096).unwrap();
    let claim = Message::AddRegion(AddRegion {
        index: 0,
        size: 1 << 20,
    });
    client_end.send(&claim, Some(small.fd())).unwrap();
    assert!(matches!(
        client_end.recv().unwrap().message,
        Message::Disconnect(_)
    ));
    assert!(matches!(
        server.join().unwrap(),
        Err(MemifError::RegionTooSmall { .. })
    ));
}

/// Descriptors riding on messages that carry none, or too many: closed.
fn stray_descriptors() {
    let (a, b) = pair();
    let efd = eventfd();
    // An ACK with a descriptor, sent by hand.
    let bytes = Message::Ack.encode().unwrap();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain old data.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    // SAFETY: size computation only.
    header.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as _;
    header.msg_control = control.as_mut_ptr().cast();
    // SAFETY: the control buffer has room for one header and one descriptor.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&header);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), efd.as_raw_fd());
    }
    // SAFETY: `header` points at live buffers.
    let sent = unsafe { libc::sendmsg(a.as_fd().as_raw_fd(), &header, 0) };
    assert_eq!(sent, 128);
    let received = b.recv().unwrap();
    assert!(received.fd.is_none());
}

#[test]
fn no_descriptor_outlives_its_connection() {
    // A first round opens whatever the process opens once (thread-local
    // state, lazily made files); the count is taken after it.
    connection();
    let before = open_fds();
    connection();
    refusals();
    stray_descriptors();
    assert_eq!(open_fds(), before);
}
