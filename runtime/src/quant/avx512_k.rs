//! AVX-512 kernels (x86_64; F + BW + VL, with AVX512-VNNI when present) for the five-bit and
//! K-quant weights, for one activation row and the four-row prefill tile.
//!
//! Q5_0/Q5_1: two blocks per 512-bit step, as the Q4_0/Q4_1 kernels of [`super::avx512`]
//! (the quants decoded by the AVX2 routines of [`super::avx2_k`]); the integer block dot is
//! `vpdpbusd` with VNNI, `vpmaddubsw` + `vpmaddwd` without.
//! K-quants: a block decoded by [`super::avx2_k::unpack_k`] is multiplied 64 quants at a
//! time: `vpmaddubsw` with the Q8_K quants, then the group scales (one per 16 elements,
//! spread with `vpermw`) by `vpdpwssd` with VNNI or `vpmaddwd` + add without. The integer
//! sums per block are exact and each block ends with the scalar reference's f32 operations,
//! so these kernels return exactly the scalar result.
//!
//! Every function is `unsafe`: the caller guarantees the CPU features of its
//! `target_feature` and that the weight bytes hold as many blocks as the activation rows.

#![allow(clippy::needless_range_loop)] // activation rows of a tile indexed alongside accumulators

use std::arch::x86_64::*;

use super::ActRow;
use super::avx2_k::{
    K2, K3, K4, K5, K6, dot16, k_bytes, k_code, k_min_off, q5_0_quants, q5_1_quants, unpack_k,
};
use super::avx512::{halves, load2x32, odd_lanes, rd16, rd32, spread_idx};
use super::blocks::{BlockQ8_0, BlockQ8_1, BlockQ8K};
use super::kquants::block_value;
use super::scalar;
use crate::GgmlType;

/// Word permutations spreading the group scales: chunk `j` of 64 quants takes groups
/// `4j..4j + 4`, each over 8 consecutive i16 lanes.
static IDX_SC: [[u16; 32]; 4] = {
    let mut t = [[0u16; 32]; 4];
    let mut j = 0;
    while j < 4 {
        let mut l = 0;
        while l < 32 {
            t[j][l] = (4 * j + l / 8) as u16;
            l += 1;
        }
        j += 1;
    }
    t
};

