use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::{Duration, Instant};

use super::format::{PcapReader, PcapWriter};
use super::rx::Clock;
use super::tx::{PcapTx, RecordSink};
use super::{DEFAULT_SNAPLEN, PcapDriver};
use crate::driver::open;
use crate::mbuf::{Burst, Mbuf, MbufPool};
use crate::port::{Offloads, Port, PortConfig, PortCounters, PortSpec, TxQueue};
use crate::test_support::{TestPool, assert_pool_full, test_pool};

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

/// The port `spec` opens with `config`, started.
fn started(spec: &str, config: PortConfig) -> Port {
    let mut port = open(spec, config).unwrap();
    port.start().unwrap();
    port
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
    let mut port = started(&format!("pcap:tx={path}{extra}"), PortConfig::new(None));
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
    let small = test_pool(63);
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
    let mut rx = started(&format!("pcap:rx={}", file.0), c);
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
    let big = TestPool::new(15).data_room(9216).build();
    let mut c = PortConfig::new(Some(big.clone()));
    c.mtu = 9000;
    let mut rx = started(&format!("pcap:rx={}", file.0), c);
    let got = receive_all(&mut rx);
    assert!(got.iter().all(|m| m.nb_segs() == 1));
    assert_eq!(got.iter().map(|m| m.to_vec()).collect::<Vec<_>>(), frames);
    drop(got);
    drop(rx);

    // Into 2048-byte buffers without the offload: the two long ones are
    // errors (oversize for the data room), skipped.
    let mut c = PortConfig::new(Some(small.clone()));
    c.mtu = 9000;
    let mut rx = started(&format!("pcap:rx={}", file.0), c);
    let got = receive_all(&mut rx);
    assert_eq!(
        got.iter().map(|m| m.to_vec()).collect::<Vec<_>>(),
        frames[..4]
    );
    assert_eq!((rx.stats().rx_packets, rx.stats().rx_errors), (4, 2));
    assert_eq!(rx.counters().xstats.get("rx_oversize_errors"), Some(2));
    drop(got);
    drop(rx);
    assert_pool_full(&small);
    assert_pool_full(&big);
}

#[test]
fn snaplen_cuts_the_record_and_keeps_the_original_length() {
    let file = TmpFile::new("snaplen");
    let pool = test_pool(15);
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
    assert_pool_full(&pool);
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
    let pool = test_pool(63);
    let mut rx = started(
        &format!("pcap:rx={}", file.0),
        PortConfig::new(Some(pool.clone())),
    );
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
    assert_pool_full(&pool);
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
    let pool = test_pool(31);
    let mut burst: Burst<8> = Burst::new();
    let spec = format!("pcap:rx={},loop=true", file.0);
    let mut port = started(&spec, PortConfig::new(Some(pool.clone())));
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 8);
    assert_eq!(tags(&burst), [0, 1, 2, 0, 1, 2, 0, 1]);
    burst.clear();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 8);
    assert_eq!(tags(&burst), [2, 0, 1, 2, 0, 1, 2, 0]);
    burst.clear();
    drop(port);

    let spec = format!("pcap:rx={},loop=false", file.0);
    let mut port = started(&spec, PortConfig::new(Some(pool.clone())));
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 3);
    assert_eq!(tags(&burst), [0, 1, 2]);
    assert_eq!(
        port.rx_queue(0).unwrap().rx_burst(&mut burst),
        0,
        "the file has ended"
    );
    drop(burst);
    drop(port);
    assert_pool_full(&pool);
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
    let pool = test_pool(31);
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
    assert_pool_full(&pool);
}

#[test]
fn bad_files_are_rejected_at_open_naming_file_and_offset() {
    let pool = test_pool(15);
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
        "rx file 'F': pcap: corrupt record 2 at offset 100: captured length 61 exceeds the \
         original length 60"
    );
    // A header claiming a 4 GiB record is an error naming it, not an
    // allocation.
    let mut huge = bytes.clone();
    huge[100 + 8..100 + 16].copy_from_slice(&[0xff; 8]);
    assert_eq!(
        err("huge", &huge),
        "rx file 'F': pcap: corrupt record 2 at offset 100: captured length 4294967295 exceeds \
         262144 (snap length 65535)"
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
    assert_pool_full(&pool);
}

