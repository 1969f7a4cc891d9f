//! `pocketperf run` through the binary, with the reference model as the SUT: the summary
//! parses with LoadGen's field names, result.json loads with the reports crate, tokens.csv
//! has one row per generated token, and bad input is refused with the file and line.
//! Runs are cut to three queries by a `--config` file (the binary's own parser), so the
//! test stays in seconds.

use std::path::Path;
use std::process::{Command, Output};

use pocketperf_scenarios::parse_summary;

use pocketperf_testkit::shared_dir;

fn pocketperf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(args)
        .output()
        .expect("pocketperf runs")
}

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

const THREE_QUERIES: &str = "\
# three queries, no minimum duration
llm.*.min_query_count = 3
llm.*.max_query_count = 3
*.*.min_duration = 0
";

fn run_scenario(scenario: &str, dir: &Path) -> Output {
    run_scenario_with(scenario, dir, &[])
}

fn run_scenario_with(scenario: &str, dir: &Path, extra: &[&str]) -> Output {
    run_configured(scenario, dir, THREE_QUERIES, "out", extra)
}

/// `run --scenario S --preset quick` with `config` as `DIR/user.conf` and results in
/// `DIR/OUT`, one worker, then `extra`.
fn run_configured(scenario: &str, dir: &Path, config: &str, out: &str, extra: &[&str]) -> Output {
    let cfg = dir.join("user.conf");
    std::fs::write(&cfg, config).unwrap();
    let out = dir.join(out);
    pocketperf(
        &[
            "run",
            "--scenario",
            scenario,
            "--preset",
            "quick",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            // One worker each: the two runs of this file share the machine with other tests.
            "--threads",
            "1",
        ]
        .iter()
        .chain(extra)
        .copied()
        .collect::<Vec<_>>(),
    )
}

fn keys(summary: &str) -> Vec<String> {
    parse_summary(summary).into_iter().map(|(k, _)| k).collect()
}

#[test]
fn single_stream_run_writes_loadgen_logs_result_json_and_tokens_csv() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_scenario("single-stream", dir.path());
    // Three queries are too few for early stopping (64 at p90): INVALID, exit 1.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = dir.path().join("out");

    // The summary has every field LoadGen's token-mode SingleStream summary has, in order.
    let ours = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).unwrap();
    let theirs = std::fs::read_to_string(
        shared_dir().join("reference/loadgen/samples/ss_tok/mlperf_log_summary.txt"),
    )
    .expect("LoadGen sample summary (set POCKETPERF_SHARED)");
    let theirs_k = keys(&theirs);
    let ours_k: Vec<String> = keys(&ours)
        .into_iter()
        .filter(|k| theirs_k.contains(k))
        .collect();
    assert_eq!(ours_k, theirs_k, "summary fields differ:\n{ours}");
    let field = |k: &str| {
        parse_summary(&ours)
            .into_iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v)
    };
    assert_eq!(field("Scenario").as_deref(), Some("SingleStream"));
    assert_eq!(field("Result is").as_deref(), Some("INVALID"));
    assert_eq!(field("Early stopping satisfied").as_deref(), Some("NO"));
    assert_eq!(field("min_query_count").as_deref(), Some("3"));
    assert!(ours.contains(" * Only processed 3 queries.\n * Need to process at least 64"));

    // Every detail line is an MLLOG JSON event.
    let detail = std::fs::read_to_string(out.join("mlperf_log_detail.txt")).unwrap();
    for l in detail.lines() {
        let json = l.strip_prefix(":::MLLOG ").expect("MLLOG prefix");
        let v: serde_json::Value = serde_json::from_str(json).expect("JSON event");
        assert!(v.get("key").is_some() && v.get("value").is_some());
    }
    assert!(detail.contains("\"key\": \"result_validity\", \"value\": \"INVALID\""));

    // result.json loads with the reports crate and agrees with itself.
    let r = pocketperf_reports::load_result(&out).expect("result.json loads");
    assert_eq!(r.schema_version, pocketperf_reports::SCHEMA_VERSION);
    assert!(!r.meta.git_commit.is_empty() && r.meta.model.sha256.len() == 64);
    let p = r.performance.as_ref().expect("performance section");
    assert_eq!(p.scenario, "SingleStream");
    assert!(!p.valid);
    assert!(
        p.invalid_reasons
            .iter()
            .any(|c| c.contains("early stopping")),
        "{:?}",
        p.invalid_reasons
    );
    assert_eq!(p.queries, 3);
    assert_eq!(p.per_query.len(), 3);
    let tokens: u64 = p.per_query.iter().map(|q| q.tokens as u64).sum();
    let busy_ms: f64 = p.per_query.iter().map(|q| q.latency_ms).sum();
    // Quick preset outputs are 16..=48 tokens, forced (EOS ignored).
    for q in &p.per_query {
        assert!((16..=48).contains(&q.tokens), "{q:?}");
        assert!(q.tpot_ms.is_some() && q.ttft_ms.is_some());
    }
    // Tokens/s without overhead: tokens over the summed latencies.
    assert!(
        (p.tokens_per_s - tokens as f64 / (busy_ms / 1e3)).abs() / p.tokens_per_s < 1e-3,
        "{} vs {}",
        p.tokens_per_s,
        tokens as f64 / (busy_ms / 1e3)
    );
    // One inter-token gap per token after the first of each query.
    let itl = p.itl_ms.as_ref().expect("inter-token latencies");
    assert_eq!(itl.n, tokens - 3);
    assert!(itl.p99 >= itl.p50 && itl.p50 > 0.0);

    // tokens.csv: provenance, then one row per token, indices 0.. per query, times rising.
    let log = pocketperf_reports::datafiles::read_tokens(out.join("tokens.csv")).unwrap();
    for k in [
        "schema_version",
        "tool",
        "git_commit",
        "device",
        "model_name",
        "model_sha256",
        "settings",
    ] {
        assert!(log.meta.contains_key(k), "tokens.csv lacks # {k}=");
    }
    assert_eq!(log.events.len() as u64, tokens);
    for q in &p.per_query {
        let ev: Vec<_> = log.events.iter().filter(|e| e.query == q.id).collect();
        assert_eq!(ev.len(), q.tokens as usize);
        for (k, e) in ev.iter().enumerate() {
            assert_eq!(e.token as usize, k);
        }
        assert!(ev.windows(2).all(|w| w[1].t_ms >= w[0].t_ms));
        // The first token lands at issue + TTFT.
        let first = q.start_s * 1e3 + q.ttft_ms.unwrap();
        assert!(
            (ev[0].t_ms - first).abs() < 0.01,
            "{} vs {first}",
            ev[0].t_ms
        );
    }
}

