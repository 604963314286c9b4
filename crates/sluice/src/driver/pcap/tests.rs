use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::PcapDriver;
use super::format::{PcapReader, PcapWriter};
use super::rx::Clock;
use crate::driver::open;
use crate::mbuf::{Burst, Mbuf, MbufPool, MbufPoolConfig};
use crate::port::{Offloads, Port, PortConfig, PortSpec};

fn pool(size: u32, data_room: u16) -> MbufPool {
    MbufPool::new(MbufPoolConfig {
        size,
        cache_size: 0,
        data_room,
        ..Default::default()
    })
    .unwrap()
}

/// A path in the temporary directory, removed when dropped.
struct TmpFile(String);

impl TmpFile {
    fn new(name: &str) -> TmpFile {
        let p = std::env::temp_dir().join(format!("sluice-{}-{name}.pcap", std::process::id()));
        TmpFile(p.to_string_lossy().into_owned())
    }
}

impl Drop for TmpFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A packet of `len` bytes whose content depends on `seed`.
fn frame(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// `data` in an mbuf chain of segments of at most `seg` bytes.
fn chained(pool: &MbufPool, data: &[u8], seg: usize) -> Mbuf {
    let mut parts = data.chunks(seg);
    let mut head = pool.alloc_from_slice(parts.next().unwrap()).unwrap();
    for p in parts {
        head.chain(pool.alloc_from_slice(p).unwrap()).unwrap();
    }
    head
}

/// Writes `frames` through a pcap port with spec `tx=<path><extra>`.
fn write_through_port(path: &str, extra: &str, pool: &MbufPool, frames: &[Vec<u8>]) -> Port {
    let mut port = open(&format!("pcap:tx={path}{extra}"), PortConfig::new(None)).unwrap();
    port.start().unwrap();
    let mut burst: Burst = Burst::new();
    for f in frames {
        burst.push(chained(pool, f, 2048)).unwrap();
    }
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), frames.len());
    port
}

/// Every packet of `path`: (captured bytes, original length).
fn read_file(path: &str) -> Vec<(Vec<u8>, u32)> {
    let bytes = std::fs::read(path).unwrap();
    let mut r = PcapReader::new(&bytes[..]).unwrap();
    let mut d = Vec::new();
    let mut out = Vec::new();
    while let Some(rec) = r.next_into(&mut d).unwrap() {
        out.push((d.clone(), rec.origlen));
    }
    out
}

/// Receives everything the port delivers now.
fn receive_all(port: &mut Port) -> Vec<Mbuf> {
    let mut out = Vec::new();
    let mut burst: Burst<4> = Burst::new();
    while port.rx_queue(0).unwrap().rx_burst(&mut burst) > 0 {
        out.extend(burst.drain_front(4));
    }
    out
}

