//! Mbufs over fragments: an mbuf header whose data is a page-pool (or
//! page_frag_cache) fragment, attached as an external buffer.
//!
//! A fragment laid out for Rx is `headroom | data room | tailroom` (the
//! tailroom, Linux's room for `skb_shared_info`, is none by default: what
//! the attachment needs lives in the header). The
//! header itself holds the fragment's page reference: its external-buffer
//! word is the page's metadata, tagged as a page fragment, and beside it the
//! page's target. Clones share the header, so the header's last reference
//! is the fragment's: freeing it gives the reference back (the page goes
//! home if it was the page's last) and returns the header to its mempool
//! with its own buffer, as any mbuf does. Neither the attach nor the free
//! touches the fragment's memory: the lines an Rx delivery and a Tx free
//! write and read are the header's. An Rx queue arms its descriptors with
//! fragments alone ([`ArmedFrag`]) and attaches each to a header when its
//! packet is delivered ([`attach_armed`]).

use std::ptr::NonNull;

use super::FRAG_ALIGN;
use super::frag::Frag;
use super::meta::PageMeta;
use crate::mbuf::layout::{BufTail, EXT_PAGE_FRAG};
use crate::mbuf::{ExtSharedInfo, HEADER_SIZE, Mbuf, MbufError, MbufHeader};
use crate::mempool::Elem;

/// How an Rx fragment is cut: headroom, then the data room (the largest
/// frame), then the tailroom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragLayout {
    /// Bytes before the frame.
    pub headroom: u16,
    /// Bytes for the frame.
    pub data_room: u16,
    /// Bytes after it.
    pub tailroom: u16,
}

impl FragLayout {
    /// Headroom of an Rx fragment (Linux's `XDP_PACKET_HEADROOM`).
    pub const HEADROOM: u16 = 256;
    /// Tailroom of an Rx fragment: none. Linux keeps 320 bytes there for
    /// its `skb_shared_info`; the attached mbuf keeps what it needs in its
    /// header, so a fragment is only headroom and frame, and a page holds
    /// more of them (18 at MTU 1500 in 32 KiB, against 15 with that room):
    /// fewer pages turn over per packet and fewer lines are in flight.
    pub const TAILROOM: u16 = 0;

    /// The layout for frames of up to `mtu` + 18 bytes (Ethernet header and
    /// one VLAN tag, the largest frame a port with that MTU accepts).
    pub fn for_mtu(mtu: u16) -> FragLayout {
        FragLayout {
            headroom: Self::HEADROOM,
            data_room: mtu.saturating_add(18),
            tailroom: Self::TAILROOM,
        }
    }

    /// Bytes of one fragment: headroom + data room + tailroom.
    pub fn frag_size(&self) -> usize {
        self.headroom as usize + self.data_room as usize + self.tailroom as usize
    }

    /// Bytes a fragment takes in its page (aligned to 64).
    pub fn stride(&self) -> usize {
        self.frag_size().next_multiple_of(FRAG_ALIGN)
    }

    /// Checks that the layout fits an mbuf's 16-bit buffer length.
    pub fn check(&self) -> Result<(), MbufError> {
        if self.headroom as usize + self.data_room as usize > u16::MAX as usize {
            return Err(MbufError::BadConfig(format!(
                "fragment layout {self:?}: headroom + data room exceeds {}",
                u16::MAX
            )));
        }
        Ok(())
    }
}

/// Asks for the cache line at `p` (a hint: no memory effect, any address).
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults;
    // SSE, which it needs, is part of every x86-64 target.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Makes `frag`, cut for `layout`, the data of `m`: empty, at the layout's
/// headroom; its page reference kept in the header. The fragment then
/// belongs to the mbuf (and its clones), and is given back when the last of
/// them is freed. On error nothing changed, and the fragment comes back
/// with the error.
pub fn attach_frag(m: &mut Mbuf, frag: Frag, layout: FragLayout) -> Result<(), (MbufError, Frag)> {
    if let Err(e) = layout.check() {
        return Err((e, frag));
    }
    if frag.len() < layout.frag_size() {
        return Err((
            MbufError::BadConfig(format!(
                "fragment of {} bytes is shorter than its layout's {}",
                frag.len(),
                layout.frag_size()
            )),
            frag,
        ));
    }
    let iova = frag.iova();
    let target = frag.page_target();
    let raw = frag.into_raw();
    let buf_len = layout.headroom + layout.data_room;
    // SAFETY: the fragment (at least `buf_len` bytes) and its page reference
    // are ours, handed to the mbuf here; only the mbuf (and its clones) use
    // the fragment's bytes until the reference is given back.
    match unsafe { m.attach_page_frag(raw.ptr, iova, buf_len, layout.headroom, raw.meta, target) } {
        Ok(()) => Ok(()),
        // SAFETY: not attached: the reference is still ours, rebuilt into
        // its handle once.
        Err(e) => Err((e, unsafe { Frag::from_raw(raw) })),
    }
}

/// A fragment armed on an Rx descriptor, before any header holds it: its
/// address and the header tail that names its page reference (the tagged
/// metadata word, the page's target, the buffer length). It stands for
/// one reference on its page, which [`attach_armed`] hands to a header
/// and [`ArmedFrag::release`] gives back; a plain copy of it is not a
/// second reference.
///
/// An Rx queue keeps these beside its descriptors instead of headers, and
/// takes a header only when a packet is delivered: the header then comes
/// from the top of its mempool's cache (freed a moment before by a Tx
/// queue, its line still in the cache), and its first line is written
/// whole at once, never read.
#[derive(Clone, Copy)]
pub(crate) struct ArmedFrag {
    addr: NonNull<u8>,
    tail: BufTail,
}

