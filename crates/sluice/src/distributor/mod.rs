//! The burst distributor: one distributor thread hands packets to up to
//! [`MAX_WORKERS`] worker threads, eight per cache-line exchange, keeping
//! flow affinity — DPDK's `rte_distributor` burst mode, with ownership made
//! explicit.
//!
//! ```text
//!  rx_burst ──▶ Distributor::process ──bufs line (8)──▶ Worker::get_pkt ── job
//!                    ▲                                          │
//!  tx_burst ◀── returned_pkts ◀──────────rets line (8)──────────┘
//! ```
//!
//! - [`lines`](self) (private): per worker, a line of eight packet slots
//!   from the distributor and one back, each in a 128-byte block of its own;
//!   the handshake is one parity bit per side, flipped with a Release store
//!   and seen with an Acquire load. No lock, no read-modify-write.
//! - [`Distributor`]: tags each packet with its [`flow_tag`], matches eight
//!   tags at once against every worker's in-flight and backlog tags
//!   ([`Matcher`]: AVX2, SSE2 or scalar, picked at run time), queues a
//!   matched packet behind its flow and gives the rest to the least-loaded
//!   worker; collects returns into a FIFO that never overwrites; redistributes
//!   the backlog of a worker that shuts down.
//! - [`Worker`]: one handle per worker id; hands back the packets it is done
//!   with and receives new ones in one exchange.
//!
//! Packets of one flow leave the workers in the order they arrived: while
//! any packet of a flow is in flight at a worker or queued for it, the next
//! one joins that worker's queue; a worker's request, which ends its
//! in-flight batch, carries that batch's returns.
//!
//! [`SingleDistributor`] and [`SingleWorker`] are DPDK's legacy single mode,
//! one packet per exchange, kept beside the burst API for comparison.
//!
//! # Example
//!
//! Workers normally run on threads of their own and call the blocking
//! [`Worker::get_pkt`]; here one thread plays every part with the
//! non-blocking [`Worker::request_pkt`] and [`Worker::poll_pkt`].
//!
//! ```
//! use sluice::distributor::{Distributor, DistributorConfig};
//! use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
//!
//! let pool = MbufPool::new(MbufPoolConfig { size: 255, cache_size: 0, ..Default::default() })?;
//! let mut dist = Distributor::new(DistributorConfig { workers: 2, ..Default::default() })?;
//! let mut workers = [dist.worker(0)?, dist.worker(1)?];
//!
//! // Each worker asks for packets, handing back none yet.
//! let mut nothing: Burst = Burst::new();
//! for w in &mut workers {
//!     w.request_pkt(&mut nothing)?;
//! }
//!
//! // Sixteen packets of two flows (RSS hashes 1 and 2), taking turns.
//! let mut burst: Burst = Burst::new();
//! pool.alloc_bulk(&mut burst, 16)?;
//! for (i, m) in burst.iter_mut().enumerate() {
//!     m.set_rss_hash(1 + i as u32 % 2)?;
//!     m.set_udata64(i as u64)?; // a sequence number
//! }
//! assert_eq!(dist.process(&mut burst), 16);
//!
//! // Each worker receives one whole flow, in order.
//! let mut received = [Burst::<32>::new(), Burst::<32>::new()];
//! for (w, out) in workers.iter_mut().zip(&mut received) {
//!     assert_eq!(w.poll_pkt(out)?, Some(8));
//!     let seqs: Vec<u64> = out.iter().map(|m| m.udata64()).collect();
//!     let first = seqs[0];
//!     assert_eq!(seqs, (0..8).map(|k| first + 2 * k).collect::<Vec<_>>());
//! }
//!
//! // They hand the packets back with their next request; the distributor
//! // collects them.
//! for (w, out) in workers.iter_mut().zip(&mut received) {
//!     assert_eq!(w.request_pkt(out)?, 8);
//! }
//! assert_eq!(dist.flush(), 0);
//! let mut back: Burst = Burst::new();
//! assert_eq!(dist.returned_pkts(&mut back), 16);
//! assert_eq!(dist.stats().handed, [8, 8]);
//!
//! drop(back);
//! drop(dist); // answers the open requests: the workers hold nothing
//! drop(workers);
//! assert!(pool.is_full());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