/// Two decoded 32-byte halves as one register.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
fn dpw_bw(acc: __m512i, p: __m512i, s: __m512i) -> __m512i {
    _mm512_add_epi32(acc, _mm512_madd_epi16(p, s))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn dpw_vnni(acc: __m512i, p: __m512i, s: __m512i) -> __m512i {
    _mm512_dpwssd_epi32(acc, p, s)
}

macro_rules! kernels {
    ($m:ident, $feat:literal, $dot:path, $dpw:ident) => {
        pub(super) mod $m {
            use super::*;

            /// Q5_0 weights · Q8_0 activations for `R` rows (1 or 4).
            #[target_feature(enable = $feat)]
            pub(in crate::quant) unsafe fn q5_0_q8_0<const R: usize>(
                w: &[u8],
                a: [&[BlockQ8_0]; R],
            ) -> [f32; R] {
                let nb = a[0].len();
                let mut acc = [_mm512_setzero_ps(); R];
                let mut i = 0;
                // SAFETY: w holds nb blocks of 22 bytes, each a[r] nb blocks (caller contract).
                unsafe {
                    let idx = spread_idx();
                    while i + 2 <= nb {
                        let wp = w.as_ptr().add(i * 22);
                        let wd = halves(rd16(wp), rd16(wp.add(22)));
                        let qx = join(q5_0_quants(wp), q5_0_quants(wp.add(22)));
                        let neg = _mm512_movepi8_mask(qx);
                        let ax = _mm512_abs_epi8(qx);
                        for r in 0..R {
                            let ap = a[r].as_ptr().add(i) as *const u8;
                            let p = _mm_mul_ps(wd, halves(rd16(ap), rd16(ap.add(34))));
                            let scale = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p));
                            let qy = load2x32(ap.add(2), ap.add(36));
                            let sy = _mm512_mask_sub_epi8(qy, neg, _mm512_setzero_si512(), qy);
                            let d = _mm512_cvtepi32_ps($dot(ax, sy));
                            acc[r] = _mm512_fmadd_ps(scale, d, acc[r]);
                        }
                        i += 2;
                    }
                    let mut out = [0.0f32; R];
                    for r in 0..R {
                        out[r] = _mm512_reduce_add_ps(acc[r]);
                        if i < nb {
                            out[r] += scalar::vec_dot_q5_0_q8_0(&w[i * 22..], &a[r][i..]);
                        }
                    }
                    out
                }
            }

            /// Q5_1 weights · Q8_1 activations for `R` rows (1 or 4).
            #[target_feature(enable = $feat)]
            pub(in crate::quant) unsafe fn q5_1_q8_1<const R: usize>(
                w: &[u8],
                a: [&[BlockQ8_1]; R],
            ) -> [f32; R] {
                let nb = a[0].len();
                let mut acc = [_mm512_setzero_ps(); R];
                let mut mins = [_mm_setzero_ps(); R];
                let mut i = 0;
                // SAFETY: w holds nb blocks of 24 bytes, each a[r] nb blocks (caller contract).
                unsafe {
                    let idx = spread_idx();
                    while i + 2 <= nb {
                        let wp = w.as_ptr().add(i * 24);
                        let wdm = halves(rd32(wp), rd32(wp.add(24)));
                        let qx = join(q5_1_quants(wp), q5_1_quants(wp.add(24)));
                        for r in 0..R {
                            let ap = a[r].as_ptr().add(i) as *const u8;
                            let p = _mm_mul_ps(wdm, halves(rd32(ap), rd32(ap.add(36))));
                            mins[r] = _mm_add_ps(mins[r], p);
                            let scale = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p));
                            let qy = load2x32(ap.add(4), ap.add(40));
                            let d = _mm512_cvtepi32_ps($dot(qx, qy));
                            acc[r] = _mm512_fmadd_ps(scale, d, acc[r]);
                        }
                        i += 2;
                    }
                    let mut out = [0.0f32; R];
                    for r in 0..R {
                        out[r] = _mm512_reduce_add_ps(acc[r]) + odd_lanes(mins[r]);
                        if i < nb {
                            out[r] += scalar::vec_dot_q5_1_q8_1(&w[i * 24..], &a[r][i..]);
                        }
                    }
                    out
                }
            }

            /// K-quant weights of type `T` · Q8_K activations for `R` rows (1 or 4).
            #[target_feature(enable = $feat)]
            pub(in crate::quant) unsafe fn k_q8k<const T: u8, const R: usize>(
                w: &[u8],
                a: [&[BlockQ8K]; R],
            ) -> [f32; R] {
                let nb = a[0].len();
                let bb = k_bytes(T);
                let (has_min, off) = k_min_off(T);
                let mut out = [0.0f32; R];
                // SAFETY: w holds nb blocks of bb bytes, each a[r] nb blocks (caller
                // contract); the index tables are 64 bytes each.
                unsafe {
                    let idx = [
                        _mm512_loadu_si512(IDX_SC[0].as_ptr() as *const _),
                        _mm512_loadu_si512(IDX_SC[1].as_ptr() as *const _),
                        _mm512_loadu_si512(IDX_SC[2].as_ptr() as *const _),
                        _mm512_loadu_si512(IDX_SC[3].as_ptr() as *const _),
                    ];
                    for i in 0..nb {
                        let k = unpack_k::<T>(w.as_ptr().add(i * bb));
                        let scw = _mm512_castsi256_si512(_mm256_loadu_si256(
                            k.sc.as_ptr() as *const __m256i
                        ));
                        let mut s = [_mm512_setzero_si512(); 4];
                        let mut u = [_mm512_setzero_si512(); 4];
                        for j in 0..4 {
                            s[j] = _mm512_permutexvar_epi16(idx[j], scw);
                            u[j] = join(k.u[2 * j], k.u[2 * j + 1]);
                        }
                        for r in 0..R {
                            let y = &a[r][i];
                            let q = y.qs.as_ptr();
                            let mut acc = _mm512_setzero_si512();
                            for j in 0..4 {
                                let qy = _mm512_loadu_si512(q.add(64 * j) as *const _);
                                acc = $dpw(acc, _mm512_maddubs_epi16(u[j], qy), s[j]);
                            }
                            let mut isum = _mm512_reduce_add_epi32(acc);
                            if off != 0 {
                                isum -= off * dot16(k.sc.as_ptr(), y.bsums.as_ptr());
                            }
                            let msum = if has_min {
                                dot16(k.mn.as_ptr(), y.bsums.as_ptr())
                            } else {
                                0
                            };
                            out[r] += block_value(k.d, k.dmin, has_min, y.d, isum, msum);
                        }
                    }
                }
                out
            }

            /// Runs the K kernel of `ty` for `R` rows; `None` if `ty` is not a K-quant.
            #[target_feature(enable = $feat)]
            pub(in crate::quant) unsafe fn k_dispatch<const R: usize>(
                ty: GgmlType,
                w: &[u8],
                a: [&[BlockQ8K]; R],
            ) -> Option<[f32; R]> {
                // SAFETY: forwarded caller contract.
                unsafe {
                    Some(match k_code(ty)? {
                        K2 => k_q8k::<K2, R>(w, a),
                        K3 => k_q8k::<K3, R>(w, a),
                        K4 => k_q8k::<K4, R>(w, a),
                        K5 => k_q8k::<K5, R>(w, a),
                        _ => k_q8k::<K6, R>(w, a),
                    })
                }
            }
        }
    };
}

