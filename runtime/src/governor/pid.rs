//! The PID controller of the thermal governor: configuration, the tuning rule from a plant
//! model, and the controller itself (split gains, conditional anti-windup, filtered
//! derivative, rate limit, bumpless start; `docs/GOVERNOR.md`).

use super::*;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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

    /// Replaces the configuration and the level table (same number of levels) and keeps
    /// the controller's state: its output (the budget it asks for, clamped to the new output
    /// range), integral (clamped to the new limit), filtered measurement and clock. The level
    /// becomes the one that delivers that output on the new table (with the usual
    /// hysteresis), so when the table is recalibrated to what each level really delivers,
    /// the actuator moves at once to the level that delivers the budget.
    pub fn retune(&mut self, cfg: PidConfig, outputs: Vec<f64>) -> Result<()> {
        if outputs.len() != self.levels {
            return Err(Error::Governor(format!(
                "re-tuning with {} levels, the controller has {}",
                outputs.len(),
                self.levels
            )));
        }
        let mut fresh = Self::with_level_outputs(cfg, outputs)?;
        let c = &fresh.cfg;
        fresh.last_t = self.last_t;
        fresh.last_valid_t = self.last_valid_t;
        fresh.filtered = self.filtered;
        fresh.integral = self.integral.clamp(-c.integral_limit, c.integral_limit);
        fresh.output = self.output.clamp(c.output_min, c.output_max);
        fresh.level = self.level.min(fresh.levels - 1);
        fresh.level = fresh.quantize(fresh.output);
        *self = fresh;
        Ok(())
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
