//! Page pools and fragments: packet buffers carved from large pages that are
//! recycled through a pool, with a per-page fragment count so one page serves
//! many packets.
//!
//! # Layers
//!
//! - [`BlockProvider`] (`provider.rs`, `buddy.rs`): blocks of order 0..=4
//!   (4 KiB..64 KiB) from one hugepage-or-anonymous region, by a buddy
//!   allocator (blocks up to 2 MiB, real splits and merges) under a lock. The
//!   slow path everything above amortises.
//! - [`PagePool`] (`pool.rs`, `cache.rs`): pages of one order; a direct cache
//!   used without atomics by the owner lcore, an MP/MC ring for pages
//!   returned from other threads (the owner takes them a *ring batch* at a
//!   time), refill from the provider when neither can serve, release to it
//!   when the ring is full.
//! - [`Frag`] and the carving (`frag.rs`, `meta.rs`): fragments cut from a
//!   page against a per-page target (Linux's bias, carried by each fragment
//!   instead of written into the page) — carving needs no atomic, each free
//!   one increment of the page's count, and the page goes home exactly once,
//!   on the last free, from any thread.
//! - [`PageFragAlloc`] (`frag_alloc.rs`): fragments from page-pool pages.
//! - `PageFragCache` (`frag_cache.rs`, with the `bench-baselines` feature
//!   only): fragments from provider blocks (Linux's page_frag_cache), the
//!   baseline `sluice bench pagepool` compares the page pool's fragments
//!   with; no driver uses it.
//! - [`BulkFree`] (`bulk.rs`): frees fragments and pages in bulk — one
//!   count update per run of a page's fragments, pages home in stashes of
//!   [`PAGE_BULK`] (Linux's `xdp_frame_bulk`).
//! - `mbuf.rs`: an mbuf whose data is a fragment ([`attach_frag`]), its page
//!   reference held by the header and given back by the header's last free;
//!   [`FragLayout`] sizes an Rx fragment from the MTU.
//!
//! # Sizes
//!
//! An Rx buffer for MTU `m` needs headroom + frame + tailroom: with Linux's
//! 256-byte headroom and 320 bytes for the shared info at the end, MTU 1500
//! needs 1514 + 256 + 320 = 2090 bytes (64-byte aligned: 2112, so 15 per
//! 32 KiB page) and MTU 8000 needs 8590 (8640: 3 per page).
//!
//! ```
//! use sluice::pagepool::{BlockProvider, PageFragAlloc, PagePool, PagePoolConfig, ProviderConfig};
//!
//! let provider = BlockProvider::new(ProviderConfig { size: 2 << 20, ..Default::default() }).unwrap();
//! let pool = PagePool::new(&provider, PagePoolConfig { order: 3, ..Default::default() }).unwrap();
//! let mut frags = PageFragAlloc::new(pool.clone());
//! let held: Vec<_> = (0..15).map(|_| frags.alloc_frag(2090).unwrap()).collect();
//! assert_eq!(pool.stats().alloc_slow, 1); // 15 fragments, one page
//! let next = frags.alloc_frag(2090).unwrap(); // the 16th needs a second page
//! assert_eq!(pool.stats().alloc_slow, 2);
//! drop(held); // the first page's last fragment sends it home
//! assert_eq!(pool.stats().in_ring, 1);
//! drop((next, frags, pool));
//! assert!(provider.is_full());
//! ```

mod buddy;
mod bulk;
mod cache;
mod frag;
mod frag_alloc;
#[cfg(feature = "bench-baselines")]
mod frag_cache;
mod mbuf;
mod meta;
mod pool;
mod provider;

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;

pub use buddy::TOP_ORDER;
pub(crate) use bulk::FragRun;
pub use bulk::{BulkFree, PAGE_BULK};
pub use frag::Frag;
pub(crate) use frag::put_frag_ref;
pub use frag_alloc::PageFragAlloc;
#[cfg(feature = "bench-baselines")]
pub use frag_cache::PageFragCache;
pub(crate) use mbuf::{ArmedFrag, attach_armed, detach_frag_own, prefetch};
pub use mbuf::{FragLayout, attach_frag};
pub(crate) use meta::PageMeta;
pub use pool::{
    DEFAULT_CACHE_SIZE, DEFAULT_RING_BATCH, DEFAULT_RING_SIZE, Page, PagePool, PagePoolConfig,
    PagePoolStats,
};
pub use provider::{Block, BlockProvider, ProviderConfig, ProviderStats};

/// log2 of the page size.
pub const PAGE_SHIFT: u32 = 12;
/// The base page size: a block of order `k` is `PAGE_SIZE << k` bytes.
pub const PAGE_SIZE: usize = 1 << PAGE_SHIFT;
/// The largest order handed out (64 KiB).
pub const MAX_ORDER: u32 = 4;
/// Fragment alignment (a cache line).
pub const FRAG_ALIGN: usize = 64;

/// Why a page pool, provider or fragment operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PagePoolError {
    /// A fragment size of 0 or larger than the page.
    BadSize {
        /// Bytes asked for.
        size: usize,
        /// The page size.
        max: usize,
    },
    /// A block order above [`MAX_ORDER`].
    BadOrder(u32),
    /// The provider has no free block large enough.
    Exhausted {
        /// The provider's name.
        name: String,
        /// The order asked for.
        order: u32,
    },
    /// A bad configuration value or no memory, named in the text.
    Config(String),
}

impl std::fmt::Display for PagePoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PagePoolError::BadSize { size, max } => {
                write!(
                    f,
                    "fragment size {size} is not in 1..={max} (the page size)"
                )
            }
            PagePoolError::BadOrder(o) => write!(
                f,
                "block order {o} is not in 0..={MAX_ORDER} (4 KiB..{} KiB)",
                (PAGE_SIZE << MAX_ORDER) >> 10
            ),
            PagePoolError::Exhausted { name, order } => write!(
                f,
                "block provider '{name}' has no free block of order {order} ({} KiB)",
                (PAGE_SIZE << order) >> 10
            ),
            PagePoolError::Config(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for PagePoolError {}
