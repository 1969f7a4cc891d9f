//! AVX-512 activation side of the packed layout ([`super::packed`]): quantizing rows of f32
//! into Q8 blocks in packed lane order (optionally through an unfused RMSNorm scale and gain),
//! and RMSNorm's sum of squares. The matrix tiles that read these rows are in
//! [`super::gemm512`].

use std::arch::x86_64::*;

use super::packed::{GROUP_ELEMS, GROUP_QS, UNIT_BYTES, has_units, units_offset};

/// Activation quantizer: 4 × (16 bytes of one block) → packed lane order.
static IDX_PACK: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut l = 0;
    while l < 16 {
        t[l] = ((l % 4) * 4 + l / 4) as u32;
        l += 1;
    }
    t
};

/// Quantizes `nb` blocks at `x` (each value `x · scale · g` when `g` is given, with the
/// rounding order of an unfused RMSNorm, `(x · scale) · g`) into the packed groups
/// `g0..g0 + ceil(nb / 4)` of the row at `out` whose groups number `ng`. Blocks past `nb`
/// in the last group are zeroed. A row with units ([`super::packed::has_units`]) gets each
/// group's part of its unit too.
///
/// # Safety
/// AVX-512 F/BW/VL/VBMI, F16C present; `x` (and `g`) hold `nb · 32` floats; `out` points at a
/// packed row of `ng` groups with `g0 + ceil(nb / 4) <= ng`, not accessed concurrently.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn quantize_packed(
    x: *const f32,
    nb: usize,
    scale: Option<(f32, *const f32)>,
    out: *mut u8,
    ng: usize,
    g0: usize,
) {
    let uoff = has_units(ng).then(|| units_offset(ng * GROUP_ELEMS));
    // SAFETY: forwarded caller contract.
    unsafe {
        let idx = _mm512_loadu_si512(IDX_PACK.as_ptr() as *const __m512i);
        for gi in 0..nb.div_ceil(4) {
            let g = g0 + gi;
            let mut lo = _mm512_setzero_si512();
            let mut hi = _mm512_setzero_si512();
            let mut ds = [0.0f32; 4];
            let mut ss = [0.0f32; 4];
            let mut negs = [0i32; 4];
            for bi in 0..4 {
                let b = 4 * gi + bi;
                if b >= nb {
                    break;
                }
                let p = x.add(32 * b);
                let mut v0 = _mm512_loadu_ps(p);
                let mut v1 = _mm512_loadu_ps(p.add(16));
                if let Some((sc, gp)) = scale {
                    let s = _mm512_set1_ps(sc);
                    v0 = _mm512_mul_ps(_mm512_mul_ps(v0, s), _mm512_loadu_ps(gp.add(32 * b)));
                    v1 = _mm512_mul_ps(_mm512_mul_ps(v1, s), _mm512_loadu_ps(gp.add(32 * b + 16)));
                }
                let m = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
                let amax = _mm512_reduce_max_ps(m);
                let d = amax / 127.0;
                let id = _mm512_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
                const R: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
                let q0 = _mm512_cvt_roundps_epi32::<R>(_mm512_mul_ps(v0, id));
                let q1 = _mm512_cvt_roundps_epi32::<R>(_mm512_mul_ps(v1, id));
                let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
                let b0 = _mm512_cvtsepi32_epi8(q0);
                let b1 = _mm512_cvtsepi32_epi8(q1);
                lo = match bi {
                    0 => _mm512_inserti32x4::<0>(lo, b0),
                    1 => _mm512_inserti32x4::<1>(lo, b0),
                    2 => _mm512_inserti32x4::<2>(lo, b0),
                    _ => _mm512_inserti32x4::<3>(lo, b0),
                };
                hi = match bi {
                    0 => _mm512_inserti32x4::<0>(hi, b1),
                    1 => _mm512_inserti32x4::<1>(hi, b1),
                    2 => _mm512_inserti32x4::<2>(hi, b1),
                    _ => _mm512_inserti32x4::<3>(hi, b1),
                };
                negs[bi] = -16 * sum;
                ds[bi] = half::f16::from_f32(d).to_f32();
                ss[bi] = half::f16::from_f32(d * sum as f32).to_f32() * 0.25;
            }
            let q = out.add(g * GROUP_QS);
            let (lo, hi) = (
                _mm512_permutexvar_epi32(idx, lo),
                _mm512_permutexvar_epi32(idx, hi),
            );
            _mm512_storeu_si512(q as *mut __m512i, lo);
            _mm512_storeu_si512(q.add(64) as *mut __m512i, hi);
            if let Some(uoff) = uoff {
                // The group's part of its unit (see `packed`): chunk c of each register to
                // chunk k of the unit's register c (low) or 4 + c (high), its scales and
                // offsets to lanes 4k..4k + 4; the last group zeroes the unit's padding.
                let k = g % 4;
                let base = out.add(uoff + g / 4 * UNIT_BYTES);
                let st = |at: usize, v: __m128i| {
                    _mm_storeu_si128(base.add(at) as *mut __m128i, v);
                };
                st(16 * k, _mm512_extracti32x4_epi32::<0>(lo));
                st(64 + 16 * k, _mm512_extracti32x4_epi32::<1>(lo));
                st(128 + 16 * k, _mm512_extracti32x4_epi32::<2>(lo));
                st(192 + 16 * k, _mm512_extracti32x4_epi32::<3>(lo));
                st(256 + 16 * k, _mm512_extracti32x4_epi32::<0>(hi));
                st(320 + 16 * k, _mm512_extracti32x4_epi32::<1>(hi));
                st(384 + 16 * k, _mm512_extracti32x4_epi32::<2>(hi));
                st(448 + 16 * k, _mm512_extracti32x4_epi32::<3>(hi));
                st(512 + 16 * k, _mm_loadu_si128(ds.as_ptr() as *const __m128i));
                st(
                    576 + 16 * k,
                    _mm_loadu_si128(negs.as_ptr() as *const __m128i),
                );
                if g + 1 == ng {
                    for kk in k + 1..4 {
                        for r in 0..10 {
                            st(64 * r + 16 * kk, _mm_setzero_si128());
                        }
                    }
                }
            }
            std::ptr::copy_nonoverlapping(
                ds.as_ptr(),
                out.add(ng * GROUP_QS + 16 * g) as *mut f32,
                4,
            );
            std::ptr::copy_nonoverlapping(
                ss.as_ptr(),
                out.add(ng * (GROUP_QS + 16) + 16 * g) as *mut f32,
                4,
            );
        }
    }
}

/// Σ x² in f64 (RMSNorm).
///
/// # Safety
/// AVX-512 F present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn sum_squares(x: &[f32]) -> f64 {
    let n = x.len();
    let p = x.as_ptr();
    let mut a0 = _mm512_setzero_pd();
    let mut a1 = _mm512_setzero_pd();
    let mut i = 0;
    // SAFETY: loads stay inside x.
    unsafe {
        while i + 16 <= n {
            let v = _mm512_loadu_ps(p.add(i));
            let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            let hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                _mm512_castps_pd(v),
            )));
            a0 = _mm512_fmadd_pd(lo, lo, a0);
            a1 = _mm512_fmadd_pd(hi, hi, a1);
            i += 16;
        }
    }
    let mut s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    while i < n {
        let v = f64::from(x[i]);
        s += v * v;
        i += 1;
    }
    s
}
