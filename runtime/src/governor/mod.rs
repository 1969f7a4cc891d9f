//! Thermal governor: keeps a temperature at a target by throttling the inference workload.
//!
//! Owns the controllers (`Pid`, the `StepWise` baseline, `Off`), the sensor/actuator traits,
//! the sysfs thermal-zone sensor (`ZoneSensor`: one zone or the max over several), the
//! runtime's unprivileged actuators (`DutyCycle`, `ThreadCount`), the opt-in privileged one
//! (`SysfsFreqCap`), their composition (`Chain`), the tuning rule that derives PID gains from a
//! plant model (`PidConfig::tuned`), gain scheduling on the measured busy share
//! (`GainSchedule`), and the per-step serializable record.
//!
//! Spec anchors: the PID follows the shape of Linux's power allocator (IPA,
//! `drivers/thermal/gov_power_allocator.c`): error = target − T, separate proportional gains
//! above (`k_po`) and below (`k_pu`) the target, an integral active only near the target, a
//! sustainable-power feed-forward. On top of it: conditional anti-windup with a hard clamp,
//! derivative on a first-order low-pass filtered measurement, output clamp and rate limit,
//! dt from timestamps, bumpless start. `StepWise` follows Linux's `step_wise` governor (one
//! cooling state per period above the trip, one back below trip − hysteresis).
//! See `docs/GOVERNOR.md` for the derivation and tuning.
//!
//! Level convention (as for Linux cooling devices): level 0 = unthrottled,
//! `levels − 1` = most throttled. Output convention: the PID output is a performance/power
//! budget in `[output_min, output_max]`, `output_max` = unthrottled. By default the levels
//! split that range evenly; with a level table (`Pid::with_level_outputs`) level k delivers
//! `table[k]` (e.g. the platform power of each OPP, in W, as IPA's power actors report it),
//! and the output is quantized on that table.
//!
//! Files: [`pid`] (the PID controller, its configuration and tuning rule), [`schedule`] (the
//! table rescaled to the measured busy share and the PID re-tuned on it), [`step_wise`] (the
//! step_wise baseline), [`actuators`] (duty cycle, thread count, their chain), [`sysfs`]
//! (the thermal-zone sensor and the frequency-cap actuator); this file holds the traits, the
//! level tables, the per-step record and the [`Governor`] that runs one policy.

mod actuators;
mod pid;
mod schedule;
mod step_wise;
mod sysfs;

pub use actuators::*;
pub use pid::*;
pub use schedule::*;
pub use step_wise::*;
pub use sysfs::*;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A temperature source. `None` (or a non-finite value) means the reading failed.
pub trait ThermalSensor {
    fn read(&mut self) -> Option<f64>;
}

/// Something that throttles the workload in discrete levels (0 = unthrottled).
pub trait Actuator {
    fn levels(&self) -> usize;
    fn apply(&mut self, level: usize) -> Result<()>;
    /// What the actuator holds now (for per-token logs).
    fn state(&self) -> ActuatorState {
        ActuatorState::default()
    }
}

/// The knobs an actuator holds at the moment (unset = not driven by this actuator).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActuatorState {
    /// Busy fraction of the decode loop (duty cycle).
    pub busy: Option<f64>,
    /// Decode threads.
    pub threads: Option<usize>,
    /// Frequency caps written, one per cap file (kHz for cpufreq, Hz for kgsl).
    pub caps: Vec<u64>,
}

impl ActuatorState {
    fn merge(mut self, other: ActuatorState) -> Self {
        self.busy = self.busy.or(other.busy);
        self.threads = self.threads.or(other.threads);
        self.caps.extend(other.caps);
        self
    }
}

/// Readings outside this range are treated as sensor faults (a disconnected NTC reads
/// −273 °C or hundreds of degrees).
const PLAUSIBLE_C: std::ops::RangeInclusive<f64> = -40.0..=200.0;

fn plausible(t: Option<f64>) -> Option<f64> {
    t.filter(|v| v.is_finite() && PLAUSIBLE_C.contains(v))
}

fn validate_table(table: &[f64]) -> Result<()> {
    if table.is_empty() {
        return Err(Error::Governor("level table is empty".into()));
    }
    if table.iter().any(|v| !v.is_finite()) || table.windows(2).any(|w| w[1] >= w[0]) {
        return Err(Error::InvalidArgument {
            what: "level table".into(),
            reason: format!("outputs must be finite and strictly decreasing (got {table:?})"),
        });
    }
    Ok(())
}

