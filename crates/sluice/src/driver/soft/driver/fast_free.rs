//! The fast-free offload, kept sound: its contract checked where it costs
//! least.
//!
//! Fast free (DPDK's `MBUF_FAST_FREE`) lets a Tx queue give a completed
//! batch back in one bulk put into one pool, and a recycle step move it
//! after looking at its first buffer only. The application promises what
//! makes that right: every buffer the queue sends is a *plain* buffer —
//! reference count 1, one segment, its own data room (no external buffer)
//! — of one pool. In C a broken promise is the caller's undefined
//! behaviour; Sluice's API is safe, so a clone still held elsewhere, a
//! fragment-backed mbuf or another pool's buffer must not end up in the
//! pool (or an Rx ring) as if it were free.
//!
//! # How
//! - **The pool is learnt** from the first packet the queue sends after a
//!   start, and a handle on it kept until the queue stops: a pool cannot go
//!   away (and another take its place in memory) while the queue compares
//!   addresses with it.
//! - **Each packet is screened as `tx_burst` posts it**, in the loop that
//!   reads its first header line anyway: its address lies in the pool's
//!   region, and the first line says plain (reference count, segment count,
//!   `buf_addr` at the element's own data room) — a few branch-free
//!   operations OR-ed into one word per burst. The packet is the burst's
//!   alone, so what holds then holds until it is freed: no one else can
//!   clone it or attach anything to it.
//! - **A burst with a packet that fails taints** every slot posted up to
//!   its end: a mark `taint_end` on the free-running slot index. Batches
//!   retire in order, so one mark serves: a batch starting before it is
//!   freed (or offered for recycling) with the full per-buffer checks, one
//!   starting at or after it the fast way. The mark is conservative — the
//!   clean batches between the last fast one and a failing packet take the
//!   checks too — and free of cost on the fast path: one compare per batch.
//!
//! The learnt pool serves queues without the offload too
//! (`FastFree::plain_pool`): a completed batch whose buffers are plain
//! buffers of it, checked then on their first header lines, goes back in
//! one bulk put without the second line the full free reads. A batch of
//! single-segment mbufs over page-pool fragments (an `rxbuf=frag` port's
//! packets, [`FastFree::free_frags`]) likewise: the page reference and the
//! buffer fields are in the first header line, and the own buffer each
//! header gets back follows from the pool.

use crate::mbuf::layout::{BufTail, EXT_PAGE_FRAG};
use crate::mbuf::{HEADER_SIZE, MbufHeader};
use crate::mempool::{Elem, Mempool, PoolInner};
use crate::pagepool::{FragRun, detach_frag_own};
use crate::sync::Ordering;

use super::tx::before;

/// A fast-free Tx queue's pool and taint mark (see the module docs).
pub(super) struct FastFree {
    /// The pool learnt from the first packet sent since the start (`None`
    /// before it, or if that pool has no handle left): the handle keeps it
    /// alive while `base`/`len` are compared with.
    pool: Option<Mempool>,
    /// Its address (null while `pool` is `None`).
    inner: *const PoolInner,
    /// Its region, `[base, base + len)`; `len` 0 while there is no pool, so
    /// no address is in it.
    base: usize,
    len: usize,
    /// The length of its elements' own buffers (headroom + data room: the
    /// same for every element of a pool).
    own_len: u16,
    /// Slots at free-running indices before this may hold a packet that is
    /// not a plain buffer of `pool`. Meaningful while `tainted`.
    taint_end: u32,
    /// Some batch before `taint_end` is not retired yet.
    tainted: bool,
}

impl FastFree {
    /// No pool learnt, nothing tainted.
    pub(super) fn new() -> FastFree {
        FastFree {
            pool: None,
            inner: std::ptr::null(),
            base: 0,
            len: 0,
            own_len: 0,
            taint_end: 0,
            tainted: false,
        }
    }

