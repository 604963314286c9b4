//! The wire: two soft ports cabled together (`wire=NAME` on both). Frames
//! leaving one port's Tx enter the other's Rx as bytes — a copy, as on a
//! real cable; no buffer crosses.
//!
//! # Model
//! The receiving port's MAC has one frame FIFO per Rx queue (a [`Lane`]),
//! filled by its RSS classifier as frames arrive. A wire has no thread of
//! its own, so the arrival — classify (Toeplitz hash, RETA), copy into a
//! lane slot — runs in the sending port's Tx engine; the receiving Rx
//! engine later moves the frame from its lane into a buffer. A lane is a
//! fixed array of frame slots (allocated at setup) and two lock-free rings
//! of slot numbers from `crate::ring`: `full` (any sending Tx engine
//! produces, the lane's Rx engine consumes) and `free` (the other way), so
//! no packet allocates and nothing locks.
//!
//! Flow control: with `fc=on` on the receiving port (802.3x PAUSE) a full
//! lane holds the sender back — its Tx engine leaves the descriptor for its
//! next step, so the sender's Tx ring fills and `tx_burst` takes fewer.
//! With `fc=off` a frame that finds its lane full is dropped, and counted in
//! the receiving queue's `rx_missed`.
//!
//! The cable itself is a named, process-wide [`Wire`] with two ends; each
//! end publishes its lanes when its port is set up, and a generation number
//! tells senders to look again (one atomic load per Tx step).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::ring::{Consumer, Multi, Producer, Ring, Single};

use super::frame::{Reta, RssHasher, parse};

/// Frame slots per lane.
pub const LANE_SLOTS: usize = 256;

/// What a slot holds besides the bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotMeta {
    /// Frame length.
    pub len: u32,
    /// RSS hash the classifier computed.
    pub hash: u32,
    /// RSS type (`desc::rx::RSS_*`).
    pub rss_type: u64,
}

/// One Rx queue's frame FIFO.
pub struct Lane {
    data: Box<[UnsafeCell<u8>]>,
    meta: Box<[UnsafeCell<SlotMeta>]>,
    slot_size: usize,
    /// Templates the senders clone their ring ends from.
    full_tx: Producer<u32, Multi>,
    free_rx: Consumer<u32, Multi>,
    /// Frames dropped at a full lane (fc=off), folded into `rx_missed` by
    /// the lane's Rx engine.
    pub dropped: AtomicU64,
    /// The receiver asks for flow control.
    pub fc: bool,
}

// SAFETY: a slot's bytes and meta are accessed only by whoever holds its
// number, taken from one of the lane's rings (acquire) and handed on through
// the other (release); the ring ends are used through `&mut` of their owners.
unsafe impl Sync for Lane {}
// SAFETY: as above; nothing in a lane is tied to a thread.
unsafe impl Send for Lane {}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("slot_size", &self.slot_size)
            .field("fc", &self.fc)
            .finish()
    }
}

/// The receiving end of a lane (owned by its Rx engine).
pub struct LaneRx {
    lane: Arc<Lane>,
    full: Consumer<u32, Single>,
    free: Producer<u32, Single>,
}

/// A sending end of a lane (one per sending Tx engine).
pub struct LaneTx {
    lane: Arc<Lane>,
    full: Producer<u32, Multi>,
    free: Consumer<u32, Multi>,
}

impl Lane {
    /// A lane of [`LANE_SLOTS`] slots of `slot_size` bytes, and its
    /// receiving end.
    pub fn new(slot_size: usize, fc: bool) -> (Arc<Lane>, LaneRx) {
        let (full_tx, full_rx) = Ring::<u32>::new::<Multi, Single>(LANE_SLOTS).expect("pow2");
        let (mut free_tx, free_rx) = Ring::<u32>::new::<Single, Multi>(LANE_SLOTS).expect("pow2");
        let all: Vec<u32> = (0..LANE_SLOTS as u32).collect();
        free_tx.enqueue_bulk(&all);
        let lane = Arc::new(Lane {
            data: (0..LANE_SLOTS * slot_size)
                .map(|_| UnsafeCell::new(0))
                .collect(),
            meta: (0..LANE_SLOTS)
                .map(|_| UnsafeCell::new(SlotMeta::default()))
                .collect(),
            slot_size,
            full_tx,
            free_rx,
            dropped: AtomicU64::new(0),
            fc,
        });
        let rx = LaneRx {
            lane: Arc::clone(&lane),
            full: full_rx,
            free: free_tx,
        };
        (lane, rx)
    }

    fn slot_ptr(&self, i: u32) -> *mut u8 {
        UnsafeCell::raw_get(self.data[i as usize * self.slot_size..].as_ptr())
    }
}

