//! Guest memory: the address space the driver's descriptors point into.
//!
//! A virtqueue and the buffers it carries live in memory that both sides
//! map: a virtual machine's RAM for a vhost-user backend, a shared file for
//! virtio-user or memif. Addresses in descriptors are guest physical
//! addresses (GPAs); [`GuestMemory`] is a table of regions, each a run of
//! GPAs backed by a [`Mapping`] in this process, and translates a GPA range
//! to the bytes behind it.
//!
//! # Every access is checked
//!
//! The addresses come from the other side and are trusted for nothing. Each
//! access names a GPA range, and the range must lie inside one region: a
//! range outside every region, or crossing a region's end, is
//! [`VirtioError::OutsideMemory`] and touches nothing. A buffer that spans
//! two regions adjacent in GPA space is refused the same way.
//!
//! # No references into shared memory
//!
//! The other side writes the memory while this side reads it, so the table
//! never hands out `&[u8]` or `&mut [u8]` into a mapping: the compiler may
//! assume such memory does not change under a reference. Bytes are copied
//! in and out instead, with [`read_into`](GuestMemory::read_into),
//! [`write_from`](GuestMemory::write_from), [`read_obj`](GuestMemory::read_obj)
//! and [`write_obj`](GuestMemory::write_obj), and the ring indices are
//! loaded and stored as atomic 16-bit words
//! ([`load_u16`](GuestMemory::load_u16), [`store_u16`](GuestMemory::store_u16))
//! with the ordering the queue protocol needs.
//!
//! The copies access each shared byte as a relaxed atomic would — on
//! x86-64 in `movdqu` moves or one `rep movsb` the compiler cannot see
//! into, elsewhere atomic loads and stores 8 bytes at a time where the
//! addresses allow — so a copy racing a write of
//! the other side reads some mix of old and new bytes, as the hardware
//! does, instead of being undefined behaviour. (The other side
//! may access the same bytes with another width; the Rust memory model does
//! not describe such mixed-size races, but on the targets the library runs
//! on each access is one plain load or store of its width.) The queue
//! protocol never lets the two sides touch the same bytes without an index
//! store and load ordering them, so a well-behaved peer never races at all.
//!
//! # Backings
//!
//! A [`Mapping`] is the host side of a region: [`Mapping::anonymous`]
//! allocates zeroed memory the mapping owns (for tests and for a
//! driver that allocates its own rings), [`Mapping::from_raw`] borrows
//! memory mapped by someone else (a vhost-user backend's mmap of the
//! guest's memory file), which must outlive the mapping.
//!
//! Under `--cfg loom` a mapping is a row of loom cells, one per byte, and one
//! loom atomic per 2-byte word for the index accesses, so that a model
//! checks that every byte read was written before it (in happens-before
//! order) rather than merely racing; the two are separate storage there, and
//! the queues never access the same bytes both ways.
//!
//! ```
//! use sluice::virtio::memory::{GuestMemory, Mapping};
//!
//! let mem = GuestMemory::new(vec![(0x1000, Mapping::anonymous(4096)?)])?;
//! mem.write_from(0x1010, b"frame")?;
//! let mut back = [0u8; 5];
//! mem.read_into(0x1010, &mut back)?;
//! assert_eq!(&back, b"frame");
//! assert_eq!(mem.read_obj::<u32>(0x1010)?, u32::from_ne_bytes(*b"fram"));
//! // Past the end of the only region: refused, nothing read.
//! assert!(mem.read_into(0x1ffe, &mut back).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io;
use std::mem::{MaybeUninit, size_of};

use super::VirtioError;
use crate::sync::Ordering;

/// A type that may be read from and written to guest memory as raw bytes.
///
/// # Safety
///
/// Every bit pattern of `size_of::<T>()` bytes is a valid `T`, and `T` has
/// no padding bytes (so writing one out reads no uninitialised memory).
pub unsafe trait Pod: Copy + Send + Sync + 'static {}

// SAFETY: integers have no padding and every bit pattern is valid.
unsafe impl Pod for u8 {}
// SAFETY: as above.
unsafe impl Pod for u16 {}
// SAFETY: as above.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for u64 {}
// SAFETY: as above.
unsafe impl Pod for i8 {}
// SAFETY: as above.
unsafe impl Pod for i16 {}
// SAFETY: as above.
unsafe impl Pod for i32 {}
// SAFETY: as above.
unsafe impl Pod for i64 {}
// SAFETY: an array of `Pod` elements has no padding between them and every
// bit pattern of each element is valid.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// The host side of one region of guest memory (see the module docs).
pub struct Mapping {
    storage: Storage,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping").field("len", &self.len()).finish()
    }
}

impl Mapping {
    /// `len` bytes of zeroed memory that the mapping owns (an anonymous
    /// private mmap, page-aligned). A length of 0 is an
    /// [`io::ErrorKind::InvalidInput`] error.
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a guest memory mapping of 0 bytes",
            ));
        }
        Storage::anonymous(len).map(|storage| Mapping { storage })
    }

    /// Borrows `len` bytes at `ptr`, mapped by someone else.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` is mapped readable and writable for as long as the
    /// returned mapping (and any [`GuestMemory`] holding it) lives, and
    /// nothing in this process accesses it other than through this mapping
    /// or with atomic operations (another process may write it freely).
    #[cfg(not(loom))]
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Mapping {
        Mapping {
            storage: Storage {
                ptr,
                len,
                owned: false,
            },
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.storage.len()
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A mapping's bytes outside loom: a pointer and a length.
#[cfg(not(loom))]
struct Storage {
    ptr: *mut u8,
    len: usize,
    /// Whether `ptr` is an mmap of `len` bytes this storage unmaps.
    owned: bool,
}

// SAFETY: the storage is a pointer to memory that is only accessed with
// atomic operations (see `read`, `write`, `atomic_u16`), which any thread may
// perform; an owned mapping is unmapped once, by the drop of its one owner.
#[cfg(not(loom))]
unsafe impl Send for Storage {}
// SAFETY: as above: every access through `&Storage` is atomic.
#[cfg(not(loom))]
unsafe impl Sync for Storage {}

#[cfg(not(loom))]
impl Drop for Storage {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: `ptr` is the start of an mmap of `len` bytes made by
            // `anonymous`, unmapped only here, and the storage is being
            // dropped, so no access through it follows.
            unsafe {
                libc::munmap(self.ptr.cast(), self.len);
            }
        }
    }
}

