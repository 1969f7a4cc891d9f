//! Model hyper-parameters ([`ModelConfig`]) and the quantities derived from them. They are
//! read from GGUF metadata by [`super::metadata`]; each family of [`super::arch`] adjusts
//! them.

/// Rotary embedding layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum RopeLayout {
    /// Rotates adjacent pairs (x0, x1), (x2, x3)… (llama.cpp `LLAMA_ROPE_TYPE_NORM`).
    Normal,
    /// Rotates (x_i, x_{i+d/2}) (GPT-NeoX; qwen2, gemma3).
    Neox,
}

/// The gated feed-forward activation applied to the gate before it multiplies `up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum FfnAct {
    /// SiLU (SwiGLU).
    Silu,
    /// GELU in its tanh approximation (GeGLU).
    GeluTanh,
}

/// How rotary frequencies are rescaled for long contexts.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (`rope.scaling.type = linear`).
    Linear {
        factor: f32,
    },
    /// Per-dimension divisors of the frequencies from the `rope_freqs.weight` tensor
    /// (Llama 3.x; `rope.scaling.type = llama3` or the tensor alone).
    FreqFactors,
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
    pub rope_scaling: RopeScaling,
    pub rms_eps: f32,
    pub context_length: usize,
    pub vocab_size: usize,
    pub tied_output: bool,
    pub qkv_bias: bool,
    /// Token embeddings are multiplied by this before the first layer (gemma: sqrt(n_embd)).
    pub embd_scale: Option<f32>,
    /// Per-head RMSNorm of Q and K before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// RMSNorm of the attention and FFN outputs before each residual add
    /// (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    pub ffn_act: FfnAct,
    /// Factor applied to the query·key products.
    pub attn_scale: f32,
    /// Sliding-window length of local layers (0: every layer sees the whole context).
    pub sliding_window: usize,
    /// Per layer: whether it is a local (sliding-window) layer.
    pub swa_layers: Vec<bool>,
    /// RoPE base of the local layers (their scaling is always none).
    pub rope_base_swa: f32,
}

impl ModelConfig {
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Whether layer `i` attends only to the last [`Self::sliding_window`] positions.
    pub fn is_swa(&self, layer: usize) -> bool {
        self.swa_layers.get(layer).copied().unwrap_or(false)
    }

    /// Number of local (sliding-window) layers.
    pub fn n_swa_layers(&self) -> usize {
        self.swa_layers.iter().filter(|&&s| s).count()
    }

    /// KV bytes (keys and values stored as `ty`) one decode step reads when `n_past` tokens
    /// precede it: global layers read every cached position, local layers at most the
    /// window.
    pub fn kv_bytes_read(&self, n_past: usize, ty: crate::kv::KvType) -> u64 {
        // kv_dim is a tensor dimension the loader bounds: its bytes cannot overflow (the
        // map_or saturates instead of panicking).
        let per_slot_layer = 2 * ty.bytes_for(self.kv_dim()).map_or(u64::MAX, |b| b as u64);
        let seen = n_past as u64 + 1;
        let local = self.n_swa_layers() as u64;
        let global = self.n_layers as u64 - local;
        let window = if self.sliding_window == 0 {
            seen
        } else {
            seen.min(self.sliding_window as u64)
        };
        per_slot_layer * (global * seen + local * window)
    }
}
