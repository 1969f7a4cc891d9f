//! The LoadGen config loader: precedence, units, and refusals with file and line.

use std::io::Write;

use pocketperf_scenarios::{Error, Scenario, TestMode, TestSettings};

fn load(text: &str, model: &str, scenario: Scenario) -> Result<TestSettings, Error> {
    let mut s = TestSettings::new(scenario);
    s.apply_config_str(text, "user.conf", model)?;
    Ok(s)
}

fn config_err(text: &str) -> (String, usize, String, String) {
    match load(text, "llama", Scenario::SingleStream) {
        Err(Error::Config {
            file,
            line,
            key,
            reason,
        }) => (file, line, key, reason),
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn specific_lines_override_wildcards_regardless_of_order() {
    let text = "\
# comment line
llama.Server.target_qps = 12.5
*.Server.target_qps = 3
llama.*.target_qps = 4
*.*.target_qps = 5   # trailing comment
*.Server.target_latency = 250
*.*.min_duration = 60000
llama.*.min_duration = 30000
*.Offline.target_qps = 99
";
    let s = load(text, "llama", Scenario::Server).unwrap();
    assert_eq!(s.server_target_qps, 12.5, "exact beats every wildcard");
    assert_eq!(s.server_target_latency_ns, 250_000_000, "ms -> ns");
    assert_eq!(s.min_duration_ms, 30_000, "model.* beats *.*");
    assert_eq!(s.offline_expected_qps, 1.0, "other scenario untouched");
    // Another model only sees wildcards: *.scenario beats model.* and *.*.
    let s = load(text, "other", Scenario::Server).unwrap();
    assert_eq!(s.server_target_qps, 3.0);
    assert_eq!(s.min_duration_ms, 60_000);
    // Offline reads target_qps as its expected qps.
    let s = load(text, "other", Scenario::Offline).unwrap();
    assert_eq!(s.offline_expected_qps, 99.0);
}

#[test]
fn later_line_of_equal_rank_wins_and_user_conf_overrides_mlperf_conf() {
    let s = load(
        "*.*.min_query_count = 10\n*.*.min_query_count = 20\n",
        "m",
        Scenario::Offline,
    )
    .unwrap();
    assert_eq!(s.min_query_count, 20);
    let dir = tempfile::tempdir().unwrap();
    let mlperf = dir.path().join("mlperf.conf");
    let user = dir.path().join("user.conf");
    std::fs::File::create(&mlperf)
        .unwrap()
        .write_all(b"m.SingleStream.target_latency_percentile = 90\nm.SingleStream.min_query_count = 1024\n")
        .unwrap();
    std::fs::File::create(&user)
        .unwrap()
        .write_all(b"*.*.min_query_count = 64\n")
        .unwrap();
    let s =
        TestSettings::from_config_files(&[&mlperf, &user], "m", Scenario::SingleStream).unwrap();
    assert_eq!(s.min_query_count, 64, "user.conf applied after mlperf.conf");
    assert_eq!(s.target_latency_percentile, 0.9, "percent -> fraction");
}

#[test]
fn loadgen_keys_and_units() {
    let text = "\
*.*.mode = 1
*.*.max_duration = 0x10
*.*.max_query_count = 500
*.*.qsl_rng_seed = 2085463073848966840
*.*.sample_index_rng_seed = 2747215439041700203
*.*.schedule_rng_seed = 16159082839903944936
*.*.accuracy_log_probability = 50
*.*.performance_sample_count_override = 64
*.*.sample_concatenate_permutation = 1
*.*.use_token_latencies = 1
*.Server.ttft_latency = 2000
*.Server.tpot_latency = 200
*.Server.target_latency_percentile = 99.9
*.MultiStream.samples_per_query = 8
*.*.query_timeout = 5000
";
    let s = load(text, "m", Scenario::Server).unwrap();
    assert_eq!(s.mode, TestMode::AccuracyOnly);
    assert_eq!(s.max_duration_ms, 16);
    assert_eq!(s.max_query_count, 500);
    assert_eq!(s.qsl_rng_seed, 2085463073848966840);
    assert_eq!(s.schedule_rng_seed, 16159082839903944936);
    assert_eq!(s.accuracy_log_probability, 0.5);
    assert_eq!(s.performance_sample_count_override, 64);
    assert!(s.sample_concatenate_permutation && s.use_token_latencies);
    assert_eq!(s.server_ttft_latency_ns, 2_000_000_000);
    assert_eq!(s.server_tpot_latency_ns, 200_000_000);
    assert!((s.server_target_latency_percentile - 0.999).abs() < 1e-12);
    assert_eq!(s.query_timeout_ms, 5000);
    let s = load(
        "*.SingleStream.target_latency = 105\n",
        "m",
        Scenario::SingleStream,
    )
    .unwrap();
    assert_eq!(s.single_stream_expected_latency_ns, 105_000_000);
}

#[test]
fn refusals_name_file_line_and_key() {
    let (file, line, key, reason) = config_err("# ok\n\n*.*.min_duraton = 100\n");
    assert_eq!(
        (file.as_str(), line, key.as_str()),
        ("user.conf", 3, "*.*.min_duraton")
    );
    assert!(reason.contains("unknown key `min_duraton`"), "{reason}");

    let (_, line, _, reason) = config_err("*.*.min_duration = 100\n*.*.min_duration 100\n");
    assert_eq!(line, 2);
    assert!(reason.contains("model.scenario.key = value"), "{reason}");

    let (_, line, key, reason) = config_err("*.*.min_duration = 10s\n");
    assert_eq!((line, key.as_str()), (1, "*.*.min_duration"));
    assert!(reason.contains("in ms"), "{reason}");

    let (_, _, _, reason) = config_err("*.*.min_query_count = -5\n");
    assert!(reason.contains("non-negative integer"), "{reason}");
    let (_, _, _, reason) = config_err("*.*.min_query_count = 1.5\n");
    assert!(reason.contains("non-negative integer"), "{reason}");
    let (_, _, _, reason) = config_err("*.*.use_token_latencies = 2\n");
    assert!(reason.contains("0 or 1"), "{reason}");
    // A fraction where LoadGen expects percent is a unit mistake.
    let (_, _, _, reason) = config_err("*.SingleStream.target_latency_percentile = 0.9\n");
    assert!(reason.contains("not a fraction"), "{reason}");
    let (_, _, _, reason) = config_err("*.SingleStream.target_latency_percentile = 100\n");
    assert!(reason.contains("[1, 100)"), "{reason}");
    let (_, _, _, reason) = config_err("*.Serverr.target_qps = 1\n");
    assert!(reason.contains("unknown scenario `Serverr`"), "{reason}");
    let (_, _, _, reason) = config_err("min_duration = 5\n");
    assert!(reason.contains("model.scenario.key"), "{reason}");
    let (_, _, _, reason) = config_err("*.*.target_qps = abc\n");
    assert!(reason.contains("must be a number"), "{reason}");
    let (_, _, _, reason) = config_err("*.*.mode = 3\n");
    assert!(reason.contains("not supported"), "{reason}");
    let (_, _, _, reason) = config_err("*.*.min_duration =\n");
    assert!(reason.contains("missing value"), "{reason}");
    // Lines for other models are checked too.
    let (_, line, _, _) = config_err("other.*.min_duration = 1\nother.*.bogus = 1\n");
    assert_eq!(line, 2);
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let e = TestSettings::from_config_files(
        &[std::path::Path::new("no-such-dir/user.conf")],
        "m",
        Scenario::Offline,
    )
    .unwrap_err();
    assert!(matches!(e, Error::ConfigIo { .. }));
    assert!(e.to_string().contains("no-such-dir/user.conf"));
}
