//! `gemma3` (Gemma 3 text models), as llama.cpp's converter writes them:
//!
//! - token embeddings scaled by sqrt(n_embd); output tied to the embedding unless the file
//!   has `output.weight`;
//! - per-head RMSNorm of Q and K before RoPE (NeoX layout); head size from `key_length`;
//! - RMSNorm of the attention output and of the FFN output before each residual add;
//! - GeGLU feed-forward (GELU, tanh form, on the gate);
//! - sliding-window attention of `attention.sliding_window` positions on five layers of
//!   six (layer `i` is global when `i % 6 == 5`), local layers with RoPE base 10,000 and no
//!   scaling, global layers with `rope.freq_base` and the file's scaling;
//! - query scale 1/sqrt(head size) (the 27B model, 62 layers, uses 1/sqrt(n_embd / n_head):
//!   its `query_pre_attn_scalar`, which the file does not carry).
//!
//! The norm weights in the file already include Gemma's `1 +` offset (the converter adds it;
//! e.g. a zero-initialised post-attention gain is stored as 0.0 and the others average
//! well above 1), so they multiply as plain RMSNorm gains.

use super::Family;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::model::config::{FfnAct, ModelConfig, RopeLayout};

pub(super) struct Gemma3;

/// Layers per group: `SWA_PATTERN - 1` local layers, then one global.
const SWA_PATTERN: usize = 6;
/// RoPE base of the local layers (fixed by the architecture, not in the file).
const ROPE_BASE_LOCAL: f32 = 10_000.0;

impl Family for Gemma3 {
    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn consumed_keys(&self) -> &'static [&'static str] {
        &["attention.sliding_window"]
    }

    fn configure(&self, g: &GgufFile, cfg: &mut ModelConfig) -> Result<()> {
        cfg.rope_layout = RopeLayout::Neox;
        cfg.embd_scale = Some((cfg.n_embd as f32).sqrt());
        cfg.qk_norm = true;
        cfg.post_norms = true;
        cfg.ffn_act = FfnAct::GeluTanh;
        let scale_dim = if cfg.n_layers == 62 {
            cfg.n_embd / cfg.n_heads
        } else {
            cfg.head_dim
        };
        cfg.attn_scale = 1.0 / (scale_dim as f32).sqrt();
        let key = "gemma3.attention.sliding_window";
        let window = match g.get(key) {
            Some(_) => g.get_u32(key)? as usize,
            None => 0,
        };
        if window > 0 {
            cfg.sliding_window = window;
            cfg.swa_layers = (0..cfg.n_layers)
                .map(|i| i % SWA_PATTERN < SWA_PATTERN - 1)
                .collect();
            cfg.rope_base_swa = ROPE_BASE_LOCAL;
        }
        Ok(())
    }
}
