//! Page pool stress test: four lcores allocate buffers of random sizes from
//! three allocators each — page-pool fragments, page_frag_cache fragments,
//! whole page-pool pages — and free each one at random: at once, later on
//! the same thread, or on another thread it is sent to. Every buffer is
//! stamped over its first and last bytes when allocated and checked when
//! freed, so two buffers sharing bytes, or a buffer handed out while still in
//! use, are caught where they are freed. At the end every block must be back
//! in the provider, merged into the blocks it started with.
//!
//! Two of three frees go through the thread's [`BulkFree`] (one count
//! update per run of a page's fragments, pages home in stashes), flushed now
//! and then and at the end; the others drop the handle.
//!
//! Bounded in operations, not time; asserts nothing about speed.
//! `SLUICE_STRESS_OPS` overrides the operations per thread.
#![cfg(not(loom))]

mod common;

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use common::Rng;
use sluice::lcore;
use sluice::mempool::HugepagePolicy;
use sluice::pagepool::{
    BlockProvider, BulkFree, Frag, Page, PageFragAlloc, PageFragCache, PagePool, PagePoolConfig,
    ProviderConfig,
};

const THREADS: usize = 4;
/// Buffers a channel holds at most.
const CHANNEL: usize = 128;

fn ops_per_thread() -> u64 {
    common::ops_per_thread(20_000, 200_000)
}

/// A buffer and the stamp written into it.
enum Buf {
    Frag(Frag, u8),
    Page(Page, u8),
}

/// Bytes stamped at each end of a buffer.
const STAMP: usize = 64;

fn stamp(b: &mut [u8], tag: u8) {
    let n = b.len();
    b[..STAMP.min(n)].fill(tag);
    b[n.saturating_sub(STAMP)..].fill(tag);
}

fn check(b: &[u8], tag: u8) {
    let n = b.len();
    assert!(
        b[..STAMP.min(n)].iter().all(|&x| x == tag)
            && b[n.saturating_sub(STAMP)..].iter().all(|&x| x == tag),
        "a buffer's bytes changed while it was out (tag {tag})"
    );
}

impl Buf {
    fn check(&self) {
        match self {
            Buf::Frag(f, t) => {
                assert_eq!(f.as_ptr() as usize % 64, 0);
                check(f.as_slice(), *t)
            }
            Buf::Page(p, t) => {
                // SAFETY: the page is ours for its length.
                let s = unsafe { std::slice::from_raw_parts(p.as_ptr(), p.len()) };
                check(s, *t)
            }
        }
    }
}

enum Msg {
    Buf(Buf),
    /// Sender `i` will send nothing more.
    Done,
}

