//! Virtio virtqueues, split and packed, both sides, over checked guest
//! memory.
//!
//! A virtqueue is how a virtio driver (a guest's virtio-net, or a
//! virtio-user frontend) hands buffers to a device (a vhost-user backend, a
//! device emulator) and gets them back, through memory both map. This module
//! implements the two layouts of the VIRTIO 1.2 specification, sections 2.7
//! "Split Virtqueues" and 2.8 "Packed Virtqueues":
//!
//! - [`memory`]: the guest memory the descriptors point into — a table of
//!   regions, every access bounds-checked and made by copying, never through
//!   a reference into memory the other side writes.
//! - [`split`]: the three areas (descriptor table, available ring, used
//!   ring, 2.7.5, 2.7.6, 2.7.8), [`DeviceQueue`](split::DeviceQueue) — the
//!   device side, taking descriptor chains from the available ring and
//!   returning them on the used ring — and
//!   [`DriverQueue`](split::DriverQueue) — the driver side, adding chains
//!   and reclaiming them. Indirect descriptor tables (2.7.5.3) are read by
//!   the device and written by the driver when `VIRTIO_F_INDIRECT_DESC` is
//!   negotiated; notification suppression follows 2.7.7 (used buffer
//!   notifications) and 2.7.10 (available buffer notifications), with
//!   the `used_event` / `avail_event` fields when `VIRTIO_F_EVENT_IDX` is
//!   negotiated and the ring flags otherwise.
//! - [`packed`]: one ring of descriptors that the driver marks available
//!   and the device overwrites as used, with a wrap counter per side and
//!   two event suppression structures (2.8, negotiated with
//!   `VIRTIO_F_RING_PACKED`): [`PackedDeviceQueue`](packed::PackedDeviceQueue)
//!   and [`PackedDriverQueue`](packed::PackedDriverQueue), with the same
//!   guest memory, chain checks and counters as the split queues.
//! - [`net_hdr`]: [`NetHdr`], a zero-copy view of `struct virtio_net_hdr`
//!   (5.1.6), the header in front of every frame on a virtio-net queue.
//!
//! Everything the other side writes is checked before use: a malformed
//! descriptor chain is a [`ChainError`] with its reason, returned to the
//! driver as used with length 0 and counted; a bad used entry is an error
//! of the driver queue, counted. Neither side panics, loops without bound
//! or touches memory outside the guest's regions, whatever the other writes.
//!
//! Feature bits are bit numbers, as in the specification; [`feature`] turns
//! one into its mask in the 64-bit feature word.
//!
//! # Example
//!
//! A driver queue and a device queue on one test memory pass one frame: the
//! driver offers a readable buffer, the device reads it and returns the
//! chain, the driver reclaims it.
//!
//! ```
//! use std::sync::Arc;
//! use sluice::virtio::memory::{GuestMemory, Mapping};
//! use sluice::virtio::split::{DeviceQueue, DriverQueue, QueueLayout, Segment};
//! use sluice::virtio::{VIRTIO_F_VERSION_1, feature};
//!
//! let mem = Arc::new(GuestMemory::new(vec![(0, Mapping::anonymous(1 << 16)?)])?);
//! let layout = QueueLayout::contiguous(0, 8)?;
//! let features = feature(VIRTIO_F_VERSION_1);
//! let mut driver = DriverQueue::new(Arc::clone(&mem), layout, features)?;
//! let mut device = DeviceQueue::new(Arc::clone(&mem), layout, features)?;
//!
//! // The driver puts a frame in a buffer and offers it.
//! let buffer = 0x8000;
//! mem.write_from(buffer, b"a frame")?;
//! let head = driver.add_chain(&[Segment { addr: buffer, len: 7, writable: false }])?;
//! driver.publish_avail()?;
//! assert!(driver.needs_kick()?, "no suppression asked for: the device is kicked");
//!
//! // The device takes the chain, reads the frame, returns the chain.
//! let chain = device.pop_avail()?.expect("one chain");
//! let mut frame = [0u8; 7];
//! assert_eq!(chain.read(&mem, 0, &mut frame)?, 7);
//! assert_eq!(&frame, b"a frame");
//! device.push_used(chain.head(), 0)?;
//! device.publish_used()?;
//! assert!(device.needs_notify()?);
//!
//! // The driver reclaims it: its descriptor is free again.
//! let used = driver.pop_used()?.expect("one used chain");
//! assert_eq!((used.head, used.len), (head, 0));
//! assert_eq!(driver.num_free(), 8);
//! assert!(driver.pop_used()?.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod memory;
pub mod net_hdr;
pub mod packed;
pub mod split;

pub use net_hdr::NetHdr;

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, not(loom)))]
mod in_order_tests;

#[cfg(all(test, loom))]
mod loom_tests;

#[cfg(all(test, not(loom)))]
mod packed_tests;

#[cfg(all(test, loom))]
mod packed_loom_tests;

use std::fmt;

