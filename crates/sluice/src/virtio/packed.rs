//! The packed virtqueue (VIRTIO 1.2, 2.8): layout, device side, driver side.
//!
//! # Layout
//!
//! A packed virtqueue of `N` entries (any size from 1 to 32768; it need not
//! be a power of two) is one ring of descriptors and two event suppression
//! structures, all little-endian ([`PackedLayout`]):
//!
//! | area | alignment | bytes | contents |
//! |---|---|---|---|
//! | descriptor ring | 16 | `16 N` | `N` × [`PackedDescriptor`]: `addr` u64, `len` u32, `id` u16, `flags` u16 |
//! | driver event suppression (driver area) | 4 | 4 | `desc` u16 (offset in bits 0–14, wrap counter in bit 15), `flags` u16 |
//! | device event suppression (device area) | 4 | 4 | the same |
//!
//! The same ring carries buffers both ways. The driver writes descriptors
//! at its position and marks each available; the device reads them at its
//! own position, and writes a *used* descriptor back in place — the chain's
//! buffer id, the bytes written, and the used marking — at its used
//! position. Positions go round the ring; each side keeps a *wrap counter*
//! per position, starting at 1 and flipping each time the position passes
//! the ring's end ([`RingPosition`]).
//!
//! The marking is two flag bits, [`VIRTQ_DESC_F_AVAIL`] (7) and
//! [`VIRTQ_DESC_F_USED`] (15):
//!
//! - available on lap `w`: AVAIL = `w`, USED = `!w` (written by the driver);
//! - used on lap `w`: AVAIL = USED = `w` (written by the device).
//!
//! So a descriptor left over from the previous lap never looks new: both
//! sides compare the bits with the wrap counter of the position they read.
//!
//! A chain is consecutive descriptors linked by [`VIRTQ_DESC_F_NEXT`] (2.8.6);
//! its buffer id is in its last descriptor (the driver here writes it in
//! every one). The device returns a chain as one used descriptor and moves
//! its used position past as many descriptors as the chain had; the driver
//! knows each buffer id's count and skips the same. A used descriptor has
//! [`VIRTQ_DESC_F_WRITE`] when the device wrote into the buffers, and its
//! `len` counts only then (2.8.4). A chain may also be one descriptor with
//! [`VIRTQ_DESC_F_INDIRECT`] (2.8.7), never linked by NEXT, pointing at a
//! table of descriptors of which only `addr`, `len` and the
//! [`VIRTQ_DESC_F_WRITE`] bit count (the rest is ignored, as the
//! specification says).
//!
//! # The algorithm, and its memory ordering
//!
//! The flags word of a descriptor is its publication: it is written last,
//! with **Release**, and read first, with **Acquire**; everything else of
//! the descriptor, and the buffers, is copied with plain (relaxed) accesses
//! ordered by that pair.
//!
//! - Driver to device. [`PackedDriverQueue::add_chain`] writes the chain's
//!   descriptors (`addr`, `len`, `id`, then their flags) and the head's
//!   flags last. In a batch the first chain's head flags are held back
//!   until [`PackedDriverQueue::publish_avail`] (2.8.21.1): the device
//!   stops at that head, so it sees the whole batch at once, and every
//!   later head is stored with Release as it is added.
//!   [`PackedDeviceQueue::pop_avail_into`] loads the flags at its position
//!   with **Acquire** — pairing with the Release store of that head — and
//!   only then reads the chain's other descriptors (their flags relaxed)
//!   and its buffers.
//! - Device to driver. [`PackedDeviceQueue::push_used`] writes `len` and
//!   `id` of the used descriptor, after the device has finished with the
//!   chain's buffers; the used flags are stored with **Release**, the
//!   first of a batch at [`PackedDeviceQueue::publish_used`].
//!   [`PackedDriverQueue::pop_used`] loads the flags at its used position
//!   with **Acquire**, pairing with that store, and only then reads `id`
//!   and `len` and lets the caller read the buffers.
//! - Slot reuse: the driver writes a descriptor again only once it has
//!   reclaimed as many descriptors as the ring holds past it, through used
//!   descriptors it Acquire-loaded; the device read that descriptor before
//!   it Release-stored any later used descriptor (it takes chains in ring
//!   order, and returns only chains it has taken).
//!
//! Notification suppression (2.8.10, 2.8.14) is the handshake of the split
//! ring with the event structures in place of the index words: a side
//! publishes (Release stores of flags), then a **SeqCst fence**, then reads
//! the other side's event structure; the other side, before it waits,
//! writes its event structure (relaxed), then a SeqCst fence, then re-reads
//! the flags at its position. At least one of the two sees the other's
//! store, so a notification is never lost:
//! [`PackedDriverQueue::needs_kick`] pairs with
//! [`PackedDeviceQueue::enable_notify`], and
//! [`PackedDeviceQueue::needs_notify`] with
//! [`PackedDriverQueue::enable_interrupts`].
//!
//! Field by field:
//!
//! | field | writer | how it is written | how it is read |
//! |---|---|---|---|
//! | `addr`, `len`, `id` of available descriptors, indirect tables | driver | plain copies, before the head's flags | plain copies, after the head's flags |
//! | `flags` of a chain's head | driver | Release store ([`PackedDriverQueue::add_chain`], [`PackedDriverQueue::publish_avail`]) | Acquire load ([`PackedDeviceQueue::pop_avail_into`], [`PackedDeviceQueue::enable_notify`]) |
//! | `flags` of the other descriptors of a chain | driver | relaxed store, before the head's flags | relaxed load, after the head's flags |
//! | `len`, `id` of used descriptors, buffer contents | device | plain copies, before the used flags | plain copies, after the used flags |
//! | `flags` of a used descriptor | device | Release store ([`PackedDeviceQueue::push_used`], [`PackedDeviceQueue::publish_used`]) | Acquire load ([`PackedDriverQueue::pop_used`], [`PackedDriverQueue::enable_interrupts`]) |
//! | driver event suppression | driver | relaxed stores, then SeqCst fence | SeqCst fence, then relaxed loads ([`PackedDeviceQueue::needs_notify`]) |
//! | device event suppression | device | relaxed stores, then SeqCst fence | SeqCst fence, then relaxed loads ([`PackedDriverQueue::needs_kick`]) |
//!
//! An event structure's flags are [`RING_EVENT_FLAGS_ENABLE`] (notify),
//! [`RING_EVENT_FLAGS_DISABLE`] (do not) or, with `VIRTIO_F_EVENT_IDX`,
//! [`RING_EVENT_FLAGS_DESC`]: notify when the position published moves past
//! the one in `desc`. [`event_passed`] decides that from the positions
//! before and after and the event's position, each with its wrap counter.
//!
//! # Trusting nothing
//!
//! The device walks a chain with a bound: at most `N` descriptors in the
//! ring (a chain still going on after `N` is too long), at most `N` buffers
//! in all, counting an indirect table's; every buffer and indirect table is
//! checked against guest memory. A chain that breaks a rule is a
//! [`ChainError`] naming the rule (the reasons of the split ring that apply
//! here), counted in [`DeviceQueueStats`] and returned to the driver as used
//! with length 0 and its buffer id, the device moving past all of its
//! descriptors. The driver keeps its own record of each buffer id's
//! descriptors and writable bytes, and checks each used descriptor: a
//! buffer id not in flight ([`VirtioError::BadUsedId`], the descriptor
//! skipped as one), a length above the chain's writable bytes
//! ([`VirtioError::BadUsedLen`], the chain reclaimed) and a used descriptor
//! with nothing in flight ([`VirtioError::NothingInFlight`], nothing taken)
//! are errors, counted in [`DriverQueueStats`].

