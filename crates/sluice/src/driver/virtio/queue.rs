//! The data path: Rx queue `i` keeps vring `2i` stocked with mbufs and
//! takes back the frames the backend wrote into them; Tx queue `i` puts
//! its packets' mbufs on vring `2i + 1` and frees them once the backend
//! returns them. No frame is copied, except a Tx packet in memory the
//! backend does not map.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

use crate::counter::Counter;
use crate::mbuf::{Burst, BurstSlice, HEADER_SIZE, Mbuf, MbufHeader, MbufPool, RearmData};
use crate::mempool::Elem;
use crate::port::{PortCounters, PortError, RxFrameCheck, RxQueue, TxQueue};
use crate::virtio::VirtioError;
use crate::virtio::memory::prefetch_for_write;
use crate::virtio::net_hdr::HEADER_LEN;
use crate::virtio::split::{DriverQueue, Segment};

use super::Table;

/// Free descriptors an Rx ring gathers before it is refilled, and the
/// buffers taken from the pool at once.
const REFILL_BATCH: u16 = 32;
/// How far past the frame being taken the next returned buffer is
/// prefetched (its virtio-net header is read, its mbuf header written, and
/// the application reads the frame).
const PREFETCH_AHEAD: u16 = 2;

/// The queue holds the slot (inside a burst).
const BUSY: u8 = 1;
/// The control thread holds the slot.
const CONTROL: u8 = 2;

/// A vring a queue drives, and who may touch it: the queue claims it once
/// per burst with one compare-exchange (`0 -> BUSY`) and gives it back with
/// a plain store; a claim that fails moves nothing that burst and never
/// waits. The control thread, to install a ring or take it back, claims
/// it (`0 -> CONTROL`) once the queue's burst is over; while it waits, the
/// queue makes no new claims, so a polling loop cannot keep it out.
pub(super) struct VringSlot {
    /// 0, [`BUSY`] or [`CONTROL`]: who holds `ring`.
    state: AtomicU8,
    /// Control claims waiting or held: the queue leaves the slot alone
    /// meanwhile (a hint for fairness; `state` alone decides who holds it).
    wanted: AtomicU32,
    ring: UnsafeCell<Option<Vring>>,
}

// SAFETY: `ring` is touched only by the holder of `state` — the queue
// between its `0 -> BUSY` exchange and storing 0, the control thread
// between its `0 -> CONTROL` exchange and storing 0 — so never by two
// threads at once; the Acquire exchanges and Release stores order those
// accesses. `Vring` is `Send`.
unsafe impl Sync for VringSlot {}

impl VringSlot {
    pub(super) fn new() -> VringSlot {
        VringSlot {
            state: AtomicU8::new(0),
            wanted: AtomicU32::new(0),
            ring: UnsafeCell::new(None),
        }
    }

    /// The ring for one burst, without waiting: `None` while the control
    /// thread holds it or waits for it (installing or taking it back).
    #[inline]
    pub(super) fn enter(&self) -> Option<SlotGuard<'_>> {
        if self.wanted.load(Ordering::Relaxed) != 0 {
            return None;
        }
        self.state
            .compare_exchange(0, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| SlotGuard {
                slot: self,
                control: false,
            })
    }

    /// The control thread's hold on the ring: waits for the queue's burst
    /// to end (a burst is bounded; the queue claims nothing new meanwhile).
    pub(super) fn control(&self) -> SlotGuard<'_> {
        self.wanted.fetch_add(1, Ordering::Relaxed);
        while self
            .state
            .compare_exchange(0, CONTROL, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        SlotGuard {
            slot: self,
            control: true,
        }
    }
}

/// A hold on a [`VringSlot`]'s ring: the queue's for one burst, or the
/// control thread's.
pub(super) struct SlotGuard<'a> {
    slot: &'a VringSlot,
    control: bool,
}

impl Deref for SlotGuard<'_> {
    type Target = Option<Vring>;

    #[inline]
    fn deref(&self) -> &Option<Vring> {
        // SAFETY: this guard holds the slot's state (`VringSlot` docs): no
        // other access to the cell until it is dropped, and the borrow
        // cannot outlive it.
        unsafe { &*self.slot.ring.get() }
    }
}

