//! Residency, cold start, warm-up and page faults through the binary, on a private copy of
//! the reference model (a file no other process maps, on the target directory's disk, so
//! eviction is real): `--mlock` refused under a lowered `RLIMIT_MEMLOCK` without
//! `CAP_IPC_LOCK` names the limit and the bytes; `run --warmup --cold-start` keeps warm-up
//! queries out of the timed results and records residency and faults; `--sut process`
//! counts the child's faults and, cold, reads the weights from the file; `bench --cold` evicts, then sees residency rise.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn reference_model() -> PathBuf {
    pocketperf_testkit::reference_model(|| {
        pocketperf::model_store::reference_model_path().expect("model cache directory")
    })
}

/// A copy of the reference model in a fresh directory on disk.
fn private_model() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = dir.path().join("model.gguf");
    std::fs::copy(reference_model(), &p).unwrap();
    std::fs::File::open(&p).unwrap().sync_all().unwrap();
    (dir, p)
}

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

fn pocketperf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(args)
        .output()
        .expect("pocketperf runs")
}

/// `pocketperf generate` under `prlimit --memlock=65536` with `CAP_IPC_LOCK` dropped from the
/// bounding and inheritable sets, so even root is held to the limit.
fn generate_limited(model: &Path, extra: &[&str]) -> Output {
    let m = model.to_str().unwrap();
    Command::new("prlimit")
        .args(["--memlock=65536", "setpriv", "--bounding-set=-ipc_lock"])
        .args(["--inh-caps=-ipc_lock", env!("CARGO_BIN_EXE_pocketperf")])
        .args([
            "generate",
            "--model",
            m,
            "--threads",
            "1",
            "--max-tokens",
            "1",
        ])
        .args(["--prompt", "Hello"])
        .args(extra)
        .output()
        .expect("prlimit and setpriv run (util-linux)")
}

