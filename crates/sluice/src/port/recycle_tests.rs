//! Unit tests of [`RecycleRxInfo`]: what a Tx queue may fill, against small
//! rings. The rings hold [`Elem::DANGLING`] placeholders; the tests that
//! commit fill the slots with real buffers of the pool first (the commit
//! contract) and play the Rx queue, putting them back afterwards.

use crate::mbuf::MbufPool;
use crate::mempool::Elem;

use super::recycle::RecycleRxInfo;
use crate::test_support::{TestPool, assert_pool_full};

/// 63 buffers of 256 bytes, to fill the small rings.
fn small_pool() -> MbufPool {
    TestPool::new(63)
        .name("recycle-unit")
        .data_room(256)
        .build()
}

/// A distinct address that is no buffer, to see where a write lands.
fn marker(i: usize) -> Elem {
    Elem::from_ptr(
        std::ptr::NonNull::new(std::ptr::without_provenance_mut(0x1000 + i * 8)).unwrap(),
    )
}

fn ring(n: usize) -> Vec<Elem> {
    vec![Elem::DANGLING; n]
}

/// A view of `ring` from `head`, `due` slots due in units of `unit`, the
/// test playing the Rx queue that lends it: each test that commits gives
/// the committed buffers back itself, once.
fn view<'a>(
    ring: &'a mut [Elem],
    head: u32,
    due: u32,
    unit: u32,
    pool: &'a MbufPool,
    committed: &'a mut u32,
) -> RecycleRxInfo<'a> {
    // SAFETY: the ring holds placeholders and markers, no buffer, until a
    // test commits buffers of `pool` into it, which that test then owns and
    // gives back (the Rx queue's part); nothing else reads the ring.
    unsafe { RecycleRxInfo::new(ring, head, due, unit, pool, committed) }
}

/// Fills the `n` slots `info` offers with buffers from its pool and commits
/// them; returns the buffers, which the caller (playing the Rx queue that
/// now owns them) must put back.
fn fill_and_commit(info: &mut RecycleRxInfo<'_>, n: u32) -> Vec<Elem> {
    let mut bufs = vec![Elem::DANGLING; n as usize];
    info.pool().mempool().get_bulk(&mut bufs).unwrap();
    info.slots(n).unwrap().copy_from_slice(&bufs);
    // The copy in `bufs` is the Rx queue's, given back by the caller.
    // SAFETY: the slots hold `n` distinct free buffers just taken from the
    // info's pool: plain (refcnt 1, one segment, nothing attached), unshared.
    unsafe { info.commit(n) };
    bufs
}

#[test]
fn the_view_reports_what_the_rx_queue_lent() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    let info = view(&mut r, 48, 7, 4, &pool, &mut committed);
    assert_eq!(info.ring_size(), 16);
    assert_eq!(info.mask(), 15);
    assert_eq!(info.refill_head(), 48);
    assert_eq!(info.due(), 7);
    assert_eq!(info.refill_requirement(), 4);
    assert!(std::ptr::eq(info.pool().mempool(), pool.mempool()));
    let s = format!("{info:?}");
    assert!(s.contains("ring_size: 16") && s.contains("due: 7"), "{s}");
}

#[test]
fn a_buffer_belongs_to_the_pool_by_its_address() {
    let pool = small_pool();
    let other = TestPool::new(7)
        .name("recycle-unit-other")
        .data_room(256)
        .build();
    let mut r = ring(16);
    let mut committed = 0;
    let info = view(&mut r, 0, 16, 4, &pool, &mut committed);
    let mut mine = [Elem::DANGLING; 63];
    pool.mempool().get_bulk(&mut mine).unwrap();
    let mut theirs = [Elem::DANGLING; 7];
    other.mempool().get_bulk(&mut theirs).unwrap();
    assert!(mine.iter().all(|&e| info.in_pool(e)), "every element");
    assert!(theirs.iter().all(|&e| !info.in_pool(e)), "no other pool's");
    assert!(!info.in_pool(Elem::DANGLING));
    let region = pool.mempool().region();
    let (base, len) = (region.base().as_ptr(), region.len());
    let at = |p: *mut u8| Elem::from_ptr(std::ptr::NonNull::new(p).unwrap());
    assert!(info.in_pool(at(base)));
    assert!(
        !info.in_pool(at(base.wrapping_add(len))),
        "one past the end"
    );
    assert!(!info.in_pool(at(base.wrapping_sub(1))), "one before");
    // SAFETY: the elements just taken, each given back once.
    unsafe {
        pool.mempool().put_bulk(&mine);
        other.mempool().put_bulk(&theirs);
    }
    assert_pool_full(&pool);
    assert_pool_full(&other);
}

