//! The register blocks of a queue: what the driver and the device share
//! besides the buffers — the ring in host memory, the tail register (the
//! doorbell the driver writes), and for Tx the completion queue the device
//! writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crossbeam_utils::CachePadded;

use super::desc::DescRing;
use super::wqe::{CqRing, SEGS_PER_BB};

/// What the driver and the device share for one Rx queue.
#[derive(Debug)]
pub struct RxRegs {
    /// The descriptor ring.
    pub descs: DescRing,
    /// The tail register: free-running count of descriptors handed to the
    /// device, armed with buffers.
    pub tail: CachePadded<AtomicU32>,
}

impl RxRegs {
    /// Registers for a ring of `n` descriptors.
    pub fn new(n: usize) -> Arc<RxRegs> {
        Arc::new(RxRegs {
            descs: DescRing::new(n),
            tail: CachePadded::new(AtomicU32::new(0)),
        })
    }

    /// Back to power-on: tail register 0, every descriptor zero. Called by
    /// a queue's start and stop with its engine held, so the device sees
    /// either the old ring or the empty one, never a mix.
    pub fn reset(&self) {
        self.tail.store(0, Ordering::Release);
        self.descs.clear();
    }
}

/// What the driver and the device share for one Tx queue.
#[derive(Debug)]
pub struct TxRegs {
    /// The ring: `4 * blocks` segments.
    pub segs: DescRing,
    /// The tail register: blocks handed to the device (free-running).
    pub tail: CachePadded<AtomicU32>,
    /// The completion queue: as many entries as the driver can have
    /// completions asked and not yet read ([`cq_size`]), so it never
    /// overflows (error CQEs aside, which the driver's own WQEs never get).
    pub cq: CqRing,
}

/// The completion queue a Tx queue of `slots` software-ring slots and
/// `blocks` blocks needs, completions asked every `rs` packets, every half
/// ring of blocks, and every `comp_wqes` WQEs (0: not by count): a
/// completion asked and not yet read holds its packets' slots (so at most
/// `slots / rs + 1` such WQEs), its blocks (2 + 1 halves), or `comp_wqes`
/// WQEs of a block or more (`blocks / comp_wqes + 1`). A power of two,
/// 4..=`blocks`.
pub fn cq_size(slots: u32, blocks: u32, rs: u32, comp_wqes: u32) -> usize {
    let by_count = blocks.checked_div(comp_wqes).map_or(0, |n| n + 1);
    let n = slots / rs + 1 + 3 + by_count;
    (n.next_power_of_two().clamp(4, blocks.max(4))) as usize
}

impl TxRegs {
    /// Registers for a ring of `blocks` 64-byte blocks and a completion
    /// queue of `cqes` entries (powers of two).
    pub fn new(blocks: usize, cqes: usize) -> Arc<TxRegs> {
        Arc::new(TxRegs {
            segs: DescRing::new(blocks * SEGS_PER_BB as usize),
            tail: CachePadded::new(AtomicU32::new(0)),
            cq: CqRing::new(cqes),
        })
    }

    /// Blocks in the ring.
    pub fn blocks(&self) -> usize {
        self.segs.len() / SEGS_PER_BB as usize
    }

    /// Back to power-on (the queue starts or stops, its engine held): tail
    /// 0, ring zero, completion queue reset.
    pub fn reset(&self) {
        self.tail.store(0, Ordering::Release);
        self.segs.clear();
        self.cq.reset();
    }
}
