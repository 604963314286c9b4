//! How a started vring passes from the control thread to the queue that
//! polls it, and back.
//!
//! Each vring has a [`VringSlot`]: a cell holding the ring's data-path
//! state ([`ActiveRing`]) and one atomic byte saying who may touch it.
//! The polling queue claims the slot once per burst with a single
//! compare-exchange (`0 -> BUSY`) and releases it at the burst's end; if
//! the claim fails it moves nothing that burst and never waits. The
//! control thread raises `CONTROL` (the queue's claims fail from then on)
//! and waits, bounded, for `BUSY` to clear: it then owns the cell and
//! installs, updates or takes the ring, and lowers `CONTROL`.
//!
//! GET_VRING_BASE takes the ring through this handshake, so the reply's
//! avail index is the one after the last burst. If the wait times out (a
//! polling thread stalled inside a burst), `CONTROL` stays raised, so the
//! queue stops at that burst's end, and the index the queue published
//! after its previous burst is returned. Memory safety does not depend on
//! the wait: an [`ActiveRing`] holds a share of the backend's mapping of
//! the frontend's memory ([`SharedMemory`]), so the pages stay mapped for
//! as long as the ring lives; a backend that replaces or drops its table
//! never pulls memory from under a burst. Rings are dropped by the control
//! thread only, so the unmapping never falls on a polling lcore.

use std::cell::UnsafeCell;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use crate::vhost_user;
use crate::virtio::memory::{GuestMemory, Mapping};
use crate::virtio::{VIRTIO_NET_F_MRG_RXBUF, has_feature, net_hdr};

use super::ring::{DeviceRing, RingLayout};

/// The polling queue holds the slot (inside a burst).
const BUSY: u8 = 1;
/// The control thread holds the slot, or waits for it.
const CONTROL: u8 = 2;

/// The frontend's memory table as the data path reads it.
///
/// It holds a share of the backend's own mapping of the table (an `Arc`
/// of [`vhost_user::GuestMemory`]) and, over the same pages, the table by
/// guest physical address that the virtqueues use. The pages stay mapped
/// until the last ring using them is dropped, whatever the backend does
/// with its table meanwhile; nothing is mapped a second time, so any
/// memory the frontend can pass (memfd, hugetlbfs, shared memory) works.
pub(super) struct SharedMemory {
    /// The table as the virtqueues read it: guest physical addresses over
    /// the backend's mappings. Dropped in `Drop`, before `table`.
    memory: ManuallyDrop<Arc<GuestMemory>>,
    /// The backend's mappings, unmapped when the last share of them goes.
    table: ManuallyDrop<Arc<vhost_user::GuestMemory>>,
}

impl SharedMemory {
    /// The data path's view of `table`, sharing its mappings.
    pub(super) fn new(table: &Arc<vhost_user::GuestMemory>) -> io::Result<Arc<SharedMemory>> {
        let mut regions = Vec::with_capacity(table.regions().len());
        for region in table.regions() {
            let size = usize::try_from(region.size()).map_err(io::Error::other)?;
            // The returned value keeps `region` alive through `table` until
            // after the `GuestMemory` built here is gone (see `Drop`); in
            // this process the table is accessed only through raw pointers
            // and atomic copies.
            // SAFETY: `host_addr .. + size` is mapped read-write by `region`
            // (checked when it was mapped) for as long as this mapping lives.
            let mapping = unsafe { Mapping::from_raw(region.host_addr().as_ptr(), size) };
            regions.push((region.guest_phys_addr(), mapping));
        }
        let memory = GuestMemory::new(regions).map_err(io::Error::other)?;
        Ok(Arc::new(SharedMemory {
            memory: ManuallyDrop::new(Arc::new(memory)),
            table: ManuallyDrop::new(Arc::clone(table)),
        }))
    }

    /// The table by guest physical address.
    pub(super) fn memory(&self) -> &Arc<GuestMemory> {
        &self.memory
    }

    /// The backend's table this view shares.
    pub(super) fn table(&self) -> &Arc<vhost_user::GuestMemory> {
        &self.table
    }

    /// Whether this is the data path's view of `table`.
    pub(super) fn is_view_of(&self, table: &Arc<vhost_user::GuestMemory>) -> bool {
        Arc::ptr_eq(&self.table, table)
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: each taken once, here, and never used again.
        let (memory, table) = unsafe {
            (
                ManuallyDrop::take(&mut self.memory),
                ManuallyDrop::take(&mut self.table),
            )
        };
        if Arc::into_inner(memory).is_none() {
            // A clone of the `GuestMemory` outlives this value (an
            // `ActiveRing` drops its queue first, so none should): the
            // backend's mappings are kept rather than pulled from under it.
            std::mem::forget(table);
        }
    }
}

