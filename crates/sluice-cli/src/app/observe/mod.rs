//! Watching a running command from outside: what it shows to telemetry,
//! Prometheus and `sluice stats`.
//!
//! - [`snapshot`]: the whole view of a running instance in one object
//!   (`/sluice/snapshot`), as `sluice stats` reads it.
//! - [`drops`]: every drop counter of a run by reason and port, the
//!   snapshot's `drops` and the summaries' `drops_by_reason`.
//! - [`Watched`]: the live sources of a run — the registry of its ports and
//!   pools, its lcores' live counters, its testers — read into that view.
//!   Everything in it is a shared handle on single-writer counters: reading
//!   it takes no lock an lcore needs.
//! - [`Observer`]: the telemetry socket and the metrics endpoint serving a
//!   [`Watched`] while the run lasts. Dropped before the ports stop, so no
//!   reader sees torn-down ports.
//! - [`census`]: where every buffer of the run's pool is, each stats period
//!   and in the summary.
//! - [`capture`]: the capture taps the lcores call and the server
//!   `sluice capture` talks to.

pub mod capture;
pub mod census;
pub mod drops;
pub mod snapshot;

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use sluice::mbuf::MbufPool;
use sluice::port::Port;
use sluice::tester::Tester;
use sluice_telemetry::prometheus::{MetricsServer, MetricsWriter, write_registry};
use sluice_telemetry::{Commands, Registry, Telemetry};

use super::io::lcore::LiveLcore;
use super::options::ObserveOptions;
use drops::DropSources;
use snapshot::{DropCount, LatencySummary, LcoreSnapshot, PoolCensus, PortSnapshot, Snapshot};

/// The live sources of one run, as its watchers read them.
pub struct Watched {
    /// The command running (`fwd`, `l3fwd`, `gen`, `demo`, ...).
    pub command: &'static str,
    /// The telemetry file prefix.
    pub file_prefix: String,
    /// When the ports started.
    pub started: Instant,
    /// Its ports and pools.
    pub registry: Arc<Registry>,
    /// Its forwarding lcores' live counters (those not started are left
    /// out).
    pub lcores: Arc<[LiveLcore]>,
    /// The testers its ports are cabled to, by name.
    pub testers: Vec<(String, Arc<Tester>)>,
    /// Its drop counters.
    pub drops: DropSources,
    /// Its pools and ports, for the buffer census.
    pub census: sluice::census::Census,
}

impl Watched {
    /// The sources of a run of `command` on `ports` and `pools`.
    pub fn new(
        command: &'static str,
        file_prefix: &str,
        ports: &[Port],
        pools: &[&MbufPool],
        lcores: Arc<[LiveLcore]>,
        testers: &[(String, Arc<Tester>)],
        drops: DropSources,
    ) -> Watched {
        let registry = Arc::new(Registry::new());
        let mut census = sluice::census::Census::new();
        for pool in pools {
            registry.add_pool(pool.mempool().name(), pool);
            census = census.pool(pool.mempool().name(), pool);
        }
        for p in ports {
            registry.add_port(p);
            census = census.port(p);
        }
        Watched {
            command,
            file_prefix: file_prefix.to_owned(),
            started: Instant::now(),
            registry,
            lcores,
            testers: testers.to_vec(),
            drops,
            census,
        }
    }

    /// Counts what `count` returns as buffers of `pool` in flight at
    /// `place` (the distributor's held packets), in the census.
    pub fn in_flight(
        mut self,
        pool: &str,
        place: &str,
        count: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Watched {
        self.census = self.census.in_flight(pool, place, count);
        self
    }

    /// Everything at once (`/sluice/snapshot`).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            pid: std::process::id(),
            command: self.command.to_owned(),
            file_prefix: self.file_prefix.clone(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            tsc_hz: sluice::tsc::tsc_hz(),
            ports: self.ports(),
            lcores: self.lcores(),
            drops: self.drops(),
            pools: self.census(),
            latency: self.latency(),
        }
    }

