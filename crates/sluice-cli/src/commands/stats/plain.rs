//! `sluice stats` as plain lines: one block per refresh.

use super::rates::{Rates, si};
use crate::app::observe::snapshot::Snapshot;

/// The block of lines for one refresh.
pub fn block(s: &Snapshot, r: &Rates) -> String {
    let mut out = format!(
        "sluice {} (file prefix {}, pid {}), up {:.1} s\n",
        s.command, s.file_prefix, s.pid, s.uptime_s
    );
    for p in &s.ports {
        let rate = r
            .ports
            .iter()
            .find(|q| q.id == p.id)
            .cloned()
            .unwrap_or_default();
        out += &format!(
            "  port {} ({}): rx {}pps {}bit/s, tx {}pps {}bit/s; totals rx {} tx {} packets\n",
            p.id,
            p.driver,
            si(rate.rx_pps),
            si(rate.rx_bps),
            si(rate.tx_pps),
            si(rate.tx_bps),
            p.ipackets,
            p.opackets
        );
    }
    for l in &r.lcores {
        let cpu = s
            .lcores
            .iter()
            .find(|k| k.lcore == l.lcore)
            .and_then(|k| k.cpu)
            .map_or_else(|| "not pinned".to_owned(), |c| format!("cpu {c}"));
        out += &format!(
            "  lcore {} ({cpu}): busy {}, {} cycles/packet, {}pps\n",
            l.lcore,
            l.busy_share
                .map_or_else(|| "-".to_owned(), |b| format!("{:.1} %", b * 100.0)),
            l.cycles_per_packet
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.1}")),
            si(l.pps)
        );
    }
    if s.drops.is_empty() {
        out += "  drops: none\n";
    }
    for d in &s.drops {
        let at = d
            .port
            .map_or_else(|| "application".to_owned(), |p| format!("port {p}"));
        out += &format!("  drops {} ({at}): {}\n", d.reason, d.packets);
    }
    for p in &s.pools {
        out += &format!(
            "  pool {}: {} buffers, {} free in the ring, {} in caches, {} posted for Rx, {} \
             waiting for Tx, {} in flight, {} held by the application\n",
            p.name,
            p.size,
            p.in_ring,
            p.in_caches.iter().map(|c| c.1).sum::<u64>(),
            p.rx_posted.iter().map(|c| c.2).sum::<u64>(),
            p.tx_waiting.iter().map(|c| c.2).sum::<u64>(),
            p.in_flight.iter().map(|c| c.1).sum::<u64>(),
            p.held_by_app
        );
    }
    for l in &s.latency {
        out += &format!(
            "  latency port {} ({} frames): min {} p50 {} p99 {} p99.9 {} max {} ns\n",
            l.port, l.samples, l.min_ns, l.p50_ns, l.p99_ns, l.p999_ns, l.max_ns
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::observe::snapshot::{DropCount, PoolCensus, PortSnapshot};

    #[test]
    fn a_block_shows_ports_drops_and_pools() {
        let s = Snapshot {
            command: "fwd".into(),
            file_prefix: "p".into(),
            ports: vec![PortSnapshot {
                id: 1,
                driver: "soft".into(),
                ipackets: 7,
                ..Default::default()
            }],
            drops: vec![DropCount {
                reason: "no_route".into(),
                port: None,
                packets: 3,
            }],
            pools: vec![PoolCensus {
                name: "fwd".into(),
                size: 10,
                in_ring: 8,
                held_by_app: 2,
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = block(&s, &Rates::default());
        assert!(text.starts_with("sluice fwd (file prefix p"), "{text}");
        assert!(text.contains("port 1 (soft): rx 0.00 pps"), "{text}");
        assert!(text.contains("drops no_route (application): 3"), "{text}");
        assert!(text.contains("pool fwd: 10 buffers, 8 free"), "{text}");
    }
}
