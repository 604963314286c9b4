//! The device model, what the silicon does: per-queue Rx and Tx engines
//! working on the registers and rings they share with the driver
//! (`hw`), the bus accounting, and the driver's two emulation hooks
//! ([`QueueEngine`]).
//!
//! # Memory interface
//! A queue's [`RxRegs`] are what a real NIC exposes: the descriptor ring
//! (in host memory) and the tail register (a doorbell the driver writes).
//! The device keeps its own head. It uses IOVA = virtual address, as DPDK's
//! `--iova-mode=va`: a descriptor's buffer address is the buffer's virtual
//! address (`buf_addr + data_off`), and the device "DMAs" by reading or
//! writing through that pointer — only after reading the descriptor, which
//! it reads only below a tail value it loaded with acquire. The driver
//! stores the tail with release after writing descriptors and rearming
//! buffers, and reads the done bit with acquire before touching a buffer
//! again, so every buffer access is ordered (see
//! [`desc`](crate::driver::soft::desc)).
//!
//! # Engines
//! - Rx: loads the tail, takes frames from its source (a tester generator
//!   over the flows the RETA maps to this queue, or its lane of a wire),
//!   writes each into the next buffer, parses it (packet type, RSS hash,
//!   checksums if the Rx offloads ask) and writes the descriptor back, the
//!   `DD` word last with release. A frame longer than the buffer or the MTU
//!   gets the oversize error, one shorter than an Ethernet header the runt
//!   error. Without a free descriptor, with flow control
//!   (`fc=on`, 802.3x PAUSE) the source is not asked; with `fc=off` the
//!   frame is received anyway and dropped (`rx_missed`).
//! - Tx ([`tx_engine`]): loads the tail, executes each WQE — its packets'
//!   data gathered into the frame FIFO, checksums filled and a VLAN tag
//!   inserted when its eseg asks, TSO — hands each frame to its sink (a
//!   tester checker or the wire) and writes a completion when the WQE asks
//!   one.
//!
//! An engine step does at most [`STEP`] frames. Inline, the Rx step of a
//! queue runs at the start of its `rx_burst` and the Tx step at the end of
//! `tx_burst`; threaded, the device thread (`runner`) steps every engine.
//! Each engine sits in an [`EngineCell`], a try-lock, so even a misuse
//! cannot run one engine on two threads at once; uncontended, it costs one
//! compare-and-swap per step.
//!
//! # Bus accounting
//! Every transaction counts its payload plus `bus_overhead` bytes (default
//! 24: PCIe TLP header, framing, sequence number and LCRC):
//! - descriptor fetches (`bus_desc_bytes`): the device reads Rx
//!   descriptors in cache-line reads, up to 4 descriptors (64 bytes) per
//!   transaction, and each WQE in one transaction per 64-byte block;
//! - write-backs (`bus_writeback_bytes`): Rx descriptors are written back
//!   per cache line as fetched;
//! - completions (`bus_completion_bytes`): one 64-byte CQE write each;
//! - data (`bus_data_bytes`, the Tx share also in `bus_tx_data_bytes`):
//!   frame DMA both ways, split into transactions of at most 256 bytes (a
//!   common max payload size);
//! - doorbells (`bus_doorbells`): tail register writes, counted by the
//!   driver queues (a 4-byte MMIO write each).
//!
//! The device's own cycles (each step, measured with `tsc`) add up in
//! `device_cycles`, so a driver-side figure can exclude them.

pub mod bus;
pub mod frame;
pub mod runner;
pub mod tx_engine;
pub mod wire;

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::counter::Counter;
use crate::port::{MIN_FRAME, PortCounters, PortError, Xstats};
use crate::tsc::rdtsc;

use super::hw::desc::rx;
use super::hw::regs::RxRegs;
use super::hw::wqe::{SEG, blocks};
use crate::tester::{Checker, Generator};
use frame::{RssHasher, parse, rx_checksums};
use wire::{LaneRx, WireTx};