#[test]
fn offline_run_is_valid_with_its_batch_completed() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_scenario("offline", dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = dir.path().join("out");
    let ours = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).unwrap();
    let theirs = std::fs::read_to_string(
        shared_dir().join("reference/loadgen/samples/off_lognorm/mlperf_log_summary.txt"),
    )
    .unwrap();
    // The sample is not in token mode; in token mode LoadGen lists the TTFT and TPOT bounds
    // where it lists target_latency (as its token-mode SingleStream sample shows).
    let theirs_k: Vec<String> = keys(&theirs)
        .into_iter()
        .filter(|k| k != "target_latency (ns)")
        .collect();
    let ours_all = keys(&ours);
    let ours_k: Vec<String> = ours_all
        .iter()
        .filter(|k| theirs_k.contains(k))
        .cloned()
        .collect();
    assert_eq!(ours_k, theirs_k, "summary fields differ:\n{ours}");
    for k in [
        "Tokens per second",
        "ttft_latency (ns)",
        "tpot_latency (ns)",
    ] {
        assert!(ours_all.iter().any(|o| o == k), "{k} missing:\n{ours}");
    }
    assert!(ours.contains("Result is : VALID\n"), "{ours}");
    assert!(ours.contains("SUT name : pocketperf-runtime (in-process, batched decode)"));
    let r = pocketperf_reports::load_result(&out).unwrap();
    let p = r.performance.unwrap();
    assert!(p.valid, "{:?}", p.invalid_reasons);
    assert_eq!(p.queries, 3);
    // All three issued at once: every start time is 0.
    assert!(p.per_query.iter().all(|q| q.start_s == 0.0));
}

#[test]
fn config_typos_and_units_are_refused_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("user.conf");
    let out = dir.path().join("out");
    for (body, line, needle) in [
        (
            "# header\n*.*.min_duraton = 5\n",
            2,
            "unknown key `min_duraton`",
        ),
        ("*.*.min_duration = 5s\n", 1, "in ms"),
        (
            "*.SingleStream.target_latency_percentile = 0.9\n",
            1,
            "not a fraction",
        ),
    ] {
        std::fs::write(&cfg, body).unwrap();
        let o = pocketperf(&[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("user.conf:{line}: key")) && err.contains(needle),
            "{err}"
        );
        assert!(
            !out.join("result.json").exists(),
            "nothing written on a config error"
        );
    }
}