#[cfg(not(loom))]
impl Storage {
    fn anonymous(len: usize) -> io::Result<Storage> {
        // SAFETY: an anonymous private mapping at an address the kernel
        // chooses; nothing existing is replaced.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Storage {
            ptr: ptr.cast(),
            len,
            owned: true,
        })
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Copies `dst.len()` bytes at `offset` into `dst`.
    /// The caller has checked `offset + dst.len() <= self.len`.
    fn read(&self, offset: usize, dst: &mut [u8]) {
        debug_assert!(offset + dst.len() <= self.len);
        // SAFETY: in bounds (checked by the caller), so the pointer stays
        // inside the mapping.
        let src = unsafe { self.ptr.add(offset) };
        // SAFETY: `src..src + len` is inside the mapping (above), which
        // lives as long as `self`; `dst` is a distinct, writable slice of
        // this process, so the two ranges do not overlap.
        unsafe { copy_shared(src, dst.as_mut_ptr(), dst.len()) };
    }

    /// Copies `src` to `offset`. The caller has checked the bounds.
    fn write(&self, offset: usize, src: &[u8]) {
        debug_assert!(offset + src.len() <= self.len);
        // SAFETY: in bounds (checked by the caller).
        let dst = unsafe { self.ptr.add(offset) };
        // SAFETY: `dst..dst + len` is inside the mapping (above) and `src`
        // is a slice of this process's own memory, so they do not overlap.
        unsafe { copy_shared(src.as_ptr(), dst, src.len()) };
    }

    /// Makes the `len` (at most 16) bytes at `offset` the first `len` bytes
    /// of `value`, little-endian, straight from registers: each piece (8,
    /// 4, 2 or 1 bytes) is loaded and stored only when it differs, so the
    /// stores wait on no earlier store and bytes that already hold the
    /// value are not written (their line stays shared with the other side,
    /// which read it last). The caller has checked the bounds.
    fn write_prefix(&self, offset: usize, value: u128, len: usize) {
        debug_assert!(len <= 16 && offset + len <= self.len);
        #[cfg(target_arch = "x86_64")]
        {
            use x86_moves::{load1, load2, load4, load8, store1, store2, store4, store8};
            // SAFETY: in bounds (checked by the caller).
            let dst = unsafe { self.ptr.add(offset) };
            let (mut at, mut rest) = (0usize, value);
            // The low `$ty` of `rest` into the bytes at `at`, unless they
            // hold it already.
            macro_rules! piece {
                ($ty:ty, $load:ident, $store:ident) => {
                    // SAFETY: `dst + at .. dst + at + size_of::<$ty>()` lies
                    // within the `len` bytes checked above (each use tests
                    // what is left first).
                    unsafe {
                        let to = dst.add(at);
                        if $load(to) != rest as $ty {
                            $store(to, rest as $ty);
                        }
                    }
                };
            }
            // Whole words first (at most two), then what is left: under 8
            // bytes, so one piece of each smaller width at most.
            while len - at >= 8 {
                piece!(u64, load8, store8);
                (rest, at) = (rest >> 64, at + 8);
            }
            if len - at >= 4 {
                piece!(u32, load4, store4);
                (rest, at) = (rest >> 32, at + 4);
            }
            if len - at >= 2 {
                piece!(u16, load2, store2);
                (rest, at) = (rest >> 16, at + 2);
            }
            if len > at {
                piece!(u8, load1, store1);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.write(offset, &value.to_le_bytes()[..len]);
    }

    /// Loads the 2-byte word at `offset` (2-aligned in GPA terms; the
    /// caller has checked bounds, and region starts are 2-aligned in the
    /// host too, see `GuestMemory::new`).
    fn load_u16(&self, offset: usize, order: Ordering) -> u16 {
        // SAFETY: in bounds and 2-aligned (checked by the caller); the word
        // is accessed in this process only atomically.
        unsafe { std::sync::atomic::AtomicU16::from_ptr(self.ptr.add(offset).cast()) }.load(order)
    }

    /// Stores the 2-byte word at `offset` (see `load_u16`).
    fn store_u16(&self, offset: usize, value: u16, order: Ordering) {
        // SAFETY: as in `load_u16`.
        unsafe { std::sync::atomic::AtomicU16::from_ptr(self.ptr.add(offset).cast()) }
            .store(value, order);
    }

    /// Loads the 4-byte word at `offset`, relaxed (4-aligned in GPA terms,
    /// in bounds: checked by the caller; see `load_u16`).
    fn load_u32(&self, offset: usize) -> u32 {
        // SAFETY: in bounds and 4-aligned (checked by the caller); shared
        // words are accessed in this process only atomically.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.ptr.add(offset).cast()) }
            .load(Ordering::Relaxed)
    }

    /// Stores the 4-byte word at `offset`, relaxed (see `load_u32`).
    fn store_u32(&self, offset: usize, value: u32) {
        // SAFETY: as in `load_u32`.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.ptr.add(offset).cast()) }
            .store(value, Ordering::Relaxed);
    }

    /// Loads the 8-byte word at `offset`, relaxed (8-aligned in GPA terms,
    /// in bounds: checked by the caller).
    fn load_u64(&self, offset: usize) -> u64 {
        // SAFETY: in bounds and 8-aligned (checked by the caller); shared
        // words are accessed in this process only atomically.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.ptr.add(offset).cast()) }
            .load(Ordering::Relaxed)
    }

    /// Stores the 8-byte word at `offset`, relaxed (see `load_u64`).
    fn store_u64(&self, offset: usize, value: u64) {
        // SAFETY: as in `load_u64`.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.ptr.add(offset).cast()) }
            .store(value, Ordering::Relaxed);
    }

    fn is_host_aligned(&self) -> bool {
        (self.ptr as usize).is_multiple_of(8)
    }
}

/// Copies `len` bytes from `src` to `dst` where one side is shared memory
/// the other process may write at the same time: every byte is read and
/// written as a relaxed atomic access of that byte (module docs), never as
/// a plain Rust load or store the compiler could split, merge or repeat.
///
/// On x86-64 the copy is machine code the compiler cannot see into: up to
/// [`STRING_COPY_MIN`] bytes, 16-byte `movdqu` loads and stores (the last
/// one overlapping the one before when the length is not a multiple of
/// 16; shorter copies use 8-, 4- and 1-byte moves the same way), which go
/// through the store buffer like any store, so a copy into lines the other
/// side owns does not hold the core up while they come over; longer
/// copies are one `rep movsb`. Each instruction reads and writes every
/// byte it covers once (a byte covered by two overlapping moves is
/// written twice with what was read), which is what `AtomicU8` loads and
/// stores would do. Elsewhere the copy is such a loop of atomics, 8 bytes
/// at a time where both addresses allow it.
///
/// # Safety
/// `src..src + len` is readable and `dst..dst + len` writable for the
/// whole call, and the two ranges do not overlap.
#[cfg(not(loom))]
#[inline]
unsafe fn copy_shared(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the ranges are valid and disjoint (the caller's contract),
    // and each move below stays inside them.
    unsafe {
        use x86_moves::{move1, move4, move8, move16};
        if len >= STRING_COPY_MIN {
            // `rep movsb` reads `rcx` bytes from `rsi` and writes them to
            // `rdi`, touching nothing else, with the direction flag clear
            // as Rust guarantees on entry to `asm!`; it changes no flags.
            std::arch::asm!(
                "rep movsb",
                inout("rcx") len => _,
                inout("rsi") src => _,
                inout("rdi") dst => _,
                options(nostack, preserves_flags)
            );
        } else if len >= 16 {
            let mut at = 0;
            while at + 16 <= len {
                move16(src.add(at), dst.add(at));
                at += 16;
            }
            if at < len {
                move16(src.add(len - 16), dst.add(len - 16));
            }
        } else if len >= 8 {
            move8(src, dst);
            move8(src.add(len - 8), dst.add(len - 8));
        } else if len >= 4 {
            move4(src, dst);
            move4(src.add(len - 4), dst.add(len - 4));
        } else {
            for at in 0..len {
                move1(src.add(at), dst.add(at));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::atomic::{AtomicU8, AtomicU64};
        let mut i = 0;
        let aligned = (src as usize) % 8 == (dst as usize) % 8;
        while i < len && !(aligned && (src as usize + i).is_multiple_of(8)) {
            // SAFETY: in bounds (the caller's contract); shared bytes are
            // accessed only atomically.
            let byte = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Ordering::Relaxed);
            // SAFETY: as above.
            unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(byte, Ordering::Relaxed);
            i += 1;
        }
        while aligned && len - i >= 8 {
            // SAFETY: both 8-aligned here and 8 bytes in bounds.
            let word = unsafe { AtomicU64::from_ptr(src.add(i).cast_mut().cast()) }
                .load(Ordering::Relaxed);
            // SAFETY: as above.
            unsafe { AtomicU64::from_ptr(dst.add(i).cast()) }.store(word, Ordering::Relaxed);
            i += 8;
        }
        while i < len {
            // SAFETY: in bounds; accessed only atomically, as above.
            let byte = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Ordering::Relaxed);
            // SAFETY: as above.
            unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(byte, Ordering::Relaxed);
            i += 1;
        }
    }
}

/// Copies at least this long are one `rep movsb` (see [`copy_shared`]).
#[cfg(all(target_arch = "x86_64", not(loom)))]
const STRING_COPY_MIN: usize = 512;

/// The single moves [`copy_shared`] is made of: each loads `N` bytes at
/// `src` and stores them at `dst` in one instruction each way.
#[cfg(all(target_arch = "x86_64", not(loom)))]
mod x86_moves {
    /// # Safety
    /// `src..src + 16` readable, `dst..dst + 16` writable.
    #[inline(always)]
    pub(super) unsafe fn move16(src: *const u8, dst: *mut u8) {
        // SAFETY: the caller's contract; SSE2 is part of the x86-64
        // baseline; the moves touch only those 32 bytes and no flags.
        unsafe {
            std::arch::asm!(
                "movdqu {t}, xmmword ptr [{s}]",
                "movdqu xmmword ptr [{d}], {t}",
                s = in(reg) src,
                d = in(reg) dst,
                t = out(xmm_reg) _,
                options(nostack, preserves_flags)
            );
        }
    }

    /// Defines `$load` and `$store`: one `mov` of a `$ty` (`$size` bytes,
    /// any alignment) from or to memory, through a register of class
    /// `$class` named with modifier `$modifier`.
    macro_rules! word_access {
        ($load:ident, $store:ident, $ty:ty, $size:literal, $class:ident, $modifier:literal) => {
            /// Loads the word at `src` (any alignment).
            ///
            /// # Safety
            /// `src..src + size_of::<$ty>()` readable.
            #[inline(always)]
            pub(super) unsafe fn $load(src: *const u8) -> $ty {
                let value: $ty;
                // SAFETY: the caller's contract; the load touches only
                // those bytes.
                unsafe {
                    std::arch::asm!(
                        concat!("mov {v", $modifier, "}, ", $size, " ptr [{s}]"),
                        s = in(reg) src,
                        v = out($class) value,
                        options(nostack, preserves_flags, readonly)
                    );
                }
                value
            }

            /// Stores `value` at `dst` (any alignment).
            ///
            /// # Safety
            /// `dst..dst + size_of::<$ty>()` writable.
            #[inline(always)]
            pub(super) unsafe fn $store(dst: *mut u8, value: $ty) {
                // SAFETY: the caller's contract; the store touches only
                // those bytes.
                unsafe {
                    std::arch::asm!(
                        concat!("mov ", $size, " ptr [{d}], {v", $modifier, "}"),
                        d = in(reg) dst,
                        v = in($class) value,
                        options(nostack, preserves_flags)
                    );
                }
            }
        };
    }

    word_access!(load8, store8, u64, "qword", reg, "");
    word_access!(load4, store4, u32, "dword", reg, ":e");
    word_access!(load2, store2, u16, "word", reg, ":x");
    word_access!(load1, store1, u8, "byte", reg_byte, "");

    /// # Safety
    /// `src..src + 8` readable, `dst..dst + 8` writable.
    #[inline(always)]
    pub(super) unsafe fn move8(src: *const u8, dst: *mut u8) {
        // SAFETY: the caller's contract; the moves touch only those bytes.
        unsafe {
            std::arch::asm!(
                "mov {t}, qword ptr [{s}]",
                "mov qword ptr [{d}], {t}",
                s = in(reg) src,
                d = in(reg) dst,
                t = out(reg) _,
                options(nostack, preserves_flags)
            );
        }
    }

    /// # Safety
    /// `src..src + 4` readable, `dst..dst + 4` writable.
    #[inline(always)]
    pub(super) unsafe fn move4(src: *const u8, dst: *mut u8) {
        // SAFETY: the caller's contract; the moves touch only those bytes.
        unsafe {
            std::arch::asm!(
                "mov {t:e}, dword ptr [{s}]",
                "mov dword ptr [{d}], {t:e}",
                s = in(reg) src,
                d = in(reg) dst,
                t = out(reg) _,
                options(nostack, preserves_flags)
            );
        }
    }

    /// # Safety
    /// `src` readable, `dst` writable.
    #[inline(always)]
    pub(super) unsafe fn move1(src: *const u8, dst: *mut u8) {
        // SAFETY: the caller's contract; the moves touch only that byte.
        unsafe {
            std::arch::asm!(
                "movzx {t:e}, byte ptr [{s}]",
                "mov byte ptr [{d}], {t:l}",
                s = in(reg) src,
                d = in(reg) dst,
                t = out(reg) _,
                options(nostack, preserves_flags)
            );
        }
    }
}

/// A mapping's bytes under loom: a cell per byte, an atomic per 2-byte word.
#[cfg(loom)]
struct Storage {
    bytes: Box<[crate::sync::UnsafeCell<u8>]>,
    words: Box<[loom::sync::atomic::AtomicU16]>,
}

#[cfg(loom)]
impl Storage {
    fn anonymous(len: usize) -> io::Result<Storage> {
        Ok(Storage {
            bytes: (0..len).map(|_| crate::sync::UnsafeCell::new(0)).collect(),
            words: (0..len.div_ceil(2))
                .map(|_| loom::sync::atomic::AtomicU16::new(0))
                .collect(),
        })
    }

    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: loom checks that no write of this cell is concurrent
            // with the read (it fails the model otherwise).
            *b = self.bytes[offset + i].with(|p| unsafe { *p });
        }
    }

    fn write(&self, offset: usize, src: &[u8]) {
        for (i, b) in src.iter().enumerate() {
            // SAFETY: loom checks that no other access of this cell is
            // concurrent with the write.
            self.bytes[offset + i].with_mut(|p| unsafe { *p = *b });
        }
    }

    fn write_prefix(&self, offset: usize, value: u128, len: usize) {
        self.write(offset, &value.to_le_bytes()[..len]);
    }

    fn load_u16(&self, offset: usize, order: Ordering) -> u16 {
        self.words[offset / 2].load(order)
    }

    fn store_u16(&self, offset: usize, value: u16, order: Ordering) {
        self.words[offset / 2].store(value, order);
    }

    // Wider words are bytes under loom, as the copies see them.
    fn load_u32(&self, offset: usize) -> u32 {
        let mut raw = [0u8; 4];
        self.read(offset, &mut raw);
        u32::from_ne_bytes(raw)
    }

    fn store_u32(&self, offset: usize, value: u32) {
        self.write(offset, &value.to_ne_bytes());
    }

    fn load_u64(&self, offset: usize) -> u64 {
        let mut raw = [0u8; 8];
        self.read(offset, &mut raw);
        u64::from_ne_bytes(raw)
    }

    fn store_u64(&self, offset: usize, value: u64) {
        self.write(offset, &value.to_ne_bytes());
    }

    fn is_host_aligned(&self) -> bool {
        true
    }
}