    /// The pool's region, to screen packets against with
    /// [`Region::unfit`], learning the pool from `first` (the first packet
    /// of a burst about to be posted) if there is none yet. With no pool
    /// (none learnt, or that pool had no handle left) the region is empty:
    /// every packet is unfit.
    ///
    /// # Safety
    /// `first`, if any, is an mbuf the caller owns.
    #[inline(always)]
    pub(super) unsafe fn region(&mut self, first: Option<&Elem>) -> Region {
        if self.pool.is_none()
            && let Some(&e) = first
        {
            // SAFETY: an mbuf the caller owns.
            unsafe { self.learn(e) };
        }
        Region {
            base: self.base,
            len: self.len,
        }
    }

    /// Takes the pool of the mbuf at `e` as the queue's.
    ///
    /// # Safety
    /// `e` is an mbuf the caller owns.
    #[cold]
    unsafe fn learn(&mut self, e: Elem) {
        // SAFETY: an mbuf the caller owns: its header is readable, and its
        // pool alive while it is out of it.
        let h = unsafe { &*e.as_ptr().cast::<MbufHeader>() };
        // SAFETY: as above.
        let pool = unsafe { Mempool::from_element_pool(h.pool) };
        // A pool with no handle left is never learnt: every packet then
        // fails the screen (no region), and every batch takes the checks.
        if let Some(pool) = pool {
            self.inner = pool.inner_ptr().as_ptr();
            self.base = pool.region().base().as_ptr() as usize;
            self.len = pool.region().len();
            // Every element of an mbuf pool gets the same own buffer.
            self.own_len = h.own_buf_len;
            self.pool = Some(pool);
        }
    }

    /// Where the learnt pool's region starts (0 with no pool learnt).
    #[inline(always)]
    pub(super) fn region_base(&self) -> usize {
        self.base
    }

    /// Notes that the slots posted before `posted` may hold a packet
    /// that failed the screen.
    #[inline]
    pub(super) fn taint(&mut self, posted: u32) {
        self.taint_end = posted;
        self.tainted = true;
    }

    /// The pool every buffer of the batches from free-running index `first`
    /// on belongs to as a plain buffer — so they may be freed or recycled
    /// the fast way — or `None` if they must take the checks.
    #[inline(always)]
    pub(super) fn pool_from(&mut self, first: u32) -> Option<*const PoolInner> {
        if self.tainted {
            if before(first, self.taint_end) {
                return None;
            }
            // Every slot before the mark is retired: it no longer matters
            // (and must not come to look ahead once the indices wrap).
            self.tainted = false;
        }
        // A slot was posted clean only with a pool learnt.
        (!self.inner.is_null()).then_some(self.inner)
    }

    /// The queue's pool if every buffer of `batch` is a plain buffer of it
    /// now, learning the pool from the first buffer if none is learnt yet;
    /// `None` if one is not (the batch then takes the full free, buffer by
    /// buffer). This is the free path's check without the fast-free
    /// promise: it reads the buffers' first header lines only, the lines
    /// `tx_burst` read, where the full free reads the second line too (next
    /// segment, pool, external buffer) — a line no one has touched since
    /// the buffer last went back to its pool.
    ///
    /// # Safety
    /// `batch` holds mbufs the caller owns, one reference each, that the
    /// device no longer reads.
    #[inline(always)]
    pub(super) unsafe fn plain_pool(&mut self, batch: &[Elem]) -> Option<*const PoolInner> {
        // SAFETY: the first is an mbuf the caller owns.
        let region = unsafe { self.region(batch.first()) };
        let (&first, rest) = batch.split_first()?;
        // SAFETY: an mbuf the caller owns: its header is readable.
        let mut unfit = region.unfit(first, unsafe { &*first.as_ptr().cast::<MbufHeader>() });
        if unfit != 0 {
            // A batch of Rx fragments' headers (or other buffers that are
            // not plain) goes to the full free, which reads these lines
            // itself: not a pass over the rest here first.
            return None;
        }
        for &e in rest {
            // SAFETY: an mbuf the caller owns: its header is readable.
            unfit |= region.unfit(e, unsafe { &*e.as_ptr().cast::<MbufHeader>() });
        }
        // A reference count of 1 read now is ours alone: no clone is left
        // to take another, so the buffer stays plain until it is put.
        (unfit == 0 && !self.inner.is_null()).then_some(self.inner)
    }

