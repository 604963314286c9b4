//! The pool: region, free ring, per-lcore caches and the get/put paths.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64 as StdAtomicU64, AtomicUsize as StdAtomicUsize};

use crossbeam_utils::CachePadded;

use super::cache::{
    CACHE_STACK, FLUSHING, HIT, LocalCache, flush_threshold, stack_mut, state_hits, state_len,
};
use super::memory::Region;
use super::{
    Elem, MAX_CACHE_SIZE, MAX_ELT_SIZE, MAX_POOL_SIZE, MempoolConfig, MempoolError, MempoolStats,
    element_stride,
};
use crate::copy::{copy_run, copy_slice};
use crate::lcore::{self, MAX_LCORES};
use crate::ring::SharedRing;
use crate::sync::{Mutex, MutexGuard, Ordering};

/// Caches per pool: one per possible lcore id. Loom models use few threads,
/// and every cache is a handful of tracked atomics, so they get 4.
const NB_CACHES: usize = if cfg!(loom) { 4 } else { MAX_LCORES };

/// Failed tries in a row after which a full ring's put checks whether it
/// can ever succeed (see `ring_put_retry`): far more than a stale consumer
/// tail lasts (a store on its way between cores).
const PUT_SPINS_BEFORE_CHECK: u32 = 1 << 20;

/// Counts of free elements a teardown makes before it settles for one that
/// may undercount (see [`PoolInner::count_free`]): each retry means another
/// thread's flush was under way, and flushes end by themselves.
const TEARDOWN_COUNTS: u32 = if cfg!(loom) { 2 } else { 1 << 16 };

/// Counts a statistics snapshot makes before it takes one that moved.
const STATS_COUNTS: u32 = if cfg!(loom) { 1 } else { 8 };

/// A pool's address in [`POOLS`].
struct Listed(NonNull<PoolInner>);

// SAFETY: only an address; `PoolInner` is `Sync` in all but name (see the
// `Send`/`Sync` impls of `Mempool`).
unsafe impl Send for Listed {}

/// Every pool with lcore caches, so an lcore that ends can give each its
/// cached elements back ([`release_lcore`]). A pool leaves the list, under
/// the lock, before it is freed; a leaked pool stays (its memory stays
/// valid, and an lcore that ends later still gives its elements back).
#[cfg(not(loom))]
static POOLS: Mutex<Vec<Listed>> = Mutex::new(Vec::new());

#[cfg(loom)]
loom::lazy_static! {
    static ref POOLS: Mutex<Vec<Listed>> = Mutex::new(Vec::new());
}

/// The pool list, locked. A panic while it was held (a put found an element
/// freed twice) leaves the list itself consistent: take it anyway.
fn pools() -> MutexGuard<'static, Vec<Listed>> {
    POOLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Gives lcore `id`'s cached elements in every pool back to the pool's ring.
/// Called by the lcore's thread when it lets go of the id (dropping its
/// [`LcoreGuard`](crate::lcore::LcoreGuard), which unwinding from a panic or
/// the thread's end does too), so that free elements never wait in the
/// cache of an lcore that is gone, and the next thread given the id starts
/// with empty caches.
///
/// # Safety
/// The caller holds lcore id `id` (it is the owner of cache `id` in every
/// pool) and lets go of it only after this returns.
pub(crate) unsafe fn release_lcore(id: usize) {
    let pools = pools();
    for p in pools.iter() {
        // SAFETY: a listed pool is alive (it leaves the list under this lock
        // before it is freed), and the caller owns cache `id`.
        unsafe { p.0.as_ref().flush_cache_of(id) };
    }
}

/// A handle to a pool. Cheap to clone; `Send` and `Sync`.
///
/// The pool lives while any handle does. When the last handle goes, the pool
/// is freed if every element is back (in the ring or a cache); otherwise it is
/// deliberately leaked, with a warning on stderr, so that elements still held
/// (for instance by buffers in flight on another thread) never point into
/// freed memory. The count it decides on never counts an element twice, even
/// while other threads put elements back and flush their caches; what it may
/// do, if other threads keep flushing for very long, is undercount and leak.
///
/// ```
/// use sluice::lcore;
/// use sluice::mempool::{Elem, Mempool, MempoolConfig};
///
/// let pool = Mempool::new(MempoolConfig {
///     name: "cached".into(),
///     size: 1023,
///     elt_size: 64,
///     cache_size: 32,
///     ..Default::default()
/// })?;
/// let worker = pool.clone();
/// lcore::launch(None, move || {
///     let mut batch = [Elem::DANGLING; 8];
///     // The lcore's cache starts empty: this get refills it from the ring.
///     worker.get_bulk(&mut batch).unwrap();
///     // SAFETY: the elements came from this pool and go back once.
///     unsafe { worker.put_bulk(&batch) }; // into the cache: no atomic
///     // The next get is served by the cache alone.
///     worker.get_bulk(&mut batch).unwrap();
///     // SAFETY: as above.
///     unsafe { worker.put_bulk(&batch) };
///     let stats = worker.stats();
///     assert_eq!((stats.cache_misses, stats.cache_hits), (1, 1));
///     assert!(stats.cached > 0);
/// })?
/// .join()
/// .unwrap();
///
/// // The lcore's cache went back to the ring when its thread ended.
/// let stats = pool.stats();
/// assert_eq!((stats.cached, stats.in_ring), (0, 1023));
/// assert!(pool.is_full());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Mempool {
    inner: NonNull<PoolInner>,
}

