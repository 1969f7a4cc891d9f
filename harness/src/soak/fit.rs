//! Robust trend of a series: the Theil–Sen slope (median of pairwise slopes) with Sen's
//! distribution-free confidence interval (Sen 1968; Gilbert 1987, §16.5).
//!
//! Grouped form: points carry a group (here the server incarnation) and only pairs within a
//! group give slopes, so the drop of memory at a restart is not read as a trend; the
//! variance of Kendall's S is then the sum over groups. With N slopes and
//! `C = z · sqrt(Var S)`, `Var S = Σ n(n−1)(2n+5)/18`, the interval runs from the M1-th to
//! the (M2+1)-th smallest slope, `M1 = (N − C)/2`, `M2 = (N + C)/2` (rounded to the nearest
//! rank; no correction for ties). Groups larger than [`MAX_POINTS_PER_GROUP`] are thinned to
//! evenly spaced points first, so the cost stays bounded on a 72-hour run.

use serde::Serialize;

/// Points kept per group before pairing (≈ 2 M slopes per group).
pub const MAX_POINTS_PER_GROUP: usize = 2000;
/// Normal quantile of a two-sided 95% interval.
pub const Z95: f64 = 1.959964;

/// A Theil–Sen fit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TheilSen {
    /// Median pairwise slope.
    pub slope: f64,
    /// 95% interval of the slope.
    pub lo: f64,
    pub hi: f64,
    /// Median of `y − slope·x` (for drawing the line).
    pub intercept: f64,
    /// Points used and slopes formed.
    pub points: usize,
    pub pairs: usize,
}

/// Rank bounds (1-based, clamped to `1..=n_slopes`) of Sen's interval.
pub fn sen_ranks(n_slopes: usize, var_s: f64, z: f64) -> (usize, usize) {
    let c = z * var_s.max(0.0).sqrt();
    let n = n_slopes as f64;
    let m1 = ((n - c) / 2.0).round().max(1.0) as usize;
    let m2 = (((n + c) / 2.0).round() as usize + 1).min(n_slopes.max(1));
    (m1.min(n_slopes.max(1)), m2.max(m1.min(n_slopes.max(1))))
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn thin(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max {
        return points.to_vec();
    }
    (0..max)
        .map(|i| points[i * (points.len() - 1) / (max - 1)])
        .collect()
}

/// Theil–Sen over `(group, x, y)` points, pairing only within a group. `None` when no pair
/// has distinct x.
pub fn theil_sen_grouped(points: &[(u32, f64, f64)]) -> Option<TheilSen> {
    let mut groups: std::collections::BTreeMap<u32, Vec<(f64, f64)>> = Default::default();
    for &(g, x, y) in points {
        if x.is_finite() && y.is_finite() {
            groups.entry(g).or_default().push((x, y));
        }
    }
    let mut slopes = Vec::new();
    let mut var_s = 0.0;
    let mut used = Vec::new();
    for pts in groups.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let pts = thin(pts, MAX_POINTS_PER_GROUP);
        let n = pts.len() as f64;
        var_s += n * (n - 1.0) * (2.0 * n + 5.0) / 18.0;
        for i in 0..pts.len() {
            for j in i + 1..pts.len() {
                let dx = pts[j].0 - pts[i].0;
                if dx > 0.0 {
                    slopes.push((pts[j].1 - pts[i].1) / dx);
                }
            }
        }
        used.extend(pts);
    }
    if slopes.is_empty() {
        return None;
    }
    slopes.sort_by(f64::total_cmp);
    let slope = median_sorted(&slopes);
    let (m1, m2) = sen_ranks(slopes.len(), var_s, Z95);
    let mut resid: Vec<f64> = used.iter().map(|(x, y)| y - slope * x).collect();
    resid.sort_by(f64::total_cmp);
    Some(TheilSen {
        slope,
        lo: slopes[m1 - 1],
        hi: slopes[m2 - 1],
        intercept: median_sorted(&resid),
        points: used.len(),
        pairs: slopes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_line_gives_its_slope_and_a_point_interval() {
        let pts: Vec<(u32, f64, f64)> = (0..20)
            .map(|i| (0, i as f64, 3.0 + 2.0 * i as f64))
            .collect();
        let f = theil_sen_grouped(&pts).unwrap();
        assert_eq!((f.slope, f.lo, f.hi, f.intercept), (2.0, 2.0, 2.0, 3.0));
        assert_eq!(f.pairs, 190);
    }

    #[test]
    fn outliers_do_not_move_the_median_slope() {
        // y = x with 3 of 30 points thrown far off: least squares would tilt, the median of
        // slopes stays at 1 (most pairs are of clean points).
        let mut pts: Vec<(u32, f64, f64)> = (0..30).map(|i| (0, i as f64, i as f64)).collect();
        for k in [5usize, 17, 23] {
            pts[k].2 += 1000.0;
        }
        let f = theil_sen_grouped(&pts).unwrap();
        assert!((f.slope - 1.0).abs() < 1e-12, "{f:?}");
        assert!(f.lo <= 1.0 && f.hi >= 1.0);
    }

    #[test]
    fn restarts_are_not_a_trend() {
        // Two incarnations, each flat, the second lower: ungrouped this reads as a fall.
        let mut pts: Vec<(u32, f64, f64)> = (0..10).map(|i| (0, i as f64, 500.0)).collect();
        pts.extend((10..20).map(|i| (1, i as f64, 100.0)));
        let f = theil_sen_grouped(&pts).unwrap();
        assert_eq!(f.slope, 0.0);
        assert_eq!(f.pairs, 90);
    }

    #[test]
    fn sen_ranks_match_the_hand_computation() {
        // n = 10 points: N = 45 slopes, Var S = 10·9·25/18 = 125, C = 1.959964·√125 = 21.913;
        // M1 = (45 − 21.913)/2 = 11.54 → 12; M2 = (45 + 21.913)/2 = 33.46 → 33, upper rank 34.
        assert_eq!(sen_ranks(45, 125.0, Z95), (12, 34));
        // Tiny samples clamp to the extremes.
        assert_eq!(sen_ranks(1, 0.0, Z95), (1, 1));
        assert_eq!(sen_ranks(3, 100.0, Z95), (1, 3));
    }

    #[test]
    fn interval_covers_the_true_slope_of_noisy_data() {
        // Deterministic "noise" from a fixed sequence, slope 0.5.
        let noise = |i: usize| (((i * 7919) % 101) as f64 - 50.0) / 25.0;
        let pts: Vec<(u32, f64, f64)> = (0..200)
            .map(|i| (0, i as f64, 0.5 * i as f64 + noise(i)))
            .collect();
        let f = theil_sen_grouped(&pts).unwrap();
        assert!(f.lo <= 0.5 && 0.5 <= f.hi, "{f:?}");
        assert!((f.slope - 0.5).abs() < 0.01, "{f:?}");
        assert!(f.hi - f.lo < 0.05);
    }

    #[test]
    fn thinning_keeps_the_ends() {
        let pts: Vec<(f64, f64)> = (0..10_000).map(|i| (i as f64, 0.0)).collect();
        let t = thin(&pts, 100);
        assert_eq!(t.len(), 100);
        assert_eq!((t[0].0, t[99].0), (0.0, 9999.0));
    }
}
