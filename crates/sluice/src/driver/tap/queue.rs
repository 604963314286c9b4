//! The queues of a TAP port: one non-blocking descriptor each, shared by
//! Rx queue `q` and Tx queue `q` (reads and writes on one descriptor may
//! run on two threads at once).
//!
//! Rx reads one frame per `readv` into an mbuf's data room, with a scratch
//! buffer behind it so an over-long frame is seen whole and counted in
//! `rx_errors` instead of arriving cut. The mbuf of a read that found
//! nothing is kept for the next call, so an idle queue allocates nothing.
//! Tx writes each packet with one `writev` of its segments and frees it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use crate::counter::Counter;
use crate::mbuf::{BurstSlice, Mbuf, MbufPool};
use crate::port::{PortCounters, PortError, RxFrameCheck, RxQueue, TxQueue};

/// Largest frame a TAP device hands over (its MTU is at most 65535).
const SCRATCH: usize = 65_536 + 64;

/// Segments one `writev` takes straight from the mbufs; a longer chain is
/// gathered into the scratch buffer first.
const MAX_IOV: usize = 16;

/// The Rx queue of a TAP port.
pub(super) struct TapRx {
    fd: Arc<OwnedFd>,
    pool: MbufPool,
    port_id: u16,
    /// A buffer a read found nothing for, kept for the next read.
    spare: Option<Mbuf>,
    /// Behind the data room: where the tail of an over-long frame lands.
    scratch: Box<[u8]>,
    started: bool,
    /// Runts and frames over the MTU are counted and skipped.
    check: RxFrameCheck,
    counters: Arc<PortCounters>,
    q: usize,
}

impl TapRx {
    pub(super) fn new(
        fd: Arc<OwnedFd>,
        pool: MbufPool,
        port_id: u16,
        mtu: u16,
        counters: Arc<PortCounters>,
        q: usize,
    ) -> TapRx {
        TapRx {
            fd,
            pool,
            port_id,
            spare: None,
            scratch: vec![0u8; SCRATCH].into_boxed_slice(),
            started: false,
            check: RxFrameCheck::new(&counters.xstats, mtu),
            counters,
            q,
        }
    }
}

/// Reads one frame from `fd` into `m`'s data room (and `scratch` past it):
/// the frame's length, or the error (`WouldBlock`: none waiting).
fn read_frame(fd: &OwnedFd, scratch: &mut [u8], m: &mut Mbuf) -> io::Result<usize> {
    let room = m.tailroom() as usize;
    let buf = m
        .append(room)
        .map_err(|_| io::Error::other("a fresh mbuf has its tailroom"))?;
    let iov = [
        libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: room,
        },
        libc::iovec {
            iov_base: scratch.as_mut_ptr().cast(),
            iov_len: scratch.len(),
        },
    ];
    // SAFETY: both iovecs describe writable memory we hold exclusively
    // for the call (the mbuf's appended room and the scratch buffer).
    let r = unsafe { libc::readv(fd.as_raw_fd(), iov.as_ptr(), 2) };
    if r < 0 {
        let e = io::Error::last_os_error();
        let _ = m.trim(room);
        return Err(e);
    }
    let n = r as usize;
    let _ = m.trim(room - n.min(room));
    Ok(n)
}

impl RxQueue for TapRx {
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.rx[self.q];
        let (mut n, mut bytes) = (0usize, 0u64);
        if self.started {
            for _ in 0..burst.free() {
                let mut m = match self.spare.take() {
                    Some(m) => m,
                    None => match self.pool.alloc() {
                        Some(m) => m,
                        None => {
                            stats.nombuf.inc();
                            break;
                        }
                    },
                };
                match read_frame(&self.fd, &mut self.scratch, &mut m) {
                    Ok(0) => {
                        self.spare = Some(m);
                        break;
                    }
                    Ok(len) if len <= m.data_len() as usize && self.check.accepts(len) => {
                        let _ = m.set_port(self.port_id);
                        bytes += len as u64;
                        n += 1;
                        // Room: at most `free` packets are pushed.
                        let _ = burst.push(m);
                    }
                    Ok(len) => {
                        // A runt, or longer than the MTU or the data room:
                        // counted with its reason, skipped.
                        self.check.count_drop(len, &stats.errors);
                        let _ = m.trim(m.data_len() as usize);
                        self.spare = Some(m);
                    }
                    Err(_) => {
                        // Nothing waiting (`EAGAIN`), or no device to read
                        // from (deleted: `EBADFD`): no frame, nothing to
                        // count; try again next call.
                        self.spare = Some(m);
                        break;
                    }
                }
            }
        }
        stats.record_burst(n, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        self.started = false;
        self.spare = None;
    }
}

/// The Tx queue of a TAP port.
pub(super) struct TapTx {
    fd: Arc<OwnedFd>,
    /// Where a chain of more than [`MAX_IOV`] segments is gathered.
    scratch: Vec<u8>,
    started: bool,
    /// Frames the device refused (a write failed other than `EAGAIN`):
    /// `tx_write_errors`, a share of `tx_errors`.
    write_errors: Arc<Counter>,
    counters: Arc<PortCounters>,
    q: usize,
}

impl TapTx {
    pub(super) fn new(fd: Arc<OwnedFd>, counters: Arc<PortCounters>, q: usize) -> TapTx {
        TapTx {
            fd,
            scratch: Vec::new(),
            started: false,
            write_errors: counters.xstats.register("tx_write_errors"),
            counters,
            q,
        }
    }

    /// Writes `m` as one frame.
    fn write_frame(&mut self, m: &Mbuf) -> io::Result<()> {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_IOV];
        let mut k = 0;
        if (m.nb_segs() as usize) <= MAX_IOV {
            for seg in m.segments() {
                iov[k] = libc::iovec {
                    iov_base: seg.as_ptr().cast_mut().cast(),
                    iov_len: seg.len(),
                };
                k += 1;
            }
        } else {
            self.scratch.clear();
            m.segments().for_each(|s| self.scratch.extend_from_slice(s));
            iov[0] = libc::iovec {
                iov_base: self.scratch.as_mut_ptr().cast(),
                iov_len: self.scratch.len(),
            };
            k = 1;
        }
        // SAFETY: the iovecs describe the packet's segments (or the scratch
        // copy), readable for the call; writev only reads them.
        let r = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), k as i32) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

impl TxQueue for TapTx {
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        if !self.started {
            self.counters.tx[self.q].record_burst(0, 0);
            return 0;
        }
        let (mut taken, mut sent, mut bytes, mut errors) = (0usize, 0usize, 0u64, 0u64);
        for i in 0..burst.len() {
            let m = &burst.as_slice()[i];
            let len = m.pkt_len() as u64;
            // `write_frame` needs `&mut self` for the scratch buffer; the
            // mbuf is borrowed from the burst, not from `self`.
            match self.write_frame(m) {
                Ok(()) => {
                    sent += 1;
                    bytes += len;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => errors += 1,
            }
            taken += 1;
        }
        drop(burst.drain_front(taken));
        let stats = &self.counters.tx[self.q];
        if errors != 0 {
            stats.errors.add(errors);
            self.write_errors.add(errors);
        }
        stats.record_burst(sent, bytes);
        taken
    }

    fn start(&mut self) -> Result<(), PortError> {
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        self.started = false;
    }
}
