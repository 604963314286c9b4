//! `sluice bench fwd`: io forwarding between two ports on one core, as
//! testpmd measures it (64-byte packets, burst 32, mempool cache 256).
//!
//! One op is one packet forwarded: received on one port and sent on the
//! other, both directions polled in turn. The figure is the whole timed
//! region's TSC ticks on the forwarding core divided by the packets moved
//! (every poll counts, busy or not), minus what an inline device model
//! reports spending inside the driver calls (`device_cycles`): what is left
//! is driver and application work.
//!
//! Cases, each only if its driver exists (`sluice::driver::DRIVERS`):
//! - `null io` / `null mac`: two `null` ports (Rx allocates, Tx frees: the
//!   whole buffer cycle); DPDK testpmd over `net_null`: ≈ 17 / ≈ 21 cycles
//!   as a fixed reference, and measured in the same run.
//! - `testpmd null io (same run)` / `testpmd null mac (same run)`:
//!   `dpdk-testpmd` over two `net_null` ports, in the same interleaved
//!   rounds as the null and soft io cases, which carry their ratio to it
//!   (`fwd_testpmd.rs`).
//! - `pair io`: the two ends of one `pair` (pointers only, no alloc/free),
//!   with mbufs preloaded to circulate; testpmd over `net_ring`: ≈ 2.3.
//! - `soft io (inline, scalar)` and `soft io (inline)`: two `soft` ports on
//!   the built-in tester, the device model running inline, its cycles
//!   excluded; the driver's scalar path (`vector=off`) and its vector path
//!   (`vector=auto`, the level named in a note), interleaved, with their
//!   ratio, and each one's ratio to testpmd null io. See `fwd_vector.rs`.
//! - `soft io (inline, l3fwd ports)`, `soft l3fwd-lpm (inline)` and
//!   `soft l3fwd-lpm route (l3fwd - io)`: the same traffic through
//!   `sluice l3fwd`'s poll (header checks, LPM lookup, TTL and checksum, MAC
//!   rewrite) and through io forwarding, interleaved on one pair of ports
//!   opened as l3fwd opens them; the route's own cycles per packet (the
//!   per-round difference) and the l3fwd/io ratio are printed. See
//!   `fwd_l3.rs`.
//! - `afpacket rx|io (veth)` and `raw socket rx (veth)`: a kernel port with
//!   a generator in a namespace, as root (`fwd_afpacket.rs`).
//! - `afxdp rx|io|recycle (veth)` and a raw-socket receiver: an AF_XDP port
//!   with a generator in a namespace, as root (`fwd_afxdp.rs`).
//! - `memif io (memif peer)` and `vhost io (virtio peer)`, 64 and 1500
//!   bytes: two Sluice ports connected over memif or vhost-user, one core
//!   each, beside two `dpdk-testpmd` connected the same way in the same
//!   run (`fwd_vm.rs`).

use std::sync::Arc;

use sluice::driver::DRIVERS;
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::{Port, PortConfig, PortCounters};
use sluice::tsc::rdtsc_ordered;

use super::{BenchResult, Ctx, Sample, Selection, Stall, on_lcore};
use crate::app::io::engine::{Fwd, Io, Mac, Stream, poll, udp_frame};
use crate::app::options::Engine;

/// Packets asked per Rx call.
pub(super) const BURST: usize = 32;
/// Per-lcore mempool cache.
pub(super) const CACHE: u32 = 256;
/// Mbufs in the pool.
const POOL_SIZE: u32 = 8191;
/// Descriptors per queue.
pub(super) const DESC: u16 = 1024;
/// Packets per case by default.
const DEFAULT_OPS: u64 = 1 << 25;

/// The spec of a soft port of the soft cases (io and l3fwd alike) on
/// `tester`. Each case takes a tester of its own
/// ([`unique_name`](super::unique_name)): ports of two cases on one tester —
/// say a bench's and a test's running at once — would take each other's
/// streams.
pub(super) fn soft_spec(tester: &str) -> String {
    format!("soft:tester={tester},gen=udp,flows=1024,size=64,device=inline,dst=stream")
}

/// One case.
#[derive(Debug, Clone)]
pub struct Case {
    /// Its name in the table.
    pub name: &'static str,
    /// The driver it needs.
    pub driver: &'static str,
    /// The two ports.
    pub specs: [String; 2],
    /// The engine.
    pub engine: Engine,
    /// Mbufs sent into port 0 before timing, to circulate (for ports that
    /// make no packets of their own).
    pub preload: usize,
    /// DPDK testpmd's cycles per packet for the same case.
    pub dpdk: Option<f64>,
}

