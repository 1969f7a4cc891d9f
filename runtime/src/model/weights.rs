//! The loaded model: the GGUF mapping plus validated, zero-copy views of every tensor the
//! forward pass reads (names as in llama.cpp's `LLM_TENSOR_NAMES`), and the rotary
//! frequencies derived from the configuration.

use super::config::{ModelConfig, RopeScaling};
use crate::GgmlType;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::quant::{self, ActKind, Isa, Repacked, WeightMatrix};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A weight tensor located in the mapping: type, shape and byte range.
#[derive(Clone, Copy, Debug)]
pub(super) struct TensorRef {
    pub(super) ty: GgmlType,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) start: usize,
    pub(super) len: usize,
}

pub(super) struct Layer {
    attn_norm: TensorRef,
    wq: TensorRef,
    wk: TensorRef,
    wv: TensorRef,
    bq: Option<TensorRef>,
    bk: Option<TensorRef>,
    bv: Option<TensorRef>,
    q_norm: Option<TensorRef>,
    k_norm: Option<TensorRef>,
    wo: TensorRef,
    post_attn_norm: Option<TensorRef>,
    ffn_norm: TensorRef,
    w_gate: TensorRef,
    w_up: TensorRef,
    w_down: TensorRef,
    post_ffn_norm: Option<TensorRef>,
}

impl Layer {
    fn tensors(&self) -> impl Iterator<Item = &TensorRef> {
        [
            Some(&self.attn_norm),
            Some(&self.wq),
            Some(&self.wk),
            Some(&self.wv),
            self.bq.as_ref(),
            self.bk.as_ref(),
            self.bv.as_ref(),
            self.q_norm.as_ref(),
            self.k_norm.as_ref(),
            Some(&self.wo),
            self.post_attn_norm.as_ref(),
            Some(&self.ffn_norm),
            Some(&self.w_gate),
            Some(&self.w_up),
            Some(&self.w_down),
            self.post_ffn_norm.as_ref(),
        ]
        .into_iter()
        .flatten()
    }
}

/// A loaded model: the mapping plus validated views of every tensor the forward pass reads.
pub struct Model {
    gguf: Arc<GgufFile>,
    pub(super) config: ModelConfig,
    embd: TensorRef,
    output_norm: TensorRef,
    output: TensorRef,
    pub(super) layers: Vec<Layer>,
    inv_freq: Vec<f32>,
    inv_freq_swa: Vec<f32>,
    /// The tier whose kernels read some matrices faster in another layout, set by
    /// [`Model::repack_for`]: the copies are made when the first CPU executor is built
    /// ([`Model::ensure_repacked`]), so an engine that runs elsewhere never makes them.
    repack_isa: Option<Isa>,
    /// Matrices rewritten for that tier's kernels, by the file offset of the tensor they were
    /// made from; set once.
    repacked: OnceLock<BTreeMap<usize, Repacked>>,
    /// Held while the copies are made, so that two executors built at once make them once.
    repacking: Mutex<()>,
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
        ActKind::for_weight(t.ty).is_some()
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

/// Inverse rotary frequencies `base^(-2i/d)` (in f64, rounded once), divided by the
/// scaling's per-dimension factor or linear factor.
fn inv_freqs(c: &ModelConfig, base: f32, scaling: RopeScaling, factors: &[f32]) -> Vec<f32> {
    (0..c.rope_dims / 2)
        .map(|i| {
            let f = (base as f64).powf(-2.0 * i as f64 / c.rope_dims as f64);
            let f = match scaling {
                RopeScaling::None => f,
                RopeScaling::Linear { factor } => f / factor as f64,
                RopeScaling::FreqFactors => f / factors[i] as f64,
            };
            f as f32
        })
        .collect()
}

impl Model {
    /// Opens and validates a model file.
    pub fn open(path: &std::path::Path) -> Result<Self> {
        Self::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    pub fn from_gguf(gguf: Arc<GgufFile>) -> Result<Self> {
        let c = ModelConfig::from_gguf(&gguf)?;
        let g = &*gguf;
        let (e, q, kv, ff, hd) = (c.n_embd, c.q_dim(), c.kv_dim(), c.n_ff, c.head_dim);
        let embd = tensor_ref(g, "token_embd.weight", &[e, c.vocab_size], true)?;
        let output = if c.tied_output {
            embd
        } else {
            tensor_ref(g, "output.weight", &[e, c.vocab_size], true)?
        };
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let opt = |on: bool, s: &str, len: usize| -> Result<Option<TensorRef>> {
                if on {
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
                bq: opt(c.qkv_bias, "attn_q.bias", q)?,
                bk: opt(c.qkv_bias, "attn_k.bias", kv)?,
                bv: opt(c.qkv_bias, "attn_v.bias", kv)?,
                q_norm: opt(c.qk_norm, "attn_q_norm.weight", hd)?,
                k_norm: opt(c.qk_norm, "attn_k_norm.weight", hd)?,
                wo: tensor_ref(g, &n("attn_output.weight"), &[q, e], true)?,
                post_attn_norm: opt(c.post_norms, "post_attention_norm.weight", e)?,
                ffn_norm: tensor_ref(g, &n("ffn_norm.weight"), &[e], false)?,
                w_gate: tensor_ref(g, &n("ffn_gate.weight"), &[e, ff], true)?,
                w_up: tensor_ref(g, &n("ffn_up.weight"), &[e, ff], true)?,
                w_down: tensor_ref(g, &n("ffn_down.weight"), &[ff, e], true)?,
                post_ffn_norm: opt(c.post_norms, "post_ffw_norm.weight", e)?,
            });
        }
        let output_norm = tensor_ref(g, "output_norm.weight", &[e], false)?;
        let factors: &[f32] = if c.rope_scaling == RopeScaling::FreqFactors {
            let t = tensor_ref(g, "rope_freqs.weight", &[c.rope_dims / 2], false)?;
            let f: &[f32] =
                bytemuck::try_cast_slice(&g.as_bytes()[t.start..t.start + t.len]).unwrap_or(&[]);
            if let Some(bad) = f.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
                return Err(Error::Tensor {
                    name: "rope_freqs.weight".into(),
                    reason: format!("frequency factor {bad} is not a positive number"),
                });
            }
            f
        } else {
            &[]
        };
        let inv_freq = inv_freqs(&c, c.rope_base, c.rope_scaling, factors);
        let inv_freq_swa = inv_freqs(&c, c.rope_base_swa, RopeScaling::None, &[]);
        Ok(Model {
            gguf,
            config: c,
            embd,
            output_norm,
            output,
            layers,
            inv_freq,
            inv_freq_swa,
            repack_isa: None,
            repacked: OnceLock::new(),
            repacking: Mutex::new(()),
        })
    }

