//! The control state machines: [`ServerHandshake`] and [`ClientHandshake`]
//! turn received messages into messages to send, and end in a
//! [`Connected`]: the mapped regions and the rings as views, for the data
//! path. [`serve`] and [`connect`] drive them over a [`ControlSocket`].
//!
//! The state machines do no I/O, so an event loop can drive them as well:
//! hand each received message to `receive` and send what it returns.
//!
//! # What the server checks
//!
//! - INIT: the version is [`VERSION`], the id is the server's, the mode is
//!   Ethernet, and the secret matches when the server has one. Refusals use
//!   DPDK's reasons ("Incompatible memif version", "ID not found",
//!   "Only ethernet mode supported", "Secret required", "Incorrect secret").
//! - ADD_REGION: regions come in order, within the count HELLO offered;
//!   the memfd is sealed and at least as large as claimed ([`Region::map`]).
//! - ADD_RING: the index is within the count HELLO offered for its
//!   direction and not seen before, the region exists, the ring (header and
//!   descriptors) lies inside it, the size is within HELLO's maximum, and
//!   there is no private header.
//! - CONNECT: at least one region, the rings of each direction numbered
//!   0..n with at least one each way, every ring's cookie is [`COOKIE`].
//!
//! Whatever the server refuses it answers with DISCONNECT and a reason, and
//! [`serve`] returns the error. A client likewise refuses a HELLO whose
//! version range does not hold [`VERSION`]. A DISCONNECT from the peer ends
//! either side with [`MemifError::Disconnected`].

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use super::message::{AddRegion, AddRing, Hello, Init, Message, MessageType, Mode};
use super::region::{Layout, Region};
use super::ring::{Descriptor, Regions, Ring, check_fits};
use super::socket::{ControlSocket, Received};
use super::{
    ADD_RING_FLAG_C2S, COOKIE, DEFAULT_BUFFER_SIZE, DEFAULT_LOG2_RING_SIZE, Direction,
    MAX_LOG2_RING_SIZE, MAX_REGIONS, MAX_RINGS, MemifError, RING_FLAG_MASK_INT, Role, VERSION,
};

/// What the server offers and expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// The interface id a client must ask for.
    pub id: u32,
    /// The secret a client must send; empty for none.
    pub secret: Vec<u8>,
    /// The application name in HELLO.
    pub name: String,
    /// The interface name in CONNECTED.
    pub if_name: String,
    /// The most regions accepted (1..=[`MAX_REGIONS`]).
    pub max_regions: u16,
    /// The most C2S rings accepted (1..=[`MAX_RINGS`]).
    pub max_c2s_rings: u16,
    /// The most S2C rings accepted (1..=[`MAX_RINGS`]).
    pub max_s2c_rings: u16,
    /// The largest log2 ring size accepted (at most [`MAX_LOG2_RING_SIZE`]).
    pub max_log2_ring_size: u8,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            id: 0,
            secret: Vec::new(),
            name: "sluice".into(),
            if_name: "memif0".into(),
            max_regions: MAX_REGIONS as u16,
            max_c2s_rings: MAX_RINGS as u16,
            max_s2c_rings: MAX_RINGS as u16,
            max_log2_ring_size: MAX_LOG2_RING_SIZE,
        }
    }
}

/// What the client asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// The interface id to ask for.
    pub id: u32,
    /// The secret to send; empty for none.
    pub secret: Vec<u8>,
    /// The application name in INIT.
    pub name: String,
    /// The interface name in CONNECT.
    pub if_name: String,
    /// C2S rings wanted (at least 1; fewer if the server offers fewer).
    pub c2s_rings: u16,
    /// S2C rings wanted (at least 1; fewer if the server offers fewer).
    pub s2c_rings: u16,
    /// log2 ring size wanted (smaller if the server's maximum is).
    pub log2_ring_size: u8,
    /// Bytes per packet buffer.
    pub buffer_size: u32,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            id: 0,
            secret: Vec::new(),
            name: "sluice".into(),
            if_name: "memif0".into(),
            c2s_rings: 1,
            s2c_rings: 1,
            log2_ring_size: DEFAULT_LOG2_RING_SIZE,
            buffer_size: DEFAULT_BUFFER_SIZE,
        }
    }
}

