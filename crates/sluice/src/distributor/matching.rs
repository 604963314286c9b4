//! Tag matching: which worker already holds each packet's flow.
//!
//! # Algorithm: broadcast compare, movemask, lowest worker wins
//!
//! The distributor keeps, per worker, the flow tags of the packets in flight
//! at that worker and of its backlog: 16 `u16` slots, one 32-byte
//! [`WorkerTags`] — exactly one AVX2 register, or two SSE2 registers. For a
//! burst of [`BURST_SIZE`] packets it asks, per packet: which is the lowest
//! worker holding this tag? ([`Matcher::find_matches`].)
//!
//! Tags are `u16` because a flow tag is 15 bits of the RSS hash
//! ([`flow_tag`](super::flow_tag)): sixteen of them fill a register, while
//! 32-bit tags would need two registers per worker for no gain in affinity.
//! 0 marks an empty slot, which is why [`flow_tag`](super::flow_tag) never
//! returns 0; a flow of 0 in the burst (a hole) is answered "no worker" even
//! though empty slots compare equal to it.
//!
//! The SIMD versions go worker by worker (the outer loop), so each worker's
//! line of tags is read once, and compare it against all eight flows at once:
//!
//! 1. Once per call, each flow is *broadcast* into both 16-bit halves of a
//!    32-bit lane: flow `j` fills lane `j` (AVX2: one register of eight
//!    lanes; SSE2: two registers of four).
//! 2. Per worker, each 32-bit pair of tag slots is broadcast to every lane
//!    (AVX2: `vpbroadcastd` straight from memory, no shuffle; SSE2: the four
//!    pairs of each 128-bit half are rotated past the flow lanes with
//!    `pshufd`), and compared 16 bits at a time with the flow lanes; the
//!    compares are OR-ed together. Lane `j` is then non-zero exactly when
//!    flow `j` equals one of the worker's 16 slots: eight 256-bit compares
//!    (sixteen 128-bit ones) per worker answer all eight flows.
//! 3. The per-flow found lanes become a mask (`cmpeq` against zero), and the
//!    result lanes take `min(result, found ? worker + 1 : MAX)`. Workers are
//!    visited in increasing order, so the lowest worker wins.
//! 4. A flow of 0 starts with result 0, which `min` keeps; every other flow
//!    starts at `MAX`. As soon as no lane is `MAX` any more — a sign-bit
//!    *movemask* test per worker — every flow is answered and the remaining
//!    workers are skipped. Otherwise the loop ends with the last worker and
//!    the lanes still at `MAX` become 0 ("no worker").
//! 5. The lanes are packed to bytes and `matches` is written once, with one
//!    8-byte store.
//!
//! Why the tags are broadcast and not the flows: broadcasting each flow to
//! a whole register and comparing it with the worker's 16 slots also takes
//! eight compares per worker, but then needs one movemask and a scalar test
//! per flow to learn which flows were found — a port-bound sequence that
//! measured about 2.5 times slower per worker (AMD EPYC, AVX2). Here the
//! found flags come out of the compares already one lane per flow, and the
//! only per-worker movemask is the early-exit test.
//!
//! The result never depends on the implementation: every slot of every
//! worker is compared, including slots that look empty, and a tag held by
//! several workers goes to the lowest. The scalar version states the
//! definition in plain Rust; the tests check the SIMD versions against it.

use super::{BURST_SIZE, DistError, MAX_WORKERS};

/// Flow tags held by one worker: slots `0..8` the packets in flight at the
/// worker, `8..16` its backlog. 0 marks an empty slot (no flow tag is 0).
///
/// 32-byte aligned so that the 16 slots are one aligned AVX2 load (two
/// aligned SSE2 loads) and never straddle a cache line.
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

impl MatchImpl {
    /// Every implementation, in order of preference: the fastest first.
    pub const ALL: [MatchImpl; 3] = [MatchImpl::Avx2, MatchImpl::Sse2, MatchImpl::Scalar];

    /// Its name: `"scalar"`, `"sse2"` or `"avx2"`.
    pub fn name(self) -> &'static str {
        match self {
            MatchImpl::Scalar => "scalar",
            MatchImpl::Sse2 => "sse2",
            MatchImpl::Avx2 => "avx2",
        }
    }
}

