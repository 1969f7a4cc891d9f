//! AVX2 + FMA + F16C kernels (x86_64) for the five-bit and K-quant weights: Q5_0 and Q5_1
//! with Q8_0/Q8_1 activations, Q2_K … Q6_K with Q8_K activations, for one activation row
//! and for the four-row prefill tile (each weight block decoded once for four rows).
//!
//! Q5_0/Q5_1 follow ggml-cpu/arch/x86/quants.c: the 32 high bits spread to bytes
//! (`vpshufb` + compare) and merged into the nibbles (`avx2::q5_unsigned`, which the
//! eight-by-four prefill tile there shares; Q5_0's signed form `avx2::q5_0_quants`), then the
//! block dot as for Q4_0/Q4_1;
//! each block's exact integer sum is then scaled and added with the scalar reference's f32
//! operations in its order, so these kernels too return exactly the scalar result.
//! K-quants: each block is decoded in registers to the unsigned quants of
//! [`super::kquants::KBlock`] (8 × 32 bytes, every value ≤ 63); `vpmaddubsw` with the Q8_K
//! quants gives pairs, `vpmaddwd` with the group scales (one per 16 elements) gives exact
//! i32 sums. The offset (`off · Σ sc·bsum`) and min (`Σ mn·bsum`) terms use the activation's
//! group sums, and each block ends with the scalar reference's f32 operations, so these
//! kernels return exactly the scalar result.
//!
//! Every function is `unsafe`: the caller guarantees AVX2, FMA and F16C and that the weight
//! bytes hold as many blocks as the activation row.

#![allow(clippy::needless_range_loop)] // block index shared by weights and activation rows

use std::arch::x86_64::*;

use super::ActRow;
use super::avx2::{add_quad, f16_to_f32, q5_0_quants, q5_unsigned};
use super::blocks::{BlockQ8_0, BlockQ8_1, BlockQ8K};
use super::kquants::{block_value, scale_min_k4, scales_q3k};
use crate::GgmlType;

/// Type codes for the const-generic K kernels.
pub(super) const K2: u8 = 2;
pub(super) const K3: u8 = 3;
pub(super) const K4: u8 = 4;
pub(super) const K5: u8 = 5;
pub(super) const K6: u8 = 6;

/// The const-generic code of a K-quant type, `None` for other types.
pub(super) fn k_code(ty: GgmlType) -> Option<u8> {
    match ty {
        GgmlType::Q2K => Some(K2),
        GgmlType::Q3K => Some(K3),
        GgmlType::Q4K => Some(K4),
        GgmlType::Q5K => Some(K5),
        GgmlType::Q6K => Some(K6),
        _ => None,
    }
}

/// Bytes of one block of K type `T`.
pub(super) const fn k_bytes(t: u8) -> usize {
    match t {
        K2 => 84,
        K3 => 110,
        K4 => 144,
        K5 => 176,
        _ => 210,
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// ggml `quantize_row_q8_K_ref` (as [`super::kquants::quantize_q8k`]), eight values at a
/// time: the same largest-magnitude search (the first index holding it gives the sign), the
/// same `iscale`, the same round-half-to-even of the same f32 product and the same `d`, so
/// the blocks are the scalar quantizer's bit for bit.
///
/// # Safety
/// AVX2, FMA and F16C present; `x` holds `256 · out.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    const R: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for (xb, y) in x.chunks_exact(super::QK_K).zip(out.iter_mut()) {
        let p = xb.as_ptr();
        // SAFETY: xb holds 256 values, read 8 at a time; y.qs holds 256 bytes, written 16 at
        // a time.
        unsafe {
            let sign = _mm256_set1_ps(-0.0);
            let abs = |c: usize| _mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8 * c)));
            let mut m = _mm256_setzero_ps();
            for c in 0..32 {
                m = _mm256_max_ps(abs(c), m);
            }
            let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
            if amax == 0.0 {
                y.d = 0.0;
                y.qs = [0; super::QK_K];
                y.bsums = [0; 16];
                continue;
            }
            let va = _mm256_set1_ps(amax);
            let mut max = amax;
            for c in 0..32 {
                let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(abs(c), va));
                if hit != 0 {
                    max = xb[8 * c + hit.trailing_zeros() as usize];
                    break;
                }
            }
            let iscale = -127.0 / max;
            let vs = _mm256_set1_ps(iscale);
            let top = _mm256_set1_epi32(127);
            let q = |c: usize| {
                let v = _mm256_round_ps::<R>(_mm256_mul_ps(vs, _mm256_loadu_ps(p.add(8 * c))));
                _mm256_min_epi32(_mm256_cvtps_epi32(v), top)
            };
            for g in 0..16 {
                let (lo, hi) = (q(2 * g), q(2 * g + 1));
                // i16 lanes [lo0..3 hi0..3 | lo4..7 hi4..7] → in order, then to bytes (all
                // values lie in -127..=127, so neither pack saturates).
                let w = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0b11_01_10_00);
                let b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
                _mm_storeu_si128(y.qs.as_mut_ptr().add(16 * g) as *mut __m128i, b);
                y.bsums[g] = hsum_epi32(_mm256_add_epi32(lo, hi)) as i16;
            }
            y.d = 1.0 / iscale;
        }
    }
}

