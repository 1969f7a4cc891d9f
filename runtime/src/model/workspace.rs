//! Scratch buffers of the forward pass, allocated once per session (or batch decoder) so
//! that decoding a token allocates nothing.

use super::attention::{self, CHUNK};
use super::config::ModelConfig;
use crate::quant::QuantizedActs;
use crate::quant::attn::QueryQ8Buf;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

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
    /// Whether this row may share an attention tile with the adjacent rows of its sequence
    /// (a prefill chunk whose ring holds its slots in position order), per ring: full
    /// context, sliding window.
    pub(super) tile: (bool, bool),
}

/// Rows of one attention block: `start..end` of the pass, one sequence, and whether they
/// share a tile (their ring's slots are in position order).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Block {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) tiled: bool,
}

/// Query heads per tiled-attention task (tokens × heads of one KV group).
pub(super) const TILE_QUERIES: usize = 12;

/// Most rows of a forward call whose attention is split into KV chunks shared out to the
/// workers (decode, and batched decode of a few sequences); more rows keep every worker busy
/// with whole rows.
pub(super) const SPLIT_ROWS: usize = 8;

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
    /// Per-worker query heads of one attention task, quantized for a Q8_0 cache.
    pub(super) query_q8: Vec<Mutex<QueryQ8Buf>>,
    /// Query heads of one attention task at most.
    pub(super) sc_rows: usize,
    /// Rows whose attention may be split into chunks (`SPLIT_ROWS` at most).
    pub(super) split_rows: usize,
    /// Chunks of the widest KV ring served.
    pub(super) max_chunks: usize,
    /// Partial softmax states of split attention: per (row, KV head, chunk) one state of
    /// a KV group's query heads.
    pub(super) partials: Vec<f32>,
    /// Chunks finished per (row, KV head) of split attention.
    pub(super) done: Vec<AtomicUsize>,
    /// Rotations of each row for the global layers, then for the local ones.
    pub(super) cos: Vec<f32>,
    pub(super) sin: Vec<f32>,
    pub(super) cos_swa: Vec<f32>,
    pub(super) sin_swa: Vec<f32>,
    /// Attention or FFN output awaiting its post-norm (post-norm families only).
    pub(super) post: Vec<f32>,
    pub(super) rows: Vec<RowInfo>,
    /// The attention blocks of the current layer (at most one per row).
    pub(super) blocks: Vec<Block>,
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
        let sc_rows = TILE_QUERIES.max(group);
        // A block of scores and two softmax states, then query and output staging.
        let scratch_stride =
            (attention::scratch_len(sc_rows, hd) + 2 * sc_rows * hd).next_multiple_of(16);
        let split_rows = rows.min(SPLIT_ROWS);
        let max_chunks = cap.div_ceil(CHUNK).max(1);
        let units = split_rows * c.n_kv_heads;
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
            query_q8: (0..threads)
                .map(|_| Mutex::new(QueryQ8Buf::with_capacity(sc_rows * hd)))
                .collect(),
            sc_rows,
            split_rows,
            max_chunks,
            partials: vec![0.0; units * max_chunks * attention::state_len(group, hd)],
            done: (0..units).map(|_| AtomicUsize::new(0)).collect(),
            cos: vec![0.0; rows * c.rope_dims / 2],
            sin: vec![0.0; rows * c.rope_dims / 2],
            cos_swa: vec![0.0; swa_rows * c.rope_dims / 2],
            sin_swa: vec![0.0; swa_rows * c.rope_dims / 2],
            post: vec![0.0; if c.post_norms { rows * c.n_embd } else { 0 }],
            rows: vec![RowInfo::default(); rows],
            blocks: vec![Block::default(); rows],
        }
    }
}
