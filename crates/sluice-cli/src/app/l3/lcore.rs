//! The l3fwd lcore: polls its Rx queues, routes each burst, sends to every
//! port through its own Tx queues.
//!
//! Lcore `i` owns Tx queue `i` of every port (so any packet can leave by
//! any port without sharing a queue) and a share of all ports' Rx queues.
//! Per Rx burst: the common case is routed in one loop ([`route_burst`]),
//! which notes a port only where the route changes; a burst that took one
//! route goes whole to its port's Tx queue. Otherwise each packet's port is
//! spread from its run, what the loop declined goes through the full checks
//! ([`route`]) or is dropped with its reason, and each non-empty output
//! burst goes to its Tx queue. Sends get `--tx-retry` more tries; what is
//! left is freed and counted as that port's drop. Cycles are counted as in
//! `sluice fwd`: busy polls only, from before `rx_burst` to after the last
//! `tx_burst`.

use std::sync::atomic::{AtomicBool, Ordering};

use sluice::counter::Counter;
use sluice::mbuf::{Burst, BurstSlice, Mbuf, MbufPool};
use sluice::port::{RxQueue, TxQueue};
use sluice::tsc::{self, rdtsc};

use super::classify::{DropReason, LastPort, PortMacs, Router, Taken, route, route_fast};
use crate::app::io::lcore::{LcoreCycles, LiveLcore, Publisher, StreamCounters};
use crate::app::summary::RouteDrops;

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
    runt: Counter,
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
            runt: self.runt.get(),
        }
    }

    fn add(&self, local: &[u64; 6]) {
        for (c, n) in [
            &self.no_route,
            &self.ttl_expired,
            &self.bad_header,
            &self.bad_checksum,
            &self.unwritable,
            &self.runt,
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
            runt: a.runt + b.runt,
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
    live: &LiveLcore,
) -> Result<LcoreCycles, String> {
    if let Some(cpu) = cpu
        && let Err(e) = sluice::lcore::pin_current_thread(cpu)
    {
        eprintln!("sluice l3fwd: warning: forwarding lcore not pinned: {e}");
    }
    let guard = sluice::lcore::register().map_err(|e| format!("cannot register an lcore: {e}"))?;
    live.start(cpu);
    let r = run(router, lc, cfg, live);
    pool.flush_local_cache();
    drop(guard);
    Ok(r)
}

#[inline(never)]
fn run<R: Router>(
    router: &R,
    lc: &mut L3Lcore<'_>,
    cfg: L3Config<'_>,
    live: &LiveLcore,
) -> LcoreCycles {
    let mut bufs = Bursts::new(lc.tx.len());
    let mut c = LcoreCycles::default();
    let mut publisher = Publisher::new(live);
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
        publisher.tick(&c);
    }
    publisher.publish(&c);
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
    // Route in place: the common case for the whole burst in one tight
    // loop, which notes a packet's port only where the route changes; then
    // anything it declined (IPv6, options, a header to check in software,
    // a drop) through the full checks.
    let mut dst = [DROP; 64];
    let pkts = burst.as_mut_slice();
    let Routed {
        mut declined,
        starts,
    } = route_burst(router, pkts, cfg.macs, &mut dst);
    if declined == 0 && starts == 1 {
        // The common case: the whole burst took one route.
        let p = dst[0] as usize;
        send(&mut *lc.tx[p], burst, cfg, lc.counters_base + p);
        return n;
    }
    // Each packet's port (or DROP): the runs' ports spread over the packets
    // the fast path took, then the full path's verdicts.
    spread_runs(declined, starts, &mut dst[..n]);
    if declined != 0 {
        let mut dropped = [0u64; 6];
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

/// What [`route_burst`] did with a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Routed {
    /// Bit `i` set: packet `i` declined, left untouched.
    declined: u64,
    /// Bit `i` set: packet `i` was taken and starts a run of packets taken
    /// with the same route; its port is in `dst[i]`. Every taken packet up
    /// to the next start (declined ones aside) has that port.
    starts: u64,
}

/// [`route_fast`] over a burst (at most 64 packets). A packet's port is
/// written to `dst` only where the route changes ([`Routed::starts`]): a
/// burst that took one route is `starts == 1` with its port in `dst[0]`. A
/// function of its own, called once a burst, so that its loop has the
/// registers to itself (the tables, the last route).
///
/// Every packet's headers are prefetched first, then routed: the loads of
/// the second loop find their lines arrived or on the way, and the loop
/// that routes carries no prefetch-distance arithmetic (DPDK's l3fwd
/// prefetches a fixed distance ahead inside its loop; the two are alike in
/// what they overlap, and this one runs fewer instructions per packet).
#[inline(never)]
fn route_burst<R: Router>(
    r: &R,
    pkts: &mut [Mbuf],
    macs: &[PortMacs],
    dst: &mut [u16; 64],
) -> Routed {
    let mut out = Routed {
        declined: 0,
        starts: 0,
    };
    let n = pkts.len().min(dst.len());
    let pkts = &mut pkts[..n];
    for m in pkts.iter() {
        m.prefetch_data();
    }
    let mut last = LastPort::new();
    for (i, (m, d)) in pkts.iter_mut().zip(dst.iter_mut()).enumerate() {
        match route_fast(r, m, macs, &mut last) {
            Some(Taken {
                new_route: false, ..
            }) => {}
            Some(Taken { port, .. }) => {
                *d = port as u16;
                out.starts |= 1 << i;
            }
            None => out.declined |= 1 << i,
        }
    }
    out
}

/// Gives every packet [`route_burst`] took its port in `dst`: the port of
/// the run it is in ([`Routed::starts`]). Declined packets' entries are left
/// as they are.
fn spread_runs(declined: u64, starts: u64, dst: &mut [u16]) {
    let mut port = DROP;
    for (i, d) in dst.iter_mut().enumerate() {
        if starts >> i & 1 != 0 {
            port = *d;
        } else if declined >> i & 1 == 0 {
            *d = port;
        }
    }
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
    assert!(DropReason::Runt as usize == 5);
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::l3::classify::fixtures::{Fixed, macs, pool, v4_frame};
    use sluice::mbuf::layout::ol;

    /// One `poll` over a burst that takes both ports, in runs, with drops
    /// and packets only the full path takes: each packet leaves by its
    /// route's port, in order, with that port's MACs; drops are counted by
    /// reason; every buffer comes back.
    #[test]
    fn a_poll_sends_each_run_to_its_port_and_counts_the_drops() {
        use sluice::port::PortConfig;
        let pool = pool();
        let open = |name: &str| {
            let spec = format!("pair:name=l3fwd_poll_{name}_{}", std::process::id());
            let a = sluice::driver::open(&spec, PortConfig::new(Some(pool.clone()))).unwrap();
            let b = sluice::driver::open(&spec, PortConfig::new(Some(pool.clone()))).unwrap();
            (a, b)
        };
        // The router's ports 0 and 1 are the B ends; the A ends feed and
        // watch them.
        let ((mut a0, mut b0), (mut a1, mut b1)) = (open("p0"), open("p1"));
        for p in [&mut a0, &mut b0, &mut a1, &mut b1] {
            p.start().unwrap();
        }
        // (destination, TTL, checksum verified by the device, expected port)
        let good = true;
        let cases: [([u8; 4], u8, bool, Option<usize>); 12] = [
            ([198, 18, 0, 1], 64, good, Some(1)),
            ([198, 18, 0, 2], 64, good, Some(1)),
            ([198, 19, 0, 3], 64, good, Some(0)),
            ([192, 0, 2, 4], 64, good, None), // no route
            ([198, 19, 0, 5], 64, good, Some(0)),
            ([198, 18, 0, 6], 64, !good, Some(1)), // the full path checks it
            ([198, 18, 0, 7], 64, good, Some(1)),
            ([198, 18, 0, 8], 1, good, None), // TTL expired
            ([198, 18, 0, 9], 64, good, Some(1)),
            ([10, 0, 0, 10], 64, good, None), // port 7: no such port
            ([198, 19, 0, 11], 64, !good, Some(0)),
            ([198, 19, 0, 12], 64, good, Some(0)),
        ];
        let mut burst: Burst<64> = Burst::new();
        for (dst, ttl, verified, _) in cases {
            let f = v4_frame(dst, ttl);
            let mut m = pool.alloc().unwrap();
            m.append(f.len()).unwrap().copy_from_slice(&f);
            m.set_ol_flags(if verified { ol::RX_IP_CKSUM_GOOD } else { 0 })
                .unwrap();
            burst.push(m).unwrap();
        }
        {
            let (_, tx) = a0.queues_mut().unwrap();
            tx[0].tx_burst(&mut burst);
            assert!(burst.is_empty());
        }
        let macs = macs();
        let drops = RouteDropCounters::default();
        let tx_drops = [StreamCounters::default(), StreamCounters::default()];
        let stop = AtomicBool::new(false);
        let cfg = L3Config {
            burst: 32,
            tx_retry: 0,
            counters: &tx_drops,
            macs: &macs,
            stop: &stop,
        };
        {
            let (rx0, tx0) = b0.queues_mut().unwrap();
            let (_, tx1) = b1.queues_mut().unwrap();
            let mut lc = L3Lcore {
                rx: vec![rx0[0].as_mut()],
                tx: vec![tx0[0].as_mut(), tx1[0].as_mut()],
                counters_base: 0,
                drops: &drops,
            };
            let mut bufs = Bursts::new(2);
            assert_eq!(poll(&Fixed, &mut lc, 0, &mut bufs, &cfg), cases.len());
        }
        let d = drops.get();
        assert_eq!((d.no_route, d.ttl_expired), (2, 1), "{d:?}");
        assert_eq!(tx_drops.iter().map(|c| c.drops.get()).sum::<u64>(), 0);
        for (port, a) in [&mut a0, &mut a1].into_iter().enumerate() {
            let want: Vec<u8> = cases
                .iter()
                .filter(|c| c.3 == Some(port))
                .map(|c| c.0[3])
                .collect();
            let mut got: Burst<64> = Burst::new();
            let (rx, _) = a.queues_mut().unwrap();
            rx[0].rx_burst(&mut got);
            let mut head = [0; 12];
            macs[port].write(&mut head);
            for m in got.as_mut_slice().iter() {
                assert_eq!(m.data()[..12], head, "port {port}");
                assert_eq!(m.data()[14 + 8], 63, "port {port}: TTL");
            }
            let tags: Vec<u8> = got.as_mut_slice().iter().map(|m| m.data()[33]).collect();
            assert_eq!(
                tags, want,
                "port {port}: the packets routed there, in order"
            );
            got.clear();
        }
        for p in [&mut a0, &mut b0, &mut a1, &mut b1] {
            p.stop();
        }
        drop((a0, b0, a1, b1));
        assert!(pool.is_full());
    }

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
        let routed = route_burst(&Fixed, &mut burst, &macs, &mut dst);
        // A run starts where the port changes; a declined packet does not
        // end one.
        let starts = 1 << 0 | 1 << 2 | 1 << 3 | 1 << 4 | 1 << 9;
        assert_eq!(
            routed,
            Routed {
                declined: 1 << 7 | 1 << 10,
                starts
            }
        );
        for (i, &d) in dst[..ports.len()].iter().enumerate() {
            if starts >> i & 1 == 0 {
                assert_eq!(d, DROP, "packet {i}: not a run's start");
            }
        }
        spread_runs(routed.declined, routed.starts, &mut dst[..ports.len()]);
        for (i, (m, p)) in burst.iter().zip(ports).enumerate() {
            match p {
                Some(p) => {
                    assert_eq!(dst[i], p, "packet {i}");
                    let mut want = [0; 12];
                    macs[p as usize].write(&mut want);
                    assert_eq!(m.data()[..12], want, "packet {i}");
                }
                None => {
                    assert_eq!(dst[i], DROP, "packet {i}");
                    assert_eq!(m.data()[..6], [8; 6], "packet {i}: untouched");
                }
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
        let routed = route_burst(&Fixed, &mut burst, &macs, &mut dst);
        // One route: one run, from packet 0.
        assert_eq!(
            routed,
            Routed {
                declined: want_declined,
                starts: 1
            }
        );
        let declined = routed.declined;
        spread_runs(declined, routed.starts, &mut dst[..burst.len()]);
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
