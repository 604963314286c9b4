//! Vector paths of the soft driver: the Rx write-back parse, the Rx
//! refill and the Tx data segments, several descriptors per step, in SSE4.1, AVX2 or AVX-512
//! registers.
//!
//! The descriptor formats are the device's ([`rx`]); only the driver's
//! loops change. A queue's level ([`VectorLevel`]) is chosen when the port
//! is set up (spec key `vector=auto|off|sse|avx2|avx512`) from the CPU's
//! features, found at run time; the scalar path stays, and is the only one
//! on other architectures.
//!
//! # Rx
//! A group of descriptors (4 with SSE4.1 and AVX2, 8 with AVX-512) is
//! parsed at once when every one of them is done (`DD`) and none carries a
//! dropping error; anything else (a partial group, a dropped frame, the
//! ring's wrap inside the group) takes the scalar step, one descriptor, and
//! the loop tries a group again after it. Each descriptor's two words give
//! the 32 bytes of its mbuf header from the rearm word on
//! (`offset::REARM_DATA..offset::RSS_HASH + 4`): the queue's rearm
//! template, the offload flags, the packet type, both lengths, the VLAN tag
//! and the RSS hash. They are computed lane-wise, with shifts and masks, no
//! branch per descriptor, and written with one 32-byte store per mbuf (two
//! 16-byte stores with SSE4.1). The scalar path's results are the
//! reference: the tests check each level against it, and against
//! `rx_words`, the same computation one descriptor at a time.
//!
//! # Refill
//! A refill run writes each descriptor's read format: the buffer address
//! (the element's address plus a fixed offset) and a zero word. The vector
//! writer loads the elements from the software ring, adds the offset and
//! interleaves the zero words, two or four descriptors per store.
//!
//! # Tx
//! Inside a multi-packet WQE, a run of packets that each take a data
//! segment (one buffer, longer than `inline_mpw`, the session's offload
//! flags) goes in groups of 4: the checks of all four are folded into one
//! branch, and their data segments — byte count and memory key, then the
//! address, big-endian — are byte-swapped in a register and written with
//! one 16-byte store each (SSE4.1) or one 32-byte store per two (AVX2, and
//! AVX-512, whose foundation has no byte shuffle). Anything else takes the
//! scalar step.
//!
//! # Memory
//! Descriptors are atomic words because the device may run on another
//! thread. The vector paths read and write them with plain vector accesses
//! only where no other access can race: a group is read after an acquire
//! load of each of its status words saw `DD` (the device has written the
//! descriptor for the last time until the driver rearms it), and a refill
//! writes descriptors at or past the tail register, which the device does
//! not read before the doorbell's release store; Tx segments are written in
//! blocks past the tail register likewise.

use std::fmt;

use crate::driver::soft::hw::desc::rx;
use crate::mbuf::{MbufHeader, ol};

/// The instruction set a queue's Rx loop, refill and Tx data segments run
/// on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VectorLevel {
    /// One descriptor at a time (every architecture).
    Scalar,
    /// SSE4.1: 128-bit registers, groups of 4 descriptors.
    Sse41,
    /// AVX2: 256-bit registers, groups of 4 descriptors.
    Avx2,
    /// AVX-512 (foundation): 512-bit registers, groups of 8 descriptors.
    Avx512,
}

/// The values of the spec key `vector`.
pub const VECTOR_CHOICES: &[&str] = &["auto", "off", "sse", "avx2", "avx512"];

impl VectorLevel {
    /// Every level, lowest first.
    pub const ALL: [VectorLevel; 4] = [
        VectorLevel::Scalar,
        VectorLevel::Sse41,
        VectorLevel::Avx2,
        VectorLevel::Avx512,
    ];