    /// Frees a batch of single-segment mbufs of the queue's pool over
    /// page-pool fragments (`rxbuf=frag` packets) on their first header
    /// lines, as [`plain_pool`](Self::plain_pool) checks plain ones: each
    /// mbuf is checked ([`Region::unfit_frag`]: one reference, ours; one
    /// segment; a page fragment attached; of the pool), its fragment
    /// detached, the header given its own buffer back (it follows from the
    /// element's address and the pool), and the fragments' references added
    /// to `run` (a run per page; the caller ends it, or carries it on to
    /// its next batch). Returns the pool, every header of the batch now
    /// a plain buffer of it for one bulk put; or `None` at the first mbuf
    /// that is not such: the batch then takes the full free, the headers
    /// detached so far being plain buffers it puts back as any other.
    ///
    /// # Safety
    /// As [`plain_pool`](Self::plain_pool); the mbufs' bytes are no longer
    /// used.
    #[inline(always)]
    pub(super) unsafe fn free_frags(
        &mut self,
        batch: &[Elem],
        run: &mut FragRun,
    ) -> Option<*const PoolInner> {
        // SAFETY: the first is an mbuf the caller owns.
        let region = unsafe { self.region(batch.first()) };
        if self.inner.is_null() {
            return None;
        }
        let own_tail = BufTail::new(0, self.own_len, std::ptr::null());
        // The run in locals while the loop writes the headers: its count
        // stays in a register instead of a load and a store per packet.
        let (mut page, mut page_target, mut page_refs) = run.take_parts();
        for &e in batch {
            // SAFETY: an mbuf the caller owns: its header is readable.
            let h = unsafe { &mut *e.as_ptr().cast::<MbufHeader>() };
            if region.unfit_frag(e, h) != 0 {
                // SAFETY: the references taken out above and added below,
                // ours; the run is empty since `take_parts`.
                unsafe { run.put_parts(page, page_target, page_refs) };
                return None;
            }
            // One reference, ours, read now: no clone is left to take
            // another, so the header is ours alone. The own buffer follows
            // the header; its IO address is the element's offset in the
            // pool's region plus the header (how the pool set it).
            let own_iova = (e.as_ptr() as usize - self.base + HEADER_SIZE) as u64;
            // SAFETY: a single-segment mbuf of the learnt pool (whose own
            // buffers are `own_len` long) over a page fragment, its last
            // reference given up here.
            let (meta, target) = unsafe { detach_frag_own(h, own_iova, own_tail) };
            if meta.as_ptr().cast_const() == page {
                page_refs += 1;
            } else {
                // Another page (once per page's run): the run as it was
                // goes back, and `add` ends it and starts this page's.
                // SAFETY: the run's references, ours; it is empty since
                // `take_parts`. Then the fragment's one reference, given
                // up once.
                unsafe {
                    run.put_parts(page, page_target, page_refs);
                    run.add(meta, target);
                }
                (page, page_target, page_refs) = run.take_parts();
            }
        }
        // SAFETY: the run's references, ours; it is empty since `take_parts`.
        unsafe { run.put_parts(page, page_target, page_refs) };
        Some(self.inner)
    }

    /// Forgets the pool and the mark: the queue holds no buffer (stopped,
    /// its indices reset).
    pub(super) fn reset(&mut self) {
        *self = FastFree::new();
    }
}

/// A pool's memory, `[base, base + len)`, that screened packets must lie
/// in; empty by default (every packet unfit).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Region {
    base: usize,
    len: usize,
}

