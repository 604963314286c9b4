use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Barrier};

use super::*;
use crate::net::{
    EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet, MacAddr, TcpSegment, UdpDatagram, checksum,
    ip_proto,
};
use crate::port::spec::{PortSpec, SpecArgs};

const KINDS: [(L3, L4); 4] = [
    (L3::Ipv4, L4::Udp),
    (L3::Ipv4, L4::Tcp),
    (L3::Ipv6, L4::Udp),
    (L3::Ipv6, L4::Tcp),
];

fn config(l3: L3, l4: L4, flows: u32, size: FrameSize) -> TesterConfig {
    TesterConfig {
        l3,
        l4,
        flows,
        size,
        ..TesterConfig::default()
    }
}

/// Up to `n` frames from `g`, at TSC 0.
fn frames(g: &mut Generator, n: usize) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 9000];
    let mut out = Vec::new();
    while out.len() < n {
        let Some(len) = g.fill(&mut buf, 0) else {
            break;
        };
        out.push(buf[..len].to_vec());
    }
    out
}

/// One tester, one stream over all flows: (tester, generator, checker).
fn setup(c: TesterConfig) -> (Arc<Tester>, Generator, Checker) {
    let t = Tester::new(c);
    let s = t.add_stream().unwrap();
    let flows = (0..t.config().flows).collect();
    let g = t.generator(s, flows);
    let ch = t.checker();
    (t, g, ch)
}

/// Parses `frame` with the `net` views and checks every checksum; returns
/// (src, dst, src port, dst port, proto, TTL or hop limit).
fn parse_valid(frame: &[u8]) -> (std::net::IpAddr, std::net::IpAddr, u16, u16, u8, u8) {
    let eth = EthernetFrame::new_checked(frame).unwrap();
    let (src, dst, proto, ttl, pseudo, l4): (std::net::IpAddr, std::net::IpAddr, _, _, _, &[u8]) =
        match eth.ethertype() {
            EtherType::IPV4 => {
                let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
                assert!(ip.verify_checksum(), "IPv4 header checksum");
                assert_eq!(ip.total_len() as usize + 14, frame.len());
                let l4 = &eth.payload()[20..ip.total_len() as usize];
                let p = checksum::pseudo_ipv4(ip.src(), ip.dst(), ip.protocol(), l4.len() as u16);
                (
                    ip.src().into(),
                    ip.dst().into(),
                    ip.protocol(),
                    ip.ttl(),
                    p,
                    l4,
                )
            }
            EtherType::IPV6 => {
                let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
                assert_eq!(ip.payload_len() as usize + 54, frame.len());
                let l4 = &eth.payload()[40..40 + ip.payload_len() as usize];
                let p =
                    checksum::pseudo_ipv6(ip.src(), ip.dst(), ip.next_header(), l4.len() as u32);
                (
                    ip.src().into(),
                    ip.dst().into(),
                    ip.next_header(),
                    ip.hop_limit(),
                    p,
                    l4,
                )
            }
            other => panic!("ethertype {other:?}"),
        };
    let (sp, dp) = match proto {
        ip_proto::UDP => {
            let u = UdpDatagram::new_checked(l4).unwrap();
            assert_ne!(u.checksum(), 0, "UDP checksum present");
            assert!(u.verify_checksum(pseudo), "UDP checksum");
            assert_eq!(u.len() as usize, l4.len());
            (u.src_port(), u.dst_port())
        }
        ip_proto::TCP => {
            let t = TcpSegment::new_checked(l4).unwrap();
            assert!(t.verify_checksum(pseudo), "TCP checksum");
            assert_eq!(t.header_len(), 20);
            (t.src_port(), t.dst_port())
        }
        p => panic!("protocol {p}"),
    };
    (src, dst, sp, dp, proto, ttl)
}

#[test]
fn all_four_kinds_make_frames_with_valid_checksums_and_their_flow_tuples() {
    for (l3, l4) in KINDS {
        for size in [FrameSize::Fixed(64), FrameSize::Fixed(333), FrameSize::Imix] {
            let (t, mut g, _) = setup(config(l3, l4, 5, size));
            let fs = frames(&mut g, 24);
            assert_eq!(fs.len(), 24);
            for (i, f) in fs.iter().enumerate() {
                let (src, dst, sp, dp, proto, ttl) = parse_valid(f);
                let want = t.flow_tuple(0, (i % 5) as u32);
                assert_eq!(
                    (src, dst, sp, dp, proto),
                    (want.src, want.dst, want.src_port, want.dst_port, want.proto)
                );
                assert_eq!(ttl, 64);
                let eth = EthernetFrame::new_checked(&f[..]).unwrap();
                assert_eq!((eth.src(), eth.dst()), (DEFAULT_SRC_MAC, DEFAULT_DST_MAC));
            }
        }
    }
}

#[test]
fn flow_tuples_are_distinct_and_documented() {
    let t = Tester::new(config(L3::Ipv4, L4::Udp, MAX_FLOWS, FrameSize::Fixed(64)));
    let a = t.flow_tuple(3, 0x1_0203);
    assert_eq!(a.src.to_string(), "10.3.2.3");
    assert_eq!(a.dst.to_string(), "198.18.0.1");
    assert_eq!((a.src_port, a.dst_port, a.proto), (1025, 9, ip_proto::UDP));
    let t6 = Tester::new(config(L3::Ipv6, L4::Tcp, 16, FrameSize::Fixed(64)));
    let b = t6.flow_tuple(7, 5);
    assert_eq!(b.src.to_string(), "2001:2:0:1:0:7:0:5");
    assert_eq!(b.dst.to_string(), "2001:2:0:2::1");
    assert_eq!(b.proto, ip_proto::TCP);
    let mut seen = HashSet::new();
    for f in (0..MAX_FLOWS).step_by(997) {
        assert!(seen.insert(t.flow_tuple(0, f)));
    }
}

