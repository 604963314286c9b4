//! The frames a tester sends: header templates, the stamp, the send time,
//! the payload pattern, and the arithmetic that keeps every checksum valid
//! without summing the payload.
//!
//! A frame is Ethernet, IPv4 or IPv6, UDP or TCP, then the 16-byte stamp
//! (big-endian, byte ranges in [`field`]), then the payload, whose first
//! [`TSC_LEN`] bytes are the send time when the payload is that long:
//!
//! ```text
//! | Ethernet 14 | IPv4 20 / IPv6 40 | UDP 8 / TCP 20 | magic | id | seq | check | tsc | payload ... |
//!                                                    '----- stamp, 16 bytes ----'  6
//! ```
//!
//! - `magic` is [`MAGIC`]; `id` is the stream's tag (12 bits) above the flow
//!   (20 bits); `seq` is the low 32 bits of the flow's sequence number. The
//!   tag is unique among the tester streams alive in the process (the only
//!   tester's streams have tags equal to their numbers), so a checker knows
//!   its own tester's streams from another tester's, although each tester
//!   numbers its streams from 0;
//! - `check` is `mix(id) ^ mix(seq)` with a different bijective 32-bit mixer
//!   (murmur3's finaliser, keyed by the seed) on each side: changing any bits of
//!   `id` alone, of `seq` alone, or of `check` changes the comparison;
//! - `tsc` is the low 48 bits of the generator's TSC reading when it wrote the
//!   frame (the `now_tsc` of [`Generator::fill`](super::Generator::fill)),
//!   present when the frame has at least [`TSC_LEN`] bytes after the stamp
//!   (so 64-byte UDP/IPv4 frames carry it; shorter payloads carry none and
//!   give no latency sample). 48 bits wrap after 2^48 ticks, more than 15
//!   hours at 5 GHz, so `now - tsc` modulo 2^48 is the exact one-way time of
//!   any frame that comes back sooner;
//! - the rest of the payload repeats one 8-byte word derived from (seed, id,
//!   seq), so the checker compares it word by word and a payload from another
//!   frame does not pass.
//!
//! Everything but the MAC addresses, the TTL / hop limit, the IPv4 header
//! checksum and `tsc` is a function of (stream, tag, flow, seq, length): the
//! checker rebuilds the headers and stamp the generator wrote and compares.
//!
//! **The send time and corruption.** `tsc` is the one field the checker cannot
//! rebuild, so the L4 checksum covers it: the generator sums its three 16-bit
//! words into the checksum, and the checker rebuilds the headers with the
//! `tsc` it reads from the frame, so the L4 checksum it rebuilds matches the
//! frame's only when those words sum as the ones sent did. Any single bit
//! flip, and any change of one 16-bit word other than `0x0000` ↔ `0xffff`
//! (equal in ones' complement), changes the sum and makes the frame corrupt;
//! like any Internet checksum it misses changes that cancel out (two words
//! moved in opposite directions by the same amount). A frame that passes is
//! measured; one that fails gives no sample.
//!
//! **Checksums in O(1).** The template is summed once with its flow-dependent
//! fields (source address, source port) and lengths at zero. Per frame the
//! IPv4 header checksum is that sum plus the source address and total length;
//! the L4 checksum adds the pseudo-header, the stamp (8 words), `tsc` (3
//! words) and the payload pattern, whose sum is `(len / 8) * sum(word) +
//! sum(tail)` because it is one word repeated and starts at an even offset
//! (the stamp and `tsc` are an even number of bytes). No frame byte is read
//! back.
//!
//! **Flow tuples.** Flow `f` of stream `s`: IPv4 `10.s.f>>8.f → 198.18.0.1`
//! (RFC 2544's benchmarking network), IPv6 `2001:2:0:1:0:s:f>>16:f →
//! 2001:2:0:2::1` (RFC 5180's), source port `1024 + (f >> 16)`, destination
//! port 9. With `dst=stream` the destination is `198.18.s.1` /
//! `2001:2:0:2::s:1`, so routes can tell the streams apart. Tuples are distinct for every flow of a stream, and across streams
//! for IPv6 (IPv4 repeats every 256 streams).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::net::checksum;
use crate::net::{EtherType, ip_proto};

