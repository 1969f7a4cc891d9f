//! Llama-family model: configuration from GGUF metadata, weight views into the mapping, and
//! the forward pass (batched prefill and decode) over a ring KV cache.
//!
//! Supported: `llama` (RoPE in the normal, adjacent-pair layout) and `qwen2` (NeoX layout,
//! biases on Q, K and V). GQA, RMSNorm, SwiGLU, tied or separate output. The residual stream
//! stays in f32. Matrix products quantize their activation row once (Q8_0 or Q8_1, as the
//! weight type requires) and run the integer kernels of [`crate::quant`]: the same numerics as
//! llama.cpp's CPU backend, up to summation order. Attention reads f16 keys and values and
//! accumulates in f32.

use crate::GgmlType;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::kv::{KvCache, KvPolicy, KvShape};
use crate::pool::ThreadPool;
use crate::quant::{self, Isa, QuantizedActs, WeightMatrix};
use std::sync::Arc;

/// Rotary embedding layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum RopeLayout {
    /// Rotates adjacent pairs (x0, x1), (x2, x3)… (llama.cpp `LLAMA_ROPE_TYPE_NORM`).
    Normal,
    /// Rotates (x_i, x_{i+d/2}) (GPT-NeoX; qwen2).
    Neox,
}

/// Model hyper-parameters read from metadata.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModelConfig {
    pub arch: String,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rope_dims: usize,
    pub rope_base: f32,
    pub rope_layout: RopeLayout,
    pub rms_eps: f32,
    pub context_length: usize,
    pub vocab_size: usize,
    pub tied_output: bool,
    pub qkv_bias: bool,
}

impl ModelConfig {
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let arch = g.architecture()?.to_string();
        let rope_layout = match arch.as_str() {
            "llama" => RopeLayout::Normal,
            "qwen2" => RopeLayout::Neox,
            _ => return Err(Error::UnsupportedArch(arch)),
        };
        let prefix = arch.clone();
        let k = |s: &str| format!("{prefix}.{s}");
        let n_embd = g.get_u32(&k("embedding_length"))? as usize;
        let n_heads = g.get_u32(&k("attention.head_count"))? as usize;
        let n_kv_heads = match g.get(&k("attention.head_count_kv")) {
            Some(_) => g.get_u32(&k("attention.head_count_kv"))? as usize,
            None => n_heads,
        };
        if n_heads == 0
            || n_kv_heads == 0
            || !n_heads.is_multiple_of(n_kv_heads)
            || !n_embd.is_multiple_of(n_heads)
        {
            return Err(Error::Metadata {
                key: k("attention.head_count_kv"),
                reason: format!(
                    "{n_heads} query heads, {n_kv_heads} KV heads and width {n_embd} do not divide"
                ),
            });
        }
        let head_dim = match g.get(&k("attention.key_length")) {
            Some(_) => g.get_u32(&k("attention.key_length"))? as usize,
            None => n_embd / n_heads,
        };
        let rope_dims = match g.get(&k("rope.dimension_count")) {
            Some(_) => g.get_u32(&k("rope.dimension_count"))? as usize,
            None => head_dim,
        };
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(Error::Metadata {
                key: k("rope.dimension_count"),
                reason: format!("{rope_dims} rotary dims for head size {head_dim}"),
            });
        }
        let rope_base = match g.get(&k("rope.freq_base")) {
            Some(_) => g.get_f32(&k("rope.freq_base"))?,
            None => 10000.0,
        };
        let embd = g.tensor("token_embd.weight")?;
        let vocab_size = embd.dims.get(1).copied().unwrap_or(0) as usize;
        let tied_output = g.tensor("output.weight").is_err();
        let qkv_bias = g.tensor("blk.0.attn_q.bias").is_ok();
        let cfg = ModelConfig {
            n_layers: g.get_u32(&k("block_count"))? as usize,
            n_embd,
            n_ff: g.get_u32(&k("feed_forward_length"))? as usize,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dims,
            rope_base,
            rope_layout,
            rms_eps: g.get_f32(&k("attention.layer_norm_rms_epsilon"))?,
            context_length: g.get_u32(&k("context_length"))? as usize,
            vocab_size,
            tied_output,
            qkv_bias,
            arch,
        };
        if cfg.n_layers == 0 || cfg.n_ff == 0 || cfg.vocab_size == 0 {
            return Err(Error::Metadata {
                key: k("block_count"),
                reason: format!("degenerate model shape {cfg:?}"),
            });
        }
        Ok(cfg)
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// A weight tensor located in the mapping: type, shape and byte range.
#[derive(Clone, Copy, Debug)]
struct TensorRef {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    start: usize,
    len: usize,
}

