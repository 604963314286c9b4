//! The soft driver's Rx queue: a descriptor ring the device writes back
//! into, and beside it a software ring of the mbufs armed on it.
//!
//! # Indices
//! All indices are free-running `u32`s (the ring index is `i & mask`):
//! - `next`: the next descriptor to read;
//! - `tail`: descriptors handed to the device so far (the value last
//!   written to the tail register).
//!
//! Descriptors `[next, tail)` hold buffers the queue owns (armed, written
//! back or not); `[tail - nb, next)` were delivered and are due for refill.
//! Of those, `[tail, tail + committed)` already hold buffers a Tx queue
//! recycled into the software ring (owned by this queue, not yet rearmed).
//!
//! # Refill
//! Refill runs at the start of `rx_burst` (as DPDK's vector drivers do, so
//! a recycle step just before it finds the slots still due), in batches of
//! `rx_free_thresh` (a divisor of the ring size, so a batch never wraps and
//! `tail` stays a multiple of it): fill software-ring slots
//! `[tail, tail + n)` with buffers from a source, then write each
//! descriptor's read format (the address follows from the element's, so
//! the buffer's header is not touched until the packet is delivered, when
//! its rearm word is written beside the write-back fields), then one tail
//! store (the doorbell). The sources, in order:
//! 1. buffers a Tx queue recycled into the slots ([`RecycleRxInfo`]: the
//!    refill unit is `rx_free_thresh`, so `tail` stays aligned);
//! 2. first buffers of dropped frames kept for reuse;
//! 3. the mempool, one bulk get per batch. An empty pool counts
//!    `rx_nombuf` and leaves the batch for the next call: no descriptor is
//!    lost and nothing waits.
//!
//! # Receive
//! A burst writes each delivered buffer's first header line (the rearm
//! word and the write-back fields) without reading it, and ends by asking
//! for the first header lines of the armed buffers the next burst delivers
//! (prefetch hints): those lines were last touched about a ring of packets
//! earlier, and the next burst's stores find them in the cache.
//!
//! # Fragments (`rxbuf=frag`)
//! The descriptors carry page-pool fragments, kept beside them in `armed`
//! (the software ring of buffers is empty): refill arms fragments
//! (those of dropped frames first), and a delivered packet takes a header
//! from a stash topped up once per burst from the mempool — headers a Tx
//! queue freed moments before, still in the cache — whose first line the
//! receive writes whole: the fragment's buffer fields and page reference,
//! the rearm word and the write-back fields. Short of headers, a burst
//! delivers what it has headers for and leaves the rest done on the ring.
//!
//! # Stopping
//! `stop` and `start` run under the queue's device-engine lock, so a queue
//! can stop and start alone while a threaded device runs: the device never
//! sees a descriptor whose buffer went back to the pool.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, HEADER_SIZE, MbufHeader, MbufPool, RearmData, ol};
use crate::mempool::Elem;
use crate::port::{PortCounters, PortError, RecycleRxInfo, RxFrameCheck, RxQueue, TxQueue};

use super::rx_frags::RxFrags;
use super::tx::prefetch;
#[cfg(target_arch = "x86_64")]
use super::vector;
use super::vector::{RxTemplate, VectorLevel};
use crate::driver::soft::device::{QueueEngine, RxEngine};
use crate::driver::soft::hw::desc::{Desc, rx};
use crate::driver::soft::hw::regs::RxRegs;
use crate::pagepool::ArmedFrag;

/// What an Rx queue is made of.
pub struct RxQueueParts {
    /// The descriptor ring and tail register it shares with the device.
    pub regs: Arc<RxRegs>,
    /// Where its buffers (or, with fragments, its mbuf headers) come from.
    pub pool: MbufPool,
    /// The port id written into each mbuf.
    pub port_id: u16,
    /// Refill batch (`rx_free_thresh`): a power of two dividing the ring.
    pub free_thresh: u32,
    /// Deliver the RSS hash.
    pub rss_hash: bool,
    /// Its engine in the device (which also names the queue).
    pub engine: QueueEngine<RxEngine>,
    /// Its port's counters.
    pub counters: Arc<PortCounters>,
    /// Bus bytes of one doorbell (a 4-byte write and its overhead).
    pub doorbell_cost: u64,
    /// `rxbuf=frag`: the page-pool fragments its descriptors carry.
    pub frags: Option<RxFrags>,
    /// The port's MTU: longer frames are counted as oversize.
    pub mtu: u16,
    /// The instruction set of the receive loop and the refill (available
    /// on this CPU: [`VectorLevel::available`]).
    pub vector: VectorLevel,
}

