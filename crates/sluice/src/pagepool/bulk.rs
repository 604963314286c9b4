//! Bulk freeing of fragments and pages (Linux's `xdp_frame_bulk` with
//! `page_pool_put_page_bulk`): a Tx completion or a drop path frees a burst
//! of buffers, and most of the per-buffer cost is shared out.
//!
//! # Algorithm
//!
//! - **Fragments, a run per page.** Fragments freed one after another are
//!   mostly of the same page (a carver cuts a page's fragments in a row and
//!   a queue sends them in order). A [`BulkFree`] keeps the references of the
//!   current run — the page's metadata, its target and how many — and gives
//!   them back in one [`put_refs`](super::meta::PageMeta::put_refs) when a
//!   fragment of another page comes, or at [`flush`](BulkFree::flush): one
//!   count update per run instead of one atomic per fragment, and when the
//!   run holds the page's last references, only a plain load.
//! - **Pages, a stash per pool.** A page whose last reference was given back
//!   here (or a whole [`Page`] freed here) goes into a small stash of pages
//!   of one pool; the stash goes home in one
//!   [`put_bulk`](super::pool::PoolInner::put_bulk) — the owner's direct
//!   cache, else one ring enqueue — when it is full ([`PAGE_BULK`]), when a
//!   page of another pool comes, or at `flush`. The ring's shared lines then
//!   cross to the allocating core once per stash, not once per page.
//! - Blocks of a page_frag_cache go straight back to their provider (its
//!   free takes a lock per block, as Linux's page_frag_cache has no bulk
//!   free).
//!
//! A run or a stash holds pages out of their pool until the flush, at most
//! one page in the run and [`PAGE_BULK`] in the stash: the allocating side
//! takes others meanwhile. Dropping the [`BulkFree`] flushes it.

use std::ptr::NonNull;

use super::frag::{Frag, page_home};
use super::meta::{OWNER_PROVIDER, PageMeta};
use super::pool::{Page, PoolInner};
use crate::sync::Ordering;

/// Pages stashed before they go home together.
pub const PAGE_BULK: usize = 16;

/// A context for freeing fragments and pages in bulk (see the module docs).
/// Free with [`free_frag`](Self::free_frag) and
/// [`free_page`](Self::free_page), then [`flush`](Self::flush) at the end of
/// the burst, or when the thread goes idle; dropping it flushes too.
///
/// ```
/// use sluice::pagepool::{BlockProvider, BulkFree, PageFragAlloc, PagePool, PagePoolConfig, ProviderConfig};
///
/// let provider = BlockProvider::new(ProviderConfig { size: 2 << 20, ..Default::default() }).unwrap();
/// let pool = PagePool::new(&provider, PagePoolConfig { order: 3, ..Default::default() }).unwrap();
/// let mut frags = PageFragAlloc::new(pool.clone());
/// let held: Vec<_> = (0..15).map(|_| frags.alloc_frag(2090).unwrap()).collect();
/// let mut bulk = BulkFree::new();
/// held.into_iter().for_each(|f| bulk.free_frag(f));
/// assert_eq!(pool.stats().in_ring, 0); // the run is not given back yet
/// bulk.flush(); // one count update for the 15, and the page goes home
/// assert_eq!(pool.stats().in_ring, 1);
/// drop((bulk, frags, pool));
/// assert!(provider.is_full());
/// ```
pub struct BulkFree {
    /// The current run's page metadata, or null when there is no run. While
    /// not null, `run_n` (>= 1) references on that page are ours to give
    /// back, so the page (and its metadata, in the provider that outlives
    /// it) stays valid.
    run_meta: *const PageMeta,
    /// The run's page target (what every fragment of the page carries).
    run_target: u32,
    /// References in the run.
    run_n: u32,
    /// The stash's pool, or null when the stash is empty. Its pages are out
    /// of the pool, which therefore stays valid (it leaks rather than free
    /// itself with pages out).
    pool: *const PoolInner,
    /// Pages in the stash: `pages[..len]`, distinct free pages of `pool`
    /// that no one uses.
    len: usize,
    pages: [usize; PAGE_BULK],
}