#[test]
fn spec_and_config_errors_name_the_fault() {
    let pool = test_pool(15);
    let msg = |spec: &str, c: PortConfig| open(spec, c).unwrap_err().to_string();
    let c = || PortConfig::new(Some(pool.clone()));
    for (spec, want) in [
        (
            "pcap",
            "port spec 'pcap': driver 'pcap' needs key 'rx or tx'",
        ),
        (
            "pcap:loop=true",
            "port spec 'pcap:loop=true': driver 'pcap' needs key 'rx or tx'",
        ),
        (
            "pcap:tx=/tmp/x,snaplen=0",
            "port spec 'pcap:tx=/tmp/x,snaplen=0': key 'snaplen' = '0' is not a number in 1..=262144",
        ),
        (
            "pcap:tx=/tmp/x,loop=maybe",
            "port spec 'pcap:tx=/tmp/x,loop=maybe': key 'loop' = 'maybe' is not a boolean \
             (1/0, true/false, yes/no, on/off)",
        ),
        (
            "pcap:tx=/tmp/x,speed=1",
            "port spec 'pcap:tx=/tmp/x,speed=1': driver 'pcap' has no key 'speed' (keys: rx, tx, \
             loop, timing, snaplen, stream)",
        ),
        (
            "pcap:tx=/nonexistent-dir/x.pcap",
            "pcap: tx file '/nonexistent-dir/x.pcap': No such file or directory (os error 2)",
        ),
    ] {
        assert_eq!(msg(spec, c()), want, "{spec}");
    }
    let out = TmpFile::new("config");
    assert_eq!(
        msg(&format!("pcap:tx={}", out.0), c().queues(1, 2)).replace(&out.0, "F"),
        "port 'pcap:tx=F': 2 Tx queues asked, driver pcap has at most 1"
    );
    assert_pool_full(&pool);
}

#[test]
fn without_rx_nothing_arrives_and_without_tx_packets_are_freed() {
    let out = TmpFile::new("half");
    let pool = test_pool(15);
    // No pool needed when there is no rx file.
    let mut port = started(&format!("pcap:tx={}", out.0), PortConfig::new(None));
    let mut burst: Burst = Burst::new();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    drop(port);
    let input = sample_file("half_in", &[1, 2]);
    let mut port = started(
        &format!("pcap:rx={}", input.0),
        PortConfig::new(Some(pool.clone())),
    );
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 2);
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 2);
    assert_eq!((port.stats().tx_packets, port.stats().tx_bytes), (2, 120));
    drop(port);
    assert_pool_full(&pool);
}

/// A packet counts as sent only once its record is in the file: none of
/// them reach `/dev/full`, so none is sent and every one is an error.
#[test]
fn write_errors_count_tx_errors_and_free_the_packets() {
    let pool = test_pool(63);
    let mut port = started("pcap:tx=/dev/full", PortConfig::new(None));
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
    assert_eq!(
        (s.tx_packets, s.tx_bytes, s.tx_errors),
        (0, 0, 320),
        "{s:?}"
    );
    assert_eq!(port.counters().xstats.get("tx_write_errors"), Some(320));
    drop(port);
    assert_pool_full(&pool);
}

/// An output that takes `room` bytes, then fails; what it holds, and the
/// lengths it was cut to.
#[derive(Clone, Default)]
struct FailingSink {
    out: Arc<std::sync::Mutex<(Vec<u8>, Vec<u64>)>>,
    room: usize,
    /// Whether it can be cut (a file) or not (a device).
    cuttable: bool,
}

