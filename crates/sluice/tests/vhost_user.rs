//! A vhost-user frontend and backend talking over a socket pair, the
//! backend in its own thread: a whole net device setup with the backend's
//! state checked after every request, refused requests with and without
//! REPLY_ACK, and replies the frontend must reject.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread;

use sluice::vhost_user::message::{MemoryRegion, VringAddress, encode_raw};
use sluice::vhost_user::{
    Backend, BackendConfig, F_PROTOCOL_FEATURES, Frontend, GuestMemoryRegion, ReadyVring, Request,
    VhostUserError, VringHandler, VringSetup, protocol_features, socket,
};

const VIRTIO_F_VERSION_1: u64 = 1 << 32;
const REGION_SIZE: u64 = 0x10000;
const GPA: u64 = 0x1_0000_0000;
const UADDR: u64 = 0x7f12_0000_0000;
const RING_SIZE: u32 = 256;

fn memfd(len: u64) -> OwnedFd {
    // SAFETY: a NUL-terminated name; flags are plain bits.
    let fd = unsafe { libc::memfd_create(c"vhost-user-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
    // SAFETY: `fd` was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a live descriptor and a plain length.
    let rc = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
    assert_eq!(rc, 0);
    fd
}

fn eventfd() -> OwnedFd {
    // SAFETY: plain flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0, "eventfd: {}", io::Error::last_os_error());
    // SAFETY: `fd` was just created and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Reads an eventfd's count (0 when nothing was signalled).
fn eventfd_take(fd: &OwnedFd) -> u64 {
    let mut v = 0u64;
    // SAFETY: a live descriptor and an 8-byte buffer.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut v).cast(), 8) };
    if n == 8 { v } else { 0 }
}

fn eventfd_signal(fd: &OwnedFd) {
    let v = 1u64;
    // SAFETY: a live descriptor and an 8-byte buffer.
    let n = unsafe { libc::write(fd.as_raw_fd(), (&raw const v).cast(), 8) };
    assert_eq!(n, 8);
}

/// Offset of ring `i`'s descriptor table in the region; its avail ring is
/// 0x1000 further, its used ring 0x2000.
fn ring_offset(i: u32) -> u64 {
    u64::from(i) * 0x8000
}

/// A data path that, when a ring starts, reads the ring's first
/// descriptor word and its kick count and signals its call eventfd; on
/// stop it reports `17 + index` as its next avail index.
#[derive(Default)]
struct TestDataPath {
    started: Vec<(usize, u64, u64)>,
}

impl VringHandler for TestDataPath {
    fn vring_started(&mut self, ring: &ReadyVring<'_>) {
        // SAFETY: a started ring's descriptor table is 16 * size bytes of
        // mapped memory, 16-byte aligned; read without forming a reference.
        let word = unsafe { ring.desc.as_ptr().cast::<u64>().read_volatile() };
        let kicks = ring.kick.map_or(0, eventfd_take);
        if let Some(call) = ring.call {
            eventfd_signal(call);
        }
        self.started.push((ring.index, word, kicks));
    }

    fn vring_stopped(&mut self, index: usize) -> Option<u16> {
        Some(17 + index as u16)
    }
}

/// The backend's state after one request.
#[derive(Debug)]
struct State {
    request: Request,
    features: u64,
    protocol_features: u64,
    owned: bool,
    regions: Vec<MemoryRegion>,
    vrings: Vec<VringSetup>,
    started: Vec<(usize, u64, u64)>,
}

fn config() -> BackendConfig {
    BackendConfig {
        features: VIRTIO_F_VERSION_1,
        protocol_features: protocol_features::MQ | protocol_features::REPLY_ACK,
        queue_pairs: 1,
    }
}

/// Serves `stream` in a thread, sending the state after each request.
fn spawn_backend(
    stream: UnixStream,
) -> (
    mpsc::Receiver<Result<State, String>>,
    thread::JoinHandle<()>,
) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let mut backend = Backend::new(config());
        let mut data_path = TestDataPath::default();
        loop {
            let report = match backend.serve_one(&stream, &mut data_path) {
                Ok(request) => Ok(State {
                    request,
                    features: backend.features(),
                    protocol_features: backend.protocol_features(),
                    owned: backend.is_owned(),
                    regions: backend
                        .memory()
                        .regions()
                        .iter()
                        .map(|r| *r.desc())
                        .collect(),
                    vrings: (0..backend.nb_vrings())
                        .map(|i| backend.vring_setup(i).unwrap())
                        .collect(),
                    started: data_path.started.clone(),
                }),
                Err(VhostUserError::Closed) => break,
                Err(e) => Err(e.to_string()),
            };
            if tx.send(report).is_err() {
                break;
            }
        }
        backend.stop_all(&mut data_path);
    });
    (rx, handle)
}

