//! Packet buffer pools: a mempool whose elements are mbufs.

use std::ptr::NonNull;

use super::layout::{HEADER_SIZE, MbufHeader, PORT_NONE, RearmData};
use super::{BurstSlice, Mbuf, MbufError};
use crate::mempool::{
    Elem, HugepagePolicy, Mempool, MempoolConfig, MempoolError, MempoolStats, Sharing,
};

/// Default headroom before the packet data.
pub const DEFAULT_HEADROOM: u16 = 128;
/// Default data room.
pub const DEFAULT_DATA_ROOM: u16 = 2048;

/// How to build an [`MbufPool`].
#[derive(Debug, Clone)]
pub struct MbufPoolConfig {
    /// Name, for statistics and errors.
    pub name: String,
    /// Number of mbufs.
    pub size: u32,
    /// Per-lcore cache size (0 disables).
    pub cache_size: u32,
    /// Bytes reserved before the data of a fresh buffer.
    pub headroom: u16,
    /// Bytes for packet data after the headroom.
    pub data_room: u16,
    /// Whether to use hugepages.
    pub hugepages: HugepagePolicy,
}

impl Default for MbufPoolConfig {
    fn default() -> Self {
        MbufPoolConfig {
            name: "mbuf_pool".into(),
            size: 8191,
            cache_size: 256,
            headroom: DEFAULT_HEADROOM,
            data_room: DEFAULT_DATA_ROOM,
            hugepages: HugepagePolicy::Auto,
        }
    }
}

/// The memory of a shared [`MbufPool`]: a `memfd` mapped, from offset 0,
/// at `base` for `len` bytes in this process.
#[derive(Debug, Clone, Copy)]
pub struct SharedMemory<'a> {
    /// The `memfd`.
    pub fd: std::os::fd::BorrowedFd<'a>,
    /// Where it is mapped in this process.
    pub base: usize,
    /// Its mapped length in bytes.
    pub len: usize,
}

/// A pool of packet buffers. Cheap to clone; `Send` and `Sync`.
///
/// Each element is a 128-byte [`MbufHeader`], then `headroom + data_room`
/// bytes of buffer. The pool is a [`Mempool`] underneath: the buffers sit in
/// one region made at creation, and allocating or freeing one is a get or a
/// put of the mempool (through the current lcore's cache when the thread is
/// an lcore), never a system allocation.
///
/// ```
/// use sluice::mbuf::{MbufPool, MbufPoolConfig};
///
/// let pool = MbufPool::new(MbufPoolConfig {
///     name: "rx".into(),
///     size: 63, // 2^n - 1 fills the free ring exactly
///     cache_size: 0,
///     headroom: 128,
///     data_room: 2048,
///     ..Default::default()
/// })?;
/// assert_eq!((pool.size(), pool.available()), (63, 63));
///
/// // A fresh mbuf is empty, with the configured headroom in front.
/// let m = pool.alloc().unwrap();
/// assert_eq!((m.data_len(), m.headroom(), m.tailroom()), (0, 128, 2048));
/// assert!(pool.owns(&m));
///
/// // An empty pool says so: no panic, no wait.
/// let rest: Vec<_> = std::iter::from_fn(|| pool.alloc()).collect();
/// assert_eq!(rest.len(), 62);
/// assert!(pool.alloc().is_none());
/// assert!(pool.alloc_from_slice(b"frame").is_err());
///
/// // Dropping an mbuf frees it.
/// drop(m);
/// assert_eq!(pool.available(), 1);
/// drop(rest);
/// assert!(pool.is_full());
///
/// // A configuration it cannot build is an error naming the pool and value.
/// let err = MbufPool::new(MbufPoolConfig { data_room: 0, ..Default::default() }).unwrap_err();
/// assert_eq!(err.to_string(), "mbuf pool 'mbuf_pool': data room 0");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct MbufPool {
    pool: Mempool,
    headroom: u16,
    data_room: u16,
    /// The region's start and length, kept here (beside the handle a queue
    /// holds) so an ownership check by address reads no pool line.
    region_base: usize,
    region_len: usize,
}

