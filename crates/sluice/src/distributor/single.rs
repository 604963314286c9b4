//! The single-packet distributor, kept beside the burst API for comparison:
//! DPDK's legacy single mode — one packet per cache-line exchange, so one
//! line round trip between the cores per packet (the burst API moves eight).
//!
//! # The line: one word, a flag protocol
//! Each worker has one 64-bit word, alone in a 128-byte block (alone on its
//! 64-byte line and in that line's adjacent-line prefetch pair). It holds a
//! packet address (an mbuf header, 64-byte aligned, so its six low bits are
//! 0) or-ed with flag bits. Both sides write it; [`REQ`] says whose turn it
//! is:
//! - the worker **requests** by storing (Release) `REQ`, or-ed with the
//!   address of the packet it hands back and [`RETURN`] if it hands one
//!   back. While `REQ` is set the distributor owns the word and owes an
//!   answer;
//! - the distributor sees `REQ` (an Acquire load pairing with that Release),
//!   takes the returned packet, and later **answers** by storing (Release)
//!   the address of the worker's next packet, `REQ` clear;
//! - the worker sees `REQ` clear (an Acquire load pairing with the answer's
//!   Release) and takes the packet.
//!
//! A request may also carry [`SHUTDOWN`] (the worker stops: the distributor
//! hands its backlog to other workers and answers with the empty word 0),
//! and with it [`UNREAD`] (the worker never took the last answer's packet:
//! the distributor, which remembers that packet, hands it on too). A worker
//! waiting with a request open asks to stop by adding [`QUIT`] to its request
//! with a compare-exchange — which fails if the answer came first — and the
//! distributor answers 0 as to a shutdown. A distributor that is dropped
//! answers every request it sees with [`CLOSED`].
//!
//! # Distribution
//! The distributor keeps per worker the flow tag of the packet it holds and
//! a backlog of up to [`SINGLE_BACKLOG`] packets with their tags. A packet
//! whose [`flow_tag`] matches a worker's held or backlog tag (a scalar scan,
//! one small table per worker) joins that worker's backlog — waiting for
//! the worker if the backlog is full — so a flow stays on one worker while
//! any of its packets is there, which keeps the flow in order. Any other
//! packet goes to an idle worker (nothing held, empty backlog) or else the
//! least loaded. A worker that asks gets the front of its backlog at once.
//!
//! # Ownership when a side goes away
//! The distributor, when dropped, frees what it holds and every packet of a
//! request it sees; a request it cannot see (made after it looked) is left
//! in the word, and the last owner of the shared block (`Shared`'s `Drop`,
//! when both sides are gone) frees the packets such a word still names.

use std::collections::VecDeque;

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, Mbuf, MbufHeader};
use crate::mempool::Elem;
use crate::sync::{Arc, AtomicU32, AtomicU64, Ordering};

use super::burst::{DistCounters, backoff_paused as backoff, least_loaded};
use super::lines::{FLAGS, addr, elem};
use super::matching::WorkerTags;
use super::returns::{Fifo, free_pkts};
use super::{DistError, DistStats, MAX_WORKERS, flow_tag};

/// Packets a worker's backlog holds (beside the one handed to it).
pub const SINGLE_BACKLOG: usize = 8;

/// Worker: a request is open — the distributor owns the word and owes an
/// answer. Clear in every answer.
const REQ: u64 = 1;
/// Worker, with `REQ`: the word's address is a packet handed back.
const RETURN: u64 = 2;
/// Worker, with `REQ`: the worker stops.
const SHUTDOWN: u64 = 4;
/// Worker, with `SHUTDOWN`: the last answer's packet was never taken.
const UNREAD: u64 = 8;
/// Worker, added to an open plain request: stop waiting, answer now.
const QUIT: u64 = 16;
/// Distributor, as a whole answer: it is gone.
const CLOSED: u64 = 32;

/// The tag table index of the held packet's tag (`0..8` is the backlog
/// ring, by ring position).
const HELD_TAG: usize = SINGLE_BACKLOG;

/// `claimed[w]`: no live handle.
const FREE: u32 = 0;
/// `claimed[w]`: a live handle.
const LIVE: u32 = 1;
/// `claimed[w]`: no live handle; the last one was dropped by a panic with
/// its request open, so the answer is the next handle's to take.
const LEFT_OPEN: u32 = 2;

/// One worker's word in a 128-byte block of its own.
#[repr(C, align(128))]
struct Word(AtomicU64);

