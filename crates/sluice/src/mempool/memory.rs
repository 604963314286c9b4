//! Backing memory: one contiguous mapping, hugepage-backed when possible.
//!
//! A packet pool touches every buffer over and over; with 4 KiB pages a pool
//! of a few thousand 2 KiB buffers spans thousands of TLB entries, with 2 MiB
//! pages a handful. DPDK measured 2.6× in forwarding from hugepages alone on
//! our kind of machine. So a region first asks for `MAP_HUGETLB` and only falls
//! back to ordinary anonymous pages when none are reserved
//! (`/proc/sys/vm/nr_hugepages`), and says which it got.
//!
//! A region is private to the process by default. A [`Sharing::Shared`]
//! region is a `memfd` mapped `MAP_SHARED` instead (`MFD_HUGETLB` first when
//! the policy allows hugepages), so another process can map the same pages
//! from its descriptor ([`Region::shared_fd`]): a vhost-user backend maps a
//! virtio frontend's packet buffers this way.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// Size of the huge pages asked for (the x86-64 default).
pub const HUGEPAGE_SIZE: usize = 2 << 20;

/// What memory a region (and so a pool) sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// 2 MiB hugepages (`MAP_HUGETLB`).
    Hugepages,
    /// Ordinary anonymous pages (4 KiB), because no hugepage could be had or
    /// none was asked for.
    Anonymous,
}

impl std::fmt::Display for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backing::Hugepages => "hugepages (2 MiB)",
            Backing::Anonymous => "anonymous 4 KiB pages",
        })
    }
}

/// Whether to use hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugepagePolicy {
    /// Hugepages when available, anonymous memory otherwise.
    #[default]
    Auto,
    /// Hugepages or an error.
    Require,
    /// Anonymous memory only.
    Never,
}

/// Whether a region's pages can be mapped by another process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sharing {
    /// A private anonymous mapping: this process alone sees the pages.
    #[default]
    Private,
    /// A `memfd` mapped `MAP_SHARED`, its descriptor kept
    /// ([`Region::shared_fd`]) to hand to another process.
    Shared,
}

/// A mapping of anonymous memory, private or shared through a `memfd`,
/// unmapped on drop.
#[derive(Debug)]
pub struct Region {
    /// Start of the mapping; page-aligned (2 MiB-aligned when hugepage-backed).
    base: NonNull<u8>,
    /// Mapped length in bytes: a multiple of the page size used.
    len: usize,
    backing: Backing,
    /// The memfd behind a shared region.
    memfd: Option<OwnedFd>,
}

