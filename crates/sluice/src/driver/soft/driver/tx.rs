//! The soft driver's Tx queue: WQEs written into a ring of 64-byte blocks
//! the device reads ([`wqe`](crate::driver::soft::wqe) has the byte
//! layouts), completions read from the queue's completion queue, and a
//! software ring of the mbufs in flight, one slot per packet.
//!
//! # Tx modes (`txmode=`)
//! - `wqe`: one regular WQE per packet — cseg, eseg with the first 18 bytes
//!   of the packet inlined, one dseg per buffer for the rest (one 64-byte
//!   block for a single-segment packet).
//! - `mpwqe` (default): packets go into multi-packet WQEs where they can.
//!   A **session** is an open MPWQE: its eseg is written when it opens, and
//!   it takes packets while their eseg — checksum flags, VLAN insertion,
//!   tunnel flags and offsets — is the one it opened with and it has room
//!   (`mpw_segs` data segments, and the ring's free blocks). A packet with
//!   another eseg closes it and opens the next. TSO and multi-segment
//!   packets go out one by one in regular WQEs, closing the session; the
//!   next packet that allows it opens a new one. A packet of at most
//!   `inline_mpw` bytes is copied into the WQE, any other gets a dseg
//!   (16 bytes). Closing writes the cseg: the segment count and whether a
//!   completion is asked. The end of a burst closes the session, then one
//!   tail store rings the doorbell.
//!
//! # State
//! The queue's state is in named parts, each with its invariants:
//! - the software ring (`SwRing`), indices in packets: `posted` (slots
//!   written), `completed` by the device (learnt from completions),
//!   `retired` the first packet of the next batch to free or recycle (a
//!   multiple of `tx_rs_thresh`). Slots `[retired, posted)` hold the mbufs
//!   not yet retired — exactly what a stop frees.
//! - the WQE ring (`WqeRing`), indices in blocks: `posted` (the tail
//!   register's value), `completed`. The queue writes only blocks
//!   `[posted, completed + blocks)`.
//! - the completions asked and read (`Completions`), the fast-free state
//!   (`FastFree`), the configuration (`TxParams`), the link to the device
//!   (registers and [`QueueEngine`]) and the counters (`TxCounters`).
//!
//! All indices are free-running `u32`s.
//!
//! # Completions
//! A WQE asks for one ([`wqe::CE`](crate::driver::soft::wqe::CE)) when it
//! holds packet `k * tx_rs_thresh - 1`, when `tx_comp` WQEs (if set) or
//! half the ring's blocks have gone out since the last WQE that asked. For
//! each WQE that asked the queue notes its first block, its end and the
//! packet count after it; the device works in order, so a CQE naming a WQE
//! completes every noted WQE up to it, moving the software ring's and the
//! WQE ring's `completed`. The queue reads CQEs only when it needs room or
//! a batch (one acquire load when there is none).
//!
//! # Freeing
//! When fewer than `tx_free_thresh` slots are free, `tx_burst` first frees
//! completed batches of `tx_rs_thresh` packets, until `tx_free_thresh` are
//! free or the next batch is not done. With the fast-free offload (all
//! buffers from one pool, reference count 1, one segment) a batch is one
//! bulk put into the queue's pool — the promise checked packet by packet at
//! `tx_burst`, and a batch that may hold one breaking it freed the normal
//! way ([`super::fast_free`]). Without the offload, a batch whose buffers
//! are all plain buffers of the queue's pool — checked as it is freed, on
//! their first header lines, which `tx_burst` read, and by address — is
//! one bulk put as well; any other batch is freed mbuf by mbuf (reference
//! counts, chains, external buffers; its second header lines read), puts
//! batched per pool. With `tx_free=zc` a batch of plain buffers of the
//! queue's pool is written straight into reserved slots of the lcore's
//! mempool cache instead (zero-copy put). Without fast free, freeing a
//! batch asks for the first header lines of the next one (prefetch hints),
//! which its free reads.
//!
//! # Recycling
//! `recycle_tx_mbufs` retires completed batches into an Rx queue's software
//! ring instead ([`crate::port::recycle`]): a batch moves whole if it fits
//! the Rx slots due and passes the checks (fast free, on batches the
//! screen passed: the learnt pool is the Rx pool, one compare for the whole
//! run with no buffer read; otherwise every buffer is a plain buffer of
//! that pool whose last reference we hold), else it takes the free path
//! above and counts `recycle_fallbacks`. Both Tx modes free by completion the
//! same way, so recycling works with either. The common case is one move:
//! all the completed batches that fit pass, and go over in one straight
//! copy (two pieces across our ring's wrap) and one commit.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::counter::Counter;
use crate::mbuf::{
    BurstSlice, HEADER_SIZE, Mbuf, MbufHeader, TxOffload, free_bulk, ol, put_bulk_to_pool,
};
use crate::mempool::{Elem, PoolInner};
use crate::pagepool::FragRun;
use crate::port::{PortCounters, PortError, RecycleRxInfo, TxQueue};

use super::fast_free::{FastFree, Region};
#[cfg(target_arch = "x86_64")]
use super::vector;
use super::vector::VectorLevel;
use crate::driver::soft::device::QueueEngine;
use crate::driver::soft::device::tx_engine::TxEngine;
use crate::driver::soft::hw::desc::Desc;
use crate::driver::soft::hw::regs::TxRegs;
use crate::driver::soft::hw::wqe::{
    CE, CQE_INVALID, CQE_REQ, CqeInfo, Eseg, EsegWords, MAX_DS, MAX_TSO_HEADER, MIN_INLINE, OP_MPW,
    OP_SEND, OP_TSO, OPMOD_EMPW, SEGS_PER_BB, TUN_VXLAN, blocks, cs, cseg, dseg, header_segs,
    inline_segs, write_data, write_entry, write_words,
};

/// How packets are put into WQEs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxMode {
    /// One regular WQE per packet.
    Wqe,
    /// Multi-packet WQEs where the packet allows.
    Mpwqe,
}

/// How a Tx queue is configured.
#[derive(Debug, Clone, Copy)]
pub struct TxParams {
    /// Free in batches of this many packets; a completion is asked at
    /// least this often.
    pub rs_thresh: u32,
    /// Free completed buffers when fewer slots than this are free.
    pub free_thresh: u32,
    /// One bulk put per batch (fast-free offload, single segments).
    pub fast_free: bool,
    /// Accept chained mbufs.
    pub multi_seg: bool,
    /// Offload flags honoured (`ol::TX_*` bits the port enabled).
    pub ol_mask: u64,
    /// Free batches with a zero-copy cache put (`tx_free=zc`).
    pub zc_free: bool,
    /// Regular or multi-packet WQEs.
    pub mode: TxMode,
    /// Most data segments (16 bytes each) in one MPWQE, `1..=MAX_DS - 2`.
    pub mpw_segs: u32,
    /// Longest packet copied into an MPWQE (0: none); its
    /// `inline_segs` is at most `mpw_segs`.
    pub inline_mpw: u32,
    /// Also ask a completion every this many WQEs (0: not by count).
    pub comp_wqes: u32,
    /// Bus bytes of one doorbell (a 4-byte write and its overhead).
    pub doorbell_bytes: u64,
    /// The instruction set of the MPWQE data segments (available on this
    /// CPU: [`VectorLevel::available`]).
    pub vector: VectorLevel,
}

