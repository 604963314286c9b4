//! The `afxdp` cases of `sluice bench fwd`: an AF_XDP port on a veth pair,
//! with a generator in a network namespace, beside a plain raw-socket
//! receiver on the same setup.
//!
//! Setup (root only; skipped with a note otherwise): a namespace
//! `sluice-bxdp-PID` holding end b of a veth pair whose end a stays in the
//! root namespace. The generator, an lcore on the second CPU that has
//! entered the namespace, sends 64-byte UDP frames to an unknown unicast
//! MAC through an `afxdp` Tx queue on end b (copy mode: each `sendto`
//! sends up to 32 frames through the veth) for as long as the cases run.
//! The receiver under test polls end a from the first CPU:
//! - `afxdp rx (veth)`: `rx_burst` into mbufs (the frames themselves: the
//!   UMEM is the pool) and free them;
//! - `afxdp io (veth)`: `rx_burst`, then `tx_burst` back out of the same
//!   port, so the Tx ring, its wake-up and the veth transmit count too;
//! - `afxdp recycle (veth)`: io with a recycle step before each receive —
//!   completed Tx frames straight back onto the fill ring;
//! - `raw socket rx (veth, xdp gen)`: a packet socket without a ring, one
//!   `recv(MSG_DONTWAIT)` per frame — what a plain program does.
//!
//! Mops is packets received per second over the timed region; cycles per
//! op are the receiver's own: TSC ticks inside the calls that returned
//! packets, per packet. Empty polls are not counted: the receiver is faster
//! than one sender through the kernel's veth path, which decides the rate
//! on two CPUs. The kernel's drop counters follow the rows.

use std::time::{Duration, Instant};

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::{PortConfig, recycle_mbufs};
use sluice::tsc::rdtsc_ordered;

use super::veth::{GenPort, Generator, RawSocket, VethPair, is_root};
use super::{BenchResult, Ctx, on_lcore};

/// Packets per case by default (a few seconds at the veth's rate).
const DEFAULT_OPS: u64 = 1 << 21;
/// Longest timed region of one case.
const MAX_TIME: Duration = Duration::from_secs(10);
/// Packets asked per Rx call.
const BURST: usize = 32;

/// The receivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receiver {
    Rx,
    Io,
    Recycle,
    RawSocket,
}

const RECEIVERS: [Receiver; 4] = [
    Receiver::Rx,
    Receiver::Io,
    Receiver::Recycle,
    Receiver::RawSocket,
];

impl Receiver {
    fn name(self) -> &'static str {
        match self {
            Receiver::Rx => "afxdp rx (veth)",
            Receiver::Io => "afxdp io (veth)",
            Receiver::Recycle => "afxdp recycle (veth)",
            Receiver::RawSocket => "raw socket rx (veth, xdp gen)",
        }
    }
}

/// What one receiver measured.
struct Measured {
    packets: u64,
    /// TSC ticks of the timed region.
    cycles: u64,
    /// TSC ticks inside calls that returned packets.
    busy: u64,
    /// Calls that returned packets.
    calls: u64,
    /// The kernel's drop counters, as `name value` pairs.
    drops: String,
}

