//! Command implementations behind the `pocketperf` CLI.

pub mod mmlu;
pub mod run;
pub mod runtime;