/// The cases measured one at a time, whether or not their driver exists;
/// the pair case on a link of its own. `bench fwd` measures the null ones
/// in the rounds of [`super::fwd_testpmd`] instead, beside testpmd, with
/// the soft io cases ([`super::fwd_vector`]).
pub fn cases() -> Vec<Case> {
    let pair = format!("pair:name={}", super::unique_name("bench_fwd"));
    vec![
        Case {
            name: "null io",
            driver: "null",
            specs: ["null:size=64".into(), "null:size=64".into()],
            engine: Engine::Io,
            preload: 0,
            dpdk: Some(17.0),
        },
        Case {
            name: "null mac",
            driver: "null",
            specs: ["null:size=64".into(), "null:size=64".into()],
            engine: Engine::Mac,
            preload: 0,
            dpdk: Some(21.0),
        },
        Case {
            name: "pair io",
            driver: "pair",
            specs: [pair.clone(), pair],
            engine: Engine::Io,
            preload: 1024,
            dpdk: Some(2.3),
        },
    ]
}

/// Runs the fwd cases (none in the summary selection).
pub fn run(ctx: &mut Ctx, sel: Selection) {
    if sel == Selection::Summary {
        return;
    }
    let ops = ctx.ops(DEFAULT_OPS);
    let notes = vec![
        format!(
            "Two ports, one forwarding core, burst {BURST}, mempool cache {CACHE}, {POOL_SIZE} \
             mbufs, {DESC} descriptors; one op = one packet forwarded; {ops} packets per case \
             after a warm-up. An inline device's own cycles are excluded."
        ),
        sluice_bench::dpdk_reference_note(
            "dpdk-testpmd in io and mac forwarding over net_null, io over net_ring",
        ),
    ];
    ctx.section("fwd (io forwarding, two ports, one core)", &notes);
    ctx.note(&super::fwd_vector::path_note());
    // The null and soft io cases, with testpmd over net_null beside them.
    super::fwd_testpmd::run(ctx, ops);
    for case in cases() {
        if case.driver == "null" || !ctx.wants(case.name) {
            continue;
        }
        if !DRIVERS.contains(&case.driver) {
            ctx.skip(case.name, &format!("no `{}` driver yet", case.driver));
            continue;
        }
        let r = measure(ctx.main_cpu(), &case, ops);
        ctx.report(case.name, r);
    }
    let l3_cases = [
        super::fwd_l3::IO_CASE,
        super::fwd_l3::L3FWD_CASE,
        super::fwd_l3::ROUTE_CASE,
    ];
    if ctx.wants_any(&l3_cases) {
        match super::fwd_l3::measure(ctx.main_cpu(), ops) {
            Ok(pair) => {
                ctx.note(&pair.note());
                super::note_contention(ctx);
                ctx.report(super::fwd_l3::IO_CASE, Ok(pair.io));
                ctx.report(super::fwd_l3::L3FWD_CASE, Ok(pair.l3));
                ctx.report(super::fwd_l3::ROUTE_CASE, Ok(pair.route));
            }
            Err(e) => ctx.report(super::fwd_l3::L3FWD_CASE, Err(e)),
        }
    }
    super::fwd_afpacket::run(ctx);
    super::fwd_afxdp::run(ctx);
    super::fwd_vm::run(ctx);
}

