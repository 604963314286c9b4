//! The forwarding engines and one stream's poll: get a burst (receive, or
//! generate for `txonly`), rewrite it, send it to the peer port, drop what
//! the Tx queue did not take (after `--tx-retry` more tries), as testpmd does.
//!
//! Each engine is a zero-sized type implementing [`Fwd`]; the lcore loop is
//! generic over it, so the per-packet work is inlined and the only dynamic
//! calls are the queues' `rx_burst` / `tx_burst`, once per burst (and, for
//! `recycle`, the three calls of the recycle step).
//!
//! # Recycle
//! A stream receives on its Rx queue and sends on its Tx queue, so the
//! buffers its Tx queue has sent are the ones its Rx queue needs back: the
//! `recycle` engine runs [`recycle_mbufs`]`(stream.rx, stream.tx)` before
//! each `rx_burst`, moving completed Tx buffers straight into the Rx ring.
//! The caller checks at setup that both queues support it; an error of one
//! step (a queue stopped under it) only counts in
//! [`Stream::recycle_errors`], and the stream goes on as io.

use std::sync::Arc;

use sluice::mbuf::{BurstSlice, MbufPool};
use sluice::net::MacAddr;
use sluice::port::{RxQueue, TxQueue, recycle_mbufs};
use sluice::tsc::rdtsc;
use sluice_telemetry::capture::{CaptureTaps, Tap};

/// One stream: an Rx queue of one port and the Tx queue of the same number
/// on its peer port. Polled by one lcore.
pub struct Stream<'a> {
    /// Index in the run's stream table (for its counters).
    pub id: usize,
    /// The Tx port.
    pub tx_port: usize,
    /// Where packets come from.
    pub rx: &'a mut dyn RxQueue,
    /// Where they go.
    pub tx: &'a mut dyn TxQueue,
    /// `mac`: the new source (the Tx port's MAC).
    pub src_mac: MacAddr,
    /// `mac`: the new destination (the Tx port's peer).
    pub dst_mac: MacAddr,
    /// `txonly`: the frame sent, and the pool it is allocated from.
    pub frame: Option<(Box<[u8]>, MbufPool)>,
    /// `recycle`: recycle steps that failed (a queue stopped or unable),
    /// counted by the polling lcore.
    pub recycle_errors: u64,
    /// `txonly`: bursts that could not be generated because the pool was
    /// empty, counted by the polling lcore.
    pub alloc_failures: u64,
    /// The capture tap of the Rx queue: what is received is mirrored into
    /// it while a capture runs.
    pub rx_tap: Arc<Tap>,
    /// The capture tap of the Tx queue: what is handed to `tx_burst`.
    pub tx_tap: Arc<Tap>,
}

impl<'a> Stream<'a> {
    /// Stream `id` from `rx` to `tx` (on port `tx_port`), with the MACs
    /// `mac` writes; no `txonly` frame, its counters 0.
    pub fn new(
        id: usize,
        tx_port: usize,
        rx: &'a mut dyn RxQueue,
        tx: &'a mut dyn TxQueue,
        src_mac: MacAddr,
        dst_mac: MacAddr,
    ) -> Stream<'a> {
        Stream {
            id,
            tx_port,
            rx,
            tx,
            src_mac,
            dst_mac,
            frame: None,
            recycle_errors: 0,
            alloc_failures: 0,
            rx_tap: CaptureTaps::detached(),
            tx_tap: CaptureTaps::detached(),
        }
    }

    /// The same stream mirroring into these capture taps.
    pub fn with_taps(self, rx_tap: Arc<Tap>, tx_tap: Arc<Tap>) -> Stream<'a> {
        Stream {
            rx_tap,
            tx_tap,
            ..self
        }
    }

    /// The same stream generating `frame` from `pool` (`txonly`).
    pub fn with_frame(self, frame: Option<(Box<[u8]>, MbufPool)>) -> Stream<'a> {
        Stream { frame, ..self }
    }
}

/// What one poll moved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Packets received (or generated).
    pub rx: usize,
    /// Packets the Tx queue took.
    pub tx: usize,
    /// Packets dropped because the Tx queue did not take them.
    pub dropped: usize,
}

/// A forwarding engine.
pub trait Fwd: Copy + Send + Sync {
    /// Whether the packets are sent (else freed).
    const SENDS: bool = true;

    /// Whether the packets are received (else generated: not mirrored as
    /// received).
    const RECEIVES: bool = true;

    /// Fills `burst` (empty) with up to `burst.free()` packets; how many.
    #[inline(always)]
    fn input(self, s: &mut Stream<'_>, burst: &mut BurstSlice) -> usize {
        s.rx.rx_burst(burst)
    }

