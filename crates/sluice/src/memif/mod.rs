//! memif, the shared-memory packet interface of FD.io VPP, libmemif and
//! DPDK's `net_memif`: its control messages, shared regions and rings.
//!
//! Two processes on one host exchange packets through memory they both map.
//! A Unix `SOCK_SEQPACKET` socket carries the control messages that set this
//! memory up; after that, packets move through rings of descriptors in the
//! shared memory, with no system call on the data path.
//!
//! # Roles
//!
//! - The **server** (called "master" in older texts) listens on the socket
//!   file. It maps the memory the client sends and answers each client
//!   message.
//! - The **client** ("slave") connects. It creates the shared memory
//!   regions, lays out the rings and buffers in them, and sends them to the
//!   server, each region as a file descriptor over `SCM_RIGHTS`.
//!
//! Rings have a direction: a **C2S** ring (client to server; "S2M" in older
//! texts) carries packets the client sends, an **S2C** ring ("M2S") packets
//! the server sends. Every ring and every buffer lives in memory the client
//! made.
//!
//! # Message flow
//!
//! Every message is [`MSG_SIZE`] (128) bytes: a 16-bit type and a body (see
//! [`message`]).
//!
//! ```text
//! server                               client
//!   HELLO (name, versions, limits) ---->
//!                                 <---- INIT (version, id, mode, secret, name)
//!   ACK                           ---->
//!                                 <---- ADD_REGION (index, size) + memfd      (once per region)
//!   ACK                           ---->
//!                                 <---- ADD_RING (C2S or S2C, index, region,
//!                                        offset, log2 size) + eventfd          (once per ring)
//!   ACK                           ---->
//!                                 <---- CONNECT (client interface name)
//!   CONNECTED (server interface name) ->
//! ```
//!
//! The client sends one message and waits for its ACK before the next one.
//! Either side may send DISCONNECT (a code and a reason string) at any time
//! and then closes the socket; a side that refuses what it received answers
//! with DISCONNECT naming the reason. [`handshake`] drives both sides.
//!
//! # Versions and limits
//!
//! The protocol version is [`VERSION`] (major [`VERSION_MAJOR`] in the high
//! byte, minor [`VERSION_MINOR`] in the low byte, `0x0200`). HELLO carries
//! the range the server accepts; INIT the version the client speaks.
//! HELLO's limits are the highest *index* the server accepts (count − 1) for
//! regions and for each ring direction, and the largest log2 ring size.
//!
//! # Memory
//!
//! - [`region`]: a region is a `memfd` mapped shared by both sides. The
//!   client lays out its region the way DPDK does: all rings first (C2S
//!   rings, then S2C rings), then the packet buffers, `ring size` buffers of
//!   `buffer_size` bytes per ring.
//! - [`ring`]: a ring is a 128-byte header (cookie, flags, head, tail)
//!   followed by `2^log2` descriptors of 16 bytes, each naming a buffer by
//!   region, offset and length. Every access to shared memory is checked
//!   against the mapping's size, since the peer may write anything there.
//!
//! # Modules
//!
//! | module | what it holds |
//! |---|---|
//! | [`message`] | the 128-byte control message: encoding and decoding |
//! | [`socket`] | one message (and an optional file descriptor) over a `SOCK_SEQPACKET` socket |
//! | [`region`] | shared memory regions: created by the client, mapped by the server |
//! | [`ring`] | the ring header and descriptors in shared memory, and copy-mode producers and consumers |
//! | [`handshake`] | the server's and the client's control state machines, ending in a [`handshake::Connected`] |

use std::fmt;
use std::io;

pub mod handshake;
pub mod message;
pub mod region;
pub mod ring;
pub mod socket;

/// The value of every ring header's cookie field (`MEMIF_COOKIE`).
pub const COOKIE: u32 = 0x03E3_1F20;
/// The protocol's major version.
pub const VERSION_MAJOR: u8 = 2;
/// The protocol's minor version.
pub const VERSION_MINOR: u8 = 0;
/// The protocol version as it travels in messages: major << 8 | minor.
pub const VERSION: u16 = (VERSION_MAJOR as u16) << 8 | VERSION_MINOR as u16;
/// The size of every control message in bytes.
pub const MSG_SIZE: usize = 128;
/// The size of the name fields (application and interface names) in bytes,
/// the terminating NUL included.
pub const NAME_SIZE: usize = 32;
/// The size of INIT's secret field in bytes, the terminating NUL included.
pub const SECRET_SIZE: usize = 24;
/// The size of DISCONNECT's reason string in bytes, the terminating NUL
/// included.
pub const REASON_SIZE: usize = 96;
/// The most regions one connection has (DPDK's `ETH_MEMIF_MAX_REGION_NUM`).
pub const MAX_REGIONS: usize = 256;
/// The most rings one connection has in each direction (DPDK's
/// `ETH_MEMIF_MAX_NUM_Q_PAIRS`).
pub const MAX_RINGS: usize = 255;
/// The largest log2 ring size (2^14 descriptors).
pub const MAX_LOG2_RING_SIZE: u8 = 14;
/// The log2 ring size the client uses unless told otherwise (1024 slots).
pub const DEFAULT_LOG2_RING_SIZE: u8 = 10;
/// The packet buffer size the client uses unless told otherwise.
pub const DEFAULT_BUFFER_SIZE: u32 = 2048;
/// Ring header flag: the consumer polls, the producer need not signal the
/// ring's interrupt eventfd (`MEMIF_RING_FLAG_MASK_INT`).
pub const RING_FLAG_MASK_INT: u16 = 1;
/// Descriptor flag: the packet goes on in the next descriptor
/// (`MEMIF_DESC_FLAG_NEXT`).
pub const DESC_FLAG_NEXT: u16 = 1;
/// ADD_RING flag: the ring carries packets from client to server
/// (`MEMIF_MSG_ADD_RING_FLAG_C2S`, "S2M" in older texts).
pub const ADD_RING_FLAG_C2S: u16 = 1;