#[test]
fn room_is_the_slots_due_in_whole_refill_units() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    let info = view(&mut r, 0, 10, 4, &pool, &mut committed);
    assert_eq!(info.room(), 8, "10 due, in units of 4");
    assert!(info.fits(4) && info.fits(8));
    assert!(!info.fits(0), "nothing is not a fill");
    assert!(!info.fits(6), "not a whole unit");
    assert!(!info.fits(10), "more than the units due");
    assert!(!info.fits(12), "more than due");
    let mut committed = 0;
    let info = view(&mut r, 4, 3, 4, &pool, &mut committed);
    assert_eq!(info.room(), 0, "less than a unit due");
    assert!(!info.fits(4));
}

#[test]
fn room_never_reaches_past_the_slots_due() {
    let pool = small_pool();
    let mut r = ring(16);
    for due in 0..=16u32 {
        let mut committed = 0;
        let info = view(&mut r, 0, due, 0, &pool, &mut committed);
        assert_eq!(info.room(), due);
        assert!(!info.fits(due + 1), "due {due}");
    }
}

#[test]
fn room_stops_at_the_wrap_of_the_ring() {
    let pool = small_pool();
    let mut r = ring(16);
    // The head 4 slots before the end, the whole ring due: 4 fit.
    for head in [12u32, 28, 12 + (1 << 20)] {
        let mut committed = 0;
        let mut info = view(&mut r, head, 16, 4, &pool, &mut committed);
        assert_eq!(info.room(), 4, "head {head}");
        assert!(info.fits(4));
        assert!(!info.fits(8), "8 would cross the wrap");
        assert!(info.slots(8).is_none());
        assert_eq!(info.slots(4).unwrap().len(), 4);
    }
    // Without a refill unit too: 3 slots to the wrap.
    let mut r8 = ring(8);
    let mut committed = 0;
    let info = view(&mut r8, 5, 6, 0, &pool, &mut committed);
    assert_eq!(info.room(), 3);
    assert!(info.fits(1) && info.fits(3) && !info.fits(4));
    // A batch larger than what is left before the wrap does not fit, even
    // with the whole ring due.
    let mut committed = 0;
    let mut r32 = ring(32);
    let info = view(&mut r32, 24, 32, 8, &pool, &mut committed);
    assert_eq!(info.room(), 8, "8 to the wrap of 32");
    assert!(!info.fits(16));
}

#[test]
fn slots_are_the_ring_entries_from_the_refill_head() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    {
        let mut info = view(&mut r, 16 + 8, 8, 4, &pool, &mut committed);
        let s = info.slots(4).unwrap();
        for (i, e) in s.iter_mut().enumerate() {
            *e = marker(i);
        }
    }
    for (i, e) in r.iter().enumerate() {
        let want = if (8..12).contains(&i) {
            marker(i - 8)
        } else {
            Elem::DANGLING
        };
        assert_eq!(*e, want, "slot {i}");
    }
    assert_eq!(committed, 0, "writing slots hands nothing over");
}

