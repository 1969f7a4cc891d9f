//! `sample_stddev` against hand-computed values.

use pocketperf_stats::sample_stddev;

#[test]
fn stddev_of_two_and_four_is_root_two() {
    // mean 3, squared deviations 1 + 1 over n − 1 = 1: sd = √2.
    let sd = sample_stddev(&[2.0, 4.0]).unwrap();
    assert!((sd - 2f64.sqrt()).abs() < 1e-12, "{sd}");
}

#[test]
fn stddev_of_a_textbook_series() {
    // 2 4 4 4 5 5 7 9: mean 5, squared deviations sum to 32, 32 / 7 under the root.
    let sd = sample_stddev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
    assert!((sd - (32.0f64 / 7.0).sqrt()).abs() < 1e-12, "{sd}");
}

#[test]
fn stddev_needs_two_values() {
    assert_eq!(sample_stddev(&[]), None);
    assert_eq!(sample_stddev(&[3.0]), None);
    assert_eq!(sample_stddev(&[3.0, 3.0]), Some(0.0));
}
