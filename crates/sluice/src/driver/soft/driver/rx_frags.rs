//! Rx buffers from page-pool fragments (`rxbuf=frag`): each descriptor is
//! armed with a fragment of a 64 KiB page-pool page, sized to the port's
//! MTU (headroom + largest frame + tailroom, see [`FragLayout`]), instead
//! of an mbuf's own fixed-size data room; the packet gets an mbuf header
//! from the queue's mempool when it is delivered.
//!
//! Per queue: one [`PagePool`] of 64 KiB pages over the port's
//! [`BlockProvider`] and one [`PageFragAlloc`]. The pool's owner is the
//! queue's polling thread: bound on the first refill inside `rx_burst` done
//! by an lcore (not at `start`, which may run on another thread), so pages
//! whose last fragment is freed there recycle through the direct cache and
//! the others through the pool's ring.
//!
//! Ownership: an armed fragment ([`ArmedFrag`], in the queue's slot beside
//! its descriptor) holds a reference on its page until it is delivered —
//! handed to the packet's header, which holds it from then on — or
//! released (the queue stopped); freeing the mbuf, wherever that happens,
//! detaches it, which gives the fragment back, and returns the header to
//! its mempool.

use crate::driver::soft::hw::desc::Desc;
use crate::mempool::Elem;
use crate::pagepool::{
    ArmedFrag, BlockProvider, FragLayout, PageFragAlloc, PagePool, PagePoolConfig, attach_armed,
};
use crate::port::PortError;
#[cfg(not(target_arch = "x86_64"))]
use std::sync::atomic::Ordering;

/// Page order of Rx fragment pages (64 KiB: 36 fragments at MTU 1500, so
/// a page's take from the pool, its cutting and its way home are shared by
/// twice the packets 32 KiB pages give them to).
pub const RX_PAGE_ORDER: u32 = 4;
/// Bytes of an Rx fragment page.
pub const RX_PAGE_BYTES: usize = 4096 << RX_PAGE_ORDER;

/// Buffer memory one posted descriptor takes with fragments of `layout`:
/// its share of a page (a page holds `page / stride` fragments). A posted
/// descriptor holds no header: the packet gets one when it is delivered.
pub fn frag_bytes_per_desc(layout: FragLayout) -> usize {
    RX_PAGE_BYTES.div_ceil(RX_PAGE_BYTES / layout.stride())
}

/// Writes a descriptor's read format — buffer address `q0`, and a zero
/// status word — with one 16-byte store on x86-64.
///
/// # Safety
/// The device does not read `d` until the next doorbell (it is at or past
/// the tail register).
#[inline(always)]
unsafe fn write_read_format(d: &Desc, q0: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cvtsi64_si128, _mm_store_si128};
        // The ring's words are atomics (`UnsafeCell`), so a plain store
        // through the shared reference is allowed. A descriptor is 16
        // bytes, 16-byte aligned (the ring is 64-byte aligned); SSE2 is part
        // of every x86-64 target; `_mm_cvtsi64_si128` zeroes the high word.
        let p = (d as *const Desc).cast_mut().cast();
        // SAFETY: the caller's contract: nothing races this aligned store.
        unsafe { _mm_store_si128(p, _mm_cvtsi64_si128(q0 as i64)) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        d.q0.store(q0, Ordering::Relaxed);
        d.q1.store(0, Ordering::Relaxed);
    }
}

/// A queue's fragment source.
pub struct RxFrags {
    alloc: PageFragAlloc,
    layout: FragLayout,
    /// The address of the pages' provider region: a fragment's IO address
    /// is its address less this (no read of its page's metadata).
    iova_base: usize,
    /// The page pool's owner is settled (bound to the polling lcore, or
    /// found owned).
    bound: bool,
}

