//! The XDP side: an XSKMAP, the redirect program built from eBPF
//! instructions, and its attachment to an interface by a `bpf_link` — all
//! through the raw `bpf(2)` system call.
//!
//! # The program
//! ```text
//! r2 = *(u32 *)(r1 + 16)    ; ctx->rx_queue_index
//! r1 = map[xskmap]          ; ld_imm64 with the map's fd (two slots)
//! r3 = XDP_PASS             ; what to do when the slot is empty
//! call bpf_redirect_map     ; helper 51
//! exit
//! ```
//! A frame arriving on queue `q` goes to the AF_XDP socket in slot `q` of
//! the XSKMAP; a queue without a socket passes frames to the kernel stack
//! (the low bits of the helper's flags are the action on a miss). The
//! helper is GPL-only, so the program is licensed "GPL".
//!
//! # Attachment
//! `BPF_LINK_CREATE` with attach type `BPF_XDP` and the mode flag (native:
//! `XDP_FLAGS_DRV_MODE`, generic: `XDP_FLAGS_SKB_MODE`). The program stays
//! attached exactly as long as the link's fd is open, so closing it
//! detaches, and a process that dies detaches too: nothing is left on the
//! interface.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `bpf(2)` commands.
const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_PROG_LOAD: i32 = 5;
const BPF_LINK_CREATE: i32 = 28;

