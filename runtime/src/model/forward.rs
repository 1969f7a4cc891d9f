//! The forward-pass state of one sequence ([`Forward`]): its KV rings (one of full context
//! for the global layers, one window-sized ring for a family's sliding-window layers),
//! scratch and thread pool; prefill in chunks and token-by-token decode.

use super::pass::Pass;
use super::pass_io::{Counters, KvAccess};
use super::weights::Model;
use super::workspace::{RowInfo, Workspace};
use crate::error::{Error, Result};
use crate::kv::{KvCache, KvPolicy, KvShape, KvType};
use crate::pool::ThreadPool;
use crate::quant::Isa;
use std::sync::Arc;

/// Settings of one inference session.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Token slots of the KV ring (`0` = the model's context length).
    pub max_seq_len: usize,
    pub kv_policy: KvPolicy,
    /// How K and V are stored (f16, or Q8_0 at about half the bytes).
    pub kv_type: KvType,
    /// Largest number of tokens processed in one forward call (prefill chunk).
    pub max_batch: usize,
    /// Keep the logits of every position of a batch (perplexity), not only the last.
    pub logits_all: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            max_seq_len: 2048,
            kv_policy: KvPolicy::Error,
            kv_type: KvType::F16,
            max_batch: 64,
            logits_all: false,
        }
    }
}

/// The rings of one sequence: full context for the global layers, and for a family with
/// sliding-window layers a ring of `window + max_batch` slots for those (enough for every
/// query of a prefill chunk to see its whole window while the chunk overwrites the oldest
/// slots).
pub(super) struct Rings {
    pub(super) global: KvCache,
    pub(super) local: Option<KvCache>,
}

impl Rings {
    fn new(model: &Model, opts: &SessionOptions) -> Result<Self> {
        let c = model.config();
        let n_local = c.n_swa_layers();
        let shape = |n_layers: usize, capacity: usize| KvShape {
            n_layers,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            capacity,
            ty: opts.kv_type,
        };
        // Every layer may be local (no global ring is then read, but it keeps the session's
        // slot bookkeeping): keep at least one layer in it.
        let global = KvCache::new(
            shape((c.n_layers - n_local).max(1), opts.max_seq_len),
            opts.kv_policy,
        )?;
        let local = if n_local == 0 {
            None
        } else {
            let ring = c.sliding_window + opts.max_batch;
            Some(if ring >= opts.max_seq_len {
                KvCache::new(shape(n_local, opts.max_seq_len), opts.kv_policy)?
            } else {
                KvCache::new(shape(n_local, ring), KvPolicy::Sliding { sinks: 0 })?
            })
        };
        Ok(Rings { global, local })
    }

    pub(super) fn local(&self) -> Option<&KvCache> {
        self.local.as_ref()
    }

    /// Whether these rings fit `model` and a decoder of `max_seq_len` slots.
    pub(super) fn fits(&self, model: &Model, max_seq_len: usize) -> bool {
        let c = model.config();
        let n_local = c.n_swa_layers();
        let ok = |kv: &KvCache, layers: usize| {
            let sh = kv.shape();
            sh.n_layers == layers
                && sh.n_kv_heads == c.n_kv_heads
                && sh.head_dim == c.head_dim
                && sh.capacity <= max_seq_len
        };
        ok(&self.global, (c.n_layers - n_local).max(1))
            && match (&self.local, n_local) {
                (None, 0) => true,
                (Some(l), k) if k > 0 => ok(l, k),
                _ => false,
            }
    }

    fn reset(&mut self) {
        self.global.reset();
        if let Some(l) = &mut self.local {
            l.reset();
        }
    }

    /// Claims the slots of the token at `pos` in every ring.
    pub(super) fn claim(&mut self, pos: u32) -> Result<(usize, usize)> {
        let slot = self.global.claim(pos)?;
        let slot_swa = match &mut self.local {
            Some(l) => l.claim(pos)?,
            None => 0,
        };
        Ok((slot, slot_swa))
    }

    /// Whether a prefill chunk may use the shared-key attention on each ring (slots in
    /// position order: true until a ring wraps).
    pub(super) fn tiled(&self, n: usize) -> (bool, bool) {
        let ordered = |kv: &KvCache| n >= 2 && kv.positions().windows(2).all(|w| w[0] < w[1]);
        (
            ordered(&self.global),
            self.local.as_ref().is_some_and(ordered),
        )
    }
}

