//! `soft`: the emulated NIC — a device model with the memory interface of a
//! real NIC, cabled to the built-in tester or to another soft port.
//!
//! # Layout
//! The folders keep the two sides of the NIC apart:
//! - `device/`: the device model, what the silicon does — the Rx engine
//!   (DMA through IOVA = VA descriptors, RSS, checksum offloads, write-back
//!   with release) with the queue registers, `device/tx_engine` (WQE
//!   checks and execution, TSO, tunnel checksums, completions), `frame`
//!   (the device's parser: RSS hash, checksums), `wire` (two soft ports
//!   cabled together), [`bus`] (bus bytes by direction and link
//!   utilisation, for reports) and `runner` (the one device thread of
//!   threaded ports).
//! - `driver/`: what a real poll-mode driver runs — the Rx and Tx queues
//!   (`rx`, `tx`: descriptor and WQE rings, software rings of mbufs, one
//!   doorbell per batch or burst, Tx buffers freed by completion in
//!   batches), `fast_free` and `rx_frags` (Rx buffers from page-pool
//!   fragments).
//! - `hw/`: the formats both sides share — [`desc`] (16-byte Rx and Tx
//!   descriptors in 64-byte-aligned rings of atomic words), [`wqe`] (Tx
//!   work-queue and completion-queue entries) and `regs` (each queue's
//!   register block: ring, tail register, completion queue). The device
//!   model and the driver both import them; neither owns them.
//! - this file: the `soft` port driver, which reads the spec and builds
//!   both sides at setup.
//!
//! The driver reaches the device only through descriptor memory,
//! doorbells, registers and completions, and through the two hooks of the
//! emulation that a real NIC does not need (`device::QueueEngine`): the
//! inline device step (`device=inline` runs the device on the driver's
//! thread, inside its bursts) and the queue reset under the engine lock.
//!
//! Tests: unit tests of one module sit inside it (`mod tests`); tests that
//! drive whole soft ports sit in `tests/` (`tests/mod.rs` and one file per
//! topic: fast free, recycling, WQE formats).
//!
//! Spec: `soft[:key=value,...]`
//! - tester keys (`gen`, `flows`, `size`, `rate`, `count`, see
//!   `crate::tester`) and `tester=NAME`: the port is cabled to tester NAME
//!   (default `t0`) and adds one stream of its own. With no source key at
//!   all the port joins tester `t0` as it is (or with its defaults).
//! - `wire=NAME`: cabled to the other soft port with the same `wire`
//!   (exclusive with the tester keys). Both ends must be open when a port
//!   starts: a wire with one end is an error naming it.
//! - `device=inline|threaded` (default inline): where the device runs —
//!   inside the queue calls (deterministic) or on the process's device
//!   thread.
//! - `fc=on|off` (default on): link flow control. On: a full Rx ring holds
//!   the source back (802.3x PAUSE). Off: frames with no descriptor are
//!   dropped and counted in `rx_missed`.
//! - `rx_free_thresh` (default 32): Rx refill batch; a power of two,
//!   4..=`nb_rxd`.
//! - `txmode=wqe|mpwqe` (default mpwqe): Tx WQE format — one regular WQE
//!   per packet, or multi-packet WQEs wherever the packet allows (see
//!   `tx` and [`wqe`]).
//! - `mpw_segs` (default 62, 1..=62): most data segments in one MPWQE.
//! - `inline_mpw` (default 0, at most what `mpw_segs` segments hold):
//!   packets up to this many bytes are copied into the MPWQE instead of
//!   pointed to.
//! - `tx_comp` (default 0): also ask a completion every so many WQEs (1:
//!   one per WQE); completions are asked at least every `tx_rs_thresh`
//!   packets and every half ring of blocks anyway.
//! - `tx_rs_thresh` (default 32): Tx buffers are freed in batches of so
//!   many packets, and a completion asked at least that often; a power of
//!   two, 4..=`nb_txd`.
//! - `tx_free_thresh` (default 32): free completed Tx buffers when fewer
//!   slots than this are free; `tx_rs_thresh..=nb_txd`.
//! - `bus_overhead` (default 24, 0..=256): bytes each bus transaction adds.
//! - `link=gen3x8` (default; see [`bus::LINKS`]): the PCIe link reports
//!   measure bus utilisation against.
//! - `tx_free=normal|zc` (default normal): how completed Tx buffers go back
//!   to the mempool — a bulk put, or a zero-copy put straight into the
//!   lcore cache's slots.
//! - `rxbuf=mbuf|frag` (default mbuf): what Rx descriptors are armed with —
//!   the Rx mempool's buffers (header + headroom + data room), or headers
//!   from that mempool carrying page-pool fragments sized to the MTU
//!   (`rx_frags`: 256 B headroom + MTU + 18, no tailroom, cut from
//!   64 KiB pages of a page pool per queue over one block provider per
//!   port). The Rx pool's data room then goes unused (a pool of small
//!   elements will do) and Tx→Rx recycling into the queue is refused.
//!
//! - `vector=auto|off|sse|avx2|avx512` (default auto): the instruction set
//!   of the Rx queues' receive loop and refill and of the Tx queues' MPWQE
//!   data segments (`driver::vector`) — the highest this CPU has, scalar,
//!   SSE4.1, AVX2 or AVX-512F (whose Tx segments are AVX2's). A level the
//!   CPU lacks is an error naming the highest it has; other architectures
//!   have only `off` (and `auto`, which takes it). With `rxbuf=frag` the
//!   receive loop takes the level and the refill stays scalar. Every level
//!   leaves the same mbufs, rings and counters.
//!
//! - `panic_at` (1..=2^64-1; fault injection, for tests): the Rx engine
//!   of queue 0 panics in its Nth step. The engine is poisoned (never run
//!   again); a threaded device records the panic as the port's fault
//!   (`PortCounters::fault`), an inline one passes it to the polling thread.
//!
//! Both queue kinds support Tx→Rx buffer recycling
//! ([`crate::port::recycle`]); the Rx refill unit is `rx_free_thresh`.
//!
//! Xstats: `bus_desc_bytes`, `bus_writeback_bytes`, `bus_data_bytes`,
//! `bus_tx_data_bytes`, `bus_completion_bytes`, `bus_doorbells`,
//! `bus_doorbell_bytes`, `device_cycles`, `device_tx_errors`,
//! `device_wqe_errors`, `tx_mpwqe_blks`, `tx_mpwqe_pkts`, `tx_wqe_pkts`,
//! `tx_inline_bytes`, `tx_cqe_errors`, `tx_chain_errors`,
//! `tx_empty_errors`, `tx_tso_errors`, `tx_segs_errors` and
//! `tx_offload_errors` (packets the Tx queue could not send, by reason,
//! also in `tx_errors`), `rx_recycled`, `tx_recycled`,
//! `recycle_fallbacks`, `rx_runt_errors` and `rx_oversize_errors` (frames
//! the device refused, also in `rx_errors`), and `rx_buf_bytes_per_desc` (set at setup: buffer
//! memory one posted Rx descriptor takes — the mempool element in `mbuf`
//! mode; the fragment's share of its page plus the header's element in
//! `frag` mode).

