//! Receiving from a pcap file.
//!
//! The whole file is read and checked when the port opens ([`Capture`]): its
//! packets sit in one buffer, so `rx_burst` never does I/O and can never meet
//! a bad record. Each packet is copied into an mbuf from the queue's pool —
//! into a chain of segments when it is longer than the data room and the
//! port has the multi-segment Rx offload, otherwise it is counted in
//! `rx_errors` and `rx_oversize_errors` and skipped. A runt (shorter than
//! an Ethernet header) or a packet longer than the MTU allows is counted the
//! same way (`rx_runt_errors`, `rx_oversize_errors`). An empty pool counts `rx_nombuf` and leaves the
//! packet for the next call.
//!
//! With `timing`, packet `i` is due when the clock has advanced by the gap
//! between its timestamp and the first packet's since the first `rx_burst`
//! after start (offsets are converted to clock ticks once, at setup). With
//! `loop` as well, each pass starts when the last packet of the one before
//! was due.

use std::sync::Arc;

use super::format::{LINKTYPE_ETHERNET, PcapReader};
use crate::mbuf::{BurstSlice, Mbuf, MbufPool};
use crate::port::{Offloads, PortConfig, PortCounters, PortError, RxFrameCheck, RxQueue};

/// The packets of an `rx` file.
pub(crate) struct Capture {
    /// Every packet's bytes, back to back.
    data: Vec<u8>,
    /// Where each packet is in `data`, and its timestamp.
    recs: Vec<Rec>,
}

#[derive(Debug, Clone, Copy)]
struct Rec {
    start: usize,
    len: usize,
    ts_nanos: u64,
}

impl Capture {
    /// Reads and checks `path` completely. Errors name the file and, for a
    /// bad file, the byte offset.
    pub(crate) fn load(path: &str) -> Result<Capture, PortError> {
        let bytes =
            std::fs::read(path).map_err(|e| PortError::io(format!("pcap: rx file '{path}'"), e))?;
        let bad = |e: super::format::PcapError| PortError::Driver(format!("rx file '{path}': {e}"));
        let mut reader = PcapReader::new(&bytes[..]).map_err(bad)?;
        let info = reader.info();
        if info.linktype != LINKTYPE_ETHERNET {
            return Err(PortError::Driver(format!(
                "rx file '{path}': link type {} at offset 20, only Ethernet (1) is read",
                info.linktype
            )));
        }
        let mut data = Vec::with_capacity(bytes.len());
        let mut recs = Vec::new();
        let mut pkt = Vec::new();
        while let Some(r) = reader.next_into(&mut pkt).map_err(bad)? {
            recs.push(Rec {
                start: data.len(),
                len: pkt.len(),
                ts_nanos: r.ts_nanos,
            });
            data.extend_from_slice(&pkt);
        }
        Ok(Capture { data, recs })
    }
}

/// A monotonic clock for `timing`: a reading function and its ticks per
/// second. The driver's is the TSC; tests drive their own.
#[derive(Clone)]
pub(crate) struct Clock {
    pub(crate) now: Arc<dyn Fn() -> u64 + Send + Sync>,
    pub(crate) hz: u64,
}

impl Clock {
    /// The time-stamp counter.
    pub(crate) fn tsc() -> Clock {
        Clock {
            now: Arc::new(crate::tsc::rdtsc),
            hz: 0,
        }
    }

    /// Ticks per second (the TSC's is measured on first use).
    fn hz(&self) -> u64 {
        if self.hz == 0 {
            crate::tsc::tsc_hz()
        } else {
            self.hz
        }
    }
}

/// Replay timing state.
struct Timing {
    clock: Clock,
    /// `due[i]`: ticks after the pass's start when packet `i` is due.
    due: Vec<u64>,
    /// Clock reading at which the current pass started; set by the first
    /// `rx_burst` after start.
    base: Option<u64>,
}

/// Why a packet was not delivered.
enum Fail {
    /// Longer than the data room, without the multi-segment offload (or
    /// otherwise impossible to store): counted and skipped.
    TooLong,
    /// The pool is empty: counted, retried next call.
    NoBuf,
}

/// The Rx queue of a pcap port.
pub(crate) struct PcapRx {
    capture: Option<Arc<Capture>>,
    pool: Option<MbufPool>,
    port_id: u16,
    multi_seg: bool,
    looping: bool,
    timing: Option<Timing>,
    /// The next packet to deliver.
    next: usize,
    /// Runts and frames over the MTU are counted and skipped.
    check: RxFrameCheck,
    counters: Arc<PortCounters>,
    q: usize,
}