use super::memory::GuestMemory;
use super::split::{
    Chain, DeviceQueueStats, DriverQueueStats, Segment, Used, VIRTQ_DESC_F_INDIRECT,
    VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE, need_event,
};
use super::{
    ChainError, ChainErrorReason, VIRTIO_F_EVENT_IDX, VIRTIO_F_IN_ORDER, VIRTIO_F_INDIRECT_DESC,
    VirtioError, has_feature,
};
use crate::sync::{Arc, Ordering, fence};

/// Descriptor flag: the descriptor is available on the lap whose wrap
/// counter equals this bit (with [`VIRTQ_DESC_F_USED`] its inverse).
pub const VIRTQ_DESC_F_AVAIL: u16 = 1 << 7;
/// Descriptor flag: the descriptor is used on the lap whose wrap counter
/// equals this bit (with [`VIRTQ_DESC_F_AVAIL`] equal to it).
pub const VIRTQ_DESC_F_USED: u16 = 1 << 15;
/// Event suppression flags: notifications wanted.
pub const RING_EVENT_FLAGS_ENABLE: u16 = 0;
/// Event suppression flags: no notifications.
pub const RING_EVENT_FLAGS_DISABLE: u16 = 1;
/// Event suppression flags: a notification when the position in `desc` is
/// passed (with `VIRTIO_F_EVENT_IDX`).
pub const RING_EVENT_FLAGS_DESC: u16 = 2;

/// The largest queue size of a packed virtqueue.
pub const MAX_QUEUE_SIZE: u32 = 32768;
/// Bytes of a descriptor.
pub const DESC_SIZE: u64 = 16;
/// Bytes of an event suppression structure.
pub const EVENT_SIZE: u64 = 4;
/// Alignment of the descriptor ring.
pub const DESC_RING_ALIGN: u64 = 16;
/// Alignment of the event suppression structures.
pub const EVENT_ALIGN: u64 = 4;
/// Offset of `flags` in a descriptor.
const FLAGS_OFFSET: u64 = 14;
/// Offset of `len` in a descriptor (`id` follows it).
const LEN_OFFSET: u64 = 8;

/// `size` as a packed queue size: 1 to 32768, else
/// [`VirtioError::BadQueueSize`].
pub fn check_queue_size(size: u32) -> Result<u16, VirtioError> {
    if size == 0 || size > MAX_QUEUE_SIZE {
        return Err(VirtioError::BadQueueSize(size));
    }
    Ok(size as u16)
}

/// A position in the descriptor ring and the wrap counter that goes with
/// it: the counter starts at 1 (`true`) and flips each time the position
/// passes the ring's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RingPosition {
    /// The descriptor's index, below the queue size.
    pub index: u16,
    /// The wrap counter.
    pub wrap: bool,
}

impl RingPosition {
    /// Where both sides start: index 0, wrap counter 1.
    pub const START: RingPosition = RingPosition {
        index: 0,
        wrap: true,
    };

    /// The position `n` descriptors back on a ring of `size` (`n` at most
    /// `size`): [`advance`](Self::advance) undone.
    pub fn retreat(self, n: u16, size: u16) -> RingPosition {
        debug_assert!(n <= size && self.index < size);
        if n <= self.index {
            RingPosition {
                index: self.index - n,
                wrap: self.wrap,
            }
        } else {
            RingPosition {
                index: (u32::from(self.index) + u32::from(size) - u32::from(n)) as u16,
                wrap: !self.wrap,
            }
        }
    }

    /// The position `n` descriptors further on a ring of `size` (`n` at
    /// most `size`).
    pub fn advance(self, n: u16, size: u16) -> RingPosition {
        debug_assert!(n <= size && self.index < size);
        let next = u32::from(self.index) + u32::from(n);
        if next >= u32::from(size) {
            RingPosition {
                index: (next - u32::from(size)) as u16,
                wrap: !self.wrap,
            }
        } else {
            RingPosition {
                index: next as u16,
                wrap: self.wrap,
            }
        }
    }

    /// The 16-bit form of event suppression's `desc` and of vhost-user's
    /// ring base: the index in bits 0–14, the wrap counter in bit 15.
    pub fn to_off_wrap(self) -> u16 {
        (self.index & 0x7fff) | (u16::from(self.wrap) << 15)
    }

    /// The position in a 16-bit `desc` / ring base word.
    pub fn from_off_wrap(word: u16) -> RingPosition {
        RingPosition {
            index: word & 0x7fff,
            wrap: word & 0x8000 != 0,
        }
    }
}

/// Whether moving a published position from `old` to `new` (less than a
/// lap, on a ring of `size`) passed `event`: the event's descriptor is one
/// of those from `old` up to `new`. The positions are put on one line (an
/// index of the lap before `new`'s is less by `size`) and compared with
/// [`need_event`], as Linux and DPDK do.
pub fn event_passed(event: RingPosition, old: RingPosition, new: RingPosition, size: u16) -> bool {
    let line = |p: RingPosition| {
        if p.wrap == new.wrap {
            p.index
        } else {
            p.index.wrapping_sub(size)
        }
    };
    need_event(line(event), new.index, line(old))
}

/// The flags bits marking a descriptor available on lap `wrap`.
pub fn avail_marking(wrap: bool) -> u16 {
    if wrap {
        VIRTQ_DESC_F_AVAIL
    } else {
        VIRTQ_DESC_F_USED
    }
}

/// The flags bits marking a descriptor used on lap `wrap`.
pub fn used_marking(wrap: bool) -> u16 {
    if wrap {
        VIRTQ_DESC_F_AVAIL | VIRTQ_DESC_F_USED
    } else {
        0
    }
}

/// Whether `flags` mark a descriptor available on lap `wrap`.
pub fn is_avail(flags: u16, wrap: bool) -> bool {
    flags & (VIRTQ_DESC_F_AVAIL | VIRTQ_DESC_F_USED) == avail_marking(wrap)
}

/// Whether `flags` mark a descriptor used on lap `wrap`.
pub fn is_used(flags: u16, wrap: bool) -> bool {
    flags & (VIRTQ_DESC_F_AVAIL | VIRTQ_DESC_F_USED) == used_marking(wrap)
}

