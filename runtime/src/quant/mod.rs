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
//! `avx512_kgemm` holds the AVX-512 prefill tile of Q4_K and Q6_K (four weight rows × four
//! activation rows), which [`matmul_rows`] runs for four or more activation rows; it reuses
//! helpers of `avx512_k`.
//!
//! The matrix products (the output view, the row-range products and the tile paths they try
//! first) live in `matmul`.
//!
//! Size: over 800 lines because the dispatch and the activation buffers share the private
//! tier and layout types; the kernels themselves live in the per-tier modules.

pub mod act;
pub mod attn;
pub mod blocks;
pub mod kquants;
mod matmul;
pub mod packed;
pub mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_k;
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
use half::slice::HalfBitsSliceExt;

pub use blocks::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8_1, BlockQ8K, QK, QK_K,
};
pub use matmul::{OutRows, act_layout, chunk_size, matmul, matmul_rows, matmul_span};

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
                "no matrix kernel for {ty} weights (supported: F32, F16, Q4_0, Q4_1, Q5_0, \
                 Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"
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

/// How a [`QuantizedActs`] currently stores its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActLayout {
    /// ggml blocks (or f16/f32 values) of the given kind, one row after another.
    Blocks(ActKind),
    /// The packed Q8x4 layout of [`packed`] (AVX-512 tier with VBMI; Q4_0/Q4_1/Q5_0/Q8_0
    /// weights).
    Packed,
}

impl ActLayout {
    /// The layout `tier` multiplies with weights of type `w_ty`; `None` when the type has no
    /// kernel.
    fn choose(tier: Tier, w_ty: GgmlType) -> Option<Self> {
        let kind = ActKind::for_weight(w_ty)?;
        #[cfg(target_arch = "x86_64")]
        let packed = matches!(tier, Tier::Avx512 { vbmi: true, .. });
        #[cfg(not(target_arch = "x86_64"))]
        let packed = {
            let _ = tier;
            false
        };
        let packed_ty = matches!(
            w_ty,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0
        );
        Some(if packed && packed_ty {
            ActLayout::Packed
        } else {
            ActLayout::Blocks(kind)
        })
    }

    /// Bytes of one row of `cols` elements, rounded up to a multiple of 64.
    fn row_bytes(self, cols: usize) -> usize {
        match self {
            ActLayout::Blocks(k) => k.row_bytes(cols).next_multiple_of(64),
            ActLayout::Packed => packed::row_bytes(cols),
        }
    }

    /// Column granularity at which parts of a row can be quantized independently.
    pub fn align(self) -> usize {
        match self {
            ActLayout::Blocks(ActKind::Q8_0 | ActKind::Q8_1) => QK,
            ActLayout::Blocks(ActKind::Q8K) => QK_K,
            ActLayout::Blocks(_) => 1,
            ActLayout::Packed => packed::GROUP_ELEMS,
        }
    }
}

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Preallocated quantized activations: up to `max_rows` rows of up to `max_cols` elements in
/// whichever layout the next weight matrix needs on the chosen tier. Quantizing allocates
/// nothing; rows start on 64-byte boundaries.
pub struct QuantizedActs {
    buf: Vec<Line>,
    max_rows: usize,
    max_cols: usize,
    layout: ActLayout,
    tier: Tier,
    n_rows: usize,
    cols: usize,
    stride: usize,
}

impl std::fmt::Debug for QuantizedActs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantizedActs")
            .field("layout", &self.layout)
            .field("n_rows", &self.n_rows)
            .field("cols", &self.cols)
            .finish()
    }
}

impl QuantizedActs {
    pub fn new(max_rows: usize, max_cols: usize) -> Self {
        // f32 is the widest layout: 4 bytes per element, plus row padding.
        let row = (4 * max_cols).next_multiple_of(64) + 64;
        Self {
            buf: vec![Line([0; 64]); (max_rows * row).div_ceil(64)],
            max_rows,
            max_cols,
            layout: ActLayout::Blocks(ActKind::F32),
            tier: Tier::Scalar,
            n_rows: 0,
            cols: 0,
            stride: 0,
        }
    }

