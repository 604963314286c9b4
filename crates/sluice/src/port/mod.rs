//! Ports: how packets get in and out.
//!
//! A [`Port`] is a configured device ([`PortConfig`]: queue counts,
//! descriptors per queue, the Rx mempool, MTU, MAC address, offloads) with its
//! Rx and Tx queues. The queues are the hot path: [`RxQueue::rx_burst`] and
//! [`TxQueue::tx_burst`] take `&mut self` and a burst. The device side is a
//! [`PortDriver`], one per driver ([`crate::driver`]); ports are named by
//! spec strings ([`spec`]) and opened with [`crate::driver::open`].
//!
//! Counters ([`stats`]) are per queue, written by the polling thread with
//! plain adds, read through an `Arc<`[`PortCounters`]`>` by anyone; driver
//! counters are named ([`Xstats`]).
//!
//! ```
//! use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
//! use sluice::port::PortConfig;
//!
//! let pool = MbufPool::new(MbufPoolConfig { size: 4095, ..Default::default() }).unwrap();
//! let mut port = sluice::driver::open("null:size=64", PortConfig::new(Some(pool.clone()))).unwrap();
//! port.start().unwrap();
//! let mut burst: Burst = Burst::new();
//! let n = port.rx_queue(0).unwrap().rx_burst(&mut burst);
//! assert_eq!(n, 32);
//! port.tx_queue(0).unwrap().tx_burst(&mut burst);
//! assert!(burst.is_empty());
//! assert_eq!(port.stats().tx_packets, 32);
//! port.stop();
//! assert!(pool.is_full());
//! ```

mod config;
mod device;
mod error;
mod queue;
pub mod recycle;
pub mod spec;
pub mod stats;
mod xstats;

#[cfg(all(test, not(loom)))]
mod recycle_tests;
#[cfg(all(test, not(loom)))]
mod tests;

pub use config::{
    DEFAULT_MTU, DEFAULT_NB_RXD, DEFAULT_NB_TXD, DeviceInfo, Offloads, PortConfig, RxQueueConfig,
    TxQueueConfig,
};
pub use device::{Port, PortDriver, Queues};
pub use error::PortError;
pub use queue::{RxQueue, SinkTx, TxQueue};
pub use recycle::{RecycleRxInfo, recycle_mbufs};
pub use spec::{PortSpec, SpecArgs, SpecError};
pub use stats::{
    BurstHistogram, FRAME_OVERHEAD, MIN_FRAME, PortCounters, PortStats, QueueCounts, RxFrameCheck,
    RxQueueStats, TxQueueStats,
};
pub use xstats::Xstats;
