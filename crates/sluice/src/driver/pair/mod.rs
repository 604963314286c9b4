//! `pair`: two ports joined by rings in one process, as DPDK's `net_ring`.
//! Nothing is copied: a packet sent on one end is the same mbuf received on
//! the other — its header address moves through a ring.
//!
//! Spec: `pair:name=NAME[,bytes=BOOL]`
//! - `name` (required): the pair. The first port opened with a name creates
//!   the pair and is its end A; the second joins it as end B; a third, while
//!   the pair lives, is an error. Queue counts come from each port's
//!   configuration; Tx queue `k` of one end feeds Rx queue `k` of the other,
//!   so end B must have as many Tx queues as A has Rx queues and as many Rx
//!   queues as A has Tx queues (checked when B opens). Both ends must be open
//!   before either starts.
//! - `bytes` (default false): count bytes (`rx_bytes`, `tx_bytes`). Off, as
//!   in DPDK's `net_ring`, because it is the only per-packet work: reading
//!   each packet's `pkt_len` touches every mbuf header, which more than
//!   doubles the cost of io forwarding over a pair (about 4 cycles per packet
//!   instead of 1.6 when a thousand packets are in flight). With it on, the
//!   Rx queues also drop runts and frames over the MTU, counted in
//!   `rx_errors`, `rx_runt_errors` and `rx_oversize_errors`; off, a frame
//!   on a pair was made by this process or checked where it entered it.
//!
//! # Links
//! Each Tx → Rx queue pair is a link: a single-producer single-consumer
//! [`ring`](crate::ring) of mbuf header addresses whose capacity is the
//! receiving queue's `nb_rxd` rounded up to a power of two. The receiving end
//! makes the links it receives on when it opens and its Rx queues take their
//! consumers; the sending end's Tx queues take the producers when they start.
//! `rx_burst` is one `dequeue_burst` straight into the burst's spare slots;
//! `tx_burst` is one `enqueue_burst` straight from the burst's front. No
//! mbuf header is touched unless `bytes=true`.
//!
//! # Buffers
//! A packet on a link belongs to the link. Stopping a port frees what its Rx
//! links hold; dropping an Rx queue frees them again and parks the consumer
//! back in its link, so packets sent after the receiver is gone wait there
//! until the pair is torn down: when the last end is dropped the links are,
//! and a link's `Drop` frees everything still in it.
//!
//! The packets waiting on a link are counted in the receiving queue's
//! `posted` gauge ([`RxQueueStats`](crate::port::RxQueueStats)), as the
//! receiver's last poll saw them: the link is the receiver's Rx ring, which
//! the peer fills. Tx queues hold nothing (`waiting` stays 0).
//!
//! # Registry
//! Pairs are found by name in a process-wide registry that holds only `Weak`
//! references: a pair lives while a port (or one of its queues) holds it, and
//! a name can be used again once both of its ends are gone.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::mbuf::{Burst, BurstSlice, Mbuf};
use crate::mempool::Elem;
use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxFrameCheck, RxQueue, SpecArgs, TxQueue,
};
use crate::ring::{Consumer, Producer, Ring};

/// Spec keys.
const KEYS: &[&str] = &["name", "bytes"];

/// Most queues per end.
const MAX_QUEUES: u16 = 64;

/// Most descriptors per queue (a ring of 32768 slots).
const MAX_DESC: u16 = 1 << 15;

/// The `pair` driver: one end of a named pair.
pub struct PairDriver {
    info: DeviceInfo,
    name: String,
    /// Count bytes.
    bytes: bool,
    /// The pair, once [`setup`](PortDriver::setup) has joined it.
    pair: Option<Arc<Pair>>,
}

/// One Tx → Rx queue link: a ring of mbuf header addresses. The ends live in
/// the queues while they exist; the consumer is parked here when its Rx
/// queue is dropped, so `Drop` can free what is left.
struct Link {
    producer: Mutex<Option<Producer<Elem>>>,
    consumer: Mutex<Option<Consumer<Elem>>>,
}

/// A pair: the links each end receives on, indexed by end (0 = A, 1 = B)
/// and then queue. `None` until that end has opened.
struct Pair {
    name: String,
    state: Mutex<PairState>,
}

struct PairState {
    /// `links[e][k]`: the link end `e` receives on with Rx queue `k`.
    links: [Option<Vec<Arc<Link>>>; 2],
    /// Tx queue count of each end, once open.
    tx_queues: [Option<usize>; 2],
}

/// Pairs by name; dead entries are dropped at the next lookup.
static REGISTRY: Mutex<Vec<(String, Weak<Pair>)>> = Mutex::new(Vec::new());

