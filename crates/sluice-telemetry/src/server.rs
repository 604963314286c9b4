//! The telemetry server: DPDK's telemetry v2 protocol on a Unix
//! `SOCK_SEQPACKET` socket (see the [`protocol`](mod@crate::protocol) module).
//!
//! One thread serves every client from one `poll` loop over non-blocking
//! sockets: a client that sends nothing, sends garbage or never reads its
//! replies holds up no one. A client whose reply does not fit its socket's
//! queue (it stopped reading) is disconnected; at most [`MAX_CLIENTS`] are
//! connected at once, later ones are closed on arrival. Handlers run on the
//! server thread: they read counters and must take no lock a forwarding
//! lcore needs. A handler that panics answers with an error reply.

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::Value;

pub use crate::protocol::Reply;
use crate::protocol::{self, MAX_CMD_LEN, MAX_INPUT_LEN};
use crate::registry::Registry;
use crate::runtime::{self, Probe};
use crate::{TelemetryError, sys};

/// Most clients connected at once (DPDK allows 10; a few more leave room
/// for probes such as [`instances`](crate::runtime::instances)).
pub const MAX_CLIENTS: usize = 16;
/// Most connections accepted per wake-up, so a flood of connections does
/// not starve the connected clients.
const ACCEPTS_PER_WAKE: usize = 64;

type Handler = Arc<dyn Fn(&str) -> Reply + Send + Sync>;

/// What a command does.
#[derive(Clone)]
enum Action {
    /// `/`: the commands' names.
    List,
    /// `/info`: the greeting's fields.
    Info,
    /// `/help,CMD`: a command's help text.
    Help,
    /// A registered handler, given the parameters.
    Run(Handler),
}

#[derive(Clone)]
struct Entry {
    help: String,
    action: Action,
}

/// The commands a server answers, by name. `/`, `/info` and `/help` are
/// built in.
#[derive(Clone)]
pub struct Commands {
    entries: BTreeMap<String, Entry>,
    version: String,
}

impl fmt::Debug for Commands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Commands")
            .field("names", &self.names())
            .field("version", &self.version)
            .finish()
    }
}

impl Default for Commands {
    fn default() -> Commands {
        Commands::new()
    }
}

impl Commands {
    /// The built-in commands only: `/` lists the commands, `/info` gives
    /// the version, pid and `max_output_len`, `/help,CMD` a command's help.
    pub fn new() -> Commands {
        let mut entries = BTreeMap::new();
        let mut builtin = |name: &str, help: &str, action: Action| {
            entries.insert(
                name.to_string(),
                Entry {
                    help: help.to_string(),
                    action,
                },
            );
        };
        builtin("/", "The commands' names. No parameters", Action::List);
        builtin(
            "/info",
            "The server's version, pid and max_output_len. No parameters",
            Action::Info,
        );
        builtin(
            "/help",
            "What a command answers. Parameter: the command, /help,/ethdev/stats",
            Action::Help,
        );
        Commands {
            entries,
            version: format!("Sluice {}", env!("CARGO_PKG_VERSION")),
        }
    }

    /// The built-in commands plus `/ethdev/*` and `/mempool/*` answered
    /// from `registry`.
    pub fn with_registry(registry: Arc<Registry>) -> Commands {
        let mut commands = Commands::new();
        crate::ethdev::register(&mut commands, &registry);
        crate::mempool::register(&mut commands, &registry);
        commands
    }

    /// Answers `name` with `handler`, given the parameters after the first
    /// comma (`""` when there are none). A name registered again gets the
    /// new handler.
    ///
    /// # Panics
    ///
    /// If `name` is not a command name (it starts with `/`, is shorter than
    /// [`MAX_CMD_LEN`] bytes and holds no comma, space or control
    /// character) or is one of the built-in `/`, `/info`, `/help`: a
    /// program registering such a name is wrong, whatever its input.
    pub fn register(
        &mut self,
        name: &str,
        help: &str,
        handler: impl Fn(&str) -> Reply + Send + Sync + 'static,
    ) {
        assert!(
            name.starts_with('/')
                && name.len() < MAX_CMD_LEN
                && !name.contains(|c: char| c == ',' || c.is_whitespace() || c.is_control()),
            "{name:?} is not a telemetry command name"
        );
        assert!(
            !matches!(name, "/" | "/info" | "/help"),
            "{name} is built in"
        );
        self.entries.insert(
            name.to_string(),
            Entry {
                help: help.to_string(),
                action: Action::Run(Arc::new(handler)),
            },
        );
    }

    /// The commands' names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.entries.keys().map(String::as_str).collect()
    }

    /// The version the greeting and `/info` report.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Runs `command` with `params`. A panicking handler gives an error.
    pub fn call(&self, command: &str, params: &str) -> Reply {
        let Some(entry) = self.entries.get(command) else {
            return Err(format!("unknown command {command} (send / to list them)"));
        };
        match &entry.action {
            Action::List => Ok(Value::from(self.names())),
            Action::Info => Ok(protocol::greeting(&self.version, std::process::id())),
            Action::Help => {
                if params.is_empty() {
                    return Err("give the command to explain: /help,/command".to_string());
                }
                let entry = self
                    .entries
                    .get(params)
                    .ok_or_else(|| format!("unknown command {params}"))?;
                Ok(serde_json::json!({ params: entry.help }))
            }
            Action::Run(handler) => catch_unwind(AssertUnwindSafe(|| handler(params)))
                .unwrap_or_else(|_| Err(format!("{command} failed (its handler panicked)"))),
        }
    }

    /// The reply to one received message, encoded.
    pub fn answer(&self, message: &[u8]) -> Vec<u8> {
        match protocol::parse(message) {
            Ok(request) => {
                protocol::encode_reply(request.command, &self.call(request.command, request.params))
            }
            Err(bad) => protocol::encode_error(&bad.key, &bad.message),
        }
    }
}

