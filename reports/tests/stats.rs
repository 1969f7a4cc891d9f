//! Statistics against hand-worked and textbook values.

use approx::assert_abs_diff_eq;
use pocketperf_reports::stats::*;

#[test]
fn loadgen_percentile_is_floor_n_p() {
    let s: Vec<f64> = (1..=10).map(f64::from).collect();
    // floor(10 * 0.5) = 5 -> sixth element; floor(10 * 0.9) = 9 -> tenth.
    assert_eq!(loadgen_percentile(&s, 0.5), Some(6.0));
    assert_eq!(loadgen_percentile(&s, 0.9), Some(10.0));
    assert_eq!(loadgen_percentile(&s, 0.999), Some(10.0));
    assert_eq!(loadgen_percentile(&[], 0.5), None);
    let p = Percentiles::from_samples(&[3.0, 1.0, 2.0, 4.0]).unwrap();
    assert_eq!(
        (p.n, p.min, p.max, p.mean, p.p50, p.p90),
        (4, 1.0, 4.0, 2.5, 3.0, 4.0)
    );
}

#[test]
fn median_and_quantiles() {
    assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&[]), None);
    let s = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 100.0];
    // Type 7: h = 9 * 0.25 = 2.25 -> 3 + 0.25 * (4 - 3).
    assert_abs_diff_eq!(quantile_linear(&s, 0.25).unwrap(), 3.25, epsilon = 1e-12);
}

#[test]
fn tukey_fences_report_without_dropping() {
    let s = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 100.0];
    let f = TukeyFences::classify(&s).unwrap();
    // q1 = 3.25, q3 = 7.75, IQR = 4.5.
    assert_abs_diff_eq!(f.q1, 3.25, epsilon = 1e-12);
    assert_abs_diff_eq!(f.q3, 7.75, epsilon = 1e-12);
    assert_abs_diff_eq!(f.high_mild, 14.5, epsilon = 1e-12);
    assert_abs_diff_eq!(f.high_severe, 21.25, epsilon = 1e-12);
    assert_abs_diff_eq!(f.low_mild, -3.5, epsilon = 1e-12);
    assert_eq!(
        (f.n_high_severe, f.n_high_mild, f.n_low_mild, f.n_low_severe),
        (1, 0, 0, 0)
    );
    assert_eq!(f.outliers(), 1);
    // 14.6 sits between the mild and severe fences.
    let g = TukeyFences::classify(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 14.6]).unwrap();
    assert!(g.high_mild < 14.6 && 14.6 < g.high_severe, "{g:?}");
    assert_eq!((g.n_high_mild, g.n_high_severe), (1, 0));
}

#[test]
fn mann_whitney_separated_samples() {
    // U1 = 0, mu = 12.5, var = 25/12 * 11 = 22.9167, z = (12.5 - 0.5)/4.78714 = 2.50671,
    // p = 2 * (1 - Phi(2.50671)) = 0.012185.
    let a = [1.0, 2.0, 3.0, 4.0, 5.0];
    let b = [6.0, 7.0, 8.0, 9.0, 10.0];
    let r = mann_whitney_u(&a, &b).unwrap();
    assert_eq!((r.u1, r.u2), (0.0, 25.0));
    assert_abs_diff_eq!(r.z, 2.50671, epsilon = 1e-4);
    assert_abs_diff_eq!(r.p_value, 0.012185, epsilon = 2e-5);
    // Symmetric in its arguments.
    let s = mann_whitney_u(&b, &a).unwrap();
    assert_eq!((s.u1, s.u2), (25.0, 0.0));
    assert_abs_diff_eq!(s.p_value, r.p_value, epsilon = 1e-15);
}

#[test]
fn mann_whitney_with_ties() {
    // Pooled ranks: 1 -> 1; the three 2s -> 3; the two 3s -> 5.5; 4 -> 7; 5 -> 8.
    // R_a = 1 + 3 + 3 + 5.5 = 12.5, U1 = 12.5 - 10 = 2.5.
    // Tie term = (27 - 3) + (8 - 2) = 30; var = 16/12 * (9 - 30/56) = 11.285714.
    // z = (|2.5 - 8| - 0.5)/3.359422 = 1.488351; p = 2 * (1 - Phi(1.488351)) = 0.13666.
    let a = [1.0, 2.0, 2.0, 3.0];
    let b = [2.0, 3.0, 4.0, 5.0];
    let r = mann_whitney_u(&a, &b).unwrap();
    assert_eq!(r.u1, 2.5);
    assert_abs_diff_eq!(r.z, 1.488351, epsilon = 1e-5);
    assert_abs_diff_eq!(r.p_value, 0.13666, epsilon = 5e-4);
}

#[test]
fn mann_whitney_identical_and_empty() {
    let r = mann_whitney_u(&[3.0; 5], &[3.0; 7]).unwrap();
    assert_eq!(r.p_value, 1.0);
    assert!(mann_whitney_u(&[], &[1.0]).is_err());
}

#[test]
fn wilson_textbook_values() {
    // 8/10 at 95%: (0.4902, 0.9433) (Wilson 1927; Newcombe 1998 table I).
    let (lo, hi) = wilson_interval(8, 10, Z95);
    assert_abs_diff_eq!(lo, 0.4902, epsilon = 1e-4);
    assert_abs_diff_eq!(hi, 0.9433, epsilon = 1e-4);
    // 0/10: lower bound 0, upper z^2/(n + z^2) = 3.8415/13.8415 = 0.2775.
    let (lo, hi) = wilson_interval(0, 10, Z95);
    assert_eq!(lo, 0.0);
    assert_abs_diff_eq!(hi, 0.2775, epsilon = 1e-4);
    assert_eq!(wilson_interval(0, 0, Z95), (0.0, 1.0));
}

