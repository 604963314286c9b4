use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::device::runner;
use super::tester::{self, Tester};
use crate::driver::open;
use crate::mbuf::{Burst, BurstSlice, ExtSharedInfo, Mbuf, MbufPool, MbufPoolConfig, ol};
use crate::port::{Offloads, Port, PortConfig, PortError, RxQueue, TxQueue};
use crate::test_support::TestPool;

mod fast_free;
mod recycle;
mod vector;
mod wqe;

fn pool(size: u32, data_room: u16) -> MbufPool {
    TestPool::new(size).data_room(data_room).build()
}

pub(super) fn port(spec: &str, config: PortConfig) -> Port {
    let mut p = open(spec, config).unwrap();
    p.start().unwrap();
    p
}

/// Two ports cabled by a wire: both opened, then both started (a wire
/// with one end does not start).
fn wire_pair(a: (&str, PortConfig), b: (&str, PortConfig)) -> [Port; 2] {
    let mut pa = open(a.0, a.1).unwrap();
    let mut pb = open(b.0, b.1).unwrap();
    pa.start().unwrap();
    pb.start().unwrap();
    [pa, pb]
}

pub(super) fn tester_of(name: &str) -> Arc<Tester> {
    tester::attach(name, None).unwrap()
}

pub(super) fn xstat(p: &Port, name: &str) -> u64 {
    p.counters().xstats.get(name).unwrap()
}

/// A copy of `m` in a buffer of `pool` whose data room is external memory:
/// the `len` bytes at `buf`, shared info `info`.
///
/// # Safety
/// Those bytes and `info` outlive every mbuf that will refer to them, and
/// nothing else uses them meanwhile.
pub(super) unsafe fn ext_copy(
    pool: &MbufPool,
    m: &Mbuf,
    buf: NonNull<u8>,
    len: u16,
    info: &ExtSharedInfo,
) -> Mbuf {
    let mut e = pool.alloc().unwrap();
    // SAFETY: the caller's contract.
    unsafe {
        e.attach_extbuf(buf, buf.as_ptr() as u64, len, 0, NonNull::from(info))
            .unwrap();
    }
    e.append(m.data().len()).unwrap().copy_from_slice(m.data());
    e
}

/// Sends all of `burst` on `tx`, retrying while the ring is full (the
/// inline device completes descriptors in each call).
pub(super) fn send_all(tx: &mut dyn TxQueue, burst: &mut BurstSlice) {
    for _ in 0..1_000_000 {
        if burst.is_empty() {
            return;
        }
        if tx.tx_burst(burst) == 0 {
            // A threaded device completes descriptors on its own time.
            std::thread::yield_now();
        }
    }
    panic!("the Tx queue stopped taking packets");
}

/// One io-forwarding step: receive on `rx` into `burst`, send it all on `tx`.
fn fwd(rx: &mut dyn RxQueue, tx: &mut dyn TxQueue, burst: &mut BurstSlice) -> usize {
    let n = rx.rx_burst(burst);
    send_all(tx, burst);
    n
}

/// io forwarding a → b and b → a on queue 0, with bursts cycling through
/// 7, 13 and 32, until the tester has received `want` frames.
fn forward_until(a: &mut Port, b: &mut Port, t: &Tester, want: u64) -> usize {
    let mut b7: Burst<7> = Burst::new();
    let mut b13: Burst<13> = Burst::new();
    let mut b32: Burst<32> = Burst::new();
    for r in 0..1_000_000 {
        if t.report().received >= want {
            return r;
        }
        let burst: &mut BurstSlice = match r % 3 {
            0 => &mut b7,
            1 => &mut b13,
            _ => &mut b32,
        };
        fwd(a.rx_queue(0).unwrap(), b.tx_queue(0).unwrap(), burst);
        fwd(b.rx_queue(0).unwrap(), a.tx_queue(0).unwrap(), burst);
    }
    panic!("forwarding did not finish: {}", t.report());
}

#[test]
fn io_forwarding_between_tester_ports_keeps_every_frame() {
    for fast_free in [false, true] {
        let name = format!("t-io-{fast_free}");
        let pool = pool(2047, 2048);
        let mut config = PortConfig::new(Some(pool.clone())).nb_rxd(256).nb_txd(256);
        if fast_free {
            config.tx_offloads |= Offloads::FAST_FREE;
        }
        let spec = format!("soft:tester={name},count=3000,flows=64");
        let mut a = port(&spec, config.clone());
        let mut b = port(&spec, config.clone());
        let t = tester_of(&name);
        forward_until(&mut a, &mut b, &t, 6000);
        let r = t.report();
        assert_eq!((r.sent, r.received), (6000, 6000), "{r}");
        assert_eq!(
            (r.lost, r.corrupt, r.reordered, r.foreign),
            (0, 0, 0, 0),
            "{r}"
        );
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!((sa.rx_packets, sa.tx_packets), (3000, 3000));
        assert_eq!((sb.rx_packets, sb.tx_packets), (3000, 3000));
        assert_eq!(sa.rx_bytes, 3000 * 64);
        assert_eq!(
            (sa.rx_missed, sa.rx_nombuf, sa.rx_errors, sa.tx_errors),
            (0, 0, 0, 0)
        );
        // Completions free buffers: at most a ring's worth stays out per port.
        assert!(pool.available() >= 2047 - 2 * (256 + 256));
        a.tx_queue(0).unwrap().tx_done_cleanup(usize::MAX);
        drop((a, b));
        assert!(pool.is_full());
    }
}

