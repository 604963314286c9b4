//! The queues of a memif port and the slots through which the control
//! thread hands them their rings.
//!
//! A [`Slot`] holds one ring while the link is up. The control thread
//! installs a ring into an empty slot and then sets `ready`; the queue
//! checks `ready` once per burst and, to use the ring, claims the slot's
//! `busy` flag and checks `ready` again. To take the ring away the control
//! thread clears `ready` and waits, a bounded time, until `busy` is clear:
//! from then on no queue touches the ring, and its memory may be unmapped.

use std::cell::UnsafeCell;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::counter::Counter;
use crate::mbuf::{Burst, BurstSlice, Mbuf, MbufPool};
use crate::memif::RING_FLAG_MASK_INT;
use crate::memif::ring::{Consumer, Producer, RingErrors, RingPacket};
use crate::port::{PortCounters, PortError, RxQueue, TxQueue};

/// Packets a Tx queue hands the producer at once.
const TX_CHUNK: usize = 64;

/// How long the control thread waits for a queue to leave a ring.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(2);

/// One ring, lent by the control thread to one queue.
pub(super) struct Slot<T> {
    /// Set by the control thread once the ring is installed; cleared before
    /// it is taken away.
    ready: AtomicBool,
    /// Set by the queue while it uses the ring.
    busy: AtomicBool,
    ring: UnsafeCell<Option<T>>,
}

// SAFETY: the ring inside is reached only by the holder of `busy` (claimed
// with a compare-exchange, so one at a time) while `ready` is set, or by the
// control thread while `ready` is clear and `busy` is not held: never by two
// threads at once. `T: Send` lets it move between those threads.
unsafe impl<T: Send> Sync for Slot<T> {}

/// Clears `busy` when the queue leaves the ring, even by unwinding.
struct Leave<'a>(&'a AtomicBool);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl<T> Slot<T> {
    pub(super) fn new() -> Slot<T> {
        Slot {
            ready: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            ring: UnsafeCell::new(None),
        }
    }

    /// Whether a ring is installed.
    pub(super) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Runs `f` on the ring if one is installed; `None` if not (or if
    /// another thread is using it).
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        if self
            .busy
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let _leave = Leave(&self.busy);
        // Paired with the control thread's SeqCst store of `ready = false`
        // and load of `busy`: either it sees `busy` held and waits, or this
        // load sees `ready` clear and the ring is not touched.
        if !self.ready.load(Ordering::SeqCst) {
            return None;
        }
        // SAFETY: `busy` is held by this call and `ready` was set after it
        // was claimed, so the control thread neither writes nor takes the
        // ring until `_leave` clears `busy` (see the `Sync` impl).
        let ring = unsafe { (*self.ring.get()).as_mut() }?;
        Some(f(ring))
    }

    /// Installs `ring` (control thread), replacing what the slot held.
    /// Gives `ring` back if a queue still holds the slot after the bound of
    /// [`take`](Self::take).
    pub(super) fn install(&self, ring: T) -> Result<(), T> {
        if self.take().is_err() {
            return Err(ring);
        }
        // SAFETY: `take` cleared `ready` and saw `busy` clear after that,
        // so no queue is in the cell and none enters it until `ready` is
        // set again; only the control thread installs and takes.
        unsafe { *self.ring.get() = Some(ring) };
        self.ready.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Takes the ring away (control thread): clears `ready`, waits until no
    /// queue uses the ring, returns it. `Err(())` if a queue held it longer
    /// than the bound; the ring then stays in the slot (its memory mapped)
    /// until the slot is dropped.
    pub(super) fn take(&self) -> Result<Option<T>, ()> {
        self.ready.store(false, Ordering::SeqCst);
        let deadline = Instant::now() + LEAVE_TIMEOUT;
        while self.busy.load(Ordering::SeqCst) {
            if Instant::now() > deadline {
                return Err(());
            }
            std::thread::yield_now();
        }
        // SAFETY: `ready` is clear and `busy` was seen clear after that, so
        // no queue is in the ring and none enters it (see `with`).
        Ok(unsafe { (*self.ring.get()).take() })
    }
}

/// What a queue reports of its ring's errors: the counters last published.
#[derive(Default)]
struct Published(RingErrors);

/// A ring's error counters as xstats, shared by the Rx and Tx sides.
pub(super) struct ErrorCounters {
    bad_descriptors: Arc<Counter>,
    too_long: Arc<Counter>,
    incomplete_chains: Arc<Counter>,
    bad_index: Arc<Counter>,
}

impl ErrorCounters {
    pub(super) fn register(counters: &PortCounters, dir: &str) -> ErrorCounters {
        let x = &counters.xstats;
        ErrorCounters {
            bad_descriptors: x.register(&format!("{dir}_bad_descriptor_errors")),
            too_long: x.register(&format!("{dir}_chain_too_long_errors")),
            incomplete_chains: x.register(&format!("{dir}_incomplete_chain_errors")),
            bad_index: x.register(&format!("{dir}_bad_ring_index")),
        }
    }

