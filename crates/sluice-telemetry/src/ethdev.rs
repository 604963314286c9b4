//! The `/ethdev/*` commands, answered from a [`Registry`] with DPDK's
//! names and shapes:
//!
//! - `/ethdev/list`: the port ids, `[0, 1]`.
//! - `/ethdev/stats,N`: `ipackets`, `opackets`, `ibytes`, `obytes`,
//!   `imissed`, `ierrors`, `oerrors`, `rx_nombuf`, and per-queue arrays
//!   `q_ipackets`, `q_opackets`, `q_ibytes`, `q_obytes`, `q_errors` (one
//!   entry per configured queue; `q_errors` counts Rx errors).
//! - `/ethdev/xstats,N[,hide_zero=true]`: every counter by name, DPDK's
//!   generic names first (`rx_good_packets`, …, `rx_q0_packets`, …), then
//!   the driver's.
//! - `/ethdev/info,N`: the port's name, driver, state, MTU, MAC address
//!   and queue counts. `state` is what DPDK means by it, the device's slot
//!   state (`RTE_ETH_DEV_ATTACHED`, 1: the device exists), not whether it
//!   forwards: every port in the registry exists, so it is always 1. DPDK's
//!   separate `dev_started` is left out: the registry holds a port's
//!   counters, not the port, and cannot tell when it stops.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::registry::PortEntry;
use crate::server::Commands;
use crate::{Registry, Reply};

/// Registers the `/ethdev/*` commands on `commands`.
pub fn register(commands: &mut Commands, registry: &Arc<Registry>) {
    let r = Arc::clone(registry);
    commands.register("/ethdev/list", "The port ids. No parameters", move |_| {
        Ok(json!(r.ports().iter().map(|p| p.id).collect::<Vec<_>>()))
    });
    let r = Arc::clone(registry);
    commands.register(
        "/ethdev/stats",
        "A port's packet, byte and error counts, in total and per queue. Parameter: port id",
        move |params| Ok(stats(&port(&r, params)?)),
    );
    let r = Arc::clone(registry);
    commands.register(
        "/ethdev/xstats",
        "Every counter of a port by name. Parameters: port id[,hide_zero=true|false]",
        move |params| xstats(&r, params),
    );
    let r = Arc::clone(registry);
    commands.register(
        "/ethdev/info",
        "A port's name, driver, MTU, MAC address and queues. Parameter: port id",
        move |params| Ok(info(&port(&r, params)?)),
    );
}

/// The port named by `params`, a port id alone.
fn port(registry: &Registry, params: &str) -> Result<PortEntry, String> {
    let id = port_id(params)?;
    registry
        .port(id)
        .ok_or_else(|| format!("no port {id} (see /ethdev/list)"))
}

/// Reads a port id.
fn port_id(param: &str) -> Result<u16, String> {
    if param.is_empty() {
        return Err("give a port id: /command,ID (see /ethdev/list)".to_string());
    }
    param
        .parse::<u16>()
        .map_err(|_| format!("port id {param:?} is not a number from 0 to 65535"))
}

/// DPDK's `/ethdev/stats` object.
fn stats(port: &PortEntry) -> Value {
    let s = port.counters.stats();
    json!({
        "ipackets": s.rx_packets,
        "opackets": s.tx_packets,
        "ibytes": s.rx_bytes,
        "obytes": s.tx_bytes,
        "imissed": s.rx_missed,
        "ierrors": s.rx_errors,
        "oerrors": s.tx_errors,
        "rx_nombuf": s.rx_nombuf,
        "q_ipackets": s.rx_queues.iter().map(|q| q.packets).collect::<Vec<_>>(),
        "q_opackets": s.tx_queues.iter().map(|q| q.packets).collect::<Vec<_>>(),
        "q_ibytes": s.rx_queues.iter().map(|q| q.bytes).collect::<Vec<_>>(),
        "q_obytes": s.tx_queues.iter().map(|q| q.bytes).collect::<Vec<_>>(),
        "q_errors": s.rx_queues.iter().map(|q| q.errors).collect::<Vec<_>>(),
    })
}

/// `/ethdev/xstats,N[,hide_zero=true|false]`.
fn xstats(registry: &Registry, params: &str) -> Reply {
    let mut parts = params.split(',');
    let port = port(registry, parts.next().unwrap_or(""))?;
    let mut hide_zero = false;
    for option in parts {
        hide_zero = match option {
            "hide_zero=true" => true,
            "hide_zero=false" => false,
            other => return Err(format!("unknown option {other:?} (hide_zero=true|false)")),
        };
    }
    let mut out = Map::new();
    for (name, value) in port.counters.xstats_snapshot() {
        if !(hide_zero && value == 0) {
            out.insert(name, Value::from(value));
        }
    }
    Ok(Value::Object(out))
}

/// DPDK's `/ethdev/info` fields that a Sluice port has.
fn info(port: &PortEntry) -> Value {
    let mac = port.mac.0;
    let mut info = json!({
        "name": port.name,
        "driver_name": port.driver,
        // DPDK's RTE_ETH_DEV_ATTACHED: the port exists (any registered
        // port does). Not whether it is started (see the module docs).
        "state": 1,
        "port_id": port.id,
        "mtu": port.mtu,
        "mac_addr": format!(
            "{:02X}:{:02X}:{:02X}:{:02X}:{:02X}:{:02X}",
            mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]
        ),
        "nb_rx_queues": port.nb_rx_queues,
        "nb_tx_queues": port.nb_tx_queues,
    });
    if let Some(fault) = port.counters.fault() {
        info["fault"] = Value::from(fault);
    }
    info
}