/// Indirect descriptor tables may be used (2.7.5.3).
pub const VIRTIO_F_INDIRECT_DESC: u32 = 28;
/// The `used_event` and `avail_event` fields suppress notifications
/// (2.7.7, 2.7.10).
pub const VIRTIO_F_EVENT_IDX: u32 = 29;
/// The device is a VIRTIO 1.x device (little-endian, 12-byte net header).
pub const VIRTIO_F_VERSION_1: u32 = 32;
/// The virtqueues are packed (2.8) rather than split.
pub const VIRTIO_F_RING_PACKED: u32 = 34;
/// The device uses buffers in the order the driver made them available
/// (2.7.9, 2.8.17): a batch of used buffers may be reported by one used
/// entry for its last buffer.
pub const VIRTIO_F_IN_ORDER: u32 = 35;
/// The legacy name of [`VIRTIO_F_INDIRECT_DESC`].
pub const VIRTIO_RING_F_INDIRECT_DESC: u32 = VIRTIO_F_INDIRECT_DESC;
/// The legacy name of [`VIRTIO_F_EVENT_IDX`].
pub const VIRTIO_RING_F_EVENT_IDX: u32 = VIRTIO_F_EVENT_IDX;
/// virtio-net: a received frame may span several buffers; the header's
/// `num_buffers` says how many.
pub const VIRTIO_NET_F_MRG_RXBUF: u32 = 15;
/// virtio-net: a control virtqueue exists.
pub const VIRTIO_NET_F_CTRL_VQ: u32 = 17;
/// virtio-net: several receive/transmit queue pairs.
pub const VIRTIO_NET_F_MQ: u32 = 22;

/// The mask of feature bit number `bit` in the 64-bit feature word.
pub const fn feature(bit: u32) -> u64 {
    1 << bit
}

/// Whether feature bit number `bit` is set in `features`.
pub const fn has_feature(features: u64, bit: u32) -> bool {
    features & feature(bit) != 0
}

/// Why a descriptor chain from the driver was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainErrorReason {
    /// The head index in the available ring is not below the queue size.
    HeadOutOfRange,
    /// A `next` index is not below the queue size (or the indirect
    /// table's length).
    NextOutOfRange,
    /// The chain comes back to a descriptor it has visited.
    Loop,
    /// More descriptors than the queue size (counting those of an indirect
    /// table).
    TooLong,
    /// An indirect descriptor without `VIRTIO_F_INDIRECT_DESC` negotiated.
    IndirectNotNegotiated,
    /// An indirect table length of 0 or not a multiple of 16.
    IndirectBadLength,
    /// An indirect descriptor that also has the NEXT flag (or, in a
    /// packed ring, that follows one with it).
    IndirectWithNext,
    /// An indirect descriptor inside an indirect table.
    NestedIndirect,
    /// A device-readable descriptor after a device-writable one.
    ReadableAfterWritable,
    /// A buffer or indirect table outside guest memory.
    OutsideMemory,
}

impl ChainErrorReason {
    /// Every reason, in the order of their counters.
    pub const ALL: [ChainErrorReason; 10] = [
        ChainErrorReason::HeadOutOfRange,
        ChainErrorReason::NextOutOfRange,
        ChainErrorReason::Loop,
        ChainErrorReason::TooLong,
        ChainErrorReason::IndirectNotNegotiated,
        ChainErrorReason::IndirectBadLength,
        ChainErrorReason::IndirectWithNext,
        ChainErrorReason::NestedIndirect,
        ChainErrorReason::ReadableAfterWritable,
        ChainErrorReason::OutsideMemory,
    ];

    /// A short snake_case name, for counters.
    pub fn name(self) -> &'static str {
        match self {
            ChainErrorReason::HeadOutOfRange => "head_out_of_range",
            ChainErrorReason::NextOutOfRange => "next_out_of_range",
            ChainErrorReason::Loop => "loop",
            ChainErrorReason::TooLong => "too_long",
            ChainErrorReason::IndirectNotNegotiated => "indirect_not_negotiated",
            ChainErrorReason::IndirectBadLength => "indirect_bad_length",
            ChainErrorReason::IndirectWithNext => "indirect_with_next",
            ChainErrorReason::NestedIndirect => "nested_indirect",
            ChainErrorReason::ReadableAfterWritable => "readable_after_writable",
            ChainErrorReason::OutsideMemory => "outside_memory",
        }
    }

    /// Its position in [`ChainErrorReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A descriptor chain the device refused: its head and why. The chain has
/// been returned to the driver as used with length 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainError {
    /// The head index, as read from the available ring (split), or the
    /// buffer id of the chain's last descriptor (packed).
    pub head: u16,
    /// What is wrong with it.
    pub reason: ChainErrorReason,
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "virtqueue: descriptor chain at head {} refused: {}",
            self.head,
            self.reason.name().replace('_', " ")
        )
    }
}

impl std::error::Error for ChainError {}

