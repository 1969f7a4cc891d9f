//! The gate's rules: what each check tests and with which thresholds, read from TOML (e.g.
//! `ci/gate.toml`, whose values equal the defaults here) and validated (probabilities in
//! range, known `allow_diff` field names).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ReportError, Result};

/// Rules for per-query timing checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PerformanceRules {
    /// Significance level of the Mann–Whitney test.
    pub alpha: f64,
    /// Relative change of the median below which nothing is called (0.05 = 5%).
    pub noise_threshold: f64,
    /// Fewest samples per run for a distribution test; fewer skips the check.
    pub min_samples: usize,
    /// Check end-to-end query latency.
    pub latency: bool,
    /// Check time to first token.
    pub ttft: bool,
    /// Check time per output token.
    pub tpot: bool,
    /// Check per-query tokens/s.
    pub throughput: bool,
    /// Fail when the candidate run is INVALID under the scenario rules.
    pub require_valid: bool,
}

impl Default for PerformanceRules {
    fn default() -> Self {
        Self {
            alpha: 0.01,
            noise_threshold: 0.05,
            min_samples: 8,
            latency: true,
            ttft: true,
            tpot: true,
            throughput: true,
            require_valid: true,
        }
    }
}

/// Rules for energy per dialogue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnergyRules {
    /// Run the check.
    pub enabled: bool,
    /// Significance level.
    pub alpha: f64,
    /// Relative change of the median net energy below which nothing is called.
    pub noise_threshold: f64,
    /// Fewest dialogues per run.
    pub min_samples: usize,
}

impl Default for EnergyRules {
    fn default() -> Self {
        Self {
            enabled: true,
            alpha: 0.01,
            noise_threshold: 0.05,
            min_samples: 5,
        }
    }
}

/// Rules for accuracy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccuracyRules {
    /// Run the check.
    pub enabled: bool,
    /// Largest tolerated drop in accuracy (absolute, 0.01 = one point).
    pub max_drop: f64,
    /// Significance level of McNemar / confidence of the Wilson intervals (`1 - alpha`).
    pub alpha: f64,
}

impl Default for AccuracyRules {
    fn default() -> Self {
        Self {
            enabled: true,
            max_drop: 0.01,
            alpha: 0.05,
        }
    }
}

/// Rules for robustness counters in the candidate's `robustness` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RobustnessRules {
    /// Most SUT crashes tolerated.
    pub max_crashes: u64,
    /// Most output-drift events (greedy outputs that changed) tolerated.
    pub max_drift: u64,
}

/// Which differences between the two runs' workload and system the gate accepts (see
/// [`crate::comparability`] for the field names). Empty: the runs must agree in all of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ComparabilityRules {
    /// Field names whose differences are accepted (`threads`, `device.os`, `cli.preset` …).
    pub allow_diff: Vec<String>,
}

/// Rules for replicated runs (two or more runs on each side; see [`super::replicates`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicateRules {
    /// Significance level of the run-level t-test (two-sided). The minimum effect is each
    /// section's `noise_threshold`.
    pub alpha: f64,
}

impl Default for ReplicateRules {
    fn default() -> Self {
        Self { alpha: 0.05 }
    }
}

/// All gate rules. Every field has a default, so an empty file is a valid rule set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GateRules {
    /// Differences between the runs' workload and system that are accepted.
    pub comparability: ComparabilityRules,
    /// Timing checks.
    pub performance: PerformanceRules,
    /// Energy check.
    pub energy: EnergyRules,
    /// Accuracy check.
    pub accuracy: AccuracyRules,
    /// Robustness checks.
    pub robustness: RobustnessRules,
    /// Run-level statistics of replicated runs.
    pub replicates: ReplicateRules,
}

impl GateRules {
    /// Parses rules from TOML text; `path` names the source in errors.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Self> {
        let rules: GateRules = toml::from_str(text).map_err(|source| ReportError::Toml {
            path: path.into(),
            source,
        })?;
        rules.validate()?;
        Ok(rules)
    }

    /// Reads and validates a rules file.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|e| ReportError::io("reading", path, e))?;
        Self::from_toml_str(&text, path)
    }

    /// Checks that every probability lies in its range.
    pub fn validate(&self) -> Result<()> {
        let open01 = |rule: &str, v: f64| -> Result<()> {
            if v > 0.0 && v < 1.0 {
                Ok(())
            } else {
                Err(ReportError::Rule {
                    rule: rule.into(),
                    value: v.to_string(),
                    problem: "must lie strictly between 0 and 1".into(),
                })
            }
        };
        let nonneg = |rule: &str, v: f64| -> Result<()> {
            if v >= 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(ReportError::Rule {
                    rule: rule.into(),
                    value: v.to_string(),
                    problem: "must be a finite number ≥ 0".into(),
                })
            }
        };
        if let Some(n) = crate::comparability::unknown_name(&self.comparability.allow_diff) {
            return Err(ReportError::Rule {
                rule: "comparability.allow_diff".into(),
                value: format!("{n:?}"),
                problem: format!(
                    "not a field name (one of {}, or settings.KEY, cli.KEY, device.id|name|cpu|os)",
                    crate::comparability::FIELD_NAMES.join(", ")
                ),
            });
        }
        open01("performance.alpha", self.performance.alpha)?;
        nonneg(
            "performance.noise_threshold",
            self.performance.noise_threshold,
        )?;
        open01("energy.alpha", self.energy.alpha)?;
        nonneg("energy.noise_threshold", self.energy.noise_threshold)?;
        open01("accuracy.alpha", self.accuracy.alpha)?;
        open01("replicates.alpha", self.replicates.alpha)?;
        nonneg("accuracy.max_drop", self.accuracy.max_drop)?;
        if self.accuracy.max_drop >= 1.0 {
            return Err(ReportError::Rule {
                rule: "accuracy.max_drop".into(),
                value: self.accuracy.max_drop.to_string(),
                problem: "must be below 1".into(),
            });
        }
        Ok(())
    }
}
