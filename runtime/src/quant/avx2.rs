//! AVX2 + FMA + F16C kernels (x86_64): activation quantization and the int8 dot products,
//! one 32-element block per step: `vpmaddubsw` + `vpmaddwd` for the integer block dot (as
//! ggml-cpu/arch/x86/quants.c), then the block's exact integer sum is scaled and added with
//! the scalar reference's f32 operations in its order (`sumf += sumi · (d_w · d_a)`, plus
//! `m_w · s_a` for Q4_1), so the quantized dot products return the scalar tier's bits.
//! (ggml accumulates eight f32 lanes with FMA instead; on Gemma 3 that different rounding
//! alone moves the perplexity by about 1%, see docs/RUNTIME.md.)
//!
//! Every function is `unsafe`: the caller guarantees the CPU has AVX2, FMA and F16C and that
//! the weight bytes hold at least as many blocks as the activation row.

use std::arch::x86_64::*;

use half::f16;

use super::ActRow;
use super::Q8Aux;
use super::blocks::{BlockQ8_0, BlockQ8_1, QK};
use crate::GgmlType;

/// Reads a little-endian u16 at `p` (any alignment) and widens the f16 it holds.
#[inline(always)]
pub(super) unsafe fn f16_to_f32(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees two readable bytes at p.
    let bits = unsafe { std::ptr::read_unaligned(p as *const u16) };
    f16::from_bits(u16::from_le(bits)).to_f32()
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Quantizes 32 floats at `x` to `qs` with the x86 convention; returns (d, sum of q).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q8_block(x: *const f32, qs: *mut i8) -> (f32, i32) {
    // SAFETY: the caller guarantees 32 readable floats at x and 32 writable bytes at qs.
    unsafe {
        let v0 = _mm256_loadu_ps(x);
        let v1 = _mm256_loadu_ps(x.add(8));
        let v2 = _mm256_loadu_ps(x.add(16));
        let v3 = _mm256_loadu_ps(x.add(24));
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_andnot_ps(sign, v0);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v1));
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v2));
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v3));
        let m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let amax = _mm_cvtss_f32(m4);
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        const R: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let i0 = _mm256_cvtps_epi32(_mm256_round_ps::<R>(_mm256_mul_ps(v0, id)));
        let i1 = _mm256_cvtps_epi32(_mm256_round_ps::<R>(_mm256_mul_ps(v1, id)));
        let i2 = _mm256_cvtps_epi32(_mm256_round_ps::<R>(_mm256_mul_ps(v2, id)));
        let i3 = _mm256_cvtps_epi32(_mm256_round_ps::<R>(_mm256_mul_ps(v3, id)));
        let sum = hsum_epi32(_mm256_add_epi32(
            _mm256_add_epi32(i0, i1),
            _mm256_add_epi32(i2, i3),
        ));
        let a = _mm256_packs_epi32(i0, i1);
        let b = _mm256_packs_epi32(i2, i3);
        let p = _mm256_packs_epi16(a, b);
        let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(qs as *mut __m256i, p);
        (d, sum)
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        // SAFETY: xb has 32 floats, y.qs 32 bytes.
        let (d, _) = unsafe { q8_block(xb.as_ptr(), y.qs.as_mut_ptr()) };
        y.d = f16::from_f32(d);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
    for (xb, y) in x.chunks_exact(QK).zip(out.iter_mut()) {
        // SAFETY: xb has 32 floats, y.qs 32 bytes.
        let (d, sum) = unsafe { q8_block(xb.as_ptr(), y.qs.as_mut_ptr()) };
        y.d = f16::from_f32(d);
        y.s = f16::from_f32(d * sum as f32);
    }
}