    pub fn layout(&self) -> ActLayout {
        self.layout
    }
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The ggml activation kind (`Q8_1` for the packed layout, which carries its sums).
    pub fn kind(&self) -> ActKind {
        match self.layout {
            ActLayout::Blocks(k) => k,
            ActLayout::Packed => ActKind::Q8_1,
        }
    }

    /// Sets the shape and layout for `n_rows` rows of `cols` values multiplied with weights of
    /// type `w_ty` on tier `isa`, and returns a writer that fills rows (possibly from several
    /// threads). Rows not written keep stale contents.
    ///
    /// # Panics
    /// If `w_ty` has no kernel, the shape exceeds the capacity, or `cols` is not a multiple
    /// of 32 for a quantized format.
    pub fn prepare(
        &mut self,
        isa: Isa,
        w_ty: GgmlType,
        n_rows: usize,
        cols: usize,
    ) -> ActsWriter<'_> {
        let tier = resolve(isa);
        let layout = ActLayout::choose(tier, w_ty)
            .unwrap_or_else(|| panic!("quantize_for: no kernel for {w_ty} weights"));
        assert!(
            n_rows <= self.max_rows && cols <= self.max_cols,
            "quantize_for: {n_rows}x{cols} exceeds the capacity {}x{}",
            self.max_rows,
            self.max_cols
        );
        if !matches!(layout, ActLayout::Blocks(ActKind::F16 | ActKind::F32)) {
            let bl = w_ty.block_len();
            assert!(
                cols.is_multiple_of(bl),
                "quantize_for: {cols} columns is not a multiple of {bl}"
            );
        }
        self.layout = layout;
        self.tier = tier;
        self.n_rows = n_rows;
        self.cols = cols;
        self.stride = layout.row_bytes(cols);
        ActsWriter {
            base: self.buf.as_mut_ptr() as *mut u8,
            layout,
            tier,
            cols,
            stride: self.stride,
            n_rows,
            _borrow: std::marker::PhantomData,
        }
    }

    /// Quantizes `n_rows` rows of `cols` values (`x` row-major) for weights of type `w_ty`.
    ///
    /// # Panics
    /// As [`QuantizedActs::prepare`], or if `x` is shorter than `n_rows * cols`.
    pub fn quantize_for(
        &mut self,
        isa: Isa,
        w_ty: GgmlType,
        x: &[f32],
        n_rows: usize,
        cols: usize,
    ) {
        assert!(
            x.len() >= n_rows * cols,
            "quantize_for: x holds {} values, {n_rows}x{cols} needed",
            x.len()
        );
        let mut w = self.prepare(isa, w_ty, n_rows, cols);
        for r in 0..n_rows {
            w.row(r, &x[r * cols..(r + 1) * cols], None);
        }
    }

    fn row_bytes_of(&self, r: usize) -> &[u8] {
        assert!(r < self.n_rows, "activation row {r} of {}", self.n_rows);
        let bytes: &[u8] = bytemuck::cast_slice(&self.buf);
        &bytes[r * self.stride..(r + 1) * self.stride]
    }

    /// Row `r` of the last quantization in a ggml block layout.
    ///
    /// # Panics
    /// If `r >= n_rows()` or the layout is packed (see [`QuantizedActs::packed_row`]).
    pub fn row(&self, r: usize) -> ActRow<'_> {
        let ActLayout::Blocks(kind) = self.layout else {
            panic!("activation row {r}: packed layout (use packed_row)");
        };
        let b = &self.row_bytes_of(r)[..kind.row_bytes(self.cols)];
        // Rows start on 64-byte boundaries: every view is aligned for its element type, so
        // these casts cannot fail.
        match kind {
            ActKind::Q8_0 => ActRow::Q8_0(bytemuck::cast_slice(b)),
            ActKind::Q8_1 => ActRow::Q8_1(bytemuck::cast_slice(b)),
            ActKind::Q8K => ActRow::Q8K(bytemuck::cast_slice(b)),
            ActKind::F16 => {
                let bits: &[u16] = bytemuck::cast_slice(b);
                ActRow::F16(bits.reinterpret_cast())
            }
            ActKind::F32 => ActRow::F32(bytemuck::cast_slice(b)),
        }
    }

    /// Row `r` of the last quantization in the packed layout.
    ///
    /// # Panics
    /// If `r >= n_rows()` or the layout is not packed.
    pub fn packed_row(&self, r: usize) -> packed::PackedRow<'_> {
        assert_eq!(
            self.layout,
            ActLayout::Packed,
            "activation row {r}: not packed"
        );
        packed::PackedRow::new(self.row_bytes_of(r), self.cols / QK)
    }
}

