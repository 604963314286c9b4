//! The capture thread: listens on `sluice_capture` in the instance's
//! telemetry directory, runs one capture at a time (see
//! [`protocol`](super::protocol)).
//!
//! It never blocks an lcore: it starts and ends a session on the taps (the
//! only moments it takes the lcore's end of a tap, which an lcore only
//! `try_lock`s), and drains copies from the taps' buffers. When the client
//! reads slowly the thread stops draining and the buffers fill: the lcores
//! drop copies (counted), never packets.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::CaptureTaps;
use super::protocol::{
    CaptureEnd, CaptureRequest, CaptureStart, Control, DEFAULT_BUFFER, EndReason, Interface,
    MAX_BUFFER, MAX_REQUEST, frame, packet_header,
};
use super::tap::{Record, Tap};

/// The socket's file name in the instance's telemetry directory.
pub const SOCKET_NAME: &str = "sluice_capture";

/// Bytes waiting for the client above which no more copies are drained.
const OUT_HIGH: usize = 1 << 20;

/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// The capture thread; dropping it ends a capture under way (the client
/// gets its end message), stops the thread and removes the socket.
#[derive(Debug)]
pub struct CaptureServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CaptureServer {
    /// Listens on `dir/sluice_capture` (the directory is created) for
    /// captures of `taps`. A socket another instance answers on is an
    /// error; a stale one is removed.
    pub fn serve(dir: &Path, taps: Arc<CaptureTaps>) -> Result<CaptureServer, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("capture: cannot create {}: {e}", dir.display()))?;
        let path = dir.join(SOCKET_NAME);
        if path.exists() {
            if UnixStream::connect(&path).is_ok() {
                return Err(format!(
                    "capture: another instance listens on {} (give this one another \
                     --file-prefix)",
                    path.display()
                ));
            }
            std::fs::remove_file(&path)
                .map_err(|e| format!("capture: cannot remove stale {}: {e}", path.display()))?;
        }
        let listener = UnixListener::bind(&path)
            .map_err(|e| format!("capture: cannot listen on {}: {e}", path.display()))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("capture: {}: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("sluice-capture".into())
            .spawn(move || serve_loop(&listener, &taps, &thread_stop))
            .map_err(|e| format!("capture: cannot start its thread: {e}"))?;
        Ok(CaptureServer {
            path,
            stop,
            thread: Some(thread),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CaptureServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
        if let Some(dir) = self.path.parent() {
            // Fails, as it should, while the telemetry socket is there.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn serve_loop(listener: &UnixListener, taps: &CaptureTaps, stop: &AtomicBool) {
    let mut session: Option<Session> = None;
    loop {
        if stop.load(Ordering::Acquire) {
            if let Some(s) = session.take() {
                s.end(EndReason::Shutdown);
            }
            return;
        }
        if let Ok((stream, _)) = listener.accept() {
            if session.is_some() {
                refuse(stream, "a capture is already running on this instance");
            } else {
                session = open(stream, taps);
            }
        }
        let mut busy = false;
        if let Some(s) = session.as_mut() {
            match s.service() {
                Ok(moved) => busy = moved,
                Err(reason) => {
                    if let Some(s) = session.take() {
                        s.end(reason);
                    }
                }
            }
        }
        if !busy {
            let idle = if session.is_some() { 1 } else { 20 };
            std::thread::sleep(Duration::from_millis(idle));
        }
    }
}

/// Sends `msg` as an error reply and closes.
fn refuse(mut stream: UnixStream, msg: &str) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let _ = write_control(&mut stream, &Control::Error(msg.to_owned()));
}

fn write_control(stream: &mut UnixStream, c: &Control) -> std::io::Result<()> {
    let mut out = Vec::new();
    frame(&serde_json::to_vec(c).unwrap_or_default(), &mut out);
    stream.write_all(&out)
}

/// Reads the request.
fn read_request(stream: &mut UnixStream) -> Result<CaptureRequest, String> {
    let mut len = [0u8; 4];
    let timed = |e: std::io::Error| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            format!("no request within {} s", REQUEST_TIMEOUT.as_secs())
        }
        ErrorKind::UnexpectedEof => "the request ended early".to_owned(),
        _ => format!("cannot read the request: {e}"),
    };
    stream.read_exact(&mut len).map_err(timed)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_REQUEST {
        return Err(format!(
            "request of {len} bytes: at most {MAX_REQUEST} are read"
        ));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).map_err(timed)?;
    serde_json::from_slice(&body).map_err(|e| format!("malformed request: {e}"))
}

