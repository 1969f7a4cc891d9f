//! Thermal governor: keeps a temperature at a target by throttling the inference workload.
//!
//! Owns the controllers (`Pid`, the `StepWise` baseline, `Off`), the sensor/actuator traits,
//! the sysfs thermal-zone sensor (`ZoneSensor`: one zone or the max over several), the
//! runtime's unprivileged actuators (`DutyCycle`, `ThreadCount`), the opt-in privileged one
//! (`SysfsFreqCap`), their composition (`Chain`), the tuning rule that derives PID gains from a
//! plant model (`PidConfig::tuned`), and the per-step serializable record.
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

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

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

/// PID parameters. Gains are in output units per °C (per °C·s for `k_i`, per °C/s for `k_d`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PidConfig {
    /// Temperature to hold, °C.
    pub target_c: f64,
    /// Proportional gain while above the target (error < 0).
    pub k_po: f64,
    /// Proportional gain while below the target (error > 0).
    pub k_pu: f64,
    pub k_i: f64,
    pub k_d: f64,
    /// The integral accumulates only while |error| < this, °C (IPA's `integral_cutoff`).
    pub integral_cutoff_c: f64,
    /// Hard clamp on the integral term, output units.
    pub integral_limit: f64,
    /// Time constant of the low-pass filter on the measurement feeding the derivative, s.
    pub d_filter_tau_s: f64,
    pub output_min: f64,
    pub output_max: f64,
    /// Largest output change per second.
    pub rate_limit_per_s: f64,
    /// Feed-forward: the output that sustains the target in steady state (IPA's
    /// sustainable power, normalized to the output range).
    pub sustainable_output: f64,
    /// Extra distance, in levels, the continuous level must move past the midpoint between
    /// two levels before the discrete level changes.
    pub level_hysteresis: f64,
    /// A gap between samples longer than this restarts the controller (bumpless), s.
    pub max_dt_s: f64,
    /// After the sensor has been silent this long, go to the most throttled level, s.
    pub dropout_failsafe_s: f64,
}

impl PidConfig {
    /// Defaults for a skin-temperature loop at `target_c` with the given feed-forward.
    pub fn for_skin(target_c: f64, sustainable_output: f64) -> Self {
        Self {
            target_c,
            k_po: 0.35,
            k_pu: 0.25,
            k_i: 0.004,
            k_d: 20.0,
            integral_cutoff_c: 3.0,
            integral_limit: 0.5,
            d_filter_tau_s: 5.0,
            output_min: 0.0,
            output_max: 1.0,
            rate_limit_per_s: 0.05,
            sustainable_output,
            level_hysteresis: 0.25,
            max_dt_s: 30.0,
            dropout_failsafe_s: 60.0,
        }
    }

    /// Gains derived from a plant model, in the manner of IPA's `estimate_pid_constants`
    /// (gains scale with the sustainable power), completed for a skin loop with discrete
    /// levels. `levels` is the output each level delivers, level 0 first (strictly
    /// decreasing); `plant` is in the same output units. The rules (derivation in
    /// `docs/GOVERNOR.md`, "Tuning"):
    /// - feed-forward = the sustainable output;
    /// - `k_po = 2·h·g / ripple`: the proportional term alone crosses the level-hysteresis band
    ///   (2·h level gaps of width g, g = the gap between the two levels that bracket the
    ///   sustainable output) within the ripple budget; `k_pu = 2·k_po` (IPA's ratio); the
    ///   switch-on band `ΔT = sustainable / k_po` is IPA's `control_temp − switch_on_temp`;
    /// - `k_i = k_po / τ_slow` (the PI zero cancels the dominant chassis pole), integral
    ///   active within ΔT of the target, clamped to ±½ sustainable output;
    /// - `k_d = k_po · τ_fast` on the measurement low-passed with `τ_fast` (leads the die lag);
    /// - rate limit: the full output range in one `τ_fast`.
    pub fn tuned(
        target_c: f64,
        plant: &PlantModel,
        levels: &[f64],
        goal: &TuningGoal,
    ) -> Result<Self> {
        let bad = |what: &str, reason: String| {
            Err(Error::InvalidArgument {
                what: format!("tuning.{what}"),
                reason,
            })
        };
        validate_table(levels)?;
        if levels.len() < 2 {
            return bad("levels", "need at least two levels to tune for".into());
        }
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !(ok(plant.sustainable_output) && ok(plant.tau_slow_s) && ok(plant.tau_fast_s)) {
            return bad(
                "plant",
                format!("sustainable output and time constants must be > 0 (got {plant:?})"),
            );
        }
        if !(ok(goal.ripple_c) && (0.0..0.5).contains(&goal.hysteresis)) {
            return bad(
                "goal",
                format!("ripple must be > 0 °C and hysteresis in [0, 0.5) (got {goal:?})"),
            );
        }
        let ss = plant.sustainable_output;
        let gap = bracket_gap(levels, ss);
        // With zero hysteresis fall back to a one-gap band.
        let band_w = if goal.hysteresis > 0.0 {
            2.0 * goal.hysteresis * gap
        } else {
            gap
        };
        let k_po = band_w / goal.ripple_c;
        let switch_on_c = ss / k_po;
        let (top, bottom) = (levels[0], levels[levels.len() - 1]);
        Ok(Self {
            target_c,
            k_po,
            k_pu: 2.0 * k_po,
            k_i: k_po / plant.tau_slow_s,
            k_d: k_po * plant.tau_fast_s,
            integral_cutoff_c: switch_on_c,
            integral_limit: 0.5 * ss,
            d_filter_tau_s: plant.tau_fast_s,
            output_min: bottom,
            output_max: top,
            rate_limit_per_s: (top - bottom) / plant.tau_fast_s,
            sustainable_output: ss.clamp(bottom, top),
            level_hysteresis: goal.hysteresis,
            max_dt_s: 30.0,
            dropout_failsafe_s: 60.0,
        })
    }

