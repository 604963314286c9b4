//! The ports and pools an application shows to telemetry and metrics.
//!
//! A [`Registry`] is filled while the application sets up (a cold path) and
//! read by the telemetry and metrics threads. Each entry holds shared
//! handles only: a port's counters (`Arc<PortCounters>`, written by the
//! lcores polling its queues with plain single-writer adds) and a clone of
//! a pool's handle (its free counts are read with loads). The registry's
//! own locks guard the lists of entries, which lcores never touch.

use std::sync::{Arc, Mutex, MutexGuard};

use sluice::mbuf::MbufPool;
use sluice::net::MacAddr;
use sluice::port::{Port, PortCounters};

/// One port, as telemetry shows it (DPDK's `/ethdev/info` fields).
#[derive(Debug, Clone)]
pub struct PortEntry {
    /// The port id (`/ethdev/stats,ID`).
    pub id: u16,
    /// The port's name (its spec as the user gave it).
    pub name: String,
    /// The driver's name (`soft`, `afxdp`, …).
    pub driver: &'static str,
    /// The port's MAC address.
    pub mac: MacAddr,
    /// Rx queues configured.
    pub nb_rx_queues: u16,
    /// Tx queues configured.
    pub nb_tx_queues: u16,
    /// The MTU configured.
    pub mtu: u16,
    /// The port's live counters.
    pub counters: Arc<PortCounters>,
}

impl PortEntry {
    /// The entry for `port`, its counters shared.
    pub fn of(port: &Port) -> PortEntry {
        PortEntry {
            id: port.id(),
            name: port.name().to_string(),
            driver: port.info().driver,
            mac: port.mac(),
            nb_rx_queues: port.nb_rx_queues() as u16,
            nb_tx_queues: port.nb_tx_queues() as u16,
            mtu: port.config().mtu,
            counters: port.counters(),
        }
    }
}

/// One mbuf pool, as telemetry shows it (`/mempool/info,NAME`).
#[derive(Debug, Clone)]
pub struct PoolEntry {
    /// The pool's name.
    pub name: String,
    /// A handle on the pool (its counts are read, nothing is allocated).
    pub pool: MbufPool,
}

/// The ports and pools shown. Shared (`Arc<Registry>`) between the
/// application, which adds entries, and the threads that read them.
#[derive(Debug, Default)]
pub struct Registry {
    ports: Mutex<Vec<PortEntry>>,
    pools: Mutex<Vec<PoolEntry>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Shows `port` (its id, name, driver, queues and counters). A port
    /// added again under the same id replaces the earlier entry.
    pub fn add_port(&self, port: &Port) {
        self.add_port_entry(PortEntry::of(port));
    }

    /// Shows a port described by hand.
    pub fn add_port_entry(&self, entry: PortEntry) {
        let mut ports = lock(&self.ports);
        ports.retain(|p| p.id != entry.id);
        ports.push(entry);
        ports.sort_by_key(|p| p.id);
    }

    /// Shows `pool` under its name. A pool added again under the same name
    /// replaces the earlier entry.
    pub fn add_pool(&self, name: &str, pool: &MbufPool) {
        let mut pools = lock(&self.pools);
        pools.retain(|p| p.name != name);
        pools.push(PoolEntry {
            name: name.to_string(),
            pool: pool.clone(),
        });
    }

    /// The ports, by id.
    pub fn ports(&self) -> Vec<PortEntry> {
        lock(&self.ports).clone()
    }

    /// The port with id `id`.
    pub fn port(&self, id: u16) -> Option<PortEntry> {
        lock(&self.ports).iter().find(|p| p.id == id).cloned()
    }

    /// The pools, in the order added.
    pub fn pools(&self) -> Vec<PoolEntry> {
        lock(&self.pools).clone()
    }

    /// The pool named `name`.
    pub fn pool(&self, name: &str) -> Option<PoolEntry> {
        lock(&self.pools).iter().find(|p| p.name == name).cloned()
    }

    /// Forgets every entry (the application is about to drop its ports and
    /// pools; nothing more is shown of them).
    pub fn clear(&self) {
        lock(&self.ports).clear();
        lock(&self.pools).clear();
    }
}

/// Locks a list of entries. A panic while holding the lock cannot leave a
/// list half-written (each change is one `Vec` operation), so a poisoned
/// lock is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice::mbuf::MbufPoolConfig;
    use sluice::port::PortConfig;

    #[test]
    fn ports_are_listed_by_id_and_share_the_live_counters() {
        let pool = MbufPool::new(MbufPoolConfig {
            size: 1023,
            ..Default::default()
        })
        .unwrap();
        let registry = Registry::new();
        let mut ports = Vec::new();
        for id in [1u16, 0] {
            let mut config = PortConfig::new(Some(pool.clone()));
            config.port_id = id;
            let port = sluice::driver::open("null:size=64", config).unwrap();
            registry.add_port(&port);
            ports.push(port);
        }
        registry.add_pool("fwd", &pool);
        let ids: Vec<u16> = registry.ports().iter().map(|p| p.id).collect();
        assert_eq!(ids, [0, 1]);
        assert_eq!(registry.port(1).unwrap().driver, "null");

        let port = &mut ports[0];
        port.start().unwrap();
        let mut burst: sluice::mbuf::Burst = sluice::mbuf::Burst::new();
        port.rx_queue(0).unwrap().rx_burst(&mut burst);
        let n = burst.len() as u64;
        assert!(n > 0);
        assert_eq!(registry.port(1).unwrap().counters.stats().rx_packets, n);
        assert_eq!(registry.pool("fwd").unwrap().pool.stats().in_use as u64, n);
        drop(burst);
        registry.clear();
        assert!(registry.ports().is_empty() && registry.pools().is_empty());
        drop(ports);
        assert!(pool.is_full());
    }
}
