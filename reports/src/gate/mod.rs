//! The release gate: compares a candidate run with a baseline under [`GateRules`] (read from
//! TOML, e.g. `ci/gate.toml`) and returns per-check rows and an overall verdict whose exit
//! code is 0 (pass), 1 (regression) or 2 (error: a run could not be read or lacks a section
//! the baseline has).
//!
//! - Latency, TTFT, TPOT, per-query tokens/s and net energy per dialogue (per token of each
//!   query in a scenario run), with one run on a
//!   side: two-sided Mann–Whitney U on the per-query (per-dialogue) samples; a regression
//!   needs `p < alpha` *and* a relative change of the median beyond the noise threshold, in
//!   the bad direction. With two or more runs on both sides (replicates): Student's t on the
//!   runs' medians, paired when the runs were interleaved ([`replicates`]).
//! - Accuracy: exact McNemar on paired per-question records when both runs have them,
//!   otherwise non-overlapping Wilson intervals; either way the drop must exceed `max_drop`.
//! - Validity and robustness: counts (crashes, output drift) against maxima.
//!
//! Before any of these, the runs must be comparable ([`crate::comparability`]): a difference
//! in workload or system that the rules do not allow is an error (exit 2).
//!
//! A verdict needs evidence: an enabled check with too few samples to judge is an error, not
//! a skip, and a gate in which no check judged any data adds a failing `evidence` row (exit
//! 2). `Skipped` is kept for checks that do not apply (the baseline has no such section).
//!
//! Here: checks and the verdict with its text and Markdown exports; the rules are in `rules`,
//! the JUnit XML export in `junit`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

mod junit;
pub mod replicates;
mod rules;
use replicates::SampleTest;
pub use rules::{
    AccuracyRules, ComparabilityRules, EnergyRules, GateRules, PerformanceRules, ReplicateRules,
    RobustnessRules,
};
use statrs::distribution::{ContinuousCDF, Normal};

use crate::render::{RenderContext, escape_md, num, one_line, utc};
use crate::schema::{self, ResultFile, RunMeta};
use crate::stats::{self, Better, Verdict};

/// Status of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Within the rules.
    Pass,
    /// Worse than the rules allow.
    Regression,
    /// Does not apply: disabled, or the baseline has nothing to compare against.
    Skipped,
    /// The check could not be evaluated: a missing section, or too few samples to judge (a
    /// check without data is not a pass).
    Error,
}

/// One row of the gate's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateCheck {
    /// `performance.tpot_ms`, `accuracy`, ...
    pub name: String,
    /// Verdict.
    pub status: CheckStatus,
    /// Baseline figure (median, accuracy, count).
    pub baseline: Option<f64>,
    /// Candidate figure.
    pub candidate: Option<f64>,
    /// Relative (timing) or absolute (accuracy) change.
    pub change: Option<f64>,
    /// p-value of the test used.
    pub p_value: Option<f64>,
    /// Human-readable explanation.
    pub detail: String,
}

/// Overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateStatus {
    /// Every check passed or did not apply, and at least one check judged data.
    Pass,
    /// At least one check found a regression.
    Regression,
    /// A run could not be read, a required section is missing, a check had too few samples
    /// to judge, or no check had any data.
    Error,
}

/// The gate's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateOutcome {
    /// Overall verdict.
    pub status: GateStatus,
    /// Baseline directory.
    pub baseline_dir: PathBuf,
    /// Candidate directory.
    pub candidate_dir: PathBuf,
    /// Per-check rows.
    pub checks: Vec<GateCheck>,
    /// Why the gate could not run, when it could not.
    pub error: Option<String>,
    /// Baseline provenance, when it was read.
    pub baseline_meta: Option<RunMeta>,
    /// Candidate provenance, when it was read.
    pub candidate_meta: Option<RunMeta>,
}

impl GateOutcome {
    /// An outcome for a gate that could not run at all (unreadable rules, for example).
    pub fn failed(
        baseline_dir: impl AsRef<Path>,
        candidate_dir: impl AsRef<Path>,
        error: impl Into<String>,
    ) -> Self {
        GateOutcome {
            status: GateStatus::Error,
            baseline_dir: baseline_dir.as_ref().into(),
            candidate_dir: candidate_dir.as_ref().into(),
            checks: Vec::new(),
            error: Some(error.into()),
            baseline_meta: None,
            candidate_meta: None,
        }
    }

