//! The distributor side of the burst distributor.
//!
//! # What `process` does
//! 1. **Requests.** Every worker with an open request (see `lines`) is done
//!    with the batch it held: its returns go to the returns FIFO, its
//!    in-flight tags are cleared, and it becomes *ready* (waiting for a
//!    batch). A request whose returns do not fit in the FIFO is left open —
//!    the worker waits — and counted once in `returns_full`: returns are
//!    never overwritten.
//! 2. **Packets taken back** from workers that shut down are handed out
//!    first (they arrived before anything still in the caller's burst).
//! 3. **New packets**, eight at a time: each gets its flow tag
//!    ([`flow_tag`] of its RSS hash); one [`Matcher`] call compares the
//!    eight tags with every worker's in-flight and backlog tags. A packet
//!    whose tag a worker holds joins that worker's backlog, so a flow stays
//!    on one worker while any of its packets is in flight or queued — which
//!    is what keeps a flow's packets in order. Any other packet goes to the
//!    least-loaded active worker (fewest in flight plus queued), and later
//!    packets of the same chunk with the same tag follow it there.
//! 4. **Release.** A backlog of eight is handed over as soon as its worker
//!    is ready — waiting for the worker's request if need be (the only
//!    wait) — and at the end every ready worker gets what its backlog holds.
//!
//! A worker that shuts down (`Worker::return_pkt`) gets no more packets;
//! its backlog, and the batch it did not take, are handed to the others
//! before any newer packet.

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, MbufHeader};
use crate::mempool::Elem;
use crate::sync::{Arc, Ordering, spin_loop};

use super::lines::{CLAIM_INHERIT, CLAIM_LIVE, PARITY, SHUTDOWN, Shared, UNREAD};
use super::matching::{MatchImpl, Matcher, WorkerTags};
use super::returns::{Fifo, free_pkts};
use super::worker::Worker;
use super::{BURST_SIZE, DistError, MAX_WORKERS, flow_tag};

/// How a distributor is made.
#[derive(Debug, Clone, Copy)]
pub struct DistributorConfig {
    /// Worker count, `1..=MAX_WORKERS`.
    pub workers: usize,
    /// Tag matching: `None` for the best the CPU runs.
    pub matching: Option<MatchImpl>,
    /// Room for returned packets not yet collected with
    /// [`Distributor::returned_pkts`] (rounded up to a power of two, at
    /// least 8).
    pub returns: usize,
}

impl Default for DistributorConfig {
    fn default() -> Self {
        DistributorConfig {
            workers: 1,
            matching: None,
            returns: 1024,
        }
    }
}

/// The distributor's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DistStats {
    /// Packets taken from the caller by `process`.
    pub distributed: u64,
    /// Packets workers handed back.
    pub returned: u64,
    /// Requests whose returns did not fit in the returns FIFO (left open
    /// until the application collected returns).
    pub returns_full: u64,
    /// Worker shutdowns handled.
    pub shutdowns: u64,
    /// Packets taken back from workers that shut down and handed to others.
    pub redistributed: u64,
    /// Per worker: packets handed to it.
    pub handed: Vec<u64>,
}

/// The counters behind [`DistStats`], written by the distributor's thread;
/// both distributors keep them.
#[derive(Debug, Default)]
pub(super) struct DistCounters {
    /// [`DistStats::distributed`].
    pub(super) distributed: Counter,
    /// [`DistStats::returned`].
    pub(super) returned: Counter,
    /// [`DistStats::returns_full`].
    pub(super) returns_full: Counter,
    /// [`DistStats::shutdowns`].
    pub(super) shutdowns: Counter,
    /// [`DistStats::redistributed`].
    pub(super) redistributed: Counter,
    /// Packets the distributor holds (outstanding and returns waiting), as
    /// of its last call: what `held_gauge` shares.
    pub(super) held: std::sync::Arc<crate::counter::Gauge>,
}

impl DistCounters {
    /// Their values, with `handed` (per worker, packets handed to it).
    pub(super) fn stats(&self, handed: Vec<u64>) -> DistStats {
        DistStats {
            distributed: self.distributed.get(),
            returned: self.returned.get(),
            returns_full: self.returns_full.get(),
            shutdowns: self.shutdowns.get(),
            redistributed: self.redistributed.get(),
            handed,
        }
    }
}