kernels!(
    bw,
    "avx512f,avx512bw,avx512vl,avx2,fma,f16c",
    super::super::avx512::dot_us_bw,
    dpw_bw
);
kernels!(
    vnni,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    super::super::avx512::dot_us_vnni,
    dpw_vnni
);

/// The AVX-512 kernel for a new-format (weight, activation) pair; `None` for other pairs.
///
/// # Safety
/// AVX-512 F/BW/VL, AVX2, FMA and F16C present, and AVX512-VNNI if `vnni`; `w` holds the row.
pub(super) unsafe fn dot(vnni: bool, ty: GgmlType, w: &[u8], a: ActRow<'_>) -> Option<f32> {
    // SAFETY: forwarded caller contract.
    unsafe {
        match (ty, a, vnni) {
            (GgmlType::Q5_0, ActRow::Q8_0(b), true) => Some(vnni::q5_0_q8_0::<1>(w, [b])[0]),
            (GgmlType::Q5_0, ActRow::Q8_0(b), false) => Some(bw::q5_0_q8_0::<1>(w, [b])[0]),
            (GgmlType::Q5_1, ActRow::Q8_1(b), true) => Some(vnni::q5_1_q8_1::<1>(w, [b])[0]),
            (GgmlType::Q5_1, ActRow::Q8_1(b), false) => Some(bw::q5_1_q8_1::<1>(w, [b])[0]),
            (_, ActRow::Q8K(b), true) => vnni::k_dispatch::<1>(ty, w, [b]).map(|r| r[0]),
            (_, ActRow::Q8K(b), false) => bw::k_dispatch::<1>(ty, w, [b]).map(|r| r[0]),
            _ => None,
        }
    }
}

/// One new-format weight row with four activation rows; `None` for other pairs.
///
/// # Safety
/// As [`dot`]; the four rows have equal lengths.
pub(super) unsafe fn dot4(
    vnni: bool,
    ty: GgmlType,
    w: &[u8],
    a: [ActRow<'_>; 4],
) -> Option<[f32; 4]> {
    use ActRow::{Q8_0, Q8_1, Q8K};
    // SAFETY: forwarded caller contract.
    unsafe {
        match (ty, a) {
            (GgmlType::Q5_0, [Q8_0(a0), Q8_0(a1), Q8_0(a2), Q8_0(a3)]) => Some(if vnni {
                vnni::q5_0_q8_0::<4>(w, [a0, a1, a2, a3])
            } else {
                bw::q5_0_q8_0::<4>(w, [a0, a1, a2, a3])
            }),
            (GgmlType::Q5_1, [Q8_1(a0), Q8_1(a1), Q8_1(a2), Q8_1(a3)]) => Some(if vnni {
                vnni::q5_1_q8_1::<4>(w, [a0, a1, a2, a3])
            } else {
                bw::q5_1_q8_1::<4>(w, [a0, a1, a2, a3])
            }),
            (_, [Q8K(a0), Q8K(a1), Q8K(a2), Q8K(a3)]) => {
                if vnni {
                    vnni::k_dispatch::<4>(ty, w, [a0, a1, a2, a3])
                } else {
                    bw::k_dispatch::<4>(ty, w, [a0, a1, a2, a3])
                }
            }
            _ => None,
        }
    }
}