// SAFETY: what a `BulkFree` holds — references on a page, free pages out of
// a pool — are owned outright, and giving them back is thread-safe (the
// count is atomic; a pool put from a non-owner thread goes to the ring).
unsafe impl Send for BulkFree {}

impl Default for BulkFree {
    fn default() -> Self {
        BulkFree::new()
    }
}

impl BulkFree {
    /// An empty context.
    pub fn new() -> BulkFree {
        BulkFree {
            run_meta: std::ptr::null(),
            run_target: 0,
            run_n: 0,
            pool: std::ptr::null(),
            len: 0,
            pages: [0; PAGE_BULK],
        }
    }

    /// Frees a fragment: its reference joins the current run if it is of the
    /// run's page, else the run is given back and a new one starts.
    #[inline]
    pub fn free_frag(&mut self, frag: Frag) {
        let raw = frag.into_raw();
        if raw.meta.as_ptr().cast_const() == self.run_meta {
            self.run_n += 1;
            return;
        }
        self.end_run();
        // Read when the run ends: asked for now (see `FragRun::add`).
        super::prefetch(raw.meta.as_ptr().cast());
        self.run_meta = raw.meta.as_ptr();
        self.run_target = (raw.len_target >> 32) as u32;
        self.run_n = 1;
    }

    /// Frees a whole page into the stash.
    #[inline]
    pub fn free_page(&mut self, page: Page) {
        let (addr, pool) = page.into_raw();
        // SAFETY: a page of `pool`, out and no longer used (its handle is
        // gone).
        unsafe { self.stash(addr, pool) };
    }

    /// Gives back the run and sends the stash home.
    pub fn flush(&mut self) {
        self.end_run();
        self.flush_pages();
    }

    /// Gives back the run's references; the page goes to the stash (or its
    /// provider) if they were its last.
    #[inline]
    fn end_run(&mut self) {
        if self.run_meta.is_null() {
            return;
        }
        // SAFETY: we hold `run_n` references on the page: it and its
        // metadata are valid.
        let m = unsafe { &*self.run_meta };
        let (n, target) = (self.run_n, self.run_target);
        self.run_meta = std::ptr::null();
        self.run_n = 0;
        if m.put_refs(n, target) {
            // SAFETY: we gave back the last references: the page is ours.
            unsafe { self.page_home(m) };
        }
    }

    /// Sends a page whose fragments are all free home: a pool's page to the
    /// stash, a provider's block straight back.
    ///
    /// # Safety
    /// The caller holds the page alone.
    #[inline]
    unsafe fn page_home(&mut self, m: &PageMeta) {
        // Relaxed: written before any fragment of the page existed (see
        // `PageMeta::owner`).
        let owner = m.owner.load(Ordering::Relaxed);
        if owner & OWNER_PROVIDER != 0 {
            // SAFETY: as the contract says.
            unsafe { page_home(m) };
        } else {
            // SAFETY: a page of that pool, out, ours alone.
            unsafe { self.stash(m.addr, owner as *const PoolInner) };
        }
    }

    /// Adds a page of `pool` to the stash, first sending the stash home if it
    /// is full or of another pool.
    ///
    /// # Safety
    /// `addr` is a page of `pool`, out of it and no longer used.
    #[inline]
    unsafe fn stash(&mut self, addr: usize, pool: *const PoolInner) {
        if pool != self.pool || self.len == PAGE_BULK {
            self.flush_pages();
            self.pool = pool;
        }
        self.pages[self.len] = addr;
        self.len += 1;
    }

    /// Sends the stash home in one bulk put.
    #[inline(never)]
    fn flush_pages(&mut self) {
        if self.len == 0 {
            return;
        }
        let n = std::mem::replace(&mut self.len, 0);
        let pool = std::mem::replace(&mut self.pool, std::ptr::null());
        // SAFETY: the stash's pages keep the pool valid until they are home;
        // they are distinct free pages of it, no longer used.
        unsafe { (*pool).put_bulk(&self.pages[..n]) };
    }
}