/// An error of guest memory or of a virtqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VirtioError {
    /// `gpa..gpa + len` is not inside one region of guest memory.
    OutsideMemory {
        /// Start of the range.
        gpa: u64,
        /// Its length.
        len: u64,
    },
    /// An address that must be aligned is not.
    Misaligned {
        /// The address.
        gpa: u64,
        /// The alignment it needs.
        align: u64,
    },
    /// A guest memory region was refused.
    BadRegion {
        /// Its guest physical address.
        gpa: u64,
        /// Why.
        reason: &'static str,
    },
    /// A queue size of 0, above 32768 or not a power of two.
    BadQueueSize(u32),
    /// The driver has fewer free descriptors than the chain needs.
    NoFreeDescriptors {
        /// Descriptors the chain needs.
        need: usize,
        /// Descriptors free.
        free: usize,
    },
    /// A chain of no buffers.
    EmptyChain,
    /// A chain offered by the driver with a readable buffer after a
    /// writable one (2.7.4.2 puts writable buffers last).
    ReadableAfterWritable,
    /// An indirect chain asked for without `VIRTIO_F_INDIRECT_DESC`.
    IndirectNotNegotiated,
    /// The available index moved further than the queue size past the
    /// device's position: the driver is broken; the device takes nothing.
    AvailIndexJump {
        /// The device's next position.
        last: u16,
        /// The index read.
        idx: u16,
    },
    /// The used index moved past more entries than chains in flight: the
    /// device is broken; the driver takes nothing.
    UsedIndexJump {
        /// The driver's next position.
        last: u16,
        /// The index read.
        idx: u16,
    },
    /// A used entry names a descriptor that is not the head of a chain in
    /// flight; the entry is skipped.
    BadUsedId {
        /// The id read.
        id: u32,
    },
    /// A used entry's length is more than the chain's writable bytes; the
    /// chain is reclaimed.
    BadUsedLen {
        /// The chain's head.
        head: u16,
        /// The length read.
        len: u32,
        /// The chain's writable bytes.
        writable: u64,
    },
    /// The device returned a chain with none popped and not yet returned.
    NothingInFlight,
    /// A packed queue's device returned a chain of 0 descriptors, or of
    /// more than it has taken and not yet returned.
    BadUsedDescriptors {
        /// Descriptors the chain was returned with.
        descs: u16,
        /// Descriptors taken and not yet returned.
        in_flight: u32,
    },
    /// A packed queue position whose index is not below the queue size.
    BadPosition {
        /// The index.
        index: u16,
        /// The queue size.
        size: u16,
    },
    /// A descriptor chain was refused (and returned as used).
    Chain(ChainError),
}

impl fmt::Display for VirtioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VirtioError::OutsideMemory { gpa, len } => write!(
                f,
                "guest memory: {len} bytes at {gpa:#x} are not inside one region"
            ),
            VirtioError::Misaligned { gpa, align } => {
                write!(f, "guest memory: {gpa:#x} is not {align}-aligned")
            }
            VirtioError::BadRegion { gpa, reason } => {
                write!(f, "guest memory: region at {gpa:#x} refused: {reason}")
            }
            VirtioError::BadQueueSize(size) => write!(
                f,
                "virtqueue: size {size} is not a power of two from 1 to 32768"
            ),
            VirtioError::NoFreeDescriptors { need, free } => write!(
                f,
                "virtqueue: the chain needs {need} descriptors, {free} are free"
            ),
            VirtioError::EmptyChain => write!(f, "virtqueue: a chain of no buffers"),
            VirtioError::ReadableAfterWritable => write!(
                f,
                "virtqueue: a device-readable buffer after a device-writable one"
            ),
            VirtioError::IndirectNotNegotiated => write!(
                f,
                "virtqueue: indirect descriptors without VIRTIO_F_INDIRECT_DESC"
            ),
            VirtioError::AvailIndexJump { last, idx } => write!(
                f,
                "virtqueue: available index {idx} is more than the queue size past {last}"
            ),
            VirtioError::UsedIndexJump { last, idx } => write!(
                f,
                "virtqueue: used index {idx} is past more entries after {last} than chains in flight"
            ),
            VirtioError::BadUsedId { id } => write!(
                f,
                "virtqueue: used entry id {id} is not the head of a chain in flight"
            ),
            VirtioError::BadUsedLen {
                head,
                len,
                writable,
            } => write!(
                f,
                "virtqueue: used length {len} for head {head} exceeds its {writable} writable bytes"
            ),
            VirtioError::NothingInFlight => {
                write!(f, "virtqueue: a used entry with no chain in flight")
            }
            VirtioError::BadUsedDescriptors { descs, in_flight } => write!(
                f,
                "virtqueue: a chain returned as {descs} descriptors, {in_flight} are in flight"
            ),
            VirtioError::BadPosition { index, size } => write!(
                f,
                "virtqueue: ring position {index} is not below the queue size {size}"
            ),
            VirtioError::Chain(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for VirtioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VirtioError::Chain(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ChainError> for VirtioError {
    fn from(e: ChainError) -> VirtioError {
        VirtioError::Chain(e)
    }
}
