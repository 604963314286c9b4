//! The built-in traffic tester: generates stamped Ethernet/IP/UDP|TCP frames
//! and checks every frame that comes back.
//!
//! A [`Tester`] is shared (`Arc<Tester>`) by the places that send and receive
//! its traffic — typically `soft` ports cabled to it, or `sluice gen`. It
//! works on byte slices only.
//!
//! - Each attached port adds a **stream** ([`Tester::add_stream`]); a stream
//!   has `flows` flows, each with its own 5-tuple ([`Tester::flow_tuple`]) and
//!   its own sequence numbers from 0. Each tester numbers its streams from 0;
//!   frames name their stream by a tag unique in the process, so a checker
//!   counts another tester's frames as foreign.
//! - A [`Generator`] sends a subset of one stream's flows (for instance those
//!   RSS maps to one Rx queue), round-robin, at full speed or a share of the
//!   stream's rate, up to its share of the stream's count. The stream's
//!   sequence numbers live in the tester, so a generator made again for the
//!   same flows (a port restarted) continues where the last one stopped.
//! - A [`Checker`] checks frames at one egress point; any number of checkers
//!   share per-flow order state in atomics (no lock on the per-packet path).
//! - [`Tester::report`] sums everything at any time: sent, received, lost,
//!   reordered, duplicates, corrupt, foreign.
//! - [`Tester::latency`] gives, per port, the one-way latency of the frames
//!   received back: each frame carries its send time (the generator's TSC)
//!   and the checker of the port it left records `now - sent` into an
//!   HdrHistogram ([`latency`]).
//!
//! What a frame carries and why the checksums cost O(1) per frame is in
//! [`frame`]; how frames are counted is in [`Checker`].
//!
//! ```
//! use sluice::tester::{Tester, TesterConfig};
//!
//! let t = Tester::new(TesterConfig { count: Some(4), ..TesterConfig::default() });
//! let stream = t.add_stream()?; // at most MAX_STREAMS alive in a process
//! let mut generator = t.generator(stream, (0..16).collect());
//! let mut checker = t.checker();
//! let mut buf = [0u8; 2048];
//! while let Some(len) = generator.fill(&mut buf, 0) {
//!     checker.check(&buf[..len]);
//! }
//! let r = t.report();
//! assert_eq!((r.sent, r.received, r.lost), (4, 4, 0));
//! assert!(r.is_clean(), "{r}");
//! # Ok::<(), sluice::tester::TesterError>(())
//! ```
//!
//! Testers can be named and found again through a registry of weak
//! references ([`attach`], [`registered`]): a tester lives while something
//! holds it.

mod checker;
mod config;
pub mod frame;
mod generator;
pub mod latency;
mod registry;
mod report;
mod tags;

#[cfg(all(test, not(loom)))]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

pub use checker::Checker;
pub use config::{
    DEFAULT_DST_MAC, DEFAULT_SEED, DEFAULT_SRC_MAC, FrameSize, L3, L4, MAX_FRAME, MAX_RATE,
    MIN_FRAME, MIN_RATE, TESTER_KEYS, TesterConfig,
};
pub use frame::{FlowTuple, MAX_FLOWS, MAX_STREAMS};
pub use generator::{Generator, IMIX_ORDER};
pub use latency::{LATENCY_MAX_NS, LatencySummary, PUBLISH_MS, PortLatency};
pub use registry::{attach, registered};
pub use report::TesterReport;

use checker::{CheckStats, FlowOrder};
use frame::{Layout, StreamIds};
use generator::GenStats;

/// Why the tester refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TesterError {
    /// [`MAX_STREAMS`] streams are alive in the process: a frame's stamp
    /// has room for no more stream tags.
    TooManyStreams,
}

impl std::fmt::Display for TesterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TesterError::TooManyStreams => write!(
                f,
                "tester: a process has at most {MAX_STREAMS} tester streams alive at once"
            ),
        }
    }
}

impl std::error::Error for TesterError {}

