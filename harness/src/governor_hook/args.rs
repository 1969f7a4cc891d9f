//! The governor flags checked before a run creates anything: what cannot apply on the device
//! (a simulated handset's own tree and model), the ranges, and `--governor fixed` with its
//! `--governor-level`.

use anyhow::{Result, bail};

use crate::cmd::governor::{ActuatorArg, GovernorArgs, GovernorKind};
use crate::telemetry::DeviceSpec;

/// Checks the governor flags for a run on `device` (the target and period ranges) and
/// refuses, by name, those that cannot apply there. On a simulated handset:
/// `--allow-sysfs-caps`, `--governor-sysfs-root`, `--governor-model` (the handset is the
/// model), and the caps actuators unless the run's decode is `paced` to the handset's OPP
/// ([`crate::sim::pace::Pacer`]; without it a cap would lower the simulated power but not the
/// real speed). Runs call it before they create anything.
pub fn check_args(a: &GovernorArgs, device: &DeviceSpec, paced: bool) -> Result<()> {
    check_fixed(a)?;
    if a.governor == GovernorKind::Off {
        return Ok(());
    }
    if device.handset().is_some() {
        let mut given = Vec::new();
        if !paced
            && matches!(
                a.governor_actuator,
                ActuatorArg::Caps | ActuatorArg::CapsDuty
            )
        {
            given.push(format!(
                "--governor-actuator {}",
                a.governor_actuator.name()
            ));
        }
        if a.allow_sysfs_caps {
            given.push("--allow-sysfs-caps".into());
        }
        if a.governor_sysfs_root != std::path::Path::new(DEFAULT_SYSFS_ROOT) {
            given.push("--governor-sysfs-root".into());
        }
        if a.governor_model.is_some() {
            given.push("--governor-model".into());
        }
        if !given.is_empty() {
            bail!(
                "{} not supported with --device {}: on a simulated handset the governor \
                 reads the handset's own tree and takes its gains from the handset's model, \
                 and its actuators are those that change the real runtime's work (duty, \
                 threads, threads-duty; caps and caps-duty only in the dialogue scenario, \
                 whose decode follows the handset's clock)",
                given.join(", "),
                device.id()
            );
        }
    }
    if !(a.target_temp.is_finite() && (0.0..=120.0).contains(&a.target_temp)) {
        bail!("--target-temp {}: must be in [0, 120] °C", a.target_temp);
    }
    if !(10..=60_000).contains(&a.governor_period_ms) {
        bail!(
            "--governor-period-ms {}: must be in [10, 60000]",
            a.governor_period_ms
        );
    }
    Ok(())
}

/// `--governor-level` goes with `--governor fixed` and only with it; a held level reads no
/// sensor and runs no controller, so the flags that tune those are refused with it.
pub(super) fn check_fixed(a: &GovernorArgs) -> Result<()> {
    match (a.governor, a.governor_level) {
        (GovernorKind::Fixed, None) => {
            bail!("--governor fixed needs --governor-level N (the actuator level to hold)")
        }
        (GovernorKind::Fixed, Some(_)) => {}
        (g, Some(_)) => bail!(
            "--governor-level applies to --governor fixed only (not {})",
            g.name()
        ),
        (_, None) => return Ok(()),
    }
    let mut given = Vec::new();
    if a.target_temp != DEFAULT_TARGET_C {
        given.push("--target-temp");
    }
    if a.governor_sensor != "skin" {
        given.push("--governor-sensor");
    }
    if a.governor_period_ms != DEFAULT_PERIOD_MS {
        given.push("--governor-period-ms");
    }
    if a.governor_model.is_some() {
        given.push("--governor-model");
    }
    if !given.is_empty() {
        bail!(
            "{} not used with --governor fixed: a held level reads no sensor and runs no controller",
            given.join(", ")
        );
    }
    Ok(())
}

/// The default of `--target-temp`, °C.
const DEFAULT_TARGET_C: f64 = 42.0;
/// The default of `--governor-period-ms`.
const DEFAULT_PERIOD_MS: u64 = 1000;

/// The default of `--governor-sysfs-root`.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys";

pub(super) fn check_sensor_choice(choice: &str) -> Result<()> {
    if !matches!(choice, "skin" | "soc") && !choice.starts_with("zone:") {
        bail!("--governor-sensor {choice}: expected skin, soc or zone:NAME");
    }
    Ok(())
}
