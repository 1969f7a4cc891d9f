//! Command implementations behind the `pocketperf` CLI.

pub mod compare;
pub mod dialogue;
pub mod farm;
pub mod gate;
pub mod governor;
pub mod probe;
pub mod report;
pub mod run;
pub mod runtime;
