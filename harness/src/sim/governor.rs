//! Closed-loop thermal-governor simulation in virtual time: the runtime's [`Governor`] (PID,
//! step_wise or off) reads a simulated handset's sensor, drives its actuator, and a continuous
//! decode workload runs at whatever speed the actuator and the vendor's own trip-point caps
//! allow (the handset model's `tokens_per_s`).
//!
//! Owns: the actuator ladders of a simulated handset (frequency caps, duty cycle, both), the
//! plant model and gains derived from the handset's RC network ([`plant_model`],
//! [`pid_config`]), the closed-form thermally sustainable throughput ([`sustainable`]), the
//! loop itself ([`simulate`]), its metrics (settling time, overshoot, oscillation, vendor
//! throttling and its throughput loss), the off / step / pid comparison with step's trip
//! tuned to the same maximum skin temperature ([`compare`]), the acceptance checks
//! ([`Comparison::checks`]), and the files `pocketperf governor sim --out` writes.
//! Derivations: `docs/GOVERNOR.md`.
//!
//! Size: over 800 lines: actuator ladders, tuning from the RC model, the closed loop, the
//! metrics and the report files (JSON, trace CSV, SVG, HTML). The report files are the seam.

use std::io::Write;
use std::path::{Path, PathBuf};

use pocketperf_runtime::governor::{
    Actuator, ActuatorState, CalibrationEvent, GainSchedule, Governor, PidConfig, PlantModel,
    Policy, ScheduleConfig, StepStatus, StepWiseConfig, ThermalSensor, TuningGoal,
};
use serde::Serialize;

use crate::sim::model::{Activity, HandsetModel, HandsetProfile};
use pocketperf_reports::render::escape_html;
use pocketperf_reports::render::html_helpers::{figure, page_end, page_start_styled};

/// Errors of the governor simulation.
#[derive(Debug, thiserror::Error)]
pub enum GovSimError {
    /// A bad setting.
    #[error("invalid {field} `{value}`: {reason}")]
    Config {
        /// Which setting.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// The runtime's governor refused a configuration or failed.
    #[error("governor: {0}")]
    Runtime(#[from] pocketperf_runtime::Error),
    /// An output file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("plot: {0}")]
    Plot(String),
    /// JSON rendering failed.
    #[error("cannot render JSON: {0}")]
    Json(#[from] serde_json::Error),
}

type Result<T> = std::result::Result<T, GovSimError>;

/// Which knob the governor turns on the simulated handset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SimActuator {
    /// Frequency caps from the top OPP down to the lowest, then duty cycle at the lowest OPP
    /// (what `SysfsFreqCap` chained with `DutyCycle` does on a rooted handset).
    CapsDuty,
    /// Frequency caps only (busy 100 %).
    Caps,
    /// Duty cycle only, at the top OPP (the unprivileged actuator).
    Duty,
}

/// Which temperature the governor regulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SimSensor {
    /// The skin node (= the hottest skin zone of the simulated tree).
    Skin,
    /// The die node (= the hottest SoC zone).
    Soc,
}

/// One level of a simulated actuator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OperatingPoint {
    /// OPP index requested (the vendor cap may lower it).
    pub freq_level: usize,
    /// Busy fraction of the decode loop.
    pub busy: f64,
    /// Platform power at this point, W (before any vendor cap).
    pub power_w: f64,
    /// Decode speed at this point, tokens/s.
    pub tokens_per_s: f64,
}

/// Duty steps of the `caps-duty` ladder below the lowest OPP, and of the `duty` ladder.
const CAPS_DUTY_STEPS: usize = 4;
const DUTY_STEPS: usize = 16;
/// Lowest busy fraction any ladder goes to.
const MIN_BUSY: f64 = 0.2;

/// The levels of `kind` on `p`, level 0 (unthrottled) first. Power is strictly decreasing.
pub fn ladder(p: &HandsetProfile, kind: SimActuator) -> Vec<OperatingPoint> {
    let point = |freq_level: usize, busy: f64| OperatingPoint {
        freq_level,
        busy,
        power_w: p.power_w(freq_level, busy),
        tokens_per_s: p.tokens_per_s(freq_level, busy),
    };
    let top = p.max_level();
    let duty =
        |steps: usize| (1..=steps).map(move |k| 1.0 - (1.0 - MIN_BUSY) * k as f64 / steps as f64);
    match kind {
        SimActuator::Caps => (0..=top).rev().map(|l| point(l, 1.0)).collect(),
        SimActuator::CapsDuty => (0..=top)
            .rev()
            .map(|l| point(l, 1.0))
            .chain(duty(CAPS_DUTY_STEPS).map(|b| point(0, b)))
            .collect(),
        SimActuator::Duty => std::iter::once(point(top, 1.0))
            .chain(duty(DUTY_STEPS).map(|b| point(top, b)))
            .collect(),
    }
}

/// The two time constants of the die–skin RC network, slow (chassis) first, s: the
/// eigenvalues of `A = [[−a, a], [b, −(b + c)]]` with `a = 1/(C_die·R_ds)`,
/// `b = 1/(C_skin·R_ds)`, `c = 1/(C_skin·R_sa)`.
pub fn time_constants(p: &HandsetProfile) -> (f64, f64) {
    let a = 1.0 / (p.c_die_j_per_k * p.r_die_skin_k_per_w);
    let b = 1.0 / (p.c_skin_j_per_k * p.r_die_skin_k_per_w);
    let c = 1.0 / (p.c_skin_j_per_k * p.r_skin_amb_k_per_w);
    let tr = -(a + b + c);
    let det = a * c;
    let disc = (tr * tr - 4.0 * det).max(0.0).sqrt();
    let (l_slow, l_fast) = (0.5 * (tr + disc), 0.5 * (tr - disc));
    (-1.0 / l_slow, -1.0 / l_fast)
}

