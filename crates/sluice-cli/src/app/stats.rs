//! Live statistics: the main thread samples every port's shared counters
//! (`Port::counters()`, written by the forwarding lcores with plain adds)
//! and the per-stream drop counters once a period and prints the rates.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use sluice::port::PortCounters;

use super::io::lcore::StreamCounters;
use super::observe::census::CensusWatch;
use super::output::{emit, emit_json};

/// What the stats thread reads: each port's counters and, per stream, the
/// port its drops are counted on (its Tx port).
pub struct Sources<'a> {
    /// Per port.
    pub ports: Vec<Arc<PortCounters>>,
    /// Per stream, its Tx port.
    pub stream_tx_port: Vec<usize>,
    /// Per stream.
    pub streams: &'a [StreamCounters],
    /// Packets the application dropped before Tx (l3fwd's router drops),
    /// all ports: counted when the drain adds up the testers' frames.
    pub app_drops: Option<&'a (dyn Fn() -> u64 + Sync)>,
    /// The run's buffer census, counted each stats period.
    pub census: Option<&'a CensusWatch>,
}

/// One port's counters at one time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortSample {
    /// Packets received.
    pub rx: u64,
    /// Packets sent.
    pub tx: u64,
    /// Packets the Tx queues did not take (freed).
    pub drops: u64,
    /// Packets the device dropped for want of an Rx descriptor.
    pub rx_missed: u64,
    /// Rx refills that found the pool empty.
    pub rx_nombuf: u64,
    /// Frames the port's Rx dropped as errors (runts, oversize, ...).
    pub rx_errors: u64,
    /// Packets the port's Tx took but could not send.
    pub tx_errors: u64,
}

impl PortSample {
    /// Every packet this port dropped and counted: refused by its Tx queues,
    /// missed, and dropped as Rx or Tx errors.
    pub fn counted_drops(&self) -> u64 {
        self.drops + self.rx_missed + self.rx_errors + self.tx_errors
    }
}

impl Sources<'_> {
    /// Every port's counters now.
    pub fn sample(&self) -> Vec<PortSample> {
        let mut out: Vec<PortSample> = self
            .ports
            .iter()
            .map(|c| {
                let s = c.stats();
                PortSample {
                    rx: s.rx_packets,
                    tx: s.tx_packets,
                    drops: 0,
                    rx_missed: s.rx_missed,
                    rx_nombuf: s.rx_nombuf,
                    rx_errors: s.rx_errors,
                    tx_errors: s.tx_errors,
                }
            })
            .collect();
        for (s, &p) in self.streams.iter().zip(&self.stream_tx_port) {
            out[p].drops += s.drops.get();
        }
        out
    }

    /// The first port whose device failed, and why (see
    /// `PortCounters::fault`).
    pub fn fault(&self) -> Option<String> {
        self.ports
            .iter()
            .enumerate()
            .find_map(|(i, c)| c.fault().map(|f| format!("port {i}: {f}")))
    }

    /// Packets received and sent by every port (to see whether anything
    /// still moves).
    pub fn moved(&self) -> u64 {
        self.sample().iter().map(|s| s.rx + s.tx).sum()
    }
}

/// One port in a JSON stats line.
#[derive(Serialize)]
struct PortRates {
    port: usize,
    rx_mpps: f64,
    tx_mpps: f64,
    rx_packets: u64,
    tx_packets: u64,
    drops: u64,
    rx_missed: u64,
    rx_nombuf: u64,
}

/// A JSON stats line.
#[derive(Serialize)]
struct StatsLine {
    #[serde(rename = "type")]
    kind: &'static str,
    time_s: f64,
    ports: Vec<PortRates>,
}

/// Prints a stats line per period, with rates since the previous one.
pub struct Live {
    start: Instant,
    last_time: Instant,
    last: Vec<PortSample>,
    json: bool,
}

impl Live {
    /// Starts the clock with the counters as they are now.
    pub fn new(src: &Sources<'_>, json: bool) -> Live {
        let now = Instant::now();
        Live {
            start: now,
            last_time: now,
            last: src.sample(),
            json,
        }
    }

    /// When the run started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Prints one line: per port, Rx and Tx Mpps since the last line, and
    /// the drop, miss and no-buffer totals.
    pub fn line(&mut self, src: &Sources<'_>) {
        if let Some(census) = src.census {
            census.sample();
        }
        let now = Instant::now();
        let cur = src.sample();
        let secs = now.duration_since(self.last_time).as_secs_f64().max(1e-9);
        let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs / 1e6;
        let t = now.duration_since(self.start).as_secs_f64();
        let ports: Vec<PortRates> = cur
            .iter()
            .zip(&self.last)
            .enumerate()
            .map(|(i, (c, l))| PortRates {
                port: i,
                rx_mpps: rate(c.rx, l.rx),
                tx_mpps: rate(c.tx, l.tx),
                rx_packets: c.rx,
                tx_packets: c.tx,
                drops: c.drops,
                rx_missed: c.rx_missed,
                rx_nombuf: c.rx_nombuf,
            })
            .collect();
        if self.json {
            let line = StatsLine {
                kind: "stats",
                time_s: t,
                ports,
            };
            emit_json(&line, "sluice fwd", "stats");
        } else {
            let parts: Vec<String> = ports
                .iter()
                .map(|p| {
                    format!(
                        "p{} rx {:7.2} tx {:7.2} Mpps drop {} miss {} nombuf {}",
                        p.port, p.rx_mpps, p.tx_mpps, p.drops, p.rx_missed, p.rx_nombuf
                    )
                })
                .collect();
            emit(&format!("[{t:6.1} s] {}", parts.join(" | ")));
        }
        self.last = cur;
        self.last_time = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_counted_on_the_tx_port_of_each_stream() {
        let ports = vec![
            Arc::new(PortCounters::new(1, 1, false)),
            Arc::new(PortCounters::new(1, 1, false)),
        ];
        ports[0].rx[0].record_burst(10, 640);
        ports[1].tx[0].record_burst(7, 448);
        ports[0].rx[0].missed.add(2);
        ports[0].rx[0].errors.add(4);
        ports[0].tx[0].errors.add(5);
        let streams = [StreamCounters::default(), StreamCounters::default()];
        streams[0].drops.add(3);
        streams[1].drops.add(1);
        let src = Sources {
            ports,
            stream_tx_port: vec![1, 0],
            streams: &streams,
            app_drops: None,
            census: None,
        };
        let s = src.sample();
        assert_eq!(
            s[0],
            PortSample {
                rx: 10,
                tx: 0,
                drops: 1,
                rx_missed: 2,
                rx_nombuf: 0,
                rx_errors: 4,
                tx_errors: 5,
            }
        );
        assert_eq!(s[0].counted_drops(), 1 + 2 + 4 + 5);
        assert_eq!((s[1].tx, s[1].drops), (7, 3));
        assert_eq!(src.moved(), 17);
    }
}
