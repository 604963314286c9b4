//! `virtio`: Sluice as a virtio-net driver over vhost-user, as DPDK's
//! `virtio_user` — the frontend of a virtio-net interface whose device is a
//! vhost-user backend (DPDK's `net_vhost`, a virtual switch, Sluice's own
//! [`vhost`](super::vhost) port).
//!
//! Spec: `virtio:path=SOCK[,server=BOOL][,queues=N][,in_order=BOOL]`
//! - `path`: the vhost-user socket.
//! - `server` (default false): connect to a backend listening at `path`.
//!   Starting the port connects, trying every 100 ms for up to 2 s, and
//!   fails naming what is wrong (no socket file, a stale one nobody listens
//!   on, a backend refusing the features). `server=true` creates the socket
//!   (a stale socket file is removed; one another process listens on is an
//!   error) and waits for a backend to connect.
//! - `queues` (1..=64, default 1): queue pairs to ask of the backend; the
//!   port may use fewer.
//! - `in_order` (default true): accept `VIRTIO_F_IN_ORDER` when the backend
//!   offers it; false refuses it (the rings then work as with a backend
//!   that does not offer it).
//!
//! Features accepted: `VIRTIO_F_VERSION_1` (required: a backend without it
//! is refused), `VIRTIO_NET_F_MRG_RXBUF`, `VIRTIO_F_EVENT_IDX`,
//! `VIRTIO_F_IN_ORDER` (unless `in_order=false`) and, with more than one
//! queue pair, `VIRTIO_NET_F_MQ`; protocol features REPLY_ACK and MQ; no
//! offload. With `VIRTIO_F_IN_ORDER` the backend returns buffers in the
//! order they were posted: descriptors go round the table in order, so an
//! Rx buffer posted in ring slot `i` is descriptor `i`, the available ring
//! entries stop changing after the first lap (an entry is written only
//! when its value changes), and the Tx queue takes back as many of its
//! oldest chains as the used index moved, without reading the used entries
//! (one of which may stand for a batch).
//!
//! # Memory
//!
//! The backend maps the driver's memory: every Rx pool of the port must be
//! shared ([`MbufPool::new_shared`](crate::mbuf::MbufPool::new_shared)), or
//! setting the port up fails saying so. The memory table holds each
//! distinct pool's `memfd` and a `memfd` of the port's own holding the
//! rings; a region's guest physical address is its address in this process
//! (as `virtio_user` does), so a descriptor holds a buffer's own address.
//!
//! # Control and data path
//!
//! A control thread, running while the port is started, holds the socket:
//! it sets the backend up (features, owner, memory table, and per vring its
//! size, addresses, base 0, kick and call eventfds, enable), then watches
//! the socket. When the backend goes, it takes the rings back from the
//! queues (every buffer in them goes back to its pool) and waits for the
//! next backend: it connects again every 100 ms, or accepts the next one
//! (`server=true`). Stopping the port sends GET_VRING_BASE for each vring,
//! so the backend stops using it, before the rings are taken back. Each
//! vring sits in a slot of one atomic byte saying who holds it: the queue
//! claims it once per burst with one compare-exchange and never waits (a
//! failed claim moves nothing that burst); the control thread claims it
//! only to install or take back the ring, waiting for the queue's burst to
//! end.
//!
//! Rx queue `i` drives vring `2i`: it posts mbufs from its pool as
//! device-writable buffers starting 12 bytes into the headroom, so the
//! virtio-net header lands there and the frame at the mbuf's data offset;
//! a returned buffer becomes the received mbuf without a copy (with
//! `MRG_RXBUF`, a frame over `num_buffers` buffers becomes an mbuf chain).
//! The ring is refilled in batches of 32. Tx queue `i` drives vring
//! `2i + 1` without copying: the header is prepended in the mbuf's headroom
//! (or, for an mbuf that cannot take it, read from a zeroed header in the
//! ring memory), each segment is a descriptor, and the mbuf is held until
//! the backend returns its chain; returned chains are freed together once
//! fewer than a quarter of the descriptors are free. A packet in a pool the
//! backend does not map is copied into an mbuf of the port's Rx pool
//! first. The backend is kicked only when the ring asks for it (event index
//! or flags); a polling backend costs no system call. The port polls and
//! asks for no interrupts.
//!
//! With no backend, `rx_burst` returns 0 and `tx_burst` drops what it
//! is given, counted as `tx_not_ready_errors` (and in `tx_errors`).
//!
//! A backend maps the buffers it is given and is trusted, as a NIC is, not
//! to write a buffer after returning it; everything it writes into the
//! rings is checked.
//!
//! xstats: `rx_bad_used_id_errors` / `tx_bad_used_id_errors` (a used entry
//! naming no chain in flight: skipped), `rx_bad_used_length_errors` (a used
//! length beyond the buffer or shorter than the header: the buffer goes back
//! to the pool), `tx_bad_used_length_errors` (counted; the packet's chain is
//! reclaimed), `rx_bad_num_buffers_errors` (a `num_buffers` of 0 or more
//! than the ring holds: the frame is dropped), `rx_ring_errors` /
//! `tx_ring_errors` (an impossible used index or a ring outside memory),
//! `tx_too_long_errors` (more segments than the ring has descriptors, or a
//! frame to copy longer than an mbuf), `tx_not_ready_errors`, `link_ups`,
//! `link_downs`, `link_refusals` (a backend refused during set-up with
//! `server=true`); `rx_kicks` / `tx_kicks` (notifications sent to the
//! backend: with a polling backend and `EVENT_IDX`, one when the ring
//! starts and one per 65536 buffers after).

