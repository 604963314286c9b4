//! What the IPv4 and IPv6 table tests share: the naive reference both
//! tables are checked against, and the random operations their proptests
//! run.

use std::collections::BTreeMap;
use std::fmt::Debug;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::{Lpm4, Lpm6, LpmError};

/// An address as one number: `u32` for IPv4, `u128` for IPv6.
pub(super) trait Addr: Copy + Ord + Debug + 'static {
    /// The lowest and the highest address.
    const ZERO: Self;
    const MAX: Self;
    /// The address with all but its leading `depth` bits cleared.
    fn masked(self, depth: u8) -> Self;
    /// The last address of the prefix of `depth` bits that holds `self`.
    fn last_of(self, depth: u8) -> Self;
    /// The address before and the one after (wrapping).
    fn before(self) -> Self;
    fn after(self) -> Self;
}

macro_rules! addr_number {
    ($t:ty) => {
        impl Addr for $t {
            const ZERO: Self = 0;
            const MAX: Self = <$t>::MAX;
            fn masked(self, depth: u8) -> Self {
                if depth == 0 {
                    0
                } else {
                    self & (<$t>::MAX << (<$t>::BITS - u32::from(depth)))
                }
            }
            fn last_of(self, depth: u8) -> Self {
                self | !(<$t>::MAX).masked(depth)
            }
            fn before(self) -> Self {
                self.wrapping_sub(1)
            }
            fn after(self) -> Self {
                self.wrapping_add(1)
            }
        }
    };
}

addr_number!(u32);
addr_number!(u128);

/// The naive reference: a linear scan for the longest matching route.
pub(super) struct Reference<A> {
    /// Next hops by (depth, prefix).
    pub(super) routes: BTreeMap<(u8, A), u32>,
}

impl<A> Default for Reference<A> {
    fn default() -> Self {
        Reference {
            routes: BTreeMap::new(),
        }
    }
}

impl<A: Addr> Reference<A> {
    /// The next hop of the longest route holding `addr`.
    pub(super) fn lookup(&self, addr: A) -> Option<u32> {
        self.routes
            .iter()
            .filter(|((depth, prefix), _)| addr.masked(*depth) == *prefix)
            .max_by_key(|((depth, _), _)| *depth)
            .map(|(_, nh)| *nh)
    }

    /// The addresses worth looking up: `probes`, each route's first and
    /// last address and their outer neighbours, and both ends of the space.
    pub(super) fn probe_addrs(&self, probes: &[A]) -> Vec<A> {
        let mut addrs: Vec<A> = probes.to_vec();
        for &(depth, prefix) in self.routes.keys() {
            let last = prefix.last_of(depth);
            addrs.extend([prefix, prefix.before(), last, last.after()]);
        }
        addrs.extend([A::ZERO, A::MAX]);
        addrs
    }
}

/// One step of a proptest's random sequence.
#[derive(Debug, Clone)]
pub(super) enum Op<A> {
    Add {
        prefix: A,
        depth: u8,
        nh: u32,
    },
    /// Delete the `n % len`-th existing route.
    DeleteExisting(usize),
    DeleteRandom {
        prefix: A,
        depth: u8,
    },
}

/// Steps over addresses from `addr` and depths from `depth`: mostly adds,
/// some deletes of existing routes, a few of random ones.
pub(super) fn op<A, SA, SD>(
    addr: impl Fn() -> SA,
    depth: impl Fn() -> SD,
) -> impl Strategy<Value = Op<A>>
where
    A: Addr,
    SA: Strategy<Value = A> + 'static,
    SD: Strategy<Value = u8> + 'static,
{
    prop_oneof![
        6 => (addr(), depth(), 0u32..1000).prop_map(|(prefix, depth, nh)| Op::Add { prefix, depth, nh }),
        3 => any::<usize>().prop_map(Op::DeleteExisting),
        1 => (addr(), depth()).prop_map(|(prefix, depth)| Op::DeleteRandom { prefix, depth }),
    ]
}

/// A table as the proptests change it, by addresses as numbers.
pub(super) trait Table<A> {
    fn add(&mut self, prefix: A, depth: u8, nh: u32) -> Result<(), LpmError>;
    fn delete(&mut self, prefix: A, depth: u8) -> Result<(), LpmError>;
}

impl Table<u32> for Lpm4 {
    fn add(&mut self, prefix: u32, depth: u8, nh: u32) -> Result<(), LpmError> {
        Lpm4::add(self, prefix, depth, nh)
    }
    fn delete(&mut self, prefix: u32, depth: u8) -> Result<(), LpmError> {
        Lpm4::delete(self, prefix, depth)
    }
}

impl Table<u128> for Lpm6 {
    fn add(&mut self, prefix: u128, depth: u8, nh: u32) -> Result<(), LpmError> {
        Lpm6::add(self, prefix.to_be_bytes(), depth, nh)
    }
    fn delete(&mut self, prefix: u128, depth: u8) -> Result<(), LpmError> {
        Lpm6::delete(self, prefix.to_be_bytes(), depth)
    }
}

/// Runs `op` on `table` and on `reference` alike. An add the table refuses
/// for want of a group must be one `no_group_left` (given the reference
/// before the add, the prefix and the depth) agrees with; any other error
/// fails the case.
pub(super) fn apply<A: Addr>(
    table: &mut impl Table<A>,
    reference: &mut Reference<A>,
    op: Op<A>,
    no_group_left: impl Fn(&Reference<A>, A, u8) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    match op {
        Op::Add { prefix, depth, nh } => {
            let prefix = prefix.masked(depth);
            match table.add(prefix, depth, nh) {
                Ok(()) => {
                    reference.routes.insert((depth, prefix), nh);
                }
                Err(LpmError::NoTbl8 { .. }) => no_group_left(reference, prefix, depth)?,
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
        Op::DeleteExisting(n) => {
            if !reference.routes.is_empty() {
                let &(depth, prefix) = reference
                    .routes
                    .keys()
                    .nth(n % reference.routes.len())
                    .unwrap();
                table.delete(prefix, depth).unwrap();
                reference.routes.remove(&(depth, prefix));
            }
        }
        Op::DeleteRandom { prefix, depth } => {
            let prefix = prefix.masked(depth);
            let res = table.delete(prefix, depth);
            prop_assert_eq!(
                res.is_ok(),
                reference.routes.remove(&(depth, prefix)).is_some()
            );
        }
    }
    Ok(())
}
