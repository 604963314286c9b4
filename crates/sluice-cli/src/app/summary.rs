//! The end-of-run summary: per port packets, Mpps, drops and burst-size
//! histograms; cycles per packet on the forwarding lcores (busy polls only,
//! minus the cycles an inline device model spent inside them, which it
//! reports as the `device_cycles` xstat); and each tester's report. Printed
//! as text, or as one JSON object.

use std::sync::Arc;

use serde::Serialize;
use sluice::driver::soft::bus::{BusBytes, Link};
use sluice::port::{BurstHistogram, Offloads, PortCounters};
use sluice::tester::Tester;

use super::io::lcore::LcoreCycles;
use super::latency;
use super::observe::census::CensusReport;
use super::observe::drops::{CAPTURE_OVERFLOW, total};
use super::observe::snapshot::{DropCount, LatencySummary};
use super::output::{emit, emit_json};

/// One queue's burst-size histogram.
#[derive(Serialize, Debug, Clone)]
pub struct QueueHist {
    /// `rx` or `tx`.
    pub dir: &'static str,
    /// The queue.
    pub queue: usize,
    /// Bursts counted.
    pub bursts: u64,
    /// Mean packets per burst.
    pub mean: f64,
    /// Bursts per size (index = packets; the last bucket holds larger ones).
    pub counts: Vec<u64>,
}

impl QueueHist {
    fn new(dir: &'static str, queue: usize, h: &BurstHistogram) -> QueueHist {
        QueueHist {
            dir,
            queue,
            bursts: h.bursts(),
            mean: h.mean(),
            counts: h.counts(),
        }
    }
}

/// One port.
#[derive(Serialize, Debug, Clone)]
pub struct PortSummary {
    /// Port number.
    pub port: usize,
    /// Its spec.
    pub spec: String,
    /// Rx and Tx queues.
    pub queues: usize,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Received, millions per second.
    pub rx_mpps: f64,
    /// Sent, millions per second.
    pub tx_mpps: f64,
    /// Packets its Tx queues did not take, freed.
    pub drops: u64,
    /// Packets dropped by the device for want of an Rx descriptor.
    pub rx_missed: u64,
    /// Rx refills that found the pool empty.
    pub rx_nombuf: u64,
    /// Packets received with errors.
    pub rx_errors: u64,
    /// Packets that failed to send.
    pub tx_errors: u64,
    /// The driver's named counters.
    pub xstats: Vec<(String, u64)>,
    /// Burst-size histograms (with `--hist`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub histograms: Vec<QueueHist>,
    /// The buffer-recycling counters, when one is not 0 (always with the
    /// `recycle` engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recycle: Option<RecycleCounts>,
    /// Bus figures of an emulated NIC (`soft`) that moved packets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<BusSummary>,
    /// The Rx offloads the port was configured with (`sluice l3fwd` asks
    /// for the IPv4 checksum check where the device has it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rx_offloads: Vec<&'static str>,
}

/// A soft port's bus traffic over the run: bytes per packet (received and
/// sent through the port) and the link's use at the measured rate.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct BusSummary {
    /// The PCIe link (`link=`).
    pub link: String,
    /// All bus bytes per packet, both directions.
    pub bytes_per_pkt: f64,
    /// Descriptor and WQE fetches per packet.
    pub desc_bytes_per_pkt: f64,
    /// Toward the device, per packet.
    pub to_device_bytes_per_pkt: f64,
    /// From the device, per packet.
    pub from_device_bytes_per_pkt: f64,
    /// Share of the link toward the device at the measured rate.
    pub to_device_util: f64,
    /// Share of the link from the device.
    pub from_device_util: f64,
    /// Tx packets sent in multi-packet WQEs, and in regular ones.
    pub tx_mpwqe_pkts: u64,
    /// See `tx_mpwqe_pkts`.
    pub tx_wqe_pkts: u64,
}

