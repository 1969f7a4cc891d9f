//! The machinery behind the model commands (`model`, `tokenize`, `generate`, `logits`,
//! `perplexity`, `bench`). Each command in `cmd/runtime.rs` resolves its flags (model path,
//! loaded engine, prompt text or token ids) and calls one function here, which does the work
//! and prints the command's output.
//!
//! - [`model_file`] — the model catalog, fetching, GGUF info and realignment, tokenizing;
//! - [`generate`] — streamed generation with its timings (and the governor hook);
//! - [`logits`] — the top logits after one prefill, all logits to a raw file;
//! - [`perplexity`] — llama-perplexity's protocol;
//! - [`bench`] — llama-bench-style sweeps (pp, tg, batched tg over lists of lengths,
//!   depths, thread counts and models), start-up time, memory, and the roofline from
//!   [`roofline`], the read-bandwidth probe and LLC size; [`bench_out`] renders them (md,
//!   csv, json, jsonl, sql);
//! - [`cold_start`] — eviction and timed fresh-process starts (`bench --cold`, `run
//!   --cold-start`).

pub mod bench;
pub mod bench_out;
pub mod cold_start;
pub mod generate;
pub mod logits;
pub mod model_file;
pub mod perplexity;
pub mod roofline;

use anyhow::{Context, Result};
use std::path::Path;

/// A runtime result whose error names `path` (GGUF and I/O errors already do; model,
/// tokenizer and metadata errors get it in front).
pub fn naming_file<T>(r: pocketperf_runtime::Result<T>, path: &Path) -> Result<T> {
    r.map_err(|e| {
        let shown = path.display().to_string();
        if e.to_string().contains(&shown) {
            anyhow::Error::new(e)
        } else {
            anyhow::Error::new(e).context(shown)
        }
    })
}

/// Reads a text file that must be UTF-8, naming the file and byte offset otherwise.
pub fn read_utf8(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: invalid UTF-8 at byte offset {}",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}