impl KvAccess for Rings {
    fn kv(&self, _: usize, local: bool) -> &KvCache {
        match (&self.local, local) {
            (Some(l), true) => l,
            _ => &self.global,
        }
    }
    fn kv_mut(&mut self, _: usize, local: bool) -> &mut KvCache {
        match (&mut self.local, local) {
            (Some(l), true) => l,
            _ => &mut self.global,
        }
    }
}

/// Forward-pass state of one sequence: KV ring, scratch, thread pool.
pub struct Forward {
    pub(super) kv: Rings,
    ws: Workspace,
    pool: Arc<ThreadPool>,
    isa: Isa,
    opts: SessionOptions,
    /// Whether the logits buffer holds a row per batch token (created with `logits_all`).
    all_rows: bool,
    pub(super) n_past: u32,
    pub counters: Counters,
}

/// The most tokens one pass may append to a sequence of `f` (a chunk of its prefill in a
/// batched pass): its session's `max_batch` (the headroom of its sliding-window ring) and,
/// on a ring with the sliding policy, what it takes before evicting (at least one).
pub(super) fn chunk_limit(f: &Forward) -> usize {
    let mut n = f.opts.max_batch;
    if matches!(f.kv.global.policy(), KvPolicy::Sliding { .. }) {
        let g = &f.kv.global;
        n = n.min((g.shape().capacity - g.used()).max(1));
    }
    n
}

/// The rule of [`Forward::set_logits_all`], shared with the OpenCL session.
pub(crate) fn set_logits_all(opts: &mut SessionOptions, all_rows: bool, on: bool) -> Result<()> {
    if on && !all_rows {
        return Err(Error::InvalidArgument {
            what: "logits_all".into(),
            reason: "the session was created without logits_all: its logits buffer holds one row"
                .into(),
        });
    }
    opts.logits_all = on;
    Ok(())
}

pub(super) fn check_tokens(model: &Model, tokens: &[u32]) -> Result<()> {
    let vocab = model.config().vocab_size as u32;
    if let Some(&bad) = tokens.iter().find(|&&t| t >= vocab) {
        return Err(Error::InvalidArgument {
            what: "token id".into(),
            reason: format!("{bad} is outside the vocabulary of {vocab}"),
        });
    }
    Ok(())
}

impl Forward {
    pub fn new(
        model: &Model,
        opts: SessionOptions,
        pool: Arc<ThreadPool>,
        isa: Isa,
    ) -> Result<Self> {
        let c = model.config();
        let mut opts = opts;
        if opts.max_seq_len == 0 {
            opts.max_seq_len = c.context_length;
        }
        if opts.max_batch == 0 {
            return Err(Error::InvalidArgument {
                what: "max_batch".into(),
                reason: "must be at least 1".into(),
            });
        }
        let b = opts.max_batch;
        let kv = Rings::new(model, &opts)?;
        model.ensure_repacked()?;
        let logit_rows = if opts.logits_all { b } else { 1 };
        let ws = Workspace::new(c, b, opts.max_seq_len, pool.n_threads(), logit_rows);
        Ok(Forward {
            kv,
            ws,
            pool,
            isa,
            all_rows: opts.logits_all,
            opts,
            n_past: 0,
            counters: Counters::default(),
        })
    }

    pub fn n_past(&self) -> usize {
        self.n_past as usize
    }

    /// The full-context ring (every layer's, for a family without sliding-window layers):
    /// its bookkeeping is the session's.
    pub fn kv(&self) -> &KvCache {
        &self.kv.global
    }

    /// The window-sized ring of the sliding-window layers, for a family that has them.
    pub fn kv_swa(&self) -> Option<&KvCache> {
        self.kv.local()
    }

