//! Device probe: discovers which thermal, power, frequency and energy sensors a sysfs root
//! exposes, infers their units and conventions, and picks the energy meter.
//!
//! Sysfs ABIs followed: `class/thermal` (zone `type`/`temp`, millidegree Celsius),
//! `class/power_supply` (µV, µA, µAh, µWh; current sign per the ABI: negative while
//! discharging, but vendors differ, hence inference), `devices/system/cpu/cpufreq/policy*`
//! (kHz), Adreno `class/kgsl/kgsl-3d0` (Hz), Mali devfreq-style platform attributes (kHz),
//! Pixel ODPM IIO devices (`name`, `enabled_rails`, `energy_value` in µW·s) and Linux
//! `class/powercap` RAPL zones (`energy_uj`, wrapping at `max_energy_range_uj`).
//! Everything is discovered by listing directories; nothing about a handset is hard-coded.
//!
//! Size: over 800 lines: every sysfs ABI the probe reads (thermal zones and roles, battery
//! unit and sign inference, cpufreq, Adreno/Mali, ODPM, powercap) feeds one meter choice.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::sysfs::{
    list_indexed, list_names, read_f64, read_i64, read_trimmed, read_u64_list, resolve_dir,
};

/// Unit a thermal zone reports its `temp` in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TempUnit {
    /// The ABI unit: 58100 = 58.1 °C.
    MilliCelsius,
    /// Some drivers report whole degrees: 58 = 58 °C.
    Celsius,
}

impl TempUnit {
    /// Converts a raw reading to °C.
    pub fn to_celsius(self, raw: i64) -> f64 {
        match self {
            TempUnit::MilliCelsius => raw as f64 / 1000.0,
            TempUnit::Celsius => raw as f64,
        }
    }
}

/// Role of a thermal zone guessed from its `type` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ZoneRole {
    /// On-die junction sensors (CPU, GPU, NPU clusters): fast, hottest.
    Soc,
    /// Skin / chassis proxies (board NTCs the vendor uses for skin temperature).
    Skin,
    /// Battery NTC.
    Battery,
    /// Other board NTCs (`*therm`).
    Board,
    /// Anything else (DDR, modem, ...).
    Other,
}

/// A thermal zone that reads as a temperature.
#[derive(Debug, Clone, Serialize)]
pub struct ThermalZone {
    /// Index `N` of `thermal_zoneN`.
    pub index: u32,
    /// Content of `type`.
    pub name: String,
    /// Zone directory.
    pub dir: PathBuf,
    /// Temperature at probe time, °C.
    pub temp_c: f64,
    /// Inferred unit of `temp`.
    pub unit: TempUnit,
    /// Guessed role.
    pub role: ZoneRole,
}

/// A thermal zone left out, and why.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedZone {
    /// Index `N` of `thermal_zoneN`.
    pub index: u32,
    /// Content of `type` when readable.
    pub name: Option<String>,
    /// Why it is not sampled.
    pub reason: String,
}

/// Unit of the battery current attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CurrentUnit {
    /// ABI unit.
    MicroAmp,
    /// Samsung/Huawei style.
    MilliAmp,
}

impl CurrentUnit {
    /// Factor from a raw reading to mA.
    pub fn to_ma(self) -> f64 {
        match self {
            CurrentUnit::MicroAmp => 1e-3,
            CurrentUnit::MilliAmp => 1.0,
        }
    }
}

/// Sign the raw battery current carries while the battery discharges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DischargeSign {
    /// ABI convention: negative while discharging.
    Negative,
    /// Some vendor builds: positive while discharging.
    Positive,
}

impl DischargeSign {
    /// Multiplier that makes discharge positive.
    pub fn factor(self) -> f64 {
        match self {
            DischargeSign::Negative => -1.0,
            DischargeSign::Positive => 1.0,
        }
    }
}

/// Unit of the battery voltage attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VoltageUnit {
    /// ABI unit.
    MicroVolt,
    /// Some vendor builds.
    MilliVolt,
}

impl VoltageUnit {
    /// Factor from a raw reading to mV.
    pub fn to_mv(self) -> f64 {
        match self {
            VoltageUnit::MicroVolt => 1e-3,
            VoltageUnit::MilliVolt => 1.0,
        }
    }
}

/// The power_supply of type `Battery`.
#[derive(Debug, Clone, Serialize)]
pub struct Battery {
    /// Directory name under `class/power_supply`.
    pub name: String,
    /// Resolved directory.
    pub dir: PathBuf,
    /// Attribute files present (sorted).
    pub attributes: Vec<String>,
    /// Content of `status`.
    pub status: Option<String>,
    /// Raw `current_now`.
    pub current_raw: Option<i64>,
    /// Inferred current unit and the rule that decided it.
    pub current_unit: Option<(CurrentUnit, String)>,
    /// Inferred discharge sign and the rule that decided it.
    pub discharge_sign: Option<(DischargeSign, String)>,
    /// What decided the sign.
    pub sign_basis: Option<SignBasis>,
    /// Inferred voltage unit.
    pub voltage_unit: Option<VoltageUnit>,
    /// `voltage_now` in mV.
    pub voltage_mv: Option<f64>,
    /// Current in mA, discharge positive.
    pub current_ma: Option<f64>,
    /// `charge_counter`, µAh.
    pub charge_counter_uah: Option<i64>,
    /// `energy_counter` (or `energy_now`), µWh.
    pub energy_counter_uwh: Option<i64>,
    /// Which attribute the energy counter came from.
    pub energy_counter_attr: Option<String>,
    /// Battery `temp` (tenths of °C in the ABI) in °C.
    pub temp_c: Option<f64>,
    /// `capacity`: state of charge, % (integer in the ABI).
    pub capacity_pct: Option<i64>,
}

