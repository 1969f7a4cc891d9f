//! `pocketperf serve` as a client sees it: the built binary on malformed input (every error
//! code, the server alive afterwards), on real requests (streamed tokens against an in-process
//! generation, scores against the runtime's own log-probabilities, prefix reuse, memory
//! statistics, shutdown), each injected fault's effect, and `ProcessSut` under the scenario
//! engine. Uses a tiny synthetic model, so every test takes well under a second of compute.

mod soak_util;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use pocketperf::serve::client::{ServeClient, ServeCommand, SutError};
use pocketperf::serve::protocol::{LoadRequest, Message, PromptSpec, QueryRequest, ScoreRequest};
use pocketperf::sut::process::{ProcessSut, ProcessSutConfig, SutPrompt};
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::quant;
use pocketperf_runtime::session::{Engine, GenerateOptions, SamplingParams, log_prob};
use pocketperf_scenarios::{
    InvalidCause, QslError, QuerySampleLibrary, RealClock, Scenario, TestMode, TestSettings,
    run_test,
};
use serde_json::Value;
use soak_util::{bin, tiny_model};

const T: Duration = Duration::from_secs(60);

fn load_req(model: &Path) -> LoadRequest {
    LoadRequest {
        model: model.display().to_string(),
        threads: 1,
        isa: None,
        ctx: 1024,
        max_batch: 64,
        mlock: false,
        prefault: false,
        copies: true,
        kv_policy: None,
    }
}

fn client(fault: Option<&str>) -> ServeClient {
    let mut cmd = ServeCommand::pocketperf(bin());
    cmd.env.push(("POCKETPERF_ISA".into(), String::new()));
    if let Some(f) = fault {
        cmd.env.push(("POCKETPERF_FAULT".into(), f.into()));
    }
    ServeClient::spawn(&cmd, T, None).expect("spawn serve")
}

fn loaded(dir: &Path, fault: Option<&str>) -> ServeClient {
    let mut c = client(fault);
    c.load(&load_req(&tiny_model(dir)), T).expect("load");
    c
}

fn greedy(prompt: &str, n: usize) -> QueryRequest {
    let mut q = QueryRequest::new(PromptSpec::text(prompt), n);
    q.stop_at_eog = false;
    q.cache = false;
    q
}

