//! [`TesterReport`]: what a tester sent and what came back.

use std::fmt;

/// A tester's counts (see [`Tester::report`](super::Tester::report)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TesterReport {
    /// Frames written by generators and not cancelled.
    pub sent: u64,
    /// Unique valid frames checked (reordered ones included, duplicates not).
    pub received: u64,
    /// `sent - received` (0 when more came back): meaningful once every frame
    /// in flight has been checked or dropped.
    pub lost: u64,
    /// Received frames whose sequence number was below the highest already
    /// seen in their flow.
    pub reordered: u64,
    /// Valid frames seen before.
    pub duplicates: u64,
    /// Tester frames that failed a check (stamp, headers, IPv4 header
    /// checksum, L4 checksum, length, payload).
    pub corrupt: u64,
    /// Frames that are not this tester's: not tester frames at all, or
    /// valid frames of another tester's streams.
    pub foreign: u64,
    /// Bytes of the frames in `sent`.
    pub bytes_sent: u64,
    /// Bytes of the frames in `received`.
    pub bytes_received: u64,
    /// Fills refused because the buffer was shorter than the frame.
    pub short_buffers: u64,
}

impl TesterReport {
    /// True when nothing was lost, reordered, duplicated or corrupted.
    pub fn is_clean(&self) -> bool {
        self.lost == 0 && self.reordered == 0 && self.duplicates == 0 && self.corrupt == 0
    }
}

impl fmt::Display for TesterReport {
    /// One line that says each number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent {} ({} B), received {} ({} B), lost {}, reordered {}, duplicates {}, \
             corrupt {}, foreign {}, short buffers {}",
            self.sent,
            self.bytes_sent,
            self.received,
            self.bytes_received,
            self.lost,
            self.reordered,
            self.duplicates,
            self.corrupt,
            self.foreign,
            self.short_buffers
        )
    }
}
