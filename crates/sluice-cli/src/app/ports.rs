//! Ports for the commands: opening them from specs, their peers, the
//! testers they are cabled to, and what their drivers can do.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::mbuf::MbufPool;
use sluice::port::{Port, PortConfig, PortCounters, PortError, PortSpec};
use sluice::tester::Tester;

use super::options::FwdArgs;

/// How long a port may take to reach a peer that is already there before
/// it is said to wait for one.
const PEER_GRACE: Duration = Duration::from_millis(200);

/// The peer of port `p` among `n`: 0<->1, 2<->3, an odd last one itself.
pub fn peer(p: usize, n: usize) -> usize {
    let q = p ^ 1;
    if q < n { q } else { p }
}

/// The cycles port `spec`'s device model spent inside the forwarding
/// lcores' queue calls: its `device_cycles` xstat, unless the device runs on
/// its own thread (`device=threaded`), whose cycles are not the lcores'.
pub fn inline_device_cycles(spec: &str, c: &PortCounters) -> u64 {
    if has_threaded_device(spec) {
        0
    } else {
        c.xstats.get("device_cycles").unwrap_or(0)
    }
}

/// Whether port `spec` runs its device model on a device thread.
pub(crate) fn has_threaded_device(spec: &str) -> bool {
    PortSpec::parse(spec).is_ok_and(|s| s.get("device") == Some("threaded"))
}

/// Opens every port with `queues` Rx and Tx queues; if a driver cannot have
/// that many, all are opened again with one (so every port has the same
/// count and each stream's Tx queue exists).
pub(crate) fn open_ports(
    specs: &[String],
    pool: &MbufPool,
    queues: usize,
    args: &FwdArgs,
) -> Result<Vec<Port>, String> {
    match open_all(specs, pool, queues, args) {
        Err(PortError::Config(msg)) if queues > 1 => {
            eprintln!("sluice fwd: {msg}; using one queue per port");
            open_all(specs, pool, 1, args).map_err(|e| e.to_string())
        }
        r => r.map_err(|e| e.to_string()),
    }
}

fn open_all(
    specs: &[String],
    pool: &MbufPool,
    queues: usize,
    args: &FwdArgs,
) -> Result<Vec<Port>, PortError> {
    let mut ports = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let mut config = PortConfig::new(Some(pool.clone()))
            .port_id(i as u16)
            .queues(queues as u16, queues as u16)
            .nb_rxd(args.queues.rxd)
            .nb_txd(args.queues.txd);
        config.burst_stats = args.hist;
        let wanted = args.rx_offloads_if_capable;
        ports.push(sluice::driver::open_with(spec, config, |info, c| {
            c.rx_offloads |= wanted.intersect(info.rx_offload_capa);
        })?);
    }
    Ok(ports)
}

