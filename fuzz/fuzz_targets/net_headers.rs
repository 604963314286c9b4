//! Every header view in `sluice::net` over arbitrary bytes: each is built
//! with `new_checked` at each layer the bytes could hold, every getter and
//! checksum is called, and on a copy every setter is called with values taken
//! from the input, then every getter again. A checksum filled in must verify.
//! The Toeplitz hash of `net::rss` runs over the bytes too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::net::{
    EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet, MacAddr, TcpSegment, UdpDatagram, VlanTag,
};
use sluice::net::{checksum, rss};

/// Reads values for the setters from the input, cycling.
struct Values<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Values<'_> {
    fn u8(&mut self) -> u8 {
        if self.bytes.is_empty() {
            return 0;
        }
        let b = self.bytes[self.at % self.bytes.len()];
        self.at += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn arr<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.u8())
    }
}

fn ethernet(data: &[u8], v: &mut Values) {
    let Ok(eth) = EthernetFrame::new_checked(data) else {
        return;
    };
    let _ = (
        eth.dst().is_multicast(),
        eth.src().to_string(),
        eth.ethertype(),
    );
    let payload = eth.payload();
    if let Ok(tag) = VlanTag::new_checked(payload) {
        let _ = (
            tag.tci(),
            tag.vid(),
            tag.pcp(),
            tag.inner_ethertype(),
            tag.payload().len(),
        );
        network(tag.payload(), v);
    }
    network(payload, v);

    let mut copy = data.to_vec();
    let mut e = EthernetFrame::new_checked(&mut copy[..]).expect("same bytes");
    let (dst, src, et) = (MacAddr(v.arr()), MacAddr(v.arr()), EtherType(v.u16()));
    e.set_dst(dst);
    e.set_src(src);
    e.set_ethertype(et);
    assert_eq!((e.dst(), e.src(), e.ethertype()), (dst, src, et));
    e.swap_macs();
    assert_eq!((e.dst(), e.src()), (src, dst));
    let n = e.payload_mut().len();
    assert_eq!(n, data.len() - 14);
    if let Ok(mut tag) = VlanTag::new_checked(e.payload_mut()) {
        let (tci, inner) = (v.u16(), EtherType(v.u16()));
        tag.set_tci(tci);
        tag.set_inner_ethertype(inner);
        assert_eq!((tag.tci(), tag.inner_ethertype()), (tci, inner));
        assert_eq!((tag.vid(), tag.pcp()), (tci & 0xfff, (tci >> 13) as u8));
    }
}

/// IPv4 and IPv6 over the same bytes, then their payloads as UDP and TCP.
fn network(data: &[u8], v: &mut Values) {
    if let Ok(ip) = Ipv4Packet::new_checked(data) {
        let _ = (
            ip.header_len(),
            ip.dscp_ecn(),
            ip.total_len(),
            ip.ident(),
            ip.dont_frag(),
            ip.more_frags(),
            ip.frag_offset(),
            ip.ttl(),
            ip.protocol(),
            ip.checksum(),
            ip.verify_checksum(),
        );
        let l4_len = ip.payload().len() as u16;
        let pseudo = checksum::pseudo_ipv4(ip.src(), ip.dst(), ip.protocol(), l4_len);
        transport(ip.payload(), pseudo, v);
        ipv4_setters(data, v);
    }
    if let Ok(ip) = Ipv6Packet::new_checked(data) {
        let _ = (
            ip.traffic_class(),
            ip.flow_label(),
            ip.payload_len(),
            ip.hop_limit(),
        );
        let pseudo = checksum::pseudo_ipv6(
            ip.src(),
            ip.dst(),
            ip.next_header(),
            ip.payload().len() as u32,
        );
        transport(ip.payload(), pseudo, v);
        ipv6_setters(data, v);
    }
    // Any pseudo-header sum the IPv4 or IPv6 helpers can give (below 2^21).
    transport(data, v.u32() & 0x1f_ffff, v);
}

fn ipv4_setters(data: &[u8], v: &mut Values) {
    let mut copy = data.to_vec();
    let mut ip = Ipv4Packet::new_checked(&mut copy[..]).expect("same bytes");
    ip.fill_checksum();
    assert!(ip.verify_checksum());
    let ok = ip.verify_checksum();
    while ip.decrement_ttl().is_some() {
        assert_eq!(ip.verify_checksum(), ok);
    }
    let (dscp, ident, flags, ttl, proto) = (v.u8(), v.u16(), v.u16(), v.u8(), v.u8());
    let (src, dst) = (v.arr(), v.arr());
    ip.set_dscp_ecn(dscp);
    ip.set_ident(ident);
    ip.set_flags_frag(flags);
    ip.set_ttl(ttl);
    ip.set_protocol(proto);
    ip.set_src(src);
    ip.set_dst(dst);
    assert_eq!(
        (
            ip.dscp_ecn(),
            ip.ident(),
            ip.ttl(),
            ip.protocol(),
            ip.src(),
            ip.dst()
        ),
        (dscp, ident, ttl, proto, src, dst)
    );
    assert_eq!(ip.frag_offset(), (flags & 0x1fff).wrapping_mul(8));
    ip.fill_checksum();
    assert!(ip.verify_checksum());
    // Lengths that may disagree with the buffer: the getters still answer.
    let (hl, total) = (usize::from(v.u8() & 0x3c), v.u16());
    ip.set_header_len(hl);
    ip.set_total_len(total);
    assert_eq!((ip.header_len(), ip.total_len()), (hl, total));
    let _ = (
        ip.payload().len(),
        ip.verify_checksum(),
        ip.payload_mut().len(),
    );
    ip.fill_checksum();
    let _ = ip.decrement_ttl();
}

