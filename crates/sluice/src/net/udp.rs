//! UDP datagrams.
//!
//! [`UdpDatagram`] views the 8-byte header — ports, length, checksum — and
//! its payload, which stops at the length field. The checksum covers a
//! pseudo-header taken from the IP header: pass its sum
//! ([`checksum::pseudo_ipv4`] or
//! [`pseudo_ipv6`](super::checksum::pseudo_ipv6)) to
//! [`fill_checksum`](UdpDatagram::fill_checksum) and
//! [`verify_checksum`](UdpDatagram::verify_checksum).
//!
//! ```
//! use sluice::net::{UdpDatagram, checksum, ip_proto};
//!
//! let mut bytes = [0u8; 12];
//! bytes[5] = 12; // the length: header and a 4-byte payload
//! let mut udp = UdpDatagram::new_checked(&mut bytes[..]).unwrap();
//! udp.set_src_port(1024);
//! udp.set_dst_port(9);
//! udp.payload_mut().copy_from_slice(b"ping");
//! let pseudo = checksum::pseudo_ipv4([10, 0, 0, 1], [198, 18, 0, 1], ip_proto::UDP, 12);
//! udp.fill_checksum(pseudo);
//! assert!(udp.verify_checksum(pseudo));
//! bytes[8] ^= 1; // a flipped bit is caught
//! assert!(!UdpDatagram::new_checked(&bytes[..]).unwrap().verify_checksum(pseudo));
//! ```

use super::checksum;
use super::{NetError, be16, check_len, set_be16};