/// Locks `m`, ignoring poisoning (the data is consistent at every unlock).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PairDriver {
    /// Reads the spec's arguments.
    pub fn from_spec(spec: &PortSpec) -> Result<PairDriver, PortError> {
        let mut args = SpecArgs::new(spec, KEYS);
        let name = args.require("name")?.to_owned();
        let bytes = args.bool("bytes")?.unwrap_or(false);
        args.finish()?;
        Ok(PairDriver::new(&name, bytes))
    }

    /// An end of the pair `name`, joined when the port is set up; `bytes`
    /// turns the byte counters on.
    pub fn new(name: &str, bytes: bool) -> PairDriver {
        PairDriver {
            info: DeviceInfo {
                driver: "pair",
                max_rx_queues: MAX_QUEUES,
                max_tx_queues: MAX_QUEUES,
                nb_rxd: (1, MAX_DESC),
                nb_txd: (1, u16::MAX),
                desc_pow2: false,
                max_mtu: 9000,
                rx_offload_capa: Offloads::MULTI_SEG,
                tx_offload_capa: Offloads::FAST_FREE | Offloads::MULTI_SEG,
                needs_rx_pool: false,
                mac: MacAddr([0x02, 0, 0, 0x70, 0x61, 0]),
            },
            name: name.to_owned(),
            bytes,
            pair: None,
        }
    }

    /// Joins (or creates) the pair and claims an end; returns the pair and
    /// the end's index, with the end's receiving links made.
    fn join(&self, config: &PortConfig) -> Result<(Arc<Pair>, usize), PortError> {
        let mut reg = lock(&REGISTRY);
        reg.retain(|(_, w)| w.strong_count() > 0);
        let pair = match reg.iter().find(|(n, _)| *n == self.name) {
            Some((_, w)) => w.upgrade(),
            None => None,
        };
        let pair = match pair {
            Some(p) => p,
            None => {
                let p = Arc::new(Pair {
                    name: self.name.clone(),
                    state: Mutex::new(PairState {
                        links: [None, None],
                        tx_queues: [None, None],
                    }),
                });
                reg.push((self.name.clone(), Arc::downgrade(&p)));
                p
            }
        };
        let mut st = lock(&pair.state);
        let end = match (&st.links[0], &st.links[1]) {
            (None, _) => 0,
            (Some(_), None) => 1,
            (Some(_), Some(_)) => {
                return Err(PortError::config(format!(
                    "pair '{}': both ends are already open (a pair has two; the name is free \
                     again once both are dropped)",
                    self.name
                )));
            }
        };
        if end == 1 {
            let a_rx = st.links[0].as_ref().map_or(0, |l| l.len());
            let a_tx = st.tx_queues[0].unwrap_or(0);
            let (b_rx, b_tx) = (config.rxq.len(), config.txq.len());
            if a_rx != b_tx || a_tx != b_rx {
                return Err(PortError::config(format!(
                    "pair '{}': end B has {b_rx} Rx and {b_tx} Tx queues, end A has {a_rx} Rx \
                     and {a_tx} Tx; Tx queue k of one end feeds Rx queue k of the other, so B \
                     needs {a_tx} Rx and {a_rx} Tx",
                    self.name
                )));
            }
        }
        let mut links = Vec::with_capacity(config.rxq.len());
        for q in &config.rxq {
            let cap = (q.nb_rxd.max(1) as usize).next_power_of_two();
            let (p, c) = Ring::<Elem>::spsc(cap).map_err(|e| {
                PortError::config(format!("pair '{}': ring of {cap}: {e}", self.name))
            })?;
            links.push(Arc::new(Link {
                producer: Mutex::new(Some(p)),
                consumer: Mutex::new(Some(c)),
            }));
        }
        st.links[end] = Some(links);
        st.tx_queues[end] = Some(config.txq.len());
        drop(st);
        Ok((pair, end))
    }
}

impl PortDriver for PairDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        if self.pair.is_some() {
            return Err(PortError::config(format!(
                "pair '{}': this end is already set up",
                self.name
            )));
        }
        let (pair, end) = self.join(config)?;
        let links = lock(&pair.state).links[end].clone().unwrap_or_default();
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::with_capacity(links.len());
        for (q, link) in links.into_iter().enumerate() {
            let consumer = lock(&link.consumer)
                .take()
                .expect("a new link's consumer is parked in it");
            rx.push(Box::new(PairRx {
                consumer: Some(consumer),
                link,
                bytes: self.bytes,
                check: RxFrameCheck::new(&counters.xstats, config.mtu),
                counters: Arc::clone(counters),
                q,
            }));
        }
        let tx = (0..config.txq.len())
            .map(|q| {
                Box::new(PairTx {
                    producer: None,
                    pair: Arc::clone(&pair),
                    peer: 1 - end,
                    bytes: self.bytes,
                    counters: Arc::clone(counters),
                    q,
                }) as Box<dyn TxQueue>
            })
            .collect();
        self.info.mac = MacAddr([0x02, 0, 0, 0x70, 0x61, end as u8]);
        self.pair = Some(pair);
        Ok(Queues { rx, tx })
    }
}

