//! The 128-byte control message: a little-endian `u16` type at offset 0,
//! then the body of that type, packed (no padding), the rest zero.
//!
//! | type | body (offsets from the start of the message) |
//! |---|---|
//! | ACK (1) | none |
//! | HELLO (2) | name `2..34`, min version `34..36`, max version `36..38`, max region `38..40`, max S2C ring `40..42`, max C2S ring `42..44`, max log2 ring size `44` |
//! | INIT (3) | version `2..4`, id `4..8`, mode `8`, secret `9..33`, name `33..65` |
//! | ADD_REGION (4) | index `2..4`, size (`u64`) `4..12` — the memfd travels with it |
//! | ADD_RING (5) | flags `2..4`, index `4..6`, region `6..8`, offset `8..12`, log2 ring size `12`, private header size `13..15` — the interrupt eventfd travels with it |
//! | CONNECT (6) | client interface name `2..34` |
//! | CONNECTED (7) | server interface name `2..34` |
//! | DISCONNECT (8) | code `2..6`, reason `6..102` |
//!
//! Messages are read field by field from the byte slice ([`field`] holds
//! the ranges), never by reinterpreting the bytes as a C struct.
//!
//! # Strings
//!
//! Names, the secret and the reason are NUL-padded byte fields that C peers
//! read as C strings, so [`Message::encode`] refuses a string that does not
//! leave room for the terminating NUL or that holds a NUL itself.
//! Decoding stops at the first NUL (or the field's end). Names and reasons
//! are for display only, so bytes that are not UTF-8 decode lossily
//! (U+FFFD); the secret is compared, so it stays bytes.

use std::fmt;

use super::{MSG_SIZE, NAME_SIZE, REASON_SIZE, SECRET_SIZE};

/// The byte ranges of every field.
pub mod field {
    use std::ops::Range;

    /// A field of `len` bytes at offset `at`.
    const fn at(at: usize, len: usize) -> Range<usize> {
        at..at + len
    }

    /// The message type (all messages).
    pub const TYPE: Range<usize> = at(0, 2);

    /// HELLO: the server application's name.
    pub const HELLO_NAME: Range<usize> = at(2, super::NAME_SIZE);
    /// HELLO: the lowest version the server speaks.
    pub const HELLO_MIN_VERSION: Range<usize> = at(34, 2);
    /// HELLO: the highest version the server speaks.
    pub const HELLO_MAX_VERSION: Range<usize> = at(36, 2);
    /// HELLO: the highest region index the server accepts.
    pub const HELLO_MAX_REGION: Range<usize> = at(38, 2);
    /// HELLO: the highest S2C ring index the server accepts.
    pub const HELLO_MAX_S2C_RING: Range<usize> = at(40, 2);
    /// HELLO: the highest C2S ring index the server accepts.
    pub const HELLO_MAX_C2S_RING: Range<usize> = at(42, 2);
    /// HELLO: the largest log2 ring size the server accepts.
    pub const HELLO_MAX_LOG2_RING_SIZE: usize = 44;

    /// INIT: the version the client speaks.
    pub const INIT_VERSION: Range<usize> = at(2, 2);
    /// INIT: the interface id the client asks for.
    pub const INIT_ID: Range<usize> = at(4, 4);
    /// INIT: the interface mode.
    pub const INIT_MODE: usize = 8;
    /// INIT: the secret.
    pub const INIT_SECRET: Range<usize> = at(9, super::SECRET_SIZE);
    /// INIT: the client application's name.
    pub const INIT_NAME: Range<usize> = at(33, super::NAME_SIZE);

    /// ADD_REGION: the region's index.
    pub const REGION_INDEX: Range<usize> = at(2, 2);
    /// ADD_REGION: the region's size in bytes.
    pub const REGION_SIZE: Range<usize> = at(4, 8);

    /// ADD_RING: flags ([`ADD_RING_FLAG_C2S`](crate::memif::ADD_RING_FLAG_C2S)).
    pub const RING_FLAGS: Range<usize> = at(2, 2);
    /// ADD_RING: the ring's index in its direction.
    pub const RING_INDEX: Range<usize> = at(4, 2);
    /// ADD_RING: the region the ring lives in.
    pub const RING_REGION: Range<usize> = at(6, 2);
    /// ADD_RING: the ring header's offset in its region.
    pub const RING_OFFSET: Range<usize> = at(8, 4);
    /// ADD_RING: log2 of the number of descriptors.
    pub const RING_LOG2_SIZE: usize = 12;
    /// ADD_RING: the private header size.
    pub const RING_PRIVATE_HDR_SIZE: Range<usize> = at(13, 2);

