//! The UMEM: a mempool region given to the kernel as AF_XDP frame memory,
//! the address arithmetic between pool elements and UMEM addresses, and the
//! ledger of frames the kernel holds.
//!
//! # Layout: unaligned chunks
//! The UMEM is the mbuf pool's whole region, registered as it is: one
//! *chunk* per pool element (`chunk_size` = the element size, 2304 bytes
//! for the default 128-byte header + 128 headroom + 2048 data room; the
//! chunks lie the pool's stride apart, 2368 bytes, an odd number of cache
//! lines: see [`element_stride`](crate::mempool::element_stride)), so a
//! frame **is** an mbuf: the kernel writes a received packet at
//! `chunk + umem_headroom + XDP_PACKET_HEADROOM (256)`, which is exactly
//! where the mbuf's data starts after its 128-byte header and 128-byte
//! headroom (`umem_headroom` = header + pool headroom − 256, 0 by
//! default). Received packets become mbufs with no copy.
//!
//! The default chunk and stride are not powers of two, so the UMEM is registered in
//! *unaligned chunk* mode (`XDP_UMEM_UNALIGNED_CHUNK_FLAG`). Aligned mode
//! would need 4096-byte elements (44 % of the memory wasted at the default
//! data room) or a data room cut to 1792 bytes; unaligned mode takes any
//! pool as it is. It also makes addresses self-describing:
//! - fill ring: the chunk's offset in the UMEM (the element's offset in the
//!   region);
//! - Rx and Tx descriptors: the chunk offset in the low 48 bits and the
//!   data's offset from the chunk start in the high 16
//!   ([`OFFSET_SHIFT`]), so the frame start is `addr & ADDR_MASK` — no
//!   division, whatever the stride;
//! - completion ring: the Tx descriptor's address as it was given.
//!
//! # The ledger
//! Every frame handed to the kernel (fill or Tx ring) is marked in a
//! [`Ledger`] by its element index; every address the kernel hands back
//! (Rx or completion ring) must find its mark, which it clears. So an
//! address is turned back into an mbuf only if the kernel really held that
//! frame (a stray address is counted and ignored, never freed twice), and
//! when the socket closes the marks left are exactly the frames the kernel
//! still held (fill ring, its own caches, Tx in flight): they go back to the
//! pool. The element index comes from the offset by an exact division —
//! a shift and a multiplication by the inverse of the stride's odd part —
//! checked by multiplying back.

use crate::mbuf::{HEADER_SIZE, MbufPool};
use crate::mempool::Elem;
use std::ptr::NonNull;

/// The kernel's headroom before packet data in every frame
/// (`XDP_PACKET_HEADROOM`).
pub(crate) const XDP_PACKET_HEADROOM: u64 = 256;

/// Smallest chunk the kernel takes (`XDP_UMEM_MIN_CHUNK_SIZE`).
pub(crate) const MIN_CHUNK: u64 = 2048;

/// Unaligned mode: the data offset sits above this bit of an address.
pub(crate) const OFFSET_SHIFT: u32 = 48;

/// Unaligned mode: the chunk offset is below [`OFFSET_SHIFT`].
pub(crate) const ADDR_MASK: u64 = (1 << OFFSET_SHIFT) - 1;

/// The system's page size (4096 if it cannot be read).
fn page_size() -> u64 {
    // SAFETY: sysconf(3) has no memory-safety preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as u64,
        _ => 4096,
    }
}

/// Where a pool's elements lie, as UMEM addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Umem {
    /// The region's start (the UMEM's address 0).
    base: usize,
    /// Bytes registered (the region's length).
    len: u64,
    /// Distance between chunks: the pool's element stride (an odd number
    /// of cache lines, so a line or so more than an element).
    stride: u64,
    /// Chunk size registered with the kernel: the pool's element size, so
    /// the kernel never writes into the padding between elements.
    chunk: u64,
    /// Elements (chunks) in use: `frames * stride <= len`.
    frames: u32,
    /// `stride = odd << shift`.
    shift: u32,
    /// `odd * inv == 1 (mod 2^64)`.
    inv: u64,
    /// Headroom the kernel leaves before its own 256 bytes.
    headroom: u32,
    /// Bytes of packet data a frame holds from the kernel's data start.
    frame_room: u32,
    /// The region is on hugepages.
    hugepages: bool,
}

