//! [`Port`]: one configured device, its queues and counters, and the
//! [`PortDriver`] trait a driver implements to make one.
//!
//! # Life cycle
//! [`Port::new`] checks the configuration against what the driver can do
//! ([`DeviceInfo`]) and has the driver build its queues. [`Port::start`]
//! starts the queues (Rx queues fill their rings from the mempool), then the
//! device (a threaded device model gets its thread). Only a started port
//! lends out its queues, so nothing polls a stopped one. [`Port::stop`] stops
//! the device first, so it no longer touches descriptors, then the queues,
//! which hand back every buffer they hold; dropping a port stops it.
//!
//! # Threads
//! The queues are lent out by `&mut` ([`Port::queues_mut`] splits them), so
//! with scoped threads each polling thread gets its own queues and the
//! borrow checker proves that no queue is polled by two threads or polled
//! while the port stops. Statistics are read through
//! [`Port::counters`], an `Arc` any thread may hold.

use std::sync::Arc;

use crate::net::MacAddr;

use super::{DeviceInfo, PortConfig, PortCounters, PortError, PortStats, RxQueue, TxQueue};

/// The queues a driver builds for a port.
pub struct Queues {
    /// Rx queues, in order.
    pub rx: Vec<Box<dyn RxQueue>>,
    /// Tx queues, in order.
    pub tx: Vec<Box<dyn TxQueue>>,
}

/// What a driver implements: the device side of a port. The hot path is in
/// the queues ([`RxQueue`], [`TxQueue`]); this is the control path.
pub trait PortDriver: Send {
    /// What the device can do.
    fn info(&self) -> &DeviceInfo;

    /// Builds the queues for `config`, which [`Port::new`] has checked
    /// against [`info`](Self::info). Queue `i` counts into
    /// `counters.rx[i]` / `counters.tx[i]`; driver counters are registered
    /// in `counters.xstats`.
    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError>;

    /// Starts the device, after the queues have started.
    fn start(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    /// Stops the device, before the queues stop: afterwards it touches no
    /// descriptor and no buffer.
    fn stop(&mut self) {}
}

/// A port: a configured device with its queues.
///
/// Made by [`driver::open`](crate::driver::open) from a spec string and a
/// [`PortConfig`]. Its queues are polled by `&mut`: one thread per queue,
/// or [`queues_mut`](Self::queues_mut) to hand every queue to its own
/// thread at once.
///
/// ```
/// use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
/// use sluice::port::PortConfig;
///
/// let pool = MbufPool::new(MbufPoolConfig { size: 1023, ..Default::default() })?;
/// let config = PortConfig::new(Some(pool.clone())).queues(2, 2);
/// let mut port = sluice::driver::open("null:size=64", config)?;
/// assert_eq!((port.nb_rx_queues(), port.nb_tx_queues()), (2, 2));
/// assert!(port.rx_queue(0).is_err(), "a stopped port lends no queue");
/// port.start()?;
///
/// // One thread per queue pair, each with its own queues: receive a burst,
/// // send it back out.
/// let counters = port.counters();
/// let (rx_queues, tx_queues) = port.queues_mut()?;
/// std::thread::scope(|s| {
///     for (rxq, txq) in rx_queues.iter_mut().zip(tx_queues.iter_mut()) {
///         s.spawn(move || {
///             let mut burst: Burst = Burst::new();
///             for _ in 0..10 {
///                 rxq.rx_burst(&mut burst);
///                 txq.tx_burst(&mut burst);
///             }
///         });
///     }
/// });
///
/// // A null port receives full bursts of 32 and sends all it is given.
/// let stats = port.stats();
/// assert_eq!(stats.rx_packets, 2 * 10 * 32);
/// assert_eq!(stats.rx_queues[1].packets, 10 * 32);
/// assert_eq!(stats.tx_packets, stats.rx_packets);
/// assert_eq!(counters.stats(), stats, "the same counters, from any thread");
/// assert!(port.tx_queue(2).is_err(), "no such queue");
///
/// port.stop();
/// assert!(pool.is_full());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Port {
    name: String,
    config: PortConfig,
    mac: MacAddr,
    driver: Box<dyn PortDriver>,
    rx: Vec<Box<dyn RxQueue>>,
    tx: Vec<Box<dyn TxQueue>>,
    counters: Arc<PortCounters>,
    started: bool,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("name", &self.name)
            .field("id", &self.config.port_id)
            .field("rx_queues", &self.rx.len())
            .field("tx_queues", &self.tx.len())
            .field("started", &self.started)
            .finish()
    }
}