impl MbufPool {
    /// Builds a pool. Errors name the bad value (zero or oversized rooms, and
    /// everything [`Mempool::new`] checks).
    pub fn new(config: MbufPoolConfig) -> Result<MbufPool, MbufError> {
        Self::with_sharing(config, Sharing::Private)
    }

    /// Builds a pool whose buffers sit in memory another process can map:
    /// a `memfd` mapped `MAP_SHARED` ([`Sharing::Shared`]), on hugepages
    /// when `config.hugepages` allows and some are reserved. A virtio
    /// frontend port hands it to its backend ([`shared_memory`](Self::shared_memory)).
    ///
    /// ```
    /// use sluice::mbuf::{MbufPool, MbufPoolConfig};
    ///
    /// let pool = MbufPool::new_shared(MbufPoolConfig { size: 1023, ..Default::default() })?;
    /// let shared = pool.shared_memory().expect("a shared pool");
    /// let m = pool.alloc().unwrap();
    /// let at = m.data().as_ptr() as usize;
    /// assert!(at >= shared.base && at < shared.base + shared.len);
    /// assert!(MbufPool::new(MbufPoolConfig { size: 1023, ..Default::default() })?
    ///     .shared_memory()
    ///     .is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new_shared(config: MbufPoolConfig) -> Result<MbufPool, MbufError> {
        Self::with_sharing(config, Sharing::Shared)
    }

    /// [`new`](Self::new) or [`new_shared`](Self::new_shared), as `sharing`
    /// says.
    pub fn with_sharing(config: MbufPoolConfig, sharing: Sharing) -> Result<MbufPool, MbufError> {
        let MbufPoolConfig {
            name,
            size,
            cache_size,
            headroom,
            data_room,
            hugepages,
        } = config;
        if data_room == 0 {
            return Err(MbufError::BadConfig(format!(
                "mbuf pool '{name}': data room 0"
            )));
        }
        let buf_len = headroom as u32 + data_room as u32;
        if buf_len > u16::MAX as u32 {
            return Err(MbufError::BadConfig(format!(
                "mbuf pool '{name}': headroom {headroom} + data room {data_room} = {buf_len} \
                 exceeds {}",
                u16::MAX
            )));
        }
        let elt_size = HEADER_SIZE + buf_len as usize;
        // The headers point back at the pool, whose address is known only once
        // it exists: write everything else at init, the pool pointer after.
        let pool = Mempool::with_init_in(
            MempoolConfig {
                name,
                size,
                elt_size,
                cache_size,
                hugepages,
            },
            sharing,
            |_, _| {},
        )
        .map_err(MbufError::Pool)?;
        let inner = pool.inner_ptr().as_ptr().cast_const();
        let base = pool.region().base().as_ptr();
        for i in 0..size as usize {
            // SAFETY: element `i` starts at `base + i * stride` inside the
            // region; no element has been handed out yet.
            let hdr = unsafe { base.add(i * pool.stride()) }.cast::<MbufHeader>();
            // SAFETY: as above; the buffer follows the header in the element.
            let buf = unsafe { hdr.cast::<u8>().add(HEADER_SIZE) };
            let iova = (i * pool.stride() + HEADER_SIZE) as u64;
            MbufHeader::init(hdr, buf, iova, buf_len as u16, headroom, inner);
        }
        let (region_base, region_len) = (base as usize, pool.region().len());
        Ok(MbufPool {
            pool,
            headroom,
            data_room,
            region_base,
            region_len,
        })
    }

    /// Allocates one mbuf, reset: empty data at the default headroom, one
    /// segment, no flags. `None` when the pool is empty.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        let e = self.pool.get()?;
        // SAFETY: a fresh element of this mbuf pool: its header was initialised
        // at creation and restored to the free-buffer invariants on free.
        let mut m = unsafe { Mbuf::from_elem(e) };
        m.reset();
        Some(m)
    }

    /// Allocates an mbuf holding a copy of `data`.
    pub fn alloc_from_slice(&self, data: &[u8]) -> Result<Mbuf, MbufError> {
        let mut m = self
            .alloc()
            .ok_or(MbufError::Pool(MempoolError::Empty { requested: 1 }))?;
        m.append(data.len())?.copy_from_slice(data);
        Ok(m)
    }

    /// Appends `n` reset mbufs to `burst`, all or none.
    #[inline]
    pub fn alloc_bulk(&self, burst: &mut BurstSlice, n: usize) -> Result<(), MbufError> {
        if n > burst.free() {
            return Err(MbufError::BurstFull {
                requested: n,
                free: burst.free(),
            });
        }
        // Straight into the burst's own slots: no intermediate array.
        self.pool
            .get_bulk(burst.spare_slots(n))
            .map_err(MbufError::Pool)?;
        for e in burst.spare_slots(n).iter() {
            // SAFETY: a fresh element of this pool, owned by us and not yet in
            // any handle: exclusive access to its initialised header.
            unsafe { &mut *e.as_ptr().cast::<MbufHeader>() }.reset();
        }
        let len = burst.len() + n;
        // SAFETY: the slots now hold `n` fresh, reset mbufs, owned by the burst.
        unsafe { burst.set_len(len) };
        Ok(())
    }

    /// The rearm word for a fresh buffer of this pool received on `port`.
    pub fn rearm_data(&self, port: u16) -> RearmData {
        RearmData {
            data_off: self.headroom,
            refcnt: 1,
            nb_segs: 1,
            port,
        }
    }

    /// Headroom of a fresh buffer.
    pub fn headroom(&self) -> u16 {
        self.headroom
    }

    /// Data room after the headroom.
    pub fn data_room(&self) -> u16 {
        self.data_room
    }

    /// The start and length of the pool's memory: an element belongs to
    /// this pool if and only if its address lies in it.
    #[inline(always)]
    pub(crate) fn region_range(&self) -> (usize, usize) {
        (self.region_base, self.region_len)
    }

    /// The pool's memory when it is shared ([`new_shared`](Self::new_shared)):
    /// its `memfd`, where it is mapped here and its length; `None` for a
    /// private pool.
    pub fn shared_memory(&self) -> Option<SharedMemory<'_>> {
        let region = self.pool.region();
        region.shared_fd().map(|fd| SharedMemory {
            fd,
            base: self.region_base,
            len: self.region_len,
        })
    }

    /// The underlying mempool.
    pub fn mempool(&self) -> &Mempool {
        &self.pool
    }

    /// Number of mbufs.
    pub fn size(&self) -> u32 {
        self.pool.size()
    }

    /// A snapshot of the pool counters.
    pub fn stats(&self) -> MempoolStats {
        self.pool.stats()
    }

    /// Free mbufs in each lcore's cache: see [`Mempool::cache_counts`].
    pub fn cache_counts(&self) -> Vec<(usize, u32)> {
        self.pool.cache_counts()
    }

    /// True when every mbuf is free.
    pub fn is_full(&self) -> bool {
        self.pool.is_full()
    }

    /// Free mbufs (ring and caches).
    pub fn available(&self) -> u32 {
        self.pool.stats().available
    }

    /// See [`Mempool::flush_local_cache`].
    pub fn flush_local_cache(&self) {
        self.pool.flush_local_cache()
    }

    /// True when `m`'s header belongs to this pool.
    pub fn owns(&self, m: &Mbuf) -> bool {
        self.pool
            .contains(Elem::from_ptr(NonNull::from(m.header()).cast()))
    }
}

impl Mbuf {
    /// Resets an unshared mbuf to an empty single-segment buffer.
    #[inline(always)]
    pub(crate) fn reset(&mut self) {
        self.header_mut().reset();
    }
}

impl MbufHeader {
    /// Resets a header the caller has exclusive access to (a fresh buffer) to
    /// an empty single-segment buffer at the default headroom.
    #[inline(always)]
    pub(crate) fn reset(&mut self) {
        let rearm = RearmData {
            data_off: self.default_headroom,
            refcnt: 1,
            nb_segs: 1,
            port: PORT_NONE,
        };
        self.ol_flags = 0;
        self.packet_type = 0;
        self.pkt_len = 0;
        self.data_len = 0;
        self.vlan_tci = 0;
        self.rss_hash = 0;
        self.vlan_tci_outer = 0;
        self.tx_offload = 0;
        self.rearm(rearm);
    }
}
