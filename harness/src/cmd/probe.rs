//! `pocketperf probe`: what a device exposes to the telemetry sampler — thermal zones with
//! their role guesses (and the zones skipped, with the reason), the battery with its inferred
//! current unit and discharge sign, cpufreq policies, the GPU, Pixel ODPM rails, powercap
//! zones, and the energy meter a run would use with its resolution (`docs/TELEMETRY.md`); then
//! the OpenCL platforms and devices of this host (`docs/OPENCL.md`).

use std::path::PathBuf;

use anyhow::{Context, Result};
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

/// Runs the probe and prints it: the device's sensors, then the OpenCL platforms and devices
/// this host's ICD loader sees (or why there are none). Exit code 0; a bad `--device` is an
/// error (2).
pub fn probe(a: &ProbeArgs) -> Result<i32> {
    let text = telemetry::probe_command(a.sysfs_root.as_deref(), a.device.as_deref(), a.json)?;
    let opencl = pocketperf_runtime::backend::opencl::list_devices();
    if a.json {
        let mut doc: serde_json::Value =
            serde_json::from_str(&text).context("probe: the sensor report is not JSON")?;
        let cl = match &opencl {
            Ok(platforms) => serde_json::json!({ "platforms": platforms }),
            Err(e) => serde_json::json!({ "platforms": [], "error": e.to_string() }),
        };
        if let Some(obj) = doc.as_object_mut() {
            obj.insert("opencl".into(), cl);
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(0);
    }
    print!("{text}");
    if !text.ends_with('\n') {
        println!();
    }
    print!("{}", opencl_text(&opencl));
    Ok(0)
}

/// The OpenCL part of the text report.
fn opencl_text(
    listing: &pocketperf_runtime::Result<Vec<pocketperf_runtime::backend::opencl::ClPlatformInfo>>,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("\nOpenCL (this host):\n");
    match listing {
        Err(e) => {
            let _ = writeln!(out, "  none: {e}");
        }
        Ok(platforms) => {
            for p in platforms {
                let _ = writeln!(
                    out,
                    "  platform {}: {} ({}, {})",
                    p.index, p.name, p.vendor, p.version
                );
                for d in &p.devices {
                    let _ = writeln!(
                        out,
                        "    device {}: {} [{}] {} compute units, {} MiB global, {} KiB local, \
                         work-group ≤ {}, unified memory {}, profiling {}, fp16 {}",
                        d.index,
                        d.name,
                        d.device_type,
                        d.compute_units,
                        d.global_mem_bytes >> 20,
                        d.local_mem_bytes >> 10,
                        d.max_work_group_size,
                        yes_no(d.host_unified_memory),
                        yes_no(d.profiling),
                        yes_no(d.fp16),
                    );
                }
            }
        }
    }
    out
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}
