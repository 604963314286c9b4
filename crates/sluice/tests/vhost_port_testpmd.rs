//! DPDK's `virtio_user` as the guest of a `vhost:` port: `dpdk-testpmd`
//! connects to the port's socket, sets up one queue pair and forwards in
//! `io` mode on its single port (`--port-topology=loop`), so every frame
//! the port sends comes back. The test sends numbered frames and checks
//! that each one returns, in order and byte for byte, and that every mbuf
//! is home at the end — with split rings, and with packed rings
//! (`packed_vq=1`, checked negotiated in virtio_user's log).
//!
//! Needs `dpdk-testpmd` (Debian package dpdk): skipped without it, except
//! under CI, where its absence is a failure.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice::driver;
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::PortConfig;

/// Frames sent through testpmd and back.
const FRAMES: u32 = 2000;
/// How long testpmd may take to start and to forward everything (a bound
/// on the wait, not a measurement).
const DEADLINE: Duration = Duration::from_secs(120);

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Frame `seq`: broadcast, from a local MAC, an experimental EtherType,
/// the number, then a pattern; 60 to 1514 bytes.
fn frame(seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 97) % 1455;
    let mut f = Vec::with_capacity(len);
    f.extend([0xff; 6]);
    f.extend([0x02, 0x5e, 0, 0, 0, 1, 0x88, 0xb5]);
    f.extend(seq.to_be_bytes());
    while f.len() < len {
        f.push((f.len() as u32 ^ seq.wrapping_mul(31)) as u8);
    }
    f
}

#[test]
fn frames_sent_to_testpmd_come_back_in_order() {
    forward_through_testpmd("split", "", &[]);
}

/// The same over packed rings: virtio_user asks for them with
/// `packed_vq=1`, and its log of the negotiated features shows
/// `VIRTIO_F_RING_PACKED` (bit 34).
#[test]
fn frames_sent_to_testpmd_over_packed_rings_come_back_in_order() {
    let Some(log) = forward_through_testpmd(
        "packed",
        ",packed_vq=1",
        &["--log-level=pmd.net.virtio.init:debug"],
    ) else {
        return;
    };
    let negotiated = log
        .lines()
        .find_map(|l| l.split("features after negotiate = ").nth(1))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    let features = negotiated.unwrap_or_else(|| panic!("no negotiated features logged:\n{log}"));
    assert_ne!(
        features & (1 << 34),
        0,
        "packed rings negotiated: {features:#x}"
    );
}

/// Forwards [`FRAMES`] frames through testpmd on a `virtio_user` port with
/// these extra vdev options and EAL arguments; returns testpmd's log, or
/// `None` when skipped (no testpmd, not under CI).
fn forward_through_testpmd(name: &str, vdev_options: &str, eal: &[&str]) -> Option<String> {
    if !have("dpdk-testpmd") {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "dpdk-testpmd is missing under CI"
        );
        eprintln!("skipped: no dpdk-testpmd");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("sluice-vhost-port-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vhost.sock");
    let pool = MbufPool::new(MbufPoolConfig {
        size: 4095,
        cache_size: 0,
        ..Default::default()
    })
    .unwrap();
    let mut port = driver::open(
        &format!("vhost:path={}", path.display()),
        PortConfig::new(Some(pool.clone())),
    )
    .unwrap();
    port.start().unwrap();

    let prefix = format!("sluice-vhost-port-{name}-{}", std::process::id());
    let mut testpmd = Command::new("dpdk-testpmd")
        .args([
            "--no-pci",
            "--no-huge",
            "-m",
            "512",
            "--no-shconf",
            // The main and the forwarding lcore, both on CPU 0: runs on
            // any machine.
            "--lcores=0@0,1@0",
        ])
        .arg("--no-telemetry")
        .args(eal)
        .arg(format!("--file-prefix={prefix}"))
        .arg(format!(
            "--vdev=net_virtio_user0,path={},queues=1{vdev_options}",
            path.display()
        ))
        .args([
            "--",
            "--total-num-mbufs=4096",
            "--nb-cores=1",
            "--forward-mode=io",
            "--port-topology=loop",
            "--no-flush-rx",
            "--auto-start",
        ])
        // Forwarding runs until a line arrives on its standard input.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let frames: Vec<Vec<u8>> = (0..FRAMES).map(frame).collect();
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut next = 0usize;
    let mut out: Burst = Burst::new();
    let mut back: Burst = Burst::new();
    let start = Instant::now();
    // The virtio PMD frees what it finds used in its receive ring when its
    // port starts, after the rings are up: frames sent before are lost. A
    // probe frame goes round first, one at a time, until one comes back;
    // probes arriving later are left out of what is checked.
    let probe = frame(u32::MAX);
    let (mut probes_sent, mut probes_back) = (0u64, 0u64);
    while probes_back == 0 && start.elapsed() < DEADLINE {
        if out.is_empty() {
            out.push(pool.alloc_from_slice(&probe).unwrap()).unwrap();
        }
        probes_sent += port.tx_queue(0).unwrap().tx_burst(&mut out) as u64;
        // A bounded wait for this probe before the next one.
        for _ in 0..10_000 {
            port.rx_queue(0).unwrap().rx_burst(&mut back);
            probes_back += back.iter().filter(|m| m.to_vec() == probe).count() as u64;
            back.clear();
            if probes_back > 0 || !out.is_empty() {
                break;
            }
            std::thread::yield_now();
        }
    }
    // Keep at most 64 frames in flight: testpmd's rings never overflow.
    while got.len() < frames.len() && start.elapsed() < DEADLINE {
        while !out.is_full() && next < frames.len() && next - got.len() < 64 {
            out.push(pool.alloc_from_slice(&frames[next]).unwrap())
                .unwrap();
            next += 1;
        }
        let sent = port.tx_queue(0).unwrap().tx_burst(&mut out);
        if sent == 0 && !out.is_empty() {
            // Not ready yet (testpmd starting): take the frames back.
            next -= out.len();
            out.clear();
        }
        port.rx_queue(0).unwrap().rx_burst(&mut back);
        for f in back.iter().map(|m| m.to_vec()) {
            if f == probe {
                probes_back += 1;
            } else {
                got.push(f);
            }
        }
        back.clear();
        std::thread::yield_now();
    }
    drop(out);

    if let Some(mut stdin) = testpmd.stdin.take() {
        let _ = stdin.write_all(b"\n");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while testpmd.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = testpmd.kill();
    let output = testpmd.wait_with_output().unwrap();
    let stats = port.stats();
    let xstats = port.xstats();
    port.stop();
    drop(port);
    let _ = std::fs::remove_dir_all(&dir);
    for base in [
        Some("/var/run".into()),
        std::env::var_os("XDG_RUNTIME_DIR"),
        Some("/tmp".into()),
    ]
    .into_iter()
    .flatten()
    {
        let _ = std::fs::remove_dir_all(std::path::Path::new(&base).join("dpdk").join(&prefix));
    }
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        got.len(),
        frames.len(),
        "frames back; port {stats:?} {xstats:?}\n{log}"
    );
    assert!(got == frames, "every frame back, in order, byte for byte");
    assert_eq!(stats.tx_packets, u64::from(FRAMES) + probes_sent);
    assert_eq!(stats.rx_packets, u64::from(FRAMES) + probes_back);
    assert!(
        pool.is_full(),
        "{} of {} mbufs home",
        pool.available(),
        4095
    );
    Some(log)
}
