//! One queue index of a port: the AF_XDP socket its Rx queue and its Tx
//! queue share, opened by whichever starts first and closed when both have
//! stopped.
//!
//! # Halves
//! A socket has four rings; the Rx queue owns the fill and Rx rings
//! ([`RxRings`]), the Tx queue the Tx and completion rings ([`TxRings`]), so
//! each ring has one user-space end and the hot paths take no lock. A
//! queue takes its half when it starts and gives it back when it stops;
//! the slot's mutex is taken only then (and by statistics readers).
//!
//! # Buffer ownership at the end
//! Each half carries the [`Ledger`](super::umem::Ledger) of frames the
//! kernel holds through it. When the second half comes back, the slot
//! closes the socket, waits until the kernel has let go of the queue
//! ([`Socket::close`]), then puts every frame still in either ledger back
//! into the pool: frames on the fill ring or in the kernel's own cache,
//! frames sent but not completed. If the kernel never lets go (a bound
//! copy of the socket lives on somewhere), the frames are left out of the
//! pool rather than risk the kernel writing into a buffer in use: counted,
//! and said on stderr.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::mbuf::MbufPool;
use crate::mempool::Elem;
use crate::port::PortError;

use super::bpf::XskMap;
use super::umem::Ledger;
use super::xsk::{OpenError, RxRings, Socket, SocketConfig, Stats, TxRings};

/// A queue index's socket and the halves not lent out.
pub(crate) struct QueueSlot {
    /// How the socket is opened.
    pub cfg: SocketConfig,
    /// Where the socket is registered for the XDP program; `None` for a
    /// queue index with no Rx queue (nothing is redirected to it).
    map: Option<Arc<XskMap>>,
    /// The UMEM's pool: reclaimed frames go back here.
    pool: MbufPool,
    state: Mutex<SlotState>,
}

struct SlotState {
    /// The open socket; `Some` while either half is lent out or parked.
    sock: Option<Socket>,
    /// Parked halves (the socket is open, the queue not running).
    rx: Option<RxRings>,
    tx: Option<TxRings>,
    /// Whether a queue holds each half.
    rx_out: bool,
    tx_out: bool,
    /// Statistics of the sockets closed so far.
    closed: Stats,
    /// Frames never given back because the kernel kept the queue.
    leaked: u64,
}

