//! AVX-512 kernels (x86_64; F + BW + VL, with AVX512-VNNI `vpdpbusd` when present): the int8
//! dot products two ggml blocks per 512-bit step, and the four-activation-row tiles that
//! prefill uses (each weight block unpacked once for four rows).
//!
//! Per block pair the integer dots land in 16 i32 lanes (8 per block), are converted to f32
//! and scaled by a vector holding `d_w * d_a` of each block in its half; the Q4_1 min term
//! `m_w * s_a` is accumulated in a separate vector. Signed × signed products (Q8_0, Q4_0 minus
//! 8) move the sign of the weights onto the activations (`|w| · sign(w)·a`), as ggml does.
//! Activation quantization shares the AVX2 routine, exactly as ggml-cpu does on AVX-512.
//!
//! Every function is `unsafe`: the caller guarantees the CPU features named in its
//! `target_feature` and that the weight bytes hold as many blocks as the activation row.

use std::arch::x86_64::*;

use half::f16;

use super::ActRow;
use super::blocks::{BlockQ8_0, BlockQ8_1};
use super::scalar;
use crate::GgmlType;

/// Reads 4 bytes at `p` (any alignment) as an i32.
#[inline(always)]
pub(super) unsafe fn rd32(p: *const u8) -> i32 {
    // SAFETY: the caller guarantees four readable bytes at p.
    unsafe { std::ptr::read_unaligned(p as *const i32) }
}

/// Reads 2 bytes at `p` (any alignment) zero-extended to an i32.
#[inline(always)]
pub(super) unsafe fn rd16(p: *const u8) -> i32 {
    // SAFETY: the caller guarantees two readable bytes at p.
    i32::from(unsafe { std::ptr::read_unaligned(p as *const u16) })
}

/// Lane permutation that spreads lane 0 over the low 8 lanes and lane 2 over the high 8.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) fn spread_idx() -> __m512i {
    _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2)
}

/// Two 16-byte nibble arrays at `p0`, `p1` → 64 bytes in 0..=15: block 0 low, block 0 high,
/// block 1 low, block 1 high (ggml element order within each block).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn nibbles2(p0: *const u8, p1: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 16 readable bytes at p0 and at p1.
    unsafe {
        let t0 = _mm_loadu_si128(p0 as *const __m128i);
        let t1 = _mm_loadu_si128(p1 as *const __m128i);
        let lo = _mm256_set_m128i(_mm_srli_epi16(t0, 4), t0);
        let hi = _mm256_set_m128i(_mm_srli_epi16(t1, 4), t1);
        let v = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        _mm512_and_si512(v, _mm512_set1_epi8(0x0F))
    }
}

/// 32 bytes at `p0` and 32 at `p1` as one register.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn load2x32(p0: *const u8, p1: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 32 readable bytes at p0 and at p1.
    unsafe {
        let a = _mm256_loadu_si256(p0 as *const __m256i);
        let b = _mm256_loadu_si256(p1 as *const __m256i);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
    }
}

/// Converts the f16 pairs `e0` (lanes 0, 1) and `e1` (lanes 2, 3) to f32.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) fn halves(e0: i32, e1: i32) -> __m128 {
    _mm_cvtph_ps(_mm_set_epi32(0, 0, e1, e0))
}

/// Sign trick for i8 × i8: returns (|x|, y with x's sign) for an unsigned × signed dot.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) fn sign_split(x: __m512i, y: __m512i) -> (__m512i, __m512i) {
    let neg = _mm512_movepi8_mask(x);
    (
        _mm512_abs_epi8(x),
        _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y),
    )
}

/// u8 × i8 dot into 16 i32 lanes without VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) fn dot_us_bw(u: __m512i, s: __m512i) -> __m512i {
    _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1))
}

/// u8 × i8 dot into 16 i32 lanes with VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
pub(super) fn dot_us_vnni(u: __m512i, s: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s)
}

/// Horizontal sum of lanes 1 and 3 (the Q4_1 min terms).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) fn odd_lanes(v: __m128) -> f32 {
    let hi = _mm_movehl_ps(v, v); // lanes 2, 3, 2, 3
    let s = _mm_add_ps(v, hi); // lane 1 = v1 + v3
    _mm_cvtss_f32(_mm_shuffle_ps::<0b01>(s, s))
}