mod device;
mod driver;
mod hw;

pub use device::bus;
#[doc(hidden)]
pub use device::frame;
pub use driver::vector::{VECTOR_CHOICES, VectorLevel};
pub use hw::{desc, wqe};

#[cfg(all(test, not(loom)))]
mod tests;

use std::sync::Arc;

use crate::mbuf::ol;
use crate::mempool::HugepagePolicy;
use crate::net::MacAddr;
use crate::pagepool::{BlockProvider, DEFAULT_RING_BATCH, FragLayout, ProviderConfig};
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxQueue, SpecArgs, TxQueue,
};

use crate::tester;
use device::tx_engine::{self, TxEngine};
use device::wire::{Lane, RxSide, WireEnd};
use device::{
    Bus, EngineCell, PortEngines, QueueEngine, RxEngine, RxEngineParts, RxParams, RxSource, TxSink,
    runner,
};
use driver::tx::TxMode;
use driver::{rx, rx_frags, tx};
use frame::{Reta, RssHasher};
use hw::regs::{self, RxRegs, TxRegs};
use tester::{TESTER_KEYS, Tester, TesterConfig};

/// Spec keys: the tester's, then the driver's own.
const KEYS: &[&str] = &[
    "gen",
    "flows",
    "size",
    "rate",
    "count",
    "dst",
    "tester",
    "wire",
    "device",
    "fc",
    "rx_free_thresh",
    "tx_rs_thresh",
    "tx_free_thresh",
    "bus_overhead",
    "tx_free",
    "txmode",
    "mpw_segs",
    "inline_mpw",
    "tx_comp",
    "link",
    "rxbuf",
    "panic_at",
    "vector",
];

