//! Latency in what a command prints: a tester's per-port one-way latency
//! as summaries and lines, and `--hist-out FILE`: the histograms as an
//! HdrHistogram interval log (one interval per period and port, tagged
//! `port<N>`, V2 deflate encoding) and, at the end, an SVG plot of the
//! whole run's latency by percentile next to it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use plotters::prelude::*;
use sluice::tester::latency::format_ns;
use sluice::tester::{PortLatency, Tester};

use super::observe::snapshot::LatencySummary;

/// The summary of one port's histogram.
pub fn summary_of(l: &PortLatency) -> LatencySummary {
    let s = l.summary();
    LatencySummary {
        port: l.port,
        samples: s.samples,
        min_ns: s.min_ns,
        p50_ns: s.p50_ns,
        p90_ns: s.p90_ns,
        p99_ns: s.p99_ns,
        p999_ns: s.p999_ns,
        max_ns: s.max_ns,
    }
}

/// The summaries of every port of `tester` that has a checker.
pub fn summaries(tester: &Tester) -> Vec<LatencySummary> {
    tester.latency().iter().map(summary_of).collect()
}

/// One line per port: `latency port 0: samples 1000, min 1.2 us, ...`.
pub fn lines(latency: &[LatencySummary]) -> Vec<String> {
    latency
        .iter()
        .map(|s| {
            let figures = sluice::tester::LatencySummary {
                samples: s.samples,
                min_ns: s.min_ns,
                p50_ns: s.p50_ns,
                p90_ns: s.p90_ns,
                p99_ns: s.p99_ns,
                p999_ns: s.p999_ns,
                max_ns: s.max_ns,
            };
            format!("latency port {}: {figures}", s.port)
        })
        .collect()
}

/// The plot's path: `log` with its extension replaced by `.svg` (or `.svg`
/// appended when that would name `log` itself).
pub fn svg_path(log: &Path) -> PathBuf {
    let p = log.with_extension("svg");
    if p == log {
        let mut s = log.as_os_str().to_owned();
        s.push(".svg");
        PathBuf::from(s)
    } else {
        p
    }
}

/// `--hist-out`: the interval log being written, and the histograms as of
/// its last interval.
pub struct HistOut {
    path: PathBuf,
    file: BufWriter<File>,
    serializer: V2DeflateSerializer,
    started: Instant,
    interval_start: Instant,
    last: Vec<PortLatency>,
}

impl HistOut {
    /// Creates `path` and writes the log's header: `command` as a comment,
    /// the start as both StartTime and BaseTime (interval timestamps are
    /// seconds since it).
    pub fn create(path: &Path, command: &str) -> Result<HistOut, String> {
        let err = |e: &dyn std::fmt::Display| format!("--hist-out {}: {e}", path.display());
        let mut file = BufWriter::new(File::create(path).map_err(|e| err(&e))?);
        let mut serializer = V2DeflateSerializer::new();
        let now = SystemTime::now();
        IntervalLogWriterBuilder::new()
            .add_comment(&format!(
                "sluice {command}: one-way latency per port in nanoseconds"
            ))
            .with_start_time(now)
            .with_base_time(now)
            .begin_log_with(&mut file, &mut serializer)
            .map_err(|e| err(&e))?;
        let started = Instant::now();
        Ok(HistOut {
            path: path.to_owned(),
            file,
            serializer,
            started,
            interval_start: started,
            last: Vec::new(),
        })
    }

    /// Writes one interval: per port of `latency` (cumulative histograms),
    /// what it gained since the last interval.
    pub fn interval(&mut self, latency: &[PortLatency]) -> Result<(), String> {
        let now = Instant::now();
        let start = self.interval_start.duration_since(self.started);
        let length = now.duration_since(self.interval_start);
        let err = |e: &dyn std::fmt::Display| format!("--hist-out {}: {e}", self.path.display());
        let mut writer = IntervalLogWriterBuilder::new()
            .begin_log_with(&mut self.file, &mut self.serializer)
            .map_err(|e| err(&e))?;
        for l in latency {
            let mut gained = l.histogram.clone();
            if let Some(before) = self.last.iter().find(|b| b.port == l.port) {
                // Cumulative histograms only grow; should one not have, its
                // whole content is the interval's.
                if gained.subtract(&before.histogram).is_err() {
                    gained = l.histogram.clone();
                }
            }
            let tag = format!("port{}", l.port);
            writer
                .write_histogram(&gained, start, length, Tag::new(&tag))
                .map_err(|e| err(&e))?;
        }
        self.file.flush().map_err(|e| err(&e))?;
        self.last = latency.to_vec();
        self.interval_start = now;
        Ok(())
    }

