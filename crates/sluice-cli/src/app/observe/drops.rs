//! The drop table of a run: every packet a port or the application dropped,
//! by reason and port ([`DropCount`]), read at any time from the counters
//! the lcores bump.
//!
//! A port's rows come from its basic counters and its driver's xstats:
//! - `rx_missed_errors`: dropped for want of an Rx descriptor (`imissed`);
//! - `rx_mbuf_allocation_errors`: Rx refills that found the pool empty
//!   (`rx_nombuf`; the frames they cost show as missed);
//! - every drop-like xstat under its own name: `rx_<reason>_errors` (a
//!   share of `ierrors`), `tx_<reason>_errors` (a share of `oerrors`),
//!   `<...>_drops`, and the named kernel and device counts
//!   (`rx_kernel_drops`, a share of `imissed`; AF_XDP's `rx_dropped`,
//!   `rx_ring_full`, `rx_invalid_descs`, `tx_invalid_descs`; the soft
//!   device's `device_tx_errors`, `device_wqe_errors`);
//! - `rx_errors`, `tx_errors`, `rx_missed_errors`: what is left of
//!   `ierrors`, `oerrors` and `imissed` once their named shares are taken
//!   out (drops the driver gives no finer reason for).
//!
//! The application adds its own rows ([`DropSources::add`]): `tx_full` per
//! Tx port (a Tx queue did not take them), l3fwd's router drops
//! (`no_route`, `ttl_expired`, ...), `txonly`'s `alloc_failures`, and
//! `capture_overflow` per port ([`DropSources::add_capture_overflow`]:
//! copies a live capture could not take because it fell behind). Rows at
//! zero are left out.
//!
//! No packet is counted under two reasons, so the rows add up to every
//! packet dropped — but for three rows that count events rather than
//! packets: `rx_mbuf_allocation_errors` (failed refills),
//! `alloc_failures` (bursts not generated) and `device_wqe_errors` (work
//! requests the device rejected). `capture_overflow` counts copies, not
//! packets: the packets themselves went on, so [`total`] leaves it out.

use std::sync::{Arc, Mutex, MutexGuard};

use sluice::port::PortCounters;
use sluice_telemetry::capture::CaptureTaps;

use super::snapshot::DropCount;
use crate::app::io::lcore::StreamCounters;

/// The reason of the copies a live capture dropped: a copy, not a packet
/// (the packet went on), so no packet total counts it.
pub const CAPTURE_OVERFLOW: &str = "capture_overflow";

/// Reads one application drop counter (a sum of single-writer counters).
type ReadDrops = Box<dyn Fn() -> u64 + Send + Sync>;

/// One application drop counter.
struct AppDrop {
    reason: String,
    port: Option<u16>,
    read: ReadDrops,
}

/// Everything a run's drop table is read from: each port's counters and the
/// application's drop counters. A shared handle (clones read the same
/// sources): holding only `Arc`s and closures over single-writer counters,
/// it can be kept by another thread (telemetry) and read there at any
/// time, while the application adds its counters as it makes them.
/// Reading takes no lock an lcore takes: the list of application counters
/// is locked only by whoever adds or reads, and the xstats' list lock is
/// taken by drivers only while a port is being made.
#[derive(Clone)]
pub struct DropSources {
    ports: Arc<[Arc<PortCounters>]>,
    app: Arc<Mutex<Vec<AppDrop>>>,
}

impl std::fmt::Debug for DropSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DropSources")
            .field("ports", &self.ports.len())
            .field("table", &self.table())
            .finish()
    }
}

