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
    assert_eq!(
        s.offline_expected_qps, 99.0,
        "Offline's rate is read under Offline, even in a Server run (as LoadGen does)"
    );
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

/// An mlperf.conf in the layout LoadGen ships (models with dashes, underscores and dots in
/// their names, seeds, per-scenario defaults, keys that only exist for some scenarios) and
/// a user.conf on top. Expected values follow LoadGen's `FromConfig`: the most specific
/// line wins, scenario-specific keys are read under their own scenario, user.conf is applied
/// after mlperf.conf. Cross-checked against mlcommons-loadgen 6.0.17's `FromConfig`, which
/// agrees on every field here except the seeds (LoadGen 6 takes seeds only from its built-in
/// mlperf.conf; PocketPerf reads them from any config file).
const MLPERF_CONF: &str = "\
# The format of this config file is 'key = value'.
# The key has the format 'model.scenario.key'. Value is mostly int64_t.
# Model maybe '*' as wildcard. In that case the value applies to all models.
# All times are in milli seconds

# Set performance_sample_count for each model.
vision-net.*.performance_sample_count_override = 1024
tiny-llm.*.performance_sample_count_override = 5000
tiny-llm-chat.*.performance_sample_count_override = 5000
video-gen-2.1.*.performance_sample_count_override = 248
big-llm.*.performance_sample_count_override = 8313
big-llm.*.accuracy_sample_count_override = 4000

# Set seeds.
*.*.qsl_rng_seed = 1780908523862526354
*.*.sample_index_rng_seed = 14771362308971278557
*.*.schedule_rng_seed = 18209322760996052031
*.*.test05_qsl_rng_seed = 7975553102935885558
*.*.test05_sample_index_rng_seed = 11403566307062068064
*.*.test05_schedule_rng_seed = 15816800565822761601

*.SingleStream.target_latency_percentile = 90
vision-net.SingleStream.target_latency_percentile = 99.9
*.SingleStream.min_duration = 600000

*.MultiStream.target_latency_percentile = 99
*.MultiStream.samples_per_query = 8
*.MultiStream.min_duration = 600000
*.MultiStream.min_query_count = 662

tiny-llm.*.sample_concatenate_permutation = 1
tiny-llm-chat.*.sample_concatenate_permutation = 1
big-llm.*.sample_concatenate_permutation = 1

*.Server.target_latency = 10
*.Server.target_latency_percentile = 99
*.Server.target_duration = 0
*.Server.min_duration = 600000
vision-net.Server.target_latency = 15

tiny-llm.*.use_token_latencies = 1
tiny-llm-chat.*.use_token_latencies = 1
big-llm.*.use_token_latencies = 1
old-llm.*.infer_token_latencies = 1
old-llm.*.token_latency_scaling_factor = 69

tiny-llm.Server.target_latency = 0
tiny-llm.Server.ttft_latency = 2000
tiny-llm.Server.tpot_latency = 100
tiny-llm-chat.Server.target_latency = 0
tiny-llm-chat.Server.ttft_latency = 500
tiny-llm-chat.Server.tpot_latency = 30

*.Offline.target_latency_percentile = 90
*.Offline.min_duration = 600000
vision-net.Offline.min_query_count = 24576
tiny-llm.Offline.min_query_count = 5000
video-gen-2.1.Offline.min_query_count = 248

*.SingleStream.target_latency = 10
*.MultiStream.target_latency = 80
*.Server.target_qps = 1.0
*.Offline.target_qps = 1.0
";

const USER_CONF: &str = "\
# Submitter's user.conf: expected rates and a shorter debugging run.
*.Offline.target_qps = 2.5
tiny-llm.Server.target_qps = 0.75
tiny-llm.*.min_duration = 60000
tiny-llm.SingleStream.target_latency = 1500
*.*.max_duration = 300000
";

fn from_confs(model: &str, scenario: Scenario) -> TestSettings {
    let dir = tempfile::tempdir().unwrap();
    let mlperf = dir.path().join("mlperf.conf");
    let user = dir.path().join("user.conf");
    std::fs::write(&mlperf, MLPERF_CONF).unwrap();
    std::fs::write(&user, USER_CONF).unwrap();
    TestSettings::from_config_files(&[&mlperf, &user], model, scenario).unwrap()
}

