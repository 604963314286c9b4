//! The queue traits: what one polling thread calls, with `&mut self` and a
//! burst, never a lock.
//!
//! A queue is `Send` (it moves to, or is lent to, the thread that polls it)
//! and not shared: one thread polls one queue. The calls follow DPDK's
//! `rte_eth_rx_burst` / `rte_eth_tx_burst`, with ownership made explicit:
//! `rx_burst` appends received mbufs to the burst; `tx_burst` takes the
//! packets it accepted from the burst's front and leaves the rest there, so
//! the caller decides whether to retry or drop them — nothing is lost.

use std::sync::Arc;

use crate::mbuf::BurstSlice;

use super::{PortCounters, PortError, RecycleRxInfo};

/// A receive queue.
pub trait RxQueue: Send {
    /// Receives up to `burst.free()` packets, appended to `burst`; returns
    /// how many. Never blocks: 0 when nothing has arrived.
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize;

    /// Makes the queue ready to receive: fills its ring with buffers. Called
    /// by [`Port::start`](super::Port::start).
    fn start(&mut self) -> Result<(), PortError>;

    /// Stops receiving and gives back every buffer the queue holds (its ring
    /// and any packet it had not yet delivered). Called by
    /// [`Port::stop`](super::Port::stop) after the device has stopped;
    /// a driver whose queues can also stop alone (DPDK's
    /// `rte_eth_dev_rx_queue_stop`) makes it safe while the device runs.
    /// Stopping a stopped queue does nothing.
    fn stop(&mut self);

    /// Whether a Tx queue can refill this queue's ring directly
    /// ([`recycle_mbufs`](super::recycle_mbufs)). The default: no.
    fn recycle_rx_capable(&self) -> bool {
        false
    }

    /// Lends the software-ring slots due for refill, for one recycle step.
    /// Only the queue can make the view, of its own ring
    /// ([`RecycleRxInfo::new`] is `unsafe`: the queue vouches that it gives
    /// back what is committed), and the view borrows the queue: what a Tx
    /// queue commits into it is the queue's at once, whatever becomes of
    /// the view. [`PortError::Unsupported`] if the queue cannot,
    /// [`PortError::Stopped`] if it is stopped.
    fn recycle_rx_info(&mut self) -> Result<RecycleRxInfo<'_>, PortError> {
        Err(PortError::Unsupported(
            "this Rx queue's driver does not support buffer recycling".into(),
        ))
    }

    /// Rearms the descriptors whose buffers a Tx queue committed into the
    /// ring since the last call, with no mempool access; returns how many.
    fn recycle_rx_refill(&mut self) -> usize {
        0
    }

    /// One whole recycle step with `tx` feeding this queue: lend the slots
    /// due, let `tx` fill them, rearm what it moved; returns how many
    /// buffers moved. [`recycle_mbufs`](super::recycle_mbufs) calls this.
    /// The default runs [`recycle_rx_info`](Self::recycle_rx_info),
    /// [`TxQueue::recycle_tx_mbufs`] and
    /// [`recycle_rx_refill`](Self::recycle_rx_refill); a driver may fuse
    /// them (one call through the trait object instead of three).
    fn recycle_from(&mut self, tx: &mut dyn TxQueue) -> Result<usize, PortError> {
        let moved = {
            let mut info = self.recycle_rx_info()?;
            tx.recycle_tx_mbufs(&mut info)?
        };
        if moved != 0 {
            self.recycle_rx_refill();
        }
        Ok(moved)
    }
}

/// A transmit queue.
pub trait TxQueue: Send {
    /// Queues packets from the front of `burst` for sending and removes them
    /// from it; returns how many. Those it could not take (ring full) stay in
    /// `burst`, in order.
    ///
    /// ```
    /// use sluice::driver;
    /// use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
    /// use sluice::port::PortConfig;
    ///
    /// let pool = MbufPool::new(MbufPoolConfig { size: 255, cache_size: 0, ..Default::default() })?;
    /// // The receiving end has a 16-entry ring, so it takes 16 at most.
    /// let mut a = driver::open("pair:name=tx_doc", PortConfig::new(None))?;
    /// let mut b = driver::open("pair:name=tx_doc", PortConfig::new(None).nb_rxd(16))?;
    /// a.start()?;
    /// b.start()?;
    ///
    /// let mut burst: Burst = Burst::new();
    /// pool.alloc_bulk(&mut burst, 32)?;
    /// assert_eq!(a.tx_queue(0)?.tx_burst(&mut burst), 16);
    /// assert_eq!(burst.len(), 16, "the rest stay with the caller");
    ///
    /// // The caller decides: retry once there is room, or drop them.
    /// let mut received: Burst = Burst::new();
    /// assert_eq!(b.rx_queue(0)?.rx_burst(&mut received), 16);
    /// assert_eq!(a.tx_queue(0)?.tx_burst(&mut burst), 16);
    /// assert!(burst.is_empty());
    /// drop((burst, received, a, b));
    /// assert!(pool.is_full());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize;

    /// Frees buffers of packets whose transmission completed, up to `max`
    /// (DPDK's `rte_eth_tx_done_cleanup`); returns how many. The default
    /// frees nothing.
    fn tx_done_cleanup(&mut self, max: usize) -> usize {
        let _ = max;
        0
    }

    /// Makes the queue ready to send.
    fn start(&mut self) -> Result<(), PortError>;

    /// Stops sending and gives back every buffer the queue holds (sent or
    /// not). Called by [`Port::stop`](super::Port::stop) after the device has
    /// stopped; a driver whose queues can also stop alone makes it safe
    /// while the device runs. Stopping a stopped queue does nothing.
    fn stop(&mut self);

    /// Whether this queue can put its completed buffers straight into an Rx
    /// queue's ring ([`recycle_mbufs`](super::recycle_mbufs)). The
    /// default: no.
    fn recycle_tx_capable(&self) -> bool {
        false
    }

    /// Moves buffers of completed transmissions into `rx`'s slots, under
    /// the rules of [`recycle`](super::recycle); returns how many.
    /// [`PortError::Unsupported`] if the queue cannot,
    /// [`PortError::Stopped`] if it is stopped.
    fn recycle_tx_mbufs(&mut self, rx: &mut RecycleRxInfo<'_>) -> Result<usize, PortError> {
        let _ = rx;
        Err(PortError::Unsupported(
            "this Tx queue's driver does not support buffer recycling".into(),
        ))
    }
}

/// A Tx queue that frees every packet it is given and counts it as sent: the
/// transmit side of a driver whose packets go nowhere (`null`, a `pcap` port
/// without a `tx` file).
pub struct SinkTx {
    counters: Arc<PortCounters>,
    q: usize,
}

impl SinkTx {
    /// Tx queue `q` of the port whose counters are `counters`.
    pub fn new(counters: &Arc<PortCounters>, q: usize) -> SinkTx {
        SinkTx {
            counters: Arc::clone(counters),
            q,
        }
    }
}

impl TxQueue for SinkTx {
    #[inline]
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let n = burst.len();
        let bytes: u64 = burst.iter().map(|m| m.pkt_len() as u64).sum();
        burst.clear();
        self.counters.tx[self.q].record_burst(n, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn stop(&mut self) {}
}
