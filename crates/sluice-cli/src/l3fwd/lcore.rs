//! The l3fwd lcore: polls its Rx queues, routes each burst, sends to every
//! port through its own Tx queues.
//!
//! Lcore `i` owns Tx queue `i` of every port (so any packet can leave by
//! any port without sharing a queue) and a share of all ports' Rx queues.
//! Per Rx burst: each packet is routed ([`route`]) into the burst of its
//! output port or dropped with its reason; then each non-empty output burst
//! goes to its Tx queue (with `--tx-retry` more tries), what is left is
//! freed and counted as that port's drop. Cycles are counted as in
//! `sluice fwd`: busy polls only, from before `rx_burst` to after the last
//! `tx_burst`.

use std::sync::atomic::{AtomicBool, Ordering};

use sluice::counter::Counter;
use sluice::mbuf::{Burst, BurstSlice, Mbuf, MbufPool};
use sluice::port::{RxQueue, TxQueue};
use sluice::tsc::{self, rdtsc};

use super::classify::{DropReason, LastPort, PortMacs, Router, route, route_fast};
use crate::fwd::lcore::{LcoreCycles, StreamCounters};
use crate::fwd::summary::RouteDrops;

/// The queues one lcore polls.
pub struct L3Lcore<'a> {
    /// Rx queues (of any ports).
    pub rx: Vec<&'a mut dyn RxQueue>,
    /// Tx queue `i` of every port, by port.
    pub tx: Vec<&'a mut dyn TxQueue>,
    /// Index of this lcore's first Tx-drop counter: port `p`'s drops are
    /// counted in `counters[counters_base + p]`.
    pub counters_base: usize,
    /// Router drops, written by this lcore only.
    pub drops: &'a RouteDropCounters,
}

/// Router drops by reason: single-writer counters (the owning lcore adds,
/// the stats thread reads).
#[derive(Debug, Default)]
pub struct RouteDropCounters {
    no_route: Counter,
    ttl_expired: Counter,
    bad_header: Counter,
    bad_checksum: Counter,
    unwritable: Counter,
}

impl RouteDropCounters {
    /// The counts now.
    pub fn get(&self) -> RouteDrops {
        RouteDrops {
            no_route: self.no_route.get(),
            ttl_expired: self.ttl_expired.get(),
            bad_header: self.bad_header.get(),
            bad_checksum: self.bad_checksum.get(),
            unwritable: self.unwritable.get(),
        }
    }

    fn add(&self, local: &[u64; 5]) {
        for (c, n) in [
            &self.no_route,
            &self.ttl_expired,
            &self.bad_header,
            &self.bad_checksum,
            &self.unwritable,
        ]
        .into_iter()
        .zip(local)
        {
            if *n != 0 {
                c.add(*n);
            }
        }
    }
}

/// Sums `RouteDrops` over lcores.
pub fn sum_drops(all: &[RouteDropCounters]) -> RouteDrops {
    all.iter().fold(RouteDrops::default(), |a, c| {
        let b = c.get();
        RouteDrops {
            no_route: a.no_route + b.no_route,
            ttl_expired: a.ttl_expired + b.ttl_expired,
            bad_header: a.bad_header + b.bad_header,
            bad_checksum: a.bad_checksum + b.bad_checksum,
            unwritable: a.unwritable + b.unwritable,
        }
    })
}

/// How the lcores run.
#[derive(Clone, Copy)]
pub struct L3Config<'a> {
    /// Packets asked per Rx call (1..=64).
    pub burst: usize,
    /// Tx attempts more before dropping.
    pub tx_retry: u32,
    /// Tx-drop counters, per (lcore, port).
    pub counters: &'a [StreamCounters],
    /// MACs written per output port.
    pub macs: &'a [PortMacs],
    /// Set by the main thread to end the run.
    pub stop: &'a AtomicBool,
}

/// Runs on a forwarding thread: pins, registers as an lcore, routes until
/// `stop`, hands the lcore's cached buffers back to `pool`.
pub fn l3_main<R: Router>(
    cpu: Option<usize>,
    router: &R,
    lc: &mut L3Lcore<'_>,
    cfg: L3Config<'_>,
    pool: &MbufPool,
) -> Result<LcoreCycles, String> {
    if let Some(cpu) = cpu
        && let Err(e) = sluice::lcore::pin_current_thread(cpu)
    {
        eprintln!("sluice l3fwd: warning: forwarding lcore not pinned: {e}");
    }
    let guard = sluice::lcore::register().map_err(|e| format!("cannot register an lcore: {e}"))?;
    let r = run(router, lc, cfg);
    pool.flush_local_cache();
    drop(guard);
    Ok(r)
}

