//! Fragments from a page pool (Linux's `page_pool_alloc_frag`): large pages
//! recycled through the pool, each split into packet-sized fragments.
//!
//! Per fragment: carving (no atomic, no shared line) and, at its free, one
//! atomic increment of the page's count. Per page — once per `page / size`
//! fragments — a get from the pool (its direct cache on the owner thread)
//! and, at the last free, a put back. So the page recycle is amortised over
//! the fragments, and the provider's slow path is not on the way at all.

use super::PagePoolError;
use super::frag::{Carver, Frag};
use super::pool::PagePool;

/// A fragment allocator over a [`PagePool`]. One per user (an Rx queue):
/// `alloc_frag` takes `&mut self`.
///
/// ```
/// use sluice::pagepool::{BlockProvider, PageFragAlloc, PagePool, PagePoolConfig, ProviderConfig};
///
/// let provider = BlockProvider::new(ProviderConfig { size: 4 << 20, ..Default::default() }).unwrap();
/// let pool = PagePool::new(&provider, PagePoolConfig { order: 3, ..Default::default() }).unwrap();
/// let mut frags = PageFragAlloc::new(pool.clone());
/// let a = frags.alloc_frag(2090).unwrap();
/// let b = frags.alloc_frag(2090).unwrap();
/// assert_eq!(b.as_ptr() as usize - a.as_ptr() as usize, 2112); // 64-byte aligned
/// assert_eq!(frags.alloc_frag(0).unwrap_err().to_string(),
///            "fragment size 0 is not in 1..=32768 (the page size)");
/// drop((a, b, frags));
/// assert!(pool.all_home());
/// ```
#[derive(Debug)]
pub struct PageFragAlloc {
    pool: PagePool,
    carver: Carver,
}

impl PageFragAlloc {
    /// An allocator cutting the pages of `pool`.
    pub fn new(pool: PagePool) -> PageFragAlloc {
        let carver = Carver::new(pool.page_bytes());
        PageFragAlloc { pool, carver }
    }

    /// The pool the pages come from.
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    /// Largest fragment: the page size.
    pub fn max_frag(&self) -> usize {
        self.carver.page_bytes()
    }

    /// A fragment of `size` bytes (1..=page size), 64-byte aligned.
    ///
    /// Inlined whole (the refill is not), so the new handle stays in
    /// registers on its way to wherever the caller keeps it.
    #[inline(always)]
    pub fn alloc_frag(&mut self, size: usize) -> Result<Frag, PagePoolError> {
        if !(self.carver.size_ok(size) && self.carver.fits(size)) {
            self.refill(size)?;
        }
        Ok(self.carver.cut(size))
    }

    /// `n` fragments of `size` bytes (1..=page size), each handed to `each`
    /// in turn: the same fragments, in the same order, as `n` calls of
    /// [`alloc_frag`](Self::alloc_frag), but cut a page's run at a time
    /// (one fit check and one update of the carving state per run, not per
    /// fragment). On an error (no page to be had, a bad size) the fragments
    /// handed out before it stay the caller's; if `each` panics, the
    /// fragments of the run not yet handed out are given back.
    ///
    /// ```
    /// use sluice::pagepool::{BlockProvider, PageFragAlloc, PagePool, PagePoolConfig, ProviderConfig};
    ///
    /// let provider = BlockProvider::new(ProviderConfig { size: 2 << 20, ..Default::default() }).unwrap();
    /// let pool = PagePool::new(&provider, PagePoolConfig { order: 3, ..Default::default() }).unwrap();
    /// let mut frags = PageFragAlloc::new(pool.clone());
    /// let mut held = Vec::new();
    /// frags.alloc_frags(2090, 20, |f| held.push(f)).unwrap();
    /// assert_eq!(pool.stats().alloc_slow, 2); // 15 from the first page, 5 from the second
    /// assert_eq!(held[1].as_ptr() as usize - held[0].as_ptr() as usize, 2112);
    /// drop((held, frags));
    /// assert!(pool.all_home());
    /// ```
    #[inline(always)]
    pub fn alloc_frags(
        &mut self,
        size: usize,
        n: usize,
        mut each: impl FnMut(Frag),
    ) -> Result<(), PagePoolError> {
        let mut left = n;
        while left != 0 {
            if !(self.carver.size_ok(size) && self.carver.fits(size)) {
                self.refill(size)?;
            }
            let run = self.carver.cut_run(size, left);
            left -= run.remaining();
            run.for_each(&mut each);
        }
        Ok(())
    }

    /// Makes the carver able to cut `size` bytes: checks the size, then
    /// starts the current page over if it is free, else takes a new one.
    #[inline(never)]
    fn refill(&mut self, size: usize) -> Result<(), PagePoolError> {
        if !self.carver.size_ok(size) {
            return Err(self.carver.bad_size(size));
        }
        if !self.carver.reuse_or_leave(size) {
            let inner = self.pool.inner();
            let page = inner.get()?;
            let provider = inner.provider();
            let (meta, iova) = (provider.meta_of(page), provider.iova(page));
            self.carver.take(page, meta, iova, size);
        }
        Ok(())
    }
}

impl Drop for PageFragAlloc {
    fn drop(&mut self) {
        self.carver.release();
    }
}
