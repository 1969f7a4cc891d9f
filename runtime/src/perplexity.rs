//! Perplexity of a text under llama-perplexity's protocol, the one route every caller (the
//! `perplexity` command, the reference tests) takes:
//! - the text is tokenized as a plain prompt, BOS first when the model adds one;
//! - the tokens are cut into `floor(n / ctx)` chunks, each evaluated from an empty cache;
//! - when the model adds BOS, the first token of every chunk is replaced by BOS;
//! - the negative log-likelihood of tokens `ctx/2 + 1 … ctx − 1` (predicted from positions
//!   `ctx/2 … ctx − 2`) is summed over all chunks; perplexity is `exp(mean NLL)`.
//!
//! Chunks are independent, so the first `k` chunks of a text give llama-perplexity's running
//! perplexity after its `k`-th chunk.

use crate::error::{Error, Result};
use crate::kv::KvType;
use crate::model::SessionOptions;
use crate::session::{Engine, log_prob};
use crate::tokenizer::Prompt;

/// The outcome of [`perplexity`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Perplexity {
    /// Perplexity over every scored token.
    pub ppl: f64,
    /// Chunks evaluated.
    pub chunks: usize,
    /// Tokens whose log-likelihood was scored.
    pub scored: usize,
    /// Perplexity over the chunks so far, after each chunk.
    pub running_ppl: Vec<f64>,
}

/// Token ids of `text` as llama-perplexity reads a text file: plain text, BOS first when the
/// model adds one (one trailing newline is the caller's to drop, as llama-perplexity does).
pub fn text_tokens(engine: &Engine, text: &str) -> Result<Vec<u32>> {
    engine.encode_prompt(&Prompt::text(text))
}

/// Perplexity of `tokens` in chunks of `ctx` (see the module comment). `ctx` must be at least
/// 4 and `tokens` must hold at least one chunk.
pub fn perplexity(engine: &Engine, tokens: &[u32], ctx: usize) -> Result<Perplexity> {
    perplexity_with(engine, tokens, ctx, KvType::F16)
}

/// [`perplexity`] with K and V cached as `kv_type`.
pub fn perplexity_with(
    engine: &Engine,
    tokens: &[u32],
    ctx: usize,
    kv_type: KvType,
) -> Result<Perplexity> {
    let bad = |reason: String| Error::InvalidArgument {
        what: "perplexity".into(),
        reason,
    };
    if ctx < 4 {
        return Err(bad(format!("context {ctx} is too small (at least 4)")));
    }
    let model_ctx = engine.model.config().context_length;
    if ctx > model_ctx {
        return Err(bad(format!(
            "context {ctx} exceeds the model's context length {model_ctx}"
        )));
    }
    let chunks = tokens.len() / ctx;
    if chunks == 0 {
        return Err(bad(format!(
            "the text has {} tokens, fewer than one chunk of {ctx}",
            tokens.len()
        )));
    }
    let bos = if engine.tokenizer.add_bos() {
        engine.tokenizer.bos()
    } else {
        None
    };
    let mut s = engine.session(SessionOptions {
        max_seq_len: ctx,
        max_batch: ctx - ctx / 2,
        logits_all: true,
        kv_type,
        ..Default::default()
    })?;
    let vocab = engine.model.config().vocab_size;
    let (mut nll, mut scored) = (0.0f64, 0usize);
    let mut running = Vec::with_capacity(chunks);
    let mut chunk = vec![0u32; ctx];
    for c in 0..chunks {
        chunk.copy_from_slice(&tokens[c * ctx..(c + 1) * ctx]);
        if let Some(b) = bos {
            chunk[0] = b;
        }
        s.reset();
        // The first half is context only: no logits but the last (skips the output matrix
        // for those rows). Every row's computation is independent of how the chunk is split
        // into forward calls, so this gives the same bits as one call over the whole chunk.
        let half = ctx / 2;
        s.set_logits_all(false)?;
        s.prefill(&chunk[..half])?;
        s.set_logits_all(true)?;
        s.prefill(&chunk[half..])?;
        // Row `r` of the second call holds the logits at position `half + r`.
        let all = s.all_logits();
        for pos in half..ctx - 1 {
            let r = pos - half;
            nll -= log_prob(&all[r * vocab..(r + 1) * vocab], chunk[pos + 1]);
            scored += 1;
        }
        running.push((nll / scored as f64).exp());
    }
    Ok(Perplexity {
        ppl: (nll / scored as f64).exp(),
        chunks,
        scored,
        running_ppl: running,
    })
}