/// One ring of a connection, and its interrupt eventfd (the client's own,
/// or the one the server received).
#[derive(Debug)]
pub struct ConnectedRing {
    /// The ring.
    pub ring: Ring,
    /// The eventfd the producer signals unless the ring's flags hold
    /// [`RING_FLAG_MASK_INT`].
    pub interrupt: OwnedFd,
}

/// A finished handshake: what the data path needs.
#[derive(Debug)]
pub struct Connected {
    /// This side's role.
    pub role: Role,
    /// The regions, mapped.
    pub regions: Regions,
    /// The C2S rings, by index.
    pub c2s: Vec<ConnectedRing>,
    /// The S2C rings, by index.
    pub s2c: Vec<ConnectedRing>,
    /// The peer's application name (HELLO's or INIT's).
    pub peer_name: String,
    /// The peer's interface name (CONNECT's or CONNECTED's).
    pub peer_if_name: String,
}

/// A refusal: `reason` goes to the peer in a DISCONNECT.
fn refuse<T>(reason: &str) -> Result<T, MemifError> {
    Err(MemifError::Refused(reason.to_owned()))
}

/// What to tell the peer for an error this side raised.
fn reason_for(error: &MemifError) -> String {
    match error {
        MemifError::Refused(reason) => reason.clone(),
        other => {
            let text = other.to_string();
            text.strip_prefix("memif: ").unwrap_or(&text).to_owned()
        }
    }
}

/// Whether an error came from the peer or the socket (nothing to answer),
/// rather than from what this side refused.
fn is_peer_gone(error: &MemifError) -> bool {
    matches!(
        error,
        MemifError::Closed | MemifError::Disconnected { .. } | MemifError::Io(_)
    )
}

#[derive(Debug, PartialEq, Eq)]
enum ServerState {
    AwaitInit,
    Collecting,
    Done,
}

/// The server's side of the handshake.
#[derive(Debug)]
pub struct ServerHandshake {
    config: ServerConfig,
    state: ServerState,
    peer_name: String,
    regions: Vec<Region>,
    rings: Vec<(AddRing, OwnedFd)>,
}

/// What the server answers a message with.
#[derive(Debug)]
pub struct ServerReply {
    /// The message to send back (ACK or CONNECTED).
    pub message: Message,
    /// After CONNECTED: the connection.
    pub connected: Option<Connected>,
}

impl ServerHandshake {
    /// A server waiting for INIT; `config`'s limits must be in range.
    pub fn new(config: ServerConfig) -> Result<ServerHandshake, MemifError> {
        if !(1..=MAX_REGIONS).contains(&usize::from(config.max_regions))
            || !(1..=MAX_RINGS).contains(&usize::from(config.max_c2s_rings))
            || !(1..=MAX_RINGS).contains(&usize::from(config.max_s2c_rings))
            || config.max_log2_ring_size > MAX_LOG2_RING_SIZE
        {
            return Err(MemifError::BadConfig("server limits out of range"));
        }
        Ok(ServerHandshake {
            config,
            state: ServerState::AwaitInit,
            peer_name: String::new(),
            regions: Vec::new(),
            rings: Vec::new(),
        })
    }

    /// The HELLO to send first.
    pub fn hello(&self) -> Message {
        Message::Hello(Hello {
            name: self.config.name.clone(),
            min_version: VERSION,
            max_version: VERSION,
            max_region: self.config.max_regions - 1,
            max_s2c_ring: self.config.max_s2c_rings - 1,
            max_c2s_ring: self.config.max_c2s_rings - 1,
            max_log2_ring_size: self.config.max_log2_ring_size,
        })
    }

    /// Takes one message from the client. An error other than the peer's
    /// DISCONNECT means the server refuses: send
    /// [`Message::disconnect`] with the error's reason and close.
    pub fn receive(&mut self, received: Received) -> Result<ServerReply, MemifError> {
        let Received { message, fd } = received;
        if let Message::Disconnect(d) = message {
            self.state = ServerState::Done;
            return Err(MemifError::Disconnected {
                code: d.code,
                reason: d.reason,
            });
        }
        let result = self.step(message, fd);
        if result.is_err() {
            self.state = ServerState::Done;
        }
        result
    }