    /// Writes the last interval, closes the log and plots `latency` (the
    /// whole run's) next to it; returns the plot's path.
    pub fn finish(mut self, latency: &[PortLatency]) -> Result<PathBuf, String> {
        self.interval(latency)?;
        let svg = svg_path(&self.path);
        write_svg(&svg, latency)?;
        Ok(svg)
    }
}

/// The unit the plot's y axis speaks in for latencies up to `max_ns`: its
/// name and nanoseconds.
fn plot_unit(max_ns: u64) -> (&'static str, f64) {
    match max_ns {
        0..10_000 => ("ns", 1.0),
        10_000..10_000_000 => ("us", 1e3),
        10_000_000..10_000_000_000 => ("ms", 1e6),
        _ => ("s", 1e9),
    }
}

/// The latency of every port of `testers`, by port (a port is on one
/// tester; should two testers report one, their histograms are merged).
pub fn all_ports(testers: &[Arc<Tester>]) -> Vec<PortLatency> {
    let mut out: Vec<PortLatency> = Vec::new();
    for l in testers.iter().flat_map(|t| t.latency()) {
        match out.iter_mut().find(|o| o.port == l.port) {
            Some(o) => {
                // Same bounds on both sides: cannot fail.
                let _ = o.histogram.add(&l.histogram);
            }
            None => out.push(l),
        }
    }
    out.sort_by_key(|l| l.port);
    out
}

/// `--hist-out` of a forwarding command: a thread that writes an interval
/// of the testers' latency every period until [`finish`](Self::finish)
/// (or drop) stops it.
pub struct HistOutThread {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<Result<HistOut, String>>>,
}

impl HistOutThread {
    /// Starts writing `out` every `period` from `testers`.
    pub fn spawn(
        out: HistOut,
        testers: Vec<Arc<Tester>>,
        period: Duration,
    ) -> Result<HistOutThread, String> {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("hist-out".into())
            .spawn(move || {
                let mut out = out;
                // Until told to stop (the sender dropped): one interval per
                // period.
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    out.interval(&all_ports(&testers))?;
                }
                Ok(out)
            })
            .map_err(|e| format!("--hist-out: cannot start its thread: {e}"))?;
        Ok(HistOutThread {
            stop: Some(stop),
            handle: Some(handle),
        })
    }

    /// Stops the thread, writes the last interval from `testers` (their
    /// checkers gone, so every sample is in) and the plot; the plot's
    /// path.
    pub fn finish(mut self, testers: &[Arc<Tester>]) -> Result<PathBuf, String> {
        self.stop.take();
        let handle = self.handle.take().expect("taken only here and in drop");
        let out = handle
            .join()
            .map_err(|_| "--hist-out: its thread panicked".to_string())??;
        out.finish(&all_ports(testers))
    }
}

