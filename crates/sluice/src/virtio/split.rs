//! The split virtqueue (VIRTIO 1.2, 2.7): layout, device side, driver side.
//!
//! # Layout
//!
//! A split virtqueue of `N` entries (a power of two, at most 32768) is three
//! areas of guest memory, all little-endian ([`QueueLayout`]):
//!
//! | area | alignment | bytes | contents |
//! |---|---|---|---|
//! | descriptor table | 16 | `16 N` | `N` × [`Descriptor`]: `addr` u64, `len` u32, `flags` u16 (NEXT, WRITE, INDIRECT), `next` u16 |
//! | available ring (driver area) | 2 | `6 + 2 N` | `flags` u16, `idx` u16, `ring[N]` u16 (chain heads), `used_event` u16 |
//! | used ring (device area) | 4 | `6 + 8 N` | `flags` u16, `idx` u16, `ring[N]` of (`id` u32, `len` u32), `avail_event` u16 |
//!
//! The driver writes the descriptor table and the available ring; the
//! device writes the used ring. The two `idx` fields are free-running 16-bit
//! counters; entry `i` of a ring is at `i mod N`.
//!
//! # The algorithm, and its memory ordering
//!
//! Each ring is a single-producer single-consumer queue whose producer
//! publishes with one index store per batch:
//!
//! - Driver to device. [`DriverQueue::add_chain`] writes the chain's
//!   descriptors and then the head into `avail.ring[avail_idx mod N]`, with
//!   plain (relaxed) copies; [`DriverQueue::publish_avail`] then stores
//!   `avail.idx` with **Release**. [`DeviceQueue::pop_avail`] loads
//!   `avail.idx` with **Acquire** — the Acquire that pairs with that Release
//!   — and only then reads the ring entries and the descriptors below it, so
//!   it sees them complete.
//! - Device to driver. [`DeviceQueue::push_used`] writes the used entry
//!   (plain copies), after the device has finished reading and writing the
//!   chain's buffers; [`DeviceQueue::publish_used`] stores `used.idx` with
//!   **Release**. [`DriverQueue::pop_used`] loads `used.idx` with
//!   **Acquire**, pairing with it, and only then reads the entry, reclaims
//!   the descriptors and lets the caller read what the device wrote into
//!   the buffers.
//! - Slot reuse needs nothing more: the driver reuses a descriptor only
//!   after it came back through the used ring, and writes an available
//!   ring slot again only after `N` further chains, which needed a
//!   descriptor that came back from the device after it read that slot
//!   (the device takes chains in ring order).
//!
//! Notification suppression (2.7.7, 2.7.10) is the other direction's
//! handshake: after publishing, a side reads the other side's event field
//! (`used_event` or `avail_event` with `VIRTIO_F_EVENT_IDX`, the flags
//! otherwise) to decide whether to notify, while the other side, before it
//! waits, writes that field and then re-reads the index. Each side does
//! store-then-load on two different words, so a **SeqCst fence** sits
//! between the store and the load on both sides (Linux's `virtio_mb`; on
//! x86-64 a locked instruction on the stack rather than `mfence`, see
//! `store_load_fence`):
//! [`DriverQueue::needs_kick`] fences between the `avail.idx` store and the
//! `avail_event` load, [`DeviceQueue::enable_notify`] between the
//! `avail_event` store and the `avail.idx` load, and likewise
//! [`DeviceQueue::needs_notify`] and [`DriverQueue::enable_interrupts`] for
//! `used.idx` and `used_event`. With both fences at least one side sees the
//! other's store: either the notifier sees the new event index and
//! notifies, or the waiter sees the new entries and does not wait. The
//! event fields and flags themselves are relaxed atomic words.
//!
//! Field by field:
//!
//! | field | writer | how it is written | how it is read |
//! |---|---|---|---|
//! | descriptors, `avail.ring[]` | driver | plain copies, before the `avail.idx` store | plain copies, after the `avail.idx` load |
//! | `avail.idx` | driver | Release store ([`DriverQueue::publish_avail`]) | Acquire load ([`DeviceQueue::pop_avail_into`], [`DeviceQueue::enable_notify`]) |
//! | `used.ring[]`, buffer contents | device | plain copies, before the `used.idx` store | plain copies, after the `used.idx` load |
//! | `used.idx` | device | Release store ([`DeviceQueue::publish_used`]) | Acquire load ([`DriverQueue::pop_used`], [`DriverQueue::enable_interrupts`]) |
//! | `avail.flags`, `used_event` | driver | relaxed store, then SeqCst fence | SeqCst fence, then relaxed load ([`DeviceQueue::needs_notify`]) |
//! | `used.flags`, `avail_event` | device | relaxed store, then SeqCst fence | SeqCst fence, then relaxed load ([`DriverQueue::needs_kick`]) |
//!
//! With `VIRTIO_F_EVENT_IDX`, a side notifies when the index it published
//! moved from `old` past the other side's event index `event`:
//! [`need_event`]`(event, new, old)` is `new - event - 1 < new - old` in
//! 16-bit arithmetic, the specification's `vring_need_event`.
//!
//! # Trusting nothing
//!
//! The device walks a chain with a bound: at most `N` descriptors in the
//! table (more means a loop), at most the table's length in an indirect
//! table, at most `N` buffers in all; every `next` is checked against the
//! table, every buffer and indirect table against guest memory. A chain
//! that breaks a rule is a [`ChainError`] naming the rule, counted in
//! [`DeviceQueueStats`] and returned to the driver as used with length 0.
//! The driver keeps its own copy of the free list and of each chain's
//! descriptors, so a device that overwrites the table cannot corrupt it, and
//! checks each used entry: an id that is not the head of a chain in flight,
//! or a length above the chain's writable bytes, is an error, counted in
//! [`DriverQueueStats`]. An index that moves further than possible is an
//! error on both sides, and that side then takes nothing from the ring.
//!
//! A buffer must lie inside one guest memory region (see
//! [`memory`](super::memory)).

use super::memory::{Area, GuestMemory};
use super::{
    ChainError, ChainErrorReason, VIRTIO_F_EVENT_IDX, VIRTIO_F_IN_ORDER, VIRTIO_F_INDIRECT_DESC,
    VirtioError, has_feature,
};
use crate::sync::{Arc, Ordering};

/// Descriptor flag: the chain goes on at `next`.
pub const VIRTQ_DESC_F_NEXT: u16 = 1;
/// Descriptor flag: the buffer is device-writable (else device-readable).
pub const VIRTQ_DESC_F_WRITE: u16 = 2;
/// Descriptor flag: the buffer is a table of descriptors (2.7.5.3).
pub const VIRTQ_DESC_F_INDIRECT: u16 = 4;
/// Available ring flag: the driver asks for no used buffer notifications
/// (without `VIRTIO_F_EVENT_IDX`).
pub const VIRTQ_AVAIL_F_NO_INTERRUPT: u16 = 1;
/// Used ring flag: the device asks for no available buffer notifications
/// (without `VIRTIO_F_EVENT_IDX`).
pub const VIRTQ_USED_F_NO_NOTIFY: u16 = 1;

/// The largest queue size of a split virtqueue.
pub const MAX_QUEUE_SIZE: u32 = 32768;
/// Bytes of a descriptor.
pub const DESC_SIZE: u64 = 16;
/// Bytes of a used ring entry.
pub const USED_ELEM_SIZE: u64 = 8;
/// Alignment of the descriptor table.
pub const DESC_TABLE_ALIGN: u64 = 16;
/// Alignment of the available ring.
pub const AVAIL_RING_ALIGN: u64 = 2;
/// Alignment of the used ring.
pub const USED_RING_ALIGN: u64 = 4;

/// `size` as a queue size: a power of two from 1 to 32768, else
/// [`VirtioError::BadQueueSize`].
pub fn check_queue_size(size: u32) -> Result<u16, VirtioError> {
    if size == 0 || size > MAX_QUEUE_SIZE || !size.is_power_of_two() {
        return Err(VirtioError::BadQueueSize(size));
    }
    Ok(size as u16)
}

/// The specification's `vring_need_event`: whether moving an index from
/// `old` to `new` passed `event_idx` (`event_idx` in `old..new`, modulo
/// 2^16), so that the other side asked to be notified.
#[inline]
pub fn need_event(event_idx: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event_idx).wrapping_sub(1) < new.wrapping_sub(old)
}

