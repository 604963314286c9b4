//! The smallest complete forwarder: two ports, bursts both ways, stats on
//! Ctrl-C.
//!
//! ```text
//! cargo run --release -p sluice --example forwarder [SPEC0 SPEC1 [LIMIT]]
//! ```
//! SPEC0 and SPEC1 name the ports (default: two `null` ports); LIMIT stops
//! the run after that many packets (`10000000`) or seconds (`2.5s`).
//! Without it the forwarder runs until Ctrl-C (or SIGTERM).

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice::mbuf::{Burst, MbufPool, MbufPoolConfig};
use sluice::port::{Port, PortConfig, PortError};

/// When to stop, besides Ctrl-C.
enum Limit {
    None,
    Packets(u64),
    Time(Duration),
}

fn parse_limit(s: &str) -> Result<Limit, String> {
    if let Some(secs) = s.strip_suffix('s') {
        return secs
            .parse::<f64>()
            .ok()
            .filter(|v| *v > 0.0)
            .and_then(|v| Duration::try_from_secs_f64(v).ok())
            .map(Limit::Time)
            .ok_or_else(|| format!("'{s}' is not a number of seconds above 0"));
    }
    s.parse::<u64>()
        .map(Limit::Packets)
        .map_err(|_| format!("'{s}' is not a packet count or a duration like 2.5s"))
}

/// The two port specs and the limit, from the command line.
fn parse_args() -> Result<([String; 2], Limit), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok((["null".into(), "null".into()], Limit::None)),
        [a, b] => Ok(([a.clone(), b.clone()], Limit::None)),
        [a, b, l] => Ok(([a.clone(), b.clone()], parse_limit(l)?)),
        _ => Err("usage: forwarder [SPEC0 SPEC1 [PACKETS | SECONDSs]]".into()),
    }
}

fn main() -> ExitCode {
    let (specs, limit) = match parse_args() {
        Ok(args) => args,
        Err(usage) => return fail(usage),
    };
    match run(&specs, limit) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Reports `why` the forwarder failed and gives the exit status for it.
fn fail(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("forwarder: {why}");
    ExitCode::FAILURE
}

fn run(specs: &[String; 2], limit: Limit) -> sluice::Result<()> {
    // One pool for both ports; its per-lcore cache needs a registered thread.
    let _lcore = sluice::lcore::register()?;
    let pool = MbufPool::new(MbufPoolConfig {
        size: 8191,
        ..Default::default()
    })?;
    let mut ports: Vec<Port> = Vec::new();
    for (id, spec) in specs.iter().enumerate() {
        let config = PortConfig::new(Some(pool.clone())).port_id(id as u16);
        let mut port = sluice::driver::open(spec, config)?;
        port.start()?;
        ports.push(port);
    }

    // The first Ctrl-C asks for a clean stop (stats printed); a second one
    // ends the process at once, whatever the stop is waiting for.
    let stop = sluice::signal::on_interrupt()?;

    let counters: Vec<_> = ports.iter().map(Port::counters).collect();
    let start = Instant::now();
    let mut forwarded = 0u64;
    let mut dropped = 0u64;
    {
        let [a, b] = ports.as_mut_slice() else {
            unreachable!("two ports")
        };
        let (a_rx, a_tx) = a.queues_mut()?;
        let (b_rx, b_tx) = b.queues_mut()?;
        let mut burst: Burst = Burst::new();
        let mut polls = 0u64;
        while !stop.load(Ordering::Relaxed) {
            // a -> b, then b -> a. What Tx does not take is dropped (freed).
            for (rx, tx) in [(&mut a_rx[0], &mut b_tx[0]), (&mut b_rx[0], &mut a_tx[0])] {
                if rx.rx_burst(&mut burst) > 0 {
                    forwarded += tx.tx_burst(&mut burst) as u64;
                    dropped += burst.len() as u64;
                    burst.clear();
                }
            }
            polls += 1;
            // A port whose device failed (a threaded device's step
            // panicked) moves nothing more: end the run.
            if polls.is_multiple_of(1024) && counters.iter().any(|c| c.fault().is_some()) {
                break;
            }
            let done = match limit {
                Limit::None => false,
                Limit::Packets(n) => forwarded >= n,
                // Look at the clock now and then only.
                Limit::Time(d) => polls.is_multiple_of(1024) && start.elapsed() >= d,
            };
            if done {
                break;
            }
        }
    }

    let secs = start.elapsed().as_secs_f64();
    for p in ports.iter_mut() {
        p.stop();
    }
    for p in &ports {
        let s = p.stats();
        println!(
            "port {} ({}): rx {} tx {} rx_missed {} rx_nombuf {}",
            p.id(),
            p.name(),
            s.rx_packets,
            s.tx_packets,
            s.rx_missed,
            s.rx_nombuf
        );
    }
    println!(
        "forwarded {forwarded} packets in {secs:.2} s ({:.2} Mpps), dropped {dropped}",
        forwarded as f64 / secs / 1e6
    );
    drop(ports);
    pool.flush_local_cache();
    if let Some((i, f)) = counters
        .iter()
        .enumerate()
        .find_map(|(i, c)| c.fault().map(|f| (i, f)))
    {
        return Err(PortError::Driver(format!("port {i}: {f}")).into());
    }
    Ok(())
}
