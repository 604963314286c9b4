//! The per-lcore cache: a LIFO stack of free elements that only its lcore's
//! thread touches, so gets and puts that hit it are plain loads and stores.
//!
//! Sizing follows DPDK: the cache is refilled from the ring up to `size`, and
//! flushed to the ring when a put would take it past `flush_thresh`
//! (1.5 × size). The stack has room for `2 × MAX_CACHE_SIZE` entries, more
//! than the threshold plus a refill, so no operation can overrun it.

use super::Elem;
use crate::counter::Counter;
use crate::sync::{AtomicU64, Ordering, UnsafeCell};

/// Largest per-lcore cache size.
pub const MAX_CACHE_SIZE: usize = 512;

/// Entries a cache stack can hold: twice the largest cache. Loom models run
/// on small coroutine stacks and use tiny caches, so they get 16.
pub(crate) const CACHE_STACK: usize = if cfg!(loom) { 16 } else { 2 * MAX_CACHE_SIZE };

/// Bits of the state word holding the length.
pub(crate) const LEN_MASK: u64 = 0x7fff;
/// Set in the state word while the owner moves the cache's elements to the
/// ring: they may then be in both, so a count that sees it counts the cache
/// as empty and tries again (see `PoolInner::count_free`).
pub(crate) const FLUSHING: u64 = 1 << 15;
/// One hit, in the state word.
pub(crate) const HIT: u64 = 1 << 16;
const _: () = assert!(CACHE_STACK as u64 <= LEN_MASK);

/// The length in a state word.
#[inline(always)]
pub(crate) const fn state_len(state: u64) -> usize {
    (state & LEN_MASK) as usize
}

/// The hit count in a state word.
#[inline(always)]
pub(crate) const fn state_hits(state: u64) -> u64 {
    state >> 16
}

/// The flush threshold for a cache size: 1.5 × size.
#[inline]
pub const fn flush_threshold(size: usize) -> usize {
    size + size / 2
}

/// One lcore's cache.
///
/// Ownership: the thread currently holding this cache's lcore id is the only
/// one that touches `stack` or writes `state` and the counters. Lcore ids are
/// unique among live threads, and an id released by one thread is claimed by
/// the next with Release/Acquire, so accesses never overlap. A thread gives
/// its caches back to the ring before it lets go of its id, so the next
/// holder starts with empty ones.
/// Other threads only read `state` and the counters, for statistics.
pub(crate) struct LocalCache {
    /// The length and the hit count in one word, so a cache hit updates both
    /// with the one store it makes anyway: bits 0..16 are the length
    /// (`stack[..len]` are free elements of the pool; at most `CACHE_STACK`),
    /// bit 15 is [`FLUSHING`], bits 16..64 count gets served from the cache
    /// alone (wrapping after 2^48, some 8 days at 400 million gets a second
    /// on one lcore).
    /// Written only by the owner, with plain stores (a `mov` on x86-64).
    pub(crate) state: AtomicU64,
    /// Gets that went to the ring (refill or direct).
    pub(crate) misses: Counter,
    /// Refills from the ring.
    pub(crate) refills: Counter,
    /// Flushes to the ring.
    pub(crate) flushes: Counter,
    /// The stack. Only the owner touches it. Entries at and above `len` are
    /// stale (or [`Elem::DANGLING`]) and never handed out.
    pub(crate) stack: UnsafeCell<[Elem; CACHE_STACK]>,
}

impl LocalCache {
    pub(crate) fn new() -> Self {
        LocalCache {
            state: AtomicU64::new(0),
            misses: Counter::new(),
            refills: Counter::new(),
            flushes: Counter::new(),
            stack: UnsafeCell::new([Elem::DANGLING; CACHE_STACK]),
        }
    }

    /// The state word, for the owner.
    #[inline(always)]
    pub(crate) fn state(&self) -> u64 {
        self.state.load(Ordering::Relaxed)
    }

    /// Current length, for the owner.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        state_len(self.state())
    }

    /// Sets the length, keeping the hit count and ending a flush (owner
    /// only).
    #[inline(always)]
    pub(crate) fn set_len(&self, len: usize, order: Ordering) {
        let st = self.state();
        self.state
            .store((st & !(LEN_MASK | FLUSHING)) | len as u64, order);
    }

    /// Marks the start of a flush (owner only), before the first element
    /// goes to the ring. Relaxed: the ring's Release publication of the
    /// flushed elements orders it for whoever sees them there.
    #[inline(always)]
    pub(crate) fn begin_flush(&self) {
        let st = self.state();
        self.state.store(st | FLUSHING, Ordering::Relaxed);
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