/// An Rx queue of a soft port.
pub struct SoftRx {
    regs: Arc<RxRegs>,
    sw_ring: Box<[Elem]>,
    mask: u32,
    next: u32,
    tail: u32,
    free_thresh: u32,
    pool: MbufPool,
    rearm: RearmData,
    /// Buffers of dropped frames, reused before the pool's (never more than
    /// the ring holds: past that they go back to the pool, so pushing never
    /// allocates).
    reuse: Vec<Elem>,
    /// Slots from `tail` holding buffers a Tx queue recycled, not rearmed.
    committed: u32,
    /// `start` has run and `stop` has not since.
    started: bool,
    /// Deliver the RSS hash.
    rss_hash: bool,
    /// The queue's engine: the inline device step and the queue reset.
    engine: QueueEngine<RxEngine>,
    counters: Arc<PortCounters>,
    doorbells: Arc<Counter>,
    /// Doorbell bus bytes, `doorbell_cost` (a 4-byte write and the
    /// transaction overhead) each.
    doorbell_bytes: Arc<Counter>,
    doorbell_cost: u64,
    /// Descriptors rearmed with recycled buffers.
    rx_recycled: Arc<Counter>,
    /// `rxbuf=frag`: the descriptors carry page-pool fragments (no
    /// recycling then), armed in `armed`, and a delivered packet gets a
    /// header from `headers`.
    frags: Option<RxFrags>,
    /// With fragments: the fragment armed on each descriptor (slots
    /// `[next, tail)` hold references the queue owns). Empty otherwise.
    armed: Box<[ArmedFrag]>,
    /// With fragments: fragments of dropped frames, armed again before
    /// fresh ones.
    reuse_frags: Vec<ArmedFrag>,
    /// With fragments: headers taken from the pool for the next
    /// deliveries, `headers[headers_next..headers_end]`, handed out in
    /// order (a ring's worth of room, so a burst never lacks it). Empty
    /// otherwise.
    headers: Box<[Elem]>,
    headers_next: usize,
    headers_end: usize,
    /// The named counters of the frames the device refused (runts and
    /// oversize frames, told apart by the written-back length).
    check: RxFrameCheck,
    /// The receive loop's and the refill's instruction set (with
    /// fragments the refill is scalar: it writes each descriptor as it cuts
    /// the fragment).
    vector: VectorLevel,
}

// SAFETY: the raw buffer addresses in the rings are buffers this queue owns;
// the queue moves between threads as a whole and is used by one at a time.
unsafe impl Send for SoftRx {}

impl SoftRx {
    /// The queue of `parts.engine` over `parts.regs`, receiving into
    /// `parts.pool`.
    pub fn new(parts: RxQueueParts) -> SoftRx {
        let RxQueueParts {
            regs,
            pool,
            port_id,
            free_thresh,
            rss_hash,
            engine,
            counters,
            doorbell_cost,
            frags,
            mtu,
            vector,
        } = parts;
        assert!(vector.available(), "soft Rx queue: no {vector} on this CPU");
        let nb = regs.descs.len();
        // What a recycle view of the ring relies on (`recycle_view`).
        assert!(
            nb.is_power_of_two()
                && nb <= 1 << 31
                && free_thresh.is_power_of_two()
                && free_thresh as usize <= nb,
            "soft Rx queue: {nb} descriptors, rx_free_thresh {free_thresh}"
        );
        let mut rearm = pool.rearm_data(port_id);
        if let Some(f) = &frags {
            rearm.data_off = f.layout().headroom;
        }
        let doorbells = counters.xstats.register("bus_doorbells");
        let doorbell_bytes = counters.xstats.register("bus_doorbell_bytes");
        let rx_recycled = counters.xstats.register("rx_recycled");
        let check = RxFrameCheck::new(&counters.xstats, mtu);
        // With fragments the descriptors' slots are `armed`, and the
        // software ring of buffers is empty; without, the other way round.
        let (buffer_slots, frag_slots) = if frags.is_some() { (0, nb) } else { (nb, 0) };
        SoftRx {
            armed: vec![ArmedFrag::EMPTY; frag_slots].into_boxed_slice(),
            reuse_frags: Vec::with_capacity(frag_slots),
            headers: vec![Elem::DANGLING; frag_slots].into_boxed_slice(),
            headers_next: 0,
            headers_end: 0,
            check,
            mask: nb as u32 - 1,
            sw_ring: vec![Elem::DANGLING; buffer_slots].into_boxed_slice(),
            regs,
            next: 0,
            tail: 0,
            free_thresh,
            rearm,
            pool,
            reuse: Vec::with_capacity(nb),
            committed: 0,
            started: false,
            rss_hash,
            engine,
            counters,
            doorbells,
            doorbell_bytes,
            doorbell_cost,
            rx_recycled,
            frags,
            vector,
        }
    }