/// The pool of every case.
pub(super) fn bench_pool() -> Result<MbufPool, String> {
    MbufPool::new(MbufPoolConfig {
        name: "bench-fwd".into(),
        size: POOL_SIZE,
        cache_size: CACHE,
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

/// Opens ports 0 and 1 of a case.
pub(super) fn open_two(pool: &MbufPool, specs: &[String; 2]) -> Result<Vec<Port>, String> {
    let mut ports = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let config = PortConfig::new(Some(pool.clone()))
            .port_id(i as u16)
            .nb_rxd(DESC)
            .nb_txd(DESC);
        ports.push(sluice::driver::open(spec, config).map_err(|e| e.to_string())?);
    }
    Ok(ports)
}

/// The result row of a case: cycles per packet without the device's.
pub(super) fn finish(
    pool: &MbufPool,
    name: &str,
    sample: Sample,
    device: u64,
    dpdk: Option<f64>,
) -> Result<BenchResult, String> {
    if !pool.is_full() {
        return Err("the mbuf pool is not full after the run".into());
    }
    let cycles = sample.cycles().saturating_sub(device);
    let ops = sample.ops.max(1);
    let mut r = BenchResult::new(
        "fwd",
        name.to_owned(),
        1,
        cycles as f64 / ops as f64,
        super::mops(ops, sample.cycles()),
    );
    r.bulk = Some(BURST);
    r.cache = Some(CACHE);
    r.ops = sample.ops;
    r.dpdk_cycles_per_op = dpdk;
    r.backing = Some(pool.mempool().backing().to_string());
    Ok(r)
}

/// Measures one case on `cpu`.
pub fn measure(cpu: usize, case: &Case, ops: u64) -> Result<BenchResult, String> {
    let pool = bench_pool()?;
    let mut ports = open_two(&pool, &case.specs)?;
    let (engine, preload) = (case.engine, case.preload);
    let lcore_pool = pool.clone();
    let (sample, device) = on_lcore(cpu, move || {
        let r = match engine {
            Engine::Mac => timed(Mac, &mut ports, &lcore_pool, preload, ops),
            _ => timed(Io, &mut ports, &lcore_pool, preload, ops),
        };
        ports.iter_mut().for_each(Port::stop);
        drop(ports);
        // Hand the cached buffers back before the lcore goes away.
        lcore_pool.flush_local_cache();
        r
    })?;
    finish(&pool, case.name, sample, device, case.dpdk)
}

/// Device cycles of the ports.
pub(super) fn device_cycles(counters: &[Arc<PortCounters>]) -> u64 {
    counters
        .iter()
        .filter_map(|c| c.xstats.get("device_cycles"))
        .sum()
}

/// The two streams of io forwarding between two ports: queue 0 of each
/// port's Rx to queue 0 of the other's Tx.
pub(super) fn crossed_streams(ports: &mut [Port]) -> Result<[Stream<'_>; 2], String> {
    let [a, b] = ports else {
        return Err("two ports are needed".into());
    };
    let err = |e: sluice::port::PortError| e.to_string();
    let (arx, atx) = a.queues_mut().map_err(err)?;
    let (brx, btx) = b.queues_mut().map_err(err)?;
    let mac = sluice::net::MacAddr([2, 0, 0, 0, 0, 1]);
    Ok([
        Stream::new(0, 1, arx[0].as_mut(), btx[0].as_mut(), mac, mac),
        Stream::new(1, 0, brx[0].as_mut(), atx[0].as_mut(), mac, mac),
    ])
}

/// Starts the ports, preloads, warms up, then forwards `ops` packets both
/// ways; returns the timed sample and the device cycles inside it.
fn timed<E: Fwd>(
    e: E,
    ports: &mut [Port],
    pool: &MbufPool,
    preload: usize,
    ops: u64,
) -> Result<(Sample, u64), String> {
    let err = |e: sluice::port::PortError| e.to_string();
    for p in ports.iter_mut() {
        p.start().map_err(err)?;
    }
    if preload > 0 {
        preload_port(&mut ports[0], pool, preload)?;
    }
    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
    let mut streams = crossed_streams(ports)?;
    let mut burst: Burst<64> = Burst::new();
    forward(e, &mut streams, &mut burst, (ops / 16).max(1024))?;
    let dev0 = device_cycles(&counters);
    let start = rdtsc_ordered();
    let moved = forward(e, &mut streams, &mut burst, ops)?;
    let end = rdtsc_ordered();
    let device = device_cycles(&counters).saturating_sub(dev0);
    Ok((
        Sample {
            ops: moved,
            start,
            end,
        },
        device,
    ))
}

/// Sends up to `n` generated 64-byte UDP frames on `port`'s Tx queue 0, to
/// circulate between ports that make none of their own; returns how many
/// it took (it stops when the ring is full).
pub(super) fn preload_port(port: &mut Port, pool: &MbufPool, n: usize) -> Result<u64, String> {
    let frame = udp_frame(64, port.mac(), sluice::net::MacAddr([2, 0, 0, 0, 0, 2]));
    let tx = port.tx_queue(0).map_err(|e| e.to_string())?;
    let mut b: Burst<64> = Burst::new();
    let mut sent = 0;
    while sent < n {
        let k = (n - sent).min(b.free());
        pool.alloc_bulk(&mut b, k).map_err(|e| e.to_string())?;
        for m in b.iter_mut() {
            m.append(frame.len())
                .map_err(|e| e.to_string())?
                .copy_from_slice(&frame);
        }
        let took = tx.tx_burst(&mut b);
        sent += took;
        if took < k {
            // The ring is full: what it holds goes round (the rest is
            // freed with `b`).
            break;
        }
    }
    Ok(sent as u64)
}

/// Polls both streams in turn until `ops` packets were forwarded; returns
/// how many were. Dropped packets are an error (a forwarding bench must not
/// lose them).
#[inline(never)]
pub(super) fn forward<E: Fwd>(
    e: E,
    streams: &mut [Stream<'_>; 2],
    burst: &mut Burst<64>,
    ops: u64,
) -> Result<u64, String> {
    let mut moved = 0u64;
    let mut stall = Stall::new("forwarding core");
    while moved < ops {
        let mut n = 0;
        for s in streams.iter_mut() {
            let m = poll(e, s, burst.capped(BURST), 0);
            if m.dropped != 0 {
                return Err(format!("{} packets dropped on Tx", m.dropped));
            }
            n += m.tx;
        }
        if n == 0 {
            stall.failed()?;
        } else {
            stall.progressed();
            moved += n as u64;
        }
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_cases_forward_and_return_every_buffer() {
        let cpu = sluice::lcore::available_cpus()[0];
        for case in cases().iter().filter(|c| DRIVERS.contains(&c.driver)) {
            let r = measure(cpu, case, 4096).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert!(r.ops >= 4096, "{}: {}", case.name, r.ops);
            assert!(r.cycles_per_op > 0.0 && r.mops > 0.0);
            assert_eq!((r.bench, r.bulk, r.cache), ("fwd", Some(32), Some(256)));
        }
    }

    #[test]
    fn case_names_are_unique_and_null_is_always_there() {
        let c = cases();
        let mut names: Vec<_> = c.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), c.len());
        assert!(DRIVERS.contains(&"null"));
    }
}