    /// Adds what `now` counted since `last`; returns the packets dropped.
    fn publish(&self, last: &mut Published, now: RingErrors) -> u64 {
        let d = |a: u64, b: u64| a.wrapping_sub(b);
        let bad = d(now.bad_descriptor, last.0.bad_descriptor);
        let long = d(now.too_long, last.0.too_long);
        let incomplete = d(now.incomplete_chain, last.0.incomplete_chain);
        let index = d(now.bad_index, last.0.bad_index);
        if bad | long | incomplete | index != 0 {
            self.bad_descriptors.add(bad);
            self.too_long.add(long);
            self.incomplete_chains.add(incomplete);
            self.bad_index.add(index);
            last.0 = now;
        }
        bad + long + incomplete
    }
}

/// The ring an Rx queue reads.
pub(super) struct RxRing {
    pub(super) consumer: Consumer,
    published: Published,
}

impl RxRing {
    pub(super) fn new(consumer: Consumer) -> RxRing {
        let published = Published(consumer.errors());
        RxRing {
            consumer,
            published,
        }
    }
}

/// The ring a Tx queue fills, and the peer's interrupt eventfd for it.
pub(super) struct TxRing {
    pub(super) producer: Producer,
    pub(super) interrupt: OwnedFd,
    published: Published,
}

impl TxRing {
    pub(super) fn new(producer: Producer, interrupt: OwnedFd) -> TxRing {
        let published = Published(producer.errors());
        TxRing {
            producer,
            interrupt,
            published,
        }
    }
}

/// The rings of a port's connection, one slot per queue.
pub(super) struct Link {
    pub(super) rx: Box<[Slot<RxRing>]>,
    pub(super) tx: Box<[Slot<TxRing>]>,
}

/// Copies `packet` into `head`, a fresh mbuf, chaining more from `pool`
/// when it does not fit; `None` (the buffers freed) if the pool runs dry.
fn copy_in(pool: &MbufPool, mut head: Mbuf, port_id: u16, packet: &RingPacket<'_>) -> Option<Mbuf> {
    let _ = head.set_port(port_id);
    let len = packet.len();
    let k = len.min(head.tailroom() as usize);
    let mut copied = packet.copy_to(0, head.append(k).ok()?);
    while copied < len {
        let mut seg = pool.alloc()?;
        let k = (len - copied).min(seg.tailroom() as usize);
        if k == 0 {
            return None;
        }
        copied += packet.copy_to(copied, seg.append(k).ok()?);
        head.chain(seg).ok()?;
    }
    Some(head)
}

/// Buffers an Rx queue keeps taken from the pool for its next packets.
const RX_SPARE: usize = 64;

/// Rx queue `q` of a memif port: copies packets out of its ring into mbufs.
pub(super) struct MemifRx {
    pub(super) link: Arc<Link>,
    pub(super) pool: MbufPool,
    /// Buffers taken from the pool for the next packets, so a packet leaves
    /// the ring only when there is a buffer for it (the census counts them
    /// as posted).
    pub(super) spare: Burst<RX_SPARE>,
    pub(super) port_id: u16,
    pub(super) errors: ErrorCounters,
    pub(super) counters: Arc<PortCounters>,
    pub(super) q: usize,
    pub(super) started: bool,
}

/// Tops `spare` up to `want` buffers (at most [`RX_SPARE`]): one bulk get,
/// or one at a time when the pool is short of a bulk. Returns whether the
/// pool ran short.
fn refill_spare(pool: &MbufPool, spare: &mut Burst<RX_SPARE>, want: usize) -> bool {
    let want = want.min(RX_SPARE);
    let missing = want.saturating_sub(spare.len());
    if missing == 0 || pool.alloc_bulk(spare, missing).is_ok() {
        return false;
    }
    while spare.len() < want {
        match pool.alloc() {
            // Room: below `want`, at most the capacity.
            Some(m) => drop(spare.push(m)),
            None => return true,
        }
    }
    false
}

impl RxQueue for MemifRx {
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.rx[self.q];
        let (mut n, mut bytes, mut nombuf) = (0usize, 0u64, 0u64);
        let slot = &self.link.rx[self.q];
        let (pool, spare, port_id) = (&self.pool, &mut self.spare, self.port_id);
        if self.started && burst.free() != 0 && slot.is_ready() {
            // Rounds of at most RX_SPARE packets while the ring has them,
            // up to the burst's room in packets taken off the ring.
            let mut budget = burst.free();
            loop {
                let free = burst.free().min(budget);
                if refill_spare(pool, spare, free) {
                    // The packets wait in the ring for buffers.
                    stats.nombuf.inc();
                }
                let max = free.min(spare.len());
                if max == 0 {
                    break;
                }
                let errors = &self.errors;
                let mut got = 0;
                let dropped = slot.with(|ring| {
                    // The buffers the copies go to (taken from the end), one
                    // per packet waiting: an empty poll touches none.
                    let ready = ring.consumer.ready().min(max);
                    for m in spare.iter().rev().take(ready) {
                        m.prefetch_data();
                    }
                    got = ring.consumer.recv_packets(max, |packet| {
                        // One spare per delivered packet: at most `max`.
                        let Some(head) = spare.pop() else { return };
                        match copy_in(pool, head, port_id, packet) {
                            Some(m) => {
                                bytes += packet.len() as u64;
                                n += 1;
                                // Room: at most `free` packets are delivered.
                                let _ = burst.push(m);
                            }
                            None => nombuf += 1,
                        }
                    });
                    errors.publish(&mut ring.published, ring.consumer.errors())
                });
                if let Some(dropped) = dropped.filter(|d| *d != 0) {
                    stats.errors.add(dropped);
                }
                budget -= got;
                if got < max || burst.free() == 0 || budget == 0 {
                    break;
                }
            }
        }
        if nombuf != 0 {
            // Packets longer than one buffer whose chain found the pool
            // empty: dropped, as a NIC misses what it has no buffer for.
            stats.nombuf.add(nombuf);
            stats.missed.add(nombuf);
        }
        stats.record_burst(n, bytes);
        stats.posted.set(spare.len() as u64);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        self.started = false;
        self.spare.clear();
        self.counters.rx[self.q].posted.set(0);
    }
}

