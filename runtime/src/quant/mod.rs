//! Quantized CPU kernels: ggml block formats, scalar reference kernels, SIMD tiers chosen at
//! run time, and the matrix products the forward pass calls.
//!
//! Spec: ggml's block formats and reference quantizers (ggml-common.h, ggml-quants.c) and the
//! CPU backend's dot products (ggml-cpu/quants.c, ggml-cpu/arch/x86/quants.c).
//!
//! # Numerics
//! Like llama.cpp, activations are quantized before each product with a quantized weight:
//! Q4_0, Q5_0 and Q8_0 weights take Q8_0 activations, Q4_1 and Q5_1 weights take Q8_1
//! activations (whose `s = d * sum(q)` carries the min term), the K-quants (Q2_K … Q6_K) take
//! Q8_K activations (256-element blocks with an f32 scale and 16 group sums; see
//! [`kquants`]), F16 weights take f16-rounded activations and F32 weights plain f32. Every
//! block's integer dot is exact; only the f32 summation order of the scaled block sums
//! differs between tiers.
//!
//! Activation quantization follows what ggml-cpu runs on x86 (AVX/AVX2/AVX-512 builds use the
//! same AVX2 routine): `amax = max|x|`, `d = amax / 127`, `id = 127 / amax` (0 when amax is 0),
//! `q = round_half_to_even(x * id)`, `d` stored as f16 (round to nearest even) and
//! `s = f16(d * sum(q))`. ggml's portable reference (`quantize_row_q8_*_ref`) differs only in
//! using `id = 1 / d` and rounding halves away from zero; it is kept as
//! [`quantize_row_q8_0_ref`] / [`quantize_row_q8_1_ref`]. Every tier here, scalar included,
//! uses the x86 convention, so all tiers produce bit-identical activation blocks and integer
//! dot products. Q8_K activations use ggml's reference quantizer, which is what ggml-cpu
//! runs for them on x86.
//!
//! # Tiers
//! [`Isa::Scalar`] everywhere; [`Isa::Avx2`] (AVX2+FMA+F16C); [`Isa::Avx512`] (F+BW+VL, with
//! VNNI `vpdpbusd` when the CPU has AVX512-VNNI); [`Isa::Neon`] on aarch64. `POCKETPERF_ISA`
//! forces a tier so one machine can test them all. A kernel asked for a tier the CPU lacks
//! runs the best supported tier below it (never an illegal instruction).
//! On x86 each tier is two files, `avx2`/`avx512` (Q4_0, Q4_1, Q8_0, F16, F32) and
//! `avx2_k`/`avx512_k` (Q5_0, Q5_1 and the K-quants); the dispatch here asks the `_k` file
//! first, and the `_k` files reuse the decoding helpers of the others (one direction only).
//! `avx2_dec` holds the AVX2 decode product of Q5_0 and Q8_0 weights (one activation row
//! against a range of weight rows, its per-block tables prepared once); it reuses helpers of
//! `avx2`. `avx512_kgemm` holds the AVX-512 prefill tile of Q4_K and Q6_K (four weight rows × four
//! activation rows), which [`matmul_rows`] runs for four or more activation rows; it reuses
//! helpers of `avx512_k`.
//!
//! This file owns the tiers, their run-time dispatch and the row-level kernels' public
//! entry points. The operands of the matrix products (weight matrices, the quantized
//! activation buffers and their layouts) live in `operands`; the products themselves (the
//! output view, the row-range products and the tile paths they try first) in `matmul`.

pub mod act;
pub mod attn;
pub mod blocks;
pub mod kquants;
mod matmul;
mod operands;
pub mod packed;
pub mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_dec;
#[cfg(target_arch = "x86_64")]
mod avx2_k;
#[cfg(target_arch = "x86_64")]
mod avx2_kt;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_k;
#[cfg(target_arch = "x86_64")]
mod avx512_kgemm;
#[cfg(target_arch = "x86_64")]
mod gemm512;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod pack512;

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use half::f16;

pub use blocks::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8_1, BlockQ8K, QK, QK_K,
};
pub use matmul::{OutRows, act_layout, chunk_size, matmul, matmul_rows, matmul_span};
pub use operands::{
    ActLayout, ActsWriter, COPY_CHUNK, Q8_1Aux, Q8Aux, QuantizedActs, Repacked, WeightMatrix,
    repack, repack_all, repacked_len,
};

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

/// Whether this CPU can run `isa`. Asked on every kernel call (the attention kernels of a
/// long prefill take millions), so the answer is detected once per tier and kept.
pub fn supported(isa: Isa) -> bool {
    use std::sync::atomic::AtomicU8;
    // 0: not asked yet, 1: no, 2: yes.
    static KNOWN: [AtomicU8; 4] = [const { AtomicU8::new(0) }; 4];
    let slot = &KNOWN[isa as usize];
    match slot.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let yes = detect(isa);
            slot.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}

