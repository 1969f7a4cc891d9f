//! The OpenCL kernels on small synthetic models (built with the GGUF writer) against the CPU
//! backend's scalar reference: every weight type (F32, F16, Q4_0, Q4_1, Q8_0, mixed within
//! one fused kernel), both architectures (llama: adjacent-pair RoPE, partial rotary dims;
//! qwen2: NeoX RoPE and Q/K/V biases), tied and separate outputs, both attention kernels, the
//! KV ring wrapping under the sliding policy, truncate, and buffer canaries (every kernel run
//! with guard regions checked after it, plus a kernel that writes out of bounds on purpose).

use half::f16;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::backend::opencl::canary::DevBuf;
use pocketperf_runtime::backend::opencl::{ClAttention, ClEngine, ClOptions};
use pocketperf_runtime::gguf::{GgufFile, GgufWriter, Value};
use pocketperf_runtime::kv::KvPolicy;
use pocketperf_runtime::model::{Forward, Model, SessionOptions};
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant::{self, BlockQ4_0, BlockQ4_1, BlockQ8_0, Isa, QK};
use std::sync::{Arc, Mutex};

const E: usize = 128;
const FF: usize = 192;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HD: usize = 32;
const VOCAB: usize = 200;
const LAYERS: usize = 2;

/// Weight types of one synthetic model.
#[derive(Clone, Copy)]
struct Types {
    embd: GgmlType,
    wq: GgmlType,
    wk: GgmlType,
    wv: GgmlType,
    wo: GgmlType,
    gate: GgmlType,
    up: GgmlType,
    down: GgmlType,
    /// `None` = tied to the embedding.
    output: Option<GgmlType>,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next()).collect()
    }
}

fn encode(x: &[f32], ty: GgmlType) -> Vec<u8> {
    match ty {
        GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => x
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes())
            .collect(),
        GgmlType::Q4_0 => {
            let mut b = vec![bytemuck::Zeroable::zeroed(); x.len() / QK];
            quant::quantize_row_q4_0(x, &mut b);
            quant::blocks::as_bytes::<BlockQ4_0>(&b).to_vec()
        }
        GgmlType::Q4_1 => {
            let mut b = vec![bytemuck::Zeroable::zeroed(); x.len() / QK];
            quant::quantize_row_q4_1(x, &mut b);
            quant::blocks::as_bytes::<BlockQ4_1>(&b).to_vec()
        }
        GgmlType::Q8_0 => {
            let mut b = vec![BlockQ8_0::default(); x.len() / QK];
            quant::quantize_row_q8_0_ref(x, &mut b);
            quant::blocks::as_bytes(&b).to_vec()
        }
        other => panic!("no encoder for {other:?}"),
    }
}

