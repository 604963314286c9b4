//! The pcap file format (the classic libpcap one Wireshark and tshark read).
//!
//! A 24-byte global header — magic, version 2.4, time zone, accuracy, snap
//! length, link type — then records: a 16-byte header (seconds, sub-second
//! part, captured length, original length) followed by the captured bytes.
//! The magic says the byte order and whether the sub-second part is in
//! microseconds (`a1b2c3d4`) or nanoseconds (`a1b23c4d`); both orders and
//! both precisions are read, and files are written little-endian.
//!
//! Reading never panics and never trusts a length: a file that ends inside a
//! header or a packet, or whose lengths cannot be right, is an error that
//! names the byte offset where the problem starts.
//!
//! [`PcapWriter`] writes a file to any `Write`, [`PcapReader`] reads one from
//! any `Read`, a record at a time into the caller's buffer.
//!
//! ```
//! use sluice::driver::pcap::format::{LINKTYPE_ETHERNET, PcapError, PcapReader, PcapWriter};
//!
//! let mut writer = PcapWriter::new(Vec::new(), 65535, LINKTYPE_ETHERNET, true)?;
//! writer.write(1_000_000_123, &[0xaa; 60])?;
//! writer.write(2_000_000_456, &[0xbb; 64])?;
//! let file = writer.finish()?;
//! assert_eq!(file.len(), 24 + (16 + 60) + (16 + 64));
//!
//! let mut reader = PcapReader::new(&file[..])?;
//! let mut data = Vec::new();
//! let first = reader.next_into(&mut data)?.unwrap();
//! assert_eq!((first.ts_nanos, first.caplen, &data[..]), (1_000_000_123, 60, &[0xaa; 60][..]));
//! let second = reader.next_into(&mut data)?.unwrap();
//! assert_eq!((second.ts_nanos, second.offset), (2_000_000_456, 24 + 16 + 60));
//! assert!(reader.next_into(&mut data)?.is_none());
//!
//! // A file cut inside its second packet: an error naming where that
//! // packet's data starts.
//! let mut reader = PcapReader::new(&file[..file.len() - 1])?;
//! reader.next_into(&mut data)?;
//! let err = reader.next_into(&mut data).unwrap_err();
//! assert_eq!(err.to_string(), "pcap: truncated packet data at offset 116: 63 of 64 bytes");
//! # Ok::<(), PcapError>(())
//! ```

use std::io::{self, Read, Write};

/// Link type of Ethernet frames.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Size of the global header.
pub const GLOBAL_HEADER_LEN: usize = 24;

/// Size of a record header.
pub const RECORD_HEADER_LEN: usize = 16;

/// The largest captured length accepted when reading, whatever the file's
/// snap length says (libpcap's own limit for Ethernet is 262 144).
pub const MAX_CAPTURE: u32 = 262_144;

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;

/// What is wrong with a pcap file.
#[derive(Debug)]
pub enum PcapError {
    /// Reading or writing failed.
    Io(io::Error),
    /// The file does not start with a pcap magic number.
    BadMagic {
        /// The first four bytes, as a little-endian number.
        found: u32,
    },
    /// The version is not 2.x.
    BadVersion {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
    /// The file ends inside a header or a packet.
    Truncated {
        /// Offset of the header or packet that is cut short.
        offset: u64,
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        have: usize,
    },
    /// A record's lengths cannot be right.
    Corrupt {
        /// The record's number (1-based).
        record: u64,
        /// Offset of the record header.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

impl std::fmt::Display for PcapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PcapError::Io(e) => write!(f, "pcap: {e}"),
            PcapError::BadMagic { found } => {
                write!(f, "pcap: not a pcap file (magic {found:#010x} at offset 0)")
            }
            PcapError::BadVersion { major, minor } => {
                write!(f, "pcap: version {major}.{minor} at offset 4, expected 2.x")
            }
            PcapError::Truncated {
                offset,
                what,
                need,
                have,
            } => write!(
                f,
                "pcap: truncated {what} at offset {offset}: {have} of {need} bytes"
            ),
            PcapError::Corrupt {
                record,
                offset,
                what,
            } => {
                write!(
                    f,
                    "pcap: corrupt record {record} at offset {offset}: {what}"
                )
            }
        }
    }
}