impl DerefMut for SlotGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Option<Vring> {
        // SAFETY: as in `deref`, and `&mut self` makes this the only borrow
        // through the guard.
        unsafe { &mut *self.slot.ring.get() }
    }
}

impl Drop for SlotGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: what the holder did to the ring happens before the next
        // holder's Acquire exchange. Nobody else changes `state` while it
        // is held, so a plain store gives it back.
        self.slot.state.store(0, Ordering::Release);
        if self.control {
            self.slot.wanted.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The buffers an Rx vring posted, per head: plain free buffers of the
/// queue's pool, taken from its mempool without their headers being read
/// or written. A free buffer has its own memory, [`HEADER_SIZE`] bytes into
/// its element (the free-buffer invariants), so the address a descriptor
/// holds follows from the element's, and so does the address to prefetch
/// a burst ahead; the header is written when a frame arrives in the buffer,
/// only the cache line a received frame's fields live in, without reading
/// it (as the soft driver's Rx does). Dropping it gives them back.
struct RxBuffers {
    slots: Vec<Option<Elem>>,
}

impl RxBuffers {
    fn new(size: usize) -> RxBuffers {
        RxBuffers {
            slots: vec![None; size],
        }
    }
}

impl Drop for RxBuffers {
    fn drop(&mut self) {
        for e in self.slots.iter_mut().filter_map(Option::take) {
            // SAFETY: a buffer this ring took from its pool and owns, out of
            // the device's hands (the ring is being dropped), given back once.
            unsafe { give_back(e) };
        }
    }
}

/// Gives a posted buffer back to its pool.
///
/// # Safety
/// `e` is an element of an mbuf pool, taken from its mempool and owned by
/// the caller, who no longer uses it; the device no longer uses it either.
unsafe fn give_back(e: Elem) {
    // SAFETY: as the caller promises: a free buffer of an mbuf pool (its
    // header stale but within the free-buffer invariants), ours alone.
    let mut m = unsafe { Mbuf::from_elem(e) };
    m.reset();
    drop(m);
}

/// Where in its element a posted Rx buffer starts: past the mbuf header, 12
/// bytes before the default headroom's end, so the virtio-net header lands
/// at the end of the headroom and the frame at the data offset.
fn rx_buffer_offset(pool: &MbufPool) -> Option<usize> {
    let headroom = usize::from(pool.headroom());
    (headroom >= HEADER_LEN).then(|| HEADER_SIZE + headroom - HEADER_LEN)
}

/// A started vring: the driver side of the virtqueue and the mbufs of the
/// chains in flight. Dropping it frees them.
pub(super) struct Vring {
    /// Declared first: dropped before the table it points into.
    queue: DriverQueue,
    /// Per head (Tx): the mbuf of the chain in flight there.
    held: Vec<Option<Mbuf>>,
    /// Per head (Rx): the buffer posted there.
    posted: RxBuffers,
    /// A frame being gathered from mergeable buffers (Rx): its first
    /// segments and how many buffers are still to come.
    pending: Option<(Mbuf, u16)>,
    kick: OwnedFd,
    /// Kicks sent (the queue's `rx_kicks` / `tx_kicks`).
    kicks: Arc<Counter>,
    mrg_rxbuf: bool,
    _table: Arc<Table>,
}

impl Vring {
    pub(super) fn new(
        queue: DriverQueue,
        kick: OwnedFd,
        kicks: Arc<Counter>,
        mrg_rxbuf: bool,
        table: Arc<Table>,
    ) -> Vring {
        let size = usize::from(queue.layout().size());
        Vring {
            queue,
            held: (0..size).map(|_| None).collect(),
            posted: RxBuffers::new(size),
            pending: None,
            kick,
            kicks,
            mrg_rxbuf,
            _table: table,
        }
    }

    /// Posts a free buffer from `pool` on every free descriptor, as a
    /// device-writable buffer whose first 12 bytes are the headroom's last
    /// (the virtio-net header lands there, the frame at the data offset),
    /// and publishes them. The buffers come from the mempool in batches;
    /// their headers are not touched ([`RxBuffers`]). True when the pool
    /// ran dry first.
    pub(super) fn stock(&mut self, pool: &MbufPool, ring_errors: &Counter) -> bool {
        // The headroom holds the header (checked at setup).
        let Some(offset) = rx_buffer_offset(pool) else {
            return false;
        };
        let len = (HEADER_LEN + usize::from(pool.data_room())) as u32;
        // The pool's memory, found once: each buffer is checked against it
        // alone.
        let Some(area) = pool
            .shared_memory()
            .and_then(|m| self.queue.memory().area(m.base as u64, m.len as u64).ok())
        else {
            ring_errors.inc();
            return false;
        };
        // The descriptor lines to be written, asked for together.
        self.queue.prefetch_free_descs(self.queue.num_free());
        let mempool = pool.mempool();
        let mut batch = [Elem::DANGLING; REFILL_BATCH as usize];
        let mut added = 0;
        let mut dry = false;
        // Bounded: each round posts at least one buffer or ends.
        'fill: while self.queue.num_free() > 0 {
            let want = usize::from(self.queue.num_free()).min(batch.len());
            let got = if want == batch.len() {
                mempool.get_array_into(&mut batch).is_ok()
            } else {
                mempool.get_bulk(&mut batch[..want]).is_ok()
            };
            // Short of a batch: what is left, one by one.
            let n = if got {
                want
            } else if let Some(e) = mempool.get() {
                batch[0] = e;
                1
            } else {
                dry = true;
                break;
            };
            for (i, &e) in batch[..n].iter().enumerate() {
                let addr = e.as_ptr() as u64 + offset as u64;
                match self.queue.add_buffer(&area, addr, len, true) {
                    Ok(head) => {
                        let slot = &mut self.posted.slots[usize::from(head)];
                        debug_assert!(slot.is_none(), "a free head holds a buffer");
                        *slot = Some(e);
                        added += 1;
                    }
                    Err(_) => {
                        ring_errors.inc();
                        for &e in &batch[i..n] {
                            // SAFETY: just taken from the pool, never posted.
                            unsafe { give_back(e) };
                        }
                        break 'fill;
                    }
                }
            }
        }
        if added > 0 {
            self.publish(ring_errors);
        }
        dry
    }

    /// Publishes what was added and kicks the backend if it asks for it.
    fn publish(&mut self, ring_errors: &Counter) {
        if self.queue.publish_avail().is_err() {
            ring_errors.inc();
        }
        if self.queue.needs_kick().unwrap_or(false) {
            let one = 1u64;
            // SAFETY: a live eventfd and an 8-byte buffer.
            unsafe { libc::write(self.kick.as_raw_fd(), (&raw const one).cast(), 8) };
            self.kicks.inc();
        }
    }
}

