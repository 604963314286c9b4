//! A page_frag_cache-style allocator (Linux's `page_frag_alloc`), the
//! baseline the page pool's fragments are measured against (`sluice bench
//! pagepool`); no driver uses it. It takes blocks (32 KiB by default)
//! straight from the block provider, splits them into fragments with the
//! same per-page count, and gives each back to the provider when its last
//! fragment is freed.
//!
//! Per fragment it costs what [`PageFragAlloc`](super::PageFragAlloc) costs;
//! per block it pays the provider's slow path (lock, buddy split) to get one
//! and again (lock, buddy merge) when the last fragment goes, instead of a
//! page pool recycle. If it leaves a block before cutting all of its target
//! (a larger size came) and every fragment is already free, it starts the
//! block over without the provider.

use super::PAGE_SIZE;
use super::PagePoolError;
use super::frag::{Carver, Frag};
use super::meta::OWNER_PROVIDER;
use super::provider::{BlockProvider, check_order};
use crate::sync::Ordering;

/// Fragments from provider blocks of one order. One per user: `alloc_frag`
/// takes `&mut self`.
///
/// ```
/// use sluice::pagepool::{BlockProvider, PageFragCache, ProviderConfig};
///
/// let provider = BlockProvider::new(ProviderConfig { size: 4 << 20, ..Default::default() }).unwrap();
/// let mut cache = PageFragCache::new(&provider, 3).unwrap();
/// let f = cache.alloc_frag(8590).unwrap();
/// assert_eq!(f.len(), 8590);
/// drop((f, cache));
/// assert!(provider.is_full());
/// ```
#[derive(Debug)]
pub struct PageFragCache {
    provider: BlockProvider,
    order: u32,
    carver: Carver,
}

impl PageFragCache {
    /// A cache cutting blocks of `order` (0..=3) from `provider`.
    pub fn new(provider: &BlockProvider, order: u32) -> Result<PageFragCache, PagePoolError> {
        check_order(order)?;
        Ok(PageFragCache {
            provider: provider.clone(),
            order,
            carver: Carver::new(PAGE_SIZE << order),
        })
    }

    /// Largest fragment: the block size.
    pub fn max_frag(&self) -> usize {
        self.carver.page_bytes()
    }

    /// A fragment of `size` bytes (1..=block size), 64-byte aligned.
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

    /// Makes the carver able to cut `size` bytes: checks the size, then
    /// starts the current block over if it is free, else takes a new one
    /// from the provider.
    #[inline(never)]
    fn refill(&mut self, size: usize) -> Result<(), PagePoolError> {
        if !self.carver.size_ok(size) {
            return Err(self.carver.bad_size(size));
        }
        if !self.carver.reuse_or_leave(size) {
            let p = self.provider.inner();
            let block = p.alloc_addr(self.order)?;
            let meta = p.meta_of(block);
            // Before any fragment of the block exists (see `PageMeta::owner`).
            let tag = self.provider.inner_ptr().as_ptr() as usize | OWNER_PROVIDER;
            meta.owner.store(tag, Ordering::Relaxed);
            self.carver.take(block, meta, p.iova(block), size);
        }
        Ok(())
    }
}

impl Drop for PageFragCache {
    fn drop(&mut self) {
        self.carver.release();
    }
}