/// A WQE that asked for a completion, noted until a CQE names it or a
/// later WQE.
#[derive(Debug, Clone, Copy, Default)]
struct AskedWqe {
    /// Its first block (the WQE counter a CQE names).
    first_block: u32,
    /// The block after it: the WQE ring's `completed` once it is done.
    end_block: u32,
    /// Packets posted up to and including it: the software ring's
    /// `completed` once it is done.
    packets_end: u32,
}

/// Counts of one burst, added to the xstats at its end, and with fast free
/// its screen: the pool region posted packets must be plain buffers of,
/// and the OR of what they were [unfit](Region::unfit) for it by.
#[derive(Debug, Default)]
struct BurstCounts {
    sent: usize,
    bytes: u64,
    mpw_blks: u64,
    mpw_pkts: u64,
    wqe_pkts: u64,
    inline_bytes: u64,
    screen: Region,
    unfit: u64,
}

/// What became of a packet given a regular WQE.
enum Post {
    /// Written.
    Done,
    /// No room in the ring: stop the burst here.
    Full,
    /// It cannot be sent (counted in `tx_errors` and under its reason,
    /// freed).
    Bad(Unsendable),
}

/// Why a packet cannot be sent: each reason a named counter, a share of
/// `tx_errors`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unsendable {
    /// A chain of segments on a queue without multi-segment Tx
    /// (`tx_chain_errors`).
    Chain,
    /// No bytes (`tx_empty_errors`).
    Empty,
    /// A TSO request the device cannot carry out: no MSS, a header it
    /// cannot parse or longer than the first segment, no payload, or a
    /// tunnel (`tx_tso_errors`).
    Tso,
    /// More segments than a WQE holds (`tx_segs_errors`).
    Segs,
    /// Tunnel header lengths the eseg cannot carry (`tx_offload_errors`).
    Offload,
}

