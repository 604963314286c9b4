//! The mbuf header: 128 bytes, two cache lines, at the start of every pool
//! element; the buffer (headroom, then data room) follows it.
//!
//! The first cache line holds what the Rx path writes for every packet: the
//! buffer address, the rearm word, offload flags and the fields filled from the
//! Rx descriptor write-back; and the external-buffer word with a page
//! fragment's target, so that arming and freeing a page-fragment mbuf stay in
//! that line too. The second holds what chains, Tx offloads and the
//! application need: the next segment, the pool, the Tx offload lengths,
//! `udata64`, the own buffer to restore after an external one. Offsets are named in
//! [`offset`] and checked by tests, as a NIC driver relies on them.

use std::sync::atomic::AtomicU16;

use crate::mempool::PoolInner;

use super::extbuf::ExtSharedInfo;

/// Size of the header.
pub const HEADER_SIZE: usize = 128;

/// Byte offsets of the header fields.
pub mod offset {
    /// Buffer start (headroom begins here).
    pub const BUF_ADDR: usize = 0;
    /// IO address of the buffer start.
    pub const BUF_IOVA: usize = 8;
    /// The 8-byte rearm word: `data_off`, `refcnt`, `nb_segs`, `port`.
    pub const REARM_DATA: usize = 16;
    /// Offset of the packet data from the buffer start.
    pub const DATA_OFF: usize = 16;
    /// Reference count.
    pub const REFCNT: usize = 18;
    /// Segments in the chain (first segment only).
    pub const NB_SEGS: usize = 20;
    /// Input port.
    pub const PORT: usize = 22;
    /// Offload flags.
    pub const OL_FLAGS: usize = 24;
    /// Packet type (start of the fields an Rx descriptor fills).
    pub const PACKET_TYPE: usize = 32;
    /// Length of the whole chain (first segment only).
    pub const PKT_LEN: usize = 36;
    /// Length of this segment's data.
    pub const DATA_LEN: usize = 40;
    /// VLAN TCI.
    pub const VLAN_TCI: usize = 42;
    /// RSS hash.
    pub const RSS_HASH: usize = 44;
    /// An attached page-pool fragment's page target.
    pub const FRAG_TARGET: usize = 48;
    /// Outer VLAN TCI.
    pub const VLAN_TCI_OUTER: usize = 52;
    /// Buffer length (headroom + data room).
    pub const BUF_LEN: usize = 54;
    /// Shared info of an attached external buffer, or null (for an attached
    /// page-pool fragment: its page's metadata, with bit 0 set).
    pub const SHINFO: usize = 56;
    /// Next segment (second cache line).
    pub const NEXT: usize = 64;
    /// Owning pool.
    pub const POOL: usize = 72;
    /// Tx offload lengths, packed.
    pub const TX_OFFLOAD: usize = 80;
    /// Free for the application (e.g. a timestamp).
    pub const UDATA64: usize = 88;
    /// Flow director id or other per-packet mark.
    pub const FDIR_ID: usize = 116;
}

/// Tag bit of the header's `shinfo` word: the attached external buffer is a
/// page-pool fragment, and the word (tag cleared) is its page's metadata,
/// not an [`ExtSharedInfo`]. The fragment's one page reference belongs to
/// the header (shared by its clones, which share the header), so it needs
/// no shared info of its own: detaching gives the reference back, with the
/// page's target kept beside it in the header (`frag_target`). Nothing of
/// the fragment's own memory is written at attach nor read at the free.
pub(crate) const EXT_PAGE_FRAG: usize = 1;

/// The rearm word: what a driver resets on every Rx refill, with one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct RearmData {
    /// Offset of the data from the buffer start (the headroom).
    pub data_off: u16,
    /// Reference count (1 for a fresh buffer).
    pub refcnt: u16,
    /// Segments (1 for a fresh buffer).
    pub nb_segs: u16,
    /// Input port.
    pub port: u16,
}

impl RearmData {
    /// The word as one `u64`, in memory order: what a driver keeps as its
    /// per-queue template and writes into a header with one 8-byte store.
    #[inline(always)]
    pub const fn word(self) -> u64 {
        let [a, b] = self.data_off.to_ne_bytes();
        let [c, d] = self.refcnt.to_ne_bytes();
        let [e, f] = self.nb_segs.to_ne_bytes();
        let [g, h] = self.port.to_ne_bytes();
        u64::from_ne_bytes([a, b, c, d, e, f, g, h])
    }
}

