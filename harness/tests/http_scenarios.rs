//! The dialogue scenario and `soak` through `--sut http://127.0.0.1:PORT` against
//! `pocketperf serve --http` with the reference model: the dialogue with the same turns,
//! token counts and prompt lengths as the in-process SUT (greedy), the conversation sent whole
//! each turn (chat messages, or the rendered conversation's ids), every token timed from the
//! stream; a short soak with the same replies, greedy probes and MMLU log-probabilities as
//! through a `pocketperf serve` child, the server's memory from its `/health`; and what
//! cannot reach a server refused before anything runs.

mod http_util;
mod soak_util;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use http_util::{Server, bin};
use serde_json::Value;
use soak_util::{check, holds_the_model, journal, mmlu_dir, of_type, robustness};

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
        assert!(
            turns(&http).len() >= 4,
            "{api}: two dialogues of several turns"
        );
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
        // Timed on arrival: tokens read in one go (a loaded client) share an instant.
        let per_query = http["performance"]["per_query"].as_array().unwrap();
        for q in per_query {
            assert!(q["ttft_ms"].as_f64().unwrap() > 0.0, "{q}");
            assert!(q["tpot_ms"].as_f64().unwrap() >= 0.0, "{q}");
        }
        assert!(
            per_query
                .iter()
                .any(|q| q["tpot_ms"].as_f64().unwrap() > 0.0)
        );
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
        (
            &["--governor", "pid"][..],
            "--governor with --sut http://127.0.0.1:9",
        ),
        (
            &["--device", "sim:pixel-8-pro"],
            "--device sim:pixel-8-pro with --sut http://127.0.0.1:9",
        ),
        (
            &["--http-concurrency", "2"],
            "--http-concurrency not supported",
        ),
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
    assert!(
        text(&o).contains("the server does not answer"),
        "{}",
        text(&o)
    );
}

/// An eight-second soak: two dialogues of 4-token turns, one greedy and one MMLU probe a round
/// every four seconds, memory after every request.
fn soak(out: &Path, extra: &[&str]) -> Output {
    bin()
        .args([
            "soak",
            "--duration",
            "8s",
            "--dialogues",
            "2",
            "--max-turn-tokens",
            "4",
        ])
        .args([
            "--probe-prompts",
            "1",
            "--probe-tokens",
            "4",
            "--probe-mmlu",
            "1",
        ])
        .args([
            "--probe-every",
            "4s",
            "--rss-every",
            "0s",
            "--checkpoint-every",
            "4s",
        ])
        .arg("--mmlu-dir")
        .arg(mmlu_dir())
        .arg("--out")
        .arg(out)
        .args(extra)
        // POCKETPERF_ISA is inherited, as by the HTTP server (`http_util::Server`): a soak's
        // own `serve` child then runs the same kernel tier as the server it is compared with.
        .output()
        .unwrap()
}

/// Query texts by (cycle, dialogue, turn), greedy probe texts and MMLU log-probabilities (as
/// f32) by probe id.
type Replies = (
    BTreeMap<(u64, u64, u64), String>,
    BTreeMap<String, String>,
    BTreeMap<String, Vec<f32>>,
);

fn replies(j: &[Value]) -> Replies {
    let mut turns = BTreeMap::new();
    for q in of_type(j, "query") {
        let k = |f: &str| q[f].as_u64().unwrap();
        turns.insert(
            (k("cycle"), k("dialogue"), k("turn")),
            q["text"].as_str().unwrap().to_string(),
        );
    }
    let (mut greedy, mut mmlu) = (BTreeMap::new(), BTreeMap::new());
    for p in of_type(j, "probe") {
        let id = p["probe_id"].as_str().unwrap().to_string();
        if p["kind"] == "mmlu" {
            let lps = p["logprobs"].as_array().unwrap();
            mmlu.insert(id, lps.iter().map(|v| v.as_f64().unwrap() as f32).collect());
        } else {
            greedy.insert(id, p["text"].as_str().unwrap().to_string());
        }
    }
    (turns, greedy, mmlu)
}

#[test]
fn a_short_soak_through_http_matches_the_child_server() {
    let srv = Server::start(&["--slots", "1", "--ctx", "2048"]);
    let model_id = srv.client().model().unwrap().id;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("http");
    let o = soak(&out, &["--sut", &srv.url]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let doc = robustness(&out);
    assert_eq!(doc["status"], "completed", "{}", text(&o));
    for name in ["crashes", "timeouts", "output_drift"] {
        assert_eq!(
            check(&doc, name)["verdict"],
            "pass",
            "{name}: {}",
            check(&doc, name)
        );
    }
    let j = journal(&out);
    assert_eq!(
        j[0]["provenance"]["settings"]["sut"]["endpoint"],
        srv.url.as_str()
    );
    // Connected once, to the server's model; nothing was started.
    let starts = of_type(&j, "sut_start");
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["pid"], 0);
    assert_eq!(starts[0]["loaded"]["name"], model_id.as_str());
    assert!(!of_type(&j, "query").is_empty());
    for q in of_type(&j, "query") {
        assert_eq!(q["generated"], 4, "{q}");
        // Timed on arrival: tokens read in one go (a loaded client) share an instant.
        let ms = |k: &str| q[k].as_f64().unwrap_or(-1.0);
        assert!(ms("ttft_ms") > 0.0 && ms("tpot_ms") >= 0.0, "{q}");
        assert!(q["prompt_tokens"].as_u64().unwrap() > 4, "{q}");
    }
    assert!(
        of_type(&j, "query")
            .iter()
            .any(|q| q["tpot_ms"].as_f64().unwrap() > 0.0)
    );
    assert!(of_type(&j, "probe_round").len() >= 2);
    // Memory is the server's own, from its /health: the model is resident there.
    let rss = of_type(&j, "rss");
    assert!(!rss.is_empty());
    for r in &rss {
        assert_eq!(r["pid"], srv.child.id(), "{r}");
        assert!(holds_the_model(r), "{r}");
    }

    // The same soak through a `pocketperf serve` child: the same replies where both ran them.
    let child_out = dir.path().join("child");
    let o = soak(&child_out, &["--threads", "1"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let (ht, hg, hm) = replies(&j);
    let (ct, cg, cm) = replies(&journal(&child_out));
    let mut compared = 0;
    for (k, t) in &ht {
        if let Some(c) = ct.get(k) {
            assert_eq!(t, c, "turn {k:?}");
            compared += 1;
        }
    }
    assert!(compared >= 2, "{compared} turns in both");
    assert!(!hg.is_empty() && !hm.is_empty());
    for (id, t) in &hg {
        assert_eq!(Some(t), cg.get(id), "greedy probe {id}");
    }
    for (id, lp) in &hm {
        assert_eq!(Some(lp), cm.get(id), "mmlu probe {id}");
    }
}

#[test]
fn a_soak_over_http_refuses_the_flags_of_a_server_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for (extra, named) in [
        (&["--threads", "2"][..], "--threads"),
        (&["--serve-cmd", "x serve"], "--serve-cmd"),
        // The server's default ring size given explicitly is still a setting it cannot apply.
        (&["--ctx", "2048"], "--ctx"),
        (
            &["--ctx", "512", "--kv-policy", "sliding"],
            "--ctx, --kv-policy",
        ),
    ] {
        let o = soak(
            &out,
            &[&["--sut", "http://127.0.0.1:9"][..], extra].concat(),
        );
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            text(&o).contains(&format!("{named} not supported with --sut http://")),
            "{named}: {}",
            text(&o)
        );
        assert!(!out.exists());
    }
}
