//! Copying short runs of small values (pointers, mostly) without calling
//! `memcpy`.
//!
//! Rings and mempool caches move a handful of pointers per operation. A call
//! into `memcpy` costs about as much as the rest of a bulk-8 ring enqueue or a
//! bulk-4 cache put, so runs of up to one cache line are copied with an inline
//! loop of element-sized moves, and longer runs with `memcpy`.
//!
//! Element-sized moves rather than wider ones, measured both ways: a fixed
//! 64-byte copy (16-byte moves) made two-core SP/SC bulk 8 slower (16 → 20
//! cycles per element), and a 16-byte load that spans two recent 8-byte stores
//! cannot be forwarded from the store buffer (mempool bulk-4 get+put 3.2 → 3.7
//! cycles per element).

/// Copies `n` values from `src` to `dst`.
///
/// # Safety
/// As `ptr::copy_nonoverlapping::<T>(src, dst, n)`.
#[inline(always)]
pub(crate) unsafe fn copy_run<T: Copy>(src: *const T, dst: *mut T, n: usize) {
    if n * std::mem::size_of::<T>() <= 64 {
        for i in 0..n {
            // SAFETY: `i < n`, within both ranges (the caller's contract).
            unsafe { dst.add(i).write(src.add(i).read()) };
        }
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    }
}

/// Copies `src` into `dst` (callers pass equal lengths; only the shorter
/// length is copied otherwise).
#[inline(always)]
pub(crate) fn copy_slice<T: Copy>(dst: &mut [T], src: &[T]) {
    debug_assert_eq!(dst.len(), src.len());
    let n = dst.len().min(src.len());
    // SAFETY: both slices hold at least `n` values and a `&mut` cannot
    // overlap a `&`.
    unsafe { copy_run(src.as_ptr(), dst.as_mut_ptr(), n) };
}
