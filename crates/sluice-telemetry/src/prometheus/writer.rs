//! The Prometheus text exposition format, version 0.0.4.
//!
//! A [`MetricsWriter`] gathers samples by metric family and renders every
//! family in one piece: its `# HELP` line, its `# TYPE` line, then its
//! samples, in the order the families were first written to. Samples of
//! one family may be written at any point (a port's counters, then the
//! next port's), and still come out together, as the format requires.
//!
//! ```
//! use sluice_telemetry::prometheus::MetricsWriter;
//!
//! let mut w = MetricsWriter::new();
//! for port in ["0", "1"] {
//!     w.counter("sluice_port_rx_packets_total", "Packets received.", &[("port", port)], 7u64);
//!     w.gauge("sluice_port_rx_queues", "Rx queues configured.", &[("port", port)], 1u64);
//! }
//! let expected = [
//!     "# HELP sluice_port_rx_packets_total Packets received.",
//!     "# TYPE sluice_port_rx_packets_total counter",
//!     "sluice_port_rx_packets_total{port=\"0\"} 7",
//!     "sluice_port_rx_packets_total{port=\"1\"} 7",
//!     "# HELP sluice_port_rx_queues Rx queues configured.",
//!     "# TYPE sluice_port_rx_queues gauge",
//!     "sluice_port_rx_queues{port=\"0\"} 1",
//!     "sluice_port_rx_queues{port=\"1\"} 1",
//! ];
//! assert_eq!(w.render(), expected.join("\n") + "\n");
//! ```
//!
//! A metric or label name outside the format's alphabet, a counter not
//! named `*_total`, a counter or gauge named like a histogram's series
//! (`*_bucket`, `*_sum`, `*_count`), a family written with two types, or
//! a sample written twice is a mistake in the caller: debug builds stop on it
//! (`debug_assert!`), release builds leave the sample out, so the
//! exposition a scraper reads stays valid.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// A sample's value: an integer is written exactly (a `u64` counter past
/// 2^53 keeps every digit), a float as Prometheus reads it (`+Inf`,
/// `-Inf`, `NaN` for the special values).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// A count.
    Unsigned(u64),
    /// A signed integer.
    Signed(i64),
    /// A measurement.
    Float(f64),
}

impl From<u64> for Number {
    fn from(v: u64) -> Number {
        Number::Unsigned(v)
    }
}

impl From<u32> for Number {
    fn from(v: u32) -> Number {
        Number::Unsigned(v.into())
    }
}

impl From<u16> for Number {
    fn from(v: u16) -> Number {
        Number::Unsigned(v.into())
    }
}

impl From<usize> for Number {
    fn from(v: usize) -> Number {
        Number::Unsigned(v as u64)
    }
}

impl From<i64> for Number {
    fn from(v: i64) -> Number {
        Number::Signed(v)
    }
}

impl From<f64> for Number {
    fn from(v: f64) -> Number {
        Number::Float(v)
    }
}

impl std::fmt::Display for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Number::Unsigned(v) => write!(f, "{v}"),
            Number::Signed(v) => write!(f, "{v}"),
            Number::Float(v) => write_float(f, v),
        }
    }
}

/// Writes `v` as the exposition format reads a float.
fn write_float(out: &mut impl std::fmt::Write, v: f64) -> std::fmt::Result {
    if v.is_nan() {
        out.write_str("NaN")
    } else if v == f64::INFINITY {
        out.write_str("+Inf")
    } else if v == f64::NEG_INFINITY {
        out.write_str("-Inf")
    } else if v == 0.0 || (1e-4..1e21).contains(&v.abs()) {
        // The shortest form that reads back exactly, without an exponent
        // (`1`, `0.25`, `0.0001`), as Prometheus' own clients write it.
        write!(out, "{v}")
    } else {
        // Far from 1 the same digits with an exponent (`1e-6`, `1e300`).
        write!(out, "{v:e}")
    }
}

/// The type of a metric family (`# TYPE` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A count that only goes up (named `*_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Observations counted in cumulative buckets, with their sum and count.
    Histogram,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        }
    }
}

/// One metric family: its help, its type and its samples' lines so far.
#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    kind: MetricType,
    /// The label sets written, so a sample written twice is caught.
    label_sets: HashSet<String>,
    lines: String,
}

