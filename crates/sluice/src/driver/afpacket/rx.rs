//! Receiving: a TPACKET_V3 ring of blocks, copied into mbufs.
//!
//! The kernel fills one block at a time with packets (each a
//! `tpacket3_hdr` and the frame, packed back to back) and hands the block
//! over by setting its `block_status` to `TP_STATUS_USER` — when it is full,
//! or when the retire timeout passes with at least one packet in it.
//! `rx_burst` reads `block_status` with Acquire (pairing with the kernel's
//! write barrier before it sets the status), copies packets into mbufs from
//! the queue's pool (the ring is the kernel's memory: a frame cannot become
//! an mbuf without a copy), and gives each finished block back with a
//! Release store of `TP_STATUS_KERNEL`, after its last read. A burst may
//! end in the middle of a block; the next one continues there. No system
//! call on the receive path.
//!
//! Per packet: a VLAN tag the kernel stripped (`TP_STATUS_VLAN_VALID`) is put
//! back into the frame, so what is forwarded is what was on the wire; a
//! runt, a truncated frame, or one longer than the MTU or the data room,
//! counts `rx_errors` with its reason (`rx_runt_errors`,
//! `rx_oversize_errors`) and is skipped; `TP_STATUS_CSUMNOTREADY` (the
//! sender left a checksum to hardware that never ran — a veth whose peer
//! has checksum offload on) counts `rx_csum_not_ready`.
//!
//! The kernel's own counts (`PACKET_STATISTICS`, which reset when read) are
//! added into xstats every 1024 polls and at stop; its drops (ring full)
//! also count as `rx_missed`.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::IfaceRef;
use super::sys::{self, Mmap, block, hdr3};
use crate::counter::Counter;
use crate::mbuf::{BurstSlice, MbufHeader, MbufPool, RearmData, ol};
use crate::mempool::Elem;
use crate::port::{PortCounters, PortError, RxFrameCheck, RxQueue};

/// How the ring of one Rx queue is laid out.
#[derive(Debug, Clone, Copy)]
pub(super) struct RxGeometry {
    pub(super) block_size: u32,
    pub(super) block_nr: u32,
    pub(super) frame_size: u32,
    /// Block retire timeout, milliseconds.
    pub(super) timeout_ms: u32,
}

/// An open ring: the socket and its mapped blocks, and where reading is.
struct Ring {
    fd: OwnedFd,
    map: Mmap,
    block_size: usize,
    block_nr: usize,
    /// The block being read (or to be read next).
    block: usize,
    /// Packets of `block` not yet read; 0 when no block is open.
    left: u32,
    /// Offset in `block` of the next packet's header.
    off: usize,
}

impl Ring {
    fn block_ptr(&self, b: usize) -> *mut u8 {
        // SAFETY: `b < block_nr`, so the offset stays inside the mapping.
        unsafe { self.map.base().add(b * self.block_size) }
    }

    fn block_status(&self, b: usize) -> &AtomicU32 {
        // SAFETY: `block_status` is a 4-aligned u32 of a block descriptor in
        // the mapping (blocks are page-aligned), which the kernel and we
        // both access atomically for as long as `self` lives.
        unsafe { AtomicU32::from_ptr(self.block_ptr(b).add(block::STATUS).cast()) }
    }

    /// Opens the next block if the kernel has handed it over.
    fn open_block(&mut self) -> bool {
        // Acquire: pairs with the kernel's barrier before it stores
        // TP_STATUS_USER, so the block's packets are visible below.
        if self.block_status(self.block).load(Ordering::Acquire) & sys::TP_STATUS_USER == 0 {
            return false;
        }
        let p = self.block_ptr(self.block);
        // SAFETY: descriptor fields inside the block, owned by us now.
        let (num, first) = unsafe {
            (
                read_u32(p, block::NUM_PKTS),
                read_u32(p, block::FIRST_PKT) as usize,
            )
        };
        if num == 0 {
            // A block with nothing in it: give it straight back.
            self.release_block();
            return false;
        }
        self.left = num;
        self.off = first;
        true
    }

    /// Gives the current block back to the kernel and moves to the next.
    fn release_block(&mut self) {
        // Release: every read of this block above happens before the kernel
        // may write into it again.
        self.block_status(self.block)
            .store(sys::TP_STATUS_KERNEL, Ordering::Release);
        self.block = (self.block + 1) % self.block_nr;
        self.left = 0;
    }
}

/// Reads a native-endian u32 at `p + off`.
///
/// # Safety
/// `p + off .. + 4` is readable and 4-aligned.
unsafe fn read_u32(p: *const u8, off: usize) -> u32 {
    // SAFETY: forwarded.
    unsafe { p.add(off).cast::<u32>().read() }
}

