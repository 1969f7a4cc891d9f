//! Quantized CPU kernels: ggml block formats, scalar reference kernels, SIMD tiers chosen at
//! run time, and the matrix products the forward pass calls.
//!
//! Spec: ggml's block formats and reference quantizers (ggml-common.h, ggml-quants.c) and the
//! CPU backend's dot products (ggml-cpu/quants.c, ggml-cpu/arch/x86/quants.c).
//!
//! # Numerics
//! Like llama.cpp, activations are quantized before each product with a quantized weight:
//! Q4_0 and Q8_0 weights take Q8_0 activations, Q4_1 weights take Q8_1 activations (whose
//! `s = d * sum(q)` carries the Q4_1 min term), F16 weights take f16-rounded activations and
//! F32 weights plain f32. Every block's integer dot is exact; only the f32 summation order of
//! the scaled block sums differs between tiers.
//!
//! Activation quantization follows what ggml-cpu runs on x86 (AVX/AVX2/AVX-512 builds use the
//! same AVX2 routine): `amax = max|x|`, `d = amax / 127`, `id = 127 / amax` (0 when amax is 0),
//! `q = round_half_to_even(x * id)`, `d` stored as f16 (round to nearest even) and
//! `s = f16(d * sum(q))`. ggml's portable reference (`quantize_row_q8_*_ref`) differs only in
//! using `id = 1 / d` and rounding halves away from zero; it is kept as
//! [`quantize_row_q8_0_ref`] / [`quantize_row_q8_1_ref`]. Every tier here, scalar included,
//! uses the x86 convention, so all tiers produce bit-identical activation blocks and integer
//! dot products.
//!
//! # Tiers
//! [`Isa::Scalar`] everywhere; [`Isa::Avx2`] (AVX2+FMA+F16C); [`Isa::Avx512`] (F+BW+VL, with
//! VNNI `vpdpbusd` when the CPU has AVX512-VNNI); [`Isa::Neon`] on aarch64. `POCKETPERF_ISA`
//! forces a tier so one machine can test them all. A kernel asked for a tier the CPU lacks
//! runs the best supported tier below it (never an illegal instruction).

pub mod blocks;
pub mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use half::f16;
use half::slice::HalfBitsSliceExt;

pub use blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK};

use crate::pool::ThreadPool;
use crate::{Error, GgmlType, Result};

/// Name of the environment variable that forces a kernel tier.
pub const ISA_ENV: &str = "POCKETPERF_ISA";

// =============================================================================================
// Instruction-set tiers and run-time dispatch
// =============================================================================================

/// A kernel tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    Avx2,
    Avx512,
    Neon,
}

impl Isa {
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isa {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(Isa::Scalar),
            "avx2" => Ok(Isa::Avx2),
            "avx512" => Ok(Isa::Avx512),
            "neon" => Ok(Isa::Neon),
            _ => Err(Error::Isa {
                requested: s.to_string(),
                reason: "unknown tier (expected scalar, avx2, avx512 or neon)".into(),
            }),
        }
    }
}

/// Whether this CPU can run `isa`.
pub fn supported(isa: Isa) -> bool {
    match isa {
        Isa::Scalar => true,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            supported(Isa::Avx2)
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

/// Whether the AVX-512 tier uses VNNI (`vpdpbusd`) on this CPU.
pub fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        supported(Isa::Avx512) && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The fastest tier this CPU supports.
pub fn detect_best() -> Isa {
    [Isa::Avx512, Isa::Avx2, Isa::Neon]
        .into_iter()
        .find(|&i| supported(i))
        .unwrap_or(Isa::Scalar)
}

/// The tier named by `POCKETPERF_ISA`, or [`detect_best`] when it is unset or empty. An
/// unknown name or a tier this CPU cannot run is an error naming the value.
pub fn isa_from_env() -> Result<Isa> {
    match std::env::var(ISA_ENV) {
        Ok(v) if !v.trim().is_empty() => {
            let isa: Isa = v.parse()?;
            if supported(isa) {
                Ok(isa)
            } else {
                Err(Error::Isa {
                    requested: v,
                    reason: format!(
                        "this CPU cannot run the {isa} tier (best available: {})",
                        detect_best()
                    ),
                })
            }
        }
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(detect_best()),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::Isa {
            requested: v.to_string_lossy().into_owned(),
            reason: "not valid UTF-8".into(),
        }),
    }
}

/// The process-wide tier: `POCKETPERF_ISA` if valid, else the best supported. Computed once.
/// Call [`isa_from_env`] first to report a bad value to the user.
pub fn active_isa() -> Isa {
    static ACTIVE: OnceLock<Isa> = OnceLock::new();
    *ACTIVE.get_or_init(|| isa_from_env().unwrap_or_else(|_| detect_best()))
}

/// A tier resolved against this CPU: what the kernels actually execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512 {
        vnni: bool,
    },
    #[cfg(target_arch = "aarch64")]
    Neon,
}