struct Layer {
    attn_norm: TensorRef,
    wq: TensorRef,
    wk: TensorRef,
    wv: TensorRef,
    bq: Option<TensorRef>,
    bk: Option<TensorRef>,
    bv: Option<TensorRef>,
    wo: TensorRef,
    ffn_norm: TensorRef,
    w_gate: TensorRef,
    w_up: TensorRef,
    w_down: TensorRef,
}

/// A loaded model: the mapping plus validated views of every tensor the forward pass reads.
pub struct Model {
    gguf: Arc<GgufFile>,
    config: ModelConfig,
    embd: TensorRef,
    output_norm: TensorRef,
    output: TensorRef,
    layers: Vec<Layer>,
    inv_freq: Vec<f32>,
}

fn tensor_ref(g: &GgufFile, name: &str, expect: &[usize], matrix: bool) -> Result<TensorRef> {
    let t = g.tensor(name)?;
    let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let ok_shape = if expect.len() == 1 {
        dims.len() == 1 && dims[0] == expect[0]
    } else {
        dims.len() == 2 && dims[0] == expect[0] && dims[1] == expect[1]
    };
    if !ok_shape {
        return Err(Error::Tensor {
            name: name.into(),
            reason: format!("shape {dims:?}, expected {expect:?}"),
        });
    }
    let supported = if matrix {
        matches!(
            t.ty,
            GgmlType::F32 | GgmlType::F16 | GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0
        )
    } else {
        t.ty == GgmlType::F32
    };
    if !supported {
        return Err(Error::UnsupportedType {
            name: name.into(),
            ty: t.ty.name().into(),
        });
    }
    let start = g.tensor_file_offset(t) as usize;
    Ok(TensorRef {
        ty: t.ty,
        rows: if dims.len() == 2 { dims[1] } else { 1 },
        cols: dims[0],
        start,
        len: t.n_bytes as usize,
    })
}

