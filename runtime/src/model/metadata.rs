//! Reading [`ModelConfig`] from GGUF metadata (keys as written by llama.cpp's converter,
//! `{arch}.*`): the common keys here, the architecture-specific part delegated to the family
//! of [`super::arch`].
//!
//! Every key that would change the mathematics of the forward pass but is not implemented is
//! refused here, at load, naming the key and its value: a file is never run with a silently
//! different computation.

use super::arch;
use super::config::{FfnAct, ModelConfig, RopeLayout, RopeScaling};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// Metadata suffixes (after `{arch}.`) that change the mathematics, are read by no family
/// here, and are refused when present with a value other than the neutral one (`None`:
/// refused whenever present).
const UNIMPLEMENTED: &[(&str, Option<f64>)] = &[
    ("attn_logit_softcapping", Some(0.0)),
    ("final_logit_softcapping", Some(0.0)),
    ("attention.sliding_window", None),
    ("attention.clamp_kqv", None),
    ("attention.scale", None),
    ("attention.q_lora_rank", None),
    ("attention.kv_lora_rank", None),
    ("attention.layernorm_epsilon", None),
    ("logit_scale", Some(1.0)),
    ("embedding_scale", Some(1.0)),
    ("residual_scale", Some(1.0)),
    ("expert_count", Some(0.0)),
    ("rope.dimension_sections", None),
    ("rope.scaling.attn_factor", Some(1.0)),
    ("rope.scaling.yarn_log_multiplier", None),
    ("rope.scaling.yarn_beta_fast", None),
    ("rope.scaling.yarn_beta_slow", None),
    ("rope.scaling.yarn_ext_factor", None),
    ("use_parallel_residual", Some(0.0)),
    ("swin_norm", Some(0.0)),
];

fn value_text(v: &crate::gguf::Value) -> String {
    match v.as_str() {
        Some(s) => format!("`{s}`"),
        None => format!("{v}"),
    }
}

fn numeric(v: &crate::gguf::Value) -> Option<f64> {
    match v {
        crate::gguf::Value::Bool(b) => Some(*b as u8 as f64),
        _ => v.as_float().or_else(|| v.as_integer().map(|i| i as f64)),
    }
}

/// Refuses the keys of [`UNIMPLEMENTED`] present in `g` under `{arch}.`, except the
/// `consumed` ones a family implements.
fn refuse_unimplemented(g: &GgufFile, arch: &str, consumed: &[&str]) -> Result<()> {
    for (suffix, neutral) in UNIMPLEMENTED {
        if consumed.contains(suffix) {
            continue;
        }
        let key = format!("{arch}.{suffix}");
        if let Some(v) = g.get(&key) {
            let harmless = match (neutral, numeric(v)) {
                (Some(n), Some(x)) => x == *n,
                _ => false,
            };
            if !harmless {
                return Err(Error::Metadata {
                    key,
                    reason: format!(
                        "value {} changes the computation in a way this runtime does not \
                         implement for `{arch}`; refusing the model",
                        value_text(v)
                    ),
                });
            }
        }
    }
    if let Some(v) = g.get(&format!("{arch}.attention.causal"))
        && numeric(v) == Some(0.0)
    {
        return Err(Error::Metadata {
            key: format!("{arch}.attention.causal"),
            reason: "non-causal attention is not implemented".into(),
        });
    }
    Ok(())
}

/// Reads `{arch}.rope.scaling.*` and the presence of `rope_freqs.weight`.
fn rope_scaling(g: &GgufFile, arch: &str) -> Result<RopeScaling> {
    let has_freqs = g.tensor("rope_freqs.weight").is_ok();
    let key = format!("{arch}.rope.scaling.type");
    let ty = match g.get(&key) {
        Some(_) => Some(g.get_str(&key)?),
        None => None,
    };
    let factor_key = format!("{arch}.rope.scaling.factor");
    let factor = match g.get(&factor_key) {
        Some(_) => Some(g.get_f32(&factor_key)?),
        None => None,
    };
    let s = match (ty, has_freqs) {
        (Some("llama3"), true) | (None, true) => RopeScaling::FreqFactors,
        (Some("llama3"), false) => {
            return Err(Error::Metadata {
                key,
                reason: "value `llama3` needs the per-dimension factors of tensor \
                         `rope_freqs.weight`, which the file lacks"
                    .into(),
            });
        }
        (Some("none"), false) | (None, false) => RopeScaling::None,
        (Some("linear"), false) => match factor {
            Some(f) if f.is_finite() && f > 0.0 => {
                if f == 1.0 {
                    RopeScaling::None
                } else {
                    RopeScaling::Linear { factor: f }
                }
            }
            _ => {
                return Err(Error::Metadata {
                    key: factor_key,
                    reason: format!("linear RoPE scaling needs a positive factor, got {factor:?}"),
                });
            }
        },
        (Some(other), _) => {
            return Err(Error::Metadata {
                key,
                reason: format!(
                    "RoPE scaling type `{other}` is not implemented (supported: none, linear, \
                     llama3 with rope_freqs.weight); refusing the model"
                ),
            });
        }
    };
    Ok(s)
}

impl ModelConfig {
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let arch = g.architecture()?.to_string();
        let family = arch::family(&arch).ok_or_else(|| Error::UnsupportedArch(arch.clone()))?;
        refuse_unimplemented(g, &arch, family.consumed_keys())?;
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
            || (g.get(&k("attention.key_length")).is_none() && !n_embd.is_multiple_of(n_heads))
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
        if g.get(&k("attention.value_length")).is_some() {
            let vl = g.get_u32(&k("attention.value_length"))? as usize;
            if vl != head_dim {
                return Err(Error::Metadata {
                    key: k("attention.value_length"),
                    reason: format!(
                        "value heads of {vl} differ from key heads of {head_dim}; not implemented"
                    ),
                });
            }
        }
        let rope_dims = match g.get(&k("rope.dimension_count")) {
            Some(_) => g.get_u32(&k("rope.dimension_count"))? as usize,
            None => head_dim,
        };
        if rope_dims > head_dim || rope_dims % 2 != 0 || head_dim == 0 {
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
        let n_layers = g.get_u32(&k("block_count"))? as usize;
        let mut cfg = ModelConfig {
            n_layers,
            n_embd,
            n_ff: g.get_u32(&k("feed_forward_length"))? as usize,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dims,
            rope_base,
            rope_layout: RopeLayout::Normal,
            rope_scaling: rope_scaling(g, &arch)?,
            rms_eps: g.get_f32(&k("attention.layer_norm_rms_epsilon"))?,
            context_length: g.get_u32(&k("context_length"))? as usize,
            vocab_size,
            tied_output,
            qkv_bias,
            embd_scale: None,
            qk_norm: false,
            post_norms: false,
            ffn_act: FfnAct::Silu,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            sliding_window: 0,
            swa_layers: vec![false; n_layers],
            rope_base_swa: rope_base,
            arch,
        };
        family.configure(g, &mut cfg)?;
        if cfg.n_layers == 0 || cfg.n_ff == 0 || cfg.vocab_size == 0 {
            return Err(Error::Metadata {
                key: k("block_count"),
                reason: format!("degenerate model shape {cfg:?}"),
            });
        }
        Ok(cfg)
    }
}
