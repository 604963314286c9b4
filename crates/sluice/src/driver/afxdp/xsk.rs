//! One AF_XDP socket: created, given its UMEM and ring sizes, its four
//! rings mapped at the kernel's offsets, bound to an interface queue — and,
//! at the end, unmapped, closed and waited for until the kernel has let go
//! of the queue.
//!
//! # Opening
//! `socket(AF_XDP)`, `XDP_UMEM_REG` (the pool's region, unaligned chunks,
//! see [`umem`](super::umem)), the fill, completion, Rx and Tx ring sizes,
//! `XDP_MMAP_OFFSETS`, one `mmap` per ring, then `bind` to (interface,
//! queue) with `XDP_COPY` or `XDP_ZEROCOPY` and `XDP_USE_NEED_WAKEUP`. A
//! queue whose previous socket was closed moments ago answers `EBUSY` until
//! the kernel's deferred release has run (a few milliseconds): the bind is
//! retried for up to [`BIND_RETRY`].
//!
//! # Closing
//! The rings are unmapped first (each mapping holds a reference to the
//! socket, which would keep it alive), then the fd is closed. The kernel
//! stops writing into the UMEM when the socket is unbound, but lets go of
//! the queue — and, in zero-copy mode, stops the device's DMA into the
//! frames — only in a deferred work item; a copy of the fd held for a moment
//! by a forked child also keeps the socket bound. So after closing,
//! [`Socket::close`] waits until a *probe* socket (a one-page UMEM) can bind
//! to the same queue: then nothing of the old socket is left, and the frames
//! the kernel held may go back to the pool.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::ring::{ConsRing, ProdRing, RingPtrs};
use super::umem::{Ledger, Umem};
use crate::driver::netdev::wake_tx;
use crate::sync::{AtomicU32, UnsafeCell};

/// How long a bind keeps retrying while the queue is busy.
pub(crate) const BIND_RETRY: Duration = Duration::from_secs(2);

/// How long [`Socket::close`] waits for the kernel to let go of the queue.
pub(crate) const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// An Rx or Tx descriptor (`struct xdp_desc`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Desc {
    /// UMEM address (unaligned mode: chunk offset | data offset << 48).
    pub addr: u64,
    /// Frame length.
    pub len: u32,
    /// Option bits (`XDP_PKT_CONTD` for multi-buffer frames; unused).
    pub options: u32,
}

/// How to bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// `XDP_COPY`: the kernel copies frames into and out of the UMEM.
    Copy,
    /// `XDP_ZEROCOPY`: the device reads and writes the UMEM itself; an
    /// error where the driver cannot.
    ZeroCopy,
    /// Zero-copy where the driver can, else copy.
    Auto,
}

/// What a socket is opened with.
#[derive(Debug, Clone)]
pub(crate) struct SocketConfig {
    /// How messages name the socket: the port and queue.
    pub what: String,
    /// The interface's name, for messages.
    pub ifname: String,
    /// The interface.
    pub ifindex: u32,
    /// The interface queue bound to.
    pub queue_id: u32,
    /// Ring sizes (powers of two).
    pub rx_size: u32,
    pub tx_size: u32,
    pub fill_size: u32,
    pub comp_size: u32,
    /// Copy, zero-copy or either.
    pub bind: BindMode,
    /// Bind with `XDP_USE_NEED_WAKEUP`.
    pub need_wakeup: bool,
    /// The UMEM.
    pub umem: Umem,
}

/// The fill and Rx rings and what the kernel holds through them: the Rx
/// queue's half of a socket.
pub(crate) struct RxRings {
    pub fill: ProdRing<u64>,
    pub rx: ConsRing<Desc>,
    /// Frames given on the fill ring and not yet back on the Rx ring.
    pub ledger: Ledger,
    /// The socket, to wake the kernel (`recvfrom`).
    pub fd: RawFd,
}

/// The Tx and completion rings and the frames in flight: the Tx queue's
/// half of a socket.
pub(crate) struct TxRings {
    pub tx: ProdRing<Desc>,
    pub comp: ConsRing<u64>,
    /// Frames put on the Tx ring and not yet back on the completion ring.
    pub ledger: Ledger,
    /// The socket, to wake the kernel (`sendto`).
    pub fd: RawFd,
}