// SAFETY: `PoolInner` is shared through `&` only; its mutable state is atomics,
// the MP/MC ring and per-lcore caches that only their owner thread touches.
unsafe impl Send for Mempool {}
// SAFETY: as above.
unsafe impl Sync for Mempool {}

/// The pool proper. Lives at a fixed address for the pool's whole life, so
/// buffers may keep a raw pointer to it.
pub(crate) struct PoolInner {
    name: String,
    /// Number of elements.
    size: u32,
    /// Bytes asked for per element.
    elt_size: usize,
    /// Distance between elements: `element_stride(elt_size)`, an odd
    /// number of cache lines.
    stride: usize,
    /// Per-lcore cache size (0: no caches).
    cache_size: u32,
    /// Flush threshold, 1.5 × `cache_size`.
    flush_thresh: u32,
    /// Free elements not in any cache. Its capacity is at least `size`, so a
    /// put to it never fails.
    ring: SharedRing<Elem>,
    /// One cache per lcore id (`NB_CACHES`); empty when `cache_size` is 0.
    caches: Box<[CachePadded<LocalCache>]>,
    /// Handles alive. The last one to go decides whether the pool is freed.
    handles: StdAtomicUsize,
    /// Failed gets (slow path only, so a shared counter is fine).
    get_failures: StdAtomicU64,
    /// `debug` feature: one state byte per element (0 free, 1 in use).
    #[cfg(feature = "debug")]
    states: Box<[std::sync::atomic::AtomicU8]>,
    /// Loom models: read by every put just before its last store to the
    /// pool and written when the pool is freed, so loom reports a race if
    /// the pool can be freed while a put is still under way.
    #[cfg(loom)]
    teardown_witness: crate::sync::UnsafeCell<()>,
    /// The elements. Dropped last.
    region: Region,
}

/// Cache slots reserved by [`Mempool::zc_put_bulk`]: write elements into
/// [`slots`](ZcPut::slots), then [`commit`](ZcPut::commit). Dropping it
/// without committing puts nothing.
pub struct ZcPut<'a> {
    #[cfg(feature = "debug")]
    pool: &'a PoolInner,
    cache: &'a LocalCache,
    start: usize,
    n: usize,
}

impl Mempool {
    /// Builds a pool, mapping its region and putting every element in the
    /// ring. Errors name the offending value.
    pub fn new(config: MempoolConfig) -> Result<Mempool, MempoolError> {
        Self::with_init(config, |_, _| {})
    }

    /// Like [`new`](Self::new), and calls `init(bytes, index)` once for each
    /// element before it is first handed out (DPDK's `obj_init`).
    pub fn with_init(
        config: MempoolConfig,
        init: impl FnMut(&mut [u8], u32),
    ) -> Result<Mempool, MempoolError> {
        Self::with_init_in(config, super::Sharing::Private, init)
    }

    /// Like [`with_init`](Self::with_init), with the region private or
    /// shared through a `memfd` as `sharing` says
    /// ([`Region::with_sharing`]).
    pub fn with_init_in(
        config: MempoolConfig,
        sharing: super::Sharing,
        mut init: impl FnMut(&mut [u8], u32),
    ) -> Result<Mempool, MempoolError> {
        let MempoolConfig {
            name,
            size,
            elt_size,
            cache_size,
            hugepages,
        } = config;
        if size == 0 {
            return Err(MempoolError::ZeroSize);
        }
        if size > MAX_POOL_SIZE {
            return Err(MempoolError::TooManyElements(size));
        }
        if elt_size == 0 {
            return Err(MempoolError::ZeroEltSize);
        }
        if elt_size > MAX_ELT_SIZE {
            return Err(MempoolError::EltTooLarge(elt_size));
        }
        if cache_size as usize > MAX_CACHE_SIZE || 2 * cache_size as usize > CACHE_STACK {
            return Err(MempoolError::CacheTooLarge(cache_size));
        }
        let flush_thresh = flush_threshold(cache_size as usize) as u32;
        if flush_thresh > size {
            return Err(MempoolError::CacheExceedsPool { cache_size, size });
        }
        let stride = element_stride(elt_size);
        let region = Region::with_sharing(stride * size as usize, hugepages, sharing)
            .map_err(MempoolError::Memory)?;
        let ring = SharedRing::new((size as usize).next_power_of_two())
            .expect("a power of two no larger than MAX_POOL_SIZE is a valid ring capacity");
        let caches = if cache_size == 0 {
            Box::default()
        } else {
            (0..NB_CACHES)
                .map(|_| CachePadded::new(LocalCache::new()))
                .collect()
        };
        let base = region.base().as_ptr();
        let mut batch = Vec::with_capacity(256);
        for i in 0..size {
            // SAFETY: element `i` lies inside the region (`stride * size`
            // bytes were mapped) and nothing else refers to it yet.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut(base.add(i as usize * stride), elt_size) };
            init(bytes, i);
            batch.push(Elem::from_ptr(NonNull::from(bytes).cast()));
            if batch.len() == batch.capacity() || i + 1 == size {
                let moved = ring.enqueue(&batch, true);
                // Single-threaded here: the ring has room for every element.
                assert_eq!(moved.n, batch.len(), "fresh pool ring too small");
                batch.clear();
            }
        }
        let inner = Box::new(PoolInner {
            name,
            size,
            elt_size,
            stride,
            cache_size,
            flush_thresh,
            ring,
            caches,
            handles: StdAtomicUsize::new(1),
            get_failures: StdAtomicU64::new(0),
            #[cfg(feature = "debug")]
            states: (0..size)
                .map(|_| std::sync::atomic::AtomicU8::new(0))
                .collect(),
            #[cfg(loom)]
            teardown_witness: crate::sync::UnsafeCell::new(()),
            region,
        });
        let inner = NonNull::from(Box::leak(inner));
        if cache_size > 0 {
            pools().push(Listed(inner));
        }
        Ok(Mempool { inner })
    }

