//! The harness's error: a message naming the command or file at fault and
//! what it said.

use std::fmt;

/// What went wrong, in words: the command (or file) and its output.
#[derive(Clone, PartialEq, Eq)]
pub struct Error(pub(crate) String);

/// A harness result.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn new(msg: impl Into<String>) -> Error {
        Error(msg.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// `unwrap()` in a test shows the message as it is, not escaped.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}