/// A non-battery power supply (charger input).
#[derive(Debug, Clone, Serialize)]
pub struct PowerSupply {
    /// Directory name under `class/power_supply`.
    pub name: String,
    /// Content of `type` (`USB`, `Mains`, `Wireless`, ...).
    pub kind: String,
    /// Resolved directory.
    pub dir: PathBuf,
    /// `online` at probe time (None when unreadable).
    pub online: Option<bool>,
}

/// What decided the discharge sign of the battery current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SignBasis {
    /// `status` said Charging or Discharging.
    Status,
    /// The `charge_counter` trend decided.
    Trend,
    /// Nothing decided: the ABI convention was assumed.
    Default,
}

/// One cpufreq policy.
#[derive(Debug, Clone, Serialize)]
pub struct CpuPolicy {
    /// Directory name (`policy7`).
    pub name: String,
    /// Index `N` of `policyN`.
    pub index: u32,
    /// Policy directory.
    pub dir: PathBuf,
    /// `related_cpus`.
    pub related_cpus: Vec<u32>,
    /// `scaling_cur_freq`, kHz.
    pub cur_khz: Option<u64>,
    /// `scaling_min_freq`, kHz.
    pub min_khz: Option<u64>,
    /// `scaling_max_freq` (the effective cap), kHz.
    pub max_khz: Option<u64>,
    /// `cpuinfo_max_freq` (hardware maximum), kHz.
    pub cpuinfo_max_khz: Option<u64>,
    /// `scaling_available_frequencies`, kHz.
    pub available_khz: Vec<u64>,
    /// `scaling_governor`.
    pub governor: Option<String>,
}

/// GPU driver family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GpuKind {
    /// Qualcomm Adreno (`class/kgsl/kgsl-3d0`, Hz).
    Adreno,
    /// Arm Mali (platform device, kHz).
    Mali,
}

/// The GPU frequency/utilisation source.
#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    /// Driver family.
    pub kind: GpuKind,
    /// Resolved directory.
    pub dir: PathBuf,
    /// Model string when exposed.
    pub model: Option<String>,
    /// Current frequency, kHz.
    pub cur_khz: Option<u64>,
    /// Maximum allowed frequency (thermal cap), kHz.
    pub max_khz: Option<u64>,
    /// Busy percentage.
    pub busy_pct: Option<f64>,
    /// Available frequencies, kHz, ascending.
    pub available_khz: Vec<u64>,
}

/// One ODPM channel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OdpmRail {
    /// Channel number `n` of `CH<n>`.
    pub channel: u32,
    /// Schematic rail name.
    pub rail: String,
    /// Subsystem from `enabled_rails`.
    pub subsystem: Option<String>,
    /// Accumulated energy, µW·s.
    pub energy_uws: Option<u64>,
}

/// One Pixel ODPM IIO device, identified by its `name`.
#[derive(Debug, Clone, Serialize)]
pub struct OdpmDevice {
    /// Content of `name` (`s2mpg14-odpm`).
    pub name: String,
    /// Resolved IIO device directory.
    pub dir: PathBuf,
    /// `sampling_rate`, Hz.
    pub sampling_hz: Option<f64>,
    /// Enabled channels.
    pub rails: Vec<OdpmRail>,
}

/// One Linux powercap zone.
#[derive(Debug, Clone, Serialize)]
pub struct PowercapZone {
    /// Directory name (`intel-rapl:0`).
    pub id: String,
    /// Content of `name` (`package-0`, `psys`).
    pub label: String,
    /// Zone directory.
    pub dir: PathBuf,
    /// `energy_uj`.
    pub energy_uj: Option<u64>,
    /// `max_energy_range_uj` (the counter wraps to 0 past it).
    pub max_energy_range_uj: Option<u64>,
    /// True for `intel-rapl:N`, false for subzones `intel-rapl:N:M`.
    pub top_level: bool,
}

/// Energy meters, in preference order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum MeterKind {
    /// Sum of Pixel ODPM rail counters (µW·s).
    Odpm,
    /// Linux powercap `energy_uj`.
    Powercap,
    /// Battery `energy_counter` / `energy_now` (µWh).
    BatteryEnergyCounter,
    /// Battery `charge_counter` (µAh) × `voltage_now`.
    ChargeCounter,
    /// Trapezoid integral of `voltage_now` × `current_now`.
    IntegratedVi,
}

/// The energy meter chosen for a run.
#[derive(Debug, Clone, Serialize)]
pub struct MeterInfo {
    /// Meter kind.
    pub kind: MeterKind,
    /// Quantisation step in mJ (None when sample-rate limited).
    pub resolution_mj: Option<f64>,
    /// Human description of the resolution.
    pub resolution: String,
    /// False when a supply is online and the meter sees charging current.
    pub reliable: bool,
}