/// 16 packed bytes of nibbles → 32 bytes in 0..=15 (low nibbles first, as ggml).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes at p.
    let t = unsafe { _mm_loadu_si128(p as *const __m128i) };
    let both = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Bit `i` of the little-endian u32 at `p` → byte `i` = 0xFF if set, else 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn bits_to_bytes(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees four readable bytes at p.
    let x = unsafe { std::ptr::read_unaligned(p as *const u32) };
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(x as i32),
        _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit)
}

/// The 32 five-bit quants (0..=31) of a Q5_0 or Q5_1 block whose 32 high bits are at `qh`
/// and 16 nibble bytes at `qs`.
///
/// # Safety
/// Four readable bytes at `qh`, sixteen at `qs`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q5_unsigned(qh: *const u8, qs: *const u8) -> __m256i {
    // SAFETY: caller contract.
    unsafe {
        let hb = bits_to_bytes(qh);
        _mm256_or_si256(nibbles(qs), _mm256_and_si256(hb, _mm256_set1_epi8(0x10)))
    }
}

/// The 32 quants of a Q5_0 block at `wp` as signed bytes (`q - 16`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q5_0_quants(wp: *const u8) -> __m256i {
    // SAFETY: a 22-byte block at wp (caller contract).
    unsafe {
        let hb = bits_to_bytes(wp.add(2));
        _mm256_or_si256(
            nibbles(wp.add(6)),
            _mm256_andnot_si256(hb, _mm256_set1_epi8(0xF0u8 as i8)),
        )
    }
}

/// Sum of u8 × i8 products in eight i32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn dot_us(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// Sum of i8 × i8 products in eight i32 lanes (sign moved onto the second operand).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn dot_ss(x: __m256i, y: __m256i) -> __m256i {
    dot_us(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_q8_1(w: &[u8], a: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        // SAFETY: the caller guarantees w holds a.len() blocks of 20 bytes.
        unsafe {
            let wp = w.as_ptr().add(i * 20);
            let qx = nibbles(wp.add(4));
            let qy = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let sumi = hsum_epi32(dot_us(qx, qy));
            // The scalar reference's f32 operations, in its order (no FMA).
            let dd = f16_to_f32(wp) * y.d.to_f32();
            sumf += dd * sumi as f32 + f16_to_f32(wp.add(2)) * y.s.to_f32();
        }
    }
    sumf
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_q8_0(w: &[u8], a: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0.0f32;
    for (i, y) in a.iter().enumerate() {
        // SAFETY: the caller guarantees w holds a.len() blocks of 18 bytes.
        unsafe {
            let wp = w.as_ptr().add(i * 18);
            let qx = _mm256_sub_epi8(nibbles(wp.add(2)), _mm256_set1_epi8(8));
            let qy = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let sumi = hsum_epi32(dot_ss(qx, qy));
            sumf += sumi as f32 * (f16_to_f32(wp) * y.d.to_f32());
        }
    }
    sumf
}

/// The horizontal sums of four vectors of i32, as the lanes of one (vector `k` in lane `k`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn hsum4_epi32(s: &[__m256i; 4]) -> __m128i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

/// `sumf` plus, one by one in block order, `sumi_k · (d_w,k · d_a,k)` for four consecutive
/// blocks `k` (the scalar reference's operations and order): `s[k]`'s lanes sum to block
/// `k`'s exact integer sum, the weight blocks (`bytes` each) start at `wp` with their f16
/// scale first, and `y` holds the four activation blocks. The four sums share one
/// reduction and the four products are lanes of one vector.
///
/// # Safety
/// Four weight blocks of `bytes` bytes at `wp`; `y` holds four blocks.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn add_quad(
    mut sumf: f32,
    s: &[__m256i; 4],
    wp: *const u8,
    bytes: usize,
    y: &[BlockQ8_0],
) -> f32 {
    let sumi = _mm_cvtepi32_ps(hsum4_epi32(s));
    // SAFETY: four blocks at wp (caller contract), each starting with its f16 scale.
    let wd = |k: usize| unsafe { std::ptr::read_unaligned(wp.add(k * bytes) as *const u16) } as i16;
    let ad = |k: usize| y[k].d.to_bits() as i16;
    let (w4, a4) = ([wd(0), wd(1), wd(2), wd(3)], [ad(0), ad(1), ad(2), ad(3)]);
    let dw = _mm_cvtph_ps(_mm_setr_epi16(w4[0], w4[1], w4[2], w4[3], 0, 0, 0, 0));
    let da = _mm_cvtph_ps(_mm_setr_epi16(a4[0], a4[1], a4[2], a4[3], 0, 0, 0, 0));
    let mut t = [0.0f32; 4];
    // SAFETY: four floats.
    unsafe { _mm_storeu_ps(t.as_mut_ptr(), _mm_mul_ps(sumi, _mm_mul_ps(dw, da))) };
    for v in t {
        sumf += v;
    }
    sumf
}

