//! The Tx WQE formats end to end: byte-exact rings against hand-written
//! bytes, open MPWQEs (broken by an offload change, TSO and chains
//! falling back and the MPWQE resuming), the device's checks of
//! malformed WQEs, and tester traffic through both Tx modes.
//!
//! Most tests drive a Tx queue and its engine by hand (a [`Rig`]: the
//! device does not run inside `tx_burst`, a capture sink keeps every frame
//! it sends), so the ring can be read between the driver's writes and the
//! device's execution.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::driver::open;
use crate::driver::soft::bus::BusBytes;
use crate::driver::soft::device::tx_engine::{TxEngine, TxEngineParams};
use crate::driver::soft::device::{Bus, EngineCell, PortEngines, QueueEngine, TxSink};
use crate::driver::soft::driver::tx::{SoftTx, TxMode, TxParams, TxQueueParts};
use crate::driver::soft::driver::vector::VectorLevel;
use crate::driver::soft::frame::{parse, rx_checksums, tx_checksums, tx_checksums_at};
use crate::driver::soft::hw::regs::{TxRegs, cq_size};
use crate::driver::soft::wqe::{
    self, CE, CQE_ERR, CqeInfo, Cseg, Eseg, INLINE, OP_MPW, OP_SEND, OP_TSO, OPMOD_EMPW,
    SEGS_PER_BB, TUN_VXLAN, blocks, cs, cseg, dseg, seg_bytes, syndrome, write_words,
};
use crate::mbuf::{Burst, BurstSlice, Mbuf, MbufPool, TxOffload, ol};
use crate::port::{Offloads, Port, PortConfig, PortCounters, TxQueue};
use crate::test_support::TestPool;
use crate::tester;

fn pool(size: u32) -> MbufPool {
    TestPool::new(size).data_room(2048).build()
}

/// Every Tx offload flag the soft port can honour.
const ALL_FLAGS: u64 = ol::TX_IP_CKSUM
    | ol::TX_UDP_CKSUM
    | ol::TX_VLAN
    | ol::TX_TUNNEL_VXLAN
    | ol::TX_OUTER_IP_CKSUM
    | ol::TX_TCP_SEG;

pub(super) fn params(mode: TxMode) -> TxParams {
    TxParams {
        rs_thresh: 4,
        free_thresh: 4,
        fast_free: false,
        multi_seg: true,
        ol_mask: ALL_FLAGS,
        zc_free: false,
        mode,
        mpw_segs: 62,
        inline_mpw: 0,
        comp_wqes: 0,
        doorbell_bytes: 28,
        vector: VectorLevel::Scalar,
    }
}

/// A Tx queue of 64 blocks and its engine (queue 0), the device stepped by
/// hand, frames captured.
pub(super) struct Rig {
    pub(super) tx: SoftTx,
    pub(super) regs: Arc<TxRegs>,
    engines: Arc<PortEngines>,
    pub(super) counters: Arc<PortCounters>,
}

impl Rig {
    pub(super) fn new(params: TxParams) -> Rig {
        let counters = Arc::new(PortCounters::new(1, 1, false));
        let regs = TxRegs::new(64, 64);
        let engines = engines(&regs, &counters);
        let mut tx = SoftTx::new(TxQueueParts {
            regs: Arc::clone(&regs),
            nb_txd: 64,
            params,
            engine: QueueEngine::new(Arc::clone(&engines), 0, false),
            counters: Arc::clone(&counters),
        });
        tx.start().unwrap();
        Rig {
            tx,
            regs,
            engines,
            counters,
        }
    }

    pub(super) fn step(&self) -> usize {
        self.engines.tx[0].with(|e| e.step()).unwrap()
    }

    pub(super) fn captured(&self) -> Vec<Vec<u8>> {
        self.engines.tx[0].with(|e| e.take_captured()).unwrap()
    }

    /// Block `b`'s 64 bytes.
    fn block(&self, b: u32) -> Vec<u8> {
        (0..SEGS_PER_BB)
            .flat_map(|s| seg_bytes(self.regs.segs.get(b * SEGS_PER_BB + s)))
            .collect()
    }

    /// CQE `i`'s last 8 bytes.
    fn cqe(&self, i: u32) -> Vec<u8> {
        self.regs.cq.get(i).bytes()[56..].to_vec()
    }

    fn xstat(&self, name: &str) -> u64 {
        self.counters.xstats.get(name).unwrap()
    }

    /// The WQEs from block 0 to the tail: (opcode, ds, flags).
    fn wqes(&self) -> Vec<(u8, u32, u8)> {
        let tail = self.regs.tail.load(Ordering::Acquire);
        let mut b = 0;
        let mut out = Vec::new();
        while b != tail {
            let c = Cseg::parse(&seg_bytes(self.regs.segs.get(b * SEGS_PER_BB)));
            assert_eq!(c.wqe_index, b as u16);
            out.push((c.opcode, c.ds, c.flags));
            b += blocks(c.ds);
        }
        out
    }
}

/// Engines of one Tx queue (queue 0) over `regs`, sending into a capture.
fn engines(regs: &Arc<TxRegs>, counters: &PortCounters) -> Arc<PortEngines> {
    let x = &counters.xstats;
    let engine = TxEngine::new(
        Arc::clone(regs),
        TxSink::Capture(Vec::new()),
        TxEngineParams {
            max_frame: 1518,
            sqn: 0,
        },
        Bus::new(x, 24),
        x,
    );
    Arc::new(PortEngines {
        rx: Box::new([]),
        tx: vec![EngineCell::new(engine)].into_boxed_slice(),
        counters: Arc::new(PortCounters::new(0, 1, false)),
    })
}

