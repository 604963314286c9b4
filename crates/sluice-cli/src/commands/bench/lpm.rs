//! `sluice bench lpm`: cycles per route lookup, single and bulk, after
//! DPDK's `lpm_perf_autotest` and `lpm6_perf_autotest`, plus the cost of
//! adding and deleting routes.
//!
//! # Method
//! Route sets come from `sluice::net::lpm::routegen` (seeded, the same on
//! every run):
//!
//! - **IPv4**: 1000, 100 000 and 1 076 806 routes (DPDK's count) with the
//!   Internet-like prefix-length mix (54 % /24, ...). Lookups of the 1M set
//!   draw addresses uniformly from the whole space, as DPDK does (12.5 %
//!   fall in 224.0.0.0/3, never routed); smaller sets leave most of the
//!   space unrouted, so their addresses are drawn under the routes with
//!   12 % from 224.0.0.0/3 (`routed`; the 1M set is measured so too).
//!   Each timed region is one batch of 4096 addresses written just before
//!   it (DPDK's `BATCH_SIZE`), looked up one by one (`single`), four at a
//!   time (`x4`), or in calls of 32 (`bulk32` with `Option` results,
//!   `bulk32-or` with a sentinel for no route); misses are counted inside
//!   the timed loop, as DPDK counts failures.
//! - **IPv6**: 1000 routes with depths spread evenly over /1–/128 (the
//!   shape of DPDK's set). DPDK's addresses are 100 000 in runs of 400
//!   under each of the first 250 routes in turn, all routed (`runs400`);
//!   measured so, and with each address under a random route (`random`,
//!   harder on the branch predictor). A timed region is one pass over the
//!   100 000: one lookup at a time (`single`), four (`x4`) or one bulk call
//!   (`bulk`, `bulk-or`). The full run adds 100 000 routes of the Internet-like
//!   IPv6 mix (mostly /48 under /32 allocations).
//!
//! Each table is built on the main lcore (the first CPU) and measured
//! there. The APIs of a table run interleaved, in rounds (the order
//! rotating), each round the same addresses for every API: their miss
//! counts must agree, or the case is an error. Each batch is timed; a
//! round's figure is the median of its batches' cycles per lookup (the
//! machine is shared: a burst of someone else's memory traffic slows a
//! few batches, not the median), and a case's figure the median of its
//! rounds (min–max of the rounds in the detail). DPDK reports the mean. `add` is the
//! mean cycles per route adding the whole set to an empty table in the
//! generator's (random) order, `delete` removing them all again (the table
//! must then be empty, with no group in use).
//!
//! The full run also measures the 1M IPv4 set on each kind of memory the
//! table can sit on: reserved hugepages, transparent huge pages and 4 KiB
//! pages (DPDK's `--no-huge`).

use serde::Serialize;
use sluice::net::lpm::routegen::{self, Ipv6Mix, Route4, Route6};
use sluice::net::lpm::{Lpm4, Lpm6, LpmConfig, LpmMemory};
use sluice::tsc::rdtsc_ordered;

use super::{BenchResult, Ctx, Selection, emit, on_lcore};
use sluice_bench::round_order;
use sluice_bench::stats::{Spread, median, mops_per_core};

/// IPv4 lookups per batch (DPDK's `BATCH_SIZE`).
const BATCH: usize = 4096;
/// Lookups per call in the IPv4 bulk cases (DPDK's `BULK_SIZE`).
const BULK: usize = 32;
/// Lookups per API per case by default (DPDK: 1024 batches of 4096).
const DEFAULT_OPS: u64 = 1 << 22;
/// IPv4 addresses drawn per set (batches cycle over them).
const POOL: usize = 1 << 20;
/// IPv6 addresses per pass (DPDK's `NUM_IPS_ENTRIES`).
const V6_ADDRS: usize = 100_000;
/// DPDK's IPv6 run length: addresses per route in turn.
const V6_RUN: usize = 400;
/// Rounds per table.
const ROUNDS: usize = 8;
/// DPDK's IPv4 route count.
pub const V4_MILLION: usize = 1_076_806;
/// Next hops in the generated sets.
const NEXT_HOPS: u32 = 256;

