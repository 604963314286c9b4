//! The soft device's frame parser over arbitrary frames: header parsing, Rx
//! checksum checks, Tx checksum filling (at parsed offsets and at the offsets
//! a WQE gives, which are bytes times two), the RSS hash and the TSO header
//! search and per-segment fix-up (and the RSS hash against `net::rss`). The first two bytes pick the flags and
//! offsets; the rest is the frame.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::driver::soft::frame::{
    Reta, RssHasher, TsoHeaders, parse, rx_checksums, tx_checksums, tx_checksums_at,
};
use sluice::net::rss;
use std::sync::OnceLock;

static HASHER: OnceLock<RssHasher> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let [flags, off, frame @ ..] = data else {
        return;
    };
    let (flags, off) = (*flags, *off);
    let bit = |i: u8| flags & (1 << i) != 0;

    let p = parse(frame);
    assert!(p.l3 <= frame.len() && p.l4 <= frame.len());
    if p.l4 != 0 {
        assert!(p.l4 + p.l4_len <= frame.len());
    }
    let _ = rx_checksums(frame, &p, bit(0), bit(1));
    let (hash, _) = HASHER.get_or_init(RssHasher::default_key).frame(frame, &p);
    // The device's table-driven hash is the bitwise Toeplitz hash of
    // `sluice::net::rss` over the same fields.
    let be16 = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
    let ports = (p.l4 != 0).then(|| (be16(p.l4), be16(p.l4 + 2)));
    let key = &rss::DEFAULT_KEY;
    let want = match p.ip {
        4 => {
            let a = |at: usize| -> [u8; 4] { frame[at..at + 4].try_into().unwrap() };
            rss::ipv4(key, a(p.l3 + 12), a(p.l3 + 16), ports)
        }
        6 => {
            let a = |at: usize| -> [u8; 16] { frame[at..at + 16].try_into().unwrap() };
            rss::ipv6(key, a(p.l3 + 8), a(p.l3 + 24), ports)
        }
        _ => 0,
    };
    assert_eq!(
        hash, want,
        "table-driven and bitwise Toeplitz hashes differ"
    );
    assert!(Reta::new(usize::from(off % 17)).queue(hash) < usize::from(off % 17).max(1));

    // Tx checksums filled in at the parsed offsets must then check on Rx.
    let mut f = frame.to_vec();
    tx_checksums(&mut f, bit(2), bit(3), bit(4));
    assert_eq!(
        parse(&f),
        p,
        "filling checksums changes no header the parser reads"
    );
    if bit(2) && bit(3) && bit(4) {
        let st = rx_checksums(&f, &p, true, true);
        let errors =
            sluice::driver::soft::desc::rx::ERR_IP | sluice::driver::soft::desc::rx::ERR_L4;
        assert_eq!(
            st & errors,
            0,
            "status {st:#x} after filling every checksum"
        );
    }

    // At a WQE's offsets (tunnel inner headers): any offsets, no panic.
    let mut f = frame.to_vec();
    let (l3, l4) = (usize::from(off) * 2, usize::from(flags) * 2);
    let _ = tx_checksums_at(&mut f, l3, l4, bit(5), bit(6), bit(7));

    // TSO: the first `off` bytes as the inline header, the rest as payload.
    let n = usize::from(off).min(frame.len());
    if let Some(h) = TsoHeaders::find(&frame[..n]) {
        let mut f = frame.to_vec();
        h.fix_segment(&mut f, n, u16::from(flags), u32::from(flags) * 1460, bit(0));
    }
});
