//! Ethernet II frames and 802.1Q VLAN tags.
//!
//! [`EthernetFrame`] views the 14-byte header (destination and source
//! [`MacAddr`], [`EtherType`]) and its payload; [`VlanTag`] views the 4 bytes
//! after a VLAN or QinQ EtherType (priority, VLAN id, the inner EtherType).
//!
//! ```
//! use sluice::net::{EtherType, EthernetFrame, MacAddr};
//!
//! let mut bytes = [0u8; 60];
//! let mut frame = EthernetFrame::new_checked(&mut bytes[..]).unwrap();
//! frame.set_dst(MacAddr::BROADCAST);
//! frame.set_src(MacAddr([0x02, 0, 0, 0, 0, 1]));
//! frame.set_ethertype(EtherType::IPV4);
//! frame.swap_macs(); // what an l2fwd "macswap" does
//! assert_eq!(frame.src(), MacAddr::BROADCAST);
//! assert_eq!(frame.payload().len(), 46);
//! assert!(EthernetFrame::new_checked(&bytes[..13]).is_err()); // too short
//! ```

use super::{NetError, be16, check_len, set_be16};

/// A MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for a group (multicast or broadcast) address.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }
}

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// An EtherType.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// ARP.
    pub const ARP: EtherType = EtherType(0x0806);
    /// 802.1Q VLAN tag.
    pub const VLAN: EtherType = EtherType(0x8100);
    /// 802.1ad service VLAN tag (QinQ).
    pub const QINQ: EtherType = EtherType(0x88a8);
    /// IPv6.
    pub const IPV6: EtherType = EtherType(0x86dd);
}

/// Byte ranges of the Ethernet header.
pub mod field {
    use std::ops::Range;
    /// Destination MAC.
    pub const DST: Range<usize> = 0..6;
    /// Source MAC.
    pub const SRC: Range<usize> = 6..12;
    /// EtherType (or the first VLAN tag's TPID).
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// Start of the payload.
    pub const PAYLOAD: usize = 14;
}