/// A SeqCst fence: orders a store before it ahead of a load after it, the
/// store-then-load of the notification handshake (module docs). On x86-64
/// it is a locked `or` of 0 into the word at the top of the stack, as
/// Linux's `smp_mb` is there: a locked instruction is a full barrier for
/// ordinary memory (no load or store passes it either way), and costs
/// less than `mfence`, which also waits for non-temporal and
/// write-combining stores, of which the rings have none. Under loom, and
/// elsewhere, the fence itself.
#[inline(always)]
pub(crate) fn store_load_fence() {
    // The asm may touch memory, so the compiler moves no access across it,
    // as across a fence; it changes the flags, which are not declared
    // preserved.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: `[rsp]` is this thread's mapped stack; or-ing 0 keeps its value.
    unsafe {
        std::arch::asm!("lock or dword ptr [rsp], 0")
    };
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    crate::sync::fence(Ordering::SeqCst);
}

/// A 16-bit ring index or count held in a 32-bit word, loaded and stored
/// whole. The compiler may load a `u16` field as a 32-bit word when the
/// upper half goes unused; after a 16-bit store to the field, that load
/// cannot take its value from the store buffer and waits until the store,
/// and every store before it, has reached the cache: the descriptor and
/// ring stores waiting on lines the other side holds among them, which
/// made each chain added or taken wait for the one before. Stored whole, the word
/// is forwarded to the next load at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Word16(u32);

impl Word16 {
    #[inline(always)]
    fn new(value: u16) -> Word16 {
        Word16(u32::from(value))
    }

    #[inline(always)]
    fn get(self) -> u16 {
        self.0 as u16
    }

    #[inline(always)]
    fn set(&mut self, value: u16) {
        self.0 = u32::from(value);
    }

    /// Adds `n` to a count (which cannot pass 16 bits).
    #[inline(always)]
    fn add(&mut self, n: u16) {
        self.set(self.get() + n);
    }

    /// Takes `n` from a count (which holds at least `n`).
    #[inline(always)]
    fn sub(&mut self, n: u16) {
        self.set(self.get() - n);
    }

    /// Moves a ring index on by `n`, wrapping at 16 bits.
    #[inline(always)]
    fn advance(&mut self, n: u16) {
        self.set(self.get().wrapping_add(n));
    }

    /// Moves a ring index back by `n`, wrapping at 16 bits.
    #[inline(always)]
    fn retreat(&mut self, n: u16) {
        self.set(self.get().wrapping_sub(n));
    }
}

/// Stores `next` as a ring's index at `at` with Release when it moved past
/// `*published`, which then follows it: one store per batch. The caller's
/// comment names the Acquire it pairs with.
fn publish_index(
    mem: &GuestMemory,
    at: u64,
    next: u16,
    published: &mut Word16,
) -> Result<(), VirtioError> {
    if next != published.get() {
        mem.store_u16(at, next, Ordering::Release)?;
        published.set(next);
    }
    Ok(())
}

/// Whether the other side wants a notification for the indices published
/// since `*notified` (which becomes `published`): with `VIRTIO_F_EVENT_IDX`
/// (`event_at` is the other side's event index), when they passed it
/// ([`need_event`]); otherwise when anything was published and the other
/// side's flags at `flags.0` lack the suppressing bit `flags.1`. The caller
/// has fenced between its index store and these loads.
fn wants_notification(
    mem: &GuestMemory,
    event_at: Option<u64>,
    flags: (u64, u16),
    published: u16,
    notified: &mut Word16,
) -> Result<bool, VirtioError> {
    let old = notified.get();
    notified.set(published);
    match event_at {
        Some(at) => Ok(need_event(
            mem.load_u16(at, Ordering::Relaxed)?,
            published,
            old,
        )),
        None => {
            let (at, suppress) = flags;
            Ok(published != old && mem.load_u16(at, Ordering::Relaxed)? & suppress == 0)
        }
    }
}

/// One entry of a descriptor table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// Guest physical address of the buffer.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u32,
    /// [`VIRTQ_DESC_F_NEXT`], [`VIRTQ_DESC_F_WRITE`], [`VIRTQ_DESC_F_INDIRECT`].
    pub flags: u16,
    /// The next descriptor, with [`VIRTQ_DESC_F_NEXT`].
    pub next: u16,
}

impl Descriptor {
    /// The 16 bytes in memory.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..14].copy_from_slice(&self.flags.to_le_bytes());
        b[14..16].copy_from_slice(&self.next.to_le_bytes());
        b
    }

    /// The descriptor in these 16 bytes.
    pub fn from_bytes(b: [u8; 16]) -> Descriptor {
        Descriptor {
            addr: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            flags: u16::from_le_bytes([b[12], b[13]]),
            next: u16::from_le_bytes([b[14], b[15]]),
        }
    }
}

/// Reads the descriptor at `gpa`: two relaxed 8-byte loads where it is
/// 8-aligned (a queue's table always is; an indirect table may not be),
/// a copy otherwise.
fn read_desc(mem: &GuestMemory, gpa: u64) -> Result<Descriptor, VirtioError> {
    if gpa.is_multiple_of(8) {
        let addr = mem.load_u64(gpa)?;
        let rest = mem.load_u64(gpa + 8)?;
        return Ok(Descriptor {
            addr,
            len: rest as u32,
            flags: (rest >> 32) as u16,
            next: (rest >> 48) as u16,
        });
    }
    let mut raw = [0u8; 16];
    mem.read_into(gpa, &mut raw)?;
    Ok(Descriptor::from_bytes(raw))
}

/// Writes `desc` at the 16-aligned `gpa` of a queue's table: two relaxed
/// 8-byte stores, published by the avail index's Release store.
fn write_desc(mem: &GuestMemory, gpa: u64, desc: Descriptor) -> Result<(), VirtioError> {
    let rest = u64::from(desc.len) | (u64::from(desc.flags) << 32) | (u64::from(desc.next) << 48);
    mem.store_u64(gpa, desc.addr)?;
    mem.store_u64(gpa + 8, rest)
}

/// Where a split virtqueue's three areas are, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLayout {
    size: u16,
    desc_table: u64,
    avail_ring: u64,
    used_ring: u64,
}

impl QueueLayout {
    /// A queue of `size` entries with its areas at these guest physical
    /// addresses. Refused: a bad size ([`check_queue_size`]), an area not
    /// aligned as the specification asks ([`VirtioError::Misaligned`]), an
    /// area whose end overflows the address space.
    pub fn new(
        size: u32,
        desc_table: u64,
        avail_ring: u64,
        used_ring: u64,
    ) -> Result<QueueLayout, VirtioError> {
        let size = check_queue_size(size)?;
        for (gpa, align, len) in [
            (desc_table, DESC_TABLE_ALIGN, Self::desc_table_len(size)),
            (avail_ring, AVAIL_RING_ALIGN, Self::avail_ring_len(size)),
            (used_ring, USED_RING_ALIGN, Self::used_ring_len(size)),
        ] {
            if !gpa.is_multiple_of(align) {
                return Err(VirtioError::Misaligned { gpa, align });
            }
            if gpa.checked_add(len).is_none() {
                return Err(VirtioError::OutsideMemory { gpa, len });
            }
        }
        Ok(QueueLayout {
            size,
            desc_table,
            avail_ring,
            used_ring,
        })
    }

    /// The three areas packed one after the other from `base` (16-aligned):
    /// the table, the available ring, then the used ring at the next
    /// 4-aligned address. [`end`](Self::end) is where they stop.
    pub fn contiguous(base: u64, size: u32) -> Result<QueueLayout, VirtioError> {
        let n = check_queue_size(size)?;
        let avail = base.saturating_add(Self::desc_table_len(n));
        let used = avail
            .saturating_add(Self::avail_ring_len(n))
            .next_multiple_of(USED_RING_ALIGN);
        QueueLayout::new(size, base, avail, used)
    }

    /// Bytes of the descriptor table of a queue of `size`.
    pub const fn desc_table_len(size: u16) -> u64 {
        DESC_SIZE * size as u64
    }

    /// Bytes of the available ring (with `used_event`).
    pub const fn avail_ring_len(size: u16) -> u64 {
        6 + 2 * size as u64
    }

    /// Bytes of the used ring (with `avail_event`).
    pub const fn used_ring_len(size: u16) -> u64 {
        6 + USED_ELEM_SIZE * size as u64
    }

    /// The queue size.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// Address of the descriptor table.
    pub fn desc_table(&self) -> u64 {
        self.desc_table
    }

    /// Address of the available ring.
    pub fn avail_ring(&self) -> u64 {
        self.avail_ring
    }

    /// Address of the used ring.
    pub fn used_ring(&self) -> u64 {
        self.used_ring
    }

