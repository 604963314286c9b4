//! `afxdp`: a port on a kernel interface through AF_XDP sockets, one per
//! queue, with the mbuf pool itself as the UMEM — raw system calls only
//! (no libbpf, no libxdp).
//!
//! Spec: `afxdp:iface=NAME[,queue=N,xdp_mode=M,bind=B,wakeup=BOOL,fill=N]`
//! - `iface` (required): the interface, in the caller's network namespace.
//! - `queue` (default 0): the interface queue the port's queue 0 binds;
//!   port queue `q` binds interface queue `queue + q`.
//! - `xdp_mode` (`native`, `generic` or `auto`, default `auto`): how the
//!   redirect program runs — in the driver (`XDP_FLAGS_DRV_MODE`) or on the
//!   socket buffer (`XDP_FLAGS_SKB_MODE`); `auto` tries native first.
//! - `bind` (`copy`, `zerocopy` or `auto`, default `auto`): copy mode, the
//!   device's zero-copy mode (an error where its driver has none, as veth,
//!   or where the pool is on 4 KiB pages: see `umem.rs`), or zero-copy
//!   falling back to copy.
//! - `wakeup` (default true): bind with `XDP_USE_NEED_WAKEUP`, so the
//!   kernel is woken (`sendto`, `recvfrom`) only when it asks.
//! - `fill` (default twice the Rx descriptors): fill-ring entries, a power
//!   of two at least the Rx ring's. The Rx ring has `nb_rxd` entries, the
//!   Tx and completion rings `nb_txd`.
//!
//! # The pieces
//! | file | what |
//! |---|---|
//! | `umem.rs` | the pool region as the UMEM (unaligned chunks: frame = mbuf), address encoding, the ledger of frames the kernel holds |
//! | `ring.rs` | the four mmapped rings, producer/consumer with Acquire/Release |
//! | `xsk.rs` | one socket: UMEM registration, ring setup and mapping, bind (retried on `EBUSY`), close and release wait |
//! | `slot.rs` | a queue index's socket, shared by its Rx and Tx queue; frames returned at close |
//! | `rx.rs`, `tx.rs` | the queues: fill/Rx and Tx/completion, recycling |
//! | `bpf.rs` | the XSKMAP, the redirect program from eBPF instructions, the `bpf_link` |
//! | [`link`] | interface index, queues, MTU, MAC and XDP state over rtnetlink |
//! | `memlock.rs` | the UMEM against `RLIMIT_MEMLOCK` without `CAP_IPC_LOCK` |
//!
//! # Life cycle
//! - **open** (`from_spec`): the interface is looked up (a missing one is
//!   an error naming it).
//! - **setup** (`Port::new`): the queues asked for must exist on the
//!   interface; each queue's pool must make a UMEM whose frames hold an
//!   MTU-sized frame; the UMEMs must fit `RLIMIT_MEMLOCK` when the process
//!   lacks `CAP_IPC_LOCK`; the XSKMAP is made and the program loaded (a
//!   verifier rejection comes with the verifier's log).
//! - **start**: each Rx and Tx queue takes its half of its queue index's
//!   socket — the first opens and binds it and puts it in the XSKMAP — and
//!   the Rx queues fill their fill rings; then the program is attached
//!   (`bpf_link`), native or generic.
//! - **stop**: the link is closed first (the program detaches: no more
//!   redirects), then the queues stop — received frames go back to the
//!   pool, frames on the Tx ring are given a moment to go out — and when
//!   both halves of a socket are back it is closed; once the kernel has let
//!   go of the queue every frame it still held goes back to the pool, so a
//!   stopped port leaves the pool full. Dropping the port does the same.
//!
//! # Buffer ownership
//! A frame (pool element) is, at any time, exactly one of: free in the
//! pool; an mbuf owned by the application; in an Rx queue's software ring
//! (recycled, not yet on the fill ring); or the kernel's — on the fill
//! ring, in the kernel's own cache, on the Rx ring, on the Tx ring, in
//! flight, on the completion ring — and then marked in its socket's
//! ledger (Rx side or Tx side). Only a marked frame's address is ever
//! turned back into an mbuf.
//!
//! # Statistics
//! Port counters as usual; xstats: the kernel's `XDP_STATISTICS` of every
//! socket (`rx_dropped`, `rx_invalid_descs`, `rx_ring_full`,
//! `rx_fill_ring_empty_descs`, `tx_invalid_descs`, `tx_ring_empty_descs`,
//! read when asked, carried over closed sockets), `rx_recycled`,
//! `tx_recycled`, `recycle_fallbacks`, `tx_copied`, `rx_wakeups`,
//! `tx_wakeups`, `rx_bad_addrs`, `tx_bad_addrs`, the drops by reason
//! `rx_bad_desc_errors` (also in `rx_errors`), `tx_runt_errors`,
//! `tx_oversize_errors` and `tx_layout_errors` (also in `tx_errors`),
//! `xsk_leaked_frames`
//! (frames kept out of the pool because the kernel never released a
//! queue: 0), and the modes: `xdp_native` (1 when the program is, or was
//! last, attached natively; 0 generic) and `xsk_zerocopy` (open sockets
//! bound zero-copy).

