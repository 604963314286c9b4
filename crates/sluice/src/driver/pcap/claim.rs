//! Which files the pcap ports of this process have open, so two of them
//! never write one file.
//!
//! Two writers of one file would each count every packet as sent while the
//! file holds their records interleaved or overwritten; a writer of a file
//! another port reads would empty it under the reader. So a file (known by
//! device and inode, whatever path names it) has either one writer or any
//! number of readers, and opening a port that breaks this is an error naming
//! both paths. Character devices (`/dev/null`) hold nothing and are not
//! claimed.

use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::Mutex;

use crate::port::PortError;

/// How a port uses a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// The `rx` file.
    Read,
    /// The `tx` file.
    Write,
}

struct Entry {
    id: u64,
    dev: u64,
    ino: u64,
    how: Use,
    path: String,
}

/// The files claimed, and the next claim's id.
static CLAIMS: Mutex<(Vec<Entry>, u64)> = Mutex::new((Vec::new(), 0));

/// A file held by a port; dropping it lets the file go.
#[derive(Debug)]
pub(crate) struct FileClaim {
    id: u64,
}

impl FileClaim {
    /// Claims the file `meta` describes (opened as `path`) for `how`: an
    /// error if another port writes it, or if `how` is writing and another
    /// port reads it. `None` for a character device.
    pub(crate) fn take(
        meta: &Metadata,
        path: &str,
        how: Use,
    ) -> Result<Option<FileClaim>, PortError> {
        if meta.file_type().is_char_device() {
            return Ok(None);
        }
        let (dev, ino) = (meta.dev(), meta.ino());
        // A panic elsewhere while holding the lock leaves the list whole:
        // every change to it is one push or one remove.
        let mut claims = CLAIMS.lock().unwrap_or_else(|e| e.into_inner());
        let (list, next) = &mut *claims;
        if let Some(other) = list
            .iter()
            .find(|e| e.dev == dev && e.ino == ino && (e.how == Use::Write || how == Use::Write))
        {
            let role = |u: Use| match u {
                Use::Read => "rx",
                Use::Write => "tx",
            };
            return Err(PortError::Driver(format!(
                "{} file '{path}' is the {} file '{}' of a pcap port already open: one file \
                 has one writer, or only readers",
                role(how),
                role(other.how),
                other.path
            )));
        }
        let id = *next;
        *next += 1;
        list.push(Entry {
            id,
            dev,
            ino,
            how,
            path: path.to_owned(),
        });
        Ok(Some(FileClaim { id }))
    }
}

impl Drop for FileClaim {
    fn drop(&mut self) {
        let mut claims = CLAIMS.lock().unwrap_or_else(|e| e.into_inner());
        claims.0.retain(|e| e.id != self.id);
    }
}
