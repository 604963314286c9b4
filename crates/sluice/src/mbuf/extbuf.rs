//! External buffers: packet data that lives outside the mbuf's own element
//! (an application buffer, a page-pool fragment), attached to an mbuf header.
//!
//! The memory is described by an [`ExtSharedInfo`], which counts the mbufs
//! attached to it and calls its free callback when the last one detaches —
//! on whichever thread that happens. (A page-pool fragment needs none: it is
//! attached to one header, which keeps the fragment's page reference
//! itself, see `pagepool::attach_frag`.) Detaching restores the mbuf's own
//! buffer, so the header goes back to its pool as a normal buffer.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Called with the buffer address and the opaque value when the last mbuf
/// attached to an external buffer lets go of it.
pub type ExtFreeCallback = fn(buf: NonNull<u8>, opaque: *mut ());

/// What the last detachment from an external buffer has to do: call the
/// free callback with the buffer and the opaque value
/// ([`ExtSharedInfo::release`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExtFree {
    cb: ExtFreeCallback,
    opaque: *mut (),
}

impl ExtFree {
    /// Calls the callback for `buf`.
    #[inline]
    pub(crate) fn call(self, buf: NonNull<u8>) {
        (self.cb)(buf, self.opaque);
    }
}

/// The shared description of an external buffer.
///
/// Lives at a stable address for as long as any mbuf is attached (typically
/// inside the memory it describes, or in a `Box` the callback frees).
#[derive(Debug)]
pub struct ExtSharedInfo {
    free_cb: ExtFreeCallback,
    opaque: *mut (),
    /// Mbufs attached. The one that takes it to 0 calls `free_cb`.
    refcnt: AtomicU32,
}

// SAFETY: the callback and opaque value are handed over to whichever thread
// detaches last; whoever builds the info vouches (in `new`'s contract) that
// this is fine for their opaque value.
unsafe impl Send for ExtSharedInfo {}
// SAFETY: shared access only reads `free_cb`/`opaque` and updates `refcnt`
// atomically.
unsafe impl Sync for ExtSharedInfo {}

impl ExtSharedInfo {
    /// A shared info with no mbuf attached yet.
    ///
    /// # Safety
    /// `free_cb(buf, opaque)` must be sound to call once, from any thread, when
    /// the last attached mbuf detaches.
    pub const unsafe fn new(free_cb: ExtFreeCallback, opaque: *mut ()) -> Self {
        ExtSharedInfo {
            free_cb,
            opaque,
            refcnt: AtomicU32::new(0),
        }
    }

    /// Mbufs attached now (a snapshot).
    pub fn refcnt(&self) -> u32 {
        self.refcnt.load(Ordering::Relaxed)
    }

    /// One more mbuf attaches.
    #[inline]
    pub(crate) fn get(&self) {
        // Relaxed: as for `Arc::clone`, the new reference is made from one the
        // caller already holds (or from the creator, before any sharing).
        self.refcnt.fetch_add(1, Ordering::Relaxed);
    }

    /// One mbuf detaches. The last gets the free callback back
    /// ([`ExtFree`]), to call for the buffer; the info's memory may be
    /// handed on once it is done.
    ///
    /// Takes a pointer, not `&self`: the info may live inside the buffer it
    /// describes, and what
    /// the last detachment frees hands that memory on while the caller is
    /// still running, so no reference to the info may outlive this call.
    ///
    /// # Safety
    /// `this` is valid, and the caller held one attachment, given up here;
    /// it does what the returned [`ExtFree`] says, once.
    #[inline]
    pub(crate) unsafe fn release(this: NonNull<ExtSharedInfo>) -> Option<ExtFree> {
        // SAFETY: valid while we hold an attachment (until the decrement).
        let info = unsafe { this.as_ref() };
        // Read before the decrement: after it, another holder may free the
        // info.
        let free = ExtFree {
            cb: info.free_cb,
            opaque: info.opaque,
        };
        // The only attachment (the common case): no atomic write — no one
        // else can attach without holding one (as `Arc`). Acquire pairs with
        // the Release decrement of the last other holder, so its uses of the
        // buffer happen-before the free.
        let last = info.refcnt.load(Ordering::Acquire) == 1
            // Release pairs with the Acquire fence of whoever ends up last,
            // so every holder's use happens-before the free.
            || info.refcnt.fetch_sub(1, Ordering::Release) == 1;
        if !last {
            return None;
        }
        // Back to no attachment (the shortcut left it at 1), before the
        // callback may hand the info's memory on: an info that outlives its
        // buffer can be attached again from 0.
        info.refcnt.store(0, Ordering::Relaxed);
        // Pairs with the Release decrements (a no-op after the Acquire load
        // above; the RMW path needs it).
        std::sync::atomic::fence(Ordering::Acquire);
        Some(free)
    }

    /// True when more than one mbuf shares the data.
    #[inline]
    pub(crate) fn is_shared(&self) -> bool {
        self.refcnt.load(Ordering::Acquire) > 1
    }
}
