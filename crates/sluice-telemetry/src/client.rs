//! A client of DPDK's telemetry v2 socket: connects, reads the greeting,
//! sends command lines and returns the value under each reply's key.
//! It speaks to Sluice and to DPDK applications alike.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::protocol::{self, MAX_INPUT_LEN, MAX_OUTPUT_LEN};
use crate::{TelemetryError, runtime, sys};

/// How long a client waits for a greeting or a reply unless told.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest `max_output_len` a client believes (a greeting asking for
/// more is a protocol error).
const MAX_BELIEVED_OUTPUT_LEN: usize = 16 * 1024 * 1024;
/// The receive buffer for the greeting (DPDK's client reads 1024 bytes).
const GREETING_LEN: usize = 1024;

/// A connection to a telemetry socket.
#[derive(Debug)]
pub struct Client {
    socket: OwnedFd,
    path: PathBuf,
    greeting: Value,
    max_output_len: usize,
}

impl Client {
    /// Connects to the instance with `file_prefix` in this process's
    /// runtime directory.
    pub fn connect(file_prefix: &str) -> Result<Client, TelemetryError> {
        runtime::check_file_prefix(file_prefix)?;
        Client::connect_path(&runtime::socket_path(file_prefix))
    }

    /// Connects to the socket at `path`, waiting up to
    /// [`DEFAULT_TIMEOUT`] for each greeting and reply.
    pub fn connect_path(path: &Path) -> Result<Client, TelemetryError> {
        Client::connect_path_with_timeout(path, DEFAULT_TIMEOUT)
    }

    /// Connects to the socket at `path`, waiting up to `timeout` for each
    /// greeting and reply.
    pub fn connect_path_with_timeout(
        path: &Path,
        timeout: Duration,
    ) -> Result<Client, TelemetryError> {
        let socket = sys::connect(path)?;
        sys::set_timeout(socket.as_fd(), Some(timeout))
            .map_err(|e| TelemetryError::io("setting the telemetry socket's timeout", e))?;
        let mut buf = vec![0u8; GREETING_LEN];
        let n = receive(&socket, &mut buf, "the greeting")?;
        let greeting: Value = serde_json::from_slice(&buf[..n])
            .map_err(|e| TelemetryError::Protocol(format!("greeting is not JSON: {e}")))?;
        let max_output_len = greeting
            .get("max_output_len")
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                TelemetryError::Protocol(format!("greeting has no max_output_len: {greeting}"))
            })?;
        if max_output_len == 0 || max_output_len > MAX_BELIEVED_OUTPUT_LEN as u64 {
            return Err(TelemetryError::Protocol(format!(
                "greeting's max_output_len {max_output_len} is out of range"
            )));
        }
        Ok(Client {
            socket,
            path: path.to_path_buf(),
            greeting,
            max_output_len: max_output_len as usize,
        })
    }

    /// The greeting the server sent (`version`, `pid`, `max_output_len`).
    pub fn greeting(&self) -> &Value {
        &self.greeting
    }

    /// The server's process id, from its greeting.
    pub fn pid(&self) -> Option<u32> {
        self.greeting
            .get("pid")
            .and_then(Value::as_u64)
            .and_then(|p| u32::try_from(p).ok())
    }

    /// The socket connected to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends the command line `cmd` (`/ethdev/stats,0`) and returns the
    /// value under the command's key in the reply. A `null` value (unknown
    /// command, bad parameters) is a [`TelemetryError::Command`] with the
    /// server's reason when it gave one.
    pub fn command(&mut self, cmd: &str) -> Result<Value, TelemetryError> {
        if cmd.len() > MAX_INPUT_LEN {
            return Err(TelemetryError::Command {
                command: cmd.split(',').next().unwrap_or(cmd).to_string(),
                message: format!("command line longer than {MAX_INPUT_LEN} bytes"),
            });
        }
        let key = cmd.split(',').next().unwrap_or(cmd);
        sys::send(self.socket.as_fd(), cmd.as_bytes(), false)
            .map_err(|e| TelemetryError::io(format!("sending {key}"), e))?;
        let mut buf = vec![0u8; self.max_output_len.max(MAX_OUTPUT_LEN)];
        let n = receive(&self.socket, &mut buf, key)?;
        protocol::decode_reply(key, &buf[..n])
    }
}

/// Receives one whole message into `buf`; its length.
fn receive(socket: &OwnedFd, buf: &mut [u8], what: &str) -> Result<usize, TelemetryError> {
    let n = sys::recv(socket.as_fd(), buf)
        .map_err(|e| TelemetryError::io(format!("receiving {what}"), e))?;
    if n == 0 {
        return Err(TelemetryError::Closed);
    }
    if n > buf.len() {
        return Err(TelemetryError::Protocol(format!(
            "{what} of {n} bytes exceeds the {} announced",
            buf.len()
        )));
    }
    Ok(n)
}
