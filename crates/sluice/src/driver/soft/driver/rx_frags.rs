//! Rx buffers from page-pool fragments (`rxbuf=frag`): each descriptor is
//! armed with an mbuf header from the queue's mempool whose data is a
//! fragment of a 32 KiB page-pool page, sized to the port's MTU (headroom +
//! largest frame + tailroom, see [`FragLayout`]), instead of the header's
//! own fixed-size data room.
//!
//! Per queue: one [`PagePool`] of 32 KiB pages over the port's
//! [`BlockProvider`] and one [`PageFragAlloc`]. The pool's owner is the
//! queue's polling thread: bound on the first refill inside `rx_burst` done
//! by an lcore (not at `start`, which may run on another thread), so pages
//! whose last fragment is freed there recycle through the direct cache and
//! the others through the pool's ring.
//!
//! Ownership: a header armed on the ring has its fragment attached (the
//! header holds the fragment's page reference); freeing the mbuf —
//! wherever that happens — detaches it, which gives the fragment back, and
//! returns the header to its mempool.

use crate::mbuf::{Mbuf, MbufHeader, MbufPool};
use crate::mempool::Elem;
use crate::pagepool::{
    BlockProvider, FragLayout, PageFragAlloc, PagePool, PagePoolConfig, attach_frag_fresh,
};
use crate::port::PortError;

/// Page order of Rx fragment pages (32 KiB).
pub const RX_PAGE_ORDER: u32 = 3;
/// Bytes of an Rx fragment page.
pub const RX_PAGE_BYTES: usize = 4096 << RX_PAGE_ORDER;

/// Buffer memory one posted descriptor takes with fragments of `layout`:
/// its share of a page (a page holds `page / stride` fragments) plus the
/// header's mempool element (`header_stride`).
pub fn frag_bytes_per_desc(layout: FragLayout, header_stride: usize) -> usize {
    RX_PAGE_BYTES.div_ceil(RX_PAGE_BYTES / layout.stride()) + header_stride
}

/// A queue's fragment source.
pub struct RxFrags {
    alloc: PageFragAlloc,
    layout: FragLayout,
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
        Ok(RxFrags {
            alloc: PageFragAlloc::new(pool),
            layout,
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

    /// Fills every slot with a header from `pool` carrying a fresh
    /// fragment, or takes nothing (false: no header or no page).
    ///
    /// Headers first (one bulk get), then the fragments, cut a page's run at
    /// a time ([`PageFragAlloc::alloc_frags`]), each attached to the next
    /// header as it is cut, its handle never leaving registers: only the
    /// headers' lines are written, none of the fragments'.
    pub fn fill(&mut self, pool: &MbufPool, slots: &mut [Elem]) -> bool {
        if pool.mempool().get_bulk(slots).is_err() {
            return false;
        }
        let layout = self.layout;
        let mut done = 0;
        let cut = self
            .alloc
            .alloc_frags(layout.frag_size(), slots.len(), |f| {
                // `alloc_frags` hands out `slots.len()` fragments at most,
                // each of the layout's size (checked in `new`).
                // SAFETY: a fresh header of ours, given exactly one fragment.
                unsafe { attach_frag_fresh(slots[done], f, layout) };
                done += 1;
            });
        if cut.is_err() {
            for &e in &slots[..done] {
                // SAFETY: headers of this batch, attached above, each rebuilt
                // once: dropping detaches their fragments.
                drop(unsafe { Mbuf::from_raw(e.as_non_null().cast()) });
            }
            // SAFETY: the rest of the batch: plain headers from `pool`, ours.
            unsafe { pool.mempool().put_bulk(&slots[done..]) };
            return false;
        }
        true
    }

    /// The DMA address of an armed header's buffer: its fragment's data
    /// start (headroom included).
    #[inline(always)]
    pub fn dma_addr(&self, e: Elem) -> u64 {
        // SAFETY: an armed header of this queue, which it owns; its first
        // line holds the attached fragment's address.
        let h = unsafe { &*e.as_ptr().cast::<MbufHeader>() };
        h.buf_addr as u64 + self.layout.headroom as u64
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mbuf::MbufPoolConfig;
    use crate::mempool::HugepagePolicy;
    use crate::pagepool::ProviderConfig;

    #[test]
    fn a_filled_batch_carries_fragments_and_gives_them_back() {
        let provider = BlockProvider::new(ProviderConfig {
            name: "rxf".into(),
            size: 1 << 20,
            hugepages: HugepagePolicy::Never,
        })
        .unwrap();
        let headers = MbufPool::new(MbufPoolConfig {
            size: 63,
            cache_size: 0,
            data_room: 64,
            ..Default::default()
        })
        .unwrap();
        let layout = FragLayout::for_mtu(1500);
        let mut rf = RxFrags::new(&provider, "soft:test", 0, layout).unwrap();
        let pool = rf.alloc.pool().clone();
        let mut slots = [Elem::DANGLING; 32];
        assert!(rf.fill(&headers, &mut slots));
        assert_eq!(headers.available(), 31);
        for &e in &slots {
            // SAFETY: an armed header, read only.
            let h = unsafe { &*e.as_ptr().cast::<MbufHeader>() };
            assert!(provider.contains(h.buf_addr));
            assert_eq!(rf.dma_addr(e), h.buf_addr as u64 + 256);
            assert_eq!(h.buf_len as usize, 256 + 1518);
            assert!(!h.shinfo.is_null());
        }
        // 32 fragments of 2112 bytes: three 32 KiB pages.
        assert_eq!(pool.stats().alloc_slow, 3);
        // More than the headers left: nothing taken, nothing lost.
        let mut many = [Elem::DANGLING; 40];
        assert!(!rf.fill(&headers, &mut many));
        assert_eq!(headers.available(), 31);
        for &e in &slots {
            // SAFETY: each header once, given up by `fill` with `into_raw`.
            drop(unsafe { Mbuf::from_raw(e.as_non_null().cast()) });
        }
        assert!(headers.is_full());
        drop(rf); // the page being cut goes home too
        assert!(pool.all_home(), "{:?}", pool.stats());
        drop(pool);
        assert!(provider.is_full());
    }

    #[test]
    fn a_fragment_larger_than_the_page_is_refused() {
        let provider = BlockProvider::new(ProviderConfig {
            name: "rxf".into(),
            size: 1 << 20,
            hugepages: HugepagePolicy::Never,
        })
        .unwrap();
        let Err(e) = RxFrags::new(&provider, "soft:x", 0, FragLayout::for_mtu(40000)) else {
            panic!("accepted");
        };
        assert_eq!(
            e.to_string(),
            "port 'soft:x': an Rx fragment of 40594 bytes exceeds the 32768-byte page"
        );
        assert!(provider.is_full());
    }
}