/// Port value of a buffer that came from no port.
pub const PORT_NONE: u16 = u16::MAX;

/// The header. Private fields: use [`Mbuf`](super::Mbuf)'s accessors.
#[repr(C, align(64))]
pub struct MbufHeader {
    // ---- cache line 0: Rx hot ----
    pub(crate) buf_addr: *mut u8,
    pub(crate) buf_iova: u64,
    // The rearm word, as four fields; `refcnt` is atomic because clones on
    // other threads update it. The whole word is written at once only while
    // the buffer is unshared (refcnt 1, one owner), so that plain store never
    // races with an atomic access.
    pub(crate) data_off: u16,
    pub(crate) refcnt: AtomicU16,
    pub(crate) nb_segs: u16,
    pub(crate) port: u16,
    pub(crate) ol_flags: u64,
    pub(crate) packet_type: u32,
    pub(crate) pkt_len: u32,
    pub(crate) data_len: u16,
    pub(crate) vlan_tci: u16,
    pub(crate) rss_hash: u32,
    /// An attached page fragment's page target (what its reference is given
    /// back against); meaningless otherwise.
    pub(crate) frag_target: u32,
    pub(crate) vlan_tci_outer: u16,
    pub(crate) buf_len: u16,
    /// The attached external buffer's shared info, or its page's metadata
    /// tagged with [`EXT_PAGE_FRAG`] for a page fragment; null with the own
    /// buffer. What the free goes by: a header armed on an Rx queue with a
    /// page fragment has it (and the buffer fields) set while its
    /// [`ol::EXTERNAL`] flag waits for the delivery to write the flags.
    ///
    /// In the first line, with `frag_target`, the buffer fields and the
    /// reference count: an Rx refill arming a page fragment writes only this
    /// line, and a soft Tx queue frees a batch of single-segment fragment
    /// mbufs on this line alone (`FastFree::free_frags`; the own buffer it
    /// restores follows from the element's address and its pool, see
    /// `own_buf_addr`). The mbuf free (`Mbuf`'s drop, the burst free) reads
    /// the second line too, for chains and the pool.
    pub(crate) shinfo: *const ExtSharedInfo,
    // ---- cache line 1: chains, Tx offloads, the application ----
    pub(crate) next: *mut MbufHeader,
    pub(crate) pool: *const PoolInner,
    pub(crate) tx_offload: u64,
    pub(crate) udata64: u64,
    /// The buffer's own address, IOVA and length, to restore when an
    /// external buffer is detached. Fixed when the pool is made, and the
    /// same arithmetic for every element (which a free that knows the pool
    /// relies on instead of reading this line, `pagepool::detach_frag_own`):
    /// the address is the element's plus [`HEADER_SIZE`], the IOVA the
    /// element's offset in the pool's region plus [`HEADER_SIZE`], the
    /// length the pool's headroom + data room.
    pub(crate) own_buf_addr: *mut u8,
    pub(crate) own_buf_iova: u64,
    pub(crate) own_buf_len: u16,
    /// Headroom a fresh buffer starts with.
    pub(crate) default_headroom: u16,
    pub(crate) fdir_id: u32,
    _reserved: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<MbufHeader>() == HEADER_SIZE);
const _: () = assert!(std::mem::align_of::<MbufHeader>() == 64);
const _: () = assert!(std::mem::size_of::<RearmData>() == 8);
// `BufTail`'s bytes: four fields, no padding, in this order.
const _: () = assert!(
    std::mem::offset_of!(MbufHeader, frag_target) == offset::FRAG_TARGET
        && offset::FRAG_TARGET == 48
        && std::mem::offset_of!(MbufHeader, vlan_tci_outer) == 52
        && std::mem::offset_of!(MbufHeader, buf_len) == 54
        && std::mem::offset_of!(MbufHeader, shinfo) == 56
);

/// The header's bytes 48..64 as one 16-byte value: a page fragment's
/// target, the outer VLAN tag (0), the buffer length and the
/// external-buffer word. Attaching a page fragment for Rx and taking it
/// back at the free write these four with one aligned store
/// ([`MbufHeader::write_buf_tail`]); a refill or a free builds the value
/// once for a run of buffers (the page's target and metadata, or the
/// pool's own buffer length, are the run's).
#[derive(Clone, Copy)]
pub(crate) struct BufTail {
    #[cfg(target_arch = "x86_64")]
    bytes: std::arch::x86_64::__m128i,
    #[cfg(not(target_arch = "x86_64"))]
    fields: (u32, u16, *const ExtSharedInfo),
}

