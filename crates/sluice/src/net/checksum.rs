//! The Internet checksum (RFC 1071): the ones' complement of the ones'
//! complement sum of 16-bit big-endian words, and its incremental update
//! (RFC 1624) for a rewritten field such as a decremented TTL.
//!
//! [`sum`] accumulates 32-bit partial sums that [`fold`] reduces to 16 bits,
//! so a checksum over several pieces (a pseudo-header, a header, a payload)
//! is summed piece by piece and folded once.
//!
//! ```
//! use sluice::net::checksum;
//!
//! // An IPv4 header; its checksum field is bytes 10..12.
//! let mut hdr = [0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
//! let c = checksum::checksum(&hdr);
//! hdr[10..12].copy_from_slice(&c.to_be_bytes());
//! assert_eq!(checksum::checksum(&hdr), 0, "a correct header sums to zero");
//!
//! // TTL 64 -> 63 changes one word (TTL, protocol): update, don't re-sum.
//! let updated = checksum::update(c, 0x4011, 0x3f11);
//! hdr[8] = 63;
//! hdr[10..12].fill(0);
//! assert_eq!(updated, checksum::checksum(&hdr));
//! ```

/// Adds `data` to a running 32-bit sum of big-endian 16-bit words (an odd
/// final byte is padded with zero). Fold with [`fold`].
#[inline]
pub fn sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u16::from_be_bytes([c[0], c[1]]) as u32);
        // Fold early so a long buffer cannot overflow the accumulator.
        if acc & 0x8000_0000 != 0 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
    }
    if let [last] = chunks.remainder() {
        acc = acc.wrapping_add((*last as u32) << 8);
    }
    acc
}

/// Folds a 32-bit sum to 16 bits (end-around carry), not complemented.
#[inline]
pub fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The checksum of `data`: complement of the folded sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(0, data))
}

/// Updates a checksum for one 16-bit word changing from `old` to `new`
/// (RFC 1624, eqn. 3: `HC' = ~(~HC + ~m + m')`).
#[inline]
pub fn update(check: u16, old: u16, new: u16) -> u16 {
    let acc = (!check as u32) + (!old as u32) + new as u32;
    !fold(acc)
}

/// The IPv4 pseudo-header sum for a TCP/UDP checksum: source, destination,
/// protocol and the L4 length.
#[inline]
pub fn pseudo_ipv4(src: [u8; 4], dst: [u8; 4], protocol: u8, l4_len: u16) -> u32 {
    let mut acc = sum(0, &src);
    acc = sum(acc, &dst);
    acc + protocol as u32 + l4_len as u32
}

/// The IPv6 pseudo-header sum: source, destination, upper-layer length and
/// next header.
#[inline]
pub fn pseudo_ipv6(src: [u8; 16], dst: [u8; 16], next_header: u8, l4_len: u32) -> u32 {
    let mut acc = sum(0, &src);
    acc = sum(acc, &dst);
    acc.wrapping_add(l4_len >> 16)
        .wrapping_add(l4_len & 0xffff)
        .wrapping_add(next_header as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &data)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn ipv4_header_from_the_wire() {
        // A real IPv4 header (checksum 0xb861 at bytes 10..12).
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0, "a correct header sums to zero");
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0xb861);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(
            checksum(&[0x12, 0x34, 0x56]),
            checksum(&[0x12, 0x34, 0x56, 0x00])
        );
    }

    proptest::proptest! {
        /// An incremental update equals recomputing from scratch.
        #[test]
        fn incremental_update_matches_recompute(
            mut data in proptest::collection::vec(proptest::prelude::any::<u8>(), 2..64),
            word in 0usize..32,
            new in proptest::prelude::any::<u16>(),
        ) {
            let i = (word % (data.len() / 2)) * 2;
            let before = checksum(&data);
            let old = u16::from_be_bytes([data[i], data[i + 1]]);
            data[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let after = checksum(&data);
            let upd = update(before, old, new);
            // 0x0000 and 0xffff are the same value in ones' complement.
            proptest::prop_assert!(upd == after || (upd ^ after) == 0xffff, "{upd:#x} vs {after:#x}");
        }
    }
}
