//! Ports: how packets get in and out.
//!
//! This layer is being built (see issue 3: the `Port` type, `RxQueue`/`TxQueue`
//! traits, configuration and the drivers). What exists today: the naming of
//! ports by spec strings, [`spec`], which every driver uses to read its
//! arguments, and the statistics types, [`stats`].

pub mod spec;
pub mod stats;

pub use spec::{PortSpec, SpecArgs, SpecError};
pub use stats::{BurstHistogram, PortStats, QueueCounts, RxQueueStats, TxQueueStats};
