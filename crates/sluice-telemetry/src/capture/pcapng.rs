//! Writing pcapng files: a section header (SHB), an interface description
//! (IDB) per interface, an enhanced packet block (EPB) per packet and an
//! interface statistics block (ISB) per interface at the end.
//!
//! Blocks are written little-endian (the section header's byte-order
//! magic says so); timestamps are in nanoseconds since the Unix epoch
//! (`if_tsresol` = 9), split into high and low 32-bit halves as the format
//! wants.

use std::io::{self, Write};

/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u16 = 1;

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const ISB: u32 = 5;
const EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

const OPT_END: u16 = 0;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_TSRESOL: u16 = 9;
const ISB_STARTTIME: u16 = 2;
const ISB_ENDTIME: u16 = 3;
const ISB_IFRECV: u16 = 4;
const ISB_IFDROP: u16 = 5;

/// One block being built: its type, then its body; [`Block::finish`]
/// frames it with the lengths.
struct Block {
    body: Vec<u8>,
    kind: u32,
}

impl Block {
    fn new(kind: u32) -> Block {
        Block {
            body: Vec::new(),
            kind,
        }
    }

    fn u16(&mut self, v: u16) -> &mut Block {
        self.body.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn u32(&mut self, v: u32) -> &mut Block {
        self.body.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A timestamp: high half, then low half.
    fn ts(&mut self, ns: u64) -> &mut Block {
        self.u32((ns >> 32) as u32).u32(ns as u32)
    }

    /// Bytes, padded to 32 bits.
    fn padded(&mut self, bytes: &[u8]) -> &mut Block {
        self.body.extend_from_slice(bytes);
        let pad = (4 - bytes.len() % 4) % 4;
        self.body.extend_from_slice(&[0; 3][..pad]);
        self
    }

    /// An option (at most 65535 bytes of value; longer ones are cut).
    fn option(&mut self, code: u16, value: &[u8]) -> &mut Block {
        let value = &value[..value.len().min(u16::MAX as usize)];
        self.u16(code).u16(value.len() as u16).padded(value)
    }

    fn end_options(&mut self) -> &mut Block {
        self.u16(OPT_END).u16(0)
    }

    fn finish(&self, out: &mut impl Write) -> io::Result<()> {
        let total = (self.body.len() + 12) as u32;
        out.write_all(&self.kind.to_le_bytes())?;
        out.write_all(&total.to_le_bytes())?;
        out.write_all(&self.body)?;
        out.write_all(&total.to_le_bytes())
    }
}

/// An interface's figures for its statistics block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InterfaceStats {
    /// When the capture started (ns).
    pub start_ns: u64,
    /// When it ended (ns): also the block's timestamp.
    pub end_ns: u64,
    /// Packets written for the interface (`isb_ifrecv`).
    pub received: u64,
    /// Copies dropped because the capture fell behind (`isb_ifdrop`).
    pub dropped: u64,
}

/// A pcapng writer (see the module docs).
#[derive(Debug)]
pub struct PcapngWriter<W: Write> {
    out: W,
    interfaces: u32,
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the section header, naming `application` (`shb_userappl`).
    pub fn new(mut out: W, application: &str) -> io::Result<PcapngWriter<W>> {
        let mut b = Block::new(SHB);
        b.u32(BYTE_ORDER_MAGIC).u16(1).u16(0);
        // Section length not given.
        b.u32(u32::MAX).u32(u32::MAX);
        b.option(SHB_USERAPPL, application.as_bytes()).end_options();
        b.finish(&mut out)?;
        Ok(PcapngWriter { out, interfaces: 0 })
    }

    /// Writes an Ethernet interface's description: its `name`
    /// (`if_name`), `snaplen`, ns timestamps. Returns its id.
    pub fn add_interface(&mut self, name: &str, snaplen: u32) -> io::Result<u32> {
        let mut b = Block::new(IDB);
        b.u16(LINKTYPE_ETHERNET).u16(0).u32(snaplen);
        b.option(IF_NAME, name.as_bytes())
            .option(IF_TSRESOL, &[9])
            .end_options();
        b.finish(&mut self.out)?;
        self.interfaces += 1;
        Ok(self.interfaces - 1)
    }

    /// Writes a packet of interface `interface`: `data` captured of
    /// `orig_len` bytes, at `ts_ns`.
    pub fn packet(
        &mut self,
        interface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> io::Result<()> {
        if interface >= self.interfaces {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no interface {interface} described"),
            ));
        }
        let mut b = Block::new(EPB);
        b.u32(interface)
            .ts(ts_ns)
            .u32(data.len() as u32)
            .u32(orig_len.max(data.len() as u32))
            .padded(data);
        b.finish(&mut self.out)
    }

    /// Writes interface `interface`'s statistics.
    pub fn statistics(&mut self, interface: u32, stats: InterfaceStats) -> io::Result<()> {
        let mut b = Block::new(ISB);
        b.u32(interface).ts(stats.end_ns);
        let half = |ns: u64| {
            let mut v = ((ns >> 32) as u32).to_le_bytes().to_vec();
            v.extend_from_slice(&(ns as u32).to_le_bytes());
            v
        };
        b.option(ISB_STARTTIME, &half(stats.start_ns))
            .option(ISB_ENDTIME, &half(stats.end_ns))
            .option(ISB_IFRECV, &stats.received.to_le_bytes())
            .option(ISB_IFDROP, &stats.dropped.to_le_bytes())
            .end_options();
        b.finish(&mut self.out)
    }