impl RxFrags {
    /// A source of fragments of `layout` for queue `q` of port `spec`.
    pub fn new(
        provider: &BlockProvider,
        spec: &str,
        q: usize,
        layout: FragLayout,
    ) -> Result<RxFrags, PortError> {
        layout
            .check()
            .map_err(|e| PortError::config(format!("port '{spec}': {e}")))?;
        if layout.stride() > RX_PAGE_BYTES {
            return Err(PortError::config(format!(
                "port '{spec}': an Rx fragment of {} bytes exceeds the {RX_PAGE_BYTES}-byte page",
                layout.frag_size()
            )));
        }
        let pool = PagePool::new(
            provider,
            PagePoolConfig {
                name: format!("{spec} rxq{q}"),
                order: RX_PAGE_ORDER,
                ..Default::default()
            },
        )
        .map_err(|e| PortError::config(format!("port '{spec}': {e}")))?;
        let iova_base = pool.inner().provider().base();
        Ok(RxFrags {
            alloc: PageFragAlloc::new(pool),
            layout,
            iova_base,
            bound: false,
        })
    }

    /// The fragment layout.
    pub fn layout(&self) -> FragLayout {
        self.layout
    }

    /// Makes the calling thread the page pool's owner if it is an lcore and
    /// none is yet (once settled, a flag test).
    #[inline]
    pub fn bind_once(&mut self) {
        if !self.bound && crate::lcore::current().is_some() {
            // Either we own it now or another lcore does: settled either way.
            let _ = self.alloc.pool().bind_to_current_lcore();
            self.bound = true;
        }
    }

    /// Arms every slot with a fresh fragment and writes the read format of
    /// the descriptor beside it (`descs[i]` for `slots[i]`), or arms
    /// nothing (false: no page to be had).
    ///
    /// The fragments are cut a page's run at a time
    /// ([`PageFragAlloc::alloc_frags`]), each taken apart into the slot as
    /// it is cut and its address written into the descriptor: only the
    /// slots and the descriptors are written, no header and none of the
    /// fragments' lines.
    ///
    /// The descriptors are not yet handed to the device (they lie past the
    /// tail register): a batch that fails part way leaves some of them
    /// written, which the device does not see, and the next arming writes
    /// them again.
    pub fn arm(&mut self, slots: &mut [ArmedFrag], descs: &[Desc]) -> bool {
        assert_eq!(slots.len(), descs.len(), "one descriptor per slot");
        let layout = self.layout;
        let headroom = layout.headroom as u64;
        let n = slots.len();
        let mut done = 0;
        let cut = self.alloc.alloc_frags(layout.frag_size(), n, |f| {
            // `alloc_frags` hands out `n` fragments at most, each of the
            // layout's size (checked in `new`); `done` counts them.
            debug_assert!(done < n);
            // SAFETY: `done < n`, the length of both `slots` and `descs`
            // (asserted above): no bounds check, so nothing in the loop can
            // unwind and the carving state stays in registers.
            let (slot, d) = unsafe { (slots.get_unchecked_mut(done), descs.get_unchecked(done)) };
            let armed = ArmedFrag::new(f, layout);
            // SAFETY: a descriptor of this batch, at or past the tail
            // register: the device does not read it before the doorbell.
            unsafe { write_read_format(d, armed.addr() as u64 + headroom) };
            *slot = armed;
            done += 1;
        });
        if cut.is_err() {
            for a in &slots[..done] {
                // SAFETY: fragments of this batch, armed above and handed to
                // no one: each reference given back once.
                unsafe { a.release() };
            }
            return false;
        }
        true
    }

    /// Hands the armed fragment `frag` to the header `e` at delivery
    /// ([`attach_armed`], with the fragment's IO address).
    ///
    /// # Safety
    /// As [`attach_armed`]: `e` is a fresh header of the queue's pool, ours
    /// alone; `frag` was armed by this source on a descriptor now done, and
    /// its reference goes to the header (its slot is not released after).
    #[inline(always)]
    pub unsafe fn attach(&self, e: Elem, frag: &ArmedFrag) {
        // SAFETY: the caller's contract.
        unsafe { attach_armed(e, frag, self.iova(frag)) };
    }