impl std::error::Error for PcapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PcapError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for PcapError {
    fn from(e: io::Error) -> Self {
        PcapError::Io(e)
    }
}

/// The global header's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileInfo {
    /// Maximum bytes captured per packet.
    pub snaplen: u32,
    /// Link type (1: Ethernet).
    pub linktype: u32,
    /// Sub-second timestamps are nanoseconds (else microseconds).
    pub nanos: bool,
    /// The file is big-endian.
    pub big_endian: bool,
}

/// One record's facts (its bytes go to the caller's buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Timestamp in nanoseconds since the epoch.
    pub ts_nanos: u64,
    /// Bytes captured (the length of the data read).
    pub caplen: u32,
    /// Length of the packet on the wire (at least `caplen`).
    pub origlen: u32,
    /// Offset of the record header in the file.
    pub offset: u64,
}

/// Reads `buf.len()` bytes unless the input ends first; returns how many.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads records from a pcap file.
#[derive(Debug)]
pub struct PcapReader<R> {
    input: R,
    info: FileInfo,
    /// Offset of the next record header.
    offset: u64,
    /// Records read.
    records: u64,
}

/// The first four bytes of `h` read little-endian, if they are one of the
/// four magics (either resolution, either byte order); else `BadMagic`.
fn check_magic(h: &[u8]) -> Result<u32, PcapError> {
    let le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let magics = [
        MAGIC_US,
        MAGIC_NS,
        MAGIC_US.swap_bytes(),
        MAGIC_NS.swap_bytes(),
    ];
    if magics.contains(&le) {
        Ok(le)
    } else {
        Err(PcapError::BadMagic { found: le })
    }
}

