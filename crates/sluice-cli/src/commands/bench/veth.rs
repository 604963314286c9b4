//! What the kernel-port cases of `sluice bench fwd` share (`fwd_afpacket.rs`,
//! `fwd_afxdp.rs`): a network namespace holding end b of a veth pair whose
//! end a stays in the root namespace, removed on drop; a generator that
//! enters the namespace and sends 64-byte UDP frames out of end b through a
//! Sluice port; a plain `AF_PACKET` socket bound to end a, the receiver
//! the drivers are compared with; and the timed receive loop every receiver
//! runs.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice::lcore::LcoreHandle;
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::net::MacAddr;
use sluice::port::{PortConfig, recycle_mbufs};
use sluice::tsc::rdtsc_ordered;

use super::{BenchResult, Ctx, mops, on_lcore};
use crate::app::io::engine::udp_frame;

/// Longest wait for the generator's first frame.
const FIRST_FRAME_WAIT: Duration = Duration::from_secs(10);

/// Longest timed region of one case.
pub const MAX_TIME: Duration = Duration::from_secs(10);
/// Packets a port receiver asks for per Rx call.
pub const BURST: usize = 32;

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

/// Whether this process can make namespaces (it is root).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The namespace and veth pair, removed on drop.
pub struct VethPair {
    /// The namespace holding end b.
    pub ns: String,
    /// End a (root namespace).
    pub a: String,
    /// End b (in `ns`).
    pub b: String,
}