    /// Its name in reports: `scalar`, `sse4.1`, `avx2`, `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            VectorLevel::Scalar => "scalar",
            VectorLevel::Sse41 => "sse4.1",
            VectorLevel::Avx2 => "avx2",
            VectorLevel::Avx512 => "avx512",
        }
    }

    /// Whether this CPU has what the level needs.
    pub fn available(self) -> bool {
        match self {
            VectorLevel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            VectorLevel::Sse41 => std::arch::is_x86_feature_detected!("sse4.1"),
            #[cfg(target_arch = "x86_64")]
            VectorLevel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            VectorLevel::Avx512 => {
                // Its Tx segments take the AVX2 writer.
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx2")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The highest level this CPU has (what `vector=auto` takes).
    pub fn best() -> VectorLevel {
        VectorLevel::ALL
            .into_iter()
            .rev()
            .find(|l| l.available())
            .unwrap_or(VectorLevel::Scalar)
    }

    /// The level a `vector=` value asks for (`None`: the key is absent,
    /// as `auto`). A level this CPU lacks is an error saying which it has.
    pub fn from_choice(choice: Option<&str>) -> Result<VectorLevel, String> {
        let level = match choice {
            None | Some("auto") => return Ok(VectorLevel::best()),
            Some("off") => VectorLevel::Scalar,
            Some("sse") => VectorLevel::Sse41,
            Some("avx2") => VectorLevel::Avx2,
            Some("avx512") => VectorLevel::Avx512,
            Some(other) => {
                return Err(format!(
                    "vector={other}: expected one of {}",
                    VECTOR_CHOICES.join(", ")
                ));
            }
        };
        if !level.available() {
            return Err(format!(
                "vector={}: this CPU has no {} (the highest level it has: {})",
                choice.unwrap_or_default(),
                level.name(),
                VectorLevel::best().name()
            ));
        }
        Ok(level)
    }
}

impl fmt::Display for VectorLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// The 32 bytes written per mbuf, as four words from the rearm word on: the
// header's fields must sit where the words put them.
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(MbufHeader, data_off) == 16);
    assert!(offset_of!(MbufHeader, ol_flags) == 24);
    assert!(offset_of!(MbufHeader, packet_type) == 32);
    assert!(offset_of!(MbufHeader, pkt_len) == 36);
    assert!(offset_of!(MbufHeader, data_len) == 40);
    assert!(offset_of!(MbufHeader, vlan_tci) == 42);
    assert!(offset_of!(MbufHeader, rss_hash) == 44);
};

// The bit moves of the flag computation, checked against the names.
const _: () = {
    assert!(rx::VP == 1 << 3 && ol::RX_VLAN == 1 << 0);
    assert!(rx::IPCS == 1 << 6 && rx::ERR_IP == 1 << 31);
    assert!(rx::L4CS == 1 << 5 && rx::ERR_L4 == 1 << 30);
    assert!(ol::RX_IP_CKSUM_GOOD == 1 << 7 && ol::RX_IP_CKSUM_BAD == 1 << 4);
    assert!(ol::RX_L4_CKSUM_GOOD == 1 << 8 && ol::RX_L4_CKSUM_BAD == 1 << 3);
    assert!(rx::PTYPE_SHIFT == 4 && rx::PTYPE_MASK == 0xfff);
    assert!(rx::RSS_TYPE_SHIFT == 0 && rx::RSS_TYPE_MASK == 0xf);
    assert!(rx::HASH_SHIFT == 32 && rx::LEN_SHIFT == 32 && rx::VLAN_SHIFT == 48);
};

/// The high half of a word: the RSS hash in qword 0.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const HIGH: u64 = 0xffff_ffff_0000_0000;
/// Qword 1's length field, in place.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const LEN_IN_PLACE: u64 = 0x0000_ffff_0000_0000;

/// What the Rx groups need of their queue.
#[derive(Debug, Clone, Copy)]
pub struct RxTemplate {
    /// The rearm word ([`RearmData::word`](crate::mbuf::RearmData::word)).
    pub rearm: u64,
    /// Deliver the RSS hash.
    pub rss_hash: bool,
    /// Offload flags every delivered mbuf carries besides the write-back's:
    /// [`ol::EXTERNAL`] on a queue armed with page fragments (every armed
    /// header has one attached), 0 on one armed with plain buffers.
    pub ol_flags: u64,
}

