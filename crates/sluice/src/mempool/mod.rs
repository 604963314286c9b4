//! Mempools: fixed-size elements in one contiguous region, free elements in an
//! MP/MC ring, and a cache per lcore in front of the ring.
//!
//! # How it works
//!
//! [`Mempool::new`] maps one region ([`Region`], hugepages when available) and
//! cuts it into `size` elements of `elt_size` bytes, each aligned to a cache
//! line, so every element has a stable address and an IO address (its offset
//! in the region, which is what a device or an AF_XDP UMEM is given). All free
//! elements start in a multi-producer/multi-consumer [`ring`](crate::ring).
//!
//! A thread registered as an lcore ([`crate::lcore`]) has a cache of up to
//! `cache_size` elements in front of the ring, found with one thread-local
//! load: gets pop from it and puts push onto it with no atomic operation; it
//! is refilled from the ring (up to `cache_size`) when a get finds it short,
//! and flushed to the ring when a put would take it past the flush threshold
//! (1.5 × `cache_size`). Threads that are not lcores go straight to the ring.
//! An lcore's caches go to the rings when it lets go of its id (its thread
//! ends, panics or drops its [`LcoreGuard`](crate::lcore::LcoreGuard)), so a
//! free element never waits in the cache of an lcore that is gone.
//!
//! Gets of more elements than the cache holds are served from the ring; when
//! the ring alone cannot serve a get, the caller's own cache contributes what
//! it holds, so a get fails only when the ring and the caller's cache together
//! are short (other lcores' caches are theirs alone).
//!
//! # Zero-copy put
//!
//! [`Mempool::zc_put_bulk`] returns the cache slots a batch of elements will
//! occupy, so a driver freeing transmitted buffers writes the pointers once,
//! straight from its own ring into the cache, instead of collecting them into
//! a temporary array first (DPDK's zero-copy mempool cache API,
//! `rte_mempool_cache_zc_put_bulk`).
//!
//! # Element API and safety
//!
//! Elements are raw [`Elem`] addresses: getting one is safe, putting one back
//! is `unsafe` (it must be an element of this pool that is not already free).
//! The [`mbuf`](crate::mbuf) layer builds owned, safe handles on top. With
//! the `debug` feature the pool keeps a state byte per element and panics,
//! naming the pool and the element, on a double free or a foreign element.
//!
//! # Example
//!
//! ```
//! use sluice::mempool::{Elem, Mempool, MempoolConfig};
//!
//! let pool = Mempool::new(MempoolConfig {
//!     name: "example".into(),
//!     size: 1023,
//!     elt_size: 2048,
//!     cache_size: 32,
//!     ..Default::default()
//! })
//! .unwrap();
//! let mut batch = [Elem::DANGLING; 8];
//! pool.get_bulk(&mut batch).unwrap();
//! assert_eq!(pool.stats().in_use, 8);
//! // SAFETY: the elements came from this pool and are put back once.
//! unsafe { pool.put_bulk(&batch) };
//! assert!(pool.is_full());
//! ```

mod cache;
mod memory;
mod pool;

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;

pub use cache::{MAX_CACHE_SIZE, flush_threshold};
pub use memory::{Backing, HUGEPAGE_SIZE, HugepagePolicy, Region, Sharing};
pub use pool::{FreeCounts, Mempool, ZcPut};
pub(crate) use pool::{PoolInner, release_lcore};

use std::ptr::NonNull;

/// Alignment of every element: one cache line.
pub const ELT_ALIGN: usize = 64;

/// Distance between the elements of a pool of `elt_size`-byte elements:
/// `elt_size` rounded up to whole cache lines, plus one line when that is an
/// even number of lines (DPDK's mempool spreads its objects the same way).
///
/// Why odd: a cache's set is picked by the address bits just above the line
/// offset, so elements an even number of lines apart start in a fraction of
/// the sets — at 36 lines (the default mbuf's 2304 bytes) a quarter — and the
/// lines every buffer touches (header, first data line) evict each other in
/// L2 long before it is full. An odd stride is coprime with every power-of-two
/// set count, so consecutive elements start in every set in turn. Under
/// cachegrind's model of this machine's L2 (1 MiB, 8-way), `sluice bench
/// fwd`'s l3fwd case went from 6.6 M to 0.35 M L2 read misses with it (the
/// cycles moved much less: the L3 behind that L2 is quick). The price is at
/// most one line per element: half again for 2-line elements, 3 % for
/// the default mbuf.
pub const fn element_stride(elt_size: usize) -> usize {
    let lines = elt_size.div_ceil(ELT_ALIGN);
    (lines | 1) * ELT_ALIGN
}

/// Largest element: 1 MiB.
pub const MAX_ELT_SIZE: usize = 1 << 20;

/// Most elements in one pool.
pub const MAX_POOL_SIZE: u32 = 1 << 30;

/// The address of one pool element.
///
/// A plain address: copying it copies no ownership. The [`mbuf`](crate::mbuf)
/// layer wraps elements in owned handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct Elem(NonNull<u8>);

