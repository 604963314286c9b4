//! The distributor lcore of `sluice dist`: for each Rx port, `rx_burst`
//! then `process`; then `returned_pkts`, each returned packet queued for
//! the Tx port paired with the port it came in on, and `tx_burst` in
//! bursts of up to [`TX_BURST`] (with `--tx-retry` more attempts; what a
//! Tx queue still refuses is freed and counted). Every Tx queue is called
//! on every loop, empty or not, so an inline device model sends what its
//! ring holds.
//!
//! A burst `process` did not take whole (a full returns FIFO) stays with
//! its port, and that port is not polled again until it is empty. Returned
//! packets keep their order per Tx port, so a flow leaves in the order it
//! arrived.
//!
//! When told to stop, the lcore hands out what it still holds, `flush`es
//! until every worker has returned everything, sends the returns, and
//! gives back its distributor (dropping it ends the workers' loops).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sluice::counter::Counter;
use sluice::mbuf::{Burst, BurstSlice, Mbuf};
use sluice::net::{EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet, ip_proto, rss};
use sluice::port::{RxQueue, TxQueue};
use sluice::tsc::rdtsc;

use super::api::DistSide;
use crate::app::io::lcore::{LiveLcore, Publisher, StreamCounters};
use crate::app::lcores::Stall;

/// Largest Rx burst.
pub const MAX_BURST: usize = 64;
/// Largest Tx burst. A NIC-style Tx queue frees completed descriptors in
/// batches when fewer than its free threshold (32 by default) are free, so
/// a burst of up to 32 fits whenever the device has caught up; a larger one
/// may be cut short.
pub const TX_BURST: usize = 32;

/// One port as the lcore sees it.
pub struct PortQueues<'a> {
    /// Its Rx queue 0.
    pub rx: &'a mut dyn RxQueue,
    /// Its Tx queue 0.
    pub tx: &'a mut dyn TxQueue,
    /// Where packets received on it are sent (its pair).
    pub peer: usize,
    /// Its driver gives no RSS hash: the lcore computes one.
    pub soft_hash: bool,
}

/// Counters the lcore writes and the main thread reads.
#[derive(Debug, Default)]
pub struct LcoreCounters {
    /// Packets received, all ports.
    pub received: Counter,
    /// Per Tx port (as `sluice fwd`'s per-stream counters, one stream per
    /// port): returned packets its Tx queue refused (freed).
    pub tx: Arc<[StreamCounters]>,
}

impl LcoreCounters {
    /// Counters for `ports` ports.
    pub fn new(ports: usize) -> LcoreCounters {
        LcoreCounters {
            received: Counter::new(),
            tx: (0..ports).map(|_| StreamCounters::default()).collect(),
        }
    }
}

/// How the lcore runs.
#[derive(Clone, Copy)]
pub struct LcoreConfig<'a> {
    /// Packets asked per Rx call (1..=64).
    pub burst: usize,
    /// Tx attempts more before dropping.
    pub tx_retry: u32,
    /// Empty Tx calls per port at the end (an inline device sends up to 64
    /// frames per call: enough for a full Tx ring).
    pub kicks: usize,
    /// Set by the main thread to end the run.
    pub stop: &'a AtomicBool,
    /// Written here.
    pub counters: &'a LcoreCounters,
    /// The lcore's live cycles and polls, for watchers.
    pub live: &'a LiveLcore,
}

impl LcoreCycles {
    /// These counts as a forwarding lcore's (loops are polls; the total
    /// ticks are the publisher's to measure).
    pub fn as_forwarding(&self) -> crate::app::io::lcore::LcoreCycles {
        crate::app::io::lcore::LcoreCycles {
            busy_cycles: self.busy_cycles,
            packets: self.packets,
            polls: self.loops,
            idle_polls: self.loops - self.busy_loops,
            total_cycles: 0,
        }
    }
}

/// What the lcore measured.
#[derive(Debug, Default, Clone, Copy)]
pub struct LcoreCycles {
    /// TSC ticks of loop iterations that moved a packet.
    pub busy_cycles: u64,
    /// Packets received in them.
    pub packets: u64,
    /// Loop iterations, busy or not.
    pub loops: u64,
    /// Loop iterations that moved a packet.
    pub busy_loops: u64,
}

