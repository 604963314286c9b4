//! The `afxdp` driver end to end, as root: two namespaces A and B whose
//! traffic can only meet through Sluice, forwarding between `afxdp` ports
//! on the root-side ends of two veth pairs. `ping` from A to B gets its
//! replies; a 50 MiB TCP transfer arrives with every byte checked — through
//! `sluice l2fwd`, and through `sluice fwd --engine recycle`, where sent
//! frames go from the completion ring straight back to a fill ring; raw
//! frames cross both ways intact; bad input is a clear error.
//!
//! The namespace ends have their offloads off: a frame redirected to an
//! AF_XDP socket is taken as the sender's stack left it, and a checksum
//! left for hardware to fill in would reach B unfilled.
//!
//! Each test skips with a printed reason where the machine cannot (not
//! root, no `ip`, no namespaces, `ping` or `ethtool` missing; under CI as
//! root it fails instead), removes its namespaces and links on the way out
//! (also when it fails), checks that no XDP program stays attached, and
//! bounds every wait. Nothing is timed: the checks are replies and bytes.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice::driver::afxdp::link_info;
use sluice_netns::{Netns, Output, Proc, RawSocket, Veth};

mod common;
use common::{SLUICE, TRANSFER, assert_transfer_counted, fail, spawn, stop};

/// A host: a namespace with one end of a veth pair (the other, in the
/// root namespace, is Sluice's), offloads off, an address.
struct Host {
    ns: Netns,
    veth: Veth,
    ip: &'static str,
}

impl Host {
    fn new(tag: &str, ip: &'static str) -> Host {
        let ns = Netns::new(tag).unwrap();
        let veth = Veth::into_ns(&ns).unwrap();
        ns.offloads_off(veth.b()).unwrap();
        ns.add_addr(veth.b(), &format!("{ip}/24")).unwrap();
        Host { ns, veth, ip }
    }

    /// The root-side end, for Sluice.
    fn port_iface(&self) -> &str {
        self.veth.a()
    }

    /// The host's MAC address.
    fn mac(&self) -> String {
        self.ns.mac(self.veth.b()).unwrap().to_string()
    }
}

/// Whether an XDP program is attached to `iface`.
fn xdp_attached(iface: &str) -> bool {
    link_info(iface).unwrap().xdp.is_some()
}

/// Waits until Sluice has attached its program to both ports.
fn wait_attached(a: &Host, b: &Host) -> bool {
    sluice_netns::wait_until(Duration::from_secs(60), || {
        xdp_attached(a.port_iface()) && xdp_attached(b.port_iface())
    })
}

/// Once Sluice has attached its programs: pings A → B (5 replies of 5),
/// then the transfer A → B.
fn ping_and_transfer(a: &Host, b: &Host, sluice: Proc<'static>) -> Proc<'static> {
    if !wait_attached(a, b) {
        fail(sluice, "Sluice did not attach its XDP programs within 60 s");
    }
    common::ping_and_transfer(&a.ns, &b.ns, b.ip, sluice)
}

/// What every afxdp run's summary must say: every buffer home, no address
/// the kernel did not get from us, the transfer counted A → B.
fn check_summary(summary: &serde_json::Value, out: &Output) {
    assert_transfer_counted(summary, out);
    for port in summary["ports"].as_array().unwrap() {
        let xstat = xstats(port);
        assert_eq!(xstat("rx_bad_addrs"), 0, "{port}");
        assert_eq!(xstat("tx_bad_addrs"), 0, "{port}");
        assert_eq!(xstat("xsk_leaked_frames"), 0, "{port}");
    }
}

/// A port's xstat by name, from the summary's `[name, value]` pairs.
fn xstats(port: &serde_json::Value) -> impl Fn(&str) -> u64 + '_ {
    move |name| {
        port["xstats"]
            .as_array()
            .unwrap()
            .iter()
            .find(|kv| kv[0] == name)
            .and_then(|kv| kv[1].as_u64())
            .unwrap_or_else(|| panic!("no xstat {name} in {port}"))
    }
}

