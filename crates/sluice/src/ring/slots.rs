//! The slot array, aligned to 128 bytes.
//!
//! A bulk of 8 pointers is exactly one cache line. If the array started in the
//! middle of a line, every such batch would straddle two lines, and the
//! consumer reading batch `k` would share a line with the producer writing
//! batch `k + 1` — a line bouncing between the cores on every operation. (The
//! two-core bulk-8 benchmark ran 3× slower with the allocator's 16-byte
//! alignment.) 128 bytes also keeps the adjacent-line prefetcher's pair of
//! lines within one run of slots.
//!
//! Under loom the slots stay a `Box<[UnsafeCell<_>]>`: loom's cells are not
//! layout-compatible with the values they hold.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use crate::sync::UnsafeCell;

/// Alignment of the slot array.
const SLOT_ALIGN: usize = 128;

/// `len` uninitialised cells of `T` in one 128-byte-aligned allocation. Only
/// allocates and frees: whether a cell holds a value is the ring's business,
/// and the ring drops live values before this is dropped.
pub(crate) struct Slots<T> {
    ptr: NonNull<UnsafeCell<MaybeUninit<T>>>,
    len: usize,
}

impl<T> Slots<T> {
    fn layout(len: usize) -> Layout {
        Layout::array::<UnsafeCell<MaybeUninit<T>>>(len)
            .and_then(|l| l.align_to(SLOT_ALIGN))
            .expect("ring slot array larger than the address space")
    }

    /// Allocates `len` cells.
    pub(crate) fn new(len: usize) -> Self {
        let layout = Self::layout(len);
        let ptr = if layout.size() == 0 {
            // Zero-sized values: no memory, any aligned non-null pointer will do.
            NonNull::<u8>::dangling().cast()
        } else {
            // SAFETY: the layout has a non-zero size.
            let p = unsafe { alloc(layout) };
            NonNull::new(p.cast()).unwrap_or_else(|| handle_alloc_error(layout))
        };
        Slots { ptr, len }
    }
}

impl<T> std::ops::Deref for Slots<T> {
    type Target = [UnsafeCell<MaybeUninit<T>>];

    #[inline(always)]
    fn deref(&self) -> &Self::Target {
        // SAFETY: `ptr` points to `len` cells allocated in `new` (or is a
        // dangling pointer for zero-sized cells); `MaybeUninit` needs no
        // initialisation, and `UnsafeCell` allows shared access to them.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for Slots<T> {
    fn drop(&mut self) {
        let layout = Self::layout(self.len);
        if layout.size() != 0 {
            // SAFETY: allocated in `new` with this layout; no cell is used after
            // the ring (the only owner) is dropped.
            unsafe { dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}
