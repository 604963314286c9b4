//! Why a port operation failed.

use std::fmt;

use super::SpecError;

/// Why a port could not be made, started or used. Every message names the
/// port and the value at fault.
#[derive(Debug)]
pub enum PortError {
    /// The spec string was rejected.
    Spec(SpecError),
    /// The configuration asks for something the driver cannot do (too many
    /// queues, a descriptor count out of range, an unsupported offload, …).
    Config(String),
    /// The port must be stopped for this (it is started).
    Started,
    /// The port must be started for this (it is stopped).
    Stopped,
    /// No queue of that number.
    NoQueue {
        /// `"Rx"` or `"Tx"`.
        dir: &'static str,
        /// The number asked for.
        queue: usize,
        /// Queues of that direction.
        count: usize,
    },
    /// A file or system call failed.
    Io {
        /// What was being done, naming the file or interface.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The queue or driver does not do what was asked (buffer recycling on
    /// a driver without it, say).
    Unsupported(String),
    /// Anything else the driver reports.
    Driver(String),
}

impl PortError {
    /// A configuration error.
    pub fn config(msg: impl Into<String>) -> PortError {
        PortError::Config(msg.into())
    }

    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> PortError {
        PortError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortError::Spec(e) => e.fmt(f),
            PortError::Config(m) | PortError::Unsupported(m) | PortError::Driver(m) => {
                f.write_str(m)
            }
            PortError::Started => f.write_str("the port is started; stop it first"),
            PortError::Stopped => f.write_str("the port is stopped; start it first"),
            PortError::NoQueue { dir, queue, count } => {
                write!(f, "no {dir} queue {queue}: the port has {count}")
            }
            PortError::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for PortError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PortError::Spec(e) => Some(e),
            PortError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<SpecError> for PortError {
    fn from(e: SpecError) -> PortError {
        PortError::Spec(e)
    }
}
