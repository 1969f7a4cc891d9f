//! Command implementations behind the `pocketperf` CLI.

pub mod compare;
pub mod farm;
pub mod gate;
pub mod report;
pub mod run;
pub mod runtime;