/// One descriptor of the ring (or of an indirect table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackedDescriptor {
    /// Guest physical address of the buffer.
    pub addr: u64,
    /// Its length in bytes; in a used descriptor, the bytes written.
    pub len: u32,
    /// The buffer id.
    pub id: u16,
    /// [`VIRTQ_DESC_F_NEXT`], [`VIRTQ_DESC_F_WRITE`],
    /// [`VIRTQ_DESC_F_INDIRECT`], [`VIRTQ_DESC_F_AVAIL`], [`VIRTQ_DESC_F_USED`].
    pub flags: u16,
}

impl PackedDescriptor {
    /// The 16 bytes in memory.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..14].copy_from_slice(&self.id.to_le_bytes());
        b[14..16].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    /// The descriptor in these 16 bytes.
    pub fn from_bytes(b: [u8; 16]) -> PackedDescriptor {
        PackedDescriptor {
            addr: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            id: u16::from_le_bytes([b[12], b[13]]),
            flags: u16::from_le_bytes([b[14], b[15]]),
        }
    }
}

/// An event suppression structure (2.8.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSuppression {
    /// With [`RING_EVENT_FLAGS_DESC`], the position whose passing is
    /// notified.
    pub desc: RingPosition,
    /// [`RING_EVENT_FLAGS_ENABLE`], [`RING_EVENT_FLAGS_DISABLE`] or
    /// [`RING_EVENT_FLAGS_DESC`].
    pub flags: u16,
}

impl EventSuppression {
    /// The 4 bytes in memory.
    pub fn to_bytes(self) -> [u8; 4] {
        let mut b = [0u8; 4];
        b[0..2].copy_from_slice(&self.desc.to_off_wrap().to_le_bytes());
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    /// The structure in these 4 bytes.
    pub fn from_bytes(b: [u8; 4]) -> EventSuppression {
        EventSuppression {
            desc: RingPosition::from_off_wrap(u16::from_le_bytes([b[0], b[1]])),
            flags: u16::from_le_bytes([b[2], b[3]]),
        }
    }
}

/// Where a packed virtqueue's three areas are, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedLayout {
    size: u16,
    desc_ring: u64,
    driver_event: u64,
    device_event: u64,
}

impl PackedLayout {
    /// A queue of `size` entries with its areas at these guest physical
    /// addresses (vhost-user's desc, avail and used addresses). Refused: a
    /// bad size ([`check_queue_size`]), an area not aligned as the
    /// specification asks ([`VirtioError::Misaligned`]), an area whose end
    /// overflows the address space.
    pub fn new(
        size: u32,
        desc_ring: u64,
        driver_event: u64,
        device_event: u64,
    ) -> Result<PackedLayout, VirtioError> {
        let size = check_queue_size(size)?;
        for (gpa, align, len) in [
            (desc_ring, DESC_RING_ALIGN, Self::desc_ring_len(size)),
            (driver_event, EVENT_ALIGN, EVENT_SIZE),
            (device_event, EVENT_ALIGN, EVENT_SIZE),
        ] {
            if !gpa.is_multiple_of(align) {
                return Err(VirtioError::Misaligned { gpa, align });
            }
            if gpa.checked_add(len).is_none() {
                return Err(VirtioError::OutsideMemory { gpa, len });
            }
        }
        Ok(PackedLayout {
            size,
            desc_ring,
            driver_event,
            device_event,
        })
    }

    /// The ring, then the driver event suppression structure, then the
    /// device's, one after the other from `base` (16-aligned).
    /// [`end`](Self::end) is where they stop.
    pub fn contiguous(base: u64, size: u32) -> Result<PackedLayout, VirtioError> {
        let n = check_queue_size(size)?;
        let driver = base.saturating_add(Self::desc_ring_len(n));
        PackedLayout::new(size, base, driver, driver.saturating_add(EVENT_SIZE))
    }

    /// Bytes of the descriptor ring of a queue of `size`.
    pub const fn desc_ring_len(size: u16) -> u64 {
        DESC_SIZE * size as u64
    }

    /// The queue size.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// Address of the descriptor ring.
    pub fn desc_ring(&self) -> u64 {
        self.desc_ring
    }

    /// Address of the driver event suppression structure.
    pub fn driver_event(&self) -> u64 {
        self.driver_event
    }

    /// Address of the device event suppression structure.
    pub fn device_event(&self) -> u64 {
        self.device_event
    }

    /// The first address past the highest of the three areas.
    pub fn end(&self) -> u64 {
        (self.desc_ring + Self::desc_ring_len(self.size))
            .max(self.driver_event + EVENT_SIZE)
            .max(self.device_event + EVENT_SIZE)
    }

    /// Ok when each area lies inside one region of `mem`.
    pub fn check_memory(&self, mem: &GuestMemory) -> Result<(), VirtioError> {
        mem.check_range(self.desc_ring, Self::desc_ring_len(self.size))?;
        mem.check_range(self.driver_event, EVENT_SIZE)?;
        mem.check_range(self.device_event, EVENT_SIZE)
    }

    /// Address of descriptor `i` (below the size).
    pub fn desc(&self, i: u16) -> u64 {
        self.desc_ring + DESC_SIZE * u64::from(i)
    }

    /// Address of the `flags` of descriptor `i`.
    pub fn desc_flags(&self, i: u16) -> u64 {
        self.desc(i) + FLAGS_OFFSET
    }

    /// `position` checked against the size.
    fn check_position(&self, position: RingPosition) -> Result<RingPosition, VirtioError> {
        if position.index >= self.size {
            return Err(VirtioError::BadPosition {
                index: position.index,
                size: self.size,
            });
        }
        Ok(position)
    }
}

/// Writes the event structure at `at`: `desc` then `flags`, relaxed, then
/// a SeqCst fence (module docs).
fn write_event(
    mem: &GuestMemory,
    at: u64,
    desc: RingPosition,
    flags: u16,
) -> Result<(), VirtioError> {
    mem.store_u16(at, desc.to_off_wrap(), Ordering::Relaxed)?;
    mem.store_u16(at + 2, flags, Ordering::Relaxed)?;
    fence(Ordering::SeqCst);
    Ok(())
}

/// Whether the other side, whose event structure is at `at`, wants a
/// notification for the `since` descriptors published from `old` to
/// `new`. The caller has fenced between its flag stores and these loads.
/// Flags 3 (reserved), and [`RING_EVENT_FLAGS_DESC`] without
/// `VIRTIO_F_EVENT_IDX`, notify: a notification too many costs a wake-up, one
/// too few a stall.
fn wants_notification(
    mem: &GuestMemory,
    at: u64,
    event_idx: bool,
    size: u16,
    since: u32,
    old: RingPosition,
    new: RingPosition,
) -> Result<bool, VirtioError> {
    if since == 0 {
        return Ok(false);
    }
    let flags = mem.load_u16(at + 2, Ordering::Relaxed)? & 3;
    Ok(match flags {
        RING_EVENT_FLAGS_DISABLE => false,
        RING_EVENT_FLAGS_DESC if event_idx => {
            // A whole lap or more passes every position.
            since >= u32::from(size) || {
                let event = RingPosition::from_off_wrap(mem.load_u16(at, Ordering::Relaxed)?);
                event_passed(event, old, new, size)
            }
        }
        _ => true,
    })
}

