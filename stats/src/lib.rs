//! The statistics of PocketPerf, in one place: every figure the reports print, every verdict
//! the gate gives and every accuracy interval and paired test of the MMLU scorer. LoadGen
//! percentiles of real-valued samples, medians, seeded bootstrap intervals, Tukey outlier
//! fences (reported, never dropped), Mann–Whitney U (two-sided, normal approximation with tie
//! and continuity correction; the normal tail from statrs), Wilson score intervals, the exact
//! McNemar test, and the two-condition change rule (significant *and* larger than a noise
//! threshold) used for regressions, over the queries of one run per side
//! ([`compare_samples`]) or over replicated runs ([`compare_runs`]: Student's t on the logs of
//! per-run figures, paired when the runs were interleaved, Welch's otherwise).
//!
//! The scenario engine keeps its own integer-nanosecond percentiles (`pocketperf-scenarios`
//! `stats`: exact selection over large series, LoadGen's definition); this crate is for
//! everything computed after a run.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// Why a statistic cannot be computed from the samples given.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Empty samples, a confidence level outside (0, 1), no resamples, …
    #[error("{0}")]
    Invalid(String),
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Two-sided 95% standard normal quantile.
pub const Z95: f64 = 1.959_963_984_540_054;

/// The finite values of `samples`, sorted ascending.
pub fn finite_sorted(samples: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// LoadGen's percentile of sorted data: `sorted[floor(n·p)]`, clamped to the last element.
/// `None` for an empty slice.
pub fn loadgen_percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() as f64) * p).floor() as usize;
    Some(sorted[idx.min(sorted.len() - 1)])
}

/// Arithmetic mean; `None` for an empty slice.
pub fn mean(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() {
        None
    } else {
        Some(samples.iter().sum::<f64>() / samples.len() as f64)
    }
}

/// Sample standard deviation (n − 1 denominator, as llama-bench's `stddev_ts`); `None` below
/// two values.
pub fn sample_stddev(samples: &[f64]) -> Option<f64> {
    sample_variance(samples).map(f64::sqrt)
}

/// Sample median (mean of the two middle values for an even count) of the finite values.
pub fn median(samples: &[f64]) -> Option<f64> {
    median_sorted(&finite_sorted(samples))
}

fn median_sorted(s: &[f64]) -> Option<f64> {
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

/// Quantile by linear interpolation between order statistics (Hyndman–Fan type 7).
pub fn quantile_linear(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// Which statistic a bootstrap interval is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Statistic {
    /// Arithmetic mean.
    Mean,
    /// Median.
    Median,
}

/// A point estimate with a confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Statistic of the original sample.
    pub estimate: f64,
    /// Lower bound.
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// Confidence level, e.g. 0.95.
    pub confidence: f64,
    /// Sample size.
    pub n: u64,
}

/// Percentile bootstrap interval of the mean or median, deterministic for a given `seed`.
pub fn bootstrap_ci(
    samples: &[f64],
    statistic: Statistic,
    confidence: f64,
    resamples: usize,
    seed: u64,
) -> Result<Interval> {
    let s = finite_sorted(samples);
    if s.is_empty() {
        return Err(Error::Invalid("bootstrap of an empty sample".into()));
    }
    if !(confidence > 0.0 && confidence < 1.0) || resamples == 0 {
        return Err(Error::Invalid(format!(
            "bootstrap needs 0 < confidence < 1 and resamples > 0 (got {confidence}, {resamples})"
        )));
    }
    let stat = |v: &mut Vec<f64>| -> f64 {
        match statistic {
            Statistic::Mean => v.iter().sum::<f64>() / v.len() as f64,
            Statistic::Median => {
                v.sort_by(f64::total_cmp);
                // Invariant: v has the same non-zero length as `s`.
                median_sorted(v).unwrap_or(f64::NAN)
            }
        }
    };
    let estimate = stat(&mut s.clone());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut buf = Vec::with_capacity(s.len());
    let mut dist = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        buf.clear();
        buf.extend((0..s.len()).map(|_| s[rng.random_range(0..s.len())]));
        dist.push(stat(&mut buf));
    }
    dist.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    // Invariant: dist is non-empty and the quantile levels lie in [0, 1].
    let lo = quantile_linear(&dist, tail).unwrap_or(estimate);
    let hi = quantile_linear(&dist, 1.0 - tail).unwrap_or(estimate);
    Ok(Interval {
        estimate,
        lo,
        hi,
        confidence,
        n: s.len() as u64,
    })
}