/// Everything the probe found under one sysfs root.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// The sysfs root probed.
    pub root: PathBuf,
    /// Zones that read as temperatures.
    pub thermal_zones: Vec<ThermalZone>,
    /// Zones left out, with the reason.
    pub skipped_zones: Vec<SkippedZone>,
    /// The battery, if any.
    pub battery: Option<Battery>,
    /// Non-battery supplies reporting `online` = 1.
    pub supplies_online: Vec<String>,
    /// Every non-battery supply (USB, AC, wireless) with its `online` state at probe time;
    /// the sampler watches them so a charger plugged in mid-run is noticed.
    pub supplies: Vec<PowerSupply>,
    /// cpufreq policies.
    pub cpu_policies: Vec<CpuPolicy>,
    /// GPU, if recognised.
    pub gpu: Option<Gpu>,
    /// Pixel ODPM devices, sorted by name.
    pub odpm: Vec<OdpmDevice>,
    /// powercap zones.
    pub powercap: Vec<PowercapZone>,
    /// The selected energy meter.
    pub meter: Option<MeterInfo>,
    /// Things the user should know.
    pub warnings: Vec<String>,
}

/// Probes a sysfs root (`/` on a device, a fixture or simulated tree elsewhere).
pub fn probe(root: &Path) -> Probe {
    let mut warnings = Vec::new();
    let (thermal_zones, skipped_zones) = probe_thermal(root);
    let (battery, supplies) = probe_power_supply(root);
    let supplies_online: Vec<String> = supplies
        .iter()
        .filter(|s| s.online == Some(true))
        .map(|s| s.name.clone())
        .collect();
    let cpu_policies = probe_cpufreq(root);
    let gpu = probe_gpu(root);
    let odpm = probe_odpm(root);
    let powercap = probe_powercap(root);
    for supply in &supplies_online {
        warnings.push(format!(
            "power supply `{supply}` is online: battery counters measure charging, not load; \
             unplug the charger for energy runs"
        ));
    }
    if thermal_zones.is_empty() {
        warnings.push("no readable thermal zone: temperatures will not be recorded".into());
    }
    let meter = select_meter(
        &odpm,
        &powercap,
        battery.as_ref(),
        supplies_online.is_empty(),
    );
    match &meter {
        None => warnings.push("no energy meter found: energy will not be reported".into()),
        Some(m) if !m.reliable => warnings.push(format!(
            "energy from {:?} is marked unreliable while a supply is online",
            m.kind
        )),
        Some(_) => {}
    }
    if let Some(b) = &battery
        && b.current_raw.is_some()
        && b.status.is_none()
    {
        warnings
            .push("battery has no `status`: discharge sign assumed from the ABI (negative)".into());
    }
    Probe {
        root: root.to_path_buf(),
        thermal_zones,
        skipped_zones,
        battery,
        supplies_online,
        supplies,
        cpu_policies,
        gpu,
        odpm,
        powercap,
        meter,
        warnings,
    }
}

/// True for zone names that are not temperatures (battery current limiting, voltage and
/// state-of-charge "zones" that Qualcomm BCL and similar drivers register).
pub fn is_non_temperature_zone(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("bcl")
        || n.contains("ibat")
        || n.contains("vbat")
        || n.starts_with("socd")
        || n.contains("-lvl")
        || n.contains("_lvl")
}

/// Guesses a zone's role from its type name (see `docs/TELEMETRY.md` for the table).
pub fn guess_role(name: &str) -> ZoneRole {
    let n = name.to_ascii_lowercase();
    if n.contains("skin") || n.contains("quiet") || n.contains("neutral") {
        return ZoneRole::Skin;
    }
    if n.contains("batt") {
        return ZoneRole::Battery;
    }
    if n.ends_with("therm") || n.ends_with("_therm") || n.contains("-therm") {
        return ZoneRole::Board;
    }
    const SOC_PREFIXES: [&str; 13] = [
        "cpu", "gpu", "nsp", "big", "mid", "little", "g3d", "tpu", "isp", "aoss", "soc", "x86_pkg",
        "cdsp",
    ];
    if SOC_PREFIXES.iter().any(|p| n.starts_with(p)) {
        return ZoneRole::Soc;
    }
    ZoneRole::Other
}

/// Infers the unit of a raw `temp` reading: the ABI says millidegrees; readings with an
/// absolute value below 200 can only be whole degrees (0.2 °C on a running handset is
/// impossible, 200 °C is beyond any silicon).
pub fn infer_temp_unit(raw: i64) -> TempUnit {
    if raw.unsigned_abs() < 200 {
        TempUnit::Celsius
    } else {
        TempUnit::MilliCelsius
    }
}

/// Plausible range of a handset temperature, °C; outside it a reading is garbage.
pub const TEMP_RANGE_C: (f64, f64) = (-40.0, 200.0);