/// The 32 quants of a Q5_1 block at `wp` (0..=31).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q5_1_quants(wp: *const u8) -> __m256i {
    // SAFETY: a 24-byte block at wp (caller contract).
    unsafe { q5_unsigned(wp.add(4), wp.add(8)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_us(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// The integer sums of `R` (1 or 4) vectors of eight i32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn lane_sums<const R: usize>(p: [__m256i; R]) -> [i32; R] {
    let mut out = [0i32; R];
    if R == 4 {
        // Integer adds are exact, so the order of the pairwise reduction does not matter.
        let h01 = _mm256_hadd_epi32(p[0], p[1]);
        let h23 = _mm256_hadd_epi32(p[2], p[3]);
        let h = _mm256_hadd_epi32(h01, h23);
        let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        let mut t = [0i32; 4];
        // SAFETY: `t` holds four i32, the 16 bytes an unaligned store writes.
        unsafe { _mm_storeu_si128(t.as_mut_ptr() as *mut __m128i, s) };
        out.copy_from_slice(&t[..R]);
    } else {
        for r in 0..R {
            out[r] = hsum_epi32(p[r]);
        }
    }
    out
}

/// Q5_0 weights · Q8_0 activations for `R` rows (1 or 4): exact block sums, then the scalar
/// reference's f32 operations in its order, so the result equals the scalar tier's bits.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_0_q8_0<const R: usize>(w: &[u8], a: [&[BlockQ8_0]; R]) -> [f32; R] {
    let nb = a[0].len();
    let mut sumf = [0.0f32; R];
    for i in 0..nb {
        // SAFETY: w holds nb blocks of 22 bytes; each a[r] holds nb blocks (caller contract).
        unsafe {
            let wp = w.as_ptr().add(i * 22);
            let wd = f16_to_f32(wp);
            let qx = q5_0_quants(wp);
            let ax = _mm256_sign_epi8(qx, qx);
            let mut p = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let qy = _mm256_loadu_si256(a[r][i].qs.as_ptr() as *const __m256i);
                p[r] = dot_us(ax, _mm256_sign_epi8(qy, qx));
            }
            let s = lane_sums(p);
            for r in 0..R {
                sumf[r] += (wd * a[r][i].d.to_f32()) * s[r] as f32;
            }
        }
    }
    sumf
}

/// Q5_0 weights · one Q8_0 activation row, four blocks at a time: the four blocks' exact
/// sums in one reduction and their `(d_w · d_a) · sum` products as four lanes (each lane the
/// scalar reference's two multiplications), then added to the running sum one by one in
/// block order, so the result is the scalar tier's bits.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_q8_0_row(w: &[u8], a: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0.0f32;
    let quads = a.len() / 4;
    for j in 0..quads {
        // SAFETY: w holds a.len() blocks of 22 bytes (caller contract).
        unsafe {
            let wp = w.as_ptr().add(j * 4 * 22);
            let y = &a[j * 4..j * 4 + 4];
            let s = std::array::from_fn(|k| {
                let qx = q5_0_quants(wp.add(k * 22));
                let qy = _mm256_loadu_si256(y[k].qs.as_ptr() as *const __m256i);
                dot_us(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx))
            });
            sumf = add_quad(sumf, &s, wp, 22, y);
        }
    }
    for (i, y) in a.iter().enumerate().skip(quads * 4) {
        // SAFETY: w holds a.len() blocks of 22 bytes (caller contract).
        unsafe {
            let wp = w.as_ptr().add(i * 22);
            let qx = q5_0_quants(wp);
            let qy = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let sumi = hsum_epi32(dot_us(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx)));
            sumf += (f16_to_f32(wp) * y.d.to_f32()) * sumi as f32;
        }
    }
    sumf
}

