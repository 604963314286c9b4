//! One packet through the router: header checks, the lookup, the TTL or
//! hop-limit decrement with the IPv4 checksum update, the MAC rewrite.
//!
//! A packet is forwarded only if its headers are sane (RFC 1812 §5.2.2 for
//! IPv4: version 4, IHL ≥ 5, the total length covers the header and fits
//! the frame, the header checksum verifies — or the Rx offload already said
//! good; for IPv6: version 6 and the payload length fits), its TTL / hop
//! limit is above 1, and a route or flow names an existing port. Anything
//! else is a counted drop with its reason (a frame shorter than an Ethernet
//! header is a runt); nothing here panics on any input (a property test
//! feeds random bytes).

use sluice::mbuf::Mbuf;
use sluice::mbuf::layout::ol;
use sluice::net::MacAddr;
use sluice::net::em::{Flow4, Flow6};

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// No route (or flow) for its destination, or one to a port that does
    /// not exist.
    NoRoute,
    /// TTL or hop limit 0 or 1.
    TtlExpired,
    /// Not IPv4/IPv6, truncated, or header fields inconsistent.
    BadHeader,
    /// IPv4 header checksum wrong.
    BadChecksum,
    /// The buffer is shared (a clone is held elsewhere), so it cannot be
    /// rewritten.
    Unwritable,
    /// Shorter than an Ethernet header (a runt: ports drop these at Rx,
    /// unless one lets it through).
    Runt,
}

/// Set in a route entry ([`Router::v4_entry`]) that names a next hop.
pub const ENTRY_FOUND: u32 = 1 << 31;
/// The next hop's bits in a route entry that has [`ENTRY_FOUND`].
pub const ENTRY_HOP: u32 = (1 << 24) - 1;

/// How a packet's output port is found, for IPv4 and IPv6. The lcore loop
/// is generic over it, so the lookup is inlined.
pub trait Router: Sync {
    /// The next hop of an IPv4 packet; `ip` is its header and payload,
    /// checked to hold `ihl` header bytes.
    fn v4(&self, ip: &[u8], ihl: usize) -> Option<u32>;

    /// [`v4`](Self::v4)'s answer as an entry: [`ENTRY_FOUND`] set when
    /// there is a next hop, which is then in [`ENTRY_HOP`]; the other bits
    /// are the router's own, but equal entries always mean the same next
    /// hop, so [`route_fast`] derives the port and its MACs once per run of
    /// equal entries. The default packs `v4`'s answer; a hop too large for
    /// the field reads as none here (the fast path then leaves the packet
    /// to [`route`], which asks `v4`).
    #[inline(always)]
    fn v4_entry(&self, ip: &[u8], ihl: usize) -> u32 {
        match self.v4(ip, ihl) {
            Some(h) if h <= ENTRY_HOP => ENTRY_FOUND | h,
            _ => 0,
        }
    }
    /// The next hop of an IPv6 packet; `ip` is checked to hold the 40-byte
    /// header.
    fn v6(&self, ip: &[u8]) -> Option<u32>;
}

/// The MACs written on frames leaving one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortMacs {
    /// Destination (the next hop's MAC) then source (the port's own), as
    /// the first 12 bytes of a frame: one copy writes both.
    head: [u8; 12],
}

impl PortMacs {
    /// Frames leaving the port go to `dst` from `src`.
    pub fn new(dst: MacAddr, src: MacAddr) -> PortMacs {
        let mut head = [0; 12];
        head[..6].copy_from_slice(&dst.0);
        head[6..].copy_from_slice(&src.0);
        PortMacs { head }
    }

    /// Writes both into a frame's first 12 bytes.
    #[inline(always)]
    pub(crate) fn write(&self, eth: &mut [u8; 12]) {
        *eth = self.head;
    }
}

/// The IPv4 5-tuple of `ip` (header of `ihl` bytes): ports for TCP and UDP
/// when the payload holds them, else 0.
#[inline(always)]
pub fn flow4(ip: &[u8], ihl: usize) -> Flow4 {
    let proto = ip[9];
    let (sport, dport) = ports(ip, ihl, proto);
    Flow4 {
        src: u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]),
        dst: u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]),
        sport,
        dport,
        proto,
    }
}