    /// The first address past the highest of the three areas.
    pub fn end(&self) -> u64 {
        let n = self.size;
        (self.desc_table + Self::desc_table_len(n))
            .max(self.avail_ring + Self::avail_ring_len(n))
            .max(self.used_ring + Self::used_ring_len(n))
    }

    /// Ok when each area lies inside one region of `mem`.
    pub fn check_memory(&self, mem: &GuestMemory) -> Result<(), VirtioError> {
        let n = self.size;
        mem.check_range(self.desc_table, Self::desc_table_len(n))?;
        mem.check_range(self.avail_ring, Self::avail_ring_len(n))?;
        mem.check_range(self.used_ring, Self::used_ring_len(n))
    }

    fn mask(&self) -> u16 {
        self.size - 1
    }

    /// Address of descriptor `i` (below the size).
    pub fn desc(&self, i: u16) -> u64 {
        self.desc_table + DESC_SIZE * u64::from(i)
    }

    /// Address of `avail.flags`.
    pub fn avail_flags(&self) -> u64 {
        self.avail_ring
    }

    /// Address of `avail.idx`.
    pub fn avail_idx(&self) -> u64 {
        self.avail_ring + 2
    }

    /// Address of the available ring entry for free-running index `idx`.
    pub fn avail_entry(&self, idx: u16) -> u64 {
        self.avail_ring + 4 + 2 * u64::from(idx & self.mask())
    }

    /// Address of `used_event` (after the available ring's entries).
    pub fn used_event(&self) -> u64 {
        self.avail_ring + 4 + 2 * u64::from(self.size)
    }

    /// Address of `used.flags`.
    pub fn used_flags(&self) -> u64 {
        self.used_ring
    }

    /// Address of `used.idx`.
    pub fn used_idx(&self) -> u64 {
        self.used_ring + 2
    }

    /// Address of the used ring entry for free-running index `idx`.
    pub fn used_entry(&self, idx: u16) -> u64 {
        self.used_ring + 4 + USED_ELEM_SIZE * u64::from(idx & self.mask())
    }

    /// Address of `avail_event` (after the used ring's entries).
    pub fn avail_event(&self) -> u64 {
        self.used_ring + 4 + USED_ELEM_SIZE * u64::from(self.size)
    }
}

/// One buffer of a chain: where, how long, and whether the device writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Guest physical address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Device-writable (else device-readable).
    pub writable: bool,
}

/// A descriptor chain the device took from the available ring, checked:
/// its head and its buffers, readable ones first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain {
    pub(super) head: u16,
    pub(super) segments: Vec<Segment>,
    pub(super) readable_len: u64,
    pub(super) writable_len: u64,
}

impl Chain {
    /// An empty chain, to pass to [`DeviceQueue::pop_avail_into`].
    pub fn new() -> Chain {
        Chain::default()
    }

    /// The head index: what [`DeviceQueue::push_used`] returns.
    pub fn head(&self) -> u16 {
        self.head
    }

    /// The buffers in chain order (indirect tables followed).
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Bytes the device may read.
    pub fn readable_len(&self) -> u64 {
        self.readable_len
    }

    /// Bytes the device may write.
    pub fn writable_len(&self) -> u64 {
        self.writable_len
    }

    pub(super) fn clear(&mut self, head: u16) {
        self.head = head;
        self.segments.clear();
        self.readable_len = 0;
        self.writable_len = 0;
    }

    /// Copies readable bytes, from `offset` in the readable part, into
    /// `dst`; returns how many (fewer than `dst.len()` at the part's end).
    pub fn read(
        &self,
        mem: &GuestMemory,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<usize, VirtioError> {
        let mut skip = offset;
        let mut done = 0;
        for s in self.segments.iter().filter(|s| !s.writable) {
            if done == dst.len() {
                break;
            }
            let len = u64::from(s.len);
            if skip >= len {
                skip -= len;
                continue;
            }
            let take = ((len - skip) as usize).min(dst.len() - done);
            mem.read_into(s.addr + skip, &mut dst[done..done + take])?;
            done += take;
            skip = 0;
        }
        Ok(done)
    }

    /// Copies `src` into the writable part, from `offset` in it; returns how
    /// many bytes (fewer than `src.len()` at the part's end).
    pub fn write(&self, mem: &GuestMemory, offset: u64, src: &[u8]) -> Result<usize, VirtioError> {
        let mut skip = offset;
        let mut done = 0;
        for s in self.segments.iter().filter(|s| s.writable) {
            if done == src.len() {
                break;
            }
            let len = u64::from(s.len);
            if skip >= len {
                skip -= len;
                continue;
            }
            let take = ((len - skip) as usize).min(src.len() - done);
            mem.write_from(s.addr + skip, &src[done..done + take])?;
            done += take;
            skip = 0;
        }
        Ok(done)
    }
}

/// What a [`DeviceQueue`] counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceQueueStats {
    /// Chains taken and found good.
    pub chains: u64,
    /// Chains refused, by reason (indexed by [`ChainErrorReason::index`]).
    pub bad_chains: [u64; ChainErrorReason::ALL.len()],
    /// Available index reads that moved further than the queue size.
    pub index_errors: u64,
}

impl DeviceQueueStats {
    /// Chains refused with `reason`.
    pub fn bad(&self, reason: ChainErrorReason) -> u64 {
        self.bad_chains[reason.index()]
    }

    /// Chains refused, all reasons.
    pub fn bad_total(&self) -> u64 {
        self.bad_chains.iter().sum()
    }
}

/// The device side of a split virtqueue: takes chains from the available
/// ring, returns them on the used ring (see the module docs).
#[derive(Debug)]
pub struct DeviceQueue {
    mem: Arc<GuestMemory>,
    layout: QueueLayout,
    /// The descriptor table, the available ring and the used ring, found in
    /// `mem` once: the words a chain takes and returns are reached without
    /// a region search.
    desc_area: Area,
    avail_area: Area,
    used_area: Area,
    event_idx: bool,
    indirect: bool,
    /// `VIRTIO_F_IN_ORDER`: chains go back in the order they were taken,
    /// and a run of them may go back as one used entry.
    in_order: bool,
    /// The next available ring entry to take.
    last_avail: Word16,
    /// The last `avail.idx` loaded.
    avail_shadow: Word16,
    /// The available ring's entries from `heads_at` on, as
    /// [`prefetch_descs`](Self::prefetch_descs) read them, so that taking
    /// those chains does not load the driver's line again (the driver
    /// writes the next entries beside them meanwhile). An entry below the
    /// index loaded with Acquire keeps its value until its chain has been
    /// taken: its slot is written again only for a chain `size` entries
    /// later, which needs a descriptor that chain or one after it holds.
    heads: Vec<u16>,
    /// The free-running index of `heads[0]`.
    heads_at: Word16,
    /// The next used ring entry to write.
    next_used: Word16,
    /// The last `used.idx` stored.
    published_used: Word16,
    /// `used.idx` at the last `needs_notify`.
    signalled_used: Word16,
    /// Chains taken and not yet returned.
    in_flight: u32,
    stats: DeviceQueueStats,
}

impl DeviceQueue {
    /// The device side of a fresh queue (both indices at 0) at `layout` in
    /// `mem`, with the negotiated `features` (`VIRTIO_F_EVENT_IDX`,
    /// `VIRTIO_F_INDIRECT_DESC` and `VIRTIO_F_IN_ORDER` matter here).
    /// Refused when an area is outside `mem`.
    pub fn new(
        mem: Arc<GuestMemory>,
        layout: QueueLayout,
        features: u64,
    ) -> Result<DeviceQueue, VirtioError> {
        layout.check_memory(&mem)?;
        let size = layout.size;
        let desc_area = mem.area(layout.desc_table, QueueLayout::desc_table_len(size))?;
        let avail_area = mem.area(layout.avail_ring, QueueLayout::avail_ring_len(size))?;
        let used_area = mem.area(layout.used_ring, QueueLayout::used_ring_len(size))?;
        Ok(DeviceQueue {
            mem,
            layout,
            desc_area,
            avail_area,
            used_area,
            event_idx: has_feature(features, VIRTIO_F_EVENT_IDX),
            indirect: has_feature(features, VIRTIO_F_INDIRECT_DESC),
            in_order: has_feature(features, VIRTIO_F_IN_ORDER),
            last_avail: Word16::new(0),
            avail_shadow: Word16::new(0),
            heads: Vec::new(),
            heads_at: Word16::new(0),
            next_used: Word16::new(0),
            published_used: Word16::new(0),
            signalled_used: Word16::new(0),
            in_flight: 0,
            stats: DeviceQueueStats::default(),
        })
    }

