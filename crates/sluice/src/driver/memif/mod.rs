//! `memif`: a port over the shared-memory packet interface of FD.io VPP,
//! libmemif and DPDK's `net_memif` ([`crate::memif`] speaks the protocol).
//!
//! Spec: `memif:socket=PATH[,role=server|client][,id=N][,rings=N]
//! [,buffer_size=N][,ring_size=N][,secret=S]`
//! - `socket` (required): the control socket file.
//! - `role` (default `server`): `server` listens at `socket` (a stale
//!   socket file is removed; one a live server, or another process with
//!   a socket of another kind, listens on is an error);
//!   `client` connects, retrying until a server is there.
//! - `id` (default 0): the interface id both sides must agree on.
//! - `rings` (1..=255, default: the port's most queues): rings per
//!   direction the client asks for, or the server accepts.
//! - `buffer_size` (64..=65535, default 2048) and `ring_size` (a power of
//!   two in 2..=16384, default 1024): the client's packet buffers and
//!   rings (a server takes what its client sends).
//! - `secret` (at most 23 bytes): the secret the client sends and the
//!   server requires.
//!
//! # Control thread
//! Starting the port starts a thread that runs the handshake and then
//! watches the control socket. When the peer sends DISCONNECT or closes
//! the socket, the rings go not-ready, the thread waits until no queue is
//! in them and unmaps them; a server then accepts the next client, a client
//! connects again. Stopping the port ends the thread (a DISCONNECT goes to
//! the peer) and a server removes its socket file.
//!
//! # Data path
//! Queue `i` uses ring `i` of each direction: the client sends on the
//! client-to-server ring and receives on the server-to-client one, the
//! server the reverse. Rx copies each packet (a chain of at most 32
//! descriptors, at most 64 KiB) into mbufs from the port's pool, taken
//! before the packet leaves the ring (with the pool empty, packets wait in
//! the ring and `rx_nombuf` counts); Tx copies
//! each mbuf into the ring's buffers and frees it, and takes fewer than
//! offered when the ring is full. Each burst checks once, with one atomic
//! load, whether the link is up. After producing, Tx signals the ring's
//! interrupt eventfd when the peer's ring flags ask for interrupts; this
//! port itself polls and asks for none.
//!
//! # Counters
//! Queue statistics as every port's; xstats `rx_bad_descriptor_errors`,
//! `rx_chain_too_long_errors`, `rx_incomplete_chain_errors` (and the same
//! for `tx_`): packets a peer described wrongly in a ring, each dropped and
//! counted in the queue's errors; `rx_bad_ring_index`, `tx_bad_ring_index`:
//! times the peer's head and tail were further apart than the ring (nothing
//! moved); `tx_not_ready_errors`:
//! packets sent while no peer was connected, dropped; `link_ups` and
//! `link_downs`: connections made and lost; `link_refusals`: handshakes
//! that failed (a wrong id or secret, a peer that went mid-way, a message
//! out of order), each answered with DISCONNECT when the peer is still
//! there.

mod queue;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::counter::Counter;
use crate::mbuf::Burst;
use crate::memif::handshake::{self, ClientConfig, Connected, ServerConfig};
use crate::memif::message::Message;
use crate::memif::ring::{Consumer, Producer};
use crate::memif::socket::{ControlListener, ControlSocket};
use crate::memif::{MemifError, Role, SECRET_SIZE};
use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxQueue, SpecArgs, TxQueue,
};

use queue::{ErrorCounters, Link, MemifRx, MemifTx, RxRing, Slot, TxRing};

/// Spec keys.
const KEYS: &[&str] = &[
    "socket",
    "role",
    "id",
    "rings",
    "buffer_size",
    "ring_size",
    "secret",
];

/// How often the control thread looks at the stop flag while it waits for
/// a client, a server or a message.
const POLL: Duration = Duration::from_millis(50);

/// How long one handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the spec says.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Settings {
    socket: PathBuf,
    role: Role,
    id: u32,
    rings: Option<u16>,
    buffer_size: u32,
    log2_ring_size: u8,
    secret: Vec<u8>,
}