/// The interfaces `r` asks for, checked against `taps`.
fn interfaces(r: &CaptureRequest, taps: &CaptureTaps) -> Result<Vec<Interface>, String> {
    let port = r.port as usize;
    if port >= taps.nb_ports() {
        return Err(format!(
            "no port {port}: the instance has {} port(s)",
            taps.nb_ports()
        ));
    }
    if r.snaplen == 0 {
        return Err("snaplen must be at least 1".into());
    }
    if r.count == Some(0) {
        return Err("count must be at least 1".into());
    }
    if let Some(d) = r.duration
        && !(d.is_finite() && d > 0.0)
    {
        return Err(format!("duration {d}: a number of seconds above 0"));
    }
    if let Some(b) = r.buffer
        && !(1..=MAX_BUFFER).contains(&b)
    {
        return Err(format!("buffer {b}: 1..={MAX_BUFFER} slots"));
    }
    let snaplen = r.snaplen.min(taps.max_frame(port));
    let mut out = Vec::new();
    for &dir in r.direction.list() {
        let n = taps.nb_queues(port, dir);
        let queues = match r.queue {
            Some(q) if q as usize >= n => {
                return Err(format!(
                    "port {port} has no {} queue {q} ({n} queue(s))",
                    dir.name()
                ));
            }
            Some(q) => q..q + 1,
            None => 0..n.min(u16::MAX as usize) as u16,
        };
        for q in queues {
            out.push(Interface {
                name: Interface::name_of(r.port, q, dir),
                port: r.port,
                queue: q,
                direction: dir,
                snaplen,
            });
        }
    }
    if out.is_empty() || out.len() > u16::MAX as usize {
        return Err(format!("port {port}: no queue to capture"));
    }
    Ok(out)
}

/// ns since the Unix epoch, now.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Reads the client's request and starts its capture, or refuses it.
fn open(mut stream: UnixStream, taps: &CaptureTaps) -> Option<Session> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let request = read_request(&mut stream);
    let checked = request.and_then(|r| interfaces(&r, taps).map(|i| (r, i)));
    let (request, interfaces) = match checked {
        Ok(ok) => ok,
        Err(msg) => {
            refuse(stream, &msg);
            return None;
        }
    };
    let slots = request.buffer.unwrap_or(DEFAULT_BUFFER);
    let tsc0 = sluice::tsc::rdtsc();
    let start_ns = wall_ns();
    let mut session_taps = Vec::new();
    for i in &interfaces {
        let Some(tap) = taps.tap(i.port as usize, i.queue as usize, i.direction) else {
            continue;
        };
        tap.start(slots, i.snaplen);
        session_taps.push(Arc::clone(tap));
    }
    let session = Session {
        stream,
        taps: session_taps,
        out: Vec::new(),
        written: 0,
        packets: 0,
        count: request.count,
        drops_at_count: None,
        deadline: request
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d.min(1e9))),
        tsc0,
        start_ns,
    };
    let start = Control::Start(CaptureStart {
        interfaces,
        start_ns,
    });
    let mut session = session;
    if write_control(&mut session.stream, &start).is_err()
        || session.stream.set_nonblocking(true).is_err()
    {
        for t in &session.taps {
            t.stop();
        }
        return None;
    }
    Some(session)
}

/// A capture under way.
struct Session {
    stream: UnixStream,
    /// The taps captured, in the order of the start message's interfaces.
    taps: Vec<Arc<Tap>>,
    /// Frames for the client; `out[..written]` are sent.
    out: Vec<u8>,
    written: usize,
    /// Packets put in `out`.
    packets: u64,
    count: Option<u64>,
    /// Each tap's drops when `count` was reached (the taps then stop
    /// mirroring; what they drop after is not the capture's loss).
    drops_at_count: Option<Vec<u64>>,
    deadline: Option<Instant>,
    /// The TSC and the wall clock when the capture started.
    tsc0: u64,
    start_ns: u64,
}

