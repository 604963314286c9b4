//! The virtio-net header (`struct virtio_net_hdr`, VIRTIO 1.2 5.1.6).
//!
//! Every frame on a virtio-net receive or transmit queue is preceded by
//! this header: checksum offload and segmentation hints, and, on receive
//! with `VIRTIO_NET_F_MRG_RXBUF`, how many buffers the frame spans. It is 12
//! bytes when `VIRTIO_F_VERSION_1` or `VIRTIO_NET_F_MRG_RXBUF` is
//! negotiated and 10 bytes (no `num_buffers`) otherwise; [`header_len`]
//! says which. Multi-byte fields are little-endian.
//!
//! [`NetHdr`] views the header at the front of a byte buffer, like the
//! protocol headers of [`crate::net`].
//!
//! ```
//! use sluice::virtio::net_hdr::{NetHdr, flags, gso, header_len};
//! use sluice::virtio::{VIRTIO_F_VERSION_1, feature};
//!
//! let len = header_len(feature(VIRTIO_F_VERSION_1));
//! let mut bytes = [0u8; 12];
//! let mut hdr = NetHdr::new_checked(&mut bytes[..], len).unwrap();
//! hdr.set_flags(flags::NEEDS_CSUM);
//! hdr.set_csum_start(34);
//! hdr.set_csum_offset(6);
//! assert!(hdr.set_num_buffers(1));
//! assert_eq!(hdr.gso_type(), gso::NONE);
//! assert_eq!(bytes, [1, 0, 0, 0, 0, 0, 34, 0, 6, 0, 1, 0]);
//! ```

use super::{VIRTIO_F_VERSION_1, VIRTIO_NET_F_MRG_RXBUF, has_feature};
use crate::net::NetError;

/// Byte ranges of the header's fields.
pub mod field {
    use std::ops::Range;
    /// Flags ([`super::flags`]).
    pub const FLAGS: usize = 0;
    /// Segmentation type ([`super::gso`]).
    pub const GSO_TYPE: usize = 1;
    /// Length of the headers to copy into each segment.
    pub const HDR_LEN: Range<usize> = 2..4;
    /// Segment payload size.
    pub const GSO_SIZE: Range<usize> = 4..6;
    /// Where checksumming starts.
    pub const CSUM_START: Range<usize> = 6..8;
    /// Where, after `csum_start`, the checksum goes.
    pub const CSUM_OFFSET: Range<usize> = 8..10;
    /// Buffers the received frame spans (12-byte header only).
    pub const NUM_BUFFERS: Range<usize> = 10..12;
}

/// Values of the flags field.
pub mod flags {
    /// The checksum from `csum_start` is to be computed and stored at
    /// `csum_start + csum_offset`.
    pub const NEEDS_CSUM: u8 = 1;
    /// The checksum is known good (receive).
    pub const DATA_VALID: u8 = 2;
    /// `csum_start`/`csum_offset` carry coalescing information instead.
    pub const RSC_INFO: u8 = 4;
}

/// Values of the segmentation type field.
pub mod gso {
    /// Not a segmentation offload.
    pub const NONE: u8 = 0;
    /// TCP over IPv4.
    pub const TCPV4: u8 = 1;
    /// UDP fragmentation offload.
    pub const UDP: u8 = 3;
    /// TCP over IPv6.
    pub const TCPV6: u8 = 4;
    /// UDP segmentation.
    pub const UDP_L4: u8 = 5;
    /// Flag: the TCP segments carry ECN.
    pub const ECN: u8 = 0x80;
}

/// The header with `num_buffers`.
pub const HEADER_LEN: usize = 12;
/// The legacy header without `num_buffers`.
pub const LEGACY_HEADER_LEN: usize = 10;

/// The header's length for the negotiated `features`: 12 bytes with
/// `VIRTIO_F_VERSION_1` or `VIRTIO_NET_F_MRG_RXBUF`, else 10.
pub const fn header_len(features: u64) -> usize {
    if has_feature(features, VIRTIO_F_VERSION_1) || has_feature(features, VIRTIO_NET_F_MRG_RXBUF) {
        HEADER_LEN
    } else {
        LEGACY_HEADER_LEN
    }
}

/// A view of a virtio-net header at the front of `buffer`.
#[derive(Debug, Clone)]
pub struct NetHdr<T> {
    buffer: T,
    len: usize,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn set_le16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

impl<T: AsRef<[u8]>> NetHdr<T> {
    /// Wraps `buffer`, whose header is `len` bytes ([`HEADER_LEN`] or
    /// [`LEGACY_HEADER_LEN`], see [`header_len`]), after checking it holds
    /// them.
    pub fn new_checked(buffer: T, len: usize) -> Result<Self, NetError> {
        if len != HEADER_LEN && len != LEGACY_HEADER_LEN {
            return Err(NetError::Malformed {
                header: "virtio_net_hdr",
                what: "header length neither 10 nor 12",
            });
        }
        let have = buffer.as_ref().len();
        if have < len {
            return Err(NetError::Truncated {
                header: "virtio_net_hdr",
                need: len,
                have,
            });
        }
        Ok(NetHdr { buffer, len })
    }

    /// The header's length: 10 or 12.
    pub fn header_len(&self) -> usize {
        self.len
    }

    /// Flags ([`flags`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Segmentation type ([`gso`]).
    pub fn gso_type(&self) -> u8 {
        self.buffer.as_ref()[field::GSO_TYPE]
    }

