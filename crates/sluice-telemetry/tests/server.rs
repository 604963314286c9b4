//! The telemetry server and client: DPDK's v2 protocol, the socket's
//! lifetime, and clients that misbehave.

mod common;

use std::os::unix::net::UnixListener;

use common::{Raw, RuntimeDir};
use serde_json::{Value, json};
use sluice_telemetry::protocol::{MAX_CMD_LEN, MAX_OUTPUT_LEN};
use sluice_telemetry::runtime::instances_in;
use sluice_telemetry::server::MAX_CLIENTS;
use sluice_telemetry::{Client, Commands, Telemetry, TelemetryError};

fn commands() -> Commands {
    let mut commands = Commands::new();
    commands.register("/test/echo", "Returns its parameters", |params| {
        Ok(Value::from(params))
    });
    commands.register("/test/fail", "Always fails", |_| Err("it fails".into()));
    commands.register("/test/panic", "Panics", |_| panic!("handler panics"));
    commands.register("/test/huge", "Returns too much", |_| {
        Ok(Value::from("z".repeat(MAX_OUTPUT_LEN)))
    });
    commands
}

#[test]
fn the_greeting_and_built_in_commands_follow_dpdk() {
    let dir = RuntimeDir::new("builtin");
    let server = Telemetry::serve_at(&dir.socket("a"), commands()).unwrap();
    let mut client = Client::connect_path(server.path()).unwrap();
    let greeting = client.greeting().clone();
    assert_eq!(greeting["pid"], json!(std::process::id()));
    assert_eq!(greeting["max_output_len"], json!(16384));
    assert!(greeting["version"].as_str().unwrap().starts_with("Sluice "));

    let list = client.command("/").unwrap();
    assert_eq!(
        list,
        json!([
            "/",
            "/help",
            "/info",
            "/test/echo",
            "/test/fail",
            "/test/huge",
            "/test/panic"
        ])
    );
    assert_eq!(client.command("/info").unwrap(), greeting);
    assert_eq!(
        client.command("/help,/test/echo").unwrap(),
        json!({"/test/echo": "Returns its parameters"})
    );
    assert_eq!(client.command("/test/echo,a,b").unwrap(), json!("a,b"));
    assert_eq!(client.command("/test/echo").unwrap(), json!(""));

    for (cmd, why) in [
        ("/help", "give the command"),
        ("/help,/nope", "unknown command /nope"),
        ("/nope", "unknown command /nope"),
        ("/test/fail", "it fails"),
        ("/test/panic", "panicked"),
        ("/test/huge", "exceeds max_output_len"),
    ] {
        match client.command(cmd) {
            Err(TelemetryError::Command { message, .. }) => {
                assert!(message.contains(why), "{cmd}: {message}")
            }
            other => panic!("{cmd}: {other:?}"),
        }
    }
    // Still serving after all of those.
    assert_eq!(client.command("/test/echo,x").unwrap(), json!("x"));
}

#[test]
fn errors_are_null_under_the_command_as_dpdk_answers() {
    let dir = RuntimeDir::new("null");
    let server = Telemetry::serve_at(&dir.socket("a"), commands()).unwrap();
    let (raw, _) = Raw::connect(server.path());
    raw.send(b"/nope,1").unwrap();
    let reply = raw.recv_json();
    assert_eq!(reply["/nope"], Value::Null);
    assert!(reply.as_object().unwrap().contains_key("/nope"));

    raw.send(b"/test/huge").unwrap();
    let bytes = raw.recv();
    assert!(bytes.len() <= MAX_OUTPUT_LEN);
    let reply: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(reply["/test/huge"], Value::Null);
}

#[test]
fn garbage_long_commands_and_huge_messages_get_error_replies() {
    let dir = RuntimeDir::new("garbage");
    let server = Telemetry::serve_at(&dir.socket("a"), commands()).unwrap();
    let (raw, _) = Raw::connect(server.path());

    raw.send(b"\xff\xfe\x00garbage\x01").unwrap();
    let reply = raw.recv_json();
    assert!(reply["error"].is_string(), "{reply}");

    raw.send(b"no slash").unwrap();
    assert_eq!(raw.recv_json()["no slash"], Value::Null);

    let long = format!("/{}", "c".repeat(59));
    assert_eq!(long.len(), 60);
    raw.send(long.as_bytes()).unwrap();
    let reply = raw.recv_json();
    let (key, value) = reply.as_object().unwrap().iter().next().unwrap();
    assert_eq!(key.len(), MAX_CMD_LEN);
    assert!(key.starts_with("/ccc"));
    assert_eq!(value, &Value::Null);
    assert!(reply["error"].as_str().unwrap().contains("longer than 55"));

    // 1 MiB, or the largest message the kernel takes from this socket.
    let mut message = vec![b'/'; 1 << 20];
    message[1..].fill(b'm');
    loop {
        match raw.send(&message) {
            Ok(()) => break,
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) && message.len() > 4096 => {
                message.truncate(message.len() / 2)
            }
            Err(e) => panic!("sending {} bytes: {e}", message.len()),
        }
    }
    let reply = raw.recv_json();
    let error = reply["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("command line of {} bytes", message.len())),
        "{error}"
    );

    raw.send(b"/test/echo,still here").unwrap();
    assert_eq!(raw.recv_json(), json!({"/test/echo": "still here"}));
}

