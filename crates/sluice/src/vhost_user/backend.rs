//! The device side's protocol state machine.
//!
//! [`Backend`] holds what the frontend has set up — features, protocol
//! features, the memory table (mapped), and per vring its size, addresses,
//! base, eventfds and enable state — and checks every request against it.
//! It moves no packet: a data path asks it for [`ReadyVring`]s (host
//! addresses of the three parts of a started split ring, its eventfds) and
//! is told through a [`VringHandler`] when a ring starts, stops or changes.
//!
//! A ring starts when SET_VRING_KICK arrives (with an eventfd, or NOFD for a
//! ring the data path polls) after its size and addresses, and only if all
//! three of its parts translate, each whole, into one mapped region. It
//! stops on GET_VRING_BASE, which returns the data path's next avail index
//! ([`VringHandler::vring_stopped`]) and closes the ring's kick and call
//! eventfds, and on RESET_OWNER. A new memory table stops the started
//! rings, replaces the mappings and starts them again on the new ones (a
//! ring that no longer fits stays stopped and the request fails), so the
//! data path never holds a host address of an unmapped table as long as it
//! honours the callbacks.
//!
//! If `VHOST_USER_F_PROTOCOL_FEATURES` is negotiated, a ring is disabled
//! until SET_VRING_ENABLE enables it; otherwise it is enabled from the
//! start. SET_VRING_ENABLE is honoured either way: the protocol asks
//! frontends to send it only once protocol features are negotiated, but
//! DPDK's `virtio_user` sends it regardless (and disables the rings with it
//! when it stops), as DPDK's own backend accepts. With REPLY_ACK negotiated, a request with NEED_REPLY gets a u64
//! status reply: 0 when it was applied, 1 when it failed.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;
use std::sync::Arc;

use super::VhostUserError;
use super::memory::GuestMemory;
use super::message::{
    Body, F_PROTOCOL_FEATURES, Message, Request, VRING_ADDR_F_LOG, VRING_STATE_LEN, VringAddress,
    VringState, encode_reply, protocol_features,
};
use super::socket;

/// The largest vring size a split ring allows.
pub const MAX_VRING_SIZE: u32 = 32768;

/// What the backend offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendConfig {
    /// Device features for GET_FEATURES (virtio feature bits).
    /// [`F_PROTOCOL_FEATURES`] is added when `protocol_features` is not 0.
    pub features: u64,
    /// Protocol features for GET_PROTOCOL_FEATURES
    /// ([`protocol_features`] bits); 0 offers none and refuses the request.
    pub protocol_features: u64,
    /// Queue pairs of the net device (GET_QUEUE_NUM); the device has twice
    /// as many vrings.
    pub queue_pairs: u16,
}

/// What a data path hears about its rings. Every method has a default that
/// does nothing, so a handler implements only what it needs; `()` is the
/// handler of a backend with no data path.
pub trait VringHandler {
    /// Ring `ring.index` has started: its host addresses are valid until
    /// [`vring_stopped`](Self::vring_stopped) is called for it.
    fn vring_started(&mut self, ring: &ReadyVring<'_>) {
        let _ = ring;
    }

    /// Ring `index` stops: the data path stops using it and returns the
    /// next avail index it would have processed, or `None` to keep the
    /// base the ring started with (a data path that never consumed any).
    fn vring_stopped(&mut self, index: usize) -> Option<u16> {
        let _ = index;
        None
    }

    /// A started ring's call or error eventfd, or its enable state, has
    /// changed.
    fn vring_updated(&mut self, ring: &ReadyVring<'_>) {
        let _ = ring;
    }

    /// SET_MEM_TABLE has mapped a new table, after the started rings
    /// stopped and before they start again on it. A data path that keeps a
    /// clone of the `Arc` keeps the mappings alive for as long as it holds
    /// it, whatever the backend does with the table afterwards.
    fn memory_changed(&mut self, memory: &Arc<GuestMemory>) {
        let _ = memory;
    }
}

impl VringHandler for () {}

/// Host addresses of a started ring's three parts.
#[derive(Debug, Clone, Copy)]
struct HostRing {
    desc: NonNull<u8>,
    avail: NonNull<u8>,
    used: NonNull<u8>,
}

// SAFETY: plain addresses into the memory table of the `Backend` that holds
// them; the backend never dereferences them, it only hands them to the data
// path, so moving or sharing them between threads is harmless.
unsafe impl Send for HostRing {}
// SAFETY: as above.
unsafe impl Sync for HostRing {}

/// One vring's setup as the frontend left it.
#[derive(Debug, Default)]
struct Vring {
    num: Option<u16>,
    addr: Option<VringAddress>,
    base: u16,
    kick: Option<OwnedFd>,
    call: Option<OwnedFd>,
    err: Option<OwnedFd>,
    /// What SET_VRING_ENABLE said last, if it came.
    enabled: Option<bool>,
    started: Option<HostRing>,
}

