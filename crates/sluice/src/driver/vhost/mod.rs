//! `vhost`: Sluice as a vhost-user backend, as DPDK's `net_vhost` — the
//! device side of a virtio-net interface whose driver is a VM (QEMU) or a
//! userspace frontend (DPDK's `virtio_user`).
//!
//! Spec: `vhost:path=SOCK[,server=BOOL][,queues=N]`
//! - `path`: the vhost-user socket.
//! - `server` (default true): create the socket and listen on it (a stale
//!   socket file is removed; one another process listens on is an error).
//!   `server=false` connects to a frontend listening there, and connects
//!   again, every 100 ms, while none is.
//! - `queues` (1..=64, default 1): queue pairs offered to the frontend; the
//!   port may use fewer.
//!
//! Features offered: `VIRTIO_F_VERSION_1`, `VIRTIO_NET_F_MRG_RXBUF`,
//! `VIRTIO_F_EVENT_IDX`, `VIRTIO_F_RING_PACKED` (the rings are split or
//! packed as the frontend chooses), `VIRTIO_F_IN_ORDER` (chains go back in
//! the order they came, which the queues do anyway; on a split ring an Rx
//! burst's chains then go back as one used entry), `VIRTIO_NET_F_MQ` (with
//! more than one queue pair) and protocol features REPLY_ACK and MQ; no
//! offload.
//!
//! # Control and data path
//!
//! A control thread, running while the port is started, serves the socket
//! with [`Backend`]: it accepts a frontend (or connects to one), answers
//! its requests, and when the frontend goes, forgets the session and waits
//! for the next. The queues never touch the socket or the backend: each
//! vring has a slot (`slot.rs`) the control thread installs a started ring
//! into and takes it back from, through one atomic byte the queue claims
//! once per burst. GET_VRING_BASE takes the ring back (waiting, bounded,
//! for the queue's current burst to end) and returns its next avail index.
//!
//! Rx queue `i` reads the guest's transmit virtqueue (vring `2i + 1`): each
//! chain's frame, after its virtio-net header, is copied into mbufs (one,
//! or a chain of them for a frame longer than one's room). Tx queue `i`
//! writes into the guest's receive virtqueue (vring `2i`): a zeroed header
//! (`num_buffers` set) and the frame, across several of the guest's
//! buffers with mergeable buffers. Both publish the used ring once per
//! burst and signal the guest's call eventfd only when the ring asks for
//! it (event index or flags). With no frontend, or its ring not started or
//! not enabled, `rx_burst` returns 0 and `tx_burst` takes the packets and
//! drops them, counted as `tx_not_ready_errors` (as a port without a link:
//! a forwarder does not back up behind a guest that is not there).
//!
//! xstats: `rx_bad_chain_errors` / `tx_bad_chain_errors` (descriptor chains
//! the guest made wrong, returned unused), `rx_bad_length_errors` (a chain
//! shorter than the header; frames too short or too long for the port are
//! its `rx_runt_errors` / `rx_oversize_errors`),
//! `tx_too_long_errors` (a frame longer than the buffers the guest offers),
//! `tx_not_ready_errors`, `rx_ring_errors` / `tx_ring_errors` (a ring found
//! broken: an impossible index, an area outside memory), `link_ups` /
//! `link_downs` (the times both rings of queue pair 0 came to be started
//! and enabled, and stopped being so: the link with the frontend),
//! `control_refusals` (requests refused with a failure status: the
//! frontend is told and the session goes on) and `control_errors`
//! (sessions ended by a request that could not be read, was malformed, or
//! was refused where no status could be sent).
//!
//! # Frontend memory
//!
//! The data path reads the frontend's memory through the backend's own
//! mapping of the memory table: each started ring holds a share (`Arc`) of
//! it, so a table the backend replaces (a new SET_MEM_TABLE) or drops (the
//! frontend goes) stays mapped until the control thread has taken back
//! every ring over it. Any memory the frontend can pass works the same
//! way: memfd, hugetlbfs files (a VM's or DPDK's hugepages), POSIX shared
//! memory. The lcores never lock, map or unmap anything: rings are built
//! and dropped on the control thread.

mod queue;
mod ring;
mod slot;

