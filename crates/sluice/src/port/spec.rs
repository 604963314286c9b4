//! Port spec strings: `driver:key=value,key=value`, the way DPDK names virtual
//! devices (`soft:gen=udp,flows=1024,size=64`, `pair:name=p0`, `null`,
//! `pcap:rx=in.pcap,tx=out.pcap`).
//!
//! Parsing is in two steps. [`PortSpec::parse`] checks the syntax: a driver
//! name, then comma-separated `key=value` arguments, each key once. A driver
//! then reads its arguments through [`SpecArgs`], which converts values,
//! checks ranges and, at [`finish`](SpecArgs::finish), rejects any key the
//! driver did not ask for. Every error names the spec and the offending part;
//! nothing panics.
//!
//! Values run to the next comma, so a value cannot contain one.
//!
//! ```
//! use sluice::port::spec::{PortSpec, SpecArgs};
//!
//! let spec: PortSpec = "soft:flows=1024,size=64".parse().unwrap();
//! assert_eq!(spec.driver(), "soft");
//! let mut args = SpecArgs::new(&spec, &["flows", "size", "gen"]);
//! assert_eq!(args.u64_in("flows", 1..=1 << 20).unwrap(), Some(1024));
//! assert_eq!(args.u64_in("size", 60..=9000).unwrap(), Some(64));
//! assert_eq!(args.str("gen"), None);
//! args.finish().unwrap();
//!
//! let err = "soft:flow=8".parse::<PortSpec>().map(|s| {
//!     let args = SpecArgs::new(&s, &["flows", "size"]);
//!     args.finish()
//! });
//! assert_eq!(
//!     err.unwrap().unwrap_err().to_string(),
//!     "port spec 'soft:flow=8': driver 'soft' has no key 'flow' (keys: flows, size)"
//! );
//! ```

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// A parsed port spec: a driver name and its arguments, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// The spec as written, for error messages.
    text: String,
    driver: String,
    args: Vec<(String, String)>,
}

/// Why a spec was rejected. The message names the spec and the part at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecError {
    /// The spec was empty (or only spaces).
    Empty,
    /// The driver name is not lowercase letters, digits and `_`, starting
    /// with a letter.
    BadDriverName {
        /// The spec.
        spec: String,
        /// The driver name as written.
        driver: String,
    },
    /// No driver of that name exists.
    UnknownDriver {
        /// The spec.
        spec: String,
        /// The driver name.
        driver: String,
        /// The drivers that exist.
        known: Vec<String>,
    },
    /// An argument is not `key=value`, or its key is not a valid name.
    MalformedArg {
        /// The spec.
        spec: String,
        /// The argument as written (possibly empty).
        arg: String,
    },
    /// A key has an empty value.
    EmptyValue {
        /// The spec.
        spec: String,
        /// The key.
        key: String,
    },
    /// A key appears twice.
    DuplicateKey {
        /// The spec.
        spec: String,
        /// The key.
        key: String,
    },
    /// The driver has no such key.
    UnknownKey {
        /// The spec.
        spec: String,
        /// The driver.
        driver: String,
        /// The key.
        key: String,
        /// The keys the driver has.
        known: Vec<String>,
    },
    /// A value does not convert, or is out of range.
    BadValue {
        /// The spec.
        spec: String,
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What was expected, e.g. "a number in 1..=4096".
        expected: String,
    },
    /// A required key is missing.
    MissingKey {
        /// The spec.
        spec: String,
        /// The driver.
        driver: String,
        /// The key (or a description such as "rx or tx").
        key: String,
    },
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Empty => write!(f, "empty port spec: expected driver[:key=value,...]"),
            SpecError::BadDriverName { spec, driver } => write!(
                f,
                "port spec '{spec}': driver name '{driver}' must be lowercase letters, digits \
                 or '_', starting with a letter"
            ),
            SpecError::UnknownDriver {
                spec,
                driver,
                known,
            } => write!(
                f,
                "port spec '{spec}': unknown driver '{driver}' (drivers: {})",
                known.join(", ")
            ),
            SpecError::MalformedArg { spec, arg } => {
                write!(f, "port spec '{spec}': argument '{arg}' is not key=value")
            }
            SpecError::EmptyValue { spec, key } => {
                write!(f, "port spec '{spec}': key '{key}' has no value")
            }
            SpecError::DuplicateKey { spec, key } => {
                write!(f, "port spec '{spec}': key '{key}' given twice")
            }
            SpecError::UnknownKey {
                spec,
                driver,
                key,
                known,
            } => {
                if known.is_empty() {
                    write!(
                        f,
                        "port spec '{spec}': driver '{driver}' has no key '{key}' (it takes none)"
                    )
                } else {
                    write!(
                        f,
                        "port spec '{spec}': driver '{driver}' has no key '{key}' (keys: {})",
                        known.join(", ")
                    )
                }
            }
            SpecError::BadValue {
                spec,
                key,
                value,
                expected,
            } => write!(
                f,
                "port spec '{spec}': key '{key}' = '{value}' is not {expected}"
            ),
            SpecError::MissingKey { spec, driver, key } => {
                write!(f, "port spec '{spec}': driver '{driver}' needs key '{key}'")
            }
        }
    }
}

