//! The page pool: pages of one order, recycled without going back to the
//! block provider.
//!
//! # Algorithm (Linux's `page_pool`)
//!
//! - **Get:** on the owner thread, pop the direct cache (no atomic); if it is
//!   empty and at least a *ring batch* of pages waits in the ring, refill it
//!   with one burst dequeue (up to half the cache) and pop. Other threads
//!   dequeue one page from the ring. Otherwise take a block from the provider
//!   (the slow path) and stamp its metadata with this pool as the owner; when
//!   the provider has none left, the owner takes whatever the ring holds.
//! - **Put (recycle):** on the owner thread, push onto the direct cache; from
//!   any other thread — or when the cache is full — enqueue on the MP/MC ring;
//!   when the ring is full too, release the page to the provider.
//!
//! The *owner* is one lcore id: given in the config, or bound later by
//! [`PagePool::bind_to_current_lcore`] (a soft Rx queue binds its pool on its
//! first poll). Only the thread holding that id touches the direct cache.
//!
//! # The ring batch
//!
//! A dequeue costs the owner about the same few cache-line transfers whether
//! it moves one page or sixty: the producers' tail and the slots, written by
//! the freeing cores, and its own head and tail, which every producer reads.
//! Refilling with whatever waits, a pool with little slack — every page out
//! but the two or three just freed — pays them every page or two, and the
//! producers find those lines taken away as often. So the owner refills from
//! the ring only once `ring_batch` pages wait there, and until then takes
//! fresh pages from the provider: the pool grows once, by about a batch, and
//! from then on each dequeue moves a batch and the shared lines change hands
//! once per batch rather than per page. The price is about a batch of pages
//! more than the frees in flight need. (Linux gets its slack another way: its
//! slow path allocates a refill's worth of order-0 pages at once.)
//!
//! # Lifetime
//!
//! [`PagePool`] handles are counted by hand. Pages handed out ([`Page`],
//! fragments) reach the pool by a raw pointer, so the last handle frees the
//! pool only when every page it took from the provider is home (in the cache
//! or the ring) or released; otherwise it leaks the pool on purpose, with a
//! warning (as a mempool does). A page's way home ends with a store that
//! publishes it (the cache length, the ring tail, or the release count), so
//! once the last handle sees every page home nothing touches the pool again.

use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use super::cache::DirectCache;
use super::provider::{BlockProvider, ProviderInner, check_order};
use super::{PAGE_SIZE, PagePoolError};
use crate::counter::Counter;
use crate::lcore;
use crate::ring::SharedRing;
use crate::sync::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

/// No lcore owns the pool (yet).
const NO_OWNER: u32 = u32::MAX;

/// Default direct cache size (Linux's `PP_ALLOC_CACHE_SIZE`).
pub const DEFAULT_CACHE_SIZE: u32 = 128;
/// Default ring size.
pub const DEFAULT_RING_SIZE: u32 = 1024;
/// Default ring batch: pages that must be waiting in the ring before the
/// owner refills its cache from it (see the module docs) — half a refill.
/// The pool holds at most about this many pages more than its frees in
/// flight need: 1 MiB of 32 KiB pages, 128 KiB of 4 KiB ones.
pub const DEFAULT_RING_BATCH: u32 = 32;

/// How to build a [`PagePool`].
#[derive(Debug, Clone)]
pub struct PagePoolConfig {
    /// Name, for statistics and errors.
    pub name: String,
    /// Page order, 0..=3: pages of `4096 << order` bytes.
    pub order: u32,
    /// Direct cache entries (1..=4096).
    pub cache_size: u32,
    /// Ring entries for pages returned by other threads (a power of two,
    /// 1..=65536).
    pub ring_size: u32,
    /// Pages that must wait in the ring before the owner refills from it
    /// (1..=ring size; 1: whatever is there). Below that the owner takes a
    /// page from the provider (see the module docs).
    pub ring_batch: u32,
    /// The owner lcore, if known; else bound later.
    pub owner: Option<usize>,
}