    #[inline(always)]
    pub(crate) fn inner(&self) -> &PoolInner {
        // SAFETY: the inner lives while any handle does, and we are one.
        unsafe { self.inner.as_ref() }
    }

    /// Address of the pool proper, for buffers that point back at it. Valid
    /// while any handle lives or any element is out (see the type's docs).
    #[inline(always)]
    pub(crate) fn inner_ptr(&self) -> NonNull<PoolInner> {
        self.inner
    }

    /// A new handle on the pool an element out of it points back at (a
    /// driver keeping the pool of the buffers it is given), or `None` if
    /// no handle is left (the pool was let go with elements out and is
    /// leaked: it stays valid, but a handle on it may not come back).
    ///
    /// # Safety
    /// `inner` is [`inner_ptr`](Self::inner_ptr) of a pool one of whose
    /// elements the caller holds out: the pool is alive (it is never freed
    /// with an element out) for at least the call.
    pub(crate) unsafe fn from_element_pool(inner: *const PoolInner) -> Option<Mempool> {
        // SAFETY: the caller's contract: a live pool.
        let pool = unsafe { &*inner };
        // A count, only while it is not 0 (`Weak::upgrade`'s loop): the last
        // handle's drop reads the pool after its decrement, so one that
        // reached 0 must never be revived and then freed under it. Relaxed:
        // as in `clone`, the handle we found keeps the pool alive.
        let mut n = pool.handles.load(Ordering::Relaxed);
        loop {
            if n == 0 {
                return None;
            }
            match pool
                .handles
                .compare_exchange_weak(n, n + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Some(Mempool {
                        inner: NonNull::from(pool),
                    });
                }
                Err(now) => n = now,
            }
        }
    }

    /// Gets one element, or `None` when the pool is empty.
    #[inline]
    pub fn get(&self) -> Option<Elem> {
        let mut e = [Elem::DANGLING];
        self.inner().get_bulk(&mut e).ok().map(|()| e[0])
    }

    /// Fills all of `dst` with elements, or takes none.
    #[inline]
    pub fn get_bulk(&self, dst: &mut [Elem]) -> Result<(), MempoolError> {
        self.inner().get_bulk(dst)
    }

    /// Gets `N` elements, a count fixed at compile time, or none: what
    /// [`get_bulk`](Self::get_bulk) does for a slice of `N`, with the cache
    /// hit a fixed-size copy the compiler unrolls (DPDK's
    /// `rte_mempool_get_bulk` with a constant count).
    ///
    /// ```
    /// # use sluice::mempool::{Mempool, MempoolConfig};
    /// let pool = Mempool::new(MempoolConfig { size: 63, cache_size: 0, ..Default::default() })?;
    /// let batch = pool.get_array::<4>()?;
    /// // SAFETY: the elements came from this pool and go back once.
    /// unsafe { pool.put_array(&batch) };
    /// assert!(pool.is_full());
    /// # Ok::<(), sluice::mempool::MempoolError>(())
    /// ```
    #[inline]
    pub fn get_array<const N: usize>(&self) -> Result<[Elem; N], MempoolError> {
        let mut out = [Elem::DANGLING; N];
        self.inner().get_array_into(&mut out).map(|()| out)
    }

    /// [`get_array`](Self::get_array) into the caller's array: fills all of
    /// `dst` or takes none. The elements go straight from the cache to
    /// `dst`, where a returned array may be copied again on its way to
    /// where the caller keeps it.
    #[inline]
    pub fn get_array_into<const N: usize>(&self, dst: &mut [Elem; N]) -> Result<(), MempoolError> {
        self.inner().get_array_into(dst)
    }

    /// Puts one element back.
    ///
    /// # Safety
    /// `elem` was got from this pool and is not free (not put back since), and
    /// the caller no longer uses it.
    #[inline]
    pub unsafe fn put(&self, elem: Elem) {
        // SAFETY: forwarded.
        unsafe { self.inner().put_bulk(&[elem]) }
    }

    /// Puts elements back.
    ///
    /// # Safety
    /// As [`put`](Self::put), for each element; no element appears twice.
    #[inline]
    pub unsafe fn put_bulk(&self, src: &[Elem]) {
        // SAFETY: forwarded.
        unsafe { self.inner().put_bulk(src) }
    }

    /// Puts back `N` elements, a count fixed at compile time: what
    /// [`put_bulk`](Self::put_bulk) does for a slice of `N`, with the cache
    /// hit a fixed-size copy.
    ///
    /// # Safety
    /// As [`put_bulk`](Self::put_bulk).
    #[inline]
    pub unsafe fn put_array<const N: usize>(&self, src: &[Elem; N]) {
        // SAFETY: forwarded.
        unsafe { self.inner().put_array(src) }
    }

    /// Reserves `n` slots at the top of the calling lcore's cache (flushing it
    /// first if they would take it past its threshold), for the caller to
    /// write `n` elements into and commit. `None` when the caller has no cache
    /// (not an lcore, or caches disabled) or `n` exceeds the flush threshold:
    /// use [`put_bulk`](Self::put_bulk) then.
    ///
    /// # Safety
    /// Until the returned guard is committed or dropped, the calling thread
    /// makes no other call on this pool (the slots are the cache's top) and
    /// stays registered as the same lcore (letting go of the id empties the
    /// cache and hands it to the id's next holder).
    #[inline]
    pub unsafe fn zc_put_bulk(&self, n: usize) -> Option<ZcPut<'_>> {
        // SAFETY: forwarded.
        unsafe { self.inner().zc_put_bulk(n) }
    }

    /// Pool name.
    pub fn name(&self) -> &str {
        &self.inner().name
    }

    /// Number of elements.
    pub fn size(&self) -> u32 {
        self.inner().size
    }

    /// Bytes per element, as configured.
    pub fn elt_size(&self) -> usize {
        self.inner().elt_size
    }

    /// Distance in bytes between consecutive elements.
    pub fn stride(&self) -> usize {
        self.inner().stride
    }

    /// Per-lcore cache size.
    pub fn cache_size(&self) -> u32 {
        self.inner().cache_size
    }

    /// Flush threshold of the caches.
    pub fn flush_threshold(&self) -> u32 {
        self.inner().flush_thresh
    }

    /// What the region sits on.
    pub fn backing(&self) -> super::Backing {
        self.inner().region.backing()
    }

    /// The region holding the elements.
    pub fn region(&self) -> &Region {
        &self.inner().region
    }

    /// True when `elem` is an element of this pool (inside the region, at an
    /// element boundary).
    pub fn contains(&self, elem: Elem) -> bool {
        self.inner().index_of(elem).is_some()
    }

    /// Index of `elem` in the pool, if it is one of its elements.
    pub fn index_of(&self, elem: Elem) -> Option<u32> {
        self.inner().index_of(elem)
    }

    /// IO address of an element: its byte offset in the region.
    #[inline]
    pub fn iova(&self, elem: Elem) -> u64 {
        self.inner().iova(elem)
    }

    /// Free elements now in the calling lcore's cache (0 for other threads).
    pub fn local_cache_len(&self) -> usize {
        self.inner().local_cache().map_or(0, LocalCache::len)
    }

    /// Moves every element in the calling lcore's cache to the ring, so that
    /// any thread can allocate them. (An lcore's caches go to the ring by
    /// themselves when it unregisters or its thread ends.)
    pub fn flush_local_cache(&self) {
        self.inner().flush_local_cache();
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> MempoolStats {
        self.inner().stats()
    }

    /// Free elements in each lcore's cache, `(lcore id, elements)`, caches
    /// holding none left out, in lcore id order. Counted as
    /// [`stats`](Self::stats) counts them, from any thread, while the
    /// lcores go on: a snapshot, in which a cache being flushed counts as
    /// empty (its elements are on their way to the ring).
    pub fn cache_counts(&self) -> Vec<(usize, u32)> {
        self.inner().free_counts().caches
    }

    /// Free elements in the ring and in each lcore's cache, counted
    /// together (as [`cache_counts`](Self::cache_counts) counts the caches),
    /// so that an element moving from a cache to the ring is counted once.
    pub fn free_counts(&self) -> FreeCounts {
        self.inner().free_counts()
    }

    /// True when every element is free (in the ring or a cache).
    ///
    /// A free element in a cache is allocatable by that cache's lcore (and
    /// goes to the ring when the lcore ends); other threads allocate from the
    /// ring.
    pub fn is_full(&self) -> bool {
        self.inner().all_home()
    }
}

