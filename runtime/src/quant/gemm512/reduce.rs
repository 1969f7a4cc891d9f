//! The horizontal sums that end every tile, bit-identical to `_mm512_reduce_add_ps`.

use std::arch::x86_64::*;

/// The horizontal sum of every register of a tile, each bit-identical to
/// `_mm512_reduce_add_ps`: tiles of eight registers or more go through [`hsum16`], sixteen
/// at a time (45 operations for sixteen sums instead of about eight each).
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn reduce_tile<const W: usize, const A: usize>(acc: &[[__m512; A]; W]) -> [[f32; A]; W] {
    let mut out = [[0.0f32; A]; W];
    if W * A < 8 {
        for i in 0..W {
            for j in 0..A {
                out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
            }
        }
        return out;
    }
    let mut k0 = 0;
    while k0 < W * A {
        let v: [__m512; 16] = std::array::from_fn(|k| {
            let k = k0 + k;
            if k < W * A {
                acc[k / A][k % A]
            } else {
                _mm512_setzero_ps()
            }
        });
        let mut s = [0.0f32; 16];
        // SAFETY: `s` holds 16 f32.
        unsafe { _mm512_storeu_ps(s.as_mut_ptr(), hsum16(&v)) };
        for k in k0..(k0 + 16).min(W * A) {
            out[k / A][k % A] = s[HSUM16_LANE[k - k0]];
        }
        k0 += 16;
    }
    out
}

/// Lane of [`hsum16`]'s result that holds the sum of register `k`.
pub(super) const HSUM16_LANE: [usize; 16] = {
    let mut t = [0usize; 16];
    let mut k = 0;
    while k < 16 {
        t[k] = 4 * (k % 4) + k / 4;
        k += 1;
    }
    t
};

/// The horizontal sums of sixteen registers at once; the sum of `v[k]` lands in lane
/// [`HSUM16_LANE`]`[k]`. Each sum is added in the tree of `_mm512_reduce_add_ps` (lane `i`
/// with `i + 8`, then `+ 4`, `+ 2`, `+ 1`), so it is bit-identical to that reduction.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn hsum16(v: &[__m512; 16]) -> __m512 {
    // Level 1: lanes i and i + 8 of two registers, as the two halves of one.
    let s1: [__m512; 8] = std::array::from_fn(|p| {
        let (x, y) = (v[2 * p], v[2 * p + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(x, y),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y),
        )
    });
    // Level 2: i and i + 4; the 128-bit chunks now hold registers 4q .. 4q + 4.
    let s2: [__m512; 4] = std::array::from_fn(|q| {
        let (x, y) = (s1[2 * q], s1[2 * q + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y),
        )
    });
    // Level 3: i and i + 2; chunk k holds register 8r + k (lanes 0, 1) and 8r + 4 + k (2, 3).
    let s3: [__m512; 2] = std::array::from_fn(|r| {
        let (x, y) = (_mm512_castps_pd(s2[2 * r]), _mm512_castps_pd(s2[2 * r + 1]));
        _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
            _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)),
        )
    });
    // Level 4: lanes 0 and 1; lane 4k + m holds register 4m + k.
    _mm512_add_ps(
        _mm512_shuffle_ps::<0b10_00_10_00>(s3[0], s3[1]),
        _mm512_shuffle_ps::<0b11_01_11_01>(s3[0], s3[1]),
    )
}