/// Writes rows (or aligned column ranges of rows) of a [`QuantizedActs`]; shareable across
/// the workers of one pool job, each writing its own rows or ranges.
pub struct ActsWriter<'a> {
    base: *mut u8,
    layout: ActLayout,
    tier: Tier,
    cols: usize,
    stride: usize,
    n_rows: usize,
    _borrow: std::marker::PhantomData<&'a mut QuantizedActs>,
}

// SAFETY: shared use only reaches `write_cols`, whose `unsafe` contract excludes overlapping
// concurrent writes; `row` needs `&mut`. The buffer is borrowed mutably for 'a.
unsafe impl Send for ActsWriter<'_> {}
// SAFETY: see above.
unsafe impl Sync for ActsWriter<'_> {}

impl ActsWriter<'_> {
    pub fn layout(&self) -> ActLayout {
        self.layout
    }

    /// Quantizes a whole row `r` from `x[..cols]`; with `norm = Some((scale, g))` the values
    /// are `(x · scale) · g` (a fused RMSNorm).
    ///
    /// # Panics
    /// If `r` is out of range or `x` (or `g`) is shorter than the row.
    pub fn row(&mut self, r: usize, x: &[f32], norm: Option<(f32, &[f32])>) {
        // SAFETY: `&mut self` excludes every other write through this writer.
        unsafe { self.write_cols(r, 0, &x[..self.cols], norm) }
    }

    /// Quantizes columns `c0..c0 + x.len()` of row `r` (`c0` and the length multiples of
    /// [`ActLayout::align`], or the range ending at the row's end).
    ///
    /// # Safety
    /// No other thread writes the same row and column range concurrently, and nothing reads
    /// it until the writes are complete (the pool's join orders them).
    ///
    /// # Panics
    /// If the range is out of bounds or misaligned.
    pub unsafe fn write_cols(&self, r: usize, c0: usize, x: &[f32], norm: Option<(f32, &[f32])>) {
        let n = x.len();
        let al = self.layout.align();
        assert!(r < self.n_rows, "activation row {r} of {}", self.n_rows);
        assert!(
            c0 + n <= self.cols
                && c0.is_multiple_of(al)
                && (n.is_multiple_of(al) || c0 + n == self.cols)
                && n.is_multiple_of(if al > 1 { QK } else { 1 }),
            "activation columns {c0}..{} of {} (alignment {al})",
            c0 + n,
            self.cols
        );
        if let Some((_, g)) = norm {
            assert!(g.len() >= n, "norm weights: {} for {n} columns", g.len());
        }
        // SAFETY: row r lies inside the buffer (n_rows * stride <= capacity, checked in
        // `prepare`); the column range is inside the row; exclusivity is the caller's.
        let row = unsafe { self.base.add(r * self.stride) };
        match self.layout {
            ActLayout::Packed => {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the packed layout is only chosen on an AVX-512 + VBMI tier; the
                // groups written are c0/128.. inside the row's groups.
                unsafe {
                    pack512::quantize_packed(
                        x.as_ptr(),
                        n / QK,
                        norm.map(|(s, g)| (s, g.as_ptr())),
                        row,
                        packed::groups(self.cols),
                        c0 / packed::GROUP_ELEMS,
                    );
                }
            }
            ActLayout::Blocks(kind) => {
                let isa = match self.tier {
                    #[cfg(target_arch = "x86_64")]
                    Tier::Avx2 => Isa::Avx2,
                    #[cfg(target_arch = "x86_64")]
                    Tier::Avx512 { .. } => Isa::Avx512,
                    #[cfg(target_arch = "aarch64")]
                    Tier::Neon => Isa::Neon,
                    Tier::Scalar => Isa::Scalar,
                };
                let off = kind.row_bytes(c0);
                let len = kind.row_bytes(n);
                // SAFETY: bytes [off, off + len) of the row are inside it and owned by this
                // call (caller contract); the row start is 64-byte aligned and `off` is a
                // multiple of the element size, so the typed views below are aligned.
                let dst = unsafe { std::slice::from_raw_parts_mut(row.add(off), len) };
                let mut tmp = [0.0f32; QK];
                match kind {
                    ActKind::Q8_0 | ActKind::Q8_1 => {
                        for (b, xb) in x.chunks_exact(QK).enumerate() {
                            let src: &[f32] = match norm {
                                Some((s, g)) => {
                                    for ((t, &v), &w) in
                                        tmp.iter_mut().zip(xb).zip(&g[b * QK..(b + 1) * QK])
                                    {
                                        *t = v * s * w;
                                    }
                                    &tmp
                                }
                                None => xb,
                            };
                            if kind == ActKind::Q8_0 {
                                let out: &mut [BlockQ8_0] =
                                    bytemuck::cast_slice_mut(&mut dst[b * 34..(b + 1) * 34]);
                                quantize_row_q8_0(isa, src, out);
                            } else {
                                let out: &mut [BlockQ8_1] =
                                    bytemuck::cast_slice_mut(&mut dst[b * 36..(b + 1) * 36]);
                                quantize_row_q8_1(isa, src, out);
                            }
                        }
                    }
                    ActKind::Q8K => {
                        let mut tmp = [0.0f32; QK_K];
                        for (b, xb) in x.chunks_exact(QK_K).enumerate() {
                            let src: &[f32] = match norm {
                                Some((s, g)) => {
                                    for ((t, &v), &w) in
                                        tmp.iter_mut().zip(xb).zip(&g[b * QK_K..(b + 1) * QK_K])
                                    {
                                        *t = v * s * w;
                                    }
                                    &tmp
                                }
                                None => xb,
                            };
                            let out: &mut [BlockQ8K] =
                                bytemuck::cast_slice_mut(&mut dst[b * 292..(b + 1) * 292]);
                            quantize_q8k_tier(self.tier, src, out);
                        }
                    }
                    ActKind::F16 => {
                        let bits: &mut [u16] = bytemuck::cast_slice_mut(dst);
                        let out: &mut [f16] = bits.reinterpret_cast_mut();
                        for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
                            let v = match norm {
                                Some((s, g)) => v * s * g[i],
                                None => v,
                            };
                            *o = f16::from_f32(v);
                        }
                    }
                    ActKind::F32 => {
                        let out: &mut [f32] = bytemuck::cast_slice_mut(dst);
                        for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
                            *o = match norm {
                                Some((s, g)) => v * s * g[i],
                                None => v,
                            };
                        }
                    }
                }
            }
        }
    }
}

// =============================================================================================
// Vector helpers of the forward pass
// =============================================================================================

/// Asks the caches for the lines of `x` ahead of use (into L2 and outward): a hint with no
/// effect on results. Attention calls it on a key tile's value rows (heads wider than 64)
/// before the tile's scores, so that the rows, read later a few columns at a time, arrive
/// while the scores are computed; the AVX2 eight-row decode calls it on the next group of
/// weight rows, which it reads as eight short strided streams.
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
