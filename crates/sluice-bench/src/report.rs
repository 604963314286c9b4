//! Result rows: a text table for people, or one JSON object per result on
//! one line for programs.

use std::io::Write;
use std::sync::OnceLock;

use serde::Serialize;
use sluice::{lcore, tsc};

/// One measured case.
#[derive(Serialize, Debug, Clone)]
pub struct BenchResult {
    /// The benchmark set: `ring`, `mempool`, `mbuf`, `fwd`, `recycle`,
    /// `distributor`, `lpm`, `mpwqe`, `pagepool`.
    pub bench: &'static str,
    /// The case, unique within its set.
    pub case: String,
    /// TSC cycles per operation (see each set for what one operation is and how
    /// multi-core figures combine).
    pub cycles_per_op: f64,
    /// Millions of operations per second (all cores together).
    pub mops: f64,
    /// Cores working at once.
    pub cores: u32,
    /// Elements per call, for batched cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bulk: Option<usize>,
    /// Per-lcore cache size, for mempool cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<u32>,
    /// Operations timed, all cores together.
    pub ops: u64,
    /// The measured TSC frequency.
    pub tsc_hz: u64,
    /// Two-core ring cases: producer cycles per element.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer_cycles: Option<f64>,
    /// Two-core ring cases: consumer cycles per element.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_cycles: Option<f64>,
    /// Two-core ring cases: attempts that found the ring full, per successful
    /// enqueue call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer_waits: Option<f64>,
    /// Two-core ring cases: attempts that found the ring empty, per successful
    /// dequeue call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_waits: Option<f64>,
    /// Mempool cases: the memory the pool sits on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backing: Option<String>,
    /// DPDK 22.11's figure for the same case, in cycles per op: a reference
    /// measured with DPDK's own perf test (each part's notes name it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpdk_cycles_per_op: Option<f64>,
    /// DPDK 22.11's figure for the same case in Mops (as above).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpdk_mops: Option<f64>,
    /// DPDK's cycles per op for the counterpart of this case measured in the
    /// same run, in rounds interleaved with it (`fwd`: dpdk-testpmd over
    /// `net_null`): the median over rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpdk_same_run_cycles_per_op: Option<f64>,
    /// This case's cycles per op over [`BenchResult::dpdk_same_run_cycles_per_op`]:
    /// the median of the per-round ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_dpdk_same_run: Option<f64>,
}

impl BenchResult {
    /// A result with the required fields; the optional ones are `None`.
    pub fn new(
        bench: &'static str,
        case: String,
        cores: u32,
        cycles_per_op: f64,
        mops: f64,
    ) -> Self {
        BenchResult {
            bench,
            case,
            cycles_per_op,
            mops,
            cores,
            bulk: None,
            cache: None,
            ops: 0,
            tsc_hz: tsc::tsc_hz(),
            producer_cycles: None,
            consumer_cycles: None,
            producer_waits: None,
            consumer_waits: None,
            backing: None,
            dpdk_cycles_per_op: None,
            dpdk_mops: None,
            dpdk_same_run_cycles_per_op: None,
            vs_dpdk_same_run: None,
        }
    }
}

/// What a worker measured.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Operations timed.
    pub ops: u64,
    /// TSC at the start of the timed region.
    pub start: u64,
    /// TSC at its end.
    pub end: u64,
}

impl Sample {
    /// Cycles in the timed region.
    pub fn cycles(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Cycles per operation.
    pub fn cycles_per_op(&self) -> f64 {
        crate::stats::cycles_per_op(self.cycles(), self.ops)
    }

    /// Millions of operations per second.
    pub fn mops(&self) -> f64 {
        crate::stats::mops(self.ops, self.cycles())
    }
}

/// Where and how much to run, and where the results go; shared by every
/// benchmark of a run.
pub struct Ctx {
    /// Print JSON lines instead of a table.
    pub json: bool,
    /// Operations per case: `--iters`, else the part's default scaled by
    /// `--quick`.
    iters: Option<u64>,
    quick: bool,
    /// The CPUs this process may use.
    pub cpus: Vec<usize>,
    header_printed: bool,
    failures: usize,
    /// Run only the cases whose name contains this text (`--case`).
    case_filter: Option<String>,
}

impl Ctx {
    /// A context printing JSON lines (`json`) or a table, with `iters`
    /// operations per case if given, else each part's default (16x fewer
    /// with `quick`); measures the TSC frequency.
    pub fn new(json: bool, iters: Option<u64>, quick: bool) -> Self {
        // Read the CPU set before any pinning.
        let cpus = lcore::available_cpus();
        let _ = tsc::tsc_hz();
        Ctx {
            json,
            iters,
            quick,
            cpus,
            header_printed: false,
            failures: 0,
            case_filter: None,
        }
    }

    /// Runs only the cases whose name contains `text` (case-insensitive).
    pub fn with_case_filter(mut self, text: Option<String>) -> Self {
        self.case_filter = text.map(|t| t.to_lowercase());
        self
    }

