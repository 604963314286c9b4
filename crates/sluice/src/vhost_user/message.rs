//! The wire format: the message header, the request codes, the payloads.
//!
//! Every message is a 12-byte header — request code, flags, payload size,
//! each a little-endian `u32` — followed by `size` bytes of payload whose
//! layout depends on the request. File descriptors travel beside the bytes
//! as `SCM_RIGHTS` ancillary data (see [`socket`](super::socket)).
//!
//! Each layout has a view over bytes in the style of [`crate::net`]: a
//! `field` module of byte ranges, `new_checked` to wrap a buffer of the
//! right length, getters, and setters on mutable buffers. Above the views,
//! [`Message`] is one decoded request: [`Message::decode`] checks the
//! version, the request code, the payload size for the request and the
//! number of descriptors it carries; [`Message::encode`] writes it back.
//!
//! ```
//! use sluice::vhost_user::message::{Body, Message, Request, VringState};
//!
//! let msg = Message::new(Body::SetVringNum(VringState { index: 1, num: 256 }));
//! let bytes = msg.encode();
//! assert_eq!(
//!     bytes,
//!     [8, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0]
//! );
//! let (header, payload) = bytes.split_at(12);
//! let back = Message::decode(header.try_into().unwrap(), payload, 0)?;
//! assert_eq!(back, msg);
//! assert_eq!(back.request(), Request::SetVringNum);
//! # Ok::<(), sluice::vhost_user::VhostUserError>(())
//! ```

use std::fmt;

use super::VhostUserError;

/// Length of the message header.
pub const HEADER_LEN: usize = 12;
/// The protocol version, in bits 0..2 of the flags.
pub const VERSION: u32 = 0x1;
/// The bits of the flags holding the version.
pub const VERSION_MASK: u32 = 0x3;
/// Flags bit: this message is a reply.
pub const FLAG_REPLY: u32 = 0x4;
/// Flags bit: the sender wants a reply (REPLY_ACK) even where the request
/// has none of its own.
pub const FLAG_NEED_REPLY: u32 = 0x8;
/// At most this many file descriptors travel with one message.
pub const MAX_FDS: usize = 8;
/// At most this many regions in a memory table.
pub const MAX_REGIONS: usize = 8;
/// The largest payload accepted: well above the largest layout (a config
/// space access, 268 bytes; a full memory table, 264 bytes), and small
/// enough that a hostile size field cannot make the reader allocate much.
pub const MAX_PAYLOAD: usize = 4096;

/// `VHOST_USER_F_PROTOCOL_FEATURES`: the device feature bit (30) saying the
/// backend has protocol features; once negotiated, rings start disabled and
/// SET_VRING_ENABLE switches them.
pub const F_PROTOCOL_FEATURES: u64 = 1 << 30;

/// Protocol feature bits (GET/SET_PROTOCOL_FEATURES), as masks.
pub mod protocol_features {
    /// Multiple queues: GET_QUEUE_NUM.
    pub const MQ: u64 = 1 << 0;
    /// Dirty log in shared memory (SET_LOG_BASE with a descriptor).
    pub const LOG_SHMFD: u64 = 1 << 1;
    /// SEND_RARP after a migration.
    pub const RARP: u64 = 1 << 2;
    /// NEED_REPLY asks the backend for a status reply.
    pub const REPLY_ACK: u64 = 1 << 3;
    /// NET_SET_MTU.
    pub const MTU: u64 = 1 << 4;
    /// A backend-to-frontend request channel.
    pub const BACKEND_REQ: u64 = 1 << 5;
    /// SET_VRING_ENDIAN.
    pub const CROSS_ENDIAN: u64 = 1 << 6;
    /// Crypto sessions.
    pub const CRYPTO_SESSION: u64 = 1 << 7;
    /// Postcopy page faults.
    pub const PAGEFAULT: u64 = 1 << 8;
    /// GET_CONFIG and SET_CONFIG.
    pub const CONFIG: u64 = 1 << 9;
    /// Descriptors on the backend-to-frontend channel.
    pub const BACKEND_SEND_FD: u64 = 1 << 10;
    /// Host notifiers.
    pub const HOST_NOTIFIER: u64 = 1 << 11;
    /// In-flight descriptor tracking in shared memory.
    pub const INFLIGHT_SHMFD: u64 = 1 << 12;
    /// RESET_DEVICE.
    pub const RESET_DEVICE: u64 = 1 << 13;
    /// Kicks and calls as messages instead of eventfds.
    pub const INBAND_NOTIFICATIONS: u64 = 1 << 14;
    /// Memory slots added and removed one at a time.
    pub const CONFIGURE_MEM_SLOTS: u64 = 1 << 15;
    /// SET_STATUS and GET_STATUS.
    pub const STATUS: u64 = 1 << 16;
}

/// Bits 0..8 of the SET_VRING_KICK/CALL/ERR payload: the vring index.
pub const VRING_FD_INDEX_MASK: u64 = 0xff;
/// Bit 8 of the SET_VRING_KICK/CALL/ERR payload: no descriptor comes with
/// the message (the ring is polled, or the notification is switched off).
pub const VRING_FD_NOFD: u64 = 0x100;

/// `VHOST_VRING_F_LOG`, bit 0 of a vring address's flags: log writes to
/// the used ring.
pub const VRING_ADDR_F_LOG: u32 = 0x1;

/// Little-endian `u32` at `at`.
#[inline]
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Little-endian `u64` at `at`.
#[inline]
fn le64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

#[inline]
fn set_le32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline]
fn set_le64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

