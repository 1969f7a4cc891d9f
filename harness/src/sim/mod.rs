//! Simulated handsets (`--device sim:<profile>`): the thermal/power model ([`model`]) and the
//! sysfs tree a simulated handset exposes ([`device`]), so the probe, the sampler, the energy
//! meters and the thermal governor run in CI exactly as on a phone; [`governor`] closes the
//! governor's loop on a handset model in virtual time (`pocketperf governor sim`); [`pace`]
//! imposes the handset's OPP on the real decode loop.
//!
//! The tree mirrors the layout of the shared fixture snapshots of the same handsets (Linux
//! thermal, power_supply, cpufreq ABIs; Adreno kgsl / Mali; Pixel ODPM). See
//! `docs/TELEMETRY.md` ("Simulated handsets").

pub mod device;
pub mod governor;
pub mod model;
pub mod pace;

pub use device::{
    ActivitySource, DriverClock, SimDevice, SimDriver, TruthPoint, cpu_clock_ns, truth_energy_at,
};

use std::path::PathBuf;

/// Errors of the simulated handsets.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The profile name is not one of [`model::profile_names`].
    #[error("unknown simulated handset `{name}`: known profiles are {known}")]
    UnknownProfile {
        /// Name given.
        name: String,
        /// Known names, comma-separated.
        known: String,
    },
    /// Creating or writing the simulated sysfs tree failed.
    #[error("simulated sysfs: cannot write {}: {source}", path.display())]
    Write {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The driver thread could not start.
    #[error("cannot start the simulated handset driver thread: {source}")]
    Thread {
        /// Cause.
        source: std::io::Error,
    },
    /// The driver thread panicked (a bug).
    #[error("the simulated handset driver thread panicked")]
    ThreadPanicked,
}