/// Constant platform power that holds `sensor` at `target_c` in steady state, W: the
/// resistor ladder `T = T_amb + P·R_sa` (skin) or `T = T_amb + P·(R_sa + R_ds)` (die).
pub fn steady_power_w(p: &HandsetProfile, sensor: SimSensor, target_c: f64) -> f64 {
    let r = match sensor {
        SimSensor::Skin => p.r_skin_amb_k_per_w,
        SimSensor::Soc => p.r_skin_amb_k_per_w + p.r_die_skin_k_per_w,
    };
    ((target_c - p.ambient_c) / r).max(0.0)
}

/// The plant the tuning rule sees, from the handset's parameters.
pub fn plant_model(p: &HandsetProfile, sensor: SimSensor, target_c: f64) -> PlantModel {
    let (slow, fast) = time_constants(p);
    PlantModel {
        sustainable_output: steady_power_w(p, sensor, target_c),
        tau_slow_s: slow,
        tau_fast_s: fast,
    }
}

/// PID gains for `target_c` on `ladder`, derived from `model` (the handset the governor
/// believes it runs on; see [`PidConfig::tuned`]).
pub fn pid_config(
    model: &HandsetProfile,
    sensor: SimSensor,
    target_c: f64,
    ladder: &[OperatingPoint],
) -> Result<PidConfig> {
    let table: Vec<f64> = ladder.iter().map(|o| o.power_w).collect();
    let plant = plant_model(model, sensor, target_c);
    Ok(PidConfig::tuned(
        target_c,
        &plant,
        &table,
        &TuningGoal::default(),
    )?)
}

/// The thermally sustainable maximum throughput at a skin target, in closed form.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sustainable {
    /// Steady-state power that holds the skin at the target, W.
    pub power_w: f64,
    /// Highest decode speed any steady mix of operating points delivers at that power.
    pub tokens_per_s: f64,
    /// The two hull vertices the optimum mixes: OPP index, `None` = idle.
    pub lower_opp: Option<usize>,
    pub upper_opp: Option<usize>,
    /// Share of time at the upper vertex.
    pub upper_share: f64,
    /// Steady-state die temperature at the hotter vertex, °C.
    pub die_c_at_upper: f64,
}