    /// The device side of a queue resumed at avail index `base` (vhost-user's
    /// SET_VRING_BASE): the next available entry taken and the next used
    /// entry written are both `base`, as every chain taken before was
    /// returned. Refused as [`new`](Self::new).
    pub fn with_base(
        mem: Arc<GuestMemory>,
        layout: QueueLayout,
        features: u64,
        base: u16,
    ) -> Result<DeviceQueue, VirtioError> {
        let mut queue = DeviceQueue::new(mem, layout, features)?;
        queue.last_avail.set(base);
        queue.avail_shadow.set(base);
        queue.next_used.set(base);
        queue.published_used.set(base);
        queue.signalled_used.set(base);
        Ok(queue)
    }

    /// The guest memory.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// The layout.
    pub fn layout(&self) -> &QueueLayout {
        &self.layout
    }

    /// What the queue counted.
    pub fn stats(&self) -> &DeviceQueueStats {
        &self.stats
    }

    /// The next available ring index the device takes.
    pub fn last_avail_idx(&self) -> u16 {
        self.last_avail.get()
    }

    /// Chains taken and not yet returned with [`push_used`](Self::push_used).
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Gives back the last `n` chains taken, none of them returned yet and
    /// none refused since: the next takes find them again, as the driver
    /// left them (a device that took a frame's buffers and found too few
    /// puts them back and waits for more). Refused (returns
    /// [`VirtioError::NothingInFlight`], nothing changed) when fewer than
    /// `n` are in flight.
    pub fn untake(&mut self, n: u16) -> Result<(), VirtioError> {
        if u32::from(n) > self.in_flight {
            return Err(VirtioError::NothingInFlight);
        }
        self.last_avail.retreat(n);
        self.heads.clear();
        self.in_flight -= u32::from(n);
        self.stats.chains -= u64::from(n);
        Ok(())
    }

    /// Takes the next chain into `chain` (reusing its allocation). Ok(true)
    /// with a good chain, Ok(false) when the ring is empty,
    /// [`VirtioError::Chain`] for a refused chain (already returned as used
    /// with length 0 and counted; take the next one), and
    /// [`VirtioError::AvailIndexJump`] when the driver's index is
    /// impossible (nothing taken).
    ///
    /// With `VIRTIO_F_IN_ORDER` a refused chain would go back ahead of the
    /// chains taken before it, so while any is in flight it is left in the
    /// ring and Ok(false) returned: once they are returned, the next take
    /// refuses it.
    pub fn pop_avail_into(&mut self, chain: &mut Chain) -> Result<bool, VirtioError> {
        if self.last_avail.get() == self.avail_shadow.get() {
            // Acquire: pairs with the Release of `DriverQueue::publish_avail`,
            // so the ring entries and descriptors below it are complete.
            let idx = self
                .mem
                .area_load_u16(&self.avail_area, 2, Ordering::Acquire)?;
            if idx.wrapping_sub(self.last_avail.get()) > self.layout.size {
                self.stats.index_errors += 1;
                return Err(VirtioError::AvailIndexJump {
                    last: self.last_avail.get(),
                    idx,
                });
            }
            self.avail_shadow.set(idx);
            if idx == self.last_avail.get() {
                return Ok(false);
            }
        }
        let ahead = usize::from(self.last_avail.get().wrapping_sub(self.heads_at.get()));
        let head = match self.heads.get(ahead) {
            Some(&head) => {
                if ahead + 1 == self.heads.len() {
                    // All taken: the copy is not kept past them.
                    self.heads.clear();
                }
                head
            }
            // Relaxed: the entry is below the index loaded with Acquire.
            None => self.mem.area_load_u16(
                &self.avail_area,
                self.avail_entry_at(self.last_avail.get()),
                Ordering::Relaxed,
            )?,
        };
        self.last_avail.advance(1);
        match self.walk(head, chain) {
            Ok(()) => {
                self.in_flight += 1;
                self.stats.chains += 1;
                Ok(true)
            }
            Err(_) if self.in_order && self.in_flight > 0 => {
                self.last_avail.retreat(1);
                chain.clear(head);
                Ok(false)
            }
            Err(reason) => {
                self.stats.bad_chains[reason.index()] += 1;
                chain.clear(head);
                self.write_used(head, 0)?;
                Err(VirtioError::Chain(ChainError { head, reason }))
            }
        }
    }

    /// Loads `avail.idx` (Acquire, as [`pop_avail_into`](Self::pop_avail_into)
    /// does) and returns how many chains the driver has made available
    /// that the device has not taken yet, so that a burst knows up front
    /// how many it may take; the chains are then taken without loading the
    /// index again. [`VirtioError::AvailIndexJump`] when the driver's index
    /// is impossible (counted, nothing changed).
    pub fn ready(&mut self) -> Result<u16, VirtioError> {
        // Acquire: as in `pop_avail_into`.
        let idx = self
            .mem
            .area_load_u16(&self.avail_area, 2, Ordering::Acquire)?;
        let ready = idx.wrapping_sub(self.last_avail.get());
        if ready > self.layout.size {
            self.stats.index_errors += 1;
            return Err(VirtioError::AvailIndexJump {
                last: self.last_avail.get(),
                idx,
            });
        }
        self.avail_shadow.set(idx);
        Ok(ready)
    }

    /// Prefetches the head descriptors of the next `n` chains (at most
    /// those [`ready`](Self::ready) saw), so that their cache misses are
    /// outstanding together before the chains are taken one by one, and
    /// keeps the heads read for the takes. Nothing is taken or checked
    /// here, and an entry that makes no sense is not prefetched (a chain
    /// is checked in full when it is taken).
    pub fn prefetch_descs(&mut self, n: u16) {
        let n = n.min(self.avail_shadow.get().wrapping_sub(self.last_avail.get()));
        self.heads.clear();
        self.heads_at.set(self.last_avail.get());
        for ahead in 0..n {
            let entry = self.avail_entry_at(self.last_avail.get().wrapping_add(ahead));
            // Relaxed: below the index loaded with Acquire.
            let Ok(head) = self
                .mem
                .area_load_u16(&self.avail_area, entry, Ordering::Relaxed)
            else {
                break;
            };
            self.heads.push(head);
            if head < self.layout.size {
                self.mem
                    .area_prefetch(&self.desc_area, DESC_SIZE * u64::from(head), false);
            }
        }
    }

    /// Whether `VIRTIO_F_IN_ORDER` was negotiated: chains go back in the
    /// order taken, and chains the device only read go back as one used
    /// entry ([`push_used_read`](Self::push_used_read)).
    pub fn in_order(&self) -> bool {
        self.in_order
    }

    /// Asks for the used ring's lines that the next `n` returns write, in
    /// the exclusive state (the driver reads them, so each is in its
    /// cache), so that the stores of a burst's used entries do not wait
    /// for them one after the other. A hint, as
    /// [`prefetch_descs`](Self::prefetch_descs).
    pub fn prefetch_used(&self, n: u16) {
        let n = n.min(self.layout.size);
        // One entry in eight (a line holds eight), and the last one.
        for ahead in (0..n).step_by(8).chain(n.checked_sub(1)) {
            let entry = self.used_entry_at(self.next_used.get().wrapping_add(ahead));
            self.mem.area_prefetch(&self.used_area, entry, true);
        }
    }

    /// Takes the next chain: `Ok(None)` when the ring is empty; errors as
    /// [`pop_avail_into`](Self::pop_avail_into).
    pub fn pop_avail(&mut self) -> Result<Option<Chain>, VirtioError> {
        let mut chain = Chain::new();
        Ok(self.pop_avail_into(&mut chain)?.then_some(chain))
    }