mod bpf;
pub mod link;
mod memlock;
mod ring;
mod rx;
mod slot;
mod tx;
mod umem;
mod xsk;

#[cfg(all(test, not(loom)))]
mod tests;

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxQueue, SpecArgs, TxQueue,
};

use bpf::{XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE, XdpProg, XskMap};
use slot::QueueSlot;
use umem::Umem;
use xsk::{STAT_NAMES, SocketConfig};

pub use link::{LinkInfo, link_info};
pub use rx::AfxdpRx;
pub use tx::AfxdpTx;
pub use xsk::BindMode;

/// Spec keys.
const KEYS: &[&str] = &["iface", "queue", "xdp_mode", "bind", "wakeup", "fill"];

/// Most queues per port.
const MAX_QUEUES: u16 = 64;

/// Ring sizes the driver takes (Rx, Tx and completion; fill up to twice).
const MIN_DESC: u16 = 64;
const MAX_DESC: u16 = 16384;

/// Bytes a frame adds to the MTU: Ethernet header and one VLAN tag.
const L2_OVERHEAD: u32 = 18;

/// How the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// On the socket buffer (`XDP_FLAGS_SKB_MODE`).
    Generic,
    /// Native if the driver has it, else generic.
    Auto,
}

/// The `afxdp` driver.
pub struct AfxdpDriver {
    info: DeviceInfo,
    spec: String,
    /// The spec's arguments, as read.
    args: AfxdpArgs,
    link: LinkInfo,
    /// The program and its map, once set up (none without Rx queues).
    prog: Option<XdpProg>,
    map: Option<Arc<XskMap>>,
    /// The attachment: the program is attached while this is open.
    attached: Option<OwnedFd>,
    /// 1 when the program is (or was last) attached natively, 0 otherwise
    /// (read by an xstats source).
    native: Arc<AtomicU64>,
}

/// An afxdp spec's arguments, read and checked; no interface looked up yet.
pub(crate) struct AfxdpArgs {
    iface: String,
    queue: u32,
    mode: XdpMode,
    bind: BindMode,
    need_wakeup: bool,
    fill: Option<u32>,
}

impl AfxdpDriver {
    /// Reads and checks the spec's arguments, looking no interface up.
    pub(crate) fn parse_spec(spec: &PortSpec) -> Result<AfxdpArgs, PortError> {
        let mut args = SpecArgs::new(spec, KEYS);
        let iface = args.require("iface")?.to_owned();
        let queue = args.u64_in("queue", 0..=u16::MAX as u64)?.unwrap_or(0) as u32;
        let mode = match args.choice("xdp_mode", &["native", "generic", "auto"])? {
            Some("native") => XdpMode::Native,
            Some("generic") => XdpMode::Generic,
            _ => XdpMode::Auto,
        };
        let bind = match args.choice("bind", &["copy", "zerocopy", "auto"])? {
            Some("copy") => BindMode::Copy,
            Some("zerocopy") => BindMode::ZeroCopy,
            _ => BindMode::Auto,
        };
        let need_wakeup = args.bool("wakeup")?.unwrap_or(true);
        let fill = args
            .u64_in("fill", MIN_DESC as u64..=2 * MAX_DESC as u64)?
            .map(|f| f as u32);
        args.finish()?;
        let s = spec.as_str();
        if let Some(f) = fill
            && !f.is_power_of_two()
        {
            return Err(PortError::config(format!(
                "afxdp port '{s}': fill ring of {f} entries: not a power of two"
            )));
        }
        Ok(AfxdpArgs {
            iface,
            queue,
            mode,
            bind,
            need_wakeup,
            fill,
        })
    }