impl Model {
    /// Opens and validates a model file.
    pub fn open(path: &std::path::Path) -> Result<Self> {
        Self::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    pub fn from_gguf(gguf: Arc<GgufFile>) -> Result<Self> {
        let c = ModelConfig::from_gguf(&gguf)?;
        let g = &*gguf;
        let (e, q, kv, ff) = (c.n_embd, c.q_dim(), c.kv_dim(), c.n_ff);
        let embd = tensor_ref(g, "token_embd.weight", &[e, c.vocab_size], true)?;
        let output = if c.tied_output {
            embd
        } else {
            tensor_ref(g, "output.weight", &[e, c.vocab_size], true)?
        };
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let bias = |s: &str, len: usize| -> Result<Option<TensorRef>> {
                if c.qkv_bias {
                    Ok(Some(tensor_ref(g, &n(s), &[len], false)?))
                } else {
                    Ok(None)
                }
            };
            layers.push(Layer {
                attn_norm: tensor_ref(g, &n("attn_norm.weight"), &[e], false)?,
                wq: tensor_ref(g, &n("attn_q.weight"), &[e, q], true)?,
                wk: tensor_ref(g, &n("attn_k.weight"), &[e, kv], true)?,
                wv: tensor_ref(g, &n("attn_v.weight"), &[e, kv], true)?,
                bq: bias("attn_q.bias", q)?,
                bk: bias("attn_k.bias", kv)?,
                bv: bias("attn_v.bias", kv)?,
                wo: tensor_ref(g, &n("attn_output.weight"), &[q, e], true)?,
                ffn_norm: tensor_ref(g, &n("ffn_norm.weight"), &[e], false)?,
                w_gate: tensor_ref(g, &n("ffn_gate.weight"), &[e, ff], true)?,
                w_up: tensor_ref(g, &n("ffn_up.weight"), &[e, ff], true)?,
                w_down: tensor_ref(g, &n("ffn_down.weight"), &[ff, e], true)?,
            });
        }
        let output_norm = tensor_ref(g, "output_norm.weight", &[e], false)?;
        let half = c.rope_dims / 2;
        let inv_freq = (0..half)
            .map(|i| (c.rope_base as f64).powf(-2.0 * i as f64 / c.rope_dims as f64) as f32)
            .collect();
        Ok(Model {
            gguf,
            config: c,
            embd,
            output_norm,
            output,
            layers,
            inv_freq,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn gguf(&self) -> &Arc<GgufFile> {
        &self.gguf
    }

    /// Bytes of weights read to decode one token (every matrix once, plus norms and the
    /// embedding row).
    pub fn bytes_per_token(&self) -> u64 {
        let mut b = self.output.len as u64 + self.output_norm.len as u64;
        b += (self.embd.len / self.embd.rows.max(1)) as u64;
        for l in &self.layers {
            for t in [
                &l.attn_norm,
                &l.wq,
                &l.wk,
                &l.wv,
                &l.wo,
                &l.ffn_norm,
                &l.w_gate,
                &l.w_up,
                &l.w_down,
            ] {
                b += t.len as u64;
            }
        }
        b
    }

    fn bytes(&self, t: &TensorRef) -> &[u8] {
        // Bounds were validated by the GGUF reader when the file was opened.
        &self.gguf.as_bytes()[t.start..t.start + t.len]
    }

    fn matrix(&self, t: &TensorRef) -> WeightMatrix<'_> {
        WeightMatrix {
            ty: t.ty,
            rows: t.rows,
            cols: t.cols,
            data: self.bytes(t),
        }
    }

    fn f32s(&self, t: &TensorRef) -> &[f32] {
        let b = self.bytes(t);
        // Norm and bias vectors are F32 (checked at load). The file maps at a page boundary
        // and GGUF aligns tensors to at least 8 bytes, so 4-byte alignment holds; a file that
        // violated it is caught by the alignment check in the GGUF reader.
        bytemuck::try_cast_slice(b).unwrap_or(&[])
    }
}

/// Settings of one inference session.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Token slots of the KV ring (`0` = the model's context length).
    pub max_seq_len: usize,
    pub kv_policy: KvPolicy,
    /// Largest number of tokens processed in one forward call (prefill chunk).
    pub max_batch: usize,
    /// Keep the logits of every position of a batch (perplexity), not only the last.
    pub logits_all: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            max_seq_len: 2048,
            kv_policy: KvPolicy::Error,
            max_batch: 64,
            logits_all: false,
        }
    }
}

/// Counters a harness records per run.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Counters {
    pub tokens_prefilled: u64,
    pub tokens_decoded: u64,
    pub forward_calls: u64,
    pub matmuls: u64,
    pub weight_bytes_read: u64,
}

/// Scratch buffers, allocated once per session.
struct Workspace {
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    logits: Vec<f32>,
    acts: QuantizedActs,
    scores: Vec<f32>,
    cos: Vec<f32>,
    sin: Vec<f32>,
    positions: Vec<u32>,
    slots: Vec<usize>,
}

/// Forward-pass state of one sequence: KV ring, scratch, thread pool.
pub struct Forward {
    kv: KvCache,
    ws: Workspace,
    pool: Arc<ThreadPool>,
    isa: Isa,
    opts: SessionOptions,
    n_past: u32,
    pub counters: Counters,
}

/// Raw pointer wrapper for disjoint parallel writes.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: only used to hand disjoint output ranges to pool workers, which finish before
// `ThreadPool::run` returns.
unsafe impl Send for SendPtr {}
// SAFETY: see above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// Method access makes closures capture the whole (Send + Sync) wrapper.
    fn get(self) -> *mut f32 {
        self.0
    }
}

