//! The `/mempool/*` commands, answered from a [`Registry`].

use crate::Registry;
use crate::server::Commands;

/// Registers the `/mempool/*` commands on `commands`.
pub fn register(_commands: &mut Commands, _registry: &std::sync::Arc<Registry>) {}
