use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::driver;
use crate::mbuf::{Burst, MbufPool};
use crate::memif::Role;
use crate::memif::handshake::{self, ClientConfig};
use crate::memif::message::{AddRegion, AddRing, Hello, Init, Message, Mode};
use crate::memif::ring::{Descriptor, Producer};
use crate::memif::socket::{ControlListener, ControlSocket};
use crate::port::{Port, PortConfig};
use crate::test_support::test_pool;

/// A directory for socket files, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("sluice-memif-port-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn socket(&self) -> String {
        self.0.join("memif.sock").display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn xstat(port: &Port, name: &str) -> u64 {
    port.counters().xstats.get(name).unwrap_or(0)
}

/// Waits (bounded) until `port` has made `n` connections.
fn wait_links(port: &Port, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while xstat(port, "link_ups") < n {
        assert!(Instant::now() < deadline, "memif link did not come up");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits (bounded) until `port` has lost `n` connections.
fn wait_downs(port: &Port, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while xstat(port, "link_downs") < n {
        assert!(Instant::now() < deadline, "memif link did not go down");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Frame `seq`: its number, then bytes derived from it, 60..=1560 bytes.
fn frame(seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 37) % 1500;
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u32 ^ seq.wrapping_mul(7)) as u8)
        .collect();
    f[..4].copy_from_slice(&seq.to_le_bytes());
    f
}

fn open(spec: &str, pool: &MbufPool) -> Port {
    let mut port = driver::open(spec, PortConfig::new(Some(pool.clone()))).unwrap();
    port.start().unwrap();
    port
}

/// Sends `count` frames from `a` to `b` and checks each arrives, in order,
/// byte-exact.
fn exchange(a: &mut Port, b: &mut Port, pool: &MbufPool, count: u32) {
    let (mut next_sent, mut next_seen) = (0u32, 0u32);
    let mut out: Burst = Burst::new();
    let mut got: Burst = Burst::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while next_seen < count {
        assert!(
            Instant::now() < deadline,
            "stalled at {next_seen} of {count}"
        );
        while out.len() < 32 && next_sent < count {
            out.push(pool.alloc_from_slice(&frame(next_sent)).unwrap())
                .unwrap();
            next_sent += 1;
        }
        a.tx_queue(0).unwrap().tx_burst(&mut out);
        b.rx_queue(0).unwrap().rx_burst(&mut got);
        let n = got.len();
        for m in got.drain_front(n) {
            let mut bytes = Vec::new();
            m.segments().for_each(|s| bytes.extend_from_slice(s));
            assert_eq!(bytes, frame(next_seen), "frame {next_seen}");
            next_seen += 1;
        }
    }
    assert!(out.is_empty());
}

/// A server port on `sock` and a client port with `client_keys` after
/// `role=client`, both linked.
fn linked_pair(sock: &str, client_keys: &str, pool: &MbufPool) -> (Port, Port) {
    let server = open(&format!("memif:socket={sock}"), pool);
    let client = open(
        &format!("memif:socket={sock},role=client,{client_keys}"),
        pool,
    );
    wait_links(&server, 1);
    wait_links(&client, 1);
    (server, client)
}

/// 5000 bytes derived from their offsets, and a chain of three mbufs
/// holding them (1500 + 1500 + 2000 bytes).
fn big_chain(pool: &MbufPool) -> (Vec<u8>, crate::mbuf::Mbuf) {
    let big: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut head = pool.alloc_from_slice(&big[..1500]).unwrap();
    for part in [&big[1500..3000], &big[3000..]] {
        head.chain(pool.alloc_from_slice(part).unwrap()).unwrap();
    }
    (big, head)
}

#[test]
fn bad_specs_are_clear_errors() {
    let err = |spec: &str| driver::check_spec(spec).unwrap_err().to_string();
    assert!(err("memif:role=client").contains("needs key 'socket'"));
    assert!(err("memif:socket=/x,role=peer").contains("one of server, client"));
    assert!(err("memif:socket=/x,ring_size=1000").contains("not a power of two"));
    assert!(err("memif:socket=/x,rings=0").contains("key 'rings'"));
    assert!(err("memif:socket=/x,secret=012345678901234567890123").contains("at most 23"));
    assert!(err("memif:socket=/x,mode=ip").contains("no key 'mode'"));
    driver::check_spec(
        "memif:socket=/x,role=client,id=7,rings=2,buffer_size=1024,ring_size=256,secret=s",
    )
    .unwrap();
}

#[test]
fn two_ports_exchange_frames_both_ways_byte_exact() {
    let dir = TempDir::new("exchange");
    let pool = test_pool(4095);
    let sock = dir.socket();
    {
        let mut server = open(
            &format!("memif:socket={sock},role=server,id=3,secret=abc"),
            &pool,
        );
        let mut client = open(
            &format!("memif:socket={sock},role=client,id=3,secret=abc,ring_size=256"),
            &pool,
        );
        wait_links(&server, 1);
        wait_links(&client, 1);
        exchange(&mut client, &mut server, &pool, 10_000);
        exchange(&mut server, &mut client, &pool, 10_000);
        let (s, c) = (server.stats(), client.stats());
        assert_eq!((s.rx_packets, s.tx_packets), (10_000, 10_000));
        assert_eq!((c.rx_packets, c.tx_packets), (10_000, 10_000));
        assert_eq!(
            (s.rx_errors, c.rx_errors, s.tx_errors, c.tx_errors),
            (0, 0, 0, 0)
        );
        client.stop();
        server.stop();
    }
    assert!(
        !PathBuf::from(&sock).exists(),
        "the server removes its socket file"
    );
    assert!(pool.is_full());
}

#[test]
fn a_full_ring_takes_fewer_and_keeps_the_rest() {
    let dir = TempDir::new("full");
    let pool = test_pool(1023);
    let sock = dir.socket();
    {
        let server = open(&format!("memif:socket={sock}"), &pool);
        let mut client = open(
            &format!("memif:socket={sock},role=client,ring_size=16"),
            &pool,
        );
        wait_links(&server, 1);
        wait_links(&client, 1);
        let mut out: Burst = Burst::new();
        for seq in 0..32 {
            out.push(pool.alloc_from_slice(&frame(seq)).unwrap())
                .unwrap();
        }
        assert_eq!(client.tx_queue(0).unwrap().tx_burst(&mut out), 16);
        assert_eq!(out.len(), 16, "the rest stay with the caller");
        assert_eq!(client.tx_queue(0).unwrap().tx_burst(&mut out), 0);
        drop(out);
    }
    assert!(pool.is_full());
}

#[test]
fn peers_reconnect_after_a_disconnect() {
    let dir = TempDir::new("reconnect");
    let pool = test_pool(2047);
    let sock = dir.socket();
    {
        let mut server = open(&format!("memif:socket={sock}"), &pool);
        let mut client = open(&format!("memif:socket={sock},role=client"), &pool);
        wait_links(&server, 1);
        wait_links(&client, 1);
        exchange(&mut client, &mut server, &pool, 100);

        // The client goes: the server's rings go not-ready.
        client.stop();
        wait_downs(&server, 1);
        let mut out: Burst = Burst::new();
        out.push(pool.alloc_from_slice(&frame(0)).unwrap()).unwrap();
        assert_eq!(server.tx_queue(0).unwrap().tx_burst(&mut out), 1);
        assert_eq!(xstat(&server, "tx_not_ready_errors"), 1);

        // It comes back; so does the link.
        client.start().unwrap();
        wait_links(&server, 2);
        wait_links(&client, 2);
        exchange(&mut server, &mut client, &pool, 100);

        // The server goes: the client notices and connects to the next one.
        server.stop();
        wait_downs(&client, 2);
        server.start().unwrap();
        wait_links(&client, 3);
        wait_links(&server, 3);
        exchange(&mut client, &mut server, &pool, 100);
    }
    assert!(pool.is_full());
}

#[test]
fn a_live_socket_is_an_error_and_a_stale_one_is_replaced() {
    let dir = TempDir::new("stale");
    let pool = test_pool(255);
    let sock = dir.socket();
    {
        let _server = open(&format!("memif:socket={sock}"), &pool);
        let mut second = driver::open(
            &format!("memif:socket={sock}"),
            PortConfig::new(Some(pool.clone())),
        )
        .unwrap();
        let err = second.start().unwrap_err().to_string();
        assert!(err.contains("already listens"), "{err}");
    }
    // Another kind of socket someone listens on: theirs, left alone.
    {
        let other = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let mut port = driver::open(
            &format!("memif:socket={sock}"),
            PortConfig::new(Some(pool.clone())),
        )
        .unwrap();
        let err = port.start().unwrap_err().to_string();
        assert!(err.contains("another process listens"), "{err}");
        assert!(PathBuf::from(&sock).exists());
        drop(other);
        std::fs::remove_file(&sock).unwrap();
    }
    // A file nobody listens on.
    std::fs::write(&sock, b"").unwrap();
    let server = open(&format!("memif:socket={sock}"), &pool);
    drop(server);
    assert!(!PathBuf::from(&sock).exists());
    assert!(pool.is_full());
}

#[test]
fn a_peer_writing_bad_descriptors_is_counted_not_followed() {
    let dir = TempDir::new("malformed");
    let pool = test_pool(255);
    let sock = dir.socket();
    {
        let mut server = open(&format!("memif:socket={sock}"), &pool);
        // A client made with the protocol module, which then breaks its ring.
        let socket = ControlSocket::connect(PathBuf::from(&sock).as_path()).unwrap();
        socket.set_timeout(Some(Duration::from_secs(5))).unwrap();
        let connected = handshake::connect(&socket, ClientConfig::default()).unwrap();
        wait_links(&server, 1);
        let ring = &connected.c2s[0].ring;
        let head = ring.head();
        let bad = [
            // Far outside the region.
            Descriptor {
                flags: 0,
                region: 0,
                length: 64,
                offset: u32::MAX - 8,
                metadata: 0,
            },
            // A region that does not exist.
            Descriptor {
                flags: 0,
                region: 9,
                length: 64,
                offset: 0,
                metadata: 0,
            },
        ];
        for (i, d) in bad.iter().enumerate() {
            ring.set_descriptor(head.wrapping_add(i as u16), *d);
        }
        ring.set_head(head.wrapping_add(bad.len() as u16));
        let mut got: Burst = Burst::new();
        assert_eq!(server.rx_queue(0).unwrap().rx_burst(&mut got), 0);
        assert_eq!(xstat(&server, "rx_bad_descriptor_errors"), 2);
        assert_eq!(server.stats().rx_errors, 2);

        // A head far past the tail: nothing moves.
        ring.set_head(head.wrapping_add(5000));
        assert_eq!(server.rx_queue(0).unwrap().rx_burst(&mut got), 0);
        assert_eq!(xstat(&server, "rx_bad_ring_index"), 1);

        // A buffer offered for the server to fill that lies outside the
        // region: the packet is taken, dropped and counted.
        let back = &connected.s2c[0].ring;
        let mut d = back.descriptor(0);
        d.offset = u32::MAX - 16;
        back.set_descriptor(0, d);
        back.set_head(1);
        let mut out: Burst = Burst::new();
        out.push(pool.alloc_from_slice(&frame(0)).unwrap()).unwrap();
        assert_eq!(server.tx_queue(0).unwrap().tx_burst(&mut out), 1);
        assert_eq!(xstat(&server, "tx_bad_descriptor_errors"), 1);
        let stats = server.stats();
        assert_eq!((stats.tx_packets, stats.tx_errors), (0, 1));
        drop(socket);
        wait_downs(&server, 1);
        drop(connected);
    }
    assert!(pool.is_full());
}

/// Whether eventfd `fd` was signalled; reading resets it.
fn signalled(fd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut value = 0u64;
    // SAFETY: `value` is 8 writable bytes; the eventfd is non-blocking.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut value).cast(), 8) };
    n == 8 && value != 0
}

#[test]
fn tx_signals_the_peer_only_when_its_ring_asks_for_interrupts() {
    let dir = TempDir::new("interrupts");
    let pool = test_pool(255);
    let sock = dir.socket();
    {
        let mut server = open(&format!("memif:socket={sock}"), &pool);
        let socket = ControlSocket::connect(PathBuf::from(&sock).as_path()).unwrap();
        socket.set_timeout(Some(Duration::from_secs(5))).unwrap();
        let connected = handshake::connect(&socket, ClientConfig::default()).unwrap();
        wait_links(&server, 1);
        let back = &connected.s2c[0];
        // The client offers every buffer of its ring for the server to fill.
        back.ring.set_head(back.ring.size());
        let send = |server: &mut Port| {
            let mut out: Burst = Burst::new();
            out.push(pool.alloc_from_slice(&frame(1)).unwrap()).unwrap();
            assert_eq!(server.tx_queue(0).unwrap().tx_burst(&mut out), 1);
        };

        // The client polls (its handshake masks the interrupt): no signal.
        assert_ne!(back.ring.flags() & crate::memif::RING_FLAG_MASK_INT, 0);
        send(&mut server);
        assert!(!signalled(&back.interrupt));

        // It asks for interrupts: each burst that produced signals once.
        back.ring.set_flags(0);
        send(&mut server);
        assert!(signalled(&back.interrupt));
        assert!(!signalled(&back.interrupt));
        drop(socket);
        wait_downs(&server, 1);
        drop(connected);
    }
    assert!(pool.is_full());
}

#[test]
fn queue_i_uses_ring_i() {
    let dir = TempDir::new("queues");
    let pool = test_pool(2047);
    let sock = dir.socket();
    let open2 = |spec: &str| {
        let config = PortConfig::new(Some(pool.clone())).queues(2, 2);
        let mut port = driver::open(spec, config).unwrap();
        port.start().unwrap();
        port
    };
    {
        let server = open2(&format!("memif:socket={sock}"));
        let client = open2(&format!("memif:socket={sock},role=client,rings=2"));
        wait_links(&server, 1);
        wait_links(&client, 1);
        let (mut server, mut client) = (server, client);
        for q in 0..2 {
            let mut out: Burst = Burst::new();
            out.push(pool.alloc_from_slice(&frame(q as u32)).unwrap())
                .unwrap();
            assert_eq!(client.tx_queue(q).unwrap().tx_burst(&mut out), 1);
        }
        for q in 0..2 {
            let mut got: Burst = Burst::new();
            assert_eq!(server.rx_queue(q).unwrap().rx_burst(&mut got), 1);
            assert_eq!(got.as_slice()[0].data(), &frame(q as u32)[..]);
        }
        assert_eq!(server.stats().rx_queues[1].packets, 1);
    }
    assert!(pool.is_full());
}

#[test]
fn a_wrong_id_or_secret_is_refused_and_counted() {
    let dir = TempDir::new("refused");
    let pool = test_pool(255);
    let sock = dir.socket();
    {
        let server = open(&format!("memif:socket={sock},id=1,secret=right"), &pool);
        for spec in [
            format!("memif:socket={sock},role=client,id=2,secret=right"),
            format!("memif:socket={sock},role=client,id=1,secret=wrong"),
        ] {
            let before = xstat(&server, "link_refusals");
            let client = open(&spec, &pool);
            let deadline = Instant::now() + Duration::from_secs(10);
            while xstat(&client, "link_refusals") == 0 || xstat(&server, "link_refusals") == before
            {
                assert!(Instant::now() < deadline, "{spec}: no refusal counted");
                std::thread::sleep(Duration::from_millis(2));
            }
            drop(client);
        }
        assert_eq!(xstat(&server, "link_ups"), 0);
    }
    assert!(pool.is_full());
}

#[test]
fn packets_wait_in_the_ring_while_the_pool_is_empty() {
    let dir = TempDir::new("nombuf");
    let (rx_pool, tx_pool) = (test_pool(63), test_pool(255));
    let sock = dir.socket();
    {
        let mut server = open(&format!("memif:socket={sock}"), &rx_pool);
        let mut client = open(&format!("memif:socket={sock},role=client"), &tx_pool);
        wait_links(&server, 1);
        wait_links(&client, 1);
        let mut held = Vec::new();
        while let Some(m) = rx_pool.alloc() {
            held.push(m);
        }
        let mut out: Burst = Burst::new();
        for seq in 0..4 {
            out.push(tx_pool.alloc_from_slice(&frame(seq)).unwrap())
                .unwrap();
        }
        assert_eq!(client.tx_queue(0).unwrap().tx_burst(&mut out), 4);
        let mut got: Burst = Burst::new();
        assert_eq!(server.rx_queue(0).unwrap().rx_burst(&mut got), 0);
        assert!(server.stats().rx_nombuf >= 1);
        drop(held);
        assert_eq!(server.rx_queue(0).unwrap().rx_burst(&mut got), 4);
        for (seq, m) in got.as_slice().iter().enumerate() {
            assert_eq!(m.data(), &frame(seq as u32)[..]);
        }
        assert_eq!(server.stats().rx_missed, 0, "nothing was lost");
    }
    assert!(rx_pool.is_full());
    assert!(tx_pool.is_full());
}

#[test]
fn chained_mbufs_cross_as_descriptor_chains_and_back() {
    let dir = TempDir::new("chains");
    let pool = test_pool(255);
    let sock = dir.socket();
    {
        let (mut server, mut client) = linked_pair(&sock, "buffer_size=1024", &pool);
        let (big, head) = big_chain(&pool);
        let mut out: Burst = Burst::new();
        out.push(head).unwrap();
        assert_eq!(client.tx_queue(0).unwrap().tx_burst(&mut out), 1);
        let mut got: Burst = Burst::new();
        assert_eq!(server.rx_queue(0).unwrap().rx_burst(&mut got), 1);
        let m = &got.as_slice()[0];
        assert!(m.nb_segs() > 1, "5000 bytes do not fit one mbuf");
        let mut bytes = Vec::new();
        m.segments().for_each(|s| bytes.extend_from_slice(s));
        assert_eq!(bytes, big);
        assert_eq!(m.pkt_len(), 5000);
    }
    assert!(pool.is_full());
}

#[test]
fn a_packet_the_ring_drops_counts_as_an_error_and_not_as_sent_bytes() {
    let dir = TempDir::new("txdrop");
    let pool = test_pool(255);
    let sock = dir.socket();
    {
        // 64-byte buffers: 5000 bytes need 79 descriptors, more than a
        // chain may have, so the ring drops that packet.
        let (mut server, mut client) = linked_pair(&sock, "buffer_size=64", &pool);
        let (_, head) = big_chain(&pool);
        let mut out: Burst = Burst::new();
        out.push(pool.alloc_from_slice(&frame(0)[..60]).unwrap())
            .unwrap();
        out.push(head).unwrap();
        out.push(pool.alloc_from_slice(&frame(1)[..70]).unwrap())
            .unwrap();
        assert_eq!(client.tx_queue(0).unwrap().tx_burst(&mut out), 3);
        let s = client.stats();
        assert_eq!((s.tx_packets, s.tx_bytes, s.tx_errors), (2, 130, 1));
        let mut got: Burst = Burst::new();
        assert_eq!(server.rx_queue(0).unwrap().rx_burst(&mut got), 2);
        let lens: Vec<u32> = got.as_slice().iter().map(|m| m.pkt_len()).collect();
        assert_eq!(lens, [60, 70]);
    }
    assert!(pool.is_full());
}

#[test]
fn a_socket_in_a_missing_directory_is_an_error_for_a_server_and_awaited_by_a_client() {
    let dir = TempDir::new("nodir");
    let pool = test_pool(1023);
    let absent = dir.0.join("absent");
    let sock = absent.join("memif.sock").display().to_string();
    {
        let mut server = driver::open(
            &format!("memif:socket={sock}"),
            PortConfig::new(Some(pool.clone())),
        )
        .unwrap();
        let err = server.start().unwrap_err().to_string();
        assert!(
            err.contains("cannot listen") && err.contains("No such file or directory"),
            "{err}"
        );
        // A client waits for its server, connecting again until one is there.
        let mut client = open(&format!("memif:socket={sock},role=client"), &pool);
        assert_eq!(xstat(&client, "link_ups"), 0);
        std::fs::create_dir(&absent).unwrap();
        server.start().unwrap();
        wait_links(&client, 1);
        wait_links(&server, 1);
        exchange(&mut client, &mut server, &pool, 10);
    }
    assert!(pool.is_full());
}

/// A sealed memfd of `size` bytes, as a memif region's.
fn region_fd(size: u64) -> std::os::fd::OwnedFd {
    crate::memif::region::Region::create("sluice-memif-test", size)
        .unwrap()
        .fd()
        .try_clone_to_owned()
        .unwrap()
}

/// A client made by hand: after the server's HELLO it sends `messages`
/// in turn (each with its descriptor), each answered with ACK, until the
/// server answers with DISCONNECT; returns that DISCONNECT's reason.
fn server_refusal(sock: &str, messages: Vec<(Message, Option<std::os::fd::OwnedFd>)>) -> String {
    use std::os::fd::AsFd;
    let socket = ControlSocket::connect(PathBuf::from(sock).as_path()).unwrap();
    socket.set_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(matches!(socket.recv().unwrap().message, Message::Hello(_)));
    for (message, fd) in messages {
        socket
            .send(&message, fd.as_ref().map(|f| f.as_fd()))
            .unwrap();
        match socket.recv().unwrap().message {
            Message::Ack => {}
            Message::Disconnect(d) => return d.reason,
            other => panic!("{other:?}"),
        }
    }
    panic!("the server accepted every message")
}

fn init(version: u16) -> Message {
    Message::Init(Init {
        version,
        id: 0,
        mode: Mode::Ethernet,
        secret: Vec::new(),
        name: "test".into(),
    })
}

#[test]
fn a_bad_handshake_is_refused_with_a_reason_and_counted() {
    let dir = TempDir::new("badhello");
    let pool = test_pool(255);
    let sock = dir.socket();
    {
        let server = open(&format!("memif:socket={sock}"), &pool);
        // A version this side does not speak.
        let reason = server_refusal(&sock, vec![(init(0x0100), None)]);
        assert_eq!(reason, "Incompatible memif version");
        // A message of the wrong type: CONNECT before INIT.
        let reason = server_refusal(
            &sock,
            vec![(
                Message::Connect {
                    if_name: "x".into(),
                },
                None,
            )],
        );
        assert!(reason.starts_with("Unexpected message"), "{reason}");
        // A ring of 2^30 slots.
        let ring = |log2_ring_size| {
            Message::AddRing(AddRing {
                flags: crate::memif::ADD_RING_FLAG_C2S,
                index: 0,
                region: 0,
                offset: 0,
                log2_ring_size,
                private_hdr_size: 0,
            })
        };
        let reason = server_refusal(
            &sock,
            vec![
                (init(crate::memif::VERSION), None),
                (
                    Message::AddRegion(AddRegion {
                        index: 0,
                        size: 1 << 16,
                    }),
                    Some(region_fd(1 << 16)),
                ),
                (ring(30), Some(region_fd(4096))),
            ],
        );
        assert!(reason.contains("30"), "{reason}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while xstat(&server, "link_refusals") < 3 {
            assert!(Instant::now() < deadline, "refusals not counted");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(xstat(&server, "link_ups"), 0);
    }
    assert!(pool.is_full());
}

#[test]
fn a_client_refuses_a_server_of_another_version() {
    let dir = TempDir::new("oldserver");
    let pool = test_pool(255);
    let sock = dir.socket();
    let listener = ControlListener::bind(PathBuf::from(&sock).as_path()).unwrap();
    listener.set_timeout(Some(Duration::from_secs(10))).unwrap();
    {
        let client = open(&format!("memif:socket={sock},role=client"), &pool);
        let socket = listener.accept().unwrap();
        socket.set_timeout(Some(Duration::from_secs(10))).unwrap();
        socket
            .send(
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
        match socket.recv().unwrap().message {
            Message::Disconnect(d) => assert_eq!(d.reason, "Incompatible memif version"),
            other => panic!("{other:?}"),
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while xstat(&client, "link_refusals") == 0 {
            assert!(Instant::now() < deadline, "refusal not counted");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(xstat(&client, "link_ups"), 0);
    }
    assert!(pool.is_full());
}

#[test]
fn a_chain_that_never_ends_is_counted_not_followed() {
    let dir = TempDir::new("loop");
    let pool = test_pool(255);
    let sock = dir.socket();
    {
        let mut server = open(&format!("memif:socket={sock}"), &pool);
        let socket = ControlSocket::connect(PathBuf::from(&sock).as_path()).unwrap();
        socket.set_timeout(Some(Duration::from_secs(5))).unwrap();
        let connected = handshake::connect(&socket, ClientConfig::default()).unwrap();
        wait_links(&server, 1);
        let ring = &connected.c2s[0].ring;
        let head = ring.head();
        // Every slot of the ring says another follows: a chain with no end.
        for i in 0..ring.size() {
            let mut d = ring.descriptor(head.wrapping_add(i));
            d.flags = crate::memif::DESC_FLAG_NEXT;
            d.length = 64;
            ring.set_descriptor(head.wrapping_add(i), d);
        }
        ring.set_head(head.wrapping_add(ring.size()));
        let mut got: Burst = Burst::new();
        assert_eq!(server.rx_queue(0).unwrap().rx_burst(&mut got), 0);
        let dropped = xstat(&server, "rx_chain_too_long_errors")
            + xstat(&server, "rx_incomplete_chain_errors");
        assert!(dropped >= 1, "{:?}", server.xstats());
        assert_eq!(server.stats().rx_errors, dropped);
        assert_eq!(server.stats().rx_packets, 0);
        drop(socket);
        wait_downs(&server, 1);
        drop(connected);
    }
    assert!(pool.is_full());
}

#[test]
fn a_client_vanishing_mid_traffic_is_counted_and_the_next_one_served() {
    let dir = TempDir::new("vanish");
    let pool = test_pool(1023);
    let sock = dir.socket();
    {
        let mut server = open(&format!("memif:socket={sock}"), &pool);
        let mut received = 0u64;
        for round in 1..=2u64 {
            let socket = ControlSocket::connect(PathBuf::from(&sock).as_path()).unwrap();
            socket.set_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut connected = handshake::connect(&socket, ClientConfig::default()).unwrap();
            wait_links(&server, round);
            let mut producer = Producer::new(
                connected.c2s.remove(0).ring,
                Role::Client,
                crate::memif::DEFAULT_BUFFER_SIZE,
            );
            let frames: Vec<Vec<u8>> = (0..16).map(frame).collect();
            let slices: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
            let counters = server.counters();
            let seen = &AtomicU64::new(0);
            received += std::thread::scope(|s| {
                let (rx_queues, _) = server.queues_mut().unwrap();
                let rxq = &mut rx_queues[0];
                let counters = &counters;
                // Polls until the link is down (bounded), dropping what
                // comes.
                let poller = s.spawn(move || {
                    let mut burst: Burst = Burst::new();
                    let mut received = 0;
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while counters.xstats.get("link_downs") < Some(round) {
                        assert!(Instant::now() < deadline, "the link stayed up");
                        received += rxq.rx_burst(&mut burst) as u64;
                        seen.store(received, Ordering::Relaxed);
                        burst.clear();
                    }
                    received
                });
                // Traffic flows (the first burst seen arriving), then the
                // client is gone without a word, packets perhaps still in
                // its ring.
                producer.send_burst(&slices);
                let deadline = Instant::now() + Duration::from_secs(10);
                while seen.load(Ordering::Relaxed) == 0 {
                    assert!(Instant::now() < deadline, "no frame arrived");
                    std::thread::yield_now();
                }
                for _ in 1..20 {
                    producer.send_burst(&slices);
                }
                drop(producer);
                drop(socket);
                drop(connected);
                poller.join().unwrap()
            });
            wait_downs(&server, round);
            let mut out: Burst = Burst::new();
            out.push(pool.alloc_from_slice(&frame(0)).unwrap()).unwrap();
            assert_eq!(server.tx_queue(0).unwrap().tx_burst(&mut out), 1);
            assert_eq!(xstat(&server, "tx_not_ready_errors"), round);
            let mut got: Burst = Burst::new();
            assert_eq!(server.rx_queue(0).unwrap().rx_burst(&mut got), 0);
        }
        assert_eq!(server.stats().rx_packets, received);
        assert!(received > 0 && received <= 2 * 20 * 16, "{received}");
    }
    assert!(pool.is_full());
}
