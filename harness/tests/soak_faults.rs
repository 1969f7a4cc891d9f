//! Each injected fault, in a short soak of the real binary on a tiny synthetic model, is
//! detected and reported by the right check (and no other check fails because of it), and the
//! soak goes on past it. A clean soak passes the checks the faults target.

mod soak_util;

use std::path::Path;

use serde_json::Value;
use soak_util::{check, journal, mmlu_dir, of_type, robustness, run, tiny_model};

/// Runs a ~5-second soak with `extra` flags; returns (exit code, robustness.json, journal).
fn soak(dir: &Path, extra: &[&str]) -> (Option<i32>, Value, Vec<Value>) {
    let model = tiny_model(dir);
    let out = dir.join("soak");
    let mmlu = mmlu_dir();
    let (model, out_s, mmlu) = (
        model.display().to_string(),
        out.display().to_string(),
        mmlu.display().to_string(),
    );
    let mut args = vec![
        "soak",
        "--out",
        &out_s,
        "--model",
        &model,
        "--threads",
        "1",
        "--duration",
        "5s",
        "--dialogues",
        "2",
        "--max-turn-tokens",
        "4",
        "--probe-prompts",
        "2",
        "--probe-tokens",
        "4",
        "--probe-mmlu",
        "2",
        "--mmlu-dir",
        &mmlu,
        "--probe-every",
        "1s",
        "--rss-every",
        "0s",
        "--checkpoint-every",
        "2s",
        "--warmup",
        "0s",
    ];
    args.extend_from_slice(extra);
    let o = run(&args, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "soak failed: {:?}\n{stdout}\n{stderr}",
        o.status
    );
    (o.status.code(), robustness(&out), journal(&out))
}

fn verdict<'a>(doc: &'a Value, name: &str) -> &'a str {
    check(doc, name)["verdict"].as_str().unwrap()
}

/// The checks no fault of these tests should trip (stability and latency drift depend on the
/// machine's load and are not asserted).
fn assert_pass(doc: &Value, names: &[&str]) {
    for n in names {
        assert_eq!(verdict(doc, n), "pass", "{n}: {}", check(doc, n));
    }
}