use super::config::{L3, L4, TesterConfig};

/// The stamp's first four bytes: `"SLTS"`.
pub const MAGIC: u32 = 0x534c_5453;
/// Length of the stamp.
pub const STAMP_LEN: usize = 16;
/// Length of the send time after the stamp: the low 48 bits of the TSC.
pub const TSC_LEN: usize = 6;
/// The send times a frame can carry: `TSC_LEN` bytes' worth.
pub const TSC_MASK: u64 = (1 << (8 * TSC_LEN)) - 1;
/// The most flows a stream can have (20 bits of the stamp id).
pub const MAX_FLOWS: u32 = 1 << 20;
/// The most tester streams alive at once in a process: each has its own
/// tag, the 12 high bits of the stamp id.
pub const MAX_STREAMS: u32 = 1 << 12;
/// Source port of flow 0; flows above 65535 add `f >> 16`.
pub const SRC_PORT_BASE: u16 = 1024;
/// Destination port of every flow (discard).
pub const DST_PORT: u16 = 9;
/// TTL and hop limit of generated frames.
pub const TTL: u8 = 64;

/// Byte ranges of the stamp, from its start.
pub mod field {
    use std::ops::Range;
    /// [`MAGIC`](super::MAGIC).
    pub const MAGIC: Range<usize> = 0..4;
    /// Stream tag (high 12 bits) and flow (low 20 bits).
    pub const ID: Range<usize> = 4..8;
    /// Low 32 bits of the flow's sequence number.
    pub const SEQ: Range<usize> = 8..12;
    /// `mix(id) ^ mix(seq)`.
    pub const CHECK: Range<usize> = 12..16;
}

/// A flow's addresses, ports and protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// IP protocol ([`ip_proto::UDP`] or [`ip_proto::TCP`]).
    pub proto: u8,
}

const ETH_LEN: usize = 14;
const V4_DST: [u8; 4] = [198, 18, 0, 1];
const V6_SRC_PREFIX: [u8; 10] = [0x20, 0x01, 0, 0x02, 0, 0, 0, 0x01, 0, 0];
const V6_DST: [u8; 16] = [0x20, 0x01, 0, 0x02, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 1];
/// Longest header-plus-stamp-plus-send-time: Ethernet, IPv6, TCP, stamp,
/// TSC.
pub(crate) const MAX_HEAD: usize = ETH_LEN + 40 + 20 + STAMP_LEN + TSC_LEN;

/// A stream as its frames name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamIds {
    /// Its number in its tester, from 0: in the addresses.
    pub(crate) number: u16,
    /// Its tag, unique among the streams alive in the process: in the stamp.
    pub(crate) tag: u16,
}

/// The stamp id of a flow of the stream tagged `tag`.
#[inline(always)]
pub(crate) fn stamp_id(tag: u16, flow: u32) -> u32 {
    (u32::from(tag) << 20) | (flow & (MAX_FLOWS - 1))
}

