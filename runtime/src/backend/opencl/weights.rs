//! Weight import: one read-only device buffer per tensor, in ggml's own block layout (the
//! kernels dequantize inside the matrix products; nothing is expanded).
//!
//! When every tensor of the mapping starts on a page boundary (a file rewritten by
//! `pocketperf model align --to 4096`), each buffer wraps the mapping itself with
//! `CL_MEM_USE_HOST_PTR`: no copy, and on unified-memory devices no second resident copy.
//! Otherwise each tensor is uploaded once at load (`CL_MEM_COPY_HOST_PTR`).

use crate::GgmlType;
use crate::error::{Error, Result};
use crate::gguf::{GgufFile, TensorInfo};
use crate::model::ModelConfig;
use opencl3::context::Context;
use opencl3::memory::{Buffer, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY, CL_MEM_USE_HOST_PTR};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// How the weights reached the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WeightImport {
    /// `CL_MEM_USE_HOST_PTR` over the page-aligned mapping.
    ZeroCopy,
    /// One copy per tensor at load.
    Upload,
}

impl WeightImport {
    pub fn name(self) -> &'static str {
        match self {
            WeightImport::ZeroCopy => "zero-copy",
            WeightImport::Upload => "upload",
        }
    }
}

/// A tensor on the device.
pub(crate) struct DevTensor {
    pub buf: Buffer<u8>,
    pub ty: GgmlType,
}

pub(crate) struct LayerWeights {
    pub attn_norm: usize,
    pub wq: usize,
    pub wk: usize,
    pub wv: usize,
    pub bias: Option<[usize; 3]>,
    pub wo: usize,
    pub ffn_norm: usize,
    pub w_gate: usize,
    pub w_up: usize,
    pub w_down: usize,
    /// Per-head gains of Q and K (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: Option<[usize; 2]>,
    /// Gains of the post-attention and post-FFN norms.
    pub post_norms: Option<[usize; 2]>,
}

/// Every tensor the forward pass reads, as indices into `tensors`.
pub(crate) struct Weights {
    pub tensors: Vec<DevTensor>,
    pub embd: usize,
    pub output_norm: usize,
    pub output: usize,
    pub layers: Vec<LayerWeights>,
    pub import: WeightImport,
    /// Bytes of weights on the device (each tensor once).
    pub bytes: u64,
    /// Bytes copied host→device at load (0 for zero-copy).
    pub uploaded: u64,
    /// Keeps the mapping alive for as long as buffers point into it.
    _gguf: Arc<GgufFile>,
}