/// Percentile bootstrap interval of `stat(candidate) / stat(baseline)`, resampling both
/// samples independently; deterministic for a given `seed`. Resamples whose baseline statistic
/// is zero are skipped.
pub fn bootstrap_ratio_ci(
    baseline: &[f64],
    candidate: &[f64],
    statistic: Statistic,
    confidence: f64,
    resamples: usize,
    seed: u64,
) -> Result<Interval> {
    let (b, c) = (finite_sorted(baseline), finite_sorted(candidate));
    if b.is_empty() || c.is_empty() {
        return Err(Error::Invalid(format!(
            "ratio bootstrap needs two non-empty samples (got {} and {})",
            b.len(),
            c.len()
        )));
    }
    if !(confidence > 0.0 && confidence < 1.0) || resamples == 0 {
        return Err(Error::Invalid(format!(
            "bootstrap needs 0 < confidence < 1 and resamples > 0 (got {confidence}, {resamples})"
        )));
    }
    let stat = |v: &mut Vec<f64>| -> f64 {
        match statistic {
            Statistic::Mean => v.iter().sum::<f64>() / v.len() as f64,
            Statistic::Median => {
                v.sort_by(f64::total_cmp);
                median_sorted(v).unwrap_or(f64::NAN)
            }
        }
    };
    let base = stat(&mut b.clone());
    if base == 0.0 {
        return Err(Error::Invalid(
            "ratio to a baseline statistic of zero".into(),
        ));
    }
    let estimate = stat(&mut c.clone()) / base;
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut bb, mut cb) = (Vec::with_capacity(b.len()), Vec::with_capacity(c.len()));
    let mut dist = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        bb.clear();
        bb.extend((0..b.len()).map(|_| b[rng.random_range(0..b.len())]));
        cb.clear();
        cb.extend((0..c.len()).map(|_| c[rng.random_range(0..c.len())]));
        let den = stat(&mut bb);
        if den != 0.0 {
            dist.push(stat(&mut cb) / den);
        }
    }
    dist.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    let lo = quantile_linear(&dist, tail).unwrap_or(estimate);
    let hi = quantile_linear(&dist, 1.0 - tail).unwrap_or(estimate);
    Ok(Interval {
        estimate,
        lo,
        hi,
        confidence,
        n: c.len() as u64,
    })
}

/// Tukey fences: mild outliers lie beyond 1.5·IQR from the quartiles, severe beyond 3·IQR.
/// Outliers are counted and reported; nothing is removed from the data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TukeyFences {
    /// First quartile (type 7).
    pub q1: f64,
    /// Third quartile (type 7).
    pub q3: f64,
    /// `q1 - 3·IQR`.
    pub low_severe: f64,
    /// `q1 - 1.5·IQR`.
    pub low_mild: f64,
    /// `q3 + 1.5·IQR`.
    pub high_mild: f64,
    /// `q3 + 3·IQR`.
    pub high_severe: f64,
    /// Samples below `low_severe`.
    pub n_low_severe: u64,
    /// Samples in `[low_severe, low_mild)`.
    pub n_low_mild: u64,
    /// Samples in `(high_mild, high_severe]`.
    pub n_high_mild: u64,
    /// Samples above `high_severe`.
    pub n_high_severe: u64,
}