/// Width of the table step that contains `out` (the first or last step outside the table).
fn bracket_gap(table: &[f64], out: f64) -> f64 {
    let n = table.len();
    if n < 2 {
        return 0.0;
    }
    let k = table
        .windows(2)
        .position(|w| w[0] >= out && out >= w[1])
        .unwrap_or(if out > table[0] { 0 } else { n - 2 });
    table[k] - table[k + 1]
}

/// Continuous level of `out` on a strictly decreasing table: `k + (table[k] − out) /
/// (table[k] − table[k+1])` inside step k, clamped to `[0, len − 1]`.
fn continuous_level(out: f64, table: &[f64]) -> f64 {
    let n = table.len();
    if n <= 1 || out >= table[0] {
        return 0.0;
    }
    if out <= table[n - 1] {
        return (n - 1) as f64;
    }
    for (k, w) in table.windows(2).enumerate() {
        if w[0] >= out && out >= w[1] {
            return k as f64 + (w[0] - out) / (w[0] - w[1]);
        }
    }
    (n - 1) as f64
}

/// The hysteresis rule shared by the uniform and the table quantizers.
fn hysteresis_step(x: f64, current: usize, levels: usize, hysteresis: f64) -> usize {
    if (x - current as f64).abs() <= 0.5 + hysteresis {
        return current.min(levels - 1);
    }
    // x is in [0, levels − 1], so the cast is exact.
    x.round() as usize
}

/// [`level_for_output`] for a level table (level k delivers `table[k]`, strictly decreasing):
/// the continuous level is interpolated inside the step that holds `out`.
pub fn level_for_output_table(out: f64, current: usize, table: &[f64], hysteresis: f64) -> usize {
    let levels = table.len();
    if levels <= 1 || !out.is_finite() {
        return current.min(levels.saturating_sub(1));
    }
    hysteresis_step(continuous_level(out, table), current, levels, hysteresis)
}

/// What happened at one controller step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Normal update.
    Ok,
    /// First sample (or first after a gap): state initialized, output unchanged.
    Started,
    /// Gap longer than `max_dt_s`: restarted bumplessly.
    Resumed,
    /// The output hit its clamp or rate limit.
    Saturated,
    /// No valid reading: the last output is held.
    SensorDropout,
    /// The sensor has been silent past the failsafe delay: fully throttled.
    Failsafe,
    /// The timestamp did not advance: nothing was updated.
    ClockStalled,
    /// Governor disabled.
    Off,
}

/// The full state of one governor step, for logs and reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GovernorRecord {
    pub t_s: f64,
    pub policy: PolicyKind,
    pub status: StepStatus,
    /// Raw reading, if valid.
    pub temp_c: Option<f64>,
    /// Low-pass filtered reading (PID only).
    pub filtered_c: Option<f64>,
    pub target_c: f64,
    /// Measured time since the previous update, s.
    pub dt_s: f64,
    pub p: f64,
    pub i: f64,
    pub d: f64,
    pub ff: f64,
    /// Controller output after clamp and rate limit.
    pub output: f64,
    /// Discrete level chosen (0 = unthrottled).
    pub level: usize,
    pub levels: usize,
    /// Whether the actuator was written at this step.
    pub applied: bool,
}

/// Which governor runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    Off,
    Step,
    Pid,
}

/// A governor configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Policy {
    Off,
    Step(StepWiseConfig),
    Pid(PidConfig),
}

#[derive(Debug, Clone)]
enum Controller {
    Off,
    Step(StepWise),
    Pid(Box<Pid>),
}

/// A controller wired to a sensor and an actuator. Writes the actuator only when the level
/// changes (and once at start).
#[derive(Debug, Clone)]
pub struct Governor {
    ctl: Controller,
    levels: usize,
    table: Option<Vec<f64>>,
    applied: Option<usize>,
}

impl Governor {
    /// A governor for an actuator with `levels` levels.
    pub fn new(policy: Policy, levels: usize) -> Result<Self> {
        let ctl = match policy {
            Policy::Off => Controller::Off,
            Policy::Step(c) => Controller::Step(StepWise::new(c, levels)?),
            Policy::Pid(c) => Controller::Pid(Box::new(Pid::new(c, levels)?)),
        };
        Ok(Self {
            ctl,
            levels,
            table: None,
            applied: None,
        })
    }