    fn validate(&self) -> Result<()> {
        let bad = |what: &str, reason: &str| {
            Err(Error::InvalidArgument {
                what: format!("pid.{what}"),
                reason: reason.into(),
            })
        };
        let all = [
            self.target_c,
            self.k_po,
            self.k_pu,
            self.k_i,
            self.k_d,
            self.integral_cutoff_c,
            self.integral_limit,
            self.d_filter_tau_s,
            self.output_min,
            self.output_max,
            self.rate_limit_per_s,
            self.sustainable_output,
            self.level_hysteresis,
            self.max_dt_s,
            self.dropout_failsafe_s,
        ];
        if all.iter().any(|v| !v.is_finite()) {
            return bad("*", "every parameter must be a finite number");
        }
        if self.output_max <= self.output_min {
            return bad("output_max", "must exceed output_min");
        }
        if [
            self.k_po,
            self.k_pu,
            self.k_i,
            self.k_d,
            self.integral_limit,
            self.d_filter_tau_s,
        ]
        .iter()
        .any(|v| *v < 0.0)
        {
            return bad(
                "gains",
                "gains, integral limit and filter constant must be ≥ 0",
            );
        }
        if self.rate_limit_per_s <= 0.0 || self.max_dt_s <= 0.0 {
            return bad("rate_limit_per_s/max_dt_s", "must be > 0");
        }
        if !(0.0..0.5).contains(&self.level_hysteresis) {
            return bad("level_hysteresis", "must be in [0, 0.5) levels");
        }
        Ok(())
    }
}

/// What the tuning rule needs to know about the thermal plant (see [`PidConfig::tuned`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlantModel {
    /// Output that holds the sensor at the target in steady state (IPA's sustainable power),
    /// in the controller's output units.
    pub sustainable_output: f64,
    /// Slowest time constant of the sensor's response (chassis/skin), s.
    pub tau_slow_s: f64,
    /// Fastest time constant (die), s.
    pub tau_fast_s: f64,
}

/// What the tuned loop should achieve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TuningGoal {
    /// Peak-to-peak temperature ripple budgeted for level switching, °C.
    pub ripple_c: f64,
    /// Level hysteresis, in levels (see [`level_for_output`]).
    pub hysteresis: f64,
}

impl Default for TuningGoal {
    fn default() -> Self {
        Self {
            ripple_c: 0.25,
            hysteresis: 0.2,
        }
    }
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

/// PID controller with discrete level output. Pure: no I/O.
#[derive(Debug, Clone)]
pub struct Pid {
    cfg: PidConfig,
    levels: usize,
    /// Output each level delivers (uniform over the output range unless given).
    table: Vec<f64>,
    last_t: Option<f64>,
    filtered: f64,
    integral: f64,
    output: f64,
    level: usize,
    last_valid_t: Option<f64>,
}

impl Pid {
    /// A controller driving `levels` discrete levels, starting unthrottled.
    pub fn new(cfg: PidConfig, levels: usize) -> Result<Self> {
        cfg.validate()?;
        if levels == 0 {
            return Err(Error::Governor("actuator reports 0 levels".into()));
        }
        let span = cfg.output_max - cfg.output_min;
        let table = if levels == 1 {
            vec![cfg.output_max]
        } else {
            (0..levels)
                .map(|k| cfg.output_max - span * k as f64 / (levels - 1) as f64)
                .collect()
        };
        Self::build(cfg, table)
    }

