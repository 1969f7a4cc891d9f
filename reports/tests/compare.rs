//! Comparison of several result directories against a baseline.

mod common;

use pocketperf_reports::{compare, write_result};

#[test]
fn two_runs_compare_with_ratios_and_render() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let base = common::hand_result();
    let mut other = common::hand_result();
    other.meta.device.id = "adb:R5CW123".into();
    other.meta.device.name = "Pixel <8>".into();
    // Twice as slow per token: tokens/s halves, latency p50 doubles.
    for q in &mut other.performance.as_mut().unwrap().per_query {
        q.latency_ms *= 2.0;
    }
    other.performance = Some(common::performance_from(
        other.performance.unwrap().per_query,
    ));
    other.accuracy = None;
    write_result(a.path(), &base).unwrap();
    write_result(b.path(), &other).unwrap();

    let c = compare(&[a.path(), b.path()], 0).unwrap();
    assert_eq!(c.runs.len(), 2);
    let row = |m: &str| c.rows.iter().find(|r| r.metric == m).unwrap();
    let p50 = row("latency_p50");
    assert_eq!(p50.cells[0].unwrap().value, 364.0);
    assert_eq!(p50.cells[0].unwrap().ratio, None);
    assert_eq!(p50.cells[1].unwrap().ratio, Some(2.0));
    assert!((row("tokens_per_s").cells[1].unwrap().ratio.unwrap() - 0.5).abs() < 1e-12);
    assert!(row("accuracy").cells[1].is_none());

    let ctx = common::fixed_ctx();
    let html = c.to_html(&ctx).unwrap();
    assert!(html.contains("Pixel &lt;8&gt;") && !html.contains("Pixel <8>"));
    assert!(html.contains("×2.000") && html.contains("<svg"));
    // The ratio's bootstrap interval (both runs resampled independently) brackets the ratio.
    let cell = p50.cells[1].unwrap();
    let (lo, hi) = (cell.ratio_lo.unwrap(), cell.ratio_hi.unwrap());
    assert!(1.5 < lo && lo < 2.0 && 2.0 < hi && hi < 2.7, "[{lo}, {hi}]");
    assert!(html.contains(&format!("×2.000 [{lo:.3}, {hi:.3}]")));
    assert!(html.contains("Median tokens per second per query"));
    assert!(html.contains("2026-01-02T03:04:05Z"));
    let csv = c.to_csv(&ctx);
    assert!(csv.starts_with("# schema_version=1\n# rendered_utc=2026-01-02T03:04:05Z\n"));
    assert!(
        csv.lines().any(
            |l| l.starts_with("1,adb:R5CW123 (Pixel <8>),adb:R5CW123,Pixel <8>,")
                && l.contains(",latency_p50,ms,728,")
                && l.contains(",2,")
        ),
        "{csv}"
    );
    let md = c.to_markdown(&ctx);
    assert!(md.contains("| latency_p50 | ms |") && md.contains("×2.000"));
    assert!(compare(&[a.path()], 1).is_err());
}

#[test]
fn compare_csv_and_markdown_snapshots() {
    let base = common::hand_result();
    let mut other = common::hand_result();
    other.meta.device.id = "sim:pixel-8-pro".into();
    other.meta.device.name = "Simulated Pixel 8 Pro".into();
    for (i, q) in other
        .performance
        .as_mut()
        .unwrap()
        .per_query
        .iter_mut()
        .enumerate()
    {
        q.latency_ms *= 1.0 + 0.01 * i as f64;
    }
    other.performance = Some(common::performance_from(
        other.performance.unwrap().per_query,
    ));
    let runs = vec![
        pocketperf_reports::compare::ComparedRun {
            label: base.label(),
            dir: "a".into(),
            result: base,
        },
        pocketperf_reports::compare::ComparedRun {
            label: other.label(),
            dir: "b".into(),
            result: other,
        },
    ];
    let c = pocketperf_reports::compare::compare_results(runs, 0).unwrap();
    let ctx = common::fixed_ctx();
    insta::assert_snapshot!("compare_csv", c.to_csv(&ctx));
    insta::assert_snapshot!("compare_markdown", c.to_markdown(&ctx));
}