macro_rules! int_kernels {
    ($m:ident, $feat:literal, $dot:ident) => {
        mod $m {
            use super::*;

            #[target_feature(enable = $feat)]
            pub(super) unsafe fn q4_1_q8_1(w: &[u8], a: &[BlockQ8_1]) -> f32 {
                let nb = a.len();
                let mut acc = _mm512_setzero_ps();
                let mut mins = _mm_setzero_ps();
                let mut i = 0;
                // SAFETY: w holds nb blocks of 20 bytes, a holds nb blocks (caller contract).
                unsafe {
                    let idx = spread_idx();
                    while i + 2 <= nb {
                        let wp = w.as_ptr().add(i * 20);
                        let ap = a.as_ptr().add(i) as *const u8;
                        let p = _mm_mul_ps(
                            halves(rd32(wp), rd32(wp.add(20))),
                            halves(rd32(ap), rd32(ap.add(36))),
                        );
                        mins = _mm_add_ps(mins, p);
                        let scale = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p));
                        let qx = nibbles2(wp.add(4), wp.add(24));
                        let qy = load2x32(ap.add(4), ap.add(40));
                        acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps($dot(qx, qy)), acc);
                        i += 2;
                    }
                    let mut s = _mm512_reduce_add_ps(acc) + odd_lanes(mins);
                    if i < nb {
                        s += scalar::vec_dot_q4_1_q8_1(&w[i * 20..], &a[i..]);
                    }
                    s
                }
            }

            /// Q8_0 (`Q4 = false`) or Q4_0 (`Q4 = true`) weights with Q8_0 activations.
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn qx_q8_0<const Q4: bool>(w: &[u8], a: &[BlockQ8_0]) -> f32 {
                let nb = a.len();
                let bs = if Q4 { 18 } else { 34 };
                let mut acc = _mm512_setzero_ps();
                let mut i = 0;
                // SAFETY: w holds nb blocks of `bs` bytes, a holds nb blocks (caller contract).
                unsafe {
                    let idx = spread_idx();
                    while i + 2 <= nb {
                        let wp = w.as_ptr().add(i * bs);
                        let ap = a.as_ptr().add(i) as *const u8;
                        let p = _mm_mul_ps(
                            halves(rd16(wp), rd16(wp.add(bs))),
                            halves(rd16(ap), rd16(ap.add(34))),
                        );
                        let scale = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p));
                        let qx = if Q4 {
                            _mm512_sub_epi8(nibbles2(wp.add(2), wp.add(20)), _mm512_set1_epi8(8))
                        } else {
                            load2x32(wp.add(2), wp.add(36))
                        };
                        let qy = load2x32(ap.add(2), ap.add(36));
                        let (ux, sy) = sign_split(qx, qy);
                        acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps($dot(ux, sy)), acc);
                        i += 2;
                    }
                    let mut s = _mm512_reduce_add_ps(acc);
                    if i < nb {
                        s += if Q4 {
                            scalar::vec_dot_q4_0_q8_0(&w[i * bs..], &a[i..])
                        } else {
                            scalar::vec_dot_q8_0_q8_0(&w[i * bs..], &a[i..])
                        };
                    }
                    s
                }
            }

            /// One Q4_1 weight row with four Q8_1 activation rows.
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn q4_1_q8_1_x4(w: &[u8], a: [&[BlockQ8_1]; 4]) -> [f32; 4] {
                let nb = a[0].len();
                let mut acc = [_mm512_setzero_ps(); 4];
                let mut mins = [_mm_setzero_ps(); 4];
                let mut i = 0;
                // SAFETY: w holds nb blocks of 20 bytes, each a[k] holds nb blocks.
                unsafe {
                    let idx = spread_idx();
                    while i + 2 <= nb {
                        let wp = w.as_ptr().add(i * 20);
                        let wdm = halves(rd32(wp), rd32(wp.add(20)));
                        let qx = nibbles2(wp.add(4), wp.add(24));
                        for k in 0..4 {
                            let ap = a[k].as_ptr().add(i) as *const u8;
                            let p = _mm_mul_ps(wdm, halves(rd32(ap), rd32(ap.add(36))));
                            mins[k] = _mm_add_ps(mins[k], p);
                            let scale = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p));
                            let qy = load2x32(ap.add(4), ap.add(40));
                            acc[k] =
                                _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps($dot(qx, qy)), acc[k]);
                        }
                        i += 2;
                    }
                    let mut out = [0.0f32; 4];
                    for k in 0..4 {
                        out[k] = _mm512_reduce_add_ps(acc[k]) + odd_lanes(mins[k]);
                        if i < nb {
                            out[k] += scalar::vec_dot_q4_1_q8_1(&w[i * 20..], &a[k][i..]);
                        }
                    }
                    out
                }
            }

            /// One Q8_0 or Q4_0 weight row with four Q8_0 activation rows.
            #[target_feature(enable = $feat)]
            pub(super) unsafe fn qx_q8_0_x4<const Q4: bool>(
                w: &[u8],
                a: [&[BlockQ8_0]; 4],
            ) -> [f32; 4] {
                let nb = a[0].len();
                let bs = if Q4 { 18 } else { 34 };
                let mut acc = [_mm512_setzero_ps(); 4];
                let mut i = 0;
                // SAFETY: w holds nb blocks of `bs` bytes, each a[k] holds nb blocks.
                unsafe {
                    let idx = spread_idx();
                    while i + 2 <= nb {
                        let wp = w.as_ptr().add(i * bs);
                        let wd = halves(rd16(wp), rd16(wp.add(bs)));
                        let qx = if Q4 {
                            _mm512_sub_epi8(nibbles2(wp.add(2), wp.add(20)), _mm512_set1_epi8(8))
                        } else {
                            load2x32(wp.add(2), wp.add(36))
                        };
                        for k in 0..4 {
                            let ap = a[k].as_ptr().add(i) as *const u8;
                            let p = _mm_mul_ps(wd, halves(rd16(ap), rd16(ap.add(34))));
                            let scale = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p));
                            let qy = load2x32(ap.add(2), ap.add(36));
                            let (ux, sy) = sign_split(qx, qy);
                            acc[k] =
                                _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps($dot(ux, sy)), acc[k]);
                        }
                        i += 2;
                    }
                    let mut out = [0.0f32; 4];
                    for k in 0..4 {
                        out[k] = _mm512_reduce_add_ps(acc[k]);
                        if i < nb {
                            out[k] += if Q4 {
                                scalar::vec_dot_q4_0_q8_0(&w[i * bs..], &a[k][i..])
                            } else {
                                scalar::vec_dot_q8_0_q8_0(&w[i * bs..], &a[k][i..])
                            };
                        }
                    }
                    out
                }
            }
        }
    };
}