/// DPDK 22.11's `lpm_perf_autotest` and `lpm6_perf_autotest` figures for
/// the same cases, in cycles (see [`sluice_bench::DPDK_REFERENCE_MACHINE`]).
mod dpdk {
    /// IPv4, 1,076,806 routes, uniform addresses: single lookup.
    pub const V4_SINGLE: f64 = 31.4;
    /// The same, bulk of 32.
    pub const V4_BULK: f64 = 28.1;
    /// The same, x4.
    pub const V4_X4: f64 = 34.9;
    /// IPv4 route add.
    pub const V4_ADD: f64 = 131_672.0;
    /// IPv4 route delete.
    pub const V4_DELETE: f64 = 83_341.0;
    /// IPv6, 1000 routes: single lookup.
    pub const V6_SINGLE: f64 = 29.9;
    /// The same, bulk.
    pub const V6_BULK: f64 = 22.2;
}

/// One measured case.
#[derive(Serialize, Debug, Clone)]
pub struct LpmResult {
    /// The usual fields (`bench`, `case`, `cycles_per_op`, `mops`, ...).
    #[serde(flatten)]
    pub base: BenchResult,
    /// `ipv4` or `ipv6`.
    pub family: &'static str,
    /// The route set: `v4` (Internet-like IPv4 mix), `v6` (DPDK's IPv6
    /// shape, depths even over /1–/128) or `v6-inet` (Internet-like IPv6).
    pub set: &'static str,
    /// Routes in the table.
    pub routes: usize,
    /// How lookup addresses were drawn: `uniform`, `routed`, `runs400`,
    /// `random`; `-` for add and delete.
    pub addrs: &'static str,
    /// `single`, `x4`, `bulk32`, `bulk32-or` (IPv4), `bulk`, `bulk-or`
    /// (IPv6), `add`, `delete`.
    pub api: &'static str,
    /// Percent of lookups that found no route.
    pub unrouted_percent: f64,
    /// Rounds measured (1 for add and delete).
    pub rounds: usize,
    /// The best round's cycles per lookup (a round's figure: the median of
    /// its batches).
    pub cycles_min: f64,
    /// The worst round's.
    pub cycles_max: f64,
}

/// The timed body of an API: looks up one batch, returns the misses.
type Body<'a, A> = Box<dyn FnMut(&[A]) -> u64 + 'a>;

/// A lookup API under test: its name, lookups per call (bulk), and its
/// body.
struct Api<'a, A> {
    name: &'static str,
    bulk: Option<usize>,
    body: Body<'a, A>,
}

/// What the two families' tables share, for the code that measures both.
trait Table {
    /// An address.
    type Addr: Copy;
    /// A generated route.
    type Route: std::fmt::Display;
    /// Adds `r`.
    fn add_route(&mut self, r: &Self::Route) -> Result<(), String>;
    /// Deletes `r`.
    fn delete_route(&mut self, r: &Self::Route) -> Result<(), String>;
    /// The next hop of `addr`.
    fn lookup_one(&self, addr: Self::Addr) -> Option<u32>;
    /// The next hops of four addresses at once.
    fn lookup_four(&self, addrs: [Self::Addr; 4]) -> [Option<u32>; 4];
    /// Routes in the table.
    fn routes(&self) -> usize;
    /// Second-level groups in use.
    fn groups_used(&self) -> usize;
}

/// Implements [`Table`] for a table type whose inherent methods have the
/// same names for its own address and route types.
macro_rules! impl_table {
    ($table:ty, $addr:ty, $route:ty) => {
        impl Table for $table {
            type Addr = $addr;
            type Route = $route;
            fn add_route(&mut self, r: &$route) -> Result<(), String> {
                self.add(r.prefix, r.depth, r.next_hop)
                    .map_err(|e| format!("add {r}: {e}"))
            }
            fn delete_route(&mut self, r: &$route) -> Result<(), String> {
                self.delete(r.prefix, r.depth)
                    .map_err(|e| format!("delete {r}: {e}"))
            }
            #[inline(always)]
            fn lookup_one(&self, addr: $addr) -> Option<u32> {
                self.lookup(addr)
            }
            #[inline(always)]
            fn lookup_four(&self, addrs: [$addr; 4]) -> [Option<u32>; 4] {
                self.lookup_x4(addrs)
            }
            fn routes(&self) -> usize {
                self.len()
            }
            fn groups_used(&self) -> usize {
                self.tbl8_groups_used()
            }
        }
    };
}

