//! Live packet capture from a running instance, as `sluice capture` asks
//! for it.
//!
//! - [`tap`]: a [`Tap`] per (port, queue, direction), called by the lcore
//!   polling that queue: one Relaxed load per burst while nothing is
//!   captured; while a capture runs, copies of the packets go into a
//!   bounded buffer the lcore never waits on (a full buffer drops the copy
//!   and counts it: `capture_overflow`).
//! - [`CaptureTaps`]: every tap of an application, shared (`Arc`) between
//!   its lcores and the capture thread.
//! - [`server`]: the capture thread, listening on `sluice_capture` in the
//!   instance's telemetry directory; one capture at a time.
//! - [`protocol`]: what the client and the server say to each other.
//! - [`client`]: the client's side of the protocol.
//! - [`pcapng`]: the capture file (SHB, IDB, EPB, ISB).

pub mod client;
pub mod pcapng;
pub mod protocol;
pub mod server;
pub mod tap;

use std::sync::Arc;

pub use client::CaptureClient;
pub use protocol::{CaptureEnd, CaptureRequest, CaptureStart, Interface};
pub use server::{CaptureServer, SOCKET_NAME};
pub use tap::{Direction, Record, Tap};

/// The taps of one port: one per Rx queue and one per Tx queue.
#[derive(Debug)]
pub struct PortTaps {
    rx: Vec<Arc<Tap>>,
    tx: Vec<Arc<Tap>>,
    /// The longest frame the port carries (the slots' size cap).
    max_frame: u32,
}

/// Every tap of an application (see the module docs).
#[derive(Debug)]
pub struct CaptureTaps {
    ports: Vec<PortTaps>,
}

impl CaptureTaps {
    /// Taps for ports with `(nb_rx_queues, nb_tx_queues, max_frame_len)`
    /// each, in port order.
    pub fn new(ports: &[(usize, usize, u32)]) -> Arc<CaptureTaps> {
        let taps = |n: usize| (0..n).map(|_| Arc::new(Tap::new())).collect();
        Arc::new(CaptureTaps {
            ports: ports
                .iter()
                .map(|&(rx, tx, max_frame)| PortTaps {
                    rx: taps(rx),
                    tx: taps(tx),
                    max_frame: max_frame.max(1),
                })
                .collect(),
        })
    }

    /// The taps of the ports of an application, from the ports themselves.
    pub fn for_ports(ports: &[sluice::port::Port]) -> Arc<CaptureTaps> {
        let shape: Vec<_> = ports
            .iter()
            .map(|p| {
                // MTU plus Ethernet header, two VLAN tags and the FCS.
                let max_frame = u32::from(p.config().mtu) + 14 + 8 + 4;
                (p.nb_rx_queues(), p.nb_tx_queues(), max_frame)
            })
            .collect();
        CaptureTaps::new(&shape)
    }

    /// Ports tapped.
    pub fn nb_ports(&self) -> usize {
        self.ports.len()
    }

    /// Queues of `port` in `direction` (0 for no such port).
    pub fn nb_queues(&self, port: usize, direction: Direction) -> usize {
        self.ports.get(port).map_or(0, |p| match direction {
            Direction::Rx => p.rx.len(),
            Direction::Tx => p.tx.len(),
        })
    }

    /// The longest frame `port` carries (0 for no such port).
    pub fn max_frame(&self, port: usize) -> u32 {
        self.ports.get(port).map_or(0, |p| p.max_frame)
    }

    /// The tap of `port`'s queue `queue` in `direction`.
    pub fn tap(&self, port: usize, queue: usize, direction: Direction) -> Option<&Arc<Tap>> {
        let p = self.ports.get(port)?;
        match direction {
            Direction::Rx => p.rx.get(queue),
            Direction::Tx => p.tx.get(queue),
        }
    }

    /// A tap no capture can reach, for queues an application does not
    /// show (never active).
    pub fn detached() -> Arc<Tap> {
        Arc::new(Tap::new())
    }

    /// Copies dropped on every tap, by (port, queue, direction), over the
    /// instance's life (`capture_overflow`).
    pub fn overflow(&self) -> Vec<(usize, usize, Direction, u64)> {
        let mut out = Vec::new();
        for (p, taps) in self.ports.iter().enumerate() {
            for (dir, list) in [(Direction::Rx, &taps.rx), (Direction::Tx, &taps.tx)] {
                for (q, t) in list.iter().enumerate() {
                    out.push((p, q, dir, t.overflow()));
                }
            }
        }
        out
    }
}