#[test]
fn ping_and_tcp_cross_l2fwd_over_afxdp() {
    if sluice_netns::skip_unless_root_with(&["ping", "ethtool"]) {
        return;
    }
    let a = Host::new("xa", "10.79.0.1");
    let b = Host::new("xb", "10.79.0.2");
    let out = a.ns.exec(&["ping", "-c", "1", "-W", "1", b.ip]).unwrap();
    assert!(!out.success(), "A reaches B without Sluice: {out}");
    let (pa, pb) = (
        format!("afxdp:iface={}", a.port_iface()),
        format!("afxdp:iface={}", b.port_iface()),
    );
    let (da, db) = (format!("0,{}", a.mac()), format!("1,{}", b.mac()));
    // l2fwd rewrites MACs: the destination of each port is its host's.
    let sluice = spawn(&[
        "l2fwd",
        "--json",
        "-T",
        "5",
        "-p",
        &pa,
        "-p",
        &pb,
        "--dest-mac",
        &da,
        "--dest-mac",
        &db,
    ]);
    let sluice = ping_and_transfer(&a, &b, sluice);
    let (out, summary) = stop(sluice);
    check_summary(&summary, &out);
    for p in summary["ports"].as_array().unwrap() {
        assert_eq!(
            xstats(p)("xdp_native"),
            1,
            "auto picks native XDP on veth: {p}"
        );
    }
    assert!(!xdp_attached(a.port_iface()) && !xdp_attached(b.port_iface()));
}

#[test]
fn tcp_with_recycling_over_afxdp_keeps_every_buffer() {
    if sluice_netns::skip_unless_root_with(&["ping", "ethtool"]) {
        return;
    }
    let a = Host::new("ra", "10.80.0.1");
    let b = Host::new("rb", "10.80.0.2");
    let (pa, pb) = (
        format!("afxdp:iface={}", a.port_iface()),
        format!("afxdp:iface={}", b.port_iface()),
    );
    // The recycle engine forwards unchanged (io) and, before each receive,
    // moves the peer Tx queue's completed frames into the Rx fill ring.
    let sluice = spawn(&[
        "fwd",
        "--engine",
        "recycle",
        "--json",
        "--duration",
        "600",
        "--stats-period",
        "5",
        "-p",
        &pa,
        "-p",
        &pb,
    ]);
    let sluice = ping_and_transfer(&a, &b, sluice);
    let (out, summary) = stop(sluice);
    check_summary(&summary, &out);
    assert_eq!(summary["recycle_errors"], 0, "{summary}");
    let ports = summary["ports"].as_array().unwrap();
    // Port 1 sent the transfer; its completed frames refilled port 0's
    // fill ring (and the ACKs' the other way).
    let r0 = &ports[0]["recycle"];
    let r1 = &ports[1]["recycle"];
    let min = (TRANSFER / 1448 / 2) as u64;
    assert!(r0["rx_recycled"].as_u64().unwrap() >= min, "{summary}");
    assert_eq!(r0["rx_recycled"], r1["tx_recycled"], "{summary}");
    assert_eq!(r1["rx_recycled"], r0["tx_recycled"], "{summary}");
    assert_eq!(r0["recycle_fallbacks"], 0, "{summary}");
    assert_eq!(r1["recycle_fallbacks"], 0, "{summary}");
    assert!(!xdp_attached(a.port_iface()) && !xdp_attached(b.port_iface()));
}

/// Test frame `seq` of `len` bytes going `dir`: broadcast, a local
/// EtherType, a payload that says which frame it is.
fn frame(seq: u32, len: usize, dir: u8) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[0x02, 0x5c, 0, 0, 0, dir]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[18..].iter_mut().enumerate() {
        *b = (seq as usize * 13 + i) as u8 ^ dir;
    }
    f
}

