//! The Toeplitz hash used for receive-side scaling (RSS).
//!
//! For every set bit of the input, taken from the most significant bit of
//! the first byte, the hash XORs in the 32 key bits that start at that bit
//! position; the key slides one bit per input bit. NICs hash the IPv4/IPv6
//! source and destination addresses, then (for TCP/UDP) the source and
//! destination ports, all in network byte order, and use the low bits of the
//! hash to pick a queue through an indirection table.
//!
//! ```
//! use sluice::net::rss;
//!
//! // The verification example of Microsoft's RSS specification.
//! let (src, dst) = ([66, 9, 149, 187], [161, 142, 100, 80]);
//! assert_eq!(rss::ipv4(&rss::DEFAULT_KEY, src, dst, None), 0x323e_8fc2);
//! assert_eq!(rss::ipv4(&rss::DEFAULT_KEY, src, dst, Some((2794, 1766))), 0x51cc_c178);
//! ```

/// The 40-byte key that Microsoft's RSS specification uses as its example,
/// the default of many drivers (and DPDK's `rss_intel_key`).
pub const DEFAULT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The Toeplitz hash of `input` with `key`. The key must be at least 4 bytes
/// longer than the input (40 bytes covers an IPv6 4-tuple, 36 bytes); input
/// bits past what the key covers are ignored.
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    if key.len() < 4 {
        return 0;
    }
    let mut hash = 0u32;
    // The 32-bit window of the key at the current bit; the next key bits are
    // shifted in from `key[i + 4]` as the input advances.
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (i, &byte) in input.iter().enumerate() {
        let next = match key.get(i + 4) {
            Some(&k) => k,
            None if i + 4 == key.len() => 0,
            None => break,
        };
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | ((next >> (7 - bit)) & 1) as u32;
        }
    }
    hash
}

/// The RSS hash of an IPv4 flow: addresses, then the ports when given.
pub fn ipv4(key: &[u8], src: [u8; 4], dst: [u8; 4], ports: Option<(u16, u16)>) -> u32 {
    let mut input = [0u8; 12];
    input[..4].copy_from_slice(&src);
    input[4..8].copy_from_slice(&dst);
    let n = match ports {
        Some((sp, dp)) => {
            input[8..10].copy_from_slice(&sp.to_be_bytes());
            input[10..12].copy_from_slice(&dp.to_be_bytes());
            12
        }
        None => 8,
    };
    toeplitz(key, &input[..n])
}

/// The RSS hash of an IPv6 flow: addresses, then the ports when given.
pub fn ipv6(key: &[u8], src: [u8; 16], dst: [u8; 16], ports: Option<(u16, u16)>) -> u32 {
    let mut input = [0u8; 36];
    input[..16].copy_from_slice(&src);
    input[16..32].copy_from_slice(&dst);
    let n = match ports {
        Some((sp, dp)) => {
            input[32..34].copy_from_slice(&sp.to_be_bytes());
            input[34..36].copy_from_slice(&dp.to_be_bytes());
            36
        }
        None => 32,
    };
    toeplitz(key, &input[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One verification case: destination, destination port, source, source
    /// port, hash of the addresses, hash with the TCP ports.
    type Case<A> = (A, u16, A, u16, u32, u32);

    /// Microsoft's RSS verification suite, IPv4.
    const IPV4: [Case<[u8; 4]>; 5] = [
        (
            [161, 142, 100, 80],
            1766,
            [66, 9, 149, 187],
            2794,
            0x323e_8fc2,
            0x51cc_c178,
        ),
        (
            [65, 69, 140, 83],
            4739,
            [199, 92, 111, 2],
            14230,
            0xd718_262a,
            0xc626_b0ea,
        ),
        (
            [12, 22, 207, 184],
            38024,
            [24, 19, 198, 95],
            12898,
            0xd2d0_a5de,
            0x5c2b_394a,
        ),
        (
            [209, 142, 163, 6],
            2217,
            [38, 27, 205, 30],
            48228,
            0x8298_9176,
            0xafc7_327f,
        ),
        (
            [202, 188, 127, 2],
            1303,
            [153, 39, 163, 191],
            44251,
            0x5d18_09c5,
            0x10e8_28a2,
        ),
    ];

    #[test]
    fn matches_the_published_ipv4_vectors() {
        for (dst, dport, src, sport, addr_hash, tcp_hash) in IPV4 {
            assert_eq!(
                ipv4(&DEFAULT_KEY, src, dst, None),
                addr_hash,
                "{src:?} -> {dst:?}"
            );
            assert_eq!(
                ipv4(&DEFAULT_KEY, src, dst, Some((sport, dport))),
                tcp_hash,
                "{src:?}:{sport} -> {dst:?}:{dport}"
            );
        }
    }

    /// The suite's IPv6 cases, as above.
    const IPV6: [Case<&str>; 3] = [
        (
            "3ffe:2501:200:3::1",
            1766,
            "3ffe:2501:200:1fff::7",
            2794,
            0x2cc1_8cd5,
            0x4020_7d3d,
        ),
        (
            "ff02::1",
            4739,
            "3ffe:501:8::260:97ff:fe40:efab",
            14230,
            0x0f0c_461c,
            0xdde5_1bbf,
        ),
        (
            "fe80::200:f8ff:fe21:67cf",
            38024,
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            0x4b61_e985,
            0x02d1_feef,
        ),
    ];

    #[test]
    fn matches_the_published_ipv6_vectors() {
        for (dst, dport, src, sport, addr_hash, tcp_hash) in IPV6 {
            let d = dst.parse::<std::net::Ipv6Addr>().unwrap().octets();
            let s = src.parse::<std::net::Ipv6Addr>().unwrap().octets();
            assert_eq!(ipv6(&DEFAULT_KEY, s, d, None), addr_hash, "{src} -> {dst}");
            assert_eq!(
                ipv6(&DEFAULT_KEY, s, d, Some((sport, dport))),
                tcp_hash,
                "{src} -> {dst}"
            );
        }
    }

    #[test]
    fn short_keys_and_long_inputs_do_not_panic() {
        assert_eq!(toeplitz(&[1, 2, 3], &[0xff]), 0);
        let _ = toeplitz(&DEFAULT_KEY, &[0xff; 100]);
        // Input bit b XORs in key bits b..b+31. Input 0x80 (bit 0): the first
        // window, 0x80000000 for the key 80 00 00 00 01.
        assert_eq!(toeplitz(&[0x80, 0, 0, 0, 1], &[0x80]), 0x8000_0000);
        // Input 0x01 (bit 7): key bits 7..38 of 00 00 00 01 ff, which are 24
        // zeros, the one at bit 31, then seven ones: 0x000000ff.
        assert_eq!(toeplitz(&[0, 0, 0, 1, 0xff], &[0x01]), 0x0000_00ff);
    }
}
