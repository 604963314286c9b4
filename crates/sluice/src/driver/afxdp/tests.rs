//! afxdp against the kernel: veth pairs with one end in a test namespace
//! (`sluice-netns`), frames both ways through a raw socket there, modes,
//! multi-queue, recycling, restarts and bad input. Root only: each test
//! skips, saying why, where namespaces cannot be made (under CI as root it
//! fails instead).

use std::time::{Duration, Instant};

use sluice_netns::{Netns, RawSocket, Veth};

use super::link_info;
use crate::mbuf::{Burst, MbufPool, MbufPoolConfig};
use crate::mempool::HugepagePolicy;
use crate::port::{Port, PortConfig, recycle_mbufs};
use crate::test_support::{TestPool, assert_pool_full, assert_pool_full_with};

/// Longest any wait for frames takes.
const WAIT: Duration = Duration::from_secs(10);

/// Our test frames' EtherType (IEEE local experimental).
const ETHERTYPE: u16 = 0x88b5;

/// Says, past the test harness's capture, that (part of) a test was
/// skipped for lack of a capability, and why; under CI as root it fails
/// instead ([`sluice_netns::skip_is_failure`]).
pub(super) fn skipped(why: &str) {
    sluice_netns::skip_or_fail(sluice_netns::Need::Capability, why);
}

/// A pool of `size` mbufs on plain pages.
fn plain_pool(name: &str, size: u32) -> MbufPool {
    TestPool::new(size)
        .name(name)
        .hugepages(HugepagePolicy::Never)
        .build()
}

/// A namespace with a veth pair into it: `veth.a()` (root) is for Sluice,
/// `veth.b()` is in `ns`. `None` (after printing why) where the machine
/// cannot.
fn veth_into_ns(tag: &str) -> Option<(Netns, Veth)> {
    if sluice_netns::skip_unless_root() {
        return None;
    }
    let ns = Netns::new(tag).unwrap();
    let veth = Veth::into_ns(&ns).unwrap();
    Some((ns, veth))
}

/// Opens an afxdp port on `iface` with `extra` spec keys.
fn open(iface: &str, extra: &str, pool: &MbufPool, queues: u16) -> Result<Port, String> {
    let spec = format!("afxdp:iface={iface}{extra}");
    let config = PortConfig::new(Some(pool.clone()))
        .queues(queues, queues)
        .nb_rxd(256)
        .nb_txd(256);
    crate::driver::open(&spec, config).map_err(|e| e.to_string())
}

/// A packet socket on the peer end of the test's veth: sends frames as
/// given, receives the test's own (by EtherType).
struct Peer(RawSocket);

impl Peer {
    /// A packet socket on `ifname` in `ns`.
    fn on(ns: &Netns, ifname: &str) -> Peer {
        Peer(RawSocket::open(ns, ifname).unwrap())
    }

    fn send(&self, frame: &[u8]) {
        self.0.send(frame).unwrap();
    }

    /// The next test frame that arrived, or `None` once none came for
    /// 100 ms.
    fn recv(&self) -> Option<Vec<u8>> {
        let ours = |f: &[u8]| f.len() >= 14 && u16::from_be_bytes([f[12], f[13]]) == ETHERTYPE;
        self.0
            .recv_frames(1, Duration::from_millis(100), ours)
            .unwrap()
            .pop()
    }
}

/// Test frame `seq` of `len` bytes: broadcast, our EtherType, a payload
/// that tells the sequence number and direction `dir`.
fn frame(seq: u32, len: usize, dir: u8) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[0x02, 0x5c, 0, 0, 0, dir]);
    f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[18..].iter_mut().enumerate() {
        *b = (seq as usize * 7 + i) as u8 ^ dir;
    }
    f
}

/// Receives on every Rx queue of `port` until `n` of our frames came or
/// [`WAIT`] passed; returns their bytes (in arrival order per queue).
fn receive(port: &mut Port, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let end = Instant::now() + WAIT;
    let mut burst: Burst = Burst::new();
    while got.len() < n && Instant::now() < end {
        for q in 0..port.nb_rx_queues() {
            port.rx_queue(q).unwrap().rx_burst(&mut burst);
            for m in burst.iter() {
                let d = m.data();
                if d.len() >= 14 && u16::from_be_bytes([d[12], d[13]]) == ETHERTYPE {
                    got.push(d.to_vec());
                }
            }
            burst.clear();
        }
    }
    got
}

