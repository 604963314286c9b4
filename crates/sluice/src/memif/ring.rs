//! A memif ring in shared memory, and copy-mode producers and consumers.
//!
//! # Layout
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | cookie, [`COOKIE`] |
//! | 4 | 2 | flags ([`RING_FLAG_MASK_INT`](super::RING_FLAG_MASK_INT)) |
//! | 6 | 2 | head |
//! | 64 | 2 | tail (a cache line of its own) |
//! | 128 | 16 × 2^log2 | descriptors |
//!
//! A descriptor is flags `u16` ([`DESC_FLAG_NEXT`]),
//! region `u16`, length `u32`, offset `u32`, metadata `u32`, all
//! little-endian. Head and tail are free-running 16-bit counters; a slot is
//! a counter masked by `2^log2 − 1`, so a ring holds at most 2^15 slots for
//! the counters' distance to stay unambiguous (the protocol caps it at 2^14).
//!
//! # Who writes head and who writes tail
//!
//! In memif the client owns every buffer, so in both directions the
//! **client writes head** and the **server writes tail** (DPDK's
//! `rte_eth_memif.c`, copy and zero-copy mode alike):
//!
//! | ring | producer | consumer | head (client) | tail (server) |
//! |---|---|---|---|---|
//! | C2S | client | server | slots the client filled | slots the server has read |
//! | S2C | server | client | empty buffers the client offers | slots the server filled |
//!
//! - C2S: the client fills descriptors from `head`, sets each length (and
//!   NEXT on all but a packet's last), then stores `head` (Release); free
//!   slots are `size − (head − tail)`. The server reads from its last
//!   `tail` up to `head` (Acquire), then stores `tail` (Release).
//! - S2C: the client refills: it sets the length of each free slot to its
//!   buffer size and stores `head` (Release) up to `tail + size`. The
//!   server writes packets from `tail` up to `head` (Acquire), at most each
//!   descriptor's offered length, sets the lengths and stores `tail`
//!   (Release). The client reads from its last seen `tail` up to `tail`
//!   (Acquire), then refills again.
//! - In zero-copy mode (a DPDK client option) the client also rewrites each
//!   descriptor's region and offset to point at its own packet buffers
//!   (regions 1 and up) before publishing it — one more reason every
//!   descriptor is checked on every use.
//!
//! A chained packet takes consecutive slots, so a chain cannot loop: it
//! ends at a descriptor without NEXT, at the consumer's segment limit
//! ([`Consumer::set_limits`], counted as [`RingErrors::too_long`]), or at
//! the last published slot ([`RingErrors::incomplete_chain`]).
//!
//! Each side keeps its own counters rather than reading back the index it
//! writes, so a peer scribbling on the ring cannot steer it; a distance
//! between head and tail larger than the ring is counted
//! ([`RingErrors::bad_index`]) and nothing moves.
//!
//! # Untrusted memory
//!
//! The peer maps the same memory and may write anything at any time. So:
//! head, tail, flags and every descriptor field are read with single atomic
//! loads, each value once, and checked before use; a descriptor's region,
//! offset and length are checked against the mapped region on every use; a
//! descriptor outside its region is counted and its packet dropped, never
//! read or written. Packet bytes are copied with plain memory copies: a
//! misbehaving peer can change a packet's contents while it is copied,
//! nothing more.

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

use super::region::Region;
use super::{COOKIE, DESC_FLAG_NEXT, MAX_LOG2_RING_SIZE, MemifError, Role};

/// The ring header's size: two cache lines.
pub const HEADER_SIZE: usize = 128;
/// A descriptor's size.
pub const DESC_SIZE: usize = 16;

/// Offsets in the ring header.
mod header {
    pub const COOKIE: usize = 0;
    pub const FLAGS: usize = 4;
    pub const HEAD: usize = 6;
    pub const TAIL: usize = 64;
}

/// Offsets in a descriptor.
mod desc {
    pub const FLAGS: usize = 0;
    pub const REGION: usize = 2;
    pub const LENGTH: usize = 4;
    pub const OFFSET: usize = 8;
    pub const METADATA: usize = 12;
}

/// A descriptor's fields, as read from the ring at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// Flags: [`DESC_FLAG_NEXT`] when the packet goes on in the next slot.
    pub flags: u16,
    /// The region holding the buffer.
    pub region: u16,
    /// Bytes of packet in the buffer (or, offered on S2C, its capacity).
    pub length: u32,
    /// The buffer's offset in its region.
    pub offset: u32,
    /// Free for the application; memif itself does not use it.
    pub metadata: u32,
}

/// The regions of a connection, shared by its rings.
pub type Regions = Arc<Vec<Region>>;

/// One ring in shared memory: its header and descriptors, checked to lie
/// inside their region.
///
/// A `Ring` is not `Clone`: the handshake makes one per ring, and one
/// producer or consumer owns it.
pub struct Ring {
    regions: Regions,
    /// The ring header; `HEADER_SIZE + DESC_SIZE << log2` bytes from here lie
    /// in `regions[region]`, 8-byte aligned.
    base: NonNull<u8>,
    region: u16,
    offset: u32,
    log2_size: u8,
}

