//! `sluice fwd`: testpmd-style forwarding between ports given by spec, with
//! the engine of `--engine` (`app::io`).

use crate::app::io;
pub use crate::app::options::FwdArgs;
use crate::app::summary::require_clean;

/// Runs `sluice fwd`; an unclean tester report is an error.
pub fn run(args: &FwdArgs) -> Result<(), String> {
    let mut args = args.clone();
    args.run.observe = args.run.observe.for_command("fwd");
    require_clean(io::run(&args)?)
}
