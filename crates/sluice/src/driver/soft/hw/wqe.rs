//! Tx work-queue elements (WQEs) and completion-queue entries (CQEs): the
//! byte layouts the soft driver writes into its Tx ring and the device model
//! executes, in the manner of a ConnectX send queue.
//!
//! # The Tx ring
//! `nb_txd` *basic blocks* (WQEBBs) of 64 bytes, each four 16-byte
//! segments: in memory a [`DescRing`] of `4 * nb_txd` entries, allocated in
//! 64-byte lines, so a block is one cache line. A WQE starts on a block and
//! spans `ceil(ds / 4)` blocks, `ds` being its count of 16-byte segments
//! (control segment included, at most [`MAX_DS`]); segment indices wrap by
//! the ring's mask, so a WQE may run past the ring's end. The tail register
//! counts blocks (free-running): one store per burst is the doorbell.
//!
//! Multi-byte fields are big-endian at the byte offsets below; a segment's
//! two atomic words hold its bytes 0..8 and 8..16 in memory order
//! (`u64::from_ne_bytes`), so the ring's bytes are the same on any host.
//!
//! # Segments
//! **Control** (`cseg`), first in every WQE:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | opcode modifier ([`OPMOD_EMPW`] for an MPWQE, else 0) |
//! | 1..3 | WQE index: the WQE's first block, low 16 bits of the free-running count |
//! | 3 | opcode: [`OP_SEND`], [`OP_TSO`] or [`OP_MPW`] |
//! | 4..7 | send queue number (24 bits): the Tx queue |
//! | 7 | `ds`: 16-byte segments in the WQE |
//! | 11 | flags: [`CE`] asks for a completion |
//! | 8..11, 12..16 | reserved, 0 |
//!
//! **Ethernet / offload** (`eseg`), second in every WQE:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | tunnel header offsets in 2-byte units: outer L3, outer L4, inner L3, inner L4 (0 unless [`TUN_VXLAN`]) |
//! | 4 | checksum flags ([`cs`]) |
//! | 5 | tunnel flags: [`TUN_VXLAN`] |
//! | 6..8 | MSS (TSO only) |
//! | 8..10 | [`VLAN_INSERT`] when the device inserts an 802.1Q tag |
//! | 10..12 | the tag's TCI |
//! | 12..14 | inline header size: bytes of the packet copied into the WQE |
//! | 14..16 | the first two of those bytes; the rest follow in whole segments |
//!
//! **Data** (`dseg`):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | byte count; in an MPWQE, [`INLINE`] set means the packet itself follows from byte 4 on (byte count without the flag), through as many segments as it needs, zero-padded |
//! | 4..8 | memory key: [`LKEY`] |
//! | 8..16 | address (IOVA = VA) |
//!
//! # WQE kinds
//! - **Regular send** ([`OP_SEND`]): cseg, eseg with the packet's first
//!   [`MIN_INLINE`] bytes inlined (two in the eseg, sixteen in the next
//!   segment), then one dseg per buffer for the rest. One single-segment
//!   packet of 18 bytes or more: exactly one block.
//! - **TSO** ([`OP_TSO`]): the same, the inlined part being the whole
//!   header (L2 + L3 + L4) and the eseg carrying the MSS; the device cuts
//!   the payload into segments.
//! - **Enhanced multi-packet send** ([`OP_MPW`], [`OPMOD_EMPW`]): cseg, one
//!   eseg shared by every packet, then per packet one dseg or its bytes
//!   inlined. The eseg holds no inline header.
//!
//! # Completions
//! The completion queue is a ring of 64-byte CQEs. The device writes one
//! when it finishes a WQE whose cseg has [`CE`], or a WQE it rejects. Only
//! the last 8 bytes carry anything (bytes 0..56 are reserved, left 0):
//!
//! | bytes | field |
//! |---|---|
//! | 56 | syndrome: 0, or why a WQE was rejected ([`syndrome`]) |
//! | 57..60 | send queue number |
//! | 60..62 | WQE counter: index of the completed WQE's first block |
//! | 63 | opcode ([`CQE_REQ`], [`CQE_ERR`]) << 4, then the owner bit |
//!
//! The device writes the owner bit as the parity of its pass over the
//! ring; an entry is new to the driver when the bit equals the parity of the
//! driver's own pass. A reset ring holds [`CQE_INVALID`] entries with owner
//! 1, which no first pass takes for new. The device stores the last word
//! with release, the driver loads it with acquire before it frees what the
//! WQE held.