    fn nb(&self) -> u32 {
        self.mask + 1
    }

    /// Descriptors delivered and not yet rearmed.
    #[inline(always)]
    fn due(&self) -> u32 {
        self.next.wrapping_add(self.nb()).wrapping_sub(self.tail)
    }

    /// Fills `slots` with free buffers: reused ones first, then one bulk
    /// get from the pool. All or nothing.
    #[inline]
    fn take_buffers(pool: &MbufPool, reuse: &mut Vec<Elem>, slots: &mut [Elem]) -> bool {
        let k = reuse.len().min(slots.len());
        if pool.mempool().get_bulk(&mut slots[k..]).is_err() {
            return false;
        }
        slots[..k].copy_from_slice(&reuse[reuse.len() - k..]);
        reuse.truncate(reuse.len() - k);
        true
    }

    /// Arms `slots` with fragments, writing the descriptors `descs` (one
    /// per slot): those of dropped frames first, then fresh ones. All or
    /// nothing.
    #[inline]
    fn take_frags(
        frags: &mut RxFrags,
        reuse: &mut Vec<ArmedFrag>,
        slots: &mut [ArmedFrag],
        descs: &[Desc],
    ) -> bool {
        let k = reuse.len().min(slots.len());
        if !frags.arm(&mut slots[k..], &descs[k..]) {
            return false;
        }
        let reused = &reuse[reuse.len() - k..];
        for ((d, a), slot) in descs.iter().zip(reused).zip(&mut slots[..k]) {
            d.q0.store(frags.dma_addr(a), Ordering::Relaxed);
            d.q1.store(0, Ordering::Relaxed);
            *slot = *a;
        }
        reuse.truncate(reuse.len() - k);
        true
    }

    /// Rearms descriptors `[tail, tail + n)`, whose software-ring slots
    /// hold free buffers this queue owns: each descriptor's read format,
    /// then one doorbell. The buffers' headers are not touched: a free
    /// buffer has its own memory (the free-buffer invariants), which starts
    /// [`HEADER_SIZE`] bytes into its element, so the DMA address follows
    /// from the element's address; the header gets its rearm word when the
    /// packet is delivered, in the same cache line as the write-back fields.
    /// With fragments (`rxbuf=frag`) the descriptors were written as the
    /// fragments were cut ([`RxFrags::arm`]): only the doorbell is left.
    #[inline]
    fn rearm(&mut self, n: u32) {
        // A run never crosses the wrap: refill batches divide the ring and
        // keep `tail` a multiple of them, and `rearm_committed` cuts a
        // recycled run at the wrap. One bounds check each for the run, none
        // per descriptor.
        let start = (self.tail & self.mask) as usize;
        let end = start + n as usize;
        // With fragments the descriptors were written by `take_frags` as
        // the fragments were cut (a queue with fragments recycles nothing,
        // so every run rearmed here comes from it).
        if self.frags.is_none() {
            let slots = &self.sw_ring[start..end];
            let descs = &self.regs.descs.as_slice()[start..end];
            let off = (HEADER_SIZE + self.rearm.data_off as usize) as u64;
            let done = refill_vector(self.vector, descs, slots, off);
            for (d, e) in descs[done..].iter().zip(&slots[done..]) {
                d.q0.store(e.as_ptr() as u64 + off, Ordering::Relaxed);
                d.q1.store(0, Ordering::Relaxed);
            }
        }
        self.tail = self.tail.wrapping_add(n);
        // The doorbell: the descriptors above are visible to a device that
        // loads this (acquire).
        self.regs.tail.store(self.tail, Ordering::Release);
        self.doorbells.inc();
        self.doorbell_bytes.add(self.doorbell_cost);
    }

