//! Locating the shared reference material and the reference model for tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub fn shared_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("POCKETPERF_SHARED") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("../shared")
}

pub fn reference_dir() -> PathBuf {
    let d = shared_dir().join("reference/smollm2-135m");
    assert!(
        d.is_dir(),
        "reference outputs not found at {} (set POCKETPERF_SHARED)",
        d.display()
    );
    d
}

pub fn model_path() -> PathBuf {
    const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
    let p = if let Some(p) = std::env::var_os("POCKETPERF_MODEL") {
        PathBuf::from(p)
    } else if let Some(c) = std::env::var_os("POCKETPERF_CACHE") {
        PathBuf::from(c).join("models").join(FILE)
    } else if let Some(c) = std::env::var_os("XDG_CACHE_HOME") {
        PathBuf::from(c).join("pocketperf/models").join(FILE)
    } else {
        PathBuf::from(std::env::var_os("HOME").expect("HOME"))
            .join(".cache/pocketperf/models")
            .join(FILE)
    };
    assert!(
        p.exists(),
        "reference model not found at {}: run `pocketperf model fetch` (scripts/setup.sh does)",
        p.display()
    );
    p
}

pub fn read_f32_le(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