/// Whether an XDP program is attached to `iface`.
fn xdp_attached(iface: &str) -> bool {
    link_info(iface).unwrap().xdp.is_some()
}

/// Frames sent into the peer end arrive as mbufs, intact; frames Sluice
/// sends arrive at a raw socket in the peer namespace, intact; the pool is
/// full at the end and no program stays attached — in each XDP mode.
fn both_ways(mode: &str, wakeup: bool) {
    let Some((ns, veth)) = veth_into_ns("both") else {
        return;
    };
    let pool = plain_pool("afxdp_both", 2047);
    let extra = format!(",xdp_mode={mode},bind=copy,wakeup={wakeup}");
    let mut port = open(veth.a(), &extra, &pool, 1).unwrap();
    port.start().unwrap();
    assert!(xdp_attached(veth.a()));
    let native = port.counters().xstats.get("xdp_native");
    assert_eq!(native, Some((mode == "native") as u64));
    assert_eq!(port.counters().xstats.get("xsk_zerocopy"), Some(0));
    let peer = Peer::on(&ns, veth.b());

    // Into Sluice: 300 frames of sizes 60..=1514, 50 at a time (the Rx
    // ring holds 256).
    let sizes: Vec<usize> = (0..300).map(|i| 60 + (i * 97) % 1455).collect();
    let mut got = Vec::new();
    for chunk in (0..sizes.len()).collect::<Vec<_>>().chunks(50) {
        for &i in chunk {
            peer.send(&frame(i as u32, sizes[i], 1));
        }
        got.extend(receive(&mut port, chunk.len()));
    }
    assert_eq!(got.len(), sizes.len(), "frames received");
    for (i, f) in got.iter().enumerate() {
        assert_eq!(f, &frame(i as u32, sizes[i], 1), "frame {i}");
    }
    let s = port.stats();
    assert!(s.rx_packets >= 300 && s.rx_bytes >= sizes.iter().sum::<usize>() as u64);

    // Out of Sluice: 300 frames built in mbufs of the pool.
    let mut sent = 0usize;
    let end = Instant::now() + WAIT;
    while sent < sizes.len() && Instant::now() < end {
        let mut b: Burst = Burst::new();
        for (i, &len) in sizes.iter().enumerate().skip(sent).take(32) {
            let m = pool.alloc_from_slice(&frame(i as u32, len, 2)).unwrap();
            b.push(m).unwrap();
        }
        sent += port.tx_queue(0).unwrap().tx_burst(&mut b);
    }
    let mut out = Vec::new();
    while out.len() < sizes.len() {
        match peer.recv() {
            Some(f) => out.push(f),
            None if Instant::now() < end => {}
            None => break,
        }
    }
    assert_eq!(out.len(), sizes.len(), "frames arrived at the raw socket");
    for (i, f) in out.iter().enumerate() {
        assert_eq!(f, &frame(i as u32, sizes[i], 2), "frame {i}");
    }
    assert_eq!(port.stats().tx_packets, 300);
    let kicks = port.counters().xstats.get("tx_wakeups").unwrap();
    assert!(
        kicks >= 10,
        "copy mode wakes the kernel for every burst: {kicks}"
    );
    port.stop();
    assert!(!xdp_attached(veth.a()), "the program is detached at stop");
    assert_pool_full(&pool);
    let x = port.xstats();
    let get = |n: &str| x.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
    assert_eq!(get("rx_bad_addrs"), Some(0));
    assert_eq!(get("tx_bad_addrs"), Some(0));
    assert_eq!(get("xsk_leaked_frames"), Some(0));
    assert!(get("rx_dropped").is_some() && get("tx_ring_empty_descs").is_some());
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn frames_both_ways_native_copy() {
    both_ways("native", true);
}

#[test]
fn frames_both_ways_generic_copy() {
    both_ways("generic", true);
}

/// Without need-wakeup every Tx burst wakes the kernel; the same checks.
#[test]
fn frames_both_ways_without_need_wakeup() {
    both_ways("native", false);
}

/// The spec of a port on `iface` with `extra` keys.
fn spec(iface: &str, extra: &str) -> String {
    format!("afxdp:iface={iface}{extra}")
}

#[test]
fn a_missing_interface_is_an_error_naming_it() {
    let pool = plain_pool("afxdp_missing", 255);
    assert_eq!(
        open("sluice_nope0", "", &pool, 1).unwrap_err(),
        "afxdp port 'afxdp:iface=sluice_nope0': no interface named 'sluice_nope0'"
    );
    assert_eq!(
        open("", "", &pool, 1).unwrap_err(),
        "port spec 'afxdp:iface=': key 'iface' has no value"
    );
    assert_eq!(
        crate::driver::open("afxdp:queue=1", PortConfig::new(Some(pool.clone())))
            .unwrap_err()
            .to_string(),
        "port spec 'afxdp:queue=1': driver 'afxdp' needs key 'iface'"
    );
    assert_eq!(
        open("lo", ",xdp_mode=fast", &pool, 1).unwrap_err(),
        "port spec 'afxdp:iface=lo,xdp_mode=fast': key 'xdp_mode' = 'fast' is not one of \
         native, generic, auto"
    );
    assert_eq!(
        open("lo", ",fill=1000", &pool, 1).unwrap_err(),
        "afxdp port 'afxdp:iface=lo,fill=1000': fill ring of 1000 entries: not a power of two"
    );
    assert_pool_full(&pool);
}

#[test]
fn a_queue_the_interface_lacks_is_an_error() {
    let Some((_ns, veth)) = veth_into_ns("noq") else {
        return;
    };
    let pool = plain_pool("afxdp_noq", 2047);
    let a = veth.a();
    assert_eq!(
        open(a, ",queue=3", &pool, 1).unwrap_err(),
        format!(
            "afxdp port '{}': {a} has 1 Rx queue; queue 3 does not exist",
            spec(a, ",queue=3")
        )
    );
    assert_eq!(
        open(a, "", &pool, 2).unwrap_err(),
        format!(
            "afxdp port '{}': {a} has 1 Rx queue; queue 1 does not exist",
            spec(a, "")
        )
    );
    assert!(!xdp_attached(a));
    assert_pool_full(&pool);
}

#[test]
fn zero_copy_on_veth_is_a_clear_error_and_auto_falls_back_to_copy() {
    let Some((_ns, veth)) = veth_into_ns("zc") else {
        return;
    };
    let a = veth.a();
    // On 4 KiB pages the frames do not allow zero-copy at all.
    let p = plain_pool("afxdp_zc", 2047);
    assert_eq!(
        open(a, ",bind=zerocopy", &p, 1).unwrap_err(),
        format!(
            "afxdp port '{}': zero-copy needs a hugepage-backed pool: pool 'afxdp_zc' is on 4 \
             KiB pages, where most of its 2304-byte frames straddle two pages a device need \
             not see as contiguous; reserve hugepages or use bind=copy",
            spec(a, ",bind=zerocopy")
        )
    );
    // On hugepages they do, and veth's driver says no.
    match MbufPool::new(MbufPoolConfig {
        name: "afxdp_zc_huge".into(),
        size: 2047,
        cache_size: 0,
        hugepages: HugepagePolicy::Require,
        ..Default::default()
    }) {
        Err(e) => sluice_netns::skip_or_fail(
            sluice_netns::Need::Hugepages,
            &format!("the hugepage part: no hugepages ({e})"),
        ),
        Ok(huge) => {
            let mut port = open(a, ",bind=zerocopy", &huge, 1).unwrap();
            assert_eq!(
                port.start().unwrap_err().to_string(),
                format!(
                    "afxdp port '{}' queue 0: {a} cannot bind queue 0 in zero-copy mode (its \
                     driver has no AF_XDP zero-copy support); use bind=copy or bind=auto",
                    spec(a, ",bind=zerocopy")
                )
            );
            assert!(!xdp_attached(a));
            drop(port);
            assert_pool_full(&huge);
            // Auto tries zero-copy, then binds in copy mode.
            let mut port = open(a, ",bind=auto", &huge, 1).unwrap();
            port.start().unwrap();
            assert_eq!(port.counters().xstats.get("xsk_zerocopy"), Some(0));
            drop(port);
            assert_pool_full(&huge);
        }
    }
    let mut port = open(a, ",bind=auto", &p, 1).unwrap();
    port.start().unwrap();
    assert_eq!(port.counters().xstats.get("xsk_zerocopy"), Some(0));
    port.stop();
    assert_pool_full(&p);
}

#[test]
fn a_second_socket_on_a_busy_queue_is_a_clear_error() {
    let Some((_ns, veth)) = veth_into_ns("busy") else {
        return;
    };
    let pool = plain_pool("afxdp_busy", 4095);
    let a = veth.a();
    let mut first = open(a, "", &pool, 1).unwrap();
    first.start().unwrap();
    let mut second = open(a, ",xdp_mode=generic", &pool, 1).unwrap();
    assert_eq!(
        second.start().unwrap_err().to_string(),
        format!(
            "afxdp port '{}' queue 0: queue 0 of {a} is busy: another AF_XDP socket is bound to \
             it (still busy after 2 s)",
            spec(a, ",xdp_mode=generic")
        )
    );
    drop(second);
    assert!(xdp_attached(a), "the first port's program stays");
    first.stop();
    assert!(!xdp_attached(a));
    assert_pool_full(&pool);
}

/// Stopping and starting at once rebinds the queue (the bind retries while
/// the kernel releases it), and traffic flows each time.
#[test]
fn restarts_rebind_at_once_and_traffic_flows_each_time() {
    let Some((ns, veth)) = veth_into_ns("restart") else {
        return;
    };
    let pool = plain_pool("afxdp_restart", 2047);
    let mut port = open(veth.a(), "", &pool, 1).unwrap();
    let peer = Peer::on(&ns, veth.b());
    for round in 0..4u32 {
        port.start().unwrap();
        for i in 0..20 {
            peer.send(&frame(round * 100 + i, 100, 1));
        }
        let got = receive(&mut port, 20);
        assert_eq!(got.len(), 20, "round {round}");
        assert_eq!(got[19], frame(round * 100 + 19, 100, 1));
        port.stop();
        assert_pool_full_with(&pool, format_args!("round {round}"));
        assert!(!xdp_attached(veth.a()));
    }
    // Dropped while started: detached, every buffer home.
    port.start().unwrap();
    assert!(xdp_attached(veth.a()));
    drop(port);
    assert!(!xdp_attached(veth.a()));
    assert_pool_full(&pool);
}

/// A veth pair with `queues` queues each way, one end moved into `ns`;
/// deleted on drop.
struct MultiVeth {
    a: String,
    b: String,
}

impl MultiVeth {
    fn new(ns: &Netns, queues: u32) -> MultiVeth {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = std::process::id() % 0xffff;
        let (a, b) = (format!("slmq{id:x}v{n}a"), format!("slmq{id:x}v{n}b"));
        let q = queues.to_string();
        let root = Netns::root();
        root.ip(&[
            "link",
            "add",
            &a,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &b,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ])
        .unwrap();
        let v = MultiVeth { a, b };
        root.sysctl(&format!("net.ipv6.conf.{}.disable_ipv6", v.a), "1")
            .unwrap();
        root.link_up(&v.a).unwrap();
        root.move_link(&v.b, ns).unwrap();
        v
    }
}

impl Drop for MultiVeth {
    fn drop(&mut self) {
        let _ = Netns::root().ip(&["link", "del", &self.a]);
    }
}

/// An IPv4/UDP frame from source port `sport` (so the sender's flow hash
/// spreads frames over its Tx queues, and veth hands Tx queue k's frames to
/// Rx queue k).
fn udp_frame(sport: u16, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 80];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[0x02, 0x5c, 0, 0, 0, 3]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&66u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 77, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 77, 0, 2]);
    let sum = crate::net::checksum::checksum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&46u16.to_be_bytes());
    f[42..46].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Two queues, one socket each: frames of many flows arrive on both, every