#[test]
fn write_then_read_back_bit_identical() {
    let file = TmpFile::new("roundtrip");
    let small = pool(63, 2048);
    let frames: Vec<Vec<u8>> = [60usize, 64, 1514, 2048, 2049, 9000]
        .iter()
        .enumerate()
        .map(|(i, &n)| frame(n, i as u8))
        .collect();
    let port = write_through_port(&file.0, "", &small, &frames);
    assert_eq!(port.stats().tx_packets, 6);
    assert_eq!(
        port.stats().tx_bytes,
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    drop(port);
    let on_disk = read_file(&file.0);
    assert_eq!(on_disk.len(), 6);
    for (f, (d, orig)) in frames.iter().zip(&on_disk) {
        assert_eq!((d, *orig as usize), (f, f.len()));
    }

    // Read back into 2048-byte buffers, chaining the long ones.
    let mut c = PortConfig::new(Some(small.clone())).port_id(7);
    c.rx_offloads |= Offloads::MULTI_SEG;
    c.mtu = 9000;
    let mut rx = open(&format!("pcap:rx={}", file.0), c).unwrap();
    rx.start().unwrap();
    let got = receive_all(&mut rx);
    assert_eq!(got.len(), 6);
    for (f, m) in frames.iter().zip(&got) {
        assert_eq!(
            (m.to_vec(), m.pkt_len() as usize, m.port()),
            (f.clone(), f.len(), 7)
        );
        assert_eq!(m.nb_segs() as usize, f.len().div_ceil(2048));
    }
    assert_eq!(
        rx.stats().rx_bytes,
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    drop(got);
    drop(rx);

    // Into 9216-byte buffers: every packet in one segment.
    let big = pool(15, 9216);
    let mut c = PortConfig::new(Some(big.clone()));
    c.mtu = 9000;
    let mut rx = open(&format!("pcap:rx={}", file.0), c).unwrap();
    rx.start().unwrap();
    let got = receive_all(&mut rx);
    assert!(got.iter().all(|m| m.nb_segs() == 1));
    assert_eq!(got.iter().map(|m| m.to_vec()).collect::<Vec<_>>(), frames);
    drop(got);
    drop(rx);

    // Into 2048-byte buffers without the offload: the two long ones are
    // errors (oversize for the data room), skipped.
    let mut c = PortConfig::new(Some(small.clone()));
    c.mtu = 9000;
    let mut rx = open(&format!("pcap:rx={}", file.0), c).unwrap();
    rx.start().unwrap();
    let got = receive_all(&mut rx);
    assert_eq!(
        got.iter().map(|m| m.to_vec()).collect::<Vec<_>>(),
        frames[..4]
    );
    assert_eq!((rx.stats().rx_packets, rx.stats().rx_errors), (4, 2));
    assert_eq!(rx.counters().xstats.get("rx_oversize_errors"), Some(2));
    drop(got);
    drop(rx);
    assert!(small.is_full() && big.is_full());
}

#[test]
fn snaplen_cuts_the_record_and_keeps_the_original_length() {
    let file = TmpFile::new("snaplen");
    let pool = pool(15, 2048);
    let frames = vec![frame(60, 1), frame(100, 2), frame(300, 3), frame(5000, 4)];
    drop(write_through_port(&file.0, ",snaplen=100", &pool, &frames));
    let bytes = std::fs::read(&file.0).unwrap();
    assert_eq!(
        &bytes[16..20],
        &100u32.to_le_bytes(),
        "the header's snap length"
    );
    let on_disk = read_file(&file.0);
    let want: Vec<(Vec<u8>, u32)> = frames
        .iter()
        .map(|f| (f[..f.len().min(100)].to_vec(), f.len() as u32))
        .collect();
    assert_eq!(on_disk, want);
    assert!(pool.is_full());
}

#[test]
fn runts_and_frames_over_the_mtu_are_dropped_with_their_reason() {
    let file = TmpFile::new("runts");
    let lens = [5usize, 60, 13, 14, 1518, 1519, 0, 60];
    let mut w = PcapWriter::new(Vec::new(), 65535, 1, true).unwrap();
    for (i, &n) in lens.iter().enumerate() {
        w.write(i as u64, &frame(n, i as u8)).unwrap();
    }
    std::fs::write(&file.0, w.finish().unwrap()).unwrap();
    let pool = pool(63, 2048);
    let mut rx = open(
        &format!("pcap:rx={}", file.0),
        PortConfig::new(Some(pool.clone())),
    )
    .unwrap();
    rx.start().unwrap();
    let got = receive_all(&mut rx);
    assert_eq!(
        got.iter().map(|m| m.pkt_len()).collect::<Vec<_>>(),
        [60, 14, 1518, 60]
    );
    let s = rx.stats();
    assert_eq!((s.rx_packets, s.rx_errors), (4, 4));
    let x = &rx.counters().xstats;
    assert_eq!(x.get("rx_runt_errors"), Some(3));
    assert_eq!(x.get("rx_oversize_errors"), Some(1));
    drop(got);
    drop(rx);
    assert!(pool.is_full());
}

/// A file of `n` 60-byte packets, packet `i` tagged `i` in byte 0 and
/// stamped `ts[i]` nanoseconds.
fn sample_file(name: &str, ts: &[u64]) -> TmpFile {
    let file = TmpFile::new(name);
    let mut w = PcapWriter::new(Vec::new(), 65535, 1, true).unwrap();
    for (i, &t) in ts.iter().enumerate() {
        let mut f = frame(60, 0);
        f[0] = i as u8;
        w.write(t, &f).unwrap();
    }
    std::fs::write(&file.0, w.finish().unwrap()).unwrap();
    file
}

fn tags(burst: &Burst<8>) -> Vec<u8> {
    burst.iter().map(|m| m.data()[0]).collect()
}

#[test]
fn loop_wraps_and_without_it_the_file_ends() {
    let file = sample_file("loop", &[1, 2, 3]);
    let pool = pool(31, 2048);
    let mut burst: Burst<8> = Burst::new();
    let spec = format!("pcap:rx={},loop=true", file.0);
    let mut port = open(&spec, PortConfig::new(Some(pool.clone()))).unwrap();
    port.start().unwrap();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 8);
    assert_eq!(tags(&burst), [0, 1, 2, 0, 1, 2, 0, 1]);
    burst.clear();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 8);
    assert_eq!(tags(&burst), [2, 0, 1, 2, 0, 1, 2, 0]);
    burst.clear();
    drop(port);

    let spec = format!("pcap:rx={},loop=false", file.0);
    let mut port = open(&spec, PortConfig::new(Some(pool.clone()))).unwrap();
    port.start().unwrap();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 3);
    assert_eq!(tags(&burst), [0, 1, 2]);
    assert_eq!(
        port.rx_queue(0).unwrap().rx_burst(&mut burst),
        0,
        "the file has ended"
    );
    drop(burst);
    drop(port);
    assert!(pool.is_full());
}

