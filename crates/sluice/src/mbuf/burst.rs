//! `Burst`: a fixed-capacity array of owned mbufs, the unit of every I/O call.
//!
//! `rx_burst` appends to a burst; `tx_burst` takes what the queue accepted
//! from its front and leaves the rest in place. Whatever is still in a burst
//! when it is cleared or dropped is freed — with the puts batched per pool, as
//! `rte_pktmbuf_free_bulk` does — so no mbuf is ever lost.

use std::mem::MaybeUninit;

use super::Mbuf;
use super::handle::{prefree, put_bulk_to_pool};
use crate::mempool::Elem;

/// Default burst size.
pub const DEFAULT_BURST: usize = 32;

/// A fixed-capacity array of owned mbufs (default capacity 32).
///
/// ```
/// use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
///
/// let pool = MbufPool::new(MbufPoolConfig { size: 127, cache_size: 0, ..Default::default() }).unwrap();
/// let mut burst: Burst = Burst::new();
/// pool.alloc_bulk(&mut burst, 4).unwrap();
/// assert_eq!(burst.len(), 4);
/// // A "driver" accepted 3 from the front:
/// let sent: Vec<_> = burst.drain_front(3).collect();
/// assert_eq!((sent.len(), burst.len()), (3, 1));
/// drop(sent);
/// drop(burst);
/// assert!(pool.is_full());
/// ```
pub struct Burst<const N: usize = DEFAULT_BURST> {
    /// `slots[..len]` hold owned mbufs; the rest are uninitialised.
    len: usize,
    slots: [MaybeUninit<Mbuf>; N],
}

impl<const N: usize> Default for Burst<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Burst<N> {
    /// An empty burst.
    #[inline]
    pub const fn new() -> Self {
        Burst {
            len: 0,
            slots: [const { MaybeUninit::uninit() }; N],
        }
    }

    /// Mbufs held.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity, `N`.
    #[inline(always)]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Room left.
    #[inline(always)]
    pub fn free(&self) -> usize {
        N - self.len
    }

    /// True when full.
    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    /// Appends `m`, or gives it back when full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == N {
            return Err(m);
        }
        self.slots[self.len].write(m);
        self.len += 1;
        Ok(())
    }

    /// Removes the last mbuf.
    #[inline]
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: slot `len` held an owned mbuf, now moved out and no longer
        // counted.
        Some(unsafe { self.slots[self.len].assume_init_read() })
    }

    /// The mbufs.
    #[inline(always)]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: `slots[..len]` are initialised; `MaybeUninit<Mbuf>` has
        // `Mbuf`'s layout.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr().cast(), self.len) }
    }

    /// The mbufs, mutably.
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in `as_slice`.
        unsafe { std::slice::from_raw_parts_mut(self.slots.as_mut_ptr().cast(), self.len) }
    }

    /// Iterates over the mbufs.
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, Mbuf> {
        self.as_slice().iter()
    }

    /// Iterates mutably over the mbufs.
    #[inline]
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Mbuf> {
        self.as_mut_slice().iter_mut()
    }

    /// Frees the mbufs past `len` (batched per pool).
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let old = self.len;
        // Shrink first: if a free callback panics, nothing is freed twice.
        self.len = len;
        // SAFETY: `slots[len..old]` held owned mbufs, no longer counted.
        unsafe { free_bulk(self.slots[len..old].as_ptr().cast(), old - len) };
    }

    /// Frees every mbuf.
    #[inline]
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Keeps the mbufs for which `keep` is true, in order; frees the others.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut Mbuf) -> bool) {
        let old = self.len;
        self.len = 0;
        for i in 0..old {
            // SAFETY: slot `i` holds an owned mbuf (indices >= the new `len`
            // are read at most once each, in order).
            let mut m = unsafe { self.slots[i].assume_init_read() };
            if keep(&mut m) {
                self.slots[self.len].write(m);
                self.len += 1;
            }
        }
    }

    /// Moves the first `n` mbufs (at most `len`) out, in order; when the
    /// iterator is dropped, those it did not yield are freed and the rest of
    /// the burst moves to the front.
    pub fn drain_front(&mut self, n: usize) -> DrainFront<'_, N> {
        let n = n.min(self.len);
        DrainFront {
            burst: self,
            next: 0,
            end: n,
        }
    }

    /// Appends the mbufs of `other` that fit; the rest stay in `other`.
    /// Returns how many moved.
    pub fn append_from<const M: usize>(&mut self, other: &mut Burst<M>) -> usize {
        let k = self.free().min(other.len);
        for m in other.drain_front(k) {
            // Room was checked above.
            let _ = self.push(m);
        }
        k
    }
}

