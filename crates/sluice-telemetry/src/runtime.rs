//! Where telemetry sockets live, by DPDK's rules, and which are served.
//!
//! The runtime directory is `$RUNTIME_DIRECTORY` when set; otherwise
//! `/var/run` for root, else `$XDG_RUNTIME_DIR`, else `/tmp` (DPDK's EAL
//! and its `dpdk-telemetry.py` decide by the real user id). An instance
//! with file prefix `NAME` serves
//! `<runtime dir>/dpdk/NAME/dpdk_telemetry.v2`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::TelemetryError;
use crate::client::Client;

/// The socket's file name in its prefix's directory.
pub const SOCKET_NAME: &str = "dpdk_telemetry.v2";
/// The file prefix when none is given.
pub const DEFAULT_FILE_PREFIX: &str = "sluice";
/// How long a probe of a socket waits for its greeting.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The runtime directory of this process, by DPDK's rules.
pub fn runtime_dir() -> PathBuf {
    // SAFETY: getuid takes no pointers and cannot fail.
    let uid = unsafe { libc::getuid() };
    runtime_dir_for(
        std::env::var_os("RUNTIME_DIRECTORY"),
        uid,
        std::env::var_os("XDG_RUNTIME_DIR"),
    )
}

/// The runtime directory given the environment's `RUNTIME_DIRECTORY`,
/// the user id and `XDG_RUNTIME_DIR` (empty values count as unset).
pub fn runtime_dir_for(
    runtime_directory: Option<OsString>,
    uid: u32,
    xdg_runtime_dir: Option<OsString>,
) -> PathBuf {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(runtime_directory) {
        return dir;
    }
    if uid == 0 {
        return PathBuf::from("/var/run");
    }
    set(xdg_runtime_dir).unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// The socket of the instance with `file_prefix`, in this process's
/// runtime directory.
pub fn socket_path(file_prefix: &str) -> PathBuf {
    socket_path_in(&runtime_dir(), file_prefix)
}

/// The socket of the instance with `file_prefix` under `runtime_dir`.
pub fn socket_path_in(runtime_dir: &Path, file_prefix: &str) -> PathBuf {
    runtime_dir.join("dpdk").join(file_prefix).join(SOCKET_NAME)
}

/// Checks that `file_prefix` names one directory.
pub fn check_file_prefix(file_prefix: &str) -> Result<(), TelemetryError> {
    if file_prefix.is_empty()
        || file_prefix == "."
        || file_prefix == ".."
        || file_prefix.contains(['/', '\0'])
    {
        return Err(TelemetryError::BadFilePrefix(file_prefix.to_string()));
    }
    Ok(())
}

/// A running instance found by [`instances`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Its file prefix.
    pub file_prefix: String,
    /// Its socket.
    pub path: PathBuf,
    /// Its process id, from its greeting (`None` when it accepted the
    /// connection but sent no greeting, as a server at its client limit
    /// does).
    pub pid: Option<u32>,
}

/// The instances serving a telemetry socket in this process's runtime
/// directory, by file prefix.
pub fn instances() -> Vec<Instance> {
    instances_in(&runtime_dir())
}

/// The instances serving a telemetry socket under `runtime_dir`, by file
/// prefix. A socket file nobody listens on (left by a process that died)
/// is not one.
pub fn instances_in(runtime_dir: &Path) -> Vec<Instance> {
    let Ok(entries) = std::fs::read_dir(runtime_dir.join("dpdk")) else {
        return Vec::new();
    };
    let mut found: Vec<Instance> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let file_prefix = entry.file_name().into_string().ok()?;
            let path = entry.path().join(SOCKET_NAME);
            match probe(&path) {
                Probe::Live { pid } => Some(Instance {
                    file_prefix,
                    path,
                    pid,
                }),
                Probe::Stale | Probe::Absent => None,
            }
        })
        .collect();
    found.sort_by(|a, b| a.file_prefix.cmp(&b.file_prefix));
    found
}

/// What is at a socket path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// A process accepts connections there.
    Live {
        /// Its pid, from its greeting.
        pid: Option<u32>,
    },
    /// A socket file nobody listens on.
    Stale,
    /// No socket file.
    Absent,
}

/// Tells a live socket from a stale one by connecting to it.
pub(crate) fn probe(path: &Path) -> Probe {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {}
        _ => return Probe::Absent,
    }
    match Client::connect_path_with_timeout(path, PROBE_TIMEOUT) {
        Ok(client) => Probe::Live { pid: client.pid() },
        // Connected, but no greeting came: someone listens.
        Err(TelemetryError::Closed | TelemetryError::Protocol(_)) => Probe::Live { pid: None },
        Err(TelemetryError::Io { source, .. })
            if source.raw_os_error() == Some(libc::ECONNREFUSED) =>
        {
            Probe::Stale
        }
        Err(TelemetryError::Io { source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Probe::Live { pid: None }
        }
        Err(_) => Probe::Stale,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_dir_follows_dpdk() {
        let s = |v: &str| Some(OsString::from(v));
        assert_eq!(
            runtime_dir_for(s("/run/x"), 0, s("/run/user/1")),
            Path::new("/run/x")
        );
        assert_eq!(
            runtime_dir_for(None, 0, s("/run/user/1")),
            Path::new("/var/run")
        );
        assert_eq!(runtime_dir_for(s(""), 0, None), Path::new("/var/run"));
        assert_eq!(
            runtime_dir_for(None, 1000, s("/run/user/1000")),
            Path::new("/run/user/1000")
        );
        assert_eq!(runtime_dir_for(None, 1000, s("")), Path::new("/tmp"));
        assert_eq!(runtime_dir_for(None, 1000, None), Path::new("/tmp"));
        assert_eq!(
            socket_path_in(Path::new("/tmp"), "a"),
            Path::new("/tmp/dpdk/a/dpdk_telemetry.v2")
        );
    }

    #[test]
    fn file_prefixes_name_one_directory() {
        assert!(check_file_prefix("sluice").is_ok());
        assert!(check_file_prefix("a.b-c_1").is_ok());
        for bad in ["", ".", "..", "a/b", "/", "a\0"] {
            let e = check_file_prefix(bad).unwrap_err();
            assert!(e.to_string().contains("cannot name a directory"), "{e}");
        }
    }

    #[test]
    fn nothing_runs_in_an_empty_runtime_dir() {
        let dir = std::env::temp_dir().join(format!("sluice-tel-empty-{}", std::process::id()));
        assert!(instances_in(&dir).is_empty());
        assert_eq!(probe(&dir.join("none")), Probe::Absent);
    }
}
