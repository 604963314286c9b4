//! Support shared by the library's unit tests: one way to build a pool of
//! mbufs (or a bare mempool) for a test, one check that every buffer of a
//! pool came home, one way to run a loom model, and the test frames of the
//! drivers that meet the kernel.
//!
//! # Where unit tests live
//!
//! - A module that is a folder keeps its tests in `<folder>/tests.rs`, and
//!   its loom models in `<folder>/loom_tests.rs`, both declared in its
//!   `mod.rs`; where the tests are many files, they are a `<folder>/tests/`
//!   folder instead (the soft driver's port tests).
//! - A module that is one file keeps a few short tests inline, in a
//!   `#[cfg(test)] mod tests` at its end; once they grow, they move to
//!   `<name>_tests.rs` beside `<name>.rs`, declared in the parent's `mod.rs`
//!   as `mod <name>_tests;` (loom models: `<name>_loom_tests.rs`).
//! - The one exception is `driver/afxdp/ring.rs`: loom builds compile that
//!   file alone (see `lib.rs`), so it declares its own `ring_tests.rs` and
//!   `ring_loom_tests.rs` with `#[path]`.
//!
//! Helpers that more than one module's tests use belong here; helpers of one
//! module's tests stay with that module, in its `test_support.rs` where
//! several of its test files share them (`distributor/test_support.rs` for
//! the two distributors, `net/lpm/test_support.rs` for the two tables).
//! Integration tests have their own shared support, in `tests/common/` of
//! each crate.

use crate::mbuf::{MbufPool, MbufPoolConfig};
use crate::mempool::{HugepagePolicy, Mempool, MempoolConfig};
use crate::pagepool::BlockProvider;

/// A pool of `size` mbufs with the default rooms, no per-lcore cache (so
/// the count of free mbufs is exact from any thread) and hugepages where the
/// machine has them.
pub(crate) fn test_pool(size: u32) -> MbufPool {
    TestPool::new(size).build()
}

/// How to build a test's pool of mbufs when [`test_pool`] is not enough:
/// `TestPool::new(size).data_room(256).build()`. Starts from no per-lcore
/// cache and otherwise the defaults of [`MbufPoolConfig`].
#[derive(Debug, Clone)]
pub(crate) struct TestPool {
    config: MbufPoolConfig,
}

impl TestPool {
    /// `size` mbufs, named `test`, no per-lcore cache.
    pub(crate) fn new(size: u32) -> TestPool {
        TestPool {
            config: MbufPoolConfig {
                name: "test".into(),
                size,
                cache_size: 0,
                ..MbufPoolConfig::default()
            },
        }
    }

    /// The pool's name, where a test tells two pools apart.
    pub(crate) fn name(mut self, name: &str) -> TestPool {
        self.config.name = name.into();
        self
    }

    /// Bytes for packet data after the headroom.
    pub(crate) fn data_room(mut self, data_room: u16) -> TestPool {
        self.config.data_room = data_room;
        self
    }

    /// Bytes before the data of a fresh buffer.
    pub(crate) fn headroom(mut self, headroom: u16) -> TestPool {
        self.config.headroom = headroom;
        self
    }

    /// Per-lcore cache size.
    pub(crate) fn cache_size(mut self, cache_size: u32) -> TestPool {
        self.config.cache_size = cache_size;
        self
    }

    /// Whether the pool sits on hugepages.
    pub(crate) fn hugepages(mut self, hugepages: HugepagePolicy) -> TestPool {
        self.config.hugepages = hugepages;
        self
    }

    /// The pool; panics, saying why, on a configuration the pool refuses.
    pub(crate) fn build(self) -> MbufPool {
        let name = self.config.name.clone();
        MbufPool::new(self.config).unwrap_or_else(|e| panic!("test pool '{name}': {e}"))
    }

    /// The pool in shared memory ([`MbufPool::new_shared`]).
    pub(crate) fn build_shared(self) -> MbufPool {
        let name = self.config.name.clone();
        MbufPool::new_shared(self.config).unwrap_or_else(|e| panic!("test pool '{name}': {e}"))
    }
}

