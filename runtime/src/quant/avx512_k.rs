//! AVX-512 kernels (x86_64; F + BW + VL, with AVX512-VNNI when present) for the five-bit and
//! K-quant weights, for one activation row and the four-row prefill tile.
//!
//! Q5_0/Q5_1: two blocks per 512-bit step, as the Q4_0/Q4_1 kernels of [`super::avx512`]
//! (the quants decoded by the AVX2 routines of [`super::avx2_k`]); the integer block dot is
//! `vpdpbusd` with VNNI, `vpmaddubsw` + `vpmaddwd` without.
//! K-quants: Q4_K and Q6_K (those of the Q4_K_M files) are decoded in registers straight
//! from the weight bytes (Q4_K's scales and mins by four 32-bit masks and shifts, Q6_K's high
//! bits by per-half word shifts); the other K types by [`super::avx2_k::unpack_k`]. Each
//! block is multiplied 64 quants at a time: `vpmaddubsw` with the Q8_K quants, then the group
//! scales (one per 16 elements, spread with `vpermw`) by `vpdpwssd` with VNNI or `vpmaddwd` +
//! add without; Q6_K's offset (`32 · Σ sc·bsum`) is subtracted in i32. The integer sums per
//! block are exact and each block ends with the scalar reference's f32 operations, so these
//! kernels return exactly the scalar result. (Summing f32 in lanes instead, as ggml does,
//! was tried: it moved Gemma 3's logits on one reference prompt 0.62 RMS from exact math,
//! past the fidelity bound of 0.5 — the re-quantization noise `docs/RUNTIME.md` describes.)

//! Every function is `unsafe`: the caller guarantees the CPU features of its
//! `target_feature` and that the weight bytes hold as many blocks as the activation rows.

#![allow(clippy::needless_range_loop)] // activation rows of a tile indexed alongside accumulators

use std::arch::x86_64::*;

use super::ActRow;
use super::avx2::q5_0_quants;
use super::avx2_k::{K2, K3, K4, K5, dot16, k_bytes, k_code, k_min_off, q5_1_quants, unpack_k};
use super::avx512::{halves, load2x32, odd_lanes, rd16, rd32, spread_idx};
use super::blocks::{BlockQ8_0, BlockQ8_1, BlockQ8K};
use super::kquants::block_value;
use super::scalar;
use crate::GgmlType;

/// Word permutations spreading the group scales: chunk `j` of 64 quants takes groups
/// `4j..4j + 4`, each over 8 consecutive i16 lanes.
pub(super) static IDX_SC: [[u16; 32]; 4] = {
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

/// Q4_K: chunk `c` of 64 quants takes the scale of group `2c` in its low 16 words and of
/// group `2c + 1` in its high 16 (index into [`q4k_scales_mins`] widened to words).
pub(super) static IDX_K4: [[u16; 32]; 4] = {
    let mut t = [[0u16; 32]; 4];
    let mut c = 0;
    while c < 4 {
        let mut l = 0;
        while l < 32 {
            t[c][l] = (2 * c + l / 16) as u16;
            l += 1;
        }
        c += 1;
    }
    t
};

/// Q4_K: the eight mins (words 8..16) each repeated twice, to meet the 16 group sums.
pub(super) static IDX_MN_K4: [u16; 16] = {
    let mut t = [0u16; 16];
    let mut l = 0;
    while l < 16 {
        t[l] = (8 + l / 2) as u16;
        l += 1;
    }
    t
};

/// The 12 packed scale bytes of a Q4_K block at `p` as 16 bytes: the eight 6-bit scales,
/// then the eight 6-bit mins ([`super::kquants::scale_min_k4`] for all eight groups at once,
/// four per 32-bit word).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q4k_scales_mins(p: *const u8) -> __m128i {
    // SAFETY: 12 readable bytes at p (caller contract).
    let (a, b, c) = unsafe { (rd32(p), rd32(p.add(4)), rd32(p.add(8))) };
    let low6 = 0x3F3F_3F3F;
    let nib = 0x0F0F_0F0F;
    let top2 = 0x3030_3030;
    // Groups 0..4: the low six bits of bytes 0..4 (scales) and 4..8 (mins). Groups 4..8: a
    // nibble of bytes 8..12 with the top two bits of bytes 0..4 (scales) or 4..8 (mins) above.
    let sc_lo = a & low6;
    let mn_lo = b & low6;
    let sc_hi = (c & nib) | (((a as u32) >> 2) as i32 & top2);
    let mn_hi = (((c as u32) >> 4) as i32 & nib) | (((b as u32) >> 2) as i32 & top2);
    _mm_setr_epi32(sc_lo, sc_hi, mn_lo, mn_hi)
}