/// Reads a native-endian u16 at `p + off`.
///
/// # Safety
/// `p + off .. + 2` is readable and 2-aligned.
unsafe fn read_u16(p: *const u8, off: usize) -> u16 {
    // SAFETY: forwarded.
    unsafe { p.add(off).cast::<u16>().read() }
}

/// Hints the CPU to fetch the cache line at `p` (never faults).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing architecturally and
    // cannot fault, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// One received packet, as the kernel describes it.
struct Pkt {
    data: *const u8,
    snaplen: usize,
    len: usize,
    status: u32,
    rxhash: u32,
    vlan: Option<(u16, u16)>,
}

/// The Rx queue of an afpacket port.
pub(super) struct AfPacketRx {
    /// Runts and frames over the MTU are counted and skipped.
    check: RxFrameCheck,
    iface: Arc<IfaceRef>,
    geometry: RxGeometry,
    fanout: Option<Arc<FanoutGroup>>,
    promisc: bool,
    rss: bool,
    pool: MbufPool,
    rearm: RearmData,
    /// Open between `start` and `stop`.
    ring: Option<Ring>,
    /// `rx_burst` calls since the kernel's counts were last read.
    polls: u32,
    counters: Arc<PortCounters>,
    q: usize,
    kernel_packets: Arc<Counter>,
    kernel_drops: Arc<Counter>,
    freeze_q: Arc<Counter>,
    csum_not_ready: Arc<Counter>,
}

/// Polls between two reads of the kernel's counts.
const STATS_EVERY: u32 = 1024;

/// What an [`AfPacketRx`] is made of.
pub(super) struct RxQueueParts {
    /// The interface it receives from.
    pub(super) iface: Arc<IfaceRef>,
    /// Its ring's blocks and frames.
    pub(super) geometry: RxGeometry,
    /// The fanout group its socket joins, when the port has several Rx
    /// queues.
    pub(super) fanout: Option<Arc<FanoutGroup>>,
    /// Join the interface's promiscuous membership.
    pub(super) promisc: bool,
    /// Deliver the RSS hash.
    pub(super) rss: bool,
    /// Where its buffers come from.
    pub(super) pool: MbufPool,
    /// The port id written into each mbuf.
    pub(super) port_id: u16,
    /// The port's MTU: longer frames are counted and skipped.
    pub(super) mtu: u16,
    /// Its port's counters.
    pub(super) counters: Arc<PortCounters>,
    /// The queue's index.
    pub(super) q: usize,
}

impl AfPacketRx {
    /// Rx queue `parts.q`; its socket is opened when it starts.
    pub(super) fn new(parts: RxQueueParts) -> AfPacketRx {
        let RxQueueParts {
            iface,
            geometry,
            fanout,
            promisc,
            rss,
            pool,
            port_id,
            mtu,
            counters,
            q,
        } = parts;
        let x = &counters.xstats;
        AfPacketRx {
            check: RxFrameCheck::new(x, mtu),
            kernel_packets: x.register("rx_kernel_packets"),
            kernel_drops: x.register("rx_kernel_drops"),
            freeze_q: x.register("rx_kernel_freeze_q"),
            csum_not_ready: x.register("rx_csum_not_ready"),
            iface,
            geometry,
            fanout,
            promisc,
            rss,
            rearm: pool.rearm_data(port_id),
            pool,
            ring: None,
            polls: 0,
            counters,
            q,
        }
    }