    /// Each port's counters.
    pub fn ports(&self) -> Vec<PortSnapshot> {
        self.registry
            .ports()
            .iter()
            .map(|p| {
                let s = p.counters.stats();
                PortSnapshot {
                    id: p.id,
                    name: p.name.clone(),
                    driver: p.driver.to_owned(),
                    ipackets: s.rx_packets,
                    opackets: s.tx_packets,
                    ibytes: s.rx_bytes,
                    obytes: s.tx_bytes,
                    imissed: s.rx_missed,
                    ierrors: s.rx_errors,
                    oerrors: s.tx_errors,
                    rx_nombuf: s.rx_nombuf,
                }
            })
            .collect()
    }

    /// Each started lcore's counters.
    pub fn lcores(&self) -> Vec<LcoreSnapshot> {
        self.lcores
            .iter()
            .enumerate()
            .filter(|(_, l)| l.started())
            .map(|(i, l)| {
                let c = l.read();
                LcoreSnapshot {
                    lcore: i,
                    cpu: l.cpu(),
                    busy_cycles: c.busy_cycles,
                    total_cycles: c.total_cycles,
                    packets: c.packets,
                    polls: c.polls,
                    idle_polls: c.idle_polls,
                }
            })
            .collect()
    }

    /// Every drop counter that is not zero, by reason and port.
    pub fn drops(&self) -> Vec<DropCount> {
        self.drops.table()
    }

    /// Where each pool's buffers are: free in its ring and the lcores'
    /// caches, posted in Rx rings, waiting in Tx rings, held by the
    /// application.
    pub fn census(&self) -> Vec<PoolCensus> {
        self.census
            .take()
            .into_iter()
            .map(|c| PoolCensus {
                name: c.name,
                size: c.size,
                in_ring: c.in_ring,
                in_caches: c.in_caches,
                rx_posted: c.rx_posted,
                tx_waiting: c.tx_waiting,
                in_flight: c.in_flight,
                held_by_app: c.held_by_app,
            })
            .collect()
    }

    /// One-way latency per tester port, of the frames checked so far.
    pub fn latency(&self) -> Vec<LatencySummary> {
        self.testers
            .iter()
            .flat_map(|(_, t)| t.latency())
            .map(|l| super::latency::summary_of(&l))
            .collect()
    }

    /// Per lcore: its share of busy cycles and cycles per packet
    /// (`/sluice/lcores`).
    pub fn lcore_shares(&self) -> Value {
        let rows: Vec<Value> = self
            .lcores()
            .iter()
            .map(|l| {
                json!({
                    "lcore": l.lcore,
                    "cpu": l.cpu,
                    "busy_share": ratio(l.busy_cycles, l.total_cycles),
                    "cycles_per_packet": ratio(l.busy_cycles, l.packets),
                    "busy_cycles": l.busy_cycles,
                    "total_cycles": l.total_cycles,
                    "packets": l.packets,
                    "polls": l.polls,
                    "idle_polls": l.idle_polls,
                })
            })
            .collect();
        Value::Array(rows)
    }

    /// Each tester's running report (`/sluice/tester`), by name.
    pub fn tester_reports(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (name, t) in &self.testers {
            let r = t.report();
            out.insert(
                name.clone(),
                json!({
                    "sent": r.sent,
                    "received": r.received,
                    "lost": r.lost,
                    "reordered": r.reordered,
                    "duplicates": r.duplicates,
                    "corrupt": r.corrupt,
                    "foreign": r.foreign,
                    "bytes_sent": r.bytes_sent,
                    "bytes_received": r.bytes_received,
                    "short_buffers": r.short_buffers,
                }),
            );
        }
        Value::Object(out)
    }

