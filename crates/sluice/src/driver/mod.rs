//! Drivers, one folder each, and [`open`], which makes a port from a spec
//! string.
//!
//! A spec string names the driver and its arguments, `driver:key=value,...`
//! (the form of DPDK's virtual device arguments): [`open`] parses it, hands
//! the arguments to the driver, and returns a [`Port`] that is configured
//! and not yet started. [`check_spec`] checks a spec without opening
//! anything, for a command line that wants to fail early. Each driver's
//! module lists its keys.
//!
//! | driver | spec, e.g. | what it is |
//! |---|---|---|
//! | [`afpacket`] | `afpacket:iface=veth0` | a kernel interface through packet sockets: TPACKET_V3 Rx ring, TPACKET_V2 Tx ring, fanout |
//! | [`afxdp`] | `afxdp:iface=veth0,queue=0` | a kernel interface through AF_XDP sockets, the mbuf pool as UMEM, an XDP redirect program |
//! | [`memif`] | `memif:socket=/run/sluice.sock,role=client` | shared-memory rings with another process (VPP, DPDK's `net_memif`, another Sluice), copy mode |
//! | [`null`] | `null:size=64` | Rx makes packets, Tx frees them: the buffer cycle alone |
//! | [`pair`] | `pair:name=p0` | two ports joined by rings: what one end sends, the other receives (zero copy) |
//! | [`pcap`] | `pcap:rx=in.pcap,tx=out.pcap` | packets from and to pcap files (tshark/Wireshark's format) |
//! | [`soft`] | `soft:gen=udp,flows=1024` | the emulated NIC: descriptor rings and a device model, cabled to the tester or another soft port |
//! | [`tap`] | `tap:iface=tap0` | a TAP device: frames to and from the kernel's network stack, one fd per queue |
//! | [`vhost`] | `vhost:path=/tmp/vm0.sock` | a vhost-user backend: the device side of a VM's or container's virtio-net interface |
//! | [`virtio`] | `virtio:path=/tmp/vm0.sock` | a virtio-net driver over vhost-user (as DPDK's `virtio_user`): the frontend, its mbuf pools shared with the backend |
//!
//! A driver implements [`PortDriver`] (the device's control path) and the
//! [`RxQueue`](crate::port::RxQueue) / [`TxQueue`](crate::port::TxQueue)
//! traits (its hot path). Drivers see the port layer, never each other.
//!
//! ```
//! use sluice::driver;
//!
//! assert!(driver::check_spec("pcap:rx=in.pcap,loop=true").is_ok()); // no file is opened
//! let err = driver::check_spec("pcap:loop=true").unwrap_err();
//! assert!(err.to_string().starts_with("port spec 'pcap:loop=true'"), "{err}");
//! ```

pub mod afpacket;
pub mod afxdp;
pub mod memif;
mod netdev;
pub mod null;
pub mod pair;
pub mod pcap;
pub mod soft;
pub mod tap;
pub mod vhost;
pub mod virtio;

use crate::mempool::Sharing;
use crate::port::{DeviceInfo, Port, PortConfig, PortDriver, PortError, PortSpec};

/// The drivers [`open`] knows.
pub const DRIVERS: &[&str] = &[
    "afpacket", "afxdp", "memif", "null", "pair", "pcap", "soft", "tap", "vhost", "virtio",
];

