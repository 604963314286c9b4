//! The `/mempool/*` commands, answered from a [`Registry`] with DPDK's
//! names where they exist:
//!
//! - `/mempool/list`: the pools' names.
//! - `/mempool/info,NAME`: `name`, `size`, `cache_size`, `elt_size`,
//!   `populated_size`, `avail_count`, `in_use_count`, then Sluice's own:
//!   free mbufs in the ring and in lcore caches, the caches' hits, misses,
//!   refills and flushes, failed gets, the memory backing and the mbufs'
//!   data room and headroom.
//!
//! Reading a pool's counts takes no lock: the counts are loads of counters
//! its lcores write.

use std::sync::Arc;

use serde_json::{Value, json};
use sluice::mempool::Backing;

use crate::Registry;
use crate::registry::PoolEntry;
use crate::server::Commands;

/// Registers the `/mempool/*` commands on `commands`.
pub fn register(commands: &mut Commands, registry: &Arc<Registry>) {
    let r = Arc::clone(registry);
    commands.register(
        "/mempool/list",
        "The pools' names. No parameters",
        move |_| {
            Ok(json!(
                r.pools().iter().map(|p| p.name.clone()).collect::<Vec<_>>()
            ))
        },
    );
    let r = Arc::clone(registry);
    commands.register(
        "/mempool/info",
        "A pool's size, free and in-use counts and cache counters. Parameter: pool name",
        move |name| {
            if name.is_empty() {
                return Err("give a pool name: /mempool/info,NAME (see /mempool/list)".into());
            }
            let pool = r
                .pool(name)
                .ok_or_else(|| format!("no pool {name:?} (see /mempool/list)"))?;
            Ok(info(&pool))
        },
    );
}

/// One pool's `/mempool/info` object.
fn info(entry: &PoolEntry) -> Value {
    let pool = &entry.pool;
    let mempool = pool.mempool();
    let s = pool.stats();
    json!({
        "name": entry.name,
        "size": s.size,
        "cache_size": mempool.cache_size(),
        "elt_size": mempool.elt_size(),
        "populated_size": s.size,
        "avail_count": s.available,
        "in_use_count": s.in_use,
        "in_ring_count": s.in_ring,
        "cached_count": s.cached,
        "cache_hits": s.cache_hits,
        "cache_misses": s.cache_misses,
        "cache_refills": s.ring_refills,
        "cache_flushes": s.flushes,
        "get_failures": s.get_failures,
        "backing": match mempool.backing() {
            Backing::Hugepages => "hugepages",
            Backing::Anonymous => "anonymous",
        },
        "data_room": pool.data_room(),
        "headroom": pool.headroom(),
    })
}
