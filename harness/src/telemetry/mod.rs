//! Telemetry: sysfs probing, periodic sampling to `telemetry.csv`, energy meters, and
//! attribution of energy and temperature to intervals of a run.
//!
//! Owns everything between a sysfs root (`/` on a device, a fixture or a simulated handset
//! tree elsewhere) and the numbers a run reports about heat and energy. Implements the Linux
//! sysfs ABIs for thermal zones, power_supply, cpufreq and powercap, the Adreno kgsl and Mali
//! attribute sets, and the Pixel ODPM `energy_value` format; the rules are documented in
//! `docs/TELEMETRY.md`.
//!
//! A run uses [`TelemetrySession`]: `start` probes and spawns the sampler, `measure_idle`
//! records the idle baseline, `stop` returns a [`TelemetryReport`] whose `attribute` and
//! `dialogue_summary` turn intervals of the scenario clock into energy figures.

pub mod attribution;
pub mod energy;
pub mod faults;
pub mod probe;
pub mod recorder;
pub mod sampler;
pub mod sysfs;
pub mod virtual_rig;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub use attribution::{DialogueSpan, DialogueSummary, IntervalEnergy, MeanInterval};
pub use probe::{MeterInfo, MeterKind, Probe, probe};
pub use recorder::{DeviceSpec, RunRecording, RunTelemetry};
pub use sampler::{
    Gauge, MonotonicClock, Row, Sampler, SamplerConfig, SamplerCore, SamplerCost, SamplerOutput,
    SensorEvent,
};
pub use virtual_rig::{VirtualRecording, VirtualRig};

use crate::sim::{SimDevice, SimError};

/// Errors of the telemetry module. Sensor failures during a run are *events*, not errors;
/// these are for setup, files the caller asked for, and bad arguments.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A sysfs attribute or a file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A value did not parse.
    #[error("{}: `{value}` is not {expected}", path.display())]
    Parse {
        /// File.
        path: PathBuf,
        /// Offending text (clipped).
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// An output file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A bad argument.
    #[error("invalid {field} `{value}`: {reason}")]
    Config {
        /// Which argument.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is wrong and what to do.
        reason: &'static str,
    },
    /// The sampler thread could not start.
    #[error("cannot start the telemetry sampler thread: {source}")]
    Thread {
        /// Cause.
        source: std::io::Error,
    },
    /// The sampler thread panicked (a bug).
    #[error("the telemetry sampler thread panicked")]
    ThreadPanicked,
    /// A simulated handset failed.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// JSON rendering failed.
    #[error("cannot render the probe as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// The sampler's CPU budget: percent of one core (at the default 10 Hz).
pub const SAMPLER_CPU_BUDGET_PCT: f64 = 1.0;

/// Sysfs root of the local device.
pub const LOCAL_SYSFS_ROOT: &str = "/sys";

/// `pocketperf probe`: probes `root`, or the device named by `device` (`local` or none →
/// `/sys`, `sim:<profile>` → a fresh simulated handset tree), and renders the result as text
/// or JSON.
pub fn probe_command(
    root: Option<&Path>,
    device: Option<&str>,
    json: bool,
) -> Result<String, TelemetryError> {
    let mut _sim: Option<SimDevice> = None;
    let root: PathBuf = match (root, device) {
        (Some(r), _) if !r.is_dir() => {
            return Err(TelemetryError::Config {
                field: "sysfs-root",
                value: r.display().to_string(),
                reason: "not a directory: give a directory laid out like /sys",
            });
        }
        (Some(r), _) => r.to_path_buf(),
        (None, None | Some("local")) => PathBuf::from(LOCAL_SYSFS_ROOT),
        (None, Some(d)) if d.starts_with("sim:") => {
            let sim = SimDevice::new(d)?;
            let r = sim.root().to_path_buf();
            _sim = Some(sim);
            r
        }
        (None, Some(d)) => {
            return Err(TelemetryError::Config {
                field: "device",
                value: d.to_string(),
                reason: "expected `local` or `sim:<profile>` (sim:snapdragon-8gen3, \
                         sim:pixel-8-pro), or pass --sysfs-root <dir>",
            });
        }
    };
    let p = probe(&root);
    if json {
        Ok(serde_json::to_string_pretty(&p)?)
    } else {
        Ok(p.render_text())
    }
}

/// Settings of a telemetry session.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Sysfs root.
    pub root: PathBuf,
    /// Sampler settings (period, metadata, CSV path).
    pub sampler: SamplerConfig,
}