impl Forward {
    pub fn new(
        model: &Model,
        opts: SessionOptions,
        pool: Arc<ThreadPool>,
        isa: Isa,
    ) -> Result<Self> {
        let c = &model.config;
        let mut opts = opts;
        if opts.max_seq_len == 0 {
            opts.max_seq_len = c.context_length;
        }
        if opts.max_batch == 0 {
            return Err(Error::InvalidArgument {
                what: "max_batch".into(),
                reason: "must be at least 1".into(),
            });
        }
        let b = opts.max_batch;
        let kv = KvCache::new(
            KvShape {
                n_layers: c.n_layers,
                n_kv_heads: c.n_kv_heads,
                head_dim: c.head_dim,
                capacity: opts.max_seq_len,
            },
            opts.kv_policy,
        )?;
        let nt = pool.n_threads();
        let widest = c.n_embd.max(c.n_ff).max(c.q_dim());
        let ws = Workspace {
            x: vec![0.0; b * c.n_embd],
            h: vec![0.0; b * c.n_embd],
            q: vec![0.0; b * c.q_dim()],
            k: vec![0.0; b * c.kv_dim()],
            v: vec![0.0; b * c.kv_dim()],
            attn: vec![0.0; b * c.q_dim()],
            gate: vec![0.0; b * c.n_ff],
            up: vec![0.0; b * c.n_ff],
            logits: vec![0.0; if opts.logits_all { b } else { 1 } * c.vocab_size],
            acts: QuantizedActs::new(b, widest),
            scores: vec![0.0; nt * opts.max_seq_len],
            cos: vec![0.0; b * c.rope_dims / 2],
            sin: vec![0.0; b * c.rope_dims / 2],
            positions: vec![0; b],
            slots: vec![0; b],
        };
        Ok(Forward {
            kv,
            ws,
            pool,
            isa,
            opts,
            n_past: 0,
            counters: Counters::default(),
        })
    }

    pub fn n_past(&self) -> usize {
        self.n_past as usize
    }

    pub fn kv(&self) -> &KvCache {
        &self.kv
    }

    pub fn options(&self) -> &SessionOptions {
        &self.opts
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn threads(&self) -> usize {
        self.pool.n_threads()
    }

    pub fn reset(&mut self) {
        self.kv.reset();
        self.n_past = 0;
    }

    /// Rewinds to the first `n` tokens (prefix reuse).
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        self.kv.truncate(n)?;
        self.n_past = n as u32;
        Ok(())
    }

    /// Logits of the last forward call: one row of `vocab` (or one per token with `logits_all`).
    pub fn logits(&self) -> &[f32] {
        &self.ws.logits
    }

