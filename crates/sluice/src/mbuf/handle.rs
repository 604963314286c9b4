//! The owned mbuf handle.
//!
//! # Ownership and sharing
//!
//! An [`Mbuf`] owns one reference to a buffer: dropping it gives the
//! reference back, and the last reference returns every segment to its pool
//! (through the current lcore's cache). `clone` adds a reference to the same
//! header — cheap, and how a packet is sent to two places. While a buffer is
//! shared (reference count above 1, or an external buffer attached to more
//! than one mbuf) nothing may change it: every mutating accessor checks and
//! returns [`MbufError::Shared`]. With one reference, the handle is the only
//! way to reach the header, so `&mut Mbuf` is exclusive access.
//!
//! Segments after the first of a chain always have a reference count of 1 and
//! belong to the first segment: they are reached and freed through it.
//!
//! Free-buffer invariants (kept by the free path, relied on by raw allocation):
//! reference count 1, one segment, no next segment, the buffer's own memory
//! (no external buffer attached).

use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::MbufError;
use super::extbuf::ExtSharedInfo;
use super::layout::{EXT_PAGE_FRAG, MbufHeader, TxOffload, ol};
use crate::mempool::{Elem, PoolInner};
use crate::pagepool::{FragRun, PageMeta, put_frag_ref};

/// An owned reference to a packet buffer.
///
/// A transparent wrapper of the header pointer, so a [`Burst`](super::Burst)
/// can keep its slots as plain addresses.
///
/// A packet longer than one buffer is a chain of segments, reached through
/// its first; dropping the first frees them all.
///
/// ```
/// use sluice::mbuf::{MbufError, MbufPool, MbufPoolConfig};
///
/// let pool = MbufPool::new(MbufPoolConfig { size: 63, cache_size: 0, ..Default::default() }).unwrap();
/// let mut head = pool.alloc_from_slice(&[1; 1500]).unwrap();
/// let tail = pool.alloc_from_slice(&[2; 500]).unwrap();
/// head.chain(tail).map_err(|(e, _tail)| e).unwrap();
/// assert_eq!((head.pkt_len(), head.data_len(), head.nb_segs()), (2000, 1500, 2));
/// let lengths: Vec<usize> = head.segments().map(|s| s.len()).collect();
/// assert_eq!(lengths, [1500, 500]);
///
/// // A clone shares the buffer: reads are fine, writes are refused.
/// let clone = head.clone();
/// assert_eq!(clone.to_vec(), head.to_vec());
/// assert!(matches!(head.data_mut(), Err(MbufError::Shared)));
/// drop(clone);
/// head.data_mut().unwrap()[0] = 9;
///
/// assert_eq!(pool.available(), 61);
/// drop(head); // both segments go back
/// assert!(pool.is_full());
/// ```
#[repr(transparent)]
pub struct Mbuf {
    ptr: NonNull<MbufHeader>,
}

// SAFETY: a handle owns a reference; shared headers are only read (writes
// require the reference count to be 1), and the count is atomic.
unsafe impl Send for Mbuf {}
// SAFETY: `&Mbuf` only reads the header and the data.
unsafe impl Sync for Mbuf {}

impl Mbuf {
    /// Takes ownership of a pool element holding an initialised header.
    ///
    /// # Safety
    /// `e` is an element of an [`MbufPool`](super::MbufPool) just taken from
    /// its mempool (so it satisfies the free-buffer invariants) and now owned
    /// by the caller.
    #[inline(always)]
    pub(crate) unsafe fn from_elem(e: Elem) -> Mbuf {
        Mbuf {
            ptr: e.as_non_null().cast(),
        }
    }

    /// Gives up the handle without freeing, returning the header address
    /// (for a driver's software ring). Undo with [`from_raw`](Self::from_raw).
    #[inline(always)]
    pub fn into_raw(self) -> NonNull<MbufHeader> {
        let p = self.ptr;
        std::mem::forget(self);
        p
    }