mod queue;

#[cfg(all(test, not(loom)))]
mod tests;

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::counter::Counter;
use crate::mbuf::MbufPool;
use crate::mempool::{HugepagePolicy, Region, Sharing};
use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxFrameCheck, RxQueue, SpecArgs, TxQueue,
};
use crate::vhost_user::event::{Woken, eventfd, wait};
use crate::vhost_user::message::{MAX_REGIONS, MemoryRegion, VringAddress};
use crate::vhost_user::{F_PROTOCOL_FEATURES, Frontend, VhostUserError, protocol_features};
use crate::virtio::memory::{Area, GuestMemory, Mapping};
use crate::virtio::net_hdr::HEADER_LEN;
use crate::virtio::split::{DriverQueue, QueueLayout};
use crate::virtio::{
    VIRTIO_F_EVENT_IDX, VIRTIO_F_IN_ORDER, VIRTIO_F_VERSION_1, VIRTIO_NET_F_MQ,
    VIRTIO_NET_F_MRG_RXBUF, feature, has_feature,
};

use queue::{RxCounters, SlotGuard, TxCounters, VirtioRx, VirtioTx, Vring, VringSlot};

/// Spec keys.
const KEYS: &[&str] = &["path", "server", "queues", "in_order"];

/// How long one reply may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Between two attempts to connect to a backend.
const RECONNECT_INTERVAL: Duration = Duration::from_millis(100);

/// Attempts to connect when the port starts (`server=false`): 2 s.
const START_ATTEMPTS: u32 = 20;

/// Alignment of each vring's area in the ring memory.
const VRING_ALIGN: u64 = 4096;

/// The `virtio` driver.
pub struct VirtioDriver {
    info: DeviceInfo,
    path: PathBuf,
    server: bool,
    /// Whether `VIRTIO_F_IN_ORDER` is accepted when offered.
    in_order: bool,
    /// One per vring of the queues the port has (`2 * pairs`), shared with
    /// the queues; made at setup.
    slots: Vec<Arc<VringSlot>>,
    /// The memory table and vring layouts; made at setup.
    table: Option<Arc<Table>>,
    /// Each Rx queue's pool; known at setup.
    rx_pools: Vec<MbufPool>,
    /// Per vring: kicks sent; registered at setup.
    kicks: Vec<Arc<Counter>>,
    link: Option<LinkCounters>,
    control: Option<Control>,
}

/// The memory the backend maps and where each vring lies in it.
pub(super) struct Table {
    /// The driver's view of the memory, for the vrings.
    mem: Arc<GuestMemory>,
    /// Per vring: its layout and whether a queue drives it.
    layouts: Vec<Option<QueueLayout>>,
    /// The regions of SET_MEM_TABLE (address = guest physical address).
    regions: Vec<MemoryRegion>,
    /// The ring memory: the rings and a zeroed virtio-net header.
    rings: Region,
    /// The zeroed header Tx chains of unwritable mbufs start with.
    zero_header: u64,
    /// The pools whose regions are in the table (kept mapped while it is).
    pools: Vec<MbufPool>,
    /// Each pool's region as an area of `mem`, in `pools` order: a Tx
    /// buffer is checked against the one holding it alone.
    pool_areas: Vec<Area>,
}

