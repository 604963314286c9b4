//! Watching a running Sluice dataplane from outside it.
//!
//! - [`Registry`]: the ports and pools an application shows, held by
//!   shared handles ([`PortCounters`](sluice::port::PortCounters) behind an
//!   `Arc`, [`MbufPool`](sluice::mbuf::MbufPool) clones). The forwarding
//!   lcores only bump their single-writer counters; whoever reads the
//!   registry reads those counters, and no lock it takes is one an lcore
//!   needs.

pub mod capture;
pub mod registry;

pub use registry::{PoolEntry, PortEntry, Registry};
