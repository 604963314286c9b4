//! The driver side of the emulated NIC: the code a real poll-mode driver
//! runs on the application's threads.
//!
//! - `rx`: the Rx queue ([`SoftRx`](rx::SoftRx)) — descriptor ring,
//!   software ring of armed mbufs, refill in batches, one doorbell per
//!   batch;
//! - `tx`: the Tx queue ([`SoftTx`](tx::SoftTx)) — WQE ring, software ring
//!   of in-flight mbufs, one doorbell per burst, buffers freed by
//!   completion in batches;
//! - `fast_free`: the fast-free offload with its contract checked;
//! - `rx_frags`: Rx buffers cut from page-pool fragments (`rxbuf=frag`).
//!
//! The driver reaches the device through the shared formats of
//! [`hw`](super::hw) alone — descriptor and WQE memory, the tail registers
//! (doorbells) and the completion queue — plus the two hooks of the
//! emulation in [`QueueEngine`](super::device::QueueEngine): the inline
//! device step and the queue reset under the engine lock.

pub mod fast_free;
pub mod rx;
pub mod rx_frags;
pub mod tx;
pub mod vector;