/// What the distributor and its workers share.
struct Shared {
    /// One word per worker (see the module docs).
    words: Box<[Word]>,
    /// Per worker: [`FREE`], [`LIVE`] or [`LEFT_OPEN`].
    claimed: Box<[AtomicU32]>,
    /// Per worker: written by a dropping distributor for a worker whose word
    /// it did not answer — the address of the last packet it handed that
    /// worker (0 if none). If a shutdown flagged [`UNREAD`] then lands
    /// unseen, that packet belongs to no one: `Drop` frees it.
    abandoned: Box<[AtomicU64]>,
    /// 1 once the distributor is gone. Stored (Release) after its last
    /// answer, so a worker that sees it (Acquire) and then no answer knows
    /// none will come.
    gone: AtomicU32,
}

impl Shared {
    fn new(workers: usize) -> Shared {
        Shared {
            words: (0..workers).map(|_| Word(AtomicU64::new(0))).collect(),
            claimed: (0..workers).map(|_| AtomicU32::new(FREE)).collect(),
            abandoned: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            gone: AtomicU32::new(0),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Both sides are gone (the `Arc`'s last drop orders their writes
        // before this). Free what no one took:
        for w in 0..self.words.len() {
            let v = self.words[w].0.load(Ordering::Relaxed);
            if v & REQ != 0 {
                // A request the distributor never saw: its packets are the
                // distributor's, which is gone.
                if v & RETURN != 0 {
                    // SAFETY: a packet this side owns here (the protocol above), freed once.
                    unsafe { free(elem(v & !FLAGS)) };
                }
                if v & UNREAD != 0 {
                    let a = self.abandoned[w].load(Ordering::Relaxed);
                    if a != 0 {
                        // SAFETY: a packet this side owns here (the protocol above), freed once.
                        unsafe { free(elem(a)) };
                    }
                }
            } else if self.claimed[w].load(Ordering::Relaxed) == LEFT_OPEN
                && v & FLAGS == 0
                && v != 0
            {
                // The answer to the request of a handle dropped by a panic,
                // never taken.
                // SAFETY: a packet this side owns here (the protocol above), freed once.
                unsafe { free(elem(v)) };
            }
        }
    }
}

/// Frees a packet.
///
/// # Safety
/// A live mbuf the caller owns and gives up.
unsafe fn free(e: Elem) {
    // SAFETY: forwarded.
    unsafe { free_pkts(&[e]) };
}

/// The header of a packet the caller owns.
///
/// # Safety
/// `e` is the address of a live mbuf the caller owns.
#[inline(always)]
unsafe fn header<'a>(e: Elem) -> &'a MbufHeader {
    // SAFETY: (caller) a live mbuf header.
    unsafe { &*e.as_ptr().cast::<MbufHeader>() }
}

// ---------------------------------------------------------------------------
// Distributor side
// ---------------------------------------------------------------------------

/// The distributor's private view of one worker.
struct WorkerState {
    /// It has requested since its last shutdown (it may be given packets).
    active: bool,
    /// Its request is open and its return taken: it waits for a packet.
    /// Always with an empty backlog (a ready worker is answered at once).
    ready: bool,
    /// The open request's return was refused once (counted once).
    refused: bool,
    /// The packet of the last answer, until the worker's next request is
    /// taken: in flight, the worker's — unless that request says it was
    /// never taken ([`UNREAD`]), when it is the distributor's again.
    held: Option<Elem>,
    /// `backlog[(head + k) % SINGLE_BACKLOG]` for `k < backlog_len`: packets
    /// queued for it, owned by the distributor, oldest first; their tags
    /// sit at the same positions of the worker's tag table.
    backlog: [Elem; SINGLE_BACKLOG],
    head: usize,
    backlog_len: usize,
    /// Packets handed to it.
    handed: Counter,
}

impl WorkerState {
    #[inline(always)]
    fn load(&self) -> usize {
        self.held.is_some() as usize + self.backlog_len
    }
}

/// Why `place` did not place a packet.
enum Blocked {
    /// The worker we waited for shut down: its packets are pending, and the
    /// packet must be matched again after them.
    Rematch,
    /// The worker we wait for has a return that does not fit.
    ReturnsFull,
}

/// What `take_request` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    /// No open request.
    None,
    /// The worker waits for a packet.
    Ready,
    /// Its return does not fit.
    Refused,
    /// It shut down.
    ShutDown,
}

/// The distributor end of the single-packet API: one thread calls it. Made
/// with [`SingleDistributor::new`], which also makes the shared words the
/// [`SingleWorker`] handles use.
pub struct SingleDistributor {
    shared: Arc<Shared>,
    /// Per worker: the tags of its backlog (`[..8]`, by ring position) and
    /// of its held packet (`[8]`); 0 where there is no packet (no tag is 0),
    /// so `[9..]` stay 0.
    tags: Box<[WorkerTags]>,
    workers: Box<[WorkerState]>,
    /// Active workers.
    active: usize,
    /// Packets workers returned, for [`returned_pkts`](Self::returned_pkts).
    returns: Fifo,
    /// Packets taken back from workers that shut down, owned, to hand out
    /// before any newer packet; per flow in arrival order. Its capacity
    /// (every packet the workers can hold) is reserved up front.
    pending: VecDeque<Elem>,
    counters: DistCounters,
}

impl SingleDistributor {
    /// A distributor for `workers` workers (`1..=MAX_WORKERS`), with room
    /// for 1024 returned packets not yet collected.
    pub fn new(workers: usize) -> Result<SingleDistributor, DistError> {
        SingleDistributor::with_returns(workers, 1024)
    }

