//! Batched passes over several sequences, each weight read once per pass: one token for each
//! sequence (batched decode), or mixed passes in which some sequences take a chunk of their
//! prompt and the others one decode token (continuous batching with chunked prefill).

use super::forward::{Forward, check_tokens, chunk_limit};
use super::pass::Pass;
use super::pass_io::{Counters, KvAccess};
use super::weights::Model;
use super::workspace::{RowInfo, Workspace};
use crate::error::{Error, Result};
use crate::kv::KvCache;
use crate::pool::ThreadPool;
use crate::quant::Isa;
use std::sync::Arc;

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
    fn kv(&self, seq: usize, local: bool) -> &KvCache {
        self.0.seq(seq).kv.kv(0, local)
    }
    fn kv_mut(&mut self, seq: usize, local: bool) -> &mut KvCache {
        self.0.seq_mut(seq).kv.kv_mut(0, local)
    }
}

/// Runs several sequences through the model together (the Offline scenario's batch): every
/// weight matrix is streamed once per pass for all of them, while each sequence keeps its own
/// [`Forward`] state and KV ring. [`BatchForward::decode`] appends one token to each;
/// [`BatchForward::step`] appends a run of tokens to each (a chunk of a prompt beside the
/// decode tokens of the others), with causal attention inside a run over its own sequence's
/// KV. The logits of sequence `i` are row `i` of the result, bit-identical to what
/// [`Forward::forward`] gives that sequence alone on the same tier.
pub struct BatchForward {
    ws: Workspace,
    pool: Arc<ThreadPool>,
    isa: Isa,
    max_batch: usize,
    max_rows: usize,
    max_seq_len: usize,
    pub counters: Counters,
}

impl BatchForward {
    /// A decoder for up to `max_batch` sequences whose KV rings hold at most `max_seq_len`
    /// slots, one token per sequence and pass.
    pub fn new(
        model: &Model,
        max_batch: usize,
        max_seq_len: usize,
        pool: Arc<ThreadPool>,
        isa: Isa,
    ) -> Result<Self> {
        Self::with_rows(model, max_batch, max_batch, max_seq_len, pool, isa)
    }

    /// A decoder for up to `max_batch` sequences and `max_rows` tokens in all per pass
    /// (`max_rows >= max_batch`; the excess is room for prompt chunks), whose KV rings hold
    /// at most `max_seq_len` slots. Its workspace is allocated here, once.
    pub fn with_rows(
        model: &Model,
        max_batch: usize,
        max_rows: usize,
        max_seq_len: usize,
        pool: Arc<ThreadPool>,
        isa: Isa,
    ) -> Result<Self> {
        if max_batch == 0 || max_seq_len == 0 || max_rows < max_batch {
            return Err(Error::InvalidArgument {
                what: "batch decoder".into(),
                reason: format!(
                    "max_batch {max_batch} and max_seq_len {max_seq_len} must be at least 1, \
                     max_rows {max_rows} at least max_batch"
                ),
            });
        }
        model.ensure_repacked()?;
        let ws = Workspace::new(
            model.config(),
            max_rows,
            max_seq_len,
            pool.n_threads(),
            max_batch,
        );
        Ok(BatchForward {
            ws,
            pool,
            isa,
            max_batch,
            max_rows,
            max_seq_len,
            counters: Counters::default(),
        })
    }

    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Tokens one pass carries at most, over all its sequences.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// The most tokens [`BatchForward::step`] may append to `seq` in one pass (see
    /// `chunk_limit`): its session's `max_batch`, and on a sliding-policy ring what it
    /// takes before evicting.
    pub fn chunk_limit(seq: &Forward) -> usize {
        chunk_limit(seq)
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
        self.pass(model, seqs, tokens, None)
    }

    /// One mixed pass: sequence `i` of `seqs` takes the next `counts[i]` tokens of `tokens`
    /// (in sequence order; `counts[i] >= 1`, at most [`BatchForward::chunk_limit`] of it)
    /// and the result holds, in row `i`, the logits after its last one (`counts.len() ×
    /// vocab`). A sequence given one token decodes it; a sequence given several prefills
    /// them as one chunk, each attending causally to its own sequence's KV and to the
    /// chunk's earlier tokens. Nothing is changed when an argument is refused.
    pub fn step<S: SeqSet + ?Sized>(
        &mut self,
        model: &Model,
        seqs: &mut S,
        tokens: &[u32],
        counts: &[usize],
    ) -> Result<&[f32]> {
        self.pass(model, seqs, tokens, Some(counts))
    }