    /// Rearms the slots a Tx queue recycled into; how many.
    #[inline(always)]
    fn rearm_committed(&mut self) -> usize {
        let n = self.committed;
        if n == 0 {
            return 0;
        }
        // One step may fill up to the wrap and go on from the ring's start
        // (each fill stops at the wrap, [`RecycleRxInfo::room`]): rearmed
        // in two runs then.
        let to_wrap = self.mask + 1 - (self.tail & self.mask);
        if n > to_wrap {
            self.rearm(to_wrap);
            self.rearm(n - to_wrap);
        } else {
            self.rearm(n);
        }
        self.committed = 0;
        self.rx_recycled.add(n as u64);
        n as usize
    }

    /// Rearms what was recycled, then every whole batch due from the reuse
    /// list and the pool.
    #[inline]
    fn refill(&mut self) {
        self.rearm_committed();
        let n = self.free_thresh;
        while self.due() >= n {
            let start = (self.tail & self.mask) as usize;
            let end = start + n as usize;
            let taken = match self.frags.as_mut() {
                None => {
                    Self::take_buffers(&self.pool, &mut self.reuse, &mut self.sw_ring[start..end])
                }
                Some(f) => Self::take_frags(
                    f,
                    &mut self.reuse_frags,
                    &mut self.armed[start..end],
                    &self.regs.descs.as_slice()[start..end],
                ),
            };
            if !taken {
                self.counters.rx[self.engine.queue()].nombuf.inc();
                return;
            }
            self.rearm(n);
        }
    }

    /// Gives back one plain buffer of the queue's pool the queue owns and
    /// no longer uses.
    ///
    /// # Safety
    /// `e` is a buffer this queue owns, given back once.
    #[inline]
    unsafe fn give_back(&self, e: Elem) {
        // SAFETY: a plain buffer of our pool, once.
        unsafe { self.pool.mempool().put_bulk(&[e]) };
    }

    /// With fragments: tops the header stash up to `want` (a burst's room)
    /// from the pool; returns how many headers it holds, at most `want`.
    /// Short of headers, the burst delivers what it has headers for (the
    /// receive counts `rx_nombuf` if a packet was left waiting).
    #[inline(always)]
    fn take_headers(&mut self, want: usize) -> usize {
        let want = want.min(self.headers.len());
        let (next, end) = (self.headers_next, self.headers_end);
        let have = end - next;
        if have >= want {
            return want;
        }
        // The ones left first, then a bulk get behind them.
        self.headers.copy_within(next..end, 0);
        self.headers_next = 0;
        self.headers_end = have;
        if self
            .pool
            .mempool()
            .get_bulk(&mut self.headers[have..want])
            .is_ok()
        {
            self.headers_end = want;
            return want;
        }
        self.take_headers_one_by_one(want)
    }

    /// `take_headers` when the pool has fewer than asked for: one at a
    /// time, as many as it has (a bulk get takes all or nothing, and a
    /// burst must not wait for more headers than the application left).
    #[cold]
    fn take_headers_one_by_one(&mut self, want: usize) -> usize {
        let pool = self.pool.mempool();
        while self.headers_end < want
            && pool
                .get_bulk(&mut self.headers[self.headers_end..self.headers_end + 1])
                .is_ok()
        {
            self.headers_end += 1;
        }
        self.headers_end
    }

    /// Publishes the pool's buffers the queue holds in its `posted` gauge
    /// (one store): armed or written back and not delivered (`[next,
    /// tail)`), recycled into the ring and not rearmed, and kept for reuse;
    /// with fragments, the stashed headers.
    #[inline(always)]
    fn note_posted(&self) {
        // With fragments the pool's buffers the queue holds are the
        // headers taken for the next deliveries (its descriptors hold
        // fragments).
        let held = if self.frags.is_some() {
            (self.headers_end - self.headers_next) as u32
        } else {
            self.tail.wrapping_sub(self.next) + self.committed + self.reuse.len() as u32
        };
        self.counters.rx[self.engine.queue()]
            .posted
            .set(held as u64);
    }

