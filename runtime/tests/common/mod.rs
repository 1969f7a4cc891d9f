//! Locating the shared reference material and the reference model for tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The shared reference material (`$POCKETPERF_SHARED`, else `../shared` beside the
/// workspace): the testkit's lookup.
pub fn shared_dir() -> PathBuf {
    pocketperf_testkit::shared_dir()
}

/// The reference outputs of the smollm2-135m model.
pub fn reference_dir() -> PathBuf {
    reference_dir_for("smollm2-135m")
}

/// The llama.cpp reference outputs of a catalog model (`smollm2-135m`, `gemma3-270m`,
/// `qwen2.5-coder-0.5b`).
pub fn reference_dir_for(name: &str) -> PathBuf {
    let d = shared_dir().join("reference").join(name);
    assert!(
        d.is_dir(),
        "reference outputs not found at {} (set POCKETPERF_SHARED)",
        d.display()
    );
    d
}

/// The cached file name of each catalog model (the harness's catalog fetches them there).
pub fn model_file(name: &str) -> &'static str {
    match name {
        "smollm2-135m" => "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gemma3-270m" => "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b" => "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
        other => panic!("no catalog model named {other}"),
    }
}

fn cache_models_dir() -> PathBuf {
    if let Some(c) = std::env::var_os("POCKETPERF_CACHE") {
        PathBuf::from(c).join("models")
    } else if let Some(c) = std::env::var_os("XDG_CACHE_HOME") {
        PathBuf::from(c).join("pocketperf/models")
    } else {
        PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/pocketperf/models")
    }
}

/// The reference model (`POCKETPERF_MODEL` overrides the cache).
pub fn model_path() -> PathBuf {
    let p = match std::env::var_os("POCKETPERF_MODEL") {
        Some(p) => PathBuf::from(p),
        None => cache_models_dir().join(model_file("smollm2-135m")),
    };
    assert!(
        p.exists(),
        "reference model not found at {}: run `pocketperf model fetch` (scripts/setup.sh does)",
        p.display()
    );
    p
}

/// A catalog model in the cache.
pub fn model_path_for(name: &str) -> PathBuf {
    let p = cache_models_dir().join(model_file(name));
    assert!(
        p.exists(),
        "model {name} not found at {}: run `pocketperf model fetch {name}` (scripts/setup.sh does)",
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
    cases_for("smollm2-135m")
}

/// The cases of a catalog model's greedy-and-logits reference.
pub fn cases_for(name: &str) -> Vec<serde_json::Value> {
    let p = reference_dir_for(name).join("greedy_and_logits.json");
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

/// The SIMD tiers to check against the scalar reference on this CPU, with whether VNNI is
/// switched off for the run (the AVX-512 tier is checked with and without it).
pub fn simd_tiers() -> Vec<(pocketperf_runtime::quant::Isa, bool)> {
    use pocketperf_runtime::quant::{self, Isa};
    let mut t = Vec::new();
    if quant::supported(Isa::Avx2) {
        t.push((Isa::Avx2, false));
    }
    if quant::supported(Isa::Avx512) {
        t.push((Isa::Avx512, false));
        if quant::has_vnni() {
            t.push((Isa::Avx512, true));
        }
    }
    if quant::supported(Isa::Neon) {
        t.push((Isa::Neon, false));
    }
    t
}

/// Runs `f` with the AVX-512 tier's VNNI path switched off when `vnni_off`.
pub fn with_flavor<T>(vnni_off: bool, f: impl FnOnce() -> T) -> T {
    pocketperf_runtime::quant::set_vnni_disabled(vnni_off);
    let r = f();
    pocketperf_runtime::quant::set_vnni_disabled(false);
    r
}

/// xorshift32 in [-1, 1).
pub struct Rng(pub u32);

impl Rng {
    pub fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }
}

/// The product `w · xᵀ` of `n` activation rows `x` (row-major) on `isa`, as one worker's single
/// span of every weight row (no pool): the pool's chunks of small matrices are shorter than
/// the AVX2 tier's groups of eight weight rows, which a whole span reaches.
pub fn matmul_one_span(
    isa: pocketperf_runtime::quant::Isa,
    w: &pocketperf_runtime::quant::WeightMatrix<'_>,
    x: &[f32],
    n: usize,
) -> Vec<f32> {
    use pocketperf_runtime::quant::{self, QuantizedActs};
    let mut acts = QuantizedActs::new(n, w.cols);
    acts.quantize_for(isa, w.ty, x, n, w.cols);
    let mut y = vec![f32::NAN; n * w.rows];
    let out = quant::OutRows::new(&mut y, n, w.rows, w.rows, false);
    // SAFETY: one caller writes `y`, which outlives the call.
    unsafe { quant::matmul_rows(isa, w, &acts, n, 0, w.rows, out) };
    y
}
