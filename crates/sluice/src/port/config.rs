//! Port configuration: queue counts, descriptors per queue, the Rx mempool,
//! MTU, MAC address and offloads — what `rte_eth_dev_configure` and the queue
//! setup calls take in DPDK — and [`DeviceInfo`], what a driver says it can do.

use crate::mbuf::MbufPool;
use crate::net::MacAddr;
use crate::port::PortError;

/// Offload bits, one set for Rx and one for Tx (named after DPDK's
/// `RTE_ETH_{RX,TX}_OFFLOAD_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Offloads(u32);

impl Offloads {
    /// None.
    pub const NONE: Offloads = Offloads(0);
    /// Tx: every buffer of a queue comes from one pool and has refcount 1,
    /// so completed buffers are freed in one bulk put without checks. A
    /// promise, as in DPDK, but not an unchecked one: a driver that acts on
    /// it checks each packet as it is sent (`soft`), and one that breaks it
    /// is freed the normal way, only slower.
    pub const FAST_FREE: Offloads = Offloads(1 << 0);
    /// Rx: packets may span several buffers; Tx: chained mbufs are accepted.
    pub const MULTI_SEG: Offloads = Offloads(1 << 1);
    /// Rx: check the IPv4 header checksum; Tx: compute it.
    pub const IPV4_CKSUM: Offloads = Offloads(1 << 2);
    /// Rx: check the UDP checksum; Tx: compute it.
    pub const UDP_CKSUM: Offloads = Offloads(1 << 3);
    /// Rx: check the TCP checksum; Tx: compute it.
    pub const TCP_CKSUM: Offloads = Offloads(1 << 4);
    /// Tx: TCP segmentation.
    pub const TSO: Offloads = Offloads(1 << 5);
    /// Rx: deliver the RSS hash in each mbuf.
    pub const RSS_HASH: Offloads = Offloads(1 << 6);

    const NAMES: [(Offloads, &'static str); 7] = [
        (Offloads::FAST_FREE, "fast_free"),
        (Offloads::MULTI_SEG, "multi_seg"),
        (Offloads::IPV4_CKSUM, "ipv4_cksum"),
        (Offloads::UDP_CKSUM, "udp_cksum"),
        (Offloads::TCP_CKSUM, "tcp_cksum"),
        (Offloads::TSO, "tso"),
        (Offloads::RSS_HASH, "rss_hash"),
    ];

    /// All three checksums.
    pub const CHECKSUMS: Offloads =
        Offloads(Self::IPV4_CKSUM.0 | Self::UDP_CKSUM.0 | Self::TCP_CKSUM.0);

    /// True when every bit of `other` is set here.
    #[inline(always)]
    pub const fn contains(self, other: Offloads) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits set here and not in `other`.
    pub const fn without(self, other: Offloads) -> Offloads {
        Offloads(self.0 & !other.0)
    }

    /// The bits set both here and in `other` (e.g. the offloads wanted that a
    /// device has).
    pub const fn intersect(self, other: Offloads) -> Offloads {
        Offloads(self.0 & other.0)
    }

    /// True when no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The offload named `name` (`fast_free`, `multi_seg`, `ipv4_cksum`,
    /// `udp_cksum`, `tcp_cksum`, `tso`, `rss_hash`).
    pub fn from_name(name: &str) -> Option<Offloads> {
        Self::NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(o, _)| *o)
    }

    /// Every offload name [`from_name`](Self::from_name) knows.
    pub fn all_names() -> impl Iterator<Item = &'static &'static str> {
        Self::NAMES.iter().map(|(_, n)| n)
    }

    /// Names of the bits set, in a fixed order.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(o, _)| self.contains(*o))
            .map(|(_, n)| *n)
            .collect()
    }
}

impl std::ops::BitOr for Offloads {
    type Output = Offloads;
    fn bitor(self, rhs: Offloads) -> Offloads {
        Offloads(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for Offloads {
    fn bitor_assign(&mut self, rhs: Offloads) {
        self.0 |= rhs.0;
    }
}

impl std::fmt::Display for Offloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&self.names().join(","))
    }
}

/// Default descriptors per Rx queue.
pub const DEFAULT_NB_RXD: u16 = 1024;
/// Default descriptors per Tx queue.
pub const DEFAULT_NB_TXD: u16 = 1024;
/// Default MTU.
pub const DEFAULT_MTU: u16 = 1500;

/// One Rx queue.
#[derive(Debug, Clone)]
pub struct RxQueueConfig {
    /// Descriptors in the ring.
    pub nb_rxd: u16,
    /// The pool this queue's buffers come from; `None` takes the port's.
    pub pool: Option<MbufPool>,
}

/// One Tx queue.
#[derive(Debug, Clone)]
pub struct TxQueueConfig {
    /// Descriptors in the ring.
    pub nb_txd: u16,
}

