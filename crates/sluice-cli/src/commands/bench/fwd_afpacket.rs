//! The `afpacket` cases of `sluice bench fwd`: a kernel port on a veth
//! pair, with a generator in a network namespace, beside a plain
//! raw-socket receiver on the same setup.
//!
//! Setup (root only; skipped with a note otherwise): a namespace
//! `sluice-bench-PID` holding end b of a veth pair whose end a stays in the
//! root namespace. The generator, an lcore on the second CPU that has
//! entered the namespace (`setns`), sends 64-byte UDP frames to an unknown
//! unicast MAC through an `afpacket` Tx queue on end b for as long as the
//! cases run; the kernel's veth path delivers them on that CPU. The
//! receiver under test polls end a from the first CPU:
//! - `afpacket rx (veth)`: `rx_burst` into mbufs and free them;
//! - `afpacket io (veth)`: `rx_burst`, then `tx_burst` back out of the same
//!   port (testpmd's io forwarding on one port), so the Tx ring, its kick
//!   and the veth transmit are in the figure too;
//! - `raw socket rx (veth)`: a packet socket without a ring, one
//!   `recv(MSG_DONTWAIT)` per frame — what a plain program does.
//!
//! Mops is packets received per second over the timed region; cycles per
//! op are the receiver's own: the median over the calls that returned
//! packets of the call's TSC ticks (freeing and, for io, sending included)
//! per packet it returned. Empty polls are not counted — the receiver is
//! faster than one sender through the kernel's veth path, so an all-polls
//! figure would only measure the sender — and the median leaves out calls
//! the scheduler interrupted on a shared machine. The kernel's drops
//! (`PACKET_STATISTICS`) are printed after the rows. On a two-CPU machine
//! the veth path, not the receiver, decides the rate.

use std::time::{Duration, Instant};

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::{Port, PortConfig};
use sluice::tsc::rdtsc_ordered;

use sluice_bench::median;

use super::veth::{GenPort, Generator, RawSocket, VethPair, is_root};
use super::{BenchResult, Ctx, on_lcore};

/// Packets per case by default (about 4 s at 0.5 Mpps).
const DEFAULT_OPS: u64 = 1 << 21;
/// Longest timed region of one case.
const MAX_TIME: Duration = Duration::from_secs(10);
/// Packets asked per Rx call.
const BURST: usize = 32;

/// The three receivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receiver {
    AfPacketRx,
    AfPacketIo,
    RawSocket,
}

impl Receiver {
    fn name(self) -> &'static str {
        match self {
            Receiver::AfPacketRx => "afpacket rx (veth)",
            Receiver::AfPacketIo => "afpacket io (veth)",
            Receiver::RawSocket => "raw socket rx (veth)",
        }
    }
}

const RECEIVERS: [Receiver; 3] = [
    Receiver::AfPacketRx,
    Receiver::AfPacketIo,
    Receiver::RawSocket,
];

/// What one receiver measured.
struct Measured {
    packets: u64,
    /// TSC ticks of the timed region.
    cycles: u64,
    /// TSC ticks per packet of each call that returned packets.
    per_packet: Vec<f32>,
    /// Calls that returned packets.
    calls: u64,
    /// The kernel's drops for the receiving socket.
    kernel_drops: u64,
}