    /// A controller whose level k delivers `outputs[k]` (strictly decreasing, inside
    /// `[output_min, output_max]`), starting unthrottled.
    pub fn with_level_outputs(cfg: PidConfig, outputs: Vec<f64>) -> Result<Self> {
        cfg.validate()?;
        validate_table(&outputs)?;
        let eps = 1e-9 * (cfg.output_max - cfg.output_min);
        if outputs[0] > cfg.output_max + eps || outputs[outputs.len() - 1] < cfg.output_min - eps {
            return Err(Error::InvalidArgument {
                what: "level table".into(),
                reason: format!(
                    "outputs {:?} fall outside [{}, {}]",
                    outputs, cfg.output_min, cfg.output_max
                ),
            });
        }
        Self::build(cfg, outputs)
    }

    fn build(cfg: PidConfig, table: Vec<f64>) -> Result<Self> {
        let levels = table.len();
        let output = cfg.output_max;
        Ok(Self {
            cfg,
            levels,
            table,
            last_t: None,
            filtered: f64::NAN,
            integral: 0.0,
            output,
            level: 0,
            last_valid_t: None,
        })
    }

    pub fn config(&self) -> &PidConfig {
        &self.cfg
    }
    pub fn output(&self) -> f64 {
        self.output
    }
    pub fn integral(&self) -> f64 {
        self.integral
    }
    pub fn level(&self) -> usize {
        self.level
    }

    /// Tell the controller what the actuator is doing now, so the first update continues
    /// from it without a bump (e.g. when taking over from another governor).
    pub fn set_current_level(&mut self, level: usize) {
        self.level = level.min(self.levels - 1);
        self.output = self.output_for_level(self.level);
        self.last_t = None;
    }

    /// The output level `level` delivers.
    pub fn output_for_level(&self, level: usize) -> f64 {
        self.table[level.min(self.levels - 1)]
    }

    /// The level table (level 0 first).
    pub fn level_outputs(&self) -> &[f64] {
        &self.table
    }

    fn proportional(&self, e: f64) -> f64 {
        if e < 0.0 {
            self.cfg.k_po * e
        } else {
            self.cfg.k_pu * e
        }
    }

    fn record(
        &self,
        t_s: f64,
        status: StepStatus,
        temp: Option<f64>,
        dt: f64,
        p: f64,
        d: f64,
    ) -> GovernorRecord {
        GovernorRecord {
            t_s,
            policy: PolicyKind::Pid,
            status,
            temp_c: temp,
            filtered_c: self.filtered.is_finite().then_some(self.filtered),
            target_c: self.cfg.target_c,
            dt_s: dt,
            p,
            i: self.integral,
            d,
            ff: self.cfg.sustainable_output,
            output: self.output,
            level: self.level,
            levels: self.levels,
            applied: false,
        }
    }

    /// Bumpless (re)start: the integral absorbs whatever keeps the output where it is. When
    /// the output sits at a clamp that the proportional term alone already drives it into
    /// (cold start: unthrottled and far below target), the clamp keeps the output and the
    /// integral starts at zero instead of winding up against the clamp.
    fn start(&mut self, t_s: f64, temp: f64, status: StepStatus) -> GovernorRecord {
        self.last_t = Some(t_s);
        self.filtered = temp;
        let c = &self.cfg;
        let e = c.target_c - temp;
        let p = self.proportional(e);
        let lim = c.integral_limit;
        let mut need = self.output - c.sustainable_output - p;
        let at_max = self.output >= c.output_max && need < 0.0;
        let at_min = self.output <= c.output_min && need > 0.0;
        if at_max || at_min {
            need = 0.0;
        }
        self.integral = need.clamp(-lim, lim);
        self.record(t_s, status, Some(temp), 0.0, p, 0.0)
    }

