//! Packet buffers: the mbuf header, the owned [`Mbuf`] handle, chains,
//! external buffers, the [`MbufPool`] and the [`Burst`].
//!
//! An mbuf is a pool element laid out as a 128-byte [`MbufHeader`] (hot Rx
//! fields in the first cache line, Tx and free fields in the second; see
//! [`layout`]), then the headroom (128 bytes by default), then the data room
//! (2048 bytes by default). The header knows its buffer's address and IO
//! address, so a driver can hand the device `data_iova()` directly.
//!
//! Ownership keeps every buffer accounted for: an [`Mbuf`] owns one
//! reference, a [`Burst`] owns the mbufs in it, and dropping either returns
//! the buffers to their pool through the current lcore's cache. Only
//! `mem::forget` of a handle keeps its buffer out of the pool (it leaks; it
//! is never freed twice).
//!
//! ```
//! use sluice::mbuf::{MbufPool, MbufPoolConfig};
//!
//! let pool = MbufPool::new(MbufPoolConfig { size: 255, cache_size: 0, ..Default::default() }).unwrap();
//! let mut m = pool.alloc_from_slice(b"payload").unwrap();
//! m.prepend(2).unwrap().copy_from_slice(b"hd");
//! assert_eq!(m.data(), b"hdpayload");
//! let copy = m.clone();                 // a second reference, same buffer
//! assert!(m.append(1).is_err());        // shared: no writes
//! drop(copy);
//! m.trim(7).unwrap();
//! assert_eq!(m.data(), b"hd");
//! drop(m);
//! assert!(pool.is_full());
//! ```

mod burst;
mod extbuf;
mod handle;
pub mod layout;
mod pool;

#[cfg(all(test, not(loom)))]
mod tests;

pub use burst::{Burst, BurstSlice, DEFAULT_BURST, DrainFront};
// For drivers: free owned mbufs given as raw addresses, batched per pool;
// put plain buffers of one pool back in one bulk put (fast free).
pub(crate) use burst::free_bulk;
pub use extbuf::{ExtFreeCallback, ExtSharedInfo};
pub(crate) use handle::put_bulk_to_pool;
pub use handle::{Mbuf, Segments};
pub use layout::{HEADER_SIZE, MbufHeader, PORT_NONE, RearmData, TxOffload, ol};
pub use pool::{DEFAULT_DATA_ROOM, DEFAULT_HEADROOM, MbufPool, MbufPoolConfig, SharedMemory};

use crate::mempool::MempoolError;

/// Why an mbuf operation failed. Nothing is lost on error: the buffer (and,
/// for [`Mbuf::chain`], the tail) stays with the caller.
#[derive(Debug)]
pub enum MbufError {
    /// The buffer is shared (a clone exists, or its external buffer is
    /// attached elsewhere), so it cannot be changed.
    Shared,
    /// Not enough headroom.
    NoHeadroom {
        /// Bytes asked for.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Not enough tailroom in the last segment.
    NoTailroom {
        /// Bytes asked for.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Fewer data bytes than asked to remove.
    TooShort {
        /// Bytes asked for.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A chain would exceed 65 535 segments.
    TooManySegments(u32),
    /// A clone would exceed 65 535 references.
    TooManyRefs,
    /// An external buffer is already attached.
    AlreadyAttached,
    /// The burst cannot take that many.
    BurstFull {
        /// Mbufs asked for.
        requested: usize,
        /// Room in the burst.
        free: usize,
    },
    /// The pool could not be built or is empty.
    Pool(MempoolError),
    /// A bad pool configuration.
    BadConfig(String),
}

impl std::fmt::Display for MbufError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MbufError::Shared => write!(f, "mbuf is shared (reference count > 1)"),
            MbufError::NoHeadroom { need, have } => {
                write!(f, "mbuf headroom {have} < {need} bytes asked")
            }
            MbufError::NoTailroom { need, have } => {
                write!(f, "mbuf tailroom {have} < {need} bytes asked")
            }
            MbufError::TooShort { need, have } => {
                write!(f, "mbuf holds {have} bytes, {need} asked to remove")
            }
            MbufError::TooManySegments(n) => write!(f, "mbuf chain of {n} segments (max 65535)"),
            MbufError::TooManyRefs => write!(f, "mbuf reference count would exceed 65535"),
            MbufError::AlreadyAttached => write!(f, "mbuf already has an external buffer"),
            MbufError::BurstFull { requested, free } => {
                write!(f, "burst has room for {free}, {requested} asked")
            }
            MbufError::Pool(e) => write!(f, "{e}"),
            MbufError::BadConfig(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for MbufError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MbufError::Pool(e) => Some(e),
            _ => None,
        }
    }
}
