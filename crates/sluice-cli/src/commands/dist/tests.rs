//! `sluice dist` in process: placement, defaults, and whole runs on soft
//! ports cabled to the tester (every packet forwarded once and intact,
//! every buffer home).

use super::*;

#[test]
fn placement_leaves_the_main_cpu_when_it_can() {
    assert_eq!(
        Placement::of(&[3]),
        Placement {
            dist: 3,
            workers: vec![3]
        }
    );
    let two = Placement::of(&[0, 1]);
    assert_eq!((two.dist, two.workers.as_slice()), (0, &[1][..]));
    assert_eq!(two.per_core(2), 2);
    let four = Placement::of(&[0, 1, 2, 3]);
    assert_eq!((four.dist, four.workers.as_slice()), (1, &[2, 3][..]));
    assert_eq!((four.per_core(2), four.per_core(3)), (1, 2));
}

#[test]
fn defaults_are_two_soft_ports_on_the_tester() {
    let a = DistArgs::with_specs(vec![]);
    assert_eq!(a.all_specs(), [DEFAULT_SPEC, DEFAULT_SPEC]);
    assert_eq!(tester_names(&a.all_specs()), ["dist"]);
    let specs: Vec<String> = ["soft", "soft:wire=w", "null", "soft:tester=x,flows=4"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(tester_names(&specs), ["t0", "x"]);
    let size = default_pool_size(2, &a);
    assert!((size + 1).is_power_of_two());
    assert!(size as usize >= 2 * 2048 + 384 + api::RETURNS);
}

/// Longest a run that ends at a packet count may take: only a lost packet
/// or a hang reaches it, however loaded the machine is.
const SAFETY_NET_SECS: f64 = 60.0;

/// A run that ends once 2048 packets were received (every flow of both
/// tester streams seen, however slow the machine is), the duration only a
/// safety net.
fn quick(specs: &[&str], api: Api, workers: u16) -> DistArgs {
    let mut a = DistArgs::with_specs(specs.iter().map(|s| s.to_string()).collect());
    a.api = api;
    a.workers = workers;
    a.run.duration = SAFETY_NET_SECS;
    a.packets = Some(2048);
    a.run.stats_period = 10.0;
    a.queues.rxd = 256;
    a.queues.txd = 256;
    a.queues.cache = 32;
    a.run.json = true;
    a
}

/// A run must be right: the tester saw every packet once, in order, intact;
/// the counts agree; the pool is full.
fn assert_right(s: &DistSummary, tester: &str, workers: usize) {
    assert_eq!(s.testers.len(), 1, "{:?}", s.testers);
    let t = &s.testers[0];
    assert_eq!(t.name, tester);
    assert!(t.sent > 0, "{t:?}");
    assert!(s.duration_s < SAFETY_NET_SECS, "2048 packets not received");
    assert_eq!(t.received, t.sent, "{s:#?}");
    assert!(t.clean, "{t:?}");
    assert_eq!(t.foreign, 0, "{t:?}");
    assert!(s.clean && s.counts_match && s.pool_full, "{s:?}");
    assert_eq!(s.drain_accounted, Some(true), "{s:?}");
    assert_eq!(s.rx_packets, t.sent);
    assert_eq!(s.tx_packets, t.sent);
    assert_eq!(s.distributor.tx_refused, 0);
    assert_eq!(s.per_worker.len(), workers);
    let handled: u64 = s.per_worker.iter().map(|w| w.packets).sum();
    assert_eq!(handled, s.distributor.distributed);
    assert_eq!(s.distributor.distributed, s.rx_packets);
    // Every flow of both tester streams, and a share each.
    assert_eq!(s.spread.flows, 2 * 64);
    assert!(s.spread.max_share <= 1.0);
    assert!(s.software_hash_ports.is_empty(), "soft gives the RSS hash");
    assert!(s.ok());
}

#[test]
fn soft_ports_through_the_burst_distributors_lose_nothing() {
    for (api, workers) in [(Api::Burst, 2), (Api::BurstScalar, 3)] {
        let name = format!("dist_unit_{}", api.name());
        let spec = format!("soft:tester={name},gen=udp,flows=64,size=64,device=inline");
        let s = run(&quick(&[&spec, &spec], api, workers)).unwrap();
        assert_eq!(s.api, api);
        assert_right(&s, &name, workers as usize);
        if api == Api::BurstScalar {
            assert_eq!(s.matching, "scalar");
        }
    }
}

#[test]
fn a_packet_bound_ends_the_run_and_the_drain_loses_nothing() {
    let name = "dist_unit_bound";
    let spec = format!("soft:tester={name},gen=udp,flows=64,size=64,device=inline");
    let mut a = quick(&[&spec, &spec], Api::Burst, 1);
    a.run.duration = 30.0;
    a.packets = Some(5000);
    let s = run(&a).unwrap();
    assert!(s.rx_packets >= 5000);
    assert!(s.duration_s < 30.0);
    assert_right(&s, name, 1);
    assert_eq!(s.per_worker[0].share, 1.0);
    assert_eq!(s.spread.tag_moves, 0, "one worker: no flow moves");
}

#[test]
fn ports_without_rss_are_hashed_in_software() {
    let a = quick(&["null", "null"], Api::Burst, 2);
    let s = run(&a).unwrap();
    assert_eq!(s.software_hash_ports, [0, 1]);
    assert!(s.rx_packets > 0);
    assert!(s.counts_match && s.pool_full, "{s:?}");
    assert!(s.testers.is_empty());
    assert_eq!(s.drain_accounted, None, "no tester, no drain to account");
}

#[test]
fn a_drain_that_leaves_frames_unaccounted_for_is_not_clean_and_says_so() {
    let name = "dist_unit_unaccounted";
    let spec = format!("soft:tester={name},gen=udp,flows=64,size=64,device=inline");
    let mut s = run(&quick(&[&spec, &spec], Api::Burst, 1)).unwrap();
    assert_right(&s, name, 1);
    assert!(s.problems().is_empty(), "{:?}", s.problems());
    // The same run had its drain ended with a frame neither received nor
    // counted as a drop.
    s.drain_accounted = Some(false);
    s.clean = is_clean(&s.testers, s.alloc_failures, s.drain_accounted);
    assert!(!s.clean && !s.ok());
    assert_eq!(
        s.problems(),
        ["the drain ended with frames neither received nor counted as a drop"]
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["drain_accounted"], false);
    assert_eq!(json["clean"], false);
    // No verdict from the drain (not every port on a tester): clean as
    // the testers say.
    assert!(is_clean(&s.testers, 0, None));
    assert!(!is_clean(&s.testers, 1, None), "the pool ran dry");
}

#[test]
fn soft_ports_through_the_single_packet_distributor_lose_nothing() {
    let name = "dist_unit_single";
    let spec = format!("soft:tester={name},gen=udp,flows=64,size=64,device=inline");
    let s = run(&quick(&[&spec, &spec], Api::Single, 2)).unwrap();
    assert_eq!(s.api, Api::Single);
    assert_right(&s, name, 2);
}

#[test]
fn a_starved_pool_is_not_clean_and_says_the_pool_ran_dry() {
    let name = "dist_unit_starved";
    let spec = format!("soft:tester={name},gen=udp,flows=64,size=64,device=inline");
    let mut a = quick(&[&spec, &spec], Api::Burst, 1);
    a.queues.pool_size = Some(255);
    a.queues.cache = 0;
    // 255 buffers without a cache cannot keep two 256-descriptor Rx rings
    // posted: the 2048 packets never arrive, and the run ends at its
    // duration instead of the safety net's.
    a.run.duration = 2.0;
    let s = run(&a).unwrap();
    assert!(s.alloc_failures > 0, "{s:?}");
    assert!(!s.clean && !s.ok(), "{s:?}");
    assert!(s.pool_full, "every buffer home all the same");
    let err = run_checked(&a).unwrap_err();
    assert!(
        err.contains("pool ran dry") && err.contains("raise --pool-size"),
        "{err}"
    );
}

#[test]
fn a_runt_and_an_oversize_frame_are_dropped_with_their_reason_when_distributing() {
    let file = crate::app::io::tests::pcap_of("dist_runts", &[5, 60, 2000, 13, 60]);
    let rx = format!("pcap:rx={}", file.display());
    // Ends once port 0 received the file's two good frames (its last).
    let mut a = quick(&[&rx, "null"], Api::Burst, 1);
    a.packets = Some(2);
    let s = run(&a).unwrap();
    std::fs::remove_file(&file).unwrap();
    let p = &s.ports[0];
    let get = |n: &str| p.xstats.iter().find(|(k, _)| k == n).map(|&(_, v)| v);
    assert_eq!(get("rx_runt_errors"), Some(2), "{s:?}");
    assert_eq!(get("rx_oversize_errors"), Some(1), "{s:?}");
    assert_eq!((p.rx_packets, p.rx_errors), (2, 3), "{s:?}");
    assert_eq!(s.ports[1].tx_packets, 2, "{s:?}");
    assert!(s.counts_match && s.pool_full, "{s:?}");
}