    /// Rebuilds a handle from [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    /// `ptr` came from `into_raw` and has not been turned back into a handle
    /// since.
    #[inline(always)]
    pub unsafe fn from_raw(ptr: NonNull<MbufHeader>) -> Mbuf {
        Mbuf { ptr }
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn as_header_ptr(&self) -> *mut MbufHeader {
        self.ptr.as_ptr()
    }

    /// The header, read-only.
    #[inline(always)]
    pub fn header(&self) -> &MbufHeader {
        // SAFETY: the handle keeps the element alive; shared access is reads
        // only (see the module docs).
        unsafe { self.ptr.as_ref() }
    }

    /// The header, writable. Only while unshared (callers check, or hold a
    /// buffer fresh from the pool).
    #[inline(always)]
    pub(crate) fn header_mut(&mut self) -> &mut MbufHeader {
        debug_assert_eq!(self.refcnt(), 1, "writing a shared mbuf header");
        // SAFETY: reference count 1: this handle is the only way to the
        // header, and we hold it mutably.
        unsafe { self.ptr.as_mut() }
    }

    #[inline(always)]
    fn unshared_header(&mut self) -> Result<&mut MbufHeader, MbufError> {
        if self.refcnt() != 1 {
            return Err(MbufError::Shared);
        }
        Ok(self.header_mut())
    }

    // ---- reference count -------------------------------------------------

    /// References to this buffer.
    #[inline]
    pub fn refcnt(&self) -> u16 {
        // Acquire pairs with the Release decrement of a clone being dropped,
        // so once we see 1 its accesses are over.
        self.header().refcnt.load(Ordering::Acquire)
    }

    /// True when the header or the data is shared with another mbuf.
    #[inline]
    pub fn is_shared(&self) -> bool {
        self.refcnt() != 1
            // Only an attached mbuf reads `shinfo` (and an external buffer's
            // shared info behind it).
            || (self.has_extbuf() && self.shinfo().is_some_and(ExtSharedInfo::is_shared))
    }

    /// Another reference to the same buffer, or an error at 65 535 references.
    pub fn try_clone(&self) -> Result<Mbuf, MbufError> {
        let r = &self.header().refcnt;
        // Relaxed: a new reference made from one we hold (as `Arc::clone`).
        let mut cur = r.load(Ordering::Relaxed);
        loop {
            if cur == u16::MAX {
                return Err(MbufError::TooManyRefs);
            }
            match r.compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(Mbuf { ptr: self.ptr }),
                Err(now) => cur = now,
            }
        }
    }

    // ---- reading ---------------------------------------------------------

