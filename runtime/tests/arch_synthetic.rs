//! Architecture features on synthetic files, against expectations computed independently:
//! Llama 3.x RoPE frequency factors against the closed-form Llama 3 rule, refusal of the
//! metadata the runtime does not implement, and gemma3's sliding-window layers (a local
//! layer sees exactly its window, whatever the ring's history; prefill chunks that wrap the
//! window-sized ring equal token-by-token decoding).

mod common;
mod synth;

use pocketperf_runtime::Error;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::{GgufFile, Value};
use pocketperf_runtime::model::{Forward, Model, SessionOptions};
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant;
use pocketperf_testkit::{TinyLlama, tiny_llama};
use std::sync::Arc;
use synth::{TinyGemma, f32_tensor, rewrite, tiny_gemma3};

fn load(bytes: Vec<u8>) -> pocketperf_runtime::Result<Model> {
    Model::from_gguf(Arc::new(GgufFile::from_bytes("synthetic", bytes)?))
}

fn llama() -> Vec<u8> {
    tiny_llama(TinyLlama {
        n_layers: 1,
        matrix_type: GgmlType::F32,
        ..TinyLlama::default()
    })
}

/// Llama 3's frequency rule (Meta's reference): wavelengths shorter than
/// `ctx / high_freq_factor` keep their frequency, those longer than `ctx / low_freq_factor`
/// are divided by `factor`, and those between are interpolated smoothly. Returns the divisor
/// of each frequency, in f64.
fn llama3_divisors(freqs: &[f64], factor: f64, low: f64, high: f64, ctx: f64) -> Vec<f64> {
    freqs
        .iter()
        .map(|&f| {
            let wavelen = 2.0 * std::f64::consts::PI / f;
            if wavelen < ctx / high {
                1.0
            } else if wavelen > ctx / low {
                factor
            } else {
                let smooth = (ctx / wavelen - low) / (high - low);
                let scaled = (1.0 - smooth) * f / factor + smooth * f;
                f / scaled
            }
        })
        .collect()
}

#[test]
fn llama3_rope_freqs_give_the_closed_form_angles() {
    let base = llama();
    let cfg = Model::from_gguf(Arc::new(GgufFile::from_bytes("b", base.clone()).unwrap()))
        .unwrap()
        .config()
        .clone();
    let d = cfg.rope_dims;
    let theta = 500_000.0f64;
    let freqs: Vec<f64> = (0..d / 2)
        .map(|i| theta.powf(-2.0 * i as f64 / d as f64))
        .collect();
    // A short original context so that the tiny head's frequencies fall in all three bands.
    let div = llama3_divisors(&freqs, 8.0, 1.0, 4.0, 64.0);
    assert!(div.contains(&1.0) && div.contains(&8.0));
    assert!(div.iter().any(|&x| x > 1.0 && x < 8.0), "{div:?}");
    let factors: Vec<f32> = div.iter().map(|&x| x as f32).collect();
    for ty in [None, Some("llama3")] {
        let mut set = vec![("llama.rope.freq_base", Value::F32(theta as f32))];
        if let Some(t) = ty {
            set.push(("llama.rope.scaling.type", Value::String(t.into())));
        }
        let bytes = rewrite(
            &base,
            &set,
            &[],
            vec![f32_tensor("rope_freqs.weight", &factors)],
        );
        let m = load(bytes).unwrap();
        let inv = m.rope_inv_freq();
        assert_eq!(inv.len(), d / 2);
        for (i, (&got, (&f, &dv))) in inv.iter().zip(freqs.iter().zip(&div)).enumerate() {
            let want = f / dv;
            // Angle at the largest position of a 128k context.
            let (a, b) = (got as f64 * 131_072.0, want * 131_072.0);
            assert!(
                ((got as f64) - want).abs() <= 1e-6 * want,
                "{ty:?}: frequency {i}: {got} vs closed form {want}"
            );
            assert!(
                (a - b).abs() <= 1e-6 * b.max(1.0),
                "{ty:?}: angle {i} at 131072: {a} vs {b}"
            );
        }
    }
    // llama3 named without the factors it needs is refused.
    let bytes = rewrite(
        &base,
        &[("llama.rope.scaling.type", Value::String("llama3".into()))],
        &[],
        vec![],
    );
    let err = load(bytes).err().expect("refused");
    assert!(err.to_string().contains("rope_freqs.weight"), "{err}");
}

