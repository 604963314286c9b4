//! The afpacket driver: bad input (exact messages), and as root, real
//! frames across a veth pair whose other end is in a namespace of the
//! test's own — counted, compared byte for byte, and every buffer home at
//! the end.

use std::time::{Duration, Instant};

use sluice_netns::{Netns, RawSocket, Veth};

use crate::driver::open;
use crate::mbuf::{Burst, Mbuf};
use crate::port::{Offloads, Port, PortConfig};
use crate::test_support::frames::{
    assert_sent_intact, is_test_frame, receive_test_frames, send_all, seq_of, test_frame,
    test_frames,
};
use crate::test_support::{assert_pool_full, test_pool};

fn err(spec: &str, config: PortConfig) -> String {
    open(spec, config).unwrap_err().to_string()
}

#[test]
fn bad_specs_and_configs_are_clear_errors() {
    let pool = test_pool(255);
    let cfg = || PortConfig::new(Some(pool.clone()));
    for (spec, want) in [
        (
            "afpacket",
            "port spec 'afpacket': driver 'afpacket' needs key 'iface'",
        ),
        (
            "afpacket:iface=sluicenosuch0",
            "port spec 'afpacket:iface=sluicenosuch0': no network interface 'sluicenosuch0' \
             (in this network namespace)",
        ),
        (
            "afpacket:iface=a234567890123456",
            "port spec 'afpacket:iface=a234567890123456': interface name 'a234567890123456' \
             must be 1 to 15 bytes",
        ),
        (
            "afpacket:iface=lo,block_size=5000",
            "port spec 'afpacket:iface=lo,block_size=5000': key 'block_size' = '5000' is not a \
             power of two in 4096..=4194304",
        ),
        (
            "afpacket:iface=lo,fanout=rr",
            "port spec 'afpacket:iface=lo,fanout=rr': key 'fanout' = 'rr' is not one of hash, \
             lb, cpu",
        ),
    ] {
        assert_eq!(err(spec, cfg()), want, "{spec}");
    }
    assert_eq!(
        err("afpacket:iface=lo", cfg().queues(17, 1)),
        "port 'afpacket:iface=lo': 17 Rx queues asked, driver afpacket has at most 16"
    );
    assert_eq!(
        err("afpacket:iface=lo", cfg().queues(1, 17)),
        "port 'afpacket:iface=lo': 17 Tx queues asked, driver afpacket has at most 16"
    );
    let mut big = cfg();
    big.mtu = 4000;
    assert_eq!(
        err("afpacket:iface=lo", big.clone()),
        "afpacket: lo: MTU 4000 makes frames of up to 4018 bytes, more than the data room of \
         Rx queue 0's pool (2048)"
    );
    big.mtu = 4100;
    assert_eq!(
        err("afpacket:iface=lo,block_size=4096", big),
        "afpacket: lo: MTU 4100 needs ring frames of 8192 bytes, more than block_size 4096"
    );
    let mut tso = cfg();
    tso.tx_offloads |= Offloads::TSO;
    assert_eq!(
        err("afpacket:iface=lo", tso),
        "port 'afpacket:iface=lo': driver afpacket has no Tx offload tso"
    );
    assert_pool_full(&pool);
}

/// A namespace with one end of a veth pair; the other end (root side) is
/// where the port goes.
struct Wire {
    ns: Netns,
    veth: Veth,
}

fn wire(tag: &str) -> Wire {
    let ns = Netns::new(tag).unwrap();
    let veth = Veth::into_ns(&ns).unwrap();
    Wire { ns, veth }
}

impl Wire {
    /// A started afpacket port on the veth's end here, `keys` (each with
    /// its leading comma) added to its spec.
    fn port(&self, keys: &str, config: PortConfig) -> Port {
        let spec = format!("afpacket:iface={}{keys}", self.veth.a());
        let mut port = open(&spec, config).unwrap();
        port.start().unwrap();
        port
    }