    /// This segment's data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        let h = self.header();
        // SAFETY: `data_off + data_len <= buf_len` is kept by every mutator,
        // and the buffer lives while the handle does; writers need exclusive
        // access, which excludes this shared borrow.
        unsafe {
            std::slice::from_raw_parts(h.buf_addr.add(h.data_off as usize), h.data_len as usize)
        }
    }

    /// Starts loading the first cache line of the data into the cache (a
    /// hint: no effect on what the program computes). Forwarding loops call
    /// it a few packets ahead of the one whose headers they read, so the
    /// load overlaps the work on the packets between.
    #[inline(always)]
    pub fn prefetch_data(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            let h = self.header();
            // `wrapping_add`: only an address is computed, nothing is read
            // through it here.
            let p = h.buf_addr.wrapping_add(h.data_off as usize);
            // SAFETY: a prefetch is a hint that never faults, whatever the
            // address; SSE is part of the x86-64 baseline.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    p as *const i8,
                )
            };
        }
    }

    /// This segment's data, writable, unless the buffer is shared.
    #[inline]
    pub fn data_mut(&mut self) -> Result<&mut [u8], MbufError> {
        if self.is_shared() {
            return Err(MbufError::Shared);
        }
        let h = self.header();
        // SAFETY: bounds as in `data`; unshared, and `&mut self` excludes
        // every other access through this handle.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(h.buf_addr.add(h.data_off as usize), h.data_len as usize)
        })
    }

    /// This segment's data, writable, if the mbuf holds its own buffer (no
    /// external buffer attached) and is unshared; `None` otherwise, when
    /// [`data_mut`](Self::data_mut) may still give it (an unshared external
    /// buffer).
    ///
    /// The check a per-packet fast path wants: the flags word is read
    /// before the reference count, so a caller that has just read
    /// [`ol_flags`](Self::ol_flags) and tested [`ol::EXTERNAL`] with its
    /// other flags lets the compiler drop both the second load and the
    /// test, leaving one load and compare of the count.
    #[inline(always)]
    pub fn direct_data_mut(&mut self) -> Option<&mut [u8]> {
        if self.header().ol_flags & ol::EXTERNAL != 0 || self.refcnt() != 1 {
            return None;
        }
        let h = self.header();
        // SAFETY: the mbuf's own buffer is a pool element's data room, never
        // at address 0 (told to the compiler so that a caller's `?` on the
        // result is no test of the pointer).
        unsafe { std::hint::assert_unchecked(!h.buf_addr.is_null()) };
        // SAFETY: bounds as in `data`; the buffer is the mbuf's own and its
        // one reference is this handle, and `&mut self` excludes every other
        // access through it.
        Some(unsafe {
            std::slice::from_raw_parts_mut(h.buf_addr.add(h.data_off as usize), h.data_len as usize)
        })
    }

    /// The data of each segment, in order.
    pub fn segments(&self) -> Segments<'_> {
        Segments {
            next: self.ptr.as_ptr(),
            _m: std::marker::PhantomData,
        }
    }

    /// The whole packet, all segments, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.pkt_len() as usize);
        for s in self.segments() {
            v.extend_from_slice(s);
        }
        v
    }

    /// Length of the whole packet (all segments).
    #[inline]
    pub fn pkt_len(&self) -> u32 {
        self.header().pkt_len
    }

    /// Length of this segment's data.
    #[inline]
    pub fn data_len(&self) -> u16 {
        self.header().data_len
    }

    /// Segments in the chain.
    #[inline]
    pub fn nb_segs(&self) -> u16 {
        self.header().nb_segs
    }

    /// Bytes free before the data (first segment).
    #[inline]
    pub fn headroom(&self) -> u16 {
        self.header().data_off
    }

    /// Bytes free after the data of the last segment.
    pub fn tailroom(&self) -> u16 {
        // SAFETY: the last segment lives while the chain does.
        let last = unsafe { &*self.last_segment() };
        last.buf_len - last.data_off - last.data_len
    }

    /// Length of the buffer (headroom + data room).
    #[inline]
    pub fn buf_len(&self) -> u16 {
        self.header().buf_len
    }

    /// IO address of the data (buffer IOVA + data offset).
    #[inline]
    pub fn data_iova(&self) -> u64 {
        let h = self.header();
        h.buf_iova + h.data_off as u64
    }

    /// Input port.
    #[inline]
    pub fn port(&self) -> u16 {
        self.header().port
    }

    /// Offload flags (see [`ol`](super::ol)).
    #[inline]
    pub fn ol_flags(&self) -> u64 {
        self.header().ol_flags
    }

    /// Packet type.
    #[inline]
    pub fn packet_type(&self) -> u32 {
        self.header().packet_type
    }

    /// RSS hash.
    #[inline]
    pub fn rss_hash(&self) -> u32 {
        self.header().rss_hash
    }

    /// VLAN TCI.
    #[inline]
    pub fn vlan_tci(&self) -> u16 {
        self.header().vlan_tci
    }

    /// Tx offload lengths.
    #[inline]
    pub fn tx_offload(&self) -> TxOffload {
        TxOffload::unpack(self.header().tx_offload)
    }

    /// The application's 64-bit field.
    #[inline]
    pub fn udata64(&self) -> u64 {
        self.header().udata64
    }

    /// True when this mbuf's data is an attached external buffer.
    #[inline]
    pub fn has_extbuf(&self) -> bool {
        debug_assert_eq!(
            self.ol_flags() & ol::EXTERNAL != 0,
            !self.header().shinfo.is_null()
        );
        self.ol_flags() & ol::EXTERNAL != 0
    }

    /// The attached external buffer's shared info: `None` with the own
    /// buffer, and with a page fragment (attached to this header alone, so
    /// shared only through the header's count).
    fn shinfo(&self) -> Option<&ExtSharedInfo> {
        let word = self.header().shinfo;
        if word as usize & EXT_PAGE_FRAG != 0 {
            return None;
        }
        // SAFETY: an untagged non-null shinfo lives while an mbuf is attached
        // to it (`attach_extbuf`'s contract).
        unsafe { word.as_ref() }
    }

    // ---- writing ---------------------------------------------------------

    /// Sets the input port.
    pub fn set_port(&mut self, port: u16) -> Result<(), MbufError> {
        self.unshared_header()?.port = port;
        Ok(())
    }

    /// Sets the offload flags ([`ol::EXTERNAL`] excepted: the library keeps
    /// that one as it is).
    pub fn set_ol_flags(&mut self, flags: u64) -> Result<(), MbufError> {
        let h = self.unshared_header()?;
        h.ol_flags = (flags & !ol::EXTERNAL) | (h.ol_flags & ol::EXTERNAL);
        Ok(())
    }

    /// Sets the packet type.
    pub fn set_packet_type(&mut self, ptype: u32) -> Result<(), MbufError> {
        self.unshared_header()?.packet_type = ptype;
        Ok(())
    }

    /// Sets the RSS hash.
    pub fn set_rss_hash(&mut self, hash: u32) -> Result<(), MbufError> {
        self.unshared_header()?.rss_hash = hash;
        Ok(())
    }

    /// Sets the VLAN TCI.
    pub fn set_vlan_tci(&mut self, tci: u16) -> Result<(), MbufError> {
        self.unshared_header()?.vlan_tci = tci;
        Ok(())
    }

    /// Sets the Tx offload lengths.
    pub fn set_tx_offload(&mut self, tx: TxOffload) -> Result<(), MbufError> {
        self.unshared_header()?.tx_offload = tx.pack();
        Ok(())
    }

    /// Sets the application's 64-bit field.
    pub fn set_udata64(&mut self, v: u64) -> Result<(), MbufError> {
        self.unshared_header()?.udata64 = v;
        Ok(())
    }

    /// Grows the data at the front by `len` bytes (from the headroom) and
    /// returns them.
    pub fn prepend(&mut self, len: usize) -> Result<&mut [u8], MbufError> {
        if self.is_shared() {
            return Err(MbufError::Shared);
        }
        let h = self.header_mut();
        if len > h.data_off as usize {
            return Err(MbufError::NoHeadroom {
                need: len,
                have: h.data_off as usize,
            });
        }
        let len16 = len as u16;
        h.data_off -= len16;
        h.data_len += len16;
        h.pkt_len += len as u32;
        // SAFETY: `[data_off, data_off + len)` is inside the buffer (it was
        // headroom) and exclusively ours.
        Ok(unsafe { std::slice::from_raw_parts_mut(h.buf_addr.add(h.data_off as usize), len) })
    }

    /// Grows the data at the end of the last segment by `len` bytes (from its
    /// tailroom) and returns them.
    pub fn append(&mut self, len: usize) -> Result<&mut [u8], MbufError> {
        if self.is_shared() {
            return Err(MbufError::Shared);
        }
        let last = self.last_segment();
        // SAFETY: the last segment belongs to this unshared chain (refcnt 1
        // on every non-head segment), and `&mut self` makes access exclusive;
        // it may be the head itself, which is not otherwise borrowed here.
        let l = unsafe { &mut *last };
        let tail = (l.buf_len - l.data_off - l.data_len) as usize;
        if len > tail {
            return Err(MbufError::NoTailroom {
                need: len,
                have: tail,
            });
        }
        let at = (l.data_off + l.data_len) as usize;
        l.data_len += len as u16;
        let buf = l.buf_addr;
        self.header_mut().pkt_len += len as u32;
        // SAFETY: `[at, at + len)` was tailroom inside the buffer, exclusively ours.
        Ok(unsafe { std::slice::from_raw_parts_mut(buf.add(at), len) })
    }

    /// Removes `len` bytes from the front of the first segment.
    pub fn adj(&mut self, len: usize) -> Result<(), MbufError> {
        if self.refcnt() != 1 {
            return Err(MbufError::Shared);
        }
        let h = self.header_mut();
        if len > h.data_len as usize {
            return Err(MbufError::TooShort {
                need: len,
                have: h.data_len as usize,
            });
        }
        h.data_off += len as u16;
        h.data_len -= len as u16;
        h.pkt_len -= len as u32;
        Ok(())
    }

    /// Removes `len` bytes from the end of the last segment.
    pub fn trim(&mut self, len: usize) -> Result<(), MbufError> {
        if self.refcnt() != 1 {
            return Err(MbufError::Shared);
        }
        let last = self.last_segment();
        // SAFETY: as in `append`.
        let l = unsafe { &mut *last };
        if len > l.data_len as usize {
            return Err(MbufError::TooShort {
                need: len,
                have: l.data_len as usize,
            });
        }
        l.data_len -= len as u16;
        self.header_mut().pkt_len -= len as u32;
        Ok(())
    }

    /// Appends the segments of `tail` to this chain. On error `tail` is given
    /// back untouched.
    pub fn chain(&mut self, tail: Mbuf) -> Result<(), (MbufError, Mbuf)> {
        if self.refcnt() != 1 || tail.refcnt() != 1 {
            return Err((MbufError::Shared, tail));
        }
        let segs = self.nb_segs() as u32 + tail.nb_segs() as u32;
        if segs > u16::MAX as u32 {
            return Err((MbufError::TooManySegments(segs), tail));
        }
        let tail_len = tail.pkt_len();
        let tail_ptr = tail.into_raw().as_ptr();
        let last = self.last_segment();
        // SAFETY: the last segment belongs to this unshared chain; the tail's
        // head now has refcnt 1 and belongs to the chain (we took its handle).
        unsafe { (*last).next = tail_ptr };
        let h = self.header_mut();
        h.nb_segs = segs as u16;
        h.pkt_len += tail_len;
        Ok(())
    }

    fn last_segment(&self) -> *mut MbufHeader {
        let mut p = self.ptr.as_ptr();
        // SAFETY: each `next` is null or a live segment of this chain.
        while let Some(n) = NonNull::new(unsafe { (*p).next }) {
            p = n.as_ptr();
        }
        p
    }

    /// Attaches an external buffer as this mbuf's data (empty, at offset
    /// `headroom` in it); the mbuf's own buffer is restored when it is freed.
    ///
    /// # Safety
    /// `buf` is valid for reads and writes of `len` bytes at IO address `iova`
    /// until `shinfo`'s free callback is called; `shinfo` stays valid at its
    /// address until then; nothing else writes the buffer while an mbuf is
    /// attached.
    pub unsafe fn attach_extbuf(
        &mut self,
        buf: NonNull<u8>,
        iova: u64,
        len: u16,
        headroom: u16,
        shinfo: NonNull<ExtSharedInfo>,
    ) -> Result<(), MbufError> {
        self.check_attach(len, headroom)?;
        // SAFETY: valid per the caller's contract.
        unsafe { shinfo.as_ref() }.get();
        self.set_extbuf(buf, iova, len, headroom, shinfo.as_ptr());
        Ok(())
    }

    /// Attaches a page-pool fragment as this mbuf's data (empty, at offset
    /// `headroom` in it): the header takes over the fragment's page
    /// reference, recorded as its page's metadata `meta` and target
    /// `target` (the header's `shinfo` word tagged with
    /// [`EXT_PAGE_FRAG`]); freeing the mbuf's last reference gives it back.
    ///
    /// # Safety
    /// `buf` is a fragment of `len` bytes at IO address `iova` on the page of
    /// `meta`, cut for `target` fragments; the caller owns its reference
    /// and hands it over here (on success), and nothing else uses its bytes.
    pub(crate) unsafe fn attach_page_frag(
        &mut self,
        buf: NonNull<u8>,
        iova: u64,
        len: u16,
        headroom: u16,
        meta: NonNull<PageMeta>,
        target: u32,
    ) -> Result<(), MbufError> {
        self.check_attach(len, headroom)?;
        let word = (meta.as_ptr() as usize | EXT_PAGE_FRAG) as *const ExtSharedInfo;
        self.set_extbuf(buf, iova, len, headroom, word);
        self.header_mut().frag_target = target;
        Ok(())
    }

    fn check_attach(&self, len: u16, headroom: u16) -> Result<(), MbufError> {
        if self.refcnt() != 1 || self.nb_segs() != 1 {
            return Err(MbufError::Shared);
        }
        if self.has_extbuf() {
            return Err(MbufError::AlreadyAttached);
        }
        if headroom > len {
            return Err(MbufError::NoHeadroom {
                need: headroom as usize,
                have: len as usize,
            });
        }
        Ok(())
    }

    /// Points the header at an external buffer; `shinfo` is the word the
    /// header keeps (a shared info, or a tagged page fragment's metadata).
    fn set_extbuf(
        &mut self,
        buf: NonNull<u8>,
        iova: u64,
        len: u16,
        headroom: u16,
        shinfo: *const ExtSharedInfo,
    ) {
        let h = self.header_mut();
        h.buf_addr = buf.as_ptr();
        h.buf_iova = iova;
        h.buf_len = len;
        h.data_off = headroom;
        h.data_len = 0;
        h.pkt_len = 0;
        h.shinfo = shinfo;
        h.ol_flags |= ol::EXTERNAL;
    }
}