use std::sync::atomic::{AtomicU64, Ordering};

use super::desc::{Desc, DescRing};

/// Bytes in a segment.
pub const SEG: usize = 16;
/// Bytes in a basic block (one cache line).
pub const BB: usize = 64;
/// Segments in a basic block.
pub const SEGS_PER_BB: u32 = 4;
/// The longest WQE, in segments (1024 bytes, 16 blocks).
pub const MAX_DS: u32 = 64;
/// Bytes of a regular WQE's inline header copy.
pub const MIN_INLINE: usize = 18;
/// The longest TSO header the device takes (inlined).
pub const MAX_TSO_HEADER: usize = 2 + 16 * 12;

/// Opcode: send one packet.
pub const OP_SEND: u8 = 0x0a;
/// Opcode: send one packet, segmented by the device (TSO).
pub const OP_TSO: u8 = 0x0e;
/// Opcode: multi-packet send.
pub const OP_MPW: u8 = 0x29;
/// Opcode modifier of [`OP_MPW`]: the enhanced format (any mix of pointed-to
/// and inlined packets, one shared eseg).
pub const OPMOD_EMPW: u8 = 0x02;
/// Cseg flag: write a completion when done.
pub const CE: u8 = 0x08;
/// Eseg tunnel flag: VXLAN; the offsets locate the headers.
pub const TUN_VXLAN: u8 = 0x01;
/// Eseg: insert the VLAN tag.
pub const VLAN_INSERT: u16 = 0x8000;
/// Dseg byte-count flag (MPWQE): the packet's bytes are inlined.
pub const INLINE: u32 = 0x8000_0000;
/// The memory key of every buffer (the soft device has one: IOVA = VA).
pub const LKEY: u32 = 0;

/// Eseg checksum flags.
pub mod cs {
    /// The (outer) IPv4 header checksum.
    pub const L3: u8 = 0x01;
    /// The UDP checksum (no tunnel).
    pub const L4_UDP: u8 = 0x02;
    /// The TCP checksum (no tunnel).
    pub const L4_TCP: u8 = 0x04;
    /// Tunnel: the inner IPv4 header checksum.
    pub const INNER_L3: u8 = 0x10;
    /// Tunnel: the inner UDP checksum.
    pub const INNER_L4_UDP: u8 = 0x20;
    /// Tunnel: the inner TCP checksum.
    pub const INNER_L4_TCP: u8 = 0x40;
    /// Every flag the device knows.
    pub const ALL: u8 = L3 | L4_UDP | L4_TCP | INNER_L3 | INNER_L4_UDP | INNER_L4_TCP;
}

/// CQE opcode: the WQE completed.
pub const CQE_REQ: u8 = 0x0;
/// CQE opcode: the WQE was rejected (see the syndrome).
pub const CQE_ERR: u8 = 0xd;
/// CQE opcode of a reset entry.
pub const CQE_INVALID: u8 = 0xf;

/// Why the device rejected a WQE (the CQE syndrome).
pub mod syndrome {
    /// Unknown opcode, or a modifier the opcode does not take.
    pub const BAD_OPCODE: u8 = 0x01;
    /// The WQE index is not the block the device is at, or the queue
    /// number is not its queue's.
    pub const BAD_INDEX: u8 = 0x02;
    /// `ds` is 0, above [`MAX_DS`](super::MAX_DS), or reaches past the
    /// tail: the device cannot tell where the next WQE starts and stops the
    /// queue.
    pub const BAD_SIZE: u8 = 0x03;
    /// Reserved eseg bits set, an unknown flag, or offsets out of order.
    pub const BAD_ESEG: u8 = 0x04;
    /// A dseg with no bytes, no address, another memory key, or the inline
    /// flag outside an MPWQE.
    pub const BAD_DSEG: u8 = 0x05;
    /// Inline bytes that overrun the WQE, or an inline header where the
    /// kind takes none.
    pub const BAD_INLINE: u8 = 0x06;
    /// No packet at all, or segments left over.
    pub const BAD_LAYOUT: u8 = 0x07;
    /// TSO without an MSS or a header, or an MSS where TSO is not asked.
    pub const BAD_TSO: u8 = 0x08;
}

/// Packs 8 bytes into a segment word (memory order).
#[inline(always)]
fn word(b: [u8; 8]) -> u64 {
    u64::from_ne_bytes(b)
}

