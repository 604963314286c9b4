//! Mbufs over fragments: an mbuf header whose data is a page-pool (or
//! page_frag_cache) fragment, attached as an external buffer.
//!
//! A fragment laid out for Rx is `headroom | data room | tailroom`; the
//! external buffer's [`ExtSharedInfo`] sits at the start of the tailroom (as
//! Linux keeps `skb_shared_info` at the end of the buffer), so the fragment
//! needs no memory beside it. When the last mbuf attached lets go, the
//! info's free callback gives the fragment's reference back — the page goes
//! home if it was the page's last — and the header returns to its mempool
//! with its own buffer, as any mbuf does.

use std::ptr::NonNull;

use super::FRAG_ALIGN;
use super::bulk::FragRun;
use super::frag::{Frag, RawFrag, put_frag_ref};
use super::meta::PageMeta;
use crate::mbuf::{ExtFree, ExtFreeCallback, ExtSharedInfo, Mbuf, MbufError, MbufHeader};
use crate::mempool::Elem;

/// How an Rx fragment is cut: headroom, then the data room (the largest
/// frame), then the tailroom, whose start holds the external buffer's shared
/// info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragLayout {
    /// Bytes before the frame.
    pub headroom: u16,
    /// Bytes for the frame.
    pub data_room: u16,
    /// Bytes after it (at least enough for the shared info).
    pub tailroom: u16,
}

impl FragLayout {
    /// Headroom of an Rx fragment (Linux's `XDP_PACKET_HEADROOM`).
    pub const HEADROOM: u16 = 256;
    /// Tailroom of an Rx fragment (room for Linux's `skb_shared_info`; ours
    /// uses 40 bytes of the first cache line after the data room: the shared
    /// info and the fragment's page).
    pub const TAILROOM: u16 = 320;

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

    /// Offset of the shared info in the fragment: the first cache line after
    /// the data room, so the info and the tail share one line that no frame
    /// byte is in.
    fn shinfo_offset(&self) -> usize {
        (self.headroom as usize + self.data_room as usize).next_multiple_of(FRAG_ALIGN)
    }

    /// Asks for the cache line that [`attach_frag`] writes (the shared
    /// info) `ahead` fragments after `frag` in its page, so a refill's misses
    /// on those lines (last touched when the fragments were last in use)
    /// overlap. Past the page's end it asks for a line of another page,
    /// harmlessly.
    #[inline(always)]
    pub fn prefetch_shinfo(&self, frag: &Frag, ahead: usize) {
        prefetch(
            frag.as_ptr()
                .wrapping_add(ahead * self.stride() + self.shinfo_offset()),
        );
    }