fn worker(
    id: usize,
    pools: (PagePool, PagePool),
    provider: BlockProvider,
    rx: Receiver<Msg>,
    peers: Vec<SyncSender<Msg>>,
    ops: u64,
) {
    let _l = lcore::register().unwrap();
    let (frag_pool, page_pool) = pools;
    frag_pool.bind_to_current_lcore().unwrap();
    page_pool.bind_to_current_lcore().unwrap();
    let mut frags = PageFragAlloc::new(frag_pool.clone());
    let mut cache = PageFragCache::new(&provider, 2 + (id as u32 % 2)).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((id as u64 + 1) * 0x1234_5678));
    let mut held: Vec<Buf> = Vec::new();
    let mut done_peers = 0;
    let mut bulk = BulkFree::new();
    let mut bulk_frees = 0u64;
    let mut free_rng = Rng(0x5851_f42d_4c95_7f2d ^ id as u64);
    let mut free_one = |b: Buf| {
        b.check();
        match (free_rng.below(3), b) {
            (0, b) => drop(b),
            (_, Buf::Frag(f, _)) => {
                bulk.free_frag(f);
                bulk_frees += 1;
            }
            (_, Buf::Page(p, _)) => {
                bulk.free_page(p);
                bulk_frees += 1;
            }
        }
        if free_rng.below(32) == 0 {
            bulk.flush();
        }
    };
    for i in 0..ops {
        let tag = (i as u8) ^ (id as u8 * 61);
        let buf = match rng.below(3) {
            0 => {
                let max = frags.max_frag() as u64;
                let size = match rng.below(3) {
                    0 => 2090,
                    1 => 1 + rng.below(max),
                    _ => 1 + rng.below(256),
                } as usize;
                let mut f = frags.alloc_frag(size).unwrap();
                stamp(f.as_mut_slice(), tag);
                Buf::Frag(f, tag)
            }
            1 => {
                let size = 1 + rng.below(cache.max_frag() as u64) as usize;
                let mut f = cache.alloc_frag(size).unwrap();
                stamp(f.as_mut_slice(), tag);
                Buf::Frag(f, tag)
            }
            _ => {
                let mut p = page_pool.alloc_page().unwrap();
                stamp(p.as_mut_slice(), tag);
                Buf::Page(p, tag)
            }
        };
        match rng.below(4) {
            0 => free_one(buf),
            1 => held.push(buf),
            _ => {
                // A bounded channel: a peer that is off its CPU (four threads
                // share two) must not let buffers pile up without bound.
                let to = rng.below(peers.len() as u64) as usize;
                match peers[to].try_send(Msg::Buf(buf)) {
                    Ok(()) => {}
                    Err(TrySendError::Full(Msg::Buf(b))) => free_one(b),
                    Err(e) => panic!("peer gone: {e}"),
                }
            }
        }
        // Free some of what we hold, oldest or random.
        while held.len() > 64 || (!held.is_empty() && rng.below(3) == 0) {
            let k = rng.below(held.len() as u64) as usize;
            free_one(held.swap_remove(k));
        }
        // Take what others sent.
        while let Ok(m) = rx.try_recv() {
            match m {
                Msg::Buf(b) => {
                    if rng.below(2) == 0 {
                        free_one(b)
                    } else {
                        held.push(b)
                    }
                }
                Msg::Done => done_peers += 1,
            }
        }
    }
    // Tell every peer we are done, draining our own channel while one is
    // full (two threads each waiting on the other's full channel would never
    // finish).
    for p in &peers {
        let mut m = Msg::Done;
        loop {
            match p.try_send(m) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) => m = back,
                Err(e) => panic!("peer gone: {e}"),
            }
            match rx.try_recv() {
                Ok(Msg::Buf(b)) => free_one(b),
                Ok(Msg::Done) => done_peers += 1,
                Err(_) => std::thread::yield_now(),
            }
        }
    }
    drop(peers);
    held.drain(..).for_each(&mut free_one);
    while done_peers < THREADS {
        match rx.recv().unwrap() {
            Msg::Buf(b) => free_one(b),
            Msg::Done => done_peers += 1,
        }
    }
    // The bulk context goes home first, then dropping the allocators gives
    // back what they hold of their pages; the pools themselves outlive every
    // thread (the main thread drops them).
    assert!(bulk_frees > 0);
    drop((bulk, frags, cache));
}

#[test]
fn random_allocs_and_frees_across_threads_give_every_block_back() {
    let provider = BlockProvider::new(ProviderConfig {
        name: "stress".into(),
        size: 64 << 20,
        hugepages: HugepagePolicy::Never,
    })
    .unwrap();
    let fresh = provider.stats();
    let ops = ops_per_thread();
    let pools: Vec<(PagePool, PagePool)> = (0..THREADS)
        .map(|i| {
            let cfg = |name: String, order| PagePoolConfig {
                name,
                order,
                cache_size: 16,
                ring_size: 16,
                ring_batch: 4,
                owner: None,
            };
            (
                PagePool::new(&provider, cfg(format!("frags{i}"), (i % 4) as u32)).unwrap(),
                PagePool::new(&provider, cfg(format!("pages{i}"), ((i + 1) % 4) as u32)).unwrap(),
            )
        })
        .collect();
    let (txs, rxs): (Vec<SyncSender<Msg>>, Vec<Receiver<Msg>>) =
        (0..THREADS).map(|_| sync_channel(CHANNEL)).unzip();
    let threads: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(i, rx)| {
            let pools = pools[i].clone();
            let provider = provider.clone();
            let peers = txs.clone();
            std::thread::spawn(move || worker(i, pools, provider, rx, peers, ops))
        })
        .collect();
    drop(txs);
    for t in threads {
        t.join().unwrap();
    }
    for (a, b) in &pools {
        assert!(
            a.all_home() && b.all_home(),
            "{:?} {:?}",
            a.stats(),
            b.stats()
        );
    }
    let used: u64 = pools
        .iter()
        .map(|(a, b)| a.stats().alloc_slow + b.stats().alloc_slow)
        .sum();
    assert!(used > 0);
    drop(pools);
    let end = provider.stats();
    assert_eq!(end.used_pages, 0, "{end:?}");
    assert_eq!(
        end.free_blocks, fresh.free_blocks,
        "merged back into the blocks it started with"
    );
    assert_eq!(end.allocs, end.frees);
}
