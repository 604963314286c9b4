//! Test support: a private runtime directory per test and raw sockets.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A runtime directory of one test, removed with everything in it on drop.
pub struct RuntimeDir {
    path: PathBuf,
}

impl RuntimeDir {
    /// A new, empty directory named after `test`.
    pub fn new(test: &str) -> RuntimeDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("sluice-tel-{}-{n}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        RuntimeDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The socket of `prefix` in it.
    pub fn socket(&self, prefix: &str) -> PathBuf {
        sluice_telemetry::runtime::socket_path_in(&self.path, prefix)
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A raw `SOCK_SEQPACKET` connection, to send what `Client` would not.
pub struct Raw {
    fd: std::os::fd::OwnedFd,
}

impl Raw {
    /// Connects to `path` and reads the greeting.
    pub fn connect(path: &Path) -> (Raw, serde_json::Value) {
        use std::os::fd::FromRawFd;
        // SAFETY: socket takes no pointers.
        let fd =
            unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0);
        // SAFETY: fd was just returned open and is owned by nothing else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let raw = Raw { fd };
        raw.set_timeout();
        // SAFETY: sockaddr_un is plain old data; zeroes are valid.
        let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        address.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
        for (slot, &b) in address.sun_path.iter_mut().zip(bytes) {
            *slot = b as libc::c_char;
        }
        // SAFETY: address is a valid sockaddr_un for the call.
        let rc = unsafe {
            libc::connect(
                std::os::fd::AsRawFd::as_raw_fd(&raw.fd),
                (&raw const address).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        let greeting = raw.recv_json();
        (raw, greeting)
    }

    fn set_timeout(&self) {
        let tv = libc::timeval {
            tv_sec: 10,
            tv_usec: 0,
        };
        for option in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
            // SAFETY: tv is a valid timeval for the call.
            let rc = unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                    libc::SOL_SOCKET,
                    option,
                    (&raw const tv).cast(),
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0);
        }
    }

    /// Sends one message.
    pub fn send(&self, message: &[u8]) -> std::io::Result<()> {
        // SAFETY: message is valid for reads of its length.
        let n = unsafe {
            libc::send(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                message.as_ptr().cast(),
                message.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Receives one message (empty when the server closed).
    pub fn recv(&self) -> Vec<u8> {
        let mut buf = vec![0u8; 64 * 1024];
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe {
            libc::recv(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
            )
        };
        assert!(n >= 0, "recv: {}", std::io::Error::last_os_error());
        buf.truncate(n as usize);
        buf
    }

    /// Receives one message as JSON.
    pub fn recv_json(&self) -> serde_json::Value {
        let bytes = self.recv();
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)))
    }
}

/// Whether a test needing `tool` runs: true when it is installed; when it
/// is not, a failure under CI and a "skipped" line otherwise.
pub fn have_tool(tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()));
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{tool} is not installed (CI needs it)"
        );
        eprintln!("skipped: no {tool}");
    }
    found
}
