//! `sluice tune` arguments: the ports, the engine, the grid axes (each a
//! comma-separated list) and the time limits.

use clap::{Args, ValueEnum};

use crate::app::options::{PortSpecs, parse_seconds};

/// Arguments of `sluice tune`.
#[derive(Args, Debug, Clone)]
pub struct TuneArgs {
    /// The ports (default: two `soft` ports cabled to the built-in tester,
    /// 64-byte UDP frames over 1024 flows, the device model inline — see
    /// `--device`). Ports forward in pairs, as in `sluice fwd`.
    #[command(flatten)]
    pub port_specs: PortSpecs,
    /// The default ports' device model: `inline` (in the forwarding
    /// lcore's calls, its cycles excluded; deterministic) or `threaded` (on
    /// its own thread and CPU). Ignored when ports are given.
    #[arg(long, value_enum, default_value_t = Device::Inline)]
    pub device: Device,
    /// Forwarding engine.
    #[arg(long, value_enum, default_value_t = TuneEngine::Io)]
    pub engine: TuneEngine,
    /// Rx descriptors per queue to try (comma-separated).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "128,256,512,1024,2048,4096"
    )]
    pub rxd: String,
    /// Tx descriptors per queue to try.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "128,256,512,1024,2048,4096"
    )]
    pub txd: String,
    /// Mempool per-lcore cache sizes to try.
    #[arg(long, value_name = "LIST", default_value = "0,32,64,128,256,512")]
    pub cache: String,
    /// Burst sizes (packets asked per Rx call) to try.
    #[arg(long, value_name = "LIST", default_value = "8,16,32,64")]
    pub burst: String,
    /// Seconds each point forwards before it is measured.
    #[arg(long, default_value_t = 0.1, value_name = "SECONDS", value_parser = parse_seconds)]
    pub warmup: f64,
    /// Seconds each point is measured for (after its warm-up).
    #[arg(long, default_value_t = 0.25, value_name = "SECONDS", value_parser = parse_seconds)]
    pub duration: f64,
    /// Time limit for the whole sweep: the grid is cut to fit (see the
    /// summary for what was skipped; the first point always runs). A preset
    /// runs its fixed number of points.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub budget: f64,
    /// Times the whole plan is run (on a busy machine, more passes with a
    /// shorter `--duration` ride out load better): each point's figures
    /// are the medians of its passes.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub passes: u32,
    /// After the sweep, the best few points and the defaults are measured
    /// again this many times each, interleaved, and the best is chosen on
    /// those means (0: take the sweep's single measurements).
    #[arg(long, default_value_t = 3, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub confirm: u32,
    /// What "best" means: the highest Mpps, or the fewest forwarding-lcore
    /// cycles per packet (with an inline device its own work is most of
    /// the Mpps figure; cycles per packet leave it out).
    #[arg(long, value_enum, default_value_t = Figure::Mpps)]
    pub rank: Figure,
    /// Tx attempts more for packets a Tx queue did not take, before they
    /// are dropped (as `sluice fwd --tx-retry`).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub tx_retry: u32,
    /// Instead of a sweep, a documented comparison:
    /// `l2fwd-defaults` measures DPDK l2fwd's old defaults (128 Rx / 512 Tx
    /// descriptors, cache 32) against the newer ones (1024 / 1024, cache
    /// 256), `--confirm` repetitions each (at least 5), interleaved.
    #[arg(long, value_enum, value_name = "NAME")]
    pub preset: Option<Preset>,
    /// One JSON object per point (and a summary object) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Write the whole result as one JSON document to FILE.
    #[arg(long, value_name = "FILE")]
    pub out_json: Option<std::path::PathBuf>,
    /// Write a heatmap of Mpps (or `--plot-figure cycles`) over Rx
    /// descriptors × mempool cache to FILE (SVG).
    #[arg(long, value_name = "FILE")]
    pub out_plot: Option<std::path::PathBuf>,
    /// What the heatmap shows: Mpps, or cycles per packet on the
    /// forwarding lcore.
    #[arg(long, value_enum, default_value_t = Figure::Mpps, value_name = "FIGURE")]
    pub plot_figure: Figure,
}

impl TuneArgs {
    /// Arguments with every default and these port specs (tests).
    #[cfg(test)]
    pub fn with_specs(specs: Vec<String>) -> TuneArgs {
        TuneArgs {
            port_specs: PortSpecs::new(specs),
            device: Device::Inline,
            engine: TuneEngine::Io,
            rxd: "128,256,512,1024,2048,4096".into(),
            txd: "128,256,512,1024,2048,4096".into(),
            cache: "0,32,64,128,256,512".into(),
            burst: "8,16,32,64".into(),
            warmup: 0.1,
            duration: 0.25,
            budget: 120.0,
            confirm: 3,
            passes: 1,
            rank: Figure::Mpps,
            tx_retry: 0,
            preset: None,
            json: false,
            out_json: None,
            out_plot: None,
            plot_figure: Figure::Mpps,
        }
    }

    /// Every port spec, `--port` ones first; the default pair when none is
    /// given.
    pub fn all_specs(&self) -> Vec<String> {
        let given = self.port_specs.all();
        if !given.is_empty() {
            return given;
        }
        let spec = format!(
            "soft:tester=tune,gen=udp,flows=1024,size=64,device={}",
            self.device.name()
        );
        vec![spec.clone(), spec]
    }
}

/// Where the default ports' device model runs.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// In the forwarding lcore's queue calls (its cycles excluded).
    Inline,
    /// On the device thread, on its own CPU when there is one.
    Threaded,
}

impl Device {
    /// The spec value.
    pub fn name(self) -> &'static str {
        match self {
            Device::Inline => "inline",
            Device::Threaded => "threaded",
        }
    }
}

/// The engines `tune` can measure. Each maps to a way of running one point
/// (`point::measure`); a new application (l3fwd) adds a variant there.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TuneEngine {
    /// `sluice fwd --engine io`: packets forwarded unchanged.
    Io,
    /// `sluice fwd --engine mac`: source and destination MACs rewritten.
    Mac,
}

impl TuneEngine {
    /// The name, as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TuneEngine::Io => "io",
            TuneEngine::Mac => "mac",
        }
    }
}

/// A figure a setting is judged (`--rank`) or plotted (`--plot-figure`)
/// by.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Figure {
    /// The most packets per second.
    Mpps,
    /// The fewest cycles per packet on the forwarding lcore.
    Cycles,
}

impl Figure {
    /// A figure where more is better: Mpps, or minus cycles per packet
    /// (`None`: nothing moved).
    pub fn score(self, mpps: f64, cycles_per_packet: Option<f64>) -> Option<f64> {
        match self {
            Figure::Mpps => Some(mpps),
            Figure::Cycles => cycles_per_packet.map(|c| -c),
        }
    }

    /// How much worse `other` is than `best`, percent of the best.
    pub fn gap_pct(self, best: f64, other: f64) -> f64 {
        // Scores: Mpps, or minus cycles; both are relative to |best|.
        (best - other) / best.abs() * 100.0
    }
}

/// The documented comparisons.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// DPDK l2fwd's descriptor and cache defaults, old against new.
    L2fwdDefaults,
}
