//! `--backend opencl` through the binary: the error without any OpenCL driver, the bench
//! rows with their per-token counters on PoCL (batched decode included), and Offline's
//! batched decoder with chunked prefill on PoCL.

use std::process::Command;

fn pocketperf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
}

#[test]
fn no_opencl_platform_is_one_clear_error_with_exit_code_2() {
    // An ICD loader pointed at an empty vendors directory sees no driver.
    let empty = tempfile::tempdir().unwrap();
    let out = pocketperf()
        .args(["logits", "--backend", "opencl", "--prompt-ids", "504,3575"])
        .env("OCL_ICD_VENDORS", empty.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no OpenCL platform found"), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{err}"
    );
}

#[test]
fn unknown_backend_and_unmatched_device_are_errors() {
    let out = pocketperf()
        .args(["logits", "--backend", "cuda", "--prompt-ids", "504"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected cpu or opencl"));
    let out = pocketperf()
        .args([
            "logits",
            "--backend",
            "opencl",
            "--cl-device",
            "no-such-device",
        ])
        .args(["--prompt-ids", "504"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cl-device") && err.contains("platform 0"),
        "{err}"
    );
}

#[test]
fn bench_reports_launches_and_bytes_per_token_on_pocl() {
    let out = pocketperf()
        .args([
            "bench",
            "--backend",
            "opencl",
            "--pp",
            "16",
            "--tg",
            "4",
            "--reps",
            "1",
            "--batch",
            "3",
        ])
        .args(["--output", "json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("weights upload"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    // three sequences decoded together on the device
    let batched = rows
        .iter()
        .find(|r| r["test"] == "tg4×3")
        .expect("batched row");
    assert_eq!(batched["backend"], "opencl");
    assert_eq!(batched["batch"], 3, "{batched}");
    assert!(
        batched["tokens_per_s_median"].as_f64().unwrap() > 0.0,
        "{batched}"
    );
    let layers = 30.0;
    for r in rows.iter().filter(|r| r["test"] != "tg4×3") {
        assert_eq!(r["backend"], "opencl");
        let c = &r["counters"];
        assert_eq!(c["weights_import"], "upload");
        let (phase, tokens) = if r["test"] == "tg4" {
            ("decode", 4)
        } else {
            ("prefill", 16)
        };
        let p = &c[phase];
        assert_eq!(p["tokens"], tokens, "{r}");
        let launches = p["launches"].as_f64().unwrap();
        if phase == "decode" {
            assert_eq!(launches, 5.0 * layers + 2.0, "{r}");
            assert_eq!(p["d2h_bytes"].as_f64().unwrap(), 49152.0 * 4.0);
        } else {
            // one call for all 16 tokens: the same launches, spread over them
            assert_eq!(launches, (5.0 * layers + 2.0) / 16.0, "{r}");
        }
        assert!(p["kernel_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// Offline on PoCL runs the batched decoder (continuous batching with chunked prefill) like
/// the CPU backend: every query completes with its preset output length, one tokens.csv row
/// per token, and result.json records the decoder.
#[test]
fn offline_on_opencl_decodes_its_queries_together_with_chunked_prefill() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("user.conf");
    std::fs::write(
        &cfg,
        "llm.*.min_query_count = 3\nllm.*.max_query_count = 3\n*.*.min_duration = 0\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = pocketperf()
        .args(["run", "--scenario", "offline", "--preset", "quick"])
        .args([
            "--backend",
            "opencl",
            "--prefill-chunk",
            "7",
            "--threads",
            "1",
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = pocketperf_reports::load_result(&out).unwrap();
    let d = &r.meta.settings["sut"]["decoder"];
    assert_eq!(d["kind"], "batched", "{d}");
    assert_eq!(d["prefill_chunk"], 7, "{d}");
    assert_eq!(d["slots"], 8, "OFFLINE_BATCH sequences in flight: {d}");
    let p = r.performance.unwrap();
    assert!(p.valid, "{:?}", p.invalid_reasons);
    assert_eq!(p.per_query.len(), 3);
    let csv = std::fs::read_to_string(out.join("tokens.csv")).unwrap();
    let rows = csv.lines().filter(|l| !l.starts_with('#')).count() - 1;
    let total: u64 = p.per_query.iter().map(|q| u64::from(q.tokens)).sum();
    assert_eq!(rows as u64, total);
    assert!(p.per_query.iter().all(|q| q.tokens > 1));
}