impl Session {
    fn count_reached(&self) -> bool {
        self.count.is_some_and(|c| self.packets >= c)
    }

    /// `r` of interface `iface`, framed into `out` (unless `count` is
    /// reached).
    fn push(&mut self, iface: usize, r: Record<'_>) {
        if self.count_reached() {
            return;
        }
        let since = sluice::tsc::cycles_to_ns(r.tsc.wrapping_sub(self.tsc0));
        // A stamp from before the start (another core's TSC a little
        // behind) is the start.
        let ts = if r.tsc >= self.tsc0 {
            self.start_ns.saturating_add(since)
        } else {
            self.start_ns
        };
        let len = (PACKET_HEADER_LEN + r.data.len()) as u32;
        self.out.extend_from_slice(&len.to_le_bytes());
        self.out
            .extend_from_slice(&packet_header(iface as u16, r.orig_len, ts));
        self.out.extend_from_slice(r.data);
        self.packets += 1;
        if self.count_reached() {
            for t in &self.taps {
                t.pause();
            }
            self.drops_at_count = Some(self.taps.iter().map(|t| t.session_dropped()).collect());
        }
    }

    /// One round: the client's side checked, copies drained, bytes sent.
    /// `Ok(true)` when something moved; `Err` when the capture ends.
    fn service(&mut self) -> Result<bool, EndReason> {
        let mut scratch = [0u8; 256];
        match self.stream.read(&mut scratch) {
            Ok(0) => return Err(EndReason::Client),
            // Bytes after the request mean nothing; they are read away.
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(EndReason::Client),
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(EndReason::Duration);
        }
        let mut moved = false;
        while self.out.len() - self.written < OUT_HIGH && !self.count_reached() {
            let mut drained = 0;
            for i in 0..self.taps.len() {
                let tap = Arc::clone(&self.taps[i]);
                drained += tap.drain(64, |r| self.push(i, r));
            }
            if drained == 0 {
                break;
            }
            moved = true;
        }
        while self.written < self.out.len() {
            match self.stream.write(&self.out[self.written..]) {
                Ok(0) => return Err(EndReason::Client),
                Ok(n) => {
                    self.written += n;
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(EndReason::Client),
            }
        }
        if self.written == self.out.len() {
            self.out.clear();
            self.written = 0;
            if self.count_reached() {
                return Err(EndReason::Count);
            }
        }
        Ok(moved)
    }

    /// Ends the capture: the taps idle, what they still held sent (up to
    /// `count`), then the end message.
    fn end(mut self, reason: EndReason) {
        let taps = std::mem::take(&mut self.taps);
        let mut drops = Vec::with_capacity(taps.len());
        for (i, tap) in taps.iter().enumerate() {
            drops.push(tap.finish(|r| self.push(i, r)).dropped);
        }
        let drops = self.drops_at_count.take().unwrap_or(drops);
        let end = Control::End(CaptureEnd {
            packets: self.packets,
            drops,
            end_ns: wall_ns(),
            reason,
        });
        let _ = self.stream.set_nonblocking(false);
        let _ = self.stream.set_write_timeout(Some(Duration::from_secs(1)));
        frame(&serde_json::to_vec(&end).unwrap_or_default(), &mut self.out);
        let _ = self.stream.write_all(&self.out[self.written..]);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

const PACKET_HEADER_LEN: usize = super::protocol::PACKET_HEADER;

#[cfg(test)]
mod tests {
    use super::super::client::{CaptureClient, Event};
    use super::super::protocol::Directions;
    use super::super::tap::Direction;
    use super::*;
    use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};

    const WAIT: Duration = Duration::from_secs(30);

    fn dir(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("sluice-capture-{}-{name}", std::process::id()))
    }

    fn request(port: u16) -> CaptureRequest {
        CaptureRequest {
            port,
            queue: None,
            direction: Directions::Both,
            snaplen: 65535,
            count: None,
            duration: None,
            buffer: None,
        }
    }

    /// Two ports: port 0 with 2 Rx and 1 Tx queue, port 1 with 1 and 1.
    fn taps() -> Arc<CaptureTaps> {
        CaptureTaps::new(&[(2, 1, 1518), (1, 1, 1518)])
    }

    fn refused(path: &Path, r: &CaptureRequest) -> String {
        let mut c = CaptureClient::connect(path).unwrap();
        c.start(r, WAIT).unwrap_err()
    }

    #[test]
    fn bad_requests_get_an_error_naming_what_is_wrong() {
        let server = CaptureServer::serve(&dir("bad"), taps()).unwrap();
        let path = server.path().to_owned();
        assert_eq!(
            refused(&path, &request(2)),
            "no port 2: the instance has 2 port(s)"
        );
        let mut r = request(1);
        r.queue = Some(1);
        assert_eq!(refused(&path, &r), "port 1 has no rx queue 1 (1 queue(s))");
        r.direction = Directions::Tx;
        assert_eq!(refused(&path, &r), "port 1 has no tx queue 1 (1 queue(s))");
        let mut r = request(0);
        r.snaplen = 0;
        assert_eq!(refused(&path, &r), "snaplen must be at least 1");
        r.snaplen = 64;
        r.count = Some(0);
        assert_eq!(refused(&path, &r), "count must be at least 1");
        // Garbage, and a length past the limit.
        for bytes in [&b"\x05\x00\x00\x00hello"[..], &u32::MAX.to_le_bytes()[..]] {
            let mut s = UnixStream::connect(&path).unwrap();
            s.write_all(bytes).unwrap();
            let mut reply = Vec::new();
            s.read_to_end(&mut reply).unwrap();
            let c: Control = serde_json::from_slice(&reply[4..]).unwrap();
            let Control::Error(e) = c else {
                panic!("{c:?}");
            };
            assert!(
                e.starts_with("malformed request") || e.contains("at most 4096"),
                "{e}"
            );
        }
        // Still serving.
        let mut c = CaptureClient::connect(&path).unwrap();
        let start = c.start(&request(0), WAIT).unwrap();
        let names: Vec<_> = start.interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["port0/rx0", "port0/rx1", "port0/tx0"]);
        assert!(start.interfaces.iter().all(|i| i.snaplen == 1518));
    }