#[test]
fn many_clients_are_served_and_silent_ones_hold_up_no_one() {
    let dir = RuntimeDir::new("many");
    let server = Telemetry::serve_at(&dir.socket("a"), commands()).unwrap();
    let (silent, _) = Raw::connect(server.path());
    let mut clients: Vec<Client> = (1..MAX_CLIENTS)
        .map(|_| Client::connect_path(server.path()).unwrap())
        .collect();
    for round in 0..3 {
        for (i, client) in clients.iter_mut().enumerate() {
            let reply = client.command(&format!("/test/echo,{i}.{round}")).unwrap();
            assert_eq!(reply, json!(format!("{i}.{round}")));
        }
    }
    // The server is full: one more is closed without a greeting.
    match Client::connect_path(server.path()) {
        Err(TelemetryError::Closed) => {}
        other => panic!("a client beyond {MAX_CLIENTS}: {other:?}"),
    }
    drop(silent);
    assert_eq!(clients[0].command("/test/echo,z").unwrap(), json!("z"));
}

#[test]
fn a_client_that_never_reads_is_dropped_and_others_are_served() {
    let dir = RuntimeDir::new("noread");
    let server = Telemetry::serve_at(&dir.socket("a"), commands()).unwrap();
    let (greedy, _) = Raw::connect(server.path());
    let mut other = Client::connect_path(server.path()).unwrap();
    let mut sent = 0u32;
    let refused = loop {
        assert!(sent < 1_000_000, "the server never dropped the client");
        match greedy.send(b"/help,/help") {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(refused.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)),
        "{refused}"
    );
    assert_eq!(other.command("/test/echo,ok").unwrap(), json!("ok"));
}

#[test]
fn a_second_server_for_a_live_prefix_is_refused_and_a_stale_socket_replaced() {
    let dir = RuntimeDir::new("prefix");
    let path = dir.socket("twice");
    let first = Telemetry::serve_at(&path, commands()).unwrap();
    match Telemetry::serve_at(&path, commands()) {
        Err(e @ TelemetryError::InUse { .. }) => {
            let text = e.to_string();
            assert!(text.contains("'twice'"), "{text}");
            assert!(
                text.contains(&format!("process {}", std::process::id())),
                "{text}"
            );
        }
        other => panic!("second server: {other:?}"),
    }
    // The first still serves.
    let mut client = Client::connect_path(&path).unwrap();
    assert_eq!(client.command("/test/echo,1").unwrap(), json!("1"));
    drop(client);
    drop(first);

    // A socket file nobody listens on, as a killed process leaves.
    let stale = dir.socket("stale");
    std::fs::create_dir_all(stale.parent().unwrap()).unwrap();
    drop(UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    assert!(Client::connect_path(&stale).is_err());
    let server = Telemetry::serve_at(&stale, commands()).unwrap();
    let mut client = Client::connect_path(&stale).unwrap();
    assert_eq!(client.command("/test/echo,2").unwrap(), json!("2"));
    drop(server);
}

#[test]
fn instances_are_the_live_sockets_and_drop_removes_the_socket() {
    let dir = RuntimeDir::new("instances");
    assert!(instances_in(dir.path()).is_empty());
    let b = Telemetry::serve_at(&dir.socket("b"), Commands::new()).unwrap();
    let a = Telemetry::serve_at(&dir.socket("a"), Commands::new()).unwrap();
    let stale = dir.socket("gone");
    std::fs::create_dir_all(stale.parent().unwrap()).unwrap();
    drop(UnixListener::bind(&stale).unwrap());

    let found = instances_in(dir.path());
    let prefixes: Vec<&str> = found.iter().map(|i| i.file_prefix.as_str()).collect();
    assert_eq!(prefixes, ["a", "b"]);
    assert!(found.iter().all(|i| i.pid == Some(std::process::id())));
    assert_eq!(found[0].path, a.path());

    let path = b.path().to_path_buf();
    drop(b);
    assert!(!path.exists());
    assert!(
        !path.parent().unwrap().exists(),
        "the empty prefix directory stays"
    );
    assert!(matches!(
        Client::connect_path(&path),
        Err(TelemetryError::Io { .. })
    ));
    let prefixes: Vec<String> = instances_in(dir.path())
        .into_iter()
        .map(|i| i.file_prefix)
        .collect();
    assert_eq!(prefixes, ["a"]);
    drop(a);
    assert!(instances_in(dir.path()).is_empty());
}

#[test]
fn a_bad_file_prefix_is_refused_before_touching_anything() {
    for prefix in ["", "..", "a/b"] {
        match Telemetry::serve(prefix, Commands::new()) {
            Err(TelemetryError::BadFilePrefix(p)) => assert_eq!(p, prefix),
            other => panic!("{prefix:?}: {other:?}"),
        }
        assert!(matches!(
            Client::connect(prefix),
            Err(TelemetryError::BadFilePrefix(_))
        ));
    }
}

#[test]
fn a_path_too_long_for_a_socket_address_is_refused() {
    let dir = RuntimeDir::new("long");
    let path = dir.socket(&"p".repeat(120));
    match Telemetry::serve_at(&path, Commands::new()) {
        Err(TelemetryError::PathTooLong(p)) => assert_eq!(p, path),
        other => panic!("{other:?}"),
    }
}
