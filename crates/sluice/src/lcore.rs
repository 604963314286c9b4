//! Lcores: threads registered with a unique small id (STUB — being written).

/// Maximum number of lcores registered at once; ids are `0..MAX_LCORES`.
pub const MAX_LCORES: usize = 128;

/// The calling thread's lcore id, or `None` when it is not registered.
#[inline(always)]
pub fn current() -> Option<usize> {
    None
}