    /// [`BatchForward::step`] with `counts` (`None`: one token per sequence).
    fn pass<S: SeqSet + ?Sized>(
        &mut self,
        model: &Model,
        seqs: &mut S,
        tokens: &[u32],
        counts: Option<&[usize]>,
    ) -> Result<&[f32]> {
        let b = counts.map_or(tokens.len(), <[usize]>::len);
        let count = |i: usize| counts.map_or(1, |c| c[i]);
        if b == 0 || b > self.max_batch || b != seqs.n_seqs() {
            return Err(Error::InvalidArgument {
                what: "batch".into(),
                reason: format!(
                    "{b} token runs for {} sequences (batch size 1..={})",
                    seqs.n_seqs(),
                    self.max_batch
                ),
            });
        }
        let n = tokens.len();
        if let Some(c) = counts
            && (c.contains(&0) || c.iter().sum::<usize>() != n || n > self.max_rows)
        {
            return Err(Error::InvalidArgument {
                what: "batch".into(),
                reason: format!(
                    "{n} tokens for runs of {c:?} (each at least 1, at most {} in all)",
                    self.max_rows
                ),
            });
        }
        check_tokens(model, tokens)?;
        let c = model.config();
        for i in 0..b {
            let f = seqs.seq(i);
            let k = count(i);
            let sh = f.kv.global.shape();
            if !f.kv.fits(model, self.max_seq_len) {
                return Err(Error::InvalidArgument {
                    what: format!("batch sequence {i}"),
                    reason: format!(
                        "its KV ring {sh:?} does not fit this model and decoder (at most {} slots)",
                        self.max_seq_len
                    ),
                });
            }
            if !f.kv.global.can_take(k) {
                return Err(Error::ContextOverflow {
                    tokens: f.kv.global.used() + k,
                    ctx: sh.capacity,
                });
            }
            if k > chunk_limit(f) {
                return Err(Error::InvalidArgument {
                    what: format!("batch sequence {i}"),
                    reason: format!(
                        "a run of {k} tokens is over its limit of {} per pass",
                        chunk_limit(f)
                    ),
                });
            }
        }
        let pass = Pass {
            model,
            pool: &self.pool,
            isa: self.isa,
        };
        pass.embed(&mut self.ws, tokens);
        let mut row = 0;
        for i in 0..b {
            let k = count(i);
            let f = seqs.seq_mut(i);
            for j in 0..k {
                let pos = f.n_past + j as u32;
                let (slot, slot_swa) = f.kv.claim(pos)?;
                self.ws.rows[row + j] = RowInfo {
                    seq: i,
                    pos,
                    slot,
                    slot_swa,
                    tile: (false, false),
                };
            }
            if k > 1 {
                // Shared-key attention needs slots in position order (true until a ring wraps).
                let tile = f.kv.tiled(k);
                for r in &mut self.ws.rows[row..row + k] {
                    r.tile = tile;
                }
            }
            row += k;
        }
        pass.layers(&mut self.ws, n, &mut SeqKv(seqs), &mut self.counters);
        // The last row of each sequence's run becomes row i (i <= its index, rows in order).
        let e = c.n_embd;
        let mut last = 0;
        for i in 0..b {
            last += count(i);
            if last - 1 != i {
                self.ws.x.copy_within((last - 1) * e..last * e, i * e);
            }
        }
        pass.head(&mut self.ws, 0, b, 0, &mut self.counters);
        for i in 0..b {
            let k = count(i);
            let f = seqs.seq_mut(i);
            f.n_past += k as u32;
            if k == 1 {
                f.counters.tokens_decoded += 1;
                self.counters.tokens_decoded += 1;
            } else {
                f.counters.tokens_prefilled += k as u64;
                self.counters.tokens_prefilled += k as u64;
            }
            f.counters.forward_calls += 1;
        }
        self.counters.forward_calls += 1;
        Ok(&self.ws.logits[..b * c.vocab_size])
    }
}