/// The active worker with the smallest load (the lowest id among equals),
/// from each worker's (active, load) in id order. There is one.
#[inline(always)]
pub(super) fn least_loaded(workers: impl Iterator<Item = (bool, usize)>) -> usize {
    let mut best = usize::MAX;
    let mut least = usize::MAX;
    for (w, (active, load)) in workers.enumerate() {
        if active && load < least {
            best = w;
            least = load;
            if load == 0 {
                break;
            }
        }
    }
    debug_assert!(best != usize::MAX, "no active worker");
    best
}

/// The distributor's private view of one worker.
struct WorkerState {
    /// The parity of the distributor's last answer (bit 0 of `bufs[0]`).
    parity: u64,
    /// It has requested since its last shutdown (it may be given packets).
    active: bool,
    /// Its request is open and its returns taken: it waits for a batch.
    ready: bool,
    /// The open request's returns were refused once (counted once).
    refused: bool,
    /// Packets of the last batch handed to it, still in flight.
    in_flight: usize,
    /// `backlog[..backlog_len]`: packets queued for it, owned by the
    /// distributor, in arrival order; their tags are `tags[8..]`.
    backlog: [Elem; BURST_SIZE],
    backlog_len: usize,
    /// Packets handed to it.
    handed: Counter,
}

/// Why `place` did not place a packet.
enum Blocked {
    /// A worker shut down while we waited for it: its packets are pending,
    /// and the matching must be done again.
    Rematch,
    /// The worker we wait for has returns that do not fit.
    ReturnsFull,
}

/// The distributor end: one thread calls it. Made with [`Distributor::new`],
/// which also makes the shared lines the [`Worker`] handles use.
pub struct Distributor {
    shared: Arc<Shared>,
    matcher: Matcher,
    /// Per worker: tags of its in-flight packets (`0..8`) and backlog
    /// (`8..16`); all 0 for an inactive worker. The matcher reads it whole.
    tags: Box<[WorkerTags]>,
    workers: Box<[WorkerState]>,
    /// Active workers.
    active: usize,
    /// Packets workers returned, for [`returned_pkts`](Self::returned_pkts).
    returns: Fifo,
    /// Packets taken back from workers that shut down, to hand out first.
    pending: Fifo,
    scratch: [Elem; BURST_SIZE],
    /// Returns read into `scratch` by a request taken with `defer`, not yet
    /// in `returns` (only between `take_request` and `push_deferred`).
    deferred: usize,
    counters: DistCounters,
}

// SAFETY: the packet addresses the distributor holds are packets it owns;
// it moves between threads as a whole and is used by one at a time.
unsafe impl Send for Distributor {}

impl Distributor {
    /// A distributor for `cfg.workers` workers.
    pub fn new(cfg: DistributorConfig) -> Result<Distributor, DistError> {
        if cfg.workers == 0 {
            return Err(DistError::NoWorkers);
        }
        if cfg.workers > MAX_WORKERS {
            return Err(DistError::TooManyWorkers { asked: cfg.workers });
        }
        let matcher = match cfg.matching {
            Some(imp) => Matcher::new(imp)?,
            None => Matcher::best(),
        };
        let n = cfg.workers;
        Ok(Distributor {
            shared: Arc::new(Shared::new(n)),
            matcher,
            tags: vec![WorkerTags::default(); n].into_boxed_slice(),
            workers: (0..n)
                .map(|_| WorkerState {
                    parity: 0,
                    active: false,
                    ready: false,
                    refused: false,
                    in_flight: 0,
                    backlog: [Elem::DANGLING; BURST_SIZE],
                    backlog_len: 0,
                    handed: Counter::new(),
                })
                .collect(),
            active: 0,
            returns: Fifo::new(cfg.returns.max(BURST_SIZE).next_power_of_two()),
            // Every packet the distributor holds is in flight at a worker
            // or queued for one (at most 16 per worker), and new packets
            // are taken only when nothing is pending: this much room always
            // suffices.
            pending: Fifo::new((2 * BURST_SIZE * n).next_power_of_two()),
            scratch: [Elem::DANGLING; BURST_SIZE],
            deferred: 0,
            counters: DistCounters::default(),
        })
    }