/// A tag matcher whose implementation this CPU can run.
///
/// Invariant: a `Matcher` holds only an implementation for which
/// [`Matcher::available`] is true (it is built by [`Matcher::new`] and
/// [`Matcher::best`] alone). [`Matcher::find_matches`] relies on it to call
/// the SIMD code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matcher(MatchImpl);

impl Matcher {
    /// Whether this CPU can run `imp` (run-time CPU feature detection; only
    /// [`MatchImpl::Scalar`] off x86-64).
    pub fn available(imp: MatchImpl) -> bool {
        match imp {
            MatchImpl::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            MatchImpl::Sse2 => std::arch::is_x86_feature_detected!("sse2"),
            #[cfg(target_arch = "x86_64")]
            MatchImpl::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            MatchImpl::Sse2 | MatchImpl::Avx2 => false,
        }
    }

    /// A matcher using `imp`, if this CPU can run it; otherwise
    /// [`DistError::MatchUnavailable`] naming it.
    pub fn new(imp: MatchImpl) -> Result<Matcher, DistError> {
        Matcher::checked(imp, Matcher::available(imp))
    }

    /// The one place a `Matcher` is made: only if `available`.
    pub(super) fn checked(imp: MatchImpl, available: bool) -> Result<Matcher, DistError> {
        if available {
            Ok(Matcher(imp))
        } else {
            Err(DistError::MatchUnavailable { name: imp.name() })
        }
    }

    /// The best matcher this CPU can run: AVX2, else SSE2, else scalar.
    pub fn best() -> Matcher {
        let imp = MatchImpl::ALL
            .into_iter()
            .find(|&imp| Matcher::available(imp))
            .unwrap_or(MatchImpl::Scalar);
        Matcher(imp)
    }

    /// Its implementation.
    pub fn imp(self) -> MatchImpl {
        self.0
    }