/// Q8_0 × Q8_0, four blocks at a time: their exact integer sums reduced together and their
/// products `sumi · (d_w · d_a)` in four lanes, then added to the row's sum one by one in
/// block order, as the scalar reference adds them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_q8_0(w: &[u8], a: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0.0f32;
    let quads = a.len() / 4;
    for j in 0..quads {
        // SAFETY: the caller guarantees w holds a.len() blocks of 34 bytes.
        unsafe {
            let wp = w.as_ptr().add(j * 4 * 34);
            let y = &a[j * 4..j * 4 + 4];
            let s = std::array::from_fn(|k| {
                let qx = _mm256_loadu_si256(wp.add(k * 34 + 2) as *const __m256i);
                let qy = _mm256_loadu_si256(y[k].qs.as_ptr() as *const __m256i);
                dot_ss(qx, qy)
            });
            sumf = add_quad(sumf, &s, wp, 34, y);
        }
    }
    for (i, y) in a.iter().enumerate().skip(quads * 4) {
        // SAFETY: the caller guarantees w holds a.len() blocks of 34 bytes.
        unsafe {
            let wp = w.as_ptr().add(i * 34);
            let qx = _mm256_loadu_si256(wp.add(2) as *const __m256i);
            let qy = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let sumi = hsum_epi32(dot_ss(qx, qy));
            sumf += sumi as f32 * (f16_to_f32(wp) * y.d.to_f32());
        }
    }
    sumf
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_f16(w: &[u8], a: &[f16]) -> f32 {
    let n = a.len();
    let wp = w.as_ptr();
    let ap = a.as_ptr() as *const u8;
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut i = 0;
    // SAFETY: the caller guarantees w holds 2 * n bytes; a holds n halves.
    unsafe {
        while i + 16 <= n {
            let w0 = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(2 * i) as *const __m128i));
            let w1 = _mm256_cvtph_ps(_mm_loadu_si128(wp.add(2 * i + 16) as *const __m128i));
            let a0 = _mm256_cvtph_ps(_mm_loadu_si128(ap.add(2 * i) as *const __m128i));
            let a1 = _mm256_cvtph_ps(_mm_loadu_si128(ap.add(2 * i + 16) as *const __m128i));
            acc0 = _mm256_fmadd_ps(w0, a0, acc0);
            acc1 = _mm256_fmadd_ps(w1, a1, acc1);
            i += 16;
        }
        let mut s = hsum_ps(_mm256_add_ps(acc0, acc1));
        while i < n {
            s += f16_to_f32(wp.add(2 * i)) * a[i].to_f32();
            i += 1;
        }
        s
    }
}

