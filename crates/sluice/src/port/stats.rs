//! Port statistics: per-queue counters, burst-size histograms and the port
//! snapshot, named as DPDK names them (`rx_packets`, `rx_nombuf`, …).
//!
//! A queue's counters are written only by the thread polling it
//! ([`Counter`]: a plain add, no locked instruction) and read by anyone;
//! [`PortStats::sum`] adds the queues up into a snapshot.
//!
//! A port's counters are one [`PortCounters`]: per queue an
//! [`RxQueueStats`] or [`TxQueueStats`], with a [`BurstHistogram`] when
//! [`PortConfig::burst_stats`](super::PortConfig::burst_stats) asks for one,
//! and the driver's named counters ([`Xstats`](super::Xstats)).
//! [`Port::stats`](super::Port::stats) is the snapshot,
//! [`Port::counters`](super::Port::counters) the live counters for another
//! thread.
//!
//! ```
//! use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
//! use sluice::port::PortConfig;
//!
//! let pool = MbufPool::new(MbufPoolConfig { size: 1023, ..Default::default() })?;
//! let mut config = PortConfig::new(Some(pool.clone()));
//! config.burst_stats = true;
//! let mut port = sluice::driver::open("null:size=64", config)?;
//! port.start()?;
//! let mut burst: Burst = Burst::new();
//! for _ in 0..3 {
//!     port.rx_queue(0)?.rx_burst(burst.capped(8)); // bursts of 8
//!     burst.clear();
//! }
//! port.rx_queue(0)?.rx_burst(&mut burst); // one of 32
//!
//! let counters = port.counters();
//! let histogram = counters.rx[0].bursts.as_ref().unwrap();
//! assert_eq!((histogram.counts()[8], histogram.counts()[32]), (3, 1));
//! assert_eq!(histogram.mean(), 14.0);
//! assert_eq!(port.stats().rx_packets, 3 * 8 + 32);
//! assert_eq!(port.stats().rx_bytes, (3 * 8 + 32) * 64);
//! drop((burst, port));
//! assert!(pool.is_full());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::counter::Counter;

/// Counters of one Rx queue.
#[derive(Debug, Default)]
pub struct RxQueueStats {
    /// Packets received.
    pub packets: Counter,
    /// Bytes received.
    pub bytes: Counter,
    /// Packets the device dropped because the queue had no free descriptor.
    pub missed: Counter,
    /// Times a refill found the mempool empty.
    pub nombuf: Counter,
    /// Packets received with errors (and dropped).
    pub errors: Counter,
    /// Packets per `rx_burst` call, when the port keeps burst statistics.
    pub bursts: Option<BurstHistogram>,
}

impl RxQueueStats {
    /// Counters at zero, with a burst-size histogram (capacity 32, larger
    /// bursts in the last bucket) when `burst_stats`.
    pub fn new(burst_stats: bool) -> RxQueueStats {
        RxQueueStats {
            bursts: burst_stats.then(|| BurstHistogram::new(HISTOGRAM_MAX)),
            ..Default::default()
        }
    }

    /// Counts one `rx_burst` that delivered `n` packets of `bytes` bytes in
    /// all (single writer: the polling thread).
    #[inline(always)]
    pub fn record_burst(&self, n: usize, bytes: u64) {
        record(&self.packets, &self.bytes, &self.bursts, n, bytes);
    }
}

/// Counters of one Tx queue.
#[derive(Debug, Default)]
pub struct TxQueueStats {
    /// Packets sent.
    pub packets: Counter,
    /// Bytes sent.
    pub bytes: Counter,
    /// Packets that could not be sent (and were dropped).
    pub errors: Counter,
    /// Packets per `tx_burst` call (those accepted), when the port keeps
    /// burst statistics.
    pub bursts: Option<BurstHistogram>,
}

impl TxQueueStats {
    /// Counters at zero, with a burst-size histogram when `burst_stats`.
    pub fn new(burst_stats: bool) -> TxQueueStats {
        TxQueueStats {
            bursts: burst_stats.then(|| BurstHistogram::new(HISTOGRAM_MAX)),
            ..Default::default()
        }
    }

    /// Counts one `tx_burst` that accepted `n` packets of `bytes` bytes in
    /// all (single writer: the polling thread).
    #[inline(always)]
    pub fn record_burst(&self, n: usize, bytes: u64) {
        record(&self.packets, &self.bytes, &self.bursts, n, bytes);
    }
}

/// Counts one burst of `n` packets and `bytes` bytes.
#[inline(always)]
fn record(
    packets: &Counter,
    bytes_c: &Counter,
    bursts: &Option<BurstHistogram>,
    n: usize,
    bytes: u64,
) {
    packets.add(n as u64);
    bytes_c.add(bytes);
    if let Some(h) = bursts {
        h.record(n);
    }
}