    /// A distributor for `workers` workers (`1..=MAX_WORKERS`), with room
    /// for `returns` returned packets not yet collected (rounded up to a
    /// power of two, at least 8).
    pub fn with_returns(workers: usize, returns: usize) -> Result<SingleDistributor, DistError> {
        if workers == 0 {
            return Err(DistError::NoWorkers);
        }
        if workers > MAX_WORKERS {
            return Err(DistError::TooManyWorkers { asked: workers });
        }
        Ok(SingleDistributor {
            shared: Arc::new(Shared::new(workers)),
            tags: vec![WorkerTags::default(); workers].into_boxed_slice(),
            workers: (0..workers)
                .map(|_| WorkerState {
                    active: false,
                    ready: false,
                    refused: false,
                    held: None,
                    backlog: [Elem::DANGLING; SINGLE_BACKLOG],
                    head: 0,
                    backlog_len: 0,
                    handed: Counter::new(),
                })
                .collect(),
            active: 0,
            returns: Fifo::new(returns.max(8).next_power_of_two()),
            // Every packet the distributor holds is held by a worker or
            // queued for one (at most 1 + SINGLE_BACKLOG per worker), and a
            // packet enters `pending` only by leaving those places.
            pending: VecDeque::with_capacity((1 + SINGLE_BACKLOG) * workers),
            counters: DistCounters::default(),
        })
    }

