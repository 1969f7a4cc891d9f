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

/// The cases of the llama.cpp greedy-and-logits reference.
pub fn cases() -> Vec<serde_json::Value> {
    let p = reference_dir().join("greedy_and_logits.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["cases"].as_array().unwrap().clone()
}

/// A JSON array of token ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Index of the largest logit and its margin over the runner-up.
pub fn top2(l: &[f32]) -> (u32, f32) {
    let (mut a, mut b) = (0usize, usize::MAX);
    for i in 1..l.len() {
        if l[i] > l[a] {
            b = a;
            a = i;
        } else if b == usize::MAX || l[i] > l[b] {
            b = i;
        }
    }
    (a as u32, l[a] - l[b])
}

/// Root-mean-square difference of two equal-length vectors.
pub fn rms(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    (a.iter()
        .zip(b)
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum::<f64>()
        / a.len() as f64)
        .sqrt()
}
