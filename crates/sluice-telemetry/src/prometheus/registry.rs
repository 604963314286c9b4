//! The metrics of a [`Registry`]: its ports, their queues and named
//! counters, and its pools.
//!
//! Every name starts with `sluice_`; counters end in `_total`; sizes are
//! in bytes. A port is labelled `port` (its id), a queue `queue`, a pool
//! `pool`; a port's name, driver and MAC address are labels of
//! `sluice_port_info` only, to be joined on `port` where wanted:
//!
//! ```text
//! rate(sluice_port_rx_packets_total[1m]) * on (port) group_left (name) sluice_port_info
//! ```
//!
//! | family | type | labels |
//! |--------|------|--------|
//! | `sluice_port_info` (1) | gauge | `port`, `name`, `driver`, `mac` |
//! | `sluice_port_rx_queues`, `sluice_port_tx_queues`, `sluice_port_mtu_bytes` | gauge | `port` |
//! | `sluice_port_{rx,tx}_{packets,bytes,errors}_total` | counter | `port` |
//! | `sluice_port_rx_missed_packets_total`, `sluice_port_rx_nombuf_total` | counter | `port` |
//! | `sluice_port_{rx,tx}_queue_{packets,bytes,errors}_total` | counter | `port`, `queue` |
//! | `sluice_port_rx_queue_missed_packets_total`, `sluice_port_rx_queue_nombuf_total` | counter | `port`, `queue` |
//! | `sluice_port_xstat_total` | counter | `port`, `name` |
//! | `sluice_port_{rx,tx}_queue_burst_packets` (2) | histogram | `port`, `queue` |
//! | `sluice_pool_buffers`, `sluice_pool_{ring,cache}_free_buffers`, `sluice_pool_in_use_buffers` | gauge | `pool` |
//! | `sluice_pool_data_room_bytes` | gauge | `pool` |
//! | `sluice_pool_cache_{hits,misses,refills,flushes}_total`, `sluice_pool_get_failures_total` | counter | `pool` |
//!
//! (1) The value is 1. (2) Only for ports that keep burst statistics
//! ([`PortConfig::burst_stats`](sluice::port::PortConfig::burst_stats)).
//!
//! A port's counters appear twice: per port (`sluice_port_rx_packets_total`)
//! and per queue (`sluice_port_rx_queue_packets_total`), two families, so
//! neither double counts when summed. The driver's named counters
//! (DPDK's xstats) are one family, `sluice_port_xstat_total`, labelled
//! with the counter's `name`.

use crate::registry::Registry;

use super::MetricsWriter;

/// Writes the metrics of every port and pool in `registry` to `w`.
///
/// Each queue counter is read once, so a port's figures are the sums of
/// its queues' as written. Reading takes no lock an lcore needs: the
/// counters are single-writer cells, the pools' counts are loads, and the
/// lock of a port's named counters is taken by its driver only to
/// register one, while the port is set up.
pub fn write_registry(registry: &Registry, w: &mut MetricsWriter) {
    write_ports(registry, w);
    write_pools(registry, w);
}

/// An exposition of `registry` alone.
pub fn render_registry(registry: &Registry) -> String {
    let mut w = MetricsWriter::new();
    write_registry(registry, &mut w);
    w.render()
}

fn write_ports(registry: &Registry, w: &mut MetricsWriter) {
    for port in registry.ports() {
        let id = port.id.to_string();
        let at = [("port", id.as_str())];
        let mac = port.mac.to_string();
        w.gauge(
            "sluice_port_info",
            "A port's name, driver and MAC address (the value is 1).",
            &[
                ("port", &id),
                ("name", &port.name),
                ("driver", port.driver),
                ("mac", &mac),
            ],
            1u64,
        );
        w.gauge(
            "sluice_port_rx_queues",
            "Rx queues configured.",
            &at,
            port.nb_rx_queues,
        );
        w.gauge(
            "sluice_port_tx_queues",
            "Tx queues configured.",
            &at,
            port.nb_tx_queues,
        );
        w.gauge(
            "sluice_port_mtu_bytes",
            "The MTU configured.",
            &at,
            port.mtu,
        );

        // Each queue counter is read once; the port's figures are their sums.
        let rx: Vec<[u64; 5]> = port
            .counters
            .rx
            .iter()
            .map(|q| {
                [
                    q.packets.get(),
                    q.bytes.get(),
                    q.missed.get(),
                    q.nombuf.get(),
                    q.errors.get(),
                ]
            })
            .collect();
        let tx: Vec<[u64; 3]> = port
            .counters
            .tx
            .iter()
            .map(|q| [q.packets.get(), q.bytes.get(), q.errors.get()])
            .collect();
        let rx_total = sum(&rx);
        let tx_total = sum(&tx);
        for (family, total) in RX_PORT.iter().zip(rx_total) {
            w.counter(family.0, family.1, &at, total);
        }
        for (family, total) in TX_PORT.iter().zip(tx_total) {
            w.counter(family.0, family.1, &at, total);
        }
        write_queues(w, &id, &rx, &RX_QUEUE);
        write_queues(w, &id, &tx, &TX_QUEUE);
        let rx_bursts = port.counters.rx.iter().map(|q| q.bursts.as_ref());
        let tx_bursts = port.counters.tx.iter().map(|q| q.bursts.as_ref());
        for (q, bursts) in rx_bursts.enumerate() {
            if let Some(histogram) = bursts {
                write_bursts(w, RX_BURSTS, &id, q, &histogram.counts());
            }
        }
        for (q, bursts) in tx_bursts.enumerate() {
            if let Some(histogram) = bursts {
                write_bursts(w, TX_BURSTS, &id, q, &histogram.counts());
            }
        }

        for (name, value) in port.counters.xstats.snapshot() {
            w.counter(
                "sluice_port_xstat_total",
                "A driver's named counter (DPDK's xstats), by name.",
                &[("port", &id), ("name", &name)],
                value,
            );
        }
    }
}