/// How to configure a port.
///
/// ```
/// use sluice::mbuf::{MbufPool, MbufPoolConfig};
/// use sluice::port::{Offloads, PortConfig};
///
/// let pool = MbufPool::new(MbufPoolConfig { size: 4095, ..Default::default() }).unwrap();
/// let mut config = PortConfig::new(Some(pool)).queues(4, 4).nb_rxd(512);
/// config.tx_offloads |= Offloads::FAST_FREE;
/// config.rxq[3].nb_rxd = 4096; // one queue deeper than the rest
/// assert_eq!(config.rxq.len(), 4);
/// ```
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// The port's number: written into every received mbuf's `port`.
    pub port_id: u16,
    /// The Rx queues (their count is the queue count).
    pub rxq: Vec<RxQueueConfig>,
    /// The Tx queues.
    pub txq: Vec<TxQueueConfig>,
    /// Where received packets are stored. Drivers that receive into mbufs
    /// require it; an Rx queue may name its own.
    pub rx_pool: Option<MbufPool>,
    /// Largest IP packet the port sends or receives (the frame may add 14
    /// bytes of Ethernet header and 4 per VLAN tag).
    pub mtu: u16,
    /// The port's MAC address; `None` takes the driver's.
    pub mac: Option<MacAddr>,
    /// Receive frames for any destination MAC.
    pub promiscuous: bool,
    /// Rx offloads asked for.
    pub rx_offloads: Offloads,
    /// Tx offloads asked for.
    pub tx_offloads: Offloads,
    /// Keep a burst-size histogram per queue (a counter bump per burst).
    pub burst_stats: bool,
}

impl PortConfig {
    /// One Rx and one Tx queue of the default sizes, receiving into `rx_pool`.
    pub fn new(rx_pool: Option<MbufPool>) -> PortConfig {
        PortConfig {
            port_id: 0,
            rxq: vec![RxQueueConfig {
                nb_rxd: DEFAULT_NB_RXD,
                pool: None,
            }],
            txq: vec![TxQueueConfig {
                nb_txd: DEFAULT_NB_TXD,
            }],
            rx_pool,
            mtu: DEFAULT_MTU,
            mac: None,
            promiscuous: true,
            rx_offloads: Offloads::NONE,
            tx_offloads: Offloads::NONE,
            burst_stats: false,
        }
    }

    /// Sets the port number.
    pub fn port_id(mut self, id: u16) -> PortConfig {
        self.port_id = id;
        self
    }

    /// `rx` Rx queues and `tx` Tx queues, sized as the first of each.
    pub fn queues(mut self, rx: u16, tx: u16) -> PortConfig {
        let r = self.rxq[0].clone();
        let t = self.txq[0].clone();
        self.rxq = vec![r; rx as usize];
        self.txq = vec![t; tx as usize];
        self
    }

    /// Every Rx queue gets `n` descriptors.
    pub fn nb_rxd(mut self, n: u16) -> PortConfig {
        self.rxq.iter_mut().for_each(|q| q.nb_rxd = n);
        self
    }

    /// Every Tx queue gets `n` descriptors.
    pub fn nb_txd(mut self, n: u16) -> PortConfig {
        self.txq.iter_mut().for_each(|q| q.nb_txd = n);
        self
    }

    /// The pool Rx queue `q` receives into, if any.
    pub fn rx_pool_of(&self, q: usize) -> Option<&MbufPool> {
        self.rxq
            .get(q)
            .and_then(|c| c.pool.as_ref())
            .or(self.rx_pool.as_ref())
    }

    /// The pool of Rx queue `q` for a driver that needs one
    /// ([`DeviceInfo::needs_rx_pool`]): `Port::new` has checked every Rx
    /// queue has one.
    pub(crate) fn needed_rx_pool(&self, q: usize) -> &MbufPool {
        self.rx_pool_of(q)
            .expect("Port::new checked that every Rx queue has a pool")
    }

    /// The pool of Rx queue `q` for a driver that needs one (`Port::new`
    /// has checked every Rx queue has one), checked to hold a frame of
    /// `max_frame` bytes in one buffer; the error names the port as `port`
    /// (e.g. `tap: tap0`).
    pub(crate) fn rx_pool_holding(
        &self,
        q: usize,
        max_frame: u32,
        port: &str,
    ) -> Result<MbufPool, PortError> {
        let pool = self.needed_rx_pool(q);
        if max_frame > u32::from(pool.data_room()) {
            return Err(PortError::config(format!(
                "{port}: MTU {} makes frames of up to {max_frame} bytes, more than the data \
                 room of Rx queue {q}'s pool ({})",
                self.mtu,
                pool.data_room()
            )));
        }
        Ok(pool.clone())
    }
}

/// What a driver can do, checked against a [`PortConfig`] when the port is
/// made.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Driver name (`soft`, `null`, …).
    pub driver: &'static str,
    /// Most Rx queues.
    pub max_rx_queues: u16,
    /// Most Tx queues.
    pub max_tx_queues: u16,
    /// Fewest and most Rx descriptors per queue.
    pub nb_rxd: (u16, u16),
    /// Fewest and most Tx descriptors per queue.
    pub nb_txd: (u16, u16),
    /// Descriptor counts must be powers of two.
    pub desc_pow2: bool,
    /// Largest MTU.
    pub max_mtu: u16,
    /// Rx offloads supported.
    pub rx_offload_capa: Offloads,
    /// Tx offloads supported.
    pub tx_offload_capa: Offloads,
    /// The driver needs an Rx mempool.
    pub needs_rx_pool: bool,
    /// The driver's MAC address for the port.
    pub mac: MacAddr,
}
