//! `sluice stats`: a live view of a running instance, read from its
//! telemetry socket.
//!
//! Every `--interval` seconds it reads `/sluice/snapshot` (the instance's
//! totals: `app::observe::snapshot`) and shows them with the rates since
//! the last read ([`rates`]): on a terminal a full-screen view ([`view`]),
//! otherwise a block of plain lines per refresh ([`plain`]), or with
//! `--json` one object per refresh (the snapshot plus its rates). The first
//! refresh comes one interval after the start, so it has rates too.
//!
//! The instance going away ends `stats` with an error naming it.

pub mod plain;
pub mod rates;
pub mod view;

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use sluice_telemetry::{Client, instances};

use crate::app::observe::snapshot::Snapshot;
use crate::app::options::{DEFAULT_FILE_PREFIX, parse_file_prefix, parse_seconds};
use crate::app::output::{emit, emit_json};
use rates::Rates;

/// Arguments of `sluice stats`.
#[derive(Args, Debug, Clone)]
pub struct StatsArgs {
    /// The instance to watch, by its `--file-prefix`.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_FILE_PREFIX,
          value_parser = parse_file_prefix)]
    pub file_prefix: String,
    /// One JSON object per refresh (the snapshot and its rates).
    #[arg(long)]
    pub json: bool,
    /// Stop after this many refreshes.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Seconds between refreshes.
    #[arg(long, value_name = "S", default_value_t = 1.0, value_parser = parse_seconds)]
    pub interval: f64,
    /// List the running instances (file prefix, pid, command) and exit.
    #[arg(long)]
    pub list: bool,
}

/// One refresh as `--json` prints it.
#[derive(Serialize)]
struct Refresh<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    snapshot: &'a Snapshot,
    rates: &'a Rates,
}

/// Runs `sluice stats`.
pub fn run(args: &StatsArgs) -> Result<(), String> {
    if args.list {
        return list(args.json);
    }
    let mut source = Source::connect(&args.file_prefix)?;
    let interval = Duration::from_secs_f64(args.interval);
    if !args.json && std::io::stdout().is_terminal() {
        return view::run(&mut source, interval, args.count);
    }
    let mut before = source.read()?;
    let mut shown = 0;
    while args.count.is_none_or(|n| shown < n) {
        std::thread::sleep(interval);
        let now = source.read()?;
        let rates = Rates::between(&before, &now);
        if args.json {
            let refresh = Refresh {
                kind: "stats",
                snapshot: &now,
                rates: &rates,
            };
            emit_json(&refresh, "sluice stats", "a refresh");
        } else {
            emit(&plain::block(&now, &rates));
        }
        before = now;
        shown += 1;
    }
    Ok(())
}

/// The instance watched: its telemetry connection.
pub struct Source {
    file_prefix: String,
    client: Client,
}

impl Source {
    /// Connects to the instance serving `file_prefix`.
    pub fn connect(file_prefix: &str) -> Result<Source, String> {
        let client = Client::connect(file_prefix).map_err(|e| {
            format!(
                "no instance to watch under file prefix '{file_prefix}' ({e}); `sluice stats \
                 --list` shows the running ones"
            )
        })?;
        Ok(Source {
            file_prefix: file_prefix.to_owned(),
            client,
        })
    }

    /// The instance's snapshot now.
    pub fn read(&mut self) -> Result<Snapshot, String> {
        let value = self.client.command("/sluice/snapshot").map_err(|e| {
            format!(
                "instance '{}' went away or stopped answering: {e}",
                self.file_prefix
            )
        })?;
        serde_json::from_value(value).map_err(|e| {
            format!(
                "instance '{}' answered /sluice/snapshot with something else: {e}",
                self.file_prefix
            )
        })
    }
}

/// One running instance as `--list` shows it.
#[derive(Serialize)]
struct Listed {
    file_prefix: String,
    pid: Option<u32>,
    command: Option<String>,
    path: String,
}

/// `--list`: the instances serving a telemetry socket.
fn list(json: bool) -> Result<(), String> {
    let found: Vec<Listed> = instances()
        .into_iter()
        .map(|i| {
            // Its command, when it is a Sluice instance that says.
            let command = Client::connect_path(&i.path)
                .ok()
                .and_then(|mut c| c.command("/sluice/snapshot").ok())
                .and_then(|v| v.get("command").and_then(|c| c.as_str()).map(str::to_owned));
            Listed {
                file_prefix: i.file_prefix,
                pid: i.pid,
                command,
                path: i.path.display().to_string(),
            }
        })
        .collect();
    if json {
        for l in &found {
            emit_json(l, "sluice stats", "an instance");
        }
        return Ok(());
    }
    if found.is_empty() {
        emit("no running instance serves a telemetry socket");
        return Ok(());
    }
    emit(&format!(
        "{:<20} {:>8}  {:<8} SOCKET",
        "FILE PREFIX", "PID", "COMMAND"
    ));
    for l in &found {
        emit(&format!(
            "{:<20} {:>8}  {:<8} {}",
            l.file_prefix,
            l.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            l.command.as_deref().unwrap_or("-"),
            l.path
        ));
    }
    Ok(())
}
