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

use sluice_bench::median;

use super::Ctx;
use super::veth::{
    BURST, CaseFigures, GenPort, MAX_TIME, PortReceive, RawSocket, Received, VethBench,
    await_first_frame, port_receive, timed_receive,
};

/// Packets per case by default (about 4 s at 0.5 Mpps).
const DEFAULT_OPS: u64 = 1 << 21;

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
    /// Packets, calls and ticks of the timed region.
    received: Received,
    /// TSC ticks per packet of each call that returned packets.
    per_packet: Vec<f32>,
    /// The kernel's drops for the receiving socket.
    kernel_drops: u64,
}

/// Receives through an afpacket port on `iface` (and with `io`, sends back
/// out of it).
fn afpacket(iface: &str, io: bool, ops: u64) -> Result<Measured, String> {
    let mut per_packet = Vec::with_capacity(ops as usize);
    let how = PortReceive {
        recycle: false,
        send_back: io,
    };
    let (received, xstats) = port_receive(
        &format!("afpacket:iface={iface}"),
        "bench-afp-rx",
        |config| config,
        how,
        ops,
        |ticks, n| per_packet.push(ticks as f32 / n as f32),
    )?;
    let kernel_drops = xstats
        .iter()
        .find(|(k, _)| k == "rx_kernel_drops")
        .map_or(0, |(_, v)| *v);
    Ok(Measured {
        received,
        per_packet,
        kernel_drops,
    })
}

/// Receives with a plain packet socket on `iface`, one `recv` per frame.
fn raw_socket(iface: &str, ops: u64) -> Result<Measured, String> {
    let sock = RawSocket::bind(iface)?;
    let mut buf = [0u8; 2048];
    await_first_frame(|| usize::from(sock.recv(&mut buf) > 0))?;
    let _ = sock.drops();
    let mut per_packet = Vec::with_capacity(ops as usize);
    let received = timed_receive(
        ops,
        || usize::from(sock.recv(&mut buf) > 0),
        |ticks, _| per_packet.push(ticks as f32),
    );
    Ok(Measured {
        received,
        per_packet,
        kernel_drops: sock.drops().unwrap_or(0),
    })
}

/// Runs the afpacket cases after the other fwd cases.
pub fn run(ctx: &mut Ctx) {
    let ops = ctx.ops(DEFAULT_OPS);
    let cases = RECEIVERS.map(Receiver::name);
    if !ctx.wants_any(&cases) {
        return;
    }
    let Some(bench) = VethBench::start(
        ctx,
        &cases,
        "a network namespace and a veth pair",
        ("sluice-bench", "slb"),
        |gen_cpu, cpu| {
            format!(
                "afpacket on a veth pair: a generator on CPU {gen_cpu} in a namespace sends \
                 64-byte frames through an afpacket Tx ring; the receiver polls the root-side \
                 end on CPU {cpu}, up to {ops} packets or {} s per case. Cycles/op: the \
                 receiver's ticks per packet in a call that returned packets (median over \
                 calls); Mops: packets received per second.",
                MAX_TIME.as_secs()
            )
        },
        |setup| GenPort {
            spec: format!("afpacket:iface={}", setup.b),
            pool: ("bench-afp-gen", 2047),
            nb_txd: sluice::port::DEFAULT_NB_TXD,
        },
    ) else {
        return;
    };
    bench.run_cases(
        ctx,
        &RECEIVERS,
        Receiver::name,
        |r| (r != Receiver::RawSocket).then_some(BURST),
        move |r, iface| measure(r, iface, ops),
    );
}

/// Runs receiver `r` on `iface`: its figures.
fn measure(r: Receiver, iface: &str, ops: u64) -> Result<CaseFigures, String> {
    let m = match r {
        Receiver::AfPacketRx => afpacket(iface, false, ops),
        Receiver::AfPacketIo => afpacket(iface, true, ops),
        Receiver::RawSocket => raw_socket(iface, ops),
    }?;
    let per_packet: Vec<f64> = m.per_packet.iter().map(|&c| f64::from(c)).collect();
    Ok(CaseFigures {
        received: m.received,
        cycles_per_op: median(&per_packet),
        line: format!(
            "{}: {} packets, {:.1} per call that returned any, kernel drops {}",
            r.name(),
            m.received.packets,
            m.received.packets as f64 / m.received.calls.max(1) as f64,
            m.kernel_drops
        ),
    })
}
