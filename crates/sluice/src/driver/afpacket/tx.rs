//! Sending: a TPACKET_V2 ring of fixed-size frames on a socket of its own.
//!
//! `tx_burst` copies each packet (its segments, back to back) into the next
//! frame whose status is `TP_STATUS_AVAILABLE` (read with Acquire, pairing
//! with the kernel's store when it finished with the frame), writes its
//! length, and hands it over with a Release store of
//! `TP_STATUS_SEND_REQUEST`; the mbuf is freed at once (the data is in the
//! ring). One `sendto(MSG_DONTWAIT)` per burst then has the kernel send
//! every requested frame. A frame still requested or being sent means the
//! ring is full: the rest of the burst stays with the caller.
//!
//! With `qdisc_bypass` (the default) frames go straight to the device's
//! transmit function, as a NIC driver would, skipping the queueing
//! discipline (`PACKET_QDISC_BYPASS`).
//!
//! The kernel refuses a frame longer than the interface's MTU plus its
//! Ethernet header (plus 4 bytes if it carries an 802.1Q tag) or shorter
//! than the header. With `PACKET_LOSS` set (so a refused frame does not stop
//! the ring) it skips such a frame silently, marking its slot available as
//! if sent: nothing in the ring tells the two apart. So `tx_burst` applies
//! the same rules before handing a frame over, against the interface's MTU
//! read once per burst (it may change while the port runs), and counts each
//! frame it refuses at once as `tx_errors` and `tx_oversize_errors` or
//! `tx_runt_errors`; the kernel then has nothing to refuse. A kick the
//! kernel refuses for now (`EAGAIN`, `ENOBUFS`) is repeated by the next
//! `tx_burst`, even an empty one.
//!
//! A frame the device drops when the kernel hands it over (a veth whose
//! peer is down or has a smaller MTU; a transmit queue stopped) is put
//! back as requested, the kick fails with `ENOBUFS`, and the kernel offers
//! the same frame first at every kick: one frame the device never takes
//! would hold back the ring for good. So a frame refused for
//! [`REFUSED_MAX`] is dropped — its length set to 0, which the kernel
//! rejects and, with `PACKET_LOSS`, skips — and counted as `tx_errors` and
//! `tx_kernel_drops`; so is every frame still requested at `stop`, when the
//! socket closes with it unsent. Such frames were counted in `tx_packets`
//! when handed over; `tx_kernel_drops` counts those of them never sent.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::IfaceRef;
use super::sys::{self, Mmap, hdr2};
use crate::counter::Counter;
use crate::driver::netdev;
use crate::mbuf::BurstSlice;
use crate::port::{PortCounters, PortError, TxQueue};

/// How the ring of one Tx queue is laid out.
#[derive(Debug, Clone, Copy)]
pub(super) struct TxGeometry {
    pub(super) block_size: u32,
    pub(super) block_nr: u32,
    pub(super) frame_size: u32,
}

impl TxGeometry {
    fn frame_nr(&self) -> u32 {
        self.block_nr * (self.block_size / self.frame_size)
    }
}

struct Ring {
    fd: OwnedFd,
    map: Mmap,
    frame_size: usize,
    frame_nr: usize,
    /// The next frame to fill (the kernel sends in the same order).
    head: usize,
    /// The last kick was refused: kick again.
    unkicked: bool,
    /// The interface's MTU, as last read.
    mtu: usize,
    /// The frame at the kernel's head the device refused, and since when.
    refused: Option<(usize, Instant)>,
}

/// How long the device may refuse the frame at the kernel's head before it
/// is dropped: far longer than a transmit queue stays stopped under load,
/// short next to a device that drops the frame every time.
const REFUSED_MAX: Duration = Duration::from_millis(100);

