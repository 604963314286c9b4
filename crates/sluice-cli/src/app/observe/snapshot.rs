//! One object with everything a running instance shows: its ports, lcores,
//! drops by reason, buffer census per pool and latency per port. The
//! telemetry command `/sluice/snapshot` returns it; `sluice stats` reads one
//! a second and shows the rates between two.
//!
//! Every count is a total since the instance started (rates are the
//! reader's business), so a reader that misses a refresh loses nothing.

use serde::{Deserialize, Serialize};

/// Everything a running instance shows, at one time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The instance's process id.
    pub pid: u32,
    /// The command running (`fwd`, `l2fwd`, `l3fwd`, `dist`, `gen`, `demo`).
    pub command: String,
    /// Its telemetry file prefix.
    pub file_prefix: String,
    /// Seconds since the instance started its ports.
    pub uptime_s: f64,
    /// TSC ticks per second (lcore cycles are TSC ticks).
    pub tsc_hz: u64,
    /// Per port, by id.
    pub ports: Vec<PortSnapshot>,
    /// Per forwarding lcore.
    pub lcores: Vec<LcoreSnapshot>,
    /// Every named drop counter that is not zero, by reason and port.
    pub drops: Vec<DropCount>,
    /// Per mbuf pool: where its buffers are.
    pub pools: Vec<PoolCensus>,
    /// Per tester port: one-way latency of the frames it received back.
    pub latency: Vec<LatencySummary>,
}

/// One port's counters (DPDK's `rte_eth_stats` names).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortSnapshot {
    /// Port id.
    pub id: u16,
    /// Its spec as given.
    pub name: String,
    /// Driver name.
    pub driver: String,
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Packets dropped for want of an Rx descriptor.
    pub imissed: u64,
    /// Packets received with errors (dropped).
    pub ierrors: u64,
    /// Packets that could not be sent.
    pub oerrors: u64,
    /// Rx refills that found the pool empty.
    pub rx_nombuf: u64,
}

/// One forwarding lcore's cycles (TSC ticks) and packets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LcoreSnapshot {
    /// Lcore id.
    pub lcore: usize,
    /// The CPU it is pinned to, if any.
    pub cpu: Option<usize>,
    /// Ticks spent in polls that received at least one packet.
    pub busy_cycles: u64,
    /// Ticks since it started polling.
    pub total_cycles: u64,
    /// Packets received (generated, for `txonly`) in busy polls.
    pub packets: u64,
    /// Polls in all.
    pub polls: u64,
    /// Polls that received nothing.
    pub idle_polls: u64,
}

/// Packets dropped for one reason (`rx_missed_errors`, `tx_full`,
/// `no_route`, `ttl_expired`, …), on one port or by the application.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropCount {
    /// The counter's name.
    pub reason: String,
    /// The port it is counted on (`None`: the application's, no port).
    pub port: Option<u16>,
    /// Packets dropped.
    pub packets: u64,
}

/// Where one pool's buffers are. `size` is the sum of every other field:
/// `held_by_app` is what is left when the rest is counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolCensus {
    /// Pool name.
    pub name: String,
    /// Buffers in the pool.
    pub size: u64,
    /// Free in the pool's ring.
    pub in_ring: u64,
    /// Free in each lcore's cache: `(lcore id, buffers)`, caches holding
    /// none left out.
    pub in_caches: Vec<(usize, u64)>,
    /// Posted in Rx rings: `(port, queue, buffers)`.
    pub rx_posted: Vec<(u16, u16, u64)>,
    /// Waiting in Tx rings for the device or completion: `(port, queue,
    /// buffers)`.
    pub tx_waiting: Vec<(u16, u16, u64)>,
    /// In flight in software rings or the distributor: `(where, buffers)`.
    pub in_flight: Vec<(String, u64)>,
    /// The rest: held by the application (in its bursts, being processed).
    pub held_by_app: u64,
}

/// One-way latency of the frames a tester port received, in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// The tester's port id.
    pub port: u16,
    /// Frames measured.
    pub samples: u64,
    /// Shortest.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Longest.
    pub max_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let snapshot = Snapshot {
            pid: 42,
            command: "fwd".into(),
            file_prefix: "sluice".into(),
            uptime_s: 1.5,
            tsc_hz: 2_500_000_000,
            ports: vec![PortSnapshot {
                id: 0,
                name: "soft".into(),
                driver: "soft".into(),
                ipackets: 10,
                ..Default::default()
            }],
            pools: vec![PoolCensus {
                name: "fwd".into(),
                size: 8191,
                in_ring: 8000,
                in_caches: vec![(1, 100)],
                rx_posted: vec![(0, 0, 64)],
                held_by_app: 27,
                ..Default::default()
            }],
            drops: vec![DropCount {
                reason: "no_route".into(),
                port: None,
                packets: 3,
            }],
            ..Default::default()
        };
        let text = serde_json::to_string(&snapshot).unwrap();
        assert!(text.contains("\"ipackets\":10"), "{text}");
        let back: Snapshot = serde_json::from_str(&text).unwrap();
        assert_eq!(back, snapshot);
    }
}
