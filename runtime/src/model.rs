//! Llama-family model: configuration from GGUF metadata, weight views into the mapping, and
//! the forward pass (batched prefill, decode, and batched decode of several sequences) over
//! ring KV caches.
//!
//! Supported: `llama` (RoPE in the normal, adjacent-pair layout) and `qwen2` (NeoX layout,
//! biases on Q, K and V). GQA, RMSNorm, SwiGLU, tied or separate output. The residual stream
//! stays in f32. Matrix products quantize their activation rows once per input (Q8_0/Q8_1
//! values, in the packed layout on the AVX-512 tier) and run the integer kernels of
//! [`crate::quant`]: the same numerics as llama.cpp's CPU backend, up to summation order.
//! Attention reads f16 keys and values and accumulates in f32.
//!
//! # Schedule of one layer
//! Each step is one job on the persistent pool (or runs on the calling thread when it is too
//! small to share), and the pool's join is the only barrier:
//!
//! 1. RMSNorm fused with activation quantization (one pass per row).
//! 2. Q, K and V in one job over the concatenated rows of the three matrices; bias and RoPE
//!    are applied by the worker that produced each head. K and V are then written to the ring.
//! 3. Attention over (row, KV head) tasks; a prefill chunk of one sequence instead converts
//!    each KV head's keys once into a transposed f32 tile shared by a block of queries.
//! 4. Output projection accumulated straight into the residual stream.
//! 5. RMSNorm + quantization, then gate and up in one job whose workers also apply SwiGLU and
//!    quantize their slice of the result for the down projection.
//! 6. Down projection accumulated into the residual stream.
//!
//! Work inside a job is shared out in chunks through an atomic counter, so a worker that
//! the OS delays does not stall the others. Nothing on these paths allocates.

use crate::GgmlType;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::kv::{KvCache, KvPolicy, KvShape};
use crate::pool::ThreadPool;
use crate::quant::{self, Isa, OutRows, QuantizedActs, WeightMatrix, attn};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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
        quant::ActKind::for_weight(t.ty).is_some()
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
    if !matrix && !start.is_multiple_of(4) {
        return Err(Error::Tensor {
            name: name.into(),
            reason: format!("F32 data at file offset {start} is not 4-byte aligned"),
        });
    }
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
        // Norm and bias vectors are F32 and 4-byte aligned in the file (both checked at load)
        // and the mapping starts on a page boundary, so this cast cannot fail.
        bytemuck::try_cast_slice(self.bytes(t)).unwrap_or(&[])
    }

    /// The token embedding matrix (`vocab` rows of `n_embd`).
    pub fn token_embd(&self) -> WeightMatrix<'_> {
        self.matrix(&self.embd)
    }

    /// The output projection (`vocab` rows of `n_embd`; the embedding when tied).
    pub fn output(&self) -> WeightMatrix<'_> {
        self.matrix(&self.output)
    }

    /// The final RMSNorm weights.
    pub fn output_norm(&self) -> &[f32] {
        self.f32s(&self.output_norm)
    }

    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Views of layer `i`'s weights (zero-copy, from the mapping); `None` past the last layer.
    pub fn layer(&self, i: usize) -> Option<LayerWeights<'_>> {
        let l = self.layers.get(i)?;
        Some(LayerWeights {
            attn_norm: self.f32s(&l.attn_norm),
            wq: self.matrix(&l.wq),
            wk: self.matrix(&l.wk),
            wv: self.matrix(&l.wv),
            bq: l.bq.as_ref().map(|t| self.f32s(t)),
            bk: l.bk.as_ref().map(|t| self.f32s(t)),
            bv: l.bv.as_ref().map(|t| self.f32s(t)),
            wo: self.matrix(&l.wo),
            ffn_norm: self.f32s(&l.ffn_norm),
            w_gate: self.matrix(&l.w_gate),
            w_up: self.matrix(&l.w_up),
            w_down: self.matrix(&l.w_down),
        })
    }

    /// RoPE inverse frequencies `base^(-2i/d)`, one per rotated pair.
    pub fn rope_inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }
}

