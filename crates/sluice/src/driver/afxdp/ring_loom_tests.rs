//! Loom models of the AF_XDP ring protocol: a user-space ring end against a
//! stand-in for the kernel doing its side with the kernel's orderings. Loom
//! checks every interleaving and every value a load may return, and every
//! entry access: reading an entry the other side may still be writing
//! fails the model.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p sluice --release --lib
//! loom` (the driver itself is left out of loom builds; this file is built
//! from `lib.rs` on its own).

use loom::sync::Arc;
use loom::thread;

use super::*;
use crate::test_support::loom_model;

struct RingMemory {
    producer: AtomicU32,
    consumer: AtomicU32,
    flags: AtomicU32,
    entries: Box<[UnsafeCell<u32>]>,
}

// SAFETY: entries are accessed by the protocol's rules only, which loom
// checks.
unsafe impl Sync for RingMemory {}
// SAFETY: as above.
unsafe impl Send for RingMemory {}

impl RingMemory {
    fn new(size: u32) -> Arc<RingMemory> {
        Arc::new(RingMemory {
            producer: AtomicU32::new(0),
            consumer: AtomicU32::new(0),
            flags: AtomicU32::new(0),
            entries: (0..size).map(|_| UnsafeCell::new(0)).collect(),
        })
    }

    fn ptrs(&self) -> RingPtrs<u32> {
        RingPtrs {
            producer: &self.producer,
            consumer: &self.consumer,
            flags: &self.flags,
            entries: self.entries.as_ptr(),
            size: self.entries.len() as u32,
        }
    }
}

/// User space produces 3 values through a 2-entry ring (fill, Tx); the
/// kernel consumes them (Acquire producer, read, Release consumer). They
/// arrive in order, and no entry is overwritten before it was read.
#[test]
fn user_producer_kernel_consumer() {
    loom_model(|| {
        let mem = RingMemory::new(2);
        let k = Arc::clone(&mem);
        let kernel = thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..4 {
                let cons = k.consumer.load(Ordering::Relaxed);
                let prod = k.producer.load(Ordering::Acquire);
                for i in cons..prod {
                    // SAFETY: a published entry (loom checks the access).
                    got.push(k.entries[(i & 1) as usize].with(|p| unsafe { *p }));
                }
                k.consumer.store(prod, Ordering::Release);
                if got.len() == 3 {
                    break;
                }
                thread::yield_now();
            }
            got
        });
        // SAFETY: `mem` outlives the end (the closure owns an Arc).
        let mut p = unsafe { ProdRing::new(mem.ptrs()) };
        let mut sent = 0;
        for _ in 0..4 {
            let n = p.free(3 - sent);
            for k in 0..n {
                // SAFETY: `n` slots are free.
                unsafe { p.write(k, 10 + sent + k) };
            }
            p.submit(n);
            sent += n;
            if sent == 3 {
                break;
            }
            thread::yield_now();
        }
        let got = kernel.join().unwrap();
        // Bounded retries: what arrived is a prefix of what was sent.
        assert!(got.len() as u32 <= sent);
        assert_eq!(got, (10..10 + got.len() as u32).collect::<Vec<_>>());
    });
}

/// The kernel produces 3 values through a 2-entry ring (Rx, completion);
/// user space consumes them. In order, no entry read before it is written.
#[test]
fn kernel_producer_user_consumer() {
    loom_model(|| {
        let mem = RingMemory::new(2);
        let k = Arc::clone(&mem);
        let kernel = thread::spawn(move || {
            let mut sent = 0u32;
            for _ in 0..4 {
                let prod = k.producer.load(Ordering::Relaxed);
                let cons = k.consumer.load(Ordering::Acquire);
                if prod.wrapping_sub(cons) < 2 {
                    // SAFETY: a free slot (loom checks the access).
                    k.entries[(prod & 1) as usize].with_mut(|p| unsafe { p.write(20 + sent) });
                    k.producer.store(prod + 1, Ordering::Release);
                    sent += 1;
                    if sent == 3 {
                        break;
                    }
                }
                thread::yield_now();
            }
            sent
        });
        // SAFETY: as above.
        let mut c = unsafe { ConsRing::new(mem.ptrs()) };
        let mut got = Vec::new();
        for _ in 0..4 {
            let n = c.ready(2);
            for k in 0..n {
                // SAFETY: `n` entries are ready.
                got.push(unsafe { c.read(k) });
            }
            c.release(n);
            if got.len() == 3 {
                break;
            }
            thread::yield_now();
        }
        let sent = kernel.join().unwrap();
        assert!(got.len() as u32 <= sent);
        assert_eq!(got, (20..20 + got.len() as u32).collect::<Vec<_>>());
    });
}

/// Need-wakeup: user space publishes an entry then reads the flag; the
/// kernel sets the flag, then (full barrier) looks at the producer index.
/// Either the kernel sees the entry or user space sees the flag and wakes
/// it — a wake-up is never lost.
#[test]
fn need_wakeup_is_never_lost() {
    loom_model(|| {
        let mem = RingMemory::new(2);
        let k = Arc::clone(&mem);
        let kernel = thread::spawn(move || {
            k.flags.store(NEED_WAKEUP, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            k.producer.load(Ordering::Acquire) != 0
        });
        // SAFETY: as above.
        let mut p = unsafe { ProdRing::new(mem.ptrs()) };
        // SAFETY: the ring is empty.
        unsafe { p.write(0, 1) };
        p.submit(1);
        let user_saw_flag = p.needs_wakeup();
        let kernel_saw_entry = kernel.join().unwrap();
        assert!(user_saw_flag || kernel_saw_entry, "lost wake-up");
    });
}
