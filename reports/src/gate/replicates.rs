//! Replicated runs for the gate: a side is one run or several (`run --repeat N` writes
//! `run-1` … `run-N` under its `--out`), and timing and energy are judged on run-level
//! statistics when both sides have at least two runs.
//!
//! Why: the queries of one run share that run's machine state (other load, clocks, page
//! cache), so a per-query test sees a run-to-run shift as a certain change. Two back-to-back
//! runs of one binary on a shared 2-core host differed by 29% in TPOT with p = 3.6e-6 under
//! the per-query test (measured when the gate issue was filed). Run-level statistics count each run once: one figure per run (the
//! median of its per-query samples), compared on the log scale by Student's t
//! ([`crate::stats::compare_runs`]) — paired on the per-pair log ratios when the two sides'
//! runs were interleaved (A B A B …, as `gate --interleave` runs them), so slow drift of the
//! machine cancels; Welch's t otherwise. A regression needs `p < replicates.alpha` *and* a
//! change of the geometric mean beyond the section's `noise_threshold` (the minimum effect).

use std::path::{Path, PathBuf};

use super::{CheckStatus, GateCheck, check, sample_check};
use crate::error::{ReportError, Result};
use crate::render::num;
use crate::schema::{self, ResultFile};
use crate::stats::{self, Better, Pairing, Verdict};

/// The result directories a side names: a directory holding `result.json` is one run;
/// otherwise each sub-directory that holds one (sorted by name) is a replicate.
pub fn expand(dir: &Path) -> Result<Vec<PathBuf>> {
    if dir.join("result.json").is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    // A directory that cannot be listed (missing, for one) is reported as its missing
    // result.json: that is what the user named it for.
    let entries = std::fs::read_dir(dir)
        .map_err(|e| ReportError::io("reading", dir.join("result.json"), e))?;
    let mut runs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("result.json").is_file())
        .collect();
    runs.sort();
    if runs.is_empty() {
        return Err(ReportError::io(
            "reading",
            dir.join("result.json"),
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no result.json here nor in any sub-directory (replicates)",
            ),
        ));
    }
    Ok(runs)
}

/// Loads every run of a side (each directory expanded by [`expand`]).
pub fn load_side(dirs: &[PathBuf]) -> Result<Vec<ResultFile>> {
    let mut out = Vec::new();
    for d in dirs {
        for run in expand(d)? {
            out.push(schema::load_result(&run)?);
        }
    }
    Ok(out)
}

/// Paired when both sides have the same number (≥ 2) of runs and, in start order, the runs
/// alternate between the sides (each consecutive two holds one of each); unpaired otherwise.
pub fn pairing(b: &[ResultFile], c: &[ResultFile]) -> Pairing {
    if b.len() != c.len() || b.len() < 2 {
        return Pairing::Unpaired;
    }
    let mut all: Vec<(chrono::DateTime<chrono::Utc>, bool)> = b
        .iter()
        .map(|r| (r.meta.started_utc, false))
        .chain(c.iter().map(|r| (r.meta.started_utc, true)))
        .collect();
    all.sort();
    if all.chunks(2).all(|p| p[0].1 != p[1].1) {
        Pairing::Paired
    } else {
        Pairing::Unpaired
    }
}

/// The runs of a side in start order (the order pairs are formed in).
pub fn by_start(runs: &[ResultFile]) -> Vec<&ResultFile> {
    let mut v: Vec<&ResultFile> = runs.iter().collect();
    v.sort_by_key(|r| r.meta.started_utc);
    v
}

/// How a timing or energy series is judged: per-sample (Mann–Whitney) with one run on a
/// side, run-level (Student's t on per-run medians) with two or more on both.
#[derive(Clone, Copy)]
pub(super) struct SampleTest {
    pub(super) alpha: f64,
    pub(super) noise: f64,
    pub(super) min_samples: usize,
    pub(super) run_alpha: f64,
    pub(super) pairing: stats::Pairing,
}

impl SampleTest {
    /// `base` and `cand` hold one series per run.
    pub(super) fn check(
        &self,
        name: &str,
        base: &[Vec<f64>],
        cand: &[Vec<f64>],
        better: Better,
    ) -> GateCheck {
        if base.len() >= 2 && cand.len() >= 2 {
            return self.run_level(name, base, cand, better);
        }
        let pool = |s: &[Vec<f64>]| -> Vec<f64> { s.iter().flatten().copied().collect() };
        let mut row = sample_check(
            name,
            &pool(base),
            &pool(cand),
            better,
            self.alpha,
            self.noise,
            self.min_samples,
        );
        if base.len() > 1 || cand.len() > 1 {
            row.detail.push_str(&format!(
                " (pooled: {} baseline and {} candidate runs; run-level statistics need two or more on each side)",
                base.len(),
                cand.len()
            ));
        }
        row
    }

    fn run_level(
        &self,
        name: &str,
        base: &[Vec<f64>],
        cand: &[Vec<f64>],
        better: Better,
    ) -> GateCheck {
        let medians = |s: &[Vec<f64>]| -> Option<Vec<f64>> {
            s.iter()
                .map(|r| {
                    (r.len() >= self.min_samples)
                        .then(|| stats::median(r))
                        .flatten()
                })
                .collect()
        };
        let (Some(bm), Some(cm)) = (medians(base), medians(cand)) else {
            return check(
                name,
                CheckStatus::Error,
                format!(
                    "too few samples to judge: a run has fewer than {} (baseline runs {:?}, candidate runs {:?}); a check without data is not a pass",
                    self.min_samples,
                    base.iter().map(Vec::len).collect::<Vec<_>>(),
                    cand.iter().map(Vec::len).collect::<Vec<_>>()
                ),
            );
        };
        match stats::compare_runs(&bm, &cm, self.pairing, better, self.run_alpha, self.noise) {
            Ok(c) => {
                let word = match c.verdict {
                    Verdict::Regressed => "regressed",
                    Verdict::Improved => "improved",
                    Verdict::NoChange => "no significant change",
                };
                let how = match c.pairing {
                    stats::Pairing::Paired => "paired t on per-pair log ratios (interleaved runs)",
                    stats::Pairing::Unpaired => "Welch t on log run medians",
                };
                GateCheck {
                    name: name.into(),
                    status: if c.verdict == Verdict::Regressed {
                        CheckStatus::Regression
                    } else {
                        CheckStatus::Pass
                    },
                    baseline: Some(c.baseline),
                    candidate: Some(c.candidate),
                    change: Some(c.relative_change),
                    p_value: Some(c.p_value),
                    detail: format!(
                        "{word}: run medians' geometric mean {} → {} ({:+.1}%), {how}, p = {:.3e}, df {:.1} (alpha {}, minimum effect {:.1}%, runs {} / {})",
                        num(c.baseline),
                        num(c.candidate),
                        c.relative_change * 100.0,
                        c.p_value,
                        c.df,
                        self.run_alpha,
                        self.noise * 100.0,
                        bm.len(),
                        cm.len()
                    ),
                }
            }
            Err(e) => check(name, CheckStatus::Error, e.to_string()),
        }
    }
}