/// A running telemetry server. Dropping it stops its thread and removes
/// its socket (and the prefix's directory when that is left empty).
#[derive(Debug)]
pub struct Telemetry {
    path: PathBuf,
    /// The socket file's device and inode, to remove only our own file.
    identity: Option<(u64, u64)>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl Telemetry {
    /// Serves `commands` at [`socket_path(file_prefix)`](runtime::socket_path).
    ///
    /// Fails when another live process serves that prefix (naming it); a
    /// socket file left by a process that died is replaced.
    pub fn serve(file_prefix: &str, commands: Commands) -> Result<Telemetry, TelemetryError> {
        runtime::check_file_prefix(file_prefix)?;
        Telemetry::serve_at(&runtime::socket_path(file_prefix), commands)
    }

    /// Serves `commands` at `path`, creating its directories (mode 0700).
    /// The rules of [`serve`](Self::serve) apply.
    pub fn serve_at(path: &Path, commands: Commands) -> Result<Telemetry, TelemetryError> {
        let file_prefix = || {
            path.parent()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| TelemetryError::io(format!("creating {}", dir.display()), e))?;
        }
        match runtime::probe(path) {
            Probe::Live { pid } => {
                return Err(TelemetryError::InUse {
                    file_prefix: file_prefix(),
                    path: path.to_path_buf(),
                    pid,
                });
            }
            Probe::Stale => std::fs::remove_file(path).map_err(|e| {
                TelemetryError::io(format!("removing the stale socket {}", path.display()), e)
            })?,
            Probe::Absent => {}
        }
        let listener = sys::seqpacket_socket(true)
            .map_err(|e| TelemetryError::io("creating the telemetry socket", e))?;
        sys::bind_listen(&listener, path)?;
        let identity = std::fs::symlink_metadata(path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        let remove_socket = || {
            let _ = std::fs::remove_file(path);
        };
        let wake = match sys::eventfd() {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                remove_socket();
                return Err(TelemetryError::io(
                    "creating the telemetry wake-up eventfd",
                    e,
                ));
            }
        };
        let greeting =
            serde_json::to_vec(&protocol::greeting(commands.version(), std::process::id()))
                .unwrap_or_default();
        let thread_wake = Arc::clone(&wake);
        let thread = std::thread::Builder::new()
            .name("telemetry".to_string())
            .spawn(move || serve_clients(&listener, &thread_wake, &commands, &greeting));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                remove_socket();
                return Err(TelemetryError::io("starting the telemetry thread", e));
            }
        };
        Ok(Telemetry {
            path: path.to_path_buf(),
            identity,
            wake,
            thread: Some(thread),
        })
    }

    /// The socket served.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        sys::signal(self.wake.as_fd());
        if let Some(thread) = self.thread.take() {
            // The loop's only exits are the wake-up and a failing poll; a
            // panic in it (none is expected) is not re-raised in a drop.
            let _ = thread.join();
        }
        let ours = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if ours.is_some() && ours == self.identity {
            let _ = std::fs::remove_file(&self.path);
        }
        if let Some(dir) = self.path.parent() {
            // Fails, as it should, when something else is left in it.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The server loop: accepts clients, answers each message, until `wake`
/// is signalled.
fn serve_clients(listener: &OwnedFd, wake: &OwnedFd, commands: &Commands, greeting: &[u8]) {
    let mut clients: Vec<OwnedFd> = Vec::new();
    let mut buf = vec![0u8; MAX_INPUT_LEN + 1];
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(MAX_CLIENTS + 2);
    let pollfd = |fd: &OwnedFd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        fds.clear();
        fds.push(pollfd(wake));
        fds.push(pollfd(listener));
        fds.extend(clients.iter().map(pollfd));
        if sys::poll(&mut fds, None).is_err() {
            // Only a bad argument or a lack of memory fails poll; the
            // listener closes with this thread and clients see it.
            return;
        }
        if fds[0].revents != 0 {
            return;
        }
        for i in (0..clients.len()).rev() {
            let revents = fds[i + 2].revents;
            if revents != 0 && !serve_one(&clients[i], revents, &mut buf, commands) {
                clients.swap_remove(i);
            }
        }
        if fds[1].revents & libc::POLLIN != 0 {
            for _ in 0..ACCEPTS_PER_WAKE {
                match sys::accept(listener.as_fd()) {
                    Ok(client) => {
                        if clients.len() < MAX_CLIENTS
                            && sys::send(client.as_fd(), greeting, true).is_ok()
                        {
                            clients.push(client);
                        }
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {}
                    Err(_) => break,
                }
            }
        }
    }
}

/// Answers one message of `client`, whose poll reported `revents`.
/// Whether to keep the client.
fn serve_one(
    client: &OwnedFd,
    revents: libc::c_short,
    buf: &mut [u8],
    commands: &Commands,
) -> bool {
    if revents & libc::POLLIN == 0 {
        // Hang-up or error with nothing to read.
        return false;
    }
    let len = match sys::recv(client.as_fd(), buf) {
        Ok(0) => return false,
        Ok(len) => len,
        Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
    };
    let reply = if len > MAX_INPUT_LEN {
        let bad = protocol::too_long(&buf[..MAX_INPUT_LEN.min(buf.len())], len);
        protocol::encode_error(&bad.key, &bad.message)
    } else {
        commands.answer(&buf[..len])
    };
    sys::send(client.as_fd(), &reply, true).is_ok()
}
