//! The device's Tx engine: executes the WQEs of one Tx ring
//! ([`wqe`](crate::driver::soft::wqe)) and writes completions.
//!
//! # A step
//! Load the tail register (acquire: pairs with the driver's release store,
//! the doorbell), then WQE by WQE from the engine's head while frames sent
//! stay under [`STEP`]:
//! 1. read the control segment; a `ds` of 0, above [`MAX_DS`] or reaching
//!    past the tail leaves no way to find the next WQE: the engine writes an
//!    error CQE and stops the queue until it is reset (as a send queue
//!    moving to its error state);
//! 2. check the whole WQE before sending anything (index, queue number,
//!    opcode, eseg flags and offsets, inline sizes, every dseg): a WQE that
//!    fails is skipped whole with an error CQE, and counted in
//!    `device_wqe_errors`;
//! 3. count the fetch — the WQE's bytes plus `bus_overhead` per 64-byte
//!    block — and the DMA reads of every dseg's bytes;
//! 4. execute it: gather each packet (inline bytes from the WQE, the rest
//!    through the dseg addresses) into the frame FIFO, apply the eseg's
//!    offloads (checksums — by the device's parser, or at the eseg's tunnel
//!    offsets —, then the VLAN insertion), and hand the frame to the sink.
//!    A TSO WQE becomes one frame per MSS of payload. A frame longer than
//!    the FIFO is dropped and counted in `device_tx_errors`;
//! 5. if the cseg asks ([`CE`]), write a CQE naming the WQE's first block:
//!    the last word with release, counted in `bus_completion_bytes`.
//!
//! A wire asking for a pause stops the step inside a WQE: the engine keeps
//! where it was (the next packet of an MPWQE, the next segment of a TSO
//! WQE) and goes on from there next time, fetching nothing again.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::counter::Counter;
use crate::port::Xstats;
use crate::tsc::rdtsc;

use super::frame::{TsoHeaders, tx_checksums, tx_checksums_at};
use super::wire::Sent;
use super::{Bus, STEP, TxSink};
use crate::driver::soft::hw::regs::TxRegs;
use crate::driver::soft::hw::wqe::{
    CE, CQE_ERR, CQE_REQ, Cseg, Eseg, INLINE, LKEY, MAX_DS, MAX_TSO_HEADER, OP_MPW, OP_SEND,
    OP_TSO, OPMOD_EMPW, SEG, SEGS_PER_BB, TUN_VXLAN, VLAN_INSERT, blocks, cs, header_segs,
    inline_segs, read_inline, seg_bytes, syndrome,
};

/// What a Tx engine is configured with.
pub struct TxEngineParams {
    /// Frame FIFO size: the longest frame the device sends.
    pub max_frame: usize,
    /// The send queue number WQEs must carry (the queue's index).
    pub sqn: u32,
}

/// A dseg, read back.
#[derive(Debug, Clone, Copy, Default)]
struct Dseg {
    len: u32,
    addr: u64,
}

fn parse_dseg(b: &[u8; SEG]) -> (u32, u32, u64) {
    let bc = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let key = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    let addr = u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"));
    (bc, key, addr)
}

/// A pointed-to dseg's check (`INLINE` is refused: callers that take
/// inline entries look first).
fn check_dseg(b: &[u8; SEG]) -> Result<Dseg, u8> {
    let (bc, key, addr) = parse_dseg(b);
    if bc == 0 || bc > 0xffff || key != LKEY || addr == 0 {
        return Err(syndrome::BAD_DSEG);
    }
    Ok(Dseg { len: bc, addr })
}

/// A WQE that passed the checks.
struct Checked {
    eseg: Eseg,
    /// Inline header size (SEND, TSO).
    inline: usize,
    /// Bytes the dsegs point to, their DMA transactions, and the dsegs.
    dma: u64,
    tlps: u64,
    dsegs: u32,
}