#[test]
fn a_prompt_set_smaller_than_the_performance_sample_count_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("user.conf");
    std::fs::write(&cfg, "*.*.performance_sample_count_override = 100\n").unwrap();
    let out = dir.path().join("out");
    let o = pocketperf(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("has 64 samples but 100 performance samples are needed"),
        "{err}"
    );
}

#[test]
fn a_child_process_sut_runs_the_same_queries_as_the_in_process_one() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let o = run_scenario("offline", a.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run_scenario_with("offline", b.path(), &["--sut", "process"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let summary = std::fs::read_to_string(b.path().join("out/mlperf_log_summary.txt")).unwrap();
    assert!(summary.contains("Result is : VALID\n"), "{summary}");
    assert!(
        summary.contains("SUT name : pocketperf serve (child process: "),
        "{summary}"
    );
    let load = |d: &Path| {
        pocketperf_reports::load_result(d.join("out"))
            .unwrap()
            .performance
            .unwrap()
    };
    let (inproc, child) = (load(a.path()), load(b.path()));
    // Same seeds, same samples, same forced output lengths; the child's token times arrive
    // from its own clock, so every query still has a TTFT and a TPOT.
    let shape = |p: &pocketperf_reports::schema::Performance| {
        p.per_query
            .iter()
            .map(|q| (q.sample_index, q.tokens))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&child), shape(&inproc));
    assert_eq!(child.queries, 3);
    assert!(
        child
            .per_query
            .iter()
            .all(|q| q.ttft_ms.is_some() && q.tokens > 1)
    );
    assert!(child.per_query.iter().all(|q| q.tpot_ms.is_some()));
}

/// A VALID three-query Offline run with `extra`, every query's tokens one `tokens.csv` row
/// each; its result file.
fn offline_run(dir: &Path, extra: &[&str]) -> pocketperf_reports::schema::ResultFile {
    let o = run_scenario_with("offline", dir, extra);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = dir.join("out");
    let r = pocketperf_reports::load_result(&out).unwrap();
    let p = r.performance.as_ref().unwrap();
    assert!(p.valid, "{:?}", p.invalid_reasons);
    assert_eq!(p.queries, 3);
    let csv = std::fs::read_to_string(out.join("tokens.csv")).unwrap();
    let rows = csv.lines().filter(|l| !l.starts_with('#')).count() - 1;
    let total: u64 = p.per_query.iter().map(|q| u64::from(q.tokens)).sum();
    assert_eq!(rows as u64, total);
    r
}

#[test]
fn offline_chunked_prefill_completes_every_token_and_records_its_decoder() {
    let dir = tempfile::tempdir().unwrap();
    // A chunk far shorter than the chat prompts: each prompt takes several passes.
    let r = offline_run(dir.path(), &["--prefill-chunk", "7"]);
    let d = &r.meta.settings["sut"]["decoder"];
    assert_eq!(d["kind"], "batched", "{d}");
    assert_eq!(d["prefill_chunk"], 7, "{d}");
    assert_eq!(d["slots"], 8, "OFFLINE_BATCH sequences in flight: {d}");
    assert_eq!(d["governor_per_pass"], false, "{d}");
    // Every query got exactly its preset output length (more than one token).
    let p = r.performance.unwrap();
    assert!(p.per_query.iter().all(|q| q.tokens > 1));
}

#[test]
fn offline_batch_sets_the_sequences_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    // Two slots for three queries: the third waits for the first free slot.
    let r = offline_run(
        dir.path(),
        &["--offline-batch", "2", "--prefill-chunk", "7"],
    );
    let d = &r.meta.settings["sut"]["decoder"];
    assert_eq!(d["slots"], 2, "{d}");
    assert_eq!(r.meta.settings["cli"]["offline_batch"], 2);
    let p = r.performance.unwrap();
    // The third query started only when one of the first two ended: its first token came
    // after the earliest completion.
    let mut ends: Vec<f64> = p
        .per_query
        .iter()
        .map(|q| q.start_s * 1e3 + q.latency_ms)
        .collect();
    ends.sort_by(f64::total_cmp);
    let last_ttft = p
        .per_query
        .iter()
        .map(|q| q.start_s * 1e3 + q.ttft_ms.unwrap())
        .fold(f64::MIN, f64::max);
    assert!(last_ttft >= ends[0], "{last_ttft} ms before {ends:?}");
}