/// Borrowed views of one layer's weights, straight from the model mapping.
#[derive(Clone, Copy, Debug)]
pub struct LayerWeights<'a> {
    pub attn_norm: &'a [f32],
    pub wq: WeightMatrix<'a>,
    pub wk: WeightMatrix<'a>,
    pub wv: WeightMatrix<'a>,
    pub bq: Option<&'a [f32]>,
    pub bk: Option<&'a [f32]>,
    pub bv: Option<&'a [f32]>,
    pub wo: WeightMatrix<'a>,
    pub ffn_norm: &'a [f32],
    pub w_gate: WeightMatrix<'a>,
    pub w_up: WeightMatrix<'a>,
    pub w_down: WeightMatrix<'a>,
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

/// Where one row of a forward call belongs: its sequence (index into the KV set), absolute
/// position and KV slot.
#[derive(Clone, Copy, Debug, Default)]
struct RowInfo {
    seq: usize,
    pos: u32,
    slot: usize,
}

/// The KV caches one forward call reads and writes: a single ring for a prefill chunk or a
/// decode step, one ring per row for a batched decode.
trait KvAccess: Sync {
    fn kv(&self, seq: usize) -> &KvCache;
    fn kv_mut(&mut self, seq: usize) -> &mut KvCache;
}

impl KvAccess for KvCache {
    fn kv(&self, _: usize) -> &KvCache {
        self
    }
    fn kv_mut(&mut self, _: usize) -> &mut KvCache {
        self
    }
}

/// Sequences decoded together by [`BatchForward::decode`]: anything that lends out its
/// [`Forward`] states by index (a slice of `&mut Forward`, or of sessions).
pub trait SeqSet: Sync {
    fn n_seqs(&self) -> usize;
    fn seq(&self, i: usize) -> &Forward;
    fn seq_mut(&mut self, i: usize) -> &mut Forward;
}

impl SeqSet for [&mut Forward] {
    fn n_seqs(&self) -> usize {
        self.len()
    }
    fn seq(&self, i: usize) -> &Forward {
        self[i]
    }
    fn seq_mut(&mut self, i: usize) -> &mut Forward {
        self[i]
    }
}

impl SeqSet for [Forward] {
    fn n_seqs(&self) -> usize {
        self.len()
    }
    fn seq(&self, i: usize) -> &Forward {
        &self[i]
    }
    fn seq_mut(&mut self, i: usize) -> &mut Forward {
        &mut self[i]
    }
}

struct SeqKv<'a, S: ?Sized>(&'a mut S);

impl<S: SeqSet + ?Sized> KvAccess for SeqKv<'_, S> {
    fn kv(&self, seq: usize) -> &KvCache {
        &self.0.seq(seq).kv
    }
    fn kv_mut(&mut self, seq: usize) -> &mut KvCache {
        &mut self.0.seq_mut(seq).kv
    }
}

/// Query heads per tiled-attention task (tokens × heads of one KV group).
const TILE_QUERIES: usize = 12;

/// Scratch buffers, allocated once per session (or batch decoder).
struct Workspace {
    x: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    logits: Vec<f32>,
    acts: QuantizedActs,
    acts2: QuantizedActs,
    /// Per-worker attention scratch, `scratch_stride` floats each.
    scratch: Vec<f32>,
    scratch_stride: usize,
    /// Slots of the widest KV ring served, rounded up to 16.
    ldk: usize,
    /// Rows of score scratch per worker.
    sc_rows: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
    rows: Vec<RowInfo>,
}

impl Workspace {
    fn new(c: &ModelConfig, rows: usize, cap: usize, threads: usize, logit_rows: usize) -> Self {
        let hd = c.head_dim;
        let group = c.n_heads / c.n_kv_heads;
        let ldk = cap.next_multiple_of(16);
        let sc_rows = TILE_QUERIES.max(group);
        // Scores, then query and output staging.
        let scratch_stride = (sc_rows * ldk + 2 * sc_rows * hd).next_multiple_of(16);
        let widest = c.n_embd.max(c.n_ff).max(c.q_dim());
        Workspace {
            x: vec![0.0; rows * c.n_embd],
            q: vec![0.0; rows * c.q_dim()],
            k: vec![0.0; rows * c.kv_dim()],
            v: vec![0.0; rows * c.kv_dim()],
            attn: vec![0.0; rows * c.q_dim()],
            gate: vec![0.0; rows * c.n_ff],
            up: vec![0.0; rows * c.n_ff],
            logits: vec![0.0; logit_rows * c.vocab_size],
            acts: QuantizedActs::new(rows, widest),
            acts2: QuantizedActs::new(rows, c.n_ff),
            scratch: vec![0.0; threads * scratch_stride],
            scratch_stride,
            ldk,
            sc_rows,
            cos: vec![0.0; rows * c.rope_dims / 2],
            sin: vec![0.0; rows * c.rope_dims / 2],
            rows: vec![RowInfo::default(); rows],
        }
    }
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

/// A raw view of a scratch vector that pool workers write in disjoint ranges.
#[derive(Clone, Copy)]
struct Shared {
    ptr: *mut f32,
    len: usize,
}
// SAFETY: only used to hand disjoint ranges of a buffer to pool workers, which finish before
// `ThreadPool::run` returns; the buffer outlives the job.
unsafe impl Send for Shared {}
// SAFETY: see above.
unsafe impl Sync for Shared {}

impl Shared {
    fn new(v: &mut [f32]) -> Self {
        Shared {
            ptr: v.as_mut_ptr(),
            len: v.len(),
        }
    }