impl Default for PagePoolConfig {
    fn default() -> Self {
        PagePoolConfig {
            name: "page_pool".into(),
            order: 0,
            cache_size: DEFAULT_CACHE_SIZE,
            ring_size: DEFAULT_RING_SIZE,
            ring_batch: DEFAULT_RING_BATCH,
            owner: None,
        }
    }
}

/// A snapshot of a page pool's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PagePoolStats {
    /// Gets served by the direct cache as it was (fast path).
    pub alloc_fast: u64,
    /// Pages taken from the ring (ring hits): into the direct cache, a
    /// refill's worth at a time, on the owner; one per get elsewhere.
    pub alloc_ring: u64,
    /// Pages taken from the provider (slow path).
    pub alloc_slow: u64,
    /// Puts into the direct cache.
    pub recycle_fast: u64,
    /// Pages released to the provider because the ring was full (or by
    /// [`PagePool::release_cached`]).
    pub released: u64,
    /// Pages in the direct cache now.
    pub cached: u64,
    /// Pages in the ring now.
    pub in_ring: u64,
    /// Pages out of the pool now (handed out, or being split into
    /// fragments).
    pub in_flight: u64,
}

/// The shared state of a pool, in three groups of cache lines: fields read
/// by every thread (never written after creation but for the owner, bound
/// once), the owner's hot fields, and the slow paths' counters. A thread
/// returning a page reads `owner` on every put; were it beside the owner's
/// cache length and counters, each put from another core would pull that
/// line away from the owner and the owner's next get would pull it back.
pub(crate) struct PoolInner {
    name: String,
    provider: BlockProvider,
    order: u32,
    /// The owner lcore id, or `NO_OWNER`. Set once (config or bind).
    owner: AtomicU32,
    /// Pages moved from the ring per refill of the cache, at most.
    refill: u32,
    /// Pages that must be waiting in the ring for the owner to refill from
    /// it (1..=ring size).
    ring_batch: u32,
    /// The owner's cache and counters.
    own: CachePadded<Own>,
    /// Pages returned by other threads (and by the owner when its cache is
    /// full). Its head/tail pairs have lines of their own.
    ring: SharedRing<usize>,
    /// Counters written by any thread (slow paths only), and the handles.
    slow: CachePadded<Slow>,
}

/// What only the owner thread writes.
struct Own {
    /// The owner's pages.
    cache: DirectCache,
    /// Gets served by the cache (single writer: the owner).
    alloc_fast: Counter,
    /// Puts into the cache (single writer: the owner).
    recycle_fast: Counter,
}

/// Counters of the slow paths, written by any thread.
struct Slow {
    alloc_ring: AtomicU64,
    alloc_slow: AtomicU64,
    released: AtomicU64,
    /// Live [`PagePool`] handles.
    handles: AtomicUsize,
}

impl PoolInner {
    /// True on the thread that owns the direct cache.
    #[inline(always)]
    fn is_owner(&self) -> bool {
        lcore::current() == Some(self.owner.load(Ordering::Relaxed) as usize)
    }

    /// Bytes per page.
    #[inline(always)]
    pub(crate) fn page_bytes(&self) -> usize {
        PAGE_SIZE << self.order
    }

    #[inline(always)]
    pub(crate) fn provider(&self) -> &ProviderInner {
        self.provider.inner()
    }

    /// A free page: the direct cache on the owner thread, else the ring, else
    /// the provider.
    #[inline(always)]
    pub(crate) fn get(&self) -> Result<usize, PagePoolError> {
        if self.is_owner() {
            // SAFETY: we are the owner thread.
            if let Some(a) = unsafe { self.own.cache.pop() } {
                self.own.alloc_fast.inc();
                return Ok(a);
            }
        }
        self.get_slow()
    }