/// The control segment's two words.
#[inline(always)]
pub fn cseg(opmod: u8, wqe_index: u16, opcode: u8, sqn: u32, ds: u32, flags: u8) -> (u64, u64) {
    let i = wqe_index.to_be_bytes();
    let q = sqn.to_be_bytes();
    (
        word([opmod, i[0], i[1], opcode, q[1], q[2], q[3], ds as u8]),
        word([0, 0, 0, flags, 0, 0, 0, 0]),
    )
}

/// A data segment's two words.
#[inline(always)]
pub fn dseg(byte_count: u32, addr: u64) -> (u64, u64) {
    let b = byte_count.to_be_bytes();
    let k = LKEY.to_be_bytes();
    (
        word([b[0], b[1], b[2], b[3], k[0], k[1], k[2], k[3]]),
        word(addr.to_be_bytes()),
    )
}

/// What an eseg asks for, as a packet's offload flags decide it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Eseg {
    /// Tunnel offsets (outer L3, outer L4, inner L3, inner L4) in 2-byte
    /// units.
    pub swp: [u8; 4],
    /// Checksum flags ([`cs`]).
    pub cs: u8,
    /// Tunnel flags.
    pub tun: u8,
    /// TSO segment size.
    pub mss: u16,
    /// The VLAN tag to insert.
    pub vlan: Option<u16>,
}

impl Eseg {
    /// The eseg's words without an inline header (bytes 12..16 zero): the
    /// key an MPWQE session compares.
    #[inline]
    pub fn words(&self) -> EsegWords {
        let m = self.mss.to_be_bytes();
        let (ins, tci) = match self.vlan {
            Some(t) => (VLAN_INSERT.to_be_bytes(), t.to_be_bytes()),
            None => ([0; 2], [0; 2]),
        };
        let s = self.swp;
        EsegWords(
            word([s[0], s[1], s[2], s[3], self.cs, self.tun, m[0], m[1]]),
            word([ins[0], ins[1], tci[0], tci[1], 0, 0, 0, 0]),
        )
    }

    /// Reads an eseg's offload fields (not the inline header).
    pub fn parse(b: &[u8; SEG]) -> Eseg {
        let insert = u16::from_be_bytes([b[8], b[9]]);
        Eseg {
            swp: [b[0], b[1], b[2], b[3]],
            cs: b[4],
            tun: b[5],
            mss: u16::from_be_bytes([b[6], b[7]]),
            vlan: (insert & VLAN_INSERT != 0).then(|| u16::from_be_bytes([b[10], b[11]])),
        }
    }
}

/// An eseg's two words with no inline header; `EsegWords::NONE` asks for
/// no offload at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EsegWords(pub u64, pub u64);

impl EsegWords {
    /// No offload.
    pub const NONE: EsegWords = EsegWords(0, 0);

    /// The second word with an inline header of `size` bytes whose first
    /// two are `first`.
    #[inline(always)]
    pub fn with_inline(self, size: u16, first: [u8; 2]) -> u64 {
        let s = size.to_be_bytes();
        self.1 | word([0, 0, 0, 0, s[0], s[1], first[0], first[1]])
    }
}

/// Segments an inline header of `n` bytes takes after the eseg (which holds
/// its first two).
#[inline(always)]
pub const fn header_segs(n: usize) -> u32 {
    if n <= 2 {
        0
    } else {
        (n - 2).div_ceil(SEG) as u32
    }
}

/// Segments an MPWQE entry of a packet of `len` bytes takes inlined (the
/// 4-byte count, then the bytes).
#[inline(always)]
pub const fn inline_segs(len: usize) -> u32 {
    (4 + len).div_ceil(SEG) as u32
}

/// Blocks a WQE of `ds` segments takes.
#[inline(always)]
pub const fn blocks(ds: u32) -> u32 {
    ds.div_ceil(SEGS_PER_BB)
}

/// A segment's bytes.
#[inline]
pub fn seg_bytes(d: &Desc) -> [u8; SEG] {
    let mut b = [0; SEG];
    b[..8].copy_from_slice(&d.q0.load(Ordering::Relaxed).to_ne_bytes());
    b[8..].copy_from_slice(&d.q1.load(Ordering::Relaxed).to_ne_bytes());
    b
}