impl Clone for Mempool {
    fn clone(&self) -> Self {
        // Relaxed: a new handle is made from an existing one, which keeps the
        // pool alive meanwhile (the `Arc` argument).
        self.inner().handles.fetch_add(1, Ordering::Relaxed);
        Mempool { inner: self.inner }
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        // Release pairs with the Acquire fence below in whichever drop is last,
        // so every handle's use of the pool happens-before the decision.
        if self.inner().handles.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        std::sync::atomic::fence(Ordering::Acquire);
        let inner = self.inner();
        // Locked while deciding, so no ending lcore flushes into a pool
        // being freed.
        let mut pools = pools();
        let free = inner.count_free(TEARDOWN_COUNTS);
        if free.in_ring + free.cached == inner.size {
            pools.retain(|p| p.0 != self.inner);
            drop(pools);
            #[cfg(loom)]
            inner.teardown_witness.with_mut(|_| ());
            // SAFETY: the last handle is going and every element is home,
            // so no buffer refers to the pool, nor can an ending lcore (it
            // left the list): `inner` came from `Box::leak`.
            drop(unsafe { Box::from_raw(self.inner.as_ptr()) });
        } else {
            drop(pools);
            eprintln!(
                "sluice: mempool '{}' dropped with {} of {} elements still in use; \
                 leaking it so they stay valid",
                inner.name,
                inner.size - (free.in_ring + free.cached).min(inner.size),
                inner.size
            );
        }
    }
}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = self.inner();
        f.debug_struct("Mempool")
            .field("name", &i.name)
            .field("size", &i.size)
            .field("elt_size", &i.elt_size)
            .field("cache_size", &i.cache_size)
            .field("backing", &i.region.backing())
            .finish()
    }
}

impl PoolInner {
    /// The calling thread's cache, if it is an lcore and caches are on.
    ///
    /// One compare: a thread that is not an lcore has an index past every
    /// table of lcores, and a pool without caches has an empty table.
    #[inline(always)]
    fn local_cache(&self) -> Option<&LocalCache> {
        self.caches.get(lcore::current_index()).map(|c| &**c)
    }

