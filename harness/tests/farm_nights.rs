//! The farm over nights ([`pocketperf::farm::nights`]): five nights, each 4% slower than the
//! one before (under the gate's 5% noise threshold, so every night passes against the
//! previous one), must be flagged by the rolling-window drift check by night 3 or 4; a night
//! that failed is never chosen as a baseline. Nights are the real SingleStream fixture with
//! its timings scaled, written and read back as a farm results root.

use std::path::Path;

use pocketperf::farm::nights::{self, BaselineRule, NightRules};
use pocketperf_reports::gate::{GateRules, GateStatus, gate};
use pocketperf_reports::schema::{ResultFile, load_result, write_result};

const DEVICE: &str = "pixel";
const STEP: &str = "single-stream";

fn fixture() -> ResultFile {
    load_result(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/tests/fixtures/real-singlestream-a"),
    )
    .unwrap()
}

/// The fixture with every timing scaled by `f` (throughput by 1/f).
fn scaled(f: f64) -> ResultFile {
    let mut r = fixture();
    let p = r.performance.as_mut().unwrap();
    for q in &mut p.per_query {
        q.latency_ms *= f;
        q.ttft_ms = q.ttft_ms.map(|t| t * f);
        q.tpot_ms = q.tpot_ms.map(|t| t * f);
    }
    r
}

/// Writes night `name`: the step's result and a `farm.json` saying the step ran (`ok`) and
/// what its gate said.
fn write_night(out: &Path, name: &str, r: &ResultFile, gate_status: &str) {
    write_result(out.join(name).join(DEVICE).join(STEP), r).unwrap();
    let farm = serde_json::json!({
        "devices": [{"name": DEVICE, "steps": [{"name": STEP, "status": "ok"}]}],
        "gates": [{"device": DEVICE, "step": STEP, "status": gate_status}],
    });
    std::fs::write(out.join(name).join("farm.json"), farm.to_string()).unwrap();
}

/// Night `name`'s verdict as the farm gives it: the gate against the baseline night the rule
/// picks, and drift against the window. Returns (gate status, drift flagged).
fn judge(out: &Path, name: &str, r: &ResultFile, rules: &NightRules) -> (Option<GateStatus>, bool) {
    let passing = nights::passing_nights(out, name, DEVICE, STEP);
    let drifted = nights::drift(out, &passing, DEVICE, STEP, r, rules)
        .iter()
        .any(|d| d.status == "regression");
    let status = nights::baseline_night(&rules.baseline, out, &passing, DEVICE, STEP)
        .ok()
        .map(|b| {
            let cand = tempfile::tempdir().unwrap();
            write_result(cand.path(), r).unwrap();
            gate(
                out.join(b).join(DEVICE).join(STEP),
                cand.path(),
                &GateRules::default(),
            )
            .status
        });
    (status, drifted)
}

#[test]
fn a_four_percent_nightly_slide_is_flagged_by_the_rolling_window() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let rules = NightRules::default();
    let mut first_flagged = None;
    for night in 1..=5u32 {
        let name = format!("2026-11-0{night}T020000Z");
        let r = scaled(1.04f64.powi(night as i32 - 1));
        let (_, drifted) = judge(out, &name, &r, &rules);
        // Against the night before, each step is within the 5% noise threshold: a gate that
        // only looks one night back never sees the slide.
        if night > 1 {
            let prev = format!("2026-11-0{}T020000Z", night - 1);
            let cand = tempfile::tempdir().unwrap();
            write_result(cand.path(), &r).unwrap();
            let o = gate(
                out.join(prev).join(DEVICE).join(STEP),
                cand.path(),
                &GateRules::default(),
            );
            assert_eq!(o.status, GateStatus::Pass, "night {night}: {}", o.to_text());
        }
        if drifted && first_flagged.is_none() {
            first_flagged = Some(night);
        }
        let status = if drifted {
            "regression"
        } else if night == 1 {
            "skipped"
        } else {
            "pass"
        };
        write_night(out, &name, &r, status);
    }
    let n = first_flagged.expect("the slide is flagged");
    assert!(n == 3 || n == 4, "first flagged on night {n}");
}

#[test]
fn a_failed_night_is_never_the_baseline_and_a_pinned_one_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    write_night(out, "2026-11-01T020000Z", &scaled(1.0), "skipped");
    write_night(out, "2026-11-02T020000Z", &scaled(1.3), "regression");
    let passing = nights::passing_nights(out, "2026-11-03T020000Z", DEVICE, STEP);
    assert_eq!(passing, ["2026-11-01T020000Z"]);
    let rule = BaselineRule::LatestPassing;
    assert_eq!(
        nights::baseline_night(&rule, out, &passing, DEVICE, STEP).unwrap(),
        "2026-11-01T020000Z"
    );
    // The night after the failed one, as slow as it, fails against the last good night.
    let rules = NightRules::default();
    let (status, _) = judge(out, "2026-11-03T020000Z", &scaled(1.3), &rules);
    assert_eq!(status, Some(GateStatus::Regression));
    // A pinned night is used as it is; one without this step's result is an error naming it.
    let pinned = BaselineRule::Pinned("2026-11-02T020000Z".into());
    assert_eq!(
        nights::baseline_night(&pinned, out, &passing, DEVICE, STEP).unwrap(),
        "2026-11-02T020000Z"
    );
    let missing = BaselineRule::Pinned("2026-10-01T020000Z".into());
    let e = nights::baseline_night(&missing, out, &passing, DEVICE, STEP).unwrap_err();
    assert!(e.contains("2026-10-01T020000Z"), "{e}");
}