/// Ethernet / IPv4 / UDP, `len` bytes (at least 42), payload bytes from
/// `seed` on, valid checksums.
pub(super) fn udp4(len: usize, seed: u8) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    f[18..20].copy_from_slice(&0x1234u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&1024u16.to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8);
    }
    tx_checksums(&mut f, true, true, false);
    f
}

/// `udp4` frame `frame` with its IPv4 and UDP checksums zeroed, for the
/// device to fill from the eseg's flags.
fn zeroed_checksums(frame: &[u8]) -> Vec<u8> {
    let mut zeroed = frame.to_vec();
    zeroed[24..26].fill(0);
    zeroed[40..42].fill(0);
    zeroed
}

/// Ethernet / IPv4 / TCP (PSH, ACK, FIN), 54 bytes of header, then
/// `payload` bytes.
fn tcp4(payload: usize) -> Vec<u8> {
    let mut f = vec![0u8; 54 + payload];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
    f[18..20].copy_from_slice(&0x0100u16.to_be_bytes());
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&5000u16.to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    f[38..42].copy_from_slice(&0x1000_0000u32.to_be_bytes());
    f[46] = 5 << 4;
    f[47] = 0x19;
    f[48..50].copy_from_slice(&0xffffu16.to_be_bytes());
    for (i, b) in f[54..].iter_mut().enumerate() {
        *b = (i * 7) as u8;
    }
    f
}

/// `f` with an 802.1Q tag `tci` after the MAC addresses.
fn tagged(f: &[u8], tci: u16) -> Vec<u8> {
    let mut v = f[..12].to_vec();
    v.extend_from_slice(&[0x81, 0x00]);
    v.extend_from_slice(&tci.to_be_bytes());
    v.extend_from_slice(&f[12..]);
    v
}

fn mbuf(pool: &MbufPool, f: &[u8], flags: u64) -> Mbuf {
    let mut m = pool.alloc_from_slice(f).unwrap();
    m.set_ol_flags(flags).unwrap();
    m
}

/// A chain of `f` cut at `at`.
fn chain(pool: &MbufPool, f: &[u8], at: usize) -> Mbuf {
    let mut m = pool.alloc_from_slice(&f[..at]).unwrap();
    m.chain(pool.alloc_from_slice(&f[at..]).unwrap())
        .map_err(|(e, _)| e)
        .unwrap();
    m
}