impl Unsendable {
    /// The counters' names, by [`index`](Self::index).
    const NAMES: [&'static str; 5] = [
        "tx_chain_errors",
        "tx_empty_errors",
        "tx_tso_errors",
        "tx_segs_errors",
        "tx_offload_errors",
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// The software ring: the mbufs in flight, one slot per packet, with
/// its free-running packet indices (ring index `i & mask`).
///
/// Invariant: `retired <= completed <= posted` (as free-running counts)
/// and `posted - retired <= size`. Slots `[retired, posted)` hold the
/// mbufs the queue owns and has not given up; the others hold stale
/// addresses or [`Elem::DANGLING`].
struct SwRing {
    /// The slots.
    slots: Box<[Elem]>,
    /// Slot count (a power of two): the most packets in flight.
    size: u32,
    /// `size - 1`.
    mask: u32,
    /// Packets posted (slots written).
    posted: u32,
    /// Packets the device has completed, learnt from completions.
    completed: u32,
    /// Packets retired (freed or recycled): the first packet of the next
    /// batch to retire, a multiple of `tx_rs_thresh`.
    retired: u32,
}

impl SwRing {
    /// Slots free.
    #[inline(always)]
    fn free(&self) -> u32 {
        self.size - self.posted.wrapping_sub(self.retired)
    }
}

/// The WQE ring as its producer (the queue) sees it: 64-byte blocks in
/// `TxRegs::segs`, free-running block indices.
///
/// Invariant: `posted - completed <= blocks`; the queue writes only blocks
/// `[posted, completed + blocks)`, the device reads only below the tail
/// register, which holds `posted` as of the last doorbell.
struct WqeRing {
    /// Blocks in the ring.
    blocks: u32,
    /// Blocks posted: the tail register's value after the next doorbell.
    posted: u32,
    /// Blocks of completed WQEs, free again.
    completed: u32,
    /// The send queue number the WQEs carry.
    sqn: u32,
}

impl WqeRing {
    /// Blocks free.
    #[inline(always)]
    fn room(&self) -> u32 {
        self.blocks - self.posted.wrapping_sub(self.completed)
    }
}

/// Which WQEs asked a completion, and how far the completion queue is
/// read.
///
/// Invariant: `asked_tail - asked_head <= asked.len()` (the completion
/// queue's size, which bounds the WQEs in flight that asked), and the WQEs
/// noted in `[asked_head, asked_tail)` are in posting order.
struct Completions {
    /// The packet whose WQE asks the next completion (`k * rs_thresh - 1`).
    next_rs_packet: u32,
    /// WQEs posted since the last WQE that asked.
    wqes_since: u32,
    /// Blocks posted since the last WQE that asked.
    blocks_since: u32,
    /// A completion is asked at least every this many WQEs (`u32::MAX`:
    /// never by count).
    every_wqes: u32,
    /// The WQEs that asked and are not known complete, `[asked_head,
    /// asked_tail)`, by index `& asked_mask`.
    asked: Box<[AskedWqe]>,
    /// `asked.len() - 1`.
    asked_mask: u32,
    /// The oldest noted WQE.
    asked_head: u32,
    /// Where the next one is noted.
    asked_tail: u32,
    /// CQEs consumed (free-running): the next CQE read is at this index.
    cqe_consumed: u32,
}

/// A Tx queue's counters: its port's, and the soft-driver xstats it adds
/// to.
struct TxCounters {
    /// The port's counters (`tx[queue]` is this queue's).
    port: Arc<PortCounters>,
    /// Doorbells rung (`bus_doorbells`).
    doorbells: Arc<Counter>,
    /// Their bus bytes (`bus_doorbell_bytes`).
    doorbell_bytes: Arc<Counter>,
    /// Buffers moved into an Rx ring (`tx_recycled`).
    recycled: Arc<Counter>,
    /// Batches that could not be recycled and were freed
    /// (`recycle_fallbacks`).
    recycle_fallbacks: Arc<Counter>,
    /// Blocks of MPWQEs (`tx_mpwqe_blks`).
    mpwqe_blocks: Arc<Counter>,
    /// Packets in MPWQEs (`tx_mpwqe_pkts`).
    mpwqe_pkts: Arc<Counter>,
    /// Packets in regular WQEs (`tx_wqe_pkts`).
    wqe_pkts: Arc<Counter>,
    /// Bytes copied into WQEs (`tx_inline_bytes`).
    inline_bytes: Arc<Counter>,
    /// Error CQEs read (`tx_cqe_errors`).
    cqe_errors: Arc<Counter>,
    /// Packets dropped as unsendable, by [`Unsendable::index`].
    unsendable: [Arc<Counter>; 5],
}

/// What a Tx queue is made of.
pub struct TxQueueParts {
    /// The WQE ring, tail register and completion queue it shares with the
    /// device.
    pub regs: Arc<TxRegs>,
    /// Software-ring slots (a power of two): the most packets in flight.
    pub nb_txd: u32,
    /// How it is configured.
    pub params: TxParams,
    /// Its engine in the device (which also names the queue).
    pub engine: QueueEngine<TxEngine>,
    /// Its port's counters.
    pub counters: Arc<PortCounters>,
}

/// A Tx queue of a soft port.
pub struct SoftTx {
    /// The mbufs in flight.
    sw_ring: SwRing,
    /// The WQE ring's producer state.
    wqes: WqeRing,
    /// Completions asked and read.
    completions: Completions,
    /// With fast free: the pool learnt and the batches that must take the
    /// checks all the same ([`super::fast_free`]).
    fast_free: FastFree,
    /// How the queue is configured.
    params: TxParams,
    /// The registers shared with the device.
    regs: Arc<TxRegs>,
    /// The queue's engine: the inline device step and the queue reset.
    engine: QueueEngine<TxEngine>,
    /// What the queue counts.
    stats: TxCounters,
    /// `start` has run and `stop` has not since.
    started: bool,
    /// The last batch freed took the full free (a buffer was not plain:
    /// an Rx fragment's header, say), which reads the second header lines
    /// too: the next batch's are asked for with its first lines.
    full_free: bool,
    /// Page references of the last fragments freed, not yet given back
    /// (`FastFree::free_frags`). A queue sends a page's fragments in the
    /// order they were received, so a page's run goes on from one batch to
    /// the next, and its fragments cost one count update (a plain load when
    /// they are the page's last) rather than one per batch they span. Given
    /// back when a fragment of another page comes, when the queue has no
    /// packet left to free, at `tx_done_cleanup` and at stop: a queue holds
    /// at most one page this way, and only while it holds packets.
    frag_run: FragRun,
}

// SAFETY: the raw addresses in the software ring are mbufs this queue owns,
// and those in `frag_run` page references it owns; the queue moves between
// threads as a whole and is used by one at a time.
unsafe impl Send for SoftTx {}

/// `a < b` for free-running indices less than 2^31 apart.
#[inline(always)]
pub(super) fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The header of the mbuf in a software-ring slot.
///
/// # Safety
/// The slot holds an mbuf this queue owns (not [`Elem::DANGLING`]).
#[inline(always)]
unsafe fn header<'a>(e: Elem) -> &'a MbufHeader {
    // SAFETY: the caller's contract: a live mbuf we hold a reference to.
    unsafe { &*e.as_ptr().cast::<MbufHeader>() }
}

/// A segment's data: its address and bytes.
///
/// # Safety
/// `h` is a segment of an mbuf the caller holds.
#[inline(always)]
unsafe fn seg_data<'a>(h: &MbufHeader) -> &'a [u8] {
    // SAFETY: the caller's contract: `data_off + data_len` lies within the
    // buffer, which lives while the mbuf is held.
    unsafe { std::slice::from_raw_parts(h.buf_addr.add(h.data_off as usize), h.data_len as usize) }
}

/// Asks for the cache line at `p` ahead of a write (a hint: no memory
/// effect, any address).
#[inline(always)]
pub(super) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults;
    // SSE, which it needs, is part of every x86-64 target.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl SoftTx {
    /// A queue of `parts.nb_txd` software-ring slots over `parts.regs`.
    pub fn new(parts: TxQueueParts) -> SoftTx {
        let TxQueueParts {
            regs,
            nb_txd,
            params,
            engine,
            counters,
        } = parts;
        assert!(
            params.vector.available(),
            "soft Tx queue: no {} on this CPU",
            params.vector
        );
        let x = &counters.xstats;
        let stats = TxCounters {
            doorbells: x.register("bus_doorbells"),
            doorbell_bytes: x.register("bus_doorbell_bytes"),
            recycled: x.register("tx_recycled"),
            recycle_fallbacks: x.register("recycle_fallbacks"),
            mpwqe_blocks: x.register("tx_mpwqe_blks"),
            mpwqe_pkts: x.register("tx_mpwqe_pkts"),
            wqe_pkts: x.register("tx_wqe_pkts"),
            inline_bytes: x.register("tx_inline_bytes"),
            cqe_errors: x.register("tx_cqe_errors"),
            unsendable: Unsendable::NAMES.map(|name| x.register(name)),
            port: Arc::clone(&counters),
        };
        SoftTx {
            sw_ring: SwRing {
                slots: vec![Elem::DANGLING; nb_txd as usize].into_boxed_slice(),
                size: nb_txd,
                mask: nb_txd - 1,
                posted: 0,
                completed: 0,
                retired: 0,
            },
            wqes: WqeRing {
                blocks: regs.blocks() as u32,
                posted: 0,
                completed: 0,
                sqn: engine.queue() as u32,
            },
            completions: Completions {
                next_rs_packet: params.rs_thresh - 1,
                wqes_since: 0,
                blocks_since: 0,
                every_wqes: if params.comp_wqes == 0 {
                    u32::MAX
                } else {
                    params.comp_wqes
                },
                asked: vec![AskedWqe::default(); regs.cq.len()].into_boxed_slice(),
                asked_mask: regs.cq.len() as u32 - 1,
                asked_head: 0,
                asked_tail: 0,
                cqe_consumed: 0,
            },
            fast_free: FastFree::new(),
            params,
            regs,
            engine,
            stats,
            started: false,
            full_free: false,
            frag_run: FragRun::new(),
        }
    }

    /// Reads the new CQEs: every noted WQE up to the one each names is
    /// complete.
    #[inline]
    fn poll_cq(&mut self) {
        let cq = &self.regs.cq;
        let comp = &mut self.completions;
        loop {
            // Acquire: pairs with the device's release store of this word;
            // it is done with every buffer of the WQEs up to the one named.
            let w = cq.get(comp.cqe_consumed).last().load(Ordering::Acquire);
            let c = CqeInfo::parse(w);
            if c.owner != cq.owner(comp.cqe_consumed) || c.opcode == CQE_INVALID {
                return;
            }
            comp.cqe_consumed = comp.cqe_consumed.wrapping_add(1);
            if c.opcode != CQE_REQ {
                self.stats.cqe_errors.inc();
            }
            while comp.asked_head != comp.asked_tail {
                let r = comp.asked[(comp.asked_head & comp.asked_mask) as usize];
                if (c.wqe_counter.wrapping_sub(r.first_block as u16) as i16) < 0 {
                    break;
                }
                self.sw_ring.completed = r.packets_end;
                self.wqes.completed = r.end_block;
                comp.asked_head = comp.asked_head.wrapping_add(1);
            }
        }
    }

    /// The first software-ring slot of the next batch of `tx_rs_thresh`
    /// packets, if the device has completed it.
    #[inline(always)]
    fn done_batch(&mut self) -> Option<usize> {
        let rs = self.params.rs_thresh;
        if self.sw_ring.completed.wrapping_sub(self.sw_ring.retired) < rs {
            if self.sw_ring.posted.wrapping_sub(self.sw_ring.retired) < rs {
                return None;
            }
            self.poll_cq();
            if self.sw_ring.completed.wrapping_sub(self.sw_ring.retired) < rs {
                return None;
            }
        }
        Some((self.sw_ring.retired & self.sw_ring.mask) as usize)
    }

    /// Moves past the batch `done_batch` found: its slots are free.
    #[inline(always)]
    fn retire(&mut self) {
        self.sw_ring.retired = self.sw_ring.retired.wrapping_add(self.params.rs_thresh);
        self.end_frag_run_if_empty();
    }

    /// Gives back the run of page references once the queue holds no
    /// packet: no fragment of the run's page comes to it then.
    #[inline(always)]
    fn end_frag_run_if_empty(&mut self) {
        if self.sw_ring.posted == self.sw_ring.retired {
            self.frag_run.end();
        }
    }

    /// Frees the buffers of the completed batch at `first`; returns the
    /// packets freed.
    #[inline]
    fn free_slots(&mut self, first: usize) -> usize {
        let rs = self.params.rs_thresh as usize;
        let batch = &mut self.sw_ring.slots[first..first + rs];
        if self.params.fast_free
            && let Some(pool) = self.fast_free.pool_from(self.sw_ring.retired)
        {
            // Fast free: every slot of the batch passed the screen at
            // `tx_burst` — a plain buffer (one segment, reference count 1,
            // its own data room) of the queue's pool.
            // SAFETY: the batch is complete (`done_batch`): buffers we own,
            // the device done with them, plain, of `pool`.
            unsafe {
                if !(self.params.zc_free && zc_put(pool, batch)) {
                    put_bulk_to_pool(pool, batch);
                }
            }
            return rs;
        }
        // Without the promise (or with a batch it may not hold for): plain
        // buffers of the queue's pool, checked on their first header lines
        // now, go back in one bulk put all the same.
        // SAFETY: the batch is complete: mbufs we own, the device done with
        // them.
        if let Some(pool) = unsafe { self.fast_free.plain_pool(batch) } {
            // SAFETY: every buffer of the batch is a plain buffer of `pool`
            // whose one reference is ours, now given up.
            unsafe {
                if !(self.params.zc_free && zc_put(pool, batch)) {
                    put_bulk_to_pool(pool, batch);
                }
            }
            self.full_free = false;
            return rs;
        }
        // Single-segment mbufs over page-pool fragments (an `rxbuf=frag`
        // port's packets): their fragments detached on the first header
        // lines, then one bulk put all the same. A batch that is not all
        // such goes on to the full free (its mbufs detached so far are
        // plain buffers then).
        // SAFETY: the batch is complete: mbufs we own, the device done with
        // them.
        if let Some(pool) = unsafe { self.fast_free.free_frags(batch, &mut self.frag_run) } {
            // SAFETY: every buffer of the batch is now a plain buffer of
            // `pool` whose one reference is ours, now given up.
            unsafe {
                if !(self.params.zc_free && zc_put(pool, batch)) {
                    put_bulk_to_pool(pool, batch);
                }
            }
            self.full_free = false;
            return rs;
        }
        // SAFETY: the batch is complete; every slot holds an mbuf we own
        // (one per packet), now given up.
        unsafe { free_bulk(batch) };
        self.full_free = true;
        rs
    }

    /// Frees the next batch if the device has completed it; returns the
    /// packets freed, or `None` if not done.
    #[inline]
    fn free_batch(&mut self) -> Option<usize> {
        let first = self.done_batch()?;
        let k = self.free_slots(first);
        self.retire();
        self.prefetch_next_batch();
        Some(k)
    }

    /// Asks for the first header lines of the next batch to free, if it is
    /// posted and the free reads them (no fast free) (hints). The free
    /// reads them — reference count, segments, buffer address — about a
    /// ring of packets after `tx_burst` did, so they have left the cache;
    /// asked for one batch ahead, they arrive before the next free.
    #[inline(always)]
    fn prefetch_next_batch(&self) {
        let rs = self.params.rs_thresh;
        if self.params.fast_free || self.sw_ring.posted.wrapping_sub(self.sw_ring.retired) < rs {
            return;
        }
        // A batch never wraps: `retired` is a multiple of `rs`, which
        // divides the ring.
        let first = (self.sw_ring.retired & self.sw_ring.mask) as usize;
        let batch = &self.sw_ring.slots[first..first + rs as usize];
        if self.full_free {
            // The full free reads the second lines too (next segment,
            // pool, external buffer): a queue sending Rx fragments frees
            // batch after batch that way.
            for &e in batch {
                prefetch(e.as_ptr());
                prefetch(e.as_ptr().wrapping_add(64));
            }
        } else {
            for &e in batch {
                prefetch(e.as_ptr());
            }
        }
    }

    /// Asks for the software-ring lines of the next `n` packets to post
    /// (a hint). Retired by recycling, those slots were last touched about
    /// a ring of packets ago — the free path retires them just before
    /// posting over them — so the next `tx_burst` would find them cold.
    #[inline(always)]
    fn prefetch_head(&self, n: usize) {
        let ring = self.sw_ring.slots.as_ptr();
        let mut i = 0;
        while i < n {
            let at = (self.sw_ring.posted.wrapping_add(i as u32) & self.sw_ring.mask) as usize;
            prefetch(ring.wrapping_add(at).cast());
            i += 8;
        }
    }

    /// Publishes the packets the queue holds (posted, not yet retired) in
    /// its `waiting` gauge: one store.
    #[inline(always)]
    fn note_waiting(&self) {
        self.stats.port.tx[self.engine.queue()]
            .waiting
            .set(self.sw_ring.posted.wrapping_sub(self.sw_ring.retired) as u64);
    }

    /// Frees every mbuf not yet retired and resets the indices (the device
    /// is stopped or locked out, the ring reset).
    fn release_all(&mut self) {
        let mut i = self.sw_ring.retired;
        while before(i, self.sw_ring.posted) {
            let e = self.sw_ring.slots[(i & self.sw_ring.mask) as usize];
            if e != Elem::DANGLING {
                // SAFETY: an mbuf we own, once; the device no longer reads it.
                drop(unsafe { Mbuf::from_raw(e.as_non_null().cast::<MbufHeader>()) });
            }
            i = i.wrapping_add(1);
        }
        self.sw_ring.slots.fill(Elem::DANGLING);
        self.frag_run.end();
        self.fast_free.reset();
        self.sw_ring.posted = 0;
        self.sw_ring.completed = 0;
        self.sw_ring.retired = 0;
        self.completions.next_rs_packet = self.params.rs_thresh - 1;
        self.wqes.posted = 0;
        self.wqes.completed = 0;
        self.completions.wqes_since = 0;
        self.completions.blocks_since = 0;
        self.completions.asked_head = 0;
        self.completions.asked_tail = 0;
        self.completions.cqe_consumed = 0;
    }

    /// Accounts a WQE of `bbs` blocks at the WQE ring's `posted` whose
    /// packets end at `packets_end`, and decides whether it asks a
    /// completion (noted if so).
    #[inline(always)]
    fn finish_wqe(&mut self, bbs: u32, packets_end: u32) -> bool {
        let start = self.wqes.posted;
        self.wqes.posted = start.wrapping_add(bbs);
        let comp = &mut self.completions;
        comp.wqes_since += 1;
        comp.blocks_since += bbs;
        let ce = before(comp.next_rs_packet, packets_end)
            || comp.wqes_since >= comp.every_wqes
            || comp.blocks_since >= self.wqes.blocks / 2;
        if ce {
            comp.asked[(comp.asked_tail & comp.asked_mask) as usize] = AskedWqe {
                first_block: start,
                end_block: self.wqes.posted,
                packets_end,
            };
            comp.asked_tail = comp.asked_tail.wrapping_add(1);
            while before(comp.next_rs_packet, packets_end) {
                comp.next_rs_packet = comp.next_rs_packet.wrapping_add(self.params.rs_thresh);
            }
            comp.wqes_since = 0;
            comp.blocks_since = 0;
        }
        ce
    }

    /// Room for a WQE of `bbs` blocks, reading completions if needed.
    #[inline(always)]
    fn room_for(&mut self, bbs: u32) -> bool {
        if self.wqes.room() >= bbs {
            return true;
        }
        self.poll_cq();
        self.wqes.room() >= bbs
    }

    /// The eseg a packet's offload flags `f` (already masked) ask for;
    /// `None` for tunnel header lengths the eseg cannot carry (zero, odd,
    /// or past 510 bytes).
    #[inline]
    fn eseg(&self, h: &MbufHeader, f: u64) -> Option<Eseg> {
        let mut e = Eseg::default();
        let l4 = match f & ol::TX_UDP_CKSUM {
            x if x == ol::TX_UDP_CKSUM => 1,
            x if x == ol::TX_TCP_CKSUM => 2,
            _ => 0,
        };
        if f & ol::TX_TUNNEL_VXLAN != 0 {
            let t = TxOffload::unpack(h.tx_offload);
            let ol3 = t.outer_l2_len as usize;
            let ol4 = ol3 + t.outer_l3_len as usize;
            let il3 = ol4 + t.l2_len as usize;
            let il4 = il3 + t.l3_len as usize;
            let ok = |v: usize, prev: usize| v > prev && v.is_multiple_of(2) && v <= 510;
            if !(ok(ol3, 0) && ok(ol4, ol3) && ok(il3, ol4) && ok(il4, il3)) {
                return None;
            }
            let half = |v: usize| (v / 2) as u8;
            e.swp = [half(ol3), half(ol4), half(il3), half(il4)];
            e.tun = TUN_VXLAN;
            if f & ol::TX_OUTER_IP_CKSUM != 0 {
                e.cs |= cs::L3;
            }
            if f & ol::TX_IP_CKSUM != 0 {
                e.cs |= cs::INNER_L3;
            }
            e.cs |= [0, cs::INNER_L4_UDP, cs::INNER_L4_TCP][l4];
        } else {
            if f & ol::TX_IP_CKSUM != 0 {
                e.cs |= cs::L3;
            }
            e.cs |= [0, cs::L4_UDP, cs::L4_TCP][l4];
        }
        if f & ol::TX_VLAN != 0 {
            e.vlan = Some(h.vlan_tci);
        }
        if f & ol::TX_TCP_SEG != 0 {
            e.mss = TxOffload::unpack(h.tx_offload).tso_segsz;
        }
        Some(e)
    }

    /// Counts a packet the queue cannot send in `tx_errors` and under
    /// `why`, and frees it. The caller takes `e` out of the burst
    /// (`forget_front`).
    #[cold]
    fn drop_bad(&self, e: Elem, why: Unsendable) {
        self.stats.port.tx[self.engine.queue()].errors.inc();
        self.stats.unsendable[why.index()].inc();
        // SAFETY: an owned mbuf of the burst, which the caller forgets, so
        // it is dropped once, here.
        drop(unsafe { Mbuf::from_raw(e.as_non_null().cast()) });
    }

    /// Opens a session (an MPWQE) with eseg `key` that can take an entry of
    /// `need` segments: writes the eseg; returns the segment index of its
    /// cseg and the most segments it may reach (`mpw_segs`, ring room), or
    /// `None` if the ring has no room.
    #[inline]
    fn open(&mut self, key: EsegWords, need: u32) -> Option<(u32, u32)> {
        // Short of a whole MPWQE's blocks: read completions first, so the
        // session is not cut short by room the device has already freed.
        if self.wqes.room() < blocks(2 + self.params.mpw_segs) {
            self.poll_cq();
            if self.wqes.room() < blocks(2 + need) {
                return None;
            }
        }
        let base = self.wqes.posted.wrapping_mul(SEGS_PER_BB);
        write_words(self.regs.segs.get(base.wrapping_add(1)), (key.0, key.1));
        let limit = (2 + self.params.mpw_segs).min(self.wqes.room() * SEGS_PER_BB);
        Some((base, limit))
    }

    /// Closes the session at segment `base` of `ds` segments and `pkts`
    /// packets: its cseg, its blocks posted.
    #[inline]
    fn close(&mut self, base: u32, ds: u32, pkts: u32, st: &mut BurstCounts) {
        let start = self.wqes.posted;
        let bbs = blocks(ds);
        let ce = self.finish_wqe(bbs, self.sw_ring.posted);
        let flags = if ce { CE } else { 0 };
        let c = cseg(OPMOD_EMPW, start as u16, OP_MPW, self.wqes.sqn, ds, flags);
        write_words(self.regs.segs.get(base), c);
        st.mpw_blks += bbs as u64;
        st.mpw_pkts += pkts as u64;
    }

    /// [`post`](Self::post) out of line: the MPWQE path's fallback (TSO,
    /// chains), kept out of its loop.
    #[inline(never)]
    fn post_fallback(&mut self, h: &MbufHeader, segs: u32, f: u64, st: &mut BurstCounts) -> Post {
        self.post(h, segs, f, st)
    }

    /// Writes a regular WQE (send or TSO) for the packet at `h` of `segs`
    /// segments, offload flags `f` (masked).
    #[inline]
    fn post(&mut self, h: &MbufHeader, segs: u32, f: u64, st: &mut BurstCounts) -> Post {
        if segs > 1 && !self.params.multi_seg {
            return Post::Bad(Unsendable::Chain);
        }
        if h.pkt_len == 0 {
            return Post::Bad(Unsendable::Empty);
        }
        let tso = f & ol::TX_TCP_SEG != 0;
        // SAFETY: the burst owns the mbuf; `h` is its first segment.
        let data0 = unsafe { seg_data(h) };
        let n = if tso {
            let t = TxOffload::unpack(h.tx_offload);
            let hl = t.l2_len as usize + t.l3_len as usize + t.l4_len as usize;
            if f & ol::TX_TUNNEL_VXLAN != 0
                || t.tso_segsz == 0
                || !(14..=MAX_TSO_HEADER).contains(&hl)
                || hl > data0.len()
            {
                return Post::Bad(Unsendable::Tso);
            }
            hl
        } else {
            MIN_INLINE.min(data0.len())
        };
        let mut dsegs = (data0.len() > n) as u32;
        let mut seg = h.next;
        for _ in 1..segs {
            // SAFETY: a segment of the chain the burst owns.
            let sh = unsafe { &*seg };
            dsegs += (sh.data_len > 0) as u32;
            seg = sh.next;
        }
        let ds = 2 + header_segs(n) + dsegs;
        if ds > MAX_DS {
            return Post::Bad(Unsendable::Segs);
        }
        if tso && dsegs == 0 {
            return Post::Bad(Unsendable::Tso);
        }
        let bbs = blocks(ds);
        if !self.room_for(bbs) {
            return Post::Full;
        }
        let e = if f == 0 {
            EsegWords::NONE
        } else {
            match self.eseg(h, f) {
                Some(e) => e.words(),
                None => return Post::Bad(Unsendable::Offload),
            }
        };
        let base = self.wqes.posted.wrapping_mul(SEGS_PER_BB);
        let ring = &self.regs.segs;
        let first = [
            data0.first().copied().unwrap_or(0),
            data0.get(1).copied().unwrap_or(0),
        ];
        write_words(
            ring.get(base.wrapping_add(1)),
            (e.0, e.with_inline(n as u16, first)),
        );
        let mut i = base.wrapping_add(2);
        if n > 2 {
            i = i.wrapping_add(write_data(ring, i, &data0[2..n]));
        }
        if data0.len() > n {
            let addr = data0.as_ptr() as u64 + n as u64;
            write_words(ring.get(i), dseg((data0.len() - n) as u32, addr));
            i = i.wrapping_add(1);
        }
        let mut seg = h.next;
        for _ in 1..segs {
            // SAFETY: as above.
            let sh = unsafe { &*seg };
            if sh.data_len > 0 {
                // SAFETY: a segment of the chain the burst owns.
                let d = unsafe { seg_data(sh) };
                write_words(ring.get(i), dseg(d.len() as u32, d.as_ptr() as u64));
                i = i.wrapping_add(1);
            }
            seg = sh.next;
        }
        let start = self.wqes.posted;
        let ce = self.finish_wqe(bbs, self.sw_ring.posted.wrapping_add(1));
        let op = if tso { OP_TSO } else { OP_SEND };
        let flags = if ce { CE } else { 0 };
        write_words(
            self.regs.segs.get(base),
            cseg(0, start as u16, op, self.wqes.sqn, ds, flags),
        );
        st.wqe_pkts += 1;
        st.inline_bytes += n as u64;
        Post::Done
    }
}

/// How a packet goes into the ring.
#[derive(Clone, Copy)]
enum Class {
    /// An MPWQE entry with this eseg, of so many segments.
    Entry(EsegWords, u32),
    /// A regular WQE (TSO, a chain, an empty packet: `post` decides).
    Regular,
    /// Unsendable: tunnel header lengths the eseg cannot carry (counted,
    /// freed).
    Bad,
}

impl SoftTx {
    /// How the packet at `h` goes into an MPWQE (mode `mpwqe`).
    #[inline(always)]
    fn classify(&self, h: &MbufHeader) -> Class {
        let f = h.ol_flags & self.params.ol_mask;
        if h.nb_segs != 1 || f & ol::TX_TCP_SEG != 0 || h.data_len == 0 {
            return Class::Regular;
        }
        let key = if f == 0 {
            EsegWords::NONE
        } else if let Some(e) = self.eseg(h, f) {
            e.words()
        } else {
            return Class::Bad;
        };
        let len = h.data_len as usize;
        let need = if len <= self.params.inline_mpw as usize {
            inline_segs(len)
        } else {
            1
        };
        Class::Entry(key, need)
    }

