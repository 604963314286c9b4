//! Sending to a pcap file.
//!
//! Each packet becomes a record stamped with the wall clock (read once per
//! burst), its segments concatenated and cut to the snap length, its
//! original length kept. A burst's records are written in one go at the end
//! of `tx_burst`, nothing is held back for later: so a packet counts as sent
//! (`tx_packets`) only once its record is in the file, and every packet
//! whose record is not counts in `tx_errors`. The packets are freed either
//! way, since a file cannot push back.
//!
//! A write that fails part-way leaves the records before the failure in the
//! file and cuts off a partial record after them, so the file stays
//! readable; where the file cannot be cut (a device), the queue counts every
//! later packet in `tx_errors` rather than write after a partial record.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileTypeExt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::format::{GLOBAL_HEADER_LEN, LINKTYPE_ETHERNET, PcapWriter, record_header};
use crate::counter::Counter;
use crate::mbuf::BurstSlice;
use crate::port::{PortCounters, PortError, TxQueue};

/// Where a Tx queue's records go.
pub(crate) trait RecordSink: Send {
    /// Writes from the start of `buf`; how many bytes were written.
    fn put(&mut self, buf: &[u8]) -> io::Result<usize>;
    /// Cuts the output to its first `len` bytes and goes on writing there.
    fn cut(&mut self, len: u64) -> io::Result<()>;
}

impl RecordSink for File {
    fn put(&mut self, buf: &[u8]) -> io::Result<usize> {
        Write::write(self, buf)
    }

    fn cut(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)?;
        self.seek(SeekFrom::Start(len)).map(drop)
    }
}

/// The global header of the files written.
pub(crate) fn global_header(snaplen: u32) -> Vec<u8> {
    // Writing to a Vec cannot fail.
    PcapWriter::new(Vec::new(), snaplen, LINKTYPE_ETHERNET, false)
        .and_then(PcapWriter::finish)
        .unwrap_or_default()
}

/// The Tx queue of a pcap port with a `tx` file.
pub(crate) struct PcapTx {
    sink: Box<dyn RecordSink>,
    /// Holds the file against other users in the process while written.
    _claim: Option<Arc<super::claim::FileClaim>>,
    snaplen: u32,
    /// Bytes in the output so far (its global header included once
    /// written).
    written: u64,
    /// A partial record is in an output that cannot be cut: nothing more is
    /// written.
    broken: bool,
    /// The burst's records, and where each ends in it with its packet's
    /// length.
    buf: Vec<u8>,
    ends: Vec<(usize, u64)>,
    /// Packets whose record could not be written: `tx_write_errors`, a
    /// share of `tx_errors`.
    write_errors: Arc<Counter>,
    counters: Arc<PortCounters>,
    q: usize,
}

impl PcapTx {
    /// A queue writing to `sink`, which holds `written` bytes already: the
    /// global header if it is there (else the first burst writes it first).
    pub(crate) fn new(
        sink: Box<dyn RecordSink>,
        claim: Option<Arc<super::claim::FileClaim>>,
        written: u64,
        snaplen: u32,
        counters: Arc<PortCounters>,
        q: usize,
    ) -> PcapTx {
        PcapTx {
            sink,
            _claim: claim,
            snaplen,
            written,
            broken: false,
            buf: Vec::new(),
            ends: Vec::new(),
            write_errors: counters.xstats.register("tx_write_errors"),
            counters,
            q,
        }
    }

    /// Writes `self.buf` from its start: how many bytes went out before a
    /// failure (all of them if none).
    fn write_out(&mut self) -> usize {
        let mut done = 0;
        let mut interrupted = 0;
        while done < self.buf.len() {
            match self.sink.put(&self.buf[done..]) {
                Ok(0) => break,
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted && interrupted < 16 => {
                    interrupted += 1;
                }
                Err(_) => break,
            }
        }
        done
    }
}

impl TxQueue for PcapTx {
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let n = burst.len();
        let stats = &self.counters.tx[self.q];
        if n == 0 || self.broken {
            burst.clear();
            stats.errors.add(n as u64);
            self.write_errors.add(n as u64);
            stats.record_burst(0, 0);
            return n;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.buf.clear();
        self.ends.clear();
        if self.written == 0 {
            self.buf.extend_from_slice(&global_header(self.snaplen));
        }
        let head = self.buf.len();
        for m in burst.iter() {
            let (h, caplen) = record_header(ts, m.pkt_len() as usize, self.snaplen, false);
            self.buf.extend_from_slice(&h);
            let mut left = caplen;
            for s in m.segments() {
                let take = left.min(s.len());
                self.buf.extend_from_slice(&s[..take]);
                left -= take;
            }
            self.ends.push((self.buf.len(), m.pkt_len() as u64));
        }
        burst.clear();
        let done = self.write_out();
        // The records wholly written; anything after them is cut off.
        let kept = if done < head {
            0
        } else {
            self.ends
                .iter()
                .map(|&(end, _)| end)
                .take_while(|&end| end <= done)
                .last()
                .unwrap_or(head)
        };
        debug_assert!(kept <= done);
        if kept < done && self.sink.cut(self.written + kept as u64).is_err() {
            self.broken = true;
        }
        self.written += kept as u64;
        let (mut sent, mut bytes) = (0usize, 0u64);
        for &(end, len) in &self.ends {
            if end <= kept {
                sent += 1;
                bytes += len;
            }
        }
        let stats = &self.counters.tx[self.q];
        if sent != n {
            stats.errors.add((n - sent) as u64);
            self.write_errors.add((n - sent) as u64);
        }
        stats.record_burst(sent, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn stop(&mut self) {}
}

/// Opens (creating or emptying) the `tx` file `path`: a regular file, with
/// its global header written now, or a character device (whose header goes
/// with the first packets). Opened without blocking, so a FIFO nobody reads
/// is refused rather than waited on. Returns the file and the bytes written.
pub(crate) fn open_tx_file(
    path: &str,
    snaplen: u32,
) -> Result<(File, u64, Option<super::claim::FileClaim>), PortError> {
    use std::os::unix::fs::OpenOptionsExt;
    let ctx = || format!("pcap: tx file '{path}'");
    if let Ok(meta) = std::fs::metadata(path)
        && !meta.is_file()
        && !meta.file_type().is_char_device()
    {
        return Err(not_writable(path, &meta));
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| PortError::io(ctx(), e))?;
    let meta = file.metadata().map_err(|e| PortError::io(ctx(), e))?;
    if !meta.is_file() && !meta.file_type().is_char_device() {
        return Err(not_writable(path, &meta));
    }
    // Claimed before it is emptied: a file another port uses stays whole.
    let claim = super::claim::FileClaim::take(&meta, path, super::claim::Use::Write)?;
    if !meta.is_file() {
        return Ok((file, 0, claim));
    }
    file.set_len(0).map_err(|e| PortError::io(ctx(), e))?;
    file.write_all(&global_header(snaplen))
        .map_err(|e| PortError::io(ctx(), e))?;
    Ok((file, GLOBAL_HEADER_LEN as u64, claim))
}

fn not_writable(path: &str, meta: &std::fs::Metadata) -> PortError {
    PortError::Driver(format!(
        "tx file '{path}': {}, not a regular file or character device",
        crate::file::kind(meta)
    ))
}