/// Writes a segment's bytes.
#[inline(always)]
pub fn write_seg(d: &Desc, b: &[u8; SEG]) {
    let (lo, hi) = b.split_at(8);
    d.q0.store(word(lo.try_into().expect("8 bytes")), Ordering::Relaxed);
    d.q1.store(word(hi.try_into().expect("8 bytes")), Ordering::Relaxed);
}

/// Writes a segment's two words.
#[inline(always)]
pub fn write_words(d: &Desc, (w0, w1): (u64, u64)) {
    d.q0.store(w0, Ordering::Relaxed);
    d.q1.store(w1, Ordering::Relaxed);
}

/// 8 bytes of `b` from `at` as a segment word.
#[inline(always)]
fn word_at(b: &[u8], at: usize) -> u64 {
    word(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Up to 15 bytes, zero-padded to a segment, copied in fixed-size pieces
/// (no call to a byte-count memcpy).
#[inline(always)]
fn tail_seg(t: &[u8]) -> [u8; SEG] {
    let mut b = [0u8; SEG];
    let mut o = 0;
    if t.len() - o >= 8 {
        b[o..o + 8].copy_from_slice(&t[o..o + 8]);
        o += 8;
    }
    if t.len() - o >= 4 {
        b[o..o + 4].copy_from_slice(&t[o..o + 4]);
        o += 4;
    }
    if t.len() - o >= 2 {
        b[o..o + 2].copy_from_slice(&t[o..o + 2]);
        o += 2;
    }
    if t.len() > o {
        b[o] = t[o];
    }
    b
}

/// Writes `data` into whole segments from segment `seg` on (an inline
/// header after the eseg), the last zero-padded; returns the segments
/// written.
#[inline]
pub fn write_data(ring: &DescRing, seg: u32, data: &[u8]) -> u32 {
    let mut n = 0;
    let mut rest = data;
    while rest.len() >= SEG {
        write_words(
            ring.get(seg.wrapping_add(n)),
            (word_at(rest, 0), word_at(rest, 8)),
        );
        rest = &rest[SEG..];
        n += 1;
    }
    if !rest.is_empty() {
        write_seg(ring.get(seg.wrapping_add(n)), &tail_seg(rest));
        n += 1;
    }
    n
}

/// Writes an MPWQE entry with the packet `data` inlined from segment `seg`
/// on: the byte count with [`INLINE`], then the bytes, the last segment
/// zero-padded; returns the segments written ([`inline_segs`]).
#[inline]
pub fn write_entry(ring: &DescRing, seg: u32, data: &[u8]) -> u32 {
    let c = (INLINE | data.len() as u32).to_be_bytes();
    if data.len() < 12 {
        let mut b = [0u8; SEG];
        b[..4].copy_from_slice(&c);
        b[4..].copy_from_slice(&tail_seg(data)[..12]);
        write_seg(ring.get(seg), &b);
        return 1;
    }
    let w0 = word([c[0], c[1], c[2], c[3], data[0], data[1], data[2], data[3]]);
    write_words(ring.get(seg), (w0, word_at(data, 4)));
    1 + write_data(ring, seg.wrapping_add(1), &data[12..])
}

/// Reads `dst.len()` bytes from the ring, starting `off` bytes into segment
/// `seg`.
#[inline]
pub fn read_inline(ring: &DescRing, seg: u32, off: usize, dst: &mut [u8]) {
    let mut s = seg.wrapping_add((off / SEG) as u32);
    let mut at = off % SEG;
    let mut done = 0;
    while done < dst.len() {
        let b = seg_bytes(ring.get(s));
        let k = (SEG - at).min(dst.len() - done);
        dst[done..done + k].copy_from_slice(&b[at..at + k]);
        done += k;
        at = 0;
        s = s.wrapping_add(1);
    }
}

/// A control segment, read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cseg {
    /// Opcode modifier.
    pub opmod: u8,
    /// WQE index (low 16 bits of its first block).
    pub wqe_index: u16,
    /// Opcode.
    pub opcode: u8,
    /// Send queue number.
    pub sqn: u32,
    /// Segments in the WQE.
    pub ds: u32,
    /// Flags ([`CE`]).
    pub flags: u8,
    /// Whether the reserved bytes are 0.
    pub reserved_clear: bool,
}

impl Cseg {
    /// Reads a control segment.
    pub fn parse(b: &[u8; SEG]) -> Cseg {
        Cseg {
            opmod: b[0],
            wqe_index: u16::from_be_bytes([b[1], b[2]]),
            opcode: b[3],
            sqn: u32::from_be_bytes([0, b[4], b[5], b[6]]),
            ds: b[7] as u32,
            flags: b[11],
            reserved_clear: b[8..11] == [0; 3] && b[12..16] == [0; 4] && b[11] & !CE == 0,
        }
    }
}

/// A CQE's last word.
#[inline(always)]
pub fn cqe_word(syndrome: u8, sqn: u32, wqe_counter: u16, opcode: u8, owner: u8) -> u64 {
    let q = sqn.to_be_bytes();
    let c = wqe_counter.to_be_bytes();
    word([
        syndrome,
        q[1],
        q[2],
        q[3],
        c[0],
        c[1],
        0,
        opcode << 4 | (owner & 1),
    ])
}

/// A CQE's last word, read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqeInfo {
    /// Syndrome.
    pub syndrome: u8,
    /// WQE counter.
    pub wqe_counter: u16,
    /// Opcode.
    pub opcode: u8,
    /// Owner bit.
    pub owner: u8,
}