    /// Rewrites the packets before they are sent.
    #[inline(always)]
    fn rewrite(self, s: &Stream<'_>, burst: &mut BurstSlice) {
        let _ = (s, burst);
    }
}

/// Asks for the first line of every frame of the burst before any is
/// rewritten, so that their misses overlap: a driver leaves frames where
/// they arrived (a `virtio:` port's are still in the device's cache, and
/// the driver does not fetch what an `io` forwarder never reads).
#[inline(always)]
fn prefetch_frames(burst: &BurstSlice) {
    for m in burst.iter() {
        m.prefetch_data();
    }
}

/// `io`: unchanged.
#[derive(Clone, Copy)]
pub struct Io;
impl Fwd for Io {}

/// `mac`: source = the Tx port's MAC, destination = its peer's.
#[derive(Clone, Copy)]
pub struct Mac;
impl Fwd for Mac {
    #[inline(always)]
    fn rewrite(self, s: &Stream<'_>, burst: &mut BurstSlice) {
        prefetch_frames(burst);
        for m in burst.iter_mut() {
            if let Ok(d) = m.data_mut()
                && d.len() >= 12
            {
                d[0..6].copy_from_slice(&s.dst_mac.0);
                d[6..12].copy_from_slice(&s.src_mac.0);
            }
        }
    }
}

/// `macswap`: source and destination swapped.
#[derive(Clone, Copy)]
pub struct MacSwap;
impl Fwd for MacSwap {
    #[inline(always)]
    fn rewrite(self, _s: &Stream<'_>, burst: &mut BurstSlice) {
        prefetch_frames(burst);
        for m in burst.iter_mut() {
            if let Ok(d) = m.data_mut()
                && d.len() >= 12
            {
                let (dst, rest) = d.split_at_mut(6);
                dst.swap_with_slice(&mut rest[..6]);
            }
        }
    }
}

/// `rxonly`: received and freed.
#[derive(Clone, Copy)]
pub struct RxOnly;
impl Fwd for RxOnly {
    const SENDS: bool = false;
}

/// `txonly`: generated frames sent; nothing received.
#[derive(Clone, Copy)]
pub struct TxOnly;
impl Fwd for TxOnly {
    const RECEIVES: bool = false;

    #[inline(always)]
    fn input(self, s: &mut Stream<'_>, burst: &mut BurstSlice) -> usize {
        let Some((frame, pool)) = &s.frame else {
            return 0;
        };
        let n = burst.free();
        if pool.alloc_bulk(burst, n).is_err() {
            s.alloc_failures += 1;
            return 0;
        }
        for m in burst.iter_mut() {
            match m.append(frame.len()) {
                Ok(d) => d.copy_from_slice(frame),
                // The pool's data room was sized for the frame at setup.
                Err(_) => return 0,
            }
        }
        n
    }
}

/// `recycle`: io, with the recycle step (the stream's Tx queue feeding its
/// Rx queue) before each receive.
#[derive(Clone, Copy)]
pub struct Recycle;
impl Fwd for Recycle {
    #[inline(always)]
    fn input(self, s: &mut Stream<'_>, burst: &mut BurstSlice) -> usize {
        if recycle_mbufs(&mut *s.rx, &mut *s.tx).is_err() {
            s.recycle_errors += 1;
        }
        s.rx.rx_burst(burst)
    }
}

/// Polls one stream once: input, rewrite, send, drop the rest. `burst` is
/// empty (and left empty); its free room is the burst size asked for.
/// While a capture runs on a queue of the stream, its tap gets copies of
/// the packets received (after `rx_burst`) or sent (before `tx_burst`);
/// otherwise each tap costs one load and one branch per burst.
#[inline(always)]
pub fn poll<E: Fwd>(e: E, s: &mut Stream<'_>, burst: &mut BurstSlice, tx_retry: u32) -> Moved {
    let rx = e.input(s, burst);
    if rx == 0 {
        // A failed input may leave packets (txonly with a short data room).
        burst.clear();
        return Moved::default();
    }
    if E::RECEIVES && s.rx_tap.is_active() {
        s.rx_tap.mirror(burst.as_slice(), rdtsc());
    }
    if !E::SENDS {
        burst.clear();
        return Moved {
            rx,
            tx: 0,
            dropped: 0,
        };
    }
    e.rewrite(s, burst);
    if s.tx_tap.is_active() {
        s.tx_tap.mirror(burst.as_slice(), rdtsc());
    }
    let mut tx = s.tx.tx_burst(burst);
    let mut tries = tx_retry;
    while !burst.is_empty() && tries > 0 {
        std::hint::spin_loop();
        tx += s.tx.tx_burst(burst);
        tries -= 1;
    }
    let dropped = burst.len();
    if dropped != 0 {
        burst.clear();
    }
    Moved { rx, tx, dropped }
}