// SAFETY: `base` points into a mapping kept alive by `regions`; a Ring has
// one owner and every access is an atomic or a raw copy that the protocol
// (head/tail) orders, so moving it to another thread is sound. It is not
// Sync: two threads must not produce or consume on one ring.
unsafe impl Send for Ring {}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("region", &self.region)
            .field("offset", &self.offset)
            .field("log2_size", &self.log2_size)
            .finish()
    }
}

/// Checks that a ring of `2^log2_size` slots at `offset` in region `region`
/// is allowed and fits: a size up to 2^[`MAX_LOG2_RING_SIZE`], an existing
/// region, 8-byte alignment, header and descriptors wholly inside.
pub fn check_fits(
    regions: &[Region],
    region: u16,
    offset: u32,
    log2_size: u8,
) -> Result<(), MemifError> {
    if log2_size > MAX_LOG2_RING_SIZE {
        return Err(MemifError::BadRingSize(log2_size));
    }
    let fits = regions.get(usize::from(region)).is_some_and(|mapped| {
        let bytes = (HEADER_SIZE + (DESC_SIZE << log2_size)) as u64;
        offset.is_multiple_of(8) && mapped.contains(u64::from(offset), bytes)
    });
    if fits {
        Ok(())
    } else {
        Err(MemifError::RingOutOfBounds { region, offset })
    }
}

impl Ring {
    /// The ring at `offset` in region `region`, with `2^log2_size` slots.
    ///
    /// Refused: a size over 2^[`MAX_LOG2_RING_SIZE`], a region that does not
    /// exist, a ring not 8-byte aligned or not wholly inside its region.
    pub(crate) fn new(
        regions: Regions,
        region: u16,
        offset: u32,
        log2_size: u8,
    ) -> Result<Ring, MemifError> {
        check_fits(&regions, region, offset, log2_size)?;
        let mapped = &regions[usize::from(region)];
        // SAFETY: the ring lies inside the mapping (`check_fits`).
        let base = unsafe { mapped.as_ptr().add(offset as usize) };
        let base = NonNull::new(base).ok_or(MemifError::RingOutOfBounds { region, offset })?;
        Ok(Ring {
            regions,
            base,
            region,
            offset,
            log2_size,
        })
    }

    /// The number of slots.
    pub fn size(&self) -> u16 {
        1 << self.log2_size
    }

    /// log2 of the number of slots.
    pub fn log2_size(&self) -> u8 {
        self.log2_size
    }

    /// The region holding the ring, and the ring's offset in it.
    pub fn position(&self) -> (u16, u32) {
        (self.region, self.offset)
    }