#[test]
fn a_regular_wqe_is_one_block_with_the_header_inlined_byte_for_byte() {
    let pool = pool(63);
    let mut rig = Rig::new(params(TxMode::Wqe));
    let f = udp4(64, 1);
    let z = zeroed_checksums(&f);
    let mut burst: Burst<4> = Burst::new();
    let flags = ol::TX_IPV4 | ol::TX_IP_CKSUM | ol::TX_UDP_CKSUM;
    burst.push(mbuf(&pool, &z, flags)).unwrap();
    let addr = burst[0].data().as_ptr() as u64;
    for _ in 0..3 {
        burst.push(mbuf(&pool, &f, 0)).unwrap();
    }
    assert_eq!(rig.tx.tx_burst(&mut burst), 4);
    let mut want = vec![
        // cseg: opmod 0, WQE index 0, SEND; queue 0, ds 4; no completion
        0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 0x00, 0, 0, 0, 0,
        // eseg: no tunnel; L3 + UDP checksums; no MSS, no VLAN; 18 bytes
        // inlined, the first two here
        0, 0, 0, 0, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, z[0], z[1],
    ];
    // The next 16 header bytes.
    want.extend_from_slice(&z[2..18]);
    // dseg: 46 bytes, key 0, from byte 18 of the buffer.
    want.extend_from_slice(&[0, 0, 0, 46, 0, 0, 0, 0]);
    want.extend_from_slice(&(addr + 18).to_be_bytes());
    assert_eq!(rig.block(0), want);
    // Blocks 1..3: plain packets; the 4th asks the completion (every 4th
    // packet, tx_rs_thresh 4).
    let b1 = rig.block(1);
    assert_eq!(
        b1[..16],
        [0, 0, 1, 0x0a, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(
        b1[16..32],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 18, f[0], f[1]]
    );
    assert_eq!(rig.block(2)[11], 0);
    assert_eq!(rig.block(3)[..12], [0, 0, 3, 0x0a, 0, 0, 0, 4, 0, 0, 0, CE]);
    assert_eq!(
        rig.regs.tail.load(Ordering::Relaxed),
        4,
        "one doorbell: 4 blocks"
    );
    assert_eq!(rig.step(), 4);
    let frames = rig.captured();
    assert_eq!(frames, vec![f.clone(), f.clone(), f.clone(), f.clone()]);
    // CQE 0: syndrome 0, queue 0, WQE counter 3, opcode 0, owner 0.
    assert_eq!(rig.cqe(0), [0, 0, 0, 0, 0, 3, 0, 0x00]);
    assert_eq!(
        (rig.xstat("tx_wqe_pkts"), rig.xstat("tx_inline_bytes")),
        (4, 72)
    );
    assert_eq!(rig.xstat("tx_mpwqe_pkts"), 0);
    assert_eq!(rig.tx.tx_done_cleanup(usize::MAX), 4);
    drop(rig);
    assert!(pool.is_full());
}

#[test]
fn an_mpwqe_shares_its_eseg_and_inlines_small_packets_byte_for_byte() {
    let pool = pool(63);
    let mut tx_params = params(TxMode::Mpwqe);
    tx_params.inline_mpw = 32;
    tx_params.comp_wqes = 1;
    let mut rig = Rig::new(tx_params);
    let a = udp4(60, 10);
    let b: Vec<u8> = (100..130).collect();
    let c = udp4(70, 20);
    let mut burst: Burst<4> = Burst::new();
    for f in [&a, &b, &c] {
        let mut m = mbuf(&pool, f, ol::TX_VLAN);
        m.set_vlan_tci(0x0123).unwrap();
        burst.push(m).unwrap();
    }
    let (pa, pc) = (
        burst[0].data().as_ptr() as u64,
        burst[2].data().as_ptr() as u64,
    );
    assert_eq!(rig.tx.tx_burst(&mut burst), 3);
    let mut want = vec![
        // cseg: enhanced MPW, index 0, queue 0, ds 7, completion asked
        0x02, 0x00, 0x00, 0x29, 0x00, 0x00, 0x00, 0x07, 0, 0, 0, 0x08, 0, 0, 0, 0,
        // eseg: VLAN insert, TCI 0x0123, no inline header
        0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x00, 0x01, 0x23, 0, 0, 0, 0,
        // a: 60 bytes pointed to
        0, 0, 0, 60, 0, 0, 0, 0,
    ];
    want.extend_from_slice(&pa.to_be_bytes());
    // b: 30 bytes inlined, three segments (4 + 30 bytes, zero padding).
    want.extend_from_slice(&[0x80, 0, 0, 30]);
    want.extend_from_slice(&b);
    want.extend_from_slice(&[0; 14]);
    // c: 70 bytes pointed to.
    want.extend_from_slice(&[0, 0, 0, 70, 0, 0, 0, 0]);
    want.extend_from_slice(&pc.to_be_bytes());
    // The rest of the second block is not part of the WQE (ds 7).
    want.extend_from_slice(&[0; 16]);
    let mut got = rig.block(0);
    got.extend(rig.block(1));
    assert_eq!(got, want);
    assert_eq!(rig.regs.tail.load(Ordering::Relaxed), 2);
    assert_eq!(rig.step(), 3);
    assert_eq!(
        rig.captured(),
        vec![tagged(&a, 0x0123), tagged(&b, 0x0123), tagged(&c, 0x0123)]
    );
    assert_eq!(rig.cqe(0), [0, 0, 0, 0, 0, 0, 0, 0x00]);
    assert_eq!(
        (
            rig.xstat("tx_mpwqe_blks"),
            rig.xstat("tx_mpwqe_pkts"),
            rig.xstat("tx_inline_bytes")
        ),
        (2, 3, 30)
    );
    // The next burst's WQE starts at block 2.
    burst.push(mbuf(&pool, &a, 0)).unwrap();
    assert_eq!(rig.tx.tx_burst(&mut burst), 1);
    assert_eq!(rig.block(2)[..8], [0x02, 0, 2, 0x29, 0, 0, 0, 3]);
    assert_eq!(rig.step(), 1);
    assert_eq!(rig.captured(), vec![a.clone()]);
    assert_eq!(rig.cqe(1), [0, 0, 0, 0, 0, 2, 0, 0x00]);
    // Four packets were sent: one batch of tx_rs_thresh 4 is freed.
    assert_eq!(rig.tx.tx_done_cleanup(usize::MAX), 4);
    drop(rig);
    assert!(pool.is_full());
}

#[test]
fn tso_and_chained_packets_get_regular_wqes_byte_for_byte_and_tso_is_segmented() {
    let pool = pool(63);
    let mut rig = Rig::new(params(TxMode::Mpwqe));
    let t = tcp4(2446);
    let mut tso = chain(&pool, &t, 1000);
    tso.set_ol_flags(ol::TX_TCP_SEG | ol::TX_IPV4 | ol::TX_IP_CKSUM | ol::TX_TCP_CKSUM)
        .unwrap();
    tso.set_tx_offload(TxOffload {
        l2_len: 14,
        l3_len: 20,
        l4_len: 20,
        tso_segsz: 1000,
        ..Default::default()
    })
    .unwrap();
    let u = udp4(60, 3);
    let c = chain(&pool, &u, 20);
    let seg_addrs = |m: &Mbuf| -> Vec<u64> { m.segments().map(|s| s.as_ptr() as u64).collect() };
    let (ta, ca) = (seg_addrs(&tso), seg_addrs(&c));
    let mut burst: Burst<4> = Burst::new();
    burst.push(tso).unwrap();
    burst.push(c).unwrap();
    assert_eq!(rig.tx.tx_burst(&mut burst), 2);
    let mut want = vec![
        // cseg: TSO, index 0, ds 8 (cseg, eseg, 4 header segments, 2 dsegs)
        0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x08, 0, 0, 0, 0, 0, 0, 0, 0,
        // eseg: L3 + TCP checksums, MSS 1000, the 54-byte header inlined
        0, 0, 0, 0, 0x05, 0x00, 0x03, 0xe8, 0, 0, 0, 0, 0x00, 0x36, t[0], t[1],
    ];
    want.extend_from_slice(&t[2..54]);
    want.extend_from_slice(&[0; 12]);
    // The head's 946 payload bytes, then the second buffer's 1500.
    want.extend_from_slice(&[0, 0, 0x03, 0xb2, 0, 0, 0, 0]);
    want.extend_from_slice(&(ta[0] + 54).to_be_bytes());
    want.extend_from_slice(&[0, 0, 0x05, 0xdc, 0, 0, 0, 0]);
    want.extend_from_slice(&ta[1].to_be_bytes());
    let mut got = rig.block(0);
    got.extend(rig.block(1));
    assert_eq!(got, want);
    // The chain: SEND at block 2, ds 5: 18 bytes inlined, a dseg for the
    // head's last 2 bytes, one for the second buffer's 40.
    let mut want = vec![
        0x00, 0x00, 0x02, 0x0a, 0x00, 0x00, 0x00, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, //
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x12, u[0], u[1],
    ];
    want.extend_from_slice(&u[2..18]);
    want.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0]);
    want.extend_from_slice(&(ca[0] + 18).to_be_bytes());
    want.extend_from_slice(&[0, 0, 0, 40, 0, 0, 0, 0]);
    want.extend_from_slice(&ca[1].to_be_bytes());
    let mut got = rig.block(2);
    got.extend_from_slice(&rig.block(3)[..16]);
    assert_eq!(got, want);
    assert_eq!(rig.xstat("tx_wqe_pkts"), 2);
    assert_eq!(rig.xstat("tx_inline_bytes"), 54 + 18);
    // The device cuts 2446 bytes into 1000 + 1000 + 446.
    assert_eq!(rig.step(), 4);
    let frames = rig.captured();
    assert_eq!(frames.len(), 4);
    let mut payload = Vec::new();
    for (k, f) in frames[..3].iter().enumerate() {
        let len = [1000, 1000, 446][k];
        assert_eq!(f.len(), 54 + len);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, 40 + len);
        assert_eq!(
            u16::from_be_bytes([f[18], f[19]]),
            0x0100 + k as u16,
            "IP id"
        );
        let seq = u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
        assert_eq!(seq, 0x1000_0000 + 1000 * k as u32);
        assert_eq!(f[47], if k == 2 { 0x19 } else { 0x10 }, "FIN/PSH last only");
        let p = parse(f);
        assert_eq!(
            rx_checksums(f, &p, true, true),
            crate::driver::soft::desc::rx::IPCS | crate::driver::soft::desc::rx::L4CS,
            "segment {k}: both checksums good"
        );
        assert_eq!(f[..14], t[..14]);
        payload.extend_from_slice(&f[54..]);
    }
    assert_eq!(payload, t[54..]);
    assert_eq!(frames[3], u);
    drop(rig);
    assert!(pool.is_full());
}

