//! The body of the `gguf_open` fuzz target and its seed corpus.
//!
//! [`open_and_touch`] treats its input as a hostile model file: it parses it, reads every
//! metadata value through every typed getter, takes every tensor's zero-copy view and decodes
//! its data, then builds the tokenizer and the model from whatever parsed. Any panic, abort
//! or out-of-memory is a bug; an error is fine, but a parse error must be a GGUF error that
//! names a field and an offset inside the input.
//!
//! The runtime's test `gguf_corrupt` drives it over mutated copies of [`seeds`], so CI
//! exercises it on the stable toolchain without libFuzzer. The fuzz target (`fuzz/`, a
//! workspace of its own) compiles this file and `gguf.rs` into its library by `#[path]`, so
//! this file names the builders only as `crate::gguf::…`, which resolves in both crates.

use std::sync::Arc;

use pocketperf_runtime::Error;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::{Array, GgufFile, GgufWriter};
use pocketperf_runtime::model::Model;
use pocketperf_runtime::quant::{self, BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1};
use pocketperf_runtime::tokenizer::Tokenizer;

use crate::gguf::{TinyLlama, synthetic_all_types, tiny_llama};

/// What one call touched (for tests that check a valid input went all the way through).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Touched {
    pub parsed: bool,
    pub metadata: usize,
    pub tensors: usize,
    /// Elements decoded across all tensors.
    pub elements: u64,
    pub tokenizer: bool,
    pub model: bool,
}

/// Largest tensor decoded element by element; bigger ones (real models) are only viewed.
const DECODE_LIMIT: u64 = 1 << 22;

