//! Interleaved rounds: every case of a comparison measured in turn, one
//! slice each per round, the order changing from round to round.

/// Rounds for `ops` operations per case: as many as fit slices of at least
/// `min_slice` operations, at least one and at most `max_rounds`.
pub fn rounds(ops: u64, min_slice: u64, max_rounds: u64) -> u64 {
    (ops / min_slice.max(1)).clamp(1, max_rounds.max(1))
}

/// The order in which `cases` cases run in round `round`.
///
/// The orders cycle through every rotation of `0, 1, .., cases - 1`, then
/// every rotation of the reverse (leaving out those already seen): each
/// case runs first equally often, and with three cases or fewer each runs
/// right after each other case equally often too, so neither a warm or
/// cold start nor the case before it favours one case. With two cases the
/// order alternates; with three, the six orders are every permutation.
pub fn round_order(round: usize, cases: usize) -> Vec<usize> {
    if cases == 0 {
        return Vec::new();
    }
    let rotate = |start: usize, ascending: bool| -> Vec<usize> {
        (0..cases)
            .map(|k| {
                let i = (start + k) % cases;
                if ascending { i } else { cases - 1 - i }
            })
            .collect()
    };
    let mut orders: Vec<Vec<usize>> = (0..cases).map(|s| rotate(s, true)).collect();
    for s in 0..cases {
        let order = rotate(s, false);
        if !orders.contains(&order) {
            orders.push(order);
        }
    }
    orders.swap_remove(round % orders.len())
}

/// Runs `rounds` rounds over `cases` cases: `slice(round, case)` for each
/// case in [`round_order`]'s order. Stops at the first error.
pub fn interleave<E>(
    rounds: usize,
    cases: usize,
    mut slice: impl FnMut(usize, usize) -> Result<(), E>,
) -> Result<(), E> {
    for round in 0..rounds {
        for case in round_order(round, cases) {
            slice(round, case)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_fit_whole_slices_within_bounds() {
        assert_eq!(rounds(1, 1 << 17, 24), 1);
        assert_eq!(rounds(3 << 17, 1 << 17, 24), 3);
        assert_eq!(rounds(1 << 25, 1 << 17, 24), 24);
        assert_eq!(rounds(100, 0, 0), 1);
    }

    #[test]
    fn three_cases_cycle_through_every_permutation() {
        let orders: Vec<Vec<usize>> = (0..7).map(|r| round_order(r, 3)).collect();
        assert_eq!(
            orders,
            [
                vec![0, 1, 2],
                vec![1, 2, 0],
                vec![2, 0, 1],
                vec![2, 1, 0],
                vec![1, 0, 2],
                vec![0, 2, 1],
                vec![0, 1, 2],
            ]
        );
    }

    #[test]
    fn two_cases_alternate_and_one_case_repeats() {
        let two: Vec<Vec<usize>> = (0..4).map(|r| round_order(r, 2)).collect();
        assert_eq!(two, [vec![0, 1], vec![1, 0], vec![0, 1], vec![1, 0]]);
        assert_eq!(round_order(5, 1), [0]);
        assert!(round_order(0, 0).is_empty());
        // Four cases: the rotations, then those of the reverse.
        assert_eq!(round_order(1, 4), [1, 2, 3, 0]);
        assert_eq!(round_order(4, 4), [3, 2, 1, 0]);
        assert_eq!(round_order(5, 4), [2, 1, 0, 3]);
    }

    #[test]
    fn interleave_runs_each_case_once_per_round_and_stops_at_an_error() {
        let mut seen = Vec::new();
        interleave::<()>(3, 3, |r, c| {
            seen.push((r, c));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                (0, 0),
                (0, 1),
                (0, 2),
                (1, 1),
                (1, 2),
                (1, 0),
                (2, 2),
                (2, 0),
                (2, 1)
            ]
        );
        let mut calls = 0;
        let r = interleave(4, 2, |r, c| {
            calls += 1;
            if (r, c) == (1, 0) {
                Err("case 0 failed")
            } else {
                Ok(())
            }
        });
        assert_eq!(r, Err("case 0 failed"));
        // Round 0: 0, 1; round 1: 1, then 0 fails.
        assert_eq!(calls, 4);
    }
}
