//! Sluice: a userspace packet dataplane.
//!
//! The layers, lowest first — each imports only those below it:
//!
//! | module | what it holds |
//! |---|---|
//! | [`ring`] | bounded lock-free rings: SP/SC and MP/MC, bulk and burst, zero-copy reserve/commit |
//! | [`mempool`] | fixed-size elements in one hugepage-or-anonymous region, an MP/MC free ring, per-lcore caches |
//! | [`mbuf`] | the 128-byte packet buffer header, the owned [`mbuf::Mbuf`] handle and the [`mbuf::Burst`] |
//! | [`net`] | zero-copy header views (Ethernet, VLAN, IPv4, IPv6, UDP, TCP) and checksums |
//! | [`pagepool`] | block provider (buddy allocator), page pool (direct cache + ring), page fragments with a per-page count, page_frag_cache, mbufs over fragments |
//! | [`port`] | `Port`, its configuration, the `RxQueue`/`TxQueue` traits, spec strings, counters and xstats |
//! | [`tester`] | the built-in traffic tester: stamped UDP/TCP over IPv4/IPv6 frames, per-flow loss, order, duplicate and corruption counts |
//! | [`driver`] | `open(spec, config)` and the drivers, one folder each: `soft` (the emulated NIC), `pair`, `null`, `pcap` |
//! | [`lcore`] | lcore ids (one thread-local load), registration and pinned thread launch |
//! | [`counter`] | statistics counters with one writer and any number of readers |
//! | [`tsc`] | the time-stamp counter: cycle counts and its measured frequency |
//!
//! The architecture, buffer ownership and threads are described in
//! `docs/architecture.md`.
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
// Under loom the drivers are left out, and with them the users of some
// driver-facing helpers.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

pub(crate) mod copy;
pub mod counter;
pub mod distributor;
// The drivers launch lcore threads, which loom models do not have.
#[cfg(not(loom))]
pub mod driver;
pub(crate) mod file;
// The AF_XDP ring protocol is model-checked on its own under loom.
#[cfg(all(test, loom))]
#[path = "driver/afxdp/ring.rs"]
mod afxdp_ring;
pub mod lcore;
pub mod mbuf;
pub mod mempool;
pub mod net;
pub mod pagepool;
pub mod port;
pub mod ring;
pub(crate) mod sync;
#[cfg(test)]
pub(crate) mod test_support;
pub mod tester;
pub mod tsc;
