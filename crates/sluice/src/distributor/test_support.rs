//! Checks shared by the tests of both distributors.

use std::collections::HashMap;

use crate::mbuf::{Burst, BurstSlice};

/// The sequence numbers (`udata64`) of the packets in `b`.
pub(super) fn seqs(b: &BurstSlice) -> Vec<u64> {
    b.iter().map(|m| m.udata64()).collect()
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
