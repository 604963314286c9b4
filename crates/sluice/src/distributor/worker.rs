//! The worker side of the burst distributor: a [`Worker`] handle per worker
//! id, held by the thread that does that worker's job.
//!
//! A worker calls [`get_pkt`](Worker::get_pkt) in a loop: it hands back the
//! packets it is done with and receives up to eight new ones, in one
//! exchange of two cache lines (see `lines`). It ends with
//! [`return_pkt`](Worker::return_pkt), or by dropping the handle, which
//! does the same with no packets.

use crate::mbuf::BurstSlice;
use crate::mempool::Elem;
use crate::sync::{Arc, Ordering};

use super::burst::backoff;
use super::lines::{CLAIM_FREE, CLAIM_INHERIT, PARITY, SHUTDOWN, Shared, UNREAD, WorkerLines};
use super::returns::free_pkts;
use super::{BURST_SIZE, DistError};

/// Where a worker stands in the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// It owns its lines, with no batch left to take.
    Idle,
    /// It has requested; the answer's batch is for it.
    Requested,
    /// It has shut down; the distributor's empty answer is still due.
    ShutDown,
}

/// One worker's end of a distributor; every call takes `&mut self`, so one
/// thread at a time uses it. Made by [`Distributor::worker`](super::Distributor::worker); at most
/// one handle per worker id is alive at a time.
pub struct Worker {
    shared: Arc<Shared>,
    id: usize,
    /// The parity of the worker's last request (bit 0 of `rets[0]`).
    parity: u64,
    state: State,
    /// Scratch for one line's packets.
    scratch: [Elem; BURST_SIZE],
}

// SAFETY: the handle's packet addresses are packets the worker owns; the
// shared lines are atomics. A handle moves between threads as a whole.
unsafe impl Send for Worker {}

impl Worker {
    pub(crate) fn new(shared: Arc<Shared>, id: usize, inherit: bool) -> Worker {
        // The worker's last request word is its own: start from its parity
        // (equal to the distributor's when the distributor is new; after a
        // dropped handle, the one it left).
        let own = shared.lines[id].own_request();
        let parity = own & PARITY;
        let state = if inherit {
            // The previous handle was dropped by a panic with a request
            // open: its answer, come or to come, is this handle's to take.
            State::Requested
        } else if shared.lines[id].answered(parity).is_some() {
            State::Idle
        } else {
            // The previous handle shut down and the distributor has not yet
            // answered: wait for that before requesting.
            State::ShutDown
        };
        Worker {
            shared,
            id,
            parity,
            state,
            scratch: [Elem::DANGLING; BURST_SIZE],
        }
    }

    /// This worker's id.
    pub fn id(&self) -> usize {
        self.id
    }

    fn lines(&self) -> &WorkerLines {
        &self.shared.lines[self.id]
    }

    /// Hands back up to eight packets from the front of `returns` (the rest
    /// stay there) and receives a batch of up to eight into `out`, waiting
    /// for the distributor; returns how many were received. One exchange
    /// does both. `out` needs room for eight.
    ///
    /// After a [`request_pkt`](Self::request_pkt) whose answer was not yet
    /// taken, it takes that answer and hands nothing back. Fails with
    /// [`DistError::Closed`] once the distributor is gone (the returns stay
    /// in `returns`).
    pub fn get_pkt(
        &mut self,
        returns: &mut BurstSlice,
        out: &mut BurstSlice,
    ) -> Result<usize, DistError> {
        if out.free() < BURST_SIZE {
            return Err(DistError::BurstTooSmall { free: out.free() });
        }
        if self.state != State::Requested {
            self.request_pkt(returns)?;
        }
        let mut spins = 0u32;
        loop {
            if let Some(n) = self.poll_pkt(out)? {
                return Ok(n);
            }
            backoff(&mut spins);
        }
    }

    /// Hands back up to eight packets from the front of `returns` (the rest
    /// stay there) and asks for a batch, without waiting: collect it with
    /// [`poll_pkt`](Self::poll_pkt). Returns how many packets went back.
    /// [`DistError::RequestPending`] if the last request's answer was not
    /// taken yet; [`DistError::Closed`] once the distributor is gone.
    pub fn request_pkt(&mut self, returns: &mut BurstSlice) -> Result<usize, DistError> {
        match self.state {
            State::Requested => return Err(DistError::RequestPending { id: self.id }),
            State::ShutDown => {
                // The distributor's answer to the shutdown is due before the
                // lines are ours again.
                let mut spins = 0u32;
                while self.lines().answered(self.parity).is_none() {
                    self.check_gone()?;
                    backoff(&mut spins);
                }
                self.state = State::Idle;
            }
            State::Idle => {}
        }
        // Acquire: pairs with the distributor's Release of `gone`, stored
        // after its last answer: a distributor gone now answers nothing.
        if self.shared.gone.load(Ordering::Acquire) != 0 {
            return Err(DistError::Closed);
        }
        let k = returns.len().min(BURST_SIZE);
        self.parity ^= PARITY;
        self.lines().request(self.parity, 0, &returns.raw()[..k]);
        // SAFETY: the first `k` packets now belong to the distributor (the
        // request published them).
        unsafe { returns.forget_front(k) };
        self.state = State::Requested;
        Ok(k)
    }