/// Most frames an engine handles per step.
pub const STEP: usize = 64;
/// Largest data transaction, in bytes.
pub const MAX_PAYLOAD: usize = 256;

/// [`EngineCell`] states.
const FREE: u8 = 0;
const BUSY: u8 = 1;
const POISONED: u8 = 2;

/// An engine behind a try-lock.
///
/// A holder that panics leaves the engine poisoned: whatever the panic
/// interrupted is never run again. Steps then find the engine unavailable
/// (as when busy) and return at once, and the control path gets
/// [`Poisoned`] instead of waiting for a release that never comes.
pub struct EngineCell<E> {
    state: AtomicU8,
    engine: UnsafeCell<E>,
}

/// The engine's holder panicked: the engine is never run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poisoned;

/// Held while a closure runs on the engine: dropped by unwinding (the
/// closure panicked), it marks the engine poisoned; a normal return
/// forgets it and frees the engine.
struct PoisonOnUnwind<'a>(&'a AtomicU8);

impl Drop for PoisonOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.store(POISONED, Ordering::Release);
    }
}

// SAFETY: the engine is reached only through `try_with`/`with`, which hold
// the state at BUSY (acquire on taking, release on leaving), so one thread
// at a time has it, and each sees the previous holder's writes; a poisoned
// engine is reached by no one.
unsafe impl<E: Send> Sync for EngineCell<E> {}

impl<E> EngineCell<E> {
    /// A cell holding `e`.
    pub fn new(e: E) -> EngineCell<E> {
        EngineCell {
            state: AtomicU8::new(FREE),
            engine: UnsafeCell::new(e),
        }
    }

    /// Takes the engine: `Err` with the state found when it is not free.
    #[inline]
    fn acquire(&self) -> Result<(), u8> {
        self.state
            .compare_exchange(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| ())
    }

    /// Runs `f` on the engine with the state held at BUSY.
    #[inline]
    fn run_held<R>(&self, f: impl FnOnce(&mut E) -> R) -> R {
        let poison = PoisonOnUnwind(&self.state);
        // SAFETY: the caller took the state from FREE to BUSY: no one else
        // reaches the engine until it is stored back. Should `f` panic,
        // `poison` leaves it POISONED and the engine is never reached again.
        let r = f(unsafe { &mut *self.engine.get() });
        std::mem::forget(poison);
        self.state.store(FREE, Ordering::Release);
        r
    }

    /// Runs `f` on the engine unless another thread has it or it is
    /// poisoned.
    #[inline]
    pub fn try_with<R>(&self, f: impl FnOnce(&mut E) -> R) -> Option<R> {
        self.acquire().ok()?;
        Some(self.run_held(f))
    }

    /// Runs `f` on the engine, waiting for another holder to finish its
    /// step (control path only); [`Poisoned`] when a holder panicked.
    pub fn with<R>(&self, f: impl FnOnce(&mut E) -> R) -> Result<R, Poisoned> {
        loop {
            match self.acquire() {
                Ok(()) => return Ok(self.run_held(f)),
                Err(POISONED) => return Err(Poisoned),
                Err(_) => std::thread::yield_now(),
            }
        }
    }

    /// Whether a holder panicked (for tests).
    #[cfg(all(test, not(loom)))]
    pub fn is_poisoned(&self) -> bool {
        self.state.load(Ordering::Acquire) == POISONED
    }
}

/// Bus and cycle counters of one engine (single writer: the engine holder).
pub struct Bus {
    overhead: u64,
    desc: Arc<Counter>,
    writeback: Arc<Counter>,
    data: Arc<Counter>,
    tx_data: Arc<Counter>,
    completion: Arc<Counter>,
    /// Cycles the engine spent in its steps (`device_cycles`).
    pub cycles: Arc<Counter>,
}

impl Bus {
    /// Registers the counters in `x`.
    pub fn new(x: &Xstats, overhead: u64) -> Bus {
        Bus {
            overhead,
            desc: x.register("bus_desc_bytes"),
            writeback: x.register("bus_writeback_bytes"),
            data: x.register("bus_data_bytes"),
            tx_data: x.register("bus_tx_data_bytes"),
            completion: x.register("bus_completion_bytes"),
            cycles: x.register("device_cycles"),
        }
    }