    /// Follows the chain at `head`, checking every rule (module docs).
    fn walk(&self, head: u16, chain: &mut Chain) -> Result<(), ChainErrorReason> {
        use ChainErrorReason::*;
        chain.clear(head);
        let size = u32::from(self.layout.size);
        if u32::from(head) >= size {
            return Err(HeadOutOfRange);
        }
        let mem = &*self.mem;
        // The table being walked, its length in entries, and whether it is
        // an indirect one.
        let mut table = self.layout.desc_table;
        let mut table_len = size;
        let mut in_indirect = false;
        let mut idx = head;
        // Descriptors visited in this table; buffers in the whole chain.
        let mut steps = 0u32;
        let mut buffers = 0u32;
        let mut seen_writable = false;
        loop {
            steps += 1;
            if steps > table_len {
                return Err(Loop);
            }
            let desc = if in_indirect {
                read_desc(mem, table + DESC_SIZE * u64::from(idx))
            } else {
                self.read_table_desc(idx)
            }
            .map_err(|_| OutsideMemory)?;
            if desc.flags & VIRTQ_DESC_F_INDIRECT != 0 {
                if in_indirect {
                    return Err(NestedIndirect);
                }
                if !self.indirect {
                    return Err(IndirectNotNegotiated);
                }
                if desc.flags & VIRTQ_DESC_F_NEXT != 0 {
                    return Err(IndirectWithNext);
                }
                if desc.len == 0 || !u64::from(desc.len).is_multiple_of(DESC_SIZE) {
                    return Err(IndirectBadLength);
                }
                let entries = desc.len / DESC_SIZE as u32;
                if buffers + entries > size {
                    return Err(TooLong);
                }
                mem.check_range(desc.addr, u64::from(desc.len))
                    .map_err(|_| OutsideMemory)?;
                table = desc.addr;
                table_len = entries;
                in_indirect = true;
                idx = 0;
                steps = 0;
                continue;
            }
            buffers += 1;
            if buffers > size {
                return Err(TooLong);
            }
            mem.check_range(desc.addr, u64::from(desc.len))
                .map_err(|_| OutsideMemory)?;
            let writable = desc.flags & VIRTQ_DESC_F_WRITE != 0;
            if writable {
                seen_writable = true;
                chain.writable_len += u64::from(desc.len);
            } else if seen_writable {
                return Err(ReadableAfterWritable);
            } else {
                chain.readable_len += u64::from(desc.len);
            }
            chain.segments.push(Segment {
                addr: desc.addr,
                len: desc.len,
                writable,
            });
            if desc.flags & VIRTQ_DESC_F_NEXT == 0 {
                return Ok(());
            }
            if u32::from(desc.next) >= table_len {
                return Err(NextOutOfRange);
            }
            idx = desc.next;
        }
    }

    /// The offset of the available ring entry for free-running index `idx`
    /// in the available ring.
    #[inline]
    fn avail_entry_at(&self, idx: u16) -> u64 {
        4 + 2 * u64::from(idx & self.layout.mask())
    }

    /// The offset of the used ring entry for free-running index `idx` in
    /// the used ring.
    #[inline]
    fn used_entry_at(&self, idx: u16) -> u64 {
        4 + USED_ELEM_SIZE * u64::from(idx & self.layout.mask())
    }

    /// Descriptor `i` of the queue's table (the table is 16-aligned): two
    /// relaxed 8-byte loads, below the index loaded with Acquire.
    #[inline]
    fn read_table_desc(&self, i: u16) -> Result<Descriptor, VirtioError> {
        let at = DESC_SIZE * u64::from(i);
        let addr = self.mem.area_load_u64(&self.desc_area, at)?;
        let rest = self.mem.area_load_u64(&self.desc_area, at + 8)?;
        Ok(Descriptor {
            addr,
            len: rest as u32,
            flags: (rest >> 32) as u16,
            next: (rest >> 48) as u16,
        })
    }

    /// Writes a used entry (not yet published).
    fn write_used(&mut self, head: u16, len: u32) -> Result<(), VirtioError> {
        // Two 4-byte words (a used entry is 4-aligned): its id, its length.
        let entry = self.used_entry_at(self.next_used.get());
        self.mem
            .area_store_u32(&self.used_area, entry, u32::from(head))?;
        self.mem.area_store_u32(&self.used_area, entry + 4, len)?;
        self.next_used.advance(1);
        Ok(())
    }

    /// Returns the chain at `head` with `len` bytes written into it; seen by
    /// the driver after [`publish_used`](Self::publish_used). Refused with
    /// [`VirtioError::NothingInFlight`] when every chain taken has been
    /// returned.
    pub fn push_used(&mut self, head: u16, len: u32) -> Result<(), VirtioError> {
        if self.in_flight == 0 {
            return Err(VirtioError::NothingInFlight);
        }
        self.write_used(head, len)?;
        self.in_flight -= 1;
        Ok(())
    }

    /// Returns `chains`, the oldest chains in flight in the order they were
    /// taken, as chains the device wrote nothing into (length 0: the
    /// buffers it read). With `VIRTIO_F_IN_ORDER` they go back as one used
    /// entry in the first of their slots, naming the last chain's head,
    /// and `used.idx` moves past them all (VIRTIO 1.2, 2.7.9): one entry
    /// written instead of a line of them per burst; otherwise as an entry
    /// each. Refused with
    /// [`VirtioError::NothingInFlight`], nothing returned, when fewer than
    /// `chains.len()` are in flight.
    pub fn push_used_read(&mut self, chains: &[Chain]) -> Result<(), VirtioError> {
        let Some(last) = chains.last() else {
            return Ok(());
        };
        let n = u32::try_from(chains.len()).map_err(|_| VirtioError::NothingInFlight)?;
        if n > self.in_flight {
            return Err(VirtioError::NothingInFlight);
        }
        if self.in_order {
            // One entry, in the run's first slot, naming its last chain;
            // the driver reads it there, counts the run's chains up to
            // that head and looks for the next entry after the run (`n` is
            // at most `in_flight`, at most the queue size).
            let entry = self.used_entry_at(self.next_used.get());
            self.mem
                .area_store_u32(&self.used_area, entry, u32::from(last.head))?;
            self.mem.area_store_u32(&self.used_area, entry + 4, 0)?;
            self.next_used.advance(n as u16);
        } else {
            for chain in chains {
                self.write_used(chain.head, 0)?;
            }
        }
        self.in_flight -= n;
        Ok(())
    }

    /// Publishes the used entries written since the last call: one store of
    /// `used.idx`.
    pub fn publish_used(&mut self) -> Result<(), VirtioError> {
        // Release: pairs with the Acquire of `DriverQueue::pop_used`; the
        // entries and the buffers' contents are written before it.
        publish_index(
            &self.mem,
            self.layout.used_idx(),
            self.next_used.get(),
            &mut self.published_used,
        )
    }

    /// Whether the driver wants a used buffer notification for what was
    /// published since the last call: with `VIRTIO_F_EVENT_IDX`, when
    /// `used.idx` passed `used_event` ([`need_event`]); otherwise when
    /// anything was published and the driver has not set
    /// [`VIRTQ_AVAIL_F_NO_INTERRUPT`].
    pub fn needs_notify(&mut self) -> Result<bool, VirtioError> {
        // Nothing published since the last call: no notification is due
        // either way (`need_event` with equal old and new indices is
        // false), so the fence and the load of the driver's line are
        // skipped, as on every empty poll.
        if self.published_used.get() == self.signalled_used.get() {
            return Ok(false);
        }
        // SeqCst fence: orders the `used.idx` store of `publish_used` before
        // the event load below; pairs with the fence of
        // `DriverQueue::enable_interrupts` (module docs).
        store_load_fence();
        wants_notification(
            &self.mem,
            self.event_idx.then(|| self.layout.used_event()),
            (self.layout.avail_flags(), VIRTQ_AVAIL_F_NO_INTERRUPT),
            self.published_used.get(),
            &mut self.signalled_used,
        )
    }

    /// Asks the driver not to send available buffer notifications (the
    /// device polls): sets [`VIRTQ_USED_F_NO_NOTIFY`] without
    /// `VIRTIO_F_EVENT_IDX`; with it, leaving `avail_event` behind has the
    /// same effect, so nothing is written.
    pub fn disable_notify(&mut self) -> Result<(), VirtioError> {
        if !self.event_idx {
            self.mem.store_u16(
                self.layout.used_flags(),
                VIRTQ_USED_F_NO_NOTIFY,
                Ordering::Relaxed,
            )?;
        }
        Ok(())
    }

    /// Asks the driver for a notification at its next available chain
    /// (`avail_event` set to the device's position, or the flag cleared),
    /// then re-reads `avail.idx`: true when chains arrived meanwhile, so the
    /// caller polls again instead of waiting.
    pub fn enable_notify(&mut self) -> Result<bool, VirtioError> {
        if self.event_idx {
            self.mem.store_u16(
                self.layout.avail_event(),
                self.last_avail.get(),
                Ordering::Relaxed,
            )?;
        } else {
            self.mem
                .store_u16(self.layout.used_flags(), 0, Ordering::Relaxed)?;
        }
        // SeqCst fence: the store above before the index load below; pairs
        // with the fence of `DriverQueue::needs_kick`.
        store_load_fence();
        let idx = self
            .mem
            .load_u16(self.layout.avail_idx(), Ordering::Acquire)?;
        Ok(idx != self.last_avail.get())
    }