/// Segments' data, from [`Mbuf::segments`].
#[derive(Debug)]
pub struct Segments<'a> {
    next: *const MbufHeader,
    _m: std::marker::PhantomData<&'a Mbuf>,
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        // SAFETY: null or a live segment of the borrowed chain.
        let h = unsafe { self.next.as_ref()? };
        self.next = h.next;
        // SAFETY: bounds kept by the mutators; the chain is borrowed shared.
        Some(unsafe {
            std::slice::from_raw_parts(h.buf_addr.add(h.data_off as usize), h.data_len as usize)
        })
    }
}

impl Clone for Mbuf {
    /// Another reference to the same buffer.
    ///
    /// # Panics
    /// At 65 535 references; use [`Mbuf::try_clone`] to get an error instead.
    fn clone(&self) -> Self {
        self.try_clone()
            .expect("mbuf reference count overflow (65535 clones)")
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("addr", &self.ptr)
            .field("refcnt", &self.refcnt())
            .field("pkt_len", &self.pkt_len())
            .field("data_len", &self.data_len())
            .field("nb_segs", &self.nb_segs())
            .field("headroom", &self.headroom())
            .field("port", &self.port())
            .finish()
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own one reference to `ptr` and give it up here.
        if let Some(h) = unsafe { prefree(self.ptr) } {
            // SAFETY: the last reference to a plain single-segment buffer: it
            // goes back to the pool it came from, once.
            unsafe { put_to_pool(h) };
        }
    }
}