    /// A packet socket on the veth's end in the namespace.
    fn peer(&self) -> RawSocket {
        RawSocket::open(&self.ns, self.veth.b()).unwrap()
    }

    /// The MAC address of the veth's end in the namespace: the destination
    /// of frames the port sends to the peer.
    fn peer_mac(&self) -> [u8; 6] {
        self.ns.mac(self.veth.b()).unwrap().0
    }
}

#[test]
fn frames_from_the_peer_arrive_intact_in_mbufs_vlan_tags_included() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let wire = wire("afrx");
    let pool = test_pool(1023);
    let cfg = PortConfig::new(Some(pool.clone())).nb_rxd(4096);
    let mut port = wire.port("", cfg);
    let mac = port.mac().0;
    let peer = wire.peer();
    // 300 frames of 60 to 1514 bytes; every tenth carries a VLAN tag, which
    // the kernel strips before a packet socket sees it and the driver puts
    // back.
    let sent: Vec<Vec<u8>> = (0..300u32)
        .map(|i| {
            let f = test_frame(mac, 1, i, 60 + (i as usize * 97) % 1455);
            if i % 10 != 0 {
                return f;
            }
            let mut tagged = f[..12].to_vec();
            tagged.extend([0x81, 0x00, 0x20, 0x07]);
            tagged.extend(&f[12..]);
            tagged
        })
        .collect();
    let is_ours = |f: &[u8]| is_test_frame(f) || (f.len() > 22 && f[16..18] == [0x88, 0xb5]);
    let mut got = Vec::new();
    // The peer sends while the port polls: a block the kernel retires
    // (every millisecond, however few packets it holds) is read soon, so a
    // slow sender on a loaded machine cannot use up the ring.
    std::thread::scope(|sc| {
        sc.spawn(|| sent.iter().for_each(|f| peer.send(f).unwrap()));
        let mut burst: Burst<32> = Burst::new();
        let start = Instant::now();
        while got.len() < 300 && start.elapsed() < Duration::from_secs(60) {
            port.rx_queue(0).unwrap().rx_burst(&mut burst);
            for m in burst.iter() {
                assert_eq!(m.port(), 0);
                let d = m.to_vec();
                if is_ours(&d) {
                    got.push(d);
                }
            }
            burst.clear();
            std::thread::sleep(Duration::from_micros(100));
        }
    });
    assert_eq!(got.len(), 300);
    assert_eq!(got, sent, "every frame, in order, byte for byte");
    let stats = port.stats();
    assert!(stats.rx_packets >= 300, "{stats:?}");
    let bytes: u64 = sent.iter().map(|f| f.len() as u64).sum();
    assert!(stats.rx_bytes >= bytes, "{stats:?}");
    assert_eq!(stats.rx_errors, 0);
    port.stop();
    let xstats = port.xstats();
    let get = |n: &str| {
        xstats
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| *v)
            .unwrap()
    };
    assert!(get("rx_kernel_packets") >= 300, "{xstats:?}");
    assert_eq!(get("rx_kernel_drops"), 0, "{xstats:?}");
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn frames_sent_arrive_intact_at_the_peer() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let wire = wire("aftx");
    let pool = test_pool(1023);
    let mut port = wire.port("", PortConfig::new(Some(pool.clone())).nb_txd(256));
    let peer = wire.peer();
    let dst = wire.peer_mac();
    // 600 frames, more than the 256-frame ring: the queue pushes back and
    // the rest is sent again, nothing is lost.
    let want = test_frames(dst, 1, 0, 600, 53);
    send_all(&mut port, &pool, &want);
    // Every mbuf was freed once its bytes were in the ring.
    assert_pool_full(&pool);
    let got = peer
        .recv_frames(600, Duration::from_secs(10), is_test_frame)
        .unwrap();
    assert_sent_intact(&port, &want, &got);
    // A packet too long for a ring frame is counted and freed.
    let mut long: Burst<4> = Burst::new();
    let mut m: Mbuf = pool.alloc().unwrap();
    m.append(2040).unwrap().fill(0);
    let mut m2 = pool.alloc().unwrap();
    m2.append(100).unwrap().fill(0);
    m.chain(m2).unwrap();
    long.push(m).unwrap();
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut long), 1);
    assert_eq!(port.stats().tx_errors, 1);
    assert_eq!(port.stats().tx_packets, 600);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn fanout_spreads_flows_over_queues_and_keeps_each_flow_on_one() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let wire = wire("affan");
    let pool = test_pool(4095);
    let mut cfg = PortConfig::new(Some(pool.clone()))
        .queues(4, 4)
        .nb_rxd(4096);
    cfg.rx_offloads |= Offloads::RSS_HASH;
    let mut port = wire.port("", cfg);
    let peer = wire.peer();
    let mac = port.mac().0;
    // IPv4/UDP frames of 64 flows (source ports), 8 each: the fanout hash
    // is the kernel's flow hash over addresses and ports. The sequence
    // number sits where `seq_of` reads it in our frames: in the UDP
    // payload here, so `is_test_frame` is replaced by a check on the ports.
    let udp = |flow: u16, seq: u32| {
        let mut f = mac.to_vec();
        f.extend([0x02, 0x5e, 0, 0, 0, 1, 0x08, 0x00]);
        let ip = [
            0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 10, 9, 0, 1, 10, 9, 0, 2,
        ];
        f.extend(ip);
        let ck = crate::net::checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&ck.to_be_bytes());
        f.extend((4000 + flow).to_be_bytes());
        f.extend(9999u16.to_be_bytes());
        f.extend(26u16.to_be_bytes());
        f.extend([0, 0]);
        f.extend(seq.to_be_bytes());
        f.resize(60, 0xab);
        f
    };
    let frames: Vec<Vec<u8>> = (0..8)
        .flat_map(|seq| (0..64).map(move |flow| (flow, seq)))
        .map(|(flow, seq)| udp(flow, seq))
        .collect();
    let mut by_flow = std::collections::HashMap::<u16, (usize, Vec<u32>, u32)>::new();
    let mut total = 0;
    let mut burst: Burst<32> = Burst::new();
    let start = Instant::now();
    // The peer sends while the queues are polled (see the test above).
    std::thread::scope(|sc| {
        sc.spawn(|| frames.iter().for_each(|f| peer.send(f).unwrap()));
        while total < 512 && start.elapsed() < Duration::from_secs(60) {
            for q in 0..4 {
                port.rx_queue(q).unwrap().rx_burst(&mut burst);
                for m in burst.iter() {
                    let d = m.data();
                    if d.len() < 46 || d[12..14] != [8, 0] || d[36..38] != 9999u16.to_be_bytes() {
                        continue;
                    }
                    total += 1;
                    assert_ne!(m.ol_flags() & crate::mbuf::ol::RX_RSS_HASH, 0);
                    let flow = u16::from_be_bytes([d[34], d[35]]) - 4000;
                    let seq = u32::from_be_bytes([d[42], d[43], d[44], d[45]]);
                    let e = by_flow.entry(flow).or_insert((q, Vec::new(), m.rss_hash()));
                    assert_eq!(e.0, q, "flow {flow} moved from queue {} to {q}", e.0);
                    assert_eq!(e.2, m.rss_hash(), "flow {flow}: one hash");
                    e.1.push(seq);
                }
                burst.clear();
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    });
    assert_eq!(total, 512);
    assert_eq!(by_flow.len(), 64);
    for (flow, (_, seqs, _)) in &by_flow {
        assert_eq!(*seqs, (0..8).collect::<Vec<_>>(), "flow {flow} in order");
    }
    let used: std::collections::HashSet<usize> = by_flow.values().map(|e| e.0).collect();
    assert!(used.len() > 1, "64 flows all hashed to one queue: {used:?}");
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn a_full_ring_counts_kernel_drops_as_xstats_and_rx_missed() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let wire = wire("afdrop");
    let pool = test_pool(1023);
    // 64 frames of 2048 bytes: two 64 KiB blocks, about 120 frames of 1000
    // bytes.
    let mut port = wire.port(
        ",block_size=65536",
        PortConfig::new(Some(pool.clone())).nb_rxd(64),
    );
    let peer = wire.peer();
    // A second packet socket on the port's interface: the kernel hands
    // each frame to every packet socket there in one pass, so once this
    // one has all 600, the port's ring has kept or dropped them (the last
    // perhaps a moment later, which changes none of the checks below).
    let observer = RawSocket::open(&Netns::root(), wire.veth.a()).unwrap();
    let mac = port.mac().0;
    // Nobody polls while 600 frames arrive: the ring fills, the kernel
    // drops the rest.
    for i in 0..600 {
        peer.send(&test_frame(mac, 1, i, 1000)).unwrap();
    }
    let seen = observer
        .recv_frames(600, Duration::from_secs(30), is_test_frame)
        .unwrap();
    assert_eq!(seen.len(), 600, "the interface did not receive every frame");
    let got = receive_test_frames(&mut port, 600, Duration::from_secs(2));
    port.stop();
    let stats = port.stats();
    let xstats = port.xstats();
    let get = |n: &str| {
        xstats
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| *v)
            .unwrap()
    };
    let drops = get("rx_kernel_drops");
    assert!(drops > 0, "{xstats:?}");
    assert!(got.len() < 600);
    assert_eq!(stats.rx_missed, drops);
    // Everything the socket saw was delivered or dropped.
    assert_eq!(
        get("rx_kernel_packets"),
        stats.rx_packets + stats.rx_errors + drops,
        "{stats:?} {xstats:?}"
    );
    // What was delivered is intact and in order.
    let seqs: Vec<u32> = got.iter().map(|(_, f)| seq_of(f)).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    for (_, f) in &got {
        assert_eq!(*f, test_frame(mac, 1, seq_of(f), 1000));
    }
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn a_port_stops_and_starts_again() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let wire = wire("afrestart");
    let pool = test_pool(1023);
    let spec = format!("afpacket:iface={}", wire.veth.a());
    let mut port = open(&spec, PortConfig::new(Some(pool.clone())).queues(2, 2)).unwrap();
    let peer = wire.peer();
    let mac = port.mac().0;
    for round in 0..3u32 {
        port.start().unwrap();
        for i in 0..20 {
            peer.send(&test_frame(mac, 1, round * 100 + i, 200))
                .unwrap();
        }
        let got = receive_test_frames(&mut port, 20, Duration::from_secs(10));
        assert_eq!(got.len(), 20, "round {round}");
        port.stop();
        assert_pool_full(&pool);
    }
    // Stopped: nothing is received, nothing is sent.
    assert!(port.rx_queue(0).is_err());
}

