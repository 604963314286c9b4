//! Bounded lock-free rings in the style of DPDK's `rte_ring`.
//!
//! # Algorithm
//!
//! A fixed array of slots (capacity a power of two, values stored in place)
//! and two head/tail pairs of free-running 32-bit indices, one for the
//! producers and one for the consumers, each on its own cache line. Every
//! operation claims a range of slots by moving its side's head, copies the
//! values, then publishes the range by moving its side's tail; the other side
//! sees the range when it reads that tail. With several producers (or
//! consumers) the head moves by compare-and-swap and the tails are published in
//! claim order. Bulk operations move all their values or none; burst operations
//! move as many as fit. Either way one head move covers the whole batch, which
//! is what makes batched rings cheap per element. The protocol and the memory
//! orderings are narrated in `core.rs`.
//!
//! Single- or multi-threaded producing and consuming is chosen at creation, in
//! the type: a [`Producer<T, Single>`] is not `Clone` and a
//! [`Producer<T, Multi>`] is. A single-threaded end also caches the other
//! side's tail and only rereads it when the cached value runs out, so a
//! producer and consumer on two cores touch each other's cache lines once per
//! "ring looked full/empty", not once per call.
//!
//! # Example
//!
//! ```
//! use sluice::ring::Ring;
//!
//! let (mut tx, mut rx) = Ring::<u64>::spsc(8).unwrap();
//! assert_eq!(tx.enqueue_bulk(&[1, 2, 3]).n, 3);
//! let mut out = [0u64; 2];
//! let moved = rx.dequeue_burst(&mut out);
//! assert_eq!((moved.n, moved.left), (2, 1));
//! assert_eq!(out, [1, 2]);
//!
//! // Zero-copy: write in place across the wrap, then commit.
//! let chunk = tx.reserve(4).unwrap();
//! assert_eq!(chunk.fill_from_iter(10..14), 4);
//! let chunk = rx.peek(5).unwrap();
//! let (a, b) = chunk.as_slices();
//! assert_eq!([a, b].concat(), [3, 10, 11, 12, 13]);
//! chunk.commit_all();
//! ```

mod core;
mod ends;
#[cfg(not(loom))]
mod slots;

#[cfg(not(loom))]
mod chunk;

// Loom's atomics only work inside a loom model, and the zero-copy chunks do
// not exist under loom, so the ordinary tests are built without it.
#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;

pub use self::core::Ring;
#[cfg(not(loom))]
pub use chunk::{Drain, ReadChunk, WriteChunk};
pub use ends::{Consumer, Producer};

use crate::sync::Arc;

/// Largest ring: indices are 32-bit and the fill level must stay exact.
pub const MAX_CAPACITY: usize = 1 << 31;

/// Marker for a single-threaded end: not `Clone`, no atomic read-modify-write.
#[derive(Debug)]
pub enum Single {}

/// Marker for a multi-threaded end: `Clone`, claims by compare-and-swap.
#[derive(Debug)]
pub enum Multi {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Single {}
    impl Sealed for super::Multi {}
}

/// How many threads may use one side of a ring: [`Single`] or [`Multi`].
pub trait SyncMode: sealed::Sealed + 'static {
    /// True for [`Multi`].
    const MULTI: bool;
}

impl SyncMode for Single {
    const MULTI: bool = false;
}

impl SyncMode for Multi {
    const MULTI: bool = true;
}

/// The result of a bulk or burst operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Elements moved.
    pub n: usize,
    /// After the move: free slots (enqueue) or entries waiting (dequeue).
    /// A snapshot, and for a single-threaded end a lower bound.
    pub left: usize,
}

/// Why a ring could not be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// The capacity was zero.
    ZeroCapacity,
    /// The capacity was not a power of two.
    NotPowerOfTwo(usize),
    /// The capacity exceeded [`MAX_CAPACITY`].
    TooLarge(usize),
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::ZeroCapacity => write!(f, "ring capacity 0: must be a power of two >= 1"),
            RingError::NotPowerOfTwo(n) => {
                write!(f, "ring capacity {n} is not a power of two")
            }
            RingError::TooLarge(n) => {
                write!(f, "ring capacity {n} exceeds the maximum {MAX_CAPACITY}")
            }
        }
    }
}

impl std::error::Error for RingError {}