/// Byte ranges of the UDP header.
pub mod field {
    use std::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length (header and payload).
    pub const LENGTH: Range<usize> = 4..6;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpDatagram<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpDatagram<T> {
    /// Wraps `buffer` after checking the header and that the length field
    /// fits the buffer.
    pub fn new_checked(buffer: T) -> Result<Self, NetError> {
        let b = buffer.as_ref();
        check_len("udp", b, HEADER_LEN)?;
        let len = be16(b, field::LENGTH.start) as usize;
        if len < HEADER_LEN {
            return Err(NetError::Malformed {
                header: "udp",
                what: "length below 8 bytes",
            });
        }
        check_len("udp", b, len)?;
        Ok(UdpDatagram { buffer })
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// Length field.
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Always false: a datagram has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Checksum field (0: none, over IPv4).
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        let end = self.end();
        &self.buffer.as_ref()[HEADER_LEN.min(end)..end]
    }

    /// The end of the datagram: the length field, cut to the buffer (a
    /// setter may have written one past it, or below the header).
    fn end(&self) -> usize {
        (self.len() as usize).min(self.buffer.as_ref().len())
    }

    /// True when the checksum, with the pseudo-header sum `pseudo` (from
    /// [`checksum::pseudo_ipv4`] or [`checksum::pseudo_ipv6`]), is correct or
    /// absent (0).
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        self.checksum() == 0
            || checksum::fold(checksum::sum(pseudo, &self.buffer.as_ref()[..self.end()])) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpDatagram<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::SRC_PORT.start, v);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::DST_PORT.start, v);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::LENGTH.start, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }

    /// Computes the checksum with the pseudo-header sum `pseudo` and writes
    /// it (a computed 0 is sent as 0xffff).
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let len = self.end();
        let c = !checksum::fold(checksum::sum(pseudo, &self.buffer.as_ref()[..len]));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.end();
        &mut self.buffer.as_mut()[HEADER_LEN.min(end)..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::ip_proto;

    #[test]
    fn fields_and_checksum_against_literal_bytes() {
        // 10.0.0.1:1234 -> 10.0.0.2:80, payload "hi", checksum by hand:
        // pseudo = 0a00+0001+0a00+0002+0011+000a = 0x141e; header+data
        // = 04d2+0050+000a+0000+6869 = 0x6d95; sum 0x81b3; complement 0x7e4c.
        let mut b = [0x04, 0xd2, 0x00, 0x50, 0x00, 0x0a, 0x00, 0x00, b'h', b'i'];
        let pseudo = checksum::pseudo_ipv4([10, 0, 0, 1], [10, 0, 0, 2], ip_proto::UDP, 10);
        let mut u = UdpDatagram::new_checked(&mut b[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (1234, 80, 10));
        assert_eq!(u.payload(), b"hi");
        u.fill_checksum(pseudo);
        assert_eq!(u.checksum(), 0x7e4c);
        assert!(u.verify_checksum(pseudo));
        u.payload_mut()[0] = b'H';
        assert!(!u.verify_checksum(pseudo));
    }

    #[test]
    fn bad_lengths_are_errors() {
        let e = |b: &[u8]| UdpDatagram::new_checked(b).unwrap_err().to_string();
        assert_eq!(e(&[0; 7]), "udp: 7 bytes, need 8");
        assert_eq!(e(&[0, 0, 0, 0, 0, 4, 0, 0]), "udp: length below 8 bytes");
        assert_eq!(e(&[0, 0, 0, 0, 0, 20, 0, 0, 1]), "udp: 9 bytes, need 20");
    }

    proptest::proptest! {
        /// Any field values: each setter's value reads back; a filled checksum
        /// is never 0 and verifies, and one flipped payload bit fails it.
        #[test]
        fn setters_then_getters_round_trip(
            sp in proptest::prelude::any::<u16>(),
            dp in proptest::prelude::any::<u16>(),
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            src in proptest::prelude::any::<[u8; 4]>(),
            dst in proptest::prelude::any::<[u8; 4]>(),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let len = HEADER_LEN + payload.len();
            let mut b = vec![0u8; HEADER_LEN];
            b.extend_from_slice(&payload);
            b[5] = len as u8;
            let mut u = UdpDatagram::new_checked(&mut b[..]).unwrap();
            u.set_src_port(sp);
            u.set_dst_port(dp);
            u.set_len(len as u16);
            let pseudo = checksum::pseudo_ipv4(src, dst, ip_proto::UDP, len as u16);
            u.fill_checksum(pseudo);
            proptest::prop_assert_eq!((u.src_port(), u.dst_port(), u.len() as usize), (sp, dp, len));
            proptest::prop_assert_eq!(u.payload(), &payload[..]);
            proptest::prop_assert_ne!(u.checksum(), 0);
            proptest::prop_assert!(u.verify_checksum(pseudo));
            if !payload.is_empty() {
                let i = flip.index(payload.len());
                u.payload_mut()[i] ^= 1;
                proptest::prop_assert!(!u.verify_checksum(pseudo));
            }
        }

        /// Any bytes: a view whose getters all answer, or an error; below 8
        /// bytes or the length field, a truncation error.
        #[test]
        fn views_over_any_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), pseudo in 0u32..1 << 21) {
            match UdpDatagram::new_checked(&bytes[..]) {
                Ok(u) => {
                    let _ = (u.src_port(), u.dst_port(), u.checksum(), u.verify_checksum(pseudo));
                    proptest::prop_assert_eq!(u.payload().len(), u.len() as usize - HEADER_LEN);
                }
                Err(NetError::Truncated { need, have, .. }) => {
                    proptest::prop_assert!(have < need && have == bytes.len());
                }
                Err(NetError::Malformed { .. }) => proptest::prop_assert!(be16(&bytes, 4) < 8),
            }
        }

        /// A length field set below the header or past the buffer: the getters
        /// still answer, within the buffer.
        #[test]
        fn lengths_set_past_the_buffer_never_panic(extra in 0usize..40, len in proptest::prelude::any::<u16>(), pseudo in 0u32..1 << 21) {
            let mut b = vec![0u8; HEADER_LEN + extra];
            b[5] = (HEADER_LEN + extra) as u8;
            let mut u = UdpDatagram::new_checked(&mut b[..]).unwrap();
            u.set_len(len);
            proptest::prop_assert!(u.payload().len() <= extra);
            let _ = u.verify_checksum(pseudo);
            u.fill_checksum(pseudo);
            proptest::prop_assert!(u.payload_mut().len() <= extra);
        }
    }

    /// A length field set below the header (the fuzzer's first find): an
    /// empty payload; the checksum, meaningless then, is still computed.
    #[test]
    fn length_set_below_the_header_is_an_empty_payload() {
        let mut b = [0x04, 0x00, 0x00, 0x09, 0x00, 0x0a, 0x00, 0x00, b'h', b'i'];
        let mut u = UdpDatagram::new_checked(&mut b[..]).unwrap();
        u.set_len(4);
        assert!(u.payload().is_empty() && u.payload_mut().is_empty());
        u.fill_checksum(0);
        let _ = u.verify_checksum(0);
        u.set_len(200);
        assert_eq!(u.payload(), b"hi");
    }
}