    /// Flushes and hands back the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_header_is_the_literal_block() {
        let out = PcapngWriter::new(Vec::new(), "sluice")
            .unwrap()
            .finish()
            .unwrap();
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x0a, 0x0d, 0x0d, 0x0a, 44, 0, 0, 0,
            0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            4, 0, 6, 0, b's', b'l', b'u', b'i', b'c', b'e', 0, 0,
            0, 0, 0, 0,
            44, 0, 0, 0,
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn interface_and_packet_blocks_are_the_literal_blocks() {
        let mut w = PcapngWriter::new(Vec::new(), "x").unwrap();
        let shb_len = 40;
        assert_eq!(w.add_interface("port0/rx0", 128).unwrap(), 0);
        w.packet(
            0,
            0x0000_0001_0000_0002,
            60,
            &[0xaa, 0xbb, 0xcc, 0xdd, 0xee],
        )
        .unwrap();
        let out = w.finish().unwrap();
        #[rustfmt::skip]
        let idb: &[u8] = &[
            1, 0, 0, 0, 48, 0, 0, 0,
            1, 0, 0, 0, 128, 0, 0, 0,
            2, 0, 9, 0, b'p', b'o', b'r', b't', b'0', b'/', b'r', b'x', b'0', 0, 0, 0,
            9, 0, 1, 0, 9, 0, 0, 0,
            0, 0, 0, 0,
            48, 0, 0, 0,
        ];
        #[rustfmt::skip]
        let epb: &[u8] = &[
            6, 0, 0, 0, 40, 0, 0, 0,
            0, 0, 0, 0,
            1, 0, 0, 0, 2, 0, 0, 0,
            5, 0, 0, 0, 60, 0, 0, 0,
            0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0, 0, 0,
            40, 0, 0, 0,
        ];
        assert_eq!(&out[shb_len..shb_len + idb.len()], idb);
        assert_eq!(&out[shb_len + idb.len()..], epb);
    }

    #[test]
    fn statistics_carry_the_drops_and_times() {
        let mut w = PcapngWriter::new(Vec::new(), "x").unwrap();
        w.add_interface("port0/tx0", 64).unwrap();
        let before = w.out.len();
        let stats = InterfaceStats {
            start_ns: 5,
            end_ns: 7,
            received: 9,
            dropped: 11,
        };
        w.statistics(0, stats).unwrap();
        let out = w.finish().unwrap();
        let isb = &out[before..];
        assert_eq!(&isb[..4], &[5, 0, 0, 0]);
        let len = u32::from_le_bytes(isb[4..8].try_into().unwrap()) as usize;
        assert_eq!(isb.len(), len);
        // Interface, timestamp (end), then the four options.
        assert_eq!(&isb[8..20], &[0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0]);
        assert_eq!(&isb[20..32], &[2, 0, 8, 0, 0, 0, 0, 0, 5, 0, 0, 0]);
        assert_eq!(&isb[32..44], &[3, 0, 8, 0, 0, 0, 0, 0, 7, 0, 0, 0]);
        assert_eq!(&isb[44..56], &[4, 0, 8, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&isb[56..68], &[5, 0, 8, 0, 11, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&isb[68..72], &[0, 0, 0, 0]);
    }

    #[test]
    fn a_packet_of_an_undescribed_interface_is_an_error() {
        let mut w = PcapngWriter::new(Vec::new(), "x").unwrap();
        assert!(w.packet(0, 0, 1, &[1]).is_err());
    }

    #[test]
    fn pcap_file_reads_the_blocks_back() {
        use pcap_file::pcapng::blocks::interface_statistics::InterfaceStatisticsOption;
        use pcap_file::pcapng::{Block as Read, PcapNgReader};
        let mut w = PcapngWriter::new(Vec::new(), "sluice").unwrap();
        w.add_interface("port0/rx0", 1518).unwrap();
        w.add_interface("port0/tx0", 1518).unwrap();
        let frame: Vec<u8> = (0..61).collect();
        w.packet(1, 1_700_000_000_000_000_123, 61, &frame).unwrap();
        w.statistics(
            1,
            InterfaceStats {
                start_ns: 1,
                end_ns: 2,
                received: 1,
                dropped: 4,
            },
        )
        .unwrap();
        let out = w.finish().unwrap();
        let mut r = PcapNgReader::new(&out[..]).unwrap();
        let mut seen = Vec::new();
        while let Some(b) = r.next_block() {
            match b.unwrap() {
                Read::InterfaceDescription(i) => seen.push(format!("idb {}", i.snaplen)),
                Read::EnhancedPacket(p) => {
                    assert_eq!(&p.data[..], &frame[..]);
                    assert_eq!(p.timestamp.as_nanos(), 1_700_000_000_000_000_123);
                    seen.push(format!("epb {} {}", p.interface_id, p.original_len));
                }
                Read::InterfaceStatistics(s) => {
                    let drops = s.options.iter().find_map(|o| match o {
                        InterfaceStatisticsOption::IsbIfDrop(d) => Some(*d),
                        _ => None,
                    });
                    seen.push(format!("isb {} {drops:?}", s.interface_id));
                }
                other => panic!("unexpected block {other:?}"),
            }
        }
        assert_eq!(r.section().endianness, pcap_file::Endianness::Little);
        assert_eq!(seen, ["idb 1518", "idb 1518", "epb 1 61", "isb 1 Some(4)"]);
    }
}