#[test]
fn an_mpwqe_breaks_on_an_offload_change_and_resumes_after_tso_and_chains() {
    let pool = pool(127);
    let mut rig = Rig::new(params(TxMode::Mpwqe));
    let f = udp4(64, 0);
    let z = zeroed_checksums(&f);
    let ck = ol::TX_IPV4 | ol::TX_IP_CKSUM | ol::TX_UDP_CKSUM;
    let t = tcp4(1500);
    let mut burst: Burst<16> = Burst::new();
    burst.push(mbuf(&pool, &f, 0)).unwrap(); // 0: MPWQE 1
    burst.push(mbuf(&pool, &f, 0)).unwrap(); // 1
    burst.push(mbuf(&pool, &z, ck)).unwrap(); // 2: checksums: MPWQE 2
    burst.push(mbuf(&pool, &z, ck)).unwrap(); // 3
    for tci in [5u16, 6] {
        // 4, 5: a VLAN tag each: MPWQEs 3 and 4
        let mut m = mbuf(&pool, &f, ol::TX_VLAN);
        m.set_vlan_tci(tci).unwrap();
        burst.push(m).unwrap();
    }
    let mut tso = chain(&pool, &t, 800); // 6: TSO, regular WQE
    tso.set_ol_flags(ol::TX_TCP_SEG | ol::TX_IPV4 | ol::TX_IP_CKSUM | ol::TX_TCP_CKSUM)
        .unwrap();
    tso.set_tx_offload(TxOffload {
        l2_len: 14,
        l3_len: 20,
        l4_len: 20,
        tso_segsz: 600,
        ..Default::default()
    })
    .unwrap();
    burst.push(tso).unwrap();
    burst.push(mbuf(&pool, &f, 0)).unwrap(); // 7: MPWQE 5
    burst.push(chain(&pool, &f, 30)).unwrap(); // 8: chain, regular WQE
    burst.push(mbuf(&pool, &f, 0)).unwrap(); // 9: MPWQE 6
    burst.push(mbuf(&pool, &f, 0)).unwrap(); // 10
    assert_eq!(rig.tx.tx_burst(&mut burst), 11);
    assert_eq!(
        rig.wqes()
            .iter()
            .map(|&(op, ds, _)| (op, ds))
            .collect::<Vec<_>>(),
        vec![
            (OP_MPW, 4),
            (OP_MPW, 4),
            (OP_MPW, 3),
            (OP_MPW, 3),
            (OP_TSO, 2 + 4 + 2),
            (OP_MPW, 3),
            (OP_SEND, 2 + 1 + 2),
            (OP_MPW, 4),
        ]
    );
    // tx_rs_thresh 4: the WQEs holding packets 3 and 7 ask completions.
    let flags: Vec<u8> = rig.wqes().iter().map(|w| w.2).collect();
    assert_eq!(flags, [0, CE, 0, 0, 0, CE, 0, 0]);
    assert_eq!(rig.xstat("tx_mpwqe_pkts"), 9);
    assert_eq!(rig.xstat("tx_mpwqe_blks"), 6);
    assert_eq!(rig.xstat("tx_wqe_pkts"), 2);
    assert_eq!(rig.xstat("bus_doorbells"), 1);
    assert_eq!(rig.step(), 13, "11 packets, TSO in 3 frames");
    let got = rig.captured();
    let mut want = vec![f.clone(); 4];
    want.push(tagged(&f, 5));
    want.push(tagged(&f, 6));
    assert_eq!(got[..6], want[..]);
    let tso_payload: Vec<u8> = got[6..9].iter().flat_map(|s| s[54..].to_vec()).collect();
    assert_eq!(tso_payload, t[54..]);
    assert_eq!(got[9..], vec![f.clone(); 4][..]);
    // Both completions came: 8 buffers back; 3 wait for the next batch.
    assert_eq!(rig.tx.tx_done_cleanup(usize::MAX), 8);
    assert_eq!(
        pool.available(),
        127 - 4,
        "packets 8 (a chain of two), 9 and 10 wait"
    );
    drop(rig);
    assert!(pool.is_full());
}