    /// Cache-line transactions covering descriptors `[start, start + n)`.
    #[inline]
    fn lines(start: u32, n: u32) -> u64 {
        if n == 0 {
            return 0;
        }
        // Rings are multiples of 4 descriptors (and so is 2^32), so
        // free-running indices fall on lines as ring indices do.
        ((start & 3) + n).div_ceil(4) as u64
    }

    /// Descriptor fetch of `[start, start + n)`.
    #[inline]
    pub fn desc_fetch(&self, start: u32, n: u32) {
        if n != 0 {
            self.desc
                .add(16 * n as u64 + self.overhead * Bus::lines(start, n));
        }
    }

    /// Fetch of a WQE of `ds` segments: its bytes, one transaction per
    /// 64-byte block (a WQE starts on one).
    #[inline]
    pub fn wqe_fetch(&self, ds: u32) {
        self.desc
            .add((SEG as u32 * ds) as u64 + self.overhead * blocks(ds) as u64);
    }

    /// Rx write-back of `[start, start + n)`.
    #[inline]
    pub fn rx_writeback(&self, start: u32, n: u32) {
        if n != 0 {
            self.writeback
                .add(16 * n as u64 + self.overhead * Bus::lines(start, n));
        }
    }

    /// One 64-byte CQE write.
    #[inline]
    pub fn completion(&self) {
        self.completion.add(64 + self.overhead);
    }

    /// Transactions of a DMA of `len` bytes (at most 256 each).
    #[inline]
    pub fn tlps(len: usize) -> u64 {
        len.div_ceil(MAX_PAYLOAD).max(1) as u64
    }

    /// A DMA of `len` bytes (Rx: a frame written into a buffer).
    #[inline]
    pub fn data(&self, len: usize) {
        self.data.add(len as u64 + self.overhead * Bus::tlps(len));
    }

    /// The Tx DMA reads of one WQE's dsegs: `bytes` in `tlps`
    /// transactions.
    #[inline]
    pub fn tx_dma(&self, bytes: u64, tlps: u64) {
        let b = bytes + self.overhead * tlps;
        self.data.add(b);
        self.tx_data.add(b);
    }
}

/// Where an Rx engine's frames come from.
pub enum RxSource {
    /// Nothing arrives (no flow maps to this queue).
    Idle,
    /// A tester generator.
    Gen(Box<Generator>),
    /// This queue's lane of a wire.
    Wire(Box<LaneRx>),
}

/// Where a Tx engine's frames go.
pub enum TxSink {
    /// A tester checker.
    Check(Box<Checker>),
    /// The wire.
    Wire(Box<WireTx>),
    /// Tests: every frame kept.
    #[cfg(all(test, not(loom)))]
    Capture(Vec<Vec<u8>>),
}

/// What an Rx engine is configured with.
pub struct RxParams {
    /// Buffer size (the pool's data room) — the device's per-queue buffer
    /// size register.
    pub buf_size: usize,
    /// Longest frame accepted (MTU + Ethernet header + one VLAN tag).
    pub max_frame: usize,
    /// Check IPv4 header checksums.
    pub check_ip: bool,
    /// Check TCP/UDP checksums.
    pub check_l4: bool,
    /// Link flow control.
    pub fc: bool,
}

/// One Rx queue's engine.
pub struct RxEngine {
    regs: Arc<RxRegs>,
    head: u32,
    source: RxSource,
    params: RxParams,
    hasher: Arc<RssHasher>,
    scratch: Box<[u8]>,
    bus: Bus,
    counters: Arc<PortCounters>,
    /// The queue's index.
    queue: usize,
    /// Steps left before an injected panic (`panic_at`), if one is asked.
    panic_in: Option<u64>,
}

