//! Gain scheduling on the measured busy share: a power level table says what each level draws
//! when the workload keeps its CPU capacity fully busy; when the workload gets only a share
//! `s` of that capacity (a loaded host, a slower core), each level draws `floor + s·(table −
//! floor)` (`floor` = the idle power, which does not scale), and a PID tuned on the model's
//! table sees a plant `s` times weaker than it was tuned for. [`GainSchedule`] measures `s`
//! (CPU time over wall time of the unthrottled work, through a slow filter), rescales the
//! table by it and re-tunes the PID on the rescaled table ([`PidConfig::tuned`]) whenever the
//! estimate moves by more than a tolerance from the share in force; the PID keeps the budget
//! it asks for, and the level moves to the one that delivers it on the rescaled table
//! ([`Pid::retune`]). Every
//! re-tuning is recorded ([`CalibrationEvent`]). `docs/GOVERNOR.md`, "Calibration to the
//! measured busy share".

use serde::{Deserialize, Serialize};

use super::*;
use crate::error::{Error, Result};

/// `floor + share·(t − floor)` for each output `t` of `table`: what a power table delivers
/// when the workload gets `share` (in `(0, 1]`) of the capacity the table assumes.
pub fn scale_table(table: &[f64], floor: f64, share: f64) -> Result<Vec<f64>> {
    validate_table(table)?;
    if !(share.is_finite() && share > 0.0 && share <= 1.0) {
        return Err(Error::InvalidArgument {
            what: "busy share".into(),
            reason: format!("must be in (0, 1] (got {share})"),
        });
    }
    if !(floor.is_finite() && floor < table[table.len() - 1]) {
        return Err(Error::InvalidArgument {
            what: "table floor".into(),
            reason: format!(
                "must be finite and below the table's lowest output {} (got {floor})",
                table[table.len() - 1]
            ),
        });
    }
    Ok(table.iter().map(|t| floor + share * (t - floor)).collect())
}

/// How the busy share is measured and when the PID is re-tuned.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScheduleConfig {
    /// Wall time of measured work before the first estimate, s.
    pub warmup_s: f64,
    /// Time constant of the slow filter after the warm-up, s of measured work.
    pub tau_s: f64,
    /// Re-tune when the estimate differs from the share in force by more than this fraction.
    pub tolerance: f64,
    /// The share is clamped to `[min_share, 1]`.
    pub min_share: f64,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            warmup_s: 2.0,
            tau_s: 10.0,
            tolerance: 0.05,
            min_share: 0.05,
        }
    }
}

/// One re-tuning (or the first estimate, when it left the model's table in force).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationEvent {
    /// Governor time of the event, s.
    pub t_s: f64,
    /// Measured work time behind the estimate, s.
    pub measured_s: f64,
    /// The estimate of the busy share.
    pub measured_share: f64,
    /// The share the table is scaled by from now on (the estimate clamped to
    /// `[min_share, 1]`, or the previous one when the estimate is within the tolerance).
    pub scale: f64,
    /// Whether the PID was re-tuned.
    pub retuned: bool,
    /// The level table in force after the event.
    pub level_outputs: Vec<f64>,
    /// The proportional gain above the target after the event.
    pub k_po: f64,
}

/// Measures the busy share of the work and re-tunes a PID on the model's table scaled by it.
#[derive(Debug, Clone)]
pub struct GainSchedule {
    cfg: ScheduleConfig,
    model_table: Vec<f64>,
    floor: f64,
    plant: PlantModel,
    goal: TuningGoal,
    target_c: f64,
    measured_s: f64,
    cpu_s: f64,
    estimate: Option<f64>,
    scale: f64,
    events: Vec<CalibrationEvent>,
}

impl GainSchedule {
    /// A schedule over `model_table` (the outputs at full busy share, strictly decreasing;
    /// `floor` below its lowest output) for a PID at `target_c` tuned by
    /// [`PidConfig::tuned`] with `plant` and `goal`. The share in force starts at 1.
    pub fn new(
        cfg: ScheduleConfig,
        model_table: Vec<f64>,
        floor: f64,
        plant: PlantModel,
        goal: TuningGoal,
        target_c: f64,
    ) -> Result<Self> {
        scale_table(&model_table, floor, 1.0)?;
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !(ok(cfg.warmup_s)
            && ok(cfg.tau_s)
            && cfg.tolerance.is_finite()
            && cfg.tolerance >= 0.0
            && ok(cfg.min_share)
            && cfg.min_share <= 1.0)
        {
            return Err(Error::InvalidArgument {
                what: "schedule".into(),
                reason: format!(
                    "warm-up and filter time must be > 0 s, tolerance ≥ 0, minimum share in (0, 1] (got {cfg:?})"
                ),
            });
        }
        Ok(Self {
            cfg,
            model_table,
            floor,
            plant,
            goal,
            target_c,
            measured_s: 0.0,
            cpu_s: 0.0,
            estimate: None,
            scale: 1.0,
            events: Vec::new(),
        })
    }

