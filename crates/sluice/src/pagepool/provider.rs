//! The block provider: blocks of 4 KiB..64 KiB (orders 0..=4) from one
//! hugepage-or-anonymous region, by a buddy allocator under a lock — the slow
//! path that page pools and fragment caches amortise.
//!
//! The region is cut as the [`buddy`](super::buddy) module describes, with
//! blocks of up to 2 MiB kept whole, so an allocation of order 3 from a
//! quiet provider really splits a larger block and its free really merges it
//! back: each costs one lock round trip plus up to six split or merge steps
//! (see `sluice bench pagepool` for the figure). Nothing is cached per thread
//! in front of it, on purpose: that is the page pool's job.
//!
//! Blocks are owned [`Block`] handles (dropping one frees it). Beside the
//! region the provider keeps one [`PageMeta`] per 4 KiB page, for the
//! fragment counts of the layers above.
//!
//! Lifetime: [`BlockProvider`] handles are counted by hand, as the mempool's
//! are. The last handle frees the provider only when every block is back;
//! otherwise it leaks it on purpose (with a warning), because blocks and
//! fragments reach their provider through raw pointers.

use std::ptr::NonNull;

use super::PagePoolError;
use super::buddy::{Buddy, TOP_ORDER};
use super::meta::PageMeta;
use super::{MAX_ORDER, PAGE_SHIFT, PAGE_SIZE};
use crate::mempool::{Backing, HugepagePolicy, Region};
use crate::sync::{AtomicUsize, Mutex, MutexGuard, Ordering, fence};

/// How to build a [`BlockProvider`].
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// Name, for statistics and errors.
    pub name: String,
    /// Bytes of memory to manage (rounded up to the page size the region is
    /// mapped with: 2 MiB with hugepages, 4 KiB otherwise; all of the
    /// mapping is used).
    pub size: usize,
    /// Whether to use hugepages.
    pub hugepages: HugepagePolicy,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            name: "blocks".into(),
            size: 16 << 20,
            hugepages: HugepagePolicy::Auto,
        }
    }
}

/// A snapshot of a provider's state and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderStats {
    /// 4 KiB pages managed.
    pub pages: u32,
    /// Pages in allocated blocks.
    pub used_pages: u32,
    /// Free blocks of each order, 0 (4 KiB) to 9 (2 MiB).
    pub free_blocks: [u32; TOP_ORDER as usize + 1],
    /// Blocks allocated, per order 0..=3.
    pub allocs: [u64; MAX_ORDER as usize + 1],
    /// Blocks freed, per order 0..=3.
    pub frees: [u64; MAX_ORDER as usize + 1],
    /// Allocations that found no free block.
    pub failures: u64,
    /// Blocks split by allocations.
    pub splits: u64,
    /// Buddy pairs merged by frees.
    pub merges: u64,
}

/// What the lock guards: the allocator and the counters it updates.
#[derive(Debug)]
struct Locked {
    buddy: Buddy,
    allocs: [u64; MAX_ORDER as usize + 1],
    frees: [u64; MAX_ORDER as usize + 1],
    failures: u64,
}

/// The shared state of a provider.
pub(crate) struct ProviderInner {
    name: String,
    /// The memory. Blocks are `base + page * 4096`.
    region: Region,
    /// `region.base()` as an address.
    base: usize,
    /// One entry per page of the region; immutable apart from the entries'
    /// atomics.
    metas: Box<[PageMeta]>,
    /// The buddy allocator and its counters.
    locked: Mutex<Locked>,
    /// Live [`BlockProvider`] handles; the one that takes it to 0 decides
    /// whether to free (every block back) or leak.
    handles: AtomicUsize,
}

impl std::fmt::Debug for ProviderInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderInner")
            .field("name", &self.name)
            .field("pages", &self.metas.len())
            .finish()
    }
}

impl ProviderInner {
    fn lock(&self) -> MutexGuard<'_, Locked> {
        // A panic while holding the lock cannot happen inside the allocator's
        // short, non-panicking steps; if one did, the state is still whole.
        self.locked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates a block of `order` (checked by the caller); its address.
    pub(crate) fn alloc_addr(&self, order: u32) -> Result<usize, PagePoolError> {
        let mut l = self.lock();
        match l.buddy.alloc(order) {
            Some(p) => {
                l.allocs[order as usize] += 1;
                Ok(self.base + ((p as usize) << PAGE_SHIFT))
            }
            None => {
                l.failures += 1;
                Err(PagePoolError::Exhausted {
                    name: self.name.clone(),
                    order,
                })
            }
        }
    }

