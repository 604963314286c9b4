//! The harness itself, as root: namespaces and veth pairs come and go,
//! traffic crosses them, and nothing is left after drop — also after a
//! panic. Each test skips with a printed reason where the machine cannot
//! (under CI as root it fails instead).

use std::time::Duration;

use sluice_netns::{Netns, Veth};

/// The names `ip netns list` shows.
fn netns_list() -> String {
    sluice_netns::exec(&["ip", "netns", "list"], Duration::from_secs(30))
        .unwrap()
        .check()
        .unwrap()
        .stdout
}

/// The links of the root namespace.
fn root_links() -> Vec<String> {
    Netns::root().links().unwrap()
}

/// A veth pair with its `a` end in `left` and its `b` end in `right`.
fn veth_between(left: &Netns, right: &Netns) -> Veth {
    let mut veth = Veth::new().unwrap();
    veth.move_a(left).unwrap();
    veth.move_b(right).unwrap();
    veth
}

#[test]
fn a_namespace_and_its_links_are_gone_after_drop() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let ns = Netns::new("life").unwrap();
    let name = ns.name().to_owned();
    assert!(name.starts_with(&format!("sluice-{}-", std::process::id())));
    assert!(netns_list().contains(&name));
    assert_eq!(ns.links().unwrap(), vec!["lo".to_string()]);
    let veth = Veth::into_ns(&ns).unwrap();
    let (a, b) = (veth.a().to_owned(), veth.b().to_owned());
    assert!(a.len() <= 15 && b.len() <= 15);
    assert!(root_links().contains(&a));
    assert!(!root_links().contains(&b));
    assert!(ns.links().unwrap().contains(&b));
    // The namespace goes first: its links go with it, and the veth's drop
    // finds nothing left to delete.
    drop(ns);
    drop(veth);
    assert!(!netns_list().contains(&name), "{}", netns_list());
    let links = root_links();
    assert!(!links.contains(&a) && !links.contains(&b), "{links:?}");
}

#[test]
fn a_panicking_test_leaves_nothing_behind() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let names = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(|| {
        let ns = Netns::new("panic").unwrap();
        let veth = Veth::new().unwrap();
        *names.lock().unwrap() = Some((
            ns.name().to_owned(),
            veth.a().to_owned(),
            veth.b().to_owned(),
        ));
        panic!("a test fails half way");
    });
    assert!(result.is_err());
    let (ns, a, b) = names.lock().unwrap().take().unwrap();
    assert!(!netns_list().contains(&ns));
    let links = root_links();
    assert!(!links.contains(&a) && !links.contains(&b), "{links:?}");
}

#[test]
fn ping_crosses_a_veth_pair_between_two_namespaces() {
    if sluice_netns::skip_unless_root_with(&["ping"]) {
        return;
    }
    let ns_a = Netns::new("pa").unwrap();
    let ns_b = Netns::new("pb").unwrap();
    let veth = veth_between(&ns_a, &ns_b);
    ns_a.set_mtu(veth.a(), 1400).unwrap();
    ns_b.set_mtu(veth.b(), 1400).unwrap();
    ns_a.add_addr(veth.a(), "10.201.0.1/24").unwrap();
    ns_b.add_addr(veth.b(), "10.201.0.2/24").unwrap();
    let out = ns_a
        .exec(&["ping", "-c", "3", "-i", "0.2", "-W", "5", "10.201.0.2"])
        .unwrap();
    assert!(out.success(), "{out}");
    assert!(out.stdout.contains("3 received"), "{out}");
    // The namespaces are really apart: the root namespace has no route there.
    let root = Netns::root()
        .exec(&["ping", "-c", "1", "-W", "1", "10.201.0.2"])
        .unwrap();
    assert!(!root.success(), "{root}");
    // And the MTU was set where asked.
    let show = ns_a.ip(&["-o", "link", "show", "dev", veth.a()]).unwrap();
    assert!(show.contains("mtu 1400"), "{show}");
}

#[test]
fn routes_carry_traffic_through_a_middle_namespace() {
    if sluice_netns::skip_unless_root_with(&["ping"]) {
        return;
    }
    // a — router — b, the router forwarding between 10.202.1.0/24 and
    // 10.202.2.0/24.
    let ns_a = Netns::new("ra").unwrap();
    let router = Netns::new("rr").unwrap();
    let ns_b = Netns::new("rb").unwrap();
    let left = veth_between(&ns_a, &router);
    let right = veth_between(&router, &ns_b);
    ns_a.add_addr(left.a(), "10.202.1.2/24").unwrap();
    router.add_addr(left.b(), "10.202.1.1/24").unwrap();
    router.add_addr(right.a(), "10.202.2.1/24").unwrap();
    ns_b.add_addr(right.b(), "10.202.2.2/24").unwrap();
    ns_a.add_route("default via 10.202.1.1").unwrap();
    ns_b.add_route("default via 10.202.2.1").unwrap();
    router.sysctl("net.ipv4.ip_forward", "1").unwrap();
    let out = ns_a
        .exec(&["ping", "-c", "2", "-W", "5", "10.202.2.2"])
        .unwrap();
    assert!(out.success(), "{out}");
}

