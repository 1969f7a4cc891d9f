//! The model file commands' work: the catalog (`model list`), fetching (`model fetch`), a
//! GGUF file's metadata and tensor table (`model info`), page-aligned rewriting
//! (`model align`), and tokenizing text with a model's tokenizer (`tokenize`).

use super::naming_file;
use crate::meta;
use crate::model_store;
use anyhow::{Result, bail};
use pocketperf_runtime::gguf::{GgufFile, Value};
use pocketperf_runtime::tokenizer::Tokenizer;
use std::path::Path;

/// Fetches the catalog models `names` (every one with `all`; the reference model when
/// `names` is empty) and prints each cached path.
pub fn fetch(names: &[String], all: bool, force: bool) -> Result<()> {
    let models: Vec<&model_store::CatalogModel> = if all {
        model_store::CATALOG.iter().collect()
    } else if names.is_empty() {
        vec![&model_store::CATALOG[0]]
    } else {
        names
            .iter()
            .map(|n| model_store::catalog_model_named(n))
            .collect::<Result<_>>()?
    };
    for m in models {
        let p = model_store::fetch(m, force, false)?;
        println!("{}", p.display());
    }
    Ok(())
}

/// Prints the catalog with the cache state of each model, as text or JSON.
pub fn list(json: bool) -> Result<()> {
    let rows = model_store::list()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", catalog_text(&rows));
    }
    Ok(())
}

/// Prints the metadata and tensor table of the GGUF file at `path`, as text or JSON.
pub fn info(path: &Path, json: bool) -> Result<()> {
    let g = naming_file(GgufFile::open(path), path)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info_json(&g))?);
    } else {
        print!("{}", info_text(&g));
    }
    Ok(())
}

/// Smallest alignment `model align --to` takes: GGUF's default, 32 bytes.
pub const MIN_ALIGN_TO: u64 = pocketperf_runtime::gguf::DEFAULT_ALIGNMENT;

/// Checks `model align --to`: a power of two from 32 bytes (GGUF's default) to 64 KiB (the
/// largest page size a device maps, so the largest boundary a zero-copy import needs); a
/// larger value would only pad the file with up to that many zero bytes per tensor.
pub fn check_align_to(to: u64) -> Result<()> {
    let max = pocketperf_runtime::gguf::MAX_ALIGNMENT;
    if !(MIN_ALIGN_TO..=max).contains(&to) || !to.is_power_of_two() {
        let why = if to.is_power_of_two() {
            "out of range".to_string()
        } else {
            format!("{to} is not a power of two")
        };
        bail!(
            "--to {to}: the alignment must be a power of two from {MIN_ALIGN_TO} to {max} bytes \
             (64 KiB, the largest page size); {why}"
        );
    }
    Ok(())
}

/// Rewrites `input` to `output` with every tensor aligned to `to` bytes, and checks it. An
/// `output` that is `input` by any path is refused before anything is written; the output is
/// written beside its destination and renamed into place, and removed if the check fails.
pub fn align(to: u64, input: &Path, output: &Path) -> Result<()> {
    check_align_to(to)?;
    let g = naming_file(GgufFile::open(input), input)?;
    naming_file(
        pocketperf_runtime::gguf::write_aligned(&g, output, to),
        output,
    )?;
    let out = naming_file(GgufFile::open(output), output)?;
    let misaligned = out
        .tensors()
        .iter()
        .filter(|t| out.tensor_file_offset(t) % to != 0)
        .count();
    if misaligned > 0 {
        drop(out);
        let _ = std::fs::remove_file(output);
        bail!(
            "{}: {misaligned} tensors are not {to}-aligned after rewriting",
            output.display()
        );
    }
    println!(
        "wrote {} ({} tensors, data at offset {}, every tensor {to}-byte aligned)",
        output.display(),
        out.tensors().len(),
        out.data_offset()
    );
    Ok(())
}