    /// Keeps a sent packet: its software-ring slot, the burst's counts,
    /// and with `SCREEN` (fast free) its screen.
    #[inline(always)]
    fn keep<const SCREEN: bool>(&mut self, e: Elem, h: &MbufHeader, st: &mut BurstCounts) {
        if SCREEN {
            st.unfit |= st.screen.unfit(e, h);
        }
        self.sw_ring.slots[(self.sw_ring.posted & self.sw_ring.mask) as usize] = e;
        self.sw_ring.posted = self.sw_ring.posted.wrapping_add(1);
        st.bytes += h.pkt_len as u64;
        st.sent += 1;
    }

    /// Mode `wqe`: one regular WQE per packet. Returns the packets taken.
    /// `SCREEN`: as in [`keep`](Self::keep).
    #[inline(never)]
    fn burst_wqe<const SCREEN: bool>(&mut self, raw: &[Elem], st: &mut BurstCounts) -> usize {
        let mut room = self.sw_ring.free();
        let mut i = 0;
        while i < raw.len() && room != 0 {
            let e = raw[i];
            // SAFETY: the burst owns this mbuf; we only read its header.
            let h = unsafe { header(e) };
            let f = h.ol_flags & self.params.ol_mask;
            match self.post(h, h.nb_segs as u32, f, st) {
                Post::Done => {
                    self.keep::<SCREEN>(e, h, st);
                    room -= 1;
                }
                Post::Full => break,
                Post::Bad(why) => self.drop_bad(e, why),
            }
            i += 1;
        }
        i
    }

