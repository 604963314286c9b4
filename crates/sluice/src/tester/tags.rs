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

/// Tags in use: bit `t % 64` of word `t / 64`.
static IN_USE: Mutex<[u64; WORDS]> = Mutex::new([0; WORDS]);

/// Takes the lowest free tag; `None` when all [`MAX_STREAMS`] are in use.
pub(crate) fn take() -> Option<u16> {
    let mut in_use = IN_USE.lock().unwrap_or_else(PoisonError::into_inner);
    let (i, word) = in_use
        .iter_mut()
        .enumerate()
        .find(|(_, w)| **w != u64::MAX)?;
    let bit = word.trailing_ones();
    *word |= 1 << bit;
    Some((i * 64) as u16 + bit as u16)
}

/// Gives `tag` back (taken by [`take`]).
pub(crate) fn give_back(tag: u16) {
    let mut in_use = IN_USE.lock().unwrap_or_else(PoisonError::into_inner);
    in_use[usize::from(tag) / 64] &= !(1 << (tag % 64));
}