    /// The handle for worker `id`, for the thread doing that worker's job.
    /// [`DistError::WorkerOutOfRange`] for an id not below the worker
    /// count, [`DistError::WorkerClaimed`] while another handle for it is
    /// alive.
    pub fn worker(&self, id: usize) -> Result<Worker, DistError> {
        let workers = self.workers.len();
        if id >= workers {
            return Err(DistError::WorkerOutOfRange { id, workers });
        }
        // Acquire: pairs with a dropped handle's Release of its claim (its
        // last writes to the lines are seen).
        let claim = &self.shared.claimed[id];
        let mut prev = claim.load(Ordering::Relaxed);
        loop {
            if prev == CLAIM_LIVE {
                return Err(DistError::WorkerClaimed { id });
            }
            match claim.compare_exchange(prev, CLAIM_LIVE, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => prev = now,
            }
        }
        Ok(Worker::new(
            Arc::clone(&self.shared),
            id,
            prev == CLAIM_INHERIT,
        ))
    }

    /// Worker count.
    pub fn num_workers(&self) -> usize {
        self.workers.len()
    }

    /// Workers that have requested since their last shutdown.
    pub fn active_workers(&self) -> usize {
        self.active
    }

    /// The tag matching in use.
    pub fn matching(&self) -> MatchImpl {
        self.matcher.imp()
    }

    /// The counters.
    pub fn stats(&self) -> DistStats {
        self.counters
            .stats(self.workers.iter().map(|w| w.handed.get()).collect())
    }