/// Gives up one reference. If it was the last and the buffer is a single
/// segment — plain, or over an external buffer, which is detached here —
/// returns the header, now a plain buffer, for the caller to put back (so a
/// burst can batch the puts); otherwise frees what needs freeing itself and
/// returns `None`.
///
/// # Safety
/// The caller owns one reference to `ptr` and does not use it afterwards.
#[inline(always)]
pub(crate) unsafe fn prefree(ptr: NonNull<MbufHeader>) -> Option<NonNull<MbufHeader>> {
    // SAFETY: forwarded.
    unsafe { prefree_into(ptr, None) }
}

/// [`prefree`], with a burst's [`FragRun`]: an Rx fragment whose last
/// attachment goes here joins its run (a run per page, given back in one
/// count update) instead of going back to its page at once.
///
/// # Safety
/// As [`prefree`]; the caller flushes `frags` (or drops it) afterwards.
#[inline(always)]
pub(crate) unsafe fn prefree_into(
    ptr: NonNull<MbufHeader>,
    frags: Option<&mut FragRun>,
) -> Option<NonNull<MbufHeader>> {
    // SAFETY: the reference keeps the header alive until given up below.
    let h = unsafe { ptr.as_ref() };
    // One reference (the common case): no atomic read-modify-write. Acquire
    // pairs with the Release decrement of the last clone dropped elsewhere.
    if h.refcnt.load(Ordering::Acquire) != 1 {
        // Release: our uses of the buffer happen-before the last holder's
        // free; Acquire: if we are last, theirs happen-before ours.
        if h.refcnt.fetch_sub(1, Ordering::AcqRel) != 1 {
            return None;
        }
        // We were last: restore the free-buffer count. No one else can see
        // the header now.
        h.refcnt.store(1, Ordering::Relaxed);
    }
    if h.next.is_null() {
        if !h.shinfo.is_null() {
            // One segment over an external buffer (an Rx fragment): detach
            // here, and the header is a plain buffer for the caller's (bulk)
            // put, not a put of its own.
            // SAFETY: the last reference: the header is ours alone.
            unsafe { detach_ext_into(&mut *ptr.as_ptr(), frags) };
        }
        return Some(ptr);
    }
    // SAFETY: the last reference to the chain; each segment is freed once.
    unsafe { free_segments(ptr) };
    None
}