/// `addr`, `len` and `id` of the descriptor at `gpa` (its flags are read
/// apart, atomically).
fn read_desc_body(mem: &GuestMemory, gpa: u64) -> Result<(u64, u32, u16), VirtioError> {
    let mut raw = [0u8; FLAGS_OFFSET as usize];
    mem.read_into(gpa, &mut raw)?;
    Ok((
        u64::from_le_bytes(raw[0..8].try_into().expect("8 bytes")),
        u32::from_le_bytes(raw[8..12].try_into().expect("4 bytes")),
        u16::from_le_bytes([raw[12], raw[13]]),
    ))
}

/// Writes `addr`, `len` and `id` of the descriptor at `gpa`.
fn write_desc_body(
    mem: &GuestMemory,
    gpa: u64,
    addr: u64,
    len: u32,
    id: u16,
) -> Result<(), VirtioError> {
    let mut raw = [0u8; FLAGS_OFFSET as usize];
    raw[0..8].copy_from_slice(&addr.to_le_bytes());
    raw[8..12].copy_from_slice(&len.to_le_bytes());
    raw[12..14].copy_from_slice(&id.to_le_bytes());
    mem.write_from(gpa, &raw)
}

/// A chain the device took from the ring, checked: its buffer id, how many
/// ring descriptors it took, and its buffers, readable ones first. It
/// dereferences to a [`Chain`] for the buffers and their contents (whose
/// [`head`](Chain::head) is the buffer id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedChain {
    chain: Chain,
    descs: u16,
}

impl PackedChain {
    /// An empty chain, to pass to [`PackedDeviceQueue::pop_avail_into`].
    pub fn new() -> PackedChain {
        PackedChain::default()
    }

    /// The buffer id: what [`PackedDeviceQueue::push_used`] returns.
    pub fn id(&self) -> u16 {
        self.chain.head
    }

    /// The ring descriptors the chain took (1 for an indirect one): what
    /// [`PackedDeviceQueue::push_used`] moves past.
    pub fn descs(&self) -> u16 {
        self.descs
    }
}

impl std::ops::Deref for PackedChain {
    type Target = Chain;

    fn deref(&self) -> &Chain {
        &self.chain
    }
}

/// The device side of a packed virtqueue: takes chains from the ring,
/// returns them in place (see the module docs).
#[derive(Debug)]
pub struct PackedDeviceQueue {
    mem: Arc<GuestMemory>,
    layout: PackedLayout,
    event_idx: bool,
    indirect: bool,
    /// `VIRTIO_F_IN_ORDER`: chains go back in the order they were taken.
    in_order: bool,
    /// The next descriptor to take.
    next_avail: RingPosition,
    /// Where the next used descriptor goes.
    next_used: RingPosition,
    /// The first used descriptor written since the last publication, and
    /// its flags, not yet stored.
    held_used: Option<(u16, u16)>,
    /// Descriptors returned since the last publication.
    unpublished: u32,
    /// `next_used` at the last publication.
    published_used: RingPosition,
    /// Descriptors published since the last `needs_notify`.
    unsignalled: u32,
    /// `published_used` at the last `needs_notify`.
    signalled_used: RingPosition,
    /// Chains, and ring descriptors, taken and not yet returned.
    in_flight: u32,
    in_flight_descs: u32,
    stats: DeviceQueueStats,
}

impl PackedDeviceQueue {
    /// The device side of a fresh queue (both positions at the start) at
    /// `layout` in `mem`, with the negotiated `features`
    /// (`VIRTIO_F_EVENT_IDX`, `VIRTIO_F_INDIRECT_DESC` and
    /// `VIRTIO_F_IN_ORDER` matter here).
    /// Refused when an area is outside `mem`.
    pub fn new(
        mem: Arc<GuestMemory>,
        layout: PackedLayout,
        features: u64,
    ) -> Result<PackedDeviceQueue, VirtioError> {
        PackedDeviceQueue::with_position(mem, layout, features, RingPosition::START)
    }

    /// The device side of a queue resumed at `position` (vhost-user's
    /// SET_VRING_BASE, whose number is [`RingPosition::to_off_wrap`]): the
    /// next descriptor taken and the next used one written are both there,
    /// as every chain taken before was returned. Refused as
    /// [`new`](Self::new), and when the index is not below the size.
    pub fn with_position(
        mem: Arc<GuestMemory>,
        layout: PackedLayout,
        features: u64,
        position: RingPosition,
    ) -> Result<PackedDeviceQueue, VirtioError> {
        layout.check_memory(&mem)?;
        let position = layout.check_position(position)?;
        Ok(PackedDeviceQueue {
            mem,
            layout,
            event_idx: has_feature(features, VIRTIO_F_EVENT_IDX),
            indirect: has_feature(features, VIRTIO_F_INDIRECT_DESC),
            in_order: has_feature(features, VIRTIO_F_IN_ORDER),
            next_avail: position,
            next_used: position,
            held_used: None,
            unpublished: 0,
            published_used: position,
            unsignalled: 0,
            signalled_used: position,
            in_flight: 0,
            in_flight_descs: 0,
            stats: DeviceQueueStats::default(),
        })
    }

    /// The guest memory.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// The layout.
    pub fn layout(&self) -> &PackedLayout {
        &self.layout
    }

    /// What the queue counted (`index_errors` stays 0: the ring has no
    /// index).
    pub fn stats(&self) -> &DeviceQueueStats {
        &self.stats
    }

    /// The next descriptor the device takes (vhost-user's GET_VRING_BASE).
    pub fn next_avail(&self) -> RingPosition {
        self.next_avail
    }

    /// Where the next used descriptor goes.
    pub fn next_used(&self) -> RingPosition {
        self.next_used
    }

    /// Chains taken and not yet returned with [`push_used`](Self::push_used).
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Gives back the last `n` chains taken, `descs` descriptors in all,
    /// none of them returned yet and none refused since: the next takes
    /// find them again, as the driver left them. Refused (returns
    /// [`VirtioError::NothingInFlight`], nothing changed) when fewer are in
    /// flight.
    pub fn untake(&mut self, n: u16, descs: u32) -> Result<(), VirtioError> {
        if u32::from(n) > self.in_flight
            || descs > self.in_flight_descs
            || descs > u32::from(self.layout.size)
        {
            return Err(VirtioError::NothingInFlight);
        }
        self.next_avail = self.next_avail.retreat(descs as u16, self.layout.size);
        self.in_flight -= u32::from(n);
        self.in_flight_descs -= descs;
        self.stats.chains -= u64::from(n);
        Ok(())
    }