    #[inline(never)]
    fn get_slow(&self) -> Result<usize, PagePoolError> {
        if self.is_owner() {
            // A snapshot: the dequeue takes what is there by then.
            let waiting = self.ring.ring().len();
            if waiting >= self.ring_batch as usize {
                // SAFETY: we are the owner thread.
                if let Some(a) = unsafe { self.refill_and_pop() } {
                    return Ok(a);
                }
            } else if waiting != 0 {
                // Fewer than a batch: grow by a page rather than dequeue
                // them (see the module docs), unless the provider has none
                // left; then they will do.
                if let Some(a) = self.provider().try_alloc_addr(self.order) {
                    return Ok(self.fresh(a));
                }
                // SAFETY: we are the owner thread.
                if let Some(a) = unsafe { self.refill_and_pop() } {
                    return Ok(a);
                }
            }
        } else {
            let mut a = [0usize];
            if self.ring.dequeue(&mut a, true).n == 1 {
                self.slow.alloc_ring.fetch_add(1, Ordering::Relaxed);
                return Ok(a[0]);
            }
        }
        let a = self.provider().alloc_addr(self.order)?;
        Ok(self.fresh(a))
    }

    /// Makes the block at `a`, fresh from the provider, a page of this pool.
    #[inline]
    fn fresh(&self, a: usize) -> usize {
        let meta = self.provider().meta_of(a);
        // Before any fragment of the page exists (see `PageMeta::owner`).
        meta.owner
            .store(self as *const PoolInner as usize, Ordering::Relaxed);
        self.slow.alloc_slow.fetch_add(1, Ordering::Relaxed);
        a
    }

    /// Moves what the ring holds (up to a refill) into the empty direct
    /// cache and pops a page, if there was any.
    ///
    /// # Safety
    /// Called on the owner thread.
    #[inline]
    unsafe fn refill_and_pop(&self) -> Option<usize> {
        // SAFETY: the owner thread, per the contract.
        let n = unsafe { self.own.cache.refill_from(&self.ring, self.refill) };
        if n == 0 {
            return None;
        }
        self.slow.alloc_ring.fetch_add(n as u64, Ordering::Relaxed);
        // SAFETY: as above; the refill left `n` pages in it.
        unsafe { self.own.cache.pop() }
    }

    /// Takes back a page.
    ///
    /// # Safety
    /// `addr` is a page of this pool that is out (got and not put since) and
    /// no longer used by anyone.
    #[inline(always)]
    pub(crate) unsafe fn put(&self, addr: usize) {
        // SAFETY: the owner thread; a free page of the pool.
        if self.is_owner() && unsafe { self.own.cache.push(addr, &self.own.recycle_fast) } {
            return;
        }
        // SAFETY: as the contract says.
        unsafe { self.put_slow(addr) }
    }

    /// # Safety
    /// As [`put`](Self::put).
    #[inline(never)]
    unsafe fn put_slow(&self, addr: usize) {
        // The enqueue's tail store is the last access to the pool.
        if self.ring.enqueue(&[addr], true).n == 1 {
            return;
        }
        // SAFETY: a page of this pool, from this provider, no longer used.
        unsafe { self.provider().free_addr(addr) };
        // Release: the page is back in the provider before the pool's last
        // handle, reading this count (Acquire), counts it home. The last
        // access to the pool.
        self.slow.released.fetch_add(1, Ordering::Release);
    }

    /// Takes back pages in bulk (Linux's `page_pool_put_page_bulk`): on the
    /// owner thread into the direct cache as far as it has room, the rest
    /// (all of them elsewhere) onto the ring in one enqueue, what does not
    /// fit there back to the provider.
    ///
    /// # Safety
    /// As [`put`](Self::put), for each of `addrs` (distinct pages).
    pub(crate) unsafe fn put_bulk(&self, addrs: &[usize]) {
        let mut rest = addrs;
        if self.is_owner() {
            // SAFETY: the owner thread; free pages of the pool.
            let n = unsafe { self.own.cache.push_bulk(rest, &self.own.recycle_fast) };
            rest = &rest[n..];
        }
        if rest.is_empty() {
            return;
        }
        // While any page of `rest` is not home, the pool stays (its last
        // handle leaks it rather than free it with pages out): the ring's
        // tail store, or the last release count below, is the last access.
        let n = self.ring.enqueue(rest, false).n;
        for &a in &rest[n..] {
            // SAFETY: a page of this pool, from this provider, no longer used.
            unsafe { self.provider().free_addr(a) };
            // Release: as in `put_slow`.
            self.slow.released.fetch_add(1, Ordering::Release);
        }
    }