/// A bare mempool of `size` elements of 200 bytes (not a multiple of the
/// cache line, so each is padded to its stride) with a per-lcore cache of
/// `cache_size`, for the tests of the element pool itself.
pub(crate) fn test_mempool(size: u32, cache_size: u32) -> Mempool {
    Mempool::new(MempoolConfig {
        name: format!("test-{size}-{cache_size}"),
        size,
        elt_size: 200,
        cache_size,
        hugepages: HugepagePolicy::Auto,
    })
    .unwrap_or_else(|e| panic!("test mempool of {size}: {e}"))
}

/// A pool that can say whether everything it hands out is back: a
/// [`Mempool`], an [`MbufPool`] or a page pool's [`BlockProvider`].
pub(crate) trait CountedPool {
    /// True when every element (block) is free again.
    fn is_full(&self) -> bool;
    /// What is still out, for the failure message.
    fn missing(&self) -> String;
}

impl<P: CountedPool + ?Sized> CountedPool for &P {
    fn is_full(&self) -> bool {
        (**self).is_full()
    }
    fn missing(&self) -> String {
        (**self).missing()
    }
}

impl CountedPool for Mempool {
    fn is_full(&self) -> bool {
        Mempool::is_full(self)
    }
    fn missing(&self) -> String {
        let stats = self.stats();
        format!(
            "pool '{}' is missing {} of its {} elements ({} in its ring, {} in lcore caches)",
            self.name(),
            stats.in_use,
            stats.size,
            stats.in_ring,
            stats.cached
        )
    }
}

impl CountedPool for MbufPool {
    fn is_full(&self) -> bool {
        MbufPool::is_full(self)
    }
    fn missing(&self) -> String {
        self.mempool().missing()
    }
}

impl CountedPool for BlockProvider {
    fn is_full(&self) -> bool {
        BlockProvider::is_full(self)
    }
    fn missing(&self) -> String {
        let stats = self.stats();
        format!(
            "block provider '{}' is missing {} of its {} pages",
            self.name(),
            stats.used_pages,
            stats.pages
        )
    }
}

/// Asserts that everything `pool` handed out is free again (for a mempool:
/// in its ring or an lcore cache); otherwise fails saying how much is
/// missing.
#[track_caller]
pub(crate) fn assert_pool_full(pool: &impl CountedPool) {
    assert!(pool.is_full(), "{}", pool.missing());
}

/// [`assert_pool_full`], with `context` (the round, the case) before the
/// failure message.
#[track_caller]
pub(crate) fn assert_pool_full_with(pool: &impl CountedPool, context: impl std::fmt::Display) {
    assert!(pool.is_full(), "{context}: {}", pool.missing());
}

/// Explores `f` under loom with a preemption bound of 3 unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise, and a budget of 20,000 branches
/// unless `LOOM_MAX_BRANCHES` says otherwise.
///
/// Every retry loop and spin-wait yields, and every yield and atomic access
/// is a branch: an execution in which one thread polls many times before
/// the other runs goes past loom's default budget of 1,000 branches.
#[cfg(loom)]
pub(crate) fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = 20_000;
    }
    builder.check(f);
}

/// Test frames for the drivers that meet the kernel (afpacket, tap):
/// EtherType 0x88b5 (IEEE local experimental), then a sequence number and
/// bytes derived from it.
#[cfg(not(loom))]
pub(crate) mod frames {
    use std::time::{Duration, Instant};

    use crate::mbuf::{Burst, MbufPool};
    use crate::port::Port;

    /// A test frame of `len` bytes to `dst`, from `02:5e:00:00:00:<src>`,
    /// carrying `seq`.
    pub(crate) fn test_frame(dst: [u8; 6], src: u8, seq: u32, len: usize) -> Vec<u8> {
        let mut frame = Vec::with_capacity(len);
        frame.extend(dst);
        frame.extend([0x02, 0x5e, 0, 0, 0, src, 0x88, 0xb5]);
        frame.extend(seq.to_be_bytes());
        while frame.len() < len {
            frame.push((frame.len() as u32 ^ seq.wrapping_mul(31)) as u8);
        }
        frame
    }

