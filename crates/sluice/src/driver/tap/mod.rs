//! `tap`: a port on a TAP device — frames Sluice sends enter the kernel's
//! network stack as if received on that interface, and frames the kernel
//! sends out of it are what Sluice receives (DPDK's `net_tap`, without its
//! flow rules).
//!
//! Spec: `tap:iface=NAME[,attach=BOOL]`
//! - `iface` (required): the device's name.
//! - `attach` (default false): `false` creates the device, which must not
//!   exist yet, and it goes away with the port (it is not persistent);
//!   `true` attaches to an existing TAP device (made persistent by
//!   `ip tuntap add mode tap multi_queue`, say), which the port leaves as
//!   it found it.
//!
//! The device is opened with `IFF_TAP | IFF_NO_PI` (plain Ethernet frames,
//! no packet-information prefix) and `IFF_MULTI_QUEUE`: one file
//! descriptor per queue, Rx queue `q` and Tx queue `q` sharing descriptor
//! `q`, so the Rx and Tx queue counts must be equal (up to 16). The kernel
//! spreads the frames it sends over the queues by flow. An existing device
//! made without `multi_queue` can be attached with one queue. Descriptors
//! are non-blocking: `rx_burst` reads frames until the device has none
//! (`EAGAIN`), copying each into an mbuf of the queue's pool (a frame
//! longer than the data room counts `rx_errors`); `tx_burst` writes each
//! packet (a chain with one `writev`) and frees it, stopping where the
//! device pushes back (`EAGAIN`); a frame the device refuses (a failed
//! write) counts `tx_errors` and `tx_write_errors`. Every frame is one
//! system call.
//!
//! The device is opened (created) when the port is made, so a name in use
//! or a missing device is an error at open; the port's start sets the
//! device up, best effort (a test may have moved it into another network
//! namespace, where it must be set up there). The port's MAC address is
//! `02:74:61:70:` and the device's index (16 bits): the Sluice end of the
//! wire, not the kernel's interface, which keeps its own address.

mod queue;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use super::netdev::{self, IfReq};
use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxQueue, SpecArgs, TxQueue,
};

use queue::{TapRx, TapTx};

/// Spec keys.
const KEYS: &[&str] = &["iface", "attach"];

/// Most queues (of each direction; the counts are equal).
pub const MAX_QUEUES: u16 = 16;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: i16 = 0x0002;
const IFF_MULTI_QUEUE: i16 = 0x0100;
const IFF_NO_PI: i16 = 0x1000;

/// Opens one queue of TAP device `name` (creating it if it does not exist).
fn open_queue(name: &str, multi: bool) -> io::Result<OwnedFd> {
    // SAFETY: a constant NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut ifr = IfReq::new(name);
    let flags = IFF_TAP | IFF_NO_PI | if multi { IFF_MULTI_QUEUE } else { 0 };
    ifr.data[..2].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `ifr`
    // is, exclusively borrowed for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, std::ptr::from_mut(&mut ifr)) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The `tap` driver.
pub struct TapDriver {
    info: DeviceInfo,
    name: String,
    /// Whether the device takes several queues.
    multi: bool,
    /// One descriptor per queue; the first is opened with the driver (it
    /// makes the device), the others at setup. The device lives while any
    /// is open.
    fds: Vec<Arc<OwnedFd>>,
}

impl TapDriver {
    /// Reads and checks the spec's arguments (the interface name and
    /// `attach`), touching no device.
    pub(crate) fn parse_spec(spec: &PortSpec) -> Result<(&str, bool), PortError> {
        let mut args = SpecArgs::new(spec, KEYS);
        let name = args.require("iface")?;
        let attach = args.bool("attach")?.unwrap_or(false);
        args.finish()?;
        let here = |msg: String| PortError::Driver(format!("port spec '{}': {msg}", spec.as_str()));
        netdev::check_name(name).map_err(here)?;
        Ok((name, attach))
    }

    /// Reads the spec's arguments and opens (or creates) the device.
    pub fn from_spec(spec: &PortSpec) -> Result<TapDriver, PortError> {
        let (name, attach) = Self::parse_spec(spec)?;
        let here = |msg: String| PortError::Driver(format!("port spec '{}': {msg}", spec.as_str()));
        let exists = netdev::index(name).is_some();
        if attach && !exists {
            return Err(here(format!(
                "no network interface '{name}' to attach to (in this network namespace)"
            )));
        }
        if !attach && exists {
            return Err(here(format!(
                "interface '{name}' exists already (attach=true uses an existing TAP device)"
            )));
        }
        let io_err = |e: io::Error| {
            let what = if attach { "attach to" } else { "create" };
            PortError::io(format!("tap: cannot {what} TAP device '{name}'"), e)
        };
        let (first, multi) = match open_queue(name, true) {
            Ok(fd) => (fd, true),
            // An existing single-queue device refuses IFF_MULTI_QUEUE.
            Err(e) if attach && e.raw_os_error() == Some(libc::EINVAL) => {
                (open_queue(name, false).map_err(io_err)?, false)
            }
            Err(e) => return Err(io_err(e)),
        };
        let index = netdev::index(name).unwrap_or(0);
        let [hi, lo] = (index as u16).to_be_bytes();
        Ok(TapDriver {
            info: DeviceInfo {
                driver: "tap",
                max_rx_queues: if multi { MAX_QUEUES } else { 1 },
                max_tx_queues: if multi { MAX_QUEUES } else { 1 },
                nb_rxd: (1, u16::MAX),
                nb_txd: (1, u16::MAX),
                desc_pow2: false,
                max_mtu: 9000,
                rx_offload_capa: Offloads::NONE,
                tx_offload_capa: Offloads::FAST_FREE | Offloads::MULTI_SEG,
                needs_rx_pool: true,
                mac: MacAddr([0x02, 0x74, 0x61, 0x70, hi, lo]),
            },
            name: name.to_owned(),
            multi,
            fds: vec![Arc::new(first)],
        })
    }
}

impl PortDriver for TapDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        let name = &self.name;
        let (nrx, ntx) = (config.rxq.len(), config.txq.len());
        if nrx != ntx {
            return Err(PortError::config(format!(
                "tap: {name}: {nrx} Rx and {ntx} Tx queues asked; a TAP queue is one file \
                 descriptor for both directions, so the counts must be equal"
            )));
        }
        while self.fds.len() < nrx {
            debug_assert!(self.multi, "Port::new checked the queue count");
            let fd = open_queue(name, self.multi)
                .map_err(|e| PortError::io(format!("tap: {name}: queue {}", self.fds.len()), e))?;
            self.fds.push(Arc::new(fd));
        }
        let max_frame = u32::from(config.mtu) + 18;
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::new();
        for q in 0..nrx {
            let pool = config.rx_pool_holding(q, max_frame, &format!("tap: {name}"))?;
            rx.push(Box::new(TapRx::new(
                Arc::clone(&self.fds[q]),
                pool,
                config.port_id,
                config.mtu,
                Arc::clone(counters),
                q,
            )));
        }
        let tx = (0..ntx)
            .map(|q| {
                Box::new(TapTx::new(
                    Arc::clone(&self.fds[q]),
                    Arc::clone(counters),
                    q,
                )) as Box<dyn TxQueue>
            })
            .collect();
        Ok(Queues { rx, tx })
    }

    fn start(&mut self) -> Result<(), PortError> {
        // Best effort: the device may live in another namespace by now.
        let _ = netdev::set_up(&self.name);
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
