//! The AVX2 tier returns the scalar reference tier's bits on the real models: every quantized
//! kernel it uses (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants) adds each block's exact
//! integer sum with the scalar reference's f32 operations in its order, and the rest of the
//! forward pass shares the scalar code. So whatever is measured under one of the two tiers
//! (logits, greedy continuations, perplexity against llama.cpp) holds for the other, and the
//! slow scalar tier's perplexity need not be run separately.
//!
//! Compared: every logit at every position of a prompt made of the shared perplexity text
//! (BOS first, as perplexity chunks start), for each catalog model, from two engines in one
//! process (the tier is an argument of the engine, not only the process-wide default); the
//! first positions prefilled in one batch, the last decoded token by token.

mod common;

use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::perplexity::text_tokens;
use pocketperf_runtime::quant::{self, Isa};
use pocketperf_runtime::session::Engine;

/// Positions compared per model (all logits of each).
const POSITIONS: usize = 12;

/// Of those, the first ones prefilled in one batch; the rest are decoded one token at a time
/// (one activation row per product: the tier's decode kernels).
const PREFILLED: usize = 8;

/// Every logit of the first [`PREFILLED`] positions (one prefill) followed by those of each
/// later position (one decode step each).
fn all_logits(name: &str, isa: Isa, tokens: &[u32]) -> Vec<f32> {
    let engine = Engine::load(&common::model_path_for(name), 2, isa).expect("load model");
    let mut s = engine
        .session(SessionOptions {
            max_seq_len: tokens.len(),
            max_batch: tokens.len(),
            logits_all: true,
            ..Default::default()
        })
        .expect("session");
    let vocab = s.prefill(&tokens[..PREFILLED]).expect("prefill").len();
    // The buffer holds rows for the session's whole batch; the prefill filled the first.
    let mut all = s.all_logits()[..PREFILLED * vocab].to_vec();
    for &t in &tokens[PREFILLED..] {
        let logits = s.decode(t).expect("decode");
        assert_eq!(logits.len(), vocab, "{name}: logits per decode step");
        all.extend_from_slice(logits);
    }
    all
}

fn avx2_gives_scalar_bits(name: &str) {
    assert!(
        quant::supported(Isa::Avx2),
        "this test runs on x86_64 machines with AVX2 (every CI machine of the project)"
    );
    let text_path = common::reference_dir_for("smollm2-135m").join("ppl_text.txt");
    let text = std::fs::read_to_string(&text_path).expect("read the perplexity text");
    let engine = Engine::load(&common::model_path_for(name), 1, Isa::Scalar).expect("load");
    let tokens = text_tokens(&engine, &text).expect("tokenize");
    let tokens = &tokens[..POSITIONS];
    drop(engine);
    let scalar = all_logits(name, Isa::Scalar, tokens);
    let avx2 = all_logits(name, Isa::Avx2, tokens);
    assert_eq!(scalar.len(), avx2.len());
    let vocab = scalar.len() / POSITIONS;
    let differing: Vec<(usize, usize)> = scalar
        .iter()
        .zip(&avx2)
        .enumerate()
        .filter(|(_, (a, b))| a.to_bits() != b.to_bits())
        .map(|(i, _)| (i / vocab, i % vocab))
        .take(5)
        .collect();
    assert!(
        differing.is_empty(),
        "{name}: AVX2 logits differ from the scalar tier's at (position, token) {differing:?}"
    );
    // Real logits, not a degenerate output that would match trivially.
    let spread = scalar.iter().fold(0f32, |m, &v| m.max(v.abs()));
    assert!(
        spread > 1.0 && scalar.iter().all(|v| v.is_finite()),
        "{name}: logits"
    );
}

#[test]
fn smollm2_avx2_gives_the_scalar_tiers_bits() {
    avx2_gives_scalar_bits("smollm2-135m");
}

#[test]
fn gemma3_avx2_gives_the_scalar_tiers_bits() {
    avx2_gives_scalar_bits("gemma3-270m");
}

#[test]
fn qwen2_avx2_gives_the_scalar_tiers_bits() {
    avx2_gives_scalar_bits("qwen2.5-coder-0.5b");
}