/// The driver's named counters of one Rx queue (registered per queue under
/// one name each; xstats add them up).
pub(super) struct RxCounters {
    /// Used entries naming no chain in flight.
    pub(super) bad_used_id: Arc<Counter>,
    /// Used lengths beyond the buffer, or shorter than the header.
    pub(super) bad_used_len: Arc<Counter>,
    /// Frames whose header says 0 buffers or more than the ring holds.
    pub(super) bad_num_buffers: Arc<Counter>,
    /// Times the ring was found broken (an impossible used index).
    pub(super) ring_errors: Arc<Counter>,
}

/// See [`RxCounters`].
pub(super) struct TxCounters {
    pub(super) bad_used_id: Arc<Counter>,
    pub(super) bad_used_len: Arc<Counter>,
    pub(super) ring_errors: Arc<Counter>,
    /// Packets of more segments than the ring has descriptors, or too long
    /// to copy into one mbuf: dropped.
    pub(super) too_long: Arc<Counter>,
    /// Packets refused while no backend was there.
    pub(super) not_ready: Arc<Counter>,
}

/// An Rx queue: frames from the backend.
pub(super) struct VirtioRx {
    pub(super) slot: Arc<VringSlot>,
    pub(super) pool: MbufPool,
    pub(super) port_id: u16,
    pub(super) counters: Arc<PortCounters>,
    pub(super) check: RxFrameCheck,
    pub(super) driver: RxCounters,
    pub(super) q: usize,
}