/// One ring mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a mapping is plain shared memory; who touches which word is the
// ring protocol's business.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping `mmap` made; the ring ends pointing
        // into it are gone (the socket is closed only when both halves are
        // back, see `QueueSlot`).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// An open, bound AF_XDP socket.
pub(crate) struct Socket {
    /// The ring mappings: dropped before `fd` (field order), as each holds
    /// a reference to the socket.
    maps: Vec<Mapping>,
    fd: OwnedFd,
    /// The bind got zero-copy.
    zerocopy: bool,
}

/// A system call's error with what was being done.
fn os_err(what: impl std::fmt::Display) -> std::io::Error {
    let e = std::io::Error::last_os_error();
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// `setsockopt(fd, SOL_XDP, opt, v)`.
fn set_opt<T>(fd: RawFd, opt: i32, v: &T) -> Result<(), i32> {
    // SAFETY: `v` is valid for `size_of::<T>()` bytes, which the kernel
    // reads.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }
}

/// `getsockopt(fd, SOL_XDP, opt)` into a zeroed `T`.
fn get_opt<T: Default>(fd: RawFd, opt: i32) -> std::io::Result<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as u32;
    // SAFETY: `v` has room for `len` bytes; the kernel writes at most that
    // and updates `len`.
    let r =
        unsafe { libc::getsockopt(fd, libc::SOL_XDP, opt, (&mut v as *mut T).cast(), &mut len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(v)
}

/// `struct xdp_umem_reg` (with `flags` and `tx_metadata_len`).
#[repr(C)]
#[derive(Default)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Default, Debug)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// The kernel's XDP statistics of a socket (`struct xdp_statistics`), in
/// the order of [`STAT_NAMES`].
pub(crate) type Stats = [u64; 6];

/// The names of the [`Stats`] fields, as xstats.
pub(crate) const STAT_NAMES: [&str; 6] = [
    "rx_dropped",
    "rx_invalid_descs",
    "tx_invalid_descs",
    "rx_ring_full",
    "rx_fill_ring_empty_descs",
    "tx_ring_empty_descs",
];

/// `bind` in mode `flags`, retried while the queue is busy; the errno.
fn bind(fd: RawFd, ifindex: u32, queue_id: u32, flags: u16) -> Result<(), i32> {
    let addr = SockaddrXdp {
        family: libc::AF_XDP as u16,
        flags,
        ifindex,
        queue_id,
        shared_umem_fd: 0,
    };
    let end = Instant::now() + BIND_RETRY;
    let mut pause = Duration::from_millis(1);
    loop {
        // SAFETY: `addr` is a valid `sockaddr_xdp` of the size given.
        let r = unsafe {
            libc::bind(
                fd,
                (&addr as *const SockaddrXdp).cast(),
                std::mem::size_of::<SockaddrXdp>() as u32,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if errno != libc::EBUSY || Instant::now() >= end {
            return Err(errno);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// A new AF_XDP socket.
fn new_socket() -> std::io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(os_err("socket(AF_XDP)"));
    }
    // SAFETY: a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Maps one ring: `len` bytes at page offset `pgoff`.
fn map_ring(fd: RawFd, len: usize, pgoff: u64, name: &str) -> std::io::Result<Mapping> {
    // SAFETY: a shared mapping of the socket's ring at the offset the ABI
    // defines for it; the kernel checks the length against the ring.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            pgoff as libc::off_t,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(os_err(format!("mmap of the {name} ring ({len} bytes)")));
    }
    Ok(Mapping {
        ptr: ptr.cast(),
        len,
    })
}

/// The ring in `m` laid out as `off` says, of `size` entries.
fn ring_ptrs<T>(m: &Mapping, off: &RingOffset, size: u32) -> RingPtrs<T> {
    let at = |o: u64| m.ptr.wrapping_add(o as usize);
    RingPtrs {
        producer: at(off.producer).cast::<AtomicU32>(),
        consumer: at(off.consumer).cast::<AtomicU32>(),
        flags: at(off.flags).cast::<AtomicU32>(),
        entries: at(off.desc).cast::<UnsafeCell<T>>(),
        size,
    }
}

/// Why a socket could not be opened: an I/O error with the step, or a
/// message to give as it is.
pub(crate) enum OpenError {
    /// A step failed.
    Io(std::io::Error),
    /// A configuration the kernel or device refuses, explained.
    Config(String),
}

impl Socket {
    /// Opens and binds a socket for `cfg`, and returns its two halves.
    pub(crate) fn open(cfg: &SocketConfig) -> Result<(Socket, RxRings, TxRings), OpenError> {
        let fd = new_socket().map_err(OpenError::Io)?;
        let raw = fd.as_raw_fd();
        let umem = &cfg.umem;
        let reg = UmemReg {
            addr: umem.base() as u64,
            len: umem.len(),
            chunk_size: umem.chunk_size(),
            headroom: umem.headroom(),
            flags: libc::XDP_UMEM_UNALIGNED_CHUNK_FLAG,
            tx_metadata_len: 0,
        };
        if let Err(e) = set_opt(raw, libc::XDP_UMEM_REG, &reg) {
            let what = format!("{}: the UMEM", cfg.what);
            if e == libc::ENOBUFS {
                return Err(OpenError::Config(super::memlock::enobufs(
                    &what,
                    umem.len(),
                )));
            }
            return Err(OpenError::Io(std::io::Error::new(
                std::io::Error::from_raw_os_error(e).kind(),
                format!(
                    "XDP_UMEM_REG ({} bytes, chunks of {}): {}",
                    umem.len(),
                    umem.chunk_size(),
                    std::io::Error::from_raw_os_error(e)
                ),
            )));
        }
        for (opt, size, name) in [
            (libc::XDP_UMEM_FILL_RING, cfg.fill_size, "fill"),
            (libc::XDP_UMEM_COMPLETION_RING, cfg.comp_size, "completion"),
            (libc::XDP_RX_RING, cfg.rx_size, "Rx"),
            (libc::XDP_TX_RING, cfg.tx_size, "Tx"),
        ] {
            set_opt(raw, opt, &size).map_err(|e| {
                OpenError::Io(std::io::Error::new(
                    std::io::Error::from_raw_os_error(e).kind(),
                    format!(
                        "{name} ring of {size} entries: {}",
                        std::io::Error::from_raw_os_error(e)
                    ),
                ))
            })?;
        }
        let off: MmapOffsets = get_opt(raw, libc::XDP_MMAP_OFFSETS).map_err(|e| {
            OpenError::Io(std::io::Error::new(
                e.kind(),
                format!("XDP_MMAP_OFFSETS: {e}"),
            ))
        })?;
        let desc = std::mem::size_of::<Desc>() as u64;
        let maps = vec![
            map_ring(
                raw,
                (off.fr.desc + cfg.fill_size as u64 * 8) as usize,
                libc::XDP_UMEM_PGOFF_FILL_RING,
                "fill",
            ),
            map_ring(
                raw,
                (off.rx.desc + cfg.rx_size as u64 * desc) as usize,
                libc::XDP_PGOFF_RX_RING as u64,
                "Rx",
            ),
            map_ring(
                raw,
                (off.tx.desc + cfg.tx_size as u64 * desc) as usize,
                libc::XDP_PGOFF_TX_RING as u64,
                "Tx",
            ),
            map_ring(
                raw,
                (off.cr.desc + cfg.comp_size as u64 * 8) as usize,
                libc::XDP_UMEM_PGOFF_COMPLETION_RING,
                "completion",
            ),
        ]
        .into_iter()
        .collect::<std::io::Result<Vec<Mapping>>>()
        .map_err(OpenError::Io)?;

        let wake = if cfg.need_wakeup {
            libc::XDP_USE_NEED_WAKEUP
        } else {
            0
        };
        let zerocopy = match cfg.bind {
            BindMode::Copy => {
                Self::bind_or_explain(cfg, raw, libc::XDP_COPY | wake)?;
                false
            }
            BindMode::ZeroCopy => {
                Self::bind_or_explain(cfg, raw, libc::XDP_ZEROCOPY | wake)?;
                true
            }
            BindMode::Auto => match bind(raw, cfg.ifindex, cfg.queue_id, libc::XDP_ZEROCOPY | wake)
            {
                Ok(()) => true,
                Err(libc::EOPNOTSUPP) | Err(libc::EINVAL) => {
                    Self::bind_or_explain(cfg, raw, libc::XDP_COPY | wake)?;
                    false
                }
                Err(e) => return Err(Self::explain_bind(cfg, e, libc::XDP_ZEROCOPY)),
            },
        };

        // Each mapping holds one ring laid out as `off` says with the size
        // set above; the mappings live in the `Socket`, which the slot keeps
        // until both halves are back.
        // SAFETY: valid, live ring memory (above); one user-space end each.
        let (fill, rx, tx, comp) = unsafe {
            (
                ProdRing::new(ring_ptrs::<u64>(&maps[0], &off.fr, cfg.fill_size)),
                ConsRing::new(ring_ptrs::<Desc>(&maps[1], &off.rx, cfg.rx_size)),
                ProdRing::new(ring_ptrs::<Desc>(&maps[2], &off.tx, cfg.tx_size)),
                ConsRing::new(ring_ptrs::<u64>(&maps[3], &off.cr, cfg.comp_size)),
            )
        };
        let frames = umem.frames();
        let rx_half = RxRings {
            fill,
            rx,
            ledger: Ledger::new(frames),
            fd: raw,
        };
        let tx_half = TxRings {
            tx,
            comp,
            ledger: Ledger::new(frames),
            fd: raw,
        };
        Ok((Socket { maps, fd, zerocopy }, rx_half, tx_half))
    }

    /// Binds in mode `flags` or explains why not.
    fn bind_or_explain(cfg: &SocketConfig, fd: RawFd, flags: u16) -> Result<(), OpenError> {
        bind(fd, cfg.ifindex, cfg.queue_id, flags).map_err(|e| Self::explain_bind(cfg, e, flags))
    }

    /// The error of a bind that failed with `errno`.
    fn explain_bind(cfg: &SocketConfig, errno: i32, flags: u16) -> OpenError {
        let (ifname, q) = (&cfg.ifname, cfg.queue_id);
        let zc = flags & libc::XDP_ZEROCOPY != 0;
        let msg = match errno {
            libc::EOPNOTSUPP if zc => format!(
                "{}: {ifname} cannot bind queue {q} in zero-copy mode (its driver has no AF_XDP \
                 zero-copy support); use bind=copy or bind=auto",
                cfg.what
            ),
            libc::EBUSY => format!(
                "{}: queue {q} of {ifname} is busy: another AF_XDP socket is bound to it (still \
                 busy after {} s)",
                cfg.what,
                BIND_RETRY.as_secs()
            ),
            libc::ENODEV | libc::ENXIO => {
                format!("{}: interface {ifname} is gone", cfg.what)
            }
            _ => {
                return OpenError::Io(std::io::Error::new(
                    std::io::Error::from_raw_os_error(errno).kind(),
                    format!(
                        "bind to {ifname} queue {q} ({} mode): {}",
                        if zc { "zero-copy" } else { "copy" },
                        std::io::Error::from_raw_os_error(errno)
                    ),
                ));
            }
        };
        OpenError::Config(msg)
    }

    /// The socket's fd (for the XSKMAP).
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether the bind got zero-copy.
    pub(crate) fn zerocopy(&self) -> bool {
        self.zerocopy
    }

    /// The kernel's statistics of this socket.
    pub(crate) fn stats(&self) -> std::io::Result<Stats> {
        let s: Stats = get_opt(self.fd.as_raw_fd(), libc::XDP_STATISTICS)?;
        Ok(s)
    }

    /// Unmaps the rings, closes the socket and waits until the kernel has
    /// let go of queue `queue_id` of `ifindex` (module docs); false if it
    /// had not after [`RELEASE_WAIT`].
    pub(crate) fn close(self, ifindex: u32, queue_id: u32) -> bool {
        let Socket { maps, fd, .. } = self;
        drop(maps);
        drop(fd);
        let end = Instant::now() + RELEASE_WAIT;
        let mut pause = Duration::from_millis(1);
        loop {
            match probe(ifindex, queue_id) {
                Probe::Free => return true,
                Probe::Unknown => {
                    // The probe itself could not run (no memlock room, say):
                    // allow the deferred release its usual time.
                    std::thread::sleep(Duration::from_millis(50));
                    return true;
                }
                Probe::Busy if Instant::now() >= end => return false,
                Probe::Busy => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
            }
        }
    }
}

/// What a probe bind found.
enum Probe {
    /// The queue is free: no socket is bound to it.
    Free,
    /// A socket is still bound.
    Busy,
    /// The probe could not tell.
    Unknown,
}

/// Tries to bind a throwaway socket (a one-page UMEM, copy mode) to queue
/// `queue_id` of `ifindex`.
fn probe(ifindex: u32, queue_id: u32) -> Probe {
    // SAFETY: sysconf(3) has no memory-safety preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => 4096,
    };
    let Ok(fd) = new_socket() else {
        return Probe::Unknown;
    };
    // SAFETY: an anonymous private mapping of one page.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if mem == libc::MAP_FAILED {
        return Probe::Unknown;
    }
    let mem = Mapping {
        ptr: mem.cast(),
        len: page,
    };
    let raw = fd.as_raw_fd();
    let reg = UmemReg {
        addr: mem.ptr as u64,
        len: page as u64,
        chunk_size: 2048,
        ..Default::default()
    };
    let two = 2u32;
    let ready = set_opt(raw, libc::XDP_UMEM_REG, &reg).is_ok()
        && set_opt(raw, libc::XDP_UMEM_FILL_RING, &two).is_ok()
        && set_opt(raw, libc::XDP_UMEM_COMPLETION_RING, &two).is_ok()
        && set_opt(raw, libc::XDP_RX_RING, &two).is_ok();
    if !ready {
        return Probe::Unknown;
    }
    let addr = SockaddrXdp {
        family: libc::AF_XDP as u16,
        flags: libc::XDP_COPY,
        ifindex,
        queue_id,
        shared_umem_fd: 0,
    };
    // SAFETY: a valid `sockaddr_xdp` of the size given.
    let r = unsafe {
        libc::bind(
            raw,
            (&addr as *const SockaddrXdp).cast(),
            std::mem::size_of::<SockaddrXdp>() as u32,
        )
    };
    let errno = std::io::Error::last_os_error().raw_os_error();
    drop(fd);
    drop(mem);
    match (r, errno) {
        (0, _) => Probe::Free,
        (_, Some(libc::EBUSY)) => Probe::Busy,
        // The interface is gone, and with it every socket bound to it.
        (_, Some(libc::ENODEV | libc::ENXIO)) => Probe::Free,
        _ => Probe::Unknown,
    }
}

/// Wakes the kernel to send what is on the Tx ring (`sendto`); the errno
/// of a failed wake-up.
#[inline]
pub(crate) fn kick_tx(fd: RawFd) -> Result<(), i32> {
    wake_tx(fd).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// Wakes the kernel to look at the fill ring (`recvfrom`).
#[inline]
pub(crate) fn kick_rx(fd: RawFd) {
    // SAFETY: recvfrom(2) with no buffer and no address: AF_XDP's wake-up.
    unsafe {
        libc::recvfrom(
            fd,
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn abi_structs_have_the_kernels_layout() {
        assert_eq!(size_of::<Desc>(), 16);
        assert_eq!(size_of::<UmemReg>(), 32);
        assert_eq!(offset_of!(UmemReg, flags), 24);
        assert_eq!(size_of::<MmapOffsets>(), 128);
        assert_eq!(offset_of!(MmapOffsets, fr), 64);
        assert_eq!(size_of::<SockaddrXdp>(), 16);
        assert_eq!(size_of::<Stats>(), size_of::<libc::xdp_statistics>());
    }
}