    /// Process exit code: 0 pass, 1 regression, 2 error.
    pub fn exit_code(&self) -> i32 {
        match self.status {
            GateStatus::Pass => 0,
            GateStatus::Regression => 1,
            GateStatus::Error => 2,
        }
    }
}

/// Runs the gate on two result directories. Never fails: unreadable input is an
/// [`GateStatus::Error`] outcome naming the file. Either directory may hold replicates
/// (sub-directories with a `result.json` each, as `run --repeat` writes them).
pub fn gate(
    baseline_dir: impl AsRef<Path>,
    candidate_dir: impl AsRef<Path>,
    rules: &GateRules,
) -> GateOutcome {
    gate_dirs(
        &[baseline_dir.as_ref().to_path_buf()],
        &[candidate_dir.as_ref().to_path_buf()],
        rules,
    )
}

/// The gate on several result directories per side, each expanded to its replicates
/// ([`replicates::expand`]). Never fails, like [`gate`].
pub fn gate_dirs(baseline: &[PathBuf], candidate: &[PathBuf], rules: &GateRules) -> GateOutcome {
    let label = |dirs: &[PathBuf]| -> PathBuf {
        let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        PathBuf::from(names.join(","))
    };
    let (bd, cd) = (label(baseline), label(candidate));
    let loaded = replicates::load_side(baseline)
        .and_then(|b| replicates::load_side(candidate).map(|c| (b, c)));
    match loaded {
        Ok((b, c)) => gate_replicated(&bd, &b, &cd, &c, rules),
        Err(e) => GateOutcome::failed(&bd, &cd, e.to_string()),
    }
}

fn check(name: impl Into<String>, status: CheckStatus, detail: impl Into<String>) -> GateCheck {
    GateCheck {
        name: name.into(),
        status,
        baseline: None,
        candidate: None,
        change: None,
        p_value: None,
        detail: detail.into(),
    }
}

#[allow(clippy::too_many_arguments)]
fn sample_check(
    name: &str,
    base: &[f64],
    cand: &[f64],
    better: Better,
    alpha: f64,
    noise: f64,
    min_samples: usize,
) -> GateCheck {
    if cand.is_empty() && !base.is_empty() {
        return check(
            name,
            CheckStatus::Error,
            format!(
                "candidate has no samples but the baseline has {}",
                base.len()
            ),
        );
    }
    if base.len() < min_samples || cand.len() < min_samples {
        return check(
            name,
            CheckStatus::Error,
            format!(
                "too few samples to judge (baseline {}, candidate {}, need {min_samples}): a check without data is not a pass",
                base.len(),
                cand.len()
            ),
        );
    }
    match stats::compare_samples(base, cand, better, alpha, noise) {
        Ok(c) => {
            let status = if c.verdict == Verdict::Regressed {
                CheckStatus::Regression
            } else {
                CheckStatus::Pass
            };
            let word = match c.verdict {
                Verdict::Regressed => "regressed",
                Verdict::Improved => "improved",
                Verdict::NoChange => "no significant change",
            };
            GateCheck {
                name: name.into(),
                status,
                baseline: Some(c.baseline_median),
                candidate: Some(c.candidate_median),
                change: Some(c.relative_change),
                p_value: Some(c.p_value),
                detail: format!(
                    "{word}: median {} → {} ({:+.1}%), Mann-Whitney p = {:.3e} (alpha {alpha}, noise {:.1}%, n = {} / {})",
                    num(c.baseline_median),
                    num(c.candidate_median),
                    c.relative_change * 100.0,
                    c.p_value,
                    noise * 100.0,
                    base.len(),
                    cand.len()
                ),
            }
        }
        Err(e) => check(name, CheckStatus::Error, e.to_string()),
    }
}

fn z_for(alpha: f64) -> f64 {
    Normal::new(0.0, 1.0)
        .map(|n| n.inverse_cdf(1.0 - alpha / 2.0))
        .unwrap_or(stats::Z95)
}