    /// Whether the case `name` runs: every case without a filter, else
    /// those whose name contains the filter's text.
    pub fn wants(&self, name: &str) -> bool {
        self.case_filter
            .as_deref()
            .is_none_or(|text| name.to_lowercase().contains(text))
    }

    /// Whether any of `names` runs (a section measuring them together).
    pub fn wants_any(&self, names: &[&str]) -> bool {
        names.iter().any(|n| self.wants(n))
    }

    /// Whether this is a quick look (fewer operations, and some parts
    /// fewer cases).
    pub fn quick(&self) -> bool {
        self.quick
    }

    /// Operations per case for a part whose full-run default is `default`.
    pub fn ops(&self, default: u64) -> u64 {
        match self.iters {
            Some(n) => n,
            None if self.quick => (default / 16).max(1),
            None => default,
        }
    }

    /// The CPU one-core cases run on (the first available, as DPDK's main lcore).
    pub fn main_cpu(&self) -> usize {
        self.cpus[0]
    }

    /// The two CPUs of two-core cases, or `None` with fewer than two.
    pub fn cpu_pair(&self) -> Option<(usize, usize)> {
        match self.cpus.as_slice() {
            [a, b, ..] => Some((*a, *b)),
            _ => None,
        }
    }

    /// Prints the run's header (TSC frequency, CPUs) once.
    pub fn header(&mut self) {
        if self.header_printed {
            return;
        }
        self.header_printed = true;
        let hz = tsc::tsc_hz();
        let invariant = if tsc::is_invariant() {
            "invariant"
        } else {
            "NOT invariant: cycle figures are unreliable"
        };
        let pair = match self.cpu_pair() {
            Some((a, b)) => format!("two-core cases on CPUs {a} and {b}"),
            None => "two-core cases skipped (one CPU)".to_owned(),
        };
        self.note(&format!(
            "TSC {:.1} MHz ({invariant}); every cycles figure is TSC ticks. \
             One-core cases on CPU {}, {pair}.",
            hz as f64 / 1e6,
            self.main_cpu()
        ));
    }

    /// Starts a part's table: a title line, notes, then the column heads.
    pub fn section(&mut self, title: &str, notes: &[String]) {
        self.title(title, notes);
        if !self.json {
            emit(&format!(
                "{:<28} {:>5} {:>10} {:>10}  {:<14} detail",
                "case", "cores", "cycles/op", "Mops", "DPDK 22.11"
            ));
        }
    }

    /// Starts a part's table with a title line and notes (a part with its
    /// own columns prints their heads next).
    pub fn title(&mut self, title: &str, notes: &[String]) {
        self.header();
        self.note("");
        self.note(&format!("== {title} =="));
        for n in notes {
            self.note(n);
        }
    }

    /// Prints a human note: stdout for tables, stderr with `--json`.
    pub fn note(&self, msg: &str) {
        if self.json {
            emit_err(msg);
        } else {
            emit(msg);
        }
    }

    /// Reports a case that was not run, and why.
    pub fn skip(&self, case: &str, reason: &str) {
        self.note(&format!("{case:<28} skipped: {reason}"));
    }

    /// Reports a failed case.
    pub fn fail(&self, case: &str, err: &str) {
        if self.json {
            emit_err(&format!("{case}: FAILED: {err}"));
        } else {
            emit(&format!("{case:<28} FAILED: {err}"));
        }
    }

    /// With `--json`, prints `row` (a result of any shape) as one JSON
    /// object on one line and returns `true`; else prints nothing and
    /// returns `false`, and the caller prints its table row.
    pub fn json_row<T: Serialize>(&self, case: &str, row: &T) -> bool {
        if !self.json {
            return false;
        }
        match serde_json::to_string(row) {
            Ok(line) => emit(&line),
            Err(e) => emit_err(&format!("{case}: cannot encode result: {e}")),
        }
        true
    }

    /// Prints one result: a table row, or one JSON object on one line.
    pub fn row(&self, r: &BenchResult) {
        if self.json_row(&r.case, r) {
            return;
        }
        let dpdk = match (r.dpdk_cycles_per_op, r.dpdk_mops) {
            (Some(c), _) => format!("{c} cyc"),
            (None, Some(m)) => format!("{m} Mops"),
            (None, None) => "-".to_owned(),
        };
        let mut detail = Vec::new();
        if let (Some(p), Some(c)) = (r.producer_cycles, r.consumer_cycles) {
            detail.push(format!("enq {p:.2} + deq {c:.2}"));
        }
        if let (Some(p), Some(c)) = (r.producer_waits, r.consumer_waits) {
            detail.push(format!("waits/call: full {p:.2}, empty {c:.2}"));
        }
        if let (Some(c), Some(x)) = (r.dpdk_same_run_cycles_per_op, r.vs_dpdk_same_run) {
            detail.push(format!("{x:.2}x DPDK same run ({c:.1} cyc)"));
        }
        if let Some(b) = &r.backing {
            detail.push(b.clone());
        }
        let line = format!(
            "{:<28} {:>5} {:>10.2} {:>10.1}  {:<14} {}",
            r.case,
            r.cores,
            r.cycles_per_op,
            r.mops,
            dpdk,
            detail.join(", ")
        );
        emit(line.trim_end());
    }

