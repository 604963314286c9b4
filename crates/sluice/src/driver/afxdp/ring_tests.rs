//! The ring ends against a stand-in for the kernel over plain memory: the
//! same layout (producer, consumer, flags words, entries), the kernel's side
//! done with the orderings `xsk_queue.h` uses (Acquire load of the other
//! side's index, Release store of its own).

use std::sync::Arc;

use super::*;

/// A ring's memory, as the kernel would map it.
struct RingMemory<T> {
    producer: AtomicU32,
    consumer: AtomicU32,
    flags: AtomicU32,
    entries: Box<[UnsafeCell<T>]>,
}

// SAFETY: the entries are accessed by the ring protocol's rules only (one
// writer per slot at a time, ordered by the index words).
unsafe impl<T: Send> Sync for RingMemory<T> {}

impl<T: Copy + Default> RingMemory<T> {
    /// `size` entries, both indices at `start`.
    fn new(size: u32, start: u32) -> Arc<RingMemory<T>> {
        Arc::new(RingMemory {
            producer: AtomicU32::new(start),
            consumer: AtomicU32::new(start),
            flags: AtomicU32::new(0),
            entries: (0..size).map(|_| UnsafeCell::new(T::default())).collect(),
        })
    }

    fn ptrs(&self) -> RingPtrs<T> {
        RingPtrs {
            producer: &self.producer,
            consumer: &self.consumer,
            flags: &self.flags,
            entries: self.entries.as_ptr(),
            size: self.entries.len() as u32,
        }
    }

    /// The kernel consuming: every published entry, then its index given
    /// back.
    fn kernel_take(&self) -> Vec<T> {
        let cons = self.consumer.load(Ordering::Relaxed);
        // Acquire: pairs with the user producer's Release in `submit`.
        let prod = self.producer.load(Ordering::Acquire);
        let mask = self.entries.len() as u32 - 1;
        let out = (0..prod.wrapping_sub(cons))
            .map(|k| {
                let e = &self.entries[(cons.wrapping_add(k) & mask) as usize];
                // SAFETY: a published entry, not rewritten until released.
                e.with(|p| unsafe { *p })
            })
            .collect();
        // Release: the reads above are done before the producer reuses
        // the slots.
        self.consumer.store(prod, Ordering::Release);
        out
    }

    /// The kernel producing `v` if there is room.
    fn kernel_put(&self, v: T) -> bool {
        let prod = self.producer.load(Ordering::Relaxed);
        // Acquire: pairs with the user consumer's Release in `release`.
        let cons = self.consumer.load(Ordering::Acquire);
        let size = self.entries.len() as u32;
        if prod.wrapping_sub(cons) == size {
            return false;
        }
        let e = &self.entries[(prod & (size - 1)) as usize];
        // SAFETY: a free slot: the consumer gave it back.
        e.with_mut(|p| unsafe { p.write(v) });
        // Release: the entry is written before it is published.
        self.producer.store(prod.wrapping_add(1), Ordering::Release);
        true
    }
}

#[test]
fn the_producer_end_fills_publishes_and_waits_for_the_consumer() {
    // Indices start just below the wrap of u32.
    let mem = RingMemory::<u64>::new(8, u32::MAX - 3);
    // SAFETY: `mem` outlives the ring end; the only producer end.
    let mut r = unsafe { ProdRing::new(mem.ptrs()) };
    assert_eq!(r.size(), 8);
    assert_eq!(r.free(5), 5);
    assert_eq!(r.free(100), 8);
    for k in 0..8 {
        // SAFETY: 8 slots are free.
        unsafe { r.write(k, 100 + k as u64) };
    }
    assert!(
        mem.kernel_take().is_empty(),
        "nothing is visible before submit"
    );
    r.submit(6);
    assert_eq!(r.pending(), 6);
    assert_eq!(r.free(3), 2, "two slots left until the kernel consumes");
    assert_eq!(mem.kernel_take(), [100, 101, 102, 103, 104, 105]);
    assert_eq!(r.pending(), 0);
    assert_eq!(r.free(8), 8);
    // Around the wrap many times: values come out in order.
    let mut next = 0u64;
    for round in 0..100u64 {
        let n = (round % 8 + 1) as u32;
        assert_eq!(r.free(n), n);
        for k in 0..n {
            // SAFETY: `n` slots are free.
            unsafe { r.write(k, round * 10 + k as u64) };
        }
        r.submit(n);
        let got = mem.kernel_take();
        assert_eq!(
            got,
            (0..n as u64).map(|k| round * 10 + k).collect::<Vec<_>>()
        );
        next += n as u64;
    }
    assert_eq!(r.prod(), (u32::MAX - 3).wrapping_add(6 + next as u32));
}