#[test]
fn fixed_sizes_are_exact_and_minimums_are_raised() {
    for (l3, l4, size, want) in [
        (L3::Ipv4, L4::Udp, 60, 60),
        (L3::Ipv4, L4::Udp, 9000, 9000),
        (L3::Ipv6, L4::Tcp, 9000, 9000),
        (L3::Ipv4, L4::Tcp, 60, 70),
        (L3::Ipv6, L4::Udp, 60, 78),
        (L3::Ipv6, L4::Tcp, 64, 90),
    ] {
        let (t, mut g, mut ch) = setup(config(l3, l4, 2, FrameSize::Fixed(size)));
        assert_eq!(g.frame_len(), want);
        let fs = frames(&mut g, 3);
        for f in &fs {
            assert_eq!(f.len(), want);
            parse_valid(f);
            ch.check(f);
        }
        let r = t.report();
        assert_eq!((r.sent, r.received, r.bytes_sent), (3, 3, 3 * want as u64));
        assert!(r.is_clean(), "{r}");
    }
}

#[test]
fn imix_sends_64_570_1518_at_7_4_1_in_a_fixed_order() {
    let (t, mut g, mut ch) = setup(config(L3::Ipv4, L4::Udp, 16, FrameSize::Imix));
    let fs = frames(&mut g, 1200);
    let lens: Vec<usize> = fs.iter().map(Vec::len).collect();
    let order: Vec<usize> = IMIX_ORDER.iter().map(|&n| n as usize).collect();
    assert_eq!(lens[..12], order[..]);
    assert_eq!(lens[12..24], order[..]);
    let count = |n| lens.iter().filter(|&&l| l == n).count();
    assert_eq!((count(64), count(570), count(1518)), (700, 400, 100));
    for f in &fs {
        ch.check(f);
    }
    let r = t.report();
    let bytes = 100 * (7 * 64 + 4 * 570 + 1518);
    assert_eq!((r.sent, r.received), (1200, 1200));
    assert_eq!((r.bytes_sent, r.bytes_received), (bytes, bytes));
    assert!(r.is_clean(), "{r}");
}

#[test]
fn a_clean_round_trip_reports_exact_counts() {
    let t = Tester::new(TesterConfig {
        count: Some(100),
        flows: 8,
        ..TesterConfig::default()
    });
    let s0 = t.add_stream().unwrap();
    let s1 = t.add_stream().unwrap();
    assert_eq!((s0, s1, t.streams()), (0, 1, 2));
    let mut gens = [
        t.generator(s0, vec![0, 1, 2]),
        t.generator(s0, vec![3, 4, 5, 6, 7]),
        t.generator(s1, (0..8).collect()),
    ];
    let (mut c1, mut c2) = (t.checker(), t.checker());
    let mut buf = [0u8; 128];
    let mut n = 0;
    for (i, g) in gens.iter_mut().enumerate() {
        while let Some(len) = g.fill(&mut buf, 0) {
            if (n + i) % 2 == 0 {
                c1.check(&buf[..len]);
            } else {
                c2.check(&buf[..len]);
            }
            n += 1;
        }
        assert_eq!(g.ready(0), 0, "count reached");
    }
    let r = t.report();
    assert_eq!(
        r,
        TesterReport {
            sent: 200,
            received: 200,
            bytes_sent: 200 * 64,
            bytes_received: 200 * 64,
            ..TesterReport::default()
        }
    );
    assert!(r.is_clean());
    assert_eq!(
        r.to_string(),
        "sent 200 (12800 B), received 200 (12800 B), lost 0, reordered 0, duplicates 0, \
         corrupt 0, foreign 0, short buffers 0"
    );
}

#[test]
fn the_count_is_split_over_flows_and_generators() {
    let t = Tester::new(TesterConfig {
        count: Some(10),
        flows: 4,
        ..TesterConfig::default()
    });
    let s = t.add_stream().unwrap();
    let mut a = t.generator(s, vec![1, 0, 1]);
    let mut b = t.generator(s, vec![3, 2]);
    assert_eq!(a.flows(), &[0, 1]);
    // Flows 0 and 1 may send 3 each, 2 and 3 may send 2 each.
    assert_eq!((a.ready(0), b.ready(0)), (6, 4));
    assert_eq!(
        (frames(&mut a, 100).len(), frames(&mut b, 100).len()),
        (6, 4)
    );
    let empty = t.generator(s, vec![]);
    assert_eq!(empty.ready(0), 0);
    assert_eq!(t.report().sent, 10);
}

#[test]
fn a_generator_made_again_continues_the_sequence_numbers() {
    let (t, mut g, mut ch) = setup(config(L3::Ipv4, L4::Tcp, 3, FrameSize::Fixed(64)));
    for f in frames(&mut g, 5) {
        ch.check(&f);
    }
    let mut again = t.generator(0, vec![0, 1, 2]);
    drop(g);
    for f in frames(&mut again, 7) {
        ch.check(&f);
    }
    let r = t.report();
    assert_eq!((r.sent, r.received), (12, 12));
    assert!(r.is_clean(), "{r}");
}