/// Q5_1 weights · Q8_1 activations for `R` rows (1 or 4), in the scalar reference's order.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_1_q8_1<const R: usize>(w: &[u8], a: [&[BlockQ8_1]; R]) -> [f32; R] {
    let nb = a[0].len();
    let mut sumf = [0.0f32; R];
    for i in 0..nb {
        // SAFETY: w holds nb blocks of 24 bytes; each a[r] holds nb blocks (caller contract).
        unsafe {
            let wp = w.as_ptr().add(i * 24);
            let (wd, wm) = (f16_to_f32(wp), f16_to_f32(wp.add(2)));
            let qx = q5_1_quants(wp);
            let mut p = [_mm256_setzero_si256(); R];
            for r in 0..R {
                let qy = _mm256_loadu_si256(a[r][i].qs.as_ptr() as *const __m256i);
                p[r] = dot_us(qx, qy);
            }
            let s = lane_sums(p);
            for r in 0..R {
                let y = &a[r][i];
                sumf[r] += (wd * y.d.to_f32()) * s[r] as f32 + wm * y.s.to_f32();
            }
        }
    }
    sumf
}

/// One K block decoded in registers: quants of 32-element chunk `c` in `u[c]`, group scales
/// and mins (16 each), super-block scales, offset.
pub(super) struct KRegs {
    pub u: [__m256i; 8],
    pub sc: [i16; 16],
    pub mn: [i16; 16],
    pub d: f32,
    pub dmin: f32,
}

/// Whether K type `T` has group mins (Q2_K, Q4_K, Q5_K) and its quant offset.
pub(super) const fn k_min_off(t: u8) -> (bool, i32) {
    match t {
        K3 => (false, 4),
        K6 => (false, 32),
        _ => (true, 0),
    }
}

#[inline(always)]
fn twelve(p: *const u8) -> [u8; 12] {
    let mut s = [0u8; 12];
    // SAFETY: callers pass a pointer to a block's 12 scale bytes.
    unsafe { std::ptr::copy_nonoverlapping(p, s.as_mut_ptr(), 12) };
    s
}

/// 32 bytes at `p + o`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn ld32(p: *const u8, o: usize) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes at p + o.
    unsafe { _mm256_loadu_si256(p.add(o) as *const __m256i) }
}

/// The eight quant vectors of the Q4_K, Q5_K or Q6_K block at `p` ([`KRegs::u`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn quants_k<const T: u8>(p: *const u8) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0F);
    let z = _mm256_setzero_si256();
    let mut u = [z; 8];
    // SAFETY: a whole block of type T at p (caller contract); all loads lie inside it.
    unsafe {
        if T == K4 || T == K5 {
            let qs = if T == K4 { 16 } else { 48 };
            let qh = if T == K5 { ld32(p, 16) } else { z };
            let b16 = _mm256_set1_epi8(16);
            for c in 0..4 {
                let v = ld32(p, qs + 32 * c);
                let mut lo = _mm256_and_si256(v, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if T == K5 {
                    // Bit 2c of qh[l] is bit 4 of element 64c + l, bit 2c + 1 of 64c+32+l.
                    let bl = _mm256_set1_epi8((1u8 << (2 * c)) as i8);
                    let bh = _mm256_set1_epi8((2u8 << (2 * c)) as i8);
                    let hl = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bl), bl);
                    let hh = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bh), bh);
                    lo = _mm256_or_si256(lo, _mm256_and_si256(hl, b16));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(hh, b16));
                }
                u[2 * c] = lo;
                u[2 * c + 1] = hi;
            }
        } else {
            let m30 = _mm256_set1_epi8(0x30);
            for h in 0..2 {
                let l0 = ld32(p, 64 * h);
                let l1 = ld32(p, 64 * h + 32);
                let qh = ld32(p, 128 + 32 * h);
                let h0 = _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30);
                let h1 = _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30);
                let h2 = _mm256_and_si256(qh, m30);
                let h3 = _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30);
                u[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), h0);
                u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), h1);
                let l0h = _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4);
                let l1h = _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4);
                u[4 * h + 2] = _mm256_or_si256(l0h, h2);
                u[4 * h + 3] = _mm256_or_si256(l1h, h3);
            }
        }
    }
    u
}