/// Makes a port from a spec string (`null:size=64`, …) and a configuration.
/// The port is not started. Errors name the spec and what is wrong with it:
/// an unknown driver, an unknown key, a bad value, or a configuration the
/// driver cannot take.
///
/// A spec is the driver's name, then its `key=value` arguments after a
/// colon, separated by commas ([`PortSpec`]); each driver's module lists
/// its keys.
///
/// ```
/// use sluice::driver;
/// use sluice::mbuf::{MbufPool, MbufPoolConfig};
/// use sluice::port::PortConfig;
///
/// let pool = MbufPool::new(MbufPoolConfig { size: 1023, ..Default::default() })?;
/// let config = || PortConfig::new(Some(pool.clone()));
///
/// let port = driver::open("null:size=128,copy=true", config())?;
/// assert_eq!(port.name(), "null:size=128,copy=true");
/// assert!(!port.is_started());
/// drop(port);
///
/// // Everything wrong with a spec is an error that names it; nothing panics.
/// let error = |spec: &str| driver::open(spec, config()).unwrap_err().to_string();
/// assert_eq!(
///     error("nul"),
///     "port spec 'nul': unknown driver 'nul' (drivers: afpacket, afxdp, memif, null, pair, pcap, soft, tap, vhost, virtio)"
/// );
/// assert_eq!(
///     error("null:sise=64"),
///     "port spec 'null:sise=64': driver 'null' has no key 'sise' (keys: size, copy)"
/// );
/// assert_eq!(
///     error("null:size=8"),
///     "port spec 'null:size=8': key 'size' = '8' is not a number in 14..=9000"
/// );
/// assert_eq!(error("pair"), "port spec 'pair': driver 'pair' needs key 'name'");
///
/// // So is a configuration the driver cannot take.
/// let err = driver::open("null", config().queues(65, 1)).unwrap_err();
/// assert_eq!(err.to_string(), "port 'null': 65 Rx queues asked, driver null has at most 64");
/// let err = driver::open("null", PortConfig::new(None)).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "port 'null': Rx queue 0: driver null receives into mbufs and no Rx mempool was given"
/// );
/// assert!(pool.is_full());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn open(spec: &str, config: PortConfig) -> Result<Port, PortError> {
    open_with(spec, config, |_, _| {})
}

/// [`open`], with `adjust` shown the driver's [`DeviceInfo`] before the
/// configuration is checked and applied — DPDK's `rte_eth_dev_info_get`
/// before `rte_eth_dev_configure` — so an application can, say, ask for an
/// offload only where the device has it and do the work itself elsewhere.
pub fn open_with(
    spec: &str,
    mut config: PortConfig,
    adjust: impl FnOnce(&DeviceInfo, &mut PortConfig),
) -> Result<Port, PortError> {
    let spec = PortSpec::parse(spec)?;
    let driver: Box<dyn PortDriver> = match spec.driver() {
        "afpacket" => Box::new(afpacket::AfPacketDriver::from_spec(&spec)?),
        "afxdp" => Box::new(afxdp::AfxdpDriver::from_spec(&spec)?),
        "memif" => Box::new(memif::MemifDriver::from_spec(&spec)?),
        "null" => Box::new(null::NullDriver::from_spec(&spec)?),
        "pair" => Box::new(pair::PairDriver::from_spec(&spec)?),
        "pcap" => Box::new(pcap::PcapDriver::from_spec(&spec)?),
        "soft" => Box::new(soft::SoftDriver::from_spec(&spec)?),
        "tap" => Box::new(tap::TapDriver::from_spec(&spec)?),
        "vhost" => Box::new(vhost::VhostDriver::from_spec(&spec)?),
        "virtio" => Box::new(virtio::VirtioDriver::from_spec(&spec)?),
        _ => return Err(spec.unknown_driver(DRIVERS).into()),
    };
    adjust(driver.info(), &mut config);
    Port::new(spec.as_str(), driver, config)
}

/// The memory the Rx pools of ports of these specs must sit in: shared
/// ([`Sharing::Shared`], [`MbufPool::new_shared`](crate::mbuf::MbufPool::new_shared))
/// when any is a `virtio` port, whose backend maps the pool; private
/// otherwise. An application making one pool for several ports asks this
/// first.
///
/// ```
/// use sluice::driver::pool_sharing;
/// use sluice::mempool::Sharing;
///
/// assert_eq!(pool_sharing(["null", "pcap:rx=in.pcap"]), Sharing::Private);
/// assert_eq!(pool_sharing(["null", "virtio:path=/tmp/vm.sock"]), Sharing::Shared);
/// ```
pub fn pool_sharing<S: AsRef<str>>(specs: impl IntoIterator<Item = S>) -> Sharing {
    let shared = specs
        .into_iter()
        .any(|spec| PortSpec::parse(spec.as_ref()).is_ok_and(|s| s.driver() == "virtio"));
    if shared {
        Sharing::Shared
    } else {
        Sharing::Private
    }
}