macro_rules! requests {
    ($($(#[$doc:meta])* $name:ident = $code:literal, $wire:literal;)*) => {
        /// The request codes this implementation knows: those a net device
        /// uses, and the configuration space accesses.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Request {
            $($(#[$doc])* $name = $code,)*
        }

        impl Request {
            /// The request with code `code`, if known.
            pub fn from_code(code: u32) -> Option<Request> {
                match code {
                    $($code => Some(Request::$name),)*
                    _ => None,
                }
            }

            /// The name the protocol gives it (`VHOST_USER_SET_MEM_TABLE`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Request::$name => $wire,)*
                }
            }
        }
    };
}

requests! {
    /// Ask for the device features (reply: u64).
    GetFeatures = 1, "VHOST_USER_GET_FEATURES";
    /// Set the features the driver accepts (u64).
    SetFeatures = 2, "VHOST_USER_SET_FEATURES";
    /// Claim the session.
    SetOwner = 3, "VHOST_USER_SET_OWNER";
    /// Give up the session (deprecated: resets the device).
    ResetOwner = 4, "VHOST_USER_RESET_OWNER";
    /// The memory table, with one descriptor per region.
    SetMemTable = 5, "VHOST_USER_SET_MEM_TABLE";
    /// The dirty log's shared memory, with a descriptor.
    SetLogBase = 6, "VHOST_USER_SET_LOG_BASE";
    /// An eventfd signalling log changes.
    SetLogFd = 7, "VHOST_USER_SET_LOG_FD";
    /// A vring's size (vring state).
    SetVringNum = 8, "VHOST_USER_SET_VRING_NUM";
    /// A vring's addresses.
    SetVringAddr = 9, "VHOST_USER_SET_VRING_ADDR";
    /// The avail index a vring starts at (vring state).
    SetVringBase = 10, "VHOST_USER_SET_VRING_BASE";
    /// Stop a vring and get the next avail index (reply: vring state).
    GetVringBase = 11, "VHOST_USER_GET_VRING_BASE";
    /// A vring's kick eventfd (the driver's notifications); starts the ring.
    SetVringKick = 12, "VHOST_USER_SET_VRING_KICK";
    /// A vring's call eventfd (the device's interrupts).
    SetVringCall = 13, "VHOST_USER_SET_VRING_CALL";
    /// A vring's error eventfd.
    SetVringErr = 14, "VHOST_USER_SET_VRING_ERR";
    /// Ask for the protocol features (reply: u64).
    GetProtocolFeatures = 15, "VHOST_USER_GET_PROTOCOL_FEATURES";
    /// Set the protocol features the frontend accepts (u64).
    SetProtocolFeatures = 16, "VHOST_USER_SET_PROTOCOL_FEATURES";
    /// Ask for the number of queues (reply: u64).
    GetQueueNum = 17, "VHOST_USER_GET_QUEUE_NUM";
    /// Enable or disable a vring (vring state, num 1 or 0).
    SetVringEnable = 18, "VHOST_USER_SET_VRING_ENABLE";
    /// Announce the guest's MAC after a migration (first 6 bytes of a u64).
    SendRarp = 19, "VHOST_USER_SEND_RARP";
    /// The net device's MTU (u64).
    NetSetMtu = 20, "VHOST_USER_NET_SET_MTU";
    /// Read the device configuration space.
    GetConfig = 24, "VHOST_USER_GET_CONFIG";
    /// Write the device configuration space.
    SetConfig = 25, "VHOST_USER_SET_CONFIG";
}

impl Request {
    /// The request code.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Whether the request has a reply of its own (a GET); the others
    /// are answered only with a REPLY_ACK status, when asked for.
    pub fn has_reply(self) -> bool {
        matches!(
            self,
            Request::GetFeatures
                | Request::GetProtocolFeatures
                | Request::GetQueueNum
                | Request::GetVringBase
                | Request::GetConfig
        )
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A view of the 12-byte message header.
#[derive(Debug, Clone)]
pub struct Header<T> {
    buffer: T,
}

/// Byte ranges of the message header.
pub mod header_field {
    use std::ops::Range;
    /// The request code.
    pub const REQUEST: Range<usize> = 0..4;
    /// Version and flags.
    pub const FLAGS: Range<usize> = 4..8;
    /// The payload size in bytes.
    pub const SIZE: Range<usize> = 8..12;
}

/// A length check shared by the views: `buffer` must be exactly `len` bytes.
fn check_exact(len: usize, want: usize, request: Request) -> Result<(), VhostUserError> {
    if len == want {
        Ok(())
    } else {
        Err(VhostUserError::BadPayloadSize {
            request,
            size: len as u32,
        })
    }
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps `buffer`, which must hold at least [`HEADER_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Option<Self> {
        (buffer.as_ref().len() >= HEADER_LEN).then_some(Header { buffer })
    }

    /// The request code.
    pub fn request(&self) -> u32 {
        le32(self.buffer.as_ref(), header_field::REQUEST.start)
    }

    /// The flags field (version and flag bits).
    pub fn flags(&self) -> u32 {
        le32(self.buffer.as_ref(), header_field::FLAGS.start)
    }

    /// The payload size.
    pub fn size(&self) -> u32 {
        le32(self.buffer.as_ref(), header_field::SIZE.start)
    }

    /// The version bits of the flags.
    pub fn version(&self) -> u32 {
        self.flags() & VERSION_MASK
    }

    /// Whether the REPLY bit is set.
    pub fn is_reply(&self) -> bool {
        self.flags() & FLAG_REPLY != 0
    }

    /// Whether the NEED_REPLY bit is set.
    pub fn need_reply(&self) -> bool {
        self.flags() & FLAG_NEED_REPLY != 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Sets the request code.
    pub fn set_request(&mut self, code: u32) {
        set_le32(self.buffer.as_mut(), header_field::REQUEST.start, code);
    }

    /// Sets the flags field.
    pub fn set_flags(&mut self, flags: u32) {
        set_le32(self.buffer.as_mut(), header_field::FLAGS.start, flags);
    }

    /// Sets the payload size.
    pub fn set_size(&mut self, size: u32) {
        set_le32(self.buffer.as_mut(), header_field::SIZE.start, size);
    }
}

/// Byte ranges of a vring state (`struct vhost_vring_state`).
pub mod vring_state_field {
    use std::ops::Range;
    /// The vring index.
    pub const INDEX: Range<usize> = 0..4;
    /// The value: a size, an avail index, or 0/1 for enable.
    pub const NUM: Range<usize> = 4..8;
}

/// Length of a vring state.
pub const VRING_STATE_LEN: usize = 8;

/// A vring state: SET_VRING_NUM, SET/GET_VRING_BASE, SET_VRING_ENABLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VringState {
    /// The vring index.
    pub index: u32,
    /// The value.
    pub num: u32,
}

impl VringState {
    /// Reads a vring state from exactly [`VRING_STATE_LEN`] bytes.
    pub fn parse(b: &[u8], request: Request) -> Result<Self, VhostUserError> {
        check_exact(b.len(), VRING_STATE_LEN, request)?;
        Ok(VringState {
            index: le32(b, vring_state_field::INDEX.start),
            num: le32(b, vring_state_field::NUM.start),
        })
    }

    /// Writes it into the first [`VRING_STATE_LEN`] bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        set_le32(b, vring_state_field::INDEX.start, self.index);
        set_le32(b, vring_state_field::NUM.start, self.num);
    }
}

/// Byte ranges of a vring address (`struct vhost_vring_addr`).
pub mod vring_addr_field {
    use std::ops::Range;
    /// The vring index.
    pub const INDEX: Range<usize> = 0..4;
    /// Flags ([`VRING_ADDR_F_LOG`](super::VRING_ADDR_F_LOG)).
    pub const FLAGS: Range<usize> = 4..8;
    /// The descriptor table, a frontend user address.
    pub const DESC: Range<usize> = 8..16;
    /// The used ring, a frontend user address.
    pub const USED: Range<usize> = 16..24;
    /// The avail ring, a frontend user address.
    pub const AVAIL: Range<usize> = 24..32;
    /// Where used-ring writes are logged, a guest physical address.
    pub const LOG: Range<usize> = 32..40;
}

/// Length of a vring address.
pub const VRING_ADDR_LEN: usize = 40;

/// A vring's addresses: SET_VRING_ADDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VringAddress {
    /// The vring index.
    pub index: u32,
    /// Flags ([`VRING_ADDR_F_LOG`]).
    pub flags: u32,
    /// The descriptor table (frontend user address).
    pub desc_user_addr: u64,
    /// The used ring (frontend user address).
    pub used_user_addr: u64,
    /// The avail ring (frontend user address).
    pub avail_user_addr: u64,
    /// The used-ring log (guest physical address).
    pub log_guest_addr: u64,
}

impl VringAddress {
    /// Reads a vring address from exactly [`VRING_ADDR_LEN`] bytes.
    pub fn parse(b: &[u8]) -> Result<Self, VhostUserError> {
        check_exact(b.len(), VRING_ADDR_LEN, Request::SetVringAddr)?;
        Ok(VringAddress {
            index: le32(b, vring_addr_field::INDEX.start),
            flags: le32(b, vring_addr_field::FLAGS.start),
            desc_user_addr: le64(b, vring_addr_field::DESC.start),
            used_user_addr: le64(b, vring_addr_field::USED.start),
            avail_user_addr: le64(b, vring_addr_field::AVAIL.start),
            log_guest_addr: le64(b, vring_addr_field::LOG.start),
        })
    }

    /// Writes it into the first [`VRING_ADDR_LEN`] bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        set_le32(b, vring_addr_field::INDEX.start, self.index);
        set_le32(b, vring_addr_field::FLAGS.start, self.flags);
        set_le64(b, vring_addr_field::DESC.start, self.desc_user_addr);
        set_le64(b, vring_addr_field::USED.start, self.used_user_addr);
        set_le64(b, vring_addr_field::AVAIL.start, self.avail_user_addr);
        set_le64(b, vring_addr_field::LOG.start, self.log_guest_addr);
    }
}

/// Byte ranges of one memory region (`struct vhost_memory_region`).
pub mod region_field {
    use std::ops::Range;
    /// Guest physical address of the region's start.
    pub const GUEST_PHYS_ADDR: Range<usize> = 0..8;
    /// Its size in bytes.
    pub const MEMORY_SIZE: Range<usize> = 8..16;
    /// The frontend's user (virtual) address of its start.
    pub const USERSPACE_ADDR: Range<usize> = 16..24;
    /// Where the region starts in the descriptor's file.
    pub const MMAP_OFFSET: Range<usize> = 24..32;
}

/// Length of one memory region.
pub const REGION_LEN: usize = 32;
/// Length of the memory table's head (region count and padding).
pub const MEM_TABLE_HEAD_LEN: usize = 8;

/// One region of the memory table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryRegion {
    /// Guest physical address of the region's start.
    pub guest_phys_addr: u64,
    /// Its size in bytes.
    pub memory_size: u64,
    /// The frontend's user address of its start.
    pub userspace_addr: u64,
    /// Where the region starts in the file of its descriptor.
    pub mmap_offset: u64,
}

impl MemoryRegion {
    /// Reads a region from the first [`REGION_LEN`] bytes of `b`.
    fn parse(b: &[u8]) -> Self {
        MemoryRegion {
            guest_phys_addr: le64(b, region_field::GUEST_PHYS_ADDR.start),
            memory_size: le64(b, region_field::MEMORY_SIZE.start),
            userspace_addr: le64(b, region_field::USERSPACE_ADDR.start),
            mmap_offset: le64(b, region_field::MMAP_OFFSET.start),
        }
    }

    /// Writes it into the first [`REGION_LEN`] bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        set_le64(b, region_field::GUEST_PHYS_ADDR.start, self.guest_phys_addr);
        set_le64(b, region_field::MEMORY_SIZE.start, self.memory_size);
        set_le64(b, region_field::USERSPACE_ADDR.start, self.userspace_addr);
        set_le64(b, region_field::MMAP_OFFSET.start, self.mmap_offset);
    }
}

/// The memory table of SET_MEM_TABLE: up to [`MAX_REGIONS`] regions.
///
/// On the wire: the region count (u32), 4 bytes of padding, then the
/// regions. Frontends send either just the regions in use (QEMU, DPDK) or
/// all eight slots; both are accepted, and [`emit`](Self::emit) writes the
/// short form.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryTable {
    /// The regions, in the order of their descriptors.
    pub regions: Vec<MemoryRegion>,
}

impl MemoryTable {
    /// Reads a memory table.
    pub fn parse(b: &[u8]) -> Result<Self, VhostUserError> {
        let request = Request::SetMemTable;
        if b.len() < MEM_TABLE_HEAD_LEN {
            return Err(VhostUserError::BadPayloadSize {
                request,
                size: b.len() as u32,
            });
        }
        let n = le32(b, 0) as usize;
        if n > MAX_REGIONS {
            return Err(VhostUserError::Malformed {
                request,
                what: "more than 8 regions",
            });
        }
        let short = MEM_TABLE_HEAD_LEN + n * REGION_LEN;
        let full = MEM_TABLE_HEAD_LEN + MAX_REGIONS * REGION_LEN;
        if b.len() != short && b.len() != full {
            return Err(VhostUserError::BadPayloadSize {
                request,
                size: b.len() as u32,
            });
        }
        let regions = b[MEM_TABLE_HEAD_LEN..short]
            .chunks_exact(REGION_LEN)
            .map(MemoryRegion::parse)
            .collect();
        Ok(MemoryTable { regions })
    }

    /// The encoded length: the head and one slot per region.
    pub fn len(&self) -> usize {
        MEM_TABLE_HEAD_LEN + self.regions.len() * REGION_LEN
    }

    /// Whether the table has no region.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Writes it into the first [`len`](Self::len) bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        set_le32(b, 0, self.regions.len() as u32);
        set_le32(b, 4, 0);
        for (region, slot) in self
            .regions
            .iter()
            .zip(b[MEM_TABLE_HEAD_LEN..].chunks_exact_mut(REGION_LEN))
        {
            region.emit(slot);
        }
    }
}

/// The u64 of SET_VRING_KICK, SET_VRING_CALL and SET_VRING_ERR: a vring
/// index and whether a descriptor comes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VringFd {
    /// The vring index (0..256).
    pub index: u8,
    /// Whether the NOFD bit is set: no descriptor comes with the message.
    pub nofd: bool,
}

impl VringFd {
    /// Reads it from a u64, rejecting bits above the NOFD bit.
    pub fn from_u64(v: u64, request: Request) -> Result<Self, VhostUserError> {
        if v & !(VRING_FD_INDEX_MASK | VRING_FD_NOFD) != 0 {
            return Err(VhostUserError::Malformed {
                request,
                what: "bits above the NOFD bit are set",
            });
        }
        Ok(VringFd {
            index: (v & VRING_FD_INDEX_MASK) as u8,
            nofd: v & VRING_FD_NOFD != 0,
        })
    }

    /// The u64 on the wire.
    pub fn to_u64(self) -> u64 {
        u64::from(self.index) | if self.nofd { VRING_FD_NOFD } else { 0 }
    }
}

/// Byte ranges of the dirty log description of SET_LOG_BASE.
pub mod log_field {
    use std::ops::Range;
    /// The size of the log's mapping.
    pub const MMAP_SIZE: Range<usize> = 0..8;
    /// Where it starts in the descriptor's file.
    pub const MMAP_OFFSET: Range<usize> = 8..16;
}

/// Length of a log description.
pub const LOG_LEN: usize = 16;

/// The dirty log's shared memory (SET_LOG_BASE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogDescription {
    /// The size of the mapping.
    pub mmap_size: u64,
    /// Where it starts in the descriptor's file.
    pub mmap_offset: u64,
}

/// Byte ranges of a device configuration space access.
pub mod config_field {
    use std::ops::Range;
    /// Offset in the configuration space.
    pub const OFFSET: Range<usize> = 0..4;
    /// Bytes accessed.
    pub const SIZE: Range<usize> = 4..8;
    /// Flags (0: normal write, 1: live migration).
    pub const FLAGS: Range<usize> = 8..12;
}

/// Length of a configuration access's head.
pub const CONFIG_HEAD_LEN: usize = 12;
/// At most this many configuration bytes in one access.
pub const CONFIG_MAX: usize = 256;

/// A device configuration space access (GET_CONFIG, SET_CONFIG).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigSpace {
    /// Offset in the configuration space.
    pub offset: u32,
    /// Flags.
    pub flags: u32,
    /// The bytes (for GET_CONFIG, a buffer of the size to read).
    pub data: Vec<u8>,
}

impl ConfigSpace {
    /// Reads an access; its size field must match the bytes that follow.
    pub fn parse(b: &[u8], request: Request) -> Result<Self, VhostUserError> {
        if b.len() < CONFIG_HEAD_LEN || b.len() > CONFIG_HEAD_LEN + CONFIG_MAX {
            return Err(VhostUserError::BadPayloadSize {
                request,
                size: b.len() as u32,
            });
        }
        let size = le32(b, config_field::SIZE.start) as usize;
        if size != b.len() - CONFIG_HEAD_LEN {
            return Err(VhostUserError::Malformed {
                request,
                what: "the config size field does not match the payload",
            });
        }
        Ok(ConfigSpace {
            offset: le32(b, config_field::OFFSET.start),
            flags: le32(b, config_field::FLAGS.start),
            data: b[CONFIG_HEAD_LEN..].to_vec(),
        })
    }

    /// The encoded length.
    pub fn len(&self) -> usize {
        CONFIG_HEAD_LEN + self.data.len()
    }

    /// Whether no configuration byte is accessed.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Writes it into the first [`len`](Self::len) bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        set_le32(b, config_field::OFFSET.start, self.offset);
        set_le32(b, config_field::SIZE.start, self.data.len() as u32);
        set_le32(b, config_field::FLAGS.start, self.flags);
        b[CONFIG_HEAD_LEN..self.len()].copy_from_slice(&self.data);
    }
}

/// A request's payload, decoded; the variant names the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// GET_FEATURES.
    GetFeatures,
    /// SET_FEATURES: the accepted features.
    SetFeatures(u64),
    /// SET_OWNER.
    SetOwner,
    /// RESET_OWNER.
    ResetOwner,
    /// SET_MEM_TABLE: the regions (one descriptor each).
    SetMemTable(MemoryTable),
    /// SET_LOG_BASE: the log's mapping (one descriptor).
    SetLogBase(LogDescription),
    /// SET_LOG_FD (one descriptor).
    SetLogFd,
    /// SET_VRING_NUM: index and size.
    SetVringNum(VringState),
    /// SET_VRING_ADDR.
    SetVringAddr(VringAddress),
    /// SET_VRING_BASE: index and avail index.
    SetVringBase(VringState),
    /// GET_VRING_BASE: index (num unused).
    GetVringBase(VringState),
    /// SET_VRING_KICK (one descriptor unless NOFD).
    SetVringKick(VringFd),
    /// SET_VRING_CALL (one descriptor unless NOFD).
    SetVringCall(VringFd),
    /// SET_VRING_ERR (one descriptor unless NOFD).
    SetVringErr(VringFd),
    /// GET_PROTOCOL_FEATURES.
    GetProtocolFeatures,
    /// SET_PROTOCOL_FEATURES: the accepted protocol features.
    SetProtocolFeatures(u64),
    /// GET_QUEUE_NUM.
    GetQueueNum,
    /// SET_VRING_ENABLE: index and 1 or 0.
    SetVringEnable(VringState),
    /// SEND_RARP: the guest's MAC.
    SendRarp([u8; 6]),
    /// NET_SET_MTU.
    NetSetMtu(u64),
    /// GET_CONFIG.
    GetConfig(ConfigSpace),
    /// SET_CONFIG.
    SetConfig(ConfigSpace),
}

impl Body {
    /// The request this body belongs to.
    pub fn request(&self) -> Request {
        match self {
            Body::GetFeatures => Request::GetFeatures,
            Body::SetFeatures(_) => Request::SetFeatures,
            Body::SetOwner => Request::SetOwner,
            Body::ResetOwner => Request::ResetOwner,
            Body::SetMemTable(_) => Request::SetMemTable,
            Body::SetLogBase(_) => Request::SetLogBase,
            Body::SetLogFd => Request::SetLogFd,
            Body::SetVringNum(_) => Request::SetVringNum,
            Body::SetVringAddr(_) => Request::SetVringAddr,
            Body::SetVringBase(_) => Request::SetVringBase,
            Body::GetVringBase(_) => Request::GetVringBase,
            Body::SetVringKick(_) => Request::SetVringKick,
            Body::SetVringCall(_) => Request::SetVringCall,
            Body::SetVringErr(_) => Request::SetVringErr,
            Body::GetProtocolFeatures => Request::GetProtocolFeatures,
            Body::SetProtocolFeatures(_) => Request::SetProtocolFeatures,
            Body::GetQueueNum => Request::GetQueueNum,
            Body::SetVringEnable(_) => Request::SetVringEnable,
            Body::SendRarp(_) => Request::SendRarp,
            Body::NetSetMtu(_) => Request::NetSetMtu,
            Body::GetConfig(_) => Request::GetConfig,
            Body::SetConfig(_) => Request::SetConfig,
        }
    }

    /// How many file descriptors must travel with it.
    pub fn fds_needed(&self) -> usize {
        match self {
            Body::SetMemTable(t) => t.regions.len(),
            Body::SetLogBase(_) | Body::SetLogFd => 1,
            Body::SetVringKick(v) | Body::SetVringCall(v) | Body::SetVringErr(v) => {
                usize::from(!v.nofd)
            }
            _ => 0,
        }
    }

    fn parse(request: Request, b: &[u8]) -> Result<Body, VhostUserError> {
        let empty = |body| check_exact(b.len(), 0, request).map(|()| body);
        let u64_of = || check_exact(b.len(), 8, request).map(|()| le64(b, 0));
        Ok(match request {
            Request::GetFeatures => empty(Body::GetFeatures)?,
            Request::SetFeatures => Body::SetFeatures(u64_of()?),
            Request::SetOwner => empty(Body::SetOwner)?,
            Request::ResetOwner => empty(Body::ResetOwner)?,
            Request::SetMemTable => Body::SetMemTable(MemoryTable::parse(b)?),
            Request::SetLogBase => {
                check_exact(b.len(), LOG_LEN, request)?;
                Body::SetLogBase(LogDescription {
                    mmap_size: le64(b, log_field::MMAP_SIZE.start),
                    mmap_offset: le64(b, log_field::MMAP_OFFSET.start),
                })
            }
            Request::SetLogFd => empty(Body::SetLogFd)?,
            Request::SetVringNum => Body::SetVringNum(VringState::parse(b, request)?),
            Request::SetVringAddr => Body::SetVringAddr(VringAddress::parse(b)?),
            Request::SetVringBase => Body::SetVringBase(VringState::parse(b, request)?),
            Request::GetVringBase => Body::GetVringBase(VringState::parse(b, request)?),
            Request::SetVringKick => Body::SetVringKick(VringFd::from_u64(u64_of()?, request)?),
            Request::SetVringCall => Body::SetVringCall(VringFd::from_u64(u64_of()?, request)?),
            Request::SetVringErr => Body::SetVringErr(VringFd::from_u64(u64_of()?, request)?),
            Request::GetProtocolFeatures => empty(Body::GetProtocolFeatures)?,
            Request::SetProtocolFeatures => Body::SetProtocolFeatures(u64_of()?),
            Request::GetQueueNum => empty(Body::GetQueueNum)?,
            Request::SetVringEnable => {
                let state = VringState::parse(b, request)?;
                if state.num > 1 {
                    return Err(VhostUserError::Malformed {
                        request,
                        what: "enable is neither 0 nor 1",
                    });
                }
                Body::SetVringEnable(state)
            }
            Request::SendRarp => {
                let v = u64_of()?.to_le_bytes();
                Body::SendRarp([v[0], v[1], v[2], v[3], v[4], v[5]])
            }
            Request::NetSetMtu => Body::NetSetMtu(u64_of()?),
            Request::GetConfig => Body::GetConfig(ConfigSpace::parse(b, request)?),
            Request::SetConfig => Body::SetConfig(ConfigSpace::parse(b, request)?),
        })
    }

    /// The payload's bytes.
    fn payload(&self) -> Vec<u8> {
        let u64_bytes = |v: u64| v.to_le_bytes().to_vec();
        let state_bytes = |s: &VringState| {
            let mut b = vec![0; VRING_STATE_LEN];
            s.emit(&mut b);
            b
        };
        match self {
            Body::GetFeatures
            | Body::SetOwner
            | Body::ResetOwner
            | Body::SetLogFd
            | Body::GetProtocolFeatures
            | Body::GetQueueNum => Vec::new(),
            Body::SetFeatures(v) | Body::SetProtocolFeatures(v) | Body::NetSetMtu(v) => {
                u64_bytes(*v)
            }
            Body::SetMemTable(t) => {
                let mut b = vec![0; t.len()];
                t.emit(&mut b);
                b
            }
            Body::SetLogBase(l) => {
                let mut b = vec![0; LOG_LEN];
                set_le64(&mut b, log_field::MMAP_SIZE.start, l.mmap_size);
                set_le64(&mut b, log_field::MMAP_OFFSET.start, l.mmap_offset);
                b
            }
            Body::SetVringNum(s)
            | Body::SetVringBase(s)
            | Body::GetVringBase(s)
            | Body::SetVringEnable(s) => state_bytes(s),
            Body::SetVringAddr(a) => {
                let mut b = vec![0; VRING_ADDR_LEN];
                a.emit(&mut b);
                b
            }
            Body::SetVringKick(v) | Body::SetVringCall(v) | Body::SetVringErr(v) => {
                u64_bytes(v.to_u64())
            }
            Body::SendRarp(mac) => {
                let mut b = vec![0; 8];
                b[..6].copy_from_slice(mac);
                b
            }
            Body::GetConfig(c) | Body::SetConfig(c) => {
                let mut b = vec![0; c.len()];
                c.emit(&mut b);
                b
            }
        }
    }
}

/// One decoded request: its flags and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The header's flags (version and flag bits).
    pub flags: u32,
    /// The payload.
    pub body: Body,
}

impl Message {
    /// A request with version 1 and no flag.
    pub fn new(body: Body) -> Message {
        Message {
            flags: VERSION,
            body,
        }
    }

    /// The request.
    pub fn request(&self) -> Request {
        self.body.request()
    }

    /// Whether the sender set NEED_REPLY.
    pub fn need_reply(&self) -> bool {
        self.flags & FLAG_NEED_REPLY != 0
    }

    /// Decodes a request from its header, its payload and the number of
    /// descriptors that came with it.
    ///
    /// Checks, in order: the version, that it is not a reply, the request
    /// code, the payload size against the header and the request, each
    /// field's allowed values, and the descriptor count.
    pub fn decode(
        header: &[u8; HEADER_LEN],
        payload: &[u8],
        fds: usize,
    ) -> Result<Message, VhostUserError> {
        let header = Header::new_checked(&header[..]).expect("a header-sized array");
        if header.version() != VERSION {
            return Err(VhostUserError::BadVersion {
                flags: header.flags(),
            });
        }
        let code = header.request();
        let request = Request::from_code(code).ok_or(VhostUserError::UnknownRequest { code })?;
        if header.is_reply() {
            return Err(VhostUserError::Malformed {
                request,
                what: "a reply where a request was expected",
            });
        }
        if header.size() as usize != payload.len() {
            return Err(VhostUserError::BadPayloadSize {
                request,
                size: header.size(),
            });
        }
        if fds > MAX_FDS {
            return Err(VhostUserError::TooManyFds);
        }
        let body = Body::parse(request, payload)?;
        let expected = body.fds_needed();
        if fds != expected {
            return Err(VhostUserError::FdCount {
                request,
                expected,
                got: fds,
            });
        }
        Ok(Message {
            flags: header.flags(),
            body,
        })
    }

    /// Encodes it: header and payload.
    pub fn encode(&self) -> Vec<u8> {
        let payload = self.body.payload();
        encode_raw(self.request().code(), self.flags, &payload)
    }
}

/// Encodes a message from its parts: the header with `payload.len()` as
/// its size, then the payload.
pub fn encode_raw(code: u32, flags: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0; HEADER_LEN + payload.len()];
    let mut header = Header::new_checked(&mut bytes[..HEADER_LEN]).expect("header-sized");
    header.set_request(code);
    header.set_flags(flags);
    header.set_size(payload.len() as u32);
    bytes[HEADER_LEN..].copy_from_slice(payload);
    bytes
}

/// Encodes a reply to `request`: version 1 with the REPLY bit.
pub fn encode_reply(request: Request, payload: &[u8]) -> Vec<u8> {
    encode_raw(request.code(), VERSION | FLAG_REPLY, payload)
}

/// Reads a u64 reply payload.
pub fn parse_u64(b: &[u8], request: Request) -> Result<u64, VhostUserError> {
    check_exact(b.len(), 8, request)?;
    Ok(le64(b, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(code: u32, flags: u32, size: u32) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&code.to_le_bytes());
        h[4..8].copy_from_slice(&flags.to_le_bytes());
        h[8..12].copy_from_slice(&size.to_le_bytes());
        h
    }

    fn decode(bytes: &[u8], fds: usize) -> Result<Message, VhostUserError> {
        let (h, payload) = bytes.split_at(HEADER_LEN);
        Message::decode(h.try_into().unwrap(), payload, fds)
    }

    #[test]
    fn header_fields_are_little_endian_u32s() {
        // SET_MEM_TABLE, version 1 with NEED_REPLY, 40 bytes.
        let bytes = [5, 0, 0, 0, 0x09, 0, 0, 0, 40, 0, 0, 0];
        let h = Header::new_checked(&bytes[..]).unwrap();
        assert_eq!((h.request(), h.flags(), h.size()), (5, 9, 40));
        assert_eq!(h.version(), 1);
        assert!(h.need_reply() && !h.is_reply());
        let reply = [11, 0, 0, 0, 0x05, 0, 0, 0, 8, 0, 0, 0];
        assert!(Header::new_checked(&reply[..]).unwrap().is_reply());
        assert!(Header::new_checked(&bytes[..11]).is_none());

        let mut out = [0u8; 12];
        let mut h = Header::new_checked(&mut out[..]).unwrap();
        h.set_request(5);
        h.set_flags(9);
        h.set_size(40);
        assert_eq!(out, bytes);
    }

    #[test]
    fn vring_state_layout() {
        // index u32, num u32.
        let msg = Message::new(Body::SetVringBase(VringState {
            index: 2,
            num: 0x1234,
        }));
        assert_eq!(
            msg.encode(),
            [
                10, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 2, 0, 0, 0, 0x34, 0x12, 0, 0
            ]
        );
        assert_eq!(decode(&msg.encode(), 0).unwrap(), msg);
    }

    #[test]
    fn vring_address_layout() {
        // index, flags, then desc, used, avail, log as u64s in that order.
        let addr = VringAddress {
            index: 1,
            flags: 0,
            desc_user_addr: 0x1122_3344_5566_7788,
            used_user_addr: 0x10,
            avail_user_addr: 0x20,
            log_guest_addr: 0x30,
        };
        let mut want = vec![9, 0, 0, 0, 1, 0, 0, 0, 40, 0, 0, 0];
        want.extend([1, 0, 0, 0, 0, 0, 0, 0]);
        want.extend([0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        want.extend([0x10, 0, 0, 0, 0, 0, 0, 0]);
        want.extend([0x20, 0, 0, 0, 0, 0, 0, 0]);
        want.extend([0x30, 0, 0, 0, 0, 0, 0, 0]);
        let msg = Message::new(Body::SetVringAddr(addr));
        assert_eq!(msg.encode(), want);
        assert_eq!(decode(&want, 0).unwrap(), msg);
    }

    #[test]
    fn memory_table_layout_short_and_full() {
        // nregions u32, padding u32, then per region: guest address, size,
        // user address, mmap offset, each u64.
        let region = MemoryRegion {
            guest_phys_addr: 0x1000,
            memory_size: 0x20000,
            userspace_addr: 0x7f00_0000_0000,
            mmap_offset: 0x300,
        };
        let mut want = vec![5, 0, 0, 0, 1, 0, 0, 0, 40, 0, 0, 0];
        want.extend([1, 0, 0, 0, 0, 0, 0, 0]);
        want.extend([0, 0x10, 0, 0, 0, 0, 0, 0]);
        want.extend([0, 0, 2, 0, 0, 0, 0, 0]);
        want.extend([0, 0, 0, 0, 0, 0x7f, 0, 0]);
        want.extend([0, 3, 0, 0, 0, 0, 0, 0]);
        let msg = Message::new(Body::SetMemTable(MemoryTable {
            regions: vec![region],
        }));
        assert_eq!(msg.encode(), want);
        assert_eq!(decode(&want, 1).unwrap(), msg);

        // All eight slots sent, one in use: the same table.
        let mut full = want.clone();
        full[8..12].copy_from_slice(&264u32.to_le_bytes());
        full.resize(HEADER_LEN + 8 + 8 * 32, 0xee);
        assert_eq!(decode(&full, 1).unwrap(), msg);
        // Any other length is refused.
        let mut odd = want.clone();
        odd[8] = 48;
        odd.extend([0; 8]);
        assert!(matches!(
            decode(&odd, 1),
            Err(VhostUserError::BadPayloadSize { .. })
        ));
        // Nine regions never fit.
        let mut nine = want.clone();
        nine[12] = 9;
        assert!(matches!(
            decode(&nine, 1),
            Err(VhostUserError::Malformed { .. })
        ));
    }

    #[test]
    fn vring_fd_u64_has_index_and_nofd() {
        let msg = Message::new(Body::SetVringCall(VringFd {
            index: 3,
            nofd: true,
        }));
        assert_eq!(
            msg.encode(),
            [13, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 3, 1, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(decode(&msg.encode(), 0).unwrap(), msg);
        let kick = Message::new(Body::SetVringKick(VringFd {
            index: 255,
            nofd: false,
        }));
        assert_eq!(kick.encode()[12..], [255, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decode(&kick.encode(), 1).unwrap(), kick);
        // Bits above NOFD are not a vring index.
        let mut high = msg.encode();
        high[13] = 3;
        assert!(matches!(
            decode(&high, 0),
            Err(VhostUserError::Malformed { .. })
        ));
    }

    #[test]
    fn u64_payloads_and_empty_requests() {
        let msg = Message::new(Body::SetFeatures(1 << 30 | 1 << 32));
        assert_eq!(
            msg.encode(),
            [
                2, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x40, 1, 0, 0, 0
            ]
        );
        assert_eq!(
            Message::new(Body::GetFeatures).encode(),
            [1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
        );
        let rarp = Message::new(Body::SendRarp([2, 0, 0, 0, 0, 1]));
        assert_eq!(rarp.encode()[12..], [2, 0, 0, 0, 0, 1, 0, 0]);
        let cfg = Message::new(Body::GetConfig(ConfigSpace {
            offset: 8,
            flags: 0,
            data: vec![0; 4],
        }));
        assert_eq!(
            cfg.encode(),
            [
                24, 0, 0, 0, 1, 0, 0, 0, 16, 0, 0, 0, 8, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0
            ]
        );
    }

    #[test]
    fn every_body_round_trips() {
        let fd = |nofd| VringFd { index: 1, nofd };
        let state = VringState { index: 1, num: 1 };
        let bodies = [
            Body::GetFeatures,
            Body::SetFeatures(7),
            Body::SetOwner,
            Body::ResetOwner,
            Body::SetMemTable(MemoryTable::default()),
            Body::SetLogBase(LogDescription {
                mmap_size: 4096,
                mmap_offset: 0,
            }),
            Body::SetLogFd,
            Body::SetVringNum(state),
            Body::SetVringAddr(VringAddress::default()),
            Body::SetVringBase(state),
            Body::GetVringBase(state),
            Body::SetVringKick(fd(false)),
            Body::SetVringCall(fd(true)),
            Body::SetVringErr(fd(false)),
            Body::GetProtocolFeatures,
            Body::SetProtocolFeatures(9),
            Body::GetQueueNum,
            Body::SetVringEnable(state),
            Body::SendRarp([1, 2, 3, 4, 5, 6]),
            Body::NetSetMtu(1500),
            Body::GetConfig(ConfigSpace {
                offset: 0,
                flags: 0,
                data: vec![1; 256],
            }),
            Body::SetConfig(ConfigSpace::default()),
        ];
        for body in bodies {
            let msg = Message {
                flags: VERSION | FLAG_NEED_REPLY,
                body,
            };
            let bytes = msg.encode();
            assert_eq!(decode(&bytes, msg.body.fds_needed()).unwrap(), msg);
            assert_eq!(
                Request::from_code(msg.request().code()),
                Some(msg.request())
            );
        }
    }

    #[test]
    fn malformed_headers_and_payloads_are_typed_errors() {
        use VhostUserError::*;
        let err = |h: [u8; 12], payload: &[u8], fds| Message::decode(&h, payload, fds).unwrap_err();
        assert!(matches!(
            err(header(1, 0x2, 0), &[], 0),
            BadVersion { flags: 2 }
        ));
        assert!(matches!(err(header(1, 0x0, 0), &[], 0), BadVersion { .. }));
        assert!(matches!(
            err(header(99, 1, 0), &[], 0),
            UnknownRequest { code: 99 }
        ));
        assert!(matches!(
            err(header(0, 1, 0), &[], 0),
            UnknownRequest { code: 0 }
        ));
        assert!(matches!(
            err(header(1, 1 | FLAG_REPLY, 0), &[], 0),
            Malformed { .. }
        ));
        // The header's size disagrees with the payload.
        assert!(matches!(
            err(header(2, 1, 4), &[0; 8], 0),
            BadPayloadSize { size: 4, .. }
        ));
        // The payload's size does not fit the request.
        assert!(matches!(
            err(header(1, 1, 8), &[0; 8], 0),
            BadPayloadSize {
                request: Request::GetFeatures,
                ..
            }
        ));
        assert!(matches!(
            err(header(2, 1, 4), &[0; 4], 0),
            BadPayloadSize {
                request: Request::SetFeatures,
                ..
            }
        ));
        assert!(matches!(
            err(header(8, 1, 12), &[0; 12], 0),
            BadPayloadSize { .. }
        ));
        assert!(matches!(
            err(header(9, 1, 32), &[0; 32], 0),
            BadPayloadSize { .. }
        ));
        assert!(matches!(
            err(header(5, 1, 4), &[0; 4], 0),
            BadPayloadSize { .. }
        ));
        // Enable is 0 or 1.
        let mut enable = [0u8; 8];
        enable[4] = 2;
        assert!(matches!(
            err(header(18, 1, 8), &enable, 0),
            Malformed { .. }
        ));
        // A config access whose size field lies.
        let mut cfg = [0u8; 16];
        cfg[4] = 8;
        assert!(matches!(err(header(24, 1, 16), &cfg, 0), Malformed { .. }));
        assert!(matches!(
            err(header(25, 1, 8), &[0; 8], 0),
            BadPayloadSize { .. }
        ));
    }

    #[test]
    fn descriptor_counts_are_checked_per_request() {
        use VhostUserError::*;
        let count = |body: Body, fds| {
            let bytes = Message::new(body).encode();
            decode(&bytes, fds)
        };
        let region = MemoryRegion {
            memory_size: 1,
            ..Default::default()
        };
        let table = |n| {
            Body::SetMemTable(MemoryTable {
                regions: vec![region; n],
            })
        };
        assert!(count(table(2), 2).is_ok());
        assert!(matches!(
            count(table(2), 1),
            Err(FdCount {
                expected: 2,
                got: 1,
                ..
            })
        ));
        assert!(matches!(
            count(table(2), 3),
            Err(FdCount {
                expected: 2,
                got: 3,
                ..
            })
        ));
        let kick = |nofd| Body::SetVringKick(VringFd { index: 0, nofd });
        assert!(matches!(
            count(kick(false), 0),
            Err(FdCount {
                expected: 1,
                got: 0,
                ..
            })
        ));
        assert!(matches!(
            count(kick(true), 1),
            Err(FdCount {
                expected: 0,
                got: 1,
                ..
            })
        ));
        assert!(matches!(
            count(Body::SetOwner, 1),
            Err(FdCount { expected: 0, .. })
        ));
        assert!(matches!(count(Body::SetOwner, 9), Err(TooManyFds)));
    }

    #[test]
    fn every_known_code_has_its_name() {
        for code in 0..64 {
            if let Some(r) = Request::from_code(code) {
                assert_eq!(r.code(), code);
                assert!(r.name().starts_with("VHOST_USER_"));
            }
        }
        assert_eq!(
            Request::SetVringKick.to_string(),
            "VHOST_USER_SET_VRING_KICK"
        );
        assert_eq!(protocol_features::CONFIG, 1 << 9);
        assert_eq!(protocol_features::REPLY_ACK, 8);
    }

    proptest::proptest! {
        #[test]
        fn random_messages_decode_to_values_or_typed_errors(
            code in 0u32..32,
            flags in proptest::prop_oneof![proptest::strategy::Just(1u32), proptest::strategy::Just(9u32), 0u32..16],
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            fds in 0usize..10,
        ) {
            let h = header(code, flags, payload.len() as u32);
            if let Ok(msg) = Message::decode(&h, &payload, fds) {
                // What decodes, encodes to what decodes the same.
                let again = msg.encode();
                let (h2, p2) = again.split_at(HEADER_LEN);
                proptest::prop_assert_eq!(Message::decode(h2.try_into().unwrap(), p2, fds).unwrap(), msg);
            }
        }
    }
}