impl VirtioRx {
    /// Turns the returned buffer `e`, where the device wrote `len` bytes,
    /// into a frame, or into a part of the pending one; returns a whole
    /// frame. `offset` is where the buffer starts in its element
    /// ([`rx_buffer_offset`]).
    ///
    /// # Safety
    /// `e` is a buffer this ring posted at `offset` ([`Vring::stock`]), now
    /// ours: the device returned it (`pop_used`, whose Acquire load makes
    /// what it wrote visible) and it has left the ring's slot array.
    unsafe fn harvest(&self, ring: &mut Vring, e: Elem, len: u32, offset: usize) -> Option<Mbuf> {
        let errors = &self.counters.rx[self.q].errors;
        let headroom = self.pool.headroom();
        // `pop_used` refused a length beyond the buffer posted, 12 bytes
        // and the data room, which fits in 16 bits (checked all the same).
        let Ok(len) = u16::try_from(len) else {
            // SAFETY: ours (the caller's contract), not kept.
            unsafe { give_back(e) };
            self.driver.bad_used_len.inc();
            errors.inc();
            return None;
        };
        // SAFETY: the buffer is ours alone (the caller's contract): a plain
        // free buffer of the pool, whose header nobody else reaches.
        let header = unsafe { &mut *e.as_ptr().cast::<MbufHeader>() };
        let rearm = |data_off: u16| {
            RearmData {
                data_off,
                refcnt: 1,
                nb_segs: 1,
                port: self.port_id,
            }
            .word()
        };
        if let Some((mut first, left)) = ring.pending.take() {
            // A following buffer of a merged frame: frame bytes only, from
            // the buffer's start (the headroom less the header's 12 bytes).
            header.rearm_word(rearm(headroom - HEADER_LEN as u16));
            header.set_rx_plain(0, 0, len, 0, 0);
            // SAFETY: a free buffer of the pool, ours, its header now that of
            // an mbuf of `len` bytes inside its own memory.
            let m = unsafe { Mbuf::from_elem(e) };
            if let Err((_, m)) = first.chain(m) {
                drop(m);
                errors.inc();
                return None;
            }
            if left > 1 {
                ring.pending = Some((first, left - 1));
                return None;
            }
            return Some(first);
        }
        if usize::from(len) < HEADER_LEN {
            // SAFETY: ours, not kept.
            unsafe { give_back(e) };
            self.driver.bad_used_len.inc();
            errors.inc();
            return None;
        }
        let buffers = if ring.mrg_rxbuf {
            // SAFETY: the virtio-net header's `num_buffers`, bytes 10..12 of
            // the buffer, inside the element (`offset` + 12 is the headroom's
            // end); the device wrote it before returning the buffer.
            let raw = unsafe {
                e.as_ptr()
                    .add(offset + 10)
                    .cast::<[u8; 2]>()
                    .read_unaligned()
            };
            u16::from_le_bytes(raw)
        } else {
            1
        };
        header.rearm_word(rearm(headroom));
        header.set_rx_plain(0, 0, len - HEADER_LEN as u16, 0, 0);
        // SAFETY: as above; the frame is the data room's first bytes.
        let m = unsafe { Mbuf::from_elem(e) };
        if buffers == 0 || buffers > ring.queue.layout().size() {
            drop(m);
            self.driver.bad_num_buffers.inc();
            errors.inc();
            return None;
        }
        if buffers > 1 {
            ring.pending = Some((m, buffers - 1));
            return None;
        }
        Some(m)
    }

    /// Posts fresh mbufs on every free descriptor, once a batch is free.
    fn refill(&self, ring: &mut Vring) {
        if ring.queue.num_free() < REFILL_BATCH.min(ring.queue.layout().size()) {
            return;
        }
        if ring.stock(&self.pool, &self.driver.ring_errors) {
            self.counters.rx[self.q].nombuf.inc();
        }
    }
}

