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

/// A switch flag's value (`--prefix-reuse on|off`), shared by the commands that take one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    On,
    Off,
}