#[test]
fn tunnel_checksums_are_filled_at_the_eseg_offsets_and_break_the_mpwqe() {
    let pool = pool(63);
    let mut rig = Rig::new(params(TxMode::Mpwqe));
    // Outer Ethernet, IPv4, UDP (VXLAN port), VXLAN, inner Ethernet, IPv4,
    // UDP, 20 bytes of payload.
    let inner = udp4(62, 50);
    let mut v = vec![0u8; 50];
    v[..14].copy_from_slice(&inner[..14]);
    v[14] = 0x45;
    v[16..18].copy_from_slice(&((36 + inner.len()) as u16).to_be_bytes());
    v[22] = 64;
    v[23] = 17;
    v[26..34].copy_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
    v[34..36].copy_from_slice(&49152u16.to_be_bytes());
    v[36..38].copy_from_slice(&4789u16.to_be_bytes());
    v[38..40].copy_from_slice(&((16 + inner.len()) as u16).to_be_bytes());
    v[42] = 0x08;
    v.extend_from_slice(&inner);
    assert!(tx_checksums_at(&mut v, 14, 0, true, false, false));
    let good = v.clone();
    let mut z = v.clone();
    z[24..26].fill(0); // outer IPv4
    z[50 + 24..50 + 26].fill(0); // inner IPv4
    z[50 + 40..50 + 42].fill(0); // inner UDP
    let flags = ol::TX_TUNNEL_VXLAN
        | ol::TX_OUTER_IPV4
        | ol::TX_OUTER_IP_CKSUM
        | ol::TX_IPV4
        | ol::TX_IP_CKSUM
        | ol::TX_UDP_CKSUM;
    let mut m = mbuf(&pool, &z, flags);
    m.set_tx_offload(TxOffload {
        outer_l2_len: 14,
        outer_l3_len: 20,
        l2_len: 30,
        l3_len: 20,
        ..Default::default()
    })
    .unwrap();
    let mut burst: Burst<4> = Burst::new();
    burst.push(mbuf(&pool, &good, 0)).unwrap();
    burst.push(m).unwrap();
    assert_eq!(rig.tx.tx_burst(&mut burst), 2);
    assert_eq!(rig.wqes().len(), 2, "another eseg, another MPWQE");
    let e = Eseg::parse(&seg_bytes(rig.regs.segs.get(SEGS_PER_BB + 1)));
    assert_eq!(e.swp, [7, 17, 32, 42]);
    assert_eq!(
        (e.tun, e.cs),
        (TUN_VXLAN, cs::L3 | cs::INNER_L3 | cs::INNER_L4_UDP)
    );
    assert_eq!(rig.step(), 2);
    assert_eq!(rig.captured(), vec![good.clone(), good]);
    drop(rig);
    assert!(pool.is_full());
}

#[test]
fn packets_the_queue_cannot_send_are_counted_and_freed() {
    let pool = pool(63);
    let mut rig = Rig::new(params(TxMode::Mpwqe));
    let t = tcp4(100);
    let mut burst: Burst<8> = Burst::new();
    // No MSS; a header longer than the first buffer; an empty packet.
    for (mss, l4) in [(0u16, 20u8), (100, 200)] {
        let mut m = mbuf(&pool, &t, ol::TX_TCP_SEG | ol::TX_IPV4);
        m.set_tx_offload(TxOffload {
            l2_len: 14,
            l3_len: 20,
            l4_len: l4,
            tso_segsz: mss,
            ..Default::default()
        })
        .unwrap();
        burst.push(m).unwrap();
    }
    burst.push(pool.alloc().unwrap()).unwrap();
    // A tunnel whose inner Ethernet header has no length.
    let mut m = mbuf(&pool, &t, ol::TX_TUNNEL_VXLAN | ol::TX_IP_CKSUM);
    m.set_tx_offload(TxOffload {
        outer_l2_len: 14,
        outer_l3_len: 20,
        l3_len: 20,
        ..Default::default()
    })
    .unwrap();
    burst.push(m).unwrap();
    burst.push(mbuf(&pool, &t, 0)).unwrap();
    assert_eq!(rig.tx.tx_burst(&mut burst), 5);
    assert_eq!(rig.counters.stats().tx_errors, 4);
    let x = &rig.counters.xstats;
    assert_eq!(x.get("tx_tso_errors"), Some(2));
    assert_eq!(x.get("tx_empty_errors"), Some(1));
    assert_eq!(x.get("tx_offload_errors"), Some(1));
    assert_eq!(x.get("tx_chain_errors"), Some(0));
    assert_eq!(rig.counters.stats().tx_packets, 1);
    assert_eq!(rig.step(), 1);
    assert_eq!(rig.captured(), vec![t]);
    drop(rig);
    assert!(pool.is_full());
}

#[test]
fn the_completion_queue_holds_every_completion_the_queue_can_ask() {
    // Every 32 packets of 1024 slots, and every half ring: 32 + 1 + 3.
    assert_eq!(cq_size(1024, 1024, 32, 0), 64);
    assert_eq!(cq_size(64, 64, 32, 0), 8);
    // One per WQE: as many as blocks.
    assert_eq!(cq_size(64, 64, 4, 1), 64);
    assert_eq!(cq_size(4096, 4096, 4096, 0), 8);
    // Fewer blocks than slots: the slots still bound the completions.
    assert_eq!(cq_size(1024, 256, 32, 0), 64);
}

/// Writes an MPWQE of one dseg at block `b` (index `b`, queue 0).
fn mpw_one(regs: &TxRegs, b: u32, addr: u64, len: u32) {
    let s = b * SEGS_PER_BB;
    write_words(
        regs.segs.get(s),
        cseg(OPMOD_EMPW, b as u16, OP_MPW, 0, 3, 0),
    );
    write_words(regs.segs.get(s + 1), (0, 0));
    write_words(regs.segs.get(s + 2), dseg(len, addr));
}