fn probe_thermal(root: &Path) -> (Vec<ThermalZone>, Vec<SkippedZone>) {
    let base = root.join("class/thermal");
    let mut zones = Vec::new();
    let mut skipped = Vec::new();
    for (index, entry) in list_indexed(&base, "thermal_zone") {
        let Some(dir) = resolve_dir(&base.join(&entry)) else {
            skipped.push(SkippedZone {
                index,
                name: None,
                reason: "not a directory".into(),
            });
            continue;
        };
        let name = match read_trimmed(&dir.join("type")) {
            Ok(n) if !n.is_empty() => n,
            Ok(_) => {
                skipped.push(SkippedZone {
                    index,
                    name: None,
                    reason: "empty `type`".into(),
                });
                continue;
            }
            Err(e) => {
                skipped.push(SkippedZone {
                    index,
                    name: None,
                    reason: format!("`type` unreadable: {e}"),
                });
                continue;
            }
        };
        if is_non_temperature_zone(&name) {
            skipped.push(SkippedZone {
                index,
                name: Some(name),
                reason: "not a temperature (current/voltage/charge level zone)".into(),
            });
            continue;
        }
        match read_i64(&dir.join("temp")) {
            Ok(raw) => {
                let unit = infer_temp_unit(raw);
                let temp_c = unit.to_celsius(raw);
                if !(TEMP_RANGE_C.0..=TEMP_RANGE_C.1).contains(&temp_c) {
                    skipped.push(SkippedZone {
                        index,
                        name: Some(name),
                        reason: format!("implausible temperature {temp_c} °C (raw {raw})"),
                    });
                    continue;
                }
                let role = guess_role(&name);
                zones.push(ThermalZone {
                    index,
                    name,
                    dir,
                    temp_c,
                    unit,
                    role,
                });
            }
            Err(e) => skipped.push(SkippedZone {
                index,
                name: Some(name),
                reason: format!("`temp` unreadable: {e}"),
            }),
        }
    }
    (zones, skipped)
}

/// Infers the unit of the battery current. With `power_now` (µW) and a voltage the
/// interpretation whose V·I matches the reported power wins; otherwise magnitude decides:
/// below 10 000 the reading is mA (as µA it would be under 10 mA, less than any handset
/// draws with the screen on), from 10 000 up it is µA.
pub fn infer_current_unit(
    raw: i64,
    voltage_v: Option<f64>,
    power_now_uw: Option<i64>,
) -> (CurrentUnit, String) {
    if raw == 0 {
        return (CurrentUnit::MicroAmp, "zero reading: ABI default µA".into());
    }
    if let (Some(v), Some(p)) = (voltage_v, power_now_uw)
        && p != 0
        && v > 0.0
    {
        let p_w = (p as f64).abs() / 1e6;
        let as_ua = v * (raw as f64).abs() / 1e6;
        let as_ma = v * (raw as f64).abs() / 1e3;
        let d_ua = (as_ua / p_w).ln().abs();
        let d_ma = (as_ma / p_w).ln().abs();
        let limit = 3f64.ln();
        if d_ua.min(d_ma) < limit {
            return if d_ua <= d_ma {
                (CurrentUnit::MicroAmp, "V·I in µA matches power_now".into())
            } else {
                (CurrentUnit::MilliAmp, "V·I in mA matches power_now".into())
            };
        }
    }
    if raw.unsigned_abs() >= 10_000 {
        (CurrentUnit::MicroAmp, "|current| ≥ 10000: µA".into())
    } else {
        (CurrentUnit::MilliAmp, "|current| < 10000: mA".into())
    }
}

/// Infers the sign the raw current has while discharging, from `status`, else from the
/// trend of `charge_counter` (negative trend = discharging), else the ABI default.
pub fn infer_discharge_sign(
    status: Option<&str>,
    raw: i64,
    charge_trend: Option<i64>,
) -> (DischargeSign, String) {
    let discharging = match status.map(str::trim) {
        Some("Discharging") => Some(true),
        Some("Charging") => Some(false),
        _ => match charge_trend {
            Some(t) if t < 0 => Some(true),
            Some(t) if t > 0 => Some(false),
            _ => None,
        },
    };
    let source = if matches!(status.map(str::trim), Some("Discharging" | "Charging")) {
        "status"
    } else {
        "charge_counter trend"
    };
    match discharging {
        Some(d) if raw != 0 => {
            let sign = if (raw < 0) == d {
                DischargeSign::Negative
            } else {
                DischargeSign::Positive
            };
            let text = format!(
                "{source} says {} and current is {}",
                if d { "discharging" } else { "charging" },
                if raw < 0 { "negative" } else { "positive" }
            );
            (sign, text)
        }
        _ => (
            DischargeSign::Negative,
            "no status/trend to decide: ABI default (negative = discharging)".into(),
        ),
    }
}

/// What decided a sign, from the rule text [`infer_discharge_sign`] returns.
pub fn sign_basis_of(rule: &str) -> SignBasis {
    if rule.starts_with("status") {
        SignBasis::Status
    } else if rule.starts_with("charge_counter") {
        SignBasis::Trend
    } else {
        SignBasis::Default
    }
}

/// Infers the voltage unit: a Li-ion cell sits between 2.5 and 5 V, i.e. millions in µV and
/// thousands in mV.
pub fn infer_voltage_unit(raw: i64) -> VoltageUnit {
    if raw.unsigned_abs() >= 100_000 {
        VoltageUnit::MicroVolt
    } else {
        VoltageUnit::MilliVolt
    }
}