/// Highest constant decode throughput whose steady-state skin temperature is `target_c`
/// (derivation in `docs/GOVERNOR.md`, "Sustainable throughput"): in steady state the skin
/// sits at `T_amb + R_sa·P̄`, whatever the die does, so the budget is the mean power
/// `P* = (T − T_amb)/R_sa`. Every operating point (OPP L at busy b) costs
/// `idle + b·active(L)` and yields `b·tps(L)`; mixing points in time averages both, so the
/// best mean throughput at mean power `P*` is the upper concave hull of the points
/// (idle, 0) and (P(L, 1), tps(L, 1)) evaluated at `P*`: the linear interpolation between
/// the two hull vertices that bracket it.
pub fn sustainable(p: &HandsetProfile, target_c: f64) -> Sustainable {
    let p_star = steady_power_w(p, SimSensor::Skin, target_c);
    let mut pts: Vec<(Option<usize>, f64, f64)> = vec![(None, p.idle_w, 0.0)];
    pts.extend((0..=p.max_level()).map(|l| (Some(l), p.power_w(l, 1.0), p.tokens_per_s(l, 1.0))));
    pts.sort_by(|a, b| a.1.total_cmp(&b.1));
    // Upper hull, left to right (Andrew's monotone chain, keeping right turns only).
    let mut hull: Vec<(Option<usize>, f64, f64)> = Vec::new();
    for q in pts {
        while hull.len() >= 2 {
            let (o, a) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            let cross = (a.1 - o.1) * (q.2 - o.2) - (a.2 - o.2) * (q.1 - o.1);
            if cross >= 0.0 {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(q);
    }
    // The die sits one R_ds·P above the skin (its time constant is seconds, the skin's minutes).
    let die_at = |w: f64| target_c + w * p.r_die_skin_k_per_w;
    let first = hull[0];
    let last = hull[hull.len() - 1];
    if p_star <= first.1 {
        return Sustainable {
            power_w: p_star,
            tokens_per_s: 0.0,
            lower_opp: None,
            upper_opp: None,
            upper_share: 0.0,
            die_c_at_upper: die_at(first.1),
        };
    }
    if p_star >= last.1 {
        return Sustainable {
            power_w: p_star,
            tokens_per_s: last.2,
            lower_opp: last.0,
            upper_opp: last.0,
            upper_share: 1.0,
            die_c_at_upper: die_at(last.1),
        };
    }
    let k = hull
        .windows(2)
        .position(|w| w[0].1 <= p_star && p_star <= w[1].1)
        .unwrap_or(0);
    let (lo, hi) = (hull[k], hull[k + 1]);
    let x = (p_star - lo.1) / (hi.1 - lo.1);
    Sustainable {
        power_w: p_star,
        tokens_per_s: lo.2 + x * (hi.2 - lo.2),
        lower_opp: lo.0,
        upper_opp: hi.0,
        upper_share: x,
        die_c_at_upper: die_at(hi.1),
    }
}

/// Which controller runs in a simulation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SimPolicy {
    Off,
    Step(StepWiseConfig),
    Pid(PidConfig),
}

/// Everything a simulation needs.
#[derive(Debug, Clone)]
pub struct SimSpec {
    /// The simulated handset (its ambient may differ from `model`'s).
    pub handset: HandsetProfile,
    /// The handset the governor's gains were derived for.
    pub model: HandsetProfile,
    pub target_c: f64,
    pub minutes: f64,
    /// Governor period, s.
    pub period_s: f64,
    pub actuator: SimActuator,
    pub sensor: SimSensor,
    /// Sensor silent over `[start, end)` s (dropout test).
    pub dropout: Option<(f64, f64)>,
    /// Band around the target that counts as settled, °C.
    pub settle_band_c: f64,
    /// Final window over which the sustained oscillation and steady rate are measured, s.
    pub final_window_s: f64,
    /// Share of the capacity the ladder assumes that the workload really gets (1 on the
    /// model's handset; a loaded host gives a real decode less): every level's busy fraction
    /// is multiplied by it.
    pub busy_share: f64,
    /// With a PID: calibrate its table to the measured busy share ([`GainSchedule`]; the
    /// workload's CPU time over its work time is the share, measured each period).
    pub calibrate: Option<ScheduleConfig>,
}

impl SimSpec {
    /// The acceptance setting: 1 s governor period, caps + duty ladder, skin sensor,
    /// ±0.5 °C band, last 10 minutes as the final window.
    pub fn new(handset: HandsetProfile, target_c: f64, minutes: f64) -> Self {
        Self {
            model: handset.clone(),
            handset,
            target_c,
            minutes,
            period_s: 1.0,
            actuator: SimActuator::CapsDuty,
            sensor: SimSensor::Skin,
            dropout: None,
            settle_band_c: 0.5,
            final_window_s: 600.0,
            busy_share: 1.0,
            calibrate: None,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, value: f64, reason: &str| {
            Err(GovSimError::Config {
                field,
                value: value.to_string(),
                reason: reason.into(),
            })
        };
        if !(self.minutes.is_finite() && self.minutes > 0.0 && self.minutes <= 24.0 * 60.0) {
            return bad("minutes", self.minutes, "must be in (0, 1440]");
        }
        if !(self.period_s.is_finite() && self.period_s > 0.0 && self.period_s <= 60.0) {
            return bad("period", self.period_s, "must be in (0, 60] s");
        }
        if !(self.busy_share.is_finite() && self.busy_share > 0.0 && self.busy_share <= 1.0) {
            return bad("busy share", self.busy_share, "must be in (0, 1]");
        }
        if !(self.target_c.is_finite() && self.target_c > self.handset.ambient_c) {
            return bad(
                "target",
                self.target_c,
                "must be a temperature above the ambient",
            );
        }
        if !(self.handset.ambient_c.is_finite() && (-20.0..=60.0).contains(&self.handset.ambient_c))
        {
            return bad("ambient", self.handset.ambient_c, "must be in [-20, 60] °C");
        }
        Ok(())
    }
}

/// The state at the end of one governor period.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TracePoint {
    pub t_s: f64,
    pub skin_c: f64,
    pub die_c: f64,
    /// Governor level (0 = unthrottled).
    pub level: usize,
    /// Controller output (W for the PID on a power table).
    pub output: f64,
    /// OPP run after the vendor cap.
    pub freq_level: usize,
    pub vendor_cap_level: usize,
    pub vendor_throttling: bool,
    pub busy: f64,
    pub power_w: f64,
    pub tokens_per_s: f64,
    pub tokens: f64,
    pub status: StepStatus,
}

/// Figures of one simulation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimSummary {
    pub policy: &'static str,
    pub minutes: f64,
    pub tokens: f64,
    pub mean_tokens_per_s: f64,
    /// Tokens/s over the final window.
    pub steady_tokens_per_s: f64,
    pub skin_max_c: f64,
    pub skin_mean_c: f64,
    pub die_max_c: f64,
    pub die_mean_c: f64,
    /// First time after which the skin stays within the band for the rest of the run.
    pub settling_time_s: Option<f64>,
    /// max(skin) − target, ≥ 0.
    pub overshoot_c: f64,
    /// Peak-to-peak skin temperature over the final window (sustained oscillation).
    pub oscillation_pp_c: f64,
    /// Largest |skin − target| over the final window (how well the target is held).
    pub final_error_c: f64,
    /// Time with a vendor trip point engaged or its cap below the top OPP, s.
    pub vendor_throttling_s: f64,
    /// Tokens the vendor's caps took away: ∫ (tps(requested) − tps(run)) dt.
    pub vendor_lost_tokens: f64,
    /// Tokens the unthrottled workload would have made in the same time.
    pub unthrottled_tokens: f64,
    pub energy_j: f64,
    pub level_changes: usize,
    pub sensor_dropouts: usize,
    pub failsafe_steps: usize,
}

/// A simulation: its figures and the trace at the governor period.
#[derive(Debug, Clone)]
pub struct SimRun {
    pub summary: SimSummary,
    pub trace: Vec<TracePoint>,
    /// The calibrations to the busy share (with [`SimSpec::calibrate`] and a PID).
    pub calibration: Vec<CalibrationEvent>,
}