/// The IPv6 5-tuple of `ip` (no extension headers followed).
#[inline(always)]
pub fn flow6(ip: &[u8]) -> Flow6 {
    let proto = ip[6];
    let (sport, dport) = ports(ip, 40, proto);
    let mut f = Flow6 {
        sport,
        dport,
        proto,
        ..Flow6::default()
    };
    f.src.copy_from_slice(&ip[8..24]);
    f.dst.copy_from_slice(&ip[24..40]);
    f
}

#[inline(always)]
fn ports(ip: &[u8], l4: usize, proto: u8) -> (u16, u16) {
    match (proto, ip.get(l4..l4 + 4)) {
        (6 | 17, Some(p)) => (
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ),
        _ => (0, 0),
    }
}

/// Whether an IPv4 header's checksum verifies: its 16-bit words sum to
/// 0xffff in ones' complement. Summed as 32-bit words into 64 bits, then
/// folded (the same sum: ones' complement addition is associative); the
/// usual 20-byte header without options is five loads, unrolled.
#[inline(always)]
fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let w = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as u64;
    let mut acc: u64 = if h.len() == 20 {
        w(0) + w(4) + w(8) + w(12) + w(16)
    } else {
        // IHL counts 32-bit words: there is no remainder.
        h.chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as u64)
            .sum()
    };
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    let mut a = (acc & 0xffff) + (acc >> 16);
    a = (a & 0xffff) + (a >> 16);
    a == 0xffff
}

/// An IPv4 header checksum `c` after one of the header's 16-bit words
/// drops by `d` (without borrow): RFC 1624 eqn. 3, `~(~c + ~m + m')`, where
/// `~m + m'` is `~d`. One fold is enough: the sum is at most 0xffff +
/// 0xffff = 0x1fffe, which folds to 0xffff. Ones' complement sums do not
/// depend on byte order, so `c` and `d` may both be byte-swapped (read
/// little-endian) and the result is then swapped too.
#[inline(always)]
fn checksum_after_decrement(c: u16, d: u16) -> u16 {
    let sum = u32::from(!c) + u32::from(!d);
    !(((sum & 0xffff) + (sum >> 16)) as u16)
}

/// The TTL's place in the big-endian word holding TTL and protocol: a
/// decrement takes this off it.
const TTL_ONE: u16 = 0x0100;

/// Bytes 22..25 of an IPv4 frame read little-endian (TTL, protocol, the
/// checksum byte-swapped in the high half) after the TTL, at least 1, drops
/// by one. [`checksum_after_decrement`] of a swapped checksum `s` is
/// `~(~s + 0xfffe)`: the sum carries round, making it `s + 1`, unless `~s`
/// is 0 or 1, i.e. `s` is 0xffff or 0xfffe, which become 0x0001 and 0x0000:
/// `s + 2`. So the word gains 0xffff (the TTL's decrement cannot borrow from
/// the protocol), or 0x1ffff when its high half is 0xfffe or 0xffff, the
/// high half wrapping.
#[inline(always)]
fn ttl_decremented(w: u32) -> u32 {
    // The wrap's 0x10000 is bit 32 of `w + 0x20000`, moved down.
    let w = u64::from(w);
    (w + 0xffff + ((w + 0x2_0000) >> 32 << 16)) as u32
}

/// Checks an IPv4 packet, looks it up and decrements its TTL; the output
/// port.
#[inline(always)]
fn ipv4<R: Router>(r: &R, ip: &mut [u8], ol_flags: u64) -> Result<u32, DropReason> {
    if ip.len() < 20 || ip[0] >> 4 != 4 {
        return Err(DropReason::BadHeader);
    }
    let ihl = (ip[0] & 0xf) as usize * 4;
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    if ihl < 20 || total < ihl || total > ip.len() {
        return Err(DropReason::BadHeader);
    }
    if ol_flags & ol::RX_IP_CKSUM_BAD != 0
        || (ol_flags & ol::RX_IP_CKSUM_GOOD == 0 && !ipv4_checksum_ok(&ip[..ihl]))
    {
        return Err(DropReason::BadChecksum);
    }
    let ttl = ip[8];
    if ttl <= 1 {
        return Err(DropReason::TtlExpired);
    }
    let hop = r.v4(ip, ihl).ok_or(DropReason::NoRoute)?;
    ip[8] = ttl - 1;
    let c = u16::from_be_bytes([ip[10], ip[11]]);
    ip[10..12].copy_from_slice(&checksum_after_decrement(c, TTL_ONE).to_be_bytes());
    Ok(hop)
}