#[test]
fn malformed_requests_get_clear_errors_and_the_server_survives() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let mut child = Command::new(bin())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut next = || {
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        serde_json::from_str::<Value>(&l).unwrap_or_else(|e| panic!("{e}: {l:?}"))
    };
    assert_eq!(next()["event"], "hello");
    let mut send = |bytes: &[u8]| {
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let huge = vec![b'x'; (16 << 20) + 10];
    let load = format!(
        r#"{{"op":"load","id":"m","model":"{}","threads":1}}"#,
        model.display()
    );
    // (request, expected code or event, needle in the message)
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"{not json".to_vec(), "bad_json", "not JSON"),
        (b"[1,2]".to_vec(), "bad_json", "object"),
        (vec![b'{', 0xC3, 0x28, b'}'], "not_utf8", "UTF-8"),
        (huge, "line_too_long", "exceeds"),
        (br#"{"id":1}"#.to_vec(), "unknown_op", "missing `op`"),
        (br#"{"id":2,"op":"explode"}"#.to_vec(), "unknown_op", "explode"),
        (br#"{"id":3,"op":"stats","v":7}"#.to_vec(), "unsupported_version", "7"),
        (br#"{"id":4,"op":"query","prompt":"a"}"#.to_vec(), "bad_request", "max_new_tokens"),
        (br#"{"id":5,"op":"query","prompt":"a","max_new_tokens":1}"#.to_vec(), "not_loaded", "load"),
        (br#"{"id":6,"op":"load","model":"/no/such/model.gguf"}"#.to_vec(), "load_failed", "/no/such/model.gguf"),
        (br#"{"id":7,"op":"load","model":"x","isa":"mmx"}"#.to_vec(), "bad_request", "mmx"),
        (load.into_bytes(), "loaded", ""),
        (br#"{"id":8,"op":"query","prompt":"a","messages":[],"max_new_tokens":1}"#.to_vec(), "bad_request", "not both"),
        (br#"{"id":9,"op":"query","messages":[{"role":"robot","content":"hi"}],"max_new_tokens":1}"#.to_vec(), "bad_request", "robot"),
        (br#"{"id":10,"op":"query","prompt":"a","max_new_tokens":100000}"#.to_vec(), "too_long", "context"),
        (br#"{"id":11,"op":"query","prompt":"a","max_new_tokens":0}"#.to_vec(), "bad_request", "at least 1"),
        (br#"{"id":12,"op":"query","prompt":"a","max_new_tokens":1,"top_p":0}"#.to_vec(), "bad_request", "top_p"),
        (br#"{"id":13,"op":"query","prompt":"","max_new_tokens":1}"#.to_vec(), "bad_request", "no tokens"),
        (br#"{"id":14,"op":"score","prompt":"a","continuations":[]}"#.to_vec(), "bad_request", "continuations"),
        (br#"{"id":15,"op":"score","prompt":"a","continuations":[""]}"#.to_vec(), "bad_request", "no tokens"),
        (br#"{"id":16,"op":"stats","extra":1}"#.to_vec(), "bad_request", "extra"),
        (b"   ".to_vec(), "", ""),
        (br#"{"id":17,"op":"hello"}"#.to_vec(), "hello", ""),
    ];
    for (req, expect, needle) in cases {
        send(&req);
        if expect.is_empty() {
            continue; // blank lines are ignored
        }
        let ev = next();
        let shown = String::from_utf8_lossy(&req[..req.len().min(80)]).into_owned();
        if ev["event"] == "error" {
            assert_eq!(ev["code"], expect, "{shown}: {ev}");
            let msg = ev["message"].as_str().unwrap();
            assert!(
                msg.contains(needle),
                "{shown}: message {msg:?} lacks {needle:?}"
            );
        } else {
            assert_eq!(ev["event"], expect, "{shown}: {ev}");
        }
    }
    // Still serving: a real query works after all that.
    send(br#"{"id":"q","op":"query","prompt":"hello","max_new_tokens":2,"stream":false}"#);
    let done = next();
    assert_eq!(
        (done["event"].as_str(), done["generated"].as_u64()),
        (Some("done"), Some(2))
    );
    assert_eq!(done["id"], "q");
    drop(stdin); // end of input: a clean exit
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn streamed_tokens_match_an_in_process_generation() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let mut c = client(None);
    c.load(&load_req(&model), T).unwrap();
    let mut streamed = Vec::new();
    let out = c
        .query(&greedy("the cat sat on", 12), T, |t| {
            streamed.push(t.clone())
        })
        .unwrap();
    assert_eq!(out.generated, 12);
    assert_eq!(streamed.len(), 12);
    assert_eq!(
        streamed.iter().map(|t| t.token).collect::<Vec<_>>(),
        out.tokens
    );
    assert_eq!(
        streamed.iter().map(|t| t.index).collect::<Vec<_>>(),
        (0..12).collect::<Vec<_>>()
    );
    let text: String = streamed.iter().map(|t| t.text.as_str()).collect();
    assert!(out.text.starts_with(&text), "{text:?} vs {:?}", out.text);
    // Server clock: receipt ≤ first token ≤ … ≤ last token ≤ done.
    assert_eq!(out.t_first_ns, Some(streamed[0].t_ns));
    assert!(out.t_recv_ns <= streamed[0].t_ns);
    assert!(streamed.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    assert_eq!(out.t_end_ns, streamed[11].t_ns);
    assert!(out.t_end_ns <= out.t_done_ns);
    assert!(out.tpot_ns().unwrap() > 0.0);

    // The same greedy generation in this process.
    let engine = Engine::load(&model, 1, quant::detect_best()).unwrap();
    let ids = engine.tokenizer.encode("the cat sat on", true).unwrap();
    assert!(!engine.tokenizer.add_bos());
    assert_eq!(out.prompt_tokens, ids.len());
    let mut s = engine.session(SessionOptions::default()).unwrap();
    let mut expect = Vec::new();
    s.generate(
        &ids,
        &GenerateOptions {
            max_new_tokens: 12,
            stop_at_eog: false,
            sampling: SamplingParams::default(),
        },
        |_, t| expect.push(t),
    )
    .unwrap();
    assert_eq!(out.tokens, expect);
}

#[test]
fn scores_are_the_runtime_log_probabilities() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let mut c = client(None);
    c.load(&load_req(&model), T).unwrap();
    let conts = [" A", " B", "the end"];
    let s = c
        .score(
            &ScoreRequest::new(
                PromptSpec::text("Answer:"),
                conts.iter().map(|x| x.to_string()).collect(),
            ),
            T,
        )
        .unwrap();
    let engine = Engine::load(&model, 1, quant::detect_best()).unwrap();
    let prompt = engine.tokenizer.encode("Answer:", true).unwrap();
    assert_eq!(s.prompt_tokens, prompt.len());
    for (got, text) in s.continuations.iter().zip(conts) {
        let cont = engine.tokenizer.encode(text, false).unwrap();
        assert_eq!(got.tokens, cont);
        // Expected by definition: for each continuation token, a fresh prefill of the prompt
        // and the continuation before it, and the log-softmax at its last position.
        let mut expect = 0.0;
        for j in 0..cont.len() {
            let mut seq = prompt.clone();
            seq.extend_from_slice(&cont[..j]);
            let mut sess = engine
                .session(SessionOptions {
                    max_seq_len: 256,
                    ..Default::default()
                })
                .unwrap();
            expect += log_prob(sess.prefill(&seq).unwrap(), cont[j]);
        }
        assert_eq!(got.logprob_bits, format!("{:016x}", got.logprob.to_bits()));
        if cont.len() == 1 {
            // The same computation: bit for bit.
            assert_eq!(got.logprob.to_bits(), expect.to_bits(), "{text}");
        } else {
            // Incremental decode vs. a batched prefill: the same math in another order.
            assert!(
                (got.logprob - expect).abs() < 1e-4,
                "{text}: {} vs {expect}",
                got.logprob
            );
        }
    }
}

#[test]
fn conversations_reuse_the_kv_of_their_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = loaded(dir.path(), None);
    let turn1 = vec![Message {
        role: "user".into(),
        content: "Plan a short walk.".into(),
    }];
    let mut q1 = QueryRequest::new(PromptSpec::messages(turn1.clone()), 6);
    q1.stop_at_eog = false;
    let a1 = c.query(&q1, T, |_| {}).unwrap();
    assert_eq!(a1.reused_tokens, 0);
    let mut turn2 = turn1;
    turn2.push(Message {
        role: "assistant".into(),
        content: a1.text.clone(),
    });
    turn2.push(Message {
        role: "user".into(),
        content: "And back?".into(),
    });
    let mut q2 = QueryRequest::new(PromptSpec::messages(turn2), 4);
    q2.stop_at_eog = false;
    let a2 = c.query(&q2, T, |_| {}).unwrap();
    assert!(
        a2.reused_tokens > 0 && a2.reused_tokens < a2.prompt_tokens,
        "{a2:?}"
    );
    q2.cache = false;
    assert_eq!(c.query(&q2, T, |_| {}).unwrap().reused_tokens, 0);
    let st = c.stats(T).unwrap();
    assert_eq!((st.queries, st.tokens_generated, st.loaded), (3, 14, true));
    assert!(st.memory.rss_kib > 0 && st.memory.rss_file_kib > 0);
    assert_eq!(st.pid, c.pid());
    let exit = c.shutdown(T);
    assert_eq!(exit.code, Some(0), "{exit:?}");
}

#[test]
fn crash_fault_aborts_after_k_requests_with_a_stderr_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = loaded(dir.path(), Some("crash_after=2"));
    assert_eq!(c.hello().fault.as_deref(), Some("crash_after=2"));
    for _ in 0..2 {
        c.query(&greedy("hi", 3), T, |_| {}).unwrap();
    }
    let mut seen = 0;
    let e = c.query(&greedy("hi", 3), T, |_| seen += 1).unwrap_err();
    match e {
        SutError::Exited {
            exit, stderr_tail, ..
        } => {
            assert_eq!(exit.signal, Some(libc::SIGABRT), "{exit:?}");
            assert!(exit.description.contains("SIGABRT"));
            assert!(
                stderr_tail
                    .iter()
                    .any(|l| l.contains("fault injection: crashing on request 3")),
                "{stderr_tail:?}"
            );
        }
        other => panic!("{other}"),
    }
    assert_eq!(seen, 1, "the crash comes after the first streamed token");
}

#[test]
fn leak_fault_grows_rss_by_the_leaked_amount() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = loaded(dir.path(), Some("leak_kib=4096"));
    c.query(&greedy("hi", 2), T, |_| {}).unwrap();
    let before = c.stats(T).unwrap().memory.rss_anon_kib;
    for _ in 0..4 {
        c.query(&greedy("hi", 2), T, |_| {}).unwrap();
    }
    let after = c.stats(T).unwrap().memory.rss_anon_kib;
    let grown = after as i64 - before as i64;
    // 4 requests × 4096 KiB, give or take allocator noise.
    assert!(
        (15_000..=18_500).contains(&grown),
        "anonymous RSS grew by {grown} KiB"
    );
}

#[test]
fn flip_fault_changes_outputs_after_k_requests() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = loaded(dir.path(), Some("flip_after=2"));
    let q = greedy("once upon a time", 5);
    let s = ScoreRequest::new(PromptSpec::text("x"), vec![" A".into(), " B".into()]);
    let a = c.query(&q, T, |_| {}).unwrap();
    let sa = c.score(&s, T).unwrap();
    let b = c.query(&q, T, |_| {}).unwrap();
    let sb = c.score(&s, T).unwrap();
    let vocab = 263;
    assert_eq!(b.tokens[0], (a.tokens[0] + 1) % vocab);
    assert_eq!(
        b.tokens[1..],
        a.tokens[1..],
        "only the first token is flipped"
    );
    assert_eq!(
        sb.continuations[0].logprob.to_bits() ^ sa.continuations[0].logprob.to_bits(),
        1,
        "one unit in the last place"
    );
    assert_ne!(
        sb.continuations[0].logprob_bits,
        sa.continuations[0].logprob_bits
    );
    assert_eq!(sb.continuations[1], sa.continuations[1]);
}

#[test]
fn stall_fault_is_a_timeout_for_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = loaded(dir.path(), Some("stall_after=1,stall_ms=30000"));
    c.query(&greedy("hi", 2), T, |_| {}).unwrap();
    let t0 = std::time::Instant::now();
    let e = c
        .query(&greedy("hi", 2), Duration::from_millis(500), |_| {})
        .unwrap_err();
    assert!(matches!(e, SutError::Timeout { .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    let exit = c.kill();
    assert_eq!(exit.signal, Some(libc::SIGKILL));
}

#[test]
fn a_bad_fault_spec_stops_the_server_at_start() {
    let out = soak_util::run(&["serve"], &[("POCKETPERF_FAULT", "crash_after=soon")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("crash_after=soon") && err.contains("whole number"),
        "{err}"
    );
}

struct Library(u64);

impl QuerySampleLibrary for Library {
    fn name(&self) -> &str {
        "tiny prompts"
    }
    fn total_sample_count(&self) -> u64 {
        self.0
    }
    fn performance_sample_count(&self) -> u64 {
        self.0
    }
    fn load_samples(&mut self, _: &[u64]) -> Result<(), QslError> {
        Ok(())
    }
    fn unload_samples(&mut self, _: &[u64]) -> Result<(), QslError> {
        Ok(())
    }
}

#[test]
fn the_process_sut_runs_a_single_stream_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let prompts: Vec<SutPrompt> = ["alpha beta", "gamma", "delta epsilon zeta"]
        .iter()
        .map(|p| SutPrompt {
            text: p.to_string(),
            chat: true,
            max_new_tokens: 6,
        })
        .collect();
    let mut cfg = ProcessSutConfig::for_model(&model, 1).unwrap();
    cfg.command = ServeCommand::pocketperf(bin());
    let mut sut = ProcessSut::start(cfg, prompts).unwrap();
    let mut s = TestSettings::new(Scenario::SingleStream);
    s.mode = TestMode::PerformanceOnly;
    s.use_token_latencies = true;
    s.min_query_count = 12;
    s.min_duration_ms = 0;
    s.max_duration_ms = 60_000;
    s.query_timeout_ms = 30_000;
    let r = run_test(&mut sut, &mut Library(3), &s, &RealClock::new()).unwrap();
    assert!(sut.errors.is_empty(), "{:?}", sut.errors);
    assert_eq!(sut.starts, 1);
    let recs: Vec<_> = r.query_records().collect();
    assert!(recs.len() >= 12);
    for q in &recs {
        let done = q.complete_ns.expect("completed");
        let first = q.first_token_ns.expect("first token");
        assert!(q.issue_ns <= first && first <= done);
        assert_eq!(q.tokens, 6);
        assert_eq!(q.token_ns.len(), 6);
        assert!(q.token_ns.windows(2).all(|w| w[0] <= w[1]));
    }
    let p = r.performance.as_ref().unwrap();
    assert!(p.tokens_per_second > 0.0);
}

#[test]
fn the_process_sut_records_a_crash_and_restarts_for_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let mut cfg = ProcessSutConfig::for_model(&model, 1).unwrap();
    cfg.command = ServeCommand::pocketperf(bin());
    cfg.command
        .env
        .push(("POCKETPERF_FAULT".into(), "crash_after=3".into()));
    let prompts = vec![SutPrompt {
        text: "x".into(),
        chat: false,
        max_new_tokens: 3,
    }];
    let mut sut = ProcessSut::start(cfg, prompts).unwrap();
    let mut s = TestSettings::new(Scenario::SingleStream);
    s.mode = TestMode::PerformanceOnly;
    s.min_query_count = 8;
    s.min_duration_ms = 0;
    s.max_duration_ms = 60_000;
    s.query_timeout_ms = 1_000;
    let r = run_test(&mut sut, &mut Library(1), &s, &RealClock::new()).unwrap();
    // The 4th query hits the crash and is reported failed at once (no wait for the query
    // timeout); the next query starts a new server, whose own 4th request (query 7) crashes.
    let ids: Vec<u64> = sut.failures.iter().map(|f| f.query_id).collect();
    assert_eq!(ids, [3, 7]);
    for f in &sut.failures {
        assert_eq!(f.exit.as_ref().and_then(|e| e.signal), Some(libc::SIGABRT));
        assert!(
            f.stderr_tail.iter().any(|l| l.contains("fault injection")),
            "{f:?}"
        );
    }
    assert_eq!(r.query_records().count(), 8);
    assert_eq!(
        r.query_records()
            .filter(|q| q.complete_ns.is_some())
            .count(),
        6
    );
    assert!(!r.is_valid(), "a failed query makes the run INVALID");
    assert!(
        r.invalid_causes
            .iter()
            .any(|c| matches!(c, InvalidCause::SutFailed { count: 2, .. })),
        "{:?}",
        r.invalid_causes
    );
    // The next run gets a new server.
    s.min_query_count = 2;
    let r = run_test(&mut sut, &mut Library(1), &s, &RealClock::new()).unwrap();
    assert_eq!(sut.starts, 3);
    assert!(r.query_records().all(|q| q.complete_ns.is_some()));
}