    /// Mode `mpwqe`, one packet at a time: see
    /// [`burst_mpw_with`](Self::burst_mpw_with).
    #[inline(never)]
    fn burst_mpw<const SCREEN: bool>(&mut self, raw: &[Elem], st: &mut BurstCounts) -> usize {
        self.burst_mpw_with::<SCREEN, 0>(raw, st, |_, _| {})
    }

    /// Mode `mpwqe` with SSE4.1 data segments.
    ///
    /// # Safety
    /// The CPU has SSE4.1.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.1")]
    #[inline(never)]
    unsafe fn burst_mpw_sse41<const SCREEN: bool>(
        &mut self,
        raw: &[Elem],
        st: &mut BurstCounts,
    ) -> usize {
        self.burst_mpw_with::<SCREEN, 4>(raw, st, |segs, elems| {
            // SAFETY: SSE4.1 is present (this function's contract);
            // `burst_mpw_with` passes 4 unpublished segments and 4
            // single-segment mbufs of the burst.
            unsafe { vector::tx_dsegs_sse41(segs, elems) }
        })
    }

    /// Mode `mpwqe` with AVX2 data segments.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline(never)]
    unsafe fn burst_mpw_avx2<const SCREEN: bool>(
        &mut self,
        raw: &[Elem],
        st: &mut BurstCounts,
    ) -> usize {
        self.burst_mpw_with::<SCREEN, 4>(raw, st, |segs, elems| {
            // SAFETY: AVX2 is present (this function's contract);
            // `burst_mpw_with` passes 4 unpublished segments and 4
            // single-segment mbufs of the burst.
            unsafe { vector::tx_dsegs_avx2(segs, elems) }
        })
    }

