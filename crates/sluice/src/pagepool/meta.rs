//! Per-page metadata, kept beside the memory (as Linux's `struct page`): the
//! fragment count and who gets the page back when its last fragment is freed.
//!
//! The provider has one [`PageMeta`] per 4 KiB page of its region; a block
//! uses the entry of its first page. Each entry has a cache line of its own,
//! so threads freeing fragments of different pages never share a line.
//!
//! # The fragment count
//!
//! When an allocator starts cutting a page it fixes the page's *target*: how
//! many fragments the page will have (as many of the first size asked for as
//! fit). That is Linux's bias — the references the allocator holds on the
//! page's behalf and hands out one per fragment — except that it is not
//! written into the page: every fragment carries it, and `count` counts what
//! came back. So:
//!
//! - carving a fragment touches no shared memory at all (the allocator's own
//!   offset and tally);
//! - freeing one is one atomic increment of `count`; the free that brings it
//!   to the target is the last, and only it sends the page home — exactly
//!   once, from whatever thread;
//! - an allocator that leaves a page before cutting all of its target (the
//!   next size does not fit, or it is dropped) adds the fragments it never
//!   cut to `count` in one atomic, and is the last itself if that reaches the
//!   target (then it may cut the page again at once).
//!
//! The last holder puts `count` back to 0 before the page goes anywhere, so a
//! page at rest — in a pool, or fresh from the provider — has `count` 0 and
//! the next allocator needs no write to start on it. With fragments of one
//! size, the allocator never touches the page's line at all: only the
//! threads freeing fragments do (on two cores, the line stays on the freeing
//! core).
//!
//! Orderings: every increment is Release, so each holder's use of its bytes
//! happens-before the page is handed on; the last holder's Acquire fence (or
//! the Acquire load that found it alone) pairs with all of them — the
//! increments form one release sequence.

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
    /// Fragment references given back so far (see the module docs): 0 while
    /// the page is at rest or being cut with nothing back yet.
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

    /// Gives back `n` references of a page whose target is `target`. True
    /// when they were the last: the caller then holds the page alone (its
    /// count back at 0), and every other holder's accesses happen-before its
    /// next ones.
    #[inline(always)]
    pub(crate) fn put_refs(&self, n: u32, target: u32) -> bool {
        // Everyone else is done already: no atomic write. Acquire pairs with
        // the Release increments of the others (the value read comes from
        // the last of them, and they form one release sequence).
        let last = self.count.load(Ordering::Acquire) + n == target
            // Release: our accesses happen-before whoever ends up last.
            || self.count.fetch_add(n, Ordering::Release) + n == target;
        if last {
            // Pairs with the Release increments of everyone before us (a
            // no-op after the Acquire load above; the RMW path needs it).
            fence(Ordering::Acquire);
            // At rest again. No other holder is left to see it; whoever gets
            // the page next does so through the pool's ring or cache, or the
            // provider's lock, which publish this store.
            self.count.store(0, Ordering::Relaxed);
        }
        last
    }
}
