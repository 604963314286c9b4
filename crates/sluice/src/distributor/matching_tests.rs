//! Tests of the tag matchers: literal cases, every implementation this CPU
//! runs against an independent definition, and a proptest of the same.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::matching::*;
use super::{BURST_SIZE, DistError, MAX_WORKERS};

/// Every matcher this CPU can run.
fn matchers() -> Vec<Matcher> {
    MatchImpl::ALL
        .into_iter()
        .filter_map(|imp| Matcher::new(imp).ok())
        .collect()
}

/// The definition, spelled out independently of `find_scalar`.
fn oracle(tags: &[WorkerTags], flows: &[u16; BURST_SIZE]) -> [u8; BURST_SIZE] {
    let mut out = [0u8; BURST_SIZE];
    for j in 0..BURST_SIZE {
        if flows[j] == 0 {
            continue;
        }
        'workers: for (w, t) in tags.iter().enumerate().take(MAX_WORKERS) {
            for s in 0..16 {
                if t.0[s] == flows[j] {
                    out[j] = w as u8 + 1;
                    break 'workers;
                }
            }
        }
    }
    out
}

/// `find_matches` with every available matcher; checks they all agree with
/// the oracle and returns the answer. `matches` starts as garbage, so a slot
/// left unwritten shows.
fn run(tags: &[WorkerTags], flows: [u16; BURST_SIZE]) -> [u8; BURST_SIZE] {
    let want = oracle(tags, &flows);
    for m in matchers() {
        let mut got = [0xa5u8; BURST_SIZE];
        m.find_matches(tags, &flows, &mut got);
        assert_eq!(got, want, "{} on flows {flows:?}", m.imp().name());
    }
    want
}

/// A worker holding `inflight` in slots 0.. and `backlog` in slots 8..
fn worker(inflight: &[u16], backlog: &[u16]) -> WorkerTags {
    let mut t = WorkerTags::default();
    t.0[..inflight.len()].copy_from_slice(inflight);
    t.0[8..8 + backlog.len()].copy_from_slice(backlog);
    t
}

#[test]
fn no_match_gives_zeros() {
    let tags = [
        worker(&[1, 2, 3], &[4]),
        worker(&[5, 6, 7, 8, 9, 10, 11, 12], &[13; 8]),
    ];
    assert_eq!(run(&tags, [20, 21, 22, 23, 24, 25, 26, 27]), [0; 8]);
}

#[test]
fn match_in_inflight_half() {
    for slot in 0..8 {
        let mut t = WorkerTags::default();
        t.0[slot] = 777;
        let got = run(&[worker(&[1], &[]), t], [3, 777, 9, 777, 0, 0, 0, 777]);
        assert_eq!(got, [0, 2, 0, 2, 0, 0, 0, 2], "slot {slot}");
    }
}

#[test]
fn match_in_backlog_half() {
    for slot in 8..16 {
        let mut t = WorkerTags::default();
        t.0[slot] = 0x7fff;
        let got = run(&[t], [0x7fff, 1, 2, 3, 4, 5, 6, 0x7fff]);
        assert_eq!(got, [1, 0, 0, 0, 0, 0, 0, 1], "slot {slot}");
    }
}

#[test]
fn lowest_worker_wins_on_duplicates() {
    let tags = [
        worker(&[10], &[]),
        worker(&[20, 30], &[10]),
        worker(&[], &[30, 20, 40]),
        worker(&[40, 50], &[50]),
    ];
    assert_eq!(
        run(&tags, [40, 30, 20, 10, 50, 60, 10, 40]),
        [3, 2, 2, 1, 4, 0, 1, 3]
    );
}

#[test]
fn every_lane_answers_independently() {
    // Flow j held by worker j only: catches lanes crossed or dropped when
    // packing the per-flow results.
    let tags: Vec<WorkerTags> = (0..8u16).map(|j| worker(&[], &[100 + j])).collect();
    let flows = [100, 101, 102, 103, 104, 105, 106, 107];
    assert_eq!(run(&tags, flows), [1, 2, 3, 4, 5, 6, 7, 8]);
    let rev = [107, 106, 105, 104, 103, 102, 101, 100];
    assert_eq!(run(&tags, rev), [8, 7, 6, 5, 4, 3, 2, 1]);
}

#[test]
fn flow_zero_never_matches() {
    // Empty slots are 0, so a naive compare would match worker 1.
    let tags = [WorkerTags::default(), worker(&[5], &[])];
    assert_eq!(
        run(&tags, [0, 5, 0, 0, 0, 0, 0, 0]),
        [0, 2, 0, 0, 0, 0, 0, 0]
    );
    // Even with every slot of every worker 0, and with all flows 0.
    assert_eq!(run(&tags, [0; 8]), [0; 8]);
}

#[test]
fn all_flows_found_early_still_exact() {
    // All flows answered by worker 0: the later workers (which also hold
    // them) must not change anything.
    let all = worker(&[1, 2, 3, 4, 5, 6, 7, 8], &[]);
    let tags = [all, all, all];
    assert_eq!(run(&tags, [8, 7, 6, 5, 4, 3, 2, 1]), [1; 8]);
    // One flow left open after worker 0 is answered by worker 2.
    let tags = [all, worker(&[50], &[]), worker(&[], &[9])];
    assert_eq!(
        run(&tags, [1, 2, 3, 9, 5, 6, 7, 8]),
        [1, 1, 1, 3, 1, 1, 1, 1]
    );
}