impl DropSources {
    /// The drops of `ports` (port id = index).
    pub fn new(ports: Vec<Arc<PortCounters>>) -> DropSources {
        DropSources {
            ports: ports.into(),
            app: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Adds an application drop counter: `read` returns the packets dropped
    /// for `reason` so far, on `port` (`None`: not a port's).
    pub fn add(
        &self,
        reason: &str,
        port: Option<u16>,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.app().push(AppDrop {
            reason: reason.to_owned(),
            port,
            read: Box::new(read),
        });
    }

    /// Adds the forwarding streams' drops, `tx_full` on each stream's Tx
    /// port (`tx_port[i]` for `streams[i]`), and `txonly`'s
    /// `alloc_failures` (bursts not generated for want of buffers).
    pub fn add_stream_drops(&self, streams: Arc<[StreamCounters]>, tx_port: &[usize]) {
        let mut ports: Vec<usize> = tx_port.to_vec();
        ports.sort_unstable();
        ports.dedup();
        for p in ports {
            let mine: Vec<usize> = (0..streams.len().min(tx_port.len()))
                .filter(|&i| tx_port[i] == p)
                .collect();
            let streams = Arc::clone(&streams);
            self.add("tx_full", Some(port_id(p)), move || {
                mine.iter().map(|&i| streams[i].drops.get()).sum()
            });
        }
        self.add("alloc_failures", None, move || {
            streams.iter().map(|s| s.alloc_failures.get()).sum()
        });
    }

    /// Adds `capture_overflow` on each port of `taps`: the copies its taps
    /// (every queue, both directions) dropped because the capture reading
    /// them fell behind.
    pub fn add_capture_overflow(&self, taps: &Arc<CaptureTaps>) {
        for p in 0..taps.nb_ports() {
            let taps = Arc::clone(taps);
            self.add(CAPTURE_OVERFLOW, Some(port_id(p)), move || {
                taps.overflow()
                    .iter()
                    .filter(|&&(port, ..)| port == p)
                    .map(|&(.., copies)| copies)
                    .sum()
            });
        }
    }

    /// The table now: the ports' rows by port, then the application's, the
    /// rows at zero left out.
    pub fn table(&self) -> Vec<DropCount> {
        let mut out = Vec::new();
        for (i, c) in self.ports.iter().enumerate() {
            port_drops(port_id(i), c, &mut out);
        }
        for a in self.app().iter() {
            push(&mut out, &a.reason, a.port, (a.read)());
        }
        out
    }

    fn app(&self) -> MutexGuard<'_, Vec<AppDrop>> {
        // Pushing is the only change made under the lock: a panic while it
        // was held (in a reader) cannot have left the list half-written.
        self.app.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A port index as a port id (ports are at most `u16::MAX`).
fn port_id(i: usize) -> u16 {
    u16::try_from(i).unwrap_or(u16::MAX)
}

/// Which basic counter an xstat is a named share of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShareOf {
    /// `ierrors`.
    RxErrors,
    /// `oerrors`.
    TxErrors,
    /// `imissed`.
    Missed,
    /// None: packets no basic counter counts.
    Own,
}

/// How the xstat `name` enters the table: `None` when it does not count
/// dropped packets (or counts the same drops as another row).
fn share_of(name: &str) -> Option<ShareOf> {
    match name {
        // Error completions the driver read: the same WQEs as the
        // device's `device_wqe_errors`.
        "tx_cqe_errors" => None,
        // AF_XDP: times the fill ring was found empty (the frames it cost
        // are in `rx_dropped`), and times the Tx ring was empty.
        "rx_fill_ring_empty_descs" | "tx_ring_empty_descs" => None,
        // AF_PACKET: the kernel's ring-full drops, also in `imissed`; and
        // the frames its Tx ring refused, also in `oerrors`.
        "rx_kernel_drops" => Some(ShareOf::Missed),
        "tx_kernel_drops" => Some(ShareOf::TxErrors),
        "rx_dropped" | "rx_ring_full" | "rx_invalid_descs" | "tx_invalid_descs"
        | "rx_bad_addrs" | "device_tx_errors" | "device_wqe_errors" => Some(ShareOf::Own),
        n if n.starts_with("rx_") && n.ends_with("_errors") => Some(ShareOf::RxErrors),
        n if n.starts_with("tx_") && n.ends_with("_errors") => Some(ShareOf::TxErrors),
        n if n.ends_with("_drops") => Some(ShareOf::Own),
        _ => None,
    }
}

/// Appends port `port`'s rows (see the module docs).
pub fn port_drops(port: u16, c: &PortCounters, out: &mut Vec<DropCount>) {
    let s = c.stats();
    let (mut rx_errors, mut tx_errors, mut missed) = (s.rx_errors, s.tx_errors, s.rx_missed);
    let mut named = Vec::new();
    for (name, v) in c.xstats.snapshot() {
        let Some(share) = share_of(&name) else {
            continue;
        };
        match share {
            ShareOf::RxErrors => rx_errors = rx_errors.saturating_sub(v),
            ShareOf::TxErrors => tx_errors = tx_errors.saturating_sub(v),
            ShareOf::Missed => missed = missed.saturating_sub(v),
            ShareOf::Own => {}
        }
        named.push((name, v));
    }
    push(out, "rx_missed_errors", Some(port), missed);
    push(out, "rx_mbuf_allocation_errors", Some(port), s.rx_nombuf);
    for (name, v) in named {
        push(out, &name, Some(port), v);
    }
    push(out, "rx_errors", Some(port), rx_errors);
    push(out, "tx_errors", Some(port), tx_errors);
}

/// Appends a row unless `packets` is 0.
fn push(out: &mut Vec<DropCount>, reason: &str, port: Option<u16>, packets: u64) {
    if packets != 0 {
        out.push(DropCount {
            reason: reason.to_owned(),
            port,
            packets,
        });
    }
}

/// Packets dropped in all: every row of `table` but `capture_overflow`
/// (copies dropped, not packets).
pub fn total(table: &[DropCount]) -> u64 {
    table
        .iter()
        .filter(|d| d.reason != CAPTURE_OVERFLOW)
        .map(|d| d.packets)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(reason: &str, port: Option<u16>, packets: u64) -> DropCount {
        DropCount {
            reason: reason.into(),
            port,
            packets,
        }
    }

    #[test]
    fn a_port_s_rows_name_each_drop_once() {
        let c = Arc::new(PortCounters::new(1, 1, false));
        c.rx[0].missed.add(7);
        c.rx[0].nombuf.add(2);
        c.rx[0].errors.add(5);
        c.tx[0].errors.add(4);
        let x = &c.xstats;
        x.register("rx_runt_errors").add(3);
        x.register("rx_oversize_errors").add(1);
        x.register("tx_write_errors").add(4);
        x.register("rx_kernel_drops").add(6);
        x.register("tx_cqe_errors").add(9);
        x.register("device_tx_errors").add(8);
        x.register("bus_doorbells").add(100);
        x.register("rx_recycled").add(100);
        x.register("rx_csum_not_ready").add(100);
        x.register("tx_ring_full").add(100);
        x.register_source("rx_fill_ring_empty_descs", || 100);
        let table = DropSources::new(vec![Arc::clone(&c)]).table();
        assert_eq!(
            table,
            vec![
                row("rx_missed_errors", Some(0), 1),
                row("rx_mbuf_allocation_errors", Some(0), 2),
                row("rx_runt_errors", Some(0), 3),
                row("rx_oversize_errors", Some(0), 1),
                row("tx_write_errors", Some(0), 4),
                row("rx_kernel_drops", Some(0), 6),
                row("device_tx_errors", Some(0), 8),
                row("rx_errors", Some(0), 1),
            ]
        );
        // Every drop once: missed, errors both ways, the device's, and the
        // failed refills.
        assert_eq!(total(&table), 7 + 2 + 5 + 4 + 8);
    }

    #[test]
    fn idle_ports_have_no_rows_and_application_rows_follow_the_ports() {
        let ports: Vec<_> = (0..2)
            .map(|_| Arc::new(PortCounters::new(1, 1, false)))
            .collect();
        ports[1].rx[0].missed.add(3);
        let streams: Arc<[StreamCounters]> = (0..3).map(|_| StreamCounters::default()).collect();
        streams[0].drops.add(5);
        streams[1].drops.add(2);
        streams[2].drops.add(4);
        let sources = DropSources::new(ports);
        sources.add_stream_drops(Arc::clone(&streams), &[1, 0, 1]);
        let no_route = Arc::new(sluice::counter::Counter::new());
        let read = Arc::clone(&no_route);
        sources.add("no_route", None, move || read.get());
        sources.add("ttl_expired", None, || 0);
        let want = vec![
            row("rx_missed_errors", Some(1), 3),
            row("tx_full", Some(0), 2),
            row("tx_full", Some(1), 9),
        ];
        assert_eq!(sources.table(), want);
        no_route.add(11);
        streams[1].drops.inc();
        streams[2].alloc_failures.inc();
        let table = sources.table();
        assert_eq!(table[1], row("tx_full", Some(0), 3));
        assert_eq!(table[3], row("alloc_failures", None, 1));
        assert_eq!(table[4], row("no_route", None, 11));
        assert_eq!(total(&table), 3 + 3 + 9 + 1 + 11);
    }

    #[test]
    fn the_sources_can_be_read_from_another_thread() {
        fn shared<T: Send + Sync + 'static>(_: &T) {}
        let sources = DropSources::new(vec![Arc::new(PortCounters::new(1, 1, false))]);
        shared(&sources);
        let reader = sources.clone();
        let table = std::thread::spawn(move || reader.table()).join().unwrap();
        assert!(table.is_empty());
        // A counter added after the clone is read by the clone too.
        let reader = sources.clone();
        sources.add("no_route", None, || 4);
        let table = std::thread::spawn(move || reader.table()).join().unwrap();
        assert_eq!(table, vec![row("no_route", None, 4)]);
    }

    #[test]
    fn capture_overflow_is_a_row_per_port_but_not_a_packet_lost() {
        use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
        use sluice_telemetry::capture::Direction;

        let pool = MbufPool::new(MbufPoolConfig {
            size: 63,
            cache_size: 0,
            ..Default::default()
        })
        .unwrap();
        let ports: Vec<_> = (0..2)
            .map(|_| Arc::new(PortCounters::new(1, 1, false)))
            .collect();
        ports[0].rx[0].missed.add(3);
        let taps = CaptureTaps::new(&[(1, 1, 1518), (2, 1, 1518)]);
        let sources = DropSources::new(ports);
        sources.add_capture_overflow(&taps);
        assert_eq!(sources.table(), vec![row("rx_missed_errors", Some(0), 3)]);
        let mut b: Burst<64> = Burst::new();
        pool.alloc_bulk(&mut b, 5).unwrap();
        // Port 1: two slots on its second Rx queue and on its Tx queue,
        // five packets through each: 3 + 3 copies dropped.
        for (queue, direction) in [(1, Direction::Rx), (0, Direction::Tx)] {
            let tap = taps.tap(1, queue, direction).unwrap();
            tap.start(2, 64);
            tap.mirror(b.as_slice(), 1);
            tap.stop();
        }
        let table = sources.table();
        assert_eq!(
            table,
            vec![
                row("rx_missed_errors", Some(0), 3),
                row(CAPTURE_OVERFLOW, Some(1), 6),
            ]
        );
        assert_eq!(total(&table), 3);
        drop(b);
        assert!(pool.is_full());
    }
}
