//! What the tests against DPDK's `dpdk-testpmd` with `net_memif` share:
//! finding the tools, skipping without them (failing under CI), and a
//! directory for the socket file.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Whether testpmd and its memif driver are here.
fn tools_present() -> Result<(), String> {
    let testpmd = Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if testpmd.is_err() {
        return Err("no dpdk-testpmd".into());
    }
    let memif_driver = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|arch| std::fs::read_dir(arch.path().join("dpdk")).ok())
        .flatten()
        .flatten()
        .any(|pmds| pmds.path().join("librte_net_memif.so").exists());
    if !memif_driver {
        return Err("no DPDK memif driver (librte_net_memif.so)".into());
    }
    Ok(())
}

/// Skips (or, under CI, fails) when testpmd or its memif driver is missing.
pub fn skip() -> bool {
    match tools_present() {
        Ok(()) => false,
        Err(missing) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{missing}"),
        Err(missing) => {
            eprintln!("skipped: {missing}");
            true
        }
    }
}

/// A fresh directory for the socket file, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sluice-memif-{name}-{}", std::process::id()));
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
