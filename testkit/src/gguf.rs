//! Synthetic GGUF files built in memory: [`synthetic_all_types`] (one metadata entry of every
//! value type, one tensor of each executable type) and [`tiny_llama`] (a llama-architecture
//! model of any small shape with a byte-level BPE vocabulary), with the deterministic [`Rng`]
//! their weights come from.
//!
//! This file is also compiled into the fuzz target (`fuzz/src/lib.rs` includes it), so it
//! depends on nothing but the runtime and `half`.

use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::{Array, GgufWriter, Value};
use pocketperf_runtime::quant::{self, BlockQ4_0, BlockQ4_1, BlockQ8_0};

/// A small deterministic generator (xorshift64*) for weights and mutations.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `[-1, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// A file with one metadata entry of every value type (arrays of every element type, nested
/// arrays, empty ones) and one tensor of each executable type, at the default alignment.
pub fn synthetic_all_types() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("synthetic".into()))
        .add_metadata("t.u8", Value::U8(200))
        .add_metadata("t.i8", Value::I8(-100))
        .add_metadata("t.u16", Value::U16(60_000))
        .add_metadata("t.i16", Value::I16(-30_000))
        .add_metadata("t.u32", Value::U32(4_000_000_000))
        .add_metadata("t.i32", Value::I32(-2_000_000_000))
        .add_metadata("t.f32", Value::F32(0.5))
        .add_metadata("t.bool", Value::Bool(true))
        .add_metadata("t.string", Value::String("héllo".into()))
        .add_metadata("t.u64", Value::U64(u64::MAX))
        .add_metadata("t.i64", Value::I64(i64::MIN))
        .add_metadata("t.f64", Value::F64(-2.25))
        .add_metadata("t.arr_u8", Value::Array(Array::U8(vec![1, 2, 3])))
        .add_metadata("t.arr_i16", Value::Array(Array::I16(vec![-1, 7])))
        .add_metadata("t.arr_f32", Value::Array(Array::F32(vec![1.5, -0.25])))
        .add_metadata("t.arr_bool", Value::Array(Array::Bool(vec![true, false])))
        .add_metadata(
            "t.arr_str",
            Value::Array(Array::String(["a", "", "ccc"].into_iter().collect())),
        )
        .add_metadata("t.arr_u64", Value::Array(Array::U64(vec![9, 10])))
        .add_metadata("t.arr_empty", Value::Array(Array::I32(vec![])))
        .add_metadata(
            "t.arr_nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::String(["x"].into_iter().collect()),
            ])),
        );
    let mut rng = Rng::new(7);
    let f32s: Vec<f32> = (0..64).map(|_| rng.unit()).collect();
    let f32_bytes: Vec<u8> = f32s.iter().flat_map(|x| x.to_le_bytes()).collect();
    let f16_bytes: Vec<u8> = (0..64u16)
        .flat_map(|i| (0x3c00u16 + i).to_le_bytes())
        .collect();
    let mut q8 = vec![BlockQ8_0::default(); 2];
    quant::quantize_row_q8_0_ref(&f32s, &mut q8);
    let mut q4 = vec![
        BlockQ4_0 {
            d: Default::default(),
            qs: [0; 16]
        };
        2
    ];
    quant::quantize_row_q4_0(&f32s, &mut q4);
    let mut q41 = vec![
        BlockQ4_1 {
            d: Default::default(),
            m: Default::default(),
            qs: [0; 16]
        };
        2
    ];
    quant::quantize_row_q4_1(&f32s, &mut q41);
    add(&mut w, "t0.f32", &[16, 4], GgmlType::F32, f32_bytes);
    add(&mut w, "t1.f16", &[64], GgmlType::F16, f16_bytes);
    add(
        &mut w,
        "t2.q8_0",
        &[32, 2],
        GgmlType::Q8_0,
        quant::blocks::as_bytes(&q8).to_vec(),
    );
    add(
        &mut w,
        "t3.q4_0",
        &[64],
        GgmlType::Q4_0,
        quant::blocks::as_bytes(&q4).to_vec(),
    );
    add(
        &mut w,
        "t4.q4_1",
        &[32, 1, 2],
        GgmlType::Q4_1,
        quant::blocks::as_bytes(&q41).to_vec(),
    );
    w.to_bytes()
}

