//! Per-page metadata, kept beside the memory (as Linux's `struct page`): the
//! fragment count and who gets the page back when its last fragment is freed.
//!
//! The provider has one [`PageMeta`] per 4 KiB page of its region; a block
//! uses the entry of its first page. Each entry has a cache line of its own,
//! so threads freeing fragments of different pages never share a line.
//!
//! # The fragment count and its bias
//!
//! A page being split into fragments carries `count` references. The
//! allocator that carves it sets `count` to a *bias* larger than the number
//! of fragments a page can hold, and keeps the same number, privately, as the
//! references it still holds; carving a fragment moves one reference from the
//! allocator to the fragment by decrementing the private number only — no
//! atomic. So `count` = fragments not yet freed + references the allocator
//! holds. A fragment's free decrements `count` (the only atomic on the path);
//! when the allocator leaves the page it subtracts what it still holds in one
//! atomic. Whichever decrement takes `count` to zero is the last holder, and
//! only it gives the page back: exactly once, from whatever thread.
//!
//! Orderings: every decrement is Release, so each holder's use of its bytes
//! happens-before the page is handed on; the last holder's Acquire fence
//! (or the Acquire load that found it alone) pairs with all of them.

use crate::sync::{AtomicU32, AtomicUsize, Ordering, fence};

/// `owner` tag bit: the page goes back to a block provider, not a page pool.
pub(crate) const OWNER_PROVIDER: usize = 1;

/// Metadata of one 4 KiB page (used for the first page of each block).
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct PageMeta {
    /// The page's address. Fixed at creation.
    pub(crate) addr: usize,
    /// The page's IO address (offset in the provider's region). Fixed.
    pub(crate) iova: u64,
    /// References to the page's fragments (see the module docs). Meaningful
    /// only while the page is split into fragments.
    pub(crate) count: AtomicU32,
    /// Where the page goes when its last fragment is freed: the address of a
    /// page pool's shared state, or of a provider's with [`OWNER_PROVIDER`]
    /// set. Written by the thread that takes the page from the provider,
    /// before any fragment of it exists (so every holder's free happens after
    /// it); Relaxed.
    pub(crate) owner: AtomicUsize,
}

impl PageMeta {
    /// Metadata for the page at `addr`, IO address `iova`.
    pub(crate) fn new(addr: usize, iova: u64) -> PageMeta {
        PageMeta {
            addr,
            iova,
            count: AtomicU32::new(0),
            owner: AtomicUsize::new(0),
        }
    }

    /// Starts a page's fragment count at `bias` (the allocator's references).
    /// The caller holds the page alone: nothing else reads the count yet, and
    /// whatever hands out the fragments publishes this store.
    #[inline(always)]
    pub(crate) fn set_bias(&self, bias: u32) {
        self.count.store(bias, Ordering::Relaxed);
    }

    /// Gives up `n` of the references the caller holds. True when they were
    /// the last: the caller now holds the page alone, and every other
    /// holder's accesses happen-before its next ones.
    #[inline(always)]
    pub(crate) fn put_refs(&self, n: u32) -> bool {
        // Alone already (every other reference is gone): no atomic write.
        // Acquire pairs with the Release decrements of the others: the value
        // read comes from the last of them, and they form one release
        // sequence, so all of their accesses happen-before ours.
        if self.count.load(Ordering::Acquire) == n {
            return true;
        }
        // Release: our accesses happen-before whoever ends up last.
        if self.count.fetch_sub(n, Ordering::Release) == n {
            // Pairs with the Release decrements of everyone before us.
            fence(Ordering::Acquire);
            return true;
        }
        false
    }
}