    /// The IO address of an armed fragment.
    #[inline(always)]
    pub fn iova(&self, frag: &ArmedFrag) -> u64 {
        // A fragment of a page of the pool's provider.
        (frag.addr() as usize - self.iova_base) as u64
    }

    /// The DMA address of an armed fragment's buffer: its data start
    /// (headroom included).
    #[inline(always)]
    pub fn dma_addr(&self, frag: &ArmedFrag) -> u64 {
        frag.addr() as u64 + self.layout.headroom as u64
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mbuf::{Mbuf, MbufHeader, MbufPool, MbufPoolConfig, ol};
    use crate::mempool::{Elem, HugepagePolicy};
    use crate::pagepool::{PageMeta, ProviderConfig, attach_armed, attach_frag};
    use std::sync::atomic::Ordering;

    fn provider(name: &str, size: usize) -> BlockProvider {
        BlockProvider::new(ProviderConfig {
            name: name.into(),
            size,
            hugepages: HugepagePolicy::Never,
        })
        .unwrap()
    }

    fn header_pool(size: u32) -> MbufPool {
        MbufPool::new(MbufPoolConfig {
            size,
            cache_size: 0,
            data_room: 64,
            ..Default::default()
        })
        .unwrap()
    }

    /// `n` descriptors as the device leaves them: written back, DD set.
    fn stale_descs(n: usize) -> Vec<Desc> {
        (0..n)
            .map(|_| {
                let d = Desc::default();
                d.q0.store(0xdead_beef, Ordering::Relaxed);
                d.q1.store(u64::MAX, Ordering::Relaxed);
                d
            })
            .collect()
    }

    /// Delivers the armed fragment `a` as the receive does: a header from
    /// `headers`, the fragment attached, the delivery's fields written.
    fn deliver(rf: &RxFrags, headers: &MbufPool, a: &ArmedFrag, len: u16) -> Mbuf {
        let mut e = [Elem::DANGLING];
        headers.mempool().get_bulk(&mut e).unwrap();
        // SAFETY: a fresh header of ours, given the fragment's reference
        // once; the delivery's fields are written right after.
        unsafe { attach_armed(e[0], a, rf.iova(a)) };
        let mut rearm = headers.rearm_data(0);
        rearm.data_off = rf.layout().headroom;
        // SAFETY: as above: the header is ours alone.
        let h = unsafe { &mut *e[0].as_ptr().cast::<MbufHeader>() };
        h.rearm_word(rearm.word());
        h.set_rx_attached(0, 0, len, 0, 0);
        // SAFETY: the header, now an mbuf, rebuilt once.
        unsafe { Mbuf::from_raw(e[0].as_non_null().cast()) }
    }

    #[test]
    fn an_armed_batch_carries_fragments_and_gives_them_back() {
        let provider = provider("rxf", 1 << 20);
        let headers = header_pool(63);
        let layout = FragLayout::for_mtu(1500);
        let mut rf = RxFrags::new(&provider, "soft:test", 0, layout).unwrap();
        let pool = rf.alloc.pool().clone();
        let mut slots = [ArmedFrag::EMPTY; 32];
        let descs = stale_descs(40);
        assert!(rf.arm(&mut slots, &descs[..32]));
        for (a, d) in slots.iter().zip(&descs) {
            assert!(provider.contains(a.addr()));
            assert_eq!(rf.dma_addr(a), a.addr() as u64 + 256);
            assert_eq!(rf.iova(a), provider.inner().iova(a.addr() as usize));
            assert_eq!(d.q0.load(Ordering::Relaxed), rf.dma_addr(a));
            assert_eq!(d.q1.load(Ordering::Relaxed), 0, "DD cleared");
        }
        // 32 fragments of 1792 bytes: one 64 KiB page (36 fit).
        assert_eq!(pool.stats().alloc_slow, 1);
        // Half delivered as mbufs over their fragments, half released.
        let mut delivered = Vec::new();
        for a in &slots[..16] {
            let m = deliver(&rf, &headers, a, 60);
            assert_eq!(m.data_len(), 60);
            assert_eq!(m.headroom(), 256);
            assert_eq!(m.data().as_ptr(), a.addr().wrapping_add(256).cast_const());
            assert_eq!(m.header().buf_iova, rf.iova(a));
            assert_eq!(m.header().buf_len as usize, 256 + 1518);
            assert_ne!(m.header().ol_flags & ol::EXTERNAL, 0);
            delivered.push(m);
        }
        for a in &slots[16..] {
            // SAFETY: each remaining armed fragment, once.
            unsafe { a.release() };
        }
        assert!(!pool.all_home(), "the delivered fragments are out");
        drop(delivered);
        assert!(headers.is_full());
        drop(rf); // the page being cut goes home too
        assert!(pool.all_home(), "{:?}", pool.stats());
        drop(pool);
        assert!(provider.is_full());
    }

    #[test]
    fn a_batch_cut_short_by_the_pages_gives_everything_back() {
        // One 64 KiB page: 36 fragments at MTU 1500 at most.
        let provider = provider("rxf-short", 64 << 10);
        let mut rf = RxFrags::new(&provider, "soft:short", 0, FragLayout::for_mtu(1500)).unwrap();
        let pool = rf.alloc.pool().clone();
        let descs = stale_descs(24);
        let mut first = [ArmedFrag::EMPTY; 16];
        assert!(rf.arm(&mut first, &descs[..16]));
        // The second batch runs out of the page within it, and there is no
        // second page: the batch arms nothing, its fragments go back.
        let mut second = [ArmedFrag::EMPTY; 24];
        assert!(!rf.arm(&mut second, &descs));
        for a in &first {
            // SAFETY: each armed fragment once.
            unsafe { a.release() };
        }
        // The page is free again: the batch fits now.
        assert!(rf.arm(&mut second, &descs));
        for a in &second {
            // SAFETY: each armed fragment once.
            unsafe { a.release() };
        }
        drop(rf);
        assert!(pool.all_home(), "{:?}", pool.stats());
        drop(pool);
        assert!(provider.is_full());
    }

    /// One step of a random sequence: arm a batch, or give some of the
    /// armed fragments up (delivered as mbufs and freed, or released),
    /// oldest first or newest first.
    #[derive(Debug, Clone)]
    enum Step {
        Arm(usize),
        FreeOldest(usize, bool),
        FreeNewest(usize, bool),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1usize..=48).prop_map(Step::Arm),
            (1usize..=64, any::<bool>()).prop_map(|(n, d)| Step::FreeOldest(n, d)),
            (1usize..=64, any::<bool>()).prop_map(|(n, d)| Step::FreeNewest(n, d)),
        ]
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// The batched arming (`arm`: fragments cut a page's run at a
        /// time, descriptors written as they are cut; a header attached at
        /// delivery) against the per-fragment path (`alloc_frag` and the
        /// checked `attach_frag`, one mbuf at a time) over identical
        /// providers: the same fragments (IO addresses) and header fields,
        /// the same page references out, and everything home at the end.
        #[test]
        fn arm_matches_the_per_fragment_path(
            steps in proptest::collection::vec(step(), 1..40),
            mtu in prop_oneof![Just(1500u16), Just(3000), Just(9000)],
        ) {
            let layout = FragLayout::for_mtu(mtu);
            // The pages run out before the headers (576 fragments at most):
            // a batch fails alike on both paths.
            let (pa, pb) = (provider("rxf-a", 1 << 20), provider("rxf-b", 1 << 20));
            let (ha, hb) = (header_pool(1023), header_pool(1023));
            let mut rf = RxFrags::new(&pa, "soft:prop", 0, layout).unwrap();
            let pool_a = rf.alloc.pool().clone();
            let pool_b = PagePool::new(
                &pb,
                PagePoolConfig { name: "rxf-b".into(), order: RX_PAGE_ORDER, ..Default::default() },
            )
            .unwrap();
            let mut fa = PageFragAlloc::new(pool_b.clone());
            let mut held_a: std::collections::VecDeque<ArmedFrag> = Default::default();
            let mut held_b: std::collections::VecDeque<Mbuf> = Default::default();
            let descs = stale_descs(48);
            for s in steps {
                match s {
                    Step::Arm(n) => {
                        let mut slots = vec![ArmedFrag::EMPTY; n];
                        let ok = rf.arm(&mut slots, &descs[..n]);
                        // The reference: all or nothing too.
                        let mut batch = Vec::new();
                        let mut ok_b = true;
                        for _ in 0..n {
                            let (Some(mut m), Ok(f)) = (hb.alloc(), fa.alloc_frag(layout.frag_size()))
                            else {
                                ok_b = false;
                                break;
                            };
                            attach_frag(&mut m, f, layout).unwrap();
                            batch.push(m);
                        }
                        prop_assert_eq!(ok, ok_b);
                        if !ok {
                            continue;
                        }
                        for ((a, m), d) in slots.iter().zip(&batch).zip(&descs) {
                            prop_assert_eq!(rf.iova(a), m.header().buf_iova);
                            prop_assert_eq!(d.q0.load(Ordering::Relaxed), rf.dma_addr(a));
                            prop_assert_eq!(d.q1.load(Ordering::Relaxed), 0);
                        }
                        held_a.extend(slots);
                        held_b.extend(batch);
                        for d in &descs {
                            d.q1.store(u64::MAX, Ordering::Relaxed);
                        }
                    }
                    Step::FreeOldest(n, deliver_them) | Step::FreeNewest(n, deliver_them) => {
                        let oldest = matches!(s, Step::FreeOldest(..));
                        for _ in 0..n.min(held_a.len()) {
                            let (a, m) = if oldest {
                                (held_a.pop_front().unwrap(), held_b.pop_front().unwrap())
                            } else {
                                (held_a.pop_back().unwrap(), held_b.pop_back().unwrap())
                            };
                            if deliver_them {
                                let x = deliver(&rf, &ha, &a, 64);
                                let (x, y) = (x.header(), m.header());
                                prop_assert_eq!(x.buf_iova, y.buf_iova);
                                prop_assert_eq!((x.buf_len, x.frag_target), (y.buf_len, y.frag_target));
                                prop_assert_eq!(x.data_off, y.data_off);
                                // The page reference: the tagged metadata
                                // of the fragment's page.
                                prop_assert_eq!(x.shinfo as usize & 1, 1);
                                // SAFETY: the tagged word of an attached
                                // header is its page's metadata, alive with
                                // the provider.
                                let meta = unsafe { &*((x.shinfo as usize & !1) as *const PageMeta) };
                                let addr = x.buf_addr as usize;
                                prop_assert!(meta.addr <= addr && addr < meta.addr + RX_PAGE_BYTES);
                            } else {
                                // SAFETY: an armed fragment, given back once.
                                unsafe { a.release() };
                            }
                            drop(m);
                        }
                    }
                }
                prop_assert_eq!(pool_a.stats().in_flight, pool_b.stats().in_flight);
            }
            for a in held_a {
                // SAFETY: each armed fragment once.
                unsafe { a.release() };
            }
            drop((held_b, rf, fa));
            prop_assert!(ha.is_full() && hb.is_full());
            prop_assert!(pool_a.all_home() && pool_b.all_home());
            drop((pool_a, pool_b));
            prop_assert!(pa.is_full() && pb.is_full());
        }
    }

    #[test]
    fn a_fragment_larger_than_the_page_is_refused() {
        let provider = provider("rxf", 1 << 20);
        // The largest MTU's fragment fits a 64 KiB page; a tailroom can
        // take one past it.
        let layout = FragLayout {
            headroom: 256,
            data_room: 65000,
            tailroom: 1000,
        };
        let Err(e) = RxFrags::new(&provider, "soft:x", 0, layout) else {
            panic!("accepted");
        };
        assert_eq!(
            e.to_string(),
            "port 'soft:x': an Rx fragment of 66256 bytes exceeds the 65536-byte page"
        );
        assert!(provider.is_full());
    }
}