#[test]
fn mlock_under_a_lowered_memlock_limit_fails_naming_the_limit_and_the_bytes() {
    let model = reference_model();
    let bytes = std::fs::metadata(&model).unwrap().len();
    let o = generate_limited(&model, &["--mlock"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("RLIMIT_MEMLOCK"), "{err}");
    assert!(err.contains("is 65536 bytes (soft)"), "{err}");
    assert!(err.contains(&format!("{bytes} are needed")), "{err}");
    assert!(err.contains(model.to_str().unwrap()), "{err}");
    // The same limits without --mlock: the model loads and generates.
    let o = generate_limited(&model, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

const THREE_QUERIES: &str = "\
llm.*.min_query_count = 3
llm.*.max_query_count = 3
*.*.min_duration = 0
";

/// A three-query SingleStream run; returns its output, result.json, the detail log and the
/// pid of the harness process.
fn run(model: &Path, dir: &Path, extra: &[&str]) -> (Output, Value, String, u32) {
    let cfg = dir.join("user.conf");
    std::fs::write(&cfg, THREE_QUERIES).unwrap();
    let out = dir.join("out");
    let mut args = vec![
        "run",
        "--scenario",
        "single-stream",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--threads",
        "1",
        "--model",
        model.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let child = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pocketperf runs");
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    // Three queries are too few for early stopping: INVALID, exit 1, but a full result.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let detail = std::fs::read_to_string(out.join("mlperf_log_detail.txt")).unwrap();
    // The reports crate loads it.
    pocketperf_reports::schema::load_result(&out).expect("result.json loads");
    (o, result, detail, pid)
}

#[test]
fn warm_up_and_a_cold_first_query_are_recorded_apart_from_the_timed_queries() {
    let (dir, model) = private_model();
    let (_, r, detail, pid) = run(&model, dir.path(), &["--warmup", "2", "--cold-start"]);
    let p = &r["performance"];
    // The timed pass has exactly its three queries; the two warm-up queries are apart.
    assert_eq!(p["queries"], 3);
    assert_eq!(p["latency_ms"]["n"], 3);
    let ids: Vec<u64> = p["per_query"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [0, 1, 2]);
    let w = &p["warmup"];
    assert_eq!(w["queries"], 2);
    let wq = w["per_query"].as_array().unwrap();
    assert_eq!(wq.len(), 2);
    for q in wq {
        assert!(q["latency_ms"].as_f64().unwrap() > 0.0);
        assert!(q["major_faults"].is_u64() && q["minor_faults"].is_u64());
    }
    assert!(detail.contains("\"pocketperf_warmup_query_count\", \"value\": 2"));
    assert_eq!(detail.matches("\"pocketperf_warmup_query\"").count(), 2);
    assert_eq!(detail.matches("\"pocketperf_query_faults\"").count(), 5);

    let m = &r["memory"];
    assert_eq!(m["mlock"], false);
    assert_eq!(m["prefault"], false);
    let c = &m["cold_start"];
    let after_evict = c["resident_after_eviction"].as_f64().unwrap();
    let after_first = c["resident_after_first_query"].as_f64().unwrap();
    assert!(after_evict < 0.10, "{c}");
    // The first query read the weights in.
    assert!(after_first > after_evict + 0.3, "{c}");
    assert!(
        c["resident_at_end"].as_f64().unwrap() >= after_first - 0.05,
        "{c}"
    );
    // The cold first query is the first warm-up query.
    assert_eq!(c["first_query_latency_ms"], wq[0]["latency_ms"]);
    // Reading the weights back from storage took major faults, in this process.
    let f = &m["page_faults"];
    assert_eq!(f["process"], "self");
    assert_eq!(f["pid"], pid);
    assert!(f["minor"].as_u64().unwrap() > 0);
    assert!(c["first_query_major_faults"].as_u64().unwrap() > 0, "{c}");
    // Per-query figures add up to no more than the run's.
    let sum: u64 = wq
        .iter()
        .chain(p["per_query"].as_array().unwrap())
        .map(|q| q["major_faults"].as_u64().unwrap())
        .sum();
    assert!(sum <= f["major"].as_u64().unwrap(), "{sum} vs {f}");
}

#[test]
fn the_child_sut_has_its_faults_counted_under_its_own_pid_and_a_cold_start_reads_the_file() {
    let (dir, model) = private_model();
    let (o, r, _, harness) = run(
        &model,
        dir.path(),
        &["--sut", "process", "--warmup", "0", "--cold-start"],
    );
    // The child made no copies of the weights at load (they would have read the file before
    // the eviction): its first query read them from storage.
    let c = &r["memory"]["cold_start"];
    let after_evict = c["resident_after_eviction"].as_f64().unwrap();
    let after_first = c["resident_after_first_query"].as_f64().unwrap();
    assert!(after_evict < 0.10, "{c}");
    assert!(after_first > after_evict + 0.3, "{c}");
    assert!(c["first_query_major_faults"].as_u64().unwrap() > 0, "{c}");
    let f = &r["memory"]["page_faults"];
    assert_eq!(f["process"], "child", "{}", text(&o));
    // The server's pid, neither the harness's nor this test's.
    let pid = f["pid"].as_u64().unwrap();
    assert_ne!(pid, u64::from(harness));
    assert_ne!(pid, u64::from(std::process::id()));
    assert!(f["minor"].as_u64().unwrap() > 0, "{f}");
    let mut sum = 0;
    for q in r["performance"]["per_query"].as_array().unwrap() {
        sum += q["minor_faults"].as_u64().unwrap();
    }
    assert!(sum <= f["minor"].as_u64().unwrap(), "{sum} vs {f}");
}

#[test]
fn bench_cold_evicts_then_residency_rises_and_the_warm_start_finds_the_file_cached() {
    let (_dir, model) = private_model();
    let o = pocketperf(&[
        "bench",
        "--cold",
        "--startup-runs",
        "1",
        "--pp",
        "0",
        "--tg",
        "0",
        "--batch",
        "0",
        "--probe-mib",
        "0",
        "--threads",
        "1",
        "--output",
        "json",
        "--model",
        model.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = doc["cold_start"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let (cold, warm) = (&runs[0], &runs[1]);
    assert_eq!(cold["cold"], true);
    assert_eq!(warm["cold"], false);
    let after = cold["eviction"]["after"].as_f64().unwrap();
    assert!(after < 0.10, "{cold}");
    let first = cold["resident_first_token"].as_f64().unwrap();
    assert!(first > after + 0.3, "{cold}");
    assert!(cold["major_faults"].as_u64().unwrap() > 0, "{cold}");
    assert!(warm["resident_mapped"].as_f64().unwrap() > 0.9, "{warm}");
    for r in runs {
        let t = |k: &str| r[k].as_f64().unwrap();
        assert!(t("to_main_ms") > 0.0);
        assert!(t("to_main_ms") <= t("to_mapped_ms"), "{r}");
        assert!(t("to_mapped_ms") <= t("to_first_token_ms"), "{r}");
        assert!(t("to_first_token_ms") <= t("to_last_token_ms"), "{r}");
        assert_eq!(r["tokens"], 32);
    }
    assert_eq!(doc["header"]["settings"]["cold"], true);
}
