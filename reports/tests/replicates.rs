//! The gate on replicated runs (`run --repeat`, `gate --interleave`): synthetic runs whose
//! per-query samples share a run-level shift, as runs on a busy host do, and known effects.
//! One run per side cannot tell such a shift from a change; run-level statistics can.

mod common;

use std::path::{Path, PathBuf};

use chrono::Duration;
use pocketperf_reports::gate::{CheckStatus, GateRules, gate_dirs, gate_replicated, replicates};
use pocketperf_reports::schema::ResultFile;
use pocketperf_reports::{GateStatus, write_result};
use rand::{Rng, SeedableRng};

/// A run whose TPOT median is `median`, started `minute` minutes after the first run.
fn run(seed: u64, median: f64, minute: i64) -> ResultFile {
    let mut r = common::lognormal_result(seed, median);
    r.meta.started_utc += Duration::minutes(minute);
    r.meta.finished_utc += Duration::minutes(minute);
    r
}

/// Run-level shifts: a lognormal factor per run with a spread of `sd` (log scale).
fn shifts(seed: u64, n: usize, sd: f64) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let normal = rand_distr::Normal::new(0.0, sd).unwrap();
    (0..n).map(|_| rng.sample(normal).exp()).collect()
}

fn tpot_status(o: &pocketperf_reports::GateOutcome) -> (CheckStatus, String) {
    let c = o
        .checks
        .iter()
        .find(|c| c.name == "performance.tpot_ms")
        .unwrap_or_else(|| panic!("no tpot check: {}", o.to_text()));
    (c.status, c.detail.clone())
}

/// Five interleaved runs per side; run `i`'s TPOT median is `median` times `factor(i)`.
fn interleaved(
    seed: u64,
    base: f64,
    cand: f64,
    factor: &[f64],
) -> (Vec<ResultFile>, Vec<ResultFile>) {
    let b = (0..5)
        .map(|i| run(seed + 2 * i, base * factor[2 * i as usize], 2 * i as i64))
        .collect();
    let c = (0..5)
        .map(|i| {
            run(
                seed + 2 * i + 1,
                cand * factor[2 * i as usize + 1],
                2 * i as i64 + 1,
            )
        })
        .collect();
    (b, c)
}

#[test]
fn run_level_noise_fools_one_run_per_side_but_not_replicates() {
    // Same binary, same distribution of runs: each run's TPOT median is 40 ms times a run
    // factor with a 10% spread (log scale), as on a busy host. 200 A/A comparisons.
    let rules = GateRules::default();
    let (mut single_alarms, mut replicate_alarms) = (0, 0);
    for k in 0..200u64 {
        let s = shifts(1000 + k, 10, 0.10);
        let single = gate_replicated(
            Path::new("b"),
            &[run(10_000 + k, 40.0 * s[0], 0)],
            Path::new("c"),
            &[run(20_000 + k, 40.0 * s[1], 1)],
            &rules,
        );
        single_alarms += usize::from(tpot_status(&single).0 == CheckStatus::Regression);
        let (b, c) = interleaved(30_000 + 10 * k, 40.0, 40.0, &s);
        let o = gate_replicated(Path::new("b"), &b, Path::new("c"), &c, &rules);
        let (status, detail) = tpot_status(&o);
        assert!(
            detail.contains("paired t") && detail.contains("runs 5 / 5"),
            "{detail}"
        );
        replicate_alarms += usize::from(status == CheckStatus::Regression);
    }
    // One run per side: a regression whenever the second run drew a factor > 5% above the
    // first, about a third of the time. Replicates: p < 0.05 two-sided in the bad direction
    // (2.5%) and beyond the 5% minimum effect.
    eprintln!(
        "A/A: one run per side {single_alarms}/200 false alarms, replicates {replicate_alarms}/200"
    );
    assert!(
        single_alarms >= 60,
        "one run per side: {single_alarms} false alarms in 200"
    );
    assert!(
        replicate_alarms <= 10,
        "replicates: {replicate_alarms} false alarms in 200"
    );
}

#[test]
fn a_fifteen_percent_slowdown_is_caught_across_run_noise() {
    // Run factors with a 4% spread; the candidate is 15% slower. 100 A/B comparisons.
    let mut caught = 0;
    for k in 0..100u64 {
        let s = shifts(5000 + k, 10, 0.04);
        let (b, c) = interleaved(50_000 + 10 * k, 40.0, 46.0, &s);
        let o = gate_replicated(
            Path::new("b"),
            &b,
            Path::new("c"),
            &c,
            &GateRules::default(),
        );
        if tpot_status(&o).0 == CheckStatus::Regression {
            assert_eq!(o.status, GateStatus::Regression);
            caught += 1;
        }
    }
    eprintln!("A/B, 15% slower: caught {caught}/100");
    assert!(caught >= 95, "caught {caught} of 100");
}

#[test]
fn runs_that_do_not_alternate_are_compared_unpaired() {
    let b: Vec<ResultFile> = (0..3).map(|i| run(50 + i, 40.0, i as i64)).collect();
    let c: Vec<ResultFile> = (0..3).map(|i| run(60 + i, 40.0, 10 + i as i64)).collect();
    assert_eq!(
        replicates::pairing(&b, &c),
        pocketperf_stats::Pairing::Unpaired
    );
    let o = gate_replicated(
        Path::new("b"),
        &b,
        Path::new("c"),
        &c,
        &GateRules::default(),
    );
    assert!(tpot_status(&o).1.contains("Welch t"), "{}", o.to_text());
}

#[test]
fn a_directory_of_replicates_is_read_as_one_side() {
    let tmp = tempfile::tempdir().unwrap();
    let side = |name: &str, base: u64, median: f64, offset: i64| -> PathBuf {
        let dir = tmp.path().join(name);
        for i in 0..3u64 {
            write_result(
                dir.join(format!("run-{}", i + 1)),
                &run(base + i, median, 2 * i as i64 + offset),
            )
            .unwrap();
        }
        dir
    };
    let (b, c) = (side("base", 70, 40.0, 0), side("cand", 80, 40.0, 1));
    assert_eq!(replicates::expand(&b).unwrap().len(), 3);
    let o = gate_dirs(&[b], &[c], &GateRules::default());
    assert!(tpot_status(&o).1.contains("runs 3 / 3"), "{}", o.to_text());
    // A directory with neither result.json nor replicates is an error naming it.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let side = std::slice::from_ref(&empty);
    let o = gate_dirs(side, side, &GateRules::default());
    assert_eq!(o.exit_code(), 2);
    assert!(
        o.error
            .as_deref()
            .unwrap_or("")
            .contains("empty/result.json"),
        "{:?}",
        o.error
    );
}
