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
//!
//! ```
//! use std::sync::Arc;
//!
//! use sluice::mbuf::{MbufPool, MbufPoolConfig};
//! use sluice::port::PortConfig;
//! use sluice_telemetry::{Client, Commands, Registry, Telemetry};
//!
//! let pool = MbufPool::new(MbufPoolConfig { size: 255, cache_size: 0, ..Default::default() })?;
//! let port = sluice::driver::open("null:size=64", PortConfig::new(Some(pool.clone())))?;
//! let registry = Arc::new(Registry::new());
//! registry.add_port(&port);
//! registry.add_pool("rx", &pool);
//!
//! // `Telemetry::serve("myapp", ..)` serves the file prefix `myapp` in the
//! // runtime directory; a path of one's own suits an example.
//! let dir = std::env::temp_dir().join(format!("sluice-doc-{}", std::process::id()));
//! let path = sluice_telemetry::runtime::socket_path_in(&dir, "myapp");
//! let server = Telemetry::serve_at(&path, Commands::with_registry(Arc::clone(&registry)))?;
//!
//! let mut client = Client::connect_path(server.path())?;
//! assert_eq!(client.greeting()["max_output_len"], 16384);
//! assert_eq!(client.command("/ethdev/list")?, serde_json::json!([0]));
//! let stats = client.command("/ethdev/stats,0")?;
//! assert_eq!(stats["ipackets"], 0);
//! assert_eq!(client.command("/mempool/info,rx")?["avail_count"], 255);
//!
//! drop(server); // stops serving and removes the socket
//! assert!(!path.exists());
//! # let _ = std::fs::remove_dir_all(&dir);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

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

pub mod prometheus;