/// Checks that every stream of `ports` can run the `recycle` engine: stream
/// (p, q) recycles from Tx queue q of p's peer into Rx queue q of p, so both
/// must support it. The error names the port, the queue and the driver.
pub fn check_recycle(ports: &[Port]) -> Result<(), String> {
    let n = ports.len();
    for (p, port) in ports.iter().enumerate() {
        let t = peer(p, n);
        for q in 0..port.nb_rx_queues() {
            let sides = [
                ("Rx", p, port.rx_queue_recycles(q)),
                ("Tx", t, ports[t].tx_queue_recycles(q)),
            ];
            for (dir, i, capable) in sides {
                let port = &ports[i];
                match capable {
                    Ok(true) => {}
                    Ok(false) => {
                        return Err(format!(
                            "--engine recycle: port {i} ({}) {dir} queue {q} cannot recycle \
                             buffers: driver '{}' does not support it (soft and afxdp ports do)",
                            port.name(),
                            port.info().driver
                        ));
                    }
                    Err(e) => {
                        return Err(format!("--engine recycle: port {i} ({}): {e}", port.name()));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The testers the ports of `specs` are cabled to: those of `soft` ports
/// without a `wire` (`tester=NAME`, default `t0`).
pub fn tester_names(specs: &[String]) -> Vec<String> {
    let mut names: Vec<String> = specs
        .iter()
        .filter_map(|s| PortSpec::parse(s).ok())
        .filter(|s| s.driver() == "soft" && s.get("wire").is_none())
        .map(|s| s.get("tester").unwrap_or("t0").to_owned())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Whether every port of `specs` is cabled to a tester (so every frame
/// starts and ends at one).
pub(crate) fn all_on_testers(specs: &[String]) -> bool {
    specs
        .iter()
        .all(|spec| tester_names(std::slice::from_ref(spec)).len() == 1)
}

/// The registered testers the ports of `specs` are cabled to (held by the
/// caller, so their reports outlive the ports).
pub(crate) fn cabled_testers(specs: &[String]) -> Vec<(String, Arc<Tester>)> {
    let names = tester_names(specs);
    sluice::tester::registered()
        .into_iter()
        .filter(|(n, _)| names.contains(n))
        .collect()
}

/// Starts every port; the error names the port that failed.
pub(crate) fn start_all(ports: &mut [Port]) -> Result<(), String> {
    for p in ports.iter_mut() {
        p.start()
            .map_err(|e| format!("port {} ({}): {e}", p.id(), p.name()))?;
    }
    Ok(())
}

/// Whether `port` has its peer: a port with a link to another process
/// (memif, vhost: the `link_ups` and `link_downs` xstats) while the link is
/// up; any other port always.
pub fn has_peer(port: &Port) -> bool {
    let xstats = &port.counters().xstats;
    match (xstats.get("link_ups"), xstats.get("link_downs")) {
        (Some(ups), Some(downs)) => ups > downs,
        _ => true,
    }
}

/// Whether `port` ever had its peer during the run (see [`has_peer`]).
pub fn had_peer(port: &Port) -> bool {
    port.counters().xstats.get("link_ups") != Some(0)
}

/// Says on standard error which of `ports` wait for their peer (a memif
/// or vhost port nobody has connected to yet), so a run that moves no
/// packet says why.
pub(crate) fn say_waiting_for_peers(ports: &[Port]) {
    for p in ports.iter().filter(|p| !has_peer(p)) {
        eprintln!("sluice: port {} ({}): waiting for peer", p.id(), p.name());
    }
}

/// Says on standard error which of `ports` never had their peer.
pub(crate) fn say_never_connected(ports: &[Port]) {
    for p in ports.iter().filter(|p| !had_peer(p)) {
        eprintln!("sluice: port {} ({}): no peer connected", p.id(), p.name());
    }
}

/// Waits up to `limit` for `port`'s peer (see [`has_peer`]), saying on
/// standard error that it waits when the peer is not there at once
/// (a memif handshake, a vhost frontend setting up its rings, take a
/// moment); whether the peer came.
pub(crate) fn wait_for_peer(port: &Port, limit: Duration) -> bool {
    let begin = Instant::now();
    let mut said = false;
    while !has_peer(port) {
        let waited = begin.elapsed();
        if waited >= limit {
            return false;
        }
        if !said && waited >= PEER_GRACE {
            say_waiting_for_peers(std::slice::from_ref(port));
            said = true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Takes each port's counters, then stops every port (every buffer goes
/// home): the counters, and the cycles the ports' inline device models
/// spent in the lcores' queue calls (see [`inline_device_cycles`]).
pub(crate) fn stop_all(ports: &mut [Port]) -> (Vec<Arc<PortCounters>>, u64) {
    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
    let device_cycles: u64 = ports
        .iter()
        .zip(&counters)
        .map(|(p, c)| inline_device_cycles(p.name(), c))
        .sum();
    for p in ports.iter_mut() {
        p.stop();
    }
    (counters, device_cycles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_pair_up_and_an_odd_last_one_is_its_own_peer() {
        assert_eq!((0..4).map(|p| peer(p, 4)).collect::<Vec<_>>(), [1, 0, 3, 2]);
        assert_eq!((0..3).map(|p| peer(p, 3)).collect::<Vec<_>>(), [1, 0, 2]);
        assert_eq!(peer(0, 1), 0);
    }

    #[test]
    fn only_an_inline_device_has_its_cycles_subtracted() {
        let c = PortCounters::new(1, 1, false);
        assert_eq!(inline_device_cycles("null", &c), 0);
        c.xstats.register("device_cycles").add(500);
        assert_eq!(inline_device_cycles("soft:device=inline", &c), 500);
        assert_eq!(inline_device_cycles("soft", &c), 500);
        assert_eq!(inline_device_cycles("soft:device=threaded", &c), 0);
    }
}
