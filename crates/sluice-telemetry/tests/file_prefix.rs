//! Serving and finding an instance by file prefix, in the runtime
//! directory `RUNTIME_DIRECTORY` names. This binary holds one test, so
//! setting the variable races with no other test.

mod common;

use common::RuntimeDir;
use serde_json::json;
use sluice_telemetry::{Client, Commands, Telemetry, TelemetryError, instances, runtime_dir};

#[test]
fn an_instance_is_served_found_and_refused_twice_by_its_file_prefix() {
    let dir = RuntimeDir::new("prefix");
    // SAFETY: this binary's only test runs here; no other thread reads or
    // writes the environment meanwhile.
    unsafe { std::env::set_var("RUNTIME_DIRECTORY", dir.path()) };
    assert_eq!(runtime_dir(), dir.path());
    assert!(instances().is_empty());

    let server = Telemetry::serve("probe", Commands::new()).unwrap();
    assert_eq!(
        server.path(),
        dir.path().join("dpdk/probe/dpdk_telemetry.v2")
    );
    let mut client = Client::connect("probe").unwrap();
    assert_eq!(client.pid(), Some(std::process::id()));
    assert_eq!(
        client.command("/info").unwrap()["pid"],
        json!(std::process::id())
    );

    let found = instances();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].file_prefix, "probe");
    assert_eq!(found[0].pid, Some(std::process::id()));

    match Telemetry::serve("probe", Commands::new()) {
        Err(TelemetryError::InUse {
            file_prefix, pid, ..
        }) => {
            assert_eq!(
                (file_prefix.as_str(), pid),
                ("probe", Some(std::process::id()))
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Client::connect("other"),
        Err(TelemetryError::Io { .. })
    ));
    drop(client);
    drop(server);
    assert!(instances().is_empty());
}