    /// Allocates a block of `order` if one is free, for a caller that has
    /// another way to get one: no failure counted, no error built.
    pub(crate) fn try_alloc_addr(&self, order: u32) -> Option<usize> {
        let mut l = self.lock();
        let p = l.buddy.alloc(order)?;
        l.allocs[order as usize] += 1;
        Some(self.base + ((p as usize) << PAGE_SHIFT))
    }

    /// Frees the block at `addr`.
    ///
    /// # Safety
    /// `addr` is the address of a block allocated from this provider and not
    /// freed since, which no one uses any more.
    pub(crate) unsafe fn free_addr(&self, addr: usize) {
        let p = ((addr - self.base) >> PAGE_SHIFT) as u32;
        let mut l = self.lock();
        match l.buddy.free(p) {
            Some(order) => l.frees[order as usize] += 1,
            // Unreachable under the contract; never corrupt the lists.
            None => debug_assert!(false, "provider '{}': bad free of {addr:#x}", self.name),
        }
    }

    /// The metadata of the page at `addr` (inside the region).
    #[inline(always)]
    pub(crate) fn meta_of(&self, addr: usize) -> &PageMeta {
        &self.metas[(addr - self.base) >> PAGE_SHIFT]
    }

    /// The region's address: an address in it less this is its IO
    /// address.
    #[inline(always)]
    pub(crate) fn base(&self) -> usize {
        self.base
    }

    /// Offset of `addr` in the region: its IO address.
    #[inline(always)]
    pub(crate) fn iova(&self, addr: usize) -> u64 {
        (addr - self.base) as u64
    }

    fn stats(&self) -> ProviderStats {
        let l = self.lock();
        let c = l.buddy.counts();
        ProviderStats {
            pages: l.buddy.pages(),
            used_pages: l.buddy.used_pages(),
            free_blocks: l.buddy.free_blocks(),
            allocs: l.allocs,
            frees: l.frees,
            failures: l.failures,
            splits: c.splits,
            merges: c.merges,
        }
    }
}

/// A block provider. Cheap to clone; `Send` and `Sync`.
///
/// ```
/// use sluice::pagepool::{BlockProvider, ProviderConfig};
///
/// let p = BlockProvider::new(ProviderConfig { size: 4 << 20, ..Default::default() }).unwrap();
/// let b = p.alloc(3).unwrap();
/// assert_eq!(b.len(), 32 * 1024);
/// assert!(!p.is_full());
/// drop(b);
/// assert!(p.is_full());
/// ```
pub struct BlockProvider {
    inner: NonNull<ProviderInner>,
}

// SAFETY: the shared state is `Sync` (a lock around the allocator, atomics in
// the metadata, an immutable region); the handle is a counted reference to it.
unsafe impl Send for BlockProvider {}
// SAFETY: as above.
unsafe impl Sync for BlockProvider {}

impl BlockProvider {
    /// Maps the region and builds the allocator. Errors: a size of 0 or over
    /// 2^44 bytes, or no memory.
    pub fn new(config: ProviderConfig) -> Result<BlockProvider, PagePoolError> {
        let ProviderConfig {
            name,
            size,
            hugepages,
        } = config;
        if size == 0 || size > 1 << 44 {
            return Err(PagePoolError::Config(format!(
                "block provider '{name}': size {size} bytes is not in 1..=2^44"
            )));
        }
        let region = Region::new(size, hugepages)
            .map_err(|e| PagePoolError::Config(format!("block provider '{name}': {e}")))?;
        let base = region.base().as_ptr() as usize;
        let pages = region.len() >> PAGE_SHIFT;
        let metas: Box<[PageMeta]> = (0..pages)
            .map(|p| PageMeta::new(base + (p << PAGE_SHIFT), (p << PAGE_SHIFT) as u64))
            .collect();
        let inner = Box::new(ProviderInner {
            name,
            region,
            base,
            metas,
            locked: Mutex::new(Locked {
                buddy: Buddy::new(pages as u32),
                allocs: [0; MAX_ORDER as usize + 1],
                frees: [0; MAX_ORDER as usize + 1],
                failures: 0,
            }),
            handles: AtomicUsize::new(1),
        });
        Ok(BlockProvider {
            inner: NonNull::from(Box::leak(inner)),
        })
    }

