//! The taps the forwarding lcores call, and the bounded buffer of copies
//! behind each one.
//!
//! # The buffer
//! A capture session gives a tap `slots` slots of `snaplen` bytes each, and
//! two single-producer single-consumer rings of slot indices from the
//! library ([`sluice::ring`]):
//! - `free`: slots the capture thread has emptied (it produces, the lcore
//!   consumes);
//! - `filled`: slots the lcore has written (the lcore produces, the capture
//!   thread consumes).
//!
//! Every index is in exactly one place at a time (one of the two rings, the
//! lcore's hands or the capture thread's hands), so a slot is only ever
//! touched by the one thread holding its index. The rings order the
//! accesses: the lcore writes a slot then publishes its index in `filled`
//! (the ring's Release), and the capture thread reads the slot only after
//! taking the index from `filled` (the ring's Acquire, which names that
//! Release); the same holds the other way through `free`, so the lcore
//! never writes a slot the capture thread is still reading. No atomic of
//! this module orders data: they are the ring's.
//!
//! # The lcore's side
//! [`Tap::is_active`] is one Relaxed load: the lcore pays one predictable
//! branch per burst while nothing is captured. While active,
//! [`Tap::mirror`] takes the lcore's end of the buffer with a `try_lock`
//! (uncontended: the capture thread only locks it to start and end a
//! session) and copies each packet into a free slot; with no free slot the
//! copy is dropped and counted in [`Tap::overflow`]. The lcore never waits
//! and never holds a packet: copies only.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use serde::{Deserialize, Serialize};
use sluice::mbuf::Mbuf;
use sluice::ring::{Consumer, Producer, Ring};

/// Which way the packets a tap sees go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Received: mirrored after `rx_burst`.
    Rx,
    /// Sent: mirrored before `tx_burst`.
    Tx,
}

impl Direction {
    /// `rx` or `tx`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Rx => "rx",
            Direction::Tx => "tx",
        }
    }
}

/// One copied packet, as the capture thread reads it.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The TSC when the lcore mirrored the packet's burst.
    pub tsc: u64,
    /// The packet's whole length.
    pub orig_len: u32,
    /// Its first bytes, up to the session's snap length.
    pub data: &'a [u8],
}

/// One slot of the buffer.
struct Slot {
    tsc: u64,
    orig_len: u32,
    cap_len: u32,
    data: Box<[u8]>,
}

/// The slots of one session.
struct Slots(Box<[UnsafeCell<Slot>]>);

// SAFETY: a slot is accessed only by the thread holding its index, and an
// index moves between threads through the rings, whose Release/Acquire
// pairs order the accesses (see the module docs); `Slot` itself is `Send`.
unsafe impl Sync for Slots {}

/// The lcore's end of a session.
struct WriterEnd {
    slots: Arc<Slots>,
    free: Consumer<u32>,
    filled: Producer<u32>,
}

/// The capture thread's end of a session.
struct ReaderEnd {
    slots: Arc<Slots>,
    free: Producer<u32>,
    filled: Consumer<u32>,
}

/// A session's figures when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TapEnd {
    /// Copies dropped because the buffer was full (or the tap busy).
    pub dropped: u64,
}

/// The tap of one queue in one direction (see the module docs).
#[derive(Debug, Default)]
pub struct Tap {
    active: AtomicBool,
    writer: Mutex<Option<WriterEnd>>,
    reader: Mutex<Option<ReaderEnd>>,
    overflow: AtomicU64,
    /// `overflow` when the running session started.
    overflow_at_start: AtomicU64,
}

impl std::fmt::Debug for WriterEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterEnd")
            .field("slots", &self.slots.0.len())
            .finish()
    }
}

impl std::fmt::Debug for ReaderEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderEnd")
            .field("slots", &self.slots.0.len())
            .finish()
    }
}

