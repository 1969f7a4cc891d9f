//! `compare_runs` against closed forms: Student's t with one and two degrees of freedom has
//! an elementary tail (df 1: p = 1 − (2/π)·atan|t|; df 2: p = 1 − |t|/√(t² + 2)), so the
//! p-values below are computed by hand, not by the library under test.

use pocketperf_stats::{Better, Pairing, Verdict, compare_runs};

fn exps(logs: &[f64]) -> Vec<f64> {
    logs.iter().map(|l| l.exp()).collect()
}

#[test]
fn paired_two_runs_match_the_cauchy_tail() {
    // Log ratios 0.1 and 0.3: mean 0.2, sd 0.1414…, se 0.1, t = 2 with one degree of freedom.
    let c = compare_runs(
        &[1.0, 1.0],
        &exps(&[0.1, 0.3]),
        Pairing::Paired,
        Better::Lower,
        0.05,
        0.05,
    )
    .unwrap();
    let want = 1.0 - 2.0 / std::f64::consts::PI * 2f64.atan();
    assert!((c.p_value - want).abs() < 1e-9, "{} vs {want}", c.p_value);
    assert_eq!(c.df, 1.0);
    assert!((c.relative_change - (0.2f64.exp() - 1.0)).abs() < 1e-12);
    assert_eq!(c.verdict, Verdict::NoChange, "p = 0.295 is not significant");
}

#[test]
fn paired_three_runs_match_the_df2_tail() {
    // Log ratios 0.1, 0.2, 0.3 on different baselines: mean 0.2, variance 0.01, t = 2√3.
    let base = [40.0, 50.0, 60.0];
    let cand: Vec<f64> = base
        .iter()
        .zip([0.1f64, 0.2, 0.3])
        .map(|(b, d)| b * d.exp())
        .collect();
    let c = compare_runs(&base, &cand, Pairing::Paired, Better::Lower, 0.05, 0.05).unwrap();
    let t = 2.0 * 3f64.sqrt();
    let want = 1.0 - t / (t * t + 2.0).sqrt();
    assert!((c.p_value - want).abs() < 1e-9, "{} vs {want}", c.p_value);
    assert_eq!(c.df, 2.0);
}

#[test]
fn welch_with_equal_spreads_has_2n_minus_2_degrees_of_freedom() {
    // Logs {0, 0.2} and {0.3, 0.5}: variances 0.02 each, se² = 0.02, t = 0.3/√0.02, df 2.
    let c = compare_runs(
        &exps(&[0.0, 0.2]),
        &exps(&[0.3, 0.5]),
        Pairing::Unpaired,
        Better::Lower,
        0.05,
        0.05,
    )
    .unwrap();
    let t = 0.3 / 0.02f64.sqrt();
    let want = 1.0 - t / (t * t + 2.0).sqrt();
    assert!((c.df - 2.0).abs() < 1e-9, "df {}", c.df);
    assert!((c.p_value - want).abs() < 1e-9, "{} vs {want}", c.p_value);
    // Geometric means: e^0.1 and e^0.4.
    assert!((c.baseline - 0.1f64.exp()).abs() < 1e-12);
    assert!((c.candidate - 0.4f64.exp()).abs() < 1e-12);
}

#[test]
fn the_call_needs_significance_and_the_minimum_effect() {
    let base = [40.0, 41.0, 39.5, 40.5, 40.2];
    let scaled = |f: f64, jitter: [f64; 5]| -> Vec<f64> {
        base.iter()
            .zip(jitter)
            .map(|(b, j)| b * f * (1.0 + j))
            .collect()
    };
    let jitter = [0.004, -0.003, 0.002, -0.001, 0.0];
    // 15% slower, consistently: a regression for a latency, an improvement for a throughput.
    let slow = scaled(1.15, jitter);
    let c = compare_runs(&base, &slow, Pairing::Paired, Better::Lower, 0.05, 0.05).unwrap();
    assert_eq!(c.verdict, Verdict::Regressed, "{c:?}");
    let c = compare_runs(&base, &slow, Pairing::Paired, Better::Higher, 0.05, 0.05).unwrap();
    assert_eq!(c.verdict, Verdict::Improved, "{c:?}");
    // 3% slower, just as consistently: significant, but below the 5% minimum effect.
    let c = compare_runs(
        &base,
        &scaled(1.03, jitter),
        Pairing::Paired,
        Better::Lower,
        0.05,
        0.05,
    )
    .unwrap();
    assert!(c.p_value < 0.001, "{c:?}");
    assert_eq!(c.verdict, Verdict::NoChange, "{c:?}");
    // Identical runs: no spread and no change.
    let c = compare_runs(&base, &base, Pairing::Paired, Better::Lower, 0.05, 0.05).unwrap();
    assert_eq!((c.p_value, c.verdict), (1.0, Verdict::NoChange));
}

#[test]
fn bad_run_figures_and_counts_are_errors() {
    let e = compare_runs(
        &[1.0, 0.0],
        &[1.0, 2.0],
        Pairing::Paired,
        Better::Lower,
        0.05,
        0.05,
    )
    .unwrap_err();
    assert!(e.to_string().contains("baseline run figure 0"), "{e}");
    let e = compare_runs(
        &[1.0, 2.0],
        &[1.0],
        Pairing::Paired,
        Better::Lower,
        0.05,
        0.05,
    )
    .unwrap_err();
    assert!(e.to_string().contains("equal counts"), "{e}");
    let e = compare_runs(
        &[1.0],
        &[1.0, 2.0],
        Pairing::Unpaired,
        Better::Lower,
        0.05,
        0.05,
    )
    .unwrap_err();
    assert!(e.to_string().contains("at least two per side"), "{e}");
}
