//! Shared memory regions: a `memfd` mapped `MAP_SHARED` by both sides.
//!
//! The client creates each region ([`Region::create`]): `memfd_create`,
//! sealed against shrinking (`F_SEAL_SHRINK`, so the mapping can never
//! outgrow the file and fault), sized with `ftruncate` and mapped. It sends
//! the memfd with ADD_REGION; the server maps it ([`Region::map`]) after
//! checking that the file is at least as large as ADD_REGION claims and is
//! sealed the same way. Dropping a [`Region`] unmaps it and closes the memfd.
//!
//! [`Layout`] is the layout of DPDK's copy-mode region 0, which the client
//! uses: every ring (C2S rings, then S2C rings), each a 128-byte header and
//! `2^log2` descriptors, then the packet buffers: `2^log2` buffers of
//! `buffer_size` bytes per ring, in the same ring order.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};

use super::ring::{DESC_SIZE, HEADER_SIZE};
use super::{Direction, MemifError};

/// One mapped region.
#[derive(Debug)]
pub struct Region {
    addr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: a Region is a shared mapping with no thread affinity; all access
// to its bytes goes through raw pointers whose users synchronise (ring
// head/tail atomics), so sending or sharing the handle is sound.
unsafe impl Send for Region {}
// SAFETY: as above: `&Region` hands out only the address and length.
unsafe impl Sync for Region {}

/// The largest region: descriptors hold 32-bit offsets.
const MAX_REGION_SIZE: u64 = u32::MAX as u64;

fn mmap_shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping chosen by the kernel (null hint) of a file we
    // hold open; it overlaps no Rust object.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(addr.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
}

impl Region {
    /// A new zero-filled region of `size` bytes, its memfd named `name`
    /// (seen in `/proc/PID/fd`), sealed against shrinking.
    pub fn create(name: &str, size: u64) -> Result<Region, MemifError> {
        if size == 0 || size > MAX_REGION_SIZE {
            return Err(MemifError::BadRegionSize(size));
        }
        let cname = CString::new(name).map_err(|_| MemifError::BadConfig("region name has NUL"))?;
        // SAFETY: `cname` is NUL-terminated and alive for the call.
        let raw = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: memfd_create returned a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate and fcntl take no pointers.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } < 0
            // SAFETY: as above.
            || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } < 0
        {
            return Err(io::Error::last_os_error().into());
        }
        let addr = mmap_shared(fd.as_fd(), size as usize)?;
        Ok(Region {
            addr,
            len: size as usize,
            fd,
        })
    }

    /// Maps the region the peer sent: `fd` with the `size` its ADD_REGION
    /// claims.
    ///
    /// Refused: a size of zero or over 4 GiB ([`MemifError::BadRegionSize`]),
    /// a file smaller than `size` ([`MemifError::RegionTooSmall`]), a file
    /// not sealed against shrinking ([`MemifError::RegionNotSealed`]): the
    /// peer could otherwise truncate it and make every access fault.
    pub fn map(fd: OwnedFd, size: u64) -> Result<Region, MemifError> {
        if size == 0 || size > MAX_REGION_SIZE {
            return Err(MemifError::BadRegionSize(size));
        }
        // SAFETY: fcntl takes no pointers.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(MemifError::RegionNotSealed);
        }
        // SAFETY: stat is plain old data; all zeros is a valid value.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `stat` is a valid, writable stat for fstat to fill.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } < 0 {
            return Err(io::Error::last_os_error().into());
        }
        let actual = stat.st_size.max(0) as u64;
        if actual < size {
            return Err(MemifError::RegionTooSmall {
                claimed: size,
                actual,
            });
        }
        let addr = mmap_shared(fd.as_fd(), size as usize)?;
        Ok(Region {
            addr,
            len: size as usize,
            fd,
        })
    }

    /// The region's size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: regions have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start of the mapping. Its `len()` bytes stay mapped while `self`
    /// lives; the peer may write them at any time.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr.as_ptr()
    }

    /// The memfd, for sending with ADD_REGION.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether `offset..offset + len` lies inside the region.
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset
            .checked_add(len)
            .is_some_and(|end| end <= self.len as u64)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `addr..addr + len` is the mapping made in create/map, not
        // unmapped before; every view into it borrows or shares this Region,
        // so none outlives the unmapping.
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
    }
}