impl_table!(Lpm4, u32, Route4);
impl_table!(Lpm6, [u8; 16], Route6);

/// Adds every route of `routes` to `t`; the TSC ticks it took.
fn add_all<T: Table>(t: &mut T, routes: &[T::Route]) -> Result<u64, String> {
    let start = rdtsc_ordered();
    for r in routes {
        t.add_route(r)?;
    }
    Ok(rdtsc_ordered() - start)
}

/// Deletes every route of `routes` from `t`, which must be empty then; the
/// TSC ticks it took.
fn delete_all<T: Table>(t: &mut T, routes: &[T::Route]) -> Result<u64, String> {
    let start = rdtsc_ordered();
    for r in routes {
        t.delete_route(r)?;
    }
    let ticks = rdtsc_ordered() - start;
    if t.routes() != 0 || t.groups_used() != 0 {
        return Err(format!(
            "after deleting every route: {} routes, {} groups left",
            t.routes(),
            t.groups_used()
        ));
    }
    Ok(ticks)
}

/// The `single` and `x4` APIs of `t`: one lookup per call, and four.
fn single_and_x4<T: Table>(t: &T) -> [Api<'_, T::Addr>; 2] {
    [
        Api {
            name: "single",
            bulk: None,
            body: Box::new(move |a: &[T::Addr]| {
                let mut m = 0;
                for &x in a {
                    m += u64::from(t.lookup_one(x).is_none());
                }
                m
            }),
        },
        Api {
            name: "x4",
            bulk: Some(4),
            body: Box::new(move |a: &[T::Addr]| {
                let mut m = 0;
                for c in a.chunks_exact(4) {
                    for r in t.lookup_four([c[0], c[1], c[2], c[3]]) {
                        m += u64::from(r.is_none());
                    }
                }
                m
            }),
        },
    ]
}

/// What one API measured over all rounds.
struct ApiRounds {
    /// Cycles per lookup, per round: the median of the round's batches.
    per_round: Vec<f64>,
    /// Lookups, all rounds.
    ops: u64,
    /// Misses, all rounds.
    misses: u64,
}

/// Times each API over `rounds` rounds of `batches_per_round` batches;
/// batch `i` of a round is `batch(i)` (copied to a buffer before timing).
/// Errors when the APIs disagree on the misses of a round.
fn measure<'p, A: Copy>(
    apis: &mut [Api<'_, A>],
    rounds: usize,
    batches_per_round: usize,
    batch: &dyn Fn(usize) -> &'p [A],
) -> Result<Vec<ApiRounds>, String> {
    let mut per_api: Vec<ApiRounds> = apis
        .iter()
        .map(|_| ApiRounds {
            per_round: Vec::new(),
            ops: 0,
            misses: 0,
        })
        .collect();
    let mut buf: Vec<A> = Vec::new();
    // Warm-up: one batch through every API, untimed.
    for api in apis.iter_mut() {
        buf.clear();
        buf.extend_from_slice(batch(0));
        std::hint::black_box((api.body)(&buf));
    }
    for round in 0..rounds {
        let mut misses = vec![0u64; apis.len()];
        for a in round_order(round, apis.len()) {
            let mut ops = 0u64;
            let mut per_batch = Vec::with_capacity(batches_per_round);
            for b in 0..batches_per_round {
                buf.clear();
                buf.extend_from_slice(batch(round * batches_per_round + b));
                let start = rdtsc_ordered();
                let m = (apis[a].body)(&buf);
                let cycles = rdtsc_ordered() - start;
                misses[a] += std::hint::black_box(m);
                ops += buf.len() as u64;
                per_batch.push(cycles as f64 / buf.len().max(1) as f64);
            }
            let t = &mut per_api[a];
            t.per_round.push(median(&per_batch));
            t.ops += ops;
            t.misses += misses[a];
        }
        if let Some(k) = misses.iter().position(|&m| m != misses[0]) {
            return Err(format!(
                "round {round}: {} found {} misses, {} found {}",
                apis[0].name, misses[0], apis[k].name, misses[k]
            ));
        }
    }
    Ok(per_api)
}