/// Asks for the cache line at `p` to be written soon (`prefetchw`): it
/// arrives owned, in the exclusive state, so a store after reading it waits
/// neither for a second transfer nor for the other side's copy to be
/// invalidated. A hint only: nothing is read or written in the memory
/// model's sense, and any address may be given.
#[inline(always)]
pub(crate) fn prefetch_for_write(p: *const u8) {
    // Processors without `prefetchw` execute it as a no-op: its opcode is
    // in the hint space of every x86-64 processor.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: a hint: it cannot fault or change memory, stack or flags.
    unsafe {
        std::arch::asm!(
            "prefetchw [{p}]",
            p = in(reg) p,
            options(nostack, preserves_flags, readonly)
        )
    };
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = p;
}

/// Asks for the cache line at `line` (for writing, in the exclusive state,
/// when `write`). A hint: any address may be given.
#[cfg(all(target_arch = "x86_64", not(loom)))]
#[inline]
fn prefetch_line(line: *const u8, write: bool) {
    if write {
        prefetch_for_write(line);
    } else {
        crate::pagepool::prefetch(line);
    }
}

/// One region: guest physical addresses `gpa..gpa + len` backed by a mapping.
#[derive(Debug)]
struct Region {
    gpa: u64,
    mapping: Mapping,
}