/// Checks that flipping any bit from the EtherType to the end of `frame`
/// makes it corrupt, except bits of `tolerated` bytes.
fn every_flip_is_corrupt(t: &Tester, ch: &mut Checker, frame: &[u8], tolerated: &[usize]) {
    let before = t.report();
    let mut flips = 0;
    for byte in 12..frame.len() {
        if tolerated.contains(&byte) {
            continue;
        }
        for bit in 0..8 {
            let mut f = frame.to_vec();
            f[byte] ^= 1 << bit;
            ch.check(&f);
            flips += 1;
            assert_eq!(
                t.report().corrupt,
                before.corrupt + flips,
                "flip of byte {byte} bit {bit} not caught"
            );
        }
    }
    assert_eq!(t.report().received, before.received);
}

#[test]
fn any_flipped_bit_in_headers_stamp_or_payload_is_corrupt() {
    for (l3, l4) in KINDS {
        let (t, mut g, mut ch) = setup(config(l3, l4, 4, FrameSize::Imix));
        // 64 (or the minimum), then 570 bytes.
        let fs = frames(&mut g, 2);
        let tolerated: &[usize] = match l3 {
            L3::Ipv4 => &[],
            L3::Ipv6 => &[14 + 7], // hop limit
        };
        for f in &fs {
            every_flip_is_corrupt(&t, &mut ch, f, tolerated);
        }
        // The untouched frames are still fine.
        for f in &fs {
            ch.check(f);
        }
        let r = t.report();
        assert_eq!((r.received, r.lost, r.duplicates, r.foreign), (2, 0, 0, 0));
    }
}

#[test]
fn truncated_extended_and_foreign_frames_are_told_apart() {
    let (t, mut g, mut ch) = setup(config(L3::Ipv4, L4::Udp, 4, FrameSize::Fixed(100)));
    let f = frames(&mut g, 1).remove(0);
    ch.check(&f[..99]); // truncated: lengths disagree
    let mut longer = f.clone();
    longer.push(0);
    ch.check(&longer);
    let mut magic3 = f.clone();
    magic3[42] ^= 0b111; // three bits off the magic: not a tester frame
    ch.check(&magic3);
    ch.check(&f[..50]); // too short for a stamp
    ch.check(&[0u8; 60]);
    ch.check(&[]);
    let r = t.report();
    assert_eq!((r.corrupt, r.foreign, r.received), (2, 4, 0));
    assert_eq!(r.lost, 1);
    assert!(!r.is_clean());
}

#[test]
fn a_dropped_frame_is_lost_one() {
    let (t, mut g, mut ch) = setup(TesterConfig::default());
    let fs = frames(&mut g, 50);
    for (i, f) in fs.iter().enumerate() {
        if i != 17 {
            ch.check(f);
        }
    }
    let r = t.report();
    assert_eq!((r.sent, r.received, r.lost), (50, 49, 1));
    assert_eq!((r.reordered, r.duplicates, r.corrupt), (0, 0, 0));
    assert!(!r.is_clean());
}

#[test]
fn swapped_frames_are_reordered() {
    // One flow, so the swap is within it.
    let (t, mut g, mut ch) = setup(config(L3::Ipv6, L4::Udp, 1, FrameSize::Fixed(64)));
    let mut fs = frames(&mut g, 10);
    fs.swap(3, 4);
    for f in &fs {
        ch.check(f);
    }
    let r = t.report();
    assert_eq!(
        (r.received, r.lost, r.reordered, r.duplicates),
        (10, 0, 1, 0)
    );
    assert!(!r.is_clean());
}

#[test]
fn a_repeated_frame_is_a_duplicate() {
    let (t, mut g, mut ch) = setup(config(L3::Ipv4, L4::Tcp, 2, FrameSize::Fixed(64)));
    let fs = frames(&mut g, 10);
    for f in &fs {
        ch.check(f);
    }
    ch.check(&fs[9]);
    ch.check(&fs[0]);
    let r = t.report();
    assert_eq!(
        (r.received, r.lost, r.reordered, r.duplicates),
        (10, 0, 0, 2)
    );
}

#[test]
fn duplicates_are_exact_within_64_sequence_numbers() {
    let (t, mut g, mut ch) = setup(config(L3::Ipv4, L4::Udp, 1, FrameSize::Fixed(64)));
    let fs = frames(&mut g, 300);
    for f in &fs {
        ch.check(f);
    }
    for f in &fs[299 - 64..] {
        ch.check(f);
    }
    let r = t.report();
    assert_eq!((r.received, r.duplicates, r.reordered), (300, 65, 0));
    // Far older than the window: counted as new and late.
    ch.check(&fs[0]);
    assert_eq!(t.report().reordered, 1);
}

#[test]
fn ttl_decrement_with_checksum_update_is_ok_without_is_corrupt() {
    for (l3, l4) in KINDS {
        let (t, mut g, mut ch) = setup(config(l3, l4, 3, FrameSize::Fixed(128)));
        let mut fs = frames(&mut g, 3);
        for f in &mut fs[..2] {
            match l3 {
                L3::Ipv4 => {
                    let mut ip = Ipv4Packet::new_checked(&mut f[14..]).unwrap();
                    ip.decrement_ttl().unwrap();
                    ip.decrement_ttl().unwrap();
                }
                L3::Ipv6 => {
                    let mut ip = Ipv6Packet::new_checked(&mut f[14..]).unwrap();
                    ip.decrement_hop_limit().unwrap();
                }
            }
        }
        // TTL changed without the checksum (IPv6 has none: still fine).
        fs[2][14 + if l3 == L3::Ipv4 { 8 } else { 7 }] -= 1;
        for f in &fs {
            ch.check(f);
        }
        let r = t.report();
        match l3 {
            L3::Ipv4 => assert_eq!((r.received, r.corrupt), (2, 1)),
            L3::Ipv6 => assert_eq!((r.received, r.corrupt), (3, 0)),
        }
    }
}