// SAFETY: the region is plain memory owned by this value; which bytes a thread
// may touch is decided by the structures built on top of it (the mempool hands
// each element to one owner at a time).
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` only exposes the base address and length.
unsafe impl Sync for Region {}

impl Region {
    /// Maps at least `len` bytes (rounded up to the page size), zeroed and
    /// populated, following `policy`. Errors carry the OS error and the size.
    pub fn new(len: usize, policy: HugepagePolicy) -> std::io::Result<Region> {
        Self::with_sharing(len, policy, Sharing::Private)
    }

    /// [`new`](Self::new), private or shared as `sharing` says. A shared
    /// region is a `memfd` (`MFD_HUGETLB` when `policy` allows hugepages and
    /// some are reserved, a plain one otherwise) mapped `MAP_SHARED`.
    pub fn with_sharing(
        len: usize,
        policy: HugepagePolicy,
        sharing: Sharing,
    ) -> std::io::Result<Region> {
        if len == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "region of 0 bytes",
            ));
        }
        if policy != HugepagePolicy::Never {
            match Self::map(len.next_multiple_of(HUGEPAGE_SIZE), true, sharing) {
                Ok(r) => return Ok(r),
                Err(e) if policy == HugepagePolicy::Require => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!(
                            "no hugepages for a {len}-byte region ({e}); reserve some with \
                             `echo 512 > /proc/sys/vm/nr_hugepages`"
                        ),
                    ));
                }
                Err(_) => {}
            }
        }
        Self::map(len.next_multiple_of(page_size()), false, sharing)
    }

    fn map(len: usize, huge: bool, sharing: Sharing) -> std::io::Result<Region> {
        let memfd = match sharing {
            Sharing::Private => None,
            Sharing::Shared => Some(memfd(len, huge)?),
        };
        let mut flags = libc::MAP_POPULATE;
        match &memfd {
            None => {
                flags |= libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
                if huge {
                    flags |= libc::MAP_HUGETLB;
                }
            }
            Some(_) => flags |= libc::MAP_SHARED,
        }
        let fd = memfd.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        // SAFETY: a new mapping at an address of the kernel's choosing
        // aliases no existing memory; `fd` is -1 (anonymous) or a live memfd
        // of at least `len` bytes; arguments are plain values.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("mmap of {len} bytes failed: {e}"),
            ));
        }
        Ok(Region {
            base: NonNull::new(ptr.cast()).expect("mmap returned null without MAP_FIXED"),
            len,
            backing: if huge {
                Backing::Hugepages
            } else {
                Backing::Anonymous
            },
            memfd,
        })
    }

    /// The `memfd` behind a [`Sharing::Shared`] region (mapped from offset
    /// 0 for [`len`](Self::len) bytes), `None` for a private one.
    #[inline]
    pub fn shared_fd(&self) -> Option<BorrowedFd<'_>> {
        self.memfd.as_ref().map(|fd| fd.as_fd())
    }

    /// Whether the region is shared through a `memfd`.
    #[inline]
    pub fn is_shared(&self) -> bool {
        self.memfd.is_some()
    }

    /// Start of the region.
    #[inline]
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a region is never empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// What the region sits on.
    #[inline]
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// True when `addr` lies inside the region.
    #[inline]
    pub fn contains(&self, addr: *const u8) -> bool {
        let a = addr as usize;
        let b = self.base.as_ptr() as usize;
        a >= b && a - b < self.len
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `map`, and the
        // region is being dropped, so no reference into it remains (the pool
        // outlives its elements; see `Mempool`'s drop).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// A `memfd` of `len` bytes, on hugetlbfs when `huge`.
fn memfd(len: usize, huge: bool) -> std::io::Result<OwnedFd> {
    let mut flags = libc::MFD_CLOEXEC;
    if huge {
        flags |= libc::MFD_HUGETLB;
    }
    // SAFETY: a NUL-terminated name and plain flags.
    let fd = unsafe { libc::memfd_create(c"sluice-pool".as_ptr(), flags) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(
            e.kind(),
            format!("memfd_create failed: {e}"),
        ));
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a live descriptor and a plain length.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(
            e.kind(),
            format!("sizing a memfd to {len} bytes failed: {e}"),
        ));
    }
    Ok(fd)
}

/// The base page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn anonymous_region_is_zeroed_and_writable() {
        let r = Region::new(10_000, HugepagePolicy::Never).unwrap();
        assert_eq!(r.backing(), Backing::Anonymous);
        assert!(r.len() >= 10_000 && r.len().is_multiple_of(page_size()));
        // SAFETY: the region is ours and `len` bytes long.
        let bytes = unsafe { std::slice::from_raw_parts_mut(r.base().as_ptr(), r.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[r.len() - 1] = 7;
        assert!(r.contains(&bytes[r.len() - 1]));
        assert!(!r.contains(bytes.as_ptr().wrapping_add(r.len())));
    }

    #[test]
    fn auto_falls_back_or_uses_hugepages() {
        // Whatever the machine has, Auto succeeds and reports what it used.
        let r = Region::new(1 << 20, HugepagePolicy::Auto).unwrap();
        match r.backing() {
            Backing::Hugepages => assert!(r.len().is_multiple_of(HUGEPAGE_SIZE)),
            Backing::Anonymous => assert!(r.len().is_multiple_of(page_size())),
        }
    }

    #[test]
    fn a_shared_region_is_the_memfd_it_exposes() {
        let r = Region::with_sharing(10_000, HugepagePolicy::Never, Sharing::Shared).unwrap();
        assert!(r.is_shared());
        let fd = r.shared_fd().expect("a shared region has a memfd");
        // A second mapping of the memfd sees what the first writes.
        // SAFETY: a new shared mapping of the memfd at an address the
        // kernel chooses.
        let other = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                r.len(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(other, libc::MAP_FAILED);
        // SAFETY: the region is ours and `len` bytes long; nothing else
        // writes it during the test.
        unsafe { r.base().as_ptr().add(100).write(0x5a) };
        // SAFETY: the second mapping is `len` bytes long.
        assert_eq!(unsafe { other.cast::<u8>().add(100).read() }, 0x5a);
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(other, r.len()) };
        assert!(
            Region::new(4096, HugepagePolicy::Never)
                .unwrap()
                .shared_fd()
                .is_none()
        );
    }

    #[test]
    fn zero_length_is_an_error() {
        assert!(Region::new(0, HugepagePolicy::Auto).is_err());
    }
}