impl Drop for BulkFree {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A run of fragment references on one page, given back in one count
/// update: what a burst free of mbufs (`free_bulk`) keeps for the Rx
/// fragments it meets. Lighter than a [`BulkFree`] (three words, nothing to
/// set up for a burst with no fragment); a page whose last references it
/// gives back goes home at once.
pub(crate) struct FragRun {
    /// The run's page metadata, or null when there is no run. While not
    /// null, `n` (>= 1) references on that page are ours to give back, so
    /// the page and its metadata stay valid.
    meta: *const PageMeta,
    /// The page's target.
    target: u32,
    /// References in the run.
    n: u32,
}

impl FragRun {
    /// No run.
    #[inline(always)]
    pub(crate) const fn new() -> FragRun {
        FragRun {
            meta: std::ptr::null(),
            target: 0,
            n: 0,
        }
    }

    /// Adds a reference on the page of `meta` (whose fragments carry
    /// `target`) to the run, first ending the run if it is of another page.
    ///
    /// # Safety
    /// The caller holds that reference and gives it up here; it no longer
    /// uses the fragment's bytes.
    #[inline(always)]
    pub(crate) unsafe fn add(&mut self, meta: NonNull<PageMeta>, target: u32) {
        if meta.as_ptr().cast_const() == self.meta {
            self.n += 1;
            return;
        }
        self.end();
        // The page's count is read when the run ends, a page's worth of
        // frees later: ask for its line now, so the miss overlaps them.
        super::prefetch(meta.as_ptr().cast());
        self.meta = meta.as_ptr();
        self.target = target;
        self.n = 1;
    }

    /// Takes the run out as its page metadata (null if none), target and
    /// count, leaving no run: the caller holds those references now, and
    /// keeps them in locals while it adds to them (a loop whose other
    /// stores go through raw pointers, which may alias the run's fields,
    /// keeps locals in registers where it reloads and stores fields).
    #[inline(always)]
    pub(crate) fn take_parts(&mut self) -> (*const PageMeta, u32, u32) {
        let parts = (self.meta, self.target, self.n);
        self.meta = std::ptr::null();
        self.n = 0;
        parts
    }

    /// Puts back a run taken with [`take_parts`](Self::take_parts), over
    /// no run.
    ///
    /// # Safety
    /// The caller holds `n` (>= 1) references on the page of `meta` (whose
    /// fragments carry `target`) and gives them up here, or `meta` is null
    /// and `n` is 0; there is no run (`take_parts` emptied it).
    #[inline(always)]
    pub(crate) unsafe fn put_parts(&mut self, meta: *const PageMeta, target: u32, n: u32) {
        debug_assert!(self.meta.is_null() && (meta.is_null() == (n == 0)));
        self.meta = meta;
        self.target = target;
        self.n = n;
    }

    /// Gives back the run's references; the page goes home if they were its
    /// last. Out of line: once per page, and kept out of the burst free's
    /// loop, which then keeps its own values in registers.
    #[inline(never)]
    pub(crate) fn end(&mut self) {
        if self.meta.is_null() {
            return;
        }
        // SAFETY: we hold `n` references on the page: it and its metadata
        // are valid.
        let m = unsafe { &*self.meta };
        let (n, target) = (self.n, self.target);
        self.meta = std::ptr::null();
        self.n = 0;
        if m.put_refs(n, target) {
            // SAFETY: we gave back the last references: the page is ours.
            unsafe { page_home(m) };
        }
    }
}

impl Drop for FragRun {
    fn drop(&mut self) {
        self.end();
    }
}

impl std::fmt::Debug for BulkFree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkFree")
            .field("run", &self.run_n)
            .field("stashed", &self.len)
            .finish()
    }
}