impl VethPair {
    /// Makes namespace `{ns}-PID` and the pair `{tag}PIDa` / `{tag}PIDb`
    /// (PID in hex, so the names fit IFNAMSIZ), both ends up, IPv6 off on
    /// end a (no router solicitations among the frames).
    pub fn new(ns: &str, tag: &str) -> Result<VethPair, String> {
        let pid = std::process::id();
        let s = VethPair {
            ns: format!("{ns}-{pid}"),
            a: format!("{tag}{pid:x}a"),
            b: format!("{tag}{pid:x}b"),
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

impl Drop for VethPair {
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

/// How the generator's port is made.
pub struct GenPort {
    /// The port spec (`afpacket:iface=…`).
    pub spec: String,
    /// Its pool's name and size.
    pub pool: (&'static str, u32),
    /// Tx descriptors.
    pub nb_txd: u16,
}

/// The generator lcore, sending until [`finish`](Self::finish).
pub struct Generator {
    stop: Arc<AtomicBool>,
    handle: LcoreHandle<Result<(u64, f64), String>>,
}

impl Generator {
    /// Starts [`generate`] on `cpu` for end b of `pair`.
    pub fn launch(cpu: usize, pair: &VethPair, port: GenPort) -> Result<Generator, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, flag) = (pair.ns.clone(), Arc::clone(&stop));
        let handle = sluice::lcore::launch(Some(cpu), move || generate(&ns, port, &flag))
            .map_err(|e| e.to_string())?;
        Ok(Generator { stop, handle })
    }

    /// Stops it; the line saying what it sent.
    pub fn finish(self) -> String {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.join() {
            Ok(Ok((sent, secs))) => format!(
                "generator: {sent} packets in {secs:.1} s ({:.3} Mpps)",
                sent as f64 / secs.max(1e-9) / 1e6
            ),
            Ok(Err(e)) => format!("generator failed: {e}"),
            Err(_) => "generator panicked".into(),
        }
    }
}

/// The generator, run on its own thread: enters `ns`, then sends frames out
/// of a Tx-only port made as `port` says until `stop`; how many the port
/// sent and the seconds it ran.
fn generate(ns: &str, port: GenPort, stop: &AtomicBool) -> Result<(u64, f64), String> {
    enter(ns)?;
    let pool = MbufPool::new(MbufPoolConfig {
        name: port.pool.0.into(),
        size: port.pool.1,
        cache_size: 0,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let cfg = PortConfig::new(Some(pool.clone()))
        .queues(0, 1)
        .nb_txd(port.nb_txd);
    let mut port = sluice::driver::open(&port.spec, cfg).map_err(|e| e.to_string())?;
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

/// A kernel-port part set up: the namespace and veth pair, and the
/// generator sending into end a from its CPU.
pub struct VethBench {
    /// The namespace and veth pair.
    pub setup: VethPair,
    /// The generator, sending until [`Generator::finish`].
    pub generator: Generator,
    /// The CPU the receivers run on.
    pub cpu: usize,
}

impl VethBench {
    /// Sets up a kernel-port part: namespace `{ns}-PID` with veth pair
    /// `{tag}…` ([`VethPair::new`]), prints `note(gen_cpu, cpu)`, then
    /// launches a generator with the port `port` makes for the pair. When
    /// this process is not root (`root_for` says what root is needed for) or
    /// a step fails, every case of `cases` is reported skipped with the
    /// reason, and the result is `None`.
    pub fn start(
        ctx: &Ctx,
        cases: &[&str],
        root_for: &str,
        (ns, tag): (&str, &str),
        note: impl FnOnce(usize, usize) -> String,
        port: impl FnOnce(&VethPair) -> GenPort,
    ) -> Option<VethBench> {
        let skip = |why: &str| {
            for case in cases {
                ctx.skip(case, why);
            }
        };
        if !is_root() {
            skip(&format!("needs root ({root_for})"));
            return None;
        }
        let setup = match VethPair::new(ns, tag) {
            Ok(s) => s,
            Err(e) => {
                skip(&format!("no namespace and veth pair here: {e}"));
                return None;
            }
        };
        let cpu = ctx.main_cpu();
        let gen_cpu = ctx.cpu_pair().map_or(cpu, |(_, b)| b);
        ctx.note(&note(gen_cpu, cpu));
        let port = port(&setup);
        match Generator::launch(gen_cpu, &setup, port) {
            Ok(generator) => Some(VethBench {
                setup,
                generator,
                cpu,
            }),
            Err(e) => {
                skip(&format!("the generator did not start: {e}"));
                None
            }
        }
    }

    /// Runs each case of `cases` on the receiver CPU: `measure(case, end
    /// a)`; reports its row (`fwd`, one core, `bulk(case)` frames asked per
    /// call) under `name(case)`, or its error; then [`finish`](Self::finish)
    /// with the cases' lines.
    pub fn run_cases<C, M>(
        self,
        ctx: &mut Ctx,
        cases: &[C],
        name: fn(C) -> &'static str,
        bulk: fn(C) -> Option<usize>,
        measure: M,
    ) where
        C: Copy + Send + 'static,
        M: Fn(C, &str) -> Result<CaseFigures, String> + Copy + Send + 'static,
    {
        let mut lines = Vec::new();
        for &case in cases {
            let iface = self.setup.a.clone();
            let figures = on_lcore(self.cpu, move || measure(case, &iface));
            let result = figures.map(|f| {
                lines.push(f.line);
                let mut row = BenchResult::new(
                    "fwd",
                    name(case).to_owned(),
                    1,
                    f.cycles_per_op,
                    mops(f.received.packets, f.received.cycles),
                );
                row.ops = f.received.packets;
                row.bulk = bulk(case);
                row
            });
            ctx.report(name(case), result);
        }
        self.finish(ctx, lines);
    }

    /// Stops the generator, prints `lines` and the generator's line as
    /// notes, and removes the namespace and veth pair.
    fn finish(self, ctx: &Ctx, mut lines: Vec<String>) {
        lines.push(self.generator.finish());
        for l in lines {
            ctx.note(&l);
        }
        drop(self.setup);
    }
}

/// What one receiver case measured: its row's figures and the line
/// printed after the rows.
pub struct CaseFigures {
    /// Frames, calls and ticks of the timed region.
    pub received: Received,
    /// The row's cycles per packet.
    pub cycles_per_op: f64,
    /// What else it saw (calls, drops), one line.
    pub line: String,
}

/// Calls `receive` (how many frames one call took) until it takes any, for
/// at most 10 s: the generator's frames are arriving.
pub fn await_first_frame(mut receive: impl FnMut() -> usize) -> Result<(), String> {
    let t = Instant::now();
    while receive() == 0 {
        if t.elapsed() > FIRST_FRAME_WAIT {
            return Err(format!(
                "nothing arrived from the generator within {} s",
                FIRST_FRAME_WAIT.as_secs()
            ));
        }
    }
    Ok(())
}

/// What [`timed_receive`] saw.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Frames taken.
    pub packets: u64,
    /// TSC ticks of the whole timed region.
    pub cycles: u64,
    /// Calls that took frames.
    pub calls: u64,
}

/// The timed region of a receiver: calls `receive` (how many frames one
/// call took; 0 when none were there) until `ops` frames arrived or
/// [`MAX_TIME`] passed, and hands `busy` the TSC ticks and the frames of
/// each call that took any. Empty calls are not timed: the receiver is
/// faster than the generator, and they would measure the sender.
pub fn timed_receive(
    ops: u64,
    mut receive: impl FnMut() -> usize,
    mut busy: impl FnMut(u64, usize),
) -> Received {
    let (mut packets, mut calls, mut empty) = (0u64, 0u64, 0u32);
    let deadline = Instant::now() + MAX_TIME;
    let start = rdtsc_ordered();
    while packets < ops {
        let t0 = rdtsc_ordered();
        let n = receive();
        if n == 0 {
            // The clock only now and then: empty polls are many.
            empty = empty.wrapping_add(1);
            if empty.is_multiple_of(1024) && Instant::now() > deadline {
                break;
            }
            continue;
        }
        busy(rdtsc_ordered() - t0, n);
        calls += 1;
        packets += n as u64;
        if packets & 0xfff < n as u64 && Instant::now() > deadline {
            break;
        }
    }
    Received {
        packets,
        cycles: rdtsc_ordered() - start,
        calls,
    }
}

/// What a port receiver does around each Rx call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortReceive {
    /// Put completed Tx buffers straight back on the Rx side
    /// (`recycle_mbufs`) before each call.
    pub recycle: bool,
    /// Send the frames back out of the same port (testpmd's io forwarding
    /// on one port), else free them.
    pub send_back: bool,
}

/// Receives on queue 0 of the port `spec` opens, on an mbuf pool of its own
/// (`pool_name`, 8191 mbufs, cache 256) and with `config` applied to its
/// configuration: waits for the first frame, then runs [`timed_receive`]
/// with one `rx_burst` of up to [`BURST`] frames per call, doing what `how`
/// says around it; `busy` as there. Then the port stops and its pool must
/// be full again. Returns what was received and the port's xstats.
pub fn port_receive(
    spec: &str,
    pool_name: &str,
    config: impl FnOnce(PortConfig) -> PortConfig,
    how: PortReceive,
    ops: u64,
    busy: impl FnMut(u64, usize),
) -> Result<(Received, Vec<(String, u64)>), String> {
    let pool = MbufPool::new(MbufPoolConfig {
        name: pool_name.into(),
        size: 8191,
        cache_size: 256,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let mut port = sluice::driver::open(spec, config(PortConfig::new(Some(pool.clone()))))
        .map_err(|e| e.to_string())?;
    port.start().map_err(|e| e.to_string())?;
    let received = port
        .queues_mut()
        .map_err(|e| e.to_string())
        .and_then(|(rxq, txq)| {
            let (rx, tx) = (rxq[0].as_mut(), txq[0].as_mut());
            let mut b: Burst<64> = Burst::new();
            await_first_frame(|| rx.rx_burst(b.capped(BURST)))?;
            b.clear();
            let receive = || {
                if how.recycle {
                    let _ = recycle_mbufs(&mut *rx, &mut *tx);
                }
                let n = rx.rx_burst(b.capped(BURST));
                if n != 0 {
                    if how.send_back {
                        tx.tx_burst(&mut b);
                    }
                    b.clear();
                }
                n
            };
            Ok(timed_receive(ops, receive, busy))
        });
    port.stop();
    let xstats = port.xstats();
    drop(port);
    pool.flush_local_cache();
    if !pool.is_full() {
        return Err("the mbuf pool is not full after the run".into());
    }
    Ok((received?, xstats))
}

/// A plain `AF_PACKET` socket (no ring) bound to one interface.
pub struct RawSocket {
    fd: OwnedFd,
}

impl RawSocket {
    /// Opens and binds it to `iface`, every protocol.
    pub fn bind(iface: &str) -> Result<RawSocket, String> {
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
        Ok(RawSocket { fd })
    }

    /// One non-blocking `recv` into `buf`: its length, or ≤ 0 when nothing
    /// was there.
    #[inline]
    pub fn recv(&self, buf: &mut [u8]) -> isize {
        // SAFETY: `buf` is writable for its length.
        unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        }
    }

    /// The kernel's drops for this socket since the last call
    /// (`PACKET_STATISTICS`), if it says.
    pub fn drops(&self) -> Option<u64> {
        let mut st = [0u32; 2];
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: `st` is a writable `struct tpacket_stats` of `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                st.as_mut_ptr().cast(),
                &mut len,
            )
        };
        (r == 0).then_some(u64::from(st[1]))
    }
}