#[test]
fn mac_rewrites_are_ok() {
    let (t, mut g, mut ch) = setup(config(L3::Ipv4, L4::Udp, 3, FrameSize::Fixed(64)));
    let mut fs = frames(&mut g, 3);
    EthernetFrame::new_checked(&mut fs[0][..])
        .unwrap()
        .swap_macs();
    let mut e = EthernetFrame::new_checked(&mut fs[1][..]).unwrap();
    e.set_src(MacAddr([0x0a, 1, 2, 3, 4, 5]));
    e.set_dst(MacAddr::BROADCAST);
    for f in &fs {
        ch.check(f);
    }
    let r = t.report();
    assert_eq!((r.received, r.corrupt), (3, 0));
    assert!(r.is_clean());
}

#[test]
fn rate_limit_lets_through_exactly_what_the_tsc_advance_allows() {
    let hz = crate::tsc::tsc_hz();
    let t = Tester::new(TesterConfig {
        rate_pps: Some(2000.0),
        flows: 4,
        ..TesterConfig::default()
    });
    let s = t.add_stream().unwrap();
    // Half the flows: half the rate, 1000 frames/s.
    let mut g = t.generator(s, vec![0, 1]);
    let mut buf = [0u8; 64];
    let start = 5_000_000u64;
    assert_eq!(g.ready(start), 1);
    let step = hz / 997;
    let mut sent = 0u64;
    let mut now = start;
    while now <= start + hz / 2 {
        let ready = g.ready(now);
        let mut n = 0;
        while g.fill(&mut buf, now).is_some() {
            n += 1;
        }
        assert_eq!(n, ready, "ready() at {now}");
        sent += n;
        now += step;
    }
    let last = u128::from(now - step - start);
    let want = 1 + (last * 1000 / u128::from(hz)) as u64;
    assert_eq!(sent, want);
    assert!((500..=501).contains(&sent), "{sent}");
    // After a long pause, at most 32 at once.
    now += 10 * hz;
    assert_eq!(g.ready(now), 32);
    assert_eq!(frames_at(&mut g, now), 32);
    assert_eq!(g.ready(now), 0);
    assert_eq!(t.report().sent, sent + 32);
    // Full speed: no limit.
    let (_, fast, _) = setup(TesterConfig::default());
    assert_eq!(fast.ready(0), u64::MAX);
}

#[test]
fn a_rate_out_of_range_is_brought_into_range_and_paces_without_overflow() {
    for (asked, got) in [(1e300, MAX_RATE), (1e-9, MIN_RATE), (0.0, 0.0)] {
        let t = Tester::new(TesterConfig {
            rate_pps: Some(asked),
            ..TesterConfig::default()
        });
        assert_eq!(t.config().rate_pps.unwrap_or(0.0), got, "{asked}");
    }
    let t = Tester::new(TesterConfig {
        rate_pps: Some(1e300),
        flows: 1,
        ..TesterConfig::default()
    });
    let s = t.add_stream().unwrap();
    let mut g = t.generator(s, vec![0]);
    let mut buf = [0u8; 64];
    assert!(g.fill(&mut buf, 0).is_some());
    // The longest gap a TSC can show: the cap, no overflow.
    let cap = (MAX_RATE / 1000.0) as u64;
    assert_eq!(g.ready(u64::MAX), cap);
}

fn frames_at(g: &mut Generator, now: u64) -> u64 {
    let mut buf = [0u8; 9000];
    let mut n = 0;
    while g.fill(&mut buf, now).is_some() {
        n += 1;
    }
    n
}

#[test]
fn cancel_takes_the_frame_back_and_leaves_lost_at_zero() {
    let t = Tester::new(TesterConfig {
        count: Some(4),
        flows: 2,
        size: FrameSize::Imix,
        rate_pps: Some(1.0),
        ..TesterConfig::default()
    });
    let s = t.add_stream().unwrap();
    let mut g = t.generator(s, vec![0, 1]);
    let mut ch = t.checker();
    let mut buf = [0u8; 2048];
    let len = g.fill(&mut buf, 0).unwrap();
    let first = buf[..len].to_vec();
    assert_eq!(g.fill(&mut buf, 0), None, "rate: one frame at start");
    g.cancel();
    g.cancel(); // a second cancel does nothing
    assert_eq!(t.report().sent, 0);
    assert_eq!(g.ready(0), 1, "the token came back");
    let again = g.fill(&mut buf, 0).unwrap();
    assert_eq!(&buf[..again], &first[..], "same frame again");
    ch.check(&buf[..again]);
    let r = t.report();
    assert_eq!((r.sent, r.received, r.lost, r.bytes_sent), (1, 1, 0, 64));
    assert!(r.is_clean(), "{r}");

    // Without a rate: cancel every other frame; count still reached exactly.
    let t = Tester::new(TesterConfig {
        count: Some(6),
        flows: 3,
        ..TesterConfig::default()
    });
    let s = t.add_stream().unwrap();
    let mut g = t.generator(s, vec![0, 1, 2]);
    let mut ch = t.checker();
    let mut i = 0;
    while let Some(len) = g.fill(&mut buf, 0) {
        i += 1;
        if i % 2 == 0 {
            g.cancel();
        } else {
            ch.check(&buf[..len]);
        }
    }
    let r = t.report();
    assert_eq!((r.sent, r.received, r.lost, r.reordered), (6, 6, 0, 0));
}

