//! `sluice` with no command: the demo — two emulated NIC ports cabled to
//! the built-in tester, io forwarding, live stats and a summary.

use crate::app::io;
use crate::app::options::{FwdArgs, ObserveOptions};
use crate::app::output::emit;
use crate::app::summary::require_clean;

/// The ports of the demo, one spec each: two `soft` ports cabled to one
/// tester, the device model on its own thread when there are two CPUs or
/// more (else inline, in the forwarding lcore's calls).
pub fn port_specs(cpus: usize) -> Vec<String> {
    let device = if cpus >= 2 { "threaded" } else { "inline" };
    let spec = format!("soft:tester=demo,gen=udp,flows=1024,size=64,device={device}");
    vec![spec.clone(), spec]
}

/// Tx attempts more in the demo before a packet is dropped: the device
/// thread drains Tx rings in its own time, and the demo shows a lossless
/// pipeline (`sluice fwd` drops after one try by default, as testpmd).
/// About a second of tries (a try on a full ring is a few tens of cycles):
/// a shared host has been seen to leave the device thread's vCPU unrun for
/// longer than the 2^20 tries (about 10 ms) this once was, and the demo lost
/// packets.
const DEMO_TX_RETRY: u32 = 1 << 26;

/// `sluice` with no command: the demo, watched as `observe` says.
pub fn run(observe: &ObserveOptions) -> Result<(), String> {
    let cpus = sluice::lcore::available_cpus().len();
    let specs = port_specs(cpus);
    emit(&format!(
        "Sluice demo: two emulated NIC ports (`soft`) cabled to the built-in tester, io \
         forwarding on one lcore for 5 s, the device model {}.",
        if cpus >= 2 {
            "on its own thread"
        } else {
            "inline (one CPU)"
        }
    ));
    emit(&format!(
        "Same as: sluice fwd --tx-retry {DEMO_TX_RETRY} --port {} --port {}",
        specs[0], specs[1]
    ));
    let mut args = FwdArgs::with_specs(specs);
    args.queues.tx_retry = DEMO_TX_RETRY;
    args.run.observe = observe.for_command("demo");
    require_clean(io::run(&args)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_threads_its_device_with_two_cpus() {
        let one = port_specs(1);
        assert_eq!(one.len(), 2);
        assert!(one[0].ends_with("device=inline"), "{}", one[0]);
        assert!(port_specs(2)[1].ends_with("device=threaded"));
    }
}
