//! `null`: a port that makes packets from nothing and sends them nowhere, as
//! DPDK's `net_null`. Rx allocates an mbuf per packet and gives it a length;
//! Tx frees what it is given. Forwarding between two null ports therefore
//! measures the whole buffer cycle — alloc, forward, free — and nothing else.
//!
//! Spec: `null[:size=N,copy=BOOL,queues=N]`
//! - `size` (14..=9000, default 64): length of each received packet.
//! - `copy` (default false): write a fixed Ethernet/IPv4/UDP frame into each
//!   received packet (as `net_null`'s `copy` does) instead of leaving the
//!   data as it is.
//! - `queues` is not a key: the port has as many queues as its configuration
//!   asks (up to 64).

use std::sync::Arc;

use crate::mbuf::{BurstSlice, MbufHeader, MbufPool, RearmData};
use crate::net::MacAddr;
use crate::port::{
    DeviceInfo, Offloads, PortConfig, PortCounters, PortDriver, PortError, PortSpec, Queues,
    RxQueue, SinkTx, SpecArgs, TxQueue,
};

/// Spec keys.
const KEYS: &[&str] = &["size", "copy"];

/// The `null` driver.
pub struct NullDriver {
    info: DeviceInfo,
    size: u16,
    copy: bool,
}

impl NullDriver {
    /// Reads the spec's arguments.
    pub fn from_spec(spec: &PortSpec) -> Result<NullDriver, PortError> {
        let mut args = SpecArgs::new(spec, KEYS);
        let size = args.u64_in("size", 14..=9000)?.unwrap_or(64) as u16;
        let copy = args.bool("copy")?.unwrap_or(false);
        args.finish()?;
        Ok(NullDriver::new(size, copy))
    }

    /// Packets of `size` bytes; `copy` writes a frame into each.
    pub fn new(size: u16, copy: bool) -> NullDriver {
        NullDriver {
            info: DeviceInfo {
                driver: "null",
                max_rx_queues: 64,
                max_tx_queues: 64,
                nb_rxd: (1, u16::MAX),
                nb_txd: (1, u16::MAX),
                desc_pow2: false,
                max_mtu: 9000,
                rx_offload_capa: Offloads::NONE,
                tx_offload_capa: Offloads::FAST_FREE | Offloads::MULTI_SEG,
                needs_rx_pool: true,
                mac: MacAddr([0x02, 0, 0, 0x4e, 0x55, 0]),
            },
            size,
            copy,
        }
    }
}

impl PortDriver for NullDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn setup(
        &mut self,
        config: &PortConfig,
        counters: &Arc<PortCounters>,
    ) -> Result<Queues, PortError> {
        let frame = self.copy.then(|| template_frame(self.size));
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::new();
        for q in 0..config.rxq.len() {
            let pool = config.needed_rx_pool(q).clone();
            if self.size > pool.data_room() {
                return Err(PortError::config(format!(
                    "null: packets of {} bytes do not fit the pool's data room of {}",
                    self.size,
                    pool.data_room()
                )));
            }
            rx.push(Box::new(NullRx {
                rearm: pool.rearm_data(config.port_id),
                pool,
                size: self.size,
                frame: frame.clone(),
                counters: Arc::clone(counters),
                q,
            }));
        }
        let tx = (0..config.txq.len())
            .map(|q| Box::new(SinkTx::new(counters, q)) as Box<dyn TxQueue>)
            .collect();
        Ok(Queues { rx, tx })
    }
}

/// An Rx queue: allocation straight into the burst.
struct NullRx {
    pool: MbufPool,
    /// The rearm word for this queue's buffers (headroom, refcount 1, one
    /// segment, this port).
    rearm: RearmData,
    size: u16,
    /// The frame `copy` writes, if set.
    frame: Option<Arc<[u8]>>,
    counters: Arc<PortCounters>,
    q: usize,
}

impl RxQueue for NullRx {
    #[inline]
    fn rx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let stats = &self.counters.rx[self.q];
        let n = burst.free();
        if n == 0 {
            stats.record_burst(0, 0);
            return 0;
        }
        let slots = burst.spare_slots(n);
        if self.pool.mempool().get_bulk(slots).is_err() {
            stats.nombuf.inc();
            stats.record_burst(0, 0);
            return 0;
        }
        for e in slots.iter() {
            // SAFETY: a buffer just taken from this mbuf pool: it satisfies
            // the free-buffer invariants, and no one else can reach it.
            let h = unsafe { &mut *e.as_ptr().cast::<MbufHeader>() };
            h.rearm(self.rearm);
            h.set_rx(0, 0, self.size, 0, 0);
            if let Some(f) = &self.frame {
                // SAFETY: the data room holds at least `size` bytes (checked
                // at setup) from the default headroom the rearm word set.
                let data = unsafe {
                    std::slice::from_raw_parts_mut(
                        h.buf_addr.add(self.rearm.data_off as usize),
                        f.len(),
                    )
                };
                data.copy_from_slice(f);
            }
        }
        let len = burst.len() + n;
        // SAFETY: the `n` spare slots now hold fresh mbufs we own.
        unsafe { burst.set_len(len) };
        stats.record_burst(n, n as u64 * self.size as u64);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn stop(&mut self) {}
}

/// An Ethernet/IPv4/UDP frame of `size` bytes (broadcast, 10.0.0.1 →
/// 10.0.0.2, ports 1024 → 1024), or as much of one as fits.
fn template_frame(size: u16) -> Arc<[u8]> {
    let mut f = vec![0u8; size as usize];
    let mut hdr = [0u8; 42];
    hdr[0..6].copy_from_slice(&[0xff; 6]);
    hdr[6..12].copy_from_slice(&[0x02, 0, 0, 0x4e, 0x55, 0]);
    hdr[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (size as usize).saturating_sub(14).min(u16::MAX as usize) as u16;
    hdr[14] = 0x45;
    hdr[16..18].copy_from_slice(&ip_len.to_be_bytes());
    hdr[22] = 64;
    hdr[23] = 17;
    hdr[26..30].copy_from_slice(&[10, 0, 0, 1]);
    hdr[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let ck = crate::net::checksum::checksum(&hdr[14..34]);
    hdr[24..26].copy_from_slice(&ck.to_be_bytes());
    hdr[34..36].copy_from_slice(&1024u16.to_be_bytes());
    hdr[36..38].copy_from_slice(&1024u16.to_be_bytes());
    hdr[38..40].copy_from_slice(&ip_len.saturating_sub(20).to_be_bytes());
    let k = f.len().min(hdr.len());
    f[..k].copy_from_slice(&hdr[..k]);
    f.into()
}

#[cfg(all(test, not(loom)))]
mod tests;