/// One Tx queue's engine.
pub struct TxEngine {
    regs: Arc<TxRegs>,
    sqn: u32,
    /// The block the next WQE starts at (free-running).
    head: u32,
    /// Inside the WQE at `head` after a pause: the segment of the next
    /// MPWQE packet, or the next TSO segment number (0: from the start).
    resume: u32,
    /// The WQE at `head` was checked and its fetch counted.
    fetched: bool,
    /// CQEs written (free-running).
    cqes_written: u32,
    /// Stopped on a WQE whose size could not be trusted; a reset clears it.
    halted: bool,
    sink: TxSink,
    /// Frame FIFO; the frame starts at offset 4, leaving room to insert a
    /// VLAN tag.
    frame: Box<[u8]>,
    /// A TSO WQE's header, kept while its segments are built.
    tso_header: [u8; MAX_TSO_HEADER],
    /// A TSO WQE's dsegs.
    tso_dsegs: [Dseg; MAX_DS as usize],
    bus: Bus,
    /// Frames dropped (longer than the FIFO, or a TSO header the parser
    /// cannot follow).
    errors: Arc<Counter>,
    /// WQEs rejected.
    wqe_errors: Arc<Counter>,
    /// The TSC read after the current step loaded the tail: the receipt
    /// time of every frame a checker sink checks in it (one reading per
    /// step, not per frame).
    step_tsc: u64,
}

impl TxEngine {
    /// An engine sending into `sink`.
    pub fn new(
        regs: Arc<TxRegs>,
        sink: TxSink,
        params: TxEngineParams,
        bus: Bus,
        x: &Xstats,
    ) -> TxEngine {
        TxEngine {
            regs,
            sqn: params.sqn,
            head: 0,
            resume: 0,
            fetched: false,
            cqes_written: 0,
            halted: false,
            sink,
            frame: vec![0; params.max_frame + 4].into_boxed_slice(),
            tso_header: [0; MAX_TSO_HEADER],
            tso_dsegs: [Dseg::default(); MAX_DS as usize],
            bus,
            errors: x.register("device_tx_errors"),
            wqe_errors: x.register("device_wqe_errors"),
            step_tsc: 0,
        }
    }

    /// Back to block 0 (the queue is starting or stopping; the ring is
    /// reset).
    pub fn reset(&mut self) {
        self.head = 0;
        self.resume = 0;
        self.fetched = false;
        self.cqes_written = 0;
        self.halted = false;
    }

    /// Whether the engine stopped on a WQE of unusable size.
    #[cfg(all(test, not(loom)))]
    pub fn halted(&self) -> bool {
        self.halted
    }

    #[inline]
    fn seg(&self, i: u32) -> [u8; SEG] {
        seg_bytes(self.regs.segs.get(i))
    }

    /// Writes the next CQE.
    #[inline]
    fn complete(&mut self, counter: u16, opcode: u8, syn: u8) {
        let cq = &self.regs.cq;
        let w = crate::driver::soft::hw::wqe::cqe_word(
            syn,
            self.sqn,
            counter,
            opcode,
            cq.owner(self.cqes_written),
        );
        // Release: pairs with the driver's acquire load of this word; the
        // device is done with every buffer of the WQE.
        cq.get(self.cqes_written).last().store(w, Ordering::Release);
        self.cqes_written = self.cqes_written.wrapping_add(1);
        self.bus.completion();
    }

    /// Rejects the WQE at `head`: an error CQE, counted.
    fn reject(&mut self, syn: u8) {
        self.wqe_errors.inc();
        self.complete(self.head as u16, CQE_ERR, syn);
    }

    fn advance(&mut self, bbs: u32) {
        self.head = self.head.wrapping_add(bbs);
        self.resume = 0;
        self.fetched = false;
    }