/// Decodes the K block of type `T` at `p`, its group scales and mins into `sc` and `mn`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_k<const T: u8>(p: *const u8) -> KRegs {
    // SAFETY: forwarded caller contract.
    unsafe { unpack_k_with::<T, true>(p) }
}

/// [`unpack_k`], filling `sc` and `mn` only if `SCALES` (Q2_K and Q3_K always fill them;
/// Q4_K, Q5_K and Q6_K readers that take the scales in registers, [`k_scales`], pass false).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_k_with<const T: u8, const SCALES: bool>(p: *const u8) -> KRegs {
    let m2 = _mm256_set1_epi8(3);
    let z = _mm256_setzero_si256();
    let mut k = KRegs {
        u: [z; 8],
        sc: [0; 16],
        mn: [0; 16],
        d: 0.0,
        dmin: 0.0,
    };
    // SAFETY: a whole block of type T at p (caller contract); all loads lie inside it.
    unsafe {
        match T {
            K2 => {
                for h in 0..2 {
                    let v = ld32(p, 16 + 32 * h);
                    k.u[4 * h] = _mm256_and_si256(v, m2);
                    k.u[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 2), m2);
                    k.u[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m2);
                    k.u[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(v, 6), m2);
                }
                for g in 0..16 {
                    let s = *p.add(g);
                    k.sc[g] = i16::from(s & 0x0F);
                    k.mn[g] = i16::from(s >> 4);
                }
                k.d = f16_to_f32(p.add(80));
                k.dmin = f16_to_f32(p.add(82));
            }
            K3 => {
                let hm = ld32(p, 0);
                let one = _mm256_set1_epi8(1);
                for h in 0..2 {
                    let v = ld32(p, 32 + 32 * h);
                    let lows = [
                        v,
                        _mm256_srli_epi16(v, 2),
                        _mm256_srli_epi16(v, 4),
                        _mm256_srli_epi16(v, 6),
                    ];
                    for j in 0..4 {
                        let c = 4 * h + j;
                        let hb = match c {
                            0 => hm,
                            1 => _mm256_srli_epi16(hm, 1),
                            2 => _mm256_srli_epi16(hm, 2),
                            3 => _mm256_srli_epi16(hm, 3),
                            4 => _mm256_srli_epi16(hm, 4),
                            5 => _mm256_srli_epi16(hm, 5),
                            6 => _mm256_srli_epi16(hm, 6),
                            _ => _mm256_srli_epi16(hm, 7),
                        };
                        let hb = _mm256_slli_epi16(_mm256_and_si256(hb, one), 2);
                        k.u[c] = _mm256_or_si256(_mm256_and_si256(lows[j], m2), hb);
                    }
                }
                k.sc = scales_q3k(&twelve(p.add(96)));
                k.d = f16_to_f32(p.add(108));
            }
            K4 | K5 => {
                k.u = quants_k::<T>(p);
                if SCALES {
                    let s = twelve(p.add(4));
                    for j in 0..8 {
                        let (sc, mn) = scale_min_k4(j, &s);
                        k.sc[2 * j] = i16::from(sc);
                        k.sc[2 * j + 1] = i16::from(sc);
                        k.mn[2 * j] = i16::from(mn);
                        k.mn[2 * j + 1] = i16::from(mn);
                    }
                }
                (k.d, k.dmin) = k_d::<T>(p);
            }
            _ => {
                k.u = quants_k::<T>(p);
                if SCALES {
                    for g in 0..16 {
                        k.sc[g] = i16::from(*p.add(192 + g) as i8);
                    }
                }
                (k.d, k.dmin) = k_d::<T>(p);
            }
        }
    }
    k
}

/// Per-chunk scale vectors: i16 lanes 0..8 = scale of group 2c, 8..16 = group 2c + 1.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn chunk_scales(sc: &[i16; 16]) -> [__m256i; 8] {
    let mut v = [_mm256_setzero_si256(); 8];
    for (c, vc) in v.iter_mut().enumerate() {
        *vc = _mm256_set_m128i(_mm_set1_epi16(sc[2 * c + 1]), _mm_set1_epi16(sc[2 * c]));
    }
    v
}

