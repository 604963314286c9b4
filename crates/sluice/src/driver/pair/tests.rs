use crate::driver::open;
use crate::mbuf::{Burst, BurstSlice, MbufPool};
use crate::port::{Port, PortConfig, PortError};
use crate::test_support::{TestPool, assert_pool_full, test_pool};

/// Appends `n` packets to `burst`, each 60 bytes: `tag`, then the sequence
/// number from `first` (little-endian u32), then zeros.
fn fill(pool: &MbufPool, burst: &mut BurstSlice, tag: u8, first: u32, n: u32) {
    for i in first..first + n {
        let mut f = [0u8; 60];
        f[0] = tag;
        f[1..5].copy_from_slice(&i.to_le_bytes());
        burst.push(pool.alloc_from_slice(&f).unwrap()).unwrap();
    }
}

/// (tag, sequence number) of each packet.
fn ids(burst: &BurstSlice) -> Vec<(u8, u32)> {
    burst
        .iter()
        .map(|m| {
            let d = m.data();
            (d[0], u32::from_le_bytes([d[1], d[2], d[3], d[4]]))
        })
        .collect()
}

fn pair(name: &str, a: PortConfig, b: PortConfig) -> (Port, Port) {
    let spec = format!("pair:name={name},bytes=true");
    let mut a = open(&spec, a).unwrap();
    let mut b = open(&spec, b).unwrap();
    a.start().unwrap();
    b.start().unwrap();
    (a, b)
}

#[test]
fn packets_cross_in_order_both_ways_without_copy() {
    let pool = test_pool(127);
    let (mut a, mut b) = pair("t_order", PortConfig::new(None), PortConfig::new(None));
    let mut burst: Burst = Burst::new();
    fill(&pool, &mut burst, 0xa, 0, 20);
    let first = burst[0].header() as *const _;
    assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 20);
    assert!(burst.is_empty());
    assert_eq!(
        a.rx_queue(0).unwrap().rx_burst(&mut burst),
        0,
        "nothing comes back"
    );
    assert_eq!(b.rx_queue(0).unwrap().rx_burst(&mut burst), 20);
    assert_eq!(
        burst[0].header() as *const _,
        first,
        "the same mbuf, not a copy"
    );
    assert_eq!(ids(&burst), (0..20).map(|i| (0xa, i)).collect::<Vec<_>>());
    // Back the other way, appended behind what the burst already holds.
    burst.truncate(5);
    fill(&pool, &mut burst, 0xb, 100, 3);
    assert_eq!(b.tx_queue(0).unwrap().tx_burst(&mut burst), 8);
    let mut back: Burst = Burst::new();
    fill(&pool, &mut back, 0xc, 0, 1);
    assert_eq!(a.rx_queue(0).unwrap().rx_burst(&mut back), 8);
    assert_eq!(
        ids(&back),
        [
            (0xc, 0),
            (0xa, 0),
            (0xa, 1),
            (0xa, 2),
            (0xa, 3),
            (0xa, 4),
            (0xb, 100),
            (0xb, 101),
            (0xb, 102)
        ]
    );
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sa.tx_packets, sa.tx_bytes, sa.rx_packets, sa.rx_bytes),
        (20, 1200, 8, 480)
    );
    assert_eq!(
        (sb.rx_packets, sb.rx_bytes, sb.tx_packets, sb.tx_bytes),
        (20, 1200, 8, 480)
    );
    assert_ne!(a.mac(), b.mac());
    drop(back);
    drop((a, b));
    assert_pool_full(&pool);
}

#[test]
fn tx_queue_k_feeds_rx_queue_k() {
    let pool = test_pool(127);
    let c = || PortConfig::new(None).queues(3, 3);
    let (mut a, mut b) = pair("t_queues", c(), c());
    let mut burst: Burst = Burst::new();
    for q in 0..3u8 {
        fill(&pool, &mut burst, q, 0, 4 + q as u32);
        assert_eq!(
            a.tx_queue(q as usize).unwrap().tx_burst(&mut burst),
            4 + q as usize
        );
    }
    for q in (0..3u8).rev() {
        assert_eq!(
            b.rx_queue(q as usize).unwrap().rx_burst(&mut burst),
            4 + q as usize
        );
        assert_eq!(
            ids(&burst),
            (0..4 + q as u32).map(|i| (q, i)).collect::<Vec<_>>()
        );
        burst.clear();
    }
    assert_eq!(b.stats().rx_queues[2].packets, 6);
    drop((a, b));
    assert_pool_full(&pool);
}