impl TukeyFences {
    /// Fences and outlier counts of the finite values; `None` for an empty sample.
    pub fn classify(samples: &[f64]) -> Option<TukeyFences> {
        let s = finite_sorted(samples);
        let q1 = quantile_linear(&s, 0.25)?;
        let q3 = quantile_linear(&s, 0.75)?;
        let iqr = q3 - q1;
        let mut f = TukeyFences {
            q1,
            q3,
            low_severe: q1 - 3.0 * iqr,
            low_mild: q1 - 1.5 * iqr,
            high_mild: q3 + 1.5 * iqr,
            high_severe: q3 + 3.0 * iqr,
            n_low_severe: 0,
            n_low_mild: 0,
            n_high_mild: 0,
            n_high_severe: 0,
        };
        for &x in &s {
            if x < f.low_severe {
                f.n_low_severe += 1;
            } else if x < f.low_mild {
                f.n_low_mild += 1;
            } else if x > f.high_severe {
                f.n_high_severe += 1;
            } else if x > f.high_mild {
                f.n_high_mild += 1;
            }
        }
        Some(f)
    }

    /// Total outliers, mild and severe.
    pub fn outliers(&self) -> u64 {
        self.n_low_severe + self.n_low_mild + self.n_high_mild + self.n_high_severe
    }
}

/// Result of a two-sided Mann–Whitney U test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MannWhitney {
    /// U statistic of the first sample (count of pairs where it is larger; ties count ½).
    pub u1: f64,
    /// U statistic of the second sample; `u1 + u2 = n1·n2`.
    pub u2: f64,
    /// Standardised statistic after tie and continuity correction (≥ 0).
    pub z: f64,
    /// Two-sided p-value from the normal approximation.
    pub p_value: f64,
}

/// Two-sided Mann–Whitney U test of `a` against `b` (normal approximation, tie-corrected
/// variance, continuity correction of ½). Non-finite values are ignored.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> Result<MannWhitney> {
    let a: Vec<f64> = a.iter().copied().filter(|x| x.is_finite()).collect();
    let b: Vec<f64> = b.iter().copied().filter(|x| x.is_finite()).collect();
    if a.is_empty() || b.is_empty() {
        return Err(Error::Invalid(format!(
            "Mann-Whitney needs two non-empty samples (got {} and {})",
            a.len(),
            b.len()
        )));
    }
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let mut pooled: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = pooled.len();
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let avg_rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_a += avg_rank * pooled[i..=j].iter().filter(|p| p.1).count() as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let u1 = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let u2 = n1 * n2 - u1;
    let nn = n1 + n2;
    let var = n1 * n2 / 12.0 * ((nn + 1.0) - tie_term / (nn * (nn - 1.0)));
    let mu = n1 * n2 / 2.0;
    let (z, p_value) = if var <= 0.0 {
        // Every value identical: no evidence of any difference.
        (0.0, 1.0)
    } else {
        let z = ((u1 - mu).abs() - 0.5).max(0.0) / var.sqrt();
        (z, (2.0 * standard_normal_sf(z)).min(1.0))
    };
    Ok(MannWhitney { u1, u2, z, p_value })
}

/// Upper tail of the standard normal, `1 - Φ(z)`.
pub fn standard_normal_sf(z: f64) -> f64 {
    // Invariant: mean 0 and std-dev 1 are valid parameters.
    match Normal::new(0.0, 1.0) {
        Ok(n) => n.sf(z),
        Err(_) => f64::NAN,
    }
}