    /// `n` test frames to `dst` from `src`, carrying `seq0` onwards, their
    /// lengths spread over 60..1515 bytes by `stride` bytes a frame.
    pub(crate) fn test_frames(
        dst: [u8; 6],
        src: u8,
        seq0: u32,
        n: u32,
        stride: usize,
    ) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| test_frame(dst, src, seq0 + i, 60 + (i as usize * stride) % 1455))
            .collect()
    }

    /// Asserts that the peer got (`got`) exactly the frames `port` sent
    /// (`sent`), in order and byte for byte, and that `port` counted every
    /// one of them, packets and bytes, as sent without an error.
    #[track_caller]
    pub(crate) fn assert_sent_intact(port: &Port, sent: &[Vec<u8>], got: &[Vec<u8>]) {
        assert_eq!(got.len(), sent.len(), "frames that arrived");
        assert_eq!(got, sent, "every frame, in order, byte for byte");
        let stats = port.stats();
        assert_eq!(stats.tx_packets, sent.len() as u64, "{stats:?}");
        assert_eq!(
            stats.tx_bytes,
            sent.iter().map(|f| f.len() as u64).sum::<u64>(),
            "{stats:?}"
        );
        assert_eq!(stats.tx_errors, 0, "{stats:?}");
    }

    /// Whether `frame` is a test frame (others are the kernel's own).
    pub(crate) fn is_test_frame(frame: &[u8]) -> bool {
        frame.len() >= 18 && frame[12..14] == [0x88, 0xb5]
    }

    /// A test frame's sequence number.
    pub(crate) fn seq_of(frame: &[u8]) -> u32 {
        u32::from_be_bytes([frame[14], frame[15], frame[16], frame[17]])
    }

    /// Sends `frames`, copied into mbufs of `pool`, out of Tx queue 0 of
    /// `port` in order, offering again what the queue did not take (for at
    /// most 60 s); asserts that it took them all.
    pub(crate) fn send_all(port: &mut Port, pool: &MbufPool, frames: &[Vec<u8>]) {
        let mut burst: Burst<32> = Burst::new();
        let mut next = 0;
        let start = Instant::now();
        while (next < frames.len() || !burst.is_empty())
            && start.elapsed() < Duration::from_secs(60)
        {
            while !burst.is_full() && next < frames.len() {
                burst
                    .push(pool.alloc_from_slice(&frames[next]).unwrap())
                    .unwrap();
                next += 1;
            }
            port.tx_queue(0).unwrap().tx_burst(&mut burst);
            std::thread::sleep(Duration::from_micros(100));
        }
        assert!(burst.is_empty(), "{} frames not taken in 60 s", burst.len());
    }

    /// Polls every Rx queue of `port` until `want` test frames arrived or
    /// nothing came for `idle`; returns (queue, bytes) of the test frames,
    /// each of which came in one segment, and frees everything.
    pub(crate) fn receive_test_frames(
        port: &mut Port,
        want: usize,
        idle: Duration,
    ) -> Vec<(usize, Vec<u8>)> {
        let mut got = Vec::new();
        let mut last = Instant::now();
        let mut burst: Burst<32> = Burst::new();
        while got.len() < want && last.elapsed() < idle {
            for queue in 0..port.nb_rx_queues() {
                if port.rx_queue(queue).unwrap().rx_burst(&mut burst) != 0 {
                    last = Instant::now();
                }
                for m in burst.iter() {
                    assert_eq!(m.nb_segs(), 1);
                    let frame = m.to_vec();
                    if is_test_frame(&frame) {
                        got.push((queue, frame));
                    }
                }
                burst.clear();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        got
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_full_pool_passes_the_check() {
        let pool = test_pool(3);
        let m = pool.alloc().unwrap();
        drop(m);
        assert_pool_full(&pool);
        assert_pool_full(&test_mempool(4, 2));
    }

    #[test]
    fn a_missing_buffer_is_counted_in_the_failure() {
        let pool = test_pool(3);
        let held = pool.alloc().unwrap();
        let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_pool_full_with(&pool, format_args!("round {}", 2));
        }))
        .unwrap_err();
        let message = failure.downcast_ref::<String>().unwrap();
        assert_eq!(
            message,
            "round 2: pool 'test' is missing 1 of its 3 elements (2 in its ring, 0 in lcore caches)"
        );
        drop(held);
        assert_pool_full(&pool);
    }
}
