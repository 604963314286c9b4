//! The grid: four axes (Rx descriptors, Tx descriptors, mempool cache,
//! burst), checked against the ports, and the order points are measured in.
//!
//! # Order (what a budget cut keeps)
//! 1. the defaults ([`DEFAULTS`]), always, on the grid or not: the summary
//!    says how far they are from the best;
//! 2. the heatmap's plane: every Rx descriptors × cache pair at the plane's
//!    Tx descriptors and burst ([`Grid::plane`]), so the plot is complete
//!    whenever the budget allows it at all;
//! 3. every other point, in a fixed pseudo-random order (xorshift, fixed
//!    seed), so a cut leaves an even sample of the rest rather than a
//!    corner of the grid.

use serde::Serialize;
use sluice::port::DeviceInfo;

use super::args::TuneArgs;

/// One setting of the four sizes.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Config {
    /// Rx descriptors per queue.
    pub rxd: u16,
    /// Tx descriptors per queue.
    pub txd: u16,
    /// Mempool per-lcore cache size.
    pub cache: u32,
    /// Packets asked per Rx call.
    pub burst: u16,
}

impl std::fmt::Display for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rxd {} txd {} cache {} burst {}",
            self.rxd, self.txd, self.cache, self.burst
        )
    }
}

/// The defaults of `sluice fwd` (and of DPDK's l2fwd/l3fwd since 2021):
/// 1024 / 1024 descriptors, cache 256, burst 32.
pub const DEFAULTS: Config = Config {
    rxd: 1024,
    txd: 1024,
    cache: 256,
    burst: 32,
};

/// The axes, each sorted ascending, without repeats, never empty.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    /// Rx descriptors per queue.
    pub rxd: Vec<u16>,
    /// Tx descriptors per queue.
    pub txd: Vec<u16>,
    /// Mempool cache sizes.
    pub cache: Vec<u32>,
    /// Burst sizes.
    pub burst: Vec<u16>,
}

/// Parses one axis: comma-separated integers in `lo..=hi`; `what` words the
/// range error.
fn axis(flag: &str, s: &str, lo: u64, hi: u64, what: &str) -> Result<Vec<u64>, String> {
    let mut v = Vec::new();
    for item in s.split(',').map(str::trim) {
        if item.is_empty() {
            if s.trim().is_empty() {
                return Err(format!(
                    "--{flag}: the list is empty (give values separated by commas, e.g. 128,256)"
                ));
            }
            return Err(format!("--{flag} '{s}': an empty item in the list"));
        }
        let n: u64 = item
            .parse()
            .map_err(|_| format!("--{flag}: '{item}' is not a number"))?;
        if n < lo || n > hi {
            return Err(format!("--{flag} {n}: {what}"));
        }
        v.push(n);
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

impl Grid {
    /// Reads and checks the four lists (the ports' own limits are checked
    /// by [`check_ports`](Self::check_ports)).
    pub fn parse(args: &TuneArgs) -> Result<Grid, String> {
        let desc = |flag: &str, s: &str| -> Result<Vec<u16>, String> {
            Ok(axis(
                flag,
                s,
                1,
                u16::MAX as u64,
                "descriptors per queue are 1 to 65535 (and what the port takes)",
            )?
            .into_iter()
            .map(|n| n as u16)
            .collect())
        };
        let rxd = desc("rxd", &args.rxd)?;
        let txd = desc("txd", &args.txd)?;
        let max_cache = sluice::mempool::MAX_CACHE_SIZE as u64;
        let cache = axis(
            "cache",
            &args.cache,
            0,
            max_cache,
            &format!("a mempool cache holds 0 to {max_cache} buffers"),
        )?
        .into_iter()
        .map(|n| n as u32)
        .collect();
        let burst = axis("burst", &args.burst, 1, 64, "a burst is 1 to 64 packets")?
            .into_iter()
            .map(|n| n as u16)
            .collect();
        Ok(Grid {
            rxd,
            txd,
            cache,
            burst,
        })
    }

    /// Checks every descriptor count against what each port's driver takes
    /// (range, powers of two); `ports` are (spec, device info) in port
    /// order.
    pub fn check_ports(&self, ports: &[(String, DeviceInfo)]) -> Result<(), String> {
        for (flag, values) in [("rxd", &self.rxd), ("txd", &self.txd)] {
            for &n in values.iter() {
                for (p, (spec, info)) in ports.iter().enumerate() {
                    if let Err(why) = desc_fits(flag, n, info) {
                        return Err(format!("--{flag} {n}: port {p} ({spec}) {why}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Points in the grid.
    pub fn len(&self) -> usize {
        self.rxd.len() * self.txd.len() * self.cache.len() * self.burst.len()
    }

    /// Whether `c` is a grid point.
    pub fn contains(&self, c: &Config) -> bool {
        self.rxd.contains(&c.rxd)
            && self.txd.contains(&c.txd)
            && self.cache.contains(&c.cache)
            && self.burst.contains(&c.burst)
    }

    /// The heatmap's fixed Tx descriptors and burst: the values on the
    /// axes closest to the defaults'.
    pub fn plane(&self) -> (u16, u16) {
        (
            nearest(&self.txd, DEFAULTS.txd),
            nearest(&self.burst, DEFAULTS.burst),
        )
    }

    /// Every point, in the order they are measured (see the module doc);
    /// `defaults` first when given (when the ports take them).
    pub fn plan(&self, defaults: bool) -> Vec<Config> {
        let mut out = Vec::with_capacity(self.len() + 1);
        if defaults {
            out.push(DEFAULTS);
        }
        let (txd, burst) = self.plane();
        for &rxd in &self.rxd {
            for &cache in &self.cache {
                let c = Config {
                    rxd,
                    txd,
                    cache,
                    burst,
                };
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        let mut rest = Vec::new();
        for &rxd in &self.rxd {
            for &txd in &self.txd {
                for &cache in &self.cache {
                    for &burst in &self.burst {
                        rest.push(Config {
                            rxd,
                            txd,
                            cache,
                            burst,
                        });
                    }
                }
            }
        }
        rest.retain(|c| !out.contains(c));
        shuffle(&mut rest, 0x5eed_7a11_ce11_5eed);
        out.extend(rest);
        out
    }
}

/// Whether `n` descriptors fit a queue of a port with `info`; else why not.
pub fn desc_fits(flag: &str, n: u16, info: &DeviceInfo) -> Result<(), String> {
    let (dir, (lo, hi)) = if flag == "rxd" {
        ("Rx", info.nb_rxd)
    } else {
        ("Tx", info.nb_txd)
    };
    if n < lo || n > hi {
        return Err(format!("takes {lo} to {hi} {dir} descriptors"));
    }
    if info.desc_pow2 && !n.is_power_of_two() {
        return Err(format!("takes only powers of two {dir} descriptors"));
    }
    Ok(())
}

/// Whether every port takes `c`'s descriptor counts.
pub fn fits(c: &Config, ports: &[(String, DeviceInfo)]) -> bool {
    ports
        .iter()
        .all(|(_, i)| desc_fits("rxd", c.rxd, i).is_ok() && desc_fits("txd", c.txd, i).is_ok())
}

/// The value of `axis` closest to `want` (the smaller on a tie).
fn nearest<T: Copy + Into<i64>>(axis: &[T], want: T) -> T {
    let w: i64 = want.into();
    *axis
        .iter()
        .min_by_key(|&&v| (v.into() - w).abs())
        .expect("axes are never empty")
}

/// Fisher-Yates with xorshift64: the same order on every run.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let j = (seed % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}
