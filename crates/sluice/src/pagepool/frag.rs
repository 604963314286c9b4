//! Fragments: pieces of a page handed out one per packet, and the carving
//! that cuts them.
//!
//! A [`Carver`] holds one page at a time and cuts fragments upwards from near
//! its start, each rounded up to [`FRAG_ALIGN`](super::FRAG_ALIGN) bytes (a
//! cache line). On taking a page it fixes the page's target — as many
//! fragments of the size asked for as fit — and every fragment carries it
//! (see [`meta`](super::meta) for the count). Cutting one is arithmetic on
//! the carver's own fields: no atomic, no shared cache line.
//!
//! The first fragment starts a whole number of cache lines into the page,
//! within the room the target leaves over: the page's *colour*, its number
//! (IO address over page size) modulo the colours there are. Pages are aligned
//! to their size, so without it the `k`-th fragment of every page starts at
//! the same offset and in the same cache sets: the lines touched per packet
//! (a fragment's first data line) of the tens of pages a queue has in
//! flight would crowd into a few sets of each cache and evict one another
//! long before it is full, as a mempool's elements would at an even stride
//! ([`element_stride`](crate::mempool::element_stride)). A 32 KiB page of
//! 2112-byte fragments has 17 lines left over: 18 colours. The colour
//! follows the page, not the order pages are taken in: a page recycled and
//! cut again for the same size has its fragments where they were, so a
//! page that comes back hot (its fragments freed a moment ago) is reused in
//! the lines that are still in the cache, as a mempool's most recently
//! freed element is.
//!
//! When the next fragment does not fit, or the target is reached, the carver
//! leaves the page: if it cut fewer fragments than the target, it gives the
//! missing ones back in one atomic, and if that was the last reference
//! (every fragment already free) it starts the same page over; otherwise it
//! takes a new page, and the old one goes home when its last fragment is
//! freed — from whichever thread that happens.
//!
//! Where pages come from and go back to is the carver's user's business: the
//! page pool's fragment allocator ([`PageFragAlloc`](super::PageFragAlloc))
//! or the page_frag_cache-style one over the provider (`PageFragCache`, a
//! benchmark baseline). The page's metadata says where
//! its last fragment sends it.

use std::ptr::NonNull;

use super::meta::{OWNER_PROVIDER, PageMeta};
use super::pool::PoolInner;
use super::provider::ProviderInner;
use super::{FRAG_ALIGN, PagePoolError};
use crate::sync::Ordering;

/// A fragment of a page: `len` bytes at a [`FRAG_ALIGN`](super::FRAG_ALIGN)-byte
/// aligned address, owned alone. Dropping it gives its reference back; the
/// last fragment of a page sends the page home.
pub struct Frag {
    ptr: NonNull<u8>,
    /// The length (low 32 bits) and the page's target (high 32 bits). One
    /// word written with one store: the handle is copied right after it is
    /// built, and narrower stores read back by a wider load cannot be
    /// forwarded (a stall of a dozen cycles per fragment).
    len_target: u64,
    /// The page's metadata (in its provider, which outlives the page).
    meta: NonNull<PageMeta>,
}

// SAFETY: a fragment's bytes are its own (carved ranges never overlap); the
// page count it bumps is atomic, and the page's way home is thread-safe.
unsafe impl Send for Frag {}
// SAFETY: `&Frag` only reads bytes no one else writes.
unsafe impl Sync for Frag {}

impl Frag {
    /// The fragment's address.
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length in bytes (as asked for; the space it takes in the page is
    /// rounded up to the alignment).
    #[inline(always)]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.len_target as u32 as usize
    }

    /// How many fragments its page was cut into (at most).
    #[inline(always)]
    pub fn page_target(&self) -> u32 {
        (self.len_target >> 32) as u32
    }

    /// The fragment's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes of the page, owned by this fragment alone.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    /// The fragment's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }

    /// Address of the page the fragment lies in.
    pub fn page_addr(&self) -> *mut u8 {
        // SAFETY: the metadata lives as long as the page (its provider
        // outlives it).
        unsafe { self.meta.as_ref() }.addr as *mut u8
    }

    /// The fragment's IO address (offset in its provider's region).
    pub fn iova(&self) -> u64 {
        // SAFETY: as in `page_addr`.
        let m = unsafe { self.meta.as_ref() };
        m.iova + (self.ptr.as_ptr() as usize - m.addr) as u64
    }

    /// Gives up the handle without freeing: the address and what
    /// [`put_frag_ref`] needs (the page's metadata and target).
    pub(crate) fn into_raw(self) -> RawFrag {
        let r = RawFrag {
            ptr: self.ptr,
            len_target: self.len_target,
            meta: self.meta,
        };
        std::mem::forget(self);
        r
    }

