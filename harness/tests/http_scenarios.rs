//! The dialogue scenario and `soak` through `--sut http://127.0.0.1:PORT` against
//! `pocketperf serve --http` with the reference model: the same turns, token counts and
//! prompt lengths as the in-process SUT (greedy), the conversation sent whole each turn
//! (chat messages, or the rendered conversation's ids), every token timed from the stream;
//! and what cannot reach a server refused before anything runs.

mod http_util;

use std::path::Path;
use std::process::Output;

use http_util::{Server, bin};
use serde_json::Value;

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

/// Two dialogues, four tokens a turn, no idle baseline, on this machine's sysfs.
fn dialogue(out: &Path, extra: &[&str]) -> Output {
    bin()
        .args(["run", "--scenario", "dialogue", "--threads", "1"])
        .arg("--out")
        .arg(out)
        .args(extra)
        .envs([
            ("POCKETPERF_DIALOGUES", "2"),
            ("POCKETPERF_TURN_TOKENS", "4"),
            ("POCKETPERF_IDLE_S", "0"),
        ])
        .output()
        .unwrap()
}

fn result(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap()
}

/// Per turn: (dialogue, tokens).
fn turns(r: &Value) -> Vec<(u64, u64)> {
    r["performance"]["per_query"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["sample_index"].as_u64().unwrap(),
                q["tokens"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Per turn, from trace.json: the conversation's length in tokens when the turn began
/// (prefilled + reused).
fn prompt_lengths(out: &Path) -> Vec<u64> {
    let t: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"].as_str().unwrap().starts_with("turn "))
        .map(|e| e["args"]["prefilled"].as_u64().unwrap() + e["args"]["reused"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_dialogue_run_through_http_matches_the_in_process_sut() {
    let srv = Server::start(&["--slots", "1", "--ctx", "2048"]);
    let dir = tempfile::tempdir().unwrap();
    let local_out = dir.path().join("local");
    let o = dialogue(&local_out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let local = result(&local_out);
    let local_prompts = prompt_lengths(&local_out);
    for api in ["completions", "chat"] {
        let out = dir.path().join(api);
        let o = dialogue(&out, &["--sut", &srv.url, "--api", api]);
        assert_eq!(o.status.code(), Some(0), "{api}: {}", text(&o));
        let http = result(&out);
        assert_eq!(turns(&http), turns(&local), "{api}");
        assert!(turns(&http).len() >= 4, "{api}: two dialogues of several turns");
        assert_eq!(http["performance"]["valid"], true, "{api}");
        // The server saw the whole conversation: as many prompt tokens as the in-process SUT
        // held in its cache and prefilled, turn by turn.
        assert_eq!(prompt_lengths(&out), local_prompts, "{api}");
        let s = &http["meta"]["settings"]["sut"];
        assert_eq!(s["kind"], "http", "{api}");
        assert_eq!(s["api"], api);
        assert_eq!(s["endpoint"], srv.url.as_str());
        assert_eq!(s["model_sha256"], local["meta"]["model"]["sha256"]);
        let n = turns(&http).len() as u64;
        assert_eq!(s["record"]["token_count_source"]["usage"], n, "{api}");
        assert_eq!(s["record"]["failed_queries"], 0);
        assert_eq!(http["meta"]["settings"]["kv_reuse"], "up to the server");
        for q in http["performance"]["per_query"].as_array().unwrap() {
            assert!(q["ttft_ms"].as_f64().unwrap() > 0.0, "{q}");
            assert!(q["tpot_ms"].as_f64().unwrap() > 0.0, "{q}");
        }
        // tokens.csv: one row per streamed token.
        let csv = std::fs::read_to_string(out.join("tokens.csv")).unwrap();
        let rows = csv.lines().filter(|l| !l.starts_with('#')).count() as u64 - 1;
        assert_eq!(rows, turns(&http).iter().map(|t| t.1).sum::<u64>());
    }
    assert!(local["meta"]["settings"].get("sut").is_none());
}

#[test]
fn what_cannot_reach_a_server_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let url = "http://127.0.0.1:9";
    for (extra, named) in [
        (&["--governor", "pid"][..], "--governor with --sut http://127.0.0.1:9"),
        (
            &["--device", "sim:pixel-8-pro"],
            "--device sim:pixel-8-pro with --sut http://127.0.0.1:9",
        ),
        (&["--http-concurrency", "2"], "--http-concurrency not supported"),
    ] {
        let o = dialogue(&out, &[&["--sut", url][..], extra].concat());
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(named), "{named}: {}", text(&o));
        assert!(!out.exists(), "nothing is written before the refusal");
    }
    // The HTTP flags need an HTTP SUT.
    let o = dialogue(&out, &["--api", "chat"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--api"), "{}", text(&o));
    // Nothing listening: a clear error, exit 2.
    let o = dialogue(&out, &["--sut", url]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("the server does not answer"), "{}", text(&o));
}
