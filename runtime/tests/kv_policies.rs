//! The ring KV cache's policies through the real forward pass, against expectations built
//! independently of the ring: a sliding-window run must equal a fresh prefill of exactly the
//! tokens it may still see (the sinks and the last window), a batch that wraps the ring must
//! equal token-by-token decoding, and a rewound cache must equal one that never saw the
//! discarded tokens.
//!
//! Models are tiny synthetic llama files (`pocketperf_testkit::tiny_llama`) with F32 weights,
//! so the only differences left between two equivalent runs are float summation order and
//! f16 rounding of keys rotated at different absolute positions.

mod common;

use std::sync::Arc;

use pocketperf_runtime::Error;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::GgufFile;
use pocketperf_runtime::kv::KvPolicy;
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::quant;
use pocketperf_runtime::session::{Engine, argmax};
use pocketperf_testkit::{Rng, TinyLlama, tiny_llama};

fn engine(c: TinyLlama) -> Engine {
    let g = GgufFile::from_bytes("tiny", tiny_llama(c)).unwrap();
    Engine::from_gguf(Arc::new(g), 1, quant::active_isa()).unwrap()
}

fn tiny(n_layers: usize, zero_queries: bool) -> Engine {
    engine(TinyLlama {
        n_layers,
        zero_queries,
        matrix_type: GgmlType::F32,
        seed: 11,
        ..TinyLlama::default()
    })
}

fn opts(cap: usize, policy: KvPolicy, max_batch: usize, logits_all: bool) -> SessionOptions {
    SessionOptions {
        max_seq_len: cap,
        kv_policy: policy,
        max_batch,
        logits_all,
        ..SessionOptions::default()
    }
}

fn tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.below(256) as u32).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Decodes `toks` one at a time; returns the logits after each.
fn decode_each(e: &Engine, o: SessionOptions, toks: &[u32]) -> Vec<Vec<f32>> {
    let mut s = e.session(o).unwrap();
    toks.iter()
        .map(|&t| s.decode(t).unwrap().to_vec())
        .collect()
}

fn prefill(e: &Engine, o: SessionOptions, toks: &[u32]) -> Vec<f32> {
    let mut s = e.session(o).unwrap();
    s.prefill(toks).unwrap().to_vec()
}

#[test]
fn sliding_window_sees_exactly_its_sinks_and_last_window() {
    // Zero query weights make attention a plain average over the visible slots, whatever their
    // positions; with one layer a token's K and V depend on that token alone. So the last
    // token's logits are a function of the *set* of tokens it sees.
    let e = tiny(1, true);
    let (cap, sinks, n) = (12, 2, 30);
    let toks = tokens(n, 3);
    let mut s = e
        .session(opts(cap, KvPolicy::Sliding { sinks }, 8, false))
        .unwrap();
    let mut last = Vec::new();
    for &t in &toks {
        last = s.decode(t).unwrap().to_vec();
    }
    let mut pos = s
        .forward_state()
        .expect("CPU backend")
        .kv()
        .positions()
        .to_vec();
    pos.sort_unstable();
    let want_pos: Vec<u32> = (0..sinks as u32)
        .chain((n - (cap - sinks)) as u32..n as u32)
        .collect();
    assert_eq!(pos, want_pos);
    assert_eq!(s.n_past(), n);

    let mut seen: Vec<u32> = toks[..sinks].to_vec();
    seen.extend(&toks[n - (cap - sinks)..]);
    let fresh = prefill(&e, opts(cap, KvPolicy::Error, 16, false), &seen);
    let d = max_diff(&last, &fresh);
    assert!(
        d < 1e-4,
        "sliding run vs fresh prefill of sinks + window: {d}"
    );
    // The window really dropped tokens: with all 30 visible the logits are different.
    let full = prefill(&e, opts(64, KvPolicy::Error, 32, false), &toks);
    assert!(max_diff(&last, &full) > 1e-2);
}

#[test]
fn sliding_window_without_sinks_equals_a_fresh_prefill_of_the_window() {
    // Real queries: scores depend on relative positions only (RoPE), so the last window at
    // positions n-w..n-1 behaves as the same tokens at 0..w-1.
    let e = tiny(1, false);
    let (cap, n) = (10, 25);
    let toks = tokens(n, 5);
    let steps = decode_each(
        &e,
        opts(cap, KvPolicy::Sliding { sinks: 0 }, 4, false),
        &toks,
    );
    let last = steps.last().unwrap();
    let fresh = prefill(&e, opts(cap, KvPolicy::Error, 16, false), &toks[n - cap..]);
    let d = max_diff(last, &fresh);
    let full = prefill(&e, opts(64, KvPolicy::Error, 32, false), &toks);
    let control = max_diff(last, &full);
    // Keys are stored as f16 after rotation at different absolute angles: a few hundredths.
    assert!(
        d < 0.05 && d * 50.0 < control,
        "window {d}, full context {control}"
    );
    assert_eq!(argmax(last), argmax(&fresh));
}

