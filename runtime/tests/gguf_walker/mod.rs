//! An independent walker over a *valid* GGUF file (ggml `docs/gguf.md`): where every field
//! starts, so each corruption test knows exactly which field and offset the reader must
//! blame; and the assertions on the reader's `Error::Gguf`. It trusts its input and shares
//! no code with the reader.

use pocketperf_runtime::Error;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::GgufFile;

#[derive(Debug, Clone)]
pub struct KvAt {
    pub key: String,
    pub start: usize,
    pub key_at: usize,
    pub type_at: usize,
    pub value_at: usize,
    /// For arrays: the element type and length fields.
    pub array: Option<(usize, usize)>,
    pub end: usize,
}

#[derive(Debug, Clone)]
pub struct TensorAt {
    pub name: String,
    pub start: usize,
    pub ndims_at: usize,
    pub dims_at: Vec<usize>,
    pub type_at: usize,
    pub offset_at: usize,
    pub end: usize,
    pub rel_offset: u64,
    pub n_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct Layout_ {
    pub kvs: Vec<KvAt>,
    pub tensors: Vec<TensorAt>,
    pub header_end: usize,
    pub data_offset: usize,
}

pub fn rd_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

pub fn rd_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Bytes of a value of type `ty` at `at` (the walker trusts the file: it is valid).
pub fn value_len(b: &[u8], ty: u32, at: usize) -> usize {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        8 => 8 + rd_u64(b, at) as usize,
        9 => {
            let et = rd_u32(b, at);
            let n = rd_u64(b, at + 4) as usize;
            let mut p = at + 12;
            for _ in 0..n {
                p += value_len(b, et, p);
            }
            p - at
        }
        t => panic!("walker: value type {t}"),
    }
}

pub fn walk(b: &[u8]) -> Layout_ {
    let n_tensors = rd_u64(b, 8) as usize;
    let n_kv = rd_u64(b, 16) as usize;
    let mut p = 24;
    let mut alignment = 32u64;
    let mut kvs = Vec::new();
    for _ in 0..n_kv {
        let start = p;
        let klen = rd_u64(b, p) as usize;
        let key = String::from_utf8(b[p + 8..p + 8 + klen].to_vec()).unwrap();
        let type_at = p + 8 + klen;
        let ty = rd_u32(b, type_at);
        let value_at = type_at + 4;
        let end = value_at + value_len(b, ty, value_at);
        if key == "general.alignment" && ty == 4 && rd_u32(b, value_at).is_power_of_two() {
            alignment = rd_u32(b, value_at) as u64;
        }
        kvs.push(KvAt {
            key,
            start,
            key_at: start + 8,
            type_at,
            value_at,
            array: (ty == 9).then_some((value_at, value_at + 4)),
            end,
        });
        p = end;
    }
    let mut tensors = Vec::new();
    for _ in 0..n_tensors {
        let start = p;
        let nlen = rd_u64(b, p) as usize;
        let name = String::from_utf8(b[p + 8..p + 8 + nlen].to_vec()).unwrap();
        let ndims_at = p + 8 + nlen;
        let nd = rd_u32(b, ndims_at) as usize;
        let dims_at: Vec<usize> = (0..nd).map(|d| ndims_at + 4 + 8 * d).collect();
        let dims: Vec<u64> = dims_at.iter().map(|&a| rd_u64(b, a)).collect();
        let type_at = ndims_at + 4 + 8 * nd;
        let ty = GgmlType::from_id(rd_u32(b, type_at)).unwrap();
        let offset_at = type_at + 4;
        let n: u64 = dims.iter().product();
        let n_bytes = ty.row_bytes(dims[0]).unwrap() * (n / dims[0]);
        tensors.push(TensorAt {
            name,
            start,
            ndims_at,
            dims_at,
            type_at,
            offset_at,
            end: offset_at + 8,
            rel_offset: rd_u64(b, offset_at),
            n_bytes,
        });
        p = offset_at + 8;
    }
    let data_offset = (p as u64).div_ceil(alignment) * alignment;
    Layout_ {
        kvs,
        tensors,
        header_end: p,
        data_offset: data_offset as usize,
    }
}

/// The field the reader must blame when the file ends at `cut` (the first missing byte).
pub fn blamed_field(b: &[u8], l: &Layout_, cut: usize) -> String {
    let (n_tensors, n_kv) = (rd_u64(b, 8), rd_u64(b, 16));
    match cut {
        0..=3 => return "header.magic".into(),
        4..=7 => return "header.version".into(),
        8..=15 => return "header.tensor_count".into(),
        16..=23 => return "header.kv_count".into(),
        _ => {}
    }
    let left = (cut - 24) as u64;
    if n_kv * 13 > left {
        return "header.kv_count".into();
    }
    if n_tensors * 24 > left {
        return "header.tensor_count".into();
    }
    for (i, k) in l.kvs.iter().enumerate() {
        if cut < k.end {
            return if cut < k.type_at {
                format!("kv[{i}].key")
            } else if cut < k.value_at {
                format!("kv[{i}].type")
            } else {
                format!("kv[{i}].value")
            };
        }
    }
    for (i, t) in l.tensors.iter().enumerate() {
        if cut < t.end {
            return if cut < t.ndims_at {
                format!("tensor_infos[{i}].name")
            } else if cut < t.ndims_at + 4 {
                format!("tensor_infos[{i}].n_dims")
            } else if cut < t.type_at {
                let d = (cut - t.ndims_at - 4) / 8;
                format!("tensor_infos[{i}].dims[{d}]")
            } else if cut < t.offset_at {
                format!("tensor_infos[{i}].type")
            } else {
                format!("tensor_infos[{i}].offset")
            };
        }
    }
    if cut < l.data_offset {
        return "tensor_data".into();
    }
    for (i, t) in l.tensors.iter().enumerate() {
        if (l.data_offset as u64 + t.rel_offset + t.n_bytes) > cut as u64 {
            return format!("tensor_infos[{i}].offset");
        }
    }
    panic!("cut {cut} leaves a complete file")
}

/// The `Error::Gguf` of a parse that must fail.
pub fn gguf_err(name: &str, bytes: Vec<u8>) -> (String, u64, String, String) {
    match GgufFile::from_bytes(name, bytes) {
        Ok(_) => panic!("{name}: parsed a corrupt file"),
        Err(e @ Error::Gguf { .. }) => {
            let msg = e.to_string();
            let Error::Gguf {
                field,
                offset,
                reason,
                ..
            } = e
            else {
                unreachable!()
            };
            (field, offset, reason, msg)
        }
        Err(e) => panic!("{name}: not a GGUF error: {e}"),
    }
}

/// Asserts a corrupt file fails at exactly `field…` and `offset`, with `why` in the reason.
#[track_caller]
pub fn expect_err(bytes: Vec<u8>, field: &str, offset: usize, why: &str) {
    let (f, o, reason, msg) = gguf_err("corrupt.gguf", bytes);
    assert!(
        f.starts_with(field),
        "field {f:?}, expected {field:?}: {msg}"
    );
    assert_eq!(o, offset as u64, "offset: {msg}");
    assert!(reason.contains(why), "reason lacks {why:?}: {msg}");
    assert!(
        msg.starts_with("corrupt.gguf: invalid GGUF: ") && msg.contains(&format!("offset {o}")),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "one line: {msg}");
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn kv<'a>(l: &'a Layout_, key: &str) -> (usize, &'a KvAt) {
    l.kvs
        .iter()
        .enumerate()
        .find(|(_, k)| k.key == key)
        .unwrap_or_else(|| panic!("no key {key}"))
}
