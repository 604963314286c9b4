//! `sluice bench fwd`'s same-run comparison with DPDK: Sluice's `null io`,
//! `null mac` and soft io cases, and `dpdk-testpmd` forwarding between two
//! `net_null` ports, measured in the same interleaved rounds.
//!
//! # Members
//! - `null io`, `null mac`: two Sluice `null` ports (Rx allocates, Tx
//!   frees), io or mac forwarding ([`super::fwd::cases`]).
//! - `soft io (inline, scalar)`, `soft io (inline)`: two soft ports on the
//!   built-in tester, the inline device's cycles excluded, the driver's
//!   scalar path and its vector path ([`super::fwd_vector`]).
//! - [`IO_CASE`], [`MAC_CASE`]: `dpdk-testpmd` with two `net_null` vdevs
//!   (64-byte packets), io or mac forwarding between them (paired
//!   topology), burst 32, mempool cache 256, one forwarding lcore pinned to
//!   the CPU Sluice's cases run on, beside its main lcore (which waits on
//!   its input). testpmd io runs whenever a case compared with it runs:
//!   `null io` and the soft io cases; testpmd mac with `null mac`.
//!
//! # Method
//! After an untimed warm-up of each Sluice member, [`ROUNDS`] rounds
//! (`sluice_bench::interleave`, the order changing every round); in each,
//! every member runs one slice on the same CPU, the others idle. A Sluice
//! slice forwards a fixed number of packets; its cycles per packet are its
//! TSC ticks over the packets forwarded, minus the device model's cycles
//! (soft). A testpmd slice is `start`, a warm-up, then a timed window
//! (`clear fwd stats all` ... `stop`); its cycles per packet are testpmd's
//! own `CPU cycles/packet` from `--record-core-cycles`: the TSC cycles of
//! the forwarding polls that received packets over the packets received.
//! A `net_null` Rx always returns a full burst, as a `null` port's does, so
//! both count every poll of the window. A figure is the median over rounds;
//! a ratio to testpmd the median of the per-round ratios, each taken
//! between slices a fraction of a second apart, so a change in the
//! machine's load moves both sides alike.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use sluice::driver::DRIVERS;
use sluice::mbuf::{Burst, MbufPool};
use sluice::mempool::Backing;
use sluice::port::{Port, PortCounters};
use sluice_bench::interleave;
use sluice_bench::stats::{Spread, median, mops_per_core, ratios};

use super::fwd::{BURST, CACHE, bench_pool, crossed_streams, forward, open_two};
use super::fwd_l3::{Slices, Timed, timed};
use super::fwd_vector::{PathPair, SCALAR_CASE, VECTOR_CASE, open_pair};
use super::testpmd::Testpmd;
use super::{BenchResult, Ctx, on_lcore};
use crate::app::io::engine::{Io, Mac};
use crate::app::options::Engine;

/// testpmd io forwarding over two `net_null` ports.
pub const IO_CASE: &str = "testpmd null io (same run)";
/// testpmd mac forwarding over two `net_null` ports.
pub const MAC_CASE: &str = "testpmd null mac (same run)";
/// Timed rounds (each member runs one slice per round).
pub const ROUNDS: usize = 32;
/// DPDK's drivers testpmd needs here.
pub const PMDS: [&str; 1] = ["net_null"];
/// testpmd's ports: `net_null` with the packet size of Sluice's `null`
/// ports.
const VDEVS: [&str; 2] = ["net_null0,size=64", "net_null1,size=64"];
/// testpmd's mbufs (Sluice's pool has 8191).
const TESTPMD_MBUFS: u32 = 8192;
/// Fewest packets a testpmd window must count to give a figure.
pub const MIN_WINDOW_PACKETS: u64 = 4096;
/// Windows a testpmd slice tries before it fails.
pub const WINDOW_TRIES: usize = 4;

/// One case of the rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// Two Sluice `null` ports, io or mac forwarding.
    Null(Engine),
    /// Two soft ports, the scalar path (`vector=off`) or the vector path
    /// (`vector=auto`).
    Soft {
        /// Whether it is the vector path.
        vector: bool,
    },
    /// testpmd over two `net_null` ports, io or mac forwarding.
    Testpmd(Engine),
}

