//! The header views against the `etherparse` crate on random valid packets:
//! packets written with the views' setters and checksums, read back by
//! etherparse field by field, and etherparse's checksums equal to ours.

use etherparse::{
    Ethernet2HeaderSlice, Ipv4HeaderSlice, Ipv6HeaderSlice, SingleVlanHeaderSlice, TcpHeaderSlice,
    UdpHeaderSlice,
};
use proptest::prelude::*;

use super::checksum;
use super::{
    EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet, MacAddr, TcpSegment, UdpDatagram, VlanTag,
    ip_proto,
};

/// The fields of a random packet.
#[derive(Debug, Clone)]
struct Fields {
    dst: [u8; 6],
    src: [u8; 6],
    /// The VLAN TCI, when tagged.
    vlan: Option<u16>,
    v6: bool,
    /// IPv4 header length in 32-bit words (options are zero bytes: "end of
    /// options").
    ihl: usize,
    dscp_ecn: u8,
    ident: u16,
    flags_frag: u16,
    ttl: u8,
    flow: u32,
    ip_src: [u8; 16],
    ip_dst: [u8; 16],
    tcp: bool,
    /// TCP header length in 32-bit words.
    doff: usize,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    tcp_flags: u8,
    window: u16,
    payload: Vec<u8>,
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        (
            any::<[u8; 6]>(),
            any::<[u8; 6]>(),
            any::<Option<u16>>(),
            any::<bool>(),
        ),
        (
            5usize..=15,
            any::<u8>(),
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            0u32..1 << 20,
        ),
        (any::<[u8; 16]>(), any::<[u8; 16]>()),
        (
            any::<bool>(),
            5usize..=15,
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (
            any::<u8>(),
            any::<u16>(),
            proptest::collection::vec(any::<u8>(), 0..100),
        ),
    )
        .prop_map(
            |(
                (dst, src, vlan, v6),
                (ihl, dscp_ecn, ident, flags_frag, ttl, flow),
                (ip_src, ip_dst),
                (tcp, doff, sport, dport, seq, ack),
                (tcp_flags, window, payload),
            )| Fields {
                dst,
                src,
                vlan,
                v6,
                ihl,
                dscp_ecn,
                ident,
                // Bit 15 is reserved (etherparse rejects it).
                flags_frag: flags_frag & 0x7fff,
                ttl,
                flow,
                ip_src,
                ip_dst,
                tcp,
                doff,
                sport,
                dport,
                seq,
                ack,
                tcp_flags,
                window,
                payload,
            },
        )
}