#[test]
fn the_device_rejects_malformed_wqes_with_a_counted_error_and_goes_on() {
    let counters = PortCounters::new(1, 1, false);
    let regs = TxRegs::new(64, 64);
    let engines = engines(&regs, &counters);
    let f = udp4(60, 9);
    let a = f.as_ptr() as u64;
    let seg = |b: u32, i: u32, w: (u64, u64)| write_words(regs.segs.get(b * SEGS_PER_BB + i), w);
    // What each bad WQE has wrong, from an MPWQE of one dseg at its block,
    // and the syndrome it gets.
    let faults = [
        syndrome::BAD_OPCODE,
        syndrome::BAD_INDEX,
        syndrome::BAD_INDEX,
        syndrome::BAD_OPCODE,
        syndrome::BAD_DSEG,
        syndrome::BAD_DSEG,
        syndrome::BAD_DSEG,
        syndrome::BAD_INLINE,
        syndrome::BAD_LAYOUT,
        syndrome::BAD_DSEG,
        syndrome::BAD_ESEG,
        syndrome::BAD_TSO,
        syndrome::BAD_TSO,
        syndrome::BAD_LAYOUT,
        syndrome::BAD_ESEG,
    ];
    let eseg_word = |b: [u8; 8]| (u64::from_ne_bytes(b), 0);
    let apply = |i: usize, b: u32| match i {
        0 => seg(b, 0, cseg(0, b as u16, 0x33, 0, 3, 0)),
        1 => seg(b, 0, cseg(OPMOD_EMPW, 7, OP_MPW, 0, 3, 0)),
        2 => seg(b, 0, cseg(OPMOD_EMPW, b as u16, OP_MPW, 5, 3, 0)),
        3 => seg(b, 0, cseg(0, b as u16, OP_MPW, 0, 3, 0)),
        4 => seg(b, 2, dseg(0, a)),
        5 => {
            let (w0, w1) = dseg(60, a);
            let mut x = w0.to_ne_bytes();
            x[7] = 7; // memory key 7
            seg(b, 2, (u64::from_ne_bytes(x), w1))
        }
        6 => seg(b, 2, dseg(60, 0)),
        // 100 bytes inlined in a WQE of one data segment.
        7 => seg(b, 2, dseg(INLINE | 100, 0)),
        8 => seg(b, 0, cseg(OPMOD_EMPW, b as u16, OP_MPW, 0, 2, 0)),
        // A regular send whose dseg claims to be inline.
        9 => {
            seg(b, 0, cseg(0, b as u16, OP_SEND, 0, 3, 0));
            seg(b, 2, dseg(INLINE | 60, a));
        }
        10 => seg(b, 1, eseg_word([0, 0, 0, 0, 0x80, 0, 0, 0])),
        // TSO without an MSS; a send with one.
        11 => seg(b, 0, cseg(0, b as u16, OP_TSO, 0, 3, 0)),
        12 => {
            seg(b, 0, cseg(0, b as u16, OP_SEND, 0, 3, 0));
            seg(b, 1, eseg_word([0, 0, 0, 0, 0, 0, 0, 100]));
        }
        // A reserved cseg byte set.
        13 => {
            let (w0, _) = cseg(OPMOD_EMPW, b as u16, OP_MPW, 0, 3, 0);
            seg(b, 0, (w0, u64::from_ne_bytes([0, 1, 0, 0, 0, 0, 0, 0])))
        }
        // Tunnel offsets out of order.
        _ => seg(b, 1, eseg_word([17, 7, 32, 42, 0, TUN_VXLAN, 0, 0])),
    };
    // Blocks: good, then each fault followed by a good WQE.
    let mut b = 0;
    mpw_one(&regs, b, a, 60);
    b += 1;
    let mut bad_blocks = Vec::new();
    for i in 0..faults.len() {
        mpw_one(&regs, b, a, 60);
        apply(i, b);
        bad_blocks.push(b);
        mpw_one(&regs, b + 1, a, 60);
        b += 2;
    }
    // Then a WQE of size 0: where the next one starts is unknown.
    seg(b, 0, cseg(OPMOD_EMPW, b as u16, OP_MPW, 0, 0, 0));
    let halt = b;
    mpw_one(&regs, b + 1, a, 60);
    regs.tail.store(b + 2, Ordering::Release);
    let mut sent = 0;
    for _ in 0..10 {
        sent += engines.tx[0].with(|e| e.step()).unwrap();
    }
    let frames = engines.tx[0].with(|e| e.take_captured()).unwrap();
    assert_eq!(sent, 1 + faults.len());
    assert_eq!(frames, vec![f.clone(); 1 + faults.len()]);
    let x = &counters.xstats;
    assert_eq!(x.get("device_wqe_errors"), Some(faults.len() as u64 + 1));
    for (i, (syn, blk)) in faults.iter().zip(&bad_blocks).enumerate() {
        let c = CqeInfo::parse(regs.cq.get(i as u32).last().load(Ordering::Acquire));
        assert_eq!(
            (c.opcode, c.syndrome, c.wqe_counter),
            (CQE_ERR, *syn, *blk as u16),
            "fault {i}"
        );
    }
    let c = CqeInfo::parse(
        regs.cq
            .get(faults.len() as u32)
            .last()
            .load(Ordering::Acquire),
    );
    assert_eq!(
        (c.opcode, c.syndrome, c.wqe_counter),
        (CQE_ERR, syndrome::BAD_SIZE, halt as u16)
    );
    assert!(
        engines.tx[0].with(|e| e.halted()).unwrap(),
        "the queue stopped"
    );
    // A reset (the queue restarting) clears the error state.
    engines.tx[0]
        .with(|e| {
            regs.reset();
            e.reset();
        })
        .unwrap();
    assert!(!engines.tx[0].with(|e| e.halted()).unwrap());
    mpw_one(&regs, 0, a, 60);
    regs.tail.store(1, Ordering::Release);
    assert_eq!(engines.tx[0].with(|e| e.step()).unwrap(), 1);
    // A WQE past the tail, and one above the largest size, also stop it.
    for ds in [8, wqe::MAX_DS + 1] {
        engines.tx[0]
            .with(|e| {
                regs.reset();
                e.reset();
            })
            .unwrap();
        seg(0, 0, cseg(OPMOD_EMPW, 0, OP_MPW, 0, ds, 0));
        regs.tail.store(1, Ordering::Release);
        assert_eq!(engines.tx[0].with(|e| e.step()).unwrap(), 0);
        assert!(engines.tx[0].with(|e| e.halted()).unwrap(), "ds {ds}");
    }
}

