//! Synthetic model files for the architecture tests: a tiny `gemma3` with random F32
//! weights, and rewriting of any GGUF with changed metadata and extra tensors.
#![allow(dead_code)]

use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::{GgufFile, GgufWriter, Value};

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (x as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Shape of a tiny gemma3 file.
#[derive(Clone, Copy, Debug)]
pub struct TinyGemma {
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Head size, deliberately not `n_embd / n_heads`.
    pub head_dim: usize,
    pub n_ff: usize,
    pub vocab: usize,
    pub window: usize,
    pub seed: u64,
}

impl Default for TinyGemma {
    fn default() -> Self {
        TinyGemma {
            n_layers: 6,
            n_embd: 32,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 32,
            n_ff: 64,
            vocab: 64,
            window: 4,
            seed: 5,
        }
    }
}

/// A loadable `gemma3` GGUF (no tokenizer) with random F32 weights.
pub fn tiny_gemma3(c: TinyGemma) -> Vec<u8> {
    let (e, hd, ff) = (c.n_embd, c.head_dim, c.n_ff);
    let (q, kv) = (c.n_heads * hd, c.n_kv_heads * hd);
    let mut w = GgufWriter::new();
    let u = |v: usize| Value::U32(v as u32);
    w.add_metadata("general.architecture", Value::String("gemma3".into()))
        .add_metadata("gemma3.block_count", u(c.n_layers))
        .add_metadata("gemma3.context_length", u(1024))
        .add_metadata("gemma3.embedding_length", u(e))
        .add_metadata("gemma3.feed_forward_length", u(ff))
        .add_metadata("gemma3.attention.head_count", u(c.n_heads))
        .add_metadata("gemma3.attention.head_count_kv", u(c.n_kv_heads))
        .add_metadata("gemma3.attention.key_length", u(hd))
        .add_metadata("gemma3.attention.value_length", u(hd))
        .add_metadata("gemma3.attention.layer_norm_rms_epsilon", Value::F32(1e-6))
        .add_metadata("gemma3.rope.freq_base", Value::F32(1_000_000.0))
        .add_metadata("gemma3.attention.sliding_window", u(c.window));
    let mut rng = Rng::new(c.seed);
    let mut mat = |n: usize, scale: f32| -> Vec<u8> {
        f32_bytes(&(0..n).map(|_| rng.unit() * scale).collect::<Vec<_>>())
    };
    let norm = |n: usize, base: f32| -> Vec<u8> {
        f32_bytes(
            &(0..n)
                .map(|i| base + 0.05 * (i % 5) as f32)
                .collect::<Vec<_>>(),
        )
    };
    let add = |w: &mut GgufWriter, name: String, dims: &[usize], data: Vec<u8>| {
        let d: Vec<u64> = dims.iter().map(|&x| x as u64).collect();
        w.add_tensor(&name, &d, GgmlType::F32, data)
            .unwrap_or_else(|err| panic!("{name}: {err}"));
    };
    add(
        &mut w,
        "token_embd.weight".into(),
        &[e, c.vocab],
        mat(e * c.vocab, 0.1),
    );
    for l in 0..c.n_layers {
        let n = |s: &str| format!("blk.{l}.{s}");
        add(&mut w, n("attn_norm.weight"), &[e], norm(e, 1.0));
        add(&mut w, n("attn_q.weight"), &[e, q], mat(e * q, 0.3));
        add(&mut w, n("attn_k.weight"), &[e, kv], mat(e * kv, 0.3));
        add(&mut w, n("attn_v.weight"), &[e, kv], mat(e * kv, 0.3));
        add(&mut w, n("attn_q_norm.weight"), &[hd], norm(hd, 1.5));
        add(&mut w, n("attn_k_norm.weight"), &[hd], norm(hd, 1.5));
        add(&mut w, n("attn_output.weight"), &[q, e], mat(q * e, 0.3));
        add(&mut w, n("post_attention_norm.weight"), &[e], norm(e, 0.5));
        add(&mut w, n("ffn_norm.weight"), &[e], norm(e, 1.0));
        add(&mut w, n("ffn_gate.weight"), &[e, ff], mat(e * ff, 0.3));
        add(&mut w, n("ffn_up.weight"), &[e, ff], mat(e * ff, 0.3));
        add(&mut w, n("ffn_down.weight"), &[ff, e], mat(ff * e, 0.3));
        add(&mut w, n("post_ffw_norm.weight"), &[e], norm(e, 0.5));
    }
    add(&mut w, "output_norm.weight".into(), &[e], norm(e, 1.0));
    w.to_bytes()
}

/// An extra tensor for [`rewrite`]: name, dims, type, data.
pub type ExtraTensor = (String, Vec<u64>, GgmlType, Vec<u8>);

/// `src` with metadata `set` added or replaced, keys `drop` removed, and `tensors` appended.
pub fn rewrite(
    src: &[u8],
    set: &[(&str, Value)],
    drop: &[&str],
    tensors: Vec<ExtraTensor>,
) -> Vec<u8> {
    let g = GgufFile::from_bytes("src", src.to_vec()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        if !drop.contains(&k.as_str()) && k != "general.alignment" {
            w.add_metadata(k, v.clone());
        }
    }
    for (k, v) in set {
        w.add_metadata(k, v.clone());
    }
    for t in g.tensors() {
        w.add_tensor(&t.name, &t.dims, t.ty, g.tensor_data(t).to_vec())
            .unwrap();
    }
    for (name, dims, ty, data) in tensors {
        w.add_tensor(&name, &dims, ty, data).unwrap();
    }
    w.to_bytes()
}

pub fn f32_tensor(name: &str, v: &[f32]) -> ExtraTensor {
    (
        name.into(),
        vec![v.len() as u64],
        GgmlType::F32,
        f32_bytes(v),
    )
}