/// Checks a spec string as [`open`] reads it — the syntax, the driver name,
/// every key and value — and opens nothing: no file is read, no interface
/// looked up or created, no tester, wire or pair joined. [`open`] can still
/// refuse a spec that passes, for what only the system knows (a missing file
/// or interface, a pair or wire whose two ends are taken).
pub fn check_spec(spec: &str) -> Result<PortSpec, PortError> {
    let spec = PortSpec::parse(spec)?;
    match spec.driver() {
        "afpacket" => {
            afpacket::AfPacketDriver::parse_spec(&spec)?;
        }
        "afxdp" => {
            afxdp::AfxdpDriver::parse_spec(&spec)?;
        }
        "memif" => {
            memif::MemifDriver::parse_spec(&spec)?;
        }
        // Reading the arguments is all these two do before setup.
        "null" => {
            null::NullDriver::from_spec(&spec)?;
        }
        "pair" => {
            pair::PairDriver::from_spec(&spec)?;
        }
        "pcap" => {
            pcap::PcapDriver::parse_spec(&spec)?;
        }
        "soft" => {
            soft::SoftDriver::parse_spec(&spec)?;
        }
        "tap" => {
            tap::TapDriver::parse_spec(&spec)?;
        }
        "vhost" => {
            vhost::VhostDriver::parse_spec(&spec)?;
        }
        "virtio" => {
            virtio::VirtioDriver::parse_spec(&spec)?;
        }
        _ => return Err(spec.unknown_driver(DRIVERS).into()),
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> String {
        check_spec(spec).unwrap_err().to_string()
    }

    #[test]
    fn check_spec_reads_every_driver_and_opens_nothing() {
        // No such file, interface or tester is touched: the specs are valid.
        for spec in [
            "null:size=128",
            "pair:name=check_spec_p0",
            "pcap:rx=/nonexistent/in.pcap",
            "soft:gen=udp,flows=4,tester=check_spec_t0",
            "soft:wire=check_spec_w0",
            "tap:iface=nonexistent0",
            "afpacket:iface=nonexistent0,block_size=8192",
            "afxdp:iface=nonexistent0,fill=4096",
            "memif:socket=/nonexistent/memif.sock,role=client,rings=2",
            "vhost:path=/nonexistent/vhost.sock,server=0,queues=2",
            "virtio:path=/nonexistent/vhost.sock,server=1,queues=2",
        ] {
            let s = check_spec(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!(s.as_str(), spec);
        }
        assert!(
            crate::tester::registered()
                .iter()
                .all(|(n, _)| n != "check_spec_t0")
        );
        assert!(open("pcap:rx=/nonexistent/in.pcap", PortConfig::new(None)).is_err());
    }

    #[test]
    fn check_spec_finds_what_open_would_refuse() {
        assert!(err("nul").contains("unknown driver 'nul'"));
        assert!(err("null:size=9001").contains("key 'size' = '9001'"));
        assert!(err("pcap:loop=1").contains("needs key 'rx or tx'"));
        assert!(err("soft:wire=w,gen=udp").contains("exclude each other"));
        assert!(err("soft:rx_free_thresh=48").contains("not a power of two"));
        assert!(err("tap:iface=a/b").contains("may not be"));
        assert!(err("afpacket:iface=x,block_size=5000").contains("a power of two"));
        assert!(err("afxdp:iface=x,fill=3000").contains("not a power of two"));
        assert!(err("afxdp:queue=1").contains("needs key 'iface'"));
        assert!(err("memif:socket=/x,ring_size=3").contains("not a power of two"));
        assert!(err("vhost:server=1").contains("needs key 'path'"));
        assert!(err("vhost:path=s,queues=65").contains("key 'queues'"));
        assert!(err("virtio:queues=2").contains("needs key 'path'"));
        assert!(err("virtio:path=s,queues=0").contains("key 'queues'"));
    }
}