/// A started ring, as a data path needs it.
///
/// The host addresses point into the backend's mapped memory; they stay
/// valid until the handler hears [`VringHandler::vring_stopped`] for this
/// ring or the backend is dropped. The memory is shared with the frontend:
/// access it only through raw pointers, never references.
#[derive(Debug, Clone, Copy)]
pub struct ReadyVring<'a> {
    /// The vring index.
    pub index: usize,
    /// Entries in the ring (a power of two, unless packed).
    pub size: u16,
    /// The descriptor table: `16 * size` bytes, 16-byte aligned.
    pub desc: NonNull<u8>,
    /// The avail ring: `6 + 2 * size` bytes, 2-byte aligned (packed: the
    /// driver event suppression structure, 4 bytes, 4-byte aligned).
    pub avail: NonNull<u8>,
    /// The used ring: `6 + 8 * size` bytes, 4-byte aligned (packed: the
    /// device event suppression structure, 4 bytes, 4-byte aligned).
    pub used: NonNull<u8>,
    /// The avail index to start at (packed: the position, index and wrap
    /// counter, as vhost-user's ring base).
    pub base: u16,
    /// Whether the ring is enabled (the data path processes it only then).
    pub enabled: bool,
    /// The kick eventfd; `None` when the frontend sent NOFD (poll the ring).
    pub kick: Option<&'a OwnedFd>,
    /// The call eventfd; `None` when the frontend wants no interrupts.
    pub call: Option<&'a OwnedFd>,
    /// The error eventfd, if any.
    pub err: Option<&'a OwnedFd>,
}

/// A vring's setup, started or not: what tests and diagnostics look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VringSetup {
    /// Its size, once SET_VRING_NUM arrived.
    pub num: Option<u16>,
    /// Its addresses, once SET_VRING_ADDR arrived.
    pub addr: Option<VringAddress>,
    /// The avail index it starts at.
    pub base: u16,
    /// Whether it has a kick eventfd.
    pub kick: bool,
    /// Whether it has a call eventfd.
    pub call: bool,
    /// Whether it has an error eventfd.
    pub err: bool,
    /// Whether it is enabled.
    pub enabled: bool,
    /// Whether it is started.
    pub started: bool,
}

/// Byte lengths of a ring's parts for `num` entries: a split ring's
/// descriptor table, avail ring and used ring (with the event-index
/// words), or a packed ring's descriptor ring and its driver and device
/// event suppression structures.
fn ring_lengths(num: u16, packed: bool) -> [u64; 3] {
    let n = u64::from(num);
    if packed {
        [16 * n, 4, 4]
    } else {
        [16 * n, 6 + 2 * n, 6 + 8 * n]
    }
}

/// The device side of one vhost-user connection.
#[derive(Debug)]
pub struct Backend {
    config: BackendConfig,
    features: u64,
    protocol_features: u64,
    owner: bool,
    memory: Arc<GuestMemory>,
    vrings: Vec<Vring>,
    mtu: Option<u64>,
    rarp: Option<[u8; 6]>,
}

impl Backend {
    /// A backend offering `config`, with nothing negotiated yet.
    pub fn new(config: BackendConfig) -> Backend {
        Backend {
            config,
            features: 0,
            protocol_features: 0,
            owner: false,
            memory: Arc::new(GuestMemory::default()),
            vrings: (0..2 * usize::from(config.queue_pairs))
                .map(|_| Vring::default())
                .collect(),
            mtu: None,
            rarp: None,
        }
    }

    /// What it offers.
    pub fn config(&self) -> &BackendConfig {
        &self.config
    }

    /// The features GET_FEATURES returns.
    pub fn offered_features(&self) -> u64 {
        let protocol = if self.config.protocol_features != 0 {
            F_PROTOCOL_FEATURES
        } else {
            0
        };
        self.config.features | protocol
    }

    /// The features the frontend set (SET_FEATURES).
    pub fn features(&self) -> u64 {
        self.features
    }

    /// Whether the rings are packed (`VIRTIO_F_RING_PACKED` set).
    fn packed(&self) -> bool {
        crate::virtio::has_feature(self.features, crate::virtio::VIRTIO_F_RING_PACKED)
    }

    /// The protocol features the frontend set (SET_PROTOCOL_FEATURES).
    pub fn protocol_features(&self) -> u64 {
        self.protocol_features
    }

    /// Whether the frontend has claimed the session (SET_OWNER).
    pub fn is_owned(&self) -> bool {
        self.owner
    }