/// f32 dot over raw pointers; `n` readable floats at each.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f32_ptr(x: *const f32, y: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: the caller guarantees n readable floats at x and y.
    unsafe {
        while i + 32 <= n {
            for (k, ak) in acc.iter_mut().enumerate() {
                let o = i + 8 * k;
                *ak = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(o)), _mm256_loadu_ps(y.add(o)), *ak);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(y.add(i)), acc[0]);
            i += 8;
        }
        let mut s = hsum_ps(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ));
        while i < n {
            s += std::ptr::read_unaligned(x.add(i)) * std::ptr::read_unaligned(y.add(i));
            i += 1;
        }
        s
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: equal lengths (caller contract).
    unsafe { dot_f32_ptr(a.as_ptr(), b.as_ptr(), a.len().min(b.len())) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn axpy_f32(alpha: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let av = _mm256_set1_ps(alpha);
    let mut i = 0;
    // SAFETY: n readable floats at x and writable at y.
    unsafe {
        while i + 8 <= n {
            let yp = y.as_mut_ptr().add(i);
            let r = _mm256_fmadd_ps(av, _mm256_loadu_ps(x.as_ptr().add(i)), _mm256_loadu_ps(yp));
            _mm256_storeu_ps(yp, r);
            i += 8;
        }
    }
    for k in i..n {
        y[k] += alpha * x[k];
    }
}

/// The AVX2 kernel for a (weight type, activation) pair other than the five-bit and K-quant
/// ones (the dispatch in `quant` asks `avx2_k` first).
/// Rows per call of [`dot_rows8`].
pub(super) const ROWS8: usize = 8;

/// The horizontal sums of eight vectors of i32, as the lanes of one (vector `r` in lane `r`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum8_epi32(s: &[__m256i; ROWS8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(s[0], s[1]);
    let h23 = _mm256_hadd_epi32(s[2], s[3]);
    let h45 = _mm256_hadd_epi32(s[4], s[5]);
    let h67 = _mm256_hadd_epi32(s[6], s[7]);
    // Per 128-bit half: [Σ s0, Σ s1, Σ s2, Σ s3] of that half's lanes (then s4..s7).
    let lo = _mm256_hadd_epi32(h01, h23);
    let hi = _mm256_hadd_epi32(h45, h67);
    add_halves(lo, hi)
}

/// `[lo.low + lo.high, hi.low + hi.high]` by 128-bit halves: rows 0..4 of per-half sums in
/// `lo` and rows 4..8 in `hi` → the eight rows' totals in order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn add_halves(lo: __m256i, hi: __m256i) -> __m256i {
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(lo, hi),
        _mm256_permute2x128_si256::<0x31>(lo, hi),
    )
}

/// [`hsum8_epi32`] of eight rows' `vpmaddubsw` pair sums (16 i16 lanes each) whose sums of
/// four adjacent lanes fit an i16 (eight products of quants below 32 with Q8_0's ±127:
/// at most 31 496): two levels of i16 horizontal adds, then the widening pair add, then the
/// halves.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum8_pairs_i16(p: &[__m256i; ROWS8]) -> __m256i {
    let h01 = _mm256_hadd_epi16(p[0], p[1]);
    let h23 = _mm256_hadd_epi16(p[2], p[3]);
    let h45 = _mm256_hadd_epi16(p[4], p[5]);
    let h67 = _mm256_hadd_epi16(p[6], p[7]);
    // Per 128-bit half: two i16 per row (rows 0..4, then 4..8), then one i32 per row.
    let ones = _mm256_set1_epi16(1);
    let lo = _mm256_madd_epi16(_mm256_hadd_epi16(h01, h23), ones);
    let hi = _mm256_madd_epi16(_mm256_hadd_epi16(h45, h67), ones);
    add_halves(lo, hi)
}