/// murmur3's 32-bit finaliser: a bijection on `u32`.
#[inline(always)]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// murmur3's 64-bit finaliser.
#[inline(always)]
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Folds a 64-bit ones' complement sum to 16 bits.
#[inline(always)]
fn fold64(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[inline(always)]
fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// The frame layout and template of one tester configuration.
#[derive(Debug)]
pub(crate) struct Layout {
    pub(crate) l3: L3,
    pub(crate) l4: L4,
    /// Where the L4 header starts.
    pub(crate) l4_off: usize,
    /// Where the stamp starts.
    pub(crate) stamp_off: usize,
    /// Where the payload starts (with the send time when the frame is long
    /// enough): also the shortest frame.
    pub(crate) payload_off: usize,
    /// Offset of the L4 checksum.
    l4_csum: usize,
    /// Headers with flow-dependent fields, lengths and checksums at zero.
    head: [u8; MAX_HEAD],
    /// Whether the destination address depends on the stream (then it is
    /// zero in `head` and left out of `ip_sum` and `l4_sum`).
    dst_per_stream: bool,
    /// Sum of the IPv4 header template.
    ip_sum: u32,
    /// Sum of the pseudo-header's constant part (destination, protocol) and
    /// the L4 header template.
    l4_sum: u32,
    seed: u64,
    k_id: u32,
    k_seq: u32,
}

impl Layout {
    pub(crate) fn new(c: &TesterConfig) -> Layout {
        let l3_len = match c.l3 {
            L3::Ipv4 => 20,
            L3::Ipv6 => 40,
        };
        let (l4_len, proto, l4_csum) = match c.l4 {
            L4::Udp => (8, ip_proto::UDP, 6),
            L4::Tcp => (20, ip_proto::TCP, 16),
        };
        let l4_off = ETH_LEN + l3_len;
        let stamp_off = l4_off + l4_len;
        let mut head = [0u8; MAX_HEAD];
        head[0..6].copy_from_slice(&c.dst_mac.0);
        head[6..12].copy_from_slice(&c.src_mac.0);
        let ip = ETH_LEN;
        // With a destination per stream, the template's is zero and each
        // frame adds its own (as the source).
        let (v4_dst, v6_dst) = if c.dst_per_stream {
            ([0; 4], [0; 16])
        } else {
            (V4_DST, V6_DST)
        };
        let pseudo = match c.l3 {
            L3::Ipv4 => {
                put16(&mut head, 12, EtherType::IPV4.0);
                head[ip] = 0x45;
                put16(&mut head, ip + 6, 0x4000); // don't fragment
                head[ip + 8] = TTL;
                head[ip + 9] = proto;
                head[ip + 16..ip + 20].copy_from_slice(&v4_dst);
                checksum::pseudo_ipv4([0; 4], v4_dst, proto, 0)
            }
            L3::Ipv6 => {
                put16(&mut head, 12, EtherType::IPV6.0);
                head[ip] = 0x60;
                head[ip + 6] = proto;
                head[ip + 7] = TTL;
                head[ip + 24..ip + 40].copy_from_slice(&v6_dst);
                checksum::pseudo_ipv6([0; 16], v6_dst, proto, 0)
            }
        };
        put16(&mut head, l4_off + 2, DST_PORT);
        if c.l4 == L4::Tcp {
            head[l4_off + 12] = 5 << 4; // data offset: 20 bytes
            head[l4_off + 13] = 0x18; // PSH | ACK
            put16(&mut head, l4_off + 14, 0xffff); // window
        }
        let ip_sum = match c.l3 {
            L3::Ipv4 => checksum::sum(0, &head[ip..ip + 20]),
            L3::Ipv6 => 0,
        };
        let l4_sum = checksum::sum(pseudo, &head[l4_off..stamp_off]);
        let k = fmix64(c.seed ^ 0x9e37_79b9_7f4a_7c15);
        Layout {
            l3: c.l3,
            l4: c.l4,
            l4_off,
            stamp_off,
            payload_off: stamp_off + STAMP_LEN,
            l4_csum: l4_off + l4_csum,
            head,
            dst_per_stream: c.dst_per_stream,
            ip_sum,
            l4_sum,
            seed: c.seed,
            k_id: k as u32,
            k_seq: (k >> 32) as u32,
        }
    }

    /// The stamp check of `id` and `seq`.
    #[inline(always)]
    pub(crate) fn check(&self, id: u32, seq: u32) -> u32 {
        fmix32(id ^ self.k_id) ^ fmix32(seq.wrapping_add(self.k_seq)).rotate_left(7)
    }

    /// The payload word of `id` and `seq`, as the bytes it is written with.
    #[inline(always)]
    pub(crate) fn pattern(&self, id: u32, seq: u32) -> [u8; 8] {
        fmix64(self.seed ^ (u64::from(id) << 32 | u64::from(seq))).to_be_bytes()
    }

    /// Source address bytes of a flow (4 or 16 used) and how many.
    #[inline(always)]
    fn src_addr(&self, stream: u16, flow: u32) -> ([u8; 16], usize) {
        let mut a = [0u8; 16];
        match self.l3 {
            L3::Ipv4 => {
                a[..4].copy_from_slice(&[10, stream as u8, (flow >> 8) as u8, flow as u8]);
                (a, 4)
            }
            L3::Ipv6 => {
                a[..10].copy_from_slice(&V6_SRC_PREFIX);
                a[10..12].copy_from_slice(&stream.to_be_bytes());
                a[12..16].copy_from_slice(&flow.to_be_bytes());
                (a, 16)
            }
        }
    }

    /// Destination address bytes of a stream (4 or 16 used).
    #[inline(always)]
    fn dst_addr(&self, stream: u16) -> [u8; 16] {
        let mut a = [0u8; 16];
        match self.l3 {
            L3::Ipv4 => {
                a[..4].copy_from_slice(&V4_DST);
                if self.dst_per_stream {
                    a[2] = stream as u8;
                }
            }
            L3::Ipv6 => {
                a = V6_DST;
                if self.dst_per_stream {
                    a[12..14].copy_from_slice(&stream.to_be_bytes());
                }
            }
        }
        a
    }

    #[inline(always)]
    fn src_port(flow: u32) -> u16 {
        SRC_PORT_BASE + (flow >> 16) as u16
    }

    /// The addresses, ports and protocol of a flow.
    pub(crate) fn flow_tuple(&self, stream: u16, flow: u32) -> FlowTuple {
        let (a, _) = self.src_addr(stream, flow);
        let d = self.dst_addr(stream);
        let (src, dst) = match self.l3 {
            L3::Ipv4 => (
                IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
                IpAddr::V4(Ipv4Addr::new(d[0], d[1], d[2], d[3])),
            ),
            L3::Ipv6 => (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(d))),
        };
        FlowTuple {
            src,
            dst,
            src_port: Self::src_port(flow),
            dst_port: DST_PORT,
            proto: match self.l4 {
                L4::Udp => ip_proto::UDP,
                L4::Tcp => ip_proto::TCP,
            },
        }
    }

    /// Where the payload pattern of a `len`-byte frame starts: after the
    /// send time when the frame has room for it (see the module docs).
    #[inline(always)]
    pub(crate) fn pattern_off(&self, len: usize) -> usize {
        if self.has_tsc(len) {
            self.payload_off + TSC_LEN
        } else {
            self.payload_off
        }
    }

    /// Whether a `len`-byte frame carries the send time.
    #[inline(always)]
    pub(crate) fn has_tsc(&self, len: usize) -> bool {
        len >= self.payload_off + TSC_LEN
    }

    /// The send time a `len`-byte `frame` carries, if it has room for one
    /// (`frame.len() >= len`).
    #[inline(always)]
    pub(crate) fn read_tsc(&self, frame: &[u8], len: usize) -> Option<u64> {
        self.has_tsc(len).then(|| {
            let b = &frame[self.payload_off..self.payload_off + TSC_LEN];
            b.iter().fold(0u64, |acc, &x| acc << 8 | u64::from(x))
        })
    }

    /// Writes the headers, stamp and (when the frame has room) the low 48
    /// bits of `tsc` of a `len`-byte frame into
    /// `buf[..pattern_off(len)]` (`payload_off <= len <= buf.len()`, `len`
    /// at most 65535 + 14) and returns the payload word. The L4 checksum
    /// already covers the payload [`fill_payload`](Self::fill_payload) will
    /// write.
    #[inline]
    pub(crate) fn write_head(
        &self,
        buf: &mut [u8],
        stream: StreamIds,
        flow: u32,
        seq: u32,
        len: usize,
        tsc: u64,
    ) -> [u8; 8] {
        let end = self.pattern_off(len);
        let h = &mut buf[..end];
        h[..self.stamp_off].copy_from_slice(&self.head[..self.stamp_off]);
        let (src, n) = self.src_addr(stream.number, flow);
        let mut src_sum = u64::from(checksum::sum(0, &src[..n]));
        // A per-stream destination is summed as the source is (both are in
        // the IPv4 header and in the pseudo-header).
        let dst = self.dst_per_stream.then(|| self.dst_addr(stream.number));
        if let Some(d) = &dst {
            src_sum += u64::from(checksum::sum(0, &d[..n]));
        }
        let sport = Self::src_port(flow);
        let ip = ETH_LEN;
        let l4 = self.l4_off;
        let l4_len = (len - l4) as u64;
        // Pseudo-header: source address and L4 length; L4 header: source port.
        let mut l4_acc = u64::from(self.l4_sum) + src_sum + l4_len + u64::from(sport);
        match self.l3 {
            L3::Ipv4 => {
                h[ip + 12..ip + 16].copy_from_slice(&src[..4]);
                if let Some(d) = &dst {
                    h[ip + 16..ip + 20].copy_from_slice(&d[..4]);
                }
                let total = (len - ETH_LEN) as u16;
                put16(h, ip + 2, total);
                let ip_acc = u64::from(self.ip_sum) + src_sum + u64::from(total);
                put16(h, ip + 10, !fold64(ip_acc));
            }
            L3::Ipv6 => {
                h[ip + 8..ip + 24].copy_from_slice(&src);
                if let Some(d) = &dst {
                    h[ip + 24..ip + 40].copy_from_slice(d);
                }
                put16(h, ip + 4, l4_len as u16);
            }
        }
        put16(h, l4, sport);
        if self.l4 == L4::Udp {
            put16(h, l4 + 4, l4_len as u16);
            l4_acc += l4_len;
        }
        let id = stamp_id(stream.tag, flow);
        let s = self.stamp_off;
        put32(h, s + field::MAGIC.start, MAGIC);
        put32(h, s + field::ID.start, id);
        put32(h, s + field::SEQ.start, seq);
        put32(h, s + field::CHECK.start, self.check(id, seq));
        if end > self.payload_off {
            let t = (tsc & TSC_MASK).to_be_bytes();
            h[self.payload_off..end].copy_from_slice(&t[8 - TSC_LEN..]);
        }
        l4_acc += u64::from(checksum::sum(0, &h[s..end]));
        let word = self.pattern(id, seq);
        l4_acc += payload_sum(&word, len - end);
        let mut c = !fold64(l4_acc);
        if c == 0 && self.l4 == L4::Udp {
            c = 0xffff; // UDP sends a computed 0 as all ones
        }
        put16(h, self.l4_csum, c);
        word
    }

    /// Writes the payload: `word` repeated.
    #[inline]
    pub(crate) fn fill_payload(payload: &mut [u8], word: &[u8; 8]) {
        let mut chunks = payload.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(word);
        }
        let tail = chunks.into_remainder();
        let n = tail.len();
        tail.copy_from_slice(&word[..n]);
    }

    /// True when `payload` is `word` repeated.
    #[inline]
    pub(crate) fn payload_ok(payload: &[u8], word: &[u8; 8]) -> bool {
        let w = u64::from_ne_bytes(*word);
        let mut chunks = payload.chunks_exact(8);
        let mut diff = 0u64;
        for c in &mut chunks {
            diff |= u64::from_ne_bytes(c.try_into().expect("8 bytes")) ^ w;
        }
        let tail = chunks.remainder();
        diff == 0 && tail == &word[..tail.len()]
    }
}

/// The ones' complement sum (unfolded) of `len` bytes of `word` repeated,
/// starting at an even offset.
#[inline(always)]
fn payload_sum(word: &[u8; 8], len: usize) -> u64 {
    let full = u64::from(checksum::sum(0, word));
    (len / 8) as u64 * full + u64::from(checksum::sum(0, &word[..len % 8]))
}