impl Table {
    /// The descriptors of each region, in `regions` order.
    fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        let mut fds: Vec<_> = self
            .pools
            .iter()
            .map(|p| p.shared_memory().expect("checked at setup").fd)
            .collect();
        fds.push(self.rings.shared_fd().expect("a shared region"));
        fds
    }

    /// Whether `len` bytes at address `at` lie inside one pool region.
    pub(super) fn holds(&self, at: usize, len: usize) -> bool {
        self.pool_area(at, len).is_some()
    }

    /// The area of the pool region holding `len` bytes at address `at`.
    pub(super) fn pool_area(&self, at: usize, len: usize) -> Option<&Area> {
        self.regions[..self.pools.len()]
            .iter()
            .position(|r| {
                let start = r.userspace_addr as usize;
                at >= start && at.saturating_add(len) <= start + r.memory_size as usize
            })
            .map(|i| &self.pool_areas[i])
    }

    /// Zeroes vring `i`'s areas, as a fresh ring is.
    fn zero_vring(&self, layout: &QueueLayout) {
        let zeros = vec![0u8; (layout.end() - layout.desc_table()) as usize];
        let _ = self.mem.write_from(layout.desc_table(), &zeros);
    }
}

/// Counters of the link.
#[derive(Clone)]
struct LinkCounters {
    ups: Arc<Counter>,
    downs: Arc<Counter>,
    refusals: Arc<Counter>,
}

/// The running control thread.
struct Control {
    /// Written to stop the thread.
    stop: Arc<OwnedFd>,
    thread: JoinHandle<()>,
}

/// Holds a slot for the control thread, once the queue's burst is over. A
/// burst that panicked gave the slot back on its way out and left the ring
/// consistent between two statements; the buffers it held are still
/// accounted for.
fn lock(slot: &VringSlot) -> SlotGuard<'_> {
    slot.control()
}

impl VirtioDriver {
    /// Reads and checks the spec's arguments: the socket path, the role,
    /// the queue pairs and whether `VIRTIO_F_IN_ORDER` is accepted.
    pub fn parse_spec(spec: &PortSpec) -> Result<(PathBuf, bool, u16, bool), PortError> {
        let mut args = SpecArgs::new(spec, KEYS);
        let path = PathBuf::from(args.require("path")?);
        let server = args.bool("server")?.unwrap_or(false);
        let queues = args.u64_in("queues", 1..=64)?.unwrap_or(1) as u16;
        let in_order = args.bool("in_order")?.unwrap_or(true);
        args.finish()?;
        Ok((path, server, queues, in_order))
    }

    /// Reads the spec's arguments; opens nothing.
    pub fn from_spec(spec: &PortSpec) -> Result<VirtioDriver, PortError> {
        let (path, server, queues, in_order) = Self::parse_spec(spec)?;
        Ok(VirtioDriver::new(path, server, queues).with_in_order(in_order))
    }

    /// Whether `VIRTIO_F_IN_ORDER` is accepted when the backend offers it
    /// (it is by default).
    pub fn with_in_order(mut self, in_order: bool) -> VirtioDriver {
        self.in_order = in_order;
        self
    }

    /// A frontend at `path`, connecting or listening (`server`), asking for
    /// up to `queue_pairs` queue pairs.
    pub fn new(path: PathBuf, server: bool, queue_pairs: u16) -> VirtioDriver {
        VirtioDriver {
            info: DeviceInfo {
                driver: "virtio",
                max_rx_queues: queue_pairs,
                max_tx_queues: queue_pairs,
                nb_rxd: (16, 32768),
                nb_txd: (16, 32768),
                desc_pow2: true,
                max_mtu: 9000,
                rx_offload_capa: Offloads::NONE,
                tx_offload_capa: Offloads::MULTI_SEG | Offloads::FAST_FREE,
                needs_rx_pool: true,
                mac: MacAddr([0x02, 0, 0, 0x76, 0x69, 0]),
            },
            path,
            server,
            in_order: true,
            slots: Vec::new(),
            table: None,
            rx_pools: Vec::new(),
            kicks: Vec::new(),
            link: None,
            control: None,
        }
    }

