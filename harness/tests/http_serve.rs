//! `pocketperf serve --http` with the reference model, through its HTTP API and as the
//! system under test of `run` and `mmlu run` (`--sut http://127.0.0.1:PORT`):
//!
//! - acceptance: Offline and SingleStream runs of three queries and an MMLU slice of 20
//!   questions give, through HTTP, the same per-query token counts, validity and answers as
//!   the in-process SUT with the same seeds (greedy), and the MMLU run uses logprob mode;
//! - load: 64 concurrent streaming clients (four of which hang up mid-stream) all get
//!   well-formed streams of exactly the tokens asked, and afterwards no sequence is left busy
//!   or queued; bad requests get their status and a JSON error; SIGTERM lets a stream in
//!   flight finish and the server exit 0.
//!
//! One server per test, one worker thread, small contexts: seconds on two cores.

mod http_util;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use http_util::{Server, bin};
use pocketperf::http::client::{ApiKind, HttpClient, HttpError};
use pocketperf_reports::schema::load_result;
use pocketperf_testkit::shared_dir;
use serde_json::{Value, json};

fn ok(out: &Output) -> String {
    let t = pocketperf_testkit::output_text(out);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{t}");
    t
}

const THREE_QUERIES: &str = "\
llm.*.min_query_count = 3
llm.*.max_query_count = 3
*.*.min_duration = 0
";

fn run(scenario: &str, dir: &Path, sut: &[&str]) -> Value {
    let cfg = dir.join("user.conf");
    std::fs::write(&cfg, THREE_QUERIES).unwrap();
    let out = dir.join("out");
    let o = bin()
        .args([
            "run",
            "--scenario",
            scenario,
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--threads",
            "1",
        ])
        .args(sut)
        .output()
        .unwrap();
    ok(&o);
    let r = load_result(&out).unwrap();
    serde_json::to_value(&r).unwrap()
}

