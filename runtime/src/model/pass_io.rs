//! What one forward pass reads and reports outside its own workspace: the KV caches it reads
//! and writes ([`KvAccess`], one ring per sequence, implemented by [`super::forward`] for a
//! single sequence and by [`super::batch`] for several) and the work [`Counters`] it adds to.
//! Shared by the layers, the pass and the sequence states, so none of them imports another
//! for these.

use crate::kv::KvCache;

/// Counters a harness records per run.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Counters {
    pub tokens_prefilled: u64,
    pub tokens_decoded: u64,
    pub forward_calls: u64,
    pub matmuls: u64,
    pub weight_bytes_read: u64,
}

/// The KV caches one forward call reads and writes: a single ring for a prefill chunk or a
/// decode step, one ring per row for a batched decode.
pub(super) trait KvAccess: Sync {
    /// The ring of sequence `seq` for the global (`local = false`) or sliding-window layers.
    fn kv(&self, seq: usize, local: bool) -> &KvCache;
    fn kv_mut(&mut self, seq: usize, local: bool) -> &mut KvCache;
}
