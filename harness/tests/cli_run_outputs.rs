//! What `pocketperf run` says while it runs and what it leaves: heartbeat lines and sensor
//! warnings when stderr is a pipe, `--out` refused when it holds anything and replaced with
//! `--force`, `trace.json` (Chrome trace-event format) checked event by event against the
//! run's own result.json, and the SUT's page faults in `telemetry.csv`. Runs use the
//! reference model cut to three queries by a `--config` file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const THREE_QUERIES: &str = "\
llm.*.min_query_count = 3
llm.*.max_query_count = 3
*.*.min_duration = 0
";

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

/// `pocketperf run` of three queries into `out` (one worker unless `extra` says), stdout and
/// stderr piped; returns the output and the harness's pid.
fn run(
    dir: &Path,
    out: &Path,
    scenario: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Output, u32) {
    let cfg = dir.join("user.conf");
    std::fs::write(&cfg, THREE_QUERIES).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_pocketperf"));
    c.args([
        "run",
        "--scenario",
        scenario,
        "--preset",
        "quick",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    // One worker unless the test asks for more: the runs share the machine with other tests.
    .args(if extra.contains(&"--threads") {
        &[][..]
    } else {
        &["--threads", "1"][..]
    })
    .args(extra)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let child = c.spawn().expect("pocketperf runs");
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

fn result_json(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap()
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn heartbeat_lines_and_sensor_warnings_appear_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (o, _) = run(
        dir.path(),
        &out,
        "single-stream",
        &[],
        &[("POCKETPERF_HEARTBEAT_MS", "20")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let beats: Vec<(usize, &str)> = err
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(" queries, ") && l.contains("tokens/s"))
        .collect();
    // A line every 20 ms while the queries run, and one with the final figures at the end.
    assert!(beats.len() >= 2, "{}", text(&o));
    let (_, last) = beats[beats.len() - 1];
    assert!(last.starts_with("SingleStream: 3/3 queries, "), "{last}");
    assert!(
        last.contains("(min duration)") && last.contains("ETA 0 s"),
        "{last}"
    );
    for (_, l) in &beats {
        let done: u64 = l
            .split(": ")
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(done <= 3, "{l}");
    }
    // Sensor and meter warnings come at the start, before the first heartbeat, and are the
    // ones result.json keeps.
    let first_beat = err.lines().position(|l| l.contains(" queries, ")).unwrap();
    let early: BTreeSet<&str> = err
        .lines()
        .take(first_beat)
        .filter_map(|l| l.strip_prefix("telemetry: warning: "))
        .collect();
    let result = result_json(&out);
    let kept: BTreeSet<&str> = result["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(early.is_subset(&kept), "{early:?} vs {kept:?}");
    for w in &kept {
        if w.starts_with("no readable thermal zone") || w.starts_with("no energy meter found") {
            assert!(early.contains(w), "`{w}` was not said at the start:\n{err}");
        }
    }
}

#[test]
fn a_bad_heartbeat_interval_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for (scenario, bad) in [("single-stream", "0"), ("dialogue", "ten")] {
        let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
            .args(["run", "--scenario", scenario, "--out"])
            .arg(&out)
            .env("POCKETPERF_HEARTBEAT_MS", bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("POCKETPERF_HEARTBEAT_MS") && err.contains(bad),
            "{err}"
        );
        assert!(!out.exists(), "{scenario}: a result directory was created");
    }
}

#[test]
fn out_refuses_a_non_empty_directory_and_force_replaces_its_contents() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("result.json"), "{\"old\": true}\n").unwrap();
    std::fs::write(out.join("report.md"), "# a stale report\n").unwrap();
    std::fs::create_dir(out.join("run-3")).unwrap();
    let before = names(&out);

    let (o, _) = run(dir.path(), &out, "offline", &[], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&out.display().to_string())
            && err.contains("not empty")
            && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        names(&out),
        before,
        "a refused run wrote into the directory"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("result.json")).unwrap(),
        "{\"old\": true}\n"
    );

    // The same refusal for `mmlu run`, before anything is loaded.
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args([
            "mmlu",
            "run",
            "--limit",
            "1",
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--force"),
        "{}",
        text(&o)
    );
    assert_eq!(names(&out), before);

    // And for a new soak, which also points to --resume.
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(["soak", "--duration", "5s", "--probe-mmlu", "0", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--force") && err.contains("--resume"), "{err}");
    assert_eq!(names(&out), before);

    let (o, _) = run(dir.path(), &out, "offline", &["--force"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let now = names(&out);
    assert!(
        !now.contains("report.md") && !now.contains("run-3"),
        "{now:?}"
    );
    for f in ["result.json", "trace.json", "telemetry.csv", "tokens.csv"] {
        assert!(now.contains(f), "{f} missing: {now:?}");
    }
    assert!(pocketperf_reports::load_result(&out).is_ok());
    assert!(result_json(&out).get("old").is_none());
}

/// Events of a trace by track, `M` metadata left out, in file order: (pid, tid) for slices
/// and instants, (pid, name) for counters (a counter track per name, as the viewers draw).
fn tracks(ev: &[Value]) -> BTreeMap<(u64, u64, String), Vec<&Value>> {
    let mut t: BTreeMap<(u64, u64, String), Vec<&Value>> = BTreeMap::new();
    for e in ev.iter().filter(|e| e["ph"] != "M") {
        let counter = if e["ph"] == "C" {
            e["name"].as_str().unwrap().to_string()
        } else {
            String::new()
        };
        let key = (
            e["pid"].as_u64().unwrap(),
            e["tid"].as_u64().unwrap_or(0),
            counter,
        );
        t.entry(key).or_default().push(e);
    }
    t
}

#[test]
fn trace_json_holds_a_closed_track_per_query_and_counters_on_the_same_clock() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (o, _) = run(
        dir.path(),
        &out,
        "single-stream",
        &["--device", "sim:snapdragon-8gen3"],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    let result = result_json(&out);
    assert_eq!(trace["displayTimeUnit"], "ms");
    let other = &trace["otherData"];
    assert_eq!(other["schema"], "pocketperf-trace/1");
    // The provenance is result.json's output header.
    assert_eq!(other["provenance"], result["meta"]);
    let ev = trace["traceEvents"].as_array().unwrap();
    assert!(ev.iter().all(|e| e["ts"].is_number() || e["ph"] == "M"));

    // Every B has its E, every X a duration; timestamps never go back on a track.
    for (key, events) in tracks(ev) {
        let mut open = 0i64;
        let mut last = f64::MIN;
        for e in events {
            let ts = e["ts"].as_f64().unwrap();
            assert!(ts >= last, "{key:?}: {ts} after {last}");
            last = ts;
            match e["ph"].as_str().unwrap() {
                "B" => open += 1,
                "E" => open -= 1,
                "X" => assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}"),
                "i" | "C" => {}
                other => panic!("unexpected phase {other}"),
            }
            assert!(open >= 0, "{key:?}: E without B");
        }
        assert_eq!(open, 0, "{key:?}: B without E");
    }

    // One track per query, its slice as long as result.json's latency.
    let per_query = result["performance"]["per_query"].as_array().unwrap();
    assert_eq!(per_query.len(), 3);
    let slices: BTreeMap<String, f64> = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "query" && e["pid"] == 1)
        .filter(|e| e["name"].as_str().unwrap().starts_with("query "))
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["dur"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(slices.len(), per_query.len());
    assert_eq!(other["queries"], per_query.len());
    for q in per_query {
        let dur_us = slices[&format!("query {}", q["id"])];
        let lat_ms = q["latency_ms"].as_f64().unwrap();
        assert!(
            (dur_us / 1000.0 - lat_ms).abs() < 0.01,
            "{dur_us} µs vs {lat_ms} ms"
        );
    }
    let tids: BTreeSet<u64> = ev
        .iter()
        .filter(|e| e["pid"] == 1 && e["ph"] != "M")
        .map(|e| e["tid"].as_u64().unwrap())
        .collect();
    assert_eq!(tids.len(), per_query.len());
    let tokens: u64 = per_query
        .iter()
        .map(|q| q["tokens"].as_u64().unwrap())
        .sum();
    let instants = ev
        .iter()
        .filter(|e| e["pid"] == 1 && e["name"] == "token")
        .count() as u64;
    assert_eq!(instants * other["token_stride"].as_u64().unwrap(), tokens);

    // Counter tracks of the simulated handset, the token rate and the SUT's page faults.
    let counters: BTreeSet<&str> = ev
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for want in [
        "temp.soc.c",
        "power.total.mw",
        "tokens_per_s",
        "faults.minor",
        "faults.major",
    ] {
        assert!(counters.contains(want), "{want} missing: {counters:?}");
    }
    assert!(
        counters.iter().any(|c| c.starts_with("cpufreq.")),
        "{counters:?}"
    );
    for name in ["faults.minor", "faults.major"] {
        let v: Vec<f64> = ev
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == name)
            .map(|e| e["args"]["value"].as_f64().unwrap())
            .collect();
        assert!(v.windows(2).all(|w| w[1] >= w[0]), "{name}: {v:?}");
    }
    // The counters span the queries: the clock is shared.
    let span = |f: &dyn Fn(&&Value) -> bool| -> (f64, f64) {
        let ts: Vec<f64> = ev
            .iter()
            .filter(f)
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        (
            ts.iter().copied().fold(f64::MAX, f64::min),
            ts.iter().copied().fold(f64::MIN, f64::max),
        )
    };
    let (q0, q1) = span(&|e| e["pid"] == 1 && e["ph"] == "X");
    let (c0, c1) = span(&|e| e["ph"] == "C" && e["name"] == "temp.soc.c");
    assert!(
        c0 <= q0 && c1 + 200_000.0 >= q1,
        "counters {c0}..{c1}, queries {q0}..{q1}"
    );
}

#[test]
fn telemetry_csv_counts_the_page_faults_of_the_sut_process() {
    let dir = tempfile::tempdir().unwrap();
    for (sut, out) in [("in-process", "a"), ("process", "b")] {
        let out = dir.path().join(out);
        let (o, harness) = run(dir.path(), &out, "offline", &["--sut", sut], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let t = pocketperf_reports::datafiles::read_telemetry(out.join("telemetry.csv")).unwrap();
        let pids: BTreeSet<u64> = t
            .column("faults.pid")
            .expect("faults.pid column")
            .iter()
            .flatten()
            .map(|&p| p as u64)
            .collect();
        let recorded = result_json(&out)["memory"]["page_faults"]["pid"]
            .as_u64()
            .unwrap();
        // One process counted, the one result.json names: this harness, or its serve child.
        assert_eq!(pids, BTreeSet::from([recorded]), "{sut}");
        assert_eq!(recorded == u64::from(harness), sut == "in-process", "{sut}");
        for name in ["faults.minor", "faults.major"] {
            let v: Vec<f64> = t.column(name).unwrap().iter().flatten().copied().collect();
            assert!(!v.is_empty(), "{sut} {name}");
            assert!(v.windows(2).all(|w| w[1] >= w[0]), "{sut} {name}: {v:?}");
        }
        let minor: Vec<f64> = t
            .column("faults.minor")
            .unwrap()
            .iter()
            .flatten()
            .copied()
            .collect();
        // Cumulative since the process started: it has faulted in its model and more.
        assert!(minor[0] > 0.0, "{sut}");
    }
}

#[test]
fn a_dialogue_run_talks_and_traces_its_turns() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args([
            "run",
            "--scenario",
            "dialogue",
            "--device",
            "sim:pixel-8-pro",
            "--threads",
            "1",
        ])
        .arg("--out")
        .arg(&out)
        .envs([
            ("POCKETPERF_DIALOGUES", "2"),
            ("POCKETPERF_TURN_TOKENS", "4"),
            ("POCKETPERF_IDLE_S", "0"),
            ("POCKETPERF_HEARTBEAT_MS", "20"),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let last = err.lines().rfind(|l| l.starts_with("dialogue: ")).unwrap();
    assert!(last.starts_with("dialogue: 2/2 dialogues, "), "{err}");
    let result = result_json(&out);
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    assert_eq!(trace["otherData"]["provenance"], result["meta"]);
    let turns: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"].as_str().unwrap().starts_with("turn "))
        .collect();
    assert_eq!(
        turns.len() as u64,
        result["performance"]["queries"].as_u64().unwrap()
    );
    assert!(turns.iter().all(|t| t["args"]["tokens"] == 4), "{turns:?}");
}

#[test]
fn trace_json_places_the_governor_state_at_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sysfs = pocketperf_testkit::shared_dir().join("fixtures/sysfs/pixel-8-pro");
    // The step governor over the fixture's 39.4 °C skin with a 20 °C trip: it throttles at
    // once, through the thread count (no idle pauses, so the run stays short).
    let (o, _) = run(
        dir.path(),
        &out,
        "single-stream",
        &[
            "--threads",
            "2",
            "--warmup",
            "0",
            "--governor",
            "step",
            "--governor-actuator",
            "threads",
            "--target-temp",
            "20",
            "--governor-period-ms",
            "10",
            "--governor-sysfs-root",
            sysfs.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    let ev = trace["traceEvents"].as_array().unwrap();
    let actions: Vec<&Value> = ev.iter().filter(|e| e["cat"] == "governor").collect();
    assert!(!actions.is_empty());
    assert_eq!(trace["otherData"]["governor_actions"], actions.len());
    // tokens.csv's governor columns by (query, token).
    let text_csv = std::fs::read_to_string(out.join("tokens.csv")).unwrap();
    let body: String = text_csv
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut r = csv::Reader::from_reader(body.as_bytes());
    let head = r.headers().unwrap().clone();
    let col = |n: &str| head.iter().position(|h| h == n).unwrap();
    let (q, k, level) = (col("query"), col("token"), col("gov_level"));
    let levels: BTreeMap<(u64, u64), u64> = r
        .records()
        .map(|rec| {
            let rec = rec.unwrap();
            let n = |i: usize| rec[i].parse::<u64>().unwrap();
            ((n(q), n(k)), n(level))
        })
        .collect();
    for a in actions {
        let args = &a["args"];
        let key = (
            args["query"].as_u64().unwrap(),
            args["token"].as_u64().unwrap(),
        );
        assert_eq!(args["level"].as_u64(), levels.get(&key).copied(), "{a}");
        assert_eq!(a["name"], format!("governor level {}", args["level"]));
        // At its token: inside its query's slice, at that token's instant.
        let query = ev
            .iter()
            .find(|e| e["ph"] == "X" && e["name"] == format!("query {}", key.0))
            .unwrap();
        let (t0, dur) = (
            query["ts"].as_f64().unwrap(),
            query["dur"].as_f64().unwrap(),
        );
        let ts = a["ts"].as_f64().unwrap();
        assert!(ts >= t0 && ts <= t0 + dur, "{ts} outside {t0}+{dur}");
        let token = ev
            .iter()
            .filter(|e| e["name"] == "token" && e["tid"] == query["tid"])
            .find(|e| e["args"]["index"] == key.1)
            .unwrap();
        assert_eq!(token["ts"], a["ts"]);
    }
}
