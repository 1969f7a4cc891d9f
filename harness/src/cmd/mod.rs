//! Command implementations behind the `pocketperf` CLI.

pub mod early_stopping;
pub mod run;
pub mod runtime;
pub mod scenario_bench;