// SAFETY: an `Elem` is only an address; the pool's protocol decides who may
// access the memory behind it.
unsafe impl Send for Elem {}
// SAFETY: as above.
unsafe impl Sync for Elem {}

impl Elem {
    /// A placeholder that is not an element of any pool, for initialising
    /// arrays that a get will fill.
    pub const DANGLING: Elem = Elem(NonNull::dangling());

    /// Wraps an address.
    #[inline(always)]
    pub const fn from_ptr(ptr: NonNull<u8>) -> Elem {
        Elem(ptr)
    }

    /// The element's address.
    #[inline(always)]
    pub const fn as_ptr(self) -> *mut u8 {
        self.0.as_ptr()
    }

    /// The element's address as `NonNull`.
    #[inline(always)]
    pub const fn as_non_null(self) -> NonNull<u8> {
        self.0
    }
}

/// How to build a pool.
#[derive(Debug, Clone)]
pub struct MempoolConfig {
    /// Name, for statistics and error messages.
    pub name: String,
    /// Number of elements. DPDK convention: a power of two minus one packs best,
    /// but any number in `1..=MAX_POOL_SIZE` works.
    pub size: u32,
    /// Bytes per element (spread to an odd number of [`ELT_ALIGN`] lines in
    /// the region: [`element_stride`]).
    pub elt_size: usize,
    /// Per-lcore cache size: 0 disables the caches, at most
    /// [`MAX_CACHE_SIZE`], and its flush threshold (1.5×) must not exceed
    /// `size`.
    pub cache_size: u32,
    /// Whether to use hugepages.
    pub hugepages: HugepagePolicy,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        MempoolConfig {
            name: "pool".into(),
            size: 8191,
            elt_size: 2048,
            cache_size: 256,
            hugepages: HugepagePolicy::Auto,
        }
    }
}

/// Why a pool could not be built or a get failed.
#[derive(Debug)]
pub enum MempoolError {
    /// `size` was 0.
    ZeroSize,
    /// `size` exceeded [`MAX_POOL_SIZE`].
    TooManyElements(u32),
    /// `elt_size` was 0.
    ZeroEltSize,
    /// `elt_size` exceeded [`MAX_ELT_SIZE`].
    EltTooLarge(usize),
    /// `cache_size` exceeded [`MAX_CACHE_SIZE`].
    CacheTooLarge(u32),
    /// The cache's flush threshold (1.5 × `cache_size`) exceeded the pool size,
    /// so one cache could hold the whole pool.
    CacheExceedsPool {
        /// The requested cache size.
        cache_size: u32,
        /// The pool size.
        size: u32,
    },
    /// The region could not be mapped.
    Memory(std::io::Error),
    /// Not enough free elements for a bulk get.
    Empty {
        /// Elements asked for.
        requested: usize,
    },
}

impl std::fmt::Display for MempoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MempoolError::ZeroSize => {
                write!(f, "mempool size 0: a pool needs at least one element")
            }
            MempoolError::TooManyElements(n) => {
                write!(f, "mempool size {n} exceeds the maximum {MAX_POOL_SIZE}")
            }
            MempoolError::ZeroEltSize => write!(f, "mempool element size 0"),
            MempoolError::EltTooLarge(n) => {
                write!(
                    f,
                    "mempool element size {n} exceeds the maximum {MAX_ELT_SIZE}"
                )
            }
            MempoolError::CacheTooLarge(n) => {
                write!(
                    f,
                    "mempool cache size {n} exceeds the maximum {MAX_CACHE_SIZE}"
                )
            }
            MempoolError::CacheExceedsPool { cache_size, size } => write!(
                f,
                "mempool cache size {cache_size} (flush threshold {}) is more than a pool of \
                 {size} elements can back",
                flush_threshold(*cache_size as usize)
            ),
            MempoolError::Memory(e) => write!(f, "mempool memory: {e}"),
            MempoolError::Empty { requested } => {
                write!(f, "mempool has fewer than {requested} free elements")
            }
        }
    }
}

impl std::error::Error for MempoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MempoolError::Memory(e) => Some(e),
            _ => None,
        }
    }
}

/// A snapshot of a pool's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MempoolStats {
    /// Elements in the pool.
    pub size: u32,
    /// Free elements in the ring.
    pub in_ring: u32,
    /// Free elements in all lcore caches.
    pub cached: u32,
    /// Free elements: `in_ring + cached`.
    pub available: u32,
    /// Elements handed out: `size - available`.
    pub in_use: u32,
    /// Gets served by an lcore cache alone.
    pub cache_hits: u64,
    /// Gets by an lcore that needed the ring.
    pub cache_misses: u64,
    /// Cache refills from the ring.
    pub ring_refills: u64,
    /// Cache flushes to the ring.
    pub flushes: u64,
    /// Gets that failed for want of elements.
    pub get_failures: u64,
}
