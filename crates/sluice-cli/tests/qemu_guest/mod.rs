//! A small Linux guest under qemu, for tests that put a real virtio-net
//! driver behind a `vhost:` port.
//!
//! The guest is Debian's cloud kernel (`linux-image-*-cloud-amd64`, fetched
//! with `apt-get download` and unpacked with `dpkg-deb -x`) and an
//! initramfs written here: `busybox-static`, the virtio-net modules and an
//! `/init` script ([`INIT`]) that loads them, brings up `eth0`, pings a peer,
//! sends it a file with `nc`, receives one back, prints what it saw on the
//! serial console and powers off. The kernel and modules are unpacked once
//! into `target/tmp/qemu-guest/PACKAGE/` and reused by later runs; the
//! initramfs is written per guest (it is small).
//!
//! qemu runs with TCG (`-accel tcg -cpu max`): a nested KVM that emulates
//! page tables is far slower to boot a kernel than TCG is. Its virtio-net
//! device gets `vectors=0,romfile=`: qemu 7.2 under TCG crashes (SIGSEGV in
//! its MSI-X vector notifiers) when a vhost-user device starts with MSI-X,
//! so the guest uses INTx; no ROM is needed to boot a kernel directly.
//!
//! Every wait is bounded: qemu is killed when its [`Guest`] is dropped.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use sluice_netns::Need;

/// The qemu binary.
pub const QEMU: &str = "qemu-system-x86_64";

/// The static busybox (Debian package busybox-static).
pub const BUSYBOX: &str = "/bin/busybox";

/// The metapackage whose dependency names the current cloud kernel.
const KERNEL_META: &str = "linux-image-cloud-amd64";

/// The modules virtio-net needs in the cloud kernel, in load order, with
/// their paths under `lib/modules/VERSION/kernel/`.
const MODULES: &[&str] = &[
    "drivers/virtio/virtio_ring.ko",
    "drivers/virtio/virtio.ko",
    "drivers/virtio/virtio_pci_modern_dev.ko",
    "drivers/virtio/virtio_pci_legacy_dev.ko",
    "drivers/virtio/virtio_pci.ko",
    "net/core/failover.ko",
    "drivers/net/net_failover.ko",
    "drivers/net/virtio_net.ko",
];

/// How long fetching and unpacking the kernel package may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(300);

/// The guest's `/init`. Parameters come from the kernel command line as
/// `guest_KEY=VALUE`: `guest_addr` (eth0's address/prefix), `guest_peer`
/// (the address to ping and talk to), `guest_kib` (KiB to send),
/// `guest_send_port` (the peer's port it sends to) and `guest_recv_port`
/// (the port it listens on). Every line for the test starts `guest: `.
pub const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "guest: $*"; }
for kv in $(cat /proc/cmdline); do
    case "$kv" in guest_*=*) export "$kv" ;; esac
done
for m in $(cat /lib/modules/order); do
    insmod "/lib/modules/$m" || say "insmod $m failed"
done
ip link set lo up
ip link set eth0 up || say "no eth0"
ip addr add "$guest_addr" dev eth0
# The first reply (ARP, the forwarder starting), at most 30 tries; then
# the counted pings.
n=0
until ping -c 1 -W 2 "$guest_peer" >/dev/null 2>&1; do
    n=$((n + 1))
    [ "$n" -ge 30 ] && break
done
say "ping $(ping -c 5 -W 10 "$guest_peer" | grep 'packets transmitted')"
dd if=/dev/urandom of=/tmp/out bs=1024 count="$guest_kib" 2>/dev/null
say "sending md5 $(md5sum /tmp/out | cut -d' ' -f1) bytes $(wc -c < /tmp/out)"
timeout 120 nc "$guest_peer" "$guest_send_port" < /tmp/out
say "send exit $?"
timeout 120 nc -l -p "$guest_recv_port" < /dev/null > /tmp/in &
say "listening on $guest_recv_port"
wait $!
say "receive exit $?"
say "received md5 $(md5sum /tmp/in | cut -d' ' -f1) bytes $(wc -c < /tmp/in)"
say "done"
poweroff -f
"#;