/// One stream's state shared by its generators and all checkers.
#[derive(Debug)]
pub(crate) struct StreamState {
    /// Its number in the tester and its stamp tag.
    pub(crate) ids: StreamIds,
    /// Per flow: receive order (checkers).
    order: Box<[FlowOrder]>,
    /// Per flow: the next sequence number to send (generators).
    next_seq: Box<[AtomicU64]>,
}

impl Drop for StreamState {
    /// Gives the stream's tag back: no generator or checker holds the
    /// stream any more.
    fn drop(&mut self) {
        tags::give_back(self.ids.tag);
    }
}

/// A traffic generator and checker (see the [module docs](self)).
#[derive(Debug)]
pub struct Tester {
    config: TesterConfig,
    layout: Layout,
    streams: RwLock<Vec<Arc<StreamState>>>,
    /// How many streams have been added: `streams.len()`, stored under its
    /// write lock with Release, read without the lock with Acquire
    /// ([`streams`](Tester::streams)).
    added: AtomicU16,
    generators: Mutex<Vec<Arc<GenStats>>>,
    checkers: Mutex<Vec<Arc<CheckStats>>>,
    /// Generators send nothing while set ([`pause`](Tester::pause)).
    paused: AtomicBool,
}

impl Tester {
    /// A tester for `config`. Out-of-range values are brought into range:
    /// `flows` to 1..=[`MAX_FLOWS`], a fixed size to 60..=9000, a rate that
    /// is not above 0 (or not finite) to full speed and any other to
    /// [`MIN_RATE`]..=[`MAX_RATE`], a count of 0 to 1.
    pub fn new(config: TesterConfig) -> Arc<Tester> {
        let config = Self::new_config(config);
        Arc::new(Tester {
            layout: Layout::new(&config),
            config,
            streams: RwLock::new(Vec::new()),
            added: AtomicU16::new(0),
            generators: Mutex::new(Vec::new()),
            checkers: Mutex::new(Vec::new()),
            paused: AtomicBool::new(false),
        })
    }

