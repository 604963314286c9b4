//! Extended statistics: driver counters by name (`bus_desc_bytes`,
//! `tx_mpwqe_pkts`, `rx_recycled`, …), as DPDK's xstats.
//!
//! A driver registers its counters while the port is being made (a cold path
//! behind a lock) and keeps the returned `Arc<Counter>`s: bumping one is a
//! plain single-writer add, no lock and no lookup. Reading adds up the
//! counters of each name (one per queue, say) in the order the names were
//! first registered.

use std::sync::{Arc, Mutex};

use crate::counter::Counter;

/// A port's named counters.
#[derive(Debug, Default)]
pub struct Xstats {
    entries: Mutex<Vec<(String, Arc<Counter>)>>,
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

    /// Every name with the sum of its counters, in registration order.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let entries = self.lock();
        let mut out: Vec<(String, u64)> = Vec::new();
        for (name, c) in entries.iter() {
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => *v += c.get(),
                None => out.push((name.clone(), c.get())),
            }
        }
        out
    }

    /// The sum of the counters named `name` (`None` if there is none).
    pub fn get(&self, name: &str) -> Option<u64> {
        let entries = self.lock();
        let mut found = None;
        for (n, c) in entries.iter().filter(|(n, _)| n == name) {
            let _ = n;
            *found.get_or_insert(0) += c.get();
        }
        found
    }

    /// The counters named `name`, to read their sum often without the lock
    /// (a benchmark reading a driver's `device_cycles` between polls).
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
}