    /// Mode `mpwqe` at the queue's vector level.
    #[inline(always)]
    fn burst_mpw_at<const SCREEN: bool>(&mut self, raw: &[Elem], st: &mut BurstCounts) -> usize {
        match self.params.vector {
            VectorLevel::Scalar => self.burst_mpw::<SCREEN>(raw, st),
            // SAFETY: the level is available on this CPU (checked in `new`).
            #[cfg(target_arch = "x86_64")]
            VectorLevel::Sse41 => unsafe { self.burst_mpw_sse41::<SCREEN>(raw, st) },
            // SAFETY: as above; AVX-512 levels have AVX2 too
            // ([`VectorLevel::available`]).
            #[cfg(target_arch = "x86_64")]
            VectorLevel::Avx2 | VectorLevel::Avx512 => unsafe {
                self.burst_mpw_avx2::<SCREEN>(raw, st)
            },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only the scalar level exists here"),
        }
    }

    /// Mode `mpwqe`: sessions of packets sharing an eseg, regular WQEs for
    /// the others. Returns the packets taken. `SCREEN`: as in
    /// [`keep`](Self::keep).
    ///
    /// Inside a session, runs of `W` packets (`W` 0: none) that each take
    /// a data segment with the session's flags are written by `dsegs`,
    /// which must write what [`dseg`] gives for each; it is called with
    /// `W` consecutive segments in blocks past the tail register and `W`
    /// single-segment mbufs of the burst.
    #[inline(always)]
    fn burst_mpw_with<const SCREEN: bool, const W: usize>(
        &mut self,
        raw: &[Elem],
        st: &mut BurstCounts,
        dsegs: impl Fn(*const Desc, *const Elem),
    ) -> usize {
        // The sessions' screen, in registers, added to `st` once.
        let screen = st.screen;
        let mut unfit = 0u64;
        let mut room = self.sw_ring.free();
        let mut i = 0;
        // The class of packet `i` when the session before found it.
        let mut known: Option<Class> = None;
        while i < raw.len() && room != 0 {
            let e = raw[i];
            // SAFETY: the burst owns this mbuf; we only read its header.
            let h = unsafe { header(e) };
            let class = match known.take() {
                Some(c) => c,
                None => self.classify(h),
            };
            let (key, need) = match class {
                Class::Entry(key, need) => (key, need),
                Class::Regular => {
                    let f = h.ol_flags & self.params.ol_mask;
                    match self.post_fallback(h, h.nb_segs as u32, f, st) {
                        Post::Done => {
                            self.keep::<SCREEN>(e, h, st);
                            room -= 1;
                        }
                        Post::Full => break,
                        Post::Bad(why) => self.drop_bad(e, why),
                    }
                    i += 1;
                    continue;
                }
                Class::Bad => {
                    self.drop_bad(e, Unsendable::Offload);
                    i += 1;
                    continue;
                }
            };
            let Some((base, limit)) = self.open(key, need) else {
                break;
            };
            // The session: packets while they take this eseg and fit. A
            // packet with the first one's flags takes the same eseg, unless
            // the eseg also carries a VLAN tag or tunnel offsets of its own.
            let f0 = h.ol_flags & self.params.ol_mask;
            let same_flags_same_eseg = f0 & (ol::TX_VLAN | ol::TX_TUNNEL_VXLAN) == 0;
            let ol_mask = self.params.ol_mask;
            let inline_mpw = self.params.inline_mpw as usize;
            let mask = self.sw_ring.mask;
            let ring = &self.regs.segs;
            let mut eh = self.sw_ring.posted;
            let (mut e, mut h, mut need) = (e, h, need);
            let mut ds = 2;
            let mut bytes = 0u64;
            let start = i;
            loop {
                // SAFETY: the burst owns the mbuf: one segment.
                let data = unsafe { seg_data(h) };
                let at = base.wrapping_add(ds);
                if data.len() > inline_mpw {
                    let w = dseg(data.len() as u32, data.as_ptr() as u64);
                    write_words(ring.get(at), w);
                } else {
                    // Inlined packets fill blocks fast: ask for the line
                    // four blocks ahead.
                    let ahead = at.wrapping_add(need + 4 * SEGS_PER_BB);
                    prefetch(ring.get(ahead) as *const _ as *const u8);
                    write_entry(ring, at, data);
                    st.inline_bytes += data.len() as u64;
                }
                if SCREEN {
                    unfit |= screen.unfit(e, h);
                }
                self.sw_ring.slots[(eh & mask) as usize] = e;
                eh = eh.wrapping_add(1);
                // One segment: the packet is its data.
                bytes += data.len() as u64;
                ds += need;
                i += 1;
                if i == raw.len() || i - start == room as usize {
                    break;
                }
                // Groups of `W` data-segment entries with this session's
                // flags, while they fit the burst, the room and the
                // session, and do not cross the ring's end.
                while W != 0
                    && same_flags_same_eseg
                    && i + W <= raw.len()
                    && i - start + W <= room as usize
                    && ds + W as u32 <= limit
                {
                    let seg = (base.wrapping_add(ds) & ring.mask()) as usize;
                    let (Some(group), Some(segs)) =
                        (raw.get(i..i + W), ring.as_slice().get(seg..seg + W))
                    else {
                        break;
                    };
                    let mut fit = true;
                    let mut group_bytes = 0u64;
                    for &g in group {
                        // SAFETY: the burst owns the mbuf; we only read its
                        // header.
                        let gh = unsafe { header(g) };
                        fit &= gh.nb_segs == 1
                            && gh.ol_flags & ol_mask == f0
                            && gh.data_len as usize > inline_mpw;
                        group_bytes += gh.data_len as u64;
                    }
                    if !fit {
                        break;
                    }
                    dsegs(segs.as_ptr(), group.as_ptr());
                    for &g in group {
                        if SCREEN {
                            // SAFETY: as above.
                            unfit |= screen.unfit(g, unsafe { header(g) });
                        }
                        self.sw_ring.slots[(eh & mask) as usize] = g;
                        eh = eh.wrapping_add(1);
                    }
                    bytes += group_bytes;
                    ds += W as u32;
                    i += W;
                }
                if i == raw.len() || i - start == room as usize {
                    break;
                }
                let next = raw[i];
                // SAFETY: as above.
                let nh = unsafe { header(next) };
                let len = nh.data_len as usize;
                let f = nh.ol_flags & ol_mask;
                let n = if len > inline_mpw {
                    1
                } else {
                    inline_segs(len)
                };
                if nh.nb_segs != 1 || len == 0 || ds + n > limit {
                    break;
                }
                if !(f == f0 && same_flags_same_eseg) {
                    match self.classify(nh) {
                        Class::Entry(k, _) if k == key => {}
                        c => {
                            // Another eseg (or none): the next session, or
                            // the fallback, starts from what was found.
                            known = Some(c);
                            break;
                        }
                    }
                }
                (e, h, need) = (next, nh, n);
            }
            let pkts = (i - start) as u32;
            room -= pkts;
            st.sent += pkts as usize;
            st.bytes += bytes;
            self.sw_ring.posted = eh;
            self.close(base, ds, pkts, st);
        }
        st.unfit |= unfit;
        i
    }
}

impl TxQueue for SoftTx {
    #[inline]
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        if !self.started {
            return 0;
        }
        if self.sw_ring.free() < self.params.free_thresh {
            while self.sw_ring.free() < self.params.free_thresh && self.free_batch().is_some() {}
        }
        let mut st = BurstCounts::default();
        let raw = burst.raw();
        let taken = if self.params.fast_free {
            // Fast free: each packet posted is screened ([`super::fast_free`]).
            // SAFETY: the burst's mbufs are ours.
            st.screen = unsafe { self.fast_free.region(raw.first()) };
            match self.params.mode {
                TxMode::Mpwqe => self.burst_mpw_at::<true>(raw, &mut st),
                TxMode::Wqe => self.burst_wqe::<true>(raw, &mut st),
            }
        } else {
            match self.params.mode {
                TxMode::Mpwqe => self.burst_mpw_at::<false>(raw, &mut st),
                TxMode::Wqe => self.burst_wqe::<false>(raw, &mut st),
            }
        };
        if st.unfit != 0 {
            // The packets posted lie before `sw_ring.posted`.
            self.fast_free.taint(self.sw_ring.posted);
        }
        if st.sent != 0 {
            // The doorbell: the WQEs above are visible to a device that
            // loads it (acquire).
            self.regs.tail.store(self.wqes.posted, Ordering::Release);
            self.stats.doorbells.inc();
            self.stats.doorbell_bytes.add(self.params.doorbell_bytes);
            if st.mpw_pkts != 0 {
                self.stats.mpwqe_blocks.add(st.mpw_blks);
                self.stats.mpwqe_pkts.add(st.mpw_pkts);
            }
            if st.wqe_pkts != 0 {
                self.stats.wqe_pkts.add(st.wqe_pkts);
            }
            if st.inline_bytes != 0 {
                self.stats.inline_bytes.add(st.inline_bytes);
            }
        }
        // SAFETY: the first `taken` mbufs are now in the software ring (or
        // were dropped).
        unsafe { burst.forget_front(taken) };
        self.stats.port.tx[self.engine.queue()].record_burst(st.sent, st.bytes);
        self.note_waiting();
        self.engine.inline_step();
        taken
    }

