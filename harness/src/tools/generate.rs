//! `generate`: the prompt's tokens (through the chat template when asked), then sampled or
//! greedy tokens streamed to stdout as they decode, with TTFT and decode speed on stderr,
//! and the thermal governor's hook on every token when one is configured.

use crate::cmd::governor::GovernorArgs;
use crate::sut::prompts::prompt_tokens;
use anyhow::{Result, bail};
use pocketperf_runtime::kv::{KvPolicy, KvType};
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::session::{Engine, GenerateOptions, SamplingParams};
use pocketperf_runtime::tokenizer::StreamDecoder;
use std::io::Write;
use std::time::Instant;

/// The most new tokens one `generate` with a sliding ring may ask for (about 16.8 million: at
/// 100 tokens/s, two days of decode; a bound so that a mistyped count cannot run forever).
pub const MAX_SLIDING_TOKENS: usize = 1 << 24;

/// What to generate (from `generate`'s flags).
pub struct GenerateSpec<'a> {
    pub prompt: &'a str,
    /// Wrap the prompt in the model's chat template (as a user turn).
    pub chat: bool,
    pub max_tokens: usize,
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
    /// KV ring size in tokens.
    pub ctx: usize,
    /// What the ring does when it is full: with `error` the prompt and the new tokens must
    /// fit `ctx`; with `sliding` only the prompt must, and generation goes on past `ctx`.
    pub kv_policy: KvPolicy,
    /// How the KV cache stores keys and values.
    pub kv_type: KvType,
    pub governor: &'a GovernorArgs,
}

/// Generates from `a.prompt` and streams the text to stdout.
pub fn generate(engine: &Engine, a: &GenerateSpec) -> Result<()> {
    let model_ctx = engine.model.config().context_length;
    if a.ctx == 0 || a.ctx > model_ctx {
        bail!(
            "--ctx {}: must be 1 to the model's context length {model_ctx}",
            a.ctx
        );
    }
    let sliding = matches!(a.kv_policy, KvPolicy::Sliding { .. });
    if let KvPolicy::Sliding { sinks } = a.kv_policy
        && sinks >= a.ctx
    {
        bail!(
            "--kv-policy sliding:{sinks}: the sinks must leave room in --ctx {}",
            a.ctx
        );
    }
    if sliding && a.max_tokens > MAX_SLIDING_TOKENS {
        bail!(
            "--max-tokens {}: at most {MAX_SLIDING_TOKENS} with --kv-policy sliding",
            a.max_tokens
        );
    }
    if !sliding && a.max_tokens > a.ctx {
        bail!(
            "--max-tokens {}: must be at most --ctx {} (the new tokens and the prompt share it; --kv-policy sliding lets generation go past it)",
            a.max_tokens,
            a.ctx
        );
    }
    let ids = prompt_tokens(engine, a.prompt, a.chat)?;
    if ids.is_empty() {
        bail!("the prompt is empty");
    }
    if sliding && ids.len() >= a.ctx {
        bail!(
            "--ctx {}: the prompt of {} tokens must fit the ring even with --kv-policy sliding",
            a.ctx,
            ids.len()
        );
    }
    // Compared without adding: `--max-tokens` may be as large as the type allows.
    if !sliding && a.max_tokens > a.ctx.saturating_sub(ids.len()) {
        bail!(
            "--max-tokens {}: prompt of {} tokens plus {} new tokens does not fit --ctx {}",
            a.max_tokens,
            ids.len(),
            a.max_tokens,
            a.ctx
        );
    }
    let mut s = engine.session(SessionOptions {
        max_seq_len: a.ctx,
        kv_policy: a.kv_policy,
        kv_type: a.kv_type,
        ..Default::default()
    })?;
    let opts = GenerateOptions {
        max_new_tokens: a.max_tokens,
        stop_at_eog: true,
        sampling: SamplingParams {
            temperature: a.temperature,
            top_p: a.top_p,
            seed: a.seed,
        },
    };
    let mut dec = StreamDecoder::default();
    let mut gov = crate::governor_hook::GovernorHook::new(a.governor, engine.threads())?;
    if let Some(g) = gov.as_mut() {
        eprintln!("governor: {}", g.describe());
        g.begin();
    }
    let t0 = Instant::now();
    let mut t_first = None;
    let mut out = std::io::stdout().lock();
    let stats = s.generate(&ids, &opts, |i, id| {
        if i == 0 {
            t_first = Some(t0.elapsed());
        }
        if !engine.tokenizer.is_eog(id) {
            let piece = dec.push(&engine.tokenizer, id);
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        }
        if let Some(g) = gov.as_mut() {
            g.on_token(0, i, engine);
        }
    })?;
    let tail = dec.finish();
    let _ = out.write_all(tail.as_bytes());
    let _ = writeln!(out);
    let total = t0.elapsed();
    let ttft = t_first.unwrap_or(total);
    let decode_s = (total - ttft).as_secs_f64();
    let tps = if stats.generated > 1 && decode_s > 0.0 {
        (stats.generated - 1) as f64 / decode_s
    } else {
        0.0
    };
    eprintln!(
        "prompt {} tokens, generated {} tokens{}; TTFT {:.1} ms; decode {:.1} tokens/s ({} threads, {:?}, {})",
        stats.prompt_tokens,
        stats.generated,
        if stats.stopped_at_eog {
            " (end of generation)"
        } else {
            ""
        },
        ttft.as_secs_f64() * 1e3,
        tps,
        engine.threads(),
        engine.isa(),
        engine.backend().name()
    );
    if let Some(g) = &gov {
        eprintln!("governor: {}", g.summary_line());
        for w in g.warnings() {
            eprintln!("warning: {w}");
        }
    }
    Ok(())
}