    /// Runs `tokens` through the model in chunks of `max_batch`, appending them to the cache.
    /// Returns the logits of the last token (or, with `logits_all`, of the last chunk's
    /// tokens: see [`Forward::logits`]).
    pub fn forward(&mut self, model: &Model, tokens: &[u32]) -> Result<&[f32]> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument {
                what: "tokens".into(),
                reason: "empty input".into(),
            });
        }
        if !self.kv.can_take(tokens.len()) {
            return Err(Error::ContextOverflow {
                tokens: self.kv.used() + tokens.len(),
                ctx: self.kv.shape().capacity,
            });
        }
        let vocab = model.config.vocab_size as u32;
        if let Some(&bad) = tokens.iter().find(|&&t| t >= vocab) {
            return Err(Error::InvalidArgument {
                what: "token id".into(),
                reason: format!("{bad} is outside the vocabulary of {vocab}"),
            });
        }
        // Batches of up to `max_batch`; with `logits_all`, batch b's rows land at row 0 of
        // the logits buffer and later sub-batches of it after them.
        let (cap, mb) = (self.kv.shape().capacity, self.opts.max_batch);
        let mut row = 0;
        let mut rest = tokens;
        while !rest.is_empty() {
            if row == mb {
                row = 0;
            }
            // A sliding ring must not evict, inside one sub-batch, a slot that an earlier token
            // of that sub-batch still attends to: once it is full, one token at a time.
            let mut n = rest.len().min(mb - row);
            if matches!(self.kv.policy(), KvPolicy::Sliding { .. }) {
                n = n.min((cap - self.kv.used()).max(1));
            }
            let (chunk, tail) = rest.split_at(n);
            let out_row = if self.opts.logits_all { row } else { 0 };
            self.forward_chunk(model, chunk, out_row)?;
            row += n;
            rest = tail;
        }
        let v = model.config.vocab_size;
        Ok(if self.opts.logits_all {
            &self.ws.logits[(row - 1) * v..row * v]
        } else {
            &self.ws.logits[..v]
        })
    }

    fn matmul(&mut self, model: &Model, t: &TensorRef, n: usize, out: OutBuf) {
        let w = model.matrix(t);
        let y: &mut [f32] = match out {
            OutBuf::Q => &mut self.ws.q,
            OutBuf::K => &mut self.ws.k,
            OutBuf::V => &mut self.ws.v,
            OutBuf::H => &mut self.ws.h,
            OutBuf::Gate => &mut self.ws.gate,
            OutBuf::Up => &mut self.ws.up,
        };
        quant::matmul(
            &self.pool,
            self.isa,
            &w,
            &self.ws.acts,
            n,
            &mut y[..n * t.rows],
        );
        self.counters.matmuls += 1;
        self.counters.weight_bytes_read += t.len as u64;
    }

    /// Runs one sub-batch; with `logits_all` its logits go to rows `out_row..` of the buffer.
    fn forward_chunk(&mut self, model: &Model, tokens: &[u32], out_row: usize) -> Result<()> {
        let c = &model.config;
        let n = tokens.len();
        let (e, qd, kvd, ff) = (c.n_embd, c.q_dim(), c.kv_dim(), c.n_ff);

        // Embedding rows.
        let embd = model.matrix(&model.embd);
        for (i, &t) in tokens.iter().enumerate() {
            embd.row_dequant(t as usize, &mut self.ws.x[i * e..(i + 1) * e]);
        }
        // Slots and rotary tables for this chunk.
        let half = c.rope_dims / 2;
        for i in 0..n {
            let pos = self.n_past + i as u32;
            self.ws.positions[i] = pos;
            self.ws.slots[i] = self.kv.claim(pos)?;
            for (j, f) in model.inv_freq.iter().enumerate() {
                let theta = pos as f32 * f;
                self.ws.cos[i * half + j] = theta.cos();
                self.ws.sin[i * half + j] = theta.sin();
            }
        }

        for (li, layer) in model.layers.iter().enumerate() {
            // Attention block.
            rms_norm(
                &self.ws.x[..n * e],
                model.f32s(&layer.attn_norm),
                c.rms_eps,
                &mut self.ws.h[..n * e],
                e,
            );
            self.ws
                .acts
                .quantize_for(self.isa, layer.wq.ty, &self.ws.h[..n * e], n, e);
            self.matmul(model, &layer.wq, n, OutBuf::Q);
            if layer.wk.ty != layer.wq.ty {
                self.ws
                    .acts
                    .quantize_for(self.isa, layer.wk.ty, &self.ws.h[..n * e], n, e);
            }
            self.matmul(model, &layer.wk, n, OutBuf::K);
            if layer.wv.ty != layer.wk.ty {
                self.ws
                    .acts
                    .quantize_for(self.isa, layer.wv.ty, &self.ws.h[..n * e], n, e);
            }
            self.matmul(model, &layer.wv, n, OutBuf::V);
            if let (Some(bq), Some(bk), Some(bv)) = (&layer.bq, &layer.bk, &layer.bv) {
                add_bias(&mut self.ws.q[..n * qd], model.f32s(bq));
                add_bias(&mut self.ws.k[..n * kvd], model.f32s(bk));
                add_bias(&mut self.ws.v[..n * kvd], model.f32s(bv));
            }
            for i in 0..n {
                let (cs, sn) = (
                    &self.ws.cos[i * half..(i + 1) * half],
                    &self.ws.sin[i * half..(i + 1) * half],
                );
                for hq in 0..c.n_heads {
                    let o = i * qd + hq * c.head_dim;
                    rope(&mut self.ws.q[o..o + c.head_dim], cs, sn, c.rope_layout);
                }
                for hk in 0..c.n_kv_heads {
                    let o = i * kvd + hk * c.head_dim;
                    rope(&mut self.ws.k[o..o + c.head_dim], cs, sn, c.rope_layout);
                }
                self.kv.write(
                    li,
                    self.ws.slots[i],
                    &self.ws.k[i * kvd..(i + 1) * kvd],
                    &self.ws.v[i * kvd..(i + 1) * kvd],
                );
            }
            self.attention(c, li, n);
            self.ws
                .acts
                .quantize_for(self.isa, layer.wo.ty, &self.ws.attn[..n * qd], n, qd);
            self.matmul(model, &layer.wo, n, OutBuf::H);
            for (x, o) in self.ws.x[..n * e].iter_mut().zip(&self.ws.h[..n * e]) {
                *x += *o;
            }

            // Feed-forward block.
            rms_norm(
                &self.ws.x[..n * e],
                model.f32s(&layer.ffn_norm),
                c.rms_eps,
                &mut self.ws.h[..n * e],
                e,
            );
            self.ws
                .acts
                .quantize_for(self.isa, layer.w_gate.ty, &self.ws.h[..n * e], n, e);
            self.matmul(model, &layer.w_gate, n, OutBuf::Gate);
            if layer.w_up.ty != layer.w_gate.ty {
                self.ws
                    .acts
                    .quantize_for(self.isa, layer.w_up.ty, &self.ws.h[..n * e], n, e);
            }
            self.matmul(model, &layer.w_up, n, OutBuf::Up);
            for (g, u) in self.ws.gate[..n * ff].iter_mut().zip(&self.ws.up[..n * ff]) {
                *g = silu(*g) * *u;
            }
            self.ws
                .acts
                .quantize_for(self.isa, layer.w_down.ty, &self.ws.gate[..n * ff], n, ff);
            self.matmul(model, &layer.w_down, n, OutBuf::H);
            for (x, o) in self.ws.x[..n * e].iter_mut().zip(&self.ws.h[..n * e]) {
                *x += *o;
            }
        }

        // Head: all rows with logits_all, else only the last.
        let (first, rows) = if self.opts.logits_all {
            (0, n)
        } else {
            (n - 1, 1)
        };
        rms_norm(
            &self.ws.x[first * e..(first + rows) * e],
            model.f32s(&model.output_norm),
            c.rms_eps,
            &mut self.ws.h[..rows * e],
            e,
        );
        self.ws
            .acts
            .quantize_for(self.isa, model.output.ty, &self.ws.h[..rows * e], rows, e);
        let w = model.matrix(&model.output);
        quant::matmul(
            &self.pool,
            self.isa,
            &w,
            &self.ws.acts,
            rows,
            &mut self.ws.logits[out_row * c.vocab_size..(out_row + rows) * c.vocab_size],
        );
        self.counters.matmuls += 1;
        self.counters.weight_bytes_read += model.output.len as u64;
        self.counters.forward_calls += 1;
        if n == 1 {
            self.counters.tokens_decoded += 1;
        } else {
            self.counters.tokens_prefilled += n as u64;
        }
        self.n_past += n as u32;
        Ok(())
    }

    /// Causal attention of the chunk's `n` queries over every occupied slot whose position
    /// does not exceed the query's. Work is split over (token, head) pairs.
    fn attention(&mut self, c: &ModelConfig, layer: usize, n: usize) {
        let hd = c.head_dim;
        let group = c.n_heads / c.n_kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let used = self.kv.used();
        let cap = self.kv.shape().capacity;
        let positions = self.kv.positions();
        let kv = &self.kv;
        let q = &self.ws.q;
        let qpos = &self.ws.positions[..n];
        let out = SendPtr(self.ws.attn.as_mut_ptr());
        let scores = SendPtr(self.ws.scores.as_mut_ptr());
        let tasks = n * c.n_heads;
        let qd = c.q_dim();
        self.pool.run(|w, nw| {
            // SAFETY: each worker owns the disjoint score row `w` of length `cap`.
            let sc = unsafe { std::slice::from_raw_parts_mut(scores.get().add(w * cap), cap) };
            let mut task = w;
            while task < tasks {
                let (i, h) = (task / c.n_heads, task % c.n_heads);
                let kvh = h / group;
                let qv = &q[i * qd + h * hd..i * qd + (h + 1) * hd];
                let keys = kv.keys(layer, kvh);
                let vals = kv.values(layer, kvh);
                let p = qpos[i];
                let mut mx = f32::NEG_INFINITY;
                for s in 0..used {
                    if positions[s] <= p {
                        let d = dot_f16(qv, &keys[s * hd..(s + 1) * hd]) * scale;
                        sc[s] = d;
                        mx = mx.max(d);
                    } else {
                        sc[s] = f32::NEG_INFINITY;
                    }
                }
                let mut sum = 0.0f32;
                for v in sc[..used].iter_mut() {
                    *v = if *v == f32::NEG_INFINITY {
                        0.0
                    } else {
                        (*v - mx).exp()
                    };
                    sum += *v;
                }
                let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                // SAFETY: (i, h) identifies a disjoint `hd`-long range of the output.
                let o =
                    unsafe { std::slice::from_raw_parts_mut(out.get().add(i * qd + h * hd), hd) };
                o.fill(0.0);
                for s in 0..used {
                    let wgt = sc[s] * inv;
                    if wgt != 0.0 {
                        axpy_f16(wgt, &vals[s * hd..(s + 1) * hd], o);
                    }
                }
                task += nw;
            }
        });
    }
}