/// Sends `n` frames from `from` and checks that `to` gets each intact, in
/// order: 50 at a time, each group read before the next is sent.
fn frames_across(from: &RawSocket, to: &RawSocket, n: u32, dir: u8) -> u64 {
    let mut bytes = 0u64;
    for group in 0..n / 50 {
        let seqs = group * 50..(group + 1) * 50;
        for s in seqs.clone() {
            from.send(&frame(s, 60 + (s as usize * 31) % 1455, dir))
                .unwrap();
        }
        for s in seqs {
            let want = frame(s, 60 + (s as usize * 31) % 1455, dir);
            let got = loop {
                let f = to
                    .recv(Duration::from_secs(10))
                    .unwrap()
                    .unwrap_or_else(|| panic!("frame {s} ({dir}) did not arrive"));
                if f.len() >= 14 && f[12..14] == [0x88, 0xb5] {
                    break f;
                }
            };
            assert_eq!(got, want, "frame {s} ({dir})");
            bytes += want.len() as u64;
        }
    }
    bytes
}

/// Frames sent by Sluice arrive intact at a raw socket in the peer
/// namespace and vice versa: 1000 each way, in generic XDP mode, counted
/// exactly on the ports.
#[test]
fn raw_frames_cross_afxdp_ports_intact_both_ways() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let na = Netns::new("wa").unwrap();
    let nb = Netns::new("wb").unwrap();
    let va = Veth::into_ns(&na).unwrap();
    let vb = Veth::into_ns(&nb).unwrap();
    let (pa, pb) = (
        format!("afxdp:iface={},xdp_mode=generic", va.a()),
        format!("afxdp:iface={},xdp_mode=generic", vb.a()),
    );
    let sluice = spawn(&[
        "l2fwd",
        "--json",
        "-T",
        "5",
        "--no-mac-updating",
        "-p",
        &pa,
        "-p",
        &pb,
    ]);
    let attached = sluice_netns::wait_until(Duration::from_secs(60), || {
        xdp_attached(va.a()) && xdp_attached(vb.a())
    });
    if !attached {
        fail(sluice, "Sluice did not attach its XDP programs within 60 s");
    }
    let ra = RawSocket::open(&na, va.b()).unwrap();
    let rb = RawSocket::open(&nb, vb.b()).unwrap();
    let ab = frames_across(&ra, &rb, 1000, 1);
    let ba = frames_across(&rb, &ra, 1000, 2);
    let (out, summary) = stop(sluice);
    assert_eq!(summary["pool_full"], true, "{out}");
    let ports = summary["ports"].as_array().unwrap();
    // Nothing else crosses: no addresses, IPv6 off.
    assert_eq!(ports[0]["rx_packets"], 1000, "{summary}");
    assert_eq!(ports[1]["tx_packets"], 1000, "{summary}");
    assert_eq!(ports[1]["rx_packets"], 1000, "{summary}");
    assert_eq!(ports[0]["tx_packets"], 1000, "{summary}");
    assert!(ab > 0 && ba > 0);
    for p in ports {
        assert_eq!(xstats(p)("xdp_native"), 0, "generic mode: {p}");
        assert_eq!(xstats(p)("rx_dropped"), 0, "{p}");
    }
    assert!(!xdp_attached(va.a()) && !xdp_attached(vb.a()));
}

/// `sluice gen` with its defaults sends on an afxdp port (its buffers fit
/// an AF_XDP frame), and the frames arrive at the veth's other end.
#[test]
fn gen_with_its_defaults_sends_on_an_afxdp_port() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let ns = Netns::new("wg").unwrap();
    let v = Veth::into_ns(&ns).unwrap();
    let raw = RawSocket::open(&ns, v.b()).unwrap();
    let port = format!("afxdp:iface={}", v.a());
    let argv = [
        SLUICE,
        "gen",
        "--port",
        &port,
        "--count",
        "200",
        "--duration",
        "2",
        "--json",
        "--no-telemetry",
    ];
    let out = sluice_netns::exec(&argv, Duration::from_secs(120)).unwrap();
    assert!(out.success(), "{out}");
    let last = out.stdout.lines().last().unwrap_or_default();
    let r: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(r["sent"], 200, "{out}");
    // The tester's frames (UDP to port 9 and up, 64 bytes) at the peer.
    let got = raw
        .recv_frames(200, Duration::from_secs(2), |f| f.len() == 64)
        .unwrap();
    assert_eq!(got.len(), 200, "{out}");
    assert!(!xdp_attached(v.a()));
}

