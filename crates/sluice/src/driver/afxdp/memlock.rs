//! UMEM memory and `RLIMIT_MEMLOCK`.
//!
//! Registering a UMEM pins its pages. A process with `CAP_IPC_LOCK` may pin
//! any amount; without it the pages are charged to the user's locked-memory
//! count, which may not exceed `RLIMIT_MEMLOCK` (the kernel answers
//! `ENOBUFS`). The port checks its UMEMs against the limit before
//! registering them, so the error names the limit instead of a bare
//! `ENOBUFS`; the registration's own `ENOBUFS` (other locked memory of the
//! same user counts too) gets the same explanation.

/// `CAP_IPC_LOCK`.
const CAP_IPC_LOCK: u32 = 14;
/// `_LINUX_CAPABILITY_VERSION_3`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Whether the calling thread has `CAP_IPC_LOCK` in its effective set.
pub(crate) fn has_cap_ipc_lock() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut hdr = Header {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget(2) with a version-3 header and room for the two
    // 32-bit halves that version reports.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) };
    r == 0 && data[0].effective & (1 << CAP_IPC_LOCK) != 0
}

/// The soft `RLIMIT_MEMLOCK` in bytes; `None` when unlimited.
pub(crate) fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes one `rlimit`.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if r != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(lim.rlim_cur)
    }
}

/// Bytes as KiB, rounded up.
fn kib(b: u64) -> u64 {
    b.div_ceil(1024)
}

/// The explanation of a UMEM that needs `need` locked bytes (`what`
/// describes it) against a limit of `limit`.
pub(crate) fn too_much(what: &str, need: u64, limit: u64) -> String {
    format!(
        "{what} needs {} KiB of locked memory, more than RLIMIT_MEMLOCK allows ({} KiB), and \
         the process lacks CAP_IPC_LOCK: raise the limit (`ulimit -l`) or use a smaller pool",
        kib(need),
        kib(limit)
    )
}

/// Checks that `need` bytes of UMEM may be pinned: always with
/// `CAP_IPC_LOCK` or an unlimited limit, else against the limit.
pub(crate) fn check(what: &str, need: u64) -> Result<(), String> {
    if has_cap_ipc_lock() {
        return Ok(());
    }
    match memlock_limit() {
        Some(limit) if need > limit => Err(too_much(what, need, limit)),
        _ => Ok(()),
    }
}

/// The explanation of an `ENOBUFS` from `XDP_UMEM_REG`.
pub(crate) fn enobufs(what: &str, need: u64) -> String {
    let limit = memlock_limit().map_or("unlimited".to_owned(), |l| format!("{} KiB", kib(l)));
    format!(
        "{what} ({} KiB) could not be pinned (ENOBUFS): with this user's other locked memory \
         it exceeds RLIMIT_MEMLOCK ({limit}) and the process lacks CAP_IPC_LOCK",
        kib(need)
    )
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_limit() {
        assert_eq!(
            too_much("the UMEM of pool 'p'", 16 << 20, 8 << 20),
            "the UMEM of pool 'p' needs 16384 KiB of locked memory, more than RLIMIT_MEMLOCK \
             allows (8192 KiB), and the process lacks CAP_IPC_LOCK: raise the limit (`ulimit \
             -l`) or use a smaller pool"
        );
    }

    #[test]
    fn with_the_capability_any_size_passes() {
        if !has_cap_ipc_lock() {
            crate::driver::afxdp::tests::skipped("the process lacks CAP_IPC_LOCK");
            return;
        }
        assert_eq!(check("x", u64::MAX), Ok(()));
    }
}
