//! A verdict needs evidence: `mmlu run` in which the system under test fails some questions
//! ends INVALID (exit 1), names the failures, and keeps what was measured — the answered
//! questions are scored and written. The SUT is a fake OpenAI-compatible server on loopback
//! that answers the first questions and then fails every request with HTTP 500 (the HTTP SUT
//! and the in-process SUT share the answering loop and the verdict, `mmlu::sut`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use pocketperf_testkit::{output_text, shared_dir};
use serde_json::{Value, json};

/// Requests answered before the server starts failing.
const ANSWERED: usize = 3;
const QUESTIONS: usize = 8;

fn respond(mut s: TcpStream, served: &AtomicUsize) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; len];
    let _ = r.read_exact(&mut body);
    let (status, b) = if path == "/v1/models" {
        (
            "200 OK",
            json!({"object": "list", "data": [{"id": "fake-model"}]}),
        )
    } else if served.fetch_add(1, Ordering::SeqCst) < ANSWERED {
        (
            "200 OK",
            json!({"choices": [{"index": 0, "text": " B", "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 5, "completion_tokens": 1}}),
        )
    } else {
        (
            "500 Internal Server Error",
            json!({"error": {"message": "fake failure", "type": "server_error"}}),
        )
    };
    let b = b.to_string();
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{b}",
        b.len()
    );
}

fn fake_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let served = served.clone();
            std::thread::spawn(move || respond(s, &served));
        }
    });
    format!("http://127.0.0.1:{port}")
}

fn read_json(p: &Path) -> Value {
    let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&t).unwrap()
}

#[test]
fn an_mmlu_run_whose_sut_fails_questions_is_invalid_and_keeps_the_answered_ones() {
    let url = fake_server();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mmlu = shared_dir().join("datasets/mmlu");
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(["mmlu", "run", "--mmlu-dir", mmlu.to_str().unwrap()])
        .args(["--mode", "generate", "--shots", "0", "--threads", "1"])
        .args([
            "--subjects",
            "miscellaneous",
            "--limit",
            &QUESTIONS.to_string(),
        ])
        .args(["--sut", &url, "--out", out.to_str().unwrap()])
        .env_remove("POCKETPERF_MMLU_DIR")
        .output()
        .unwrap();
    let t = output_text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("INVALID"), "{t}");
    assert!(
        t.contains(&format!("of {QUESTIONS} questions failed")),
        "{t}"
    );

    // What was measured is kept: the result and the per-question scores are written, with
    // every question listed, the failed ones unanswered and the SUT errors in the warnings.
    let r = read_json(&out.join("result.json"));
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains("500") || warnings.contains("fake failure"),
        "{warnings}"
    );
    let m = read_json(&out.join("mmlu.json"));
    assert_eq!(m["questions"].as_u64(), Some(QUESTIONS as u64), "{m}");
    assert_eq!(
        m["overall"]["total"].as_u64(),
        Some(QUESTIONS as u64),
        "{m}"
    );
    let per = m["per_question"].as_array().expect("per_question");
    assert_eq!(per.len(), QUESTIONS);
    // The fake answers " B" while it answers: those questions have a choice; the failed
    // ones have none.
    let chosen: Vec<&Value> = per.iter().filter(|q| !q["choice"].is_null()).collect();
    assert!(
        !chosen.is_empty() && chosen.len() <= ANSWERED,
        "{} answered of {QUESTIONS}: {m}",
        chosen.len()
    );
    assert!(chosen.iter().all(|q| q["choice"] == "B"), "{m}");
}