impl BufTail {
    /// All zero: no target, no length, no external buffer.
    #[cfg(target_arch = "x86_64")]
    pub(crate) const ZERO: BufTail = BufTail {
        // SAFETY: an `__m128i` is 16 plain bytes; all zero is a value.
        bytes: unsafe { std::mem::transmute::<[u64; 2], std::arch::x86_64::__m128i>([0, 0]) },
    };
    /// All zero: no target, no length, no external buffer.
    #[cfg(not(target_arch = "x86_64"))]
    pub(crate) const ZERO: BufTail = BufTail {
        fields: (0, 0, std::ptr::null()),
    };

    /// The page target and the external-buffer word (as an address).
    #[inline(always)]
    pub(crate) fn target_and_word(&self) -> (u32, usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::__m128i;
            // SAFETY: an `__m128i` is 16 plain bytes, any of which are a
            // `[u64; 2]`.
            let [low, high] = unsafe { std::mem::transmute::<__m128i, [u64; 2]>(self.bytes) };
            (low as u32, high as usize)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            (self.fields.0, self.fields.2 as usize)
        }
    }

    /// The value for `frag_target`, `buf_len` and `shinfo` (the outer VLAN
    /// tag 0).
    #[inline(always)]
    pub(crate) fn new(frag_target: u32, buf_len: u16, shinfo: *const ExtSharedInfo) -> BufTail {
        #[cfg(target_arch = "x86_64")]
        {
            // Little-endian, as the fields lie at 48 (4 bytes), 52 (2), 54
            // (2) and 56 (8).
            let low = frag_target as u64 | (buf_len as u64) << 48;
            let high = shinfo as usize as u64;
            // SAFETY: SSE2, which `_mm_set_epi64x` needs, is part of every
            // x86-64 target.
            let bytes = unsafe { std::arch::x86_64::_mm_set_epi64x(high as i64, low as i64) };
            BufTail { bytes }
        }
        #[cfg(not(target_arch = "x86_64"))]
        BufTail {
            fields: (frag_target, buf_len, shinfo),
        }
    }
}

impl MbufHeader {
    /// Pointer to the rearm word, to write it with one 8-byte store.
    #[inline(always)]
    pub(crate) fn rearm_ptr(this: *mut MbufHeader) -> *mut RearmData {
        // SAFETY: only computes an address inside `*this`: `data_off` is at
        // offset 16, 8-byte aligned (the header is 64-byte aligned), and the
        // four rearm fields span 16..24 in `RearmData`'s order.
        unsafe { std::ptr::addr_of_mut!((*this).data_off).cast::<RearmData>() }
    }

    /// Writes the rearm word with one 8-byte store: what a driver does to
    /// each buffer it puts on an Rx ring.
    #[inline(always)]
    pub(crate) fn rearm(&mut self, rearm: RearmData) {
        // SAFETY: `&mut self` is exclusive (a free buffer the driver owns),
        // so the plain store races with no atomic access of `refcnt`.
        unsafe { MbufHeader::rearm_ptr(self).write(rearm) };
    }