    fn error(&self, what: impl std::fmt::Display) -> PortError {
        PortError::Driver(format!("virtio: {}: {what}", self.path.display()))
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

    /// The memory table: each distinct Rx pool (which must be shared) and
    /// the ring memory, with a layout per vring a queue drives.
    fn build_table(&self, config: &PortConfig) -> Result<Table, PortError> {
        let mut pools: Vec<MbufPool> = Vec::new();
        for q in 0..config.rxq.len() {
            let pool = config.needed_rx_pool(q);
            if pool.shared_memory().is_none() {
                return Err(PortError::config(format!(
                    "virtio: {}: Rx queue {q}'s pool '{}' is private memory the backend cannot \
                     map; make it with MbufPool::new_shared",
                    self.path.display(),
                    pool.mempool().name()
                )));
            }
            if usize::from(pool.headroom()) < HEADER_LEN {
                return Err(PortError::config(format!(
                    "virtio: {}: Rx queue {q}'s pool has {} bytes of headroom, the virtio-net \
                     header needs {HEADER_LEN}",
                    self.path.display(),
                    pool.headroom()
                )));
            }
            let base = pool.shared_memory().expect("checked above").base;
            if !pools
                .iter()
                .any(|p| p.shared_memory().is_some_and(|s| s.base == base))
            {
                pools.push(pool.clone());
            }
        }
        if pools.len() >= MAX_REGIONS {
            return Err(PortError::config(format!(
                "virtio: {}: {} distinct Rx pools; the memory table holds {} besides the rings",
                self.path.display(),
                pools.len(),
                MAX_REGIONS - 1
            )));
        }
        let pairs = config.rxq.len().max(config.txq.len());
        // Per vring: its size when a queue drives it.
        let sizes: Vec<Option<u16>> = (0..2 * pairs)
            .map(|v| {
                let q = v / 2;
                if v % 2 == 0 {
                    config.rxq.get(q).map(|c| c.nb_rxd)
                } else {
                    config.txq.get(q).map(|c| c.nb_txd)
                }
            })
            .collect();
        // The zeroed header first, then each vring on its own pages.
        let mut offsets = Vec::new();
        let mut at = VRING_ALIGN;
        for size in &sizes {
            offsets.push(at);
            if let Some(n) = size {
                let len = QueueLayout::desc_table_len(*n)
                    + QueueLayout::avail_ring_len(*n).next_multiple_of(8)
                    + QueueLayout::used_ring_len(*n);
                at += len.next_multiple_of(VRING_ALIGN);
            }
        }
        let rings = Region::with_sharing(at as usize, HugepagePolicy::Never, Sharing::Shared)
            .map_err(|e| self.error(format!("ring memory: {e}")))?;
        let ring_base = rings.base().as_ptr() as u64;
        let mut layouts = Vec::new();
        for (size, offset) in sizes.iter().zip(&offsets) {
            layouts.push(match size {
                None => None,
                Some(n) => {
                    let desc = ring_base + offset;
                    let avail = desc + QueueLayout::desc_table_len(*n);
                    let used = avail + QueueLayout::avail_ring_len(*n).next_multiple_of(8);
                    Some(
                        QueueLayout::new(u32::from(*n), desc, avail, used)
                            .map_err(|e| self.error(e))?,
                    )
                }
            });
        }
        let mut regions: Vec<MemoryRegion> = pools
            .iter()
            .map(|p| {
                let shared = p.shared_memory().expect("checked above");
                MemoryRegion {
                    guest_phys_addr: shared.base as u64,
                    memory_size: shared.len as u64,
                    userspace_addr: shared.base as u64,
                    mmap_offset: 0,
                }
            })
            .collect();
        regions.push(MemoryRegion {
            guest_phys_addr: ring_base,
            memory_size: rings.len() as u64,
            userspace_addr: ring_base,
            mmap_offset: 0,
        });
        let mappings = regions
            .iter()
            .map(|r| {
                // `Table` keeps each region alive: the pools and the ring
                // region are its fields, dropped after `mem`, and every `Arc`
                // of `mem` is held by a ring of a slot, which the driver
                // empties before dropping the table. The pools' bytes are
                // never accessed through it (a descriptor's buffer is only
                // checked to lie inside a region).
                // SAFETY: each region is a live mapping (above); the queues
                // touch ring memory only through this table.
                let mapping = unsafe {
                    Mapping::from_raw(r.userspace_addr as *mut u8, r.memory_size as usize)
                };
                (r.guest_phys_addr, mapping)
            })
            .collect();
        let mem = Arc::new(GuestMemory::new(mappings).map_err(|e| self.error(e))?);
        let pool_areas = regions[..pools.len()]
            .iter()
            .map(|r| mem.area(r.guest_phys_addr, r.memory_size))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))?;
        Ok(Table {
            mem,
            layouts,
            regions,
            zero_header: ring_base,
            rings,
            pools,
            pool_areas,
        })
    }
}

