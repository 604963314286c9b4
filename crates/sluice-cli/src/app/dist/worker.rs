//! The worker job of `sluice dist`: swap each packet's MAC addresses and
//! count packets per flow (flow = RSS hash), noting when a flow tag changes
//! worker.
//!
//! Per worker, a [`FlowCounts`] table (open addressing, sized once, no
//! allocation per packet). Shared by all workers, an [`Owners`] table: per
//! flow tag (the low 15 bits of the hash, what the distributor keeps
//! affinity by), the last worker that handled it. A worker that finds
//! another worker's id there counts a *move*. The distributor never has one
//! tag at two workers at once, and each hand-over goes through its
//! Release/Acquire handshake (the old worker's return, then the new
//! worker's batch), so relaxed loads and stores of the table are ordered
//! by it: one writer per tag at a time, never a lost update.

use std::sync::atomic::{AtomicU8, Ordering};

use sluice::counter::Counter;
use sluice::distributor::{BURST_SIZE, flow_tag};
use sluice::mbuf::{Burst, BurstSlice};

use super::api::WorkerSide;

/// Slots of a worker's flow table (a power of two); at most 3/4 are used.
pub const FLOW_SLOTS: usize = 1 << 14;

/// Packets per flow seen by one worker: an open-addressing table with
/// linear probing, keyed by the RSS hash.
///
/// Invariant: `keys[i]` is 0 (empty) or `1 << 32 | hash`; `counts[i]` is
/// that flow's packets; `len` slots are used, at most `3/4` of them. Flows
/// that find the table at its limit are counted in `untracked` only.
#[derive(Debug, Clone)]
pub struct FlowCounts {
    keys: Box<[u64]>,
    counts: Box<[u64]>,
    len: usize,
    /// Packets of flows that did not fit.
    pub untracked: u64,
}

impl FlowCounts {
    /// An empty table of `slots` slots (a power of two).
    pub fn new(slots: usize) -> FlowCounts {
        debug_assert!(slots.is_power_of_two());
        FlowCounts {
            keys: vec![0; slots].into_boxed_slice(),
            counts: vec![0; slots].into_boxed_slice(),
            len: 0,
            untracked: 0,
        }
    }