#[test]
fn full_ring_takes_fewer_and_leaves_the_rest_in_the_burst() {
    let pool = test_pool(127);
    // 5 descriptors: a ring of 8.
    let (mut a, mut b) = pair(
        "t_full",
        PortConfig::new(None),
        PortConfig::new(None).nb_rxd(5),
    );
    let mut burst: Burst = Burst::new();
    fill(&pool, &mut burst, 1, 0, 12);
    assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 8);
    assert_eq!(ids(&burst), (8..12).map(|i| (1, i)).collect::<Vec<_>>());
    assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 0, "still full");
    assert_eq!(burst.len(), 4);
    assert_eq!(a.stats().tx_bytes, 8 * 60, "only what was taken is counted");
    let mut got: Burst = Burst::new();
    assert_eq!(b.rx_queue(0).unwrap().rx_burst(&mut got), 8);
    assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 4);
    assert_eq!(b.rx_queue(0).unwrap().rx_burst(&mut got), 4);
    assert_eq!(ids(&got), (0..12).map(|i| (1, i)).collect::<Vec<_>>());
    drop(got);
    drop((a, b));
    assert_pool_full(&pool);
}

#[test]
fn open_errors_name_the_fault() {
    let msg = |r: Result<Port, PortError>| r.unwrap_err().to_string();
    assert_eq!(
        msg(open("pair", PortConfig::new(None))),
        "port spec 'pair': driver 'pair' needs key 'name'"
    );
    assert_eq!(
        msg(open("pair:name=x,size=3", PortConfig::new(None))),
        "port spec 'pair:name=x,size=3': driver 'pair' has no key 'size' (keys: name, bytes)"
    );
    let mut a = open("pair:name=t_err", PortConfig::new(None).queues(2, 1)).unwrap();
    assert_eq!(
        a.start().unwrap_err().to_string(),
        "pair 't_err': end B is not open yet; open both ends before starting either"
    );
    assert_eq!(
        msg(open("pair:name=t_err", PortConfig::new(None))),
        "pair 't_err': end B has 1 Rx and 1 Tx queues, end A has 2 Rx and 1 Tx; Tx queue k of \
         one end feeds Rx queue k of the other, so B needs 1 Rx and 2 Tx"
    );
    let b = open("pair:name=t_err", PortConfig::new(None).queues(1, 2)).unwrap();
    assert_eq!(
        msg(open("pair:name=t_err", PortConfig::new(None).queues(1, 2))),
        "pair 't_err': both ends are already open (a pair has two; the name is free again \
         once both are dropped)"
    );
    assert_eq!(
        msg(open(
            "pair:name=t_err2",
            PortConfig::new(None).nb_rxd(40000)
        )),
        "port 'pair:name=t_err2': Rx queue 0: 40000 Rx descriptors: driver pair takes 1 to 32768"
    );
    a.start().unwrap();
    drop((a, b));
}

#[test]
fn stop_and_teardown_with_packets_in_flight_free_everything() {
    let pool = test_pool(127);
    let (mut a, mut b) = pair("t_flight", PortConfig::new(None), PortConfig::new(None));
    let mut burst: Burst = Burst::new();
    fill(&pool, &mut burst, 1, 0, 10);
    a.tx_queue(0).unwrap().tx_burst(&mut burst);
    fill(&pool, &mut burst, 2, 0, 7);
    b.tx_queue(0).unwrap().tx_burst(&mut burst);
    assert_eq!(pool.available(), 127 - 17);
    b.stop();
    assert_eq!(pool.available(), 127 - 7, "B's stop freed its Rx ring");
    // Sent to a stopped receiver: the packets wait on the link.
    fill(&pool, &mut burst, 1, 10, 5);
    assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 5);
    assert_eq!(pool.available(), 127 - 12);
    // B dropped: what it had not received is freed; sent later, it waits
    // until the pair goes.
    drop(b);
    assert_eq!(pool.available(), 127 - 7);
    fill(&pool, &mut burst, 1, 15, 5);
    assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 5);
    assert_eq!(pool.available(), 127 - 12);
    drop(a);
    assert_pool_full(&pool);
}

#[test]
fn a_name_is_free_again_once_both_ends_are_gone() {
    let pool = test_pool(63);
    for round in 0..3u8 {
        let (mut a, b) = pair("t_reuse", PortConfig::new(None), PortConfig::new(None));
        let mut burst: Burst = Burst::new();
        fill(&pool, &mut burst, round, 0, 3);
        a.tx_queue(0).unwrap().tx_burst(&mut burst);
        // Left in flight: the teardown frees it.
        drop((a, b));
        assert_pool_full(&pool);
    }
}

