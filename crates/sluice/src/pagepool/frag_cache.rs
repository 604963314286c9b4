//! A page_frag_cache-style allocator (Linux's `page_frag_alloc`), for
//! contrast with the page pool's fragments: blocks (32 KiB by default) taken
//! straight from the block provider, split into fragments with the same
//! biased count, and given back to the provider when their last fragment is
//! freed.
//!
//! Per fragment it costs what [`PageFragAlloc`](super::PageFragAlloc) costs;
//! per block it pays the provider's slow path (lock, buddy split) to get one
//! and again (lock, buddy merge) when the last fragment goes, instead of a
//! page pool recycle. If every fragment of the current block is already
//! free when it runs out, it starts the block over without the provider.

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
    #[inline]
    pub fn alloc_frag(&mut self, size: usize) -> Result<Frag, PagePoolError> {
        if size.wrapping_sub(1) < self.carver.page_bytes()
            && let Some(f) = self.carver.carve(size)
        {
            return Ok(f);
        }
        self.alloc_frag_slow(size)
    }

    #[inline(never)]
    fn alloc_frag_slow(&mut self, size: usize) -> Result<Frag, PagePoolError> {
        self.carver.check(size)?;
        if !self.carver.recycle_or_leave() {
            let p = self.provider.inner();
            let block = p.alloc_addr(self.order)?;
            let meta = p.meta_of(block);
            // Before any fragment of the block exists (see `PageMeta::owner`).
            let tag = self.provider.inner_ptr().as_ptr() as usize | OWNER_PROVIDER;
            meta.owner.store(tag, Ordering::Relaxed);
            self.carver.take(block, meta);
        }
        Ok(self
            .carver
            .carve(size)
            .expect("a fresh block holds any fragment up to the block size"))
    }
}

impl Drop for PageFragCache {
    fn drop(&mut self) {
        self.carver.release();
    }
}
