//! The 16-byte Rx and Tx descriptors, and the rings that hold them.
//!
//! A descriptor is two 64-bit words (`qword 0`, `qword 1`), each an
//! `AtomicU64`, so the driver (a polling thread) and the device (the same
//! thread inline, or the device thread) never race on plain memory. The
//! protocol is the one real NICs use:
//!
//! - The *driver* writes a descriptor (both words, relaxed) and only then
//!   hands it over by storing the queue's tail register (release). The
//!   device reads the tail (acquire) before it reads any descriptor below it.
//! - The *device* writes its result back into the descriptor, the word that
//!   carries the done bit (`DD`, always in qword 1) last, with release. The
//!   driver reads qword 1 with acquire, and only when `DD` is set reads the
//!   other word and the buffer.
//!
//! Every buffer access is ordered by those two edges: the device touches a
//! buffer only after reading a descriptor the driver handed it, and the
//! driver touches it again only after seeing `DD`.
//!
//! Field positions are named in [`rx`] and [`tx`] (shift and mask per
//! field) and checked against literal values by the tests.

use std::sync::atomic::{AtomicU64, Ordering};

/// One 16-byte descriptor: two words, qword 1 carries the done bit.
#[derive(Debug, Default)]
#[repr(C)]
pub struct Desc {
    /// Qword 0 (buffer address in the read formats).
    pub q0: AtomicU64,
    /// Qword 1 (status with `DD` in the write-back formats).
    pub q1: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Desc>() == 16);

/// Rx descriptor fields.
///
/// Read format (written by the driver):
/// - qword 0: packet buffer address (IOVA = virtual address, see the
///   module docs of `soft`).
/// - qword 1: header buffer address; 0 (header split off). Bit 0 of this
///   word is `DD` of the write-back format, so writing 0 clears it.
///
/// Write-back format (written by the device, qword 1 last):
/// - qword 0: bits 0..4 RSS type, 4..16 packet type, 32..64 RSS hash.
/// - qword 1: bits 0..20 status, 20..32 errors, 32..48 length, 48..64 VLAN
///   tag.
pub mod rx {
    /// Qword 0: RSS type (0: no hash computed).
    pub const RSS_TYPE_SHIFT: u32 = 0;
    /// Qword 0: RSS type mask (after shifting).
    pub const RSS_TYPE_MASK: u64 = 0xf;
    /// RSS type: IPv4 with TCP/UDP ports.
    pub const RSS_IPV4_L4: u64 = 1;
    /// RSS type: IPv6 with TCP/UDP ports.
    pub const RSS_IPV6_L4: u64 = 2;
    /// RSS type: IPv4 addresses only.
    pub const RSS_IPV4: u64 = 3;
    /// RSS type: IPv6 addresses only.
    pub const RSS_IPV6: u64 = 4;
    /// Qword 0: packet type.
    pub const PTYPE_SHIFT: u32 = 4;
    /// Qword 0: packet type mask (after shifting).
    pub const PTYPE_MASK: u64 = 0xfff;
    /// Qword 0: RSS hash.
    pub const HASH_SHIFT: u32 = 32;

    /// Qword 1, status: descriptor done.
    pub const DD: u64 = 1 << 0;
    /// Qword 1, status: end of packet.
    pub const EOP: u64 = 1 << 1;
    /// Qword 1, status: the frame carried a VLAN tag (in the VLAN field).
    pub const VP: u64 = 1 << 3;
    /// Qword 1, status: the L4 checksum was checked.
    pub const L4CS: u64 = 1 << 5;
    /// Qword 1, status: the IPv4 header checksum was checked.
    pub const IPCS: u64 = 1 << 6;
    /// Qword 1, error: the frame is shorter than an Ethernet header.
    pub const ERR_RUNT: u64 = 1 << 28;
    /// Qword 1, error: the frame did not fit the buffer (or the MTU); the
    /// buffer holds only its head.
    pub const ERR_OVERSIZE: u64 = 1 << 29;
    /// Qword 1, error: bad L4 checksum.
    pub const ERR_L4: u64 = 1 << 30;
    /// Qword 1, error: bad IPv4 header checksum.
    pub const ERR_IP: u64 = 1 << 31;
    /// Qword 1: errors that drop the frame.
    pub const ERR_DROP: u64 = ERR_OVERSIZE | ERR_RUNT;
    /// Qword 1: frame length.
    pub const LEN_SHIFT: u32 = 32;
    /// Qword 1: VLAN tag.
    pub const VLAN_SHIFT: u32 = 48;