    /// Gives back every buffer the queue holds.
    fn release_all(&mut self) {
        let mut i = self.next;
        let end = self.tail.wrapping_add(self.committed);
        while i != end {
            let k = (i & self.mask) as usize;
            if self.frags.is_some() {
                // SAFETY: slots `[next, tail)` hold fragments armed by us
                // (nothing is recycled into a queue with fragments), the
                // device stopped or locked out: each reference once.
                unsafe { self.armed[k].release() };
            } else {
                // SAFETY: slots `[next, tail + committed)` hold buffers we
                // own (armed, with the device stopped or locked out, or
                // recycled into the ring), each once.
                unsafe { self.give_back(self.sw_ring[k]) };
            }
            i = i.wrapping_add(1);
        }
        for a in self.reuse_frags.drain(..) {
            // SAFETY: fragments of dropped frames, ours, each once.
            unsafe { a.release() };
        }
        let held = &self.headers[self.headers_next..self.headers_end];
        // SAFETY: headers taken from our pool and not handed out, each once.
        unsafe { self.pool.mempool().put_bulk(held) };
        (self.headers_next, self.headers_end) = (0, 0);
        self.armed.fill(ArmedFrag::EMPTY);
        for k in 0..self.reuse.len() {
            // SAFETY: reused buffers are ours, each once.
            unsafe { self.give_back(self.reuse[k]) };
        }
        self.reuse.clear();
        self.sw_ring.fill(Elem::DANGLING);
        self.next = 0;
        self.tail = 0;
        self.committed = 0;
    }
}