impl Region {
    fn end(&self) -> u64 {
        self.gpa + self.mapping.len() as u64
    }
}

/// The guest's memory: a table of regions and checked access to them (see
/// the module docs).
#[derive(Debug)]
pub struct GuestMemory {
    regions: Vec<Region>,
}

impl GuestMemory {
    /// A table of `(gpa, mapping)` regions.
    ///
    /// Refused ([`VirtioError::BadRegion`]): no region; a region whose end
    /// overflows the 64-bit address space; two regions that overlap in GPA
    /// space; a region whose GPA is not 8-aligned, or whose host memory is not
    /// (so that a GPA's alignment is its host address's alignment).
    pub fn new(regions: Vec<(u64, Mapping)>) -> Result<GuestMemory, VirtioError> {
        if regions.is_empty() {
            return Err(VirtioError::BadRegion {
                gpa: 0,
                reason: "no regions",
            });
        }
        let mut regions: Vec<Region> = regions
            .into_iter()
            .map(|(gpa, mapping)| Region { gpa, mapping })
            .collect();
        regions.sort_by_key(|r| r.gpa);
        for r in &regions {
            if r.gpa.checked_add(r.mapping.len() as u64).is_none() {
                return Err(VirtioError::BadRegion {
                    gpa: r.gpa,
                    reason: "ends past the 64-bit address space",
                });
            }
            if !r.gpa.is_multiple_of(8) || !r.mapping.storage.is_host_aligned() {
                return Err(VirtioError::BadRegion {
                    gpa: r.gpa,
                    reason: "not 8-aligned",
                });
            }
        }
        for pair in regions.windows(2) {
            if pair[0].end() > pair[1].gpa {
                return Err(VirtioError::BadRegion {
                    gpa: pair[1].gpa,
                    reason: "overlaps another region",
                });
            }
        }
        Ok(GuestMemory { regions })
    }

    /// The regions as `(gpa, len)`, in GPA order.
    pub fn regions(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.regions.iter().map(|r| (r.gpa, r.mapping.len() as u64))
    }