/// The tokenizer of the model file at `path`.
pub fn tokenizer(path: &Path) -> Result<Tokenizer> {
    let g = naming_file(GgufFile::open(path), path)?;
    naming_file(Tokenizer::from_gguf(&g), path)
}

/// Prints the tokens of `text` (ids and pieces), as text or JSON.
pub fn print_tokens(tok: &Tokenizer, text: &str, special: bool, json: bool) -> Result<()> {
    let ids = tok.encode(text, special)?;
    if json {
        let pieces: Vec<&str> = ids
            .iter()
            .map(|&i| tok.token_piece(i).unwrap_or(""))
            .collect();
        println!(
            "{}",
            serde_json::json!({ "ids": ids, "pieces": pieces, "n_tokens": ids.len() })
        );
    } else {
        for &i in &ids {
            println!("{i:>6} {:?}", tok.token_piece(i).unwrap_or(""));
        }
        println!("{} tokens", ids.len());
    }
    Ok(())
}

fn catalog_text(rows: &[model_store::CatalogStatus]) -> String {
    let mut out = String::new();
    for r in rows {
        let m = &r.model;
        out.push_str(&format!(
            "{}  {}\n  parameters {:.1} M, file {:.1} MB, license: {}\n  sha256 {}\n  packages: {}\n  {}: {}\n",
            m.name,
            m.description,
            m.parameters as f64 / 1e6,
            m.size_bytes as f64 / 1e6,
            m.license,
            m.sha256,
            m.parts.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", "),
            if r.cached { "cached" } else { "not cached" },
            r.path.display()
        ));
    }
    out
}

fn value_summary(v: &Value) -> String {
    let s = format!("{v:?}");
    if s.chars().count() > 120 {
        let cut: String = s.chars().take(117).collect();
        format!("{cut}...")
    } else {
        s
    }
}

fn info_text(g: &GgufFile) -> String {
    let mut s = format!(
        "GGUF v{} {}\n{} metadata keys, {} tensors, alignment {}, data offset {}\n\nmetadata:\n",
        g.version(),
        g.name(),
        g.metadata().len(),
        g.tensors().len(),
        g.alignment(),
        g.data_offset()
    );
    for (k, v) in g.metadata() {
        s += &format!("  {k} = {}\n", value_summary(v));
    }
    s += "\ntensors:\n";
    s += &format!(
        "  {:<36} {:<6} {:<16} {:>12} {:>12} {:>6}\n",
        "name", "type", "shape", "bytes", "offset", "align"
    );
    for t in g.tensors() {
        let off = g.tensor_file_offset(t);
        let shape = t
            .dims
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x");
        let align = 1u64 << off.trailing_zeros().min(12);
        s += &format!(
            "  {:<36} {:<6} {:<16} {:>12} {:>12} {:>6}\n",
            t.name,
            t.ty.name(),
            shape,
            t.n_bytes,
            off,
            align
        );
    }
    s
}

fn info_json(g: &GgufFile) -> serde_json::Value {
    let meta: serde_json::Map<String, serde_json::Value> = g
        .metadata()
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(value_summary(v))))
        .collect();
    let tensors: Vec<serde_json::Value> = g
        .tensors()
        .iter()
        .map(|t| {
            let off = g.tensor_file_offset(t);
            serde_json::json!({
                "name": t.name, "type": t.ty.name(), "ne": t.dims, "nbytes": t.n_bytes,
                "abs_offset": off, "rel_offset": t.offset,
                "alignment": 1u64 << off.trailing_zeros().min(12),
            })
        })
        .collect();
    serde_json::json!({
        "tool": meta::TOOL, "tool_version": meta::TOOL_VERSION, "git_commit": meta::GIT_COMMIT,
        "version": g.version(), "alignment": g.alignment(), "data_offset": g.data_offset(),
        "metadata": meta, "tensors": tensors,
    })
}