impl Ring {
    fn frame(&self, i: usize) -> *mut u8 {
        // SAFETY: `i < frame_nr`: inside the mapping (frames never straddle
        // blocks, and blocks are contiguous).
        unsafe { self.map.base().add(i * self.frame_size) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: `tp_status`, a 4-aligned u32 at the start of a frame in
        // the mapping, accessed atomically by both sides while `self` lives.
        unsafe { AtomicU32::from_ptr(self.frame(i).add(hdr2::STATUS).cast()) }
    }

    /// Kicks; returns how many frames it dropped because the device kept
    /// refusing them (0 or 1).
    fn kick(&mut self) -> u64 {
        let r = netdev::wake_tx(self.fd.as_raw_fd());
        self.unkicked = r.is_err();
        let refused = matches!(&r, Err(e) if e.raw_os_error() == Some(libc::ENOBUFS));
        let head = if refused { self.kernel_head() } else { None };
        let Some(i) = head else {
            self.refused = None;
            return 0;
        };
        let now = Instant::now();
        match self.refused {
            Some((j, since)) if j == i && now.duration_since(since) >= REFUSED_MAX => {}
            Some((j, _)) if j == i => return 0,
            _ => {
                self.refused = Some((i, now));
                return 0;
            }
        }
        // SAFETY: `tp_len`, a 4-aligned u32 in frame `i`; the kernel reads
        // a requested frame only inside our own send calls, none of which
        // runs now.
        unsafe { self.frame(i).add(hdr2::LEN).cast::<u32>().write(0) };
        self.refused = None;
        // The kernel skips it now, and sends what follows.
        self.unkicked = netdev::wake_tx(self.fd.as_raw_fd()).is_err();
        1
    }

    /// The frame the kernel sends next: the oldest still requested (frames
    /// are sent in ring order), if any.
    fn kernel_head(&self) -> Option<usize> {
        let n = self.frame_nr;
        let mut oldest = None;
        let mut i = self.head;
        for _ in 0..n {
            i = (i + n - 1) % n;
            if self.status(i).load(Ordering::Acquire) & sys::TP_STATUS_SEND_REQUEST == 0 {
                break;
            }
            oldest = Some(i);
        }
        oldest
    }

    /// Frames still requested: never to be sent once the socket closes.
    fn requested(&self) -> u64 {
        (0..self.frame_nr)
            .filter(|&i| self.status(i).load(Ordering::Acquire) & sys::TP_STATUS_SEND_REQUEST != 0)
            .count() as u64
    }

    /// Reads the interface's MTU again; keeps the last one if the kernel
    /// does not answer (the interface is gone: the kick fails too, and the
    /// frames wait in the ring).
    fn refresh_mtu(&mut self, name: &str) {
        if let Ok(m) = netdev::mtu_on(&self.fd, name) {
            self.mtu = m as usize;
        }
    }
}

/// Ethernet header bytes the kernel adds to the MTU for a frame's length.
const ETH_HLEN: usize = 14;

/// The smallest MTU an Ethernet interface takes (the kernel's
/// `ETH_MIN_MTU`): frames up to this plus [`ETH_HLEN`] always fit.
const ETH_MIN_MTU: usize = 68;

/// What the kernel would refuse of a frame of `len` bytes, whose EtherType
/// field (bytes 12 and 13) `ethertype` reads, on an interface of MTU `mtu`.
fn refused(len: usize, mtu: usize, ethernet: bool, ethertype: impl FnOnce() -> u16) -> Refused {
    if len < ETH_HLEN {
        return Refused::Runt;
    }
    if len <= mtu + ETH_HLEN {
        return Refused::No;
    }
    // An Ethernet device takes a tagged frame 4 bytes longer (only the
    // 802.1Q TPID counts, as in the kernel's `packet_extra_vlan_len_allowed`).
    if ethernet && len <= mtu + ETH_HLEN + 4 && ethertype() == 0x8100 {
        return Refused::No;
    }
    Refused::Oversize
}

#[derive(Debug, PartialEq, Eq)]
enum Refused {
    No,
    Runt,
    Oversize,
}

/// The Tx queue of an afpacket port.
pub(super) struct AfPacketTx {
    iface: Arc<IfaceRef>,
    geometry: TxGeometry,
    qdisc_bypass: bool,
    /// Open between `start` and `stop`.
    ring: Option<Ring>,
    counters: Arc<PortCounters>,
    q: usize,
    ring_full: Arc<Counter>,
    kernel_drops: Arc<Counter>,
    oversize: Arc<Counter>,
    runt: Arc<Counter>,
    wrong_format: Arc<Counter>,
}

impl AfPacketTx {
    pub(super) fn new(
        iface: Arc<IfaceRef>,
        geometry: TxGeometry,
        qdisc_bypass: bool,
        counters: Arc<PortCounters>,
        q: usize,
    ) -> AfPacketTx {
        AfPacketTx {
            ring_full: counters.xstats.register("tx_ring_full"),
            kernel_drops: counters.xstats.register("tx_kernel_drops"),
            oversize: counters.xstats.register("tx_oversize_errors"),
            runt: counters.xstats.register("tx_runt_errors"),
            wrong_format: counters.xstats.register("tx_wrong_format_errors"),
            iface,
            geometry,
            qdisc_bypass,
            ring: None,
            counters,
            q,
        }
    }