/// The 32-bit word at `h[i..i + 4]` in a file's byte order.
fn word_at(h: &[u8], i: usize, big_endian: bool) -> u32 {
    let b = [h[i], h[i + 1], h[i + 2], h[i + 3]];
    if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

/// Checks a global header and reads its facts.
pub fn parse_global_header(h: &[u8; GLOBAL_HEADER_LEN]) -> Result<FileInfo, PcapError> {
    let le = check_magic(h)?;
    let big_endian = le == MAGIC_US.swap_bytes() || le == MAGIC_NS.swap_bytes();
    let u16_at = |i: usize| {
        let b = [h[i], h[i + 1]];
        if big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    };
    let u32_at = |i: usize| word_at(h, i, big_endian);
    let (major, minor) = (u16_at(4), u16_at(6));
    if major != 2 {
        return Err(PcapError::BadVersion { major, minor });
    }
    Ok(FileInfo {
        snaplen: u32_at(16),
        linktype: u32_at(20),
        nanos: u32_at(0) == MAGIC_NS,
        big_endian,
    })
}

/// The largest captured length a record of a file with `info` may have:
/// [`MAX_CAPTURE`], or the file's snap length up to four times that.
pub fn max_caplen(info: &FileInfo) -> u32 {
    MAX_CAPTURE.max(info.snaplen.min(MAX_CAPTURE * 4))
}

/// Checks record header `h` of a file with `info`: the record's facts, its
/// data not read yet. `offset` is where the header is, `record` its number
/// (1-based); both go into the error. A length that cannot be right is an
/// error here, before anything is allocated for the data.
pub fn parse_record_header(
    info: &FileInfo,
    h: &[u8; RECORD_HEADER_LEN],
    offset: u64,
    record: u64,
) -> Result<Record, PcapError> {
    let u32_at = |i: usize| word_at(h, i, info.big_endian);
    let (sec, frac, caplen, origlen) = (u32_at(0), u32_at(4), u32_at(8), u32_at(12));
    let corrupt = |what: String| PcapError::Corrupt {
        record,
        offset,
        what,
    };
    let limit = max_caplen(info);
    if caplen > limit {
        return Err(corrupt(format!(
            "captured length {caplen} exceeds {limit} (snap length {})",
            info.snaplen
        )));
    }
    if caplen > origlen {
        return Err(corrupt(format!(
            "captured length {caplen} exceeds the original length {origlen}"
        )));
    }
    let (frac_max, frac_ns) = if info.nanos {
        (1_000_000_000, 1)
    } else {
        (1_000_000, 1_000)
    };
    if frac >= frac_max {
        return Err(corrupt(format!("sub-second timestamp {frac} out of range")));
    }
    Ok(Record {
        ts_nanos: sec as u64 * 1_000_000_000 + frac as u64 * frac_ns,
        caplen,
        origlen,
        offset,
    })
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the global header.
    pub fn new(mut input: R) -> Result<Self, PcapError> {
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        let got = read_full(&mut input, &mut h)?;
        if got >= 4 {
            // A wrong magic is the clearer error for a short file too.
            check_magic(&h)?;
        }
        if got < GLOBAL_HEADER_LEN {
            return Err(PcapError::Truncated {
                offset: 0,
                what: "global header",
                need: GLOBAL_HEADER_LEN,
                have: got,
            });
        }
        Ok(PcapReader {
            input,
            info: parse_global_header(&h)?,
            offset: GLOBAL_HEADER_LEN as u64,
            records: 0,
        })
    }

    /// The global header's facts.
    pub fn info(&self) -> FileInfo {
        self.info
    }

    /// Reads the next record into `data` (replacing its contents). `None` at
    /// a clean end of file (between records).
    pub fn next_into(&mut self, data: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        let offset = self.offset;
        let mut h = [0u8; RECORD_HEADER_LEN];
        let got = read_full(&mut self.input, &mut h)?;
        if got == 0 {
            return Ok(None);
        }
        if got < RECORD_HEADER_LEN {
            return Err(PcapError::Truncated {
                offset,
                what: "record header",
                need: RECORD_HEADER_LEN,
                have: got,
            });
        }
        let rec = parse_record_header(&self.info, &h, offset, self.records + 1)?;
        let caplen = rec.caplen;
        data.clear();
        data.resize(caplen as usize, 0);
        let got = read_full(&mut self.input, data)?;
        if got < caplen as usize {
            data.truncate(got);
            return Err(PcapError::Truncated {
                offset: offset + RECORD_HEADER_LEN as u64,
                what: "packet data",
                need: caplen as usize,
                have: got,
            });
        }
        self.offset = offset + RECORD_HEADER_LEN as u64 + caplen as u64;
        self.records += 1;
        Ok(Some(rec))
    }

    /// Offset of the next record header (the end of the records read).
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

/// The little-endian record header of a packet of `len` bytes stamped
/// `ts_nanos`, cut to `snaplen` (the original length is recorded), with
/// nanosecond or microsecond timestamps; and how many of its bytes the
/// record keeps.
pub fn record_header(
    ts_nanos: u64,
    len: usize,
    snaplen: u32,
    nanos: bool,
) -> ([u8; RECORD_HEADER_LEN], usize) {
    let origlen = u32::try_from(len).unwrap_or(u32::MAX);
    let caplen = origlen.min(snaplen);
    let sec = (ts_nanos / 1_000_000_000) as u32;
    let sub = ts_nanos % 1_000_000_000;
    let frac = if nanos { sub } else { sub / 1_000 } as u32;
    let mut h = [0u8; RECORD_HEADER_LEN];
    h[0..4].copy_from_slice(&sec.to_le_bytes());
    h[4..8].copy_from_slice(&frac.to_le_bytes());
    h[8..12].copy_from_slice(&caplen.to_le_bytes());
    h[12..16].copy_from_slice(&origlen.to_le_bytes());
    (h, caplen as usize)
}

/// Writes a pcap file (little-endian, version 2.4).
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    output: W,
    snaplen: u32,
    nanos: bool,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header. `snaplen` bytes at most are kept of each
    /// packet; `nanos` selects nanosecond timestamps.
    pub fn new(mut output: W, snaplen: u32, linktype: u32, nanos: bool) -> Result<Self, PcapError> {
        let mut h = Vec::with_capacity(GLOBAL_HEADER_LEN);
        h.extend_from_slice(&(if nanos { MAGIC_NS } else { MAGIC_US }).to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&snaplen.to_le_bytes());
        h.extend_from_slice(&linktype.to_le_bytes());
        output.write_all(&h)?;
        Ok(PcapWriter {
            output,
            snaplen,
            nanos,
        })
    }

    /// Writes one packet with timestamp `ts_nanos`, cut to the snap length
    /// (the original length is recorded).
    pub fn write(&mut self, ts_nanos: u64, packet: &[u8]) -> Result<(), PcapError> {
        let (h, caplen) = record_header(ts_nanos, packet.len(), self.snaplen, self.nanos);
        self.output.write_all(&h)?;
        self.output.write_all(&packet[..caplen])?;
        Ok(())
    }

    /// Pushes buffered records to the output.
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.output.flush()?;
        Ok(())
    }

    /// Flushes and gives the output back.
    pub fn finish(mut self) -> Result<W, PcapError> {
        self.output.flush()?;
        Ok(self.output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(nanos: bool) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new(), 64, LINKTYPE_ETHERNET, nanos).unwrap();
        w.write(1_700_000_000_123_456_789, &[0xaa; 60]).unwrap();
        w.write(1_700_000_001_000_000_000, &[0xbb; 100]).unwrap(); // cut to 64
        w.write(5, &[]).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn global_header_bytes_are_the_classic_format() {
        let f = sample(false);
        assert_eq!(
            &f[..24],
            &[
                0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 1, 0, 0, 0
            ]
        );
        // First record: seconds, microseconds, caplen 60, origlen 60.
        assert_eq!(&f[24..28], &1_700_000_000u32.to_le_bytes());
        assert_eq!(&f[28..32], &123_456u32.to_le_bytes());
        assert_eq!(&f[32..40], &[60, 0, 0, 0, 60, 0, 0, 0]);
    }

    #[test]
    fn write_then_read_back_identical() {
        for nanos in [false, true] {
            let f = sample(nanos);
            let mut r = PcapReader::new(&f[..]).unwrap();
            assert_eq!(
                r.info(),
                FileInfo {
                    snaplen: 64,
                    linktype: 1,
                    nanos,
                    big_endian: false
                }
            );
            let mut d = Vec::new();
            let a = r.next_into(&mut d).unwrap().unwrap();
            assert_eq!((a.caplen, a.origlen, a.offset), (60, 60, 24));
            let want = if nanos {
                1_700_000_000_123_456_789
            } else {
                1_700_000_000_123_456_000
            };
            assert_eq!(a.ts_nanos, want);
            assert_eq!(d, vec![0xaa; 60]);
            let b = r.next_into(&mut d).unwrap().unwrap();
            assert_eq!((b.caplen, b.origlen), (64, 100), "snap length honoured");
            assert_eq!(d, vec![0xbb; 64]);
            let c = r.next_into(&mut d).unwrap().unwrap();
            // 5 ns survives in a nanosecond file, rounds to 0 in a microsecond one.
            assert_eq!((c.caplen, c.ts_nanos), (0, if nanos { 5 } else { 0 }));
            assert!(r.next_into(&mut d).unwrap().is_none());
            // Written again from what was read: the same bytes.
            let mut r = PcapReader::new(&f[..]).unwrap();
            let mut w = PcapWriter::new(Vec::new(), 64, 1, nanos).unwrap();
            while let Some(rec) = r.next_into(&mut d).unwrap() {
                // The original length is what the writer records; bytes past
                // the snap length are cut again.
                let mut pkt = d.clone();
                pkt.resize(rec.origlen as usize, 0);
                w.write(rec.ts_nanos, &pkt).unwrap();
            }
            assert_eq!(w.finish().unwrap(), f);
        }
    }

    #[test]
    fn big_endian_files_are_read() {
        let mut f = vec![
            0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0,
            1,
        ];
        f.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0, 2, 0xde, 0xad]);
        let mut r = PcapReader::new(&f[..]).unwrap();
        assert!(r.info().big_endian && r.info().snaplen == 65535);
        let mut d = Vec::new();
        let rec = r.next_into(&mut d).unwrap().unwrap();
        assert_eq!((rec.ts_nanos, rec.caplen), (7_000_009_000, 2));
        assert_eq!(d, [0xde, 0xad]);
    }

    #[test]
    fn bad_files_are_errors_naming_the_offset() {
        let f = sample(false);
        let err = |bytes: &[u8]| -> String {
            let mut d = Vec::new();
            match PcapReader::new(bytes) {
                Err(e) => e.to_string(),
                Ok(mut r) => loop {
                    match r.next_into(&mut d) {
                        Err(e) => break e.to_string(),
                        Ok(None) => break "ok".into(),
                        Ok(Some(_)) => {}
                    }
                },
            }
        };
        assert_eq!(
            err(b"GIF89a......"),
            "pcap: not a pcap file (magic 0x38464947 at offset 0)"
        );
        assert_eq!(
            err(&f[..10]),
            "pcap: truncated global header at offset 0: 10 of 24 bytes"
        );
        assert_eq!(
            err(&f[..30]),
            "pcap: truncated record header at offset 24: 6 of 16 bytes"
        );
        assert_eq!(
            err(&f[..70]),
            "pcap: truncated packet data at offset 40: 30 of 60 bytes"
        );
        let mut v3 = f.clone();
        v3[4] = 3;
        assert_eq!(err(&v3), "pcap: version 3.4 at offset 4, expected 2.x");
        let mut big = f.clone();
        big[32..36].copy_from_slice(&10_000_000u32.to_le_bytes());
        assert_eq!(
            err(&big),
            "pcap: corrupt record 1 at offset 24: captured length 10000000 exceeds 262144 (snap length 64)"
        );
        let mut longer = f.clone();
        longer[32..36].copy_from_slice(&61u32.to_le_bytes());
        assert_eq!(
            err(&longer),
            "pcap: corrupt record 1 at offset 24: captured length 61 exceeds the original length 60"
        );
        let mut ts = f.clone();
        ts[28..32].copy_from_slice(&1_000_000u32.to_le_bytes());
        assert_eq!(
            err(&ts),
            "pcap: corrupt record 1 at offset 24: sub-second timestamp 1000000 out of range"
        );
        assert_eq!(err(&f), "ok");
    }

    proptest::proptest! {
        /// A valid file cut anywhere, or with any byte changed: an error or
        /// records, never a panic, and never more data than the file holds.
        #[test]
        fn cut_or_flipped_files_never_panic(cut in 0usize..400, at in 0usize..400, byte in proptest::prelude::any::<u8>()) {
            let mut f = sample(false);
            if at < f.len() {
                f[at] = byte;
            }
            f.truncate(cut.min(f.len()));
            if let Ok(mut r) = PcapReader::new(&f[..]) {
                let mut d = Vec::new();
                let mut total = 0;
                while let Ok(Some(rec)) = r.next_into(&mut d) {
                    total += RECORD_HEADER_LEN + rec.caplen as usize;
                    proptest::prop_assert_eq!(d.len(), rec.caplen as usize);
                    proptest::prop_assert!(total + GLOBAL_HEADER_LEN <= f.len());
                }
            }
        }
    }
}
