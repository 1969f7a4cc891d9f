//! The step_wise baseline: Linux's `step_wise` governor (one cooling state per period
//! above the trip, one back below trip − hysteresis).

use super::*;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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