/// one exactly once.
#[test]
fn two_queues_each_with_its_socket_receive_every_frame() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let ns = Netns::new("mq").unwrap();
    let veth = MultiVeth::new(&ns, 2);
    let pool = plain_pool("afxdp_mq", 4095);
    let spec = format!("afxdp:iface={},xdp_mode=native", veth.a);
    let config = PortConfig::new(Some(pool.clone()))
        .queues(2, 2)
        .nb_rxd(256)
        .nb_txd(256);
    let mut port = crate::driver::open(&spec, config).unwrap();
    port.start().unwrap();
    let peer = Peer::on(&ns, &veth.b);
    let total = 400u32;
    let mut seen = vec![0u32; total as usize];
    let mut per_queue = [0u64; 2];
    let mut burst: Burst = Burst::new();
    for chunk in 0..total / 50 {
        for i in chunk * 50..(chunk + 1) * 50 {
            peer.send(&udp_frame(1000 + (i % 64) as u16, i));
        }
        let end = Instant::now() + WAIT;
        let mut got = 0;
        while got < 50 && Instant::now() < end {
            for (q, count) in per_queue.iter_mut().enumerate() {
                port.rx_queue(q).unwrap().rx_burst(&mut burst);
                for m in burst.iter() {
                    let d = m.data();
                    if d.len() == 80 && d[23] == 17 {
                        let seq = u32::from_be_bytes(d[42..46].try_into().unwrap());
                        seen[seq as usize] += 1;
                        *count += 1;
                        got += 1;
                    }
                }
                burst.clear();
            }
        }
    }
    assert!(seen.iter().all(|&c| c == 1), "each frame once: {seen:?}");
    assert!(
        per_queue[0] > 0 && per_queue[1] > 0,
        "both queues: {per_queue:?}"
    );
    let s = port.stats();
    assert_eq!(
        s.rx_queues[0].packets + s.rx_queues[1].packets,
        total as u64
    );
    drop(port);
    assert_pool_full(&pool);
    drop(veth);
}

