//! DPDK's telemetry v2 protocol: limits, command lines and reply encoding.
//!
//! The protocol runs over a Unix `SOCK_SEQPACKET` socket, so every message
//! keeps its boundaries:
//!
//! 1. On connecting, the server sends a greeting object:
//!    `{"version": "...", "pid": N, "max_output_len": 16384}`.
//! 2. Each client message is one command line, `/command[,params]`: the
//!    command starts with `/` and is shorter than [`MAX_CMD_LEN`] bytes; the
//!    whole line is at most [`MAX_INPUT_LEN`] bytes.
//! 3. Each reply is one JSON object keyed by the command (without its
//!    parameters): `{"/ethdev/stats": {...}}`. An unknown command or bad
//!    parameters get `null` under the key, as DPDK answers; this server
//!    adds an `"error"` member saying why, which DPDK's clients ignore.
//!    A reply never exceeds [`MAX_OUTPUT_LEN`] bytes: one that would is
//!    replaced by an error reply, never cut short.

use serde_json::{Map, Value};

/// Commands are shorter than this many bytes (DPDK's `MAX_CMD_LEN`).
pub const MAX_CMD_LEN: usize = 56;
/// The longest command line, parameters included, in bytes (DPDK reads
/// each message into a buffer of this size, less its terminating NUL).
pub const MAX_INPUT_LEN: usize = 1023;
/// The longest reply in bytes, announced in the greeting.
pub const MAX_OUTPUT_LEN: usize = 16 * 1024;
/// The longest error message an error reply carries, in bytes.
pub const MAX_ERROR_LEN: usize = 512;
/// The key of an error reply when the message names no command.
const NO_COMMAND: &str = "none";

/// What a handler answers: the value put under the command's key, or why
/// it has none (bad parameters, say).
pub type Reply = Result<Value, String>;

/// One command line, split at its first comma.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// The command, `/` first (`/ethdev/stats`).
    pub command: &'a str,
    /// What follows the first comma; empty when there is none.
    pub params: &'a str,
}

/// Why a message is not a command line. Each carries the reply key to
/// answer it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest {
    /// The key the error reply goes under (the command as far as it can
    /// be read, at most [`MAX_CMD_LEN`] bytes; `none` when there is none).
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

/// Reads one message as a command line. Trailing newlines, carriage
/// returns and NULs are ignored (clients written in C may send the
/// string's terminator).
pub fn parse(message: &[u8]) -> Result<Request<'_>, BadRequest> {
    let end = message
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r' | 0))
        .map_or(0, |i| i + 1);
    let message = &message[..end];
    let command_bytes = message.split(|&b| b == b',').next().unwrap_or(&[]);
    let key = reply_key(command_bytes);
    let bad = |message: String| BadRequest {
        key: key.clone(),
        message,
    };
    if message.len() > MAX_INPUT_LEN {
        return Err(too_long(message, message.len()));
    }
    let Ok(line) = std::str::from_utf8(message) else {
        return Err(bad("command line is not UTF-8".to_string()));
    };
    let (command, params) = line.split_once(',').unwrap_or((line, ""));
    if !command.starts_with('/') {
        return Err(bad(
            "commands start with '/' (send / to list them)".to_string()
        ));
    }
    if command.len() >= MAX_CMD_LEN {
        return Err(bad(format!(
            "command of {} bytes is longer than {}",
            command.len(),
            MAX_CMD_LEN - 1
        )));
    }
    if let Some(c) = line.chars().find(|c| c.is_control()) {
        return Err(bad(format!(
            "command line holds the control character {c:?}"
        )));
    }
    Ok(Request { command, params })
}

/// Why a message of `len` bytes, starting with `head`, is refused: it is
/// longer than [`MAX_INPUT_LEN`].
pub fn too_long(head: &[u8], len: usize) -> BadRequest {
    let command = head.split(|&b| b == b',').next().unwrap_or(&[]);
    BadRequest {
        key: reply_key(command),
        message: format!("command line of {len} bytes is longer than {MAX_INPUT_LEN}"),
    }
}

/// The key an error reply for a message starting with `command` goes
/// under: the command as text (bytes that are not UTF-8 and control
/// characters dropped), at most [`MAX_CMD_LEN`] bytes of it.
fn reply_key(command: &[u8]) -> String {
    let text = String::from_utf8_lossy(&command[..command.len().min(MAX_CMD_LEN)]);
    let mut text: String = text
        .chars()
        .filter(|&c| !c.is_control() && c != char::REPLACEMENT_CHARACTER)
        .collect();
    let mut cut = text.len().min(MAX_CMD_LEN);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    if text.is_empty() {
        NO_COMMAND.to_string()
    } else {
        text
    }
}

/// The greeting a client receives on connecting.
pub fn greeting(version: &str, pid: u32) -> Value {
    serde_json::json!({
        "version": version,
        "pid": pid,
        "max_output_len": MAX_OUTPUT_LEN,
    })
}

/// The bytes of the reply to `key`: `{"key": value}`, or an error reply
/// `{"key": null, "error": "..."}` when `reply` is an error or the
/// encoded value would exceed [`MAX_OUTPUT_LEN`].
pub fn encode_reply(key: &str, reply: &Reply) -> Vec<u8> {
    match reply {
        Ok(value) => {
            let mut object = Map::new();
            object.insert(key.to_string(), value.clone());
            let bytes = encode(object);
            if bytes.len() <= MAX_OUTPUT_LEN {
                bytes
            } else {
                encode_error(
                    key,
                    &format!(
                        "reply of {} bytes exceeds max_output_len {MAX_OUTPUT_LEN}",
                        bytes.len()
                    ),
                )
            }
        }
        Err(message) => encode_error(key, message),
    }
}