#[test]
fn sixty_four_workers_match_in_the_last() {
    let mut tags = vec![worker(&[1, 2, 3, 4, 5, 6, 7, 8], &[9, 10, 11, 12, 13, 14, 15, 16]); 64];
    tags[63] = worker(&[], &[0, 0, 0, 0, 0, 0, 0, 999]);
    assert_eq!(
        run(&tags, [999, 1, 0, 999, 16, 17, 0, 999]),
        [64, 1, 0, 64, 1, 0, 0, 64]
    );
}

#[test]
fn workers_past_max_are_not_looked_at() {
    let mut tags = vec![WorkerTags::default(); MAX_WORKERS + 1];
    tags[MAX_WORKERS] = worker(&[42], &[]);
    tags[MAX_WORKERS - 1] = worker(&[43], &[]);
    assert_eq!(
        run(&tags, [42, 43, 0, 0, 0, 0, 0, 0]),
        [0, 64, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn empty_tags_gives_zeros() {
    assert_eq!(run(&[], [1, 2, 3, 4, 5, 6, 7, 0x7fff]), [0; 8]);
}

#[test]
fn names_and_order() {
    let names: Vec<_> = MatchImpl::ALL.iter().map(|i| i.name()).collect();
    assert_eq!(names, ["avx2", "sse2", "scalar"]);
}

#[test]
fn scalar_is_always_available() {
    assert!(Matcher::available(MatchImpl::Scalar));
    assert_eq!(
        Matcher::new(MatchImpl::Scalar).unwrap().imp(),
        MatchImpl::Scalar
    );
}

#[test]
fn new_agrees_with_available() {
    for imp in MatchImpl::ALL {
        match Matcher::new(imp) {
            Ok(m) => {
                assert!(Matcher::available(imp), "{}", imp.name());
                assert_eq!(m.imp(), imp);
            }
            Err(e) => {
                assert!(!Matcher::available(imp), "{}", imp.name());
                assert_eq!(e, DistError::MatchUnavailable { name: imp.name() });
            }
        }
    }
}

#[test]
fn unavailable_is_an_error_naming_it() {
    // What `new` answers on a CPU without the feature.
    let e = Matcher::checked(MatchImpl::Avx2, false).unwrap_err();
    assert_eq!(e, DistError::MatchUnavailable { name: "avx2" });
    assert_eq!(e.to_string(), "this CPU cannot run avx2 tag matching");
    let e = Matcher::checked(MatchImpl::Sse2, false).unwrap_err();
    assert_eq!(e.to_string(), "this CPU cannot run sse2 tag matching");
}

#[test]
fn best_is_the_first_available() {
    let best = Matcher::best();
    assert!(Matcher::available(best.imp()));
    let first = MatchImpl::ALL.into_iter().find(|&i| Matcher::available(i));
    assert_eq!(Some(best.imp()), first);
    #[cfg(target_arch = "x86_64")]
    {
        // SSE2 is part of the x86-64 baseline.
        assert!(Matcher::available(MatchImpl::Sse2));
        assert_ne!(best.imp(), MatchImpl::Scalar);
        if std::arch::is_x86_feature_detected!("avx2") {
            assert_eq!(best.imp().name(), "avx2");
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    assert_eq!(best.imp(), MatchImpl::Scalar);
}

/// A tag table: 0..=64 workers, slots drawn from 0..=12 (0 = empty) so that
/// matches and duplicates across workers are frequent.
fn tag_table() -> impl Strategy<Value = Vec<WorkerTags>> {
    proptest::collection::vec(
        proptest::array::uniform16(0u16..=12).prop_map(WorkerTags),
        0..=64,
    )
}

/// The scalar matcher gives the oracle's answer for `flows` against
/// `tags`, and every available implementation the scalar one's, each
/// writing every byte of its output.
fn check_every_matcher(
    tags: &[WorkerTags],
    flows: &[u16; BURST_SIZE],
) -> Result<(), TestCaseError> {
    let mut want = [0xa5u8; BURST_SIZE];
    Matcher::new(MatchImpl::Scalar)
        .unwrap()
        .find_matches(tags, flows, &mut want);
    prop_assert_eq!(want, oracle(tags, flows));
    for matcher in matchers() {
        let mut got = [0x5au8; BURST_SIZE];
        matcher.find_matches(tags, flows, &mut got);
        prop_assert_eq!(got, want, "{}", matcher.imp().name());
    }
    Ok(())
}

proptest! {
    /// Every available implementation gives exactly the scalar answer (and
    /// the scalar one the oracle's).
    #[test]
    fn implementations_agree(
        tags in tag_table(),
        flows in proptest::array::uniform8(0u16..=14),
    ) {
        check_every_matcher(&tags, &flows)?;
    }

    /// The same over the whole tag range, where matches are rare and the
    /// high bit of a 16-bit tag is exercised.
    #[test]
    fn implementations_agree_wide_tags(
        tags in proptest::collection::vec(
            proptest::array::uniform16(any::<u16>()).prop_map(WorkerTags), 0..=8),
        picks in proptest::array::uniform8((any::<bool>(), 0usize..128, any::<u16>())),
    ) {
        // Half the flows picked from the table, so some do match.
        let mut flows = [0u16; BURST_SIZE];
        for (f, &(from_table, at, v)) in flows.iter_mut().zip(&picks) {
            *f = if from_table && !tags.is_empty() { tags[at % tags.len()].0[at % 16] } else { v };
        }
        check_every_matcher(&tags, &flows)?;
    }
}
