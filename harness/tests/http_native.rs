//! llama.cpp's native `/completion` (`--api native`) against responses recorded from a real
//! `llama-server` (llama.cpp as vendored in llama-cpp-python 0.3.36, `bench/llamacpp-peer.sh`;
//! SmolLM2-135M-Instruct Q4_1, `--alias smollm2-135m -t 1 -c 2048 -np 1`), replayed by a
//! small loopback server in this file (`tests/fixtures/llama-server/`):
//!
//! - `completion-stream.sse`: `{"prompt": [16 ids], "n_predict": 6, "temperature": 0,
//!   "ignore_eos": true, "stream": true, "return_tokens": true, "cache_prompt": false}`;
//! - `completion-stream-nprobs.sse`: the same with `"n_predict": 3, "n_probs": 2`;
//! - `completion-nprobs.json`: an MMLU-style prompt of 37 ids, `"n_predict": 1,
//!   "temperature": 0, "ignore_eos": true, "n_probs": 20, "cache_prompt": false`, not
//!   streamed;
//! - `v1-models.json`: `GET /v1/models`.
//!
//! The parser's expectations are read from the recorded events themselves (ids, text, the
//! last event's counts and timings), so the client is checked against the server's own bytes.

mod http_util;

use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_util::{bin, read_request};
use pocketperf::http::client::{ApiKind, HttpClient};
use pocketperf::mmlu::http::letters_from;
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llama-server")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// The recorded events of an SSE fixture, in order.
fn events(name: &str) -> Vec<Value> {
    read(name)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Replays the fixtures: `/v1/models`; `/completion` streamed (with or without `n_probs`) or
/// whole. Every request body is kept.
struct Replay {
    url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Replay {
    fn start() -> Replay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let b = bodies.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let Some((path, body)) = read_request(&mut r) else {
                        return;
                    };
                    let (kind, text) = match path.as_str() {
                        "/v1/models" => ("application/json", read("v1-models.json")),
                        "/completion" if body["stream"] == true => {
                            let n = body["n_probs"].as_u64().unwrap_or(0);
                            let f = if n > 0 {
                                "completion-stream-nprobs.sse"
                            } else {
                                "completion-stream.sse"
                            };
                            ("text/event-stream", read(f))
                        }
                        "/completion" => ("application/json", read("completion-nprobs.json")),
                        _ => ("application/json", "{}".to_string()),
                    };
                    b.lock().unwrap().push(body);
                    let mut w = s;
                    let _ = write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nConnection: close\r\n\r\n"
                    );
                    // One write per event, as the server sent them.
                    for part in text.split_inclusive("\n\n") {
                        let _ = w.write_all(part.as_bytes());
                        let _ = w.flush();
                    }
                });
            }
        });
        Replay { url, bodies }
    }

    fn client(&self) -> HttpClient {
        HttpClient::new(
            &self.url,
            1,
            Duration::from_secs(30),
            Duration::from_secs(10),
        )
        .unwrap()
    }
}

