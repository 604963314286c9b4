//! `sluice capture`: asks a running instance to mirror a port's packets and
//! writes them to a pcapng file, as DPDK's `dpdk-dumpcap` does.
//!
//! The instance copies the packets of the queues asked for into a bounded
//! buffer per queue and direction; when this command falls behind, the
//! instance drops copies (never packets) and counts them: the count is in
//! each interface's statistics block (`isb_ifdrop`) and in the last line
//! printed. SIGINT or SIGTERM ends the capture cleanly (the file is
//! complete).

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use sluice_telemetry::capture::client::Event;
use sluice_telemetry::capture::pcapng::{InterfaceStats, PcapngWriter};
use sluice_telemetry::capture::protocol::{CaptureEnd, Directions, MAX_BUFFER};
use sluice_telemetry::capture::{CaptureClient, CaptureRequest};

use crate::app::observe::capture::socket_path;
use crate::app::options::{DEFAULT_FILE_PREFIX, parse_file_prefix, parse_seconds};
use crate::app::output::emit;
use crate::app::signal::{catch_signals, interrupted};

/// Which packets of the queues to capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Direction {
    /// Received.
    Rx,
    /// Sent.
    Tx,
    /// Both.
    Both,
}

/// Arguments of `sluice capture`.
#[derive(Args, Debug, Clone)]
pub struct CaptureArgs {
    /// The instance to capture from (its `--file-prefix`).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_FILE_PREFIX,
          value_parser = parse_file_prefix)]
    pub file_prefix: String,
    /// The port (its position in the instance's port list).
    #[arg(long, short = 'p', value_name = "P")]
    pub port: u16,
    /// One queue of the port (default: every queue).
    #[arg(long, value_name = "Q")]
    pub queue: Option<u16>,
    /// Received packets, sent packets or both.
    #[arg(long, value_enum, default_value_t = Direction::Both)]
    pub direction: Direction,
    /// The pcapng file to write.
    #[arg(short = 'w', value_name = "FILE")]
    pub write: PathBuf,
    /// Stop after this many packets.
    #[arg(short = 'c', value_name = "COUNT",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Bytes kept of each packet (at most the port's largest frame).
    #[arg(short = 's', value_name = "SNAPLEN", default_value_t = 65535,
          value_parser = clap::value_parser!(u32).range(1..=262144))]
    pub snaplen: u32,
    /// Stop after this many seconds.
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub duration: Option<f64>,
    /// Packets each queue's buffer in the instance holds before copies are
    /// dropped.
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=MAX_BUFFER as i64))]
    pub buffer: u32,
}

impl CaptureArgs {
    /// The request sent to the instance.
    pub fn request(&self) -> CaptureRequest {
        CaptureRequest {
            port: self.port,
            queue: self.queue,
            direction: match self.direction {
                Direction::Rx => Directions::Rx,
                Direction::Tx => Directions::Tx,
                Direction::Both => Directions::Both,
            },
            snaplen: self.snaplen,
            count: self.count,
            duration: self.duration,
            buffer: Some(self.buffer),
        }
    }
}

/// How long the instance may take to answer the request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the signal flag is looked at while nothing arrives.
const POLL: Duration = Duration::from_millis(100);

/// Runs `sluice capture`.
pub fn run(args: &CaptureArgs) -> Result<(), String> {
    let path = socket_path(&args.file_prefix);
    let mut client = CaptureClient::connect(&path)?;
    let start = client
        .start(&args.request(), ANSWER_TIMEOUT)
        .map_err(|e| format!("instance '{}': {e}", args.file_prefix))?;
    let file = File::create(&args.write)
        .map_err(|e| format!("cannot create {}: {e}", args.write.display()))?;
    let io = |e: std::io::Error| format!("{}: {e}", args.write.display());
    let mut writer = PcapngWriter::new(BufWriter::new(file), "sluice capture").map_err(io)?;
    for i in &start.interfaces {
        writer.add_interface(&i.name, i.snaplen).map_err(io)?;
    }
    let names: Vec<_> = start.interfaces.iter().map(|i| i.name.as_str()).collect();
    eprintln!(
        "sluice capture: {} of instance '{}' to {} (SIGINT stops)",
        names.join(", "),
        args.file_prefix,
        args.write.display()
    );
    catch_signals();
    let mut received = vec![0u64; start.interfaces.len()];
    let mut stopping = false;
    let end: CaptureEnd = loop {
        if !stopping && interrupted() {
            client.stop();
            stopping = true;
        }
        match client.next(POLL)? {
            Some(Event::Packet(p)) => {
                let Some(n) = received.get_mut(p.interface as usize) else {
                    return Err(format!("packet of unknown interface {}", p.interface));
                };
                *n += 1;
                writer
                    .packet(u32::from(p.interface), p.ts_ns, p.orig_len, p.data)
                    .map_err(io)?;
            }
            Some(Event::End(end)) => break end,
            None => {}
        }
    };
    for (i, &n) in received.iter().enumerate() {
        let stats = InterfaceStats {
            start_ns: start.start_ns,
            end_ns: end.end_ns,
            received: n,
            dropped: end.drops.get(i).copied().unwrap_or(0),
        };
        writer.statistics(i as u32, stats).map_err(io)?;
    }
    writer.finish().map_err(io)?;
    let packets: u64 = received.iter().sum();
    let dropped: u64 = end.drops.iter().sum();
    let drops = match dropped {
        0 => "no copy dropped".to_owned(),
        n => format!("{n} copies dropped (the capture fell behind)"),
    };
    emit(&format!(
        "{packets} packets captured to {}, {drops}",
        args.write.display()
    ));
    Ok(())
}