    /// The connection's regions.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    fn u16_at(&self, offset: usize) -> &AtomicU16 {
        debug_assert!(
            offset.is_multiple_of(2) && offset + 2 <= HEADER_SIZE + (DESC_SIZE << self.log2_size)
        );
        // The mapping lives as long as `self.regions`; shared memory is only
        // ever accessed atomically at this address.
        // SAFETY: `offset` is inside the ring and 2-aligned on an 8-aligned base.
        unsafe { AtomicU16::from_ptr(self.base.as_ptr().add(offset).cast()) }
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(
            offset.is_multiple_of(4) && offset + 4 <= HEADER_SIZE + (DESC_SIZE << self.log2_size)
        );
        // SAFETY: as for `u16_at`, 4-aligned.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(offset).cast()) }
    }

    /// The header's cookie.
    pub fn cookie(&self) -> u32 {
        u32::from_le(self.u32_at(header::COOKIE).load(Ordering::Relaxed))
    }

    /// Writes the header's cookie.
    pub fn set_cookie(&self, cookie: u32) {
        self.u32_at(header::COOKIE)
            .store(cookie.to_le(), Ordering::Relaxed);
    }

    /// Checks the cookie is [`COOKIE`].
    pub fn check_cookie(&self) -> Result<(), MemifError> {
        match self.cookie() {
            COOKIE => Ok(()),
            other => Err(MemifError::BadCookie(other)),
        }
    }

    /// The header's flags.
    pub fn flags(&self) -> u16 {
        u16::from_le(self.u16_at(header::FLAGS).load(Ordering::Relaxed))
    }

    /// Writes the header's flags.
    pub fn set_flags(&self, flags: u16) {
        self.u16_at(header::FLAGS)
            .store(flags.to_le(), Ordering::Relaxed);
    }

    /// Head, loaded with Acquire: what the client published.
    pub fn head(&self) -> u16 {
        u16::from_le(self.u16_at(header::HEAD).load(Ordering::Acquire))
    }

    /// Stores head with Release: what this side wrote before is visible to
    /// a peer that loads it.
    pub fn set_head(&self, head: u16) {
        self.u16_at(header::HEAD)
            .store(head.to_le(), Ordering::Release);
    }

    /// Tail, loaded with Acquire.
    pub fn tail(&self) -> u16 {
        u16::from_le(self.u16_at(header::TAIL).load(Ordering::Acquire))
    }

    /// Stores tail with Release.
    pub fn set_tail(&self, tail: u16) {
        self.u16_at(header::TAIL)
            .store(tail.to_le(), Ordering::Release);
    }

    fn desc_offset(&self, slot: u16) -> usize {
        HEADER_SIZE + usize::from(slot & (self.size() - 1)) * DESC_SIZE
    }

    /// The descriptor of `slot` (masked by the ring size).
    pub fn descriptor(&self, slot: u16) -> Descriptor {
        let at = self.desc_offset(slot);
        Descriptor {
            flags: u16::from_le(self.u16_at(at + desc::FLAGS).load(Ordering::Relaxed)),
            region: u16::from_le(self.u16_at(at + desc::REGION).load(Ordering::Relaxed)),
            length: u32::from_le(self.u32_at(at + desc::LENGTH).load(Ordering::Relaxed)),
            offset: u32::from_le(self.u32_at(at + desc::OFFSET).load(Ordering::Relaxed)),
            metadata: u32::from_le(self.u32_at(at + desc::METADATA).load(Ordering::Relaxed)),
        }
    }

    /// Writes the descriptor of `slot` (masked by the ring size).
    pub fn set_descriptor(&self, slot: u16, d: Descriptor) {
        let at = self.desc_offset(slot);
        self.u16_at(at + desc::FLAGS)
            .store(d.flags.to_le(), Ordering::Relaxed);
        self.u16_at(at + desc::REGION)
            .store(d.region.to_le(), Ordering::Relaxed);
        self.u32_at(at + desc::LENGTH)
            .store(d.length.to_le(), Ordering::Relaxed);
        self.u32_at(at + desc::OFFSET)
            .store(d.offset.to_le(), Ordering::Relaxed);
        self.u32_at(at + desc::METADATA)
            .store(d.metadata.to_le(), Ordering::Relaxed);
    }

    /// Writes only the flags and length of `slot`'s descriptor.
    fn set_flags_length(&self, slot: u16, flags: u16, length: u32) {
        let at = self.desc_offset(slot);
        self.u16_at(at + desc::FLAGS)
            .store(flags.to_le(), Ordering::Relaxed);
        self.u32_at(at + desc::LENGTH)
            .store(length.to_le(), Ordering::Relaxed);
    }

    /// Asks the CPU for the first cache line of the buffer that `slot`'s
    /// descriptor names, so its miss overlaps other work. The descriptor is
    /// not checked: a prefetch never faults, whatever the address.
    ///
    /// `write`: the line is asked for to be written (x86's PREFETCHW), so a
    /// copy of it in the peer's cache is given up at once rather than on the
    /// first store.
    fn prefetch_buffer(&self, slot: u16, write: bool) {
        let at = self.desc_offset(slot);
        let region = u16::from_le(self.u16_at(at + desc::REGION).load(Ordering::Relaxed));
        let offset = u32::from_le(self.u32_at(at + desc::OFFSET).load(Ordering::Relaxed));
        if let Some(region) = self.regions.get(usize::from(region)) {
            let line = region.as_ptr().wrapping_add(offset as usize);
            if write {
                prefetch_for_write(line);
            } else {
                crate::pagepool::prefetch(line);
            }
        }
    }

    /// The start of the `len` bytes at `d`'s region and offset, checked to
    /// lie inside that region.
    pub fn buffer(&self, d: &Descriptor, len: u32) -> Result<*mut u8, MemifError> {
        let bad = MemifError::BadDescriptor {
            region: d.region,
            offset: d.offset,
            length: len,
        };
        let region = self.regions.get(usize::from(d.region)).ok_or(bad)?;
        if !region.contains(u64::from(d.offset), u64::from(len)) {
            return Err(MemifError::BadDescriptor {
                region: d.region,
                offset: d.offset,
                length: len,
            });
        }
        // SAFETY: `offset + len` lies inside the region's mapping.
        Ok(unsafe { region.as_ptr().add(d.offset as usize) })
    }
}

