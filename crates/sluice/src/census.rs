//! Where every buffer of a pool is: free in its ring, free in each lcore's
//! cache, posted in each Rx ring, waiting in each Tx ring, in flight in a
//! software ring or the distributor, and the rest, held by the application
//! (in its bursts, being processed).
//!
//! A [`Census`] names what to count — pools, ports, and functions counting
//! what software rings hold — and [`take`](Census::take) counts, from any
//! thread, while the lcores forward. Nothing it reads is written under a
//! lock, and it takes none an lcore takes: the pool's ring and cache
//! lengths ([`Mempool::free_counts`](crate::mempool::Mempool::free_counts)),
//! the queues' gauges ([`RxQueueStats::posted`], [`TxQueueStats::waiting`],
//! one store per burst by the polling thread) and the in-flight functions
//! given.
//!
//! # Attribution
//! A port's Rx queue counts in the pool it receives into
//! ([`PortConfig::rx_pool_of`](crate::port::PortConfig::rx_pool_of)). Its
//! Tx queues count in the port's pool too (that of Rx queue 0): a Tx queue
//! holds whatever buffers it was given, and an application that forwards
//! between ports of one pool — the common case — gives it that pool's. A
//! port without a pool counts in the census's pool when it has just one,
//! and in none otherwise.
//!
//! # A snapshot of moving counts
//! The counts are read one after another while buffers move between the
//! places counted, so a buffer may be seen in two places or in none; each
//! gauge is as of its queue's last burst. `held_by_app` is what the other
//! places leave of the pool's size, at least 0: it saturates when they
//! count more than the pool has. When nothing moves (the ports stopped, or
//! the lcores between bursts) the census is exact.
//!
//! What the drivers count: `soft` posts its armed Rx descriptors (and the
//! buffers of dropped frames it keeps for reuse) — with `rxbuf=frag`, whose
//! descriptors hold fragments, the headers it has taken for the next
//! deliveries — and counts the Tx packets not yet freed after completion;
//! `pair` counts what waits on each link as
//! the receiving queue's posted buffers; `afxdp` counts the frames the
//! kernel holds on each side (fill ring, Rx ring; Tx ring, completion
//! ring); `tap` its one spare buffer; `null`, `pcap` and `afpacket` hold no
//! buffer between bursts.
//!
//! ```
//! use sluice::census::Census;
//! use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
//! use sluice::port::PortConfig;
//!
//! let pool = MbufPool::new(MbufPoolConfig { size: 1023, ..Default::default() })?;
//! let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
//! let mut a = sluice::driver::open("soft:tester=census-doc,flows=8", config.clone())?;
//! let mut b = sluice::driver::open("soft:tester=census-doc", config.port_id(1))?;
//! a.start()?;
//! b.start()?;
//! let census = Census::new().pool("rx", &pool).port(&a).port(&b);
//!
//! let mut burst: Burst<32> = Burst::new();
//! for _ in 0..20 {
//!     a.rx_queue(0)?.rx_burst(&mut burst);
//!     b.tx_queue(0)?.tx_burst(&mut burst);
//!     burst.clear();
//! }
//! b.rx_queue(0)?.rx_burst(&mut burst);
//! let mid_run = &census.take()[0];
//! // Every buffer is somewhere: the packets in `burst` are the
//! // application's.
//! assert_eq!(mid_run.held_by_app, burst.len() as u64);
//! let out: u64 = mid_run.out_of_pool().iter().map(|place| place.1).sum();
//! assert_eq!(mid_run.free() + out, 1023);
//! println!("{mid_run}");
//!
//! burst.clear();
//! a.stop();
//! b.stop();
//! let stopped = &census.take()[0];
//! assert_eq!(stopped.free(), 1023);
//! assert_eq!(stopped.held_by_app, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;

use crate::mbuf::MbufPool;
use crate::port::{Port, PortCounters};

#[cfg(doc)]
use crate::port::{RxQueueStats, TxQueueStats};

/// What to count: pools, ports and software rings. Built once, then
/// [`take`](Self::take)n as often as wanted from any thread (it is `Send`
/// and `Sync`).
#[derive(Default)]
pub struct Census {
    pools: Vec<(String, MbufPool)>,
    ports: Vec<PortEntry>,
    in_flight: Vec<FlightEntry>,
}