    /// The handle for worker `id`, for the thread doing that worker's job.
    /// [`DistError::WorkerOutOfRange`] for an id not below the worker
    /// count, [`DistError::WorkerClaimed`] while another handle for it is
    /// alive.
    pub fn worker(&self, id: usize) -> Result<SingleWorker, DistError> {
        let workers = self.workers.len();
        if id >= workers {
            return Err(DistError::WorkerOutOfRange { id, workers });
        }
        let claim = &self.shared.claimed[id];
        // Acquire: pairs with a dropped handle's Release of its claim (its
        // last writes to the word are seen).
        let reopened =
            match claim.compare_exchange(FREE, LIVE, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => false,
                Err(LEFT_OPEN) => {
                    if claim
                        .compare_exchange(LEFT_OPEN, LIVE, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                    {
                        return Err(DistError::WorkerClaimed { id });
                    }
                    true
                }
                Err(_) => return Err(DistError::WorkerClaimed { id }),
            };
        Ok(SingleWorker::new(Arc::clone(&self.shared), id, reopened))
    }

    /// Worker count.
    pub fn num_workers(&self) -> usize {
        self.workers.len()
    }

    /// Workers that have requested since their last shutdown.
    pub fn active_workers(&self) -> usize {
        self.active
    }

    /// The counters.
    pub fn stats(&self) -> DistStats {
        self.counters
            .stats(self.workers.iter().map(|w| w.handed.get()).collect())
    }

    /// Packets held by the distributor or its workers: in flight at
    /// workers, queued for them, or taken back and not yet handed out.
    pub fn outstanding(&self) -> usize {
        self.pending.len() + self.workers.iter().map(WorkerState::load).sum::<usize>()
    }

    /// Returned packets waiting for [`returned_pkts`](Self::returned_pkts).
    pub fn returns_waiting(&self) -> usize {
        self.returns.len()
    }

    /// Hands the packets of `burst` to the workers, one per worker exchange,
    /// taking them from its front; returns how many it took. It takes them
    /// all unless no worker is active (none taken), or a full returns FIFO
    /// stops a worker it must wait for (the rest stay in `burst`: collect
    /// returns with [`returned_pkts`](Self::returned_pkts) and call again).
    ///
    /// It waits only when a worker's backlog is full and the worker has not
    /// asked for more: flow affinity makes the packet wait for that worker.
    pub fn process(&mut self, burst: &mut BurstSlice) -> usize {
        self.poll_all();
        let mut taken = 0;
        loop {
            // Packets taken back from workers that shut down go first: they
            // arrived before anything still in `burst`.
            if !self.pending.is_empty() && !self.drain_pending() {
                break;
            }
            if taken == burst.len() || self.active == 0 {
                break;
            }
            let e = burst.raw()[taken];
            // SAFETY: `burst` owns the packet; we read its header.
            let tag = flow_tag(unsafe { header(e) }.rss_hash);
            let w = self.find(tag).unwrap_or_else(|| self.least_loaded());
            match self.place(e, tag, w) {
                Ok(()) => taken += 1,
                Err(Blocked::Rematch) => {}
                Err(Blocked::ReturnsFull) => break,
            }
        }
        // SAFETY: the first `taken` packets are ours now (in backlogs, or
        // already handed to workers).
        unsafe { burst.forget_front(taken) };
        self.counters.distributed.add(taken as u64);
        self.poll_all();
        self.note_held();
        taken
    }

    /// Moves up to `out.free()` returned packets into `out`, oldest first;
    /// returns how many.
    pub fn returned_pkts(&mut self, out: &mut BurstSlice) -> usize {
        let n = self.returns.pop_into(out);
        self.note_held();
        n
    }

    /// Frees every returned packet not yet collected.
    pub fn clear_returns(&mut self) {
        self.returns.clear();
        self.note_held();
    }

    /// Packets the distributor holds — [`outstanding`](Self::outstanding)
    /// and [`returns_waiting`](Self::returns_waiting) — as of its last
    /// `process`, `returned_pkts`, `clear_returns` or `flush`, readable from
    /// any thread (a buffer census counts them as in flight).
    pub fn held_gauge(&self) -> std::sync::Arc<crate::counter::Gauge> {
        std::sync::Arc::clone(&self.counters.held)
    }

    /// Publishes what the distributor holds (one store).
    fn note_held(&self) {
        self.counters
            .held
            .set((self.outstanding() + self.returns.len()) as u64);
    }

    /// Hands out everything queued and waits until every worker has
    /// returned what it held. Returns what is still outstanding: 0, unless
    /// it cannot go on — no worker active while packets wait, or a full
    /// returns FIFO stops a worker (collect returns and flush again).
    pub fn flush(&mut self) -> usize {
        let mut spins = 0u32;
        loop {
            let progress = self.poll_all();
            let drained = self.pending.is_empty() || self.drain_pending();
            let left = self.outstanding();
            self.note_held();
            if left == 0 {
                return 0;
            }
            let stuck_idle = self.active == 0;
            let stuck_full = !drained || self.workers.iter().any(|w| w.refused);
            if (stuck_idle || stuck_full) && !progress {
                return left;
            }
            backoff(&mut spins);
        }
    }

    /// The worker holding or queueing a packet of flow `tag`, if any (at
    /// most one does: a flow joins the worker that has it).
    #[inline]
    fn find(&self, tag: u16) -> Option<usize> {
        self.tags
            .iter()
            .position(|t| t.0.iter().fold(false, |m, &x| m | (x == tag)))
    }

    /// The active worker with the fewest packets held and queued (the
    /// lowest id among equals). There is one.
    #[inline]
    fn least_loaded(&self) -> usize {
        least_loaded(self.workers.iter().map(|ws| (ws.active, ws.load())))
    }

    /// Handles every worker's open request or quit and answers ready
    /// workers with a backlog; whether any request was handled.
    fn poll_all(&mut self) -> bool {
        let mut any = false;
        for w in 0..self.workers.len() {
            any |= self.poll(w);
        }
        any
    }

    /// [`poll_all`](Self::poll_all) for worker `w`.
    #[inline]
    fn poll(&mut self, w: usize) -> bool {
        let mut any = false;
        if !self.workers[w].ready {
            any = matches!(self.take_request(w), Request::Ready | Request::ShutDown);
        } else if self.word(w).load(Ordering::Acquire) & QUIT != 0 {
            // A worker waiting for a packet asks to stop. (Acquire: pairs
            // with the Release of the worker's compare-exchange adding QUIT;
            // nothing else is read.)
            self.shut_down(w, None);
            any = true;
        }
        if self.workers[w].ready && self.workers[w].backlog_len != 0 {
            self.release(w);
        }
        any
    }

    #[inline(always)]
    fn word(&self, w: usize) -> &AtomicU64 {
        &self.shared.words[w].0
    }

    /// Handles worker `w`'s request, if it has one open and not yet taken.
    fn take_request(&mut self, w: usize) -> Request {
        if self.workers[w].ready {
            return Request::Ready;
        }
        // Acquire: pairs with the worker's Release store of its request (or
        // of the compare-exchange adding QUIT to it): the returned packet
        // and its contents are seen.
        let v = self.word(w).load(Ordering::Acquire);
        if v & REQ == 0 {
            return Request::None;
        }
        let ws = &mut self.workers[w];
        if v & RETURN != 0 {
            if self.returns.room() == 0 {
                if !ws.refused {
                    ws.refused = true;
                    self.counters.returns_full.inc();
                }
                return Request::Refused;
            }
            self.returns.push_all(&[elem(v & !FLAGS)]);
            self.counters.returned.inc();
        }
        ws.refused = false;
        // The packet it held is done (or, flagged UNREAD, ours again).
        let held = ws.held.take();
        self.tags[w].0[HELD_TAG] = 0;
        if v & (SHUTDOWN | QUIT) != 0 {
            let unread = if v & UNREAD != 0 { held } else { None };
            self.shut_down(w, unread);
            return Request::ShutDown;
        }
        if !ws.active {
            ws.active = true;
            self.active += 1;
        }
        ws.ready = true;
        Request::Ready
    }

    /// Worker `w` shuts down: its `unread` packet and backlog go to the
    /// front of `pending` (they are older than any packet of their flows
    /// still there), its tags are cleared, and its request is answered
    /// with the empty word.
    fn shut_down(&mut self, w: usize, unread: Option<Elem>) {
        let ws = &mut self.workers[w];
        for k in (0..ws.backlog_len).rev() {
            self.pending
                .push_front(ws.backlog[(ws.head + k) % SINGLE_BACKLOG]);
        }
        let mut n = ws.backlog_len;
        if let Some(e) = unread {
            self.pending.push_front(e);
            n += 1;
        }
        self.counters.redistributed.add(n as u64);
        ws.backlog_len = 0;
        ws.head = 0;
        ws.held = None;
        self.tags[w] = WorkerTags::default();
        if ws.active {
            ws.active = false;
            self.active -= 1;
        }
        ws.ready = false;
        // Release: pairs with the worker's Acquire load of its word.
        self.word(w).store(0, Ordering::Release);
        self.counters.shutdowns.inc();
    }

    /// Answers worker `w` (ready) with packet `e` of flow `tag`.
    #[inline]
    fn hand(&mut self, w: usize, e: Elem, tag: u16) {
        let ws = &mut self.workers[w];
        debug_assert!(ws.ready && ws.held.is_none());
        ws.held = Some(e);
        ws.ready = false;
        ws.handed.inc();
        self.tags[w].0[HELD_TAG] = tag;
        // Release: pairs with the worker's Acquire load of its word (in
        // `poll_pkt`), publishing the packet's contents.
        self.word(w).store(addr(e), Ordering::Release);
    }

    /// Answers worker `w` (ready) with the front of its backlog.
    #[inline]
    fn release(&mut self, w: usize) {
        let ws = &mut self.workers[w];
        debug_assert!(ws.backlog_len != 0);
        let slot = ws.head;
        let e = ws.backlog[slot];
        ws.head = (slot + 1) % SINGLE_BACKLOG;
        ws.backlog_len -= 1;
        let tag = std::mem::take(&mut self.tags[w].0[slot]);
        self.hand(w, e, tag);
    }

    /// Queues packet `e` (flow `tag`) for worker `w` — handing it over at
    /// once if `w` waits with an empty backlog — first answering `w` from
    /// a full backlog, waiting for it to ask if need be (and meanwhile
    /// serving the others). On success the packet is the distributor's or
    /// `w`'s.
    #[inline]
    fn place(&mut self, e: Elem, tag: u16, w: usize) -> Result<(), Blocked> {
        if self.workers[w].backlog_len == SINGLE_BACKLOG {
            let mut spins = 0u32;
            loop {
                match self.take_request(w) {
                    Request::Ready => break,
                    Request::None => {
                        for x in 0..self.workers.len() {
                            if x != w {
                                self.poll(x);
                            }
                        }
                        backoff(&mut spins);
                    }
                    Request::Refused => return Err(Blocked::ReturnsFull),
                    Request::ShutDown => return Err(Blocked::Rematch),
                }
            }
            self.release(w);
        }
        let ws = &mut self.workers[w];
        if ws.ready {
            debug_assert_eq!(ws.backlog_len, 0);
            self.hand(w, e, tag);
        } else {
            let slot = (ws.head + ws.backlog_len) % SINGLE_BACKLOG;
            ws.backlog[slot] = e;
            ws.backlog_len += 1;
            self.tags[w].0[slot] = tag;
        }
        Ok(())
    }

    /// Hands out the packets taken back from workers that shut down; false
    /// if some are left (no active worker, or blocked by a full returns
    /// FIFO).
    fn drain_pending(&mut self) -> bool {
        while let Some(&e) = self.pending.front() {
            if self.active == 0 {
                return false;
            }
            // SAFETY: a packet the distributor owns; we read its header.
            let tag = flow_tag(unsafe { header(e) }.rss_hash);
            let w = self.find(tag).unwrap_or_else(|| self.least_loaded());
            match self.place(e, tag, w) {
                Ok(()) => {
                    // (A shutdown while placing pushed older packets in
                    // front of `e`: it is no longer the front.)
                    let k = self.pending.iter().position(|&p| p == e);
                    self.pending.remove(k.expect("placed from pending"));
                }
                Err(Blocked::Rematch) => {}
                Err(Blocked::ReturnsFull) => return false,
            }
        }
        true
    }
}

impl Drop for SingleDistributor {
    fn drop(&mut self) {
        // Free what we hold, answer every open request with CLOSED (freeing
        // its packets), then say we are gone: a worker that sees `gone` and
        // no answer knows none will come.
        for w in 0..self.workers.len() {
            let ws = &mut self.workers[w];
            for k in 0..ws.backlog_len {
                // SAFETY: a packet this side owns here (the protocol above), freed once.
                unsafe { free(ws.backlog[(ws.head + k) % SINGLE_BACKLOG]) };
            }
            ws.backlog_len = 0;
            let word = &self.shared.words[w].0;
            if !ws.ready {
                // Acquire: pairs with the worker's Release of its request.
                let v = word.load(Ordering::Acquire);
                if v & REQ == 0 {
                    // No request: the word and its answer are the worker's.
                    // Should a shutdown flagged UNREAD land after this look,
                    // `held` is no one's: leave it to `Shared`'s `Drop`.
                    let a = ws.held.map_or(0, addr);
                    self.shared.abandoned[w].store(a, Ordering::Relaxed);
                    continue;
                }
                if v & RETURN != 0 {
                    // SAFETY: a packet this side owns here (the protocol above), freed once.
                    unsafe { free(elem(v & !FLAGS)) };
                }
                if v & UNREAD != 0
                    && let Some(e) = ws.held
                {
                    // SAFETY: a packet this side owns here (the protocol above), freed once.
                    unsafe { free(e) };
                }
            }
            ws.ready = false;
            ws.held = None;
            // Release: pairs with the worker's Acquire load of its word.
            word.store(CLOSED, Ordering::Release);
        }
        while let Some(e) = self.pending.pop_front() {
            // SAFETY: a packet this side owns here (the protocol above), freed once.
            unsafe { free(e) };
        }
        // Release: pairs with the workers' Acquire of `gone` (and orders the
        // `abandoned` stores before `Shared`'s `Drop`).
        self.shared.gone.store(1, Ordering::Release);
        // `returns` frees its packets when dropped.
    }
}

impl std::fmt::Debug for SingleDistributor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingleDistributor")
            .field("workers", &self.workers.len())
            .field("active", &self.active)
            .field("outstanding", &self.outstanding())
            .field("returns_waiting", &self.returns.len())
            .finish()
    }
}

