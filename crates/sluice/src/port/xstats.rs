//! Extended statistics: driver counters by name (`bus_desc_bytes`,
//! `tx_mpwqe_pkts`, `rx_recycled`, …), as DPDK's xstats.
//!
//! A driver registers its counters while the port is being made (a cold path
//! behind a lock) and keeps the returned `Arc<Counter>`s: bumping one is a
//! plain single-writer add, no lock and no lookup. Reading adds up the
//! counters of each name (one per queue, say) in the order the names were
//! first registered.
//!
//! A value the driver does not count itself but reads from elsewhere when
//! asked (the kernel's statistics of an AF_XDP socket) is registered as a
//! *source*: a function called at each read, added in like a counter.

use std::sync::{Arc, Mutex};

use crate::counter::Counter;

/// A port's named counters.
#[derive(Default)]
pub struct Xstats {
    entries: Mutex<Vec<(String, Arc<Counter>)>>,
    /// Values read at each snapshot.
    sources: Mutex<Vec<(String, Source)>>,
}

/// A value read when the xstats are.
type Source = Box<dyn Fn() -> u64 + Send + Sync>;

impl std::fmt::Debug for Xstats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xstats")
            .field("entries", &self.snapshot())
            .finish()
    }
}

impl Xstats {
    /// No counters.
    pub fn new() -> Xstats {
        Xstats::default()
    }

    /// A new counter named `name`; several counters may share a name and are
    /// added up when read. The caller is its single writer.
    pub fn register(&self, name: &str) -> Arc<Counter> {
        let c = Arc::new(Counter::new());
        self.lock().push((name.to_string(), Arc::clone(&c)));
        c
    }

    /// A source named `name`: `read` is called at every read of the
    /// xstats (from the reading thread) and its value added in as a
    /// counter's would be.
    pub fn register_source(&self, name: &str, read: impl Fn() -> u64 + Send + Sync + 'static) {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), Box::new(read)));
    }

    /// Every name with the sum of its counters and sources, in
    /// registration order (counters' names first).
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        let mut add = |name: &String, v: u64| match out.iter_mut().find(|(n, _)| n == name) {
            Some((_, sum)) => *sum += v,
            None => out.push((name.clone(), v)),
        };
        for (name, c) in self.lock().iter() {
            add(name, c.get());
        }
        for (name, f) in self
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            add(name, f());
        }
        out
    }

    /// The sum of the counters and sources named `name` (`None` if there
    /// is none).
    pub fn get(&self, name: &str) -> Option<u64> {
        let mut found = None;
        for (_, c) in self.lock().iter().filter(|(n, _)| n == name) {
            *found.get_or_insert(0) += c.get();
        }
        let sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        for (_, f) in sources.iter().filter(|(n, _)| n == name) {
            *found.get_or_insert(0) += f();
        }
        found
    }

    /// The counters named `name`, to read their sum often without the lock
    /// (a benchmark reading a driver's `device_cycles` between polls).
    /// Sources are not among them.
    pub fn counters(&self, name: &str) -> Vec<Arc<Counter>> {
        self.lock()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, c)| Arc::clone(c))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Arc<Counter>)>> {
        // A panic while holding the lock cannot leave the list half-written
        // (push is the only mutation), so a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn counters_of_one_name_add_up_in_registration_order() {
        let x = Xstats::new();
        let a0 = x.register("bus_doorbells");
        let b = x.register("bus_desc_bytes");
        let a1 = x.register("bus_doorbells");
        a0.add(3);
        a1.add(4);
        b.add(64);
        assert_eq!(
            x.snapshot(),
            vec![("bus_doorbells".into(), 7), ("bus_desc_bytes".into(), 64)]
        );
        assert_eq!(x.get("bus_doorbells"), Some(7));
        assert_eq!(x.get("nope"), None);
        let cs = x.counters("bus_doorbells");
        assert_eq!(cs.len(), 2);
        a1.add(1);
        assert_eq!(cs.iter().map(|c| c.get()).sum::<u64>(), 8);
        assert!(x.counters("nope").is_empty());
    }

    #[test]
    fn sources_are_read_at_each_snapshot_and_add_to_counters() {
        let x = Xstats::new();
        let c = x.register("rx_dropped");
        let v = Arc::new(std::sync::atomic::AtomicU64::new(5));
        let v2 = Arc::clone(&v);
        x.register_source("rx_dropped", move || {
            v2.load(std::sync::atomic::Ordering::Relaxed)
        });
        x.register_source("rx_ring_full", || 7);
        c.add(1);
        assert_eq!(
            x.snapshot(),
            vec![("rx_dropped".into(), 6), ("rx_ring_full".into(), 7)]
        );
        v.store(10, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(x.get("rx_dropped"), Some(11));
        assert_eq!(x.get("rx_ring_full"), Some(7));
        assert_eq!(x.counters("rx_ring_full").len(), 0);
    }
}