    /// Socket, ring, map, bind, promiscuous membership, fanout.
    fn open(&self) -> Result<Ring, PortError> {
        let name = &self.iface.name;
        let ctx = |what: &str| format!("afpacket: {name}: Rx queue {}: {what}", self.q);
        let io = |what: &str| {
            let c = ctx(what);
            move |e| PortError::io(c, e)
        };
        let g = self.geometry;
        let fd = sys::packet_socket().map_err(io("socket(AF_PACKET)"))?;
        sys::set_opt(&fd, sys::PACKET_VERSION, &sys::TPACKET_V3)
            .map_err(io("PACKET_VERSION TPACKET_V3"))?;
        let req = sys::TpacketReq3 {
            block_size: g.block_size,
            block_nr: g.block_nr,
            frame_size: g.frame_size,
            frame_nr: g.block_nr * (g.block_size / g.frame_size),
            retire_blk_tov: g.timeout_ms,
            sizeof_priv: 0,
            feature_req_word: if self.rss {
                sys::TP_FT_REQ_FILL_RXHASH
            } else {
                0
            },
        };
        sys::set_opt(&fd, sys::PACKET_RX_RING, &req).map_err(io(&format!(
            "PACKET_RX_RING of {} blocks of {} bytes",
            g.block_nr, g.block_size
        )))?;
        let len = g.block_size as usize * g.block_nr as usize;
        let map = Mmap::new(&fd, len).map_err(io("mmap of the Rx ring"))?;
        // Frames this host sends out of the interface (our own Tx queues
        // among them) are not received.
        sys::set_opt(&fd, sys::PACKET_IGNORE_OUTGOING, &1i32)
            .map_err(io("PACKET_IGNORE_OUTGOING"))?;
        sys::bind(&fd, self.iface.index, libc::ETH_P_ALL as u16).map_err(io("bind"))?;
        if self.promisc {
            let mreq = sys::PacketMreq {
                ifindex: self.iface.index as i32,
                kind: sys::PACKET_MR_PROMISC,
                ..Default::default()
            };
            sys::set_opt(&fd, sys::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(io("promiscuous mode (PACKET_ADD_MEMBERSHIP)"))?;
        }
        if let Some(f) = &self.fanout {
            f.join(&fd).map_err(io("PACKET_FANOUT"))?;
        }
        // Counts so far (before the fanout took its share) are not ours.
        let _ = sys::get_opt::<sys::TpacketStatsV3>(&fd, sys::PACKET_STATISTICS);
        Ok(Ring {
            fd,
            map,
            block_size: g.block_size as usize,
            block_nr: g.block_nr as usize,
            block: 0,
            left: 0,
            off: 0,
        })
    }

    /// Adds the kernel's counts since the last read into the xstats.
    fn read_kernel_stats(&self, ring: &Ring) {
        if let Ok(s) = sys::get_opt::<sys::TpacketStatsV3>(&ring.fd, sys::PACKET_STATISTICS) {
            self.kernel_packets.add(s.packets as u64);
            self.kernel_drops.add(s.drops as u64);
            self.freeze_q.add(s.freeze_q_cnt as u64);
            self.counters.rx[self.q].missed.add(s.drops as u64);
        }
    }
}

/// The next packet of `ring`'s open block (`left > 0`).
fn next_packet(ring: &mut Ring) -> Pkt {
    let b = ring.block_ptr(ring.block);
    // SAFETY: `off` is the kernel's offset of a packet header inside this
    // block, which we own until it is released; the fields are aligned
    // (headers are 16-aligned).
    unsafe {
        let h = b.add(ring.off);
        let status = read_u32(h, hdr3::STATUS);
        let mac = read_u16(h, hdr3::MAC) as usize;
        let pkt = Pkt {
            data: h.add(mac),
            snaplen: read_u32(h, hdr3::SNAPLEN) as usize,
            len: read_u32(h, hdr3::LEN) as usize,
            status,
            rxhash: read_u32(h, hdr3::RXHASH),
            vlan: (status & sys::TP_STATUS_VLAN_VALID != 0).then(|| {
                let tpid = if status & sys::TP_STATUS_VLAN_TPID_VALID != 0 {
                    read_u16(h, hdr3::VLAN_TPID)
                } else {
                    0x8100
                };
                (tpid, read_u32(h, hdr3::VLAN_TCI) as u16)
            }),
        };
        ring.off += read_u32(h, hdr3::NEXT) as usize;
        ring.left -= 1;
        if ring.left != 0 {
            // The next packet's header and first data line, written by the
            // kernel on another CPU: start fetching them now.
            prefetch(b.add(ring.off));
            prefetch(b.add(ring.off + 64));
        }
        pkt
    }
}

impl AfPacketRx {
    /// Copies `pkt` into the free pool element `e`; returns its length, or
    /// the frame's length on the wire if it cannot be delivered (a runt,
    /// truncated, or too long).
    fn fill(&self, e: Elem, pkt: &Pkt) -> Result<usize, usize> {
        let tag = if pkt.vlan.is_some() { 4 } else { 0 };
        let len = pkt.snaplen + tag;
        if pkt.snaplen < pkt.len
            || !self.check.accepts(len)
            || len > self.pool.data_room() as usize
            || pkt.snaplen < 12
        {
            return Err(pkt.len + tag);
        }
        // SAFETY: a buffer just taken from this queue's pool: it satisfies
        // the free-buffer invariants and no one else can reach it.
        let h = unsafe { &mut *e.as_ptr().cast::<MbufHeader>() };
        h.rearm(self.rearm);
        let mut flags = 0;
        let mut hash = 0;
        if self.rss {
            flags |= ol::RX_RSS_HASH;
            hash = pkt.rxhash;
        }
        h.set_rx(flags, 0, len as u16, 0, hash);
        // SAFETY: the data room from the default headroom holds `len` bytes
        // (checked above); the ring holds `snaplen` bytes at `pkt.data`.
        unsafe {
            let dst = h.buf_addr.add(self.rearm.data_off as usize);
            match pkt.vlan {
                None => std::ptr::copy_nonoverlapping(pkt.data, dst, len),
                Some((tpid, tci)) => {
                    std::ptr::copy_nonoverlapping(pkt.data, dst, 12);
                    let [t0, t1] = tpid.to_be_bytes();
                    let [c0, c1] = tci.to_be_bytes();
                    std::ptr::copy_nonoverlapping([t0, t1, c0, c1].as_ptr(), dst.add(12), 4);
                    std::ptr::copy_nonoverlapping(pkt.data.add(12), dst.add(16), pkt.snaplen - 12);
                }
            }
        }
        Ok(len)
    }
}

impl RxQueue for AfPacketRx {
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let Some(mut ring) = self.ring.take() else {
            self.counters.rx[self.q].record_burst(0, 0);
            return 0;
        };
        self.polls += 1;
        if self.polls >= STATS_EVERY {
            self.polls = 0;
            self.read_kernel_stats(&ring);
        }
        let stats = &self.counters.rx[self.q];
        let (mut n, mut bytes) = (0usize, 0u64);
        while burst.free() != 0 {
            if ring.left == 0 && !ring.open_block() {
                break;
            }
            let want = burst.free().min(ring.left as usize);
            let base = burst.len();
            let slots = burst.spare_slots(want);
            if self.pool.mempool().get_bulk(slots).is_err() {
                stats.nombuf.inc();
                break;
            }
            // Slots `..used` hold delivered packets; a packet that cannot be
            // delivered leaves its element for the next one.
            let mut used = 0;
            for _ in 0..want {
                let pkt = next_packet(&mut ring);
                if pkt.status & sys::TP_STATUS_CSUMNOTREADY != 0 {
                    self.csum_not_ready.inc();
                }
                match self.fill(slots[used], &pkt) {
                    Ok(len) => {
                        used += 1;
                        bytes += len as u64;
                    }
                    Err(len) => self.check.count_drop(len, &stats.errors),
                }
            }
            if used < want {
                // SAFETY: elements taken from this pool above and not
                // handed out.
                unsafe { self.pool.mempool().put_bulk(&slots[used..want]) };
            }
            // SAFETY: slots `base..base + used` now hold mbufs we own.
            unsafe { burst.set_len(base + used) };
            n += used;
            if ring.left == 0 {
                ring.release_block();
            }
        }
        self.ring = Some(ring);
        stats.record_burst(n, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.ring.is_none() {
            self.ring = Some(self.open()?);
            self.polls = 0;
        }
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(ring) = self.ring.take() {
            self.read_kernel_stats(&ring);
            // Closing the socket leaves the fanout group and promiscuous
            // mode; the ring holds no mbuf.
            drop(ring);
            if let Some(f) = &self.fanout {
                f.leave();
            }
        }
    }
}

/// The fanout group of a port's Rx queues: the first queue to start makes
/// it (with a kernel-chosen unique id), the others join it by that id. When
/// the last member leaves, the kernel drops the group and its id may go to
/// someone else's, so the id is forgotten then: the next start makes a new
/// group rather than joining by a stale id.
pub(super) struct FanoutGroup {
    pub(super) mode: u32,
    /// The group's id while it has members, and how many.
    state: Mutex<FanoutState>,
}

/// See [`FanoutGroup`].
#[derive(Default)]
struct FanoutState {
    /// The kernel's id of the group; `None` when it has no member.
    id: Option<u16>,
    /// Sockets of this port in the group.
    members: usize,
}

impl FanoutGroup {
    /// A group of `mode` not made yet.
    pub(super) fn new(mode: u32) -> FanoutGroup {
        FanoutGroup {
            mode,
            state: Mutex::new(FanoutState::default()),
        }
    }

    /// Joins (or makes) the group with socket `fd`.
    pub(super) fn join(&self, fd: &OwnedFd) -> std::io::Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match st.id {
            Some(i) => sys::set_opt(fd, sys::PACKET_FANOUT, &(u32::from(i) | self.mode << 16))?,
            None => {
                let v = (self.mode | sys::PACKET_FANOUT_FLAG_UNIQUEID) << 16;
                sys::set_opt(fd, sys::PACKET_FANOUT, &v)?;
                let got: u32 = sys::get_opt(fd, sys::PACKET_FANOUT)?;
                st.id = Some(got as u16);
            }
        }
        st.members += 1;
        Ok(())
    }

    /// The group's id while it has members.
    #[cfg(test)]
    pub(super) fn id(&self) -> Option<u16> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).id
    }

    /// Notes that a member's socket was closed.
    pub(super) fn leave(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.members = st.members.saturating_sub(1);
        if st.members == 0 {
            st.id = None;
        }
    }
}
