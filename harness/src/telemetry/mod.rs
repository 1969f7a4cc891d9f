//! Telemetry: sysfs probing, sampling and energy meters (filled in by its owner).
