//! `afpacket`: a port on a kernel network interface through packet sockets
//! (`AF_PACKET`), as DPDK's `net_af_packet` — TPACKET_V3 for Rx, TPACKET_V2
//! for Tx, both mmap rings shared with the kernel.
//!
//! Spec: `afpacket:iface=NAME[,block_size=BYTES,block_timeout=MS,fanout=MODE,qdisc_bypass=BOOL]`
//! - `iface` (required): the interface, in the namespace Sluice runs in.
//! - `block_size` (a power of two, 4096..=4194304, default 65536): bytes per
//!   ring block. The Rx ring holds about `nb_rxd` frames of 2048 bytes
//!   (rounded up to whole blocks); the Tx ring `nb_txd` frames.
//! - `block_timeout` (1..=1000 ms, default 1): the kernel hands an Rx block
//!   over when it is full or when this long has passed since its first
//!   packet — the latency a lone packet sees.
//! - `fanout` (`hash`, `lb` or `cpu`; default `hash`): how the kernel
//!   spreads packets over several Rx queues (one socket per queue in one
//!   `PACKET_FANOUT` group): by flow hash (a flow stays on one queue, in
//!   order), round robin, or by the receiving CPU.
//! - `qdisc_bypass` (default true): Tx frames skip the queueing discipline
//!   (`PACKET_QDISC_BYPASS`).
//!
//! Up to 16 Rx and 16 Tx queues, each with a socket of its own, opened at
//! start and closed at stop. Rx copies every frame from the ring into an
//! mbuf of the queue's pool (`rx.rs`); Tx copies each packet into a ring
//! frame and frees the mbuf (`tx.rs`). The port's MTU plus an Ethernet
//! header and one VLAN tag must fit the pool's data room. With
//! `PortConfig::promiscuous` (the default) each Rx socket puts the
//! interface in promiscuous mode for as long as it is open. Rx sockets
//! ignore frames the host sends (`PACKET_IGNORE_OUTGOING`), so a port never
//! receives what it, or another program, transmits on the interface. The
//! `rss_hash` Rx offload fills each mbuf's RSS hash with the kernel's flow
//! hash. The port's MAC address is the interface's.
//!
//! Xstats: `rx_kernel_packets`, `rx_kernel_drops` (the ring was full; also
//! counted as `rx_missed`), `rx_kernel_freeze_q` (the kernel's
//! `PACKET_STATISTICS`), `rx_csum_not_ready` (frames whose checksum the
//! sender left to an offload: on a veth whose peer has checksum offload on,
//! such frames carry no valid L4 checksum — turn it off with
//! `ethtool -K PEER tx off`), `tx_ring_full`, `tx_oversize_errors` (frames
//! longer than the interface's MTU allows, or than a ring frame holds),
//! `tx_runt_errors` (shorter than an Ethernet header) and `tx_kernel_drops`
//! (frames the device kept refusing, or still unsent at stop), and
//! `tx_wrong_format_errors` (frames the kernel found malformed), all four
//! also counted as `tx_errors`.
//!
//! The port's MTU may not be more than the interface's: such a port is
//! refused at open.

mod rx;
mod sys;
mod tx;

use std::sync::Arc;

use super::netdev;
use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxQueue, SpecArgs, SpecError, TxQueue,
};

use rx::{AfPacketRx, FanoutGroup, RxGeometry, RxQueueParts};
use tx::{AfPacketTx, TxGeometry};

/// Spec keys.
const KEYS: &[&str] = &[
    "iface",
    "block_size",
    "block_timeout",
    "fanout",
    "qdisc_bypass",
];

/// Most queues of each direction.
pub const MAX_QUEUES: u16 = 16;

/// Bytes per frame the rings are sized in (Rx ring: `nb_rxd` of them).
const FRAME_UNIT: u32 = 2048;

/// The interface a port is on.
#[derive(Debug)]
pub(super) struct IfaceRef {
    pub(super) name: String,
    pub(super) index: u32,
    /// An Ethernet device: the kernel lets a frame with a VLAN tag be 4
    /// bytes longer than the MTU allows an untagged one.
    pub(super) ethernet: bool,
}

/// The `afpacket` driver.
pub struct AfPacketDriver {
    info: DeviceInfo,
    iface: Arc<IfaceRef>,
    block_size: u32,
    block_timeout: u32,
    fanout: u32,
    qdisc_bypass: bool,
}

/// An afpacket spec's arguments, read and checked; no interface looked up yet.
pub(crate) struct AfPacketArgs<'a> {
    name: &'a str,
    block_size: u64,
    block_timeout: u32,
    fanout: u32,
    qdisc_bypass: bool,
}