/// Shortest frame a port delivers: an Ethernet header (destination,
/// source, EtherType). Anything shorter is a runt.
pub const MIN_FRAME: usize = 14;

/// Bytes a frame may carry beyond its MTU: the Ethernet header and one
/// VLAN tag (the frame check sequence is not part of a received frame).
pub const FRAME_OVERHEAD: usize = 18;

/// The length check an Rx queue runs on every frame where it comes in, and
/// the named counters of the frames it refuses: a runt (shorter than
/// [`MIN_FRAME`]) counts `rx_runt_errors`, a frame longer than the MTU
/// allows counts `rx_oversize_errors`; both count `rx_errors` as well, so
/// every refused frame is a counted drop with a reason.
///
/// Each driver runs it once per frame, where the frame enters the port, so
/// every forwarding path above the port sees only frames that passed. The
/// check is one unsigned compare ([`accepts`](Self::accepts)); only a
/// refused frame takes the cold path that tells the reasons apart.
#[derive(Debug, Clone)]
pub struct RxFrameCheck {
    /// Longest frame accepted less [`MIN_FRAME`].
    span: usize,
    runts: std::sync::Arc<Counter>,
    oversize: std::sync::Arc<Counter>,
}

impl RxFrameCheck {
    /// A check for frames of up to `mtu` + [`FRAME_OVERHEAD`] bytes, its
    /// counters registered in `xstats` (one pair per queue, added up when
    /// read).
    pub fn new(xstats: &super::Xstats, mtu: u16) -> RxFrameCheck {
        RxFrameCheck {
            span: usize::from(mtu) + FRAME_OVERHEAD - MIN_FRAME,
            runts: xstats.register("rx_runt_errors"),
            oversize: xstats.register("rx_oversize_errors"),
        }
    }

    /// The longest frame accepted.
    pub fn max_frame(&self) -> usize {
        self.span + MIN_FRAME
    }

    /// Whether a frame of `len` bytes is delivered: at least [`MIN_FRAME`]
    /// and at most [`max_frame`](Self::max_frame) bytes (one compare: a
    /// runt wraps round to a huge value).
    #[inline(always)]
    pub fn accepts(&self, len: usize) -> bool {
        len.wrapping_sub(MIN_FRAME) <= self.span
    }

    /// Counts a refused frame of `len` bytes: `errors` (the queue's
    /// `rx_errors`) and its reason (single writer: the polling thread).
    #[cold]
    #[inline(never)]
    pub fn count_drop(&self, len: usize, errors: &Counter) {
        errors.inc();
        if len < MIN_FRAME {
            self.runts.inc();
        } else {
            self.oversize.inc();
        }
    }

    /// Checks the packets of `burst` from index `from` on: those refused
    /// are counted ([`count_drop`](Self::count_drop)) and freed, the rest
    /// keep their order. Returns how many were refused (a driver that
    /// counted them as received takes them off its `rx_packets`).
    #[inline]
    pub fn filter(
        &self,
        burst: &mut crate::mbuf::BurstSlice,
        from: usize,
        errors: &Counter,
    ) -> usize {
        let fresh = burst.as_slice().get(from..).unwrap_or(&[]);
        if fresh.iter().all(|m| self.accepts(m.pkt_len() as usize)) {
            return 0;
        }
        self.filter_slow(burst, from, errors)
    }

    #[cold]
    #[inline(never)]
    fn filter_slow(
        &self,
        burst: &mut crate::mbuf::BurstSlice,
        from: usize,
        errors: &Counter,
    ) -> usize {
        let before = burst.len();
        let mut i = 0;
        burst.retain(|m| {
            let keep = i < from || {
                let len = m.pkt_len() as usize;
                self.accepts(len) || {
                    self.count_drop(len, errors);
                    false
                }
            };
            i += 1;
            keep
        });
        before - burst.len()
    }
}

/// Largest burst size a histogram tells apart (DPDK's usual burst).
pub const HISTOGRAM_MAX: usize = 32;

/// Every counter of a port, shared (`Arc`) between its queues, which write
/// them, and whoever reads them — a stats thread can hold this while the
/// queues are lent to polling threads.
#[derive(Debug)]
pub struct PortCounters {
    /// Per Rx queue.
    pub rx: Box<[RxQueueStats]>,
    /// Per Tx queue.
    pub tx: Box<[TxQueueStats]>,
    /// The driver's named counters.
    pub xstats: super::Xstats,
    /// Why the port's device failed (see [`PortCounters::fault`]).
    fault: std::sync::OnceLock<String>,
}

impl PortCounters {
    /// Counters for `rx` Rx and `tx` Tx queues.
    pub fn new(rx: usize, tx: usize, burst_stats: bool) -> PortCounters {
        PortCounters {
            rx: (0..rx).map(|_| RxQueueStats::new(burst_stats)).collect(),
            tx: (0..tx).map(|_| TxQueueStats::new(burst_stats)).collect(),
            xstats: super::Xstats::new(),
            fault: std::sync::OnceLock::new(),
        }
    }