    fn ack() -> Result<ServerReply, MemifError> {
        Ok(ServerReply {
            message: Message::Ack,
            connected: None,
        })
    }

    fn step(&mut self, message: Message, fd: Option<OwnedFd>) -> Result<ServerReply, MemifError> {
        match (&self.state, message) {
            (ServerState::Done, _) => Err(MemifError::Finished),
            (ServerState::AwaitInit, Message::Init(init)) => {
                self.check_init(&init)?;
                self.peer_name = init.name;
                self.state = ServerState::Collecting;
                Self::ack()
            }
            (ServerState::Collecting, Message::AddRegion(region)) => {
                let fd = fd.ok_or(MemifError::MissingFd(MessageType::AddRegion))?;
                self.add_region(region, fd)?;
                Self::ack()
            }
            (ServerState::Collecting, Message::AddRing(ring)) => {
                let fd = fd.ok_or(MemifError::MissingFd(MessageType::AddRing))?;
                self.add_ring(ring, fd)?;
                Self::ack()
            }
            (ServerState::Collecting, Message::Connect { if_name }) => {
                let mut connected = self.connect()?;
                connected.peer_if_name = if_name;
                self.state = ServerState::Done;
                Ok(ServerReply {
                    message: Message::Connected {
                        if_name: self.config.if_name.clone(),
                    },
                    connected: Some(connected),
                })
            }
            (_, other) => refuse(&format!("Unexpected message {}", other.kind())),
        }
    }

    fn check_init(&self, init: &Init) -> Result<(), MemifError> {
        if init.version != VERSION {
            return refuse("Incompatible memif version");
        }
        if init.id != self.config.id {
            return refuse("ID not found");
        }
        if init.mode != Mode::Ethernet {
            return refuse("Only ethernet mode supported");
        }
        if !self.config.secret.is_empty() {
            if init.secret.is_empty() {
                return refuse("Secret required");
            }
            if init.secret != self.config.secret {
                return refuse("Incorrect secret");
            }
        }
        Ok(())
    }

    fn add_region(&mut self, region: AddRegion, fd: OwnedFd) -> Result<(), MemifError> {
        if usize::from(region.index) != self.regions.len()
            || self.regions.len() >= usize::from(self.config.max_regions)
        {
            return refuse("Invalid region index");
        }
        self.regions.push(Region::map(fd, region.size)?);
        Ok(())
    }

    fn add_ring(&mut self, ring: AddRing, fd: OwnedFd) -> Result<(), MemifError> {
        let (direction, limit) = match ring.direction() {
            d @ Direction::ClientToServer => (d, self.config.max_c2s_rings),
            d @ Direction::ServerToClient => (d, self.config.max_s2c_rings),
        };
        let duplicate = self
            .rings
            .iter()
            .any(|(r, _)| r.direction() == direction && r.index == ring.index);
        if ring.index >= limit || duplicate {
            return refuse("Invalid ring index");
        }
        if ring.flags & !ADD_RING_FLAG_C2S != 0 {
            return refuse("Unknown ring flags");
        }
        if ring.private_hdr_size != 0 {
            return refuse("Private header not supported");
        }
        if ring.log2_ring_size > self.config.max_log2_ring_size {
            return Err(MemifError::BadRingSize(ring.log2_ring_size));
        }
        check_fits(&self.regions, ring.region, ring.offset, ring.log2_ring_size)?;
        self.rings.push((ring, fd));
        Ok(())
    }