#[test]
fn mcnemar_exact_binomial_tail() {
    // b = 1, c = 9: 2 * (C(10,0) + C(10,1)) / 2^10 = 22/1024.
    assert_abs_diff_eq!(mcnemar_exact(1, 9), 22.0 / 1024.0, epsilon = 1e-12);
    assert_abs_diff_eq!(mcnemar_exact(9, 1), 22.0 / 1024.0, epsilon = 1e-12);
    // b = 0, c = 5: 2 / 32.
    assert_abs_diff_eq!(mcnemar_exact(0, 5), 0.0625, epsilon = 1e-12);
    assert_eq!(mcnemar_exact(5, 5), 1.0);
    assert_eq!(mcnemar_exact(0, 0), 1.0);
    // Large counts stay finite: 400 vs 600 is far beyond chance.
    let p = mcnemar_exact(400, 600);
    assert!(p > 0.0 && p < 1e-9, "{p}");
}

#[test]
fn bootstrap_is_seeded_and_sized_right() {
    let s: Vec<f64> = (0..401).map(|i| f64::from(i) / 400.0 * 6.0 - 3.0).collect();
    let a = bootstrap_ci(&s, Statistic::Mean, 0.95, 2000, 42).unwrap();
    let b = bootstrap_ci(&s, Statistic::Mean, 0.95, 2000, 42).unwrap();
    assert_eq!(a, b);
    // Uniform on [-3, 3]: sd = 6/sqrt(12) = 1.732; the 95% half-width of the mean is about
    // 1.96 * 1.732 / sqrt(401) = 0.1695.
    assert_abs_diff_eq!(a.estimate, 0.0, epsilon = 1e-12);
    assert!(a.lo < 0.0 && a.hi > 0.0);
    assert_abs_diff_eq!((a.hi - a.lo) / 2.0, 0.1695, epsilon = 0.02);
    let c = bootstrap_ci(&s, Statistic::Mean, 0.95, 2000, 43).unwrap();
    assert_ne!(a, c);
    let m = bootstrap_ci(&[7.0; 9], Statistic::Median, 0.9, 100, 1).unwrap();
    assert_eq!((m.estimate, m.lo, m.hi, m.n), (7.0, 7.0, 7.0, 9));
    assert!(bootstrap_ci(&[], Statistic::Median, 0.95, 10, 1).is_err());
    assert!(bootstrap_ci(&[1.0], Statistic::Median, 1.0, 10, 1).is_err());
}

#[test]
fn change_needs_significance_and_size() {
    let base: Vec<f64> = (0..100).map(|i| 1000.0 + f64::from(i) * 0.01).collect();
    // +3%: perfectly separated (p tiny) but inside the 5% noise band.
    let small: Vec<f64> = base.iter().map(|x| x * 1.03).collect();
    let c = compare_samples(&base, &small, Better::Lower, 0.01, 0.05).unwrap();
    assert!(c.p_value < 1e-10);
    assert_abs_diff_eq!(c.relative_change, 0.03, epsilon = 1e-9);
    assert_eq!(c.verdict, Verdict::NoChange);
    // +10%: a regression when lower is better, an improvement when higher is better.
    let big: Vec<f64> = base.iter().map(|x| x * 1.10).collect();
    assert_eq!(
        compare_samples(&base, &big, Better::Lower, 0.01, 0.05)
            .unwrap()
            .verdict,
        Verdict::Regressed
    );
    assert_eq!(
        compare_samples(&base, &big, Better::Higher, 0.01, 0.05)
            .unwrap()
            .verdict,
        Verdict::Improved
    );
    // A large median shift on three points is not significant.
    let c = compare_samples(
        &[1.0, 2.0, 3.0],
        &[2.0, 3.0, 4.0],
        Better::Lower,
        0.01,
        0.05,
    )
    .unwrap();
    assert_eq!(c.verdict, Verdict::NoChange);
}

#[test]
fn ratio_bootstrap_brackets_the_true_ratio() {
    use rand::SeedableRng;
    use rand_distr::{Distribution, LogNormal};
    // Constant samples: every resample gives exactly 20 / 10.
    let ci = bootstrap_ratio_ci(&[10.0; 7], &[20.0; 9], Statistic::Median, 0.95, 500, 1).unwrap();
    assert_eq!((ci.estimate, ci.lo, ci.hi, ci.n), (2.0, 2.0, 2.0, 9));
    // Log-normal samples with medians e^3 and 1.2·e^3: the true ratio of medians is 1.2.
    // Over 40 independent draws of 200 + 200 samples, the 95% interval must miss 1.2 rarely
    // (the expected count is 2; 8 or more would mean the interval is far too narrow).
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let base = LogNormal::new(3.0, 0.3).unwrap();
    let cand = LogNormal::new(3.0 + 1.2f64.ln(), 0.3).unwrap();
    let mut misses = 0;
    for seed in 0..40 {
        let b: Vec<f64> = (0..200).map(|_| base.sample(&mut rng)).collect();
        let c: Vec<f64> = (0..200).map(|_| cand.sample(&mut rng)).collect();
        let ci = bootstrap_ratio_ci(&b, &c, Statistic::Median, 0.95, 400, seed).unwrap();
        assert!(ci.lo <= ci.estimate && ci.estimate <= ci.hi);
        if !(ci.lo <= 1.2 && 1.2 <= ci.hi) {
            misses += 1;
        }
    }
    assert!(misses < 8, "{misses} of 40 intervals missed the true ratio");
    assert!(bootstrap_ratio_ci(&[], &[1.0], Statistic::Mean, 0.95, 10, 0).is_err());
    assert!(bootstrap_ratio_ci(&[0.0, 0.0], &[1.0], Statistic::Mean, 0.95, 10, 0).is_err());
}
