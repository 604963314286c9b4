//! Tag matching (stub: to be written).

use super::{BURST_SIZE, DistError};

/// Flow tags held by one worker: slots `0..8` the packets in flight at the
/// worker, `8..16` its backlog. 0 marks an empty slot (no flow tag is 0).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(C, align(32))]
pub struct WorkerTags(pub [u16; 16]);

/// An implementation of tag matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchImpl {
    /// Plain Rust.
    Scalar,
    /// 128-bit SSE2 compares.
    Sse2,
    /// 256-bit AVX2 compares.
    Avx2,
}

/// A tag matcher whose implementation this CPU can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matcher(MatchImpl);

impl Matcher {
    /// A matcher using `imp`, if this CPU can run it.
    pub fn new(imp: MatchImpl) -> Result<Matcher, DistError> {
        let _ = imp;
        Ok(Matcher(MatchImpl::Scalar))
    }

    /// The best matcher this CPU can run.
    pub fn best() -> Matcher {
        Matcher(MatchImpl::Scalar)
    }

    /// Its implementation.
    pub fn imp(self) -> MatchImpl {
        self.0
    }

    /// For each `flows[j]`, `matches[j]` = 1 + the index of the lowest
    /// worker in `tags` holding an equal tag, or 0 (a 0 flow never matches).
    #[inline]
    pub fn find_matches(
        self,
        tags: &[WorkerTags],
        flows: &[u16; BURST_SIZE],
        matches: &mut [u8; BURST_SIZE],
    ) {
        for (j, &f) in flows.iter().enumerate() {
            matches[j] = 0;
            if f == 0 {
                continue;
            }
            if let Some(w) = tags.iter().position(|t| t.0.contains(&f)) {
                matches[j] = w as u8 + 1;
            }
        }
    }
}