#[test]
fn linear_rope_scaling_divides_every_frequency() {
    let base = llama();
    let plain = load(base.clone()).unwrap().rope_inv_freq().to_vec();
    let bytes = rewrite(
        &base,
        &[
            ("llama.rope.scaling.type", Value::String("linear".into())),
            ("llama.rope.scaling.factor", Value::F32(4.0)),
        ],
        &[],
        vec![],
    );
    let scaled = load(bytes).unwrap().rope_inv_freq().to_vec();
    for (a, b) in plain.iter().zip(&scaled) {
        assert!((a / 4.0 - b).abs() <= 1e-7 * a, "{a} / 4 vs {b}");
    }
}

fn refusal(set: &[(&str, Value)]) -> String {
    let err = load(rewrite(&llama(), set, &[], vec![]))
        .err()
        .expect("the file must be refused");
    err.to_string()
}

#[test]
fn unimplemented_metadata_is_refused_naming_key_and_value() {
    for (key, value, shown) in [
        (
            "llama.rope.scaling.type",
            Value::String("yarn".into()),
            "yarn",
        ),
        (
            "llama.rope.scaling.type",
            Value::String("longrope".into()),
            "longrope",
        ),
        ("llama.final_logit_softcapping", Value::F32(30.0), "30"),
        ("llama.attn_logit_softcapping", Value::F32(50.0), "50"),
        ("llama.attention.sliding_window", Value::U32(4096), "4096"),
        ("llama.expert_count", Value::U32(8), "8"),
        ("llama.rope.scaling.attn_factor", Value::F32(0.5), "0.5"),
    ] {
        let msg = refusal(&[(key, value)]);
        assert!(msg.contains(key) && msg.contains(shown), "{key}: {msg}");
    }
    // Neutral values change nothing and load.
    for (key, value) in [
        ("llama.final_logit_softcapping", Value::F32(0.0)),
        ("llama.rope.scaling.type", Value::String("none".into())),
        ("llama.expert_count", Value::U32(0)),
    ] {
        load(rewrite(&llama(), &[(key, value)], &[], vec![])).unwrap();
    }
    let msg = refusal(&[("general.architecture", Value::String("mamba".into()))]);
    assert!(msg.contains("mamba"), "{msg}");
    let err = load(rewrite(
        &llama(),
        &[("general.architecture", Value::String("mamba".into()))],
        &[],
        vec![],
    ))
    .err()
    .unwrap();
    assert!(matches!(err, Error::UnsupportedArch(ref a) if a == "mamba"));
}

fn gemma(window: usize, n_layers: usize) -> Model {
    load(tiny_gemma3(TinyGemma {
        window,
        n_layers,
        ..TinyGemma::default()
    }))
    .unwrap()
}

fn run(m: &Model, max_batch: usize, max_seq_len: usize, toks: &[u32]) -> Vec<f32> {
    let isa = quant::isa_from_env().unwrap();
    let mut f = Forward::new(
        m,
        SessionOptions {
            max_seq_len,
            max_batch,
            ..Default::default()
        },
        Arc::new(ThreadPool::new(2)),
        isa,
    )
    .unwrap();
    f.forward(m, toks).unwrap().to_vec()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn tokens(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 37 + 11) % 64).collect()
}