/// Receives through an afpacket port on `iface` (and with `io`, sends back
/// out of it).
fn afpacket(iface: &str, io: bool, ops: u64) -> Result<Measured, String> {
    let pool = MbufPool::new(MbufPoolConfig {
        name: "bench-afp-rx".into(),
        size: 8191,
        cache_size: 256,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let spec = format!("afpacket:iface={iface}");
    let mut port = sluice::driver::open(&spec, PortConfig::new(Some(pool.clone())))
        .map_err(|e| e.to_string())?;
    port.start().map_err(|e| e.to_string())?;
    let r = afpacket_loop(&mut port, io, ops);
    port.stop();
    let drops = port
        .xstats()
        .iter()
        .find(|(k, _)| k == "rx_kernel_drops")
        .map_or(0, |(_, v)| *v);
    drop(port);
    pool.flush_local_cache();
    if !pool.is_full() {
        return Err("the mbuf pool is not full after the run".into());
    }
    r.map(|m| Measured {
        kernel_drops: drops,
        ..m
    })
}

fn afpacket_loop(port: &mut Port, io: bool, ops: u64) -> Result<Measured, String> {
    let (rxq, txq) = port.queues_mut().map_err(|e| e.to_string())?;
    let (rx, tx) = (rxq[0].as_mut(), txq[0].as_mut());
    let mut b: Burst<64> = Burst::new();
    // Warm-up: the first packets, bounded.
    let t = Instant::now();
    while rx.rx_burst(b.capped(BURST)) == 0 {
        if t.elapsed() > Duration::from_secs(10) {
            return Err("nothing arrived from the generator within 10 s".into());
        }
    }
    b.clear();
    let (mut packets, mut calls, mut idle) = (0u64, 0u64, 0u32);
    let mut per_packet = Vec::with_capacity(ops as usize);
    let deadline = Instant::now() + MAX_TIME;
    let start = rdtsc_ordered();
    while packets < ops {
        let t0 = rdtsc_ordered();
        let n = rx.rx_burst(b.capped(BURST));
        if n == 0 {
            idle = idle.wrapping_add(1);
            if idle & 0x3ff == 0 && Instant::now() > deadline {
                break;
            }
            continue;
        }
        if io {
            tx.tx_burst(&mut b);
        }
        b.clear();
        per_packet.push((rdtsc_ordered() - t0) as f32 / n as f32);
        calls += 1;
        packets += n as u64;
        if packets & 0xfff < n as u64 && Instant::now() > deadline {
            break;
        }
    }
    let end = rdtsc_ordered();
    Ok(Measured {
        packets,
        cycles: end - start,
        per_packet,
        calls,
        kernel_drops: 0,
    })
}

/// Receives with a plain packet socket on `iface`, one `recv` per frame.
fn raw_socket(iface: &str, ops: u64) -> Result<Measured, String> {
    let sock = RawSocket::bind(iface)?;
    let mut buf = [0u8; 2048];
    let t = Instant::now();
    while sock.recv(&mut buf) <= 0 {
        if t.elapsed() > Duration::from_secs(10) {
            return Err("nothing arrived from the generator within 10 s".into());
        }
    }
    let _ = sock.drops();
    let (mut packets, mut idle) = (0u64, 0u32);
    let mut per_packet = Vec::with_capacity(ops as usize);
    let deadline = Instant::now() + MAX_TIME;
    let start = rdtsc_ordered();
    while packets < ops {
        let t0 = rdtsc_ordered();
        if sock.recv(&mut buf) > 0 {
            per_packet.push((rdtsc_ordered() - t0) as f32);
            packets += 1;
            if packets & 0xfff == 0 && Instant::now() > deadline {
                break;
            }
        } else {
            idle = idle.wrapping_add(1);
            if idle & 0x3ff == 0 && Instant::now() > deadline {
                break;
            }
        }
    }
    let end = rdtsc_ordered();
    Ok(Measured {
        packets,
        cycles: end - start,
        per_packet,
        calls: packets,
        kernel_drops: sock.drops().unwrap_or(0),
    })
}

/// Runs the afpacket cases after the other fwd cases.
pub fn run(ctx: &mut Ctx) {
    let skip = |ctx: &Ctx, why: &str| {
        for r in RECEIVERS {
            ctx.skip(r.name(), why);
        }
    };
    if !is_root() {
        skip(ctx, "needs root (a network namespace and a veth pair)");
        return;
    }
    let setup = match VethPair::new("sluice-bench", "slb") {
        Ok(s) => s,
        Err(e) => {
            skip(ctx, &format!("no namespace and veth pair here: {e}"));
            return;
        }
    };
    let ops = ctx.ops(DEFAULT_OPS);
    let cpu = ctx.main_cpu();
    let gen_cpu = ctx.cpu_pair().map_or(cpu, |(_, b)| b);
    ctx.note(&format!(
        "afpacket on a veth pair: a generator on CPU {gen_cpu} in a namespace sends 64-byte \
         frames through an afpacket Tx ring; the receiver polls the root-side end on CPU \
         {cpu}, up to {ops} packets or {} s per case. Cycles/op: the receiver's ticks per \
         packet in a call that returned packets (median over calls); Mops: packets \
         received per second.",
        MAX_TIME.as_secs()
    ));
    let port = GenPort {
        spec: format!("afpacket:iface={}", setup.b),
        pool: ("bench-afp-gen", 2047),
        nb_txd: sluice::port::DEFAULT_NB_TXD,
    };
    let generator = match Generator::launch(gen_cpu, &setup, port) {
        Ok(g) => g,
        Err(e) => {
            skip(ctx, &format!("the generator did not start: {e}"));
            return;
        }
    };
    let mut lines = Vec::new();
    for r in RECEIVERS {
        let iface = setup.a.clone();
        let m = on_lcore(cpu, move || match r {
            Receiver::AfPacketRx => afpacket(&iface, false, ops),
            Receiver::AfPacketIo => afpacket(&iface, true, ops),
            Receiver::RawSocket => raw_socket(&iface, ops),
        });
        let result = m.map(|m| {
            lines.push(format!(
                "{}: {} packets, {:.1} per call that returned any, kernel drops {}",
                r.name(),
                m.packets,
                m.packets as f64 / m.calls.max(1) as f64,
                m.kernel_drops
            ));
            let mut res = BenchResult::new(
                "fwd",
                r.name().to_owned(),
                1,
                median(
                    &m.per_packet
                        .iter()
                        .map(|&c| f64::from(c))
                        .collect::<Vec<_>>(),
                ),
                super::mops(m.packets, m.cycles),
            );
            res.ops = m.packets;
            res.bulk = (r != Receiver::RawSocket).then_some(BURST);
            res
        });
        ctx.report(r.name(), result);
    }
    lines.push(generator.finish());
    for l in lines {
        ctx.note(&l);
    }
    drop(setup);
}