impl BusSummary {
    /// From a soft port's spec and xstats, `packets` having crossed it in
    /// `secs`; `None` for another driver or when nothing moved.
    pub fn new(spec: &str, x: &[(String, u64)], packets: u64, secs: f64) -> Option<BusSummary> {
        let link = Link::of_spec(spec)?;
        let b = BusBytes::from_xstats(x)?;
        if packets == 0 || secs <= 0.0 {
            return None;
        }
        let per = |v: u64| v as f64 / packets as f64;
        let util = |v: u64| v as f64 / secs / link.bytes_per_sec();
        let get = |n: &str| x.iter().find(|(k, _)| k == n).map_or(0, |&(_, v)| v);
        Some(BusSummary {
            link: link.name(),
            bytes_per_pkt: per(b.total()),
            desc_bytes_per_pkt: per(b.desc),
            to_device_bytes_per_pkt: per(b.to_device()),
            from_device_bytes_per_pkt: per(b.from_device()),
            to_device_util: util(b.to_device()),
            from_device_util: util(b.from_device()),
            tx_mpwqe_pkts: get("tx_mpwqe_pkts"),
            tx_wqe_pkts: get("tx_wqe_pkts"),
        })
    }
}

/// A port's buffer-recycling xstats (0 when the driver has none).
#[derive(Serialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecycleCounts {
    /// Rx descriptors rearmed with recycled buffers.
    pub rx_recycled: u64,
    /// Buffers the Tx queues moved into an Rx ring.
    pub tx_recycled: u64,
    /// Completed Tx batches that could not be recycled and were freed.
    pub recycle_fallbacks: u64,
}

impl RecycleCounts {
    /// Reads them from a port's xstats.
    pub fn from_xstats(x: &[(String, u64)]) -> RecycleCounts {
        let get = |name: &str| x.iter().find(|(n, _)| n == name).map_or(0, |&(_, v)| v);
        RecycleCounts {
            rx_recycled: get("rx_recycled"),
            tx_recycled: get("tx_recycled"),
            recycle_fallbacks: get("recycle_fallbacks"),
        }
    }

    /// Whether every counter is 0.
    pub fn is_zero(&self) -> bool {
        *self == RecycleCounts::default()
    }
}

impl PortSummary {
    /// Reads port `port`'s counters; `drops` comes from the stream counters.
    pub fn new(port: usize, spec: &str, c: &PortCounters, drops: u64, secs: f64) -> PortSummary {
        let s = c.stats();
        let mut histograms = Vec::new();
        for (q, rx) in c.rx.iter().enumerate() {
            if let Some(h) = &rx.bursts {
                histograms.push(QueueHist::new("rx", q, h));
            }
        }
        for (q, tx) in c.tx.iter().enumerate() {
            if let Some(h) = &tx.bursts {
                histograms.push(QueueHist::new("tx", q, h));
            }
        }
        let xstats = c.xstats.snapshot();
        let bus = BusSummary::new(spec, &xstats, s.rx_packets + s.tx_packets, secs);
        PortSummary {
            port,
            spec: spec.to_owned(),
            queues: c.rx.len(),
            rx_packets: s.rx_packets,
            tx_packets: s.tx_packets,
            rx_mpps: s.rx_packets as f64 / secs / 1e6,
            tx_mpps: s.tx_packets as f64 / secs / 1e6,
            drops,
            rx_missed: s.rx_missed,
            rx_nombuf: s.rx_nombuf,
            rx_errors: s.rx_errors,
            tx_errors: s.tx_errors,
            xstats,
            histograms,
            recycle: None,
            bus,
            rx_offloads: Vec::new(),
        }
    }

    /// Notes the Rx offloads the port runs with.
    pub fn with_rx_offloads(mut self, rx: Offloads) -> PortSummary {
        self.rx_offloads = rx.names();
        self
    }

    /// Fills [`recycle`](Self::recycle) from the xstats when one of its
    /// counters is not 0, or `always`.
    pub fn with_recycle_counts(mut self, always: bool) -> PortSummary {
        let r = RecycleCounts::from_xstats(&self.xstats);
        self.recycle = (always || !r.is_zero()).then_some(r);
        self
    }
}

/// One tester's report.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct TesterSummary {
    /// The tester's name.
    pub name: String,
    /// Frames generated.
    pub sent: u64,
    /// Frames checked.
    pub received: u64,
    /// Sent and never received.
    pub lost: u64,
    /// Received out of order within their flow.
    pub reordered: u64,
    /// Received twice.
    pub duplicates: u64,
    /// Failed the payload, stamp or header check.
    pub corrupt: u64,
    /// Not tester frames.
    pub foreign: u64,
    /// Lost, reordered, duplicates and corrupt all 0.
    pub clean: bool,
    /// The report as the tester words it.
    pub report: String,
    /// One-way latency per port the tester checks frames of.
    pub latency: Vec<LatencySummary>,
}

