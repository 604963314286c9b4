//! Whatever a client sends, the answer is one JSON object within
//! `max_output_len`, keyed by the command as far as it can be read.

use proptest::prelude::*;
use serde_json::Value;
use std::sync::Arc;

use sluice_telemetry::protocol::{MAX_CMD_LEN, MAX_OUTPUT_LEN};
use sluice_telemetry::{Commands, Registry};

fn check(commands: &Commands, message: &[u8]) {
    let reply = commands.answer(message);
    assert!(reply.len() <= MAX_OUTPUT_LEN);
    let value: Value = serde_json::from_slice(&reply).unwrap();
    let object = value.as_object().unwrap();
    let (key, _) = object.iter().next().unwrap();
    assert!(key.len() <= MAX_CMD_LEN, "{key:?}");
    if object.len() == 2 {
        assert_eq!(object[key], Value::Null);
        assert!(object["error"].is_string());
    } else {
        assert_eq!(object.len(), 1);
    }
}

fn commands() -> Commands {
    Commands::with_registry(Arc::new(Registry::new()))
}

proptest! {
    #[test]
    fn any_bytes_get_one_bounded_json_object(message in proptest::collection::vec(any::<u8>(), 0..2048)) {
        check(&commands(), &message);
    }

    #[test]
    fn any_command_line_gets_one_bounded_json_object(
        command in prop_oneof![
            Just("/".to_string()),
            Just("/help".to_string()),
            Just("/ethdev/stats".to_string()),
            Just("/ethdev/xstats".to_string()),
            Just("/mempool/info".to_string()),
            "/[a-z/]{0,70}",
        ],
        params in proptest::option::of("[ -~]{0,1100}"),
    ) {
        let line = match params {
            Some(p) => format!("{command},{p}"),
            None => command,
        };
        check(&commands(), line.as_bytes());
    }
}