    /// # Safety
    /// No other thread accesses `[off, off + len)` while the slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, off: usize, len: usize) -> &mut [f32] {
        assert!(
            off + len <= self.len,
            "scratch range {off}+{len} of {}",
            self.len
        );
        // SAFETY: in bounds (checked); exclusivity is the caller's.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), len) }
    }

    /// An output view of `rows × cols` with row stride `stride`.
    fn out(&self, rows: usize, cols: usize, stride: usize, accumulate: bool) -> OutRows {
        // SAFETY: the view lies inside the buffer (checked by `from_raw`); workers write
        // disjoint weight-row ranges of it.
        unsafe { OutRows::from_raw(self.ptr, self.len, rows, cols, stride, accumulate) }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: usize, b: usize) -> usize {
    a / gcd(a, b).max(1) * b
}

/// Runs `f(lo, hi)` over `0..total` in chunks of `chunk` shared out to the pool through an
/// atomic counter.
fn par_chunks(pool: &ThreadPool, total: usize, chunk: usize, f: impl Fn(usize, usize) + Sync) {
    if total == 0 {
        return;
    }
    let n_chunks = total.div_ceil(chunk.max(1));
    if n_chunks == 1 || pool.n_threads() == 1 {
        let mut lo = 0;
        while lo < total {
            f(lo, (lo + chunk).min(total));
            lo += chunk;
        }
        return;
    }
    let next = AtomicUsize::new(0);
    pool.run_dynamic(|_, _| {
        loop {
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c >= n_chunks {
                break;
            }
            let lo = c * chunk;
            f(lo, (lo + chunk).min(total));
        }
    });
}

/// Runs `f(row)` for rows `0..n`: on the calling thread for a few rows, split over the pool
/// otherwise.
fn par_rows(pool: &ThreadPool, n: usize, f: impl Fn(usize) + Sync) {
    if n < 8 || pool.n_threads() == 1 {
        (0..n).for_each(f);
        return;
    }
    par_chunks(pool, n, n.div_ceil(2 * pool.n_threads()), |lo, hi| {
        (lo..hi).for_each(&f)
    });
}

/// `y (+)= w · x` over the pool in row chunks (rows a multiple of `align`).
fn matmul_job(
    pool: &ThreadPool,
    isa: Isa,
    w: &WeightMatrix<'_>,
    x: &QuantizedActs,
    n: usize,
    out: OutRows,
    counters: &mut Counters,
) {
    let chunk = quant::chunk_size(w.rows, pool.n_threads(), 4);
    par_chunks(pool, w.rows, chunk, |r0, r1| {
        // SAFETY: chunks are disjoint weight-row ranges, so workers write disjoint outputs.
        unsafe { quant::matmul_rows(isa, w, x, n, r0, r1, out) }
    });
    counters.matmuls += 1;
    counters.weight_bytes_read += w.data.len() as u64;
}

/// RMSNorm of rows `0..n` of `x` (each `width` wide) fused with their quantization for
/// weights of type `ty`.
#[allow(clippy::too_many_arguments)]
fn norm_quantize(
    pool: &ThreadPool,
    isa: Isa,
    x: &[f32],
    n: usize,
    width: usize,
    g: &[f32],
    eps: f32,
    acts: &mut QuantizedActs,
    ty: GgmlType,
) {
    let w = acts.prepare(isa, ty, n, width);
    par_rows(pool, n, |a| {
        let xr = &x[a * width..(a + 1) * width];
        let s = quant::rms_scale(isa, xr, eps);
        // SAFETY: each row is written by exactly one call.
        unsafe { w.write_cols(a, 0, xr, Some((s, g))) };
    });
}

/// Quantizes rows `0..n` of `x` for weights of type `ty`.
fn quantize_rows(
    pool: &ThreadPool,
    isa: Isa,
    x: &[f32],
    n: usize,
    width: usize,
    acts: &mut QuantizedActs,
    ty: GgmlType,
) {
    let w = acts.prepare(isa, ty, n, width);
    par_rows(pool, n, |a| {
        // SAFETY: each row is written by exactly one call.
        unsafe { w.write_cols(a, 0, &x[a * width..(a + 1) * width], None) };
    });
}

/// Adds the bias and applies RoPE to rows `0..n`, columns `r0..r1` of a Q or K output
/// (`width` wide, heads of `hd`); `r0`/`r1` fall on head boundaries when `rope` is set.
#[allow(clippy::too_many_arguments)]
fn bias_rope(
    buf: Shared,
    n: usize,
    width: usize,
    r0: usize,
    r1: usize,
    bias: Option<&[f32]>,
    rope_on: bool,
    c: &ModelConfig,
    cos: &[f32],
    sin: &[f32],
) {
    let half = c.rope_dims / 2;
    let hd = c.head_dim;
    for a in 0..n {
        // SAFETY: columns r0..r1 of every row belong to the calling worker alone.
        let row = unsafe { buf.slice(a * width + r0, r1 - r0) };
        if let Some(b) = bias {
            for (v, bb) in row.iter_mut().zip(&b[r0..r1]) {
                *v += bb;
            }
        }
        if rope_on {
            let (cs, sn) = (
                &cos[a * half..(a + 1) * half],
                &sin[a * half..(a + 1) * half],
            );
            for head in row.chunks_exact_mut(hd) {
                rope(head, cs, sn, c.rope_layout);
            }
        }
    }
}

/// The parts of a layer's forward pass that need the scratch, the pool and the KV set.
struct Pass<'a> {
    model: &'a Model,
    pool: &'a ThreadPool,
    isa: Isa,
}