/// `Σ a[g] · b[g]` over 16 i16 pairs.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn dot16(a: *const i16, b: *const i16) -> i32 {
    // SAFETY: 16 readable i16 at a and at b (caller contract).
    unsafe {
        let va = _mm256_loadu_si256(a as *const __m256i);
        let vb = _mm256_loadu_si256(b as *const __m256i);
        hsum_epi32(_mm256_madd_epi16(va, vb))
    }
}

/// The 16 group scales of a Q4_K, Q5_K or Q6_K block at `p` as i16 lanes in group order
/// (groups 0..8 in the low 128 bits, as `bsums` loads), and for Q4_K/Q5_K the 16 group mins
/// likewise (each six-bit scale and min of those types serves two groups of 16): the values
/// [`unpack_k`] writes to `sc` and `mn`, decoded in registers. Q4_K/Q5_K pack eight scales and
/// eight mins in 12 bytes; as three little-endian words `w0, w1, w2`, scales 0..4 are the low
/// six bits of `w0`'s bytes, mins 0..4 those of `w1`, and scales (mins) 4..8 take their low
/// nibble from `w2`'s low (high) nibbles and their top two bits from `w0`'s (`w1`'s) top bits.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn k_scales<const T: u8>(p: *const u8) -> (__m256i, __m256i) {
    // SAFETY: a whole block of type T at p (caller contract): Q6_K's 16 scales at 192, the
    // 12 scale bytes of Q4_K/Q5_K at 4.
    unsafe {
        if T == K6 {
            let s = _mm_loadu_si128(p.add(192) as *const __m128i);
            return (_mm256_cvtepi8_epi16(s), _mm256_setzero_si256());
        }
        let word = |o: usize| u32::from_le(std::ptr::read_unaligned(p.add(4 + o) as *const u32));
        let (w0, w1, w2) = (word(0), word(4), word(8));
        let (six, four, two) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
        let sc_hi = (w2 & four) | (((w0 >> 6) & two) << 4);
        let mn_hi = ((w2 >> 4) & four) | (((w1 >> 6) & two) << 4);
        let sc = u64::from(w0 & six) | (u64::from(sc_hi) << 32);
        let mn = u64::from(w1 & six) | (u64::from(mn_hi) << 32);
        // Eight bytes → sixteen i16, each byte twice (one value per pair of groups).
        let twice = |v: u64| {
            let b = _mm_cvtsi64_si128(v as i64);
            _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b))
        };
        (twice(sc), twice(mn))
    }
}

/// [`chunk_scales`] from the group scales in registers (as [`k_scales`] gives them): chunk
/// `c` takes group `2c`'s scale in its low eight lanes and group `2c + 1`'s in its high.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn chunk_scales_v(sc: __m256i) -> [__m256i; 8] {
    let lo = _mm256_permute2x128_si256::<0x00>(sc, sc);
    let hi = _mm256_permute2x128_si256::<0x11>(sc, sc);
    std::array::from_fn(|c| {
        // Byte pair of i16 lane `g % 8` in each 128-bit half.
        let pick = |g: usize| {
            let b = (2 * (g % 8)) as i16;
            _mm_set1_epi16(b | ((b + 1) << 8))
        };
        let idx = _mm256_set_m128i(pick(2 * c + 1), pick(2 * c));
        _mm256_shuffle_epi8(if c < 4 { lo } else { hi }, idx)
    })
}

/// The vector whose i32 lanes sum to `Σ u·q` over a K block's 256 quants, each product
/// weighted by its group's scale (`sv`, as [`chunk_scales`] lays them out), with the Q8_K
/// block `y`: exact integers.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scaled_dot(u: &[__m256i; 8], sv: &[__m256i; 8], y: &BlockQ8K) -> __m256i {
    let q = y.qs.as_ptr();
    let mut acc = _mm256_setzero_si256();
    for c in 0..8 {
        // SAFETY: `y.qs` holds 256 bytes, eight loads of 32.
        let qy = unsafe { _mm256_loadu_si256(q.add(32 * c) as *const __m256i) };
        let p = _mm256_maddubs_epi16(u[c], qy);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, sv[c]));
    }
    acc
}