/// `run --scenario dialogue` with `extra`, results in `out`.
fn dialogue_with(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["run", "--scenario", "dialogue"];
    args.extend_from_slice(extra);
    args.extend(["--out", out.to_str().unwrap()]);
    pocketperf(&args)
}

/// `run_scenario_with(scenario, dir, extra)` exits 2 with `needle` in its error.
fn assert_refused(scenario: &str, dir: &Path, extra: &[&str], needle: &str) {
    let o = run_scenario_with(scenario, dir, extra);
    assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(needle),
        "{extra:?}: {}",
        text(&o)
    );
}

#[test]
fn offline_batching_flags_are_refused_where_they_cannot_apply() {
    let dir = tempfile::tempdir().unwrap();
    for flag in ["--prefill-chunk", "--offline-batch"] {
        let cases = [
            (
                "single-stream",
                vec![flag, "8"],
                format!("{flag} applies to --scenario offline"),
            ),
            (
                "offline",
                vec![flag, "8", "--sut", "process"],
                format!("{flag} needs --sut in-process"),
            ),
            ("offline", vec![flag, "0"], flag.to_string()),
        ];
        for (scenario, extra, needle) in cases {
            assert_refused(scenario, dir.path(), &extra, &needle);
        }
    }
    assert_refused(
        "offline",
        dir.path(),
        &["--offline-batch", "257"],
        "--offline-batch",
    );
    let out = dir.path().join("dialogue");
    for flag in ["--prefill-chunk", "--offline-batch"] {
        let o = dialogue_with(&out, &[flag, "8"]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("do not apply to the dialogue scenario"),
            "{flag}: {}",
            text(&o)
        );
    }
}

#[test]
fn runs_record_the_prompt_tokens_they_reused() {
    for (scenario, on) in [
        ("single-stream", "on"),
        ("offline", "on"),
        ("single-stream", "off"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let o = run_scenario_with(
            scenario,
            dir.path(),
            &["--prefix-reuse", on, "--warmup", "0"],
        );
        // Three queries are too few for SingleStream's early-stopping estimate (INVALID,
        // exit 1); the results are written either way.
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{scenario} {on}: {}",
            text(&o)
        );
        let r = pocketperf_reports::load_result(dir.path().join("out")).unwrap();
        let p = &r.meta.settings["sut"]["decoder"]["prefix_reuse"];
        assert_eq!(p["on"], on == "on", "{p}");
        let asked = p["prompt_tokens"].as_u64().unwrap();
        let reused = p["reused_tokens"].as_u64().unwrap();
        assert!(asked > 0, "{p}");
        if (scenario, on) == ("single-stream", "on") {
            // Three queries in one session: the second and third keep at least the chat
            // template's system prompt and headers.
            assert!(reused >= 2 * 20 && reused < asked, "{p}");
        } else {
            // Reuse off; or Offline's three queries, each in an empty slot of eight.
            assert_eq!(reused, 0, "{p}");
        }
        assert_eq!(r.performance.unwrap().queries, 3);
    }
}