/// The whole run.
#[derive(Serialize, Debug, Clone)]
pub struct Summary {
    /// Always `"summary"` (stats lines have `"stats"`).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The engine.
    pub engine: &'static str,
    /// Forwarding lcores that ran.
    pub cores: usize,
    /// Packets asked per Rx call.
    pub burst: usize,
    /// Seconds from the start of forwarding to its end (drain included).
    pub duration_s: f64,
    /// Per port.
    pub ports: Vec<PortSummary>,
    /// All ports' received packets.
    pub rx_packets: u64,
    /// All ports' sent packets.
    pub tx_packets: u64,
    /// All drops.
    pub drops: u64,
    /// Received, millions per second, all ports.
    pub rx_mpps: f64,
    /// Sent, millions per second, all ports.
    pub tx_mpps: f64,
    /// TSC ticks the lcores spent in polls that received packets.
    pub busy_cycles: u64,
    /// Packets received (generated for `txonly`) in those polls.
    pub busy_packets: u64,
    /// The `device_cycles` xstats of every port: an inline device model's
    /// work done inside the lcores' calls, subtracted.
    pub device_cycles: u64,
    /// `(busy_cycles - device_cycles) / busy_packets`; `None` when nothing
    /// moved.
    pub cycles_per_packet: Option<f64>,
    /// The TSC frequency.
    pub tsc_hz: u64,
    /// `recycle` engine: recycle steps that failed (a queue stopped under
    /// them); each stream then went on as io.
    pub recycle_errors: u64,
    /// `l3fwd`: packets the router dropped, by reason (absent for other
    /// engines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_drops: Option<RouteDrops>,
    /// Every packet dropped, by reason and port (see `observe::drops`);
    /// reasons with no drop left out.
    pub drops_by_reason: Vec<DropCount>,
    /// Whether every buffer was back in the pool after the ports stopped.
    pub pool_full: bool,
    /// Where the pool's buffers were after the ports stopped, and those
    /// that did not come back.
    pub census: CensusReport,
    /// Times the pool was found empty (every port's `rx_nombuf`, and the
    /// bursts `txonly` could not generate): the pool ran dry.
    pub alloc_failures: u64,
    /// When every frame starts and ends at a tester: whether the drain saw
    /// every frame sent received or counted as a drop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_accounted: Option<bool>,
    /// Each tester's report.
    pub testers: Vec<TesterSummary>,
    /// Every tester report clean (true when there is none) and the pool
    /// never ran dry.
    pub clean: bool,
}

/// The line that says the pool ran dry, `failures` times.
pub fn pool_ran_dry(failures: u64) -> String {
    format!("pool ran dry: {failures} allocation failures — raise --pool-size")
}

/// The warning of a drain that ended with frames unaccounted for.
pub const DRAIN_UNACCOUNTED: &str =
    "the drain ended with frames neither received nor counted as a drop";

/// Prints what the drain found, when it could tell (`accounted`): every
/// frame received or counted as a drop (`drops` names the drops, in
/// parentheses), or the warning that some were not.
pub fn print_drain(accounted: Option<bool>, drops: &str) {
    match accounted {
        Some(true) => emit(&format!(
            "drain: every frame the testers sent was received or counted as a drop ({drops})"
        )),
        Some(false) => emit(&format!("warning: {DRAIN_UNACCOUNTED}")),
        None => {}
    }
}

/// Prints each tester's line, then the warning that the pool ran dry when
/// it did (`alloc_failures` not 0).
pub fn print_testers(testers: &[TesterSummary], alloc_failures: u64) {
    for t in testers {
        emit(&format!(
            "tester {}: {} — {}",
            t.name,
            t.report,
            tester_verdict(t.clean, alloc_failures != 0)
        ));
        for line in latency::lines(&t.latency) {
            emit(&format!("  {line}"));
        }
    }
    if alloc_failures != 0 {
        emit(&format!("warning: {}", pool_ran_dry(alloc_failures)));
    }
}

