//! `Burst`: a fixed-capacity array of owned mbufs, the unit of every I/O call.
//!
//! `rx_burst` appends to a burst; `tx_burst` takes what the queue accepted
//! from its front and leaves the rest in place. Whatever is still in a burst
//! when it is cleared or dropped is freed — with the puts batched per pool, as
//! `rte_pktmbuf_free_bulk` does — so no mbuf is ever lost.

use super::handle::{prefree_into, put_bulk_to_pool};
use super::layout::EXT_PAGE_FRAG;
use super::{Mbuf, MbufHeader};
use crate::mempool::Elem;
use crate::pagepool::FragRun;

/// Default burst size.
pub const DEFAULT_BURST: usize = 32;

/// A fixed-capacity array of owned mbufs (default capacity 32).
///
/// ```
/// use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
///
/// let pool = MbufPool::new(MbufPoolConfig { size: 127, cache_size: 0, ..Default::default() }).unwrap();
/// let mut burst: Burst = Burst::new();
/// assert_eq!((burst.len(), burst.capacity()), (0, 32));
///
/// // Six buffers in one bulk get, straight into the burst's slots.
/// pool.alloc_bulk(&mut burst, 6).unwrap();
/// assert_eq!(burst.len(), 6);
/// for (i, m) in burst.iter_mut().enumerate() {
///     m.append(60).unwrap().fill(i as u8);
/// }
/// assert!(burst.iter().all(|m| m.pkt_len() == 60));
///
/// // All or none: more than the burst has room for is refused.
/// assert!(pool.alloc_bulk(&mut burst, 27).is_err());
/// assert_eq!(burst.len(), 6);
///
/// // Keep some, free the rest where they stand.
/// burst.retain(|m| m.data()[0] % 2 == 0);
/// assert_eq!(burst.iter().map(|m| m.data()[0]).collect::<Vec<_>>(), [0, 2, 4]);
/// assert_eq!(pool.available(), 127 - 3);
///
/// // A "driver" accepted 2 from the front:
/// let sent: Vec<_> = burst.drain_front(2).collect();
/// assert_eq!((sent.len(), burst.len()), (2, 1));
/// drop(sent);
///
/// // Dropping the burst frees what is still in it.
/// drop(burst);
/// assert!(pool.is_full());
/// ```
///
/// Every method lives on [`BurstSlice`], which a `Burst<N>` derefs to (as an
/// array derefs to a slice): I/O calls take `&mut BurstSlice`, so one queue
/// trait serves bursts of any capacity.
#[repr(C)]
pub struct Burst<const N: usize = DEFAULT_BURST> {
    /// `slots[..len]` hold owned mbufs.
    len: usize,
    /// Buffer addresses. Always initialised (to a dangling placeholder when a
    /// burst is made), so a pool can fill them directly and a bulk free can
    /// reuse them as its scratch space; only `len` says which are owned. An
    /// `Mbuf` is a transparent wrapper of the same pointer, so the owned part
    /// is viewed as `[Mbuf]`.
    slots: [Elem; N],
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
            slots: [Elem::DANGLING; N],
        }
    }
}

/// A burst of any capacity, as `[T]` is an array of any length: what a
/// [`Burst<N>`] derefs to, and what every I/O call takes. It exists only
/// behind a reference.
#[repr(C)]
pub struct BurstSlice {
    /// `slots[..len]` hold owned mbufs.
    len: usize,
    /// As in [`Burst`]: always initialised, only `len` says which are owned.
    slots: [Elem],
}

impl<const N: usize> std::ops::Deref for Burst<N> {
    type Target = BurstSlice;
    #[inline(always)]
    fn deref(&self) -> &BurstSlice {
        let p = std::ptr::slice_from_raw_parts(std::ptr::from_ref(self).cast::<Elem>(), N);
        // `Burst<N>` and `BurstSlice` are both `repr(C)` with the same fields,
        // the slot array last; a slice-tailed DST's metadata is its tail's
        // length.
        // SAFETY: so the fat pointer (burst address, `N`) describes exactly
        // the burst, borrowed for as long as `self`.
        unsafe { &*(p as *const BurstSlice) }
    }
}