impl PortDriver for VirtioDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        let table = Arc::new(self.build_table(config)?);
        self.slots = (0..table.layouts.len())
            .map(|_| Arc::new(VringSlot::new()))
            .collect();
        let xstats = &counters.xstats;
        self.link = Some(LinkCounters {
            ups: xstats.register("link_ups"),
            downs: xstats.register("link_downs"),
            refusals: xstats.register("link_refusals"),
        });
        self.kicks = (0..table.layouts.len())
            .map(|v| xstats.register(if v % 2 == 0 { "rx_kicks" } else { "tx_kicks" }))
            .collect();
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::new();
        for q in 0..config.rxq.len() {
            rx.push(Box::new(VirtioRx {
                slot: Arc::clone(&self.slots[2 * q]),
                pool: config.needed_rx_pool(q).clone(),
                port_id: config.port_id,
                counters: Arc::clone(counters),
                check: RxFrameCheck::new(xstats, config.mtu),
                driver: RxCounters {
                    bad_used_id: xstats.register("rx_bad_used_id_errors"),
                    bad_used_len: xstats.register("rx_bad_used_length_errors"),
                    bad_num_buffers: xstats.register("rx_bad_num_buffers_errors"),
                    ring_errors: xstats.register("rx_ring_errors"),
                },
                q,
            }));
        }
        let mut tx: Vec<Box<dyn TxQueue>> = Vec::new();
        for q in 0..config.txq.len() {
            let pool_q = q.min(config.rxq.len().saturating_sub(1));
            tx.push(Box::new(VirtioTx {
                slot: Arc::clone(&self.slots[2 * q + 1]),
                table: Arc::clone(&table),
                copy_pool: config.rx_pool_of(pool_q).cloned(),
                counters: Arc::clone(counters),
                driver: TxCounters {
                    bad_used_id: xstats.register("tx_bad_used_id_errors"),
                    bad_used_len: xstats.register("tx_bad_used_length_errors"),
                    ring_errors: xstats.register("tx_ring_errors"),
                    too_long: xstats.register("tx_too_long_errors"),
                    not_ready: xstats.register("tx_not_ready_errors"),
                },
                q,
                segments: Vec::new(),
                placed: Vec::new(),
                done: crate::mbuf::Burst::new(),
            }));
        }
        self.table = Some(table);
        self.rx_pools = (0..config.rxq.len())
            .map(|q| config.needed_rx_pool(q).clone())
            .collect();
        Ok(Queues { rx, tx })
    }

    fn start(&mut self) -> Result<(), PortError> {
        if self.control.is_some() {
            return Ok(());
        }
        let (Some(table), Some(link)) = (self.table.clone(), self.link.clone()) else {
            return Err(self.error("the port is not set up"));
        };
        let session = Session {
            in_order: self.in_order,
            table,
            slots: self.slots.clone(),
            rx_pools: self.rx_pools.clone(),
            kicks: self.kicks.clone(),
            link,
        };
        let endpoint = if self.server {
            self.clear_stale_socket()?;
            let listener = UnixListener::bind(&self.path).map_err(|e| self.error(e))?;
            Endpoint::Listen(listener, self.path.clone())
        } else {
            Endpoint::Connect(self.path.clone())
        };
        // Connecting: the first backend is set up here, so that what is
        // wrong with it is the start's error.
        let first = match &endpoint {
            Endpoint::Listen(..) => None,
            Endpoint::Connect(path) => {
                let stream = connect_at_start(path).map_err(|e| self.error(e))?;
                let front = session
                    .set_up(stream)
                    .map_err(|e| self.error(format!("setting the backend up: {e}")))?;
                Some(front)
            }
        };
        let stop = match eventfd() {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                session.take_rings(first.as_ref(), false);
                return Err(self.error(e));
            }
        };
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("virtio-ctrl".into())
            .spawn(move || session.run(endpoint, first, &thread_stop))
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
        // Whatever the thread left (it panicked, say), the rings go now.
        for slot in &self.slots {
            lock(slot).take();
        }
    }
}

