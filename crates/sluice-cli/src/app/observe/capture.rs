//! Live capture on a running command: the taps its lcores call and the
//! capture thread `sluice capture` talks to, made in one place.
//!
//! The taps are made for every port and queue; the capture server listens
//! in the instance's telemetry directory
//! (`<runtime dir>/dpdk/<file prefix>/sluice_capture`) unless telemetry is
//! off. With no capture running an lcore pays one Relaxed load and one
//! predictable branch per burst and tap.

use std::path::PathBuf;
use std::sync::Arc;

use sluice::port::Port;
use sluice_telemetry::capture::{CaptureServer, CaptureTaps, SOCKET_NAME};

use super::drops::DropSources;
use crate::app::options::ObserveOptions;

/// A command's capture taps and, while it runs, their server.
#[derive(Debug)]
pub struct Capture {
    /// The taps of every port and queue, for the lcores.
    pub taps: Arc<CaptureTaps>,
    /// Dropping it ends a capture under way and removes the socket.
    _server: Option<CaptureServer>,
}

/// The directory of the instance with `file_prefix`'s sockets.
pub fn instance_dir(file_prefix: &str) -> PathBuf {
    let telemetry = sluice_telemetry::socket_path(file_prefix);
    telemetry.parent().map(PathBuf::from).unwrap_or_else(|| {
        sluice_telemetry::runtime_dir()
            .join("dpdk")
            .join(file_prefix)
    })
}

/// The capture socket of the instance with `file_prefix`.
pub fn socket_path(file_prefix: &str) -> PathBuf {
    instance_dir(file_prefix).join(SOCKET_NAME)
}

/// Taps for `ports`, served as `observe` says; the copies they drop when a
/// capture falls behind show in `drops` as `capture_overflow` per port.
pub fn start(
    ports: &[Port],
    observe: &ObserveOptions,
    drops: &DropSources,
) -> Result<Capture, String> {
    let taps = CaptureTaps::for_ports(ports);
    drops.add_capture_overflow(&taps);
    let server = if observe.no_telemetry {
        None
    } else {
        let dir = instance_dir(&observe.file_prefix);
        Some(CaptureServer::serve(&dir, Arc::clone(&taps))?)
    };
    Ok(Capture {
        taps,
        _server: server,
    })
}
