//! `--kv-policy` where it is offered: `generate` and the serve protocol's `load` request (which
//! `soak` fills from its own flag). A sliding ring lets a generation outgrow its context, with
//! the same tokens as the runtime's own sliding session; the default `error` refuses it; a
//! malformed policy is refused naming the field. Tiny synthetic model (context 256).

mod soak_util;

use std::time::Duration;

use pocketperf::serve::client::{ServeClient, ServeCommand};
use pocketperf::serve::protocol::{LoadRequest, PromptSpec, QueryRequest};
use pocketperf_runtime::kv::KvPolicy;
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::quant;
use pocketperf_runtime::session::{Engine, GenerateOptions, SamplingParams};
use soak_util::{bin, run, tiny_model};

const T: Duration = Duration::from_secs(60);
const CTX: usize = 24;
const NEW: usize = 60;

fn load_req(model: &std::path::Path, kv_policy: Option<&str>) -> LoadRequest {
    LoadRequest {
        model: model.display().to_string(),
        threads: 1,
        isa: None,
        ctx: CTX,
        max_batch: 8,
        mlock: false,
        prefault: false,
        copies: true,
        kv_policy: kv_policy.map(str::to_string),
    }
}

fn client() -> ServeClient {
    let mut cmd = ServeCommand::pocketperf(bin());
    cmd.env.push(("POCKETPERF_ISA".into(), String::new()));
    ServeClient::spawn(&cmd, T, None).expect("spawn serve")
}

fn greedy() -> QueryRequest {
    let mut q = QueryRequest::new(PromptSpec::text("the cat sat on"), NEW);
    q.stop_at_eog = false;
    q.cache = false;
    q
}

#[test]
fn a_sliding_ring_in_the_serve_protocol_outgrows_its_context_like_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let mut c = client();
    c.load(&load_req(&model, Some("sliding:2")), T).unwrap();
    let out = c.query(&greedy(), T, |_| {}).unwrap();
    assert_eq!(out.generated, NEW);
    assert!(
        out.prompt_tokens + NEW > CTX,
        "the query must outgrow the ring"
    );

    // The runtime's own sliding session, in this process.
    let engine = Engine::load(&model, 1, quant::detect_best()).unwrap();
    let ids = engine.tokenizer.encode("the cat sat on", true).unwrap();
    let mut s = engine
        .session(SessionOptions {
            max_seq_len: CTX,
            max_batch: 8,
            kv_policy: KvPolicy::Sliding { sinks: 2 },
            ..Default::default()
        })
        .unwrap();
    let mut expect = Vec::new();
    s.generate(
        &ids,
        &GenerateOptions {
            max_new_tokens: NEW,
            stop_at_eog: false,
            sampling: SamplingParams::default(),
        },
        |_, t| expect.push(t),
    )
    .unwrap();
    assert_eq!(out.tokens, expect);

    // A second query on the slid session starts afresh and gives the same tokens.
    let again = c.query(&greedy(), T, |_| {}).unwrap();
    assert_eq!(again.tokens, expect);
    assert_eq!(again.reused_tokens, 0);
}

#[test]
fn without_a_policy_the_serve_protocol_refuses_a_query_beyond_its_context() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let mut c = client();
    c.load(&load_req(&model, None), T).unwrap();
    let e = c.query(&greedy(), T, |_| {}).unwrap_err().to_string();
    assert!(
        e.contains("too_long") || e.contains("exceeds the context"),
        "{e}"
    );
    let mut c = client();
    c.load(&load_req(&model, Some("error")), T).unwrap();
    assert!(c.query(&greedy(), T, |_| {}).is_err());
}

#[test]
fn a_malformed_policy_in_a_load_request_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    for bad in ["sliding:x", "window", "sliding:24"] {
        let mut c = client();
        let e = c
            .load(&load_req(&model, Some(bad)), T)
            .unwrap_err()
            .to_string();
        assert!(e.contains("kv_policy") || e.contains("sink"), "{bad}: {e}");
    }
}

#[test]
fn generate_goes_past_its_context_only_with_a_sliding_policy() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.display().to_string();
    let base = [
        "generate",
        "--model",
        m.as_str(),
        "--prompt",
        "the cat sat on",
        "--ctx",
        "16",
        "--max-tokens",
        "40",
    ];
    let o = run(&base, &[]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--max-tokens 40") && err.contains("--kv-policy sliding"),
        "{err}"
    );

    let mut sliding = base.to_vec();
    sliding.extend(["--kv-policy", "sliding:2"]);
    let o = run(&sliding, &[]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("prompt ") && err.contains("generated "),
        "{err}"
    );

    for (bad, needle) in [
        ("sliding:x", "kv-policy"),
        ("window", "kv-policy"),
        ("sliding:16", "sinks"),
    ] {
        let mut a = base.to_vec();
        a.extend(["--kv-policy", bad]);
        let o = run(&a, &[]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{bad}: {err}");
    }
}