fn probe_power_supply(root: &Path) -> (Option<Battery>, Vec<PowerSupply>) {
    let base = root.join("class/power_supply");
    let mut batteries = Vec::new();
    let mut supplies = Vec::new();
    for name in list_names(&base) {
        let Some(dir) = resolve_dir(&base.join(&name)) else {
            continue;
        };
        let kind = read_trimmed(&dir.join("type")).unwrap_or_default();
        if kind == "Battery" {
            batteries.push((name, dir));
        } else {
            let online = read_i64(&dir.join("online")).ok().map(|v| v != 0);
            supplies.push(PowerSupply {
                name,
                kind,
                dir,
                online,
            });
        }
    }
    // Prefer the supply called `battery` when a device registers several (e.g. a gauge and a
    // wrapper); otherwise the first in name order.
    let pick = batteries
        .iter()
        .position(|(n, _)| n == "battery")
        .unwrap_or(0);
    let battery = (!batteries.is_empty()).then(|| {
        let (name, dir) = batteries.swap_remove(pick);
        probe_battery(name, dir)
    });
    (battery, supplies)
}

fn probe_battery(name: String, dir: PathBuf) -> Battery {
    let attributes = list_names(&dir);
    let status = read_trimmed(&dir.join("status")).ok();
    let voltage_raw = read_i64(&dir.join("voltage_now")).ok();
    let voltage_unit = voltage_raw.map(infer_voltage_unit);
    let voltage_mv = voltage_raw
        .zip(voltage_unit)
        .map(|(r, u)| r as f64 * u.to_mv());
    let current_raw = read_i64(&dir.join("current_now")).ok();
    let power_now = read_i64(&dir.join("power_now")).ok();
    let charge_counter_uah = read_i64(&dir.join("charge_counter")).ok();
    let current_unit =
        current_raw.map(|r| infer_current_unit(r, voltage_mv.map(|mv| mv / 1e3), power_now));
    let discharge_sign = current_raw.map(|r| infer_discharge_sign(status.as_deref(), r, None));
    let sign_basis = discharge_sign.as_ref().map(|(_, rule)| sign_basis_of(rule));
    let current_ma = match (current_raw, &current_unit, &discharge_sign) {
        (Some(r), Some((u, _)), Some((s, _))) => Some(r as f64 * u.to_ma() * s.factor()),
        _ => None,
    };
    let (energy_counter_uwh, energy_counter_attr) = ["energy_counter", "energy_now"]
        .iter()
        .find_map(|a| {
            read_i64(&dir.join(a))
                .ok()
                .map(|v| (Some(v), Some(a.to_string())))
        })
        .unwrap_or((None, None));
    let temp_c = read_i64(&dir.join("temp")).ok().map(|t| t as f64 / 10.0);
    let capacity_pct = read_i64(&dir.join("capacity")).ok();
    Battery {
        name,
        dir,
        attributes,
        status,
        current_raw,
        current_unit,
        discharge_sign,
        sign_basis,
        voltage_unit,
        voltage_mv,
        current_ma,
        charge_counter_uah,
        energy_counter_uwh,
        energy_counter_attr,
        temp_c,
        capacity_pct,
    }
}

fn probe_cpufreq(root: &Path) -> Vec<CpuPolicy> {
    let base = root.join("devices/system/cpu/cpufreq");
    list_indexed(&base, "policy")
        .into_iter()
        .filter_map(|(index, name)| {
            let dir = resolve_dir(&base.join(&name))?;
            let num = |f: &str| {
                read_i64(&dir.join(f))
                    .ok()
                    .and_then(|v| u64::try_from(v).ok())
            };
            let mut available_khz =
                read_u64_list(&dir.join("scaling_available_frequencies")).unwrap_or_default();
            available_khz.sort_unstable();
            Some(CpuPolicy {
                related_cpus: read_u64_list(&dir.join("related_cpus"))
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|c| u32::try_from(c).ok())
                    .collect(),
                cur_khz: num("scaling_cur_freq"),
                min_khz: num("scaling_min_freq"),
                max_khz: num("scaling_max_freq"),
                cpuinfo_max_khz: num("cpuinfo_max_freq"),
                available_khz,
                governor: read_trimmed(&dir.join("scaling_governor")).ok(),
                name,
                index,
                dir,
            })
        })
        .collect()
}

/// Parses kgsl's `gpu_busy_percentage` (`"86 %"`) or a plain number.
pub fn parse_percent(text: &str) -> Option<f64> {
    let t = text.trim().trim_end_matches('%').trim();
    t.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && (0.0..=100.0).contains(v))
}

/// Reads the GPU frequency (kHz) and busy percentage from a GPU source.
pub fn read_gpu_now(kind: GpuKind, dir: &Path) -> (Option<u64>, Option<f64>) {
    match kind {
        GpuKind::Adreno => {
            let hz = read_i64(&dir.join("gpuclk"))
                .or_else(|_| read_i64(&dir.join("devfreq/cur_freq")))
                .ok()
                .and_then(|v| u64::try_from(v).ok());
            let busy = read_trimmed(&dir.join("gpu_busy_percentage"))
                .ok()
                .and_then(|t| parse_percent(&t))
                .or_else(|| {
                    let v = read_u64_list(&dir.join("gpubusy")).ok()?;
                    match v.as_slice() {
                        [busy, total] if *total > 0 => Some(*busy as f64 * 100.0 / *total as f64),
                        _ => None,
                    }
                });
            (hz.map(|h| h / 1000), busy)
        }
        GpuKind::Mali => {
            let khz = read_i64(&dir.join("cur_freq"))
                .ok()
                .and_then(|v| u64::try_from(v).ok());
            let busy = read_trimmed(&dir.join("utilization"))
                .ok()
                .and_then(|t| parse_percent(&t));
            (khz, busy)
        }
    }
}