    /// Fills all of `dst` or takes nothing.
    ///
    /// The cache hit is inlined into the caller: one thread-local load, the
    /// cache length, the copy and a length store. Everything else (refill,
    /// ring, failure) is in the outlined [`get_bulk_slow`](Self::get_bulk_slow).
    #[inline(always)]
    pub(crate) fn get_bulk(&self, dst: &mut [Elem]) -> Result<(), MempoolError> {
        let n = dst.len();
        if let Some(cache) = self.local_cache() {
            let st = cache.state();
            let len = state_len(st);
            if n <= len {
                debug_assert!(len <= CACHE_STACK);
                // SAFETY: `local_cache` returned the caller's own cache, and
                // this is the only reference into its stack here.
                let stack = unsafe { stack_mut(cache) };
                // Pop the top `n`: the most recently freed, so cache-hot.
                // No bounds check: a small bulk is a few moves, and the check
                // would be a good part of the hit. A cache's length never
                // passes its flush threshold, below the stack's size
                // (`with_init` checks it).
                // SAFETY: `n <= len <= CACHE_STACK`, so `stack[len - n..len]`
                // is in bounds; `dst` holds `n`; a `&mut` overlaps nothing.
                unsafe { copy_run(stack.as_ptr().add(len - n), dst.as_mut_ptr(), n) };
                // The new length and one more hit, in one store.
                cache.state.store(st - n as u64 + HIT, Ordering::Relaxed);
                #[cfg(feature = "debug")]
                for &e in dst.iter() {
                    self.debug_mark(e, true);
                }
                return Ok(());
            }
        }
        self.get_bulk_slow(dst)
    }

    /// Fills all of `dst` or takes nothing, `N` fixed at compile time.
    ///
    /// The cache hit is [`get_bulk`](Self::get_bulk)'s, with the top `N`
    /// of the stack copied as one `[Elem; N]`: a copy of known size, which
    /// the compiler unrolls into a few vector moves. The miss goes to the
    /// same outlined path as `get_bulk`'s.
    #[inline(always)]
    pub(crate) fn get_array_into<const N: usize>(
        &self,
        dst: &mut [Elem; N],
    ) -> Result<(), MempoolError> {
        if let Some(cache) = self.local_cache() {
            let st = cache.state();
            let len = state_len(st);
            if N <= len {
                debug_assert!(len <= CACHE_STACK);
                // SAFETY: `local_cache` returned the caller's own cache, and
                // this is the only reference into its stack here.
                let stack = unsafe { stack_mut(cache) };
                // A cache's length never passes its flush threshold, below
                // the stack's size; a `&mut` overlaps nothing.
                // SAFETY: `N <= len <= CACHE_STACK`: `stack[len - N..len]`
                // is in bounds and `dst` holds `N`.
                unsafe {
                    std::ptr::copy_nonoverlapping(stack.as_ptr().add(len - N), dst.as_mut_ptr(), N)
                };
                // The new length and one more hit, in one store.
                cache.state.store(st - N as u64 + HIT, Ordering::Relaxed);
                #[cfg(feature = "debug")]
                for &e in dst.iter() {
                    self.debug_mark(e, true);
                }
                return Ok(());
            }
        }
        self.get_bulk_slow(dst)
    }

    /// A get the caller's cache cannot serve alone, or a get by a caller
    /// without one. (It looks the cache up again rather than taking it from
    /// the inlined part: carrying it across costs the hit path a register.)
    #[inline(never)]
    fn get_bulk_slow(&self, dst: &mut [Elem]) -> Result<(), MempoolError> {
        let n = dst.len();
        if n == 0 {
            return Ok(());
        }
        let ok = match self.local_cache() {
            Some(cache) => self.get_cached(cache, dst),
            None => self.ring.dequeue(dst, true).n == n,
        };
        if !ok {
            self.get_failures.fetch_add(1, Ordering::Relaxed);
            return Err(MempoolError::Empty { requested: n });
        }
        #[cfg(feature = "debug")]
        for &e in dst.iter() {
            self.debug_mark(e, true);
        }
        Ok(())
    }

    /// A get with fewer than `dst.len()` elements in the cache: refill the
    /// cache from the ring so that after serving the get it holds
    /// `cache_size`, or, for a get larger than the cache or a ring too short
    /// for the refill, serve it past the cache.
    #[inline(always)]
    fn get_cached(&self, cache: &LocalCache, dst: &mut [Elem]) -> bool {
        let n = dst.len();
        // SAFETY: the caller's own cache (from `local_cache`), and this is the
        // only reference into its stack for the rest of the function.
        let stack = unsafe { stack_mut(cache) };
        let len = cache.len();
        debug_assert!(n > len, "a get the cache can serve is inlined");
        cache.misses.inc();
        let size = self.cache_size as usize;
        // The stack has room: len < n <= size, so len + need = size + n <= 2 × size.
        let need = size + n - len;
        if n > size || self.ring.dequeue(&mut stack[len..len + need], true).n != need {
            return self.get_bypassing_cache(cache, stack, len, dst);
        }
        cache.refills.inc();
        // Serve the top `n`; `size` stay.
        copy_slice(dst, &stack[size..len + need]);
        cache.set_len(size, Ordering::Relaxed);
        true
    }

