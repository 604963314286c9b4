//! What the device's parser does to a frame's bytes: find the headers,
//! compute the RSS hash (a table-driven Toeplitz, checked against
//! `crate::net::rss`), check checksums on Rx, fill them in on Tx, insert a
//! VLAN tag. Device-side work only: the driver never parses a frame.

use crate::net::checksum;
use crate::net::ip_proto;
use crate::net::rss::DEFAULT_KEY;

use crate::driver::soft::hw::desc::{ptype, rx};

/// What the parser found in a frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Packet type (`ptype` bits).
    pub ptype: u32,
    /// Offset of the L3 header (0: not IP).
    pub l3: usize,
    /// Offset of the L4 header (0: none known).
    pub l4: usize,
    /// L4 length from the IP header.
    pub l4_len: usize,
    /// IP protocol / next header.
    pub proto: u8,
    /// 4 or 6 (0: not IP).
    pub ip: u8,
    /// The VLAN TCI, when the frame has an 802.1Q tag.
    pub vlan: Option<u16>,
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Parses Ethernet, one optional VLAN tag, IPv4 (any header length, not a
/// fragment) or IPv6 (no extension headers), and notes TCP/UDP. Anything
/// it cannot follow ends the parse there; it never reads past `f`.
pub fn parse(f: &[u8]) -> Parsed {
    let mut p = Parsed::default();
    if f.len() < 14 {
        return p;
    }
    p.ptype = ptype::L2_ETHER;
    let mut off = 12;
    let mut et = be16(f, off);
    if et == 0x8100 && f.len() >= 18 {
        p.vlan = Some(be16(f, 14));
        off += 4;
        et = be16(f, off);
    }
    off += 2;
    match et {
        0x0800 if f.len() >= off + 20 && f[off] >> 4 == 4 => {
            let ihl = (f[off] & 0xf) as usize * 4;
            let total = be16(f, off + 2) as usize;
            if ihl < 20 || total < ihl || f.len() < off + total {
                return p;
            }
            p.ptype |= ptype::L3_IPV4;
            p.ip = 4;
            p.l3 = off;
            p.proto = f[off + 9];
            let frag = be16(f, off + 6) & 0x3fff;
            if frag == 0 {
                p.l4 = off + ihl;
                p.l4_len = total - ihl;
            }
        }
        0x86dd if f.len() >= off + 40 && f[off] >> 4 == 6 => {
            let plen = be16(f, off + 4) as usize;
            if f.len() < off + 40 + plen {
                return p;
            }
            p.ptype |= ptype::L3_IPV6;
            p.ip = 6;
            p.l3 = off;
            p.proto = f[off + 6];
            p.l4 = off + 40;
            p.l4_len = plen;
        }
        _ => return p,
    }
    if p.l4 != 0 {
        match p.proto {
            ip_proto::UDP if p.l4_len >= 8 => p.ptype |= ptype::L4_UDP,
            ip_proto::TCP if p.l4_len >= 20 => p.ptype |= ptype::L4_TCP,
            _ => p.l4 = 0,
        }
    }
    p
}

impl Parsed {
    /// True for TCP or UDP.
    #[inline]
    fn has_l4(&self) -> bool {
        self.l4 != 0
    }

    /// The pseudo-header sum for the L4 checksum.
    fn pseudo(&self, f: &[u8]) -> u32 {
        let l3 = self.l3;
        if self.ip == 4 {
            let s: [u8; 4] = f[l3 + 12..l3 + 16].try_into().unwrap_or_default();
            let d: [u8; 4] = f[l3 + 16..l3 + 20].try_into().unwrap_or_default();
            checksum::pseudo_ipv4(s, d, self.proto, self.l4_len as u16)
        } else {
            let s: [u8; 16] = f[l3 + 8..l3 + 24].try_into().unwrap_or_default();
            let d: [u8; 16] = f[l3 + 24..l3 + 40].try_into().unwrap_or_default();
            checksum::pseudo_ipv6(s, d, self.proto, self.l4_len as u32)
        }
    }

    /// Offset of the L4 checksum field.
    fn l4_cksum_at(&self) -> usize {
        self.l4 + if self.proto == ip_proto::UDP { 6 } else { 16 }
    }
}

/// Rx checksum status bits for the write-back: `IPCS`/`ERR_IP` when
/// `check_ip` and the frame is IPv4, `L4CS`/`ERR_L4` when `check_l4` and it
/// is TCP or UDP.
pub fn rx_checksums(f: &[u8], p: &Parsed, check_ip: bool, check_l4: bool) -> u64 {
    let mut st = 0;
    if check_ip && p.ip == 4 {
        let ihl = (f[p.l3] & 0xf) as usize * 4;
        st |= rx::IPCS;
        if checksum::checksum(&f[p.l3..p.l3 + ihl]) != 0 {
            st |= rx::ERR_IP;
        }
    }
    if check_l4 && p.has_l4() {
        st |= rx::L4CS;
        let at = p.l4_cksum_at();
        let zero_udp = p.proto == ip_proto::UDP && p.ip == 4 && be16(f, at) == 0;
        if !zero_udp
            && checksum::fold(checksum::sum(p.pseudo(f), &f[p.l4..p.l4 + p.l4_len])) != 0xffff
        {
            st |= rx::ERR_L4;
        }
    }
    st
}

/// Tx checksum offload: writes the IPv4 header checksum (`ip`) and the L4
/// checksum (`l4`, when the frame's protocol is the one asked: UDP or TCP)
/// into the frame.
pub fn tx_checksums(f: &mut [u8], ip: bool, udp: bool, tcp: bool) {
    let p = parse(f);
    if ip && p.ip == 4 {
        let ihl = (f[p.l3] & 0xf) as usize * 4;
        f[p.l3 + 10..p.l3 + 12].fill(0);
        let c = checksum::checksum(&f[p.l3..p.l3 + ihl]);
        f[p.l3 + 10..p.l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
    let want = (udp && p.proto == ip_proto::UDP) || (tcp && p.proto == ip_proto::TCP);
    if want && p.has_l4() {
        let at = p.l4_cksum_at();
        f[at..at + 2].fill(0);
        let mut c = !checksum::fold(checksum::sum(p.pseudo(f), &f[p.l4..p.l4 + p.l4_len]));
        if c == 0 && p.proto == ip_proto::UDP {
            c = 0xffff;
        }
        f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

/// Tx checksum offload at offsets the WQE gives (a tunnel's inner headers,
/// or an outer IPv4 header with `l4` 0): the IPv4 header checksum at `l3`
/// (`ip`), the UDP or TCP checksum at `l4` when the IP header there names
/// that protocol. Offsets that do not fit the frame or name no IP header
/// leave it as it is; returns whether they fit.
pub fn tx_checksums_at(f: &mut [u8], l3: usize, l4: usize, ip: bool, udp: bool, tcp: bool) -> bool {
    if l3 + 20 > f.len() {
        return false;
    }
    let (v, proto, l4_len) = match f[l3] >> 4 {
        4 => {
            let ihl = (f[l3] & 0xf) as usize * 4;
            let total = be16(f, l3 + 2) as usize;
            if ihl < 20 || l3 + total > f.len() || total < ihl {
                return false;
            }
            if ip {
                f[l3 + 10..l3 + 12].fill(0);
                let c = checksum::checksum(&f[l3..l3 + ihl]);
                f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            }
            (4, f[l3 + 9], (l3 + total).saturating_sub(l4))
        }
        6 if l3 + 40 <= f.len() => {
            let plen = be16(f, l3 + 4) as usize;
            (6, f[l3 + 6], (l3 + 40 + plen).saturating_sub(l4))
        }
        _ => return false,
    };
    let want = (udp && proto == ip_proto::UDP) || (tcp && proto == ip_proto::TCP);
    if !want || l4 == 0 {
        return true;
    }
    let at = l4 + if proto == ip_proto::UDP { 6 } else { 16 };
    if l4 <= l3 || at + 2 > f.len() || l4 + l4_len > f.len() || l4_len < at + 2 - l4 {
        return false;
    }
    let p = Parsed {
        ip: v,
        l3,
        l4,
        l4_len,
        proto,
        ..Parsed::default()
    };
    f[at..at + 2].fill(0);
    let mut c = !checksum::fold(checksum::sum(p.pseudo(f), &f[l4..l4 + l4_len]));
    if c == 0 && proto == ip_proto::UDP {
        c = 0xffff;
    }
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// Where a TSO packet's headers are: Ethernet (one optional VLAN tag),
/// IPv4 or IPv6 (no extension headers), TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsoHeaders {
    /// Offset of the IP header.
    pub l3: usize,
    /// Offset of the TCP header.
    pub l4: usize,
    /// IPv4 (else IPv6).
    pub v4: bool,
}

impl TsoHeaders {
    /// Finds the headers of `h`, which must be exactly Ethernet + IP + TCP
    /// (the inline header of a TSO WQE).
    pub fn find(h: &[u8]) -> Option<TsoHeaders> {
        if h.len() < 14 {
            return None;
        }
        let mut l3 = 14;
        let mut et = be16(h, 12);
        if et == 0x8100 && h.len() >= 18 {
            et = be16(h, 16);
            l3 = 18;
        }
        let (v4, l4) = match et {
            0x0800 if h.len() >= l3 + 20 && h[l3] >> 4 == 4 && h[l3 + 9] == ip_proto::TCP => {
                (true, l3 + (h[l3] & 0xf) as usize * 4)
            }
            0x86dd if h.len() >= l3 + 40 && h[l3] >> 4 == 6 && h[l3 + 6] == ip_proto::TCP => {
                (false, l3 + 40)
            }
            _ => return None,
        };
        if l4 <= l3 || h.len() < l4 + 20 || l4 + (h[l4 + 12] >> 4) as usize * 4 != h.len() {
            return None;
        }
        Some(TsoHeaders { l3, l4, v4 })
    }

    /// Turns `f` — the original header then `f.len() - header` payload
    /// bytes — into segment `k` of a TSO packet, its payload starting
    /// `offset` bytes into the original's: lengths, IPv4 id (+k), TCP
    /// sequence number (+offset), flags (FIN and PSH on the last segment
    /// only, CWR on the first only), then both checksums.
    pub fn fix_segment(&self, f: &mut [u8], header: usize, k: u16, offset: u32, last: bool) {
        let payload = f.len() - header;
        if self.v4 {
            let total = (header - self.l3 + payload) as u16;
            f[self.l3 + 2..self.l3 + 4].copy_from_slice(&total.to_be_bytes());
            let id = be16(f, self.l3 + 4).wrapping_add(k);
            f[self.l3 + 4..self.l3 + 6].copy_from_slice(&id.to_be_bytes());
        } else {
            let plen = (header - self.l3 - 40 + payload) as u16;
            f[self.l3 + 4..self.l3 + 6].copy_from_slice(&plen.to_be_bytes());
        }
        let t = self.l4;
        let seq = u32::from_be_bytes([f[t + 4], f[t + 5], f[t + 6], f[t + 7]]).wrapping_add(offset);
        f[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
        if !last {
            f[t + 13] &= !(0x01 | 0x08); // FIN, PSH
        }
        if k != 0 {
            f[t + 13] &= !0x80; // CWR
        }
        tx_checksums_at(f, self.l3, self.l4, self.v4, false, true);
    }
}

/// Precomputed Toeplitz tables: `tables[i][v]` is what input byte `i` with value
/// `v` contributes, so a hash is one lookup and XOR per input byte (the
/// standard software RSS technique; 36 bytes cover an IPv6 4-tuple).
pub struct RssHasher {
    tables: Box<[[u32; 256]; 36]>,
}

impl RssHasher {
    /// Tables for `key` (at least 40 bytes).
    pub fn new(key: &[u8; 40]) -> RssHasher {
        let bit = |k: usize| (key[k / 8] >> (7 - k % 8)) & 1;
        let window = |start: usize| (0..32).fold(0u32, |w, j| (w << 1) | bit(start + j) as u32);
        let mut tables = Box::new([[0u32; 256]; 36]);
        for (i, row) in tables.iter_mut().enumerate() {
            let w: [u32; 8] = std::array::from_fn(|b| window(i * 8 + b));
            for (v, cell) in row.iter_mut().enumerate() {
                *cell = (0..8)
                    .filter(|b| v & (0x80 >> b) != 0)
                    .fold(0, |h, b| h ^ w[b]);
            }
        }
        RssHasher { tables }
    }

    /// With the default (Microsoft) key.
    pub fn default_key() -> RssHasher {
        RssHasher::new(&DEFAULT_KEY)
    }

    /// The hash of `input` (up to 36 bytes).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.tables.iter())
            .fold(0, |h, (&b, row)| h ^ row[b as usize])
    }

    /// The RSS hash and type (`rx::RSS_*`, 0 when none) of a parsed frame:
    /// addresses and, for TCP/UDP, ports.
    pub fn frame(&self, f: &[u8], p: &Parsed) -> (u32, u64) {
        let mut input = [0u8; 36];
        let (n, ty) = match p.ip {
            4 => {
                input[..8].copy_from_slice(&f[p.l3 + 12..p.l3 + 20]);
                (8, rx::RSS_IPV4)
            }
            6 => {
                input[..32].copy_from_slice(&f[p.l3 + 8..p.l3 + 40]);
                (32, rx::RSS_IPV6)
            }
            _ => return (0, 0),
        };
        if p.has_l4() {
            input[n..n + 4].copy_from_slice(&f[p.l4..p.l4 + 4]);
            let ty = if p.ip == 4 {
                rx::RSS_IPV4_L4
            } else {
                rx::RSS_IPV6_L4
            };
            return (self.hash(&input[..n + 4]), ty);
        }
        (self.hash(&input[..n]), ty)
    }
}

/// The 128-entry redirection table: hash → queue.
#[derive(Debug, Clone)]
pub struct Reta([u16; 128]);

impl Reta {
    /// Spreads `queues` round-robin over the entries (as DPDK's default).
    pub fn new(queues: usize) -> Reta {
        Reta(std::array::from_fn(|i| (i % queues.max(1)) as u16))
    }

    /// The queue for `hash`.
    #[inline(always)]
    pub fn queue(&self, hash: u32) -> usize {
        self.0[(hash & 127) as usize] as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::net::rss;

    fn udp4_frame(bad_ip: bool) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[66, 9, 149, 187]);
        f[30..34].copy_from_slice(&[161, 142, 100, 80]);
        f[34..36].copy_from_slice(&2794u16.to_be_bytes());
        f[36..38].copy_from_slice(&1766u16.to_be_bytes());
        f[38..40].copy_from_slice(&26u16.to_be_bytes());
        tx_checksums(&mut f, true, true, false);
        if bad_ip {
            f[24] ^= 1;
        }
        f
    }

    #[test]
    fn table_hash_matches_the_bitwise_toeplitz_and_the_published_vector() {
        let h = RssHasher::default_key();
        let f = udp4_frame(false);
        let p = parse(&f);
        assert_eq!(p.ptype, ptype::L2_ETHER | ptype::L3_IPV4 | ptype::L4_UDP);
        let (hash, ty) = h.frame(&f, &p);
        assert_eq!(ty, rx::RSS_IPV4_L4);
        // Microsoft's verification suite: 66.9.149.187:2794 -> 161.142.100.80:1766.
        assert_eq!(hash, 0x51cc_c178);
        let want = rss::ipv4(
            &DEFAULT_KEY,
            [66, 9, 149, 187],
            [161, 142, 100, 80],
            Some((2794, 1766)),
        );
        assert_eq!(hash, want);
        let input: Vec<u8> = (0..36u8).map(|i| i.wrapping_mul(37)).collect();
        assert_eq!(h.hash(&input), rss::toeplitz(&DEFAULT_KEY, &input));
    }

    #[test]
    fn checksums_checked_on_rx_and_filled_on_tx() {
        let good = udp4_frame(false);
        let p = parse(&good);
        assert_eq!(rx_checksums(&good, &p, true, true), rx::IPCS | rx::L4CS);
        assert_eq!(rx_checksums(&good, &p, false, false), 0);
        let bad = udp4_frame(true);
        assert_eq!(
            rx_checksums(&bad, &p, true, true),
            rx::IPCS | rx::L4CS | rx::ERR_IP
        );
        let mut l4bad = good.clone();
        l4bad[50] ^= 0xff;
        assert_eq!(
            rx_checksums(&l4bad, &p, true, true),
            rx::IPCS | rx::L4CS | rx::ERR_L4
        );
        // Zeroed fields come back as they were.
        let mut z = good.clone();
        z[24..26].fill(0);
        z[40..42].fill(0);
        tx_checksums(&mut z, true, true, false);
        assert_eq!(z, good);
    }

    #[test]
    fn parser_stops_at_what_it_cannot_follow() {
        assert_eq!(parse(&[0; 10]), Parsed::default());
        let mut f = udp4_frame(false);
        f[16..18].copy_from_slice(&400u16.to_be_bytes()); // longer than the frame
        assert_eq!(parse(&f).ptype, ptype::L2_ETHER);
        let mut v = udp4_frame(false);
        v.splice(12..12, [0x81, 0x00, 0x20, 0x05]);
        let p = parse(&v);
        assert_eq!((p.vlan, p.l3, p.l4), (Some(0x2005), 18, 38));
        assert_eq!(Reta::new(4).queue(0x51cc_c178), 0x78 % 4);
    }
}