// ---------------------------------------------------------------------------
// Worker side
// ---------------------------------------------------------------------------

/// Where a worker stands in the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// It owns its word, with no answer left to take.
    Idle,
    /// It has requested; the answer is for it.
    Requested,
    /// It has shut down; the distributor's empty answer is still due.
    ShutDown,
}

/// One worker's end of a [`SingleDistributor`]; every call takes
/// `&mut self`, so one thread at a time uses it. At most one handle per
/// worker id is alive at a time.
///
/// A worker calls [`get_pkt`](Self::get_pkt) in a loop, handing back the
/// packet it is done with and receiving the next in one exchange:
/// `let mut m = w.get_pkt(None)?; loop { work(&mut m); m = w.get_pkt(Some(m))?; }`
/// (ending on [`DistError::Closed`]). It ends with
/// [`return_pkt`](Self::return_pkt), or by dropping the handle, which does
/// the same with no packet.
///
/// A packet given to a call that fails is freed.
pub struct SingleWorker {
    shared: Arc<Shared>,
    id: usize,
    state: State,
}

impl SingleWorker {
    fn new(shared: Arc<Shared>, id: usize, reopened: bool) -> SingleWorker {
        // The claim's Acquire ordered the last handle's writes before this.
        let v = shared.words[id].0.load(Ordering::Relaxed);
        let state = if reopened || v & (REQ | SHUTDOWN) == REQ {
            // The last handle was dropped by a panic with a request open:
            // its answer is this handle's to take.
            State::Requested
        } else if v & REQ != 0 {
            // The last handle shut down and the distributor has not yet
            // answered: wait for that before requesting.
            State::ShutDown
        } else {
            State::Idle
        };
        SingleWorker { shared, id, state }
    }