    fn tx_done_cleanup(&mut self, max: usize) -> usize {
        let mut freed = 0;
        while freed < max {
            match self.free_batch() {
                Some(k) => freed += k,
                None => break,
            }
        }
        self.frag_run.end();
        self.note_waiting();
        freed
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.started {
            return Ok(());
        }
        self.engine.start(|| self.regs.reset())?;
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        if !self.started {
            return;
        }
        self.started = false;
        // Under the engine lock: a running device is not reading a buffer
        // of this queue, and with the tail register and its head at 0 it
        // reads nothing more.
        let engine = self.engine.clone();
        engine.stop(|| {
            self.regs.reset();
            self.release_all();
        });
        self.note_waiting();
    }

    fn recycle_tx_capable(&self) -> bool {
        true
    }

    #[inline]
    fn recycle_tx_mbufs(&mut self, rx: &mut RecycleRxInfo<'_>) -> Result<usize, PortError> {
        if !self.started {
            return Err(PortError::Stopped);
        }
        let rs = self.params.rs_thresh;
        // Room first: once the Rx slots due are filled, the next batch's
        // completion (likely a cache miss) is not even looked at. The
        // refill unit is a power of two (or 0: any count); our batches
        // must be whole units.
        let room = rx.room();
        if room < rs || rs & (rx.refill_requirement().max(1) - 1) != 0 {
            return Ok(0);
        }
        // Batches wanted (room is at most the ring: no overflow below), and
        // batches the device has completed, reading completions only when
        // fewer are known than wanted and more were posted. `rs` is a power
        // of two: shifts, not divisions.
        let shift = rs.trailing_zeros();
        let want = room >> shift;
        let mut done = self.sw_ring.completed.wrapping_sub(self.sw_ring.retired) >> shift;
        if done < want && self.sw_ring.posted.wrapping_sub(self.sw_ring.retired) >> shift > done {
            self.poll_cq();
            done = self.sw_ring.completed.wrapping_sub(self.sw_ring.retired) >> shift;
        }
        let k = want.min(done);
        if k == 0 {
            return Ok(0);
        }
        let first = (self.sw_ring.retired & self.sw_ring.mask) as usize;
        // Fast free, and the whole run posted after any packet that failed
        // the screen: every buffer is a plain buffer of the learnt pool, so
        // the run passes if that pool is the Rx pool — one compare of two
        // region bases, no buffer (nor software-ring slot) read. Otherwise
        // every buffer is checked, on its first header line, which
        // `tx_burst` touched: the Rx pool is known, so its region tells by
        // address what the free path reads from the second line.
        let passes =
            if self.params.fast_free && self.fast_free.pool_from(self.sw_ring.retired).is_some() {
                rx.pool_starts_at(self.fast_free.region_base())
            } else {
                (0..k).all(|b| {
                    // A batch never wraps: `sw_ring.retired` is a multiple of
                    // `rs`, which divides the ring.
                    let at = (first + (b << shift) as usize) & self.sw_ring.mask as usize;
                    // SAFETY: the batch is complete (`sw_ring.completed`): its
                    // slots hold mbufs we own that the device no longer reads.
                    unsafe { plain_batch_of(rx, &self.sw_ring.slots[at..at + rs as usize]) }
                })
            };
        if !passes {
            return Ok(self.recycle_batchwise(rx));
        }
        // Every batch passes: one straight copy of the run, in at most two
        // pieces across the Tx ring's wrap, into one run of Rx slots, and
        // one commit.
        let n = (k << shift) as usize;
        let slots = &self.sw_ring.slots[..];
        // Retiring the batches without freeing them gives up our references:
        // `sw_ring.retired` moves past them below, so we keep none.
        // SAFETY: the slots copied hold the batches' completed buffers:
        // distinct, of the Rx pool, plain (checked, or screened at tx_burst).
        let filled = unsafe {
            match slots.get(first..first + n) {
                // The common case, one piece: the copy has no second part.
                Some(run) => rx.fill(run, &[]),
                None => {
                    let head = slots.len() - first;
                    rx.fill(&slots[first..], &slots[..n - head])
                }
            }
        };
        if !filled {
            // `k` whole batches of whole units within the room: they fit.
            return Ok(0);
        }
        self.sw_ring.retired = self.sw_ring.retired.wrapping_add(k << shift);
        self.end_frag_run_if_empty();
        self.stats.recycled.add(n as u64);
        // The `waiting` gauge is published by the next `tx_burst` (it is
        // the count as of the queue's last burst): a recycle step runs at
        // every poll, and the gauge sits two pointers away.
        self.prefetch_head(n);
        Ok(n)
    }
}

