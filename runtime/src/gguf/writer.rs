//! GGUF v3 writer: builds valid files from metadata and tensor bytes (synthetic models for
//! tests) and rewrites an existing model with a larger alignment so that every tensor starts
//! on a page boundary (spec: ggml `docs/gguf.md`; layout as read by [`super::GgufFile`]).

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Array, DEFAULT_ALIGNMENT, GgufFile, Value};
use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;

struct PendingTensor<'a> {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Cow<'a, [u8]>,
}

/// Builds a GGUF file: metadata in insertion order, tensors in insertion order, each tensor's
/// data aligned to the chosen alignment (and `general.alignment` written when it is not the
/// default 32).
pub struct GgufWriter<'a> {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor<'a>>,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// Largest alignment a file may be written with: 64 KiB, the largest page size of the devices
/// served (arm64 kernels configured with 64 KiB pages; 4 KiB and 16 KiB elsewhere), and so the
/// largest boundary a zero-copy GPU import (host-pointer buffers are page-aligned) can need.
/// Beyond it padding buys nothing; it is bounded by this much per tensor.
pub const MAX_ALIGNMENT: u64 = 1 << 16;

fn invalid(what: &str, reason: String) -> Error {
    Error::InvalidArgument {
        what: what.to_string(),
        reason,
    }
}

impl<'a> GgufWriter<'a> {
    /// A GGUF v3 writer with the default alignment of 32 bytes.
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Header version to write: 2 or 3 (identical layout for little-endian files).
    pub fn set_version(&mut self, version: u32) -> Result<&mut Self> {
        if version != 2 && version != 3 {
            return Err(invalid(
                "gguf version",
                format!("{version} (writable: 2, 3)"),
            ));
        }
        self.version = version;
        Ok(self)
    }

    /// Alignment of the data section and of every tensor: a power of two. Written as
    /// `general.alignment` (UINT32) unless it is the default and the key was never set.
    pub fn set_alignment(&mut self, alignment: u64) -> Result<&mut Self> {
        if alignment == 0 || !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
            return Err(invalid(
                "alignment",
                format!("{alignment} is not a power of two from 1 to {MAX_ALIGNMENT} bytes"),
            ));
        }
        self.alignment = alignment;
        if alignment != DEFAULT_ALIGNMENT
            || self.metadata.iter().any(|(k, _)| k == "general.alignment")
        {
            self.add_metadata("general.alignment", Value::U32(alignment as u32));
        }
        Ok(self)
    }

    /// Adds a metadata entry, or replaces the value of an existing key in place.
    pub fn add_metadata(&mut self, key: &str, value: Value) -> &mut Self {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
        self
    }

    /// Adds a tensor; `data` must hold exactly the bytes its type and shape need.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<&mut Self> {
        let data = data.into();
        if dims.is_empty() || dims.len() > super::MAX_DIMS as usize || dims.contains(&0) {
            return Err(invalid(name, format!("bad shape {dims:?}")));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(invalid(name, "duplicate tensor name".to_string()));
        }
        let n_rows = dims[1..].iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let need = ty
            .row_bytes(dims[0])
            .zip(n_rows)
            .and_then(|(row, rows)| row.checked_mul(rows));
        if need != Some(data.len() as u64) {
            return Err(invalid(
                name,
                format!(
                    "{} bytes given, shape {dims:?} of {} needs {need:?}",
                    data.len(),
                    ty.name()
                ),
            ));
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(self)
    }

    fn align(&self, n: u64) -> u64 {
        n.div_ceil(self.alignment) * self.alignment
    }

    /// Serializes the header (magic .. tensor infos, unpadded) and the relative tensor offsets.
    fn header(&self) -> (Vec<u8>, Vec<u64>) {
        let mut h = Vec::new();
        h.extend_from_slice(&super::GGUF_MAGIC);
        h.extend_from_slice(&self.version.to_le_bytes());
        h.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        h.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut h, k);
            h.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(&mut h, v);
        }
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut off = 0u64;
        for t in &self.tensors {
            put_str(&mut h, &t.name);
            h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                h.extend_from_slice(&d.to_le_bytes());
            }
            h.extend_from_slice(&t.ty.id().to_le_bytes());
            h.extend_from_slice(&off.to_le_bytes());
            offsets.push(off);
            off = self.align(off + t.data.len() as u64);
        }
        (h, offsets)
    }

    fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        let (header, offsets) = self.header();
        w.write_all(&header)?;
        let data_start = self.align(header.len() as u64);
        write_zeros(w, data_start - header.len() as u64)?;
        let mut pos = 0u64;
        for (t, &off) in self.tensors.iter().zip(&offsets) {
            write_zeros(w, off - pos)?;
            w.write_all(&t.data)?;
            pos = off + t.data.len() as u64;
        }
        Ok(())
    }

    /// The complete file image.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = self.write_to(&mut out);
        out
    }

    /// Writes the file to `path`: into a new temporary file beside it, then renamed into
    /// place, so a reader of the old file (or the old file itself, when it is this writer's
    /// source) is never truncated, and a symlink at `path` is replaced rather than followed.
    pub fn write(&self, path: &Path) -> Result<()> {
        replace_file(path, |f| {
            let mut w = BufWriter::with_capacity(1 << 20, f);
            self.write_to(&mut w)?;
            w.into_inner().map_err(|e| e.into_error())?.sync_all()
        })
    }
}

