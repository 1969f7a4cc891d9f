//! GGUF model files: a validating reader over a read-only memory mapping (zero-copy tensor
//! data) and a writer for synthetic files and realigned copies.
//!
//! Implements GGUF versions 2 and 3 as specified in ggml's `docs/gguf.md` (little-endian
//! only): header, key/value metadata, tensor infos, padding to `general.alignment` (default
//! 32) and the tensor data section. Everything read from the file is untrusted: every count
//! and length is checked against the bytes that remain before anything is allocated, and a
//! malformed file yields [`Error::Gguf`] naming the field and the byte offset, never a panic.
//!
//! Here: [`GgufFile`] (opening, typed metadata getters, tensor views) and the format's
//! limits; `parse` reads and validates the header, metadata and tensor infos; `value` holds
//! the metadata value types; `writer` writes files.

mod parse;
mod value;
mod writer;

pub use value::{Array, StrList, StrListFull, Value, ValueType};
pub use writer::{GgufWriter, MAX_ALIGNMENT, replace_file, same_file, write_aligned};

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;
use crate::residency::{self, LoadOptions, Residency};
use parse::parse_header;

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most tensors a file may declare.
pub const MAX_TENSORS: u64 = 1 << 20;
/// Most metadata entries a file may declare.
pub const MAX_KV: u64 = 1 << 20;
/// Longest string (key, value or tensor name) accepted, in bytes.
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// Most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Deepest nesting of arrays inside arrays.
pub const MAX_ARRAY_DEPTH: u32 = 4;
/// One tensor as described in the file's tensor-info section.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Shape in ggml order: `dims[0]` (ne0) varies fastest.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset of the tensor's first byte relative to the start of the data section.
    pub offset: u64,
    /// Size of the tensor's data in bytes.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Number of elements (product of the dims; overflow was ruled out at open).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A parsed, validated GGUF file. Cheap to share between threads (`Send + Sync`).
