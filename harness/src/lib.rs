//! The `pocketperf` harness library: SUT adapters, telemetry, devices, commands.

pub mod cmd;
pub mod farm;
pub mod governor_hook;
pub mod meta;
pub mod outputs;
pub mod model_store;
pub mod progress;
pub mod run;
pub mod serve;
pub mod sim;
pub mod soak;
pub mod sut;
pub mod telemetry;