    fn open(&self) -> Result<Ring, PortError> {
        let name = &self.iface.name;
        let q = self.q;
        let io = |what: &str| {
            let c = format!("afpacket: {name}: Tx queue {q}: {what}");
            move |e| PortError::io(c, e)
        };
        let g = self.geometry;
        let fd = sys::packet_socket().map_err(io("socket(AF_PACKET)"))?;
        sys::set_opt(&fd, sys::PACKET_VERSION, &sys::TPACKET_V2)
            .map_err(io("PACKET_VERSION TPACKET_V2"))?;
        sys::set_opt(&fd, sys::PACKET_LOSS, &1i32).map_err(io("PACKET_LOSS"))?;
        if self.qdisc_bypass {
            sys::set_opt(&fd, sys::PACKET_QDISC_BYPASS, &1i32)
                .map_err(io("PACKET_QDISC_BYPASS"))?;
        }
        let req = sys::TpacketReq {
            block_size: g.block_size,
            block_nr: g.block_nr,
            frame_size: g.frame_size,
            frame_nr: g.frame_nr(),
        };
        sys::set_opt(&fd, sys::PACKET_TX_RING, &req).map_err(io(&format!(
            "PACKET_TX_RING of {} frames of {} bytes",
            req.frame_nr, g.frame_size
        )))?;
        let len = g.block_size as usize * g.block_nr as usize;
        let map = Mmap::new(&fd, len).map_err(io("mmap of the Tx ring"))?;
        // Protocol 0: this socket sends and never receives.
        sys::bind(&fd, self.iface.index, 0).map_err(io("bind"))?;
        let mtu = netdev::mtu_on(&fd, name).map_err(io("interface MTU"))? as usize;
        Ok(Ring {
            fd,
            map,
            frame_size: g.frame_size as usize,
            frame_nr: g.frame_nr() as usize,
            head: 0,
            unkicked: false,
            mtu,
            refused: None,
        })
    }
}

impl TxQueue for AfPacketTx {
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.tx[self.q];
        let Some(ring) = self.ring.as_mut() else {
            stats.record_burst(0, 0);
            return 0;
        };
        let room = ring.frame_size - hdr2::TX_DATA;
        // The interface's MTU is read again (a system call) once per burst,
        // and only for a burst with a frame that some MTU could refuse: a
        // frame of at most `ETH_MIN_MTU + ETH_HLEN` bytes never is, so
        // small-frame bursts pay nothing.
        let mut mtu_read = false;
        let ethernet = self.iface.ethernet;
        let (mut taken, mut sent, mut bytes, mut errors) = (0usize, 0usize, 0u64, 0u64);
        for m in burst.iter() {
            let i = ring.head;
            // Acquire: pairs with the kernel's store of AVAILABLE (or
            // WRONG_FORMAT) once it is done reading the frame.
            let st = ring.status(i).load(Ordering::Acquire);
            if st & (sys::TP_STATUS_SEND_REQUEST | sys::TP_STATUS_SENDING) != 0 {
                self.ring_full.inc();
                break;
            }
            if st & sys::TP_STATUS_WRONG_FORMAT != 0 {
                // Only without `PACKET_LOSS`; counted should it ever show.
                self.wrong_format.inc();
                errors += 1;
            }
            taken += 1;
            let len = m.pkt_len() as usize;
            // Read only for a frame near the limit; it may span segments.
            let ethertype = || {
                let mut t = m.segments().flat_map(|s| s.iter().copied()).skip(12);
                u16::from_be_bytes([t.next().unwrap_or(0), t.next().unwrap_or(0)])
            };
            if len > ETH_MIN_MTU + ETH_HLEN && !mtu_read {
                ring.refresh_mtu(&self.iface.name);
                mtu_read = true;
            }
            let verdict = if len > room {
                Refused::Oversize
            } else {
                refused(len, ring.mtu, ethernet, ethertype)
            };
            match verdict {
                Refused::No => {}
                Refused::Runt => {
                    self.runt.inc();
                    errors += 1;
                    continue;
                }
                Refused::Oversize => {
                    self.oversize.inc();
                    errors += 1;
                    continue;
                }
            }
            let f = ring.frame(i);
            let mut off = hdr2::TX_DATA;
            for seg in m.segments() {
                // SAFETY: the frame is ours (not requested); the segments
                // add up to `len <= room` bytes after the header.
                unsafe { std::ptr::copy_nonoverlapping(seg.as_ptr(), f.add(off), seg.len()) };
                off += seg.len();
            }
            // SAFETY: `tp_len`, a 4-aligned u32 in our frame.
            unsafe { f.add(hdr2::LEN).cast::<u32>().write(len as u32) };
            // Release: the data and length above are written before the
            // kernel can see the request.
            ring.status(i)
                .store(sys::TP_STATUS_SEND_REQUEST, Ordering::Release);
            ring.head = (i + 1) % ring.frame_nr;
            sent += 1;
            bytes += len as u64;
        }
        // Copied (or refused): free them.
        drop(burst.drain_front(taken));
        if sent != 0 || ring.unkicked {
            let dropped = ring.kick();
            self.kernel_drops.add(dropped);
            errors += dropped;
        }
        stats.errors.add(errors);
        stats.record_burst(sent, bytes);
        taken
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.ring.is_none() {
            self.ring = Some(self.open()?);
        }
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(mut ring) = self.ring.take() {
            // What is still requested goes out now, if the kernel takes it;
            // the ring holds copies, no mbuf. What it does not take is lost
            // with the socket: counted.
            let dropped = ring.kick() + ring.requested();
            self.kernel_drops.add(dropped);
            self.counters.tx[self.q].errors.add(dropped);
        }
    }
}