/// The rows of one table's lookup cases.
fn lookup_rows<A>(
    set: &'static str,
    routes: usize,
    addrs: &'static str,
    apis: &[Api<'_, A>],
    per_api: &[ApiRounds],
    backing: &str,
    dpdk_of: &dyn Fn(&str) -> Option<f64>,
) -> Vec<LpmResult> {
    apis.iter()
        .zip(per_api)
        .map(|(api, t)| {
            let spread = Spread::of(&t.per_round);
            let cpo = spread.median;
            let mut base = BenchResult::new(
                "lpm",
                format!("{set} {} {addrs} {}", short(routes), api.name),
                1,
                cpo,
                mops_per_core(cpo),
            );
            base.bulk = api.bulk;
            base.ops = t.ops;
            base.backing = Some(backing.to_owned());
            base.dpdk_cycles_per_op = dpdk_of(api.name);
            LpmResult {
                base,
                family: family_of(set),
                set,
                routes,
                addrs,
                api: api.name,
                unrouted_percent: t.misses as f64 * 100.0 / t.ops.max(1) as f64,
                rounds: t.per_round.len(),
                cycles_min: spread.min,
                cycles_max: spread.max,
            }
        })
        .collect()
}

/// The row of an add or delete.
fn change_row(
    set: &'static str,
    routes: usize,
    api: &'static str,
    cycles: u64,
    backing: &str,
    dpdk: Option<f64>,
) -> LpmResult {
    let cpo = cycles as f64 / routes.max(1) as f64;
    let mut base = BenchResult::new(
        "lpm",
        format!("{set} {} {api}", short(routes)),
        1,
        cpo,
        mops_per_core(cpo),
    );
    base.ops = routes as u64;
    base.backing = Some(backing.to_owned());
    base.dpdk_cycles_per_op = dpdk;
    LpmResult {
        base,
        family: family_of(set),
        set,
        routes,
        addrs: "-",
        api,
        unrouted_percent: 0.0,
        rounds: 1,
        cycles_min: cpo,
        cycles_max: cpo,
    }
}

/// `ipv4` for the `v4` set, else `ipv6`.
fn family_of(set: &str) -> &'static str {
    if set.starts_with("v4") {
        "ipv4"
    } else {
        "ipv6"
    }
}

/// `1k`, `100k`, `1M` (DPDK's 1,076,806), else the number.
fn short(n: usize) -> String {
    match n {
        1000 => "1k".into(),
        100_000 => "100k".into(),
        V4_MILLION => "1M".into(),
        n => n.to_string(),
    }
}

/// tbl8 groups a set of IPv4 routes needs (at least 1).
fn v4_groups(routes: &[Route4]) -> u32 {
    Lpm4::tbl8_groups_needed(routes.iter().map(|r| (r.prefix, r.depth))).max(1)
}

/// Groups a set of IPv6 routes needs (at least 1).
fn v6_groups(routes: &[Route6]) -> u32 {
    Lpm6::tbl8_groups_needed(routes.iter().map(|r| (r.prefix, r.depth))).max(1)
}

/// An IPv4 table to measure.
struct V4Case {
    routes: usize,
    /// Address sets: `uniform` and/or `routed`.
    addrs: Vec<&'static str>,
    mem: LpmMemory,
    /// Whether DPDK's test measures this table (the 1M set, uniform
    /// addresses, default memory): its rows carry DPDK's figure.
    dpdk_set: bool,
}