impl AfPacketDriver {
    /// Reads and checks the spec's arguments, looking no interface up.
    pub(crate) fn parse_spec(spec: &PortSpec) -> Result<AfPacketArgs<'_>, PortError> {
        let mut args = SpecArgs::new(spec, KEYS);
        let name = args.require("iface")?;
        let block_size = args
            .u64_in("block_size", 4096..=1 << 22)?
            .unwrap_or(1 << 16);
        let block_timeout = args.u64_in("block_timeout", 1..=1000)?.unwrap_or(1) as u32;
        let fanout = match args.choice("fanout", &["hash", "lb", "cpu"])? {
            Some("lb") => sys::PACKET_FANOUT_LB,
            Some("cpu") => sys::PACKET_FANOUT_CPU,
            _ => sys::PACKET_FANOUT_HASH,
        };
        let qdisc_bypass = args.bool("qdisc_bypass")?.unwrap_or(true);
        args.finish()?;
        if !block_size.is_power_of_two() {
            return Err(SpecError::BadValue {
                spec: spec.as_str().to_owned(),
                key: "block_size".into(),
                value: block_size.to_string(),
                expected: "a power of two in 4096..=4194304".into(),
            }
            .into());
        }
        let here = |msg: String| PortError::Driver(format!("port spec '{}': {msg}", spec.as_str()));
        netdev::check_name(name).map_err(here)?;
        Ok(AfPacketArgs {
            name,
            block_size,
            block_timeout,
            fanout,
            qdisc_bypass,
        })
    }

    /// Reads the spec's arguments and finds the interface.
    pub fn from_spec(spec: &PortSpec) -> Result<AfPacketDriver, PortError> {
        let AfPacketArgs {
            name,
            block_size,
            block_timeout,
            fanout,
            qdisc_bypass,
        } = Self::parse_spec(spec)?;
        let here = |msg: String| PortError::Driver(format!("port spec '{}': {msg}", spec.as_str()));
        let index = netdev::index(name).ok_or_else(|| {
            here(format!(
                "no network interface '{name}' (in this network namespace)"
            ))
        })?;
        let mac = netdev::mac(name)
            .map_err(|e| PortError::io(format!("afpacket: {name}: MAC address"), e))?;
        let ethernet = netdev::is_ethernet(name)
            .map_err(|e| PortError::io(format!("afpacket: {name}: hardware type"), e))?;
        Ok(AfPacketDriver {
            info: DeviceInfo {
                driver: "afpacket",
                max_rx_queues: MAX_QUEUES,
                max_tx_queues: MAX_QUEUES,
                nb_rxd: (64, 32768),
                nb_txd: (64, 32768),
                desc_pow2: false,
                max_mtu: 9000,
                rx_offload_capa: Offloads::RSS_HASH,
                tx_offload_capa: Offloads::FAST_FREE | Offloads::MULTI_SEG,
                needs_rx_pool: true,
                mac: MacAddr(mac),
            },
            iface: Arc::new(IfaceRef {
                name: name.to_owned(),
                index,
                ethernet,
            }),
            block_size: block_size as u32,
            block_timeout,
            fanout,
            qdisc_bypass,
        })
    }
}

/// Blocks of `block` bytes that hold at least `frames` frames of `frame`
/// bytes.
fn blocks_for(frames: u16, frame: u32, block: u32) -> u32 {
    let per_block = block / frame;
    (u32::from(frames)).div_ceil(per_block)
}

impl PortDriver for AfPacketDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        let name = &self.iface.name;
        // The largest frame: MTU, Ethernet header, one VLAN tag.
        let max_frame = u32::from(config.mtu) + 18;
        // A Tx frame holds a 32-byte header then the data; Rx frames are
        // packed in blocks, a 48-byte header (and alignment) each.
        let frame = (max_frame + 64).next_power_of_two().max(FRAME_UNIT);
        if frame > self.block_size {
            return Err(PortError::config(format!(
                "afpacket: {name}: MTU {} needs ring frames of {frame} bytes, more than \
                 block_size {}",
                config.mtu, self.block_size
            )));
        }
        // The kernel sends no frame longer than the interface's MTU allows.
        // A DPDK af_packet port and its interface share one MTU (setting
        // the port's sets the interface's), so a port MTU the interface
        // does not have is refused here, naming both, rather than every
        // larger frame being dropped later; the port leaves the host's
        // interface settings alone. Tx still checks each frame against the
        // interface's MTU of the moment (`tx.rs`), which may change while
        // the port runs.
        let iface_mtu = netdev::mtu(name)
            .map_err(|e| PortError::io(format!("afpacket: {name}: interface MTU"), e))?;
        if u32::from(config.mtu) > iface_mtu {
            return Err(PortError::config(format!(
                "afpacket: {name}: port MTU {} is more than the interface's MTU {iface_mtu}: \
                 raise the interface's (ip link set {name} mtu {}) or lower the port's",
                config.mtu, config.mtu
            )));
        }
        let fanout = (config.rxq.len() > 1).then(|| Arc::new(FanoutGroup::new(self.fanout)));
        let rss = config.rx_offloads.contains(Offloads::RSS_HASH);
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::new();
        for (q, qc) in config.rxq.iter().enumerate() {
            let pool = config.rx_pool_holding(q, max_frame, &format!("afpacket: {name}"))?;
            let geometry = RxGeometry {
                block_size: self.block_size,
                block_nr: blocks_for(qc.nb_rxd, frame, self.block_size),
                frame_size: frame,
                timeout_ms: self.block_timeout,
            };
            rx.push(Box::new(AfPacketRx::new(RxQueueParts {
                iface: Arc::clone(&self.iface),
                geometry,
                fanout: fanout.clone(),
                promisc: config.promiscuous,
                rss,
                pool,
                port_id: config.port_id,
                mtu: config.mtu,
                counters: Arc::clone(counters),
                q,
            })));
        }
        let mut tx: Vec<Box<dyn TxQueue>> = Vec::new();
        for (q, qc) in config.txq.iter().enumerate() {
            let geometry = TxGeometry {
                block_size: self.block_size,
                block_nr: blocks_for(qc.nb_txd, frame, self.block_size),
                frame_size: frame,
            };
            tx.push(Box::new(AfPacketTx::new(
                Arc::clone(&self.iface),
                geometry,
                self.qdisc_bypass,
                Arc::clone(counters),
                q,
            )));
        }
        Ok(Queues { rx, tx })
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