    /// The Prometheus exposition: the registry's ports and pools, then the
    /// lcores, drops and the census (`sluice_lcore_*_total{lcore}`,
    /// `sluice_drops_total{reason,port}`,
    /// `sluice_pool_census_buffers{pool,place}`).
    pub fn render_metrics(&self) -> String {
        let mut w = MetricsWriter::new();
        write_registry(&self.registry, &mut w);
        for l in self.lcores() {
            let id = l.lcore.to_string();
            let labels = [("lcore", id.as_str())];
            w.counter(
                "sluice_lcore_busy_cycles_total",
                "TSC ticks an lcore spent in polls that received packets.",
                &labels,
                l.busy_cycles,
            );
            w.counter(
                "sluice_lcore_cycles_total",
                "TSC ticks since an lcore started polling.",
                &labels,
                l.total_cycles,
            );
            w.counter(
                "sluice_lcore_packets_total",
                "Packets an lcore received in its busy polls.",
                &labels,
                l.packets,
            );
            w.counter(
                "sluice_lcore_polls_total",
                "Polls of an lcore.",
                &labels,
                l.polls,
            );
            w.counter(
                "sluice_lcore_idle_polls_total",
                "Polls of an lcore that received nothing.",
                &labels,
                l.idle_polls,
            );
        }
        for d in self.drops() {
            let port = d.port.map(|p| p.to_string()).unwrap_or_default();
            w.counter(
                "sluice_drops_total",
                "Packets dropped, by reason and port (empty: the application's).",
                &[("reason", d.reason.as_str()), ("port", port.as_str())],
                d.packets,
            );
        }
        for c in self.census() {
            let sum2 = |v: &[(usize, u64)]| v.iter().map(|e| e.1).sum::<u64>();
            let sum3 = |v: &[(u16, u16, u64)]| v.iter().map(|e| e.2).sum::<u64>();
            for (place, n) in [
                ("ring", c.in_ring),
                ("caches", sum2(&c.in_caches)),
                ("rx_posted", sum3(&c.rx_posted)),
                ("tx_waiting", sum3(&c.tx_waiting)),
                ("in_flight", c.in_flight.iter().map(|e| e.1).sum::<u64>()),
                ("application", c.held_by_app),
            ] {
                w.gauge(
                    "sluice_pool_census_buffers",
                    "Buffers of a pool by where they are: free in its ring or the lcore caches, \
                     posted in Rx rings, waiting in Tx rings, in flight, held by the application.",
                    &[("pool", c.name.as_str()), ("place", place)],
                    n,
                );
            }
        }
        let testers: Vec<Arc<Tester>> = self.testers.iter().map(|(_, t)| Arc::clone(t)).collect();
        for l in super::latency::all_ports(&testers) {
            let port = l.port.to_string();
            let h = &l.histogram;
            w.histogram(
                "sluice_tester_latency_seconds",
                "One-way latency of the tester's frames by the port that sent them. Bucket \
                 counts are exact to the recording histogram's precision (3 significant \
                 digits); the sum is approximated as the mean times the count.",
                &[("port", port.as_str())],
                &latency_buckets(h),
                h.mean() * h.len() as f64 / 1e9,
                h.len(),
            );
        }
        w.gauge(
            "sluice_tsc_hz",
            "TSC ticks per second (lcore cycles are TSC ticks).",
            &[],
            sluice::tsc::tsc_hz(),
        );
        w.render()
    }
}

/// Upper bounds of the latency histogram's buckets in nanoseconds: 1 us to
/// 1 s on a 1-2-5 scale.
const LATENCY_BOUNDS_NS: [u64; 19] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
];

/// The cumulative Prometheus buckets of a latency histogram recorded in
/// nanoseconds: `(bound in seconds, values at or below it)`, each count to
/// the histogram's precision (a value in the same recording bucket as a
/// bound counts as at or below it).
fn latency_buckets(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, u64)> {
    LATENCY_BOUNDS_NS
        .iter()
        .map(|&ns| (ns as f64 / 1e9, h.count_between(0, ns).min(h.len())))
        .collect()
}

/// `a / b`, or `None` when `b` is 0.
fn ratio(a: u64, b: u64) -> Option<f64> {
    (b != 0).then(|| a as f64 / b as f64)
}

/// The telemetry socket and the metrics endpoint of a run, while it lasts
/// (dropping it stops both and removes the socket).
pub struct Observer {
    telemetry: Option<Telemetry>,
    /// Served until dropped.
    _metrics: Option<MetricsServer>,
}