#[test]
fn a_batch_that_wraps_the_ring_equals_token_by_token_decoding() {
    let e = tiny(2, false);
    let (cap, sinks, n) = (12, 3, 40);
    let toks = tokens(n, 7);
    let policy = KvPolicy::Sliding { sinks };
    let steps = decode_each(&e, opts(cap, policy, 1, false), &toks);
    // One prefill call for all 40 tokens, batches of up to 16, logits of every position.
    let mut s = e.session(opts(cap, policy, 16, true)).unwrap();
    let vocab = e.model.config().vocab_size;
    let mut done = 0;
    for chunk in toks.chunks(16) {
        s.prefill(chunk).unwrap();
        let all = s.all_logits();
        for (i, step) in steps[done..done + chunk.len()].iter().enumerate() {
            let row = &all[i * vocab..(i + 1) * vocab];
            let d = max_diff(row, step);
            assert!(d < 1e-3, "position {}: batched vs one by one {d}", done + i);
        }
        done += chunk.len();
    }
    // Without logits_all, the last logits of one long call match too.
    let last = prefill(&e, opts(cap, policy, 16, false), &toks);
    assert!(max_diff(&last, steps.last().unwrap()) < 1e-3);
}

#[test]
fn truncate_rewinds_to_a_shared_prefix() {
    let e = tiny(2, false);
    let a = tokens(9, 21);
    let b = tokens(6, 22);
    let c = tokens(5, 23);
    let o = || opts(32, KvPolicy::Error, 8, false);
    let mut s = e.session(o()).unwrap();
    s.prefill(&a).unwrap();
    s.prefill(&b).unwrap();
    s.truncate(a.len()).unwrap();
    assert_eq!(s.n_past(), a.len());
    let reused = s.prefill(&c).unwrap().to_vec();
    // The same calls on a session that never saw `b`: bit-identical.
    let mut fresh = e.session(o()).unwrap();
    fresh.prefill(&a).unwrap();
    assert_eq!(fresh.prefill(&c).unwrap(), &reused[..]);
    // And one call over a + c: equal up to summation order.
    let ac: Vec<u32> = a.iter().chain(&c).copied().collect();
    assert!(max_diff(&prefill(&e, o(), &ac), &reused) < 1e-3);
    // Rewinding past what the cache holds, or after it wrapped, is refused.
    assert!(matches!(s.truncate(100), Err(Error::Kv(_))));
    let mut w = e
        .session(opts(8, KvPolicy::Sliding { sinks: 1 }, 4, false))
        .unwrap();
    w.prefill(&tokens(10, 1)).unwrap();
    let err = w.truncate(2).unwrap_err().to_string();
    assert!(err.contains("wrapped"), "{err}");
}

#[test]
fn error_policy_fills_the_ring_then_refuses() {
    let e = tiny(1, false);
    let mut s = e.session(opts(6, KvPolicy::Error, 4, false)).unwrap();
    s.prefill(&tokens(6, 2)).unwrap();
    assert_eq!(s.forward_state().expect("CPU backend").kv().used(), 6);
    let err = s.decode(1).unwrap_err();
    assert!(
        matches!(err, Error::ContextOverflow { tokens: 7, ctx: 6 }),
        "{err}"
    );
    let mut s = e.session(opts(6, KvPolicy::Error, 4, false)).unwrap();
    assert!(matches!(
        s.prefill(&tokens(7, 2)),
        Err(Error::ContextOverflow { tokens: 7, ctx: 6 })
    ));
}

#[test]
fn shared_prefix_reuse_on_the_reference_model() {
    let e = Engine::load(&common::model_path(), 2, quant::active_isa()).unwrap();
    // "The capital of France is": llama.cpp's top-1 is " Paris" (7042).
    let ids = [504u32, 3575, 282, 4649, 314];
    let mut s = e.session(SessionOptions::default()).unwrap();
    s.prefill(&ids[..3]).unwrap();
    let first = s.prefill(&ids[3..]).unwrap().to_vec();
    assert_eq!(argmax(&first), 7042);
    s.decode(7042).unwrap();
    s.truncate(3).unwrap();
    assert_eq!(s.prefill(&ids[3..]).unwrap(), &first[..]);
}
