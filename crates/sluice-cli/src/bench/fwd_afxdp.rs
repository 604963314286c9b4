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
//! on two CPUs (no bar). The kernel's drop counters follow the rows.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::net::MacAddr;
use sluice::port::{PortConfig, recycle_mbufs};
use sluice::tsc::rdtsc_ordered;

use super::{BenchResult, Ctx, on_lcore};
use crate::fwd::engine::udp_frame;

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

/// Runs `ip ARGS`; its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// The namespace and veth pair, removed on drop.
struct Setup {
    ns: String,
    /// End a (root namespace) and end b (in `ns`).
    a: String,
    b: String,
}

impl Setup {
    fn new() -> Result<Setup, String> {
        let pid = std::process::id();
        let s = Setup {
            ns: format!("sluice-bxdp-{pid}"),
            a: format!("slx{pid:x}a"),
            b: format!("slx{pid:x}b"),
        };
        ip(&["netns", "add", &s.ns])?;
        // From here on, drop removes what exists.
        ip(&[
            "link", "add", &s.a, "type", "veth", "peer", "name", &s.b, "netns", &s.ns,
        ])?;
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", s.a), "1");
        ip(&["link", "set", "dev", &s.a, "up"])?;
        ip(&["-n", &s.ns, "link", "set", "dev", &s.b, "up"])?;
        Ok(s)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// The generator: frames out of end b (in namespace `ns`) until `stop`;
/// how many it sent and the seconds it ran.
fn generate(ns: String, iface: String, stop: Arc<AtomicBool>) -> Result<(u64, f64), String> {
    let path = format!("/run/netns/{ns}");
    let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    // SAFETY: setns(2) with an open namespace descriptor; it moves only
    // this thread, which ends with the generator.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
    }
    let pool = MbufPool::new(MbufPoolConfig {
        name: "bench-xdp-gen".into(),
        size: 4095,
        cache_size: 0,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    // Tx only: no program on end b.
    let cfg = PortConfig::new(Some(pool.clone()))
        .queues(0, 1)
        .nb_txd(2048);
    let mut port =
        sluice::driver::open(&format!("afxdp:iface={iface}"), cfg).map_err(|e| e.to_string())?;
    port.start().map_err(|e| e.to_string())?;
    let frame = udp_frame(64, port.mac(), MacAddr([0x02, 0xbe, 0, 0, 0, 1]));
    let tx = port.tx_queue(0).map_err(|e| e.to_string())?;
    let mut b: Burst<32> = Burst::new();
    let t0 = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let k = b.free();
        if pool.alloc_bulk(&mut b, k).is_ok() {
            for m in b.iter_mut().rev().take(k) {
                m.append(frame.len())
                    .map_err(|e| e.to_string())?
                    .copy_from_slice(&frame);
            }
        }
        tx.tx_burst(&mut b);
    }
    let secs = t0.elapsed().as_secs_f64();
    drop(b);
    let sent = port.stats().tx_packets;
    drop(port);
    Ok((sent, secs))
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
    let os = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    let cname = std::ffi::CString::new(iface).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated name that outlives the call.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) } as i32;
    if ifindex == 0 {
        return Err(os(iface));
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(proto),
        )
    };
    if fd < 0 {
        return Err(os("socket(AF_PACKET)"));
    }
    // SAFETY: a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: all-zero is a valid `sockaddr_ll`.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex;
    // SAFETY: a valid `sockaddr_ll` of the length given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::from_ref(&sll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os("bind"));
    }
    let mut buf = [0u8; 2048];
    let recv = |buf: &mut [u8]| -> isize {
        // SAFETY: `buf` is writable for its length.
        unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        }
    };
    let t = Instant::now();
    while recv(&mut buf) <= 0 {
        if t.elapsed() > Duration::from_secs(10) {
            return Err("nothing arrived from the generator within 10 s".into());
        }
    }
    let (mut packets, mut busy, mut empty) = (0u64, 0u64, 0u32);
    let deadline = Instant::now() + MAX_TIME;
    let start = rdtsc_ordered();
    while packets < ops {
        let t0 = rdtsc_ordered();
        if recv(&mut buf) > 0 {
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
    let mut st = [0u32; 2];
    let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
    // SAFETY: `st` is a writable `struct tpacket_stats` of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            st.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let drops = if r == 0 {
        format!("socket drops {}", st[1])
    } else {
        String::new()
    };
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
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(ctx, "needs root (a network namespace, a veth pair, XDP)");
        return;
    }
    let setup = match Setup::new() {
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
    let stop = Arc::new(AtomicBool::new(false));
    let generator = {
        let (ns, b, stop) = (setup.ns.clone(), setup.b.clone(), Arc::clone(&stop));
        sluice::lcore::launch(Some(gen_cpu), move || generate(ns, b, stop))
    };
    let generator = match generator {
        Ok(h) => h,
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
    stop.store(true, Ordering::Relaxed);
    match generator.join() {
        Ok(Ok((sent, secs))) => lines.push(format!(
            "generator: {sent} packets in {secs:.1} s ({:.3} Mpps)",
            sent as f64 / secs.max(1e-9) / 1e6
        )),
        Ok(Err(e)) => lines.push(format!("generator failed: {e}")),
        Err(_) => lines.push("generator panicked".into()),
    }
    for l in lines {
        ctx.note(&l);
    }
    drop(setup);
}