/// What an Rx engine is made of.
pub struct RxEngineParts {
    /// The descriptor ring and tail register it shares with the driver.
    pub regs: Arc<RxRegs>,
    /// Where its frames come from.
    pub source: RxSource,
    /// How it is configured.
    pub params: RxParams,
    /// The port's RSS hash function.
    pub hasher: Arc<RssHasher>,
    /// The bus its descriptor and buffer writes cross.
    pub bus: Bus,
    /// Its port's counters.
    pub counters: Arc<PortCounters>,
    /// The queue's index.
    pub queue: usize,
}

impl RxEngine {
    /// An engine for queue `parts.queue`.
    pub fn new(parts: RxEngineParts) -> RxEngine {
        let RxEngineParts {
            regs,
            source,
            params,
            hasher,
            bus,
            counters,
            queue,
        } = parts;
        RxEngine {
            regs,
            head: 0,
            source,
            scratch: vec![0; 9216 + 64].into_boxed_slice(),
            params,
            hasher,
            bus,
            counters,
            queue,
            panic_in: None,
        }
    }

    /// Fault injection (tests): the engine panics in its `n`th step
    /// (`n >= 1`), midway, with its frame source taken out.
    pub fn panic_at(&mut self, n: u64) {
        self.panic_in = Some(n.max(1));
    }

    /// Back to descriptor 0 (the queue is starting; the ring is empty).
    pub fn reset(&mut self) {
        self.head = 0;
    }

    /// Writes back descriptor `head` for a frame of `len` bytes now in the
    /// buffer at `buf`; `rss` is the hash and type when already known.
    #[inline]
    fn write_back(&self, buf: &[u8], rss: Option<(u32, u64)>) {
        let p = parse(buf);
        let (hash, ty) = rss.unwrap_or_else(|| self.hasher.frame(buf, &p));
        let mut st = rx::DD | rx::EOP;
        st |= rx_checksums(buf, &p, self.params.check_ip, self.params.check_l4);
        let vlan = match p.vlan {
            Some(v) => {
                st |= rx::VP;
                v
            }
            None => 0,
        };
        let d = self.regs.descs.get(self.head);
        d.q0.store(rx::wb0(ty, p.ptype as u64, hash), Ordering::Relaxed);
        d.q1.store(rx::wb1(st, buf.len() as u16, vlan), Ordering::Release);
    }

    /// Writes back an error for descriptor `head` (oversize: the buffer
    /// holds the frame's first `len` bytes; runt: the whole frame, shorter
    /// than an Ethernet header).
    fn write_back_error(&self, len: usize) {
        let d = self.regs.descs.get(self.head);
        d.q0.store(0, Ordering::Relaxed);
        let err = if len < MIN_FRAME {
            rx::ERR_RUNT
        } else {
            rx::ERR_OVERSIZE
        };
        let st = rx::DD | rx::EOP | err;
        d.q1.store(rx::wb1(st, len as u16, 0), Ordering::Release);
    }

    /// The buffer of descriptor `head`, `buf_size` bytes.
    ///
    /// # Safety
    /// Descriptor `head` is below the tail the caller loaded (acquire): the
    /// driver armed it with a buffer of at least `buf_size` bytes that no
    /// one touches until the device writes the descriptor back.
    #[inline]
    unsafe fn buffer<'b>(&self) -> &'b mut [u8] {
        let addr = self.regs.descs.get(self.head).q0.load(Ordering::Relaxed) as *mut u8;
        // SAFETY: the caller's contract; the slice is dropped before the
        // write-back hands the buffer back.
        unsafe { std::slice::from_raw_parts_mut(addr, self.params.buf_size) }
    }