impl QueueSlot {
    /// A slot for socket `cfg`, registered in `map` (if any), over `pool`.
    pub(crate) fn new(cfg: SocketConfig, map: Option<Arc<XskMap>>, pool: MbufPool) -> QueueSlot {
        QueueSlot {
            cfg,
            map,
            pool,
            state: Mutex::new(SlotState {
                sock: None,
                rx: None,
                tx: None,
                rx_out: false,
                tx_out: false,
                closed: [0; 6],
                leaked: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SlotState> {
        // Every unlock leaves the state consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens the socket if it is not open.
    fn ensure_open(&self, st: &mut SlotState) -> Result<(), PortError> {
        if st.sock.is_some() {
            return Ok(());
        }
        let (sock, rx, tx) = Socket::open(&self.cfg).map_err(|e| match e {
            OpenError::Config(m) => PortError::Config(m),
            OpenError::Io(source) => PortError::Io {
                context: self.cfg.what.clone(),
                source,
            },
        })?;
        if let Some(Err(e)) = self
            .map
            .as_ref()
            .map(|m| m.set(self.cfg.queue_id, sock.raw_fd()))
        {
            // Nothing was lent out: close at once (no frame is held yet).
            sock.close(self.cfg.ifindex, self.cfg.queue_id);
            return Err(PortError::io(
                format!(
                    "{}: putting the socket in the XSKMAP at {}",
                    self.cfg.what, self.cfg.queue_id
                ),
                e,
            ));
        }
        st.sock = Some(sock);
        st.rx = Some(rx);
        st.tx = Some(tx);
        Ok(())
    }

    /// Lends out the Rx half, opening the socket if needed.
    pub(crate) fn take_rx(&self) -> Result<RxRings, PortError> {
        let mut st = self.lock();
        self.ensure_open(&mut st)?;
        let rx = st.rx.take().ok_or_else(|| {
            PortError::Driver(format!(
                "{}: the Rx rings are already lent out",
                self.cfg.what
            ))
        })?;
        st.rx_out = true;
        Ok(rx)
    }

    /// Lends out the Tx half, opening the socket if needed.
    pub(crate) fn take_tx(&self) -> Result<TxRings, PortError> {
        let mut st = self.lock();
        self.ensure_open(&mut st)?;
        let tx = st.tx.take().ok_or_else(|| {
            PortError::Driver(format!(
                "{}: the Tx rings are already lent out",
                self.cfg.what
            ))
        })?;
        st.tx_out = true;
        Ok(tx)
    }

    /// Takes the Rx half back; closes the socket if the Tx half is back too.
    pub(crate) fn put_rx(&self, rx: RxRings) {
        let mut st = self.lock();
        st.rx = Some(rx);
        st.rx_out = false;
        if !st.tx_out {
            self.close(&mut st);
        }
    }

    /// Takes the Tx half back; closes the socket if the Rx half is back too.
    pub(crate) fn put_tx(&self, tx: TxRings) {
        let mut st = self.lock();
        st.tx = Some(tx);
        st.tx_out = false;
        if !st.rx_out {
            self.close(&mut st);
        }
    }

    /// Closes the socket and gives the pool every frame the kernel held
    /// (module docs). Both halves are parked.
    fn close(&self, st: &mut SlotState) {
        let Some(sock) = st.sock.take() else {
            return;
        };
        if let Ok(s) = sock.stats() {
            for (c, v) in st.closed.iter_mut().zip(s) {
                *c += v;
            }
        }
        let released = sock.close(self.cfg.ifindex, self.cfg.queue_id);
        let mut ledgers: Vec<Ledger> = Vec::with_capacity(2);
        if let Some(rx) = st.rx.take() {
            ledgers.push(rx.ledger);
        }
        if let Some(tx) = st.tx.take() {
            ledgers.push(tx.ledger);
        }
        let umem = self.cfg.umem;
        let mut batch: Vec<Elem> = Vec::with_capacity(64);
        let mut left = 0u64;
        for mut l in ledgers {
            if !released {
                left += l.held() as u64;
                continue;
            }
            l.drain(|idx| {
                batch.push(umem.elem_at(umem.offset_of_index(idx)));
                if batch.len() == batch.capacity() {
                    // Frames the ledger says the kernel held, now released
                    // (the queue is free again): fill frames came from this
                    // pool untouched; Tx frames were plain buffers of it
                    // whose only reference the Tx queue gave up.
                    // SAFETY: plain, free buffers of this pool, each once.
                    unsafe { self.pool.mempool().put_bulk(&batch) };
                    batch.clear();
                }
            });
        }
        // SAFETY: as above.
        unsafe { self.pool.mempool().put_bulk(&batch) };
        if left != 0 {
            st.leaked += left;
            eprintln!(
                "sluice: {}: the kernel did not release {} queue {} within {} s; its {left} \
                 frames stay out of pool '{}'",
                self.cfg.what,
                self.cfg.ifname,
                self.cfg.queue_id,
                super::xsk::RELEASE_WAIT.as_secs(),
                self.pool.mempool().name()
            );
        }
    }

    /// The kernel's statistics over every socket this slot has had.
    pub(crate) fn stats(&self) -> Stats {
        let st = self.lock();
        let mut s = st.closed;
        if let Some(now) = st.sock.as_ref().and_then(|k| k.stats().ok()) {
            for (c, v) in s.iter_mut().zip(now) {
                *c += v;
            }
        }
        s
    }

    /// Whether the open socket is bound zero-copy.
    pub(crate) fn zerocopy(&self) -> bool {
        self.lock().sock.as_ref().is_some_and(Socket::zerocopy)
    }

    /// Frames left out of the pool because the kernel kept the queue.
    pub(crate) fn leaked(&self) -> u64 {
        self.lock().leaked
    }
}
