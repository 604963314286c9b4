//! A pcap file written by a `pcap` port opens in tshark with every packet
//! and its length. Skipped (with a note) when tshark is not installed —
//! except under CI (`CI=true`), where tshark is required.

use std::process::Command;

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::PortConfig;

#[test]
fn a_file_written_by_a_pcap_port_reads_in_tshark() {
    let pool = MbufPool::new(MbufPoolConfig {
        size: 255,
        cache_size: 0,
        ..Default::default()
    })
    .unwrap();
    let path = std::env::temp_dir().join(format!("sluice-tshark-{}.pcap", std::process::id()));
    let path = path.to_string_lossy().into_owned();
    let mut out = sluice::driver::open(&format!("pcap:tx={path}"), PortConfig::new(None)).unwrap();
    out.start().unwrap();
    // 100 UDP frames from null ports: 50 of 60 bytes, 50 of 1000.
    let mut want = Vec::new();
    for size in [60, 1000] {
        let spec = format!("null:size={size},copy=true");
        let mut src = sluice::driver::open(&spec, PortConfig::new(Some(pool.clone()))).unwrap();
        src.start().unwrap();
        let mut burst: Burst<25> = Burst::new();
        for _ in 0..2 {
            assert_eq!(src.rx_queue(0).unwrap().rx_burst(&mut burst), 25);
            assert_eq!(out.tx_queue(0).unwrap().tx_burst(&mut burst), 25);
            want.extend(std::iter::repeat_n(size, 25));
        }
    }
    assert_eq!(out.stats().tx_packets, 100);
    drop(out);
    assert!(pool.is_full());

    let run = Command::new("tshark")
        .args(["-r", &path, "-T", "fields", "-e", "frame.len"])
        .output();
    let result = match run {
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            sluice_netns::skip_or_fail(
                sluice_netns::Need::Tool,
                &format!("tshark could not run ({e}); install it (Debian: tshark)"),
            );
            return;
        }
        Ok(r) => r,
    };
    let _ = std::fs::remove_file(&path);
    assert!(
        result.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    let lens: Vec<usize> = String::from_utf8_lossy(&result.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(lens, want);
}