fn accuracy_check(b: &schema::Accuracy, c: &schema::Accuracy, rules: &AccuracyRules) -> GateCheck {
    use std::collections::HashMap;
    let base: HashMap<(&str, u64), bool> = b
        .per_question
        .iter()
        .map(|q| ((q.subject.as_str(), q.row), q.correct))
        .collect();
    let (mut n, mut worse, mut better) = (0u64, 0u64, 0u64);
    for q in &c.per_question {
        if let Some(&bc) = base.get(&(q.subject.as_str(), q.row)) {
            n += 1;
            match (bc, q.correct) {
                (true, false) => worse += 1,
                (false, true) => better += 1,
                _ => {}
            }
        }
    }
    if n > 0 {
        let drop = (worse as f64 - better as f64) / n as f64;
        let p = stats::mcnemar_exact(worse, better);
        let regressed = drop > rules.max_drop && p < rules.alpha;
        return GateCheck {
            name: "accuracy".into(),
            status: if regressed {
                CheckStatus::Regression
            } else {
                CheckStatus::Pass
            },
            baseline: Some(b.accuracy),
            candidate: Some(c.accuracy),
            change: Some(-drop),
            p_value: Some(p),
            detail: format!(
                "{n} paired questions: {worse} newly wrong, {better} newly right; drop {:.2} points, exact McNemar p = {p:.3e} (alpha {}, max drop {:.2} points)",
                drop * 100.0,
                rules.alpha,
                rules.max_drop * 100.0
            ),
        };
    }
    let z = z_for(rules.alpha);
    let (blo, _) = stats::wilson_interval(b.correct, b.n, z);
    let (_, chi) = stats::wilson_interval(c.correct, c.n, z);
    let drop = b.accuracy - c.accuracy;
    let regressed = drop > rules.max_drop && chi < blo;
    GateCheck {
        name: "accuracy".into(),
        status: if regressed {
            CheckStatus::Regression
        } else {
            CheckStatus::Pass
        },
        baseline: Some(b.accuracy),
        candidate: Some(c.accuracy),
        change: Some(-drop),
        p_value: None,
        detail: format!(
            "no paired records: Wilson {:.0}% intervals, candidate upper {} vs baseline lower {}; drop {:.2} points (max {:.2})",
            (1.0 - rules.alpha) * 100.0,
            num(chi),
            num(blo),
            drop * 100.0,
            rules.max_drop * 100.0
        ),
    }
}

fn count_field(v: &serde_json::Value, keys: &[&str]) -> Option<u64> {
    keys.iter().find_map(|k| match v.get(*k)? {
        serde_json::Value::Bool(b) => Some(u64::from(*b)),
        x => x.as_u64(),
    })
}

/// Runs the gate on two loaded results; the directories only label the outcome.
pub fn gate_results(
    baseline_dir: &Path,
    b: &ResultFile,
    candidate_dir: &Path,
    c: &ResultFile,
    rules: &GateRules,
) -> GateOutcome {
    gate_replicated(
        baseline_dir,
        std::slice::from_ref(b),
        candidate_dir,
        std::slice::from_ref(c),
        rules,
    )
}

