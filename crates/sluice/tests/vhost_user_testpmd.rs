//! DPDK's `virtio_user` as the frontend against this crate's [`Backend`]:
//! `dpdk-testpmd` connects to a socket the test listens on, sets up one
//! queue pair, starts forwarding, and — its standard input being empty —
//! stops and exits at once. The backend must see protocol features
//! negotiated, both rings started, enabled and stopped, and the session
//! end cleanly.
//!
//! Needs `dpdk-testpmd` (Debian package dpdk) and DPDK's virtio driver:
//! skipped without them, except under CI, where their absence is a failure.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice::vhost_user::{
    Backend, BackendConfig, F_PROTOCOL_FEATURES, ReadyVring, Request, VhostUserError, VringHandler,
    protocol_features,
};

// Each test file is its own crate and uses only part of the support.
#[allow(dead_code)]
mod testpmd_support;

use testpmd_support::{TempDir, remove_eal_runtime, skip};

const VIRTIO_F_VERSION_1: u64 = 1 << 32;

#[derive(Default)]
struct Rings {
    started: Vec<(usize, u16)>,
    stopped: Vec<usize>,
    enabled: Vec<(usize, bool)>,
}

impl VringHandler for Rings {
    fn vring_started(&mut self, ring: &ReadyVring<'_>) {
        self.started.push((ring.index, ring.size));
    }
    fn vring_stopped(&mut self, index: usize) -> Option<u16> {
        self.stopped.push(index);
        None
    }
    fn vring_updated(&mut self, ring: &ReadyVring<'_>) {
        self.enabled.push((ring.index, ring.enabled));
    }
}

/// Waits up to `timeout` for a connection on `listener`.
fn poll_readable(fd: i32, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid `pollfd` for the call's duration.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as libc::c_int) };
    n == 1
}

#[test]
fn dpdk_virtio_user_sets_up_and_tears_down_a_queue_pair() {
    if skip("librte_net_virtio.so") {
        return;
    }
    let dir = TempDir::new("vhost-user-backend");
    let path = dir.0.join("vhost.sock");
    let listener = UnixListener::bind(&path).unwrap();

    let prefix = format!("sluice-vhost-{}", std::process::id());
    let mut testpmd = Command::new("dpdk-testpmd")
        .args([
            "--no-pci",
            "--no-huge",
            "-m",
            "128",
            "--no-shconf",
            // The main and the forwarding lcore, both on CPU 0: runs on
            // any machine.
            "--lcores=0@0,1@0",
        ])
        .arg("--no-telemetry")
        .arg(format!("--file-prefix={prefix}"))
        .arg(format!(
            "--vdev=net_virtio_user0,path={},queues=1",
            path.display()
        ))
        .args(["--", "--total-num-mbufs=2048", "--nb-cores=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let connected = poll_readable(listener.as_raw_fd(), Duration::from_secs(60));
    let mut backend = Backend::new(BackendConfig {
        features: VIRTIO_F_VERSION_1,
        protocol_features: protocol_features::MQ | protocol_features::REPLY_ACK,
        queue_pairs: 1,
    });
    let mut rings = Rings::default();
    let mut requests = Vec::new();
    let mut result = Ok(());
    if connected {
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        // Bounded: a setup and teardown is a few dozen requests.
        result = Err(VhostUserError::Timeout);
        for _ in 0..1000 {
            match backend.serve_one(&stream, &mut rings) {
                Ok(request) => requests.push(request),
                Err(VhostUserError::Closed) => {
                    result = Ok(());
                    break;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
    }
    if !connected || result.is_err() {
        let _ = testpmd.kill();
    }
    let output = testpmd.wait_with_output().unwrap();
    drop(dir);
    remove_eal_runtime(&prefix);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(connected, "testpmd never connected:\n{log}");
    if let Err(e) = result {
        panic!("{e}; requests so far: {requests:?}\n{log}");
    }
    assert!(requests.contains(&Request::SetMemTable), "{requests:?}");
    assert_eq!(
        rings.started.iter().map(|r| r.0).collect::<Vec<_>>(),
        [0, 1],
        "{requests:?}"
    );
    assert!(rings.started.iter().all(|r| r.1.is_power_of_two()));
    assert_eq!(rings.stopped, [0, 1], "{requests:?}");
    assert!(backend.vring(0).is_none() && backend.vring(1).is_none());
    // Protocol features were negotiated, REPLY_ACK among them, and the
    // rings enabled while started.
    assert_eq!(
        backend.protocol_features(),
        protocol_features::MQ | protocol_features::REPLY_ACK
    );
    assert_ne!(backend.features() & F_PROTOCOL_FEATURES, 0);
    assert!(
        rings.enabled.contains(&(0, true)) && rings.enabled.contains(&(1, true)),
        "{:?}",
        rings.enabled
    );
}