/// Where the device runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceMode {
    /// Inside the queue calls, on the polling thread.
    Inline,
    /// On the process's device thread.
    Threaded,
}

enum Source {
    Tester(Arc<Tester>),
    Wire(WireEnd),
}

/// The `soft` driver.
pub struct SoftDriver {
    info: DeviceInfo,
    spec: String,
    source: Source,
    settings: SoftSettings,
    engines: Option<Arc<PortEngines>>,
    running: bool,
}

impl std::fmt::Debug for SoftDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftDriver")
            .field("spec", &self.spec)
            .field("mode", &self.settings.mode)
            .finish()
    }
}

/// A soft spec's arguments, read and checked; no tester or wire joined yet.
pub(crate) struct SoftArgs<'a> {
    tester_config: Option<TesterConfig>,
    tester_name: Option<&'a str>,
    wire_name: Option<&'a str>,
    settings: SoftSettings,
}

/// The device settings a soft spec sets, kept by the driver as read.
#[derive(Debug, Clone, Copy)]
struct SoftSettings {
    mode: DeviceMode,
    fc: bool,
    rx_free_thresh: u32,
    tx_rs_thresh: u32,
    tx_free_thresh: u32,
    bus_overhead: u64,
    zc_free: bool,
    tx_mode: TxMode,
    mpw_segs: u32,
    inline_mpw: u32,
    tx_comp: u32,
    /// `rxbuf=frag`: Rx descriptors carry page-pool fragments.
    rx_frags: bool,
    /// `panic_at`: the step of Rx queue 0 that panics.
    panic_at: Option<u64>,
    /// `vector`: the Rx loop's and refill's instruction set.
    vector: VectorLevel,
}