    /// CONNECT and CONNECTED: the sender's interface name.
    pub const IF_NAME: Range<usize> = at(2, super::NAME_SIZE);

    /// DISCONNECT: the error code.
    pub const DISCONNECT_CODE: Range<usize> = at(2, 4);
    /// DISCONNECT: the reason.
    pub const DISCONNECT_REASON: Range<usize> = at(6, super::REASON_SIZE);
}

/// The message types (`memif_msg_type_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum MessageType {
    /// ACK: the server accepted the client's last message.
    Ack = 1,
    /// HELLO: the server's greeting.
    Hello = 2,
    /// INIT: the client asks for an interface.
    Init = 3,
    /// ADD_REGION: a shared memory region, its memfd attached.
    AddRegion = 4,
    /// ADD_RING: a ring, its interrupt eventfd attached.
    AddRing = 5,
    /// CONNECT: the client is done.
    Connect = 6,
    /// CONNECTED: the server is done.
    Connected = 7,
    /// DISCONNECT: either side ends the connection, with a reason.
    Disconnect = 8,
}

impl MessageType {
    /// The type with the wire value `value`, if there is one.
    pub fn from_wire(value: u16) -> Option<MessageType> {
        Some(match value {
            1 => MessageType::Ack,
            2 => MessageType::Hello,
            3 => MessageType::Init,
            4 => MessageType::AddRegion,
            5 => MessageType::AddRing,
            6 => MessageType::Connect,
            7 => MessageType::Connected,
            8 => MessageType::Disconnect,
            _ => return None,
        })
    }

    /// Whether a file descriptor travels with messages of this type.
    pub fn carries_fd(self) -> bool {
        matches!(self, MessageType::AddRegion | MessageType::AddRing)
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MessageType::Ack => "ACK",
            MessageType::Hello => "HELLO",
            MessageType::Init => "INIT",
            MessageType::AddRegion => "ADD_REGION",
            MessageType::AddRing => "ADD_RING",
            MessageType::Connect => "CONNECT",
            MessageType::Connected => "CONNECTED",
            MessageType::Disconnect => "DISCONNECT",
        })
    }
}

/// The interface mode INIT asks for (`memif_interface_mode_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Ethernet frames.
    Ethernet = 0,
    /// IP packets without a link header.
    Ip = 1,
    /// VPP's punt/inject.
    PuntInject = 2,
}

/// HELLO: the server's name, versions and limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The server application's name.
    pub name: String,
    /// The lowest protocol version the server speaks.
    pub min_version: u16,
    /// The highest protocol version the server speaks.
    pub max_version: u16,
    /// The highest region index the server accepts (count − 1).
    pub max_region: u16,
    /// The highest S2C ring index the server accepts (count − 1).
    pub max_s2c_ring: u16,
    /// The highest C2S ring index the server accepts (count − 1).
    pub max_c2s_ring: u16,
    /// The largest log2 ring size the server accepts.
    pub max_log2_ring_size: u8,
}

/// INIT: the interface the client asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Init {
    /// The protocol version the client speaks.
    pub version: u16,
    /// The interface id, chosen by both sides' configuration.
    pub id: u32,
    /// The interface mode.
    pub mode: Mode,
    /// The secret, empty for none (at most [`SECRET_SIZE`] − 1 bytes).
    pub secret: Vec<u8>,
    /// The client application's name.
    pub name: String,
}

/// ADD_REGION: a shared memory region (its memfd travels with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddRegion {
    /// The region's index: regions come in order, 0 first.
    pub index: u16,
    /// The region's size in bytes.
    pub size: u64,
}

/// ADD_RING: a ring (its interrupt eventfd travels with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddRing {
    /// Flags: [`ADD_RING_FLAG_C2S`](super::ADD_RING_FLAG_C2S) for a C2S
    /// ring; other bits are kept as they came.
    pub flags: u16,
    /// The ring's index among the rings of its direction.
    pub index: u16,
    /// The region the ring header and descriptors live in.
    pub region: u16,
    /// The ring header's offset in that region.
    pub offset: u32,
    /// log2 of the number of descriptors.
    pub log2_ring_size: u8,
    /// The size of a private header before the buffers (0: none).
    pub private_hdr_size: u16,
}

