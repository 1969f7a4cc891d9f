//! Command implementations behind the `pocketperf` CLI.

pub mod backend;
pub mod compare;
pub mod early_stopping;
pub mod farm;
pub mod gate;
pub mod governor;
pub mod mmlu;
pub mod probe;
pub mod report;
pub mod run;
pub mod runtime;
pub mod scenario_bench;
pub mod serve;
pub mod soak;
