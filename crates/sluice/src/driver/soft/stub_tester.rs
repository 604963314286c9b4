//! A stand-in for `crate::tester` with the same calls (the contract of issue
//! 3), used until the real tester lands: UDP/TCP over IPv4, fixed sizes,
//! per-flow sequence numbers, a payload pattern, and a checker that counts
//! what comes back. Only what the `soft` driver and its tests need.
#![allow(dead_code, missing_docs)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::net::MacAddr;
use crate::port::{SpecArgs, SpecError};

pub const TESTER_KEYS: &[&str] = &["gen", "flows", "size", "rate", "count"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L3 {
    Ipv4,
    Ipv6,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Udp,
    Tcp,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameSize {
    Fixed(u16),
    Imix,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TesterConfig {
    pub l3: L3,
    pub l4: L4,
    pub flows: u32,
    pub size: FrameSize,
    pub rate_pps: Option<f64>,
    pub count: Option<u64>,
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub seed: u64,
}

impl Default for TesterConfig {
    fn default() -> Self {
        TesterConfig {
            l3: L3::Ipv4,
            l4: L4::Udp,
            flows: 16,
            size: FrameSize::Fixed(64),
            rate_pps: None,
            count: None,
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            seed: 1,
        }
    }
}

impl TesterConfig {
    pub fn from_args(args: &mut SpecArgs) -> Result<Option<TesterConfig>, SpecError> {
        let mut c = TesterConfig::default();
        let mut any = false;
        if let Some(g) = args.choice("gen", &["udp", "tcp"])? {
            any = true;
            c.l4 = if g == "tcp" { L4::Tcp } else { L4::Udp };
        }
        if let Some(f) = args.u64_in("flows", 1..=1 << 20)? {
            any = true;
            c.flows = f as u32;
        }
        if let Some(s) = args.u64_in("size", 60..=9000)? {
            any = true;
            c.size = FrameSize::Fixed(s as u16);
        }
        if let Some(r) = args.u64_in("rate", 1..=u64::MAX)? {
            any = true;
            c.rate_pps = Some(r as f64);
        }
        if let Some(n) = args.u64_in("count", 0..=u64::MAX)? {
            any = true;
            c.count = Some(n);
        }
        Ok(any.then_some(c))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct FlowTuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub proto: u8,
}

struct Stream {
    claimed: AtomicU64,
    sent: AtomicU64,
    bytes: AtomicU64,
    next_seq: Box<[AtomicU64]>,
}

pub struct Tester {
    config: TesterConfig,
    streams: Mutex<Vec<Arc<Stream>>>,
    received: AtomicU64,
    bytes_received: AtomicU64,
    corrupt: AtomicU64,
    foreign: AtomicU64,
    reordered: AtomicU64,
    start: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TesterReport {
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
    pub corrupt: u64,
    pub foreign: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl TesterReport {
    pub fn is_clean(&self) -> bool {
        self.lost == 0 && self.reordered == 0 && self.duplicates == 0 && self.corrupt == 0
    }
}

impl std::fmt::Display for TesterReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sent {} received {} lost {} reordered {} duplicates {} corrupt {} foreign {}",
            self.sent,
            self.received,
            self.lost,
            self.reordered,
            self.duplicates,
            self.corrupt,
            self.foreign
        )
    }
}

const MAGIC: u32 = 0x51c3_7e57;
const HDR: usize = 42;

impl Tester {
    pub fn new(config: TesterConfig) -> Arc<Tester> {
        Arc::new(Tester {
            config,
            streams: Mutex::new(Vec::new()),
            received: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            corrupt: AtomicU64::new(0),
            foreign: AtomicU64::new(0),
            reordered: AtomicU64::new(0),
            start: crate::tsc::rdtsc(),
        })
    }

    pub fn config(&self) -> &TesterConfig {
        &self.config
    }

    pub fn add_stream(&self) -> u16 {
        let mut s = self.streams.lock().unwrap();
        s.push(Arc::new(Stream {
            claimed: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            next_seq: (0..self.config.flows).map(|_| AtomicU64::new(0)).collect(),
        }));
        (s.len() - 1) as u16
    }

    pub fn flow_tuple(&self, stream: u16, flow: u32) -> FlowTuple {
        FlowTuple {
            src: IpAddr::V4(Ipv4Addr::new(
                10,
                stream as u8,
                (flow >> 8) as u8,
                flow as u8,
            )),
            dst: IpAddr::V4(Ipv4Addr::new(192, 168, stream as u8, 1)),
            src_port: 1024 + (flow % 50000) as u16,
            dst_port: 5000,
            proto: if self.config.l4 == L4::Tcp { 6 } else { 17 },
        }
    }

    pub fn generator(self: &Arc<Self>, stream: u16, flows: Vec<u32>) -> Generator {
        let st = Arc::clone(&self.streams.lock().unwrap()[stream as usize]);
        Generator {
            tester: Arc::clone(self),
            stream,
            st,
            flows,
            next: 0,
            last: None,
        }
    }

    pub fn checker(self: &Arc<Self>) -> Checker {
        Checker {
            tester: Arc::clone(self),
            last_seq: Vec::new(),
        }
    }

    pub fn report(&self) -> TesterReport {
        let (mut sent, mut bytes) = (0, 0);
        for s in self.streams.lock().unwrap().iter() {
            sent += s.sent.load(Ordering::Relaxed);
            bytes += s.bytes.load(Ordering::Relaxed);
        }
        let received = self.received.load(Ordering::Relaxed);
        TesterReport {
            sent,
            received,
            lost: sent.saturating_sub(received),
            reordered: self.reordered.load(Ordering::Relaxed),
            duplicates: 0,
            corrupt: self.corrupt.load(Ordering::Relaxed),
            foreign: self.foreign.load(Ordering::Relaxed),
            bytes_sent: bytes,
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
        }
    }
}

pub struct Generator {
    tester: Arc<Tester>,
    stream: u16,
    st: Arc<Stream>,
    flows: Vec<u32>,
    next: usize,
    last: Option<u32>,
}

impl Generator {
    pub fn frame_len(&self) -> usize {
        match self.tester.config.size {
            FrameSize::Fixed(n) => n as usize,
            FrameSize::Imix => 64,
        }
    }

    pub fn ready(&self, now_tsc: u64) -> u64 {
        let left = match self.tester.config.count {
            Some(c) => c.saturating_sub(self.st.claimed.load(Ordering::Relaxed)),
            None => u64::MAX,
        };
        match self.tester.config.rate_pps {
            None => left,
            Some(r) => {
                let secs = crate::tsc::cycles_to_secs(now_tsc.saturating_sub(self.tester.start));
                let due = (secs * r) as u64;
                left.min(due.saturating_sub(self.st.claimed.load(Ordering::Relaxed)))
            }
        }
    }

    pub fn fill(&mut self, buf: &mut [u8], now_tsc: u64) -> Option<usize> {
        let len = self.frame_len();
        if self.flows.is_empty() || buf.len() < len || self.ready(now_tsc) == 0 {
            return None;
        }
        if let Some(c) = self.tester.config.count
            && self.st.claimed.fetch_add(1, Ordering::Relaxed) >= c
        {
            self.st.claimed.fetch_sub(1, Ordering::Relaxed);
            return None;
        } else if self.tester.config.count.is_none() {
            self.st.claimed.fetch_add(1, Ordering::Relaxed);
        }
        let flow = self.flows[self.next];
        self.next = (self.next + 1) % self.flows.len();
        let seq = self.st.next_seq[flow as usize].fetch_add(1, Ordering::Relaxed);
        let t = self.tester.flow_tuple(self.stream, flow);
        let c = &self.tester.config;
        let b = &mut buf[..len];
        b[0..6].copy_from_slice(&c.dst_mac.0);
        b[6..12].copy_from_slice(&c.src_mac.0);
        b[12..14].copy_from_slice(&[0x08, 0]);
        let ip_len = (len - 14) as u16;
        b[14..34].fill(0);
        b[14] = 0x45;
        b[16..18].copy_from_slice(&ip_len.to_be_bytes());
        b[22] = 64;
        b[23] = t.proto;
        let (IpAddr::V4(s), IpAddr::V4(d)) = (t.src, t.dst) else {
            unreachable!()
        };
        b[26..30].copy_from_slice(&s.octets());
        b[30..34].copy_from_slice(&d.octets());
        let ck = crate::net::checksum::checksum(&b[14..34]);
        b[24..26].copy_from_slice(&ck.to_be_bytes());
        b[34..36].copy_from_slice(&t.src_port.to_be_bytes());
        b[36..38].copy_from_slice(&t.dst_port.to_be_bytes());
        b[38..42].fill(0);
        b[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
        b[HDR..HDR + 4].copy_from_slice(&MAGIC.to_be_bytes());
        b[HDR + 4..HDR + 6].copy_from_slice(&self.stream.to_be_bytes());
        b[HDR + 6..HDR + 10].copy_from_slice(&flow.to_be_bytes());
        b[HDR + 10..HDR + 18].copy_from_slice(&seq.to_be_bytes());
        for (i, x) in b[HDR + 18..].iter_mut().enumerate() {
            *x = (seq as u8).wrapping_add(i as u8);
        }
        self.st.sent.fetch_add(1, Ordering::Relaxed);
        self.st.bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.last = Some(flow);
        Some(len)
    }

    pub fn cancel(&mut self) {
        if let Some(flow) = self.last.take() {
            self.st.next_seq[flow as usize].fetch_sub(1, Ordering::Relaxed);
            self.st.claimed.fetch_sub(1, Ordering::Relaxed);
            self.st.sent.fetch_sub(1, Ordering::Relaxed);
            self.st
                .bytes
                .fetch_sub(self.frame_len() as u64, Ordering::Relaxed);
            self.next = (self.next + self.flows.len() - 1) % self.flows.len();
        }
    }
}

pub struct Checker {
    tester: Arc<Tester>,
    last_seq: Vec<(u16, u32, u64)>,
}

impl Checker {
    pub fn check(&mut self, frame: &[u8]) {
        let t = &self.tester;
        if frame.len() < HDR + 18 || frame[HDR..HDR + 4] != MAGIC.to_be_bytes() {
            t.foreign.fetch_add(1, Ordering::Relaxed);
            return;
        }
        t.received.fetch_add(1, Ordering::Relaxed);
        t.bytes_received
            .fetch_add(frame.len() as u64, Ordering::Relaxed);
        let stream = u16::from_be_bytes([frame[HDR + 4], frame[HDR + 5]]);
        let flow = u32::from_be_bytes(frame[HDR + 6..HDR + 10].try_into().unwrap());
        let seq = u64::from_be_bytes(frame[HDR + 10..HDR + 18].try_into().unwrap());
        let ip_ok = crate::net::checksum::checksum(&frame[14..34]) == 0;
        let pat_ok = frame[HDR + 18..]
            .iter()
            .enumerate()
            .all(|(i, x)| *x == (seq as u8).wrapping_add(i as u8));
        if !ip_ok || !pat_ok {
            t.corrupt.fetch_add(1, Ordering::Relaxed);
        }
        match self
            .last_seq
            .iter_mut()
            .find(|(s, f, _)| *s == stream && *f == flow)
        {
            Some(e) => {
                if seq <= e.2 {
                    t.reordered.fetch_add(1, Ordering::Relaxed);
                }
                e.2 = e.2.max(seq);
            }
            None => self.last_seq.push((stream, flow, seq)),
        }
    }
}

static REGISTRY: Mutex<Vec<(String, Weak<Tester>)>> = Mutex::new(Vec::new());

pub fn attach(name: &str, config: Option<TesterConfig>) -> Result<Arc<Tester>, String> {
    let mut r = REGISTRY.lock().unwrap();
    r.retain(|(_, w)| w.strong_count() > 0);
    if let Some(t) = r
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, w)| w.upgrade())
    {
        if let Some(c) = config
            && c != t.config
        {
            return Err(format!("tester '{name}' exists with another configuration"));
        }
        return Ok(t);
    }
    let t = Tester::new(config.unwrap_or_default());
    r.push((name.to_string(), Arc::downgrade(&t)));
    Ok(t)
}