/// Parses `data` as GGUF and touches everything in it. Panics only on a broken invariant of
/// the reader (which is what the fuzzer looks for).
pub fn open_and_touch(data: &[u8]) -> Touched {
    let mut out = Touched::default();
    let g = match GgufFile::from_bytes("input.gguf", data.to_vec()) {
        Ok(g) => g,
        Err(e) => {
            match &e {
                Error::Gguf { field, offset, .. } => {
                    assert!(!field.is_empty(), "error without a field: {e}");
                    assert!(
                        *offset <= data.len() as u64,
                        "error offset {offset} outside a {}-byte input: {e}",
                        data.len()
                    );
                }
                other => panic!("parse failed with a non-GGUF error: {other}"),
            }
            let _ = e.to_string();
            return out;
        }
    };
    out.parsed = true;
    assert!(g.version() == 2 || g.version() == 3);
    assert!(g.alignment().is_power_of_two());
    assert_eq!(g.data_offset() % g.alignment(), 0);

    for (key, v) in g.metadata() {
        out.metadata += 1;
        assert!(g.get(key).is_some(), "key {key} not indexed");
        let _ = (v.to_string(), v.type_name(), v.as_integer(), v.as_float());
        let _ = (
            g.get_u32(key),
            g.get_u64(key),
            g.get_f32(key),
            g.get_bool(key),
        );
        let _ = g.get_str(key);
        if let Some(a) = v.as_array() {
            touch_array(a);
            let _ = (
                g.get_str_array(key),
                g.get_f32_array(key),
                g.get_i32_array(key),
            );
        }
    }
    let _ = g.architecture();

    let file_len = g.as_bytes().len() as u64;
    for t in g.tensors() {
        out.tensors += 1;
        assert!(
            std::ptr::eq(g.tensor(&t.name).expect("indexed"), t),
            "{} not indexed",
            t.name
        );
        let bytes = g.tensor_data(t);
        assert_eq!(bytes.len() as u64, t.n_bytes, "{}", t.name);
        let start = g.tensor_file_offset(t);
        assert!(start >= g.data_offset() && start + t.n_bytes <= file_len);
        assert_eq!(start % g.alignment(), 0, "{}", t.name);
        let n = t.n_elements();
        assert_eq!(
            t.ty.row_bytes(t.dims[0]).map(|r| r * (n / t.dims[0])),
            Some(t.n_bytes)
        );
        out.elements += touch_tensor(&g, t, n);
    }

    // The layers above the reader must refuse a hostile file cleanly too.
    out.tokenizer = match Tokenizer::from_gguf(&g) {
        Ok(tok) => {
            let ids = tok.encode("Hello, world! 123 <|im_start|>", true);
            if let Ok(ids) = ids {
                let _ = tok.decode(&ids);
            }
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    };
    out.model = match Model::from_gguf(Arc::new(g)) {
        Ok(m) => {
            let _ = m.bytes_per_token();
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    };
    out
}

fn touch_array(a: &Array) {
    let _ = (a.len(), a.is_empty(), a.elem_type());
    if let Array::Array(inner) = a {
        for x in inner {
            touch_array(x);
        }
    }
}

/// Takes the typed view of a tensor and decodes its data (when small); returns the elements
/// decoded.
fn touch_tensor(g: &GgufFile, t: &pocketperf_runtime::gguf::TensorInfo, n: u64) -> u64 {
    let blocks = match t.ty {
        GgmlType::F32 => g.tensor_view::<f32>(t).map(<[f32]>::len),
        GgmlType::F16 | GgmlType::BF16 | GgmlType::I16 => g.tensor_view::<u16>(t).map(<[u16]>::len),
        GgmlType::I8 => g.tensor_view::<i8>(t).map(<[i8]>::len),
        GgmlType::I32 => g.tensor_view::<i32>(t).map(<[i32]>::len),
        GgmlType::I64 => g.tensor_view::<i64>(t).map(<[i64]>::len),
        GgmlType::F64 => g.tensor_view::<f64>(t).map(<[f64]>::len),
        GgmlType::Q4_0 => g.tensor_view::<BlockQ4_0>(t).map(<[BlockQ4_0]>::len),
        GgmlType::Q4_1 => g.tensor_view::<BlockQ4_1>(t).map(<[BlockQ4_1]>::len),
        GgmlType::Q8_0 => g.tensor_view::<BlockQ8_0>(t).map(<[BlockQ8_0]>::len),
        GgmlType::Q8_1 => g.tensor_view::<BlockQ8_1>(t).map(<[BlockQ8_1]>::len),
        _ => Ok((t.n_bytes / t.ty.block_bytes() as u64) as usize),
    };
    // The reader aligns every tensor for its type, so the view always exists.
    let blocks = blocks.unwrap_or_else(|e| panic!("view of {}: {e}", t.name));
    assert_eq!(blocks as u64 * t.ty.block_len() as u64, n, "{}", t.name);
    if n > DECODE_LIMIT {
        return 0;
    }
    let cols = t.dims[0] as usize;
    let row_bytes = t.ty.row_bytes(t.dims[0]).unwrap_or(0) as usize;
    let mut row = vec![0f32; cols];
    let mut decoded = 0;
    for r in g.tensor_data(t).chunks_exact(row_bytes.max(1)) {
        match quant::dequantize_row(t.ty, r, &mut row) {
            Ok(()) => {
                let _ = row.iter().fold(0f32, |a, &x| a + x);
                decoded += cols as u64;
            }
            Err(_) => break, // a type without a decoder (K-quants, integers)
        }
    }
    decoded
}

/// The seed corpus: the all-types file, a tiny model at two alignments and versions.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let small = TinyLlama {
        n_layers: 1,
        n_embd: 32,
        n_heads: 2,
        n_kv_heads: 1,
        n_ff: 32,
        matrix_type: GgmlType::Q4_1,
        ..TinyLlama::default()
    };
    let tiny = tiny_llama(small);
    let mut v2 = tiny.clone();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    let aligned = {
        let g = GgufFile::from_bytes("tiny", tiny.clone()).unwrap_or_else(|e| panic!("{e}"));
        let mut w = GgufWriter::new();
        for (k, v) in g.metadata() {
            w.add_metadata(k, v.clone());
        }
        w.set_alignment(64).unwrap_or_else(|e| panic!("{e}"));
        for t in g.tensors() {
            w.add_tensor(&t.name, &t.dims, t.ty, g.tensor_data(t))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        w.to_bytes()
    };
    vec![
        ("all_types".into(), synthetic_all_types()),
        ("tiny_llama".into(), tiny),
        ("tiny_llama_v2".into(), v2),
        ("tiny_llama_align64".into(), aligned),
    ]
}