/// A Q4_K, Q5_K or Q6_K block (`u`, its group scales `sc16` and mins `mn16` in registers,
/// [`k_scales`]) with the Q8_K block `y`: vectors whose lanes sum to the block's exact integer
/// sum, the offset term taken off (Q6_K's 32), and to its min term `Σ mn·bsum` (zero for Q6_K).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn k_sums<const T: u8>(
    u: &[__m256i; 8],
    sc16: __m256i,
    mn16: __m256i,
    y: &BlockQ8K,
) -> (__m256i, __m256i) {
    let (has_min, off) = k_min_off(T);
    // SAFETY: plain loads of `y`'s 256 quants and 16 group sums.
    let (mut acc, bs) = unsafe {
        (
            scaled_dot(u, &chunk_scales_v(sc16), y),
            _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i),
        )
    };
    if off != 0 {
        let o = _mm256_madd_epi16(sc16, bs);
        acc = _mm256_sub_epi32(acc, _mm256_mullo_epi32(o, _mm256_set1_epi32(off)));
    }
    let msum = if has_min {
        _mm256_madd_epi16(mn16, bs)
    } else {
        _mm256_setzero_si256()
    };
    (acc, msum)
}

/// K-quant weights of type `T` · Q8_K activations for `R` rows (1 or 4), each block decoded
/// once for all the rows. Q4_K, Q5_K and Q6_K (the types of the shipped K-quant files) take
/// their scales, mins and offset term in registers ([`k_scales`]); Q2_K and Q3_K through
/// [`unpack_k`]'s arrays. Every integer sum is exact, so both give the scalar reference's
/// bits. One row of Q4_K or Q5_K goes through [`k_row`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn k_q8k<const T: u8, const R: usize>(w: &[u8], a: [&[BlockQ8K]; R]) -> [f32; R] {
    let nb = a[0].len();
    let bb = k_bytes(T);
    let (has_min, off) = k_min_off(T);
    let mut out = [0.0f32; R];
    for i in 0..nb {
        // SAFETY: w holds nb blocks of bb bytes; each a[r] holds nb blocks (caller contract).
        unsafe {
            let p = w.as_ptr().add(i * bb);
            if matches!(T, K4 | K5 | K6) {
                let u = quants_k::<T>(p);
                let (sc16, mn16) = k_scales::<T>(p);
                let (d, dmin) = k_d::<T>(p);
                for r in 0..R {
                    let y = &a[r][i];
                    let (acc, msum) = k_sums::<T>(&u, sc16, mn16, y);
                    let (isum, msum) = (hsum_epi32(acc), hsum_epi32(msum));
                    out[r] += block_value(d, dmin, has_min, y.d, isum, msum);
                }
            } else {
                let k = unpack_k::<T>(p);
                let sv = chunk_scales(&k.sc);
                for r in 0..R {
                    let y = &a[r][i];
                    let mut isum = hsum_epi32(scaled_dot(&k.u, &sv, y));
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
    }
    out
}

/// The super-block scale and min (`d`, `dmin`; Q6_K has no min) of the Q4_K, Q5_K or Q6_K
/// block at `p`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn k_d<const T: u8>(p: *const u8) -> (f32, f32) {
    // SAFETY: a whole block of type T at p (caller contract).
    unsafe {
        if T == K6 {
            (f16_to_f32(p.add(208)), 0.0)
        } else {
            (f16_to_f32(p), f16_to_f32(p.add(2)))
        }
    }
}

/// One row of Q4_K or Q5_K · one Q8_K row (the decode's matrix-vector product): [`k_q8k`]
/// for one row, four blocks at a time. Their integer sums and min terms are reduced
/// together, their values `(d·d_a)·isum − (dmin·d_a)·msum` formed in four lanes with the
/// scalar reference's f32 operations, and added to the row's sum one by one in block order,
/// so the result is the scalar reference's bits. (Q6_K, without mins, measured no faster
/// this way than block by block: docs/PERFORMANCE.md.)
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_row<const T: u8>(w: &[u8], a: &[BlockQ8K]) -> f32 {
    const { assert!(T == K4 || T == K5) };
    let bb = k_bytes(T);
    let mut sumf = 0.0f32;
    let quads = a.len() / 4;
    for j in 0..quads {
        let y = &a[4 * j..4 * j + 4];
        let mut accs = [_mm256_setzero_si256(); 4];
        let mut mins = [_mm256_setzero_si256(); 4];
        let mut ds = [0u16; 4];
        let mut dmins = [0u16; 4];
        for k in 0..4 {
            // SAFETY: w holds a.len() blocks of bb bytes (caller contract); the scales lie
            // inside block 4j + k.
            unsafe {
                let p = w.as_ptr().add((4 * j + k) * bb);
                let (sc16, mn16) = k_scales::<T>(p);
                (accs[k], mins[k]) = k_sums::<T>(&quants_k::<T>(p), sc16, mn16, &y[k]);
                ds[k] = std::ptr::read_unaligned(p as *const u16);
                dmins[k] = std::ptr::read_unaligned(p.add(2) as *const u16);
            }
        }
        let half4 = |h: [u16; 4]| {
            let h = h.map(|v| u16::from_le(v) as i16);
            _mm_cvtph_ps(_mm_setr_epi16(h[0], h[1], h[2], h[3], 0, 0, 0, 0))
        };
        let da = _mm_setr_ps(y[0].d, y[1].d, y[2].d, y[3].d);
        let isum = _mm_cvtepi32_ps(super::avx2::hsum4_epi32(&accs));
        let msum = _mm_cvtepi32_ps(super::avx2::hsum4_epi32(&mins));
        let v = _mm_sub_ps(
            _mm_mul_ps(_mm_mul_ps(half4(ds), da), isum),
            _mm_mul_ps(_mm_mul_ps(half4(dmins), da), msum),
        );
        let mut t = [0.0f32; 4];
        // SAFETY: four floats.
        unsafe { _mm_storeu_ps(t.as_mut_ptr(), v) };
        for x in t {
            sumf += x;
        }
    }
    for (i, y) in a.iter().enumerate().skip(4 * quads) {
        // SAFETY: as above, block i.
        unsafe {
            let p = w.as_ptr().add(i * bb);
            let (sc16, mn16) = k_scales::<T>(p);
            let (acc, msum) = k_sums::<T>(&quants_k::<T>(p), sc16, mn16, y);
            let (d, dmin) = k_d::<T>(p);
            sumf += block_value(d, dmin, true, y.d, hsum_epi32(acc), hsum_epi32(msum));
        }
    }
    sumf
}

/// Runs the K kernel of `ty` for `R` rows; `None` if `ty` is not a K-quant type.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_dispatch<const R: usize>(
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

/// The AVX2 kernel for a new-format (weight, activation) pair; `None` for other pairs.
///
/// # Safety
/// AVX2, FMA and F16C present; `w` holds the row.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot(ty: GgmlType, w: &[u8], a: ActRow<'_>) -> Option<f32> {
    // SAFETY: forwarded caller contract.
    unsafe {
        match (ty, a) {
            (GgmlType::Q5_0, ActRow::Q8_0(b)) => Some(q5_0_q8_0_row(w, b)),
            (GgmlType::Q5_1, ActRow::Q8_1(b)) => Some(q5_1_q8_1::<1>(w, [b])[0]),
            (_, ActRow::Q8K(b)) => match k_code(ty)? {
                K4 => Some(k_row::<K4>(w, b)),
                K5 => Some(k_row::<K5>(w, b)),
                _ => k_dispatch::<1>(ty, w, [b]).map(|r| r[0]),
            },
            _ => None,
        }
    }
}

