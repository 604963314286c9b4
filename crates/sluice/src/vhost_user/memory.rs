//! The frontend's memory, mapped into this process.
//!
//! SET_MEM_TABLE sends up to eight regions, each a file descriptor (a
//! memfd, a hugetlbfs file, a shared-memory object) with the region's guest
//! physical address, its size, the frontend's own user address for it, and
//! where it starts in the file. [`GuestMemoryRegion::map`] checks one region
//! against its file and maps it shared; [`GuestMemory`] holds a table of
//! them and translates either kind of address to a host pointer, or copies
//! bytes in and out, always checking that the whole range lies in one
//! region. Dropping a region unmaps it.
//!
//! The memory is shared with another process that may write it at any
//! moment, so this module hands out raw pointers and copies, never Rust
//! references into it. Its copies move bytes with relaxed atomic loads
//! and stores, so copies from several threads at once never race.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};

use super::VhostUserError;
use super::message::{MAX_REGIONS, MemoryRegion};

/// One memory region, mapped shared from its descriptor.
#[derive(Debug)]
pub struct GuestMemoryRegion {
    desc: MemoryRegion,
    /// Start of the mapping: the file's offset 0.
    map: NonNull<u8>,
    /// Length of the mapping.
    map_len: usize,
}

// SAFETY: the region owns its mapping (unmapped only in Drop), and every
// access through it is a bounds-checked raw copy or a raw pointer handed to
// the caller, never a reference; any thread may do either.
unsafe impl Send for GuestMemoryRegion {}
// SAFETY: as above; `&self` methods only read the descriptor and copy
// through raw pointers.
unsafe impl Sync for GuestMemoryRegion {}

/// Checks a region's numbers on their own: nonzero size, no address range
/// that wraps around, and a mapping length that fits a `usize`.
fn check_region(desc: &MemoryRegion, index: usize) -> Result<usize, VhostUserError> {
    let bad = |what| VhostUserError::BadRegion {
        region: index,
        what,
    };
    if desc.memory_size == 0 {
        return Err(bad("size is 0"));
    }
    if desc.guest_phys_addr.checked_add(desc.memory_size).is_none() {
        return Err(bad("guest physical address + size overflows"));
    }
    if desc.userspace_addr.checked_add(desc.memory_size).is_none() {
        return Err(bad("user address + size overflows"));
    }
    let end = desc
        .mmap_offset
        .checked_add(desc.memory_size)
        .ok_or(bad("mmap offset + size overflows"))?;
    usize::try_from(end).map_err(|_| bad("mmap offset + size exceeds the address space"))
}

