//! Stream tags: the number a frame's stamp carries for its stream, unique
//! among the streams alive in the process, so that a checker tells its own
//! tester's streams from another tester's (each tester numbers its streams
//! from 0, and those numbers are in the addresses).
//!
//! A tag is taken when a stream is added and given back when the stream's
//! state is dropped (its tester, generators and checkers are gone). The
//! lowest free tag is taken, so the streams of a process's only tester have
//! tags equal to their numbers.

use std::sync::{Mutex, PoisonError};

use super::frame::MAX_STREAMS;

const WORDS: usize = MAX_STREAMS as usize / 64;

/// A set of tags in use: bit `t % 64` of word `t / 64`.
#[derive(Debug)]
struct TagSet([u64; WORDS]);

impl TagSet {
    const fn new() -> TagSet {
        TagSet([0; WORDS])
    }

    /// Takes the lowest free tag; `None` when all [`MAX_STREAMS`] are in use.
    fn take(&mut self) -> Option<u16> {
        let (i, word) = self
            .0
            .iter_mut()
            .enumerate()
            .find(|(_, w)| **w != u64::MAX)?;
        let bit = word.trailing_ones();
        *word |= 1 << bit;
        Some((i * 64) as u16 + bit as u16)
    }

    /// Gives `tag` back.
    fn give_back(&mut self, tag: u16) {
        self.0[usize::from(tag) / 64] &= !(1 << (tag % 64));
    }
}

/// The process's tags in use.
static IN_USE: Mutex<TagSet> = Mutex::new(TagSet::new());

/// Takes the lowest free tag; `None` when all [`MAX_STREAMS`] are in use.
pub(crate) fn take() -> Option<u16> {
    IN_USE.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// Gives `tag` back (taken by [`take`]).
pub(crate) fn give_back(tag: u16) {
    IN_USE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .give_back(tag);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_free_tag_is_taken_until_none_is_left() {
        let mut set = TagSet::new();
        assert_eq!(
            (set.take(), set.take(), set.take()),
            (Some(0), Some(1), Some(2))
        );
        set.give_back(1);
        assert_eq!(set.take(), Some(1), "a tag given back is taken again");
        for want in 3..MAX_STREAMS as u16 {
            assert_eq!(set.take(), Some(want));
        }
        assert_eq!(set.take(), None, "all {MAX_STREAMS} in use");
        set.give_back(100);
        set.give_back(4095);
        assert_eq!(
            (set.take(), set.take(), set.take()),
            (Some(100), Some(4095), None)
        );
    }
}
