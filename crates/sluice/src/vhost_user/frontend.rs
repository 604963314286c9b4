//! The driver side's requests, one function each.
//!
//! [`Frontend`] wraps a connected socket and sends the requests a net
//! driver needs to set up a backend, checking each reply: the REPLY flag,
//! the request code echoed back, and the payload size. Once REPLY_ACK is
//! negotiated ([`Frontend::set_protocol_features`]), every request without
//! a reply of its own carries NEED_REPLY and waits for the backend's status,
//! so a refused request is an error here ([`VhostUserError::Nack`]) rather
//! than silence.
//!
//! Set a read timeout on [`Frontend::stream`] to bound how long a reply is
//! awaited.

use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::VhostUserError;
use super::message::{
    Body, FLAG_NEED_REPLY, MemoryRegion, MemoryTable, Message, Request, VERSION, VRING_STATE_LEN,
    VringAddress, VringFd, VringState, parse_u64, protocol_features,
};
use super::socket;

/// The frontend end of a vhost-user connection.
#[derive(Debug)]
pub struct Frontend {
    stream: UnixStream,
    reply_ack: bool,
}

impl Frontend {
    /// Connects to the backend listening at `path`.
    pub fn connect(path: impl AsRef<Path>) -> Result<Frontend, VhostUserError> {
        Ok(Frontend::from_stream(
            UnixStream::connect(path).map_err(VhostUserError::Io)?,
        ))
    }

    /// Uses an already connected socket.
    pub fn from_stream(stream: UnixStream) -> Frontend {
        Frontend {
            stream,
            reply_ack: false,
        }
    }

    /// The socket (to set timeouts).
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Whether requests carry NEED_REPLY (REPLY_ACK is negotiated).
    pub fn reply_ack(&self) -> bool {
        self.reply_ack
    }