/// Checks an IPv6 packet, looks it up and decrements its hop limit; the
/// output port.
#[inline(always)]
fn ipv6<R: Router>(r: &R, ip: &mut [u8]) -> Result<u32, DropReason> {
    if ip.len() < 40 || ip[0] >> 4 != 6 {
        return Err(DropReason::BadHeader);
    }
    let payload = u16::from_be_bytes([ip[4], ip[5]]) as usize;
    if 40 + payload > ip.len() {
        return Err(DropReason::BadHeader);
    }
    let hops = ip[7];
    if hops <= 1 {
        return Err(DropReason::TtlExpired);
    }
    let hop = r.v6(ip).ok_or(DropReason::NoRoute)?;
    ip[7] = hops - 1;
    Ok(hop)
}

/// The common case of [`route`] in one pass over fixed offsets: an
/// unshared IPv4 frame without options in the mbuf's own buffer (not an
/// attached external one, which `route` takes), whose header checksum the
/// device verified (the Rx offload), TTL above 1, a total length that fits
/// the frame, and a route to an existing port. Rewrites it (TTL, checksum,
/// MACs) and returns the port and whether the route differs from the last
/// packet's. Anything else returns `None` with the frame untouched, for
/// [`route`] to check in full and count.
///
/// The header words are read little-endian, as the CPU loads them, so no
/// bytes are swapped but the total length's (for its range compare) and
/// the destination address's (for the lookup): a field test is a mask and
/// a compare, and the checksum is updated in its swapped form.
///
/// `last` carries the previous packet's route entry, port and MACs across
/// a burst: a burst mostly takes one route, so a packet whose entry equals
/// the last one's skips the found test, the port's extraction and bounds
/// check and the MAC table read. Start each burst with [`LastPort::new`].
#[inline(always)]
pub fn route_fast<R: Router>(
    r: &R,
    m: &mut Mbuf,
    macs: &[PortMacs],
    last: &mut LastPort,
) -> Option<Taken> {
    // One test of the flags word: the device verified the checksum, and the
    // buffer is the mbuf's own (so `direct_data_mut` only checks the count).
    let flags = ol::RX_IP_CKSUM_GOOD | ol::RX_IP_CKSUM_BAD | ol::EXTERNAL;
    if m.ol_flags() & flags != ol::RX_IP_CKSUM_GOOD {
        return None;
    }
    let d = m.direct_data_mut()?;
    // What the frame holds past the 34 bytes read here.
    let room = d.len().checked_sub(34)?;
    let h = d.first_chunk_mut::<34>()?;
    // Bytes 12..14: ethertype 0x0800, then version 4 with IHL 5.
    let ethertype = u16::from_le_bytes([h[12], h[13]]);
    let total = u16::from_be_bytes([h[16], h[17]]);
    // Bytes 22..25: TTL (the low byte), protocol, then the checksum, its
    // bytes swapped (the high half).
    let mut b = [0; 4];
    b.copy_from_slice(&h[22..26]);
    let word = u32::from_le_bytes(b);
    // `total` in 20..=len - 14 (`room + 20`) in one 16-bit compare: below
    // 20 it wraps. `room` fits 16 bits, the data length being a `u16`; were
    // it cut, it would only shrink and decline a frame, never take one.
    if ethertype != 0x00_08
        || h[14] != 0x45
        || total.wrapping_sub(20) > room as u16
        || word as u8 & 0xfe == 0
    {
        return None;
    }
    let e = r.v4_entry(&h[14..], 20);
    if u64::from(e) == last.entry {
        // The last packet's route (the common case within a burst).
        rewrite(h, word, &last.macs);
        return Some(Taken {
            port: last.port,
            new_route: false,
        });
    }
    if e & ENTRY_FOUND == 0 {
        return None;
    }
    let port = (e & ENTRY_HOP) as usize;
    *last = LastPort {
        entry: u64::from(e),
        port,
        macs: *macs.get(port)?,
    };
    rewrite(h, word, &last.macs);
    Some(Taken {
        port,
        new_route: true,
    })
}

/// The writes of [`route_fast`]: TTL and checksum (`word`, bytes 22..26 as
/// read) and the MACs.
#[inline(always)]
fn rewrite(h: &mut [u8; 34], word: u32, macs: &PortMacs) {
    h[22..26].copy_from_slice(&ttl_decremented(word).to_le_bytes());
    if let Some((eth, _)) = h.split_first_chunk_mut::<12>() {
        macs.write(eth);
    }
}

