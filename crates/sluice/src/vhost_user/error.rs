//! [`VhostUserError`]: what can go wrong on a vhost-user connection.

use std::fmt;
use std::io;

use super::message::Request;

/// An error of the vhost-user protocol: on the socket, in a message, in the
/// backend's state machine or in a reply the frontend receives.
///
/// Malformed input from the peer always ends here, never in a panic. After
/// a socket-level error ([`Io`](Self::Io), [`Timeout`](Self::Timeout),
/// [`Closed`](Self::Closed), [`ShortRead`](Self::ShortRead),
/// [`PayloadTooLarge`](Self::PayloadTooLarge),
/// [`TooManyFds`](Self::TooManyFds)) the byte stream may be out of step
/// and the connection should be closed; after the others the whole
/// message has been read and the caller may go on.
#[derive(Debug)]
#[non_exhaustive]
pub enum VhostUserError {
    /// The socket failed.
    Io(io::Error),
    /// No message arrived within the socket's read timeout.
    Timeout,
    /// The peer closed the connection between two messages.
    Closed,
    /// The peer closed the connection in the middle of a message.
    ShortRead {
        /// Bytes the message needed.
        expected: usize,
        /// Bytes that arrived.
        got: usize,
    },
    /// The header's version bits are not 0x1.
    BadVersion {
        /// The header's flags field.
        flags: u32,
    },
    /// The request code is not one this implementation knows.
    UnknownRequest {
        /// The request code.
        code: u32,
    },
    /// The header announces a payload larger than any message has.
    PayloadTooLarge {
        /// The request code.
        code: u32,
        /// The header's size field.
        size: u32,
    },
    /// The payload's size does not fit the request.
    BadPayloadSize {
        /// The request.
        request: Request,
        /// The header's size field.
        size: u32,
    },
    /// A payload field holds a value the request does not allow.
    Malformed {
        /// The request.
        request: Request,
        /// What is wrong.
        what: &'static str,
    },
    /// More file descriptors arrived than a message may carry (8).
    TooManyFds,
    /// The message carries a different number of file descriptors than its
    /// request needs; those received have been closed.
    FdCount {
        /// The request.
        request: Request,
        /// Descriptors the request needs.
        expected: usize,
        /// Descriptors that arrived.
        got: usize,
    },
    /// The backend does not implement the request, or it needs a feature
    /// that was not offered or negotiated.
    Unsupported {
        /// The request.
        request: Request,
        /// Why.
        what: &'static str,
    },
    /// Features or protocol features outside what the backend offers.
    FeaturesNotOffered {
        /// The request (SET_FEATURES or SET_PROTOCOL_FEATURES).
        request: Request,
        /// The bits asked for that were not offered.
        bits: u64,
    },
    /// A memory region of SET_MEM_TABLE is unusable.
    BadRegion {
        /// The region's position in the table.
        region: usize,
        /// What is wrong with it.
        what: &'static str,
    },
    /// Mapping a memory region failed.
    Map(io::Error),
    /// A vring index, size, address or state is unusable.
    BadVring {
        /// The vring index.
        index: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// A guest address range lies outside every mapped region.
    OutOfRange {
        /// The start of the range.
        addr: u64,
        /// Its length in bytes.
        len: u64,
    },
    /// A reply does not match the request it answers.
    BadReply {
        /// The request sent.
        request: Request,
        /// What is wrong with the reply.
        what: &'static str,
    },
    /// The backend answered a request with a failure status (REPLY_ACK).
    Nack {
        /// The request sent.
        request: Request,
        /// The nonzero status it returned.
        status: u64,
    },
}

impl fmt::Display for VhostUserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use VhostUserError::*;
        match self {
            Io(e) => write!(f, "vhost-user socket: {e}"),
            Timeout => f.write_str("vhost-user socket: no message within the read timeout"),
            Closed => f.write_str("vhost-user socket: the peer closed the connection"),
            ShortRead { expected, got } => write!(
                f,
                "vhost-user socket: the peer closed the connection after {got} of {expected} bytes of a message"
            ),
            BadVersion { flags } => {
                write!(
                    f,
                    "vhost-user message: version {} in flags {flags:#x}, expected 1",
                    flags & 3
                )
            }
            UnknownRequest { code } => write!(f, "vhost-user message: unknown request {code}"),
            PayloadTooLarge { code, size } => {
                write!(
                    f,
                    "vhost-user message: request {code} announces a {size}-byte payload, above the limit"
                )
            }
            BadPayloadSize { request, size } => {
                write!(
                    f,
                    "vhost-user message: {request} with a {size}-byte payload"
                )
            }
            Malformed { request, what } => write!(f, "vhost-user message: {request}: {what}"),
            TooManyFds => f.write_str("vhost-user message: more than 8 file descriptors"),
            FdCount {
                request,
                expected,
                got,
            } => write!(
                f,
                "vhost-user message: {request} carries {got} file descriptors, expected {expected}"
            ),
            Unsupported { request, what } => write!(f, "vhost-user: {request}: {what}"),
            FeaturesNotOffered { request, bits } => {
                write!(f, "vhost-user: {request}: bits {bits:#x} were not offered")
            }
            BadRegion { region, what } => write!(f, "vhost-user memory region {region}: {what}"),
            Map(e) => write!(f, "vhost-user memory region: mmap: {e}"),
            BadVring { index, what } => write!(f, "vhost-user vring {index}: {what}"),
            OutOfRange { addr, len } => {
                write!(
                    f,
                    "vhost-user memory: {len} bytes at {addr:#x} lie outside every region"
                )
            }
            BadReply { request, what } => write!(f, "vhost-user reply to {request}: {what}"),
            Nack { request, status } => {
                write!(
                    f,
                    "vhost-user: the backend failed {request} (status {status})"
                )
            }
        }
    }
}

impl std::error::Error for VhostUserError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VhostUserError::Io(e) | VhostUserError::Map(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for VhostUserError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => VhostUserError::Timeout,
            _ => VhostUserError::Io(e),
        }
    }
}