/// Runs the gate on one or more loaded runs per side; the directories only label the
/// outcome. Timing and energy use run-level statistics when both sides have two runs or more
/// (module [`replicates`]), the per-query test otherwise; accuracy compares the first run of
/// each side; validity and robustness count every candidate run.
pub fn gate_replicated(
    baseline_dir: &Path,
    b: &[ResultFile],
    candidate_dir: &Path,
    c: &[ResultFile],
    rules: &GateRules,
) -> GateOutcome {
    let (Some(b0), Some(c0)) = (b.first(), c.first()) else {
        return GateOutcome::failed(baseline_dir, candidate_dir, "a side has no runs");
    };
    let mut checks = Vec::new();
    // Comparability first: a verdict on different workloads or systems means nothing. Every
    // run, of either side, is held against the first baseline run.
    let mut refused = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for r in b[1..].iter().chain(c) {
        for d in crate::comparability::differences(b0, r) {
            if !seen.insert(d.field.clone()) {
                continue;
            }
            let name = format!("comparability.{}", d.field);
            if crate::comparability::allowed(&d.field, &rules.comparability.allow_diff) {
                checks.push(check(
                    name,
                    CheckStatus::Pass,
                    format!("allowed difference: {d}"),
                ));
            } else {
                checks.push(check(name, CheckStatus::Error, format!("differs: {d}")));
                refused.push(d.field);
            }
        }
    }
    if !refused.is_empty() {
        return GateOutcome {
            status: GateStatus::Error,
            baseline_dir: baseline_dir.into(),
            candidate_dir: candidate_dir.into(),
            checks,
            error: Some(format!(
                "the runs are not comparable: they differ in {}; if that is intended, name \
                 each field with --allow-diff (or comparability.allow_diff in the rules)",
                refused.join(", ")
            )),
            baseline_meta: Some(b0.meta.clone()),
            candidate_meta: Some(c0.meta.clone()),
        };
    }
    let pairing = replicates::pairing(b, c);
    let (b_runs, c_runs) = (replicates::by_start(b), replicates::by_start(c));
    let pr = &rules.performance;
    let b_perf: Option<Vec<&schema::Performance>> =
        b_runs.iter().map(|r| r.performance.as_ref()).collect();
    let c_perf: Option<Vec<&schema::Performance>> =
        c_runs.iter().map(|r| r.performance.as_ref()).collect();
    match (b_perf, c_perf) {
        (Some(bp), Some(cp)) => {
            if pr.require_valid {
                let invalid: Vec<String> = cp
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| !p.valid)
                    .map(|(i, p)| {
                        let run = if cp.len() > 1 {
                            format!("run {} ", i + 1)
                        } else {
                            String::new()
                        };
                        format!("{run}{}", p.invalid_reasons.join("; "))
                    })
                    .collect();
                checks.push(if invalid.is_empty() {
                    let what = if cp.len() > 1 {
                        format!("all {} candidate runs are VALID", cp.len())
                    } else {
                        "candidate run is VALID".into()
                    };
                    check("performance.valid", CheckStatus::Pass, what)
                } else {
                    check(
                        "performance.valid",
                        CheckStatus::Regression,
                        format!("candidate run is INVALID: {}", invalid.join(" | ")),
                    )
                });
            }
            type Getter = fn(&schema::QuerySample) -> Option<f64>;
            let series = |ps: &[&schema::Performance], f: Getter| -> Vec<Vec<f64>> {
                ps.iter()
                    .map(|p| p.per_query.iter().filter_map(f).collect())
                    .collect()
            };
            let metrics: [(&str, bool, Getter); 3] = [
                ("performance.latency_ms", pr.latency, |q| Some(q.latency_ms)),
                ("performance.ttft_ms", pr.ttft, |q| q.ttft_ms),
                ("performance.tpot_ms", pr.tpot, |q| q.tpot_ms),
            ];
            let test = SampleTest {
                alpha: pr.alpha,
                noise: pr.noise_threshold,
                min_samples: pr.min_samples,
                run_alpha: rules.replicates.alpha,
                pairing,
            };
            for (name, enabled, get) in metrics {
                if enabled {
                    checks.push(test.check(
                        name,
                        &series(&bp, get),
                        &series(&cp, get),
                        Better::Lower,
                    ));
                }
            }
            if pr.throughput {
                let tps = |ps: &[&schema::Performance]| -> Vec<Vec<f64>> {
                    ps.iter()
                        .map(|p| crate::render::per_query_tokens_per_s(p))
                        .collect()
                };
                checks.push(test.check(
                    "performance.tokens_per_s",
                    &tps(&bp),
                    &tps(&cp),
                    Better::Higher,
                ));
            }
        }
        (Some(_), None) => checks.push(check(
            "performance",
            CheckStatus::Error,
            "candidate has no performance section but the baseline has one",
        )),
        (None, _) => checks.push(check(
            "performance",
            CheckStatus::Skipped,
            "baseline has no performance section",
        )),
    }

    if rules.energy.enabled {
        let er = &rules.energy;
        let b_en: Option<Vec<&schema::Energy>> = b_runs.iter().map(|r| r.energy.as_ref()).collect();
        let c_en: Option<Vec<&schema::Energy>> = c_runs.iter().map(|r| r.energy.as_ref()).collect();
        match (b_en, c_en) {
            (Some(be), Some(ce)) => {
                // Dialogue runs: net mWh per dialogue. Scenario runs: net joules per token of
                // each query (3.6 J per mWh), when their queries ran one at a time.
                let by_query = be.first().is_some_and(|e| e.basis == "queries");
                let mwh = |es: &[&schema::Energy]| -> Vec<Vec<f64>> {
                    es.iter()
                        .map(|e| {
                            if by_query {
                                e.per_query
                                    .iter()
                                    .filter(|q| q.tokens > 0)
                                    .map(|q| q.net_mwh * 3.6 / q.tokens as f64)
                                    .collect()
                            } else {
                                e.per_dialogue.iter().map(|d| d.net_mwh).collect()
                            }
                        })
                        .collect()
                };
                let test = SampleTest {
                    alpha: er.alpha,
                    noise: er.noise_threshold,
                    min_samples: er.min_samples,
                    run_alpha: rules.replicates.alpha,
                    pairing,
                };
                let name = if by_query {
                    "energy.net_j_per_token"
                } else {
                    "energy.net_mwh_per_dialogue"
                };
                let batched = be.iter().chain(&ce).any(|e| e.per_query.is_empty());
                let mut row = if by_query && be.len() >= 2 && ce.len() >= 2 {
                    // Replicates: each run counts once by its whole-run joules per token.
                    let per_run = |es: &[&schema::Energy]| -> Vec<Vec<f64>> {
                        es.iter().map(|e| vec![e.j_per_token]).collect()
                    };
                    SampleTest {
                        min_samples: 1,
                        ..test
                    }
                    .check(name, &per_run(&be), &per_run(&ce), Better::Lower)
                } else if by_query && batched {
                    check(
                        name,
                        CheckStatus::Skipped,
                        "queries overlapped in time (a batch), so there is no per-query energy; \
                         the whole-run J/token is judged with two or more runs per side (run --repeat)",
                    )
                } else {
                    test.check(name, &mwh(&be), &mwh(&ce), Better::Lower)
                };
                if ce.iter().any(|e| !e.reliable) {
                    row.detail.push_str(" (candidate meter flagged unreliable)");
                }
                checks.push(row);
            }
            (Some(_), None) => checks.push(check(
                "energy",
                CheckStatus::Error,
                "candidate has no energy section but the baseline has one",
            )),
            (None, _) => checks.push(check(
                "energy",
                CheckStatus::Skipped,
                "baseline has no energy section",
            )),
        }
    }

    if rules.accuracy.enabled {
        match (&b0.accuracy, &c0.accuracy) {
            (Some(ba), Some(ca)) => {
                let mut row = accuracy_check(ba, ca, &rules.accuracy);
                if b.len() > 1 || c.len() > 1 {
                    row.detail.push_str(" (first run of each side)");
                }
                checks.push(row);
            }
            (Some(_), None) => checks.push(check(
                "accuracy",
                CheckStatus::Error,
                "candidate has no accuracy section but the baseline has one",
            )),
            (None, _) => checks.push(check(
                "accuracy",
                CheckStatus::Skipped,
                "baseline has no accuracy section",
            )),
        }
    }

    let c_rob: Vec<&serde_json::Value> = c.iter().filter_map(|r| r.robustness.as_ref()).collect();
    if c_rob.is_empty() {
        checks.push(check(
            "robustness",
            CheckStatus::Skipped,
            "candidate has no robustness section",
        ));
    } else {
        for (name, keys, max) in [
            (
                "robustness.crashes",
                &["crashes"][..],
                rules.robustness.max_crashes,
            ),
            (
                "robustness.drift",
                &["drift", "output_drift"][..],
                rules.robustness.max_drift,
            ),
        ] {
            let base = b0.robustness.as_ref().and_then(|v| count_field(v, keys));
            let counts: Option<Vec<u64>> = c_rob.iter().map(|v| count_field(v, keys)).collect();
            checks.push(match counts {
                Some(counts) => {
                    let n: u64 = counts.iter().sum();
                    let runs = if c_rob.len() > 1 {
                        format!(" over {} runs", c_rob.len())
                    } else {
                        String::new()
                    };
                    GateCheck {
                        name: name.into(),
                        status: if n > max {
                            CheckStatus::Regression
                        } else {
                            CheckStatus::Pass
                        },
                        baseline: base.map(|x| x as f64),
                        candidate: Some(n as f64),
                        change: None,
                        p_value: None,
                        detail: format!("{n} counted{runs}, at most {max} allowed"),
                    }
                }
                None => check(
                    name,
                    CheckStatus::Skipped,
                    "candidate robustness section has no such count",
                ),
            });
        }
    }

    // A verdict needs evidence: a gate in which no check judged any data is not a pass.
    let judged = checks
        .iter()
        .any(|c| c.status != CheckStatus::Skipped && !c.name.starts_with("comparability."));
    if !judged {
        checks.push(check(
            "evidence",
            CheckStatus::Error,
            "no check had data to judge (no performance, energy, accuracy or robustness figures in common): a gate without evidence is not a pass",
        ));
    }
    let status = if checks.iter().any(|c| c.status == CheckStatus::Error) {
        GateStatus::Error
    } else if checks.iter().any(|c| c.status == CheckStatus::Regression) {
        GateStatus::Regression
    } else {
        GateStatus::Pass
    };
    GateOutcome {
        status,
        baseline_dir: baseline_dir.into(),
        candidate_dir: candidate_dir.into(),
        checks,
        error: None,
        baseline_meta: Some(b0.meta.clone()),
        candidate_meta: Some(c0.meta.clone()),
    }
}