#[cfg(all(test, not(loom)))]
mod tests;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::counter::Counter;
use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxFrameCheck, RxQueue, SpecArgs, TxQueue,
};
use crate::vhost_user::event::{Woken, eventfd, wait};
use crate::vhost_user::{
    self, Backend, BackendConfig, ReadyVring, VringHandler, protocol_features,
};
use crate::virtio::packed::PackedLayout;
use crate::virtio::split::QueueLayout;
use crate::virtio::{
    VIRTIO_F_EVENT_IDX, VIRTIO_F_IN_ORDER, VIRTIO_F_RING_PACKED, VIRTIO_F_VERSION_1,
    VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF, feature, has_feature,
};

use queue::{RxCounters, TxCounters, VhostRx, VhostTx};
use ring::RingLayout;
use slot::{ActiveRing, SharedMemory, VringSlot};

/// Spec keys.
const KEYS: &[&str] = &["path", "server", "queues"];

/// How long a stopping ring waits for its queue's burst to end.
const HANDOFF_TIMEOUT: Duration = Duration::from_secs(2);

/// How long one request may take to arrive whole once it has begun.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Between two attempts to connect to a frontend (`server=false`).
const RECONNECT_INTERVAL: Duration = Duration::from_millis(100);

/// The `vhost` driver.
pub struct VhostDriver {
    info: DeviceInfo,
    path: PathBuf,
    server: bool,
    queue_pairs: u16,
    /// One per vring (twice the queue pairs), shared with the queues.
    slots: Vec<Arc<VringSlot>>,
    /// Registered at setup, counted by the control thread.
    counts: Option<ControlCounts>,
    control: Option<Control>,
}

/// The control thread's xstats: `link_ups`, `link_downs`,
/// `control_refusals`, `control_errors`.
#[derive(Clone)]
struct ControlCounts {
    ups: Arc<Counter>,
    downs: Arc<Counter>,
    /// Requests refused with a failure status (the session goes on).
    refusals: Arc<Counter>,
    /// Sessions ended by a request that could not be read or answered.
    errors: Arc<Counter>,
}

/// The running control thread.
struct Control {
    /// Written to stop the thread.
    stop: Arc<OwnedFd>,
    thread: JoinHandle<()>,
}

impl VhostDriver {
    /// Reads and checks the spec's arguments: the socket path, the role
    /// and the queue pairs.
    pub fn parse_spec(spec: &PortSpec) -> Result<(PathBuf, bool, u16), PortError> {
        let mut args = SpecArgs::new(spec, KEYS);
        let path = PathBuf::from(args.require("path")?);
        let server = args.bool("server")?.unwrap_or(true);
        let queues = args.u64_in("queues", 1..=64)?.unwrap_or(1) as u16;
        args.finish()?;
        Ok((path, server, queues))
    }

    /// Reads the spec's arguments; opens nothing.
    pub fn from_spec(spec: &PortSpec) -> Result<VhostDriver, PortError> {
        let (path, server, queues) = Self::parse_spec(spec)?;
        Ok(VhostDriver::new(path, server, queues))
    }

    /// A backend at `path`, listening (`server`) or connecting, offering
    /// `queue_pairs` queue pairs.
    pub fn new(path: PathBuf, server: bool, queue_pairs: u16) -> VhostDriver {
        VhostDriver {
            info: DeviceInfo {
                driver: "vhost",
                max_rx_queues: queue_pairs,
                max_tx_queues: queue_pairs,
                nb_rxd: (1, u16::MAX),
                nb_txd: (1, u16::MAX),
                desc_pow2: false,
                max_mtu: 9000,
                rx_offload_capa: Offloads::NONE,
                tx_offload_capa: Offloads::MULTI_SEG | Offloads::FAST_FREE,
                needs_rx_pool: true,
                mac: MacAddr([0x02, 0, 0, 0x76, 0x68, 0]),
            },
            path,
            server,
            queue_pairs,
            slots: (0..2 * usize::from(queue_pairs))
                .map(|_| Arc::new(VringSlot::new()))
                .collect(),
            counts: None,
            control: None,
        }
    }

    fn backend_config(&self) -> BackendConfig {
        let mut features = feature(VIRTIO_F_VERSION_1)
            | feature(VIRTIO_NET_F_MRG_RXBUF)
            | feature(VIRTIO_F_EVENT_IDX)
            | feature(VIRTIO_F_RING_PACKED)
            | feature(VIRTIO_F_IN_ORDER);
        if self.queue_pairs > 1 {
            features |= feature(VIRTIO_NET_F_MQ);
        }
        BackendConfig {
            features,
            protocol_features: protocol_features::REPLY_ACK | protocol_features::MQ,
            queue_pairs: self.queue_pairs,
        }
    }