/// Every member, in the order of the table.
const MEMBERS: [Member; 6] = [
    Member::Null(Engine::Io),
    Member::Null(Engine::Mac),
    Member::Testpmd(Engine::Io),
    Member::Testpmd(Engine::Mac),
    Member::Soft { vector: false },
    Member::Soft { vector: true },
];

impl Member {
    /// Its row's name.
    pub fn name(self) -> &'static str {
        match self {
            Member::Null(Engine::Mac) => "null mac",
            Member::Null(_) => "null io",
            Member::Soft { vector: false } => SCALAR_CASE,
            Member::Soft { vector: true } => VECTOR_CASE,
            Member::Testpmd(Engine::Mac) => MAC_CASE,
            Member::Testpmd(_) => IO_CASE,
        }
    }

    /// The testpmd member its ratio is taken to.
    pub fn counterpart(self) -> Option<Member> {
        match self {
            Member::Null(engine) => Some(Member::Testpmd(engine)),
            Member::Soft { .. } => Some(Member::Testpmd(Engine::Io)),
            Member::Testpmd(_) => None,
        }
    }

    /// Whether testpmd runs it.
    pub fn is_testpmd(self) -> bool {
        matches!(self, Member::Testpmd(_))
    }
}

/// The members to run: those `wants` names (the soft ones only if the
/// `soft` driver exists), and with `testpmd`, the testpmd members they
/// are compared with.
pub fn members(wants: impl Fn(&str) -> bool, testpmd: bool) -> Vec<Member> {
    let mut chosen: Vec<Member> = MEMBERS
        .into_iter()
        .filter(|m| !m.is_testpmd() && wants(m.name()))
        .filter(|m| !matches!(m, Member::Soft { .. }) || DRIVERS.contains(&"soft"))
        .collect();
    if testpmd {
        for t in MEMBERS.into_iter().filter(|m| m.is_testpmd()) {
            if wants(t.name()) || chosen.iter().any(|m| m.counterpart() == Some(t)) {
                chosen.push(t);
            }
        }
    }
    chosen.sort_by_key(|m| MEMBERS.iter().position(|x| x == m));
    chosen
}

/// testpmd's warm-up and timed window per slice.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Forwarding before the window.
    pub warm: Duration,
    /// The timed window.
    pub window: Duration,
}

impl Window {
    /// The window of a full run (about as long as a Sluice slice of the
    /// default packet count), or of a quick look.
    pub fn new(quick: bool) -> Window {
        if quick {
            Window {
                warm: Duration::from_millis(5),
                window: Duration::from_millis(20),
            }
        } else {
            Window {
                warm: Duration::from_millis(10),
                window: Duration::from_millis(30),
            }
        }
    }
}

/// testpmd forwarding between two `net_null` ports.
pub struct NullTestpmd {
    testpmd: Testpmd,
}

impl NullTestpmd {
    /// Starts testpmd with both lcores on `cpu`, its pool on `memory`, and
    /// waits until it answers. Its Rx queues are not flushed at `start`
    /// (`--no-flush-rx`): a `net_null` queue is never empty.
    pub fn spawn(cpu: usize, memory: Backing) -> Result<NullTestpmd, String> {
        let mbufs = format!("--total-num-mbufs={TESTPMD_MBUFS}");
        let testpmd = Testpmd::spawn_ports(
            "net_null",
            cpu,
            &VDEVS,
            memory,
            &["--port-topology=paired", "--no-flush-rx", &mbufs],
        )?;
        Ok(NullTestpmd { testpmd })
    }

