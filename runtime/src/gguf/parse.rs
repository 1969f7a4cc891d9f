//! Reading and validating the parts of a GGUF file before its data section (ggml
//! `docs/gguf.md`, versions 2 and 3, little-endian): header, key/value metadata, tensor
//! infos and the padding to the alignment. Every count and length is checked against the
//! bytes that remain before anything is allocated; failures are [`Error::Gguf`] naming the
//! field and the byte offset.

use std::collections::HashMap;

use super::{
    Array, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_KV, MAX_STRING_LEN,
    MAX_TENSORS, StrList, TensorInfo, Value, ValueType,
};
use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;

/// Most entries reserved up front for any list read from the file; longer lists grow as their
/// entries are actually read, so a hostile count never buys an allocation by itself.
const MAX_RESERVE: usize = 4096;

/// Capacity to reserve for a list of `n` entries read from the file.
fn reserve(n: u64) -> usize {
    n.min(MAX_RESERVE as u64) as usize
}

pub(super) struct Parsed {
    pub(super) version: u32,
    pub(super) metadata: Vec<(String, Value)>,
    pub(super) kv_index: HashMap<String, usize>,
    pub(super) tensors: Vec<TensorInfo>,
    pub(super) tensor_index: HashMap<String, usize>,
    pub(super) alignment: u64,
    pub(super) data_offset: u64,
}

/// A bounds-checked little-endian cursor that reports failures as `Error::Gguf`.
struct Reader<'a> {
    file: &'a str,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, field: String, offset: usize, reason: impl Into<String>) -> Error {
        Error::Gguf {
            file: self.file.to_string(),
            field,
            offset: offset as u64,
            reason: reason.into(),
        }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, field: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(
                field(),
                self.pos,
                format!(
                    "truncated: needs {n} bytes, only {} left in a {}-byte file",
                    self.remaining(),
                    self.buf.len()
                ),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, field: &dyn Fn() -> String) -> Result<u32> {
        self.array::<4>(field).map(u32::from_le_bytes)
    }

    fn u64(&mut self, field: &dyn Fn() -> String) -> Result<u64> {
        self.array::<8>(field).map(u64::from_le_bytes)
    }

    /// A GGUF string: u64 length, then that many UTF-8 bytes.
    fn string(&mut self, field: &dyn Fn() -> String) -> Result<String> {
        self.str_ref(field).map(str::to_string)
    }

    /// [`Reader::string`], borrowed from the buffer.
    fn str_ref(&mut self, field: &dyn Fn() -> String) -> Result<&'a str> {
        let at = self.pos;
        let len = self.u64(&|| format!("{} (length)", field()))?;
        if len > MAX_STRING_LEN {
            return Err(self.err(
                field(),
                at,
                format!("string length {len} exceeds the cap of {MAX_STRING_LEN} bytes"),
            ));
        }
        if len > self.remaining() as u64 {
            return Err(self.err(
                field(),
                at,
                format!(
                    "string length {len} runs past the end of the file ({} bytes left)",
                    self.remaining()
                ),
            ));
        }
        let body_at = self.pos;
        let bytes = self.take(len as usize, field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s),
            Err(e) => Err(self.err(
                field(),
                body_at + e.valid_up_to(),
                "string is not valid UTF-8",
            )),
        }
    }

    fn value_type(&mut self, field: &dyn Fn() -> String) -> Result<ValueType> {
        let at = self.pos;
        let id = self.u32(field)?;
        ValueType::from_id(id).ok_or_else(|| {
            self.err(
                field(),
                at,
                format!("unknown value type id {id} (valid: 0..=12)"),
            )
        })
    }

    fn value(&mut self, ty: ValueType, depth: u32, field: &dyn Fn() -> String) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(field)?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array::<1>(field)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array::<2>(field)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array::<2>(field)?)),
            ValueType::U32 => Value::U32(self.u32(field)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array::<4>(field)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array::<4>(field)?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.array::<1>(field)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => {
                        return Err(self.err(
                            field(),
                            at,
                            format!("bool byte {b} is neither 0 nor 1"),
                        ));
                    }
                }
            }
            ValueType::String => Value::String(self.string(field)?),
            ValueType::U64 => Value::U64(self.u64(field)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array::<8>(field)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array::<8>(field)?)),
            ValueType::Array => Value::Array(self.array_value(depth, field)?),
        })
    }

    fn array_value(&mut self, depth: u32, field: &dyn Fn() -> String) -> Result<Array> {
        let at = self.pos;
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.err(
                field(),
                at,
                format!("arrays nested deeper than {MAX_ARRAY_DEPTH} levels"),
            ));
        }
        let elem = self.value_type(&|| format!("{} (element type)", field()))?;
        let len_at = self.pos;
        let len = self.u64(&|| format!("{} (length)", field()))?;
        let min = elem.min_size() as u64;
        let fits = len
            .checked_mul(min)
            .is_some_and(|need| need <= self.remaining() as u64);
        if !fits {
            return Err(self.err(
                field(),
                len_at,
                format!(
                    "array of {len} {elem} elements cannot fit in the {} bytes left",
                    self.remaining()
                ),
            ));
        }
        let n = len as usize;
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                const W: usize = std::mem::size_of::<$t>();
                let bytes = self.take(n * W, field)?;
                Array::$variant(
                    bytes
                        .chunks_exact(W)
                        .map(|c| {
                            let mut a = [0u8; W];
                            a.copy_from_slice(c);
                            <$t>::from_le_bytes(a)
                        })
                        .collect(),
                )
            }};
        }
        Ok(match elem {
            ValueType::U8 => Array::U8(self.take(n, field)?.to_vec()),
            ValueType::I8 => fixed!(I8, i8),
            ValueType::U16 => fixed!(U16, u16),
            ValueType::I16 => fixed!(I16, i16),
            ValueType::U32 => fixed!(U32, u32),
            ValueType::I32 => fixed!(I32, i32),
            ValueType::F32 => fixed!(F32, f32),
            ValueType::U64 => fixed!(U64, u64),
            ValueType::I64 => fixed!(I64, i64),
            ValueType::F64 => fixed!(F64, f64),
            ValueType::Bool => {
                let start = self.pos;
                let bytes = self.take(n, field)?;
                let mut out = Vec::with_capacity(n);
                for (i, &b) in bytes.iter().enumerate() {
                    match b {
                        0 => out.push(false),
                        1 => out.push(true),
                        _ => {
                            return Err(self.err(
                                format!("{}[{i}]", field()),
                                start + i,
                                format!("bool byte {b} is neither 0 nor 1"),
                            ));
                        }
                    }
                }
                Array::Bool(out)
            }
            ValueType::String => {
                let mut out = StrList::with_capacity(reserve(len));
                for i in 0..n {
                    let at = self.pos;
                    let s = self.str_ref(&|| format!("{}[{i}]", field()))?;
                    out.push(s).map_err(|_| {
                        self.err(
                            format!("{}[{i}]", field()),
                            at,
                            "the array's strings pass 4 GiB together".to_string(),
                        )
                    })?;
                }
                Array::String(out)
            }
            ValueType::Array => {
                let mut out = Vec::with_capacity(reserve(len));
                for i in 0..n {
                    out.push(self.array_value(depth + 1, &|| format!("{}[{i}]", field()))?);
                }
                Array::Array(out)
            }
        })
    }
}

