//! DPDK's own client, `dpdk-telemetry.py`, reads this server's replies.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::RuntimeDir;
use std::sync::Arc;

use serde_json::{Value, json};
use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::mempool::HugepagePolicy;
use sluice::port::PortConfig;
use sluice_telemetry::{Commands, Registry, Telemetry};

const SCRIPT: &str = "dpdk-telemetry.py";

/// Runs the script with `-f prefix` against the runtime directory `dir`,
/// feeding `input` as its commands; its output lines as JSON.
fn run_script(dir: &RuntimeDir, prefix: &str, input: &str) -> Vec<Value> {
    let mut child = Command::new(SCRIPT)
        .args(["-f", prefix])
        .env("RUNTIME_DIRECTORY", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{SCRIPT} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn dpdk_telemetry_py_reads_every_reply() {
    if !common::have_tool(SCRIPT) {
        return;
    }
    let dir = RuntimeDir::new("script");
    let pool = MbufPool::new(MbufPoolConfig {
        name: "rx".into(),
        size: 255,
        cache_size: 0,
        hugepages: HugepagePolicy::Never,
        ..Default::default()
    })
    .unwrap();
    let mut port =
        sluice::driver::open("null:size=64", PortConfig::new(Some(pool.clone()))).unwrap();
    port.start().unwrap();
    let mut burst: Burst<32> = Burst::new();
    assert_eq!(port.rx_queue(0).unwrap().rx_burst(&mut burst), 32);
    drop(burst);
    let registry = Arc::new(Registry::new());
    registry.add_port(&port);
    registry.add_pool("rx", &pool);
    let mut commands = Commands::with_registry(Arc::clone(&registry));
    commands.register("/test/echo", "Returns its parameters", |params| {
        Ok(json!({ "params": params }))
    });
    let server = Telemetry::serve_at(&dir.socket("scripted"), commands).unwrap();
    let replies = run_script(
        &dir,
        "scripted",
        "/\n/info\n/help,/info\n/test/echo,a,b\n/nope\n/ethdev/list\n/ethdev/stats,0\n\
         /ethdev/xstats,0\n/ethdev/info,0\n/mempool/info,rx\n",
    );
    assert_eq!(replies.len(), 10, "{replies:?}");
    assert_eq!(replies[0]["/"][0], json!("/"));
    assert!(
        replies[0]["/"]
            .as_array()
            .unwrap()
            .contains(&json!("/test/echo"))
    );
    assert_eq!(replies[1]["/info"]["pid"], json!(std::process::id()));
    assert_eq!(replies[1]["/info"]["max_output_len"], json!(16384));
    assert!(replies[2]["/help"]["/info"].is_string());
    assert_eq!(replies[3], json!({"/test/echo": {"params": "a,b"}}));
    assert_eq!(replies[4]["/nope"], Value::Null);
    assert_eq!(replies[5], json!({"/ethdev/list": [0]}));
    assert_eq!(replies[6]["/ethdev/stats"]["ipackets"], json!(32));
    assert_eq!(replies[6]["/ethdev/stats"]["q_ibytes"], json!([32 * 64]));
    assert_eq!(replies[7]["/ethdev/xstats"]["rx_good_packets"], json!(32));
    assert_eq!(replies[8]["/ethdev/info"]["driver_name"], json!("null"));
    assert_eq!(replies[9]["/mempool/info"]["avail_count"], json!(255));
    drop(server);
    registry.clear();
    drop(port);
    assert!(pool.is_full());
}
