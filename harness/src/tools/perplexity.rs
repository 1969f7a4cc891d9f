//! `perplexity`: prints the result of the runtime's llama-perplexity protocol
//! ([`pocketperf_runtime::perplexity`], the one route), with the running perplexity after
//! each chunk.

use anyhow::{Result, bail};
use pocketperf_runtime::kv::KvType;
use pocketperf_runtime::perplexity::{perplexity_with as measure, text_tokens};
use pocketperf_runtime::session::Engine;

/// Smallest `--ctx` the protocol can score (half the chunk is context, half is scored).
pub const MIN_CTX: usize = 4;

/// Encodes `text` (as read from the file) and prints its perplexity over chunks of `ctx`,
/// which must be from [`MIN_CTX`] to the model's context length (checked before anything is
/// encoded or allocated: the logits of a chunk take `ctx × vocabulary` floats).
pub fn perplexity(
    engine: &Engine,
    mut text: String,
    ctx: usize,
    kv_type: KvType,
    json: bool,
) -> Result<()> {
    let model_ctx = engine.model.config().context_length;
    if !(MIN_CTX..=model_ctx).contains(&ctx) {
        bail!("--ctx {ctx}: must be {MIN_CTX} to the model's context length {model_ctx}");
    }
    // llama-perplexity drops one trailing newline of the file.
    if text.ends_with('\n') {
        text.pop();
    }
    let tokens = text_tokens(engine, &text)?;
    let r = measure(engine, &tokens, ctx, kv_type)?;
    if json {
        let mut v = serde_json::to_value(&r)?;
        v["kv_type"] = serde_json::json!(kv_type);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (i, p) in r.running_ppl.iter().enumerate() {
            println!("chunk {:>3}: running ppl {p:.4}", i + 1);
        }
        println!(
            "perplexity {:.4} over {} chunks of {} ({} tokens scored, KV cache {kv_type})",
            r.ppl, r.chunks, ctx, r.scored
        );
    }
    Ok(())
}