impl RxQueue for VirtioRx {
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.rx[self.q];
        let (mut n, mut bytes) = (0usize, 0u64);
        let mut guard = self.slot.enter();
        let offset = rx_buffer_offset(&self.pool);
        if let Some(ring) = guard.as_mut().and_then(|g| g.as_mut())
            && let Some(offset) = offset
        {
            while burst.free() > 0 {
                let used = match ring.queue.pop_used() {
                    Ok(Some(used)) => used,
                    Ok(None) => break,
                    Err(VirtioError::BadUsedId { .. }) => {
                        // A frame being gathered lost a buffer: dropped.
                        ring.pending = None;
                        self.driver.bad_used_id.inc();
                        stats.errors.inc();
                        continue;
                    }
                    Err(VirtioError::BadUsedLen { head, .. }) => {
                        ring.pending = None;
                        // The chain is reclaimed: its buffer goes home.
                        if let Some(e) = ring.posted.slots[usize::from(head)].take() {
                            // SAFETY: posted by this ring, returned by the
                            // device, out of the slot array.
                            unsafe { give_back(e) };
                        }
                        self.driver.bad_used_len.inc();
                        stats.errors.inc();
                        continue;
                    }
                    Err(_) => {
                        self.driver.ring_errors.inc();
                        break;
                    }
                };
                // The buffer returned next: its virtio-net header and its
                // mbuf header on their way while this one is taken. Its
                // address needs nothing read from it. The mbuf header is
                // written here, and the virtio-net header's line on
                // transmit (a forwarded frame's header is cleared in
                // place): both come owned, the latter in one transfer from
                // the device instead of a shared copy and a later upgrade.
                // The frame is not asked for: an application that forwards
                // it unread would pull each frame's lines over from the
                // device's core for nothing, and the device's next write
                // into the buffer would have to take them back (the pair
                // ran up to half again as fast without it); one that reads the
                // frame fetches it then, as with any driver.
                if let Some(next) = ring.queue.peek_used_id(PREFETCH_AHEAD)
                    && let Some(e) = ring.posted.slots[usize::from(next)]
                {
                    prefetch_for_write(e.as_ptr().wrapping_add(offset));
                    prefetch_for_write(e.as_ptr());
                }
                let Some(e) = ring.posted.slots[usize::from(used.head)].take() else {
                    self.driver.bad_used_id.inc();
                    stats.errors.inc();
                    continue;
                };
                // SAFETY: posted by this ring at `offset`, returned by the
                // device, now out of the slot array.
                let Some(frame) = (unsafe { self.harvest(ring, e, used.len, offset) }) else {
                    continue;
                };
                let len = frame.pkt_len() as usize;
                if !self.check.accepts(len) {
                    self.check.count_drop(len, &stats.errors);
                    continue;
                }
                bytes += len as u64;
                n += 1;
                // Room: the loop runs while the burst has some.
                let _ = burst.push(frame);
            }
            self.refill(ring);
            stats.posted.set(u64::from(ring.queue.in_flight()));
        }
        drop(guard);
        stats.record_burst(n, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn stop(&mut self) {
        super::lock(&self.slot).take();
        self.counters.rx[self.q].posted.set(0);
    }
}

/// A Tx queue: frames for the backend.
pub(super) struct VirtioTx {
    pub(super) slot: Arc<VringSlot>,
    pub(super) table: Arc<Table>,
    /// Where a packet the backend cannot see is copied to.
    pub(super) copy_pool: Option<MbufPool>,
    pub(super) counters: Arc<PortCounters>,
    pub(super) driver: TxCounters,
    pub(super) q: usize,
    /// The chain being added.
    pub(super) segments: Vec<Segment>,
    /// Per packet taken in this burst: the head its mbuf is held at until
    /// the backend returns it, or [`NOT_HELD`] (dropped, or a copy went
    /// instead of it and is held already): a plain `u16` each, so that
    /// reading them back after the loop waits on no partial store.
    pub(super) placed: Vec<u16>,
    /// Completed packets, freed together.
    pub(super) done: Burst,
}

/// In [`VirtioTx::placed`]: the packet's own mbuf is not held by the ring
/// (no head is this large: a queue has at most 32768 entries).
const NOT_HELD: u16 = u16::MAX;

/// What became of one packet offered to the ring.
enum Placed {
    /// On the ring at this head, as itself or as a copy.
    Sent(u16, Option<Mbuf>),
    /// Dropped: counted where it happened.
    Dropped,
    /// No room: the packet stays with the caller.
    NoRoom,
}

/// Frees the packets the backend returned, gathered in `done`.
fn reclaim(ring: &mut Vring, driver: &TxCounters, done: &mut Burst) -> usize {
    if ring.queue.in_order() {
        return reclaim_in_order(ring, driver, done);
    }
    let mut freed = 0;
    // Bounded: each entry read moves the used position on, and there
    // are at most the ring's size in flight.
    for _ in 0..=ring.queue.layout().size() {
        let head = match ring.queue.pop_used() {
            Ok(Some(used)) => used.head,
            Ok(None) => break,
            Err(VirtioError::BadUsedId { .. }) => {
                driver.bad_used_id.inc();
                continue;
            }
            // A device-readable chain has nothing written: the packet
            // went all the same, and its chain is reclaimed.
            Err(VirtioError::BadUsedLen { head, .. }) => {
                driver.bad_used_len.inc();
                head
            }
            Err(_) => {
                driver.ring_errors.inc();
                break;
            }
        };
        freed += usize::from(release_held(ring, head, done));
    }
    done.clear();
    freed
}

/// Frees the mbuf the chain at `head` held, if any, through `done` (freed
/// in bulk when full, and by the caller at the end); whether there was one.
#[inline]
fn release_held(ring: &mut Vring, head: u16, done: &mut Burst) -> bool {
    let Some(m) = ring.held[usize::from(head)].take() else {
        return false;
    };
    if let Err(m) = done.push(m) {
        done.clear();
        // Room: just emptied.
        let _ = done.push(m);
    }
    true
}

/// [`reclaim`] with `VIRTIO_F_IN_ORDER`: the chains returned are the
/// oldest ones, as many as the used index moved; the used entries are not
/// read ([`DriverQueue::pop_used_heads`]).
fn reclaim_in_order(ring: &mut Vring, driver: &TxCounters, done: &mut Burst) -> usize {
    let mut heads = [0u16; 64];
    let mut freed = 0;
    // Bounded: each round takes at least one chain or ends, and at most the
    // ring's size are in flight.
    for _ in 0..=ring.queue.layout().size() {
        let n = match ring.queue.pop_used_heads(&mut heads) {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => {
                driver.ring_errors.inc();
                break;
            }
        };
        for &head in &heads[..n] {
            freed += usize::from(release_held(ring, head, done));
        }
    }
    done.clear();
    freed
}

/// What [`Placing::place`] works with: the queue's fields besides its slot, which
/// the burst holds meanwhile.
struct Placing<'a> {
    table: &'a Table,
    copy_pool: Option<&'a MbufPool>,
    driver: &'a TxCounters,
    segments: &'a mut Vec<Segment>,
}