    /// One slice: forwarding with `engine`, a warm-up, the timed window;
    /// returns testpmd's cycles per packet and the packets they were
    /// counted over. A window that counted fewer than
    /// [`MIN_WINDOW_PACKETS`] (its forwarding lcore hardly ran: the CPU
    /// went to other threads) is measured again, up to [`WINDOW_TRIES`]
    /// windows.
    pub fn slice(&mut self, engine: Engine, window: Window) -> Result<(f64, u64), String> {
        let mode = match engine {
            Engine::Mac => "set fwd mac",
            _ => "set fwd io",
        };
        let mut counted = Vec::new();
        for _ in 0..WINDOW_TRIES {
            self.testpmd.send(&[mode])?;
            self.testpmd.start(64, None)?;
            thread::sleep(window.warm);
            self.testpmd.open_window()?;
            self.testpmd.window_opened()?;
            thread::sleep(window.window);
            self.testpmd.close_window()?;
            let (figures, packets) = self.testpmd.window_closed_counted()?;
            let cycles = figures.cycles_per_packet;
            if packets >= MIN_WINDOW_PACKETS && cycles.is_finite() && cycles > 0.0 {
                return Ok((cycles, packets));
            }
            counted.push(packets);
        }
        Err(format!(
            "testpmd counted fewer than {MIN_WINDOW_PACKETS} packets in each of {WINDOW_TRIES} \
             windows ({counted:?}): its forwarding lcore did not get the CPU"
        ))
    }
}

/// What one member measured.
#[derive(Debug)]
pub struct Measured {
    /// The member.
    pub member: Member,
    /// Its cycles per packet, round by round.
    pub per_pkt: Vec<f64>,
    /// Its row: cycles per packet the median over rounds, and the figures
    /// of its testpmd counterpart, when that ran.
    pub row: BenchResult,
}

/// Measures `members` on `cpu`: each Sluice member forwards `ops` packets
/// in all, `testpmd` (needed when a testpmd member is among them) runs
/// `window` each round. Returns the members in the order given.
pub fn measure(
    cpu: usize,
    ops: u64,
    members: &[Member],
    testpmd: Option<NullTestpmd>,
    window: Window,
) -> Result<Vec<Measured>, String> {
    if testpmd.is_none() && members.iter().any(|m| m.is_testpmd()) {
        return Err("a testpmd case without testpmd".into());
    }
    let mut states = Vec::new();
    for &member in members {
        states.push(State::open(member)?);
    }
    let pools: Vec<MbufPool> = states.iter().filter_map(State::pool).collect();
    let slice = (ops / ROUNDS as u64).max(1024);
    let lcore_pools = pools.clone();
    let states = on_lcore(cpu, move || {
        let mut states = states;
        let mut testpmd = testpmd;
        let r = run_rounds(&mut states, testpmd.as_mut(), slice, window);
        // testpmd ends here: the Sluice side is done with the CPU.
        drop(testpmd);
        states.iter_mut().for_each(State::close);
        // Hand the cached buffers back before the lcore goes away.
        lcore_pools.iter().for_each(MbufPool::flush_local_cache);
        r.map(|()| states)
    })?;
    let mut measured = Vec::new();
    for state in states {
        measured.push(state.measured()?);
    }
    attach_counterparts(&mut measured);
    Ok(measured)
}

/// Sets each row's same-run DPDK figures from its counterpart's rounds.
fn attach_counterparts(measured: &mut [Measured]) {
    let testpmd: Vec<(Member, Vec<f64>, f64)> = measured
        .iter()
        .filter(|m| m.member.is_testpmd())
        .map(|m| (m.member, m.per_pkt.clone(), m.row.cycles_per_op))
        .collect();
    for m in measured.iter_mut() {
        let Some(t) = m.member.counterpart() else {
            continue;
        };
        if let Some((_, per_pkt, cycles)) = testpmd.iter().find(|(member, ..)| *member == t) {
            m.row.dpdk_same_run_cycles_per_op = Some(*cycles);
            m.row.vs_dpdk_same_run = Some(median(&ratios(&m.per_pkt, per_pkt)));
        }
    }
}

/// The median of the per-round ratios of `member` to `reference`, with
/// the smallest and largest; `None` unless both were measured.
pub fn ratio_spread(measured: &[Measured], member: Member, reference: Member) -> Option<Spread> {
    let find = |m: Member| measured.iter().find(|x| x.member == m);
    let (a, b) = (find(member)?, find(reference)?);
    Some(Spread::of(&ratios(&a.per_pkt, &b.per_pkt)))
}