#[test]
fn a_short_buffer_is_refused_and_counted() {
    let (t, mut g, _) = setup(config(L3::Ipv4, L4::Udp, 2, FrameSize::Fixed(9000)));
    let mut small = [0u8; 8999];
    assert_eq!(g.fill(&mut small, 0), None);
    let r = t.report();
    assert_eq!((r.sent, r.short_buffers), (0, 1));
    assert_eq!(frames(&mut g, 1).len(), 1);
}

/// `dst=stream`: each stream has its own destination, every checksum still
/// holds, and the checker (which rebuilds the headers) passes them all.
#[test]
fn per_stream_destinations_are_valid_and_checked() {
    for (l3, l4) in KINDS {
        let t = Tester::new(TesterConfig {
            dst_per_stream: true,
            ..config(l3, l4, 3, FrameSize::Fixed(128))
        });
        let mut ch = t.checker();
        for stream in 0..3u16 {
            assert_eq!(t.add_stream().unwrap(), stream);
            let mut g = t.generator(stream, vec![0, 1, 2]);
            for (i, f) in frames(&mut g, 6).iter().enumerate() {
                let (src, dst, ..) = parse_valid(f);
                let want = t.flow_tuple(stream, (i % 3) as u32);
                assert_eq!((src, dst), (want.src, want.dst));
                let expect: std::net::IpAddr = match l3 {
                    L3::Ipv4 => [198, 18, stream as u8, 1].into(),
                    L3::Ipv6 => {
                        let mut a = [0x20, 1, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1];
                        a[13] = stream as u8;
                        a.into()
                    }
                };
                assert_eq!(dst, expect, "{l3:?} stream {stream}");
                ch.check(f);
            }
        }
        let r = t.report();
        assert_eq!((r.sent, r.received), (18, 18), "{r}");
        assert!(r.is_clean(), "{r}");
    }
}

fn args_err(spec: &str) -> String {
    let spec = PortSpec::parse(spec).unwrap();
    let mut a = SpecArgs::new(&spec, TESTER_KEYS);
    TesterConfig::from_args(&mut a).unwrap_err().to_string()
}

fn args_ok(spec: &str) -> Option<TesterConfig> {
    let spec = PortSpec::parse(spec).unwrap();
    let mut a = SpecArgs::new(&spec, TESTER_KEYS);
    let c = TesterConfig::from_args(&mut a).unwrap();
    a.finish().unwrap();
    c
}

#[test]
fn from_args_reads_the_keys() {
    assert_eq!(
        TESTER_KEYS,
        &["gen", "flows", "size", "rate", "count", "dst"]
    );
    let c = args_ok("soft:dst=stream").unwrap();
    assert!(c.dst_per_stream);
    assert_eq!(c.to_string(), "gen=udp,flows=16,size=64,dst=stream");
    assert!(!args_ok("soft:dst=fixed").unwrap().dst_per_stream);
    assert_eq!(args_ok("soft"), None);
    assert_eq!(args_ok("soft:flows=16"), Some(TesterConfig::default()));
    let c = args_ok("soft:gen=tcp6,flows=0x100,size=imix,rate=1.5e6,count=1000").unwrap();
    assert_eq!(
        c,
        TesterConfig {
            l3: L3::Ipv6,
            l4: L4::Tcp,
            flows: 256,
            size: FrameSize::Imix,
            rate_pps: Some(1.5e6),
            count: Some(1000),
            ..TesterConfig::default()
        }
    );
    assert_eq!(
        c.to_string(),
        "gen=tcp6,flows=256,size=imix,rate=1500000,count=1000"
    );
    let c = args_ok("soft:gen=udp6,size=9000").unwrap();
    assert_eq!(
        (c.l3, c.l4, c.size),
        (L3::Ipv6, L4::Udp, FrameSize::Fixed(9000))
    );
    assert_eq!(args_ok("x:gen=tcp").unwrap().gen_name(), "tcp");
}

#[test]
fn from_args_errors_are_exact() {
    assert_eq!(
        args_err("soft:gen=icmp"),
        "port spec 'soft:gen=icmp': key 'gen' = 'icmp' is not one of udp, tcp, udp6, tcp6"
    );
    assert_eq!(
        args_err("soft:flows=0"),
        "port spec 'soft:flows=0': key 'flows' = '0' is not a number in 1..=1048576"
    );
    assert_eq!(
        args_err("soft:flows=1048577"),
        "port spec 'soft:flows=1048577': key 'flows' = '1048577' is not a number in \
         1..=1048576"
    );
    for bad in ["59", "9001", "big", "-64"] {
        assert_eq!(
            args_err(&format!("soft:size={bad}")),
            format!(
                "port spec 'soft:size={bad}': key 'size' = '{bad}' is not a frame size in \
                 60..=9000 or imix"
            )
        );
    }
    for bad in [
        "0",
        "-5",
        "fast",
        "inf",
        "NaN",
        "0.0001",
        "1.00001e10",
        "18446744073709551615",
        "1e300",
    ] {
        assert_eq!(
            args_err(&format!("soft:rate={bad}")),
            format!(
                "port spec 'soft:rate={bad}': key 'rate' = '{bad}' is not a rate in frames/s \
                 in 1e-3..=1e10"
            )
        );
    }
    assert_eq!(
        args_err("soft:count=0"),
        "port spec 'soft:count=0': key 'count' = '0' is not a number in \
         1..=18446744073709551615"
    );
    assert_eq!(
        "imix".parse::<FrameSize>(),
        Ok(FrameSize::Imix),
        "FromStr agrees"
    );
    assert_eq!(
        "61x".parse::<FrameSize>().unwrap_err(),
        "'61x' is not a frame size in 60..=9000 or imix"
    );
}