/// The inverse of odd `a` modulo 2^64 (Newton's iteration: each step
/// doubles the correct low bits, from 3 correct for any odd `a`).
const fn inverse_mod_2_64(a: u64) -> u64 {
    let mut x = a; // a * a == 1 (mod 8)
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

impl Umem {
    /// The geometry of `pool`'s region. Errors say what about the pool
    /// does not fit AF_XDP.
    pub(crate) fn of_pool(pool: &MbufPool) -> Result<Umem, String> {
        let mp = pool.mempool();
        let region = mp.region();
        let stride = mp.stride() as u64;
        let chunk = mp.elt_size() as u64;
        let name = mp.name();
        if chunk < MIN_CHUNK {
            return Err(format!(
                "pool '{name}': elements of {chunk} bytes are smaller than an AF_XDP frame \
                 ({MIN_CHUNK}); give it a data room of at least {}",
                MIN_CHUNK - HEADER_SIZE as u64 - pool.headroom() as u64
            ));
        }
        let data_start = HEADER_SIZE as u64 + pool.headroom() as u64;
        let headroom = data_start.saturating_sub(XDP_PACKET_HEADROOM);
        let kernel_start = headroom + XDP_PACKET_HEADROOM;
        let hugepages = region.backing() == crate::mempool::Backing::Hugepages;
        let page = page_size();
        // The kernel takes chunks of at most a page (a larger one only on
        // hugepage-backed memory).
        if chunk > page && !hugepages {
            return Err(format!(
                "pool '{name}': elements of {chunk} bytes are larger than a {page}-byte page, \
                 the largest AF_XDP frame on pages of that size; give it a data room of at \
                 most {} (MTU {})",
                page.saturating_sub(data_start),
                page.saturating_sub(kernel_start + 18)
            ));
        }
        let shift = stride.trailing_zeros();
        let odd = stride >> shift;
        Ok(Umem {
            base: region.base().as_ptr() as usize,
            len: region.len() as u64,
            stride,
            chunk,
            frames: mp.size(),
            shift,
            inv: inverse_mod_2_64(odd),
            headroom: headroom as u32,
            frame_room: (chunk - kernel_start) as u32,
            hugepages,
        })
    }

    /// The region's start address.
    pub(crate) fn base(&self) -> usize {
        self.base
    }

    /// Bytes to register.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The chunk size: the most bytes of a chunk a frame may use, from
    /// its start.
    pub(crate) fn chunk_size(&self) -> u32 {
        self.chunk as u32
    }

    /// The UMEM headroom to register.
    pub(crate) fn headroom(&self) -> u32 {
        self.headroom
    }

    /// Elements (frames) of the pool.
    pub(crate) fn frames(&self) -> u32 {
        self.frames
    }

    /// Whether a device may use these chunks zero-copy: in unaligned mode
    /// it rejects a chunk that straddles two pages it does not see as
    /// contiguous. On 4 KiB pages most 2304-byte chunks straddle one; on
    /// 2 MiB hugepages (physically contiguous inside) only those across a
    /// hugepage boundary may (one in about 900), so zero-copy wants a
    /// hugepage-backed pool or chunks that divide the page.
    pub(crate) fn zero_copy_ok(&self) -> bool {
        self.hugepages || 4096 % self.stride == 0
    }

    /// Largest frame the kernel writes into a chunk.
    pub(crate) fn frame_room(&self) -> u32 {
        self.frame_room
    }

    /// The UMEM offset of element `e` (one of the pool's).
    #[inline(always)]
    pub(crate) fn offset_of(&self, e: Elem) -> u64 {
        (e.as_ptr() as usize - self.base) as u64
    }

    /// Whether `e` is an element of this UMEM's pool (by address).
    #[inline(always)]
    pub(crate) fn holds(&self, e: Elem) -> bool {
        ((e.as_ptr() as usize).wrapping_sub(self.base) as u64) < self.frames as u64 * self.stride
    }

    /// The element at chunk offset `off`, which [`index`](Self::index)
    /// accepted.
    #[inline(always)]
    pub(crate) fn elem_at(&self, off: u64) -> Elem {
        // SAFETY: `base + off` lies inside the region (a checked chunk
        // offset), so it is not null.
        Elem::from_ptr(unsafe { NonNull::new_unchecked((self.base + off as usize) as *mut u8) })
    }

    /// The element index of chunk offset `off`, if it is the start of one
    /// of the pool's elements.
    #[inline(always)]
    pub(crate) fn index(&self, off: u64) -> Option<u32> {
        if off >= self.frames as u64 * self.stride || off & ((1u64 << self.shift) - 1) != 0 {
            return None;
        }
        // Multiplying by the inverse divides an exact multiple of `odd`
        // exactly; anything else gives a wrong quotient, caught by
        // multiplying back.
        let idx = (off >> self.shift).wrapping_mul(self.inv);
        (idx < self.frames as u64 && idx * self.stride == off).then_some(idx as u32)
    }

    /// The element index of `e` (one of the pool's elements).
    #[inline(always)]
    pub(crate) fn index_of(&self, e: Elem) -> u32 {
        let off = self.offset_of(e);
        (off >> self.shift).wrapping_mul(self.inv) as u32
    }

    /// The chunk offset of element `idx`.
    #[inline(always)]
    pub(crate) fn offset_of_index(&self, idx: u32) -> u64 {
        idx as u64 * self.stride
    }

    /// Splits a received (or completed) descriptor address into the chunk
    /// offset and the data's offset from the chunk start.
    #[inline(always)]
    pub(crate) fn decode(addr: u64) -> (u64, u32) {
        (addr & ADDR_MASK, (addr >> OFFSET_SHIFT) as u32)
    }

    /// The Tx descriptor address of data `data_off` bytes into the chunk at
    /// `off`.
    #[inline(always)]
    pub(crate) fn encode(off: u64, data_off: u32) -> u64 {
        off | (data_off as u64) << OFFSET_SHIFT
    }
}

/// Which of a pool's frames the kernel holds through one socket's rings: a
/// bit per element (see the module docs). One writer: the queue that owns
/// the rings.
pub(crate) struct Ledger {
    words: Box<[u64]>,
    /// Bits set.
    held: u32,
}

impl Ledger {
    /// A ledger for `frames` elements, none held.
    pub(crate) fn new(frames: u32) -> Ledger {
        Ledger {
            words: vec![0u64; (frames as usize).div_ceil(64)].into_boxed_slice(),
            held: 0,
        }
    }

    /// Frames marked.
    #[inline(always)]
    pub(crate) fn held(&self) -> u32 {
        self.held
    }

    /// Marks frame `idx` as the kernel's; false (and nothing changes) if it
    /// was already.
    #[inline(always)]
    pub(crate) fn mark(&mut self, idx: u32) -> bool {
        let (w, b) = ((idx / 64) as usize, idx % 64);
        let bit = 1u64 << b;
        let word = &mut self.words[w];
        if *word & bit != 0 {
            return false;
        }
        *word |= bit;
        self.held += 1;
        true
    }

    /// Clears frame `idx`'s mark; false if it was not marked (an address
    /// the kernel did not get from us).
    #[inline(always)]
    pub(crate) fn take(&mut self, idx: u32) -> bool {
        let (w, b) = ((idx / 64) as usize, idx % 64);
        let bit = 1u64 << b;
        let word = &mut self.words[w];
        if *word & bit == 0 {
            return false;
        }
        *word &= !bit;
        self.held -= 1;
        true
    }

    /// Clears every mark, calling `f` with each index.
    pub(crate) fn drain(&mut self, mut f: impl FnMut(u32)) {
        for (w, word) in self.words.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                f(w as u32 * 64 + b);
            }
        }
        self.held = 0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mempool::HugepagePolicy;
    use crate::test_support::{TestPool, assert_pool_full};

    #[test]
    fn inverses_are_inverses() {
        for a in [1u64, 3, 9, 255, 0x1234_5677, u32::MAX as u64, u64::MAX] {
            assert_eq!(a.wrapping_mul(inverse_mod_2_64(a)), 1, "{a}");
        }
    }

    /// A pool of `size` mbufs with these rooms, on plain pages.
    fn plain_pool(size: u32, headroom: u16, data_room: u16) -> MbufPool {
        TestPool::new(size)
            .headroom(headroom)
            .data_room(data_room)
            .hugepages(HugepagePolicy::Never)
            .build()
    }

    #[test]
    fn default_pool_is_2304_byte_chunks_with_data_where_the_kernel_writes() {
        let pool = plain_pool(1000, 128, 2048);
        let umem = Umem::of_pool(&pool).unwrap();
        assert_eq!(umem.chunk_size(), 2304);
        assert_eq!(
            umem.headroom(),
            0,
            "header 128 + headroom 128 = XDP_PACKET_HEADROOM"
        );
        assert_eq!(umem.frame_room(), 2048);
        assert_eq!(umem.frames(), 1000);
        assert!(!umem.zero_copy_ok(), "2304-byte chunks on 4 KiB pages");
        // Chunks lie an odd number of lines apart: 37 of them.
        assert!(umem.len() >= 1000 * 2368);
        assert_eq!(umem.offset_of_index(1), 2368);
        // A bigger pool headroom is given to the kernel as UMEM headroom.
        let more_headroom = plain_pool(10, 256, 2048);
        let umem2 = Umem::of_pool(&more_headroom).unwrap();
        assert_eq!((umem2.headroom(), umem2.frame_room()), (128, 2048));
        // A smaller one just moves the data further in.
        let no_headroom = plain_pool(10, 0, 2048);
        let umem3 = Umem::of_pool(&no_headroom).unwrap();
        assert_eq!(
            (umem3.chunk_size(), umem3.headroom(), umem3.frame_room()),
            (2176, 0, 1920)
        );
        drop((more_headroom, no_headroom));
        assert_pool_full(&pool);
    }

    #[test]
    fn elements_map_to_indices_and_back_and_nothing_else_does() {
        let pool = plain_pool(777, 128, 2048);
        let umem = Umem::of_pool(&pool).unwrap();
        for idx in [0u32, 1, 2, 63, 64, 500, 776] {
            let off = umem.offset_of_index(idx);
            assert_eq!(umem.index(off), Some(idx));
            let e = umem.elem_at(off);
            assert!(umem.holds(e));
            assert_eq!(umem.offset_of(e), off);
            assert_eq!(umem.index_of(e), idx);
        }
        // The stride: 2304 bytes spread to 37 lines.
        let end = 777 * 2368;
        for bad in [
            1,
            128,
            2304,
            2367,
            2369,
            end,
            end + 2368,
            u64::MAX >> 16,
            1 << 47,
        ] {
            assert_eq!(umem.index(bad), None, "{bad}");
        }
        assert!(!umem.holds(umem.elem_at(end)));
        assert_pool_full(&pool);
    }

    #[test]
    fn addresses_carry_the_data_offset_above_bit_48() {
        let a = Umem::encode(2304 * 5, 256);
        assert_eq!(a, (256u64 << 48) | 11520);
        assert_eq!(Umem::decode(a), (11520, 256));
        assert_eq!(Umem::decode(4608), (4608, 0));
    }

    #[test]
    fn too_small_elements_are_an_error_naming_the_pool() {
        let pool = TestPool::new(10)
            .name("tiny")
            .data_room(1000)
            .hugepages(HugepagePolicy::Never)
            .build();
        assert_eq!(
            Umem::of_pool(&pool).unwrap_err(),
            "pool 'tiny': elements of 1256 bytes are smaller than an AF_XDP frame (2048); give \
             it a data room of at least 1792"
        );
        assert_pool_full(&pool);
    }

    #[test]
    fn elements_larger_than_a_page_are_an_error_naming_the_limit() {
        let pool = TestPool::new(10)
            .name("jumbo")
            .data_room(9216)
            .hugepages(HugepagePolicy::Never)
            .build();
        assert_eq!(
            Umem::of_pool(&pool).unwrap_err(),
            "pool 'jumbo': elements of 9472 bytes are larger than a 4096-byte page, the \
             largest AF_XDP frame on pages of that size; give it a data room of at most 3840 \
             (MTU 3822)"
        );
        // The largest data room that fits.
        let pool = plain_pool(10, 128, 3840);
        assert_eq!(Umem::of_pool(&pool).unwrap().chunk_size(), 4096);
        assert_pool_full(&pool);
    }

    #[test]
    fn ledger_marks_takes_and_drains() {
        let mut ledger = Ledger::new(130);
        assert!(ledger.mark(0) && ledger.mark(64) && ledger.mark(129));
        assert!(!ledger.mark(64), "marked twice");
        assert_eq!(ledger.held(), 3);
        assert!(ledger.take(64));
        assert!(!ledger.take(64), "taken twice");
        assert!(!ledger.take(5), "never marked");
        assert_eq!(ledger.held(), 2);
        let mut seen = Vec::new();
        ledger.drain(|i| seen.push(i));
        assert_eq!(seen, [0, 129]);
        assert_eq!(ledger.held(), 0);
        assert!(!ledger.take(0));
    }
}