/// A member's state on the lcore.
enum State {
    /// Two Sluice ports on a pool of their own.
    Sluice {
        member: Member,
        engine: Engine,
        pool: MbufPool,
        ports: Vec<Port>,
        slices: Slices,
    },
    /// A testpmd member.
    Testpmd {
        member: Member,
        engine: Engine,
        per_pkt: Vec<f64>,
        packets: u64,
    },
}

impl State {
    /// Opens a Sluice member's ports (not started yet).
    fn open(member: Member) -> Result<State, String> {
        let (engine, ports, pool) = match member {
            Member::Testpmd(engine) => {
                return Ok(State::Testpmd {
                    member,
                    engine,
                    per_pkt: Vec::new(),
                    packets: 0,
                });
            }
            Member::Null(engine) => {
                let pool = bench_pool()?;
                let spec = "null:size=64".to_owned();
                (engine, open_two(&pool, &[spec.clone(), spec])?, pool)
            }
            Member::Soft { vector } => {
                let pool = bench_pool()?;
                let value = if vector { "auto" } else { "off" };
                (Engine::Io, open_pair(&pool, value)?, pool)
            }
        };
        Ok(State::Sluice {
            member,
            engine,
            pool,
            ports,
            slices: Slices::default(),
        })
    }

    fn pool(&self) -> Option<MbufPool> {
        match self {
            State::Sluice { pool, .. } => Some(pool.clone()),
            State::Testpmd { .. } => None,
        }
    }

    /// Stops and closes a Sluice member's ports (on the lcore, before its
    /// cache goes back to the pool).
    fn close(&mut self) {
        if let State::Sluice { ports, .. } = self {
            ports.iter_mut().for_each(Port::stop);
            ports.clear();
        }
    }

    /// The member's figures (its pool, if any, must be full).
    fn measured(self) -> Result<Measured, String> {
        match self {
            State::Sluice {
                member,
                pool,
                slices,
                ..
            } => {
                let row = slices.result(&pool, member.name())?;
                Ok(Measured {
                    member,
                    per_pkt: slices.per_pkt,
                    row,
                })
            }
            State::Testpmd {
                member,
                per_pkt,
                packets,
                ..
            } => {
                let cycles = median(&per_pkt);
                let mut row = BenchResult::new(
                    "fwd",
                    member.name().to_owned(),
                    1,
                    cycles,
                    mops_per_core(cycles),
                );
                row.bulk = Some(BURST);
                row.cache = Some(CACHE);
                row.ops = packets;
                Ok(Measured {
                    member,
                    per_pkt,
                    row,
                })
            }
        }
    }
}

/// Starts the Sluice members' ports and warms them up, then runs the
/// rounds.
fn run_rounds(
    states: &mut [State],
    mut testpmd: Option<&mut NullTestpmd>,
    slice: u64,
    window: Window,
) -> Result<(), String> {
    let mut counters: Vec<Vec<Arc<PortCounters>>> = Vec::new();
    for state in states.iter_mut() {
        let mut these = Vec::new();
        if let State::Sluice { ports, engine, .. } = state {
            for port in ports.iter_mut() {
                port.start().map_err(|e| e.to_string())?;
            }
            these = ports.iter().map(Port::counters).collect();
            engine_slice(ports, &these, *engine, (slice / 2).max(1024))?;
        }
        counters.push(these);
    }
    interleave(ROUNDS, states.len(), |_, i| match &mut states[i] {
        State::Sluice {
            ports,
            engine,
            slices,
            ..
        } => engine_slice(ports, &counters[i], *engine, slice).map(|t| slices.add(t)),
        State::Testpmd {
            engine,
            per_pkt,
            packets,
            ..
        } => {
            let testpmd = testpmd.as_deref_mut().ok_or("no testpmd")?;
            let (cycles, n) = testpmd.slice(*engine, window)?;
            per_pkt.push(cycles);
            *packets += n;
            Ok(())
        }
    })
}

/// Forwards `n` packets between the two ports with `engine` (io or mac),
/// timed.
fn engine_slice(
    ports: &mut [Port],
    counters: &[Arc<PortCounters>],
    engine: Engine,
    n: u64,
) -> Result<Timed, String> {
    let mut streams = crossed_streams(ports)?;
    let mut burst: Burst<64> = Burst::new();
    timed(counters, || match engine {
        Engine::Mac => forward(Mac, &mut streams, &mut burst, n),
        _ => forward(Io, &mut streams, &mut burst, n),
    })
}

