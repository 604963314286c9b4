//! Rates between two snapshots of an instance: what `sluice stats` shows
//! besides the totals.

use serde::Serialize;

use crate::app::observe::snapshot::Snapshot;

/// The rates between two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Rates {
    /// Seconds between the two (by the instance's uptime).
    pub interval_s: f64,
    /// Per port, by id.
    pub ports: Vec<PortRates>,
    /// Per lcore.
    pub lcores: Vec<LcoreRates>,
}

/// One port's packet and bit rates (bits of the frames, without preamble,
/// inter-frame gap or FCS).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PortRates {
    /// Port id.
    pub id: u16,
    /// Packets received per second.
    pub rx_pps: f64,
    /// Packets sent per second.
    pub tx_pps: f64,
    /// Bits received per second.
    pub rx_bps: f64,
    /// Bits sent per second.
    pub tx_bps: f64,
    /// Packets dropped per second, every reason on this port.
    pub drops_pps: f64,
}

/// One lcore's load between the two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LcoreRates {
    /// Lcore id.
    pub lcore: usize,
    /// Share of its cycles spent in polls that received packets (0..=1).
    pub busy_share: Option<f64>,
    /// Busy cycles per packet received.
    pub cycles_per_packet: Option<f64>,
    /// Packets received per second.
    pub pps: f64,
}

impl Rates {
    /// The rates from `before` to `after` (of the same instance). Ports or
    /// lcores missing from `before` count from zero; counters that went
    /// backwards (a new instance under the same prefix) count as zero.
    pub fn between(before: &Snapshot, after: &Snapshot) -> Rates {
        let secs = after.uptime_s - before.uptime_s;
        let per_sec = |delta: u64| if secs > 0.0 { delta as f64 / secs } else { 0.0 };
        let ports = after
            .ports
            .iter()
            .map(|p| {
                let b = before.ports.iter().find(|q| q.id == p.id);
                let d = |f: fn(&crate::app::observe::snapshot::PortSnapshot) -> u64| {
                    f(p).saturating_sub(b.map_or(0, f))
                };
                let drops = |s: &Snapshot| -> u64 {
                    s.drops
                        .iter()
                        .filter(|d| d.port == Some(p.id))
                        .map(|d| d.packets)
                        .sum()
                };
                PortRates {
                    id: p.id,
                    rx_pps: per_sec(d(|s| s.ipackets)),
                    tx_pps: per_sec(d(|s| s.opackets)),
                    rx_bps: per_sec(d(|s| s.ibytes)) * 8.0,
                    tx_bps: per_sec(d(|s| s.obytes)) * 8.0,
                    drops_pps: per_sec(drops(after).saturating_sub(drops(before))),
                }
            })
            .collect();
        let lcores = after
            .lcores
            .iter()
            .map(|l| {
                let b = before.lcores.iter().find(|k| k.lcore == l.lcore);
                let busy = l.busy_cycles.saturating_sub(b.map_or(0, |b| b.busy_cycles));
                let total = l
                    .total_cycles
                    .saturating_sub(b.map_or(0, |b| b.total_cycles));
                let packets = l.packets.saturating_sub(b.map_or(0, |b| b.packets));
                LcoreRates {
                    lcore: l.lcore,
                    busy_share: (total != 0).then(|| (busy as f64 / total as f64).min(1.0)),
                    cycles_per_packet: (packets != 0).then(|| busy as f64 / packets as f64),
                    pps: per_sec(packets),
                }
            })
            .collect();
        Rates {
            interval_s: secs.max(0.0),
            ports,
            lcores,
        }
    }
}

/// `n` with an SI prefix (`1.23 M`), for rates.
pub fn si(n: f64) -> String {
    let (v, unit) = if n >= 1e9 {
        (n / 1e9, "G")
    } else if n >= 1e6 {
        (n / 1e6, "M")
    } else if n >= 1e3 {
        (n / 1e3, "k")
    } else {
        (n, "")
    };
    format!("{v:.2} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::observe::snapshot::{DropCount, LcoreSnapshot, PortSnapshot};

    fn at(uptime_s: f64, packets: u64, busy: u64, total: u64) -> Snapshot {
        Snapshot {
            uptime_s,
            ports: vec![PortSnapshot {
                id: 0,
                ipackets: packets,
                opackets: packets / 2,
                ibytes: packets * 64,
                ..Default::default()
            }],
            lcores: vec![LcoreSnapshot {
                lcore: 0,
                busy_cycles: busy,
                total_cycles: total,
                packets,
                ..Default::default()
            }],
            drops: vec![DropCount {
                reason: "rx_missed_errors".into(),
                port: Some(0),
                packets: packets / 10,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn rates_are_the_deltas_over_the_uptime_between() {
        let r = Rates::between(&at(1.0, 1000, 500, 1000), &at(3.0, 5000, 2500, 5000));
        assert_eq!(r.interval_s, 2.0);
        let p = &r.ports[0];
        assert_eq!(
            (p.rx_pps, p.tx_pps, p.rx_bps),
            (2000.0, 1000.0, 2000.0 * 512.0)
        );
        assert_eq!(p.drops_pps, 200.0);
        let l = &r.lcores[0];
        assert_eq!((l.busy_share, l.cycles_per_packet), (Some(0.5), Some(0.5)));
    }

    #[test]
    fn counters_going_back_and_no_time_give_zero_not_a_panic() {
        let r = Rates::between(&at(3.0, 5000, 2500, 5000), &at(3.0, 10, 1, 1));
        assert_eq!(r.ports[0].rx_pps, 0.0);
        assert_eq!(r.lcores[0].busy_share, None);
        assert_eq!(r.lcores[0].cycles_per_packet, None);
        assert_eq!(si(1_234_000.0), "1.23 M");
        assert_eq!(si(12.0), "12.00 ");
    }
}