impl SessionConfig {
    /// Defaults (100 ms, no CSV) for `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            sampler: SamplerConfig::default(),
        }
    }
}

/// A running telemetry recording.
pub struct TelemetrySession {
    probe: Probe,
    sampler: Sampler,
    clock: MonotonicClock,
    idle_window: Option<(u64, u64)>,
}

impl TelemetrySession {
    /// Probes the root, registers the caller's gauges and starts the sampler thread.
    pub fn start(
        config: SessionConfig,
        clock: MonotonicClock,
        gauges: Vec<(String, Gauge)>,
    ) -> Result<Self, TelemetryError> {
        let probe = probe(&config.root);
        let mut core = SamplerCore::new(&probe, clock.clone(), config.sampler)?;
        for (name, g) in gauges {
            core.add_gauge(&name, g)?;
        }
        let sampler = Sampler::spawn(core)?;
        Ok(Self {
            probe,
            sampler,
            clock,
            idle_window: None,
        })
    }

    /// What the probe found.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// Sleeps `window` with the workload idle and remembers it as the idle baseline window.
    /// Returns the window on the session clock.
    pub fn measure_idle(&mut self, window: Duration) -> (u64, u64) {
        let t0 = (self.clock)();
        std::thread::sleep(window);
        let t1 = (self.clock)();
        self.idle_window = Some((t0, t1));
        (t0, t1)
    }

    /// Declares an idle window measured by the caller (session clock, ns).
    pub fn set_idle_window(&mut self, start_ns: u64, end_ns: u64) {
        self.idle_window = Some((start_ns, end_ns));
    }

    /// Stops sampling, flushes the CSV and returns the report.
    pub fn stop(self) -> Result<TelemetryReport, TelemetryError> {
        let output = self.sampler.stop()?;
        Ok(TelemetryReport::new(self.probe, output, self.idle_window))
    }
}

/// Run-level telemetry summary (goes into result.json).
#[derive(Debug, Clone, Serialize)]
pub struct TelemetrySummary {
    /// Samples taken.
    pub samples: usize,
    /// First to last sample, s.
    pub duration_s: f64,
    /// Energy meter used.
    pub meter: Option<MeterInfo>,
    /// Gross energy over the recording, J.
    pub energy_j: Option<f64>,
    /// Mean power over the recording, W.
    pub mean_power_w: Option<f64>,
    /// Idle baseline power, W.
    pub idle_power_w: Option<f64>,
    /// Peak SoC temperature, °C.
    pub soc_peak_c: Option<f64>,
    /// Peak skin temperature, °C.
    pub skin_peak_c: Option<f64>,
    /// Time-weighted mean skin temperature, °C.
    pub skin_mean_c: Option<f64>,
    /// Time during which some cpufreq policy was capped below its hardware maximum, s.
    pub throttled_s: Option<f64>,
    /// Whether the energy figures can be trusted: the meter is, and no charger was online
    /// at any sample.
    pub energy_reliable: bool,
    /// A charger input read online during the recording.
    pub charger_seen: bool,
    /// The discharge sign was corrected from the charge_counter trend (status undecided).
    pub sign_corrected: bool,
    /// Sensor events (vanished / unreadable / garbage / recovered).
    pub sensor_events: usize,
    /// Empty cells in the CSV.
    pub missing_cells: u64,
    /// The sampler's own cost.
    pub sampler_cost: SamplerCost,
    /// Warnings (probe and run).
    pub warnings: Vec<String>,
}

/// Everything a session recorded, with attribution helpers.
#[derive(Debug, Clone, Serialize)]
pub struct TelemetryReport {
    /// Probe at start.
    pub probe: Probe,
    /// Recording.
    pub output: SamplerOutput,
    /// Idle baseline window (session clock, ns).
    pub idle_window: Option<(u64, u64)>,
    /// Summary.
    pub summary: TelemetrySummary,
}