    /// This worker's id.
    pub fn id(&self) -> usize {
        self.id
    }

    #[inline(always)]
    fn word(&self) -> &AtomicU64 {
        &self.shared.words[self.id].0
    }

    /// Hands back `ret` (if any) and waits for the next packet: one
    /// exchange does both.
    ///
    /// After a [`request_pkt`](Self::request_pkt) whose answer was not yet
    /// taken it takes that answer; `ret` must then be `None`
    /// ([`DistError::RequestPending`] otherwise). Fails with
    /// [`DistError::Closed`] once the distributor is gone.
    pub fn get_pkt(&mut self, ret: Option<Mbuf>) -> Result<Mbuf, DistError> {
        if self.state != State::Requested {
            self.request_pkt(ret)?;
        } else if ret.is_some() {
            return Err(DistError::RequestPending { id: self.id });
        }
        let mut spins = 0u32;
        loop {
            if let Some(m) = self.poll_pkt()? {
                return Ok(m);
            }
            backoff(&mut spins);
        }
    }

    /// Hands back `ret` (if any) and asks for a packet, without waiting:
    /// collect it with [`poll_pkt`](Self::poll_pkt).
    /// [`DistError::RequestPending`] if the last request's answer was not
    /// taken yet; [`DistError::Closed`] once the distributor is gone.
    pub fn request_pkt(&mut self, ret: Option<Mbuf>) -> Result<(), DistError> {
        match self.state {
            State::Requested => return Err(DistError::RequestPending { id: self.id }),
            State::ShutDown => self.await_shutdown()?,
            State::Idle => {}
        }
        // Acquire: pairs with the distributor's Release of `gone`, stored
        // after its last answer: a distributor gone now answers nothing.
        if self.shared.gone.load(Ordering::Acquire) != 0 {
            return Err(DistError::Closed);
        }
        self.publish(REQ, ret);
        self.state = State::Requested;
        Ok(())
    }