    /// One step: WQEs off the ring until [`STEP`] frames went out. Returns
    /// how many frames.
    pub fn step(&mut self) -> usize {
        let t0 = rdtsc();
        // Acquire: pairs with the driver's release store of the tail; the
        // WQEs below it are written.
        let tail = self.regs.tail.load(Ordering::Acquire);
        if let TxSink::Wire(w) = &mut self.sink {
            w.refresh();
        }
        if let TxSink::Check(_) = self.sink {
            // After the tail: every frame below it was stamped earlier.
            self.step_tsc = crate::tsc::rdtsc_ordered();
        }
        let mut pkts = 0;
        while !self.halted && self.head != tail && pkts < STEP {
            let base = self.head.wrapping_mul(SEGS_PER_BB);
            let c = Cseg::parse(&self.seg(base));
            let bbs = blocks(c.ds);
            if c.ds == 0 || c.ds > MAX_DS || bbs > tail.wrapping_sub(self.head) {
                self.reject(syndrome::BAD_SIZE);
                self.halted = true;
                break;
            }
            let w = match self.check(base, &c) {
                Ok(w) => w,
                Err(syn) => {
                    self.reject(syn);
                    self.advance(bbs);
                    continue;
                }
            };
            if !self.fetched {
                self.bus.wqe_fetch(c.ds);
                self.bus.tx_dma(w.dma, w.tlps);
                self.fetched = true;
            }
            let done = match c.opcode {
                OP_SEND => self.send(base, &c, &w, &mut pkts),
                OP_TSO => self.tso(base, &c, &w, &mut pkts),
                _ => self.mpw(base, &c, &w, &mut pkts),
            };
            if !done {
                break;
            }
            if c.flags & CE != 0 {
                self.complete(c.wqe_index, CQE_REQ, 0);
            }
            self.advance(bbs);
        }
        self.bus.cycles.add(rdtsc().wrapping_sub(t0));
        pkts
    }

    /// Checks the WQE at segment `base` (its size is known to fit).
    fn check(&self, base: u32, c: &Cseg) -> Result<Checked, u8> {
        if c.wqe_index != self.head as u16 || c.sqn != self.sqn {
            return Err(syndrome::BAD_INDEX);
        }
        if !c.reserved_clear || c.ds < 2 {
            return Err(syndrome::BAD_LAYOUT);
        }
        let eb = self.seg(base.wrapping_add(1));
        let e = Eseg::parse(&eb);
        let insert = u16::from_be_bytes([eb[8], eb[9]]);
        if e.cs & !cs::ALL != 0 || e.tun & !TUN_VXLAN != 0 || insert & !VLAN_INSERT != 0 {
            return Err(syndrome::BAD_ESEG);
        }
        let inner = cs::INNER_L3 | cs::INNER_L4_UDP | cs::INNER_L4_TCP;
        if e.tun & TUN_VXLAN != 0 {
            let s = e.swp;
            if !(0 < s[0] && s[0] < s[1] && s[1] < s[2] && s[2] < s[3])
                || e.cs & (cs::L4_UDP | cs::L4_TCP) != 0
            {
                return Err(syndrome::BAD_ESEG);
            }
        } else if e.swp != [0; 4] || e.cs & inner != 0 {
            return Err(syndrome::BAD_ESEG);
        }
        let inline = u16::from_be_bytes([eb[12], eb[13]]) as usize;
        let mut w = Checked {
            eseg: e,
            inline,
            dma: 0,
            tlps: 0,
            dsegs: 0,
        };
        match (c.opcode, c.opmod) {
            (OP_SEND, 0) | (OP_TSO, 0) => {
                let tso = c.opcode == OP_TSO;
                if tso != (e.mss != 0) {
                    return Err(syndrome::BAD_TSO);
                }
                if tso && (!(14..=MAX_TSO_HEADER).contains(&inline) || e.tun != 0) {
                    return Err(syndrome::BAD_TSO);
                }
                let first = 2 + header_segs(inline);
                if first > c.ds {
                    return Err(syndrome::BAD_INLINE);
                }
                for i in first..c.ds {
                    let d = check_dseg(&self.seg(base.wrapping_add(i)))?;
                    w.dma += d.len as u64;
                    w.tlps += Bus::tlps(d.len as usize);
                    w.dsegs += 1;
                }
                if tso && w.dsegs == 0 {
                    return Err(syndrome::BAD_TSO);
                }
                if inline as u64 + w.dma == 0 {
                    return Err(syndrome::BAD_LAYOUT);
                }
            }
            (OP_MPW, OPMOD_EMPW) => {
                if inline != 0 {
                    return Err(syndrome::BAD_INLINE);
                }
                if e.mss != 0 {
                    return Err(syndrome::BAD_TSO);
                }
                let mut i = 2;
                while i < c.ds {
                    let b = self.seg(base.wrapping_add(i));
                    let (bc, _, _) = parse_dseg(&b);
                    if bc & INLINE != 0 {
                        let len = (bc & !INLINE) as usize;
                        let n = inline_segs(len);
                        if len == 0 || i + n > c.ds {
                            return Err(syndrome::BAD_INLINE);
                        }
                        i += n;
                    } else {
                        let d = check_dseg(&b)?;
                        w.dma += d.len as u64;
                        w.tlps += Bus::tlps(d.len as usize);
                        w.dsegs += 1;
                        i += 1;
                    }
                }
                if c.ds == 2 {
                    return Err(syndrome::BAD_LAYOUT);
                }
            }
            _ => return Err(syndrome::BAD_OPCODE),
        }
        Ok(w)
    }

