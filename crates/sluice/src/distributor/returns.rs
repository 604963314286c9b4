//! A fixed-capacity FIFO of packet addresses, private to the distributor
//! thread: the packets workers returned (until the application collects
//! them) and the packets taken back from a worker that shut down (until
//! they are handed to another).
//!
//! It never overwrites: a push that does not fit is refused, and the caller
//! leaves the packets where they were.

use crate::mbuf::{BurstSlice, Mbuf, MbufHeader};
use crate::mempool::Elem;

/// A FIFO of owned packets.
pub(crate) struct Fifo {
    /// `slots[(head + k) & mask]` for `k < len` hold owned packets.
    slots: Box<[Elem]>,
    mask: usize,
    head: usize,
    len: usize,
}

impl Fifo {
    /// Room for `cap` packets (a power of two).
    pub(crate) fn new(cap: usize) -> Fifo {
        assert!(cap.is_power_of_two());
        Fifo {
            slots: vec![Elem::DANGLING; cap].into_boxed_slice(),
            mask: cap - 1,
            head: 0,
            len: 0,
        }
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub(crate) fn room(&self) -> usize {
        self.slots.len() - self.len
    }

    /// Appends `pkts`, whose ownership passes to the FIFO. The caller
    /// checked [`room`](Self::room).
    #[inline]
    pub(crate) fn push_all(&mut self, pkts: &[Elem]) {
        assert!(pkts.len() <= self.room());
        let tail = self.head + self.len;
        for (k, &e) in pkts.iter().enumerate() {
            self.slots[(tail + k) & self.mask] = e;
        }
        self.len += pkts.len();
    }

    /// Puts `pkts` before the others, in their order. The caller checked
    /// [`room`](Self::room).
    pub(crate) fn push_front_all(&mut self, pkts: &[Elem]) {
        assert!(pkts.len() <= self.room());
        for &e in pkts.iter().rev() {
            self.head = self.head.wrapping_sub(1) & self.mask;
            self.slots[self.head] = e;
        }
        self.len += pkts.len();
    }

    /// The first packet, if any (still owned by the FIFO).
    #[inline(always)]
    pub(crate) fn front(&self) -> Option<Elem> {
        (self.len != 0).then(|| self.slots[self.head])
    }

    /// Removes the first packet; ownership passes to the caller.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<Elem> {
        let e = self.front()?;
        self.head = (self.head + 1) & self.mask;
        self.len -= 1;
        Some(e)
    }

    /// Moves up to `out.free()` packets into `out`, oldest first; how
    /// many.
    pub(crate) fn pop_into(&mut self, out: &mut BurstSlice) -> usize {
        let n = out.free().min(self.len);
        let base = out.len();
        for slot in out.spare_slots(n) {
            *slot = self.pop().expect("counted above");
        }
        // SAFETY: the `n` packets popped are now owned by `out`.
        unsafe { out.set_len(base + n) };
        n
    }

    /// Frees every packet.
    pub(crate) fn clear(&mut self) {
        while let Some(e) = self.pop() {
            // SAFETY: the FIFO owned the packet, and gives it up here.
            unsafe { free_pkts(&[e]) };
        }
        self.head = 0;
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Frees packets.
///
/// # Safety
/// Each is a live mbuf the caller owns and gives up, listed once.
pub(crate) unsafe fn free_pkts(pkts: &[Elem]) {
    for &e in pkts {
        // SAFETY: (caller) an owned mbuf, freed once.
        drop(unsafe { Mbuf::from_raw(e.as_non_null().cast::<MbufHeader>()) });
    }
}
