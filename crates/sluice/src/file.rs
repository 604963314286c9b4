//! Opening the files the dataplane reads (pcap `rx` files, routes files)
//! and naming what a path that is not a regular file is.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

/// Opens `path` for reading without blocking, so a FIFO nobody writes is
/// opened at once rather than waited on for ever; returns the file and
/// what it is. The caller decides which kinds of file it reads.
pub(crate) fn open_read_nonblocking(path: &str) -> io::Result<(File, Metadata)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    Ok((file, meta))
}

/// What kind of file `meta` describes, for messages.
pub(crate) fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}