/// Why a guest cannot run here (a tool missing), with the [`Need`] that
/// decides whether CI may skip; `None` when everything is there.
pub fn unavailable() -> Option<String> {
    let mut missing = Vec::new();
    for (tool, package) in [
        (QEMU, "qemu-system-x86"),
        ("apt-get", "apt"),
        ("apt-cache", "apt"),
        ("dpkg-deb", "dpkg"),
        ("md5sum", "coreutils"),
    ] {
        if !on_path(tool) {
            missing.push(format!("{tool} (Debian: {package})"));
        }
    }
    match std::fs::read(BUSYBOX) {
        Ok(elf) if is_static_elf(&elf) => {}
        Ok(_) => missing.push(format!("a static {BUSYBOX} (Debian: busybox-static)")),
        Err(_) => missing.push(format!("{BUSYBOX} (Debian: busybox-static)")),
    }
    (!missing.is_empty()).then(|| format!("missing: {}", missing.join(", ")))
}

/// [`unavailable`] as the early return of a test: `true` (after printing
/// why, or panicking under CI, see [`sluice_netns::skip_or_fail`]) when a
/// guest cannot run here.
#[track_caller]
pub fn skip() -> bool {
    match unavailable() {
        Some(why) => {
            sluice_netns::skip_or_fail(Need::Tool, &why);
            true
        }
        None => false,
    }
}

/// Whether `tool` is an executable file in a `PATH` directory.
fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| {
        std::fs::metadata(d.join(tool))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Whether `elf` is a 64-bit little-endian ELF file without a program
/// interpreter (`PT_INTERP`): statically linked, so it runs in an
/// initramfs that has no dynamic loader.
fn is_static_elf(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    if elf.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    let Ok(phoff) = usize::try_from(phoff) else {
        return false;
    };
    (0..usize::from(phnum))
        .all(|i| u32_at(phoff + i * usize::from(phentsize)).is_some_and(|kind| kind != PT_INTERP))
}

/// The unpacked kernel: its image and the modules [`INIT`] loads.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The Debian package it came from.
    pub package: String,
    /// `vmlinuz`.
    pub image: PathBuf,
    /// The modules, in load order.
    pub modules: Vec<PathBuf>,
}

/// Where unpacked kernels are kept between runs.
fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("qemu-guest")
}

/// Runs `argv` (bounded by [`FETCH_TIMEOUT`]): its standard output, or
/// why it failed.
fn run(argv: &[&str]) -> Result<String, String> {
    let out = sluice_netns::exec(argv, FETCH_TIMEOUT).map_err(|e| e.to_string())?;
    if out.success() {
        Ok(out.stdout)
    } else {
        Err(out.to_string())
    }
}

/// The cloud kernel's package name (`linux-image-VERSION-cloud-amd64`),
/// from the metapackage's dependency in apt's package lists.
fn kernel_package() -> Result<String, String> {
    let out = run(&["apt-cache", "depends", KERNEL_META])?;
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|name| name.starts_with("linux-image-") && name.ends_with("-cloud-amd64"))
        .map(str::to_owned)
        .ok_or_else(|| {
            format!("apt-cache names no kernel for {KERNEL_META} (apt-get update?):\n{out}")
        })
}