impl GuestMemoryRegion {
    /// Maps region `desc` (at position `index` in its table, for errors)
    /// from `fd`: the file from offset 0 to `mmap_offset + memory_size`,
    /// read-write and shared.
    ///
    /// The size must be nonzero, neither address range may wrap around, and
    /// `mmap_offset + memory_size` must lie within the file (`fstat`). The
    /// mapping's length is rounded up to the file's block size (a huge page
    /// on hugetlbfs) where the file is that long.
    pub fn map(
        desc: MemoryRegion,
        fd: BorrowedFd<'_>,
        index: usize,
    ) -> Result<GuestMemoryRegion, VhostUserError> {
        let end = check_region(&desc, index)?;
        let bad = |what| VhostUserError::BadRegion {
            region: index,
            what,
        };
        // SAFETY: all-zero bytes are a valid `libc::stat` (plain integers).
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is a live descriptor for the borrow's duration and
        // `st` is a writable `stat`.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(VhostUserError::Map(io::Error::last_os_error()));
        }
        let file_len = u64::try_from(st.st_size).unwrap_or(0);
        if end as u64 > file_len {
            return Err(bad("mmap offset + size lies beyond the end of its file"));
        }
        let block = u64::try_from(st.st_blksize).unwrap_or(0);
        let mut map_len = end;
        if block.is_power_of_two() {
            let rounded = (end as u64).div_ceil(block) * block;
            if rounded <= file_len {
                map_len = rounded as usize;
            }
        }
        // SAFETY: a fresh shared mapping chosen by the kernel (null hint),
        // of a file range checked above to lie within the file; it aliases
        // nothing of this process's Rust objects.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(VhostUserError::Map(io::Error::last_os_error()));
        }
        let map = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| VhostUserError::Map(io::Error::other("mmap returned null")))?;
        Ok(GuestMemoryRegion { desc, map, map_len })
    }

    /// The region as the memory table gave it.
    pub fn desc(&self) -> &MemoryRegion {
        &self.desc
    }

    /// Guest physical address of its start.
    pub fn guest_phys_addr(&self) -> u64 {
        self.desc.guest_phys_addr
    }

    /// The frontend's user address of its start.
    pub fn user_addr(&self) -> u64 {
        self.desc.userspace_addr
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.desc.memory_size
    }

    /// The host address of its first byte.
    pub fn host_addr(&self) -> NonNull<u8> {
        // SAFETY: `mmap_offset + size <= map_len` (checked in `map`), so
        // the offset stays inside the mapping.
        unsafe { self.map.add(self.desc.mmap_offset as usize) }
    }

    /// The offset in the region of `len` bytes at `addr`, for a region
    /// starting at `start`, if they lie wholly inside it.
    fn offset(&self, start: u64, addr: u64, len: u64) -> Option<usize> {
        let offset = addr.checked_sub(start)?;
        let end = offset.checked_add(len)?;
        (end <= self.desc.memory_size).then_some(offset as usize)
    }

    /// Host pointer to `len` bytes at guest physical address `gpa`, if they
    /// lie wholly in this region.
    pub fn gpa_to_host(&self, gpa: u64, len: u64) -> Option<NonNull<u8>> {
        let offset = self.offset(self.desc.guest_phys_addr, gpa, len)?;
        // SAFETY: `offset + len <= size`, inside the mapping.
        Some(unsafe { self.host_addr().add(offset) })
    }

    /// Host pointer to `len` bytes at frontend user address `uaddr`, if
    /// they lie wholly in this region.
    pub fn uaddr_to_host(&self, uaddr: u64, len: u64) -> Option<NonNull<u8>> {
        let offset = self.offset(self.desc.userspace_addr, uaddr, len)?;
        // SAFETY: `offset + len <= size`, inside the mapping.
        Some(unsafe { self.host_addr().add(offset) })
    }

    /// Copies `buf.len()` bytes at guest physical address `gpa` into `buf`.
    pub fn read_gpa(&self, gpa: u64, buf: &mut [u8]) -> Result<(), VhostUserError> {
        let src = self
            .gpa_to_host(gpa, buf.len() as u64)
            .ok_or(out_of_range(gpa, buf.len()))?;
        // SAFETY: `src..src + len` lies in the live mapping (checked by
        // `gpa_to_host`), which this module accesses only by raw pointer.
        unsafe { copy_from_shared(src, buf) };
        Ok(())
    }

    /// Copies `buf` to guest physical address `gpa`.
    pub fn write_gpa(&self, gpa: u64, buf: &[u8]) -> Result<(), VhostUserError> {
        let dst = self
            .gpa_to_host(gpa, buf.len() as u64)
            .ok_or(out_of_range(gpa, buf.len()))?;
        // SAFETY: as in `read_gpa`; the mapping is writable (PROT_WRITE).
        unsafe { copy_to_shared(buf, dst) };
        Ok(())
    }

    /// Copies `buf.len()` bytes at frontend user address `uaddr` into `buf`.
    pub fn read_uaddr(&self, uaddr: u64, buf: &mut [u8]) -> Result<(), VhostUserError> {
        let src = self
            .uaddr_to_host(uaddr, buf.len() as u64)
            .ok_or(out_of_range(uaddr, buf.len()))?;
        // SAFETY: as in `read_gpa`.
        unsafe { copy_from_shared(src, buf) };
        Ok(())
    }

    /// Copies `buf` to frontend user address `uaddr`.
    pub fn write_uaddr(&self, uaddr: u64, buf: &[u8]) -> Result<(), VhostUserError> {
        let dst = self
            .uaddr_to_host(uaddr, buf.len() as u64)
            .ok_or(out_of_range(uaddr, buf.len()))?;
        // SAFETY: as in `write_gpa`.
        unsafe { copy_to_shared(buf, dst) };
        Ok(())
    }
}

/// Copies `buf.len()` bytes of shared memory at `src` into `buf`, each
/// with a relaxed atomic load.
///
/// # Safety
///
/// `src..src + buf.len()` lies in a live mapping, accessed only through
/// raw pointers (never references) in this process.
unsafe fn copy_from_shared(src: NonNull<u8>, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        // SAFETY: in the mapping (the caller's promise); a byte is always
        // aligned; the memory is only ever accessed through raw pointers.
        *b = unsafe { AtomicU8::from_ptr(src.as_ptr().add(i)) }.load(Ordering::Relaxed);
    }
}