#[test]
fn commit_moves_the_head_and_hands_the_count_to_the_queue() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    let mut taken = Vec::new();
    {
        let mut info = view(&mut r, 8, 12, 4, &pool, &mut committed);
        assert_eq!(info.room(), 8, "8 to the wrap");
        taken.extend(fill_and_commit(&mut info, 4));
        assert_eq!((info.refill_head(), info.due(), info.room()), (12, 8, 4));
        taken.extend(fill_and_commit(&mut info, 4));
        assert_eq!((info.refill_head(), info.due()), (16, 4));
        // Past the wrap now: the rest due is at the front of the ring.
        assert_eq!(info.room(), 4);
        taken.extend(fill_and_commit(&mut info, 4));
        assert_eq!((info.refill_head(), info.due(), info.room()), (20, 0, 0));
        assert!(info.slots(4).is_none());
    }
    assert_eq!(committed, 12);
    let mut want: Vec<Elem> = r[8..16].to_vec();
    want.extend_from_slice(&r[..4]);
    assert_eq!(want, taken, "the buffers sit in slots 8..16 then 0..4");
    assert_eq!(r[4..8], [Elem::DANGLING; 4]);
    // SAFETY: the Rx queue's part: it owns the committed buffers, each
    // once, and gives them back.
    unsafe { pool.mempool().put_bulk(&taken) };
    assert_pool_full(&pool);
}

#[test]
fn the_refill_head_runs_free_across_u32_wrap() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    let head = u32::MAX - 3; // slot 12, a multiple of 4
    let taken = {
        let mut info = view(&mut r, head, 8, 4, &pool, &mut committed);
        assert_eq!(info.room(), 4);
        let taken = fill_and_commit(&mut info, 4);
        assert_eq!((info.refill_head(), info.due(), info.room()), (0, 4, 4));
        taken
    };
    assert_eq!(committed, 4);
    assert_eq!(r[12..16], taken[..]);
    // SAFETY: as above, the committed buffers go back once.
    unsafe { pool.mempool().put_bulk(&taken) };
    assert_pool_full(&pool);
}

#[test]
#[should_panic(expected = "commit of 8 slots: room 4")]
fn a_commit_across_the_wrap_panics() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    let mut info = view(&mut r, 12, 16, 4, &pool, &mut committed);
    // SAFETY: the count does not fit, so commit panics before it takes
    // anything: no slot is handed over.
    unsafe { info.commit(8) };
}

#[test]
#[should_panic(expected = "commit of 8 slots: room 4")]
fn a_commit_of_more_than_due_panics() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    let mut info = view(&mut r, 0, 4, 4, &pool, &mut committed);
    // SAFETY: as above: the commit panics before taking anything.
    unsafe { info.commit(8) };
}

#[test]
#[should_panic(expected = "commit of 6 slots: room 8")]
fn a_commit_of_part_of_a_refill_unit_panics() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    let mut info = view(&mut r, 0, 8, 4, &pool, &mut committed);
    // SAFETY: as above: the commit panics before taking anything.
    unsafe { info.commit(6) };
}

#[test]
#[should_panic(expected = "commit of 0 slots")]
fn a_commit_of_nothing_panics() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    let mut info = view(&mut r, 0, 8, 4, &pool, &mut committed);
    // SAFETY: as above: the commit panics before taking anything.
    unsafe { info.commit(0) };
}

/// The message of the panic a view of a ring of `ring_len` slots refuses
/// to be made with.
fn refused_view(pool: &MbufPool, ring_len: usize, head: u32, due: u32, unit: u32) -> String {
    let mut r = ring(ring_len);
    let mut committed = 0;
    let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        view(&mut r, head, due, unit, pool, &mut committed);
    }))
    .expect_err("the view is refused");
    failure
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| failure.downcast_ref::<&str>().map(|m| m.to_string()))
        .unwrap_or_default()
}