    /// Reads the spec's arguments and looks the interface up.
    pub fn from_spec(spec: &PortSpec) -> Result<AfxdpDriver, PortError> {
        let args = Self::parse_spec(spec)?;
        let s = spec.as_str();
        let iface = &args.iface;
        let link = link_info(iface).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidInput => {
                PortError::config(format!("afxdp port '{s}': {e}"))
            }
            _ => PortError::io(
                format!("afxdp port '{s}': looking up interface '{iface}'"),
                e,
            ),
        })?;
        let mac = MacAddr(link.mac.unwrap_or([0x02, 0, 0, 0x58, 0x44, 0]));
        Ok(AfxdpDriver {
            info: DeviceInfo {
                driver: "afxdp",
                max_rx_queues: MAX_QUEUES,
                max_tx_queues: MAX_QUEUES,
                nb_rxd: (MIN_DESC, MAX_DESC),
                nb_txd: (MIN_DESC, MAX_DESC),
                desc_pow2: true,
                max_mtu: 9000,
                rx_offload_capa: Offloads::NONE,
                tx_offload_capa: Offloads::FAST_FREE | Offloads::MULTI_SEG,
                needs_rx_pool: true,
                mac,
            },
            spec: s.to_owned(),
            args,
            link,
            prog: None,
            map: None,
            attached: None,
            native: Arc::new(AtomicU64::new(0)),
        })
    }

    /// An error about this port's configuration.
    fn config_err(&self, msg: impl std::fmt::Display) -> PortError {
        PortError::config(format!("afxdp port '{}': {msg}", self.spec))
    }
}

