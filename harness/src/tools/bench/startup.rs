//! `bench --startup-runs`: process start to first token of `pocketperf generate`, timed from
//! spawn to exit.

use super::rows::{Spread, Startup};
use crate::sut::prompts::prompt_tokens;
use anyhow::{Context, Result, bail};
use pocketperf_runtime::kv::KvType;
use pocketperf_runtime::session::Engine;
use std::path::Path;
use std::time::Instant;

/// A prompt of exactly `n` tokens (or the nearest above) cut from a fixed text.
fn prompt_of(engine: &Engine, n: usize) -> Result<(String, usize)> {
    const TEXT: &str = "one two three four five six seven eight nine ten eleven twelve thirteen \
fourteen fifteen sixteen seventeen eighteen nineteen twenty";
    let words: Vec<&str> = TEXT.split(' ').collect();
    let mut best = (TEXT.to_string(), usize::MAX);
    for k in 1..=words.len() {
        let t = words[..k].join(" ");
        let c = prompt_tokens(engine, &t, false)?.len();
        if c >= n && c < best.1 {
            best = (t, c);
        }
        if c >= n {
            break;
        }
    }
    Ok(best)
}

/// Times `pocketperf generate --max-tokens 1` (with the bench's `--kv-type`) from spawn to
/// exit, `runs` times after one warm-up run.
pub fn startup(
    model: &Path,
    threads: usize,
    runs: usize,
    engine: &Engine,
    kv_type: KvType,
) -> Result<Startup> {
    let (prompt, n) = prompt_of(engine, 16)?;
    let exe = std::env::current_exe().context("cannot locate the pocketperf executable")?;
    let t = threads.to_string();
    let m = model.display().to_string();
    let kv = kv_type.to_string();
    let args = [
        "generate",
        "--model",
        m.as_str(),
        "--threads",
        t.as_str(),
        "--max-tokens",
        "1",
        "--ctx",
        "64",
        "--kv-type",
        kv.as_str(),
        "--prompt",
        prompt.as_str(),
    ];
    let mut samples = Vec::with_capacity(runs);
    for i in 0..=runs {
        let t0 = Instant::now();
        let out = std::process::Command::new(&exe)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .with_context(|| format!("{}: cannot start", exe.display()))?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        if !out.status.success() {
            bail!(
                "start-up run failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if i > 0 {
            samples.push(ms);
        }
    }
    let s = Spread::of(&samples);
    Ok(Startup {
        command: format!("pocketperf {}", args.join(" ")),
        prompt_tokens: n,
        runs,
        ms_median: s.median,
        ms_min: s.min,
        ms_max: s.max,
        samples_ms: samples,
    })
}