    /// Rebuilds a handle from [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    /// `raw` came from `into_raw`, and the reference it stands for was not
    /// given back since.
    pub(crate) unsafe fn from_raw(raw: RawFrag) -> Frag {
        Frag {
            ptr: raw.ptr,
            len_target: raw.len_target,
            meta: raw.meta,
        }
    }
}

/// A fragment handle taken apart ([`Frag::into_raw`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawFrag {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len_target: u64,
    pub(crate) meta: NonNull<PageMeta>,
}

impl Drop for Frag {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this fragment holds one reference on the page, given back
        // here once; its bytes are no longer used.
        unsafe { put_frag_ref(self.meta, self.page_target()) };
    }
}

impl std::fmt::Debug for Frag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frag")
            .field("addr", &self.ptr)
            .field("len", &self.len())
            .field("page_target", &self.page_target())
            .finish()
    }
}

/// Gives back one fragment reference on the page of `meta`, cut into
/// `target` fragments; the last sends the page home.
///
/// # Safety
/// The caller holds a reference on that page (a fragment of it) and no
/// longer uses the fragment's bytes.
#[inline(always)]
pub(crate) unsafe fn put_frag_ref(meta: NonNull<PageMeta>, target: u32) {
    // SAFETY: the provider, and so the metadata, outlives its pages.
    let m = unsafe { meta.as_ref() };
    if m.put_refs(1, target) {
        // SAFETY: we held the last reference: the page is ours alone.
        unsafe { page_home(m) };
    }
}

/// Sends a page whose fragments are all free back where its metadata says.
///
/// # Safety
/// The caller holds the page alone (it gave back the last reference).
#[inline(never)]
pub(crate) unsafe fn page_home(m: &PageMeta) {
    // Relaxed: written before any fragment of the page existed (see
    // `PageMeta::owner`).
    let owner = m.owner.load(Ordering::Relaxed);
    if owner & OWNER_PROVIDER != 0 {
        let p = (owner & !OWNER_PROVIDER) as *const ProviderInner;
        // SAFETY: a provider outlives its blocks; the block is free of users.
        unsafe { (*p).free_addr(m.addr) };
    } else {
        let p = owner as *const PoolInner;
        // SAFETY: a pool outlives the pages it handed out (it leaks rather
        // than free itself otherwise); the page is out and free of users.
        unsafe { (*p).put(m.addr) };
    }
}

/// A run of fragments cut from one page at once ([`Carver::cut_run`]),
/// handed out in address order as [`Frag`]s by iterating. It holds the
/// references of those not handed out yet: dropping it early (a consumer
/// that panics) gives them back as their frees would, so none is lost and
/// the page still goes home once.
#[derive(Debug)]
pub(crate) struct FragCuts {
    /// The next fragment's address.
    next: usize,
    /// Bytes from one fragment to the next.
    room: usize,
    /// What every fragment of the run carries: length and page target.
    len_target: u64,
    /// The page's metadata.
    meta: NonNull<PageMeta>,
    /// Fragments (references) not handed out yet.
    left: u32,
}

impl FragCuts {
    /// Fragments not handed out yet.
    #[inline(always)]
    pub(crate) fn remaining(&self) -> usize {
        self.left as usize
    }
}

impl Iterator for FragCuts {
    type Item = Frag;

    #[inline(always)]
    fn next(&mut self) -> Option<Frag> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let ptr = self.next;
        self.next += self.room;
        Some(Frag {
            // SAFETY: inside the page, which is in the region: not null.
            ptr: unsafe { NonNull::new_unchecked(ptr as *mut u8) },
            len_target: self.len_target,
            meta: self.meta,
        })
    }

    #[inline(always)]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for FragCuts {}

impl Drop for FragCuts {
    #[inline(always)]
    fn drop(&mut self) {
        if self.left != 0 {
            give_back_uncut(self.meta, self.left, (self.len_target >> 32) as u32);
        }
    }
}

/// Gives back `n` references of a run never handed out (a run dropped
/// early); the last sends the page home.
#[cold]
#[inline(never)]
fn give_back_uncut(meta: NonNull<PageMeta>, n: u32, target: u32) {
    // SAFETY: the run held those references on a page whose metadata lives
    // as long as the provider; nothing uses their bytes.
    let m = unsafe { meta.as_ref() };
    if m.put_refs(n, target) {
        // SAFETY: those were the last references: the page is ours alone.
        unsafe { page_home(m) };
    }
}