impl SoftRx {
    /// Receives into `slots` (as many as fit): groups of `W` descriptors
    /// through `group` while whole groups are done and clean (`W` 0: none),
    /// the scalar step for anything else; returns the mbufs delivered and
    /// their bytes.
    ///
    /// `group(descs, elems, template)` must write the Rx words of `W`
    /// descriptors into their mbufs as `vector::rx_words` computes them;
    /// it is called only under the conditions of
    /// [`vector::rx_group_sse41`]: `descs` and `elems` point to `W`
    /// descriptors seen done with no dropping error and their slots.
    #[inline(always)]
    fn receive<const W: usize>(
        &mut self,
        slots: &mut [Elem],
        group: impl Fn(*const Desc, *const Elem, RxTemplate),
    ) -> (usize, u64) {
        let room = slots.len();
        let max = if self.frags.is_some() {
            self.take_headers(room)
        } else {
            room
        };
        let mut n = 0;
        let mut bytes = 0u64;
        let mask = self.mask;
        // Indexed by `i & mask`: in bounds (one ring size, checked once).
        let descs = self.regs.descs.as_slice();
        let ring = &self.sw_ring[..];
        let armed = &self.armed[..];
        let frags = self.frags.as_ref();
        let headers = &self.headers[..];
        let mut header = self.headers_next;
        let slots_len = if frags.is_some() {
            armed.len()
        } else {
            ring.len()
        };
        assert!(descs.len() == mask as usize + 1 && slots_len == descs.len());
        let rearm = self.rearm.word();
        let rss_hash = self.rss_hash;
        // Without fragments every armed buffer is plain (no external buffer
        // attached), with fragments every one is attached: either way its
        // header is written without being read.
        let plain = self.frags.is_none();
        let template = RxTemplate {
            rearm,
            rss_hash,
            ol_flags: if plain { 0 } else { ol::EXTERNAL },
        };
        let mut next = self.next;
        // Only descriptors handed to the device can be done: past `tail`
        // lie delivered ones, their DD still set until they are rearmed.
        let end = self.tail;
        loop {
            // Whole groups while they are done and clean, within the burst,
            // the armed descriptors and the ring's end.
            while W != 0 && n + W <= max && end.wrapping_sub(next) >= W as u32 {
                let i = (next & mask) as usize;
                let Some(group_descs) = descs.get(i..i + W) else {
                    break;
                };
                let mut all = u64::MAX;
                let mut any = 0;
                let mut len = 0;
                for d in group_descs {
                    let q1 = d.q1.load(Ordering::Acquire);
                    all &= q1;
                    any |= q1;
                    len += (q1 >> rx::LEN_SHIFT) & 0xffff;
                }
                if all & rx::DD == 0 || any & rx::ERR_DROP != 0 {
                    break;
                }
                let group_elems = match frags {
                    None => {
                        let Some(e) = ring.get(i..i + W) else {
                            break;
                        };
                        e
                    }
                    Some(f) => {
                        // `take_headers` left `max` headers, and `n` were
                        // delivered: `max - n >= W` are left.
                        let h = &headers[header..header + W];
                        header += W;
                        // Fresh headers from our pool, ours alone, and the
                        // fragments armed on descriptors now done: each
                        // slot is due for refill, never released.
                        for (&e, a) in h.iter().zip(&armed[i..i + W]) {
                            // SAFETY: as just said.
                            unsafe { f.attach(e, a) };
                        }
                        h
                    }
                };
                group(group_descs.as_ptr(), group_elems.as_ptr(), template);
                slots[n..n + W].copy_from_slice(group_elems);
                n += W;
                bytes += len;
                next = next.wrapping_add(W as u32);
            }
            // One descriptor.
            if n >= max || next == end {
                break;
            }
            let i = (next & mask) as usize;
            let d = &descs[i];
            let q1 = d.q1.load(Ordering::Acquire);
            if q1 & rx::DD == 0 {
                break;
            }
            let q0 = d.q0.load(Ordering::Relaxed);
            next = next.wrapping_add(1);
            if q1 & rx::ERR_DROP != 0 {
                let len = (q1 >> rx::LEN_SHIFT) as u16;
                self.check
                    .count_drop(len as usize, &self.counters.rx[self.engine.queue()].errors);
                if frags.is_some() {
                    // At most a ring's worth: every slot's fragment is on
                    // the ring or here.
                    self.reuse_frags.push(armed[i]);
                } else if self.reuse.len() < self.reuse.capacity() {
                    self.reuse.push(ring[i]);
                } else {
                    // Recycling has kept the ring full while frames were
                    // dropped: the list is full, the buffer goes home.
                    // SAFETY: a buffer we own and no longer use, once.
                    unsafe { self.give_back(ring[i]) };
                }
                continue;
            }
            let e = match frags {
                None => ring[i],
                Some(f) => {
                    // `take_headers` left `max` headers, and `n < max`
                    // were delivered.
                    let e = headers[header];
                    header += 1;
                    // SAFETY: as in the groups above.
                    unsafe { f.attach(e, &armed[i]) };
                    e
                }
            };
            let len = (q1 >> rx::LEN_SHIFT) as u16;
            let vlan = (q1 >> rx::VLAN_SHIFT) as u16;
            let mut flags = 0;
            if q1 & rx::IPCS != 0 {
                flags |= if q1 & rx::ERR_IP != 0 {
                    ol::RX_IP_CKSUM_BAD
                } else {
                    ol::RX_IP_CKSUM_GOOD
                };
            }
            if q1 & rx::L4CS != 0 {
                flags |= if q1 & rx::ERR_L4 != 0 {
                    ol::RX_L4_CKSUM_BAD
                } else {
                    ol::RX_L4_CKSUM_GOOD
                };
            }
            if q1 & rx::VP != 0 {
                flags |= ol::RX_VLAN;
            }
            let mut hash = 0;
            if rss_hash && (q0 >> rx::RSS_TYPE_SHIFT) & rx::RSS_TYPE_MASK != 0 {
                flags |= ol::RX_RSS_HASH;
                hash = (q0 >> rx::HASH_SHIFT) as u32;
            }
            let ptype = ((q0 >> rx::PTYPE_SHIFT) & rx::PTYPE_MASK) as u32;
            // SAFETY: DD is set (acquire): the device is done with this
            // buffer, which we own (armed by us) and hand to the burst.
            let h = unsafe { &mut *e.as_ptr().cast::<MbufHeader>() };
            h.rearm_word(rearm);
            if plain {
                h.set_rx_plain(flags, ptype, len, vlan, hash);
            } else {
                h.set_rx_attached(flags, ptype, len, vlan, hash);
            }
            slots[n] = e;
            n += 1;
            bytes += len as u64;
        }
        // The headers the next call writes into: their first lines were
        // last touched when the buffers went back to the pool, about a ring
        // of packets ago, and a store to a line not in the cache waits for
        // it. Asked for now (a hint, no memory effect), they arrive while
        // the application and the Tx queues work.
        if frags.is_none() {
            let ahead = end.wrapping_sub(next).min(max as u32);
            for k in 0..ahead {
                prefetch(ring[(next.wrapping_add(k) & mask) as usize].as_ptr());
            }
        }
        if max < room && n == max && next != end {
            // Short of headers with a packet waiting: counted once per
            // burst, as a failed refill is.
            let q1 = descs[(next & mask) as usize].q1.load(Ordering::Relaxed);
            if q1 & rx::DD != 0 {
                self.counters.rx[self.engine.queue()].nombuf.inc();
            }
        }
        self.next = next;
        self.headers_next = header;
        (n, bytes)
    }