/// A packet [`route_fast`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// Its output port.
    pub port: usize,
    /// Its route differs from the previous packet's (or it is the burst's
    /// first): the port may have changed.
    pub new_route: bool,
}

/// The route entry [`route_fast`] took last, its port and the port's MACs.
#[derive(Debug, Clone, Copy)]
pub struct LastPort {
    /// The entry, widened: `u64::MAX`, which no entry equals, until a
    /// packet is routed; after that always one with [`ENTRY_FOUND`].
    entry: u64,
    /// The entry's next hop, an existing port (below `macs.len()`).
    port: usize,
    /// `macs[port]`.
    macs: PortMacs,
}

impl LastPort {
    /// No route yet: the first packet routed reads the table.
    pub fn new() -> LastPort {
        LastPort {
            entry: u64::MAX,
            port: 0,
            macs: PortMacs { head: [0; 12] },
        }
    }
}

impl Default for LastPort {
    fn default() -> LastPort {
        LastPort::new()
    }
}

/// Routes one packet: checks, looks up, rewrites (TTL/hop limit, IPv4
/// checksum, MACs from `macs[port]`); the output port, or why it must be
/// dropped (then the frame may be partly rewritten — it is freed anyway).
#[inline(always)]
pub fn route<R: Router>(r: &R, m: &mut Mbuf, macs: &[PortMacs]) -> Result<usize, DropReason> {
    let ol_flags = m.ol_flags();
    let d = m.data_mut().map_err(|_| DropReason::Unwritable)?;
    if d.len() < 14 {
        return Err(DropReason::Runt);
    }
    let (eth, ip) = d.split_at_mut(14);
    let port = match u16::from_be_bytes([eth[12], eth[13]]) {
        0x0800 => ipv4(r, ip, ol_flags)?,
        0x86dd => ipv6(r, ip)?,
        _ => return Err(DropReason::BadHeader),
    } as usize;
    let mac = macs.get(port).ok_or(DropReason::NoRoute)?;
    if let Some(head) = eth.first_chunk_mut::<12>() {
        mac.write(head);
    }
    Ok(port)
}