    /// One step: up to [`STEP`] frames into the ring. Returns how many
    /// frames were delivered or dropped.
    pub fn step(&mut self) -> usize {
        let t0 = rdtsc();
        let tail = self.regs.tail.load(Ordering::Acquire);
        let avail = (tail.wrapping_sub(self.head) as usize).min(STEP);
        let start = self.head;
        let room = self.params.buf_size.min(self.params.max_frame);
        let missed = &self.counters.rx[self.queue].missed;
        let mut dropped = 0u64;
        let mut source = std::mem::replace(&mut self.source, RxSource::Idle);
        if let Some(n) = &mut self.panic_in {
            *n -= 1;
            if *n == 0 {
                panic!(
                    "soft: panic injected in Rx queue {}'s step (panic_at)",
                    self.queue
                );
            }
        }
        match &mut source {
            RxSource::Idle => {}
            RxSource::Gen(g) => {
                let ready = g.ready(t0).min(STEP as u64) as usize;
                let k = ready.min(avail);
                for _ in 0..k {
                    // SAFETY: `head` is below the tail loaded above.
                    let buf = unsafe { self.buffer() };
                    if g.frame_len() <= room {
                        let Some(len) = g.fill(buf, t0) else { break };
                        self.bus.data(len);
                        self.write_back(&buf[..len], None);
                    } else {
                        let Some(len) = g.fill(&mut self.scratch, t0) else {
                            break;
                        };
                        let n = len.min(self.params.buf_size);
                        buf[..n].copy_from_slice(&self.scratch[..n]);
                        self.bus.data(n);
                        self.write_back_error(n);
                    }
                    self.head = self.head.wrapping_add(1);
                }
                if !self.params.fc {
                    // No descriptor for the rest: received, then dropped.
                    for _ in k..ready {
                        if g.fill(&mut self.scratch, t0).is_none() {
                            break;
                        }
                        dropped += 1;
                    }
                }
            }
            RxSource::Wire(lane) => {
                if lane.lane().dropped.load(Ordering::Relaxed) != 0 {
                    dropped += lane.lane().dropped.swap(0, Ordering::Relaxed);
                }
                let mut k = 0;
                while k < avail {
                    let Some((i, bytes, meta)) = lane.pop() else {
                        break;
                    };
                    // SAFETY: `head` is below the tail loaded above.
                    let buf = unsafe { self.buffer() };
                    // The whole frame's length: a frame longer than a lane
                    // slot arrives as its head.
                    let len = meta.len as usize;
                    if (MIN_FRAME..=room).contains(&len) {
                        buf[..bytes.len()].copy_from_slice(bytes);
                        self.bus.data(bytes.len());
                        self.write_back(&buf[..bytes.len()], Some((meta.hash, meta.rss_type)));
                    } else {
                        let n = bytes.len().min(self.params.buf_size);
                        buf[..n].copy_from_slice(&bytes[..n]);
                        self.bus.data(n);
                        self.write_back_error(n);
                    }
                    lane.release(i);
                    self.head = self.head.wrapping_add(1);
                    k += 1;
                }
                if !self.params.fc && k == avail {
                    while (k as u64 + dropped) < STEP as u64 {
                        let Some((i, _, _)) = lane.pop() else { break };
                        lane.release(i);
                        dropped += 1;
                    }
                }
            }
        }
        self.source = source;
        let n = self.head.wrapping_sub(start);
        self.bus.desc_fetch(start, n);
        self.bus.rx_writeback(start, n);
        if dropped != 0 {
            missed.add(dropped);
        }
        self.bus.cycles.add(rdtsc().wrapping_sub(t0));
        n as usize + dropped as usize
    }
}

/// Every engine of a port: what the device thread steps.
pub struct PortEngines {
    /// Rx engines, by queue.
    pub rx: Box<[EngineCell<RxEngine>]>,
    /// Tx engines, by queue.
    pub tx: Box<[EngineCell<tx_engine::TxEngine>]>,
    /// The port's counters, where a failed step is recorded.
    pub counters: Arc<PortCounters>,
}

impl PortEngines {
    /// Steps every engine that no one else is running; returns the frames
    /// handled.
    pub fn step_all(&self) -> usize {
        let mut n = 0;
        for e in self.rx.iter() {
            n += e.try_with(RxEngine::step).unwrap_or(0);
        }
        for e in self.tx.iter() {
            n += e.try_with(tx_engine::TxEngine::step).unwrap_or(0);
        }
        n
    }

