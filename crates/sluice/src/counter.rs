//! Counters with one writer and any number of readers.
//!
//! A per-queue or per-lcore statistic is bumped by the one thread that owns
//! the queue or lcore, and read now and then by others. An atomic
//! read-modify-write would cost a locked instruction per bump for nothing:
//! with a single writer, a relaxed load plus a relaxed store cannot lose an
//! update, and on x86-64 it compiles to a plain `add` to memory. Readers see
//! some recent value, never a torn one.
//!
//! [`Counter`] is that counter. Port and queue statistics
//! ([`crate::port::stats`]) and the counters of the mempool caches, the page
//! pools, the distributor and the tester are made of it. [`Gauge`] is its
//! sibling for a level rather than a total (buffers a queue holds now): its
//! one writer stores the new value, readers load it.
//!
//! ```
//! use std::sync::Arc;
//! use sluice::counter::Counter;
//!
//! let packets = Arc::new(Counter::new());
//! let writer = Arc::clone(&packets);
//! // One thread owns the counter and bumps it...
//! std::thread::spawn(move || {
//!     for _ in 0..1000 {
//!         writer.inc();
//!     }
//!     writer.add(24);
//! })
//! .join()
//! .unwrap();
//! // ...and any thread reads it.
//! assert_eq!(packets.get(), 1024);
//! ```

use crate::sync::{AtomicU64, Ordering};

/// A `u64` counter written by one thread at a time (see the module docs).
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero.
    pub fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    /// Adds `n`. Only the counter's single writer may call this (two threads
    /// adding at once may lose one of the additions, never more).
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Adds one.
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1);
    }

    /// The current value (from any thread).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the value back to zero (single writer).
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// A `u64` level written by one thread at a time and read by any: the
/// writer [`set`](Gauge::set)s it (one plain store), readers
/// [`get`](Gauge::get) some recent value, never a torn one.
///
/// ```
/// use sluice::counter::Gauge;
///
/// let posted = Gauge::new();
/// posted.set(512);
/// assert_eq!(posted.get(), 512);
/// posted.set(0);
/// assert_eq!(posted.get(), 0);
/// ```
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    /// A gauge at zero.
    pub fn new() -> Self {
        Gauge(AtomicU64::new(0))
    }

    /// Sets the level (single writer).
    #[inline(always)]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// The current level (from any thread).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn adds_and_reads() {
        let c = Counter::new();
        c.inc();
        c.add(41);
        assert_eq!(c.get(), 42);
        c.reset();
        assert_eq!(c.get(), 0);
    }

    #[test]
    fn a_reader_on_another_thread_sees_the_final_value() {
        let c = std::sync::Arc::new(Counter::new());
        let w = c.clone();
        std::thread::spawn(move || {
            for _ in 0..10_000 {
                w.inc();
            }
        })
        .join()
        .unwrap();
        assert_eq!(c.get(), 10_000);
    }

    #[test]
    fn a_gauge_reads_the_last_level_set() {
        let g = std::sync::Arc::new(Gauge::new());
        let w = g.clone();
        std::thread::spawn(move || {
            for v in 0..100 {
                w.set(v);
            }
            w.set(7);
        })
        .join()
        .unwrap();
        assert_eq!(g.get(), 7);
    }
}
