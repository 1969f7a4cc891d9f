//! Telemetry sampler cost benchmark.

fn main() {}