impl ArmedFrag {
    /// An unarmed slot (no reference): never released, never attached.
    pub(crate) const EMPTY: ArmedFrag = ArmedFrag {
        addr: NonNull::dangling(),
        tail: BufTail::ZERO,
    };

    /// Takes `frag`, cut for `layout` (checked: [`FragLayout::check`], and
    /// `frag` at least `layout.frag_size()` bytes), apart into its address
    /// and header tail.
    #[inline(always)]
    pub(crate) fn new(frag: Frag, layout: FragLayout) -> ArmedFrag {
        debug_assert!(layout.check().is_ok() && frag.len() >= layout.frag_size());
        let target = frag.page_target();
        let raw = frag.into_raw();
        ArmedFrag {
            addr: raw.ptr,
            tail: BufTail::new(
                target,
                layout.headroom + layout.data_room,
                (raw.meta.as_ptr() as usize | EXT_PAGE_FRAG) as *const ExtSharedInfo,
            ),
        }
    }

    /// The fragment's address.
    #[inline(always)]
    pub(crate) fn addr(&self) -> *mut u8 {
        self.addr.as_ptr()
    }

    /// Gives the page reference back.
    ///
    /// # Safety
    /// `self` stands for a reference not given back or attached since
    /// [`new`](Self::new) made it, and the fragment's bytes are no longer
    /// used.
    pub(crate) unsafe fn release(self) {
        let (target, word) = self.tail.target_and_word();
        // SAFETY: the tagged word of a fragment made by `new`: its page's
        // metadata, not null; the reference is ours (the caller's contract).
        unsafe {
            super::frag::put_frag_ref(
                NonNull::new_unchecked((word & !EXT_PAGE_FRAG) as *mut PageMeta),
                target,
            )
        };
    }
}

/// Hands the armed fragment `frag` to the header `e` (fresh from its pool,
/// ours alone) as its data: the buffer's address, IO address `iova` and
/// length, and the page reference (the tagged `shinfo` word and
/// `frag_target`), with the outer VLAN tag cleared. The other fields of the
/// first line are the caller's to write (the Rx delivery writes them all:
/// the rearm word with the layout's headroom, the flags with
/// [`ol::EXTERNAL`], the lengths), so the line is written, never read.
///
/// # Safety
/// `e` is a header fresh from its pool, ours alone (the free-buffer
/// invariants: one reference, one segment, its own buffer); `frag` stands
/// for a page reference, now the header's (it is not released or attached
/// again); `iova` is the fragment's IO address. Before anyone but its free
/// reads the header, the caller writes the rearm word (data offset: the
/// layout's headroom), the flags with [`ol::EXTERNAL`] and the lengths.
///
/// [`ol::EXTERNAL`]: crate::mbuf::ol::EXTERNAL
#[inline(always)]
pub(crate) unsafe fn attach_armed(e: Elem, frag: &ArmedFrag, iova: u64) {
    // SAFETY: a fresh header, ours alone (the caller's contract).
    let h = unsafe { &mut *e.as_ptr().cast::<MbufHeader>() };
    h.buf_addr = frag.addr.as_ptr();
    h.buf_iova = iova;
    h.write_buf_tail(frag.tail);
}

/// The free of a single-segment mbuf over a page fragment, in the header's
/// first line alone: gives the header its own buffer back and returns the
/// fragment's page reference (the page's metadata and target), for the
/// caller to give back (one at a time, or a run per page).
///
/// As the mbuf free's detach, without reading the second line: the own
/// buffer's address is the one after the header, and its IO address
/// (`own_iova`) and length are what the header's pool gave every element,
/// passed by a caller who knows the pool; the external-buffer word and the
/// page target live in the first line (see `MbufHeader::shinfo`). The
/// offload flags are cleared (a free buffer's flags mean nothing: whoever
/// takes it writes them), the outer VLAN tag too.
///
/// # Safety
/// `h` is the header of a single-segment mbuf (one segment, `next` null)
/// with a page fragment attached (`shinfo` tagged [`EXT_PAGE_FRAG`]), whose
/// last reference the caller holds and gives up here; `own_iova` is its
/// `own_buf_iova` and `own_tail` is `BufTail::new(0, own_buf_len, null)`.
/// The caller gives the returned reference back once, and the fragment's
/// bytes are not used afterwards.
#[inline(always)]
pub(crate) unsafe fn detach_frag_own(
    h: &mut MbufHeader,
    own_iova: u64,
    own_tail: BufTail,
) -> (NonNull<PageMeta>, u32) {
    let word = h.shinfo as usize;
    let target = h.frag_target;
    debug_assert!(word & EXT_PAGE_FRAG != 0, "not a page fragment");
    debug_assert!(h.next.is_null());
    debug_assert_eq!(own_iova, h.own_buf_iova);
    let own_addr = (h as *mut MbufHeader)
        .cast::<u8>()
        .wrapping_add(HEADER_SIZE);
    debug_assert_eq!(own_addr, h.own_buf_addr);
    h.buf_addr = own_addr;
    h.buf_iova = own_iova;
    h.ol_flags = 0;
    h.write_buf_tail(own_tail);
    debug_assert!(h.buf_len == h.own_buf_len && h.shinfo.is_null());
    // SAFETY: the tagged word is the page's metadata, not null (the
    // caller's contract: a page fragment is attached).
    let meta = unsafe { NonNull::new_unchecked((word & !EXT_PAGE_FRAG) as *mut PageMeta) };
    (meta, target)
}