    /// [`step_all`](Self::step_all), with a panic caught: the engine that
    /// panicked is poisoned (never run again) and the port's fault
    /// records the panic; the other engines go on.
    pub fn step_all_or_fault(&self) -> usize {
        // Unwind safety: the only state a panic can interrupt is the
        // stepping engine's, and its cell is poisoned on the way out.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.step_all())) {
            Ok(n) => n,
            Err(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".into());
                self.counters
                    .set_fault(format!("soft: the device model panicked: {msg}"));
                0
            }
        }
    }
}

/// A per-queue engine of the device: what [`QueueEngine`] needs to find,
/// step and reset it.
pub trait Engine: Sized {
    /// The direction of its queues, `Rx` or `Tx`, for messages.
    const DIRECTION: &'static str;
    /// The engines of this kind in `engines`, by queue.
    fn cells(engines: &PortEngines) -> &[EngineCell<Self>];
    /// One step; returns the frames handled.
    fn step(&mut self) -> usize;
    /// Back to power-on state (head 0, nothing half done).
    fn reset(&mut self);
}

impl Engine for RxEngine {
    const DIRECTION: &'static str = "Rx";
    #[inline(always)]
    fn cells(engines: &PortEngines) -> &[EngineCell<RxEngine>] {
        &engines.rx
    }
    #[inline(always)]
    fn step(&mut self) -> usize {
        RxEngine::step(self)
    }
    fn reset(&mut self) {
        RxEngine::reset(self)
    }
}

impl Engine for tx_engine::TxEngine {
    const DIRECTION: &'static str = "Tx";
    #[inline(always)]
    fn cells(engines: &PortEngines) -> &[EngineCell<tx_engine::TxEngine>] {
        &engines.tx
    }
    #[inline(always)]
    fn step(&mut self) -> usize {
        tx_engine::TxEngine::step(self)
    }
    fn reset(&mut self) {
        tx_engine::TxEngine::reset(self)
    }
}

/// A driver queue's handle on its engine: the emulation's only ways into
/// the device besides descriptor memory, doorbells and registers.
///
/// - The *inline device step* ([`inline_step`](Self::inline_step)): with
///   `device=inline` the device has no thread of its own, so the driver's
///   burst runs one step of its queue's engine on the polling thread, where
///   a real NIC works alongside. With `device=threaded` it does nothing.
/// - The *queue reset* ([`reset`](Self::reset)): a queue's start and stop
///   hold the engine still, reset it and let the driver reset the
///   registers and take its buffers back meanwhile, as a real driver
///   disables a queue and waits for the device to acknowledge.
pub struct QueueEngine<E: Engine> {
    engines: Arc<PortEngines>,
    /// The queue's index, in `E::cells(&engines)`.
    queue: usize,
    /// Whether the device runs inline (inside the queue's bursts).
    inline: bool,
    kind: PhantomData<fn() -> E>,
}

impl<E: Engine> Clone for QueueEngine<E> {
    fn clone(&self) -> Self {
        QueueEngine {
            engines: Arc::clone(&self.engines),
            queue: self.queue,
            inline: self.inline,
            kind: PhantomData,
        }
    }
}

impl<E: Engine> QueueEngine<E> {
    /// The engine of queue `queue` of `engines`; `inline`: the device runs
    /// inside the queue's bursts.
    pub fn new(engines: Arc<PortEngines>, queue: usize, inline: bool) -> QueueEngine<E> {
        assert!(
            queue < E::cells(&engines).len(),
            "no engine for queue {queue}"
        );
        QueueEngine {
            engines,
            queue,
            inline,
            kind: PhantomData,
        }
    }

    /// The queue's index.
    #[inline(always)]
    pub fn queue(&self) -> usize {
        self.queue
    }

    /// The inline device step: with the device inline, one step of the
    /// engine unless it is busy or poisoned; nothing with a device thread.
    #[inline]
    pub fn inline_step(&self) {
        if self.inline {
            E::cells(&self.engines)[self.queue].try_with(E::step);
        }
    }