    /// Takes the answer to the last request, if it has come: `Some(n)`
    /// with `n` packets appended to `out` (which needs room for eight),
    /// `None` if not yet. [`DistError::NotRequested`] without a request;
    /// [`DistError::Closed`] if the distributor is gone without answering
    /// (the returns handed with the request are then freed).
    pub fn poll_pkt(&mut self, out: &mut BurstSlice) -> Result<Option<usize>, DistError> {
        if self.state != State::Requested {
            return Err(DistError::NotRequested { id: self.id });
        }
        if out.free() < BURST_SIZE {
            return Err(DistError::BurstTooSmall { free: out.free() });
        }
        let Some(first) = self.lines().answered(self.parity) else {
            self.check_gone()?;
            return Ok(None);
        };
        let n = self.shared.lines[self.id].take_batch(first, &mut self.scratch);
        let base = out.len();
        out.spare_slots(n).copy_from_slice(&self.scratch[..n]);
        // SAFETY: the answer handed us these `n` packets, now in `out`.
        unsafe { out.set_len(base + n) };
        self.state = State::Idle;
        Ok(Some(n))
    }

    /// Shuts the worker down: hands back up to eight packets from the front
    /// of `returns` (the rest stay there) and tells the distributor to give
    /// it nothing more; it hands the worker's backlog to other workers.
    /// Returns how many packets went back. With a request open it first
    /// asks the distributor to answer at once and waits for that (the
    /// distributor must be running `process` or `flush`, or be dropped); a
    /// batch that came first goes back untaken, to be handed to another
    /// worker.
    ///
    /// A later [`get_pkt`](Self::get_pkt) or
    /// [`request_pkt`](Self::request_pkt) starts the worker again.
    pub fn return_pkt(&mut self, returns: &mut BurstSlice) -> Result<usize, DistError> {
        let mut flags = SHUTDOWN;
        match self.state {
            State::ShutDown => return Ok(0),
            State::Requested => {
                // Ask the distributor to answer now, even with nothing.
                self.lines().set_quit(true);
                let mut spins = 0u32;
                let first = loop {
                    if let Some(first) = self.lines().answered(self.parity) {
                        break first;
                    }
                    if self.check_gone().is_err() {
                        self.lines().set_quit(false);
                        self.reclaim_returns();
                        return Err(DistError::Closed);
                    }
                    backoff(&mut spins);
                };
                self.lines().set_quit(false);
                self.state = State::Idle;
                if first & !PARITY == 0 {
                    // An empty answer: the distributor has shut us down.
                    if returns.is_empty() {
                        return Ok(0);
                    }
                    // The returns still go back, with a shutdown request.
                } else {
                    // A batch came first: it goes back untaken.
                    flags |= UNREAD;
                }
            }
            State::Idle => {}
        }
        if self.shared.gone.load(Ordering::Acquire) != 0 {
            // No one will read a request: keep what we have.
            self.free_unread(flags);
            self.state = State::Idle;
            return Err(DistError::Closed);
        }
        let k = returns.len().min(BURST_SIZE);
        self.parity ^= PARITY;
        self.lines()
            .request(self.parity, flags, &returns.raw()[..k]);
        // SAFETY: the first `k` packets now belong to the distributor.
        unsafe { returns.forget_front(k) };
        self.state = State::ShutDown;
        Ok(k)
    }

    /// `Err(Closed)` if the distributor is gone and has not answered our
    /// request (it never will).
    fn check_gone(&self) -> Result<(), DistError> {
        // Acquire: pairs with the distributor's Release of `gone`, which
        // follows its last answer: if that answer was ours, we see it below.
        if self.shared.gone.load(Ordering::Acquire) != 0
            && self.lines().answered(self.parity).is_none()
        {
            return Err(DistError::Closed);
        }
        Ok(())
    }

    /// After the distributor went away without answering our request: the
    /// returns we handed with it are ours again; they are freed.
    fn reclaim_returns(&mut self) {
        let first = self.lines().own_request();
        let n = self.shared.lines[self.id].take_returns(first, &mut self.scratch);
        // SAFETY: the distributor never took them: ours again, each once.
        unsafe { free_pkts(&self.scratch[..n]) };
        // The line's word is ours alone now; flipping back keeps `W == D`.
        self.parity ^= PARITY;
        self.lines().request(self.parity, 0, &[]);
        self.state = State::Idle;
    }

    /// With the distributor gone: frees the answered batch if `flags` says
    /// it was never taken.
    fn free_unread(&mut self, flags: u64) {
        if flags & UNREAD != 0
            && let Some(first) = self.lines().answered(self.parity)
        {
            let n = self.shared.lines[self.id].take_batch(first, &mut self.scratch);
            // SAFETY: the answer's batch is ours, never taken before.
            unsafe { free_pkts(&self.scratch[..n]) };
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Shut down cleanly: the distributor takes back an unread batch and
        // hands this worker's backlog to others. (With the distributor
        // gone, what the handle holds is freed.)
        // While a panic unwinds, waiting for the distributor could hang the
        // thread (it may be this one): the open request's answer is left to
        // the next handle for this id (or freed with the shared lines).
        let claim = if self.state == State::Requested && std::thread::panicking() {
            CLAIM_INHERIT
        } else {
            let mut none = crate::mbuf::Burst::<0>::new();
            let _ = self.return_pkt(&mut none);
            CLAIM_FREE
        };
        // Release: pairs with the Acquire of the next claim.
        self.shared.claimed[self.id].store(claim, Ordering::Release);
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.id)
            .field("state", &self.state)
            .finish()
    }
}