    /// Checks that the layout can hold the shared info and fits an mbuf's
    /// 16-bit buffer length.
    pub fn check(&self) -> Result<(), MbufError> {
        let need = self.shinfo_offset()
            + std::mem::size_of::<ExtSharedInfo>()
            + std::mem::size_of::<FragTail>();
        if need > self.frag_size() {
            return Err(MbufError::BadConfig(format!(
                "fragment layout {self:?}: the tailroom cannot hold the {}-byte shared info",
                std::mem::size_of::<ExtSharedInfo>() + std::mem::size_of::<FragTail>()
            )));
        }
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

/// What the external buffer's free callback needs, kept in the fragment's
/// tailroom right after the shared info.
#[derive(Debug)]
#[repr(C)]
struct FragTail {
    meta: NonNull<PageMeta>,
    target: u32,
}

/// The external buffer's free callback: `opaque` is the fragment's
/// [`FragTail`].
fn frag_ext_free(_buf: NonNull<u8>, opaque: *mut ()) {
    // SAFETY: `attach_frag` wrote the tail at `opaque`, inside the fragment,
    // which stays ours until the reference is given back below.
    let FragTail { meta, target } = unsafe { opaque.cast::<FragTail>().read() };
    // SAFETY: the fragment's reference was given to the shared info, whose
    // last attachment is letting go now: we give it back, once.
    unsafe { put_frag_ref(meta, target) };
}

/// Does what the last detachment from an external buffer (`buf`) has to do
/// (`free`), for a burst: an Rx fragment's reference joins `run` if it is of
/// its page (given back a run per page), anything else's free callback is
/// called now.
///
/// # Safety
/// `free` is what [`ExtSharedInfo::release`] returned for `buf`'s info, and
/// this does it once.
#[inline(always)]
pub(crate) unsafe fn free_ext_bulk(run: &mut FragRun, free: ExtFree, buf: NonNull<u8>) {
    // The same function at another address (a copy in another codegen unit)
    // only takes the callback's way: the same result, one atomic more.
    if std::ptr::fn_addr_eq(free.cb, frag_ext_free as ExtFreeCallback) {
        // SAFETY: the fragments' callback: `opaque` is the fragment's tail,
        // written at attach, in bytes that stay ours until the reference is
        // given back.
        let FragTail { meta, target } = unsafe { free.opaque.cast::<FragTail>().read() };
        // SAFETY: the fragment's reference, which the info held, given up
        // once; its bytes are no longer used.
        unsafe { run.add(meta, target) };
    } else {
        free.call(buf);
    }
}

/// Makes `frag`, cut for `layout`, the data of `m`: empty, at the layout's
/// headroom; its shared info written into the tailroom. The fragment then
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
    let raw = frag.into_raw();
    // SAFETY: the shared info and the tail fit in the fragment (checked
    // above); it is attached below to this one mbuf.
    let shinfo = unsafe { write_shinfo(&raw, layout) };
    let buf_len = layout.headroom + layout.data_room;
    // SAFETY: the fragment (`buf_len` bytes before its info) stays valid until
    // the info's callback gives it back; the info lives inside it, at a fixed
    // address, until then; only the attached mbufs use the fragment.
    match unsafe { m.attach_extbuf_fresh(raw.ptr, iova, buf_len, layout.headroom, shinfo) } {
        Ok(()) => Ok(()),
        // SAFETY: not attached: the reference is still ours, rebuilt into
        // its handle once.
        Err(e) => Err((e, unsafe { Frag::from_raw(raw) })),
    }
}

/// Writes a fragment's tail (its page and the count it gives back) and its
/// shared info, attached once, at the end of the fragment's `layout`; the
/// info's address.
///
/// # Safety
/// `raw` is a fragment reference we own, of at least `layout.frag_size()`
/// bytes, `layout` passed [`FragLayout::check`]; the info is attached to
/// one mbuf before anything else sees it.
#[inline(always)]
unsafe fn write_shinfo(raw: &RawFrag, layout: FragLayout) -> NonNull<ExtSharedInfo> {
    // SAFETY: the shared info and the tail fit in the fragment (the
    // caller's contract), 8-byte aligned (the fragment is 64-byte aligned),
    // in bytes we own.
    let (shinfo, tail) = unsafe {
        let s = raw.ptr.add(layout.shinfo_offset()).cast::<ExtSharedInfo>();
        (s, s.add(1).cast::<FragTail>())
    };
    // SAFETY: as above, the tail's place is ours to write.
    unsafe {
        tail.write(FragTail {
            meta: raw.meta,
            target: (raw.len_target >> 32) as u32,
        })
    };
    // SAFETY: `frag_ext_free` with the tail gives the fragment's reference
    // back, callable once from any thread; the caller attaches the info to
    // one mbuf before anything else sees it.
    let info = unsafe { ExtSharedInfo::new_attached(frag_ext_free, tail.as_ptr().cast()) };
    // SAFETY: as above, the info's place is ours to write.
    unsafe { shinfo.write(info) };
    shinfo
}

/// [`attach_frag`] for an Rx refill: the same result without its checks,
/// inlined, so the fragment goes from the carver to the header in registers
/// (a handle stored and reloaded whole costs a failed store forward).
///
/// # Safety
/// `e` is a header fresh from its pool, ours alone (the free-buffer
/// invariants: one reference, one segment, its own buffer); `layout` passed
/// [`FragLayout::check`]; `frag` is at least `layout.frag_size()` bytes.
#[inline(always)]
pub(crate) unsafe fn attach_frag_fresh(e: Elem, frag: Frag, layout: FragLayout) {
    debug_assert!(layout.check().is_ok() && frag.len() >= layout.frag_size());
    let iova = frag.iova();
    let raw = frag.into_raw();
    // SAFETY: the layout was checked and the fragment is big enough (the
    // caller's contract); it is attached just below to this one header.
    let shinfo = unsafe { write_shinfo(&raw, layout) };
    // SAFETY: a fresh header, ours alone (the caller's contract).
    let h = unsafe { &mut *e.as_ptr().cast::<MbufHeader>() };
    // As `Mbuf::attach_extbuf_fresh`, whose checks the free-buffer
    // invariants and the checked layout make true.
    h.buf_addr = raw.ptr.as_ptr();
    h.buf_iova = iova;
    h.buf_len = layout.headroom + layout.data_room;
    h.data_off = layout.headroom;
    h.data_len = 0;
    h.pkt_len = 0;
    h.shinfo = shinfo.as_ptr();
    // Attached (a free buffer carries no other flag worth keeping: the Rx
    // write-back sets the rest).
    h.ol_flags = crate::mbuf::layout::ol::EXTERNAL;
}
