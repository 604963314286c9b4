//! Code that exists only to be measured against: the benchmarks compare
//! Sluice's own paths with these, and no application or driver uses them.
//!
//! - [`PageFragCache`]: Linux's page_frag_cache — fragments cut from blocks
//!   taken straight from the block provider and given back to it when their
//!   last fragment is freed — against which `sluice bench pagepool` measures
//!   the page pool's recycled pages. It lives in the library behind its
//!   `bench-baselines` feature (it shares the fragment carver and the page
//!   metadata with the page pool) and is reached from here.

pub use sluice::pagepool::PageFragCache;