/// Asks the CPU for the cache line at `p`, to be written (x86's PREFETCHW;
/// a read prefetch elsewhere).
#[inline(always)]
fn prefetch_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // PREFETCHW is a hint: it never faults and changes no register, flag or
    // memory; CPUs without it run it as a no-op.
    // SAFETY: no memory is read or written architecturally, whatever `p` is.
    unsafe {
        std::arch::asm!("prefetchw [{line}]", line = in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    crate::pagepool::prefetch(p);
}

/// Copies `len` packet bytes from `src` to `dst`. Up to 128 bytes (a small
/// frame, one or two cache lines) go as two overlapping fixed-size moves
/// inlined here, not through `memcpy`'s call and size dispatch; longer
/// copies call `memcpy`.
///
/// # Safety
/// As `ptr::copy_nonoverlapping(src, dst, len)`.
#[inline(always)]
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    /// Copies the first and the last `N` bytes of the `len` (`N..=2N`).
    ///
    /// # Safety
    /// As `copy_bytes`, with `N <= len <= 2 * N`.
    #[inline(always)]
    unsafe fn ends<const N: usize>(src: *const u8, dst: *mut u8, len: usize) {
        // SAFETY: `N <= len`: both blocks lie inside the `len` bytes of
        // `src` and of `dst` (the caller's contract).
        unsafe {
            let head = src.cast::<[u8; N]>().read_unaligned();
            let tail = src.add(len - N).cast::<[u8; N]>().read_unaligned();
            dst.cast::<[u8; N]>().write_unaligned(head);
            dst.add(len - N).cast::<[u8; N]>().write_unaligned(tail);
        }
    }
    // SAFETY: the caller's contract; each arm's length range is the one its
    // `ends` asks for.
    unsafe {
        match len {
            16..=32 => ends::<16>(src, dst, len),
            33..=64 => ends::<32>(src, dst, len),
            65..=128 => ends::<64>(src, dst, len),
            _ => ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

/// Errors a producer or consumer met, each counted, none fatal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingErrors {
    /// Descriptors naming a missing region or a buffer outside its region;
    /// each dropped its packet.
    pub bad_descriptor: u64,
    /// Packets chained over more descriptors than allowed, or longer than
    /// allowed; dropped.
    pub too_long: u64,
    /// Packets whose last descriptor has NEXT set with no descriptor after
    /// it; dropped.
    pub incomplete_chain: u64,
    /// Times head and tail were further apart than the ring's size (the peer
    /// broke the ring); nothing moved.
    pub bad_index: u64,
}

/// The longest descriptor chain a consumer accepts, and the most a producer
/// writes.
pub const DEFAULT_MAX_SEGMENTS: usize = 32;
/// The longest packet a consumer accepts.
pub const DEFAULT_MAX_PACKET_LEN: usize = 65_536;

/// Sends packets into a ring by copying them into its buffers.
///
/// The client produces on C2S rings (filling its own buffers, writing
/// head), the server on S2C rings (filling the buffers the client offered,
/// writing tail).
#[derive(Debug)]
pub struct Producer {
    ring: Ring,
    role: Role,
    /// The client's buffer size; on S2C the offered length counts instead.
    buffer_size: u32,
    /// The next slot to fill.
    cursor: u16,
    max_segments: usize,
    errors: RingErrors,
    /// Bytes of the packets written into the ring so far; packets dropped
    /// (counted in `errors`) add nothing.
    sent_bytes: u64,
}

impl Producer {
    /// The producer of `ring` for `role`: the client's on a C2S ring, the
    /// server's on an S2C ring. `buffer_size` is the client's buffer size
    /// (unused by the server, which fills up to each offered length).
    pub fn new(ring: Ring, role: Role, buffer_size: u32) -> Producer {
        let cursor = match role {
            Role::Client => ring.head(),
            Role::Server => ring.tail(),
        };
        Producer {
            ring,
            role,
            buffer_size,
            cursor,
            max_segments: DEFAULT_MAX_SEGMENTS,
            errors: RingErrors::default(),
            sent_bytes: 0,
        }
    }

    /// Bytes of the packets written into the ring since this producer was
    /// made; a packet `send_burst` took but dropped adds nothing.
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The errors counted so far.
    pub fn errors(&self) -> RingErrors {
        self.errors
    }

    /// Slots this side may fill now.
    fn free_slots(&mut self) -> u16 {
        let size = self.ring.size();
        let free = match self.role {
            // Filled but unread: cursor - tail.
            Role::Client => size.checked_sub(self.cursor.wrapping_sub(self.ring.tail())),
            // Offered but unfilled: head - cursor.
            Role::Server => {
                let offered = self.ring.head().wrapping_sub(self.cursor);
                (offered <= size).then_some(offered)
            }
        };
        free.unwrap_or_else(|| {
            self.errors.bad_index += 1;
            0
        })
    }

    /// Copies packets from the front of `packets` into the ring and
    /// publishes them; returns how many it took. A packet is taken whole or
    /// not at all; a packet that can never fit (more segments than allowed)
    /// or meets a bad descriptor is taken and counted as dropped, and gives
    /// its slots back. So a ring whose next buffer the peer broke drops
    /// every packet sent to it, counted, until the peer repairs it: the
    /// caller never spins on it.
    pub fn send_burst(&mut self, packets: &[&[u8]]) -> usize {
        let mut free = self.free_slots();
        let mut slot = self.cursor;
        // The buffers about to be written, asked for at once: their misses
        // overlap instead of each waiting in turn.
        for ahead in 0..usize::from(free).min(packets.len()) as u16 {
            self.ring.prefetch_buffer(slot.wrapping_add(ahead), true);
        }
        let mut taken = 0;
        'packets: for packet in packets {
            let start = slot;
            let start_free = free;
            let mut rest: &[u8] = packet;
            let mut segments = 0;
            loop {
                if segments == self.max_segments {
                    self.errors.too_long += 1;
                    slot = start;
                    free = start_free;
                    taken += 1;
                    continue 'packets;
                }
                if free == 0 {
                    // Not enough room: the packet waits.
                    slot = start;
                    break 'packets;
                }
                let d = self.ring.descriptor(slot);
                let capacity = match self.role {
                    Role::Client => self.buffer_size,
                    Role::Server => d.length,
                };
                let len = (rest.len() as u64).min(u64::from(capacity)) as u32;
                let dst = match self.ring.buffer(&d, len) {
                    Ok(dst) => dst,
                    Err(_) => {
                        self.errors.bad_descriptor += 1;
                        slot = start;
                        free = start_free;
                        taken += 1;
                        continue 'packets;
                    }
                };
                if len == 0 && !rest.is_empty() {
                    // A zero-capacity buffer would chain forever.
                    self.errors.bad_descriptor += 1;
                    slot = start;
                    free = start_free;
                    taken += 1;
                    continue 'packets;
                }
                // The slot is this side's until it publishes it; `rest` is ours.
                // SAFETY: `dst` has `len` bytes in the mapping (checked by `buffer`).
                unsafe { copy_bytes(rest.as_ptr(), dst, len as usize) };
                rest = &rest[len as usize..];
                let flags = if rest.is_empty() { 0 } else { DESC_FLAG_NEXT };
                self.ring.set_flags_length(slot, flags, len);
                slot = slot.wrapping_add(1);
                free -= 1;
                segments += 1;
                if rest.is_empty() {
                    break;
                }
            }
            self.sent_bytes += packet.len() as u64;
            taken += 1;
        }
        if slot != self.cursor {
            self.cursor = slot;
            match self.role {
                Role::Client => self.ring.set_head(slot),
                Role::Server => self.ring.set_tail(slot),
            }
        }
        taken
    }
}

/// Receives packets from a ring by copying them out of its buffers.
///
/// The server consumes C2S rings (reading up to head, writing tail), the
/// client S2C rings (reading up to tail, then offering the read buffers
/// again by writing head).
#[derive(Debug)]
pub struct Consumer {
    ring: Ring,
    role: Role,
    buffer_size: u32,
    /// The next slot to read.
    cursor: u16,
    /// The client's next slot to offer (S2C only).
    offered: u16,
    max_segments: usize,
    max_packet_len: usize,
    /// The segments of the packet being received.
    segments: Vec<Segment>,
    /// The copy [`recv_burst`](Self::recv_burst) hands over.
    scratch: Vec<u8>,
    errors: RingErrors,
}

impl Consumer {
    /// The consumer of `ring` for `role`: the server's on a C2S ring, the
    /// client's on an S2C ring. The client offers every free slot at once,
    /// each with `buffer_size` bytes; the server ignores `buffer_size`.
    pub fn new(ring: Ring, role: Role, buffer_size: u32) -> Consumer {
        let cursor = ring.tail();
        let offered = ring.head();
        let mut consumer = Consumer {
            ring,
            role,
            buffer_size,
            cursor,
            offered,
            max_segments: DEFAULT_MAX_SEGMENTS,
            max_packet_len: DEFAULT_MAX_PACKET_LEN,
            segments: Vec::with_capacity(DEFAULT_MAX_SEGMENTS),
            scratch: Vec::new(),
            errors: RingErrors::default(),
        };
        consumer.refill();
        consumer
    }

    /// Sets the longest chain (at least 1) and the longest packet accepted;
    /// longer ones are dropped and counted.
    pub fn set_limits(&mut self, max_segments: usize, max_packet_len: usize) {
        self.max_segments = max_segments.max(1);
        self.max_packet_len = max_packet_len;
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The errors counted so far.
    pub fn errors(&self) -> RingErrors {
        self.errors
    }

    /// Slots the peer has published that this side has not read yet: a
    /// hint, since the peer may publish more at any time; 0 when head and
    /// tail are further apart than the ring (counted by the next receive).
    pub fn ready(&self) -> usize {
        let published = match self.role {
            Role::Server => self.ring.head(),
            Role::Client => self.ring.tail(),
        };
        let ready = published.wrapping_sub(self.cursor);
        if ready > self.ring.size() {
            0
        } else {
            usize::from(ready)
        }
    }

    /// The client offers every slot it has read back to the server.
    fn refill(&mut self) {
        if self.role != Role::Client {
            return;
        }
        let end = self.cursor.wrapping_add(self.ring.size());
        if self.offered == end {
            return;
        }
        while self.offered != end {
            self.ring
                .set_flags_length(self.offered, 0, self.buffer_size);
            self.offered = self.offered.wrapping_add(1);
        }
        self.ring.set_head(self.offered);
    }

    /// Hands up to `max` packets to `deliver`, in ring order, each as one
    /// contiguous copy; returns how many it delivered. Bad descriptors and
    /// chains are counted in [`errors`](Self::errors) and their packets
    /// dropped; the ring moves past them.
    pub fn recv_burst(&mut self, max: usize, mut deliver: impl FnMut(&[u8])) -> usize {
        let mut scratch = std::mem::take(&mut self.scratch);
        let delivered = self.recv_packets(max, |packet| {
            scratch.clear();
            scratch.resize(packet.len(), 0);
            packet.copy_to(0, &mut scratch);
            deliver(&scratch);
        });
        self.scratch = scratch;
        delivered
    }

    /// Hands up to `max` packets to `deliver`, in ring order, each as the
    /// checked segments it lies in, for the caller to copy out where it
    /// wants them (one copy from the ring to the caller's buffers); returns
    /// how many it delivered. Bad descriptors and chains are counted in
    /// [`errors`](Self::errors) and their packets dropped; the ring moves
    /// past them. The slots go back to the peer after the last `deliver`.
    pub fn recv_packets(&mut self, max: usize, mut deliver: impl FnMut(&RingPacket<'_>)) -> usize {
        let published = match self.role {
            Role::Server => self.ring.head(),
            Role::Client => self.ring.tail(),
        };
        let available = published.wrapping_sub(self.cursor);
        if available > self.ring.size() {
            self.errors.bad_index += 1;
            return 0;
        }
        let mut slot = self.cursor;
        let end = published;
        // The buffers about to be read, asked for at once.
        for ahead in 0..usize::from(available).min(max) as u16 {
            self.ring.prefetch_buffer(slot.wrapping_add(ahead), false);
        }
        let mut delivered = 0;
        while delivered < max && slot != end {
            self.segments.clear();
            let mut len = 0usize;
            let mut dropped = false;
            loop {
                let d = self.ring.descriptor(slot);
                slot = slot.wrapping_add(1);
                let more = d.flags & DESC_FLAG_NEXT != 0;
                if !dropped {
                    if self.segments.len() == self.max_segments
                        || len + d.length as usize > self.max_packet_len
                    {
                        self.errors.too_long += 1;
                        dropped = true;
                    } else if self.ring.buffer(&d, d.length).is_ok() {
                        self.segments.push(Segment {
                            region: d.region,
                            offset: d.offset,
                            len: d.length,
                        });
                        len += d.length as usize;
                    } else {
                        self.errors.bad_descriptor += 1;
                        dropped = true;
                    }
                }
                if !more {
                    break;
                }
                if slot == end {
                    if !dropped {
                        self.errors.incomplete_chain += 1;
                        dropped = true;
                    }
                    break;
                }
            }
            if !dropped {
                deliver(&RingPacket {
                    regions: &self.ring.regions,
                    segments: &self.segments,
                    len,
                });
                delivered += 1;
            }
        }
        if slot != self.cursor {
            self.cursor = slot;
            if self.role == Role::Server {
                self.ring.set_tail(slot);
            }
        }
        self.refill();
        delivered
    }
}

/// One segment of a received packet, checked to lie inside its region.
#[derive(Clone, Copy, Debug)]
struct Segment {
    region: u16,
    offset: u32,
    len: u32,
}

/// A packet in a ring, as [`Consumer::recv_packets`] hands it over: its
/// segments, each checked to lie inside its region. The peer may still
/// write the bytes while they are copied out; it can change the packet's
/// contents, never where they are read from.
#[derive(Debug)]
pub struct RingPacket<'a> {
    regions: &'a [Region],
    segments: &'a [Segment],
    len: usize,
}

impl RingPacket<'_> {
    /// The packet's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the packet has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the packet's bytes from `offset` on into `dst`, as many as
    /// fit; returns how many it copied.
    pub fn copy_to(&self, mut offset: usize, dst: &mut [u8]) -> usize {
        let mut copied = 0;
        for seg in self.segments {
            let seg_len = seg.len as usize;
            if offset >= seg_len {
                offset -= seg_len;
                continue;
            }
            let k = (seg_len - offset).min(dst.len() - copied);
            if k == 0 {
                break;
            }
            let start = seg.offset as usize + offset;
            // The segment was checked to lie inside its region when the
            // packet was read, and the regions stay mapped while `self`
            // borrows them; the peer may write the bytes meanwhile, which
            // changes only what is copied.
            // SAFETY: `start + k <= seg.offset + seg.len`, inside the mapping
            // of `regions[seg.region]`; `dst[copied..copied + k]` is ours.
            unsafe {
                let src = self.regions[usize::from(seg.region)].as_ptr().add(start);
                copy_bytes(src, dst.as_mut_ptr().add(copied), k);
            }
            copied += k;
            offset = 0;
        }
        copied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memif::Direction;
    use crate::memif::region::Layout;

    /// A client-made region with one ring each way, and both sides' views.
    fn rings(log2: u8) -> (Regions, Layout) {
        let layout = Layout {
            c2s_rings: 1,
            s2c_rings: 1,
            log2_ring_size: log2,
            buffer_size: 256,
        };
        let region = Region::create("test", layout.region_size()).unwrap();
        let regions = Arc::new(vec![region]);
        for dir in [Direction::ClientToServer, Direction::ServerToClient] {
            let ring =
                Ring::new(regions.clone(), 0, layout.ring_offset(dir, 0) as u32, log2).unwrap();
            ring.set_cookie(COOKIE);
            for slot in 0..ring.size() {
                ring.set_descriptor(
                    slot,
                    Descriptor {
                        flags: 0,
                        region: 0,
                        length: layout.buffer_size,
                        offset: layout.buffer_offset(dir, 0, u32::from(slot)) as u32,
                        metadata: 0,
                    },
                );
            }
        }
        (regions, layout)
    }

    fn ring(regions: &Regions, layout: &Layout, dir: Direction) -> Ring {
        Ring::new(
            regions.clone(),
            0,
            layout.ring_offset(dir, 0) as u32,
            layout.log2_ring_size,
        )
        .unwrap()
    }

    #[test]
    fn header_fields_sit_at_their_offsets() {
        let (regions, layout) = rings(4);
        let r = ring(&regions, &layout, Direction::ClientToServer);
        r.set_head(0x0102);
        r.set_tail(0x0304);
        r.set_flags(1);
        let base = regions[0].as_ptr();
        // SAFETY: the ring header's 128 bytes are inside the region.
        let bytes = unsafe { std::slice::from_raw_parts(base, 128) };
        assert_eq!(&bytes[0..4], &COOKIE.to_le_bytes());
        assert_eq!(&bytes[4..8], &[1, 0, 0x02, 0x01]);
        assert_eq!(&bytes[64..66], &[0x04, 0x03]);
        r.set_descriptor(
            1,
            Descriptor {
                flags: 1,
                region: 2,
                length: 3,
                offset: 4,
                metadata: 5,
            },
        );
        // SAFETY: descriptor 1 is inside the ring.
        let d = unsafe { std::slice::from_raw_parts(base.add(128 + 16), 16) };
        assert_eq!(d, &[1, 0, 2, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0]);
        assert!(r.check_cookie().is_ok());
        r.set_cookie(0xdead);
        assert!(matches!(
            r.check_cookie(),
            Err(MemifError::BadCookie(0xdead))
        ));
    }

    #[test]
    fn rings_outside_their_region_are_refused() {
        let (regions, layout) = rings(4);
        let len = regions[0].len() as u32;
        assert!(Ring::new(regions.clone(), 0, len - 64, 4).is_err());
        assert!(Ring::new(regions.clone(), 0, 4, 4).is_err());
        assert!(Ring::new(regions.clone(), 1, 0, 4).is_err());
        assert!(matches!(
            Ring::new(regions.clone(), 0, 0, 15),
            Err(MemifError::BadRingSize(15))
        ));
        assert!(Ring::new(regions, 0, layout.buffers_offset() as u32, 4).is_ok());
    }

    #[test]
    fn chained_packets_cross_both_ways() {
        let (regions, layout) = rings(4);
        for dir in [Direction::ClientToServer, Direction::ServerToClient] {
            let (tx_role, rx_role) = match dir {
                Direction::ClientToServer => (Role::Client, Role::Server),
                Direction::ServerToClient => (Role::Server, Role::Client),
            };
            let mut rx = Consumer::new(ring(&regions, &layout, dir), rx_role, 256);
            let mut tx = Producer::new(ring(&regions, &layout, dir), tx_role, 256);
            // 800 bytes: 4 segments of 256, 256, 256, 32; 16 slots hold
            // three of them and the small one, not a fourth.
            let big: Vec<u8> = (0..800).map(|i| (i % 251) as u8).collect();
            let small = [7u8; 60];
            assert_eq!(tx.send_burst(&[&big, &small, &big, &big, &big]), 4);
            assert_eq!(tx.sent_bytes(), 3 * 800 + 60);
            let mut got = Vec::new();
            assert_eq!(rx.recv_burst(10, |p| got.push(p.to_vec())), 4);
            assert_eq!(got, [big.clone(), small.to_vec(), big.clone(), big.clone()]);
            // The fifth fits now.
            assert_eq!(tx.send_burst(&[&big]), 1);
            assert_eq!(rx.recv_burst(10, |p| assert_eq!(p, big)), 1);
            assert_eq!(tx.errors(), RingErrors::default());
            assert_eq!(rx.errors(), RingErrors::default());
        }
    }

    #[test]
    fn copy_bytes_copies_every_length_exactly() {
        let src: Vec<u8> = (0..300).map(|i| (i * 7 + 3) as u8).collect();
        for len in 0..=200 {
            let mut dst = vec![0xeeu8; 260];
            // SAFETY: `src` has 300 bytes, `dst[8..]` 252, `len <= 200`.
            unsafe { copy_bytes(src.as_ptr().add(5), dst.as_mut_ptr().add(8), len) };
            assert_eq!(&dst[8..8 + len], &src[5..5 + len], "length {len}");
            assert!(dst[..8].iter().all(|&b| b == 0xee), "before, length {len}");
            assert!(
                dst[8 + len..].iter().all(|&b| b == 0xee),
                "after, length {len}"
            );
        }
    }

    #[test]
    fn a_received_packet_copies_out_from_any_offset() {
        let (regions, layout) = rings(4);
        let dir = Direction::ClientToServer;
        let mut rx = Consumer::new(ring(&regions, &layout, dir), Role::Server, 256);
        let mut tx = Producer::new(ring(&regions, &layout, dir), Role::Client, 256);
        // 600 bytes: segments of 256, 256, 88.
        let big: Vec<u8> = (0..600).map(|i| (i % 253) as u8).collect();
        assert_eq!(rx.ready(), 0);
        assert_eq!(tx.send_burst(&[&big]), 1);
        assert_eq!(rx.ready(), 3, "one packet in three slots");
        let mut pieces = Vec::new();
        let n = rx.recv_packets(4, |packet| {
            assert_eq!(packet.len(), 600);
            // Pieces of 100 bytes cross both segment boundaries.
            let mut at = 0;
            while at < packet.len() {
                let mut piece = [0u8; 100];
                let k = packet.copy_to(at, &mut piece);
                pieces.push(piece[..k].to_vec());
                at += k;
            }
            assert_eq!(
                packet.copy_to(600, &mut [0u8; 8]),
                0,
                "nothing past the end"
            );
        });
        assert_eq!(n, 1);
        assert_eq!(rx.ready(), 0);
        assert_eq!(pieces.len(), 6);
        assert_eq!(pieces.concat(), big);
    }

    #[test]
    fn bad_descriptors_and_chains_are_counted_and_skipped() {
        let (regions, layout) = rings(4);
        let dir = Direction::ClientToServer;
        let raw = ring(&regions, &layout, dir);
        let mut rx = Consumer::new(ring(&regions, &layout, dir), Role::Server, 256);
        let good = raw.descriptor(0);
        // Slot 0: outside the region. Slot 1: a good packet. Slots 2..: a
        // chain of NEXT over every remaining slot up to head.
        raw.set_descriptor(
            0,
            Descriptor {
                offset: regions[0].len() as u32 - 10,
                length: 11,
                ..good
            },
        );
        raw.set_descriptor(
            1,
            Descriptor {
                length: 5,
                ..raw.descriptor(1)
            },
        );
        for slot in 2..16 {
            raw.set_descriptor(
                slot,
                Descriptor {
                    flags: DESC_FLAG_NEXT,
                    length: 1,
                    ..raw.descriptor(slot)
                },
            );
        }
        raw.set_head(16);
        rx.set_limits(4, 1 << 16);
        let mut n = 0;
        assert_eq!(
            rx.recv_burst(100, |p| {
                assert_eq!(p.len(), 5);
                n += 1
            }),
            1
        );
        assert_eq!(n, 1);
        let errors = rx.errors();
        assert_eq!(errors.bad_descriptor, 1);
        assert_eq!(errors.too_long, 1);
        assert_eq!(raw.tail(), 16, "the ring moves past what it dropped");
        // A chain that ends with NEXT at head: incomplete.
        raw.set_descriptor(
            16,
            Descriptor {
                flags: DESC_FLAG_NEXT,
                length: 1,
                ..good
            },
        );
        raw.set_head(17);
        assert_eq!(rx.recv_burst(100, |_| {}), 0);
        assert_eq!(rx.errors().incomplete_chain, 1);
        // A head further than a ring from tail: nothing moves.
        raw.set_head(17 + 100);
        assert_eq!(rx.recv_burst(100, |_| {}), 0);
        assert_eq!(rx.errors().bad_index, 1);
        assert_eq!(raw.tail(), 17);
    }

    #[test]
    fn a_producer_skips_bad_offered_buffers() {
        let (regions, layout) = rings(4);
        let dir = Direction::ServerToClient;
        let raw = ring(&regions, &layout, dir);
        // The client offers 2 buffers, the first outside the region.
        raw.set_descriptor(
            0,
            Descriptor {
                region: 9,
                ..raw.descriptor(0)
            },
        );
        raw.set_head(2);
        let mut tx = Producer::new(ring(&regions, &layout, dir), Role::Server, 0);
        // Every packet meets the bad slot first: each is taken and dropped,
        // counted, and nothing is published.
        assert_eq!(tx.send_burst(&[&[1u8; 10], &[2u8; 10], &[3u8; 10]]), 3);
        assert_eq!(tx.errors().bad_descriptor, 3);
        assert_eq!(tx.sent_bytes(), 0, "dropped packets are not sent bytes");
        assert_eq!(raw.tail(), 0);
        // Once the client offers a good buffer there, packets flow again.
        raw.set_descriptor(
            0,
            Descriptor {
                region: 0,
                ..raw.descriptor(0)
            },
        );
        assert_eq!(tx.send_burst(&[&[4u8; 10]]), 1);
        assert_eq!(tx.sent_bytes(), 10);
        assert_eq!(raw.tail(), 1);
        assert_eq!(raw.descriptor(0).length, 10);
    }
}