/// One port reflecting what it receives, with a recycle step before every
/// receive: sent frames go from the completion ring straight back to the
/// fill ring; every frame comes back intact and the pool is full at the end.
#[test]
fn recycling_moves_completed_frames_into_the_fill_ring() {
    let Some((ns, veth)) = veth_into_ns("recycle") else {
        return;
    };
    let pool = plain_pool("afxdp_recycle", 2047);
    let mut port = open(veth.a(), "", &pool, 1).unwrap();
    assert!(port.rx_queue_recycles(0).unwrap() && port.tx_queue_recycles(0).unwrap());
    port.start().unwrap();
    let peer = Peer::on(&ns, veth.b());
    let total = 2000u32;
    let mut back = 0u32;
    let mut burst: Burst = Burst::new();
    for chunk in 0..total / 100 {
        for i in chunk * 100..(chunk + 1) * 100 {
            peer.send(&frame(i, 60 + (i as usize % 900), 1));
        }
        let want = (chunk + 1) * 100;
        let end = Instant::now() + WAIT;
        while back < want && Instant::now() < end {
            let (rx, tx) = port.queues_mut().unwrap();
            recycle_mbufs(&mut *rx[0], &mut *tx[0]).unwrap();
            rx[0].rx_burst(&mut burst);
            while !burst.is_empty() {
                tx[0].tx_burst(&mut burst);
            }
            while let Some(f) = peer.recv() {
                assert_eq!(
                    f,
                    frame(back, 60 + (back as usize % 900), 1),
                    "frame {back}"
                );
                back += 1;
                if back == want {
                    break;
                }
            }
        }
    }
    assert_eq!(back, total);
    let c = port.counters();
    let x = &c.xstats;
    let (rxr, txr) = (x.get("rx_recycled").unwrap(), x.get("tx_recycled").unwrap());
    assert!(rxr > 0, "rx_recycled {rxr}");
    assert_eq!(rxr, txr);
    assert_eq!(x.get("recycle_fallbacks"), Some(0));
    port.stop();
    assert_pool_full(&pool);
}