/// Checks a requested capacity.
pub(crate) fn check_capacity(capacity: usize) -> Result<(), RingError> {
    if capacity == 0 {
        Err(RingError::ZeroCapacity)
    } else if !capacity.is_power_of_two() {
        Err(RingError::NotPowerOfTwo(capacity))
    } else if capacity > MAX_CAPACITY {
        Err(RingError::TooLarge(capacity))
    } else {
        Ok(())
    }
}

/// The two ends of a new ring.
pub type Ends<T, P, C> = (Producer<T, P>, Consumer<T, C>);

impl<T: Send> Ring<T> {
    /// Creates a ring of `capacity` slots (a power of two) and returns its
    /// two ends, with the producer and consumer modes chosen by `P` and `C`.
    /// A capacity of 0, not a power of two or over [`MAX_CAPACITY`] is a
    /// [`RingError`].
    ///
    /// ```
    /// use sluice::ring::{Multi, Ring, RingError, Single};
    ///
    /// // Several producers, one consumer: the same as `Ring::mpsc(64)`.
    /// let (tx, mut rx) = Ring::<u32>::new::<Multi, Single>(64).unwrap();
    /// let mut tx2 = tx.clone(); // a multi-threaded end is `Clone`
    /// assert!(tx2.push(7).is_ok());
    /// assert_eq!(rx.pop(), Some(7));
    /// drop(tx);
    ///
    /// assert_eq!(Ring::<u32>::spsc(0).unwrap_err(), RingError::ZeroCapacity);
    /// let err = Ring::<u32>::spsc(100).unwrap_err();
    /// assert_eq!(err.to_string(), "ring capacity 100 is not a power of two");
    /// ```
    // A ring is only ever used through its ends, so the constructor returns
    // them (like `std::sync::mpsc::channel`).
    #[allow(clippy::new_ret_no_self)]
    pub fn new<P: SyncMode, C: SyncMode>(capacity: usize) -> Result<Ends<T, P, C>, RingError> {
        check_capacity(capacity)?;
        let ring = Arc::new(Ring::with_capacity(capacity));
        Ok((Producer::new(ring.clone()), Consumer::new(ring)))
    }

    /// Single producer, single consumer: the fastest kind, for one thread
    /// handing values to one other. Neither end is `Clone`.
    ///
    /// ```
    /// use sluice::ring::Ring;
    ///
    /// const N: u64 = 10_000;
    /// let (mut tx, mut rx) = Ring::<u64>::spsc(256).unwrap();
    /// let received = std::thread::scope(|s| {
    ///     let producer = s.spawn(move || {
    ///         let mut next = 0;
    ///         while next < N {
    ///             // As many as fit, in one head move; a full ring takes none.
    ///             let batch: Vec<u64> = (next..N.min(next + 32)).collect();
    ///             next += tx.enqueue_burst(&batch).n as u64;
    ///         }
    ///     });
    ///     let mut received = Vec::new();
    ///     let mut out = [0u64; 32];
    ///     let mut receive = |received: &mut Vec<u64>| {
    ///         let moved = rx.dequeue_burst(&mut out);
    ///         received.extend_from_slice(&out[..moved.n]);
    ///         moved.n
    ///     };
    ///     while !producer.is_finished() {
    ///         receive(&mut received);
    ///     }
    ///     // Joining makes all the producer sent visible here: take the rest.
    ///     producer.join().unwrap();
    ///     while receive(&mut received) != 0 {}
    ///     received
    /// });
    /// // Everything, once each, in the order it was sent.
    /// assert_eq!(received, (0..N).collect::<Vec<_>>());
    /// ```
    pub fn spsc(capacity: usize) -> Result<Ends<T, Single, Single>, RingError> {
        Self::new(capacity)
    }