/// Writes `path` by way of a temporary file in the same directory (created exclusively, filled
/// by `fill`, then renamed over `path`); the temporary is removed on any failure.
pub fn replace_file(
    path: &Path,
    fill: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<()> {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let Some(name) = path.file_name() else {
        return Err(invalid(
            "output path",
            format!("{} does not name a file", path.display()),
        ));
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = dir.join(format!(
        ".{}.{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let io = |p: &Path, source| Error::Io {
        path: p.to_path_buf(),
        source,
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| io(&tmp, e))?;
    let done = fill(&mut f)
        .map_err(|e| io(&tmp, e))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| io(path, e)));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// Whether `a` and `b` name the same file by any path (`..`, symlinks, hard links): the same
/// device and inode. A `b` that does not exist is not `a`.
pub fn same_file(a: &Path, b: &Path) -> std::io::Result<bool> {
    let mb = match std::fs::metadata(b) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let ma = std::fs::metadata(a)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Ok(ma.dev() == mb.dev() && ma.ino() == mb.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        Ok(std::fs::canonicalize(a)? == std::fs::canonicalize(b)?)
    }
}

fn write_zeros(w: &mut impl Write, n: u64) -> std::io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    let mut left = n;
    while left > 0 {
        let k = left.min(ZEROS.len() as u64) as usize;
        w.write_all(&ZEROS[..k])?;
        left -= k as u64;
    }
    Ok(())
}

fn put_str(h: &mut Vec<u8>, s: &str) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

fn put_value(h: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => h.push(*x),
        Value::I8(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => h.push(u8::from(*x)),
        Value::String(s) => put_str(h, s),
        Value::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Array(a) => put_array(h, a),
    }
}

fn put_array(h: &mut Vec<u8>, a: &Array) {
    h.extend_from_slice(&a.elem_type().id().to_le_bytes());
    h.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                h.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => h.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => h.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(h, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(h, a)),
    }
}

/// Rewrites `src` to `out` with `general.alignment = alignment`, the data section and every
/// tensor aligned to it (e.g. 4096 for page-aligned, zero-copy buffer import). Metadata and
/// tensor order are kept and tensor bytes are copied unchanged; the result is a valid GGUF v3.
/// An `out` that is the source file by any path is refused before anything is written.
pub fn write_aligned(src: &GgufFile, out: &Path, alignment: u64) -> Result<()> {
    if let Some(p) = src.path() {
        let same = same_file(p, out).map_err(|source| Error::Io {
            path: out.to_path_buf(),
            source,
        })?;
        if p == out || same {
            return Err(invalid(
                "output path",
                format!(
                    "{} is the source file {} (same device and inode); write to another path",
                    out.display(),
                    p.display()
                ),
            ));
        }
    }
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.add_metadata(k, v.clone());
    }
    w.set_alignment(alignment)?;
    for t in src.tensors() {
        w.add_tensor(&t.name, &t.dims, t.ty, src.tensor_data(t))?;
    }
    w.write(out)
}