/// Drops `CAP_IPC_LOCK` from the calling thread's effective set (threads
/// have their own capability sets).
fn drop_ipc_lock_in_this_thread() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    let mut hdr = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [[0u32; 3]; 2];
    // SAFETY: capget/capset with a version-3 header and two data halves.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()),
            0
        );
        data[0][0] &= !(1 << 14);
        assert_eq!(libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()), 0);
    }
    assert!(!super::memlock::has_cap_ipc_lock());
}

/// Without `CAP_IPC_LOCK` a UMEM larger than `RLIMIT_MEMLOCK` is refused at
/// setup with the limit named; one that fits works, and a second that
/// fits alone but not beside it is refused by the kernel, explained.
#[test]
fn umem_over_the_memlock_limit_without_cap_ipc_lock_is_a_clear_error() {
    let Some((_ns, veth)) = veth_into_ns("memlock") else {
        return;
    };
    // The soft limit at 8 MiB for the test (a process may always lower
    // it; threads with CAP_IPC_LOCK, every other test's, are not charged).
    let mut saved = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with valid rlimit structs.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut saved), 0);
        // A hard limit below 8 MiB is raised (root may: CAP_SYS_RESOURCE).
        let lim = libc::rlimit {
            rlim_cur: 8 << 20,
            rlim_max: saved.rlim_max.max(8 << 20),
        };
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 {
            skipped(&format!(
                "RLIMIT_MEMLOCK cannot be set to 8 MiB (hard limit {}): {}",
                saved.rlim_max,
                std::io::Error::last_os_error()
            ));
            return;
        }
    }
    struct Restore(libc::rlimit);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: setrlimit with the limits read above.
            unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &self.0) };
        }
    }
    let _restore = Restore(saved);
    let limit = 8u64 << 20;
    let a = veth.a().to_owned();
    std::thread::scope(|s| {
        s.spawn(|| {
            drop_ipc_lock_in_this_thread();
            // 8191 mbufs 2368 bytes apart (37 lines): 18.5 MiB.
            let big = plain_pool("afxdp_big", 8191);
            let e = open(&a, "", &big, 1).unwrap_err();
            assert_eq!(
                e,
                format!(
                    "afxdp port '{}': the UMEM (1 × 18944 KiB, the region of pool 'afxdp_big') \
                     needs 18944 KiB of locked memory, more than RLIMIT_MEMLOCK allows ({} KiB), \
                     and the process lacks CAP_IPC_LOCK: raise the limit (`ulimit -l`) or use a \
                     smaller pool",
                    spec(&a, ""),
                    limit / 1024
                )
            );
            assert_pool_full(&big);
            // 2047 mbufs: 4.5 MiB, charged while the socket is open.
            let small = plain_pool("afxdp_small", 2047);
            let mut port = open(&a, "", &small, 1).unwrap();
            port.start().unwrap();
            let other = plain_pool("afxdp_other", 2047);
            let mut second = open(&a, ",queue=0", &other, 1).unwrap();
            let e = second.start().unwrap_err().to_string();
            assert!(
                e.contains("could not be pinned (ENOBUFS)")
                    && e.contains("RLIMIT_MEMLOCK (8192 KiB)"),
                "{e}"
            );
            drop(second);
            port.stop();
            assert_pool_full(&small);
            assert_pool_full(&other);
        });
    });
}