    /// Asks for the layer matrices and the output matrix that tier `isa`'s kernels read
    /// faster in another layout or place ([`quant::repack`]: Q5_0 and Q4_1 rewritten, Q8_0
    /// copied, on the AVX-512 VBMI tier; Q5_0 rewritten on the AVX2 tier) to be rewritten when the first CPU executor
    /// ([`super::Forward`], [`super::BatchForward`]) is built for this model
    /// ([`Model::ensure_repacked`]). The results are bit-identical with
    /// and without.
    pub fn repack_for(&mut self, isa: Isa) {
        self.repack_isa = Some(isa);
    }

    /// Withdraws [`Model::repack_for`] and drops any copies made (a backend that reads the
    /// mapping runs this model instead).
    pub fn drop_repacked(&mut self) {
        self.repack_isa = None;
        self.repacked = OnceLock::new();
    }

    /// Makes the copies [`Model::repack_for`] asked for, once: each matrix is rewritten and
    /// the mapping's pages of the original dropped from the resident set (read again only if
    /// another tier runs this model). Nothing to do when no repack was asked for or the
    /// copies exist. The CPU executors call this when they are built.
    ///
    /// # Errors
    /// [`Error::Io`] if memory for the copies cannot be mapped (a later call tries again).
    pub fn ensure_repacked(&self) -> Result<()> {
        let Some(isa) = self.repack_isa else {
            return Ok(());
        };
        if self.repacked.get().is_some() {
            return Ok(());
        }
        // A poisoned lock only means another maker panicked; the check below still holds.
        let _held = self.repacking.lock().unwrap_or_else(|p| p.into_inner());
        if self.repacked.get().is_some() {
            return Ok(());
        }
        let mut refs: Vec<TensorRef> = vec![self.output];
        for l in &self.layers {
            refs.extend([l.wq, l.wk, l.wv, l.wo, l.w_gate, l.w_up, l.w_down]);
        }
        // In the order the forward pass reads them, each once.
        let mut seen = std::collections::BTreeSet::new();
        refs.retain(|t| seen.insert(t.start));
        let ws: Vec<WeightMatrix<'_>> = refs.iter().map(|t| self.matrix(t)).collect();
        // Pages of the originals are dropped as their rows are copied, so that the resident
        // set does not hold a model and its copies at once. A tied embedding whose copy is not
        // its ggml rows (Qwen2.5's Q8_0 head in block lanes) is dropped too: its lookups read
        // the mapping, which maps a looked-up row's page in again from the page cache.
        let made = quant::repack_all(isa, &ws, |i, bytes| {
            self.gguf
                .release_range(refs[i].start + bytes.start, bytes.len());
        })?;
        drop(ws);
        let mut map = BTreeMap::new();
        let mut release = Vec::new();
        for (t, r) in refs.iter().zip(made) {
            if let Some(r) = r {
                map.insert(t.start, r);
                // Again, whole: the runs above leave the pages their ends share.
                release.push((t.start, t.len));
            }
        }
        // Published, then the originals' pages dropped whole: from here on every matrix view
        // reads the copies.
        let _ = self.repacked.set(map);
        for (start, len) in release {
            self.gguf.release_range(start, len);
        }
        Ok(())
    }