    /// A pool and `n` packets of 60 bytes, packet `i` filled with `i`.
    fn packets(n: usize) -> (MbufPool, Burst<64>) {
        let pool = MbufPool::new(MbufPoolConfig {
            size: 63,
            cache_size: 0,
            ..Default::default()
        })
        .unwrap();
        let mut b: Burst<64> = Burst::new();
        pool.alloc_bulk(&mut b, n).unwrap();
        for (i, m) in b.iter_mut().enumerate() {
            m.append(60).unwrap().fill(i as u8);
        }
        (pool, b)
    }

    /// Every packet's first byte until the end message, and that message.
    fn until_end(c: &mut CaptureClient, start: &CaptureStart) -> (Vec<u8>, CaptureEnd) {
        let mut got = Vec::new();
        loop {
            match c.next(WAIT).unwrap() {
                Some(Event::Packet(p)) => {
                    assert_eq!((p.interface, p.orig_len), (0, 60));
                    assert!(p.ts_ns >= start.start_ns);
                    got.push(p.data[0]);
                }
                Some(Event::End(e)) => return (got, e),
                None => panic!("nothing within {WAIT:?}"),
            }
        }
    }

    #[test]
    fn a_capture_streams_copies_until_its_count() {
        let taps = taps();
        let server = CaptureServer::serve(&dir("count"), Arc::clone(&taps)).unwrap();
        let mut c = CaptureClient::connect(server.path()).unwrap();
        let mut r = request(1);
        r.direction = Directions::Tx;
        r.count = Some(5);
        r.snaplen = 16;
        let start = c.start(&r, WAIT).unwrap();
        assert_eq!(start.interfaces.len(), 1);
        assert_eq!(start.interfaces[0].name, "port1/tx0");
        let tap = taps.tap(1, 0, Direction::Tx).unwrap();
        assert!(tap.is_active());
        assert!(!taps.tap(1, 0, Direction::Rx).unwrap().is_active());
        let (pool, b) = packets(6);
        tap.mirror(b.as_slice(), sluice::tsc::rdtsc());
        let (got, end) = until_end(&mut c, &start);
        assert_eq!(got, [0, 1, 2, 3, 4]);
        assert_eq!((end.packets, end.reason), (5, EndReason::Count));
        assert_eq!(end.drops, [0]);
        assert!(end.end_ns >= start.start_ns);
        assert!(!tap.is_active());
        drop(b);
        assert!(pool.is_full());
    }