impl PortDriver for AfxdpDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        let (nrx, ntx) = (config.rxq.len(), config.txq.len());
        let nq = nrx.max(ntx) as u32;
        let have = self.link.rx_queues;
        if self.args.queue + nq > have {
            let missing = self.args.queue.max(have);
            return Err(self.config_err(format_args!(
                "{} has {have} Rx queue{}; queue {missing} does not exist",
                self.args.iface,
                if have == 1 { "" } else { "s" }
            )));
        }
        // Each queue index: its pool, UMEM and ring sizes.
        let mut plans = Vec::with_capacity(nq as usize);
        let mut locked = 0u64;
        for q in 0..nq as usize {
            let pool = config
                .rx_pool_of(q)
                .or(config.rx_pool.as_ref())
                .ok_or_else(|| self.config_err(format_args!("queue {q} has no mempool")))?
                .clone();
            let umem = Umem::of_pool(&pool).map_err(|m| self.config_err(m))?;
            let frame = config.mtu as u32 + L2_OVERHEAD;
            if frame > umem.frame_room() {
                return Err(self.config_err(format_args!(
                    "MTU {} needs {frame}-byte frames; pool '{}' gives the kernel {} bytes per \
                     frame",
                    config.mtu,
                    pool.mempool().name(),
                    umem.frame_room()
                )));
            }
            // A queue index with no queue of one direction still gets that
            // ring (the kernel wants one), sized as the first queue's or
            // the smallest.
            let rx_size = config
                .rxq
                .get(q)
                .or(config.rxq.first())
                .map_or(MIN_DESC, |c| c.nb_rxd) as u32;
            let tx_size = config
                .txq
                .get(q)
                .or(config.txq.first())
                .map_or(MIN_DESC, |c| c.nb_txd) as u32;
            let fill_size = self.args.fill.unwrap_or(2 * rx_size);
            if fill_size < rx_size {
                return Err(self.config_err(format_args!(
                    "a fill ring of {fill_size} entries is smaller than the Rx ring ({rx_size})"
                )));
            }
            if !umem.zero_copy_ok() && self.args.bind == BindMode::ZeroCopy {
                return Err(self.config_err(format_args!(
                    "zero-copy needs a hugepage-backed pool: pool '{}' is on 4 KiB pages, \
                     where most of its {}-byte frames straddle two pages a device need not \
                     see as contiguous; reserve hugepages or use bind=copy",
                    pool.mempool().name(),
                    umem.chunk_size()
                )));
            }
            locked += umem.len();
            plans.push((pool, umem, rx_size, tx_size, fill_size));
        }
        let (pool0, umem0) = (&plans[0].0, &plans[0].1);
        memlock::check(
            &format!(
                "afxdp port '{}': the UMEM ({nq} × {} KiB, the region of pool '{}')",
                self.spec,
                umem0.len().div_ceil(1024),
                pool0.mempool().name()
            ),
            locked,
        )
        .map_err(PortError::Config)?;

        // A port that receives nothing (a generator) needs no program.
        if nrx > 0 {
            let entries = have.max(self.args.queue + nq);
            let map = Arc::new(XskMap::new(entries).map_err(|e| {
                PortError::io(
                    format!("afxdp port '{}': creating the XSKMAP", self.spec),
                    e,
                )
            })?);
            let prog =
                XdpProg::load("sluice_xsk", &bpf::redirect_program(map.raw_fd())).map_err(|e| {
                    PortError::Driver(format!(
                        "afxdp port '{}': the XDP program did not load: {}{}",
                        self.spec,
                        e.err,
                        if e.log.is_empty() {
                            String::new()
                        } else {
                            format!("\nverifier log:\n{}", e.log)
                        }
                    ))
                })?;
            self.map = Some(map);
            self.prog = Some(prog);
        }

        let mut rx: Vec<Box<dyn RxQueue>> = Vec::with_capacity(nrx);
        let mut tx: Vec<Box<dyn TxQueue>> = Vec::with_capacity(ntx);
        for (q, (pool, umem, rx_size, tx_size, fill_size)) in plans.into_iter().enumerate() {
            let cfg = SocketConfig {
                what: format!("afxdp port '{}' queue {q}", self.spec),
                ifname: self.args.iface.clone(),
                ifindex: self.link.ifindex,
                queue_id: self.args.queue + q as u32,
                rx_size,
                tx_size,
                fill_size,
                comp_size: tx_size,
                // Auto tries zero-copy only where the frames allow it.
                bind: match self.args.bind {
                    BindMode::Auto if !umem.zero_copy_ok() => BindMode::Copy,
                    b => b,
                },
                need_wakeup: self.args.need_wakeup,
                umem,
            };
            let map = self.map.as_ref().filter(|_| q < nrx).map(Arc::clone);
            let slot = Arc::new(QueueSlot::new(cfg, map, pool.clone()));
            for (i, name) in STAT_NAMES.iter().enumerate() {
                let s = Arc::clone(&slot);
                counters.xstats.register_source(name, move || s.stats()[i]);
            }
            let s = Arc::clone(&slot);
            counters
                .xstats
                .register_source("xsk_zerocopy", move || s.zerocopy() as u64);
            let s = Arc::clone(&slot);
            counters
                .xstats
                .register_source("xsk_leaked_frames", move || s.leaked());
            if q < nrx {
                rx.push(Box::new(AfxdpRx::new(
                    Arc::clone(&slot),
                    pool.clone(),
                    config.port_id,
                    config.mtu,
                    q,
                    Arc::clone(counters),
                )));
            }
            if q < ntx {
                tx.push(Box::new(AfxdpTx::new(slot, pool, q, Arc::clone(counters))));
            }
        }
        let native = Arc::clone(&self.native);
        counters
            .xstats
            .register_source("xdp_native", move || native.load(Ordering::Relaxed));
        Ok(Queues { rx, tx })
    }

    fn start(&mut self) -> Result<(), PortError> {
        let Some(prog) = self.prog.as_ref() else {
            // No Rx queue, no program.
            return Ok(());
        };
        let tries: &[(u32, &str)] = match self.args.mode {
            XdpMode::Native => &[(XDP_FLAGS_DRV_MODE, "native")],
            XdpMode::Generic => &[(XDP_FLAGS_SKB_MODE, "generic")],
            XdpMode::Auto => &[
                (XDP_FLAGS_DRV_MODE, "native"),
                (XDP_FLAGS_SKB_MODE, "generic"),
            ],
        };
        let mut last = None;
        for &(flags, name) in tries {
            match prog.attach(self.link.ifindex, flags) {
                Ok(fd) => {
                    self.attached = Some(fd);
                    self.native
                        .store((flags == XDP_FLAGS_DRV_MODE) as u64, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => last = Some((name, e)),
            }
        }
        let (name, e) = last.expect("at least one mode was tried");
        if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST)) {
            let other = link_info(&self.args.iface)
                .ok()
                .and_then(|l| l.xdp)
                .map_or(String::new(), |(_, id)| format!(" (program id {id})"));
            return Err(self.config_err(format_args!(
                "{} already has an XDP program attached{other}; detach it first",
                self.args.iface
            )));
        }
        Err(PortError::io(
            format!(
                "afxdp port '{}': attaching the XDP program to {} in {name} mode",
                self.spec, self.args.iface
            ),
            e,
        ))
    }

    fn stop(&mut self) {
        // Closing the link detaches the program.
        self.attached = None;
    }
}
