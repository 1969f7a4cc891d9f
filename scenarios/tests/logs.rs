//! Our logs against LoadGen's real ones: the same summary keys in the same order (one
//! parser for both), identical early-stopping wording for the same latencies, the same
//! detail-log keys, and LoadGen's number formatting.

mod common;

use common::{SimQuery, SimSut, TestQsl, read_shared};
use pocketperf_scenarios::logs::fmt_g;
use pocketperf_scenarios::{
    LogMeta, Scenario, TestResult, TestSettings, VirtualClock, early_stopping, parse_summary,
    run_test,
};

const MS: u64 = 1_000_000;

fn sample(name: &str, file: &str) -> String {
    read_shared(&format!("reference/loadgen/samples/{name}/{file}"))
}

fn keys(text: &str) -> Vec<String> {
    parse_summary(text).into_iter().map(|(k, _)| k).collect()
}

/// Our keys, restricted to those the sample has, must equal the sample's keys in order.
fn assert_same_keys(ours: &str, theirs: &str, what: &str) {
    let theirs_k = keys(theirs);
    let ours_k: Vec<String> = keys(ours)
        .into_iter()
        .filter(|k| theirs_k.contains(k))
        .collect();
    assert_eq!(
        ours_k, theirs_k,
        "{what}: summary keys differ\n--- ours ---\n{ours}"
    );
}

fn run_like(scenario: Scenario, tokens: bool) -> TestResult {
    let mut s = TestSettings::new(scenario);
    s.min_duration_ms = 2000;
    s.min_query_count = 100;
    s.use_token_latencies = tokens;
    s.server_target_qps = 20.0;
    s.server_target_latency_ns = 60 * MS;
    s.offline_expected_qps = 50.0;
    s.single_stream_expected_latency_ns = 20 * MS;
    let model: common::LatencyFn = match (scenario, tokens) {
        (_, true) => Box::new(|_| SimQuery::tokens(30 * MS, 16, 5 * MS)),
        // A few slow queries so the Server run is INVALID like the reference one.
        (Scenario::Server, false) => {
            Box::new(|id| SimQuery::plain(if id % 10 == 3 { 70 * MS } else { 20 * MS }))
        }
        // Offline: 1.1 * 50/s * 2 s = 110 samples of 20 ms on one server end at 2.2 s.
        (Scenario::Offline, false) => Box::new(|_| SimQuery::plain(20 * MS)),
        _ => Box::new(|id| SimQuery::plain((10 + id % 7) * MS)),
    };
    let mut sut = SimSut::new(model);
    sut.parallel = scenario == Scenario::Server;
    let clock = VirtualClock::new();
    run_test(&mut sut, &mut TestQsl::new(1024, 256), &s, &clock).unwrap()
}

#[test]
fn summaries_have_loadgens_keys_in_loadgens_order() {
    for (name, scenario, tokens) in [
        ("ss_lognorm", Scenario::SingleStream, false),
        ("ss_tok", Scenario::SingleStream, true),
        ("off_lognorm", Scenario::Offline, false),
        ("srv_lognorm", Scenario::Server, false),
    ] {
        let r = run_like(scenario, tokens);
        let ours = r.summary_text(&LogMeta::default());
        let theirs = sample(name, "mlperf_log_summary.txt");
        assert_same_keys(&ours, &theirs, name);
        // Section headers, in order.
        let headers = |t: &str| {
            t.lines()
                .filter(|l| {
                    matches!(
                        *l,
                        "MLPerf Results Summary" | "Additional Stats" | "Test Parameters Used"
                    )
                })
                .count()
        };
        assert_eq!(headers(&ours), 3, "{name}");
        assert!(ours.starts_with(
            "================================================\nMLPerf Results Summary\n"
        ));
        assert!(ours.ends_with(
            "\nNo warnings encountered during test.\n\nNo errors encountered during test.\n"
        ));
        let validity = |t: &str| {
            parse_summary(t)
                .into_iter()
                .find(|(k, _)| k == "Result is")
                .map(|(_, v)| v)
        };
        assert_eq!(
            validity(&ours),
            validity(&theirs),
            "{name}: same verdict as the reference"
        );
    }
}

fn es_block(summary: &str, title: &str) -> String {
    let mut out = Vec::new();
    let mut on = false;
    for l in summary.lines() {
        if l == title {
            on = true;
            continue;
        }
        if on {
            if l.is_empty() || l.ends_with("Result:") {
                break;
            }
            out.push(l);
        }
    }
    out.join("\n")
}