/// Gives up `n` mbufs at `first`, batching the puts of consecutive plain
/// buffers of one pool.
///
/// # Safety
/// `first..first + n` are owned mbufs that the caller no longer uses.
unsafe fn free_bulk(first: *const Mbuf, n: usize) {
    let mut batch = [Elem::DANGLING; DEFAULT_BURST];
    let mut k = 0;
    let mut pool = std::ptr::null();
    for i in 0..n {
        // SAFETY: owned by the caller, handed over here, read once.
        let m = unsafe { first.add(i).read() };
        let p = m.into_raw();
        // SAFETY: we own this reference and give it up.
        let Some(h) = (unsafe { prefree(p) }) else {
            continue;
        };
        // SAFETY: a live header (its last reference is ours).
        let hp = unsafe { h.as_ref() }.pool;
        if hp != pool || k == batch.len() {
            // SAFETY: the batch holds plain, unreferenced buffers of `pool`.
            unsafe { put_bulk_to_pool(pool, &batch[..k]) };
            pool = hp;
            k = 0;
        }
        batch[k] = Elem::from_ptr(h.cast::<u8>());
        k += 1;
    }
    // SAFETY: as above.
    unsafe { put_bulk_to_pool(pool, &batch[..k]) };
}

impl<const N: usize> Drop for Burst<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<const N: usize> std::fmt::Debug for Burst<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Burst")
            .field("len", &self.len)
            .field("capacity", &N)
            .finish()
    }
}

impl<const N: usize> std::ops::Index<usize> for Burst<N> {
    type Output = Mbuf;
    fn index(&self, i: usize) -> &Mbuf {
        &self.as_slice()[i]
    }
}

impl<const N: usize> std::ops::IndexMut<usize> for Burst<N> {
    fn index_mut(&mut self, i: usize) -> &mut Mbuf {
        &mut self.as_mut_slice()[i]
    }
}

impl<'a, const N: usize> IntoIterator for &'a Burst<N> {
    type Item = &'a Mbuf;
    type IntoIter = std::slice::Iter<'a, Mbuf>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator from [`Burst::drain_front`].
pub struct DrainFront<'a, const N: usize> {
    burst: &'a mut Burst<N>,
    /// Next slot to yield.
    next: usize,
    /// End of the drained range.
    end: usize,
}

impl<const N: usize> Iterator for DrainFront<'_, N> {
    type Item = Mbuf;

    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        if self.next == self.end {
            return None;
        }
        let i = self.next;
        self.next += 1;
        // SAFETY: slot `i` is in the drained range and read once; `Drop`
        // accounts for it as moved out.
        Some(unsafe { self.burst.slots[i].assume_init_read() })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.next;
        (left, Some(left))
    }
}

impl<const N: usize> ExactSizeIterator for DrainFront<'_, N> {}

impl<const N: usize> Drop for DrainFront<'_, N> {
    fn drop(&mut self) {
        let b = &mut *self.burst;
        let old = b.len;
        // Nothing is counted as owned while we shuffle.
        b.len = 0;
        // SAFETY: `slots[next..end]` are drained but not yielded: free them.
        unsafe {
            free_bulk(
                b.slots[self.next..self.end].as_ptr().cast(),
                self.end - self.next,
            )
        };
        // Move the undrained tail to the front.
        let rest = old - self.end;
        // SAFETY: `slots[end..old]` are owned; `copy` handles the overlap.
        unsafe {
            std::ptr::copy(b.slots.as_ptr().add(self.end), b.slots.as_mut_ptr(), rest);
        }
        b.len = rest;
    }
}