#[test]
fn a_fanout_group_is_forgotten_when_its_last_member_leaves() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    use super::rx::FanoutGroup;
    use super::sys;
    let wire = wire("affanout");
    let name = std::ffi::CString::new(wire.veth.a()).unwrap();
    // SAFETY: a NUL-terminated name that lives across the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(index, 0);
    let socket = || {
        let fd = sys::packet_socket().unwrap();
        sys::bind(&fd, index, libc::ETH_P_ALL as u16).unwrap();
        fd
    };
    let g = FanoutGroup::new(sys::PACKET_FANOUT_HASH);
    let (a, b) = (socket(), socket());
    g.join(&a).unwrap();
    g.join(&b).unwrap();
    fn id(fd: &std::os::fd::OwnedFd) -> u16 {
        sys::get_opt::<u32>(fd, sys::PACKET_FANOUT).unwrap() as u16
    }
    assert_eq!(
        id(&a),
        id(&b),
        "the second socket joined the first one's group"
    );
    assert_eq!(g.id(), Some(id(&a)));
    drop(a);
    g.leave();
    // One member left: a restarted queue joins it.
    let c = socket();
    g.join(&c).unwrap();
    assert_eq!(id(&c), id(&b));
    drop((b, c));
    g.leave();
    g.leave();
    // Empty: the kernel dropped the group, and the next start makes a new
    // one instead of joining by the old id (which may be someone else's by
    // then).
    assert_eq!(g.id(), None);
    let d = socket();
    g.join(&d).unwrap();
    assert_eq!(g.id(), Some(id(&d)));
}

