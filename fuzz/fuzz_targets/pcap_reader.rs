//! The pcap reader over arbitrary bytes: the global header, then every
//! record until the end or the first error. Each record read must account
//! for exactly its header and its captured bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::driver::pcap::format::{GLOBAL_HEADER_LEN, PcapReader, RECORD_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let mut reader = match PcapReader::new(data) {
        Ok(r) => r,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = reader.info();
    let mut pkt = Vec::new();
    let mut at = GLOBAL_HEADER_LEN as u64;
    // Each record takes at least its 16-byte header, so this ends.
    loop {
        match reader.next_into(&mut pkt) {
            Ok(Some(rec)) => {
                assert_eq!(rec.offset, at);
                assert_eq!(rec.caplen as usize, pkt.len());
                assert!(rec.caplen <= rec.origlen);
                at += (RECORD_HEADER_LEN + pkt.len()) as u64;
                assert!(at <= data.len() as u64);
            }
            Ok(None) => {
                assert_eq!(at, data.len() as u64);
                break;
            }
            Err(e) => {
                let _ = e.to_string();
                break;
            }
        }
    }
});