    fn error(&self, what: impl std::fmt::Display) -> PortError {
        PortError::Driver(format!("vhost: {}: {what}", self.path.display()))
    }

    /// Makes sure `path` is free to listen on: a socket nobody listens on
    /// is removed; a live one, or a file of another kind, is an error.
    fn clear_stale_socket(&self) -> Result<(), PortError> {
        match std::fs::symlink_metadata(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.error(e)),
            Ok(meta) if !meta.file_type().is_socket() => {
                Err(self.error("exists and is not a socket"))
            }
            Ok(_) => {
                if UnixStream::connect(&self.path).is_ok() {
                    return Err(self.error("another process is listening on this socket"));
                }
                std::fs::remove_file(&self.path).map_err(|e| self.error(e))
            }
        }
    }
}

impl PortDriver for VhostDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        if self.server {
            self.clear_stale_socket()?;
        }
        let xstats = &counters.xstats;
        self.counts = Some(ControlCounts {
            ups: xstats.register("link_ups"),
            downs: xstats.register("link_downs"),
            refusals: xstats.register("control_refusals"),
            errors: xstats.register("control_errors"),
        });
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::new();
        for q in 0..config.rxq.len() {
            rx.push(Box::new(VhostRx {
                slot: Arc::clone(&self.slots[2 * q + 1]),
                pool: config.needed_rx_pool(q).clone(),
                port_id: config.port_id,
                counters: Arc::clone(counters),
                check: RxFrameCheck::new(xstats, config.mtu),
                driver: RxCounters {
                    bad_chain: xstats.register("rx_bad_chain_errors"),
                    bad_len: xstats.register("rx_bad_length_errors"),
                    ring_errors: xstats.register("rx_ring_errors"),
                },
                q,
                chains: Vec::new(),
                started: false,
            }));
        }
        let mut tx: Vec<Box<dyn TxQueue>> = Vec::new();
        for q in 0..config.txq.len() {
            tx.push(Box::new(VhostTx {
                slot: Arc::clone(&self.slots[2 * q]),
                counters: Arc::clone(counters),
                driver: TxCounters {
                    bad_chain: xstats.register("tx_bad_chain_errors"),
                    not_ready: xstats.register("tx_not_ready_errors"),
                    too_long: xstats.register("tx_too_long_errors"),
                    ring_errors: xstats.register("tx_ring_errors"),
                },
                q,
                chains: Vec::new(),
                reserved: Vec::new(),
                started: false,
            }));
        }
        Ok(Queues { rx, tx })
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.control.is_some() {
            return Ok(());
        }
        let endpoint = if self.server {
            self.clear_stale_socket()?;
            let listener = UnixListener::bind(&self.path).map_err(|e| self.error(e))?;
            Endpoint::Listen(listener, self.path.clone())
        } else {
            Endpoint::Connect(self.path.clone())
        };
        let stop = Arc::new(eventfd().map_err(|e| self.error(e))?);
        let thread_stop = Arc::clone(&stop);
        let config = self.backend_config();
        let slots = self.slots.clone();
        let counts = self.counts.clone();
        let thread = std::thread::Builder::new()
            .name("vhost-ctrl".into())
            .spawn(move || serve(endpoint, &thread_stop, config, slots, counts))
            .map_err(|e| self.error(e))?;
        self.control = Some(Control { stop, thread });
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(control) = self.control.take() {
            let one = 1u64;
            // SAFETY: a live eventfd and an 8-byte buffer.
            unsafe { libc::write(control.stop.as_raw_fd(), (&raw const one).cast(), 8) };
            let _ = control.thread.join();
        }
        // Whatever the thread left (a ring it could not take back in
        // time), the rings go now: the queues have stopped polling.
        for slot in &self.slots {
            if let Some(mut guard) = slot.control(HANDOFF_TIMEOUT) {
                *guard.ring() = None;
            }
        }
    }
}

impl Drop for VhostDriver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where the control thread finds its frontends.
enum Endpoint {
    /// Accepts them on this listening socket (removed at the end).
    Listen(UnixListener, PathBuf),
    /// Connects to a frontend listening at this path.
    Connect(PathBuf),
}

