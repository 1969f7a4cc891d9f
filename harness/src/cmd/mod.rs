//! Command implementations behind the `pocketperf` CLI.

pub mod backend;
pub mod run;
pub mod runtime;
