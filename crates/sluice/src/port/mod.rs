//! Ports: how packets get in and out.
//!
//! This layer is being built (see issue 3: the `Port` type, `RxQueue`/`TxQueue`
//! traits, configuration, statistics and the drivers). What exists today is
//! the naming of ports by spec strings, [`spec`], which every driver uses to
//! read its arguments.

pub mod spec;

pub use spec::{PortSpec, SpecArgs, SpecError};