impl Region {
    /// Non-zero unless the mbuf at `e` (header `h`) is a plain buffer of
    /// this region's pool: reference count 1, one segment, `buf_addr` at
    /// its own data room, its address in the region. Branch-free, to be
    /// OR-ed over a burst as its packets are posted (their first header
    /// lines are being read then anyway).
    #[inline(always)]
    pub(super) fn unfit(self, e: Elem, h: &MbufHeader) -> u64 {
        let addr = e.as_ptr() as usize;
        // Acquire: a clone dropped on another thread released its uses of
        // the buffer with its decrement; reading 1 makes them happen-before
        // the free this allows.
        (h.refcnt.load(Ordering::Acquire) as u64 ^ 1)
            | (h.nb_segs as u64 ^ 1)
            | (h.buf_addr as u64 ^ (addr + HEADER_SIZE) as u64)
            | (addr.wrapping_sub(self.base) >= self.len) as u64
    }

    /// Non-zero unless the mbuf at `e` (header `h`) is a single-segment
    /// mbuf of this region's pool over a page-pool fragment: reference
    /// count 1, one segment, the external-buffer word tagged as a page
    /// fragment, its address in the region. Branch-free, on the header's
    /// first line.
    #[inline(always)]
    pub(super) fn unfit_frag(self, e: Elem, h: &MbufHeader) -> u64 {
        let addr = e.as_ptr() as usize;
        // Acquire: as in `unfit`.
        (h.refcnt.load(Ordering::Acquire) as u64 ^ 1)
            | (h.nb_segs as u64 ^ 1)
            | ((h.shinfo as usize & EXT_PAGE_FRAG) as u64 ^ EXT_PAGE_FRAG as u64)
            | (addr.wrapping_sub(self.base) >= self.len) as u64
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;
    use crate::mbuf::{Mbuf, MbufPool, put_bulk_to_pool};
    use crate::mempool::HugepagePolicy;
    use crate::pagepool::{
        BlockProvider, FragLayout, PageFragAlloc, PagePool, PagePoolConfig, ProviderConfig,
        attach_frag,
    };
    use crate::test_support::TestPool;

    /// What one mbuf of a freed batch is.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        /// One segment over a page fragment, one reference: what
        /// `frag_pool` takes.
        Frag,
        /// The same with a clone held elsewhere (dropped some steps later).
        FragCloned,
        /// A plain buffer of the pool.
        Plain,
        /// A page fragment with a second segment chained to it.
        FragChain,
        /// A page fragment on a header of another pool.
        FragForeign,
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            8 => Just(Kind::Frag),
            1 => Just(Kind::FragCloned),
            1 => Just(Kind::Plain),
            1 => Just(Kind::FragChain),
            1 => Just(Kind::FragForeign),
        ]
    }

    /// One side of the comparison: its provider, page pool, fragment
    /// allocator and header pools, and the clones it holds.
    struct World {
        provider: BlockProvider,
        pages: PagePool,
        frags: PageFragAlloc,
        headers: MbufPool,
        foreign: MbufPool,
        held: VecDeque<Mbuf>,
    }

    impl World {
        fn new(name: &str) -> World {
            let provider = BlockProvider::new(ProviderConfig {
                name: name.into(),
                size: 1 << 20,
                hugepages: HugepagePolicy::Never,
            })
            .unwrap();
            let pages = PagePool::new(
                &provider,
                PagePoolConfig {
                    name: name.into(),
                    order: 3,
                    ..Default::default()
                },
            )
            .unwrap();
            let frags = PageFragAlloc::new(pages.clone());
            let headers = TestPool::new(255).name(name).data_room(64).build();
            let foreign = TestPool::new(63)
                .name(&format!("{name}-foreign"))
                .data_room(64)
                .build();
            World {
                provider,
                pages,
                frags,
                headers,
                foreign,
                held: VecDeque::new(),
            }
        }

        /// An mbuf of `kind` over a fresh fragment of `layout`.
        fn make(&mut self, kind: Kind, layout: FragLayout) -> Mbuf {
            let pool = if kind == Kind::FragForeign {
                &self.foreign
            } else {
                &self.headers
            };
            let mut m = pool.alloc().unwrap();
            if kind == Kind::Plain {
                return m;
            }
            let f = self.frags.alloc_frag(layout.frag_size()).unwrap();
            attach_frag(&mut m, f, layout).unwrap();
            match kind {
                Kind::FragCloned => self.held.push_back(m.clone()),
                Kind::FragChain => m.chain(self.headers.alloc().unwrap()).unwrap(),
                _ => {}
            }
            m
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Batches freed as a Tx queue frees them — `free_frags` and one
        /// bulk put, or else the full free, the run of page references
        /// carried from batch to batch or ended — against
        /// each mbuf dropped on its own, over identical worlds: only
        /// batches of unshared single-segment fragment mbufs of the queue's
        /// pool take the first-line path, each header comes out a plain
        /// buffer, the same pages are out after every step, and everything
        /// is home at the end.
        #[test]
        fn frag_batches_free_as_the_per_fragment_path(
            batches in proptest::collection::vec(
                (proptest::collection::vec(kind(), 1..=32), any::<bool>()), 1..24),
            mtu in prop_oneof![Just(1500u16), Just(3000), Just(9000)],
            clones_kept in 0usize..8,
        ) {
            let layout = FragLayout::for_mtu(mtu);
            let mut a = World::new("ff-frag-a");
            let mut b = World::new("ff-frag-b");
            let mut ff = FastFree::new();
            {
                // The queue learns its pool from a packet of it.
                let m = a.headers.alloc().unwrap();
                let e = Elem::from_ptr(std::ptr::NonNull::new(m.as_header_ptr()).unwrap().cast());
                // SAFETY: an mbuf we own.
                unsafe { ff.learn(e) };
            }
            prop_assert_eq!(ff.own_len, 128 + 64);
            let mut run = FragRun::new();
            for (kinds, end_run) in batches {
                let batch: Vec<Elem> = kinds
                    .iter()
                    .map(|&k| Elem::from_ptr(a.make(k, layout).into_raw().cast()))
                    .collect();
                let reference: Vec<Mbuf> = kinds.iter().map(|&k| b.make(k, layout)).collect();
                let all_frag = kinds.iter().all(|&k| k == Kind::Frag);
                // SAFETY: mbufs we own, one reference each.
                let pool = unsafe { ff.free_frags(&batch, &mut run) };
                prop_assert_eq!(pool.is_some(), all_frag);
                if let Some(pool) = pool {
                    for &e in &batch {
                        // SAFETY: a header now ours alone, read only.
                        let h = unsafe { &*e.as_ptr().cast::<MbufHeader>() };
                        prop_assert_eq!(h.buf_addr, h.own_buf_addr);
                        prop_assert_eq!((h.buf_iova, h.buf_len), (h.own_buf_iova, h.own_buf_len));
                        prop_assert!(h.shinfo.is_null());
                        prop_assert_eq!(h.ol_flags & crate::mbuf::ol::EXTERNAL, 0);
                    }
                    // SAFETY: plain buffers of `pool` now, given up once.
                    unsafe { put_bulk_to_pool(pool, &batch) };
                } else {
                    let mut batch = batch;
                    // SAFETY: mbufs we own (some detached by `free_frags`,
                    // plain buffers now), given up once.
                    unsafe { crate::mbuf::free_bulk(&mut batch) };
                }
                drop(reference);
                for w in [&mut a, &mut b] {
                    while w.held.len() > clones_kept {
                        w.held.pop_front();
                    }
                }
                // The run carries on to the next batch, holding one page at
                // most; ended, the same pages are out on both sides.
                let (out_a, out_b) = (a.pages.stats().in_flight, b.pages.stats().in_flight);
                prop_assert!(out_a == out_b || out_a == out_b + 1, "{} {}", out_a, out_b);
                if end_run {
                    run.end();
                    prop_assert_eq!(a.pages.stats().in_flight, b.pages.stats().in_flight);
                }
                prop_assert_eq!(a.headers.available(), b.headers.available());
                prop_assert_eq!(a.foreign.available(), b.foreign.available());
            }
            run.end();
            for w in [a, b] {
                let World { provider, pages, frags, headers, foreign, held } = w;
                drop((held, frags));
                prop_assert!(headers.is_full() && foreign.is_full());
                prop_assert!(pages.all_home(), "{:?}", pages.stats());
                drop(pages);
                prop_assert!(provider.is_full());
            }
        }
    }
}