fn add(w: &mut GgufWriter<'_>, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) {
    w.add_tensor(name, dims, ty, data)
        .unwrap_or_else(|e| panic!("synthetic tensor {name}: {e}"));
}

/// Shape and options of a tiny llama-architecture model with a byte-level BPE vocabulary.
#[derive(Clone, Copy, Debug)]
pub struct TinyLlama {
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub n_ff: usize,
    /// Zero query weights: every attention score is 0, so attention is a plain average of the
    /// values it may see, independent of positions.
    pub zero_queries: bool,
    /// Weight type of the layer matrices (F32, F16, Q4_0, Q4_1 or Q8_0).
    pub matrix_type: GgmlType,
    pub seed: u64,
}

impl Default for TinyLlama {
    fn default() -> Self {
        TinyLlama {
            n_layers: 2,
            n_embd: 64,
            n_heads: 4,
            n_kv_heads: 2,
            n_ff: 128,
            zero_queries: false,
            matrix_type: GgmlType::Q8_0,
            seed: 1,
        }
    }
}

/// The GPT-2 byte-level vocabulary: one token per byte (in byte order), then `extra`.
fn byte_vocab() -> Vec<String> {
    let mut n = 0u32;
    (0u32..256)
        .map(|b| {
            let printable = matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
            let cp = if printable {
                b
            } else {
                n += 1;
                255 + n
            };
            char::from_u32(cp).map(String::from).unwrap_or_default()
        })
        .collect()
}

fn matrix_bytes(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let blocks = x.len() / 32;
    match ty {
        GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => x
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
            .collect(),
        GgmlType::Q8_0 => {
            let mut b = vec![BlockQ8_0::default(); blocks];
            quant::quantize_row_q8_0_ref(x, &mut b);
            quant::blocks::as_bytes(&b).to_vec()
        }
        GgmlType::Q4_0 => {
            let mut b = vec![
                BlockQ4_0 {
                    d: Default::default(),
                    qs: [0; 16]
                };
                blocks
            ];
            quant::quantize_row_q4_0(x, &mut b);
            quant::blocks::as_bytes(&b).to_vec()
        }
        GgmlType::Q4_1 => {
            let mut b = vec![
                BlockQ4_1 {
                    d: Default::default(),
                    m: Default::default(),
                    qs: [0; 16]
                };
                blocks
            ];
            quant::quantize_row_q4_1(x, &mut b);
            quant::blocks::as_bytes(&b).to_vec()
        }
        other => panic!("tiny llama: no encoder for {other}"),
    }
}