/// A port with only Tx queues (a generator) sends and attaches no program;
/// a port with only Rx queues receives.
#[test]
fn one_direction_ports_work_and_a_tx_only_one_attaches_nothing() {
    let Some((ns, veth)) = veth_into_ns("onedir") else {
        return;
    };
    let pool = plain_pool("afxdp_onedir", 2047);
    let spec = format!("afxdp:iface={}", veth.a());
    let tx_only = PortConfig::new(Some(pool.clone())).queues(0, 1).nb_txd(256);
    let mut port = crate::driver::open(&spec, tx_only).unwrap();
    port.start().unwrap();
    assert!(!xdp_attached(veth.a()), "no Rx queue, no program");
    let peer = Peer::on(&ns, veth.b());
    let mut b: Burst = Burst::new();
    for i in 0..10 {
        b.push(pool.alloc_from_slice(&frame(i, 64, 2)).unwrap())
            .unwrap();
    }
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut b), 10);
    for i in 0..10 {
        assert_eq!(peer.recv(), Some(frame(i, 64, 2)));
    }
    drop(port);
    assert_pool_full(&pool);
    let rx_only = PortConfig::new(Some(pool.clone())).queues(1, 0).nb_rxd(256);
    let mut port = crate::driver::open(&spec, rx_only).unwrap();
    port.start().unwrap();
    peer.send(&frame(7, 100, 1));
    assert_eq!(receive(&mut port, 1), [frame(7, 100, 1)]);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn frames_over_the_mtu_are_dropped_as_oversize() {
    let Some((ns, veth)) = veth_into_ns("big") else {
        return;
    };
    let pool = plain_pool("afxdp_big", 2047);
    let spec = format!("afxdp:iface={},xdp_mode=generic,bind=copy", veth.a());
    let mut config = PortConfig::new(Some(pool.clone())).nb_rxd(256).nb_txd(256);
    // The veth takes 1500-byte frames; the port only up to 1000 + 18.
    config.mtu = 1000;
    let mut port = crate::driver::open(&spec, config).unwrap();
    port.start().unwrap();
    let peer = Peer::on(&ns, veth.b());
    let lens = [60usize, 1018, 1019, 1400, 60];
    for (i, &len) in lens.iter().enumerate() {
        peer.send(&frame(i as u32, len, 1));
    }
    let got: Vec<usize> = receive(&mut port, 3).iter().map(Vec::len).collect();
    assert_eq!(got, [60, 1018, 60]);
    let x = &port.counters().xstats;
    assert_eq!(x.get("rx_oversize_errors"), Some(2));
    assert_eq!(x.get("rx_runt_errors"), Some(0));
    assert_eq!(port.stats().rx_errors, 2);
    port.stop();
    drop(port);
    assert_pool_full(&pool);
}

