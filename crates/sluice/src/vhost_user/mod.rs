//! The vhost-user protocol: a virtio device's control plane over a Unix
//! socket.
//!
//! vhost-user (specified in QEMU's `docs/interop/vhost-user.rst`) lets one
//! process drive a virtio device that another process implements. Its two
//! roles:
//!
//! - the **frontend** (formerly "master"): the driver side — QEMU for a
//!   VM, or a userspace driver such as DPDK's `virtio_user`. It owns the
//!   memory the rings and buffers live in and sets the device up;
//! - the **backend** (formerly "slave"): the device side — DPDK's
//!   `net_vhost`, a switch, or Sluice. It maps the frontend's memory and
//!   processes the rings.
//!
//! They exchange messages over a `SOCK_STREAM` Unix socket: a 12-byte
//! header, a payload, and file descriptors as `SCM_RIGHTS` — the memory
//! regions (memfds, hugetlbfs files) and the eventfds of each ring's kick
//! (driver to device) and call (device to driver) notifications. The
//! packets themselves never cross the socket: they move through split
//! virtqueues in the shared memory.
//!
//! # What is here
//!
//! | module | what it holds |
//! |---|---|
//! | [`message`] | the wire format: header, request codes, payload layouts (vring state, vring address, memory table, kick/call u64, config access), feature bits; decoding with every check, encoding |
//! | [`socket`] | sending and receiving one message with up to 8 descriptors, owned as `OwnedFd` the moment they arrive |
//! | [`memory`] | the frontend's memory regions mapped with `mmap`, translated by guest physical or frontend user address with bounds checks |
//! | [`backend`] | [`Backend`]: the device side's state machine (negotiation, memory table, per-ring setup, start and stop, REPLY_ACK) for a data path to build on |
//! | [`frontend`] | [`Frontend`]: the driver side's requests with their replies checked |
//!
//! The requests implemented are those of a net device: features and
//! protocol features, owner, memory table, each ring's size, addresses,
//! base, kick, call, error eventfd and enable, queue count, MTU and RARP.
//! Dirty logging (live migration), the configuration space, in-flight
//! tracking, the backend-to-frontend channel and packed rings are not
//! offered; their requests decode but the backend refuses them with
//! [`VhostUserError::Unsupported`].
//!
//! Everything the peer sends is untrusted: malformed messages, wrong
//! descriptor counts and impossible regions or rings are typed errors,
//! never panics, and descriptors that do not belong are closed.
//!
//! # Example
//!
//! A frontend and a backend over a socket pair, the backend in a thread:
//!
//! ```
//! use std::os::unix::net::UnixStream;
//! use sluice::vhost_user::{Backend, BackendConfig, Frontend, protocol_features};
//!
//! let (front, back) = UnixStream::pair()?;
//! let device = std::thread::spawn(move || {
//!     let mut backend = Backend::new(BackendConfig {
//!         features: 1 << 32, // VIRTIO_F_VERSION_1
//!         protocol_features: protocol_features::MQ | protocol_features::REPLY_ACK,
//!         queue_pairs: 1,
//!     });
//!     backend.serve(&back, &mut ()).map(|()| backend.features())
//! });
//!
//! let mut driver = Frontend::from_stream(front);
//! let offered = driver.get_features()?;
//! assert_ne!(offered & sluice::vhost_user::F_PROTOCOL_FEATURES, 0);
//! driver.set_protocol_features(driver.get_protocol_features()?)?;
//! driver.set_owner()?;
//! driver.set_features(offered)?;
//! assert_eq!(driver.get_queue_num()?, 1);
//! // A size that is not a power of two is refused, and REPLY_ACK says so.
//! assert!(driver.set_vring_num(0, 100).is_err());
//! drop(driver);
//! assert_eq!(device.join().unwrap()?, offered);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod backend;
mod error;
pub(crate) mod event;
pub mod frontend;
pub mod memory;
pub mod message;
pub mod socket;

pub use backend::{Backend, BackendConfig, ReadyVring, VringHandler, VringSetup};
pub use error::VhostUserError;
pub use frontend::Frontend;
pub use memory::{GuestMemory, GuestMemoryRegion};
pub use message::{F_PROTOCOL_FEATURES, Message, Request, protocol_features};
