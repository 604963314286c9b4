//! IPv6 headers (the fixed 40-byte header; extension headers are payload).
//!
//! [`Ipv6Packet`] views the header — traffic class, flow label, payload
//! length, next header, hop limit, addresses — and its payload, which stops
//! at the payload length. [`decrement_hop_limit`](Ipv6Packet::decrement_hop_limit)
//! is the router's step (IPv6 has no header checksum to update).

use super::{NetError, be16, be32, check_len, set_be16, set_be32};

/// Byte ranges of the IPv6 header.
pub mod field {
    use std::ops::Range;
    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length.
    pub const LENGTH: Range<usize> = 4..6;
    /// Next header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC: Range<usize> = 8..24;
    /// Destination address.
    pub const DST: Range<usize> = 24..40;
}

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buffer` after checking the version and that the payload length
    /// fits the buffer.
    pub fn new_checked(buffer: T) -> Result<Self, NetError> {
        let b = buffer.as_ref();
        check_len("ipv6", b, HEADER_LEN)?;
        if b[0] >> 4 != 6 {
            return Err(NetError::Malformed {
                header: "ipv6",
                what: "version is not 6",
            });
        }
        check_len(
            "ipv6",
            b,
            HEADER_LEN + be16(b, field::LENGTH.start) as usize,
        )?;
        Ok(Ipv6Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (be32(self.b(), 0) >> 20) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be32(self.b(), 0) & 0x000f_ffff
    }

    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), field::LENGTH.start)
    }

    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.b()[field::NEXT_HEADER]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src(&self) -> [u8; 16] {
        self.b()[field::SRC].try_into().expect("16 bytes")
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 16] {
        self.b()[field::DST].try_into().expect("16 bytes")
    }

    /// The payload, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.payload_end()]
    }

    /// The end of the payload, cut to the buffer (a setter may have written
    /// a payload length past it).
    fn payload_end(&self) -> usize {
        (HEADER_LEN + self.payload_len() as usize).min(self.b().len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets version 6, the traffic class and the flow label.
    pub fn set_ver_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let v = 6 << 28 | (traffic_class as u32) << 20 | (flow_label & 0x000f_ffff);
        set_be32(self.bm(), 0, v);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        set_be16(self.bm(), field::LENGTH.start, len);
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, nh: u8) {
        self.bm()[field::NEXT_HEADER] = nh;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, h: u8) {
        self.bm()[field::HOP_LIMIT] = h;
    }

    /// Decrements the hop limit; `None` (and no change) when it is 0 or 1.
    pub fn decrement_hop_limit(&mut self) -> Option<u8> {
        let h = self.hop_limit();
        if h <= 1 {
            return None;
        }
        self.set_hop_limit(h - 1);
        Some(h - 1)
    }

    /// Sets the source address.
    pub fn set_src(&mut self, a: [u8; 16]) {
        self.bm()[field::SRC].copy_from_slice(&a);
    }

    /// Sets the destination address.
    pub fn set_dst(&mut self, a: [u8; 16]) {
        self.bm()[field::DST].copy_from_slice(&a);
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.payload_end();
        &mut self.bm()[HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HDR: [u8; 40] = [
        0x60, 0x12, 0x34, 0x56, // version 6, tc 0x01, flow 0x23456
        0x00, 0x04, 0x11, 0x40, // payload 4, UDP, hop limit 64
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // 2001:db8::1
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // 2001:db8::2
    ];

    #[test]
    fn fields_read_and_write_literal_bytes() {
        let mut b = HDR.to_vec();
        b.extend_from_slice(&[1, 2, 3, 4, 0xee]); // payload + 1 trailing byte
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.traffic_class(), p.flow_label()), (0x01, 0x23456));
        assert_eq!(
            (p.payload_len(), p.next_header(), p.hop_limit()),
            (4, 17, 64)
        );
        assert_eq!(p.src()[15], 1);
        assert_eq!(p.dst()[..4], [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(p.payload(), &[1, 2, 3, 4]);

        let mut w = [0u8; 44];
        let mut q = Ipv6Packet { buffer: &mut w[..] };
        q.set_ver_tc_flow(0x01, 0x23456);
        q.set_payload_len(4);
        q.set_next_header(17);
        q.set_hop_limit(64);
        q.set_src(p.src());
        q.set_dst(p.dst());
        assert_eq!(q.decrement_hop_limit(), Some(63));
        q.set_hop_limit(64);
        assert_eq!(&w[..40], &HDR);
    }

    #[test]
    fn bad_headers_are_errors() {
        let e = |b: &[u8]| Ipv6Packet::new_checked(b).unwrap_err().to_string();
        assert_eq!(e(&HDR[..39]), "ipv6: 39 bytes, need 40");
        assert_eq!(e(&HDR), "ipv6: 40 bytes, need 44");
        let mut v4 = HDR;
        v4[0] = 0x45;
        assert_eq!(e(&v4), "ipv6: version is not 6");
    }

    proptest::proptest! {
        /// Any field values: each setter's value reads back.
        #[test]
        fn setters_then_getters_round_trip(
            tc in proptest::prelude::any::<u8>(),
            flow in 0u32..1 << 20,
            plen in 0u16..64,
            nh in proptest::prelude::any::<u8>(),
            hop in proptest::prelude::any::<u8>(),
            src in proptest::prelude::any::<[u8; 16]>(),
            dst in proptest::prelude::any::<[u8; 16]>(),
        ) {
            let mut b = vec![0u8; HEADER_LEN + plen as usize];
            let mut p = Ipv6Packet { buffer: &mut b[..] };
            p.set_ver_tc_flow(tc, flow);
            p.set_payload_len(plen);
            p.set_next_header(nh);
            p.set_hop_limit(hop);
            p.set_src(src);
            p.set_dst(dst);
            let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
            proptest::prop_assert_eq!((p.traffic_class(), p.flow_label(), p.payload_len()), (tc, flow, plen));
            proptest::prop_assert_eq!((p.next_header(), p.hop_limit(), p.src(), p.dst()), (nh, hop, src, dst));
            proptest::prop_assert_eq!(p.payload().len(), plen as usize);
            proptest::prop_assert_eq!(p.decrement_hop_limit(), (hop > 1).then(|| hop - 1));
        }

        /// Any bytes: a view whose getters all answer, or an error; below 40
        /// bytes or the payload length, a truncation error.
        #[test]
        fn views_over_any_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            match Ipv6Packet::new_checked(&bytes[..]) {
                Ok(p) => {
                    let _ = (p.traffic_class(), p.flow_label(), p.next_header(), p.hop_limit(), p.src(), p.dst());
                    proptest::prop_assert_eq!(p.payload().len(), p.payload_len() as usize);
                }
                Err(NetError::Truncated { need, have, .. }) => {
                    proptest::prop_assert!(have < need && have == bytes.len());
                }
                Err(NetError::Malformed { .. }) => proptest::prop_assert!(bytes[0] >> 4 != 6),
            }
        }

        /// A payload length set past the buffer: the payload is what the
        /// buffer holds.
        #[test]
        fn lengths_set_past_the_buffer_never_panic(extra in 0usize..40, plen in proptest::prelude::any::<u16>()) {
            let mut b = vec![0u8; HEADER_LEN + extra];
            let mut p = Ipv6Packet { buffer: &mut b[..] };
            p.set_ver_tc_flow(0, 0);
            p.set_payload_len(extra as u16);
            let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
            p.set_payload_len(plen);
            proptest::prop_assert_eq!(p.payload().len(), extra.min(plen as usize));
            proptest::prop_assert_eq!(p.payload_mut().len(), extra.min(plen as usize));
        }
    }

    /// A payload length set past the buffer: the payload is what the buffer
    /// holds.
    #[test]
    fn payload_length_set_past_the_buffer_cuts_the_payload() {
        let mut b = HDR.to_vec();
        b.extend_from_slice(&[1, 2, 3, 4]);
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_payload_len(1000);
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert_eq!(p.payload_mut().len(), 4);
    }
}