/// A port's gauges and the pools they count in.
struct PortEntry {
    id: u16,
    counters: Arc<PortCounters>,
    /// Per Rx queue, the pool it receives into.
    rx_pools: Vec<Option<MbufPool>>,
    /// The pool its Tx queues count in.
    tx_pool: Option<MbufPool>,
}

/// A software ring or stage holding buffers of a pool.
struct FlightEntry {
    pool: String,
    place: String,
    count: Box<dyn Fn() -> u64 + Send + Sync>,
}

/// Where one pool's buffers were, at one count. The fields other than
/// `size` add up to `size` (`held_by_app` is what the rest leaves).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolCensus {
    /// The pool's name in the census.
    pub name: String,
    /// Buffers in the pool.
    pub size: u64,
    /// Free in the pool's ring.
    pub in_ring: u64,
    /// Free in each lcore's cache, `(lcore id, buffers)`, caches holding
    /// none left out.
    pub in_caches: Vec<(usize, u64)>,
    /// Posted in Rx rings, `(port, queue, buffers)`, every Rx queue of the
    /// ports counted in this pool.
    pub rx_posted: Vec<(u16, u16, u64)>,
    /// Waiting in Tx rings for the device or completion, `(port, queue,
    /// buffers)`.
    pub tx_waiting: Vec<(u16, u16, u64)>,
    /// In flight in software rings or the distributor, `(where, buffers)`.
    pub in_flight: Vec<(String, u64)>,
    /// The rest: held by the application (in its bursts, being processed).
    /// At least 0: when the other counts, read while buffers move, add up
    /// to more than the pool has, it is 0.
    pub held_by_app: u64,
}

impl PoolCensus {
    /// Free buffers: in the ring and the caches.
    pub fn free(&self) -> u64 {
        self.in_ring + self.in_caches.iter().map(|c| c.1).sum::<u64>()
    }

    /// Buffers out of the pool, by place (`"rx p0q1"`, `"tx p1q0"`, the
    /// in-flight places, `"application"`), places holding none left out.
    pub fn out_of_pool(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for &(p, q, n) in &self.rx_posted {
            out.push((format!("rx p{p}q{q}"), n));
        }
        for &(p, q, n) in &self.tx_waiting {
            out.push((format!("tx p{p}q{q}"), n));
        }
        out.extend(self.in_flight.iter().cloned());
        out.push(("application".to_string(), self.held_by_app));
        out.retain(|e| e.1 != 0);
        out
    }
}

impl Census {
    /// An empty census.
    pub fn new() -> Census {
        Census::default()
    }

    /// Counts `pool` under `name`.
    pub fn pool(mut self, name: &str, pool: &MbufPool) -> Census {
        self.pools.push((name.to_string(), pool.clone()));
        self
    }

    /// Counts `port`'s queues: each Rx queue's posted buffers in its pool,
    /// each Tx queue's waiting ones in the port's pool (see the module docs).
    /// The census keeps the port's counters, not the port.
    pub fn port(mut self, port: &Port) -> Census {
        let config = port.config();
        let counters = port.counters();
        let rx_pools = (0..counters.rx.len())
            .map(|q| config.rx_pool_of(q).cloned())
            .collect();
        let tx_pool = config.rx_pool_of(0).or(config.rx_pool.as_ref()).cloned();
        self.ports.push(PortEntry {
            id: port.id(),
            counters,
            rx_pools,
            tx_pool,
        });
        self
    }