/// The actuator of a simulated handset: a ladder of operating points.
struct LadderActuator<'a> {
    ladder: &'a [OperatingPoint],
    level: usize,
    freq_khz: &'a [u32],
}

impl Actuator for LadderActuator<'_> {
    fn levels(&self) -> usize {
        self.ladder.len()
    }
    fn apply(&mut self, level: usize) -> pocketperf_runtime::Result<()> {
        if level >= self.ladder.len() {
            return Err(pocketperf_runtime::Error::Governor(format!(
                "simulated ladder level {level} ≥ {}",
                self.ladder.len()
            )));
        }
        self.level = level;
        Ok(())
    }
    fn state(&self) -> ActuatorState {
        let o = self.ladder[self.level];
        ActuatorState {
            busy: Some(o.busy),
            threads: None,
            caps: vec![u64::from(self.freq_khz[o.freq_level])],
        }
    }
}

/// One reading handed to the governor (the sysfs value, quantized to 1 m°C like the ABI).
struct Reading(Option<f64>);

impl ThermalSensor for Reading {
    fn read(&mut self) -> Option<f64> {
        self.0
    }
}

fn policy_name(p: &SimPolicy) -> &'static str {
    match p {
        SimPolicy::Off => "off",
        SimPolicy::Step(_) => "step",
        SimPolicy::Pid(_) => "pid",
    }
}

/// Runs the closed loop for `spec.minutes` of virtual time.
pub fn simulate(spec: &SimSpec, policy: &SimPolicy) -> Result<SimRun> {
    spec.validate()?;
    let lad = ladder(&spec.handset, spec.actuator);
    let table: Vec<f64> = lad.iter().map(|o| o.power_w).collect();
    let gov_policy = match policy {
        SimPolicy::Off => Policy::Off,
        SimPolicy::Step(c) => Policy::Step(c.clone()),
        SimPolicy::Pid(c) => Policy::Pid(c.clone()),
    };
    let mut schedule = match (&spec.calibrate, policy) {
        (Some(c), SimPolicy::Pid(_)) => Some(GainSchedule::new(
            *c,
            table.clone(),
            spec.model.idle_w,
            plant_model(&spec.model, spec.sensor, spec.target_c),
            TuningGoal::default(),
            spec.target_c,
        )?),
        _ => None,
    };
    let mut gov = Governor::with_level_outputs(gov_policy, table)?;
    let freq_khz: Vec<u32> = spec.handset.opps.iter().map(|o| o.freq_khz).collect();
    let mut act = LadderActuator {
        ladder: &lad,
        level: 0,
        freq_khz: &freq_khz,
    };
    let mut model = HandsetModel::new(spec.handset.clone());
    let top = spec.handset.max_level();
    let steps = (spec.minutes * 60.0 / spec.period_s).round().max(1.0) as usize;
    let mut trace = Vec::with_capacity(steps);
    let (mut dropouts, mut failsafe, mut changes) = (0usize, 0usize, 0usize);
    let (mut vendor_s, mut vendor_lost) = (0.0f64, 0.0f64);
    let mut prev_level = 0usize;
    for k in 0..steps {
        let t = k as f64 * spec.period_s;
        let silent = spec.dropout.is_some_and(|(a, b)| t >= a && t < b);
        let raw = match spec.sensor {
            SimSensor::Skin => model.skin_c(),
            SimSensor::Soc => model.die_c(),
        };
        let mut sensor = Reading((!silent).then(|| (raw * 1000.0).round() / 1000.0));
        if let Some(s) = schedule.as_mut() {
            s.update(t, &mut gov)?;
        }
        let rec = gov.tick(t, &mut sensor, &mut act)?;
        match rec.status {
            StepStatus::SensorDropout => dropouts += 1,
            StepStatus::Failsafe => failsafe += 1,
            _ => {}
        }
        if rec.level != prev_level {
            changes += 1;
            prev_level = rec.level;
        }
        let op = lad[act.level];
        let busy = op.busy * spec.busy_share;
        let out = model.step(
            spec.period_s,
            Activity {
                busy,
                freq_level: op.freq_level,
            },
        );
        // The work of this period: `op.busy` of it, at the share of the capacity it gets.
        if let Some(s) = schedule.as_mut() {
            s.observe(busy * spec.period_s, op.busy * spec.period_s);
        }
        let capped = out.vendor_throttling || out.vendor_cap_level < top;
        if capped {
            vendor_s += spec.period_s;
        }
        vendor_lost +=
            (op.tokens_per_s * spec.busy_share - out.tokens_per_s).max(0.0) * spec.period_s;
        trace.push(TracePoint {
            t_s: out.t_s,
            skin_c: out.skin_c,
            die_c: out.die_c,
            level: rec.level,
            output: rec.output,
            freq_level: out.freq_level,
            vendor_cap_level: out.vendor_cap_level,
            vendor_throttling: capped,
            busy: out.busy,
            power_w: out.power_w,
            tokens_per_s: out.tokens_per_s,
            tokens: out.tokens,
            status: rec.status,
        });
    }
    let summary = summarize(
        spec,
        policy_name(policy),
        &trace,
        Extra {
            vendor_s,
            vendor_lost,
            energy_j: model.energy_j(),
            changes,
            dropouts,
            failsafe,
        },
    );
    Ok(SimRun {
        summary,
        trace,
        calibration: schedule.map(|s| s.events().to_vec()).unwrap_or_default(),
    })
}