    /// The mapped memory table (empty before SET_MEM_TABLE), shared: a
    /// clone keeps its mappings alive after the backend replaces or drops
    /// it.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.memory
    }

    /// The MTU NET_SET_MTU set, if any.
    pub fn mtu(&self) -> Option<u64> {
        self.mtu
    }

    /// The MAC SEND_RARP announced last, if any.
    pub fn rarp_mac(&self) -> Option<[u8; 6]> {
        self.rarp
    }

    /// Number of vrings (twice the queue pairs).
    pub fn nb_vrings(&self) -> usize {
        self.vrings.len()
    }

    fn protocol_negotiated(&self) -> bool {
        self.features & F_PROTOCOL_FEATURES != 0
    }

    fn enabled(&self, vring: &Vring) -> bool {
        vring.enabled.unwrap_or(!self.protocol_negotiated())
    }

    /// Ring `index`'s setup, if the device has that ring.
    pub fn vring_setup(&self, index: usize) -> Option<VringSetup> {
        let v = self.vrings.get(index)?;
        Some(VringSetup {
            num: v.num,
            addr: v.addr,
            base: v.base,
            kick: v.kick.is_some(),
            call: v.call.is_some(),
            err: v.err.is_some(),
            enabled: self.enabled(v),
            started: v.started.is_some(),
        })
    }

    /// Ring `index`, if it is started.
    pub fn vring(&self, index: usize) -> Option<ReadyVring<'_>> {
        let v = self.vrings.get(index)?;
        let host = v.started?;
        Some(ReadyVring {
            index,
            size: v.num?,
            desc: host.desc,
            avail: host.avail,
            used: host.used,
            base: v.base,
            enabled: self.enabled(v),
            kick: v.kick.as_ref(),
            call: v.call.as_ref(),
            err: v.err.as_ref(),
        })
    }

    fn check_index(&self, index: u32) -> Result<usize, VhostUserError> {
        let i = index as usize;
        if i < self.vrings.len() {
            Ok(i)
        } else {
            Err(VhostUserError::BadVring {
                index,
                what: "no such vring on this device",
            })
        }
    }

    /// Ring `index` as the frontend may change it: it must not be started.
    fn stopped_vring(&mut self, index: u32) -> Result<&mut Vring, VhostUserError> {
        let i = self.check_index(index)?;
        let v = &mut self.vrings[i];
        if v.started.is_some() {
            return Err(VhostUserError::BadVring {
                index,
                what: "the ring is started (GET_VRING_BASE stops it)",
            });
        }
        Ok(v)
    }

    /// Stops ring `i` if started, taking the data path's avail index.
    fn stop(&mut self, i: usize, handler: &mut dyn VringHandler) {
        if self.vrings[i].started.take().is_some()
            && let Some(base) = handler.vring_stopped(i)
        {
            self.vrings[i].base = base;
        }
    }

    /// Starts ring `i`: translates its parts through the memory table.
    fn start(&mut self, i: usize, handler: &mut dyn VringHandler) -> Result<(), VhostUserError> {
        let index = i as u32;
        let bad = |what| VhostUserError::BadVring { index, what };
        let v = &self.vrings[i];
        let num = v
            .num
            .ok_or(bad("the ring is kicked before its size is set"))?;
        let addr = v
            .addr
            .ok_or(bad("the ring is kicked before its addresses are set"))?;
        let packed = self.packed();
        let [desc_len, avail_len, used_len] = ring_lengths(num, packed);
        let part = |uaddr: u64, len: u64, align: usize, what_out, what_align| {
            let host = self.memory.uaddr_to_host(uaddr, len).ok_or(bad(what_out))?;
            if !(host.as_ptr() as usize).is_multiple_of(align) {
                return Err(bad(what_align));
            }
            Ok(host)
        };
        let host = HostRing {
            desc: part(
                addr.desc_user_addr,
                desc_len,
                16,
                "the descriptor table lies outside the memory table",
                "the descriptor table is not 16-byte aligned",
            )?,
            avail: part(
                addr.avail_user_addr,
                avail_len,
                if packed { 4 } else { 2 },
                "the avail ring lies outside the memory table",
                "the avail ring is not 2-byte aligned",
            )?,
            used: part(
                addr.used_user_addr,
                used_len,
                4,
                "the used ring lies outside the memory table",
                "the used ring is not 4-byte aligned",
            )?,
        };
        self.vrings[i].started = Some(host);
        if let Some(ring) = self.vring(i) {
            handler.vring_started(&ring);
        }
        Ok(())
    }

    fn updated(&self, i: usize, handler: &mut dyn VringHandler) {
        if let Some(ring) = self.vring(i) {
            handler.vring_updated(&ring);
        }
    }

    /// Stops every started ring (as before dropping the backend).
    pub fn stop_all(&mut self, handler: &mut dyn VringHandler) {
        for i in 0..self.vrings.len() {
            self.stop(i, handler);
        }
    }

    fn unsupported(request: Request, what: &'static str) -> VhostUserError {
        VhostUserError::Unsupported { request, what }
    }

    fn require_protocol(
        &self,
        request: Request,
        bit: u64,
        what: &'static str,
    ) -> Result<(), VhostUserError> {
        if self.protocol_features & bit != 0 {
            Ok(())
        } else {
            Err(Self::unsupported(request, what))
        }
    }

    /// Applies one request with the descriptors that came with it
    /// ([`Message::decode`] has checked their number). Returns the reply's
    /// payload for requests that have one.
    pub fn handle(
        &mut self,
        msg: &Message,
        fds: Vec<OwnedFd>,
        handler: &mut dyn VringHandler,
    ) -> Result<Option<Vec<u8>>, VhostUserError> {
        let request = msg.request();
        let mut fds = fds.into_iter();
        let u64_reply = |v: u64| Ok(Some(v.to_le_bytes().to_vec()));
        match &msg.body {
            Body::GetFeatures => return u64_reply(self.offered_features()),
            Body::SetFeatures(bits) => {
                let extra = bits & !self.offered_features();
                if extra != 0 {
                    return Err(VhostUserError::FeaturesNotOffered {
                        request,
                        bits: extra,
                    });
                }
                self.features = *bits;
            }
            Body::SetOwner => self.owner = true,
            Body::ResetOwner => {
                self.stop_all(handler);
                *self = Backend::new(self.config);
            }
            Body::SetMemTable(table) => {
                let owned: Vec<OwnedFd> = fds.by_ref().collect();
                let borrowed: Vec<BorrowedFd<'_>> = owned.iter().map(|f| f.as_fd()).collect();
                let memory = Arc::new(GuestMemory::map(&table.regions, &borrowed)?);
                drop(borrowed);
                drop(owned);
                let started: Vec<usize> = (0..self.vrings.len())
                    .filter(|&i| self.vrings[i].started.is_some())
                    .collect();
                for &i in &started {
                    self.stop(i, handler);
                }
                // The backend's hold on the old mappings goes only now,
                // after their users stopped.
                self.memory = memory;
                handler.memory_changed(&self.memory);
                for i in started {
                    self.start(i, handler)?;
                }
            }
            Body::SetLogBase(_) | Body::SetLogFd => {
                return Err(Self::unsupported(request, "dirty logging is not offered"));
            }
            Body::SetVringNum(VringState { index, num }) => {
                let index = *index;
                // A packed ring's size need not be a power of two.
                if *num == 0 || *num > MAX_VRING_SIZE || !(self.packed() || num.is_power_of_two()) {
                    return Err(VhostUserError::BadVring {
                        index,
                        what: "size is not a power of two from 1 to 32768",
                    });
                }
                self.stopped_vring(index)?.num = Some(*num as u16);
            }
            Body::SetVringAddr(addr) => {
                if addr.flags & VRING_ADDR_F_LOG != 0 {
                    return Err(VhostUserError::BadVring {
                        index: addr.index,
                        what: "used-ring logging is not supported",
                    });
                }
                if addr.flags & !VRING_ADDR_F_LOG != 0 {
                    return Err(VhostUserError::BadVring {
                        index: addr.index,
                        what: "unknown address flags",
                    });
                }
                self.stopped_vring(addr.index)?.addr = Some(*addr);
            }
            Body::SetVringBase(VringState { index, num }) if self.packed() => {
                // The avail position (index and wrap counter) in the low
                // 16 bits; QEMU puts the used one in the high 16, which is
                // the same with no chain in flight, as at a start.
                self.stopped_vring(*index)?.base = *num as u16;
            }
            Body::SetVringBase(VringState { index, num }) => {
                let base = u16::try_from(*num).map_err(|_| VhostUserError::BadVring {
                    index: *index,
                    what: "base above 65535 (split rings only)",
                })?;
                self.stopped_vring(*index)?.base = base;
            }
            Body::GetVringBase(VringState { index, .. }) => {
                let i = self.check_index(*index)?;
                self.stop(i, handler);
                let packed = self.packed();
                let v = &mut self.vrings[i];
                v.kick = None;
                v.call = None;
                let base = u32::from(v.base);
                let mut reply = vec![0; VRING_STATE_LEN];
                VringState {
                    index: *index,
                    // A packed ring's used position, in the high 16 bits, is
                    // its avail position: the data path returned every chain.
                    num: if packed { base | base << 16 } else { base },
                }
                .emit(&mut reply);
                return Ok(Some(reply));
            }
            Body::SetVringKick(vfd) => {
                let i = self.check_index(u32::from(vfd.index))?;
                self.stop(i, handler);
                let v = &mut self.vrings[i];
                v.kick = if vfd.nofd { None } else { fds.next() };
                self.start(i, handler)?;
            }
            Body::SetVringCall(vfd) => {
                let i = self.check_index(u32::from(vfd.index))?;
                self.vrings[i].call = if vfd.nofd { None } else { fds.next() };
                self.updated(i, handler);
            }
            Body::SetVringErr(vfd) => {
                let i = self.check_index(u32::from(vfd.index))?;
                self.vrings[i].err = if vfd.nofd { None } else { fds.next() };
                self.updated(i, handler);
            }
            Body::GetProtocolFeatures => {
                if self.config.protocol_features == 0 {
                    return Err(Self::unsupported(
                        request,
                        "no protocol features are offered",
                    ));
                }
                return u64_reply(self.config.protocol_features);
            }
            Body::SetProtocolFeatures(bits) => {
                let extra = bits & !self.config.protocol_features;
                if extra != 0 {
                    return Err(VhostUserError::FeaturesNotOffered {
                        request,
                        bits: extra,
                    });
                }
                self.protocol_features = *bits;
            }
            Body::GetQueueNum => return u64_reply(u64::from(self.config.queue_pairs)),
            Body::SetVringEnable(VringState { index, num }) => {
                let i = self.check_index(*index)?;
                self.vrings[i].enabled = Some(*num == 1);
                self.updated(i, handler);
            }
            Body::SendRarp(mac) => {
                self.require_protocol(request, protocol_features::RARP, "RARP is not negotiated")?;
                self.rarp = Some(*mac);
            }
            Body::NetSetMtu(mtu) => {
                self.require_protocol(request, protocol_features::MTU, "MTU is not negotiated")?;
                self.mtu = Some(*mtu);
            }
            Body::GetConfig(_) | Body::SetConfig(_) => {
                return Err(Self::unsupported(
                    request,
                    "the device has no configuration space",
                ));
            }
        }
        Ok(None)
    }

    /// Reads one request from `stream`, applies it and sends its reply (or
    /// its REPLY_ACK status). Returns the request, or the error that
    /// refused it — after a failure status was sent where one was asked
    /// for; the caller decides whether to go on or close the connection.
    /// A refused request with a reply of its own (GET_VRING_BASE of a ring
    /// the device does not have, ...) gets no reply at all: the frontend
    /// learns of it when the connection closes.
    pub fn serve_one(
        &mut self,
        stream: &UnixStream,
        handler: &mut dyn VringHandler,
    ) -> Result<Request, VhostUserError> {
        self.serve_message(stream, handler)?
    }

    /// [`serve_one`](Self::serve_one), telling apart the errors after
    /// which the frontend knows of the failure (inner: a failure status was
    /// sent) from all others (outer).
    pub(crate) fn serve_message(
        &mut self,
        stream: &UnixStream,
        handler: &mut dyn VringHandler,
    ) -> Result<Result<Request, VhostUserError>, VhostUserError> {
        let (msg, fds) = socket::recv(stream)?;
        let request = msg.request();
        // A request with a reply of its own never gets a status instead: a
        // failed GET ends the session (the frontend would take a status
        // for the value it asked for).
        let ack = msg.need_reply()
            && !request.has_reply()
            && self.protocol_features & protocol_features::REPLY_ACK != 0;
        match self.handle(&msg, fds, handler) {
            Ok(Some(payload)) => socket::send(stream, &encode_reply(request, &payload), &[])?,
            Ok(None) if ack => {
                socket::send(stream, &encode_reply(request, &0u64.to_le_bytes()), &[])?
            }
            Ok(None) => {}
            Err(e) if ack => {
                socket::send(stream, &encode_reply(request, &1u64.to_le_bytes()), &[])?;
                return Ok(Err(e));
            }
            Err(e) => return Err(e),
        }
        Ok(Ok(request))
    }

    /// Serves requests until the frontend closes the connection (`Ok`) or
    /// something fails that the frontend cannot be told of (its error): a
    /// socket error, a malformed message, or a refused request without
    /// REPLY_ACK. A request refused with a failure status is not the end:
    /// the frontend knows, and serving goes on. Started rings are stopped
    /// either way.
    pub fn serve(
        &mut self,
        stream: &UnixStream,
        handler: &mut dyn VringHandler,
    ) -> Result<(), VhostUserError> {
        let result = loop {
            match self.serve_message(stream, handler) {
                Ok(_) => {}
                Err(VhostUserError::Closed) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.stop_all(handler);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vhost_user::message::{MemoryRegion, MemoryTable, VringFd};
    use crate::vhost_user::socket::tests::memfd;

    const REGION_SIZE: u64 = 0x10000;
    const UADDR: u64 = 0x7f00_0000_0000;

    fn backend(protocol: u64) -> Backend {
        Backend::new(BackendConfig {
            features: 1 << 32,
            protocol_features: protocol,
            queue_pairs: 1,
        })
    }

    /// Records what the data path hears; returns `next_avail` on stop.
    #[derive(Default)]
    struct Recorder {
        events: Vec<String>,
        next_avail: Option<u16>,
    }

    impl VringHandler for Recorder {
        fn vring_started(&mut self, ring: &ReadyVring<'_>) {
            self.events.push(format!(
                "start {} size {} base {}",
                ring.index, ring.size, ring.base
            ));
        }
        fn vring_stopped(&mut self, index: usize) -> Option<u16> {
            self.events.push(format!("stop {index}"));
            self.next_avail
        }
        fn vring_updated(&mut self, ring: &ReadyVring<'_>) {
            self.events
                .push(format!("update {} enabled {}", ring.index, ring.enabled));
        }
    }

    fn apply(
        b: &mut Backend,
        body: Body,
        fds: Vec<OwnedFd>,
        h: &mut dyn VringHandler,
    ) -> Result<Option<Vec<u8>>, VhostUserError> {
        b.handle(&Message::new(body), fds, h)
    }

    fn mem_table(
        b: &mut Backend,
        gpa: u64,
        h: &mut dyn VringHandler,
    ) -> Result<(), VhostUserError> {
        let region = MemoryRegion {
            guest_phys_addr: gpa,
            memory_size: REGION_SIZE,
            userspace_addr: UADDR,
            mmap_offset: 0,
        };
        apply(
            b,
            Body::SetMemTable(MemoryTable {
                regions: vec![region],
            }),
            vec![memfd(REGION_SIZE)],
            h,
        )
        .map(|_| ())
    }

    fn addr(index: u32, desc: u64) -> VringAddress {
        VringAddress {
            index,
            flags: 0,
            desc_user_addr: UADDR + desc,
            avail_user_addr: UADDR + desc + 0x1000,
            used_user_addr: UADDR + desc + 0x2000,
            log_guest_addr: 0,
        }
    }

    fn kick(
        b: &mut Backend,
        index: u8,
        h: &mut dyn VringHandler,
    ) -> Result<Option<Vec<u8>>, VhostUserError> {
        apply(
            b,
            Body::SetVringKick(VringFd { index, nofd: true }),
            vec![],
            h,
        )
    }

    #[test]
    fn a_backend_and_its_memory_go_to_other_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Backend>();
        send_sync::<GuestMemory>();
    }

    #[test]
    fn features_outside_the_offer_are_refused() {
        let mut b = backend(0);
        let h = &mut ();
        assert_eq!(
            apply(&mut b, Body::GetFeatures, vec![], h)
                .unwrap()
                .unwrap(),
            (1u64 << 32).to_le_bytes()
        );
        let err = apply(&mut b, Body::SetFeatures(1 << 32 | 1), vec![], h).unwrap_err();
        assert!(
            matches!(err, VhostUserError::FeaturesNotOffered { bits: 1, .. }),
            "{err}"
        );
        assert_eq!(b.features(), 0);
        // Without protocol features, they do not exist, and rings are
        // enabled until SET_VRING_ENABLE says otherwise.
        assert!(matches!(
            apply(&mut b, Body::GetProtocolFeatures, vec![], h),
            Err(VhostUserError::Unsupported { .. })
        ));
        assert!(b.vring_setup(0).unwrap().enabled);
        let disable = Body::SetVringEnable(VringState { index: 0, num: 0 });
        apply(&mut b, disable, vec![], h).unwrap();
        assert!(!b.vring_setup(0).unwrap().enabled);

        let mut b = backend(protocol_features::MQ);
        assert_eq!(b.offered_features(), 1 << 32 | F_PROTOCOL_FEATURES);
        let err = apply(
            &mut b,
            Body::SetProtocolFeatures(protocol_features::MTU),
            vec![],
            h,
        )
        .unwrap_err();
        assert!(
            matches!(err, VhostUserError::FeaturesNotOffered { .. }),
            "{err}"
        );
        assert!(matches!(
            apply(&mut b, Body::NetSetMtu(9000), vec![], h),
            Err(VhostUserError::Unsupported { .. })
        ));
        assert!(matches!(
            apply(&mut b, Body::SetLogFd, vec![], h),
            Err(VhostUserError::Unsupported { .. })
        ));
    }

    #[test]
    fn ring_sizes_and_indexes_are_checked() {
        let mut b = backend(0);
        let h = &mut ();
        for num in [0, 3, 100, 65536, u32::MAX] {
            let err = apply(
                &mut b,
                Body::SetVringNum(VringState { index: 0, num }),
                vec![],
                h,
            )
            .unwrap_err();
            assert!(
                matches!(err, VhostUserError::BadVring { index: 0, .. }),
                "{num}: {err}"
            );
        }
        for num in [1, 256, 32768] {
            apply(
                &mut b,
                Body::SetVringNum(VringState { index: 1, num }),
                vec![],
                h,
            )
            .unwrap();
            assert_eq!(b.vring_setup(1).unwrap().num, Some(num as u16));
        }
        let err = apply(
            &mut b,
            Body::SetVringNum(VringState { index: 2, num: 8 }),
            vec![],
            h,
        )
        .unwrap_err();
        assert!(
            matches!(err, VhostUserError::BadVring { index: 2, .. }),
            "{err}"
        );
        let err = apply(
            &mut b,
            Body::SetVringBase(VringState {
                index: 0,
                num: 65536,
            }),
            vec![],
            h,
        )
        .unwrap_err();
        assert!(matches!(err, VhostUserError::BadVring { .. }), "{err}");
        let mut logged = addr(0, 0);
        logged.flags = 1;
        assert!(apply(&mut b, Body::SetVringAddr(logged), vec![], h).is_err());
        assert!(b.vring_setup(2).is_none());
    }

    #[test]
    fn packed_rings_take_any_size_a_position_as_base_and_small_event_areas() {
        let packed = 1u64 << crate::virtio::VIRTIO_F_RING_PACKED;
        let mut b = Backend::new(BackendConfig {
            features: 1 << 32 | packed,
            protocol_features: 0,
            queue_pairs: 1,
        });
        let h = &mut Recorder::default();
        apply(&mut b, Body::SetFeatures(1 << 32 | packed), vec![], h).unwrap();
        mem_table(&mut b, 0, h).unwrap();
        let set = |index, num| Body::SetVringNum(VringState { index, num });
        assert!(apply(&mut b, set(0, 0), vec![], h).is_err());
        assert!(apply(&mut b, set(0, 32769), vec![], h).is_err());
        apply(&mut b, set(0, 100), vec![], h).unwrap();
        // QEMU's base: avail position low, used position high.
        let base = 0x8005 | 0x8005 << 16;
        apply(
            &mut b,
            Body::SetVringBase(VringState {
                index: 0,
                num: base,
            }),
            vec![],
            h,
        )
        .unwrap();
        // The event areas are 4 bytes: at the region's very end they fit.
        let mut at = addr(0, 0);
        at.avail_user_addr = UADDR + REGION_SIZE - 8;
        at.used_user_addr = UADDR + REGION_SIZE - 4;
        apply(&mut b, Body::SetVringAddr(at), vec![], h).unwrap();
        kick(&mut b, 0, h).unwrap();
        assert_eq!(h.events, ["start 0 size 100 base 32773"]);
        h.next_avail = Some(0x0007);
        let reply = apply(
            &mut b,
            Body::GetVringBase(VringState { index: 0, num: 0 }),
            vec![],
            h,
        )
        .unwrap()
        .unwrap();
        let mut want = vec![0; VRING_STATE_LEN];
        VringState {
            index: 0,
            num: 0x0007 | 0x0007 << 16,
        }
        .emit(&mut want);
        assert_eq!(reply, want, "the used position is the avail one");
    }

    #[test]
    fn a_ring_starts_only_whole_inside_the_memory() {
        let mut b = backend(0);
        let h = &mut Recorder::default();
        // Kicked before its size and addresses.
        assert!(matches!(
            kick(&mut b, 0, h),
            Err(VhostUserError::BadVring { .. })
        ));
        apply(
            &mut b,
            Body::SetVringNum(VringState { index: 0, num: 256 }),
            vec![],
            h,
        )
        .unwrap();
        assert!(matches!(
            kick(&mut b, 0, h),
            Err(VhostUserError::BadVring { .. })
        ));
        // Addresses but no memory table yet.
        apply(&mut b, Body::SetVringAddr(addr(0, 0)), vec![], h).unwrap();
        assert!(matches!(
            kick(&mut b, 0, h),
            Err(VhostUserError::BadVring { .. })
        ));
        mem_table(&mut b, 0, h).unwrap();
        // The used ring (6 + 8 * 256 bytes) would cross the region's end.
        apply(
            &mut b,
            Body::SetVringAddr(addr(0, REGION_SIZE - 0x2000 - 0x800)),
            vec![],
            h,
        )
        .unwrap();
        let err = kick(&mut b, 0, h).unwrap_err();
        assert!(
            matches!(
                err,
                VhostUserError::BadVring {
                    what: "the used ring lies outside the memory table",
                    ..
                }
            ),
            "{err}"
        );
        // A misaligned descriptor table.
        apply(&mut b, Body::SetVringAddr(addr(0, 8)), vec![], h).unwrap();
        assert!(matches!(
            kick(&mut b, 0, h),
            Err(VhostUserError::BadVring { .. })
        ));
        assert!(b.vring(0).is_none());
        assert!(h.events.is_empty());

        apply(&mut b, Body::SetVringAddr(addr(0, 0x4000)), vec![], h).unwrap();
        kick(&mut b, 0, h).unwrap();
        let ring = b.vring(0).unwrap();
        assert_eq!(
            Some(ring.desc),
            b.memory().uaddr_to_host(UADDR + 0x4000, 16)
        );
        assert!(ring.kick.is_none() && ring.enabled);
        assert_eq!(h.events, ["start 0 size 256 base 0"]);
        // A started ring's setup is fixed until GET_VRING_BASE.
        assert!(
            apply(
                &mut b,
                Body::SetVringNum(VringState { index: 0, num: 8 }),
                vec![],
                h
            )
            .is_err()
        );
    }

    #[test]
    fn a_new_memory_table_stops_and_restarts_the_started_rings() {
        let mut b = backend(protocol_features::REPLY_ACK);
        let h = &mut Recorder::default();
        apply(&mut b, Body::SetFeatures(F_PROTOCOL_FEATURES), vec![], h).unwrap();
        mem_table(&mut b, 0, h).unwrap();
        apply(
            &mut b,
            Body::SetVringNum(VringState { index: 1, num: 64 }),
            vec![],
            h,
        )
        .unwrap();
        apply(
            &mut b,
            Body::SetVringBase(VringState { index: 1, num: 5 }),
            vec![],
            h,
        )
        .unwrap();
        apply(&mut b, Body::SetVringAddr(addr(1, 0)), vec![], h).unwrap();
        kick(&mut b, 1, h).unwrap();
        // Protocol features negotiated: disabled until enabled.
        assert!(!b.vring(1).unwrap().enabled);
        apply(
            &mut b,
            Body::SetVringEnable(VringState { index: 1, num: 1 }),
            vec![],
            h,
        )
        .unwrap();
        assert!(b.vring(1).unwrap().enabled);

        h.next_avail = Some(9);
        mem_table(&mut b, 0x1_0000_0000, h).unwrap();
        assert_eq!(b.memory().regions()[0].guest_phys_addr(), 0x1_0000_0000);
        assert_eq!(
            h.events,
            [
                "start 1 size 64 base 5",
                "update 1 enabled true",
                "stop 1",
                "start 1 size 64 base 9"
            ]
        );
        // GET_VRING_BASE stops it, closes its eventfds and returns the base.
        let reply = apply(
            &mut b,
            Body::GetVringBase(VringState { index: 1, num: 0 }),
            vec![],
            h,
        )
        .unwrap()
        .unwrap();
        assert_eq!(reply, [1, 0, 0, 0, 9, 0, 0, 0]);
        let setup = b.vring_setup(1).unwrap();
        assert!(!setup.started && !setup.kick && !setup.call);
        assert_eq!(h.events.last().unwrap(), "stop 1");
        // RESET_OWNER forgets everything.
        apply(&mut b, Body::ResetOwner, vec![], h).unwrap();
        assert!(b.memory().is_empty());
        assert_eq!(b.features(), 0);
        assert_eq!(b.vring_setup(1).unwrap().num, None);
    }

    #[test]
    fn a_refused_get_gets_no_status_in_place_of_its_value() {
        use crate::vhost_user::message::{FLAG_NEED_REPLY, VERSION};
        use crate::vhost_user::socket;
        use std::os::unix::net::UnixStream;

        let (front, back) = UnixStream::pair().unwrap();
        let mut b = backend(protocol_features::REPLY_ACK);
        let h = &mut ();
        let send = |body| {
            let msg = Message {
                flags: VERSION | FLAG_NEED_REPLY,
                body,
            };
            socket::send(&front, &msg.encode(), &[]).unwrap();
        };
        send(Body::SetProtocolFeatures(protocol_features::REPLY_ACK));
        assert_eq!(b.serve_one(&back, h).unwrap(), Request::SetProtocolFeatures);
        send(Body::GetVringBase(VringState { index: 7, num: 0 }));
        assert!(matches!(
            b.serve_one(&back, h),
            Err(VhostUserError::BadVring { index: 7, .. })
        ));
        send(Body::SetVringNum(VringState { index: 7, num: 8 }));
        assert!(matches!(
            b.serve_one(&back, h),
            Err(VhostUserError::BadVring { index: 7, .. })
        ));
        // Only the SET got a status (1: failed); the GET got nothing.
        drop(back);
        let reply = socket::recv_raw(&front).unwrap();
        assert_eq!(reply.header().request(), Request::SetVringNum.code());
        assert_eq!(reply.payload, 1u64.to_le_bytes());
        assert!(matches!(
            socket::recv_raw(&front),
            Err(VhostUserError::Closed)
        ));
    }

    #[test]
    fn a_bad_memory_table_leaves_the_old_one() {
        let mut b = backend(0);
        let h = &mut ();
        mem_table(&mut b, 0, h).unwrap();
        let regions = vec![
            MemoryRegion {
                guest_phys_addr: 0,
                memory_size: 0x1000,
                userspace_addr: 0,
                mmap_offset: 0,
            },
            MemoryRegion {
                guest_phys_addr: 0x800,
                memory_size: 0x1000,
                userspace_addr: 0x10000,
                mmap_offset: 0,
            },
        ];
        let err = apply(
            &mut b,
            Body::SetMemTable(MemoryTable { regions }),
            vec![memfd(0x1000), memfd(0x1000)],
            h,
        )
        .unwrap_err();
        assert!(
            matches!(err, VhostUserError::BadRegion { region: 1, .. }),
            "{err}"
        );
        let beyond = vec![MemoryRegion {
            guest_phys_addr: 0,
            memory_size: 0x2000,
            userspace_addr: 0,
            mmap_offset: 0,
        }];
        let err = apply(
            &mut b,
            Body::SetMemTable(MemoryTable { regions: beyond }),
            vec![memfd(0x1000)],
            h,
        )
        .unwrap_err();
        assert!(
            matches!(err, VhostUserError::BadRegion { region: 0, .. }),
            "{err}"
        );
        assert_eq!(b.memory().regions()[0].size(), REGION_SIZE);
    }
}