fn resolve(isa: Isa) -> Tier {
    let mut isa = isa;
    loop {
        if supported(isa) {
            break;
        }
        isa = match isa {
            Isa::Avx512 => Isa::Avx2,
            _ => Isa::Scalar,
        };
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Tier::Avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Tier::Avx512 { vnni: has_vnni() },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => Tier::Neon,
        _ => Tier::Scalar,
    }
}

// =============================================================================================
// Row-level kernels (public, each with an explicit tier)
// =============================================================================================

fn check_row(ty: GgmlType, src: &[u8], n: usize) -> Result<()> {
    let need = ty
        .row_bytes(n as u64)
        .ok_or_else(|| Error::InvalidArgument {
            what: format!("{ty} row length"),
            reason: format!(
                "{n} is not a multiple of the block length {}",
                ty.block_len()
            ),
        })?;
    if (src.len() as u64) < need {
        return Err(Error::InvalidArgument {
            what: format!("{ty} row data"),
            reason: format!("{} bytes given, {need} needed for {n} elements", src.len()),
        });
    }
    Ok(())
}

/// Dequantizes `out.len()` elements of raw ggml data of type `ty` (ggml `dequantize_row_*`).
pub fn dequantize_row(ty: GgmlType, src: &[u8], out: &mut [f32]) -> Result<()> {
    check_row(ty, src, out.len())?;
    match ty {
        GgmlType::F32 => scalar::dequantize_f32(src, out),
        GgmlType::F16 => scalar::dequantize_f16(src, out),
        GgmlType::Q4_0 => scalar::dequantize_q4_0(src, out),
        GgmlType::Q4_1 => scalar::dequantize_q4_1(src, out),
        GgmlType::Q8_0 => scalar::dequantize_q8_0(src, out),
        GgmlType::Q8_1 => scalar::dequantize_q8_1(src, out),
        _ => {
            return Err(Error::Kernel(format!("no dequantization kernel for {ty}")));
        }
    }
    Ok(())
}

fn check_blocks(what: &str, x: &[f32], nblocks: usize) {
    assert!(
        x.len().is_multiple_of(QK) && x.len() / QK <= nblocks,
        "{what}: {} values need {} blocks of {QK}, output holds {nblocks}",
        x.len(),
        x.len().div_ceil(QK)
    );
}

/// ggml `quantize_row_q4_0_ref` (weights; for tests and synthetic models).
///
/// # Panics
/// If `x.len()` is not a multiple of 32 or `out` is too short.
pub fn quantize_row_q4_0(x: &[f32], out: &mut [BlockQ4_0]) {
    check_blocks("quantize_row_q4_0", x, out.len());
    scalar::quantize_q4_0_ref(x, out);
}

/// ggml `quantize_row_q4_1_ref` (weights; for tests and synthetic models).
///
/// # Panics
/// If `x.len()` is not a multiple of 32 or `out` is too short.
pub fn quantize_row_q4_1(x: &[f32], out: &mut [BlockQ4_1]) {
    check_blocks("quantize_row_q4_1", x, out.len());
    scalar::quantize_q4_1_ref(x, out);
}

/// ggml `quantize_row_q8_0_ref`: `id = 1/d`, halves rounded away from zero.
///
/// # Panics
/// If `x.len()` is not a multiple of 32 or `out` is too short.
pub fn quantize_row_q8_0_ref(x: &[f32], out: &mut [BlockQ8_0]) {
    check_blocks("quantize_row_q8_0_ref", x, out.len());
    scalar::quantize_q8_0_ref(x, out);
}