/// The verdict word of a tester line: a clean report in a run whose pool
/// ran dry says so instead of "clean".
pub fn tester_verdict(clean: bool, pool_dry: bool) -> &'static str {
    match (clean, pool_dry) {
        (true, false) => "clean",
        (true, true) => "every frame accounted for, but the pool ran dry: not clean",
        (false, _) => "NOT CLEAN",
    }
}

/// Packets `sluice l3fwd` dropped before Tx, by reason.
#[derive(Serialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteDrops {
    /// No route or flow for the destination.
    pub no_route: u64,
    /// TTL or hop limit 0 or 1.
    pub ttl_expired: u64,
    /// Not IPv4/IPv6, truncated, or inconsistent header fields.
    pub bad_header: u64,
    /// IPv4 header checksum wrong.
    pub bad_checksum: u64,
    /// Shared buffers that could not be rewritten.
    pub unwritable: u64,
    /// Frames shorter than an Ethernet header.
    pub runt: u64,
}

impl RouteDrops {
    /// The reasons, as the drop table names them.
    pub const REASONS: [&'static str; 6] = [
        "no_route",
        "ttl_expired",
        "bad_header",
        "bad_checksum",
        "unwritable",
        "runt",
    ];

    /// The count of `reason` (one of [`REASONS`](Self::REASONS); 0 for
    /// another).
    pub fn get(&self, reason: &str) -> u64 {
        match reason {
            "no_route" => self.no_route,
            "ttl_expired" => self.ttl_expired,
            "bad_header" => self.bad_header,
            "bad_checksum" => self.bad_checksum,
            "unwritable" => self.unwritable,
            "runt" => self.runt,
            _ => 0,
        }
    }
}

/// Cycles per packet, `device` excluded (never below 0).
pub fn cycles_per_packet(lcores: &[LcoreCycles], device: u64) -> (u64, u64, Option<f64>) {
    let busy: u64 = lcores.iter().map(|c| c.busy_cycles).sum();
    let packets: u64 = lcores.iter().map(|c| c.packets).sum();
    let cpp = (packets > 0).then(|| busy.saturating_sub(device) as f64 / packets as f64);
    (busy, packets, cpp)
}