    /// One control step at monotonic time `t_s` (seconds) with reading `temp_c`.
    pub fn update(&mut self, t_s: f64, temp_c: Option<f64>) -> GovernorRecord {
        let Some(temp) = plausible(temp_c) else {
            let silent = match self.last_valid_t {
                Some(t0) if t_s.is_finite() => t_s - t0,
                _ => 0.0,
            };
            if silent >= self.cfg.dropout_failsafe_s {
                self.level = self.levels - 1;
                self.output = self.cfg.output_min;
                // Restart cleanly when the sensor comes back.
                self.last_t = None;
                return self.record(t_s, StepStatus::Failsafe, None, 0.0, 0.0, 0.0);
            }
            return self.record(t_s, StepStatus::SensorDropout, None, 0.0, 0.0, 0.0);
        };
        if !t_s.is_finite() {
            return self.record(t_s, StepStatus::ClockStalled, Some(temp), 0.0, 0.0, 0.0);
        }
        let Some(last) = self.last_t else {
            self.last_valid_t = Some(t_s);
            return self.start(t_s, temp, StepStatus::Started);
        };
        let dt = t_s - last;
        if dt <= 0.0 {
            return self.record(t_s, StepStatus::ClockStalled, Some(temp), dt, 0.0, 0.0);
        }
        self.last_valid_t = Some(t_s);
        if dt > self.cfg.max_dt_s {
            return self.start(t_s, temp, StepStatus::Resumed);
        }
        self.last_t = Some(t_s);
        let c = &self.cfg;
        let e = c.target_c - temp;
        let p = self.proportional(e);

        // Derivative on the filtered measurement (no kick when the target changes).
        let alpha = dt / (c.d_filter_tau_s + dt);
        let filtered = self.filtered + alpha * (temp - self.filtered);
        let d = -c.k_d * (filtered - self.filtered) / dt;
        self.filtered = filtered;

        let limit = |u: f64, prev: f64| {
            let clamped = u.clamp(c.output_min, c.output_max);
            let step = c.rate_limit_per_s * dt;
            clamped.clamp(prev - step, prev + step)
        };
        let candidate = (self.integral + c.k_i * e * dt).clamp(-c.integral_limit, c.integral_limit);
        let unsat = c.sustainable_output + p + candidate + d;
        let limited = limit(unsat, self.output);
        // Conditional integration: freeze the integral while far from the target, or while
        // the output is pinned and the error pushes it further into the limit.
        let pinned_same_way =
            (unsat - limited).abs() > 1e-12 && (unsat - limited).signum() == e.signum();
        if e.abs() < c.integral_cutoff_c && !pinned_same_way {
            self.integral = candidate;
        }
        let unsat = c.sustainable_output + p + self.integral + d;
        let out = limit(unsat, self.output);
        let saturated = (unsat - out).abs() > 1e-12;
        self.output = out;
        self.level = self.quantize(out);
        let status = if saturated {
            StepStatus::Saturated
        } else {
            StepStatus::Ok
        };
        self.record(t_s, status, Some(temp), dt, p, d)
    }

    fn quantize(&self, out: f64) -> usize {
        level_for_output_table(out, self.level, &self.table, self.cfg.level_hysteresis)
    }
}

/// Map a controller output onto one of `levels` discrete levels (0 ↔ `output_max`,
/// `levels − 1` ↔ `output_min`) with hysteresis: the level changes only when the continuous
/// level is more than `0.5 + hysteresis` away from `current`, then jumps to the nearest one.
pub fn level_for_output(
    out: f64,
    current: usize,
    levels: usize,
    output_min: f64,
    output_max: f64,
    hysteresis: f64,
) -> usize {
    if levels <= 1 || output_max <= output_min || !out.is_finite() {
        return current.min(levels.saturating_sub(1));
    }
    let top = (levels - 1) as f64;
    let x = ((output_max - out) / (output_max - output_min) * top).clamp(0.0, top);
    hysteresis_step(x, current, levels, hysteresis)
}

/// `step_wise` baseline parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepWiseConfig {
    /// Trip temperature, °C.
    pub trip_c: f64,
    /// Release below `trip_c − hyst_c`.
    pub hyst_c: f64,
}

/// Linux-`step_wise`-like baseline: one level more throttling per update at or above the trip,
/// one level less below trip − hysteresis, hold in between and on sensor dropout.
#[derive(Debug, Clone)]
pub struct StepWise {
    cfg: StepWiseConfig,
    levels: usize,
    level: usize,
    last_t: Option<f64>,
}

impl StepWise {
    pub fn new(cfg: StepWiseConfig, levels: usize) -> Result<Self> {
        if !cfg.trip_c.is_finite() || !cfg.hyst_c.is_finite() || cfg.hyst_c < 0.0 {
            return Err(Error::InvalidArgument {
                what: "step_wise".into(),
                reason: "trip must be finite and hysteresis ≥ 0".into(),
            });
        }
        if levels == 0 {
            return Err(Error::Governor("actuator reports 0 levels".into()));
        }
        Ok(Self {
            cfg,
            levels,
            level: 0,
            last_t: None,
        })
    }

