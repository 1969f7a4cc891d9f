//! `perplexity` by llama-perplexity's protocol (chunks of `ctx` tokens from an empty cache,
//! the second half of each chunk scored), with the running perplexity after each chunk.

use crate::sut::prompts::{PromptText, encode_prompt};
use anyhow::{Result, bail};
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::session::{Engine, log_prob};

/// Result of the llama-perplexity protocol.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PerplexityResult {
    pub ppl: f64,
    pub chunks: usize,
    pub scored: usize,
    pub running_ppl: Vec<f64>,
}

/// llama-perplexity's protocol: tokens (no BOS unless the model adds one) cut into
/// floor(n/ctx) chunks; each chunk evaluated from an empty cache; the negative log-likelihood
/// of tokens ctx/2+1 … ctx−1 (predicted from positions ctx/2 … ctx−2) is summed.
pub fn perplexity_of(engine: &Engine, tokens: &[u32], ctx: usize) -> Result<PerplexityResult> {
    if ctx < 4 {
        bail!("--ctx {ctx}: too small (at least 4)");
    }
    let chunks = tokens.len() / ctx;
    if chunks == 0 {
        bail!(
            "the text has {} tokens, fewer than one chunk of {ctx}",
            tokens.len()
        );
    }
    let mut s = engine.session(SessionOptions {
        max_seq_len: ctx,
        max_batch: ctx,
        logits_all: true,
        ..Default::default()
    })?;
    let vocab = engine.model.config().vocab_size;
    let first = ctx / 2;
    let (mut nll, mut count) = (0.0f64, 0usize);
    let mut running = Vec::with_capacity(chunks);
    for c in 0..chunks {
        s.reset();
        let chunk = &tokens[c * ctx..(c + 1) * ctx];
        s.prefill(chunk)?;
        let all = s.all_logits();
        for pos in first..ctx - 1 {
            let row = &all[pos * vocab..(pos + 1) * vocab];
            nll -= log_prob(row, chunk[pos + 1]);
            count += 1;
        }
        running.push((nll / count as f64).exp());
    }
    Ok(PerplexityResult {
        ppl: (nll / count as f64).exp(),
        chunks,
        scored: count,
        running_ppl: running,
    })
}

/// Encodes `text` (as read from the file) and prints its perplexity over chunks of `ctx`.
pub fn perplexity(engine: &Engine, mut text: String, ctx: usize, json: bool) -> Result<()> {
    // llama-perplexity drops one trailing newline of the file.
    if text.ends_with('\n') {
        text.pop();
    }
    let tokens = encode_prompt(
        &engine.tokenizer,
        PromptText::Raw {
            text: &text,
            special: false,
        },
    )?;
    let r = perplexity_of(engine, &tokens, ctx)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        for (i, p) in r.running_ppl.iter().enumerate() {
            println!("chunk {:>3}: running ppl {p:.4}", i + 1);
        }
        println!(
            "perplexity {:.4} over {} chunks of {} ({} tokens scored)",
            r.ppl, r.chunks, ctx, r.scored
        );
    }
    Ok(())
}