impl CqeInfo {
    /// Decodes the last word.
    #[inline(always)]
    pub fn parse(w: u64) -> CqeInfo {
        let b = w.to_ne_bytes();
        CqeInfo {
            syndrome: b[0],
            wqe_counter: u16::from_be_bytes([b[4], b[5]]),
            opcode: b[7] >> 4,
            owner: b[7] & 1,
        }
    }
}

/// One 64-byte CQE.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct Cqe([AtomicU64; 8]);

const _: () = assert!(std::mem::size_of::<Cqe>() == 64);

impl Cqe {
    /// The last word (the only one the device writes).
    #[inline(always)]
    pub fn last(&self) -> &AtomicU64 {
        &self.0[7]
    }

    /// The entry's 64 bytes.
    pub fn bytes(&self) -> [u8; 64] {
        let mut b = [0; 64];
        for (i, w) in self.0.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        b
    }
}

/// The completion queue: a ring of CQEs (a power of two).
#[derive(Debug)]
pub struct CqRing {
    cqes: Box<[Cqe]>,
    mask: u32,
    shift: u32,
}

impl CqRing {
    /// A reset ring of `n` entries.
    pub fn new(n: usize) -> CqRing {
        assert!(n.is_power_of_two(), "CQ size {n}");
        let r = CqRing {
            cqes: (0..n).map(|_| Cqe::default()).collect(),
            mask: n as u32 - 1,
            shift: n.trailing_zeros(),
        };
        r.reset();
        r
    }

