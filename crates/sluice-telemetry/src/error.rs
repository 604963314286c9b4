//! What can go wrong serving or querying a telemetry socket.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// An error of the telemetry server or client.
#[derive(Debug)]
pub enum TelemetryError {
    /// A system call on a socket or the runtime directory failed.
    Io {
        /// What was being done (`binding /var/run/dpdk/x/dpdk_telemetry.v2`).
        what: String,
        /// The system's error.
        source: io::Error,
    },
    /// Another process already serves this file prefix.
    InUse {
        /// The file prefix asked for.
        file_prefix: String,
        /// The socket's path.
        path: PathBuf,
        /// The process serving it, when its greeting said.
        pid: Option<u32>,
    },
    /// The file prefix cannot name a directory (empty, `.`, `..`, a `/` or
    /// a NUL in it).
    BadFilePrefix(String),
    /// The socket's path does not fit a Unix socket address.
    PathTooLong(PathBuf),
    /// The other end spoke something other than the telemetry protocol.
    Protocol(String),
    /// The server answered the command with an error.
    Command {
        /// The command sent (without its parameters).
        command: String,
        /// Why it failed (`null` replies without a reason say "no value").
        message: String,
    },
    /// The other end closed the connection.
    Closed,
}

impl TelemetryError {
    /// An [`Io`](TelemetryError::Io) error saying what was being done.
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> TelemetryError {
        TelemetryError::Io {
            what: what.into(),
            source,
        }
    }

    /// The last OS error, saying what was being done.
    pub(crate) fn last_os(what: impl Into<String>) -> TelemetryError {
        TelemetryError::io(what, io::Error::last_os_error())
    }
}

impl fmt::Display for TelemetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TelemetryError::Io { what, source } => write!(f, "{what}: {source}"),
            TelemetryError::InUse {
                file_prefix,
                path,
                pid,
            } => {
                write!(f, "file prefix '{file_prefix}' is in use: ")?;
                match pid {
                    Some(pid) => write!(f, "process {pid} serves")?,
                    None => write!(f, "another process serves")?,
                }
                write!(
                    f,
                    " {} (pick another --file-prefix, or stop that process)",
                    path.display()
                )
            }
            TelemetryError::BadFilePrefix(p) => write!(
                f,
                "file prefix {p:?} cannot name a directory (it must be non-empty, \
                 not '.' or '..', without '/' or NUL)"
            ),
            TelemetryError::PathTooLong(p) => write!(
                f,
                "telemetry socket path {} is longer than a Unix socket address allows",
                p.display()
            ),
            TelemetryError::Protocol(why) => write!(f, "telemetry protocol error: {why}"),
            TelemetryError::Command { command, message } => write!(f, "{command}: {message}"),
            TelemetryError::Closed => write!(f, "the telemetry server closed the connection"),
        }
    }
}

impl std::error::Error for TelemetryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TelemetryError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