impl Placing<'_> {
    /// The common case of [`place`](Self::place): one segment of an
    /// unshared mbuf whose headroom takes the header, in a pool the backend
    /// maps, as one descriptor checked against its pool's area. `None`
    /// (nothing changed) for any other packet.
    #[inline]
    fn place_one(&mut self, ring: &mut Vring, m: &mut Mbuf) -> Option<Placed> {
        if m.nb_segs() != 1 || usize::from(m.headroom()) < HEADER_LEN || m.is_shared() {
            return None;
        }
        let data = m.data();
        let at = (data.as_ptr() as usize).wrapping_sub(HEADER_LEN);
        let area = self.table.pool_area(at, data.len() + HEADER_LEN)?;
        if ring.queue.num_free() == 0 {
            return Some(Placed::NoRoom);
        }
        let len = (data.len() + HEADER_LEN) as u32;
        // Room and an unshared buffer: checked above.
        m.prepend(HEADER_LEN).ok()?.fill(0);
        Some(match ring.queue.add_buffer(area, at as u64, len, false) {
            Ok(head) => Placed::Sent(head, None),
            Err(_) => {
                self.driver.ring_errors.inc();
                Placed::Dropped
            }
        })
    }

    /// Adds `m` to the ring, zero copy when its memory is the backend's.
    fn place(&mut self, ring: &mut Vring, m: &mut Mbuf) -> Placed {
        if let Some(placed) = self.place_one(ring, m) {
            return placed;
        }
        let size = usize::from(ring.queue.layout().size());
        let free = usize::from(ring.queue.num_free());
        let table = self.table;
        let visible = m
            .segments()
            .all(|s| table.holds(s.as_ptr() as usize, s.len()));
        self.segments.clear();
        let mut copy = None;
        if visible {
            let prepended = match m.prepend(HEADER_LEN) {
                Ok(header) => {
                    header.fill(0);
                    true
                }
                Err(_) => false,
            };
            let need = usize::from(m.nb_segs()) + usize::from(!prepended);
            if need > free || need > size {
                if prepended {
                    let _ = m.adj(HEADER_LEN);
                }
                if need > size {
                    self.driver.too_long.inc();
                    return Placed::Dropped;
                }
                return Placed::NoRoom;
            }
            if !prepended {
                self.segments.push(Segment {
                    addr: self.table.zero_header,
                    len: HEADER_LEN as u32,
                    writable: false,
                });
            }
            self.segments.extend(m.segments().map(|s| Segment {
                addr: s.as_ptr() as u64,
                len: s.len() as u32,
                writable: false,
            }));
        } else {
            if free == 0 {
                return Placed::NoRoom;
            }
            let Some(mut c) = self.copy_pool.and_then(|p| p.alloc()) else {
                return Placed::NoRoom;
            };
            let len = m.pkt_len() as usize;
            if c.prepend(HEADER_LEN).map(|h| h.fill(0)).is_err() {
                return Placed::NoRoom;
            }
            let Ok(dst) = c.append(len) else {
                self.driver.too_long.inc();
                return Placed::Dropped;
            };
            let mut at = 0;
            for s in m.segments() {
                dst[at..at + s.len()].copy_from_slice(s);
                at += s.len();
            }
            self.segments.push(Segment {
                addr: c.data().as_ptr() as u64,
                len: c.data_len().into(),
                writable: false,
            });
            copy = Some(c);
        }
        match ring.queue.add_chain(self.segments) {
            Ok(head) => Placed::Sent(head, copy),
            Err(_) => {
                self.driver.ring_errors.inc();
                Placed::Dropped
            }
        }
    }
}