#[test]
fn the_registry_shares_a_tester_by_name_while_it_is_held() {
    let name = "tests-registry-shares";
    let a = attach(name, None).unwrap();
    let b = attach(name, Some(TesterConfig::default())).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let c = attach(name, None).unwrap();
    assert!(Arc::ptr_eq(&a, &c));
    assert!(
        registered()
            .iter()
            .any(|(n, t)| n == name && Arc::ptr_eq(t, &a))
    );
    let tcp = TesterConfig {
        l4: L4::Tcp,
        flows: 4,
        ..TesterConfig::default()
    };
    assert_eq!(
        attach(name, Some(tcp.clone())).unwrap_err(),
        "tester 'tests-registry-shares' exists with gen=udp,flows=16,size=64, cannot attach \
         with gen=tcp,flows=4,size=64"
    );
    let other = attach("tests-registry-other", Some(tcp.clone())).unwrap();
    assert!(!Arc::ptr_eq(&a, &other));
    drop((a, b, c));
    assert!(registered().iter().all(|(n, _)| n != name));
    // The name is free again: a different configuration is fine now.
    let d = attach(name, Some(tcp)).unwrap();
    assert_eq!(d.config().l4, L4::Tcp);
    assert!(Arc::ptr_eq(
        &attach("tests-registry-other", None).unwrap(),
        &other
    ));
}