/// The kernel image and modules of the current cloud kernel: unpacked
/// from its package on the first call of any run, and from the cache after
/// that; or why not (no package lists, the archive out of reach).
pub fn kernel() -> Result<Kernel, String> {
    let package = kernel_package()?;
    let dir = cache_dir().join(&package);
    let kernel = Kernel {
        image: dir.join("vmlinuz"),
        modules: MODULES
            .iter()
            .map(|m| dir.join(Path::new(m).file_name().unwrap()))
            .collect(),
        package,
    };
    if kernel.image.is_file() && kernel.modules.iter().all(|m| m.is_file()) {
        return Ok(kernel);
    }
    // Unpacked beside the cache entry, then renamed into place whole, so
    // tests in several processes never see half of one.
    let work = cache_dir().join(format!(
        "{}.unpacking-{}-{:?}",
        kernel.package,
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&work);
    let result = unpack(&kernel.package, &work).and_then(|()| {
        match std::fs::rename(work.join("out"), &dir) {
            Ok(()) => Ok(()),
            // Another test got there first.
            Err(_) if kernel.image.is_file() => Ok(()),
            Err(e) => Err(format!("rename into {}: {e}", dir.display())),
        }
    });
    let _ = std::fs::remove_dir_all(&work);
    result.map(|()| kernel)
}

/// Downloads `package` into `work`, unpacks it and copies the kernel
/// image and [`MODULES`] to `work/out/`.
fn unpack(package: &str, work: &Path) -> Result<(), String> {
    let out = work.join("out");
    let root = work.join("root");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let work_str = work.to_str().ok_or("the cache path is not UTF-8")?;
    // apt-get download writes into the current directory.
    run(&[
        "sh",
        "-c",
        r#"cd "$1" && exec apt-get download -q "$2""#,
        "sh",
        work_str,
        package,
    ])?;
    let deb = std::fs::read_dir(work)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| format!("apt-get download {package} left no .deb"))?;
    run(&[
        "dpkg-deb",
        "-x",
        deb.to_str().ok_or("the cache path is not UTF-8")?,
        root.to_str().ok_or("the cache path is not UTF-8")?,
    ])?;
    let version = package
        .strip_prefix("linux-image-")
        .ok_or("not a linux-image package")?;
    let copy = |from: PathBuf, to: PathBuf| {
        std::fs::copy(&from, &to)
            .map(|_| ())
            .map_err(|e| format!("{package}: {}: {e}", from.display()))
    };
    copy(
        root.join("boot").join(format!("vmlinuz-{version}")),
        out.join("vmlinuz"),
    )?;
    let modules = root.join("lib/modules").join(version).join("kernel");
    for m in MODULES {
        copy(modules.join(m), out.join(Path::new(m).file_name().unwrap()))?;
    }
    Ok(())
}

/// A newc-format cpio archive (what the kernel unpacks as an initramfs),
/// written in memory.
struct Cpio {
    out: Vec<u8>,
    next_ino: u32,
}

impl Cpio {
    fn new() -> Cpio {
        Cpio {
            out: Vec::new(),
            next_ino: 1,
        }
    }

    /// One entry: header, name, data, each padded to 4 bytes.
    fn entry(&mut self, name: &str, mode: u32, nlink: u32, data: &[u8]) {
        let ino = self.next_ino;
        self.next_ino += 1;
        let fields = [
            ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            u32::try_from(data.len()).expect("a cpio member under 4 GiB"),
            0, // devmajor
            0, // devminor
            0, // rdevmajor
            0, // rdevminor
            u32::try_from(name.len() + 1).unwrap(),
            0, // check
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, 2, &[]);
    }

    fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | mode, 1, data);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 1, &[]);
        self.out
    }
}

/// Writes the initramfs to `path`: busybox, [`INIT`], the kernel's modules
/// and their load order.
pub fn write_initramfs(kernel: &Kernel, path: &Path) -> Result<(), String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut cpio = Cpio::new();
    for d in ["bin", "lib", "lib/modules"] {
        cpio.dir(d);
    }
    cpio.file("bin/busybox", 0o755, &read(Path::new(BUSYBOX))?);
    cpio.file("init", 0o755, INIT.as_bytes());
    let mut order = String::new();
    for m in &kernel.modules {
        let name = m.file_name().unwrap().to_str().unwrap();
        cpio.file(&format!("lib/modules/{name}"), 0o644, &read(m)?);
        order.push_str(name);
        order.push('\n');
    }
    cpio.file("lib/modules/order", 0o644, order.as_bytes());
    std::fs::write(path, cpio.finish()).map_err(|e| format!("{}: {e}", path.display()))
}

/// Where the guest's memory comes from; vhost-user needs it shared.
#[derive(Clone, Debug)]
pub enum Memory {
    /// An anonymous memfd (`memory-backend-memfd`).
    Memfd,
    /// A file qemu creates (and unlinks) in this hugetlbfs directory
    /// (`memory-backend-file`).
    Hugetlbfs(PathBuf),
}

/// MiB of guest memory.
pub const GUEST_MIB: u32 = 256;

/// What one guest does: its addresses and the transfer.
#[derive(Clone, Debug)]
pub struct Plan {
    /// eth0's address with prefix, `10.79.0.1/24`.
    pub addr: String,
    /// The peer it pings, sends to and is sent from.
    pub peer: String,
    /// KiB it sends.
    pub send_kib: u32,
    /// The peer's port it sends to.
    pub send_port: u16,
    /// The port it listens on.
    pub recv_port: u16,
}

/// A running guest: qemu, its console lines as they come, and its end.
/// Dropping it kills qemu.
pub struct Guest {
    child: Child,
    lines: Receiver<String>,
    /// Every console line so far.
    pub console: Vec<String>,
}

