//! The per-worker cache lines and the handshake on them.
//!
//! # Layout
//! Each worker has two 64-byte lines of eight 64-bit slots:
//! - `bufs`, written only by the distributor: the packets it hands the
//!   worker, packed from slot 0 and ended by a 0 slot (or the line's end);
//! - `rets`, written only by the worker: the packets it gives back, packed
//!   the same way.
//!
//! A slot is a packet's address (an mbuf header, 64-byte aligned, so its
//! six low bits are 0) or-ed with flag bits, which only slot 0 carries.
//! Each line sits alone in a 128-byte block: an adjacent-line prefetcher
//! fetches 128-byte aligned pairs, so the pair of a line is padding, never
//! another worker's line nor the other direction's.
//!
//! # The handshake: two parity bits
//! Bit 0 of `rets[0]` is the worker's parity `W`, bit 0 of `bufs[0]` the
//! distributor's `D`. Each side only flips its own, by rewriting its own
//! line, so each line moves between the cores once per exchange:
//! - `W == D`: the worker owns both lines. It reads the batch in `bufs`
//!   (the packets of the last answer, if it has not taken them yet) and may
//!   write `rets`.
//! - The worker **requests** by writing its returns into `rets` and then
//!   `rets[0]` with `W` flipped (Release). Now `W != D`: the distributor
//!   owns both lines.
//! - The distributor sees `W != D` (an Acquire load of `rets[0]`, pairing
//!   with that Release), reads the returns, and later **answers** by writing
//!   a batch into `bufs` and then `bufs[0]` with `D` flipped (Release).
//! - The worker sees `D == W` (an Acquire load of `bufs[0]`, pairing with
//!   that Release) and takes the batch: `W == D` again.
//!
//! The flags a request may carry in `rets[0]`: [`SHUTDOWN`] (the worker
//! stops; the distributor takes its returns, answers with an empty batch and
//! gives it nothing more) and, with it, [`UNREAD`] (the worker never took
//! the batch of the last answer: the distributor takes those packets back
//! and hands them to other workers).
//!
//! Nothing here owns a packet: the two sides (`Distributor`, `Worker`)
//! track whose each slot's packet is, by the rules above.

use crate::mempool::Elem;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

use super::BURST_SIZE;
use super::returns::free_pkts;

/// `rets[0]`, `bufs[0]`: the side's parity bit.
pub(crate) const PARITY: u64 = 1;
/// `rets[0]`: the worker is shutting down.
pub(crate) const SHUTDOWN: u64 = 2;
/// `rets[0]`, with [`SHUTDOWN`]: the last answer's batch was never taken.
pub(crate) const UNREAD: u64 = 4;
/// The low bits a slot or word may use for flags (mbuf headers are 64-byte
/// aligned).
pub(crate) const FLAGS: u64 = 63;

/// Eight slots in a 128-byte block of their own.
#[repr(C, align(128))]
pub(crate) struct Line([AtomicU64; BURST_SIZE]);