#[test]
fn checkers_on_two_threads_sharing_flows_count_exactly() {
    const N: usize = 4000;
    const STEP: usize = 32;
    let (t, mut g, _) = setup(config(L3::Ipv4, L4::Udp, 4, FrameSize::Fixed(64)));
    let fs = Arc::new(frames(&mut g, N));
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|k| {
            let (t, fs, barrier) = (t.clone(), fs.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut ch = t.checker();
                // Both threads check every frame, in the same order; a barrier
                // every 32 frames keeps them within the duplicate window.
                for chunk in fs.chunks(STEP) {
                    for f in chunk {
                        ch.check(f);
                    }
                    if k == 0 {
                        // Some foreign traffic on one side.
                        ch.check(&[0u8; 64]);
                    }
                    barrier.wait();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let r = t.report();
    assert_eq!(
        (r.sent, r.received, r.duplicates),
        (N as u64, N as u64, N as u64)
    );
    assert_eq!((r.lost, r.corrupt, r.foreign), (0, 0, (N / STEP) as u64));
}

#[test]
fn widening_follows_the_32_bit_wrap() {
    use super::checker::FlowOrder;
    let o = FlowOrder::default();
    let base = (1u64 << 32) - 40;
    // Feed sequence numbers across the 2^32 boundary: none is a duplicate.
    for s in base..base + 80 {
        assert!(matches!(
            o.record(s as u32),
            super::checker::Seen::New { reordered: false }
        ));
    }
    assert_eq!(
        o.record((base + 79) as u32),
        super::checker::Seen::Duplicate
    );
    assert_eq!(
        o.record((base + 30) as u32),
        super::checker::Seen::Duplicate
    );
}

/// What happens to each frame in the property test.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Keep,
    Drop,
    Dup,
    SwapWithNext,
}

fn fate() -> impl proptest::strategy::Strategy<Value = Fate> {
    use proptest::prelude::*;
    prop_oneof![
        6 => Just(Fate::Keep),
        1 => Just(Fate::Drop),
        1 => Just(Fate::Dup),
        1 => Just(Fate::SwapWithNext),
    ]
}

proptest::proptest! {
    /// Random drops, duplicates and swaps are counted exactly, against a
    /// model that remembers every (flow, seq) seen.
    #[test]
    fn random_drop_dup_swap_patterns_are_counted_exactly(
        flows in 1u32..4,
        fates in proptest::collection::vec(fate(), 1..160),
    ) {
        let (t, mut g, mut ch) = setup(config(L3::Ipv4, L4::Udp, flows, FrameSize::Fixed(60)));
        let fs = frames(&mut g, fates.len());
        let mut wire: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < fs.len() {
            match fates[i] {
                Fate::Keep => wire.push(i),
                Fate::Drop => {}
                Fate::Dup => wire.extend([i, i]),
                Fate::SwapWithNext if i + 1 < fs.len() => {
                    wire.extend([i + 1, i]);
                    i += 1;
                }
                Fate::SwapWithNext => wire.push(i),
            }
            i += 1;
        }
        // Model: frame i is flow i % flows, seq i / flows.
        let (mut seen, mut highest) = (HashSet::new(), HashMap::new());
        let (mut received, mut dups, mut reordered) = (0u64, 0u64, 0u64);
        for &i in &wire {
            ch.check(&fs[i]);
            let (flow, seq) = (i as u32 % flows, i as u32 / flows);
            if !seen.insert(i) {
                dups += 1;
                continue;
            }
            received += 1;
            let h = highest.entry(flow).or_insert(seq);
            if seq < *h {
                reordered += 1;
            }
            *h = (*h).max(seq);
        }
        let r = t.report();
        proptest::prop_assert_eq!(r.sent, fs.len() as u64);
        proptest::prop_assert_eq!(r.received, received);
        proptest::prop_assert_eq!(r.lost, fs.len() as u64 - received);
        proptest::prop_assert_eq!(r.reordered, reordered);
        proptest::prop_assert_eq!(r.duplicates, dups);
        proptest::prop_assert_eq!(r.corrupt + r.foreign, 0);
    }
}

#[test]
fn testers_are_shared_and_their_parts_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Tester>();
    send_sync::<Arc<Tester>>();
    send::<Generator>();
    send::<Checker>();
}

#[test]
fn a_paused_tester_generates_nothing_until_resumed() {
    let t = Tester::new(TesterConfig::default());
    let s = t.add_stream().unwrap();
    let mut g = t.generator(s, (0..4).collect());
    let mut buf = [0u8; 2048];
    assert!(g.fill(&mut buf, 0).is_some());
    t.pause(true);
    assert!(t.is_paused());
    assert_eq!(g.ready(0), 0);
    assert_eq!(g.fill(&mut buf, 0), None);
    t.pause(false);
    assert_eq!(g.ready(0), u64::MAX);
    assert!(g.fill(&mut buf, 0).is_some());
    assert_eq!(t.report().sent, 2, "nothing counted while paused");
}

/// The latency histogram of `port`, all checkers published.
fn port_latency(t: &Tester, port: u16) -> hdrhistogram::Histogram<u64> {
    t.latency()
        .into_iter()
        .find(|l| l.port == port)
        .unwrap_or_else(|| panic!("no latency for port {port}"))
        .histogram
}

/// `ticks` TSC ticks in nanoseconds, as the checker converts them.
fn ticks_to_ns(ticks: u64) -> u64 {
    (u128::from(ticks) * 1_000_000_000 / u128::from(crate::tsc::tsc_hz())) as u64
}

#[test]
fn frames_with_room_carry_the_send_time_and_check_clean() {
    // UDP/IPv4: 58 bytes of headers and stamp; 64 leaves 6 for the time.
    for (size, stamped) in [(60, false), (63, false), (64, true), (1518, true)] {
        let (t, mut g, mut ch) = setup(config(L3::Ipv4, L4::Udp, 4, FrameSize::Fixed(size)));
        let mut buf = [0u8; 2048];
        let sent_at = 0x1234_5678_9abc_u64;
        let len = g.fill(&mut buf, sent_at).unwrap();
        assert_eq!(len, usize::from(size));
        let carried = &buf[58..64.min(len)];
        assert_eq!(
            carried == &sent_at.to_be_bytes()[2..][..carried.len()],
            stamped
        );
        parse_valid(&buf[..len]);
        ch.check_at(&buf[..len], sent_at + 1000);
        ch.publish_latency();
        let r = t.report();
        assert_eq!((r.received, r.corrupt), (1, 0), "size {size}");
        assert_eq!(port_latency(&t, 0).len(), u64::from(stamped), "size {size}");
    }
}

#[test]
fn a_flipped_send_time_bit_is_corrupt_and_gives_no_sample() {
    for (l3, l4) in KINDS {
        let (t, mut g, mut ch) = setup(config(l3, l4, 4, FrameSize::Fixed(200)));
        let mut buf = [0u8; 256];
        let len = g.fill(&mut buf, 0xfedc_ba98_7654).unwrap();
        let at = t.layout.payload_off;
        for byte in at..at + frame::TSC_LEN {
            for bit in 0..8 {
                let mut f = buf[..len].to_vec();
                f[byte] ^= 1 << bit;
                ch.check_at(&f, 0xfedc_ba98_7654 + 10);
            }
        }
        ch.check_at(&buf[..len], 0xfedc_ba98_7654 + 10);
        ch.publish_latency();
        let r = t.report();
        assert_eq!((r.corrupt, r.received), (8 * frame::TSC_LEN as u64, 1));
        assert_eq!(port_latency(&t, 0).len(), 1);
    }
}

#[test]
fn the_checker_records_now_minus_the_send_time_in_nanoseconds() {
    let (t, mut g, mut ch) = setup(config(L3::Ipv6, L4::Tcp, 4, FrameSize::Fixed(128)));
    let hz = crate::tsc::tsc_hz();
    let mut buf = [0u8; 256];
    // 1 ms, 2 ms, ... 10 ms after sending, all across the 48-bit wrap of
    // the send time; then one sent 10 ticks before the wrap and received 10
    // after.
    for k in 1..=10u64 {
        let sent = (1 << 48) - 100 + k;
        let len = g.fill(&mut buf, sent).unwrap();
        ch.check_at(&buf[..len], sent + k * hz / 1000);
    }
    let wrap = (1u64 << 48) - 10;
    let len = g.fill(&mut buf, wrap).unwrap();
    ch.check_at(&buf[..len], wrap + 20);
    // Nothing is published before it is time (the fake clock does not move
    // far enough) or asked.
    assert_eq!(port_latency(&t, 0).len(), 0);
    ch.publish_latency();
    let h = port_latency(&t, 0);
    assert_eq!(h.len(), 11);
    assert!(h.equivalent(h.min(), ticks_to_ns(20)), "{}", h.min());
    assert!(h.equivalent(h.max(), ticks_to_ns(10 * (hz / 1000))));
    let p50 = h.value_at_quantile(0.5);
    assert!(h.equivalent(p50, ticks_to_ns(5 * (hz / 1000))), "{p50}");
    let s = LatencySummary::of(&h);
    assert_eq!((s.samples, s.min_ns, s.max_ns), (11, h.min(), h.max()));
    assert!(s.min_ns <= s.p50_ns && s.p50_ns <= s.p90_ns && s.p90_ns <= s.p99_ns);
    assert!(s.p99_ns <= s.p999_ns && s.p999_ns <= s.max_ns);
    // Duplicates are not measured again.
    ch.check_at(&buf[..len], wrap + 20);
    drop(ch);
    assert_eq!(port_latency(&t, 0).len(), 11);
    assert_eq!(t.report().duplicates, 1);
}

#[test]
fn latency_is_merged_per_port_over_its_checkers() {
    let t = Tester::new(config(L3::Ipv4, L4::Udp, 8, FrameSize::Fixed(64)));
    let s = t.add_stream().unwrap();
    let mut g = t.generator(s, (0..8).collect());
    let mut checkers = [t.checker_for(3), t.checker_for(1), t.checker_for(3)];
    assert_eq!(checkers.each_ref().map(|c| c.port()), [3, 1, 3]);
    let mut buf = [0u8; 64];
    for i in 0..30u64 {
        let len = g.fill(&mut buf, 1000).unwrap();
        checkers[(i % 3) as usize].check_at(&buf[..len], 1000 + i);
    }
    drop(checkers);
    let l = t.latency();
    let ports: Vec<(u16, u64)> = l.iter().map(|p| (p.port, p.histogram.len())).collect();
    assert_eq!(ports, [(1, 10), (3, 20)]);
    assert_eq!(l[1].summary().samples, 20);
    assert!(
        l[0].histogram
            .equivalent(l[0].summary().max_ns, ticks_to_ns(28))
    );
    assert_eq!(t.report().received, 30);
}

#[test]
fn latency_summaries_read_as_text() {
    let mut h = latency::latency_histogram();
    assert_eq!(LatencySummary::of(&h), LatencySummary::default());
    assert_eq!(LatencySummary::of(&h).to_string(), "no samples");
    h.record(850).unwrap();
    h.record(12_300).unwrap();
    let s = LatencySummary::of(&h);
    assert_eq!((s.samples, s.min_ns), (2, 850));
    assert_eq!(
        s.to_string(),
        "samples 2, min 850 ns, p50 850 ns, p90 12.3 us, p99 12.3 us, p99.9 12.3 us, max 12.3 us"
    );
    assert_eq!(latency::format_ns(4_560_000), "4.56 ms");
    assert_eq!(latency::format_ns(1_200_000_000), "1.20 s");
    // Beyond the range: counted at its top.
    h.saturating_record(u64::MAX);
    assert!(h.equivalent(h.max(), LATENCY_MAX_NS));
}

/// Each frame of `g` checked by `ch`, up to `n`.
fn send_to(g: &mut Generator, ch: &mut Checker, n: usize) {
    for f in frames(g, n) {
        ch.check(&f);
    }
}

#[test]
fn two_testers_count_each_others_frames_as_foreign() {
    let c = TesterConfig {
        count: Some(32),
        ..TesterConfig::default()
    };
    let (a, b) = (Tester::new(c.clone()), Tester::new(c));
    // Each tester numbers its own streams: both send stream 0.
    let (sa, sb) = (a.add_stream().unwrap(), b.add_stream().unwrap());
    assert_eq!((sa, sb), (0, 0));
    // Their stamps tell them apart.
    let tag = |t: &Tester| t.stream(0).unwrap().ids.tag;
    assert_ne!(tag(&a), tag(&b));
    let mut ga = a.generator(sa, (0..16).collect());
    let mut gb = b.generator(sb, (0..16).collect());
    let (mut ca, mut cb) = (a.checker(), b.checker());
    // A forwarding pair with a tester per port: each one's frames reach
    // the other's checker.
    send_to(&mut ga, &mut cb, 32);
    send_to(&mut gb, &mut ca, 32);
    for (name, t) in [("a", &a), ("b", &b)] {
        let r = t.report();
        assert_eq!(
            (r.sent, r.received, r.lost, r.foreign),
            (32, 0, 32, 32),
            "tester {name}: {r}"
        );
        assert_eq!((r.reordered, r.duplicates, r.corrupt), (0, 0, 0), "{r}");
    }
    // Interleaved with another tester's stream 0, a tester's own frames
    // still count as its own, in order.
    let (t, u) = (
        Tester::new(TesterConfig::default()),
        Tester::new(TesterConfig::default()),
    );
    let (st, su) = (t.add_stream().unwrap(), u.add_stream().unwrap());
    let (mut gt, mut gu) = (t.generator(st, vec![0]), u.generator(su, vec![0]));
    let mut ct = t.checker();
    for (own, other) in frames(&mut gt, 8)
        .iter()
        .zip(frames(&mut gu, 8).iter().rev())
    {
        ct.check(other);
        ct.check(own);
    }
    let r = t.report();
    assert_eq!((r.sent, r.received, r.foreign), (8, 8, 8), "{r}");
    assert!(r.is_clean(), "{r}");
}
