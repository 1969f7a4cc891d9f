//! Setting the hook up: the sensor's zones, the level table and plant the governor is tuned
//! on, and the line that says what runs (a controller, or `--governor fixed`'s held level).

use anyhow::{Result, bail};
use pocketperf_runtime::governor::{ActuatorState, PlantModel, ZoneSensor, ZoneSpec};

use crate::cmd::governor::{ActuatorArg, GovernorArgs};
use crate::sim::governor::{SimActuator, SimSensor};
use crate::sim::model::{HandsetProfile, profile};
use crate::telemetry::DeviceSpec;
use crate::telemetry::probe::{ZoneRole, probe};

pub(super) fn sensor_zones(root: &std::path::Path, choice: &str) -> Result<Vec<ZoneSpec>> {
    let p = probe(root);
    let scale = |u: crate::telemetry::probe::TempUnit| u.to_celsius(1000) / 1000.0;
    let pick: Vec<ZoneSpec> = p
        .thermal_zones
        .iter()
        .filter(|z| match choice {
            "skin" => z.role == ZoneRole::Skin,
            "soc" => z.role == ZoneRole::Soc,
            other => other.strip_prefix("zone:") == Some(z.name.as_str()),
        })
        .map(|z| ZoneSpec {
            name: z.name.clone(),
            path: z.dir.join("temp"),
            scale: scale(z.unit),
        })
        .collect();
    if !matches!(choice, "skin" | "soc") && !choice.starts_with("zone:") {
        bail!("--governor-sensor {choice}: expected skin, soc or zone:NAME");
    }
    if pick.is_empty() {
        let names: Vec<String> = p
            .thermal_zones
            .iter()
            .map(|z| format!("{} ({:?})", z.name, z.role))
            .collect();
        bail!(
            "--governor-sensor {choice}: no matching readable thermal zone under {} (zones: {})",
            root.display(),
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        );
    }
    Ok(pick)
}

pub(super) fn describe(
    a: &GovernorArgs,
    sensor: Option<&ZoneSensor>,
    levels: usize,
    device: &DeviceSpec,
) -> String {
    let zones = sensor.map_or_else(
        || format!("on {}", device.id()),
        |s| {
            s.zones()
                .iter()
                .map(|z| z.name.as_str())
                .collect::<Vec<_>>()
                .join("+")
        },
    );
    format!(
        "{} at {:.1} °C, sensor {} ({zones}), actuator {} ({levels} levels), period {} ms",
        a.governor.name(),
        a.target_temp,
        a.governor_sensor,
        a.governor_actuator.name(),
        a.governor_period_ms
    )
}

/// Level table and plant for a real decode loop, and the table's idle floor when it is a
/// power table. With a handset model: the model's platform power at each level (W), its RC
/// plant and its idle power; otherwise (or for the thread actuator, which has
/// no power table) an even normalized table (1 → 0) with a generic plant: half the range
/// sustainable, the time constants of the model when there is one, else the snapdragon
/// profile's.
pub(super) fn level_table(
    kind: ActuatorArg,
    levels: usize,
    model: Option<&HandsetProfile>,
    target_c: f64,
) -> (Vec<f64>, PlantModel, Option<f64>) {
    if let Some(m) = model {
        let lad = match kind {
            ActuatorArg::Duty => Some(crate::sim::governor::ladder(m, SimActuator::Duty)),
            ActuatorArg::Caps => Some(crate::sim::governor::ladder(m, SimActuator::Caps)),
            ActuatorArg::CapsDuty => Some(crate::sim::governor::ladder(m, SimActuator::CapsDuty)),
            _ => None,
        };
        if let Some(l) = lad.filter(|l| l.len() == levels) {
            let table = l.iter().map(|o| o.power_w).collect();
            return (
                table,
                crate::sim::governor::plant_model(m, SimSensor::Skin, target_c),
                Some(m.idle_w),
            );
        }
    }
    let table = if levels <= 1 {
        vec![1.0]
    } else {
        (0..levels)
            .map(|k| 1.0 - k as f64 / (levels - 1) as f64)
            .collect()
    };
    let (slow, fast) = model
        .cloned()
        .or_else(|| profile("snapdragon-8gen3"))
        .map(|p| crate::sim::governor::time_constants(&p))
        .unwrap_or((760.0, 18.0));
    (
        table,
        PlantModel {
            sustainable_output: 0.5,
            tau_slow_s: slow,
            tau_fast_s: fast,
        },
        None,
    )
}

pub(super) fn describe_fixed(
    a: &GovernorArgs,
    level: usize,
    levels: usize,
    st: &ActuatorState,
    device: &DeviceSpec,
) -> String {
    let mut held = Vec::new();
    if let Some(b) = st.busy {
        held.push(format!("busy {b:.2}"));
    }
    if let Some(n) = st.threads {
        held.push(format!("{n} threads"));
    }
    if !st.caps.is_empty() {
        held.push(format!(
            "caps {}",
            st.caps
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(";")
        ));
    }
    format!(
        "fixed at level {level} of 0–{} on {}, actuator {} ({}), no sensor",
        levels - 1,
        device.id(),
        a.governor_actuator.name(),
        held.join(", ")
    )
}