/// Detaches a segment's external buffer: the segment gets its own buffer
/// back, and gives up its attachment (the last one calls the free callback).
///
/// # Safety
/// `h` is a segment with an external buffer, exclusively ours.
#[inline(always)]
unsafe fn detach_ext(h: &mut MbufHeader) {
    // SAFETY: forwarded.
    unsafe { detach_ext_into(h, None) };
}

/// [`detach_ext`], adding a page fragment's reference to `frags` when given
/// (a run per page, given back in one count update).
///
/// # Safety
/// As [`detach_ext`]; the caller ends `frags` (or drops it) afterwards.
#[inline(always)]
unsafe fn detach_ext_into(h: &mut MbufHeader, frags: Option<&mut FragRun>) {
    let word = h.shinfo;
    // SAFETY: the external buffer was valid while attached.
    let buf = unsafe { NonNull::new_unchecked(h.buf_addr) };
    h.buf_addr = h.own_buf_addr;
    h.buf_iova = h.own_buf_iova;
    h.buf_len = h.own_buf_len;
    h.shinfo = std::ptr::null();
    h.ol_flags &= !ol::EXTERNAL;
    if word as usize & EXT_PAGE_FRAG != 0 {
        // A page fragment: the header held its one page reference (clones
        // share the header, and this is its last reference).
        // SAFETY: the tagged word is the page's metadata, not null.
        let meta =
            unsafe { NonNull::new_unchecked((word as usize & !EXT_PAGE_FRAG) as *mut PageMeta) };
        let target = h.frag_target;
        match frags {
            // SAFETY: the fragment's reference, given up once; its bytes
            // are no longer used (the header's last reference is going).
            Some(run) => unsafe { run.add(meta, target) },
            // SAFETY: as above.
            None => unsafe { put_frag_ref(meta, target) },
        }
        return;
    }
    // SAFETY: attached, so not null.
    let info = unsafe { NonNull::new_unchecked(word.cast_mut()) };
    // SAFETY: `shinfo` is valid while attached (attach contract) and we give
    // up this segment's attachment; what the last one frees may take the
    // info with it, and we do not touch it afterwards.
    if let Some(free) = unsafe { ExtSharedInfo::release(info) } {
        free.call(buf);
    }
}