#[test]
fn a_frontend_sets_up_two_vrings_on_a_backend() {
    let (front, back) = UnixStream::pair().unwrap();
    let (states, backend) = spawn_backend(back);
    let next = || states.recv().unwrap().unwrap();
    let mut driver = Frontend::from_stream(front);

    let offered = driver.get_features().unwrap();
    assert_eq!(offered, VIRTIO_F_VERSION_1 | F_PROTOCOL_FEATURES);
    assert_eq!(next().features, 0);

    let protocol = driver.get_protocol_features().unwrap();
    assert_eq!(
        protocol,
        protocol_features::MQ | protocol_features::REPLY_ACK
    );
    next();
    driver.set_protocol_features(protocol).unwrap();
    assert!(driver.reply_ack());
    let s = next();
    assert_eq!(
        (s.request, s.protocol_features),
        (Request::SetProtocolFeatures, protocol)
    );

    driver.set_owner().unwrap();
    assert!(next().owned);
    driver.set_features(offered).unwrap();
    assert_eq!(next().features, offered);
    assert_eq!(driver.get_queue_num().unwrap(), 1);
    next();

    // The memory: one memfd, mapped here too, as a frontend has it.
    let mem = memfd(REGION_SIZE);
    let region = MemoryRegion {
        guest_phys_addr: GPA,
        memory_size: REGION_SIZE,
        userspace_addr: UADDR,
        mmap_offset: 0,
    };
    let mine = GuestMemoryRegion::map(region, mem.as_fd(), 0).unwrap();
    driver.set_mem_table(&[(region, mem.as_fd())]).unwrap();
    assert_eq!(next().regions, [region]);
    drop(mem);

    let kicks = [eventfd(), eventfd()];
    let calls = [eventfd(), eventfd()];
    for i in 0..2u32 {
        let at = ring_offset(i);
        let vi = i as usize;
        // The order DPDK's virtio_user uses: call first, kick last.
        driver.set_vring_call(i, Some(calls[vi].as_fd())).unwrap();
        assert!(next().vrings[vi].call);
        driver.set_vring_num(i, RING_SIZE).unwrap();
        assert_eq!(next().vrings[vi].num, Some(RING_SIZE as u16));
        driver.set_vring_base(i, 3 + i).unwrap();
        assert_eq!(next().vrings[vi].base, 3 + i as u16);
        let addr = VringAddress {
            index: i,
            flags: 0,
            desc_user_addr: UADDR + at,
            avail_user_addr: UADDR + at + 0x1000,
            used_user_addr: UADDR + at + 0x2000,
            log_guest_addr: 0,
        };
        driver.set_vring_addr(&addr).unwrap();
        let s = next();
        assert_eq!(s.vrings[vi].addr, Some(addr));
        assert!(!s.vrings[vi].started);

        // A descriptor written through this side's mapping, by guest
        // physical address, is what the backend reads at the ring's host
        // address; the kick written before is the backend's to read.
        mine.write_gpa(GPA + at, &(0xdead_0000 + u64::from(i)).to_le_bytes())
            .unwrap();
        eventfd_signal(&kicks[vi]);
        driver.set_vring_kick(i, Some(kicks[vi].as_fd())).unwrap();
        let s = next();
        assert!(s.vrings[vi].started && s.vrings[vi].kick);
        assert!(!s.vrings[vi].enabled, "disabled until SET_VRING_ENABLE");
        assert_eq!(s.started.last(), Some(&(vi, 0xdead_0000 + u64::from(i), 1)));
        assert_eq!(
            eventfd_take(&calls[vi]),
            1,
            "the backend's call reaches the frontend"
        );

        driver.set_vring_enable(i, true).unwrap();
        assert!(next().vrings[vi].enabled);
    }

    for i in 0..2u32 {
        assert_eq!(driver.get_vring_base(i).unwrap(), 17 + i);
        let s = next();
        let v = s.vrings[i as usize];
        assert!(!v.started && !v.kick && !v.call);
        assert_eq!(v.base, 17 + i as u16);
    }

    drop(driver);
    backend.join().unwrap();
    assert!(
        states.recv().is_err(),
        "the backend ends when the frontend closes"
    );
}