    /// Writes `frag_target`, `vlan_tci_outer`, `buf_len` and `shinfo` from
    /// `tail`, with one 16-byte store on x86-64.
    #[inline(always)]
    pub(crate) fn write_buf_tail(&mut self, tail: BufTail) {
        #[cfg(target_arch = "x86_64")]
        {
            // Bytes 48..64: four integer and raw-pointer fields with no
            // padding between them (asserted with the layout), for which any
            // bits are valid, 16-byte aligned (the header is 64-byte
            // aligned). SSE2 is part of every x86-64 target.
            let p = std::ptr::addr_of_mut!(self.frag_target).cast::<std::arch::x86_64::__m128i>();
            // SAFETY: an aligned store into a header we may write (`&mut self`).
            unsafe { std::arch::x86_64::_mm_store_si128(p, tail.bytes) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            (self.frag_target, self.buf_len, self.shinfo) = tail.fields;
            self.vlan_tci_outer = 0;
        }
    }

    /// Writes a rearm template ([`RearmData::word`]) with one 8-byte
    /// store.
    #[inline(always)]
    pub(crate) fn rearm_word(&mut self, word: u64) {
        // SAFETY: as in `rearm`; the rearm word is 8 bytes at an 8-byte
        // aligned offset, and any bit pattern is a valid `RearmData`.
        unsafe { MbufHeader::rearm_ptr(self).cast::<u64>().write(word) };
    }

    /// Writes the fields an Rx descriptor's write-back fills — offload
    /// flags, packet type, lengths, VLAN tag, RSS hash — all in the first
    /// cache line, for a single-segment packet of `len` bytes. With
    /// [`rearm`](Self::rearm) that is every field a received packet needs:
    /// the second line (next segment, pool, Tx offloads) is left alone; the
    /// free-buffer invariants keep `next` null, and the Tx offload lengths
    /// mean nothing unless `ol_flags` asks for a Tx offload.
    #[inline(always)]
    pub(crate) fn set_rx(
        &mut self,
        ol_flags: u64,
        packet_type: u32,
        len: u16,
        vlan_tci: u16,
        rss_hash: u32,
    ) {
        // The attachment flag is the library's, not the device's.
        let ol_flags = ol_flags | (self.ol_flags & ol::EXTERNAL);
        self.write_rx(ol_flags, packet_type, len, vlan_tci, rss_hash);
    }

    /// [`set_rx`](Self::set_rx) for a buffer with no external buffer
    /// attached — a plain buffer fresh off an Rx ring, which the free-buffer
    /// invariants guarantee: the flags are written outright, so the header
    /// line is only written, never read, and a miss on it does not hold up
    /// the receive loop (DPDK's vector Rx writes them the same way).
    #[inline(always)]
    pub(crate) fn set_rx_plain(
        &mut self,
        ol_flags: u64,
        packet_type: u32,
        len: u16,
        vlan_tci: u16,
        rss_hash: u32,
    ) {
        debug_assert_eq!(self.ol_flags & ol::EXTERNAL, 0, "an attached buffer");
        self.write_rx(ol_flags, packet_type, len, vlan_tci, rss_hash);
    }

    /// [`set_rx`](Self::set_rx) for a buffer the caller knows has an
    /// external buffer attached (an Rx queue armed with page fragments):
    /// the attachment flag is written with the others, so the header line is
    /// only written, never read, as [`set_rx_plain`](Self::set_rx_plain)
    /// writes it.
    #[inline(always)]
    pub(crate) fn set_rx_attached(
        &mut self,
        ol_flags: u64,
        packet_type: u32,
        len: u16,
        vlan_tci: u16,
        rss_hash: u32,
    ) {
        debug_assert!(!self.shinfo.is_null(), "a plain buffer");
        self.write_rx(
            ol_flags | ol::EXTERNAL,
            packet_type,
            len,
            vlan_tci,
            rss_hash,
        );
    }

    /// The Rx fields of [`set_rx`](Self::set_rx), written as given.
    #[inline(always)]
    fn write_rx(
        &mut self,
        ol_flags: u64,
        packet_type: u32,
        len: u16,
        vlan_tci: u16,
        rss_hash: u32,
    ) {
        self.ol_flags = ol_flags;
        self.packet_type = packet_type;
        self.pkt_len = len as u32;
        self.data_len = len;
        self.vlan_tci = vlan_tci;
        self.rss_hash = rss_hash;
    }

    /// Writes the header of a new element (all fields), for pool creation.
    pub(crate) fn init(
        this: *mut MbufHeader,
        buf_addr: *mut u8,
        buf_iova: u64,
        buf_len: u16,
        headroom: u16,
        pool: *const PoolInner,
    ) {
        let hdr = MbufHeader {
            buf_addr,
            buf_iova,
            data_off: headroom,
            refcnt: AtomicU16::new(1),
            nb_segs: 1,
            port: PORT_NONE,
            ol_flags: 0,
            packet_type: 0,
            pkt_len: 0,
            data_len: 0,
            vlan_tci: 0,
            rss_hash: 0,
            frag_target: 0,
            vlan_tci_outer: 0,
            buf_len,
            shinfo: std::ptr::null(),
            next: std::ptr::null_mut(),
            pool,
            tx_offload: 0,
            udata64: 0,
            own_buf_addr: buf_addr,
            own_buf_iova: buf_iova,
            own_buf_len: buf_len,
            default_headroom: headroom,
            fdir_id: 0,
            _reserved: [0; 8],
        };
        // SAFETY: the caller passes the start of a fresh pool element, which
        // is 64-byte aligned and at least `HEADER_SIZE` bytes long.
        unsafe { this.write(hdr) };
    }
}

/// Tx offload lengths, packed into one `u64` as DPDK does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxOffload {
    /// L2 header length (7 bits).
    pub l2_len: u8,
    /// L3 header length (9 bits).
    pub l3_len: u16,
    /// L4 header length (8 bits).
    pub l4_len: u8,
    /// TCP segment size for TSO (16 bits).
    pub tso_segsz: u16,
    /// Outer L3 length for tunnels (9 bits).
    pub outer_l3_len: u16,
    /// Outer L2 length for tunnels (7 bits).
    pub outer_l2_len: u8,
}

