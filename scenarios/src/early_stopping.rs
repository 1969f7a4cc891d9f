//! Early stopping: LoadGen's binomial bound (early_stopping.cc, results.cc) with confidence
//! 0.99 and tolerance 0, plus the planning answers behind `pocketperf early-stopping`.
//!
//! With `h` queries under a latency bound and `t` over it, the run passes when the
//! probability of seeing at most `t` over-bound queries among `h + t`, if the true
//! percentile sat exactly at the bound, is below `1 - c`. That probability is the binomial
//! CDF, written as the regularized incomplete beta `I_p(h, t + 1)` and evaluated through a
//! terminating Gauss hypergeometric series. The search for the smallest `h` brackets the
//! answer from previously computed `t` exactly like LoadGen does, so every (p, t) and
//! (p, n) pair comes out as LoadGen reports it.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// Confidence LoadGen uses for early stopping.
pub const CONFIDENCE: f64 = 0.99;
/// Tolerance LoadGen uses for early stopping.
pub const TOLERANCE: f64 = 0.0;
/// Highest percentile planned (99.99 %): beyond it the minimum query counts leave the range
/// the series evaluates accurately and stop meaning anything for an on-device run.
pub const MAX_PLAN_PERCENTILE: f64 = 0.9999;
/// Most queries `plan` answers for (the SingleStream rank scan costs one search per query).
pub const MAX_PLAN_QUERIES: u64 = 1_000_000;
/// Most queries over the bound `plan` answers for.
pub const MAX_PLAN_OVER_BOUND: u64 = 100_000;

/// ln Γ(n) for integer n ≥ 1: exact log-factorials below 20, Stirling's series above
/// (absolute error below 1e-15 for n ≥ 20).
fn ln_gamma_int(n: i64) -> f64 {
    if n < 20 {
        let mut f: u64 = 1;
        for k in 2..n.max(1) as u64 {
            f *= k;
        }
        return (f as f64).ln();
    }
    let x = n as f64;
    let x2 = x * x;
    let series = 1.0 / (12.0 * x) - 1.0 / (360.0 * x * x2) + 1.0 / (1260.0 * x * x2 * x2)
        - 1.0 / (1680.0 * x * x2 * x2 * x2);
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + series
}

fn ln_beta(a: i64, b: i64) -> f64 {
    ln_gamma_int(a) + ln_gamma_int(b) - ln_gamma_int(a + b)
}

/// 2F1(1, b; c; x) by its power series; terminates exactly when b ≤ 0.
fn hyp2f1_a1(b: i64, c: i64, x: f64) -> f64 {
    let tol = 1.0 / (1u64 << 33) as f64;
    let mut term = 1.0f64;
    let mut sum = 1.0f64;
    let mut i: i64 = 0;
    while term.abs() > tol {
        term *= ((b + i) as f64 * x) / (c + i) as f64;
        sum += term;
        i += 1;
    }
    sum
}

/// I_x(a, b) for integer a ≥ 1, b ≥ 1 (DLMF 8.17.8 with the 2F1 Pfaff transform).
fn beta_regularized(x: f64, a: i64, b: i64) -> f64 {
    let log_front = a as f64 * x.ln() + (b - 1) as f64 * (1.0 - x).ln() - ln_beta(a, b);
    log_front.exp() / a as f64 * hyp2f1_a1(1 - b, 1 + a, x / (x - 1.0))
}

/// Probability of at most `t` over-bound queries among `h + t` when each query is under
/// the bound with probability `p - d`.
pub fn pass_odds(h: i64, t: i64, p: f64, d: f64) -> f64 {
    beta_regularized(p - d, h, 1 + t)
}

fn search_min_passing(mut lo: i64, hi: i64, t: i64, p: f64, d: f64, c: f64) -> i64 {
    let mut count = hi - lo;
    while count > 0 {
        let step = count / 2;
        let h = lo + step;
        if pass_odds(h, t, p, d) < 1.0 - c {
            count = step;
        } else {
            lo = h + 1;
            count -= step + 1;
        }
    }
    lo
}

/// Smallest number of passing queries `h` for `t` failures, with LoadGen's caching and
/// bracketing (results depend only on (p, t) as long as the bracket holds, which it does
/// for the monotone odds; keeping the same bracket keeps ties identical).
#[derive(Debug, Default)]
pub struct MinPassingFinder {
    caches: Vec<(u64, BTreeMap<i64, i64>)>,
}

impl MinPassingFinder {
    /// An empty finder (no cached rows).
    pub fn new() -> Self {
        Self::default()
    }

