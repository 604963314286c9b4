//! IPv4 headers.
//!
//! [`Ipv4Packet`] views the header (options included, as its IHL says) and
//! its payload: lengths, fragment fields, TTL, protocol, addresses, the
//! header checksum ([`fill_checksum`](Ipv4Packet::fill_checksum),
//! [`verify_checksum`](Ipv4Packet::verify_checksum)), and
//! [`decrement_ttl`](Ipv4Packet::decrement_ttl), which updates the checksum
//! incrementally as a router does. The payload stops at the total length.
//!
//! ```
//! use sluice::net::Ipv4Packet;
//!
//! let mut bytes = [0u8; 28];
//! bytes[0] = 0x45; // version 4, a 20-byte header
//! bytes[3] = 28; // total length
//! let mut ip = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
//! ip.set_ttl(64);
//! ip.set_protocol(sluice::net::ip_proto::UDP);
//! ip.set_src([10, 0, 0, 1]);
//! ip.set_dst([198, 18, 0, 1]);
//! ip.fill_checksum();
//! assert!(ip.verify_checksum());
//! assert_eq!(ip.decrement_ttl(), Some(63));
//! assert!(ip.verify_checksum(), "the checksum follows the TTL");
//! assert_eq!(ip.payload().len(), 8);
//! assert!(Ipv4Packet::new_checked(&[0x46u8; 20][..]).is_err()); // IHL 6 needs 24 bytes
//! ```

use super::checksum;
use super::{NetError, be16, check_len, set_be16};