fn detect(isa: Isa) -> bool {
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

/// Whether the AVX-512 tier has VBMI byte permutes on this CPU, which its packed-activation
/// matrix kernels need (without them it runs per-row kernels over ggml blocks).
pub fn has_vbmi() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        supported(Isa::Avx512) && std::arch::is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

static VNNI_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the AVX-512 tier use its non-VNNI integer dot (`vpmaddubsw` + `vpmaddwd`) even on a
/// CPU with VNNI, so tests can check both flavors on one machine. Both produce the same
/// integers, hence the same results.
#[doc(hidden)]
pub fn set_vnni_disabled(off: bool) {
    VNNI_OFF.store(off, std::sync::atomic::Ordering::Relaxed);
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
pub(crate) enum Tier {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512 {
        vnni: bool,
        vbmi: bool,
    },
    #[cfg(target_arch = "aarch64")]
    Neon,
}

/// [`resolve_uncached`], remembered per tier asked for and VNNI switch (kernels resolve
/// their tier on every call: attention does so several times per block of 128 slots).
pub(crate) fn resolve(isa: Isa) -> Tier {
    static RESOLVED: [[std::sync::OnceLock<Tier>; 2]; 4] =
        [const { [const { std::sync::OnceLock::new() }; 2] }; 4];
    let off = usize::from(VNNI_OFF.load(Ordering::Relaxed));
    *RESOLVED[isa as usize][off].get_or_init(|| resolve_uncached(isa))
}

fn resolve_uncached(isa: Isa) -> Tier {
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
        Isa::Avx512 => Tier::Avx512 {
            vnni: has_vnni() && !VNNI_OFF.load(Ordering::Relaxed),
            vbmi: has_vbmi(),
        },
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
        GgmlType::Q5_0 => scalar::dequantize_q5_0(src, out),
        GgmlType::Q5_1 => scalar::dequantize_q5_1(src, out),
        GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => {
            kquants::dequantize(ty, src, out)
        }
        GgmlType::Q8K => kquants::dequantize_q8k(src, out),
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

/// Activation quantizer to Q8_K (ggml `quantize_row_q8_K_ref`; identical bits on every tier).
///
/// # Panics
/// If `x.len()` is not a multiple of 256 or `out` is too short.
pub fn quantize_row_q8_k(x: &[f32], out: &mut [BlockQ8K]) {
    assert!(
        x.len().is_multiple_of(QK_K) && x.len() / QK_K <= out.len(),
        "quantize_row_q8_k: {} values need {} blocks of {QK_K}, output holds {}",
        x.len(),
        x.len().div_ceil(QK_K),
        out.len()
    );
    kquants::quantize_q8k(x, out);
}

/// [`quantize_row_q8_k`] on `tier`'s kernel (the same bits on every tier). Lengths checked
/// by the caller: `x` holds `256 · out.len()` values.
fn quantize_q8k_tier(tier: Tier, x: &[f32], out: &mut [BlockQ8K]) {
    debug_assert_eq!(x.len(), out.len() * QK_K);
    match tier {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an AVX-512 tier was resolved against this CPU; lengths as documented.
        Tier::Avx512 { .. } => unsafe { avx512_k::quantize_q8k(x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an AVX2 tier was resolved against this CPU; lengths as documented.
        Tier::Avx2 => unsafe { avx2_k::quantize_q8k(x, out) },
        _ => kquants::quantize_q8k(x, out),
    }
}

/// One quantized activation row, borrowed.
#[derive(Clone, Copy, Debug)]
pub enum ActRow<'a> {
    Q8_0(&'a [BlockQ8_0]),
    Q8_1(&'a [BlockQ8_1]),
    Q8K(&'a [BlockQ8K]),
    F16(&'a [f16]),
    F32(&'a [f32]),
}

impl ActRow<'_> {
    /// Elements in the row.
    pub fn len(&self) -> usize {
        match self {
            ActRow::Q8_0(b) => b.len() * QK,
            ActRow::Q8_1(b) => b.len() * QK,
            ActRow::Q8K(b) => b.len() * QK_K,
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
            ActRow::Q8K(_) => ActKind::Q8K,
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
    Q8K,
    F16,
    F32,
}

impl ActKind {
    /// `None` for weight types without a kernel.
    pub fn for_weight(ty: GgmlType) -> Option<Self> {
        match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => Some(ActKind::Q8_0),
            GgmlType::Q4_1 | GgmlType::Q5_1 => Some(ActKind::Q8_1),
            GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => {
                Some(ActKind::Q8K)
            }
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
            ActKind::Q8K => cols / QK_K * 292,
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
        // SAFETY: the tier was resolved against this CPU; lengths checked by the caller. The
        // five-bit and K-quant kernels come first, the tier's other kernels after.
        Tier::Avx512 { vnni, .. } => unsafe {
            avx512_k::dot(vnni, ty, w, a).unwrap_or_else(|| avx512::dot(vnni, ty, w, a))
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Tier::Avx2 => unsafe { avx2_k::dot(ty, w, a).unwrap_or_else(|| avx2::dot(ty, w, a)) },
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
        (GgmlType::Q5_0, ActRow::Q8_0(b)) => scalar::vec_dot_q5_0_q8_0(w, b),
        (GgmlType::Q5_1, ActRow::Q8_1(b)) => scalar::vec_dot_q5_1_q8_1(w, b),
        (
            GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K,
            ActRow::Q8K(b),
        ) => kquants::vec_dot(ty, w, b),
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
    if let Tier::Avx512 { vnni, .. } = t {
        // SAFETY: the tier was resolved against this CPU; lengths checked by the caller.
        if let Some(r) = unsafe { avx512_k::dot4(vnni, ty, w, a) } {
            return r;
        }
        // SAFETY: as above.
        if let Some(r) = unsafe { avx512::dot4(vnni, ty, w, a) } {
            return r;
        }
    }
    if let (
        Tier::Scalar,
        [
            ActRow::Q8K(a0),
            ActRow::Q8K(a1),
            ActRow::Q8K(a2),
            ActRow::Q8K(a3),
        ],
    ) = (t, a)
    {
        return kquants::vec_dot_rows(ty, w, [a0, a1, a2, a3]);
    }
    #[cfg(target_arch = "x86_64")]
    if matches!(t, Tier::Avx2 | Tier::Avx512 { .. }) {
        // SAFETY: both tiers include AVX2, FMA and F16C; lengths checked by the caller.
        if let Some(r) = unsafe { avx2_k::dot4(ty, w, a) } {
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
// Vector helpers of the forward pass
// =============================================================================================

/// Asks the caches for the lines of `x` ahead of use (into L2 and outward): a hint with no
/// effect on results. Attention calls it on a key tile's value rows (heads wider than 64)
/// before the tile's scores, so that the rows, read later a few columns at a time, arrive
/// while the scores are computed; the AVX2 eight-row decode calls it on the next group of
/// weight rows, which it reads as eight short strided streams, and the AVX2 one-row decode
/// (`prefetch_distance`) on the rows ahead of its stream.
pub fn prefetch<T>(x: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        let p = x.as_ptr() as *const i8;
        let bytes = std::mem::size_of_val(x);
        let mut off = 0;
        while off < bytes {
            // SAFETY: `p + off` lies inside `x`; a prefetch never faults nor writes.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(p.add(off)) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// The variable that sets the software prefetch distance ([`prefetch_from_env`]).
pub const PREFETCH_ENV: &str = "POCKETPERF_PREFETCH";

/// The prefetch distance when [`PREFETCH_ENV`] is unset (bytes).
pub const DEFAULT_PREFETCH: usize = 4096;

/// Bytes ahead of the weights being read that the streaming decode kernels prefetch: the
/// AVX-512 VBMI tile's first pass (`gemm512`) and the AVX2 one-row kernel for Q8_0 and the
/// file's Q5_0 rows (`avx2_dec`). `POCKETPERF_PREFETCH` overrides [`DEFAULT_PREFETCH`]; 0
/// turns the prefetch off. A value that is not a byte count is an error naming it (an engine
/// refuses to load: [`crate::session::Engine::load`]).
pub fn prefetch_from_env() -> Result<usize> {
    let Some(v) = env_setting(PREFETCH_ENV)? else {
        return Ok(DEFAULT_PREFETCH);
    };
    let bad = |reason: String| Error::Env {
        var: PREFETCH_ENV,
        value: v.clone(),
        reason,
    };
    let d: usize = v
        .parse()
        .map_err(|_| bad("expected a distance in bytes (0 turns the prefetch off)".into()))?;
    if d > MAX_PREFETCH {
        return Err(bad(format!("at most {MAX_PREFETCH} bytes")));
    }
    Ok(d)
}

/// The largest distance taken: beyond a few pages ahead the lines are evicted before they
/// are read (PERFORMANCE.md measured 1024–12288).
const MAX_PREFETCH: usize = 1 << 20;

/// The value of the tuning variable `var`, trimmed: `None` when it is unset or blank, an
/// [`Error::Env`] naming it when it is not UTF-8. The readers of `POCKETPERF_PREFETCH` and
/// `POCKETPERF_REPACK` take what it gives.
pub(crate) fn env_setting(var: &'static str) -> Result<Option<String>> {
    match std::env::var(var) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v.trim().to_string())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::Env {
            var,
            value: v.to_string_lossy().into_owned(),
            reason: "not valid UTF-8".into(),
        }),
    }
}

#[cfg(target_arch = "x86_64")]
fn prefetch_distance() -> usize {
    static D: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *D.get_or_init(|| prefetch_from_env().unwrap_or(DEFAULT_PREFETCH))
}

/// Σ x² accumulated in f64 (RMSNorm; ggml sums squares in double).
pub fn sum_squares(isa: Isa, x: &[f32]) -> f64 {
    match resolve(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 F detected.
        Tier::Avx512 { .. } => unsafe { pack512::sum_squares(x) },
        _ => x.iter().map(|&v| f64::from(v) * f64::from(v)).sum(),
    }
}

/// The RMSNorm scale `1 / sqrt(mean(x²) + eps)`.
pub fn rms_scale(isa: Isa, x: &[f32], eps: f32) -> f32 {
    let ss = sum_squares(isa, x);
    1.0 / ((ss / x.len().max(1) as f64) as f32 + eps).sqrt()
}