    pub fn level(&self) -> usize {
        self.level
    }

    pub fn update(&mut self, t_s: f64, temp_c: Option<f64>) -> GovernorRecord {
        let temp = plausible(temp_c);
        let dt = match (self.last_t, t_s.is_finite()) {
            (Some(l), true) => t_s - l,
            _ => 0.0,
        };
        let status = match temp {
            None => StepStatus::SensorDropout,
            Some(_) if self.last_t.is_some() && dt <= 0.0 => StepStatus::ClockStalled,
            Some(t) => {
                if t >= self.cfg.trip_c {
                    self.level = (self.level + 1).min(self.levels - 1);
                } else if t < self.cfg.trip_c - self.cfg.hyst_c {
                    self.level = self.level.saturating_sub(1);
                }
                if t_s.is_finite() {
                    self.last_t = Some(t_s);
                }
                StepStatus::Ok
            }
        };
        let span = (self.levels - 1).max(1) as f64;
        GovernorRecord {
            t_s,
            policy: PolicyKind::Step,
            status,
            temp_c: temp,
            filtered_c: None,
            target_c: self.cfg.trip_c,
            dt_s: dt,
            p: 0.0,
            i: 0.0,
            d: 0.0,
            ff: 0.0,
            output: 1.0 - self.level as f64 / span,
            level: self.level,
            levels: self.levels,
            applied: false,
        }
    }
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

fn busy_for_level(level: usize, levels: usize, min_busy: f64) -> f64 {
    if levels <= 1 {
        return 1.0;
    }
    1.0 - (1.0 - min_busy) * level.min(levels - 1) as f64 / (levels - 1) as f64
}

/// Duty-cycle actuator: level k makes the decode loop busy a fraction
/// `1 − (1 − min_busy)·k/(levels − 1)` of the time by idling after each token. Needs no
/// privileges. The decode loop holds a [`DutyCycleHandle`] and sleeps for
/// [`DutyCycleHandle::pause_after_token`] after each token.
#[derive(Debug, Clone)]
pub struct DutyCycle {
    levels: usize,
    min_busy: f64,
    busy_bits: Arc<AtomicU64>,
}

/// The decode loop's view of a [`DutyCycle`]; cheap to clone, safe to share across threads.
#[derive(Debug, Clone)]
pub struct DutyCycleHandle {
    busy_bits: Arc<AtomicU64>,
}

impl DutyCycle {
    /// `levels` ≥ 1 duty steps from 100 % busy down to `min_busy` (0 < min_busy ≤ 1).
    pub fn new(levels: usize, min_busy: f64) -> Result<Self> {
        if levels == 0 || !(min_busy > 0.0 && min_busy <= 1.0) {
            return Err(Error::InvalidArgument {
                what: "duty_cycle".into(),
                reason: format!("need levels ≥ 1 and 0 < min_busy ≤ 1 (got {levels}, {min_busy})"),
            });
        }
        Ok(Self {
            levels,
            min_busy,
            busy_bits: Arc::new(AtomicU64::new(1.0f64.to_bits())),
        })
    }

    pub fn handle(&self) -> DutyCycleHandle {
        DutyCycleHandle {
            busy_bits: Arc::clone(&self.busy_bits),
        }
    }

    /// Busy fraction of `level`.
    pub fn busy_at(&self, level: usize) -> f64 {
        busy_for_level(level, self.levels, self.min_busy)
    }

    pub fn busy(&self) -> f64 {
        self.handle().busy()
    }

    /// See [`DutyCycleHandle::pause_after_token`].
    pub fn pause_after_token(&self, token_time: Duration) -> Duration {
        self.handle().pause_after_token(token_time)
    }
}

impl DutyCycleHandle {
    pub fn busy(&self) -> f64 {
        f64::from_bits(self.busy_bits.load(Ordering::Relaxed))
    }