/// Wilson score interval for `k` successes in `n` trials at standard-normal quantile `z`.
/// For `n = 0` the interval is the uninformative `[0, 1]`.
pub fn wilson_interval(k: u64, n: u64, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let n_f = n as f64;
    let p = k.min(n) as f64 / n_f;
    let z2 = z * z;
    let denom = 1.0 + z2 / n_f;
    let centre = (p + z2 / (2.0 * n_f)) / denom;
    let half = z / denom * (p * (1.0 - p) / n_f + z2 / (4.0 * n_f * n_f)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Exact two-sided McNemar test on the discordant pair counts `b` and `c`:
/// `p = min(1, 2·P[X ≤ min(b, c)])` with `X ~ Binomial(b + c, ½)`; 1 when there are none.
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    let nf = n as f64;
    let ln2n = nf * std::f64::consts::LN_2;
    // ln C(n, i) - n ln 2 for i = 0..=k, accumulated exactly in log space; the largest
    // term is the last (k ≤ n/2), so the sum is taken relative to it.
    let mut ln_choose = 0.0f64;
    let mut terms = Vec::with_capacity(k as usize + 1);
    for i in 0..=k {
        terms.push(ln_choose - ln2n);
        let fi = i as f64;
        ln_choose += (nf - fi).ln() - (fi + 1.0).ln();
    }
    let top = terms.last().copied().unwrap_or(0.0);
    let tail = top.exp() * terms.iter().map(|t| (t - top).exp()).sum::<f64>();
    (2.0 * tail).min(1.0)
}

/// Which direction of a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Latency, energy, temperature.
    Lower,
    /// Throughput, accuracy.
    Higher,
}

/// The verdict on a candidate sample against a baseline sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Significant and beyond the noise threshold, in the bad direction.
    Regressed,
    /// Significant and beyond the noise threshold, in the good direction.
    Improved,
    /// Within noise or not significant.
    NoChange,
}

/// Comparison of two samples, criterion-style.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Median of the baseline.
    pub baseline_median: f64,
    /// Median of the candidate.
    pub candidate_median: f64,
    /// `candidate_median / baseline_median - 1`.
    pub relative_change: f64,
    /// Two-sided Mann–Whitney p-value.
    pub p_value: f64,
    /// The call.
    pub verdict: Verdict,
}

/// The two-condition rule: a change is called only when `p < alpha` **and** `|change|`
/// exceeds `min_effect`; its sign and `better` decide between regression and improvement.
fn call(p: f64, alpha: f64, change: f64, min_effect: f64, better: Better) -> Verdict {
    let called = p < alpha && change.abs() > min_effect;
    let worse = match better {
        Better::Lower => change > 0.0,
        Better::Higher => change < 0.0,
    };
    match (called, worse) {
        (false, _) => Verdict::NoChange,
        (true, true) => Verdict::Regressed,
        (true, false) => Verdict::Improved,
    }
}

/// Calls a change only when `p < alpha` **and** the relative change of the median exceeds
/// `noise` (e.g. 0.05 for 5%); the direction decides between regression and improvement.
pub fn compare_samples(
    baseline: &[f64],
    candidate: &[f64],
    better: Better,
    alpha: f64,
    noise: f64,
) -> Result<Change> {
    let mw = mann_whitney_u(baseline, candidate)?;
    let (Some(bm), Some(cm)) = (median(baseline), median(candidate)) else {
        return Err(Error::Invalid("median of an empty sample".into()));
    };
    let relative_change = if bm == 0.0 {
        if cm == 0.0 {
            0.0
        } else {
            f64::INFINITY.copysign(cm)
        }
    } else {
        cm / bm - 1.0
    };
    let verdict = call(mw.p_value, alpha, relative_change, noise, better);
    Ok(Change {
        baseline_median: bm,
        candidate_median: cm,
        relative_change,
        p_value: mw.p_value,
        verdict,
    })
}

/// How replicated runs of the two sides relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pairing {
    /// Run `i` of each side belongs together (interleaved A B A B …): the test is on the
    /// per-pair log ratios, so drift of the machine between pairs cancels.
    Paired,
    /// Independent runs: Welch's t on the two sides' logs.
    Unpaired,
}

/// Comparison of replicated runs: one figure (e.g. a median) per run and side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunChange {
    /// Geometric mean of the baseline runs' figures.
    pub baseline: f64,
    /// Geometric mean of the candidate runs' figures.
    pub candidate: f64,
    /// `candidate / baseline - 1` (ratio of the geometric means).
    pub relative_change: f64,
    /// Two-sided p-value of Student's t on the logs.
    pub p_value: f64,
    /// Degrees of freedom of the t distribution (Welch–Satterthwaite when unpaired).
    pub df: f64,
    /// How the runs were compared.
    pub pairing: Pairing,
    /// The call (significant and beyond the minimum effect).
    pub verdict: Verdict,
}

