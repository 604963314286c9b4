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
//! The driver reaches the device through descriptor memory, doorbells
//! (tail registers) and completions ([`hw`](super::hw)), plus the two
//! emulation hooks of `device::QueueEngine`: the inline device step and the
//! queue reset under the engine lock.

pub mod fast_free;
pub mod rx;
pub mod rx_frags;
pub mod tx;