struct Extra {
    vendor_s: f64,
    vendor_lost: f64,
    energy_j: f64,
    changes: usize,
    dropouts: usize,
    failsafe: usize,
}

fn summarize(spec: &SimSpec, policy: &'static str, trace: &[TracePoint], x: Extra) -> SimSummary {
    let n = trace.len().max(1) as f64;
    let end = trace.last().map_or(0.0, |p| p.t_s);
    let tokens = trace.last().map_or(0.0, |p| p.tokens);
    let max = |f: fn(&TracePoint) -> f64| trace.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
    let mean = |f: fn(&TracePoint) -> f64| trace.iter().map(f).sum::<f64>() / n;
    let band = spec.settle_band_c;
    let target = spec.target_c;
    // Settled from the sample after the last one outside the band (if the run ends inside).
    let last_out = trace.iter().rposition(|p| (p.skin_c - target).abs() > band);
    let settle_idx = match last_out {
        None => Some(0),
        Some(i) if i + 1 < trace.len() => Some(i + 1),
        Some(_) => None,
    };
    let settling_time_s = settle_idx.map(|i| trace[i].t_s);
    let w0 = end - spec.final_window_s.min(end / 2.0);
    let window: Vec<&TracePoint> = trace.iter().filter(|p| p.t_s >= w0).collect();
    let (lo, hi) = window
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.skin_c), hi.max(p.skin_c))
        });
    let final_error_c = window
        .iter()
        .map(|p| (p.skin_c - target).abs())
        .fold(0.0, f64::max);
    let steady = match (window.first(), window.last()) {
        (Some(a), Some(b)) if b.t_s > a.t_s => (b.tokens - a.tokens) / (b.t_s - a.t_s),
        _ => 0.0,
    };
    let skin_max_c = max(|p| p.skin_c);
    SimSummary {
        policy,
        minutes: spec.minutes,
        tokens,
        mean_tokens_per_s: if end > 0.0 { tokens / end } else { 0.0 },
        steady_tokens_per_s: steady,
        skin_max_c,
        skin_mean_c: mean(|p| p.skin_c),
        die_max_c: max(|p| p.die_c),
        die_mean_c: mean(|p| p.die_c),
        settling_time_s,
        overshoot_c: (skin_max_c - target).max(0.0),
        oscillation_pp_c: if hi >= lo { hi - lo } else { 0.0 },
        final_error_c,
        vendor_throttling_s: x.vendor_s,
        vendor_lost_tokens: x.vendor_lost,
        unthrottled_tokens: spec.handset.base_tokens_per_s * spec.busy_share * end,
        energy_j: x.energy_j,
        level_changes: x.changes,
        sensor_dropouts: x.dropouts,
        failsafe_steps: x.failsafe,
    }
}

/// step_wise hysteresis used by the comparison, °C.
pub const STEP_HYST_C: f64 = 1.0;

/// How close step's maximum skin temperature must come to pid's, °C.
pub const SAME_MAX_TOL_C: f64 = 0.02;

/// off, step (trip tuned so its maximum skin equals pid's) and pid on one handset.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub spec: SimSpec,
    pub pid_config: PidConfig,
    pub step_config: StepWiseConfig,
    /// Bisection steps taken to tune step's trip.
    pub step_tuning_iterations: usize,
    pub sustainable: Sustainable,
    pub off: SimRun,
    pub step: SimRun,
    pub pid: SimRun,
}

/// One acceptance check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub value: f64,
    pub limit: f64,
    pub pass: bool,
}

impl Comparison {
    /// pid tokens / step tokens.
    pub fn pid_over_step(&self) -> f64 {
        self.pid.summary.tokens / self.step.summary.tokens.max(f64::MIN_POSITIVE)
    }

    /// pid's steady throughput over the closed-form sustainable maximum.
    pub fn pid_over_sustainable(&self) -> f64 {
        self.pid.summary.steady_tokens_per_s / self.sustainable.tokens_per_s.max(f64::MIN_POSITIVE)
    }

    /// The acceptance criteria, evaluated on this comparison.
    pub fn checks(&self) -> Vec<Check> {
        let pid = &self.pid.summary;
        let step = &self.step.summary;
        let off = &self.off.summary;
        let check = |name, value: f64, limit: f64, pass: bool| Check {
            name,
            value,
            limit,
            pass,
        };
        let end = self.spec.minutes * 60.0;
        let latest = end - self.spec.final_window_s.min(end / 2.0);
        let settle = pid.settling_time_s.unwrap_or(f64::INFINITY);
        vec![
            check(
                "pid settling time into ±0.5 °C, before the final window (s)",
                settle,
                latest,
                settle <= latest,
            ),
            check(
                "pid largest |skin − target| over the final window (°C)",
                pid.final_error_c,
                self.spec.settle_band_c,
                pid.final_error_c <= self.spec.settle_band_c,
            ),
            check(
                "pid overshoot (°C)",
                pid.overshoot_c,
                1.0,
                pid.overshoot_c <= 1.0,
            ),
            check(
                "pid sustained oscillation, final window peak to peak (°C)",
                pid.oscillation_pp_c,
                0.5,
                pid.oscillation_pp_c <= 0.5,
            ),
            check(
                "step max skin − pid max skin (°C)",
                (step.skin_max_c - pid.skin_max_c).abs(),
                SAME_MAX_TOL_C,
                (step.skin_max_c - pid.skin_max_c).abs() <= SAME_MAX_TOL_C,
            ),
            check(
                "pid tokens / step tokens",
                self.pid_over_step(),
                1.10,
                self.pid_over_step() >= 1.10,
            ),
            check(
                "pid steady tokens/s / sustainable maximum",
                self.pid_over_sustainable(),
                0.90,
                (0.90..=1.02).contains(&self.pid_over_sustainable()),
            ),
            check(
                "off: vendor throttling time (s)",
                off.vendor_throttling_s,
                0.0,
                off.vendor_throttling_s > 0.0,
            ),
            check(
                "off: tokens lost to vendor caps",
                off.vendor_lost_tokens,
                0.0,
                off.vendor_lost_tokens > 0.0,
            ),
        ]
    }
}