/// A started vring as its queue processes it.
pub(super) struct ActiveRing {
    /// The device side of the virtqueue (holds the memory's `Arc`).
    pub(super) queue: DeviceRing,
    /// Whether the frontend has the ring enabled.
    pub(super) enabled: bool,
    /// Bytes of virtio-net header in front of every frame.
    pub(super) hdr_len: usize,
    /// A received frame may span several of the guest's buffers.
    pub(super) mrg_rxbuf: bool,
    /// The call eventfd (a duplicate: the backend closes its own).
    pub(super) call: Option<OwnedFd>,
    /// Keeps the frontend's memory mapped; dropped after `queue`.
    pub(super) _memory: Arc<SharedMemory>,
}

impl ActiveRing {
    /// The data-path state of ring `ring`, over `memory`, for the
    /// negotiated `features`.
    pub(super) fn new(
        memory: Arc<SharedMemory>,
        layout: RingLayout,
        features: u64,
        base: u16,
    ) -> Result<ActiveRing, crate::virtio::VirtioError> {
        let queue = DeviceRing::new(Arc::clone(memory.memory()), layout, features, base)?;
        Ok(ActiveRing {
            queue,
            enabled: false,
            hdr_len: net_hdr::header_len(features),
            mrg_rxbuf: has_feature(features, VIRTIO_NET_F_MRG_RXBUF),
            call: None,
            _memory: memory,
        })
    }

    /// Signals the call eventfd, if the frontend gave one.
    pub(super) fn notify(&self) {
        if let Some(call) = &self.call {
            let one = 1u64;
            // SAFETY: a live eventfd and an 8-byte buffer. A full counter
            // (EAGAIN) still leaves the frontend signalled.
            unsafe { libc::write(call.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }
}

/// One vring's handoff between the control thread and its queue (module
/// docs).
pub(super) struct VringSlot {
    state: AtomicU8,
    ring: UnsafeCell<Option<ActiveRing>>,
    /// The avail index after the queue's last burst.
    last_avail: AtomicU16,
}

// SAFETY: `ring` is touched only by the holder of `state` — the queue
// between a successful `0 -> BUSY` exchange and clearing BUSY, the control
// thread between seeing BUSY clear with CONTROL raised and lowering it —
// so never by two threads at once; the Acquire/Release pairs on `state`
// order those accesses. `ActiveRing` is `Send`.
unsafe impl Sync for VringSlot {}

impl VringSlot {
    pub(super) fn new() -> VringSlot {
        VringSlot {
            state: AtomicU8::new(0),
            ring: UnsafeCell::new(None),
            last_avail: AtomicU16::new(0),
        }
    }

    /// The queue's claim for one burst; `None` while the control thread
    /// holds the slot.
    #[inline]
    pub(super) fn enter(&self) -> Option<BurstGuard<'_>> {
        self.state
            .compare_exchange(0, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| BurstGuard { slot: self })
    }

    /// The control thread's claim: waits up to `timeout` for the queue's
    /// burst to end. On timeout the slot stays closed to the queue (see
    /// the module docs) and `None` is returned.
    pub(super) fn control(&self, timeout: Duration) -> Option<ControlGuard<'_>> {
        self.state.fetch_or(CONTROL, Ordering::Acquire);
        let deadline = Instant::now() + timeout;
        loop {
            if self.state.load(Ordering::Acquire) & BUSY == 0 {
                return Some(ControlGuard { slot: self });
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// The avail index the queue published after its last burst (or the
    /// base its ring was installed with).
    pub(super) fn last_avail(&self) -> u16 {
        self.last_avail.load(Ordering::Acquire)
    }
}

/// The queue's hold on a slot for one burst.
pub(super) struct BurstGuard<'a> {
    slot: &'a VringSlot,
}

impl BurstGuard<'_> {
    /// The ring, if one is installed.
    #[inline]
    pub(super) fn ring(&mut self) -> Option<&mut ActiveRing> {
        // SAFETY: this guard holds BUSY (slot docs): no other access to the
        // cell until it is dropped, and the borrow cannot outlive it.
        unsafe { (*self.slot.ring.get()).as_mut() }
    }

    /// Publishes the ring's avail index for GET_VRING_BASE.
    #[inline]
    pub(super) fn publish_avail(&self, idx: u16) {
        self.slot.last_avail.store(idx, Ordering::Release);
    }
}

impl Drop for BurstGuard<'_> {
    fn drop(&mut self) {
        self.slot.state.fetch_and(!BUSY, Ordering::Release);
    }
}

/// The control thread's hold on a slot.
pub(super) struct ControlGuard<'a> {
    slot: &'a VringSlot,
}

impl ControlGuard<'_> {
    /// The cell.
    pub(super) fn ring(&mut self) -> &mut Option<ActiveRing> {
        // SAFETY: this guard holds CONTROL with BUSY seen clear (slot
        // docs): no other access to the cell until it is dropped.
        unsafe { &mut *self.slot.ring.get() }
    }

    /// Installs `ring` (dropping any other) and publishes its base.
    pub(super) fn install(&mut self, ring: ActiveRing) {
        self.slot
            .last_avail
            .store(ring.queue.last_avail_idx(), Ordering::Release);
        *self.ring() = Some(ring);
    }
}

impl Drop for ControlGuard<'_> {
    fn drop(&mut self) {
        self.slot.state.fetch_and(!CONTROL, Ordering::Release);
    }
}