    /// The queue reset: with the engine held (a running device is not in
    /// the middle of a step on this queue), runs `f` — the driver resets
    /// the registers, and on a stop takes its buffers back — then resets
    /// the engine. [`Poisoned`] if the engine panicked in an earlier step:
    /// it never runs again, and `f` has not run.
    pub fn reset<R>(&self, f: impl FnOnce() -> R) -> Result<R, Poisoned> {
        E::cells(&self.engines)[self.queue].with(|e| {
            let r = f();
            e.reset();
            r
        })
    }

    /// The queue start: [`reset`](Self::reset), `f` resetting the
    /// registers. An engine that panicked in an earlier step never runs
    /// again: that is the queue's error.
    pub fn start(&self, f: impl FnOnce()) -> Result<(), PortError> {
        self.reset(f).map_err(|Poisoned| {
            PortError::Driver(format!(
                "soft: the device's {} engine of queue {} panicked in a step and cannot run \
                 again",
                E::DIRECTION,
                self.queue
            ))
        })
    }

    /// The queue stop: runs `f` (the driver resets the registers and takes
    /// its buffers back) with the engine held, as [`reset`](Self::reset)
    /// does. If the engine panicked in an earlier step it never runs again,
    /// so no device touches the queue's buffers any more and `f` runs all
    /// the same: they go home as on a normal stop.
    pub fn stop(&self, mut f: impl FnMut()) {
        if self.reset(&mut f).is_err() {
            f();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn descriptor_fetches_count_cache_lines() {
        assert_eq!(Bus::lines(0, 4), 1);
        assert_eq!(Bus::lines(3, 2), 2);
        assert_eq!(Bus::lines(0, 32), 8);
        assert_eq!(Bus::lines(2, 32), 9);
        assert_eq!(Bus::lines(u32::MAX, 2), 2, "wraps");
        let x = Xstats::new();
        let b = Bus::new(&x, 24);
        b.desc_fetch(0, 4);
        b.data(60);
        b.data(1514);
        b.rx_writeback(1, 4);
        b.completion();
        assert_eq!(x.get("bus_desc_bytes"), Some(64 + 24));
        assert_eq!(x.get("bus_data_bytes"), Some(60 + 24 + 1514 + 6 * 24));
        assert_eq!(x.get("bus_writeback_bytes"), Some(64 + 2 * 24));
        assert_eq!(x.get("bus_completion_bytes"), Some(64 + 24));
        // A WQE of 34 segments: 544 bytes in 9 blocks; two dsegs of 300
        // bytes, two transactions each.
        b.wqe_fetch(34);
        b.tx_dma(600, 2 * Bus::tlps(300));
        assert_eq!(x.get("bus_desc_bytes"), Some(64 + 24 + 544 + 9 * 24));
        assert_eq!(x.get("bus_tx_data_bytes"), Some(600 + 4 * 24));
        assert_eq!(
            x.get("bus_data_bytes"),
            Some(60 + 24 + 1514 + 6 * 24 + 600 + 4 * 24)
        );
    }

    #[test]
    fn engine_cell_refuses_a_second_holder() {
        let c = EngineCell::new(5u32);
        let inner = c.try_with(|v| {
            *v += 1;
            c.try_with(|_| ())
        });
        assert_eq!(inner, Some(None));
        assert_eq!(c.with(|v| *v), Ok(6));
    }

    #[test]
    fn a_panicking_holder_leaves_the_cell_failing_fast() {
        let c = Arc::new(EngineCell::new(5u32));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.try_with(|_| panic!("engine step fails"))
        }));
        assert!(r.is_err());
        assert_eq!(c.try_with(|v| *v), None, "never run again");
        // The control path gives up instead of waiting for ever.
        let c2 = Arc::clone(&c);
        let t = std::thread::spawn(move || c2.with(|v| *v));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !t.is_finished() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(t.is_finished(), "with() spins on a poisoned engine");
        assert_eq!(t.join().unwrap(), Err(Poisoned));
        assert!(c.is_poisoned());
    }
}
