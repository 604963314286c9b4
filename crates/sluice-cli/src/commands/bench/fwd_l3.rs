//! `sluice bench fwd`'s l3fwd case: `sluice l3fwd`'s poll against io
//! forwarding on the same two soft ports, interleaved.
//!
//! Both engines forward the built-in tester's traffic (64-byte UDP, 1024
//! flows, each port's stream to its own destination: `dst=stream`) between
//! the same two soft ports, with the inline device and its cycles excluded.
//! The ports are opened as `sluice l3fwd` opens them: the device checks the
//! IPv4 header checksum (DPDK's l3fwd leaves that to the NIC too), so the
//! router reads the verdict from the Rx flags. Each port's stream is routed
//! to the other (`198.18.0.0/24 → 1`, `198.18.1.0/24 → 0`), which is where
//! io forwarding sends it as well.
//!
//! Method: after an untimed warm-up of each engine, [`ROUNDS`] interleaved
//! rounds (`sluice_bench::interleave`); in each, both engines forward one
//! slice, the order alternating from round to round. Cycles per packet are
//! medians over rounds; the l3fwd/io ratio is the median of the per-round
//! ratios, so a change in the machine's load moves both sides of a ratio
//! alike. The route's own cycles per packet — what l3fwd adds to io on the
//! same ports, the driver's share taken out — is the median of the
//! per-round differences ([`ROUTE_CASE`]): unlike the ratio, it does not
//! grow when the driver gets faster.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use sluice::mbuf::{Burst, MbufPool};
use sluice::port::{Offloads, Port, PortConfig, PortCounters};
use sluice::tsc::rdtsc_ordered;

use super::fwd::{BURST, DESC, bench_pool, device_cycles, finish, forward, soft_spec};
use sluice::driver::soft::VectorLevel;
use sluice_bench::interleave;
use sluice_bench::stats::{Spread, median, mops_per_core, ratios};

use super::{BenchResult, Sample, Stall, on_lcore};
use crate::app::io::engine::Io;
use crate::app::io::lcore::StreamCounters;
use crate::app::l3::classify::PortMacs;
use crate::app::l3::lcore::{Bursts, L3Config, L3Lcore, RouteDropCounters, poll};
use crate::app::l3::router::{Lookup, LpmRouter, Tables};
use sluice::net::routes;
use sluice_telemetry::capture::CaptureTaps;

/// The l3fwd row's name.
pub const L3FWD_CASE: &str = "soft l3fwd-lpm (inline)";
/// The io row's name: io on the l3fwd case's ports.
pub const IO_CASE: &str = "soft io (inline, l3fwd ports)";
/// The route's row: l3fwd's cycles per packet minus io's.
pub const ROUTE_CASE: &str = "soft l3fwd-lpm route (l3fwd - io)";
/// Timed rounds (each engine forwards one slice per round).
pub const ROUNDS: usize = 32;

/// What the pair measured.
#[derive(Debug)]
pub struct L3Pair {
    /// io forwarding on the same ports (medians over rounds).
    pub io: BenchResult,
    /// l3fwd (medians over rounds).
    pub l3: BenchResult,
    /// The route's own cycles per packet: the median of the per-round
    /// differences l3fwd - io.
    pub route: BenchResult,
    /// The per-round l3fwd/io ratios: median, smallest and largest.
    pub ratio: Spread,
    /// The per-round differences l3fwd - io: median, smallest and largest.
    pub route_spread: Spread,
}

impl L3Pair {
    /// The line giving the ratio.
    pub fn note(&self) -> String {
        format!(
            "l3fwd on the same soft ports as io ({} path), median of {ROUNDS} interleaved \
             rounds: the route's own cycles per packet (l3fwd - io) {:.1} (min-max \
             {:.1}-{:.1}); l3fwd / io {:.2} (min-max {:.2}-{:.2})",
            VectorLevel::best(),
            self.route_spread.median,
            self.route_spread.min,
            self.route_spread.max,
            self.ratio.median,
            self.ratio.min,
            self.ratio.max
        )
    }
}

/// One engine's timed slices.
#[derive(Default)]
pub(super) struct Slices {
    /// Cycles per packet of each round, device cycles excluded.
    pub(super) per_pkt: Vec<f64>,
    /// Packets and cycles (all of them) over every round, for Mpps.
    pub(super) ops: u64,
    pub(super) cycles: u64,
    /// Device cycles over every round.
    pub(super) device: u64,
}