    /// A governor whose level k delivers `outputs[k]` (see [`Pid::with_level_outputs`]);
    /// step_wise and off only use the number of levels, and report `outputs[level]`.
    pub fn with_level_outputs(policy: Policy, outputs: Vec<f64>) -> Result<Self> {
        validate_table(&outputs)?;
        let levels = outputs.len();
        let ctl = match policy {
            Policy::Off => Controller::Off,
            Policy::Step(c) => Controller::Step(StepWise::new(c, levels)?),
            Policy::Pid(c) => {
                Controller::Pid(Box::new(Pid::with_level_outputs(c, outputs.clone())?))
            }
        };
        Ok(Self {
            ctl,
            levels,
            table: Some(outputs),
            applied: None,
        })
    }

    pub fn levels(&self) -> usize {
        self.levels
    }

    /// Re-tunes the PID with `cfg` on the level table `outputs` (same number of levels),
    /// bumplessly from the level in force ([`Pid::retune`]). Only a PID governor has gains.
    pub fn retune(&mut self, cfg: PidConfig, outputs: Vec<f64>) -> Result<()> {
        let Controller::Pid(p) = &mut self.ctl else {
            return Err(Error::Governor(
                "only a PID governor can be re-tuned".into(),
            ));
        };
        p.retune(cfg, outputs.clone())?;
        self.table = Some(outputs);
        Ok(())
    }

    /// The PID controller, when that is the policy.
    pub fn pid(&self) -> Option<&Pid> {
        match &self.ctl {
            Controller::Pid(p) => Some(p),
            _ => None,
        }
    }

    pub fn kind(&self) -> PolicyKind {
        match self.ctl {
            Controller::Off => PolicyKind::Off,
            Controller::Step(_) => PolicyKind::Step,
            Controller::Pid(_) => PolicyKind::Pid,
        }
    }

    /// Read the sensor, update the controller and apply the level if it changed.
    pub fn tick<S, A>(
        &mut self,
        t_s: f64,
        sensor: &mut S,
        actuator: &mut A,
    ) -> Result<GovernorRecord>
    where
        S: ThermalSensor + ?Sized,
        A: Actuator + ?Sized,
    {
        if actuator.levels() != self.levels {
            return Err(Error::Governor(format!(
                "actuator has {} levels, governor was built for {}",
                actuator.levels(),
                self.levels
            )));
        }
        let reading = sensor.read();
        let mut rec = match &mut self.ctl {
            Controller::Off => GovernorRecord {
                t_s,
                policy: PolicyKind::Off,
                status: StepStatus::Off,
                temp_c: plausible(reading),
                filtered_c: None,
                target_c: f64::NAN,
                dt_s: 0.0,
                p: 0.0,
                i: 0.0,
                d: 0.0,
                ff: 0.0,
                output: self.table.as_ref().map_or(1.0, |t| t[0]),
                level: 0,
                levels: self.levels,
                applied: false,
            },
            Controller::Step(s) => {
                let mut r = s.update(t_s, reading);
                if let Some(t) = &self.table {
                    r.output = t[r.level.min(t.len() - 1)];
                }
                r
            }
            Controller::Pid(p) => p.update(t_s, reading),
        };
        if rec.policy != PolicyKind::Off && self.applied != Some(rec.level) {
            actuator.apply(rec.level)?;
            self.applied = Some(rec.level);
            rec.applied = true;
        }
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_ladder_endpoints() {
        assert_eq!(busy_for_level(0, 5, 0.2), 1.0);
        assert!((busy_for_level(4, 5, 0.2) - 0.2).abs() < 1e-12);
        assert!((busy_for_level(2, 5, 0.2) - 0.6).abs() < 1e-12);
    }

    #[test]
    fn cap_steps_snap_to_available() {
        let s = cap_steps(300, 3000, Some(&[300, 1000, 2000, 3000]), 4);
        // Raw caps 3000, 2100, 1200, 300 snap down to 3000, 2000, 1000, 300.
        assert_eq!(s, vec![3000, 2000, 1000, 300]);
    }
}
