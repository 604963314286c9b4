//! The `pcap` driver: packets from and to pcap files (the classic format
//! tshark and Wireshark read), as DPDK's `net_pcap` with files.
//!
//! Spec: `pcap:rx=FILE,tx=FILE,loop=BOOL,timing=BOOL,snaplen=N` (at least one
//! of `rx` and `tx`)
//! - `rx`: the file received packets come from. It is read and checked
//!   completely when the port is opened, so a truncated or corrupt file is an
//!   error at open that names the file and the byte offset. `rx_burst`
//!   copies packets into mbufs from the Rx pool (`rx.rs`).
//! - `loop` (default false): start again at the end of the file; otherwise
//!   `rx_burst` returns 0 after the last packet.
//! - `timing` (default false): release packets with the file's gaps between
//!   their timestamps (by the TSC; `rx_burst` never sleeps, it returns 0
//!   until the next packet is due); otherwise at full speed.
//! - `tx`: the file sent packets are written to, created (or emptied) when
//!   the port is opened (`tx.rs`).
//! - `snaplen` (1..=262144, default 65535): bytes kept of each sent packet;
//!   the record keeps the original length.
//!
//! One Rx and one Tx queue at most. Without `rx` the Rx queue receives
//! nothing (and needs no pool); without `tx` the Tx queue frees what it is
//! given and counts it as sent.
//!
//! [`format`](mod@format) reads and writes the file format itself.

pub mod format;
mod rx;
mod tx;

use std::sync::Arc;

use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxQueue, SinkTx, SpecArgs, SpecError, TxQueue,
};

use format::MAX_CAPTURE;
use rx::{Capture, Clock, PcapRx};
use tx::PcapTx;

/// Spec keys.
const KEYS: &[&str] = &["rx", "tx", "loop", "timing", "snaplen"];

/// Default snap length of written files.
pub const DEFAULT_SNAPLEN: u32 = 65_535;

/// The `pcap` driver.
pub struct PcapDriver {
    info: DeviceInfo,
    /// The packets of the `rx` file.
    rx: Option<Arc<Capture>>,
    /// The `tx` file.
    tx: Option<String>,
    snaplen: u32,
    looping: bool,
    timing: bool,
    /// What `timing` reads the time from (the TSC; tests replace it).
    pub(crate) clock: Clock,
}

/// A pcap spec's arguments, read and checked; no file touched yet.
pub(crate) struct PcapArgs<'a> {
    rx: Option<&'a str>,
    tx: Option<&'a str>,
    looping: bool,
    timing: bool,
    snaplen: u32,
}

impl PcapDriver {
    /// Reads and checks the spec's arguments, touching no file.
    pub(crate) fn parse_spec(spec: &PortSpec) -> Result<PcapArgs<'_>, PortError> {
        let mut args = SpecArgs::new(spec, KEYS);
        let rx = args.str("rx");
        let tx = args.str("tx");
        let looping = args.bool("loop")?.unwrap_or(false);
        let timing = args.bool("timing")?.unwrap_or(false);
        let snaplen = args
            .u64_in("snaplen", 1..=MAX_CAPTURE as u64)?
            .map_or(DEFAULT_SNAPLEN, |n| n as u32);
        args.finish()?;
        if rx.is_none() && tx.is_none() {
            return Err(SpecError::MissingKey {
                spec: spec.as_str().to_owned(),
                driver: "pcap".into(),
                key: "rx or tx".into(),
            }
            .into());
        }
        Ok(PcapArgs {
            rx,
            tx,
            looping,
            timing,
            snaplen,
        })
    }

    /// Reads the spec's arguments, and the `rx` file.
    pub fn from_spec(spec: &PortSpec) -> Result<PcapDriver, PortError> {
        let PcapArgs {
            rx,
            tx,
            looping,
            timing,
            snaplen,
        } = Self::parse_spec(spec)?;
        let capture = match rx {
            Some(path) => Some(Arc::new(Capture::load(path)?)),
            None => None,
        };
        Ok(PcapDriver {
            info: DeviceInfo {
                driver: "pcap",
                max_rx_queues: 1,
                max_tx_queues: 1,
                nb_rxd: (1, u16::MAX),
                nb_txd: (1, u16::MAX),
                desc_pow2: false,
                max_mtu: 9000,
                rx_offload_capa: Offloads::MULTI_SEG,
                tx_offload_capa: Offloads::FAST_FREE | Offloads::MULTI_SEG,
                needs_rx_pool: capture.is_some(),
                mac: MacAddr([0x02, 0, 0, 0x70, 0x63, 0]),
            },
            rx: capture,
            tx: tx.map(str::to_owned),
            snaplen,
            looping,
            timing,
            clock: Clock::tsc(),
        })
    }
}

impl PortDriver for PcapDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::new();
        for q in 0..config.rxq.len() {
            let pool = config.rx_pool_of(q).cloned();
            rx.push(Box::new(PcapRx::new(
                self.rx.clone(),
                pool,
                config,
                self.looping,
                self.timing.then(|| self.clock.clone()),
                Arc::clone(counters),
                q,
            )));
        }
        let mut tx: Vec<Box<dyn TxQueue>> = Vec::new();
        for q in 0..config.txq.len() {
            tx.push(match &self.tx {
                Some(path) => {
                    Box::new(PcapTx::create(path, self.snaplen, Arc::clone(counters), q)?)
                }
                None => Box::new(SinkTx::new(counters, q)),
            });
        }
        Ok(Queues { rx, tx })
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