#[inline(never)]
fn run<R: Router>(router: &R, lc: &mut L3Lcore<'_>, cfg: L3Config<'_>) -> LcoreCycles {
    let mut bufs = Bursts::new(lc.tx.len());
    let mut c = LcoreCycles::default();
    let first = tsc::rdtsc_ordered();
    while !cfg.stop.load(Ordering::Relaxed) {
        for q in 0..lc.rx.len() {
            let t0 = rdtsc();
            let n = poll(router, lc, q, &mut bufs, &cfg);
            c.polls += 1;
            if n == 0 {
                c.idle_polls += 1;
                continue;
            }
            c.busy_cycles += rdtsc().wrapping_sub(t0);
            c.packets += n as u64;
        }
        if lc.rx.is_empty() {
            std::hint::spin_loop();
        }
    }
    c.total_cycles = tsc::rdtsc_ordered().wrapping_sub(first);
    c
}

/// An lcore's bursts: the one it receives into and one per output port.
pub struct Bursts {
    rx: Burst<64>,
    out: Vec<Burst<64>>,
}

impl Bursts {
    /// Bursts for `ports` output ports.
    pub fn new(ports: usize) -> Bursts {
        Bursts {
            rx: Burst::new(),
            out: (0..ports).map(|_| Burst::new()).collect(),
        }
    }
}

/// One poll of Rx queue `q` of `lc`: receive, route, send; how many
/// packets were received. The bursts are empty before and after.
#[inline(always)]
pub fn poll<R: Router>(
    router: &R,
    lc: &mut L3Lcore<'_>,
    q: usize,
    bufs: &mut Bursts,
    cfg: &L3Config<'_>,
) -> usize {
    let burst = &mut bufs.rx;
    let n = lc.rx[q].rx_burst(burst.capped(cfg.burst));
    if n == 0 {
        return 0;
    }
    // Route in place, noting each packet's port (or DROP): the common
    // case for the whole burst in one tight loop, then anything it declined
    // (IPv6, options, a header to check in software, a drop) through the
    // full checks.
    let mut dst = [DROP; 64];
    let pkts = burst.as_mut_slice();
    let mut declined = route_burst(router, pkts, cfg.macs, &mut dst);
    if declined != 0 {
        let mut dropped = [0u64; 5];
        while declined != 0 {
            let i = declined.trailing_zeros() as usize;
            declined &= declined - 1;
            match route(router, &mut pkts[i], cfg.macs) {
                Ok(p) => dst[i] = p as u16,
                Err(why) => dropped[why as usize] += 1,
            }
        }
        lc.drops.add(&dropped);
    }
    let first = dst[0];
    // (A fold, not `all`: no early exit, so it compiles to vector compares.)
    if first != DROP && dst[1..n].iter().fold(0, |a, &d| a | (d ^ first)) == 0 {
        // The common case: the whole burst leaves by one port.
        let p = first as usize;
        send(&mut *lc.tx[p], burst, cfg, lc.counters_base + p);
    } else {
        // Dropped packets are freed here; the others go to the burst of
        // their port (64 each, emptied below: they fit).
        for (m, &d) in burst.drain_front(n).zip(&dst) {
            if d != DROP
                && let Err(m) = bufs.out[d as usize].push(m)
            {
                drop(m);
                cfg.counters[lc.counters_base + d as usize].drops.add(1);
            }
        }
        for (p, (o, tx)) in bufs.out.iter_mut().zip(lc.tx.iter_mut()).enumerate() {
            if !o.is_empty() {
                send(&mut **tx, o, cfg, lc.counters_base + p);
            }
        }
    }
    n
}

/// [`route_fast`] over a burst (at most 64 packets): each packet it takes
/// has its port in `dst`; the result has bit `i` set for each packet `i` it
/// declined, left untouched. A function of its own, called once a burst, so
/// that its loop has the registers to itself (the tables, the MACs, `dst`).
///
/// Every packet's headers are prefetched first, then routed: the loads of
/// the second loop find their lines arrived or on the way, and the loop
/// that routes carries no prefetch-distance arithmetic (DPDK's l3fwd
/// prefetches a fixed distance ahead inside its loop; the two are alike in
/// what they overlap, and this one runs fewer instructions per packet).
#[inline(never)]
fn route_burst<R: Router>(r: &R, pkts: &mut [Mbuf], macs: &[PortMacs], dst: &mut [u16; 64]) -> u64 {
    let mut declined = 0u64;
    let n = pkts.len().min(dst.len());
    let pkts = &mut pkts[..n];
    for m in pkts.iter() {
        m.prefetch_data();
    }
    let mut last = LastPort::new();
    for (i, (m, d)) in pkts.iter_mut().zip(dst.iter_mut()).enumerate() {
        match route_fast(r, m, macs, &mut last) {
            Some(p) => *d = p as u16,
            None => declined |= 1 << i,
        }
    }
    declined
}

/// `dst` of a packet being dropped.
const DROP: u16 = u16::MAX;