/// The control thread: one frontend session after another until `stop`.
fn serve(
    endpoint: Endpoint,
    stop: &OwnedFd,
    config: BackendConfig,
    slots: Vec<Arc<VringSlot>>,
    counts: Option<ControlCounts>,
) {
    let mut handoff = Handoff {
        dirty: vec![false; slots.len()],
        serving: vec![false; slots.len()],
        counts,
        link_up: false,
        slots,
        memory: None,
        features: 0,
    };
    loop {
        let stream = match &endpoint {
            Endpoint::Listen(listener, _) => match wait(Some(listener.as_raw_fd()), stop, None) {
                Woken::Readable => match listener.accept() {
                    Ok((stream, _)) => stream,
                    // Out of descriptors, say: try again a little later.
                    Err(_) => {
                        if wait(None, stop, Some(RECONNECT_INTERVAL)) == Woken::Stop {
                            break;
                        }
                        continue;
                    }
                },
                _ => break,
            },
            Endpoint::Connect(path) => match UnixStream::connect(path) {
                Ok(stream) => stream,
                Err(_) => {
                    if wait(None, stop, Some(RECONNECT_INTERVAL)) == Woken::Stop {
                        break;
                    }
                    continue;
                }
            },
        };
        let stopping = session(&stream, stop, config, &mut handoff);
        drop(stream);
        handoff.memory = None;
        if stopping {
            break;
        }
    }
    if let Endpoint::Listen(_, path) = &endpoint {
        let _ = std::fs::remove_file(path);
    }
}

/// Serves one frontend until it goes (false) or `stop` is signalled
/// (true). Its rings are taken back from the queues either way.
fn session(
    stream: &UnixStream,
    stop: &OwnedFd,
    config: BackendConfig,
    handoff: &mut Handoff,
) -> bool {
    let mut backend = Backend::new(config);
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let mut stopping = false;
    loop {
        if wait(Some(stream.as_raw_fd()), stop, None) != Woken::Readable {
            stopping = true;
            break;
        }
        match backend.serve_message(stream, handoff) {
            // Applied.
            Ok(Ok(_)) => handoff.apply(&backend),
            // Refused with a failure status the frontend reads.
            Ok(Err(_)) => {
                handoff.count(|c| &c.refusals);
                handoff.apply(&backend);
            }
            Err(vhost_user::VhostUserError::Closed) => break,
            // A failure the frontend cannot be told of (a malformed or
            // truncated request, a refused one without REPLY_ACK): the
            // session ends.
            Err(_) => {
                handoff.count(|c| &c.errors);
                break;
            }
        }
    }
    backend.stop_all(handoff);
    handoff.count_link();
    stopping
}

/// The control thread's [`VringHandler`]: hands started rings to the
/// queues' slots and takes them back.
///
/// A ring is installed while its starting request is handled, before the
/// reply, so a frontend that has its SET_VRING_KICK (or SET_MEM_TABLE)
/// acknowledged finds the ring served: the data path's view of the memory
/// table is made as soon as the backend has mapped it.
struct Handoff {
    slots: Vec<Arc<VringSlot>>,
    /// Rings started or changed that could not be installed at once.
    dirty: Vec<bool>,
    /// Rings installed and enabled, as far as this thread knows.
    serving: Vec<bool>,
    counts: Option<ControlCounts>,
    /// Whether both rings of queue pair 0 were serving when last counted.
    link_up: bool,
    /// The data path's view of the backend's current memory table.
    memory: Option<Arc<SharedMemory>>,
    /// The negotiated features.
    features: u64,
}

impl VringHandler for Handoff {
    fn vring_started(&mut self, ready: &ReadyVring<'_>) {
        let Some(slot) = self.slots.get(ready.index).cloned() else {
            return;
        };
        let ring = self.build(ready);
        match (ring, slot.control(HANDOFF_TIMEOUT)) {
            (Some(mut ring), Some(mut guard)) => {
                ring.enabled = ready.enabled;
                ring.call = ready.call.and_then(|fd| fd.try_clone().ok());
                guard.install(ring);
                self.serving[ready.index] = ready.enabled;
            }
            _ => {
                self.dirty[ready.index] = true;
                self.serving[ready.index] = false;
            }
        }
        self.count_link();
    }