    pub fn options(&self) -> &SessionOptions {
        &self.opts
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn threads(&self) -> usize {
        self.pool.n_threads()
    }

    pub fn reset(&mut self) {
        self.kv.reset();
        self.n_past = 0;
    }

    /// Rewinds to the first `n` tokens (prefix reuse).
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if let Some(l) = &self.kv.local
            && (n > self.kv.global.used() || l.has_wrapped())
        {
            return Err(Error::Kv(format!(
                "cannot rewind to {n} tokens: the sliding-window ring has wrapped"
            )));
        }
        self.kv.global.truncate(n)?;
        if let Some(l) = &mut self.kv.local {
            l.truncate(n)?;
        }
        self.n_past = n as u32;
        Ok(())
    }

    /// Logits of the last forward call: one row of `vocab` (or one per token with `logits_all`).
    pub fn logits(&self) -> &[f32] {
        &self.ws.logits
    }

    /// Turns `logits_all` off (only the last token's logits, skipping the output matrix for
    /// the others) or back on, for the following forward calls. On only for a session created
    /// with `logits_all`, whose buffer holds a row per batch token.
    pub fn set_logits_all(&mut self, on: bool) -> Result<()> {
        set_logits_all(&mut self.opts, self.all_rows, on)
    }

    /// Runs `tokens` through the model in chunks of `max_batch`, appending them to the cache.
    /// Returns the logits of the last token (or, with `logits_all`, of the last chunk's
    /// tokens: see [`Forward::logits`]).
    pub fn forward(&mut self, model: &Model, tokens: &[u32]) -> Result<&[f32]> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument {
                what: "tokens".into(),
                reason: "empty input".into(),
            });
        }
        if !self.kv.global.can_take(tokens.len()) {
            return Err(Error::ContextOverflow {
                tokens: self.kv.global.used() + tokens.len(),
                ctx: self.kv.global.shape().capacity,
            });
        }
        check_tokens(model, tokens)?;
        // Batches of up to `max_batch`; with `logits_all`, batch b's rows land at row 0 of
        // the logits buffer and later sub-batches of it after them.
        let (cap, mb) = (self.kv.global.shape().capacity, self.opts.max_batch);
        let mut row = 0;
        let mut rest = tokens;
        while !rest.is_empty() {
            if row == mb {
                row = 0;
            }
            // A sliding ring must not evict, inside one sub-batch, a slot that an earlier token
            // of that sub-batch still attends to: once it is full, one token at a time.
            let mut n = rest.len().min(mb - row);
            if matches!(self.kv.global.policy(), KvPolicy::Sliding { .. }) {
                n = n.min((cap - self.kv.global.used()).max(1));
            }
            let (chunk, tail) = rest.split_at(n);
            let out_row = if self.opts.logits_all { row } else { 0 };
            self.forward_chunk(model, chunk, out_row)?;
            row += n;
            rest = tail;
        }
        let v = model.config().vocab_size;
        Ok(if self.opts.logits_all {
            &self.ws.logits[(row - 1) * v..row * v]
        } else {
            &self.ws.logits[..v]
        })
    }

    /// Runs one sub-batch; with `logits_all` its logits go to rows `out_row..` of the buffer.
    fn forward_chunk(&mut self, model: &Model, tokens: &[u32], out_row: usize) -> Result<()> {
        let n = tokens.len();
        let pass = Pass {
            model,
            pool: &self.pool,
            isa: self.isa,
        };
        pass.embed(&mut self.ws, tokens);
        for i in 0..n {
            let pos = self.n_past + i as u32;
            let (slot, slot_swa) = self.kv.claim(pos)?;
            self.ws.rows[i] = RowInfo {
                seq: 0,
                pos,
                slot,
                slot_swa,
                tile: (false, false),
            };
        }
        // Shared-key attention needs slots in position order (true until a ring wraps).
        let tile = self.kv.tiled(n);
        for r in &mut self.ws.rows[..n] {
            r.tile = tile;
        }
        pass.layers(&mut self.ws, n, &mut self.kv, &mut self.counters);
        let (first, rows) = if self.opts.logits_all {
            (0, n)
        } else {
            (n - 1, 1)
        };
        pass.head(&mut self.ws, first, rows, out_row, &mut self.counters);
        self.counters.forward_calls += 1;
        if n == 1 {
            self.counters.tokens_decoded += 1;
        } else {
            self.counters.tokens_prefilled += n as u64;
        }
        self.n_past += n as u32;
        Ok(())
    }
}
