//! The HTTP system under test against a misbehaving server: a small fake OpenAI-compatible
//! server in this file (one thread per connection, `Connection: close`, each request's
//! behaviour chosen by its order) streams tokens, then is killed mid-stream, stalls, sends
//! malformed SSE, answers 500/503, or returns fewer tokens than asked. Each run is an Offline
//! run of three queries (no warm-up, one connection at a time so the order is fixed); the run
//! must finish, record what happened and say so. Nothing listening is a clear error, exit 2.

mod http_util;

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http_util::read_request;
use pocketperf_reports::schema::{ResultFile, load_result};
use serde_json::{Value, json};

/// What the fake server does with one completion request.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Stream every token asked for, then usage and `[DONE]`.
    Whole,
    /// Close the connection after this many tokens (a killed server).
    KillAfter(usize),
    /// Send this many tokens, then go silent for five seconds.
    StallAfter(usize),
    /// An event that is not JSON.
    Malformed,
    /// This HTTP status with an error body.
    Status(u16),
    /// At most this many tokens, finish_reason `stop`.
    Short(usize),
}

struct Fake {
    port: u16,
    requests: Arc<AtomicUsize>,
}

fn token_event(k: usize) -> String {
    let c = json!({"choices": [{"index": 0, "text": format!(" t{k}"), "finish_reason": null}]});
    format!("data: {c}\n\n")
}

fn serve_one(stream: TcpStream, act: impl Fn(usize) -> Act, requests: &AtomicUsize) {
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let Some((path, body)) = read_request(&mut r) else {
        return;
    };
    let mut w = stream;
    if path == "/v1/models" {
        let b = json!({"object": "list", "data": [{"id": "fake-model", "owned_by": "fake"}]})
            .to_string();
        let _ = write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{b}",
            b.len()
        );
        return;
    }
    let n = requests.fetch_add(1, Ordering::SeqCst);
    let want = body["max_tokens"].as_u64().unwrap_or(1) as usize;
    let a = act(n);
    if let Act::Status(code) = a {
        let b = json!({"error": {"message": format!("fake {code}"), "type": "x"}}).to_string();
        let _ = write!(
            w,
            "HTTP/1.1 {code} Oops\r\nContent-Type: application/json\r\nRetry-After: 0\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        );
        return;
    }
    let _ = write!(
        w,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    );
    let (tokens, reason) = match a {
        Act::Short(k) => (want.min(k), "stop"),
        _ => (want, "length"),
    };
    for k in 0..tokens {
        match a {
            Act::KillAfter(m) if k == m => return,
            Act::StallAfter(m) if k == m => {
                std::thread::sleep(Duration::from_secs(5));
                return;
            }
            Act::Malformed if k == 1 => {
                let _ = w.write_all(b"data: {not json\n\n");
                std::thread::sleep(Duration::from_millis(200));
                return;
            }
            _ => {}
        }
        if w.write_all(token_event(k).as_bytes()).is_err() {
            return;
        }
        let _ = w.flush();
    }
    let fin = json!({"choices": [{"index": 0, "text": "", "finish_reason": reason}],
                     "timings": {"prompt_ms": 1.0, "predicted_ms": 2.0, "predicted_n": tokens}});
    let usage = json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": tokens}});
    let _ = write!(w, "data: {fin}\n\ndata: {usage}\n\ndata: [DONE]\n\n");
}

impl Fake {
    fn start(act: fn(usize) -> Act) -> Fake {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let r = requests.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                let r = r.clone();
                std::thread::spawn(move || serve_one(s, act, &r));
            }
        });
        Fake { port, requests }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

const THREE_QUERIES: &str = "\
llm.*.min_query_count = 3
llm.*.max_query_count = 3
*.*.min_duration = 0
";

fn run_against(url: &str, dir: &Path, extra: &[&str]) -> Output {
    let cfg = dir.join("user.conf");
    std::fs::write(&cfg, THREE_QUERIES).unwrap();
    let out = dir.join("out");
    let mut args = vec![
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--threads",
        "1",
        "--warmup",
        "0",
        "--sut",
        url,
        "--http-stall-s",
        "1",
    ];
    // Offline, one connection, unless `extra` says otherwise.
    for (flag, default) in [("--scenario", "offline"), ("--http-concurrency", "1")] {
        if !extra.contains(&flag) {
            args.extend([flag, default]);
        }
    }
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(&args)
        .output()
        .expect("pocketperf runs")
}

fn result(dir: &Path) -> ResultFile {
    load_result(dir.join("out")).unwrap()
}

fn record(r: &ResultFile) -> &Value {
    &r.meta.settings["sut"]["record"]
}

fn text(o: &Output) -> String {
    pocketperf_testkit::output_text(o)
}

/// Runs against a fake acting as `act`; returns the result and the output.
fn faulty_run(act: fn(usize) -> Act) -> (ResultFile, Output, usize) {
    let fake = Fake::start(act);
    let dir = tempfile::tempdir().unwrap();
    let out = run_against(&fake.url(), dir.path(), &[]);
    let r = result(dir.path());
    (r, out, fake.requests.load(Ordering::SeqCst))
}

fn warnings(r: &ResultFile) -> String {
    r.warnings.join("\n")
}