#[test]
fn single_stream_early_stopping_text_matches_loadgen() {
    // The reference run: 100 queries, p90; the estimate is the 3rd largest latency,
    // which LoadGen also printed as its 97th percentile.
    let theirs = sample("ss_lognorm", "mlperf_log_summary.txt");
    let p97: u64 = parse_summary(&theirs)
        .into_iter()
        .find(|(k, _)| k == "97.00 percentile latency (ns)")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let mut lat: Vec<u64> = (0..100u64).map(|i| 1_000_000 + i).collect();
    lat[97] = p97;
    lat[98] = p97 + 1;
    lat[99] = p97 + 2;
    let o = early_stopping::single_stream_outcome(&lat, 0.9);
    assert!(o.met);
    assert_eq!(o.text, es_block(&theirs, "Early Stopping Result:"));
    assert_eq!(o.estimate_ns, Some(p97));
}

#[test]
fn server_early_stopping_text_matches_loadgen() {
    // The reference Server run: 100 queries, 2 over the 60 ms bound, p99.
    let theirs = sample("srv_lognorm", "mlperf_log_summary.txt");
    let mut lat = vec![20 * MS; 100];
    lat[10] = 61 * MS;
    lat[20] = 64 * MS;
    let o = early_stopping::server_outcome(&lat, 60 * MS, 0.99);
    assert!(!o.met);
    assert_eq!(o.text, es_block(&theirs, "Early Stopping Result:"));
}

fn detail_keys(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for l in text.lines() {
        let json = l
            .strip_prefix(":::MLLOG ")
            .expect("every line is an MLLOG line");
        let v: serde_json::Value = serde_json::from_str(json).expect("valid json");
        for k in [
            "key",
            "value",
            "time_ms",
            "namespace",
            "event_type",
            "metadata",
        ] {
            assert!(v.get(k).is_some(), "missing {k} in {l}");
        }
        let k = v["key"].as_str().unwrap().to_string();
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

#[test]
fn detail_logs_carry_loadgens_keys_in_order() {
    for (name, scenario, tokens) in [
        ("ss_lognorm", Scenario::SingleStream, false),
        ("ss_tok", Scenario::SingleStream, true),
        ("off_lognorm", Scenario::Offline, false),
        ("srv_lognorm", Scenario::Server, false),
    ] {
        let r = run_like(scenario, tokens);
        let ours = detail_keys(&r.detail_text(&LogMeta::default()));
        let theirs = detail_keys(&sample(name, "mlperf_log_detail.txt"));
        let ours_f: Vec<&String> = ours.iter().filter(|k| theirs.contains(k)).collect();
        let theirs_r: Vec<&String> = theirs.iter().collect();
        assert_eq!(ours_f, theirs_r, "{name}: detail keys differ");
    }
}

#[test]
fn write_logs_writes_the_three_files() {
    let mut r = run_like(Scenario::SingleStream, false);
    let dir = tempfile::tempdir().unwrap();
    r.write_logs(dir.path(), &LogMeta::default()).unwrap();
    let summary = std::fs::read_to_string(dir.path().join("mlperf_log_summary.txt")).unwrap();
    assert!(summary.contains("Result is : VALID"));
    assert!(dir.path().join("mlperf_log_detail.txt").exists());
    assert!(
        !dir.path().join("mlperf_log_accuracy.json").exists(),
        "performance mode only"
    );
    r.settings.mode = pocketperf_scenarios::TestMode::Submission;
    r.write_logs(dir.path(), &LogMeta::default()).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("mlperf_log_accuracy.json")).unwrap(),
        "[\n\n]\n"
    );
    let json = serde_json::to_value(&r).unwrap();
    let n = r.performance.as_ref().unwrap().queries_issued;
    assert_eq!(json["performance"]["queries_issued"], n);
    assert_eq!(json["settings"]["scenario"], "SingleStream");
}

#[test]
fn numbers_format_like_loadgen() {
    // Figures that appear in the reference logs.
    assert_eq!(fmt_g(1e9 / 105e6), "9.52381");
    assert_eq!(fmt_g(176.499), "176.499");
    assert_eq!(fmt_g(1.05e8), "1.05e+08");
    assert_eq!(fmt_g(1.518138e-7), "1.51814e-07");
    assert_eq!(fmt_g(50.0), "50");
    assert_eq!(fmt_g(0.99), "0.99");
    assert_eq!(fmt_g(0.0), "0");
    assert_eq!(fmt_g(167.42612), "167.426");
    assert_eq!(fmt_g(999999.6), "1e+06");
}
