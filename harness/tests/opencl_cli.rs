//! `--backend opencl` through the binary: the error without any OpenCL driver, and the bench
//! rows with their per-token counters on PoCL.

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
        ])
        .args(["--output", "json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("weights upload"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let layers = 30.0;
    for r in rows {
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