    #[inline(always)]
    pub(crate) fn inner(&self) -> &ProviderInner {
        // SAFETY: a live handle keeps the shared state alive.
        unsafe { self.inner.as_ref() }
    }

    /// The shared state's address, which tags a provider block's page
    /// metadata as the provider's (the page_frag_cache baseline).
    #[cfg(feature = "bench-baselines")]
    pub(crate) fn inner_ptr(&self) -> NonNull<ProviderInner> {
        self.inner
    }

    /// Allocates a block of `order` (0..=3: 4 KiB << order).
    pub fn alloc(&self, order: u32) -> Result<Block, PagePoolError> {
        check_order(order)?;
        let addr = self.inner().alloc_addr(order)?;
        Ok(Block {
            // SAFETY: block addresses lie in the mapped region, never null.
            ptr: unsafe { NonNull::new_unchecked(addr as *mut u8) },
            order: order as u8,
            provider: self.inner,
        })
    }

    /// The name given at creation.
    pub fn name(&self) -> &str {
        &self.inner().name
    }

    /// What the region sits on.
    pub fn backing(&self) -> Backing {
        self.inner().region.backing()
    }

    /// Bytes managed.
    pub fn size(&self) -> usize {
        self.inner().metas.len() << PAGE_SHIFT
    }

    /// True when `addr` lies in the provider's memory.
    pub fn contains(&self, addr: *const u8) -> bool {
        self.inner().region.contains(addr)
    }

    /// State and counters.
    pub fn stats(&self) -> ProviderStats {
        self.inner().stats()
    }

    /// True when every block is back (nothing allocated).
    pub fn is_full(&self) -> bool {
        self.stats().used_pages == 0
    }
}

/// Checks a block order.
pub(crate) fn check_order(order: u32) -> Result<(), PagePoolError> {
    if order > MAX_ORDER {
        Err(PagePoolError::BadOrder(order))
    } else {
        Ok(())
    }
}

impl Clone for BlockProvider {
    fn clone(&self) -> Self {
        // Relaxed: a new handle made from one we hold (as `Arc::clone`).
        self.inner().handles.fetch_add(1, Ordering::Relaxed);
        BlockProvider { inner: self.inner }
    }
}

impl Drop for BlockProvider {
    fn drop(&mut self) {
        // Release pairs with the Acquire fence of whichever drop is last, so
        // every handle's use happens-before the decision.
        if self.inner().handles.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        fence(Ordering::Acquire);
        let used = self.inner().lock().buddy.used_pages();
        if used == 0 {
            // SAFETY: the last handle is going and no block is out, so
            // nothing refers to the provider: `inner` came from `Box::leak`.
            drop(unsafe { Box::from_raw(self.inner.as_ptr()) });
        } else {
            eprintln!(
                "sluice: block provider '{}' dropped with {used} pages in use; leaking it so \
                 they stay valid",
                self.inner().name
            );
        }
    }
}

impl std::fmt::Debug for BlockProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockProvider")
            .field("name", &self.name())
            .field("size", &self.size())
            .field("backing", &self.backing())
            .finish()
    }
}

/// A block from a [`BlockProvider`]: `4096 << order` bytes, aligned to its
/// size within the region. Dropping it gives it back.
pub struct Block {
    ptr: NonNull<u8>,
    order: u8,
    /// The provider; alive while any block is out (it leaks rather than
    /// free itself otherwise).
    provider: NonNull<ProviderInner>,
}

// SAFETY: a block is exclusively owned memory; freeing it goes through the
// provider's lock.
unsafe impl Send for Block {}
// SAFETY: `&Block` gives read access to memory no one else writes.
unsafe impl Sync for Block {}

impl Block {
    /// The block's address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its order (size `4096 << order`).
    pub fn order(&self) -> u32 {
        self.order as u32
    }

    /// Its size in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        PAGE_SIZE << self.order
    }

    /// Its IO address (offset in the provider's region).
    pub fn iova(&self) -> u64 {
        // SAFETY: the provider outlives its blocks.
        unsafe { self.provider.as_ref() }.iova(self.ptr.as_ptr() as usize)
    }

    /// The block's bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the block is ours alone, `len` bytes of the mapped region.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: our block, from this provider (which outlives it), freed
        // once, and no longer used.
        unsafe { self.provider.as_ref().free_addr(self.ptr.as_ptr() as usize) };
    }
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("addr", &self.ptr)
            .field("order", &self.order)
            .finish()
    }
}