/// A chain of more segments than a WQE holds cannot be sent: counted in
/// `tx_errors` and `tx_segs_errors`, every segment freed; the packet after
/// it goes.
#[test]
fn a_chain_longer_than_a_wqe_holds_is_dropped_with_its_reason() {
    let pool = pool(255);
    let mut rig = Rig::new(params(TxMode::Wqe));
    let f = udp4(150, 5);
    let mut pieces = f.chunks(2);
    let mut long = pool.alloc_from_slice(pieces.next().unwrap()).unwrap();
    for piece in pieces {
        long.chain(pool.alloc_from_slice(piece).unwrap())
            .map_err(|(e, _)| e)
            .unwrap();
    }
    assert!(
        u32::from(long.nb_segs()) > wqe::MAX_DS,
        "{}",
        long.nb_segs()
    );
    let mut burst: Burst<4> = Burst::new();
    burst.push(long).unwrap();
    burst.push(mbuf(&pool, &f, 0)).unwrap();
    assert_eq!(rig.tx.tx_burst(&mut burst), 2);
    let s = rig.counters.stats();
    assert_eq!((s.tx_packets, s.tx_errors), (1, 1));
    assert_eq!(rig.counters.xstats.get("tx_segs_errors"), Some(1));
    assert_eq!(rig.step(), 1);
    assert_eq!(rig.captured(), vec![f]);
    drop(rig);
    assert!(pool.is_full());
}

#[test]
fn a_wqe_the_device_rejects_still_gives_its_buffers_back_by_completion() {
    let pool = pool(63);
    let mut rig = Rig::new(params(TxMode::Mpwqe));
    let f = udp4(60, 4);
    let mut burst: Burst<4> = Burst::new();
    for _ in 0..4 {
        burst.push(mbuf(&pool, &f, 0)).unwrap();
    }
    assert_eq!(rig.tx.tx_burst(&mut burst), 4);
    assert_eq!(rig.wqes(), vec![(OP_MPW, 6, CE)]);
    // Corrupt the third dseg's memory key before the device reads it.
    let d = rig.regs.segs.get(4);
    d.q0.store(d.q0.load(Ordering::Relaxed) | 0xff << 56, Ordering::Relaxed);
    assert_eq!(rig.step(), 0);
    assert!(rig.captured().is_empty());
    assert_eq!(rig.xstat("device_wqe_errors"), 1);
    assert_eq!(rig.tx.tx_done_cleanup(usize::MAX), 4);
    assert_eq!(rig.xstat("tx_cqe_errors"), 1);
    assert!(pool.is_full());
    // The queue goes on.
    burst.push(mbuf(&pool, &f, 0)).unwrap();
    assert_eq!(rig.tx.tx_burst(&mut burst), 1);
    assert_eq!(rig.step(), 1);
    assert_eq!(rig.captured(), vec![f]);
    drop(rig);
    assert!(pool.is_full());
}

/// io forwarding between two tester ports with bursts of 7, 13 and 32,
/// giving packets in runs of 5 one of three offload classes: none, IPv4
/// checksum, IPv4 and UDP checksums (the fields zeroed, so only the
/// device's filling them makes the frame pass the checker).
fn forward_mixed(a: &mut Port, b: &mut Port, t: &tester::Tester, want: u64) {
    let mut b7: Burst<7> = Burst::new();
    let mut b13: Burst<13> = Burst::new();
    let mut b32: Burst<32> = Burst::new();
    let mut k = 0u64;
    // Bounded in time, not in rounds: with a threaded device under load, a
    // million rounds can pass while the device thread waits for a core.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for rig in 0u64.. {
        if t.report().received >= want {
            return;
        }
        if rig % 1024 == 0 && std::time::Instant::now() > deadline {
            break;
        }
        if rig % 64 == 63 {
            std::thread::yield_now();
        }
        let burst: &mut BurstSlice = match rig % 3 {
            0 => &mut b7,
            1 => &mut b13,
            _ => &mut b32,
        };
        for dir in 0..2 {
            let (rx, tx) = if dir == 0 {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            rx.rx_queue(0).unwrap().rx_burst(burst);
            for m in burst.iter_mut() {
                let class = (k / 5) % 3;
                k += 1;
                let d = m.data_mut().unwrap();
                let flags = match class {
                    0 => 0,
                    1 => {
                        d[24..26].fill(0);
                        ol::TX_IPV4 | ol::TX_IP_CKSUM
                    }
                    _ => {
                        d[24..26].fill(0);
                        d[40..42].fill(0);
                        ol::TX_IPV4 | ol::TX_IP_CKSUM | ol::TX_UDP_CKSUM
                    }
                };
                m.set_ol_flags(flags).unwrap();
            }
            let q = tx.tx_queue(0).unwrap();
            for _ in 0..1_000_000 {
                if burst.is_empty() {
                    break;
                }
                if q.tx_burst(burst) == 0 {
                    std::thread::yield_now();
                }
            }
            assert!(burst.is_empty(), "the Tx queue stopped taking packets");
        }
    }
    panic!("forwarding did not finish: {}", t.report());
}

