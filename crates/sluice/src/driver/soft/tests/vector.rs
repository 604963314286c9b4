//! The vector paths against the scalar ones: an Rx queue at each level
//! this CPU has and a scalar queue take the same descriptor write-backs
//! and the same bursts, and must leave the same mbufs, rings and counters
//! (armed with plain buffers, and with page-pool fragments);
//! a Tx queue at each level and a scalar one take the same bursts and
//! device steps, and must leave the same rings, frames and counters.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use proptest::prelude::*;

use super::super::device::{
    Bus, EngineCell, PortEngines, QueueEngine, RxEngine, RxEngineParts, RxParams, RxSource,
};
use super::super::driver::rx::{RxQueueParts, SoftRx};
use super::super::driver::rx_frags::RxFrags;
use super::super::driver::tx::{TxMode, TxParams};
use super::super::driver::vector::{self, RxTemplate, VectorLevel};
use super::super::frame::RssHasher;
use super::super::hw::desc::rx;
use super::super::hw::regs::RxRegs;
use super::super::wqe::seg_bytes;
use super::wqe::{Rig, params, udp4};
use crate::driver::open;
use crate::mbuf::{Burst, Mbuf, MbufPool, RearmData, TxOffload, ol};
use crate::mempool::HugepagePolicy;
use crate::pagepool::{BlockProvider, FragLayout, ProviderConfig};
use crate::port::{PortConfig, PortCounters, RxQueue, TxQueue};
use crate::test_support::{TestPool, assert_pool_full};

/// One written-back descriptor.
#[derive(Debug, Clone, Copy)]
struct WriteBack {
    rss_type: u64,
    ptype: u64,
    hash: u32,
    /// Status and error bits (DD added when written).
    bits: u64,
    len: u16,
    vlan: u16,
}

impl WriteBack {
    fn words(self) -> (u64, u64) {
        (
            rx::wb0(self.rss_type, self.ptype, self.hash),
            rx::wb1(self.bits | rx::DD, self.len, self.vlan),
        )
    }
}

/// What happens next: the device writes back descriptors, or the driver
/// polls a burst of at most so many.
#[derive(Debug, Clone)]
enum Step {
    Device(Vec<WriteBack>),
    Burst(usize),
}

fn write_back() -> impl Strategy<Value = WriteBack> {
    let status = prop::sample::select(vec![
        0,
        rx::EOP,
        rx::EOP | rx::IPCS,
        rx::EOP | rx::L4CS,
        rx::EOP | rx::IPCS | rx::L4CS,
        rx::EOP | rx::IPCS | rx::L4CS | rx::VP,
        rx::VP,
    ]);
    // Mostly clean; checksum errors often; dropping errors now and then.
    let errors = prop::sample::select(vec![
        0,
        0,
        0,
        0,
        rx::ERR_IP,
        rx::ERR_L4,
        rx::ERR_IP | rx::ERR_L4,
        rx::ERR_RUNT,
        rx::ERR_OVERSIZE,
    ]);
    (
        0u64..6,
        0u64..0x1000,
        any::<u32>(),
        status,
        errors,
        0u16..=2048,
        any::<u16>(),
    )
        .prop_map(
            |(rss_type, ptype, hash, status, errors, len, vlan)| WriteBack {
                rss_type,
                ptype,
                hash,
                bits: status | errors,
                len,
                vlan,
            },
        )
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        prop::collection::vec(write_back(), 0..40).prop_map(Step::Device),
        (1usize..=64).prop_map(Step::Burst),
    ];
    prop::collection::vec(step, 1..40)
}

/// An Rx queue with no device of its own: the test writes back its
/// descriptors.
struct Queue {
    rx: SoftRx,
    regs: Arc<RxRegs>,
    counters: Arc<PortCounters>,
    pool: MbufPool,
    /// With fragments: their provider, and the address of its region's
    /// start (armed addresses are compared as offsets in it).
    frags: Option<(BlockProvider, u64)>,
    /// The next descriptor the test writes back.
    head: u32,
}