impl<const N: usize> std::ops::DerefMut for Burst<N> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut BurstSlice {
        let p = std::ptr::slice_from_raw_parts_mut(std::ptr::from_mut(self).cast::<Elem>(), N);
        // SAFETY: as in `deref`; the `&mut self` borrow is exclusive.
        unsafe { &mut *(p as *mut BurstSlice) }
    }
}

impl BurstSlice {
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

    /// Capacity (`N` of the `Burst<N>` viewed).
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Room left.
    #[inline(always)]
    pub fn free(&self) -> usize {
        self.slots.len() - self.len
    }

    /// True when full.
    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// Appends `m`, or gives it back when full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == self.slots.len() {
            return Err(m);
        }
        self.slots[self.len] = Elem::from_ptr(m.into_raw().cast());
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
        Some(unsafe { take(&self.slots, self.len) })
    }

    /// The mbufs.
    #[inline(always)]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: `slots[..len]` hold owned mbufs, and `Mbuf` is a transparent
        // wrapper of the same pointer an `Elem` wraps.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr().cast::<Mbuf>(), self.len) }
    }

    /// The mbufs, mutably.
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in `as_slice`.
        unsafe { std::slice::from_raw_parts_mut(self.slots.as_mut_ptr().cast::<Mbuf>(), self.len) }
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
        unsafe { free_bulk(&mut self.slots[len..old]) };
    }

    /// Frees every mbuf.
    #[inline]
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Keeps the mbufs for which `keep` is true, in order; frees the others.
    ///
    /// If `keep` panics, the burst keeps the mbufs already kept, the one
    /// being judged and every one after it (in order), as `Vec::retain`
    /// does: the mbufs it had already rejected are freed, and nothing is lost
    /// or freed twice.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut Mbuf) -> bool) {
        /// While `retain` runs, `slots[..kept]` are kept, `slots[next..old]`
        /// are not judged yet, and the burst counts none of them; this
        /// moves the unjudged ones behind the kept ones and counts both,
        /// at the end or during an unwind.
        struct Compact<'b> {
            burst: &'b mut BurstSlice,
            kept: usize,
            next: usize,
            old: usize,
        }
        impl Drop for Compact<'_> {
            fn drop(&mut self) {
                let (kept, next, old) = (self.kept, self.next, self.old);
                if kept != next {
                    self.burst.slots.copy_within(next..old, kept);
                }
                self.burst.len = kept + (old - next);
            }
        }
        let old = self.len;
        // Counted by `Compact` from here on: a forgotten or unwinding
        // `retain` never leaves an mbuf counted twice.
        self.len = 0;
        let mut c = Compact {
            burst: self,
            kept: 0,
            next: 0,
            old,
        };
        while c.next < c.old {
            let i = c.next;
            // Judged in place: if `keep` panics, the mbuf is still in its
            // slot, not judged, and `Compact` keeps it.
            let slot = &mut c.burst.slots[i];
            // The reference ends before the slot is touched again.
            // SAFETY: slot `i` (`i < old`, not judged yet) holds an owned
            // mbuf; `Mbuf` is a transparent wrapper of `Elem`'s pointer.
            let m = unsafe { &mut *std::ptr::from_mut(slot).cast::<Mbuf>() };
            let k = keep(m);
            c.next = i + 1;
            if k {
                c.burst.slots[c.kept] = c.burst.slots[i];
                c.kept += 1;
            } else {
                // SAFETY: slot `i` held an owned mbuf, now judged and in
                // neither counted range.
                drop(unsafe { take(&c.burst.slots, i) });
            }
        }
    }

    /// Moves the first `n` mbufs (at most `len`) out, in order; when the
    /// iterator is dropped, those it did not yield are freed and the rest of
    /// the burst moves to the front.
    ///
    /// As `Vec::drain` does, the burst counts nothing while the iterator
    /// lives: an iterator that is forgotten (`mem::forget`) leaves the burst
    /// empty (leaking the mbufs it did not yield) rather than still owning
    /// mbufs it handed out.
    pub fn drain_front(&mut self, n: usize) -> DrainFront<'_> {
        let old = self.len;
        let n = n.min(old);
        self.len = 0;
        DrainFront {
            burst: self,
            next: 0,
            end: n,
            old,
        }
    }

    /// This burst seen with a smaller capacity: `cap`, raised to `len` and
    /// cut to the capacity. An `rx_burst` into the view receives at most
    /// `cap - len` packets — how an application asks for bursts smaller than
    /// its `Burst<N>` (testpmd's `--burst`). What the view's calls add or
    /// remove is the burst's own content.
    ///
    /// ```
    /// use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
    ///
    /// let pool = MbufPool::new(MbufPoolConfig { size: 127, cache_size: 0, ..Default::default() }).unwrap();
    /// let mut burst: Burst<64> = Burst::new();
    /// let view = burst.capped(8);
    /// assert_eq!((view.capacity(), view.free()), (8, 8));
    /// pool.alloc_bulk(view, 8).unwrap();
    /// assert!(view.is_full());
    /// assert_eq!((burst.len(), burst.free()), (8, 56));
    /// assert_eq!(burst.capped(4).capacity(), 8, "never below len");
    /// drop(burst);
    /// assert!(pool.is_full());
    /// ```
    #[inline(always)]
    pub fn capped(&mut self, cap: usize) -> &mut BurstSlice {
        let cap = cap.clamp(self.len, self.slots.len());
        let p = std::ptr::slice_from_raw_parts_mut(std::ptr::from_mut(self).cast::<Elem>(), cap);
        // The fat pointer has this burst's address and a tail length `cap` no
        // larger than its own (a slice-tailed DST's metadata is its tail's
        // length), so it describes the `len` field and a prefix of the same
        // slot array; `len <= cap` keeps the owned slots inside the view.
        // SAFETY: a sub-view of this burst, under the exclusive `&mut self`
        // borrow; every method keeps `len <= capacity`.
        unsafe { &mut *(p as *mut BurstSlice) }
    }

    /// Appends the mbufs of `other` that fit; the rest stay in `other`.
    /// Returns how many moved.
    pub fn append_from(&mut self, other: &mut BurstSlice) -> usize {
        let k = self.free().min(other.len);
        for m in other.drain_front(k) {
            // Room was checked above.
            let _ = self.push(m);
        }
        k
    }

    /// `n` slots after the owned ones, for a pool to fill (all of them or, on
    /// error, none) before [`set_len`](Self::set_len).
    #[inline(always)]
    pub(crate) fn spare_slots(&mut self, n: usize) -> &mut [Elem] {
        &mut self.slots[self.len..self.len + n]
    }

    /// The owned slots as raw header addresses, for a driver to copy into
    /// its ring before [`forget_front`](Self::forget_front).
    #[inline(always)]
    pub(crate) fn raw(&self) -> &[Elem] {
        &self.slots[..self.len]
    }

    /// Stops owning the first `n` mbufs without freeing them (a driver has
    /// taken them) and moves the rest to the front.
    ///
    /// # Safety
    /// `n <= len`, and the caller has taken ownership of those `n` mbufs.
    #[inline(always)]
    pub(crate) unsafe fn forget_front(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        let old = self.len;
        if n < old {
            self.slots.copy_within(n..old, 0);
        }
        self.len = old - n;
    }

    /// Counts the first `len` slots as owned.
    ///
    /// # Safety
    /// `slots[..len]` hold owned mbufs.
    #[inline(always)]
    pub(crate) unsafe fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.slots.len());
        self.len = len;
    }
}

