//! What the kernel-port tests share (`kernel_ports.rs`, `afxdp_cli.rs`):
//! stopping a Sluice process for its JSON summary, the first ping reply
//! across the forwarder, and a 50 MiB TCP transfer whose every byte is
//! checked on arrival.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use sluice_netns::{Netns, Output, Proc};

/// Bytes of the TCP transfer.
pub const TRANSFER: usize = 50 << 20;

/// How long Sluice gets to end after SIGINT, printing its summary.
pub const STOP: Duration = Duration::from_secs(60);

/// Stops Sluice (SIGINT) and returns its output and JSON summary.
pub fn stop(sluice: Proc<'static>) -> (Output, serde_json::Value) {
    let out = sluice.stop(STOP).expect("sluice ends on SIGINT");
    assert!(out.success(), "{out}");
    let last = out.stdout.lines().last().unwrap_or("").to_owned();
    let v: serde_json::Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["type"], "summary", "{out}");
    (out, v)
}

/// Panics with `msg` and what Sluice printed so far.
pub fn fail(sluice: Proc<'static>, msg: &str) -> ! {
    match sluice.stop(STOP) {
        Ok(out) => panic!("{msg}\n{out}"),
        Err(e) => panic!("{msg}\n{e}"),
    }
}

/// Pings `dst` from `ns` until one reply comes (the forwarder starting,
/// ARP), bounded.
pub fn first_reply(ns: &Netns, dst: &str) -> bool {
    sluice_netns::wait_until(Duration::from_secs(90), || {
        ns.exec_timeout(
            &["ping", "-c", "1", "-W", "2", dst],
            Duration::from_secs(20),
        )
        .is_ok_and(|o| o.success())
    })
}

/// The byte at offset `i` of the transfer: a period (251) prime to every
/// segment size, so a lost, repeated or misplaced segment shows.
pub fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// Sends [`TRANSFER`] bytes over TCP from `from` to `to_ip` in `to` and
/// checks every byte on arrival; returns the bytes received.
pub fn tcp_transfer(from: &Netns, to: &Netns, to_ip: &str) -> usize {
    let bind: SocketAddr = format!("{to_ip}:0").parse().unwrap();
    let listener = to
        .run_in(move || TcpListener::bind(bind))
        .unwrap()
        .expect("listen in the receiving namespace");
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || -> Result<usize, String> {
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let (mut s, _) = loop {
            match listener.accept() {
                Ok(c) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err("no connection within 120 s".into());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(format!("accept: {e}")),
            }
        };
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0usize;
        loop {
            let n = s
                .read(&mut buf)
                .map_err(|e| format!("read at {total}: {e}"))?;
            if n == 0 {
                return Ok(total);
            }
            for (k, b) in buf[..n].iter().enumerate() {
                if *b != pattern(total + k) {
                    return Err(format!(
                        "byte {} is {b}, not {}",
                        total + k,
                        pattern(total + k)
                    ));
                }
            }
            total += n;
        }
    });
    let mut c = from
        .run_in(move || TcpStream::connect_timeout(&addr, Duration::from_secs(60)))
        .unwrap()
        .expect("connect from the sending namespace");
    c.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    let chunk: Vec<u8> = (0..251 * 256).map(pattern).collect();
    let mut sent = 0;
    while sent < TRANSFER {
        let n = chunk.len().min(TRANSFER - sent);
        c.write_all(&chunk[..n]).expect("write");
        sent += n;
    }
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let got = server
        .join()
        .unwrap()
        .expect("the receiver checks every byte");
    assert_eq!(got, TRANSFER);
    got
}