    /// Sets `avail_event` (with `VIRTIO_F_EVENT_IDX`): the driver notifies
    /// when its `avail.idx` passes `idx`. A SeqCst fence follows the store,
    /// as in [`enable_notify`](Self::enable_notify).
    pub fn set_avail_event(&mut self, idx: u16) -> Result<(), VirtioError> {
        self.mem
            .store_u16(self.layout.avail_event(), idx, Ordering::Relaxed)?;
        store_load_fence();
        Ok(())
    }
}

/// A chain the device returned: its head and the bytes it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    /// The head [`DriverQueue::add_chain`] returned.
    pub head: u16,
    /// Bytes the device wrote into the chain's writable buffers.
    pub len: u32,
}

/// What a [`DriverQueue`] counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverQueueStats {
    /// Chains added.
    pub added: u64,
    /// Chains reclaimed.
    pub reclaimed: u64,
    /// Used entries whose id is not the head of a chain in flight.
    pub bad_used_ids: u64,
    /// Used entries whose length exceeds the chain's writable bytes.
    pub bad_used_lens: u64,
    /// Used index reads that moved past more entries than chains in flight.
    pub index_errors: u64,
}

/// The driver side of a split virtqueue: adds chains, reclaims them (see
/// the module docs).
///
/// With `VIRTIO_F_IN_ORDER` (2.7.9) the device uses chains in the order
/// they were made available, and the queue keeps to the rules that come
/// with it: descriptors are taken in table order, wrapping at the end (a
/// chain's `next` is the following descriptor, 0 after the last), so a
/// chain of one descriptor made available in ring slot `i` is descriptor
/// `i`; and a used entry naming a chain that is not the oldest in flight
/// stands for a batch: every chain up to it came back, the index moved by
/// the batch's size, and the entry is in the batch's first slot. The
/// chains before the named one are returned with their whole writable
/// length, as the entry carries the last one's length alone.
///
/// Without it, the free list is first in, first out: chains come back to
/// its tail, so with a device that happens to return chains in order the
/// descriptors go round the table in order all the same.
///
/// An available ring entry is written only when its value changes: once
/// chains of one descriptor go round in order, the entries stop changing
/// and the device's cached copies of their lines stay valid.
#[derive(Debug)]
pub struct DriverQueue {
    mem: Arc<GuestMemory>,
    layout: QueueLayout,
    /// The descriptor table, the available ring and the used ring, found in
    /// `mem` once: their words are reached without a region search.
    desc_area: Area,
    avail_area: Area,
    used_area: Area,
    event_idx: bool,
    indirect: bool,
    /// `VIRTIO_F_IN_ORDER` was negotiated: `next` is the table order and
    /// never changes; the chains in flight are the descriptors from the
    /// oldest one's head up to `free_head`.
    in_order: bool,
    /// The free list's links and, for a chain in flight, its own links (the
    /// driver's copy; the table in guest memory is never read back).
    next: Vec<u16>,
    free_head: Word16,
    /// The free list's last descriptor (when it has any; not in order).
    free_tail: Word16,
    num_free: Word16,
    /// Per head: descriptors of the chain in flight there, 0 when none.
    chain_descs: Vec<u16>,
    /// Per head: writable bytes of the chain in flight there.
    chain_writable: Vec<u64>,
    in_flight: Word16,
    /// The next available ring entry to write.
    avail_idx: Word16,
    /// The last `avail.idx` stored.
    published_avail: Word16,
    /// `avail.idx` at the last `needs_kick`.
    kicked_avail: Word16,
    /// The next used ring entry to read.
    last_used: Word16,
    /// The last `used.idx` loaded.
    used_shadow: Word16,
    /// In order: chains still to return from the batch a used entry stands
    /// for, the head that entry named and the length it carried.
    batch_left: Word16,
    batch_head: Word16,
    batch_len: u32,
    stats: DriverQueueStats,
}

impl DriverQueue {
    /// The driver side of a fresh queue at `layout` in `mem` (zeroed
    /// memory, as the driver allocates it), with the negotiated `features`.
    /// Writes the available ring's flags, index and `used_event` as 0.
    /// Refused when an area is outside `mem`.
    pub fn new(
        mem: Arc<GuestMemory>,
        layout: QueueLayout,
        features: u64,
    ) -> Result<DriverQueue, VirtioError> {
        layout.check_memory(&mem)?;
        let size = layout.size;
        let desc_area = mem.area(layout.desc_table, QueueLayout::desc_table_len(size))?;
        let avail_area = mem.area(layout.avail_ring, QueueLayout::avail_ring_len(size))?;
        let used_area = mem.area(layout.used_ring, QueueLayout::used_ring_len(size))?;
        for gpa in [
            layout.avail_flags(),
            layout.avail_idx(),
            layout.used_event(),
        ] {
            mem.store_u16(gpa, 0, Ordering::Relaxed)?;
        }
        let in_order = has_feature(features, VIRTIO_F_IN_ORDER);
        Ok(DriverQueue {
            mem,
            layout,
            desc_area,
            avail_area,
            used_area,
            event_idx: has_feature(features, VIRTIO_F_EVENT_IDX),
            indirect: has_feature(features, VIRTIO_F_INDIRECT_DESC),
            in_order,
            // In order, the last descriptor's successor is the first.
            next: (1..=size)
                .map(|i| if in_order { i & (size - 1) } else { i })
                .collect(),
            free_head: Word16::new(0),
            free_tail: Word16::new(size - 1),
            num_free: Word16::new(size),
            chain_descs: vec![0; usize::from(size)],
            chain_writable: vec![0; usize::from(size)],
            in_flight: Word16::new(0),
            avail_idx: Word16::new(0),
            published_avail: Word16::new(0),
            kicked_avail: Word16::new(0),
            last_used: Word16::new(0),
            used_shadow: Word16::new(0),
            batch_left: Word16::new(0),
            batch_head: Word16::new(0),
            batch_len: 0,
            stats: DriverQueueStats::default(),
        })
    }

    /// Whether `VIRTIO_F_IN_ORDER` was negotiated (see the type's docs).
    pub fn in_order(&self) -> bool {
        self.in_order
    }

    /// The guest memory.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// The layout.
    pub fn layout(&self) -> &QueueLayout {
        &self.layout
    }

    /// What the queue counted.
    pub fn stats(&self) -> &DriverQueueStats {
        &self.stats
    }

    /// Free descriptors.
    pub fn num_free(&self) -> u16 {
        self.num_free.get()
    }

    /// Chains added and not yet reclaimed.
    pub fn in_flight(&self) -> u16 {
        self.in_flight.get()
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

    /// Adds a chain of `segments` (readable ones first) in descriptors of
    /// the table; returns its head. The device sees it after
    /// [`publish_avail`](Self::publish_avail). Refused, with nothing
    /// written: no segments, a readable one after a writable one, one
    /// outside guest memory, fewer free descriptors than segments.
    pub fn add_chain(&mut self, segments: &[Segment]) -> Result<u16, VirtioError> {
        let writable = self.check_segments(segments)?;
        if segments.len() > usize::from(self.num_free.get()) {
            return Err(VirtioError::NoFreeDescriptors {
                need: segments.len(),
                free: usize::from(self.num_free.get()),
            });
        }
        let head = self.free_head.get();
        let mut idx = head;
        for (i, s) in segments.iter().enumerate() {
            let last = i + 1 == segments.len();
            let mut flags = if s.writable { VIRTQ_DESC_F_WRITE } else { 0 };
            let next = self.next[usize::from(idx)];
            if !last {
                flags |= VIRTQ_DESC_F_NEXT;
            }
            let desc = Descriptor {
                addr: s.addr,
                len: s.len,
                flags,
                next: if last { 0 } else { next },
            };
            self.write_desc(idx, desc)?;
            if !last {
                idx = next;
            }
        }
        self.free_head.set(self.next[usize::from(idx)]);
        self.num_free.sub(segments.len() as u16);
        self.start_chain(head, segments.len() as u16, writable)
    }

    /// Adds one buffer of `len` bytes at `addr`, inside `area` (an area of
    /// this queue's memory, found once for many buffers: the buffers of a
    /// pool), as a chain of one descriptor; returns its head. What
    /// [`add_chain`](Self::add_chain) does for one segment, without a
    /// region search per buffer. Refused, with nothing written: a buffer
    /// outside `area`, an area of another memory, no free descriptor.
    #[inline]
    pub fn add_buffer(
        &mut self,
        area: &Area,
        addr: u64,
        len: u32,
        writable: bool,
    ) -> Result<u16, VirtioError> {
        if !self.mem.area_holds(area, addr, u64::from(len)) {
            return Err(VirtioError::OutsideMemory {
                gpa: addr,
                len: u64::from(len),
            });
        }
        if self.num_free.get() == 0 {
            return Err(VirtioError::NoFreeDescriptors { need: 1, free: 0 });
        }
        let head = self.free_head.get();
        let desc = Descriptor {
            addr,
            len,
            flags: if writable { VIRTQ_DESC_F_WRITE } else { 0 },
            next: 0,
        };
        self.write_desc(head, desc)?;
        self.free_head.set(self.next[usize::from(head)]);
        self.num_free.sub(1);
        self.start_chain(head, 1, if writable { u64::from(len) } else { 0 })
    }

    /// Adds a chain of `segments` as an indirect table written at `table`
    /// (16 bytes per segment, memory the caller owns until the chain comes
    /// back), using one descriptor of the queue; returns its head. Needs
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
        if self.num_free.get() == 0 {
            return Err(VirtioError::NoFreeDescriptors { need: 1, free: 0 });
        }
        let table_len = DESC_SIZE * segments.len() as u64;
        self.mem.check_range(table, table_len)?;
        for (i, s) in segments.iter().enumerate() {
            let last = i + 1 == segments.len();
            let mut flags = if s.writable { VIRTQ_DESC_F_WRITE } else { 0 };
            if !last {
                flags |= VIRTQ_DESC_F_NEXT;
            }
            let desc = Descriptor {
                addr: s.addr,
                len: s.len,
                flags,
                next: if last { 0 } else { i as u16 + 1 },
            };
            self.mem
                .write_from(table + DESC_SIZE * i as u64, &desc.to_bytes())?;
        }
        let head = self.free_head.get();
        let desc = Descriptor {
            addr: table,
            len: table_len as u32,
            flags: VIRTQ_DESC_F_INDIRECT,
            next: 0,
        };
        write_desc(&self.mem, self.layout.desc(head), desc)?;
        self.free_head.set(self.next[usize::from(head)]);
        self.num_free.sub(1);
        self.start_chain(head, 1, writable)
    }