#[test]
fn a_native_stream_is_read_token_by_token_with_ids_counts_and_timings() {
    let srv = Replay::start();
    let ev = events("completion-stream.sse");
    let last = ev.last().unwrap();
    assert_eq!(last["stop"], true);
    let ids: Vec<u32> = ev
        .iter()
        .flat_map(|e| e["tokens"].as_array().unwrap().clone())
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let text: String = ev.iter().map(|e| e["content"].as_str().unwrap()).collect();
    let mut arrivals = Vec::new();
    let body = json!({"prompt": [1, 2, 3], "n_predict": 6, "stream": true});
    let out = srv
        .client()
        .stream(ApiKind::Native, &body, |t: Instant| arrivals.push(t))
        .unwrap();
    assert_eq!(out.token_ids, ids);
    assert_eq!(out.token_ids.len(), 6);
    assert_eq!(out.text, text);
    assert_eq!(out.token_times.len(), ids.len());
    assert_eq!(arrivals, out.token_times);
    // The last event ends the stream: its counts are the usage, its timings kept.
    assert_eq!(
        out.usage,
        Some((
            last["tokens_evaluated"].as_u64().unwrap(),
            last["tokens_predicted"].as_u64().unwrap()
        ))
    );
    assert_eq!(out.timings.as_ref().unwrap(), &last["timings"]);
    assert_eq!(out.finish_reason.as_deref(), Some("length"));
    assert!(out.t_done.is_some() && out.logprobs.is_empty());

    // With n_probs, each token brings its alternatives (ids and log-probabilities).
    let ev = events("completion-stream-nprobs.sse");
    let body = json!({"prompt": [1, 2, 3], "n_predict": 3, "n_probs": 2, "stream": true});
    let out = srv.client().stream(ApiKind::Native, &body, |_| {}).unwrap();
    let with_probs: Vec<&Value> = ev
        .iter()
        .filter_map(|e| e.get("completion_probabilities"))
        .collect();
    assert_eq!(out.logprobs.len(), with_probs.len());
    assert_eq!(out.logprobs.len(), out.token_ids.len());
    for (got, want) in out.logprobs.iter().zip(with_probs) {
        assert_eq!(got, want);
        assert_eq!(got[0]["top_logprobs"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn the_four_letters_are_read_by_id_from_n_probs() {
    let srv = Replay::start();
    let resp = srv
        .client()
        .complete(
            ApiKind::Native,
            &json!({"prompt": [1], "n_predict": 1, "n_probs": 20}),
        )
        .unwrap();
    let top = resp["completion_probabilities"][0]["top_logprobs"]
        .as_array()
        .unwrap();
    // The letters' ids as this model's tokenizer names " A" … " D".
    let tok = pocketperf_runtime::tokenizer::Tokenizer::from_gguf(
        &pocketperf_runtime::gguf::GgufFile::open(&pocketperf_testkit::reference_model(|| {
            pocketperf::model_store::reference_model_path().unwrap()
        }))
        .unwrap(),
    )
    .unwrap();
    let pieces = [" A", " B", " C", " D"].map(String::from);
    let ids: [u32; 4] = std::array::from_fn(|i| {
        let t = tok.encode(&pieces[i], false).unwrap();
        assert_eq!(t.len(), 1, "{:?}", pieces[i]);
        t[0]
    });
    let (lp, missing) = letters_from(&resp, &pieces, ids).unwrap();
    assert_eq!(missing, 0);
    for (i, id) in ids.iter().enumerate() {
        let want = top
            .iter()
            .find(|t| t["id"] == *id)
            .map(|t| t["logprob"].as_f64().unwrap() as f32)
            .unwrap();
        assert_eq!(lp[i], want, "{}", pieces[i]);
        assert!(lp[i].is_finite() && lp[i] < 0.0);
    }
    // A letter outside the alternatives is −∞ and counted.
    let (lp, missing) = letters_from(&resp, &pieces, [ids[0], ids[1], ids[2], 7]).unwrap();
    assert_eq!(missing, 1);
    assert_eq!(lp[3], f32::NEG_INFINITY);
}

#[test]
fn a_run_and_an_mmlu_slice_go_through_the_native_endpoint() {
    let srv = Replay::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("user.conf");
    std::fs::write(
        &cfg,
        "llm.*.min_query_count = 3\nllm.*.max_query_count = 3\n*.*.min_duration = 0\n",
    )
    .unwrap();
    let out = dir.path().join("run");
    let o = bin()
        .args(["run", "--scenario", "single-stream", "--threads", "1"])
        .args(["--sut", &srv.url, "--api", "native", "--warmup", "0"])
        .arg("--config")
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let t = pocketperf_testkit::output_text(&o);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{t}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let recorded = events("completion-stream.sse").last().unwrap()["tokens_predicted"]
        .as_u64()
        .unwrap();
    let q = r["performance"]["per_query"].as_array().unwrap();
    assert_eq!(q.len(), 3);
    // Each query counted the tokens the server says it predicted.
    assert!(q.iter().all(|q| q["tokens"] == recorded), "{q:?}");
    let s = &r["meta"]["settings"]["sut"];
    assert_eq!(s["api"], "native");
    assert_eq!(s["model_id"], "smollm2-135m");
    assert_eq!(s["record"]["token_count_source"]["usage"], 3);
    assert_eq!(s["record"]["server_timings"]["queries"], 3);
    // The requests: token ids, llama.cpp's names, greedy, fixed length.
    let bodies = srv.bodies.lock().unwrap().clone();
    let completions: Vec<&Value> = bodies.iter().filter(|b| !b.is_null()).collect();
    assert_eq!(completions.len(), 3);
    for b in completions {
        assert!(
            b["prompt"].as_array().unwrap().iter().all(Value::is_u64),
            "{b}"
        );
        assert!(b["n_predict"].as_u64().unwrap() >= 1);
        assert_eq!(
            (&b["temperature"], &b["ignore_eos"]),
            (&json!(0), &json!(true))
        );
        assert_eq!(
            (&b["stream"], &b["return_tokens"]),
            (&json!(true), &json!(true))
        );
    }

    let mmlu = pocketperf_testkit::shared_dir().join("datasets/mmlu");
    let out = dir.path().join("mmlu");
    let o = bin()
        .args([
            "mmlu",
            "run",
            "--subjects",
            "miscellaneous",
            "--limit",
            "2",
            "--shots",
            "0",
        ])
        .args(["--threads", "1", "--sut", &srv.url, "--api", "native"])
        .arg("--mmlu-dir")
        .arg(&mmlu)
        .arg("--out")
        .arg(&out)
        .env_remove("POCKETPERF_MMLU_DIR")
        .output()
        .unwrap();
    let t = pocketperf_testkit::output_text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("logprob mode"), "{t}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(r["meta"]["settings"]["sut"]["api"], "native");
    let n_probs: Vec<u64> = srv
        .bodies
        .lock()
        .unwrap()
        .iter()
        .filter_map(|b| b["n_probs"].as_u64())
        .collect();
    assert_eq!(n_probs, [20, 20, 20], "the mode probe and two questions");
}
