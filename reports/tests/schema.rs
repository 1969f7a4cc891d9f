//! The result-directory contract: round trip, v0 migration, rejection of newer versions.

mod common;

use pocketperf_reports::ReportError;
use pocketperf_reports::schema::*;

#[test]
fn write_then_load_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let r = common::hand_result();
    let path = write_result(dir.path(), &r).unwrap();
    assert_eq!(path, dir.path().join("result.json"));
    assert_eq!(load_result(dir.path()).unwrap(), r);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"schema_version\": 1"));
}

#[test]
fn optional_sections_may_be_absent() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = common::hand_result();
    r.performance = None;
    r.accuracy = None;
    r.energy = None;
    r.thermal = None;
    r.robustness = None;
    write_result(dir.path(), &r).unwrap();
    // Drop the null keys entirely, as a minimal writer would.
    let path = dir.path().join(RESULT_FILE);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let obj = v.as_object_mut().unwrap();
    for k in [
        "performance",
        "accuracy",
        "energy",
        "thermal",
        "governor",
        "robustness",
        "warnings",
    ] {
        obj.remove(k);
    }
    std::fs::write(&path, v.to_string()).unwrap();
    let back = load_result(dir.path()).unwrap();
    assert!(back.performance.is_none() && back.accuracy.is_none());
    assert!(back.warnings.is_empty());
}

const V0: &str = r#"{
  "tool_version": "0.0.3", "git_commit": "deadbeef", "device": "sim:snapdragon-8gen3",
  "device_name": "Sim 8 Gen 3", "model": "models/tiny.Q4_0.gguf", "model_sha256": "abc123",
  "backend": "cpu", "threads": 4,
  "started_utc": "2025-06-01T12:00:00Z", "finished_utc": "2025-06-01T12:01:00Z",
  "scenario": "SingleStream", "valid": true, "queries": 3, "duration_s": 1.5, "qps": 2.0,
  "tokens_per_s": 40.0,
  "latency_mean_ms": 500.0, "latency_min_ms": 400.0, "latency_max_ms": 600.0,
  "latency_p50_ms": 500.0, "latency_p90_ms": 600.0, "latency_p99_ms": 600.0,
  "samples": [
    {"latency_ms": 400.0, "ttft_ms": 100.0, "tokens": 11},
    {"latency_ms": 500.0, "ttft_ms": 120.0, "tokens": 20},
    {"latency_ms": 600.0, "ttft_ms": 140.0, "tokens": 1}
  ],
  "accuracy": 0.5, "accuracy_n": 10
}"#;

#[test]
fn v0_flat_layout_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(RESULT_FILE), V0).unwrap();
    let r = load_result(dir.path()).unwrap();
    assert_eq!(r.schema_version, 1);
    assert_eq!(r.meta.device.id, "sim:snapdragon-8gen3");
    assert_eq!(r.meta.device.name, "Sim 8 Gen 3");
    assert_eq!(r.meta.model.name, "tiny.Q4_0");
    assert_eq!(r.meta.model.sha256, "abc123");
    assert_eq!(r.meta.started_utc.to_rfc3339(), "2025-06-01T12:00:00+00:00");
    let p = r.performance.as_ref().unwrap();
    assert_eq!((p.queries, p.valid), (3, true));
    assert_eq!(
        (p.latency_ms.p50, p.latency_ms.p99, p.latency_ms.p999),
        (500.0, 600.0, 600.0)
    );
    assert_eq!(p.per_query.len(), 3);
    // TPOT = (latency - TTFT) / (tokens - 1): (400 - 100)/10 = 30, (500 - 120)/19 = 20;
    // a single-token query has none.
    assert_eq!(p.per_query[0].tpot_ms, Some(30.0));
    assert_eq!(p.per_query[1].tpot_ms, Some(20.0));
    assert_eq!(p.per_query[2].tpot_ms, None);
    // TTFT percentiles recomputed from the samples: sorted [100, 120, 140], p50 = s[1].
    let t = p.ttft_ms.unwrap();
    assert_eq!((t.n, t.p50, t.mean), (3, 120.0, 120.0));
    // TPOT percentiles from the two queries that have one: sorted [20, 30].
    let t = p.tpot_ms.unwrap();
    assert_eq!((t.n, t.p50, t.mean, t.max), (2, 30.0, 25.0, 30.0));
    let a = r.accuracy.as_ref().unwrap();
    assert_eq!((a.n, a.correct), (10, 5));
    // Wilson 5/10 at 95%: (0.2366, 0.7634).
    assert!(
        (a.ci95[0] - 0.2366).abs() < 1e-4 && (a.ci95[1] - 0.7634).abs() < 1e-4,
        "{:?}",
        a.ci95
    );
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("migrated from schema v0"))
    );
    // Writing the migrated result produces a v1 file that loads to the same value.
    let out = tempfile::tempdir().unwrap();
    write_result(out.path(), &r).unwrap();
    assert_eq!(load_result(out.path()).unwrap(), r);
}

#[test]
fn v0_missing_required_field_names_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(RESULT_FILE),
        V0.replace("\"qps\": 2.0,", ""),
    )
    .unwrap();
    let e = load_result(dir.path()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ReportError::Field { .. }), "{e:?}");
    assert!(msg.contains("qps") && msg.contains("result.json"), "{msg}");
}

#[test]
fn newer_schema_is_rejected_with_file_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let mut v = serde_json::to_value(common::hand_result()).unwrap();
    v["schema_version"] = serde_json::json!(7);
    std::fs::write(dir.path().join(RESULT_FILE), v.to_string()).unwrap();
    let e = load_result(dir.path()).unwrap_err();
    assert!(
        matches!(
            e,
            ReportError::NewerSchema {
                found: 7,
                supported: 1,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("result.json") && msg.contains('7'), "{msg}");
}

#[test]
fn corrupt_and_missing_files_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = load_result(dir.path()).unwrap_err();
    assert!(matches!(e, ReportError::Io { .. }));
    assert!(e.to_string().contains("result.json"));
    std::fs::write(
        dir.path().join(RESULT_FILE),
        "{\"schema_version\": 1, \"meta\": ",
    )
    .unwrap();
    let e = load_result(dir.path()).unwrap_err();
    assert!(matches!(e, ReportError::Json { .. }));
    assert!(e.to_string().contains("result.json"));
    std::fs::write(
        dir.path().join(RESULT_FILE),
        "{\"schema_version\": \"one\"}",
    )
    .unwrap();
    let e = load_result(dir.path()).unwrap_err();
    assert!(e.to_string().contains("schema_version"), "{e}");
}

#[test]
fn unknown_fields_are_tolerated() {
    // A file of the same version from a newer tool: an extra section, extra fields inside
    // known sections and inside a per-query record. Readers ignore them (docs/RESULTS.md).
    let dir = tempfile::tempdir().unwrap();
    let r = common::hand_result();
    write_result(dir.path(), &r).unwrap();
    let path = dir.path().join(RESULT_FILE);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["dialogue_trace"] = serde_json::json!({"turns": [1, 2, 3]});
    v["meta"]["device"]["soc"] = "SM8650".into();
    v["meta"]["governor_build"] = 7.into();
    v["performance"]["warmup_queries"] = 4.into();
    v["performance"]["per_query"][0]["kv_bytes"] = 123.into();
    v["energy"]["per_dialogue"][0]["rail"] = "cpu".into();
    std::fs::write(&path, v.to_string()).unwrap();
    assert_eq!(load_result(dir.path()).unwrap(), r);
}
