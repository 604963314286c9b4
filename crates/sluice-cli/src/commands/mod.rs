//! The commands of `sluice`: each declares its arguments and puts a run
//! together from the application layer (`crate::app`) and the library. A
//! command never uses another command.

pub mod bench;
pub mod demo;
pub mod dist;
pub mod fwd;
pub mod l2fwd;
pub mod l3fwd;
pub mod stats;
pub mod traffic_gen;
pub mod tune;