    /// Minimum `h` with `pass_odds(h, t, p, 0) < 1 - 0.99`.
    pub fn min_passing(&mut self, t: i64, p: f64) -> i64 {
        let (d, c) = (TOLERANCE, CONFIDENCE);
        let key = p.to_bits();
        let idx = match self.caches.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.caches.push((key, BTreeMap::new()));
                self.caches.len() - 1
            }
        };
        let cache = &mut self.caches[idx].1;
        if let Some(&h) = cache.get(&t) {
            return h;
        }
        let (mut x0, mut y0) = (-1i64, 0i64);
        let mut x1 = 0i64;
        let mut y1 = ((1.0 - c).ln() / (p - d).ln()).ceil() as i64;
        let mut below = cache.range(..t).rev();
        if let Some((&k, &v)) = below.next() {
            x1 = k;
            y1 = v;
            if let Some((&k0, &v0)) = below.next() {
                x0 = k0;
                y0 = v0;
            }
        }
        let min_slope = (p - d) / (1.0 - p + d);
        let max_slope = ((y1 - y0) * (x1 - x0)) as f64;
        let lo = ((t - x1) as f64 * min_slope + y1 as f64) as i64;
        let hi = ((t - x1) as f64 * max_slope + y1 as f64 + 1.0) as i64;
        let h = search_min_passing(lo, hi, t, p, d, c);
        cache.insert(t, h);
        h
    }
}

fn check_p(p: f64) -> Result<()> {
    if p > 0.0 && p < 1.0 {
        Ok(())
    } else {
        Err(Error::EarlyStopping {
            percentile: p,
            reason: "percentile must be a fraction strictly between 0 and 1 (e.g. 0.9)".into(),
        })
    }
}

/// Minimum passing queries `h` with `t` queries over the bound (the Server rule: the run
/// passes when `n >= h + t`). Matches the `h` table of LoadGen's finder.
pub fn min_passing_queries(p: f64, t: u64) -> Result<u64> {
    check_p(p)?;
    Ok(MinPassingFinder::new().min_passing(t as i64, p) as u64)
}

/// Minimum total queries for a run with `over_bound` queries over the bound to pass.
pub fn min_queries_for_over_bound(p: f64, over_bound: u64) -> Result<u64> {
    Ok(min_passing_queries(p, over_bound)? + over_bound)
}

/// Minimum queries for SingleStream to give any early-stopping estimate at percentile `p`
/// (`h(1) + 1`).
pub fn min_queries_for_percentile(p: f64) -> Result<u64> {
    Ok(min_passing_queries(p, 1)? + 1)
}

/// SingleStream early-stopping rank for `n` processed queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EsRank {
    /// Enough queries: the estimate is the `t`-th largest latency, `sorted[index]`.
    Estimate {
        /// Rank from the top (1 = the maximum); `t - 1` highest latencies are discarded.
        t: u64,
        /// Index into the ascending latencies: `n - t`.
        index: u64,
        /// Minimum queries for any estimate (`h(1) + 1`).
        min_queries: u64,
    },
    /// Too few queries for an estimate.
    NotEnough {
        /// Minimum queries needed (`h(1) + 1`).
        min_queries: u64,
    },
}

/// LoadGen's SingleStream rank: the largest `t` with `n >= h(t) + t`, scanning t = 2, 3, …
/// with one finder so its cache brackets each step as LoadGen's does.
pub fn single_stream_rank(p: f64, n: u64) -> Result<EsRank> {
    check_p(p)?;
    let mut f = MinPassingFinder::new();
    Ok(rank_with(&mut f, p, n))
}

fn rank_with(f: &mut MinPassingFinder, p: f64, n: u64) -> EsRank {
    let n_i = n as i64;
    let h_min = f.min_passing(1, p);
    let min_queries = (h_min + 1) as u64;
    if n_i < h_min + 1 {
        return EsRank::NotEnough { min_queries };
    }
    let mut t = 1i64;
    for i in 2..=n_i {
        let h = f.min_passing(i, p);
        if n_i < h + i {
            t = i - 1;
            break;
        }
    }
    EsRank::Estimate {
        t: t as u64,
        index: (n_i - t) as u64,
        min_queries,
    }
}

fn pct_label(p: f64) -> String {
    format!("{:.1}", p * 100.0)
}

/// Early-stopping outcome of one latency series, with LoadGen's wording.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EarlyStoppingOutcome {
    /// Whether early stopping is satisfied.
    pub met: bool,
    /// LoadGen's multi-line text (lines joined by `\n`).
    pub text: String,
    /// SingleStream: the percentile estimate (ns), when available.
    pub estimate_ns: Option<u64>,
    /// SingleStream: the 99th-percentile estimate (ns), when enough queries ran.
    pub estimate_p99_ns: Option<u64>,
    /// Server: queries over the bound.
    pub over_bound: Option<u64>,
}