fn ipv6_setters(data: &[u8], v: &mut Values) {
    let mut copy = data.to_vec();
    let mut ip = Ipv6Packet::new_checked(&mut copy[..]).expect("same bytes");
    let (tc, flow, nh, hop) = (v.u8(), v.u32() & 0xfffff, v.u8(), v.u8());
    let (src, dst) = (v.arr(), v.arr());
    ip.set_ver_tc_flow(tc, flow);
    ip.set_next_header(nh);
    ip.set_hop_limit(hop);
    ip.set_src(src);
    ip.set_dst(dst);
    assert_eq!(
        (
            ip.traffic_class(),
            ip.flow_label(),
            ip.next_header(),
            ip.hop_limit()
        ),
        (tc, flow, nh, hop)
    );
    assert_eq!((ip.src(), ip.dst()), (src, dst));
    assert_eq!(ip.decrement_hop_limit(), (hop > 1).then(|| hop - 1));
    let len = v.u16();
    ip.set_payload_len(len);
    assert_eq!(ip.payload_len(), len);
    let _ = (ip.payload().len(), ip.payload_mut().len());
}

fn transport(data: &[u8], pseudo: u32, v: &mut Values) {
    if let Ok(udp) = UdpDatagram::new_checked(data) {
        let _ = (
            udp.src_port(),
            udp.dst_port(),
            udp.len(),
            udp.is_empty(),
            udp.checksum(),
            udp.payload().len(),
            udp.verify_checksum(pseudo),
        );
        let mut copy = data.to_vec();
        let mut u = UdpDatagram::new_checked(&mut copy[..]).expect("same bytes");
        let (sp, dp) = (v.u16(), v.u16());
        u.set_src_port(sp);
        u.set_dst_port(dp);
        assert_eq!((u.src_port(), u.dst_port()), (sp, dp));
        u.fill_checksum(pseudo);
        assert_ne!(u.checksum(), 0);
        assert!(u.verify_checksum(pseudo));
        u.set_checksum(v.u16());
        let len = v.u16();
        u.set_len(len);
        assert_eq!(u.len(), len);
        let _ = (
            u.payload().len(),
            u.verify_checksum(pseudo),
            u.payload_mut().len(),
        );
        u.fill_checksum(pseudo);
    }
    if let Ok(tcp) = TcpSegment::new_checked(data) {
        let _ = (
            tcp.src_port(),
            tcp.dst_port(),
            tcp.seq(),
            tcp.ack(),
            tcp.header_len(),
            tcp.flags(),
            tcp.window(),
            tcp.checksum(),
            tcp.payload().len(),
            tcp.verify_checksum(pseudo),
        );
        let mut copy = data.to_vec();
        let mut t = TcpSegment::new_checked(&mut copy[..]).expect("same bytes");
        let (sp, dp, seq, ack, flags, win) = (v.u16(), v.u16(), v.u32(), v.u32(), v.u8(), v.u16());
        t.set_src_port(sp);
        t.set_dst_port(dp);
        t.set_seq(seq);
        t.set_ack(ack);
        t.set_flags(flags);
        t.set_window(win);
        assert_eq!(
            (
                t.src_port(),
                t.dst_port(),
                t.seq(),
                t.ack(),
                t.flags(),
                t.window()
            ),
            (sp, dp, seq, ack, flags, win)
        );
        t.fill_checksum(pseudo);
        assert!(t.verify_checksum(pseudo));
        let hl = usize::from(v.u8() & 0x3c);
        t.set_header_len(hl);
        assert_eq!(t.header_len(), hl);
        let _ = (
            t.payload().len(),
            t.payload_mut().len(),
            t.verify_checksum(pseudo),
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut v = Values { bytes: data, at: 0 };
    // The checksum helpers alone.
    let c = checksum::checksum(data);
    if data.len() >= 2 {
        let old = u16::from_be_bytes([data[0], data[1]]);
        let new = v.u16();
        let mut copy = data.to_vec();
        copy[..2].copy_from_slice(&new.to_be_bytes());
        let upd = checksum::update(c, old, new);
        let after = checksum::checksum(&copy);
        assert!(
            upd == after || upd ^ after == 0xffff,
            "{upd:#x} vs {after:#x}"
        );
    }
    // The Toeplitz hash with any key and input (a key too short for the
    // input ignores the rest).
    let (key, input) = data.split_at(data.len().min(40));
    let _ = rss::toeplitz(key, input);
    ethernet(data, &mut v);
    network(data, &mut v);
});