/// `BPF_MAP_TYPE_XSKMAP`.
const MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
const PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP`, the attach type of an XDP link.
const ATTACH_TYPE_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP, run on the socket buffer.
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver.
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `XDP_PASS`.
const XDP_PASS: i32 = 2;
/// `BPF_FUNC_redirect_map`.
const HELPER_REDIRECT_MAP: i32 = 51;
/// `BPF_PSEUDO_MAP_FD`: the `ld_imm64` immediate is a map fd.
const PSEUDO_MAP_FD: u8 = 1;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    /// Opcode.
    pub code: u8,
    /// Destination register (low nibble), source register (high nibble).
    pub regs: u8,
    /// Offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: dst | src << 4,
            off,
            imm,
        }
    }

    /// `dst = *(u32 *)(src + off)` (`BPF_LDX | BPF_MEM | BPF_W`).
    pub(crate) const fn ldx_w(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x61, dst, src, off, 0)
    }

    /// `dst = map` for the map with fd `fd` (`BPF_LD | BPF_DW | BPF_IMM`
    /// with `BPF_PSEUDO_MAP_FD`): two slots.
    pub(crate) const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
        [
            Insn::new(0x18, dst, PSEUDO_MAP_FD, 0, fd),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }

    /// `dst = imm` (`BPF_ALU64 | BPF_MOV | BPF_K`).
    pub(crate) const fn mov64_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(0xb7, dst, 0, 0, imm)
    }

    /// Calls helper `id` (`BPF_JMP | BPF_CALL`).
    pub(crate) const fn call(id: i32) -> Insn {
        Insn::new(0x85, 0, 0, 0, id)
    }

    /// Returns `r0` (`BPF_JMP | BPF_EXIT`).
    pub(crate) const fn exit() -> Insn {
        Insn::new(0x95, 0, 0, 0, 0)
    }
}

/// The redirect program for the XSKMAP whose fd is `map_fd` (module docs).
pub(crate) fn redirect_program(map_fd: i32) -> [Insn; 6] {
    let [ld0, ld1] = Insn::ld_map_fd(1, map_fd);
    [
        // `struct xdp_md`: data, data_end, data_meta, ingress_ifindex,
        // rx_queue_index — five u32s.
        Insn::ldx_w(2, 1, 16),
        ld0,
        ld1,
        Insn::mov64_imm(3, XDP_PASS),
        Insn::call(HELPER_REDIRECT_MAP),
        Insn::exit(),
    ]
}

/// `bpf(cmd, attr, size)`; a new fd or 0 on success.
fn bpf<A>(cmd: i32, attr: &mut A) -> std::io::Result<i32> {
    // SAFETY: `attr` is a `repr(C)` prefix of `union bpf_attr` for `cmd`,
    // valid for `size_of::<A>()` bytes; the kernel zero-extends the rest.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut A,
            std::mem::size_of::<A>() as u32,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

/// Wraps a new fd the kernel returned.
fn owned(fd: i32) -> OwnedFd {
    // SAFETY: `fd` was just returned by the kernel as a new descriptor
    // that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `bpf_attr` for `BPF_MAP_CREATE`.
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `bpf_attr` for `BPF_MAP_*_ELEM`.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `bpf_attr` for `BPF_PROG_LOAD`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `bpf_attr` for `BPF_LINK_CREATE`.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// A name field: up to 15 bytes and a NUL.
fn name16(s: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(s.bytes().take(15)) {
        *o = b;
    }
    out
}

/// An XSKMAP: queue index → AF_XDP socket. A socket leaves it when it
/// closes.
#[derive(Debug)]
pub(crate) struct XskMap {
    fd: OwnedFd,
}

impl XskMap {
    /// A map with `entries` slots (one per queue of the interface).
    pub(crate) fn new(entries: u32) -> std::io::Result<XskMap> {
        let mut attr = MapCreateAttr {
            map_type: MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: entries,
            map_name: name16("sluice_xsks"),
            ..Default::default()
        };
        let fd = bpf(BPF_MAP_CREATE, &mut attr)?;
        Ok(XskMap { fd: owned(fd) })
    }

    /// Puts socket `sock` in slot `queue`.
    pub(crate) fn set(&self, queue: u32, sock: RawFd) -> std::io::Result<()> {
        let key = queue;
        let value = sock as u32;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            ..Default::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }

    /// The map's fd.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Why the program did not load: the error and the verifier's log.
#[derive(Debug)]
pub(crate) struct LoadError {
    pub err: std::io::Error,
    pub log: String,
}

/// A loaded XDP program.
#[derive(Debug)]
pub(crate) struct XdpProg {
    fd: OwnedFd,
}

impl XdpProg {
    /// Loads `insns` as an XDP program named `name`. On failure the load is
    /// retried with the verifier log on, and the log comes with the error.
    pub(crate) fn load(name: &str, insns: &[Insn]) -> Result<XdpProg, LoadError> {
        let license = CString::new("GPL").expect("no NUL inside");
        let attr = |log: &mut [u8]| ProgLoadAttr {
            prog_type: PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: if log.is_empty() { 0 } else { 1 },
            log_size: log.len() as u32,
            log_buf: if log.is_empty() {
                0
            } else {
                log.as_mut_ptr() as u64
            },
            prog_name: name16(name),
            expected_attach_type: ATTACH_TYPE_XDP,
            ..Default::default()
        };
        match bpf(BPF_PROG_LOAD, &mut attr(&mut [])) {
            Ok(fd) => Ok(XdpProg { fd: owned(fd) }),
            Err(err) => {
                let mut log = vec![0u8; 64 * 1024];
                let mut a = attr(&mut log);
                if let Ok(fd) = bpf(BPF_PROG_LOAD, &mut a) {
                    // Loaded the second time: keep it.
                    return Ok(XdpProg { fd: owned(fd) });
                }
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let log = String::from_utf8_lossy(&log[..end]).trim_end().to_owned();
                Err(LoadError { err, log })
            }
        }
    }

    /// Attaches the program to interface `ifindex` in mode `flags`
    /// ([`XDP_FLAGS_DRV_MODE`] or [`XDP_FLAGS_SKB_MODE`]); it stays
    /// attached while the returned link's fd is open.
    pub(crate) fn attach(&self, ifindex: u32, flags: u32) -> std::io::Result<OwnedFd> {
        let mut attr = LinkCreateAttr {
            prog_fd: self.fd.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: ATTACH_TYPE_XDP,
            flags,
        };
        bpf(BPF_LINK_CREATE, &mut attr).map(owned)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_program_encodes_as_the_kernel_reads_it() {
        let p = redirect_program(7);
        let raw: Vec<u64> = p
            .iter()
            .map(|i| {
                // SAFETY: `Insn` is 8 bytes of plain integers.
                unsafe { std::mem::transmute::<Insn, u64>(*i) }
            })
            .collect();
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        // code, dst|src<<4, off (LE), imm (LE)
        let bytes = |i: usize| raw[i].to_le_bytes();
        assert_eq!(
            bytes(0),
            [0x61, 0x12, 16, 0, 0, 0, 0, 0],
            "r2 = *(u32 *)(r1 + 16)"
        );
        assert_eq!(bytes(1), [0x18, 0x11, 0, 0, 7, 0, 0, 0], "r1 = map fd 7");
        assert_eq!(bytes(2), [0; 8], "second half of ld_imm64");
        assert_eq!(bytes(3), [0xb7, 0x03, 0, 0, 2, 0, 0, 0], "r3 = XDP_PASS");
        assert_eq!(
            bytes(4),
            [0x85, 0, 0, 0, 51, 0, 0, 0],
            "call bpf_redirect_map"
        );
        assert_eq!(bytes(5), [0x95, 0, 0, 0, 0, 0, 0, 0], "exit");
    }

    #[test]
    fn attr_layouts_match_the_kernel() {
        use std::mem::{offset_of, size_of};
        assert_eq!(offset_of!(ProgLoadAttr, log_buf), 32);
        assert_eq!(offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(offset_of!(MapCreateAttr, map_name), 28);
        assert_eq!(offset_of!(MapElemAttr, value), 16);
        assert_eq!(size_of::<LinkCreateAttr>(), 16);
        assert_eq!(name16("a_name_longer_than_fifteen")[15], 0);
    }

    #[test]
    fn a_program_the_verifier_rejects_comes_back_with_its_log() {
        // Needs CAP_BPF (root here); elsewhere the load fails with EPERM
        // before the verifier runs, which is also an error with no program.
        let bad = [Insn::exit()]; // r0 is never set
        let Err(e) = XdpProg::load("sluice_bad", &bad) else {
            panic!("the verifier accepts a program that returns an unset r0");
        };
        if e.err.raw_os_error() == Some(libc::EPERM) {
            crate::driver::afxdp::tests::skipped("loading BPF programs is not permitted here");
            return;
        }
        assert_eq!(e.err.raw_os_error(), Some(libc::EACCES), "{e:?}");
        assert!(e.log.contains("R0 !read_ok"), "log: {}", e.log);
    }
}