impl LaneRx {
    /// Takes the oldest frame, if any: its slot number, bytes and meta. Give
    /// the slot back with [`release`](Self::release).
    #[inline]
    pub fn pop(&mut self) -> Option<(u32, &[u8], SlotMeta)> {
        let i = self.full.pop()?;
        // SAFETY: we took slot `i` from the `full` ring (acquire): its
        // sender finished writing before publishing it, and no one else
        // holds it until we put it on `free`.
        let meta = unsafe { *self.lane.meta[i as usize].get() };
        let len = (meta.len as usize).min(self.lane.slot_size);
        // SAFETY: as above; the slot spans `slot_size` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(self.lane.slot_ptr(i), len) };
        Some((i, bytes, meta))
    }

    /// Gives slot `i` (from [`pop`](Self::pop)) back to the senders.
    #[inline]
    pub fn release(&mut self, i: u32) {
        // The free ring holds every slot: there is always room.
        let _ = self.free.push(i);
    }

    /// The lane.
    pub fn lane(&self) -> &Lane {
        &self.lane
    }
}

impl LaneTx {
    fn new(lane: &Arc<Lane>) -> LaneTx {
        LaneTx {
            lane: Arc::clone(lane),
            full: lane.full_tx.clone(),
            free: lane.free_rx.clone(),
        }
    }

    /// Copies `frame` into a free slot and queues it. False when the lane
    /// is full (nothing was copied). A frame longer than a slot (longer
    /// than the receiver's MTU allows) keeps only its head, with its whole
    /// length in the meta, so the receiver counts it as oversize.
    #[inline]
    pub fn send(&mut self, frame: &[u8], hash: u32, rss_type: u64) -> bool {
        let Some(i) = self.free.pop() else {
            return false;
        };
        let n = frame.len().min(self.lane.slot_size);
        // SAFETY: slot `i` came off the `free` ring: ours alone until we
        // publish it on `full`; it spans `slot_size >= n` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(frame.as_ptr(), self.lane.slot_ptr(i), n);
            *self.lane.meta[i as usize].get() = SlotMeta {
                len: frame.len() as u32,
                hash,
                rss_type,
            };
        }
        // `full` has room for every slot.
        let _ = self.full.push(i);
        true
    }
}

/// How a receiving port classifies arriving frames into its lanes.
pub struct RxSide {
    lanes: Vec<Arc<Lane>>,
    hasher: RssHasher,
    reta: Reta,
}

impl RxSide {
    /// One lane per Rx queue, spread by `reta`.
    pub fn new(lanes: Vec<Arc<Lane>>) -> RxSide {
        let reta = Reta::new(lanes.len());
        RxSide {
            lanes,
            hasher: RssHasher::default_key(),
            reta,
        }
    }
}

/// A named cable with two ends.
#[derive(Debug)]
pub struct Wire {
    name: String,
    ends: Mutex<[EndSlot; 2]>,
    /// Bumped whenever an end's receive side changes.
    generation: AtomicU64,
}

#[derive(Default)]
struct EndSlot {
    taken: bool,
    rx: Option<Arc<RxSide>>,
}

impl std::fmt::Debug for EndSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndSlot")
            .field("taken", &self.taken)
            .finish()
    }
}

static WIRES: Mutex<Vec<Weak<Wire>>> = Mutex::new(Vec::new());

/// One port's end of a wire: detaches when dropped.
#[derive(Debug)]
pub struct WireEnd {
    wire: Arc<Wire>,
    side: usize,
}

impl WireEnd {
    /// Plugs a port into the wire `name` (made if needed). Error when both
    /// ends are taken.
    pub fn attach(name: &str) -> Result<WireEnd, String> {
        let mut wires = WIRES.lock().unwrap_or_else(|e| e.into_inner());
        wires.retain(|w| w.strong_count() > 0);
        let wire = match wires
            .iter()
            .filter_map(Weak::upgrade)
            .find(|w| w.name == name)
        {
            Some(w) => w,
            None => {
                let w = Arc::new(Wire {
                    name: name.to_string(),
                    ends: Mutex::new([EndSlot::default(), EndSlot::default()]),
                    generation: AtomicU64::new(0),
                });
                wires.push(Arc::downgrade(&w));
                w
            }
        };
        let mut ends = wire.lock();
        let Some(side) = ends.iter().position(|e| !e.taken) else {
            return Err(format!("wire '{name}' already joins two ports"));
        };
        ends[side].taken = true;
        drop(ends);
        Ok(WireEnd { wire, side })
    }

    /// Whether a port is plugged into the other end.
    pub fn peer_attached(&self) -> bool {
        self.wire.lock()[1 - self.side].taken
    }