impl Guest {
    /// Starts qemu with `kernel` and `initramfs`, its virtio-net device on
    /// the vhost-user socket `socket` (qemu connects; the port listens).
    pub fn start(
        kernel: &Kernel,
        initramfs: &Path,
        socket: &Path,
        memory: &Memory,
        plan: &Plan,
    ) -> Result<Guest, String> {
        let size = format!("{GUEST_MIB}M");
        let backend = match memory {
            Memory::Memfd => format!("memory-backend-memfd,id=mem,size={size},share=on"),
            Memory::Hugetlbfs(dir) => format!(
                "memory-backend-file,id=mem,size={size},mem-path={},share=on",
                dir.display()
            ),
        };
        let append = format!(
            "console=ttyS0 quiet panic=-1 guest_addr={} guest_peer={} guest_kib={} \
             guest_send_port={} guest_recv_port={}",
            plan.addr, plan.peer, plan.send_kib, plan.send_port, plan.recv_port
        );
        let mut child = Command::new(QEMU)
            .args(["-accel", "tcg", "-cpu", "max", "-m", &size, "-smp", "1"])
            .args([
                "-nographic",
                "-no-reboot",
                "-nodefaults",
                "-serial",
                "stdio",
            ])
            .arg("-kernel")
            .arg(&kernel.image)
            .arg("-initrd")
            .arg(initramfs)
            .args(["-append", &append])
            .args(["-object", &backend, "-numa", "node,memdev=mem"])
            .arg("-chardev")
            .arg(format!("socket,id=vhost0,path={}", socket.display()))
            .args(["-netdev", "vhost-user,id=net0,chardev=vhost0"])
            .args([
                "-device",
                "virtio-net-pci,netdev=net0,mac=52:54:00:00:00:01,vectors=0,romfile=",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{QEMU} does not start: {e}"))?;
        let (tx, lines) = channel();
        for pipe in [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).split(b'\n') {
                    let Ok(line) = line else { break };
                    let line = String::from_utf8_lossy(&line).trim_end().to_owned();
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Guest {
            child,
            lines,
            console: Vec::new(),
        })
    }

    /// Waits (until `deadline`) for a console line `guest: MESSAGE` whose
    /// message starts with `prefix`: the rest of the message, or `None` if
    /// the deadline passed or qemu ended first.
    pub fn expect(&mut self, prefix: &str, deadline: Instant) -> Option<String> {
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let said = line
                        .find("guest: ")
                        .map(|at| line[at + "guest: ".len()..].to_owned());
                    self.console.push(line);
                    if let Some(rest) = said.as_deref().and_then(|s| s.strip_prefix(prefix)) {
                        return Some(rest.trim().to_owned());
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Waits (until `deadline`) for qemu to end, then kills it if it has
    /// not: whether it ended by itself, successfully.
    pub fn wait(&mut self, deadline: Instant) -> bool {
        let ended =
            sluice_netns::wait_until(deadline.saturating_duration_since(Instant::now()), || {
                matches!(self.child.try_wait(), Ok(Some(_)))
            });
        let _ = self.child.kill();
        let status = self.child.wait();
        while let Ok(line) = self.lines.try_recv() {
            self.console.push(line);
        }
        ended && status.is_ok_and(|s| s.success())
    }

    /// The console so far, for a failure message.
    pub fn log(&self) -> String {
        self.console.join("\n")
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpio_entries_are_newc_and_aligned() {
        let mut cpio = Cpio::new();
        cpio.dir("bin");
        cpio.file("init", 0o755, b"#!/bin/sh\n");
        let out = cpio.finish();
        assert_eq!(out.len() % 4, 0);
        assert!(out.starts_with(b"070701"));
        // Name size of "bin" + NUL, then the name at byte 110.
        assert_eq!(&out[94..102], b"00000004");
        assert_eq!(&out[110..114], b"bin\0");
        // The second header starts at 116 (110 + 4, padded to 4: 116).
        assert_eq!(&out[116..122], b"070701");
        assert!(out.windows(11).any(|w| w == b"TRAILER!!!\0"));
    }

    #[test]
    fn the_static_busybox_check_reads_program_headers() {
        assert!(!is_static_elf(b"not an elf"));
        // This test binary is dynamically linked (it has PT_INTERP).
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(!is_static_elf(&me));
    }
}