/// Copies `buf` into shared memory at `dst`, each byte with a relaxed
/// atomic store.
///
/// # Safety
///
/// `dst..dst + buf.len()` lies in a live, writable mapping, accessed only
/// through raw pointers (never references) in this process.
unsafe fn copy_to_shared(buf: &[u8], dst: NonNull<u8>) {
    for (i, b) in buf.iter().enumerate() {
        // SAFETY: as in `copy_from_shared`; the mapping is writable.
        unsafe { AtomicU8::from_ptr(dst.as_ptr().add(i)) }.store(*b, Ordering::Relaxed);
    }
}

fn out_of_range(addr: u64, len: usize) -> VhostUserError {
    VhostUserError::OutOfRange {
        addr,
        len: len as u64,
    }
}

impl Drop for GuestMemoryRegion {
    fn drop(&mut self) {
        // Pointers handed out are raw; their users are told (see `Backend`)
        // when a table is replaced.
        // SAFETY: `map..map + map_len` is this region's own mapping, unmapped only here.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

/// A memory table: up to eight mapped regions whose guest ranges do not
/// overlap.
#[derive(Debug, Default)]
pub struct GuestMemory {
    regions: Vec<GuestMemoryRegion>,
}

impl GuestMemory {
    /// A table of `regions`: at most [`MAX_REGIONS`], no two sharing a
    /// guest physical address.
    pub fn new(regions: Vec<GuestMemoryRegion>) -> Result<GuestMemory, VhostUserError> {
        if regions.len() > MAX_REGIONS {
            return Err(VhostUserError::BadRegion {
                region: MAX_REGIONS,
                what: "more than 8 regions",
            });
        }
        for (i, a) in regions.iter().enumerate() {
            for b in &regions[..i] {
                // Both ends are checked for overflow in `map`.
                let a_end = a.guest_phys_addr() + a.size();
                let b_end = b.guest_phys_addr() + b.size();
                if a.guest_phys_addr() < b_end && b.guest_phys_addr() < a_end {
                    return Err(VhostUserError::BadRegion {
                        region: i,
                        what: "its guest physical range overlaps another region's",
                    });
                }
            }
        }
        Ok(GuestMemory { regions })
    }

    /// Maps every region of a table from its descriptor (`fds[i]` for
    /// `descs[i]`) and checks the whole table.
    pub fn map(
        descs: &[MemoryRegion],
        fds: &[BorrowedFd<'_>],
    ) -> Result<GuestMemory, VhostUserError> {
        if descs.len() > MAX_REGIONS {
            return Err(VhostUserError::BadRegion {
                region: MAX_REGIONS,
                what: "more than 8 regions",
            });
        }
        if descs.len() != fds.len() {
            return Err(VhostUserError::BadRegion {
                region: descs.len().min(fds.len()),
                what: "not one descriptor per region",
            });
        }
        // Cheap checks first, so a bad table maps nothing.
        for (i, d) in descs.iter().enumerate() {
            check_region(d, i)?;
        }
        let regions = descs
            .iter()
            .zip(fds)
            .enumerate()
            .map(|(i, (d, fd))| GuestMemoryRegion::map(*d, *fd, i))
            .collect::<Result<Vec<_>, _>>()?;
        GuestMemory::new(regions)
    }

    /// The regions.
    pub fn regions(&self) -> &[GuestMemoryRegion] {
        &self.regions
    }

    /// Whether the table has no region.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Host pointer to `len` bytes at guest physical address `gpa`, if they
    /// lie wholly in one region.
    pub fn gpa_to_host(&self, gpa: u64, len: u64) -> Option<NonNull<u8>> {
        self.regions.iter().find_map(|r| r.gpa_to_host(gpa, len))
    }

    /// Host pointer to `len` bytes at frontend user address `uaddr`, if
    /// they lie wholly in one region.
    pub fn uaddr_to_host(&self, uaddr: u64, len: u64) -> Option<NonNull<u8>> {
        self.regions
            .iter()
            .find_map(|r| r.uaddr_to_host(uaddr, len))
    }

    fn region_for_gpa(&self, gpa: u64, len: usize) -> Result<&GuestMemoryRegion, VhostUserError> {
        self.regions
            .iter()
            .find(|r| r.gpa_to_host(gpa, len as u64).is_some())
            .ok_or(out_of_range(gpa, len))
    }

    /// Copies `buf.len()` bytes at guest physical address `gpa` into `buf`.
    pub fn read_gpa(&self, gpa: u64, buf: &mut [u8]) -> Result<(), VhostUserError> {
        self.region_for_gpa(gpa, buf.len())?.read_gpa(gpa, buf)
    }

    /// Copies `buf` to guest physical address `gpa`.
    pub fn write_gpa(&self, gpa: u64, buf: &[u8]) -> Result<(), VhostUserError> {
        self.region_for_gpa(gpa, buf.len())?.write_gpa(gpa, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vhost_user::socket::tests::memfd;
    use std::os::fd::AsFd;

    fn region(gpa: u64, size: u64, uaddr: u64, offset: u64) -> MemoryRegion {
        MemoryRegion {
            guest_phys_addr: gpa,
            memory_size: size,
            userspace_addr: uaddr,
            mmap_offset: offset,
        }
    }

    #[test]
    fn two_mappings_of_one_file_see_each_others_writes() {
        let fd = memfd(3 * 4096);
        let a = GuestMemoryRegion::map(region(0x10000, 8192, 0x7000_0000, 4096), fd.as_fd(), 0)
            .unwrap();
        let b = GuestMemoryRegion::map(region(0x10000, 8192, 0x7000_0000, 4096), fd.as_fd(), 0)
            .unwrap();
        a.write_gpa(0x10000 + 100, b"hello").unwrap();
        let mut got = [0u8; 5];
        b.read_uaddr(0x7000_0000 + 100, &mut got).unwrap();
        assert_eq!(&got, b"hello");
        // The last byte is in, one past it is out.
        assert!(a.write_gpa(0x10000 + 8191, &[1]).is_ok());
        assert!(matches!(
            a.write_gpa(0x10000 + 8191, &[1, 2]),
            Err(VhostUserError::OutOfRange { .. })
        ));
        assert!(a.gpa_to_host(0xffff, 1).is_none());
        assert!(a.uaddr_to_host(u64::MAX, 2).is_none());
    }

    #[test]
    fn bad_regions_are_refused() {
        let fd = memfd(4096);
        let cases = [
            (region(0, 0, 0, 0), "size is 0"),
            (
                region(u64::MAX - 10, 4096, 0, 0),
                "guest physical address + size overflows",
            ),
            (
                region(0, 4096, u64::MAX - 10, 0),
                "user address + size overflows",
            ),
            (
                region(0, 4096, 0, u64::MAX - 10),
                "mmap offset + size overflows",
            ),
            (
                region(0, 4096, 0, 1),
                "mmap offset + size lies beyond the end of its file",
            ),
            (
                region(0, 8192, 0, 0),
                "mmap offset + size lies beyond the end of its file",
            ),
        ];
        for (desc, want) in cases {
            match GuestMemoryRegion::map(desc, fd.as_fd(), 3) {
                Err(VhostUserError::BadRegion { region: 3, what }) => assert_eq!(what, want),
                other => panic!("{desc:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn tables_refuse_overlaps_and_wrong_descriptor_counts() {
        let fd = memfd(8192);
        let descs = [region(0, 4096, 0, 0), region(4095, 4096, 0x10000, 0)];
        let err = GuestMemory::map(&descs, &[fd.as_fd(), fd.as_fd()]).unwrap_err();
        assert!(
            matches!(err, VhostUserError::BadRegion { region: 1, .. }),
            "{err}"
        );
        let err = GuestMemory::map(&descs, &[fd.as_fd()]).unwrap_err();
        assert!(matches!(err, VhostUserError::BadRegion { .. }), "{err}");

        let descs = [region(0, 4096, 0, 0), region(4096, 4096, 0x10000, 4096)];
        let mem = GuestMemory::map(&descs, &[fd.as_fd(), fd.as_fd()]).unwrap();
        mem.write_gpa(4096, b"x").unwrap();
        // The second region is the file's second page.
        let mut got = [0u8];
        mem.regions()[0].read_gpa(0, &mut got).unwrap();
        assert_eq!(got, [0]);
        assert_eq!(mem.uaddr_to_host(0x10000, 1), mem.gpa_to_host(4096, 1));
        // A range across the two regions is in neither.
        assert!(mem.gpa_to_host(4000, 200).is_none());
        assert!(matches!(
            mem.read_gpa(4000, &mut [0; 200]),
            Err(VhostUserError::OutOfRange { .. })
        ));
    }
}