    /// Asks for the descriptor table's lines that the next `n` chains of
    /// one descriptor are written into (at most 64), in the exclusive state
    /// (the device read them, so each is in its cache too), so that the
    /// stores of a burst's descriptors do not wait for those lines one
    /// after the other. With `VIRTIO_F_IN_ORDER` they are the descriptors
    /// from the free run's start; otherwise the free list's first one
    /// alone. A hint: nothing is written.
    pub fn prefetch_free_descs(&self, n: u16) {
        let n = n.min(self.num_free.get()).min(64);
        if n == 0 {
            return;
        }
        if !self.in_order {
            let at = DESC_SIZE * u64::from(self.free_head.get());
            self.mem.area_prefetch(&self.desc_area, at, true);
            return;
        }
        // One descriptor in four (a line holds four), and the last one.
        for ahead in (0..n).step_by(4).chain(std::iter::once(n - 1)) {
            let i = self.free_head.get().wrapping_add(ahead) & self.layout.mask();
            self.mem
                .area_prefetch(&self.desc_area, DESC_SIZE * u64::from(i), true);
        }
    }

    /// Records the chain at `head` as in flight and writes it into the
    /// available ring (not yet published).
    #[inline]
    fn start_chain(&mut self, head: u16, descs: u16, writable: u64) -> Result<u16, VirtioError> {
        self.chain_descs[usize::from(head)] = descs;
        self.chain_writable[usize::from(head)] = writable;
        self.in_flight.add(1);
        self.stats.added += 1;
        // Relaxed: published by the Release store of the index. Written
        // only when it changes (the type's docs).
        let entry = 4 + 2 * u64::from(self.avail_idx.get() & self.layout.mask());
        self.mem.area_update_u16(&self.avail_area, entry, head)?;
        self.avail_idx.advance(1);
        Ok(head)
    }

    /// Writes descriptor `i` of the table (below the size): two relaxed
    /// 8-byte stores, published by the avail index's Release store.
    #[inline]
    fn write_desc(&self, i: u16, desc: Descriptor) -> Result<(), VirtioError> {
        let rest =
            u64::from(desc.len) | (u64::from(desc.flags) << 32) | (u64::from(desc.next) << 48);
        let at = DESC_SIZE * u64::from(i);
        self.mem.area_store_u64(&self.desc_area, at, desc.addr)?;
        self.mem.area_store_u64(&self.desc_area, at + 8, rest)
    }

    /// The offset of the used ring entry for free-running index `idx` in
    /// the used ring.
    #[inline]
    fn used_entry_at(&self, idx: u16) -> u64 {
        4 + USED_ELEM_SIZE * u64::from(idx & self.layout.mask())
    }

    /// Publishes the chains added since the last call: one store of
    /// `avail.idx`.
    pub fn publish_avail(&mut self) -> Result<(), VirtioError> {
        // Release: pairs with the Acquire of `DeviceQueue::pop_avail_into`;
        // the descriptors and ring entries are written before it.
        publish_index(
            &self.mem,
            self.layout.avail_idx(),
            self.avail_idx.get(),
            &mut self.published_avail,
        )
    }

    /// Whether the device wants an available buffer notification (a kick)
    /// for what was published since the last call: with
    /// `VIRTIO_F_EVENT_IDX`, when `avail.idx` passed `avail_event`
    /// ([`need_event`]); otherwise when anything was published and the
    /// device has not set [`VIRTQ_USED_F_NO_NOTIFY`].
    pub fn needs_kick(&mut self) -> Result<bool, VirtioError> {
        // Nothing published since the last call: no kick is due either way
        // (`need_event` with equal old and new indices is false), so the
        // fence and the load of the device's line are skipped.
        if self.published_avail.get() == self.kicked_avail.get() {
            return Ok(false);
        }
        // SeqCst fence (`store_load_fence`): the `avail.idx` store of
        // `publish_avail` before the event load below; pairs with the fence
        // of `DeviceQueue::enable_notify` (module docs).
        store_load_fence();
        wants_notification(
            &self.mem,
            self.event_idx.then(|| self.layout.avail_event()),
            (self.layout.used_flags(), VIRTQ_USED_F_NO_NOTIFY),
            self.published_avail.get(),
            &mut self.kicked_avail,
        )
    }

    /// Reclaims the next chain the device returned: `Ok(None)` when there is
    /// none. A used entry with a bad id ([`VirtioError::BadUsedId`], the
    /// entry skipped) or a bad length ([`VirtioError::BadUsedLen`], the chain
    /// reclaimed all the same) is an error, counted; the next call goes on
    /// with the next entry. An impossible `used.idx` is
    /// [`VirtioError::UsedIndexJump`] and nothing is taken.
    pub fn pop_used(&mut self) -> Result<Option<Used>, VirtioError> {
        if self.in_order {
            return self.pop_used_in_order();
        }
        if !self.used_pending()? {
            return Ok(None);
        }
        // Relaxed: the entry is below the index loaded with Acquire.
        let entry = self.used_entry_at(self.last_used.get());
        let id = self.mem.area_load_u32(&self.used_area, entry)?;
        let len = self.mem.area_load_u32(&self.used_area, entry + 4)?;
        self.last_used.advance(1);
        let descs = usize::try_from(id)
            .ok()
            .and_then(|i| self.chain_descs.get(i))
            .copied()
            .unwrap_or(0);
        if descs == 0 {
            self.stats.bad_used_ids += 1;
            return Err(VirtioError::BadUsedId { id });
        }
        let head = id as u16;
        let writable = self.chain_writable[usize::from(head)];
        self.give_back(head, descs, writable, len)
    }

    /// Reclaims the chain at `head` (`descs` descriptors) and hands it to
    /// the caller with the `len` the device wrote; a `len` beyond the
    /// chain's `writable` bytes is counted and refused
    /// ([`VirtioError::BadUsedLen`]), the chain reclaimed all the same.
    #[inline]
    fn give_back(
        &mut self,
        head: u16,
        descs: u16,
        writable: u64,
        len: u32,
    ) -> Result<Option<Used>, VirtioError> {
        self.reclaim(head, descs);
        if u64::from(len) > writable {
            self.stats.bad_used_lens += 1;
            return Err(VirtioError::BadUsedLen {
                head,
                len,
                writable,
            });
        }
        Ok(Some(Used { head, len }))
    }

    /// Whether a used entry is there to read: `used.idx` is loaded (with
    /// Acquire) when everything below the last one loaded was read. An
    /// impossible index is [`VirtioError::UsedIndexJump`].
    #[inline]
    fn used_pending(&mut self) -> Result<bool, VirtioError> {
        if self.last_used.get() != self.used_shadow.get() {
            return Ok(true);
        }
        self.load_used_idx()
    }