/// The `memif` driver.
pub struct MemifDriver {
    info: DeviceInfo,
    settings: Settings,
    /// Rings per direction: set at setup.
    rings: u16,
    link: Option<Arc<Link>>,
    counters: Option<Arc<PortCounters>>,
    /// What the control thread counts.
    link_counts: Option<LinkCounts>,
    control: Option<Control>,
}

/// The running control thread.
struct Control {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl MemifDriver {
    /// Reads the spec's arguments.
    pub fn from_spec(spec: &PortSpec) -> Result<MemifDriver, PortError> {
        let settings = settings(spec)?;
        Ok(MemifDriver {
            info: DeviceInfo {
                driver: "memif",
                max_rx_queues: crate::memif::MAX_RINGS as u16,
                max_tx_queues: crate::memif::MAX_RINGS as u16,
                nb_rxd: (1, u16::MAX),
                nb_txd: (1, u16::MAX),
                desc_pow2: false,
                max_mtu: 9000,
                rx_offload_capa: Offloads::NONE,
                tx_offload_capa: Offloads::MULTI_SEG,
                needs_rx_pool: true,
                mac: MacAddr([0x02, 0, 0, 0x6d, 0x69, 0x66]),
            },
            settings,
            rings: 1,
            link: None,
            counters: None,
            link_counts: None,
            control: None,
        })
    }