    /// Takes the answer to the last request, if it has come: `Some` packet,
    /// or `None` if not yet. [`DistError::NotRequested`] without a request;
    /// [`DistError::Closed`] if the distributor is gone (the packet handed
    /// back with the request is freed).
    #[inline]
    pub fn poll_pkt(&mut self) -> Result<Option<Mbuf>, DistError> {
        if self.state != State::Requested {
            return Err(DistError::NotRequested { id: self.id });
        }
        // Acquire: pairs with the distributor's Release store of its answer
        // (`hand`, `shut_down`, its `Drop`): the packet's contents are seen.
        let v = self.word().load(Ordering::Acquire);
        if v & REQ != 0 {
            if self.closed_unanswered() {
                return Err(DistError::Closed);
            }
            return Ok(None);
        }
        self.state = State::Idle;
        match v {
            CLOSED => Err(DistError::Closed),
            0 => {
                // The empty answer to a quit: an earlier handle for this id,
                // dropped by a panic, asked to stop. Ask again.
                self.request_pkt(None)?;
                Ok(None)
            }
            // SAFETY: the answer handed us this packet.
            a => Ok(Some(unsafe {
                Mbuf::from_raw(elem(a).as_non_null().cast())
            })),
        }
    }

    /// Shuts the worker down: hands back `ret` (if any) and tells the
    /// distributor to give it nothing more; it hands the worker's backlog to
    /// other workers. With a request open it first asks the distributor to
    /// answer at once and waits for that (the distributor must be running
    /// `process` or `flush`, or be dropped); a packet that came first goes
    /// back untaken, to be handed to another worker. In the shut-down state
    /// with a packet to hand back, it waits for the distributor's answer to
    /// the shutdown first.
    ///
    /// A later [`get_pkt`](Self::get_pkt) or
    /// [`request_pkt`](Self::request_pkt) starts the worker again.
    pub fn return_pkt(&mut self, ret: Option<Mbuf>) -> Result<(), DistError> {
        let mut flags = REQ | SHUTDOWN;
        let mut unread = 0;
        match self.state {
            State::ShutDown if ret.is_none() => return Ok(()),
            State::ShutDown => self.await_shutdown()?,
            State::Requested => {
                let v = self.await_quit()?;
                self.state = State::Idle;
                match v {
                    CLOSED => return Err(DistError::Closed),
                    // The distributor shut us down.
                    0 if ret.is_none() => return Ok(()),
                    // The packet still goes back, with a shutdown request.
                    0 => {}
                    // A packet came first: it goes back untaken.
                    a => {
                        flags |= UNREAD;
                        unread = a;
                    }
                }
            }
            State::Idle => {}
        }
        // Acquire: pairs with the distributor's Release of `gone`.
        if self.shared.gone.load(Ordering::Acquire) != 0 {
            // No one will read a request: the unread packet is ours.
            if unread != 0 {
                // SAFETY: a packet this side owns here (the protocol above), freed once.
                unsafe { free(elem(unread)) };
            }
            return Err(DistError::Closed);
        }
        self.publish(flags, ret);
        self.state = State::ShutDown;
        Ok(())
    }