impl TxQueue for VirtioTx {
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let mut guard = self.slot.enter();
        let Some(ring) = guard.as_mut().and_then(|g| g.as_mut()) else {
            drop(guard);
            // Nobody to send to: dropped and counted, as by a port whose
            // link is down, so a caller counts each such packet once.
            let n = burst.len();
            drop(burst.drain_front(n));
            self.driver.not_ready.add(n as u64);
            let stats = &self.counters.tx[self.q];
            stats.errors.add(n as u64);
            stats.record_burst(0, 0);
            return n;
        };
        if ring.queue.num_free() < ring.queue.layout().size() / 4 {
            reclaim(ring, &self.driver, &mut self.done);
        }
        // The descriptor lines the burst's packets go in, asked for
        // together.
        ring.queue
            .prefetch_free_descs(u16::try_from(burst.len()).unwrap_or(u16::MAX));
        let (mut taken, mut sent, mut bytes, mut dropped) = (0usize, 0usize, 0u64, 0u64);
        self.placed.clear();
        let mut placing = Placing {
            table: &self.table,
            copy_pool: self.copy_pool.as_ref(),
            driver: &self.driver,
            segments: &mut self.segments,
        };
        for i in 0..burst.len() {
            let m = &mut burst.as_mut_slice()[i];
            let len = u64::from(m.pkt_len());
            match placing.place(ring, m) {
                Placed::Sent(head, None) => {
                    self.placed.push(head);
                    sent += 1;
                    bytes += len;
                }
                Placed::Sent(head, Some(copy)) => {
                    // The copy went in its place: the original is freed.
                    ring.held[usize::from(head)] = Some(copy);
                    self.placed.push(NOT_HELD);
                    sent += 1;
                    bytes += len;
                }
                Placed::Dropped => {
                    self.placed.push(NOT_HELD);
                    dropped += 1;
                }
                Placed::NoRoom => break,
            }
            taken += 1;
        }
        if sent > 0 {
            ring.publish(&self.driver.ring_errors);
        }
        for (m, &head) in burst.drain_front(taken).zip(&self.placed) {
            if head != NOT_HELD {
                ring.held[usize::from(head)] = Some(m);
            }
        }
        let in_flight = ring.queue.in_flight();
        drop(guard);
        let stats = &self.counters.tx[self.q];
        stats.waiting.set(u64::from(in_flight));
        if dropped != 0 {
            stats.errors.add(dropped);
        }
        stats.record_burst(sent, bytes);
        taken
    }

    fn tx_done_cleanup(&mut self, max: usize) -> usize {
        let _ = max;
        let mut guard = self.slot.enter();
        match guard.as_mut().and_then(|g| g.as_mut()) {
            Some(ring) => reclaim(ring, &self.driver, &mut self.done),
            None => 0,
        }
    }

    fn start(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn stop(&mut self) {
        super::lock(&self.slot).take();
        self.done.clear();
        self.counters.tx[self.q].waiting.set(0);
    }
}