/// Why testpmd's cases cannot run here, if they cannot, and whether this
/// is a CI run (`CI=true`), where that is a failure.
fn testpmd_missing() -> Option<(String, bool)> {
    let why = super::testpmd::missing(&PMDS)?;
    Some((why, std::env::var("CI").as_deref() == Ok("true")))
}

/// Runs the same-run set: the Sluice cases wanted, testpmd beside them
/// when it is here, then their rows and notes.
pub fn run(ctx: &mut Ctx, ops: u64) {
    let mut chosen = members(|name| ctx.wants(name), true);
    if chosen.is_empty() {
        return;
    }
    let cpu = ctx.main_cpu();
    let window = Window::new(ctx.quick());
    // testpmd's pool on the kind of memory Sluice's pools get.
    let memory = bench_pool().map_or(Backing::Anonymous, |pool| pool.mempool().backing());
    let mut testpmd = None;
    if chosen.iter().any(|m| m.is_testpmd()) {
        match testpmd_missing() {
            Some((why, under_ci)) => {
                for t in chosen.iter().filter(|m| m.is_testpmd()) {
                    if under_ci {
                        ctx.report(t.name(), Err(format!("{why} (needed under CI)")));
                    } else {
                        ctx.skip(t.name(), &why);
                    }
                }
            }
            None => match NullTestpmd::spawn(cpu, memory) {
                Ok(t) => testpmd = Some(t),
                Err(e) => {
                    let first = chosen.iter().find(|m| m.is_testpmd()).map(|m| m.name());
                    ctx.report(first.unwrap_or(IO_CASE), Err(e));
                }
            },
        }
        if testpmd.is_none() {
            chosen.retain(|m| !m.is_testpmd());
        }
    }
    if chosen.is_empty() {
        return;
    }
    let ran_testpmd = testpmd.is_some();
    if ran_testpmd {
        ctx.note(&method_note(cpu, window, memory));
    }
    let measured = match measure(cpu, ops, &chosen, testpmd, window) {
        Ok(m) => m,
        Err(e) => {
            ctx.report(chosen[0].name(), Err(e));
            return;
        }
    };
    if let Some(paths) = PathPair::of(&measured) {
        ctx.note(&paths.note());
    }
    for m in &measured {
        if let Some(t) = m.member.counterpart()
            && let Some(spread) = ratio_spread(&measured, m.member, t)
        {
            ctx.note(&format!(
                "{} / {}: {:.2} (min-max {:.2}-{:.2})",
                m.member.name(),
                t.name(),
                spread.median,
                spread.min,
                spread.max
            ));
        }
        if m.member.is_testpmd() {
            let spread = Spread::of(&m.per_pkt);
            ctx.note(&format!(
                "{}: {:.2} cycles per packet (min-max {:.2}-{:.2})",
                m.member.name(),
                spread.median,
                spread.min,
                spread.max
            ));
        }
    }
    if measured
        .iter()
        .any(|m| matches!(m.member, Member::Soft { .. }))
    {
        super::note_contention(ctx);
    }
    for m in measured {
        let name = m.member.name();
        if !ctx.wants(name) {
            // Measured as the reference of another case only.
            continue;
        }
        let mut row = m.row;
        if let Member::Null(engine) = m.member {
            row.dpdk_cycles_per_op = super::fwd::cases()
                .into_iter()
                .find(|c| c.driver == "null" && c.engine == engine)
                .and_then(|c| c.dpdk);
        }
        ctx.report(name, Ok(row));
    }
}