/// Builds and measures one IPv4 table on the main lcore.
fn run_v4(case: V4Case, ops: u64) -> Result<Vec<LpmResult>, String> {
    let routes = routegen::ipv4_routes(case.routes, NEXT_HOPS, 1).map_err(|e| e.to_string())?;
    let cfg = LpmConfig {
        max_routes: case.routes.max(1) as u32,
        number_tbl8s: v4_groups(&routes),
    };
    let mut t = Lpm4::with_memory(cfg, case.mem).map_err(|e| e.to_string())?;
    let backing = t.backing().to_string();
    let mut rows = Vec::new();
    let add = add_all(&mut t, &routes)?;
    if case.dpdk_set {
        rows.push(change_row(
            "v4",
            case.routes,
            "add",
            add,
            &backing,
            Some(dpdk::V4_ADD),
        ));
    }
    let batches = (ops as usize / BATCH).max(ROUNDS);
    let per_round = batches / ROUNDS;
    for &mode in &case.addrs {
        let pool = match mode {
            "uniform" => routegen::ipv4_uniform_addrs(POOL, 2),
            _ => routegen::ipv4_addrs(&routes, POOL, 2),
        };
        let batch = |i: usize| {
            let at = (i * BATCH) % POOL;
            &pool[at..at + BATCH]
        };
        let t = &t;
        let [single, x4] = single_and_x4(t);
        let mut apis: Vec<Api<u32>> = vec![
            single,
            x4,
            Api {
                name: "bulk32",
                bulk: Some(BULK),
                body: Box::new(move |a: &[u32]| {
                    let mut m = 0;
                    let mut out = [None; BULK];
                    for c in a.chunks(BULK) {
                        t.lookup_bulk(c, &mut out);
                        for r in &out[..c.len()] {
                            m += u64::from(r.is_none());
                        }
                    }
                    m
                }),
            },
            Api {
                name: "bulk32-or",
                bulk: Some(BULK),
                body: Box::new(move |a: &[u32]| {
                    let mut m = 0;
                    let mut out = [0u32; BULK];
                    for c in a.chunks(BULK) {
                        t.lookup_bulk_or(c, &mut out, u32::MAX);
                        for &r in &out[..c.len()] {
                            m += u64::from(r == u32::MAX);
                        }
                    }
                    m
                }),
            },
        ];
        let per_api = measure(&mut apis, ROUNDS, per_round, &batch)?;
        let dpdk_case = case.dpdk_set && mode == "uniform";
        // DPDK's bulk returns raw entries with a found bit: the sentinel
        // API is its match (the Option one stores twice per address).
        let dpdk_of = |api: &str| match (dpdk_case, api) {
            (true, "single") => Some(dpdk::V4_SINGLE),
            (true, "bulk32-or") => Some(dpdk::V4_BULK),
            (true, "x4") => Some(dpdk::V4_X4),
            _ => None,
        };
        rows.extend(lookup_rows(
            "v4",
            case.routes,
            mode,
            &apis,
            &per_api,
            &backing,
            &dpdk_of,
        ));
    }
    if case.dpdk_set {
        let del = delete_all(&mut t, &routes)?;
        rows.push(change_row(
            "v4",
            case.routes,
            "delete",
            del,
            &backing,
            Some(dpdk::V4_DELETE),
        ));
    }
    Ok(rows)
}

/// An IPv6 table to measure.
struct V6Case {
    routes: usize,
    mix: Ipv6Mix,
    /// Address sets: `runs400` and/or `random`.
    addrs: Vec<&'static str>,
    /// Whether DPDK's test measures this table (1000 routes, DPDK's shape):
    /// its rows carry DPDK's figure.
    dpdk_set: bool,
}

