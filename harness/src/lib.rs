//! The `pocketperf` harness library: SUT adapters, telemetry, devices, commands.

pub mod cmd;
pub mod farm;
pub mod governor_sim;
pub mod meta;
pub mod model_store;
pub mod progress;
pub mod serve;
pub mod sim;
pub mod soak;
pub mod sut_process;
pub mod telemetry;