/// ggml `quantize_row_q8_1_ref`.
///
/// # Panics
/// If `x.len()` is not a multiple of 32 or `out` is too short.
pub fn quantize_row_q8_1_ref(x: &[f32], out: &mut [BlockQ8_1]) {
    check_blocks("quantize_row_q8_1_ref", x, out.len());
    scalar::quantize_q8_1_ref(x, out);
}

/// Activation quantizer to Q8_0 (ggml-cpu x86 convention; identical bits on every tier).
///
/// # Panics
/// If `x.len()` is not a multiple of 32 or `out` is too short.
pub fn quantize_row_q8_0(isa: Isa, x: &[f32], out: &mut [BlockQ8_0]) {
    check_blocks("quantize_row_q8_0", x, out.len());
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `resolve` returned an AVX2-capable tier; lengths checked above.
        Tier::Avx2 | Tier::Avx512 { .. } => unsafe { avx2::quantize_q8_0(x, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON detected; lengths checked above.
        Tier::Neon => unsafe { neon::quantize_q8_0(x, out) },
        Tier::Scalar => scalar::quantize_q8_0(x, out),
    }
}

/// Activation quantizer to Q8_1 (ggml-cpu x86 convention; identical bits on every tier).
///
/// # Panics
/// If `x.len()` is not a multiple of 32 or `out` is too short.
pub fn quantize_row_q8_1(isa: Isa, x: &[f32], out: &mut [BlockQ8_1]) {
    check_blocks("quantize_row_q8_1", x, out.len());
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `resolve` returned an AVX2-capable tier; lengths checked above.
        Tier::Avx2 | Tier::Avx512 { .. } => unsafe { avx2::quantize_q8_1(x, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON detected; lengths checked above.
        Tier::Neon => unsafe { neon::quantize_q8_1(x, out) },
        Tier::Scalar => scalar::quantize_q8_1(x, out),
    }
}

/// One quantized activation row, borrowed.
#[derive(Clone, Copy, Debug)]
pub enum ActRow<'a> {
    Q8_0(&'a [BlockQ8_0]),
    Q8_1(&'a [BlockQ8_1]),
    F16(&'a [f16]),
    F32(&'a [f32]),
}

impl ActRow<'_> {
    /// Elements in the row.
    pub fn len(&self) -> usize {
        match self {
            ActRow::Q8_0(b) => b.len() * QK,
            ActRow::Q8_1(b) => b.len() * QK,
            ActRow::F16(v) => v.len(),
            ActRow::F32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn kind(&self) -> ActKind {
        match self {
            ActRow::Q8_0(_) => ActKind::Q8_0,
            ActRow::Q8_1(_) => ActKind::Q8_1,
            ActRow::F16(_) => ActKind::F16,
            ActRow::F32(_) => ActKind::F32,
        }
    }
}

/// The activation format a weight type multiplies with (ggml's `vec_dot_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    Q8_0,
    Q8_1,
    F16,
    F32,
}

impl ActKind {
    /// `None` for weight types without a kernel.
    pub fn for_weight(ty: GgmlType) -> Option<Self> {
        match ty {
            GgmlType::Q4_0 | GgmlType::Q8_0 => Some(ActKind::Q8_0),
            GgmlType::Q4_1 => Some(ActKind::Q8_1),
            GgmlType::F16 => Some(ActKind::F16),
            GgmlType::F32 => Some(ActKind::F32),
            _ => None,
        }
    }

    /// Bytes of one row of `cols` elements.
    fn row_bytes(self, cols: usize) -> usize {
        match self {
            ActKind::Q8_0 => cols / QK * 34,
            ActKind::Q8_1 => cols / QK * 36,
            ActKind::F16 => cols * 2,
            ActKind::F32 => cols * 4,
        }
    }
}

/// Dot product of one weight row (raw ggml bytes of type `ty`) with a quantized activation row
/// of the matching kind: the ggml `vec_dot` for that pair.
///
/// # Panics
/// If the activation kind does not match `ty`, or `w` is shorter than the row.
pub fn vec_dot(isa: Isa, ty: GgmlType, w: &[u8], a: ActRow<'_>) -> f32 {
    assert_eq!(
        ActKind::for_weight(ty),
        Some(a.kind()),
        "vec_dot: {ty} weights with {:?} activations",
        a.kind()
    );
    let need = ty.row_bytes(a.len() as u64).unwrap_or(u64::MAX);
    assert!(
        w.len() as u64 >= need,
        "vec_dot: {ty} row of {} elements needs {need} bytes, got {}",
        a.len(),
        w.len()
    );
    dot_unchecked(resolve(isa), ty, w, a)
}

/// The kernel for one (tier, type) pair. Callers have checked kinds and lengths.
#[inline]
fn dot_unchecked(t: Tier, ty: GgmlType, w: &[u8], a: ActRow<'_>) -> f32 {
    match t {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tier was resolved against this CPU; lengths checked by the caller.
        Tier::Avx512 { vnni } => unsafe { avx512::dot(vnni, ty, w, a) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Tier::Avx2 => unsafe { avx2::dot(ty, w, a) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: as above.
        Tier::Neon => unsafe { neon::dot(ty, w, a) },
        Tier::Scalar => scalar_dot(ty, w, a),
    }
}

fn scalar_dot(ty: GgmlType, w: &[u8], a: ActRow<'_>) -> f32 {
    match (ty, a) {
        (GgmlType::Q4_0, ActRow::Q8_0(b)) => scalar::vec_dot_q4_0_q8_0(w, b),
        (GgmlType::Q8_0, ActRow::Q8_0(b)) => scalar::vec_dot_q8_0_q8_0(w, b),
        (GgmlType::Q4_1, ActRow::Q8_1(b)) => scalar::vec_dot_q4_1_q8_1(w, b),
        (GgmlType::F16, ActRow::F16(v)) => scalar::vec_dot_f16_f16(w, v),
        (GgmlType::F32, ActRow::F32(v)) => scalar::vec_dot_f32_bytes(w, v),
        // Unreachable after the kind check; an honest zero rather than a panic.
        _ => 0.0,
    }
}

/// Dots of one weight row with four activation rows (the prefill tile). Callers have checked
/// kinds and lengths.
#[inline]
fn dot4_unchecked(t: Tier, ty: GgmlType, w: &[u8], a: [ActRow<'_>; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    if let Tier::Avx512 { vnni } = t {
        // SAFETY: the tier was resolved against this CPU; lengths checked by the caller.
        if let Some(r) = unsafe { avx512::dot4(vnni, ty, w, a) } {
            return r;
        }
    }
    a.map(|ar| dot_unchecked(t, ty, w, ar))
}

/// f32 dot product (attention scores).
///
/// # Panics
/// If the lengths differ.
pub fn dot_f32(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot_f32: lengths differ");
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2-capable tier; equal lengths checked above.
        Tier::Avx2 | Tier::Avx512 { .. } => unsafe { avx2::dot_f32(a, b) },
        _ => scalar::dot_f32(a, b),
    }
}

/// `y += alpha * x` (attention value accumulation).
///
/// # Panics
/// If the lengths differ.
pub fn axpy_f32(isa: Isa, alpha: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy_f32: lengths differ");
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2-capable tier; equal lengths checked above.
        Tier::Avx2 | Tier::Avx512 { .. } => unsafe { avx2::axpy_f32(alpha, x, y) },
        _ => scalar::axpy_f32(alpha, x, y),
    }
}

// =============================================================================================
// Matrices and activations
// =============================================================================================

/// A weight matrix in ggml layout: `rows` output features (ggml ne1), each a contiguous row
/// of `cols` input features (ggml ne0) in format `ty`. Borrowed from the model mapping.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

impl<'a> WeightMatrix<'a> {
    /// Checks that `ty` has a kernel, `cols` is a whole number of blocks and `data` holds
    /// exactly `rows` rows.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self> {
        if ActKind::for_weight(ty).is_none() {
            return Err(Error::Kernel(format!(
                "no matrix kernel for {ty} weights (supported: F32, F16, Q4_0, Q4_1, Q8_0)"
            )));
        }
        let row = ty.row_bytes(cols as u64).ok_or_else(|| {
            Error::Kernel(format!(
                "{ty} matrix: {cols} columns is not a multiple of the block length {}",
                ty.block_len()
            ))
        })?;
        let need = row.checked_mul(rows as u64);
        if need != Some(data.len() as u64) {
            return Err(Error::Kernel(format!(
                "{ty} matrix {rows}x{cols}: {} bytes given, {} expected",
                data.len(),
                need.map_or_else(|| "overflow".to_string(), |n| n.to_string())
            )));
        }
        Ok(Self {
            ty,
            rows,
            cols,
            data,
        })
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_len() * self.ty.block_bytes()
    }

    /// Raw bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Dequantizes row `r` into `out[..cols]` (embedding lookup).
    ///
    /// # Panics
    /// If `r >= rows` or `out` is shorter than `cols` (callers validate token ids).
    pub fn row_dequant(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows, "row {r} out of range ({} rows)", self.rows);
        // Sizes and type were validated by `new`.
        if let Err(e) = dequantize_row(self.ty, self.row(r), &mut out[..self.cols]) {
            unreachable!("validated matrix: {e}");
        }
    }
}

/// Preallocated quantized activations: up to `max_rows` rows of up to `max_cols` elements in
/// whichever format the next weight matrix needs. Quantizing allocates nothing.
#[derive(Debug)]
pub struct QuantizedActs {
    /// u32 storage keeps every block view 4-byte aligned.
    buf: Vec<u32>,
    max_rows: usize,
    max_cols: usize,
    kind: ActKind,
    n_rows: usize,
    cols: usize,
}

impl QuantizedActs {
    pub fn new(max_rows: usize, max_cols: usize) -> Self {
        // f32 is the widest format: 4 bytes per element.
        Self {
            buf: vec![0u32; max_rows * max_cols],
            max_rows,
            max_cols,
            kind: ActKind::F32,
            n_rows: 0,
            cols: 0,
        }
    }

    pub fn kind(&self) -> ActKind {
        self.kind
    }
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Quantizes `n_rows` rows of `cols` values (`x` row-major) for weights of type `w_ty`.
    ///
    /// # Panics
    /// If `w_ty` has no kernel, the shape exceeds the capacity, `cols` is not a multiple of
    /// 32 for a quantized format, or `x` is shorter than `n_rows * cols`.
    pub fn quantize_for(
        &mut self,
        isa: Isa,
        w_ty: GgmlType,
        x: &[f32],
        n_rows: usize,
        cols: usize,
    ) {
        let kind = ActKind::for_weight(w_ty)
            .unwrap_or_else(|| panic!("quantize_for: no kernel for {w_ty} weights"));
        assert!(
            n_rows <= self.max_rows && cols <= self.max_cols,
            "quantize_for: {n_rows}x{cols} exceeds the capacity {}x{}",
            self.max_rows,
            self.max_cols
        );
        assert!(
            x.len() >= n_rows * cols,
            "quantize_for: x holds {} values, {n_rows}x{cols} needed",
            x.len()
        );
        if matches!(kind, ActKind::Q8_0 | ActKind::Q8_1) {
            assert!(
                cols.is_multiple_of(QK),
                "quantize_for: {cols} columns is not a multiple of {QK}"
            );
        }
        self.kind = kind;
        self.n_rows = n_rows;
        self.cols = cols;
        let rb = kind.row_bytes(cols);
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.buf);
        for (r, xr) in x[..n_rows * cols].chunks_exact(cols.max(1)).enumerate() {
            let dst = &mut bytes[r * rb..(r + 1) * rb];
            match kind {
                ActKind::Q8_0 => quantize_row_q8_0(isa, xr, bytemuck::cast_slice_mut(dst)),
                ActKind::Q8_1 => quantize_row_q8_1(isa, xr, bytemuck::cast_slice_mut(dst)),
                ActKind::F16 => {
                    let bits: &mut [u16] = bytemuck::cast_slice_mut(dst);
                    scalar::quantize_f16(xr, bits.reinterpret_cast_mut())
                }
                ActKind::F32 => dst.copy_from_slice(bytemuck::cast_slice(xr)),
            }
        }
    }

    /// Row `r` of the last quantization.
    ///
    /// # Panics
    /// If `r >= n_rows()`.
    pub fn row(&self, r: usize) -> ActRow<'_> {
        assert!(r < self.n_rows, "activation row {r} of {}", self.n_rows);
        let rb = self.kind.row_bytes(self.cols);
        let bytes: &[u8] = bytemuck::cast_slice(&self.buf);
        let b = &bytes[r * rb..(r + 1) * rb];
        // Row starts are multiples of 34, 36, 2 or 4 bytes from a 4-aligned base: every view
        // is aligned for its element type, so these casts cannot fail.
        match self.kind {
            ActKind::Q8_0 => ActRow::Q8_0(bytemuck::cast_slice(b)),
            ActKind::Q8_1 => ActRow::Q8_1(bytemuck::cast_slice(b)),
            ActKind::F16 => {
                let bits: &[u16] = bytemuck::cast_slice(b);
                ActRow::F16(bits.reinterpret_cast())
            }
            ActKind::F32 => ActRow::F32(bytemuck::cast_slice(b)),
        }
    }
}

// =============================================================================================
// Matrix product
// =============================================================================================

/// Output pointer shared by the workers of one `matmul`.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: workers write disjoint elements (disjoint weight-row ranges) and the pool joins them
// before `matmul` returns, so sharing the pointer across threads is sound.
unsafe impl Send for OutPtr {}
// SAFETY: see above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Going through a method makes closures capture the whole (Sync) wrapper rather than
    /// its raw-pointer field.
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

/// Weight rows per work item; a multiple of 4.
const CHUNK_ROWS: usize = 16;

/// `y[a][r] = dot(w.row(r), x.row(a))` for `a < n_rows`, `r < w.rows`: `y` is
/// `n_rows × w.rows` row-major. Rows of `w` are split across the pool in chunks; with several
/// activation rows each weight row is multiplied with four activation rows at a time.
/// Allocates nothing.
///
/// # Panics
/// If `x` was not quantized for `w.ty` with `w.cols` columns, holds fewer than `n_rows`
/// rows, or `y` is shorter than `n_rows * w.rows`.
pub fn matmul(
    pool: &ThreadPool,
    isa: Isa,
    w: &WeightMatrix<'_>,
    x: &QuantizedActs,
    n_rows: usize,
    y: &mut [f32],
) {
    assert_eq!(
        ActKind::for_weight(w.ty),
        Some(x.kind()),
        "matmul: activations quantized as {:?} for {} weights",
        x.kind(),
        w.ty
    );
    assert_eq!(
        x.cols(),
        w.cols,
        "matmul: activation width {} vs weight columns {}",
        x.cols(),
        w.cols
    );
    assert!(
        n_rows <= x.n_rows(),
        "matmul: {n_rows} rows requested, {} quantized",
        x.n_rows()
    );
    assert!(
        y.len() >= n_rows * w.rows,
        "matmul: output holds {}, {} needed",
        y.len(),
        n_rows * w.rows
    );
    assert!(
        w.data.len() >= w.rows * w.row_bytes(),
        "matmul: weight data too short"
    );
    if n_rows == 0 || w.rows == 0 {
        return;
    }
    let tier = resolve(isa);
    let n_chunks = w.rows.div_ceil(CHUNK_ROWS);
    let next = AtomicUsize::new(0);
    let out = OutPtr(y.as_mut_ptr());
    let m = w.rows;
    pool.run(|_, _| {
        let out = out.ptr();
        loop {
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c >= n_chunks {
                break;
            }
            let r0 = c * CHUNK_ROWS;
            let r1 = (r0 + CHUNK_ROWS).min(m);
            for r in r0..r1 {
                let wr = w.row(r);
                let mut a = 0;
                while a + 4 <= n_rows {
                    let v = dot4_unchecked(
                        tier,
                        w.ty,
                        wr,
                        [x.row(a), x.row(a + 1), x.row(a + 2), x.row(a + 3)],
                    );
                    for (k, vk) in v.into_iter().enumerate() {
                        // SAFETY: (a + k) < n_rows and r < m, so the index is inside
                        // `y[..n_rows * m]`; this worker alone owns row r.
                        unsafe { *out.add((a + k) * m + r) = vk };
                    }
                    a += 4;
                }
                while a < n_rows {
                    let v = dot_unchecked(tier, w.ty, wr, x.row(a));
                    // SAFETY: as above.
                    unsafe { *out.add(a * m + r) = v };
                    a += 1;
                }
            }
        }
    });
}
