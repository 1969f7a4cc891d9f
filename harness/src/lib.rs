//! The `pocketperf` harness library: SUT adapters, telemetry, devices, commands.

pub mod governor_sim;
pub mod sim;
pub mod telemetry;
