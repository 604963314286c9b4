//! The kernel's packet-socket interface (`linux/if_packet.h`), as far as
//! the driver uses it: option numbers, ring request and header layouts,
//! and thin wrappers over the socket calls. Layouts are written out here
//! (with their offsets asserted) rather than taken from the `libc` crate,
//! whose packet-ring types vary between versions.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// `SOL_PACKET` socket options.
pub(super) const PACKET_ADD_MEMBERSHIP: i32 = 1;
pub(super) const PACKET_RX_RING: i32 = 5;
pub(super) const PACKET_STATISTICS: i32 = 6;
pub(super) const PACKET_VERSION: i32 = 10;
pub(super) const PACKET_TX_RING: i32 = 13;
pub(super) const PACKET_LOSS: i32 = 14;
pub(super) const PACKET_FANOUT: i32 = 18;
pub(super) const PACKET_QDISC_BYPASS: i32 = 20;
pub(super) const PACKET_IGNORE_OUTGOING: i32 = 23;

/// `PACKET_ADD_MEMBERSHIP` type: promiscuous mode for as long as the socket
/// lives (the kernel counts it; closing the socket undoes it).
pub(super) const PACKET_MR_PROMISC: u16 = 1;

/// Ring versions.
pub(super) const TPACKET_V2: i32 = 1;
pub(super) const TPACKET_V3: i32 = 2;

/// Rx status bits (a block's `block_status`, a packet's `tp_status`).
pub(super) const TP_STATUS_KERNEL: u32 = 0;
pub(super) const TP_STATUS_USER: u32 = 1 << 0;
pub(super) const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
pub(super) const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
pub(super) const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// Tx frame status values.
pub(super) const TP_STATUS_SEND_REQUEST: u32 = 1 << 0;
pub(super) const TP_STATUS_SENDING: u32 = 1 << 1;
pub(super) const TP_STATUS_WRONG_FORMAT: u32 = 1 << 2;

/// `tp_feature_req_word`: fill `tp_rxhash` with the flow hash.
pub(super) const TP_FT_REQ_FILL_RXHASH: u32 = 1;

/// Fanout modes and flags (`PACKET_FANOUT` value = id | (mode | flags) << 16).
pub(super) const PACKET_FANOUT_HASH: u32 = 0;
pub(super) const PACKET_FANOUT_LB: u32 = 1;
pub(super) const PACKET_FANOUT_CPU: u32 = 2;
pub(super) const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;

/// `struct tpacket_req3`: the V3 Rx ring request.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TpacketReq3 {
    pub(super) block_size: u32,
    pub(super) block_nr: u32,
    pub(super) frame_size: u32,
    pub(super) frame_nr: u32,
    /// Milliseconds after which a block with at least one packet is handed
    /// over even if not full.
    pub(super) retire_blk_tov: u32,
    pub(super) sizeof_priv: u32,
    pub(super) feature_req_word: u32,
}

/// `struct tpacket_req`: the V2 Tx ring request.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TpacketReq {
    pub(super) block_size: u32,
    pub(super) block_nr: u32,
    pub(super) frame_size: u32,
    pub(super) frame_nr: u32,
}

/// `struct tpacket_stats_v3` (reading it resets the kernel's counts).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TpacketStatsV3 {
    pub(super) packets: u32,
    pub(super) drops: u32,
    pub(super) freeze_q_cnt: u32,
}

/// `struct packet_mreq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PacketMreq {
    pub(super) ifindex: i32,
    pub(super) kind: u16,
    pub(super) alen: u16,
    pub(super) address: [u8; 8],
}

/// Byte offsets in a V3 block descriptor (`struct tpacket_block_desc` with
/// its `tpacket_hdr_v1`).
pub(super) mod block {
    /// `block_status`: `TP_STATUS_KERNEL` or `TP_STATUS_USER` (4 bytes).
    pub(crate) const STATUS: usize = 8;
    /// `num_pkts` (4 bytes).
    pub(crate) const NUM_PKTS: usize = 12;
    /// `offset_to_first_pkt` from the block start (4 bytes).
    pub(crate) const FIRST_PKT: usize = 16;
}

/// Byte offsets in a V3 packet header (`struct tpacket3_hdr`).
pub(super) mod hdr3 {
    /// `tp_next_offset`: to the next packet of the block (4 bytes).
    pub(crate) const NEXT: usize = 0;
    /// `tp_snaplen`: bytes present (4 bytes).
    pub(crate) const SNAPLEN: usize = 12;
    /// `tp_len`: the frame's length on the wire (4 bytes).
    pub(crate) const LEN: usize = 16;
    /// `tp_status` (4 bytes).
    pub(crate) const STATUS: usize = 20;
    /// `tp_mac`: the frame's offset from this header (2 bytes).
    pub(crate) const MAC: usize = 24;
    /// `hv1.tp_rxhash` (4 bytes).
    pub(crate) const RXHASH: usize = 28;
    /// `hv1.tp_vlan_tci` (4 bytes).
    pub(crate) const VLAN_TCI: usize = 32;
    /// `hv1.tp_vlan_tpid` (2 bytes).
    pub(crate) const VLAN_TPID: usize = 36;
}

/// Byte offsets in a V2 frame (`struct tpacket2_hdr`), and where a Tx
/// frame's data starts.
pub(super) mod hdr2 {
    /// `tp_status` (4 bytes).
    pub(crate) const STATUS: usize = 0;
    /// `tp_len` (4 bytes).
    pub(crate) const LEN: usize = 4;
    /// Data of a Tx frame: `TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)`,
    /// the header aligned to 16.
    pub(crate) const TX_DATA: usize = 32;
}

/// A ring's memory, mapped from the socket; unmapped on drop.
pub(super) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; the queue owning it is the
// only user-space code touching it.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Maps `len` bytes of socket `fd`'s rings.
    pub(super) fn new(fd: &OwnedFd, len: usize) -> io::Result<Mmap> {
        // SAFETY: a fresh shared mapping of the socket's ring; no existing
        // memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Mmap { ptr, len })
    }

    /// The first byte.
    pub(super) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A new packet socket (`AF_PACKET`, `SOCK_RAW`) bound to no protocol yet:
/// it receives nothing until [`bind`] names one.
pub(super) fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// setsockopt(2) at `SOL_PACKET` with a plain value.
pub(super) fn set_opt<T: Copy>(fd: &OwnedFd, name: i32, val: &T) -> io::Result<()> {
    // SAFETY: `val` points to `size_of::<T>()` readable bytes for the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            name,
            std::ptr::from_ref(val).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// getsockopt(2) at `SOL_PACKET` into a plain value.
pub(super) fn get_opt<T: Copy + Default>(fd: &OwnedFd, name: i32) -> io::Result<T> {
    let mut val = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `val` has `len` writable bytes; the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            name,
            std::ptr::from_mut(&mut val).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(val)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds `fd` to interface `ifindex` for `protocol` (host order; 0: send
/// only, receive nothing).
pub(super) fn bind(fd: &OwnedFd, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: all-zero is a valid `sockaddr_ll`.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a valid `sockaddr_ll` of the length given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::from_ref(&sll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