    /// Takes the next chain into `chain` (reusing its allocation). Ok(true)
    /// with a good chain, Ok(false) when the descriptor at the device's
    /// position is not available, [`VirtioError::Chain`] for a refused
    /// chain (already returned as used with length 0 and counted; take the
    /// next one).
    pub fn pop_avail_into(&mut self, chain: &mut PackedChain) -> Result<bool, VirtioError> {
        let start = self.next_avail;
        // Acquire: pairs with the Release store of this head's flags by
        // `PackedDriverQueue::add_chain` / `publish_avail`, so the chain's
        // descriptors and buffers below are complete.
        let flags = self
            .mem
            .load_u16(self.layout.desc_flags(start.index), Ordering::Acquire)?;
        if !is_avail(flags, start.wrap) {
            return Ok(false);
        }
        let refused = self.walk(start, flags, chain)?;
        if refused.is_some() && self.in_order && self.in_flight > 0 {
            // Returned now, the refused chain would pass the chains taken
            // before it: it stays in the ring until they are returned.
            chain.chain.clear(0);
            return Ok(false);
        }
        self.next_avail = start.advance(chain.descs, self.layout.size);
        self.in_flight += 1;
        self.in_flight_descs += u32::from(chain.descs);
        match refused {
            None => {
                self.stats.chains += 1;
                Ok(true)
            }
            Some(reason) => {
                self.stats.bad_chains[reason.index()] += 1;
                let (id, descs) = (chain.id(), chain.descs);
                chain.chain.clear(id);
                self.push_used(id, descs, 0)?;
                Err(VirtioError::Chain(ChainError { head: id, reason }))
            }
        }
    }

    /// Takes the next chain: `Ok(None)` when there is none; errors as
    /// [`pop_avail_into`](Self::pop_avail_into).
    pub fn pop_avail(&mut self) -> Result<Option<PackedChain>, VirtioError> {
        let mut chain = PackedChain::new();
        Ok(self.pop_avail_into(&mut chain)?.then_some(chain))
    }

    /// Reads the chain starting at `start` (whose flags are `head_flags`)
    /// into `chain`: all of its descriptors, to find its end and buffer id
    /// whatever is wrong with it, and the first rule it breaks.
    fn walk(
        &self,
        start: RingPosition,
        head_flags: u16,
        chain: &mut PackedChain,
    ) -> Result<Option<ChainErrorReason>, VirtioError> {
        let size = self.layout.size;
        let mem = &*self.mem;
        chain.chain.clear(0);
        let mut at = start;
        let mut flags = head_flags;
        let mut descs = 0u16;
        let mut refused = None;
        let mut checks = BufferChecks {
            size: u32::from(size),
            buffers: 0,
            seen_writable: false,
        };
        loop {
            descs += 1;
            let (addr, len, id) = read_desc_body(mem, self.layout.desc(at.index))?;
            chain.chain.head = id;
            if refused.is_none() {
                refused = self.take(&mut checks, addr, len, flags, chain).err();
                // An indirect descriptor is a chain of its own (2.8.7): not
                // one linked by NEXT, before or after.
                if flags & VIRTQ_DESC_F_INDIRECT != 0 && descs > 1 {
                    refused = Some(ChainErrorReason::IndirectWithNext);
                }
            }
            if flags & VIRTQ_DESC_F_NEXT == 0 {
                break;
            }
            if descs == size {
                refused = refused.or(Some(ChainErrorReason::TooLong));
                break;
            }
            at = at.advance(1, size);
            // Relaxed: this descriptor was written before the head's
            // flags, which were Acquire-loaded.
            flags = mem.load_u16(self.layout.desc_flags(at.index), Ordering::Relaxed)?;
        }
        chain.descs = descs;
        Ok(refused)
    }

    /// Takes one ring descriptor of a chain: a buffer, or an indirect table.
    fn take(
        &self,
        checks: &mut BufferChecks,
        addr: u64,
        len: u32,
        flags: u16,
        chain: &mut PackedChain,
    ) -> Result<(), ChainErrorReason> {
        use ChainErrorReason::*;
        if flags & VIRTQ_DESC_F_INDIRECT == 0 {
            return checks.buffer(&self.mem, addr, len, flags, &mut chain.chain);
        }
        if !self.indirect {
            return Err(IndirectNotNegotiated);
        }
        if flags & VIRTQ_DESC_F_NEXT != 0 {
            return Err(IndirectWithNext);
        }
        if len == 0 || !u64::from(len).is_multiple_of(DESC_SIZE) {
            return Err(IndirectBadLength);
        }
        let entries = len / DESC_SIZE as u32;
        if checks.buffers + entries > checks.size {
            return Err(TooLong);
        }
        self.mem
            .check_range(addr, u64::from(len))
            .map_err(|_| OutsideMemory)?;
        for i in 0..u64::from(entries) {
            let mut raw = [0u8; 16];
            self.mem
                .read_into(addr + DESC_SIZE * i, &mut raw)
                .map_err(|_| OutsideMemory)?;
            let desc = PackedDescriptor::from_bytes(raw);
            // Only WRITE counts in a table; NEXT, INDIRECT and the id are
            // ignored (2.8.7).
            checks.buffer(
                &self.mem,
                desc.addr,
                desc.len,
                desc.flags & VIRTQ_DESC_F_WRITE,
                &mut chain.chain,
            )?;
        }
        Ok(())
    }

    /// Writes a used descriptor at the used position and moves it past
    /// `descs`; the first of a batch has its flags held for
    /// [`publish_used`](Self::publish_used).
    fn write_used(&mut self, id: u16, descs: u16, len: u32) -> Result<(), VirtioError> {
        let at = self.next_used;
        let mut raw = [0u8; 6];
        raw[..4].copy_from_slice(&len.to_le_bytes());
        raw[4..].copy_from_slice(&id.to_le_bytes());
        self.mem
            .write_from(self.layout.desc(at.index) + LEN_OFFSET, &raw)?;
        // WRITE says whether the device wrote anything; without it the
        // driver takes the length as 0 (2.8.4).
        let written = if len > 0 { VIRTQ_DESC_F_WRITE } else { 0 };
        let flags = used_marking(at.wrap) | written;
        if self.held_used.is_none() {
            self.held_used = Some((at.index, flags));
        } else {
            // Release: pairs with the Acquire of `PackedDriverQueue::pop_used`;
            // the driver reaches this descriptor only after the held one.
            self.mem
                .store_u16(self.layout.desc_flags(at.index), flags, Ordering::Release)?;
        }
        self.next_used = at.advance(descs, self.layout.size);
        self.unpublished += u32::from(descs);
        Ok(())
    }

