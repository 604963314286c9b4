//! What the driver and the device model share: the formats of the memory
//! between them. The driver writes these structures and the device reads
//! them (or the other way round); neither side reaches into the other's
//! state.
//!
//! - [`desc`]: 16-byte Rx and Tx descriptors (read and write-back formats)
//!   in 64-byte-aligned rings of atomic words.
//! - [`wqe`]: the Tx work-queue entries (control, Ethernet and data
//!   segments, multi-packet WQEs) and the completion queue entries.
//! - `regs`: the register blocks of an Rx and a Tx queue (ring, tail
//!   register, completion queue).

pub mod desc;
pub mod regs;
pub mod wqe;