    /// Checks the spec's arguments; opens nothing.
    pub fn parse_spec(spec: &PortSpec) -> Result<(), PortError> {
        settings(spec).map(|_| ())
    }
}

/// Reads the spec's arguments.
fn settings(spec: &PortSpec) -> Result<Settings, PortError> {
    let mut args = SpecArgs::new(spec, KEYS);
    let socket = PathBuf::from(args.require("socket")?);
    let role = match args.choice("role", &["server", "client"])? {
        Some("client") => Role::Client,
        _ => Role::Server,
    };
    let id = args.u64_in("id", 0..=u64::from(u32::MAX))?.unwrap_or(0) as u32;
    let rings = args.u64_in("rings", 1..=255)?.map(|n| n as u16);
    let buffer_size = args.u64_in("buffer_size", 64..=65_535)?.unwrap_or(2048) as u32;
    let ring_size = args.u64_in("ring_size", 2..=16_384)?.unwrap_or(1024);
    if !ring_size.is_power_of_two() {
        return Err(PortError::config(format!(
            "memif: ring_size {ring_size} is not a power of two"
        )));
    }
    let secret = args.str("secret").unwrap_or("").as_bytes().to_vec();
    if secret.len() >= SECRET_SIZE {
        return Err(PortError::config(format!(
            "memif: secret of {} bytes, at most {} allowed",
            secret.len(),
            SECRET_SIZE - 1
        )));
    }
    args.finish()?;
    Ok(Settings {
        socket,
        role,
        id,
        rings,
        buffer_size,
        log2_ring_size: ring_size.trailing_zeros() as u8,
        secret,
    })
}

/// A live server at `path` answers a connect, a listener of another kind
/// refuses its type; a stale file does neither.
fn claim_socket_path(path: &Path) -> Result<ControlListener, PortError> {
    if path.exists() {
        match ControlSocket::connect(path) {
            Ok(_) => {
                return Err(PortError::config(format!(
                    "memif: a server already listens at {}",
                    path.display()
                )));
            }
            // A socket of another kind someone listens on (a stream
            // socket: EPROTOTYPE) is theirs, not a stale file.
            Err(e) if e.raw_os_error() == Some(libc::EPROTOTYPE) => {
                return Err(PortError::config(format!(
                    "memif: another process listens at {} (not a memif socket)",
                    path.display()
                )));
            }
            Err(_) => {}
        }
        std::fs::remove_file(path).map_err(|e| {
            PortError::config(format!(
                "memif: cannot remove stale socket {}: {e}",
                path.display()
            ))
        })?;
    }
    let listener = ControlListener::bind(path).map_err(|e| {
        PortError::config(format!("memif: cannot listen at {}: {e}", path.display()))
    })?;
    listener
        .set_timeout(Some(POLL))
        .map_err(|e| PortError::config(format!("memif: {e}")))?;
    Ok(listener)
}

impl PortDriver for MemifDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        let (nb_rx, nb_tx) = (config.rxq.len(), config.txq.len());
        self.rings = self
            .settings
            .rings
            .unwrap_or(nb_rx.max(nb_tx).max(1) as u16);
        let link = Arc::new(Link {
            rx: (0..nb_rx).map(|_| Slot::new()).collect(),
            tx: (0..nb_tx).map(|_| Slot::new()).collect(),
        });
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::new();
        for q in 0..nb_rx {
            rx.push(Box::new(MemifRx {
                link: Arc::clone(&link),
                pool: config.needed_rx_pool(q).clone(),
                spare: Burst::new(),
                port_id: config.port_id,
                errors: ErrorCounters::register(counters, "rx"),
                counters: Arc::clone(counters),
                q,
                started: false,
            }));
        }
        let mut tx: Vec<Box<dyn TxQueue>> = Vec::new();
        for q in 0..nb_tx {
            tx.push(Box::new(MemifTx {
                link: Arc::clone(&link),
                scratch: Vec::new(),
                errors: ErrorCounters::register(counters, "tx"),
                not_ready: counters.xstats.register("tx_not_ready_errors"),
                counters: Arc::clone(counters),
                q,
                started: false,
            }));
        }
        self.link = Some(link);
        self.counters = Some(Arc::clone(counters));
        // The control thread is their single writer.
        self.link_counts = Some(LinkCounts {
            ups: counters.xstats.register("link_ups"),
            downs: counters.xstats.register("link_downs"),
            refusals: counters.xstats.register("link_refusals"),
        });
        Ok(Queues { rx, tx })
    }

    fn start(&mut self) -> Result<(), PortError> {
        let (Some(link), Some(counters), Some(counts)) =
            (&self.link, &self.counters, &self.link_counts)
        else {
            return Err(PortError::config("memif: port not set up".to_string()));
        };
        let listener = match self.settings.role {
            Role::Server => Some(claim_socket_path(&self.settings.socket)?),
            Role::Client => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            settings: self.settings.clone(),
            rings: self.rings,
            link: Arc::clone(link),
            counters: Arc::clone(counters),
            counts: counts.clone(),
            stop: Arc::clone(&stop),
        };
        let thread = std::thread::Builder::new()
            .name("memif-control".into())
            .spawn(move || worker.run(listener))
            .map_err(|e| PortError::config(format!("memif: control thread: {e}")))?;
        self.control = Some(Control { stop, thread });
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(control) = self.control.take() {
            control.stop.store(true, Ordering::Relaxed);
            // The thread ends within a poll interval or a handshake timeout.
            let _ = control.thread.join();
        }
    }
}

impl Drop for MemifDriver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Connections made, lost and refused, counted by the control thread.
#[derive(Clone)]
struct LinkCounts {
    ups: Arc<Counter>,
    downs: Arc<Counter>,
    refusals: Arc<Counter>,
}

/// What the control thread works with.
struct Worker {
    settings: Settings,
    rings: u16,
    link: Arc<Link>,
    counters: Arc<PortCounters>,
    counts: LinkCounts,
    stop: Arc<AtomicBool>,
}

/// How a connection ended.
enum End {
    /// The peer went away: wait for the next one.
    Peer,
    /// The port stops.
    Stop,
}

impl Worker {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Until the port stops: get a connection, run it, tear it down.
    fn run(self, listener: Option<ControlListener>) {
        while !self.stopping() {
            let Some(socket) = self.next_socket(listener.as_ref()) else {
                continue;
            };
            let connected = match self.handshake(&socket) {
                Ok(c) => c,
                Err(_) => {
                    // Refused or gone mid-handshake: the next attempt.
                    self.counts.refusals.inc();
                    if listener.is_none() {
                        self.pause();
                    }
                    continue;
                }
            };
            let installed = self.install(connected);
            self.counts.ups.inc();
            let end = if installed {
                self.watch(&socket)
            } else {
                let _ = socket.send(&Message::disconnect("interface not ready"), None);
                End::Stop
            };
            let torn_down = self.teardown();
            // Counted once the rings are gone: from here Tx finds the link
            // down.
            self.counts.downs.inc();
            if !installed || torn_down.is_err() {
                self.counters.set_fault(
                    "memif: a queue did not leave its ring; the link stays down".to_string(),
                );
                return;
            }
            match end {
                End::Stop => break,
                End::Peer => {
                    if listener.is_none() {
                        self.pause();
                    }
                }
            }
        }
        // Dropping the listener removes the socket file.
        drop(listener);
    }