    /// The region holding all of `gpa..gpa + len`, and the offset of `gpa`
    /// in it.
    fn locate(&self, gpa: u64, len: u64) -> Result<(&Region, usize), VirtioError> {
        let outside = VirtioError::OutsideMemory { gpa, len };
        let end = gpa.checked_add(len).ok_or(outside)?;
        // The last region starting at or below `gpa`.
        let i = self.regions.partition_point(|r| r.gpa <= gpa);
        let region = i.checked_sub(1).map(|i| &self.regions[i]).ok_or(outside)?;
        if end > region.end() {
            return Err(outside);
        }
        Ok((region, (gpa - region.gpa) as usize))
    }

    /// Ok when `gpa..gpa + len` lies inside one region.
    pub fn check_range(&self, gpa: u64, len: u64) -> Result<(), VirtioError> {
        self.locate(gpa, len).map(|_| ())
    }

    /// Copies the `dst.len()` bytes at `gpa` into `dst`.
    pub fn read_into(&self, gpa: u64, dst: &mut [u8]) -> Result<(), VirtioError> {
        let (region, offset) = self.locate(gpa, dst.len() as u64)?;
        region.mapping.storage.read(offset, dst);
        Ok(())
    }

    /// Copies `src` to `gpa`.
    pub fn write_from(&self, gpa: u64, src: &[u8]) -> Result<(), VirtioError> {
        let (region, offset) = self.locate(gpa, src.len() as u64)?;
        region.mapping.storage.write(offset, src);
        Ok(())
    }

    /// Writes a short header and the bytes that follow it into one buffer
    /// with one bounds check: the first `prefix_len` (at most 16) bytes of
    /// `prefix`, little-endian, at `gpa`, then `data`. The header is stored
    /// straight from registers: a header built in memory and copied would
    /// be loaded back over the stores that built it, and such a load waits
    /// until every earlier store has reached the cache, the stores into
    /// the other side's buffers among them. Header bytes the buffer holds
    /// already are not written again: a driver that leaves a received
    /// header as it was when it sends the buffer back out (DPDK's
    /// `virtio_user` does) then finds it unchanged, and its line is
    /// never moved for it.
    pub fn write_prefixed(
        &self,
        gpa: u64,
        prefix: u128,
        prefix_len: usize,
        data: &[u8],
    ) -> Result<(), VirtioError> {
        let prefix_len = prefix_len.min(16);
        let len = prefix_len + data.len();
        let (region, offset) = self.locate(gpa, len as u64)?;
        region
            .mapping
            .storage
            .write_prefix(offset, prefix, prefix_len);
        region.mapping.storage.write(offset + prefix_len, data);
        Ok(())
    }

    /// Where the byte at `gpa` is in this process, for a prefetch hint;
    /// `None` outside memory.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    #[inline]
    fn host_address(&self, gpa: u64) -> Option<*const u8> {
        let (region, offset) = self.locate(gpa, 1).ok()?;
        Some(region.mapping.storage.ptr.wrapping_add(offset).cast_const())
    }

    /// Asks the CPU to bring the cache line at `gpa` closer, ahead of a copy
    /// that will need it. A hint only: nothing is read or written in the
    /// memory model's sense, and an address outside memory is ignored.
    #[inline]
    pub fn prefetch(&self, gpa: u64) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if let Some(line) = self.host_address(gpa) {
            prefetch_line(line, false);
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = gpa;
    }

    /// As [`prefetch`](Self::prefetch), for a line about to be written: the
    /// line is asked for in the exclusive state (`prefetchw`), so the store
    /// does not wait for the other side's copy to be invalidated.
    #[inline]
    pub fn prefetch_write(&self, gpa: u64) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if let Some(line) = self.host_address(gpa) {
            prefetch_line(line, true);
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = gpa;
    }

    /// [`prefetch`](Self::prefetch) (or [`prefetch_write`](Self::prefetch_write)
    /// when `write`) of the line at `gpa` and of the one after it, found
    /// with one lookup: the start of a buffer, where a short frame and its
    /// header lie. The second is skipped past the end of the region.
    #[inline]
    pub fn prefetch_two_lines(&self, gpa: u64, write: bool) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if let Ok((region, offset)) = self.locate(gpa, 1) {
            let base = region.mapping.storage.ptr.cast_const();
            prefetch_line(base.wrapping_add(offset), write);
            if offset + 64 < region.mapping.len() {
                prefetch_line(base.wrapping_add(offset + 64), write);
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = (gpa, write);
    }

    /// Reads a `T` (in this machine's byte order) at `gpa`; any alignment.
    pub fn read_obj<T: Pod>(&self, gpa: u64) -> Result<T, VirtioError> {
        let mut value = MaybeUninit::<T>::zeroed();
        // SAFETY: the bytes of `value` are initialised (zeroed) and `u8` has
        // no alignment, so they may be viewed as a byte slice of its size.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(value.as_mut_ptr().cast::<u8>(), size_of::<T>())
        };
        self.read_into(gpa, bytes)?;
        // SAFETY: every byte is initialised, and `T: Pod` makes any bit
        // pattern a valid `T`.
        Ok(unsafe { value.assume_init() })
    }

    /// Writes `value` (in this machine's byte order) at `gpa`; any alignment.
    pub fn write_obj<T: Pod>(&self, gpa: u64, value: T) -> Result<(), VirtioError> {
        // SAFETY: `T: Pod` has no padding, so all of its bytes are
        // initialised; the slice lives no longer than `value`.
        let bytes = unsafe {
            std::slice::from_raw_parts((&value as *const T).cast::<u8>(), size_of::<T>())
        };
        self.write_from(gpa, bytes)
    }

    /// The 2-byte-aligned word at `gpa`, little-endian as virtio's are,
    /// loaded atomically with `order`.
    pub fn load_u16(&self, gpa: u64, order: Ordering) -> Result<u16, VirtioError> {
        let (region, offset) = self.locate_u16(gpa)?;
        Ok(u16::from_le(region.mapping.storage.load_u16(offset, order)))
    }

    /// Stores `value` little-endian at the 2-byte-aligned `gpa`, atomically
    /// with `order`.
    pub fn store_u16(&self, gpa: u64, value: u16, order: Ordering) -> Result<(), VirtioError> {
        let (region, offset) = self.locate_u16(gpa)?;
        region
            .mapping
            .storage
            .store_u16(offset, value.to_le(), order);
        Ok(())
    }