fn meta_pairs(prefix: &str, m: &RunMeta) -> Vec<(String, String)> {
    vec![
        (format!("{prefix}.tool_version"), m.tool_version.clone()),
        (format!("{prefix}.git_commit"), m.git_commit.clone()),
        (format!("{prefix}.device"), m.device.id.clone()),
        (format!("{prefix}.device_name"), m.device.name.clone()),
        (format!("{prefix}.model"), m.model.name.clone()),
        (format!("{prefix}.model_sha256"), m.model.sha256.clone()),
        (
            format!("{prefix}.settings"),
            serde_json::to_string(&m.settings).unwrap_or_default(),
        ),
        (format!("{prefix}.run_started_utc"), utc(&m.started_utc)),
    ]
}

impl GateOutcome {
    fn provenance(&self, ctx: &RenderContext) -> Vec<(String, String)> {
        let mut p = vec![
            (
                "schema_version".to_string(),
                schema::SCHEMA_VERSION.to_string(),
            ),
            ("rendered_utc".to_string(), utc(&ctx.rendered_utc)),
            (
                "baseline.dir".to_string(),
                self.baseline_dir.display().to_string(),
            ),
            (
                "candidate.dir".to_string(),
                self.candidate_dir.display().to_string(),
            ),
        ];
        if let Some(m) = &self.baseline_meta {
            p.extend(meta_pairs("baseline", m));
        }
        if let Some(m) = &self.candidate_meta {
            p.extend(meta_pairs("candidate", m));
        }
        p
    }