impl Pass<'_> {
    /// Runs every layer over the `n` rows whose embeddings are in `ws.x` and whose slots are
    /// in `ws.rows` (already claimed). `tiled` allows the shared-key attention of a prefill
    /// chunk (one sequence whose slots hold increasing positions).
    fn layers(
        &self,
        ws: &mut Workspace,
        n: usize,
        kvs: &mut dyn KvAccess,
        tiled: bool,
        counters: &mut Counters,
    ) {
        let c = &self.model.config;
        let (e, qd, kvd, ff) = (c.n_embd, c.q_dim(), c.kv_dim(), c.n_ff);
        let half = c.rope_dims / 2;
        for i in 0..n {
            let pos = ws.rows[i].pos;
            for (j, f) in self.model.inv_freq.iter().enumerate() {
                let theta = pos as f32 * f;
                ws.cos[i * half + j] = theta.cos();
                ws.sin[i * half + j] = theta.sin();
            }
        }
        for li in 0..self.model.layers.len() {
            let Some(lw) = self.model.layer(li) else {
                unreachable!("layer {li} exists")
            };
            // 1-2: attention norm, Q/K/V.
            norm_quantize(
                self.pool,
                self.isa,
                &ws.x,
                n,
                e,
                lw.attn_norm,
                c.rms_eps,
                &mut ws.acts,
                lw.wq.ty,
            );
            self.qkv(ws, &lw, n, counters);
            for i in 0..n {
                let r = ws.rows[i];
                kvs.kv_mut(r.seq).write(
                    li,
                    r.slot,
                    &ws.k[i * kvd..(i + 1) * kvd],
                    &ws.v[i * kvd..(i + 1) * kvd],
                );
            }
            // 3: attention.
            self.attention(ws, li, n, &*kvs, tiled);
            // 4: output projection into the residual stream.
            quantize_rows(self.pool, self.isa, &ws.attn, n, qd, &mut ws.acts, lw.wo.ty);
            let xo = Shared::new(&mut ws.x).out(n, e, e, true);
            matmul_job(self.pool, self.isa, &lw.wo, &ws.acts, n, xo, counters);
            // 5-6: feed-forward.
            norm_quantize(
                self.pool,
                self.isa,
                &ws.x,
                n,
                e,
                lw.ffn_norm,
                c.rms_eps,
                &mut ws.acts,
                lw.w_gate.ty,
            );
            self.gate_up(ws, &lw, n, counters);
            let xo = Shared::new(&mut ws.x).out(n, e, e, true);
            matmul_job(self.pool, self.isa, &lw.w_down, &ws.acts2, n, xo, counters);
            let _ = ff;
        }
    }

    /// Q, K and V from `ws.acts` (quantized for `wq`), with bias and RoPE.
    fn qkv(&self, ws: &mut Workspace, lw: &LayerWeights<'_>, n: usize, counters: &mut Counters) {
        let c = &self.model.config;
        let (e, qd, kvd, hd) = (c.n_embd, c.q_dim(), c.kv_dim(), c.head_dim);
        let (q, k, v) = (
            Shared::new(&mut ws.q),
            Shared::new(&mut ws.k),
            Shared::new(&mut ws.v),
        );
        let segs = [
            (lw.wq, q, qd, lw.bq, true),
            (lw.wk, k, kvd, lw.bk, true),
            (lw.wv, v, kvd, lw.bv, false),
        ];
        let (cos, sin) = (&ws.cos[..], &ws.sin[..]);
        let one_layout = segs
            .iter()
            .all(|s| quant::act_layout(self.isa, s.0.ty) == quant::act_layout(self.isa, lw.wq.ty));
        if one_layout {
            let total = qd + 2 * kvd;
            let chunk = quant::chunk_size(total, self.pool.n_threads(), lcm(hd, 4));
            let acts = &ws.acts;
            par_chunks(self.pool, total, chunk, |lo, hi| {
                let mut base = 0;
                for (w, buf, width, bias, rope_on) in &segs {
                    let (s0, s1) = (lo.max(base), hi.min(base + width));
                    if s0 < s1 {
                        let (r0, r1) = (s0 - base, s1 - base);
                        let out = buf.out(n, *width, *width, false);
                        // SAFETY: chunks are disjoint row ranges of Q|K|V.
                        unsafe { quant::matmul_rows(self.isa, w, acts, n, r0, r1, out) };
                        bias_rope(*buf, n, *width, r0, r1, *bias, *rope_on, c, cos, sin);
                    }
                    base += width;
                }
            });
            for (w, ..) in &segs {
                counters.matmuls += 1;
                counters.weight_bytes_read += w.data.len() as u64;
            }
        } else {
            // Mixed weight formats: one quantization and product per matrix. `ws.acts` holds
            // the normalized row for `wq`; re-derive it for the others from its source.
            for (i, (w, buf, width, bias, rope_on)) in segs.iter().enumerate() {
                if i > 0 {
                    let eps = c.rms_eps;
                    norm_quantize(
                        self.pool,
                        self.isa,
                        &ws.x,
                        n,
                        e,
                        lw.attn_norm,
                        eps,
                        &mut ws.acts,
                        w.ty,
                    );
                }
                matmul_job(
                    self.pool,
                    self.isa,
                    w,
                    &ws.acts,
                    n,
                    buf.out(n, *width, *width, false),
                    counters,
                );
                bias_rope(*buf, n, *width, 0, *width, *bias, *rope_on, c, cos, sin);
            }
        }
    }

    /// Gate and up from `ws.acts`, SwiGLU, and its quantization into `ws.acts2` for `w_down`.
    fn gate_up(
        &self,
        ws: &mut Workspace,
        lw: &LayerWeights<'_>,
        n: usize,
        counters: &mut Counters,
    ) {
        let c = &self.model.config;
        let ff = c.n_ff;
        let isa = self.isa;
        let (gate, up) = (Shared::new(&mut ws.gate), Shared::new(&mut ws.up));
        if quant::act_layout(isa, lw.w_gate.ty) == quant::act_layout(isa, lw.w_up.ty) {
            let w2 = ws.acts2.prepare(isa, lw.w_down.ty, n, ff);
            let chunk = quant::chunk_size(ff, self.pool.n_threads(), lcm(w2.layout().align(), 4));
            let acts = &ws.acts;
            let (og, ou) = (gate.out(n, ff, ff, false), up.out(n, ff, ff, false));
            par_chunks(self.pool, ff, chunk, |r0, r1| {
                // SAFETY: chunks are disjoint row ranges of gate/up, and each worker reads,
                // rewrites and quantizes only its own columns r0..r1 of every row.
                unsafe {
                    quant::matmul_rows(isa, &lw.w_gate, acts, n, r0, r1, og);
                    quant::matmul_rows(isa, &lw.w_up, acts, n, r0, r1, ou);
                    for a in 0..n {
                        let g = gate.slice(a * ff + r0, r1 - r0);
                        attn::silu_mul(isa, g, up.slice(a * ff + r0, r1 - r0));
                        w2.write_cols(a, r0, g, None);
                    }
                }
            });
            for w in [&lw.w_gate, &lw.w_up] {
                counters.matmuls += 1;
                counters.weight_bytes_read += w.data.len() as u64;
            }
        } else {
            let e = c.n_embd;
            matmul_job(
                self.pool,
                isa,
                &lw.w_gate,
                &ws.acts,
                n,
                gate.out(n, ff, ff, false),
                counters,
            );
            norm_quantize(
                self.pool,
                isa,
                &ws.x,
                n,
                e,
                lw.ffn_norm,
                c.rms_eps,
                &mut ws.acts,
                lw.w_up.ty,
            );
            matmul_job(
                self.pool,
                isa,
                &lw.w_up,
                &ws.acts,
                n,
                up.out(n, ff, ff, false),
                counters,
            );
            attn::silu_mul(isa, &mut ws.gate[..n * ff], &ws.up[..n * ff]);
            quantize_rows(self.pool, isa, &ws.gate, n, ff, &mut ws.acts2, lw.w_down.ty);
        }
    }

    /// Causal attention of the `n` rows' queries (`ws.q`) into `ws.attn`.
    ///
    /// A task is one KV head and a block of rows: the block is a single row, or with
    /// `tiled` (a prefill chunk of one sequence) up to [`TILE_QUERIES`] / group consecutive
    /// rows that then share every key and value row they read. Each score, softmax and
    /// output is the same chain of operations in both cases (masked slots contribute exact
    /// zeros), so a prefill chunk, token-by-token decode and batched decode agree bit for bit.
    fn attention(
        &self,
        ws: &mut Workspace,
        layer: usize,
        n: usize,
        kvs: &dyn KvAccess,
        tiled: bool,
    ) {
        let c = &self.model.config;
        let (hd, qd) = (c.head_dim, c.q_dim());
        let group = c.n_heads / c.n_kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let isa = self.isa;
        let ldk = ws.ldk;
        let sc_rows = ws.sc_rows;
        let stride = ws.scratch_stride;
        let scratch = Shared::new(&mut ws.scratch);
        let out = Shared::new(&mut ws.attn);
        let q = &ws.q[..];
        let rows = &ws.rows[..n];
        let next = AtomicUsize::new(0);
        let tb = if tiled {
            (TILE_QUERIES / group).max(1)
        } else {
            1
        };
        let nblk = n.div_ceil(tb);
        let tasks = c.n_kv_heads * nblk;
        let job = |w: usize, _nw: usize| {
            // SAFETY: each worker owns scratch block `w`.
            let sc = unsafe { scratch.slice(w * stride, stride) };
            let (scores, rest) = sc.split_at_mut(sc_rows * ldk);
            let (qbuf, rest) = rest.split_at_mut(sc_rows * hd);
            let obuf = &mut rest[..sc_rows * hd];
            loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                if t >= tasks {
                    break;
                }
                let (g, blk) = (t / nblk, t % nblk);
                let (t0, t1) = (blk * tb, ((blk + 1) * tb).min(n));
                let kv = kvs.kv(rows[t0].seq);
                let positions = kv.positions();
                // Slots any row of the block may see: a prefix when slots are in position
                // order (tiled), else all of them (masked per row below).
                let lim = if tiled {
                    let pmax = rows[t1 - 1].pos;
                    positions.partition_point(|&p| p <= pmax)
                } else {
                    kv.used()
                };
                let nq = (t1 - t0) * group;
                for (b, ti) in (t0..t1).enumerate() {
                    let src = ti * qd + g * group * hd;
                    qbuf[b * group * hd..(b + 1) * group * hd]
                        .copy_from_slice(&q[src..src + group * hd]);
                }
                attn::scores_f16(
                    isa,
                    qbuf,
                    nq,
                    hd,
                    kv.keys(layer, g),
                    lim,
                    scale,
                    scores,
                    ldk,
                );
                for (b, r) in rows[t0..t1].iter().enumerate() {
                    for (s, &p) in positions[..lim].iter().enumerate() {
                        if p > r.pos {
                            for h in 0..group {
                                scores[(b * group + h) * ldk + s] = f32::NEG_INFINITY;
                            }
                        }
                    }
                }
                for j in 0..nq {
                    softmax(isa, &mut scores[j * ldk..j * ldk + lim]);
                }
                obuf[..nq * hd].fill(0.0);
                attn::accum_f16(isa, scores, ldk, nq, hd, kv.values(layer, g), lim, obuf);
                for (b, ti) in (t0..t1).enumerate() {
                    // SAFETY: (row ti, KV group g) is one task's disjoint output range.
                    let o = unsafe { out.slice(ti * qd + g * group * hd, group * hd) };
                    o.copy_from_slice(&obuf[b * group * hd..(b + 1) * group * hd]);
                }
            }
        };
        if tasks == 1 || self.pool.n_threads() == 1 {
            job(0, 1);
        } else {
            self.pool.run_dynamic(job);
        }
    }

    /// RMSNorm and output projection of rows `first..first + rows` of `ws.x` into `ws.logits`.
    /// Final norm and output projection of rows `first..first + rows` of the residual
    /// stream, into logits rows `out_row..out_row + rows`.
    fn head(
        &self,
        ws: &mut Workspace,
        first: usize,
        rows: usize,
        out_row: usize,
        counters: &mut Counters,
    ) {
        let c = &self.model.config;
        let e = c.n_embd;
        let w = self.model.output();
        norm_quantize(
            self.pool,
            self.isa,
            &ws.x[first * e..(first + rows) * e],
            rows,
            e,
            self.model.output_norm(),
            c.rms_eps,
            &mut ws.acts,
            w.ty,
        );
        let v = c.vocab_size;
        let logits = &mut ws.logits[out_row * v..(out_row + rows) * v];
        let out = Shared::new(logits).out(rows, v, v, false);
        matmul_job(self.pool, self.isa, &w, &ws.acts, rows, out, counters);
    }

    /// Embedding rows of `tokens` into `ws.x`.
    fn embed(&self, ws: &mut Workspace, tokens: &[u32]) {
        let e = self.model.config.n_embd;
        let embd = self.model.token_embd();
        for (i, &t) in tokens.iter().enumerate() {
            embd.row_dequant(t as usize, &mut ws.x[i * e..(i + 1) * e]);
        }
    }
}

