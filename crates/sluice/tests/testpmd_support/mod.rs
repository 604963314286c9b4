//! What the tests against DPDK's `dpdk-testpmd` with `net_virtio_user`
//! share: finding the tools, skipping without them (failing under CI), a
//! directory for the socket file, EAL's leftovers, and hugepages.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether testpmd and its virtio driver are here.
fn tools_present() -> Result<(), String> {
    let testpmd = Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if testpmd.is_err() {
        return Err("no dpdk-testpmd".into());
    }
    let virtio_driver = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|arch| std::fs::read_dir(arch.path().join("dpdk")).ok())
        .flatten()
        .flatten()
        .any(|pmds| pmds.path().join("librte_net_virtio.so").exists());
    if !virtio_driver {
        return Err("no DPDK virtio driver (librte_net_virtio.so)".into());
    }
    Ok(())
}

/// Says why a test is skipped and returns true, or, under CI
/// (`CI=true`), fails: there nothing a test needs may be missing.
pub fn skip_for(missing: &str) -> bool {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{missing} under CI"
    );
    eprintln!("skipped: {missing}");
    true
}

/// Skips (or, under CI, fails) when testpmd or its virtio driver is
/// missing.
pub fn skip() -> bool {
    match tools_present() {
        Ok(()) => false,
        Err(missing) => skip_for(&missing),
    }
}

/// A fresh directory for the socket file, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sluice-vhost-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes EAL's runtime directory for `prefix`, by DPDK's rules (root:
/// /var/run, else XDG_RUNTIME_DIR or /tmp).
pub fn remove_eal_runtime(prefix: &str) {
    let bases = [
        Some("/var/run".into()),
        std::env::var_os("XDG_RUNTIME_DIR"),
        Some("/tmp".into()),
    ];
    for base in bases.into_iter().flatten() {
        let _ = std::fs::remove_dir_all(Path::new(&base).join("dpdk").join(prefix));
    }
}

/// Where the kernel keeps the 2 MiB hugepage pool's counts.
const HUGEPAGES_2M: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";

/// Free 2 MiB hugepages made sure of for a test: the pool is raised (as
/// root) when too few are free, and put back to its size on drop.
pub struct HugePages {
    /// The pool's size before, when it was raised.
    restore: Option<u64>,
}

impl HugePages {
    fn count(name: &str) -> Option<u64> {
        std::fs::read_to_string(format!("{HUGEPAGES_2M}/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// At least `want` free hugepages, or why not.
    pub fn reserve(want: u64) -> Result<HugePages, String> {
        let free = Self::count("free_hugepages").ok_or("no 2 MiB hugepages in this kernel")?;
        if free >= want {
            return Ok(HugePages { restore: None });
        }
        let total = Self::count("nr_hugepages").ok_or("no hugepage pool size")?;
        std::fs::write(
            format!("{HUGEPAGES_2M}/nr_hugepages"),
            (total + want - free).to_string(),
        )
        .map_err(|e| format!("cannot reserve hugepages: {e}"))?;
        let guard = HugePages {
            restore: Some(total),
        };
        match Self::count("free_hugepages") {
            Some(now) if now >= want => Ok(guard),
            _ => Err(format!("{want} hugepages could not be reserved")),
        }
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        if let Some(total) = self.restore {
            let _ = std::fs::write(format!("{HUGEPAGES_2M}/nr_hugepages"), total.to_string());
        }
    }
}