    /// For each `flows[j]`, `matches[j]` = 1 + the index of the lowest
    /// worker in `tags` holding an equal tag in any of its 16 slots, or 0 if
    /// none does. A flow of 0 never matches (it gives 0 although empty slots
    /// are 0).
    ///
    /// Only the first [`MAX_WORKERS`] entries of `tags` are looked at. Every
    /// implementation gives the same `matches` for the same input; `matches`
    /// is written once, whole, and nothing is allocated.
    ///
    /// ```
    /// use sluice::distributor::{MatchImpl, Matcher, WorkerTags};
    ///
    /// let mut tags = [WorkerTags::default(); 3];
    /// tags[0].0[5] = 7; // worker 0 holds flow 7
    /// tags[2].0[0] = 7; // so does worker 2: the lowest wins
    /// tags[2].0[15] = 9; // worker 2 alone holds flow 9
    /// let flows = [7, 9, 8, 0, 7, 9, 1, 2];
    /// for imp in MatchImpl::ALL.into_iter().filter(|&imp| Matcher::available(imp)) {
    ///     let mut matches = [0xff; 8];
    ///     Matcher::new(imp).unwrap().find_matches(&tags, &flows, &mut matches);
    ///     assert_eq!(matches, [1, 3, 0, 0, 1, 3, 0, 0], "{}", imp.name());
    /// }
    /// ```
    #[inline]
    pub fn find_matches(
        self,
        tags: &[WorkerTags],
        flows: &[u16; BURST_SIZE],
        matches: &mut [u8; BURST_SIZE],
    ) {
        let tags = &tags[..tags.len().min(MAX_WORKERS)];
        match self.0 {
            MatchImpl::Scalar => find_scalar(tags, flows, matches),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a Matcher holds Sse2 only if `Matcher::available(Sse2)`
            // was true (the `Matcher` invariant), i.e. this CPU has SSE2,
            // the one target feature `x86::find_sse2` enables.
            MatchImpl::Sse2 => unsafe { x86::find_sse2(tags, flows, matches) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a Matcher holds Avx2 only if `Matcher::available(Avx2)`
            // was true (the `Matcher` invariant), i.e. this CPU has AVX2,
            // the one target feature `x86::find_avx2` enables.
            MatchImpl::Avx2 => unsafe { x86::find_avx2(tags, flows, matches) },
            // No Matcher holds these off x86-64 (`available` says no); the
            // arm only keeps the match exhaustive.
            #[cfg(not(target_arch = "x86_64"))]
            MatchImpl::Sse2 | MatchImpl::Avx2 => find_scalar(tags, flows, matches),
        }
    }
}

/// The definition in plain Rust: per flow, the first worker whose slots hold
/// it. `tags.len() <= MAX_WORKERS`, so `w + 1` fits a `u8`.
///
/// "Scalar" means no intrinsics: LLVM may still vectorise `contains` with
/// the baseline SSE2. Out of line (like the SIMD versions), so that
/// `find_matches` inlines as a bare dispatch.
#[inline(never)]
fn find_scalar(tags: &[WorkerTags], flows: &[u16; BURST_SIZE], matches: &mut [u8; BURST_SIZE]) {
    let mut out = [0u8; BURST_SIZE];
    for (m, &f) in out.iter_mut().zip(flows) {
        if f == 0 {
            continue;
        }
        if let Some(w) = tags.iter().position(|t| t.0.contains(&f)) {
            *m = w as u8 + 1;
        }
    }
    *matches = out;
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The SIMD versions (see the module header for the algorithm). Both take
    //! `tags.len() <= MAX_WORKERS`, so a worker number `w + 1` fits a byte.

    use super::{BURST_SIZE, WorkerTags};
    use std::arch::x86_64::*;

    /// AVX2: lane `j` (32 bits) of a register per flow `j`; one
    /// `vpbroadcastd` load and one 256-bit compare per pair of tag slots.
    #[target_feature(enable = "avx2")]
    pub(super) fn find_avx2(
        tags: &[WorkerTags],
        flows: &[u16; BURST_SIZE],
        matches: &mut [u8; BURST_SIZE],
    ) {
        // SAFETY: `flows` is 16 readable bytes; an unaligned load needs no
        // alignment.
        let f = unsafe { _mm_loadu_si128(flows.as_ptr().cast()) };
        let zero = _mm256_setzero_si256();
        let ones = _mm256_cmpeq_epi32(zero, zero);
        // Lane j = flows[j] in both 16-bit halves.
        let f32 = _mm256_cvtepu16_epi32(f);
        let fw = _mm256_or_si256(f32, _mm256_slli_epi32::<16>(f32));
        // Lane j: 0 for a 0 flow (answered), all ones (MAX: open) otherwise.
        let mut res = _mm256_xor_si256(_mm256_cmpeq_epi32(f32, zero), ones);
        // Lane j = w + 1 for the worker being looked at.
        let mut wv = _mm256_set1_epi32(1);
        for t in tags {
            // Every flow answered (no lane MAX, whose sign bit is set):
            // the later workers cannot win any flow.
            if _mm256_testz_ps(_mm256_castsi256_ps(res), _mm256_castsi256_ps(res)) != 0 {
                break;
            }
            let p: *const i32 = t.0.as_ptr().cast();
            // SAFETY: `p` points at the 32 bytes (eight i32, 4-aligned
            // since WorkerTags is 32-aligned) of `t.0`; `k < 8` stays inside.
            let pair = |k: usize| _mm256_set1_epi32(unsafe { p.add(k).read() });
            let eq = |k: usize| _mm256_cmpeq_epi16(fw, pair(k));
            // A tree of ORs: short dependency chains.
            let a = _mm256_or_si256(_mm256_or_si256(eq(0), eq(1)), _mm256_or_si256(eq(2), eq(3)));
            let b = _mm256_or_si256(_mm256_or_si256(eq(4), eq(5)), _mm256_or_si256(eq(6), eq(7)));
            let miss = _mm256_cmpeq_epi32(_mm256_or_si256(a, b), zero);
            res = _mm256_min_epu32(res, _mm256_or_si256(miss, wv));
            wv = _mm256_sub_epi32(wv, ones);
        }
        // Lanes to bytes: MAX (-1 as i32) saturates to 0, w + 1 <= 64 stays.
        let lo = _mm256_castsi256_si128(res);
        let hi = _mm256_extracti128_si256::<1>(res);
        let w16 = _mm_packus_epi32(lo, hi);
        let b8 = _mm_packus_epi16(w16, w16);
        // SAFETY: `matches` is 8 writable bytes; the store writes exactly
        // its low 8 bytes there and needs no alignment.
        unsafe { _mm_storel_epi64(matches.as_mut_ptr().cast(), b8) };
    }

    /// SSE2: flows 0..4 in the 32-bit lanes of one register, 4..8 of
    /// another; each 128-bit half of the tags rotated past them by `pshufd`;
    /// the result in bytes 0..8 of a register (`pminub`).
    ///
    /// Out of line although SSE2 is in the x86-64 baseline (so it could be
    /// inlined): `find_matches` stays a bare dispatch.
    #[target_feature(enable = "sse2")]
    #[inline(never)]
    pub(super) fn find_sse2(
        tags: &[WorkerTags],
        flows: &[u16; BURST_SIZE],
        matches: &mut [u8; BURST_SIZE],
    ) {
        // SAFETY: `flows` is 16 readable bytes; an unaligned load needs no
        // alignment.
        let f = unsafe { _mm_loadu_si128(flows.as_ptr().cast()) };
        let zero = _mm_setzero_si128();
        let ones = _mm_cmpeq_epi32(zero, zero);
        // Lane j of fa = flows[j], of fb = flows[4 + j], in both halves.
        let fa = _mm_unpacklo_epi16(f, f);
        let fb = _mm_unpackhi_epi16(f, f);
        // Byte j (and 8 + j): 0 for a 0 flow (answered), 0xff (MAX: open)
        // otherwise.
        let open = _mm_xor_si128(_mm_cmpeq_epi16(f, zero), ones);
        let mut res = _mm_packs_epi16(open, open);
        // Every byte = w + 1 for the worker being looked at.
        let mut wv = _mm_set1_epi8(1);
        for t in tags {
            // Every flow answered (no byte 0xff, the only one with its sign
            // bit set): the later workers cannot win any flow.
            if _mm_movemask_epi8(res) == 0 {
                break;
            }
            let p: *const __m128i = t.0.as_ptr().cast();
            // SAFETY: `p` points at the 32 bytes of `t.0`, 32-aligned: two
            // aligned 16-byte halves, `p` and `p + 1`.
            let (lo, hi) = unsafe { (_mm_load_si128(p), _mm_load_si128(p.add(1))) };
            // Each half and its rotations by 1, 2, 3 pairs of slots: every
            // lane of `fa`/`fb` meets every pair once.
            let rot = [
                lo,
                _mm_shuffle_epi32::<0x39>(lo),
                _mm_shuffle_epi32::<0x4e>(lo),
                _mm_shuffle_epi32::<0x93>(lo),
                hi,
                _mm_shuffle_epi32::<0x39>(hi),
                _mm_shuffle_epi32::<0x4e>(hi),
                _mm_shuffle_epi32::<0x93>(hi),
            ];
            let found = |fx: __m128i| {
                let eq = |k: usize| _mm_cmpeq_epi16(fx, rot[k]);
                let a = _mm_or_si128(_mm_or_si128(eq(0), eq(1)), _mm_or_si128(eq(2), eq(3)));
                let b = _mm_or_si128(_mm_or_si128(eq(4), eq(5)), _mm_or_si128(eq(6), eq(7)));
                _mm_or_si128(a, b)
            };
            // Signed saturation keeps a lane non-zero iff it was: byte j
            // non-zero iff flow j is at this worker.
            let w16 = _mm_packs_epi32(found(fa), found(fb));
            let miss = _mm_cmpeq_epi8(_mm_packs_epi16(w16, w16), zero);
            res = _mm_min_epu8(res, _mm_or_si128(miss, wv));
            wv = _mm_sub_epi8(wv, ones);
        }
        // MAX bytes become 0 ("no worker").
        let out = _mm_andnot_si128(_mm_cmpeq_epi8(res, ones), res);
        // SAFETY: `matches` is 8 writable bytes; the store writes exactly
        // its low 8 bytes there and needs no alignment.
        unsafe { _mm_storel_epi64(matches.as_mut_ptr().cast(), out) };
    }
}
