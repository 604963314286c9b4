//! The end-of-run summary of `sluice dist`: ports, per-worker packets and
//! flows, the flow spread, the distributor's counters, the accounting
//! checks and each tester's report. Printed as text, or as one JSON object.

use serde::Serialize;
use sluice::distributor::DistStats;

use super::api::Api;
use super::worker::WorkerOut;
use crate::app::observe::snapshot::DropCount;
use crate::app::output::{emit, emit_json};
use crate::app::summary::{
    DRAIN_UNACCOUNTED, PortSummary, TesterSummary, pool_ran_dry, print_drain,
    print_drops_by_reason, print_testers,
};

/// One worker.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct WorkerSummary {
    /// Its id.
    pub worker: usize,
    /// Packets it handled.
    pub packets: u64,
    /// Its share of all packets handled.
    pub share: f64,
    /// Packets the distributor handed it (its own count).
    pub handed: u64,
    /// Distinct flows (RSS hashes) it handled.
    pub flows: usize,
    /// Packets of flows its table had no room for.
    pub untracked: u64,
    /// Times it took a flow tag another worker had handled last.
    pub moves_in: u64,
}

/// How flows spread over the workers.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct FlowSpread {
    /// Distinct flows (RSS hashes), all workers.
    pub flows: usize,
    /// Flows handled by more than one worker over the run (one after the
    /// other: the distributor never has a flow at two workers at once).
    pub flows_on_several_workers: usize,
    /// Times a flow tag went to another worker than the last one that
    /// handled it.
    pub tag_moves: u64,
    /// The largest share of packets one worker handled.
    pub max_share: f64,
    /// That worker.
    pub max_share_worker: usize,
}

impl FlowSpread {
    /// The spread of `workers`' flows.
    pub fn of(workers: &[WorkerOut]) -> FlowSpread {
        let mut seen: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        for w in workers {
            for (h, _) in w.flows.iter() {
                *seen.entry(h).or_default() += 1;
            }
        }
        let total: u64 = workers.iter().map(|w| w.packets).sum();
        let (max_share_worker, max) = workers
            .iter()
            .enumerate()
            .map(|(i, w)| (i, w.packets))
            .max_by_key(|&(i, p)| (p, std::cmp::Reverse(i)))
            .unwrap_or((0, 0));
        FlowSpread {
            flows: seen.len(),
            flows_on_several_workers: seen.values().filter(|&&n| n > 1).count(),
            tag_moves: workers.iter().map(|w| w.moves_in).sum(),
            max_share: max as f64 / total.max(1) as f64,
            max_share_worker,
        }
    }
}

/// The distributor's counters, and what its Tx queues refused.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct DistCounters {
    /// Packets handed to workers.
    pub distributed: u64,
    /// Packets workers returned.
    pub returned: u64,
    /// Worker requests whose returns did not fit the returns FIFO (held
    /// until collected).
    pub returns_full: u64,
    /// Worker shutdowns.
    pub shutdowns: u64,
    /// Packets taken back from workers that shut down.
    pub redistributed: u64,
    /// Returned packets a Tx queue refused, freed.
    pub tx_refused: u64,
}

impl DistCounters {
    /// From the distributor's stats and the Tx drops.
    pub fn new(s: &DistStats, tx_refused: u64) -> DistCounters {
        DistCounters {
            distributed: s.distributed,
            returned: s.returned,
            returns_full: s.returns_full,
            shutdowns: s.shutdowns,
            redistributed: s.redistributed,
            tx_refused,
        }
    }
}