    /// Returns the chain of buffer `id`, which took `descs` ring descriptors
    /// ([`PackedChain::descs`]), with `len` bytes written into it; seen by
    /// the driver after [`publish_used`](Self::publish_used). Chains may be
    /// returned in any order. Refused with [`VirtioError::NothingInFlight`]
    /// when every chain taken has been returned, and with
    /// [`VirtioError::BadUsedDescriptors`] for 0 descriptors or more than
    /// are in flight.
    pub fn push_used(&mut self, id: u16, descs: u16, len: u32) -> Result<(), VirtioError> {
        if self.in_flight == 0 {
            return Err(VirtioError::NothingInFlight);
        }
        if descs == 0 || u32::from(descs) > self.in_flight_descs {
            return Err(VirtioError::BadUsedDescriptors {
                descs,
                in_flight: self.in_flight_descs,
            });
        }
        self.write_used(id, descs, len)?;
        self.in_flight -= 1;
        self.in_flight_descs -= u32::from(descs);
        Ok(())
    }

    /// Publishes the used descriptors written since the last call: the
    /// store of the first one's flags.
    pub fn publish_used(&mut self) -> Result<(), VirtioError> {
        if let Some((index, flags)) = self.held_used.take() {
            // Release: pairs with the Acquire of `PackedDriverQueue::pop_used`;
            // the used descriptors after it, their `len` and `id`, and the
            // buffers' contents are written before it.
            self.mem
                .store_u16(self.layout.desc_flags(index), flags, Ordering::Release)?;
        }
        self.unsignalled += std::mem::take(&mut self.unpublished);
        self.published_used = self.next_used;
        Ok(())
    }

    /// Whether the driver wants a used buffer notification for what was
    /// published since the last call, by its event suppression structure:
    /// with [`RING_EVENT_FLAGS_DESC`] (and `VIRTIO_F_EVENT_IDX`) when the
    /// used position passed its `desc` ([`event_passed`]); with
    /// [`RING_EVENT_FLAGS_ENABLE`] when anything was published.
    pub fn needs_notify(&mut self) -> Result<bool, VirtioError> {
        // SeqCst fence: the flags stores of `publish_used` before the event
        // loads below; pairs with the fence of
        // `PackedDriverQueue::enable_interrupts` (module docs).
        fence(Ordering::SeqCst);
        let old = std::mem::replace(&mut self.signalled_used, self.published_used);
        wants_notification(
            &self.mem,
            self.layout.driver_event,
            self.event_idx,
            self.layout.size,
            std::mem::take(&mut self.unsignalled),
            old,
            self.published_used,
        )
    }

    /// Asks the driver not to send available buffer notifications (the
    /// device polls): [`RING_EVENT_FLAGS_DISABLE`].
    pub fn disable_notify(&mut self) -> Result<(), VirtioError> {
        self.mem.store_u16(
            self.layout.device_event + 2,
            RING_EVENT_FLAGS_DISABLE,
            Ordering::Relaxed,
        )
    }

    /// Asks the driver for a notification at its next available chain (the
    /// device's position with [`RING_EVENT_FLAGS_DESC`] under
    /// `VIRTIO_F_EVENT_IDX`, [`RING_EVENT_FLAGS_ENABLE`] otherwise), then
    /// re-reads the descriptor at its position: true when a chain arrived
    /// meanwhile, so the caller polls again instead of waiting.
    pub fn enable_notify(&mut self) -> Result<bool, VirtioError> {
        let flags = if self.event_idx {
            RING_EVENT_FLAGS_DESC
        } else {
            RING_EVENT_FLAGS_ENABLE
        };
        // The SeqCst fence after the stores pairs with the fence of
        // `PackedDriverQueue::needs_kick`.
        write_event(&self.mem, self.layout.device_event, self.next_avail, flags)?;
        let at = self.next_avail;
        let flags = self
            .mem
            .load_u16(self.layout.desc_flags(at.index), Ordering::Acquire)?;
        Ok(is_avail(flags, at.wrap))
    }

    /// Asks for a kick when the driver's available position passes
    /// `position` ([`RING_EVENT_FLAGS_DESC`]; with `VIRTIO_F_EVENT_IDX`).
    /// A SeqCst fence follows the stores, as in
    /// [`enable_notify`](Self::enable_notify).
    pub fn set_kick_event(&mut self, position: RingPosition) -> Result<(), VirtioError> {
        let position = self.layout.check_position(position)?;
        write_event(
            &self.mem,
            self.layout.device_event,
            position,
            RING_EVENT_FLAGS_DESC,
        )
    }
}

/// The running checks of one chain's buffers.
struct BufferChecks {
    size: u32,
    buffers: u32,
    seen_writable: bool,
}

impl BufferChecks {
    /// Adds one buffer to `chain`: at most `size` in all, inside guest
    /// memory, readable ones first.
    fn buffer(
        &mut self,
        mem: &GuestMemory,
        addr: u64,
        len: u32,
        flags: u16,
        chain: &mut Chain,
    ) -> Result<(), ChainErrorReason> {
        use ChainErrorReason::*;
        self.buffers += 1;
        if self.buffers > self.size {
            return Err(TooLong);
        }
        mem.check_range(addr, u64::from(len))
            .map_err(|_| OutsideMemory)?;
        let writable = flags & VIRTQ_DESC_F_WRITE != 0;
        if writable {
            self.seen_writable = true;
            chain.writable_len += u64::from(len);
        } else if self.seen_writable {
            return Err(ReadableAfterWritable);
        } else {
            chain.readable_len += u64::from(len);
        }
        chain.segments.push(Segment {
            addr,
            len,
            writable,
        });
        Ok(())
    }
}

/// The driver side of a packed virtqueue: adds chains, reclaims them (see
/// the module docs).
#[derive(Debug)]
pub struct PackedDriverQueue {
    mem: Arc<GuestMemory>,
    layout: PackedLayout,
    event_idx: bool,
    indirect: bool,
    /// Where the next chain goes.
    next_avail: RingPosition,
    /// The first head added since the last publication, and its flags,
    /// not yet stored.
    held_head: Option<(u16, u16)>,
    /// Descriptors added since the last publication.
    unpublished: u32,
    /// `next_avail` at the last publication.
    published_avail: RingPosition,
    /// Descriptors published since the last `needs_kick`.
    unkicked: u32,
    /// `published_avail` at the last `needs_kick`.
    kicked_avail: RingPosition,
    /// Where the next used descriptor is expected.
    last_used: RingPosition,
    /// Free ring descriptors.
    num_free: u16,
    /// Buffer ids not in flight (a stack).
    free_ids: Vec<u16>,
    /// Per buffer id: ring descriptors of the chain in flight, 0 when none.
    chain_descs: Vec<u16>,
    /// Per buffer id: writable bytes of the chain in flight.
    chain_writable: Vec<u64>,
    in_flight: u16,
    stats: DriverQueueStats,
}