fn probe_gpu(root: &Path) -> Option<Gpu> {
    if let Some(dir) = resolve_dir(&root.join("class/kgsl/kgsl-3d0")) {
        let (cur_khz, busy_pct) = read_gpu_now(GpuKind::Adreno, &dir);
        let max_khz = read_i64(&dir.join("max_gpuclk"))
            .ok()
            .and_then(|v| u64::try_from(v).ok())
            .map(|h| h / 1000);
        let mut available_khz: Vec<u64> = read_u64_list(&dir.join("gpu_available_frequencies"))
            .or_else(|_| read_u64_list(&dir.join("devfreq/available_frequencies")))
            .unwrap_or_default()
            .into_iter()
            .map(|h| h / 1000)
            .collect();
        available_khz.sort_unstable();
        available_khz.dedup();
        return Some(Gpu {
            kind: GpuKind::Adreno,
            model: read_trimmed(&dir.join("gpu_model")).ok(),
            dir,
            cur_khz,
            max_khz,
            busy_pct,
            available_khz,
        });
    }
    let mali_dir = resolve_dir(&root.join("class/misc/mali0/device")).or_else(|| {
        let platform = root.join("devices/platform");
        list_names(&platform)
            .into_iter()
            .find(|n| n.ends_with(".mali"))
            .and_then(|n| resolve_dir(&platform.join(n)))
    })?;
    let (cur_khz, busy_pct) = read_gpu_now(GpuKind::Mali, &mali_dir);
    let max_khz = read_i64(&mali_dir.join("scaling_max_freq"))
        .or_else(|_| read_i64(&mali_dir.join("max_freq")))
        .ok()
        .and_then(|v| u64::try_from(v).ok());
    let mut available_khz =
        read_u64_list(&mali_dir.join("available_frequencies")).unwrap_or_default();
    available_khz.sort_unstable();
    Some(Gpu {
        kind: GpuKind::Mali,
        model: None,
        dir: mali_dir,
        cur_khz,
        max_khz,
        busy_pct,
        available_khz,
    })
}

/// Parses ODPM `enabled_rails`: lines `CH<n>[<schematic>]:<subsystem>`.
pub fn parse_enabled_rails(text: &str) -> Vec<(u32, String, Option<String>)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("CH")?;
            let open = rest.find('[')?;
            let close = rest.find(']')?;
            let channel = rest[..open].parse::<u32>().ok()?;
            let rail = rest.get(open + 1..close)?.trim().to_string();
            let subsystem = rest[close + 1..]
                .strip_prefix(':')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty());
            (!rail.is_empty()).then_some((channel, rail, subsystem))
        })
        .collect()
}

/// One parsed ODPM `energy_value` snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct OdpmSnapshot {
    /// `t=` — CLOCK_BOOTTIME ms of the driver's last refresh.
    pub t_ms: u64,
    /// (channel, rail, accumulated µW·s).
    pub channels: Vec<(u32, String, u64)>,
}

/// Parses ODPM `energy_value`: `t=<ms>` then `CH<n>(T=<ms>)[<rail>], <µW·s>` lines.
/// Returns None when the `t=` line is missing or no channel line parses.
pub fn parse_energy_value(text: &str) -> Option<OdpmSnapshot> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let t_ms = lines
        .next()?
        .strip_prefix("t=")?
        .trim()
        .parse::<u64>()
        .ok()?;
    let mut channels = Vec::new();
    for line in lines {
        let rest = line.strip_prefix("CH")?;
        let paren = rest.find('(')?;
        let channel = rest[..paren].parse::<u32>().ok()?;
        let open = rest.find('[')?;
        let close = rest.find(']')?;
        let rail = rest.get(open + 1..close)?.trim().to_string();
        let value = rest[close + 1..].trim_start_matches(',').trim();
        let energy = value.parse::<u64>().ok()?;
        channels.push((channel, rail, energy));
    }
    (!channels.is_empty()).then_some(OdpmSnapshot { t_ms, channels })
}

fn probe_odpm(root: &Path) -> Vec<OdpmDevice> {
    let base = root.join("bus/iio/devices");
    let mut devices: Vec<OdpmDevice> = list_names(&base)
        .into_iter()
        .filter_map(|entry| {
            let dir = resolve_dir(&base.join(&entry))?;
            let name = read_trimmed(&dir.join("name")).ok()?;
            if !name.ends_with("-odpm") {
                return None;
            }
            let enabled = read_trimmed(&dir.join("enabled_rails"))
                .map(|t| parse_enabled_rails(&t))
                .unwrap_or_default();
            let snapshot = read_trimmed(&dir.join("energy_value"))
                .ok()
                .and_then(|t| parse_energy_value(&t));
            let mut rails: Vec<OdpmRail> = enabled
                .into_iter()
                .map(|(channel, rail, subsystem)| OdpmRail {
                    energy_uws: snapshot.as_ref().and_then(|s| {
                        s.channels
                            .iter()
                            .find(|(c, r, _)| *c == channel && *r == rail)
                            .map(|(_, _, e)| *e)
                    }),
                    channel,
                    rail,
                    subsystem,
                })
                .collect();
            // Channels present in energy_value but not in enabled_rails still count.
            if let Some(s) = &snapshot {
                for (channel, rail, e) in &s.channels {
                    if !rails.iter().any(|r| r.channel == *channel) {
                        rails.push(OdpmRail {
                            channel: *channel,
                            rail: rail.clone(),
                            subsystem: None,
                            energy_uws: Some(*e),
                        });
                    }
                }
            }
            rails.sort_by_key(|r| r.channel);
            Some(OdpmDevice {
                sampling_hz: read_f64(&dir.join("sampling_rate")).ok(),
                name,
                dir,
                rails,
            })
        })
        .collect();
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    devices
}