/// `(sample_index, tokens)` of every query, by id.
fn tokens_by_query(r: &Value) -> Vec<(u64, u64)> {
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

#[test]
fn runs_through_http_match_the_in_process_sut() {
    let srv = Server::start(&["--slots", "4", "--ctx", "1024"]);
    let sut = ["--sut", srv.url.as_str()];
    for scenario in ["offline", "single-stream"] {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let local = run(scenario, a.path(), &[]);
        let http = run(scenario, b.path(), &sut);
        assert_eq!(
            tokens_by_query(&local),
            tokens_by_query(&http),
            "{scenario}"
        );
        assert_eq!(tokens_by_query(&http).len(), 3);
        let p = |r: &Value, k: &str| r["performance"][k].clone();
        assert_eq!(p(&local, "valid"), p(&http, "valid"), "{scenario}");
        assert_eq!(
            p(&local, "invalid_reasons"),
            p(&http, "invalid_reasons"),
            "{scenario}"
        );
        if scenario == "offline" {
            assert_eq!(p(&http, "valid"), true, "{:?}", p(&http, "invalid_reasons"));
        }
        let s = &http["meta"]["settings"]["sut"];
        assert_eq!(s["kind"], "http");
        assert_eq!(s["endpoint"], srv.url.as_str());
        // Our own server names the model file's digest: the one this run measured.
        assert_eq!(s["model_sha256"], local["meta"]["model"]["sha256"]);
        assert_eq!(
            s["record"]["token_count_source"]["usage"],
            3 + 1,
            "3 + warm-up"
        );
        assert_eq!(s["record"]["failed_queries"], 0);
        assert_eq!(local["meta"]["settings"]["sut"]["kind"], "in-process");
        // Every token was stamped as it arrived.
        for q in http["performance"]["per_query"].as_array().unwrap() {
            assert!(q["ttft_ms"].as_f64().unwrap() > 0.0);
            if q["tokens"].as_u64().unwrap() > 1 {
                assert!(q["tpot_ms"].as_f64().unwrap() > 0.0);
            }
        }
    }
    // The chat API gives the same counts (the server renders the same template).
    let c = tempfile::tempdir().unwrap();
    let chat = run("offline", c.path(), &["--sut", &srv.url, "--api", "chat"]);
    let d = tempfile::tempdir().unwrap();
    let local = run("offline", d.path(), &[]);
    assert_eq!(tokens_by_query(&chat), tokens_by_query(&local));
    assert_eq!(chat["meta"]["settings"]["sut"]["api"], "chat");
}

fn mmlu(dir: &Path, sut: &[&str]) -> Value {
    let mmlu = shared_dir().join("datasets/mmlu");
    let o = bin()
        .args(["mmlu", "run", "--mmlu-dir", mmlu.to_str().unwrap()])
        .args([
            "--subjects",
            "miscellaneous",
            "--limit",
            "20",
            "--shots",
            "0",
        ])
        .args(["--threads", "1", "--out", dir.to_str().unwrap()])
        .args(sut)
        .env_remove("POCKETPERF_MMLU_DIR")
        .output()
        .unwrap();
    let t = pocketperf_testkit::output_text(&o);
    assert!(o.status.success(), "{t}");
    serde_json::from_str(&std::fs::read_to_string(dir.join("mmlu.json")).unwrap()).unwrap()
}

#[test]
fn mmlu_through_http_uses_logprob_mode_and_agrees_with_in_process() {
    let srv = Server::start(&["--slots", "2", "--ctx", "1024"]);
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let local = mmlu(a.path(), &[]);
    let http = mmlu(b.path(), &["--sut", &srv.url]);
    assert_eq!(http["mode"], "logprob");
    let rf: Value =
        serde_json::from_str(&std::fs::read_to_string(b.path().join("result.json")).unwrap())
            .unwrap();
    let s = &rf["meta"]["settings"]["sut"];
    assert_eq!(s["score_mode"]["used"], "logprob", "{s}");
    assert_eq!(s["letters_outside_top_k"], 0);
    let (l, h) = (
        local["per_question"].as_array().unwrap(),
        http["per_question"].as_array().unwrap(),
    );
    assert_eq!(l.len(), 20);
    assert_eq!(h.len(), 20);
    for (x, y) in l.iter().zip(h) {
        assert_eq!(
            (&x["row"], &x["choice"], &x["correct"]),
            (&y["row"], &y["choice"], &y["correct"])
        );
        // The prompt is the same token ids, scored from one prefill in both: the log-softmax
        // agrees to float rounding (the JSON carries f32 exactly).
        for k in 0..4 {
            let (p, q) = (
                x["response"]["logprobs"][k].as_f64().unwrap(),
                y["response"]["logprobs"][k].as_f64().unwrap(),
            );
            assert!((p - q).abs() < 1e-3, "row {}: {p} vs {q}", x["row"]);
        }
    }
    assert_eq!(local["overall"], http["overall"]);
}

/// A raw streaming request that reads `n` events and hangs up.
fn hang_up_after(port: u16, n: usize) {
    let body = json!({"prompt": "Count: one two three", "max_tokens": 16, "stream": true,
                      "ignore_eos": true, "temperature": 0})
    .to_string();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut seen = 0;
    let mut buf = [0u8; 4096];
    while seen < n {
        let k = s.read(&mut buf).unwrap();
        assert!(k > 0, "the server closed first");
        seen += buf[..k].windows(6).filter(|w| w == b"data: ").count();
    }
    drop(s);
}

fn status_of(e: HttpError) -> u16 {
    match e {
        HttpError::Status { status, .. } => status,
        other => panic!("expected an HTTP status, got {other}"),
    }
}

#[test]
fn many_streaming_clients_bad_requests_and_sigterm() {
    let srv = Server::start(&[
        "--slots",
        "8",
        "--ctx",
        "256",
        "--max-tokens",
        "32",
        "--max-body-bytes",
        "4096",
        "--drain-s",
        "20",
    ]);
    let client = srv.client();
    let t0 = Instant::now();
    let mut threads = Vec::new();
    for k in 0..64usize {
        let c = client.clone();
        let port = srv.port();
        threads.push(std::thread::spawn(move || {
            if k % 16 == 5 {
                hang_up_after(port, 2);
                return None;
            }
            let api = if k % 2 == 0 {
                ApiKind::Completions
            } else {
                ApiKind::Chat
            };
            let mut body = json!({"max_tokens": 6, "stream": true, "ignore_eos": true,
                                  "temperature": 0, "stream_options": {"include_usage": true}});
            let prompt = format!("Client {k} says hello and");
            if api == ApiKind::Chat {
                body["messages"] = json!([{"role": "user", "content": prompt}]);
            } else {
                body["prompt"] = json!(prompt);
            }
            Some(c.stream(api, &body, |_| {}))
        }));
    }
    let mut streams = 0;
    for t in threads {
        if let Some(r) = t.join().unwrap() {
            let out = r.expect("a well-formed stream");
            assert_eq!(out.token_times.len(), 6);
            assert_eq!(out.usage.map(|u| u.1), Some(6));
            assert_eq!(out.finish_reason.as_deref(), Some("length"));
            assert!(out.t_done.is_some() && !out.text.is_empty());
            streams += 1;
        }
    }
    assert_eq!(streams, 60);
    assert!(t0.elapsed() < Duration::from_secs(240));
    // No sequence left behind: every slot free, nothing queued, the hang-ups cancelled.
    let deadline = Instant::now() + Duration::from_secs(10);
    let health = loop {
        let h = client.health().unwrap();
        if h["cancelled"] == 4 || Instant::now() > deadline {
            break h;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        (
            &health["slots_busy"],
            &health["queued"],
            &health["cancelled"]
        ),
        (&json!(0), &json!(0), &json!(4)),
        "{health}"
    );
    assert_eq!(health["completed"], 60);

    // Bad requests: status and a JSON error body, and the server carries on.
    let c = |b: Value| client.complete(ApiKind::Completions, &b).map_err(status_of);
    assert_eq!(
        c(json!({"prompt": "x", "max_tokens": 33})).unwrap_err(),
        400
    );
    assert_eq!(
        c(json!({"prompt": vec![1; 300], "max_tokens": 1})).unwrap_err(),
        400
    );
    assert_eq!(c(json!({"prompt": "x".repeat(5000)})).unwrap_err(), 413);
    assert_eq!(
        c(json!({"prompt": [99_999_999], "max_tokens": 1})).unwrap_err(),
        400
    );
    assert_eq!(c(json!({"nothing": 1})).unwrap_err(), 400);
    let whole = c(json!({"prompt": "Hello", "max_tokens": 3, "temperature": 0,
                          "ignore_eos": true, "logprobs": 2}))
    .unwrap();
    assert_eq!(whole["usage"]["completion_tokens"], 3);
    assert_eq!(
        whole["choices"][0]["logprobs"]["tokens"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let models = HttpClient::model(&client).unwrap();
    assert_eq!(models.owned_by.as_deref(), Some("pocketperf"));
    assert_eq!(models.sha256.as_ref().map(String::len), Some(64));

    // SIGTERM with a stream in flight: the stream finishes, the server exits 0.
    let c2 = client.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let stream = std::thread::spawn(move || {
        let body = json!({"prompt": "Once upon a time", "max_tokens": 24, "stream": true,
                          "ignore_eos": true, "temperature": 0});
        c2.stream(ApiKind::Completions, &body, |_| {
            let _ = tx.send(());
        })
    });
    rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let mut srv = srv;
    // SAFETY: kill sends a signal to the child this test started; no memory is involved.
    assert_eq!(
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGTERM) },
        0
    );
    let out = stream
        .join()
        .unwrap()
        .expect("the stream in flight completes");
    assert_eq!(out.token_times.len(), 24);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = srv.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the server did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_request_past_its_deadline_ends_with_a_timeout_and_frees_its_slot() {
    // One second for 200 tokens on one thread: the stream is cut by the deadline (an
    // error event after its first tokens), the request behind it waits past its own
    // deadline in the queue (504), and nothing stays busy.
    let srv = Server::start(&[
        "--slots",
        "1",
        "--ctx",
        "512",
        "--max-tokens",
        "256",
        "--request-timeout-s",
        "1",
    ]);
    let client = srv.client();
    let c2 = client.clone();
    let body = json!({"prompt": "Once upon a time", "max_tokens": 200, "stream": true,
                      "ignore_eos": true, "temperature": 0});
    let b2 = body.clone();
    let first = std::thread::spawn(move || c2.stream(ApiKind::Completions, &b2, |_| {}));
    std::thread::sleep(Duration::from_millis(300));
    let second = client.stream(ApiKind::Completions, &body, |_| {});
    let first = first.join().unwrap();
    let seen = format!("first: {first:?}\nsecond: {second:?}");
    match first {
        Err(HttpError::Stream { reason, .. }) => {
            assert!(reason.contains("request timed out"), "{reason}")
        }
        other => panic!("expected a timed-out stream, got {other:?}"),
    }
    match second {
        Err(HttpError::Status { status: 504, .. }) => {}
        Err(HttpError::Stream { reason, .. }) if reason.contains("timed out") => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The worker frees the slot in the step that sent the error and publishes its counters
    // at the end of that step: poll briefly.
    let until = Instant::now() + Duration::from_secs(5);
    let h = loop {
        let h = client.health().unwrap();
        if h["slots_busy"] == 0 || Instant::now() > until {
            break h;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        (&h["slots_busy"], &h["queued"]),
        (&json!(0), &json!(0)),
        "{h}\n{seen}"
    );
    // The server goes on.
    let after = client
        .complete(
            ApiKind::Completions,
            &json!({"prompt": "Hi", "max_tokens": 2, "temperature": 0}),
        )
        .expect("a request after the timeouts");
    assert_eq!(after["usage"]["completion_tokens"], 2);
    assert!(h["timed_out"].as_u64().unwrap() >= 2, "{h}");
}

#[test]
fn a_non_loopback_address_needs_allow_remote() {
    let o = bin()
        .args(["serve", "--http", "0.0.0.0:0", "--threads", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let t = pocketperf_testkit::output_text(&o);
    assert!(t.contains("--allow-remote"), "{t}");
}

/// A greedy completion of `prompt` (text with the template's control tokens) with the three
/// likeliest alternatives of every position; its text, logprobs, `timings.cache_n` and
/// `usage.prompt_tokens`.
fn greedy(client: &HttpClient, prompt: &str) -> (String, Value, u64, u64) {
    let r = client
        .complete(
            ApiKind::Completions,
            &json!({"prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 3,
                    "ignore_eos": true}),
        )
        .unwrap();
    (
        r["choices"][0]["text"].as_str().unwrap().to_string(),
        r["choices"][0]["logprobs"].clone(),
        r["timings"]["cache_n"].as_u64().unwrap(),
        r["usage"]["prompt_tokens"].as_u64().unwrap(),
    )
}

#[test]
fn prefix_reuse_gives_the_output_of_a_whole_prefill() {
    let on = Server::start(&["--slots", "2", "--ctx", "1024"]);
    let off = Server::start(&["--slots", "2", "--ctx", "1024", "--prefix-reuse", "off"]);
    let turn = |u: &str| format!("<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n");
    let first = turn("Name three rivers of Europe.");
    let (reply, ..) = greedy(&off.client(), &first);
    // A conversation growing by a turn; an unrelated question (to the other, unused slot);
    // the first prompt again; a question sharing most of the unrelated one.
    let prompts = [
        first.clone(),
        format!("{first}{reply}<|im_end|>\n{}", turn("And two of Asia?")),
        turn("What is the boiling point of water at sea level?"),
        first.clone(),
        turn("What is the boiling point of water on Everest?"),
    ];
    let mut cached = Vec::new();
    for p in &prompts {
        let (t_on, lp_on, c_on, n_on) = greedy(&on.client(), p);
        let (t_off, lp_off, c_off, n_off) = greedy(&off.client(), p);
        // Bit for bit: the text and every log-probability.
        assert_eq!(t_on, t_off, "{p:?}");
        assert_eq!(lp_on, lp_off, "{p:?}");
        assert_eq!((c_off, n_on), (0, n_off));
        cached.push((c_on, n_on));
    }
    assert_eq!(cached[0].0, 0);
    // The second turn reuses the first prompt and (as far as the reply's text tokenizes back
    // to the same ids) the reply fed through the model, all but its last token.
    let (c, n) = (cached[1].0, cached[0].1);
    assert!(c >= n && c <= n + 11, "{cached:?}");
    // The unrelated question went to the unused slot; the first prompt found its slot.
    assert_eq!(cached[2].0, 0, "{cached:?}");
    assert_eq!(cached[3].0, cached[3].1 - 1, "{cached:?}");
    // The last question reuses the shared part of the one before.
    assert!(
        cached[4].0 > 8 && cached[4].0 < cached[4].1 - 1,
        "{cached:?}"
    );
    let h = on.client().health().unwrap();
    assert_eq!(
        (h["slots_busy"].as_u64(), h["queued"].as_u64()),
        (Some(0), Some(0))
    );
}