    /// A get the cache cannot serve by itself: from the ring directly, and if
    /// the ring is short, the ring's part plus everything in the cache.
    #[cold]
    fn get_bypassing_cache(
        &self,
        cache: &LocalCache,
        stack: &mut [Elem; CACHE_STACK],
        len: usize,
        dst: &mut [Elem],
    ) -> bool {
        let n = dst.len();
        if self.ring.dequeue(dst, true).n == n {
            return true;
        }
        if len == 0 || len >= n {
            return false;
        }
        let from_ring = n - len;
        if self.ring.dequeue(&mut dst[..from_ring], true).n != from_ring {
            return false;
        }
        dst[from_ring..].copy_from_slice(&stack[..len]);
        cache.set_len(0, Ordering::Relaxed);
        true
    }

    /// Puts `src` back.
    ///
    /// # Safety
    /// Each element was got from this pool, is not free, appears once, and is
    /// no longer used by the caller.
    #[inline(always)]
    pub(crate) unsafe fn put_bulk(&self, src: &[Elem]) {
        let n = src.len();
        let Some(cache) = self.local_cache() else {
            self.put_uncached(src);
            return;
        };
        let st = cache.state();
        let len = state_len(st);
        if len + n > self.flush_thresh as usize {
            // SAFETY: forwarded.
            unsafe { self.put_bulk_slow(cache, src) };
            return;
        }
        #[cfg(feature = "debug")]
        for &e in src {
            self.debug_mark(e, false);
        }
        debug_assert!(len + n <= CACHE_STACK);
        // SAFETY: our own cache, sole reference for this block.
        let stack = unsafe { stack_mut(cache) };
        // SAFETY: `len + n <= flush_thresh`, which is below the stack's size
        // (`with_init` checks it), so `stack[len..len + n]` is in bounds;
        // `src` holds `n` and a `&` does not overlap the `&mut` stack.
        unsafe { copy_run(src.as_ptr(), stack.as_mut_ptr().add(len), n) };
        self.witness_put();
        // Release: this store is the last access to the pool by a put, and it
        // is what the final handle's drop reads (Acquire in `count_free`) to
        // decide the pool may be freed.
        cache.state.store(st + n as u64, Ordering::Release);
    }

    /// Puts `src` back, `N` fixed at compile time: [`put_bulk`](Self::put_bulk)
    /// with the cache hit one write of an `[Elem; N]`.
    ///
    /// # Safety
    /// As [`put_bulk`](Self::put_bulk).
    #[inline(always)]
    pub(crate) unsafe fn put_array<const N: usize>(&self, src: &[Elem; N]) {
        let Some(cache) = self.local_cache() else {
            self.put_uncached(src);
            return;
        };
        let st = cache.state();
        let len = state_len(st);
        // No overflow: `len` is below `CACHE_STACK`, and an `[Elem; N]` is
        // an object, so `N` is below `isize::MAX / 8`.
        if len + N > self.flush_thresh as usize {
            // SAFETY: forwarded.
            unsafe { self.put_bulk_slow(cache, src) };
            return;
        }
        #[cfg(feature = "debug")]
        for &e in src.iter() {
            self.debug_mark(e, false);
        }
        debug_assert!(len + N <= CACHE_STACK);
        // SAFETY: our own cache, sole reference for this block.
        let stack = unsafe { stack_mut(cache) };
        // SAFETY: `len + N <= flush_thresh`, below the stack's size
        // (`with_init` checks it), so `stack[len..len + N]` is in bounds;
        // `src` holds `N`; a `&` does not overlap the `&mut` stack.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), stack.as_mut_ptr().add(len), N) };
        self.witness_put();
        // Release: see `put_bulk`.
        cache.state.store(st + N as u64, Ordering::Release);
    }

    /// A put by a caller without a cache: the ring directly.
    #[inline(always)]
    fn put_uncached(&self, src: &[Elem]) {
        #[cfg(feature = "debug")]
        for &e in src {
            self.debug_mark(e, false);
        }
        self.witness_put();
        self.ring_put(src);
    }

    /// A put that flushes the caller's cache (`cache`, found by the inlined
    /// part) first, or bypasses it.
    ///
    /// # Safety
    /// As [`put_bulk`](Self::put_bulk).
    #[inline(never)]
    unsafe fn put_bulk_slow(&self, cache: &LocalCache, src: &[Elem]) {
        let n = src.len();
        #[cfg(feature = "debug")]
        for &e in src {
            self.debug_mark(e, false);
        }
        if n > self.flush_thresh as usize {
            // More than the cache may ever hold: straight to the ring.
            self.witness_put();
            self.ring_put(src);
            return;
        }
        // SAFETY: our own cache, sole reference for this block.
        let stack = unsafe { stack_mut(cache) };
        let len = self.make_room(cache, stack, n);
        copy_slice(&mut stack[len..len + n], src);
        self.witness_put();
        // Release: see `put_bulk`.
        cache.set_len(len + n, Ordering::Release);
    }

    /// Loom models: a put's read of the teardown witness, just before its
    /// last store to the pool.
    #[inline(always)]
    fn witness_put(&self) {
        #[cfg(loom)]
        self.teardown_witness.with(|_| ());
    }

    /// Flushes the cache to the ring if `n` more would pass the threshold;
    /// returns the length to write the `n` new entries at.
    #[inline(always)]
    fn make_room(&self, cache: &LocalCache, stack: &[Elem; CACHE_STACK], n: usize) -> usize {
        let len = cache.len();
        if len + n <= self.flush_thresh as usize {
            return len;
        }
        self.flush(cache, &stack[..len]);
        0
    }