impl Line {
    fn new() -> Line {
        Line(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    /// Writes `pkts` (at most eight) packed from slot 0, a 0 after them if
    /// there is room, and finally slot 0 with `flags` — with Release, so a
    /// reader that sees slot 0 with Acquire sees the rest.
    #[inline]
    fn publish(&self, pkts: &[Elem], flags: u64) {
        debug_assert!(pkts.len() <= BURST_SIZE);
        for (k, e) in pkts.iter().enumerate().skip(1) {
            self.0[k].store(addr(*e), Ordering::Relaxed);
        }
        if pkts.len() < BURST_SIZE && !pkts.is_empty() {
            self.0[pkts.len()].store(0, Ordering::Relaxed);
        }
        let first = pkts.first().map_or(0, |e| addr(*e));
        // Release: pairs with the reader's Acquire of slot 0 (`read_first`),
        // publishing the slots above (and the packets' contents).
        self.0[0].store(first | flags, Ordering::Release);
    }

    /// Slot 0 (Acquire: pairs with `publish`'s Release).
    #[inline(always)]
    fn read_first(&self) -> u64 {
        self.0[0].load(Ordering::Acquire)
    }

    /// The packets of a line whose slot 0 read `first`, into `out`; how
    /// many. Call only after `read_first` returned `first`, while owning
    /// the line.
    #[inline]
    fn read_pkts(&self, first: u64, out: &mut [Elem; BURST_SIZE]) -> usize {
        let p0 = first & !FLAGS;
        if p0 == 0 {
            return 0;
        }
        out[0] = elem(p0);
        let mut n = 1;
        while n < BURST_SIZE {
            // Relaxed: ordered by the Acquire that read `first`.
            let p = self.0[n].load(Ordering::Relaxed);
            if p == 0 {
                break;
            }
            out[n] = elem(p);
            n += 1;
        }
        n
    }
}

/// A packet's address, as a slot or word holds it.
#[inline(always)]
pub(crate) fn addr(e: Elem) -> u64 {
    let a = e.as_ptr() as u64;
    debug_assert!(a & FLAGS == 0, "packet address {a:#x} not 64-byte aligned");
    a
}

/// The packet at address `a`.
#[inline(always)]
pub(crate) fn elem(a: u64) -> Elem {
    // Only called on an address part that holds a packet, written by
    // `addr` (non-zero: checked by the callers).
    Elem::from_ptr(std::ptr::NonNull::new(a as *mut u8).expect("a packet address"))
}

/// One worker's two lines.
#[repr(C)]
pub(crate) struct WorkerLines {
    /// Distributor → worker.
    bufs: Line,
    /// Worker → distributor.
    rets: Line,
    /// 1 while the worker, waiting for an answer, asks to stop: the
    /// distributor then answers with an empty batch and shuts it down. Only
    /// the worker writes it; it has a 128-byte block of its own.
    quit: AtomicU32,
}

impl WorkerLines {
    fn new() -> WorkerLines {
        WorkerLines {
            bufs: Line::new(),
            rets: Line::new(),
            quit: AtomicU32::new(0),
        }
    }

    /// Worker: asks (with its request open) to stop waiting, or withdraws
    /// that once answered.
    #[inline]
    pub(crate) fn set_quit(&self, on: bool) {
        // Release: pairs with the distributor's Acquire in `quitting`.
        self.quit.store(on as u32, Ordering::Release);
    }

    /// Distributor: whether the worker asks to stop waiting.
    #[inline(always)]
    pub(crate) fn quitting(&self) -> bool {
        // Acquire: pairs with `set_quit`'s Release.
        self.quit.load(Ordering::Acquire) != 0
    }

    // ---- worker side ----

    /// Requests: writes `rets` (at most eight) and `flags`, with the
    /// worker's parity flipped to `parity`. The worker owned the lines.
    #[inline]
    pub(crate) fn request(&self, parity: u64, flags: u64, rets: &[Elem]) {
        self.rets.publish(rets, parity | flags);
    }

    /// Whether the distributor has answered the request made with
    /// `parity`; if so, `bufs[0]` as read (Acquire: pairs with
    /// [`answer`](Self::answer)'s Release).
    #[inline(always)]
    pub(crate) fn answered(&self, parity: u64) -> Option<u64> {
        let b = self.bufs.read_first();
        (b & PARITY == parity).then_some(b)
    }

    /// The batch of an answer whose `bufs[0]` read `first`.
    #[inline]
    pub(crate) fn take_batch(&self, first: u64, out: &mut [Elem; BURST_SIZE]) -> usize {
        self.bufs.read_pkts(first, out)
    }

    /// The worker's own last request word (only the worker writes it).
    #[inline(always)]
    pub(crate) fn own_request(&self) -> u64 {
        self.rets.0[0].load(Ordering::Relaxed)
    }

    // ---- distributor side ----

    /// `rets[0]` if the worker has a request the distributor (whose parity
    /// is `parity`) has not answered (Acquire: pairs with
    /// [`request`](Self::request)'s Release).
    #[inline(always)]
    pub(crate) fn pending(&self, parity: u64) -> Option<u64> {
        let r = self.rets.read_first();
        (r & PARITY != parity).then_some(r)
    }

    /// The returns of a request whose `rets[0]` read `first`.
    #[inline]
    pub(crate) fn take_returns(&self, first: u64, out: &mut [Elem; BURST_SIZE]) -> usize {
        self.rets.read_pkts(first, out)
    }

    /// The batch of the distributor's last answer, still in `bufs`: for a
    /// request flagged [`UNREAD`].
    #[inline]
    pub(crate) fn unread_batch(&self, out: &mut [Elem; BURST_SIZE]) -> usize {
        let first = self.bufs.0[0].load(Ordering::Relaxed);
        self.bufs.read_pkts(first, out)
    }

    /// Answers the pending request: writes `batch` (at most eight) into
    /// `bufs`, with the distributor's parity flipped to `parity`.
    #[inline]
    pub(crate) fn answer(&self, parity: u64, batch: &[Elem]) {
        self.bufs.publish(batch, parity);
    }
}

/// `Shared::claimed`: no handle.
pub(crate) const CLAIM_FREE: u32 = 0;
/// `Shared::claimed`: a handle is alive.
pub(crate) const CLAIM_LIVE: u32 = 1;
/// `Shared::claimed`: no handle; the last one was dropped by a panic with a
/// request open, whose answer (and batch) the next handle takes.
pub(crate) const CLAIM_INHERIT: u32 = 2;

/// What the distributor and its workers share.
pub(crate) struct Shared {
    /// One pair of lines per worker.
    pub(crate) lines: Box<[WorkerLines]>,
    /// Per worker: [`CLAIM_FREE`], [`CLAIM_LIVE`] while a `Worker` handle
    /// for it is alive, or [`CLAIM_INHERIT`].
    pub(crate) claimed: Box<[AtomicU32]>,
    /// 1 once the distributor is gone: it answers nothing more. Stored
    /// (Release) after its last answer, so a worker that sees it (Acquire)
    /// and then no answer knows none will come.
    pub(crate) gone: AtomicU32,
}

impl Shared {
    pub(crate) fn new(workers: usize) -> Shared {
        Shared {
            lines: (0..workers).map(|_| WorkerLines::new()).collect(),
            claimed: (0..workers).map(|_| AtomicU32::new(CLAIM_FREE)).collect(),
            gone: AtomicU32::new(0),
        }
    }
}

impl Drop for Shared {
    /// Both ends are gone, so no thread can race: frees what a line still
    /// holds that no one took — the returns (and an unread batch) of a
    /// request published after the distributor had looked at the worker for
    /// the last time, or the answer a panic-dropped handle left behind.
    fn drop(&mut self) {
        let mut pkts = [Elem::DANGLING; BURST_SIZE];
        for (w, l) in self.lines.iter().enumerate() {
            let r = l.rets.0[0].load(Ordering::Relaxed);
            let b = l.bufs.0[0].load(Ordering::Relaxed);
            let open = (r ^ b) & PARITY != 0;
            if open {
                let n = l.rets.read_pkts(r, &mut pkts);
                // SAFETY: handed over a line and never taken, with both
                // ends gone: we are their last owner.
                unsafe { free_pkts(&pkts[..n]) };
            }
            let inherited = self.claimed[w].load(Ordering::Relaxed) == CLAIM_INHERIT;
            if (open && r & UNREAD != 0) || (!open && inherited) {
                let n = l.bufs.read_pkts(b, &mut pkts);
                // SAFETY: handed over a line and never taken, with both
                // ends gone: we are their last owner.
                unsafe { free_pkts(&pkts[..n]) };
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn each_line_has_a_128_byte_block_of_its_own() {
        assert_eq!(std::mem::size_of::<Line>(), 128);
        assert_eq!(std::mem::align_of::<Line>(), 128);
        assert_eq!(std::mem::size_of::<WorkerLines>(), 384);
        assert_eq!(std::mem::offset_of!(WorkerLines, quit), 256);
        let s = Shared::new(3);
        for (i, l) in s.lines.iter().enumerate() {
            let b = &l.bufs as *const Line as usize;
            let r = &l.rets as *const Line as usize;
            assert_eq!(b % 128, 0, "worker {i}");
            assert_eq!(r, b + 128, "worker {i}");
        }
    }
}