impl TxOffload {
    /// Packs the lengths (each masked to its width).
    pub fn pack(self) -> u64 {
        (self.l2_len as u64 & 0x7f)
            | (self.l3_len as u64 & 0x1ff) << 7
            | (self.l4_len as u64) << 16
            | (self.tso_segsz as u64) << 24
            | (self.outer_l3_len as u64 & 0x1ff) << 40
            | (self.outer_l2_len as u64 & 0x7f) << 49
    }

    /// Unpacks.
    pub fn unpack(v: u64) -> TxOffload {
        TxOffload {
            l2_len: (v & 0x7f) as u8,
            l3_len: ((v >> 7) & 0x1ff) as u16,
            l4_len: ((v >> 16) & 0xff) as u8,
            tso_segsz: ((v >> 24) & 0xffff) as u16,
            outer_l3_len: ((v >> 40) & 0x1ff) as u16,
            outer_l2_len: ((v >> 49) & 0x7f) as u8,
        }
    }
}

/// Offload flag bits (`ol_flags`), named after DPDK's.
pub mod ol {
    /// Rx: the RSS hash field is valid.
    pub const RX_RSS_HASH: u64 = 1 << 1;
    /// Rx: the VLAN TCI field is valid (stripped by the device).
    pub const RX_VLAN: u64 = 1 << 0;
    /// Rx: the IP checksum was checked and is good.
    pub const RX_IP_CKSUM_GOOD: u64 = 1 << 7;
    /// Rx: the IP checksum is bad.
    pub const RX_IP_CKSUM_BAD: u64 = 1 << 4;
    /// Rx: the L4 checksum was checked and is good.
    pub const RX_L4_CKSUM_GOOD: u64 = 1 << 8;
    /// Rx: the L4 checksum is bad.
    pub const RX_L4_CKSUM_BAD: u64 = 1 << 3;
    /// Tx: compute the IPv4 header checksum.
    pub const TX_IP_CKSUM: u64 = 1 << 54;
    /// Tx: compute the TCP checksum.
    pub const TX_TCP_CKSUM: u64 = 1 << 52;
    /// Tx: compute the UDP checksum.
    pub const TX_UDP_CKSUM: u64 = 3 << 52;
    /// Tx: TCP segmentation offload.
    pub const TX_TCP_SEG: u64 = 1 << 50;
    /// Tx: insert the VLAN TCI.
    pub const TX_VLAN: u64 = 1 << 57;
    /// Tx: the packet is IPv4.
    pub const TX_IPV4: u64 = 1 << 55;
    /// Tx: the packet is IPv6.
    pub const TX_IPV6: u64 = 1 << 56;
    /// Tx: the packet is VXLAN-encapsulated: the checksum flags above apply
    /// to the inner headers, located by the `outer_l2_len`, `outer_l3_len`,
    /// `l2_len` (outer UDP + VXLAN + inner Ethernet) and `l3_len` Tx offload
    /// lengths.
    pub const TX_TUNNEL_VXLAN: u64 = 1 << 45;
    /// Tx, tunnels: compute the outer IPv4 header checksum.
    pub const TX_OUTER_IP_CKSUM: u64 = 1 << 58;
    /// Tx, tunnels: the outer header is IPv4.
    pub const TX_OUTER_IPV4: u64 = 1 << 59;
    /// Tx, tunnels: the outer header is IPv6.
    pub const TX_OUTER_IPV6: u64 = 1 << 60;
    /// The data is an attached external buffer (DPDK's
    /// `RTE_MBUF_F_EXTERNAL`). Kept by the library alone: set on attach,
    /// cleared when the buffer goes back, never changed by
    /// `Mbuf::set_ol_flags` or an Rx write-back. It lets the checks on the
    /// hot path (`Mbuf::is_shared`) on the flags word: only a flagged mbuf's
    /// `shinfo` is read.
    pub const EXTERNAL: u64 = 1 << 61;
}
