//! `/ethdev/*` and `/mempool/*` answered from a registry of ports that
//! moved packets.

mod common;

use std::sync::Arc;

use common::RuntimeDir;
use serde_json::{Value, json};
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::mempool::HugepagePolicy;
use sluice::port::PortConfig;
use sluice_telemetry::{Client, Commands, Registry, Telemetry, TelemetryError};

const FRAME: u64 = 100;

fn pool() -> MbufPool {
    MbufPool::new(MbufPoolConfig {
        name: "fwd".into(),
        size: 1023,
        cache_size: 0,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap()
}

fn command_error(client: &mut Client, cmd: &str) -> String {
    match client.command(cmd) {
        Err(TelemetryError::Command { message, .. }) => message,
        other => panic!("{cmd}: {other:?}"),
    }
}

#[test]
fn ethdev_and_mempool_commands_show_the_live_counters() {
    let pool = pool();
    let registry = Arc::new(Registry::new());
    let mut ports = Vec::new();
    for id in [1u16, 0] {
        let config = PortConfig::new(Some(pool.clone())).port_id(id).queues(2, 1);
        let mut port = sluice::driver::open(&format!("null:size={FRAME}"), config).unwrap();
        port.start().unwrap();
        registry.add_port(&port);
        ports.push(port);
    }
    registry.add_pool("fwd", &pool);
    let dir = RuntimeDir::new("commands");
    let server = Telemetry::serve_at(
        &dir.socket("c"),
        Commands::with_registry(Arc::clone(&registry)),
    )
    .unwrap();
    let mut client = Client::connect_path(server.path()).unwrap();

    // Port 0 receives 8 on queue 0 and 5 on queue 1, sends 8; 5 stay held.
    let port = &mut ports[1];
    let mut sent: Burst<8> = Burst::new();
    let mut held: Burst<5> = Burst::new();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut sent), 8);
    assert_eq!(port.rx_queue(1).unwrap().rx_burst(&mut held), 5);
    assert_eq!(port.tx_queue(0).unwrap().tx_burst(&mut sent), 8);

    let names = client.command("/").unwrap();
    for name in [
        "/ethdev/list",
        "/ethdev/stats",
        "/ethdev/xstats",
        "/ethdev/info",
        "/mempool/list",
        "/mempool/info",
    ] {
        assert!(names.as_array().unwrap().contains(&json!(name)), "{name}");
    }
    assert_eq!(client.command("/ethdev/list").unwrap(), json!([0, 1]));

    let stats = client.command("/ethdev/stats,0").unwrap();
    assert_eq!(
        stats,
        json!({
            "ipackets": 13, "opackets": 8, "ibytes": 13 * FRAME, "obytes": 8 * FRAME,
            "imissed": 0, "ierrors": 0, "oerrors": 0, "rx_nombuf": 0,
            "q_ipackets": [8, 5], "q_opackets": [8],
            "q_ibytes": [8 * FRAME, 5 * FRAME], "q_obytes": [8 * FRAME],
            "q_errors": [0, 0],
        })
    );
    let idle = client.command("/ethdev/stats,1").unwrap();
    assert_eq!(idle["ipackets"], json!(0));

    let xstats = client.command("/ethdev/xstats,0").unwrap();
    let xstats = xstats.as_object().unwrap();
    let first: Vec<&str> = xstats.keys().take(8).map(String::as_str).collect();
    assert_eq!(
        first,
        [
            "rx_good_packets",
            "tx_good_packets",
            "rx_good_bytes",
            "tx_good_bytes",
            "rx_missed_errors",
            "rx_errors",
            "tx_errors",
            "rx_mbuf_allocation_errors",
        ]
    );
    assert_eq!(xstats["rx_good_packets"], json!(13));
    assert_eq!(xstats["rx_q1_packets"], json!(5));
    assert_eq!(xstats["tx_q0_bytes"], json!(8 * FRAME));
    let nonzero = client.command("/ethdev/xstats,0,hide_zero=true").unwrap();
    let nonzero = nonzero.as_object().unwrap();
    assert!(nonzero.values().all(|v| v != &json!(0)), "{nonzero:?}");
    assert!(nonzero.contains_key("rx_q0_packets") && !nonzero.contains_key("rx_errors"));

    let info = client.command("/ethdev/info,0").unwrap();
    assert_eq!(info["port_id"], json!(0));
    assert_eq!(info["driver_name"], json!("null"));
    // DPDK's device state: attached. Whether it is started is not claimed.
    assert_eq!(info["state"], json!(1));
    assert!(info.get("dev_started").is_none(), "{info}");
    assert_eq!(info["name"], json!(format!("null:size={FRAME}")));
    assert_eq!(
        (info["nb_rx_queues"].clone(), info["nb_tx_queues"].clone()),
        (json!(2), json!(1))
    );
    assert_eq!(
        info["mac_addr"],
        json!(ports[1].mac().to_string().to_uppercase())
    );
    assert!(info["mtu"].as_u64().unwrap() >= 1500);

    assert_eq!(client.command("/mempool/list").unwrap(), json!(["fwd"]));
    let mempool = client.command("/mempool/info,fwd").unwrap();
    assert_eq!(mempool["name"], json!("fwd"));
    assert_eq!(mempool["size"], json!(1023));
    assert_eq!(mempool["populated_size"], json!(1023));
    assert_eq!(mempool["cache_size"], json!(0));
    assert_eq!(mempool["avail_count"], json!(1023 - 5));
    assert_eq!(mempool["in_use_count"], json!(5));
    assert_eq!(mempool["backing"], json!("anonymous"));
    assert!(mempool["elt_size"].as_u64().unwrap() > 2048);

    for (cmd, why) in [
        ("/ethdev/stats", "give a port id"),
        ("/ethdev/stats,x", "not a number"),
        ("/ethdev/stats,70000", "not a number"),
        ("/ethdev/stats,7", "no port 7"),
        ("/ethdev/info,-1", "not a number"),
        ("/ethdev/xstats,0,hide_zero=maybe", "unknown option"),
        ("/mempool/info", "give a pool name"),
        ("/mempool/info,nope", "no pool \"nope\""),
    ] {
        let message = command_error(&mut client, cmd);
        assert!(message.contains(why), "{cmd}: {message}");
    }

    drop(held);
    let mempool = client.command("/mempool/info,fwd").unwrap();
    assert_eq!(mempool["in_use_count"], json!(0));
    drop(client);
    drop(server);
    registry.clear();
    drop(ports);
    assert!(pool.is_full());
}

#[test]
fn an_empty_registry_lists_nothing() {
    let dir = RuntimeDir::new("empty");
    let server = Telemetry::serve_at(
        &dir.socket("e"),
        Commands::with_registry(Arc::new(Registry::new())),
    )
    .unwrap();
    let mut client = Client::connect_path(server.path()).unwrap();
    assert_eq!(client.command("/ethdev/list").unwrap(), json!([]));
    assert_eq!(client.command("/mempool/list").unwrap(), json!([]));
    assert!(command_error(&mut client, "/ethdev/stats,0").contains("no port 0"));
    assert_eq!(
        client.command("/help,/ethdev/stats").unwrap()["/ethdev/stats"],
        Value::from(
            "A port's packet, byte and error counts, in total and per queue. Parameter: port id"
        )
    );
}
