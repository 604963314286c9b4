//! TCP segments.
//!
//! [`TcpSegment`] views the header — ports, sequence and acknowledgement
//! numbers, data offset, flags, window, checksum — and its payload. As for
//! UDP, the checksum covers a pseudo-header whose sum the caller passes in
//! ([`checksum::pseudo_ipv4`] or
//! [`pseudo_ipv6`](super::checksum::pseudo_ipv6)). Options are payload to
//! this view: they lie between the fixed 20 bytes and the data offset.

use super::checksum;
use super::{NetError, be16, be32, check_len, set_be16, set_be32};

/// Byte ranges of the TCP header.
pub mod field {
    use std::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Sequence number.
    pub const SEQ: Range<usize> = 4..8;
    /// Acknowledgement number.
    pub const ACK: Range<usize> = 8..12;
    /// Data offset (high nibble, in 32-bit words).
    pub const DATA_OFF: usize = 12;
    /// Flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, URG 0x20).
    pub const FLAGS: usize = 13;
    /// Window.
    pub const WINDOW: Range<usize> = 14..16;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 16..18;
    /// Urgent pointer.
    pub const URGENT: Range<usize> = 18..20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

/// A view of a TCP segment (header and payload; the length comes from the IP
/// layer, so the view spans the whole buffer).
#[derive(Debug, Clone)]
pub struct TcpSegment<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// Wraps `buffer` after checking the header and its data offset.
    pub fn new_checked(buffer: T) -> Result<Self, NetError> {
        let b = buffer.as_ref();
        check_len("tcp", b, HEADER_LEN)?;
        let off = (b[field::DATA_OFF] >> 4) as usize * 4;
        if off < HEADER_LEN {
            return Err(NetError::Malformed {
                header: "tcp",
                what: "data offset below 20 bytes",
            });
        }
        check_len("tcp", b, off)?;
        Ok(TcpSegment { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), field::SRC_PORT.start)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), field::DST_PORT.start)
    }

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.b(), field::SEQ.start)
    }

    /// Acknowledgement number.
    pub fn ack(&self) -> u32 {
        be32(self.b(), field::ACK.start)
    }

    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        (self.b()[field::DATA_OFF] >> 4) as usize * 4
    }

    /// Flags byte.
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }

    /// Window.
    pub fn window(&self) -> u16 {
        be16(self.b(), field::WINDOW.start)
    }

    /// Checksum.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM.start)
    }

    /// The payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_end()..]
    }

    /// The end of the header, cut to the buffer (a setter may have written a
    /// header length past it).
    fn header_end(&self) -> usize {
        self.header_len().min(self.b().len())
    }

    /// True when the checksum is correct for the pseudo-header sum `pseudo`.
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        checksum::fold(checksum::sum(pseudo, self.b())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpSegment<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        set_be16(self.bm(), field::SRC_PORT.start, v);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        set_be16(self.bm(), field::DST_PORT.start, v);
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        set_be32(self.bm(), field::SEQ.start, v);
    }

    /// Sets the acknowledgement number.
    pub fn set_ack(&mut self, v: u32) {
        set_be32(self.bm(), field::ACK.start, v);
    }

    /// Sets the header length in bytes (a multiple of 4).
    pub fn set_header_len(&mut self, len: usize) {
        self.bm()[field::DATA_OFF] = ((len / 4) as u8) << 4;
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, f: u8) {
        self.bm()[field::FLAGS] = f;
    }

    /// Sets the window.
    pub fn set_window(&mut self, v: u16) {
        set_be16(self.bm(), field::WINDOW.start, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.bm(), field::CHECKSUM.start, v);
    }

    /// Computes the checksum over the whole buffer with `pseudo` and writes it.
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let c = !checksum::fold(checksum::sum(pseudo, self.buffer.as_ref()));
        self.set_checksum(c);
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_end();
        &mut self.bm()[h..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::ip_proto;

    #[test]
    fn fields_and_checksum_round_trip() {
        let mut b = [0u8; 24];
        let mut t = TcpSegment { buffer: &mut b[..] };
        t.set_src_port(0xc000);
        t.set_dst_port(443);
        t.set_seq(0x0102_0304);
        t.set_ack(0xa0b0_c0d0);
        t.set_header_len(20);
        t.set_flags(0x12);
        t.set_window(0xffff);
        t.payload_mut().copy_from_slice(b"data");
        let pseudo = checksum::pseudo_ipv4([1, 2, 3, 4], [5, 6, 7, 8], ip_proto::TCP, 24);
        t.fill_checksum(pseudo);
        assert_eq!(
            &b[..14],
            &[
                0xc0, 0x00, 0x01, 0xbb, 1, 2, 3, 4, 0xa0, 0xb0, 0xc0, 0xd0, 0x50, 0x12
            ]
        );
        let t = TcpSegment::new_checked(&b[..]).unwrap();
        assert_eq!(
            (t.src_port(), t.dst_port(), t.seq(), t.ack()),
            (0xc000, 443, 0x0102_0304, 0xa0b0_c0d0)
        );
        assert_eq!((t.header_len(), t.flags(), t.window()), (20, 0x12, 0xffff));
        assert_eq!(t.payload(), b"data");
        assert!(t.verify_checksum(pseudo));
        let mut c = b;
        c[22] ^= 1;
        assert!(
            !TcpSegment::new_checked(&c[..])
                .unwrap()
                .verify_checksum(pseudo)
        );
    }

    #[test]
    fn bad_headers_are_errors() {
        let e = |b: &[u8]| TcpSegment::new_checked(b).unwrap_err().to_string();
        assert_eq!(e(&[0; 19]), "tcp: 19 bytes, need 20");
        let mut small = [0u8; 20];
        small[12] = 0x40;
        assert_eq!(e(&small), "tcp: data offset below 20 bytes");
        let mut opts = [0u8; 20];
        opts[12] = 0x60;
        assert_eq!(e(&opts), "tcp: 20 bytes, need 24");
    }

    proptest::proptest! {
        /// Any field values: each setter's value reads back; a filled checksum
        /// verifies, and one flipped bit fails it.
        #[test]
        fn setters_then_getters_round_trip(
            words in 5usize..=15,
            sp in proptest::prelude::any::<u16>(),
            dp in proptest::prelude::any::<u16>(),
            seq in proptest::prelude::any::<u32>(),
            ack in proptest::prelude::any::<u32>(),
            flags in proptest::prelude::any::<u8>(),
            win in proptest::prelude::any::<u16>(),
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            src in proptest::prelude::any::<[u8; 16]>(),
            dst in proptest::prelude::any::<[u8; 16]>(),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let hl = words * 4;
            let mut b = vec![0u8; hl];
            b.extend_from_slice(&payload);
            let mut t = TcpSegment { buffer: &mut b[..] };
            t.set_header_len(hl);
            t.set_src_port(sp);
            t.set_dst_port(dp);
            t.set_seq(seq);
            t.set_ack(ack);
            t.set_flags(flags);
            t.set_window(win);
            let pseudo = checksum::pseudo_ipv6(src, dst, ip_proto::TCP, (hl + payload.len()) as u32);
            t.fill_checksum(pseudo);
            let t = TcpSegment::new_checked(&mut b[..]).unwrap();
            proptest::prop_assert_eq!((t.src_port(), t.dst_port(), t.seq(), t.ack()), (sp, dp, seq, ack));
            proptest::prop_assert_eq!((t.header_len(), t.flags(), t.window()), (hl, flags, win));
            proptest::prop_assert_eq!(t.payload(), &payload[..]);
            proptest::prop_assert!(t.verify_checksum(pseudo));
            let mut c = b.clone();
            let i = flip.index(c.len());
            c[i] ^= 0x10;
            // (Byte 12 holds the data offset: flipping it changes the view.)
            if i != 12 {
                proptest::prop_assert!(!TcpSegment::new_checked(&c[..]).unwrap().verify_checksum(pseudo));
            }
        }

        /// Any bytes: a view whose getters all answer, or an error; below 20
        /// bytes or the data offset, a truncation error.
        #[test]
        fn views_over_any_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80), pseudo in 0u32..1 << 21) {
            match TcpSegment::new_checked(&bytes[..]) {
                Ok(t) => {
                    let _ = (t.src_port(), t.dst_port(), t.seq(), t.ack(), t.flags(), t.window(), t.checksum());
                    let _ = t.verify_checksum(pseudo);
                    proptest::prop_assert_eq!(t.payload(), &bytes[t.header_len()..]);
                }
                Err(NetError::Truncated { need, have, .. }) => {
                    proptest::prop_assert!(have < need && have == bytes.len());
                }
                Err(NetError::Malformed { .. }) => proptest::prop_assert!(bytes[12] >> 4 < 5),
            }
        }

        /// Any header length set on a valid segment, even one past the buffer:
        /// the payload getters still answer, within the buffer.
        #[test]
        fn header_length_set_past_the_buffer_never_panics(extra in 0usize..40, hl in proptest::prelude::any::<u8>()) {
            let mut b = vec![0u8; HEADER_LEN + extra];
            b[12] = 0x50;
            let mut t = TcpSegment::new_checked(&mut b[..]).unwrap();
            t.set_header_len(hl as usize);
            proptest::prop_assert!(t.payload().len() <= HEADER_LEN + extra);
            proptest::prop_assert!(t.payload_mut().len() <= HEADER_LEN + extra);
        }
    }

    /// A header length set past the buffer: an empty payload.
    #[test]
    fn header_length_set_past_the_buffer_is_an_empty_payload() {
        let mut b = [0u8; 24];
        b[12] = 0x50;
        let mut t = TcpSegment::new_checked(&mut b[..]).unwrap();
        assert_eq!(t.payload().len(), 4);
        t.set_header_len(60);
        assert!(t.payload().is_empty() && t.payload_mut().is_empty());
    }
}
