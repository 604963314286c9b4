//! The tap driver: bad input (exact messages), and as root, real frames
//! between a port and a raw socket on the TAP device's kernel side, moved
//! into a namespace of the test's own — counted, compared byte for byte,
//! and every buffer home at the end.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sluice_netns::{Netns, RawSocket};

use crate::driver::open;
use crate::mbuf::{Burst, MbufPool};
use crate::port::{Port, PortConfig};
use crate::test_support::frames::{
    assert_sent_intact, is_test_frame, receive_test_frames, send_all, test_frame, test_frames,
};
use crate::test_support::{assert_pool_full, test_pool};

fn err(spec: &str, config: PortConfig) -> String {
    open(spec, config).unwrap_err().to_string()
}

/// A TAP name of this process, unused so far (at most 15 bytes).
fn tap_name() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "sltap{:x}t{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[test]
fn bad_specs_are_clear_errors() {
    let pool = test_pool(255);
    let cfg = || PortConfig::new(Some(pool.clone()));
    for (spec, want) in [
        ("tap", "port spec 'tap': driver 'tap' needs key 'iface'"),
        (
            "tap:iface=sluicenosuch0,attach=true",
            "port spec 'tap:iface=sluicenosuch0,attach=true': no network interface \
             'sluicenosuch0' to attach to (in this network namespace)",
        ),
        (
            "tap:iface=lo",
            "port spec 'tap:iface=lo': interface 'lo' exists already (attach=true uses an existing \
             TAP device)",
        ),
        (
            "tap:iface=a/b",
            "port spec 'tap:iface=a/b': interface name 'a/b' may not be '.' or '..' or contain \
             '/', ':' or spaces",
        ),
        (
            "tap:iface=x,attach=maybe",
            "port spec 'tap:iface=x,attach=maybe': key 'attach' = 'maybe' is not a boolean \
             (1/0, true/false, yes/no, on/off)",
        ),
    ] {
        assert_eq!(err(spec, cfg()), want, "{spec}");
    }
    assert_pool_full(&pool);
}

#[test]
fn queue_counts_the_driver_cannot_do_are_clear_errors() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let pool = test_pool(255);
    let cfg = || PortConfig::new(Some(pool.clone()));
    // Each open creates the device before its queues are checked, and the
    // kernel unregisters it only as the failed open's last descriptor
    // closes, not always before the next open looks: a fresh name for each
    // attempt, so none finds the one before it still listed.
    let mut names = Vec::new();
    let mut fresh = || {
        let name = tap_name();
        names.push(name.clone());
        (format!("tap:iface={name}"), name)
    };
    let (spec, name) = fresh();
    assert_eq!(
        err(&spec, cfg().queues(2, 1)),
        format!(
            "tap: {name}: 2 Rx and 1 Tx queues asked; a TAP queue is one file descriptor for \
             both directions, so the counts must be equal"
        )
    );
    let (spec, _) = fresh();
    assert_eq!(
        err(&spec, cfg().queues(17, 17)),
        format!("port '{spec}': 17 Rx queues asked, driver tap has at most 16")
    );
    let (spec, name) = fresh();
    let mut big = cfg();
    big.mtu = 4000;
    assert_eq!(
        err(&spec, big),
        format!(
            "tap: {name}: MTU 4000 makes frames of up to 4018 bytes, more than the data room \
             of Rx queue 0's pool (2048)"
        )
    );
    // Each failed open closed its device again: the names are free.
    for name in &names {
        assert!(
            sluice_netns::wait_until(Duration::from_secs(10), || {
                crate::driver::netdev::index(name).is_none()
            }),
            "{name} still listed"
        );
    }
    // A single-queue device takes one queue only.
    let single = tap_name();
    Netns::root()
        .ip(&["tuntap", "add", "mode", "tap", "name", &single])
        .unwrap();
    let spec1 = format!("tap:iface={single},attach=true");
    let e = err(&spec1, cfg().queues(2, 2));
    let port = open(&spec1, cfg());
    let _ = Netns::root().ip(&["link", "del", &single]);
    assert_eq!(
        e,
        format!("port '{spec1}': 2 Rx queues asked, driver tap has at most 1")
    );
    assert!(port.is_ok(), "{:?}", port.err());
    assert_pool_full(&pool);
}