/// The whole run.
#[derive(Serialize, Debug, Clone)]
pub struct DistSummary {
    /// Always `"summary"` (stats lines have `"stats"`).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The distributor API.
    pub api: Api,
    /// Its tag matching (`avx2`, `sse2`, `scalar`, `-`).
    pub matching: &'static str,
    /// Workers.
    pub workers: usize,
    /// Workers sharing the busiest worker CPU.
    pub workers_per_core: usize,
    /// Packets asked per Rx call.
    pub burst: usize,
    /// Seconds from the start to the end of the run (drain included).
    pub duration_s: f64,
    /// Per port.
    pub ports: Vec<PortSummary>,
    /// Ports whose driver gives no RSS hash: the distributor lcore computed
    /// it.
    pub software_hash_ports: Vec<usize>,
    /// All ports' received packets.
    pub rx_packets: u64,
    /// All ports' sent packets.
    pub tx_packets: u64,
    /// Received, millions per second.
    pub rx_mpps: f64,
    /// Sent, millions per second.
    pub tx_mpps: f64,
    /// Per worker.
    pub per_worker: Vec<WorkerSummary>,
    /// How flows spread.
    pub spread: FlowSpread,
    /// The distributor's counters.
    pub distributor: DistCounters,
    /// TSC ticks per packet received of the distributor lcore's loop
    /// iterations that moved packets (waits for workers included, inline
    /// device cycles excluded); `None` when nothing moved.
    pub lcore_cycles_per_packet: Option<f64>,
    /// The distributor lcore's loop iterations.
    pub lcore_loops: u64,
    /// Those that moved a packet.
    pub lcore_busy_loops: u64,
    /// The TSC frequency.
    pub tsc_hz: u64,
    /// Received = distributed = returned = handled by the workers = sent +
    /// refused.
    pub counts_match: bool,
    /// Every buffer back in the pool after the ports stopped.
    pub pool_full: bool,
    /// Times the pool was found empty (every port's `rx_nombuf`): the pool
    /// ran dry.
    pub alloc_failures: u64,
    /// Every packet dropped, by reason and port (see `observe::drops`);
    /// reasons with no drop left out.
    pub drops_by_reason: Vec<DropCount>,
    /// When every port is on a tester: whether the drain saw every frame
    /// sent received or counted as a drop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_accounted: Option<bool>,
    /// Each tester's report.
    pub testers: Vec<TesterSummary>,
    /// Every tester report clean (true when there is none), the pool never
    /// ran dry, and the drain (when it could tell) accounted for every
    /// frame.
    pub clean: bool,
}

/// Whether a run is clean: every tester report clean, the pool never ran
/// dry (a run starved of buffers tested less than it was asked to, even
/// when every frame it sent came back), and no frame left unaccounted for
/// by the drain (one neither received nor counted as a drop was lost
/// silently).
pub fn is_clean(testers: &[TesterSummary], alloc_failures: u64, drain: Option<bool>) -> bool {
    testers.iter().all(|t| t.clean) && alloc_failures == 0 && drain != Some(false)
}

/// The workers' rows.
pub fn worker_rows(workers: &[WorkerOut], handed: &[u64]) -> Vec<WorkerSummary> {
    let total: u64 = workers.iter().map(|w| w.packets).sum();
    workers
        .iter()
        .enumerate()
        .map(|(i, w)| WorkerSummary {
            worker: i,
            packets: w.packets,
            share: w.packets as f64 / total.max(1) as f64,
            handed: handed.get(i).copied().unwrap_or(0),
            flows: w.flows.flows(),
            untracked: w.flows.untracked,
            moves_in: w.moves_in,
        })
        .collect()
}

/// Whether every packet is accounted for once: received, distributed,
/// returned, handled by the workers (each worker's own count agreeing with
/// the distributor's), and sent or refused.
pub fn counts_match(rx: u64, tx: u64, d: &DistCounters, workers: &[WorkerSummary]) -> bool {
    let handled: u64 = workers.iter().map(|w| w.packets).sum();
    rx == d.distributed
        && d.distributed == d.returned
        && handled == d.distributed
        && workers.iter().all(|w| w.packets == w.handed)
        && d.returned == tx + d.tx_refused
}

impl DistSummary {
    /// Whether the run was right: tester reports clean, counts matching,
    /// the pool full.
    pub fn ok(&self) -> bool {
        self.clean && self.counts_match && self.pool_full
    }

    /// Why the run was not right (empty when it was).
    pub fn problems(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.alloc_failures != 0 {
            why.push(pool_ran_dry(self.alloc_failures));
        }
        if !self.testers.iter().all(|t| t.clean) {
            why.push("a tester report is not clean".into());
        }
        if self.drain_accounted == Some(false) {
            why.push(DRAIN_UNACCOUNTED.into());
        }
        if !self.counts_match {
            why.push("packets are not accounted for once each".into());
        }
        if !self.pool_full {
            why.push("buffers are missing from the pool".into());
        }
        why
    }

