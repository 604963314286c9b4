//! A small HTTP/1.1 server for Prometheus scrapes: `GET /metrics`.
//!
//! One thread accepts connections and hands each to a thread of its own,
//! at most [`MAX_CONNECTIONS`] at once (one more is answered `503` and
//! closed). A connection carries one request (`Connection: close`): its
//! head is read within [`REQUEST_TIMEOUT`] and [`MAX_HEAD`] bytes, else
//! the client gets `408` or `431`; a head that is not HTTP gets `400`. So
//! a client that sends garbage or never finishes holds one connection
//! thread for a bounded time and never the others.
//!
//! | request            | reply                                              |
//! |--------------------|----------------------------------------------------|
//! | `GET /metrics`     | `200`, the exposition (`text/plain; version=0.0.4`) |
//! | `GET /`            | `200`, a page pointing at `/metrics`               |
//! | other paths        | `404`                                              |
//! | other methods      | `405` (`HEAD` is answered as `GET`, without body)  |

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Renders the exposition at each scrape (called on a connection's
/// thread, possibly on several at once).
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Longest request head read (request line and headers).
const MAX_HEAD: usize = 8 * 1024;

/// Time a client has to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Time a client has to take the reply.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Connections served at once.
const MAX_CONNECTIONS: usize = 16;

/// Time the server waits, after its reply, for the client to close first
/// (so what the client sent beyond the head does not reset the connection
/// before the reply is read).
const LINGER: Duration = Duration::from_millis(500);

/// Bytes read from a client after the reply, at most.
const LINGER_BYTES: usize = 64 * 1024;

/// Pause after a failed accept (no file descriptor left, …) before the
/// next, so the failure does not spin the thread.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const INDEX: &str = "<!DOCTYPE html>\n<html><head><title>Sluice metrics</title></head>\n\
<body><h1>Sluice metrics</h1><p><a href=\"/metrics\">/metrics</a>: \
Prometheus text exposition.</p></body></html>\n";

/// The metrics server: a thread accepting connections on a TCP address.
/// Dropping it stops the thread, closes the connections it still serves
/// and frees the address.
///
/// `GET /metrics` is answered `200` with the exposition (`Content-Type:
/// text/plain; version=0.0.4; charset=utf-8`), `GET /` with a page
/// pointing there, other paths `404`, other methods than `GET` and `HEAD`
/// `405`. Each connection carries one request and has its own thread, at
/// most 16 at once (one more gets `503`); a request head must come
/// within 2 s and 8 KiB (else `408` or `431`), and one that is not HTTP/1
/// gets `400`, so a slow or broken client never holds up another.
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Shut down to wake the accepting thread.
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port, see
    /// [`local_addr`](Self::local_addr)) and answers scrapes with
    /// `render()`.
    pub fn serve(addr: SocketAddr, render: Render) -> io::Result<MetricsServer> {
        MetricsServer::serve_with(addr, render, Limits::DEFAULT)
    }

    /// [`serve`](Self::serve) with other limits.
    fn serve_with(addr: SocketAddr, render: Render, limits: Limits) -> io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        let local_addr = listener.local_addr()?;
        // Non-blocking: a connection gone between poll and accept must not
        // block the thread.
        listener.set_nonblocking(true)?;
        let (wake, woken) = UnixStream::pair()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            thread::Builder::new()
                .name("sluice-metrics".into())
                .spawn(move || accept_loop(listener, woken, &stop, render, limits))?
        };
        Ok(MetricsServer {
            local_addr,
            stop,
            wake,
            thread: Some(thread),
        })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // The accepting thread polls the other end: a shutdown makes it
        // readable (end of stream).
        let _ = self.wake.shutdown(Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            // A panic on the accepting thread was reported on stderr when
            // it happened; the server is gone either way.
            let _ = thread.join();
        }
    }
}

/// How long a client may take and how many are served at once.
#[derive(Debug, Clone, Copy)]
struct Limits {
    request_timeout: Duration,
    max_connections: usize,
}

impl Limits {
    const DEFAULT: Limits = Limits {
        request_timeout: REQUEST_TIMEOUT,
        max_connections: MAX_CONNECTIONS,
    };
}