impl Queue {
    fn new(level: VectorLevel, nb: usize, free_thresh: u32, rss_hash: bool, frags: bool) -> Queue {
        let pool = TestPool::new(2 * nb as u32 + 63).build();
        let provider = frags.then(|| {
            let provider = BlockProvider::new(ProviderConfig {
                name: "vector-frags".into(),
                size: 4 << 20,
                hugepages: HugepagePolicy::Never,
            })
            .unwrap();
            // The region's start: a block's address less its offset.
            let block = provider.alloc(0).unwrap();
            let base = block.as_ptr() as u64 - block.iova();
            drop(block);
            (provider, base)
        });
        let rx_frags = provider.as_ref().map(|(p, _)| {
            RxFrags::new(p, "soft:vector-frags", 0, FragLayout::for_mtu(1500)).unwrap()
        });
        let regs = RxRegs::new(nb);
        let counters = Arc::new(PortCounters::new(1, 0, false));
        let engine = RxEngine::new(RxEngineParts {
            regs: Arc::clone(&regs),
            source: RxSource::Idle,
            params: RxParams {
                buf_size: pool.data_room() as usize,
                max_frame: 1518,
                check_ip: true,
                check_l4: true,
                fc: true,
            },
            hasher: Arc::new(RssHasher::default_key()),
            bus: Bus::new(&counters.xstats, 24),
            counters: Arc::clone(&counters),
            queue: 0,
        });
        let engines = Arc::new(PortEngines {
            rx: vec![EngineCell::new(engine)].into_boxed_slice(),
            tx: Vec::new().into_boxed_slice(),
            counters: Arc::clone(&counters),
        });
        let mut rx = SoftRx::new(RxQueueParts {
            regs: Arc::clone(&regs),
            pool: pool.clone(),
            port_id: 3,
            free_thresh,
            rss_hash,
            engine: QueueEngine::new(engines, 0, false),
            counters: Arc::clone(&counters),
            doorbell_cost: 28,
            frags: rx_frags,
            mtu: 1500,
            vector: level,
        });
        rx.start().unwrap();
        Queue {
            rx,
            regs,
            counters,
            pool,
            frags: provider,
            head: 0,
        }
    }

    fn base(&self) -> u64 {
        self.pool.mempool().region().base().as_ptr() as u64
    }

    /// Writes back as many of `wbs` as the device holds descriptors for.
    fn device(&mut self, wbs: &[WriteBack]) {
        for wb in wbs {
            if self.head == self.regs.tail.load(Ordering::Acquire) {
                return;
            }
            let d = self.regs.descs.get(self.head);
            let (q0, q1) = wb.words();
            d.q0.store(q0, Ordering::Relaxed);
            d.q1.store(q1, Ordering::Release);
            self.head = self.head.wrapping_add(1);
        }
    }

    /// Every descriptor's words, buffer addresses made relative to the
    /// pool (or the fragments' provider).
    fn ring(&self) -> Vec<(u64, u64)> {
        let base = match &self.frags {
            Some((_, base)) => *base,
            None => self.base(),
        };
        self.regs
            .descs
            .as_slice()
            .iter()
            .map(|d| {
                let (q0, q1) = (d.q0.load(Ordering::Relaxed), d.q1.load(Ordering::Relaxed));
                // Armed: a buffer address; written back: the device's word.
                let q0 = if q1 & rx::DD == 0 {
                    q0.wrapping_sub(base)
                } else {
                    q0
                };
                (q0, q1)
            })
            .collect()
    }

    /// A delivered mbuf as its offset in the pool, its buffer's offset in
    /// the pool (or the fragments' provider), its Rx words, and the page
    /// target and buffer length beside them.
    fn delivered(&self, m: &Mbuf) -> (u64, u64, [u8; 32], [u8; 8]) {
        let p = m.as_header_ptr().cast::<u8>();
        let mut words = [0u8; 32];
        let mut tail = [0u8; 8];
        // SAFETY: the header is 128 bytes of a live mbuf we hold.
        unsafe {
            words.copy_from_slice(std::slice::from_raw_parts(p.add(16), 32));
            tail.copy_from_slice(std::slice::from_raw_parts(p.add(48), 8));
        }
        let buf_base = match &self.frags {
            Some((_, base)) => *base,
            None => self.base(),
        };
        let buf = m.header().buf_addr as u64 - buf_base;
        (p as u64 - self.base(), buf, words, tail)
    }
}

