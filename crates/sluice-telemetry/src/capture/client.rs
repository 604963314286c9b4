//! The client's side of the capture protocol (see
//! [`protocol`](super::protocol)).

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::protocol::{
    CaptureEnd, CaptureRequest, CaptureStart, Control, Packet, frame, parse_packet,
};

/// What the server sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// A packet.
    Packet(Packet<'a>),
    /// The capture has ended.
    End(CaptureEnd),
}

/// Frames longer than this are a broken server.
const MAX_FRAME: usize = 1 << 24;

/// A connection to an instance's capture socket.
#[derive(Debug)]
pub struct CaptureClient {
    stream: UnixStream,
    /// Bytes received; `buf[at..]` not yet handed out.
    buf: Vec<u8>,
    at: usize,
}

impl CaptureClient {
    /// Connects to the capture socket at `path`.
    pub fn connect(path: &Path) -> Result<CaptureClient, String> {
        let stream = UnixStream::connect(path).map_err(|e| {
            format!(
                "cannot connect to {}: {e} (is an instance with that --file-prefix running?)",
                path.display()
            )
        })?;
        Ok(CaptureClient {
            stream,
            buf: Vec::new(),
            at: 0,
        })
    }

    /// Sends `request` and waits up to `timeout` for the answer: the
    /// capture's interfaces, or the server's error.
    pub fn start(
        &mut self,
        request: &CaptureRequest,
        timeout: Duration,
    ) -> Result<CaptureStart, String> {
        let body = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        frame(&body, &mut out);
        self.stream
            .write_all(&out)
            .map_err(|e| format!("cannot send the request: {e}"))?;
        if !self.fill(timeout)? {
            return Err(format!(
                "no answer from the instance within {} s",
                timeout.as_secs_f64()
            ));
        }
        let body = self.take_frame().unwrap_or_default();
        match serde_json::from_slice::<Control>(&body) {
            Ok(Control::Start(s)) => Ok(s),
            Ok(Control::Error(e)) => Err(e),
            Ok(Control::End(_)) | Err(_) => Err("unexpected answer from the instance".into()),
        }
    }

    /// The next message, waiting up to `timeout`; `Ok(None)` when none
    /// came in that time.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<Event<'_>>, String> {
        if self.whole_frame().is_none() && !self.fill(timeout)? {
            return Ok(None);
        }
        let Some((start, end)) = self.whole_frame() else {
            return Ok(None);
        };
        self.at = end;
        let body = &self.buf[start..end];
        if body.first() == Some(&b'{') {
            return match serde_json::from_slice::<Control>(body) {
                Ok(Control::End(e)) => Ok(Some(Event::End(e))),
                Ok(Control::Error(e)) => Err(e),
                _ => Err("unexpected message from the instance".into()),
            };
        }
        parse_packet(body)
            .map(|p| Some(Event::Packet(p)))
            .ok_or_else(|| "malformed packet message from the instance".into())
    }

    /// Asks the server to end the capture (it sends what it holds, then
    /// the end message).
    pub fn stop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }

    /// The bounds of the first whole frame's body in `buf[at..]`.
    fn whole_frame(&self) -> Option<(usize, usize)> {
        let rest = &self.buf[self.at..];
        let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let start = self.at + 4;
        (rest.len() - 4 >= len).then_some((start, start + len))
    }

    fn take_frame(&mut self) -> Option<Vec<u8>> {
        let (start, end) = self.whole_frame()?;
        self.at = end;
        Some(self.buf[start..end].to_vec())
    }

    /// Reads what comes within `timeout` until a whole frame is in;
    /// `Ok(false)` when the time ran out first.
    fn fill(&mut self, timeout: Duration) -> Result<bool, String> {
        if self.at > 0 && self.at * 2 >= self.buf.len() {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        let deadline = Instant::now() + timeout;
        while self.whole_frame().is_none() {
            if let Some(len) = self.buf.get(self.at..self.at + 4) {
                let len = u32::from_le_bytes(len.try_into().unwrap_or([0; 4])) as usize;
                if len > MAX_FRAME {
                    return Err(format!("message of {len} bytes from the instance"));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            let old = self.buf.len();
            self.buf.resize(old + (1 << 16), 0);
            let read = self.stream.read(&mut self.buf[old..]);
            self.buf.truncate(old + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => return Err("the instance closed the capture without ending it".into()),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(format!("capture socket: {e}")),
            }
        }
        Ok(true)
    }
}
