//! What the kernel-port cases of `sluice bench fwd` share (`fwd_afpacket.rs`,
//! `fwd_afxdp.rs`): a network namespace holding end b of a veth pair whose
//! end a stays in the root namespace, removed on drop; a generator that
//! enters the namespace and sends 64-byte UDP frames out of end b through a
//! Sluice port; and a plain `AF_PACKET` socket bound to end a, the receiver
//! the drivers are compared with.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use sluice::lcore::LcoreHandle;
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::net::MacAddr;
use sluice::port::PortConfig;

use crate::app::io::engine::udp_frame;

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