    /// Moves a cache's elements (`stack[..len]`) to the ring; the caller is
    /// the cache's owner.
    ///
    /// The elements are in the cache and then in the ring, and for a moment
    /// in both as a counter sees them: the state word says [`FLUSHING`]
    /// from before the first reaches the ring until the length is 0, so
    /// [`count_free`](Self::count_free) counts them once. The final store is
    /// Release, so a count that reads it also sees them in the ring.
    #[inline(always)]
    fn flush(&self, cache: &LocalCache, elems: &[Elem]) {
        cache.flushes.inc();
        cache.begin_flush();
        self.ring_put(elems);
        cache.set_len(0, Ordering::Release);
    }

    /// Puts elements into the ring, all of them.
    ///
    /// The ring's capacity is at least the pool size, so there is always room
    /// for every free element. But a producer may read a consumer tail older
    /// than the latest (a store still on its way from another core; under the
    /// C11 model, any value not older than what happened-before), and then
    /// sees less room than there is; a bulk enqueue would then fail
    /// spuriously. Losing elements is not an option, so take what fits and
    /// retry: the consumers' tail stores become visible in finite time. On the
    /// common path this is one burst enqueue. (The loom model of the cache
    /// hand-off found the lost elements before this loop existed.)
    #[inline(always)]
    fn ring_put(&self, src: &[Elem]) {
        let done = self.ring.enqueue(src, false).n;
        if done < src.len() {
            self.ring_put_retry(&src[done..]);
        }
    }

    /// The retries of [`ring_put`](Self::ring_put). A ring that stays full
    /// for [`PUT_SPINS_BEFORE_CHECK`] tries in a row is checked: if it holds
    /// as many elements as the pool has, what is left to put is more than
    /// the pool owns — an element returned twice, or one of another pool —
    /// and no consumer can make room for it. That is a broken invariant, and
    /// it panics saying so rather than spinning for ever.
    #[cold]
    #[inline(never)]
    fn ring_put_retry(&self, mut src: &[Elem]) {
        let mut stuck = 0u32;
        while !src.is_empty() {
            crate::sync::spin_loop();
            let done = self.ring.enqueue(src, false).n;
            src = &src[done..];
            stuck = if done == 0 { stuck + 1 } else { 0 };
            if stuck == PUT_SPINS_BEFORE_CHECK {
                stuck = 0;
                let held = self.ring.ring().len();
                assert!(
                    held < self.size as usize,
                    "mempool: {} element(s) put back into a ring already holding {held}, all \
                     {} the pool has: an element was freed twice or into the wrong pool",
                    src.len(),
                    self.size
                );
            }
        }
    }