    fn connect(&mut self) -> Result<Connected, MemifError> {
        if self.regions.is_empty() {
            return refuse("No region");
        }
        let regions: Regions = Arc::new(std::mem::take(&mut self.regions));
        let mut c2s: Vec<Option<ConnectedRing>> = Vec::new();
        let mut s2c: Vec<Option<ConnectedRing>> = Vec::new();
        for (add, fd) in std::mem::take(&mut self.rings) {
            let ring = Ring::new(regions.clone(), add.region, add.offset, add.log2_ring_size)?;
            ring.check_cookie()?;
            ring.set_head(0);
            ring.set_tail(0);
            let list = match add.direction() {
                Direction::ClientToServer => {
                    // The server polls what it consumes.
                    ring.set_flags(RING_FLAG_MASK_INT);
                    &mut c2s
                }
                Direction::ServerToClient => &mut s2c,
            };
            let index = usize::from(add.index);
            if list.len() <= index {
                list.resize_with(index + 1, || None);
            }
            list[index] = Some(ConnectedRing {
                ring,
                interrupt: fd,
            });
        }
        let complete =
            |list: Vec<Option<ConnectedRing>>| -> Result<Vec<ConnectedRing>, MemifError> {
                if list.is_empty() || list.iter().any(Option::is_none) {
                    return refuse("Rings missing");
                }
                Ok(list.into_iter().flatten().collect())
            };
        Ok(Connected {
            role: Role::Server,
            regions,
            c2s: complete(c2s)?,
            s2c: complete(s2c)?,
            peer_name: std::mem::take(&mut self.peer_name),
            peer_if_name: String::new(),
        })
    }
}

#[derive(Debug, PartialEq, Eq)]
enum ClientState {
    AwaitHello,
    /// Sent a message, waiting for its ACK.
    AwaitAck,
    /// Sent CONNECT, waiting for CONNECTED.
    AwaitConnected,
    Done,
}