    /// Entries in the ring.
    pub fn len(&self) -> usize {
        self.cqes.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Entry at free-running index `i`.
    #[inline(always)]
    pub fn get(&self, i: u32) -> &Cqe {
        &self.cqes[(i & self.mask) as usize]
    }

    /// The owner bit of pass `i / len`.
    #[inline(always)]
    pub fn owner(&self, i: u32) -> u8 {
        (i >> self.shift) as u8 & 1
    }

    /// Every entry back to invalid, owner 1 (the queue is stopped).
    pub fn reset(&self) {
        for c in self.cqes.iter() {
            for w in &c.0[..7] {
                w.store(0, Ordering::Relaxed);
            }
            c.last()
                .store(cqe_word(0, 0, 0, CQE_INVALID, 1), Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn seg_of(w: (u64, u64)) -> [u8; 16] {
        let d = Desc::default();
        write_words(&d, w);
        seg_bytes(&d)
    }

    #[test]
    fn control_and_data_segments_sit_at_their_bytes() {
        assert_eq!(
            seg_of(cseg(OPMOD_EMPW, 0x1234, OP_MPW, 0x00ab_cdef, 34, CE)),
            [
                0x02, 0x12, 0x34, 0x29, 0xab, 0xcd, 0xef, 34, 0, 0, 0, 0x08, 0, 0, 0, 0
            ]
        );
        assert_eq!(
            seg_of(dseg(60, 0x0000_7f00_1122_3344)),
            [
                0, 0, 0, 60, 0, 0, 0, 0, 0, 0, 0x7f, 0x00, 0x11, 0x22, 0x33, 0x44
            ]
        );
        let c = Cseg::parse(&seg_of(cseg(0, 7, OP_SEND, 3, 4, 0)));
        assert_eq!(
            (c.opcode, c.wqe_index, c.sqn, c.ds, c.flags),
            (OP_SEND, 7, 3, 4, 0)
        );
        assert!(c.reserved_clear);
    }

    #[test]
    fn eseg_fields_and_inline_header_sit_at_their_bytes() {
        let e = Eseg {
            swp: [7, 17, 32, 42],
            cs: cs::L3 | cs::INNER_L4_UDP,
            tun: TUN_VXLAN,
            mss: 1448,
            vlan: Some(0x2005),
        };
        let w = e.words();
        let b = seg_of((w.0, w.with_inline(18, [0xaa, 0xbb])));
        assert_eq!(
            b,
            [
                7, 17, 32, 42, 0x21, 0x01, 0x05, 0xa8, 0x80, 0x00, 0x20, 0x05, 0, 18, 0xaa, 0xbb
            ]
        );
        assert_eq!(Eseg::parse(&b), e);
        assert_eq!(Eseg::default().words(), EsegWords::NONE);
    }

    #[test]
    fn inline_data_fills_whole_segments_and_wraps_the_ring() {
        let ring = DescRing::new(8);
        let data: Vec<u8> = (1..=30).collect();
        // From segment 6 of 8: 4 + 30 bytes take segments 6, 7 and 0.
        let n = write_entry(&ring, 6, &data);
        assert_eq!(n, inline_segs(30));
        assert_eq!(n, 3);
        let s6 = seg_bytes(ring.get(6));
        assert_eq!(s6[..4], [0x80, 0, 0, 30]);
        assert_eq!(s6[4..], data[..12]);
        assert_eq!(seg_bytes(ring.get(7))[..], data[12..28]);
        let s0 = seg_bytes(ring.get(0));
        assert_eq!(s0[..2], data[28..]);
        assert_eq!(s0[2..], [0; 14], "zero padding");
        let mut back = [0u8; 30];
        read_inline(&ring, 6, 4, &mut back);
        assert_eq!(back[..], data[..]);
        assert_eq!(
            (header_segs(18), header_segs(2), header_segs(54)),
            (1, 0, 4)
        );
        // Every length up to three segments, from any segment: the bytes
        // come back, the padding is zero.
        for len in 1..=44 {
            let d: Vec<u8> = (0..len as u8).map(|i| i ^ 0x5a).collect();
            let ring = DescRing::new(8);
            let n = write_entry(&ring, 7, &d);
            assert_eq!(n, inline_segs(len), "len {len}");
            let mut back = vec![0u8; len];
            read_inline(&ring, 7, 4, &mut back);
            assert_eq!(back, d, "len {len}");
            let mut pad = vec![0u8; n as usize * SEG - 4 - len];
            read_inline(&ring, 7, 4 + len, &mut pad);
            assert!(pad.iter().all(|&b| b == 0), "len {len}");
            let ring = DescRing::new(8);
            let n = write_data(&ring, 5, &d);
            assert_eq!(n as usize, len.div_ceil(SEG));
            let mut back = vec![0u8; n as usize * SEG];
            read_inline(&ring, 5, 0, &mut back);
            assert_eq!(back[..len], d[..]);
            assert!(back[len..].iter().all(|&b| b == 0));
        }
        assert_eq!((blocks(4), blocks(5), blocks(34)), (1, 2, 9));
    }

    #[test]
    fn cqes_carry_their_fields_in_the_last_bytes_and_reset_to_invalid() {
        let w = cqe_word(syndrome::BAD_DSEG, 5, 0x0102, CQE_ERR, 1);
        let cq = CqRing::new(4);
        cq.get(1).last().store(w, Ordering::Relaxed);
        let b = cq.get(1).bytes();
        assert_eq!(b[..56], [0; 56]);
        assert_eq!(b[56..], [0x05, 0, 0, 5, 0x01, 0x02, 0, 0xd1]);
        let i = CqeInfo::parse(w);
        assert_eq!(
            (i.syndrome, i.wqe_counter, i.opcode, i.owner),
            (syndrome::BAD_DSEG, 0x0102, CQE_ERR, 1)
        );
        cq.reset();
        let i = CqeInfo::parse(cq.get(1).last().load(Ordering::Relaxed));
        assert_eq!((i.opcode, i.owner), (CQE_INVALID, 1));
        assert_eq!((cq.owner(3), cq.owner(4), cq.owner(9)), (0, 1, 0));
    }
}