/// Total length of `pkts`.
#[inline]
fn bytes_of(pkts: &[Mbuf]) -> u64 {
    pkts.iter().map(|m| m.pkt_len() as u64).sum()
}

/// Frees every packet waiting on `consumer`, in bursts.
fn drain(consumer: &mut Consumer<Elem>) {
    loop {
        let mut b: Burst<64> = Burst::new();
        let slots = b.spare_slots(64);
        let moved = consumer.dequeue_burst(slots);
        // SAFETY: the ring holds only header addresses of mbufs that a Tx
        // queue handed over with their ownership; dequeued, they are ours.
        unsafe { b.set_len(moved.n) };
        drop(b);
        if moved.n == 0 {
            return;
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(c) = self.consumer.get_mut().unwrap_or_else(|e| e.into_inner()) {
            drain(c);
        }
    }
}

/// An Rx queue: the consumer end of one link.
struct PairRx {
    /// Always `Some` until `Drop` parks it back in the link.
    consumer: Option<Consumer<Elem>>,
    link: Arc<Link>,
    /// Count bytes.
    bytes: bool,
    /// With `bytes`: runts and oversize frames (sent by the peer) are
    /// dropped here.
    check: RxFrameCheck,
    counters: Arc<PortCounters>,
    q: usize,
}

impl RxQueue for PairRx {
    #[inline]
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.rx[self.q];
        let Some(consumer) = self.consumer.as_mut() else {
            return 0;
        };
        let len = burst.len();
        let free = burst.free();
        let moved = consumer.dequeue_burst(burst.spare_slots(free));
        let n = moved.n;
        // SAFETY: the `n` slots after `len` now hold mbufs whose ownership
        // the sending Tx queue gave to the ring.
        unsafe { burst.set_len(len + n) };
        // What waits on the link, as the dequeue saw it.
        stats.posted.set(moved.left as u64);
        // With headers read anyway (`bytes`), runts and oversize frames
        // are dropped here too; otherwise no header is touched (frames on a
        // pair come from this process, checked at the port they entered).
        let (n, bytes) = if self.bytes {
            let n = n - self.check.filter(burst, len, &stats.errors);
            (n, bytes_of(&burst.as_slice()[len..]))
        } else {
            (n, 0)
        };
        stats.record_burst(n, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(c) = self.consumer.as_mut() {
            drain(c);
        }
        self.counters.rx[self.q].posted.set(0);
    }
}

impl Drop for PairRx {
    fn drop(&mut self) {
        if let Some(mut c) = self.consumer.take() {
            drain(&mut c);
            *lock(&self.link.consumer) = Some(c);
        }
        self.counters.rx[self.q].posted.set(0);
    }
}

/// A Tx queue: the producer end of the peer's link of the same number,
/// taken at start.
struct PairTx {
    producer: Option<Producer<Elem>>,
    pair: Arc<Pair>,
    /// The other end's index.
    peer: usize,
    /// Count bytes.
    bytes: bool,
    counters: Arc<PortCounters>,
    q: usize,
}

impl TxQueue for PairTx {
    #[inline]
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let Some(producer) = self.producer.as_mut() else {
            return 0;
        };
        // Lengths are read before the enqueue: afterwards the packets belong
        // to the receiver, which may already be changing or freeing them.
        let mut bytes = if self.bytes {
            bytes_of(burst.as_slice())
        } else {
            0
        };
        let n = producer.enqueue_burst(burst.raw()).n;
        if self.bytes && n < burst.len() {
            // The rest are still ours.
            bytes -= bytes_of(&burst.as_slice()[n..]);
        }
        // SAFETY: the ring took the first `n` mbufs, and with them their
        // ownership.
        unsafe { burst.forget_front(n) };
        self.counters.tx[self.q].record_burst(n, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.producer.is_some() {
            return Ok(());
        }
        let st = lock(&self.pair.state);
        let end = |e: usize| if e == 0 { "A" } else { "B" };
        let Some(links) = st.links[self.peer].as_ref() else {
            return Err(PortError::config(format!(
                "pair '{}': end {} is not open yet; open both ends before starting either",
                self.pair.name,
                end(self.peer)
            )));
        };
        let Some(link) = links.get(self.q) else {
            return Err(PortError::config(format!(
                "pair '{}': Tx queue {} of end {} has no Rx queue {} on end {} to feed",
                self.pair.name,
                self.q,
                end(1 - self.peer),
                self.q,
                end(self.peer)
            )));
        };
        self.producer = lock(&link.producer).take();
        if self.producer.is_none() {
            return Err(PortError::Driver(format!(
                "pair '{}': the producer of link {} was already taken",
                self.pair.name, self.q
            )));
        }
        Ok(())
    }

    fn stop(&mut self) {}
}

#[cfg(all(test, not(loom)))]
mod tests;