    /// See [`Mempool::zc_put_bulk`].
    ///
    /// # Safety
    /// See [`Mempool::zc_put_bulk`].
    #[inline]
    pub(crate) unsafe fn zc_put_bulk(&self, n: usize) -> Option<ZcPut<'_>> {
        let cache = self.local_cache()?;
        if n > self.flush_thresh as usize {
            return None;
        }
        // SAFETY: our own cache; the caller makes no other call on the pool
        // until the guard is gone, so this is the only reference.
        let stack = unsafe { stack_mut(cache) };
        let start = self.make_room(cache, stack, n);
        Some(ZcPut {
            #[cfg(feature = "debug")]
            pool: self,
            cache,
            start,
            n,
        })
    }

    fn flush_local_cache(&self) {
        if let Some(cache) = self.local_cache() {
            // SAFETY: our own cache, sole reference for this block.
            let stack = unsafe { stack_mut(cache) };
            let len = cache.len();
            if len > 0 {
                self.flush(cache, &stack[..len]);
            }
        }
    }

    /// Moves lcore `id`'s cache to the ring.
    ///
    /// # Safety
    /// The caller holds lcore id `id`, so it is the cache's owner.
    unsafe fn flush_cache_of(&self, id: usize) {
        let Some(cache) = self.caches.get(id) else {
            return;
        };
        // SAFETY: the caller owns the cache; sole reference for this block.
        let stack = unsafe { stack_mut(cache) };
        let len = cache.len();
        if len > 0 {
            self.flush(cache, &stack[..len]);
        }
    }

    /// Index of `elem`, if it is an element of this pool.
    #[inline]
    pub(crate) fn index_of(&self, elem: Elem) -> Option<u32> {
        let base = self.region.base().as_ptr() as usize;
        let off = (elem.as_ptr() as usize).checked_sub(base)?;
        let idx = off / self.stride;
        (off % self.stride == 0 && idx < self.size as usize).then_some(idx as u32)
    }

    #[inline(always)]
    pub(crate) fn iova(&self, elem: Elem) -> u64 {
        (elem.as_ptr() as usize - self.region.base().as_ptr() as usize) as u64
    }

    #[cfg(feature = "debug")]
    fn debug_mark(&self, elem: Elem, in_use: bool) {
        let Some(idx) = self.index_of(elem) else {
            panic!(
                "mempool '{}': {:p} is not an element of this pool",
                self.name,
                elem.as_ptr()
            );
        };
        let was = self.states[idx as usize].swap(in_use as u8, Ordering::AcqRel);
        if in_use && was != 0 {
            panic!("mempool '{}': element {idx} handed out twice", self.name);
        }
        if !in_use && was == 0 {
            panic!("mempool '{}': double free of element {idx}", self.name);
        }
    }

    /// Counts the free elements, in the ring and in the caches, at most
    /// `tries` times, until two reads of every cache around the read of the
    /// ring agree and none is flushing.
    ///
    /// Once the last handle is gone nothing takes elements out of the ring
    /// or the caches (a get needs a handle): elements only come home, into
    /// a cache or the ring, and move from a cache to the ring in a flush.
    /// Then no element is ever counted twice: one the ring read saw arrive
    /// by a flush was published with Release after its cache was marked
    /// [`FLUSHING`], so the later read of that cache sees the mark (counted
    /// as empty) or the length the flush ended with (without it). A count
    /// that reaches `size` thus means every element is home, and every put
    /// that brought one home made its last store to the pool before the
    /// count read it (each is Release, each read Acquire). A flush that
    /// crosses the ring read can make a count short; the second read of the
    /// caches sees the change, and the count is made again, so a settled
    /// count is exact. While handles live, elements also leave, and a
    /// count is a snapshot.
    pub(crate) fn count_free(&self, tries: u32) -> FreeCount {
        self.count_free_with(tries, |_, _| {})
    }

    /// [`count_free`](Self::count_free), also telling `each_cache(lcore id,
    /// elements)` what the count it returns found in each cache holding
    /// some (a flushing cache counts as empty).
    fn count_free_with(&self, tries: u32, mut each_cache: impl FnMut(usize, u32)) -> FreeCount {
        let mut before = [0u64; NB_CACHES];
        let mut after = [0u64; NB_CACHES];
        let mut attempt = 1;
        loop {
            for (b, c) in before.iter_mut().zip(self.caches.iter()) {
                // Acquire pairs with the Release store that ends a put or a
                // flush.
                *b = c.state.load(Ordering::Acquire);
            }
            let in_ring = self.ring.ring().len() as u32;
            let mut count = FreeCount {
                in_ring,
                cached: 0,
                settled: true,
            };
            for ((b, a), c) in before.iter().zip(after.iter_mut()).zip(self.caches.iter()) {
                let st = c.state.load(Ordering::Acquire);
                *a = st;
                count.settled &= st == *b && st & FLUSHING == 0;
                if st & FLUSHING == 0 {
                    count.cached += state_len(st) as u32;
                }
            }
            if count.settled || attempt >= tries {
                for (id, &st) in after.iter().take(self.caches.len()).enumerate() {
                    if st & FLUSHING == 0 && state_len(st) != 0 {
                        each_cache(id, state_len(st) as u32);
                    }
                }
                return count;
            }
            // Past a snapshot's tries (a teardown's wait for a flush to
            // end), a flusher that was preempted needs the core back.
            #[cfg(not(loom))]
            if attempt >= STATS_COUNTS {
                std::thread::yield_now();
            }
            crate::sync::spin_loop();
            attempt += 1;
        }
    }

    pub(crate) fn stats(&self) -> MempoolStats {
        let free = self.count_free(STATS_COUNTS);
        let mut s = MempoolStats {
            size: self.size,
            in_ring: free.in_ring,
            cached: free.cached,
            get_failures: self.get_failures.load(Ordering::Relaxed),
            ..Default::default()
        };
        for c in self.caches.iter() {
            s.cache_hits += state_hits(c.state.load(Ordering::Relaxed));
            s.cache_misses += c.misses.get();
            s.ring_refills += c.refills.get();
            s.flushes += c.flushes.get();
        }
        // A snapshot taken while elements leave may see one in two places.
        s.available = (s.in_ring + s.cached).min(s.size);
        s.in_use = s.size - s.available;
        s
    }

    pub(crate) fn free_counts(&self) -> FreeCounts {
        let mut caches = Vec::new();
        let free = self.count_free_with(STATS_COUNTS, |id, n| caches.push((id, n)));
        FreeCounts {
            in_ring: free.in_ring,
            caches,
        }
    }

    fn all_home(&self) -> bool {
        let free = self.count_free(STATS_COUNTS);
        free.in_ring + free.cached == self.size
    }
}

/// Where a pool's free elements are ([`Mempool::free_counts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreeCounts {
    /// Free in the ring.
    pub in_ring: u32,
    /// Free in each lcore's cache: `(lcore id, elements)`, caches holding
    /// none left out.
    pub caches: Vec<(usize, u32)>,
}

/// Free elements as [`PoolInner::count_free`] counted them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FreeCount {
    /// In the ring.
    pub(crate) in_ring: u32,
    /// In the caches (a flushing cache counts as empty).
    pub(crate) cached: u32,
    /// Whether the count is exact: no cache changed or was flushing while
    /// it was made.
    pub(crate) settled: bool,
}

impl ZcPut<'_> {
    /// The reserved slots, to be filled with the elements being freed.
    #[inline]
    pub fn slots(&mut self) -> &mut [Elem] {
        // SAFETY: the guard exists only on the owner thread of `cache`, and
        // the `zc_put_bulk` contract excludes any other use of the pool (and
        // so of this stack) while it lives.
        let stack = unsafe { stack_mut(self.cache) };
        &mut stack[self.start..self.start + self.n]
    }

    /// Number of reserved slots.
    #[inline]
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when no slot was reserved.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Adds the written slots to the cache.
    ///
    /// # Safety
    /// Every slot holds an element of this pool that is not free and no longer
    /// used by the caller, each once.
    #[inline]
    pub unsafe fn commit(self) {
        #[cfg(feature = "debug")]
        {
            // SAFETY: as in `slots`.
            let stack = unsafe { stack_mut(self.cache) };
            for &e in &stack[self.start..self.start + self.n] {
                self.pool.debug_mark(e, false);
            }
        }
        // Release: see `PoolInner::put_bulk`.
        self.cache.set_len(self.start + self.n, Ordering::Release);
    }
}