    /// [`receive`](Self::receive) in groups of 4 with SSE4.1.
    ///
    /// # Safety
    /// The CPU has SSE4.1.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.1")]
    unsafe fn receive_sse41(&mut self, slots: &mut [Elem]) -> (usize, u64) {
        self.receive::<4>(slots, |d, e, t| {
            // SAFETY: SSE4.1 is present (this function's contract); `receive`
            // passes 4 descriptors seen done and clean and their slots,
            // headers we own, attached exactly when the template says so.
            unsafe { vector::rx_group_sse41(d, e, t) }
        })
    }

    /// [`receive`](Self::receive) in groups of 4 with AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn receive_avx2(&mut self, slots: &mut [Elem]) -> (usize, u64) {
        self.receive::<4>(slots, |d, e, t| {
            // SAFETY: AVX2 is present (this function's contract); `receive`
            // passes 4 descriptors seen done and clean and their slots,
            // headers we own, attached exactly when the template says so.
            unsafe { vector::rx_group_avx2(d, e, t) }
        })
    }

    /// [`receive`](Self::receive) in groups of 8 with AVX-512F.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn receive_avx512(&mut self, slots: &mut [Elem]) -> (usize, u64) {
        self.receive::<8>(slots, |d, e, t| {
            // `receive` passes 8 descriptors seen done and clean and their
            // slots, headers we own, attached exactly as the template says.
            // SAFETY: AVX-512F is present (this function's contract).
            unsafe { vector::rx_group_avx512(d, e, t) }
        })
    }
}

