//! DPDK's `virtio_user` as the guest of a `vhost:` port: `dpdk-testpmd`
//! connects to the port's socket, sets up one queue pair and forwards in
//! `io` mode on its single port (`--port-topology=loop`), so every frame
//! the port sends comes back. The library tester generates the frames and
//! checks every one that returns: none lost, none out of order, none
//! changed, and every buffer back in the pool. testpmd's memory is
//! ordinary pages (`--no-huge`) in one test and hugepages in the other, so
//! the port reads a memory table of memfd regions and one of hugetlbfs
//! regions. A third test asks for packed rings (`packed_vq=1`) and checks
//! in virtio_user's log that they were negotiated.
//!
//! Needs `dpdk-testpmd` (Debian: dpdk) and DPDK's virtio driver, and for
//! the second test 2 MiB hugepages (reserved by the test when too few are
//! free, as root); without them a test says it is skipped, except under
//! CI (`CI=true`), where a missing tool fails it.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::Port;

// Each test file is its own crate and uses only part of the support.
#[allow(dead_code)]
mod testpmd_support;

use testpmd_support::{
    HugePages, IO_LOOP_ARGS, TempDir, Testpmd, echo, open_port, skip, skip_for, wait_link,
};

/// How long testpmd may take to come up, and the rings after it (a bound
/// on the wait, not a measurement).
const TIMEOUT: Duration = Duration::from_secs(120);

/// Frames sent through testpmd and back.
const FRAMES: u64 = 5_000;

/// Fewer frames in flight than either virtqueue holds (256), so testpmd
/// never finds its way back full and drops.
const WINDOW: u64 = 64;

/// Megabytes of memory testpmd's EAL takes.
const EAL_MEMORY_MB: u64 = 128;

/// The DPDK driver testpmd's port needs.
const DRIVER: &str = "librte_net_virtio.so";

/// Starts testpmd with a virtio_user port on `socket`, its memory on
/// hugepages or not, its rings packed or split.
fn start_testpmd(socket: &Path, hugepages: bool, packed: bool) -> Testpmd {
    let prefix = format!(
        "sluice-vhost-port-{hugepages}-{packed}-{}",
        std::process::id()
    );
    let memory = EAL_MEMORY_MB.to_string();
    let mut eal = vec!["--no-pci", "-m", &memory, "--no-telemetry"];
    if hugepages {
        // One file per memory segment list instead of one per page:
        // a few regions in the memory table (vhost-user allows 8);
        // in memory: no hugepage file outlives testpmd.
        eal.extend(["--single-file-segments", "--in-memory"]);
    } else {
        eal.extend(["--no-huge", "--no-shconf"]);
    }
    // The virtio PMD logs the features it negotiated.
    eal.push("--log-level=pmd.net.virtio.init:debug");
    let mut command = Command::new("timeout");
    command
        .args(["150", "dpdk-testpmd"])
        .args(eal)
        // The main and the forwarding lcore, both on CPU 0: runs on
        // any machine.
        .arg("--lcores=0@0,1@0")
        .arg(format!("--file-prefix={prefix}"))
        .arg(format!(
            "--vdev=net_virtio_user0,path={},queues=1{}",
            socket.display(),
            if packed { ",packed_vq=1" } else { "" }
        ))
        .args(["--", "--nb-cores=1"])
        .args(IO_LOOP_ARGS);
    Testpmd::spawn(command, &prefix, TIMEOUT)
}

fn pool() -> MbufPool {
    MbufPool::new(MbufPoolConfig {
        size: 4095,
        ..Default::default()
    })
    .unwrap()
}

/// A frame that is not the tester's: sent until one comes back.
const PROBE: [u8; 60] = [0xee; 60];

/// Sends probe frames, one at a time, until one comes back, and returns
/// how many were sent. The virtio PMD drops what it finds returned in its
/// receive ring when its port starts, which may be after the rings are
/// up: frames sent before then are lost, and the tester would count them
/// so. Probes arriving later are left out of what the tester checks.
fn probe(port: &mut Port, pool: &MbufPool, testpmd: &Testpmd) -> u64 {
    let mut out: Burst = Burst::new();
    let mut back: Burst = Burst::new();
    let deadline = Instant::now() + TIMEOUT;
    let mut sent = 0u64;
    loop {
        assert!(
            Instant::now() < deadline,
            "no probe back:\n{}",
            testpmd.output()
        );
        out.push(pool.alloc_from_slice(&PROBE).unwrap()).unwrap();
        sent += port.tx_queue(0).unwrap().tx_burst(&mut out) as u64;
        out.clear();
        // A bounded wait for this probe before the next one.
        for _ in 0..10_000 {
            port.rx_queue(0).unwrap().rx_burst(&mut back);
            let probes = back.iter().filter(|m| m.to_vec() == PROBE).count();
            back.clear();
            if probes > 0 {
                return sent;
            }
            thread::yield_now();
        }
    }
}