#[test]
fn frames_over_the_mtu_are_dropped_as_oversize() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let wire = wire("afbig");
    let pool = test_pool(1023);
    let mut cfg = PortConfig::new(Some(pool.clone())).nb_rxd(4096);
    // The veth takes 1500-byte frames; the port only up to 1000 + 18.
    cfg.mtu = 1000;
    let mut port = wire.port("", cfg);
    let mac = port.mac().0;
    let peer = wire.peer();
    let lens = [60usize, 1018, 1019, 1400, 60];
    for (i, &len) in lens.iter().enumerate() {
        peer.send(&test_frame(mac, 1, i as u32, len)).unwrap();
    }
    let got = receive_test_frames(&mut port, 3, Duration::from_secs(5));
    let got: Vec<usize> = got.iter().map(|(_, f)| f.len()).collect();
    assert_eq!(got, [60, 1018, 60]);
    let x = port.counters();
    assert_eq!(x.xstats.get("rx_oversize_errors"), Some(2));
    assert_eq!(x.xstats.get("rx_runt_errors"), Some(0));
    assert_eq!(port.stats().rx_errors, 2);
    drop(port);
    assert_pool_full(&pool);
}

/// `frame` with an 802.1Q tag after the MAC addresses (4 bytes longer).
fn tagged(f: &[u8]) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend([0x81, 0x00, 0x20, 0x07]);
    t.extend(&f[12..]);
    t
}

