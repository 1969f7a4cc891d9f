//! `pocketperf early-stopping --percentile P (--queries N | --over-bound T)`: plans a run
//! before it is made. With `--queries N` it prints the rank LoadGen's SingleStream early
//! stopping would report for N queries (the estimate is the t-th largest latency) and how
//! many queries a Server run may have over the bound; with `--over-bound T`, the queries a
//! run with T over the bound needs. Both print the minimum query count for the percentile.
//! The answers come from the scenario engine's early-stopping code, which reproduces
//! LoadGen's reference vectors exactly.

use anyhow::{Result, bail};
use clap::{ArgGroup, Args};
use pocketperf_scenarios::early_stopping;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("question").required(true).multiple(true).args(["queries", "over_bound"])))]
pub struct EarlyStoppingArgs {
    /// Target percentile, in percent as in LoadGen configs (90, 99, 99.9) or as a fraction
    /// below 1 (0.9).
    #[arg(long)]
    pub percentile: f64,
    /// Planned number of queries (at most 1 000 000).
    #[arg(long)]
    pub queries: Option<u64>,
    /// Number of queries over the latency bound (at most 100 000).
    #[arg(long)]
    pub over_bound: Option<u64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The percentile as a fraction: values of 1 and above are percent. At most 99.99 %
/// ([`early_stopping::MAX_PLAN_PERCENTILE`]).
pub fn percentile_fraction(p: f64) -> Result<f64> {
    let max = early_stopping::MAX_PLAN_PERCENTILE;
    let f = if p >= 1.0 { p / 100.0 } else { p };
    // The tolerance admits 99.99 itself, whose quotient by 100 rounds either way.
    if !p.is_finite() || p <= 0.0 || p >= 100.0 || f > max + 1e-12 {
        bail!(
            "--percentile {p}: expected a percentile in (0, 99.99], in percent (90, 99.9) or as \
             a fraction below 1 (0.9)"
        );
    }
    Ok(f)
}

pub fn run(a: &EarlyStoppingArgs) -> Result<i32> {
    let p = percentile_fraction(a.percentile)?;
    // The rank scan costs one search per query and the series grows with the count over the
    // bound: the limits keep an answer within seconds.
    for (flag, v, max) in [
        ("--queries", a.queries, early_stopping::MAX_PLAN_QUERIES),
        (
            "--over-bound",
            a.over_bound,
            early_stopping::MAX_PLAN_OVER_BOUND,
        ),
    ] {
        if let Some(v) = v.filter(|&v| v > max) {
            bail!("{flag} {v}: must be 0 to {max}");
        }
    }
    let plan = early_stopping::plan(p, a.queries, a.over_bound)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", plan.text());
    }
    Ok(0)
}
