//! Mempool and mbuf stress tests across threads.
//!
//! `elements_freed_on_other_lcores`: four lcores get batches of random size
//! from one pool (through their caches), hold some, free some at once and
//! pass the rest to the next lcore over a bounded channel, which frees them:
//! elements go out through one lcore's cache and come home through another's.
//! Each element carries an owner mark, set with a compare-and-swap from 0 when
//! it is got, moved from owner to owner when it is passed on, and cleared when
//! it is put back, so an element with two owners at once (handed out twice,
//! or freed while still held) fails the swap where it happens. Gets and puts
//! are counted. The lcores end without flushing their caches; afterwards the
//! pool must be full and every element allocatable by another thread.
//!
//! `mbuf_clones_and_chains_dropped_on_other_threads`: four lcores build chains
//! of one to four segments, stamp every segment with the chain's number, make
//! up to three clones and send them to the other lcores, which check the
//! stamps and drop them, all at about the same time: the last reference,
//! whichever thread drops it, frees every segment once. A segment freed early
//! and handed out again would be restamped and fail a check. At the end the
//! pool must be full and every mbuf allocatable by another thread.
//!
//! Bounded in operations, not time; assert nothing about speed.
//! `SLUICE_STRESS_OPS` overrides the operations per thread.
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread;

use common::Rng;
use sluice::lcore;
use sluice::mbuf::{Mbuf, MbufPool, MbufPoolConfig};
use sluice::mempool::{Elem, HugepagePolicy, Mempool, MempoolConfig};

const THREADS: usize = 4;
/// Items a channel holds at most.
const CHANNEL: usize = 64;

fn ops_per_thread() -> u64 {
    common::ops_per_thread(60_000, 600_000)
}

/// Senders to the other threads and the receiver of this one: `links(n)[i]`
/// belongs to thread `i`.
#[allow(clippy::type_complexity)]
fn links<T>(n: usize) -> Vec<(Vec<SyncSender<T>>, Receiver<T>)> {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| sync_channel::<T>(CHANNEL)).unzip();
    rxs.into_iter()
        .enumerate()
        .map(|(i, rx)| {
            let others = (0..n).filter(|&j| j != i).map(|j| txs[j].clone()).collect();
            (others, rx)
        })
        .collect()
}

