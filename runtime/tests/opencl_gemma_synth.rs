//! Gemma 3's operations on the OpenCL kernels, on a tiny random `gemma3` file whose sliding
//! window (4 positions) is far shorter than the sequence: five local layers (RoPE base
//! 10,000, window mask) and one global (the file's base), per-head Q/K norms, post-norms,
//! scaled embeddings, GeGLU, tied output. Prefill and decode logits against the CPU scalar
//! tier, under both attention kernels, with buffer canaries checked after every launch.

mod synth;
use synth::{TinyGemma, tiny_gemma3};

use pocketperf_runtime::backend::opencl::{ClAttention, ClEngine, ClOptions};
use pocketperf_runtime::gguf::GgufFile;
use pocketperf_runtime::model::{Forward, Model, SessionOptions};
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant::Isa;
use std::sync::Arc;

fn model(window: usize) -> Model {
    let bytes = tiny_gemma3(TinyGemma {
        window,
        ..TinyGemma::default()
    });
    Model::from_gguf(Arc::new(GgufFile::from_bytes("tiny-gemma3", bytes).unwrap())).unwrap()
}

fn opts() -> SessionOptions {
    SessionOptions {
        max_seq_len: 64,
        max_batch: 8,
        ..Default::default()
    }
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert!(a.iter().chain(b).all(|v| v.is_finite()), "non-finite logits");
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Logits of a 13-token prompt (two prefill chunks) and of 12 decoded tokens after it.
fn cpu_rows(m: &Model) -> Vec<Vec<f32>> {
    let mut f = Forward::new(m, opts(), Arc::new(ThreadPool::new(1)), Isa::Scalar).unwrap();
    let mut out = vec![f.forward(m, &prompt()).unwrap().to_vec()];
    for t in steps() {
        out.push(f.forward(m, &[t]).unwrap().to_vec());
    }
    out
}

fn cl_rows(m: &Model, attention: ClAttention) -> Vec<Vec<f32>> {
    let cl = ClEngine::new(
        m,
        &ClOptions {
            attention,
            canaries: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut s = cl.session(opts()).unwrap();
    let mut out = vec![s.forward(&prompt()).unwrap().to_vec()];
    for t in steps() {
        out.push(s.forward(&[t]).unwrap().to_vec());
    }
    let per = s.device_counters().decode.per_token().unwrap();
    assert_eq!(per.launches, (5 * m.config().n_layers + 2) as f64);
    out
}

fn prompt() -> Vec<u32> {
    (0..13).map(|i| (i * 7 + 3) % 64).collect()
}

fn steps() -> Vec<u32> {
    (0..12).map(|i| (i * 11 + 5) % 64).collect()
}

fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| max_rel(x, y))
        .fold(0f32, f32::max)
}

#[test]
fn tiny_gemma3_with_a_short_sliding_window_matches_the_cpu_scalar_tier() {
    let m = model(4);
    let c = m.config();
    assert!(c.n_swa_layers() == 5 && c.qk_norm && c.post_norms && c.embd_scale.is_some());
    let want = cpu_rows(&m);
    // the window matters here: without it the CPU's own logits move far more than the
    // OpenCL ones differ from them
    let unwindowed = worst(&cpu_rows(&model(64)), &want);
    for attention in [ClAttention::Exact, ClAttention::Split] {
        let got = cl_rows(&m, attention);
        let e = worst(&got, &want);
        eprintln!(
            "{}: max relative logit error {e:.2e} (a window of 64 instead of 4 moves the CPU's \
             by {unwindowed:.2e})",
            attention.name()
        );
        assert!(e <= 1e-3, "{}: {e}", attention.name());
        assert!(unwindowed > 100.0 * e.max(1e-5));
    }
}