impl RecordSink for FailingSink {
    fn put(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut out = self.out.lock().unwrap();
        let n = buf.len().min(self.room.saturating_sub(out.0.len()));
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
        }
        out.0.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn cut(&mut self, len: u64) -> std::io::Result<()> {
        if !self.cuttable {
            return Err(std::io::Error::from(std::io::ErrorKind::Unsupported));
        }
        let mut out = self.out.lock().unwrap();
        out.0.truncate(len as usize);
        out.1.push(len);
        Ok(())
    }
}

/// A write that fails part-way: the records wholly written count as sent,
/// the rest as errors, and the partial record is cut off so the file reads;
/// where it cannot be cut, nothing more is written.
#[test]
fn a_write_failing_part_way_counts_only_the_records_written() {
    let pool = test_pool(31);
    // Header 24, then records of 16 + 100 bytes: room for 2 and a half.
    for cuttable in [true, false] {
        let sink = FailingSink {
            room: 24 + 116 * 2 + 50,
            cuttable,
            ..Default::default()
        };
        let counters = Arc::new(PortCounters::new(1, 1, false));
        let mut tx = PcapTx::new(
            Box::new(sink.clone()),
            None,
            0,
            DEFAULT_SNAPLEN,
            Arc::clone(&counters),
            0,
        );
        let mut burst: Burst = Burst::new();
        for i in 0..4 {
            burst
                .push(pool.alloc_from_slice(&frame(100, i)).unwrap())
                .unwrap();
        }
        assert_eq!(tx.tx_burst(&mut burst), 4);
        assert!(burst.is_empty());
        let s = counters.stats();
        assert_eq!((s.tx_packets, s.tx_bytes, s.tx_errors), (2, 200, 2));
        let (bytes, cuts) = sink.out.lock().unwrap().clone();
        if cuttable {
            assert_eq!(cuts, [24 + 116 * 2]);
            let mut r = PcapReader::new(&bytes[..]).unwrap();
            let mut d = Vec::new();
            for i in 0..2 {
                r.next_into(&mut d).unwrap().unwrap();
                assert_eq!(d, frame(100, i));
            }
            assert!(r.next_into(&mut d).unwrap().is_none(), "no partial record");
        } else {
            assert_eq!(bytes.len(), 24 + 116 * 2 + 50);
        }
        // The next burst: no room left either way, all errors.
        for i in 0..3 {
            burst
                .push(pool.alloc_from_slice(&frame(60, i)).unwrap())
                .unwrap();
        }
        assert_eq!(tx.tx_burst(&mut burst), 3);
        let s = counters.stats();
        assert_eq!((s.tx_packets, s.tx_errors), (2, 5));
        assert_eq!(counters.xstats.get("tx_write_errors"), Some(5));
        drop(tx);
    }
    assert_pool_full(&pool);
}

/// A scratch FIFO, removed when dropped.
fn fifo(name: &str) -> TmpFile {
    let f = TmpFile::new(name);
    let _ = std::fs::remove_file(&f.0);
    let ok = std::process::Command::new("mkfifo")
        .arg(&f.0)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo {}", f.0);
    f
}

/// Opens `path` for writing once something reads it (or gives up at the
/// deadline or when `done` is set), then writes `data` and closes it: a
/// writer that keeps a reader of the FIFO from waiting for ever.
fn fifo_writer(
    path: &str,
    data: Vec<u8>,
    done: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = path.to_owned();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
            // Without blocking: fails while nobody reads.
            let Ok(mut f) = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
            else {
                std::thread::yield_now();
                continue;
            };
            let mut sent = 0;
            // In small pieces, so records arrive split.
            for piece in data.chunks(7) {
                let mut rest = piece;
                while !rest.is_empty() {
                    if done.load(Ordering::Relaxed) || Instant::now() >= deadline {
                        return sent;
                    }
                    match f.write(rest) {
                        Ok(n) => {
                            sent += n;
                            rest = &rest[n..];
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::yield_now()
                        }
                        Err(_) => return sent,
                    }
                }
            }
            return sent;
        }
        0
    })
}