impl SoftTx {
    /// The recycle step when some completed batch fails the checks: batch
    /// by batch while they fit, those that pass into the Rx slots, the
    /// others freed (each counts one `recycle_fallbacks`). Returns the
    /// buffers moved.
    #[cold]
    #[inline(never)]
    fn recycle_batchwise(&mut self, rx: &mut RecycleRxInfo<'_>) -> usize {
        let rs = self.params.rs_thresh;
        let mut moved = 0;
        while rx.fits(rs) {
            let Some(first) = self.done_batch() else {
                break;
            };
            let screened =
                self.params.fast_free && self.fast_free.pool_from(self.sw_ring.retired).is_some();
            let batch = &self.sw_ring.slots[first..first + rs as usize];
            let ok = if screened {
                rx.pool_starts_at(self.fast_free.region_base())
            } else {
                // SAFETY: as in `recycle_tx_mbufs`.
                unsafe { plain_batch_of(rx, batch) }
            };
            if ok {
                // SAFETY: the batch's buffers: distinct, of the Rx pool,
                // plain (checked above, or screened at `tx_burst`); retired
                // below, so we keep none.
                if !unsafe { rx.fill(batch, &[]) } {
                    break;
                }
                moved += rs as usize;
            } else {
                self.free_slots(first);
                self.stats.recycle_fallbacks.inc();
            }
            self.retire();
        }
        if moved != 0 {
            self.stats.recycled.add(moved as u64);
        }
        moved
    }
}

/// Whether every buffer of `batch` is a plain buffer of `rx`'s pool whose
/// last reference is ours ([`plain_line0`]), read from the first header
/// lines only (`DANGLING` slots fail, unread).
///
/// # Safety
/// `batch` holds mbufs the caller owns, one reference each, that the
/// device no longer reads (or `DANGLING`).
#[inline(never)]
unsafe fn plain_batch_of(rx: &RecycleRxInfo<'_>, batch: &[Elem]) -> bool {
    batch.iter().all(|&e| {
        // SAFETY: an mbuf the caller owns (`DANGLING` ones are not read).
        e != Elem::DANGLING && rx.in_pool(e) && unsafe { plain_line0(e) }
    })
}

/// Whether the mbuf in `e` is plain — reference count 1 (ours), one
/// segment (so no next), its own buffer (no external one attached) — read
/// from the first header line only: a head with one segment has no next,
/// and an attached external buffer moves `buf_addr` off the element.
///
/// # Safety
/// As [`header`].
#[inline(always)]
unsafe fn plain_line0(e: Elem) -> bool {
    // SAFETY: forwarded.
    let h = unsafe { header(e) };
    // Acquire: a clone dropped on another thread released its uses of the
    // buffer with its decrement; reading 1 makes them happen-before what
    // this allows.
    h.nb_segs == 1
        && h.buf_addr.cast_const() == e.as_ptr().wrapping_add(HEADER_SIZE).cast_const()
        && h.refcnt.load(Ordering::Acquire) == 1
}

/// Puts a batch of plain buffers of `pool` into the calling lcore's cache
/// through reserved slots (one copy, no staging); false if the caller has
/// no cache or the batch exceeds its threshold (nothing was put).
///
/// # Safety
/// As [`put_bulk_to_pool`].
#[inline(always)]
unsafe fn zc_put(pool: *const PoolInner, batch: &[Elem]) -> bool {
    // SAFETY: the pool outlives its buffers; nothing else touches the pool
    // on this thread until the guard is committed.
    let Some(mut z) = (unsafe { (*pool).zc_put_bulk(batch.len()) }) else {
        return false;
    };
    z.slots().copy_from_slice(batch);
    // SAFETY: the slots hold the batch: plain buffers of the pool, given
    // up (caller's contract), each once.
    unsafe { z.commit() };
    true
}

impl Drop for SoftTx {
    fn drop(&mut self) {
        // Port::stop has normally run. If not (the queue taken out of a
        // started port), the queue stops now: under the engine lock, with
        // the tail register reset, so a threaded device reads no posted
        // buffer after it goes back.
        self.stop();
        self.release_all();
    }
}