/// Runs `steps` on a scalar queue and one at `level`, comparing after
/// every step.
fn same_as_scalar(
    level: VectorLevel,
    nb: usize,
    free_thresh: u32,
    rss_hash: bool,
    frags: bool,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut scalar = Queue::new(VectorLevel::Scalar, nb, free_thresh, rss_hash, frags);
    let mut vec = Queue::new(level, nb, free_thresh, rss_hash, frags);
    prop_assert_eq!(scalar.ring(), vec.ring(), "after start");
    let mut a: Burst<64> = Burst::new();
    let mut b: Burst<64> = Burst::new();
    for (k, step) in steps.iter().enumerate() {
        match step {
            Step::Device(wbs) => {
                scalar.device(wbs);
                vec.device(wbs);
            }
            Step::Burst(max) => {
                let na = scalar.rx.rx_burst(a.capped(*max));
                let nb = vec.rx.rx_burst(b.capped(*max));
                prop_assert_eq!(na, nb, "step {}: packets", k);
                for (ma, mb) in a.iter().zip(b.iter()) {
                    prop_assert_eq!(scalar.delivered(ma), vec.delivered(mb), "step {}", k);
                }
                a.clear();
                b.clear();
            }
        }
        prop_assert_eq!(scalar.ring(), vec.ring(), "step {}: ring", k);
        prop_assert_eq!(
            scalar.counters.xstats_snapshot(),
            vec.counters.xstats_snapshot(),
            "step {}: counters",
            k
        );
        prop_assert_eq!(scalar.pool.available(), vec.pool.available());
    }
    scalar.rx.stop();
    vec.rx.stop();
    drop((scalar.rx, vec.rx));
    assert_pool_full(&scalar.pool);
    assert_pool_full(&vec.pool);
    for (provider, _) in [scalar.frags, vec.frags].into_iter().flatten() {
        // Every fragment went home, and the page pool with the queue.
        assert!(provider.is_full(), "{:?}", provider.stats());
    }
    Ok(())
}