fn probe_powercap(root: &Path) -> Vec<PowercapZone> {
    let base = root.join("class/powercap");
    list_names(&base)
        .into_iter()
        .filter(|n| n.starts_with("intel-rapl:"))
        .filter_map(|id| {
            let dir = resolve_dir(&base.join(&id))?;
            let num = |f: &str| {
                read_i64(&dir.join(f))
                    .ok()
                    .and_then(|v| u64::try_from(v).ok())
            };
            Some(PowercapZone {
                label: read_trimmed(&dir.join("name")).unwrap_or_else(|_| id.clone()),
                energy_uj: num("energy_uj"),
                max_energy_range_uj: num("max_energy_range_uj"),
                top_level: id.matches(':').count() == 1,
                dir,
                id,
            })
        })
        .collect()
}

fn select_meter(
    odpm: &[OdpmDevice],
    powercap: &[PowercapZone],
    battery: Option<&Battery>,
    no_supply_online: bool,
) -> Option<MeterInfo> {
    if odpm
        .iter()
        .any(|d| d.rails.iter().any(|r| r.energy_uws.is_some()))
    {
        return Some(MeterInfo {
            kind: MeterKind::Odpm,
            resolution_mj: Some(0.001),
            resolution: "1 µW·s (1 µJ) per count; driver refresh ≥ ~20 ms".into(),
            reliable: true,
        });
    }
    if powercap
        .iter()
        .any(|z| z.top_level && z.energy_uj.is_some())
    {
        return Some(MeterInfo {
            kind: MeterKind::Powercap,
            resolution_mj: Some(0.001),
            resolution: "1 µJ per count (wraps at max_energy_range_uj)".into(),
            reliable: true,
        });
    }
    let b = battery?;
    if b.energy_counter_uwh.is_some() {
        return Some(MeterInfo {
            kind: MeterKind::BatteryEnergyCounter,
            resolution_mj: Some(3.6),
            resolution: "1 µWh (3.6 mJ) per count".into(),
            reliable: no_supply_online,
        });
    }
    if let (Some(_), Some(mv)) = (b.charge_counter_uah, b.voltage_mv) {
        let step = 3.6 * mv / 1000.0;
        return Some(MeterInfo {
            kind: MeterKind::ChargeCounter,
            resolution_mj: Some(step),
            resolution: format!("1 µAh × {:.3} V = {step:.1} mJ per count", mv / 1000.0),
            reliable: no_supply_online,
        });
    }
    if b.current_ma.is_some() && b.voltage_mv.is_some() {
        return Some(MeterInfo {
            kind: MeterKind::IntegratedVi,
            resolution_mj: None,
            resolution: "trapezoid of V·I between samples (sample-rate limited)".into(),
            reliable: no_supply_online,
        });
    }
    None
}