#[test]
fn two_threads_every_packet_arrives_in_order() {
    const TOTAL: u32 = 20_000;
    let pool = test_pool(255);
    let (mut a, mut b) = pair(
        "t_threads",
        PortConfig::new(None).nb_rxd(64),
        PortConfig::new(None).nb_rxd(64),
    );
    let received = {
        let tx = a.tx_queue(0).unwrap();
        let rx = b.rx_queue(0).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut burst: Burst = Burst::new();
                let mut next = 0;
                while next < TOTAL || !burst.is_empty() {
                    let k = (burst.free() as u32).min(TOTAL - next);
                    for _ in 0..k {
                        let mut f = [0u8; 60];
                        f[1..5].copy_from_slice(&next.to_le_bytes());
                        let Ok(m) = pool.alloc_from_slice(&f) else {
                            break;
                        };
                        burst.push(m).unwrap();
                        next += 1;
                    }
                    tx.tx_burst(&mut burst);
                }
            });
            let consumer = s.spawn(|| {
                let mut burst: Burst = Burst::new();
                let mut expect = 0u32;
                while expect < TOTAL {
                    rx.rx_burst(&mut burst);
                    for (_, seq) in ids(&burst) {
                        assert_eq!(seq, expect);
                        expect += 1;
                    }
                    burst.clear();
                }
                expect
            });
            consumer.join().unwrap()
        })
    };
    assert_eq!(received, TOTAL);
    assert_eq!(
        (a.stats().tx_packets, b.stats().rx_packets),
        (TOTAL as u64, TOTAL as u64)
    );
    drop((a, b));
    assert_pool_full(&pool);
}

#[test]
fn bytes_are_counted_only_when_asked() {
    let pool = test_pool(63);
    let mut a = open("pair:name=t_bytes", PortConfig::new(None)).unwrap();
    let mut b = open("pair:name=t_bytes", PortConfig::new(None)).unwrap();
    a.start().unwrap();
    b.start().unwrap();
    let mut burst: Burst = Burst::new();
    fill(&pool, &mut burst, 0, 0, 4);
    a.tx_queue(0).unwrap().tx_burst(&mut burst);
    b.rx_queue(0).unwrap().rx_burst(&mut burst);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sa.tx_packets, sa.tx_bytes, sb.rx_packets, sb.rx_bytes),
        (4, 0, 4, 0)
    );
    drop(burst);
    drop((a, b));
    assert_pool_full(&pool);
}

#[test]
fn runts_and_frames_over_the_mtu_are_dropped_at_rx_with_their_reason() {
    let pool = TestPool::new(63).data_room(4096).build();
    let (mut a, mut b) = pair("t_runts", PortConfig::new(None), PortConfig::new(None));
    let mut burst: Burst = Burst::new();
    for len in [5usize, 60, 0, 14, 1518, 1519, 3000, 60] {
        burst
            .push(pool.alloc_from_slice(&vec![1u8; len]).unwrap())
            .unwrap();
    }
    assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 8);
    assert_eq!(b.rx_queue(0).unwrap().rx_burst(&mut burst), 4);
    assert_eq!(
        burst.iter().map(|m| m.pkt_len()).collect::<Vec<_>>(),
        [60, 14, 1518, 60]
    );
    let s = b.stats();
    assert_eq!((s.rx_packets, s.rx_bytes, s.rx_errors), (4, 1652, 4));
    let x = &b.counters().xstats;
    assert_eq!(x.get("rx_runt_errors"), Some(2));
    assert_eq!(x.get("rx_oversize_errors"), Some(2));
    drop(burst);
    drop((a, b));
    assert_pool_full(&pool);
}

#[test]
fn without_bytes_no_header_is_read_and_nothing_is_checked() {
    let pool = test_pool(63);
    let spec = "pair:name=t_runts_nobytes";
    let mut a = open(spec, PortConfig::new(None)).unwrap();
    let mut b = open(spec, PortConfig::new(None)).unwrap();
    a.start().unwrap();
    b.start().unwrap();
    let mut burst: Burst = Burst::new();
    burst
        .push(pool.alloc_from_slice(&[1u8; 5]).unwrap())
        .unwrap();
    assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 1);
    assert_eq!(b.rx_queue(0).unwrap().rx_burst(&mut burst), 1);
    assert_eq!(b.stats().rx_errors, 0);
    drop(burst);
    drop((a, b));
    assert_pool_full(&pool);
}

#[test]
fn the_receivers_posted_gauge_counts_what_waits_on_its_link_and_reads_0_after_stop() {
    let pool = test_pool(127);
    let (mut a, mut b) = pair("t_gauge", PortConfig::new(None), PortConfig::new(None));
    let mut burst: Burst = Burst::new();
    fill(&pool, &mut burst, 0xa, 0, 30);
    assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 30);
    // A burst of 8 leaves 22 on the link.
    let mut small: Burst<8> = Burst::new();
    assert_eq!(b.rx_queue(0).unwrap().rx_burst(&mut small), 8);
    let posted = b.counters().rx[0].posted.get();
    assert_eq!(posted, 22);
    assert_eq!(a.counters().tx[0].waiting.get(), 0);
    assert_eq!(pool.available() as u64 + posted + small.len() as u64, 127);
    drop(small);
    b.stop();
    assert_eq!(b.counters().rx[0].posted.get(), 0);
    a.stop();
    drop((a, b));
    assert_pool_full(&pool);
}