/// Sends `burst` on `tx` with the configured retries; what is left is freed
/// and counted in `cfg.counters[counter]`.
#[inline(always)]
fn send(tx: &mut dyn TxQueue, burst: &mut BurstSlice, cfg: &L3Config<'_>, counter: usize) {
    tx.tx_burst(burst);
    let mut tries = cfg.tx_retry;
    while !burst.is_empty() && tries > 0 {
        std::hint::spin_loop();
        tx.tx_burst(burst);
        tries -= 1;
    }
    if !burst.is_empty() {
        cfg.counters[counter].drops.add(burst.len() as u64);
        burst.clear();
    }
}

// `dropped[why as usize]` relies on this order.
const _: () = {
    assert!(DropReason::NoRoute as usize == 0);
    assert!(DropReason::TtlExpired as usize == 1);
    assert!(DropReason::BadHeader as usize == 2);
    assert!(DropReason::BadChecksum as usize == 3);
    assert!(DropReason::Unwritable as usize == 4);
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::l3fwd::classify::fixtures::{Fixed, macs, pool, v4_frame};
    use sluice::mbuf::layout::ol;

    #[test]
    fn each_packet_gets_its_own_ports_macs_when_the_port_changes_mid_burst() {
        let pool = pool();
        let macs = macs();
        // Runs of each port, single packets between, and a packet to a port
        // that does not exist (declined) between two of the same port.
        let ports: [Option<u16>; 12] = [
            Some(1),
            Some(1),
            Some(0),
            Some(1),
            Some(0),
            Some(0),
            Some(0),
            None,
            Some(0),
            Some(1),
            None,
            Some(1),
        ];
        let mut burst = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            let dst = match p {
                Some(1) => [198, 18, 0, i as u8],
                Some(_) => [198, 19, 0, i as u8],
                None => [10, 0, 0, i as u8],
            };
            let f = v4_frame(dst, 64);
            let mut m = pool.alloc().unwrap();
            m.append(f.len()).unwrap().copy_from_slice(&f);
            m.set_ol_flags(ol::RX_IP_CKSUM_GOOD).unwrap();
            burst.push(m);
        }
        let mut dst = [DROP; 64];
        let declined = route_burst(&Fixed, &mut burst, &macs, &mut dst);
        assert_eq!(declined, 1 << 7 | 1 << 10);
        for (i, (m, p)) in burst.iter().zip(ports).enumerate() {
            match p {
                Some(p) => {
                    assert_eq!(dst[i], p, "packet {i}");
                    let mut want = [0; 12];
                    macs[p as usize].write(&mut want);
                    assert_eq!(m.data()[..12], want, "packet {i}");
                }
                None => assert_eq!(m.data()[..6], [8; 6], "packet {i}: untouched"),
            }
        }
        drop(burst);
        assert!(pool.is_full());
    }

    #[test]
    fn a_burst_routes_the_common_case_and_leaves_the_rest_untouched() {
        let pool = pool();
        let macs = macs();
        // 45 packets: every fifth one routed, the others declined for a
        // different reason each.
        let mut burst = Vec::new();
        let mut sent = Vec::new();
        let mut want_declined = 0u64;
        for i in 0..45u8 {
            let (f, flags, taken) = match i % 5 {
                0 => (v4_frame([198, 18, 0, i], 64), ol::RX_IP_CKSUM_GOOD, true),
                1 => (v4_frame([198, 18, 0, i], 1), ol::RX_IP_CKSUM_GOOD, false),
                2 => (v4_frame([198, 18, 0, i], 64), 0, false),
                3 => (v4_frame([10, 0, 0, i], 64), ol::RX_IP_CKSUM_GOOD, false),
                _ => (v4_frame([192, 0, 2, i], 64), ol::RX_IP_CKSUM_GOOD, false),
            };
            let mut m = pool.alloc().unwrap();
            m.append(f.len()).unwrap().copy_from_slice(&f);
            m.set_ol_flags(flags).unwrap();
            burst.push(m);
            sent.push(f);
            if !taken {
                want_declined |= 1 << i;
            }
        }
        let mut dst = [DROP; 64];
        let declined = route_burst(&Fixed, &mut burst, &macs, &mut dst);
        assert_eq!(declined, want_declined);
        for (i, (m, f)) in burst.iter().zip(&sent).enumerate() {
            if declined & 1 << i != 0 {
                assert_eq!(m.data(), &f[..], "packet {i}: declined, untouched");
                assert_eq!(dst[i], DROP, "packet {i}");
                continue;
            }
            // What the full path makes of the same frame.
            let mut full = pool.alloc().unwrap();
            full.append(f.len()).unwrap().copy_from_slice(f);
            assert_eq!(route(&Fixed, &mut full, &macs), Ok(1), "packet {i}");
            assert_eq!(dst[i], 1, "packet {i}");
            assert_eq!(m.data(), full.data(), "packet {i}");
        }
        drop(burst);
        assert!(pool.is_full());
    }
}