    /// Waits one poll interval (a client between connection attempts).
    fn pause(&self) {
        if !self.stopping() {
            std::thread::sleep(POLL);
        }
    }

    /// The next connection: an accepted client, or a server reached.
    fn next_socket(&self, listener: Option<&ControlListener>) -> Option<ControlSocket> {
        match listener {
            Some(listener) => listener.accept().ok(),
            None => match ControlSocket::connect(&self.settings.socket) {
                Ok(s) => Some(s),
                Err(_) => {
                    self.pause();
                    None
                }
            },
        }
    }

    fn handshake(&self, socket: &ControlSocket) -> Result<Connected, MemifError> {
        socket.set_timeout(Some(HANDSHAKE_TIMEOUT))?;
        let s = &self.settings;
        match s.role {
            Role::Server => handshake::serve(
                socket,
                ServerConfig {
                    id: s.id,
                    secret: s.secret.clone(),
                    max_c2s_rings: self.rings,
                    max_s2c_rings: self.rings,
                    ..ServerConfig::default()
                },
            ),
            Role::Client => handshake::connect(
                socket,
                ClientConfig {
                    id: s.id,
                    secret: s.secret.clone(),
                    c2s_rings: self.rings,
                    s2c_rings: self.rings,
                    log2_ring_size: s.log2_ring_size,
                    buffer_size: s.buffer_size,
                    ..ClientConfig::default()
                },
            ),
        }
    }

    /// Hands ring `i` of each direction to queue `i`; false if a queue
    /// still held its slot (the rings are then unmapped unused).
    fn install(&self, connected: Connected) -> bool {
        let role = connected.role;
        let buffer_size = self.settings.buffer_size;
        let (consume, produce) = match role {
            Role::Client => (connected.s2c, connected.c2s),
            Role::Server => (connected.c2s, connected.s2c),
        };
        let mut installed = true;
        for (slot, ring) in self.link.rx.iter().zip(consume) {
            let ring = RxRing::new(Consumer::new(ring.ring, role, buffer_size));
            installed &= slot.install(ring).is_ok();
        }
        for (slot, ring) in self.link.tx.iter().zip(produce) {
            let producer = Producer::new(ring.ring, role, buffer_size);
            installed &= slot.install(TxRing::new(producer, ring.interrupt)).is_ok();
        }
        installed
    }

    /// Waits until the peer goes or the port stops.
    fn watch(&self, socket: &ControlSocket) -> End {
        if socket.set_timeout(Some(POLL)).is_err() {
            return End::Peer;
        }
        loop {
            if self.stopping() {
                let _ = socket.send(&Message::disconnect("interface stopped"), None);
                return End::Stop;
            }
            match socket.recv() {
                Err(MemifError::WouldBlock) => continue,
                Err(MemifError::Io(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                // DISCONNECT, a closed socket, or anything else: the
                // connection is over.
                Ok(_) => {
                    let _ = socket.send(&Message::disconnect("unexpected message"), None);
                    return End::Peer;
                }
                Err(_) => return End::Peer,
            }
        }
    }

    /// Takes every ring back once no queue is in it; the rings' memory is
    /// unmapped when the last of them goes.
    fn teardown(&self) -> Result<(), ()> {
        let mut stuck = false;
        for slot in self.link.rx.iter() {
            stuck |= slot.take().is_err();
        }
        for slot in self.link.tx.iter() {
            stuck |= slot.take().is_err();
        }
        if stuck { Err(()) } else { Ok(()) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