    /// Packets held by the distributor or its workers: in flight at
    /// workers, queued for them, or taken back and not yet handed out.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
            + self
                .workers
                .iter()
                .map(|w| w.in_flight + w.backlog_len)
                .sum::<usize>()
    }

    /// Returned packets waiting for [`returned_pkts`](Self::returned_pkts).
    pub fn returns_waiting(&self) -> usize {
        self.returns.len()
    }

    /// Hands the packets of `burst` to the workers, taking them from its
    /// front; returns how many it took. It takes them all unless no worker
    /// is active (from the start, or once the last one shut down), or a full
    /// returns FIFO stops a worker it must wait for: the rest stay in
    /// `burst` (collect returns with [`returned_pkts`](Self::returned_pkts)
    /// and call again).
    ///
    /// It waits only when a worker's backlog is full and the worker has not
    /// asked for more: flow affinity makes the packet wait for that worker.
    pub fn process(&mut self, burst: &mut BurstSlice) -> usize {
        self.poll_all();
        let mut taken = 0;
        let total = if self.drain_pending() { burst.len() } else { 0 };
        let mut flows = [0u16; BURST_SIZE];
        let mut matches = [0u8; BURST_SIZE];
        'chunks: while taken < total {
            if !self.drain_pending() || self.active == 0 {
                break;
            }
            let chunk = &burst.raw()[taken..total.min(taken + BURST_SIZE)];
            for (f, &e) in flows.iter_mut().zip(chunk) {
                // SAFETY: `burst` owns the packet; we read its header.
                *f = flow_tag(unsafe { header(e) }.rss_hash);
            }
            flows[chunk.len()..].fill(0);
            self.matcher.find_matches(&self.tags, &flows, &mut matches);
            for j in 0..chunk.len() {
                let w = match matches[j] {
                    0 => {
                        let w = self.least_loaded();
                        // Later packets of this flow in the chunk follow.
                        for k in j + 1..chunk.len() {
                            if flows[k] == flows[j] && matches[k] == 0 {
                                matches[k] = w as u8 + 1;
                            }
                        }
                        w
                    }
                    m => m as usize - 1,
                };
                match self.place(chunk[j], flows[j], w) {
                    Ok(()) => taken += 1,
                    Err(Blocked::Rematch) => continue 'chunks,
                    Err(Blocked::ReturnsFull) => break 'chunks,
                }
            }
        }
        // SAFETY: the first `taken` packets are ours now (in backlogs, or
        // already handed to workers).
        unsafe { burst.forget_front(taken) };
        self.counters.distributed.add(taken as u64);
        self.release_ready();
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
            let drained = self.drain_pending();
            self.release_ready();
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

    /// Handles every open request and releases to ready workers with a
    /// backlog; whether any request was handled.
    fn poll_all(&mut self) -> bool {
        let mut any = false;
        for w in 0..self.workers.len() {
            if !self.workers[w].ready {
                let r = self.take_request(w, false);
                any |= matches!(r, Request::Ready | Request::ShutDown);
            } else if self.shared.lines[w].quitting() {
                // A worker waiting for packets asks to stop.
                self.shut_down(w, false);
                any = true;
            }
            if self.workers[w].ready && self.workers[w].backlog_len != 0 {
                self.release(w);
            }
        }
        any
    }

    /// Releases every ready worker's backlog.
    fn release_ready(&mut self) {
        for w in 0..self.workers.len() {
            if self.workers[w].ready && self.workers[w].backlog_len != 0 {
                self.release(w);
            }
        }
    }

    /// Handles worker `w`'s request, if it has one open and not yet taken.
    fn take_request(&mut self, w: usize, defer: bool) -> Request {
        let ws = &mut self.workers[w];
        if ws.ready {
            return Request::Ready;
        }
        let Some(first) = self.shared.lines[w].pending(ws.parity) else {
            return Request::None;
        };
        let n = self.shared.lines[w].take_returns(first, &mut self.scratch);
        if n > self.returns.room() {
            if !ws.refused {
                ws.refused = true;
                self.counters.returns_full.inc();
            }
            return Request::Refused;
        }
        ws.refused = false;
        // Its last batch is done.
        ws.in_flight = 0;
        self.tags[w].0[..BURST_SIZE].fill(0);
        // (A `quit` set before this request is seen on the next
        // `poll_all`, the worker then being ready: the hot path reads only
        // the returns line.)
        if first & SHUTDOWN != 0 {
            self.returns.push_all(&self.scratch[..n]);
            self.counters.returned.add(n as u64);
            self.shut_down(w, first & UNREAD != 0);
            return Request::ShutDown;
        }
        if defer {
            // The caller answers first; `push_deferred` files the returns
            // (already read out of the line, room checked).
            self.deferred = n;
        } else {
            self.returns.push_all(&self.scratch[..n]);
            self.counters.returned.add(n as u64);
        }
        if !ws.active {
            ws.active = true;
            self.active += 1;
        }
        ws.ready = true;
        Request::Ready
    }

    /// Files the returns a deferred `take_request` left in `scratch`.
    #[inline]
    fn push_deferred(&mut self) {
        let n = std::mem::take(&mut self.deferred);
        self.returns.push_all(&self.scratch[..n]);
        self.counters.returned.add(n as u64);
    }

    /// Worker `w` shuts down: its unread batch (if `unread`) and backlog go
    /// to `pending`, its tags are cleared, and its request is answered with
    /// an empty batch.
    fn shut_down(&mut self, w: usize, unread: bool) {
        let lines = &self.shared.lines[w];
        // They go before what is already pending: a packet still pending
        // may belong to a flow whose older packets were placed on this
        // worker by the drain now under way.
        let ws = &mut self.workers[w];
        self.pending.push_front_all(&ws.backlog[..ws.backlog_len]);
        self.counters.redistributed.add(ws.backlog_len as u64);
        if unread {
            // Handed before the backlog: first in line.
            let n = lines.unread_batch(&mut self.scratch);
            self.pending.push_front_all(&self.scratch[..n]);
            self.counters.redistributed.add(n as u64);
        }
        ws.backlog_len = 0;
        ws.in_flight = 0;
        self.tags[w] = WorkerTags::default();
        if ws.active {
            ws.active = false;
            self.active -= 1;
        }
        ws.ready = false;
        ws.parity ^= PARITY;
        lines.answer(ws.parity, &[]);
        self.counters.shutdowns.inc();
    }

    /// Hands worker `w` (ready) its backlog.
    fn release(&mut self, w: usize) {
        let ws = &mut self.workers[w];
        debug_assert!(ws.ready);
        let n = ws.backlog_len;
        let t = &mut self.tags[w].0;
        t.copy_within(BURST_SIZE.., 0);
        t[BURST_SIZE..].fill(0);
        ws.in_flight = n;
        ws.backlog_len = 0;
        ws.ready = false;
        ws.parity ^= PARITY;
        self.shared.lines[w].answer(ws.parity, &ws.backlog[..n]);
        ws.handed.add(n as u64);
    }

    /// The active worker with the fewest packets in flight and queued (the
    /// lowest id among equals). There is one.
    #[inline]
    fn least_loaded(&self) -> usize {
        least_loaded(
            self.workers
                .iter()
                .map(|ws| (ws.active, ws.in_flight + ws.backlog_len)),
        )
    }

    /// Queues packet `e` (flow `flow`) for worker `w`, first handing `w`
    /// its full backlog — waiting for it to ask, if need be. On success the
    /// packet is the distributor's.
    #[inline]
    fn place(&mut self, e: Elem, flow: u16, w: usize) -> Result<(), Blocked> {
        if self.workers[w].backlog_len == BURST_SIZE {
            let mut spins = 0u32;
            loop {
                match self.take_request(w, true) {
                    Request::Ready => break,
                    Request::None => backoff(&mut spins),
                    Request::Refused => return Err(Blocked::ReturnsFull),
                    Request::ShutDown => return Err(Blocked::Rematch),
                }
            }
            // The worker waits: answer before filing its returns.
            self.release(w);
            self.push_deferred();
        }
        let ws = &mut self.workers[w];
        ws.backlog[ws.backlog_len] = e;
        self.tags[w].0[BURST_SIZE + ws.backlog_len] = flow;
        ws.backlog_len += 1;
        if ws.backlog_len == BURST_SIZE && ws.ready {
            self.release(w);
        }
        Ok(())
    }

    /// Hands out the packets taken back from workers that shut down; false
    /// if some are left (no active worker, or blocked by a full returns
    /// FIFO).
    fn drain_pending(&mut self) -> bool {
        let mut matches = [0u8; BURST_SIZE];
        while let Some(e) = self.pending.front() {
            if self.active == 0 {
                return false;
            }
            // SAFETY: a packet the distributor owns; we read its header.
            let flow = flow_tag(unsafe { header(e) }.rss_hash);
            let mut flows = [0u16; BURST_SIZE];
            flows[0] = flow;
            self.matcher.find_matches(&self.tags, &flows, &mut matches);
            let w = match matches[0] {
                0 => self.least_loaded(),
                m => m as usize - 1,
            };
            match self.place(e, flow, w) {
                Ok(()) => {
                    self.pending.pop();
                }
                Err(Blocked::Rematch) => {}
                Err(Blocked::ReturnsFull) => return false,
            }
        }
        true
    }
}