pub(super) fn parse_header(file: &str, buf: &[u8]) -> Result<Parsed> {
    let mut r = Reader { file, buf, pos: 0 };

    let magic = r.take(4, &|| "header.magic".to_string()).map_err(|_| {
        r_err(
            file,
            "header.magic",
            0,
            format!(
                "not a GGUF file: only {} bytes, too short for the GGUF header",
                buf.len()
            ),
        )
    })?;
    if magic != GGUF_MAGIC {
        return Err(r_err(
            file,
            "header.magic",
            0,
            format!(
                "not a GGUF file: bad magic {:02x?} ({:?}) at offset 0, expected \"GGUF\"",
                magic,
                String::from_utf8_lossy(magic)
            ),
        ));
    }
    let version = r.u32(&|| "header.version".to_string())?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(r_err(
                file,
                "header.version",
                4,
                "GGUF version 1 (32-bit counts) is not supported; convert the model again"
                    .to_string(),
            ));
        }
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
            return Err(r_err(
                file,
                "header.version",
                4,
                format!(
                    "big-endian GGUF (version {}) is not supported",
                    v.swap_bytes()
                ),
            ));
        }
        v => {
            return Err(r_err(
                file,
                "header.version",
                4,
                format!("unsupported GGUF version {v} (supported: 2, 3)"),
            ));
        }
    }
    let n_tensors = r.u64(&|| "header.tensor_count".to_string())?;
    if n_tensors > MAX_TENSORS {
        return Err(r_err(
            file,
            "header.tensor_count",
            8,
            format!("{n_tensors} tensors exceeds the cap of {MAX_TENSORS}"),
        ));
    }
    let n_kv = r.u64(&|| "header.kv_count".to_string())?;
    if n_kv > MAX_KV {
        return Err(r_err(
            file,
            "header.kv_count",
            16,
            format!("{n_kv} metadata entries exceeds the cap of {MAX_KV}"),
        ));
    }
    // Each entry needs at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at least
    // 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
    if n_kv.saturating_mul(13) > r.remaining() as u64 {
        return Err(r_err(
            file,
            "header.kv_count",
            16,
            format!(
                "{n_kv} metadata entries cannot fit in the {} bytes left",
                r.remaining()
            ),
        ));
    }
    if n_tensors.saturating_mul(24) > r.remaining() as u64 {
        return Err(r_err(
            file,
            "header.tensor_count",
            8,
            format!(
                "{n_tensors} tensor infos cannot fit in the {} bytes left",
                r.remaining()
            ),
        ));
    }

    let mut metadata = Vec::with_capacity(reserve(n_kv));
    let mut kv_index = HashMap::with_capacity(reserve(n_kv));
    let mut kv_value_at = Vec::with_capacity(reserve(n_kv));
    for i in 0..n_kv as usize {
        let key_at = r.pos;
        let key = r.string(&|| format!("kv[{i}].key"))?;
        if kv_index.contains_key(&key) {
            return Err(r.err(
                format!("kv[{i}].key"),
                key_at,
                format!("duplicate metadata key `{key}`"),
            ));
        }
        let ty = r.value_type(&|| format!("kv[{i}].type (key {key})"))?;
        kv_value_at.push(r.pos);
        let value = r.value(ty, 0, &|| format!("kv[{i}].value (key {key})"))?;
        kv_index.insert(key.clone(), i);
        metadata.push((key, value));
    }

    let mut alignment = DEFAULT_ALIGNMENT;
    if let Some(&i) = kv_index.get("general.alignment") {
        let v = &metadata[i].1;
        let a = v.as_integer().and_then(|a| u64::try_from(a).ok());
        match a {
            Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 30 => alignment = a,
            _ => {
                return Err(r_err(
                    file,
                    &format!("kv[{i}].value (key general.alignment)"),
                    kv_value_at[i] as u64,
                    format!(
                        "alignment must be an integer power of two up to 2^30, found {} {v}",
                        v.type_name()
                    ),
                ));
            }
        }
    }

    let mut tensors = Vec::with_capacity(reserve(n_tensors));
    let mut tensor_index = HashMap::with_capacity(reserve(n_tensors));
    for i in 0..n_tensors as usize {
        let name_at = r.pos;
        let name = r.string(&|| format!("tensor_infos[{i}].name"))?;
        if tensor_index.contains_key(&name) {
            return Err(r.err(
                format!("tensor_infos[{i}].name"),
                name_at,
                format!("duplicate tensor name `{name}`"),
            ));
        }
        let nd_at = r.pos;
        let n_dims = r.u32(&|| format!("tensor_infos[{i}].n_dims (tensor {name})"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(r.err(
                format!("tensor_infos[{i}].n_dims (tensor {name})"),
                nd_at,
                format!("{n_dims} dimensions (must be 1..={MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut n_elements: u64 = 1;
        for d in 0..n_dims as usize {
            let at = r.pos;
            let field = || format!("tensor_infos[{i}].dims[{d}] (tensor {name})");
            let v = r.u64(&field)?;
            if v == 0 {
                return Err(r.err(field(), at, "dimension is 0"));
            }
            n_elements = match n_elements.checked_mul(v) {
                Some(n) if n <= i64::MAX as u64 => n,
                _ => {
                    return Err(r.err(
                        field(),
                        at,
                        format!("dimension {v} makes the element count overflow"),
                    ));
                }
            };
            dims.push(v);
        }
        let ty_at = r.pos;
        let ty_id = r.u32(&|| format!("tensor_infos[{i}].type (tensor {name})"))?;
        let ty = GgmlType::from_id(ty_id).ok_or_else(|| {
            r.err(
                format!("tensor_infos[{i}].type (tensor {name})"),
                ty_at,
                match GgmlType::unsupported_name(ty_id) {
                    Some(known) => format!(
                        "unknown ggml tensor type id {ty_id} ({known}, which this runtime does \
                         not execute) for tensor `{name}`"
                    ),
                    None => format!("unknown ggml tensor type id {ty_id} for tensor `{name}`"),
                },
            )
        })?;
        let row = ty.row_bytes(dims[0]).ok_or_else(|| {
            let reason = if dims[0].is_multiple_of(ty.block_len() as u64) {
                format!(
                    "a row of {} {} elements overflows in bytes",
                    dims[0],
                    ty.name()
                )
            } else {
                format!(
                    "row of {} elements is not a whole number of {} blocks ({} elements each)",
                    dims[0],
                    ty.name(),
                    ty.block_len()
                )
            };
            r.err(
                format!("tensor_infos[{i}].dims[0] (tensor {name})"),
                nd_at + 4,
                reason,
            )
        })?;
        let n_rows = n_elements / dims[0];
        let n_bytes = row.checked_mul(n_rows).ok_or_else(|| {
            r.err(
                format!("tensor_infos[{i}].dims (tensor {name})"),
                nd_at + 4,
                "tensor size in bytes overflows",
            )
        })?;
        let off_at = r.pos;
        let offset = r.u64(&|| format!("tensor_infos[{i}].offset (tensor {name})"))?;
        if offset % alignment != 0 {
            return Err(r.err(
                format!("tensor_infos[{i}].offset (tensor {name})"),
                off_at,
                format!("data offset {offset} is not a multiple of the alignment {alignment}"),
            ));
        }
        tensor_index.insert(name.clone(), i);
        tensors.push((
            TensorInfo {
                name,
                dims,
                ty,
                offset,
                n_bytes,
            },
            off_at,
        ));
    }

    let header_end = r.pos as u64;
    let data_offset = header_end.div_ceil(alignment) * alignment;
    let file_len = buf.len() as u64;
    if !tensors.is_empty() && data_offset > file_len {
        return Err(r_err(
            file,
            "tensor_data",
            header_end,
            format!(
                "data section would start at {data_offset}, past the end of the {file_len}-byte file"
            ),
        ));
    }
    for (i, (t, off_at)) in tensors.iter().enumerate() {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.n_bytes));
        if end.is_none_or(|e| e > file_len) {
            return Err(r_err(
                file,
                &format!("tensor_infos[{i}].offset (tensor {})", t.name),
                *off_at as u64,
                format!(
                    "data [{} + {}, +{} bytes) runs past the end of the {file_len}-byte file",
                    data_offset, t.offset, t.n_bytes
                ),
            ));
        }
        // Typed zero-copy views need the element's natural alignment in the mapping (which
        // starts on a page boundary); only `general.alignment` below 8 can break it.
        let need = natural_alignment(t.ty);
        if !(data_offset + t.offset).is_multiple_of(need) {
            return Err(r_err(
                file,
                &format!("tensor_infos[{i}].offset (tensor {})", t.name),
                *off_at as u64,
                format!(
                    "{} data at file offset {} is not {need}-byte aligned (general.alignment {alignment} is too small for it)",
                    t.ty,
                    data_offset + t.offset
                ),
            ));
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].0.offset);
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        // Ends were checked against the file length above, so this cannot overflow.
        if a.0.offset + a.0.n_bytes > b.0.offset {
            return Err(r_err(
                file,
                &format!("tensor_infos[{}].offset (tensor {})", w[1], b.0.name),
                b.1 as u64,
                format!(
                    "data overlaps tensor `{}` ([{}, {}) vs [{}, {}) in the data section)",
                    a.0.name,
                    a.0.offset,
                    a.0.offset + a.0.n_bytes,
                    b.0.offset,
                    b.0.offset + b.0.n_bytes
                ),
            ));
        }
    }

    Ok(Parsed {
        version,
        metadata,
        kv_index,
        tensors: tensors.into_iter().map(|(t, _)| t).collect(),
        tensor_index,
        alignment,
        data_offset,
    })
}

/// Alignment a typed view of `ty` data needs: that of its scalar, or of its blocks' f16 scale.
fn natural_alignment(ty: GgmlType) -> u64 {
    match ty {
        GgmlType::I8 => 1,
        GgmlType::F32 | GgmlType::I32 => 4,
        GgmlType::I64 | GgmlType::F64 => 8,
        _ => 2,
    }
}

fn r_err(file: &str, field: &str, offset: u64, reason: String) -> Error {
    Error::Gguf {
        file: file.to_string(),
        field: field.to_string(),
        offset,
        reason,
    }
}