/// The scales and mins of eight rows' Q4_1 block `i` (`bytes` per block: the f16 scale at
/// bytes 0..2, the min at 2..4), as two vectors of f32 lanes: one 32-bit load per row, four
/// rows' pairs widened at once, the scales and mins then parted by two shuffles and two
/// lane moves (instead of eight 16-bit inserts for each).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scale_min8(w: &[&[u8]; ROWS8], i: usize, bytes: usize) -> (__m256, __m256) {
    let dm = |r: usize| {
        // SAFETY: the caller guarantees block i of every row.
        let b = unsafe { std::ptr::read_unaligned(w[r].as_ptr().add(i * bytes) as *const u32) };
        u32::from_le(b) as i32
    };
    // Lanes [d0 m0 d1 m1 | d2 m2 d3 m3] and [d4 m4 d5 m5 | d6 m6 d7 m7].
    let a = _mm256_cvtph_ps(_mm_setr_epi32(dm(0), dm(1), dm(2), dm(3)));
    let b = _mm256_cvtph_ps(_mm_setr_epi32(dm(4), dm(5), dm(6), dm(7)));
    // [d0 d1 d4 d5 | d2 d3 d6 d7], then the middle 64-bit pairs exchanged.
    let order =
        |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)));
    let d = order(_mm256_shuffle_ps::<0b10_00_10_00>(a, b));
    let m = order(_mm256_shuffle_ps::<0b11_01_11_01>(a, b));
    (d, m)
}

/// The f16 at byte `off` of each of eight rows' block `i` (`bytes` per block), as f32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn halves8(w: &[&[u8]; ROWS8], i: usize, bytes: usize, off: usize) -> __m256 {
    let h = |r: usize| {
        // SAFETY: the caller guarantees block i of every row.
        let b =
            unsafe { std::ptr::read_unaligned(w[r].as_ptr().add(i * bytes + off) as *const u16) };
        u16::from_le(b) as i16
    };
    let v = _mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7));
    _mm256_cvtph_ps(v)
}

/// [`dot`] of eight weight rows against one activation row: each row's result is [`dot`]'s, bit
/// for bit. Q4_1 × Q8_1 and Q4_0 × Q8_0 have an eight-row kernel (the same exact integer sum
/// per block, and lane `r` takes row `r`'s f32 operations in the scalar order): the
/// activation block is loaded once for the eight rows and the eight integer sums share one
/// horizontal reduction. Other pairs run the tier's one-row kernel row by row; the caller decides which types
/// are worth sending here. Q8_0 weights stay one row at a time: their 34-byte blocks
/// make the product bound by the weight stream, which one sequential row reads faster (Gemma
/// 3's Q8_0 output matrix under AVX2: 0.8× with eight rows, prefetched or not).
///
/// # Safety
/// AVX2, FMA and F16C present; every row holds as many blocks of `ty` as `a` has.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_rows8(ty: GgmlType, w: [&[u8]; ROWS8], a: ActRow<'_>) -> [f32; ROWS8] {
    let mut sumf = _mm256_setzero_ps();
    // SAFETY: the caller guarantees the rows' blocks.
    unsafe {
        match (ty, a) {
            (GgmlType::Q4_1, ActRow::Q8_1(b)) => {
                for (i, y) in b.iter().enumerate() {
                    let qy = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
                    let s =
                        std::array::from_fn(|r| dot_us(nibbles(w[r].as_ptr().add(i * 20 + 4)), qy));
                    let sumi = _mm256_cvtepi32_ps(hsum8_epi32(&s));
                    let (dw, mw) = scale_min8(&w, i, 20);
                    let dd = _mm256_mul_ps(dw, _mm256_set1_ps(y.d.to_f32()));
                    let m = _mm256_mul_ps(mw, _mm256_set1_ps(y.s.to_f32()));
                    sumf = _mm256_add_ps(sumf, _mm256_add_ps(_mm256_mul_ps(dd, sumi), m));
                }
            }
            (GgmlType::Q4_0, ActRow::Q8_0(b)) => {
                for (i, y) in b.iter().enumerate() {
                    let qy = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
                    let s = std::array::from_fn(|r| {
                        let qx = nibbles(w[r].as_ptr().add(i * 18 + 2));
                        dot_ss(_mm256_sub_epi8(qx, _mm256_set1_epi8(8)), qy)
                    });
                    let sumi = _mm256_cvtepi32_ps(hsum8_epi32(&s));
                    let d = _mm256_mul_ps(halves8(&w, i, 18, 0), _mm256_set1_ps(y.d.to_f32()));
                    sumf = _mm256_add_ps(sumf, _mm256_mul_ps(sumi, d));
                }
            }
            // The tier's one-row kernels (`avx2_k` first: Q5_0's is there).
            _ => {
                return std::array::from_fn(|r| {
                    super::dot_unchecked(super::Tier::Avx2, ty, w[r], a)
                });
            }
        }
    }
    let mut out = [0.0f32; ROWS8];
    // SAFETY: eight floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sumf) };
    out
}

