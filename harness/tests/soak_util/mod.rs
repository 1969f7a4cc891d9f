//! Shared by the serve and soak tests: the built binary, the shared reference material, the
//! reference model, and a tiny synthetic model (the fuzz target's builder) with a context long
//! enough for the scripted dialogues (the builder is `pocketperf-testkit`'s).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use pocketperf_testkit::{TinyLlama, tiny_llama};

/// The `pocketperf` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_pocketperf")
}

pub use pocketperf_testkit::shared_dir;

/// The MMLU copy: `$POCKETPERF_MMLU_DIR`, else `../shared/datasets/mmlu`.
pub fn mmlu_dir() -> PathBuf {
    match std::env::var_os("POCKETPERF_MMLU_DIR") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => shared_dir().join("datasets/mmlu"),
    }
}

/// The cached reference model (`$POCKETPERF_MODEL` first).
pub fn reference_model() -> PathBuf {
    pocketperf_testkit::reference_model(|| {
        pocketperf::model_store::reference_model_path().expect("model cache directory")
    })
}

/// Context length written into the tiny model (its builder writes 256).
pub const TINY_CTX: u32 = 4096;

/// Writes the tiny llama model into `dir` with a 4096-token context and returns its path.
pub fn tiny_model(dir: &Path) -> PathBuf {
    let mut b = tiny_llama(TinyLlama::default());
    let key = b"llama.context_length";
    let at = b
        .windows(key.len())
        .position(|w| w == key)
        .expect("context_length key");
    // key bytes, then the u32 value type, then the value.
    let v = at + key.len() + 4;
    assert_eq!(&b[v..v + 4], &256u32.to_le_bytes(), "unexpected layout");
    b[v..v + 4].copy_from_slice(&TINY_CTX.to_le_bytes());
    let p = dir.join("tiny.gguf");
    std::fs::write(&p, b).expect("write tiny model");
    p
}

/// Runs the binary to completion.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    c.args(args)
        .env_remove("POCKETPERF_ISA")
        .env_remove("POCKETPERF_FAULT");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run pocketperf")
}

/// Every line of a soak journal as JSON.
pub fn journal(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("journal.jsonl")).expect("journal");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("journal line"))
        .collect()
}

/// `robustness.json` of a soak.
pub fn robustness(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("robustness.json")).expect("robustness.json");
    serde_json::from_str(&text).expect("robustness JSON")
}

/// The check named `name` of a robustness document.
pub fn check<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}"))
}

/// Records of one type.
pub fn of_type<'a>(j: &'a [serde_json::Value], t: &str) -> Vec<&'a serde_json::Value> {
    j.iter().filter(|e| e["type"] == t).collect()
}

/// Whether an `rss` journal record shows the reference model's 94 MiB of weights resident in
/// the server: mapped file pages or, on a tier that reads copies (AVX-512 VBMI: every matrix
/// of this model), the copies' anonymous pages.
pub fn holds_the_model(r: &serde_json::Value) -> bool {
    let kib = |k: &str| r[k].as_u64().unwrap();
    kib("rss_file_kib") + kib("rss_anon_kib") > 90 * 1024
}