    /// `config` brought into range, as [`new`](Self::new) does.
    fn new_config(mut config: TesterConfig) -> TesterConfig {
        config.flows = config.flows.clamp(1, MAX_FLOWS);
        if let FrameSize::Fixed(n) = config.size {
            config.size = FrameSize::Fixed(n.clamp(MIN_FRAME, MAX_FRAME));
        }
        if config.rate_pps.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            config.rate_pps = None;
        }
        config.rate_pps = config.rate_pps.map(|r| r.clamp(MIN_RATE, MAX_RATE));
        config.count = config.count.map(|n| n.max(1));
        config
    }

    /// The configuration (after [`new`](Self::new) brought it into range).
    pub fn config(&self) -> &TesterConfig {
        &self.config
    }

    /// Adds a stream (one per attached port) and returns its number, from 0.
    ///
    /// The stream's frames carry a tag unique among the streams alive in the
    /// process (see [`frame`]), so a checker of this tester counts the
    /// frames of another tester's streams as foreign, while both number
    /// their streams (and so their addresses) from 0.
    ///
    /// # Errors
    /// [`TesterError::TooManyStreams`] when [`MAX_STREAMS`] streams are
    /// alive in the process (over all its testers); nothing is added then.
    pub fn add_stream(&self) -> Result<u16, TesterError> {
        let flows = self.config.flows as usize;
        let order = (0..flows).map(|_| FlowOrder::default()).collect();
        let next_seq = (0..flows).map(|_| AtomicU64::new(0)).collect();
        let mut streams = self.streams.write().unwrap_or_else(PoisonError::into_inner);
        let tag = tags::take().ok_or(TesterError::TooManyStreams)?;
        // From here the state owns the tag: its drop gives it back.
        let number = streams.len() as u16;
        streams.push(Arc::new(StreamState {
            ids: StreamIds { number, tag },
            order,
            next_seq,
        }));
        self.added.store(number + 1, Ordering::Release);
        Ok(number)
    }

    /// How many streams have been added (read without the lock: checkers
    /// ask on their path, to see when their cache is out of date).
    #[inline]
    pub fn streams(&self) -> u16 {
        self.added.load(Ordering::Acquire)
    }

    /// The streams added so far, in order.
    pub(crate) fn all_streams(&self) -> Vec<Arc<StreamState>> {
        self.streams
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn stream(&self, stream: u16) -> Option<Arc<StreamState>> {
        self.streams
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(usize::from(stream))
            .cloned()
    }

    /// The addresses, ports and protocol of `flow` of `stream` (any values;
    /// the flow is taken modulo [`MAX_FLOWS`]).
    pub fn flow_tuple(&self, stream: u16, flow: u32) -> FlowTuple {
        self.layout.flow_tuple(stream, flow & (MAX_FLOWS - 1))
    }

    /// A generator for `flows` of `stream`, sent round-robin in ascending
    /// order (duplicates in `flows` are ignored; an empty list makes a
    /// generator that never sends).
    ///
    /// Each flow should belong to one live generator at a time: two sending
    /// the same flow at once send the same sequence numbers, which checkers
    /// count as duplicates.
    ///
    /// # Panics
    /// When `stream` was not added or a flow is not below `flows`.
    pub fn generator(self: &Arc<Self>, stream: u16, flows: Vec<u32>) -> Generator {
        let state = self
            .stream(stream)
            .unwrap_or_else(|| panic!("tester stream {stream} was not added"));
        let stats = Arc::new(GenStats::default());
        self.generators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(stats.clone());
        Generator::new(self.clone(), stream, state, flows, stats)
    }

    /// A checker: one per egress point, any number. Its latency samples
    /// count for port 0 (see [`checker_for`](Self::checker_for)).
    pub fn checker(self: &Arc<Self>) -> Checker {
        self.checker_for(0)
    }

    /// A checker of the frames port `port` sends: its latency samples count
    /// for that port in [`latency`](Self::latency). The process's first
    /// checker measures the TSC frequency ([`tsc_hz`](crate::tsc::tsc_hz),
    /// about 150 ms), so no frame waits for it.
    pub fn checker_for(self: &Arc<Self>, port: u16) -> Checker {
        let stats = Arc::new(CheckStats::new(port));
        self.checkers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(stats.clone());
        Checker::new(self.clone(), stats)
    }

    /// Stops (`true`) or resumes (`false`) every generator of this tester:
    /// while paused, [`Generator::fill`] writes nothing and
    /// [`Generator::ready`] is 0. An application pauses the tester at the end
    /// of a run and forwards until nothing is in flight, so that `lost` is
    /// final.
    pub fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    /// Whether the generators are paused.
    #[inline]
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// The counts so far, summed over all generators and checkers. `lost` is
    /// final once every frame sent has been checked or dropped.
    pub fn report(&self) -> TesterReport {
        let mut r = TesterReport::default();
        for g in self
            .generators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            g.add_to(&mut r);
        }
        for c in self
            .checkers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            c.add_to(&mut r);
        }
        r.lost = r.sent.saturating_sub(r.received);
        r
    }

    /// The one-way latency of the frames received so far, per port (ports
    /// with a checker, ascending; a port whose frames carried no send time
    /// has an empty histogram). Samples a checker has not published yet
    /// (at most [`PUBLISH_MS`] of them, all once it is dropped) are not in
    /// it. Each checker's histogram is locked while it is added; the
    /// checkers never wait for it.
    pub fn latency(&self) -> Vec<PortLatency> {
        let checkers: Vec<Arc<CheckStats>> = self
            .checkers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut out: Vec<PortLatency> = Vec::new();
        for c in &checkers {
            let port = c.latency.port;
            let i = match out.binary_search_by_key(&port, |l| l.port) {
                Ok(i) => i,
                Err(i) => {
                    out.insert(
                        i,
                        PortLatency {
                            port,
                            histogram: latency::latency_histogram(),
                        },
                    );
                    i
                }
            };
            c.latency.add_to(&mut out[i].histogram);
        }
        out
    }
}