/// Panics unless every activation row of a prefill tile holds blocks up to `end`: the tiles
/// check their rows once, before their block loops.
pub(super) fn assert_rows_hold<T>(b: &[&[T]], end: usize) {
    for bk in b {
        assert!(bk.len() >= end, "activation row of {} blocks", bk.len());
    }
}

/// The f16 `h` as f32 in all eight lanes (F16C; exact, as every f16 is an f32).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn splat_f16(h: f16) -> __m256 {
    _mm256_cvtph_ps(_mm_set1_epi16(h.to_bits() as i16))
}

/// The Q4_1 part of [`dot_rows8x4`]: per block, the eight rows' nibbles unpacked and their
/// scales and mins widened once for the four activation rows; lane `r` of `sumf[k]` takes
/// `(d_w · d_a) · sumi + m_w · s_a` in block order, as the scalar reference does.
///
/// # Safety
/// As [`dot_rows8x4`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q4_1_rows8x4(w: &[&[u8]; ROWS8], b: [&[BlockQ8_1]; 4]) -> [__m256; 4] {
    let mut sumf = [_mm256_setzero_ps(); 4];
    for i in 0..b[0].len() {
        // SAFETY: block i of every row (caller contract).
        let qx: [__m256i; ROWS8] =
            std::array::from_fn(|r| unsafe { nibbles(w[r].as_ptr().add(i * 20 + 4)) });
        // SAFETY: as above.
        let (dw, mw) = unsafe { scale_min8(w, i, 20) };
        for (acc, bk) in sumf.iter_mut().zip(&b) {
            let y = &bk[i];
            // SAFETY: a Q8_1 block holds 32 quants.
            let qy = unsafe { _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i) };
            let s = std::array::from_fn(|r| _mm256_maddubs_epi16(qx[r], qy));
            let sumi = _mm256_cvtepi32_ps(hsum8_pairs_i16(&s));
            let dd = _mm256_mul_ps(dw, splat_f16(y.d));
            let m = _mm256_mul_ps(mw, splat_f16(y.s));
            *acc = _mm256_add_ps(*acc, _mm256_add_ps(_mm256_mul_ps(dd, sumi), m));
        }
    }
    sumf
}

/// The Q4_0 and Q5_0 part of [`dot_rows8x4`]: the rows unpacked a run of blocks at a time
/// ([`Unpacked8`]; the lanes add the blocks in order), the offsets from the stored entries
/// `aux`. Not inlined, so that the other arms' callers do not carry its 20 KiB frame.
///
/// # Safety
/// As [`dot_rows8x4`] (whose panics are this function's).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline(never)]
unsafe fn offset_rows8x4(
    ty: GgmlType,
    w: &[&[u8]; ROWS8],
    b: [&[BlockQ8_0]; 4],
    aux: [&[Q8Aux]; 4],
) -> [__m256; 4] {
    let mut sumf = [_mm256_setzero_ps(); 4];
    let mut un = Unpacked8::new();
    let nb = b[0].len();
    let short = aux.iter().position(|ak| ak.len() < nb);
    assert!(short.is_none(), "activation row {short:?}: few entries");
    for i0 in (0..nb).step_by(UNPACKED_BLOCKS) {
        let n = (nb - i0).min(UNPACKED_BLOCKS);
        // SAFETY: every row holds nb blocks (caller contract).
        unsafe { un.unpack(ty, w, i0, n) };
        let window = aux.map(|ak| &ak[i0..i0 + n]);
        un.accumulate(b, window, &mut sumf);
    }
    sumf
}