impl PackedDriverQueue {
    /// The driver side of a fresh queue at `layout` in `mem`, with the
    /// negotiated `features`. Clears every descriptor's flags (marked
    /// neither available nor used on the first lap) and writes the driver
    /// event suppression structure as [`RING_EVENT_FLAGS_ENABLE`]. Refused
    /// when an area is outside `mem`.
    pub fn new(
        mem: Arc<GuestMemory>,
        layout: PackedLayout,
        features: u64,
    ) -> Result<PackedDriverQueue, VirtioError> {
        layout.check_memory(&mem)?;
        let size = layout.size;
        for i in 0..size {
            mem.store_u16(layout.desc_flags(i), 0, Ordering::Relaxed)?;
        }
        mem.store_u16(layout.driver_event, 0, Ordering::Relaxed)?;
        mem.store_u16(
            layout.driver_event + 2,
            RING_EVENT_FLAGS_ENABLE,
            Ordering::Relaxed,
        )?;
        Ok(PackedDriverQueue {
            mem,
            layout,
            event_idx: has_feature(features, VIRTIO_F_EVENT_IDX),
            indirect: has_feature(features, VIRTIO_F_INDIRECT_DESC),
            next_avail: RingPosition::START,
            held_head: None,
            unpublished: 0,
            published_avail: RingPosition::START,
            unkicked: 0,
            kicked_avail: RingPosition::START,
            last_used: RingPosition::START,
            num_free: size,
            free_ids: (0..size).rev().collect(),
            chain_descs: vec![0; usize::from(size)],
            chain_writable: vec![0; usize::from(size)],
            in_flight: 0,
            stats: DriverQueueStats::default(),
        })
    }

    /// The guest memory.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// The layout.
    pub fn layout(&self) -> &PackedLayout {
        &self.layout
    }

    /// What the queue counted (`index_errors`: used descriptors found with
    /// no chain in flight).
    pub fn stats(&self) -> &DriverQueueStats {
        &self.stats
    }

    /// Free ring descriptors.
    pub fn num_free(&self) -> u16 {
        self.num_free
    }

    /// Chains added and not yet reclaimed.
    pub fn in_flight(&self) -> u16 {
        self.in_flight
    }

    /// Where the next chain goes.
    pub fn next_avail(&self) -> RingPosition {
        self.next_avail
    }

    /// Where the next used descriptor is expected.
    pub fn last_used(&self) -> RingPosition {
        self.last_used
    }

    /// Checks a chain's buffers: not empty, readable ones first, all in
    /// guest memory; returns the writable bytes.
    fn check_segments(&self, segments: &[Segment]) -> Result<u64, VirtioError> {
        if segments.is_empty() {
            return Err(VirtioError::EmptyChain);
        }
        let mut writable = 0;
        let mut seen_writable = false;
        for s in segments {
            if s.writable {
                seen_writable = true;
                writable += u64::from(s.len);
            } else if seen_writable {
                return Err(VirtioError::ReadableAfterWritable);
            }
            self.mem.check_range(s.addr, u64::from(s.len))?;
        }
        Ok(writable)
    }

    /// Writes one ring descriptor at `at`: its body, then its flags with the
    /// available marking of `at`'s lap — relaxed for all but a head, held
    /// for the first head of a batch, Release for a later head.
    fn put(
        &mut self,
        at: RingPosition,
        segment: &Segment,
        id: u16,
        flags: u16,
        head: bool,
    ) -> Result<(), VirtioError> {
        let gpa = self.layout.desc(at.index);
        write_desc_body(&self.mem, gpa, segment.addr, segment.len, id)?;
        let flags = flags | avail_marking(at.wrap);
        let flags_at = self.layout.desc_flags(at.index);
        if !head {
            // Relaxed: the head's Release store below orders it.
            self.mem.store_u16(flags_at, flags, Ordering::Relaxed)
        } else if self.held_head.is_none() {
            self.held_head = Some((at.index, flags));
            Ok(())
        } else {
            // Release: pairs with the Acquire of
            // `PackedDeviceQueue::pop_avail_into`; the chain's other
            // descriptors are written before it, and the device reaches
            // this head only after the held one.
            self.mem.store_u16(flags_at, flags, Ordering::Release)
        }
    }

    /// Adds a chain of `segments` (readable ones first) in consecutive ring
    /// descriptors; returns its buffer id. The device sees it after
    /// [`publish_avail`](Self::publish_avail). Refused, with nothing
    /// written: no segments, a readable one after a writable one, one
    /// outside guest memory, fewer free descriptors than segments.
    pub fn add_chain(&mut self, segments: &[Segment]) -> Result<u16, VirtioError> {
        let writable = self.check_segments(segments)?;
        if segments.len() > usize::from(self.num_free) {
            return Err(VirtioError::NoFreeDescriptors {
                need: segments.len(),
                free: usize::from(self.num_free),
            });
        }
        let descs = segments.len() as u16;
        // A chain holds at least one descriptor, so with one free an id is
        // free too.
        let id = self
            .free_ids
            .pop()
            .expect("a free id with a free descriptor");
        let head = self.next_avail;
        let size = self.layout.size;
        // The other descriptors first, the head last.
        for (i, s) in segments.iter().enumerate().skip(1) {
            let mut flags = if s.writable { VIRTQ_DESC_F_WRITE } else { 0 };
            if i + 1 < segments.len() {
                flags |= VIRTQ_DESC_F_NEXT;
            }
            self.put(head.advance(i as u16, size), s, id, flags, false)?;
        }
        let first = &segments[0];
        let mut flags = if first.writable {
            VIRTQ_DESC_F_WRITE
        } else {
            0
        };
        if descs > 1 {
            flags |= VIRTQ_DESC_F_NEXT;
        }
        self.put(head, first, id, flags, true)?;
        self.start_chain(id, descs, writable);
        Ok(id)
    }

    /// Adds a chain of `segments` as an indirect table written at `table`
    /// (16 bytes per segment, memory the caller owns until the chain comes
    /// back), using one ring descriptor; returns its buffer id. Needs
    /// `VIRTIO_F_INDIRECT_DESC`; at most the queue size segments.
    pub fn add_indirect(&mut self, table: u64, segments: &[Segment]) -> Result<u16, VirtioError> {
        if !self.indirect {
            return Err(VirtioError::IndirectNotNegotiated);
        }
        let writable = self.check_segments(segments)?;
        if segments.len() > usize::from(self.layout.size) {
            return Err(VirtioError::NoFreeDescriptors {
                need: segments.len(),
                free: usize::from(self.layout.size),
            });
        }
        if self.num_free == 0 {
            return Err(VirtioError::NoFreeDescriptors { need: 1, free: 0 });
        }
        let table_len = DESC_SIZE * segments.len() as u64;
        self.mem.check_range(table, table_len)?;
        for (i, s) in segments.iter().enumerate() {
            let desc = PackedDescriptor {
                addr: s.addr,
                len: s.len,
                id: 0,
                flags: if s.writable { VIRTQ_DESC_F_WRITE } else { 0 },
            };
            self.mem
                .write_from(table + DESC_SIZE * i as u64, &desc.to_bytes())?;
        }
        let id = self
            .free_ids
            .pop()
            .expect("a free id with a free descriptor");
        let segment = Segment {
            addr: table,
            len: table_len as u32,
            writable: false,
        };
        self.put(self.next_avail, &segment, id, VIRTQ_DESC_F_INDIRECT, true)?;
        self.start_chain(id, 1, writable);
        Ok(id)
    }