impl TelemetryReport {
    /// Builds a report from a recording (also used when the sampler was driven by hand).
    pub fn new(probe: Probe, mut output: SamplerOutput, idle_window: Option<(u64, u64)>) -> Self {
        let mut warnings = probe.warnings.clone();
        let (sign_warning, flip) = reconcile_sign(&probe, &output);
        warnings.extend(sign_warning);
        if flip {
            flip_battery_sign(&probe, &mut output);
        }
        let idle_power_w = idle_window.and_then(|(a, b)| attribution::mean_power_w(&output, a, b));
        let energy = output.series(output.col_energy);
        let (t_first, t_last) = (
            output.rows.first().map_or(0, |r| r.t_ns),
            output.rows.last().map_or(0, |r| r.t_ns),
        );
        let energy_j = match (energy.first(), energy.last()) {
            (Some(a), Some(b)) => Some((b.1 - a.1) / 1000.0),
            _ => None,
        };
        let mean_power_w = match (energy.first(), energy.last()) {
            (Some(a), Some(b)) if b.0 > a.0 => Some((b.1 - a.1) / ((b.0 - a.0) as f64 / 1e6)),
            _ => None,
        };
        let peak = |c: Option<usize>| {
            c.map(|c| output.series(c))
                .and_then(|s| s.iter().map(|p| p.1).reduce(f64::max))
        };
        let charger_seen = output
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.starts_with("supply.") && c.ends_with(".online"))
            .any(|(i, _)| output.series(i).iter().any(|p| p.1 > 0.5));
        if charger_seen && probe.supplies_online.is_empty() {
            warnings.push(
                "a charger came online during the recording: battery-based energy is unreliable"
                    .into(),
            );
        }
        let meter_reliable = probe.meter.as_ref().is_some_and(|m| m.reliable);
        let battery_meter = matches!(
            probe.meter.as_ref().map(|m| m.kind),
            Some(
                MeterKind::BatteryEnergyCounter
                    | MeterKind::ChargeCounter
                    | MeterKind::IntegratedVi
            )
        );
        let energy_reliable = meter_reliable && !(charger_seen && battery_meter);
        let skin_mean_c = output.col_skin.and_then(|c| {
            let s = output.series(c);
            let (a, b) = (s.first()?.0, s.last()?.0);
            attribution::mean_and_peak(&s, a, b).map(|m| m.0)
        });
        let throttled_s = throttled_seconds(&probe, &output);
        let cost = output.cost;
        if cost.wall_s >= 1.0 && cost.cpu_pct_of_core > SAMPLER_CPU_BUDGET_PCT {
            warnings.push(format!(
                "the telemetry sampler used {:.2} % of a core ({:.0} µs per sample; budget \
                 {SAMPLER_CPU_BUDGET_PCT} %): its own load is part of the figures",
                cost.cpu_pct_of_core, cost.mean_sample_cpu_us
            ));
        }
        let events_n = output.events.len();
        if events_n > 0 {
            warnings.push(format!(
                "{events_n} sensor event(s) during the run (see events)"
            ));
        }
        let summary = TelemetrySummary {
            samples: output.rows.len(),
            duration_s: t_last.saturating_sub(t_first) as f64 / 1e9,
            meter: probe.meter.clone(),
            energy_j,
            mean_power_w,
            idle_power_w,
            soc_peak_c: peak(output.col_soc),
            skin_peak_c: peak(output.col_skin),
            skin_mean_c,
            throttled_s,
            energy_reliable,
            charger_seen,
            sign_corrected: flip,
            sensor_events: events_n,
            missing_cells: output.missing_cells,
            sampler_cost: output.cost,
            warnings,
        };
        Self {
            probe,
            output,
            idle_window,
            summary,
        }
    }

    /// Idle baseline power, W.
    pub fn idle_power_w(&self) -> Option<f64> {
        self.summary.idle_power_w
    }

    /// Per-interval gross/net energy and temperatures (None for an interval outside the
    /// recording).
    pub fn attribute(&self, intervals: &[(u64, u64)]) -> Vec<Option<IntervalEnergy>> {
        attribution::attribute(&self.output, intervals, self.idle_power_w())
    }

    /// mWh per dialogue (mean, 95 % t-interval), J per token, tokens per J.
    pub fn dialogue_summary(&self, dialogues: &[DialogueSpan]) -> DialogueSummary {
        attribution::dialogue_summary(&self.output, dialogues, self.idle_power_w())
    }
}