pub struct GgufFile {
    name: String,
    path: Option<PathBuf>,
    backing: Backing,
    version: u32,
    metadata: Vec<(String, Value)>,
    kv_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("kv", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Maps `path` read-only and parses it.
    ///
    /// The mapping assumes the file is not truncated or rewritten while it is open (as every
    /// mmap-based model loader does): a file shrunk underneath the mapping makes later reads
    /// of the vanished pages fault (SIGBUS).
    pub fn open(path: &Path) -> Result<GgufFile> {
        Self::open_with(path, &LoadOptions::default())
    }

    /// [`GgufFile::open`], then makes the mapping resident as `opts` asks: prefault (every
    /// page read in before this returns) and/or mlock (an [`Error::Mlock`] naming
    /// `RLIMIT_MEMLOCK` when the lock is refused). See [`crate::residency`].
    pub fn open_with(path: &Path, opts: &LoadOptions) -> Result<GgufFile> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(Error::Gguf {
                file: path.display().to_string(),
                field: "file".to_string(),
                offset: 0,
                reason: "not a regular file".to_string(),
            });
        }
        let len = meta.len();
        let backing = if len == 0 {
            // Mapping an empty file fails on some systems; the parser reports it properly.
            Backing::Owned(Vec::new())
        } else {
            // SAFETY: the mapping is read-only and private to this process; we never create a
            // mutable view of it. The remaining hazard, another process truncating the file
            // while it is mapped, is documented above and cannot be ruled out by any loader.
            let map = unsafe { memmap2::MmapOptions::new().map(&file) }.map_err(io)?;
            if opts.prefault {
                residency::prefault(&map, path)?;
            }
            if opts.mlock {
                residency::lock(&map, path)?;
            }
            Backing::Mmap(map)
        };
        Self::parse(
            path.display().to_string(),
            Some(path.to_path_buf()),
            backing,
        )
    }

    /// Parses a GGUF image held in memory; `name` stands for the file in error messages.
    pub fn from_bytes(name: &str, bytes: Vec<u8>) -> Result<GgufFile> {
        Self::parse(name.to_string(), None, Backing::Owned(bytes))
    }

    fn parse(name: String, path: Option<PathBuf>, backing: Backing) -> Result<GgufFile> {
        let parsed = parse_header(&name, backing.bytes())?;
        Ok(GgufFile {
            name,
            path,
            backing,
            version: parsed.version,
            metadata: parsed.metadata,
            kv_index: parsed.kv_index,
            tensors: parsed.tensors,
            tensor_index: parsed.tensor_index,
            alignment: parsed.alignment,
            data_offset: parsed.data_offset,
        })
    }

    /// The path the file was opened from (`None` for [`GgufFile::from_bytes`]).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The name used in error messages (the path, or the name given to `from_bytes`).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kv_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| Error::Metadata {
            key: key.to_string(),
            reason: format!("missing from {}", self.name),
        })
    }

    fn wrong_type(key: &str, want: &str, v: &Value) -> Error {
        Error::Metadata {
            key: key.to_string(),
            reason: format!("expected {want}, found {} ({v})", v.type_name()),
        }
    }

    /// An integer value of any integer type that fits in u32.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        let v = self.require(key)?;
        match v.as_integer() {
            Some(i) => u32::try_from(i).map_err(|_| Error::Metadata {
                key: key.to_string(),
                reason: format!("value {i} does not fit in u32"),
            }),
            None => Err(Self::wrong_type(key, "an integer", v)),
        }
    }

    /// An integer value of any integer type that fits in u64.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        match v.as_integer() {
            Some(i) => u64::try_from(i).map_err(|_| Error::Metadata {
                key: key.to_string(),
                reason: format!("value {i} does not fit in u64"),
            }),
            None => Err(Self::wrong_type(key, "an integer", v)),
        }
    }

    /// A FLOAT32 value (FLOAT64 is accepted and rounded).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        match v {
            Value::F32(x) => Ok(*x),
            Value::F64(x) => Ok(*x as f32),
            _ => Err(Self::wrong_type(key, "a float", v)),
        }
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str()
            .ok_or_else(|| Self::wrong_type(key, "a string", v))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            v => Err(Self::wrong_type(key, "a bool", v)),
        }
    }

    fn get_array(&self, key: &str) -> Result<&Array> {
        let v = self.require(key)?;
        v.as_array()
            .ok_or_else(|| Self::wrong_type(key, "an array", v))
    }

    /// An array of strings, borrowed.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.get_str_list(key).map(|l| l.iter().collect())
    }

    /// An array of strings as stored (packed).
    pub fn get_str_list(&self, key: &str) -> Result<&StrList> {
        match self.get_array(key)? {
            Array::String(v) => Ok(v),
            a => Err(Error::Metadata {
                key: key.to_string(),
                reason: format!("expected ARRAY[STRING], found ARRAY[{}]", a.elem_type()),
            }),
        }
    }

    pub fn get_f32_array(&self, key: &str) -> Result<&[f32]> {
        match self.get_array(key)? {
            Array::F32(v) => Ok(v),
            a => Err(Error::Metadata {
                key: key.to_string(),
                reason: format!("expected ARRAY[FLOAT32], found ARRAY[{}]", a.elem_type()),
            }),
        }
    }

    pub fn get_i32_array(&self, key: &str) -> Result<&[i32]> {
        match self.get_array(key)? {
            Array::I32(v) => Ok(v),
            a => Err(Error::Metadata {
                key: key.to_string(),
                reason: format!("expected ARRAY[INT32], found ARRAY[{}]", a.elem_type()),
            }),
        }
    }

    /// `general.architecture` (e.g. `llama`).
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// All tensors in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| Error::Tensor {
                name: name.to_string(),
                reason: format!("not found in {}", self.name),
            })
    }

    /// The tensor's bytes: a zero-copy slice of the mapping.
    ///
    /// Bounds were validated at open for the file's own tensor infos; for a `TensorInfo`
    /// that does not fit this file (e.g. from another file) the slice is empty.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let bytes = self.backing.bytes();
        let start = self.data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= bytes.len() as u64 => &bytes[s as usize..e as usize],
            _ => &[],
        }
    }

    /// A zero-copy typed view of a tensor's data: `T` is one element of a plain type (`f32`
    /// for F32, `u16` bits for F16/BF16, `i32` for I32, ...) or one block of a quantized
    /// type (e.g. `quant::BlockQ4_1`). The size of `T` must equal the type's block size;
    /// the data must lie in this file and be aligned for `T` (the reader guarantees both for
    /// the file's own tensors and scalar or f16-scaled block types).
    pub fn tensor_view<T: bytemuck::AnyBitPattern>(&self, t: &TensorInfo) -> Result<&[T]> {
        let elem = std::mem::size_of::<T>();
        if elem != t.ty.block_bytes() {
            return Err(Error::Tensor {
                name: t.name.clone(),
                reason: format!(
                    "a view of {}-byte elements does not match {} ({} bytes per block)",
                    elem,
                    t.ty,
                    t.ty.block_bytes()
                ),
            });
        }
        let data = self.tensor_data(t);
        if data.len() as u64 != t.n_bytes {
            return Err(Error::Tensor {
                name: t.name.clone(),
                reason: format!("does not lie within {}", self.name),
            });
        }
        bytemuck::try_cast_slice(data).map_err(|e| Error::Tensor {
            name: t.name.clone(),
            reason: format!(
                "data at file offset {} cannot be viewed as {}: {e}",
                self.tensor_file_offset(t),
                std::any::type_name::<T>()
            ),
        })
    }

    /// The data of an F32 tensor as `f32`s, zero-copy.
    pub fn tensor_f32(&self, name: &str) -> Result<&[f32]> {
        let t = self.tensor(name)?;
        if t.ty != GgmlType::F32 {
            return Err(Error::UnsupportedType {
                name: name.to_string(),
                ty: format!("{} (an F32 tensor was expected)", t.ty),
            });
        }
        self.tensor_view(t)
    }

    /// Absolute file offset of a tensor's first byte.
    pub fn tensor_file_offset(&self, t: &TensorInfo) -> u64 {
        self.data_offset.saturating_add(t.offset)
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// Drops the mapping's whole pages inside bytes `start..start + len` from this process
    /// (`MADV_DONTNEED`), for data read once and kept elsewhere (repacked weights):
    /// they leave the resident set and a later read maps them in again from the page cache,
    /// unchanged. Best effort: a locked mapping (`--mlock`) or a file held in memory keeps
    /// them, and out-of-range bytes are ignored.
    pub fn release_range(&self, start: usize, len: usize) {
        if let Backing::Mmap(m) = &self.backing {
            let page = residency::page_size();
            let end = start.saturating_add(len).min(m.len()) / page * page;
            let first = start.next_multiple_of(page);
            if first < end {
                // SAFETY: the mapping is a read-only shared mapping of a file that is not
                // rewritten while open (see `open`): after MADV_DONTNEED a read maps the same
                // bytes in again from the page cache, so no reference sees different data.
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, end - first)
                };
            }
        }
    }

    /// Pages of the file's mapping in memory now (`mincore`); `None` for a file held in
    /// memory ([`GgufFile::from_bytes`], empty files), which is resident by construction.
    pub fn residency(&self) -> Result<Option<Residency>> {
        match &self.backing {
            Backing::Mmap(m) => residency::mapping_residency(m, Path::new(&self.name)).map(Some),
            Backing::Owned(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_file_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<GgufFile>();
    }
}
