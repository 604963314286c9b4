//! The per-lcore cache: a LIFO stack of free elements that only its lcore's
//! thread touches, so gets and puts that hit it are plain loads and stores.
//!
//! Sizing follows DPDK: the cache is refilled from the ring up to `size`, and
//! flushed to the ring when a put would take it past `flush_thresh`
//! (1.5 × size). The stack has room for `2 × MAX_CACHE_SIZE` entries, more
//! than the threshold plus a refill, so no operation can overrun it.

use super::Elem;
use crate::sync::{AtomicU32, AtomicU64, Ordering, UnsafeCell};

/// Largest per-lcore cache size.
pub const MAX_CACHE_SIZE: usize = 512;

/// Entries a cache stack can hold: twice the largest cache. Loom models run
/// on small coroutine stacks and use tiny caches, so they get 16.
pub(crate) const CACHE_STACK: usize = if cfg!(loom) { 16 } else { 2 * MAX_CACHE_SIZE };

/// The flush threshold for a cache size: 1.5 × size.
#[inline]
pub const fn flush_threshold(size: usize) -> usize {
    size + size / 2
}

/// One lcore's cache.
///
/// Ownership: the thread currently registered with this cache's lcore id is
/// the only one that touches `stack` or writes `len` and the counters. Lcore
/// ids are unique among live threads, and an id released by one thread is
/// claimed by the next with Release/Acquire, so accesses never overlap.
/// Other threads only read `len` and the counters (relaxed), for statistics.
pub(crate) struct LocalCache {
    /// Entries on the stack: `stack[..len]` are free elements of the pool.
    /// Written only by the owner (relaxed store: a plain `mov` on x86-64).
    pub(crate) len: AtomicU32,
    /// Gets served from the cache alone.
    pub(crate) hits: AtomicU64,
    /// Gets that went to the ring (refill or direct).
    pub(crate) misses: AtomicU64,
    /// Refills from the ring.
    pub(crate) refills: AtomicU64,
    /// Flushes to the ring.
    pub(crate) flushes: AtomicU64,
    /// The stack. Only the owner touches it. Entries at and above `len` are
    /// stale (or [`Elem::DANGLING`]) and never handed out.
    pub(crate) stack: UnsafeCell<[Elem; CACHE_STACK]>,
}

impl LocalCache {
    pub(crate) fn new() -> Self {
        LocalCache {
            len: AtomicU32::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            refills: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            stack: UnsafeCell::new([Elem::DANGLING; CACHE_STACK]),
        }
    }

    /// Current length, for the owner or for statistics.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed) as usize
    }

    /// Adds one to an owner-written counter without a read-modify-write:
    /// only the owner writes it, so load + store cannot lose an update.
    #[inline(always)]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
    }
}

/// The stack of a cache, for its owner.
///
/// # Safety
/// The caller is the cache's owner (see [`LocalCache`]) and holds no other
/// reference into the stack while the returned one lives.
#[inline(always)]
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn stack_mut(cache: &LocalCache) -> &mut [Elem; CACHE_STACK] {
    // SAFETY: only the owner touches the stack (the caller is the owner) and
    // it holds no other reference into it.
    cache.stack.with_mut(|p| unsafe { &mut *p })
}
