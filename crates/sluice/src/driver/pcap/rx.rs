//! Receiving from a pcap file.
//!
//! The file is never held in memory: `rx_burst` reads it a record at a
//! time, into one buffer of at most the largest record
//! ([`max_caplen`]) plus a read-ahead.
//!
//! - **A regular file** (the default) is read through once and checked when
//!   the port opens ([`RxFile::open`]), so a truncated or corrupt file is an
//!   error at open; replay then reads it again from the start, up to the end
//!   found at open, and `loop` starts again there. A file changed under the
//!   port so that it no longer reads counts one `rx_errors` and ends the
//!   queue's packets.
//! - **A stream** (`stream=1`: a FIFO, a character device, or a regular file
//!   read as it grows) is opened without blocking and read as bytes arrive;
//!   `rx_burst` returns what is complete and never waits. A stream that is
//!   not pcap, or goes corrupt, counts one `rx_errors` and ends.
//!
//! Each packet is copied into an mbuf from the queue's pool — into a chain
//! of segments when it is longer than the data room and the port has the
//! multi-segment Rx offload, otherwise it is counted in `rx_errors` and
//! `rx_oversize_errors` and skipped. A runt (shorter than an Ethernet
//! header) or a packet longer than the MTU allows is counted the same way
//! (`rx_runt_errors`, `rx_oversize_errors`). An empty pool counts `rx_nombuf` and leaves the packet for the
//! next call.
//!
//! With `timing`, a packet is due when the clock has advanced by the gap
//! between its timestamp and the first packet's since the first `rx_burst`
//! after start. With `loop` as well, each pass starts when the last packet
//! of the one before was due.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::claim::{FileClaim, Use};
use super::format::{
    GLOBAL_HEADER_LEN, LINKTYPE_ETHERNET, PcapError, PcapReader, RECORD_HEADER_LEN, Record,
    max_caplen, parse_global_header, parse_record_header,
};
use crate::counter::Counter;
use crate::mbuf::{BurstSlice, Mbuf, MbufPool};
use crate::port::{Offloads, PortConfig, PortCounters, PortError, RxFrameCheck, RxQueue};

/// Bytes asked of a stream per read.
const READ_CHUNK: usize = 64 * 1024;

/// What the checking read of a regular file found.
#[derive(Debug, Clone, Copy)]
struct Replay {
    /// Offset where the last record ends: replay reads no further.
    end: u64,
    /// Number of records.
    records: u64,
    /// Timestamps of the first and the last record.
    first_ts: u64,
    last_ts: u64,
}

/// The `rx` file of a pcap port, open.
pub(crate) struct RxFile {
    file: Arc<File>,
    /// `None`: a stream.
    replay: Option<Replay>,
    /// Holds the file against a writer elsewhere in the process.
    _claim: Option<FileClaim>,
}

/// Reads a file at its own offset (`pread`), so each reader of one open
/// file has its own position.
struct AtReader {
    file: Arc<File>,
    pos: u64,
}

impl Read for AtReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// A replay's reader: the file from the start, up to the end found at open.
type ReplayReader = PcapReader<BufReader<io::Take<AtReader>>>;

fn replay_reader(file: &Arc<File>, end: u64) -> Result<ReplayReader, PcapError> {
    let at = AtReader {
        file: Arc::clone(file),
        pos: 0,
    };
    PcapReader::new(BufReader::new(at.take(end)))
}

impl RxFile {
    /// Opens `path`: a regular file is read through and checked (in bounded
    /// memory); with `stream` anything readable but a directory is opened
    /// without blocking, read later as it arrives. Errors name the file and,
    /// for a bad file, the record and the byte offset.
    pub(crate) fn open(path: &str, stream: bool) -> Result<RxFile, PortError> {
        let (file, meta) = crate::file::open_read_nonblocking(path)
            .map_err(|e| PortError::io(format!("pcap: rx file '{path}'"), e))?;
        if meta.is_dir() || (!meta.is_file() && !stream) {
            return Err(PortError::Driver(format!(
                "rx file '{path}': {}, not a regular file{}",
                crate::file::kind(&meta),
                if meta.is_dir() {
                    ""
                } else {
                    " (stream=1 reads one as a stream)"
                }
            )));
        }
        let claim = FileClaim::take(&meta, path, Use::Read)?;
        let file = Arc::new(file);
        if stream {
            return Ok(RxFile {
                file,
                replay: None,
                _claim: claim,
            });
        }
        let bad = |e: PcapError| PortError::Driver(format!("rx file '{path}': {e}"));
        let mut reader = replay_reader(&file, u64::MAX).map_err(bad)?;
        let info = reader.info();
        if info.linktype != LINKTYPE_ETHERNET {
            return Err(PortError::Driver(format!(
                "rx file '{path}': link type {} at offset 20, only Ethernet (1) is read",
                info.linktype
            )));
        }
        let mut replay = Replay {
            end: GLOBAL_HEADER_LEN as u64,
            records: 0,
            first_ts: 0,
            last_ts: 0,
        };
        let mut scratch = Vec::new();
        while let Some(r) = reader.next_into(&mut scratch).map_err(bad)? {
            if replay.records == 0 {
                replay.first_ts = r.ts_nanos;
            }
            replay.records += 1;
            replay.last_ts = r.ts_nanos;
        }
        replay.end = reader.offset();
        Ok(RxFile {
            file,
            replay: Some(replay),
            _claim: claim,
        })
    }
}