#[test]
fn bad_views_are_refused_naming_the_ring_and_what_is_due() {
    let pool = small_pool();
    // (what is wrong, ring slots, head, due, unit, message)
    let cases = [
        (
            "a ring size that is not a power of two",
            12,
            0,
            4,
            4,
            "bad recycle view: ring 12, due 4, unit 4, head 0",
        ),
        (
            "an empty ring",
            0,
            0,
            0,
            0,
            "bad recycle view: ring 0, due 0, unit 0, head 0",
        ),
        (
            "more slots due than the ring holds",
            16,
            0,
            17,
            4,
            "bad recycle view: ring 16, due 17, unit 4, head 0",
        ),
        (
            "a refill head off the refill unit",
            16,
            6,
            4,
            4,
            "bad recycle view: ring 16, due 4, unit 4, head 6",
        ),
        (
            "a refill unit that is not a power of two",
            16,
            0,
            4,
            3,
            "bad recycle view: ring 16, due 4, unit 3, head 0",
        ),
        (
            "a refill unit larger than the ring",
            16,
            0,
            16,
            32,
            "bad recycle view: ring 16, due 16, unit 32, head 0",
        ),
    ];
    for (what, ring_len, head, due, unit, message) in cases {
        let got = refused_view(&pool, ring_len, head, due, unit);
        assert!(got.contains(message), "{what}: {got}");
    }
    assert_pool_full(&pool);
}

#[test]
fn fill_copies_both_pieces_in_order_and_commits_them() {
    let pool = small_pool();
    let mut r = ring(16);
    let mut committed = 0;
    let mut bufs = [Elem::DANGLING; 12];
    pool.mempool().get_bulk(&mut bufs).unwrap();
    {
        let mut info = view(&mut r, 4, 12, 4, &pool, &mut committed);
        // A run cut in two (6 + 2), then one piece of 4.
        // SAFETY: distinct free buffers just taken from the info's pool:
        // plain, unshared; `bufs` is the Rx queue's copy, given back below.
        assert!(unsafe { info.fill(&bufs[..6], &bufs[6..8]) });
        assert_eq!((info.refill_head(), info.due(), info.room()), (12, 4, 4));
        // SAFETY: as above.
        assert!(unsafe { info.fill(&bufs[8..], &[]) });
        assert_eq!((info.refill_head(), info.due(), info.room()), (16, 0, 0));
    }
    assert_eq!(committed, 12);
    assert_eq!(r[4..16], bufs[..]);
    assert_eq!(r[..4], [Elem::DANGLING; 4]);
    // SAFETY: the Rx queue's part: the committed buffers go back once.
    unsafe { pool.mempool().put_bulk(&bufs) };
    assert_pool_full(&pool);
}

#[test]
fn a_fill_that_does_not_fit_writes_and_commits_nothing() {
    let pool = small_pool();
    let marks: Vec<Elem> = (0..20).map(marker).collect();
    let mut r = ring(16);
    let mut committed = 0;
    {
        let mut info = view(&mut r, 12, 16, 4, &pool, &mut committed);
        // The markers are no buffers, but nothing is committed: each fill
        // is refused before it writes (the contract binds only a fill that
        // is made).
        // SAFETY: refused, so nothing is handed over.
        unsafe {
            assert!(!info.fill(&marks[..4], &marks[4..8]), "across the wrap");
            assert!(!info.fill(&marks[..2], &[]), "part of a refill unit");
            assert!(!info.fill(&[], &[]), "nothing");
            assert!(!info.fill(&marks, &[]), "more than the ring");
        }
        assert_eq!((info.refill_head(), info.due(), info.room()), (12, 16, 4));
    }
    let mut r2 = ring(16);
    {
        let mut info = view(&mut r2, 0, 4, 4, &pool, &mut committed);
        // SAFETY: refused, as above.
        assert!(!unsafe { info.fill(&marks[..8], &[]) }, "more than due");
    }
    assert_eq!(committed, 0);
    assert!(r.iter().chain(&r2).all(|&e| e == Elem::DANGLING));
    assert_pool_full(&pool);
}

#[test]
fn the_unchecked_view_is_the_checked_one() {
    let pool = small_pool();
    let mut r = ring(32);
    let mut c1 = 0;
    let a = format!("{:?}", view(&mut r, 48, 24, 8, &pool, &mut c1));
    let mut c2 = 0;
    // SAFETY: the shape the checked constructor took just above; the ring
    // holds placeholders and nothing is committed (as in `view`).
    let info = unsafe { RecycleRxInfo::new_unchecked(&mut r, 48, 24, 8, &pool, &mut c2) };
    assert_eq!(format!("{info:?}"), a);
    assert_eq!((info.mask(), info.room()), (31, 16), "16 to the wrap");
}