    /// A snapshot. The last handle's drop decides on it whether every page
    /// is home, so each page's last step home is read with Acquire: the
    /// release count (pairs with `put_slow`'s Release increment), the cache
    /// length (with the owner's Release store in `DirectCache::push`), the
    /// ring's tails (with their Release stores).
    fn stats(&self) -> PagePoolStats {
        let released = self.slow.released.load(Ordering::Acquire);
        let cached = self.own.cache.len() as u64;
        let in_ring = self.ring.ring().len() as u64;
        // Relaxed: only handle holders take pages from the provider.
        let alloc_slow = self.slow.alloc_slow.load(Ordering::Relaxed);
        PagePoolStats {
            alloc_fast: self.own.alloc_fast.get(),
            alloc_ring: self.slow.alloc_ring.load(Ordering::Relaxed),
            alloc_slow,
            recycle_fast: self.own.recycle_fast.get(),
            released,
            cached,
            in_ring,
            in_flight: alloc_slow.saturating_sub(released + cached + in_ring),
        }
    }

    /// Releases the ring's pages to the provider; how many.
    fn release_ring(&self) -> u64 {
        let mut n = 0;
        let mut a = [0usize; 32];
        loop {
            let k = self.ring.dequeue(&mut a, false).n;
            if k == 0 {
                return n;
            }
            for &p in &a[..k] {
                // SAFETY: pages in the ring are free pages of this pool.
                unsafe { self.provider().free_addr(p) };
            }
            n += k as u64;
            self.slow.released.fetch_add(k as u64, Ordering::Release);
        }
    }

    /// Releases the direct cache's pages to the provider; how many.
    ///
    /// # Safety
    /// As [`DirectCache::drain`].
    unsafe fn release_cache(&self) -> u64 {
        let mut n = 0;
        // SAFETY: per the contract; cached pages are free pages of the pool.
        unsafe {
            self.own.cache.drain(|p| {
                self.provider().free_addr(p);
                n += 1;
            })
        };
        self.slow.released.fetch_add(n, Ordering::Release);
        n
    }
}

/// A page pool. Cheap to clone; `Send` and `Sync`.
///
/// ```
/// use sluice::pagepool::{BlockProvider, PagePool, PagePoolConfig, ProviderConfig};
///
/// let provider = BlockProvider::new(ProviderConfig { size: 4 << 20, ..Default::default() }).unwrap();
/// let pool = PagePool::new(&provider, PagePoolConfig { order: 1, ..Default::default() }).unwrap();
/// let mut page = pool.alloc_page().unwrap();
/// page.as_mut_slice()[..5].copy_from_slice(b"hello");
/// assert_eq!(page.len(), 8192);
/// drop(page); // back to the pool (its ring: this thread is not the owner)
/// assert_eq!(pool.stats().in_ring, 1);
/// drop(pool); // every page home: given back to the provider
/// assert!(provider.is_full());
/// ```
pub struct PagePool {
    inner: NonNull<PoolInner>,
}

// SAFETY: the shared state is used through `&PoolInner` only: atomics, the
// ring, and the direct cache, which only the owner lcore's thread touches.
unsafe impl Send for PagePool {}
// SAFETY: as above.
unsafe impl Sync for PagePool {}