/// The `txonly` frame: Ethernet/IPv4/UDP, `len` bytes, 198.18.0.1:9 ->
/// 198.18.0.2:9 (testpmd's addresses), valid IPv4 checksum, UDP checksum 0
/// (none), zero payload.
pub fn udp_frame(len: u16, src: MacAddr, dst: MacAddr) -> Box<[u8]> {
    let len = len.max(42) as usize;
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = ((len - 14).min(u16::MAX as usize)) as u16;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[198, 18, 0, 1]);
    f[30..34].copy_from_slice(&[198, 18, 0, 2]);
    let ck = sluice::net::checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&ck.to_be_bytes());
    f[34..36].copy_from_slice(&9u16.to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice::mbuf::{Burst, MbufPoolConfig};
    use sluice::port::PortConfig;

    fn pool() -> MbufPool {
        MbufPool::new(MbufPoolConfig {
            size: 511,
            cache_size: 0,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn udp_frame_has_a_valid_ipv4_header() {
        let f = udp_frame(64, MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(f.len(), 64);
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(sluice::net::checksum::checksum(&f[14..34]), 0);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 30);
    }

    /// Runs `e` over one null-port stream (port 0 Rx -> port 1 Tx) once.
    fn one_poll<E: Fwd>(e: E, make: bool, burst_size: usize) -> (Moved, Vec<u8>, MbufPool) {
        let pool = pool();
        let cfg = |id| PortConfig::new(Some(pool.clone())).port_id(id);
        let mut p0 = sluice::driver::open("null:size=64,copy=1", cfg(0)).unwrap();
        let mut p1 = sluice::driver::open("null", cfg(1)).unwrap();
        p0.start().unwrap();
        p1.start().unwrap();
        let src = MacAddr([2, 0, 0, 0, 0, 0x11]);
        let dst = MacAddr([2, 0, 0, 0, 0, 0x22]);
        let mut s = Stream::new(
            0,
            1,
            p0.rx_queue(0).unwrap(),
            p1.tx_queue(0).unwrap(),
            src,
            dst,
        )
        .with_frame(make.then(|| (udp_frame(60, src, dst), pool.clone())));
        let mut burst: Burst<64> = Burst::new();
        let moved = poll(e, &mut s, burst.capped(burst_size), 0);
        assert!(burst.is_empty());
        let mut seen = Burst::<1>::new();
        // What a mac rewrite does to a frame, seen on the next received one.
        let rx = s.rx.rx_burst(&mut seen);
        assert_eq!(rx, 1);
        e.rewrite(&s, &mut seen);
        let head = seen[0].data()[..12].to_vec();
        drop(seen);
        drop(s);
        let tx_packets = p1.stats().tx_packets;
        assert_eq!(tx_packets, moved.tx as u64);
        (moved, head, pool)
    }

    #[test]
    fn engines_move_the_burst_asked_and_rewrite_macs() {
        let (m, head, pool) = one_poll(Io, false, 7);
        assert_eq!(
            m,
            Moved {
                rx: 7,
                tx: 7,
                dropped: 0
            }
        );
        assert_eq!(&head[..6], &[0xff; 6], "io leaves the frame alone");
        assert!(pool.is_full());

        let (m, head, pool) = one_poll(Mac, false, 32);
        assert_eq!(
            m,
            Moved {
                rx: 32,
                tx: 32,
                dropped: 0
            }
        );
        assert_eq!(&head[..6], &[2, 0, 0, 0, 0, 0x22]);
        assert_eq!(&head[6..12], &[2, 0, 0, 0, 0, 0x11]);
        assert!(pool.is_full());

        let (m, head, pool) = one_poll(MacSwap, false, 64);
        assert_eq!(
            m,
            Moved {
                rx: 64,
                tx: 64,
                dropped: 0
            }
        );
        assert_eq!(
            &head[..6],
            &[0x02, 0, 0, 0x4e, 0x55, 0],
            "null's source, swapped"
        );
        assert_eq!(&head[6..12], &[0xff; 6]);
        assert!(pool.is_full());

        let (m, _, pool) = one_poll(RxOnly, false, 16);
        assert_eq!(
            m,
            Moved {
                rx: 16,
                tx: 0,
                dropped: 0
            }
        );
        assert!(pool.is_full());

        let (m, _, pool) = one_poll(TxOnly, true, 5);
        assert_eq!(
            m,
            Moved {
                rx: 5,
                tx: 5,
                dropped: 0
            }
        );
        assert!(pool.is_full());
    }

    /// Two soft ports cabled by a wire, 64 descriptors per queue.
    fn wire_ports(pool: &MbufPool, wire: &str) -> [sluice::port::Port; 2] {
        let spec = format!("soft:wire={wire}");
        let cfg = |id| {
            PortConfig::new(Some(pool.clone()))
                .port_id(id)
                .nb_rxd(64)
                .nb_txd(64)
        };
        let mut p0 = sluice::driver::open(&spec, cfg(0)).unwrap();
        let mut p1 = sluice::driver::open(&spec, cfg(1)).unwrap();
        p0.start().unwrap();
        p1.start().unwrap();
        [p0, p1]
    }

    /// The stream port 0 Rx -> port 1 Tx.
    fn wire_stream<'a>(
        p0: &'a mut sluice::port::Port,
        p1: &'a mut sluice::port::Port,
    ) -> Stream<'a> {
        let mac = MacAddr([2, 0, 0, 0, 0, 1]);
        Stream::new(
            0,
            1,
            p0.rx_queue(0).unwrap(),
            p1.tx_queue(0).unwrap(),
            mac,
            mac,
        )
    }

    #[test]
    fn recycle_moves_the_tx_queues_sent_buffers_into_the_rx_ring() {
        let pool = pool();
        let [mut p0, mut p1] = wire_ports(&pool, "engine_recycle");
        // 64 frames out of port 1, over the wire into port 0.
        let mut b: Burst<64> = Burst::new();
        pool.alloc_bulk(&mut b, 64).unwrap();
        b.iter_mut().for_each(|m| m.append(60).unwrap().fill(7));
        assert_eq!(p1.tx_queue(0).unwrap().tx_burst(&mut b), 64);
        let c0 = p0.counters();
        let c1 = p1.counters();
        let mut s = wire_stream(&mut p0, &mut p1);
        // First poll: the Rx ring is full, nothing is due, nothing moves
        // back; 32 frames go round (port 0 Rx -> port 1 Tx -> port 0).
        let m = poll(Recycle, &mut s, b.capped(32), 0);
        assert_eq!((m.rx, m.tx, m.dropped), (32, 32, 0));
        assert_eq!(c0.xstats.get("rx_recycled"), Some(0));
        // Second poll: the 32 slots received are due, and port 1's Tx
        // queue has completed batches: one batch of 32 moves.
        let m = poll(Recycle, &mut s, b.capped(32), 0);
        assert_eq!((m.rx, m.tx), (32, 32));
        assert_eq!(c1.xstats.get("tx_recycled"), Some(32));
        assert_eq!(c0.xstats.get("rx_recycled"), Some(32));
        assert_eq!(c1.xstats.get("recycle_fallbacks"), Some(0));
        assert_eq!(s.recycle_errors, 0);
        drop(s);
        drop((p0, p1));
        assert!(pool.is_full());
    }

    #[test]
    fn a_failed_recycle_step_is_counted_and_the_stream_goes_on() {
        let pool = pool();
        let [mut p0, mut p1] = wire_ports(&pool, "engine_recycle_stop");
        let mut b: Burst<64> = Burst::new();
        pool.alloc_bulk(&mut b, 32).unwrap();
        b.iter_mut().for_each(|m| m.append(60).unwrap().fill(7));
        assert_eq!(p1.tx_queue(0).unwrap().tx_burst(&mut b), 32);
        let mut s = wire_stream(&mut p0, &mut p1);
        s.tx.stop();
        // Tx stopped: the step fails (counted), the receive still runs and
        // what the Tx queue does not take is dropped.
        let m = poll(Recycle, &mut s, b.capped(32), 0);
        assert_eq!((m.rx, m.tx, m.dropped), (32, 0, 32));
        assert_eq!(s.recycle_errors, 1);
        s.rx.stop();
        assert_eq!(poll(Recycle, &mut s, b.capped(32), 0), Moved::default());
        assert_eq!(s.recycle_errors, 2);
        s.rx.start().unwrap();
        s.tx.start().unwrap();
        assert_eq!(poll(Recycle, &mut s, b.capped(32), 0), Moved::default());
        assert_eq!(s.recycle_errors, 2, "both queues run again");
        drop(s);
        drop((p0, p1));
        assert!(pool.is_full());
    }
}