/// In-place softmax of one score row (`-inf` entries get probability 0).
fn softmax(isa: Isa, row: &mut [f32]) {
    let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if mx == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let sum = attn::exp_shifted(isa, row, mx);
    let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
    for v in row.iter_mut() {
        *v *= inv;
    }
}

fn check_tokens(model: &Model, tokens: &[u32]) -> Result<()> {
    let vocab = model.config.vocab_size as u32;
    if let Some(&bad) = tokens.iter().find(|&&t| t >= vocab) {
        return Err(Error::InvalidArgument {
            what: "token id".into(),
            reason: format!("{bad} is outside the vocabulary of {vocab}"),
        });
    }
    Ok(())
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
        let logit_rows = if opts.logits_all { b } else { 1 };
        let ws = Workspace::new(c, b, opts.max_seq_len, pool.n_threads(), logit_rows);
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
        check_tokens(model, tokens)?;
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

    /// Runs one sub-batch; with `logits_all` its logits go to rows `out_row..` of the buffer.
    fn forward_chunk(&mut self, model: &Model, tokens: &[u32], out_row: usize) -> Result<()> {
        let n = tokens.len();
        let pass = Pass {
            model,
            pool: &self.pool,
            isa: self.isa,
        };
        pass.embed(&mut self.ws, tokens);
        for i in 0..n {
            let pos = self.n_past + i as u32;
            let slot = self.kv.claim(pos)?;
            self.ws.rows[i] = RowInfo { seq: 0, pos, slot };
        }
        // Shared-key attention needs slots in position order (true until a sliding ring
        // wraps).
        let tiled = n >= 2 && self.kv.positions().windows(2).all(|w| w[0] < w[1]);
        pass.layers(&mut self.ws, n, &mut self.kv, tiled, &mut self.counters);
        let (first, rows) = if self.opts.logits_all {
            (0, n)
        } else {
            (n - 1, 1)
        };
        pass.head(&mut self.ws, first, rows, out_row, &mut self.counters);
        self.counters.forward_calls += 1;
        if n == 1 {
            self.counters.tokens_decoded += 1;
        } else {
            self.counters.tokens_prefilled += n as u64;
        }
        self.n_past += n as u32;
        Ok(())
    }
}

