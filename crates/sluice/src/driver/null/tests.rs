use crate::driver::open;
use crate::mbuf::Burst;
use crate::port::{Offloads, PortConfig, PortError};
use crate::test_support::{TestPool, assert_pool_full, test_pool};

#[test]
fn rx_makes_packets_of_the_size_and_tx_frees_them() {
    let pool = test_pool(255);
    let mut port = open(
        "null:size=128",
        PortConfig::new(Some(pool.clone())).port_id(3),
    )
    .unwrap();
    assert!(port.rx_queue(0).is_err(), "a stopped port lends no queue");
    port.start().unwrap();
    let mut burst: Burst<64> = Burst::new();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 64);
    for m in burst.iter() {
        assert_eq!((m.pkt_len(), m.data_len(), m.port()), (128, 128, 3));
        assert_eq!((m.refcnt(), m.nb_segs(), m.ol_flags()), (1, 1, 0));
        assert_eq!(m.headroom(), pool.headroom());
    }
    assert_eq!(pool.available(), 255 - 64);
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 64);
    assert!(burst.is_empty());
    let s = port.stats();
    assert_eq!((s.rx_packets, s.rx_bytes), (64, 64 * 128));
    assert_eq!((s.tx_packets, s.tx_bytes), (64, 64 * 128));
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn copy_writes_a_udp_frame() {
    let pool = test_pool(63);
    let mut port = open(
        "null:size=60,copy=true",
        PortConfig::new(Some(pool.clone())),
    )
    .unwrap();
    port.start().unwrap();
    let mut burst: Burst<4> = Burst::new();
    port.rx_queue(0).unwrap().rx_burst(&mut burst);
    let d = burst[0].data();
    assert_eq!(d.len(), 60);
    assert_eq!(&d[12..14], &[0x08, 0x00]);
    assert_eq!(d[23], 17, "UDP");
    assert_eq!(
        crate::net::checksum::checksum(&d[14..34]),
        0,
        "valid IPv4 checksum"
    );
    drop(burst);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn empty_pool_counts_nombuf_and_returns_nothing() {
    let pool = test_pool(15);
    let mut port = open("null", PortConfig::new(Some(pool.clone()))).unwrap();
    port.start().unwrap();
    let mut burst: Burst<32> = Burst::new();
    assert_eq!(
        port.rx_queue(0).unwrap().rx_burst(&mut burst),
        0,
        "all or none"
    );
    assert_eq!(port.stats().rx_nombuf, 1);
    let mut small: Burst<8> = Burst::new();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut small), 8);
    drop(small);
    port.stop();
    assert_pool_full(&pool);
}

#[test]
fn config_and_spec_errors_name_the_fault() {
    let pool = test_pool(63);
    let msg = |r: Result<crate::port::Port, PortError>| r.unwrap_err().to_string();
    assert_eq!(
        msg(open("null:size=5", PortConfig::new(Some(pool.clone())))),
        "port spec 'null:size=5': key 'size' = '5' is not a number in 14..=9000"
    );
    assert_eq!(
        msg(open("nul", PortConfig::new(Some(pool.clone())))),
        "port spec 'nul': unknown driver 'nul' (drivers: afpacket, afxdp, memif, null, pair, pcap, soft, tap, vhost, virtio)"
    );
    assert_eq!(
        msg(open("null", PortConfig::new(None))),
        "port 'null': Rx queue 0: driver null receives into mbufs and no Rx mempool was given"
    );
    assert_eq!(
        msg(open(
            "null",
            PortConfig::new(Some(pool.clone())).queues(65, 1)
        )),
        "port 'null': 65 Rx queues asked, driver null has at most 64"
    );
    let mut c = PortConfig::new(Some(pool.clone()));
    c.tx_offloads |= Offloads::TSO | Offloads::FAST_FREE;
    assert_eq!(
        msg(open("null", c)),
        "port 'null': driver null has no Tx offload tso"
    );
    let mut c = PortConfig::new(Some(pool.clone()));
    c.mtu = 9001;
    assert_eq!(
        msg(open("null", c)),
        "port 'null': MTU 9001: driver null takes 68 to 9000"
    );
    assert_eq!(
        msg(open("null:size=4000", PortConfig::new(Some(pool.clone())))),
        "null: packets of 4000 bytes do not fit the pool's data room of 2048"
    );
    assert_pool_full(&pool);
}

#[test]
fn queues_split_across_threads_and_stats_read_live() {
    let pool = TestPool::new(1023).cache_size(32).build();
    let mut port = open("null", PortConfig::new(Some(pool.clone())).queues(2, 2)).unwrap();
    let counters = port.counters();
    port.start().unwrap();
    {
        let (rx, tx) = port.queues_mut().unwrap();
        std::thread::scope(|s| {
            for (r, t) in rx.iter_mut().zip(tx.iter_mut()) {
                s.spawn(move || {
                    let _lcore = crate::lcore::register().unwrap();
                    let mut b: Burst = Burst::new();
                    for _ in 0..100 {
                        r.rx_burst(&mut b);
                        t.tx_burst(&mut b);
                    }
                });
            }
        });
    }
    let s = counters.stats();
    assert_eq!((s.rx_packets, s.tx_packets), (6400, 6400));
    assert_eq!(s.rx_queues[1].packets, 3200);
    drop(port);
    assert_pool_full(&pool);
}

#[test]
fn open_with_asks_for_an_offload_only_where_the_device_has_it() {
    // As `sluice l3fwd` does: the IPv4 checksum check where the device can.
    let pool = test_pool(63);
    let wanted = Offloads::IPV4_CKSUM | Offloads::RSS_HASH;
    let open_asking = |spec: &str| {
        crate::driver::open_with(spec, PortConfig::new(Some(pool.clone())), |info, c| {
            c.rx_offloads |= wanted.intersect(info.rx_offload_capa);
        })
        .unwrap()
    };
    // `null` has no Rx offload: nothing is asked, and the port opens.
    assert_eq!(open_asking("null").config().rx_offloads, Offloads::NONE);
    // `soft` has both.
    let soft = open_asking("soft:tester=t-open-with");
    assert_eq!(soft.config().rx_offloads, wanted);
    drop(soft);
    // Asking plainly for what `null` lacks is still the clear error.
    let mut c = PortConfig::new(Some(pool.clone()));
    c.rx_offloads |= Offloads::IPV4_CKSUM;
    assert_eq!(
        open("null", c).unwrap_err().to_string(),
        "port 'null': driver null has no Rx offload ipv4_cksum"
    );
    assert_pool_full(&pool);
}

#[test]
fn null_queues_hold_no_buffer_between_bursts() {
    let pool = test_pool(255);
    let mut port = open("null:size=64", PortConfig::new(Some(pool.clone()))).unwrap();
    port.start().unwrap();
    let mut burst: Burst<32> = Burst::new();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 32);
    // Every buffer out is in the burst: none is posted.
    assert_eq!(pool.available() + 32, 255);
    assert_eq!(port.counters().rx[0].posted.get(), 0);
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut burst), 32);
    assert_eq!(port.counters().tx[0].waiting.get(), 0);
    assert!(pool.is_full());
    port.stop();
    drop(port);
    assert_pool_full(&pool);
}