impl Summary {
    /// Prints the summary: one JSON line, or text.
    pub fn print(&self, json: bool) {
        if json {
            emit_json(self, "sluice fwd", "the summary");
            return;
        }
        emit(&format!(
            "---- summary: {} forwarding, {} lcore(s), burst {}, {:.2} s ----",
            self.engine, self.cores, self.burst, self.duration_s
        ));
        for p in &self.ports {
            emit(&format!(
                "port {} ({}, {} queue{}): rx {} ({:.2} Mpps)  tx {} ({:.2} Mpps)  drops {}  \
                 rx_missed {}  rx_nombuf {}  errors rx {} tx {}",
                p.port,
                p.spec,
                p.queues,
                if p.queues == 1 { "" } else { "s" },
                p.rx_packets,
                p.rx_mpps,
                p.tx_packets,
                p.tx_mpps,
                p.drops,
                p.rx_missed,
                p.rx_nombuf,
                p.rx_errors,
                p.tx_errors
            ));
            if !p.rx_offloads.is_empty() {
                emit(&format!("  rx offloads: {}", p.rx_offloads.join(", ")));
            }
            if let Some(b) = &p.bus {
                emit(&format!(
                    "  bus ({}): {:.1} B/pkt (descriptors {:.1}); to device {:.1} B/pkt, {:.2}% \
                     of the link; from device {:.1} B/pkt, {:.2}%; Tx packets in MPWQEs {}, \
                     in regular WQEs {}",
                    b.link,
                    b.bytes_per_pkt,
                    b.desc_bytes_per_pkt,
                    b.to_device_bytes_per_pkt,
                    100.0 * b.to_device_util,
                    b.from_device_bytes_per_pkt,
                    100.0 * b.from_device_util,
                    b.tx_mpwqe_pkts,
                    b.tx_wqe_pkts
                ));
            }
            if let Some(r) = &p.recycle {
                emit(&format!(
                    "  recycle: rx_recycled {}  tx_recycled {}  recycle_fallbacks {}",
                    r.rx_recycled, r.tx_recycled, r.recycle_fallbacks
                ));
            }
            for h in &p.histograms {
                let buckets: Vec<String> = h
                    .counts
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c != 0)
                    .map(|(size, c)| format!("{size}:{c}"))
                    .collect();
                emit(&format!(
                    "  {}q{} bursts {} mean {:.1} [{}]",
                    h.dir,
                    h.queue,
                    h.bursts,
                    h.mean,
                    buckets.join(" ")
                ));
            }
        }
        emit(&format!(
            "total: rx {} ({:.2} Mpps)  tx {} ({:.2} Mpps)  drops {}",
            self.rx_packets, self.rx_mpps, self.tx_packets, self.tx_mpps, self.drops
        ));
        if let Some(r) = &self.route_drops {
            emit(&format!(
                "router drops: no_route {}  ttl_expired {}  bad_header {}  bad_checksum {}  \
                 unwritable {}  runt {}",
                r.no_route, r.ttl_expired, r.bad_header, r.bad_checksum, r.unwritable, r.runt
            ));
        }
        print_drops_by_reason(&self.drops_by_reason);
        match self.cycles_per_packet {
            Some(c) if self.device_cycles > 0 => emit(&format!(
                "forwarding lcores: {c:.1} cycles/packet ({} busy cycles - {} device cycles, \
                 {} packets)",
                self.busy_cycles, self.device_cycles, self.busy_packets
            )),
            Some(c) => emit(&format!(
                "forwarding lcores: {c:.1} cycles/packet ({} busy cycles, {} packets)",
                self.busy_cycles, self.busy_packets
            )),
            None => emit("forwarding lcores: no packet moved"),
        }
        print_drain(
            self.drain_accounted,
            "refused, missed, Rx or Tx error, or dropped by the application",
        );
        print_testers(&self.testers, self.alloc_failures);
        if self.recycle_errors != 0 {
            emit(&format!(
                "warning: {} recycle steps failed (a queue was stopped under them)",
                self.recycle_errors
            ));
        }
        self.census.print();
        if !self.pool_full {
            emit("warning: the mbuf pool is not full after the ports stopped");
        }
    }
}

/// Prints the "drops by reason" section: one line per reason and port,
/// nothing when nothing was dropped.
pub fn print_drops_by_reason(table: &[DropCount]) {
    if table.is_empty() {
        return;
    }
    emit(&format!(
        "drops by reason ({} packets in all):",
        total(table)
    ));
    for d in table {
        let place = match d.port {
            Some(p) => format!("port {p}"),
            None => "application".to_owned(),
        };
        // A capture that fell behind dropped copies; the packets went on.
        let what = if d.reason == CAPTURE_OVERFLOW {
            " copies (not packets)"
        } else {
            ""
        };
        emit(&format!("  {place}: {} {}{what}", d.reason, d.packets));
    }
}

/// Each registered tester's report.
pub(crate) fn tester_reports(mut testers: Vec<(String, Arc<Tester>)>) -> Vec<TesterSummary> {
    testers.sort_by(|a, b| a.0.cmp(&b.0));
    testers
        .into_iter()
        .map(|(name, t)| {
            let r = t.report();
            TesterSummary {
                name,
                sent: r.sent,
                received: r.received,
                lost: r.lost,
                reordered: r.reordered,
                duplicates: r.duplicates,
                corrupt: r.corrupt,
                foreign: r.foreign,
                clean: r.is_clean(),
                report: r.to_string(),
                latency: latency::summaries(&t),
            }
        })
        .collect()
}