/// Builds and measures one IPv6 table on the main lcore.
fn run_v6(case: V6Case, ops: u64) -> Result<Vec<LpmResult>, String> {
    let routes =
        routegen::ipv6_routes(case.routes, NEXT_HOPS, case.mix, 1).map_err(|e| e.to_string())?;
    let cfg = LpmConfig {
        max_routes: case.routes.max(1) as u32,
        number_tbl8s: v6_groups(&routes),
    };
    let mut t = Lpm6::new(cfg).map_err(|e| e.to_string())?;
    let backing = t.backing().to_string();
    let fam = if case.mix == Ipv6Mix::Internet {
        "v6-inet"
    } else {
        "v6"
    };
    let mut rows = Vec::new();
    let add = add_all(&mut t, &routes)?;
    rows.push(change_row(fam, case.routes, "add", add, &backing, None));
    // One pass over the addresses per batch.
    let passes = (ops as usize / V6_ADDRS).max(ROUNDS);
    let per_round = passes / ROUNDS;
    for &mode in &case.addrs {
        let run = if mode == "runs400" { V6_RUN } else { 1 };
        let pool = routegen::ipv6_addrs(&routes, V6_ADDRS, run, 2);
        let batch = |_: usize| &pool[..];
        let t = &t;
        let [single, x4] = single_and_x4(t);
        let mut apis: Vec<Api<[u8; 16]>> = vec![
            single,
            x4,
            Api {
                name: "bulk",
                bulk: Some(V6_ADDRS),
                body: {
                    let mut out = vec![None; V6_ADDRS];
                    Box::new(move |a: &[[u8; 16]]| {
                        t.lookup_bulk(a, &mut out);
                        out.iter().filter(|r| r.is_none()).count() as u64
                    })
                },
            },
            Api {
                name: "bulk-or",
                bulk: Some(V6_ADDRS),
                body: {
                    let mut out = vec![0u32; V6_ADDRS];
                    Box::new(move |a: &[[u8; 16]]| {
                        t.lookup_bulk_or(a, &mut out, u32::MAX);
                        out.iter().filter(|&&r| r == u32::MAX).count() as u64
                    })
                },
            },
        ];
        let per_api = measure(&mut apis, ROUNDS, per_round, &batch)?;
        let dpdk_case = case.dpdk_set && mode == "runs400";
        let dpdk_of = |api: &str| match (dpdk_case, api) {
            (true, "single") => Some(dpdk::V6_SINGLE),
            (true, "bulk-or") => Some(dpdk::V6_BULK),
            _ => None,
        };
        rows.extend(lookup_rows(
            fam,
            case.routes,
            mode,
            &apis,
            &per_api,
            &backing,
            &dpdk_of,
        ));
    }
    let del = delete_all(&mut t, &routes)?;
    rows.push(change_row(fam, case.routes, "delete", del, &backing, None));
    Ok(rows)
}

/// Prints one row.
fn print_row(ctx: &Ctx, r: &LpmResult) {
    if ctx.json_row(&r.base.case, r) {
        return;
    }
    let dpdk = r
        .base
        .dpdk_cycles_per_op
        .map_or_else(|| "-".to_owned(), |c| c.to_string());
    let mut detail = Vec::new();
    if r.rounds > 1 {
        detail.push(format!("{:.1}-{:.1}", r.cycles_min, r.cycles_max));
        detail.push(format!("unrouted {:.1} %", r.unrouted_percent));
    }
    if let Some(b) = &r.base.backing {
        detail.push(b.clone());
    }
    let line = format!(
        "{:<30} {:>10.1} {:>9.1}  {:<12} {}",
        r.base.case,
        r.base.cycles_per_op,
        r.base.mops,
        dpdk,
        detail.join(", ")
    );
    emit(line.trim_end());
}

