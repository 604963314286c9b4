//! Sluice: a userspace packet dataplane — poll-mode ports, burst I/O,
//! lock-free rings, mempools with per-lcore caches and packet buffers
//! (mbufs) laid out the way fast NIC drivers want them, in the family of
//! DPDK, VPP and ixy.
//!
//! It is for people who write packet-processing programs in Rust —
//! forwarders, routers, load balancers, traffic generators, test tools — and
//! want them fast without giving up ownership and type safety. A program
//! opens ports from spec strings, polls their queues in bursts from threads
//! of its own, and moves owned packet buffers between them. The `sluice`
//! command (crate `sluice-cli`: `fwd`, `l2fwd`, `l3fwd`, `dist`, `gen`,
//! `tune`, `bench`) is built on this library.
//!
//! # Layers
//!
//! From the bottom up: a ring knows nothing of packets, a mempool nothing of
//! ports, the port layer nothing of any driver, and a driver nothing of the
//! other drivers.
//!
//! | module | what it holds |
//! |---|---|
//! | [`tsc`] | the time-stamp counter: cycle counts and its measured frequency |
//! | [`counter`] | statistics counters with one writer and any number of readers |
//! | [`lcore`] | lcore ids (one thread-local load), registration and pinned thread launch |
//! | [`ring`] | bounded lock-free rings: SP/SC and MP/MC, bulk and burst, zero-copy reserve/commit |
//! | [`mempool`] | fixed-size elements in one hugepage-or-anonymous region, an MP/MC free ring, per-lcore caches |
//! | [`mbuf`] | the 128-byte packet buffer header, the owned [`mbuf::Mbuf`] handle, the [`mbuf::MbufPool`] and the [`mbuf::Burst`] |
//! | [`pagepool`] | block provider (buddy allocator), page pool (direct cache + ring), page fragments with a per-page count, mbufs over fragments |
//! | [`net`] | zero-copy header views (Ethernet, VLAN, IPv4, IPv6, UDP, TCP), checksums, the RSS hash, LPM and exact-match tables, the routes file |
//! | [`port`] | [`port::Port`], its configuration, the `RxQueue`/`TxQueue` traits, spec strings, counters and xstats, Tx→Rx buffer recycling |
//! | [`tester`] | the built-in traffic tester: stamped UDP/TCP over IPv4/IPv6 frames, per-flow loss, order, duplicate and corruption counts |
//! | [`driver`] | [`driver::open`] and the drivers, one folder each: `soft` (the emulated NIC), `pair`, `null`, `pcap`, `afpacket`, `afxdp`, `tap` |
//! | [`memif`] | the memif shared-memory interface: control messages, regions, rings, the handshake |
//! | [`distributor`] | one thread spreading packets over worker threads with flow affinity (DPDK's `rte_distributor`) |
//! | [`vhost_user`] | the vhost-user protocol: messages, descriptors over the socket, the frontend's memory mapped, the device side's state machine and the driver side's requests |
//! | [`virtio`] | split virtqueues (VIRTIO 1.2), device and driver sides, over bounds-checked guest memory; the virtio-net header |
//! | [`Error`] | every library error in one type (a variant per module error), with [`Result`] for `?` |
//! | [`signal`] | ending a run on Ctrl-C or SIGTERM without `unsafe`: a flag the handler sets, a second signal ends the process |
//!
//! # Example
//!
//! Two ports of the `pair` driver, joined by rings: a burst sent on one is
//! received on the other — the same buffers, not copies — and sent back.
//! Every buffer comes from one [`mbuf::MbufPool`] and is back in it at the
//! end.
//!
//! ```
//! use sluice::driver;
//! use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
//! use sluice::port::PortConfig;
//!
//! let pool = MbufPool::new(MbufPoolConfig { size: 1023, ..Default::default() })?;
//! // The first port opened with a pair's name creates it, the second joins it.
//! let mut a = driver::open("pair:name=demo", PortConfig::new(None))?;
//! let mut b = driver::open("pair:name=demo", PortConfig::new(None))?;
//! a.start()?;
//! b.start()?;
//!
//! // Eight 64-byte frames, each filled with its index.
//! let mut burst: Burst = Burst::new();
//! pool.alloc_bulk(&mut burst, 8)?;
//! for (i, m) in burst.iter_mut().enumerate() {
//!     m.append(64)?.fill(i as u8);
//! }
//!
//! // A Tx queue takes what it accepts from the front of the burst.
//! assert_eq!(a.tx_queue(0)?.tx_burst(&mut burst), 8);
//! assert!(burst.is_empty());
//!
//! // An Rx queue appends what it receives.
//! assert_eq!(b.rx_queue(0)?.rx_burst(&mut burst), 8);
//! for (i, m) in burst.iter().enumerate() {
//!     assert_eq!(m.data(), [i as u8; 64]);
//! }
//!
//! // And back the other way.
//! assert_eq!(b.tx_queue(0)?.tx_burst(&mut burst), 8);
//! assert_eq!(a.rx_queue(0)?.rx_burst(&mut burst), 8);
//! assert_eq!((a.stats().tx_packets, b.stats().rx_packets), (8, 8));
//! assert_eq!((b.stats().tx_packets, a.stats().rx_packets), (8, 8));
//!
//! // Dropping the burst frees what it holds; dropping a port stops it and
//! // frees what its queues hold. Nothing is lost.
//! drop(burst);
//! drop((a, b));
//! assert!(pool.is_full());
//! # Ok::<(), sluice::Error>(())
//! ```
//!
//! # Ownership and safety
//!
//! Every packet buffer has one owner at a time — an [`mbuf::Mbuf`] or a
//! [`mbuf::Burst`] of the application, a queue, a ring, or its pool — and
//! dropping an owner returns what it holds, so a buffer is never freed twice
//! and never lost while its owner lives. What an application needs is safe
//! (the few `unsafe` functions serve drivers and raw mempool access, each
//! with a `# Safety` section); the library's own `unsafe` blocks each name
//! the invariant they rely on, and no safe use — `mem::forget`, a panicking
//! callback, a thread ending early — can cause undefined behaviour: at
//! worst a forgotten handle leaks the buffers it held.
//!
//! # Where to read next
//!
//! - The module pages above, each with the algorithm it implements and an
//!   example; [`driver`] lists the drivers and their spec strings.
//! - `docs/guide/` in the repository, the user guide: opening ports
//!   (`ports.md`), forwarding (`forwarding.md`), the distributor (`dist.md`), traffic
//!   generation and the tester (`gen-and-tester.md`), tuning (`tune.md`),
//!   benchmarks (`bench.md`),
//!   kernel interfaces (`kernel-ports.md`) and hugepages (`hugepages.md`).
//! - `docs/architecture.md`: how the code is built — layers, buffer
//!   ownership, threads, and every driver's inner workings.
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
// Under loom the drivers are left out, and with them the users of some
// driver-facing helpers.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

pub mod census;
pub(crate) mod copy;
pub mod counter;
pub mod distributor;
// The drivers launch lcore threads, which loom models do not have.
#[cfg(not(loom))]
pub mod driver;
mod error;
pub(crate) mod file;
// The AF_XDP ring protocol is model-checked on its own under loom.
#[cfg(all(test, loom))]
#[path = "driver/afxdp/ring.rs"]
mod afxdp_ring;
pub mod lcore;
pub mod mbuf;
#[cfg(not(loom))]
pub mod memif;
pub mod mempool;
pub mod net;
pub mod pagepool;
pub mod port;
pub mod ring;
pub mod signal;
pub(crate) mod sync;
#[cfg(test)]
pub(crate) mod test_support;
pub mod tester;
pub mod tsc;
pub mod vhost_user;
pub mod virtio;

pub use error::{Error, Result};
