//! Packets and checks shared by the tests of both distributors.

use std::collections::HashMap;

use crate::mbuf::{Burst, BurstSlice, Mbuf, MbufPool};

/// `n` packets from `pool` with RSS hash `hash(seq)` and sequence number
/// (`udata64`) `seq`, for `seq` from `seq0`.
pub(super) fn hashed_packets(
    pool: &MbufPool,
    n: usize,
    seq0: u64,
    hash: impl Fn(u64) -> u32,
) -> Vec<Mbuf> {
    (seq0..seq0 + n as u64)
        .map(|seq| {
            let mut m = pool.alloc().expect("pool has room");
            m.set_rss_hash(hash(seq)).unwrap();
            m.set_udata64(seq).unwrap();
            m
        })
        .collect()
}

/// `packets` in a burst of capacity `N`.
pub(super) fn burst_of<const N: usize>(packets: Vec<Mbuf>) -> Burst<N> {
    let mut burst = Burst::<N>::new();
    for m in packets {
        burst.push(m).map_err(|_| ()).expect("burst has room");
    }
    burst
}

/// [`hashed_packets`] in a burst of capacity `N`.
pub(super) fn hashed_burst<const N: usize>(
    pool: &MbufPool,
    n: usize,
    seq0: u64,
    hash: impl Fn(u64) -> u32,
) -> Burst<N> {
    burst_of(hashed_packets(pool, n, seq0, hash))
}

/// The sequence numbers (`udata64`) of the packets in `burst`.
pub(super) fn seqs(burst: &BurstSlice) -> Vec<u64> {
    burst.iter().map(|m| m.udata64()).collect()
}

/// Takes returned packets with `returned_pkts` until it gives none: how
/// many times each sequence number came back.
pub(super) fn count_returned(
    mut returned_pkts: impl FnMut(&mut BurstSlice) -> usize,
) -> HashMap<u64, usize> {
    let mut returned = HashMap::new();
    let mut back = Burst::<32>::new();
    while returned_pkts(&mut back) != 0 {
        for s in seqs(&back) {
            *returned.entry(s).or_default() += 1;
        }
        back.clear();
    }
    returned
}

/// Takes every returned packet with `returned_pkts` (called until it gives
/// none, at most 1000 times) and frees it: the sequence numbers, in the
/// order they came back.
pub(super) fn take_returns(mut returned_pkts: impl FnMut(&mut BurstSlice) -> usize) -> Vec<u64> {
    let mut taken = Vec::new();
    let mut back = Burst::<32>::new();
    for _ in 0..1000 {
        let n = returned_pkts(&mut back);
        assert_eq!(n, back.len(), "returned_pkts counts what it gives");
        if n == 0 {
            return taken;
        }
        taken.extend(seqs(&back));
        back.clear();
    }
    panic!("returns still coming after {} packets", taken.len());
}

/// Each of `n` packets reached a worker exactly once (`handed`), and came
/// back at most once (`returned`), none that was not handed out.
pub(super) fn assert_handed_once_returned_at_most_once(
    handed: &HashMap<u64, usize>,
    n: usize,
    returned: &HashMap<u64, usize>,
) {
    assert!(handed.values().all(|&n| n == 1), "handed out: {handed:?}");
    assert_eq!(handed.len(), n);
    assert!(returned.values().all(|&n| n == 1), "returned: {returned:?}");
    assert!(returned.keys().all(|s| handed.contains_key(s)));
}

/// Checks packets as they come back from the distributor: each flow's
/// (RSS hash's) sequence numbers only rise; counts them.
#[derive(Default)]
pub(super) struct ReturnOrder {
    last_seq: HashMap<u32, u64>,
    /// Packets checked so far.
    pub(super) returned: u64,
}

impl ReturnOrder {
    /// Checks the packets of `back`, and empties it.
    pub(super) fn check_and_clear<const N: usize>(&mut self, back: &mut Burst<N>) {
        for m in back.iter() {
            if let Some(prev) = self.last_seq.insert(m.rss_hash(), m.udata64()) {
                assert!(
                    prev < m.udata64(),
                    "returns of flow {}: {prev} then {}",
                    m.rss_hash(),
                    m.udata64()
                );
            }
        }
        self.returned += back.len() as u64;
        back.clear();
    }
}
