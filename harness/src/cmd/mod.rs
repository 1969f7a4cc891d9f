//! Command implementations behind the `pocketperf` CLI.

pub mod run;
pub mod runtime;
pub mod serve;
pub mod soak;