impl PagePool {
    /// A pool of pages of `config.order` from `provider`. Errors name the bad
    /// value.
    pub fn new(
        provider: &BlockProvider,
        config: PagePoolConfig,
    ) -> Result<PagePool, PagePoolError> {
        let PagePoolConfig {
            name,
            order,
            cache_size,
            ring_size,
            ring_batch,
            owner,
        } = config;
        check_order(order)?;
        if !(1..=4096).contains(&cache_size) {
            return Err(PagePoolError::Config(format!(
                "page pool '{name}': cache size {cache_size} is not in 1..=4096"
            )));
        }
        if !(1..=65536).contains(&ring_size) || !ring_size.is_power_of_two() {
            return Err(PagePoolError::Config(format!(
                "page pool '{name}': ring size {ring_size} is not a power of two in 1..=65536"
            )));
        }
        if !(1..=ring_size).contains(&ring_batch) {
            return Err(PagePoolError::Config(format!(
                "page pool '{name}': ring batch {ring_batch} is not in 1..={ring_size} (the ring \
                 size)"
            )));
        }
        let owner = match owner {
            Some(id) if id >= lcore::MAX_LCORES => {
                return Err(PagePoolError::Config(format!(
                    "page pool '{name}': owner lcore {id} is not below {}",
                    lcore::MAX_LCORES
                )));
            }
            Some(id) => id as u32,
            None => NO_OWNER,
        };
        let ring = SharedRing::new(ring_size as usize)
            .map_err(|e| PagePoolError::Config(format!("page pool '{name}': {e}")))?;
        let inner = Box::new(PoolInner {
            name,
            provider: provider.clone(),
            order,
            owner: AtomicU32::new(owner),
            refill: cache_size.div_ceil(2),
            ring_batch,
            own: CachePadded::new(Own {
                cache: DirectCache::new(cache_size),
                alloc_fast: Counter::new(),
                recycle_fast: Counter::new(),
            }),
            ring,
            slow: CachePadded::new(Slow {
                alloc_ring: AtomicU64::new(0),
                alloc_slow: AtomicU64::new(0),
                released: AtomicU64::new(0),
                handles: AtomicUsize::new(1),
            }),
        });
        Ok(PagePool {
            inner: NonNull::from(Box::leak(inner)),
        })
    }

    #[inline(always)]
    pub(crate) fn inner(&self) -> &PoolInner {
        // SAFETY: a live handle keeps the shared state alive.
        unsafe { self.inner.as_ref() }
    }

    /// Allocates a page.
    #[inline]
    pub fn alloc_page(&self) -> Result<Page, PagePoolError> {
        let a = self.inner().get()?;
        Ok(Page {
            // SAFETY: page addresses lie in the provider's region.
            ptr: unsafe { NonNull::new_unchecked(a as *mut u8) },
            pool: self.inner,
        })
    }

    /// Makes the calling thread, an lcore, the pool's owner (the thread whose
    /// gets and puts use the direct cache). Binding again from the owner is
    /// fine; from another thread, or a thread that is not an lcore, it is an
    /// error.
    pub fn bind_to_current_lcore(&self) -> Result<(), PagePoolError> {
        let i = self.inner();
        let Some(me) = lcore::current() else {
            return Err(PagePoolError::Config(format!(
                "page pool '{}': the calling thread is not an lcore",
                i.name
            )));
        };
        // Relaxed: the id is only compared; whoever holds lcore id `me` is
        // this thread until it lets go of it (lcore ids pass with
        // Release/Acquire), and before this store no thread used the cache.
        match i
            .owner
            .compare_exchange(NO_OWNER, me as u32, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(cur) if cur == me as u32 => Ok(()),
            Err(cur) => Err(PagePoolError::Config(format!(
                "page pool '{}' is owned by lcore {cur}",
                i.name
            ))),
        }
    }

    /// The owner lcore, if bound.
    pub fn owner(&self) -> Option<usize> {
        match self.inner().owner.load(Ordering::Relaxed) {
            NO_OWNER => None,
            id => Some(id as usize),
        }
    }

    /// The name given at creation.
    pub fn name(&self) -> &str {
        &self.inner().name
    }