/// Tx queue `q` of a memif port: copies mbufs into its ring's buffers.
pub(super) struct MemifTx {
    pub(super) link: Arc<Link>,
    /// Gathers a chained mbuf into one slice for the producer.
    pub(super) scratch: Vec<Vec<u8>>,
    pub(super) errors: ErrorCounters,
    /// Packets dropped because the link was down: `tx_not_ready_errors`.
    pub(super) not_ready: Arc<Counter>,
    pub(super) counters: Arc<PortCounters>,
    pub(super) q: usize,
    pub(super) started: bool,
}

/// Signals `fd`, an eventfd.
fn kick(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: `one` is 8 readable bytes for the call; a failed write (the
    // counter full) loses nothing, the peer is already due to wake.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
}

impl TxQueue for MemifTx {
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.tx[self.q];
        if !self.started || burst.is_empty() {
            stats.record_burst(0, 0);
            return 0;
        }
        let slot = &self.link.tx[self.q];
        if !slot.is_ready() {
            // No peer: the packets are dropped, counted.
            let n = burst.len();
            drop(burst.drain_front(n));
            self.not_ready.add(n as u64);
            stats.errors.add(n as u64);
            stats.record_burst(0, 0);
            return n;
        }
        let (mut taken, mut dropped, mut bytes) = (0usize, 0u64, 0u64);
        // In chunks of TX_CHUNK: the packets' bytes as slices on the stack.
        while taken < burst.len() {
            let packets = &burst.as_slice()[taken..];
            let packets = &packets[..packets.len().min(TX_CHUNK)];
            let chained = packets.iter().filter(|m| m.nb_segs() > 1).count();
            if self.scratch.len() < chained {
                self.scratch.resize_with(chained, Vec::new);
            }
            let mut gathered = self.scratch.iter_mut();
            let mut views: [&[u8]; TX_CHUNK] = [&[]; TX_CHUNK];
            for (view, m) in views.iter_mut().zip(packets) {
                if m.nb_segs() > 1 {
                    // One scratch buffer per chained packet of the chunk.
                    if let Some(buf) = gathered.next() {
                        buf.clear();
                        m.segments().for_each(|s| buf.extend_from_slice(s));
                        *view = buf;
                    }
                } else {
                    *view = m.data();
                }
            }
            let views = &views[..packets.len()];
            let errors = &self.errors;
            let (n, lost, sent_bytes) = slot
                .with(|ring| {
                    let before = ring.producer.sent_bytes();
                    let n = ring.producer.send_burst(views);
                    let lost = errors.publish(&mut ring.published, ring.producer.errors());
                    if n != 0 && ring.producer.ring().flags() & RING_FLAG_MASK_INT == 0 {
                        kick(&ring.interrupt);
                    }
                    (n, lost, ring.producer.sent_bytes() - before)
                })
                .unwrap_or((0, 0, 0));
            // The bytes of packets the ring dropped are not sent bytes.
            bytes += sent_bytes;
            taken += n;
            dropped += lost;
            if n < packets.len() {
                break;
            }
        }
        drop(burst.drain_front(taken));
        if dropped != 0 {
            stats.errors.add(dropped);
        }
        stats.record_burst(taken.saturating_sub(dropped as usize), bytes);
        taken
    }

    fn start(&mut self) -> Result<(), PortError> {
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        self.started = false;
    }
}
