//! Watching a running Sluice dataplane from outside it.
//!
//! - [`Registry`]: the ports and pools an application shows, held by
//!   shared handles ([`PortCounters`](sluice::port::PortCounters) behind an
//!   `Arc`, [`MbufPool`](sluice::mbuf::MbufPool) clones). The forwarding
//!   lcores only bump their single-writer counters; whoever reads the
//!   registry reads those counters, and no lock it takes is one an lcore
//!   needs.
//! - [`Telemetry`]: a server of DPDK's telemetry v2 protocol on a Unix
//!   `SOCK_SEQPACKET` socket at `<runtime dir>/dpdk/<file prefix>/dpdk_telemetry.v2`
//!   ([`runtime`]), answering [`Commands`]; DPDK's `dpdk-telemetry.py`
//!   and other DPDK telemetry clients talk to it unchanged.
//! - [`Client`]: the other end, for `sluice stats` and tests.

pub mod client;
mod error;
pub mod ethdev;
pub mod mempool;
pub mod protocol;
pub mod registry;
pub mod runtime;
pub mod server;
mod sys;

pub use client::Client;
pub use error::TelemetryError;
pub use protocol::Reply;
pub use registry::{PoolEntry, PortEntry, Registry};
pub use runtime::{Instance, instances, runtime_dir, socket_path};
pub use server::{Commands, Telemetry};