    #[test]
    fn copies_that_find_the_buffer_full_are_counted_in_the_end_message() {
        let taps = taps();
        let server = CaptureServer::serve(&dir("drops"), Arc::clone(&taps)).unwrap();
        let mut c = CaptureClient::connect(server.path()).unwrap();
        let mut r = request(0);
        r.direction = Directions::Rx;
        r.queue = Some(1);
        r.buffer = Some(4);
        let start = c.start(&r, WAIT).unwrap();
        let tap = taps.tap(0, 1, Direction::Rx).unwrap();
        let (pool, b) = packets(40);
        // 40 copies into 4 slots: at least 4 arrive, and every one of the
        // others is counted as dropped.
        tap.mirror(b.as_slice(), sluice::tsc::rdtsc());
        c.stop();
        let (got, end) = until_end(&mut c, &start);
        assert!(got.len() >= 4, "{got:?}");
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        assert_eq!(end.reason, EndReason::Client);
        assert_eq!(end.packets, got.len() as u64);
        assert_eq!(got.len() as u64 + end.drops[0], 40, "{end:?}");
        drop(b);
        assert!(pool.is_full());
    }

    #[test]
    fn one_capture_at_a_time_and_a_client_stopping_ends_it() {
        let taps = taps();
        let server = CaptureServer::serve(&dir("one"), Arc::clone(&taps)).unwrap();
        let mut first = CaptureClient::connect(server.path()).unwrap();
        first.start(&request(0), WAIT).unwrap();
        assert_eq!(
            refused(server.path(), &request(1)),
            "a capture is already running on this instance"
        );
        first.stop();
        let end = loop {
            if let Some(Event::End(e)) = first.next(WAIT).unwrap() {
                break e;
            }
        };
        assert_eq!((end.reason, end.packets), (EndReason::Client, 0));
        assert_eq!(end.drops, [0, 0, 0]);
        assert!(
            taps.tap(0, 0, Direction::Rx)
                .is_some_and(|t| !t.is_active())
        );
        // The next one is served.
        let mut second = CaptureClient::connect(server.path()).unwrap();
        second.start(&request(1), WAIT).unwrap();
        // The instance ending ends it too.
        let path = server.path().to_owned();
        drop(server);
        let end = loop {
            if let Some(Event::End(e)) = second.next(WAIT).unwrap() {
                break e;
            }
        };
        assert_eq!(end.reason, EndReason::Shutdown);
        assert!(!path.exists());
    }

    #[test]
    fn a_second_server_on_the_directory_is_refused_and_a_stale_socket_replaced() {
        let d = dir("twice");
        let server = CaptureServer::serve(&d, taps()).unwrap();
        let err = CaptureServer::serve(&d, taps()).unwrap_err();
        assert!(err.contains("another instance listens on"), "{err}");
        drop(server);
        // The socket and its directory, left empty, are removed.
        assert!(!d.exists());
        // A socket file nobody answers on.
        std::fs::create_dir_all(&d).unwrap();
        let stale = UnixListener::bind(d.join(SOCKET_NAME)).unwrap();
        drop(stale);
        let server = CaptureServer::serve(&d, taps()).unwrap();
        let mut c = CaptureClient::connect(server.path()).unwrap();
        c.start(&request(0), WAIT).unwrap();
    }
}