#[derive(Clone, Copy)]
enum OutBuf {
    Q,
    K,
    V,
    H,
    Gate,
    Up,
}

fn dot_f16(a: &[f32], b: &[half::f16]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        s += x * y.to_f32();
    }
    s
}

fn axpy_f16(alpha: f32, x: &[half::f16], y: &mut [f32]) {
    for (d, s) in y.iter_mut().zip(x) {
        *d += alpha * s.to_f32();
    }
}

/// RMSNorm of each `width`-long row of `x`, times `w`, into `out`. Sum of squares in f64.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32], width: usize) {
    for (row, o) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let ss: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let scale = 1.0 / ((ss / width as f64) as f32 + eps).sqrt();
        for ((d, &v), &g) in o.iter_mut().zip(row).zip(w) {
            *d = v * scale * g;
        }
    }
}

fn add_bias(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        for (v, bb) in row.iter_mut().zip(b) {
            *v += bb;
        }
    }
}

/// SiLU, x·σ(x).
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Rotates one head vector in place with precomputed cos/sin of each frequency.
pub fn rope(x: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = cos.len();
    match layout {
        RopeLayout::Normal => {
            for j in 0..half {
                let (a, b) = (x[2 * j], x[2 * j + 1]);
                x[2 * j] = a * cos[j] - b * sin[j];
                x[2 * j + 1] = a * sin[j] + b * cos[j];
            }
        }
        RopeLayout::Neox => {
            for j in 0..half {
                let (a, b) = (x[j], x[j + half]);
                x[j] = a * cos[j] - b * sin[j];
                x[j + half] = a * sin[j] + b * cos[j];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_matches_closed_form() {
        let x = [3.0f32, 4.0];
        let w = [1.0f32, 2.0];
        let mut o = [0.0f32; 2];
        rms_norm(&x, &w, 0.0, &mut o, 2);
        let r = (12.5f32).sqrt();
        assert!((o[0] - 3.0 / r).abs() < 1e-6);
        assert!((o[1] - 8.0 / r).abs() < 1e-6);
    }

    #[test]
    fn rope_rotates_pairs_by_angle() {
        let th = 0.3f32;
        let mut x = [1.0f32, 0.0, 0.0, 2.0];
        rope(
            &mut x,
            &[th.cos(), 1.0],
            &[th.sin(), 0.0],
            RopeLayout::Normal,
        );
        assert!((x[0] - th.cos()).abs() < 1e-6 && (x[1] - th.sin()).abs() < 1e-6);
        assert_eq!(&x[2..], &[0.0, 2.0]);
        let mut y = [1.0f32, 0.0, 0.0, 2.0];
        rope(&mut y, &[th.cos(), 1.0], &[th.sin(), 0.0], RopeLayout::Neox);
        // pairs (0,2) and (1,3)
        assert!((y[0] - th.cos()).abs() < 1e-6 && (y[2] - th.sin()).abs() < 1e-6);
        assert_eq!((y[1], y[3]), (0.0, 2.0));
    }

    #[test]
    fn silu_values() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(1.0) - 1.0 / (1.0 + (-1.0f32).exp())).abs() < 1e-7);
    }
}