/// A connection being served: its thread, and a handle on its socket to
/// cut it short when the server stops.
struct Connection {
    thread: JoinHandle<()>,
    socket: TcpStream,
}

fn accept_loop(
    listener: TcpListener,
    woken: UnixStream,
    stop: &AtomicBool,
    render: Render,
    limits: Limits,
) {
    let mut connections: Vec<Connection> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        match wait_readable(&listener, &woken, None) {
            Readable::Wake => break,
            Readable::Listener => {}
            Readable::Neither => continue,
        }
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::Interrupted
                        | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue;
            }
            Err(_) => {
                // Out of file descriptors or memory: wait a little (still
                // woken by a stop) for connections to end.
                if let Readable::Wake = wait_readable(&listener, &woken, Some(ACCEPT_BACKOFF)) {
                    break;
                }
                continue;
            }
        };
        connections.retain(|c| !c.thread.is_finished());
        if connections.len() >= limits.max_connections {
            refuse(stream);
            continue;
        }
        let Ok(socket) = stream.try_clone() else {
            continue;
        };
        let render = Arc::clone(&render);
        let spawned = thread::Builder::new()
            .name("sluice-metrics-conn".into())
            .spawn(move || serve_connection(stream, &render, limits.request_timeout));
        if let Ok(thread) = spawned {
            connections.push(Connection { thread, socket });
        }
    }
    for c in &connections {
        let _ = c.socket.shutdown(Shutdown::Both);
    }
    for c in connections {
        let _ = c.thread.join();
    }
}

/// What [`wait_readable`] found.
enum Readable {
    /// The server is stopping.
    Wake,
    /// A connection is waiting.
    Listener,
    /// Nothing yet (a signal, or the time ran out).
    Neither,
}

/// Waits until the wake-up socket or the listener is readable, for at most
/// `timeout` (`None`: no limit).
fn wait_readable(
    listener: &TcpListener,
    woken: &UnixStream,
    timeout: Option<Duration>,
) -> Readable {
    let mut fds = [
        libc::pollfd {
            fd: woken.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let timeout_ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    // SAFETY: `fds` is an array of two initialised `pollfd`s that lives
    // across the call, and its length is passed as the count; both
    // descriptors stay open (borrowed) meanwhile.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if ready <= 0 {
        return Readable::Neither;
    }
    if fds[0].revents != 0 {
        Readable::Wake
    } else if fds[1].revents != 0 {
        Readable::Listener
    } else {
        Readable::Neither
    }
}

/// Answers a connection over the limit with `503` (one write that does not
/// wait) and closes it.
fn refuse(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let reply = Reply::text(503, "too many connections\n");
    let _ = stream.write(&reply.to_bytes(false));
}

/// Why no request head was read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// The client closed before sending anything.
    Closed,
    /// The client closed in the middle of a head, or sent something that
    /// is not an HTTP/1 request.
    Malformed,
    /// The head is longer than [`MAX_HEAD`].
    TooLarge,
    /// The head did not arrive within [`REQUEST_TIMEOUT`].
    TimedOut,
    /// The connection failed.
    Failed,
}

/// A request line: method and path (query string cut off).
#[derive(Debug, PartialEq, Eq)]
struct Request {
    method: String,
    path: String,
}

fn serve_connection(mut stream: TcpStream, render: &Render, request_timeout: Duration) {
    let _ = stream.set_nonblocking(false);
    let deadline = Instant::now() + request_timeout;
    let (reply, head_only) = match read_head(&mut stream, deadline) {
        Ok(request) => (route(&request, render), request.method == "HEAD"),
        Err(HeadError::Closed | HeadError::Failed) => return,
        Err(HeadError::Malformed) => (Reply::text(400, "bad request\n"), false),
        Err(HeadError::TooLarge) => (Reply::text(431, "request head too large\n"), false),
        Err(HeadError::TimedOut) => (Reply::text(408, "request timed out\n"), false),
    };
    let written = write_by(
        &mut stream,
        &reply.to_bytes(head_only),
        Instant::now() + WRITE_TIMEOUT,
    );
    if written.is_ok() && stream.shutdown(Shutdown::Write).is_ok() {
        linger(&mut stream);
    }
}