/// Runs the LPM cases of `sel` (`--quick` keeps the 1k and 100k IPv4
/// sets and the 1000-route IPv6 set, with fewer lookups).
pub fn run(ctx: &mut Ctx, sel: Selection) {
    let ops = ctx.ops(DEFAULT_OPS);
    let small = ctx.quick() || sel == Selection::Summary;
    let notes = vec![
        format!(
            "One core (CPU {}). IPv4: batches of {BATCH} addresses, single / x4 / bulk of {BULK}; \
             IPv6: passes over {V6_ADDRS} addresses, single / x4 / one bulk call. {ops} lookups per API \
             per table in {ROUNDS} interleaved rounds; cycles/op = median over rounds of each round's median batch (min-max of rounds after). \
             add / delete: cycles per route, whole set.",
            ctx.main_cpu()
        ),
        "Addresses: uniform = whole IPv4 space (DPDK's; 12.5 % unrouted), routed = under the \
         routes + 12 % unrouted, runs400 = DPDK's IPv6 pattern (runs of 400 under each route in \
         turn), random = a random route each."
            .to_owned(),
        sluice_bench::dpdk_reference_note(
            "lpm_perf_autotest and lpm6_perf_autotest (`echo lpm_perf_autotest | dpdk-test -l \
             0-1 --no-pci`), in cycles per lookup or per route",
        ),
        "DPDK's bulk figures stand beside the sentinel API (-or): DPDK's bulk lookup returns \
         raw entries with a found bit, as that API does; the Option API stores twice per \
         address."
            .to_owned(),
    ];
    ctx.title(
        "lpm (cf. DPDK lpm_perf_autotest, lpm6_perf_autotest)",
        &notes,
    );
    if !ctx.json {
        emit(&format!(
            "{:<30} {:>10} {:>9}  {:<12} detail",
            "case", "cycles/op", "Mops", "DPDK 22.11"
        ));
    }
    let cpu = ctx.main_cpu();
    let mut v4: Vec<V4Case> = vec![
        V4Case {
            routes: 1000,
            addrs: vec!["routed"],
            mem: LpmMemory::Auto,
            dpdk_set: false,
        },
        V4Case {
            routes: 100_000,
            addrs: vec!["routed"],
            mem: LpmMemory::Auto,
            dpdk_set: false,
        },
    ];
    if !small {
        v4.push(V4Case {
            routes: V4_MILLION,
            addrs: vec!["uniform", "routed"],
            mem: LpmMemory::Auto,
            dpdk_set: true,
        });
        for mem in [LpmMemory::Transparent, LpmMemory::Small] {
            v4.push(V4Case {
                routes: V4_MILLION,
                addrs: vec!["uniform"],
                mem,
                dpdk_set: false,
            });
        }
    }
    for case in v4 {
        let name = format!("v4 {}", short(case.routes));
        match on_lcore(cpu, move || run_v4(case, ops)) {
            Ok(rows) => rows.iter().for_each(|r| print_row(ctx, r)),
            Err(e) => ctx.report(&name, Err(e)),
        }
    }
    let mut v6 = vec![V6Case {
        routes: 1000,
        mix: Ipv6Mix::UniformDepth,
        addrs: vec!["runs400", "random"],
        dpdk_set: true,
    }];
    if !small {
        v6.push(V6Case {
            routes: 100_000,
            mix: Ipv6Mix::Internet,
            addrs: vec!["random"],
            dpdk_set: false,
        });
    }
    for case in v6 {
        let name = format!("v6 {}", short(case.routes));
        match on_lcore(cpu, move || run_v6(case, ops)) {
            Ok(rows) => rows.iter().for_each(|r| print_row(ctx, r)),
            Err(e) => ctx.report(&name, Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_counts_match_the_tables() {
        let r4 = routegen::ipv4_routes(5000, 4, 1).unwrap();
        let mut t = Lpm4::new(LpmConfig {
            max_routes: 5000,
            number_tbl8s: v4_groups(&r4),
        })
        .unwrap();
        for r in &r4 {
            t.add(r.prefix, r.depth, r.next_hop).unwrap();
        }
        assert_eq!(t.tbl8_groups_used() as u32, v4_groups(&r4));
        let r6 = routegen::ipv6_routes(300, 4, Ipv6Mix::Internet, 1).unwrap();
        let mut t = Lpm6::new(LpmConfig {
            max_routes: 300,
            number_tbl8s: v6_groups(&r6),
        })
        .unwrap();
        for r in &r6 {
            t.add(r.prefix, r.depth, r.next_hop).unwrap();
        }
        assert_eq!(t.tbl8_groups_used() as u32, v6_groups(&r6));
    }

    #[test]
    fn apis_that_disagree_are_an_error() {
        let data = [1u32, 2, 3, 4];
        let mut apis: Vec<Api<u32>> = vec![
            Api {
                name: "a",
                bulk: None,
                body: Box::new(|x: &[u32]| x.len() as u64),
            },
            Api {
                name: "b",
                bulk: None,
                body: Box::new(|_: &[u32]| 0),
            },
        ];
        let err = measure(&mut apis, 2, 1, &|_| &data[..]).err().unwrap();
        assert_eq!(err, "round 0: a found 4 misses, b found 0");
        let per_api = measure(&mut apis[..1], 2, 3, &|_| &data[..]).unwrap();
        assert_eq!(per_api[0].ops, 24);
        assert_eq!(per_api[0].misses, 24);
        assert_eq!(per_api[0].per_round.len(), 2);
    }
}