/// Mbufs ahead whose external buffer's shared info `free_bulk` prefetches.
const FREE_AHEAD: usize = 4;

/// Moves the mbuf out of slot `i`.
///
/// # Safety
/// Slot `i` holds an owned mbuf, and the caller stops counting it as owned.
#[inline(always)]
unsafe fn take(slots: &[Elem], i: usize) -> Mbuf {
    // SAFETY: the slot holds an mbuf's header address, owned (caller's
    // contract) and now handed to the returned handle.
    unsafe { Mbuf::from_raw(slots[i].as_non_null().cast::<MbufHeader>()) }
}

/// Gives up the mbufs in `slots`, putting plain buffers back in one bulk put
/// per run of one pool. The slots double as the scratch space: plain buffers
/// are compacted to the front as they are found (a slot is written only after
/// it has been read), so no other array is touched. Rx fragments whose last
/// mbuf goes here are given back a run per page ([`FragRun`]): a queue
/// receives a page's fragments one after another and sends them in that
/// order, so one count update serves a page's worth instead of one atomic
/// per packet.
///
/// # Safety
/// Every slot holds an owned mbuf that the caller no longer uses or counts.
pub(crate) unsafe fn free_bulk(slots: &mut [Elem]) {
    let mut k = 0;
    let mut pool = std::ptr::null();
    let mut frags = FragRun::new();
    for i in 0..slots.len() {
        if let Some(e) = slots.get(i + FREE_AHEAD) {
            // An external buffer's shared info was last touched when the
            // buffer was attached, maybe long ago: ask for it a few mbufs
            // ahead so its miss overlaps the frees before it. (A page
            // fragment has none: what its free needs is in the header.)
            // SAFETY: we own a reference to that header: its `shinfo` is
            // written only by a holder of the last one.
            let s = unsafe { (*e.as_ptr().cast::<MbufHeader>()).shinfo };
            if !s.is_null() && s as usize & EXT_PAGE_FRAG == 0 {
                crate::pagepool::prefetch(s.cast());
            }
        }
        let p = slots[i].as_non_null().cast::<MbufHeader>();
        // SAFETY: we own this reference and give it up; `frags` is flushed
        // below.
        let Some(h) = (unsafe { prefree_into(p, Some(&mut frags)) }) else {
            continue;
        };
        // SAFETY: a live header (its last reference is ours).
        let hp = unsafe { h.as_ref() }.pool;
        if hp != pool {
            // SAFETY: `slots[..k]` are plain, unreferenced buffers of `pool`.
            unsafe { put_bulk_to_pool(pool, &slots[..k]) };
            pool = hp;
            k = 0;
        }
        if k != i {
            slots[k] = slots[i];
        }
        k += 1;
    }
    frags.end();
    // SAFETY: as above.
    unsafe { put_bulk_to_pool(pool, &slots[..k]) };
}