/// Reads a request head (up to the blank line) by `deadline`, and parses
/// its request line.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> Result<Request, HeadError> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let mut request = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::TimedOut);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| HeadError::Failed)?;
        let room = (MAX_HEAD + 1 - head.len()).min(chunk.len());
        let n = match stream.read(&mut chunk[..room]) {
            Ok(0) if head.is_empty() => return Err(HeadError::Closed),
            Ok(0) => return Err(HeadError::Malformed),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::TimedOut);
            }
            Err(_) => return Err(HeadError::Failed),
        };
        let seen = head.len();
        head.extend_from_slice(&chunk[..n]);
        // The request line, once whole, is checked at once: garbage gets
        // its 400 without waiting for a blank line that may never come.
        if request.is_none()
            && let Some(eol) = find(&head[seen..], b"\n")
        {
            request = Some(parse_request_line(&head[..seen + eol])?);
        }
        if let Some(request) = request.take_if(|_| head_ends(&head, seen)) {
            return Ok(request);
        }
        if head.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Whether `head`, of which the bytes from `seen` on are new, holds the
/// blank line that ends a request head (`\r\n\r\n`, or `\n\n` from a
/// lenient client).
fn head_ends(head: &[u8], seen: usize) -> bool {
    let from = seen.saturating_sub(3);
    find(&head[from..], b"\r\n\r\n").is_some() || find(&head[from..], b"\n\n").is_some()
}

/// The first index of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parses `METHOD TARGET HTTP/1.x` (a trailing `\r` allowed).
fn parse_request_line(line: &[u8]) -> Result<Request, HeadError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = std::str::from_utf8(line).map_err(|_| HeadError::Malformed)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed);
    };
    let method_ok = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
    if !method_ok || !version.starts_with("HTTP/1.") || version.len() != 8 {
        return Err(HeadError::Malformed);
    }
    // Absolute form (`http://host:port/metrics`, as sent to a proxy): the
    // path is what follows the authority.
    let path = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    };
    if !path.starts_with('/') || path.bytes().any(|b| b.is_ascii_control()) {
        return Err(HeadError::Malformed);
    }
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
    })
}

/// The reply to a well-formed request.
fn route(request: &Request, render: &Render) -> Reply {
    let known = matches!(request.path.as_str(), "/metrics" | "/");
    if !known {
        return Reply::text(404, "not found: try /metrics\n");
    }
    if !matches!(request.method.as_str(), "GET" | "HEAD") {
        let mut reply = Reply::text(405, "method not allowed: use GET\n");
        reply.allow = true;
        return reply;
    }
    if request.path == "/" {
        return Reply {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: INDEX.as_bytes().to_vec(),
            allow: false,
        };
    }
    // A panicking render costs this scrape, not the server.
    match catch_unwind(AssertUnwindSafe(|| render())) {
        Ok(body) => Reply {
            status: 200,
            content_type: METRICS_TYPE,
            body: body.into_bytes(),
            allow: false,
        },
        Err(_) => Reply::text(500, "the metrics could not be rendered\n"),
    }
}

/// A reply: status, body and its type.
#[derive(Debug)]
struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    /// Whether to name the methods allowed (a `405`).
    allow: bool,
}