#[test]
fn a_clean_soak_passes() {
    let dir = tempfile::tempdir().unwrap();
    // A 5-second soak cannot resolve 1 MiB/h (one 4 KiB page in 5 s is 2.8 MiB/h, and the
    // allocator settles over minutes): the clean run is held to 200 MiB/h, the leak below
    // grows hundreds of times faster than that.
    let (code, doc, j) = soak(dir.path(), &["--max-rss-growth", "200"]);
    assert_pass(&doc, &["crashes", "timeouts", "output_drift", "rss_growth"]);
    assert_eq!(doc["status"], "completed");
    assert!(
        doc["counts"]["queries"].as_u64().unwrap() >= 6,
        "{}",
        doc["counts"]
    );
    assert!(doc["counts"]["probe_rounds"].as_u64().unwrap() >= 2);
    assert_eq!(doc["crashes"], 0);
    assert_eq!(doc["drift"], 0);
    assert_eq!(of_type(&j, "sut_start").len(), 1);
    assert!(doc["faults_injected"].as_array().unwrap().is_empty());
    assert!(matches!(code, Some(0 | 1)));
    // Provenance of the run is in the report.
    assert_eq!(doc["schema"], "pocketperf-robustness");
    for k in [
        "tool_version",
        "git_commit",
        "model_sha256",
        "timestamp_utc",
        "settings",
    ] {
        assert!(!doc["provenance"][k].is_null(), "provenance.{k}");
    }
    let html = std::fs::read_to_string(dir.path().join("soak/robustness.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("rss_growth"));
}

#[test]
fn an_injected_crash_is_counted_and_the_soak_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (code, doc, j) = soak(dir.path(), &["--fault", "crash_after=7"]);
    assert_eq!(code, Some(1));
    assert_eq!(verdict(&doc, "crashes"), "fail");
    assert_pass(&doc, &["timeouts", "output_drift"]);
    let crashes = of_type(&j, "crash");
    assert!(!crashes.is_empty());
    let c = crashes[0];
    assert_eq!(c["exit"]["signal"], libc::SIGABRT);
    assert!(c["last_query"].as_str().unwrap().len() > 5, "{c}");
    let tail: Vec<&str> = c["stderr_tail"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        tail.iter().any(|l| l.contains("fault injection: crashing")),
        "{tail:?}"
    );
    // A new server after each crash, and completed work after the first one.
    assert!(of_type(&j, "sut_start").len() > crashes.len());
    let t_crash = c["t_s"].as_f64().unwrap();
    assert!(
        of_type(&j, "query")
            .iter()
            .any(|q| q["t_s"].as_f64().unwrap() > t_crash)
    );
    assert_eq!(doc["faults_injected"][0], "crash_after=7");
}

#[test]
fn an_injected_leak_fails_the_rss_check() {
    let dir = tempfile::tempdir().unwrap();
    let (code, doc, _) = soak(dir.path(), &["--fault", "leak_kib=1024"]);
    assert_eq!(code, Some(1));
    let c = check(&doc, "rss_growth");
    assert_eq!(c["verdict"], "fail", "{c}");
    // Many requests a second at 1 MiB each: far above the clean run's 200 MiB/h, interval
    // included.
    assert!(c["value"].as_f64().unwrap() > 2000.0, "{c}");
    assert!(c["interval"][0].as_f64().unwrap() > 200.0, "{c}");
    assert_pass(&doc, &["crashes", "timeouts", "output_drift"]);
}

#[test]
fn an_injected_output_flip_is_drift() {
    let dir = tempfile::tempdir().unwrap();
    // The first probe round has 4 requests; every request after it is altered.
    let (code, doc, _) = soak(dir.path(), &["--fault", "flip_after=4"]);
    assert_eq!(code, Some(1));
    assert_eq!(verdict(&doc, "output_drift"), "fail");
    let events = doc["drift_events"].as_array().unwrap();
    // Round 1 on: both greedy probes and both MMLU probes differ from round 0.
    assert!(events.len() >= 4, "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["probe_id"].as_str().unwrap().starts_with("mmlu/"))
    );
    assert!(
        events
            .iter()
            .all(|e| e["reference_round"] == 0 && e["round"].as_u64().unwrap() >= 1)
    );
    assert_pass(&doc, &["crashes", "timeouts"]);
}

#[test]
fn an_injected_stall_is_a_timeout_and_the_soak_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (code, doc, j) = soak(
        dir.path(),
        &[
            "--fault",
            "stall_after=9,stall_ms=60000",
            "--query-timeout",
            "1s",
        ],
    );
    assert_eq!(code, Some(1));
    assert_eq!(verdict(&doc, "timeouts"), "fail");
    assert_pass(&doc, &["crashes", "output_drift"]);
    let t = of_type(&j, "timeout");
    assert!(!t.is_empty());
    assert!(t[0]["waited_s"].as_f64().unwrap() >= 1.0);
    assert_eq!(
        t[0]["exit"]["signal"],
        libc::SIGKILL,
        "the harness killed the stalled server"
    );
    let t0 = t[0]["t_s"].as_f64().unwrap();
    assert!(
        of_type(&j, "query")
            .iter()
            .any(|q| q["t_s"].as_f64().unwrap() > t0)
    );
}

#[test]
fn memory_samples_that_all_fail_fail_the_memory_checks_instead_of_skipping_them() {
    let dir = tempfile::tempdir().unwrap();
    // Every `stats` request is refused: sampling was planned (every request after a 0 s
    // warm-up) and gave no figure, so nothing was measured and the run cannot pass.
    let (code, doc, j) = soak(dir.path(), &["--fault", "refuse_stats_after=0"]);
    assert_eq!(code, Some(1));
    for name in ["rss_growth", "major_faults"] {
        let c = check(&doc, name);
        assert_eq!(c["verdict"], "fail", "{c}");
        assert!(
            c["detail"]
                .as_str()
                .unwrap()
                .starts_with("planned by this soak, but no figure"),
            "{c}"
        );
    }
    assert!(of_type(&j, "rss").is_empty());
    let refused: Vec<&Value> = of_type(&j, "refused")
        .into_iter()
        .filter(|r| r["item"]["kind"] == "stats")
        .collect();
    assert!(!refused.is_empty());
    assert_eq!(
        doc["counts"]["stats_failed"].as_u64(),
        Some(refused.len() as u64)
    );
    // The server stayed up and the soak went on.
    assert_eq!(of_type(&j, "sut_start").len(), 1);
    assert_pass(&doc, &["crashes", "timeouts", "output_drift"]);
}