impl SoftDriver {
    /// Reads and checks the spec's arguments, joining no tester or wire.
    pub(crate) fn parse_spec(spec: &PortSpec) -> Result<SoftArgs<'_>, PortError> {
        let mut args = SpecArgs::new(spec, KEYS);
        let tester_config = TesterConfig::from_args(&mut args)?;
        let tester_name = args.str("tester");
        let wire_name = args.str("wire");
        let mode = match args.choice("device", &["inline", "threaded"])? {
            Some("threaded") => DeviceMode::Threaded,
            _ => DeviceMode::Inline,
        };
        let fc = args.choice("fc", &["on", "off"])? != Some("off");
        let pow2 = |args: &mut SpecArgs, key: &str| -> Result<Option<u32>, PortError> {
            match args.u64_in(key, 4..=4096)? {
                Some(v) if !v.is_power_of_two() => Err(PortError::config(format!(
                    "port spec '{}': {key} {v} is not a power of two",
                    spec.as_str()
                ))),
                v => Ok(v.map(|v| v as u32)),
            }
        };
        let rx_free_thresh = pow2(&mut args, "rx_free_thresh")?.unwrap_or(32);
        let tx_rs_thresh = pow2(&mut args, "tx_rs_thresh")?.unwrap_or(32);
        let tx_free_thresh = args.u64_in("tx_free_thresh", 4..=4096)?.unwrap_or(32) as u32;
        let bus_overhead = args.u64_in("bus_overhead", 0..=256)?.unwrap_or(24);
        let zc_free = args.choice("tx_free", &["normal", "zc"])? == Some("zc");
        let tx_mode = match args.choice("txmode", &["wqe", "mpwqe"])? {
            Some("wqe") => TxMode::Wqe,
            _ => TxMode::Mpwqe,
        };
        let max_segs = (wqe::MAX_DS - 2) as u64;
        let mpw_segs = args.u64_in("mpw_segs", 1..=max_segs)?.unwrap_or(max_segs) as u32;
        let inline_mpw = args.u64_in("inline_mpw", 0..=988)?.unwrap_or(0) as u32;
        if inline_mpw != 0 && wqe::inline_segs(inline_mpw as usize) > mpw_segs {
            return Err(PortError::config(format!(
                "port spec '{}': inline_mpw {inline_mpw} takes {} segments, more than \
                 mpw_segs {mpw_segs}",
                spec.as_str(),
                wqe::inline_segs(inline_mpw as usize)
            )));
        }
        let tx_comp = args.u64_in("tx_comp", 0..=4096)?.unwrap_or(0) as u32;
        args.choice("link", bus::LINKS)?;
        let rx_frags = args.choice("rxbuf", &["mbuf", "frag"])? == Some("frag");
        let panic_at = args.u64_in("panic_at", 1..=u64::MAX)?;
        let vector = VectorLevel::from_choice(args.choice("vector", VECTOR_CHOICES)?)
            .map_err(|m| PortError::config(format!("port spec '{}': {m}", spec.as_str())))?;
        args.finish()?;
        debug_assert!(TESTER_KEYS.iter().all(|k| KEYS.contains(k)));
        if wire_name.is_some() && (tester_config.is_some() || tester_name.is_some()) {
            return Err(PortError::config(format!(
                "port spec '{}': wire= and the tester keys exclude each other",
                spec.as_str()
            )));
        }
        Ok(SoftArgs {
            tester_config,
            tester_name,
            wire_name,
            settings: SoftSettings {
                mode,
                fc,
                rx_free_thresh,
                tx_rs_thresh,
                tx_free_thresh,
                bus_overhead,
                zc_free,
                tx_mode,
                mpw_segs,
                inline_mpw,
                tx_comp,
                rx_frags,
                panic_at,
                vector,
            },
        })
    }

    /// Reads the spec's arguments and plugs the port into its tester or
    /// wire.
    pub fn from_spec(spec: &PortSpec) -> Result<SoftDriver, PortError> {
        let SoftArgs {
            tester_config,
            tester_name,
            wire_name,
            settings,
        } = Self::parse_spec(spec)?;
        let source =
            match wire_name {
                Some(w) => Source::Wire(WireEnd::attach(w).map_err(|e| {
                    PortError::config(format!("port spec '{}': {e}", spec.as_str()))
                })?),
                None => {
                    let name = tester_name.unwrap_or("t0").to_string();
                    let tester = tester::attach(&name, tester_config).map_err(|e| {
                        PortError::config(format!("port spec '{}': {e}", spec.as_str()))
                    })?;
                    Source::Tester(tester)
                }
            };
        Ok(SoftDriver {
            info: DeviceInfo {
                driver: "soft",
                max_rx_queues: 16,
                max_tx_queues: 16,
                nb_rxd: (64, 4096),
                nb_txd: (64, 4096),
                desc_pow2: true,
                max_mtu: 9000,
                rx_offload_capa: Offloads::CHECKSUMS | Offloads::RSS_HASH,
                tx_offload_capa: Offloads::FAST_FREE
                    | Offloads::MULTI_SEG
                    | Offloads::CHECKSUMS
                    | Offloads::TSO,
                needs_rx_pool: true,
                mac: MacAddr([0x02, 0, 0, 0x50, 0x46, 0]),
            },
            spec: spec.as_str().to_string(),
            source,
            settings,
            engines: None,
            running: false,
        })
    }

    /// Where the device runs.
    pub fn mode(&self) -> DeviceMode {
        self.settings.mode
    }

    fn check_thresholds(&self, config: &PortConfig) -> Result<(), PortError> {
        let err = |m: String| Err(PortError::config(format!("port '{}': {m}", self.spec)));
        for (i, q) in config.rxq.iter().enumerate() {
            if self.settings.rx_free_thresh > q.nb_rxd as u32 {
                return err(format!(
                    "Rx queue {i}: rx_free_thresh {} exceeds its {} descriptors",
                    self.settings.rx_free_thresh, q.nb_rxd
                ));
            }
        }
        for (i, q) in config.txq.iter().enumerate() {
            let nb = q.nb_txd as u32;
            if self.settings.tx_rs_thresh > self.settings.tx_free_thresh
                || self.settings.tx_free_thresh > nb
            {
                return err(format!(
                    "Tx queue {i}: needs tx_rs_thresh {} <= tx_free_thresh {} <= {} descriptors",
                    self.settings.tx_rs_thresh, self.settings.tx_free_thresh, nb
                ));
            }
        }
        Ok(())
    }
}