impl<const N: usize> Drop for Burst<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<const N: usize> std::fmt::Debug for Burst<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl std::fmt::Debug for BurstSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Burst")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl std::ops::Index<usize> for BurstSlice {
    type Output = Mbuf;
    fn index(&self, i: usize) -> &Mbuf {
        &self.as_slice()[i]
    }
}

impl std::ops::IndexMut<usize> for BurstSlice {
    fn index_mut(&mut self, i: usize) -> &mut Mbuf {
        &mut self.as_mut_slice()[i]
    }
}

impl<'a> IntoIterator for &'a BurstSlice {
    type Item = &'a Mbuf;
    type IntoIter = std::slice::Iter<'a, Mbuf>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, const N: usize> IntoIterator for &'a Burst<N> {
    type Item = &'a Mbuf;
    type IntoIter = std::slice::Iter<'a, Mbuf>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator from [`BurstSlice::drain_front`]. While it lives, the burst
/// counts no mbuf: `slots[next..end]` are still to be yielded and
/// `slots[end..old]` are the rest of the burst, owned by the iterator until
/// its drop hands them back.
pub struct DrainFront<'a> {
    burst: &'a mut BurstSlice,
    /// Next slot to yield.
    next: usize,
    /// End of the drained range.
    end: usize,
    /// The burst's length before the drain.
    old: usize,
}

impl Iterator for DrainFront<'_> {
    type Item = Mbuf;

    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        if self.next == self.end {
            return None;
        }
        let i = self.next;
        self.next += 1;
        // SAFETY: slot `i` is in the drained range, which the burst does not
        // count, and is read once: `next` has moved past it.
        Some(unsafe { take(&self.burst.slots, i) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for DrainFront<'_> {}

impl Drop for DrainFront<'_> {
    fn drop(&mut self) {
        let (next, end, old) = (self.next, self.end, self.old);
        let b = &mut *self.burst;
        // SAFETY: `slots[next..end]` are drained but not yielded, owned by
        // this iterator alone (the burst counts none): free them. If a free
        // panics, the burst stays empty and the rest leaks.
        unsafe { free_bulk(&mut b.slots[next..end]) };
        // Move the undrained tail to the front, and count it again. Most
        // drains take the whole burst, leaving no tail; one that took
        // nothing leaves it in place.
        if end != 0 && end != old {
            b.slots.copy_within(end..old, 0);
        }
        b.len = old - end;
    }
}