    /// Records the chain of `id` as in flight and moves past its
    /// descriptors.
    fn start_chain(&mut self, id: u16, descs: u16, writable: u64) {
        self.chain_descs[usize::from(id)] = descs;
        self.chain_writable[usize::from(id)] = writable;
        self.num_free -= descs;
        self.in_flight += 1;
        self.stats.added += 1;
        self.next_avail = self.next_avail.advance(descs, self.layout.size);
        self.unpublished += u32::from(descs);
    }

    /// Publishes the chains added since the last call: the store of the
    /// first one's head flags.
    pub fn publish_avail(&mut self) -> Result<(), VirtioError> {
        if let Some((index, flags)) = self.held_head.take() {
            // Release: pairs with the Acquire of
            // `PackedDeviceQueue::pop_avail_into`; every descriptor of the
            // batch is written before it.
            self.mem
                .store_u16(self.layout.desc_flags(index), flags, Ordering::Release)?;
        }
        self.unkicked += std::mem::take(&mut self.unpublished);
        self.published_avail = self.next_avail;
        Ok(())
    }

    /// Whether the device wants an available buffer notification (a kick)
    /// for what was published since the last call, by its event
    /// suppression structure: with [`RING_EVENT_FLAGS_DESC`] (and
    /// `VIRTIO_F_EVENT_IDX`) when the available position passed its `desc`
    /// ([`event_passed`]); with [`RING_EVENT_FLAGS_ENABLE`] when anything
    /// was published.
    pub fn needs_kick(&mut self) -> Result<bool, VirtioError> {
        // SeqCst fence: the flags stores of `publish_avail` before the
        // event loads below; pairs with the fence of
        // `PackedDeviceQueue::enable_notify` (module docs).
        fence(Ordering::SeqCst);
        let old = std::mem::replace(&mut self.kicked_avail, self.published_avail);
        wants_notification(
            &self.mem,
            self.layout.device_event,
            self.event_idx,
            self.layout.size,
            std::mem::take(&mut self.unkicked),
            old,
            self.published_avail,
        )
    }

    /// Reclaims the next chain the device returned: `Ok(None)` when there is
    /// none. A used descriptor with a buffer id not in flight
    /// ([`VirtioError::BadUsedId`], skipped as one descriptor) or a bad
    /// length ([`VirtioError::BadUsedLen`], the chain reclaimed all the same)
    /// is an error, counted; the next call goes on after it. A used
    /// descriptor with no chain in flight is
    /// [`VirtioError::NothingInFlight`] and nothing is taken.
    pub fn pop_used(&mut self) -> Result<Option<Used>, VirtioError> {
        let at = self.last_used;
        // Acquire: pairs with the Release of `PackedDeviceQueue::push_used` /
        // `publish_used`, so `len`, `id` and the buffers' contents are
        // complete.
        let flags = self
            .mem
            .load_u16(self.layout.desc_flags(at.index), Ordering::Acquire)?;
        if !is_used(flags, at.wrap) {
            return Ok(None);
        }
        if self.in_flight == 0 {
            self.stats.index_errors += 1;
            return Err(VirtioError::NothingInFlight);
        }
        let mut raw = [0u8; 6];
        self.mem
            .read_into(self.layout.desc(at.index) + LEN_OFFSET, &mut raw)?;
        // The length counts only with WRITE set (2.8.4).
        let len = if flags & VIRTQ_DESC_F_WRITE != 0 {
            u32::from_le_bytes(raw[..4].try_into().expect("4 bytes"))
        } else {
            0
        };
        let id = u16::from_le_bytes([raw[4], raw[5]]);
        let descs = self.chain_descs.get(usize::from(id)).copied().unwrap_or(0);
        if descs == 0 {
            self.last_used = at.advance(1, self.layout.size);
            self.stats.bad_used_ids += 1;
            return Err(VirtioError::BadUsedId { id: u32::from(id) });
        }
        self.last_used = at.advance(descs, self.layout.size);
        let writable = self.chain_writable[usize::from(id)];
        self.chain_descs[usize::from(id)] = 0;
        self.chain_writable[usize::from(id)] = 0;
        self.free_ids.push(id);
        self.num_free += descs;
        self.in_flight -= 1;
        self.stats.reclaimed += 1;
        if u64::from(len) > writable {
            self.stats.bad_used_lens += 1;
            return Err(VirtioError::BadUsedLen {
                head: id,
                len,
                writable,
            });
        }
        Ok(Some(Used { head: id, len }))
    }

    /// Asks the device not to send used buffer notifications (the driver
    /// polls): [`RING_EVENT_FLAGS_DISABLE`].
    pub fn disable_interrupts(&mut self) -> Result<(), VirtioError> {
        self.mem.store_u16(
            self.layout.driver_event + 2,
            RING_EVENT_FLAGS_DISABLE,
            Ordering::Relaxed,
        )
    }

    /// Asks the device for a notification at its next used chain (the
    /// driver's used position with [`RING_EVENT_FLAGS_DESC`] under
    /// `VIRTIO_F_EVENT_IDX`, [`RING_EVENT_FLAGS_ENABLE`] otherwise), then
    /// re-reads the descriptor there: true when a chain came back
    /// meanwhile, so the caller polls again instead of waiting.
    pub fn enable_interrupts(&mut self) -> Result<bool, VirtioError> {
        let flags = if self.event_idx {
            RING_EVENT_FLAGS_DESC
        } else {
            RING_EVENT_FLAGS_ENABLE
        };
        // The SeqCst fence after the stores pairs with the fence of
        // `PackedDeviceQueue::needs_notify`.
        write_event(&self.mem, self.layout.driver_event, self.last_used, flags)?;
        let at = self.last_used;
        let flags = self
            .mem
            .load_u16(self.layout.desc_flags(at.index), Ordering::Acquire)?;
        Ok(is_used(flags, at.wrap))
    }

    /// Asks for a notification when the device's used position passes
    /// `position` ([`RING_EVENT_FLAGS_DESC`]; with `VIRTIO_F_EVENT_IDX`). A
    /// SeqCst fence follows the stores.
    pub fn set_used_event(&mut self, position: RingPosition) -> Result<(), VirtioError> {
        let position = self.layout.check_position(position)?;
        write_event(
            &self.mem,
            self.layout.driver_event,
            position,
            RING_EVENT_FLAGS_DESC,
        )
    }
}