#[test]
fn rss_spreads_flows_over_four_queues_polled_by_two_threads() {
    let pool = MbufPool::new(MbufPoolConfig {
        size: 8191,
        cache_size: 64,
        data_room: 512,
        ..Default::default()
    })
    .unwrap();
    let mut config = PortConfig::new(Some(pool.clone()))
        .queues(4, 4)
        .nb_rxd(128)
        .nb_txd(128);
    config.rx_offloads |= Offloads::RSS_HASH;
    let spec = "soft:tester=t-rss,count=4000,flows=256";
    let mut a = port(spec, config.clone());
    let mut b = port(spec, config);
    let t = tester_of("t-rss");
    let misrouted = AtomicU64::new(0);
    {
        let (arx, atx) = a.queues_mut().unwrap();
        let (brx, btx) = b.queues_mut().unwrap();
        let (arx0, arx1) = arx.split_at_mut(2);
        let (atx0, atx1) = atx.split_at_mut(2);
        let (brx0, brx1) = brx.split_at_mut(2);
        let (btx0, btx1) = btx.split_at_mut(2);
        let halves = [(0, arx0, atx0, brx0, btx0), (2, arx1, atx1, brx1, btx1)];
        std::thread::scope(|s| {
            for (base, arx, atx, brx, btx) in halves {
                let (t, misrouted) = (&t, &misrouted);
                s.spawn(move || {
                    let _lcore = crate::lcore::register().unwrap();
                    let mut burst: Burst<32> = Burst::new();
                    for _ in 0..200_000 {
                        if t.report().received >= 8000 {
                            break;
                        }
                        for i in 0..2 {
                            let q = base + i;
                            for (rx, tx) in [(&mut arx[i], &mut btx[i]), (&mut brx[i], &mut atx[i])]
                            {
                                rx.rx_burst(&mut burst);
                                for m in burst.iter() {
                                    let ok = m.ol_flags() & ol::RX_RSS_HASH != 0
                                        && (m.rss_hash() & 127) as usize % 4 == q;
                                    if !ok {
                                        misrouted.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                                send_all(tx.as_mut(), &mut burst);
                            }
                        }
                    }
                });
            }
        });
    }
    let r = t.report();
    assert_eq!((r.sent, r.received), (8000, 8000), "{r}");
    assert!(r.is_clean(), "{r}");
    assert_eq!(misrouted.load(Ordering::Relaxed), 0);
    let s = a.stats();
    assert_eq!(s.rx_packets, 4000);
    for (q, c) in s.rx_queues.iter().enumerate() {
        assert!(c.packets > 0, "queue {q} received nothing");
    }
    drop((a, b));
    pool.flush_local_cache();
    assert!(pool.is_full());
}

#[test]
fn two_ports_cabled_by_a_wire_carry_the_tester_traffic() {
    let pool = pool(2047, 2048);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    let mut t = port("soft:tester=t-wire,count=2000,flows=32", config.clone());
    let [mut w1, mut w2] = wire_pair(
        ("soft:wire=w-wire", config.clone()),
        ("soft:wire=w-wire", config),
    );
    let tr = tester_of("t-wire");
    let mut burst: Burst<32> = Burst::new();
    for _ in 0..100_000 {
        if tr.report().received >= 2000 {
            break;
        }
        fwd(t.rx_queue(0).unwrap(), w1.tx_queue(0).unwrap(), &mut burst);
        fwd(w2.rx_queue(0).unwrap(), t.tx_queue(0).unwrap(), &mut burst);
    }
    let r = tr.report();
    assert_eq!((r.sent, r.received), (2000, 2000), "{r}");
    assert!(r.is_clean(), "{r}");
    assert_eq!(w2.stats().rx_packets, 2000);
    assert_eq!(w1.stats().rx_packets, 0, "nothing flows back");
    drop((t, w1, w2));
    assert!(pool.is_full());
}

/// A UDP/IPv4 frame of 60 bytes with valid checksums.
fn udp_frame() -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&46u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    f[38..40].copy_from_slice(&26u16.to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = i as u8;
    }
    super::frame::tx_checksums(&mut f, true, true, false);
    f
}

#[test]
fn checksum_offloads_flag_bad_frames_and_fill_zeroed_fields() {
    let pool = pool(1023, 2048);
    let mut c1 = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
    c1.tx_offloads |= Offloads::CHECKSUMS | Offloads::MULTI_SEG;
    let mut c2 = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
    c2.rx_offloads |= Offloads::CHECKSUMS;
    let [mut w1, mut w2] = wire_pair(("soft:wire=w-ck", c1), ("soft:wire=w-ck", c2));
    let good = udp_frame();
    let mut bad_ip = good.clone();
    bad_ip[24] ^= 0x55;
    let mut bad_l4 = good.clone();
    bad_l4[59] ^= 1;
    // Zeroed checksum fields, filled by the device on the command bits.
    let mut zeroed = good.clone();
    zeroed[24..26].fill(0);
    zeroed[40..42].fill(0);
    let mut burst: Burst<8> = Burst::new();
    for f in [&good, &bad_ip, &bad_l4, &zeroed] {
        burst.push(pool.alloc_from_slice(f).unwrap()).unwrap();
    }
    burst[3]
        .set_ol_flags(ol::TX_IPV4 | ol::TX_IP_CKSUM | ol::TX_UDP_CKSUM)
        .unwrap();
    // A chain: the good frame in two segments.
    let mut head = pool.alloc_from_slice(&good[..20]).unwrap();
    head.chain(pool.alloc_from_slice(&good[20..]).unwrap())
        .map_err(|(e, _)| e)
        .unwrap();
    burst.push(head).unwrap();
    assert_eq!(w1.tx_queue(0).unwrap().tx_burst(&mut burst), 5);
    let mut rx: Burst<8> = Burst::new();
    assert_eq!(w2.rx_queue(0).unwrap().rx_burst(&mut rx), 5);
    let good_flags = ol::RX_IP_CKSUM_GOOD | ol::RX_L4_CKSUM_GOOD;
    assert_eq!(rx[0].ol_flags(), good_flags);
    assert_eq!(rx[1].ol_flags(), ol::RX_IP_CKSUM_BAD | ol::RX_L4_CKSUM_GOOD);
    assert_eq!(rx[2].ol_flags(), ol::RX_IP_CKSUM_GOOD | ol::RX_L4_CKSUM_BAD);
    assert_eq!(rx[3].ol_flags(), good_flags);
    assert_eq!(rx[3].data(), &good[..], "the device filled both checksums");
    assert_eq!(rx[4].data(), &good[..], "the chain arrives whole");
    let ptype =
        super::desc::ptype::L2_ETHER | super::desc::ptype::L3_IPV4 | super::desc::ptype::L4_UDP;
    assert_eq!(rx[0].packet_type(), ptype);
    assert_eq!(w2.stats().rx_errors, 0);
    drop(rx);
    drop((w1, w2));
    assert!(pool.is_full());
}

#[test]
fn tx_checksum_command_bits_satisfy_the_checker() {
    let pool = pool(1023, 2048);
    for offload in [true, false] {
        let name = format!("t-txck-{offload}");
        let mut config = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
        if offload {
            config.tx_offloads |= Offloads::IPV4_CKSUM | Offloads::UDP_CKSUM;
        }
        let mut p = port(&format!("soft:tester={name},count=100"), config);
        let t = tester_of(&name);
        let mut burst: Burst<32> = Burst::new();
        for _ in 0..100 {
            p.rx_queue(0).unwrap().rx_burst(&mut burst);
            for m in burst.iter_mut() {
                m.data_mut().unwrap()[24..26].fill(0);
                m.set_ol_flags(ol::TX_IPV4 | ol::TX_IP_CKSUM | ol::TX_UDP_CKSUM)
                    .unwrap();
            }
            send_all(p.tx_queue(0).unwrap(), &mut burst);
        }
        let r = t.report();
        assert_eq!(r.sent, 100, "{r}");
        assert_eq!(r.received, if offload { 100 } else { 0 }, "{r}");
        // Without the offload the zeroed field goes out as it is: the
        // checker notices, so the check above means something.
        assert_eq!(r.corrupt, if offload { 0 } else { 100 }, "{r}");
    }
    assert!(pool.is_full());
}

#[test]
fn multi_segment_packets_need_the_offload() {
    let pool = pool(255, 2048);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
    let [mut w1, _w2] = wire_pair(
        ("soft:wire=w-seg", config.clone()),
        ("soft:wire=w-seg", config),
    );
    let good = udp_frame();
    let mut head = pool.alloc_from_slice(&good[..20]).unwrap();
    head.chain(pool.alloc_from_slice(&good[20..]).unwrap())
        .map_err(|(e, _)| e)
        .unwrap();
    let mut burst: Burst<4> = Burst::new();
    burst.push(head).unwrap();
    burst.push(pool.alloc_from_slice(&good).unwrap()).unwrap();
    assert_eq!(w1.tx_queue(0).unwrap().tx_burst(&mut burst), 2);
    let s = w1.stats();
    assert_eq!((s.tx_packets, s.tx_errors), (1, 1));
    assert_eq!(w1.counters().xstats.get("tx_chain_errors"), Some(1));
    drop(w1);
    drop(_w2);
    assert!(pool.is_full());
}

#[test]
fn stop_start_and_teardown_with_traffic_in_flight_return_every_buffer() {
    let pool = pool(1023, 2048);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    let mut a = port("soft:tester=t-stop,flows=16", config.clone());
    let mut b = port("soft:tester=t-stop", config);
    let mut held: Burst<32> = Burst::new();
    for round in 0..3 {
        let mut burst: Burst<32> = Burst::new();
        for _ in 0..50 {
            fwd(a.rx_queue(0).unwrap(), b.tx_queue(0).unwrap(), &mut burst);
            fwd(b.rx_queue(0).unwrap(), a.tx_queue(0).unwrap(), &mut burst);
        }
        // Frames written back and not read, Tx descriptors not completed.
        a.rx_queue(0).unwrap().rx_burst(&mut held);
        assert!(pool.available() < 1023 - 2 * 128);
        a.stop();
        b.stop();
        assert_eq!(
            pool.available() as usize,
            1023 - held.len(),
            "round {round}"
        );
        held.clear();
        assert!(pool.is_full());
        a.start().unwrap();
        b.start().unwrap();
    }
    for _ in 0..20 {
        let mut burst: Burst<32> = Burst::new();
        fwd(a.rx_queue(0).unwrap(), b.tx_queue(0).unwrap(), &mut burst);
    }
    // Teardown without stop.
    drop((a, b));
    assert!(pool.is_full());
}

#[test]
fn descriptor_rings_wrap_with_bursts_that_straddle_the_end() {
    for nb in [64u16, 512, 4096] {
        let name = format!("t-wrap-{nb}");
        let pool = pool(2 * 2 * nb as u32 + 255, 256);
        let config = PortConfig::new(Some(pool.clone())).nb_rxd(nb).nb_txd(nb);
        let count = 3 * nb as u64 + 5;
        let spec = format!("soft:tester={name},count={count},flows=7");
        let mut a = port(&spec, config.clone());
        let mut b = port(&spec, config);
        let t = tester_of(&name);
        forward_until(&mut a, &mut b, &t, 2 * count);
        let r = t.report();
        assert_eq!((r.sent, r.received), (2 * count, 2 * count), "{r}");
        assert!(r.is_clean(), "{r}");
        assert_eq!(a.stats().tx_packets, count);
        drop((a, b));
        assert!(pool.is_full(), "nb {nb}");
    }
}

#[test]
fn rx_nombuf_is_counted_not_a_hang_when_the_pool_is_smaller_than_the_ring() {
    let pool = pool(100, 2048);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(64);
    let mut p = port("soft:tester=t-nombuf", config);
    // 3 batches of 32 armed, the 4th found the pool short.
    assert_eq!(p.stats().rx_nombuf, 1);
    assert_eq!(pool.available(), 4);
    let mut held: Burst<64> = Burst::new();
    for _ in 0..3 {
        p.rx_queue(0).unwrap().rx_burst(&mut held);
    }
    assert_eq!(held.len(), 64);
    let nombuf = p.stats().rx_nombuf;
    assert!(nombuf >= 2, "refills failed and were counted: {nombuf}");
    held.clear();
    let mut burst: Burst<32> = Burst::new();
    let mut got = 0;
    for _ in 0..10 {
        got += p.rx_queue(0).unwrap().rx_burst(&mut burst);
        burst.clear();
    }
    assert!(got >= 32, "traffic resumes once buffers come back");
    drop(p);
    assert!(pool.is_full());
}

#[test]
fn oversize_frames_are_counted_as_rx_errors_and_their_buffers_reused() {
    let pool = pool(255, 512);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
    let mut p = port("soft:tester=t-big,size=1000,count=200", config);
    let mut burst: Burst<32> = Burst::new();
    for _ in 0..20 {
        assert_eq!(p.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    }
    let s = p.stats();
    assert_eq!((s.rx_errors, s.rx_packets, s.rx_nombuf), (200, 0, 0));
    assert_eq!(tester_of("t-big").report().lost, 200);
    drop(p);
    assert!(pool.is_full());
}

#[test]
fn flow_control_holds_the_source_back_or_drops_into_rx_missed() {
    let pool = pool(255, 2048);
    for fc in ["on", "off"] {
        let name = format!("t-fc-{fc}");
        let config = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
        let mut p = port(&format!("soft:tester={name},fc={fc}"), config);
        let mut full: Burst<0> = Burst::new();
        for _ in 0..5 {
            // Runs the inline device; reads nothing.
            p.rx_queue(0).unwrap().rx_burst(&mut full);
        }
        let r = tester_of(&name).report();
        let missed = p.stats().rx_missed;
        if fc == "on" {
            assert_eq!(
                (r.sent, missed),
                (64, 0),
                "the ring holds 64, the rest waits"
            );
        } else {
            assert_eq!(r.sent, 5 * 64, "the source kept sending");
            assert_eq!(missed, 4 * 64);
        }
        drop(p);
    }
    assert!(pool.is_full());
}

/// What one burst of 32 64-byte packets costs on the Tx side in each Tx
/// mode: (WQE blocks fetched and their bytes, completions, data bytes read
/// and transactions, MPWQE blocks, inline bytes).
struct TxCost {
    txmode: &'static str,
    fetch_bytes: u64,
    fetch_blocks: u64,
    completions: u64,
    data_bytes: u64,
    data_tlps: u64,
    mpwqe_blks: u64,
    inline_bytes: u64,
}

#[test]
fn bus_xstats_follow_the_transactions() {
    let costs = [
        // One 64-byte WQE per packet: 18 bytes inlined, a dseg for 46; a
        // completion on the WQE of every 32nd packet.
        TxCost {
            txmode: "txmode=wqe",
            fetch_bytes: 32 * 64,
            fetch_blocks: 32,
            completions: 1,
            data_bytes: 32 * 46,
            data_tlps: 32,
            mpwqe_blks: 0,
            inline_bytes: 32 * 18,
        },
        // One MPWQE per burst: cseg, eseg, 32 dsegs = 34 segments in 9
        // blocks; each packet read whole.
        TxCost {
            txmode: "txmode=mpwqe",
            fetch_bytes: 34 * 16,
            fetch_blocks: 9,
            completions: 1,
            data_bytes: 32 * 64,
            data_tlps: 32,
            mpwqe_blks: 9,
            inline_bytes: 0,
        },
        // Inlined: 5 segments a packet, 12 packets fill the 62 data
        // segments: WQEs of 12, 12 and 8 packets (62, 62 and 42 segments:
        // 16, 16 and 11 blocks). The second asks a completion too: half
        // the ring's 64 blocks went out since the last one that asked.
        TxCost {
            txmode: "inline_mpw=64",
            fetch_bytes: (62 + 62 + 42) * 16,
            fetch_blocks: 16 + 16 + 11,
            completions: 2,
            data_bytes: 0,
            data_tlps: 0,
            mpwqe_blks: 43,
            inline_bytes: 32 * 64,
        },
    ];
    for c in &costs {
        for overhead in [24u64, 0] {
            let name = format!("t-bus-{}-{overhead}", c.txmode);
            let pool = pool(511, 2048);
            let config = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
            let spec = format!(
                "soft:tester={name},count=320,bus_overhead={overhead},{}",
                c.txmode
            );
            let mut p = port(&spec, config);
            let t = tester_of(&name);
            let mut burst: Burst<32> = Burst::new();
            let mut bursts = 0;
            for _ in 0..20 {
                let (rx, tx) = p.queues_mut().unwrap();
                if fwd(rx[0].as_mut(), tx[0].as_mut(), &mut burst) > 0 {
                    bursts += 1;
                }
            }
            assert_eq!(bursts, 10);
            let r = t.report();
            assert_eq!(r.received, 320, "{r}");
            assert!(r.is_clean(), "{r}");
            // Doorbells: 2 Rx batches at start, then one Rx refill and one
            // Tx tail write per burst of 32; 4 bytes each.
            assert_eq!(xstat(&p, "bus_doorbells"), 2 + 10 + 10);
            assert_eq!(xstat(&p, "bus_doorbell_bytes"), 22 * (4 + overhead));
            // Rx: 320 frames of 64 bytes, one transaction each; Tx: as the
            // mode reads them.
            let tx_data = 10 * (c.data_bytes + c.data_tlps * overhead);
            assert_eq!(xstat(&p, "bus_tx_data_bytes"), tx_data, "{}", c.txmode);
            assert_eq!(xstat(&p, "bus_data_bytes"), 320 * (64 + overhead) + tx_data);
            // Descriptors: 320 Rx fetched, 4 per cache-line read; the WQEs.
            assert_eq!(
                xstat(&p, "bus_desc_bytes"),
                320 * 16 + 80 * overhead + 10 * (c.fetch_bytes + c.fetch_blocks * overhead),
                "{}",
                c.txmode
            );
            // Write-back: 320 Rx descriptors by the line; Tx: CQEs.
            assert_eq!(xstat(&p, "bus_writeback_bytes"), 320 * 16 + 80 * overhead);
            assert_eq!(
                xstat(&p, "bus_completion_bytes"),
                10 * c.completions * (64 + overhead),
                "{}",
                c.txmode
            );
            assert_eq!(xstat(&p, "tx_mpwqe_blks"), 10 * c.mpwqe_blks);
            let mpw = if c.mpwqe_blks == 0 { 0 } else { 320 };
            assert_eq!(xstat(&p, "tx_mpwqe_pkts"), mpw);
            assert_eq!(xstat(&p, "tx_wqe_pkts"), 320 - mpw);
            assert_eq!(xstat(&p, "tx_inline_bytes"), 10 * c.inline_bytes);
            assert_eq!(xstat(&p, "device_wqe_errors"), 0);
            assert!(xstat(&p, "device_cycles") > 0);
            drop(p);
            assert!(pool.is_full());
        }
    }
}

#[test]
fn threaded_device_runs_a_bounded_forwarding_with_exact_counts() {
    let pool = MbufPool::new(MbufPoolConfig {
        size: 2047,
        cache_size: 32,
        ..Default::default()
    })
    .unwrap();
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(256).nb_txd(256);
    let spec = "soft:tester=t-thr,count=20000,flows=32,device=threaded";
    let mut a = port(spec, config.clone());
    let mut b = port(spec, config);
    assert!(runner::running());
    let t = tester_of("t-thr");
    let _lcore = crate::lcore::register();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut burst: Burst<32> = Burst::new();
    while t.report().received < 40_000 && std::time::Instant::now() < deadline {
        fwd(a.rx_queue(0).unwrap(), b.tx_queue(0).unwrap(), &mut burst);
        fwd(b.rx_queue(0).unwrap(), a.tx_queue(0).unwrap(), &mut burst);
    }
    let r = t.report();
    assert_eq!((r.sent, r.received), (40_000, 40_000), "{r}");
    assert!(r.is_clean(), "{r}");
    assert!(xstat(&a, "device_cycles") > 0);
    a.stop();
    b.stop();
    drop((a, b));
    pool.flush_local_cache();
    assert!(pool.is_full());
}

#[test]
fn spec_and_config_errors_name_the_fault() {
    let pool = pool(255, 2048);
    let msg = |spec: &str, c: PortConfig| -> String {
        let r: Result<Port, PortError> = open(spec, c);
        r.unwrap_err().to_string()
    };
    let c = || PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
    for (spec, config, want) in [
        (
            "soft:wire=x,gen=udp",
            c(),
            "port spec 'soft:wire=x,gen=udp': wire= and the tester keys exclude each other",
        ),
        (
            "soft:device=fast",
            c(),
            "port spec 'soft:device=fast': key 'device' = 'fast' is not one of inline, threaded",
        ),
        (
            "soft:fc=maybe",
            c(),
            "port spec 'soft:fc=maybe': key 'fc' = 'maybe' is not one of on, off",
        ),
        (
            "soft:rx_free_thresh=24",
            c(),
            "port spec 'soft:rx_free_thresh=24': rx_free_thresh 24 is not a power of two",
        ),
        (
            "soft:bus_overhead=300",
            c(),
            "port spec 'soft:bus_overhead=300': key 'bus_overhead' = '300' is not a number in 0..=256",
        ),
        (
            "soft:tester=t-err,tx_rs_thresh=64,tx_free_thresh=32",
            c(),
            "port 'soft:tester=t-err,tx_rs_thresh=64,tx_free_thresh=32': Tx queue 0: needs \
             tx_rs_thresh 64 <= tx_free_thresh 32 <= 64 descriptors",
        ),
        (
            "soft:tester=t-err,rx_free_thresh=128",
            c(),
            "port 'soft:tester=t-err,rx_free_thresh=128': Rx queue 0: rx_free_thresh 128 exceeds \
             its 64 descriptors",
        ),
        (
            "soft:tester=t-err",
            c().nb_rxd(100),
            "port 'soft:tester=t-err': Rx queue 0: 100 Rx descriptors: driver soft takes only \
             powers of two",
        ),
        (
            "soft:tester=t-err",
            c().nb_txd(8192),
            "port 'soft:tester=t-err': Tx queue 0: 8192 Tx descriptors: driver soft takes 64 to 4096",
        ),
        (
            "soft:tester=t-err",
            c().queues(17, 1),
            "port 'soft:tester=t-err': 17 Rx queues asked, driver soft has at most 16",
        ),
        (
            "soft:tester=t-err",
            {
                let mut rss = c();
                rss.tx_offloads |= Offloads::RSS_HASH;
                rss
            },
            "port 'soft:tester=t-err': driver soft has no Tx offload rss_hash",
        ),
        (
            "soft:txmode=mpw",
            c(),
            "port spec 'soft:txmode=mpw': key 'txmode' = 'mpw' is not one of wqe, mpwqe",
        ),
        (
            "soft:mpw_segs=63",
            c(),
            "port spec 'soft:mpw_segs=63': key 'mpw_segs' = '63' is not a number in 1..=62",
        ),
        (
            "soft:mpw_segs=8,inline_mpw=200",
            c(),
            "port spec 'soft:mpw_segs=8,inline_mpw=200': inline_mpw 200 takes 13 segments, more \
             than mpw_segs 8",
        ),
    ] {
        assert_eq!(msg(spec, config), want, "{spec}");
    }
    assert!(msg("soft:link=gen2x1", c()).starts_with(
        "port spec 'soft:link=gen2x1': key 'link' = 'gen2x1' is not one of gen3x4, gen3x8"
    ));
    assert!(msg("soft:flow=3", c()).starts_with(
        "port spec 'soft:flow=3': driver 'soft' has no key 'flow' (keys: gen, flows, size"
    ));
    let _a = open("soft:wire=w-err", c()).unwrap();
    let _b = open("soft:wire=w-err", c()).unwrap();
    assert_eq!(
        msg("soft:wire=w-err", c()),
        "port spec 'soft:wire=w-err': wire 'w-err' already joins two ports"
    );
    let _t = open("soft:tester=t-cfg,flows=4", c()).unwrap();
    assert!(
        msg("soft:tester=t-cfg,flows=8", c())
            .starts_with("port spec 'soft:tester=t-cfg,flows=8': ")
    );
    drop((_a, _b, _t));
    assert!(pool.is_full());
}

/// io forwarding between two tester ports whose Rx queues are armed with
/// page-pool fragments (`rxbuf=frag`), the mbuf headers from a pool of small
/// elements whose own data room could not hold the frames: every frame
/// arrives intact, the headers and fragments all come home.
fn frag_forwarding(name: &str, mtu: u16, size: &str, count: u64, fc: &str) {
    let headers = pool(1023, 64);
    let mut config = PortConfig::new(Some(headers.clone()))
        .nb_rxd(256)
        .nb_txd(256);
    config.mtu = mtu;
    let spec = format!("soft:tester={name},count={count},flows=64,size={size},rxbuf=frag,fc={fc}");
    let mut a = port(&spec, config.clone());
    let mut b = port(&spec, config);
    let t = tester_of(name);
    forward_until(&mut a, &mut b, &t, 2 * count);
    let r = t.report();
    assert_eq!((r.sent, r.received), (2 * count, 2 * count), "{r}");
    assert_eq!(
        (r.lost, r.corrupt, r.reordered, r.duplicates, r.foreign),
        (0, 0, 0, 0, 0),
        "{r}"
    );
    for p in [&a, &b] {
        let s = p.stats();
        assert_eq!((s.rx_packets, s.tx_packets), (count, count));
        assert_eq!((s.rx_nombuf, s.rx_errors, s.tx_errors), (0, 0, 0));
        let layout = crate::pagepool::FragLayout::for_mtu(mtu);
        assert_eq!(
            xstat(p, "rx_buf_bytes_per_desc") as usize,
            super::driver::rx_frags::frag_bytes_per_desc(layout)
        );
    }
    // Stop both before dropping either: a's fragments may sit in b's Tx
    // ring, and a port dropped while its fragments are out leaks its page
    // pool (safe, but not what a clean teardown does). Once every header is
    // home no fragment is out, so the drops below free the page pools.
    a.stop();
    b.stop();
    assert!(headers.is_full());
    drop((a, b));
}

#[test]
fn rxbuf_frag_forwarding_at_mtu_1500_keeps_every_frame() {
    frag_forwarding("t-frag1500", 1500, "imix", 3000, "on");
}

#[test]
fn rxbuf_frag_forwarding_of_jumbo_frames_keeps_every_frame() {
    // 8000-byte frames in single buffers: 8274-byte fragments, 7 per page.
    frag_forwarding("t-frag8000", 8000, "8000", 600, "on");
}

#[test]
fn rx_buffer_memory_per_descriptor_is_reported_for_both_modes() {
    let big = pool(255, 2048);
    let small = pool(255, 64);
    let mbuf = port(
        "soft:tester=t-mem",
        PortConfig::new(Some(big.clone())).nb_rxd(64),
    );
    // 128 + 128 (headroom) + 2048 bytes, spread to 37 lines apart.
    assert_eq!(xstat(&mbuf, "rx_buf_bytes_per_desc"), 2368);
    let frag = port(
        "soft:tester=t-mem,rxbuf=frag",
        PortConfig::new(Some(small.clone())).nb_rxd(64),
    );
    // 1774-byte fragments take 1792 bytes, 36 to a 64 KiB page (1821 bytes
    // each, the page's tail shared out); a posted descriptor holds no
    // header.
    assert_eq!(xstat(&frag, "rx_buf_bytes_per_desc"), 1821);
    drop((mbuf, frag));
    assert!(big.is_full() && small.is_full());
}

#[test]
fn rxbuf_is_checked_and_frag_queues_refuse_recycling() {
    let p = pool(255, 64);
    let config = PortConfig::new(Some(p.clone())).nb_rxd(64).nb_txd(64);
    let e = open("soft:tester=t-rxbuf,rxbuf=pages", config.clone()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "port spec 'soft:tester=t-rxbuf,rxbuf=pages': key 'rxbuf' = 'pages' is not one of mbuf, frag"
    );
    let mut a = port("soft:tester=t-rxbuf,rxbuf=frag", config);
    assert!(!a.rx_queue_recycles(0).unwrap());
    let (rx, tx) = a.queues_mut().unwrap();
    let e = crate::port::recycle_mbufs(rx[0].as_mut(), tx[0].as_mut()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "this Rx queue does not support buffer recycling: it is armed with page-pool fragments \
         (rxbuf=frag)"
    );
    drop(a);
    assert!(p.is_full());
}

/// `rxbuf=frag` with the fragments freed on another lcore: the tester port's
/// Rx queue is polled on one lcore (which owns its page pool) and its
/// packets are sent on by a second lcore, where their Tx completions free
/// them, so their pages come home through the pool's ring; the wire port's
/// fragments are received and freed on the second lcore (its direct
/// cache). Every frame arrives intact and every buffer comes home.
#[test]
fn rxbuf_frag_buffers_freed_on_another_lcore_come_home() {
    use std::sync::atomic::AtomicBool;

    use crate::mbuf::Mbuf;
    use crate::ring::Ring;

    const COUNT: u64 = 4000;
    let headers = pool(2047, 64);
    let config = PortConfig::new(Some(headers.clone()))
        .nb_rxd(128)
        .nb_txd(128);
    let mut t = port(
        &format!("soft:tester=t-frag-x,count={COUNT},flows=32,size=imix,rxbuf=frag"),
        config.clone(),
    );
    let [mut w1, mut w2] = wire_pair(
        ("soft:wire=w-frag-x", config.clone()),
        ("soft:wire=w-frag-x,rxbuf=frag", config),
    );
    let tr = tester_of("t-frag-x");
    let (mut to_y, mut from_x) = Ring::<Mbuf>::spsc(1024).unwrap();
    let done = AtomicBool::new(false);
    {
        let (trx, ttx) = t.queues_mut().unwrap();
        let (t_rx, t_tx) = (&mut trx[0], &mut ttx[0]);
        let w1_tx = w1.tx_queue(0).unwrap();
        let w2_rx = w2.rx_queue(0).unwrap();
        let (tr, done) = (&tr, &done);
        std::thread::scope(|s| {
            s.spawn(move || {
                let _l = crate::lcore::register().unwrap();
                let mut burst: Burst<32> = Burst::new();
                while !done.load(Ordering::Acquire) {
                    t_rx.rx_burst(&mut burst);
                    while let Some(m) = burst.pop() {
                        let mut m = m;
                        while let Err(back) = to_y.push(m) {
                            m = back;
                            std::thread::yield_now();
                        }
                    }
                }
            });
            s.spawn(move || {
                let _l = crate::lcore::register().unwrap();
                let mut burst: Burst<32> = Burst::new();
                for _ in 0..2_000_000 {
                    if tr.report().received >= COUNT {
                        break;
                    }
                    while burst.free() > 0 {
                        match from_x.pop() {
                            Some(m) => burst.push(m).unwrap(),
                            None => break,
                        }
                    }
                    send_all(w1_tx, &mut burst);
                    fwd(w2_rx, t_tx.as_mut(), &mut burst);
                }
                done.store(true, Ordering::Release);
                // Whatever X handed over after the last look goes out too.
                while let Some(m) = from_x.pop() {
                    drop(m);
                }
            });
        });
    }
    let r = tr.report();
    assert_eq!((r.sent, r.received), (COUNT, COUNT), "{r}");
    assert!(r.is_clean(), "{r}");
    assert_eq!(w2.stats().rx_packets, COUNT);
    for p in [&mut t, &mut w1, &mut w2] {
        p.stop();
    }
    assert!(headers.is_full());
    drop((t, w1, w2));
}

/// An Rx queue that receives nothing: what safe code may put in a started
/// port in place of a real queue ([`Port::queues_mut`]).
struct NoRx;

impl RxQueue for NoRx {
    fn rx_burst(&mut self, _: &mut BurstSlice) -> usize {
        0
    }

    fn start(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn stop(&mut self) {}
}

#[test]
fn an_rx_queue_dropped_while_its_threaded_device_runs_leaves_it_no_buffer() {
    let name = "t-rx-dropped";
    let pool = pool(1023, 512);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    let spec = format!("soft:tester={name},flows=16,fc=off,device=threaded");
    let mut p = port(&spec, config);
    let t = tester_of(name);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Everything the tester sent received or dropped, then the ring
    // rearmed: the device holds armed, empty descriptors.
    t.pause(true);
    let mut burst: Burst<32> = Burst::new();
    loop {
        p.rx_queue(0).unwrap().rx_burst(&mut burst);
        burst.clear();
        let s = p.stats();
        if s.rx_packets + s.rx_missed >= t.report().sent {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", t.report());
        std::thread::yield_now();
    }
    p.rx_queue(0).unwrap().rx_burst(&mut burst);
    assert!(burst.is_empty(), "the tester is paused");
    // Safe code drops the queue while the port, and its device, run.
    let real = std::mem::replace(&mut p.queues_mut().unwrap().0[0], Box::new(NoRx));
    drop(real);
    // Every buffer of the pool, marked where a frame would land.
    let mut held = Vec::new();
    while let Some(mut m) = pool.alloc() {
        m.append(64).unwrap().fill(0xa5);
        held.push(m);
    }
    assert_eq!(held.len(), 1023, "the dropped queue gave its buffers back");
    // The device runs on while the tester sends more frames than the ring
    // holds: each finds no descriptor.
    let sent = t.report().sent;
    t.pause(false);
    while t.report().sent < sent + 1024 {
        assert!(std::time::Instant::now() < deadline, "{}", t.report());
        std::thread::yield_now();
    }
    t.pause(true);
    let written = held
        .iter()
        .filter(|m| m.data().iter().any(|&b| b != 0xa5))
        .count();
    assert_eq!(
        written, 0,
        "the device wrote frames into buffers given back"
    );
    drop(held);
    p.stop();
    assert!(pool.is_full());
}

/// Runs `f` on its own thread; `None` when it has not returned within 60 s
/// (the thread is then left behind).
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let h = std::thread::spawn(f);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !h.is_finished() && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    h.is_finished().then(|| h.join().unwrap())
}

#[test]
fn an_inline_device_step_that_panics_fails_fast_afterwards_and_returns_every_buffer() {
    let pool = pool(1023, 2048);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(256).nb_txd(256);
    let mut p = port("soft:tester=t-panic,panic_at=3", config);
    let mut burst: Burst<32> = Burst::new();
    let mut panic = None;
    for _ in 0..3 {
        let rx = p.rx_queue(0).unwrap();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rx.rx_burst(&mut burst))) {
            Ok(_) => burst.clear(),
            Err(e) => panic = e.downcast_ref::<String>().cloned(),
        }
    }
    assert_eq!(
        panic.as_deref(),
        Some("soft: panic injected in Rx queue 0's step (panic_at)")
    );
    // Later calls return (what was delivered before, then nothing)...
    let mut after = 0;
    for _ in 0..100 {
        after += p.rx_queue(0).unwrap().rx_burst(&mut burst);
        burst.clear();
    }
    assert!(after <= 256, "{after}");
    // ...and so do stop and start, with every buffer back home.
    let p = bounded(move || {
        p.stop();
        let again = p.start().unwrap_err().to_string();
        (p, again)
    });
    let (p, again) = p.expect("stop or start spins on the engine that panicked");
    assert_eq!(
        again,
        "soft: the device's Rx engine of queue 0 panicked in a step and cannot run again"
    );
    drop(p);
    assert!(pool.is_full());
}

#[test]
fn a_threaded_device_step_that_panics_is_the_ports_fault_and_the_device_goes_on() {
    let pool = pool(1023, 2048);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(256).nb_txd(256);
    let mut p = port(
        "soft:tester=t-panic-thr,device=threaded,panic_at=3",
        config.clone(),
    );
    let mut q = port("soft:tester=t-panic-thr,device=threaded", config);
    let counters = p.counters();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut burst: Burst<32> = Burst::new();
    while counters.fault().is_none() && std::time::Instant::now() < deadline {
        p.rx_queue(0).unwrap().rx_burst(&mut burst);
        burst.clear();
    }
    assert_eq!(
        counters.fault(),
        Some(
            "soft: the device model panicked: soft: panic injected in Rx queue 0's step (panic_at)"
        )
    );
    // The device thread steps the other port still.
    let before = q.counters().stats().rx_packets;
    while q.counters().stats().rx_packets == before && std::time::Instant::now() < deadline {
        q.rx_queue(0).unwrap().rx_burst(&mut burst);
        burst.clear();
    }
    assert!(q.counters().stats().rx_packets > before);
    assert!(q.counters().fault().is_none());
    let ports = bounded(move || {
        p.stop();
        q.stop();
        (p, q)
    });
    drop(ports.expect("stop spins on the engine that panicked"));
    assert!(pool.is_full());
}

#[test]
fn a_tx_queue_dropped_while_its_threaded_device_runs_leaves_it_no_buffer() {
    let pool = pool(4095, 512);
    let config = |txd| PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(txd);
    let spec = "soft:wire=w-txdrop,device=threaded";
    let [mut a, mut b] = wire_pair((spec, config(1024)), (spec, config(128)));
    // 640 frames posted on A's Tx queue: with flow control, B's ring (128)
    // and the wire (256 frames) take 384 until B receives, so at least 256
    // stay posted, their buffers the device's to read.
    let frame = udp_frame();
    let mut burst: Burst<32> = Burst::new();
    for _ in 0..20 {
        for _ in 0..32 {
            let mut m = pool.alloc().unwrap();
            m.append(frame.len()).unwrap().copy_from_slice(&frame);
            burst.push(m).unwrap();
        }
        assert_eq!(a.tx_queue(0).unwrap().tx_burst(&mut burst), 32);
    }
    // Safe code drops the queue while the port, and its device, run.
    let sink = Box::new(crate::port::SinkTx::new(&a.counters(), 0));
    let real = std::mem::replace(&mut a.queues_mut().unwrap().1[0], sink);
    drop(real);
    // Every buffer of the pool, marked where a frame's bytes lie.
    let mut held = Vec::new();
    while let Some(mut m) = pool.alloc() {
        m.append(frame.len()).unwrap().fill(0xa5);
        held.push(m);
    }
    assert_eq!(
        held.len() as u32,
        4095 - 2 * 128,
        "the dropped queue gave its buffers back (both Rx rings armed)"
    );
    // B receives what the device sent before the drop, and polls on (a
    // bounded count) for anything it sends after.
    let (mut received, mut foreign) = (0u64, 0u64);
    for _ in 0..200_000 {
        let n = b.rx_queue(0).unwrap().rx_burst(&mut burst);
        received += n as u64;
        foreign += burst.iter().filter(|m| m.data() != &frame[..]).count() as u64;
        burst.clear();
        if received > 384 + 32 {
            break;
        }
    }
    assert_eq!(
        foreign, 0,
        "the device sent frames out of buffers given back"
    );
    assert!(
        received <= 384,
        "{received}: more than the ring and the wire held"
    );
    drop(held);
    drop((a, b));
    assert!(pool.is_full());
}

#[test]
fn every_numeric_spec_key_is_range_checked_naming_its_range() {
    let pool = pool(255, 2048);
    let c = || PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
    let range = |lo: &str, hi: &str| format!("a number in {lo}..={hi}");
    let u64max = u64::MAX.to_string();
    let table: Vec<(&str, &str, Vec<&str>, String)> = vec![
        ("soft", "flows", vec!["0", "1048577"], range("1", "1048576")),
        (
            "soft",
            "size",
            vec!["59", "9001"],
            "a frame size in 60..=9000 or imix".into(),
        ),
        (
            "soft",
            "rate",
            vec!["0", "1e300", "18446744073709551615"],
            "a rate in frames/s in 1e-3..=1e10".into(),
        ),
        (
            "soft",
            "count",
            vec!["0", "18446744073709551616"],
            range("1", &u64max),
        ),
        (
            "soft",
            "rx_free_thresh",
            vec!["2", "8192"],
            range("4", "4096"),
        ),
        (
            "soft",
            "tx_rs_thresh",
            vec!["0", "8192"],
            range("4", "4096"),
        ),
        (
            "soft",
            "tx_free_thresh",
            vec!["3", "4097"],
            range("4", "4096"),
        ),
        ("soft", "bus_overhead", vec!["257", "-1"], range("0", "256")),
        ("soft", "mpw_segs", vec!["0", "63"], range("1", "62")),
        ("soft", "inline_mpw", vec!["989"], range("0", "988")),
        ("soft", "tx_comp", vec!["4097"], range("0", "4096")),
        ("soft", "panic_at", vec!["0"], range("1", &u64max)),
        ("null", "size", vec!["13", "9001"], range("14", "9000")),
        (
            "pcap:tx=/dev/null,",
            "snaplen",
            vec!["0", "262145"],
            range("1", "262144"),
        ),
        (
            "afpacket:iface=lo,",
            "block_size",
            vec!["4095", "4194305"],
            range("4096", "4194304"),
        ),
        (
            "afpacket:iface=lo,",
            "block_timeout",
            vec!["0", "1001"],
            range("1", "1000"),
        ),
        (
            "afxdp:iface=lo,",
            "queue",
            vec!["65536"],
            range("0", "65535"),
        ),
        (
            "afxdp:iface=lo,",
            "fill",
            vec!["63", "32769"],
            range("64", "32768"),
        ),
    ];
    for (driver, key, bad, expected) in table {
        for v in bad {
            let spec = if driver.ends_with(',') {
                format!("{driver}{key}={v}")
            } else {
                format!("{driver}:{key}={v}")
            };
            let r: Result<Port, PortError> = open(&spec, c());
            assert_eq!(
                r.unwrap_err().to_string(),
                format!("port spec '{spec}': key '{key}' = '{v}' is not {expected}"),
            );
        }
    }
    assert!(pool.is_full());
}

#[test]
fn runts_and_frames_over_the_mtu_from_the_wire_are_counted_with_their_reason() {
    let pool = pool(255, 2048);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
    let mut small = config.clone();
    small.mtu = 1000;
    let [mut w1, mut w2] = wire_pair(("soft:wire=w-runt", config), ("soft:wire=w-runt", small));
    let mut burst: Burst<8> = Burst::new();
    for len in [5usize, 60, 13, 14, 1018, 1019, 1500, 60] {
        burst
            .push(pool.alloc_from_slice(&vec![7u8; len]).unwrap())
            .unwrap();
    }
    send_all(w1.tx_queue(0).unwrap(), &mut burst);
    let mut rx: Burst<8> = Burst::new();
    let mut got = Vec::new();
    for _ in 0..100 {
        w2.rx_queue(0).unwrap().rx_burst(&mut rx);
        got.extend(rx.iter().map(|m| m.pkt_len()));
        rx.clear();
        if got.len() == 4 {
            break;
        }
    }
    assert_eq!(got, [60, 14, 1018, 60]);
    let s = w2.stats();
    assert_eq!((s.rx_packets, s.rx_errors), (4, 4));
    assert_eq!(xstat(&w2, "rx_runt_errors"), 2);
    assert_eq!(xstat(&w2, "rx_oversize_errors"), 2);
    drop((w1, w2));
    assert!(pool.is_full());
}

#[test]
fn a_wire_with_one_end_is_an_error_at_start_naming_it() {
    let pool = pool(255, 2048);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
    let mut alone = open("soft:wire=w-alone", config.clone()).unwrap();
    assert_eq!(
        alone.start().unwrap_err().to_string(),
        "soft: wire 'w-alone' has one end: no other port names it (cable two soft ports \
         with wire=w-alone)"
    );
    assert!(pool.is_full(), "a failed start gives every buffer back");
    // Its peer arrives: the wire has two ends and both start.
    let mut peer = open("soft:wire=w-alone", config).unwrap();
    alone.start().unwrap();
    peer.start().unwrap();
    drop(peer);
    // The peer left: a restart of the remaining end is refused again.
    alone.stop();
    assert!(alone.start().is_err());
    drop(alone);
    assert!(pool.is_full());
}

/// Buffers the queues of `ports` hold, by their gauges: `(posted, waiting)`.
fn gauges(ports: &[&Port]) -> (u64, u64) {
    let mut sums = (0, 0);
    for p in ports {
        let c = p.counters();
        sums.0 += c.rx.iter().map(|q| q.posted.get()).sum::<u64>();
        sums.1 += c.tx.iter().map(|q| q.waiting.get()).sum::<u64>();
    }
    sums
}

#[test]
fn posted_and_waiting_gauges_count_every_buffer_out_and_read_0_after_stop() {
    let pool = pool(1023, 2048);
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(128).nb_txd(128);
    let mut a = port("soft:tester=t-gauges,flows=16", config.clone());
    let mut b = port("soft:tester=t-gauges", config);
    // Started: every Rx descriptor is armed.
    assert_eq!(gauges(&[&a, &b]), (2 * 128, 0));
    let mut burst: Burst<32> = Burst::new();
    for _ in 0..50 {
        fwd(a.rx_queue(0).unwrap(), b.tx_queue(0).unwrap(), &mut burst);
        fwd(b.rx_queue(0).unwrap(), a.tx_queue(0).unwrap(), &mut burst);
        // Between bursts (the burst is empty) the queues hold every buffer
        // out of the pool.
        let (posted, waiting) = gauges(&[&a, &b]);
        assert_eq!(
            pool.available() as u64 + posted + waiting,
            1023,
            "posted {posted}, waiting {waiting}"
        );
    }
    let (posted, waiting) = gauges(&[&a, &b]);
    assert!(
        posted > 0 && waiting > 0,
        "posted {posted}, waiting {waiting}"
    );
    a.stop();
    b.stop();
    assert_eq!(gauges(&[&a, &b]), (0, 0));
    assert!(pool.is_full());
    drop((a, b));
    assert!(pool.is_full());
}

/// `rxbuf=frag` with the header pool drained by the application: the ring
/// stays armed (a posted descriptor holds a fragment, no header), a burst
/// delivers only what it has headers for and counts `rx_nombuf` when a
/// packet is left waiting; once headers come back every frame is delivered
/// intact, and every header and fragment goes home.
#[test]
fn rxbuf_frag_short_of_headers_waits_counts_and_loses_nothing() {
    const COUNT: u64 = 300;
    // More headers than the rings and a burst hold, as a pool must have.
    let headers = pool(255, 64);
    let config = PortConfig::new(Some(headers.clone())).nb_rxd(64).nb_txd(64);
    let name = "t-frag-short";
    let mut p = port(
        &format!("soft:tester={name},count={COUNT},flows=8,size=64,rxbuf=frag,fc=on"),
        config,
    );
    let t = tester_of(name);
    let mut held: Vec<Mbuf> = std::iter::from_fn(|| headers.alloc()).collect();
    assert_eq!(held.len(), 255);
    let mut burst: Burst<32> = Burst::new();
    // No header to be had: nothing delivered, the wait counted.
    for _ in 0..8 {
        assert_eq!(p.rx_queue(0).unwrap().rx_burst(&mut burst), 0);
    }
    assert!(p.stats().rx_nombuf > 0, "{:?}", p.stats());
    // Five headers back: a burst of 32 delivers five.
    held.truncate(held.len() - 5);
    assert_eq!(p.rx_queue(0).unwrap().rx_burst(&mut burst), 5);
    // All back: the rest arrives; every frame goes back to the tester,
    // which checks it.
    drop(held);
    for _ in 0..100_000 {
        if t.report().received == COUNT {
            break;
        }
        send_all(p.tx_queue(0).unwrap(), &mut burst);
        p.rx_queue(0).unwrap().rx_burst(&mut burst);
    }
    let r = t.report();
    assert_eq!((r.sent, r.received), (COUNT, COUNT), "{r}");
    assert_eq!((r.lost, r.corrupt, r.duplicates), (0, 0, 0), "{r}");
    let s = p.stats();
    assert_eq!((s.rx_packets, s.rx_errors, s.rx_missed), (COUNT, 0, 0));
    drop(p);
    assert!(headers.is_full());
}