/// The carving state: one page at a time (see the module docs).
#[derive(Debug)]
pub(crate) struct Carver {
    /// The current page's address, or 0 when there is none.
    page: usize,
    /// Its metadata (valid while `page != 0`).
    meta: *const PageMeta,
    /// Next free byte of the page.
    offset: u32,
    /// Fragments cut from the page so far.
    carved: u32,
    /// The page's target: fragments it will be cut into at most. Equal to
    /// `carved` (0) while there is no page, so nothing is cut then.
    target: u32,
    /// Page size in bytes (a power of two).
    page_bytes: u32,
    /// The current page's number: its IO address over the page size.
    page_no: u32,
    /// The stride of the last page's fragments and its target: a page cut
    /// for the same size again needs no division.
    last_stride: u32,
    last_target: u32,
    /// Colours for that stride: the lines a page cut into `last_target`
    /// fragments has left over, plus one.
    colours: u32,
    /// `2^64 / colours` rounded up (0 for one colour): a page's colour is
    /// then two multiplications, not a division (Lemire's `fastmod`).
    colour_mul: u64,
}

// SAFETY: the carver's page is held through its count, which is atomic; the
// carver moves between threads as a whole.
unsafe impl Send for Carver {}

impl Carver {
    /// A carver for pages of `page_bytes` bytes, holding none.
    pub(crate) fn new(page_bytes: usize) -> Carver {
        Carver {
            page: 0,
            meta: std::ptr::null(),
            offset: 0,
            carved: 0,
            target: 0,
            page_bytes: page_bytes as u32,
            page_no: 0,
            last_stride: 0,
            last_target: 0,
            colours: 1,
            colour_mul: 0,
        }
    }

    /// Page size in bytes.
    #[inline(always)]
    pub(crate) fn page_bytes(&self) -> usize {
        self.page_bytes as usize
    }

    /// True for a fragment size the carver can cut: 1..=page size.
    #[inline(always)]
    pub(crate) fn size_ok(&self, size: usize) -> bool {
        size.wrapping_sub(1) < self.page_bytes as usize
    }

    /// The error for a size that is not [`size_ok`](Self::size_ok).
    #[cold]
    pub(crate) fn bad_size(&self, size: usize) -> PagePoolError {
        PagePoolError::BadSize {
            size,
            max: self.page_bytes as usize,
        }
    }

    /// True when a fragment of `size` bytes can be cut from the current
    /// page: one is held, its target is not reached, and it fits.
    #[inline(always)]
    pub(crate) fn fits(&self, size: usize) -> bool {
        let room = (size as u32).next_multiple_of(FRAG_ALIGN as u32);
        self.carved != self.target && self.offset + room <= self.page_bytes
    }

    /// Cuts a fragment of `size` bytes (1..=page size) that
    /// [`fits`](Self::fits).
    ///
    /// Built in one place, in registers: an allocator returns it straight
    /// after a possible refill rather than merging two returned handles in
    /// memory (which costs a failed store forward per fragment).
    #[inline(always)]
    pub(crate) fn cut(&mut self, size: usize) -> Frag {
        debug_assert!(self.size_ok(size) && self.fits(size));
        let room = (size as u32).next_multiple_of(FRAG_ALIGN as u32);
        let ptr = self.page + self.offset as usize;
        self.offset += room;
        self.carved += 1;
        Frag {
            // SAFETY: inside the page, which is in the region: not null.
            ptr: unsafe { NonNull::new_unchecked(ptr as *mut u8) },
            len_target: size as u64 | (self.target as u64) << 32,
            // SAFETY: set with the page, never null then.
            meta: unsafe { NonNull::new_unchecked(self.meta.cast_mut()) },
        }
    }

    /// Cuts up to `want` (at least 1) fragments of `size` bytes (1..=page
    /// size) from the current page, which [`fits`](Self::fits) one: as many
    /// as the page's target and its room leave, at most `want`. They lie
    /// one stride apart, as [`cut`](Self::cut) would cut them one by one,
    /// and are counted as cut at once: the carver's fields are written once
    /// per run, and the run hands the fragments out from registers.
    #[inline(always)]
    pub(crate) fn cut_run(&mut self, size: usize, want: usize) -> FragCuts {
        debug_assert!(self.size_ok(size) && self.fits(size) && want >= 1);
        let room = (size as u32).next_multiple_of(FRAG_ALIGN as u32);
        let uncut = self.target - self.carved;
        // Every fragment left fits (the page was cut for this size; no
        // division then), or as many as its room holds.
        let fit = if self.offset as u64 + uncut as u64 * room as u64 <= self.page_bytes as u64 {
            uncut
        } else {
            (self.page_bytes - self.offset) / room
        };
        let count = fit.min(want.min(u32::MAX as usize) as u32);
        let first = self.page + self.offset as usize;
        self.offset += count * room;
        self.carved += count;
        FragCuts {
            next: first,
            room: room as usize,
            len_target: size as u64 | (self.target as u64) << 32,
            // SAFETY: set with the page, never null then.
            meta: unsafe { NonNull::new_unchecked(self.meta.cast_mut()) },
            left: count,
        }
    }