#[test]
fn exec_captures_output_and_status_and_times_out() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let ns = Netns::new("exec").unwrap();
    // Inside, only lo exists.
    let out = ns
        .exec(&["ip", "-o", "link", "show"])
        .unwrap()
        .check()
        .unwrap();
    assert_eq!(out.stdout.lines().count(), 1, "{out}");
    assert!(out.stdout.contains(": lo:"), "{out}");
    let out = ns
        .exec(&["sh", "-c", "echo out; echo err >&2; exit 3"])
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");
    let err = out.check().unwrap_err();
    assert!(
        err.message().contains("exited with exit status: 3"),
        "{err}"
    );
    let err = ns
        .exec_timeout(&["sleep", "30"], Duration::from_millis(200))
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("timed out after 200ms and killed"),
        "{err}"
    );
    let err = ns.exec(&["/nonexistent/cmd"]).unwrap().check().unwrap_err();
    assert!(err.message().contains("/nonexistent/cmd"), "{err}");
}

#[test]
fn a_spawned_process_is_stopped_or_killed() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let ns = Netns::new("spawn").unwrap();
    // SIGINT ends it; its output is kept. The shell makes `ready` once its
    // trap is set: a SIGINT before that would kill it unheard.
    let ready = std::env::temp_dir().join(format!("sluice-netns-trap-{}", std::process::id()));
    let _ = std::fs::remove_file(&ready);
    let script = format!(
        "trap 'echo bye; exit 0' INT; echo hi; : > '{}'; while :; do sleep 0.05; done",
        ready.display()
    );
    let shell = ns.spawn(&["sh", "-c", &script]).unwrap();
    let set = sluice_netns::wait_until(Duration::from_secs(30), || ready.exists());
    let _ = std::fs::remove_file(&ready);
    assert!(set, "the shell did not set its trap within 30 s");
    let out = shell.stop(Duration::from_secs(30)).unwrap();
    assert!(out.success(), "{out}");
    assert_eq!(out.stdout, "hi\nbye\n");
    // Dropping kills and reaps it: the pid is gone.
    let mut sleeper = ns.spawn(&["sleep", "60"]).unwrap();
    assert!(sleeper.is_running());
    let pid = sleeper.id();
    drop(sleeper);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn a_socket_made_in_run_in_lives_in_the_namespace() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let ns = Netns::new("runin").unwrap();
    ns.add_addr("lo", "10.203.0.1/32").unwrap();
    // The address exists only inside: binding to it works there…
    let sock = ns
        .run_in(|| std::net::UdpSocket::bind("10.203.0.1:0"))
        .unwrap()
        .unwrap();
    // …and the socket keeps working from this thread.
    let to = sock.local_addr().unwrap();
    sock.send_to(b"ping", to).unwrap();
    let mut buf = [0u8; 8];
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (n, _) = sock.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"ping");
    // …and not outside.
    assert!(std::net::UdpSocket::bind("10.203.0.1:0").is_err());
    drop(sock);
    // A panic inside comes back out.
    let result = std::panic::catch_unwind(|| ns.run_in(|| panic!("inside")));
    assert!(result.is_err());
}

#[test]
fn macs_parse_and_print() {
    let mac: sluice_netns::Mac = "02:0a:FF:00:00:01".parse().unwrap();
    assert_eq!(mac.0, [2, 0x0a, 0xff, 0, 0, 1]);
    assert_eq!(mac.to_string(), "02:0a:ff:00:00:01");
    assert!("02:0a:ff:00:00".parse::<sluice_netns::Mac>().is_err());
    assert!("02:0a:ff:00:00:01:02".parse::<sluice_netns::Mac>().is_err());
    assert!("zz:0a:ff:00:00:01".parse::<sluice_netns::Mac>().is_err());
    if sluice_netns::skip_unless_root() {
        return;
    }
    let ns = Netns::new("mac").unwrap();
    let veth = Veth::into_ns(&ns).unwrap();
    ns.ip(&[
        "link",
        "set",
        "dev",
        veth.b(),
        "address",
        "02:11:22:33:44:55",
    ])
    .unwrap();
    assert_eq!(ns.mac(veth.b()).unwrap().to_string(), "02:11:22:33:44:55");
    assert!(ns.mac("nosuchlink").is_err());
}

#[test]
fn raw_sockets_carry_frames_intact_across_a_veth_pair() {
    if sluice_netns::skip_unless_root() {
        return;
    }
    let ns_a = Netns::new("rawa").unwrap();
    let ns_b = Netns::new("rawb").unwrap();
    let veth = veth_between(&ns_a, &ns_b);
    let tx = sluice_netns::RawSocket::open(&ns_a, veth.a()).unwrap();
    let rx = sluice_netns::RawSocket::open(&ns_b, veth.b()).unwrap();
    let frame = |i: usize| {
        let mut f = vec![0xff; 6];
        f.extend([0x02, 0, 0, 0, 0, 1, 0x88, 0xb5]);
        f.extend((0..60 + i).map(|k| (k * 7 + i) as u8));
        f
    };
    for i in 0..50 {
        tx.send(&frame(i)).unwrap();
    }
    let got = rx
        .recv_frames(50, Duration::from_secs(10), |f| f[12..14] == [0x88, 0xb5])
        .unwrap();
    assert_eq!(got.len(), 50);
    for (i, f) in got.iter().enumerate() {
        assert_eq!(*f, frame(i), "frame {i}");
    }
    // Nothing of ours comes back on the sending side.
    assert!(
        tx.recv_frames(1, Duration::from_millis(200), |f| f[12..14] == [0x88, 0xb5])
            .unwrap()
            .is_empty()
    );
    assert!(sluice_netns::RawSocket::open(&ns_a, "nosuchlink").is_err());
}