impl std::error::Error for SpecError {}

/// A driver or key name: a lowercase letter, then lowercase letters, digits or `_`.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl PortSpec {
    /// Parses `driver[:key=value,...]`. Spaces around the whole spec are
    /// ignored; inside, they are part of names and values (and so invalid in
    /// names).
    pub fn parse(text: &str) -> Result<PortSpec, SpecError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SpecError::Empty);
        }
        let (driver, rest) = match text.split_once(':') {
            Some((d, r)) => (d, Some(r)),
            None => (text, None),
        };
        if !is_name(driver) {
            return Err(SpecError::BadDriverName {
                spec: text.to_owned(),
                driver: driver.to_owned(),
            });
        }
        let mut args: Vec<(String, String)> = Vec::new();
        if let Some(rest) = rest {
            for arg in rest.split(',') {
                let Some((key, value)) = arg.split_once('=') else {
                    return Err(SpecError::MalformedArg {
                        spec: text.to_owned(),
                        arg: arg.to_owned(),
                    });
                };
                if !is_name(key) {
                    return Err(SpecError::MalformedArg {
                        spec: text.to_owned(),
                        arg: arg.to_owned(),
                    });
                }
                if value.is_empty() {
                    return Err(SpecError::EmptyValue {
                        spec: text.to_owned(),
                        key: key.to_owned(),
                    });
                }
                if args.iter().any(|(k, _)| k == key) {
                    return Err(SpecError::DuplicateKey {
                        spec: text.to_owned(),
                        key: key.to_owned(),
                    });
                }
                args.push((key.to_owned(), value.to_owned()));
            }
        }
        Ok(PortSpec {
            text: text.to_owned(),
            driver: driver.to_owned(),
            args,
        })
    }

    /// The driver name.
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The arguments, in the order given.
    pub fn args(&self) -> &[(String, String)] {
        &self.args
    }

    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The spec as written (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The error for a driver name that no driver answers to, listing `known`.
    pub fn unknown_driver(&self, known: &[&str]) -> SpecError {
        SpecError::UnknownDriver {
            spec: self.text.clone(),
            driver: self.driver.clone(),
            known: known.iter().map(|s| s.to_string()).collect(),
        }
    }
}

impl FromStr for PortSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PortSpec::parse(s)
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.driver)?;
        for (i, (k, v)) in self.args.iter().enumerate() {
            write!(f, "{}{k}={v}", if i == 0 { ':' } else { ',' })?;
        }
        Ok(())
    }
}

/// A driver's typed view of a spec's arguments.
///
/// Each accessor takes a key the driver declared in `known` and marks it used;
/// [`finish`](Self::finish) then rejects any argument nobody asked for, so a
/// misspelt key is an error, never silently ignored.
#[derive(Debug)]
pub struct SpecArgs<'a> {
    spec: &'a PortSpec,
    known: &'static [&'static str],
}