impl Drop for HistOutThread {
    /// Stops the thread (a run that ended with an error).
    fn drop(&mut self) {
        self.stop.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Quantiles plotted, in `unit` nanoseconds: from 0 to 1 - 1e-6, evenly on
/// the `1/(1-q)` scale.
fn plot_points(h: &Histogram<u64>, unit: f64) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    // 20 points per decade of 1/(1-q), up to 10^6.
    (0..=120)
        .map(|i| {
            let x = 10f64.powf(f64::from(i) / 20.0);
            let q = 1.0 - 1.0 / x;
            (x, h.value_at_quantile(q) as f64 / unit)
        })
        .collect()
}

/// The percentile label of `x = 1/(1-q)`: `0%`, `90%`, `99%`, `99.9%`, ...
fn percentile_label(x: f64) -> String {
    let p = 100.0 * (1.0 - 1.0 / x);
    let digits = (x.log10().round() as i32 - 2).max(0) as usize;
    format!("{p:.digits$}%")
}

/// Writes the percentile plot of `latency` to `path` as SVG: x the
/// percentile on the `1/(1-p)` scale (0, 90, 99, 99.9 ... 99.9999 %), y
/// the latency in a unit that suits its largest value, one line per port.
pub fn write_svg(path: &Path, latency: &[PortLatency]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let max_ns = latency
        .iter()
        .filter(|l| !l.histogram.is_empty())
        .map(|l| l.histogram.max())
        .max()
        .unwrap_or(0);
    let (unit_name, unit) = plot_unit(max_ns);
    let series: Vec<(u16, Vec<(f64, f64)>)> = latency
        .iter()
        .map(|l| (l.port, plot_points(&l.histogram, unit)))
        .collect();
    let top = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold(0.0f64, f64::max);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("one-way latency by percentile", ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((1f64..1e6f64).log_scale(), 0f64..(top * 1.05).max(1e-3))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .x_desc("percentile")
        .y_desc(format!("latency ({unit_name})"))
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (port, points)) in series.into_iter().enumerate() {
        if points.is_empty() {
            continue;
        }
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(std::iter::once(PathElement::new(
                points,
                color.stroke_width(2),
            )))
            .map_err(|e| err(&e))?
            .label(format!("port {port}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// A short form of a latency summary for a live line: `p50 1.2 us p99 3.4
/// us max 10.0 us (1000 samples)`.
pub fn live_figures(s: &LatencySummary) -> String {
    if s.samples == 0 {
        return "no samples".into();
    }
    format!(
        "p50 {} p99 {} max {} ({} samples)",
        format_ns(s.p50_ns),
        format_ns(s.p99_ns),
        format_ns(s.max_ns),
        s.samples
    )
}

#[cfg(test)]
mod tests {
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use sluice::tester::latency::latency_histogram;

    use super::*;

    fn port(port: u16, values: &[u64]) -> PortLatency {
        let mut histogram = latency_histogram();
        for &v in values {
            histogram.record(v).unwrap();
        }
        PortLatency { port, histogram }
    }

    #[test]
    fn the_svg_goes_beside_the_log() {
        assert_eq!(svg_path(Path::new("/t/lat.hlog")), Path::new("/t/lat.svg"));
        assert_eq!(svg_path(Path::new("lat")), Path::new("lat.svg"));
        assert_eq!(svg_path(Path::new("lat.svg")), Path::new("lat.svg.svg"));
    }

    #[test]
    fn percentiles_are_labelled_by_their_nines() {
        assert_eq!(percentile_label(1.0), "0%");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(1e6), "99.9999%");
    }

    #[test]
    fn intervals_hold_what_each_period_added_and_read_back() {
        let dir = std::env::temp_dir().join(format!("sluice-hist-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lat.hlog");
        let mut out = HistOut::create(&path, "gen").unwrap();
        out.interval(&[port(0, &[1000, 2000]), port(1, &[])])
            .unwrap();
        let svg = out
            .finish(&[port(0, &[1000, 2000, 3000]), port(1, &[5000])])
            .unwrap();
        let text = std::fs::read(&path).unwrap();
        let mut counts = Vec::new();
        for e in IntervalLogIterator::new(&text) {
            if let LogEntry::Interval(i) = e.unwrap() {
                let bytes = base64_decode(i.encoded_histogram());
                let h: Histogram<u64> = Deserializer::new()
                    .deserialize(&mut bytes.as_slice())
                    .unwrap();
                counts.push((i.tag().unwrap().as_str().to_owned(), h.len()));
            }
        }
        let want = [("port0", 2), ("port1", 0), ("port0", 1), ("port1", 1)];
        let want: Vec<(String, u64)> = want.iter().map(|&(t, n)| (t.into(), n)).collect();
        assert_eq!(counts, want);
        let plot = std::fs::read_to_string(&svg).unwrap();
        assert!(plot.starts_with("<svg"), "{}", &plot[..plot.len().min(80)]);
        assert!(plot.contains("port 0") && plot.contains("port 1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Standard base64 (the interval log's encoding), padding allowed.
    fn base64_decode(s: &str) -> Vec<u8> {
        let value = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        };
        let mut out = Vec::new();
        let (mut acc, mut bits) = (0u32, 0);
        for c in s.bytes().filter(|&c| c != b'=') {
            acc = acc << 6 | u32::from(value(c));
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        out
    }
}
