//! The capture protocol, spoken over the Unix stream socket
//! `<runtime dir>/dpdk/<file prefix>/sluice_capture`.
//!
//! Every message is a frame: its length (u32, little-endian) then its
//! body. A body starting with `{` is a JSON object; any other body is a
//! packet.
//!
//! 1. The client sends one [`CaptureRequest`] (JSON, at most
//!    [`MAX_REQUEST`] bytes):
//!    `{"port":0,"queue":null,"direction":"both","snaplen":65535,
//!    "count":200,"duration":null,"buffer":null}`.
//! 2. The server answers `{"error":"..."}` (unknown port or queue, a
//!    capture already running, a malformed request) and closes, or
//!    `{"start":{...}}` ([`CaptureStart`]: the interfaces captured, in the
//!    order packets name them, and the start time).
//! 3. Packets follow, one per frame: a header of [`PACKET_HEADER`] bytes —
//!    kind 0 (u8), 0 (u8), interface index (u16), original length (u32),
//!    timestamp in ns since the Unix epoch (u64), all little-endian — then
//!    the bytes captured.
//! 4. The server ends with `{"end":{...}}` ([`CaptureEnd`]: packets sent,
//!    copies dropped per interface, why it ended) and closes, once `count`
//!    packets are sent, `duration` seconds have passed, the instance ends,
//!    or the client shuts down its sending side (how a client stops a
//!    capture early). A client that closes outright ends the capture too.

use serde::{Deserialize, Serialize};

use super::tap::Direction;

/// The longest request the server reads.
pub const MAX_REQUEST: usize = 4096;

/// Bytes before a packet's data.
pub const PACKET_HEADER: usize = 16;

/// Which directions a capture takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Directions {
    /// Received packets only.
    Rx,
    /// Sent packets only.
    Tx,
    /// Both.
    #[default]
    Both,
}

impl Directions {
    /// The directions, Rx first.
    pub fn list(self) -> &'static [Direction] {
        match self {
            Directions::Rx => &[Direction::Rx],
            Directions::Tx => &[Direction::Tx],
            Directions::Both => &[Direction::Rx, Direction::Tx],
        }
    }
}

/// What the client asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureRequest {
    /// The port.
    pub port: u16,
    /// One queue, or every queue of the port.
    #[serde(default)]
    pub queue: Option<u16>,
    /// Which directions.
    #[serde(default)]
    pub direction: Directions,
    /// Bytes kept of each packet (at least 1).
    pub snaplen: u32,
    /// Stop after this many packets.
    #[serde(default)]
    pub count: Option<u64>,
    /// Stop after this many seconds.
    #[serde(default)]
    pub duration: Option<f64>,
    /// Slots of each tap's buffer (default [`DEFAULT_BUFFER`]).
    #[serde(default)]
    pub buffer: Option<u32>,
}

/// Slots of a tap's buffer unless the request says otherwise.
pub const DEFAULT_BUFFER: u32 = 1024;

/// Most slots a request may ask for.
pub const MAX_BUFFER: u32 = 1 << 16;

/// One interface of a capture: a queue of a port in one direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// `port0/rx0`, `port1/tx3`, ...
    pub name: String,
    /// The port.
    pub port: u16,
    /// The queue.
    pub queue: u16,
    /// The direction.
    pub direction: Direction,
    /// Bytes kept of each packet.
    pub snaplen: u32,
}

impl Interface {
    /// The name of `port`'s queue `queue` in `direction`: `port0/rx0`.
    pub fn name_of(port: u16, queue: u16, direction: Direction) -> String {
        format!("port{port}/{}{queue}", direction.name())
    }
}

/// The server's answer to a valid request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureStart {
    /// The interfaces, in the order packets name them.
    pub interfaces: Vec<Interface>,
    /// When the capture started, ns since the Unix epoch.
    pub start_ns: u64,
}

/// Why a capture ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndReason {
    /// `count` packets were sent.
    Count,
    /// `duration` seconds passed.
    Duration,
    /// The client stopped it.
    Client,
    /// The instance is ending.
    Shutdown,
}

/// The server's last message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureEnd {
    /// Packets sent to the client.
    pub packets: u64,
    /// Copies each interface dropped because its buffer was full, in the
    /// order of [`CaptureStart::interfaces`].
    pub drops: Vec<u64>,
    /// When the capture ended, ns since the Unix epoch.
    pub end_ns: u64,
    /// Why.
    pub reason: EndReason,
}

/// A control message from the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Control {
    /// The capture runs.
    Start(CaptureStart),
    /// The capture has ended.
    End(CaptureEnd),
    /// The request was refused.
    Error(String),
}

/// A packet message's header, as [`PACKET_HEADER`] bytes.
pub fn packet_header(interface: u16, orig_len: u32, ts_ns: u64) -> [u8; PACKET_HEADER] {
    let mut h = [0u8; PACKET_HEADER];
    h[2..4].copy_from_slice(&interface.to_le_bytes());
    h[4..8].copy_from_slice(&orig_len.to_le_bytes());
    h[8..16].copy_from_slice(&ts_ns.to_le_bytes());
    h
}

/// One packet as received by the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Its interface's index in [`CaptureStart::interfaces`].
    pub interface: u16,
    /// Its whole length.
    pub orig_len: u32,
    /// When its burst was mirrored, ns since the Unix epoch.
    pub ts_ns: u64,
    /// Its bytes captured.
    pub data: &'a [u8],
}

/// Parses a packet message's body; `None` when it is not one.
pub fn parse_packet(body: &[u8]) -> Option<Packet<'_>> {
    if body.len() < PACKET_HEADER || body[0] != 0 {
        return None;
    }
    let u16_at = |i: usize| u16::from_le_bytes([body[i], body[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().unwrap_or([0; 8]));
    Some(Packet {
        interface: u16_at(2),
        orig_len: u32_at(4),
        ts_ns: u64_at(8),
        data: &body[PACKET_HEADER..],
    })
}

/// A frame: the body's length, then the body.
pub fn frame(body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_header_parses_back() {
        let mut body = packet_header(3, 1514, 1_700_000_000_123_456_789).to_vec();
        body.extend_from_slice(&[1, 2, 3]);
        let p = parse_packet(&body).unwrap();
        assert_eq!(
            (p.interface, p.orig_len, p.ts_ns, p.data),
            (3, 1514, 1_700_000_000_123_456_789, &[1u8, 2, 3][..])
        );
        assert_eq!(parse_packet(b"{\"end\":{}}"), None);
        assert_eq!(parse_packet(&[0; 15]), None);
    }

    #[test]
    fn requests_parse_with_defaults_and_reject_unknown_fields() {
        let r: CaptureRequest = serde_json::from_str(r#"{"port":1,"snaplen":96}"#).unwrap();
        assert_eq!(r.port, 1);
        assert_eq!(
            (r.queue, r.direction, r.count),
            (None, Directions::Both, None)
        );
        let r: CaptureRequest =
            serde_json::from_str(r#"{"port":0,"queue":2,"direction":"tx","snaplen":64}"#).unwrap();
        assert_eq!(
            (r.queue, r.direction.list()),
            (Some(2), &[Direction::Tx][..])
        );
        assert!(serde_json::from_str::<CaptureRequest>(r#"{"port":0,"snaplen":1,"x":1}"#).is_err());
        assert!(serde_json::from_str::<CaptureRequest>(r#"{"port":-1,"snaplen":1}"#).is_err());
    }
}
