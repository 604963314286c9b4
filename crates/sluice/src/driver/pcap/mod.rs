//! The `pcap` driver: packets from and to pcap files (the classic format
//! tshark and Wireshark read), as DPDK's `net_pcap` with files.
//!
//! Spec: `pcap:rx=FILE,tx=FILE,loop=BOOL,timing=BOOL,snaplen=N,stream=BOOL`
//! (at least one of `rx` and `tx`)
//! - `rx`: the file received packets come from, a regular file. It is read
//!   through and checked when the port is opened, so a truncated or corrupt
//!   file is an error at open that names the file, the record and the byte
//!   offset; `rx_burst` then reads it again a record at a time and copies
//!   packets into mbufs from the Rx pool (`rx.rs`). No file is held in
//!   memory, and no record longer than the format allows is read.
//! - `stream` (default false): `rx` may also be a FIFO or a character device
//!   (or a regular file still being written), read as a stream: opened
//!   without waiting for a writer, read as bytes arrive, `rx_burst` never
//!   blocks. A stream that is not pcap or goes corrupt counts one
//!   `rx_errors` (and `rx_file_errors`) and ends. Without `stream`, anything but a regular file is
//!   an error at open (a FIFO would block, `/dev/zero` never ends).
//! - `loop` (default false): start again at the end of the file; otherwise
//!   `rx_burst` returns 0 after the last packet. Not with `stream`.
//! - `timing` (default false): release packets with the file's gaps between
//!   their timestamps (by the TSC; `rx_burst` never sleeps, it returns 0
//!   until the next packet is due); otherwise at full speed.
//! - `tx`: the file sent packets are written to, a regular file created (or
//!   emptied) when the port is opened, or a character device such as
//!   `/dev/null`. A packet counts as sent once its record is written;
//!   a failed write counts its packets in `tx_errors` and
//!   `tx_write_errors` (`tx.rs`).
//! - `snaplen` (1..=262144, default 65535): bytes kept of each sent packet;
//!   the record keeps the original length.
//!
//! One Rx and one Tx queue at most. Without `rx` the Rx queue receives
//! nothing (and needs no pool); without `tx` the Tx queue frees what it is
//! given and counts it as sent.
//!
//! No two pcap ports of the process write one file, nor does one write a
//! file another reads (`claim.rs`): whatever paths name them, that is an
//! error at open naming both.
//!
//! [`format`](mod@format) reads and writes the file format itself.

mod claim;
pub mod format;
mod rx;
mod tx;

use std::sync::Arc;

use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxQueue, SinkTx, SpecArgs, SpecError, TxQueue,
};

use claim::FileClaim;
use format::MAX_CAPTURE;
use rx::{Clock, PcapRx, RxFile};
use tx::{PcapTx, open_tx_file};

/// Spec keys.
const KEYS: &[&str] = &["rx", "tx", "loop", "timing", "snaplen", "stream"];

/// The `tx` file, open.
struct TxFile {
    file: std::fs::File,
    /// Bytes written at open (the global header, for a regular file).
    written: u64,
    claim: Option<Arc<FileClaim>>,
}

/// Default snap length of written files.
pub const DEFAULT_SNAPLEN: u32 = 65_535;

/// The `pcap` driver.
pub struct PcapDriver {
    info: DeviceInfo,
    /// The `rx` file.
    rx: Option<Arc<RxFile>>,
    /// The `tx` file.
    tx: Option<TxFile>,
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
    stream: bool,
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
        let stream = args.bool("stream")?.unwrap_or(false);
        args.finish()?;
        if stream && looping {
            return Err(PortError::Driver(format!(
                "port spec '{}': loop replays a regular file; a stream cannot start again",
                spec.as_str()
            )));
        }
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
            stream,
        })
    }

    /// Reads the spec's arguments and opens the `rx` and `tx` files.
    pub fn from_spec(spec: &PortSpec) -> Result<PcapDriver, PortError> {
        let args = Self::parse_spec(spec)?;
        // The rx file is claimed first, so a tx file that is the same file
        // is refused before it is emptied.
        let capture = match args.rx {
            Some(path) => Some(Arc::new(RxFile::open(path, args.stream)?)),
            None => None,
        };
        let tx = match args.tx {
            Some(path) => {
                let (file, written, claim) = open_tx_file(path, args.snaplen)?;
                Some(TxFile {
                    file,
                    written,
                    claim: claim.map(Arc::new),
                })
            }
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
            tx,
            snaplen: args.snaplen,
            looping: args.looping,
            timing: args.timing,
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
                Some(t) => {
                    let file = t
                        .file
                        .try_clone()
                        .map_err(|e| PortError::io("pcap: tx file", e))?;
                    Box::new(PcapTx::new(
                        Box::new(file),
                        t.claim.clone(),
                        t.written,
                        self.snaplen,
                        Arc::clone(counters),
                        q,
                    ))
                }
                None => Box::new(SinkTx::new(counters, q)),
            });
        }
        Ok(Queues { rx, tx })
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