#[test]
fn frames_the_interface_cannot_send_are_counted_tx_errors() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let wire = wire("afmtu");
    let pool = test_pool(1023);
    let mut port = wire.port("", PortConfig::new(Some(pool.clone())).nb_txd(256));
    let peer = wire.peer();
    let dst = wire.peer_mac();
    // (frame, whether the interface takes it): up to MTU + 14 bytes, or
    // MTU + 18 with a VLAN tag. Then the interface's MTU drops to 1000
    // while the port runs.
    let first: Vec<(Vec<u8>, bool)> = vec![
        (test_frame(dst, 1, 0, 60), true),
        (test_frame(dst, 1, 1, 1514), true),
        (test_frame(dst, 1, 2, 1515), false),
        (test_frame(dst, 1, 3, 1518), false),
        (tagged(&test_frame(dst, 1, 4, 1514)), true),
        (tagged(&test_frame(dst, 1, 5, 1515)), false),
        (test_frame(dst, 1, 6, 9000), false),
        (test_frame(dst, 1, 7, 60), true),
    ];
    let second: Vec<(Vec<u8>, bool)> = vec![
        (test_frame(dst, 1, 8, 1014), true),
        (test_frame(dst, 1, 9, 1015), false),
        (test_frame(dst, 1, 10, 1400), false),
        (test_frame(dst, 1, 11, 60), true),
    ];
    let send = |port: &mut Port, frames: &[(Vec<u8>, bool)]| {
        let mut burst: Burst<16> = Burst::new();
        for (f, _) in frames {
            // Longer than a segment: chained.
            let mut chunks = f.chunks(2000);
            let mut m = pool.alloc_from_slice(chunks.next().unwrap()).unwrap();
            for c in chunks {
                m.chain(pool.alloc_from_slice(c).unwrap()).unwrap();
            }
            burst.push(m).unwrap();
        }
        let n = port.tx_queue(0).unwrap().tx_burst(&mut burst);
        assert_eq!(n, frames.len(), "the ring has room for all");
    };
    send(&mut port, &first);
    Netns::root().set_mtu(wire.veth.a(), 1000).unwrap();
    send(&mut port, &second);
    assert_pool_full(&pool);
    let all: Vec<&(Vec<u8>, bool)> = first.iter().chain(&second).collect();
    let sent: Vec<u32> = all
        .iter()
        .filter(|(_, ok)| *ok)
        .map(|(f, _)| {
            if is_test_frame(f) {
                seq_of(f)
            } else {
                seq_of(&f[4..])
            }
        })
        .collect();
    let refused = all.len() - sent.len();
    // The peer's socket sees tagged frames with the tag taken out.
    let got = peer
        .recv_frames(sent.len(), Duration::from_secs(10), is_test_frame)
        .unwrap();
    let got: Vec<u32> = got.iter().map(|f| seq_of(f)).collect();
    assert_eq!(
        got, sent,
        "every frame the interface takes arrives, in order"
    );
    let st = port.stats();
    assert_eq!(st.tx_errors, refused as u64, "{st:?}");
    assert_eq!(st.tx_packets, sent.len() as u64, "{st:?}");
    let x = port.counters();
    assert_eq!(x.xstats.get("tx_oversize_errors"), Some(refused as u64));
    drop(port);
    // A port MTU larger than the interface's is refused at open, naming
    // both.
    let cfg = PortConfig::new(Some(pool.clone()));
    assert_eq!(cfg.mtu, 1500);
    assert_eq!(
        err(&format!("afpacket:iface={}", wire.veth.a()), cfg),
        format!(
            "afpacket: {a}: port MTU 1500 is more than the interface's MTU 1000: raise the \
             interface's (ip link set {a} mtu 1500) or lower the port's",
            a = wire.veth.a()
        )
    );
    assert_pool_full(&pool);
}