    /// Idle time to insert after a token that took `token_time`, so that busy time over
    /// busy + idle time equals the current busy fraction: pause = t·(1 − b)/b.
    pub fn pause_after_token(&self, token_time: Duration) -> Duration {
        let b = self.busy();
        if b >= 1.0 || b <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(token_time.as_secs_f64() * (1.0 - b) / b)
    }
}

impl Actuator for DutyCycle {
    fn levels(&self) -> usize {
        self.levels
    }
    fn apply(&mut self, level: usize) -> Result<()> {
        if level >= self.levels {
            return Err(Error::Governor(format!(
                "duty level {level} ≥ {} levels",
                self.levels
            )));
        }
        self.busy_bits
            .store(self.busy_at(level).to_bits(), Ordering::Relaxed);
        Ok(())
    }
    fn state(&self) -> ActuatorState {
        ActuatorState {
            busy: Some(self.busy()),
            ..Default::default()
        }
    }
}

/// Called with the new thread count whenever a [`ThreadCount`] level is applied.
pub type ThreadSink = Arc<dyn Fn(usize) + Send + Sync>;

/// Thread-count actuator: level k runs `max_threads − k` decode threads (never below 1).
/// With a sink ([`ThreadCount::with_sink`], e.g. `Engine::set_active_threads`), applying a
/// level changes the threads the kernels use at once.
#[derive(Clone)]
pub struct ThreadCount {
    max_threads: usize,
    threads: Arc<AtomicUsize>,
    sink: Option<ThreadSink>,
}

impl std::fmt::Debug for ThreadCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadCount")
            .field("max_threads", &self.max_threads)
            .field("threads", &self.threads())
            .field("sink", &self.sink.is_some())
            .finish()
    }
}

impl ThreadCount {
    pub fn new(max_threads: usize) -> Result<Self> {
        if max_threads == 0 {
            return Err(Error::InvalidArgument {
                what: "threads".into(),
                reason: "must be ≥ 1".into(),
            });
        }
        Ok(Self {
            max_threads,
            threads: Arc::new(AtomicUsize::new(max_threads)),
            sink: None,
        })
    }

    /// Like [`ThreadCount::new`], calling `sink(threads)` on every apply.
    pub fn with_sink(max_threads: usize, sink: ThreadSink) -> Result<Self> {
        let mut t = Self::new(max_threads)?;
        t.sink = Some(sink);
        Ok(t)
    }
    /// Shared counter the decode loop reads before each token.
    pub fn shared(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.threads)
    }
    pub fn threads(&self) -> usize {
        self.threads.load(Ordering::Relaxed)
    }
}

impl Actuator for ThreadCount {
    fn levels(&self) -> usize {
        self.max_threads
    }
    fn apply(&mut self, level: usize) -> Result<()> {
        if level >= self.max_threads {
            return Err(Error::Governor(format!(
                "thread level {level} ≥ {} levels",
                self.max_threads
            )));
        }
        let n = self.max_threads - level;
        self.threads.store(n, Ordering::Relaxed);
        if let Some(sink) = &self.sink {
            sink(n);
        }
        Ok(())
    }
    fn state(&self) -> ActuatorState {
        ActuatorState {
            threads: Some(self.threads()),
            ..Default::default()
        }
    }
}

/// Actuators used one after another: the first throttles through all its levels, then the
/// next one starts while the first stays at its most throttled level, and so on. E.g.
/// frequency caps from the top OPP down to the lowest, then duty cycle at the lowest OPP.
/// Levels: `1 + Σ (levels_i − 1)`.
pub struct Chain {
    parts: Vec<Box<dyn Actuator>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let levels: Vec<usize> = self.parts.iter().map(|p| p.levels()).collect();
        f.debug_struct("Chain").field("levels", &levels).finish()
    }
}

impl Chain {
    /// Errors when `parts` is empty or a part has no levels.
    pub fn new(parts: Vec<Box<dyn Actuator>>) -> Result<Self> {
        if parts.is_empty() || parts.iter().any(|p| p.levels() == 0) {
            return Err(Error::Governor(
                "a chain needs at least one actuator, each with ≥ 1 level".into(),
            ));
        }
        Ok(Self { parts })
    }

    /// The level of each part at chain level `level`.
    pub fn split(&self, level: usize) -> Vec<usize> {
        let mut left = level;
        self.parts
            .iter()
            .map(|p| {
                let take = left.min(p.levels() - 1);
                left -= take;
                take
            })
            .collect()
    }
}

impl Actuator for Chain {
    fn levels(&self) -> usize {
        1 + self.parts.iter().map(|p| p.levels() - 1).sum::<usize>()
    }
    fn apply(&mut self, level: usize) -> Result<()> {
        if level >= self.levels() {
            return Err(Error::Governor(format!(
                "chain level {level} ≥ {} levels",
                self.levels()
            )));
        }
        let split = self.split(level);
        for (p, l) in self.parts.iter_mut().zip(split) {
            p.apply(l)?;
        }
        Ok(())
    }
    fn state(&self) -> ActuatorState {
        self.parts
            .iter()
            .fold(ActuatorState::default(), |acc, p| acc.merge(p.state()))
    }
}