/// Opens `spec` with a clock the test moves by hand (in nanoseconds).
fn open_with_clock(spec: &str, config: PortConfig, now: &Arc<AtomicU64>) -> Port {
    let mut driver = PcapDriver::from_spec(&PortSpec::parse(spec).unwrap()).unwrap();
    let now = Arc::clone(now);
    driver.clock = Clock {
        now: Arc::new(move || now.load(Ordering::Relaxed)),
        hz: 1_000_000_000,
    };
    Port::new(spec, Box::new(driver), config).unwrap()
}

#[test]
fn timing_releases_each_packet_when_it_is_due() {
    // Gaps of 1 ms, 2 ms and 0 ms.
    let base = 1_700_000_000_000_000_000;
    let file = sample_file(
        "timing",
        &[base, base + 1_000_000, base + 3_000_000, base + 3_000_000],
    );
    let pool = pool(31, 2048);
    let clock = Arc::new(AtomicU64::new(5_000_000_000));
    let at = |ns: u64| clock.store(5_000_000_000 + ns, Ordering::Relaxed);
    let mut burst: Burst<8> = Burst::new();
    let spec = format!("pcap:rx={},timing=true,loop=true", file.0);
    let mut port = open_with_clock(&spec, PortConfig::new(Some(pool.clone())), &clock);
    port.start().unwrap();
    let mut rx = |burst: &mut Burst<8>| {
        burst.clear();
        port.rx_queue(0).unwrap().rx_burst(burst)
    };
    assert_eq!(rx(&mut burst), 1, "the first packet at once");
    assert_eq!(rx(&mut burst), 0);
    at(999_999);
    assert_eq!(rx(&mut burst), 0, "1 ns early");
    at(1_000_000);
    assert_eq!((rx(&mut burst), tags(&burst)), (1, vec![1]));
    at(2_500_000);
    assert_eq!(rx(&mut burst), 0);
    at(3_000_000);
    // Packets 2 and 3 are due together; the next pass starts with packet 0
    // at the same moment.
    assert_eq!((rx(&mut burst), tags(&burst)), (3, vec![2, 3, 0]));
    at(3_999_999);
    assert_eq!(rx(&mut burst), 0);
    at(5_000_000);
    assert_eq!((rx(&mut burst), tags(&burst)), (1, vec![1]));
    // Late: everything due by now, across the next pass.
    at(9_000_000);
    assert_eq!(
        (rx(&mut burst), tags(&burst)),
        (7, vec![2, 3, 0, 1, 2, 3, 0])
    );
    burst.clear();
    drop(port);

    // Stopped and started again: the next packet is due at the first call.
    let spec = format!("pcap:rx={},timing=true", file.0);
    let mut port = open_with_clock(&spec, PortConfig::new(Some(pool.clone())), &clock);
    port.start().unwrap();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 1);
    port.stop();
    port.start().unwrap();
    at(123_456_789);
    burst.clear();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 1);
    assert_eq!(tags(&burst), [1]);
    drop(burst);
    drop(port);
    assert!(pool.is_full());
}