    /// The page order.
    pub fn order(&self) -> u32 {
        self.inner().order
    }

    /// Bytes per page.
    pub fn page_bytes(&self) -> usize {
        self.inner().page_bytes()
    }

    /// The provider the pages come from.
    pub fn provider(&self) -> &BlockProvider {
        &self.inner().provider
    }

    /// Counters and fill levels.
    pub fn stats(&self) -> PagePoolStats {
        self.inner().stats()
    }

    /// True when no page is out (each is in the cache or the ring).
    pub fn all_home(&self) -> bool {
        self.stats().in_flight == 0
    }

    /// Gives the pages in the ring back to the provider, and those in the
    /// direct cache too when called on the owner thread (or on any thread
    /// while no owner is bound); how many.
    pub fn release_cached(&self) -> u64 {
        let i = self.inner();
        let mut n = i.release_ring();
        if i.owner.load(Ordering::Relaxed) == NO_OWNER || i.is_owner() {
            // SAFETY: the owner thread; or no owner, so no thread ever used
            // the cache (it is empty).
            n += unsafe { i.release_cache() };
        }
        n
    }
}

impl Clone for PagePool {
    fn clone(&self) -> Self {
        // Relaxed: a new handle made from one we hold (as `Arc::clone`).
        self.inner().slow.handles.fetch_add(1, Ordering::Relaxed);
        PagePool { inner: self.inner }
    }
}

impl Drop for PagePool {
    fn drop(&mut self) {
        // Release pairs with the Acquire fence of whichever drop is last.
        if self.inner().slow.handles.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        fence(Ordering::Acquire);
        let i = self.inner();
        let s = i.stats();
        if s.in_flight != 0 {
            eprintln!(
                "sluice: page pool '{}' dropped with {} pages in use; leaking it so they stay \
                 valid",
                i.name, s.in_flight
            );
            return;
        }
        i.release_ring();
        // SAFETY: no handle is left and no page is out, so no thread can
        // reach the pool any more; the owner's last push is visible (its
        // Release length store, read by `stats` with Acquire).
        unsafe { i.release_cache() };
        // SAFETY: as above: nothing refers to the pool; it came from
        // `Box::leak`.
        drop(unsafe { Box::from_raw(self.inner.as_ptr()) });
    }
}

impl std::fmt::Debug for PagePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagePool")
            .field("name", &self.name())
            .field("order", &self.order())
            .field("owner", &self.owner())
            .finish()
    }
}

/// A whole page of a [`PagePool`]. Dropping it gives it back to the pool.
pub struct Page {
    ptr: NonNull<u8>,
    /// The pool; alive while any of its pages is out.
    pool: NonNull<PoolInner>,
}

// SAFETY: the page is exclusively owned memory; giving it back goes through
// the pool's thread-safe put.
unsafe impl Send for Page {}
// SAFETY: `&Page` only reads memory no one else writes.
unsafe impl Sync for Page {}

impl Page {
    #[inline(always)]
    fn pool(&self) -> &PoolInner {
        // SAFETY: the pool outlives its pages.
        unsafe { self.pool.as_ref() }
    }

    /// The page's address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its size in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.pool().page_bytes()
    }

    /// Its IO address (offset in the provider's region).
    pub fn iova(&self) -> u64 {
        self.pool().provider().iova(self.ptr.as_ptr() as usize)
    }

    /// Gives up the handle without freeing: the page's address and its pool.
    pub(crate) fn into_raw(self) -> (usize, *const PoolInner) {
        let r = (self.ptr.as_ptr() as usize, self.pool.as_ptr().cast_const());
        std::mem::forget(self);
        r
    }

    /// The page's bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the page is ours alone, `len` bytes of the region.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }
}

impl Drop for Page {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: our page, out of this pool, given back once, no longer used.
        unsafe { self.pool().put(self.ptr.as_ptr() as usize) };
    }
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page").field("addr", &self.ptr).finish()
    }
}