/// The header words 16..48 of a delivered descriptor `(q0, q1)` with no
/// dropping error: rearm word, offload flags, packet type and packet
/// length, data length with VLAN tag and RSS hash. The vector groups'
/// computation one descriptor at a time, written as they write it:
/// shifts and masks, no branch. The tests hold each level to it.
#[cfg(all(test, not(loom)))]
pub fn rx_words(q0: u64, q1: u64, t: RxTemplate) -> [u64; 4] {
    let rss_on = if t.rss_hash { u64::MAX } else { 0 };
    let has_hash = if q0 & rx::RSS_TYPE_MASK != 0 {
        rss_on
    } else {
        0
    };
    let flags = ((q1 >> 3) & 1)
        | ((q1 << 1) & !(q1 >> 24) & 0x80)
        | ((q1 << 3) & !(q1 >> 22) & 0x100)
        | ((q1 >> 2) & (q1 >> 27) & 0x18)
        | (has_hash & ol::RX_RSS_HASH)
        | t.ol_flags;
    let w2 = ((q0 >> 4) & 0xfff) | (q1 & LEN_IN_PLACE);
    let w3 = (q1 >> 32) | (q0 & HIGH & has_hash);
    [t.rearm, flags, w2, w3]
}

#[cfg(target_arch = "x86_64")]
pub use x86::*;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{HIGH, LEN_IN_PLACE, RxTemplate};
    use crate::driver::soft::hw::desc::Desc;
    use crate::driver::soft::hw::wqe::LKEY;
    use crate::mbuf::{MbufHeader, ol};
    use crate::mempool::Elem;

    /// Where the 32 bytes of an mbuf's Rx words start: its rearm word
    /// (an address only).
    #[inline(always)]
    fn rx_words_ptr(e: Elem) -> *mut u8 {
        MbufHeader::rearm_ptr(e.as_ptr().cast()).cast::<u8>()
    }

    /// Writes the Rx words of 4 delivered descriptors into their mbufs,
    /// 2 at a time in 128-bit registers.
    ///
    /// # Safety
    /// - The CPU has SSE4.1.
    /// - `descs` points to 4 consecutive descriptors of a ring, each seen
    ///   done (`DD`, acquire load) with no dropping error, which the device
    ///   no longer writes.
    /// - `elems` points to their 4 software-ring slots: mbuf headers the
    ///   caller owns, unshared, with an external buffer attached exactly
    ///   when `t.ol_flags` has [`ol::EXTERNAL`].
    #[inline]
    #[target_feature(enable = "sse4.1")]
    pub unsafe fn rx_group_sse41(descs: *const Desc, elems: *const Elem, t: RxTemplate) {
        let rearm = _mm_set1_epi64x(t.rearm as i64);
        let rss_on = _mm_set1_epi64x(if t.rss_hash { -1 } else { 0 });
        let ol_base = _mm_set1_epi64x(t.ol_flags as i64);
        for pair in 0..2 {
            // SAFETY: the caller's contract: two descriptors of the four,
            // not written concurrently.
            let (da, db) = unsafe {
                (
                    _mm_loadu_si128(descs.add(2 * pair).cast()),
                    _mm_loadu_si128(descs.add(2 * pair + 1).cast()),
                )
            };
            let q0 = _mm_unpacklo_epi64(da, db);
            let q1 = _mm_unpackhi_epi64(da, db);
            let no_type =
                _mm_cmpeq_epi64(_mm_and_si128(q0, _mm_set1_epi64x(0xf)), _mm_setzero_si128());
            let has_hash = _mm_andnot_si128(no_type, rss_on);
            let flags = _mm_or_si128(
                _mm_or_si128(
                    _mm_and_si128(_mm_srli_epi64::<3>(q1), _mm_set1_epi64x(1)),
                    _mm_and_si128(
                        _mm_andnot_si128(_mm_srli_epi64::<24>(q1), _mm_slli_epi64::<1>(q1)),
                        _mm_set1_epi64x(0x80),
                    ),
                ),
                _mm_or_si128(
                    _mm_or_si128(
                        _mm_and_si128(
                            _mm_andnot_si128(_mm_srli_epi64::<22>(q1), _mm_slli_epi64::<3>(q1)),
                            _mm_set1_epi64x(0x100),
                        ),
                        _mm_and_si128(
                            _mm_and_si128(_mm_srli_epi64::<2>(q1), _mm_srli_epi64::<27>(q1)),
                            _mm_set1_epi64x(0x18),
                        ),
                    ),
                    _mm_or_si128(
                        _mm_and_si128(has_hash, _mm_set1_epi64x(ol::RX_RSS_HASH as i64)),
                        ol_base,
                    ),
                ),
            );
            let w2 = _mm_or_si128(
                _mm_and_si128(_mm_srli_epi64::<4>(q0), _mm_set1_epi64x(0xfff)),
                _mm_and_si128(q1, _mm_set1_epi64x(LEN_IN_PLACE as i64)),
            );
            let w3 = _mm_or_si128(
                _mm_srli_epi64::<32>(q1),
                _mm_and_si128(_mm_and_si128(q0, _mm_set1_epi64x(HIGH as i64)), has_hash),
            );
            // SAFETY: the caller's contract: the slots hold headers we own
            // exclusively; their Rx words are 32 bytes.
            unsafe {
                let a = rx_words_ptr(*elems.add(2 * pair));
                let b = rx_words_ptr(*elems.add(2 * pair + 1));
                _mm_storeu_si128(a.cast(), _mm_unpacklo_epi64(rearm, flags));
                _mm_storeu_si128(a.add(16).cast(), _mm_unpacklo_epi64(w2, w3));
                _mm_storeu_si128(b.cast(), _mm_unpackhi_epi64(rearm, flags));
                _mm_storeu_si128(b.add(16).cast(), _mm_unpackhi_epi64(w2, w3));
            }
        }
    }

    /// The flags, packet-type word and hash word of AVX2 lanes.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn rx_lanes_avx2(q0: __m256i, q1: __m256i, rss_on: __m256i) -> [__m256i; 3] {
        let no_type = _mm256_cmpeq_epi64(
            _mm256_and_si256(q0, _mm256_set1_epi64x(0xf)),
            _mm256_setzero_si256(),
        );
        let has_hash = _mm256_andnot_si256(no_type, rss_on);
        let flags = _mm256_or_si256(
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi64::<3>(q1), _mm256_set1_epi64x(1)),
                _mm256_and_si256(
                    _mm256_andnot_si256(_mm256_srli_epi64::<24>(q1), _mm256_slli_epi64::<1>(q1)),
                    _mm256_set1_epi64x(0x80),
                ),
            ),
            _mm256_or_si256(
                _mm256_or_si256(
                    _mm256_and_si256(
                        _mm256_andnot_si256(
                            _mm256_srli_epi64::<22>(q1),
                            _mm256_slli_epi64::<3>(q1),
                        ),
                        _mm256_set1_epi64x(0x100),
                    ),
                    _mm256_and_si256(
                        _mm256_and_si256(_mm256_srli_epi64::<2>(q1), _mm256_srli_epi64::<27>(q1)),
                        _mm256_set1_epi64x(0x18),
                    ),
                ),
                _mm256_and_si256(has_hash, _mm256_set1_epi64x(ol::RX_RSS_HASH as i64)),
            ),
        );
        let w2 = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi64::<4>(q0), _mm256_set1_epi64x(0xfff)),
            _mm256_and_si256(q1, _mm256_set1_epi64x(LEN_IN_PLACE as i64)),
        );
        let w3 = _mm256_or_si256(
            _mm256_srli_epi64::<32>(q1),
            _mm256_and_si256(
                _mm256_and_si256(q0, _mm256_set1_epi64x(HIGH as i64)),
                has_hash,
            ),
        );
        [flags, w2, w3]
    }

    /// Writes the Rx words of 4 delivered descriptors into their mbufs,
    /// one 32-byte store each.
    ///
    /// # Safety
    /// As [`rx_group_sse41`], with AVX2 instead of SSE4.1.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn rx_group_avx2(descs: *const Desc, elems: *const Elem, t: RxTemplate) {
        // SAFETY: the caller's contract: 4 consecutive descriptors (64
        // bytes), not written concurrently.
        let (d01, d23) = unsafe {
            (
                _mm256_loadu_si256(descs.cast()),
                _mm256_loadu_si256(descs.add(2).cast()),
            )
        };
        // Lanes in the order of descriptors 0, 2, 1, 3.
        let q0 = _mm256_unpacklo_epi64(d01, d23);
        let q1 = _mm256_unpackhi_epi64(d01, d23);
        let rss_on = _mm256_set1_epi64x(if t.rss_hash { -1 } else { 0 });
        let [flags, w2, w3] = rx_lanes_avx2(q0, q1, rss_on);
        let flags = _mm256_or_si256(flags, _mm256_set1_epi64x(t.ol_flags as i64));
        let rearm = _mm256_set1_epi64x(t.rearm as i64);
        // [rearm, flags] and [w2, w3] of descriptors 0, 1 (low words of
        // each 128-bit half) and 2, 3 (high words).
        let a01 = _mm256_unpacklo_epi64(rearm, flags);
        let b01 = _mm256_unpacklo_epi64(w2, w3);
        let a23 = _mm256_unpackhi_epi64(rearm, flags);
        let b23 = _mm256_unpackhi_epi64(w2, w3);
        let m = [
            _mm256_permute2x128_si256::<0x20>(a01, b01),
            _mm256_permute2x128_si256::<0x31>(a01, b01),
            _mm256_permute2x128_si256::<0x20>(a23, b23),
            _mm256_permute2x128_si256::<0x31>(a23, b23),
        ];
        for (k, words) in m.into_iter().enumerate() {
            // SAFETY: the caller's contract: slot `k` of the four holds a
            // header we own exclusively; its Rx words are 32 bytes.
            unsafe { _mm256_storeu_si256(rx_words_ptr(*elems.add(k)).cast(), words) };
        }
    }

    /// Writes the Rx words of 8 delivered descriptors into their mbufs,
    /// one 32-byte store each.
    ///
    /// # Safety
    /// As [`rx_group_sse41`], with AVX-512F instead of SSE4.1, and 8
    /// descriptors and slots.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn rx_group_avx512(descs: *const Desc, elems: *const Elem, t: RxTemplate) {
        // SAFETY: the caller's contract: 8 consecutive descriptors (128
        // bytes), not written concurrently.
        let (d0, d1) = unsafe {
            (
                _mm512_loadu_si512(descs.cast()),
                _mm512_loadu_si512(descs.add(4).cast()),
            )
        };
        // Lanes in the order of descriptors 0, 4, 1, 5, 2, 6, 3, 7.
        let q0 = _mm512_unpacklo_epi64(d0, d1);
        let q1 = _mm512_unpackhi_epi64(d0, d1);
        let typed = _mm512_test_epi64_mask(q0, _mm512_set1_epi64(0xf));
        let has_hash: __mmask8 = if t.rss_hash { typed } else { 0 };
        let flags = _mm512_or_si512(
            _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi64::<3>(q1), _mm512_set1_epi64(1)),
                _mm512_and_si512(
                    _mm512_andnot_si512(_mm512_srli_epi64::<24>(q1), _mm512_slli_epi64::<1>(q1)),
                    _mm512_set1_epi64(0x80),
                ),
            ),
            _mm512_or_si512(
                _mm512_or_si512(
                    _mm512_and_si512(
                        _mm512_andnot_si512(
                            _mm512_srli_epi64::<22>(q1),
                            _mm512_slli_epi64::<3>(q1),
                        ),
                        _mm512_set1_epi64(0x100),
                    ),
                    _mm512_and_si512(
                        _mm512_and_si512(_mm512_srli_epi64::<2>(q1), _mm512_srli_epi64::<27>(q1)),
                        _mm512_set1_epi64(0x18),
                    ),
                ),
                _mm512_or_si512(
                    _mm512_maskz_mov_epi64(has_hash, _mm512_set1_epi64(ol::RX_RSS_HASH as i64)),
                    _mm512_set1_epi64(t.ol_flags as i64),
                ),
            ),
        );
        let w2 = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi64::<4>(q0), _mm512_set1_epi64(0xfff)),
            _mm512_and_si512(q1, _mm512_set1_epi64(LEN_IN_PLACE as i64)),
        );
        let w3 = _mm512_or_si512(
            _mm512_srli_epi64::<32>(q1),
            _mm512_maskz_and_epi64(has_hash, q0, _mm512_set1_epi64(HIGH as i64)),
        );
        let rearm = _mm512_set1_epi64(t.rearm as i64);
        // 128-bit lane k: [rearm, flags] and [w2, w3] of descriptor k
        // (low words) and k + 4 (high words).
        let a_lo = _mm512_unpacklo_epi64(rearm, flags);
        let b_lo = _mm512_unpacklo_epi64(w2, w3);
        let a_hi = _mm512_unpackhi_epi64(rearm, flags);
        let b_hi = _mm512_unpackhi_epi64(w2, w3);
        // Two descriptors' 32 bytes each: lanes (k, k) then (k + 1, k + 1).
        let first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
        let second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
        let pairs = [
            (0, _mm512_permutex2var_epi64(a_lo, first, b_lo)),
            (2, _mm512_permutex2var_epi64(a_lo, second, b_lo)),
            (4, _mm512_permutex2var_epi64(a_hi, first, b_hi)),
            (6, _mm512_permutex2var_epi64(a_hi, second, b_hi)),
        ];
        for (k, words) in pairs {
            // SAFETY: the caller's contract: slots `k` and `k + 1` of the
            // eight hold headers we own exclusively; their Rx words are 32
            // bytes each.
            unsafe {
                _mm256_storeu_si256(
                    rx_words_ptr(*elems.add(k)).cast(),
                    _mm512_castsi512_si256(words),
                );
                _mm256_storeu_si256(
                    rx_words_ptr(*elems.add(k + 1)).cast(),
                    _mm512_extracti64x4_epi64::<1>(words),
                );
            }
        }
    }

    /// Writes the read format of `n` descriptors from `descs` (buffer
    /// address: element address + `offset`, then a zero word), 2 per
    /// 128-bit step; returns how many it wrote (`n` rounded down to 2).
    ///
    /// # Safety
    /// - The CPU has SSE4.1.
    /// - `descs` and `elems` point to `n` descriptors and software-ring
    ///   slots; the device does not read those descriptors until the next
    ///   doorbell (they are at or past the tail register).
    #[inline]
    #[target_feature(enable = "sse4.1")]
    pub unsafe fn refill_sse41(
        descs: *const Desc,
        elems: *const Elem,
        n: usize,
        offset: u64,
    ) -> usize {
        let off = _mm_set1_epi64x(offset as i64);
        let zero = _mm_setzero_si128();
        let mut k = 0;
        while k + 2 <= n {
            // The ring's words are atomics (`UnsafeCell`), so a plain store
            // through the shared pointer is allowed.
            // SAFETY: the caller's contract: slots and descriptors `k`,
            // `k + 1` exist, 16-byte aligned and unread by the device.
            unsafe {
                let a = _mm_add_epi64(_mm_loadu_si128(elems.add(k).cast()), off);
                let d = descs.add(k).cast_mut().cast::<__m128i>();
                _mm_storeu_si128(d, _mm_unpacklo_epi64(a, zero));
                _mm_storeu_si128(d.add(1), _mm_unpackhi_epi64(a, zero));
            }
            k += 2;
        }
        k
    }

    /// [`refill_sse41`] in AVX2, 4 descriptors per step (`n` rounded down
    /// to 4).
    ///
    /// # Safety
    /// As [`refill_sse41`], with AVX2 instead of SSE4.1.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn refill_avx2(
        descs: *const Desc,
        elems: *const Elem,
        n: usize,
        offset: u64,
    ) -> usize {
        let off = _mm256_set1_epi64x(offset as i64);
        let zero = _mm256_setzero_si256();
        let mut k = 0;
        while k + 4 <= n {
            // SAFETY: as in `refill_sse41`, for descriptors `k..k + 4`.
            unsafe {
                let a = _mm256_add_epi64(_mm256_loadu_si256(elems.add(k).cast()), off);
                // [a0, 0, a2, 0] and [a1, 0, a3, 0].
                let lo = _mm256_unpacklo_epi64(a, zero);
                let hi = _mm256_unpackhi_epi64(a, zero);
                let d = descs.add(k).cast_mut().cast::<__m256i>();
                _mm256_storeu_si256(d, _mm256_permute2x128_si256::<0x20>(lo, hi));
                _mm256_storeu_si256(d.add(1), _mm256_permute2x128_si256::<0x31>(lo, hi));
            }
            k += 4;
        }
        k
    }

    /// [`refill_sse41`] in AVX-512, 8 descriptors per step (`n` rounded
    /// down to 8).
    ///
    /// # Safety
    /// As [`refill_sse41`], with AVX-512F instead of SSE4.1.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn refill_avx512(
        descs: *const Desc,
        elems: *const Elem,
        n: usize,
        offset: u64,
    ) -> usize {
        let off = _mm512_set1_epi64(offset as i64);
        let zero = _mm512_setzero_si512();
        let first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
        let second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
        let mut k = 0;
        while k + 8 <= n {
            // SAFETY: as in `refill_sse41`, for descriptors `k..k + 8`.
            unsafe {
                let a = _mm512_add_epi64(_mm512_loadu_si512(elems.add(k).cast()), off);
                // 128-bit lane j: [a(2j), 0] and [a(2j + 1), 0].
                let lo = _mm512_unpacklo_epi64(a, zero);
                let hi = _mm512_unpackhi_epi64(a, zero);
                let d = descs.add(k).cast_mut().cast::<__m512i>();
                _mm512_storeu_si512(d, _mm512_permutex2var_epi64(lo, first, hi));
                _mm512_storeu_si512(d.add(1), _mm512_permutex2var_epi64(lo, second, hi));
            }
            k += 8;
        }
        k
    }

    /// The byte shuffle that turns `[byte count, address]` (two
    /// little-endian words) into a data segment's big-endian fields: the
    /// count's 4 bytes reversed, 4 zero bytes for the key, the address's 8
    /// reversed.
    #[target_feature(enable = "sse4.1")]
    #[inline]
    fn dseg_shuffle() -> __m128i {
        _mm_setr_epi8(3, 2, 1, 0, -1, -1, -1, -1, 15, 14, 13, 12, 11, 10, 9, 8)
    }

    /// The memory key's bytes in the data segment's first word.
    const LKEY_WORD: u64 = u64::from_ne_bytes({
        let k = LKEY.to_be_bytes();
        [0, 0, 0, 0, k[0], k[1], k[2], k[3]]
    });

    /// A packet's byte count and data address: what its data segment says.
    ///
    /// # Safety
    /// `e` is an mbuf the caller holds.
    #[inline(always)]
    unsafe fn count_and_addr(e: Elem) -> (i64, i64) {
        // SAFETY: the caller's contract: a live header.
        let h = unsafe { &*e.as_ptr().cast::<MbufHeader>() };
        (
            h.data_len as i64,
            (h.buf_addr as u64).wrapping_add(h.data_off as u64) as i64,
        )
    }

    /// Writes the data segments of 4 packets into segments `segs..segs + 4`,
    /// one 16-byte store each.
    ///
    /// # Safety
    /// - The CPU has SSE4.1.
    /// - `elems` points to 4 mbufs the caller holds, each one segment.
    /// - `segs` points to 4 consecutive segments of a WQE ring in blocks
    ///   past the tail register (the device does not read them until the
    ///   next doorbell).
    #[inline]
    #[target_feature(enable = "sse4.1")]
    pub unsafe fn tx_dsegs_sse41(segs: *const Desc, elems: *const Elem) {
        let shuffle = dseg_shuffle();
        let key = _mm_set_epi64x(0, LKEY_WORD as i64);
        for k in 0..4 {
            // SAFETY: the caller's contract: slot `k` holds a live mbuf.
            let (count, addr) = unsafe { count_and_addr(*elems.add(k)) };
            let seg = _mm_or_si128(_mm_shuffle_epi8(_mm_set_epi64x(addr, count), shuffle), key);
            // The ring's words are atomics (`UnsafeCell`): a plain store
            // through the shared pointer is allowed.
            // SAFETY: the caller's contract: segment `k` exists, unread by
            // the device.
            unsafe { _mm_storeu_si128(segs.add(k).cast_mut().cast(), seg) };
        }
    }

    /// [`tx_dsegs_sse41`] in AVX2: one 32-byte store per two segments.
    ///
    /// # Safety
    /// As [`tx_dsegs_sse41`], with AVX2 instead of SSE4.1.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn tx_dsegs_avx2(segs: *const Desc, elems: *const Elem) {
        let shuffle = _mm256_broadcastsi128_si256(dseg_shuffle());
        let key = _mm256_set_epi64x(0, LKEY_WORD as i64, 0, LKEY_WORD as i64);
        for k in [0, 2] {
            // SAFETY: the caller's contract: slots `k`, `k + 1` hold live
            // mbufs.
            let ((c0, a0), (c1, a1)) = unsafe {
                (
                    count_and_addr(*elems.add(k)),
                    count_and_addr(*elems.add(k + 1)),
                )
            };
            let two = _mm256_or_si256(
                _mm256_shuffle_epi8(_mm256_set_epi64x(a1, c1, a0, c0), shuffle),
                key,
            );
            // SAFETY: as in `tx_dsegs_sse41`, for segments `k`, `k + 1`.
            unsafe { _mm256_storeu_si256(segs.add(k).cast_mut().cast(), two) };
        }
    }
}