    /// Packs a write-back qword 0.
    #[inline(always)]
    pub const fn wb0(rss_type: u64, ptype: u64, hash: u32) -> u64 {
        (rss_type & RSS_TYPE_MASK) << RSS_TYPE_SHIFT
            | (ptype & PTYPE_MASK) << PTYPE_SHIFT
            | (hash as u64) << HASH_SHIFT
    }

    /// Packs a write-back qword 1 (status must include `DD`).
    #[inline(always)]
    pub const fn wb1(status_err: u64, len: u16, vlan: u16) -> u64 {
        status_err & 0xffff_ffff | (len as u64) << LEN_SHIFT | (vlan as u64) << VLAN_SHIFT
    }
}

/// Tx descriptor fields.
///
/// - qword 0: buffer address (IOVA = virtual address).
/// - qword 1: bits 0..16 buffer length, 16..24 command, 32..36 status
///   (written back by the device: `DD`), 48..64 VLAN tag to insert.
pub mod tx {
    /// Qword 1: data length of this buffer.
    pub const LEN_MASK: u64 = 0xffff;
    /// Qword 1, command: last descriptor of the packet.
    pub const CMD_EOP: u64 = 1 << 16;
    /// Qword 1, command: report status (write `DD` back when done).
    pub const CMD_RS: u64 = 1 << 17;
    /// Qword 1, command: compute the IPv4 header checksum.
    pub const CMD_IP_CKSUM: u64 = 1 << 18;
    /// Qword 1, command: compute the UDP checksum.
    pub const CMD_UDP_CKSUM: u64 = 1 << 19;
    /// Qword 1, command: compute the TCP checksum.
    pub const CMD_TCP_CKSUM: u64 = 1 << 20;
    /// Qword 1, command: insert the VLAN tag of bits 48..64.
    pub const CMD_VLAN: u64 = 1 << 21;
    /// Qword 1, status: descriptor done (written by the device).
    pub const DD: u64 = 1 << 32;
    /// Qword 1: VLAN tag.
    pub const VLAN_SHIFT: u32 = 48;

    /// Packs qword 1.
    #[inline(always)]
    pub const fn q1(len: u16, cmd: u64, vlan: u16) -> u64 {
        len as u64 | cmd | (vlan as u64) << VLAN_SHIFT
    }
}

/// Packet types the device reports (DPDK's `RTE_PTYPE_*` values), written
/// into `MbufHeader::packet_type`.
pub mod ptype {
    /// Ethernet.
    pub const L2_ETHER: u32 = 0x0000_0001;
    /// IPv4 (no options known).
    pub const L3_IPV4: u32 = 0x0000_0010;
    /// IPv6.
    pub const L3_IPV6: u32 = 0x0000_0040;
    /// TCP.
    pub const L4_TCP: u32 = 0x0000_0100;
    /// UDP.
    pub const L4_UDP: u32 = 0x0000_0200;
}

/// Four descriptors: the unit the ring is allocated in, so the ring starts
/// on a cache line (and a device fetch of four is one line).
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct Line([Desc; 4]);

// Four descriptors fill a line exactly: no padding between lines.
const _: () = assert!(std::mem::size_of::<Line>() == 4 * std::mem::size_of::<Desc>());

/// A ring of `n` descriptors (a power of two, at least 4), 64-byte aligned,
/// all zero at first.
#[derive(Debug)]
pub struct DescRing {
    lines: Box<[Line]>,
    mask: u32,
}

