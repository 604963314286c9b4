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
//! pools, the distributor and the tester are made of it.
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
}