/// Decodes one token for each of several sequences at once (the Offline scenario's batch):
/// every weight matrix is streamed once for the whole batch, while each sequence keeps its
/// own [`Forward`] state and KV ring. The logits of sequence `i` are row `i` of the result,
/// bit-identical to what [`Forward::forward`] gives that sequence alone on the same tier.
pub struct BatchForward {
    ws: Workspace,
    pool: Arc<ThreadPool>,
    isa: Isa,
    max_batch: usize,
    max_seq_len: usize,
    pub counters: Counters,
}

impl BatchForward {
    /// A decoder for up to `max_batch` sequences whose KV rings hold at most `max_seq_len`
    /// slots.
    pub fn new(
        model: &Model,
        max_batch: usize,
        max_seq_len: usize,
        pool: Arc<ThreadPool>,
        isa: Isa,
    ) -> Result<Self> {
        if max_batch == 0 || max_seq_len == 0 {
            return Err(Error::InvalidArgument {
                what: "batch decoder".into(),
                reason: format!(
                    "max_batch {max_batch} and max_seq_len {max_seq_len} must be at least 1"
                ),
            });
        }
        let ws = Workspace::new(
            &model.config,
            max_batch,
            max_seq_len,
            pool.n_threads(),
            max_batch,
        );
        Ok(BatchForward {
            ws,
            pool,
            isa,
            max_batch,
            max_seq_len,
            counters: Counters::default(),
        })
    }

    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Appends `tokens[i]` to sequence `i` of `seqs` and returns the next-token logits of
    /// every sequence (`tokens.len() × vocab`, row `i` for sequence `i`). Nothing is changed
    /// when an argument is refused.
    pub fn decode<S: SeqSet + ?Sized>(
        &mut self,
        model: &Model,
        seqs: &mut S,
        tokens: &[u32],
    ) -> Result<&[f32]> {
        let b = tokens.len();
        if b == 0 || b > self.max_batch || b != seqs.n_seqs() {
            return Err(Error::InvalidArgument {
                what: "batch".into(),
                reason: format!(
                    "{b} tokens for {} sequences (batch size 1..={})",
                    seqs.n_seqs(),
                    self.max_batch
                ),
            });
        }
        check_tokens(model, tokens)?;
        let c = &model.config;
        for i in 0..b {
            let f = seqs.seq(i);
            let sh = f.kv.shape();
            if sh.n_layers != c.n_layers
                || sh.n_kv_heads != c.n_kv_heads
                || sh.head_dim != c.head_dim
                || sh.capacity > self.max_seq_len
            {
                return Err(Error::InvalidArgument {
                    what: format!("batch sequence {i}"),
                    reason: format!(
                        "its KV ring {sh:?} does not fit this model and decoder (at most {} slots)",
                        self.max_seq_len
                    ),
                });
            }
            if !f.kv.can_take(1) {
                return Err(Error::ContextOverflow {
                    tokens: f.kv.used() + 1,
                    ctx: sh.capacity,
                });
            }
        }
        let pass = Pass {
            model,
            pool: &self.pool,
            isa: self.isa,
        };
        pass.embed(&mut self.ws, tokens);
        for i in 0..b {
            let f = seqs.seq_mut(i);
            let pos = f.n_past;
            let slot = f.kv.claim(pos)?;
            self.ws.rows[i] = RowInfo { seq: i, pos, slot };
        }
        pass.layers(&mut self.ws, b, &mut SeqKv(seqs), false, &mut self.counters);
        pass.head(&mut self.ws, 0, b, 0, &mut self.counters);
        for i in 0..b {
            let f = seqs.seq_mut(i);
            f.n_past += 1;
            f.counters.tokens_decoded += 1;
            f.counters.forward_calls += 1;
        }
        self.counters.tokens_decoded += b as u64;
        self.counters.forward_calls += 1;
        Ok(&self.ws.logits[..b * c.vocab_size])
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