impl AddRing {
    /// The ring's direction, from its flags.
    pub fn direction(&self) -> super::Direction {
        if self.flags & super::ADD_RING_FLAG_C2S != 0 {
            super::Direction::ClientToServer
        } else {
            super::Direction::ServerToClient
        }
    }
}

/// DISCONNECT: the end of the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disconnect {
    /// An error code (DPDK and libmemif send 0).
    pub code: u32,
    /// Why, for people.
    pub reason: String,
}

/// One control message, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// ACK.
    Ack,
    /// HELLO.
    Hello(Hello),
    /// INIT.
    Init(Init),
    /// ADD_REGION.
    AddRegion(AddRegion),
    /// ADD_RING.
    AddRing(AddRing),
    /// CONNECT with the client's interface name.
    Connect {
        /// The client's interface name.
        if_name: String,
    },
    /// CONNECTED with the server's interface name.
    Connected {
        /// The server's interface name.
        if_name: String,
    },
    /// DISCONNECT.
    Disconnect(Disconnect),
}

/// Why a message could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageError {
    /// The buffer is not [`MSG_SIZE`] bytes.
    Length(usize),
    /// The type field holds no known message type.
    UnknownType(u16),
    /// INIT's mode field holds no known mode.
    UnknownMode(u8),
    /// A string does not fit its field with its terminating NUL.
    StringTooLong {
        /// The field.
        field: &'static str,
        /// The string's length in bytes.
        len: usize,
    },
    /// A string to encode holds a NUL byte.
    StringHasNul(&'static str),
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageError::Length(n) => write!(f, "{n} bytes, not {MSG_SIZE}"),
            MessageError::UnknownType(t) => write!(f, "unknown message type {t}"),
            MessageError::UnknownMode(m) => write!(f, "unknown interface mode {m}"),
            MessageError::StringTooLong { field, len } => write!(
                f,
                "{field} of {len} bytes does not fit its field with a terminating NUL"
            ),
            MessageError::StringHasNul(field) => write!(f, "{field} holds a NUL byte"),
        }
    }
}

impl std::error::Error for MessageError {}

fn get_u16(bytes: &[u8], range: std::ops::Range<usize>) -> u16 {
    let mut b = [0u8; 2];
    b.copy_from_slice(&bytes[range]);
    u16::from_le_bytes(b)
}

fn get_u32(bytes: &[u8], range: std::ops::Range<usize>) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[range]);
    u32::from_le_bytes(b)
}

fn get_u64(bytes: &[u8], range: std::ops::Range<usize>) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[range]);
    u64::from_le_bytes(b)
}

