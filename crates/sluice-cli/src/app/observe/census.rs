//! The buffer census of a run: where every buffer of its pool is
//! ([`sluice::census`]), counted each stats period, and at the end in the
//! summary, with the buffers that did not come back and where they were
//! last counted.
//!
//! [`of_run`] makes the run's [`Census`] — its pool, its ports, and the
//! distributor when there is one — in one place, for the stats loop and
//! the telemetry handlers alike.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde::Serialize;
use sluice::census::{self, Census};
use sluice::counter::Gauge;
use sluice::mbuf::MbufPool;
use sluice::port::Port;

use super::snapshot::PoolCensus;
use crate::app::output::emit;

/// The census of a run's pool (under its own name) and ports, with the
/// distributor's held packets as in flight when `distributor` gives its
/// gauge.
pub fn of_run(ports: &[Port], pool: &MbufPool, distributor: Option<Arc<Gauge>>) -> Census {
    let name = pool.mempool().name().to_string();
    let mut census = Census::new().pool(&name, pool);
    for port in ports {
        census = census.port(port);
    }
    if let Some(held) = distributor {
        census = census.in_flight(&name, "distributor", move || held.get());
    }
    census
}

/// The distributor's held-packets gauge for a census made before the
/// distributor is open (the watchers' census, made when the observer
/// starts): reads 0 until the distributor sets it, then the gauge.
#[derive(Clone, Default, Debug)]
pub struct HeldSlot(Arc<OnceLock<Arc<Gauge>>>);

impl HeldSlot {
    /// Hands over the open distributor's gauge (the first one stays).
    pub fn set(&self, held: Arc<Gauge>) {
        let _ = self.0.set(held);
    }

    /// Packets the distributor holds now (0 before it is open).
    pub fn get(&self) -> u64 {
        self.0.get().map_or(0, |held| held.get())
    }
}

impl From<&census::PoolCensus> for PoolCensus {
    fn from(c: &census::PoolCensus) -> PoolCensus {
        PoolCensus {
            name: c.name.clone(),
            size: c.size,
            in_ring: c.in_ring,
            in_caches: c.in_caches.clone(),
            rx_posted: c.rx_posted.clone(),
            tx_waiting: c.tx_waiting.clone(),
            in_flight: c.in_flight.clone(),
            held_by_app: c.held_by_app,
        }
    }
}

/// A census and the last count of it, taken by the stats loop each period.
/// The lock is the readers' alone: no lcore takes it.
pub struct CensusWatch {
    census: Census,
    last: Mutex<Vec<census::PoolCensus>>,
}

impl CensusWatch {
    /// Watches `census`; nothing counted yet.
    pub fn new(census: Census) -> CensusWatch {
        CensusWatch {
            census,
            last: Mutex::new(Vec::new()),
        }
    }

    /// Counts now, and keeps the count as the last.
    pub fn sample(&self) {
        let now = self.census.take();
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = now;
    }

    /// The last count (empty when none was taken).
    pub fn last(&self) -> Vec<census::PoolCensus> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Buffers of a pool that were not back after the ports stopped.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct NotBack {
    /// The pool.
    pub pool: String,
    /// Buffers missing.
    pub buffers: u64,
    /// Where the run's last census counted buffers out of the pool:
    /// `(place, buffers)`, places holding none left out (empty when no
    /// census was taken during the run).
    pub last_counted: Vec<(String, u64)>,
}

/// The census part of a summary: each pool at the end, and what did not
/// come back.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct CensusReport {
    /// Each pool after the ports stopped.
    pub pools: Vec<PoolCensus>,
    /// Pools not full at the end.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_back: Vec<NotBack>,
}

impl CensusReport {
    /// The report from the count after the ports stopped (`end`) and the
    /// last one taken during the run (`last`).
    pub fn new(end: &[census::PoolCensus], last: &[census::PoolCensus]) -> CensusReport {
        let not_back = end
            .iter()
            .filter(|c| c.free() < c.size)
            .map(|c| NotBack {
                pool: c.name.clone(),
                buffers: c.size - c.free(),
                last_counted: last
                    .iter()
                    .find(|l| l.name == c.name)
                    .map(census::PoolCensus::out_of_pool)
                    .unwrap_or_default(),
            })
            .collect();
        CensusReport {
            pools: end.iter().map(PoolCensus::from).collect(),
            not_back,
        }
    }

    /// Prints the report as text: per pool, its free buffers and where the
    /// others are; then what did not come back.
    pub fn print(&self) {
        for p in &self.pools {
            let cached: u64 = p.in_caches.iter().map(|c| c.1).sum();
            let posted: u64 = p.rx_posted.iter().map(|r| r.2).sum();
            let waiting: u64 = p.tx_waiting.iter().map(|t| t.2).sum();
            let flight: u64 = p.in_flight.iter().map(|f| f.1).sum();
            emit(&format!(
                "buffers ({}, {}): in ring {}  in caches {}  rx posted {}  tx waiting {}  \
                 in flight {}  held by app {}",
                p.name, p.size, p.in_ring, cached, posted, waiting, flight, p.held_by_app
            ));
        }
        for n in &self.not_back {
            let places: Vec<String> = n
                .last_counted
                .iter()
                .map(|(place, k)| format!("{place} {k}"))
                .collect();
            let where_ = if places.is_empty() {
                "no census was taken during the run".to_string()
            } else {
                format!("last counted: {}", places.join(", "))
            };
            emit(&format!(
                "warning: {} buffers of pool {} did not come back ({where_})",
                n.buffers, n.pool
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(name: &str, in_ring: u64, posted: u64, held: u64) -> census::PoolCensus {
        census::PoolCensus {
            name: name.into(),
            size: 100,
            in_ring,
            rx_posted: vec![(0, 0, posted)],
            held_by_app: held,
            ..Default::default()
        }
    }

    #[test]
    fn buffers_not_back_are_reported_with_where_they_were_last_counted() {
        let last = [count("fwd", 60, 30, 10)];
        let end = [count("fwd", 97, 0, 3)];
        let r = CensusReport::new(&end, &last);
        assert_eq!(
            r.not_back,
            vec![NotBack {
                pool: "fwd".into(),
                buffers: 3,
                last_counted: vec![("rx p0q0".into(), 30), ("application".into(), 10)],
            }]
        );
        assert_eq!(r.pools[0].in_ring, 97);
        let full = CensusReport::new(&[count("fwd", 100, 0, 0)], &last);
        assert!(full.not_back.is_empty());
        let json = serde_json::to_string(&full).unwrap();
        assert!(!json.contains("not_back"), "{json}");
    }
}