    fn status_word(&self) -> &'static str {
        match self.status {
            GateStatus::Pass => "PASS",
            GateStatus::Regression => "REGRESSION",
            GateStatus::Error => "ERROR",
        }
    }

    /// Markdown for a CI step summary.
    pub fn to_markdown(&self, ctx: &RenderContext) -> String {
        let mut s = format!("# PocketPerf gate: {}\n\n", self.status_word());
        if let Some(e) = &self.error {
            let _ = writeln!(s, "**Error:** {}\n", escape_md(e));
        }
        if !self.checks.is_empty() {
            s.push_str("| check | status | baseline | candidate | change | p | detail |\n|---|---|---:|---:|---:|---:|---|\n");
            for c in &self.checks {
                let o = |x: Option<f64>| x.map(num).unwrap_or_default();
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    escape_md(&c.name),
                    status_text(c.status),
                    o(c.baseline),
                    o(c.candidate),
                    c.change
                        .map(|x| format!("{:+.2}%", x * 100.0))
                        .unwrap_or_default(),
                    c.p_value.map(|p| format!("{p:.3e}")).unwrap_or_default(),
                    escape_md(&c.detail)
                );
            }
        }
        s.push_str("\n<details><summary>Provenance</summary>\n\n| | |\n|---|---|\n");
        for (k, v) in self.provenance(ctx) {
            let _ = writeln!(s, "| {} | {} |", escape_md(&k), escape_md(&v));
        }
        s.push_str("\n</details>\n");
        s
    }

    /// Plain text for terminals.
    pub fn to_text(&self) -> String {
        let mut s = format!("gate: {}\n", self.status_word());
        if let Some(e) = &self.error {
            let _ = writeln!(s, "error: {}", one_line(e));
        }
        for c in &self.checks {
            let _ = writeln!(
                s,
                "  {:<10} {:<34} {}",
                status_text(c.status),
                one_line(&c.name),
                one_line(&c.detail)
            );
        }
        s
    }
}

fn status_text(s: CheckStatus) -> &'static str {
    match s {
        CheckStatus::Pass => "pass",
        CheckStatus::Regression => "REGRESSION",
        CheckStatus::Skipped => "skipped",
        CheckStatus::Error => "ERROR",
    }
}
