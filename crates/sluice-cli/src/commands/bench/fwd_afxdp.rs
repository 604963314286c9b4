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

use super::Ctx;
use super::veth::{
    BURST, CaseFigures, GenPort, MAX_TIME, PortReceive, RawSocket, Received, VethBench,
    await_first_frame, port_receive, timed_receive,
};

/// Packets per case by default (a few seconds at the veth's rate).
const DEFAULT_OPS: u64 = 1 << 21;

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
    /// Packets, calls and ticks of the timed region.
    received: Received,
    /// TSC ticks inside calls that returned packets.
    busy: u64,
    /// The kernel's drop counters, as `name value` pairs.
    drops: String,
}

/// Receives through an afxdp port on `iface` (`how`: rx, io, recycle).
fn afxdp(iface: &str, how: Receiver, ops: u64) -> Result<Measured, String> {
    let mut busy = 0u64;
    let receive = PortReceive {
        recycle: how == Receiver::Recycle,
        send_back: how != Receiver::Rx,
    };
    let (received, xstats) = port_receive(
        &format!("afxdp:iface={iface}"),
        "bench-xdp-rx",
        |config| config.nb_rxd(2048).nb_txd(2048),
        receive,
        ops,
        |ticks, _| busy += ticks,
    )?;
    let drops = [
        "rx_dropped",
        "rx_ring_full",
        "rx_fill_ring_empty_descs",
        "rx_recycled",
        "rx_wakeups",
        "tx_wakeups",
    ]
    .iter()
    .filter_map(|n| xstats.iter().find(|(k, _)| k == n))
    .map(|(k, v)| format!("{k} {v}"))
    .collect::<Vec<_>>()
    .join(", ");
    Ok(Measured {
        received,
        busy,
        drops,
    })
}

/// Receives with a plain packet socket on `iface`, one `recv` per frame.
fn raw_socket(iface: &str, ops: u64) -> Result<Measured, String> {
    let sock = RawSocket::bind(iface)?;
    let mut buf = [0u8; 2048];
    await_first_frame(|| usize::from(sock.recv(&mut buf) > 0))?;
    let mut busy = 0u64;
    let received = timed_receive(
        ops,
        || usize::from(sock.recv(&mut buf) > 0),
        |ticks, _| busy += ticks,
    );
    let drops = sock
        .drops()
        .map_or_else(String::new, |d| format!("socket drops {d}"));
    Ok(Measured {
        received,
        busy,
        drops,
    })
}

/// Runs the afxdp cases after the other fwd cases.
pub fn run(ctx: &mut Ctx) {
    let ops = ctx.ops(DEFAULT_OPS);
    let cases = RECEIVERS.map(Receiver::name);
    if !ctx.wants_any(&cases) {
        return;
    }
    let Some(bench) = VethBench::start(
        ctx,
        &cases,
        "a network namespace, a veth pair, XDP",
        ("sluice-bxdp", "slx"),
        |gen_cpu, cpu| {
            format!(
                "afxdp on a veth pair: a generator on CPU {gen_cpu} in a namespace sends \
                 64-byte frames through an afxdp Tx ring; the receiver polls the root-side end \
                 on CPU {cpu} (native XDP, copy mode), up to {ops} packets or {} s per case. \
                 Cycles/op: the receiver's ticks in calls that returned packets, per packet; \
                 Mops: packets received per second.",
                MAX_TIME.as_secs()
            )
        },
        // Tx only: no program on end b.
        |setup| GenPort {
            spec: format!("afxdp:iface={}", setup.b),
            pool: ("bench-xdp-gen", 4095),
            nb_txd: 2048,
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
        Receiver::RawSocket => raw_socket(iface, ops),
        how => afxdp(iface, how, ops),
    }?;
    Ok(CaseFigures {
        received: m.received,
        cycles_per_op: m.busy as f64 / m.received.packets.max(1) as f64,
        line: format!(
            "{}: {} packets in {} calls ({:.1} per call); {}",
            r.name(),
            m.received.packets,
            m.received.calls,
            m.received.packets as f64 / m.received.calls.max(1) as f64,
            m.drops
        ),
    })
}
