//! Command implementations behind the `pocketperf` CLI.

pub mod roofline;
pub mod run;
pub mod runtime;
