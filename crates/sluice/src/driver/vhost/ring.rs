//! The device side of a started vring, split or packed (as
//! `VIRTIO_F_RING_PACKED` was negotiated), behind the one interface the
//! queues use.
//!
//! The queues work with [`Chain`]s and return each by its head. A packed
//! ring returns a chain by buffer id and the count of ring descriptors it
//! took; the queues return chains in the order they take them, so the
//! counts wait in a FIFO from [`DeviceRing::pop_avail_into`] to
//! [`DeviceRing::push_used`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::virtio::VirtioError;
use crate::virtio::memory::GuestMemory;
use crate::virtio::packed::{PackedChain, PackedDeviceQueue, PackedLayout, RingPosition, is_avail};
use crate::virtio::split::{Chain, DeviceQueue, QueueLayout};

/// Where a ring's parts are, by its layout.
#[derive(Debug, Clone, Copy)]
pub(super) enum RingLayout {
    Split(QueueLayout),
    Packed(PackedLayout),
}

/// A vring's device side.
#[derive(Debug)]
pub(super) enum DeviceRing {
    Split(DeviceQueue),
    Packed {
        queue: PackedDeviceQueue,
        /// The chain taken last, before it is copied out.
        taken: PackedChain,
        /// Ring descriptors of each chain taken and not yet returned, in
        /// the order taken.
        descs: VecDeque<u16>,
    },
}

impl DeviceRing {
    /// The device side of a ring at `layout` resumed at `base` (the
    /// SET_VRING_BASE number: an avail index, or a packed ring's position
    /// as [`RingPosition::to_off_wrap`]).
    pub(super) fn new(
        memory: Arc<GuestMemory>,
        layout: RingLayout,
        features: u64,
        base: u16,
    ) -> Result<DeviceRing, VirtioError> {
        Ok(match layout {
            RingLayout::Split(layout) => {
                DeviceRing::Split(DeviceQueue::with_base(memory, layout, features, base)?)
            }
            RingLayout::Packed(layout) => DeviceRing::Packed {
                queue: PackedDeviceQueue::with_position(
                    memory,
                    layout,
                    features,
                    RingPosition::from_off_wrap(base),
                )?,
                taken: PackedChain::new(),
                descs: VecDeque::with_capacity(usize::from(layout.size())),
            },
        })
    }

    /// The guest memory.
    pub(super) fn memory(&self) -> &Arc<GuestMemory> {
        match self {
            DeviceRing::Split(queue) => queue.memory(),
            DeviceRing::Packed { queue, .. } => queue.memory(),
        }
    }

    /// The number GET_VRING_BASE returns: the next avail index, or the
    /// packed ring's next position.
    pub(super) fn last_avail_idx(&self) -> u16 {
        match self {
            DeviceRing::Split(queue) => queue.last_avail_idx(),
            DeviceRing::Packed { queue, .. } => queue.next_avail().to_off_wrap(),
        }
    }

    /// Takes the next chain into `chain`, as [`DeviceQueue::pop_avail_into`]
    /// (a packed chain's head is its buffer id).
    #[inline]
    pub(super) fn pop_avail_into(&mut self, chain: &mut Chain) -> Result<bool, VirtioError> {
        match self {
            DeviceRing::Split(queue) => queue.pop_avail_into(chain),
            DeviceRing::Packed {
                queue,
                taken,
                descs,
            } => {
                if !queue.pop_avail_into(taken)? {
                    return Ok(false);
                }
                chain.clone_from(taken);
                descs.push_back(taken.descs());
                Ok(true)
            }
        }
    }

    /// Gives back the last `n` chains taken, none returned or refused since
    /// ([`DeviceQueue::untake`]): the next takes find them again.
    pub(super) fn untake(&mut self, n: usize) -> Result<(), VirtioError> {
        let n16 = u16::try_from(n).map_err(|_| VirtioError::NothingInFlight)?;
        match self {
            DeviceRing::Split(queue) => queue.untake(n16),
            DeviceRing::Packed { queue, descs, .. } => {
                if n > descs.len() {
                    return Err(VirtioError::NothingInFlight);
                }
                let count: u32 = descs.iter().rev().take(n).map(|&d| u32::from(d)).sum();
                queue.untake(n16, count)?;
                descs.truncate(descs.len() - n);
                Ok(())
            }
        }
    }