/// Writes the packet with the views' setters; returns the bytes and the
/// offsets of the IP and L4 headers.
fn build(f: &Fields) -> (Vec<u8>, usize, usize) {
    let l3 = if f.vlan.is_some() { 18 } else { 14 };
    let ip_len = if f.v6 { 40 } else { f.ihl * 4 };
    let l4 = l3 + ip_len;
    let l4_len = if f.tcp { f.doff * 4 } else { 8 } + f.payload.len();
    let mut b = vec![0u8; l4 + l4_len];
    b[l4 + l4_len - f.payload.len()..].copy_from_slice(&f.payload);

    let mut eth = EthernetFrame::new_checked(&mut b[..]).unwrap();
    eth.set_dst(MacAddr(f.dst));
    eth.set_src(MacAddr(f.src));
    let ip_type = if f.v6 {
        EtherType::IPV6
    } else {
        EtherType::IPV4
    };
    match f.vlan {
        Some(tci) => {
            eth.set_ethertype(EtherType::VLAN);
            let mut tag = VlanTag::new_checked(eth.payload_mut()).unwrap();
            tag.set_tci(tci);
            tag.set_inner_ethertype(ip_type);
        }
        None => eth.set_ethertype(ip_type),
    }
    let proto = if f.tcp { ip_proto::TCP } else { ip_proto::UDP };
    let pseudo = if f.v6 {
        b[l3] = 0x60;
        b[l3 + 4..l3 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        let mut ip = Ipv6Packet::new_checked(&mut b[l3..]).unwrap();
        ip.set_ver_tc_flow(f.dscp_ecn, f.flow);
        ip.set_payload_len(l4_len as u16);
        ip.set_next_header(proto);
        ip.set_hop_limit(f.ttl);
        ip.set_src(f.ip_src);
        ip.set_dst(f.ip_dst);
        checksum::pseudo_ipv6(f.ip_src, f.ip_dst, proto, l4_len as u32)
    } else {
        let src: [u8; 4] = f.ip_src[..4].try_into().unwrap();
        let dst: [u8; 4] = f.ip_dst[..4].try_into().unwrap();
        b[l3] = 0x40 | f.ihl as u8;
        b[l3 + 2..l3 + 4].copy_from_slice(&((ip_len + l4_len) as u16).to_be_bytes());
        let mut ip = Ipv4Packet::new_checked(&mut b[l3..]).unwrap();
        ip.set_header_len(ip_len);
        ip.set_total_len((ip_len + l4_len) as u16);
        ip.set_dscp_ecn(f.dscp_ecn);
        ip.set_ident(f.ident);
        ip.set_flags_frag(f.flags_frag);
        ip.set_ttl(f.ttl);
        ip.set_protocol(proto);
        ip.set_src(src);
        ip.set_dst(dst);
        ip.fill_checksum();
        checksum::pseudo_ipv4(src, dst, proto, l4_len as u16)
    };
    if f.tcp {
        b[l4 + 12] = (f.doff as u8) << 4;
        let mut t = TcpSegment::new_checked(&mut b[l4..]).unwrap();
        t.set_header_len(f.doff * 4);
        t.set_src_port(f.sport);
        t.set_dst_port(f.dport);
        t.set_seq(f.seq);
        t.set_ack(f.ack);
        t.set_flags(f.tcp_flags);
        t.set_window(f.window);
        t.fill_checksum(pseudo);
    } else {
        b[l4 + 4..l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        let mut u = UdpDatagram::new_checked(&mut b[l4..]).unwrap();
        u.set_src_port(f.sport);
        u.set_dst_port(f.dport);
        u.set_len(l4_len as u16);
        u.fill_checksum(pseudo);
    }
    (b, l3, l4)
}

proptest! {
    /// etherparse reads every field the setters wrote, and computes the same
    /// checksums; our views read and verify the same packet.
    #[test]
    fn views_agree_with_etherparse(f in fields()) {
        let (b, l3, l4) = build(&f);

        let eth = Ethernet2HeaderSlice::from_slice(&b).unwrap();
        prop_assert_eq!((eth.destination(), eth.source()), (f.dst, f.src));
        if let Some(tci) = f.vlan {
            prop_assert_eq!(eth.ether_type().0, EtherType::VLAN.0);
            let tag = SingleVlanHeaderSlice::from_slice(&b[14..]).unwrap();
            prop_assert_eq!(tag.vlan_identifier().value(), tci & 0xfff);
            prop_assert_eq!(tag.priority_code_point().value(), (tci >> 13) as u8);
            prop_assert_eq!(tag.drop_eligible_indicator(), tci & 0x1000 != 0);
        }

        let l4_payload = &b[l4 + if f.tcp { f.doff * 4 } else { 8 }..];
        prop_assert_eq!(l4_payload, &f.payload[..]);
        let (src, dst) = (f.ip_src, f.ip_dst);
        let (src4, dst4): ([u8; 4], [u8; 4]) = (src[..4].try_into().unwrap(), dst[..4].try_into().unwrap());
        if f.v6 {
            let ip = Ipv6HeaderSlice::from_slice(&b[l3..]).unwrap();
            prop_assert_eq!((ip.traffic_class(), ip.flow_label().value()), (f.dscp_ecn, f.flow));
            prop_assert_eq!(ip.payload_length() as usize, b.len() - l4);
            prop_assert_eq!((ip.hop_limit(), ip.source(), ip.destination()), (f.ttl, src, dst));
            let ours = Ipv6Packet::new_checked(&b[l3..]).unwrap();
            prop_assert_eq!(ours.next_header(), ip.next_header().0);
        } else {
            let ip = Ipv4HeaderSlice::from_slice(&b[l3..]).unwrap();
            prop_assert_eq!(ip.ihl() as usize, f.ihl);
            prop_assert_eq!(ip.total_len() as usize, b.len() - l3);
            prop_assert_eq!((ip.dcp().value() << 2) | ip.ecn().value(), f.dscp_ecn);
            prop_assert_eq!(ip.identification(), f.ident);
            prop_assert_eq!(ip.dont_fragment(), f.flags_frag & 0x4000 != 0);
            prop_assert_eq!(ip.more_fragments(), f.flags_frag & 0x2000 != 0);
            prop_assert_eq!(ip.fragments_offset().value(), f.flags_frag & 0x1fff);
            prop_assert_eq!((ip.ttl(), ip.source(), ip.destination()), (f.ttl, src4, dst4));
            prop_assert_eq!(ip.header_checksum(), ip.to_header().calc_header_checksum());
            let ours = Ipv4Packet::new_checked(&b[l3..]).unwrap();
            prop_assert!(ours.verify_checksum());
            prop_assert_eq!(ours.checksum(), ip.header_checksum());
            prop_assert_eq!(ours.frag_offset(), ip.fragments_offset().value() * 8);
            prop_assert_eq!(ours.protocol(), ip.protocol().0);
        }

        if f.tcp {
            let t = TcpHeaderSlice::from_slice(&b[l4..]).unwrap();
            prop_assert_eq!((t.source_port(), t.destination_port()), (f.sport, f.dport));
            prop_assert_eq!((t.sequence_number(), t.acknowledgment_number()), (f.seq, f.ack));
            prop_assert_eq!((t.data_offset() as usize, t.window_size()), (f.doff, f.window));
            prop_assert_eq!(t.fin(), f.tcp_flags & 0x01 != 0);
            prop_assert_eq!(t.syn(), f.tcp_flags & 0x02 != 0);
            prop_assert_eq!(t.ack(), f.tcp_flags & 0x10 != 0);
            prop_assert_eq!(t.cwr(), f.tcp_flags & 0x80 != 0);
            let want = if f.v6 {
                t.calc_checksum_ipv6_raw(src, dst, l4_payload).unwrap()
            } else {
                t.calc_checksum_ipv4_raw(src4, dst4, l4_payload).unwrap()
            };
            prop_assert_eq!(t.checksum(), want);
        } else {
            let u = UdpHeaderSlice::from_slice(&b[l4..]).unwrap();
            prop_assert_eq!((u.source_port(), u.destination_port()), (f.sport, f.dport));
            prop_assert_eq!(u.length() as usize, b.len() - l4);
            let h = u.to_header();
            let want = if f.v6 {
                h.calc_checksum_ipv6_raw(src, dst, l4_payload).unwrap()
            } else {
                h.calc_checksum_ipv4_raw(src4, dst4, l4_payload).unwrap()
            };
            prop_assert_eq!(u.checksum(), want);
        }
    }

    /// A packet etherparse builds: our views read its fields and verify its
    /// checksums.
    #[test]
    fn views_verify_what_etherparse_builds(
        src in any::<[u8; 4]>(),
        dst in any::<[u8; 4]>(),
        ttl in any::<u8>(),
        ports in any::<(u16, u16)>(),
        tcp in any::<bool>(),
        payload in proptest::collection::vec(any::<u8>(), 0..100),
    ) {
        let builder = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(src, dst, ttl);
        let mut b = Vec::new();
        if tcp {
            let builder = builder.tcp(ports.0, ports.1, 7, 1024);
            builder.write(&mut b, &payload).unwrap();
        } else {
            let builder = builder.udp(ports.0, ports.1);
            builder.write(&mut b, &payload).unwrap();
        }
        let eth = EthernetFrame::new_checked(&b[..]).unwrap();
        prop_assert_eq!(eth.ethertype(), EtherType::IPV4);
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        prop_assert!(ip.verify_checksum());
        prop_assert_eq!((ip.src(), ip.dst(), ip.ttl()), (src, dst, ttl));
        let l4_len = ip.payload().len() as u16;
        let pseudo = checksum::pseudo_ipv4(src, dst, ip.protocol(), l4_len);
        if tcp {
            let t = TcpSegment::new_checked(ip.payload()).unwrap();
            prop_assert_eq!((t.src_port(), t.dst_port(), t.seq()), (ports.0, ports.1, 7));
            prop_assert_eq!(t.payload(), &payload[..]);
            prop_assert!(t.verify_checksum(pseudo));
        } else {
            let u = UdpDatagram::new_checked(ip.payload()).unwrap();
            prop_assert_eq!((u.src_port(), u.dst_port()), ports);
            prop_assert_eq!(u.payload(), &payload[..]);
            prop_assert!(u.verify_checksum(pseudo));
        }
    }
}