impl Reply {
    fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            allow: false,
        }
    }

    /// The reply on the wire; the head alone (its `Content-Length` still
    /// the body's) when `head_only`.
    fn to_bytes(&self, head_only: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if self.allow {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("Connection: close\r\n\r\n");
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

/// Writes all of `bytes` by `deadline`.
fn write_by(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads what the client still sends until it closes, for at most
/// [`LINGER`] and [`LINGER_BYTES`], so closing does not reset the
/// connection under the reply.
fn linger(stream: &mut TcpStream) {
    let deadline = Instant::now() + LINGER;
    let mut chunk = [0u8; 4096];
    let mut read = 0;
    while read < LINGER_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => read += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A reply as a client sees it.
    #[derive(Debug)]
    struct Answer {
        status: u16,
        head: String,
        body: Vec<u8>,
    }

    impl Answer {
        fn header(&self, name: &str) -> Option<&str> {
            self.head.lines().skip(1).find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim())
            })
        }
    }

    /// Reads a whole reply (the server closes after it). The read timeout
    /// only keeps a broken server from hanging the test.
    fn read_answer(stream: &mut TcpStream) -> Answer {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        let end = find(&raw, b"\r\n\r\n").expect("a reply head") + 4;
        let head = String::from_utf8(raw[..end].to_vec()).unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        Answer {
            status,
            head,
            body: raw[end..].to_vec(),
        }
    }

    fn send(addr: SocketAddr, request: &[u8]) -> Answer {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request).unwrap();
        read_answer(&mut stream)
    }

    fn get(addr: SocketAddr, path: &str) -> Answer {
        send(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nAccept: */*\r\n\r\n").as_bytes(),
        )
    }

    fn server(text: &'static str) -> (MetricsServer, Arc<AtomicUsize>) {
        server_with(text, Limits::DEFAULT)
    }

    fn server_with(text: &'static str, limits: Limits) -> (MetricsServer, Arc<AtomicUsize>) {
        let renders = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&renders);
        let server = MetricsServer::serve_with(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(move || {
                counted.fetch_add(1, Ordering::Relaxed);
                text.to_string()
            }),
            limits,
        )
        .unwrap();
        (server, renders)
    }

    const TEXT: &str = "# HELP up Up.\n# TYPE up gauge\nup 1\n";

    #[test]
    fn metrics_index_and_head_are_served() {
        let (server, renders) = server(TEXT);
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);

        let a = get(addr, "/metrics");
        assert_eq!(a.status, 200, "{}", a.head);
        assert_eq!(
            a.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        assert_eq!(
            a.header("content-length"),
            Some(TEXT.len().to_string().as_str())
        );
        assert_eq!(a.header("connection"), Some("close"));
        assert_eq!(a.body, TEXT.as_bytes());
        assert_eq!(renders.load(Ordering::Relaxed), 1);

        let a = get(addr, "/metrics?name[]=up");
        assert_eq!((a.status, &a.body[..]), (200, TEXT.as_bytes()));

        let a = get(addr, "/");
        assert_eq!(a.status, 200);
        assert_eq!(a.header("content-type"), Some("text/html; charset=utf-8"));
        assert!(
            String::from_utf8(a.body)
                .unwrap()
                .contains("href=\"/metrics\"")
        );

        let a = send(addr, b"HEAD /metrics HTTP/1.0\r\n\r\n");
        assert_eq!(a.status, 200);
        assert_eq!(
            a.header("content-length"),
            Some(TEXT.len().to_string().as_str())
        );
        assert!(a.body.is_empty());

        let a = send(addr, b"GET http://localhost:9/metrics HTTP/1.1\n\n");
        assert_eq!((a.status, &a.body[..]), (200, TEXT.as_bytes()));
        assert_eq!(renders.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn other_paths_and_methods_are_refused() {
        let (server, renders) = server(TEXT);
        let addr = server.local_addr();
        assert_eq!(get(addr, "/metricsx").status, 404);
        assert_eq!(get(addr, "/favicon.ico").status, 404);
        let a = send(
            addr,
            b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        );
        assert_eq!(a.status, 405);
        assert_eq!(a.header("allow"), Some("GET, HEAD"));
        assert_eq!(send(addr, b"DELETE / HTTP/1.1\r\n\r\n").status, 405);
        assert_eq!(renders.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn garbage_gets_400_and_the_next_client_is_served() {
        let (server, _) = server(TEXT);
        let addr = server.local_addr();
        let garbage: [&[u8]; 6] = [
            b"\x00\x01\x02\xff\xfe garbage\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"get /metrics HTTP/1.1\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
        ];
        for request in garbage {
            let a = send(addr, request);
            assert_eq!(a.status, 400, "{:?}", String::from_utf8_lossy(request));
            let a = get(addr, "/metrics");
            assert_eq!((a.status, &a.body[..]), (200, TEXT.as_bytes()));
        }

        // A head cut short by the client's close, with no line end.
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(b"GET /metr").unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_answer(&mut stream).status, 400);
        assert_eq!(get(addr, "/metrics").status, 200);
    }

    #[test]
    fn an_endless_head_gets_431() {
        let (server, _) = server(TEXT);
        let addr = server.local_addr();
        let mut request = b"GET /metrics HTTP/1.1\r\n".to_vec();
        while request.len() <= MAX_HEAD {
            request.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        let a = send(addr, &request);
        assert_eq!(a.status, 431);
        assert_eq!(get(addr, "/metrics").status, 200);
    }

    #[test]
    fn a_silent_client_stalls_no_one_and_times_out() {
        let (server, _) = server_with(
            TEXT,
            Limits {
                request_timeout: Duration::from_millis(200),
                ..Limits::DEFAULT
            },
        );
        let addr = server.local_addr();
        let mut silent = TcpStream::connect(addr).unwrap();
        let mut half = TcpStream::connect(addr).unwrap();
        half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        // Both hold a connection thread (for a while); scrapes are served
        // meanwhile, whether the two have timed out yet or not.
        for _ in 0..3 {
            assert_eq!(get(addr, "/metrics").status, 200);
        }
        assert_eq!(read_answer(&mut silent).status, 408);
        assert_eq!(read_answer(&mut half).status, 408);
    }

    #[test]
    fn a_panicking_render_costs_one_scrape() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let server = MetricsServer::serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(move || {
                if counted.fetch_add(1, Ordering::Relaxed) == 0 {
                    panic!("render failed");
                }
                TEXT.to_string()
            }),
        )
        .unwrap();
        let addr = server.local_addr();
        assert_eq!(get(addr, "/metrics").status, 500);
        assert_eq!(get(addr, "/metrics").status, 200);
    }

    #[test]
    fn connections_over_the_limit_get_503() {
        // Clients have all the time they want: the two held connections
        // stay until the test ends them.
        let (server, _) = server_with(
            TEXT,
            Limits {
                request_timeout: Duration::from_secs(3600),
                max_connections: 2,
            },
        );
        let addr = server.local_addr();
        let mut held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        // Accepted in order of arrival, after the two held ones: refused
        // at once, without a request read.
        let mut extra = TcpStream::connect(addr).unwrap();
        let a = read_answer(&mut extra);
        assert_eq!(a.status, 503);
        assert_eq!(a.body, b"too many connections\n");
        // A held connection is still served.
        held[1].write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let a = read_answer(&mut held[1]);
        assert_eq!((a.status, &a.body[..]), (200, TEXT.as_bytes()));
        drop(held);
    }

    #[test]
    fn drop_stops_the_server_and_closes_its_connections() {
        let (server, _) = server(TEXT);
        let addr = server.local_addr();
        let mut waiting = TcpStream::connect(addr).unwrap();
        assert_eq!(get(addr, "/metrics").status, 200);
        drop(server);
        // The waiting client's connection was cut: end of stream or reset,
        // no reply.
        waiting
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut raw = Vec::new();
        let read = waiting.read_to_end(&mut raw);
        assert!(read.is_err() || raw.is_empty(), "{raw:?}");
        let refused = TcpStream::connect(addr).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn request_lines_are_parsed() {
        let ok = |line: &str, method: &str, path: &str| {
            assert_eq!(
                parse_request_line(line.as_bytes()),
                Ok(Request {
                    method: method.into(),
                    path: path.into()
                })
            );
        };
        ok("GET /metrics HTTP/1.1\r", "GET", "/metrics");
        ok("HEAD /?x=1 HTTP/1.0", "HEAD", "/");
        ok("GET https://h:1/metrics?a HTTP/1.1", "GET", "/metrics");
        ok("GET http://h HTTP/1.1", "GET", "/");
        for bad in [
            "",
            "GET",
            "GET /",
            "GET / HTTP/1.1 x",
            "GET / HTTP/11",
            "GET /\x01 HTTP/1.1",
            "G3T / HTTP/1.1",
        ] {
            assert_eq!(
                parse_request_line(bad.as_bytes()),
                Err(HeadError::Malformed),
                "{bad:?}"
            );
        }
    }
}