/// Test fixtures shared with the lcore loop's tests: a fixed router, two
/// ports' MACs, frames, a small pool.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use etherparse::PacketBuilder;
    use sluice::mbuf::{MbufPool, MbufPoolConfig};

    /// Routes 198.18.0.0/16 and 2001:2::/32 to port 1, 198.19.0.0/16 to
    /// port 0, 10/8 to port 7 (which does not exist), everything else
    /// nowhere.
    pub(crate) struct Fixed;
    impl Router for Fixed {
        fn v4(&self, ip: &[u8], _ihl: usize) -> Option<u32> {
            match (ip[16], ip[17]) {
                (198, 18) => Some(1),
                (198, 19) => Some(0),
                (10, _) => Some(7),
                _ => None,
            }
        }
        fn v6(&self, ip: &[u8]) -> Option<u32> {
            (ip[24..28] == [0x20, 0x01, 0, 2]).then_some(1)
        }
    }

    pub(crate) fn macs() -> [PortMacs; 2] {
        [
            PortMacs::new(
                MacAddr([2, 0, 0, 0, 0, 0xa0]),
                MacAddr([2, 0, 0, 0, 0, 0xb0]),
            ),
            PortMacs::new(
                MacAddr([2, 0, 0, 0, 0, 0xa1]),
                MacAddr([2, 0, 0, 0, 0, 0xb1]),
            ),
        ]
    }

    pub(crate) fn v4_frame(dst: [u8; 4], ttl: u8) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([9; 6], [8; 6])
            .ipv4([10, 1, 2, 3], dst, ttl)
            .udp(1234, 9);
        let mut v = Vec::new();
        b.write(&mut v, &[0x55; 18]).unwrap();
        v
    }

    pub(crate) fn v6_frame(dst: [u8; 16], hops: u8) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([9; 6], [8; 6])
            .ipv6([0xfe; 16], dst, hops)
            .udp(1234, 9);
        let mut v = Vec::new();
        b.write(&mut v, &[0x55; 18]).unwrap();
        v
    }

    pub(crate) fn pool() -> MbufPool {
        MbufPool::new(MbufPoolConfig {
            size: 63,
            cache_size: 0,
            ..Default::default()
        })
        .unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use proptest::prelude::*;
    use sluice::mbuf::MbufPool;

    fn run(pool: &MbufPool, frame: &[u8]) -> (Result<usize, DropReason>, Vec<u8>) {
        let mut m = pool.alloc().unwrap();
        m.append(frame.len()).unwrap().copy_from_slice(frame);
        let r = route(&Fixed, &mut m, &macs());
        (r, m.data().to_vec())
    }

    #[test]
    fn ipv4_is_routed_with_ttl_checksum_and_macs_rewritten() {
        let p = pool();
        let f = v4_frame([198, 18, 0, 1], 64);
        let (r, out) = run(&p, &f);
        assert_eq!(r, Ok(1));
        assert_eq!(out[..6], [2, 0, 0, 0, 0, 0xa1]);
        assert_eq!(out[6..12], [2, 0, 0, 0, 0, 0xb1]);
        assert_eq!(out[14 + 8], 63, "TTL");
        // The result is what a fresh build with TTL 63 gives, checksum
        // included, and only those bytes changed.
        let want = v4_frame([198, 18, 0, 1], 63);
        assert_eq!(out[12..], want[12..]);
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&out[14..]).unwrap();
        assert_eq!(ip.to_header().calc_header_checksum(), ip.header_checksum());
        assert!(p.is_full());
    }

    #[test]
    fn ipv4_checksum_update_is_right_for_every_ttl() {
        let p = pool();
        for ttl in 2..=255u8 {
            let (r, out) = run(&p, &v4_frame([198, 18, 7, 9], ttl));
            assert_eq!(r, Ok(1));
            let want = v4_frame([198, 18, 7, 9], ttl - 1);
            assert_eq!(out[14..34], want[14..34], "ttl {ttl}");
        }
    }

    /// Ones' complement sum of two 16-bit words, folded.
    fn add1c(a: u32, b: u32) -> u32 {
        let s = a + b;
        (s & 0xffff) + (s >> 16)
    }

    #[test]
    fn checksum_update_equals_a_full_recomputation_in_either_byte_order() {
        // A header of two words, `a` and the TTL/protocol word `m`, whose
        // checksum is `c`: a = ~c - m in ones' complement. After the TTL
        // drops, the recomputed checksum is ~(a + m - 0x100).
        for c in 0..=0xffffu32 {
            for m in [0x0111u32, 0x0206, 0x4006, 0xff11, 0x0100] {
                let a = add1c(!c & 0xffff, !m & 0xffff);
                let full = !add1c(a, m - 0x100) as u16;
                let c = c as u16;
                assert_eq!(
                    checksum_after_decrement(c, TTL_ONE),
                    full,
                    "c {c:#x} m {m:#x}"
                );
                assert_eq!(
                    checksum_after_decrement(c.swap_bytes(), TTL_ONE.swap_bytes()),
                    full.swap_bytes(),
                    "swapped: c {c:#x} m {m:#x}"
                );
            }
        }
    }

    #[test]
    fn the_word_update_is_the_checksum_update_and_a_ttl_decrement() {
        for c in 0..=0xffffu16 {
            for (ttl, proto) in [(1u8, 17u8), (2, 6), (64, 17), (255, 255), (128, 0)] {
                let w = u32::from_le_bytes([ttl, proto, 0, 0]) | u32::from(c.swap_bytes()) << 16;
                let want = checksum_after_decrement(c, TTL_ONE).to_be_bytes();
                let [t, p, c0, c1] = ttl_decremented(w).to_le_bytes();
                assert_eq!(
                    (t, p, [c0, c1]),
                    (ttl - 1, proto, want),
                    "c {c:#x} ttl {ttl}"
                );
            }
        }
    }

    #[test]
    fn ipv6_is_routed_with_the_hop_limit_decremented() {
        let p = pool();
        let mut dst = [0u8; 16];
        dst[..4].copy_from_slice(&[0x20, 0x01, 0, 2]);
        dst[15] = 1;
        let (r, out) = run(&p, &v6_frame(dst, 64));
        assert_eq!(r, Ok(1));
        assert_eq!(out[..6], [2, 0, 0, 0, 0, 0xa1]);
        assert_eq!(out[12..], v6_frame(dst, 63)[12..]);
        dst[3] = 3;
        assert_eq!(run(&p, &v6_frame(dst, 64)).0, Err(DropReason::NoRoute));
        dst[3] = 2;
        assert_eq!(run(&p, &v6_frame(dst, 1)).0, Err(DropReason::TtlExpired));
        assert!(p.is_full());
    }

    #[test]
    fn each_drop_has_its_reason() {
        let p = pool();
        let good = v4_frame([198, 18, 0, 1], 64);
        assert_eq!(
            run(&p, &v4_frame([192, 0, 2, 1], 64)).0,
            Err(DropReason::NoRoute)
        );
        assert_eq!(
            run(&p, &v4_frame([10, 0, 0, 1], 64)).0,
            Err(DropReason::NoRoute)
        );
        assert_eq!(
            run(&p, &v4_frame([198, 18, 0, 1], 1)).0,
            Err(DropReason::TtlExpired)
        );
        assert_eq!(
            run(&p, &v4_frame([198, 18, 0, 1], 0)).0,
            Err(DropReason::TtlExpired)
        );
        let mut bad = good.clone();
        bad[14 + 11] ^= 1; // checksum
        assert_eq!(run(&p, &bad).0, Err(DropReason::BadChecksum));
        let mut bad = good.clone();
        bad[14] = 0x44; // IHL 4
        assert_eq!(run(&p, &bad).0, Err(DropReason::BadHeader));
        let mut bad = good.clone();
        bad[14] = 0x55; // version 5
        assert_eq!(run(&p, &bad).0, Err(DropReason::BadHeader));
        let mut bad = good.clone();
        bad[14 + 3] = 200; // total length beyond the frame
        assert_eq!(run(&p, &bad).0, Err(DropReason::BadHeader));
        let mut bad = good.clone();
        bad[12..14].copy_from_slice(&[0x08, 0x06]); // ARP
        assert_eq!(run(&p, &bad).0, Err(DropReason::BadHeader));
        assert_eq!(run(&p, &good[..30]).0, Err(DropReason::BadHeader));
        assert_eq!(run(&p, &good[..10]).0, Err(DropReason::Runt));
        assert_eq!(run(&p, &good[..13]).0, Err(DropReason::Runt));
        assert_eq!(run(&p, &good[..14]).0, Err(DropReason::BadHeader));
        // A shared buffer cannot be rewritten.
        let mut m = p.alloc().unwrap();
        m.append(good.len()).unwrap().copy_from_slice(&good);
        let clone = m.try_clone().unwrap();
        assert_eq!(route(&Fixed, &mut m, &macs()), Err(DropReason::Unwritable));
        drop((m, clone));
        assert!(p.is_full());
    }

    #[test]
    fn rx_checksum_flags_are_trusted() {
        let p = pool();
        let mut bad = v4_frame([198, 18, 0, 1], 64);
        bad[14 + 10] ^= 0xff;
        for (flags, want) in [
            (ol::RX_IP_CKSUM_GOOD, Ok(1)),
            (ol::RX_IP_CKSUM_BAD, Err(DropReason::BadChecksum)),
            (0, Err(DropReason::BadChecksum)),
        ] {
            let mut m = p.alloc().unwrap();
            m.append(bad.len()).unwrap().copy_from_slice(&bad);
            m.set_ol_flags(flags).unwrap();
            assert_eq!(route(&Fixed, &mut m, &macs()), want, "{flags:#x}");
        }
        assert!(p.is_full());
    }

    #[test]
    fn tuples_carry_ports_for_tcp_and_udp_only() {
        let f = v4_frame([198, 18, 0, 1], 64);
        let t = flow4(&f[14..], 20);
        assert_eq!(
            (t.src, t.dst, t.sport, t.dport, t.proto),
            (0x0a01_0203, 0xc612_0001, 1234, 9, 17)
        );
        let mut icmp = f.clone();
        icmp[14 + 9] = 1;
        assert_eq!(
            (flow4(&icmp[14..], 20).sport, flow4(&icmp[14..], 20).dport),
            (0, 0)
        );
        let g = v6_frame([7; 16], 64);
        let t = flow6(&g[14..]);
        assert_eq!(
            (t.src, t.dst, t.sport, t.dport, t.proto),
            ([0xfe; 16], [7; 16], 1234, 9, 17)
        );
    }

    /// `frame` through [`route_fast`] and, on a copy, [`route`], with Rx
    /// flags `flags`: the fast path either agrees with the full one (same
    /// port, same bytes) or declines and leaves the frame untouched.
    /// Whether it took the packet.
    fn fast_agrees(p: &MbufPool, frame: &[u8], flags: u64) -> Result<bool, String> {
        let load = || {
            let mut m = p.alloc().unwrap();
            m.append(frame.len()).unwrap().copy_from_slice(frame);
            m.set_ol_flags(flags).unwrap();
            m
        };
        let (mut fast, mut full) = (load(), load());
        let took = route_fast(&Fixed, &mut fast, &macs(), &mut LastPort::new()).map(|t| t.port);
        let want = route(&Fixed, &mut full, &macs());
        match took {
            Some(port) if want == Ok(port) && fast.data() == full.data() => Ok(true),
            None if fast.data() == frame => Ok(false),
            other => Err(format!("fast {other:?}, full {want:?}")),
        }
    }

    #[test]
    fn the_fast_path_takes_the_common_case_and_agrees_with_the_full_one() {
        let p = pool();
        let good = ol::RX_IP_CKSUM_GOOD;
        for ttl in 0..=255u8 {
            let f = v4_frame([198, 18, 7, 9], ttl);
            assert_eq!(fast_agrees(&p, &f, good), Ok(ttl > 1), "ttl {ttl}");
        }
        // Checksums of every value, trusted as the device said.
        let mut f = v4_frame([198, 18, 0, 1], 64);
        for c in 0..=u16::MAX {
            f[24..26].copy_from_slice(&c.to_be_bytes());
            assert_eq!(fast_agrees(&p, &f, good), Ok(true), "checksum {c:#x}");
        }
        // Declined: left to the full path, which checks and counts.
        let f = v4_frame([198, 18, 0, 1], 64);
        let mut declined = vec![
            v4_frame([192, 0, 2, 1], 64), // no route
            v4_frame([10, 0, 0, 1], 64),  // a port that does not exist
            v6_frame([7; 16], 64),
            f[..33].to_vec(),
            f[..10].to_vec(),
        ];
        for (at, byte) in [
            (14, 0x46),
            (14, 0x55),
            (12, 0x86),
            (13, 0x06),
            (16, 1),
            (17, 19),
        ] {
            let mut g = f.clone();
            g[at] = byte;
            declined.push(g);
        }
        for (i, g) in declined.iter().enumerate() {
            assert_eq!(fast_agrees(&p, g, good), Ok(false), "frame {i}");
        }
        // Only with the device's word that the checksum is good.
        for flags in [0, ol::RX_IP_CKSUM_BAD, good | ol::RX_IP_CKSUM_BAD] {
            assert_eq!(fast_agrees(&p, &f, flags), Ok(false), "{flags:#x}");
        }
        // A shared buffer is declined too.
        let mut m = p.alloc().unwrap();
        m.append(f.len()).unwrap().copy_from_slice(&f);
        m.set_ol_flags(good).unwrap();
        let clone = m.try_clone().unwrap();
        assert_eq!(
            route_fast(&Fixed, &mut m, &macs(), &mut LastPort::new()),
            None
        );
        assert_eq!(clone.data(), &f[..]);
        drop((m, clone));
        assert!(p.is_full());
    }

    proptest! {
        /// Any bytes, the device's checksum verdict either way: the fast
        /// path agrees with the full one or declines untouched.
        #[test]
        fn the_fast_path_never_disagrees(mut bytes in proptest::collection::vec(any::<u8>(), 0..80), verified in any::<bool>()) {
            if bytes.len() >= 15 {
                bytes[12..15].copy_from_slice(&[0x08, 0x00, 0x45]);
            }
            let p = pool();
            let flags = if verified { ol::RX_IP_CKSUM_GOOD } else { 0 };
            prop_assert_eq!(fast_agrees(&p, &bytes, flags).map(|_| ()), Ok(()));
            prop_assert!(p.is_full());
        }

        /// Any bytes: routed or dropped, never a panic, buffer returned.
        #[test]
        fn random_frames_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..120), v6 in any::<bool>()) {
            if bytes.len() >= 15 {
                bytes[12..14].copy_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
                bytes[14] = if v6 { 0x60 | (bytes[14] & 0xf) } else { 0x40 | (bytes[14] & 0xf) };
            }
            let p = pool();
            let _ = run(&p, &bytes);
            prop_assert!(p.is_full());
        }
    }
}