/// Length of the Ethernet header (no VLAN tag).
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of an Ethernet frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer` after checking it holds a header.
    pub fn new_checked(buffer: T) -> Result<Self, NetError> {
        check_len("ethernet", buffer.as_ref(), HEADER_LEN)?;
        Ok(EthernetFrame { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC.
    pub fn dst(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        MacAddr(a)
    }

    /// Source MAC.
    pub fn src(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        MacAddr(a)
    }

    /// EtherType (the TPID when the frame is VLAN-tagged).
    pub fn ethertype(&self) -> EtherType {
        EtherType(be16(self.buffer.as_ref(), field::ETHERTYPE.start))
    }

    /// The payload after the 14-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac.0);
    }

    /// Sets the source MAC.
    pub fn set_src(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac.0);
    }

    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, t: EtherType) {
        set_be16(self.buffer.as_mut(), field::ETHERTYPE.start, t.0);
    }

    /// Swaps source and destination MACs (the `macswap` forwarding step).
    pub fn swap_macs(&mut self) {
        let b = self.buffer.as_mut();
        let (dst, rest) = b.split_at_mut(6);
        dst.swap_with_slice(&mut rest[..6]);
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// An 802.1Q tag: the 4 bytes after the MACs of a tagged frame (TPID, TCI),
/// viewed from the TCI on: TCI then the inner EtherType.
#[derive(Debug, Clone)]
pub struct VlanTag<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Wraps the bytes after the TPID (TCI, inner EtherType, payload).
    pub fn new_checked(buffer: T) -> Result<Self, NetError> {
        check_len("vlan", buffer.as_ref(), 4)?;
        Ok(VlanTag { buffer })
    }

    /// The whole TCI (priority, DEI, VLAN id).
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    /// The VLAN id (12 bits).
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The priority code point (3 bits).
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// The EtherType of what follows the tag.
    pub fn inner_ethertype(&self) -> EtherType {
        EtherType(be16(self.buffer.as_ref(), 2))
    }

    /// What follows the tag.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[4..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the TCI.
    pub fn set_tci(&mut self, tci: u16) {
        set_be16(self.buffer.as_mut(), 0, tci);
    }

    /// Sets the inner EtherType.
    pub fn set_inner_ethertype(&mut self, t: EtherType) {
        set_be16(self.buffer.as_mut(), 2, t.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 18] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, // dst
        0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, // src
        0x81, 0x00, // VLAN
        0xa0, 0x64, // TCI: pcp 5, vid 100
        0x86, 0xdd, // inner: IPv6
    ];

    #[test]
    fn fields_read_from_literal_bytes() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst(), MacAddr([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]));
        assert_eq!(f.src().to_string(), "66:77:88:99:aa:bb");
        assert_eq!(f.ethertype(), EtherType::VLAN);
        let tag = VlanTag::new_checked(f.payload()).unwrap();
        assert_eq!((tag.vid(), tag.pcp()), (100, 5));
        assert_eq!(tag.inner_ethertype(), EtherType::IPV6);
        assert!(tag.payload().is_empty());
    }

    #[test]
    fn setters_write_the_right_bytes() {
        let mut buf = [0u8; 18];
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.set_dst(MacAddr([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]));
        f.set_src(MacAddr([0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]));
        f.set_ethertype(EtherType::VLAN);
        let mut tag = VlanTag::new_checked(f.payload_mut()).unwrap();
        tag.set_tci(0xa064);
        tag.set_inner_ethertype(EtherType::IPV6);
        assert_eq!(buf, FRAME);
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.swap_macs();
        assert_eq!(
            &buf[..12],
            &[
                0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0, 0x11, 0x22, 0x33, 0x44, 0x55
            ]
        );
    }

    #[test]
    fn short_buffers_are_errors_not_panics() {
        let e = EthernetFrame::new_checked(&FRAME[..13]).unwrap_err();
        assert_eq!(e.to_string(), "ethernet: 13 bytes, need 14");
        assert!(VlanTag::new_checked(&FRAME[14..17]).is_err());
        assert!(MacAddr::BROADCAST.is_multicast());
        assert!(!MacAddr([2, 0, 0, 0, 0, 1]).is_multicast());
    }

    proptest::proptest! {
        /// Any field values: each setter's value reads back, and nothing else
        /// changes.
        #[test]
        fn setters_then_getters_round_trip(
            dst in proptest::prelude::any::<[u8; 6]>(),
            src in proptest::prelude::any::<[u8; 6]>(),
            et in proptest::prelude::any::<u16>(),
            tci in proptest::prelude::any::<u16>(),
            inner in proptest::prelude::any::<u16>(),
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 4..40),
        ) {
            let mut buf = vec![0u8; HEADER_LEN];
            buf.extend_from_slice(&payload);
            let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
            f.set_dst(MacAddr(dst));
            f.set_src(MacAddr(src));
            f.set_ethertype(EtherType(et));
            let mut tag = VlanTag::new_checked(f.payload_mut()).unwrap();
            tag.set_tci(tci);
            tag.set_inner_ethertype(EtherType(inner));
            proptest::prop_assert_eq!((tag.tci(), tag.inner_ethertype()), (tci, EtherType(inner)));
            proptest::prop_assert_eq!((tag.vid(), tag.pcp()), (tci & 0xfff, (tci >> 13) as u8));
            proptest::prop_assert_eq!(tag.payload(), &payload[4..]);
            proptest::prop_assert_eq!((f.dst(), f.src(), f.ethertype()), (MacAddr(dst), MacAddr(src), EtherType(et)));
            f.swap_macs();
            proptest::prop_assert_eq!((f.dst(), f.src()), (MacAddr(src), MacAddr(dst)));
            proptest::prop_assert_eq!(f.payload().len(), payload.len());
        }

        /// Any bytes: a view whose getters all answer, or, below the header
        /// length, a truncation error.
        #[test]
        fn views_over_any_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)) {
            match EthernetFrame::new_checked(&bytes[..]) {
                Ok(f) => {
                    proptest::prop_assert!(bytes.len() >= HEADER_LEN);
                    let _ = (f.dst(), f.src(), f.ethertype());
                    proptest::prop_assert_eq!(f.payload(), &bytes[HEADER_LEN..]);
                }
                Err(e) => proptest::prop_assert_eq!(
                    e,
                    NetError::Truncated { header: "ethernet", need: HEADER_LEN, have: bytes.len() }
                ),
            }
            match VlanTag::new_checked(&bytes[..]) {
                Ok(t) => {
                    let _ = (t.tci(), t.vid(), t.pcp(), t.inner_ethertype());
                    proptest::prop_assert_eq!(t.payload(), &bytes[4..]);
                }
                Err(_) => proptest::prop_assert!(bytes.len() < 4),
            }
        }
    }
}