/// One thermal zone a [`ZoneSensor`] reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZoneSpec {
    /// The zone's `type`.
    pub name: String,
    /// Its `temp` file.
    pub path: PathBuf,
    /// °C per raw unit: 0.001 for the ABI's millidegrees, 1 for drivers that report degrees.
    pub scale: f64,
}

/// A sysfs thermal sensor: one zone, or the maximum over several (e.g. every SoC zone, or
/// every skin zone). Zones that fail to read or read implausibly are left out of the
/// maximum and listed by [`ZoneSensor::failed`]; when none reads, the sensor reports a
/// dropout (`None`) and the governor holds its output.
#[derive(Debug, Clone)]
pub struct ZoneSensor {
    zones: Vec<ZoneSpec>,
    failed: Vec<String>,
}

impl ZoneSensor {
    /// Errors when `zones` is empty or a scale is not a positive number.
    pub fn new(zones: Vec<ZoneSpec>) -> Result<Self> {
        if zones.is_empty() {
            return Err(Error::Governor(
                "no thermal zone selected for the governor's sensor".into(),
            ));
        }
        if let Some(z) = zones
            .iter()
            .find(|z| !(z.scale.is_finite() && z.scale > 0.0))
        {
            return Err(Error::InvalidArgument {
                what: format!("zone {} scale", z.name),
                reason: format!("must be a positive number (got {})", z.scale),
            });
        }
        Ok(Self {
            zones,
            failed: Vec::new(),
        })
    }

    pub fn zones(&self) -> &[ZoneSpec] {
        &self.zones
    }

    /// Zones that did not give a plausible reading at the last read.
    pub fn failed(&self) -> &[String] {
        &self.failed
    }

    fn read_zone(z: &ZoneSpec) -> Option<f64> {
        let text = fs::read_to_string(&z.path).ok()?;
        let raw: i64 = text.trim().parse().ok()?;
        plausible(Some(raw as f64 * z.scale))
    }
}

impl ThermalSensor for ZoneSensor {
    fn read(&mut self) -> Option<f64> {
        self.failed.clear();
        let mut best: Option<f64> = None;
        for z in &self.zones {
            match Self::read_zone(z) {
                Some(t) => best = Some(best.map_or(t, |b: f64| b.max(t))),
                None => self.failed.push(z.name.clone()),
            }
        }
        best
    }
}

/// One sysfs frequency-cap file and what it held before we touched it.
#[derive(Debug, Clone)]
struct CapFile {
    path: PathBuf,
    original: String,
    /// Allowed caps, highest first; `steps[k]` is written at level k.
    steps: Vec<u64>,
}

/// Frequency-cap actuator over sysfs (`cpufreq/policy*/scaling_max_freq`, in kHz, and
/// `kgsl-3d0/max_gpuclk`, in Hz). Used only when explicitly enabled and the files are
/// writable; restores the original values on [`SysfsFreqCap::restore`] and on drop.
#[derive(Debug)]
pub struct SysfsFreqCap {
    files: Vec<CapFile>,
    levels: usize,
    dirty: bool,
    current: Option<usize>,
}

fn read_trim(path: &Path) -> Result<String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
}

fn read_u64(path: &Path) -> Result<u64> {
    let s = read_trim(path)?;
    s.parse()
        .map_err(|_| Error::Governor(format!("{}: not an integer: `{s}`", path.display())))
}

fn read_list(path: &Path) -> Option<Vec<u64>> {
    let s = fs::read_to_string(path).ok()?;
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (!v.is_empty()).then_some(v)
}

fn writable(path: &Path) -> bool {
    fs::OpenOptions::new().write(true).open(path).is_ok()
}

/// `levels` caps from `max` down to `min`: the available frequencies themselves (highest
/// first) when there are exactly `levels` of them, else evenly spaced, each snapped down to an
/// available frequency when the list is known.
fn cap_steps(min: u64, max: u64, available: Option<&[u64]>, levels: usize) -> Vec<u64> {
    if let Some(list) = available
        && list.len() == levels
    {
        let mut v = list.to_vec();
        v.sort_unstable_by(|a, b| b.cmp(a));
        return v;
    }
    (0..levels)
        .map(|k| {
            let frac = if levels > 1 {
                k as f64 / (levels - 1) as f64
            } else {
                0.0
            };
            let raw = max as f64 - frac * (max.saturating_sub(min)) as f64;
            let raw = raw.round() as u64;
            match available {
                Some(list) => list
                    .iter()
                    .copied()
                    .filter(|f| *f <= raw)
                    .max()
                    .unwrap_or(min),
                None => raw,
            }
        })
        .collect()
}