/// SingleStream early stopping over ascending `sorted` latencies (`n = sorted.len()`).
pub fn single_stream_outcome(sorted: &[u64], p: f64) -> EarlyStoppingOutcome {
    let n = sorted.len() as u64;
    let mut f = MinPassingFinder::new();
    let (t, min_q) = match rank_with(&mut f, p, n) {
        EsRank::NotEnough { min_queries } => {
            return EarlyStoppingOutcome {
                met: false,
                text: format!(
                    " * Only processed {n} queries.\n * Need to process at least {min_queries} \
                     queries for early stopping."
                ),
                estimate_ns: None,
                estimate_p99_ns: None,
                over_bound: None,
            };
        }
        EsRank::Estimate { t, min_queries, .. } => (t, min_queries),
    };
    let est = sorted[(n - t) as usize];
    let mut text = format!(
        " * Processed at least {min_q} queries ({n}).\n * Would discard {} highest latency \
         queries.\n * Early stopping {}th percentile estimate: {est}",
        t - 1,
        pct_label(p)
    );
    let p99 = 0.99;
    let mut f99 = MinPassingFinder::new();
    let est99 = match rank_with(&mut f99, p99, n) {
        EsRank::NotEnough { min_queries } => {
            text.push_str(&format!(
                "\n * Not enough queries processed for {}th percentile\n early stopping \
                 estimate (would need to process at\n least {min_queries} total queries).",
                pct_label(p99)
            ));
            None
        }
        EsRank::Estimate { t, .. } => {
            let e = sorted[(n - t) as usize];
            text.push_str(&format!(
                "\n * Early stopping {}th percentile estimate: {e}",
                pct_label(p99)
            ));
            Some(e)
        }
    };
    EarlyStoppingOutcome {
        met: true,
        text,
        estimate_ns: Some(est),
        estimate_p99_ns: est99,
        over_bound: None,
    }
}

/// Server early stopping: `t` = latencies strictly over `bound_ns`; passes when
/// `n >= h(t) + t`.
pub fn server_outcome(latencies: &[u64], bound_ns: u64, p: f64) -> EarlyStoppingOutcome {
    let n = latencies.len() as u64;
    let t = latencies.iter().filter(|&&l| l > bound_ns).count() as u64;
    let h = MinPassingFinder::new().min_passing(t as i64, p) as u64;
    if n >= h + t {
        EarlyStoppingOutcome {
            met: true,
            text: " * Run successful.".into(),
            estimate_ns: None,
            estimate_p99_ns: None,
            over_bound: Some(t),
        }
    } else {
        EarlyStoppingOutcome {
            met: false,
            text: format!(
                " * Run unsuccessful.\n * Processed {n} queries.\n * Would need to run at least \
                 {} more queries,\n with the run being successful if every additional\n query \
                 were under latency.",
                h + t - n
            ),
            estimate_ns: None,
            estimate_p99_ns: None,
            over_bound: Some(t),
        }
    }
}

/// Answer for a planned query count (`pocketperf early-stopping --queries N`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueriesPlan {
    /// Queries planned.
    pub queries: u64,
    /// SingleStream rank LoadGen would report: the estimate is the `rank`-th largest
    /// latency, `sorted_ascending[index]`, discarding `rank − 1`; `None` when too few.
    pub rank: Option<u64>,
    /// `queries − rank` when `rank` is given.
    pub index: Option<u64>,
    /// Server: the most queries that may exceed the bound for the run to pass (`None`: it
    /// cannot pass even with none over the bound).
    pub server_max_over_bound: Option<u64>,
}

/// Answer for a number of queries over the bound (`--over-bound T`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OverBoundPlan {
    /// Queries over the latency bound.
    pub over_bound: u64,
    /// Queries under the bound needed: LoadGen's `h(T)`.
    pub min_passing: u64,
    /// Total queries needed: `h(T) + T`.
    pub min_queries: u64,
}

/// What `pocketperf early-stopping --percentile P (--queries N | --over-bound T)` answers.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EarlyStoppingPlan {
    /// Percentile as a fraction.
    pub percentile: f64,
    /// Confidence (0.99).
    pub confidence: f64,
    /// Tolerance (0).
    pub tolerance: f64,
    /// Minimum queries for any SingleStream estimate at this percentile (`h(1) + 1`).
    pub min_queries_single_stream: u64,
    /// Minimum queries for a Server run with no query over the bound (`h(0)`).
    pub min_queries_server: u64,
    /// The `--queries` answer.
    pub queries: Option<QueriesPlan>,
    /// The `--over-bound` answer.
    pub over_bound: Option<OverBoundPlan>,
}