/// Runs the pipeline until `cfg.stop`, then drains it; returns the
/// distributor (not yet dropped, so its counters can be read with every
/// worker still attached) and the cycles measured.
pub fn run<D: DistSide>(
    mut d: D,
    ports: &mut [PortQueues<'_>],
    cfg: LcoreConfig<'_>,
) -> Result<(D, LcoreCycles), String> {
    let n = ports.len();
    let mut held: Vec<Burst<MAX_BURST>> = (0..n).map(|_| Burst::new()).collect();
    let mut out: Vec<Burst<TX_BURST>> = (0..n).map(|_| Burst::new()).collect();
    let mut returns = Burst::<MAX_BURST>::new();
    let mut c = LcoreCycles::default();
    let mut publisher = Publisher::new(cfg.live);
    while !cfg.stop.load(Ordering::Relaxed) {
        let t0 = rdtsc();
        let mut rx = 0;
        for (p, q) in ports.iter_mut().enumerate() {
            let b = &mut held[p];
            if b.is_empty() {
                let got = q.rx.rx_burst(b.capped(cfg.burst));
                if got != 0 && q.soft_hash {
                    hash_in_software(b);
                }
                rx += got;
            }
            d.process(b);
        }
        let tx = send_returns(&mut d, ports, &mut returns, &mut out, cfg);
        c.loops += 1;
        if rx + tx != 0 {
            c.busy_loops += 1;
            c.busy_cycles += rdtsc().wrapping_sub(t0);
            c.packets += rx as u64;
            cfg.counters.received.add(rx as u64);
        }
        publisher.tick_with(|| c.as_forwarding());
    }
    publisher.publish(&c.as_forwarding());
    // Drain: what is held goes out, then everything the workers hold.
    let mut stall = Stall::new("distributor lcore (draining)");
    loop {
        let mut left = 0;
        for b in held.iter_mut() {
            d.process(b);
            left += b.len();
        }
        left += d.flush();
        let sent = send_returns(&mut d, ports, &mut returns, &mut out, cfg);
        if left == 0 && sent == 0 {
            // Let inline devices send what their Tx rings still hold.
            for _ in 0..cfg.kicks {
                for t in 0..n {
                    transmit(ports, &mut out, t, cfg);
                }
            }
            return Ok((d, c));
        }
        if sent == 0 {
            stall.failed()?;
        } else {
            stall.progressed();
        }
    }
}

/// Collects every returned packet and sends it on the Tx port paired with
/// its Rx port; returns how many were collected.
fn send_returns<D: DistSide>(
    d: &mut D,
    ports: &mut [PortQueues<'_>],
    returns: &mut Burst<MAX_BURST>,
    out: &mut [Burst<TX_BURST>],
    cfg: LcoreConfig<'_>,
) -> usize {
    let mut total = 0;
    loop {
        let n = d.returned_pkts(returns);
        if n == 0 {
            break;
        }
        total += n;
        for m in returns.drain_front(n) {
            let t = ports.get(m.port() as usize).map_or(0, |q| q.peer);
            if out[t].is_full() {
                transmit(ports, out, t, cfg);
            }
            // Room made above.
            let _ = out[t].push(m);
        }
    }
    // Every Tx queue, even with nothing to send: an empty call lets an
    // inline device send what its ring still holds.
    for t in 0..out.len() {
        transmit(ports, out, t, cfg);
    }
    total
}

/// Sends `out[t]` on port `t` (an empty burst too: see `send_returns`),
/// retrying `cfg.tx_retry` times; frees and counts what is left.
fn transmit(
    ports: &mut [PortQueues<'_>],
    out: &mut [Burst<TX_BURST>],
    t: usize,
    cfg: LcoreConfig<'_>,
) {
    let b = &mut out[t];
    ports[t].tx.tx_burst(b);
    let mut tries = 0;
    while !b.is_empty() && tries < cfg.tx_retry {
        ports[t].tx.tx_burst(b);
        tries += 1;
    }
    if !b.is_empty() {
        cfg.counters.tx[t].drops.add(b.len() as u64);
        b.clear();
    }
}

/// Gives each packet of `b` the RSS hash a NIC would: Toeplitz with the
/// default key over the IPv4/IPv6 addresses and, for TCP and UDP, the ports
/// (0 for anything else).
fn hash_in_software(b: &mut BurstSlice) {
    for m in b.iter_mut() {
        let h = soft_rss_hash(m);
        // A received packet is unshared: this cannot fail.
        let _ = m.set_rss_hash(h);
    }
}

/// The RSS hash of `m`'s headers (see [`hash_in_software`]).
pub fn soft_rss_hash(m: &Mbuf) -> u32 {
    let Ok(eth) = EthernetFrame::new_checked(m.data()) else {
        return 0;
    };
    let l4_ports = |proto: u8, l4: &[u8]| {
        (matches!(proto, ip_proto::TCP | ip_proto::UDP) && l4.len() >= 4).then(|| {
            (
                u16::from_be_bytes([l4[0], l4[1]]),
                u16::from_be_bytes([l4[2], l4[3]]),
            )
        })
    };
    let key = &rss::DEFAULT_KEY;
    match eth.ethertype() {
        EtherType::IPV4 => match Ipv4Packet::new_checked(eth.payload()) {
            Ok(ip) => {
                let ports = if ip.more_frags() || ip.frag_offset() != 0 {
                    None
                } else {
                    l4_ports(ip.protocol(), ip.payload())
                };
                rss::ipv4(key, ip.src(), ip.dst(), ports)
            }
            Err(_) => 0,
        },
        EtherType::IPV6 => match Ipv6Packet::new_checked(eth.payload()) {
            Ok(ip) => rss::ipv6(
                key,
                ip.src(),
                ip.dst(),
                l4_ports(ip.next_header(), ip.payload()),
            ),
            Err(_) => 0,
        },
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice::mbuf::{MbufPool, MbufPoolConfig};

    #[test]
    fn software_hash_matches_the_nic_formula() {
        let pool = MbufPool::new(MbufPoolConfig {
            size: 15,
            cache_size: 0,
            ..Default::default()
        })
        .unwrap();
        let frame = [
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00, // Ethernet, IPv4
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0x66, 0xcf, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
            0x04, 0xd2, 0, 80, 0, 8, 0, 0, // UDP 1234 -> 80
        ];
        let m = pool.alloc_from_slice(&frame).unwrap();
        let want = rss::ipv4(
            &rss::DEFAULT_KEY,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            Some((1234, 80)),
        );
        assert_eq!(soft_rss_hash(&m), want);
        let junk = pool.alloc_from_slice(&[0u8; 20]).unwrap();
        assert_eq!(soft_rss_hash(&junk), 0);
        drop((m, junk));
        assert!(pool.is_full());
    }
}