#[test]
fn bad_files_are_rejected_at_open_naming_file_and_offset() {
    let pool = pool(15, 2048);
    let good = sample_file("bad", &[1, 2]);
    let bytes = std::fs::read(&good.0).unwrap();
    let err = |name: &str, content: &[u8]| -> String {
        let f = TmpFile::new(name);
        std::fs::write(&f.0, content).unwrap();
        let e = open(
            &format!("pcap:rx={}", f.0),
            PortConfig::new(Some(pool.clone())),
        )
        .unwrap_err()
        .to_string();
        e.replace(&f.0, "F")
    };
    assert_eq!(
        err("cut_data", &bytes[..130]),
        "rx file 'F': pcap: truncated packet data at offset 116: 14 of 60 bytes"
    );
    assert_eq!(
        err("cut_header", &bytes[..30]),
        "rx file 'F': pcap: truncated record header at offset 24: 6 of 16 bytes"
    );
    assert_eq!(
        err("cut_global", &bytes[..7]),
        "rx file 'F': pcap: truncated global header at offset 0: 7 of 24 bytes"
    );
    let mut corrupt = bytes.clone();
    corrupt[100 + 8..100 + 12].copy_from_slice(&61u32.to_le_bytes());
    assert_eq!(
        err("corrupt", &corrupt),
        "rx file 'F': pcap: corrupt record at offset 100: captured length 61 exceeds the \
         original length 60"
    );
    assert_eq!(
        err("magic", b"not a pcap file at all, no"),
        "rx file 'F': pcap: not a pcap file (magic 0x20746f6e at offset 0)"
    );
    let mut linktype = bytes.clone();
    linktype[20] = 101;
    assert_eq!(
        err("linktype", &linktype),
        "rx file 'F': link type 101 at offset 20, only Ethernet (1) is read"
    );
    let missing = TmpFile::new("missing");
    assert_eq!(
        open(
            &format!("pcap:rx={}", missing.0),
            PortConfig::new(Some(pool.clone()))
        )
        .unwrap_err()
        .to_string()
        .replace(&missing.0, "F"),
        "pcap: rx file 'F': No such file or directory (os error 2)"
    );
    assert!(pool.is_full());
}

#[test]
fn spec_and_config_errors_name_the_fault() {
    let pool = pool(15, 2048);
    let msg = |spec: &str, c: PortConfig| open(spec, c).unwrap_err().to_string();
    let c = || PortConfig::new(Some(pool.clone()));
    assert_eq!(
        msg("pcap", c()),
        "port spec 'pcap': driver 'pcap' needs key 'rx or tx'"
    );
    assert_eq!(
        msg("pcap:loop=true", c()),
        "port spec 'pcap:loop=true': driver 'pcap' needs key 'rx or tx'"
    );
    assert_eq!(
        msg("pcap:tx=/tmp/x,snaplen=0", c()),
        "port spec 'pcap:tx=/tmp/x,snaplen=0': key 'snaplen' = '0' is not a number in 1..=262144"
    );
    assert_eq!(
        msg("pcap:tx=/tmp/x,loop=maybe", c()),
        "port spec 'pcap:tx=/tmp/x,loop=maybe': key 'loop' = 'maybe' is not a boolean \
         (1/0, true/false, yes/no, on/off)"
    );
    assert_eq!(
        msg("pcap:tx=/tmp/x,speed=1", c()),
        "port spec 'pcap:tx=/tmp/x,speed=1': driver 'pcap' has no key 'speed' (keys: rx, tx, \
         loop, timing, snaplen)"
    );
    assert_eq!(
        msg("pcap:tx=/nonexistent-dir/x.pcap", c()),
        "pcap: tx file '/nonexistent-dir/x.pcap': No such file or directory (os error 2)"
    );
    let out = TmpFile::new("config");
    assert_eq!(
        msg(&format!("pcap:tx={}", out.0), c().queues(1, 2)).replace(&out.0, "F"),
        "port 'pcap:tx=F': 2 Tx queues asked, driver pcap has at most 1"
    );
    assert!(pool.is_full());
}

#[test]
fn without_rx_nothing_arrives_and_without_tx_packets_are_freed() {
    let out = TmpFile::new("half");
    let pool = pool(15, 2048);
    // No pool needed when there is no rx file.
    let mut port = open(&format!("pcap:tx={}", out.0), PortConfig::new(None)).unwrap();
    port.start().unwrap();
    let mut burst: Burst = Burst::new();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    drop(port);
    let input = sample_file("half_in", &[1, 2]);
    let mut port = open(
        &format!("pcap:rx={}", input.0),
        PortConfig::new(Some(pool.clone())),
    )
    .unwrap();
    port.start().unwrap();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 2);
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 2);
    assert_eq!((port.stats().tx_packets, port.stats().tx_bytes), (2, 120));
    drop(port);
    assert!(pool.is_full());
}

#[test]
fn write_errors_count_tx_errors_and_free_the_packets() {
    let pool = pool(63, 2048);
    let mut port = open("pcap:tx=/dev/full", PortConfig::new(None)).unwrap();
    port.start().unwrap();
    let mut burst: Burst = Burst::new();
    for _ in 0..10 {
        for i in 0..32 {
            burst
                .push(pool.alloc_from_slice(&frame(100, i)).unwrap())
                .unwrap();
        }
        assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 32);
    }
    port.stop();
    let s = port.stats();
    assert!(s.tx_errors > 0, "{s:?}");
    assert!(s.tx_packets < 320, "{s:?}");
    drop(port);
    assert!(pool.is_full());
}
