//! `perplexity`: prints the result of the runtime's llama-perplexity protocol
//! ([`pocketperf_runtime::perplexity`], the one route), with the running perplexity after
//! each chunk.

use anyhow::Result;
use pocketperf_runtime::perplexity::{perplexity as measure, text_tokens};
use pocketperf_runtime::session::Engine;

/// Encodes `text` (as read from the file) and prints its perplexity over chunks of `ctx`.
pub fn perplexity(engine: &Engine, mut text: String, ctx: usize, json: bool) -> Result<()> {
    // llama-perplexity drops one trailing newline of the file.
    if text.ends_with('\n') {
        text.pop();
    }
    let tokens = text_tokens(engine, &text)?;
    let r = measure(engine, &tokens, ctx)?;
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
