//! The `pocketperf` harness library: SUT adapters, telemetry, devices, commands.