/// Byte ranges of the IPv4 header.
pub mod field {
    use std::ops::Range;
    /// Version (high nibble) and header length in words (low nibble).
    pub const VER_IHL: usize = 0;
    /// DSCP and ECN.
    pub const DSCP_ECN: usize = 1;
    /// Total length.
    pub const LENGTH: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags and fragment offset.
    pub const FLG_OFF: Range<usize> = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC: Range<usize> = 12..16;
    /// Destination address.
    pub const DST: Range<usize> = 16..20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buffer` after checking the version, the header length and the
    /// total length against the buffer (trailing bytes, such as Ethernet
    /// padding, are allowed and excluded from [`payload`](Self::payload)).
    pub fn new_checked(buffer: T) -> Result<Self, NetError> {
        let b = buffer.as_ref();
        check_len("ipv4", b, HEADER_LEN)?;
        let malformed = |what| NetError::Malformed {
            header: "ipv4",
            what,
        };
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(malformed("version is not 4"));
        }
        let ihl = (b[field::VER_IHL] & 0xf) as usize * 4;
        if ihl < HEADER_LEN {
            return Err(malformed("header length below 20 bytes"));
        }
        check_len("ipv4", b, ihl)?;
        let total = be16(b, field::LENGTH.start) as usize;
        if total < ihl {
            return Err(malformed("total length below the header length"));
        }
        check_len("ipv4", b, total)?;
        Ok(Ipv4Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        (self.b()[field::VER_IHL] & 0xf) as usize * 4
    }

    /// DSCP and ECN byte.
    pub fn dscp_ecn(&self) -> u8 {
        self.b()[field::DSCP_ECN]
    }

    /// Total length (header and payload).
    pub fn total_len(&self) -> u16 {
        be16(self.b(), field::LENGTH.start)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.b(), field::IDENT.start)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        be16(self.b(), field::FLG_OFF.start) & 0x4000 != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        be16(self.b(), field::FLG_OFF.start) & 0x2000 != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.b(), field::FLG_OFF.start) & 0x1fff) * 8
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }

    /// Protocol.
    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTOCOL]
    }

    /// Header checksum.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM.start)
    }

    /// Source address.
    pub fn src(&self) -> [u8; 4] {
        self.b()[field::SRC].try_into().expect("4 bytes")
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 4] {
        self.b()[field::DST].try_into().expect("4 bytes")
    }

    /// True when the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.b()[..self.header_end()]) == 0
    }

    /// The payload: from the end of the header to the total length.
    pub fn payload(&self) -> &[u8] {
        let (h, t) = self.payload_range();
        &self.b()[h..t]
    }

    /// The end of the header: the header length, cut to the buffer (a setter
    /// may have written one longer).
    fn header_end(&self) -> usize {
        self.header_len().min(self.b().len())
    }

    /// Where the payload lies: the header length to the total length, both
    /// cut to the buffer, empty when they cross (setters may have written
    /// lengths that disagree with the buffer and each other).
    fn payload_range(&self) -> (usize, usize) {
        let t = (self.total_len() as usize).min(self.b().len());
        (self.header_len().min(t), t)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets version 4 and the header length in bytes (a multiple of 4).
    pub fn set_header_len(&mut self, len: usize) {
        self.bm()[field::VER_IHL] = 0x40 | ((len / 4) as u8 & 0xf);
    }

    /// Sets the DSCP/ECN byte.
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.bm()[field::DSCP_ECN] = v;
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        set_be16(self.bm(), field::LENGTH.start, len);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        set_be16(self.bm(), field::IDENT.start, v);
    }

    /// Sets the flags and fragment offset word (don't-fragment, no offset is
    /// `0x4000`).
    pub fn set_flags_frag(&mut self, v: u16) {
        set_be16(self.bm(), field::FLG_OFF.start, v);
    }

    /// Sets the TTL (checksum not updated).
    pub fn set_ttl(&mut self, ttl: u8) {
        self.bm()[field::TTL] = ttl;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, p: u8) {
        self.bm()[field::PROTOCOL] = p;
    }

    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.bm(), field::CHECKSUM.start, v);
    }

    /// Sets the source address.
    pub fn set_src(&mut self, a: [u8; 4]) {
        self.bm()[field::SRC].copy_from_slice(&a);
    }

    /// Sets the destination address.
    pub fn set_dst(&mut self, a: [u8; 4]) {
        self.bm()[field::DST].copy_from_slice(&a);
    }

    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let len = self.header_end();
        let c = checksum::checksum(&self.buffer.as_ref()[..len]);
        self.set_checksum(c);
    }

    /// Decrements the TTL and updates the checksum incrementally (RFC 1624),
    /// as a router does. Returns the new TTL, or `None` (and changes nothing)
    /// when it is already 0 or 1 and the packet must not be forwarded.
    pub fn decrement_ttl(&mut self) -> Option<u8> {
        let ttl = self.ttl();
        if ttl <= 1 {
            return None;
        }
        // TTL is the high byte of the word it shares with the protocol.
        let proto = self.protocol() as u16;
        let old = (ttl as u16) << 8 | proto;
        let new = ((ttl - 1) as u16) << 8 | proto;
        let c = checksum::update(self.checksum(), old, new);
        self.set_ttl(ttl - 1);
        self.set_checksum(c);
        Some(ttl - 1)
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = self.payload_range();
        &mut self.bm()[h..t]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 192.168.0.1 -> 192.168.0.199, UDP, TTL 64, DF, total 115 (from a capture).
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn packet() -> Vec<u8> {
        let mut v = HDR.to_vec();
        v.resize(115, 0xab);
        v
    }

    #[test]
    fn fields_read_from_literal_bytes() {
        let b = packet();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.header_len(), p.total_len(), p.ttl()), (20, 115, 64));
        assert_eq!((p.protocol(), p.checksum()), (17, 0xb861));
        assert!(p.dont_frag() && !p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.src(), [192, 168, 0, 1]);
        assert_eq!(p.dst(), [192, 168, 0, 199]);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 95);
    }

    #[test]
    fn setters_rebuild_the_same_bytes() {
        let mut b = [0u8; 115];
        let mut p = Ipv4Packet { buffer: &mut b[..] };
        p.set_header_len(20);
        p.set_total_len(115);
        p.set_flags_frag(0x4000);
        p.set_ttl(64);
        p.set_protocol(17);
        p.set_src([192, 168, 0, 1]);
        p.set_dst([192, 168, 0, 199]);
        p.fill_checksum();
        assert_eq!(&b[..20], &HDR);
    }

    #[test]
    fn ttl_decrement_keeps_the_checksum_right() {
        let mut b = packet();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        for expect in (1..64).rev() {
            assert_eq!(p.decrement_ttl(), Some(expect));
            assert!(p.verify_checksum(), "ttl {expect}");
        }
        assert_eq!(p.decrement_ttl(), None);
        assert_eq!(p.ttl(), 1);
    }

    #[test]
    fn bad_headers_are_errors() {
        let b = packet();
        let e = |bytes: &[u8]| Ipv4Packet::new_checked(bytes).unwrap_err().to_string();
        assert_eq!(e(&b[..19]), "ipv4: 19 bytes, need 20");
        assert_eq!(e(&b[..100]), "ipv4: 100 bytes, need 115");
        let mut v6 = b.clone();
        v6[0] = 0x65;
        assert_eq!(e(&v6), "ipv4: version is not 4");
        let mut short_ihl = b.clone();
        short_ihl[0] = 0x44;
        assert_eq!(e(&short_ihl), "ipv4: header length below 20 bytes");
        let mut bad_total = b.clone();
        bad_total[2..4].copy_from_slice(&10u16.to_be_bytes());
        assert_eq!(e(&bad_total), "ipv4: total length below the header length");
    }

    proptest::proptest! {
        /// Any bytes: an error or a view whose getters all work.
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            if let Ok(p) = Ipv4Packet::new_checked(&bytes[..]) {
                let _ = (p.payload().len(), p.verify_checksum(), p.src(), p.frag_offset());
            }
        }
    }

    proptest::proptest! {
        /// Any field values: each setter's value reads back; a filled checksum
        /// verifies, and keeps verifying as the TTL counts down.
        #[test]
        fn setters_then_getters_round_trip(
            words in 5usize..=15,
            extra in 0usize..40,
            dscp in proptest::prelude::any::<u8>(),
            ident in proptest::prelude::any::<u16>(),
            flags in proptest::prelude::any::<u16>(),
            ttl in proptest::prelude::any::<u8>(),
            proto in proptest::prelude::any::<u8>(),
            src in proptest::prelude::any::<[u8; 4]>(),
            dst in proptest::prelude::any::<[u8; 4]>(),
        ) {
            let hl = words * 4;
            let mut b = vec![0u8; hl + extra];
            let mut p = Ipv4Packet { buffer: &mut b[..] };
            p.set_header_len(hl);
            p.set_total_len((hl + extra) as u16);
            p.set_dscp_ecn(dscp);
            p.set_ident(ident);
            p.set_flags_frag(flags);
            p.set_ttl(ttl);
            p.set_protocol(proto);
            p.set_src(src);
            p.set_dst(dst);
            p.fill_checksum();
            let p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
            proptest::prop_assert_eq!((p.header_len(), p.total_len() as usize), (hl, hl + extra));
            proptest::prop_assert_eq!((p.dscp_ecn(), p.ident(), p.ttl(), p.protocol()), (dscp, ident, ttl, proto));
            proptest::prop_assert_eq!((p.src(), p.dst()), (src, dst));
            proptest::prop_assert_eq!(p.dont_frag(), flags & 0x4000 != 0);
            proptest::prop_assert_eq!(p.more_frags(), flags & 0x2000 != 0);
            proptest::prop_assert_eq!(p.frag_offset(), (flags & 0x1fff) * 8);
            proptest::prop_assert_eq!(p.payload().len(), extra);
            proptest::prop_assert!(p.verify_checksum());
            let mut p = p;
            while let Some(t) = p.decrement_ttl() {
                proptest::prop_assert_eq!(t, p.ttl());
                proptest::prop_assert!(p.verify_checksum(), "ttl {}", t);
            }
            proptest::prop_assert!(p.ttl() <= 1);
        }

        /// Headers too short for 20 bytes or for their own lengths are
        /// truncation errors.
        #[test]
        fn short_buffers_are_rejected(words in 5usize..=15, extra in 0usize..40, cut in 1usize..100) {
            let hl = words * 4;
            let mut b = vec![0u8; hl + extra];
            let mut p = Ipv4Packet { buffer: &mut b[..] };
            p.set_header_len(hl);
            p.set_total_len((hl + extra) as u16);
            let short = &b[..(hl + extra).saturating_sub(cut)];
            let e = Ipv4Packet::new_checked(short).unwrap_err();
            let need = if short.len() < HEADER_LEN { HEADER_LEN } else if short.len() < hl { hl } else { hl + extra };
            proptest::prop_assert_eq!(e, NetError::Truncated { header: "ipv4", need, have: short.len() });
        }

        /// Any lengths set on a valid packet, even ones that disagree with
        /// the buffer: the getters still answer, within the buffer.
        #[test]
        fn lengths_set_past_the_buffer_never_panic(
            len in 20usize..80,
            hl in proptest::prelude::any::<u8>(),
            total in proptest::prelude::any::<u16>(),
        ) {
            let mut b = vec![0u8; len];
            let mut p = Ipv4Packet { buffer: &mut b[..] };
            p.set_header_len(20);
            p.set_total_len(len as u16);
            let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
            p.set_header_len(hl as usize);
            p.set_total_len(total);
            proptest::prop_assert!(p.payload().len() <= len);
            let _ = p.verify_checksum();
            p.fill_checksum();
            let _ = p.decrement_ttl();
            proptest::prop_assert!(p.payload_mut().len() <= len);
        }
    }

    /// Header and total lengths set past the buffer, or crossing: the
    /// payload is what lies between them within the buffer, and the checksum
    /// covers the header as far as the buffer holds it.
    #[test]
    fn lengths_set_past_the_buffer_cut_the_payload() {
        let mut b = packet();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_total_len(200);
        assert_eq!(p.payload().len(), 95);
        p.set_header_len(60);
        p.set_total_len(40);
        assert!(p.payload().is_empty() && p.payload_mut().is_empty());
        let mut b = HDR;
        b[2..4].copy_from_slice(&20u16.to_be_bytes());
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_header_len(60);
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert!(p.payload().is_empty());
    }
}