#[test]
fn with_reply_ack_a_refused_request_is_a_nack_and_the_connection_goes_on() {
    let (front, back) = UnixStream::pair().unwrap();
    let (states, backend) = spawn_backend(back);
    let mut driver = Frontend::from_stream(front);
    driver
        .set_protocol_features(protocol_features::REPLY_ACK)
        .unwrap();
    states.recv().unwrap().unwrap();

    let err = driver.set_vring_num(0, 3).unwrap_err();
    assert!(
        matches!(
            err,
            VhostUserError::Nack {
                request: Request::SetVringNum,
                status: 1
            }
        ),
        "{err}"
    );
    assert!(states.recv().unwrap().unwrap_err().contains("power of two"));
    let err = driver.set_features(1).unwrap_err();
    assert!(matches!(err, VhostUserError::Nack { .. }), "{err}");
    states.recv().unwrap().unwrap_err();
    let err = driver.set_vring_kick(5, None).unwrap_err();
    assert!(matches!(err, VhostUserError::Nack { .. }), "{err}");
    states.recv().unwrap().unwrap_err();

    assert_eq!(driver.get_queue_num().unwrap(), 1);
    drop(driver);
    backend.join().unwrap();
}

#[test]
fn without_reply_ack_a_refused_request_ends_the_session() {
    let (front, back) = UnixStream::pair().unwrap();
    let driver = Frontend::from_stream(front);
    let serving = thread::spawn(move || {
        let mut backend = Backend::new(config());
        backend.serve(&back, &mut ())
    });
    driver.set_vring_num(0, 3).unwrap();
    let err = serving.join().unwrap().unwrap_err();
    assert!(
        matches!(err, VhostUserError::BadVring { index: 0, .. }),
        "{err}"
    );
    // The backend's end is closed: the next request finds no one.
    let err = driver.get_features().unwrap_err();
    assert!(
        matches!(err, VhostUserError::Closed | VhostUserError::Io(_)),
        "{err}"
    );
}

#[test]
fn the_frontend_rejects_replies_that_do_not_match() {
    let (front, back) = UnixStream::pair().unwrap();
    let driver = Frontend::from_stream(front);
    let reply = |code: u32, flags: u32, payload: &[u8]| {
        socket::send(&back, &encode_raw(code, flags, payload), &[]).unwrap()
    };
    let what = |err: VhostUserError| match err {
        VhostUserError::BadReply { what, .. } => what,
        other => panic!("{other}"),
    };
    // Each reply is queued before its request is sent: no thread needed.
    reply(2, 0x5, &[0; 8]);
    assert_eq!(
        what(driver.get_features().unwrap_err()),
        "it answers another request"
    );
    reply(1, 0x1, &[0; 8]);
    assert_eq!(
        what(driver.get_features().unwrap_err()),
        "the REPLY flag is not set"
    );
    reply(1, 0x5, &[0; 4]);
    assert_eq!(
        what(driver.get_features().unwrap_err()),
        "its payload has the wrong size"
    );
    reply(11, 0x5, &[1, 0, 0, 0, 9, 0, 0, 0]);
    assert_eq!(
        what(driver.get_vring_base(0).unwrap_err()),
        "it names another vring"
    );
    let call = eventfd();
    socket::send(
        &back,
        &encode_raw(17, 0x5, &[1, 0, 0, 0, 0, 0, 0, 0]),
        &[call.as_fd()],
    )
    .unwrap();
    assert_eq!(
        what(driver.get_queue_num().unwrap_err()),
        "it carries file descriptors"
    );
    reply(17, 0x6, &[0; 8]);
    assert!(matches!(
        driver.get_queue_num(),
        Err(VhostUserError::BadVersion { .. })
    ));
    reply(17, 0x5, &[2, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(driver.get_queue_num().unwrap(), 2);
    // Every request the frontend sent is there, in order, each well formed.
    drop(driver);
    let mut seen = Vec::new();
    loop {
        match socket::recv(&back) {
            Ok((msg, _)) => seen.push(msg.request().code()),
            Err(VhostUserError::Closed) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(seen, [1, 1, 1, 11, 17, 17, 17]);
}