int_kernels!(bw, "avx512f,avx512bw,avx512vl,avx2,fma,f16c", dot_us_bw);
int_kernels!(
    vnni,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    dot_us_vnni
);

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn f16_f16(w: &[u8], a: &[f16]) -> f32 {
    let n = a.len();
    let wp = w.as_ptr();
    let ap = a.as_ptr() as *const u8;
    let mut acc0 = _mm512_setzero_ps();
    let mut acc1 = _mm512_setzero_ps();
    let mut i = 0;
    // SAFETY: w holds 2 * n bytes; a holds n halves (caller contract).
    unsafe {
        while i + 32 <= n {
            let w0 = _mm512_cvtph_ps(_mm256_loadu_si256(wp.add(2 * i) as *const __m256i));
            let w1 = _mm512_cvtph_ps(_mm256_loadu_si256(wp.add(2 * i + 32) as *const __m256i));
            let a0 = _mm512_cvtph_ps(_mm256_loadu_si256(ap.add(2 * i) as *const __m256i));
            let a1 = _mm512_cvtph_ps(_mm256_loadu_si256(ap.add(2 * i + 32) as *const __m256i));
            acc0 = _mm512_fmadd_ps(w0, a0, acc0);
            acc1 = _mm512_fmadd_ps(w1, a1, acc1);
            i += 32;
        }
        let mut s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
        while i < n {
            s += super::avx2::f16_to_f32(wp.add(2 * i)) * a[i].to_f32();
            i += 1;
        }
        s
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn f32_f32(w: &[u8], a: &[f32]) -> f32 {
    let n = a.len();
    let wp = w.as_ptr() as *const f32;
    let ap = a.as_ptr();
    let mut acc0 = _mm512_setzero_ps();
    let mut acc1 = _mm512_setzero_ps();
    let mut i = 0;
    // SAFETY: w holds 4 * n bytes; a holds n floats (caller contract). Loads are unaligned.
    unsafe {
        while i + 32 <= n {
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(wp.add(i)), _mm512_loadu_ps(ap.add(i)), acc0);
            acc1 = _mm512_fmadd_ps(
                _mm512_loadu_ps(wp.add(i + 16)),
                _mm512_loadu_ps(ap.add(i + 16)),
                acc1,
            );
            i += 32;
        }
        let mut s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
        while i < n {
            s += std::ptr::read_unaligned(wp.add(i)) * a[i];
            i += 1;
        }
        s
    }
}

/// The AVX-512 kernel for a (weight type, activation) pair other than the five-bit and
/// K-quant ones (the dispatch in `quant` asks `avx512_k` first).
///
/// # Safety
/// AVX-512 F/BW/VL, AVX2, FMA and F16C present, and AVX512-VNNI if `vnni`; `w` holds the row.
pub(super) unsafe fn dot(vnni: bool, ty: GgmlType, w: &[u8], a: ActRow<'_>) -> f32 {
    // SAFETY: forwarded caller contract.
    unsafe {
        match (ty, a, vnni) {
            (GgmlType::Q4_1, ActRow::Q8_1(b), true) => vnni::q4_1_q8_1(w, b),
            (GgmlType::Q4_1, ActRow::Q8_1(b), false) => bw::q4_1_q8_1(w, b),
            (GgmlType::Q4_0, ActRow::Q8_0(b), true) => vnni::qx_q8_0::<true>(w, b),
            (GgmlType::Q4_0, ActRow::Q8_0(b), false) => bw::qx_q8_0::<true>(w, b),
            (GgmlType::Q8_0, ActRow::Q8_0(b), true) => vnni::qx_q8_0::<false>(w, b),
            (GgmlType::Q8_0, ActRow::Q8_0(b), false) => bw::qx_q8_0::<false>(w, b),
            (GgmlType::F16, ActRow::F16(v), _) => f16_f16(w, v),
            (GgmlType::F32, ActRow::F32(v), _) => f32_f32(w, v),
            _ => super::scalar_dot(ty, w, a),
        }
    }
}

/// One weight row with four activation rows; `None` when this pair has no tiled kernel here
/// (the dispatch in `quant` asks `avx512_k` first).
///
/// # Safety
/// As [`dot`]; the four rows have equal lengths.
pub(super) unsafe fn dot4(
    vnni: bool,
    ty: GgmlType,
    w: &[u8],
    a: [ActRow<'_>; 4],
) -> Option<[f32; 4]> {
    // SAFETY: forwarded caller contract.
    unsafe {
        match (ty, a) {
            (
                GgmlType::Q4_1,
                [
                    ActRow::Q8_1(a0),
                    ActRow::Q8_1(a1),
                    ActRow::Q8_1(a2),
                    ActRow::Q8_1(a3),
                ],
            ) => {
                let r = [a0, a1, a2, a3];
                Some(if vnni {
                    vnni::q4_1_q8_1_x4(w, r)
                } else {
                    bw::q4_1_q8_1_x4(w, r)
                })
            }
            (
                GgmlType::Q8_0,
                [
                    ActRow::Q8_0(a0),
                    ActRow::Q8_0(a1),
                    ActRow::Q8_0(a2),
                    ActRow::Q8_0(a3),
                ],
            ) => {
                let r = [a0, a1, a2, a3];
                Some(if vnni {
                    vnni::qx_q8_0_x4::<false>(w, r)
                } else {
                    bw::qx_q8_0_x4::<false>(w, r)
                })
            }
            (
                GgmlType::Q4_0,
                [
                    ActRow::Q8_0(a0),
                    ActRow::Q8_0(a1),
                    ActRow::Q8_0(a2),
                    ActRow::Q8_0(a3),
                ],
            ) => {
                let r = [a0, a1, a2, a3];
                Some(if vnni {
                    vnni::qx_q8_0_x4::<true>(w, r)
                } else {
                    bw::qx_q8_0_x4::<true>(w, r)
                })
            }
            _ => None,
        }
    }
}
