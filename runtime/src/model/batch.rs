//! Batched decode: one token for each of several sequences in one pass over the weights.

use super::forward::{Forward, check_tokens};
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
            model.config(),
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
        let c = model.config();
        for i in 0..b {
            let f = seqs.seq(i);
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
            if !f.kv.global.can_take(1) {
                return Err(Error::ContextOverflow {
                    tokens: f.kv.global.used() + 1,
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
            let (slot, slot_swa) = f.kv.claim(pos)?;
            self.ws.rows[i] = RowInfo {
                seq: i,
                pos,
                slot,
                slot_swa,
            };
        }
        pass.layers(
            &mut self.ws,
            b,
            &mut SeqKv(seqs),
            (false, false),
            &mut self.counters,
        );
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
