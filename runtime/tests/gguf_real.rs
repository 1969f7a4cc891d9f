//! The GGUF reader against the reference model SmolLM2-135M-Instruct Q4_1: every metadata
//! entry and every tensor must match `reference/smollm2-135m/gguf_info.json` (produced by
//! ggml's own gguf reader), and a 4096-aligned rewrite must keep all of it.

use std::path::PathBuf;

use pocketperf_runtime::gguf::{Array, GgufFile, Value, write_aligned};
use pocketperf_testkit::shared_dir;
use serde_json::Value as Json;

fn model_path() -> PathBuf {
    const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
    let p = if let Some(p) = std::env::var_os("POCKETPERF_MODEL") {
        PathBuf::from(p)
    } else if let Some(c) = std::env::var_os("POCKETPERF_CACHE") {
        PathBuf::from(c).join("models").join(FILE)
    } else if let Some(c) = std::env::var_os("XDG_CACHE_HOME") {
        PathBuf::from(c).join("pocketperf/models").join(FILE)
    } else {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/pocketperf/models")
            .join(FILE)
    };
    assert!(
        p.is_file(),
        "reference model not found at {} (set POCKETPERF_MODEL or fetch it into the cache)",
        p.display()
    );
    p
}

fn reference() -> Json {
    let p = shared_dir().join("reference/smollm2-135m/gguf_info.json");
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("cannot read {} ({e}); set POCKETPERF_SHARED", p.display()));
    serde_json::from_str(&text).expect("gguf_info.json parses")
}

/// Compares one of our values with its JSON rendering in gguf_info.json.
fn check_value(key: &str, ours: &Value, want: &Json) {
    match (ours, want) {
        (Value::String(s), Json::String(w)) => assert_eq!(s, w, "{key}"),
        (Value::Bool(b), Json::Bool(w)) => assert_eq!(b, w, "{key}"),
        (Value::F32(x), Json::Number(n)) => {
            assert_eq!(f64::from(*x), n.as_f64().expect("f64"), "{key}")
        }
        (Value::Array(a), Json::Object(o)) => {
            assert_eq!(a.len() as u64, o["len"].as_u64().expect("len"), "{key} len");
            let first = o["first"].as_array().expect("first");
            let ty = o["type"].as_str().expect("type");
            assert_eq!(ty, format!("ARRAY[{}]", a.elem_type()), "{key} type");
            match a {
                Array::String(v) => {
                    for (x, w) in v.iter().zip(first) {
                        assert_eq!(x, w.as_str().expect("str"), "{key}");
                    }
                }
                Array::I32(v) => {
                    for (x, w) in v.iter().zip(first) {
                        assert_eq!(i64::from(*x), w.as_i64().expect("int"), "{key}");
                    }
                }
                other => panic!("{key}: unexpected array type {:?}", other.elem_type()),
            }
        }
        (v, Json::Number(n)) => {
            let i = v
                .as_integer()
                .unwrap_or_else(|| panic!("{key}: {v:?} vs {n}"));
            assert_eq!(Some(i), n.as_i64().map(i128::from), "{key}");
        }
        (v, w) => panic!("{key}: our {v:?} does not match reference {w}"),
    }
}