    /// Counts one packet of flow `hash`.
    #[inline]
    pub fn add(&mut self, hash: u32) {
        let key = 1 << 32 | u64::from(hash);
        let mask = self.keys.len() - 1;
        // Fibonacci hashing spreads sequential hashes too.
        let mut i = (u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize & mask;
        loop {
            let k = self.keys[i];
            if k == key {
                self.counts[i] += 1;
                return;
            }
            if k == 0 {
                if 4 * (self.len + 1) > 3 * self.keys.len() {
                    self.untracked += 1;
                    return;
                }
                self.keys[i] = key;
                self.counts[i] = 1;
                self.len += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Flows counted.
    pub fn flows(&self) -> usize {
        self.len
    }

    /// Every flow counted and its packets.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.keys
            .iter()
            .zip(self.counts.iter())
            .filter(|(k, _)| **k != 0)
            .map(|(k, c)| (*k as u32, *c))
    }
}

/// Per flow tag, the last worker that handled it (id + 1; 0 = none yet).
#[derive(Debug)]
pub struct Owners(Box<[AtomicU8]>);

impl Default for Owners {
    fn default() -> Self {
        Owners((0..=0x7fff).map(|_| AtomicU8::new(0)).collect())
    }
}

/// A worker's packet counter, alone in its cache lines (workers bump theirs
/// on every batch; the stats thread reads them).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct WorkerCounter(pub Counter);

/// What a worker did over the run.
#[derive(Debug, Clone)]
pub struct WorkerOut {
    /// Packets handled.
    pub packets: u64,
    /// Times it took a flow tag another worker had handled last.
    pub moves_in: u64,
    /// Its flows.
    pub flows: FlowCounts,
}

/// Runs worker `id` until the distributor is gone: takes batches, swaps
/// MACs, counts; hands each batch back with the next request.
pub fn work<W: WorkerSide>(
    mut w: W,
    id: usize,
    owners: &Owners,
    counter: &WorkerCounter,
) -> WorkerOut {
    let me = id as u8 + 1;
    let mut out = WorkerOut {
        packets: 0,
        moves_in: 0,
        flows: FlowCounts::new(FLOW_SLOTS),
    };
    let mut held = Burst::<BURST_SIZE>::new();
    let mut fresh = Burst::<BURST_SIZE>::new();
    while w.get_pkt(&mut held, &mut fresh).is_ok() {
        job(&mut fresh, me, owners, &mut out);
        counter.0.add(fresh.len() as u64);
        std::mem::swap(&mut held, &mut fresh);
    }
    out
}

/// The per-packet job on one batch.
#[inline]
fn job(batch: &mut BurstSlice, me: u8, owners: &Owners, out: &mut WorkerOut) {
    for m in batch.iter_mut() {
        if let Ok(d) = m.data_mut()
            && d.len() >= 12
        {
            let (dst, rest) = d.split_at_mut(6);
            dst.swap_with_slice(&mut rest[..6]);
        }
        let hash = m.rss_hash();
        out.flows.add(hash);
        let owner = &owners.0[flow_tag(hash) as usize];
        // Relaxed: the distributor's handshake orders the last holder's
        // store before this load (see the module docs).
        let last = owner.load(Ordering::Relaxed);
        if last != me {
            if last != 0 {
                out.moves_in += 1;
            }
            owner.store(me, Ordering::Relaxed);
        }
    }
    out.packets += batch.len() as u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_counts_count_per_flow_and_stop_at_three_quarters() {
        let mut f = FlowCounts::new(16);
        for h in [0, 5, 5, 0, 7, u32::MAX, 5] {
            f.add(h);
        }
        let mut v: Vec<_> = f.iter().collect();
        v.sort_unstable();
        assert_eq!(v, [(0, 2), (5, 3), (7, 1), (u32::MAX, 1)]);
        assert_eq!((f.flows(), f.untracked), (4, 0));
        for h in 100..120 {
            f.add(h);
        }
        assert_eq!(f.flows(), 12);
        assert_eq!(f.untracked, 12);
        // A flow already in is still counted.
        f.add(5);
        assert_eq!(f.iter().find(|(h, _)| *h == 5), Some((5, 4)));
    }

    #[test]
    fn the_job_swaps_macs_counts_flows_and_moves() {
        use sluice::mbuf::{MbufPool, MbufPoolConfig};
        let pool = MbufPool::new(MbufPoolConfig {
            size: 63,
            cache_size: 0,
            ..Default::default()
        })
        .unwrap();
        let owners = Owners::default();
        let mut a = WorkerOut {
            packets: 0,
            moves_in: 0,
            flows: FlowCounts::new(64),
        };
        let mut b = a.clone();
        let mut batch = Burst::<8>::new();
        for h in [1u32, 2, 1, 0x8001] {
            let mut frame = [0u8; 60];
            frame[..6].copy_from_slice(&[1; 6]);
            frame[6..12].copy_from_slice(&[2; 6]);
            let mut m = pool.alloc_from_slice(&frame).unwrap();
            m.set_rss_hash(h).unwrap();
            batch.push(m).unwrap();
        }
        job(&mut batch, 1, &owners, &mut a);
        assert_eq!((a.packets, a.moves_in, a.flows.flows()), (4, 0, 3));
        for m in batch.iter() {
            assert_eq!(&m.data()[..12], &[2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1]);
        }
        // Worker 2 takes tags 1 (two flows: 1 and 0x8001 share it) and 2.
        job(&mut batch, 2, &owners, &mut b);
        assert_eq!((b.packets, b.moves_in), (4, 2));
        assert_eq!(&batch[0].data()[..6], &[1; 6]);
        drop(batch);
        assert!(pool.is_full());
    }
}