/// Frames the Tx queue cannot hand to the kernel are freed and counted by
/// reason: a runt (`tx_runt_errors`) and a chain longer than one buffer
/// (`tx_oversize_errors`, it cannot be copied into one); the frames around
/// them go out.
#[test]
fn frames_the_tx_queue_cannot_send_are_counted_by_reason() {
    let Some((ns, veth)) = veth_into_ns("txreason") else {
        return;
    };
    let pool = plain_pool("afxdp_txreason", 2047);
    let spec = format!("afxdp:iface={}", veth.a());
    let tx_only = PortConfig::new(Some(pool.clone())).queues(0, 1).nb_txd(256);
    let mut port = crate::driver::open(&spec, tx_only).unwrap();
    port.start().unwrap();
    let peer = Peer::on(&ns, veth.b());
    let big = frame(1, 4000, 2);
    let mut chain = pool.alloc_from_slice(&big[..2000]).unwrap();
    chain
        .chain(pool.alloc_from_slice(&big[2000..]).unwrap())
        .map_err(|(e, _)| e)
        .unwrap();
    let mut b: Burst = Burst::new();
    b.push(pool.alloc_from_slice(&frame(0, 64, 2)).unwrap())
        .unwrap();
    b.push(pool.alloc_from_slice(&frame(9, 64, 2)[..10]).unwrap())
        .unwrap();
    b.push(chain).unwrap();
    b.push(pool.alloc_from_slice(&frame(2, 64, 2)).unwrap())
        .unwrap();
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut b), 4);
    assert_eq!(peer.recv(), Some(frame(0, 64, 2)));
    assert_eq!(peer.recv(), Some(frame(2, 64, 2)));
    let s = port.stats();
    assert_eq!((s.tx_packets, s.tx_errors), (2, 2));
    let x = &port.counters().xstats;
    assert_eq!(x.get("tx_runt_errors"), Some(1));
    assert_eq!(x.get("tx_oversize_errors"), Some(1));
    assert_eq!(x.get("tx_layout_errors"), Some(0));
    drop(port);
    assert_pool_full(&pool);
}