/// One new-format weight row with four activation rows; `None` for other pairs.
///
/// # Safety
/// As [`dot`]; the four rows have equal lengths.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot4(ty: GgmlType, w: &[u8], a: [ActRow<'_>; 4]) -> Option<[f32; 4]> {
    // SAFETY: forwarded caller contract.
    unsafe {
        match (ty, a) {
            (
                GgmlType::Q5_0,
                [
                    ActRow::Q8_0(a0),
                    ActRow::Q8_0(a1),
                    ActRow::Q8_0(a2),
                    ActRow::Q8_0(a3),
                ],
            ) => Some(q5_0_q8_0::<4>(w, [a0, a1, a2, a3])),
            (
                GgmlType::Q5_1,
                [
                    ActRow::Q8_1(a0),
                    ActRow::Q8_1(a1),
                    ActRow::Q8_1(a2),
                    ActRow::Q8_1(a3),
                ],
            ) => Some(q5_1_q8_1::<4>(w, [a0, a1, a2, a3])),
            (
                _,
                [
                    ActRow::Q8K(a0),
                    ActRow::Q8K(a1),
                    ActRow::Q8K(a2),
                    ActRow::Q8K(a3),
                ],
            ) => k_dispatch::<4>(ty, w, [a0, a1, a2, a3]),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