/// Which end of the control socket a side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Listens on the socket file and maps the client's memory.
    Server,
    /// Connects, creates the regions and rings and sends them.
    Client,
}

/// The direction a ring carries packets in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client to server (memif's `MEMIF_RING_C2S`, "S2M").
    ClientToServer,
    /// Server to client (memif's `MEMIF_RING_S2C`, "M2S").
    ServerToClient,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::ClientToServer => "C2S",
            Direction::ServerToClient => "S2C",
        })
    }
}

/// Everything that goes wrong in memif: bad messages, socket failures,
/// refused handshakes, memory the peer describes badly.
#[derive(Debug)]
#[non_exhaustive]
pub enum MemifError {
    /// A message could not be encoded or decoded.
    Message(message::MessageError),
    /// A system call on the control socket, a region or an eventfd failed.
    Io(io::Error),
    /// The peer closed the control socket.
    Closed,
    /// No message arrived (or could be sent) within the socket's timeout, or
    /// none is there on a non-blocking socket.
    WouldBlock,
    /// A received message is not [`MSG_SIZE`] bytes long.
    BadLength(usize),
    /// A message that must carry a file descriptor came without one.
    MissingFd(message::MessageType),
    /// A message came with more file descriptors than it may carry, or the
    /// kernel cut its control data short; what came was closed.
    TooManyFds,
    /// This side refused what the peer sent (a message out of order, a
    /// wrong id or secret, a bad index, ...); the reason went to the peer in
    /// a DISCONNECT.
    Refused(String),
    /// The peer sent DISCONNECT.
    Disconnected {
        /// The peer's error code.
        code: u32,
        /// The peer's reason.
        reason: String,
    },
    /// The handshake is already over (connected or refused).
    Finished,
    /// A region is smaller than the size its ADD_REGION claims.
    RegionTooSmall {
        /// The size ADD_REGION claims.
        claimed: u64,
        /// The size of the file behind the descriptor.
        actual: u64,
    },
    /// A region's size is zero or does not fit the address space or 32-bit
    /// buffer offsets.
    BadRegionSize(u64),
    /// A region's memfd is not sealed against shrinking, so the peer could
    /// truncate it under the mapping.
    RegionNotSealed,
    /// A ring does not fit its region, or is not 8-byte aligned in it.
    RingOutOfBounds {
        /// The region index.
        region: u16,
        /// The ring's offset in it.
        offset: u32,
    },
    /// A ring header's cookie is not [`COOKIE`].
    BadCookie(u32),
    /// A ring size outside 1..=2^[`MAX_LOG2_RING_SIZE`] or the negotiated
    /// maximum.
    BadRingSize(u8),
    /// A descriptor names a region that does not exist or a buffer outside
    /// its region.
    BadDescriptor {
        /// The descriptor's region index.
        region: u16,
        /// The descriptor's offset.
        offset: u32,
        /// The descriptor's length.
        length: u32,
    },
    /// A client configuration the protocol cannot express.
    BadConfig(&'static str),
}

impl fmt::Display for MemifError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemifError::Message(e) => write!(f, "memif message: {e}"),
            MemifError::Io(e) => write!(f, "memif: {e}"),
            MemifError::Closed => f.write_str("memif: the peer closed the control socket"),
            MemifError::WouldBlock => f.write_str("memif: no control message within the timeout"),
            MemifError::BadLength(n) => {
                write!(f, "memif: control message of {n} bytes, not {MSG_SIZE}")
            }
            MemifError::MissingFd(t) => write!(f, "memif: {t} without its file descriptor"),
            MemifError::TooManyFds => {
                f.write_str("memif: control message with more file descriptors than allowed")
            }
            MemifError::Refused(reason) => write!(f, "memif: refused the peer: {reason}"),
            MemifError::Disconnected { code, reason } => {
                write!(f, "memif: the peer disconnected: {reason} (code {code})")
            }
            MemifError::Finished => f.write_str("memif: the handshake is over"),
            MemifError::RegionTooSmall { claimed, actual } => write!(
                f,
                "memif: region of {actual} bytes, smaller than the {claimed} bytes claimed"
            ),
            MemifError::BadRegionSize(size) => write!(f, "memif: unusable region size {size}"),
            MemifError::RegionNotSealed => {
                f.write_str("memif: region memfd not sealed against shrinking")
            }
            MemifError::RingOutOfBounds { region, offset } => write!(
                f,
                "memif: ring at offset {offset} does not fit region {region} or is misaligned"
            ),
            MemifError::BadCookie(c) => write!(f, "memif: ring cookie {c:#x}, not {COOKIE:#x}"),
            MemifError::BadRingSize(log2) => write!(f, "memif: ring size 2^{log2} not allowed"),
            MemifError::BadDescriptor {
                region,
                offset,
                length,
            } => write!(
                f,
                "memif: descriptor (region {region}, offset {offset}, length {length}) \
                 outside its region"
            ),
            MemifError::BadConfig(what) => write!(f, "memif: {what}"),
        }
    }
}

impl std::error::Error for MemifError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MemifError::Message(e) => Some(e),
            MemifError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<message::MessageError> for MemifError {
    fn from(e: message::MessageError) -> MemifError {
        MemifError::Message(e)
    }
}

impl From<io::Error> for MemifError {
    fn from(e: io::Error) -> MemifError {
        MemifError::Io(e)
    }
}