    fn vring_stopped(&mut self, index: usize) -> Option<u16> {
        let slot = self.slots.get(index).cloned()?;
        if let Some(d) = self.dirty.get_mut(index) {
            *d = false;
        }
        let base = match slot.control(HANDOFF_TIMEOUT) {
            Some(mut guard) => guard.ring().take().map(|r| r.queue.last_avail_idx()),
            // The queue is stuck in a burst: it stops at the burst's end
            // (the slot stays closed); its last published index is the
            // best there is.
            None => Some(slot.last_avail()),
        };
        // Counted once the ring is out of the queue's reach.
        if let Some(serving) = self.serving.get_mut(index) {
            *serving = false;
        }
        self.count_link();
        base
    }

    fn memory_changed(&mut self, table: &Arc<vhost_user::GuestMemory>) {
        self.take_memory(table);
    }

    fn vring_updated(&mut self, ready: &ReadyVring<'_>) {
        let Some(slot) = self.slots.get(ready.index).cloned() else {
            return;
        };
        let Some(mut guard) = slot.control(HANDOFF_TIMEOUT) else {
            self.dirty[ready.index] = true;
            return;
        };
        match guard.ring() {
            Some(ring) => {
                ring.enabled = ready.enabled;
                ring.call = ready.call.and_then(|fd| fd.try_clone().ok());
                self.serving[ready.index] = ready.enabled;
            }
            None => self.dirty[ready.index] = true,
        }
        self.count_link();
    }
}

impl Handoff {
    /// Makes the data path's view of `table`, unless it is the one at hand.
    fn take_memory(&mut self, table: &Arc<vhost_user::GuestMemory>) {
        if table.is_empty() {
            self.memory = None;
        } else if self.memory.as_ref().is_none_or(|m| !m.is_view_of(table)) {
            // A table that cannot be viewed leaves its rings stopped.
            self.memory = SharedMemory::new(table).ok();
        }
    }

    /// After each request: takes in the features (and the memory table,
    /// should it have changed unannounced), then installs the rings still
    /// waiting (none, unless one could not be installed at its start).
    fn apply(&mut self, backend: &Backend) {
        self.features = backend.features();
        self.take_memory(backend.memory());
        for i in 0..self.dirty.len() {
            if std::mem::take(&mut self.dirty[i])
                && let Some(ready) = backend.vring(i)
            {
                self.vring_started(&ready);
                // Once is enough: a ring that cannot be built stays out.
                self.dirty[i] = false;
            }
        }
        self.count_link();
    }

    /// Adds one to the counter `pick` chooses (none before setup).
    fn count(&self, pick: fn(&ControlCounts) -> &Arc<Counter>) {
        if let Some(counts) = &self.counts {
            pick(counts).inc();
        }
    }

    /// Counts a link up or down when queue pair 0's rings have come to
    /// serve, or stopped serving, since the last count: called as each
    /// ring changes, before the reply to the request that changed it.
    fn count_link(&mut self) {
        let up = self.serving.iter().take(2).all(|&s| s);
        if up != self.link_up {
            self.link_up = up;
            self.count(if up { |c| &c.ups } else { |c| &c.downs });
        }
    }

    /// The data-path state of a ring that has just started, over the
    /// current memory table; `None` when it is not that table's.
    fn build(&self, ready: &ReadyVring<'_>) -> Option<ActiveRing> {
        let shared = self.memory.as_ref()?;
        // The ring's host addresses, back to guest physical ones.
        let gpa = |host: *mut u8| {
            let host = host as usize;
            shared.table().regions().iter().find_map(|r| {
                let offset = host.checked_sub(r.host_addr().as_ptr() as usize)?;
                (offset < r.size() as usize).then_some(r.guest_phys_addr() + offset as u64)
            })
        };
        // A packed ring's avail and used addresses are its driver and
        // device event suppression areas.
        let (size, desc, avail, used) = (
            u32::from(ready.size),
            gpa(ready.desc.as_ptr())?,
            gpa(ready.avail.as_ptr())?,
            gpa(ready.used.as_ptr())?,
        );
        let layout = if has_feature(self.features, VIRTIO_F_RING_PACKED) {
            RingLayout::Packed(PackedLayout::new(size, desc, avail, used).ok()?)
        } else {
            RingLayout::Split(QueueLayout::new(size, desc, avail, used).ok()?)
        };
        let mut ring =
            ActiveRing::new(Arc::clone(shared), layout, self.features, ready.base).ok()?;
        // The queues poll: the guest need not kick.
        let _ = ring.queue.disable_notify();
        Some(ring)
    }
}