/// The per-port Rx counters (name, help), in the order the queues' values
/// are read: packets, bytes, missed, nombuf, errors.
const RX_PORT: [(&str, &str); 5] = [
    (
        "sluice_port_rx_packets_total",
        "Packets received (DPDK's ipackets).",
    ),
    ("sluice_port_rx_bytes_total", "Bytes received (ibytes)."),
    (
        "sluice_port_rx_missed_packets_total",
        "Packets the device dropped for want of a free Rx descriptor (imissed).",
    ),
    (
        "sluice_port_rx_nombuf_total",
        "Rx refills that found the mbuf pool empty (rx_nombuf).",
    ),
    (
        "sluice_port_rx_errors_total",
        "Packets received with errors and dropped (ierrors).",
    ),
];

/// The per-queue Rx counters, in the same order.
const RX_QUEUE: [(&str, &str); 5] = [
    (
        "sluice_port_rx_queue_packets_total",
        "Packets received on an Rx queue.",
    ),
    (
        "sluice_port_rx_queue_bytes_total",
        "Bytes received on an Rx queue.",
    ),
    (
        "sluice_port_rx_queue_missed_packets_total",
        "Packets the device dropped for want of a free descriptor in an Rx queue.",
    ),
    (
        "sluice_port_rx_queue_nombuf_total",
        "Refills of an Rx queue that found the mbuf pool empty.",
    ),
    (
        "sluice_port_rx_queue_errors_total",
        "Packets received with errors on an Rx queue and dropped.",
    ),
];

/// The per-port Tx counters: packets, bytes, errors.
const TX_PORT: [(&str, &str); 3] = [
    ("sluice_port_tx_packets_total", "Packets sent (opackets)."),
    ("sluice_port_tx_bytes_total", "Bytes sent (obytes)."),
    (
        "sluice_port_tx_errors_total",
        "Packets that could not be sent and were dropped (oerrors).",
    ),
];

/// The per-queue Tx counters, in the same order.
const TX_QUEUE: [(&str, &str); 3] = [
    (
        "sluice_port_tx_queue_packets_total",
        "Packets sent on a Tx queue.",
    ),
    (
        "sluice_port_tx_queue_bytes_total",
        "Bytes sent on a Tx queue.",
    ),
    (
        "sluice_port_tx_queue_errors_total",
        "Packets that could not be sent on a Tx queue and were dropped.",
    ),
];

/// Writes each queue's values as `families`, labelled `port` and `queue`.
fn write_queues<const N: usize>(
    w: &mut MetricsWriter,
    port: &str,
    queues: &[[u64; N]],
    families: &[(&str, &str); N],
) {
    for (q, values) in queues.iter().enumerate() {
        let queue = q.to_string();
        let at = [("port", port), ("queue", queue.as_str())];
        for (&(name, help), &value) in families.iter().zip(values) {
            w.counter(name, help, &at, value);
        }
    }
}

/// The Rx burst-size histogram (name, help).
const RX_BURSTS: (&str, &str) = (
    "sluice_port_rx_queue_burst_packets",
    "Packets per rx_burst call on an Rx queue (bursts of the histogram's \
     capacity or more count as that capacity).",
);

/// The Tx burst-size histogram (name, help).
const TX_BURSTS: (&str, &str) = (
    "sluice_port_tx_queue_burst_packets",
    "Packets accepted per tx_burst call on a Tx queue (bursts of the \
     histogram's capacity or more count as that capacity).",
);