#[test]
fn the_consumer_end_sees_only_published_entries_and_gives_them_back() {
    let mem = RingMemory::<u64>::new(4, u32::MAX - 1);
    // SAFETY: `mem` outlives the ring end; the only consumer end.
    let mut r = unsafe { ConsRing::new(mem.ptrs()) };
    assert_eq!(r.ready(4), 0);
    assert!(mem.kernel_put(7) && mem.kernel_put(8) && mem.kernel_put(9) && mem.kernel_put(10));
    assert!(!mem.kernel_put(11), "the ring is full");
    assert_eq!(r.ready(2), 2);
    assert_eq!(r.ready(10), 4);
    // SAFETY: 4 entries are ready.
    let got: Vec<u64> = (0..4).map(|k| unsafe { r.read(k) }).collect();
    assert_eq!(got, [7, 8, 9, 10]);
    r.release(3);
    assert_eq!(
        mem.consumer.load(Ordering::Relaxed),
        (u32::MAX - 1).wrapping_add(3)
    );
    assert!(mem.kernel_put(11) && mem.kernel_put(12) && mem.kernel_put(13));
    assert!(!mem.kernel_put(14), "one entry is still unreleased");
    assert_eq!(r.ready(10), 4);
    // SAFETY: 4 entries are ready.
    let got: Vec<u64> = (0..4).map(|k| unsafe { r.read(k) }).collect();
    assert_eq!(got, [10, 11, 12, 13]);
    r.release(4);
    assert_eq!(r.ready(1), 0);
}

#[test]
fn needs_wakeup_reads_the_kernels_flag() {
    let mem = RingMemory::<u64>::new(2, 0);
    // SAFETY: as above.
    let r = unsafe { ProdRing::new(mem.ptrs()) };
    assert!(!r.needs_wakeup());
    mem.flags.store(NEED_WAKEUP, Ordering::Relaxed);
    assert!(r.needs_wakeup());
    mem.flags.store(2, Ordering::Relaxed);
    assert!(!r.needs_wakeup(), "other flag bits are not the wake-up bit");
}

/// A thread standing in for the kernel consumes what the producer end
/// publishes and produces into the consumer end: 200,000 values each way
/// through 64-entry rings arrive once each, in order.
#[test]
fn a_threaded_stand_in_for_the_kernel_moves_every_value_once_in_order() {
    const N: u64 = 200_000;
    let fill = RingMemory::<u64>::new(64, u32::MAX - 10);
    let rx = RingMemory::<u64>::new(64, 7);
    let kernel = {
        let (fill, rx) = (Arc::clone(&fill), Arc::clone(&rx));
        std::thread::spawn(move || {
            let (mut seen, mut sent) = (0u64, 0u64);
            while seen < N || sent < N {
                for v in fill.kernel_take() {
                    assert_eq!(v, seen, "fill values in order");
                    seen += 1;
                }
                while sent < N && rx.kernel_put(sent) {
                    sent += 1;
                }
                std::hint::spin_loop();
            }
        })
    };
    // SAFETY: the memories outlive the ends (joined below); one end each.
    let (mut p, mut c) = unsafe { (ProdRing::new(fill.ptrs()), ConsRing::new(rx.ptrs())) };
    let (mut put, mut got) = (0u64, 0u64);
    while put < N || got < N {
        let n = p.free(((N - put) as u32).min(16));
        for k in 0..n {
            // SAFETY: `n` slots are free.
            unsafe { p.write(k, put + k as u64) };
        }
        p.submit(n);
        put += n as u64;
        let m = c.ready(16);
        for k in 0..m {
            // SAFETY: `m` entries are ready.
            assert_eq!(unsafe { c.read(k) }, got + k as u64, "Rx values in order");
        }
        c.release(m);
        got += m as u64;
    }
    kernel.join().unwrap();
    assert_eq!((put, got), (N, N));
}