/// The note on how testpmd's figures are taken.
fn method_note(cpu: usize, window: Window, memory: Backing) -> String {
    let eal = match memory {
        Backing::Hugepages => "--in-memory",
        Backing::Anonymous => "--no-huge",
    };
    format!(
        "`{IO_CASE}`, `{MAC_CASE}`: dpdk-testpmd io or mac forwarding between two net_null \
         ports (64 bytes, burst {BURST}, mempool cache {CACHE}, {TESTPMD_MBUFS} mbufs on \
         {memory}: {eal}), one forwarding lcore on CPU {cpu}; its CPU cycles/packet \
         (--record-core-cycles) over a {} ms window after a {} ms warm-up, one slice per round \
         in the same {ROUNDS} interleaved rounds as Sluice's null and soft io cases; medians \
         over rounds. `x DPDK same run`: the median of the per-round ratios to it. --iters does \
         not set testpmd's windows.",
        window.window.as_millis(),
        window.warm.as_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_bring_their_testpmd_counterparts() {
        let all = members(|_| true, true);
        assert!(all.contains(&Member::Testpmd(Engine::Io)));
        assert!(all.contains(&Member::Testpmd(Engine::Mac)));
        assert_eq!(
            members(|_| true, false)
                .iter()
                .filter(|m| m.is_testpmd())
                .count(),
            0
        );
        // `--case soft`: the soft rows and testpmd io as their reference.
        let soft = members(|n| n.contains("soft"), true);
        if DRIVERS.contains(&"soft") {
            assert_eq!(
                soft,
                [
                    Member::Testpmd(Engine::Io),
                    Member::Soft { vector: false },
                    Member::Soft { vector: true }
                ]
            );
        }
        // `--case mac`: null mac and testpmd mac only.
        assert_eq!(
            members(|n| n.contains("mac"), true),
            [Member::Null(Engine::Mac), Member::Testpmd(Engine::Mac)]
        );
        // The testpmd case alone.
        assert_eq!(
            members(|n| n == IO_CASE, true),
            [Member::Testpmd(Engine::Io)]
        );
        let mut names: Vec<_> = MEMBERS.iter().map(|m| m.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), MEMBERS.len());
    }

    #[test]
    fn null_members_forward_in_rounds_and_return_every_buffer() {
        let cpu = sluice::lcore::available_cpus()[0];
        let chosen = [Member::Null(Engine::Io), Member::Null(Engine::Mac)];
        let measured = measure(cpu, ROUNDS as u64 * 1024, &chosen, None, Window::new(true))
            .expect("the null members run");
        assert_eq!(measured.len(), 2);
        for (m, member) in measured.iter().zip(chosen) {
            assert_eq!(m.member, member);
            assert_eq!(m.per_pkt.len(), ROUNDS);
            assert!(m.row.ops >= ROUNDS as u64 * 1024, "{:?}", m.row);
            assert!(m.row.cycles_per_op > 0.0, "{:?}", m.row);
            assert!(m.row.dpdk_same_run_cycles_per_op.is_none());
        }
        assert!(
            measure(
                cpu,
                1024,
                &[Member::Testpmd(Engine::Io)],
                None,
                Window::new(true)
            )
            .is_err()
        );
    }

    #[test]
    fn testpmd_over_net_null_runs_beside_null_io() {
        if let Some((why, under_ci)) = testpmd_missing() {
            assert!(!under_ci, "{why} under CI");
            eprintln!("skipped: {why}");
            return;
        }
        let cpu = sluice::lcore::available_cpus()[0];
        let testpmd = NullTestpmd::spawn(cpu, Backing::Anonymous).expect("testpmd starts");
        let chosen = [Member::Null(Engine::Io), Member::Testpmd(Engine::Io)];
        let measured = measure(
            cpu,
            ROUNDS as u64 * 1024,
            &chosen,
            Some(testpmd),
            Window::new(true),
        )
        .expect("both members run");
        let testpmd_row = &measured[1].row;
        assert_eq!(testpmd_row.case, IO_CASE);
        assert!(
            testpmd_row.cycles_per_op > 0.0 && testpmd_row.ops > 0,
            "{testpmd_row:?}"
        );
        assert_eq!(measured[1].per_pkt.len(), ROUNDS);
        let null = &measured[0].row;
        assert_eq!(
            null.dpdk_same_run_cycles_per_op,
            Some(testpmd_row.cycles_per_op)
        );
        assert!(null.vs_dpdk_same_run.is_some_and(|x| x > 0.0), "{null:?}");
    }
}