#[test]
fn tester_traffic_through_both_tx_modes_with_mixed_offloads_arrives_whole_and_in_order() {
    for (mode, extra) in [
        ("mpwqe", ""),
        ("mpwqe-inline", ",inline_mpw=128,mpw_segs=16"),
        ("wqe", ",txmode=wqe"),
        ("mpwqe-thr", ",device=threaded"),
        // A completion per WQE, batches of 4: the completion queue (sized
        // for that) never overflows.
        ("mpwqe-comp", ",tx_comp=1,tx_rs_thresh=4,tx_free_thresh=8"),
        (
            "wqe-comp",
            ",tx_comp=1,tx_rs_thresh=4,tx_free_thresh=8,txmode=wqe",
        ),
    ] {
        let name = format!("t-mpw-{mode}");
        let pool = pool(2047);
        let mut config = PortConfig::new(Some(pool.clone())).nb_rxd(256).nb_txd(256);
        config.tx_offloads |= Offloads::CHECKSUMS;
        let spec = format!("soft:tester={name},count=3000,flows=64{extra}");
        let mut a = open(&spec, config.clone()).unwrap();
        let mut b = open(&spec, config).unwrap();
        a.start().unwrap();
        b.start().unwrap();
        let t = tester::attach(&name, None).unwrap();
        forward_mixed(&mut a, &mut b, &t, 6000);
        let r = t.report();
        assert_eq!((r.sent, r.received), (6000, 6000), "{mode}: {r}");
        assert_eq!(
            (r.lost, r.corrupt, r.reordered, r.duplicates, r.foreign),
            (0, 0, 0, 0, 0),
            "{mode}: {r}"
        );
        let x = |p: &Port, n: &str| p.counters().xstats.get(n).unwrap();
        let mpw: u64 = [&a, &b].iter().map(|p| x(p, "tx_mpwqe_pkts")).sum();
        let reg: u64 = [&a, &b].iter().map(|p| x(p, "tx_wqe_pkts")).sum();
        let blks: u64 = [&a, &b].iter().map(|p| x(p, "tx_mpwqe_blks")).sum();
        if mode.starts_with("wqe") {
            assert_eq!((mpw, reg, blks), (0, 6000, 0));
        } else {
            assert_eq!((mpw, reg), (6000, 0), "{mode}");
            // Runs of 5 of one class: an MPWQE rarely holds more.
            assert!(blks >= 6000 / 5, "{mode}: {blks} blocks");
        }
        assert_eq!(x(&a, "device_wqe_errors") + x(&a, "tx_cqe_errors"), 0);
        let bus = BusBytes::from_xstats(&a.counters().xstats.snapshot()).unwrap();
        assert!(bus.completion > 0 && bus.desc > 0 && bus.doorbell > 0);
        a.stop();
        b.stop();
        drop((a, b));
        pool.flush_local_cache();
        assert!(pool.is_full(), "{mode}");
    }
}

#[test]
fn an_mpwqe_ring_holds_a_quarter_block_per_descriptor_and_a_full_one_holds_the_rest_back() {
    use crate::driver::soft::driver::tx::TxMode as M;
    use crate::driver::soft::tx_blocks;
    // 16 bytes per descriptor in mpwqe mode (at least 64 blocks), a block
    // per descriptor in wqe mode.
    assert_eq!(tx_blocks(M::Mpwqe, 1024), 256);
    assert_eq!(tx_blocks(M::Mpwqe, 256), 64);
    assert_eq!(tx_blocks(M::Mpwqe, 64), 64);
    assert_eq!(tx_blocks(M::Wqe, 1024), 1024);
    // 256 slots over 64 blocks: chains (regular WQEs of two blocks each)
    // fill the blocks long before the slots. The queue takes what fits,
    // leaves the rest in the burst (no error, nothing lost), and takes it
    // once the device has completed the first WQEs.
    let pool = pool(127);
    let counters = Arc::new(PortCounters::new(1, 1, false));
    let regs = TxRegs::new(64, cq_size(256, 64, 4, 0));
    let engines = engines(&regs, &counters);
    let mut tx = SoftTx::new(TxQueueParts {
        regs: Arc::clone(&regs),
        nb_txd: 256,
        params: params(TxMode::Mpwqe),
        engine: QueueEngine::new(Arc::clone(&engines), 0, false),
        counters: Arc::clone(&counters),
    });
    tx.start().unwrap();
    let frames: Vec<Vec<u8>> = (0..40).map(|i| udp4(300, i as u8)).collect();
    let mut burst: Burst<64> = Burst::new();
    for f in &frames {
        burst.push(chain(&pool, f, 100)).unwrap();
    }
    let first = tx.tx_burst(&mut burst);
    assert!(first > 0 && first < 40, "{first} of 40 taken");
    assert_eq!(burst.len(), 40 - first);
    assert_eq!(counters.stats().tx_errors, 0);
    assert_eq!(tx.tx_burst(&mut burst), 0, "no block completed yet");
    engines.tx[0].with(|e| e.step()).unwrap();
    assert_eq!(tx.tx_burst(&mut burst), 40 - first);
    assert!(burst.is_empty());
    engines.tx[0].with(|e| e.step()).unwrap();
    assert_eq!(engines.tx[0].with(|e| e.take_captured()).unwrap(), frames);
    assert_eq!(counters.stats().tx_packets, 40);
    drop(tx);
    assert!(pool.is_full());
}
