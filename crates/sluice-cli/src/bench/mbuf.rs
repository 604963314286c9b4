//! `sluice bench mbuf`: packet buffer allocation and free.
//!
//! Cases, once the mbuf layer has landed: alloc + free of one mbuf, and alloc of
//! a bulk of 32 into a `Burst` + free of the burst, with mempool caches of 256
//! (one op = one mbuf allocated and freed). Until then the part reports that it
//! is waiting for that layer.

use super::{Ctx, Selection};

/// Runs the mbuf cases of `sel`.
pub fn run(ctx: &mut Ctx, sel: Selection) {
    if sel == Selection::Summary {
        return;
    }
    ctx.section(
        "mbuf (alloc + free)",
        &["mbuf bench: waiting for the mbuf layer (crates/sluice/src/mbuf).".to_owned()],
    );
}