/// Locks `m`, a panic of an earlier holder notwithstanding (the ends hold
/// no invariant a panic can break: indices are only ever lost, never
/// duplicated).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tap {
    /// An idle tap.
    pub fn new() -> Tap {
        Tap::default()
    }

    /// Whether a capture wants this tap's packets: one Relaxed load, the
    /// only cost an lcore pays per burst while nothing is captured.
    #[inline(always)]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Copies up to the snap length of each packet of `packets`, stamped
    /// `tsc`, into the buffer; a copy with no free slot is dropped and
    /// counted. Call it only when [`is_active`](Tap::is_active) (it is
    /// harmless otherwise). Never waits.
    #[cold]
    #[inline(never)]
    pub fn mirror(&self, packets: &[Mbuf], tsc: u64) {
        if packets.is_empty() {
            return;
        }
        let mut guard = match self.writer.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // Another thread mirrors on this tap, or the capture thread
                // is starting or ending the session: the copies are dropped.
                if self.is_active() {
                    self.count_overflow(packets.len() as u64);
                }
                return;
            }
        };
        let Some(w) = guard.as_mut() else {
            return;
        };
        let mut dropped = 0u64;
        for m in packets {
            let Some(i) = w.free.pop() else {
                dropped += 1;
                continue;
            };
            let Some(cell) = w.slots.0.get(i as usize) else {
                continue;
            };
            // Index `i` came out of `free`; the ring's Acquire in `pop`
            // orders this write after the capture thread's last read.
            // SAFETY: slot `i` is this thread's until published in `filled`.
            let slot = unsafe { &mut *cell.get() };
            slot.tsc = tsc;
            slot.orig_len = m.pkt_len();
            let mut at = 0;
            for seg in m.segments() {
                let n = seg.len().min(slot.data.len() - at);
                slot.data[at..at + n].copy_from_slice(&seg[..n]);
                at += n;
                if at == slot.data.len() {
                    break;
                }
            }
            slot.cap_len = at as u32;
            // `filled` holds every index: it cannot be full.
            let _ = w.filled.push(i);
        }
        if dropped != 0 {
            self.count_overflow(dropped);
        }
    }

    #[cold]
    fn count_overflow(&self, n: u64) {
        self.overflow.fetch_add(n, Ordering::Relaxed);
    }

    /// Copies dropped on this tap since it was made, over every session
    /// (`capture_overflow`).
    pub fn overflow(&self) -> u64 {
        self.overflow.load(Ordering::Relaxed)
    }

    /// Starts a session: `slots` slots of `snaplen` bytes (both at least
    /// 1), then the tap is active. Called by the capture thread; an earlier
    /// session still running is ended first.
    pub fn start(&self, slots: u32, snaplen: u32) {
        self.stop();
        let slots = slots.clamp(1, 1 << 20);
        let snaplen = snaplen.max(1) as usize;
        let cells: Box<[UnsafeCell<Slot>]> = (0..slots)
            .map(|_| {
                UnsafeCell::new(Slot {
                    tsc: 0,
                    orig_len: 0,
                    cap_len: 0,
                    data: vec![0; snaplen].into_boxed_slice(),
                })
            })
            .collect();
        let slots_arc = Arc::new(Slots(cells));
        let capacity = (slots as usize).next_power_of_two();
        let (mut free_tx, free_rx) = match Ring::spsc(capacity) {
            Ok(ends) => ends,
            Err(_) => return,
        };
        let (filled_tx, filled_rx) = match Ring::spsc(capacity) {
            Ok(ends) => ends,
            Err(_) => return,
        };
        for i in 0..slots {
            let _ = free_tx.push(i);
        }
        *lock(&self.reader) = Some(ReaderEnd {
            slots: Arc::clone(&slots_arc),
            free: free_tx,
            filled: filled_rx,
        });
        *lock(&self.writer) = Some(WriterEnd {
            slots: slots_arc,
            free: free_rx,
            filled: filled_tx,
        });
        self.overflow_at_start
            .store(self.overflow(), Ordering::Relaxed);
        self.active.store(true, Ordering::Relaxed);
    }

    /// Stops mirroring without ending the session: the copies held can
    /// still be drained. Called by the capture thread once it has all the
    /// packets it wants.
    pub fn pause(&self) {
        self.active.store(false, Ordering::Relaxed);
    }

    /// Copies dropped since the session started.
    pub fn session_dropped(&self) -> u64 {
        self.overflow()
            .wrapping_sub(self.overflow_at_start.load(Ordering::Relaxed))
    }

    /// Hands up to `max` copies to `each`, oldest first, and gives their
    /// slots back to the lcore; how many. Called by the capture thread.
    pub fn drain(&self, max: usize, mut each: impl FnMut(Record<'_>)) -> usize {
        let mut guard = lock(&self.reader);
        let Some(r) = guard.as_mut() else {
            return 0;
        };
        let mut n = 0;
        while n < max {
            let Some(i) = r.filled.pop() else {
                break;
            };
            if let Some(cell) = r.slots.0.get(i as usize) {
                // SAFETY: index `i` came out of `filled`, so this thread
                // holds it until it goes back into `free` below; the ring's
                // Acquire in `pop` orders this read after the lcore's write.
                let slot = unsafe { &*cell.get() };
                each(Record {
                    tsc: slot.tsc,
                    orig_len: slot.orig_len,
                    data: &slot.data[..slot.cap_len as usize],
                });
            }
            // `free` holds every index: it cannot be full.
            let _ = r.free.push(i);
            n += 1;
        }
        n
    }

    /// Ends the session: the tap goes idle, the lcore's end is taken away
    /// (waiting for a `mirror` under way to finish), the copies not yet
    /// drained are handed to `rest`, and the session's drops returned.
    pub fn finish(&self, rest: impl FnMut(Record<'_>)) -> TapEnd {
        self.active.store(false, Ordering::Relaxed);
        let writer = lock(&self.writer).take();
        let was_running = writer.is_some();
        drop(writer);
        if was_running {
            self.drain(usize::MAX, rest);
        }
        *lock(&self.reader) = None;
        let dropped = if was_running {
            self.session_dropped()
        } else {
            0
        };
        TapEnd { dropped }
    }

    /// Ends the session, its copies discarded.
    pub fn stop(&self) -> TapEnd {
        self.finish(|_| {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};

    fn pool() -> MbufPool {
        MbufPool::new(MbufPoolConfig {
            size: 255,
            cache_size: 0,
            ..Default::default()
        })
        .unwrap()
    }

    /// `n` packets of `len` bytes, packet `i` filled with byte `i`.
    fn packets(pool: &MbufPool, n: usize, len: usize) -> Burst<64> {
        let mut b: Burst<64> = Burst::new();
        pool.alloc_bulk(&mut b, n).unwrap();
        for (i, m) in b.iter_mut().enumerate() {
            m.append(len).unwrap().fill(i as u8);
        }
        b
    }

    /// Every copy the tap holds: (tsc, orig_len, data).
    fn drained(tap: &Tap) -> Vec<(u64, u32, Vec<u8>)> {
        let mut out = Vec::new();
        tap.drain(usize::MAX, |r| {
            out.push((r.tsc, r.orig_len, r.data.to_vec()))
        });
        out
    }

    #[test]
    fn an_idle_tap_copies_nothing() {
        let pool = pool();
        let tap = Tap::new();
        assert!(!tap.is_active());
        let b = packets(&pool, 4, 60);
        tap.mirror(b.as_slice(), 1);
        assert!(drained(&tap).is_empty());
        assert_eq!(tap.overflow(), 0);
        drop(b);
        assert!(pool.is_full());
    }

    #[test]
    fn below_capacity_every_copy_arrives_in_order_cut_to_the_snap_length() {
        let pool = pool();
        let tap = Tap::new();
        tap.start(16, 40);
        assert!(tap.is_active());
        let b = packets(&pool, 10, 60);
        tap.mirror(&b.as_slice()[..6], 7);
        tap.mirror(&b.as_slice()[6..], 8);
        let got = drained(&tap);
        assert_eq!(got.len(), 10);
        for (i, (tsc, orig_len, data)) in got.iter().enumerate() {
            assert_eq!(*tsc, if i < 6 { 7 } else { 8 });
            assert_eq!(*orig_len, 60);
            assert_eq!(data, &vec![i as u8; 40]);
        }
        // The slots came back: a second round fits again, all 16.
        let more = packets(&pool, 16, 20);
        tap.mirror(more.as_slice(), 9);
        let got = drained(&tap);
        assert_eq!(got.len(), 16);
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, g)| g.2 == vec![i as u8; 20])
        );
        assert_eq!(tap.stop(), TapEnd { dropped: 0 });
        assert!(!tap.is_active());
        drop((b, more));
        assert!(pool.is_full());
    }

    #[test]
    fn a_full_buffer_drops_the_copies_and_counts_them() {
        let pool = pool();
        let tap = Tap::new();
        tap.start(4, 64);
        let b = packets(&pool, 10, 60);
        tap.mirror(b.as_slice(), 1);
        tap.mirror(&b.as_slice()[..3], 2);
        assert_eq!(tap.overflow(), 6 + 3);
        // The first four made it; the packets themselves are untouched.
        let got = drained(&tap);
        assert_eq!(got.iter().map(|g| g.2[0]).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert!(
            b.iter()
                .enumerate()
                .all(|(i, m)| m.data() == vec![i as u8; 60])
        );
        assert_eq!(tap.stop(), TapEnd { dropped: 9 });
        // A new session counts its own drops only.
        tap.start(2, 64);
        tap.mirror(&b.as_slice()[..3], 3);
        let mut rest = Vec::new();
        let end = tap.finish(|r| rest.push(r.data[0]));
        assert_eq!((end.dropped, rest), (1, vec![0, 1]));
        assert_eq!(tap.overflow(), 10);
        drop(b);
        assert!(pool.is_full());
    }

    #[test]
    fn a_chained_packet_is_copied_across_its_segments() {
        let pool = pool();
        let tap = Tap::new();
        tap.start(2, 100);
        let mut b = packets(&pool, 2, 30);
        let tail = b.pop().unwrap();
        let mut head = b.pop().unwrap();
        head.chain(tail).map_err(|(e, _)| e).unwrap();
        assert_eq!(head.pkt_len(), 60);
        tap.mirror(std::slice::from_ref(&head), 5);
        let got = drained(&tap);
        let mut want = vec![0u8; 30];
        want.extend_from_slice(&[1; 30]);
        assert_eq!(got, [(5, 60, want)]);
        tap.stop();
        drop(head);
        assert!(pool.is_full());
    }

    #[test]
    fn copies_cross_threads_whole_and_in_order() {
        let pool = pool();
        let tap = Arc::new(Tap::new());
        tap.start(8, 8);
        const ROUNDS: u64 = 2000;
        let writer = Arc::clone(&tap);
        let b = packets(&pool, 1, 8);
        let mut got: Vec<u64> = Vec::new();
        std::thread::scope(|s| {
            let b = &b;
            let w = s.spawn(move || {
                for round in 0..ROUNDS {
                    writer.mirror(b.as_slice(), round);
                }
            });
            while !w.is_finished() {
                tap.drain(usize::MAX, |r| {
                    assert_eq!(r.data, &[0; 8]);
                    got.push(r.tsc);
                });
            }
        });
        tap.drain(usize::MAX, |r| got.push(r.tsc));
        // Every copy either arrived, in order, or was counted as dropped.
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        assert_eq!(got.len() as u64 + tap.overflow(), ROUNDS);
        tap.stop();
        drop(b);
        assert!(pool.is_full());
    }
}