/// A two-layer model of the given architecture and types, with deterministic weights.
fn synthetic(arch: &str, t: Types, rope_dims: usize, seed: u64) -> Model {
    let mut rng = Rng(seed);
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("{arch}.{s}");
    w.add_metadata("general.architecture", Value::String(arch.into()))
        .add_metadata(&k("block_count"), Value::U32(LAYERS as u32))
        .add_metadata(&k("context_length"), Value::U32(64))
        .add_metadata(&k("embedding_length"), Value::U32(E as u32))
        .add_metadata(&k("feed_forward_length"), Value::U32(FF as u32))
        .add_metadata(&k("attention.head_count"), Value::U32(HEADS as u32))
        .add_metadata(&k("attention.head_count_kv"), Value::U32(KV_HEADS as u32))
        .add_metadata(&k("rope.dimension_count"), Value::U32(rope_dims as u32))
        .add_metadata(&k("rope.freq_base"), Value::F32(10000.0))
        .add_metadata(&k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5));
    let mut tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)> = Vec::new();
    let mut mat = |name: String, cols: usize, rows: usize, ty: GgmlType, rng: &mut Rng| {
        let x = rng.vec(cols * rows, 0.5 / (cols as f32).sqrt() * 1.7, 0.0);
        tensors.push((name, vec![cols as u64, rows as u64], ty, encode(&x, ty)));
    };
    mat("token_embd.weight".into(), E, VOCAB, t.embd, &mut rng);
    let mut vecs: Vec<(String, Vec<f32>)> = Vec::new();
    for l in 0..LAYERS {
        let n = |s: &str| format!("blk.{l}.{s}");
        vecs.push((n("attn_norm.weight"), rng.vec(E, 0.2, 1.0)));
        mat(n("attn_q.weight"), E, HEADS * HD, t.wq, &mut rng);
        mat(n("attn_k.weight"), E, KV_HEADS * HD, t.wk, &mut rng);
        mat(n("attn_v.weight"), E, KV_HEADS * HD, t.wv, &mut rng);
        if arch == "qwen2" {
            vecs.push((n("attn_q.bias"), rng.vec(HEADS * HD, 0.3, 0.0)));
            vecs.push((n("attn_k.bias"), rng.vec(KV_HEADS * HD, 0.3, 0.0)));
            vecs.push((n("attn_v.bias"), rng.vec(KV_HEADS * HD, 0.3, 0.0)));
        }
        mat(n("attn_output.weight"), HEADS * HD, E, t.wo, &mut rng);
        vecs.push((n("ffn_norm.weight"), rng.vec(E, 0.2, 1.0)));
        mat(n("ffn_gate.weight"), E, FF, t.gate, &mut rng);
        mat(n("ffn_up.weight"), E, FF, t.up, &mut rng);
        mat(n("ffn_down.weight"), FF, E, t.down, &mut rng);
    }
    vecs.push(("output_norm.weight".into(), rng.vec(E, 0.2, 1.0)));
    if let Some(ty) = t.output {
        mat("output.weight".into(), E, VOCAB, ty, &mut rng);
    }
    for (name, v) in vecs {
        let dims = vec![v.len() as u64];
        tensors.push((name, dims, GgmlType::F32, encode(&v, GgmlType::F32)));
    }
    for (name, dims, ty, data) in &tensors {
        w.add_tensor(name, dims, *ty, data.clone()).unwrap();
    }
    let g = GgufFile::from_bytes("synthetic", w.to_bytes()).unwrap();
    Model::from_gguf(Arc::new(g)).unwrap()
}

fn llama_q4_0() -> Model {
    use GgmlType::*;
    let t = Types {
        embd: Q4_0,
        wq: Q4_0,
        wk: Q4_0,
        wv: Q4_0,
        wo: Q4_0,
        gate: Q4_0,
        up: Q4_0,
        down: Q4_0,
        output: None,
    };
    // partial rotary embedding: 16 of the 32 dims of a head rotate
    synthetic("llama", t, 16, 7)
}

fn qwen2_mixed() -> Model {
    use GgmlType::*;
    let t = Types {
        embd: F16,
        wq: Q8_0,
        wk: F16,
        wv: F32,
        wo: Q4_1,
        gate: F16,
        up: F16,
        down: Q8_0,
        output: Some(Q4_1),
    };
    synthetic("qwen2", t, HD, 11)
}