/// Sample variance (n − 1 denominator); `None` below two values.
fn sample_variance(x: &[f64]) -> Option<f64> {
    let m = mean(x)?;
    (x.len() >= 2).then(|| x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (x.len() - 1) as f64)
}

/// Two-sided tail of Student's t with `df` degrees of freedom at `t`.
fn students_t_two_sided(t: f64, df: f64) -> Result<f64> {
    let dist = StudentsT::new(0.0, 1.0, df)
        .map_err(|e| Error::Invalid(format!("t distribution with {df} degrees of freedom: {e}")))?;
    Ok((2.0 * dist.sf(t.abs())).min(1.0))
}

/// Compares replicated runs: `baseline[i]` and `candidate[i]` are one figure per run (all
/// positive and finite). The test works on logarithms, so a change is a ratio: Student's t
/// on the per-pair log ratios when [`Pairing::Paired`] (equal counts, at least two pairs),
/// else Welch's t on the two sides' logs (at least two runs per side). Like
/// [`compare_samples`], a change is called only when `p < alpha` **and** the ratio of the
/// geometric means differs from 1 by more than `min_effect`. When every log ratio is the
/// same (no spread), p is 0 for a non-zero change and 1 otherwise.
pub fn compare_runs(
    baseline: &[f64],
    candidate: &[f64],
    pairing: Pairing,
    better: Better,
    alpha: f64,
    min_effect: f64,
) -> Result<RunChange> {
    let logs = |x: &[f64], side: &str| -> Result<Vec<f64>> {
        x.iter()
            .map(|&v| {
                if v.is_finite() && v > 0.0 {
                    Ok(v.ln())
                } else {
                    Err(Error::Invalid(format!(
                        "{side} run figure {v}: must be positive and finite"
                    )))
                }
            })
            .collect()
    };
    let (lb, lc) = (logs(baseline, "baseline")?, logs(candidate, "candidate")?);
    let (mean_b, mean_c) = match (mean(&lb), mean(&lc)) {
        (Some(b), Some(c)) => (b, c),
        _ => return Err(Error::Invalid("no runs on one side".into())),
    };
    let diff = mean_c - mean_b;
    let (se2, df) = match pairing {
        Pairing::Paired => {
            if lb.len() != lc.len() || lb.len() < 2 {
                return Err(Error::Invalid(format!(
                    "paired runs need equal counts of at least two (baseline {}, candidate {})",
                    lb.len(),
                    lc.len()
                )));
            }
            let d: Vec<f64> = lc.iter().zip(&lb).map(|(c, b)| c - b).collect();
            let n = d.len() as f64;
            (sample_variance(&d).unwrap_or(0.0) / n, n - 1.0)
        }
        Pairing::Unpaired => {
            let (Some(vb), Some(vc)) = (sample_variance(&lb), sample_variance(&lc)) else {
                return Err(Error::Invalid(format!(
                    "unpaired runs need at least two per side (baseline {}, candidate {})",
                    lb.len(),
                    lc.len()
                )));
            };
            let (qb, qc) = (vb / lb.len() as f64, vc / lc.len() as f64);
            let se2 = qb + qc;
            let den = qb * qb / (lb.len() - 1) as f64 + qc * qc / (lc.len() - 1) as f64;
            let df = if den > 0.0 {
                se2 * se2 / den
            } else {
                (lb.len() + lc.len() - 2) as f64
            };
            (se2, df)
        }
    };
    let p_value = if se2 > 0.0 {
        students_t_two_sided(diff / se2.sqrt(), df)?
    } else if diff != 0.0 {
        0.0
    } else {
        1.0
    };
    let relative_change = diff.exp() - 1.0;
    let verdict = call(p_value, alpha, relative_change, min_effect, better);
    Ok(RunChange {
        baseline: mean_b.exp(),
        candidate: mean_c.exp(),
        relative_change,
        p_value,
        df,
        pairing,
        verdict,
    })
}