/// Runs off, pid and step on `spec`, tuning step's trip by bisection until its maximum skin
/// temperature equals pid's within [`SAME_MAX_TOL_C`] (step's maximum rises monotonically
/// with its trip: it is the trip plus the overshoot of the thermal lag).
pub fn compare(spec: &SimSpec) -> Result<Comparison> {
    spec.validate()?;
    let lad = ladder(&spec.handset, spec.actuator);
    let pid_cfg = pid_config(&spec.model, spec.sensor, spec.target_c, &lad)?;
    let pid = simulate(spec, &SimPolicy::Pid(pid_cfg.clone()))?;
    let off = simulate(spec, &SimPolicy::Off)?;
    let goal = pid.summary.skin_max_c;
    let step_at = |trip_c: f64| -> Result<SimRun> {
        simulate(
            spec,
            &SimPolicy::Step(StepWiseConfig {
                trip_c,
                hyst_c: STEP_HYST_C,
            }),
        )
    };
    let (mut lo, mut hi) = (goal - 8.0, goal + 1.0);
    let mut best: Option<(f64, SimRun)> = None;
    let mut iterations = 0;
    for _ in 0..40 {
        iterations += 1;
        let mid = 0.5 * (lo + hi);
        let run = step_at(mid)?;
        let m = run.summary.skin_max_c;
        let err = (m - goal).abs();
        let better = best
            .as_ref()
            .is_none_or(|(_, b)| err < (b.summary.skin_max_c - goal).abs());
        if better {
            best = Some((mid, run));
        }
        if err <= SAME_MAX_TOL_C / 2.0 {
            break;
        }
        if m < goal {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let Some((trip_c, step)) = best else {
        return Err(GovSimError::Config {
            field: "step trip",
            value: goal.to_string(),
            reason: "bisection ran no step".into(),
        });
    };
    Ok(Comparison {
        spec: spec.clone(),
        pid_config: pid_cfg,
        step_config: StepWiseConfig {
            trip_c,
            hyst_c: STEP_HYST_C,
        },
        step_tuning_iterations: iterations,
        sustainable: sustainable(&spec.handset, spec.target_c),
        off,
        step,
        pid,
    })
}

/// The JSON report of `pocketperf governor sim`.
#[derive(Debug, Serialize)]
pub struct SimReport<'a> {
    pub header: crate::meta::OutputHeader,
    pub device: String,
    pub profile: &'a HandsetProfile,
    pub governor_model: &'a HandsetProfile,
    pub target_c: f64,
    pub ambient_c: f64,
    pub minutes: f64,
    pub period_s: f64,
    pub actuator: SimActuator,
    pub sensor: SimSensor,
    pub ladder: Vec<OperatingPoint>,
    pub time_constants_s: (f64, f64),
    pub sustainable: Sustainable,
    pub pid_config: &'a PidConfig,
    pub step_config: &'a StepWiseConfig,
    pub step_tuning_iterations: usize,
    /// The governor the command was asked for.
    pub selected: &'a str,
    pub results: Results<'a>,
    pub pid_over_step: f64,
    pub pid_over_sustainable: f64,
    pub checks: Vec<Check>,
}

/// Per-governor summaries.
#[derive(Debug, Serialize)]
pub struct Results<'a> {
    pub off: &'a SimSummary,
    pub step: &'a SimSummary,
    pub pid: &'a SimSummary,
}

impl Comparison {
    /// The report, with provenance.
    pub fn report<'a>(&'a self, selected: &'a str, settings: serde_json::Value) -> SimReport<'a> {
        let mut header = crate::meta::OutputHeader::new(
            SCHEMA_VERSION,
            Path::new("none (simulated workload)"),
            "n/a",
            settings,
        );
        let device = format!("sim:{}", self.spec.handset.name);
        header.device.id = device.clone();
        SimReport {
            header,
            device,
            profile: &self.spec.handset,
            governor_model: &self.spec.model,
            target_c: self.spec.target_c,
            ambient_c: self.spec.handset.ambient_c,
            minutes: self.spec.minutes,
            period_s: self.spec.period_s,
            actuator: self.spec.actuator,
            sensor: self.spec.sensor,
            ladder: ladder(&self.spec.handset, self.spec.actuator),
            time_constants_s: time_constants(&self.spec.handset),
            sustainable: self.sustainable,
            pid_config: &self.pid_config,
            step_config: &self.step_config,
            step_tuning_iterations: self.step_tuning_iterations,
            selected,
            results: Results {
                off: &self.off.summary,
                step: &self.step.summary,
                pid: &self.pid.summary,
            },
            pid_over_step: self.pid_over_step(),
            pid_over_sustainable: self.pid_over_sustainable(),
            checks: self.checks(),
        }
    }