/// The levels this CPU has beyond scalar.
fn vector_levels() -> Vec<VectorLevel> {
    VectorLevel::ALL[1..]
        .iter()
        .copied()
        .filter(|l| l.available())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_level_leaves_the_scalar_paths_mbufs_rings_and_counters(
        steps in steps(),
        rss_hash in any::<bool>(),
        small_ring in any::<bool>(),
        free_thresh in prop::sample::select(vec![4u32, 8, 32]),
        frags in any::<bool>(),
    ) {
        let nb = if small_ring { 32 } else { 64 };
        for level in vector_levels() {
            same_as_scalar(level, nb, free_thresh, rss_hash, frags, &steps)?;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn each_levels_group_writes_what_the_one_descriptor_computation_does(
        wbs in prop::collection::vec(write_back(), 8),
        rss_hash in any::<bool>(),
        port in any::<u16>(),
    ) {
        let pool = TestPool::new(15).build();
        let t = RxTemplate {
            rearm: RearmData { data_off: 128, refcnt: 1, nb_segs: 1, port }.word(),
            rss_hash,
            ol_flags: 0,
        };
        // Groups take only clean descriptors.
        let wbs: Vec<WriteBack> = wbs
            .into_iter()
            .map(|w| WriteBack { bits: w.bits & !rx::ERR_DROP, ..w })
            .collect();
        let ring = RxRegs::new(8);
        for (k, w) in wbs.iter().enumerate() {
            let (q0, q1) = w.words();
            ring.descs.get(k as u32).q0.store(q0, Ordering::Relaxed);
            ring.descs.get(k as u32).q1.store(q1, Ordering::Relaxed);
        }
        let want: Vec<[u64; 4]> = wbs
            .iter()
            .map(|w| {
                let (q0, q1) = w.words();
                vector::rx_words(q0, q1, t)
            })
            .collect();
        for level in vector_levels() {
            let mbufs: Vec<Mbuf> = (0..8).map(|_| pool.alloc().unwrap()).collect();
            let elems: Vec<_> = mbufs.iter().map(|m| crate::mempool::Elem::from_ptr(
                std::ptr::NonNull::new(m.as_header_ptr().cast()).unwrap())).collect();
            let d = ring.descs.as_slice().as_ptr();
            let group = |at: usize| {
                // SAFETY: the level is available; descriptors `at..` and
                // their slots exist, done and clean, not written meanwhile;
                // the mbufs are ours, unshared and plain.
                unsafe {
                    match level {
                        VectorLevel::Sse41 => vector::rx_group_sse41(d.add(at), elems[at..].as_ptr(), t),
                        VectorLevel::Avx2 => vector::rx_group_avx2(d.add(at), elems[at..].as_ptr(), t),
                        VectorLevel::Avx512 => vector::rx_group_avx512(d.add(at), elems[at..].as_ptr(), t),
                        VectorLevel::Scalar => unreachable!(),
                    }
                }
            };
            if level == VectorLevel::Avx512 {
                group(0);
            } else {
                group(0);
                group(4);
            }
            for (k, m) in mbufs.iter().enumerate() {
                let p = m.as_header_ptr().cast::<u64>();
                // SAFETY: the header's words 2..6 (bytes 16..48) of a live
                // mbuf we hold.
                let got: [u64; 4] = unsafe { [2, 3, 4, 5].map(|w| p.add(w).read()) };
                prop_assert_eq!(got, want[k], "{} descriptor {}", level, k);
            }
            drop(mbufs);
        }
        assert_pool_full(&pool);
    }
}

#[test]
fn the_one_descriptor_computation_is_the_scalar_paths() {
    let t = RxTemplate {
        rearm: RearmData {
            data_off: 128,
            refcnt: 1,
            nb_segs: 1,
            port: 7,
        }
        .word(),
        rss_hash: true,
        ol_flags: 0,
    };
    let q0 = rx::wb0(rx::RSS_IPV4_L4, 0x211, 0xdead_beef);
    let q1 = rx::wb1(
        rx::DD | rx::EOP | rx::IPCS | rx::L4CS | rx::VP | rx::ERR_L4,
        1514,
        0x0123,
    );
    let [rearm, flags, w2, w3] = vector::rx_words(q0, q1, t);
    assert_eq!(rearm, t.rearm);
    assert_eq!(
        flags,
        ol::RX_IP_CKSUM_GOOD | ol::RX_L4_CKSUM_BAD | ol::RX_VLAN | ol::RX_RSS_HASH
    );
    // Packet type 0x211, packet length 1514.
    assert_eq!(w2, 0x211 | 1514 << 32);
    // Data length 1514, VLAN 0x0123, hash.
    assert_eq!(w3, 1514 | 0x0123 << 16 | 0xdead_beef << 32);
    // No hash without the offload, nor without an RSS type.
    let off = RxTemplate {
        rss_hash: false,
        ..t
    };
    assert_eq!(vector::rx_words(q0, q1, off)[3], 1514 | 0x0123 << 16);
    let untyped = rx::wb0(0, 0x211, 0xdead_beef);
    let [_, flags, _, w3] = vector::rx_words(untyped, q1, t);
    assert_eq!(flags & ol::RX_RSS_HASH, 0);
    assert_eq!(w3 >> 32, 0);
}

#[test]
fn vector_key_takes_each_level_the_cpu_has_and_names_what_it_lacks() {
    let pool = TestPool::new(511).build();
    for (value, level) in [
        ("off", VectorLevel::Scalar),
        ("sse", VectorLevel::Sse41),
        ("avx2", VectorLevel::Avx2),
        ("avx512", VectorLevel::Avx512),
    ] {
        let spec =
            format!("soft:gen=udp,flows=4,count=64,tester=vector_key_{value},vector={value}");
        let r = open(
            &spec,
            PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64),
        );
        if level.available() {
            let mut p = r.unwrap_or_else(|e| panic!("{spec}: {e}"));
            p.start().unwrap();
            // The port receives what its tester sends at this level.
            let mut b: Burst<64> = Burst::new();
            let mut got = 0;
            for _ in 0..1000 {
                got += p.rx_queue(0).unwrap().rx_burst(&mut b);
                b.clear();
                if got == 64 {
                    break;
                }
            }
            assert_eq!(got, 64, "{spec}");
            p.stop();
        } else {
            let e = r
                .err()
                .unwrap_or_else(|| panic!("{spec} opened"))
                .to_string();
            assert!(
                e.contains(&format!("this CPU has no {}", level.name()))
                    && e.contains(VectorLevel::best().name()),
                "{e}"
            );
        }
    }
    let e = open(
        "soft:tester=vector_key_bad,vector=neon",
        PortConfig::new(Some(pool.clone())),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("vector") && e.contains("auto, off, sse, avx2, avx512"),
        "{e}"
    );
    assert_pool_full(&pool);
}

/// One packet of a Tx burst.
#[derive(Debug, Clone, Copy)]
struct TxPacket {
    len: usize,
    /// 0, IPv4 and UDP checksums, or a VLAN tag to insert.
    flags: u64,
    /// Cut into two segments at this byte (0: one segment).
    cut: usize,
}

fn tx_packet() -> impl Strategy<Value = TxPacket> {
    let flags = prop::sample::select(vec![
        0,
        0,
        0,
        ol::TX_IP_CKSUM | ol::TX_UDP_CKSUM | ol::TX_IPV4,
        ol::TX_VLAN,
    ]);
    let cut = prop::sample::select(vec![0usize, 0, 0, 0, 0, 0, 0, 30]);
    (42usize..=300, flags, cut).prop_map(|(len, flags, cut)| TxPacket { len, flags, cut })
}

/// What the Tx test does next: a burst, or device steps.
#[derive(Debug, Clone)]
enum TxStep {
    Burst(Vec<TxPacket>),
    Device(usize),
}

fn tx_steps() -> impl Strategy<Value = Vec<TxStep>> {
    let step = prop_oneof![
        prop::collection::vec(tx_packet(), 0..48).prop_map(TxStep::Burst),
        (0usize..4).prop_map(TxStep::Device),
    ];
    prop::collection::vec(step, 1..40)
}

/// A Tx queue by hand (the device stepped by the test), with its pool.
struct TxSide {
    rig: Rig,
    pool: MbufPool,
}

impl TxSide {
    fn new(params: TxParams) -> TxSide {
        TxSide {
            rig: Rig::new(params),
            pool: TestPool::new(255).build(),
        }
    }

    fn packet(&self, p: TxPacket, seed: u8) -> Mbuf {
        let frame = udp4(p.len, seed);
        let mut m = if p.cut == 0 {
            self.pool.alloc_from_slice(&frame).unwrap()
        } else {
            let mut m = self.pool.alloc_from_slice(&frame[..p.cut]).unwrap();
            m.chain(self.pool.alloc_from_slice(&frame[p.cut..]).unwrap())
                .map_err(|(e, _)| e)
                .unwrap();
            m
        };
        m.set_ol_flags(p.flags).unwrap();
        m.set_vlan_tci(0x0abc).unwrap();
        m.set_tx_offload(TxOffload {
            l2_len: 14,
            l3_len: 20,
            ..TxOffload::default()
        })
        .unwrap();
        m
    }

    /// Every ring segment, a data segment's address made relative to the
    /// pool (any big-endian word at bytes 8..16 that falls in the pool's
    /// memory).
    fn ring(&self) -> Vec<[u8; 16]> {
        let base = self.pool.mempool().region().base().as_ptr() as u64;
        let len = self.pool.mempool().region().len() as u64;
        self.rig
            .regs
            .segs
            .as_slice()
            .iter()
            .map(|d| {
                let mut b = seg_bytes(d);
                let addr = u64::from_be_bytes(b[8..].try_into().unwrap());
                if addr.wrapping_sub(base) < len {
                    b[8..].copy_from_slice(&(addr - base).to_be_bytes());
                }
                b
            })
            .collect()
    }
}

/// Every counter but the device's cycles (a time).
fn counts(c: &PortCounters) -> Vec<(String, u64)> {
    let mut all = c.xstats_snapshot();
    all.retain(|(name, _)| name != "device_cycles");
    all
}

/// Runs `steps` on a scalar Tx queue and one at `level`, comparing after
/// every step.
fn tx_same_as_scalar(
    level: VectorLevel,
    params: TxParams,
    steps: &[TxStep],
) -> Result<(), TestCaseError> {
    let mut scalar = TxSide::new(params);
    let mut vec = TxSide::new(TxParams {
        vector: level,
        ..params
    });
    for (k, step) in steps.iter().enumerate() {
        match step {
            TxStep::Burst(packets) => {
                let mut a: Burst<64> = Burst::new();
                let mut b: Burst<64> = Burst::new();
                for (seed, p) in packets.iter().enumerate() {
                    a.push(scalar.packet(*p, seed as u8)).unwrap();
                    b.push(vec.packet(*p, seed as u8)).unwrap();
                }
                let na = scalar.rig.tx.tx_burst(&mut a);
                let nb = vec.rig.tx.tx_burst(&mut b);
                prop_assert_eq!(na, nb, "step {}: packets taken", k);
            }
            TxStep::Device(steps) => {
                for _ in 0..*steps {
                    prop_assert_eq!(scalar.rig.step(), vec.rig.step(), "step {}", k);
                }
                prop_assert_eq!(scalar.rig.captured(), vec.rig.captured(), "step {}", k);
            }
        }
        prop_assert_eq!(scalar.ring(), vec.ring(), "step {}: ring", k);
        prop_assert_eq!(
            counts(&scalar.rig.counters),
            counts(&vec.rig.counters),
            "step {}: counters",
            k
        );
        prop_assert_eq!(scalar.pool.available(), vec.pool.available(), "step {}", k);
    }
    for side in [scalar, vec] {
        let TxSide { rig, pool } = side;
        drop(rig);
        assert_pool_full(&pool);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_level_leaves_the_scalar_tx_paths_rings_frames_and_counters(
        steps in tx_steps(),
        inline_mpw in prop::sample::select(vec![0u32, 0, 64, 200]),
        mpw_segs in prop::sample::select(vec![6u32, 62]),
        fast_free in any::<bool>(),
    ) {
        let params = TxParams {
            fast_free,
            multi_seg: !fast_free,
            inline_mpw: inline_mpw.min(if mpw_segs < 62 { 0 } else { inline_mpw }),
            mpw_segs,
            ..params(TxMode::Mpwqe)
        };
        for level in vector_levels() {
            tx_same_as_scalar(level, params, &steps)?;
        }
    }
}