/// What `take_request` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    /// No open request.
    None,
    /// The worker waits for a batch.
    Ready,
    /// Its returns do not fit.
    Refused,
    /// It shut down.
    ShutDown,
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

/// Spins: tight for the first polls (an answer due within a cache-line
/// round trip is seen at once: a `pause` can cost tens of cycles), then with
/// the spin-wait hint, yielding the CPU every 256 polls (more threads than
/// cores).
#[inline]
pub(crate) fn backoff(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    #[cfg(not(loom))]
    {
        if *spins < 64 {
            return;
        }
        if spins.is_multiple_of(256) {
            std::thread::yield_now();
            return;
        }
    }
    spin_loop();
}

/// As [`backoff`] but with the spin-wait hint from the first poll: for the
/// single-packet API, whose one word per worker is polled by both sides —
/// tight polling there keeps stealing the line from its writer.
#[inline]
pub(crate) fn backoff_paused(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    #[cfg(not(loom))]
    {
        if spins.is_multiple_of(256) {
            std::thread::yield_now();
            return;
        }
    }
    spin_loop();
}

impl Drop for Distributor {
    fn drop(&mut self) {
        // Answer every open request with an empty batch (taking its
        // returns, and an unread batch of a shutdown), then say we are gone:
        // a worker that sees `gone` and no answer knows none will come.
        for w in 0..self.workers.len() {
            let ws = &mut self.workers[w];
            let lines = &self.shared.lines[w];
            // SAFETY: the backlog's packets are ours, each once.
            unsafe { free_pkts(&ws.backlog[..ws.backlog_len]) };
            ws.backlog_len = 0;
            if !ws.ready {
                let Some(first) = lines.pending(ws.parity) else {
                    continue;
                };
                let n = lines.take_returns(first, &mut self.scratch);
                // SAFETY: an open request's returns are ours.
                unsafe { free_pkts(&self.scratch[..n]) };
                if first & UNREAD != 0 {
                    let n = lines.unread_batch(&mut self.scratch);
                    // SAFETY: an unread batch handed back is ours.
                    unsafe { free_pkts(&self.scratch[..n]) };
                }
            }
            ws.ready = false;
            ws.parity ^= PARITY;
            lines.answer(ws.parity, &[]);
        }
        // Release: pairs with the workers' Acquire of `gone`.
        self.shared.gone.store(1, Ordering::Release);
        // `returns` and `pending` free theirs when dropped.
    }
}

impl std::fmt::Debug for Distributor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distributor")
            .field("workers", &self.workers.len())
            .field("active", &self.active)
            .field("matching", &self.matcher.imp())
            .field("outstanding", &self.outstanding())
            .field("returns_waiting", &self.returns.len())
            .finish()
    }
}