fn check_against_reference(g: &GgufFile, check_offsets: bool) {
    let r = reference();
    let meta = r["metadata"].as_object().expect("metadata");
    assert_eq!(g.version() as u64, meta["GGUF.version"].as_u64().unwrap());
    assert_eq!(
        g.tensors().len() as u64,
        meta["GGUF.tensor_count"].as_u64().unwrap()
    );
    let ref_keys: Vec<&String> = meta.keys().filter(|k| !k.starts_with("GGUF.")).collect();
    let mut our_keys: Vec<&String> = g
        .metadata()
        .iter()
        .map(|(k, _)| k)
        .filter(|k| k.as_str() != "general.alignment")
        .collect();
    // serde_json keeps object keys sorted, so compare the key sets.
    our_keys.sort();
    assert_eq!(our_keys, ref_keys, "metadata keys");
    for k in ref_keys {
        check_value(k, g.get(k).expect("present"), &meta[k.as_str()]);
    }
    let tensors = r["tensors"].as_array().expect("tensors");
    assert_eq!(g.tensors().len(), tensors.len());
    for (t, w) in g.tensors().iter().zip(tensors) {
        assert_eq!(t.name, w["name"].as_str().unwrap());
        assert_eq!(t.ty.name(), w["type"].as_str().unwrap(), "{}", t.name);
        let ne: Vec<u64> = w["ne"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(t.dims, ne, "{}", t.name);
        assert_eq!(t.n_bytes, w["nbytes"].as_u64().unwrap(), "{}", t.name);
        assert_eq!(g.tensor_data(t).len() as u64, t.n_bytes, "{}", t.name);
        if check_offsets {
            assert_eq!(t.offset, w["rel_offset"].as_u64().unwrap(), "{}", t.name);
            assert_eq!(
                g.tensor_file_offset(t),
                w["abs_offset"].as_u64().unwrap(),
                "{}",
                t.name
            );
        }
    }
}

#[test]
fn reads_the_reference_model_exactly_like_ggml() {
    let g = GgufFile::open(&model_path()).expect("reference model opens");
    assert_eq!(g.version(), 3);
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(g.metadata().len(), 33);
    assert_eq!(g.data_offset(), 1_785_664);
    assert_eq!(g.alignment(), 32);
    assert_eq!(g.as_bytes().len(), 98_362_432);
    assert_eq!(g.architecture().unwrap(), "llama");
    check_against_reference(&g, true);

    // Typed getters on real keys.
    assert_eq!(g.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(g.get_f32("llama.rope.freq_base").unwrap(), 100_000.0);
    assert!(!g.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    let tokens = g.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(tokens[1], "<|im_start|>");
    assert_eq!(
        g.get_i32_array("tokenizer.ggml.token_type").unwrap().len(),
        49152
    );
    // The data slice is the file's own bytes at the reference offset.
    let t = g.tensor("blk.0.attn_norm.weight").unwrap();
    let abs = 31_866_688usize;
    assert_eq!(g.tensor_data(t), &g.as_bytes()[abs..abs + 2304]);
    // An F32 norm weight decodes to finite, non-zero numbers.
    let w: Vec<f32> = g
        .tensor_data(t)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert!(w.iter().all(|x| x.is_finite()) && w.iter().any(|&x| x != 0.0));
}

#[test]
fn typed_getters_name_the_key_when_wrong() {
    let g = GgufFile::open(&model_path()).unwrap();
    let e = g.get_u32("general.name").unwrap_err().to_string();
    assert!(e.contains("general.name") && e.contains("STRING"), "{e}");
    let e = g.get_str("no.such.key").unwrap_err().to_string();
    assert!(e.contains("no.such.key") && e.contains("missing"), "{e}");
    let e = g
        .get_f32_array("tokenizer.ggml.tokens")
        .unwrap_err()
        .to_string();
    assert!(e.contains("ARRAY[STRING]"), "{e}");
    let e = g.tensor("blk.99.attn_q.weight").unwrap_err().to_string();
    assert!(
        e.contains("blk.99.attn_q.weight") && e.contains("not found"),
        "{e}"
    );
    // 30 fits u32 from UINT32; eps is a float, not an integer.
    assert!(g.get_u32("llama.attention.layer_norm_rms_epsilon").is_err());
}

#[test]
fn write_aligned_puts_every_tensor_on_a_page_boundary() {
    let src = GgufFile::open(&model_path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("aligned.gguf");
    write_aligned(&src, &out, 4096).unwrap();
    let g = GgufFile::open(&out).unwrap();
    assert_eq!(g.alignment(), 4096);
    assert_eq!(g.get_u32("general.alignment").unwrap(), 4096);
    assert_eq!(g.data_offset() % 4096, 0);
    for t in g.tensors() {
        assert_eq!(g.tensor_file_offset(t) % 4096, 0, "{}", t.name);
    }
    // Same metadata (plus general.alignment), same tensors in the same order, same bytes.
    let mut want = src.metadata().to_vec();
    want.push(("general.alignment".to_string(), Value::U32(4096)));
    assert_eq!(g.metadata(), &want[..]);
    assert_eq!(g.tensors().len(), src.tensors().len());
    for (a, b) in g.tensors().iter().zip(src.tensors()) {
        assert_eq!(
            (&a.name, &a.dims, a.ty, a.n_bytes),
            (&b.name, &b.dims, b.ty, b.n_bytes)
        );
        assert!(
            g.tensor_data(a) == src.tensor_data(b),
            "{} bytes differ",
            a.name
        );
    }
    check_against_reference(&g, false);
    // Rewriting onto the source itself is refused rather than corrupting the mapping.
    assert!(write_aligned(&g, &out, 4096).is_err());
}