impl Port {
    /// Makes a port from a driver. `name` is how messages refer to it (the
    /// spec string, say). Errors name the port and the value the driver
    /// cannot take.
    pub fn new(
        name: impl Into<String>,
        mut driver: Box<dyn PortDriver>,
        config: PortConfig,
    ) -> Result<Port, PortError> {
        let name = name.into();
        check(&name, driver.info(), &config)?;
        let counters = Arc::new(PortCounters::new(
            config.rxq.len(),
            config.txq.len(),
            config.burst_stats,
        ));
        let queues = driver.setup(&config, &counters)?;
        if queues.rx.len() != config.rxq.len() || queues.tx.len() != config.txq.len() {
            return Err(PortError::Driver(format!(
                "port '{name}': driver {} built {} Rx and {} Tx queues, {} and {} were asked",
                driver.info().driver,
                queues.rx.len(),
                queues.tx.len(),
                config.rxq.len(),
                config.txq.len()
            )));
        }
        let mac = config.mac.unwrap_or(driver.info().mac);
        Ok(Port {
            name,
            config,
            mac,
            driver,
            rx: queues.rx,
            tx: queues.tx,
            counters,
            started: false,
        })
    }

    /// The name given at creation.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The port number.
    pub fn id(&self) -> u16 {
        self.config.port_id
    }

    /// The configuration.
    pub fn config(&self) -> &PortConfig {
        &self.config
    }

    /// What the driver can do.
    pub fn info(&self) -> &DeviceInfo {
        self.driver.info()
    }

    /// The port's MAC address.
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// Rx queues.
    pub fn nb_rx_queues(&self) -> usize {
        self.rx.len()
    }

    /// Tx queues.
    pub fn nb_tx_queues(&self) -> usize {
        self.tx.len()
    }

    /// True between `start` and `stop`.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// Starts the queues, then the device. On error everything started so
    /// far is stopped again (and its buffers given back).
    pub fn start(&mut self) -> Result<(), PortError> {
        if self.started {
            return Err(PortError::Started);
        }
        for i in 0..self.rx.len() {
            if let Err(e) = self.rx[i].start() {
                self.stop_queues(i, 0);
                return Err(e);
            }
        }
        for i in 0..self.tx.len() {
            if let Err(e) = self.tx[i].start() {
                self.stop_queues(self.rx.len(), i);
                return Err(e);
            }
        }
        if let Err(e) = self.driver.start() {
            self.stop_queues(self.rx.len(), self.tx.len());
            return Err(e);
        }
        self.started = true;
        Ok(())
    }

    /// Stops the device, then the queues, which give back every buffer they
    /// hold. Stopping a stopped port does nothing.
    pub fn stop(&mut self) {
        if !self.started {
            return;
        }
        self.driver.stop();
        self.stop_queues(self.rx.len(), self.tx.len());
        self.started = false;
    }

    fn stop_queues(&mut self, rx: usize, tx: usize) {
        self.rx[..rx].iter_mut().for_each(|q| q.stop());
        self.tx[..tx].iter_mut().for_each(|q| q.stop());
    }

    /// Rx queue `q`, to poll. The port must be started.
    pub fn rx_queue(&mut self, q: usize) -> Result<&mut dyn RxQueue, PortError> {
        if !self.started {
            return Err(PortError::Stopped);
        }
        Ok(queue_mut(&mut self.rx, "Rx", q)?.as_mut())
    }

    /// Tx queue `q`, to send on. The port must be started.
    pub fn tx_queue(&mut self, q: usize) -> Result<&mut dyn TxQueue, PortError> {
        if !self.started {
            return Err(PortError::Stopped);
        }
        Ok(queue_mut(&mut self.tx, "Tx", q)?.as_mut())
    }

    /// Every queue at once, to hand them to different threads. The port must
    /// be started.
    #[allow(clippy::type_complexity)]
    pub fn queues_mut(
        &mut self,
    ) -> Result<(&mut [Box<dyn RxQueue>], &mut [Box<dyn TxQueue>]), PortError> {
        if !self.started {
            return Err(PortError::Stopped);
        }
        Ok((&mut self.rx, &mut self.tx))
    }