impl SoftDriver {
    /// The block provider of an `rxbuf=frag` port: room for a fragment per
    /// Rx descriptor and per header of the Rx pools (headers bound the
    /// packets delivered and in flight), plus
    /// per queue two pages being cut and one ring batch (pages freed on
    /// another lcore wait in the queue's page pool ring until a batch has
    /// gathered, fresh pages standing in for them meanwhile), and a little
    /// slack, in 64 KiB pages.
    fn frag_provider(
        &self,
        config: &PortConfig,
        layout: FragLayout,
    ) -> Result<BlockProvider, PortError> {
        let per_page = rx_frags::RX_PAGE_BYTES / layout.stride().max(1);
        if per_page == 0 {
            return Err(PortError::config(format!(
                "port '{}': an Rx fragment of {} bytes (MTU {}) exceeds the {}-byte page",
                self.spec,
                layout.frag_size(),
                config.mtu,
                rx_frags::RX_PAGE_BYTES
            )));
        }
        // A fragment is armed on a descriptor or held by a delivered
        // packet's header.
        let headers: usize = (0..config.rxq.len())
            .filter_map(|q| config.rx_pool_of(q))
            .map(|p| p.size() as usize)
            .sum();
        let armed: usize = config.rxq.iter().map(|q| q.nb_rxd as usize).sum();
        let per_queue = 2 + DEFAULT_RING_BATCH as usize;
        let pages = (headers + armed).div_ceil(per_page) + per_queue * config.rxq.len() + 8;
        BlockProvider::new(ProviderConfig {
            name: format!("{} rx fragments", self.spec),
            size: pages * rx_frags::RX_PAGE_BYTES,
            hugepages: HugepagePolicy::Auto,
        })
        .map_err(|e| PortError::config(format!("port '{}': {e}", self.spec)))
    }
}