    /// The PID configuration tuned on the model's table scaled by `share`, and that table.
    pub fn tuned_for(&self, share: f64) -> Result<(PidConfig, Vec<f64>)> {
        let table = scale_table(&self.model_table, self.floor, share)?;
        let cfg = PidConfig::tuned(self.target_c, &self.plant, &table, &self.goal)?;
        Ok((cfg, table))
    }

    /// Adds `wall_s` seconds of work during which the workload used `cpu_s` seconds of its
    /// capacity (CPU time divided by the number of threads it may use). Until the warm-up is
    /// complete the estimate is the ratio of the sums; after it, each piece moves the
    /// estimate toward its own ratio by `wall_s / (tau_s + wall_s)`.
    pub fn observe(&mut self, cpu_s: f64, wall_s: f64) {
        if !(cpu_s.is_finite() && wall_s.is_finite() && cpu_s >= 0.0 && wall_s > 0.0) {
            return;
        }
        self.measured_s += wall_s;
        match self.estimate {
            None => {
                self.cpu_s += cpu_s;
                if self.measured_s >= self.cfg.warmup_s {
                    self.estimate = Some(self.cpu_s / self.measured_s);
                }
            }
            Some(e) => {
                let a = wall_s / (self.cfg.tau_s + wall_s);
                self.estimate = Some(e + a * (cpu_s / wall_s - e));
            }
        }
    }

    /// Work time measured so far, s.
    pub fn measured_s(&self) -> f64 {
        self.measured_s
    }

    /// The current estimate of the busy share (unclamped), once warm.
    pub fn estimate(&self) -> Option<f64> {
        self.estimate
    }

    /// The share the table is scaled by now (1 until a re-tuning).
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Every event so far.
    pub fn events(&self) -> &[CalibrationEvent] {
        &self.events
    }

    /// The configuration.
    pub fn config(&self) -> &ScheduleConfig {
        &self.cfg
    }

    /// The model's table (full busy share).
    pub fn model_table(&self) -> &[f64] {
        &self.model_table
    }