/// Receives through an afxdp port on `iface` (`how`: rx, io, recycle).
fn afxdp(iface: &str, how: Receiver, ops: u64) -> Result<Measured, String> {
    let pool = MbufPool::new(MbufPoolConfig {
        name: "bench-xdp-rx".into(),
        size: 8191,
        cache_size: 256,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let cfg = PortConfig::new(Some(pool.clone()))
        .nb_rxd(2048)
        .nb_txd(2048);
    let mut port =
        sluice::driver::open(&format!("afxdp:iface={iface}"), cfg).map_err(|e| e.to_string())?;
    port.start().map_err(|e| e.to_string())?;
    let r = {
        let (rxq, txq) = port.queues_mut().map_err(|e| e.to_string())?;
        let (rx, tx) = (rxq[0].as_mut(), txq[0].as_mut());
        let mut b: Burst<64> = Burst::new();
        let t = Instant::now();
        let mut first = Ok(());
        while rx.rx_burst(b.capped(BURST)) == 0 {
            if t.elapsed() > Duration::from_secs(10) {
                first = Err("nothing arrived from the generator within 10 s".to_owned());
                break;
            }
        }
        b.clear();
        first.map(|()| {
            let (mut packets, mut busy, mut calls) = (0u64, 0u64, 0u64);
            let mut empty = 0u32;
            let deadline = Instant::now() + MAX_TIME;
            let start = rdtsc_ordered();
            while packets < ops {
                let t0 = rdtsc_ordered();
                if how == Receiver::Recycle {
                    let _ = recycle_mbufs(&mut *rx, &mut *tx);
                }
                let n = rx.rx_burst(b.capped(BURST));
                if n == 0 {
                    // The clock only now and then: empty polls are many.
                    empty = empty.wrapping_add(1);
                    if empty.is_multiple_of(1024) && Instant::now() > deadline {
                        break;
                    }
                    continue;
                }
                if how != Receiver::Rx {
                    tx.tx_burst(&mut b);
                }
                b.clear();
                busy += rdtsc_ordered() - t0;
                packets += n as u64;
                calls += 1;
                if packets & 0xfff < n as u64 && Instant::now() > deadline {
                    break;
                }
            }
            (packets, rdtsc_ordered() - start, busy, calls)
        })
    };
    port.stop();
    let x = port.xstats();
    let drops = [
        "rx_dropped",
        "rx_ring_full",
        "rx_fill_ring_empty_descs",
        "rx_recycled",
        "rx_wakeups",
        "tx_wakeups",
    ]
    .iter()
    .filter_map(|n| x.iter().find(|(k, _)| k == n))
    .map(|(k, v)| format!("{k} {v}"))
    .collect::<Vec<_>>()
    .join(", ");
    drop(port);
    pool.flush_local_cache();
    if !pool.is_full() {
        return Err("the mbuf pool is not full after the run".into());
    }
    let (packets, cycles, busy, calls) = r?;
    Ok(Measured {
        packets,
        cycles,
        busy,
        calls,
        drops,
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
    let (mut packets, mut busy, mut empty) = (0u64, 0u64, 0u32);
    let deadline = Instant::now() + MAX_TIME;
    let start = rdtsc_ordered();
    while packets < ops {
        let t0 = rdtsc_ordered();
        if sock.recv(&mut buf) > 0 {
            busy += rdtsc_ordered() - t0;
            packets += 1;
            if packets & 0xfff == 0 && Instant::now() > deadline {
                break;
            }
        } else {
            empty = empty.wrapping_add(1);
            if empty.is_multiple_of(1024) && Instant::now() > deadline {
                break;
            }
        }
    }
    let cycles = rdtsc_ordered() - start;
    let drops = sock
        .drops()
        .map_or_else(String::new, |d| format!("socket drops {d}"));
    Ok(Measured {
        packets,
        cycles,
        busy,
        calls: packets,
        drops,
    })
}

/// Runs the afxdp cases after the other fwd cases.
pub fn run(ctx: &mut Ctx) {
    let skip = |ctx: &Ctx, why: &str| {
        for r in RECEIVERS {
            ctx.skip(r.name(), why);
        }
    };
    if !is_root() {
        skip(ctx, "needs root (a network namespace, a veth pair, XDP)");
        return;
    }
    let setup = match VethPair::new("sluice-bxdp", "slx") {
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
        "afxdp on a veth pair: a generator on CPU {gen_cpu} in a namespace sends 64-byte \
         frames through an afxdp Tx ring; the receiver polls the root-side end on CPU {cpu} \
         (native XDP, copy mode), up to {ops} packets or {} s per case. Cycles/op: the \
         receiver's ticks in calls that returned packets, per packet; Mops: packets received \
         per second.",
        MAX_TIME.as_secs()
    ));
    // Tx only: no program on end b.
    let port = GenPort {
        spec: format!("afxdp:iface={}", setup.b),
        pool: ("bench-xdp-gen", 4095),
        nb_txd: 2048,
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
            Receiver::RawSocket => raw_socket(&iface, ops),
            how => afxdp(&iface, how, ops),
        });
        let result = m.map(|m| {
            lines.push(format!(
                "{}: {} packets in {} calls ({:.1} per call); {}",
                r.name(),
                m.packets,
                m.calls,
                m.packets as f64 / m.calls.max(1) as f64,
                m.drops
            ));
            let mut res = BenchResult::new(
                "fwd",
                r.name().to_owned(),
                1,
                m.busy as f64 / m.packets.max(1) as f64,
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