fn llama_float() -> Model {
    use GgmlType::*;
    let t = Types {
        embd: Q8_0,
        wq: F32,
        wk: Q4_1,
        wv: Q4_0,
        wo: F32,
        gate: F32,
        up: F32,
        down: F16,
        output: Some(F16),
    };
    synthetic("llama", t, HD, 13)
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

fn engine(m: &Model, attention: ClAttention) -> ClEngine {
    engine_with(
        m,
        ClOptions {
            attention,
            ..Default::default()
        },
    )
}

fn engine_with(m: &Model, o: ClOptions) -> ClEngine {
    ClEngine::new(
        m,
        &ClOptions {
            canaries: true,
            ..o
        },
    )
    .unwrap()
}

fn cpu(m: &Model, opts: SessionOptions) -> Forward {
    Forward::new(m, opts, Arc::new(ThreadPool::new(1)), Isa::Scalar).unwrap()
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    assert!(
        a.iter().chain(b).all(|v| v.is_finite()),
        "non-finite logits"
    );
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Prefill (batched, one tile and a partial one), then decode steps; every logit row compared.
fn run_against_cpu(m: &Model, attention: ClAttention, opts: SessionOptions, tol: f32) -> f32 {
    run_on(&engine(m, attention), m, opts, tol)
}

fn run_on(cl: &ClEngine, m: &Model, opts: SessionOptions, tol: f32) -> f32 {
    assert!(cl.summary().canaries);
    let mut ours = cl.session(opts.clone()).unwrap();
    let mut want = cpu(m, opts);
    let prompt: Vec<u32> = (0..11).map(|i| (i * 37 + 5) % VOCAB as u32).collect();
    let a = ours.forward(&prompt).unwrap().to_vec();
    let b = want.forward(m, &prompt).unwrap().to_vec();
    let mut worst = max_rel(&a, &b);
    let mut tok = 17u32;
    for step in 0..40 {
        let a = ours.forward(&[tok]).unwrap().to_vec();
        let b = want.forward(m, &[tok]).unwrap().to_vec();
        let e = max_rel(&a, &b);
        assert!(e <= tol, "step {step}: max relative logit error {e}");
        worst = worst.max(e);
        tok = pocketperf_runtime::session::argmax(&b);
    }
    assert_eq!(ours.n_past(), want.n_past());
    worst
}

#[test]
fn quantized_llama_equals_the_cpu_scalar_reference_bit_for_bit() {
    let _g = lock();
    let m = llama_q4_0();
    // the integer block dots, f64 norms and the CPU-ordered attention leave nothing to round
    // differently (up to the device's exp)
    let opts = SessionOptions {
        max_seq_len: 64,
        max_batch: 16,
        ..Default::default()
    };
    let e = run_against_cpu(&m, ClAttention::Exact, opts.clone(), 1e-5);
    eprintln!("llama Q4_0, exact attention: max relative error {e:e}");
    // the RMSNorm of devices without fp64 (compensated f32) lands on the same scales
    let no_fp64 = engine_with(
        &m,
        ClOptions {
            no_fp64: true,
            ..Default::default()
        },
    );
    assert!(no_fp64.build_options().contains("-DNO_FP64"));
    let e = run_on(&no_fp64, &m, opts, 1e-5);
    eprintln!("llama Q4_0, compensated-f32 RMSNorm: max relative error {e:e}");
}

#[test]
fn qwen2_with_biases_neox_rope_and_mixed_types_matches_the_cpu() {
    let _g = lock();
    let m = qwen2_mixed();
    let opts = SessionOptions {
        max_seq_len: 64,
        max_batch: 16,
        ..Default::default()
    };
    // F16/F32 matrices accumulate in f32 here, in f64 in the CPU's scalar tier
    let e = run_against_cpu(&m, ClAttention::Exact, opts.clone(), 1e-3);
    eprintln!("qwen2 mixed, exact attention: max relative error {e:e}");
    let e = run_against_cpu(&m, ClAttention::Split, opts, 1e-3);
    eprintln!("qwen2 mixed, split attention: max relative error {e:e}");
}

#[test]
fn float_matrices_and_the_ring_wrapping_under_the_sliding_policy_match_the_cpu() {
    let _g = lock();
    let m = llama_float();
    // 24 slots with 4 sinks for 51 tokens: the ring wraps twice; the split attention runs with
    // several splits once the ring is long enough
    let opts = SessionOptions {
        max_seq_len: 24,
        max_batch: 8,
        kv_policy: KvPolicy::Sliding { sinks: 4 },
        ..Default::default()
    };
    let e = run_against_cpu(&m, ClAttention::Exact, opts.clone(), 1e-3);
    eprintln!("llama float, sliding ring, exact: max relative error {e:e}");
    let e = run_against_cpu(&m, ClAttention::Split, opts, 1e-3);
    eprintln!("llama float, sliding ring, split: max relative error {e:e}");
}

#[test]
fn truncate_rewinds_to_a_shared_prefix_and_logits_all_returns_every_row() {
    let _g = lock();
    let m = llama_q4_0();
    let cl = engine(&m, ClAttention::Exact);
    let opts = SessionOptions {
        max_seq_len: 32,
        max_batch: 32,
        logits_all: true,
        ..Default::default()
    };
    let prompt: Vec<u32> = (0..20).map(|i| (i * 11 + 3) % VOCAB as u32).collect();
    let mut s = cl.session(opts.clone()).unwrap();
    s.forward(&prompt).unwrap();
    let all = s.logits().to_vec();
    let mut f = cpu(&m, opts);
    f.forward(&m, &prompt).unwrap();
    assert!(max_rel(&all[..20 * VOCAB], &f.logits()[..20 * VOCAB]) <= 1e-5);
    // rewind to 12 tokens and feed the rest again: the same last rows
    s.truncate(12).unwrap();
    s.forward(&prompt[12..]).unwrap();
    assert_eq!(&s.logits()[..8 * VOCAB], &all[12 * VOCAB..20 * VOCAB]);
    // the error policy refuses what does not fit, like the CPU backend
    assert!(s.forward(&prompt).is_err());
}

#[test]
fn a_kernel_writing_out_of_bounds_trips_the_canary() {
    let _g = lock();
    let m = llama_q4_0();
    let cl = engine(&m, ClAttention::Exact);
    let src = "__kernel void oob(__global float *y, int n, int at) { \
               int i = get_global_id(0); if (i < n) y[i] = 1.0f; if (i == 0) y[at] = 2.0f; }";
    let prog =
        opencl3::program::Program::create_and_build_from_source(cl.context(), src, "").unwrap();
    let k = opencl3::kernel::Kernel::create(&prog, "oob").unwrap();
    for (at, ok) in [(15i32, true), (16, false), (-1, false), (300, false)] {
        let mut b = DevBuf::new(cl.context(), cl.queue(), "y", 16 * 4, cl.guard_size()).unwrap();
        assert!(b.guarded());
        // SAFETY (test): the kernel's arguments match its signature; out-of-bounds writes land
        // in the guard regions of the parent allocation (at most 300 floats from the start,
        // inside the 4096-byte guard).
        unsafe {
            opencl3::kernel::ExecuteKernel::new(&k)
                .set_arg(&opencl3::memory::ClMem::get(b.buffer()))
                .set_arg(&16i32)
                .set_arg(&at)
                .set_global_work_size(16)
                .enqueue_nd_range(cl.queue())
                .unwrap();
        }
        let r = b.check(cl.queue(), "oob");
        match (ok, r) {
            (true, Ok(())) => {}
            (false, Err(e)) => {
                let msg = e.to_string();
                eprintln!("write at {at}: {msg}");
                assert!(msg.contains("`oob`") && msg.contains("`y`"), "{msg}");
            }
            (ok, r) => panic!("write at {at}: expected ok={ok}, got {r:?}"),
        }
    }
}

/// The kernels' `pp_exp` (built from the kernels' own source with the engine's options)
/// returns the bits of the CPU's `attn::exp` — the softmax's and SwiGLU's exponential on the
/// scalar tier — on every 211th float of its whole finite range and at the ends, where the
/// device's `exp()` rounds differently on about one argument in ten.
#[test]
fn the_kernels_exponential_is_the_cpu_scalar_tiers_bit_for_bit() {
    let _g = lock();
    let m = llama_q4_0();
    let cl = engine(&m, ClAttention::Exact);
    let src = format!(
        "{}\n__kernel void pexp(__global float *y, int n) {{ int i = get_global_id(0); \
         if (i < n) y[i] = pp_exp(y[i]); }}",
        include_str!("../src/backend/opencl/kernels/common.cl")
    );
    let prog = opencl3::program::Program::create_and_build_from_source(
        cl.context(),
        &src,
        cl.build_options(),
    )
    .unwrap();
    let k = opencl3::kernel::Kernel::create(&prog, "pexp").unwrap();
    let mut xs: Vec<f32> = [(-0.0f32, -90.0f32), (0.0, 90.0)]
        .iter()
        .flat_map(|&(a, b)| (a.to_bits()..=b.to_bits()).step_by(211).map(f32::from_bits))
        .collect();
    xs.extend([f32::NEG_INFINITY, f32::INFINITY, -87.0, 88.8, 88.72, -86.99]);
    let n = xs.len();
    // SAFETY (test): a plain read-write buffer of n floats, written and read whole while the
    // kernel (guarded by `i < n`) is the only user.
    let mut buf = unsafe {
        opencl3::memory::Buffer::<f32>::create(
            cl.context(),
            opencl3::memory::CL_MEM_READ_WRITE,
            n,
            std::ptr::null_mut(),
        )
        .unwrap()
    };
    let mut ys = vec![0.0f32; n];
    unsafe {
        cl.queue()
            .enqueue_write_buffer(&mut buf, opencl3::types::CL_BLOCKING, 0, &xs, &[])
            .unwrap();
        opencl3::kernel::ExecuteKernel::new(&k)
            .set_arg(&buf)
            .set_arg(&(n as i32))
            .set_global_work_size(n)
            .enqueue_nd_range(cl.queue())
            .unwrap();
        cl.queue()
            .enqueue_read_buffer(&buf, opencl3::types::CL_BLOCKING, 0, &mut ys, &[])
            .unwrap();
    }
    let bad: Vec<_> = xs
        .iter()
        .zip(&ys)
        .filter(|(x, y)| quant::attn::exp(**x).to_bits() != y.to_bits())
        .take(5)
        .map(|(x, y)| format!("exp({x:e}): cpu {:e}, device {y:e}", quant::attn::exp(*x)))
        .collect();
    assert!(bad.is_empty(), "{} arguments checked: {bad:?}", n);
    assert!(n > 8_000_000, "{n}");
}