    fn repacked_of(&self, t: &TensorRef) -> Option<&Repacked> {
        self.repacked.get().and_then(|m| m.get(&t.start))
    }

    /// Bytes held by repacked matrices (0 until [`Model::ensure_repacked`] has made them).
    pub fn repacked_bytes(&self) -> usize {
        self.repacked
            .get()
            .map_or(0, |m| m.values().map(Repacked::len).sum())
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn gguf(&self) -> &Arc<GgufFile> {
        &self.gguf
    }

    /// Bytes of weights read to decode one token (every layer tensor once, the final norm,
    /// the output matrix and one embedding row).
    /// Matrices to be repacked ([`Model::repack_for`]) count with the size of their copy,
    /// the bytes the CPU kernels stream, whether or not the copy is made yet.
    pub fn bytes_per_token(&self) -> u64 {
        let len = |t: &TensorRef| {
            let copy = self
                .repack_isa
                .and_then(|isa| quant::repacked_len(isa, &self.matrix(t)));
            copy.unwrap_or(t.len) as u64
        };
        let mut b = len(&self.output) + self.output_norm.len as u64;
        b += (self.embd.len / self.embd.rows.max(1)) as u64;
        for l in &self.layers {
            b += l.tensors().map(len).sum::<u64>();
        }
        b
    }

    fn bytes(&self, t: &TensorRef) -> &[u8] {
        // Bounds were validated by the GGUF reader when the file was opened.
        &self.gguf.as_bytes()[t.start..t.start + t.len]
    }

    fn matrix(&self, t: &TensorRef) -> WeightMatrix<'_> {
        let w = WeightMatrix::from_parts(t.ty, t.rows, t.cols, self.bytes(t));
        match self.repacked_of(t) {
            Some(r) => w.with_repacked(r),
            None => w,
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
        let v = |t: &Option<TensorRef>| t.as_ref().map(|t| self.f32s(t));
        Some(LayerWeights {
            attn_norm: self.f32s(&l.attn_norm),
            wq: self.matrix(&l.wq),
            wk: self.matrix(&l.wk),
            wv: self.matrix(&l.wv),
            bq: v(&l.bq),
            bk: v(&l.bk),
            bv: v(&l.bv),
            q_norm: v(&l.q_norm),
            k_norm: v(&l.k_norm),
            wo: self.matrix(&l.wo),
            post_attn_norm: v(&l.post_attn_norm),
            ffn_norm: self.f32s(&l.ffn_norm),
            w_gate: self.matrix(&l.w_gate),
            w_up: self.matrix(&l.w_up),
            w_down: self.matrix(&l.w_down),
            post_ffn_norm: v(&l.post_ffn_norm),
        })
    }

    /// RoPE inverse frequencies of the global (full-context) layers, one per rotated pair:
    /// `base^(-2i/d)` divided by the scaling's factor.
    pub fn rope_inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    /// RoPE inverse frequencies layer `layer` uses (local layers have their own base).
    pub fn rope_inv_freq_for(&self, layer: usize) -> &[f32] {
        if self.config.is_swa(layer) {
            &self.inv_freq_swa
        } else {
            &self.inv_freq
        }
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
    pub q_norm: Option<&'a [f32]>,
    pub k_norm: Option<&'a [f32]>,
    pub wo: WeightMatrix<'a>,
    pub post_attn_norm: Option<&'a [f32]>,
    pub ffn_norm: &'a [f32],
    pub w_gate: WeightMatrix<'a>,
    pub w_up: WeightMatrix<'a>,
    pub w_down: WeightMatrix<'a>,
    pub post_ffn_norm: Option<&'a [f32]>,
}
