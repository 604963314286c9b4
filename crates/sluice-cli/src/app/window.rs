//! A measured window: forwarding runs for a warm-up, then the figures cover
//! a fixed duration after it, the drain excluded.
//!
//! The main thread reads every port's shared counters (and the inline
//! devices' `device_cycles`) when it opens the window and again when it
//! closes it; the forwarding lcores restart their cycle counts when they
//! see it open and freeze them when they see it close
//! ([`Window`](super::lcore::Window)). The figures are the differences.

use std::time::Instant;

use serde::Serialize;

use super::io::lcore::LcoreCycles;
use super::stats::{PortSample, Sources};
use super::summary::cycles_per_packet;

/// The counters at one end of the window.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When they were read.
    pub at: Instant,
    /// Every port's counters.
    pub ports: Vec<PortSample>,
    /// The `device_cycles` of the ports whose device runs inline (their
    /// work inside the lcores' calls).
    pub device_cycles: u64,
}

impl Snapshot {
    /// Reads the counters now; `inline[p]` says whether port `p`'s device
    /// cycles are the lcores'.
    pub fn take(src: &Sources<'_>, inline: &[bool]) -> Snapshot {
        let device_cycles = src
            .ports
            .iter()
            .zip(inline)
            .filter(|(_, inline)| **inline)
            .map(|(c, _)| c.xstats.get("device_cycles").unwrap_or(0))
            .sum();
        Snapshot {
            at: Instant::now(),
            ports: src.sample(),
            device_cycles,
        }
    }
}

/// What the window measured, all ports together.
#[derive(Serialize, Debug, Clone, Copy, PartialEq)]
pub struct WindowFigures {
    /// Its length, seconds.
    pub secs: f64,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Packets the Tx queues did not take (freed).
    pub drops: u64,
    /// Packets the devices dropped for want of an Rx descriptor.
    pub rx_missed: u64,
    /// Rx refills that found the pool empty.
    pub rx_nombuf: u64,
    /// Received, millions per second.
    pub rx_mpps: f64,
    /// Sent, millions per second.
    pub tx_mpps: f64,
    /// TSC ticks the lcores spent in polls that received packets.
    pub busy_cycles: u64,
    /// Packets received in those polls.
    pub busy_packets: u64,
    /// Inline devices' cycles inside those polls, subtracted.
    pub device_cycles: u64,
    /// `(busy_cycles - device_cycles) / busy_packets`; `None` when nothing
    /// moved.
    pub cycles_per_packet: Option<f64>,
}

impl WindowFigures {
    /// The differences between `open` and `close`, with the lcores' counts
    /// over the same window.
    pub fn new(open: &Snapshot, close: &Snapshot, lcores: &[LcoreCycles]) -> WindowFigures {
        let secs = close.at.duration_since(open.at).as_secs_f64().max(1e-9);
        let sum = |f: fn(&PortSample) -> u64| -> u64 {
            let a: u64 = open.ports.iter().map(f).sum();
            let b: u64 = close.ports.iter().map(f).sum();
            b.saturating_sub(a)
        };
        let (rx, tx) = (sum(|s| s.rx), sum(|s| s.tx));
        let device = close.device_cycles.saturating_sub(open.device_cycles);
        let (busy_cycles, busy_packets, cpp) = cycles_per_packet(lcores, device);
        WindowFigures {
            secs,
            rx_packets: rx,
            tx_packets: tx,
            drops: sum(|s| s.drops),
            rx_missed: sum(|s| s.rx_missed),
            rx_nombuf: sum(|s| s.rx_nombuf),
            rx_mpps: rx as f64 / secs / 1e6,
            tx_mpps: tx as f64 / secs / 1e6,
            busy_cycles,
            busy_packets,
            device_cycles: device,
            cycles_per_packet: cpp,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn figures_are_the_differences_over_the_window() {
        let at = Instant::now();
        let port = |rx, tx, drops| PortSample {
            rx,
            tx,
            drops,
            rx_missed: rx / 10,
            rx_nombuf: 0,
            rx_errors: 0,
            tx_errors: 0,
        };
        let open = Snapshot {
            at,
            ports: vec![port(100, 90, 1), port(50, 40, 0)],
            device_cycles: 1000,
        };
        let close = Snapshot {
            at: at + Duration::from_millis(500),
            ports: vec![port(1100, 1090, 3), port(1050, 1040, 0)],
            device_cycles: 3000,
        };
        let l = [LcoreCycles {
            busy_cycles: 10_000,
            packets: 2000,
            ..Default::default()
        }];
        let w = WindowFigures::new(&open, &close, &l);
        assert_eq!((w.rx_packets, w.tx_packets, w.drops), (2000, 2000, 2));
        assert_eq!(w.rx_missed, 200);
        assert_eq!(w.device_cycles, 2000);
        assert_eq!(w.cycles_per_packet, Some(4.0));
        assert!((w.rx_mpps - 0.004).abs() < 1e-12, "{}", w.rx_mpps);
    }

    #[test]
    fn a_warm_up_gives_a_window_inside_the_run_and_every_buffer_comes_home() {
        use std::cell::Cell;

        use crate::app::io::tests::SAFETY_NET_SECS;
        use crate::app::io::{measure, measure_until};
        use crate::app::options::{Engine, FwdArgs};
        let spec = "soft:tester=fwd_window_unit,gen=udp,flows=64,size=64,device=inline";
        let mut args = FwdArgs::with_specs(vec![spec.into(), spec.into()]);
        args.engine = Engine::Mac;
        args.run.duration = SAFETY_NET_SECS;
        args.run.stats_period = 100.0;
        args.queues.rxd = 128;
        args.queues.txd = 256;
        args.queues.cache = 64;
        // The window closes once it lasted 0.1 s and received 1024 packets,
        // however slow the machine is: `enough` is first asked when the
        // window opens, and takes its start then.
        let start = Cell::new(None);
        let enough = |ports: &[std::sync::Arc<sluice::port::PortCounters>]| {
            let rx: u64 = ports.iter().map(|c| c.stats().rx_packets).sum();
            let (at, rx_at_open) = start.get().unwrap_or((Instant::now(), rx));
            start.set(Some((at, rx_at_open)));
            at.elapsed() >= Duration::from_millis(100) && rx - rx_at_open >= 1024
        };
        let m = measure_until(&args, Some(0.05), Some(&enough)).unwrap();
        let w = m.window.expect("a warm-up gives a window");
        assert!(
            w.secs < SAFETY_NET_SECS,
            "1024 packets not received in the window"
        );
        let s = &m.summary;
        assert!(s.pool_full && s.clean, "{s:?}");
        assert!(
            w.rx_packets > 0 && w.rx_packets < s.rx_packets,
            "{w:?} {s:?}"
        );
        assert!(
            w.busy_packets > 0 && w.secs >= 0.1 && w.secs < s.duration_s,
            "{w:?}"
        );
        assert!(w.device_cycles > 0);
        // The lcores counted the window only; so does the summary.
        let cycles = (w.busy_cycles, w.busy_packets, w.device_cycles);
        assert_eq!(cycles, (s.busy_cycles, s.busy_packets, s.device_cycles));
        assert_eq!(w.cycles_per_packet, s.cycles_per_packet);
        assert_eq!((w.drops, w.rx_missed, w.rx_nombuf), (0, 0, 0));
        // The tester saw every packet: the drain ran after the window.
        assert_eq!(s.testers.len(), 1);
        assert_eq!(s.testers[0].received, s.testers[0].sent);
        args.run.duration = 0.1;
        assert!(measure(&args, None).unwrap().window.is_none());
    }
}