    fn locate_u16(&self, gpa: u64) -> Result<(&Region, usize), VirtioError> {
        self.locate_aligned(gpa, 2)
    }

    /// The region and offset of the `size`-byte, `size`-aligned word at
    /// `gpa`.
    fn locate_aligned(&self, gpa: u64, size: u64) -> Result<(&Region, usize), VirtioError> {
        if !gpa.is_multiple_of(size) {
            return Err(VirtioError::Misaligned { gpa, align: size });
        }
        self.locate(gpa, size)
    }

    /// The 4-byte-aligned little-endian word at `gpa`, loaded as one
    /// relaxed atomic access (ring entries: ordered by the index loads).
    pub fn load_u32(&self, gpa: u64) -> Result<u32, VirtioError> {
        let (region, offset) = self.locate_aligned(gpa, 4)?;
        Ok(u32::from_le(region.mapping.storage.load_u32(offset)))
    }

    /// Stores `value` little-endian at the 4-byte-aligned `gpa`, one
    /// relaxed atomic access.
    pub fn store_u32(&self, gpa: u64, value: u32) -> Result<(), VirtioError> {
        let (region, offset) = self.locate_aligned(gpa, 4)?;
        region.mapping.storage.store_u32(offset, value.to_le());
        Ok(())
    }

    /// The 8-byte-aligned little-endian word at `gpa`, loaded as one
    /// relaxed atomic access.
    pub fn load_u64(&self, gpa: u64) -> Result<u64, VirtioError> {
        let (region, offset) = self.locate_aligned(gpa, 8)?;
        Ok(u64::from_le(region.mapping.storage.load_u64(offset)))
    }

    /// Stores `value` little-endian at the 8-byte-aligned `gpa`, one
    /// relaxed atomic access.
    pub fn store_u64(&self, gpa: u64, value: u64) -> Result<(), VirtioError> {
        let (region, offset) = self.locate_aligned(gpa, 8)?;
        region.mapping.storage.store_u64(offset, value.to_le());
        Ok(())
    }
}

/// A range of guest memory looked up once ([`GuestMemory::area`]): the
/// region holding it and where in it. A queue finds its rings' areas when
/// it starts and then reaches their words through them, checked against
/// the area's bounds alone instead of searching the region table on every
/// access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Area {
    /// Its first guest physical address.
    gpa: u64,
    /// The region's index in the table.
    region: usize,
    /// The area's offset in the region.
    offset: usize,
    /// Its length in bytes.
    len: usize,
}

impl GuestMemory {
    /// The area `gpa..gpa + len`, which must lie inside one region.
    pub fn area(&self, gpa: u64, len: u64) -> Result<Area, VirtioError> {
        let (region, offset) = self.locate(gpa, len)?;
        let index = self
            .regions
            .iter()
            .position(|r| std::ptr::eq(r, region))
            .expect("a region of this table");
        Ok(Area {
            gpa,
            region: index,
            offset,
            len: len as usize,
        })
    }

    /// The region and offset of the `size`-byte word `at` bytes into
    /// `area`: inside it and aligned to its size (a region's host start is
    /// 8-aligned, so the offset's alignment is the address's). An area of
    /// another table is checked against this one's regions all the same.
    #[inline]
    fn area_word(
        &self,
        area: &Area,
        at: u64,
        size: usize,
    ) -> Result<(&Region, usize), VirtioError> {
        let outside = VirtioError::OutsideMemory {
            gpa: at,
            len: size as u64,
        };
        let at = usize::try_from(at).map_err(|_| outside)?;
        if at.checked_add(size).is_none_or(|end| end > area.len) {
            return Err(outside);
        }
        let region = self.regions.get(area.region).ok_or(outside)?;
        let offset = area.offset + at;
        if offset + size > region.mapping.len() {
            return Err(outside);
        }
        if !offset.is_multiple_of(size) {
            return Err(VirtioError::Misaligned {
                gpa: region.gpa + offset as u64,
                align: size as u64,
            });
        }
        Ok((region, offset))
    }

    /// Whether `gpa..gpa + len` lies inside `area`, an area of this table:
    /// [`check_range`](Self::check_range) for a range known to be near
    /// (a buffer of a pool whose area was found once), without a region
    /// search.
    #[inline]
    pub fn area_holds(&self, area: &Area, gpa: u64, len: u64) -> bool {
        let ours = self.regions.get(area.region).is_some_and(|r| {
            r.gpa.checked_add(area.offset as u64) == Some(area.gpa)
                && area.offset + area.len <= r.mapping.len()
        });
        ours && gpa >= area.gpa
            && (gpa - area.gpa)
                .checked_add(len)
                .is_some_and(|end| end <= area.len as u64)
    }

    /// [`prefetch`](Self::prefetch) (or [`prefetch_write`](Self::prefetch_write)
    /// when `write`) of the line `at` bytes into `area`, without a region
    /// search. A hint: ignored outside the area.
    #[inline]
    pub fn area_prefetch(&self, area: &Area, at: u64, write: bool) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if let Ok((region, offset)) = self.area_word(area, at, 1) {
            prefetch_line(
                region.mapping.storage.ptr.wrapping_add(offset).cast_const(),
                write,
            );
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = (area, at, write);
    }

    /// [`load_u16`](Self::load_u16) of the word `at` bytes into `area`.
    #[inline]
    pub fn area_load_u16(&self, area: &Area, at: u64, order: Ordering) -> Result<u16, VirtioError> {
        let (region, offset) = self.area_word(area, at, 2)?;
        Ok(u16::from_le(region.mapping.storage.load_u16(offset, order)))
    }

    /// [`store_u16`](Self::store_u16) of the word `at` bytes into `area`.
    #[inline]
    pub fn area_store_u16(
        &self,
        area: &Area,
        at: u64,
        value: u16,
        order: Ordering,
    ) -> Result<(), VirtioError> {
        let (region, offset) = self.area_word(area, at, 2)?;
        region
            .mapping
            .storage
            .store_u16(offset, value.to_le(), order);
        Ok(())
    }

    /// Stores `value` relaxed at the word `at` bytes into `area` unless it
    /// holds that value already (a relaxed load first): a word the other
    /// side reads and that mostly keeps its value is not written again, so
    /// the other side's cached copy of its line stays valid.
    #[inline]
    pub fn area_update_u16(&self, area: &Area, at: u64, value: u16) -> Result<(), VirtioError> {
        let (region, offset) = self.area_word(area, at, 2)?;
        let storage = &region.mapping.storage;
        let value = value.to_le();
        if storage.load_u16(offset, Ordering::Relaxed) != value {
            storage.store_u16(offset, value, Ordering::Relaxed);
        }
        Ok(())
    }

