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
//! the scheduler interrupted on a shared machine. The kernel's drops (`PACKET_STATISTICS`) are printed after the
//! rows. No bar: on a two-CPU machine the veth path, not the receiver,
//! decides the rate.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::net::MacAddr;
use sluice::port::{Port, PortConfig};
use sluice::tsc::rdtsc_ordered;

use super::{BenchResult, Ctx, on_lcore};
use crate::fwd::engine::udp_frame;

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

/// Runs `ip ARGS`; its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
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
            ns: format!("sluice-bench-{pid}"),
            a: format!("slb{pid:x}a"),
            b: format!("slb{pid:x}b"),
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

/// Moves the calling thread into namespace `ns`.
fn enter(ns: &str) -> Result<(), String> {
    let path = format!("/run/netns/{ns}");
    let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    // SAFETY: setns(2) with an open namespace descriptor; it changes only
    // this thread's network namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The generator: frames out of end b until `stop`; returns how many the
/// port sent and the seconds it ran.
fn generate(ns: String, iface: String, stop: Arc<AtomicBool>) -> Result<(u64, f64), String> {
    enter(&ns)?;
    let pool = MbufPool::new(MbufPoolConfig {
        name: "bench-afp-gen".into(),
        size: 2047,
        cache_size: 0,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let spec = format!("afpacket:iface={iface}");
    let cfg = PortConfig::new(Some(pool.clone())).queues(0, 1);
    let mut port = sluice::driver::open(&spec, cfg).map_err(|e| e.to_string())?;
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
    let stats = || -> u64 {
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
        if r == 0 { u64::from(st[1]) } else { 0 }
    };
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
    let _ = stats();
    let (mut packets, mut idle) = (0u64, 0u32);
    let mut per_packet = Vec::with_capacity(ops as usize);
    let deadline = Instant::now() + MAX_TIME;
    let start = rdtsc_ordered();
    while packets < ops {
        let t0 = rdtsc_ordered();
        if recv(&mut buf) > 0 {
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
        kernel_drops: stats(),
    })
}

/// The median of `v` (0 if empty).
fn median(mut v: Vec<f32>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mid = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f32::total_cmp);
    f64::from(*m)
}

/// Whether this process can make namespaces (it is root).
fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
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
        "afpacket on a veth pair: a generator on CPU {gen_cpu} in a namespace sends 64-byte \
         frames through an afpacket Tx ring; the receiver polls the root-side end on CPU \
         {cpu}, up to {ops} packets or {} s per case. Cycles/op: the receiver's ticks per \
         packet in a call that returned packets (median over calls); Mops: packets \
         received per second.",
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
                median(m.per_packet),
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