    /// Loads `used.idx` into the shadow; whether a used entry is there to
    /// read. An impossible index is [`VirtioError::UsedIndexJump`].
    #[inline]
    fn load_used_idx(&mut self) -> Result<bool, VirtioError> {
        // Acquire: pairs with the Release of `DeviceQueue::publish_used`,
        // so the entries and the buffers' contents are complete.
        let idx = self
            .mem
            .area_load_u16(&self.used_area, 2, Ordering::Acquire)?;
        if idx.wrapping_sub(self.last_used.get()) > self.in_flight.get() {
            self.stats.index_errors += 1;
            return Err(VirtioError::UsedIndexJump {
                last: self.last_used.get(),
                idx,
            });
        }
        self.used_shadow.set(idx);
        Ok(idx != self.last_used.get())
    }

    /// The head of the oldest chain in flight, in order (some in flight):
    /// the descriptors in flight run up to `free_head`.
    #[inline]
    fn oldest_head(&self) -> u16 {
        self.free_head.get().wrapping_add(self.num_free.get()) & self.layout.mask()
    }

    /// [`pop_used`](Self::pop_used) in order: the oldest chain in flight
    /// comes back, alone or as part of the batch a used entry stands for
    /// (the type's docs).
    fn pop_used_in_order(&mut self) -> Result<Option<Used>, VirtioError> {
        if self.batch_left.get() == 0 {
            if !self.used_pending()? {
                return Ok(None);
            }
            // Relaxed: the entry is below the index loaded with Acquire.
            let entry = self.used_entry_at(self.last_used.get());
            let id = self.mem.area_load_u32(&self.used_area, entry)?;
            let len = self.mem.area_load_u32(&self.used_area, entry + 4)?;
            match self.batch_size(id) {
                Some(size) => {
                    self.batch_left.set(size);
                    self.batch_head.set(id as u16);
                    self.batch_len = len;
                }
                None => {
                    self.last_used.advance(1);
                    self.stats.bad_used_ids += 1;
                    return Err(VirtioError::BadUsedId { id });
                }
            }
        }
        let head = self.oldest_head();
        let descs = self.chain_descs[usize::from(head)];
        let writable = self.chain_writable[usize::from(head)];
        let len = if head == self.batch_head.get() {
            self.batch_len
        } else {
            u32::try_from(writable).unwrap_or(u32::MAX)
        };
        self.batch_left.sub(1);
        self.last_used.advance(1);
        self.give_back(head, descs, writable, len)
    }

    /// In order: takes back up to `heads.len()` of the chains the device
    /// returned, oldest first, writing their heads into `heads`; how many.
    /// Only `used.idx` is read, which with `VIRTIO_F_IN_ORDER` counts the
    /// chains returned whether each has its own used entry or a batch
    /// shares one: the entries themselves, their ids and lengths, are not
    /// read, so this is for chains whose written length does not matter
    /// (device-readable ones, as a transmit queue's). The lines of the used
    /// ring then stay in the device's cache. A queue whose device returns
    /// batches is reclaimed this way or with `pop_used`, not both: once
    /// part of a batch is taken by the index alone, where its entry lies is
    /// not known. Without `VIRTIO_F_IN_ORDER`,
    /// nothing is taken: [`pop_used`](Self::pop_used) reads each entry. An
    /// impossible `used.idx` is [`VirtioError::UsedIndexJump`] and nothing
    /// is taken.
    pub fn pop_used_heads(&mut self, heads: &mut [u16]) -> Result<usize, VirtioError> {
        if !self.in_order || heads.is_empty() || !self.load_used_idx()? {
            return Ok(0);
        }
        let pending = usize::from(self.used_shadow.get().wrapping_sub(self.last_used.get()));
        let n = heads.len().min(pending);
        for slot in &mut heads[..n] {
            let head = self.oldest_head();
            *slot = head;
            self.last_used.advance(1);
            self.reclaim(head, self.chain_descs[usize::from(head)]);
        }
        // A batch whose entry was read already ends among these, or later.
        self.batch_left
            .set(self.batch_left.get().saturating_sub(n as u16));
        Ok(n)
    }

    /// In order: how many chains, from the oldest in flight, the used
    /// entry naming `id` returns; `None` when `id` is not the head of a
    /// chain in flight or the batch is more than the device published.
    #[inline]
    fn batch_size(&self, id: u32) -> Option<u16> {
        let id = u16::try_from(id).ok().filter(|&id| id < self.layout.size)?;
        if self.chain_descs[usize::from(id)] == 0 {
            return None;
        }
        let published = self.used_shadow.get().wrapping_sub(self.last_used.get());
        let mut head = self.oldest_head();
        let mut size = 1;
        // Bounded: one step per chain in flight, the named one among them.
        while head != id {
            if size >= published.min(self.in_flight.get()) {
                return None;
            }
            head = head.wrapping_add(self.chain_descs[usize::from(head)]) & self.layout.mask();
            size += 1;
        }
        Some(size)
    }

    /// The id of the used entry `ahead` entries after the next one
    /// [`pop_used`](Self::pop_used) reads, when the device has published it
    /// already: for prefetching what the driver keeps for that chain. A
    /// hint, checked when the entry is popped.
    pub fn peek_used_id(&self, ahead: u16) -> Option<u16> {
        if self.used_shadow.get().wrapping_sub(self.last_used.get()) <= ahead {
            return None;
        }
        if self.in_order {
            // The chain `ahead` after the oldest: no entry to read.
            let mut head = self.oldest_head();
            for _ in 0..ahead {
                head = head.wrapping_add(self.chain_descs[usize::from(head)]) & self.layout.mask();
            }
            return Some(head);
        }
        let entry = self.used_entry_at(self.last_used.get().wrapping_add(ahead));
        let id = self.mem.area_load_u32(&self.used_area, entry).ok()?;
        u16::try_from(id).ok().filter(|&id| id < self.layout.size)
    }

    /// Puts the `descs` descriptors of the chain at `head` back at the free
    /// list's tail, following the driver's own links; in order, they are
    /// the oldest in flight and join the free run as they are.
    #[inline]
    fn reclaim(&mut self, head: u16, descs: u16) {
        if !self.in_order {
            let mut last = head;
            for _ in 1..descs {
                last = self.next[usize::from(last)];
            }
            if self.num_free.get() == 0 {
                self.free_head.set(head);
            } else {
                self.next[usize::from(self.free_tail.get())] = head;
            }
            self.free_tail.set(last);
        }
        self.num_free.add(descs);
        self.chain_descs[usize::from(head)] = 0;
        self.chain_writable[usize::from(head)] = 0;
        self.in_flight.sub(1);
        self.stats.reclaimed += 1;
    }

    /// Asks the device not to send used buffer notifications (the driver
    /// polls): sets [`VIRTQ_AVAIL_F_NO_INTERRUPT`] without
    /// `VIRTIO_F_EVENT_IDX`; with it, leaving `used_event` behind has the
    /// same effect, so nothing is written.
    pub fn disable_interrupts(&mut self) -> Result<(), VirtioError> {
        if !self.event_idx {
            self.mem.store_u16(
                self.layout.avail_flags(),
                VIRTQ_AVAIL_F_NO_INTERRUPT,
                Ordering::Relaxed,
            )?;
        }
        Ok(())
    }

    /// Asks the device for a notification at its next used chain
    /// (`used_event` set to the driver's position, or the flag cleared),
    /// then re-reads `used.idx`: true when chains came back meanwhile, so
    /// the caller polls again instead of waiting.
    pub fn enable_interrupts(&mut self) -> Result<bool, VirtioError> {
        if self.event_idx {
            self.mem.store_u16(
                self.layout.used_event(),
                self.last_used.get(),
                Ordering::Relaxed,
            )?;
        } else {
            self.mem
                .store_u16(self.layout.avail_flags(), 0, Ordering::Relaxed)?;
        }
        // SeqCst fence: the store above before the index load below; pairs
        // with the fence of `DeviceQueue::needs_notify`.
        store_load_fence();
        let idx = self
            .mem
            .load_u16(self.layout.used_idx(), Ordering::Acquire)?;
        Ok(idx != self.last_used.get())
    }

    /// Sets `used_event` (with `VIRTIO_F_EVENT_IDX`): the device notifies
    /// when its `used.idx` passes `idx`. A SeqCst fence follows the store.
    pub fn set_used_event(&mut self, idx: u16) -> Result<(), VirtioError> {
        self.mem
            .store_u16(self.layout.used_event(), idx, Ordering::Relaxed)?;
        store_load_fence();
        Ok(())
    }
}