impl PcapRx {
    pub(crate) fn new(
        capture: Option<Arc<Capture>>,
        pool: Option<MbufPool>,
        config: &PortConfig,
        looping: bool,
        clock: Option<Clock>,
        counters: Arc<PortCounters>,
        q: usize,
    ) -> PcapRx {
        let timing = match (&capture, clock) {
            (Some(c), Some(clock)) => {
                let first = c.recs.first().map_or(0, |r| r.ts_nanos);
                let hz = clock.hz() as u128;
                let due = c
                    .recs
                    .iter()
                    .map(|r| {
                        let ns = r.ts_nanos.saturating_sub(first) as u128;
                        u64::try_from(ns * hz / 1_000_000_000).unwrap_or(u64::MAX)
                    })
                    .collect();
                Some(Timing {
                    clock,
                    due,
                    base: None,
                })
            }
            _ => None,
        };
        PcapRx {
            capture,
            pool,
            port_id: config.port_id,
            multi_seg: config.rx_offloads.contains(Offloads::MULTI_SEG),
            looping,
            timing,
            next: 0,
            check: RxFrameCheck::new(&counters.xstats, config.mtu),
            counters,
            q,
        }
    }
}

/// Copies `pkt` into a fresh mbuf from `pool` for port `port_id` — a chain
/// if it must be one and `multi_seg` allows it.
fn copy_in(pool: &MbufPool, pkt: &[u8], multi_seg: bool, port_id: u16) -> Result<Mbuf, Fail> {
    let room = pool.data_room() as usize;
    if pkt.len() > room && !multi_seg {
        return Err(Fail::TooLong);
    }
    let mut chunks = pkt.chunks(room);
    let first = chunks.next().unwrap_or(&[]);
    let mut head = pool.alloc().ok_or(Fail::NoBuf)?;
    head.append(first.len())
        .map_err(|_| Fail::TooLong)?
        .copy_from_slice(first);
    for chunk in chunks {
        // On any error `head` is dropped here, freeing its segments.
        let mut seg = pool.alloc().ok_or(Fail::NoBuf)?;
        seg.append(chunk.len())
            .map_err(|_| Fail::TooLong)?
            .copy_from_slice(chunk);
        head.chain(seg).map_err(|_| Fail::TooLong)?;
    }
    head.header_mut().port = port_id;
    Ok(head)
}

impl RxQueue for PcapRx {
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.rx[self.q];
        let (Some(capture), Some(pool)) = (self.capture.as_deref(), self.pool.as_ref()) else {
            stats.record_burst(0, 0);
            return 0;
        };
        let recs = &capture.recs;
        let next = self.next;
        let now = self.timing.as_mut().map(|t| {
            let now = (t.clock.now)();
            // First call since start: the next packet is due now.
            let due = t.due.get(next).copied().unwrap_or(0);
            t.base.get_or_insert(now.saturating_sub(due));
            now
        });
        let (mut n, mut bytes) = (0usize, 0u64);
        // Each packet looked at uses one slot of the burst's room, delivered
        // or skipped, so a file of bad packets in a loop cannot spin here.
        for _ in 0..burst.free() {
            if self.next == recs.len() {
                if !self.looping || recs.is_empty() {
                    break;
                }
                self.next = 0;
                if let Some(t) = self.timing.as_mut() {
                    let pass = t.due.last().copied().unwrap_or(0);
                    t.base = t.base.map(|b| b.saturating_add(pass));
                }
            }
            if let (Some(t), Some(now)) = (&self.timing, now) {
                let base = t.base.unwrap_or(now);
                if now < base.saturating_add(t.due[self.next]) {
                    break;
                }
            }
            let r = recs[self.next];
            let pkt = &capture.data[r.start..r.start + r.len];
            if !self.check.accepts(r.len) {
                self.check.count_drop(r.len, &stats.errors);
                self.next += 1;
                continue;
            }
            match copy_in(pool, pkt, self.multi_seg, self.port_id) {
                Ok(m) => {
                    // Room: at most `free` packets are pushed.
                    let _ = burst.push(m);
                    n += 1;
                    bytes += r.len as u64;
                }
                Err(Fail::TooLong) => self.check.count_drop(r.len, &stats.errors),
                Err(Fail::NoBuf) => {
                    stats.nombuf.inc();
                    break;
                }
            }
            self.next += 1;
        }
        stats.record_burst(n, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        if let Some(t) = self.timing.as_mut() {
            t.base = None;
        }
        Ok(())
    }

    fn stop(&mut self) {}
}