/// A started TAP port whose device was moved into a new namespace and set
/// up there.
fn tap_in_ns(tag: &str, pool: &MbufPool, queues: u16) -> (Port, Netns, String) {
    let name = tap_name();
    let cfg = PortConfig::new(Some(pool.clone())).queues(queues, queues);
    let mut port = open(&format!("tap:iface={name}"), cfg).unwrap();
    port.start().unwrap();
    let ns = Netns::new(tag).unwrap();
    Netns::root().move_link(&name, &ns).unwrap();
    (port, ns, name)
}

#[test]
fn frames_cross_a_tap_both_ways_intact() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let pool = test_pool(1023);
    let (mut port, ns, name) = tap_in_ns("taprx", &pool, 1);
    let peer = RawSocket::open(&ns, &name).unwrap();
    let kernel_mac = ns.mac(&name).unwrap().0;
    // Kernel side → port: 300 frames the raw socket sends out of the TAP.
    let sent = test_frames(port.mac().0, 2, 0, 300, 97);
    for f in &sent {
        peer.send(f).unwrap();
    }
    let got = receive_test_frames(&mut port, 300, Duration::from_secs(10));
    let got: Vec<Vec<u8>> = got.into_iter().map(|(_, f)| f).collect();
    assert_eq!(got.len(), 300);
    assert_eq!(got, sent, "every frame, in order, byte for byte");
    // Port → kernel side: 300 frames arrive at the raw socket.
    let want = test_frames(kernel_mac, 2, 1000, 300, 53);
    send_all(&mut port, &pool, &want);
    let back = peer
        .recv_frames(300, Duration::from_secs(10), is_test_frame)
        .unwrap();
    assert_sent_intact(&port, &want, &back);
    let stats = port.stats();
    assert!(stats.rx_packets >= 300);
    assert_eq!((stats.rx_errors, stats.tx_errors), (0, 0));
    // Stop and start: the device stays (its descriptors stay open).
    port.stop();
    assert_pool_full(&pool);
    port.start().unwrap();
    peer.send(&test_frame(port.mac().0, 2, 7, 100)).unwrap();
    assert_eq!(
        receive_test_frames(&mut port, 1, Duration::from_secs(10)).len(),
        1
    );
    drop(port);
    assert_pool_full(&pool);
    // The port made the device; with the port it is gone.
    assert!(sluice_netns::wait_until(Duration::from_secs(10), || {
        !ns.links().unwrap().contains(&name)
    }));
}