/// The client's region 0 layout (DPDK's copy mode): rings, then buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Number of C2S rings.
    pub c2s_rings: u16,
    /// Number of S2C rings.
    pub s2c_rings: u16,
    /// log2 of the descriptors per ring.
    pub log2_ring_size: u8,
    /// The size of each packet buffer.
    pub buffer_size: u32,
}

impl Layout {
    /// Bytes of one ring: header and descriptors.
    pub fn ring_bytes(&self) -> u64 {
        HEADER_SIZE as u64 + ((DESC_SIZE as u64) << self.log2_ring_size)
    }

    /// Position of a ring among all rings: C2S first, then S2C.
    fn ring_number(&self, direction: Direction, index: u16) -> u64 {
        match direction {
            Direction::ClientToServer => u64::from(index),
            Direction::ServerToClient => u64::from(self.c2s_rings) + u64::from(index),
        }
    }

    /// The offset of a ring's header.
    pub fn ring_offset(&self, direction: Direction, index: u16) -> u64 {
        self.ring_number(direction, index) * self.ring_bytes()
    }

    /// The offset of the first packet buffer, after all rings.
    pub fn buffers_offset(&self) -> u64 {
        (u64::from(self.c2s_rings) + u64::from(self.s2c_rings)) * self.ring_bytes()
    }

    /// The offset of the buffer of `slot` in a ring.
    pub fn buffer_offset(&self, direction: Direction, index: u16, slot: u32) -> u64 {
        let first = self.ring_number(direction, index) << self.log2_ring_size;
        self.buffers_offset() + (first + u64::from(slot)) * u64::from(self.buffer_size)
    }

    /// The whole region's size.
    pub fn region_size(&self) -> u64 {
        let buffers =
            (u64::from(self.c2s_rings) + u64::from(self.s2c_rings)) << self.log2_ring_size;
        self.buffers_offset() + buffers * u64::from(self.buffer_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain_memfd(size: i64, seal: bool) -> OwnedFd {
        let name = CString::new("test").unwrap();
        // SAFETY: a NUL-terminated name.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(raw >= 0);
        // SAFETY: a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: no pointers.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), size) }, 0);
        if seal {
            // SAFETY: no pointers.
            let ret =
                unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
            assert_eq!(ret, 0);
        }
        fd
    }

    #[test]
    fn a_created_region_is_shared_with_its_mapping() {
        let a = Region::create("memif region 0", 8192).unwrap();
        // SAFETY: the region is 8192 bytes, offset 100 is inside.
        unsafe { a.as_ptr().add(100).write(0xab) };
        let dup = a.fd().try_clone_to_owned().unwrap();
        let b = Region::map(dup, 8192).unwrap();
        assert_eq!(b.len(), 8192);
        // SAFETY: as above.
        assert_eq!(unsafe { b.as_ptr().add(100).read() }, 0xab);
        assert!(b.contains(8000, 192) && !b.contains(8000, 193) && !b.contains(u64::MAX, 2));
    }

    #[test]
    fn bad_regions_are_refused() {
        assert!(matches!(
            Region::create("r", 0),
            Err(MemifError::BadRegionSize(0))
        ));
        assert!(matches!(
            Region::map(plain_memfd(4096, true), 8192),
            Err(MemifError::RegionTooSmall {
                claimed: 8192,
                actual: 4096
            })
        ));
        assert!(matches!(
            Region::map(plain_memfd(4096, false), 4096),
            Err(MemifError::RegionNotSealed)
        ));
        assert!(matches!(
            Region::map(plain_memfd(4096, true), 1 << 40),
            Err(MemifError::BadRegionSize(_))
        ));
    }

    #[test]
    fn layout_is_dpdks() {
        let layout = Layout {
            c2s_rings: 2,
            s2c_rings: 1,
            log2_ring_size: 10,
            buffer_size: 2048,
        };
        let ring = 128 + 16 * 1024;
        assert_eq!(layout.ring_bytes(), ring);
        assert_eq!(layout.ring_offset(Direction::ClientToServer, 1), ring);
        assert_eq!(layout.ring_offset(Direction::ServerToClient, 0), 2 * ring);
        assert_eq!(layout.buffers_offset(), 3 * ring);
        assert_eq!(
            layout.buffer_offset(Direction::ServerToClient, 0, 5),
            3 * ring + (2 * 1024 + 5) * 2048
        );
        assert_eq!(layout.region_size(), 3 * ring + 3 * 1024 * 2048);
    }
}