    /// Records that the port's device failed (a device model's step
    /// panicked): the queues it served move nothing more, and an
    /// application polling the port should end its run. The first reason
    /// recorded stays.
    pub fn set_fault(&self, why: String) {
        let _ = self.fault.set(why);
    }

    /// Why the port's device failed, if it did (see
    /// [`set_fault`](Self::set_fault)).
    pub fn fault(&self) -> Option<&str> {
        self.fault.get().map(String::as_str)
    }

    /// A snapshot of the basic counters.
    pub fn stats(&self) -> PortStats {
        PortStats::sum(self.rx.iter(), self.tx.iter())
    }

    /// Every counter by name, as DPDK's xstats: first the generic ones
    /// under DPDK's names (`rx_good_packets`, `tx_good_packets`,
    /// `rx_good_bytes`, `tx_good_bytes`, `rx_missed_errors`, `rx_errors`,
    /// `tx_errors`, `rx_mbuf_allocation_errors`, then per queue
    /// `rx_qN_packets`, `rx_qN_bytes`, `rx_qN_errors`, `tx_qN_packets`,
    /// `tx_qN_bytes`), then the driver's.
    pub fn xstats_snapshot(&self) -> Vec<(String, u64)> {
        let s = self.stats();
        let mut out: Vec<(String, u64)> = [
            ("rx_good_packets", s.rx_packets),
            ("tx_good_packets", s.tx_packets),
            ("rx_good_bytes", s.rx_bytes),
            ("tx_good_bytes", s.tx_bytes),
            ("rx_missed_errors", s.rx_missed),
            ("rx_errors", s.rx_errors),
            ("tx_errors", s.tx_errors),
            ("rx_mbuf_allocation_errors", s.rx_nombuf),
        ]
        .into_iter()
        .map(|(name, v)| (name.to_string(), v))
        .collect();
        for (q, c) in s.rx_queues.iter().enumerate() {
            out.push((format!("rx_q{q}_packets"), c.packets));
            out.push((format!("rx_q{q}_bytes"), c.bytes));
            out.push((format!("rx_q{q}_errors"), c.errors));
        }
        for (q, c) in s.tx_queues.iter().enumerate() {
            out.push((format!("tx_q{q}_packets"), c.packets));
            out.push((format!("tx_q{q}_bytes"), c.bytes));
        }
        out.extend(self.xstats.snapshot());
        out
    }
}

/// How many bursts carried 0, 1, …, `capacity` packets (a burst larger than
/// the capacity counts in the last bucket).
#[derive(Debug)]
pub struct BurstHistogram {
    counts: Box<[Counter]>,
}

impl BurstHistogram {
    /// A histogram for bursts of up to `capacity` packets.
    pub fn new(capacity: usize) -> Self {
        BurstHistogram {
            counts: (0..=capacity).map(|_| Counter::new()).collect(),
        }
    }

    /// Counts one burst of `n` packets (single writer: the polling thread).
    #[inline(always)]
    pub fn record(&self, n: usize) {
        let last = self.counts.len() - 1;
        self.counts[n.min(last)].inc();
    }

    /// Bursts per size, index = packets in the burst.
    pub fn counts(&self) -> Vec<u64> {
        self.counts.iter().map(Counter::get).collect()
    }

    /// Total bursts counted.
    pub fn bursts(&self) -> u64 {
        self.counts.iter().map(Counter::get).sum()
    }

    /// Mean packets per burst (0 when no burst was counted).
    pub fn mean(&self) -> f64 {
        let (mut bursts, mut pkts) = (0u64, 0u64);
        for (size, c) in self.counts.iter().enumerate() {
            bursts += c.get();
            pkts += c.get() * size as u64;
        }
        if bursts == 0 {
            0.0
        } else {
            pkts as f64 / bursts as f64
        }
    }
}

/// A snapshot of one queue's counters (Rx fields for an Rx queue, Tx for Tx).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
    /// Errors.
    pub errors: u64,
}

/// A snapshot of a port's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets dropped for want of an Rx descriptor.
    pub rx_missed: u64,
    /// Rx refills that found the mempool empty.
    pub rx_nombuf: u64,
    /// Packets received with errors.
    pub rx_errors: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets that could not be sent.
    pub tx_errors: u64,
    /// Per Rx queue.
    pub rx_queues: Vec<QueueCounts>,
    /// Per Tx queue.
    pub tx_queues: Vec<QueueCounts>,
}