    fn send(
        &self,
        body: Body,
        need_reply: bool,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Request, VhostUserError> {
        let mut msg = Message::new(body);
        if need_reply {
            msg.flags |= FLAG_NEED_REPLY;
        }
        socket::send(&self.stream, &msg.encode(), fds)?;
        Ok(msg.request())
    }

    /// Receives the reply to `request` and returns its payload, which must
    /// be `len` bytes.
    fn reply(&self, request: Request, len: usize) -> Result<Vec<u8>, VhostUserError> {
        let raw = socket::recv_raw(&self.stream)?;
        let bad = |what| VhostUserError::BadReply { request, what };
        if !raw.fds.is_empty() {
            return Err(bad("it carries file descriptors"));
        }
        let header = raw.header();
        if header.version() != VERSION {
            return Err(VhostUserError::BadVersion {
                flags: header.flags(),
            });
        }
        if !header.is_reply() {
            return Err(bad("the REPLY flag is not set"));
        }
        if header.request() != request.code() {
            return Err(bad("it answers another request"));
        }
        if raw.payload.len() != len {
            return Err(bad("its payload has the wrong size"));
        }
        Ok(raw.payload)
    }

    /// Sends a request without a reply of its own; with REPLY_ACK, waits
    /// for its status.
    fn request(&self, body: Body, fds: &[BorrowedFd<'_>]) -> Result<(), VhostUserError> {
        let request = self.send(body, self.reply_ack, fds)?;
        if self.reply_ack {
            let status = parse_u64(&self.reply(request, 8)?, request)?;
            if status != 0 {
                return Err(VhostUserError::Nack { request, status });
            }
        }
        Ok(())
    }

    /// Sends a request whose reply is a u64 and returns it.
    fn request_u64(&self, body: Body) -> Result<u64, VhostUserError> {
        let request = self.send(body, false, &[])?;
        parse_u64(&self.reply(request, 8)?, request)
    }

    /// GET_FEATURES: the device features the backend offers.
    pub fn get_features(&self) -> Result<u64, VhostUserError> {
        self.request_u64(Body::GetFeatures)
    }

    /// SET_FEATURES: the features the driver accepts.
    pub fn set_features(&self, features: u64) -> Result<(), VhostUserError> {
        self.request(Body::SetFeatures(features), &[])
    }

    /// GET_PROTOCOL_FEATURES: the protocol features the backend offers.
    pub fn get_protocol_features(&self) -> Result<u64, VhostUserError> {
        self.request_u64(Body::GetProtocolFeatures)
    }

    /// SET_PROTOCOL_FEATURES: the protocol features the frontend accepts.
    /// With [`protocol_features::REPLY_ACK`] among them, later requests
    /// wait for the backend's status.
    pub fn set_protocol_features(&mut self, features: u64) -> Result<(), VhostUserError> {
        self.request(Body::SetProtocolFeatures(features), &[])?;
        self.reply_ack = features & protocol_features::REPLY_ACK != 0;
        Ok(())
    }

    /// SET_OWNER: claims the session.
    pub fn set_owner(&self) -> Result<(), VhostUserError> {
        self.request(Body::SetOwner, &[])
    }

    /// RESET_OWNER: resets the device.
    pub fn reset_owner(&self) -> Result<(), VhostUserError> {
        self.request(Body::ResetOwner, &[])
    }

    /// SET_MEM_TABLE: the regions, each with the descriptor of its memory.
    pub fn set_mem_table(
        &self,
        regions: &[(MemoryRegion, BorrowedFd<'_>)],
    ) -> Result<(), VhostUserError> {
        let table = MemoryTable {
            regions: regions.iter().map(|(r, _)| *r).collect(),
        };
        let fds: Vec<BorrowedFd<'_>> = regions.iter().map(|(_, fd)| *fd).collect();
        self.request(Body::SetMemTable(table), &fds)
    }

    /// SET_VRING_NUM: ring `index` has `num` entries.
    pub fn set_vring_num(&self, index: u32, num: u32) -> Result<(), VhostUserError> {
        self.request(Body::SetVringNum(VringState { index, num }), &[])
    }

    /// SET_VRING_ADDR: a ring's addresses.
    pub fn set_vring_addr(&self, addr: &VringAddress) -> Result<(), VhostUserError> {
        self.request(Body::SetVringAddr(*addr), &[])
    }

    /// SET_VRING_BASE: ring `index` starts at avail index `base`.
    pub fn set_vring_base(&self, index: u32, base: u32) -> Result<(), VhostUserError> {
        self.request(Body::SetVringBase(VringState { index, num: base }), &[])
    }

    /// GET_VRING_BASE: stops ring `index` and returns its next avail index.
    pub fn get_vring_base(&self, index: u32) -> Result<u32, VhostUserError> {
        let request = self.send(Body::GetVringBase(VringState { index, num: 0 }), false, &[])?;
        let state = VringState::parse(&self.reply(request, VRING_STATE_LEN)?, request)?;
        if state.index != index {
            return Err(VhostUserError::BadReply {
                request,
                what: "it names another vring",
            });
        }
        Ok(state.num)
    }

    fn vring_fd(index: u32, fd: Option<BorrowedFd<'_>>) -> Result<VringFd, VhostUserError> {
        let index = u8::try_from(index).map_err(|_| VhostUserError::BadVring {
            index,
            what: "index above 255 does not fit the request",
        })?;
        Ok(VringFd {
            index,
            nofd: fd.is_none(),
        })
    }

    /// SET_VRING_KICK: ring `index`'s kick eventfd, or `None` for a polled
    /// ring. Starts the ring.
    pub fn set_vring_kick(
        &self,
        index: u32,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<(), VhostUserError> {
        let vfd = Self::vring_fd(index, fd)?;
        self.request(Body::SetVringKick(vfd), fd.as_slice())
    }

    /// SET_VRING_CALL: ring `index`'s call eventfd, or `None` for no
    /// interrupts.
    pub fn set_vring_call(
        &self,
        index: u32,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<(), VhostUserError> {
        let vfd = Self::vring_fd(index, fd)?;
        self.request(Body::SetVringCall(vfd), fd.as_slice())
    }

    /// SET_VRING_ERR: ring `index`'s error eventfd, or `None`.
    pub fn set_vring_err(
        &self,
        index: u32,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<(), VhostUserError> {
        let vfd = Self::vring_fd(index, fd)?;
        self.request(Body::SetVringErr(vfd), fd.as_slice())
    }

    /// SET_VRING_ENABLE: enables or disables ring `index`.
    pub fn set_vring_enable(&self, index: u32, enable: bool) -> Result<(), VhostUserError> {
        let num = u32::from(enable);
        self.request(Body::SetVringEnable(VringState { index, num }), &[])
    }

    /// GET_QUEUE_NUM: the queue pairs the backend supports.
    pub fn get_queue_num(&self) -> Result<u64, VhostUserError> {
        self.request_u64(Body::GetQueueNum)
    }

    /// NET_SET_MTU: the net device's MTU.
    pub fn net_set_mtu(&self, mtu: u64) -> Result<(), VhostUserError> {
        self.request(Body::NetSetMtu(mtu), &[])
    }

    /// SEND_RARP: the guest's MAC, to announce.
    pub fn send_rarp(&self, mac: [u8; 6]) -> Result<(), VhostUserError> {
        self.request(Body::SendRarp(mac), &[])
    }
}
