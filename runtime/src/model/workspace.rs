//! Scratch buffers of the forward pass, allocated once per session (or batch decoder) so
//! that decoding a token allocates nothing.

use super::config::ModelConfig;
use crate::quant::QuantizedActs;

/// Where one row of a forward call belongs: its sequence (index into the KV set), absolute
/// position and KV slot.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RowInfo {
    pub(super) seq: usize,
    pub(super) pos: u32,
    /// Slot in the full-context ring.
    pub(super) slot: usize,
    /// Slot in the sliding-window ring of the local layers (when the model has them).
    pub(super) slot_swa: usize,
}

/// Query heads per tiled-attention task (tokens × heads of one KV group).
pub(super) const TILE_QUERIES: usize = 12;

/// Scratch buffers, allocated once per session (or batch decoder).
pub(super) struct Workspace {
    pub(super) x: Vec<f32>,
    pub(super) q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) attn: Vec<f32>,
    pub(super) gate: Vec<f32>,
    pub(super) up: Vec<f32>,
    pub(super) logits: Vec<f32>,
    pub(super) acts: QuantizedActs,
    pub(super) acts2: QuantizedActs,
    /// Per-worker attention scratch, `scratch_stride` floats each.
    pub(super) scratch: Vec<f32>,
    pub(super) scratch_stride: usize,
    /// Slots of the widest KV ring served, rounded up to 16.
    pub(super) ldk: usize,
    /// Rows of score scratch per worker.
    pub(super) sc_rows: usize,
    /// Rotations of each row for the global layers, then for the local ones.
    pub(super) cos: Vec<f32>,
    pub(super) sin: Vec<f32>,
    pub(super) cos_swa: Vec<f32>,
    pub(super) sin_swa: Vec<f32>,
    /// Attention or FFN output awaiting its post-norm (post-norm families only).
    pub(super) post: Vec<f32>,
    pub(super) rows: Vec<RowInfo>,
}

impl Workspace {
    pub(super) fn new(
        c: &ModelConfig,
        rows: usize,
        cap: usize,
        threads: usize,
        logit_rows: usize,
    ) -> Self {
        let hd = c.head_dim;
        let group = c.n_heads / c.n_kv_heads;
        let ldk = cap.next_multiple_of(16);
        let sc_rows = TILE_QUERIES.max(group);
        // Scores, then query and output staging.
        let scratch_stride = (sc_rows * ldk + 2 * sc_rows * hd).next_multiple_of(16);
        let swa_rows = if c.n_swa_layers() > 0 { rows } else { 0 };
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
            cos_swa: vec![0.0; swa_rows * c.rope_dims / 2],
            sin_swa: vec![0.0; swa_rows * c.rope_dims / 2],
            post: vec![0.0; if c.post_norms { rows * c.n_embd } else { 0 }],
            rows: vec![RowInfo::default(); rows],
        }
    }
}
