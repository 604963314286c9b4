//! TCP segments.

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
        &self.b()[self.header_len()..]
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
        let h = self.header_len();
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
}