impl Drop for VirtioDriver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Connects to `path`, trying for up to [`START_ATTEMPTS`] times
/// [`RECONNECT_INTERVAL`] while nobody listens there; the error says what
/// was found.
fn connect_at_start(path: &std::path::Path) -> Result<UnixStream, String> {
    let mut last = None;
    for attempt in 0..START_ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(RECONNECT_INTERVAL);
        }
        match UnixStream::connect(path) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    let e = last.expect("at least one attempt");
    let waited = RECONNECT_INTERVAL * START_ATTEMPTS;
    Err(match e.kind() {
        io::ErrorKind::NotFound => format!(
            "no socket there after {waited:?}: start the vhost-user backend first, or use \
             server=1 to wait for it"
        ),
        io::ErrorKind::ConnectionRefused => format!(
            "nobody listens on this socket after {waited:?} (a stale socket file?): start the \
             vhost-user backend"
        ),
        _ => format!("connecting: {e}"),
    })
}

/// Where the control thread finds its backends.
enum Endpoint {
    /// Accepts them on this listening socket (removed at the end).
    Listen(UnixListener, PathBuf),
    /// Connects to a backend listening at this path.
    Connect(PathBuf),
}

/// Why a backend could not be set up.
#[derive(Debug)]
enum SetupError {
    /// A request failed or was refused.
    Protocol(VhostUserError),
    /// The backend cannot drive the port.
    Refused(&'static str),
}

impl From<VhostUserError> for SetupError {
    fn from(e: VhostUserError) -> SetupError {
        SetupError::Protocol(e)
    }
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Protocol(e) => e.fmt(f),
            SetupError::Refused(what) => f.write_str(what),
        }
    }
}

/// What the control thread works with.
struct Session {
    /// Whether `VIRTIO_F_IN_ORDER` is accepted when offered.
    in_order: bool,
    table: Arc<Table>,
    slots: Vec<Arc<VringSlot>>,
    /// Each Rx queue's pool.
    rx_pools: Vec<MbufPool>,
    /// Per vring: its kicks counter.
    kicks: Vec<Arc<Counter>>,
    link: LinkCounters,
}

impl Session {
    /// Negotiates with the backend on `stream` and starts every vring a
    /// queue drives. On error the rings are left empty.
    fn set_up(&self, stream: UnixStream) -> Result<Frontend, SetupError> {
        stream
            .set_read_timeout(Some(REQUEST_TIMEOUT))
            .map_err(VhostUserError::Io)?;
        let mut front = Frontend::from_stream(stream);
        let result = self.negotiate(&mut front);
        match result {
            Ok(()) => {
                self.link.ups.inc();
                Ok(front)
            }
            Err(e) => {
                self.take_rings(None, false);
                Err(e)
            }
        }
    }