/// Runs `work(pool, me, to, from)` on each of [`THREADS`] threads linked as
/// [`links`] makes them, `me` counting from 1; their results, in order.
fn on_linked_threads<P, T, R>(
    pool: &P,
    work: fn(P, u64, Vec<SyncSender<T>>, Receiver<T>) -> R,
) -> Vec<R>
where
    P: Clone + Send + 'static,
    T: Send + 'static,
    R: Send + 'static,
{
    let threads: Vec<_> = links(THREADS)
        .into_iter()
        .enumerate()
        .map(|(i, (to, from))| {
            let pool = pool.clone();
            thread::spawn(move || work(pool, i as u64 + 1, to, from))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// The owner mark in an element's first eight bytes: 0 while it is free,
/// otherwise the holding thread's number plus one.
fn mark(e: Elem) -> &'static AtomicU64 {
    // SAFETY: every element is cache-line aligned and at least 8 bytes; the
    // pool outlives every use (the test keeps a handle), and the mark is only
    // accessed atomically.
    unsafe { &*e.as_ptr().cast::<AtomicU64>() }
}

/// Takes ownership of `e` for `me`, from `from` (0: fresh from the pool).
fn take(e: Elem, from: u64, me: u64) {
    if let Err(seen) = mark(e).compare_exchange(from, me, Ordering::AcqRel, Ordering::Acquire) {
        panic!(
            "element {:p} owned by {seen}, expected {from} (taker {me})",
            e.as_ptr()
        );
    }
}

/// Counts of one thread's work.
#[derive(Default, Debug)]
struct Counts {
    got: u64,
    put: u64,
    sent: u64,
    received: u64,
    get_failures: u64,
}

fn pass_elements(
    pool: Mempool,
    me: u64,
    to: Vec<SyncSender<(u64, Elem)>>,
    from: Receiver<(u64, Elem)>,
) -> Counts {
    let _lcore = lcore::register().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ me.wrapping_mul(0x1000_0001));
    let mut held: Vec<Elem> = Vec::new();
    let mut c = Counts::default();
    let put = |held: &mut Vec<Elem>, n: usize, c: &mut Counts| {
        let at = held.len() - n;
        for &e in &held[at..] {
            take(e, me, 0);
        }
        // SAFETY: each element came from `pool`, is held by this thread
        // alone (its mark said so) and goes back once.
        unsafe { pool.put_bulk(&held[at..]) };
        held.truncate(at);
        c.put += n as u64;
    };
    for _ in 0..ops_per_thread() {
        match rng.below(4) {
            0 | 1 => {
                let n = 1 + rng.below(24) as usize;
                let mut batch = vec![Elem::DANGLING; n];
                if pool.get_bulk(&mut batch).is_ok() {
                    for &e in &batch {
                        take(e, 0, me);
                    }
                    c.got += n as u64;
                    held.extend_from_slice(&batch);
                } else {
                    c.get_failures += 1;
                }
            }
            2 => {
                let n = (rng.below(24) as usize).min(held.len());
                put(&mut held, n, &mut c);
            }
            _ => {
                if let Some(e) = held.pop() {
                    let to = &to[rng.below(to.len() as u64) as usize];
                    match to.try_send((me, e)) {
                        Ok(()) => c.sent += 1,
                        Err(TrySendError::Full((_, e)) | TrySendError::Disconnected((_, e))) => {
                            held.push(e);
                        }
                    }
                }
            }
        }
        while let Ok((sender, e)) = from.try_recv() {
            take(e, sender, me);
            c.received += 1;
            held.push(e);
        }
        if held.len() > 64 {
            let n = held.len() - 32;
            put(&mut held, n, &mut c);
        }
    }
    // Stop sending; free what others still send until every sender is gone.
    drop(to);
    let n = held.len();
    put(&mut held, n, &mut c);
    for (sender, e) in from {
        take(e, sender, me);
        c.received += 1;
        held.push(e);
        put(&mut held, 1, &mut c);
    }
    // The lcore ends without flushing its cache.
    c
}

/// Gets `size` elements from a thread that is not an lcore, then puts them back.
fn allocate_all(pool: &Mempool) {
    let mut all = vec![Elem::DANGLING; pool.size() as usize];
    pool.get_bulk(&mut all)
        .unwrap_or_else(|e| panic!("{e}: {:?}", pool.stats()));
    // SAFETY: from `pool`, once each.
    unsafe { pool.put_bulk(&all) };
}

#[test]
fn elements_freed_on_other_lcores() {
    let pool = Mempool::new(MempoolConfig {
        name: "stress-cross".into(),
        size: 1023,
        elt_size: 64,
        cache_size: 32,
        hugepages: HugepagePolicy::Never,
    })
    .unwrap();
    let counts = on_linked_threads(&pool, pass_elements);
    let got: u64 = counts.iter().map(|c| c.got).sum();
    let put: u64 = counts.iter().map(|c| c.put).sum();
    let sent: u64 = counts.iter().map(|c| c.sent).sum();
    let received: u64 = counts.iter().map(|c| c.received).sum();
    assert_eq!(got, put, "{counts:?}");
    assert_eq!(sent, received, "{counts:?}");
    assert!(sent > 0 && got > 0, "{counts:?}");
    let s = pool.stats();
    assert!(pool.is_full(), "{s:?}");
    assert_eq!((s.in_ring, s.cached), (1023, 0), "{s:?}");
    allocate_all(&pool);
    assert!(pool.is_full());
}

/// Data bytes stamped per segment.
const STAMP: usize = 8;

fn stamp_of(chain: u64, seg: usize) -> [u8; STAMP] {
    (chain.wrapping_mul(0x100_0000_01b3) ^ seg as u64).to_le_bytes()
}

fn check_chain(m: &Mbuf, chain: u64, segs: usize) {
    assert_eq!(m.nb_segs() as usize, segs);
    for (i, seg) in m.segments().enumerate() {
        assert_eq!(seg, stamp_of(chain, i), "segment {i} of chain {chain:#x}");
    }
}

fn clone_and_chain(
    pool: MbufPool,
    me: u64,
    to: Vec<SyncSender<(u64, usize, Mbuf)>>,
    from: Receiver<(u64, usize, Mbuf)>,
) -> u64 {
    let _lcore = lcore::register().unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ me.wrapping_mul(0x5851_f42d));
    let mut checked = 0u64;
    let ops = ops_per_thread() / 2;
    for op in 0..ops {
        let chain = me << 48 | op;
        let segs = 1 + rng.below(4) as usize;
        let built = (|| {
            let mut head = pool.alloc()?;
            head.append(STAMP)
                .ok()?
                .copy_from_slice(&stamp_of(chain, 0));
            for s in 1..segs {
                let mut seg = pool.alloc()?;
                seg.append(STAMP).ok()?.copy_from_slice(&stamp_of(chain, s));
                head.chain(seg).ok()?;
            }
            Some(head)
        })();
        // The pool may run short for a moment: skip this one (what was
        // allocated went back when it dropped).
        let Some(head) = built else { continue };
        check_chain(&head, chain, segs);
        for _ in 0..rng.below(4) {
            let clone = head.try_clone().unwrap();
            let to = &to[rng.below(to.len() as u64) as usize];
            // A full channel drops the clone here, which is fine too.
            let _ = to.try_send((chain, segs, clone));
        }
        // Dropped here, on another thread, or both: whoever is last frees it.
        if rng.below(2) == 0 {
            drop(head);
        } else if let Err(TrySendError::Full(back) | TrySendError::Disconnected(back)) =
            to[rng.below(to.len() as u64) as usize].try_send((chain, segs, head))
        {
            drop(back);
        }
        while let Ok((chain, segs, m)) = from.try_recv() {
            check_chain(&m, chain, segs);
            checked += 1;
        }
    }
    drop(to);
    for (chain, segs, m) in from {
        check_chain(&m, chain, segs);
        checked += 1;
    }
    checked
}

#[test]
fn mbuf_clones_and_chains_dropped_on_other_threads() {
    let pool = MbufPool::new(MbufPoolConfig {
        name: "stress-clones".into(),
        size: 1023,
        cache_size: 32,
        data_room: 256,
        headroom: 0,
        hugepages: HugepagePolicy::Never,
    })
    .unwrap();
    let checked: u64 = on_linked_threads(&pool, clone_and_chain).into_iter().sum();
    assert!(checked > 0);
    let s = pool.stats();
    assert!(pool.is_full(), "{s:?}");
    assert_eq!((s.in_ring, s.cached), (1023, 0), "{s:?}");
    let all: Vec<Mbuf> = (0..1023).map_while(|_| pool.alloc()).collect();
    assert_eq!(all.len(), 1023, "{:?}", pool.stats());
    drop(all);
    assert!(pool.is_full());
}