    /// Copies `len` bytes at `addr` to FIFO offset `at`.
    ///
    /// # Safety
    /// `addr` came from a dseg of a WQE below the tail loaded with acquire:
    /// the driver wrote it and holds the buffer, at least `len` bytes there,
    /// until the WQE's completion.
    #[inline]
    unsafe fn dma(&mut self, at: usize, addr: u64, len: usize) {
        // SAFETY: the caller's contract; `at + len` is within the FIFO
        // (checked by every caller).
        unsafe {
            std::ptr::copy_nonoverlapping(addr as *const u8, self.frame.as_mut_ptr().add(at), len)
        };
    }

    /// A regular send: inline header, then the dsegs.
    fn send(&mut self, base: u32, c: &Cseg, w: &Checked, pkts: &mut usize) -> bool {
        let n = w.inline;
        let len = n + w.dma as usize;
        *pkts += 1;
        if 4 + len > self.frame.len() {
            self.errors.inc();
            return true;
        }
        self.read_header(base, n, 4);
        let mut at = 4 + n;
        for i in 2 + header_segs(n)..c.ds {
            let (bc, _, addr) = parse_dseg(&self.seg(base.wrapping_add(i)));
            // SAFETY: a checked dseg of a WQE below the tail; `at + bc`
            // stays within `4 + len`, checked above.
            unsafe { self.dma(at, addr, bc as usize) };
            at += bc as usize;
        }
        self.emit(len, &w.eseg)
    }

    /// Reads an inline header of `n` bytes (the eseg's last two, then whole
    /// segments) into the FIFO at `at`.
    fn read_header(&mut self, base: u32, n: usize, at: usize) {
        let eb = self.seg(base.wrapping_add(1));
        let k = n.min(2);
        self.frame[at..at + k].copy_from_slice(&eb[14..14 + k]);
        if n > 2 {
            let ring = &self.regs.segs;
            read_inline(
                ring,
                base.wrapping_add(2),
                0,
                &mut self.frame[at + 2..at + n],
            );
        }
    }

    /// A multi-packet WQE: every entry after the eseg, from where a pause
    /// left off.
    fn mpw(&mut self, base: u32, c: &Cseg, w: &Checked, pkts: &mut usize) -> bool {
        let mut i = if self.resume != 0 { self.resume } else { 2 };
        while i < c.ds {
            let b = self.seg(base.wrapping_add(i));
            let (bc, _, addr) = parse_dseg(&b);
            let (len, n) = if bc & INLINE != 0 {
                let len = (bc & !INLINE) as usize;
                (len, inline_segs(len))
            } else {
                (bc as usize, 1)
            };
            if 4 + len <= self.frame.len() {
                if bc & INLINE != 0 {
                    let ring = &self.regs.segs;
                    read_inline(ring, base.wrapping_add(i), 4, &mut self.frame[4..4 + len]);
                } else {
                    // SAFETY: a checked dseg of a WQE below the tail; the
                    // FIFO holds `4 + len` bytes (checked above).
                    unsafe { self.dma(4, addr, len) };
                }
                if !self.emit(len, &w.eseg) {
                    self.resume = i;
                    return false;
                }
            } else {
                self.errors.inc();
            }
            *pkts += 1;
            i += n;
        }
        true
    }