    /// Multi producer, multi consumer: clone either end into as many
    /// threads as need it.
    ///
    /// ```
    /// use sluice::ring::Ring;
    ///
    /// let (tx, rx) = Ring::<u32>::mpmc(1024).unwrap();
    /// std::thread::scope(|s| {
    ///     // Two producers, 500 values each, distinct between them.
    ///     for t in 0..2u32 {
    ///         let mut tx = tx.clone();
    ///         s.spawn(move || {
    ///             for chunk in (t * 500..(t + 1) * 500).collect::<Vec<_>>().chunks(50) {
    ///                 // The ring has room for everything: a bulk move of
    ///                 // the whole chunk always succeeds.
    ///                 assert_eq!(tx.enqueue_bulk(chunk).n, chunk.len());
    ///             }
    ///         });
    ///     }
    /// });
    /// drop(tx);
    /// assert_eq!(rx.ring().len(), 1000);
    ///
    /// // Two consumers drain the ring between them.
    /// let mut taken: Vec<u32> = std::thread::scope(|s| {
    ///     let consumers: Vec<_> = (0..2)
    ///         .map(|_| {
    ///             let mut rx = rx.clone();
    ///             s.spawn(move || {
    ///                 let mut mine = Vec::new();
    ///                 let mut out = [0u32; 16];
    ///                 loop {
    ///                     let moved = rx.dequeue_burst(&mut out);
    ///                     if moved.n == 0 {
    ///                         break mine; // no producer is left: empty for good
    ///                     }
    ///                     mine.extend_from_slice(&out[..moved.n]);
    ///                 }
    ///             })
    ///         })
    ///         .collect();
    ///     consumers.into_iter().flat_map(|c| c.join().unwrap()).collect()
    /// });
    /// // Every value came out exactly once.
    /// taken.sort_unstable();
    /// assert_eq!(taken, (0..1000).collect::<Vec<_>>());
    /// assert!(rx.is_empty());
    /// ```
    pub fn mpmc(capacity: usize) -> Result<Ends<T, Multi, Multi>, RingError> {
        Self::new(capacity)
    }

    /// Multi producer, single consumer.
    pub fn mpsc(capacity: usize) -> Result<Ends<T, Multi, Single>, RingError> {
        Self::new(capacity)
    }

    /// Single producer, multi consumer.
    pub fn spmc(capacity: usize) -> Result<Ends<T, Single, Multi>, RingError> {
        Self::new(capacity)
    }
}

/// A multi-producer, multi-consumer ring of `Copy` values used through a
/// shared reference, for structures (such as the mempool) that embed a ring
/// rather than hand out its ends.
// Only the tests use it until the mempool does.
#[allow(dead_code)]
pub(crate) struct SharedRing<T> {
    ring: Ring<T>,
}

#[allow(dead_code)]
impl<T: Copy + Send> SharedRing<T> {
    /// A ring of `capacity` slots (a power of two).
    pub(crate) fn new(capacity: usize) -> Result<Self, RingError> {
        check_capacity(capacity)?;
        Ok(SharedRing {
            ring: Ring::with_capacity(capacity),
        })
    }

    /// The ring, for its fill level.
    #[inline]
    pub(crate) fn ring(&self) -> &Ring<T> {
        &self.ring
    }

    /// Multi-producer enqueue of all of `src` or nothing (`bulk`), or as many as
    /// fit.
    #[inline]
    pub(crate) fn enqueue(&self, src: &[T], bulk: bool) -> Moved {
        let ring = &self.ring;
        let cap = ring.capacity_u32();
        let n = src.len().min(MAX_CAPACITY) as u32;
        let claim = Ring::<T>::claim_multi(ring.prod(), &ring.cons().tail, cap, cap, n, bulk);
        if claim.n != 0 {
            // SAFETY: the claim gives us `claim.n` slots from `claim.head`.
            unsafe { ring.write_slice(claim.head, &src[..claim.n as usize]) };
            Ring::<T>::publish_multi(ring.prod(), claim.head, claim.n);
        }
        Moved {
            n: claim.n as usize,
            left: claim.left as usize,
        }
    }

    /// Multi-consumer dequeue into all of `dst` or nothing (`bulk`), or as many
    /// as are waiting.
    #[inline]
    pub(crate) fn dequeue(&self, dst: &mut [T], bulk: bool) -> Moved {
        let ring = &self.ring;
        let cap = ring.capacity_u32();
        let n = dst.len().min(MAX_CAPACITY) as u32;
        let claim = Ring::<T>::claim_multi(ring.cons(), &ring.prod().tail, 0, cap, n, bulk);
        if claim.n != 0 {
            // SAFETY: the claim gives us `claim.n` published slots from `claim.head`.
            unsafe { ring.read_slice(claim.head, &mut dst[..claim.n as usize]) };
            Ring::<T>::publish_multi(ring.cons(), claim.head, claim.n);
        }
        Moved {
            n: claim.n as usize,
            left: claim.left as usize,
        }
    }
}