impl Weights {
    pub fn get(&self, i: usize) -> &DevTensor {
        &self.tensors[i]
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it returns -1 on error, handled below.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

pub(super) fn is_matrix_type(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q8_0
            | GgmlType::Q4K
            | GgmlType::Q6K
    )
}

/// The tensor names the forward pass reads, in load order (same names and checks as
/// [`crate::model::Model`]).
fn wanted(c: &ModelConfig) -> Vec<(String, bool)> {
    let mut v = vec![("token_embd.weight".to_string(), true)];
    for i in 0..c.n_layers {
        let mut push = |s: &str, m: bool| v.push((format!("blk.{i}.{s}"), m));
        push("attn_norm.weight", false);
        push("attn_q.weight", true);
        push("attn_k.weight", true);
        push("attn_v.weight", true);
        if c.qkv_bias {
            push("attn_q.bias", false);
            push("attn_k.bias", false);
            push("attn_v.bias", false);
        }
        if c.qk_norm {
            push("attn_q_norm.weight", false);
            push("attn_k_norm.weight", false);
        }
        push("attn_output.weight", true);
        if c.post_norms {
            push("post_attention_norm.weight", false);
            push("post_ffw_norm.weight", false);
        }
        push("ffn_norm.weight", false);
        push("ffn_gate.weight", true);
        push("ffn_up.weight", true);
        push("ffn_down.weight", true);
    }
    v.push(("output_norm.weight".into(), false));
    if !c.tied_output {
        v.push(("output.weight".into(), true));
    }
    v
}

/// Whether every tensor to import starts at an address aligned to `align`.
pub(crate) fn all_aligned(g: &GgufFile, names: &[&TensorInfo], align: usize) -> bool {
    names
        .iter()
        .all(|t| (g.tensor_data(t).as_ptr() as usize).is_multiple_of(align))
}

/// Imports the weights into `ctx`. `base_align` is the device's `CL_DEVICE_MEM_BASE_ADDR_ALIGN`.
pub(crate) fn import(
    ctx: &Context,
    gguf: &Arc<GgufFile>,
    c: &ModelConfig,
    base_align: usize,
) -> Result<Weights> {
    let g = &**gguf;
    let list = wanted(c);
    let infos = list
        .iter()
        .map(|(n, _)| g.tensor(n))
        .collect::<Result<Vec<_>>>()?;
    for ((name, matrix), t) in list.iter().zip(&infos) {
        let ok = if *matrix {
            is_matrix_type(t.ty)
        } else {
            t.ty == GgmlType::F32
        };
        if !ok {
            return Err(Error::UnsupportedType {
                name: name.clone(),
                ty: t.ty.name().into(),
            });
        }
        if g.tensor_data(t).len() as u64 != t.n_bytes || t.n_bytes == 0 {
            return Err(Error::Tensor {
                name: name.clone(),
                reason: "data lies outside the file".into(),
            });
        }
    }
    let align = page_size().max(base_align);
    let import = if all_aligned(g, &infos, align) {
        WeightImport::ZeroCopy
    } else {
        WeightImport::Upload
    };
    let mut tensors = Vec::with_capacity(infos.len());
    let mut index = HashMap::new();
    let (mut bytes, mut uploaded) = (0u64, 0u64);
    for ((name, _), t) in list.iter().zip(&infos) {
        let data = g.tensor_data(t);
        let flags = match import {
            WeightImport::ZeroCopy => CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR,
            WeightImport::Upload => CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
        };
        // SAFETY: `data` is a live slice of the mapping of `len` bytes. With COPY_HOST_PTR
        // the driver copies it before returning. With USE_HOST_PTR the buffer keeps pointing
        // at it: the buffer is READ_ONLY (no kernel writes it), never mapped for writing, and
        // `Weights` holds the `Arc<GgufFile>` so the mapping outlives every buffer.
        let buf =
            unsafe { Buffer::<u8>::create(ctx, flags, data.len(), data.as_ptr() as *mut c_void) }
                .map_err(|e| {
                Error::OpenCl(format!(
                    "importing tensor `{name}` ({} bytes): {e}",
                    data.len()
                ))
            })?;
        bytes += data.len() as u64;
        if import == WeightImport::Upload {
            uploaded += data.len() as u64;
        }
        index.insert(name.clone(), tensors.len());
        tensors.push(DevTensor { buf, ty: t.ty });
    }
    let at = |n: &str| -> Result<usize> {
        index.get(n).copied().ok_or_else(|| Error::Tensor {
            name: n.into(),
            reason: "missing".into(),
        })
    };
    let mut layers = Vec::with_capacity(c.n_layers);
    for i in 0..c.n_layers {
        let n = |s: &str| format!("blk.{i}.{s}");
        let bias = if c.qkv_bias {
            Some([
                at(&n("attn_q.bias"))?,
                at(&n("attn_k.bias"))?,
                at(&n("attn_v.bias"))?,
            ])
        } else {
            None
        };
        layers.push(LayerWeights {
            attn_norm: at(&n("attn_norm.weight"))?,
            wq: at(&n("attn_q.weight"))?,
            wk: at(&n("attn_k.weight"))?,
            wv: at(&n("attn_v.weight"))?,
            bias,
            wo: at(&n("attn_output.weight"))?,
            ffn_norm: at(&n("ffn_norm.weight"))?,
            w_gate: at(&n("ffn_gate.weight"))?,
            w_up: at(&n("ffn_up.weight"))?,
            w_down: at(&n("ffn_down.weight"))?,
            qk_norm: if c.qk_norm {
                Some([at(&n("attn_q_norm.weight"))?, at(&n("attn_k_norm.weight"))?])
            } else {
                None
            },
            post_norms: if c.post_norms {
                Some([
                    at(&n("post_attention_norm.weight"))?,
                    at(&n("post_ffw_norm.weight"))?,
                ])
            } else {
                None
            },
        });
    }
    let embd = at("token_embd.weight")?;
    Ok(Weights {
        embd,
        output_norm: at("output_norm.weight")?,
        output: if c.tied_output {
            embd
        } else {
            at("output.weight")?
        },
        layers,
        import,
        bytes,
        uploaded,
        tensors,
        _gguf: gguf.clone(),
    })
}