    /// [`load_u32`](Self::load_u32) of the word `at` bytes into `area`.
    #[inline]
    pub fn area_load_u32(&self, area: &Area, at: u64) -> Result<u32, VirtioError> {
        let (region, offset) = self.area_word(area, at, 4)?;
        Ok(u32::from_le(region.mapping.storage.load_u32(offset)))
    }

    /// [`store_u32`](Self::store_u32) of the word `at` bytes into `area`.
    #[inline]
    pub fn area_store_u32(&self, area: &Area, at: u64, value: u32) -> Result<(), VirtioError> {
        let (region, offset) = self.area_word(area, at, 4)?;
        region.mapping.storage.store_u32(offset, value.to_le());
        Ok(())
    }

    /// [`load_u64`](Self::load_u64) of the word `at` bytes into `area`.
    #[inline]
    pub fn area_load_u64(&self, area: &Area, at: u64) -> Result<u64, VirtioError> {
        let (region, offset) = self.area_word(area, at, 8)?;
        Ok(u64::from_le(region.mapping.storage.load_u64(offset)))
    }

    /// [`store_u64`](Self::store_u64) of the word `at` bytes into `area`.
    #[inline]
    pub fn area_store_u64(&self, area: &Area, at: u64, value: u64) -> Result<(), VirtioError> {
        let (region, offset) = self.area_word(area, at, 8)?;
        region.mapping.storage.store_u64(offset, value.to_le());
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn two_regions() -> GuestMemory {
        GuestMemory::new(vec![
            (0x2000, Mapping::anonymous(0x1000).unwrap()),
            (0x1000, Mapping::anonymous(0x1000).unwrap()),
        ])
        .unwrap()
    }

    #[test]
    fn translation_stays_inside_one_region() {
        let mem = two_regions();
        assert_eq!(
            mem.regions().collect::<Vec<_>>(),
            [(0x1000, 0x1000), (0x2000, 0x1000)]
        );
        mem.write_from(0x1ff0, &[7; 16]).unwrap();
        mem.write_from(0x2000, &[9; 16]).unwrap();
        // Adjacent regions, but one access may not cross from one to the other.
        let mut buf = [0u8; 32];
        assert_eq!(
            mem.read_into(0x1ff0, &mut buf),
            Err(VirtioError::OutsideMemory {
                gpa: 0x1ff0,
                len: 32
            })
        );
        assert_eq!(buf, [0; 32], "nothing read on a refused access");
        mem.read_into(0x1ff0, &mut buf[..16]).unwrap();
        assert_eq!(buf[..16], [7; 16]);
        // Below, between and above the regions, and a wrapping range.
        for (gpa, len) in [(0, 1), (0xfff, 2), (0x3000, 1), (u64::MAX, 2)] {
            assert!(mem.check_range(gpa, len).is_err(), "{gpa:#x}+{len}");
        }
        assert!(mem.check_range(0x2fff, 1).is_ok());
    }

    #[test]
    fn copies_of_every_alignment_and_length_round_trip() {
        let mem = two_regions();
        let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for start in 0..9u64 {
            for len in [0usize, 1, 7, 8, 9, 17, 64] {
                let gpa = 0x1100 + start;
                mem.write_from(gpa, &[0; 80]).unwrap();
                mem.write_from(gpa, &data[..len]).unwrap();
                let mut back = vec![0xffu8; len + 2];
                mem.read_into(gpa, &mut back).unwrap();
                assert_eq!(back[..len], data[..len], "at +{start}, {len} bytes");
                assert_eq!(back[len..], [0, 0], "nothing written past the end");
            }
        }
    }

    #[test]
    fn a_prefixed_write_lands_back_to_back_inside_one_region_or_not_at_all() {
        let mem = two_regions();
        let prefix = u128::from_le_bytes(*b"0123456789abcdef");
        for prefix_len in 0..=16 {
            for start in 0..3u64 {
                let gpa = 0x1100 + start;
                mem.write_from(0x1100, &[0xee; 40]).unwrap();
                mem.write_prefixed(gpa, prefix, prefix_len, b"frame")
                    .unwrap();
                let mut back = [0u8; 40];
                mem.read_into(0x1100, &mut back).unwrap();
                let mut want = [0xeeu8; 40];
                let at = start as usize;
                want[at..at + prefix_len].copy_from_slice(&b"0123456789abcdef"[..prefix_len]);
                want[at + prefix_len..at + prefix_len + 5].copy_from_slice(b"frame");
                assert_eq!(back, want, "prefix of {prefix_len} at +{start}");
                // Written again over itself with one byte changed: only that
                // piece differs, and the whole prefix reads back again.
                if prefix_len > 0 {
                    let changed = gpa + (prefix_len as u64 - 1) / 2;
                    mem.write_from(changed, &[0x55]).unwrap();
                    mem.write_prefixed(gpa, prefix, prefix_len, b"frame")
                        .unwrap();
                    mem.read_into(0x1100, &mut back).unwrap();
                    assert_eq!(back, want, "rewritten, {prefix_len} at +{start}");
                }
            }
        }
        // Each piece fits, the whole does not: nothing is written.
        mem.write_from(0x1ff0, &[0xee; 16]).unwrap();
        assert_eq!(
            mem.write_prefixed(0x1ff0, prefix, 12, &[2; 8]),
            Err(VirtioError::OutsideMemory {
                gpa: 0x1ff0,
                len: 20
            })
        );
        let mut tail = [0u8; 16];
        mem.read_into(0x1ff0, &mut tail).unwrap();
        assert_eq!(tail, [0xee; 16]);
    }

    #[test]
    fn area_words_are_the_table_words_and_stay_inside_the_area() {
        let mem = two_regions();
        let (gpa, _) = mem.regions().nth(1).unwrap();
        let area = mem.area(gpa + 16, 32).unwrap();
        mem.area_store_u64(&area, 8, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(mem.load_u64(gpa + 24).unwrap(), 0x0102_0304_0506_0708);
        mem.area_store_u16(&area, 30, 0xbeef, Ordering::Release)
            .unwrap();
        assert_eq!(mem.load_u16(gpa + 46, Ordering::Acquire).unwrap(), 0xbeef);
        // An update that changes the word stores it; one that does not
        // leaves it as it is.
        mem.area_update_u16(&area, 28, 0x1234).unwrap();
        assert_eq!(mem.load_u16(gpa + 44, Ordering::Relaxed).unwrap(), 0x1234);
        mem.area_update_u16(&area, 28, 0x1234).unwrap();
        assert_eq!(mem.load_u16(gpa + 44, Ordering::Relaxed).unwrap(), 0x1234);
        assert!(mem.area_update_u16(&area, 32, 0).is_err());
        mem.store_u32(gpa + 20, 77).unwrap();
        assert_eq!(mem.area_load_u32(&area, 4).unwrap(), 77);
        mem.area_store_u32(&area, 12, 0x1122_3344).unwrap();
        assert_eq!(mem.load_u32(gpa + 28).unwrap(), 0x1122_3344);
        mem.store_u64(gpa + 32, 0x0a0b_0c0d_0e0f_1011).unwrap();
        assert_eq!(mem.area_load_u64(&area, 16).unwrap(), 0x0a0b_0c0d_0e0f_1011);
        assert_eq!(
            mem.area_load_u16(&area, 30, Ordering::Relaxed).unwrap(),
            0xbeef
        );
        // Past the area's end, though inside the region: refused.
        assert!(mem.area_load_u16(&area, 32, Ordering::Relaxed).is_err());
        assert!(mem.area_store_u64(&area, 28, 0).is_err());
        assert!(mem.area_load_u64(&area, 32).is_err());
        assert!(mem.area_store_u32(&area, 32, 0).is_err());
        assert!(mem.area_load_u32(&area, u64::MAX - 1).is_err());
        // Misaligned: refused.
        assert!(matches!(
            mem.area_load_u32(&area, 2),
            Err(VirtioError::Misaligned { align: 4, .. })
        ));
        assert!(matches!(
            mem.area_load_u64(&area, 4),
            Err(VirtioError::Misaligned { align: 8, .. })
        ));
        assert!(matches!(
            mem.area_store_u32(&area, 2, 0),
            Err(VirtioError::Misaligned { align: 4, .. })
        ));
        // Ranges inside the area, and not.
        assert!(mem.area_holds(&area, gpa + 16, 32));
        assert!(mem.area_holds(&area, gpa + 40, 8));
        assert!(!mem.area_holds(&area, gpa + 40, 9));
        assert!(!mem.area_holds(&area, gpa + 8, 8));
        assert!(!mem.area_holds(&area, u64::MAX, 2));
        // An area of another table is not this one's.
        let other = GuestMemory::new(vec![(0x8000, Mapping::anonymous(0x1000).unwrap())]).unwrap();
        let theirs = other.area(0x8000, 0x1000).unwrap();
        assert!(!mem.area_holds(&theirs, 0x8000, 16));
        // An area crossing a region's end is not one.
        let (first, len) = mem.regions().next().unwrap();
        assert!(mem.area(first + len - 8, 16).is_err());
        assert!(mem.area(first + len - 8, 8).is_ok());
    }

    #[test]
    fn prefetch_hints_anywhere_change_nothing() {
        let mem = two_regions();
        let (gpa, len) = mem.regions().next().unwrap();
        mem.write_from(gpa, &[7; 256]).unwrap();
        for at in [gpa, gpa + 100, gpa + len - 1, gpa + len - 64, 0, u64::MAX] {
            for write in [false, true] {
                mem.prefetch_two_lines(at, write);
            }
            mem.prefetch(at);
            mem.prefetch_write(at);
        }
        let area = mem.area(gpa + 64, 128).unwrap();
        for at in [0, 127, 128, u64::MAX] {
            for write in [false, true] {
                mem.area_prefetch(&area, at, write);
            }
        }
        assert_eq!(bytes_at(&mem, gpa, 256), vec![7; 256]);
    }

    fn bytes_at(mem: &GuestMemory, gpa: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        mem.read_into(gpa, &mut out).unwrap();
        out
    }

    #[test]
    fn objects_and_index_words() {
        let mem = two_regions();
        mem.write_obj(0x1003, 0x1122_3344_5566_7788u64).unwrap();
        assert_eq!(mem.read_obj::<u64>(0x1003).unwrap(), 0x1122_3344_5566_7788);
        mem.store_u16(0x1100, 0xabcd, Ordering::Release).unwrap();
        let mut raw = [0u8; 2];
        mem.read_into(0x1100, &mut raw).unwrap();
        assert_eq!(raw, [0xcd, 0xab], "little-endian in memory");
        assert_eq!(mem.load_u16(0x1100, Ordering::Acquire).unwrap(), 0xabcd);
        assert_eq!(
            mem.load_u16(0x1101, Ordering::Acquire),
            Err(VirtioError::Misaligned {
                gpa: 0x1101,
                align: 2
            })
        );
        assert!(mem.store_u16(0x2fff + 1, 1, Ordering::Relaxed).is_err());
    }

    #[test]
    fn bad_region_tables_are_refused() {
        assert!(GuestMemory::new(vec![]).is_err());
        let overlap = GuestMemory::new(vec![
            (0x1000, Mapping::anonymous(0x1000).unwrap()),
            (0x1800, Mapping::anonymous(0x1000).unwrap()),
        ]);
        assert!(matches!(
            overlap,
            Err(VirtioError::BadRegion { gpa: 0x1800, .. })
        ));
        let wraps = GuestMemory::new(vec![(u64::MAX - 7, Mapping::anonymous(16).unwrap())]);
        assert!(matches!(wraps, Err(VirtioError::BadRegion { .. })));
        let odd = GuestMemory::new(vec![(0x1001, Mapping::anonymous(16).unwrap())]);
        assert!(matches!(odd, Err(VirtioError::BadRegion { .. })));
        assert!(Mapping::anonymous(0).is_err());
    }

    #[test]
    fn borrowed_memory_is_read_and_written_in_place() {
        let mut backing = vec![0u64; 8];
        // SAFETY: `backing` outlives `mem` (dropped at the end of the test,
        // after it) and is not touched while `mem` lives.
        let mapping = unsafe { Mapping::from_raw(backing.as_mut_ptr().cast(), 64) };
        let mem = GuestMemory::new(vec![(0, mapping)]).unwrap();
        mem.write_obj(8, 0x0102_0304_0506_0708u64).unwrap();
        drop(mem);
        assert_eq!(backing[1], 0x0102_0304_0506_0708);
    }
}
