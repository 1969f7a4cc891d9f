//! The farm over nights: which earlier night a device's step is gated against, and the slow
//! drift that no night-to-night gate sees.
//!
//! - **Baseline by rule**: the latest earlier night in which this device ran this step and it
//!   passed (the step completed VALID and its own gate did not fail), or a night the suite
//!   pins (`[gate] baseline = "2026-11-30T020000Z"`). A failed night is never a baseline, so
//!   one bad night cannot make the next one look good.
//! - **Drift against a rolling window**: each timing metric's median in this night against the
//!   median of the per-night medians of the last `drift_window` passing nights (7 by default).
//!   A change beyond `drift_threshold` (5%) in the bad direction is a regression even when
//!   each night moved less than the gate's noise threshold from the one before: five nights
//!   losing 4% each are 6% past the window's median on the third night.

use std::path::Path;

use pocketperf_reports::schema::{self, ResultFile};
use pocketperf_reports::stats::{Better, median};
use serde::Serialize;

use super::FARM_FILE;

/// How the baseline night is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaselineRule {
    /// The latest earlier night in which the device's step passed.
    LatestPassing,
    /// This night (a dated directory name in the results root).
    Pinned(String),
}

/// The suite's rules over nights (`[gate]` in the suite file).
#[derive(Debug, Clone, PartialEq)]
pub struct NightRules {
    /// Baseline choice.
    pub baseline: BaselineRule,
    /// Passing nights in the rolling window.
    pub drift_window: usize,
    /// Largest tolerated change against the window's median (relative).
    pub drift_threshold: f64,
}

impl Default for NightRules {
    fn default() -> Self {
        Self {
            baseline: BaselineRule::LatestPassing,
            drift_window: 7,
            drift_threshold: 0.05,
        }
    }
}

/// Whether `device` ran `step` in night `night` and it passed: the night wrote `farm.json`
/// and the step's `result.json`, the step completed `ok` (exit 0) and its gate, if any, was
/// `pass` or `skipped` (a first night has nothing to be gated against).
fn passed(out: &Path, night: &str, device: &str, step: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(out.join(night).join(FARM_FILE)) else {
        return false;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    let step_ok = v["devices"].as_array().into_iter().flatten().any(|d| {
        d["name"] == device
            && d["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["name"] == step && s["status"] == "ok")
    });
    let gate_ok = v["gates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["device"] == device && g["step"] == step)
        .all(|g| g["status"] == "pass" || g["status"] == "skipped");
    step_ok
        && gate_ok
        && out
            .join(night)
            .join(device)
            .join(step)
            .join(schema::RESULT_FILE)
            .is_file()
}

/// Earlier nights than `current` (by name) in which `device`'s `step` passed, newest first.
pub fn passing_nights(out: &Path, current: &str, device: &str, step: &str) -> Vec<String> {
    let mut nights: Vec<String> = std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.as_str() < current && passed(out, n, device, step))
        .collect();
    nights.sort();
    nights.reverse();
    nights
}

/// The baseline night under `rule`, or why there is none.
pub fn baseline_night(
    rule: &BaselineRule,
    out: &Path,
    passing: &[String],
    device: &str,
    step: &str,
) -> Result<String, String> {
    match rule {
        BaselineRule::LatestPassing => passing
            .first()
            .cloned()
            .ok_or_else(|| "no earlier night in which this device's step passed".into()),
        BaselineRule::Pinned(n) => {
            let dir = out.join(n).join(device).join(step);
            if dir.join(schema::RESULT_FILE).is_file() {
                Ok(n.clone())
            } else {
                Err(format!(
                    "the pinned baseline night {n} has no result for this device and step ({})",
                    dir.display()
                ))
            }
        }
    }
}

/// One metric against the rolling window.
#[derive(Debug, Clone, Serialize)]
pub struct DriftCheck {
    /// `performance.tpot_ms`, …
    pub metric: String,
    /// `pass`, `regression` or `skipped`.
    pub status: String,
    /// Nights in the window, newest first.
    pub nights: Vec<String>,
    /// Median of the nights' medians.
    pub window_median: Option<f64>,
    /// This night's median.
    pub candidate: Option<f64>,
    /// `candidate / window_median - 1`.
    pub change: Option<f64>,
    /// One line.
    pub detail: String,
}

type Getter = fn(&schema::Performance) -> Vec<f64>;

/// The metrics judged for drift, with the direction that is better.
fn metrics() -> [(&'static str, Better, Getter); 4] {
    [
        ("performance.latency_ms", Better::Lower, |p| {
            p.per_query.iter().map(|q| q.latency_ms).collect()
        }),
        ("performance.ttft_ms", Better::Lower, |p| {
            p.per_query.iter().filter_map(|q| q.ttft_ms).collect()
        }),
        ("performance.tpot_ms", Better::Lower, |p| {
            p.per_query.iter().filter_map(|q| q.tpot_ms).collect()
        }),
        ("performance.tokens_per_s", Better::Higher, |p| {
            pocketperf_reports::render::per_query_tokens_per_s(p)
        }),
    ]
}

/// This night's `candidate` against the window: the first `rules.drift_window` of `passing`
/// (newest first). Needs two nights with the metric; fewer is `skipped`, said per metric.
pub fn drift(
    out: &Path,
    passing: &[String],
    device: &str,
    step: &str,
    candidate: &ResultFile,
    rules: &NightRules,
) -> Vec<DriftCheck> {
    let window: Vec<(String, ResultFile)> = passing
        .iter()
        .take(rules.drift_window)
        .filter_map(|n| {
            let r = schema::load_result(out.join(n).join(device).join(step)).ok()?;
            Some((n.clone(), r))
        })
        .collect();
    let Some(cp) = candidate.performance.as_ref() else {
        return Vec::new();
    };
    metrics()
        .into_iter()
        .map(|(metric, better, get)| {
            let per_night: Vec<(String, f64)> = window
                .iter()
                .filter_map(|(n, r)| Some((n.clone(), median(&get(r.performance.as_ref()?))?)))
                .collect();
            let nights: Vec<String> = per_night.iter().map(|(n, _)| n.clone()).collect();
            let meds: Vec<f64> = per_night.iter().map(|(_, m)| *m).collect();
            let cand = median(&get(cp));
            let mut c = DriftCheck {
                metric: metric.into(),
                status: "skipped".into(),
                nights,
                window_median: None,
                candidate: cand,
                change: None,
                detail: String::new(),
            };
            let (Some(wm), Some(cv)) = (median(&meds).filter(|_| meds.len() >= 2), cand) else {
                c.detail = format!(
                    "{} passing night(s) with this metric in the window; drift needs 2",
                    meds.len()
                );
                return c;
            };
            let change = cv / wm - 1.0;
            let worse = match better {
                Better::Lower => change > rules.drift_threshold,
                Better::Higher => change < -rules.drift_threshold,
            };
            c.window_median = Some(wm);
            c.change = Some(change);
            c.status = if worse { "regression" } else { "pass" }.into();
            c.detail = format!(
                "median {cv:.3} against {wm:.3}, the median of {} passing nights ({:+.1}%, at most {:.1}% worse allowed)",
                meds.len(),
                change * 100.0,
                rules.drift_threshold * 100.0
            );
            c
        })
        .collect()
}