#[test]
fn a_whole_stream_is_timed_and_counted_from_usage() {
    let (r, out, requests) = faulty_run(|_| Act::Whole);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(requests, 3);
    let p = r.performance.as_ref().unwrap();
    assert!(p.valid, "{:?}", p.invalid_reasons);
    let rec = record(&r);
    assert_eq!(rec["token_count_source"]["usage"], 3);
    assert_eq!(rec["server_timings"]["queries"], 3);
    assert_eq!(r.meta.settings["sut"]["model_id"], "fake-model");
    assert_eq!(r.meta.settings["sut"]["system"], "http fake fake-model");
    assert_eq!(r.meta.settings["cli"]["sut"], "http");
    // Every query's tokens were stamped on arrival: as many stamps as tokens.
    for q in &p.per_query {
        assert!(q.tokens > 0 && q.ttft_ms.is_some(), "{q:?}");
    }
}

#[test]
fn the_server_scenario_runs_through_the_pool() {
    let fake = Fake::start(|_| Act::Whole);
    let dir = tempfile::tempdir().unwrap();
    let out = run_against(
        &fake.url(),
        dir.path(),
        &[
            "--scenario",
            "server",
            "--server-qps",
            "20",
            "--http-concurrency",
            "4",
        ],
    );
    // Three queries may be too few for the Server scenario's early stopping; nothing else
    // may make the run INVALID.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", text(&out));
    let r = result(dir.path());
    assert_eq!(r.meta.settings["sut"]["concurrency"], 4);
    assert_eq!(record(&r)["failed_queries"], 0);
    let p = r.performance.as_ref().unwrap();
    assert_eq!(p.per_query.len(), 3);
    assert!(
        p.invalid_reasons
            .iter()
            .all(|c| c.contains("early stopping")),
        "{:?}",
        p.invalid_reasons
    );
}

#[test]
fn a_server_killed_mid_stream_fails_that_query_and_the_run_goes_on() {
    let (r, out, requests) = faulty_run(|n| {
        if n == 1 {
            Act::KillAfter(2)
        } else {
            Act::Whole
        }
    });
    assert_eq!(out.status.code(), Some(1), "INVALID: {}", text(&out));
    assert_eq!(requests, 3, "the run went on after the failure");
    let p = r.performance.as_ref().unwrap();
    assert!(!p.valid);
    assert_eq!(record(&r)["failed_queries"], 1);
    let w = warnings(&r);
    assert!(
        w.contains("stream ended after 2 tokens without [DONE]"),
        "{w}"
    );
}

#[test]
fn a_stalled_server_times_out_by_the_stall_limit() {
    let t0 = std::time::Instant::now();
    let (r, out, _) = faulty_run(|n| {
        if n == 0 {
            Act::StallAfter(1)
        } else {
            Act::Whole
        }
    });
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert_eq!(record(&r)["failed_queries"], 1);
    let w = warnings(&r);
    assert!(w.contains("timed out"), "{w}");
}

#[test]
fn malformed_sse_fails_the_query_with_the_reason() {
    let (r, out, _) = faulty_run(|n| if n == 2 { Act::Malformed } else { Act::Whole });
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(record(&r)["failed_queries"], 1);
    assert!(
        warnings(&r).contains("malformed event (not JSON"),
        "{}",
        warnings(&r)
    );
}

#[test]
fn http_500_and_503_are_retried_and_recorded() {
    let (r, out, requests) = faulty_run(|n| match n {
        0 => Act::Status(500),
        1 => Act::Status(503),
        _ => Act::Whole,
    });
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(requests, 5, "two refused, three served");
    let rec = record(&r);
    assert_eq!(
        (rec["retries"].as_u64(), rec["failed_queries"].as_u64()),
        (Some(2), Some(0))
    );
    let w = warnings(&r);
    assert!(
        w.contains("HTTP 500: fake 500") && w.contains("HTTP 503: fake 503"),
        "{w}"
    );
    let policy = r.meta.settings["sut"]["retry_policy"].as_str().unwrap();
    assert!(policy.contains("up to 2 retries"), "{policy}");
    // Past the retries, the query fails.
    let (r, out, _) = faulty_run(|n| if n < 3 { Act::Status(503) } else { Act::Whole });
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(record(&r)["failed_queries"], 1);
}

#[test]
fn fewer_tokens_than_asked_are_counted_and_recorded() {
    let (r, out, _) = faulty_run(|_| Act::Short(2));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let p = r.performance.as_ref().unwrap();
    assert!(
        p.per_query.iter().all(|q| q.tokens == 2),
        "{:?}",
        p.per_query
    );
    assert_eq!(record(&r)["short_responses"], 3);
    assert!(warnings(&r).contains("2 of"), "{}", warnings(&r));
}

#[test]
fn nothing_listening_is_a_clear_error_with_exit_2() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let out = run_against(&format!("http://127.0.0.1:{port}"), dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect") && err.contains(&port.to_string()),
        "{err}"
    );
    assert!(!dir.path().join("out/result.json").exists());
    // A URL that is no HTTP server address is refused by the flag parser.
    let out = run_against("https://127.0.0.1:1", dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("https is not supported"),
        "{}",
        text(&out)
    );
}