    /// Stores a request: `flags` and, if any, `ret` flagged [`RETURN`].
    #[inline(always)]
    fn publish(&self, flags: u64, ret: Option<Mbuf>) {
        let r = ret.map_or(0, |m| addr(Elem::from_ptr(m.into_raw().cast())) | RETURN);
        // Release: pairs with the distributor's Acquire load in
        // `take_request` (or its `Drop`), handing over the returned packet.
        self.word().store(r | flags, Ordering::Release);
    }

    /// Whether the distributor is gone without answering our request (it
    /// never will: its packets are left to `Shared`'s `Drop`).
    fn closed_unanswered(&self) -> bool {
        // Acquire: pairs with the distributor's Release of `gone`, which
        // follows its last answer: if that answer was ours, we see it below.
        self.shared.gone.load(Ordering::Acquire) != 0
            && self.word().load(Ordering::Acquire) & REQ != 0
    }

    /// In the shut-down state: waits for the distributor's answer; the
    /// worker is idle after it.
    fn await_shutdown(&mut self) -> Result<(), DistError> {
        let mut spins = 0u32;
        loop {
            // Acquire: pairs with the Release of the distributor's answer.
            let v = self.word().load(Ordering::Acquire);
            if v & REQ == 0 {
                self.state = State::Idle;
                return if v == CLOSED {
                    Err(DistError::Closed)
                } else {
                    Ok(())
                };
            }
            if self.closed_unanswered() {
                return Err(DistError::Closed);
            }
            backoff(&mut spins);
        }
    }

    /// With a request open: asks the distributor to answer now (adding
    /// [`QUIT`]) and waits for the answer, which it returns.
    fn await_quit(&mut self) -> Result<u64, DistError> {
        self.ask_quit();
        let mut spins = 0u32;
        loop {
            // Acquire: pairs with the Release of the distributor's answer.
            let v = self.word().load(Ordering::Acquire);
            if v & REQ == 0 {
                return Ok(v);
            }
            if self.closed_unanswered() {
                return Err(DistError::Closed);
            }
            backoff(&mut spins);
        }
    }

    /// Adds [`QUIT`] to the open request, unless the answer came first.
    fn ask_quit(&self) {
        let v = self.word().load(Ordering::Relaxed);
        if v & REQ != 0 {
            // Release: pairs with the distributor's Acquire loads of the
            // word (the request stays published, the compare-exchange
            // continuing its release sequence). Fails if the distributor
            // answered meanwhile: the answer is then ours.
            let _ = self
                .word()
                .compare_exchange(v, v | QUIT, Ordering::Release, Ordering::Relaxed);
        }
    }
}

impl Drop for SingleWorker {
    fn drop(&mut self) {
        let mut claim = FREE;
        if self.state == State::Requested && std::thread::panicking() {
            // While a panic unwinds, waiting for the distributor could hang
            // the thread (it may be this one): ask to quit without waiting.
            // The next handle for this id takes the answer, or the last
            // owner of the shared block frees it.
            self.ask_quit();
            claim = LEFT_OPEN;
        } else {
            // Shut down cleanly: the distributor takes back an unread packet
            // and hands this worker's backlog to others.
            let _ = self.return_pkt(None);
        }
        // Release: pairs with the Acquire in `SingleDistributor::worker`.
        self.shared.claimed[self.id].store(claim, Ordering::Release);
    }
}

impl std::fmt::Debug for SingleWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingleWorker")
            .field("id", &self.id)
            .field("state", &self.state)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn each_word_has_a_128_byte_block_of_its_own() {
        assert_eq!(std::mem::size_of::<Word>(), 128);
        assert_eq!(std::mem::align_of::<Word>(), 128);
        let s = Shared::new(3);
        for (i, w) in s.words.iter().enumerate() {
            let a = w as *const Word as usize;
            assert_eq!(a % 128, 0, "worker {i}");
        }
    }
}