#[test]
fn a_non_regular_rx_file_is_refused_at_once_without_stream() {
    let pool = test_pool(15);
    let f = fifo("fifo-refused");
    // Should the open wait for a writer, this one comes and writes garbage,
    // so the test fails rather than hangs.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = fifo_writer(&f.0, vec![0; 4096], Arc::clone(&done));
    let e = open(
        &format!("pcap:rx={}", f.0),
        PortConfig::new(Some(pool.clone())),
    )
    .unwrap_err()
    .to_string()
    .replace(&f.0, "F");
    done.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(
        e,
        "rx file 'F': a FIFO, not a regular file (stream=1 reads one as a stream)"
    );
    let e = open("pcap:rx=/dev/null", PortConfig::new(Some(pool.clone())))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "rx file '/dev/null': a character device, not a regular file (stream=1 reads one as a \
         stream)"
    );
    // As a tx file: refused too, even with a reader there (which keeps an
    // open that waits for one from waiting).
    let reader = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&f.0)
            .unwrap()
    };
    let e = open(&format!("pcap:tx={}", f.0), PortConfig::new(None))
        .unwrap_err()
        .to_string()
        .replace(&f.0, "F");
    drop(reader);
    assert_eq!(
        e,
        "tx file 'F': a FIFO, not a regular file or character device"
    );
    let e = open("pcap:rx=/,stream=1", PortConfig::new(Some(pool.clone())))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "rx file '/': a directory, not a regular file");
    assert_eq!(
        open(
            "pcap:rx=/dev/null,stream=1,loop=1",
            PortConfig::new(Some(pool.clone()))
        )
        .unwrap_err()
        .to_string(),
        "port spec 'pcap:rx=/dev/null,stream=1,loop=1': loop replays a regular file; a stream \
         cannot start again"
    );
    assert_pool_full(&pool);
}

/// `/dev/zero` is never read whole: refused without `stream`; with it, read
/// a header's worth, found not to be pcap, counted once.
#[test]
fn dev_zero_is_refused_or_streamed_and_counted_as_an_error() {
    let pool = test_pool(15);
    let e = open("pcap:rx=/dev/zero", PortConfig::new(Some(pool.clone())))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "rx file '/dev/zero': a character device, not a regular file (stream=1 reads one as a \
         stream)"
    );
    let mut port = started(
        "pcap:rx=/dev/zero,stream=1",
        PortConfig::new(Some(pool.clone())),
    );
    let mut burst: Burst = Burst::new();
    for _ in 0..3 {
        assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    }
    assert_eq!((port.stats().rx_packets, port.stats().rx_errors), (0, 1));
    assert_eq!(port.counters().xstats.get("rx_file_errors"), Some(1));
    drop(port);
    assert_pool_full(&pool);
}

