//! Copying short runs of small values (pointers, mostly) without calling
//! `memcpy`.
//!
//! Rings and mempool caches move a handful of pointers per operation. A call
//! into `memcpy` costs about as much as the rest of a bulk-8 ring enqueue or a
//! bulk-4 cache put, so runs of up to one cache line are copied inline, and
//! longer runs with `memcpy`.
//!
//! Up to eight 8-byte values (the pointers of a ring or a cache) move in
//! 16-byte pieces chosen by size class: two pieces for two to four values,
//! four for five to eight, overlapping when the count is odd. A loop of
//! 8-byte moves over a run-time count compiles to one compare and branch per
//! value, which made a cache get+put of 8 cost more than DPDK's; the pieces
//! cost one branch per run. Puts and gets of the same bulk size store and
//! load the same 16-byte pieces, so a get of what a put just stored is
//! forwarded from the store buffer. Other sizes of values keep a loop of
//! element-sized moves up to 64 bytes.

/// Copies `n` values from `src` to `dst`.
///
/// # Safety
/// As `ptr::copy_nonoverlapping::<T>(src, dst, n)`.
#[inline(always)]
pub(crate) unsafe fn copy_run<T: Copy>(src: *const T, dst: *mut T, n: usize) {
    if std::mem::size_of::<T>() == 8 && n <= 8 {
        // SAFETY: forwarded.
        unsafe { copy_words_upto_8(src, dst, n) };
    } else if n * std::mem::size_of::<T>() <= 64 {
        for i in 0..n {
            // SAFETY: `i < n`, within both ranges (the caller's contract).
            unsafe { dst.add(i).write(src.add(i).read()) };
        }
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    }
}

/// [`copy_run`] for at most eight 8-byte values: in 16-byte moves, two for
/// up to four values and four for up to eight, the last ones overlapping
/// the first ones when `n` is odd (they write the same values twice), so a
/// run costs one branch on its size class rather than one per value.
///
/// # Safety
/// As [`copy_run`]; `size_of::<T>() == 8` and `n <= 8`.
#[inline(always)]
unsafe fn copy_words_upto_8<T: Copy>(src: *const T, dst: *mut T, n: usize) {
    debug_assert!(std::mem::size_of::<T>() == 8 && n <= 8);
    // One 16-byte move of the two values at `i` (a copy of constant size,
    // which the compiler emits as one vector load and store).
    let pair = |i: usize| {
        debug_assert!(i + 2 <= n);
        // SAFETY: every call below passes `i + 2 <= n`, so both runs of two
        // lie within the caller's ranges of `n`.
        unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), 2) }
    };
    match n {
        0 => {}
        // SAFETY: one value, within both ranges.
        1 => unsafe { dst.write(src.read()) },
        2..=4 => {
            pair(0);
            pair(n - 2);
        }
        _ => {
            pair(0);
            pair(2);
            pair(n - 4);
            pair(n - 2);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every count up to past one cache line, into the middle of a guarded
    /// buffer: the run arrives whole and in order, nothing around it moves.
    #[test]
    fn copy_run_copies_exactly_the_run() {
        const GUARD: u64 = 0xdead_beef_dead_beef;
        for n in 0..=40usize {
            let src: Vec<u64> = (1..=n as u64).collect();
            let mut dst = vec![GUARD; n + 6];
            // SAFETY: `src` holds `n`, `dst[3..]` holds `n + 3`; distinct
            // allocations.
            unsafe { copy_run(src.as_ptr(), dst.as_mut_ptr().add(3), n) };
            assert_eq!(&dst[3..3 + n], &src[..], "n = {n}");
            assert!(dst[..3].iter().all(|&v| v == GUARD), "n = {n}: before");
            assert!(dst[3 + n..].iter().all(|&v| v == GUARD), "n = {n}: after");
        }
    }

    /// Values of other sizes take the element loop, with the same result.
    #[test]
    fn copy_slice_copies_values_of_any_size() {
        for n in 0..=40usize {
            let src: Vec<u32> = (0..n as u32).map(|v| v * 7 + 1).collect();
            let mut dst = vec![0u32; n];
            copy_slice(&mut dst, &src);
            assert_eq!(dst, src);
            let src: Vec<[u8; 3]> = (0..n as u8).map(|v| [v, v ^ 1, v ^ 2]).collect();
            let mut dst = vec![[0u8; 3]; n];
            copy_slice(&mut dst, &src);
            assert_eq!(dst, src);
        }
    }
}