/// The client's side of the handshake.
#[derive(Debug)]
pub struct ClientHandshake {
    config: ClientConfig,
    state: ClientState,
    peer_name: String,
    layout: Option<Layout>,
    regions: Option<Regions>,
    /// Eventfds of the C2S rings, then of the S2C rings.
    interrupts: Vec<OwnedFd>,
    /// Messages still to send, each with the index of the descriptor that
    /// goes with it (into the region list for ADD_REGION, into
    /// `interrupts` for ADD_RING).
    queue: VecDeque<(Message, Attachment)>,
    /// The descriptor of the message last handed out.
    current: Attachment,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attachment {
    None,
    Region(usize),
    Interrupt(usize),
}

/// What the client does next.
#[derive(Debug)]
pub enum ClientStep {
    /// Send this message, with [`ClientHandshake::attachment`] attached.
    Send(Message),
    /// The handshake is done.
    Connected(Box<Connected>),
}

fn eventfd() -> Result<OwnedFd, MemifError> {
    // SAFETY: eventfd takes no pointers.
    let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: eventfd returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl ClientHandshake {
    /// A client waiting for HELLO; `config` must ask for at least one ring
    /// each way, a ring size up to 2^[`MAX_LOG2_RING_SIZE`], and buffers of
    /// at least 1 byte.
    pub fn new(config: ClientConfig) -> Result<ClientHandshake, MemifError> {
        if config.c2s_rings == 0
            || config.s2c_rings == 0
            || usize::from(config.c2s_rings) > MAX_RINGS
            || usize::from(config.s2c_rings) > MAX_RINGS
        {
            return Err(MemifError::BadConfig("ring counts must be 1..=255"));
        }
        if config.log2_ring_size > MAX_LOG2_RING_SIZE {
            return Err(MemifError::BadRingSize(config.log2_ring_size));
        }
        if config.buffer_size == 0 {
            return Err(MemifError::BadConfig("buffer size must not be 0"));
        }
        Ok(ClientHandshake {
            config,
            state: ClientState::AwaitHello,
            peer_name: String::new(),
            layout: None,
            regions: None,
            interrupts: Vec::new(),
            queue: VecDeque::new(),
            current: Attachment::None,
        })
    }

    /// The descriptor to attach to the message [`receive`](Self::receive)
    /// returned last.
    pub fn attachment(&self) -> Option<BorrowedFd<'_>> {
        match self.current {
            Attachment::None => None,
            Attachment::Region(i) => self.regions.as_ref().map(|r| r[i].fd()),
            Attachment::Interrupt(i) => Some(self.interrupts[i].as_fd()),
        }
    }

    /// The layout negotiated (after HELLO).
    pub fn layout(&self) -> Option<Layout> {
        self.layout
    }

    /// Takes one message from the server. An error other than the peer's
    /// DISCONNECT means the client refuses: send [`Message::disconnect`]
    /// with the error's reason and close.
    pub fn receive(&mut self, received: Received) -> Result<ClientStep, MemifError> {
        let Received { message, .. } = received;
        if let Message::Disconnect(d) = message {
            self.state = ClientState::Done;
            return Err(MemifError::Disconnected {
                code: d.code,
                reason: d.reason,
            });
        }
        let result = self.step(message);
        if result.is_err() {
            self.state = ClientState::Done;
        }
        result
    }

    fn next_message(&mut self) -> ClientStep {
        // The queue ends with CONNECT, after which nothing is popped.
        let (message, attachment) = self.queue.pop_front().unwrap_or((
            Message::Connect {
                if_name: self.config.if_name.clone(),
            },
            Attachment::None,
        ));
        self.state = if message.kind() == MessageType::Connect {
            ClientState::AwaitConnected
        } else {
            ClientState::AwaitAck
        };
        self.current = attachment;
        ClientStep::Send(message)
    }

    fn step(&mut self, message: Message) -> Result<ClientStep, MemifError> {
        match (&self.state, message) {
            (ClientState::Done, _) => Err(MemifError::Finished),
            (ClientState::AwaitHello, Message::Hello(hello)) => {
                self.setup(&hello)?;
                self.peer_name = hello.name;
                Ok(self.next_message())
            }
            (ClientState::AwaitAck, Message::Ack) => Ok(self.next_message()),
            (ClientState::AwaitConnected, Message::Connected { if_name }) => {
                self.state = ClientState::Done;
                self.current = Attachment::None;
                Ok(ClientStep::Connected(Box::new(self.connected(if_name)?)))
            }
            (_, other) => refuse(&format!("Unexpected message {}", other.kind())),
        }
    }

    /// After HELLO: negotiates, creates the region, rings and eventfds, and
    /// queues INIT, ADD_REGION, ADD_RING (C2S, then S2C) and CONNECT.
    fn setup(&mut self, hello: &Hello) -> Result<(), MemifError> {
        if hello.min_version > VERSION || hello.max_version < VERSION {
            return refuse("Incompatible memif version");
        }
        let cfg = &self.config;
        let layout = Layout {
            c2s_rings: cfg.c2s_rings.min(hello.max_c2s_ring.saturating_add(1)),
            s2c_rings: cfg.s2c_rings.min(hello.max_s2c_ring.saturating_add(1)),
            log2_ring_size: cfg.log2_ring_size.min(hello.max_log2_ring_size),
            buffer_size: cfg.buffer_size,
        };
        let size = layout.region_size();
        if size > u64::from(u32::MAX) {
            return Err(MemifError::BadRegionSize(size));
        }
        let region = Region::create("memif region 0", size)?;
        let regions: Regions = Arc::new(vec![region]);
        let mut rings = Vec::new();
        for (direction, count) in [
            (Direction::ClientToServer, layout.c2s_rings),
            (Direction::ServerToClient, layout.s2c_rings),
        ] {
            for index in 0..count {
                let offset = layout.ring_offset(direction, index) as u32;
                let ring = Ring::new(regions.clone(), 0, offset, layout.log2_ring_size)?;
                ring.set_head(0);
                ring.set_tail(0);
                ring.set_flags(0);
                for slot in 0..ring.size() {
                    ring.set_descriptor(
                        slot,
                        Descriptor {
                            flags: 0,
                            region: 0,
                            length: layout.buffer_size,
                            offset: layout.buffer_offset(direction, index, u32::from(slot)) as u32,
                            metadata: 0,
                        },
                    );
                }
                ring.set_cookie(COOKIE);
                self.interrupts.push(eventfd()?);
                rings.push(Message::AddRing(AddRing {
                    flags: match direction {
                        Direction::ClientToServer => ADD_RING_FLAG_C2S,
                        Direction::ServerToClient => 0,
                    },
                    index,
                    region: 0,
                    offset,
                    log2_ring_size: layout.log2_ring_size,
                    private_hdr_size: 0,
                }));
            }
        }
        self.queue.push_back((
            Message::Init(Init {
                version: VERSION,
                id: cfg.id,
                mode: Mode::Ethernet,
                secret: cfg.secret.clone(),
                name: cfg.name.clone(),
            }),
            Attachment::None,
        ));
        self.queue.push_back((
            Message::AddRegion(AddRegion { index: 0, size }),
            Attachment::Region(0),
        ));
        for (i, ring) in rings.into_iter().enumerate() {
            self.queue.push_back((ring, Attachment::Interrupt(i)));
        }
        self.queue.push_back((
            Message::Connect {
                if_name: cfg.if_name.clone(),
            },
            Attachment::None,
        ));
        // Every message must encode before anything is sent.
        for (message, _) in &self.queue {
            message.encode()?;
        }
        self.layout = Some(layout);
        self.regions = Some(regions);
        Ok(())
    }

    fn connected(&mut self, if_name: String) -> Result<Connected, MemifError> {
        let (Some(layout), Some(regions)) = (self.layout, self.regions.take()) else {
            return Err(MemifError::Finished);
        };
        let mut interrupts = std::mem::take(&mut self.interrupts).into_iter();
        let mut rings = |direction: Direction, count: u16| -> Result<_, MemifError> {
            (0..count)
                .map(|index| {
                    let offset = layout.ring_offset(direction, index) as u32;
                    let ring = Ring::new(regions.clone(), 0, offset, layout.log2_ring_size)?;
                    if direction == Direction::ServerToClient {
                        // The client polls what it consumes.
                        ring.set_flags(RING_FLAG_MASK_INT);
                    }
                    let interrupt = interrupts.next().ok_or(MemifError::Finished)?;
                    Ok(ConnectedRing { ring, interrupt })
                })
                .collect::<Result<Vec<_>, MemifError>>()
        };
        let c2s = rings(Direction::ClientToServer, layout.c2s_rings)?;
        let s2c = rings(Direction::ServerToClient, layout.s2c_rings)?;
        Ok(Connected {
            role: Role::Client,
            regions,
            c2s,
            s2c,
            peer_name: std::mem::take(&mut self.peer_name),
            peer_if_name: if_name,
        })
    }
}

/// Receives one message; a malformed one is refused with DISCONNECT.
fn recv_or_refuse(socket: &ControlSocket) -> Result<Received, MemifError> {
    socket.recv().inspect_err(|e| {
        if !is_peer_gone(e) && !matches!(e, MemifError::WouldBlock) {
            let _ = socket.send(&Message::disconnect(&reason_for(e)), None);
        }
    })
}

/// Sends DISCONNECT for an error this side raised, then returns it.
fn refused<T>(socket: &ControlSocket, error: MemifError) -> Result<T, MemifError> {
    if !is_peer_gone(&error) {
        let _ = socket.send(&Message::disconnect(&reason_for(&error)), None);
    }
    Err(error)
}

/// Runs the server's handshake on an accepted connection: HELLO, then one
/// answer per client message until CONNECTED (or a refusal, answered with
/// DISCONNECT). Set a timeout on `socket` first so a silent client cannot
/// hold it forever.
pub fn serve(socket: &ControlSocket, config: ServerConfig) -> Result<Connected, MemifError> {
    let mut server = ServerHandshake::new(config)?;
    socket.send(&server.hello(), None)?;
    // Each message either finishes the handshake, is refused, or adds one
    // region or ring within HELLO's limits: the loop ends.
    loop {
        let received = recv_or_refuse(socket)?;
        match server.receive(received) {
            Ok(reply) => {
                socket.send(&reply.message, None)?;
                if let Some(connected) = reply.connected {
                    return Ok(connected);
                }
            }
            Err(e) => return refused(socket, e),
        }
    }
}

/// Runs the client's handshake on a connected socket: await HELLO, send
/// INIT, the region, the rings and CONNECT, each after the previous ACK,
/// until CONNECTED. Set a timeout on `socket` first.
pub fn connect(socket: &ControlSocket, config: ClientConfig) -> Result<Connected, MemifError> {
    let mut client = ClientHandshake::new(config)?;
    // The client sends a bounded queue of messages: the loop ends.
    loop {
        let received = recv_or_refuse(socket)?;
        match client.receive(received) {
            Ok(ClientStep::Send(message)) => socket.send(&message, client.attachment())?,
            Ok(ClientStep::Connected(connected)) => return Ok(*connected),
            Err(e) => return refused(socket, e),
        }
    }
}
