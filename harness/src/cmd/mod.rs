//! Command implementations behind the `pocketperf` CLI.

pub mod dialogue;
pub mod governor;
pub mod probe;
pub mod run;
pub mod runtime;