impl Observer {
    /// Serves `watched` as `options` say. An address or prefix that cannot
    /// be served is an error naming it (the run has not started
    /// forwarding).
    pub fn start(options: &ObserveOptions, watched: Watched) -> Result<Observer, String> {
        let watched = Arc::new(watched);
        let telemetry = if options.no_telemetry {
            None
        } else {
            let commands = commands(&watched);
            Some(
                Telemetry::serve(&options.file_prefix, commands)
                    .map_err(|e| format!("telemetry: {e}"))?,
            )
        };
        let metrics = match options.metrics {
            None => None,
            Some(addr) => {
                let shown = Arc::clone(&watched);
                let server = MetricsServer::serve(addr, Arc::new(move || shown.render_metrics()))
                    .map_err(|e| format!("--metrics {addr}: {e}"))?;
                eprintln!("sluice: metrics at http://{}/metrics", server.local_addr());
                Some(server)
            }
        };
        Ok(Observer {
            telemetry,
            _metrics: metrics,
        })
    }

    /// The telemetry socket's path, when one is served.
    pub fn telemetry_path(&self) -> Option<&std::path::Path> {
        self.telemetry.as_ref().map(Telemetry::path)
    }
}

/// The telemetry commands of `watched`: DPDK's `/ethdev/*` and `/mempool/*`
/// from its registry, and Sluice's own `/sluice/*`.
fn commands(watched: &Arc<Watched>) -> Commands {
    let mut commands = Commands::with_registry(Arc::clone(&watched.registry));
    let mut add = |name: &str, help: &str, read: fn(&Watched) -> Value| {
        let shown = Arc::clone(watched);
        commands.register(name, help, move |_params| Ok(read(&shown)));
    };
    add(
        "/sluice/snapshot",
        "Returns everything at once: ports, lcores, drops, pool census, latency. Takes no \
         parameters",
        |w| to_value(&w.snapshot()),
    );
    add(
        "/sluice/lcores",
        "Returns each forwarding lcore's busy share, cycles per packet and counters. Takes no \
         parameters",
        Watched::lcore_shares,
    );
    add(
        "/sluice/drops",
        "Returns packets dropped by reason and port. Takes no parameters",
        |w| to_value(&w.drops()),
    );
    add(
        "/sluice/census",
        "Returns where each mempool's buffers are. Takes no parameters",
        |w| to_value(&w.census()),
    );
    add(
        "/sluice/tester",
        "Returns each built-in tester's running report. Takes no parameters",
        Watched::tester_reports,
    );
    add(
        "/sluice/latency",
        "Returns one-way latency per tester port. Takes no parameters",
        |w| to_value(&w.latency()),
    );
    commands
}

/// `value` as JSON (these types always serialize).
fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_cumulative_counts_at_or_below_each_bound() {
        use sluice::tester::latency::{LATENCY_MAX_NS, LATENCY_SIGFIG};

        // Bounded as the testers' histograms are.
        let mut h =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, LATENCY_MAX_NS, LATENCY_SIGFIG)
                .unwrap();
        for ns in [1_500, 1_500, 1_500, 30_000, 2_000_000_000] {
            h.record(ns).unwrap();
        }
        let buckets = latency_buckets(&h);
        assert_eq!(buckets.len(), LATENCY_BOUNDS_NS.len());
        assert_eq!(buckets[0], (1e-6, 0));
        assert_eq!(buckets[1], (2e-6, 3));
        assert_eq!(buckets[4], (20e-6, 3));
        assert_eq!(buckets[5], (50e-6, 4));
        // The 2 s frame is above every bound: only in +Inf (the count).
        assert_eq!(buckets.last(), Some(&(1.0, 4)));
        let mut w = MetricsWriter::new();
        w.histogram(
            "sluice_tester_latency_seconds",
            "Latency.",
            &[("port", "0")],
            &buckets,
            h.mean() * h.len() as f64 / 1e9,
            h.len(),
        );
        let text = w.render();
        assert!(
            text.contains("sluice_tester_latency_seconds_bucket{port=\"0\",le=\"+Inf\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("sluice_tester_latency_seconds_count{port=\"0\"} 5"),
            "{text}"
        );
    }
}