/// Runs Sluice with `args` to its end (bounded), with `pre` applied in the
/// child before exec; its standard error, and the exit code must be 1.
fn sluice_err(args: &[&str], pre: Option<fn() -> std::io::Result<()>>) -> String {
    let mut cmd = Command::new(SLUICE);
    cmd.args(args)
        .env("RUNTIME_DIRECTORY", common::runtime_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(f) = pre {
        // SAFETY: `f` makes only async-signal-safe system calls (prctl,
        // setrlimit) between fork and exec.
        unsafe { cmd.pre_exec(f) };
    }
    let mut child = cmd.spawn().expect("sluice starts");
    let end = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("sluice {args:?} did not end within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    stderr
}

/// In the child: no `CAP_IPC_LOCK` after exec (dropped from the bounding
/// set, which bounds what root's exec grants) and `RLIMIT_MEMLOCK` at
/// 8 MiB.
fn without_ipc_lock() -> std::io::Result<()> {
    const PR_CAPBSET_DROP: i32 = 24;
    const CAP_IPC_LOCK: libc::c_ulong = 14;
    // SAFETY: prctl(2) with integer arguments.
    if unsafe { libc::prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let lim = libc::rlimit {
        rlim_cur: 8 << 20,
        rlim_max: 8 << 20,
    };
    // SAFETY: setrlimit(2) with a valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn bad_afxdp_input_is_a_clear_error() {
    assert_eq!(
        sluice_err(
            &[
                "l2fwd",
                "--duration",
                "1",
                "-p",
                "afxdp:iface=sluicenosuch0",
                "-p",
                "null"
            ],
            None
        ),
        "sluice: error: afxdp port 'afxdp:iface=sluicenosuch0': no interface named \
         'sluicenosuch0'\n"
    );
    assert_eq!(
        sluice_err(
            &["l2fwd", "--duration", "1", "-p", "afxdp:iface=lo,bind=fast"],
            None
        ),
        "sluice: error: port spec 'afxdp:iface=lo,bind=fast': key 'bind' = 'fast' is not one \
         of copy, zerocopy, auto\n"
    );
    if sluice_netns::skip_unless_root() {
        return;
    }
    let ns = Netns::new("bad").unwrap();
    let veth = Veth::into_ns(&ns).unwrap();
    let a = veth.a();
    let spec = format!("afxdp:iface={a},queue=4");
    assert_eq!(
        sluice_err(
            &["l2fwd", "--duration", "1", "-p", &spec, "-p", "null"],
            None
        ),
        format!("sluice: error: afxdp port '{spec}': {a} has 1 Rx queue; queue 4 does not exist\n")
    );
    // fwd's default pool (8191 mbufs 2368 bytes apart) is an 18.5 MiB UMEM:
    // 18944 KiB on 4 KiB pages, 20 MiB on 2 MiB hugepages (the pool takes
    // them when the machine has some free).
    let spec = format!("afxdp:iface={a}");
    let err = sluice_err(
        &["l2fwd", "--duration", "1", "-p", &spec, "-p", "null"],
        Some(without_ipc_lock),
    );
    let want = |kib: u32| {
        format!(
            "sluice: error: afxdp port '{spec}': the UMEM (1 × {kib} KiB, the region of pool \
             'fwd') needs {kib} KiB of locked memory, more than RLIMIT_MEMLOCK allows (8192 \
             KiB), and the process lacks CAP_IPC_LOCK: raise the limit (`ulimit -l`) or use a \
             smaller pool\n"
        )
    };
    assert!(err == want(18944) || err == want(20480), "{err}");
    assert!(!xdp_attached(a));
}