#[test]
fn a_multi_queue_tap_spreads_flows_and_keeps_each_on_one_queue() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let pool = test_pool(4095);
    let (mut port, ns, name) = tap_in_ns("tapmq", &pool, 4);
    let peer = RawSocket::open(&ns, &name).unwrap();
    let mac = port.mac().0;
    // IPv4/UDP frames of 64 flows (source ports), 8 each; the TAP picks a
    // queue by flow hash.
    let udp = |flow: u16, seq: u32| {
        let mut f = mac.to_vec();
        f.extend([0x02, 0x5e, 0, 0, 0, 2, 0x08, 0x00]);
        f.extend([
            0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 10, 9, 0, 1, 10, 9, 0, 2,
        ]);
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
    for seq in 0..8 {
        for flow in 0..64 {
            peer.send(&udp(flow, seq)).unwrap();
        }
    }
    let mut queue_of = std::collections::HashMap::<u16, usize>::new();
    let mut total = 0;
    let mut burst: Burst<32> = Burst::new();
    let mut last = Instant::now();
    while total < 512 && last.elapsed() < Duration::from_secs(10) {
        for q in 0..4 {
            if port.rx_queue(q).unwrap().rx_burst(&mut burst) != 0 {
                last = Instant::now();
            }
            for m in burst.iter() {
                let d = m.data();
                if d.len() < 46 || d[12..14] != [8, 0] || d[36..38] != 9999u16.to_be_bytes() {
                    continue;
                }
                total += 1;
                let flow = u16::from_be_bytes([d[34], d[35]]) - 4000;
                let first = *queue_of.entry(flow).or_insert(q);
                assert_eq!(first, q, "flow {flow} moved from queue {first} to {q}");
            }
            burst.clear();
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(total, 512);
    assert_eq!(queue_of.len(), 64);
    let used: std::collections::HashSet<usize> = queue_of.values().copied().collect();
    assert!(used.len() > 1, "64 flows all on one queue: {used:?}");
    // Every queue sends.
    for q in 0..4 {
        let mut b: Burst<1> = Burst::new();
        b.push(
            pool.alloc_from_slice(&test_frame(ns.mac(&name).unwrap().0, 2, q, 80))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(port.tx_queue(q as usize).unwrap().tx_burst(&mut b), 1);
    }
    let back = peer
        .recv_frames(4, Duration::from_secs(10), is_test_frame)
        .unwrap();
    assert_eq!(back.len(), 4);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn attach_uses_an_existing_device_and_leaves_it() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let pool = test_pool(1023);
    let name = tap_name();
    let root = Netns::root();
    root.ip(&["tuntap", "add", "mode", "tap", "multi_queue", "name", &name])
        .unwrap();
    let run = || {
        let spec = format!("tap:iface={name},attach=true");
        let cfg = PortConfig::new(Some(pool.clone())).queues(2, 2);
        let mut port = open(&spec, cfg).unwrap();
        port.start().unwrap();
        let peer = RawSocket::open(&root, &name).unwrap();
        for i in 0..10 {
            peer.send(&test_frame(port.mac().0, 2, i, 120)).unwrap();
        }
        let got = receive_test_frames(&mut port, 10, Duration::from_secs(10));
        drop(port);
        got.len()
    };
    let got = run();
    let still = root.links().unwrap().contains(&name);
    let _ = root.ip(&["link", "del", &name]);
    assert_eq!(got, 10);
    assert!(still, "an attached device outlives the port");
    assert_pool_full(&pool);
}

#[test]
fn frames_over_the_mtu_are_dropped_as_oversize() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let pool = test_pool(1023);
    let name = tap_name();
    let mut cfg = PortConfig::new(Some(pool.clone()));
    // The device takes 1500-byte frames; the port only up to 1000 + 18.
    cfg.mtu = 1000;
    let mut port = open(&format!("tap:iface={name}"), cfg).unwrap();
    port.start().unwrap();
    let ns = Netns::new("tapbig").unwrap();
    Netns::root().move_link(&name, &ns).unwrap();
    let peer = RawSocket::open(&ns, &name).unwrap();
    let lens = [60usize, 1018, 1019, 1400, 60];
    for (i, &len) in lens.iter().enumerate() {
        peer.send(&test_frame(port.mac().0, 2, i as u32, len))
            .unwrap();
    }
    let got = receive_test_frames(&mut port, 3, Duration::from_secs(10));
    let got: Vec<usize> = got.iter().map(|(_, f)| f.len()).collect();
    assert_eq!(got, [60, 1018, 60]);
    let xstats = &port.counters().xstats;
    assert_eq!(xstats.get("rx_oversize_errors"), Some(2));
    assert_eq!(xstats.get("rx_runt_errors"), Some(0));
    assert_eq!(port.stats().rx_errors, 2);
    drop(port);
    assert_pool_full(&pool);
}

/// A frame the device refuses (shorter than an Ethernet header: the write
/// fails) is freed and counted with its reason; the frames around it go.
#[test]
fn a_frame_the_device_refuses_is_a_counted_write_error() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let pool = test_pool(1023);
    let (mut port, ns, name) = tap_in_ns("tapwrite", &pool, 1);
    let peer = RawSocket::open(&ns, &name).unwrap();
    let kernel_mac = ns.mac(&name).unwrap().0;
    let good = test_frames(kernel_mac, 2, 0, 2, 60);
    let mut burst: Burst = Burst::new();
    burst
        .push(pool.alloc_from_slice(&good[0]).unwrap())
        .unwrap();
    burst
        .push(pool.alloc_from_slice(&[0xab; 10]).unwrap())
        .unwrap();
    burst
        .push(pool.alloc_from_slice(&good[1]).unwrap())
        .unwrap();
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 3);
    let back = peer
        .recv_frames(2, Duration::from_secs(10), is_test_frame)
        .unwrap();
    assert_eq!(back, good);
    let stats = port.stats();
    assert_eq!((stats.tx_packets, stats.tx_errors), (2, 1));
    assert_eq!(port.counters().xstats.get("tx_write_errors"), Some(1));
    drop(port);
    assert_pool_full(&pool);
}