    /// How many chains a burst of `want` may take: for a split ring, at
    /// most those the guest has made available (one load of its index,
    /// [`DeviceQueue::ready`]), whose head descriptors and used entries are
    /// prefetched; a packed ring is not counted ahead: `want` when the
    /// descriptor at its position is available, else 0 (a hint, as the
    /// chains are taken one by one). `device_writes`: the chains are the
    /// guest's receive buffers, each returned with its own used entry;
    /// otherwise the device only reads them, and with `VIRTIO_F_IN_ORDER`
    /// they go back as one entry, so only its line is prefetched.
    #[inline]
    pub(super) fn ready(&mut self, want: usize, device_writes: bool) -> Result<usize, VirtioError> {
        match self {
            DeviceRing::Split(queue) => {
                let n = usize::from(queue.ready()?).min(want);
                let used = if device_writes || !queue.in_order() {
                    n
                } else {
                    n.min(1)
                };
                // `n` is at most the queue size, a u16.
                queue.prefetch_descs(n as u16);
                queue.prefetch_used(used as u16);
                Ok(n)
            }
            DeviceRing::Packed { queue, .. } => {
                let at = queue.next_avail();
                // Relaxed: a hint; taking the chain loads the flags again
                // with Acquire.
                let flags = queue
                    .memory()
                    .load_u16(queue.layout().desc_flags(at.index), Ordering::Relaxed)?;
                Ok(if is_avail(flags, at.wrap) { want } else { 0 })
            }
        }
    }

    /// Returns the chain at `head` (the oldest taken, for a packed ring)
    /// with `len` bytes written.
    #[inline]
    pub(super) fn push_used(&mut self, head: u16, len: u32) -> Result<(), VirtioError> {
        match self {
            DeviceRing::Split(queue) => queue.push_used(head, len),
            DeviceRing::Packed { queue, descs, .. } => {
                let count = descs.pop_front().ok_or(VirtioError::NothingInFlight)?;
                queue.push_used(head, count, len)
            }
        }
    }

    /// Returns `chains`, the oldest taken, in order, as chains the device
    /// only read: for a split ring [`DeviceQueue::push_used_read`] (one used
    /// entry for them all with `VIRTIO_F_IN_ORDER`), for a packed ring a
    /// used descriptor each.
    #[inline]
    pub(super) fn push_used_read(&mut self, chains: &[Chain]) -> Result<(), VirtioError> {
        match self {
            DeviceRing::Split(queue) => queue.push_used_read(chains),
            DeviceRing::Packed { .. } => {
                for chain in chains {
                    self.push_used(chain.head(), 0)?;
                }
                Ok(())
            }
        }
    }

    /// Publishes the chains returned since the last call.
    #[inline]
    pub(super) fn publish_used(&mut self) -> Result<(), VirtioError> {
        match self {
            DeviceRing::Split(queue) => queue.publish_used(),
            DeviceRing::Packed { queue, .. } => queue.publish_used(),
        }
    }

    /// Whether the guest wants a used buffer notification.
    #[inline]
    pub(super) fn needs_notify(&mut self) -> Result<bool, VirtioError> {
        match self {
            DeviceRing::Split(queue) => queue.needs_notify(),
            DeviceRing::Packed { queue, .. } => queue.needs_notify(),
        }
    }

    /// Asks the guest not to kick (the queues poll).
    pub(super) fn disable_notify(&mut self) -> Result<(), VirtioError> {
        match self {
            DeviceRing::Split(queue) => queue.disable_notify(),
            DeviceRing::Packed { queue, .. } => queue.disable_notify(),
        }
    }
}