    /// Prints `result` as a row, or the error as a failed case, so that one
    /// failed case does not stop the others (the run's exit status reports it:
    /// see [`Ctx::failures`]).
    pub fn report(&mut self, case: &str, result: Result<BenchResult, String>) {
        match result {
            Ok(r) => self.row(&r),
            Err(e) => {
                self.fail(case, &e);
                self.failures += 1;
            }
        }
    }

    /// Number of cases that failed so far.
    pub fn failures(&self) -> usize {
        self.failures
    }
}

/// Where the DPDK reference figures come from: the machine DPDK 22.11's own
/// perf tests ran on.
pub const DPDK_REFERENCE_MACHINE: &str =
    "a 2-vCPU AMD EPYC virtual machine (TSC 2596 MHz, hugepages on)";

/// The note that says where a part's DPDK column comes from: `test`, the
/// DPDK 22.11 test (or application) that measured the same case.
pub fn dpdk_reference_note(test: &str) -> String {
    format!(
        "DPDK column: DPDK 22.11's {test}, measured on {DPDK_REFERENCE_MACHINE}; a reference \
         taken once, not a figure of this run."
    )
}

/// The function every line of [`emit`] and [`emit_err`] is written inside,
/// when the program sets one ([`wrap_lines`]).
static LINE_WRAPPER: OnceLock<fn(&mut dyn FnMut())> = OnceLock::new();

/// Sets the function every line of [`emit`] and [`emit_err`] is written
/// inside (it calls its argument once), for the whole process; a second call
/// is ignored. A progress bar drawn on the terminal uses it to clear itself
/// while a line is written and to draw itself again after.
pub fn wrap_lines(wrapper: fn(&mut dyn FnMut())) {
    let _ = LINE_WRAPPER.set(wrapper);
}

/// Runs `write` inside the wrapper of [`wrap_lines`], if any.
fn wrapped(write: &mut dyn FnMut()) {
    match LINE_WRAPPER.get() {
        Some(wrapper) => wrapper(write),
        None => write(),
    }
}

/// Writes one line to stdout and flushes it (results appear as they are
/// measured). If stdout is a closed pipe (`sluice bench ring --json | head`),
/// the reader wants no more: exit quietly with success.
pub fn emit(line: &str) {
    let mut r = Ok(());
    wrapped(&mut || {
        let mut out = std::io::stdout().lock();
        r = writeln!(out, "{line}").and_then(|()| out.flush());
    });
    if let Err(e) = r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        emit_err(&format!("sluice: cannot write to stdout: {e}"));
        std::process::exit(1);
    }
}

/// Writes one line to stderr (notes beside results on stdout).
pub fn emit_err(line: &str) {
    wrapped(&mut || eprintln!("{line}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_has_the_required_fields_and_skips_absent_ones() {
        let mut r = BenchResult::new("ring", "SP/SC bulk 32".into(), 1, 1.5, 1730.0);
        r.bulk = Some(32);
        r.tsc_hz = 2_000_000_000;
        r.dpdk_cycles_per_op = Some(5.3);
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(
            line,
            "{\"bench\":\"ring\",\"case\":\"SP/SC bulk 32\",\"cycles_per_op\":1.5,\
             \"mops\":1730.0,\"cores\":1,\"bulk\":32,\"ops\":0,\"tsc_hz\":2000000000,\
             \"dpdk_cycles_per_op\":5.3}"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert!(v.get("cache").is_none());
        assert!(v.get("backing").is_none());
        assert!(BenchResult::new("ring", "x".into(), 1, 1.0, 1.0).tsc_hz > 0);
    }

    #[test]
    fn the_dpdk_note_names_the_test_and_the_machine() {
        assert_eq!(
            dpdk_reference_note("ring_perf_autotest"),
            "DPDK column: DPDK 22.11's ring_perf_autotest, measured on a 2-vCPU AMD EPYC \
             virtual machine (TSC 2596 MHz, hugepages on); a reference taken once, not a \
             figure of this run."
        );
    }

    #[test]
    fn sample_rates() {
        let s = Sample {
            ops: 1000,
            start: 5_000,
            end: 15_000,
        };
        assert_eq!(s.cycles(), 10_000);
        assert_eq!(s.cycles_per_op(), 10.0);
        let expect = tsc::tsc_hz() as f64 / 10.0 / 1e6;
        assert!((s.mops() - expect).abs() < 1e-6 * expect);
    }

    #[test]
    fn ops_scale_with_quick_and_iters() {
        let ctx = Ctx::new(true, None, false);
        assert_eq!(ctx.ops(1 << 20), 1 << 20);
        assert!(!ctx.quick());
        let ctx = Ctx::new(true, None, true);
        assert_eq!(ctx.ops(1 << 20), 1 << 16);
        assert!(ctx.quick());
        let ctx = Ctx::new(true, Some(77), true);
        assert_eq!(ctx.ops(1 << 20), 77);
    }
}