impl Slices {
    pub(super) fn add(&mut self, (moved, cycles, device): Timed) {
        self.per_pkt
            .push(cycles.saturating_sub(device) as f64 / moved.max(1) as f64);
        self.ops += moved;
        self.cycles += cycles;
        self.device += device;
    }

    /// A row whose cycles per packet is the median over rounds.
    pub(super) fn result(&self, pool: &MbufPool, name: &str) -> Result<BenchResult, String> {
        let mut r = finish(
            pool,
            name,
            Sample {
                ops: self.ops,
                start: 0,
                end: self.cycles,
            },
            self.device,
            None,
        )?;
        r.cycles_per_op = median(&self.per_pkt);
        Ok(r)
    }
}

/// Measures l3fwd against io on `cpu`, `ops` packets per engine in all.
pub fn measure(cpu: usize, ops: u64) -> Result<L3Pair, String> {
    let file = routes::parse("198.18.0.0/24 1\n198.18.1.0/24 0\n").map_err(|e| e.to_string())?;
    let Tables::Lpm(router) = Tables::build(&file, Lookup::Lpm, 2)? else {
        return Err("not an LPM table".into());
    };
    let pool = bench_pool()?;
    // A tester of its own (another case's streams would be unrouted here).
    let spec = soft_spec(&super::unique_name("bench_fwd_l3"));
    let mut ports = Vec::new();
    for i in 0..2 {
        let config = PortConfig::new(Some(pool.clone()))
            .port_id(i)
            .nb_rxd(DESC)
            .nb_txd(DESC);
        // As `sluice l3fwd` asks (`FwdArgs::rx_offloads_if_capable`).
        let port = sluice::driver::open_with(&spec, config, |info, c| {
            c.rx_offloads |= Offloads::IPV4_CKSUM.intersect(info.rx_offload_capa);
        })
        .map_err(|e| e.to_string())?;
        ports.push(port);
    }
    let slice = (ops / ROUNDS as u64).max(1024);
    let lcore_pool = pool.clone();
    let (io, l3) = on_lcore(cpu, move || {
        let r = measure_rounds(&router, &mut ports, slice);
        ports.iter_mut().for_each(Port::stop);
        drop(ports);
        lcore_pool.flush_local_cache();
        r
    })?;
    let differences: Vec<f64> = l3
        .per_pkt
        .iter()
        .zip(&io.per_pkt)
        .map(|(l3, io)| l3 - io)
        .collect();
    let route_spread = Spread::of(&differences);
    let mut route = BenchResult::new(
        "fwd",
        ROUTE_CASE.to_owned(),
        1,
        route_spread.median,
        mops_per_core(route_spread.median),
    );
    route.bulk = Some(BURST);
    route.ops = l3.ops;
    Ok(L3Pair {
        io: io.result(&pool, IO_CASE)?,
        l3: l3.result(&pool, L3FWD_CASE)?,
        route,
        ratio: Spread::of(&ratios(&l3.per_pkt, &io.per_pkt)),
        route_spread,
    })
}

/// Starts the ports, warms both engines up, runs the rounds.
fn measure_rounds(
    router: &LpmRouter,
    ports: &mut [Port],
    slice: u64,
) -> Result<(Slices, Slices), String> {
    for port in ports.iter_mut() {
        port.start().map_err(|e| e.to_string())?;
    }
    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
    let macs: Vec<PortMacs> = ports
        .iter()
        .map(|port| PortMacs::new(sluice::net::MacAddr([2, 0, 0, 0, 0, 1]), port.mac()))
        .collect();
    let drops = RouteDropCounters::default();
    let tx_drops: Vec<StreamCounters> = (0..2).map(|_| StreamCounters::default()).collect();
    let stop = AtomicBool::new(false);
    let cfg = L3Config {
        burst: BURST,
        tx_retry: 0,
        counters: &tx_drops,
        macs: &macs,
        stop: &stop,
    };
    let (mut io, mut l3) = (Slices::default(), Slices::default());
    let warm = (slice / 2).max(1024);
    l3_slice(router, ports, &cfg, &drops, &counters, warm)?;
    io_slice(ports, &counters, warm)?;
    // Case 0 is io, case 1 l3fwd; the order alternates.
    interleave(ROUNDS, 2, |_, case| {
        if case == 0 {
            io_slice(ports, &counters, slice).map(|t| io.add(t))
        } else {
            l3_slice(router, ports, &cfg, &drops, &counters, slice).map(|t| l3.add(t))
        }
    })?;
    let lost = drops.get();
    let tx_lost: u64 = tx_drops.iter().map(|c| c.drops.get()).sum();
    if lost != Default::default() || tx_lost != 0 {
        return Err(format!("packets dropped: {lost:?}, Tx {tx_lost}"));
    }
    Ok((io, l3))
}