/// A stream's reader: bytes as they arrive, records as they complete.
struct StreamReader {
    file: Arc<File>,
    /// Bytes read and not yet consumed: `buf[head..]`.
    buf: Vec<u8>,
    head: usize,
    /// The global header's facts, once read.
    info: Option<super::format::FileInfo>,
    /// Offset of the next record header in the stream.
    offset: u64,
    /// Records read.
    records: u64,
}

impl StreamReader {
    fn new(file: Arc<File>) -> StreamReader {
        StreamReader {
            file,
            buf: Vec::new(),
            head: 0,
            info: None,
            offset: 0,
            records: 0,
        }
    }

    /// Whether `need` bytes are there, reading what has arrived (never
    /// waiting) if not. The buffer holds at most `need` plus one read.
    fn fill(&mut self, need: usize) -> io::Result<bool> {
        if self.buf.len() - self.head >= need {
            return Ok(true);
        }
        self.buf.drain(..self.head);
        self.head = 0;
        while self.buf.len() < need {
            let old = self.buf.len();
            self.buf.resize(old + (need - old).max(READ_CHUNK), 0);
            let r = (&*self.file).read(&mut self.buf[old..]);
            self.buf.truncate(old + *r.as_ref().unwrap_or(&0));
            match r {
                // Nothing now: no writer (a FIFO's may come later) or no data.
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// The next complete record into `data`; `None` until one has arrived.
    fn next_into(&mut self, data: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        let info = match self.info {
            Some(info) => info,
            None => {
                if !self.fill(GLOBAL_HEADER_LEN)? {
                    return Ok(None);
                }
                let mut h = [0u8; GLOBAL_HEADER_LEN];
                h.copy_from_slice(&self.buf[self.head..self.head + GLOBAL_HEADER_LEN]);
                let info = parse_global_header(&h)?;
                if info.linktype != LINKTYPE_ETHERNET {
                    return Err(PcapError::Corrupt {
                        record: 0,
                        offset: 20,
                        what: format!("link type {}, only Ethernet (1) is read", info.linktype),
                    });
                }
                self.head += GLOBAL_HEADER_LEN;
                self.offset = GLOBAL_HEADER_LEN as u64;
                *self.info.insert(info)
            }
        };
        if !self.fill(RECORD_HEADER_LEN)? {
            return Ok(None);
        }
        let mut h = [0u8; RECORD_HEADER_LEN];
        h.copy_from_slice(&self.buf[self.head..self.head + RECORD_HEADER_LEN]);
        // The length is checked here, before the buffer grows to hold it.
        let rec = parse_record_header(&info, &h, self.offset, self.records + 1)?;
        let len = RECORD_HEADER_LEN + rec.caplen as usize;
        debug_assert!(rec.caplen <= max_caplen(&info));
        if !self.fill(len)? {
            return Ok(None);
        }
        data.clear();
        data.extend_from_slice(&self.buf[self.head + RECORD_HEADER_LEN..self.head + len]);
        self.head += len;
        self.offset += len as u64;
        self.records += 1;
        Ok(Some(rec))
    }
}

/// Where a queue's packets come from.
enum Source {
    /// A regular file, from the start again on each pass.
    Replay {
        file: Arc<File>,
        replay: Replay,
        /// The current pass; `None` before the first.
        reader: Option<ReplayReader>,
    },
    /// A stream.
    Stream(StreamReader),
}

impl Source {
    /// The next record into `data`: `None` at the end of a pass, or until a
    /// stream has more.
    fn next_into(&mut self, data: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        match self {
            Source::Replay {
                file,
                replay,
                reader,
            } => {
                let r = match reader {
                    Some(r) => r,
                    None => reader.insert(replay_reader(file, replay.end)?),
                };
                r.next_into(data)
            }
            Source::Stream(s) => s.next_into(data),
        }
    }

    /// Starts a new pass of a replay; false for a stream or an empty file.
    fn rewind(&mut self) -> bool {
        match self {
            Source::Replay { replay, reader, .. } if replay.records > 0 => {
                *reader = None;
                true
            }
            _ => false,
        }
    }
}

/// A monotonic clock for `timing`: a reading function and its ticks per
/// second. The driver's is the TSC; tests drive their own.
#[derive(Clone)]
pub(crate) struct Clock {
    pub(crate) now: Arc<dyn Fn() -> u64 + Send + Sync>,
    pub(crate) hz: u64,
}

impl Clock {
    /// The time-stamp counter.
    pub(crate) fn tsc() -> Clock {
        Clock {
            now: Arc::new(crate::tsc::rdtsc),
            hz: 0,
        }
    }

    /// Ticks per second (the TSC's is measured on first use).
    fn hz(&self) -> u64 {
        if self.hz == 0 {
            crate::tsc::tsc_hz()
        } else {
            self.hz
        }
    }
}

/// Replay timing state.
struct Timing {
    clock: Clock,
    /// Clock ticks per second.
    hz: u64,
    /// Timestamp of the first packet (of the file, or the first a stream
    /// delivered).
    first_ts: Option<u64>,
    /// Ticks from a pass's first packet to its last (a replay's).
    pass: u64,
    /// Clock reading at which the current pass started; set by the first
    /// `rx_burst` after start.
    base: Option<u64>,
}

impl Timing {
    /// Ticks after the pass's start when a packet stamped `ts` is due.
    fn due(&self, ts: u64) -> u64 {
        let ns = ts.saturating_sub(self.first_ts.unwrap_or(ts)) as u128;
        u64::try_from(ns * self.hz as u128 / 1_000_000_000).unwrap_or(u64::MAX)
    }
}

/// Why a packet was not delivered.
enum Fail {
    /// Longer than the data room, without the multi-segment offload (or
    /// otherwise impossible to store): counted and skipped.
    TooLong,
    /// The pool is empty: counted, retried next call.
    NoBuf,
}

/// The Rx queue of a pcap port.
pub(crate) struct PcapRx {
    /// The `rx` file, held open (and claimed) while the queue reads it.
    _file: Option<Arc<RxFile>>,
    /// `None`: no `rx` file, or it failed (counted once).
    source: Option<Source>,
    pool: Option<MbufPool>,
    port_id: u16,
    multi_seg: bool,
    looping: bool,
    timing: Option<Timing>,
    /// The next packet, read but not delivered yet, and its bytes.
    pending: Option<Record>,
    pkt: Vec<u8>,
    /// Runts and frames over the MTU are counted and skipped.
    check: RxFrameCheck,
    /// Reads that failed (not pcap, corrupt, an I/O error), ending the
    /// queue's packets: `rx_file_errors`, a share of `rx_errors`.
    file_errors: Arc<Counter>,
    counters: Arc<PortCounters>,
    q: usize,
}

impl PcapRx {
    pub(crate) fn new(
        rx: Option<Arc<RxFile>>,
        pool: Option<MbufPool>,
        config: &PortConfig,
        looping: bool,
        clock: Option<Clock>,
        counters: Arc<PortCounters>,
        q: usize,
    ) -> PcapRx {
        let source = rx.as_deref().map(|f| match f.replay {
            Some(replay) => Source::Replay {
                file: Arc::clone(&f.file),
                replay,
                reader: None,
            },
            None => Source::Stream(StreamReader::new(Arc::clone(&f.file))),
        });
        let timing = match (rx.as_deref(), clock) {
            (Some(f), Some(clock)) => {
                let hz = clock.hz();
                let mut t = Timing {
                    clock,
                    hz,
                    first_ts: f.replay.map(|r| r.first_ts),
                    pass: 0,
                    base: None,
                };
                t.pass = f.replay.map_or(0, |r| t.due(r.last_ts));
                Some(t)
            }
            _ => None,
        };
        PcapRx {
            _file: rx,
            source,
            pool,
            port_id: config.port_id,
            multi_seg: config.rx_offloads.contains(Offloads::MULTI_SEG),
            looping,
            timing,
            pending: None,
            pkt: Vec::new(),
            check: RxFrameCheck::new(&counters.xstats, config.mtu),
            file_errors: counters.xstats.register("rx_file_errors"),
            counters,
            q,
        }
    }

    /// Reads the next packet into `pending` if there is none: false if none
    /// is there (the end of a pass, a stream waiting, or a failure, counted
    /// in `rx_errors` once and ending the queue's packets).
    fn fetch(&mut self) -> bool {
        if self.pending.is_some() {
            return true;
        }
        let Some(source) = self.source.as_mut() else {
            return false;
        };
        match source.next_into(&mut self.pkt) {
            Ok(Some(r)) => {
                if let Some(t) = self.timing.as_mut() {
                    t.first_ts.get_or_insert(r.ts_nanos);
                }
                self.pending = Some(r);
                true
            }
            Ok(None) => false,
            Err(_) => {
                self.counters.rx[self.q].errors.inc();
                self.file_errors.inc();
                self.source = None;
                false
            }
        }
    }
}

/// Copies `pkt` into a fresh mbuf from `pool` for port `port_id` — a chain
/// if it must be one and `multi_seg` allows it.
fn copy_in(pool: &MbufPool, pkt: &[u8], multi_seg: bool, port_id: u16) -> Result<Mbuf, Fail> {
    let room = pool.data_room() as usize;
    if pkt.len() > room && !multi_seg {
        return Err(Fail::TooLong);
    }
    let mut chunks = pkt.chunks(room);
    let first = chunks.next().unwrap_or(&[]);
    let mut head = pool.alloc().ok_or(Fail::NoBuf)?;
    head.append(first.len())
        .map_err(|_| Fail::TooLong)?
        .copy_from_slice(first);
    for chunk in chunks {
        // On any error `head` is dropped here, freeing its segments.
        let mut seg = pool.alloc().ok_or(Fail::NoBuf)?;
        seg.append(chunk.len())
            .map_err(|_| Fail::TooLong)?
            .copy_from_slice(chunk);
        head.chain(seg).map_err(|_| Fail::TooLong)?;
    }
    head.header_mut().port = port_id;
    Ok(head)
}

impl RxQueue for PcapRx {
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        if self.source.is_none() || self.pool.is_none() {
            self.counters.rx[self.q].record_burst(0, 0);
            return 0;
        }
        let now = if self.timing.is_some() {
            // The next packet's timestamp sets the first call's base.
            self.fetch();
            let ts = self.pending.map(|r| r.ts_nanos);
            self.timing.as_mut().map(|t| {
                let now = (t.clock.now)();
                // First call since start: the next packet is due now.
                let due = ts.map_or(0, |ts| t.due(ts));
                t.base.get_or_insert(now.saturating_sub(due));
                now
            })
        } else {
            None
        };
        let (mut n, mut bytes) = (0usize, 0u64);
        // Each packet looked at uses one slot of the burst's room, delivered
        // or skipped, so a file of bad packets in a loop cannot spin here;
        // a new pass starts only after a packet of the one before.
        let mut room = burst.free();
        let mut rewound = false;
        while room > 0 {
            if !self.fetch() {
                let Some(source) = self.source.as_mut() else {
                    break;
                };
                if !self.looping || rewound || !source.rewind() {
                    break;
                }
                rewound = true;
                if let Some(t) = self.timing.as_mut() {
                    t.base = t.base.map(|b| b.saturating_add(t.pass));
                }
                continue;
            }
            rewound = false;
            let Some(r) = self.pending else {
                break;
            };
            if let (Some(t), Some(now)) = (&self.timing, now) {
                let base = t.base.unwrap_or(now);
                if now < base.saturating_add(t.due(r.ts_nanos)) {
                    break;
                }
            }
            let Some(pool) = self.pool.as_ref() else {
                break;
            };
            let stats = &self.counters.rx[self.q];
            if !self.check.accepts(self.pkt.len()) {
                self.check.count_drop(self.pkt.len(), &stats.errors);
                self.pending = None;
                room -= 1;
                continue;
            }
            match copy_in(pool, &self.pkt, self.multi_seg, self.port_id) {
                Ok(m) => {
                    // Room: at most `free` packets are pushed.
                    let _ = burst.push(m);
                    n += 1;
                    bytes += self.pkt.len() as u64;
                }
                Err(Fail::TooLong) => self.check.count_drop(self.pkt.len(), &stats.errors),
                Err(Fail::NoBuf) => {
                    stats.nombuf.inc();
                    break;
                }
            }
            self.pending = None;
            room -= 1;
        }
        self.counters.rx[self.q].record_burst(n, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        if let Some(t) = self.timing.as_mut() {
            t.base = None;
        }
        Ok(())
    }

    fn stop(&mut self) {}
}