/// Writes the read format of the first descriptors of `descs` from
/// `slots` at `level` (buffer address: element + `offset`); returns how
/// many it wrote, the rest left to the scalar loop.
#[inline(always)]
fn refill_vector(level: VectorLevel, descs: &[Desc], slots: &[Elem], offset: u64) -> usize {
    let n = descs.len().min(slots.len());
    let (d, e) = (descs.as_ptr(), slots.as_ptr());
    match level {
        VectorLevel::Scalar => 0,
        // The descriptors are being rearmed below the doorbell, so the
        // device does not read them.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the level is available (the queue's, checked in `new`);
        // `n` descriptors and slots exist, unread by the device.
        VectorLevel::Sse41 => unsafe { vector::refill_sse41(d, e, n, offset) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        VectorLevel::Avx2 => unsafe { vector::refill_avx2(d, e, n, offset) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        VectorLevel::Avx512 => unsafe { vector::refill_avx512(d, e, n, offset) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => {
            let _ = (d, e, n, offset);
            0
        }
    }
}

impl RxQueue for SoftRx {
    #[inline]
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        if !self.started {
            return 0;
        }
        if self.committed != 0 || self.due() >= self.free_thresh {
            if let Some(f) = &mut self.frags {
                // The polling thread owns the page pool's direct cache.
                f.bind_once();
            }
            self.refill();
        }
        self.engine.inline_step();
        let max = burst.free();
        let base = burst.len();
        let slots = burst.spare_slots(max);
        let (n, bytes) = match self.vector {
            VectorLevel::Scalar => self.receive::<0>(slots, |_, _, _| {}),
            // SAFETY: the level is available on this CPU (checked in `new`).
            #[cfg(target_arch = "x86_64")]
            VectorLevel::Sse41 => unsafe { self.receive_sse41(slots) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            VectorLevel::Avx2 => unsafe { self.receive_avx2(slots) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            VectorLevel::Avx512 => unsafe { self.receive_avx512(slots) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only the scalar level exists here"),
        };
        // SAFETY: slots `[base, base + n)` now hold received mbufs we gave
        // up (their ring entries are due for refill).
        unsafe { burst.set_len(base + n) };
        self.counters.rx[self.engine.queue()].record_burst(n, bytes);
        self.note_posted();
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.started {
            return Ok(());
        }
        self.engine.start(|| self.regs.reset())?;
        self.next = 0;
        self.tail = 0;
        self.committed = 0;
        // Every descriptor is due: fill the ring, batch by batch.
        self.refill();
        self.note_posted();
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        if !self.started {
            return;
        }
        self.started = false;
        // Under the engine lock: a running device is not in the middle of
        // a step on this queue, and once the tail register is 0 and its head
        // reset it arms nothing more.
        let engine = self.engine.clone();
        engine.stop(|| {
            self.regs.reset();
            self.release_all();
        });
        self.note_posted();
    }

    fn recycle_rx_capable(&self) -> bool {
        // A recycled buffer is a plain mbuf: no fragment to arm.
        self.frags.is_none()
    }

    #[inline]
    fn recycle_rx_info(&mut self) -> Result<RecycleRxInfo<'_>, PortError> {
        if !self.started || self.frags.is_some() {
            return Err(self.recycle_refusal());
        }
        self.rearm_committed();
        Ok(self.recycle_view())
    }

    #[inline]
    fn recycle_rx_refill(&mut self) -> usize {
        self.rearm_committed()
    }

    #[inline]
    fn recycle_from(&mut self, tx: &mut dyn TxQueue) -> Result<usize, PortError> {
        if !self.started || self.frags.is_some() {
            return Err(self.recycle_refusal());
        }
        // Slots a Tx queue committed through `recycle_rx_info` with no
        // `recycle_rx_refill` after it: rearmed first, as that call does.
        self.rearm_committed();
        let moved = tx.recycle_tx_mbufs(&mut self.recycle_view())?;
        self.rearm_committed();
        Ok(moved)
    }
}

impl SoftRx {
    /// The slots due for refill, lent for one recycle step (nothing
    /// committed: the caller rearmed what was).
    #[inline(always)]
    fn recycle_view(&mut self) -> RecycleRxInfo<'_> {
        debug_assert_eq!(self.committed, 0);
        let due = self.due();
        // The view's conditions: the ring's size is the descriptor count, a
        // power of two (port configuration, checked in `new`); `due <= nb`
        // (`tail` is never behind `next` nor more than a ring ahead);
        // `free_thresh` is a power of two no larger than the ring (driver
        // arguments, checked in `new`), and `tail` a multiple of it
        // (refills are whole batches, recycled runs whole units). The
        // view's promise: the slots due are `[tail, next + nb)`, delivered
        // descriptors' slots, which this queue reads only after refilling
        // them (the buffers it owns are `[next, tail)`); `committed` slots
        // from `tail` are rearmed by `rearm_committed` or given back by
        // `release_all` (at `stop` and on drop); `pool` is the refill pool.
        // SAFETY: those conditions, as just shown.
        unsafe {
            RecycleRxInfo::new_unchecked(
                &mut self.sw_ring,
                self.tail,
                due,
                self.free_thresh,
                &self.pool,
                &mut self.committed,
            )
        }
    }

    /// Why this queue refuses a recycle step (stopped, or armed with
    /// fragments).
    #[cold]
    fn recycle_refusal(&self) -> PortError {
        if !self.started {
            return PortError::Stopped;
        }
        PortError::Unsupported(
            "this Rx queue does not support buffer recycling: it is armed with page-pool fragments (rxbuf=frag)".into(),
        )
    }
}

impl Drop for SoftRx {
    fn drop(&mut self) {
        // Port::stop has normally run. If not (the queue taken out of a
        // started port), the queue stops now: under the engine lock, with
        // the tail register reset, so a threaded device arms nothing more
        // and writes into no buffer that goes back.
        self.stop();
        if self.next != self.tail
            || self.committed != 0
            || !self.reuse.is_empty()
            || !self.reuse_frags.is_empty()
            || self.headers_next != self.headers_end
        {
            self.release_all();
        }
    }
}