/// Sends probes until one comes back, then FRAMES tester frames out of
/// `port`, and checks each one testpmd sends back.
fn echo_after_probes(port: &mut Port, pool: &MbufPool, testpmd: &Testpmd) {
    let probes_sent = probe(port, pool, testpmd);
    let probes_before = port.stats().rx_packets;
    let probes_back = echo(port, pool, testpmd, FRAMES, WINDOW, Some(&PROBE));
    let stats = port.stats();
    assert_eq!(
        (stats.tx_packets, stats.rx_packets),
        (FRAMES + probes_sent, FRAMES + probes_before + probes_back)
    );
    assert!(probes_before + probes_back <= probes_sent);
}

/// Shared mappings of this process on 2 MiB pages: the frontend's
/// hugetlbfs memory, as the port maps it (the pools' hugepages are
/// private).
fn shared_hugepage_mappings() -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut shared = false;
    let mut n = 0;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if !first.ends_with(':') {
            // A mapping's first line: range, permissions, ...
            shared = words.next().is_some_and(|perms| perms.ends_with('s'));
        } else if first == "KernelPageSize:" && shared && words.next() == Some("2048") {
            n += 1;
        }
    }
    n
}

/// The port and testpmd on a socket in a fresh directory `name`, tester
/// frames there and back; returns testpmd's output.
fn run(name: &str, hugepages: bool, packed: bool) -> String {
    let dir = TempDir::new(&format!("vhost-{name}"));
    let socket = dir.0.join("vhost.sock");
    let pool = pool();
    let log = {
        let mut port = open_port(&format!("vhost:path={}", socket.display()), &pool);
        let testpmd = start_testpmd(&socket, hugepages, packed);
        wait_link(&port, &testpmd);
        if hugepages {
            assert!(
                shared_hugepage_mappings() > 0,
                "the port maps testpmd's hugepages"
            );
        }
        echo_after_probes(&mut port, &pool, &testpmd);
        let log = testpmd.output();
        drop(testpmd);
        port.stop();
        assert_eq!(port.counters().xstats.get("link_downs"), Some(1));
        log
    };
    assert!(!socket.exists(), "the port removes its socket file");
    assert!(pool.is_full(), "{} of 4095 mbufs home", pool.available());
    log
}

#[test]
fn tester_frames_come_back_through_testpmd() {
    if skip(DRIVER) {
        return;
    }
    let features = negotiated(&run("port", false, false));
    // virtio_user takes in-order returns when offered: the port's Rx
    // bursts go back as one used entry each.
    assert_ne!(
        features & (1 << 35),
        0,
        "in-order returns negotiated: {features:#x}"
    );
}

/// The features virtio_user's log says it negotiated.
fn negotiated(log: &str) -> u64 {
    let negotiated = log
        .lines()
        .find_map(|l| l.split("features after negotiate = ").nth(1))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    negotiated.unwrap_or_else(|| panic!("no negotiated features logged:\n{log}"))
}

/// Packed rings: virtio_user asks for them with `packed_vq=1`, and its log
/// of the negotiated features shows `VIRTIO_F_RING_PACKED` (bit 34), and
/// `VIRTIO_F_IN_ORDER` (bit 35) beside it.
#[test]
fn tester_frames_come_back_through_testpmd_over_packed_rings() {
    if skip(DRIVER) {
        return;
    }
    let features = negotiated(&run("port-packed", false, true));
    assert_ne!(
        features & (1 << 34),
        0,
        "packed rings negotiated: {features:#x}"
    );
    assert_ne!(
        features & (1 << 35),
        0,
        "in-order returns negotiated: {features:#x}"
    );
}

#[test]
fn tester_frames_come_back_through_testpmd_on_hugepages() {
    if skip(DRIVER) {
        return;
    }
    // testpmd's memory, and room for a second testpmd test running at
    // the same time.
    let _pages = match HugePages::reserve(2 * EAL_MEMORY_MB / 2) {
        Ok(pages) => pages,
        Err(missing) => {
            skip_for(&missing);
            return;
        }
    };
    run("port-huge", true, false);
}
