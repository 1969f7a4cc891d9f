//! The release gate on realistic per-query samples, accuracy by McNemar and Wilson,
//! robustness counts, unreadable inputs, the committed rules file and the JUnit/Markdown
//! renderers.

mod common;

use std::path::Path;

use pocketperf_reports::gate::{CheckStatus, GateRules, gate_results};
use pocketperf_reports::schema::ResultFile;
use pocketperf_reports::{GateStatus, gate, write_result};

fn committed_rules() -> GateRules {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/gate.toml");
    GateRules::from_toml_file(path).unwrap()
}

fn dirs(base: &ResultFile, cand: &ResultFile) -> (tempfile::TempDir, tempfile::TempDir) {
    let (b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_result(b.path(), base).unwrap();
    write_result(c.path(), cand).unwrap();
    (b, c)
}

/// The default rules, accepting differences in `fields`, energy off: the hand result's two
/// dialogues are too few for the energy check, which would make every gate an error.
fn allowing(fields: &[&str]) -> GateRules {
    let mut r = GateRules::default();
    r.energy.enabled = false;
    r.comparability.allow_diff = fields.iter().map(|f| f.to_string()).collect();
    r.validate().expect("known field names");
    r
}

fn status_of(o: &pocketperf_reports::GateOutcome, name: &str) -> CheckStatus {
    o.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {o:?}"))
        .status
}

#[test]
fn committed_rules_are_the_defaults() {
    assert_eq!(committed_rules(), GateRules::default());
}

#[test]
fn ten_percent_tpot_regression_fails() {
    let (b, c) = dirs(
        &common::lognormal_result(1, 40.0),
        &common::lognormal_result(2, 44.0),
    );
    let o = gate(b.path(), c.path(), &committed_rules());
    assert_eq!(o.status, GateStatus::Regression, "{}", o.to_text());
    assert_eq!(o.exit_code(), 1);
    let tpot = o
        .checks
        .iter()
        .find(|c| c.name == "performance.tpot_ms")
        .unwrap();
    assert_eq!(tpot.status, CheckStatus::Regression);
    let change = tpot.change.unwrap();
    assert!((0.06..0.14).contains(&change), "relative change {change}");
    assert!(tpot.p_value.unwrap() < 0.01);
    // TTFT was drawn from the same distribution in both runs.
    assert_eq!(status_of(&o, "performance.ttft_ms"), CheckStatus::Pass);
    // Latency is dominated by 63 decode steps, so it regresses too; throughput drops.
    assert_eq!(
        status_of(&o, "performance.tokens_per_s"),
        CheckStatus::Regression
    );
}

#[test]
fn rerun_from_same_distribution_passes() {
    let (b, c) = dirs(
        &common::lognormal_result(11, 40.0),
        &common::lognormal_result(12, 40.0),
    );
    let o = gate(b.path(), c.path(), &committed_rules());
    assert_eq!(o.status, GateStatus::Pass, "{}", o.to_text());
    assert_eq!(o.exit_code(), 0);
    for name in [
        "performance.latency_ms",
        "performance.ttft_ms",
        "performance.tpot_ms",
        "performance.tokens_per_s",
    ] {
        assert_eq!(status_of(&o, name), CheckStatus::Pass);
    }
}

#[test]
fn tpot_regression_inside_noise_threshold_passes() {
    // 3% slower with 2000 queries each is statistically clear but below the 5% threshold.
    let mut base = common::lognormal_result(21, 40.0);
    let mut cand = common::lognormal_result(22, 41.2);
    base.performance.as_mut().unwrap().per_query = common::lognormal_queries(2000, 21, 150.0, 40.0);
    cand.performance.as_mut().unwrap().per_query = common::lognormal_queries(2000, 22, 150.0, 41.2);
    let o = gate_results(
        Path::new("b"),
        &base,
        Path::new("c"),
        &cand,
        &committed_rules(),
    );
    let tpot = o
        .checks
        .iter()
        .find(|c| c.name == "performance.tpot_ms")
        .unwrap();
    assert!(tpot.p_value.unwrap() < 0.01, "{tpot:?}");
    assert_eq!(tpot.status, CheckStatus::Pass);
}

#[test]
fn missing_or_corrupt_result_is_an_error_naming_the_file() {
    let good = tempfile::tempdir().unwrap();
    write_result(good.path(), &common::lognormal_result(1, 40.0)).unwrap();
    let empty = tempfile::tempdir().unwrap();
    let o = gate(good.path(), empty.path(), &GateRules::default());
    assert_eq!((o.status, o.exit_code()), (GateStatus::Error, 2));
    let msg = o.error.clone().unwrap();
    assert!(
        msg.contains(&empty.path().join("result.json").display().to_string()),
        "{msg}"
    );
    std::fs::write(empty.path().join("result.json"), "{ not json").unwrap();
    let o = gate(empty.path(), good.path(), &GateRules::default());
    assert_eq!(o.exit_code(), 2);
    assert!(o.error.as_deref().unwrap().contains("result.json"));
    let junit = o.to_junit(&common::fixed_ctx());
    assert!(
        junit.contains("<error message=") && junit.contains("errors=\"1\""),
        "{junit}"
    );
}

#[test]
fn candidate_missing_a_section_is_an_error() {
    let mut cand = common::hand_result();
    cand.accuracy = None;
    let o = gate_results(
        Path::new("b"),
        &common::hand_result(),
        Path::new("c"),
        &cand,
        &GateRules::default(),
    );
    assert_eq!(o.exit_code(), 2);
    assert_eq!(status_of(&o, "accuracy"), CheckStatus::Error);
}

fn accuracy_run(correct: &[bool]) -> ResultFile {
    let mut r = common::hand_result();
    let a = r.accuracy.as_mut().unwrap();
    a.per_question = correct
        .iter()
        .enumerate()
        .map(|(i, &c)| common::question("anatomy", i as u64, c, "B"))
        .collect();
    a.n = correct.len() as u64;
    a.correct = correct.iter().filter(|&&c| c).count() as u64;
    a.accuracy = a.correct as f64 / a.n as f64;
    r
}

#[test]
fn accuracy_drop_by_exact_mcnemar() {
    // 100 questions; baseline right on 0..80. Candidate loses 10 of those and gains 1:
    // b = 10, c = 1, p = 2 * (1 + 11)/2^11 = 0.01172 < 0.05; drop 9 points > 1.
    let base: Vec<bool> = (0..100).map(|i| i < 80).collect();
    let cand: Vec<bool> = (0..100).map(|i| (10..80).contains(&i) || i == 90).collect();
    let o = gate_results(
        Path::new("b"),
        &accuracy_run(&base),
        Path::new("c"),
        &accuracy_run(&cand),
        &GateRules::default(),
    );
    let a = o.checks.iter().find(|c| c.name == "accuracy").unwrap();
    assert_eq!(a.status, CheckStatus::Regression, "{a:?}");
    assert!((a.p_value.unwrap() - 24.0 / 2048.0).abs() < 1e-12);
    assert!((a.change.unwrap() + 0.09).abs() < 1e-12);
    // Losing 3 and gaining 1 (p = 2 * 5/16 = 0.625) is not significant.
    let cand: Vec<bool> = (0..100).map(|i| (3..80).contains(&i) || i == 90).collect();
    let o = gate_results(
        Path::new("b"),
        &accuracy_run(&base),
        Path::new("c"),
        &accuracy_run(&cand),
        &GateRules::default(),
    );
    assert_eq!(status_of(&o, "accuracy"), CheckStatus::Pass);
}

#[test]
fn accuracy_drop_by_wilson_without_pairs() {
    let mut base = accuracy_run(&[]);
    let mut cand = accuracy_run(&[]);
    let set = |r: &mut ResultFile, k: u64, n: u64| {
        let a = r.accuracy.as_mut().unwrap();
        (a.correct, a.n, a.accuracy) = (k, n, k as f64 / n as f64);
    };
    // 400/576 vs 300/576: Wilson 95% intervals [0.655, 0.731] and [0.480, 0.561] are disjoint.
    set(&mut base, 400, 576);
    set(&mut cand, 300, 576);
    let o = gate_results(
        Path::new("b"),
        &base,
        Path::new("c"),
        &cand,
        &GateRules::default(),
    );
    assert_eq!(status_of(&o, "accuracy"), CheckStatus::Regression);
    // 400 vs 390 overlap: pass.
    set(&mut cand, 390, 576);
    let o = gate_results(
        Path::new("b"),
        &base,
        Path::new("c"),
        &cand,
        &GateRules::default(),
    );
    assert_eq!(status_of(&o, "accuracy"), CheckStatus::Pass);
}

#[test]
fn robustness_counts_and_validity() {
    let mut cand = common::hand_result();
    cand.robustness = Some(serde_json::json!({"crashes": 2, "output_drift": 0}));
    cand.performance.as_mut().unwrap().valid = false;
    cand.performance.as_mut().unwrap().invalid_reasons = vec!["min_duration not met".into()];
    let o = gate_results(
        Path::new("b"),
        &common::hand_result(),
        Path::new("c"),
        &cand,
        &GateRules::default(),
    );
    assert_eq!(status_of(&o, "robustness.crashes"), CheckStatus::Regression);
    assert_eq!(status_of(&o, "robustness.drift"), CheckStatus::Pass);
    assert_eq!(status_of(&o, "performance.valid"), CheckStatus::Regression);
    // Twelve hand queries are above min_samples (8); two dialogues are below energy's 5: that
    // check cannot judge, which is an error rather than a pass.
    assert_eq!(
        status_of(&o, "energy.net_mwh_per_dialogue"),
        CheckStatus::Error
    );
    assert_eq!(o.exit_code(), 2);
    let mut rules = GateRules::default();
    rules.energy.enabled = false;
    let o = gate_results(
        Path::new("b"),
        &common::hand_result(),
        Path::new("c"),
        &cand,
        &rules,
    );
    assert_eq!(o.exit_code(), 1);
    let md = o.to_markdown(&common::fixed_ctx());
    assert!(md.starts_with("# PocketPerf gate: REGRESSION"));
    assert!(md.contains("min_duration not met"));
}

#[test]
fn a_gate_check_with_too_few_samples_is_not_a_pass() {
    let mut rules = GateRules::default();
    rules.energy.enabled = false;
    let mut few = common::hand_result();
    few.performance.as_mut().unwrap().per_query.truncate(3);
    let o = gate_results(Path::new("b"), &few, Path::new("c"), &few, &rules);
    let row = o
        .checks
        .iter()
        .find(|c| c.name == "performance.latency_ms")
        .unwrap();
    assert_eq!(row.status, CheckStatus::Error, "{row:?}");
    assert!(row.detail.contains("too few samples"), "{}", row.detail);
    assert_eq!(o.status, GateStatus::Error);
    assert_eq!(o.exit_code(), 2);
}

#[test]
fn a_gate_in_which_no_check_had_data_is_not_a_pass() {
    let mut bare = common::hand_result();
    bare.performance = None;
    bare.energy = None;
    bare.accuracy = None;
    bare.robustness = None;
    let o = gate_results(
        Path::new("b"),
        &bare,
        Path::new("c"),
        &bare,
        &GateRules::default(),
    );
    assert_eq!(status_of(&o, "evidence"), CheckStatus::Error);
    assert_eq!(o.exit_code(), 2);
    let md = o.to_markdown(&common::fixed_ctx());
    assert!(md.starts_with("# PocketPerf gate: ERROR"), "{md}");
}

#[test]
fn rules_reject_typos_and_bad_ranges() {
    let p = Path::new("rules.toml");
    let e = GateRules::from_toml_str("[performance]\nalpah = 0.05\n", p).unwrap_err();
    assert!(
        e.to_string().contains("rules.toml") && e.to_string().contains("alpah"),
        "{e}"
    );
    let e = GateRules::from_toml_str("[accuracy]\nalpha = 1.5\n", p).unwrap_err();
    assert!(e.to_string().contains("accuracy.alpha"), "{e}");
    let r = GateRules::from_toml_str("[performance]\nnoise_threshold = 0.1\n", p).unwrap();
    assert_eq!(r.performance.noise_threshold, 0.1);
    assert_eq!(r.performance.alpha, 0.01);
}

#[test]
fn junit_snapshot() {
    let mut cand = common::hand_result();
    cand.robustness = Some(serde_json::json!({"crashes": 1, "drift": 0}));
    cand.meta.device.name = "Sim <8 Gen 3> & \"friends\"".into();
    let o = gate_results(
        Path::new("runs/base"),
        &common::hand_result(),
        Path::new("runs/cand"),
        &cand,
        &allowing(&["device.name"]),
    );
    insta::assert_snapshot!(o.to_junit(&common::fixed_ctx()));
}

#[test]
fn markdown_snapshot() {
    let mut cand = common::hand_result();
    cand.robustness = Some(serde_json::json!({"crashes": 2, "drift": 0}));
    cand.meta.device.name = "Sim | pipe <b>".into();
    let o = gate_results(
        Path::new("runs/base"),
        &common::hand_result(),
        Path::new("runs/cand"),
        &cand,
        &allowing(&["device"]),
    );
    assert_eq!(o.exit_code(), 1);
    insta::assert_snapshot!(o.to_markdown(&common::fixed_ctx()));
}

#[test]
fn failed_outcome_is_an_error_in_every_format() {
    let o = pocketperf_reports::GateOutcome::failed("b", "c", "rules.toml: bad <key>");
    assert_eq!(o.exit_code(), 2);
    let junit = o.to_junit(&common::fixed_ctx());
    assert!(
        junit.contains("errors=\"1\"") && junit.contains("bad &lt;key&gt;"),
        "{junit}"
    );
    assert!(
        o.to_markdown(&common::fixed_ctx())
            .contains("**Error:** rules.toml: bad \\<key\\>")
    );
}

fn gate_pair(b: &ResultFile, c: &ResultFile, rules: &GateRules) -> pocketperf_reports::GateOutcome {
    gate_results(Path::new("b"), b, Path::new("c"), c, rules)
}

/// A run with the settings sections real runs write (`cli`, `test_settings`).
fn structured() -> ResultFile {
    let mut r = common::hand_result();
    r.meta.settings = serde_json::json!({
        "cli": {
            "preset": "quick", "max_tokens": 64, "out": "runs/a", "sut": "in-process",
            "engine": {"model": "smollm2-135m", "threads": 2,
                       "residency": {"mlock": false, "prefault": false}},
            "governor": {"governor": "off", "governor_sysfs_root": "/sys"}
        },
        "test_settings": {"scenario": "SingleStream", "min_query_count": 64, "qsl_rng_seed": 1}
    });
    r
}

/// Every field that defines the workload or the system makes two runs incomparable (exit 2,
/// the field named), unless allowed by its name or a name above it; output paths and the
/// build never do.
#[test]
fn each_workload_and_system_field_is_checked_before_statistics() {
    type Edit = fn(&mut ResultFile);
    let cases: [(&str, &str, Edit); 17] = [
        ("model", "model", |r| r.meta.model.sha256 = "f".repeat(64)),
        ("scenario", "scenario", |r| {
            r.meta.settings["test_settings"]["scenario"] = "Offline".into()
        }),
        ("settings.min_query_count", "settings", |r| {
            r.meta.settings["test_settings"]["min_query_count"] = 100.into()
        }),
        ("settings.qsl_rng_seed", "settings.qsl_rng_seed", |r| {
            r.meta.settings["test_settings"]["qsl_rng_seed"] = 2.into()
        }),
        ("cli.preset", "cli.preset", |r| {
            r.meta.settings["cli"]["preset"] = "full".into()
        }),
        ("cli.max_tokens", "cli", |r| {
            r.meta.settings["cli"]["max_tokens"] = 128.into()
        }),
        ("cli.governor.governor", "cli.governor", |r| {
            r.meta.settings["cli"]["governor"]["governor"] = "pid".into()
        }),
        ("cli.engine.residency.prefault", "cli.engine", |r| {
            r.meta.settings["cli"]["engine"]["residency"]["prefault"] = true.into()
        }),
        ("threads", "threads", |r| r.meta.threads = 1),
        ("backend", "backend", |r| r.meta.backend = "opencl".into()),
        ("isa", "isa", |r| r.meta.isa = "avx2".into()),
        ("device.id", "device", |r| {
            r.meta.device.id = "adb:XYZ".into()
        }),
        ("device.cpu", "device.cpu", |r| {
            r.meta.device.cpu = "other".into()
        }),
        ("device.os", "device", |r| {
            r.meta.device.os = "Android 15".into()
        }),
        ("sut", "sut", |r| {
            r.meta.settings["cli"]["sut"] = "process".into()
        }),
        // An OpenAI-compatible server is another system than the runtime in process ...
        ("sut", "sut", |r| {
            r.meta.settings["cli"]["sut"] = "http".into();
            r.meta.settings["sut"] = serde_json::json!({
                "kind": "http", "endpoint": "http://127.0.0.1:8080",
                "system": "http llamacpp SmolLM2-135M",
            });
        }),
        // ... whichever server it is.
        ("sut", "sut", |r| {
            r.meta.settings["sut"]["system"] = "http pocketperf 0.1.0 SmolLM2-135M".into();
        }),
    ];
    for (field, allow, edit) in cases {
        let base = structured();
        let mut cand = structured();
        edit(&mut cand);
        let o = gate_pair(&base, &cand, &GateRules::default());
        assert_eq!(o.exit_code(), 2, "{field}: {o:?}");
        let err = o.error.clone().unwrap_or_default();
        assert!(err.contains(field), "{field}: {err}");
        assert_eq!(
            status_of(&o, &format!("comparability.{field}")),
            CheckStatus::Error
        );
        let o = gate_pair(&base, &cand, &allowing(&[allow]));
        assert_eq!(o.exit_code(), 0, "{field} allowed by {allow}: {o:?}");
        assert_eq!(
            status_of(&o, &format!("comparability.{field}")),
            CheckStatus::Pass
        );
    }
    // The build, the output directory and the model's path are expected to differ.
    let base = structured();
    let mut cand = structured();
    cand.meta.git_commit = "0123456789ab".into();
    cand.meta.tool_version = "9.9.9".into();
    cand.meta.model.path = "/elsewhere/model.gguf".into();
    cand.meta.settings["cli"]["out"] = "runs/b".into();
    cand.meta.settings["cli"]["engine"]["model"] = "/elsewhere/model.gguf".into();
    cand.meta.settings["cli"]["governor"]["governor_sysfs_root"] = "/tmp/sys".into();
    let o = gate_pair(&base, &cand, &allowing(&[]));
    assert_eq!(o.exit_code(), 0, "{o:?}");
    assert!(!o.checks.iter().any(|c| c.name.starts_with("comparability")));
}

#[test]
fn unknown_allow_diff_names_are_refused() {
    let p = Path::new("gate.toml");
    let e = GateRules::from_toml_str("[comparability]\nallow_diff = [\"thread\"]\n", p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("comparability.allow_diff") && e.contains("thread"),
        "{e}"
    );
    for ok in [
        "threads",
        "settings.min_query_count",
        "cli.governor",
        "device.os",
    ] {
        let t = format!("[comparability]\nallow_diff = [\"{ok}\"]\n");
        GateRules::from_toml_str(&t, p).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in ["device.gpu", "threads.x", "cli.", "modell"] {
        let t = format!("[comparability]\nallow_diff = [\"{bad}\"]\n");
        assert!(GateRules::from_toml_str(&t, p).is_err(), "{bad}");
    }
}

/// Two HTTP runs: a different server or model is another system; the same server at another
/// address is the same one.
#[test]
fn http_suts_compare_by_server_and_model_not_address() {
    let http = |system: &str, endpoint: &str| {
        let mut r = structured();
        r.meta.settings["cli"]["sut"] = "http".into();
        r.meta.settings["sut"] = serde_json::json!({
            "kind": "http", "endpoint": endpoint, "system": system,
        });
        r
    };
    let ours = http("http pocketperf 0.1.0 SmolLM2", "http://127.0.0.1:8080");
    let moved = http("http pocketperf 0.1.0 SmolLM2", "http://127.0.0.1:9999");
    let theirs = http("http llamacpp SmolLM2", "http://127.0.0.1:8080");
    // Energy off: the hand result's two dialogues are too few for that check.
    let rules = allowing(&[]);
    let same = gate_pair(&ours, &moved, &rules);
    assert_eq!(same.exit_code(), 0, "{}", same.to_text());
    let o = gate_pair(&ours, &theirs, &rules);
    assert_eq!(o.exit_code(), 2, "{o:?}");
    assert_eq!(status_of(&o, "comparability.sut"), CheckStatus::Error);
}
