//! Gemma 3's operations on the OpenCL kernels, on a tiny random `gemma3` file whose sliding
//! window (4 positions) is far shorter than the sequence: five local layers (RoPE base
//! 10,000, window mask) and one global (the file's base), per-head Q/K norms, post-norms,
//! scaled embeddings, GeGLU, tied output. Prefill and decode logits against the CPU scalar
//! tier, under both attention kernels (and the norms' f32 path of devices without fp64), with
//! buffer canaries checked after every launch. And
//! what the kernels do not implement is refused when the engine is created.

mod synth;
use synth::{TinyGemma, rewrite, tiny_gemma3};

use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::Value;

use pocketperf_runtime::backend::opencl::{ClAttention, ClEngine, ClOptions};
use pocketperf_runtime::gguf::GgufFile;
use pocketperf_runtime::model::{Forward, Model, SessionOptions};
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant::Isa;
use std::sync::{Arc, Mutex};

/// Serialises the tests' engines: PoCL builds and runs them one at a time here.
fn lock() -> std::sync::MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

fn model(window: usize) -> Model {
    let bytes = tiny_gemma3(TinyGemma {
        window,
        ..TinyGemma::default()
    });
    Model::from_gguf(Arc::new(
        GgufFile::from_bytes("tiny-gemma3", bytes).unwrap(),
    ))
    .unwrap()
}

fn opts() -> SessionOptions {
    SessionOptions {
        max_seq_len: 64,
        max_batch: 8,
        ..Default::default()
    }
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert!(
        a.iter().chain(b).all(|v| v.is_finite()),
        "non-finite logits"
    );
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

fn cl_rows(m: &Model, attention: ClAttention, no_fp64: bool) -> Vec<Vec<f32>> {
    let cl = ClEngine::new(
        m,
        &ClOptions {
            attention,
            canaries: true,
            no_fp64,
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
    let _g = lock();
    let m = model(4);
    let c = m.config();
    assert!(c.n_swa_layers() == 5 && c.qk_norm && c.post_norms && c.embd_scale.is_some());
    let want = cpu_rows(&m);
    // the window matters here: without it the CPU's own logits move far more than the
    // OpenCL ones differ from them
    let unwindowed = worst(&cpu_rows(&model(64)), &want);
    // (no_fp64: the norms' sums of squares in compensated f32, the path of devices without
    // fp64)
    for (attention, no_fp64) in [
        (ClAttention::Exact, false),
        (ClAttention::Split, false),
        (ClAttention::Exact, true),
    ] {
        let got = cl_rows(&m, attention, no_fp64);
        let e = worst(&got, &want);
        eprintln!(
            "{}{}: max relative logit error {e:.2e} (a window of 64 instead of 4 moves the \
             CPU's by {unwindowed:.2e})",
            attention.name(),
            if no_fp64 { ", no fp64" } else { "" }
        );
        assert!(e <= 1e-3, "{}: {e}", attention.name());
        assert!(unwindowed > 100.0 * e.max(1e-5));
    }
}

/// RoPE frequency scaling and a matrix type without a kernel are refused at load, with what is
/// missing in the message; the same file without them loads.
#[test]
fn what_the_kernels_do_not_implement_is_refused_at_load() {
    let _g = lock();
    let base = tiny_gemma3(TinyGemma::default());
    let load = |bytes: Vec<u8>| {
        let m = Model::from_gguf(Arc::new(GgufFile::from_bytes("t", bytes).unwrap())).unwrap();
        ClEngine::new(&m, &ClOptions::default()).map(|_| ())
    };
    load(base.clone()).unwrap();
    let scaled = rewrite(
        &base,
        &[
            ("gemma3.rope.scaling.type", Value::String("linear".into())),
            ("gemma3.rope.scaling.factor", Value::F32(2.0)),
        ],
        &[],
        vec![],
    );
    let e = load(scaled).unwrap_err().to_string();
    assert!(e.contains("RoPE frequency scaling"), "{e}");
    // a Q5_1 matrix (no OpenCL kernel): two rows of one 24-byte block
    let q5_1 = rewrite(
        &base,
        &[],
        &[],
        vec![(
            "extra.weight".into(),
            vec![32, 2],
            GgmlType::Q5_1,
            vec![0u8; 48],
        )],
    );
    let e = load(q5_1).unwrap_err().to_string();
    assert!(e.contains("extra.weight") && e.contains("Q5_1"), "{e}");
}