/// Four accumulators as the rows of the result of [`dot_rows8x4`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn rows8x4(sumf: [__m256; 4]) -> [[f32; ROWS8]; 4] {
    let mut out = [[0.0f32; ROWS8]; 4];
    for (o, acc) in out.iter_mut().zip(sumf) {
        // SAFETY: eight floats.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), acc) };
    }
    out
}

/// [`dot_rows8`] of the same eight weight rows against four activation rows (prefill): each
/// weight block is unpacked and its scales widened once for the four, and every (weight row,
/// activation row) result is [`dot`]'s, bit for bit (the same exact integer block sums, and
/// lane `r` of activation row `k`'s accumulator takes the scalar reference's f32 operations
/// in its order). Q4_1 × Q8_1, Q4_0 × Q8_0 and Q5_0 × Q8_0 (whose row-at-a-time kernel is
/// `avx2_k`'s); `None` for other pairs. `aux` are the activation rows' [`Q8Aux`] entries as
/// [`super::QuantizedActs`] stores them, read for Q4_0 and Q5_0 weights (any slices, empty
/// ones too, for Q4_1).
///
/// # Safety
/// As [`dot_rows8`]; the four activation rows have equal lengths.
///
/// # Panics
/// If Q4_0 or Q5_0 activation rows have fewer `aux` entries than blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_rows8x4(
    ty: GgmlType,
    w: [&[u8]; ROWS8],
    a: [ActRow<'_>; 4],
    aux: [&[Q8Aux]; 4],
) -> Option<[[f32; ROWS8]; 4]> {
    // SAFETY: the caller guarantees the rows' blocks.
    let sumf = unsafe {
        match (ty, a) {
            (
                GgmlType::Q4_1,
                [
                    ActRow::Q8_1(b0),
                    ActRow::Q8_1(b1),
                    ActRow::Q8_1(b2),
                    ActRow::Q8_1(b3),
                ],
            ) => q4_1_rows8x4(&w, [b0, b1, b2, b3]),
            (
                GgmlType::Q4_0 | GgmlType::Q5_0,
                [
                    ActRow::Q8_0(b0),
                    ActRow::Q8_0(b1),
                    ActRow::Q8_0(b2),
                    ActRow::Q8_0(b3),
                ],
            ) => offset_rows8x4(ty, &w, [b0, b1, b2, b3], aux),
            _ => return None,
        }
    };
    Some(rows8x4(sumf))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot(ty: GgmlType, w: &[u8], a: ActRow<'_>) -> f32 {
    // SAFETY: forwarded caller contract (features present, lengths checked).
    unsafe {
        match (ty, a) {
            (GgmlType::Q4_1, ActRow::Q8_1(b)) => q4_1_q8_1(w, b),
            (GgmlType::Q4_0, ActRow::Q8_0(b)) => q4_0_q8_0(w, b),
            (GgmlType::Q8_0, ActRow::Q8_0(b)) => q8_0_q8_0(w, b),
            (GgmlType::F16, ActRow::F16(v)) => f16_f16(w, v),
            (GgmlType::F32, ActRow::F32(v)) => {
                dot_f32_ptr(w.as_ptr() as *const f32, v.as_ptr(), v.len())
            }
            _ => super::scalar_dot(ty, w, a),
        }
    }
}

pub(in crate::quant) mod q41r;
pub(in crate::quant) mod q5r;
mod unpacked;
pub(super) use unpacked::{UNPACKED_BLOCKS, Unpacked8, transpose8x8_epi32};
#[cfg(test)]
pub(in crate::quant) mod tests;