/// Packets moved, cycles and device cycles of one timed slice.
pub(super) type Timed = (u64, u64, u64);

/// Times `run` (which forwards at least `n` packets) on the ports.
pub(super) fn timed(
    counters: &[Arc<PortCounters>],
    run: impl FnOnce() -> Result<u64, String>,
) -> Result<Timed, String> {
    let dev0 = device_cycles(counters);
    let start = rdtsc_ordered();
    let moved = run()?;
    let end = rdtsc_ordered();
    let device = device_cycles(counters).saturating_sub(dev0);
    Ok((moved, end.wrapping_sub(start), device))
}

/// l3fwd's poll on both ports until `n` packets have gone through.
fn l3_slice(
    router: &LpmRouter,
    ports: &mut [Port],
    cfg: &L3Config<'_>,
    drops: &RouteDropCounters,
    counters: &[Arc<PortCounters>],
    n: u64,
) -> Result<Timed, String> {
    let mut lc = L3Lcore {
        rx: Vec::new(),
        tx: Vec::new(),
        rx_taps: Vec::new(),
        tx_taps: Vec::new(),
        counters_base: 0,
        drops,
    };
    for port in ports.iter_mut() {
        let (rx, tx) = port.queues_mut().map_err(|e| e.to_string())?;
        lc.rx.push(rx[0].as_mut());
        lc.tx.push(tx[0].as_mut());
        // Never captured: the branch per burst a running router pays.
        lc.rx_taps.push(CaptureTaps::detached());
        lc.tx_taps.push(CaptureTaps::detached());
    }
    let mut bufs = Bursts::new(2);
    timed(counters, || {
        let mut moved = 0u64;
        let mut stall = Stall::new("forwarding core");
        while moved < n {
            let k =
                poll(router, &mut lc, 0, &mut bufs, cfg) + poll(router, &mut lc, 1, &mut bufs, cfg);
            if k == 0 {
                stall.failed()?;
            } else {
                stall.progressed();
                moved += k as u64;
            }
        }
        Ok(moved)
    })
}

/// io forwarding on both ports until `n` packets have gone through.
pub(super) fn io_slice(
    ports: &mut [Port],
    counters: &[Arc<PortCounters>],
    n: u64,
) -> Result<Timed, String> {
    let mut streams = super::fwd::crossed_streams(ports)?;
    let mut burst: Burst<64> = Burst::new();
    timed(counters, || forward(Io, &mut streams, &mut burst, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_engines_route_everything_and_return_every_buffer() {
        let cpu = sluice::lcore::available_cpus()[0];
        let r = measure(cpu, 8 * 2048).unwrap();
        for row in [&r.io, &r.l3] {
            assert!(row.ops >= 8 * 2048, "{}: {}", row.case, row.ops);
            assert!(row.cycles_per_op > 0.0 && row.mops > 0.0);
        }
        assert_eq!(
            (r.io.case.as_str(), r.l3.case.as_str()),
            (IO_CASE, L3FWD_CASE)
        );
        assert!(r.ratio.min <= r.ratio.median && r.ratio.median <= r.ratio.max);
        assert!(r.ratio.min > 0.0);
        // The route row is the per-round difference's median.
        assert_eq!(r.route.case, ROUTE_CASE);
        assert_eq!(r.route.cycles_per_op, r.route_spread.median);
        assert!(r.route_spread.min <= r.route_spread.median);
        assert!(r.route_spread.median <= r.route_spread.max);
        assert!(r.note().contains("l3fwd - io"));
    }
}
