//! Fragments: pieces of a page handed out one per packet, and the carving
//! that cuts them.
//!
//! A [`Carver`] holds one page at a time and cuts fragments from its start
//! upwards, each rounded up to [`FRAG_ALIGN`](super::FRAG_ALIGN) bytes (a
//! cache line), moving one reference of the page's count from itself to the
//! fragment without an atomic (see [`meta`](super::meta) for the count and its
//! bias). When the next fragment does not fit, the carver gives up the
//! references it still holds in one atomic: if that was the last, every
//! fragment of the page is already free and the carver starts over on the
//! same page; otherwise it takes a new one, and the page goes home when its
//! last fragment is freed — from whichever thread that happens.
//!
//! Where pages come from and go back to is the carver's user's business: the
//! page pool's fragment allocator ([`PageFragAlloc`](super::PageFragAlloc))
//! or the page_frag_cache-style one over the provider
//! ([`PageFragCache`](super::PageFragCache)). The page's metadata says where
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
    /// Bytes. A full word, though it fits 32 bits: the handle is copied
    /// whole right after it is built, and a 4-byte store read back by an
    /// 8-byte load cannot be forwarded (a stall of a dozen cycles per
    /// fragment).
    len: usize,
    /// The page's metadata (in its provider, which outlives the page).
    meta: NonNull<PageMeta>,
}

// SAFETY: a fragment's bytes are its own (carved ranges never overlap); the
// page count it drops is atomic, and the page's way home is thread-safe.
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
        self.len
    }

    /// The fragment's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes of the page, owned by this fragment alone.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The fragment's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
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

    /// Gives up the handle without freeing: the address, the length and the
    /// page's metadata (for [`put_frag_ref`], or [`from_raw`](Self::from_raw)).
    pub(crate) fn into_raw(self) -> (NonNull<u8>, usize, NonNull<PageMeta>) {
        let r = (self.ptr, self.len, self.meta);
        std::mem::forget(self);
        r
    }

    /// Rebuilds a handle from [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    /// The parts came from `into_raw`, and the reference they stand for was
    /// not given back since.
    pub(crate) unsafe fn from_raw(ptr: NonNull<u8>, len: usize, meta: NonNull<PageMeta>) -> Frag {
        Frag { ptr, len, meta }
    }
}

impl Drop for Frag {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this fragment holds one reference on the page, given up
        // here once; its bytes are no longer used.
        unsafe { put_frag_ref(self.meta) };
    }
}

impl std::fmt::Debug for Frag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frag")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// Gives up one fragment reference on the page of `meta`; the last sends
/// the page home.
///
/// # Safety
/// The caller holds a reference on that page (a fragment) and no longer uses
/// the fragment's bytes.
#[inline(always)]
pub(crate) unsafe fn put_frag_ref(meta: NonNull<PageMeta>) {
    // SAFETY: the provider, and so the metadata, outlives its pages.
    let m = unsafe { meta.as_ref() };
    if m.put_refs(1) {
        // SAFETY: we held the last reference: the page is ours alone.
        unsafe { page_home(m) };
    }
}

/// Sends a page whose fragments are all free back where its metadata says.
///
/// # Safety
/// The caller holds the page alone (its count went to zero in its hands).
#[cold]
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

/// The carving state: one page at a time (see the module docs).
#[derive(Debug)]
pub(crate) struct Carver {
    /// The current page's address, or 0 when there is none.
    page: usize,
    /// Its metadata (valid while `page != 0`).
    meta: *const PageMeta,
    /// Next free byte of the page.
    offset: u32,
    /// References on the page we still hold. At least 1 while we hold the
    /// page: a page fits fewer fragments than the bias.
    bias: u32,
    /// Page size in bytes.
    page_bytes: u32,
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
            bias: 0,
            page_bytes: page_bytes as u32,
        }
    }

    /// References a fresh page starts with: more than it can hold fragments.
    #[inline(always)]
    fn full_bias(&self) -> u32 {
        self.page_bytes / FRAG_ALIGN as u32 + 1
    }

    /// Page size in bytes.
    #[inline(always)]
    pub(crate) fn page_bytes(&self) -> usize {
        self.page_bytes as usize
    }

    /// Checks a fragment size: 1..=page size.
    #[inline(always)]
    pub(crate) fn check(&self, size: usize) -> Result<(), PagePoolError> {
        if size.wrapping_sub(1) < self.page_bytes as usize {
            Ok(())
        } else {
            Err(PagePoolError::BadSize {
                size,
                max: self.page_bytes as usize,
            })
        }
    }

    /// Cuts a fragment of `size` bytes (checked: 1..=page size) from the
    /// current page, if there is one and it fits.
    #[inline(always)]
    pub(crate) fn carve(&mut self, size: usize) -> Option<Frag> {
        let room = (size as u32).next_multiple_of(FRAG_ALIGN as u32);
        let end = self.offset + room;
        if self.page == 0 || end > self.page_bytes {
            return None;
        }
        let ptr = self.page + self.offset as usize;
        self.offset = end;
        // One of our references moves to the fragment; `bias` stays >= 1
        // since the page holds fewer fragments than the full bias.
        self.bias -= 1;
        Some(Frag {
            // SAFETY: inside the page, which is in the region: not null.
            ptr: unsafe { NonNull::new_unchecked(ptr as *mut u8) },
            len: size,
            // SAFETY: set with the page, never null then.
            meta: unsafe { NonNull::new_unchecked(self.meta.cast_mut()) },
        })
    }

    /// Starts carving the free page at `page` (whose metadata is `meta`,
    /// owner already set); the carver holds no page.
    #[inline]
    pub(crate) fn take(&mut self, page: usize, meta: &PageMeta) {
        debug_assert_eq!(self.page, 0);
        let bias = self.full_bias();
        meta.set_bias(bias);
        self.page = page;
        self.meta = meta;
        self.offset = 0;
        self.bias = bias;
    }

    /// Gives up the references held on the current page (if any). If they
    /// were the last, the carver starts the page over and returns true (it
    /// still holds it); otherwise it holds no page and returns false.
    #[inline]
    pub(crate) fn recycle_or_leave(&mut self) -> bool {
        if self.page == 0 {
            return false;
        }
        // SAFETY: the metadata lives as long as the page, which we hold.
        let meta = unsafe { &*self.meta };
        if meta.put_refs(self.bias) {
            // Every fragment is free: the page is ours alone; start over.
            let bias = self.full_bias();
            meta.set_bias(bias);
            self.offset = 0;
            self.bias = bias;
            return true;
        }
        self.page = 0;
        self.meta = std::ptr::null();
        false
    }

    /// Gives up the current page for good: the last holder sends it home.
    pub(crate) fn release(&mut self) {
        if self.page == 0 {
            return;
        }
        // SAFETY: the metadata lives as long as the page, which we hold.
        let meta = unsafe { &*self.meta };
        self.page = 0;
        self.meta = std::ptr::null();
        if meta.put_refs(self.bias) {
            // SAFETY: we held the last references: the page is ours alone.
            unsafe { page_home(meta) };
        }
    }
}