/// Writes a queue's burst sizes (`counts[n]`: bursts of `n` packets, the
/// last entry those of its index or more) as a histogram. Its buckets are
/// 0, the powers of two below the capacity and one less than the
/// capacity, so `+Inf` less the last bucket is the bursts that filled the
/// capacity (full bursts).
fn write_bursts(
    w: &mut MetricsWriter,
    (name, help): (&str, &str),
    port: &str,
    queue: usize,
    counts: &[u64],
) {
    let Some(capacity) = counts.len().checked_sub(1) else {
        return;
    };
    let mut bounds = vec![0];
    bounds.extend(
        (0..usize::BITS)
            .map(|b| 1usize << b)
            .take_while(|&b| b < capacity),
    );
    if capacity > 1 && bounds.last() != Some(&(capacity - 1)) {
        bounds.push(capacity - 1);
    }
    let mut buckets = Vec::with_capacity(bounds.len());
    let mut below = 0u64;
    let mut next = 0;
    for bound in bounds {
        below += counts[next..=bound].iter().sum::<u64>();
        next = bound + 1;
        buckets.push((bound as f64, below));
    }
    let count = counts.iter().sum();
    let sum: u64 = counts.iter().enumerate().map(|(n, c)| n as u64 * c).sum();
    let queue = queue.to_string();
    w.histogram(
        name,
        help,
        &[("port", port), ("queue", &queue)],
        &buckets,
        sum as f64,
        count,
    );
}

/// The queues' values added up, counter by counter.
fn sum<const N: usize>(queues: &[[u64; N]]) -> [u64; N] {
    let mut total = [0u64; N];
    for q in queues {
        for (t, v) in total.iter_mut().zip(q) {
            *t = t.wrapping_add(*v);
        }
    }
    total
}

fn write_pools(registry: &Registry, w: &mut MetricsWriter) {
    for entry in registry.pools() {
        let at = [("pool", entry.name.as_str())];
        let s = entry.pool.stats();
        let gauges: [(&str, &str, u64); 5] = [
            ("sluice_pool_buffers", "Buffers in the pool.", s.size.into()),
            (
                "sluice_pool_ring_free_buffers",
                "Free buffers in the pool's ring.",
                s.in_ring.into(),
            ),
            (
                "sluice_pool_cache_free_buffers",
                "Free buffers in the pool's per-lcore caches.",
                s.cached.into(),
            ),
            (
                "sluice_pool_in_use_buffers",
                "Buffers taken from the pool and not yet given back.",
                s.in_use.into(),
            ),
            (
                "sluice_pool_data_room_bytes",
                "Room for packet data in each buffer after its headroom.",
                entry.pool.data_room().into(),
            ),
        ];
        for (name, help, value) in gauges {
            w.gauge(name, help, &at, value);
        }
        let counters: [(&str, &str, u64); 5] = [
            (
                "sluice_pool_cache_hits_total",
                "Gets an lcore cache served alone.",
                s.cache_hits,
            ),
            (
                "sluice_pool_cache_misses_total",
                "Gets by an lcore that needed the pool's ring.",
                s.cache_misses,
            ),
            (
                "sluice_pool_cache_refills_total",
                "Refills of an lcore cache from the pool's ring.",
                s.ring_refills,
            ),
            (
                "sluice_pool_cache_flushes_total",
                "Flushes of an lcore cache to the pool's ring.",
                s.flushes,
            ),
            (
                "sluice_pool_get_failures_total",
                "Gets that failed for want of a free buffer.",
                s.get_failures,
            ),
        ];
        for (name, help, value) in counters {
            w.counter(name, help, &at, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_sizes_become_cumulative_buckets() {
        let mut counts = vec![0u64; 33];
        counts[0] = 5; // empty polls
        counts[1] = 1;
        counts[3] = 2;
        counts[31] = 1;
        counts[32] = 4; // full bursts (or larger)
        let mut w = MetricsWriter::new();
        write_bursts(&mut w, RX_BURSTS, "0", 1, &counts);
        let text = w.render();
        let buckets: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("sluice_port_rx_queue_burst_packets_bucket"))
            .map(|l| l.split_once("le=").unwrap().1)
            .collect();
        assert_eq!(
            buckets,
            [
                "\"0\"} 5",
                "\"1\"} 6",
                "\"2\"} 6",
                "\"4\"} 8",
                "\"8\"} 8",
                "\"16\"} 8",
                "\"31\"} 9",
                "\"+Inf\"} 13",
            ]
        );
        assert!(
            text.contains("sluice_port_rx_queue_burst_packets_sum{port=\"0\",queue=\"1\"} 166\n")
        );
        assert!(
            text.contains("sluice_port_rx_queue_burst_packets_count{port=\"0\",queue=\"1\"} 13\n")
        );
    }

    #[test]
    fn tiny_histograms_keep_their_buckets_rising() {
        for capacity in 0..=5 {
            let counts = vec![1u64; capacity + 1];
            let mut w = MetricsWriter::new();
            // Would stop a debug build on buckets out of order.
            write_bursts(&mut w, TX_BURSTS, "0", 0, &counts);
            let text = w.render();
            assert!(
                text.contains(&format!("le=\"+Inf\"}} {}\n", capacity + 1)),
                "{text}"
            );
        }
    }
}