impl SysfsFreqCap {
    /// Find writable cap files under the sysfs mount `root` (`/sys` on a device; a fixture or
    /// simulated tree in tests), as the telemetry probe does.
    /// `enabled` must be true (an explicit user opt-in); errors if nothing writable is found.
    pub fn discover(root: &Path, enabled: bool, levels: usize) -> Result<Self> {
        if !enabled {
            return Err(Error::Governor(
                "sysfs frequency caps are disabled; enable them explicitly to let the governor write scaling_max_freq".into(),
            ));
        }
        if levels == 0 {
            return Err(Error::Governor("frequency cap needs ≥ 1 level".into()));
        }
        let mut files = Vec::new();
        let cpufreq = root.join("devices/system/cpu/cpufreq");
        if let Ok(rd) = fs::read_dir(&cpufreq) {
            let mut dirs: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("policy"))
                })
                .collect();
            dirs.sort();
            for d in dirs {
                let cap = d.join("scaling_max_freq");
                if !writable(&cap) {
                    continue;
                }
                let (Ok(min), Ok(max), Ok(original)) = (
                    read_u64(&d.join("cpuinfo_min_freq")),
                    read_u64(&d.join("cpuinfo_max_freq")),
                    read_trim(&cap),
                ) else {
                    continue;
                };
                let avail = read_list(&d.join("scaling_available_frequencies"));
                files.push(CapFile {
                    path: cap,
                    original,
                    steps: cap_steps(min, max, avail.as_deref(), levels),
                });
            }
        }
        let kgsl = root.join("class/kgsl/kgsl-3d0");
        let gpu_cap = kgsl.join("max_gpuclk");
        if writable(&gpu_cap)
            && let (Some(avail), Ok(original)) = (
                read_list(&kgsl.join("gpu_available_frequencies")),
                read_trim(&gpu_cap),
            )
        {
            let min = avail.iter().copied().min().unwrap_or(0);
            let max = avail.iter().copied().max().unwrap_or(0);
            files.push(CapFile {
                path: gpu_cap,
                original,
                steps: cap_steps(min, max, Some(&avail), levels),
            });
        }
        if files.is_empty() {
            return Err(Error::Governor(format!(
                "no writable scaling_max_freq or max_gpuclk under {} (needs root); use the duty-cycle actuator",
                root.display()
            )));
        }
        Ok(Self {
            files,
            levels,
            dirty: false,
            current: None,
        })
    }

    /// (file, value found at discovery) for every cap file: what a signal handler must write
    /// back if the process is interrupted.
    pub fn restore_plan(&self) -> Vec<(PathBuf, String)> {
        self.files
            .iter()
            .map(|f| (f.path.clone(), f.original.clone()))
            .collect()
    }

    /// Paths this actuator writes.
    pub fn paths(&self) -> Vec<&Path> {
        self.files.iter().map(|f| f.path.as_path()).collect()
    }

    /// The cap written to each file at `level`.
    pub fn caps_at(&self, level: usize) -> Vec<u64> {
        self.files
            .iter()
            .map(|f| f.steps[level.min(self.levels - 1)])
            .collect()
    }

    /// Write back the values found at discovery. Call from a Ctrl-C handler; also runs on drop.
    pub fn restore(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let mut first_err = None;
        for f in &self.files {
            if let Err(source) = fs::write(&f.path, &f.original) {
                first_err.get_or_insert(Error::Io {
                    path: f.path.clone(),
                    source,
                });
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => {
                self.dirty = false;
                self.current = None;
                Ok(())
            }
        }
    }
}

impl Actuator for SysfsFreqCap {
    fn levels(&self) -> usize {
        self.levels
    }
    fn apply(&mut self, level: usize) -> Result<()> {
        if level >= self.levels {
            return Err(Error::Governor(format!(
                "cap level {level} ≥ {} levels",
                self.levels
            )));
        }
        self.dirty = true;
        for f in &self.files {
            fs::write(&f.path, f.steps[level].to_string()).map_err(|source| Error::Io {
                path: f.path.clone(),
                source,
            })?;
        }
        self.current = Some(level);
        Ok(())
    }
    fn state(&self) -> ActuatorState {
        ActuatorState {
            caps: self.current.map(|l| self.caps_at(l)).unwrap_or_default(),
            ..Default::default()
        }
    }
}

impl Drop for SysfsFreqCap {
    fn drop(&mut self) {
        // Best effort: a failure here cannot be reported; `restore()` reports it.
        let _ = self.restore();
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
