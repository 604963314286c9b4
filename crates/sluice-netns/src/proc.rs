//! Child processes with a deadline: [`exec`] runs a command to its end (or
//! kills it at the timeout), [`spawn`] starts a long-running one as a
//! [`Proc`], which is killed and reaped when dropped.
//!
//! Output is captured by one reader thread per pipe, so a chatty child can
//! never block on a full pipe while we wait for it.

use std::fmt;
use std::io::Read;
use std::marker::PhantomData;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{Error, Netns, Result};

/// How long [`exec`] and [`Netns::exec`] wait by default: generous, for a
/// loaded two-core machine.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one `ip` command may take.
pub(crate) const IP_TIMEOUT: Duration = Duration::from_secs(30);

/// What a finished command left: its exit status and its output.
#[derive(Debug, Clone)]
pub struct Output {
    /// The exit status.
    pub status: ExitStatus,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
    /// The command line, for messages.
    pub command: String,
}

impl Output {
    /// Whether the command exited with status 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// `self` if the command succeeded, else an error with its output.
    pub fn check(self) -> Result<Output> {
        if self.success() {
            Ok(self)
        } else {
            Err(Error::new(format!("{self}")))
        }
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` exited with {}", self.command, self.status)?;
        if !self.stdout.is_empty() {
            write!(f, "\n--- stdout\n{}", self.stdout.trim_end())?;
        }
        if !self.stderr.is_empty() {
            write!(f, "\n--- stderr\n{}", self.stderr.trim_end())?;
        }
        Ok(())
    }
}

/// A running child process. Dropping it kills it (SIGKILL) and reaps it;
/// [`stop`](Proc::stop) asks it to end first (SIGINT) and returns what it
/// printed. A `Proc` started in a namespace borrows the [`Netns`], so it is
/// gone before the namespace is.
pub struct Proc<'ns> {
    child: Child,
    command: String,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    /// Set once the child has been reaped.
    status: Option<ExitStatus>,
    _ns: PhantomData<&'ns Netns>,
}

fn reader(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<Vec<u8>>> {
    let mut pipe = pipe?;
    Some(std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    }))
}

fn join(h: Option<JoinHandle<Vec<u8>>>) -> String {
    let bytes = h.and_then(|h| h.join().ok()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl<'ns> Proc<'ns> {
    pub(crate) fn start(argv: &[&str], prefix: &[&str]) -> Result<Proc<'ns>> {
        let full: Vec<&str> = prefix.iter().chain(argv).copied().collect();
        let command = full.join(" ");
        let Some((prog, args)) = full.split_first() else {
            return Err(Error::new("empty command"));
        };
        let mut command_builder = Command::new(prog);
        command_builder
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A test run started in the background by a shell without job
        // control inherits SIGINT and SIGQUIT ignored, and a shell started
        // with a signal ignored cannot trap it: the child starts with the
        // default dispositions, so `stop` (SIGINT) reaches it as it would
        // from a terminal.
        // SAFETY: the closure runs in the forked child before exec and calls
        // only signal(2), which is async-signal-safe; it touches no memory
        // of the parent.
        unsafe {
            command_builder.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGQUIT] {
                    if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = command_builder
            .spawn()
            .map_err(|e| Error::new(format!("`{command}` could not start: {e}")))?;
        let stdout = reader(child.stdout.take());
        let stderr = reader(child.stderr.take());
        Ok(Proc {
            child,
            command,
            stdout,
            stderr,
            status: None,
            _ns: PhantomData,
        })
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The command line.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Sends signal `sig` (`libc::SIGINT`, …). Does nothing once the child
    /// has been reaped.
    pub fn signal(&self, sig: i32) -> Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) takes plain integers; `pid` is our unreaped child,
        // so the id cannot have been reused by another process.
        let r = unsafe { libc::kill(pid, sig) };
        if r == 0 {
            Ok(())
        } else {
            Err(Error::new(format!(
                "signal {sig} to `{}`: {}",
                self.command,
                std::io::Error::last_os_error()
            )))
        }
    }

    /// Whether the child is still running (reaps it if it has ended).
    pub fn is_running(&mut self) -> bool {
        if self.status.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(s)) => {
                self.status = Some(s);
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Waits up to `timeout` for the child to end by itself.
    fn wait_for(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if !self.is_running() {
                return self.status;
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn kill_and_reap(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    fn output(&mut self, status: ExitStatus) -> Output {
        Output {
            status,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
            command: self.command.clone(),
        }
    }

    /// Waits up to `timeout` for the child to end and returns its output.
    /// At the timeout it is killed, and the error carries what it printed.
    pub fn wait(mut self, timeout: Duration) -> Result<Output> {
        match self.wait_for(timeout) {
            Some(status) => Ok(self.output(status)),
            None => {
                self.kill_and_reap();
                let status = self.status.expect("reaped");
                let out = self.output(status);
                Err(Error::new(format!(
                    "timed out after {timeout:?} and killed: {out}"
                )))
            }
        }
    }

    /// Sends SIGINT and waits up to `timeout` for the child to end; see
    /// [`stop_with`](Proc::stop_with).
    pub fn stop(self, timeout: Duration) -> Result<Output> {
        self.stop_with(libc::SIGINT, timeout)
    }

    /// Sends `sig` and waits up to `timeout` for the child to end, then
    /// returns its output (whatever its exit status: check
    /// [`Output::success`]). If it does not end in time it is killed and
    /// the error carries what it printed. A child that had already ended is
    /// not signalled.
    pub fn stop_with(mut self, sig: i32, timeout: Duration) -> Result<Output> {
        if self.is_running() {
            self.signal(sig)?;
        }
        self.wait(timeout)
    }
}

impl Drop for Proc<'_> {
    fn drop(&mut self) {
        self.kill_and_reap();
        // The pipes close with the child; the readers end.
        let _ = join(self.stdout.take());
        let _ = join(self.stderr.take());
    }
}

impl fmt::Debug for Proc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proc")
            .field("pid", &self.child.id())
            .field("command", &self.command)
            .finish()
    }
}

/// Starts `argv` in the test's own (root) namespace.
pub fn spawn(argv: &[&str]) -> Result<Proc<'static>> {
    Proc::start(argv, &[])
}

/// Runs `argv` in the test's own (root) namespace to its end, or kills it
/// after `timeout`; see [`Proc::wait`].
pub fn exec(argv: &[&str], timeout: Duration) -> Result<Output> {
    spawn(argv)?.wait(timeout)
}
