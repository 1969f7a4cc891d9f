//! `--kv-type` as a user gives it, on synthetic tiny models: `bench` writes it in its
//! settings and counts the KV bytes a decoded token reads by the type (closed form below),
//! `perplexity` and `logits` run with it and their numbers move off the f16 cache's, and what
//! cannot run (`bench` and `generate` on a head size of 16) is refused naming the flag or the
//! head size (a Q8_0 group is 32 values).

use pocketperf_runtime::GgmlType;
use pocketperf_testkit::{TinyLlama, tiny_llama};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn pocketperf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(args)
        .env_remove("POCKETPERF_ISA")
        .output()
        .expect("run pocketperf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Two layers, 4 query heads and 2 KV heads of `head_dim` values.
const LAYERS: u64 = 2;
const KV_HEADS: u64 = 2;

fn tiny(dir: &Path, name: &str, head_dim: usize) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        tiny_llama(TinyLlama {
            n_layers: LAYERS as usize,
            n_embd: 4 * head_dim,
            n_heads: 4,
            n_kv_heads: KV_HEADS as usize,
            matrix_type: GgmlType::F32,
            ..TinyLlama::default()
        }),
    )
    .unwrap();
    p
}

/// Bytes of K and V one decoded token reads after `past` tokens, averaged over `n` tokens:
/// per position and layer, K and V of `KV_HEADS × head_dim` values at 2 bytes (f16) or 1
/// byte plus an f16 scale per 32 (Q8_0).
fn kv_read(head_dim: u64, q8: bool, past: u64, n: u64) -> u64 {
    let values = KV_HEADS * head_dim;
    let per = if q8 {
        values + values / 32 * 2
    } else {
        2 * values
    };
    let total: u64 = (past..past + n).map(|p| 2 * per * LAYERS * (p + 1)).sum();
    total / n
}

fn bench_json(model: &Path, kv_type: &str) -> Value {
    let m = model.to_str().unwrap();
    let o = pocketperf(&[
        "bench",
        "--model",
        m,
        "--threads",
        "1",
        "--pp",
        "8",
        "--tg",
        "4",
        "--depth",
        "0,32",
        "--batch",
        "0,2",
        "--reps",
        "1",
        "--probe-mib",
        "0",
        "--kv-type",
        kv_type,
        "--output",
        "json",
    ]);
    assert!(
        o.status.success(),
        "bench --kv-type {kv_type}: {}",
        stderr(&o)
    );
    serde_json::from_slice(&o.stdout).expect("bench JSON")
}

#[test]
fn bench_states_the_type_and_counts_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny(dir.path(), "hd32.gguf", 32);
    for (kv_type, q8) in [("f16", false), ("q8_0", true)] {
        let v = bench_json(&model, kv_type);
        assert_eq!(v["header"]["settings"]["kv_type"], kv_type, "{v}");
        let rows = v["rows"].as_array().expect("rows");
        let row = |test: &str| {
            rows.iter()
                .find(|r| r["test"] == test)
                .unwrap_or_else(|| panic!("row {test} in {v}"))
        };
        for (test, past) in [("tg4", 0), ("tg4@d32", 32), ("tg4×2@d32", 32)] {
            assert_eq!(
                row(test)["kv_bytes_per_token"].as_u64(),
                Some(kv_read(32, q8, past, 4)),
                "{kv_type} {test}"
            );
        }
    }
}

#[test]
fn perplexity_and_logits_read_the_quantized_cache() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny(dir.path(), "hd32.gguf", 32);
    let m = model.to_str().unwrap();
    let text = dir.path().join("text.txt");
    let words: Vec<String> = (0..200).map(|i| format!("w{}", (i * 37) % 101)).collect();
    std::fs::write(&text, words.join(" ")).unwrap();
    let t = text.to_str().unwrap();
    let ppl = |kv_type: &str| {
        let o = pocketperf(&[
            "perplexity",
            "--model",
            m,
            "--file",
            t,
            "--ctx",
            "64",
            "--kv-type",
            kv_type,
            "--json",
        ]);
        assert!(o.status.success(), "perplexity: {}", stderr(&o));
        let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
        assert_eq!(v["kv_type"], kv_type);
        v["ppl"].as_f64().expect("ppl")
    };
    let (a, b) = (ppl("f16"), ppl("q8_0"));
    assert!(
        a.is_finite() && b.is_finite() && a != b,
        "f16 {a}, q8_0 {b}"
    );
    // Within a few percent: the cache is quantized, not broken.
    assert!((b / a - 1.0).abs() < 0.05, "f16 {a}, q8_0 {b}");
    let raw = |kv_type: &str| {
        let out = dir.path().join(format!("logits-{kv_type}.f32"));
        let o = pocketperf(&[
            "logits",
            "--model",
            m,
            "--prompt-ids",
            "1,5,9,13,17,21,25,29",
            "--kv-type",
            kv_type,
            "--raw-out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "logits: {}", stderr(&o));
        std::fs::read(&out).unwrap()
    };
    assert_ne!(raw("f16"), raw("q8_0"));
}

#[test]
fn what_cannot_run_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let m16 = tiny(dir.path(), "hd16.gguf", 16);
    let m32 = tiny(dir.path(), "hd32.gguf", 32);
    let run = |args: &[&str]| {
        let o = pocketperf(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        stderr(&o)
    };
    let e = run(&[
        "bench",
        "--model",
        m16.to_str().unwrap(),
        "--threads",
        "1",
        "--pp",
        "8",
        "--tg",
        "4",
        "--batch",
        "0",
        "--reps",
        "1",
        "--probe-mib",
        "0",
        "--kv-type",
        "q8_0",
    ]);
    assert!(e.contains("head size 16"), "{e}");
    // generate hands the type to its session too.
    let e = run(&[
        "generate",
        "--model",
        m16.to_str().unwrap(),
        "--prompt",
        "a b c",
        "--max-tokens",
        "2",
        "--ctx",
        "32",
        "--kv-type",
        "q8_0",
    ]);
    assert!(e.contains("head size 16"), "{e}");
    let e = run(&[
        "bench",
        "--model",
        m32.to_str().unwrap(),
        "--kv-type",
        "q4_0",
    ]);
    assert!(e.contains("--kv-type") && e.contains("q4_0"), "{e}");
    let e = run(&[
        "bench",
        "--model",
        m32.to_str().unwrap(),
        "--cold",
        "--pp",
        "0",
        "--tg",
        "0",
        "--batch",
        "0",
        "--probe-mib",
        "0",
        "--kv-type",
        "q8_0",
    ]);
    assert!(e.contains("--kv-type q8_0 with --cold"), "{e}");
}