/// The bytes of the error reply `{"key": null, "error": message}`, the
/// message cut to [`MAX_ERROR_LEN`] bytes.
pub fn encode_error(key: &str, message: &str) -> Vec<u8> {
    let mut cut = message.len().min(MAX_ERROR_LEN);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut object = Map::new();
    object.insert(key.to_string(), Value::Null);
    object.insert(
        "error".to_string(),
        Value::String(message[..cut].to_string()),
    );
    encode(object)
}

fn encode(object: Map<String, Value>) -> Vec<u8> {
    // A `Value` with string keys always serializes.
    serde_json::to_vec(&Value::Object(object)).unwrap_or_default()
}

/// The value under `key` in a reply, or the error it carries.
///
/// An error reply of this server (`null` with an `"error"` member) is an
/// `Err` with the message; a bare `null`, as DPDK sends for an unknown
/// command, is too, saying the command has no value.
pub fn decode_reply(key: &str, bytes: &[u8]) -> Result<Value, crate::TelemetryError> {
    use crate::TelemetryError;
    let reply: Value = serde_json::from_slice(bytes)
        .map_err(|e| TelemetryError::Protocol(format!("reply to {key} is not JSON: {e}")))?;
    let Value::Object(mut object) = reply else {
        return Err(TelemetryError::Protocol(format!(
            "reply to {key} is not a JSON object"
        )));
    };
    match object.remove(key) {
        Some(Value::Null) => Err(TelemetryError::Command {
            command: key.to_string(),
            message: match object.remove("error") {
                Some(Value::String(message)) => message,
                _ => "no value (unknown command or bad parameters)".to_string(),
            },
        }),
        Some(value) => Ok(value),
        None => Err(TelemetryError::Protocol(format!(
            "reply to {key} has no member {key:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_splits_at_its_first_comma() {
        let r = parse(b"/ethdev/stats,0").unwrap();
        assert_eq!((r.command, r.params), ("/ethdev/stats", "0"));
        let r = parse(b"/help,/ethdev/info,x\n\0").unwrap();
        assert_eq!((r.command, r.params), ("/help", "/ethdev/info,x"));
        let r = parse(b"/").unwrap();
        assert_eq!((r.command, r.params), ("/", ""));
    }

    #[test]
    fn bad_command_lines_are_named_by_what_can_be_read() {
        let e = parse(b"ethdev").unwrap_err();
        assert_eq!(e.key, "ethdev");
        assert!(e.message.contains("start with '/'"), "{}", e.message);
        assert_eq!(parse(b"").unwrap_err().key, "none");
        assert_eq!(parse(b"\n").unwrap_err().key, "none");
        let e = parse(b"/a\xff\xfe").unwrap_err();
        assert!(e.message.contains("UTF-8"), "{}", e.message);
        assert!(parse(b"/a\tb").unwrap_err().message.contains("control"));
        let long = format!("/{}", "x".repeat(MAX_CMD_LEN - 1));
        let e = parse(long.as_bytes()).unwrap_err();
        assert_eq!(e.key.len(), MAX_CMD_LEN);
        assert!(e.message.contains("longer"), "{}", e.message);
        assert!(parse(&long.as_bytes()[..MAX_CMD_LEN - 1]).is_ok());
        let line = format!("/x,{}", "p".repeat(MAX_INPUT_LEN));
        let e = parse(line.as_bytes()).unwrap_err();
        assert_eq!(e.key, "/x");
        assert!(e.message.contains("command line of"), "{}", e.message);
    }

    #[test]
    fn replies_are_keyed_by_the_command_and_never_cut_short() {
        let ok = encode_reply("/x", &Ok(serde_json::json!([1, 2])));
        assert_eq!(ok, br#"{"/x":[1,2]}"#);
        assert_eq!(decode_reply("/x", &ok).unwrap(), serde_json::json!([1, 2]));

        let err = encode_reply("/x", &Err("no port 9".into()));
        let v: Value = serde_json::from_slice(&err).unwrap();
        assert_eq!(v, serde_json::json!({"/x": null, "error": "no port 9"}));
        let e = decode_reply("/x", &err).unwrap_err();
        assert_eq!(e.to_string(), "/x: no port 9");

        let huge = Ok(Value::String("y".repeat(MAX_OUTPUT_LEN)));
        let bytes = encode_reply("/x", &huge);
        assert!(bytes.len() <= MAX_OUTPUT_LEN);
        let e = decode_reply("/x", &bytes).unwrap_err();
        assert!(e.to_string().contains("exceeds max_output_len"), "{e}");

        let long_error = encode_error("/x", &"é".repeat(MAX_OUTPUT_LEN));
        assert!(long_error.len() < 2 * MAX_ERROR_LEN);
        assert!(serde_json::from_slice::<Value>(&long_error).is_ok());

        assert!(decode_reply("/x", br#"{"/x":null}"#).is_err());
        assert!(decode_reply("/x", br#"{"/y":1}"#).is_err());
        assert!(decode_reply("/x", b"[1]").is_err());
        assert!(decode_reply("/x", b"{").is_err());
    }
}