    /// A TSO WQE: one frame per MSS of payload, from the segment a pause
    /// left off at.
    fn tso(&mut self, base: u32, c: &Cseg, w: &Checked, pkts: &mut usize) -> bool {
        let n = w.inline;
        let mss = w.eseg.mss as usize;
        self.read_header(base, n, 4);
        self.tso_header[..n].copy_from_slice(&self.frame[4..4 + n]);
        let Some(hdrs) = TsoHeaders::find(&self.tso_header[..n]) else {
            self.errors.inc();
            *pkts += 1;
            return true;
        };
        if 4 + n + mss > self.frame.len() {
            self.errors.inc();
            *pkts += 1;
            return true;
        }
        let mut k = 0;
        for i in 2 + header_segs(n)..c.ds {
            let (bc, _, addr) = parse_dseg(&self.seg(base.wrapping_add(i)));
            self.tso_dsegs[k] = Dseg { len: bc, addr };
            k += 1;
        }
        let total = w.dma as usize;
        let segments = total.div_ceil(mss);
        let e = Eseg { cs: 0, ..w.eseg };
        for s in self.resume as usize..segments {
            let off = s * mss;
            let len = mss.min(total - off);
            self.frame[4..4 + n].copy_from_slice(&self.tso_header[..n]);
            self.copy_payload(k, off, 4 + n, len);
            let f = &mut self.frame[4..4 + n + len];
            hdrs.fix_segment(f, n, s as u16, off as u32, s + 1 == segments);
            if !self.emit(n + len, &e) {
                self.resume = s as u32;
                return false;
            }
            *pkts += 1;
        }
        true
    }

    /// Copies payload bytes `[off, off + len)` of the first `k` TSO dsegs
    /// to FIFO offset `at`.
    fn copy_payload(&mut self, k: usize, mut off: usize, mut at: usize, mut len: usize) {
        for i in 0..k {
            let d = self.tso_dsegs[i];
            let dl = d.len as usize;
            if off >= dl {
                off -= dl;
                continue;
            }
            let take = (dl - off).min(len);
            // SAFETY: a checked dseg of the WQE being executed, below the
            // tail; `[off, off + take)` lies within its `dl` bytes, and the
            // caller keeps `at + len` within the FIFO.
            unsafe { self.dma(at, d.addr + off as u64, take) };
            at += take;
            len -= take;
            off = 0;
            if len == 0 {
                break;
            }
        }
    }

    /// Applies the eseg's offloads to the `len`-byte frame at FIFO offset 4
    /// and sends it; false when the wire asks to pause (nothing sent).
    fn emit(&mut self, len: usize, e: &Eseg) -> bool {
        let f = &mut self.frame[4..4 + len];
        if e.cs != 0 {
            if e.tun & TUN_VXLAN != 0 {
                let at = |u: u8| u as usize * 2;
                let s = e.swp;
                if e.cs & cs::L3 != 0 {
                    tx_checksums_at(f, at(s[0]), 0, true, false, false);
                }
                tx_checksums_at(
                    f,
                    at(s[2]),
                    at(s[3]),
                    e.cs & cs::INNER_L3 != 0,
                    e.cs & cs::INNER_L4_UDP != 0,
                    e.cs & cs::INNER_L4_TCP != 0,
                );
            } else {
                tx_checksums(
                    f,
                    e.cs & cs::L3 != 0,
                    e.cs & cs::L4_UDP != 0,
                    e.cs & cs::L4_TCP != 0,
                );
            }
        }
        let (at, len) = match e.vlan {
            Some(tag) if len >= 12 => {
                self.frame.copy_within(4..16, 0);
                self.frame[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
                self.frame[14..16].copy_from_slice(&tag.to_be_bytes());
                (0, len + 4)
            }
            _ => (4, len),
        };
        let f = &self.frame[at..at + len];
        match &mut self.sink {
            TxSink::Check(c) => c.check_at(f, self.step_tsc),
            TxSink::Wire(w) => {
                if w.send(f) == Sent::Pause {
                    return false;
                }
            }
            #[cfg(all(test, not(loom)))]
            TxSink::Capture(v) => v.push(f.to_vec()),
        }
        true
    }

    /// Tests: the frames a capture sink kept, taken.
    #[cfg(all(test, not(loom)))]
    pub fn take_captured(&mut self) -> Vec<Vec<u8>> {
        match &mut self.sink {
            TxSink::Capture(v) => std::mem::take(v),
            _ => Vec::new(),
        }
    }
}