    /// Counts what `count` returns as buffers of the pool named `pool` in
    /// flight at `place` (a software ring, the distributor). `count` is
    /// called at each [`take`](Self::take), on the taking thread: it must
    /// only read (a ring's length, a gauge).
    pub fn in_flight(
        mut self,
        pool: &str,
        place: &str,
        count: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Census {
        self.in_flight.push(FlightEntry {
            pool: pool.to_string(),
            place: place.to_string(),
            count: Box::new(count),
        });
        self
    }

    /// The index of the census pool `pool` counts in (see the module docs).
    fn pool_index(&self, pool: Option<&MbufPool>) -> Option<usize> {
        match pool {
            Some(p) => self.pools.iter().position(|(_, c)| same_pool(c, p)),
            None => (self.pools.len() == 1).then_some(0),
        }
    }

    /// Counts every pool, in the order they were added.
    pub fn take(&self) -> Vec<PoolCensus> {
        let mut out: Vec<PoolCensus> = self
            .pools
            .iter()
            .map(|(name, pool)| {
                let free = pool.mempool().free_counts();
                PoolCensus {
                    name: name.clone(),
                    size: pool.size() as u64,
                    in_ring: free.in_ring as u64,
                    in_caches: free
                        .caches
                        .iter()
                        .map(|&(lcore, n)| (lcore, n as u64))
                        .collect(),
                    ..PoolCensus::default()
                }
            })
            .collect();
        for port in &self.ports {
            for (q, stats) in port.counters.rx.iter().enumerate() {
                let pool = port.rx_pools.get(q).and_then(Option::as_ref);
                if let Some(i) = self.pool_index(pool) {
                    out[i]
                        .rx_posted
                        .push((port.id, q as u16, stats.posted.get()));
                }
            }
            if let Some(i) = self.pool_index(port.tx_pool.as_ref()) {
                for (q, stats) in port.counters.tx.iter().enumerate() {
                    out[i]
                        .tx_waiting
                        .push((port.id, q as u16, stats.waiting.get()));
                }
            }
        }
        for f in &self.in_flight {
            if let Some(c) = out.iter_mut().find(|c| c.name == f.pool) {
                c.in_flight.push((f.place.clone(), (f.count)()));
            }
        }
        for c in &mut out {
            let counted = c.free()
                + c.rx_posted.iter().map(|r| r.2).sum::<u64>()
                + c.tx_waiting.iter().map(|t| t.2).sum::<u64>()
                + c.in_flight.iter().map(|f| f.1).sum::<u64>();
            c.held_by_app = c.size.saturating_sub(counted);
        }
        out
    }
}

impl fmt::Debug for Census {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Census")
            .field(
                "pools",
                &self.pools.iter().map(|p| &p.0).collect::<Vec<_>>(),
            )
            .field(
                "ports",
                &self.ports.iter().map(|p| p.id).collect::<Vec<_>>(),
            )
            .field(
                "in_flight",
                &self
                    .in_flight
                    .iter()
                    .map(|e| (&e.pool, &e.place))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Whether `a` and `b` are handles on one pool.
fn same_pool(a: &MbufPool, b: &MbufPool) -> bool {
    a.mempool().region().base() == b.mempool().region().base()
}

/// The places of one kind that hold some buffers, as `name n` pairs.
fn places<T>(items: &[T], name: impl Fn(&T) -> (String, u64)) -> String {
    items
        .iter()
        .map(name)
        .filter(|(_, n)| *n != 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for PoolCensus {
    /// A few lines: the pool and its size, then each kind of place with its
    /// total and, in brackets, the places holding some.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sum3 = |v: &[(u16, u16, u64)]| v.iter().map(|e| e.2).sum::<u64>();
        let caches = places(&self.in_caches, |&(l, n)| (format!("lcore {l}"), n));
        let rx = places(&self.rx_posted, |&(p, q, n)| (format!("p{p}q{q}"), n));
        let tx = places(&self.tx_waiting, |&(p, q, n)| (format!("p{p}q{q}"), n));
        let flight = places(&self.in_flight, |(w, n)| (w.clone(), *n));
        let detail = |s: String| {
            if s.is_empty() {
                String::new()
            } else {
                format!(" ({s})")
            }
        };
        writeln!(f, "pool {}: {} buffers", self.name, self.size)?;
        writeln!(f, "  in ring      {}", self.in_ring)?;
        writeln!(
            f,
            "  in caches    {}{}",
            self.in_caches.iter().map(|c| c.1).sum::<u64>(),
            detail(caches)
        )?;
        writeln!(f, "  rx posted    {}{}", sum3(&self.rx_posted), detail(rx))?;
        writeln!(f, "  tx waiting   {}{}", sum3(&self.tx_waiting), detail(tx))?;
        writeln!(
            f,
            "  in flight    {}{}",
            self.in_flight.iter().map(|e| e.1).sum::<u64>(),
            detail(flight)
        )?;
        write!(f, "  held by app  {}", self.held_by_app)
    }
}

// The census is read by a telemetry or stats thread while the lcores run.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Census>();
};

#[cfg(all(test, not(loom)))]
mod tests;