    /// Prints the summary: one JSON line, or text.
    pub fn print(&self, json: bool) {
        if json {
            emit_json(self, "sluice dist", "the summary");
            return;
        }
        emit(&format!(
            "---- summary: {} API ({} matching), {} worker{} ({} per core), burst {}, {:.2} s ----",
            self.api.name(),
            self.matching,
            self.workers,
            if self.workers == 1 { "" } else { "s" },
            self.workers_per_core,
            self.burst,
            self.duration_s
        ));
        for p in &self.ports {
            emit(&format!(
                "port {} ({}): rx {} ({:.2} Mpps)  tx {} ({:.2} Mpps)  tx refused {}  \
                 rx_missed {}  rx_nombuf {}  errors rx {} tx {}{}",
                p.port,
                p.spec,
                p.rx_packets,
                p.rx_mpps,
                p.tx_packets,
                p.tx_mpps,
                p.drops,
                p.rx_missed,
                p.rx_nombuf,
                p.rx_errors,
                p.tx_errors,
                if self.software_hash_ports.contains(&p.port) {
                    "  (no RSS hash from the driver: hashed in software)"
                } else {
                    ""
                }
            ));
        }
        emit(&format!(
            "total: rx {} ({:.2} Mpps)  tx {} ({:.2} Mpps)",
            self.rx_packets, self.rx_mpps, self.tx_packets, self.tx_mpps
        ));
        print_drops_by_reason(&self.drops_by_reason);
        for w in &self.per_worker {
            let untracked = if w.untracked == 0 {
                String::new()
            } else {
                format!(" (+ {} packets of flows not tracked)", w.untracked)
            };
            emit(&format!(
                "worker {}: {} packets ({:.1} %), {} flows{untracked}, {} flow-tag moves in",
                w.worker,
                w.packets,
                100.0 * w.share,
                w.flows,
                w.moves_in
            ));
        }
        let s = &self.spread;
        emit(&format!(
            "flow spread: {} flows, {} handled by more than one worker over the run, {} \
             flow-tag moves between workers; largest share {:.1} % (worker {})",
            s.flows,
            s.flows_on_several_workers,
            s.tag_moves,
            100.0 * s.max_share,
            s.max_share_worker
        ));
        let d = &self.distributor;
        emit(&format!(
            "distributor: distributed {}  returned {}  returns_full {}  shutdowns {}  \
             redistributed {}  tx refused (freed) {}",
            d.distributed, d.returned, d.returns_full, d.shutdowns, d.redistributed, d.tx_refused
        ));
        match self.lcore_cycles_per_packet {
            Some(c) => emit(&format!(
                "distributor lcore: {c:.1} cycles/packet ({} of {} loops busy; waits for workers \
                 included, inline device cycles excluded)",
                self.lcore_busy_loops, self.lcore_loops
            )),
            None => emit("distributor lcore: no packet moved"),
        }
        emit(&format!(
            "accounting: received = distributed = returned = handled by workers = sent + \
             refused: {}",
            if self.counts_match { "yes" } else { "NO" }
        ));
        print_drain(self.drain_accounted, "refused, missed, Rx or Tx error");
        print_testers(&self.testers, self.alloc_failures);
        emit(if self.pool_full {
            "pool: every mbuf back"
        } else {
            "warning: the mbuf pool is not full after the ports stopped"
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::dist::worker::FlowCounts;

    fn out(packets: u64, moves_in: u64, flows: &[u32]) -> WorkerOut {
        let mut f = FlowCounts::new(64);
        for &h in flows {
            f.add(h);
        }
        WorkerOut {
            packets,
            moves_in,
            flows: f,
        }
    }

    #[test]
    fn spread_counts_flows_moves_and_the_largest_share() {
        let w = [out(30, 1, &[1, 2, 3]), out(90, 2, &[3, 4]), out(0, 0, &[])];
        let s = FlowSpread::of(&w);
        assert_eq!(s.flows, 4);
        assert_eq!(s.flows_on_several_workers, 1);
        assert_eq!(s.tag_moves, 3);
        assert_eq!((s.max_share, s.max_share_worker), (0.75, 1));
        let rows = worker_rows(&w, &[30, 90, 0]);
        assert_eq!(rows[1].share, 0.75);
        assert_eq!((rows[0].flows, rows[0].handed), (3, 30));
        let d = DistCounters::new(
            &DistStats {
                distributed: 120,
                returned: 120,
                ..Default::default()
            },
            5,
        );
        assert!(counts_match(120, 115, &d, &rows));
        assert!(!counts_match(120, 116, &d, &rows));
        assert!(!counts_match(121, 115, &d, &rows));
        let rows = worker_rows(&w, &[31, 89, 0]);
        assert!(
            !counts_match(120, 115, &d, &rows),
            "a worker's own count differs"
        );
    }
}