/// Cross-checks the discharge sign inferred at probe time against the run's charge_counter
/// trend (falling = discharging) and the mean raw current. Returns a warning when they
/// disagree, and whether to flip the sign: only when `status` did not decide it at probe time
/// (then the trend is the better evidence); a disagreement with `status` is only reported.
fn reconcile_sign(probe: &Probe, output: &SamplerOutput) -> (Option<String>, bool) {
    let Some(b) = probe.battery.as_ref() else {
        return (None, false);
    };
    let Some((probe_sign, _)) = b.discharge_sign.as_ref() else {
        return (None, false);
    };
    let (Some(cc_col), Some(cur_col)) = (
        output.column("raw.battery.charge_counter"),
        output.column("raw.battery.current_now"),
    ) else {
        return (None, false);
    };
    let cc = output.series(cc_col);
    let cur = output.series(cur_col);
    let (Some(first), Some(last)) = (cc.first(), cc.last()) else {
        return (None, false);
    };
    if cur.is_empty() {
        return (None, false);
    }
    let trend = (last.1 - first.1) as i64;
    let mean = cur.iter().map(|p| p.1).sum::<f64>() / cur.len() as f64;
    let (trend_sign, _) = probe::infer_discharge_sign(None, mean.round() as i64, Some(trend));
    if trend == 0 || mean.round() == 0.0 || trend_sign == *probe_sign {
        return (None, false);
    }
    match b.sign_basis {
        Some(probe::SignBasis::Status) => (
            Some(format!(
                "battery current sign from `status` ({probe_sign:?} on discharge) disagrees with \
                 the charge_counter trend ({trend} µAh): battery-based energy is suspect"
            )),
            false,
        ),
        _ => (
            Some(format!(
                "battery discharge sign taken from the charge_counter trend ({trend} µAh over \
                 the run): {trend_sign:?} on discharge, not the {probe_sign:?} assumed at probe \
                 time; battery current and power corrected"
            )),
            true,
        ),
    }
}

/// Negates the battery current (and the power and energy derived from it) after a sign
/// correction. Raw `raw.battery.*` columns stay as read.
fn flip_battery_sign(probe: &Probe, output: &mut SamplerOutput) {
    let mut cols: Vec<usize> = output.column("battery.current.ma").into_iter().collect();
    match probe.meter.as_ref().map(|m| m.kind) {
        Some(MeterKind::IntegratedVi) => cols.extend([output.col_power, output.col_energy]),
        Some(MeterKind::BatteryEnergyCounter | MeterKind::ChargeCounter) | None => {
            cols.push(output.col_power)
        }
        Some(MeterKind::Odpm | MeterKind::Powercap) => {}
    }
    for row in &mut output.rows {
        for &c in &cols {
            if let Some(Some(v)) = row.values.get_mut(c) {
                *v = -*v;
            }
        }
    }
}

/// Seconds during which any policy's `scaling_max_freq` sat below its `cpuinfo_max_freq`
/// (each sample's state held until the next sample). None without cap columns.
fn throttled_seconds(probe: &Probe, output: &SamplerOutput) -> Option<f64> {
    let caps: Vec<(usize, u64)> = probe
        .cpu_policies
        .iter()
        .filter_map(|p| {
            let col = output.column(&format!("cpumax.{}.khz", sampler::sanitize(&p.name)))?;
            Some((col, p.cpuinfo_max_khz?))
        })
        .collect();
    if caps.is_empty() {
        return None;
    }
    let throttled = |r: &Row| {
        caps.iter().any(|&(c, hw)| {
            r.values
                .get(c)
                .copied()
                .flatten()
                .is_some_and(|v| v < hw as f64)
        })
    };
    let s: u64 = output
        .rows
        .windows(2)
        .filter(|w| throttled(&w[0]))
        .map(|w| w[1].t_ns.saturating_sub(w[0].t_ns))
        .sum();
    Some(s as f64 / 1e9)
}