/// Builds one exposition: families gathered as samples are written, then
/// rendered each in one piece ([`render`](Self::render)).
#[derive(Debug, Default)]
pub struct MetricsWriter {
    families: Vec<Family>,
    index: HashMap<String, usize>,
}

impl MetricsWriter {
    /// A writer with no families.
    pub fn new() -> MetricsWriter {
        MetricsWriter::default()
    }

    /// Writes a counter sample: `name` ends in `_total`.
    pub fn counter(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        value: impl Into<Number>,
    ) {
        let named_total = name.ends_with("_total");
        debug_assert!(named_total, "counter {name:?} is not named *_total");
        if !named_total {
            return;
        }
        self.sample(name, help, MetricType::Counter, labels, value.into());
    }

    /// Writes a gauge sample.
    pub fn gauge(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        value: impl Into<Number>,
    ) {
        self.sample(name, help, MetricType::Gauge, labels, value.into());
    }

    /// Writes a histogram: `buckets` are `(upper bound, observations at or
    /// below it)` with bounds rising and counts cumulative; the `+Inf`
    /// bucket is `count` (added unless `buckets` ends with it). `sum` is
    /// the observations' sum and `count` how many there were.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        let rising = buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
            && buckets.iter().all(|&(le, n)| !le.is_nan() && n <= count)
            && buckets
                .last()
                .is_none_or(|&(le, n)| le != f64::INFINITY || n == count);
        debug_assert!(
            rising,
            "histogram {name:?}: buckets {buckets:?} are not cumulative up to {count}"
        );
        let le_free = labels.iter().all(|&(l, _)| l != "le");
        debug_assert!(le_free, "histogram {name:?} has a label named le");
        if !rising || !le_free {
            return;
        }
        let Some(label_text) = label_text(labels) else {
            return;
        };
        let Some(family) = self.family(name, help, MetricType::Histogram) else {
            return;
        };
        if !first_of(family, &label_text) {
            return;
        }
        let with_le = |le: f64| {
            let mut s = label_text.clone();
            if !s.is_empty() {
                s.push(',');
            }
            s.push_str("le=\"");
            // `write_float` into a String cannot fail.
            let _ = write_float(&mut s, le);
            s.push('"');
            s
        };
        let out = &mut family.lines;
        for &(le, n) in buckets {
            // Writing to a String cannot fail (here and below).
            let _ = writeln!(out, "{name}_bucket{{{}}} {n}", with_le(le));
        }
        if buckets.last().is_none_or(|&(le, _)| le != f64::INFINITY) {
            let _ = writeln!(out, "{name}_bucket{{{}}} {count}", with_le(f64::INFINITY));
        }
        let braces = braced(&label_text);
        let _ = writeln!(out, "{name}_sum{braces} {}", Number::Float(sum));
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }

    /// The exposition: every family's help, type and samples, families in
    /// the order first written.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.families {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
            out.push_str(&f.lines);
        }
        out
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// Writes one counter or gauge sample.
    fn sample(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        labels: &[(&str, &str)],
        value: Number,
    ) {
        // Names a histogram's series take, which scrapers read as one.
        let reserved = ["_bucket", "_sum", "_count"]
            .iter()
            .any(|suffix| name.ends_with(suffix));
        debug_assert!(!reserved, "{name:?} ends like a histogram's series");
        if reserved {
            return;
        }
        let Some(label_text) = label_text(labels) else {
            return;
        };
        let Some(family) = self.family(name, help, kind) else {
            return;
        };
        if !first_of(family, &label_text) {
            return;
        }
        // Writing to a String cannot fail.
        let _ = writeln!(family.lines, "{name}{} {value}", braced(&label_text));
    }

    /// The family `name` of type `kind`, made on its first sample; `None`
    /// (a caller's mistake) when the name is not one or the family has
    /// another type.
    fn family(&mut self, name: &str, help: &str, kind: MetricType) -> Option<&mut Family> {
        let valid = is_metric_name(name);
        debug_assert!(valid, "{name:?} is not a metric name");
        if !valid {
            return None;
        }
        let at = match self.index.get(name) {
            Some(&at) => at,
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    help: help.to_string(),
                    kind,
                    label_sets: HashSet::new(),
                    lines: String::new(),
                });
                self.index.insert(name.to_string(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let family = &mut self.families[at];
        let same_type = family.kind == kind;
        debug_assert!(
            same_type,
            "metric {name:?} written as a {} and as a {}",
            family.kind.as_str(),
            kind.as_str()
        );
        same_type.then_some(family)
    }
}