/// A complete, loadable llama-architecture GGUF: byte-level BPE tokenizer (256 byte tokens,
/// a few merges, `<|im_start|>`/`<|im_end|>` control tokens) and random weights.
pub fn tiny_llama(c: TinyLlama) -> Vec<u8> {
    let mut tokens = byte_vocab();
    let merges = ["Ġ t", "h e", "Ġt he", "l l", "o r"];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    let first_special = tokens.len();
    tokens.push("<|im_start|>".into());
    tokens.push("<|im_end|>".into());
    let vocab = tokens.len();
    let mut types = vec![1i32; vocab];
    types[first_special] = 3;
    types[first_special + 1] = 3;
    let head_dim = c.n_embd / c.n_heads;
    let (e, q, kv, ff) = (
        c.n_embd,
        c.n_heads * head_dim,
        c.n_kv_heads * head_dim,
        c.n_ff,
    );

    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()))
        .add_metadata("general.name", Value::String("tiny-llama".into()))
        .add_metadata("llama.block_count", Value::U32(c.n_layers as u32))
        .add_metadata("llama.context_length", Value::U32(256))
        .add_metadata("llama.embedding_length", Value::U32(e as u32))
        .add_metadata("llama.feed_forward_length", Value::U32(ff as u32))
        .add_metadata("llama.attention.head_count", Value::U32(c.n_heads as u32))
        .add_metadata(
            "llama.attention.head_count_kv",
            Value::U32(c.n_kv_heads as u32),
        )
        .add_metadata("llama.rope.freq_base", Value::F32(10_000.0))
        .add_metadata("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
        .add_metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .add_metadata("tokenizer.ggml.pre", Value::String("smollm".into()))
        .add_metadata(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(tokens.into())),
        )
        .add_metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
        .add_metadata(
            "tokenizer.ggml.merges",
            Value::Array(Array::String(
                merges.iter().map(|s| s.to_string()).collect(),
            )),
        )
        .add_metadata(
            "tokenizer.ggml.bos_token_id",
            Value::U32(first_special as u32),
        )
        .add_metadata(
            "tokenizer.ggml.eos_token_id",
            Value::U32(first_special as u32 + 1),
        )
        .add_metadata("tokenizer.ggml.add_bos_token", Value::Bool(false));
    let mut rng = Rng::new(c.seed);
    let mut mat = |rows: usize, cols: usize, scale: f32| -> Vec<f32> {
        (0..rows * cols).map(|_| rng.unit() * scale).collect()
    };
    let norm = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|i| (1.0f32 + 0.01 * (i % 7) as f32).to_le_bytes())
            .collect()
    };
    let embd = mat(vocab, e, 1.0);
    w.add_tensor(
        "token_embd.weight",
        &[e as u64, vocab as u64],
        GgmlType::Q8_0,
        matrix_bytes(GgmlType::Q8_0, &embd),
    )
    .unwrap_or_else(|err| panic!("token_embd: {err}"));
    let mt = c.matrix_type;
    for l in 0..c.n_layers {
        let n = |s: &str| format!("blk.{l}.{s}");
        let mut tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)> = Vec::new();
        tensors.push((
            n("attn_norm.weight"),
            vec![e as u64],
            GgmlType::F32,
            norm(e),
        ));
        let wq = if c.zero_queries {
            vec![0.0; q * e]
        } else {
            mat(q, e, 0.5)
        };
        tensors.push((
            n("attn_q.weight"),
            vec![e as u64, q as u64],
            mt,
            matrix_bytes(mt, &wq),
        ));
        for (name, rows, cols) in [
            ("attn_k.weight", kv, e),
            ("attn_v.weight", kv, e),
            ("attn_output.weight", e, q),
        ] {
            let x = mat(rows, cols, 0.3);
            tensors.push((
                n(name),
                vec![cols as u64, rows as u64],
                mt,
                matrix_bytes(mt, &x),
            ));
        }
        tensors.push((n("ffn_norm.weight"), vec![e as u64], GgmlType::F32, norm(e)));
        for (name, rows, cols) in [
            ("ffn_gate.weight", ff, e),
            ("ffn_up.weight", ff, e),
            ("ffn_down.weight", e, ff),
        ] {
            let x = mat(rows, cols, 0.3);
            tensors.push((
                n(name),
                vec![cols as u64, rows as u64],
                mt,
                matrix_bytes(mt, &x),
            ));
        }
        for (name, dims, ty, data) in tensors {
            w.add_tensor(&name, &dims, ty, data)
                .unwrap_or_else(|err| panic!("{name}: {err}"));
        }
    }
    w.add_tensor("output_norm.weight", &[e as u64], GgmlType::F32, norm(e))
        .unwrap_or_else(|err| panic!("output_norm: {err}"));
    w.to_bytes()
}