impl PortDriver for SoftDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        self.check_thresholds(config)?;
        let nrx = config.rxq.len();
        let max_frame = config.mtu as usize + 14 + 4;
        let frag_layout = self
            .settings
            .rx_frags
            .then(|| FragLayout::for_mtu(config.mtu));
        let provider = match frag_layout {
            Some(l) => Some(self.frag_provider(config, l)?),
            None => None,
        };
        let hasher = Arc::new(RssHasher::default_key());
        let x = &counters.xstats;

        // Rx sources: a generator per queue over the flows the RETA sends
        // there, or one wire lane per queue.
        let mut sources: Vec<RxSource> = Vec::with_capacity(nrx);
        match &self.source {
            Source::Tester(tester) => {
                let stream = tester
                    .add_stream()
                    .map_err(|e| PortError::config(format!("port '{}': {e}", self.spec)))?;
                let reta = Reta::new(nrx);
                let mut flows: Vec<Vec<u32>> = vec![Vec::new(); nrx];
                for f in 0..tester.config().flows {
                    let q = if nrx == 1 {
                        0
                    } else {
                        reta.queue(flow_hash(&hasher, &tester.flow_tuple(stream, f)))
                    };
                    flows[q].push(f);
                }
                for fl in flows {
                    sources.push(if fl.is_empty() {
                        RxSource::Idle
                    } else {
                        RxSource::Gen(Box::new(tester.generator(stream, fl)))
                    });
                }
            }
            Source::Wire(end) => {
                let slot = max_frame.div_ceil(64) * 64;
                let mut lanes = Vec::with_capacity(nrx);
                for _ in 0..nrx {
                    let (lane, rx) = Lane::new(slot, self.settings.fc);
                    lanes.push(lane);
                    sources.push(RxSource::Wire(Box::new(rx)));
                }
                end.set_rx(RxSide::new(lanes));
            }
        }

        let rx_regs: Vec<Arc<RxRegs>> = config
            .rxq
            .iter()
            .map(|q| RxRegs::new(q.nb_rxd as usize))
            .collect();
        let tx_regs: Vec<Arc<TxRegs>> = config
            .txq
            .iter()
            .map(|q| {
                let nb = q.nb_txd as u32;
                let blocks = tx_blocks(self.settings.tx_mode, nb);
                let cqes = regs::cq_size(
                    nb,
                    blocks,
                    self.settings.tx_rs_thresh,
                    self.settings.tx_comp,
                );
                TxRegs::new(blocks as usize, cqes)
            })
            .collect();
        let rxo = config.rx_offloads;
        let mut rx_engines = Vec::with_capacity(nrx);
        for (q, source) in sources.into_iter().enumerate() {
            let pool = config.needed_rx_pool(q);
            let mut engine = RxEngine::new(RxEngineParts {
                regs: Arc::clone(&rx_regs[q]),
                source,
                params: RxParams {
                    buf_size: match frag_layout {
                        Some(l) => l.data_room as usize,
                        None => pool.data_room() as usize,
                    },
                    max_frame,
                    check_ip: rxo.contains(Offloads::IPV4_CKSUM),
                    check_l4: rxo.contains(Offloads::UDP_CKSUM)
                        || rxo.contains(Offloads::TCP_CKSUM),
                    fc: self.settings.fc,
                },
                hasher: Arc::clone(&hasher),
                bus: Bus::new(x, self.settings.bus_overhead),
                counters: Arc::clone(counters),
                queue: q,
            });
            if let (0, Some(n)) = (q, self.settings.panic_at) {
                engine.panic_at(n);
            }
            rx_engines.push(EngineCell::new(engine));
        }
        let mut tx_engines = Vec::with_capacity(config.txq.len());
        for (q, regs) in tx_regs.iter().enumerate() {
            let sink = match &self.source {
                Source::Tester(tester) => {
                    TxSink::Check(Box::new(tester.checker_for(config.port_id)))
                }
                Source::Wire(end) => TxSink::Wire(Box::new(end.sender())),
            };
            tx_engines.push(EngineCell::new(TxEngine::new(
                Arc::clone(regs),
                sink,
                tx_engine::TxEngineParams {
                    max_frame,
                    sqn: q as u32,
                },
                Bus::new(x, self.settings.bus_overhead),
                x,
            )));
        }
        let engines = Arc::new(PortEngines {
            rx: rx_engines.into_boxed_slice(),
            tx: tx_engines.into_boxed_slice(),
            counters: Arc::clone(counters),
        });
        let inline = self.settings.mode == DeviceMode::Inline;

        let rss_hash = rxo.contains(Offloads::RSS_HASH);
        let pool0 = config.needed_rx_pool(0);
        let per_desc = match frag_layout {
            Some(l) => rx_frags::frag_bytes_per_desc(l),
            None => pool0.mempool().stride(),
        };
        x.register("rx_buf_bytes_per_desc").add(per_desc as u64);
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::with_capacity(nrx);
        for (q, regs) in rx_regs.into_iter().enumerate() {
            let pool = config.needed_rx_pool(q).clone();
            let frags = match (&provider, frag_layout) {
                (Some(p), Some(l)) => Some(rx_frags::RxFrags::new(p, &self.spec, q, l)?),
                _ => None,
            };
            rx.push(Box::new(rx::SoftRx::new(rx::RxQueueParts {
                regs,
                pool,
                port_id: config.port_id,
                free_thresh: self.settings.rx_free_thresh,
                rss_hash,
                engine: QueueEngine::new(Arc::clone(&engines), q, inline),
                counters: Arc::clone(counters),
                doorbell_cost: 4 + self.settings.bus_overhead,
                frags,
                mtu: config.mtu,
                vector: self.settings.vector,
            })));
        }
        let txo = config.tx_offloads;
        let mut ol_mask = 0;
        if txo.contains(Offloads::IPV4_CKSUM) {
            ol_mask |= ol::TX_IP_CKSUM;
        }
        if txo.contains(Offloads::UDP_CKSUM) {
            ol_mask |= ol::TX_UDP_CKSUM;
        }
        if txo.contains(Offloads::TCP_CKSUM) {
            ol_mask |= ol::TX_TCP_CKSUM;
        }
        if txo.contains(Offloads::IPV4_CKSUM) {
            ol_mask |= ol::TX_OUTER_IP_CKSUM;
        }
        if txo.contains(Offloads::TSO) {
            ol_mask |= ol::TX_TCP_SEG;
        }
        ol_mask |= ol::TX_VLAN | ol::TX_TUNNEL_VXLAN;
        let params = tx::TxParams {
            rs_thresh: self.settings.tx_rs_thresh,
            free_thresh: self.settings.tx_free_thresh,
            fast_free: txo.contains(Offloads::FAST_FREE) && !txo.contains(Offloads::MULTI_SEG),
            multi_seg: txo.contains(Offloads::MULTI_SEG),
            ol_mask,
            zc_free: self.settings.zc_free,
            mode: self.settings.tx_mode,
            mpw_segs: self.settings.mpw_segs,
            inline_mpw: self.settings.inline_mpw,
            comp_wqes: self.settings.tx_comp,
            doorbell_bytes: 4 + self.settings.bus_overhead,
            vector: self.settings.vector,
        };
        let tx: Vec<Box<dyn TxQueue>> = tx_regs
            .into_iter()
            .enumerate()
            .map(|(q, regs)| {
                Box::new(tx::SoftTx::new(tx::TxQueueParts {
                    regs,
                    nb_txd: config.txq[q].nb_txd as u32,
                    params,
                    engine: QueueEngine::new(Arc::clone(&engines), q, inline),
                    counters: Arc::clone(counters),
                })) as Box<dyn TxQueue>
            })
            .collect();
        self.engines = Some(engines);
        Ok(Queues { rx, tx })
    }

    fn start(&mut self) -> Result<(), PortError> {
        if let Source::Wire(end) = &self.source {
            end.check_peer()
                .map_err(|e| PortError::config(format!("soft: {e}")))?;
        }
        if self.settings.mode == DeviceMode::Threaded
            && let Some(e) = &self.engines
        {
            runner::add(e)?;
            self.running = true;
        }
        Ok(())
    }

    fn stop(&mut self) {
        if self.running
            && let Some(e) = &self.engines
        {
            runner::remove(e);
            self.running = false;
        }
    }
}

