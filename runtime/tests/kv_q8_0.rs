//! The Q8_0 KV cache (`--kv-type q8_0`) on the three catalog models: perplexity of the shared
//! text through the runtime's own route (`pocketperf_runtime::perplexity::perplexity_with`)
//! against llama.cpp's with its own Q8_0 cache (`-ctk q8_0 -ctv q8_0`, figures recorded from
//! the peer build in `tests/peer/kv_q8_0_perplexity.json`), at contexts of 128 and 512.
//!
//! Tolerance 1.5%: both runtimes round the query to Q8_0 before the scores against a Q8_0
//! cache (llama.cpp keeps the query's scale in f16, this runtime in f32) but accumulate in
//! different orders, and their f16 runs agree within about 1% (the real-models issue's
//! bound). The recorded f16 figures bound what the quantized cache may cost: no more than
//! it costs llama.cpp, plus 1.5 points (costing less is no defect: at context 512 Gemma 3's
//! Q8_0 run reads a little below its f16 run).

mod common;

use pocketperf_runtime::kv::KvType;
use pocketperf_runtime::perplexity::{perplexity_with, text_tokens};
use pocketperf_runtime::quant;
use pocketperf_runtime::session::Engine;
use serde_json::Value;

fn peer() -> Value {
    let p =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peer/kv_q8_0_perplexity.json");
    serde_json::from_str(&std::fs::read_to_string(&p).expect("read the peer figures"))
        .expect("JSON")
}

fn check(name: &str) {
    let isa = quant::isa_from_env().expect("POCKETPERF_ISA");
    let engine = Engine::load(&common::model_path_for(name), 2, isa).expect("load model");
    let text_path = common::reference_dir_for("smollm2-135m").join("ppl_text.txt");
    let mut text = std::fs::read_to_string(&text_path).expect("read the text");
    if text.ends_with('\n') {
        text.pop();
    }
    let tokens = text_tokens(&engine, &text).expect("tokenize");
    let v = peer();
    let runs: Vec<&Value> = v["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter(|r| r["model"] == name)
        .collect();
    assert_eq!(runs.len(), 2, "{name}: two recorded contexts");
    for r in runs {
        let ctx = r["ctx"].as_u64().expect("ctx") as usize;
        let (theirs, theirs_f16) = (r["q8_0"].as_f64().unwrap(), r["f16"].as_f64().unwrap());
        let ours = perplexity_with(&engine, &tokens, ctx, KvType::Q8_0)
            .expect("perplexity")
            .ppl;
        let ours_f16 = perplexity_with(&engine, &tokens, ctx, KvType::F16)
            .expect("perplexity")
            .ppl;
        eprintln!(
            "{name} ctx {ctx}: q8_0 {ours:.4} (llama.cpp {theirs:.4}, {:+.2}%), f16 {ours_f16:.4} (llama.cpp {theirs_f16:.4})",
            100.0 * (ours / theirs - 1.0)
        );
        assert!(
            (ours / theirs - 1.0).abs() < 0.015,
            "{name} ctx {ctx}: q8_0 perplexity {ours:.4} vs llama.cpp's q8_0 {theirs:.4}"
        );
        // The quantized cache costs no more than it costs llama.cpp: the rise from f16 is
        // at most 1.5 points above llama.cpp's own rise.
        let (mine, peer) = (ours / ours_f16 - 1.0, theirs / theirs_f16 - 1.0);
        assert!(
            mine - peer < 0.015,
            "{name} ctx {ctx}: q8_0 moves perplexity by {:+.2}%, llama.cpp's by {:+.2}%",
            100.0 * mine,
            100.0 * peer
        );
    }
}

#[test]
fn smollm2_q8_0_cache_perplexity_agrees_with_llama_cpp() {
    check("smollm2-135m");
}

#[test]
fn gemma3_q8_0_cache_perplexity_agrees_with_llama_cpp() {
    check("gemma3-270m");
}

#[test]
fn qwen2_q8_0_cache_perplexity_agrees_with_llama_cpp() {
    check("qwen2.5-coder-0.5b");
}
