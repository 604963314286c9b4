//! DPDK's own client, `dpdk-telemetry.py`, reads this server's replies.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::RuntimeDir;
use serde_json::{Value, json};
use sluice_telemetry::{Commands, Telemetry};

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
    let mut commands = Commands::new();
    commands.register("/test/echo", "Returns its parameters", |params| {
        Ok(json!({ "params": params }))
    });
    let _server = Telemetry::serve_at(&dir.socket("scripted"), commands).unwrap();
    let replies = run_script(
        &dir,
        "scripted",
        "/\n/info\n/help,/info\n/test/echo,a,b\n/nope\n",
    );
    assert_eq!(replies.len(), 5, "{replies:?}");
    assert_eq!(
        replies[0],
        json!({"/": ["/", "/help", "/info", "/test/echo"]})
    );
    assert_eq!(replies[1]["/info"]["pid"], json!(std::process::id()));
    assert_eq!(replies[1]["/info"]["max_output_len"], json!(16384));
    assert!(replies[2]["/help"]["/info"].is_string());
    assert_eq!(replies[3], json!({"/test/echo": {"params": "a,b"}}));
    assert_eq!(replies[4]["/nope"], Value::Null);
}