    fn negotiate(&self, front: &mut Frontend) -> Result<(), SetupError> {
        let offered = front.get_features()?;
        if !has_feature(offered, VIRTIO_F_VERSION_1) {
            return Err(SetupError::Refused(
                "the backend does not offer VIRTIO_F_VERSION_1 (legacy virtio is not supported)",
            ));
        }
        let pairs = self.table.layouts.len() / 2;
        let mut protocol = 0;
        if offered & F_PROTOCOL_FEATURES != 0 {
            protocol = front.get_protocol_features()?
                & (protocol_features::REPLY_ACK | protocol_features::MQ);
            front.set_protocol_features(protocol)?;
        }
        front.set_owner()?;
        let mut want = feature(VIRTIO_F_VERSION_1)
            | feature(VIRTIO_NET_F_MRG_RXBUF)
            | feature(VIRTIO_F_EVENT_IDX)
            | F_PROTOCOL_FEATURES;
        if self.in_order {
            want |= feature(VIRTIO_F_IN_ORDER);
        }
        if pairs > 1 {
            if !has_feature(offered, VIRTIO_NET_F_MQ) || protocol & protocol_features::MQ == 0 {
                return Err(SetupError::Refused(
                    "more than one queue pair asked of a backend without multiqueue",
                ));
            }
            if front.get_queue_num()? < pairs as u64 {
                return Err(SetupError::Refused(
                    "the backend has fewer queue pairs than the port's queues",
                ));
            }
            want |= feature(VIRTIO_NET_F_MQ);
        }
        let features = offered & want;
        front.set_features(features)?;
        let regions: Vec<_> = self
            .table
            .regions
            .iter()
            .copied()
            .zip(self.table.fds())
            .collect();
        front.set_mem_table(&regions)?;
        for (i, layout) in self.table.layouts.iter().enumerate() {
            let Some(layout) = layout else { continue };
            let index = i as u32;
            let kick = eventfd().map_err(VhostUserError::Io)?;
            let call = eventfd().map_err(VhostUserError::Io)?;
            // A fresh ring: zeroed, at index 0, before the backend sees it.
            {
                let mut guard = lock(&self.slots[i]);
                guard.take();
                self.table.zero_vring(layout);
                let mut queue = DriverQueue::new(Arc::clone(&self.table.mem), *layout, features)
                    .map_err(|_| SetupError::Refused("a vring outside its memory"))?;
                let _ = queue.disable_interrupts();
                let mut ring = Vring::new(
                    queue,
                    kick.try_clone().map_err(VhostUserError::Io)?,
                    Arc::clone(&self.kicks[i]),
                    has_feature(features, VIRTIO_NET_F_MRG_RXBUF),
                    Arc::clone(&self.table),
                );
                // An Rx ring is stocked before the backend starts, so the
                // first frames it sends find buffers.
                // (Adding a buffer of the pool to a fresh ring cannot fail:
                // nothing is counted.)
                if i.is_multiple_of(2)
                    && let Some(pool) = self.rx_pools.get(i / 2)
                {
                    ring.stock(pool, &Counter::new());
                }
                *guard = Some(ring);
            }
            front.set_vring_call(index, Some(call.as_fd()))?;
            front.set_vring_num(index, u32::from(layout.size()))?;
            front.set_vring_base(index, 0)?;
            front.set_vring_addr(&VringAddress {
                index,
                flags: 0,
                desc_user_addr: layout.desc_table(),
                used_user_addr: layout.used_ring(),
                avail_user_addr: layout.avail_ring(),
                log_guest_addr: 0,
            })?;
            front.set_vring_kick(index, Some(kick.as_fd()))?;
            if offered & F_PROTOCOL_FEATURES != 0 {
                front.set_vring_enable(index, true)?;
            }
            // The backend has its own copy of the call eventfd; the port
            // polls and never reads it.
            drop(call);
        }
        Ok(())
    }

    /// Takes every ring back from the queues; their buffers go back to the
    /// pools. With `front` and `stopping`, the backend is first told to stop
    /// each vring (GET_VRING_BASE).
    fn take_rings(&self, front: Option<&Frontend>, stopping: bool) {
        for (i, slot) in self.slots.iter().enumerate() {
            if self.table.layouts[i].is_none() {
                continue;
            }
            if stopping && let Some(front) = front {
                let _ = front.get_vring_base(i as u32);
            }
            lock(slot).take();
        }
    }

    /// The control thread: watches the backend of `first` (if any), then
    /// one backend after another until `stop`.
    fn run(self, endpoint: Endpoint, mut current: Option<Frontend>, stop: &OwnedFd) {
        loop {
            if let Some(front) = current.take() {
                let stopping = wait(Some(front.stream().as_raw_fd()), stop, None) == Woken::Stop;
                self.take_rings(Some(&front), stopping);
                if stopping {
                    break;
                }
                self.link.downs.inc();
                continue;
            }
            let stream = match &endpoint {
                Endpoint::Listen(listener, _) => {
                    match wait(Some(listener.as_raw_fd()), stop, None) {
                        Woken::Readable => match listener.accept() {
                            Ok((stream, _)) => stream,
                            Err(_) => {
                                if wait(None, stop, Some(RECONNECT_INTERVAL)) == Woken::Stop {
                                    break;
                                }
                                continue;
                            }
                        },
                        _ => break,
                    }
                }
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
            match self.set_up(stream) {
                Ok(front) => current = Some(front),
                Err(_) => {
                    self.link.refusals.inc();
                    if wait(None, stop, Some(RECONNECT_INTERVAL)) == Woken::Stop {
                        break;
                    }
                }
            }
        }
        if let Endpoint::Listen(_, path) = &endpoint {
            let _ = std::fs::remove_file(path);
        }
    }
}