    /// An error unless a port is plugged into the other end: a port cabled
    /// to nothing would send every frame into the void and receive none.
    pub fn check_peer(&self) -> Result<(), String> {
        if self.peer_attached() {
            return Ok(());
        }
        let name = &self.wire.name;
        Err(format!(
            "wire '{name}' has one end: no other port names it (cable two soft ports with \
             wire={name})"
        ))
    }

    /// Publishes this port's receive side (at setup).
    pub fn set_rx(&self, rx: RxSide) {
        self.wire.lock()[self.side].rx = Some(Arc::new(rx));
        self.wire.generation.fetch_add(1, Ordering::Release);
    }

    /// A sender toward the other end, for one Tx engine.
    pub fn sender(&self) -> WireTx {
        WireTx {
            wire: Arc::clone(&self.wire),
            peer: 1 - self.side,
            seen: u64::MAX,
            lanes: Vec::new(),
            side: None,
        }
    }
}

impl Drop for WireEnd {
    fn drop(&mut self) {
        let mut ends = self.wire.lock();
        ends[self.side] = EndSlot::default();
        drop(ends);
        self.wire.generation.fetch_add(1, Ordering::Release);
    }
}

impl Wire {
    fn lock(&self) -> std::sync::MutexGuard<'_, [EndSlot; 2]> {
        // Only whole-field assignments happen under the lock: a poisoned
        // lock still holds consistent data.
        self.ends.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a Tx engine holds to send on the wire.
pub struct WireTx {
    wire: Arc<Wire>,
    peer: usize,
    seen: u64,
    lanes: Vec<LaneTx>,
    side: Option<Arc<RxSide>>,
}

/// What became of a frame put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// In the peer's lane.
    Ok,
    /// The lane is full and the peer asks for flow control: try later.
    Pause,
    /// Dropped (lane full without flow control, counted there; or no peer).
    Dropped,
}

impl WireTx {
    /// Looks for a change of the peer (one atomic load when none).
    #[inline]
    pub fn refresh(&mut self) {
        let g = self.wire.generation.load(Ordering::Acquire);
        if g == self.seen {
            return;
        }
        let side = self.wire.lock()[self.peer].rx.clone();
        self.lanes = side
            .as_ref()
            .map(|s| s.lanes.iter().map(LaneTx::new).collect())
            .unwrap_or_default();
        self.side = side;
        self.seen = g;
    }

    /// True when a port is plugged in at the other end.
    #[cfg(all(test, not(loom)))]
    pub fn connected(&self) -> bool {
        self.side.is_some()
    }

    /// Delivers `frame` to the peer: classify, then copy into its lane.
    #[inline]
    pub fn send(&mut self, frame: &[u8]) -> Sent {
        let Some(side) = &self.side else {
            return Sent::Dropped;
        };
        let p = parse(frame);
        let (hash, ty) = side.hasher.frame(frame, &p);
        let q = if ty == 0 { 0 } else { side.reta.queue(hash) };
        let lane = &mut self.lanes[q];
        if lane.send(frame, hash, ty) {
            return Sent::Ok;
        }
        if lane.lane.fc {
            return Sent::Pause;
        }
        lane.lane.dropped.fetch_add(1, Ordering::Relaxed);
        Sent::Dropped
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lane_carries_bytes_and_holds_back_when_full() {
        let (lane, mut rx) = Lane::new(64, true);
        let mut tx = LaneTx::new(&lane);
        for i in 0..LANE_SLOTS {
            assert!(tx.send(&[i as u8; 60], i as u32, 1));
        }
        assert!(!tx.send(&[0; 60], 0, 0), "full");
        let (i, b, m) = rx.pop().unwrap();
        assert_eq!((b.len(), b[0], m.hash), (60, 0, 0));
        rx.release(i);
        assert!(tx.send(&[9; 65], 9, 1), "too long: its head");
        for _ in 1..LANE_SLOTS {
            let (i, _, _) = rx.pop().unwrap();
            rx.release(i);
        }
        let (_, b, m) = rx.pop().unwrap();
        assert_eq!((b.len(), m.len), (64, 65));
    }

    #[test]
    fn a_third_port_is_refused_and_ends_come_back() {
        let a = WireEnd::attach("wire-test-3").unwrap();
        let b = WireEnd::attach("wire-test-3").unwrap();
        assert_eq!(
            WireEnd::attach("wire-test-3").unwrap_err(),
            "wire 'wire-test-3' already joins two ports"
        );
        let mut s = a.sender();
        s.refresh();
        assert!(!s.connected());
        let (lane, _rx) = Lane::new(64, false);
        b.set_rx(RxSide::new(vec![lane]));
        s.refresh();
        assert!(s.connected());
        drop(b);
        s.refresh();
        assert!(!s.connected());
        assert_eq!(s.send(&[0; 60]), Sent::Dropped);
        let _c = WireEnd::attach("wire-test-3").unwrap();
    }
}