/// Largest `t` with `n >= h(t) + t` (the Server pass rule), by bisection: `h(t) + t` grows
/// strictly with `t`, and `h(t)` depends on `(p, t)` only.
fn server_max_over_bound(p: f64, n: u64) -> Option<u64> {
    let ok = |t: u64| n >= MinPassingFinder::new().min_passing(t as i64, p) as u64 + t;
    if !ok(0) {
        return None;
    }
    // h(t) >= t·p/(1 − p) (the finder's lower bracket), so no t above n·(1 − p) passes;
    // bounding the search there keeps every evaluation in the series' accurate range.
    let (mut lo, mut hi) = (0u64, ((n as f64 * (1.0 - p)) as u64).min(n));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

/// Answers the planning questions for percentile `p` (a fraction in (0, 1)).
/// `p` above [`MAX_PLAN_PERCENTILE`], `queries` above [`MAX_PLAN_QUERIES`] and `over_bound`
/// above [`MAX_PLAN_OVER_BOUND`] are refused.
pub fn plan(p: f64, queries: Option<u64>, over_bound: Option<u64>) -> Result<EarlyStoppingPlan> {
    check_p(p)?;
    let refuse = |reason: String| {
        Err(Error::EarlyStopping {
            percentile: p,
            reason,
        })
    };
    if p > MAX_PLAN_PERCENTILE + 1e-12 {
        return refuse("percentiles above 99.99 % are not planned".into());
    }
    if let Some(n) = queries.filter(|&n| n > MAX_PLAN_QUERIES) {
        return refuse(format!(
            "{n} queries: at most {MAX_PLAN_QUERIES} are planned"
        ));
    }
    if let Some(t) = over_bound.filter(|&t| t > MAX_PLAN_OVER_BOUND) {
        return refuse(format!(
            "{t} queries over the bound: at most {MAX_PLAN_OVER_BOUND} are planned"
        ));
    }
    let h1 = MinPassingFinder::new().min_passing(1, p) as u64;
    let h0 = MinPassingFinder::new().min_passing(0, p) as u64;
    let queries = match queries {
        Some(n) => {
            let (rank, index) = match single_stream_rank(p, n)? {
                EsRank::Estimate { t, index, .. } => (Some(t), Some(index)),
                EsRank::NotEnough { .. } => (None, None),
            };
            Some(QueriesPlan {
                queries: n,
                rank,
                index,
                server_max_over_bound: server_max_over_bound(p, n),
            })
        }
        None => None,
    };
    let over_bound = over_bound.map(|t| {
        let h = MinPassingFinder::new().min_passing(t as i64, p) as u64;
        OverBoundPlan {
            over_bound: t,
            min_passing: h,
            min_queries: h + t,
        }
    });
    Ok(EarlyStoppingPlan {
        percentile: p,
        confidence: CONFIDENCE,
        tolerance: TOLERANCE,
        min_queries_single_stream: h1 + 1,
        min_queries_server: h0,
        queries,
        over_bound,
    })
}

impl EarlyStoppingPlan {
    /// The plan as the lines `pocketperf early-stopping` prints.
    pub fn text(&self) -> String {
        let label = pct_label(self.percentile);
        let mut out = format!(
            "Early stopping at the {label}th percentile (confidence {}, tolerance {})\n\
             Minimum queries for a SingleStream estimate: {}\n\
             Minimum queries for a Server run with no query over the bound: {}\n",
            self.confidence,
            self.tolerance,
            self.min_queries_single_stream,
            self.min_queries_server
        );
        if let Some(q) = &self.queries {
            let n = q.queries;
            match (q.rank, q.index) {
                (Some(t), Some(i)) => out.push_str(&format!(
                    "With {n} queries: SingleStream reports the {} largest latency as the \
                     {label}th percentile estimate (sorted index {i}; discards the {} highest).\n",
                    ordinal(t),
                    t - 1
                )),
                _ => out.push_str(&format!(
                    "With {n} queries: too few for a SingleStream estimate; run at least {}.\n",
                    self.min_queries_single_stream
                )),
            }
            match q.server_max_over_bound {
                Some(a) => out.push_str(&format!(
                    "With {n} queries: a Server run passes with at most {a} queries over the \
                     bound.\n"
                )),
                None => out.push_str(&format!(
                    "With {n} queries: a Server run cannot pass even with no query over the \
                     bound (needs {}).\n",
                    self.min_queries_server
                )),
            }
        }
        if let Some(o) = &self.over_bound {
            out.push_str(&format!(
                "With {} queries over the bound: at least {} queries are needed ({} under the \
                 bound).\n",
                o.over_bound, o.min_queries, o.min_passing
            ));
        }
        out
    }
}

fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}