impl PortStats {
    /// Adds up the queues' counters.
    pub fn sum<'a>(
        rx: impl IntoIterator<Item = &'a RxQueueStats>,
        tx: impl IntoIterator<Item = &'a TxQueueStats>,
    ) -> PortStats {
        let mut s = PortStats::default();
        let counts = |packets: &Counter, bytes: &Counter, errors: &Counter| QueueCounts {
            packets: packets.get(),
            bytes: bytes.get(),
            errors: errors.get(),
        };
        for q in rx {
            let c = counts(&q.packets, &q.bytes, &q.errors);
            s.rx_packets += c.packets;
            s.rx_bytes += c.bytes;
            s.rx_errors += c.errors;
            s.rx_missed += q.missed.get();
            s.rx_nombuf += q.nombuf.get();
            s.rx_queues.push(c);
        }
        for q in tx {
            let c = counts(&q.packets, &q.bytes, &q.errors);
            s.tx_packets += c.packets;
            s.tx_bytes += c.bytes;
            s.tx_errors += c.errors;
            s.tx_queues.push(c);
        }
        s
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_by_burst_size() {
        let h = BurstHistogram::new(32);
        for n in [0, 0, 1, 31, 32, 32, 40] {
            h.record(n);
        }
        let c = h.counts();
        assert_eq!(c.len(), 33);
        assert_eq!((c[0], c[1], c[31], c[32]), (2, 1, 1, 3), "40 counts as 32");
        assert_eq!(h.bursts(), 7);
        assert!((h.mean() - (1.0 + 31.0 + 32.0 * 3.0) / 7.0).abs() < 1e-9);
        assert_eq!(BurstHistogram::new(4).mean(), 0.0);
    }

    #[test]
    fn xstats_name_the_generic_counters_as_dpdk_then_the_drivers() {
        let c = PortCounters::new(2, 1, false);
        c.rx[0].record_burst(3, 180);
        c.rx[1].record_burst(1, 64);
        c.rx[1].missed.add(5);
        c.rx[0].nombuf.inc();
        c.rx[1].errors.add(2);
        c.tx[0].record_burst(4, 256);
        c.tx[0].errors.inc();
        c.xstats.register("rx_recycled").add(7);
        let x = c.xstats_snapshot();
        let names: Vec<&str> = x.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "rx_good_packets",
                "tx_good_packets",
                "rx_good_bytes",
                "tx_good_bytes",
                "rx_missed_errors",
                "rx_errors",
                "tx_errors",
                "rx_mbuf_allocation_errors",
                "rx_q0_packets",
                "rx_q0_bytes",
                "rx_q0_errors",
                "rx_q1_packets",
                "rx_q1_bytes",
                "rx_q1_errors",
                "tx_q0_packets",
                "tx_q0_bytes",
                "rx_recycled",
            ]
        );
        let values: Vec<u64> = x.iter().map(|&(_, v)| v).collect();
        assert_eq!(
            values,
            [4, 4, 244, 256, 5, 2, 1, 1, 3, 180, 0, 1, 64, 2, 4, 256, 7]
        );
    }

    #[test]
    fn the_frame_check_takes_14_to_mtu_plus_18_bytes_and_names_the_rest() {
        let x = crate::port::Xstats::new();
        let c = RxFrameCheck::new(&x, 1500);
        assert_eq!(c.max_frame(), 1518);
        for (len, ok) in [
            (0, false),
            (13, false),
            (14, true),
            (1518, true),
            (1519, false),
        ] {
            assert_eq!(c.accepts(len), ok, "{len}");
        }
        assert!(!c.accepts(usize::MAX));
        let errors = Counter::new();
        for len in [0, 13, 1519, 9000] {
            c.count_drop(len, &errors);
        }
        assert_eq!(errors.get(), 4);
        assert_eq!(x.get("rx_runt_errors"), Some(2));
        assert_eq!(x.get("rx_oversize_errors"), Some(2));
    }

    #[test]
    fn port_stats_add_up_the_queues() {
        let rx = [RxQueueStats::default(), RxQueueStats::default()];
        let tx = [TxQueueStats::default()];
        rx[0].packets.add(10);
        rx[0].bytes.add(640);
        rx[1].packets.add(5);
        rx[1].bytes.add(320);
        rx[1].missed.add(2);
        rx[1].nombuf.inc();
        rx[1].errors.inc();
        tx[0].packets.add(14);
        tx[0].bytes.add(896);
        tx[0].errors.inc();
        let s = PortStats::sum(&rx, &tx);
        assert_eq!((s.rx_packets, s.rx_bytes, s.rx_missed), (15, 960, 2));
        assert_eq!((s.rx_nombuf, s.rx_errors), (1, 1));
        assert_eq!((s.tx_packets, s.tx_bytes, s.tx_errors), (14, 896, 1));
        assert_eq!(
            s.rx_queues[1],
            QueueCounts {
                packets: 5,
                bytes: 320,
                errors: 1
            }
        );
        assert_eq!(s.tx_queues.len(), 1);
    }
}