mod burst;
mod lines;
pub mod matching;
mod returns;
mod single;
mod worker;

#[cfg(all(test, not(loom)))]
mod matching_tests;
#[cfg(all(test, not(loom)))]
mod single_tests;
#[cfg(all(test, not(loom)))]
mod test_support;
#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;

pub use burst::{DistStats, Distributor, DistributorConfig};
pub use matching::{MatchImpl, Matcher, WorkerTags};
pub use single::{SINGLE_BACKLOG, SingleDistributor, SingleWorker};
pub use worker::Worker;

/// Workers a distributor can serve.
pub const MAX_WORKERS: usize = 64;

/// Packets per worker exchange: the packet slots of one 64-byte line.
pub const BURST_SIZE: usize = 8;

/// The flow tag of a packet whose RSS hash is `hash`: its low 15 bits, with
/// 0 mapped to 1.
///
/// 0 marks an empty slot in the tag tables, so no tag may be 0; mapping it
/// to 1 puts the flows whose hash ends in 15 zero bits together with those
/// ending in `...0001` — two packets of one flow always get the same tag,
/// which is all affinity needs (unrelated flows sharing a tag only share a
/// worker). Packets without an RSS hash (hash 0) all get tag 1.
#[inline(always)]
pub fn flow_tag(hash: u32) -> u16 {
    let t = (hash & 0x7fff) as u16;
    t | (t == 0) as u16
}

/// Why a distributor call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DistError {
    /// A distributor needs at least one worker.
    NoWorkers,
    /// More workers than [`MAX_WORKERS`] were asked for.
    TooManyWorkers {
        /// Workers asked for.
        asked: usize,
    },
    /// A worker id not below the distributor's worker count.
    WorkerOutOfRange {
        /// The id given.
        id: usize,
        /// The distributor's worker count.
        workers: usize,
    },
    /// The worker id already has a live handle.
    WorkerClaimed {
        /// The id given.
        id: usize,
    },
    /// A worker's receiving burst has room for fewer than [`BURST_SIZE`]
    /// packets.
    BurstTooSmall {
        /// Its free room.
        free: usize,
    },
    /// `request_pkt` while the last request's answer is not yet taken.
    RequestPending {
        /// The worker.
        id: usize,
    },
    /// `poll_pkt` without a request.
    NotRequested {
        /// The worker.
        id: usize,
    },
    /// The distributor is gone.
    Closed,
    /// This CPU cannot run the tag matching asked for.
    MatchUnavailable {
        /// The implementation's name (`"avx2"`, `"sse2"`).
        name: &'static str,
    },
}

impl fmt::Display for DistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DistError::NoWorkers => write!(f, "a distributor needs at least one worker"),
            DistError::TooManyWorkers { asked } => {
                write!(f, "{asked} workers asked for: at most {MAX_WORKERS}")
            }
            DistError::WorkerOutOfRange { id, workers } => write!(
                f,
                "worker id {id} out of range: the distributor has {workers} worker(s), ids 0..{workers}"
            ),
            DistError::WorkerClaimed { id } => {
                write!(f, "worker id {id} already has a live handle")
            }
            DistError::BurstTooSmall { free } => write!(
                f,
                "a worker's burst needs room for {BURST_SIZE} packets: it has {free}"
            ),
            DistError::RequestPending { id } => write!(
                f,
                "worker {id} asked for packets again before taking the last answer (poll_pkt)"
            ),
            DistError::NotRequested { id } => {
                write!(f, "worker {id} polled without a request (request_pkt)")
            }
            DistError::Closed => write!(f, "the distributor is gone"),
            DistError::MatchUnavailable { name } => {
                write!(f, "this CPU cannot run {name} tag matching")
            }
        }
    }
}

impl std::error::Error for DistError {}