impl Probe {
    /// Renders the probe for a terminal.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "sysfs root: {}", self.root.display());
        let _ = writeln!(s, "thermal zones ({}):", self.thermal_zones.len());
        for z in &self.thermal_zones {
            let _ = writeln!(
                s,
                "  thermal_zone{:<3} {:<24} {:>7.1} °C  {:?}  ({:?})",
                z.index, z.name, z.temp_c, z.role, z.unit
            );
        }
        for z in &self.skipped_zones {
            let _ = writeln!(
                s,
                "  thermal_zone{:<3} {:<24} skipped: {}",
                z.index,
                z.name.as_deref().unwrap_or("?"),
                z.reason
            );
        }
        match &self.battery {
            Some(b) => {
                let _ = writeln!(s, "battery `{}`:", b.name);
                let _ = writeln!(s, "  status: {}", b.status.as_deref().unwrap_or("?"));
                if let (Some(mv), Some(u)) = (b.voltage_mv, b.voltage_unit) {
                    let _ = writeln!(s, "  voltage: {mv:.0} mV (raw in {u:?})");
                }
                if let (Some(ma), Some((u, ur)), Some((sg, sr))) =
                    (b.current_ma, &b.current_unit, &b.discharge_sign)
                {
                    let _ = writeln!(s, "  current: {ma:.0} mA discharge-positive");
                    let _ = writeln!(s, "    unit {u:?}: {ur}");
                    let _ = writeln!(s, "    sign {sg:?} on discharge: {sr}");
                }
                if let Some(e) = b.energy_counter_uwh {
                    let attr = b.energy_counter_attr.as_deref().unwrap_or("energy_counter");
                    let _ = writeln!(s, "  {attr}: {e} µWh");
                }
                if let Some(t) = b.temp_c {
                    let _ = writeln!(s, "  temp: {t:.1} °C");
                }
                if let Some(c) = b.charge_counter_uah {
                    let _ = writeln!(s, "  charge_counter: {c} µAh");
                }
                let _ = writeln!(s, "  attributes: {}", b.attributes.join(" "));
            }
            None => {
                let _ = writeln!(s, "battery: none");
            }
        }
        for sup in &self.supplies {
            let state = match sup.online {
                Some(true) => "ONLINE (charging: battery energy unreliable)",
                Some(false) => "offline",
                None => "online state unreadable",
            };
            let _ = writeln!(s, "charger input `{}` ({}): {state}", sup.name, sup.kind);
        }
        let _ = writeln!(s, "cpufreq policies ({}):", self.cpu_policies.len());
        for p in &self.cpu_policies {
            let cpus: Vec<String> = p.related_cpus.iter().map(u32::to_string).collect();
            let _ = writeln!(
                s,
                "  {:<8} cpus {:<8} cur {} kHz, max {} kHz (hw {}), {} OPPs, {}",
                p.name,
                cpus.join(","),
                opt(p.cur_khz),
                opt(p.max_khz),
                opt(p.cpuinfo_max_khz),
                p.available_khz.len(),
                p.governor.as_deref().unwrap_or("?")
            );
        }
        match &self.gpu {
            Some(g) => {
                let _ = writeln!(
                    s,
                    "gpu: {:?} {} cur {} kHz, max {} kHz, busy {}",
                    g.kind,
                    g.model.as_deref().unwrap_or(""),
                    opt(g.cur_khz),
                    opt(g.max_khz),
                    g.busy_pct.map_or("?".into(), |b| format!("{b:.0} %"))
                );
            }
            None => {
                let _ = writeln!(s, "gpu: none recognised");
            }
        }
        for d in &self.odpm {
            let _ = writeln!(
                s,
                "odpm `{}` ({} rails, sampling {} Hz):",
                d.name,
                d.rails.len(),
                d.sampling_hz.map_or("?".into(), |h| format!("{h}"))
            );
            for r in &d.rails {
                let _ = writeln!(
                    s,
                    "  CH{} {:<20} {:<10} {} µW·s",
                    r.channel,
                    r.rail,
                    r.subsystem.as_deref().unwrap_or(""),
                    opt(r.energy_uws)
                );
            }
        }
        if self.odpm.is_empty() {
            let _ = writeln!(s, "odpm: none");
        }
        if self.powercap.is_empty() {
            let _ = writeln!(s, "powercap: none");
        }
        for z in &self.powercap {
            let _ = writeln!(
                s,
                "powercap {} `{}`: {} µJ (wraps at {})",
                z.id,
                z.label,
                opt(z.energy_uj),
                opt(z.max_energy_range_uj)
            );
        }
        match &self.meter {
            Some(m) => {
                let _ = writeln!(
                    s,
                    "energy meter: {:?}, resolution {}{}",
                    m.kind,
                    m.resolution,
                    if m.reliable { "" } else { " [UNRELIABLE]" }
                );
            }
            None => {
                let _ = writeln!(s, "energy meter: none");
            }
        }
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {w}");
        }
        s
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "?".to_string(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_rules_on_hand_worked_values() {
        assert_eq!(infer_temp_unit(58100), TempUnit::MilliCelsius);
        assert_eq!(infer_temp_unit(58), TempUnit::Celsius);
        assert_eq!(
            infer_current_unit(-1683, None, None).0,
            CurrentUnit::MilliAmp
        );
        assert_eq!(
            infer_current_unit(-1_683_000, None, None).0,
            CurrentUnit::MicroAmp
        );
        // 3.9 V × 1.683 A = 6.56 W: power_now decides even for a small-looking mA number.
        assert_eq!(
            infer_current_unit(1683, Some(3.9), Some(6_563_700)).0,
            CurrentUnit::MilliAmp
        );
        assert_eq!(infer_voltage_unit(3_921_000), VoltageUnit::MicroVolt);
        assert_eq!(infer_voltage_unit(3921), VoltageUnit::MilliVolt);
        assert_eq!(
            infer_discharge_sign(Some("Discharging"), 5, None).0,
            DischargeSign::Positive
        );
        assert_eq!(
            infer_discharge_sign(Some("Charging"), 5, None).0,
            DischargeSign::Negative
        );
        assert_eq!(
            infer_discharge_sign(Some("Full"), 5, Some(-10)).0,
            DischargeSign::Positive
        );
    }

    #[test]
    fn odpm_text_parses() {
        let s = parse_energy_value("t=10\nCH0(T=9)[A], 5\nCH1(T=9)[B_C], 77\n").unwrap();
        assert_eq!(s.t_ms, 10);
        assert_eq!(s.channels, vec![(0, "A".into(), 5), (1, "B_C".into(), 77)]);
        assert!(parse_energy_value("garbage").is_none());
        let r = parse_enabled_rails("CH3[S5M_VDD_INT]:INT\nCH4[X]:CPU(BIG)\n");
        assert_eq!(r[1], (4, "X".into(), Some("CPU(BIG)".into())));
    }
}
