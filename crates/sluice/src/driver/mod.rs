//! Drivers, one folder each, and [`open`], which makes a port from a spec
//! string.
//!
//! A driver implements [`PortDriver`] (the device's
//! control path) and the [`RxQueue`](crate::port::RxQueue) /
//! [`TxQueue`](crate::port::TxQueue) traits (its hot path). Drivers see the
//! port layer, never each other.
//!
//! | driver | what it is |
//! |---|---|
//! | [`afpacket`] | a kernel interface through packet sockets: TPACKET_V3 Rx ring, TPACKET_V2 Tx ring, fanout |
//! | [`afxdp`] | a kernel interface through AF_XDP sockets, the mbuf pool as UMEM, an XDP redirect program |
//! | [`null`] | Rx makes packets, Tx frees them: the buffer cycle alone |
//! | [`pair`] | two ports joined by rings: what one end sends, the other receives (zero copy) |
//! | [`pcap`] | packets from and to pcap files (tshark/Wireshark's format) |
//! | [`soft`] | the emulated NIC: descriptor rings and a device model, cabled to the tester or another soft port |
//! | [`tap`] | a TAP device: frames to and from the kernel's network stack, one fd per queue |

pub mod afpacket;
pub mod afxdp;
mod netdev;
pub mod null;
pub mod pair;
pub mod pcap;
pub mod soft;
pub mod tap;

use crate::port::{DeviceInfo, Port, PortConfig, PortDriver, PortError, PortSpec};

/// The drivers [`open`] knows.
pub const DRIVERS: &[&str] = &["afpacket", "afxdp", "null", "pair", "pcap", "soft", "tap"];

/// Makes a port from a spec string (`null:size=64`, …) and a configuration.
/// The port is not started. Errors name the spec and what is wrong with it:
/// an unknown driver, an unknown key, a bad value, or a configuration the
/// driver cannot take.
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
        "null" => Box::new(null::NullDriver::from_spec(&spec)?),
        "pair" => Box::new(pair::PairDriver::from_spec(&spec)?),
        "pcap" => Box::new(pcap::PcapDriver::from_spec(&spec)?),
        "soft" => Box::new(soft::SoftDriver::from_spec(&spec)?),
        "tap" => Box::new(tap::TapDriver::from_spec(&spec)?),
        _ => return Err(spec.unknown_driver(DRIVERS).into()),
    };
    adjust(driver.info(), &mut config);
    Port::new(spec.as_str(), driver, config)
}