#[test]
fn realistic_mlperf_conf_and_user_conf_load_like_loadgen() {
    let d = TestSettings::default();
    // An LLM model in SingleStream.
    let s = from_confs("tiny-llm", Scenario::SingleStream);
    assert_eq!(s.performance_sample_count_override, 5000);
    assert_eq!(s.accuracy_sample_count_override, 0);
    assert_eq!(s.qsl_rng_seed, 1780908523862526354);
    assert_eq!(s.sample_index_rng_seed, 14771362308971278557);
    assert_eq!(s.schedule_rng_seed, 18209322760996052031);
    assert_eq!(s.target_latency_percentile, 0.9);
    // user.conf's tiny-llm.* (model rank) beats mlperf.conf's *.SingleStream: files apply
    // in order, and within user.conf it is the only min_duration line.
    assert_eq!(s.min_duration_ms, 60_000);
    assert_eq!(s.max_duration_ms, 300_000);
    assert_eq!(
        s.min_query_count, d.min_query_count,
        "no SingleStream count"
    );
    assert!(s.sample_concatenate_permutation && s.use_token_latencies);
    assert_eq!(s.single_stream_expected_latency_ns, 1_500_000_000);
    // Server-only keys are read under Server even in a SingleStream run, as LoadGen does.
    assert_eq!(s.server_ttft_latency_ns, 2_000_000_000);
    assert_eq!(s.server_tpot_latency_ns, 100_000_000);
    assert_eq!(s.server_target_qps, 0.75);
    assert_eq!(s.offline_expected_qps, 2.5);

    let s = from_confs("tiny-llm", Scenario::Server);
    assert_eq!(s.server_target_latency_ns, 0, "exact line beats *.Server");
    assert!((s.server_target_latency_percentile - 0.99).abs() < 1e-12);
    assert_eq!(s.server_target_qps, 0.75);
    assert_eq!(s.min_duration_ms, 60_000);

    let s = from_confs("tiny-llm", Scenario::Offline);
    assert_eq!(s.min_query_count, 5000);
    assert_eq!(s.offline_expected_qps, 2.5, "user.conf after mlperf.conf");
    assert_eq!(s.min_duration_ms, 60_000);

    // A vision model: its own percentile and bound, other keys from wildcards.
    let s = from_confs("vision-net", Scenario::SingleStream);
    assert!((s.target_latency_percentile - 0.999).abs() < 1e-12);
    assert_eq!(s.min_duration_ms, 600_000);
    assert_eq!(s.single_stream_expected_latency_ns, 10_000_000);
    assert!(!s.use_token_latencies && !s.sample_concatenate_permutation);
    let s = from_confs("vision-net", Scenario::Server);
    assert_eq!(s.server_target_latency_ns, 15_000_000);
    assert_eq!(s.server_target_qps, 1.0);
    assert_eq!(s.min_duration_ms, 600_000);
    let s = from_confs("vision-net", Scenario::Offline);
    assert_eq!(s.min_query_count, 24_576);

    // A model name containing dots still splits as model.scenario.key from the right.
    let s = from_confs("video-gen-2.1", Scenario::Offline);
    assert_eq!(s.min_query_count, 248);
    assert_eq!(s.performance_sample_count_override, 248);
    // accuracy_sample_count_override is honored; a model with no lines gets wildcards only.
    assert_eq!(
        from_confs("big-llm", Scenario::Offline).accuracy_sample_count_override,
        4000
    );
    let s = from_confs("unlisted", Scenario::Server);
    assert_eq!(s.performance_sample_count_override, 0);
    assert_eq!(s.server_target_latency_ns, 10_000_000);
    assert_eq!(s.mode, TestMode::PerformanceOnly);
}

#[test]
fn a_typo_in_mlperf_conf_is_reported_with_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let mlperf = dir.path().join("mlperf.conf");
    let bad = MLPERF_CONF.replace(
        "*.Server.min_duration = 600000",
        "*.Server.min_durration = 600000",
    );
    std::fs::write(&mlperf, &bad).unwrap();
    let line = bad
        .lines()
        .position(|l| l.contains("min_durration"))
        .unwrap()
        + 1;
    let e = TestSettings::from_config_files(&[&mlperf], "tiny-llm", Scenario::Offline).unwrap_err();
    match &e {
        Error::Config {
            file, line: l, key, ..
        } => {
            assert!(file.ends_with("mlperf.conf"), "{file}");
            assert_eq!(*l, line);
            assert_eq!(key, "*.Server.min_durration");
        }
        other => panic!("expected a config error, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains(&format!("mlperf.conf:{line}:")), "{msg}");
    // A value with a unit suffix in user.conf: named with its line, and the unit explained.
    let user = dir.path().join("user.conf");
    std::fs::write(&user, "# ok\n*.Server.ttft_latency = 2s\n").unwrap();
    let e = TestSettings::from_config_files(&[&user], "m", Scenario::Server).unwrap_err();
    assert!(
        e.to_string()
            .contains("user.conf:2: key `*.Server.ttft_latency`")
            && e.to_string().contains("in ms"),
        "{e}"
    );
}

#[test]
fn scenario_specific_keys_are_read_under_their_own_scenario() {
    // `*.*.target_qps` reaches both Server's rate and Offline's expected rate; a Server
    // line never reaches Offline's field.
    let text = "*.*.target_qps = 7\n*.Server.target_qps = 3\n*.*.target_latency = 40\n";
    for scenario in [Scenario::SingleStream, Scenario::Server, Scenario::Offline] {
        let s = load(text, "m", scenario).unwrap();
        assert_eq!(s.server_target_qps, 3.0, "{scenario}");
        assert_eq!(s.offline_expected_qps, 7.0, "{scenario}");
        assert_eq!(s.server_target_latency_ns, 40_000_000, "{scenario}");
        assert_eq!(
            s.single_stream_expected_latency_ns, 40_000_000,
            "{scenario}"
        );
    }
    // A SingleStream-scoped ttft_latency does not exist in LoadGen: it has no effect.
    let s = load(
        "*.SingleStream.ttft_latency = 5\n",
        "m",
        Scenario::SingleStream,
    )
    .unwrap();
    assert_eq!(
        s.server_ttft_latency_ns,
        TestSettings::default().server_ttft_latency_ns
    );
}
