//! DPDK's own measuring loops, built and run by `sluice bench` beside
//! Sluice's measurement of the same case, so that a "DPDK here" figure
//! comes from the same machine and the same stretch of time.
//!
//! A loop's C source is part of the `sluice` binary (`include_str!`) and is
//! compiled when the bench runs, once per run, into a temporary directory:
//! with `cc` and the flags `pkg-config` gives for `libdpdk` (Debian's
//! `dpdk-dev`). Sluice's own build compiles no C; without `cc` or `libdpdk`
//! the bench says so and leaves the DPDK column empty.
//!
//! A built program runs as a [`Peer`]: a child process that takes commands
//! on its standard input and answers one line each on its standard output.

pub mod mempool_perf;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// Compiler flags besides `pkg-config`'s: optimised as DPDK's own release
/// build (meson's `release` build type is `-O3`).
const CFLAGS: [&str; 3] = ["-O3", "-Wall", "-Wextra"];
/// Output lines kept for error messages.
const KEPT_LINES: usize = 30;
/// Longest a peer may take to end after its input closes.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why DPDK programs cannot be built here, if they cannot: no C compiler,
/// no `pkg-config`, or no `libdpdk` development files.
pub fn toolchain_missing() -> Option<String> {
    let runs = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !runs("cc", &["--version"]) {
        return Some("no C compiler (cc)".to_owned());
    }
    if !runs("pkg-config", &["--version"]) {
        return Some("no pkg-config".to_owned());
    }
    if !runs("pkg-config", &["--exists", "libdpdk"]) {
        return Some("no libdpdk for pkg-config (Debian's dpdk-dev)".to_owned());
    }
    None
}

/// The installed DPDK's version (`pkg-config --modversion libdpdk`), if
/// known.
pub fn version() -> Option<String> {
    let out = Command::new("pkg-config")
        .args(["--modversion", "libdpdk"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}

/// A program built from C source in a temporary directory, removed on drop.
pub struct Program {
    dir: PathBuf,
    path: PathBuf,
}

impl Program {
    /// Compiles `source` into a program called `name`, against `libdpdk`.
    pub fn build(name: &str, source: &str) -> Result<Program, String> {
        if let Some(why) = toolchain_missing() {
            return Err(why);
        }
        let flags = Command::new("pkg-config")
            .args(["--cflags", "--libs", "libdpdk"])
            .output()
            .map_err(|e| format!("cannot run pkg-config: {e}"))?;
        if !flags.status.success() {
            return Err(format!(
                "pkg-config --cflags --libs libdpdk failed: {}",
                String::from_utf8_lossy(&flags.stderr).trim()
            ));
        }
        let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
        let dir = std::env::temp_dir().join(format!(
            "sluice-bench-{}-{}",
            std::process::id(),
            super::unique_name(name)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // From here the directory goes with `program` on every return.
        let program = Program {
            path: dir.join(name),
            dir,
        };
        let source_path = program.dir.join(format!("{name}.c"));
        std::fs::write(&source_path, source)
            .map_err(|e| format!("cannot write {}: {e}", source_path.display()))?;
        let out = Command::new("cc")
            .args(CFLAGS)
            .arg("-o")
            .arg(&program.path)
            .arg(&source_path)
            .args(flags.split_whitespace())
            .output()
            .map_err(|e| format!("cannot run cc: {e}"))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            let first: Vec<&str> = text.lines().take(10).collect();
            return Err(format!(
                "cc could not build {name}.c against libdpdk:\n{}",
                first.join("\n")
            ));
        }
        Ok(program)
    }

    /// Where the program is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running program driven line by line: commands on its standard input,
/// its standard output and error read as lines (the EAL logs to either).
/// Dropping it closes its input, waits a bounded time for it to end, then
/// kills it.
pub struct Peer {
    /// Its name in messages.
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// The last lines read, for error messages.
    recent: VecDeque<String>,
    /// Its EAL file prefix (the EAL's runtime directory is removed at the
    /// end).
    prefix: String,
}

impl Peer {
    /// Starts `command`, named `name` in messages, whose EAL uses
    /// `--file-prefix=prefix`.
    pub fn spawn(name: &str, mut command: Command, prefix: String) -> Result<Peer, String> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let (tx, lines) = mpsc::channel();
        let outputs = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ];
        for out in outputs.into_iter().flatten() {
            let tx = tx.clone();
            // Ends at the end of the output, when the child has ended.
            thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        Ok(Peer {
            name: name.to_owned(),
            child,
            stdin,
            lines,
            recent: VecDeque::new(),
            prefix,
        })
    }

    /// Writes one command line.
    pub fn send(&mut self, command: &str) -> Result<(), String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| format!("{}: input closed", self.name))?;
        stdin
            .write_all(format!("{command}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("{}: cannot write a command: {e}", self.name))
    }

    /// Reads lines until one starts with one of `answers` or with
    /// `error:`, within `timeout`; returns that line. An `error:` line
    /// is returned as an error with the lines before it.
    pub fn answer(
        &mut self,
        what: &str,
        answers: &[&str],
        timeout: Duration,
    ) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if self.recent.len() == KEPT_LINES {
                        self.recent.pop_front();
                    }
                    self.recent.push_back(line.clone());
                    if line.starts_with("error:") {
                        return Err(self.failure(&format!("answered {line:?}")));
                    }
                    if answers.iter().any(|a| line.starts_with(a)) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(self.failure(&format!("no {what} within {} s", timeout.as_secs())));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait_for_exit();
                    return Err(self.failure(&format!("ended ({status}) before {what}")));
                }
            }
        }
    }

    /// Closes the input and waits a bounded time for the program to end;
    /// an error unless it ends with success (killed if it does not end).
    pub fn close(&mut self) -> Result<(), String> {
        drop(self.stdin.take());
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(self.failure(&format!("ended with {status}")));
                }
                Ok(None) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(self.failure(&format!(
                        "did not end within {} s of its input closing",
                        EXIT_TIMEOUT.as_secs()
                    )));
                }
                Err(e) => return Err(format!("{}: cannot wait for it: {e}", self.name)),
            }
        }
    }

    /// Its exit status in words, after a bounded wait.
    fn wait_for_exit(&mut self) -> String {
        let deadline = Instant::now() + EXIT_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.to_string();
            }
            thread::sleep(Duration::from_millis(10));
        }
        "still running".to_owned()
    }

    /// An error message: `what` happened, with its last lines.
    fn failure(&self, what: &str) -> String {
        let recent: Vec<&str> = self.recent.iter().map(String::as_str).collect();
        format!(
            "{} {what}; its last lines:\n{}",
            self.name,
            recent.join("\n")
        )
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.close();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The EAL's runtime directory (made even without shared
        // configuration).
        for base in [Some("/var/run".into()), std::env::var_os("XDG_RUNTIME_DIR")]
            .into_iter()
            .flatten()
        {
            let _ = std::fs::remove_dir_all(Path::new(&base).join("dpdk").join(&self.prefix));
        }
    }
}