/// Records `label_text` as written in `family`; false (a caller's mistake)
/// when it already was.
fn first_of(family: &mut Family, label_text: &str) -> bool {
    let first = family.label_sets.insert(label_text.to_string());
    debug_assert!(
        first,
        "metric {:?} written twice with labels {{{label_text}}}",
        family.name
    );
    first
}

/// `{labels}`, or nothing when there are none.
fn braced(label_text: &str) -> String {
    if label_text.is_empty() {
        String::new()
    } else {
        format!("{{{label_text}}}")
    }
}

/// `a="x",b="y"` with the values escaped; `None` (a caller's mistake)
/// when a label name is not one or appears twice.
fn label_text(labels: &[(&str, &str)]) -> Option<String> {
    let mut out = String::new();
    for (i, &(name, value)) in labels.iter().enumerate() {
        let valid = is_label_name(name) && labels[..i].iter().all(|&(n, _)| n != name);
        debug_assert!(valid, "{name:?} is not a label name or appears twice");
        if !valid {
            return None;
        }
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    Some(out)
}

/// Help text with `\` and line feeds escaped.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__` (reserved for
/// Prometheus itself).
pub fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_whole_and_in_first_written_order() {
        let mut w = MetricsWriter::new();
        w.counter("b_total", "B.", &[("port", "0")], 1u64);
        w.gauge("a", "A.", &[], 2.5);
        w.counter("b_total", "B.", &[("port", "1")], u64::MAX);
        w.gauge("a_signed", "A signed.", &[], -3i64);
        assert_eq!(
            w.render(),
            "# HELP b_total B.\n\
             # TYPE b_total counter\n\
             b_total{port=\"0\"} 1\n\
             b_total{port=\"1\"} 18446744073709551615\n\
             # HELP a A.\n\
             # TYPE a gauge\n\
             a 2.5\n\
             # HELP a_signed A signed.\n\
             # TYPE a_signed gauge\n\
             a_signed -3\n"
        );
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut w = MetricsWriter::new();
        w.gauge(
            "sluice_port_info",
            "Line one\nback\\slash \"quoted\"",
            &[("name", "pcap:a\\b\"c\"\nd"), ("driver", "pcap")],
            1u64,
        );
        assert_eq!(
            w.render(),
            "# HELP sluice_port_info Line one\\nback\\\\slash \"quoted\"\n\
             # TYPE sluice_port_info gauge\n\
             sluice_port_info{name=\"pcap:a\\\\b\\\"c\\\"\\nd\",driver=\"pcap\"} 1\n"
        );
    }

    #[test]
    fn floats_are_written_as_prometheus_reads_them() {
        let mut w = MetricsWriter::new();
        let inputs = [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            0.0001,
            0.000_001_5,
            1e300,
            3.0,
            -0.0,
        ];
        for (i, v) in inputs.into_iter().enumerate() {
            w.gauge("g", "G.", &[("i", &i.to_string())], v);
        }
        let text = w.render();
        let values: Vec<&str> = text
            .lines()
            .skip(2)
            .map(|l| l.rsplit(' ').next().unwrap())
            .collect();
        assert_eq!(
            values,
            [
                "+Inf", "-Inf", "NaN", "0.0001", "1.5e-6", "1e300", "3", "-0"
            ]
        );
    }

    #[test]
    fn histograms_get_an_inf_bucket_a_sum_and_a_count() {
        let mut w = MetricsWriter::new();
        let buckets = [(0.000_01, 2), (0.000_1, 5), (0.001, 5)];
        w.histogram(
            "sluice_latency_seconds",
            "One-way latency.",
            &[("port", "0")],
            &buckets,
            0.0042,
            6,
        );
        w.histogram("h", "H.", &[], &[(1.0, 1), (f64::INFINITY, 2)], 3.0, 2);
        w.histogram("e", "Empty.", &[], &[], 0.0, 0);
        assert_eq!(
            w.render(),
            "# HELP sluice_latency_seconds One-way latency.\n\
             # TYPE sluice_latency_seconds histogram\n\
             sluice_latency_seconds_bucket{port=\"0\",le=\"1e-5\"} 2\n\
             sluice_latency_seconds_bucket{port=\"0\",le=\"0.0001\"} 5\n\
             sluice_latency_seconds_bucket{port=\"0\",le=\"0.001\"} 5\n\
             sluice_latency_seconds_bucket{port=\"0\",le=\"+Inf\"} 6\n\
             sluice_latency_seconds_sum{port=\"0\"} 0.0042\n\
             sluice_latency_seconds_count{port=\"0\"} 6\n\
             # HELP h H.\n\
             # TYPE h histogram\n\
             h_bucket{le=\"1\"} 1\n\
             h_bucket{le=\"+Inf\"} 2\n\
             h_sum 3\n\
             h_count 2\n\
             # HELP e Empty.\n\
             # TYPE e histogram\n\
             e_bucket{le=\"+Inf\"} 0\n\
             e_sum 0\n\
             e_count 0\n"
        );
    }

    #[test]
    fn names_follow_the_format() {
        for good in ["a", "_a", ":a", "a:b_c9", "sluice_port_rx_packets_total"] {
            assert!(is_metric_name(good), "{good}");
        }
        for bad in ["", "9a", "a-b", "a b", "é", "a.b"] {
            assert!(!is_metric_name(bad), "{bad}");
        }
        for good in ["a", "_a", "port", "le9"] {
            assert!(is_label_name(good), "{good}");
        }
        for bad in ["", "9a", "a:b", "__name__", "a-b"] {
            assert!(!is_label_name(bad), "{bad}");
        }
    }

    /// A bad name stops a debug build and leaves the sample out of a
    /// release build's exposition.
    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "is not a metric name"))]
    fn a_bad_metric_name_is_left_out() {
        let mut w = MetricsWriter::new();
        w.gauge("bad-name", "Bad.", &[], 1u64);
        w.gauge("good", "Good.", &[], 1u64);
        assert_eq!(w.render(), "# HELP good Good.\n# TYPE good gauge\ngood 1\n");
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "is not a label name"))]
    fn a_bad_label_name_is_left_out() {
        let mut w = MetricsWriter::new();
        w.gauge("g", "G.", &[("bad label", "x")], 1u64);
        w.gauge("g", "G.", &[("ok", "x")], 2u64);
        assert_eq!(w.render(), "# HELP g G.\n# TYPE g gauge\ng{ok=\"x\"} 2\n");
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "is not named *_total"))]
    fn a_counter_not_named_total_is_left_out() {
        let mut w = MetricsWriter::new();
        w.counter("packets", "Packets.", &[], 1u64);
        assert!(w.is_empty());
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "written as a gauge and as a counter")
    )]
    fn a_family_keeps_its_first_type() {
        let mut w = MetricsWriter::new();
        w.gauge("x_total", "X.", &[], 1u64);
        w.counter("x_total", "X.", &[("a", "b")], 2u64);
        assert_eq!(
            w.render(),
            "# HELP x_total X.\n# TYPE x_total gauge\nx_total 1\n"
        );
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "ends like a histogram's series")
    )]
    fn a_gauge_named_like_a_histogram_series_is_left_out() {
        let mut w = MetricsWriter::new();
        w.gauge("sluice_pool_count", "Pools.", &[], 1u64);
        assert!(w.is_empty());
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "written twice"))]
    fn a_sample_written_twice_keeps_its_first_value() {
        let mut w = MetricsWriter::new();
        w.gauge("g", "G.", &[("port", "0")], 1u64);
        w.gauge("g", "G.", &[("port", "0")], 2u64);
        assert_eq!(w.render(), "# HELP g G.\n# TYPE g gauge\ng{port=\"0\"} 1\n");
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "not cumulative"))]
    fn a_histogram_whose_buckets_fall_is_left_out() {
        let mut w = MetricsWriter::new();
        w.histogram("h", "H.", &[], &[(1.0, 3), (2.0, 2)], 1.0, 3);
        assert!(w.is_empty());
    }
}
