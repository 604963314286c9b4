//! Table memory: a zeroed array of `u32` entries on 2 MiB pages when it can.
//!
//! The first-level table of either LPM table has 2^24 entries (64 MiB) and a
//! lookup touches one random entry of it. With 4 KiB pages that is 16384
//! pages, far more than the TLB holds, so nearly every lookup of a large
//! route set also walks the page table; with 2 MiB pages the 32 pages stay
//! in the TLB. So tables ask for, in order of [`LpmMemory::Auto`]:
//!
//! 1. reserved hugepages (`MAP_HUGETLB`, through the mempool's
//!    [`Region`](crate::mempool::Region)), populated and zeroed up front;
//! 2. transparent huge pages: an anonymous mapping advised with
//!    `MADV_HUGEPAGE`, populated lazily (pages never written read as the
//!    kernel's zero page, so an unrouted part of the table costs no memory);
//! 3. ordinary 4 KiB pages, lazily.
//!
//! `sluice bench lpm` measures the three (see the README for the figures).

use std::ptr::NonNull;

use crate::mempool::{HugepagePolicy, Region};

/// Which memory a table asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LpmMemory {
    /// Reserved hugepages if any are free, else transparent huge pages,
    /// else 4 KiB pages. Tables smaller than a huge page (2 MiB) always
    /// get 4 KiB pages.
    #[default]
    Auto,
    /// Transparent huge pages (advised; the kernel may still give 4 KiB
    /// pages if THP is off or memory is fragmented).
    Transparent,
    /// 4 KiB pages only, populated up front (what DPDK's `--no-huge` gives).
    Small,
}

/// What a table got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableBacking {
    /// Reserved 2 MiB hugepages (`MAP_HUGETLB`).
    Hugetlb,
    /// An anonymous mapping advised `MADV_HUGEPAGE`.
    Transparent,
    /// Ordinary 4 KiB pages.
    Small,
}

impl std::fmt::Display for TableBacking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TableBacking::Hugetlb => "hugetlb 2 MiB",
            TableBacking::Transparent => "THP (madvise)",
            TableBacking::Small => "4 KiB pages",
        })
    }
}

/// Where the entries live.
enum Storage {
    /// A mempool region (hugetlb or populated 4 KiB pages); unmapped on drop.
    Region(#[allow(dead_code, reason = "held for its Drop")] Region),
    /// Our own lazily populated anonymous mapping of `len` bytes.
    Mapped { base: NonNull<u8>, len: usize },
}

/// A zeroed, fixed-length array of `u32` table entries.
///
/// Invariant: `ptr` points to `len` initialised `u32`s (zero at creation)
/// inside `storage`'s mapping, which lives as long as the table and is
/// reached only through it.
pub(crate) struct EntryTable {
    ptr: NonNull<u32>,
    len: usize,
    backing: TableBacking,
    storage: Storage,
}

// SAFETY: the table owns its mapping exclusively (see the invariant); shared
// access is read-only through `&self`, writes need `&mut self`.
unsafe impl Send for EntryTable {}
// SAFETY: as above.
unsafe impl Sync for EntryTable {}

impl EntryTable {
    /// A table of `len` zeroed entries (`len` ≥ 1) on the memory `mem` asks
    /// for. Fails only when no memory at all can be mapped.
    pub(crate) fn new(len: usize, mem: LpmMemory) -> std::io::Result<EntryTable> {
        let len = len.max(1);
        let bytes = len * size_of::<u32>();
        // Below one huge page, a reserved one would mostly be waste.
        if mem == LpmMemory::Auto
            && bytes >= crate::mempool::HUGEPAGE_SIZE
            && let Ok(r) = Region::new(bytes, HugepagePolicy::Require)
        {
            return Ok(Self::from_region(r, len, TableBacking::Hugetlb));
        }
        if mem == LpmMemory::Small {
            let r = Region::new(bytes, HugepagePolicy::Never)?;
            return Ok(Self::from_region(r, len, TableBacking::Small));
        }
        Self::map_lazy(len)
    }

    fn from_region(r: Region, len: usize, backing: TableBacking) -> EntryTable {
        EntryTable {
            // Regions are page-aligned, so aligned for `u32`.
            ptr: r.base().cast(),
            len,
            backing,
            storage: Storage::Region(r),
        }
    }

    /// A lazily populated anonymous mapping, advised for huge pages when
    /// `len` spans at least one.
    fn map_lazy(len: usize) -> std::io::Result<EntryTable> {
        const HUGE: usize = crate::mempool::HUGEPAGE_SIZE;
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        };
        let bytes = (len * size_of::<u32>()).next_multiple_of(page);
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing aliases no existing memory; arguments are plain values.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("mmap of {bytes} bytes for an LPM table failed: {e}"),
            ));
        }
        let base = NonNull::new(ptr.cast::<u8>()).expect("mmap returned null without MAP_FIXED");
        let backing = if bytes >= HUGE {
            // SAFETY: the range is exactly the mapping just made. The advice
            // only changes page sizes; a failure (THP compiled out) leaves
            // ordinary pages, which work the same.
            let r = unsafe { libc::madvise(ptr, bytes, libc::MADV_HUGEPAGE) };
            if r == 0 {
                TableBacking::Transparent
            } else {
                TableBacking::Small
            }
        } else {
            TableBacking::Small
        };
        Ok(EntryTable {
            ptr: base.cast(),
            len,
            backing,
            storage: Storage::Mapped { base, len: bytes },
        })
    }

    /// What the table sits on.
    pub(crate) fn backing(&self) -> TableBacking {
        self.backing
    }

    /// The entries.
    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[u32] {
        // SAFETY: `ptr` points to `len` initialised u32s owned by `self`
        // (struct invariant); the borrow of `self` keeps them alive and
        // unaliased by writers.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The entries, writable.
    #[inline(always)]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u32] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only
        // access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Pointer to the first entry, for prefetches and unchecked reads.
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *const u32 {
        self.ptr.as_ptr()
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for EntryTable {
    fn drop(&mut self) {
        if let Storage::Mapped { base, len } = self.storage {
            // SAFETY: `base`/`len` are exactly the mapping made in
            // `map_lazy`, and no reference into it outlives `self`.
            unsafe { libc::munmap(base.as_ptr().cast(), len) };
        }
        // A `Storage::Region` unmaps itself.
    }
}

/// Hints the CPU to fetch the cache line holding `p` into all levels.
#[inline(always)]
pub(crate) fn prefetch(p: *const u32) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: PREFETCH (SSE) is in the x86-64 baseline; it never faults,
        // whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = p;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_zeroed_and_writable() {
        for mem in [LpmMemory::Auto, LpmMemory::Transparent, LpmMemory::Small] {
            let mut t = EntryTable::new(1 << 20, mem).unwrap();
            assert_eq!(t.len(), 1 << 20);
            assert!(t.as_slice().iter().all(|&e| e == 0));
            t.as_mut_slice()[(1 << 20) - 1] = 7;
            assert_eq!(t.as_slice()[(1 << 20) - 1], 7);
            match mem {
                LpmMemory::Small => assert_eq!(t.backing(), TableBacking::Small),
                LpmMemory::Transparent => assert_ne!(t.backing(), TableBacking::Hugetlb),
                LpmMemory::Auto => {}
            }
        }
        // Smaller than a huge page: never advised.
        let t = EntryTable::new(10, LpmMemory::Transparent).unwrap();
        assert_eq!(t.backing(), TableBacking::Small);
        assert_eq!(t.as_slice(), &[0; 10]);
    }
}