impl DescRing {
    /// A zeroed ring of `n` descriptors.
    pub fn new(n: usize) -> DescRing {
        assert!(n.is_power_of_two() && n >= 4, "descriptor count {n}");
        DescRing {
            lines: (0..n / 4).map(|_| Line::default()).collect(),
            mask: n as u32 - 1,
        }
    }

    /// Descriptors in the ring.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.mask as usize + 1
    }

    /// Always false: a ring has at least 4 descriptors.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Index mask (`len - 1`).
    #[inline(always)]
    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// Descriptor at free-running index `i` (wrapped by the mask).
    #[inline(always)]
    pub fn get(&self, i: u32) -> &Desc {
        let i = (i & self.mask) as usize;
        &self.lines[i >> 2].0[i & 3]
    }

    /// Every descriptor, in ring order (index `i & mask`), as one slice:
    /// loops over a run of descriptors index it once, not per
    /// descriptor.
    #[inline(always)]
    pub fn as_slice(&self) -> &[Desc] {
        // SAFETY: `Line` is `repr(C)`, four `Desc` and no padding (checked
        // above), so the boxed lines are `4 * lines.len()` contiguous,
        // initialised descriptors, borrowed as long as `self`.
        unsafe {
            std::slice::from_raw_parts(self.lines.as_ptr().cast::<Desc>(), self.lines.len() * 4)
        }
    }

    /// Zeroes every descriptor (the queue is stopped: no one else reads it).
    pub fn clear(&self) {
        for l in self.lines.iter() {
            for d in &l.0 {
                d.q0.store(0, Ordering::Relaxed);
                d.q1.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rx_write_back_fields_sit_at_their_bits() {
        let w0 = rx::wb0(rx::RSS_IPV4_L4, 0x211, 0xdead_beef);
        assert_eq!(w0, 0xdead_beef_0000_2111);
        let w1 = rx::wb1(rx::DD | rx::EOP | rx::IPCS | rx::ERR_L4, 1514, 0x0123);
        assert_eq!(w1, 0x0123_05ea_4000_0043);
        assert_eq!((w1 >> rx::LEN_SHIFT) as u16, 1514);
        assert_eq!((w1 >> rx::VLAN_SHIFT) as u16, 0x0123);
        assert_eq!(rx::ERR_IP | rx::ERR_L4 | rx::ERR_OVERSIZE, 0xe000_0000);
        // DD is bit 0 of qword 1: the read format's header address (0,
        // or any 2-byte-aligned address) leaves it clear.
        assert_eq!(rx::DD, 1);
    }

    #[test]
    fn tx_fields_sit_at_their_bits() {
        let q1 = tx::q1(60, tx::CMD_EOP | tx::CMD_RS | tx::CMD_UDP_CKSUM, 0x0fff);
        assert_eq!(q1, 0x0fff_0000_000b_003c);
        assert_eq!(
            tx::CMD_IP_CKSUM | tx::CMD_TCP_CKSUM | tx::CMD_VLAN,
            0x34_0000
        );
        assert_eq!(tx::DD, 0x1_0000_0000);
        assert_eq!(q1 & tx::LEN_MASK, 60);
    }

    #[test]
    fn ring_is_aligned_and_wraps_by_mask() {
        let r = DescRing::new(64);
        assert_eq!(r.len(), 64);
        assert_eq!(r.get(0) as *const Desc as usize % 64, 0);
        assert!(std::ptr::eq(r.get(64), r.get(0)));
        assert!(std::ptr::eq(r.get(u32::MAX), r.get(63)));
        let all = r.as_slice();
        assert_eq!(all.len(), 64);
        assert!((0..64).all(|i| std::ptr::eq(&all[i], r.get(i as u32))));
        r.get(5).q1.store(7, Ordering::Relaxed);
        r.clear();
        assert_eq!(r.get(5).q1.load(Ordering::Relaxed), 0);
    }
}