impl<'a> SpecArgs<'a> {
    /// A view of `spec` for a driver whose keys are `known`.
    pub fn new(spec: &'a PortSpec, known: &'static [&'static str]) -> Self {
        SpecArgs { spec, known }
    }

    fn raw(&self, key: &str) -> Option<&'a str> {
        debug_assert!(
            self.known.contains(&key),
            "driver asked for undeclared key '{key}'"
        );
        self.spec.get(key)
    }

    fn bad(&self, key: &str, value: &str, expected: impl Into<String>) -> SpecError {
        SpecError::BadValue {
            spec: self.spec.text.clone(),
            key: key.to_owned(),
            value: value.to_owned(),
            expected: expected.into(),
        }
    }

    /// The value of `key` as text.
    pub fn str(&mut self, key: &str) -> Option<&'a str> {
        self.raw(key)
    }

    /// The value of `key`, or the error that it is required.
    pub fn require(&mut self, key: &str) -> Result<&'a str, SpecError> {
        self.raw(key).ok_or_else(|| SpecError::MissingKey {
            spec: self.spec.text.clone(),
            driver: self.spec.driver.clone(),
            key: key.to_owned(),
        })
    }

    /// The value of `key` as a whole number in `range` (decimal, or hex with
    /// `0x`).
    pub fn u64_in(
        &mut self,
        key: &str,
        range: RangeInclusive<u64>,
    ) -> Result<Option<u64>, SpecError> {
        let Some(v) = self.raw(key) else {
            return Ok(None);
        };
        let parsed = match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => v.parse::<u64>(),
        };
        match parsed {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(self.bad(
                key,
                v,
                format!("a number in {}..={}", range.start(), range.end()),
            )),
        }
    }

    /// The value of `key` as a boolean: `1`/`0`, `true`/`false`, `yes`/`no`,
    /// `on`/`off`.
    pub fn bool(&mut self, key: &str) -> Result<Option<bool>, SpecError> {
        let Some(v) = self.raw(key) else {
            return Ok(None);
        };
        match v {
            "1" | "true" | "yes" | "on" => Ok(Some(true)),
            "0" | "false" | "no" | "off" => Ok(Some(false)),
            _ => Err(self.bad(key, v, "a boolean (1/0, true/false, yes/no, on/off)")),
        }
    }

    /// The value of `key`, which must be one of `choices`.
    pub fn choice(
        &mut self,
        key: &str,
        choices: &'static [&'static str],
    ) -> Result<Option<&'static str>, SpecError> {
        let Some(v) = self.raw(key) else {
            return Ok(None);
        };
        match choices.iter().find(|c| **c == v) {
            Some(c) => Ok(Some(c)),
            None => Err(self.bad(key, v, format!("one of {}", choices.join(", ")))),
        }
    }

    /// The value of `key` parsed with `FromStr`; `expected` describes it in the
    /// error.
    pub fn parse<T: FromStr>(&mut self, key: &str, expected: &str) -> Result<Option<T>, SpecError> {
        let Some(v) = self.raw(key) else {
            return Ok(None);
        };
        v.parse::<T>()
            .map(Some)
            .map_err(|_| self.bad(key, v, expected))
    }

    /// Rejects any argument that is not one of the driver's keys.
    pub fn finish(self) -> Result<(), SpecError> {
        match self
            .spec
            .args
            .iter()
            .find(|(k, _)| !self.known.contains(&k.as_str()))
        {
            None => Ok(()),
            Some((key, _)) => Err(SpecError::UnknownKey {
                spec: self.spec.text.clone(),
                driver: self.spec.driver.clone(),
                key: key.clone(),
                known: self.known.iter().map(|s| s.to_string()).collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> String {
        PortSpec::parse(spec).unwrap_err().to_string()
    }

    #[test]
    fn parses_driver_and_arguments_in_order() {
        let s = PortSpec::parse("  pcap:rx=in.pcap,tx=/tmp/out.pcap  ").unwrap();
        assert_eq!(s.driver(), "pcap");
        assert_eq!(
            s.args(),
            &[
                ("rx".to_owned(), "in.pcap".to_owned()),
                ("tx".to_owned(), "/tmp/out.pcap".to_owned())
            ]
        );
        assert_eq!(s.get("tx"), Some("/tmp/out.pcap"));
        assert_eq!(s.get("loop"), None);
        assert_eq!(s.as_str(), "pcap:rx=in.pcap,tx=/tmp/out.pcap");
        assert_eq!(s.to_string(), "pcap:rx=in.pcap,tx=/tmp/out.pcap");
        let n = PortSpec::parse("null").unwrap();
        assert_eq!((n.driver(), n.args().len()), ("null", 0));
        assert_eq!(n.to_string(), "null");
        // Values may hold '=' and ':'.
        let v = PortSpec::parse("tap:name=a=b:c").unwrap();
        assert_eq!(v.get("name"), Some("a=b:c"));
    }

    #[test]
    fn syntax_errors_have_exact_messages() {
        assert_eq!(err(""), "empty port spec: expected driver[:key=value,...]");
        assert_eq!(
            err("   "),
            "empty port spec: expected driver[:key=value,...]"
        );
        assert_eq!(
            err("Soft:flows=1"),
            "port spec 'Soft:flows=1': driver name 'Soft' must be lowercase letters, digits \
             or '_', starting with a letter"
        );
        assert_eq!(
            err(":x=1"),
            "port spec ':x=1': driver name '' must be lowercase letters, digits or '_', \
             starting with a letter"
        );
        assert_eq!(
            err("pair:name"),
            "port spec 'pair:name': argument 'name' is not key=value"
        );
        assert_eq!(
            err("pair:"),
            "port spec 'pair:': argument '' is not key=value"
        );
        assert_eq!(
            err("pair:name=p0,,size=4"),
            "port spec 'pair:name=p0,,size=4': argument '' is not key=value"
        );
        assert_eq!(
            err("pair:Name=p0"),
            "port spec 'pair:Name=p0': argument 'Name=p0' is not key=value"
        );
        assert_eq!(
            err("pcap:rx="),
            "port spec 'pcap:rx=': key 'rx' has no value"
        );
        assert_eq!(
            err("pair:name=a,name=b"),
            "port spec 'pair:name=a,name=b': key 'name' given twice"
        );
    }

    #[test]
    fn driver_level_errors_have_exact_messages() {
        let s = PortSpec::parse("sfot:x=1").unwrap();
        assert_eq!(
            s.unknown_driver(&["soft", "pair", "null", "pcap"])
                .to_string(),
            "port spec 'sfot:x=1': unknown driver 'sfot' (drivers: soft, pair, null, pcap)"
        );

        let s = PortSpec::parse("soft:flows=0x10,size=9001,fast=maybe,gen=icmp").unwrap();
        let mut a = SpecArgs::new(&s, &["flows", "size", "fast", "gen", "mode"]);
        assert_eq!(a.u64_in("flows", 1..=1 << 20), Ok(Some(16)));
        assert_eq!(
            a.u64_in("size", 60..=9000).unwrap_err().to_string(),
            "port spec 'soft:flows=0x10,size=9001,fast=maybe,gen=icmp': key 'size' = '9001' \
             is not a number in 60..=9000"
        );
        assert_eq!(
            a.bool("fast").unwrap_err().to_string(),
            "port spec 'soft:flows=0x10,size=9001,fast=maybe,gen=icmp': key 'fast' = 'maybe' \
             is not a boolean (1/0, true/false, yes/no, on/off)"
        );
        assert_eq!(
            a.choice("gen", &["udp", "tcp"]).unwrap_err().to_string(),
            "port spec 'soft:flows=0x10,size=9001,fast=maybe,gen=icmp': key 'gen' = 'icmp' \
             is not one of udp, tcp"
        );
        assert_eq!(
            a.require("mode").unwrap_err().to_string(),
            "port spec 'soft:flows=0x10,size=9001,fast=maybe,gen=icmp': driver 'soft' needs \
             key 'mode'"
        );
        assert!(a.finish().is_ok());

        let s = PortSpec::parse("pair:name=p0,sise=8").unwrap();
        let mut a = SpecArgs::new(&s, &["name", "size"]);
        assert_eq!(a.str("name"), Some("p0"));
        assert_eq!(
            a.finish().unwrap_err().to_string(),
            "port spec 'pair:name=p0,sise=8': driver 'pair' has no key 'sise' (keys: name, size)"
        );

        let s = PortSpec::parse("null:x=1").unwrap();
        assert_eq!(
            SpecArgs::new(&s, &[]).finish().unwrap_err().to_string(),
            "port spec 'null:x=1': driver 'null' has no key 'x' (it takes none)"
        );

        let s = PortSpec::parse("soft:flows=abc,rate=1.5e6,bad=x").unwrap();
        let mut a = SpecArgs::new(&s, &["flows", "rate", "bad"]);
        assert_eq!(
            a.u64_in("flows", 1..=10).unwrap_err().to_string(),
            "port spec 'soft:flows=abc,rate=1.5e6,bad=x': key 'flows' = 'abc' is not a number \
             in 1..=10"
        );
        assert_eq!(
            a.parse::<f64>("rate", "a rate in packets/s"),
            Ok(Some(1.5e6))
        );
        assert_eq!(
            a.parse::<f64>("bad", "a rate in packets/s")
                .unwrap_err()
                .to_string(),
            "port spec 'soft:flows=abc,rate=1.5e6,bad=x': key 'bad' = 'x' is not a rate in \
             packets/s"
        );
    }

    #[test]
    fn booleans_accept_the_usual_spellings() {
        let s = PortSpec::parse("x:a=1,b=off,c=yes,d=false").unwrap();
        let mut a = SpecArgs::new(&s, &["a", "b", "c", "d", "e"]);
        assert_eq!(a.bool("a"), Ok(Some(true)));
        assert_eq!(a.bool("b"), Ok(Some(false)));
        assert_eq!(a.bool("c"), Ok(Some(true)));
        assert_eq!(a.bool("d"), Ok(Some(false)));
        assert_eq!(a.bool("e"), Ok(None));
    }

    proptest::proptest! {
        /// Any string: an error or a spec, never a panic; a spec prints back to
        /// a string that parses to the same spec.
        #[test]
        fn never_panics_and_round_trips(text in ".{0,60}") {
            if let Ok(spec) = PortSpec::parse(&text) {
                let again = PortSpec::parse(&spec.to_string()).unwrap();
                proptest::prop_assert_eq!(again.driver(), spec.driver());
                proptest::prop_assert_eq!(again.args(), spec.args());
            }
        }

        /// Specs built from valid parts parse back to exactly those parts.
        #[test]
        fn valid_specs_parse_to_their_parts(
            driver in "[a-z][a-z0-9_]{0,7}",
            args in proptest::collection::btree_map("[a-z][a-z0-9_]{0,6}", "[^,\\s][^,]{0,10}[^,\\s]|[^,\\s]", 0..5),
        ) {
            let mut text = driver.clone();
            for (i, (k, v)) in args.iter().enumerate() {
                text.push(if i == 0 { ':' } else { ',' });
                text.push_str(&format!("{k}={v}"));
            }
            let spec = PortSpec::parse(&text).unwrap();
            proptest::prop_assert_eq!(spec.driver(), driver.as_str());
            let want: Vec<(String, String)> = args.into_iter().collect();
            proptest::prop_assert_eq!(spec.args(), want.as_slice());
            proptest::prop_assert_eq!(spec.to_string(), text);
        }
    }
}