    /// At a governor step at `t_s`: records the first estimate, and re-tunes `gov` (a PID
    /// governor over the same number of levels) when the estimate, clamped to
    /// `[min_share, 1]`, differs from the share in force by more than the tolerance. Returns
    /// the event, if any.
    pub fn update(&mut self, t_s: f64, gov: &mut Governor) -> Result<Option<CalibrationEvent>> {
        let Some(est) = self.estimate else {
            return Ok(None);
        };
        let share = est.clamp(self.cfg.min_share, 1.0);
        let first = self.events.is_empty();
        let retune = (share / self.scale - 1.0).abs() > self.cfg.tolerance;
        if !(first || retune) {
            return Ok(None);
        }
        let scale = if retune { share } else { self.scale };
        let (cfg, table) = self.tuned_for(scale)?;
        let k_po = cfg.k_po;
        if retune {
            gov.retune(cfg, table.clone())?;
            self.scale = scale;
        }
        let ev = CalibrationEvent {
            t_s,
            measured_s: self.measured_s,
            measured_share: est,
            scale,
            retuned: retune,
            level_outputs: table,
            k_po,
        };
        self.events.push(ev.clone());
        Ok(Some(ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plant() -> PlantModel {
        PlantModel {
            sustainable_output: 2.0,
            tau_slow_s: 700.0,
            tau_fast_s: 17.0,
        }
    }

    fn schedule() -> GainSchedule {
        GainSchedule::new(
            ScheduleConfig::default(),
            vec![5.0, 4.0, 3.0, 2.0],
            1.0,
            plant(),
            TuningGoal::default(),
            40.0,
        )
        .unwrap()
    }

    #[test]
    fn scaling_keeps_the_floor_and_scales_what_is_above_it() {
        let t = scale_table(&[5.0, 3.0, 2.0], 1.0, 0.25).unwrap();
        assert_eq!(t, vec![2.0, 1.5, 1.25]);
        assert!(scale_table(&[5.0, 3.0], 1.0, 0.0).is_err());
        assert!(scale_table(&[5.0, 3.0], 1.0, 1.5).is_err());
        assert!(scale_table(&[5.0, 3.0], 3.0, 0.5).is_err());
    }

    #[test]
    fn the_warm_up_estimate_is_the_ratio_of_the_sums_then_a_slow_filter() {
        let mut s = schedule();
        s.observe(0.3, 1.0);
        assert_eq!(s.estimate(), None);
        s.observe(0.5, 1.0);
        assert!((s.estimate().unwrap() - 0.4).abs() < 1e-12);
        // One piece of 5 s at share 0.9 moves it by 5/15 of the way.
        s.observe(4.5, 5.0);
        assert!((s.estimate().unwrap() - (0.4 + 0.5 / 3.0)).abs() < 1e-12);
        // Invalid pieces change nothing.
        s.observe(f64::NAN, 1.0);
        s.observe(1.0, 0.0);
        assert!((s.estimate().unwrap() - (0.4 + 0.5 / 3.0)).abs() < 1e-12);
    }

    #[test]
    fn a_share_of_one_records_the_model_table_and_leaves_the_pid_alone() {
        let mut s = schedule();
        let (cfg, table) = s.tuned_for(1.0).unwrap();
        let mut gov = Governor::with_level_outputs(Policy::Pid(cfg.clone()), table).unwrap();
        s.observe(2.0, 2.0);
        let ev = s.update(3.0, &mut gov).unwrap().unwrap();
        assert!(!ev.retuned);
        assert_eq!(ev.scale, 1.0);
        assert_eq!(ev.level_outputs, vec![5.0, 4.0, 3.0, 2.0]);
        assert_eq!(gov.pid().unwrap().config(), &cfg);
        // Nothing more to record while the share stays.
        s.observe(1.0, 1.0);
        assert_eq!(s.update(4.0, &mut gov).unwrap(), None);
    }

    #[test]
    fn a_lower_share_retunes_the_pid_on_the_scaled_table() {
        let mut s = schedule();
        let (cfg, table) = s.tuned_for(1.0).unwrap();
        let mut gov = Governor::with_level_outputs(Policy::Pid(cfg.clone()), table).unwrap();
        s.observe(1.0, 2.0);
        let ev = s.update(3.0, &mut gov).unwrap().unwrap();
        assert!(ev.retuned);
        assert_eq!(ev.scale, 0.5);
        assert_eq!(ev.level_outputs, vec![3.0, 2.5, 2.0, 1.5]);
        let pid = gov.pid().unwrap();
        assert_eq!(pid.level_outputs(), &[3.0, 2.5, 2.0, 1.5]);
        // The gap bracketing the sustainable 2.0 W is half as wide: half the gain.
        assert!((pid.config().k_po - cfg.k_po / 2.0).abs() < 1e-12);
        assert_eq!(pid.config().sustainable_output, 2.0);
        // Unthrottled, it stays unthrottled: the budget is clamped to the new range.
        assert_eq!((pid.level(), pid.output()), (0, 3.0));
        // A share below the minimum is clamped.
        let mut low = schedule();
        low.observe(0.02, 2.0);
        assert_eq!(low.update(1.0, &mut gov).unwrap().unwrap().scale, 0.05);
    }

    #[test]
    fn re_tuning_keeps_the_budget_and_moves_to_the_level_that_delivers_it() {
        let s = schedule();
        let (cfg, table) = s.tuned_for(1.0).unwrap();
        let mut pid = Pid::with_level_outputs(cfg.clone(), table.clone()).unwrap();
        pid.set_current_level(2);
        assert_eq!(pid.output(), 3.0);
        let (half, scaled) = s.tuned_for(0.5).unwrap();
        pid.retune(half.clone(), scaled).unwrap();
        // 3 W is level 0 on [3, 2.5, 2, 1.5].
        assert_eq!((pid.level(), pid.output()), (0, 3.0));
        assert_eq!(pid.config(), &half);
        // Scaled by 0.625: [3.5, 2.875, 2.25, 1.625]; 3 W lies at level 0.8, 1.2 levels from
        // level 2 (beyond the 0.7 of hysteresis): the nearest level, 1.
        let mut p2 = Pid::with_level_outputs(cfg, table).unwrap();
        p2.set_current_level(2);
        let (c, t) = s.tuned_for(0.625).unwrap();
        p2.retune(c, t).unwrap();
        assert_eq!(p2.level(), 1);
        assert!(p2.retune(half, vec![3.0, 2.0]).is_err());
    }
}