    fn runs(&self) -> [(&'static str, &SimRun); 3] {
        [("off", &self.off), ("step", &self.step), ("pid", &self.pid)]
    }

    /// Writes `governor_sim.json`, `governor_trace.csv`, `governor_skin.svg`,
    /// `governor_level.svg`, `governor_speed.svg` and `governor_sim.html` into `dir`
    /// (created). Returns the paths.
    pub fn write(&self, dir: &Path, report: &SimReport<'_>) -> Result<Vec<PathBuf>> {
        let wr = |path: &Path| {
            let path = path.to_path_buf();
            move |source| GovSimError::Write { path, source }
        };
        std::fs::create_dir_all(dir).map_err(wr(dir))?;
        // Each file through a temporary beside it, renamed into place: a symlink at a
        // destination is replaced, never written through.
        let put = |path: &Path, bytes: &[u8]| {
            pocketperf_reports::files::replace_file(path, bytes)
                .map_err(|(path, source)| GovSimError::Write { path, source })
        };
        let mut written = Vec::new();
        let json_path = dir.join("governor_sim.json");
        let json = serde_json::to_string_pretty(report)?;
        put(&json_path, (json + "\n").as_bytes())?;
        written.push(json_path);

        let csv_path = dir.join("governor_trace.csv");
        let mut f: Vec<u8> = Vec::new();
        let h = &report.header;
        let mut text = String::new();
        text += &format!(
            "# schema_version={}\n# tool={} {}\n# git_commit={}\n# device={}\n# model_name={}\n# model_sha256={}\n# settings={}\n# timestamp_utc={}\n",
            h.schema_version,
            h.tool,
            h.tool_version,
            h.git_commit,
            report.device,
            h.model_name,
            h.model_sha256,
            h.settings,
            h.timestamp_utc
        );
        f.write_all(text.as_bytes()).map_err(wr(&csv_path))?;
        let mut w = csv::Writer::from_writer(f);
        let bad = |e: csv::Error| GovSimError::Write {
            path: csv_path.clone(),
            source: std::io::Error::other(e.to_string()),
        };
        w.write_record([
            "governor",
            "t_s",
            "skin_c",
            "die_c",
            "level",
            "output",
            "freq_level",
            "vendor_cap_level",
            "vendor_throttling",
            "busy",
            "power_w",
            "tokens_per_s",
            "tokens",
            "status",
        ])
        .map_err(bad)?;
        for (name, run) in self.runs() {
            for p in &run.trace {
                w.write_record([
                    name.to_string(),
                    format!("{:.1}", p.t_s),
                    format!("{:.4}", p.skin_c),
                    format!("{:.4}", p.die_c),
                    p.level.to_string(),
                    format!("{:.4}", p.output),
                    p.freq_level.to_string(),
                    p.vendor_cap_level.to_string(),
                    u8::from(p.vendor_throttling).to_string(),
                    format!("{:.3}", p.busy),
                    format!("{:.4}", p.power_w),
                    format!("{:.4}", p.tokens_per_s),
                    format!("{:.2}", p.tokens),
                    status_name(p.status).to_string(),
                ])
                .map_err(bad)?;
            }
        }
        let f = w
            .into_inner()
            .map_err(|e| bad(csv::Error::from(std::io::Error::other(e.to_string()))))?;
        put(&csv_path, &f)?;
        written.push(csv_path);

        let plots = self.plots()?;
        for (name, svg) in [
            ("governor_skin.svg", &plots.skin),
            ("governor_level.svg", &plots.level),
            ("governor_speed.svg", &plots.speed),
        ] {
            let path = dir.join(name);
            put(&path, svg.as_bytes())?;
            written.push(path);
        }
        let html_path = dir.join("governor_sim.html");
        put(&html_path, self.html(report, &plots).as_bytes())?;
        written.push(html_path);
        Ok(written)
    }

    /// SVG plots over time of the skin temperature, the output level and the decode speed,
    /// for off / step / pid.
    pub fn plots(&self) -> Result<Plots> {
        use pocketperf_reports::plots::{Series, line_chart};
        let minutes = |t: f64| t / 60.0;
        let mut temps: Vec<Series> = self
            .runs()
            .iter()
            .map(|(name, run)| Series {
                name: format!("skin, {name}"),
                points: run
                    .trace
                    .iter()
                    .map(|p| (minutes(p.t_s), p.skin_c))
                    .collect(),
            })
            .collect();
        let end = self.pid.trace.last().map_or(0.0, |p| minutes(p.t_s));
        temps.push(Series {
            name: "target".into(),
            points: vec![(0.0, self.spec.target_c), (end, self.spec.target_c)],
        });
        let err = |e: pocketperf_reports::ReportError| GovSimError::Plot(e.to_string());
        let skin = line_chart(
            &format!(
                "Skin temperature, sim:{} (target {:.1} °C)",
                self.spec.handset.name, self.spec.target_c
            ),
            "time (min)",
            "skin (°C)",
            &temps,
        )
        .map_err(err)?
        .ok_or_else(|| GovSimError::Plot("no points to plot".into()))?;
        let top = self.spec.handset.max_level() as f64;
        let levels = vec![
            Series {
                name: "off: vendor cap (levels below the top OPP)".into(),
                points: self
                    .off
                    .trace
                    .iter()
                    .map(|p| (minutes(p.t_s), top - p.vendor_cap_level as f64))
                    .collect(),
            },
            Series {
                name: "step: governor level".into(),
                points: self
                    .step
                    .trace
                    .iter()
                    .map(|p| (minutes(p.t_s), p.level as f64))
                    .collect(),
            },
            Series {
                name: "pid: governor level".into(),
                points: self
                    .pid
                    .trace
                    .iter()
                    .map(|p| (minutes(p.t_s), p.level as f64))
                    .collect(),
            },
        ];
        let level = line_chart(
            "Output level (0 = unthrottled; one level = one OPP, then duty steps)",
            "time (min)",
            "throttling level",
            &levels,
        )
        .map_err(err)?
        .ok_or_else(|| GovSimError::Plot("no points to plot".into()))?;
        let speed: Vec<Series> = self
            .runs()
            .iter()
            .map(|(name, run)| Series {
                name: (*name).into(),
                points: run
                    .trace
                    .iter()
                    .map(|p| (minutes(p.t_s), p.tokens_per_s))
                    .collect(),
            })
            .collect();
        let speed = line_chart("Decode speed", "time (min)", "tokens/s", &speed)
            .map_err(err)?
            .ok_or_else(|| GovSimError::Plot("no points to plot".into()))?;
        Ok(Plots { skin, level, speed })
    }

    fn html(&self, report: &SimReport<'_>, plots: &Plots) -> String {
        let esc = escape_html;
        let mut rows = String::new();
        for (name, run) in self.runs() {
            let s = &run.summary;
            rows += &format!(
                "<tr><td>{name}</td><td>{:.0}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.0}</td><td>{:.0}</td></tr>\n",
                s.tokens,
                s.steady_tokens_per_s,
                s.skin_max_c,
                s.die_max_c,
                s.settling_time_s
                    .map_or("—".into(), |t| format!("{t:.0} s")),
                s.overshoot_c,
                s.oscillation_pp_c,
                s.vendor_throttling_s,
                s.vendor_lost_tokens,
            );
        }
        let checks: String = report
            .checks
            .iter()
            .map(|c| {
                format!(
                    "<tr><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td></tr>\n",
                    esc(c.name),
                    c.value,
                    c.limit,
                    if c.pass { "pass" } else { "FAIL" }
                )
            })
            .collect();
        let h = &report.header;
        let mut page = page_start_styled(&format!("governor sim {}", report.device), STYLE);
        page += &format!(
            "<h1>Thermal governor in closed loop: {dev}</h1>\n\
<p>Skin target {target:.1} °C, ambient {amb:.1} °C, {min:.0} simulated minutes, governor period {per:.1} s, actuator {act:?}. \
Sustainable maximum (closed form): {sus:.2} tokens/s at {pw:.2} W. step trip tuned to {trip:.2} °C (hysteresis {hy:.1} °C) so its maximum skin equals pid's.</p>\n\
<table><tr><th>governor</th><th>tokens</th><th>steady tok/s</th><th>max skin °C</th><th>max die °C</th><th>settling</th><th>overshoot °C</th><th>final p-p °C</th><th>vendor throttled s</th><th>tokens lost to vendor</th></tr>\n{rows}</table>\n\
<p>pid / step tokens: {ps:.3}; pid steady / sustainable: {pss:.3}</p>\n\
<h2>Checks</h2><table><tr><th>check</th><th>value</th><th>limit</th><th></th></tr>\n{checks}</table>\n",
            dev = esc(&report.device),
            target = self.spec.target_c,
            amb = self.spec.handset.ambient_c,
            min = self.spec.minutes,
            per = self.spec.period_s,
            act = self.spec.actuator,
            sus = self.sustainable.tokens_per_s,
            pw = self.sustainable.power_w,
            trip = self.step_config.trip_c,
            hy = self.step_config.hyst_c,
            ps = self.pid_over_step(),
            pss = self.pid_over_sustainable(),
        );
        page += &figure("Temperature", Some(plots.skin.clone()));
        page += &figure("Output level", Some(plots.level.clone()));
        page += &figure("Decode speed", Some(plots.speed.clone()));
        page += &format!(
            "<p><small>{} {}, commit {}, {}</small></p>\n",
            esc(h.tool),
            esc(h.tool_version),
            esc(h.git_commit),
            esc(&h.timestamp_utc),
        );
        page += page_end();
        page
    }
}

/// The page's own style (the tables are numeric, right-aligned).
const STYLE: &str = "body{font-family:sans-serif;max-width:60em;margin:auto}table{border-collapse:collapse}\
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}";

/// The SVG plots of a comparison.
#[derive(Debug, Clone)]
pub struct Plots {
    pub skin: String,
    pub level: String,
    pub speed: String,
}

/// Schema version of `governor_sim.json` and `governor_trace.csv`.
pub const SCHEMA_VERSION: u32 = 1;

/// The snake_case name of a status (as in JSON).
pub fn status_name(s: StepStatus) -> &'static str {
    match s {
        StepStatus::Ok => "ok",
        StepStatus::Started => "started",
        StepStatus::Resumed => "resumed",
        StepStatus::Saturated => "saturated",
        StepStatus::SensorDropout => "sensor_dropout",
        StepStatus::Failsafe => "failsafe",
        StepStatus::ClockStalled => "clock_stalled",
        StepStatus::Off => "off",
    }
}