    /// Starts cutting the page at `page` (metadata `meta`, owner set, count
    /// 0: at rest; IO address `iova`) into fragments of `size` bytes
    /// (1..=page size) and about that size. The carver holds no page.
    ///
    /// The IO address comes from the caller (the provider's arithmetic), not
    /// from the metadata: the page's metadata line is then not read here,
    /// where it is often cold (it was last touched by the page's last free).
    #[inline]
    pub(crate) fn take(&mut self, page: usize, meta: &PageMeta, iova: u64, size: usize) {
        debug_assert!(self.page == 0 && self.size_ok(size));
        debug_assert_eq!(iova, meta.iova);
        self.page = page;
        self.meta = meta;
        // Pages are a power of two in size. Truncated to 32 bits: a region
        // of more than 2^32 pages only repeats colours.
        self.page_no = (iova >> self.page_bytes.trailing_zeros()) as u32;
        self.start_over(size);
    }

    fn start_over(&mut self, size: usize) {
        let stride = (size as u32).next_multiple_of(FRAG_ALIGN as u32);
        self.carved = 0;
        if stride != self.last_stride {
            self.last_stride = stride;
            self.last_target = self.page_bytes / stride;
            let left = self.page_bytes - self.last_target * stride;
            self.colours = left / FRAG_ALIGN as u32 + 1;
            self.colour_mul = (u64::MAX / self.colours as u64).wrapping_add(1);
        }
        self.target = self.last_target;
        // The page's colour: `target` fragments from its offset still fit.
        // Numbered by its IO address (its offset in the provider's region,
        // whose start is aligned to a page or more), so a provider's pages
        // take the same colours wherever the region is mapped.
        let colour = fastmod(self.page_no, self.colour_mul, self.colours);
        debug_assert_eq!(colour, self.page_no % self.colours);
        self.offset = colour * FRAG_ALIGN as u32;
    }

    /// Leaves the current page (if any): gives back the references of the
    /// fragments never cut. If that was the last reference, the carver
    /// starts the page over for fragments of `size` and returns true (it
    /// still holds it); otherwise it holds no page and returns false.
    #[inline]
    pub(crate) fn reuse_or_leave(&mut self, size: usize) -> bool {
        if self.page == 0 {
            return false;
        }
        let uncut = self.target - self.carved;
        // SAFETY: the metadata lives as long as the page, which we hold.
        let meta = unsafe { &*self.meta };
        if uncut != 0 && meta.put_refs(uncut, self.target) {
            // Every fragment is free: the page is ours alone; start over.
            self.start_over(size);
            return true;
        }
        // With nothing uncut, the fragments hold every reference and the
        // last of them sends the page home: the page's line is not touched.
        self.drop_page();
        false
    }

    /// Forgets the current page: nothing can be cut until the next `take`.
    fn drop_page(&mut self) {
        self.page = 0;
        self.meta = std::ptr::null();
        self.carved = 0;
        self.target = 0;
    }

    /// Gives up the current page for good: the last holder sends it home.
    pub(crate) fn release(&mut self) {
        if self.page == 0 {
            return;
        }
        let (target, uncut) = (self.target, self.target - self.carved);
        // SAFETY: the metadata lives as long as the page, which we hold.
        let meta = unsafe { &*self.meta };
        self.drop_page();
        if uncut != 0 && meta.put_refs(uncut, target) {
            // SAFETY: we gave back the last references: the page is ours.
            unsafe { page_home(meta) };
        }
    }
}

/// `a % d` for a divisor `d` >= 1 with `mul` = `2^64 / d` rounded up
/// (wrapped to 0 for `d` = 1): the low 64 bits of `mul * a` are the
/// fraction `a / d` in fixed point, and times `d` its top 64 bits are the
/// remainder, exact for every 32-bit `a` and `d` (Lemire, Kaser and Kurz,
/// "Faster remainder by direct computation", 2019).
#[inline(always)]
fn fastmod(a: u32, mul: u64, d: u32) -> u32 {
    let fraction = mul.wrapping_mul(a as u64);
    ((fraction as u128 * d as u128) >> 64) as u32
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::fastmod;

    #[test]
    fn fastmod_is_the_remainder() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for d in (1..=300u32).chain([1 << 16, 65_537, u32::MAX - 1, u32::MAX]) {
            let mul = (u64::MAX / d as u64).wrapping_add(1);
            for a in [0, 1, d - 1, d, d.wrapping_add(1), u32::MAX - 1, u32::MAX] {
                assert_eq!(fastmod(a, mul, d), a % d, "{a} % {d}");
            }
            for _ in 0..200 {
                // xorshift: a spread of 32-bit numerators.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let a = (x >> 32) as u32;
                assert_eq!(fastmod(a, mul, d), a % d, "{a} % {d}");
            }
        }
    }
}