impl Drop for SoftDriver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Fewest 64-byte blocks in a Tx ring: room for the largest WQE
/// ([`wqe::MAX_DS`] segments) several times over.
const MIN_TX_BLOCKS: u32 = 64;

/// The 64-byte blocks of a Tx queue's WQE ring for `nb_txd` descriptors.
///
/// Blocks come back when the device completes a WQE, not when the queue
/// frees the buffers, so the ring only has to hold what the device has not
/// read yet; its size matters because the queue walks all of it, and every
/// block the walk has left since is a cache miss when written again.
/// - `wqe`: one block per descriptor (a regular WQE per packet in flight).
/// - `mpwqe`: 16 bytes per descriptor, the bytes of the old descriptor
///   ring — one data segment per packet, the MPWQE's headers shared — and
///   at least [`MIN_TX_BLOCKS`]. A quarter of the `wqe` ring: a full-size
///   ring here cost every path some 4 cycles a packet in L1 misses on the
///   WQE writes. Packets that need regular WQEs (TSO, chains) take a block
///   or more each and may find the ring full sooner: `tx_burst` then takes
///   fewer, as when a NIC's send queue is full.
fn tx_blocks(mode: TxMode, nb_txd: u32) -> u32 {
    match mode {
        TxMode::Wqe => nb_txd,
        TxMode::Mpwqe => (nb_txd / 4).max(MIN_TX_BLOCKS),
    }
}

/// The RSS hash of a tester flow, as the device will compute it from the
/// flow's frames.
fn flow_hash(h: &RssHasher, t: &tester::FlowTuple) -> u32 {
    use std::net::IpAddr;
    let mut input = [0u8; 36];
    let n = match (t.src, t.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            input[..4].copy_from_slice(&s.octets());
            input[4..8].copy_from_slice(&d.octets());
            8
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            input[..16].copy_from_slice(&s.octets());
            input[16..32].copy_from_slice(&d.octets());
            32
        }
        _ => return 0,
    };
    input[n..n + 2].copy_from_slice(&t.src_port.to_be_bytes());
    input[n + 2..n + 4].copy_from_slice(&t.dst_port.to_be_bytes());
    h.hash(&input[..n + 4])
}
