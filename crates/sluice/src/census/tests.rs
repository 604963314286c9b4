use std::sync::Barrier;

use super::*;
use crate::driver::open;
use crate::mbuf::Burst;
use crate::port::PortConfig;
use crate::test_support::{TestPool, assert_pool_full};

/// Every field but `size`, added up.
fn total(c: &PoolCensus) -> u64 {
    c.free()
        + c.rx_posted.iter().map(|r| r.2).sum::<u64>()
        + c.tx_waiting.iter().map(|t| t.2).sum::<u64>()
        + c.in_flight.iter().map(|f| f.1).sum::<u64>()
        + c.held_by_app
}

fn started(spec: &str, config: PortConfig) -> Port {
    let mut p = open(spec, config).unwrap();
    p.start().unwrap();
    p
}

/// Sends what `burst` holds on `port`'s queue 0; what it refuses is freed.
fn send(port: &mut Port, burst: &mut Burst<32>) {
    port.tx_queue(0).unwrap().tx_burst(burst);
    burst.clear();
}

#[test]
fn a_census_taken_from_another_thread_while_an_lcore_forwards_adds_up_to_the_pool() {
    let pool = TestPool::new(2047).cache_size(64).build();
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(256).nb_txd(256);
    let mut a = started("soft:tester=census-mid,flows=32", config.clone());
    let mut b = started("soft:tester=census-mid", config.port_id(1));
    let census = Census::new().pool("fwd", &pool).port(&a).port(&b);
    // The lcore stops at each pause between bursts; the main thread counts
    // while it waits, then lets it go on. Nothing is asserted until both
    // are done, so a failure cannot leave one waiting for the other.
    let paused = Barrier::new(2);
    let resume = Barrier::new(2);
    const PAUSES: usize = 4;
    let mut counts = Vec::new();
    let held = std::thread::scope(|s| {
        let (a, b, paused, resume) = (&mut a, &mut b, &paused, &resume);
        let pool = &pool;
        let lcore = s.spawn(move || {
            let _lcore = crate::lcore::register();
            let mut burst: Burst<32> = Burst::new();
            let mut held = Vec::new();
            for _ in 0..PAUSES {
                for _ in 0..25 {
                    a.rx_queue(0).unwrap().rx_burst(&mut burst);
                    send(b, &mut burst);
                    b.rx_queue(0).unwrap().rx_burst(&mut burst);
                    send(a, &mut burst);
                }
                // Holding a received burst: the application's buffers.
                a.rx_queue(0).unwrap().rx_burst(&mut burst);
                held.push(burst.len() as u64);
                // One buffer through the lcore's cache leaves some there.
                drop(pool.alloc());
                paused.wait();
                resume.wait();
                burst.clear();
            }
            // Stopped, with this lcore's cache still holding buffers.
            a.stop();
            b.stop();
            drop(pool.alloc());
            paused.wait();
            resume.wait();
            held
        });
        for _ in 0..=PAUSES {
            paused.wait();
            counts.push(census.take().remove(0));
            resume.wait();
        }
        lcore.join().unwrap()
    });
    let (running, stopped) = counts.split_at(PAUSES);
    for (c, &app) in running.iter().zip(&held) {
        assert_eq!(total(c), 2047, "{c}");
        assert_eq!(c.held_by_app, app, "{c}");
        assert_eq!((c.rx_posted.len(), c.tx_waiting.len()), (2, 2), "{c}");
        // Refills come in batches: a ring may be short of a batch or two.
        let posted: u64 = c.rx_posted.iter().map(|r| r.2).sum();
        assert!(posted > 256 && posted <= 2 * 256, "{c}");
        assert!(!c.in_caches.is_empty(), "the lcore's cache: {c}");
    }
    let c = &stopped[0];
    assert_eq!(c.free(), 2047, "{c}");
    assert!(!c.in_caches.is_empty(), "the lcore's cache: {c}");
    assert_eq!(c.held_by_app, 0, "{c}");
    assert!(c.out_of_pool().is_empty(), "{c}");
    // The lcore ended: its cache went to the ring.
    let c = &census.take()[0];
    assert_eq!((c.in_ring, c.in_caches.len()), (2047, 0), "{c}");
    drop((a, b));
    assert_pool_full(&pool);
}

#[test]
fn in_flight_places_count_and_held_by_app_saturates_at_0() {
    let pool = TestPool::new(255).build();
    let other = TestPool::new(127).build();
    let census = Census::new()
        .pool("main", &pool)
        .pool("other", &other)
        .in_flight("main", "ring", || 5)
        .in_flight("other", "distributor", || 1000)
        .in_flight("absent", "nowhere", || 1);
    let mut held: Burst<32> = Burst::new();
    pool.alloc_bulk(&mut held, 10).unwrap();
    let counts = census.take();
    assert_eq!(counts.len(), 2);
    let (main, second) = (&counts[0], &counts[1]);
    assert_eq!(main.in_flight, vec![("ring".to_string(), 5)]);
    // 10 out, 5 of them said to be in the ring.
    assert_eq!((main.in_ring, main.held_by_app), (245, 5));
    assert_eq!(
        main.out_of_pool(),
        vec![("ring".to_string(), 5), ("application".to_string(), 5)]
    );
    // More counted than the pool has: nothing left for the application.
    assert_eq!((second.name.as_str(), second.held_by_app), ("other", 0));
    let text = main.to_string();
    assert!(text.starts_with("pool main: 255 buffers"), "{text}");
    assert!(text.contains("in flight    5 (ring 5)"), "{text}");
    assert!(text.contains("held by app  5"), "{text}");
    drop(held);
    assert_pool_full(&pool);
    assert_pool_full(&other);
}

#[test]
fn a_port_counts_in_the_pool_it_receives_into_and_not_in_another() {
    let pool = TestPool::new(1023).build();
    let other = TestPool::new(255).build();
    let config = PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64);
    let mut a = started("soft:tester=census-pools", config.clone());
    let census = Census::new()
        .pool("other", &other)
        .pool("rx", &pool)
        .port(&a);
    let counts = census.take();
    assert!(counts[0].rx_posted.is_empty() && counts[0].tx_waiting.is_empty());
    assert_eq!(counts[0].free(), 255);
    assert_eq!(counts[1].rx_posted, vec![(0, 0, 64)]);
    assert_eq!(counts[1].tx_waiting, vec![(0, 0, 0)]);
    assert_eq!(total(&counts[1]), 1023);
    a.stop();
    assert_eq!(census.take()[1].rx_posted, vec![(0, 0, 0)]);
    drop(a);
    assert_pool_full(&pool);
    assert_pool_full(&other);
}