/// `Ok` when `clean`; else the error a forwarding command ends with when a
/// tester report is not clean.
pub(crate) fn require_clean(clean: bool) -> Result<(), String> {
    if clean {
        Ok(())
    } else {
        Err("a tester report is not clean (loss, reordering, duplicates or corruption)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_per_packet_counts_busy_polls_minus_the_device() {
        let l = [
            LcoreCycles {
                busy_cycles: 1000,
                packets: 50,
                ..Default::default()
            },
            LcoreCycles {
                busy_cycles: 600,
                packets: 30,
                ..Default::default()
            },
        ];
        assert_eq!(cycles_per_packet(&l, 0), (1600, 80, Some(20.0)));
        assert_eq!(cycles_per_packet(&l, 800), (1600, 80, Some(10.0)));
        assert_eq!(cycles_per_packet(&l, 5000).2, Some(0.0));
        assert_eq!(cycles_per_packet(&[LcoreCycles::default()], 0).2, None);
    }

    #[test]
    fn port_summary_reads_counters_and_histograms() {
        let c = PortCounters::new(2, 2, true);
        c.rx[0].record_burst(32, 2048);
        c.rx[1].record_burst(0, 0);
        c.tx[1].record_burst(32, 2048);
        let p = PortSummary::new(1, "null", &c, 4, 2.0);
        assert_eq!(
            (p.rx_packets, p.tx_packets, p.drops, p.queues),
            (32, 32, 4, 2)
        );
        assert_eq!(p.rx_mpps, 16e-6);
        assert_eq!(p.histograms.len(), 4);
        assert_eq!(p.histograms[0].counts[32], 1);
        assert_eq!(p.histograms[1].counts[0], 1);
        assert_eq!((p.histograms[3].dir, p.histograms[3].queue), ("tx", 1));
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["histograms"][0]["bursts"], 1);
        let c = PortCounters::new(1, 1, false);
        let v = serde_json::to_value(PortSummary::new(0, "null", &c, 0, 1.0)).unwrap();
        assert!(v.get("histograms").is_none());
    }

    #[test]
    fn bus_figures_come_from_a_soft_ports_xstats_and_link() {
        let x: Vec<(String, u64)> = [
            ("bus_desc_bytes", 4000u64),
            ("bus_data_bytes", 20_000),
            ("bus_tx_data_bytes", 8_000),
            ("bus_writeback_bytes", 1_000),
            ("bus_completion_bytes", 500),
            ("bus_doorbell_bytes", 500),
            ("tx_mpwqe_pkts", 90),
            ("tx_wqe_pkts", 10),
        ]
        .iter()
        .map(|&(n, v)| (n.to_string(), v))
        .collect();
        let b = BusSummary::new("soft:tester=a,link=gen4x16", &x, 100, 2.0).unwrap();
        assert_eq!(b.link, "gen4x16");
        assert_eq!(b.bytes_per_pkt, 260.0);
        assert_eq!(b.desc_bytes_per_pkt, 40.0);
        assert_eq!(b.to_device_bytes_per_pkt, 125.0);
        assert_eq!(b.from_device_bytes_per_pkt, 135.0);
        let link = Link::parse("gen4x16").unwrap().bytes_per_sec();
        assert_eq!(b.to_device_util, 12_500.0 / 2.0 / link);
        assert_eq!((b.tx_mpwqe_pkts, b.tx_wqe_pkts), (90, 10));
        assert_eq!(BusSummary::new("null", &x, 100, 2.0), None);
        assert_eq!(BusSummary::new("soft", &x, 0, 2.0), None);
        let c = PortCounters::new(1, 1, false);
        let v = serde_json::to_value(PortSummary::new(0, "null", &c, 0, 1.0)).unwrap();
        assert!(v.get("bus").is_none());
    }

    #[test]
    fn recycle_counts_show_when_not_zero_or_asked() {
        let c = PortCounters::new(1, 1, false);
        c.xstats.register("rx_recycled");
        let p = PortSummary::new(0, "soft", &c, 0, 1.0).with_recycle_counts(false);
        assert_eq!(p.recycle, None);
        let v = serde_json::to_value(&p).unwrap();
        assert!(v.get("recycle").is_none());
        let p = PortSummary::new(0, "null", &c, 0, 1.0).with_recycle_counts(true);
        assert_eq!(p.recycle, Some(RecycleCounts::default()));
        c.xstats.register("tx_recycled").add(64);
        c.xstats.register("recycle_fallbacks").add(2);
        let p = PortSummary::new(0, "soft", &c, 0, 1.0).with_recycle_counts(false);
        let want = RecycleCounts {
            rx_recycled: 0,
            tx_recycled: 64,
            recycle_fallbacks: 2,
        };
        assert_eq!(p.recycle, Some(want));
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["recycle"]["tx_recycled"], 64);
        assert_eq!(v["recycle"]["recycle_fallbacks"], 2);
        assert_eq!(v["recycle"]["rx_recycled"], 0);
    }
}