/// With `stream=1` a FIFO opens at once, before anyone writes, and its
/// packets arrive as they are written, records split across reads.
#[test]
fn a_fifo_streams_with_stream_set() {
    let pool = test_pool(31);
    let f = fifo("fifo-stream");
    let mut port = started(
        &format!("pcap:rx={},stream=1", f.0),
        PortConfig::new(Some(pool.clone())),
    );
    let mut burst: Burst<8> = Burst::new();
    assert_eq!(
        port.rx_queue(0).unwrap().rx_burst(&mut burst),
        0,
        "nothing written yet"
    );
    let mut w = PcapWriter::new(Vec::new(), 65535, 1, true).unwrap();
    for i in 0..20u8 {
        let mut p = frame(60 + i as usize, i);
        p[0] = i;
        w.write(i as u64, &p).unwrap();
    }
    let bytes = w.finish().unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = fifo_writer(&f.0, bytes.clone(), Arc::clone(&done));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < 20 && Instant::now() < deadline {
        burst.clear();
        port.rx_queue(0).unwrap().rx_burst(&mut burst);
        got.extend(burst.iter().map(|m| m.to_vec()));
    }
    done.store(true, Ordering::Relaxed);
    assert_eq!(writer.join().unwrap(), bytes.len());
    burst.clear();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    let want: Vec<Vec<u8>> = (0..20u8)
        .map(|i| {
            let mut p = frame(60 + i as usize, i);
            p[0] = i;
            p
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!((port.stats().rx_packets, port.stats().rx_errors), (20, 0));
    drop(port);
    assert_pool_full(&pool);
}

/// A file changed under a replaying port so that it no longer reads: one
/// `rx_errors`, then nothing, never a panic or a wrong packet.
#[test]
fn a_file_cut_after_open_ends_the_replay_with_one_error() {
    let pool = test_pool(31);
    let file = sample_file("cut-later", &[1, 2, 3, 4]);
    let mut port = started(
        &format!("pcap:rx={},loop=1", file.0),
        PortConfig::new(Some(pool.clone())),
    );
    let mut burst: Burst<8> = Burst::new();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 8);
    assert_eq!(tags(&burst), [0, 1, 2, 3, 0, 1, 2, 3]);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file.0)
        .unwrap()
        .set_len(24 + 76 + 30)
        .unwrap();
    burst.clear();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 1);
    burst.clear();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    assert_eq!(port.stats().rx_errors, 1);
    assert_eq!(port.counters().xstats.get("rx_file_errors"), Some(1));
    drop(burst);
    drop(port);
    assert_pool_full(&pool);
}

/// Two ports never write one file, nor does one write a file another reads,
/// whatever path names it; readers share; a closed port lets its file go.
#[test]
fn two_ports_writing_one_file_is_an_error_at_open() {
    let pool = test_pool(15);
    let out = TmpFile::new("claimed-out");
    let input = sample_file("claimed-in", &[1, 2]);
    let link = TmpFile::new("claimed-link");
    std::os::unix::fs::symlink(&out.0, &link.0).unwrap();
    let c = || PortConfig::new(Some(pool.clone()));
    let first = open(&format!("pcap:tx={}", out.0), c()).unwrap();
    let msg = |spec: String| {
        open(&spec, c())
            .unwrap_err()
            .to_string()
            .replace(&out.0, "OUT")
            .replace(&link.0, "LINK")
            .replace(&input.0, "IN")
    };
    assert_eq!(
        msg(format!("pcap:tx={}", out.0)),
        "tx file 'OUT' is the tx file 'OUT' of a pcap port already open: one file has one \
         writer, or only readers"
    );
    assert_eq!(
        msg(format!("pcap:tx={}", link.0)),
        "tx file 'LINK' is the tx file 'OUT' of a pcap port already open: one file has one \
         writer, or only readers"
    );
    assert_eq!(
        msg(format!("pcap:rx={}", out.0)),
        "rx file 'OUT' is the tx file 'OUT' of a pcap port already open: one file has one \
         writer, or only readers"
    );
    let reader = open(&format!("pcap:rx={}", input.0), c()).unwrap();
    let reader2 = open(&format!("pcap:rx={}", input.0), c()).unwrap();
    let before = std::fs::read(&input.0).unwrap();
    assert_eq!(
        msg(format!("pcap:tx={}", input.0)),
        "tx file 'IN' is the rx file 'IN' of a pcap port already open: one file has one \
         writer, or only readers"
    );
    assert_eq!(std::fs::read(&input.0).unwrap(), before, "not emptied");
    drop((reader, reader2));
    // One port reading and writing one file.
    assert_eq!(
        msg(format!("pcap:rx={0},tx={0}", input.0)),
        "tx file 'IN' is the rx file 'IN' of a pcap port already open: one file has one \
         writer, or only readers"
    );
    // Devices hold nothing: any number of writers.
    let null1 = open("pcap:tx=/dev/null", c()).unwrap();
    let null2 = open("pcap:tx=/dev/null", c()).unwrap();
    drop((null1, null2, first));
    let again = open(&format!("pcap:tx={}", link.0), c()).unwrap();
    drop(again);
    assert_pool_full(&pool);
}
