//! Kernel ports end to end, as root: two namespaces A and B whose traffic
//! can only meet through a `sluice l2fwd` — over `afpacket` ports on the
//! root-side ends of two veth pairs, and over two `tap` devices Sluice
//! creates and the test moves into A and B. `ping` from A to B gets its
//! replies, and a 50 MiB TCP transfer arrives with every byte checked.
//! l2fwd rewrites MACs (its default): the destination given for each port
//! is the real MAC of the host behind it.
//!
//! Each test skips with a printed reason where the machine cannot (not
//! root, no `ip`, no namespaces, `ping` missing; under CI as root it
//! fails instead), removes its namespaces and links on the way out (also
//! when it fails), and bounds every wait. Nothing is timed: the checks
//! are replies and bytes.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sluice_netns::{Netns, Proc, Veth};

mod common;
use common::{SLUICE, assert_transfer_counted, fail, spawn, stop};

/// Starts `sluice l2fwd` on `ports` with `--dest-mac` for each, JSON out.
fn l2fwd(ports: &[String], dest: &[String]) -> Proc<'static> {
    let mut args = vec!["l2fwd", "--json", "-T", "5"];
    for port in ports {
        args.extend(["-p", port]);
    }
    for mac in dest {
        args.extend(["--dest-mac", mac]);
    }
    spawn(&args)
}

/// A host: a namespace, its interface and address.
struct Host {
    ns: Netns,
    ifname: String,
    ip: &'static str,
}

impl Host {
    fn configure(&self, mac: Option<&str>) {
        if let Some(mac) = mac {
            self.ns
                .ip(&["link", "set", "dev", &self.ifname, "address", mac])
                .unwrap();
        }
        self.ns
            .add_addr(&self.ifname, &format!("{}/24", self.ip))
            .unwrap();
        self.ns.link_up(&self.ifname).unwrap();
    }
}

/// Pings, then the TCP transfer, A to B; then l2fwd's summary: every
/// buffer home, and the transfer counted on the ports.
fn ping_and_transfer(a: &Host, b: &Host, sluice: Proc<'static>) {
    let sluice = common::ping_and_transfer(&a.ns, &b.ns, b.ip, sluice);
    let (out, summary) = stop(sluice);
    assert_transfer_counted(&summary, &out);
}

#[test]
fn ping_and_tcp_cross_l2fwd_over_afpacket() {
    if sluice_netns::skip_unless_root_with(&["ping", "ethtool"]) {
        return;
    }
    let mk = |tag: &str, ip: &'static str| {
        let ns = Netns::new(tag).unwrap();
        let veth = Veth::into_ns(&ns).unwrap();
        // A packet socket sees frames as the sender's stack leaves them:
        // no 64 KiB TSO frames or checksums left to hardware, please.
        ns.offloads_off(veth.b()).unwrap();
        let host = Host {
            ifname: veth.b().to_owned(),
            ns,
            ip,
        };
        host.configure(None);
        (host, veth)
    };
    let (a, va) = mk("afa", "10.77.0.1");
    let (b, vb) = mk("afb", "10.77.0.2");
    let mac_a = a.ns.mac(&a.ifname).unwrap();
    let mac_b = b.ns.mac(&b.ifname).unwrap();
    // Without Sluice, A and B cannot reach each other.
    let out = a.ns.exec(&["ping", "-c", "1", "-W", "1", b.ip]).unwrap();
    assert!(!out.success(), "{out}");
    let sluice = l2fwd(
        &[
            format!("afpacket:iface={}", va.a()),
            format!("afpacket:iface={}", vb.a()),
        ],
        &[format!("0,{mac_a}"), format!("1,{mac_b}")],
    );
    ping_and_transfer(&a, &b, sluice);
}

/// A TAP name of this process, unused so far (at most 15 bytes).
fn tap_name() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "sltap{:x}c{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[test]
fn ping_and_tcp_cross_l2fwd_over_tap() {
    if sluice_netns::skip_unless_root_with(&["ping"]) {
        return;
    }
    let (t0, t1) = (tap_name(), tap_name());
    let (mac_a, mac_b) = ("02:aa:00:00:00:01", "02:aa:00:00:00:02");
    let a = Host {
        ns: Netns::new("tapa").unwrap(),
        ifname: t0.clone(),
        ip: "10.78.0.1",
    };
    let b = Host {
        ns: Netns::new("tapb").unwrap(),
        ifname: t1.clone(),
        ip: "10.78.0.2",
    };
    // l2fwd creates both TAP devices; the test moves each into its host's
    // namespace, where the kernel routes A's traffic for B into t0 —
    // through Sluice — and out of t1 into B.
    let sluice = l2fwd(
        &[format!("tap:iface={t0}"), format!("tap:iface={t1}")],
        &[format!("0,{mac_a}"), format!("1,{mac_b}")],
    );
    let root = Netns::root();
    let made = sluice_netns::wait_until(Duration::from_secs(60), || {
        root.links()
            .is_ok_and(|l| l.contains(&t0) && l.contains(&t1))
    });
    if !made {
        fail(sluice, "l2fwd did not create its TAP devices");
    }
    root.move_link(&t0, &a.ns).unwrap();
    root.move_link(&t1, &b.ns).unwrap();
    a.configure(Some(mac_a));
    b.configure(Some(mac_b));
    ping_and_transfer(&a, &b, sluice);
    // l2fwd made the devices and took them with it.
    assert!(sluice_netns::wait_until(Duration::from_secs(10), || {
        !a.ns.links().unwrap().contains(&t0) && !b.ns.links().unwrap().contains(&t1)
    }));
}

/// Runs `sluice l2fwd --duration 1` on `ports` (one `-p` each): its
/// standard error; it must fail with exit code 1 and print nothing else.
fn l2fwd_error(ports: &[&str]) -> String {
    let mut argv = vec![SLUICE, "l2fwd", "--duration", "1", "--no-telemetry"];
    for port in ports {
        argv.extend(["-p", port]);
    }
    let out = sluice_netns::exec(&argv, Duration::from_secs(60)).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out}");
    assert!(out.stdout.is_empty(), "{out}");
    out.stderr
}

#[test]
fn bad_kernel_port_specs_are_clear_errors() {
    let cases: [(&[&str], &str); 3] = [
        (
            &["afpacket:iface=sluicenosuch0", "null"],
            "sluice: error: port spec 'afpacket:iface=sluicenosuch0': no network interface \
             'sluicenosuch0' (in this network namespace)\n",
        ),
        (
            &["tap:iface=sluicenosuch0,attach=true", "null"],
            "sluice: error: port spec 'tap:iface=sluicenosuch0,attach=true': no network \
             interface 'sluicenosuch0' to attach to (in this network namespace)\n",
        ),
        (
            &["afpacket:iface=lo,qdisc_bypass=2"],
            "sluice: error: port spec 'afpacket:iface=lo,qdisc_bypass=2': key 'qdisc_bypass' = \
             '2' is not a boolean (1/0, true/false, yes/no, on/off)\n",
        ),
    ];
    for (ports, want) in cases {
        assert_eq!(l2fwd_error(ports), want, "{ports:?}");
    }
}