/// The bytes of a NUL-padded field up to its first NUL.
fn get_cstr(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

fn get_string(bytes: &[u8]) -> String {
    String::from_utf8_lossy(get_cstr(bytes)).into_owned()
}

/// Writes `value` NUL-padded into `out`, leaving room for the NUL.
fn put_cstr(out: &mut [u8], value: &[u8], name: &'static str) -> Result<(), MessageError> {
    if value.len() >= out.len() {
        return Err(MessageError::StringTooLong {
            field: name,
            len: value.len(),
        });
    }
    if value.contains(&0) {
        return Err(MessageError::StringHasNul(name));
    }
    out[..value.len()].copy_from_slice(value);
    Ok(())
}

impl Message {
    /// The message's type.
    pub fn kind(&self) -> MessageType {
        match self {
            Message::Ack => MessageType::Ack,
            Message::Hello(_) => MessageType::Hello,
            Message::Init(_) => MessageType::Init,
            Message::AddRegion(_) => MessageType::AddRegion,
            Message::AddRing(_) => MessageType::AddRing,
            Message::Connect { .. } => MessageType::Connect,
            Message::Connected { .. } => MessageType::Connected,
            Message::Disconnect(_) => MessageType::Disconnect,
        }
    }

    /// A DISCONNECT with code 0 and `reason`, cut to fit its field.
    pub fn disconnect(reason: &str) -> Message {
        let mut end = reason.len().min(REASON_SIZE - 1);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        Message::Disconnect(Disconnect {
            code: 0,
            reason: reason[..end].replace('\0', " "),
        })
    }

    /// The message's 128 bytes.
    pub fn encode(&self) -> Result<[u8; MSG_SIZE], MessageError> {
        let mut b = [0u8; MSG_SIZE];
        b[field::TYPE].copy_from_slice(&(self.kind() as u16).to_le_bytes());
        match self {
            Message::Ack => {}
            Message::Hello(h) => {
                put_cstr(&mut b[field::HELLO_NAME], h.name.as_bytes(), "HELLO name")?;
                b[field::HELLO_MIN_VERSION].copy_from_slice(&h.min_version.to_le_bytes());
                b[field::HELLO_MAX_VERSION].copy_from_slice(&h.max_version.to_le_bytes());
                b[field::HELLO_MAX_REGION].copy_from_slice(&h.max_region.to_le_bytes());
                b[field::HELLO_MAX_S2C_RING].copy_from_slice(&h.max_s2c_ring.to_le_bytes());
                b[field::HELLO_MAX_C2S_RING].copy_from_slice(&h.max_c2s_ring.to_le_bytes());
                b[field::HELLO_MAX_LOG2_RING_SIZE] = h.max_log2_ring_size;
            }
            Message::Init(i) => {
                b[field::INIT_VERSION].copy_from_slice(&i.version.to_le_bytes());
                b[field::INIT_ID].copy_from_slice(&i.id.to_le_bytes());
                b[field::INIT_MODE] = i.mode as u8;
                put_cstr(&mut b[field::INIT_SECRET], &i.secret, "INIT secret")?;
                put_cstr(&mut b[field::INIT_NAME], i.name.as_bytes(), "INIT name")?;
            }
            Message::AddRegion(r) => {
                b[field::REGION_INDEX].copy_from_slice(&r.index.to_le_bytes());
                b[field::REGION_SIZE].copy_from_slice(&r.size.to_le_bytes());
            }
            Message::AddRing(r) => {
                b[field::RING_FLAGS].copy_from_slice(&r.flags.to_le_bytes());
                b[field::RING_INDEX].copy_from_slice(&r.index.to_le_bytes());
                b[field::RING_REGION].copy_from_slice(&r.region.to_le_bytes());
                b[field::RING_OFFSET].copy_from_slice(&r.offset.to_le_bytes());
                b[field::RING_LOG2_SIZE] = r.log2_ring_size;
                b[field::RING_PRIVATE_HDR_SIZE].copy_from_slice(&r.private_hdr_size.to_le_bytes());
            }
            Message::Connect { if_name } => {
                put_cstr(
                    &mut b[field::IF_NAME],
                    if_name.as_bytes(),
                    "CONNECT if_name",
                )?;
            }
            Message::Connected { if_name } => {
                put_cstr(
                    &mut b[field::IF_NAME],
                    if_name.as_bytes(),
                    "CONNECTED if_name",
                )?;
            }
            Message::Disconnect(d) => {
                b[field::DISCONNECT_CODE].copy_from_slice(&d.code.to_le_bytes());
                put_cstr(
                    &mut b[field::DISCONNECT_REASON],
                    d.reason.as_bytes(),
                    "DISCONNECT reason",
                )?;
            }
        }
        Ok(b)
    }

    /// The message in `bytes`, which must be exactly [`MSG_SIZE`] long.
    ///
    /// Bytes past the body are ignored, as C peers leave them as they were.
    pub fn decode(bytes: &[u8]) -> Result<Message, MessageError> {
        if bytes.len() != MSG_SIZE {
            return Err(MessageError::Length(bytes.len()));
        }
        let raw_type = get_u16(bytes, field::TYPE);
        let kind = MessageType::from_wire(raw_type).ok_or(MessageError::UnknownType(raw_type))?;
        Ok(match kind {
            MessageType::Ack => Message::Ack,
            MessageType::Hello => Message::Hello(Hello {
                name: get_string(&bytes[field::HELLO_NAME]),
                min_version: get_u16(bytes, field::HELLO_MIN_VERSION),
                max_version: get_u16(bytes, field::HELLO_MAX_VERSION),
                max_region: get_u16(bytes, field::HELLO_MAX_REGION),
                max_s2c_ring: get_u16(bytes, field::HELLO_MAX_S2C_RING),
                max_c2s_ring: get_u16(bytes, field::HELLO_MAX_C2S_RING),
                max_log2_ring_size: bytes[field::HELLO_MAX_LOG2_RING_SIZE],
            }),
            MessageType::Init => {
                let mode = match bytes[field::INIT_MODE] {
                    0 => Mode::Ethernet,
                    1 => Mode::Ip,
                    2 => Mode::PuntInject,
                    m => return Err(MessageError::UnknownMode(m)),
                };
                Message::Init(Init {
                    version: get_u16(bytes, field::INIT_VERSION),
                    id: get_u32(bytes, field::INIT_ID),
                    mode,
                    secret: get_cstr(&bytes[field::INIT_SECRET]).to_vec(),
                    name: get_string(&bytes[field::INIT_NAME]),
                })
            }
            MessageType::AddRegion => Message::AddRegion(AddRegion {
                index: get_u16(bytes, field::REGION_INDEX),
                size: get_u64(bytes, field::REGION_SIZE),
            }),
            MessageType::AddRing => Message::AddRing(AddRing {
                flags: get_u16(bytes, field::RING_FLAGS),
                index: get_u16(bytes, field::RING_INDEX),
                region: get_u16(bytes, field::RING_REGION),
                offset: get_u32(bytes, field::RING_OFFSET),
                log2_ring_size: bytes[field::RING_LOG2_SIZE],
                private_hdr_size: get_u16(bytes, field::RING_PRIVATE_HDR_SIZE),
            }),
            MessageType::Connect => Message::Connect {
                if_name: get_string(&bytes[field::IF_NAME]),
            },
            MessageType::Connected => Message::Connected {
                if_name: get_string(&bytes[field::IF_NAME]),
            },
            MessageType::Disconnect => Message::Disconnect(Disconnect {
                code: get_u32(bytes, field::DISCONNECT_CODE),
                reason: get_string(&bytes[field::DISCONNECT_REASON]),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memif::{ADD_RING_FLAG_C2S, Direction, VERSION};
    use proptest::prelude::*;

    /// A 128-byte message: `head` then zeros.
    fn bytes(head: &[u8]) -> [u8; MSG_SIZE] {
        let mut b = [0u8; MSG_SIZE];
        b[..head.len()].copy_from_slice(head);
        b
    }

    fn round_trip(msg: Message, wire: [u8; MSG_SIZE]) {
        assert_eq!(msg.encode().unwrap(), wire, "{msg:?} encodes differently");
        assert_eq!(Message::decode(&wire).unwrap(), msg);
    }

    #[test]
    fn ack() {
        round_trip(Message::Ack, bytes(&[1, 0]));
    }

    #[test]
    fn hello() {
        let mut head = vec![2, 0];
        head.extend_from_slice(b"vpp");
        head.resize(34, 0);
        head.extend_from_slice(&[
            0x00, 0x02, 0x00, 0x02, 0xff, 0x00, 0x03, 0x00, 0x04, 0x00, 14,
        ]);
        round_trip(
            Message::Hello(Hello {
                name: "vpp".into(),
                min_version: VERSION,
                max_version: VERSION,
                max_region: 255,
                max_s2c_ring: 3,
                max_c2s_ring: 4,
                max_log2_ring_size: 14,
            }),
            bytes(&head),
        );
    }

    #[test]
    fn init() {
        let mut head = vec![3, 0, 0x00, 0x02, 0x78, 0x56, 0x34, 0x12, 0];
        head.extend_from_slice(b"s3cret");
        head.resize(33, 0);
        head.extend_from_slice(b"client-app");
        round_trip(
            Message::Init(Init {
                version: VERSION,
                id: 0x1234_5678,
                mode: Mode::Ethernet,
                secret: b"s3cret".to_vec(),
                name: "client-app".into(),
            }),
            bytes(&head),
        );
        let mut ip = bytes(&head);
        ip[8] = 1;
        assert!(matches!(
            Message::decode(&ip),
            Ok(Message::Init(Init { mode: Mode::Ip, .. }))
        ));
        ip[8] = 3;
        assert_eq!(Message::decode(&ip), Err(MessageError::UnknownMode(3)));
    }

    #[test]
    fn add_region() {
        round_trip(
            Message::AddRegion(AddRegion {
                index: 1,
                size: 0x0102_0304_0506,
            }),
            bytes(&[4, 0, 1, 0, 6, 5, 4, 3, 2, 1, 0, 0]),
        );
    }

    #[test]
    fn add_ring() {
        let msg = Message::AddRing(AddRing {
            flags: ADD_RING_FLAG_C2S,
            index: 2,
            region: 0,
            offset: 0x0001_0200,
            log2_ring_size: 10,
            private_hdr_size: 0,
        });
        round_trip(
            msg.clone(),
            bytes(&[5, 0, 1, 0, 2, 0, 0, 0, 0, 2, 1, 0, 10, 0, 0]),
        );
        let Message::AddRing(ring) = msg else {
            unreachable!()
        };
        assert_eq!(ring.direction(), Direction::ClientToServer);
        let s2c = AddRing { flags: 0, ..ring };
        assert_eq!(s2c.direction(), Direction::ServerToClient);
    }

    #[test]
    fn connect_connected_disconnect() {
        let mut head = vec![6, 0];
        head.extend_from_slice(b"memif0/0");
        round_trip(
            Message::Connect {
                if_name: "memif0/0".into(),
            },
            bytes(&head),
        );
        head[0] = 7;
        round_trip(
            Message::Connected {
                if_name: "memif0/0".into(),
            },
            bytes(&head),
        );
        let mut head = vec![8, 0, 5, 0, 0, 0];
        head.extend_from_slice(b"Incorrect secret");
        round_trip(
            Message::Disconnect(Disconnect {
                code: 5,
                reason: "Incorrect secret".into(),
            }),
            bytes(&head),
        );
    }

    #[test]
    fn strings_need_room_for_their_nul() {
        let name = |n: usize| {
            Message::Connect {
                if_name: "x".repeat(n),
            }
            .encode()
        };
        assert!(name(NAME_SIZE - 1).is_ok());
        assert_eq!(
            name(NAME_SIZE),
            Err(MessageError::StringTooLong {
                field: "CONNECT if_name",
                len: NAME_SIZE
            })
        );
        let with_nul = Message::Connect {
            if_name: "a\0b".into(),
        };
        assert_eq!(
            with_nul.encode(),
            Err(MessageError::StringHasNul("CONNECT if_name"))
        );
        let secret = Message::Init(Init {
            version: VERSION,
            id: 0,
            mode: Mode::Ethernet,
            secret: vec![b'k'; SECRET_SIZE],
            name: String::new(),
        });
        assert!(matches!(
            secret.encode(),
            Err(MessageError::StringTooLong { .. })
        ));
        // A reason too long for its field is cut, never refused.
        let long = Message::disconnect(&"é".repeat(100));
        let Message::Disconnect(d) = &long else {
            unreachable!()
        };
        assert!(d.reason.len() < REASON_SIZE);
        assert_eq!(Message::decode(&long.encode().unwrap()).unwrap(), long);
    }

    #[test]
    fn decoding_strings_stops_at_nul_or_field_end_and_is_lossy() {
        // A name filling its whole field, no NUL: all 32 bytes, nothing more.
        let mut b = bytes(&[6, 0]);
        b[2..34].fill(b'n');
        b[34] = b'X';
        assert_eq!(
            Message::decode(&b).unwrap(),
            Message::Connect {
                if_name: "n".repeat(32)
            }
        );
        let mut b = bytes(&[7, 0, b'a', 0xff, b'b', 0, b'c']);
        b[10] = b'z';
        assert_eq!(
            Message::decode(&b).unwrap(),
            Message::Connected {
                if_name: "a\u{fffd}b".into()
            }
        );
    }

    #[test]
    fn bad_lengths_and_types() {
        assert_eq!(Message::decode(&[1, 0]), Err(MessageError::Length(2)));
        assert_eq!(
            Message::decode(&[0u8; MSG_SIZE + 1]),
            Err(MessageError::Length(MSG_SIZE + 1))
        );
        assert_eq!(
            Message::decode(&bytes(&[0, 0])),
            Err(MessageError::UnknownType(0))
        );
        assert_eq!(
            Message::decode(&bytes(&[9, 0])),
            Err(MessageError::UnknownType(9))
        );
        assert_eq!(
            Message::decode(&bytes(&[1, 1])),
            Err(MessageError::UnknownType(257))
        );
    }

    proptest! {
        #[test]
        fn decode_never_panics_and_round_trips(raw in proptest::collection::vec(any::<u8>(), MSG_SIZE)) {
            if let Ok(msg) = Message::decode(&raw) {
                // Whatever decodes re-encodes (when its strings are
                // encodable) to a message that decodes the same.
                if let Ok(wire) = msg.encode() {
                    prop_assert_eq!(Message::decode(&wire).unwrap(), msg);
                }
            }
        }

        #[test]
        fn decode_of_any_length_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Message::decode(&raw);
        }
    }
}