/// Frees every segment of a chain whose last reference was just given up.
///
/// # Safety
/// No reference to the chain remains.
#[cold]
unsafe fn free_segments(ptr: NonNull<MbufHeader>) {
    let mut seg = ptr.as_ptr();
    while !seg.is_null() {
        // SAFETY: a live segment of the chain, now exclusively ours.
        let h = unsafe { &mut *seg };
        let next = h.next;
        if !h.shinfo.is_null() {
            // SAFETY: attached, and the segment is ours alone.
            unsafe { detach_ext(h) };
        }
        h.next = std::ptr::null_mut();
        h.nb_segs = 1;
        debug_assert_eq!(h.refcnt.load(Ordering::Relaxed), 1);
        // SAFETY: the segment is now a plain free buffer, returned once.
        unsafe { put_to_pool(NonNull::new_unchecked(seg)) };
        seg = next;
    }
}

/// Returns one plain buffer to its pool.
///
/// # Safety
/// `h` satisfies the free-buffer invariants and no reference to it remains.
#[inline(always)]
unsafe fn put_to_pool(h: NonNull<MbufHeader>) {
    // SAFETY: the header's pool outlives its elements (the pool is leaked
    // rather than freed while any is out); the element is returned once.
    unsafe {
        let pool = &*h.as_ref().pool;
        pool.put_bulk(&[Elem::from_ptr(h.cast())]);
    }
}

/// Returns plain buffers of one pool in one bulk put.
///
/// # Safety
/// Every header satisfies the free-buffer invariants, belongs to `pool`, and
/// has no reference left.
#[inline(always)]
pub(crate) unsafe fn put_bulk_to_pool(pool: *const PoolInner, elems: &[Elem]) {
    if elems.is_empty() {
        return;
    }
    // SAFETY: as in `put_to_pool`.
    unsafe { (*pool).put_bulk(elems) };
}