#[test]
fn gemma3_layer_pattern_and_config() {
    let m = gemma(4, 12);
    let c = m.config();
    let global: Vec<usize> = (0..12).filter(|&i| !c.is_swa(i)).collect();
    assert_eq!(global, vec![5, 11]);
    assert_eq!(c.head_dim, 32);
    assert_eq!(c.q_dim(), 64);
    assert!((c.attn_scale - 1.0 / 32f32.sqrt()).abs() < 1e-7);
    assert!((c.embd_scale.unwrap() - 32f32.sqrt()).abs() < 1e-6);
    // Local layers rotate with base 10,000, global ones with rope.freq_base.
    let d = c.rope_dims as f64;
    let (local, global) = (m.rope_inv_freq_for(0), m.rope_inv_freq_for(5));
    for i in 0..c.rope_dims / 2 {
        let e = -2.0 * i as f64 / d;
        assert!((local[i] as f64 - 10_000f64.powf(e)).abs() <= 1e-6 * 10_000f64.powf(e));
        assert!((global[i] as f64 - 1e6f64.powf(e)).abs() <= 1e-6 * 1e6f64.powf(e));
    }
}

/// One local layer: attention is invariant to a shift of every position (RoPE), so after
/// any history the last token's logits equal those of a fresh run over just its window.
#[test]
fn gemma3_local_layer_sees_exactly_its_window() {
    let w = 4;
    let m = gemma(w, 1);
    assert!(m.config().is_swa(0));
    let toks = tokens(23);
    let window_only = run(&m, 64, 64, &toks[toks.len() - w..]);
    for (mb, cap) in [(1, 64), (3, 64), (64, 64), (2, 32)] {
        let full = run(&m, mb, cap, &toks);
        let d = max_diff(&full, &window_only);
        assert!(
            d < 2e-3,
            "max_batch {mb}: differs from the window alone by {d}"
        );
    }
    // One position less changes the result: the window is not narrower (and the equality
    // above shows it is not wider, since earlier tokens differ).
    let narrower = run(&m, 64, 64, &toks[toks.len() - w + 1..]);
    assert!(max_diff(&narrower, &window_only) > 1e-2);
}

/// Six layers (five local, one global): chunked prefill that wraps the local ring equals
/// token-by-token decoding; and the global layer does see beyond the window.
#[test]
fn gemma3_prefill_chunks_equal_token_by_token_decode() {
    let m = gemma(4, 6);
    let toks = tokens(30);
    let one = run(&m, 1, 64, &toks);
    for mb in [3, 7, 64] {
        let d = max_diff(&run(&m, mb, 64, &toks), &one);
        assert!(d < 2e-3, "max_batch {mb}: {d}");
    }
    let isa = quant::isa_from_env().unwrap();
    let f = Forward::new(
        &m,
        SessionOptions {
            max_seq_len: 64,
            max_batch: 3,
            ..Default::default()
        },
        Arc::new(ThreadPool::new(1)),
        isa,
    )
    .unwrap();
    assert_eq!(f.kv().shape().n_layers, 1);
    let swa = f.kv_swa().expect("a window ring");
    assert_eq!((swa.shape().n_layers, swa.shape().capacity), (5, 4 + 3));
    let window_only = run(&m, 64, 64, &toks[toks.len() - 4..]);
    assert!(max_diff(&one, &window_only) > 1e-2);
}

/// The OpenCL backend loads gemma3 (its kernels compute Gemma's operations; see
/// `opencl_gemma_synth.rs`) and refuses at load what they do not compute (RoPE scaling),
/// before any device is touched.
#[test]
fn opencl_loads_gemma3_and_refuses_rope_scaling() {
    use pocketperf_runtime::backend::opencl::{ClEngine, ClOptions};
    let m = gemma(4, 6);
    ClEngine::new(&m, &ClOptions::default()).expect("gemma3 on OpenCL");
    let base = llama();
    let bytes = rewrite(
        &base,
        &[],
        &[],
        vec![f32_tensor(
            "rope_freqs.weight",
            &vec![1.0; load(base.clone()).unwrap().config().rope_dims / 2],
        )],
    );
    let err = ClEngine::new(&load(bytes).unwrap(), &ClOptions::default())
        .err()
        .expect("RoPE scaling refused");
    assert!(err.to_string().contains("RoPE"), "{err}");
}