    /// Whether Rx queue `q` can be refilled by a Tx queue
    /// ([`recycle_mbufs`](super::recycle_mbufs)). Any time, started or not.
    pub fn rx_queue_recycles(&self, q: usize) -> Result<bool, PortError> {
        Ok(queue(&self.rx, "Rx", q)?.recycle_rx_capable())
    }

    /// Whether Tx queue `q` can feed an Rx queue's ring
    /// ([`recycle_mbufs`](super::recycle_mbufs)). Any time, started or not.
    pub fn tx_queue_recycles(&self, q: usize) -> Result<bool, PortError> {
        Ok(queue(&self.tx, "Tx", q)?.recycle_tx_capable())
    }

    /// The counters, shared: hold this to read statistics from another
    /// thread while the queues are being polled.
    pub fn counters(&self) -> Arc<PortCounters> {
        Arc::clone(&self.counters)
    }

    /// A snapshot of the basic counters.
    pub fn stats(&self) -> PortStats {
        self.counters.stats()
    }

    /// Every counter by name: DPDK's generic names first, then the
    /// driver's, summed over queues ([`PortCounters::xstats_snapshot`]).
    pub fn xstats(&self) -> Vec<(String, u64)> {
        self.counters.xstats_snapshot()
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Checks `config` against what the device can do.
fn check(name: &str, info: &DeviceInfo, c: &PortConfig) -> Result<(), PortError> {
    let err = |msg: String| Err(PortError::Config(format!("port '{name}': {msg}")));
    let d = info.driver;
    if c.rxq.len() > info.max_rx_queues as usize {
        return err(format!(
            "{} Rx queues asked, driver {d} has at most {}",
            c.rxq.len(),
            info.max_rx_queues
        ));
    }
    if c.txq.len() > info.max_tx_queues as usize {
        return err(format!(
            "{} Tx queues asked, driver {d} has at most {}",
            c.txq.len(),
            info.max_tx_queues
        ));
    }
    let desc = |dir: &str, n: u16, (lo, hi): (u16, u16)| {
        if n < lo || n > hi {
            return Err(format!(
                "{n} {dir} descriptors: driver {d} takes {lo} to {hi}"
            ));
        }
        if info.desc_pow2 && !n.is_power_of_two() {
            return Err(format!(
                "{n} {dir} descriptors: driver {d} takes only powers of two"
            ));
        }
        Ok(())
    };
    for (i, q) in c.rxq.iter().enumerate() {
        if let Err(m) = desc("Rx", q.nb_rxd, info.nb_rxd) {
            return err(format!("Rx queue {i}: {m}"));
        }
        if info.needs_rx_pool && c.rx_pool_of(i).is_none() {
            return err(format!(
                "Rx queue {i}: driver {d} receives into mbufs and no Rx mempool was given"
            ));
        }
    }
    for (i, q) in c.txq.iter().enumerate() {
        if let Err(m) = desc("Tx", q.nb_txd, info.nb_txd) {
            return err(format!("Tx queue {i}: {m}"));
        }
    }
    if c.mtu < 68 || c.mtu > info.max_mtu {
        return err(format!(
            "MTU {}: driver {d} takes 68 to {}",
            c.mtu, info.max_mtu
        ));
    }
    let rx_extra = c.rx_offloads.without(info.rx_offload_capa);
    if !rx_extra.is_empty() {
        return err(format!("driver {d} has no Rx offload {rx_extra}"));
    }
    let tx_extra = c.tx_offloads.without(info.tx_offload_capa);
    if !tx_extra.is_empty() {
        return err(format!("driver {d} has no Tx offload {tx_extra}"));
    }
    Ok(())
}

/// Queue `q` of a port's `dir` queues, or [`PortError::NoQueue`].
fn queue<'a, Q>(queues: &'a [Q], dir: &'static str, q: usize) -> Result<&'a Q, PortError> {
    queues.get(q).ok_or(PortError::NoQueue {
        dir,
        queue: q,
        count: queues.len(),
    })
}

/// [`queue`], borrowed mutably to poll it.
fn queue_mut<'a, Q>(
    queues: &'a mut [Q],
    dir: &'static str,
    q: usize,
) -> Result<&'a mut Q, PortError> {
    let count = queues.len();
    queues.get_mut(q).ok_or(PortError::NoQueue {
        dir,
        queue: q,
        count,
    })
}
