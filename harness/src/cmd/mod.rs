//! Command implementations behind the `pocketperf` CLI.

pub mod governor;
pub mod run;
pub mod runtime;