    /// Length of the headers to copy into each segment.
    pub fn hdr_len(&self) -> u16 {
        le16(self.buffer.as_ref(), field::HDR_LEN.start)
    }

    /// Segment payload size.
    pub fn gso_size(&self) -> u16 {
        le16(self.buffer.as_ref(), field::GSO_SIZE.start)
    }

    /// Where checksumming starts.
    pub fn csum_start(&self) -> u16 {
        le16(self.buffer.as_ref(), field::CSUM_START.start)
    }

    /// Where, after `csum_start`, the checksum goes.
    pub fn csum_offset(&self) -> u16 {
        le16(self.buffer.as_ref(), field::CSUM_OFFSET.start)
    }

    /// Buffers the frame spans; `None` in a 10-byte header.
    pub fn num_buffers(&self) -> Option<u16> {
        (self.len == HEADER_LEN).then(|| le16(self.buffer.as_ref(), field::NUM_BUFFERS.start))
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.len..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NetHdr<T> {
    /// Sets the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    /// Sets the segmentation type.
    pub fn set_gso_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::GSO_TYPE] = v;
    }

    /// Sets the length of the headers to copy into each segment.
    pub fn set_hdr_len(&mut self, v: u16) {
        set_le16(self.buffer.as_mut(), field::HDR_LEN.start, v);
    }

    /// Sets the segment payload size.
    pub fn set_gso_size(&mut self, v: u16) {
        set_le16(self.buffer.as_mut(), field::GSO_SIZE.start, v);
    }

    /// Sets where checksumming starts.
    pub fn set_csum_start(&mut self, v: u16) {
        set_le16(self.buffer.as_mut(), field::CSUM_START.start, v);
    }

    /// Sets where, after `csum_start`, the checksum goes.
    pub fn set_csum_offset(&mut self, v: u16) {
        set_le16(self.buffer.as_mut(), field::CSUM_OFFSET.start, v);
    }

    /// Sets the number of buffers; false (and nothing written) in a 10-byte
    /// header, which has no such field.
    pub fn set_num_buffers(&mut self, v: u16) -> bool {
        if self.len != HEADER_LEN {
            return false;
        }
        set_le16(self.buffer.as_mut(), field::NUM_BUFFERS.start, v);
        true
    }

    /// Zeroes every field: no offload, one buffer unset.
    pub fn clear(&mut self) {
        let len = self.len;
        self.buffer.as_mut()[..len].fill(0);
    }

    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.buffer.as_mut()[len..]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::virtio::feature;

    /// A transmit header of a TCPv4 segmentation offload, byte by byte.
    const TSO: [u8; 14] = [
        0x01, // flags: NEEDS_CSUM
        0x01, // gso_type: TCPV4
        0x36, 0x00, // hdr_len 54
        0xa8, 0x05, // gso_size 1448
        0x22, 0x00, // csum_start 34
        0x10, 0x00, // csum_offset 16
        0x01, 0x00, // num_buffers 1
        0xee, 0xff, // payload
    ];

    #[test]
    fn fields_read_from_literal_bytes() {
        let hdr = NetHdr::new_checked(&TSO[..], HEADER_LEN).unwrap();
        assert_eq!(hdr.flags(), flags::NEEDS_CSUM);
        assert_eq!(hdr.gso_type(), gso::TCPV4);
        assert_eq!(hdr.hdr_len(), 54);
        assert_eq!(hdr.gso_size(), 1448);
        assert_eq!(hdr.csum_start(), 34);
        assert_eq!(hdr.csum_offset(), 16);
        assert_eq!(hdr.num_buffers(), Some(1));
        assert_eq!(hdr.payload(), [0xee, 0xff]);
        let legacy = NetHdr::new_checked(&TSO[..], LEGACY_HEADER_LEN).unwrap();
        assert_eq!(legacy.num_buffers(), None);
        assert_eq!(legacy.payload()[..2], [0x01, 0x00]);
    }

    #[test]
    fn setters_write_the_literal_bytes() {
        let mut bytes = [0xaau8; 14];
        let mut hdr = NetHdr::new_checked(&mut bytes[..], HEADER_LEN).unwrap();
        hdr.clear();
        hdr.set_flags(flags::NEEDS_CSUM);
        hdr.set_gso_type(gso::TCPV4);
        hdr.set_hdr_len(54);
        hdr.set_gso_size(1448);
        hdr.set_csum_start(34);
        hdr.set_csum_offset(16);
        assert!(hdr.set_num_buffers(1));
        hdr.payload_mut().copy_from_slice(&[0xee, 0xff]);
        assert_eq!(bytes, TSO);

        let mut short = [0u8; 12];
        let mut legacy = NetHdr::new_checked(&mut short[..], LEGACY_HEADER_LEN).unwrap();
        assert!(!legacy.set_num_buffers(3));
        assert_eq!(short, [0; 12], "no num_buffers in a 10-byte header");
    }

    #[test]
    fn length_follows_the_features_and_is_checked() {
        assert_eq!(header_len(0), LEGACY_HEADER_LEN);
        assert_eq!(header_len(feature(VIRTIO_F_VERSION_1)), HEADER_LEN);
        assert_eq!(header_len(feature(VIRTIO_NET_F_MRG_RXBUF)), HEADER_LEN);
        assert_eq!(
            NetHdr::new_checked(&[0u8; 11][..], HEADER_LEN).unwrap_err(),
            NetError::Truncated {
                header: "virtio_net_hdr",
                need: 12,
                have: 11
            }
        );
        assert!(NetHdr::new_checked(&[0u8; 16][..], 11).is_err());
    }
}