#[test]
fn prefix_reuse_is_refused_where_it_cannot_apply() {
    let dir = tempfile::tempdir().unwrap();
    assert_refused(
        "single-stream",
        dir.path(),
        &["--prefix-reuse", "on", "--sut", "process"],
        "--prefix-reuse on needs --sut in-process",
    );
    assert_refused(
        "single-stream",
        dir.path(),
        &["--prefix-reuse", "maybe"],
        "--prefix-reuse",
    );
    // The dialogue scenario (without the LoadGen config, which it refuses on its own).
    let out = dir.path().join("dialogue");
    let o = dialogue_with(&out, &["--prefix-reuse", "on"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("--prefix-reuse do not apply to the dialogue scenario"),
        "{}",
        text(&o)
    );
    assert!(!out.exists(), "nothing written");
}

/// `--offline-qps` sizes Offline's one query as LoadGen does: max(min_query_count,
/// floor(1.1 × qps × min_duration)). With a minimum of 3 queries and 200 ms, 30 queries/s
/// asks for floor(6.6) = 6 samples; without the flag the preset's 1 query/s leaves the 3.
#[test]
fn offline_qps_sizes_the_offline_batch() {
    let dir = tempfile::tempdir().unwrap();
    let config = "llm.*.min_query_count = 3\n*.*.min_duration = 200\n";
    for (extra, want) in [(&["--offline-qps", "30"][..], 6), (&[][..], 3)] {
        let name = format!("out-{want}");
        let out = dir.path().join(&name);
        let o = run_configured("offline", dir.path(), config, &name, extra);
        assert_eq!(o.status.code(), Some(0), "{extra:?}: {}", text(&o));
        let r = pocketperf_reports::load_result(&out).unwrap();
        let p = r.performance.unwrap();
        assert_eq!(p.queries, want, "{extra:?}");
        let detail = std::fs::read_to_string(out.join("mlperf_log_detail.txt")).unwrap();
        let qps = if want == 6 { "30" } else { "1" };
        for needle in [
            format!("\"requested_offline_expected_qps\", \"value\": {qps},"),
            format!("\"effective_samples_per_query\", \"value\": {want},"),
        ] {
            assert!(
                detail.contains(&needle),
                "{extra:?}: {needle} not in the detail log"
            );
        }
    }
}

/// An Offline run whose one query ends inside the minimum duration is INVALID (exit 1) and
/// says which `--offline-qps` would fill it: the smallest whole rate at or above the rate it
/// ran at (samples over the run's duration).
#[test]
fn an_offline_run_too_short_for_its_minimum_says_which_offline_qps_fills_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = "llm.*.min_query_count = 3\nllm.*.max_query_count = 3\n*.*.min_duration = 60000\n";
    let o = run_configured("offline", dir.path(), config, "out", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("INVALID (min duration not met"), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("hint: the 3 Offline samples took "))
        .unwrap_or_else(|| panic!("no hint:\n{stdout}"));
    assert!(line.contains("under the minimum of 60.00 s"), "{line}");
    let qps: f64 = line
        .split("--offline-qps ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no rate in {line}"));
    let r = pocketperf_reports::load_result(dir.path().join("out")).unwrap();
    let p = r.performance.unwrap();
    assert!(!p.valid);
    let rate = 3.0 / p.duration_s;
    // The hint divides by the engine's own duration, result.json carries the same one; a
    // part in a thousand of slack all the same.
    assert!(
        qps >= rate * 0.999 && qps - 1.0 < rate * 1.001,
        "--offline-qps {qps} for a rate of {rate}"
    );
}

/// `--server-qps` and `--offline-qps` each belong to one scenario; elsewhere, or out of
/// range, they are refused before anything runs.
#[test]
fn qps_flags_are_refused_outside_their_scenario() {
    let dir = tempfile::tempdir().unwrap();
    for (scenario, extra, needle) in [
        (
            "offline",
            &["--server-qps", "2"][..],
            "--server-qps applies to --scenario server only",
        ),
        (
            "single-stream",
            &["--offline-qps", "2"][..],
            "--offline-qps applies to --scenario offline only",
        ),
        (
            "server",
            &["--offline-qps", "2"][..],
            "--offline-qps applies to --scenario offline only",
        ),
        (
            "offline",
            &["--offline-qps", "1e-300"][..],
            "--offline-qps 1e-300 queries/s is out of range",
        ),
    ] {
        assert_refused(scenario, dir.path(), extra, needle);
        assert!(
            !dir.path().join("out").exists(),
            "{extra:?}: nothing written"
        );
    }
    // The dialogue scenario has no LoadGen settings: either rate is refused there too.
    for flag in ["--server-qps", "--offline-qps"] {
        let out = dir.path().join("dialogue");
        let o = dialogue_with(&out, &[flag, "2"]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("{flag} and")) || err.contains(&format!("{flag},")),
            "{flag}: {}",
            text(&o)
        );
        assert!(!out.exists(), "{flag}: nothing written");
    }
}

#[test]
fn a_child_process_sut_refuses_the_governor() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_scenario_with(
        "single-stream",
        dir.path(),
        &["--sut", "process", "--governor", "pid"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--governor needs --sut in-process"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_dialogue_scenario_refuses_flags_it_does_not_implement() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = pocketperf(&[
        "run",
        "--scenario",
        "dialogue",
        "--out",
        out.to_str().unwrap(),
        "--warmup",
        "2",
        "--cold-start",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--warmup, --cold-start not supported by the dialogue scenario"),
        "{}",
        text(&o)
    );
    assert!(!out.exists(), "nothing is written before the refusal");
}

#[test]
fn http_flags_without_an_http_sut_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = pocketperf(&[
        "run",
        "--out",
        out.to_str().unwrap(),
        "--api",
        "chat",
        "--http-retries",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("--api, --http-retries need --sut http://HOST:PORT"),
        "{}",
        text(&o)
    );
    assert!(!out.exists(), "nothing is written before the refusal");
}