#[test]
fn frames_the_device_keeps_refusing_are_dropped_and_counted_not_wedging_the_ring() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let wire = wire("afwedge");
    let pool = test_pool(1023);
    let mut port = wire.port("", PortConfig::new(Some(pool.clone())).nb_txd(64));
    // The peer takes no frame over 1000 + 18 bytes: the veth drops a
    // longer one each time the kernel offers it, and the kernel puts it
    // back in the ring to be offered again.
    wire.ns.set_mtu(wire.veth.b(), 1000).unwrap();
    let peer = wire.peer();
    let dst = wire.peer_mac();
    let mut burst: Burst<32> = Burst::new();
    burst
        .push(pool.alloc_from_slice(&test_frame(dst, 1, 0, 1400)).unwrap())
        .unwrap();
    for i in 1..=20 {
        burst
            .push(pool.alloc_from_slice(&test_frame(dst, 1, i, 60)).unwrap())
            .unwrap();
    }
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 21);
    // Polled (empty bursts kick again), the refused frame is dropped and
    // counted, and those behind it go out.
    let x = port.counters();
    let start = Instant::now();
    while x.xstats.get("tx_kernel_drops") != Some(1) && start.elapsed() < Duration::from_secs(20) {
        port.tx_queue(0).unwrap().tx_burst(&mut burst);
        std::thread::sleep(Duration::from_millis(1));
    }
    let got = peer
        .recv_frames(20, Duration::from_secs(5), is_test_frame)
        .unwrap();
    let got: Vec<u32> = got.iter().map(|f| seq_of(f)).collect();
    assert_eq!(got, (1..=20).collect::<Vec<_>>());
    assert_eq!(x.xstats.get("tx_kernel_drops"), Some(1));
    assert_eq!(port.stats().tx_errors, 1);
    // The peer goes down: every frame is refused. What is still in the
    // ring at stop is never sent, and counted so, each frame once (whether
    // dropped as refused for too long before the stop or at it).
    wire.ns.ip(&["link", "set", wire.veth.b(), "down"]).unwrap();
    for i in 21..26 {
        burst
            .push(pool.alloc_from_slice(&test_frame(dst, 1, i, 60)).unwrap())
            .unwrap();
    }
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 5);
    port.stop();
    assert_eq!(port.stats().tx_errors, 1 + 5);
    assert_eq!(x.xstats.get("tx_kernel_drops"), Some(1 + 5));
    drop(port);
    assert_pool_full(&pool);
}
