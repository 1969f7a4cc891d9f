//! `pocketperf probe`: what a device exposes to the telemetry sampler — thermal zones with
//! their role guesses (and the zones skipped, with the reason), the battery with its inferred
//! current unit and discharge sign, cpufreq policies, the GPU, Pixel ODPM rails, powercap
//! zones, and the energy meter a run would use with its resolution. See `docs/TELEMETRY.md`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::telemetry;

/// Arguments of `pocketperf probe`.
#[derive(Args, Debug, Clone, serde::Serialize)]
pub struct ProbeArgs {
    /// Sysfs root to probe (a directory laid out like `/sys`: `class/thermal`, ...).
    /// Overrides `--device`.
    #[arg(long)]
    pub sysfs_root: Option<PathBuf>,
    /// Device: `local` (probes `/sys`) or `sim:<profile>` (a fresh simulated handset:
    /// `sim:snapdragon-8gen3`, `sim:pixel-8-pro`).
    #[arg(long)]
    pub device: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs the probe and prints it. Exit code 0; a bad `--device` is an error (2).
pub fn probe(a: &ProbeArgs) -> Result<i32> {
    let text = telemetry::probe_command(a.sysfs_root.as_deref(), a.device.as_deref(), a.json)?;
    print!("{text}");
    if !text.ends_with('\n') {
        println!();
    }
    Ok(0)
}