/// Sum of eight i32 lanes (exact).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
fn hsum8i(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// Two decoded 32-byte halves as one register.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
#[inline]
pub(super) fn dpw_bw(acc: __m512i, p: __m512i, s: __m512i) -> __m512i {
    _mm512_add_epi32(acc, _mm512_madd_epi16(p, s))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
pub(super) fn dpw_vnni(acc: __m512i, p: __m512i, s: __m512i) -> __m512i {
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

            /// Q4_K weights · Q8_K activations for `R` rows (1 or 4), the scalar result
            /// (module docs): per 64-quant chunk `c` the nibbles of `qs[32c..32c + 32]` give
            /// groups `2c` (low) and `2c + 1` (high) in one register, in element order.
            #[target_feature(enable = $feat)]
            pub(in crate::quant) unsafe fn q4k_lanes<const R: usize>(
                w: &[u8],
                a: [&[BlockQ8K]; R],
            ) -> [f32; R] {
                let nb = a[0].len();
                let mut out = [0.0f32; R];
                // SAFETY: w holds nb blocks of 144 bytes, each a[r] nb blocks (caller
                // contract); the index tables are 64 bytes each.
                unsafe {
                    let m4 = _mm256_set1_epi8(0x0F);
                    let idx = [
                        _mm512_loadu_si512(IDX_K4[0].as_ptr() as *const _),
                        _mm512_loadu_si512(IDX_K4[1].as_ptr() as *const _),
                        _mm512_loadu_si512(IDX_K4[2].as_ptr() as *const _),
                        _mm512_loadu_si512(IDX_K4[3].as_ptr() as *const _),
                    ];
                    let idx_mn = _mm256_loadu_si256(IDX_MN_K4.as_ptr() as *const _);
                    for i in 0..nb {
                        let p = w.as_ptr().add(i * 144);
                        let sm =
                            _mm512_castsi256_si512(_mm256_cvtepu8_epi16(q4k_scales_mins(p.add(4))));
                        let mn = _mm256_permutexvar_epi16(idx_mn, _mm512_castsi512_si256(sm));
                        let dd = _mm_cvtph_ps(_mm_cvtsi32_si128(rd32(p)));
                        let d = _mm_cvtss_f32(dd);
                        let dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
                        let mut u = [_mm512_setzero_si512(); 4];
                        let mut s = [_mm512_setzero_si512(); 4];
                        for c in 0..4 {
                            let v = _mm256_loadu_si256(p.add(16 + 32 * c) as *const __m256i);
                            u[c] = join(
                                _mm256_and_si256(v, m4),
                                _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                            );
                            s[c] = _mm512_permutexvar_epi16(idx[c], sm);
                        }
                        for r in 0..R {
                            let y = &a[r][i];
                            let q = y.qs.as_ptr();
                            let mut ia = _mm512_setzero_si512();
                            for c in 0..4 {
                                let qy = _mm512_loadu_si512(q.add(64 * c) as *const _);
                                ia = $dpw(ia, _mm512_maddubs_epi16(u[c], qy), s[c]);
                            }
                            let bs = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
                            let msum = hsum8i(_mm256_madd_epi16(bs, mn));
                            let isum = _mm512_reduce_add_epi32(ia);
                            out[r] += block_value(d, dmin, true, y.d, isum, msum);
                        }
                    }
                }
                out
            }

            /// Q6_K weights · Q8_K activations for `R` rows (1 or 4), the scalar result
            /// (module docs): per 128-quant half `h` the low nibbles of `ql[64h..64h + 64]`
            /// give elements `128h..128h + 64` and the high nibbles the next 64, each with its
            /// two high bits from `qh[32h..32h + 32]` (bit pairs 0, 1 and 2, 3).
            #[target_feature(enable = $feat)]
            pub(in crate::quant) unsafe fn q6k_lanes<const R: usize>(
                w: &[u8],
                a: [&[BlockQ8K]; R],
            ) -> [f32; R] {
                let nb = a[0].len();
                let mut out = [0.0f32; R];
                // SAFETY: w holds nb blocks of 210 bytes, each a[r] nb blocks (caller
                // contract); the index tables are 64 bytes each.
                unsafe {
                    let m4 = _mm512_set1_epi8(0x0F);
                    let m3 = _mm512_set1_epi8(3);
                    // Word shifts: the low 256 bits by 0 (4), the high 256 bits by 2 (6).
                    let sh_lo =
                        _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(2));
                    let sh_hi = _mm512_add_epi16(sh_lo, _mm512_set1_epi16(4));
                    let idx = [
                        _mm512_loadu_si512(IDX_SC[0].as_ptr() as *const _),
                        _mm512_loadu_si512(IDX_SC[1].as_ptr() as *const _),
                        _mm512_loadu_si512(IDX_SC[2].as_ptr() as *const _),
                        _mm512_loadu_si512(IDX_SC[3].as_ptr() as *const _),
                    ];
                    for i in 0..nb {
                        let p = w.as_ptr().add(i * 210);
                        let sc16 =
                            _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
                        let sc = _mm512_castsi256_si512(sc16);
                        let d = half::f16::from_bits(std::ptr::read_unaligned(
                            p.add(208) as *const u16
                        ))
                        .to_f32();
                        let mut u = [_mm512_setzero_si512(); 4];
                        for h in 0..2 {
                            let l = _mm512_loadu_si512(p.add(64 * h) as *const _);
                            let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                                p.add(128 + 32 * h) as *const __m256i,
                            ));
                            let h0 = _mm512_and_si512(_mm512_srlv_epi16(qh, sh_lo), m3);
                            let h1 = _mm512_and_si512(_mm512_srlv_epi16(qh, sh_hi), m3);
                            u[2 * h] = _mm512_or_si512(
                                _mm512_and_si512(l, m4),
                                _mm512_slli_epi16::<4>(h0),
                            );
                            u[2 * h + 1] = _mm512_or_si512(
                                _mm512_and_si512(_mm512_srli_epi16::<4>(l), m4),
                                _mm512_slli_epi16::<4>(h1),
                            );
                        }
                        let s = idx.map(|ix| _mm512_permutexvar_epi16(ix, sc));
                        for r in 0..R {
                            let y = &a[r][i];
                            let q = y.qs.as_ptr();
                            let mut ia = _mm512_setzero_si512();
                            for c in 0..4 {
                                let qy = _mm512_loadu_si512(q.add(64 * c) as *const _);
                                ia = $dpw(ia, _mm512_maddubs_epi16(u[c], qy), s[c]);
                            }
                            // The offset: 32 · Σ sc[g] · bsum[g], exact in i32.
                            let bs = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
                            let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bs, sc16));
                            ia = _mm512_sub_epi32(ia, _mm512_zextsi256_si512(off));
                            let isum = _mm512_reduce_add_epi32(ia);
                            out[r] += block_value(d, 0.0, false, y.d, isum, 0);
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
                        K4 => q4k_lanes::<R>(w, a),
                        K5 => k_q8k::<K5, R>(w, a),
                        _ => q6k_lanes::<R>(w, a),
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

/// ggml `quantize_row_q8_K_ref` (as [`super::kquants::quantize_q8k`]), 16 values at a time
/// with the same f32 operations, so the blocks are bit-identical: the largest magnitude by
/// `vmaxps` (a NaN never wins, as in the scalar comparison), its first occurrence for the
/// sign, `q = min(127, round_half_even(iscale · x))` by the default rounding of `vcvtps2dq`;
/// each 16-value group sum is one register's lanes.
///
/// # Safety
/// AVX-512 F/BW/VL present; `x.len()` is `256 · out.len()` or less, a multiple of 256.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    const R: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for (xb, y) in x.chunks_exact(super::QK_K).zip(out.iter_mut()) {
        let p = xb.as_ptr();
        // SAFETY: xb holds 256 values, read 16 at a time; y.qs holds 256 bytes.
        unsafe {
            let mut m = _mm512_setzero_ps();
            for c in 0..16 {
                m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(p.add(16 * c))), m);
            }
            let amax = _mm512_reduce_max_ps(m);
            if amax == 0.0 {
                y.d = 0.0;
                y.qs = [0; super::QK_K];
                y.bsums = [0; 16];
                continue;
            }
            let va = _mm512_set1_ps(amax);
            let mut max = amax;
            for c in 0..16 {
                let a = _mm512_abs_ps(_mm512_loadu_ps(p.add(16 * c)));
                let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, va);
                if hit != 0 {
                    max = xb[16 * c + hit.trailing_zeros() as usize];
                    break;
                }
            }
            let iscale = -127.0 / max;
            let vs = _mm512_set1_ps(iscale);
            let top = _mm512_set1_epi32(127);
            for c in 0..16 {
                let v = _mm512_mul_ps(vs, _mm512_loadu_ps(p.add(16 * c)));
                let q = _mm512_min_epi32(_mm512_cvt_roundps_epi32::<R>(v), top);
                _mm_storeu_si128(
                    y.qs.as_mut_ptr().add(16 * c) as *mut __m128i,
                    _mm512_cvtepi32_epi8(q),
                );
                y.bsums[c] = _mm512_reduce_add_epi32(q) as i16;
            }
            y.d = 1.0 / iscale;
        }
    }
}

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
